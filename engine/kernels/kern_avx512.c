/*
 * kern_avx512 — AVX-512 (F, BW, VL, DQ, VNNI) kernels for Q4_0, Q5_0, Q8_0 (two 32-element
 * blocks per 512-bit register, VNNI vpdpbusd for the int8 products) and Q4_K, Q5_K, Q6_K
 * (two 32-element chunks per register). F16/BF16 and the activation quantizers come from
 * the AVX2 table, which kern_init installs first (see kern_impl.h).
 *
 * vec_dot, the one-activation gemm, the few-activation gemm (2-8 activations: rows stream
 * from memory with prefetch, each weight pair unpacked once for all activations) and the
 * batched gemm are separate loops here (the batched ones unpack each weight block once into a
 * stack buffer and sweep it over up to KERN_GEMM_MAX_ACTS activations), but every path
 * performs the same integer lanes and the
 * same float steps per (row, activation, block) in the same order, so gemm gives vec_dot's
 * bits for every pair (tests/unit/test_kern.c checks all tile shapes). The float steps
 * (lane layout, fused scale per block pair, final sum) differ from the AVX2 kernels, so
 * AVX-512 and AVX2 results may differ in the last bits; each stays within the reference
 * bound.
 */
#include "engine/kernels/kern_impl.h"
#include "engine/kernels/kern_x86.h"

#include <stddef.h>

KX_AI float kz_hsum16(__m512 v) {
    return kx_hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

/* Tile shapes and blocking of the Q4_0/Q5_0/Q8_0 gemm (see kz_gemm_q8f). */
#ifndef KZ_TR
#define KZ_TR 4 /* weight rows per tile */
#endif
#ifndef KZ_TC
#define KZ_TC 4 /* activations per tile */
#endif
#ifndef KZ_TR1
#define KZ_TR1 4 /* weight rows at a time with one activation */
#endif
#ifndef KZ_PF_PASSES
#define KZ_PF_PASSES 2 /* one activation: prefetch distance in passes of KZ_TR1 rows */
#endif
#define KZ_GR 16 /* rows prepared at once */
#define KZ_GC 8  /* activations prepared at once */
#define KZ_KP 16 /* block pairs prepared at once (W: 32 KiB, A: 24 KiB) */
#define KZ_KP1 64 /* block pairs of the one activation prepared at once (12 KiB) */
#define KZ_MAXR 8 /* largest tile, either kind */
#define KZ_MAXC 8
_Static_assert(KZ_GR % KZ_TR == 0 && KZ_GC % KZ_TC == 0 && KZ_TR <= KZ_MAXR && KZ_TC <= KZ_MAXC &&
                   KZ_TR1 <= KZ_MAXR && KERN_GEMM_MAX_ACTS % KZ_TC == 0,
               "tiles must fit the accumulator array and divide the blocks");

/* ---- Q4_0 / Q5_0 / Q8_0 x Q8_0: two blocks per register ---------------------------------- */

/* The weights enter vpdpbusd as unsigned bytes u = q + off (Q4_0: the nibble itself, off 8;
 * Q5_0: nibble | high bit << 4, off 16; Q8_0: q ^ 0x80, off 128), so no per-pair sign
 * fix-up is needed; the offset comes back as -off * (4-byte group sums of a), the initial
 * value of the accumulator, once per activation block and shared by every weight row.
 * All of it is exact int32, so the lanes equal sum(q * a) over each 4-byte group.
 *
 * Per block pair and (row, activation) the float steps are fixed: s = the 16 int32 lanes
 * (block 0 in lanes 0-7, block 1 in 8-15), acc = fma(float(s), dw * da, acc) with dw, da
 * the two blocks' scales spread over their lanes, and kz_hsum16(acc) at the end. Every
 * path below (vec_dot, one activation, tiles over prepared blocks) performs exactly these
 * steps in this order, so they agree bit for bit. */

KX_AI int kz_q8f_off(enum kx_q8f k) {
    return k == KX_Q4_0 ? 8 : k == KX_Q5_0 ? 16 : 128;
}

/* [h0 x8 | h1 x8] as floats (fp16 -> f32 is exact); h1 = 0 when p1 is NULL. */
KX_AI __m512 kz_scales2(const void *p0, const void *p1) {
    uint16_t h0, h1 = 0;
    memcpy(&h0, p0, 2);
    if (p1) memcpy(&h1, p1, 2);
    /* one conversion of [h0, h1], then one permute spreads it (fewer shuffles than two
     * 16-bit broadcasts and an insert) */
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)h0 | (uint32_t)h1 << 16)));
    return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                                 _mm512_castps128_ps512(f));
}

/* Weight blocks ib, ib+1 (ib+1 only when `two`, else zero) as unsigned u and scales. */
KX_AI void kz_w2(enum kx_q8f k, const uint8_t *p, int two, __m512i *u, __m512 *dw) {
    const size_t bs = kx_q8f_size(k);
    *dw = kz_scales2(p, two ? p + bs : NULL);
    if (k == KX_Q8_0) {
        const __m256i lo = _mm256_loadu_si256((const __m256i *)(p + 2));
        const __m256i hi = two ? _mm256_loadu_si256((const __m256i *)(p + bs + 2))
                               : _mm256_set1_epi8((char)0x80);
        *u = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1),
                              _mm512_set1_epi8((char)0x80));
        return;
    }
    const size_t qo = k == KX_Q4_0 ? offsetof(struct block_q4_0, qs)
                                   : offsetof(struct block_q5_0, qs);
    const __m128i q0 = _mm_loadu_si128((const __m128i *)(p + qo));
    const __m128i q1 = two ? _mm_loadu_si128((const __m128i *)(p + bs + qo)) : _mm_setzero_si128();
    /* 128-bit lanes q0, q0, q1, q1; the odd lanes take the high nibbles (elements 16..31) */
    __m512i x = _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(q0), 0xFF00, q1);
    x = _mm512_mask_srli_epi16(x, 0xFF00FF00u, x, 4);
    __m512i v = _mm512_and_si512(x, _mm512_set1_epi8(0x0F));
    if (k == KX_Q5_0) {
        uint32_t h0, h1 = 0;
        memcpy(&h0, p + offsetof(struct block_q5_0, qh), 4);
        if (two) memcpy(&h1, p + bs + offsetof(struct block_q5_0, qh), 4);
        const __mmask64 hb = (__mmask64)h0 | (__mmask64)h1 << 32; /* bit i: element i */
        v = _mm512_mask_add_epi8(v, hb, v, _mm512_set1_epi8(16));
    }
    *u = v;
}

/* Activation blocks ib, ib+1 (zero past the row): bytes, -off * group sums, and scales. */
KX_AI void kz_a2(enum kx_q8f k, const struct block_q8_0 *ab, int two, __m512i *av, __m512i *neg,
                 __m512 *da) {
    const __m256i lo = _mm256_loadu_si256((const __m256i *)ab[0].qs);
    const __m256i hi = two ? _mm256_loadu_si256((const __m256i *)ab[1].qs) : _mm256_setzero_si256();
    *av = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    const __m512i s =
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)kz_q8f_off(k)), *av);
    *neg = _mm512_sub_epi32(_mm512_setzero_si512(), s);
    *da = kz_scales2(&ab[0].d, two ? &ab[1].d : NULL);
}

/* The per-pair step shared by every path. */
KX_AI __m512 kz_q8f_step(__m512 acc, __m512i u, __m512 dw, __m512i av, __m512i neg, __m512 da) {
    const __m512i s = _mm512_dpbusd_epi32(neg, u, av);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, da), acc);
}

/* One prepared weight block pair (128 bytes) and activation block pair (192 bytes). */
struct kz_wp {
    __m512i u;
    __m512 d;
};
struct kz_ap {
    __m512i a, neg;
    __m512 d;
};

/* vec_dot: the 1x1 case straight from the rows. */
KX_AI float kz_dot_q8f(enum kx_q8f k, int64_t n, const uint8_t *w, const uint8_t *a) {
    const size_t bs = kx_q8f_size(k);
    const int64_t nb = n / 32;
    const struct block_q8_0 *ab = (const void *)a;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib += 2) {
        const int two = ib + 1 < nb;
        __m512i u, av, neg;
        __m512 dw, da;
        kz_w2(k, w + (size_t)ib * bs, two, &u, &dw);
        kz_a2(k, ab + ib, two, &av, &neg, &da);
        acc = kz_q8f_step(acc, u, dw, av, neg, da);
    }
    return kz_hsum16(acc);
}

/* NR weight rows straight from memory against one prepared activation: pairs [0, np) of
 * A from block ib0, accumulators acc[0..NR). With pf > 0 every (row, pair) step also
 * prefetches the bytes pf ahead of the ones it reads (a Q8_0 pair spans 68 bytes: two
 * lines), a steady trickle spread over the pass instead of bursts. */
KX_AI void kz_rows1_q8f(enum kx_q8f k, const int NR, int64_t nb, int64_t ib0, int np,
                        const uint8_t *w, size_t ws, const struct kz_ap *A, __m512 *acc,
                        size_t pf) {
    const size_t bs = kx_q8f_size(k);
    __m512 s[KZ_MAXR];
    KX_UNROLL(8)
    for (int r = 0; r < NR; r++)
        s[r] = acc[r];
    for (int p = 0; p < np; p++) {
        const int64_t ib = ib0 + 2 * p;
        const int two = ib + 1 < nb;
        KX_UNROLL(8)
        for (int r = 0; r < NR; r++) {
            const uint8_t *wb = w + (size_t)r * ws + (size_t)ib * bs;
            if (pf) {
                __builtin_prefetch(wb + pf, 0, 3);
                if (2 * bs > 64) __builtin_prefetch(wb + pf + 64, 0, 3);
            }
            __m512i u;
            __m512 dw;
            kz_w2(k, wb, two, &u, &dw);
            s[r] = kz_q8f_step(s[r], u, dw, A[p].a, A[p].neg, A[p].d);
        }
    }
    KX_UNROLL(8)
    for (int r = 0; r < NR; r++)
        acc[r] = s[r];
}

/* NR x NC tile over prepared pairs: W[r * KZ_KP + p], A[c * KZ_KP + p], p < np;
 * accumulators acc[r * KZ_GC + c] in and out. */
KX_AI void kz_tile_q8f(const int NR, const int NC, int np, const struct kz_wp *W,
                       const struct kz_ap *A, __m512 *acc) {
    __m512 s[KZ_MAXR][KZ_MAXC];
    KX_UNROLL(8)
    for (int r = 0; r < NR; r++) {
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++)
            s[r][c] = acc[r * KZ_GC + c];
    }
    for (int p = 0; p < np; p++) {
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++) {
            const struct kz_ap *ap = &A[c * KZ_KP + p];
            KX_UNROLL(8)
            for (int r = 0; r < NR; r++) {
                const struct kz_wp *wp = &W[r * KZ_KP + p];
                s[r][c] = kz_q8f_step(s[r][c], wp->u, wp->d, ap->a, ap->neg, ap->d);
            }
        }
    }
    KX_UNROLL(8)
    for (int r = 0; r < NR; r++) {
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++)
            acc[r * KZ_GC + c] = s[r][c];
    }
}

/* Prepares pairs [0, np) from block ib0 of rows [0, nr) into W, zero rows up to nrp. */
KX_AI void kz_prep_w(enum kx_q8f k, int64_t nb, int64_t ib0, int np, const uint8_t *w, size_t ws,
                     int nr, int nrp, struct kz_wp *W) {
    const size_t bs = kx_q8f_size(k);
    for (int r = 0; r < nrp; r++)
        for (int p = 0; p < np; p++) {
            const int64_t ib = ib0 + 2 * p;
            struct kz_wp *o = &W[r * KZ_KP + p];
            if (r < nr)
                kz_w2(k, w + (size_t)r * ws + (size_t)ib * bs, ib + 1 < nb, &o->u, &o->d);
            else
                o->u = _mm512_setzero_si512(), o->d = _mm512_setzero_ps();
        }
}

/* One activation, rows of at most 2 * KZ_KP1 blocks: the activation is prepared once per
 * call and the rows stream past it KZ_TR1 at a time (each prepared pair feeds KZ_TR1 steps),
 * prefetching KZ_PF_PASSES passes ahead (kern.c hands over whole tasks, see gemm_task). */
KX_AI void kz_gemm1_q8f(enum kx_q8f k, const int NR, int64_t nb, const uint8_t *w, size_t ws,
                        int nw, const struct block_q8_0 *ab, float *y) {
    struct kz_ap A[KZ_KP1];
    const int np = (int)((nb + 1) / 2);
    for (int p = 0; p < np; p++)
        kz_a2(k, ab + 2 * p, 2 * p + 1 < nb, &A[p].a, &A[p].neg, &A[p].d);
    const size_t pf = (size_t)KZ_PF_PASSES * (size_t)NR * ws;
    int r = 0;
    for (; r + NR <= nw; r += NR) {
        __m512 acc[KZ_MAXR];
        KX_UNROLL(8)
        for (int i = 0; i < NR; i++)
            acc[i] = _mm512_setzero_ps();
        kz_rows1_q8f(k, NR, nb, 0, np, w + (size_t)r * ws, ws, A, acc, pf);
        KX_UNROLL(8)
        for (int i = 0; i < NR; i++)
            y[r + i] = kz_hsum16(acc[i]);
    }
    for (; r < nw; r++) {
        __m512 acc = _mm512_setzero_ps();
        kz_rows1_q8f(k, 1, nb, 0, np, w + (size_t)r * ws, ws, A, &acc, pf);
        y[r] = kz_hsum16(acc);
    }
}

/* 2..KZ_SC activations (decode of a few sequences), rows of at most 2 * KZ_KP1 blocks: like
 * kz_gemm1_q8f the rows stream straight from memory NR at a time with prefetch, and each
 * weight pair, unpacked once, feeds NC prepared activations. Every (row, activation) pair
 * takes the same steps in the same order as vec_dot, so the bits are the same. (The general
 * path below prepares 16-row weight blocks in memory first, which at 2-4 activations cost
 * 2.4x the one-activation time on the LM head.) */
#define KZ_SC 8
#define KZ_SC_SPLIT 16 /* up to this many activations go through it in groups of KZ_SC */
KX_AI void kz_gemmS_q8f(enum kx_q8f k, const int NR, const int NC, int64_t nb, const uint8_t *w, size_t ws,
                        int nw, const uint8_t *ap, size_t as, float *y, int ldy) {
    struct kz_ap A[KZ_SC * KZ_KP1];
    const size_t bs = kx_q8f_size(k);
    const int np = (int)((nb + 1) / 2);
    for (int c = 0; c < NC; c++)
        for (int p = 0; p < np; p++) {
            struct kz_ap *o = &A[c * KZ_KP1 + p];
            kz_a2(k, (const struct block_q8_0 *)(ap + (size_t)c * as) + 2 * p, 2 * p + 1 < nb,
                  &o->a, &o->neg, &o->d);
        }
    const size_t pf = (size_t)KZ_PF_PASSES * (size_t)NR * ws;
    for (int r0 = 0; r0 < nw; r0 += NR) {
        const int nr = nw - r0 < NR ? nw - r0 : NR;
        __m512 acc[KZ_TR1][KZ_SC];
        KX_UNROLL(8)
        for (int r = 0; r < NR; r++) {
            KX_UNROLL(8)
            for (int c = 0; c < NC; c++)
                acc[r][c] = _mm512_setzero_ps();
        }
        for (int p = 0; p < np; p++) {
            const int64_t ib = 2 * p;
            const int two = ib + 1 < nb;
            __m512i u[KZ_TR1];
            __m512 dw[KZ_TR1];
            KX_UNROLL(8)
            for (int r = 0; r < NR; r++) {
                /* rows past the end repeat the last one (their sums are never stored) */
                const uint8_t *wb = w + (size_t)(r0 + (r < nr ? r : nr - 1)) * ws + (size_t)ib * bs;
                __builtin_prefetch(wb + pf, 0, 3);
                if (2 * bs > 64) __builtin_prefetch(wb + pf + 64, 0, 3);
                kz_w2(k, wb, two, &u[r], &dw[r]);
            }
            /* activation-major: each activation's three vectors are loaded once and used by
             * the NR rows, so only NR x NC accumulators and NR weight pairs stay in registers
             * (row-major kept all NC activations live and spilled accumulators) */
            KX_UNROLL(8)
            for (int c = 0; c < NC; c++) {
                const struct kz_ap *a = &A[c * KZ_KP1 + p];
                const __m512i av = a->a, neg = a->neg;
                const __m512 da = a->d;
                KX_UNROLL(8)
                for (int r = 0; r < NR; r++)
                    acc[r][c] = kz_q8f_step(acc[r][c], u[r], dw[r], av, neg, da);
            }
        }
        for (int r = 0; r < nr; r++)
            for (int c = 0; c < NC; c++)
                y[(size_t)c * (size_t)ldy + (size_t)(r0 + r)] = kz_hsum16(acc[r][c]);
    }
}

/* kz_gemmS_q8f for na = 2..KZ_SC activations, NR rows at a time. */
KX_AI void kz_gemmS_na_q8f(enum kx_q8f k, const int NR, int na, int64_t nb, const uint8_t *w,
                           size_t ws, int nw, const uint8_t *ap, size_t as, float *y, int ldy) {
    switch (na) {
    case 2: kz_gemmS_q8f(k, NR, 2, nb, w, ws, nw, ap, as, y, ldy); break;
    case 3: kz_gemmS_q8f(k, NR, 3, nb, w, ws, nw, ap, as, y, ldy); break;
    case 4: kz_gemmS_q8f(k, NR, 4, nb, w, ws, nw, ap, as, y, ldy); break;
    case 5: kz_gemmS_q8f(k, NR, 5, nb, w, ws, nw, ap, as, y, ldy); break;
    case 6: kz_gemmS_q8f(k, NR, 6, nb, w, ws, nw, ap, as, y, ldy); break;
    case 7: kz_gemmS_q8f(k, NR, 7, nb, w, ws, nw, ap, as, y, ldy); break;
    default: kz_gemmS_q8f(k, NR, 8, nb, w, ws, nw, ap, as, y, ldy); break;
    }
}

/* Two or more activations, rows of at most 2 * KZ_KP blocks: every activation is prepared
 * once per call (up to KERN_GEMM_MAX_ACTS x KZ_KP pairs, 192 KiB of stack), every block of
 * KZ_GR rows once, and the KZ_TR x KZ_TC tiles sweep the prepared rows over the activations
 * KZ_GC at a time. kern.c hands such kernels whole tasks (gemm_task), so an activation is
 * prepared once per task instead of once per 16 rows. */
KX_AI void kz_gemm_whole_q8f(enum kx_q8f k, int64_t nb, const uint8_t *wp, size_t ws, int nw,
                             const uint8_t *ap, size_t as, int na, float *y, int ldy) {
    struct kz_wp W[KZ_GR * KZ_KP];
    struct kz_ap A[KERN_GEMM_MAX_ACTS * KZ_KP];
    __m512 acc[KZ_GR * KZ_GC];
    const int np = (int)((nb + 1) / 2);
    const int nap = (na + KZ_TC - 1) / KZ_TC * KZ_TC; /* padded with zero activations */
    for (int c = 0; c < nap; c++)
        for (int p = 0; p < np; p++) {
            struct kz_ap *o = &A[c * KZ_KP + p];
            if (c < na)
                kz_a2(k, (const struct block_q8_0 *)(ap + (size_t)c * as) + 2 * p, 2 * p + 1 < nb,
                      &o->a, &o->neg, &o->d);
            else
                o->a = o->neg = _mm512_setzero_si512(), o->d = _mm512_setzero_ps();
        }
    for (int r0 = 0; r0 < nw; r0 += KZ_GR) {
        const int nr = nw - r0 < KZ_GR ? nw - r0 : KZ_GR;
        const int nrp = (nr + KZ_TR - 1) / KZ_TR * KZ_TR; /* padded with zero rows */
        kz_prep_w(k, nb, 0, np, wp + (size_t)r0 * ws, ws, nr, nrp, W);
        for (int c0 = 0; c0 < na; c0 += KZ_GC) {
            const int nc = na - c0 < KZ_GC ? na - c0 : KZ_GC;
            const int ncp = (nc + KZ_TC - 1) / KZ_TC * KZ_TC;
            for (int i = 0; i < KZ_GR * KZ_GC; i++)
                acc[i] = _mm512_setzero_ps();
            for (int r = 0; r < nrp; r += KZ_TR)
                for (int c = 0; c < ncp; c += KZ_TC)
                    kz_tile_q8f(KZ_TR, KZ_TC, np, W + r * KZ_KP, A + (c0 + c) * KZ_KP,
                                acc + r * KZ_GC + c);
            for (int c = 0; c < nc; c++)
                for (int r = 0; r < nr; r++)
                    y[(size_t)(c0 + c) * (size_t)ldy + (size_t)(r0 + r)] =
                        kz_hsum16(acc[r * KZ_GC + c]);
        }
    }
}

/* gemm: one activation -> kz_gemm1_q8f, or for rows of more than 4096 elements KZ_GR rows
 * at a time with the activation prepared once per KZ_KP1 pairs (not tuned); more ->
 * kz_gemm_whole_q8f, or for rows of more than 1024 elements blocks of KZ_GR rows x KZ_GC
 * activations, both sides prepared once per KZ_KP pairs (zero-padded to whole tiles),
 * KZ_TR x KZ_TC tiles. */
KX_AI void kz_gemm_q8f(enum kx_q8f k, const int NR1, int64_t n, const void *w, size_t ws, int nw,
                       const void *a, size_t as, int na, float *y, int ldy) {
    const int64_t nb = n / 32;
    const uint8_t *wp = w, *ap = a;
    if (na == 1 && nb <= 2 * KZ_KP1) {
        kz_gemm1_q8f(k, NR1, nb, wp, ws, nw, (const struct block_q8_0 *)ap, y);
        return;
    }
    if (na == 1) {
        const size_t pf = (size_t)KZ_PF_PASSES * (size_t)NR1 * ws; /* rows ahead, same blocks */
        struct kz_ap A[KZ_KP1];
        __m512 acc[KZ_GR];
        for (int r0 = 0; r0 < nw; r0 += KZ_GR) {
            const int nr = nw - r0 < KZ_GR ? nw - r0 : KZ_GR;
            for (int r = 0; r < nr; r++)
                acc[r] = _mm512_setzero_ps();
            for (int64_t ib0 = 0; ib0 < nb; ib0 += 2 * KZ_KP1) {
                const int np = (int)((nb - ib0 + 1) / 2 < KZ_KP1 ? (nb - ib0 + 1) / 2 : KZ_KP1);
                for (int p = 0; p < np; p++) {
                    const int64_t ib = ib0 + 2 * p;
                    kz_a2(k, (const struct block_q8_0 *)ap + ib, ib + 1 < nb, &A[p].a, &A[p].neg,
                          &A[p].d);
                }
                const uint8_t *wr = wp + (size_t)r0 * ws;
                int r = 0;
                for (; r + NR1 <= nr; r += NR1)
                    kz_rows1_q8f(k, NR1, nb, ib0, np, wr + (size_t)r * ws, ws, A, acc + r, pf);
                for (; r < nr; r++)
                    kz_rows1_q8f(k, 1, nb, ib0, np, wr + (size_t)r * ws, ws, A, acc + r, pf);
            }
            for (int r = 0; r < nr; r++)
                y[r0 + r] = kz_hsum16(acc[r]);
        }
        return;
    }
    if (na > KZ_SC && na <= KZ_SC_SPLIT && nb <= 2 * KZ_KP1) {
        /* 9-KZ_SC_SPLIT activations: the streaming path in groups of KZ_SC (weights read once
         * per group) beat preparing 16-row blocks on every shape of the bundled model at
         * M = 16 (bench_kern --cpu: LM head 50-67 vs 73-79 ms, attn_q 0.19-0.28 vs 0.30 ms);
         * both give vec_dot's bits */
        for (int c0 = 0; c0 < na; c0 += KZ_SC) {
            const int nc = na - c0 < KZ_SC ? na - c0 : KZ_SC;
            kz_gemm_q8f(k, NR1, n, w, ws, nw, ap + (size_t)c0 * as, as, nc,
                        y + (size_t)c0 * (size_t)ldy, ldy);
        }
        return;
    }
    if (na <= KZ_SC && nb <= 2 * KZ_KP1) {
        /* NR x NC accumulators within the 32 vector registers */
        if (NR1 == 1)
            kz_gemmS_na_q8f(k, 1, na, nb, wp, ws, nw, ap, as, y, ldy);
        else if (na <= 4)
            kz_gemmS_na_q8f(k, 4, na, nb, wp, ws, nw, ap, as, y, ldy);
        else
            kz_gemmS_na_q8f(k, 2, na, nb, wp, ws, nw, ap, as, y, ldy);
        return;
    }
    if (nb <= 2 * KZ_KP && na <= KERN_GEMM_MAX_ACTS) {
        kz_gemm_whole_q8f(k, nb, wp, ws, nw, ap, as, na, y, ldy);
        return;
    }
    struct kz_wp W[KZ_GR * KZ_KP];
    struct kz_ap A[KZ_GC * KZ_KP];
    __m512 acc[KZ_GR * KZ_GC];
    /* Rows of at most KZ_KP pairs are prepared once for all activations. */
    const int whole = nb <= 2 * KZ_KP;
    for (int r0 = 0; r0 < nw; r0 += KZ_GR) {
        const int nr = nw - r0 < KZ_GR ? nw - r0 : KZ_GR;
        const int nrp = (nr + KZ_TR - 1) / KZ_TR * KZ_TR; /* padded with zero rows */
        const uint8_t *wr = wp + (size_t)r0 * ws;
        if (whole) kz_prep_w(k, nb, 0, (int)((nb + 1) / 2), wr, ws, nr, nrp, W);
        for (int c0 = 0; c0 < na; c0 += KZ_GC) {
            const int nc = na - c0 < KZ_GC ? na - c0 : KZ_GC;
            const int ncp = (nc + KZ_TC - 1) / KZ_TC * KZ_TC;
            for (int i = 0; i < KZ_GR * KZ_GC; i++)
                acc[i] = _mm512_setzero_ps();
            for (int64_t ib0 = 0; ib0 < nb; ib0 += 2 * KZ_KP) {
                const int np = (int)((nb - ib0 + 1) / 2 < KZ_KP ? (nb - ib0 + 1) / 2 : KZ_KP);
                if (!whole) kz_prep_w(k, nb, ib0, np, wr, ws, nr, nrp, W);
                for (int c = 0; c < ncp; c++)
                    for (int p = 0; p < np; p++) {
                        const int64_t ib = ib0 + 2 * p;
                        struct kz_ap *o = &A[c * KZ_KP + p];
                        if (c < nc)
                            kz_a2(k, (const struct block_q8_0 *)(ap + (size_t)(c0 + c) * as) + ib,
                                  ib + 1 < nb, &o->a, &o->neg, &o->d);
                        else
                            o->a = o->neg = _mm512_setzero_si512(), o->d = _mm512_setzero_ps();
                    }
                for (int r = 0; r < nrp; r += KZ_TR)
                    for (int c = 0; c < ncp; c += KZ_TC)
                        kz_tile_q8f(KZ_TR, KZ_TC, np, W + r * KZ_KP, A + c * KZ_KP,
                                    acc + r * KZ_GC + c);
            }
            for (int c = 0; c < nc; c++)
                for (int r = 0; r < nr; r++)
                    y[(size_t)(c0 + c) * (size_t)ldy + (size_t)(r0 + r)] =
                        kz_hsum16(acc[r * KZ_GC + c]);
        }
    }
}

/* Two instances per format: streaming KZ_TR1 rows side by side, or one row at a time
 * (kern_register_avx512_rows picks; the per-row steps, hence the bits, are the same). */
#define KZ_DEFINE_Q8F(name, kind)                                                                  \
    static float kz_dot_##name(int64_t n, const void *w, const void *a) {                          \
        return kz_dot_q8f(kind, n, w, a);                                                          \
    }                                                                                              \
    static void kz_gemm_##name(int64_t n, const void *w, size_t ws, int nw, const void *a,         \
                               size_t as, int na, float *y, int ldy) {                             \
        kz_gemm_q8f(kind, KZ_TR1, n, w, ws, nw, a, as, na, y, ldy);                                \
    }                                                                                              \
    static void kz_gemm1r_##name(int64_t n, const void *w, size_t ws, int nw, const void *a,       \
                                 size_t as, int na, float *y, int ldy) {                           \
        kz_gemm_q8f(kind, 1, n, w, ws, nw, a, as, na, y, ldy);                                     \
    }
KZ_DEFINE_Q8F(q4_0, KX_Q4_0)
KZ_DEFINE_Q8F(q5_0, KX_Q5_0)
KZ_DEFINE_Q8F(q8_0, KX_Q8_0)

/* ---- Q4_K / Q5_K / Q6_K x Q8_K: the AVX2 unpack, products two chunks at a time ------------ */

KX_AI __m512i kz_cat(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

struct kz_kblk {
    __m512i q[4], sc[4]; /* chunk pairs (2j, 2j+1) of kx_kblk */
    struct kx_kblk b;    /* the unpacked block (scalars, sc16, mins) */
};

KX_AI void kz_kq_unpack(enum kx_kq k, const uint8_t *p, struct kz_kblk *o) {
    kx_kq_unpack(k, p, &o->b);
    KX_UNROLL(8)
    for (int j = 0; j < 4; j++) {
        o->q[j] = kz_cat(o->b.q[2 * j], o->b.q[2 * j + 1]);
        o->sc[j] = kz_cat(o->b.sc[2 * j], o->b.sc[2 * j + 1]);
    }
}

KX_AI __m256i kz_kq_sumi(enum kx_kq k, const struct kz_kblk *wb, const struct block_q8_K *ab) {
    __m512i s = _mm512_setzero_si512();
    KX_UNROLL(8)
    for (int j = 0; j < 4; j++) {
        __m512i a = _mm512_loadu_si512((const void *)(ab->qs + 64 * j));
        s = _mm512_add_epi32(s, _mm512_madd_epi16(_mm512_maddubs_epi16(wb->q[j], a), wb->sc[j]));
    }
    __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
    if (k == KX_Q6_K) {
        __m256i bs = _mm256_loadu_si256((const __m256i *)ab->bsums);
        s8 = _mm256_sub_epi32(s8, _mm256_slli_epi32(_mm256_madd_epi16(bs, wb->b.sc16), 5));
    }
    return s8;
}

#define KZ_BASE(x) ((x).b)
KX_DEFINE_TILE_KQ(kz_tile_kq, struct kz_kblk, kz_kq_unpack, kz_kq_sumi, KZ_BASE)

/* ---- K-quants, two or more activations: prepared super-blocks ------------------------------
 *
 * The same integer lanes and float steps as kz_tile_kq (so the same bits as vec_dot), laid
 * out for reuse: each weight super-block is unpacked once into struct kz_kw for up to
 * KZ_KGC activations, and the pair's two float accumulators of kz_tile_kq (8 lanes of
 * scale products, 4 lanes of mins) live side by side in one 512-bit register: lanes 0-7
 * take fma(d * da, float(sumi), .), lanes 8-11 fma(-da * dmin, float(mins . bsums), .),
 * lanes 12-15 stay zero. */

/* Two blockings (the bits do not depend on them), picked with the streaming layout in
 * kern_register_avx512_rows: 4 super-blocks of 16 rows prepared at once (40 KiB) and 4 x 4
 * tiles, measured on an Intel Xeon (2 super-blocks: 10-20% slower); on AMD Zen 4 8
 * super-blocks and 2 rows x 8 activations (bench_kern --cpu --fastest, one thread, ffn_down
 * 2048 -> 640: Q6_K M = 16 / 64 0.70 / 1.97 -> 0.43 / 1.33 ms, Q4_K 0.56 / 1.85 -> 0.41 /
 * 1.37 ms). */
#define KZ_KQP_MAX 8
#define KZ_KGC 64 /* activations sharing one preparation (accumulators: 64 KiB) */
_Static_assert(KZ_GR % 4 == 0 && KZ_GR % 2 == 0 && KZ_KGC % 8 == 0 && KZ_MAXR >= 4 &&
                   KZ_MAXC >= 8,
               "tiles must fit the accumulator array and divide the blocks");

struct kz_kw {
    __m512i q[4];  /* chunk pairs (2j, 2j+1) as unsigned bytes */
    __m512i sc[4]; /* their int16 scales per maddubs lane */
    __m512 dv;     /* [d x8 | dmin x4 | 0 x4] */
    __m256i sc16;  /* Q6_K: the 16 sub-block scales as int16 */
    __m128i mins;  /* Q4_K/Q5_K: the 8 mins as int16 */
};

KX_AI void kz_kw_prep(enum kx_kq k, const uint8_t *p, struct kz_kw *o) {
    struct kz_kblk b;
    kz_kq_unpack(k, p, &b);
    KX_UNROLL(8)
    for (int j = 0; j < 4; j++) {
        o->q[j] = b.q[j];
        o->sc[j] = b.sc[j];
    }
    o->dv = _mm512_maskz_mov_ps(0x0FFF, _mm512_mask_mov_ps(_mm512_set1_ps(b.b.d), 0xFF00,
                                                          _mm512_set1_ps(b.b.dmin)));
    o->sc16 = b.b.sc16;
    o->mins = b.b.mins;
}

/* NR x NC tile over super-blocks [0, nsb) of prepared rows W[r * QP + s] and the
 * activation rows act[c] from super-block sb0 on; accumulators acc[r * KZ_KGC + c]. */
KX_AI void kz_ktile(enum kx_kq k, const int NR, const int NC, int QP, int nsb, const struct kz_kw *W,
                    const struct block_q8_K *const *act, int64_t sb0, __m512 *acc) {
    __m512 s[KZ_MAXR][KZ_MAXC];
    KX_UNROLL(8)
    for (int r = 0; r < NR; r++) {
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++)
            s[r][c] = acc[r * KZ_KGC + c];
    }
    for (int sb = 0; sb < nsb; sb++) {
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++) {
            const struct block_q8_K *ab = act[c] + sb0 + sb;
            __m512i av[4];
            KX_UNROLL(4)
            for (int j = 0; j < 4; j++)
                av[j] = _mm512_loadu_si512((const void *)(ab->qs + 64 * j));
            const __m256i bs = _mm256_loadu_si256((const __m256i *)ab->bsums);
            const __m128i bh =
                _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
            const __m512 da = _mm512_maskz_mov_ps(
                0x0FFF, _mm512_mask_mov_ps(_mm512_set1_ps(ab->d), 0xFF00, _mm512_set1_ps(-ab->d)));
            KX_UNROLL(8)
            for (int r = 0; r < NR; r++) {
                const struct kz_kw *wb = &W[r * QP + sb];
                __m512i si = _mm512_setzero_si512();
                KX_UNROLL(4)
                for (int j = 0; j < 4; j++)
                    si = _mm512_dpwssd_epi32(si, _mm512_maddubs_epi16(wb->q[j], av[j]), wb->sc[j]);
                __m256i s8 =
                    _mm256_add_epi32(_mm512_castsi512_si256(si), _mm512_extracti64x4_epi64(si, 1));
                __m512i v;
                if (k == KX_Q6_K) {
                    s8 = _mm256_sub_epi32(s8, _mm256_slli_epi32(_mm256_madd_epi16(bs, wb->sc16), 5));
                    v = _mm512_zextsi256_si512(s8);
                } else {
                    v = _mm512_inserti32x4(_mm512_zextsi256_si512(s8), _mm_madd_epi16(wb->mins, bh),
                                           2);
                }
                s[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(wb->dv, da), _mm512_cvtepi32_ps(v), s[r][c]);
            }
        }
    }
    KX_UNROLL(8)
    for (int r = 0; r < NR; r++) {
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++)
            acc[r * KZ_KGC + c] = s[r][c];
    }
}

/* gemm for two or more activations: per KZ_GR rows and KZ_KGC activations, super-blocks
 * in chunks of QP are prepared once and swept over every activation. Tiles past the
 * last row read zero rows, past the last activation a copy of it (results dropped). */
KX_AI void kz_gemm_kq_batch(enum kx_kq k, const int TR, const int TC, const int QP, int64_t n,
                            const uint8_t *w, size_t ws, int nw, const uint8_t *a, size_t as,
                            int na, float *y, int ldy) {
    const size_t bs = kx_kq_size(k);
    const int64_t nsb = n / QK_K;
    struct kz_kw W[KZ_GR * KZ_KQP_MAX];
    __m512 acc[KZ_GR * KZ_KGC];
    const struct block_q8_K *act[KZ_KGC];
    for (int c0 = 0; c0 < na; c0 += KZ_KGC) {
        const int nc = na - c0 < KZ_KGC ? na - c0 : KZ_KGC;
        const int ncp = (nc + TC - 1) / TC * TC;
        for (int c = 0; c < ncp; c++)
            act[c] = (const void *)(a + (size_t)(c0 + (c < nc ? c : nc - 1)) * as);
        for (int r0 = 0; r0 < nw; r0 += KZ_GR) {
            const int nr = nw - r0 < KZ_GR ? nw - r0 : KZ_GR;
            const int nrp = (nr + TR - 1) / TR * TR;
            for (int r = 0; r < nrp; r++)
                for (int c = 0; c < ncp; c++)
                    acc[r * KZ_KGC + c] = _mm512_setzero_ps();
            for (int64_t sb0 = 0; sb0 < nsb; sb0 += QP) {
                const int ns = (int)(nsb - sb0 < QP ? nsb - sb0 : QP);
                for (int r = 0; r < nrp; r++)
                    for (int sb = 0; sb < ns; sb++) {
                        if (r < nr)
                            kz_kw_prep(k, w + (size_t)(r0 + r) * ws + (size_t)(sb0 + sb) * bs,
                                       &W[r * QP + sb]);
                        else
                            memset(&W[r * QP + sb], 0, sizeof(W[0]));
                    }
                for (int r = 0; r < nrp; r += TR)
                    for (int c = 0; c < ncp; c += TC)
                        kz_ktile(k, TR, TC, QP, ns, W + r * QP, act + c, sb0,
                                 acc + r * KZ_KGC + c);
            }
            for (int c = 0; c < nc; c++)
                for (int r = 0; r < nr; r++) {
                    const __m512 v = acc[r * KZ_KGC + c];
                    const float main = kx_hsum8(_mm512_castps512_ps256(v));
                    y[(size_t)(c0 + c) * (size_t)ldy + (size_t)(r0 + r)] =
                        k == KX_Q6_K ? main : main + kx_hsum4(_mm512_extractf32x4_ps(v, 2));
                }
        }
    }
}

/* ---- instantiation (same scheme as kern_avx2.c) ------------------------------------------- */

/* vec_dot and one activation: kz_tile_kq (rows one at a time, unpacked and multiplied in
 * one pass); more activations: kz_gemm_kq_batch, 4 x 4 tiles over 4 super-blocks
 * (kz_gemm_*) or 2 x 8 over 8 (kz_gemm1r_*, with the one-row streaming; see KZ_KQP_MAX). */
#define KZ_GEMM_KQ(fname, name, kind, tr, tc, sb)                                                  \
    static void fname(int64_t n, const void *w, size_t ws, int nw, const void *a, size_t as,      \
                      int na, float *y, int ldy) {                                                 \
        if (na == 1)                                                                               \
            kz1_gemm_##name(n, w, ws, nw, a, as, na, y, ldy);                                      \
        else if (na <= KX_FUSE_NC) /* speculative checks, a few streams */                         \
            kx_kq_gemm_few(kind, n, w, ws, nw, a, as, na, y, ldy);                                 \
        else                                                                                       \
            kz_gemm_kq_batch(kind, tr, tc, sb, n, w, ws, nw, a, as, na, y, ldy);                   \
    }
#define KZ_DEFINE_KQ(name, kind)                                                                   \
    KX_DEFINE(kz1, name, kz_tile_kq, kind, 1, 1, 1)                                                \
    static float kz_dot_##name(int64_t n, const void *w, const void *a) {                          \
        return kz1_dot_##name(n, w, a);                                                            \
    }                                                                                              \
    KZ_GEMM_KQ(kz_gemm_##name, name, kind, 4, 4, 4)                                                \
    KZ_GEMM_KQ(kz_gemm1r_##name, name, kind, 2, 8, 8)
KZ_DEFINE_KQ(q4_K, KX_Q4_K)
KZ_DEFINE_KQ(q5_K, KX_Q5_K)
KZ_DEFINE_KQ(q6_K, KX_Q6_K)

/* ---- F16 x F16 and BF16 x BF16: kx_tile_half on 16 lanes ----------------------------------
 *
 * kx_tile_half keeps two 8-lane accumulators per pair, for elements i..i+7 and i+8..i+15 of
 * every 16; here they are the low and high halves of one 512-bit register, and the end
 * (hsum8 of low + high, then the scalar tail in order) is the same, so the bits are the
 * AVX2 kernel's (test_kern checks it) at twice the width per instruction. */

/* One activation (decode): each weight row is prefetched this many bytes ahead, and rows go
 * two at a time (KX_DEFINE's TR1 below). The F16 file of Gemma 3 270M, gemmad-cli bench
 * decode on a 2-core Xeon (AVX-512): no prefetch 27.5-28.4 tok/s; 512 / 2048 / 4096 bytes
 * ahead 29.5-30.2 / 29.5-30.9 / 30.8-31.2. Those runs had kern.c hand the kernel one row per
 * call (its prefetching driver's step, KERN_PF_STEP), so a row's 40 dependent FMAs ran alone;
 * with whole tasks (gemm_task, 2026-12-06) two rows interleave: F16 29.4-29.7 -> 36.4-36.6
 * tok/s, BF16 24.0-24.3 -> 24.7-25.0 (35.1 against F16's 38.6 on fresh copies of the files:
 * the page cache of the older BF16 copy read slower). The LM head alone (bench_kern
 * lm_head_f16, 2 threads): 18.9 -> 13.7-16.0 ms; 4 rows at a time were no faster. */
#define KZ_HALF_PF 4096

KX_AI __m512 kz_load16_half(int bf, const uint16_t *p) {
    const __m256i h = _mm256_loadu_si256((const __m256i *)p);
    return bf ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
              : _mm512_cvtph_ps(h);
}

KX_AI void kz_tile_half(int bf, const int NR, const int NC, int64_t n, const uint8_t *w, size_t ws,
                        const uint8_t *a, size_t as, float *y, size_t ldy) {
    __m512 acc[KX_MAXR][KX_MAXC];
    KX_UNROLL(8)
    for (int r = 0; r < NR; r++) {
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++)
            acc[r][c] = _mm512_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 wv[KX_MAXR];
        if (NC == 1 && !(i & 31)) { /* one activation (decode): stream ahead of each row */
            KX_UNROLL(8)
            for (int r = 0; r < NR; r++)
                __builtin_prefetch(w + (size_t)r * ws + (size_t)i * 2 + KZ_HALF_PF, 0, 3);
        }
        KX_UNROLL(8)
        for (int r = 0; r < NR; r++)
            wv[r] = kz_load16_half(bf, (const uint16_t *)(w + (size_t)r * ws) + i);
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++) {
            const __m512 av = kz_load16_half(bf, (const uint16_t *)(a + (size_t)c * as) + i);
            KX_UNROLL(8)
            for (int r = 0; r < NR; r++)
                acc[r][c] = _mm512_fmadd_ps(wv[r], av, acc[r][c]);
        }
    }
    KX_UNROLL(8)
    for (int r = 0; r < NR; r++) {
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++) {
            const float s = kx_hsum8(_mm256_add_ps(_mm512_castps512_ps256(acc[r][c]),
                                                   _mm512_extractf32x8_ps(acc[r][c], 1)));
            y[(size_t)c * ldy + r] = kx_half_tail(bf, s, w + (size_t)r * ws,
                                                       a + (size_t)c * as, i, n);
        }
    }
}

KX_DEFINE(kz, f16, kz_tile_half, 0, 2, 4, 4)
KX_DEFINE(kz, bf16, kz_tile_half, 1, 2, 4, 4)
/* With one activation, one row at a time: AMD Zen 4 (kern_stream_one_row) streams one
 * row after another far faster than two rows side by side. bench_kern --threads 2 --m 1,
 * lm_head_f16 / lm_head_bf16 (335 MB each), 3 runs alternating on a 2-core EPYC (Zen 4):
 * two rows 17.0-21.6 / 17.7-28.4 ms, one row 8.9-12.1 / 10.3-10.8 ms; 1 KiB or 8 KiB of
 * prefetch distance, or none, were no faster than 4 KiB with one row. Same bits (each row
 * has its own accumulator whatever the tile). */
KX_DEFINE_GEMM(kz_gemm1r_f16, kz_tile_half, 0, 1, 4, 4)
KX_DEFINE_GEMM(kz_gemm1r_bf16, kz_tile_half, 1, 1, 4, 4)

int kern_avx512_stream_rows(void) {
    /* Measured with bench_kern --cpu --only lm_head, one thread: on AMD Zen 4 four rows side
     * by side run the Q8_0 LM head at M = 1 in 20-23 ms and one row at a time in 8-9 ms (its
     * prefetcher follows one sequential stream, not four 680-byte-strided ones; M = 2: 21 vs
     * 11-13 ms, M = 4: 21-23 vs 17 ms); on an Intel Xeon four rows were the faster choice. */
    return kern_stream_one_row() ? 1 : KZ_TR1; /* AMD: also the 2 x 8 K-quant tiles */
}

void kern_register_avx512_rows(struct kern_ops *ops, int stream_rows) {
    const int one = stream_rows == 1;
    const struct {
        uint32_t t;
        quant_vec_dot_fn dot;
        kern_gemm_fn gemm;
    } tab[] = {
        {QT_Q4_0, kz_dot_q4_0, one ? kz_gemm1r_q4_0 : kz_gemm_q4_0},
        {QT_Q5_0, kz_dot_q5_0, one ? kz_gemm1r_q5_0 : kz_gemm_q5_0},
        {QT_Q8_0, kz_dot_q8_0, one ? kz_gemm1r_q8_0 : kz_gemm_q8_0},
        {QT_Q4_K, kz_dot_q4_K, one ? kz_gemm1r_q4_K : kz_gemm_q4_K},
        {QT_Q5_K, kz_dot_q5_K, one ? kz_gemm1r_q5_K : kz_gemm_q5_K},
        {QT_Q6_K, kz_dot_q6_K, one ? kz_gemm1r_q6_K : kz_gemm_q6_K},
        {QT_F16, kz_dot_f16, one ? kz_gemm1r_f16 : kz_gemm_f16},
        {QT_BF16, kz_dot_bf16, one ? kz_gemm1r_bf16 : kz_gemm_bf16},
    };
    for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++) {
        ops->t[tab[i].t].vec_dot = tab[i].dot;
        ops->t[tab[i].t].gemm = tab[i].gemm;
        const uint32_t t = tab[i].t;
        ops->t[t].gemm_task = t == QT_Q4_0 || t == QT_Q5_0 || t == QT_Q8_0 || t == QT_F16 ||
                              t == QT_BF16;
    }
}

void kern_register_avx512(struct kern_ops *ops) {
    kern_register_avx512_rows(ops, kern_avx512_stream_rows());
}
