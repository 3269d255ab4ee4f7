/*
 * kern_x86 — private inline building blocks for the x86 kernel files (kern_*_avx2.c,
 * kern_*_avx512.c). Not a public header: include it only from files compiled with at
 * least -mavx2 -mfma -mf16c.
 *
 * Every kernel here is written once as a "tile": NR weight rows times NC activation rows,
 * with NR and NC compile-time constants after inlining. The per-pair dot product
 * (vec_dot) is the 1x1 tile, so a pair's reduction order — which integer lanes are
 * formed, the order in which per-block floats are fused into the accumulator, and the
 * final horizontal sum — is the same whatever tile shape computes it. That is what makes
 * results bit-identical across batch sizes.
 *
 * Integer parts are exact (int8 x int8 products summed in int16 pairs, then int32), so
 * only the float steps fix the result, and those are spelled out per block.
 */
#ifndef GEMMAD_KERN_X86_H
#define GEMMAD_KERN_X86_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/kernels/quant.h"

/* Forced inlining and full unrolling of the small constant loops keep tiles in registers.
 * Sanitizer builds skip both: the instrumented, fully unrolled tiles take many minutes to
 * compile, and the arithmetic (hence every result bit) is the same without them. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KX_AI static inline
#define KX_UNROLL(n)
#else
#define KX_AI static inline __attribute__((always_inline))
#define KX_PRAGMA(x) _Pragma(#x)
#define KX_UNROLL(n) KX_PRAGMA(GCC unroll n)
#endif

/* Largest tile any kernel here is instantiated with. */
#define KX_MAXR 4
#define KX_MAXC 4

KX_AI float kx_h2f(quant_half h) {
    return _cvtsh_ss(h);
}

/* Horizontal sum of 8 floats: fixed order (high half + low half, then pairwise). */
KX_AI float kx_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

KX_AI float kx_hsum4(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 32 bytes, 0xFF where the corresponding bit of the little-endian u32 `bits` is set. */
KX_AI __m256i kx_bytes_from_bits32(uint32_t bits) {
    const __m256i idx = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                         2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), idx);
    return _mm256_cmpeq_epi8(_mm256_and_si256(b, sel), sel);
}

/* ---- activation quantization ----------------------------------------------------------- */

/* Four vectors of 8 int32 (elements 0..31 in order) to 32 int8, saturating. */
KX_AI __m256i kx_pack_i32x4(__m256i a, __m256i b, __m256i c, __m256i d) {
    __m256i ab = _mm256_packs_epi32(a, b); /* a0-3 b0-3 | a4-7 b4-7 */
    __m256i cd = _mm256_packs_epi32(c, d);
    __m256i x = _mm256_packs_epi16(ab, cd); /* a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7 */
    return _mm256_permutevar8x32_epi32(x, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* One block of 32 floats to Q8 with the reference's arithmetic (d = amax/127, multiplier
 * 127/amax, round half to even by the default MXCSR mode): the 32 bytes into *q, d returned. */
KX_AI float kx_q8_block(const float *x, __m256i *q) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 v[4];
    __m256 m = _mm256_setzero_ps();
    KX_UNROLL(8)
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        m = _mm256_max_ps(m, _mm256_and_ps(v[k], absm));
    }
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    __m256i qi[4];
    KX_UNROLL(8)
    for (int k = 0; k < 4; k++)
        qi[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], vid));
    *q = kx_pack_i32x4(qi[0], qi[1], qi[2], qi[3]);
    return amax / 127;
}

/* Q8_0 (sum 0) or Q8_1 (sum 1: also s = d * sum of the bytes), equal to
 * quant_q8_0_row_ref / quant_q8_1_row_ref byte for byte. */
KX_AI void kx_quant_q8(const float *x, void *dst, int64_t n, const int sum) {
    const size_t bs = sum ? sizeof(struct block_q8_1) : sizeof(struct block_q8_0);
    uint8_t *y = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32, y += bs) {
        __m256i q;
        const float d = kx_q8_block(x, &q);
        const quant_half hd = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        memcpy(y, &hd, 2);
        _mm256_storeu_si256((__m256i *)(y + bs - 32), q);
        if (!sum) continue;
        /* sum of the signed bytes: SAD of the biased bytes, less 32 * 128 */
        __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(q, _mm256_set1_epi8((char)0x80)),
                                      _mm256_setzero_si256());
        int64_t s4[4];
        _mm256_storeu_si256((__m256i *)s4, sad);
        const int total = (int)(s4[0] + s4[1] + s4[2] + s4[3]) - 32 * 128;
        const quant_half hs = _cvtss_sh(d * (float)total, _MM_FROUND_TO_NEAREST_INT);
        memcpy(y + 2, &hs, 2);
    }
}

KX_AI void kx_quant_q8_0(const float *x, void *dst, int64_t n) {
    kx_quant_q8(x, dst, n, 0);
}

/* Q8_K exactly as quant_q8_K_row_ref: the signed value of largest magnitude (first one on
 * ties), iscale = -127/max, round half to even, clamp at 127, bsums per 16. */
KX_AI void kx_quant_q8_K(const float *x, void *dst, int64_t n) {
    struct block_q8_K *y = dst;
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < QK_K / 8; k++)
            m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + 8 * k), absm));
        __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        float max = amax; /* the first element of that magnitude gives the sign */
        const __m256 vmax = _mm256_set1_ps(amax);
        for (int k = 0; k < QK_K / 8; k++) {
            __m256 ax = _mm256_and_ps(_mm256_loadu_ps(x + 8 * k), absm);
            int mk = _mm256_movemask_ps(_mm256_cmp_ps(ax, vmax, _CMP_EQ_OQ));
            if (mk) {
                max = x[8 * k + __builtin_ctz((unsigned)mk)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m256 vs = _mm256_set1_ps(iscale);
        const __m256i top = _mm256_set1_epi32(127);
        for (int k = 0; k < QK_K / 32; k++) {
            __m256i q[4];
            KX_UNROLL(8)
            for (int t = 0; t < 4; t++) {
                __m256 p = _mm256_mul_ps(_mm256_loadu_ps(x + 32 * k + 8 * t), vs);
                q[t] = _mm256_min_epi32(_mm256_cvtps_epi32(p), top); /* MXCSR: nearest-even */
            }
            __m256i b = kx_pack_i32x4(q[0], q[1], q[2], q[3]);
            _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * k), b);
            /* Sum of each 8 bytes via SAD on the biased values, then 16 = two of those. */
            __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(b, _mm256_set1_epi8((char)0x80)),
                                          _mm256_setzero_si256());
            int64_t s[4];
            _mm256_storeu_si256((__m256i *)s, sad);
            y[i].bsums[2 * k] = (int16_t)(s[0] + s[1] - 16 * 128);
            y[i].bsums[2 * k + 1] = (int16_t)(s[2] + s[3] - 16 * 128);
        }
        y[i].d = 1 / iscale;
    }
}

KX_AI void kx_quant_f16(const float *x, void *dst, int64_t n) {
    uint16_t *y = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

/* ---- Q4_0 / Q5_0 / Q8_0 / IQ4_NL weights x Q8_0 activations ---------------------------- */

enum kx_q8f { KX_Q4_0, KX_Q5_0, KX_Q8_0, KX_IQ4_NL };

KX_AI size_t kx_q8f_size(enum kx_q8f k) {
    return k == KX_Q4_0    ? sizeof(struct block_q4_0)
           : k == KX_Q5_0  ? sizeof(struct block_q5_0)
           : k == KX_IQ4_NL ? sizeof(struct block_iq4_nl)
                           : sizeof(struct block_q8_0);
}

/* One weight block as 32 signed int8 in element order, plus its scale. */
KX_AI __m256i kx_q8f_load(enum kx_q8f k, const uint8_t *p, float *d) {
    if (k == KX_Q8_0) {
        const struct block_q8_0 *b = (const void *)p;
        *d = kx_h2f(b->d);
        return _mm256_loadu_si256((const __m256i *)b->qs);
    }
    if (k == KX_Q4_0) {
        const struct block_q4_0 *b = (const void *)p;
        *d = kx_h2f(b->d);
        __m128i t = _mm_loadu_si128((const __m128i *)b->qs);
        __m256i v =
            _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
        return _mm256_sub_epi8(v, _mm256_set1_epi8(8));
    }
    if (k == KX_IQ4_NL) { /* the nibbles index IQ4_NL's 16 levels (-127..113: |w| <= 127) */
        const struct block_iq4_nl *b = (const void *)p;
        *d = kx_h2f(b->d);
        const __m256i lut = _mm256_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25,
                                             38, 53, 69, 89, 113, -127, -104, -83, -65, -49, -35,
                                             -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
        __m128i t = _mm_loadu_si128((const __m128i *)b->qs);
        __m256i v =
            _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
        return _mm256_shuffle_epi8(lut, v);
    }
    const struct block_q5_0 *b = (const void *)p;
    *d = kx_h2f(b->d);
    uint32_t qh;
    memcpy(&qh, b->qh, 4);
    __m128i t = _mm_loadu_si128((const __m128i *)b->qs);
    __m256i v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
    /* nibble - 16 + 16*bit  ==  nibble | (bit ? 0 : 0xF0) as int8. */
    __m256i hi = _mm256_andnot_si256(kx_bytes_from_bits32(qh), _mm256_set1_epi8((char)0xF0));
    return _mm256_or_si256(v, hi);
}

/* 8 int32 lanes of sum(w*a) over one block: |w| into the unsigned operand, w's sign onto a. */
KX_AI __m256 kx_dot_i8(__m256i wabs, __m256i w, __m256i a) {
    __m256i p16 = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(a, w));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

/* Y[c*ldy + r] = dot(weight row r, activation row c), r < NR, c < NC. */
KX_AI void kx_tile_q8f(enum kx_q8f k, const int NR, const int NC, int64_t n, const uint8_t *w,
                       size_t ws, const uint8_t *a, size_t as, float *y, size_t ldy) {
    const size_t bs = kx_q8f_size(k);
    __m256 acc[KX_MAXR][KX_MAXC];
    KX_UNROLL(8)
    for (int r = 0; r < NR; r++) {
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++)
            acc[r][c] = _mm256_setzero_ps();
    }
    for (int64_t ib = 0; ib < n / 32; ib++) {
        __m256i wv[KX_MAXR], wa[KX_MAXR];
        __m256 dw[KX_MAXR];
        KX_UNROLL(8)
        for (int r = 0; r < NR; r++) {
            float d;
            wv[r] = kx_q8f_load(k, w + (size_t)r * ws + (size_t)ib * bs, &d);
            dw[r] = _mm256_set1_ps(d);
            wa[r] = _mm256_sign_epi8(wv[r], wv[r]);
        }
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++) {
            const struct block_q8_0 *ab =
                (const void *)(a + (size_t)c * as + (size_t)ib * sizeof(struct block_q8_0));
            const __m256i av = _mm256_loadu_si256((const __m256i *)ab->qs);
            const __m256 da = _mm256_set1_ps(kx_h2f(ab->d));
            KX_UNROLL(8)
            for (int r = 0; r < NR; r++) /* the vector product is the scalar dw * da */
                acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], da), kx_dot_i8(wa[r], wv[r], av),
                                            acc[r][c]);
        }
    }
    KX_UNROLL(8)
    for (int r = 0; r < NR; r++) {
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++)
            y[(size_t)c * ldy + r] = kx_hsum8(acc[r][c]);
    }
}

/* ---- Q4_0 / Q5_0 / Q8_0, two or more activations: prepared weight blocks ----------------
 *
 * kx_tile_q8f's arithmetic, reorganised for reuse: the weight blocks of up to 16 rows are
 * unpacked once (signed bytes, their absolute values, the scale as a float) for all the
 * activations of the call, the activation scales converted once, and NR x NC tiles then
 * run the same per-block steps in the same order, so the bits equal vec_dot's. */

#define KX_BR 16 /* rows prepared at once */
#define KX_BC 8  /* activations swept per pass over the prepared rows (L1) */
#define KX_BK 32 /* blocks prepared at once (16 rows: 32 KiB) */

struct kx_wb {
    __m256i w, wabs; /* the block's 32 values as int8, and |w| */
};

/* NR x NC tile over blocks [0, nbk) of W[r * KX_BK + b] (scales Wd) and the activation
 * rows act[c] from block ib0 on (scales Ad[c * KX_BK + b]); accumulators acc[r * KX_BC + c]. */
KX_AI void kx_ptile_q8f(const int NR, const int NC, int nbk, const struct kx_wb *W,
                        const float *Wd, const struct block_q8_0 *const *act, const float *Ad,
                        int64_t ib0, __m256 *acc) {
    __m256 s[KX_MAXR][KX_MAXC];
    KX_UNROLL(8)
    for (int r = 0; r < NR; r++) {
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++)
            s[r][c] = acc[r * KX_BC + c];
    }
    for (int b = 0; b < nbk; b++) {
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++) {
            const __m256i av = _mm256_loadu_si256((const __m256i *)act[c][ib0 + b].qs);
            const __m256 da = _mm256_broadcast_ss(&Ad[c * KX_BK + b]);
            KX_UNROLL(8)
            for (int r = 0; r < NR; r++) {
                const struct kx_wb *wb = &W[r * KX_BK + b];
                s[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_broadcast_ss(&Wd[r * KX_BK + b]), da),
                                          kx_dot_i8(wb->wabs, wb->w, av), s[r][c]);
            }
        }
    }
    KX_UNROLL(8)
    for (int r = 0; r < NR; r++) {
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++)
            acc[r * KX_BC + c] = s[r][c];
    }
}

/* gemm for two or more activations, TR x TC tiles (TR divides KX_BR, TC divides KX_BC).
 * Tiles past the last row read zero rows, past the last activation a copy of it (results
 * dropped). */
KX_AI void kx_gemm_q8f_batch(enum kx_q8f k, const int TR, const int TC, int64_t n,
                             const uint8_t *w, size_t ws, int nw, const uint8_t *a, size_t as,
                             int na, float *y, int ldy) {
    const size_t bs = kx_q8f_size(k);
    const int64_t nb = n / 32;
    struct kx_wb W[KX_BR * KX_BK];
    float Wd[KX_BR * KX_BK], Ad[KX_BC * KX_BK];
    __m256 acc[KX_BR * KX_BC];
    const struct block_q8_0 *act[KX_BC];
    for (int r0 = 0; r0 < nw; r0 += KX_BR) {
        const int nr = nw - r0 < KX_BR ? nw - r0 : KX_BR;
        const int nrp = (nr + TR - 1) / TR * TR;
        for (int c0 = 0; c0 < na; c0 += KX_BC) {
            const int nc = na - c0 < KX_BC ? na - c0 : KX_BC;
            const int ncp = (nc + TC - 1) / TC * TC;
            for (int c = 0; c < ncp; c++)
                act[c] = (const void *)(a + (size_t)(c0 + (c < nc ? c : nc - 1)) * as);
            for (int i = 0; i < nrp * KX_BC; i++)
                acc[i] = _mm256_setzero_ps();
            for (int64_t ib0 = 0; ib0 < nb; ib0 += KX_BK) {
                const int nbk = (int)(nb - ib0 < KX_BK ? nb - ib0 : KX_BK);
                /* The rows are prepared once per call when they fit one chunk. */
                if (c0 == 0 || nb > KX_BK)
                    for (int r = 0; r < nrp; r++)
                        for (int b = 0; b < nbk; b++) {
                            struct kx_wb *o = &W[r * KX_BK + b];
                            if (r < nr) {
                                o->w = kx_q8f_load(
                                    k, w + (size_t)(r0 + r) * ws + (size_t)(ib0 + b) * bs,
                                    &Wd[r * KX_BK + b]);
                                o->wabs = _mm256_sign_epi8(o->w, o->w);
                            } else {
                                o->w = o->wabs = _mm256_setzero_si256();
                                Wd[r * KX_BK + b] = 0.0f;
                            }
                        }
                for (int c = 0; c < ncp; c++)
                    for (int b = 0; b < nbk; b++)
                        Ad[c * KX_BK + b] = kx_h2f(act[c][ib0 + b].d);
                for (int r = 0; r < nrp; r += TR)
                    for (int c = 0; c < ncp; c += TC)
                        kx_ptile_q8f(TR, TC, nbk, W + r * KX_BK, Wd + r * KX_BK, act + c,
                                     Ad + c * KX_BK, ib0, acc + r * KX_BC + c);
            }
            for (int c = 0; c < nc; c++)
                for (int r = 0; r < nr; r++)
                    y[(size_t)(c0 + c) * (size_t)ldy + (size_t)(r0 + r)] =
                        kx_hsum8(acc[r * KX_BC + c]);
        }
    }
}

/* ---- Q4_K / Q5_K / Q6_K weights x Q8_K activations -------------------------------------- */

enum kx_kq { KX_Q4_K, KX_Q5_K, KX_Q6_K };

KX_AI size_t kx_kq_size(enum kx_kq k) {
    return k == KX_Q4_K   ? sizeof(struct block_q4_K)
           : k == KX_Q5_K ? sizeof(struct block_q5_K)
                          : sizeof(struct block_q6_K);
}

/* pshufb controls: kx_q6_shuf[j] puts int16 scale (2j)&7 in the low 128-bit lane and
 * (2j+1)&7 in the high lane; kx_k4_shuf[j] puts int16 j in both. */
#define KX_W2(i) (char)(2 * (i)), (char)(2 * (i) + 1)
#define KX_W8(i) KX_W2(i), KX_W2(i), KX_W2(i), KX_W2(i), KX_W2(i), KX_W2(i), KX_W2(i), KX_W2(i)
static const char kx_q6_shuf[8][32] __attribute__((aligned(32))) = {
    {KX_W8(0), KX_W8(1)}, {KX_W8(2), KX_W8(3)}, {KX_W8(4), KX_W8(5)}, {KX_W8(6), KX_W8(7)},
    {KX_W8(0), KX_W8(1)}, {KX_W8(2), KX_W8(3)}, {KX_W8(4), KX_W8(5)}, {KX_W8(6), KX_W8(7)},
};
static const char kx_k4_shuf[8][32] __attribute__((aligned(32))) = {
    {KX_W8(0), KX_W8(0)}, {KX_W8(1), KX_W8(1)}, {KX_W8(2), KX_W8(2)}, {KX_W8(3), KX_W8(3)},
    {KX_W8(4), KX_W8(4)}, {KX_W8(5), KX_W8(5)}, {KX_W8(6), KX_W8(6)}, {KX_W8(7), KX_W8(7)},
};

/* 16 int16 sub-block scales (16 elements each) to the maddubs lanes of the 8 chunks of 32
 * elements: chunk j covers sub-blocks 2j (low 128-bit lane) and 2j+1 (high lane). */
KX_AI void kx_spread16(__m256i s16, __m256i sc[8]) {
    const __m256i both = _mm256_permute4x64_epi64(s16, 0x44); /* s0..7 | s0..7 */
    const __m256i bhi = _mm256_permute4x64_epi64(s16, 0xEE);  /* s8..15 | s8..15 */
    KX_UNROLL(8)
    for (int j = 0; j < 8; j++)
        sc[j] = _mm256_shuffle_epi8(j < 4 ? both : bhi,
                                    _mm256_load_si256((const __m256i *)kx_q6_shuf[j]));
}

/* One super-block unpacked: 256 unsigned values in element order (32 per vector), the
 * int16 scale of each element pair's sub-block per vector, and the correction terms. */
struct kx_kblk {
    __m256i q[8];  /* element 32j..32j+31 as uint8 (0..15, 0..31 or 0..63) */
    __m256i sc[8]; /* int16 scale for each maddubs lane of q[j] */
    __m256i sc16;  /* Q6_K: the 16 sub-block scales as int16 (offset-32 correction) */
    __m128i mins;  /* Q4_K/Q5_K: the 8 sub-block mins as int16 */
    float d, dmin;
};

/* Q4_K/Q5_K 12-byte scale block to 8 scales (low 8 bytes) and 8 mins (high 8 bytes). */
KX_AI __m128i kx_k4_scales(const uint8_t *s12) {
    uint32_t u[3], o[4];
    memcpy(u, s12, 12);
    o[0] = u[0] & 0x3f3f3f3f;
    o[1] = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
    o[2] = u[1] & 0x3f3f3f3f;
    o[3] = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
    return _mm_loadu_si128((const __m128i *)o);
}

/* Chunk j of an unpacked super-block (its unsigned values q, per-lane scales sc[j]): stored
 * in qs[j] (unpack for reuse by several activation rows) or, when fused, multiplied at once
 * into *s with activation chunk j (one row: no store). Shared with kern_lowbit_avx2.c. */
KX_AI void kx_chunk_emit(__m256i *qs, const __m256i *sc, int j, __m256i q, int fused,
                         const struct block_q8_K *ab, __m256i *s) {
    if (!fused) {
        qs[j] = q;
        return;
    }
    __m256i a = _mm256_loadu_si256((const __m256i *)(ab->qs + 32 * j));
    *s = _mm256_add_epi32(*s, _mm256_madd_epi16(_mm256_maddubs_epi16(q, a), sc[j]));
}

/* Most activations one unpacking of a K-quant super-block multiplies in the same pass
 * (kx_kq_rows_fused). */
#define KX_FUSE_NC 8

/* Chunk j of a super-block: kept in o (nf == 0), or multiplied at once with the nf
 * activation blocks ab[c] into s[c] (kx_chunk_emit's lanes for each). */
KX_AI void kx_kq_emit(struct kx_kblk *o, int j, __m256i q, int nf,
                      const struct block_q8_K *const *ab, __m256i *s) {
    if (!nf) {
        o->q[j] = q;
        return;
    }
    KX_UNROLL(8)
    for (int c = 0; c < nf; c++)
        kx_chunk_emit(o->q, o->sc, j, q, 1, ab[c], &s[c]);
}

/* Unpacks the super-block at p into o; with fused = nf > 0 activation blocks ab[0..nf) it
 * also returns, in s[c], the integer part of its product with ab[c] (kx_kq_sumi without the
 * Q6_K offset term), the same lanes. */
KX_AI void kx_kq_unpack_x(enum kx_kq k, const uint8_t *p, struct kx_kblk *o, int fused,
                          const struct block_q8_K *const *ab, __m256i *s) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    if (k == KX_Q6_K) {
        const struct block_q6_K *b = (const void *)p;
        const __m256i m3 = _mm256_set1_epi8(3);
        o->d = kx_h2f(b->d);
        o->dmin = 0.0f;
        const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        o->sc16 = s16;
        kx_spread16(s16, o->sc);
        o->mins = _mm_setzero_si128();
        KX_UNROLL(8)
        for (int h = 0; h < 2; h++) {
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
            kx_kq_emit(o, 4 * h + 0,
                       _mm256_or_si256(_mm256_and_si256(l0, m4),
                                       _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4)),
                       fused, ab, s);
            kx_kq_emit(o, 4 * h + 1,
                       _mm256_or_si256(
                           _mm256_and_si256(l1, m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m3), 4)),
                       fused, ab, s);
            kx_kq_emit(o, 4 * h + 2,
                       _mm256_or_si256(
                           _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m3), 4)),
                       fused, ab, s);
            kx_kq_emit(o, 4 * h + 3,
                       _mm256_or_si256(
                           _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m3), 4)),
                       fused, ab, s);
        }
        return;
    }
    const uint8_t *qs, *sc12;
    __m256i hb = _mm256_setzero_si256();
    if (k == KX_Q4_K) {
        const struct block_q4_K *b = (const void *)p;
        o->d = kx_h2f(b->d);
        o->dmin = kx_h2f(b->dmin);
        qs = b->qs;
        sc12 = b->scales;
    } else {
        const struct block_q5_K *b = (const void *)p;
        o->d = kx_h2f(b->d);
        o->dmin = kx_h2f(b->dmin);
        qs = b->qs;
        sc12 = b->scales;
        hb = _mm256_loadu_si256((const __m256i *)b->qh);
    }
    const __m128i sm = kx_k4_scales(sc12);
    const __m256i sm16 = _mm256_cvtepu8_epi16(sm); /* scales 0..7 | mins 0..7 */
    const __m256i s2 = _mm256_permute4x64_epi64(sm16, 0x44);
    KX_UNROLL(8)
    for (int j = 0; j < 8; j++)
        o->sc[j] = _mm256_shuffle_epi8(s2, _mm256_load_si256((const __m256i *)kx_k4_shuf[j]));
    o->sc16 = _mm256_setzero_si256();
    o->mins = _mm256_extracti128_si256(sm16, 1);
    const __m256i one = _mm256_set1_epi8(1);
    KX_UNROLL(8)
    for (int c = 0; c < 4; c++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(v, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if (k == KX_Q5_K) {
            __m256i bl = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * c), one);
            __m256i bh = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * c + 1), one);
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(bl, 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(bh, 4));
        }
        kx_kq_emit(o, 2 * c, lo, fused, ab, s);
        kx_kq_emit(o, 2 * c + 1, hi, fused, ab, s);
    }
}

KX_AI void kx_kq_unpack(enum kx_kq k, const uint8_t *p, struct kx_kblk *o) {
    kx_kq_unpack_x(k, p, o, 0, NULL, NULL);
}

/* Q6_K's offset term: the unsigned values carry +32, so take 32 * sum_j sc_j * bsum_j. */
KX_AI __m256i kx_q6_offset(__m256i s, const struct kx_kblk *wb, const struct block_q8_K *ab) {
    __m256i bs = _mm256_loadu_si256((const __m256i *)ab->bsums);
    return _mm256_sub_epi32(s, _mm256_slli_epi32(_mm256_madd_epi16(bs, wb->sc16), 5));
}

/* One row (NC == 1): unpack and multiply in one pass; same lanes as unpack + kx_kq_sumi. */
KX_AI __m256i kx_kq_fused(enum kx_kq k, const uint8_t *p, struct kx_kblk *o,
                          const struct block_q8_K *ab) {
    __m256i s = _mm256_setzero_si256();
    kx_kq_unpack_x(k, p, o, 1, &ab, &s);
    return k == KX_Q6_K ? kx_q6_offset(s, o, ab) : s;
}

/* Integer part of one (super-block, activation block) pair: 8 int32 lanes of
 * sum_j sc_j * (q_j . a_j), with Q6_K's -32 offset already taken off. */
KX_AI __m256i kx_kq_sumi(enum kx_kq k, const struct kx_kblk *wb, const struct block_q8_K *ab) {
    __m256i s = _mm256_setzero_si256();
    KX_UNROLL(8)
    for (int j = 0; j < 8; j++) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(ab->qs + 32 * j));
        __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(wb->q[j], a), wb->sc[j]);
        s = _mm256_add_epi32(s, p);
    }
    return k == KX_Q6_K ? kx_q6_offset(s, wb, ab) : s;
}

/* Q4_K/Q5_K: 4 int32 lanes of sum_j min_j * (sum of a over sub-block j). */
KX_AI __m128 kx_kq_mins(const struct kx_kblk *wb, const struct block_q8_K *ab) {
    __m256i bs = _mm256_loadu_si256((const __m256i *)ab->bsums);
    __m128i s32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    return _mm_cvtepi32_ps(_mm_madd_epi16(wb->mins, s32));
}

/* Defines the K-quant tile `fname` over an unpacked-block type BLK (UNPACK fills it, SUMI
 * gives the 8 int32 lanes of one pair, BASE(b) is its struct kx_kblk with d, dmin, mins).
 * With one activation row there is nothing to reuse, so the block is unpacked and multiplied
 * in one pass (kx_kq_fused); integer sums are exact, so the lanes are the same either way.
 * A macro so that the AVX-512 file can reuse the float steps with its own integer part. */
#define KX_DEFINE_TILE_KQ(fname, BLK, UNPACK, SUMI, BASE)                                          \
    KX_AI void fname(enum kx_kq k, const int NR, const int NC, int64_t n, const uint8_t *w,        \
                     size_t ws, const uint8_t *a, size_t as, float *y, size_t ldy) {               \
        const size_t bs = kx_kq_size(k);                                                           \
        __m256 acc[KX_MAXR][KX_MAXC];                                                              \
        __m128 accm[KX_MAXR][KX_MAXC];                                                             \
        KX_UNROLL(8)                                                                               \
        for (int r = 0; r < NR; r++) {                                                             \
            KX_UNROLL(8)                                                                           \
            for (int c = 0; c < NC; c++) {                                                         \
                acc[r][c] = _mm256_setzero_ps();                                                   \
                accm[r][c] = _mm_setzero_ps();                                                     \
            }                                                                                      \
        }                                                                                          \
        BLK wb[KX_MAXR];                                                                           \
        for (int64_t ib = 0; ib < n / QK_K; ib++) {                                                \
            if (NC > 1) {                                                                          \
                KX_UNROLL(8)                                                                       \
                for (int r = 0; r < NR; r++)                                                       \
                    UNPACK(k, w + (size_t)r * ws + (size_t)ib * bs, &wb[r]);                       \
            }                                                                                      \
            KX_UNROLL(8)                                                                           \
            for (int c = 0; c < NC; c++) {                                                         \
                const struct block_q8_K *ab =                                                      \
                    (const void *)(a + (size_t)c * as + (size_t)ib * sizeof(*ab));                 \
                KX_UNROLL(8)                                                                       \
                for (int r = 0; r < NR; r++) {                                                     \
                    __m256i si = NC > 1 ? SUMI(k, &wb[r], ab)                                      \
                                        : kx_kq_fused(k, w + (size_t)r * ws + (size_t)ib * bs,     \
                                                      &BASE(wb[r]), ab);                           \
                    acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(BASE(wb[r]).d * ab->d),             \
                                                _mm256_cvtepi32_ps(si), acc[r][c]);                \
                    if (k != KX_Q6_K)                                                              \
                        accm[r][c] = _mm_fmadd_ps(_mm_set1_ps(-ab->d * BASE(wb[r]).dmin),          \
                                                  kx_kq_mins(&BASE(wb[r]), ab), accm[r][c]);       \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        KX_UNROLL(8)                                                                               \
        for (int r = 0; r < NR; r++) {                                                             \
            KX_UNROLL(8)                                                                           \
            for (int c = 0; c < NC; c++) {                                                         \
                float m = k == KX_Q6_K ? 0.0f : kx_hsum4(accm[r][c]);                              \
                y[(size_t)c * ldy + r] =                                                           \
                    k == KX_Q6_K ? kx_hsum8(acc[r][c]) : kx_hsum8(acc[r][c]) + m;                  \
            }                                                                                      \
        }                                                                                          \
    }

#define KX_SELF(b) (b)
KX_DEFINE_TILE_KQ(kx_tile_kq, struct kx_kblk, kx_kq_unpack, kx_kq_sumi, KX_SELF)

/* Rows [0, nw) x NC (2..KX_FUSE_NC) activations: every super-block unpacked once, in
 * registers, and multiplied with the NC activation blocks in the same pass (few activations:
 * speculative checks, a few streams; preparing the super-blocks in memory for reuse costs
 * about two one-activation passes). The integer lanes and float steps are kx_tile_kq's, per
 * row and activation in the same order, so the bits are too. */
KX_AI void kx_kq_rows_fused(enum kx_kq k, const int NC, int64_t n, const uint8_t *w, size_t ws,
                            int nw, const uint8_t *a, size_t as, float *y, int ldy) {
    const size_t bs = kx_kq_size(k);
    for (int r = 0; r < nw; r++) {
        __m256 acc[KX_FUSE_NC];
        __m128 accm[KX_FUSE_NC];
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++) {
            acc[c] = _mm256_setzero_ps();
            accm[c] = _mm_setzero_ps();
        }
        for (int64_t ib = 0; ib < n / QK_K; ib++) {
            const struct block_q8_K *ab[KX_FUSE_NC];
            __m256i s[KX_FUSE_NC];
            KX_UNROLL(8)
            for (int c = 0; c < NC; c++) {
                ab[c] = (const void *)(a + (size_t)c * as + (size_t)ib * sizeof(*ab[c]));
                s[c] = _mm256_setzero_si256();
            }
            struct kx_kblk o;
            kx_kq_unpack_x(k, w + (size_t)r * ws + (size_t)ib * bs, &o, NC, ab, s);
            KX_UNROLL(8)
            for (int c = 0; c < NC; c++) {
                const __m256i si = k == KX_Q6_K ? kx_q6_offset(s[c], &o, ab[c]) : s[c];
                acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(o.d * ab[c]->d), _mm256_cvtepi32_ps(si),
                                         acc[c]);
                if (k != KX_Q6_K)
                    accm[c] = _mm_fmadd_ps(_mm_set1_ps(-ab[c]->d * o.dmin), kx_kq_mins(&o, ab[c]),
                                           accm[c]);
            }
        }
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++)
            y[(size_t)c * (size_t)ldy + (size_t)r] =
                k == KX_Q6_K ? kx_hsum8(acc[c]) : kx_hsum8(acc[c]) + kx_hsum4(accm[c]);
    }
}

/* kx_kq_rows_fused for na in 2..KX_FUSE_NC (an instance per count). */
KX_AI void kx_kq_gemm_few(enum kx_kq k, int64_t n, const void *w, size_t ws, int nw,
                          const void *a, size_t as, int na, float *y, int ldy) {
    /* clang-format off */
    switch (na) {
    case 2: kx_kq_rows_fused(k, 2, n, w, ws, nw, a, as, y, ldy); break;
    case 3: kx_kq_rows_fused(k, 3, n, w, ws, nw, a, as, y, ldy); break;
    case 4: kx_kq_rows_fused(k, 4, n, w, ws, nw, a, as, y, ldy); break;
    case 5: kx_kq_rows_fused(k, 5, n, w, ws, nw, a, as, y, ldy); break;
    case 6: kx_kq_rows_fused(k, 6, n, w, ws, nw, a, as, y, ldy); break;
    case 7: kx_kq_rows_fused(k, 7, n, w, ws, nw, a, as, y, ldy); break;
    default: kx_kq_rows_fused(k, 8, n, w, ws, nw, a, as, y, ldy); break;
    }
    /* clang-format on */
}

/* ---- F16 x F16 and BF16 x BF16 (f32 products, two accumulators per pair) ---------------- */

KX_AI __m256 kx_load8_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

KX_AI __m256 kx_load8_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

/* The scalar tail of a half-precision dot: elements [i, n) fused into s in order. */
KX_AI float kx_half_tail(int bf, float s, const uint8_t *w, const uint8_t *a, int64_t i,
                         int64_t n) {
    const uint16_t *pw = (const uint16_t *)w, *pa = (const uint16_t *)a;
    for (int64_t j = i; j < n; j++)
        s = bf ? fmaf(quant_bf16_to_f32(pw[j]), quant_bf16_to_f32(pa[j]), s)
               : fmaf(kx_h2f(pw[j]), kx_h2f(pa[j]), s);
    return s;
}

/* n elements; the vector part covers multiples of 16, a scalar tail the rest (in order). */
/* One activation: each weight row is prefetched this many bytes ahead (the kernel gets whole
 * tasks, gemm_task; as the AVX-512 twin's KZ_HALF_PF). */
#define KX_HALF_PF 4096
KX_AI void kx_tile_half(int bf, const int NR, const int NC, int64_t n, const uint8_t *w, size_t ws,
                        const uint8_t *a, size_t as, float *y, size_t ldy) {
    __m256 acc[KX_MAXR][KX_MAXC][2];
    KX_UNROLL(8)
    for (int r = 0; r < NR; r++) {
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++)
            acc[r][c][0] = acc[r][c][1] = _mm256_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 wv[KX_MAXR][2];
        if (NC == 1 && !(i & 31)) { /* one activation (decode): stream ahead of each row */
            KX_UNROLL(8)
            for (int r = 0; r < NR; r++)
                __builtin_prefetch(w + (size_t)r * ws + (size_t)i * 2 + KX_HALF_PF, 0, 3);
        }
        KX_UNROLL(8)
        for (int r = 0; r < NR; r++) {
            KX_UNROLL(8)
            for (int h = 0; h < 2; h++) {
                const uint16_t *p = (const uint16_t *)(w + (size_t)r * ws) + i + 8 * h;
                wv[r][h] = bf ? kx_load8_bf16(p) : kx_load8_f16(p);
            }
        }
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++) {
            KX_UNROLL(8)
            for (int h = 0; h < 2; h++) {
                const uint16_t *p = (const uint16_t *)(a + (size_t)c * as) + i + 8 * h;
                __m256 av = bf ? kx_load8_bf16(p) : kx_load8_f16(p);
                KX_UNROLL(8)
                for (int r = 0; r < NR; r++)
                    acc[r][c][h] = _mm256_fmadd_ps(wv[r][h], av, acc[r][c][h]);
            }
        }
    }
    KX_UNROLL(8)
    for (int r = 0; r < NR; r++) {
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++) {
            const float s = kx_hsum8(_mm256_add_ps(acc[r][c][0], acc[r][c][1]));
            y[(size_t)c * ldy + r] = kx_half_tail(bf, s, w + (size_t)r * ws,
                                                       a + (size_t)c * as, i, n);
        }
    }
}

/* ---- instantiation ------------------------------------------------------------------------ */

/* The gemm sweep below calls TILE for the shape (nr, nc); only the shapes a sweep with
 * TR1 x 1 and TR x TC tiles can produce are instantiated (compile time and code size). */
#define KX_ARGS n, w0, ws, a0, as, y0, (size_t)ldy
#define KX_USED(R, C, TR1, TR, TC)                                                                 \
    ((C) == 1 ? (R) <= (TR1) || (R) <= (TR) : (R) <= (TR) && (C) <= (TC))
#define KX_CASE(TILE, kind, R, C, TR1, TR, TC)                                                     \
    case R * 8 + C:                                                                                \
        if (KX_USED(R, C, TR1, TR, TC)) TILE(kind, R, C, KX_ARGS);                                 \
        break;
#define KX_CASES(TILE, kind, R, TR1, TR, TC)                                                       \
    KX_CASE(TILE, kind, R, 1, TR1, TR, TC)                                                         \
    KX_CASE(TILE, kind, R, 2, TR1, TR, TC)                                                         \
    KX_CASE(TILE, kind, R, 3, TR1, TR, TC)                                                         \
    KX_CASE(TILE, kind, R, 4, TR1, TR, TC)
#define KX_SWITCH(nr, nc, TILE, kind, TR1, TR, TC)                                                 \
    switch ((nr)*8 + (nc)) {                                                                       \
        KX_CASES(TILE, kind, 1, TR1, TR, TC)                                                       \
        KX_CASES(TILE, kind, 2, TR1, TR, TC)                                                       \
        KX_CASES(TILE, kind, 3, TR1, TR, TC)                                                       \
        KX_CASES(TILE, kind, 4, TR1, TR, TC)                                                       \
    default:                                                                                       \
        break;                                                                                     \
    }

/* Defines <pfx>_dot_<name> (vec_dot: the 1x1 tile) and <pfx>_gemm_<name>: a sweep of tiles
 * of TR x TC (weight rows x activation rows; TR1 x 1 when there is one activation row), edge
 * tiles in every smaller shape. Shapes are picked per kernel by measurement. Activations are
 * taken KX_GC at a time, all rows for each group, so the group stays in L1 while the rows'
 * blocks are reused. */
#define KX_GC 8
/* The gemm alone, named fname (a second row shape of a kernel whose dot KX_DEFINE made). */
#define KX_DEFINE_GEMM(fname, TILE, kind, TR1, TR, TC)                                             \
    _Static_assert((TR1) <= KX_MAXR && (TR) <= KX_MAXR && (TC) <= KX_MAXC,                         \
                   "a tile shape past KX_SWITCH's cases computes nothing");                        \
    static void fname(int64_t n, const void *w, size_t ws, int nw, const void *a, size_t as,       \
                      int na, float *y, int ldy) {                                                 \
        const uint8_t *wp = w, *ap = a;                                                            \
        const int tr = na == 1 ? (TR1) : (TR), tc = (TC);                                          \
        for (int c0 = 0; c0 < na; c0 += KX_GC) {                                                   \
            const int c1 = na - c0 < KX_GC ? na : c0 + KX_GC;                                      \
            for (int r = 0; r < nw; r += tr) {                                                     \
                const int nr = nw - r < tr ? nw - r : tr;                                          \
                for (int c = c0; c < c1; c += tc) {                                                \
                    const int nc = c1 - c < tc ? c1 - c : tc;                                      \
                    const uint8_t *w0 = wp + (size_t)r * ws, *a0 = ap + (size_t)c * as;            \
                    float *y0 = y + (size_t)c * (size_t)ldy + r;                                   \
                    KX_SWITCH(nr, nc, TILE, kind, TR1, TR, TC)                                     \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }
#define KX_DEFINE(pfx, name, TILE, kind, TR1, TR, TC)                                              \
    static float pfx##_dot_##name(int64_t n, const void *w, const void *a) {                       \
        float y;                                                                                   \
        TILE(kind, 1, 1, n, (const uint8_t *)w, 0, (const uint8_t *)a, 0, &y, 1);                  \
        return y;                                                                                  \
    }                                                                                              \
    KX_DEFINE_GEMM(pfx##_gemm_##name, TILE, kind, TR1, TR, TC)
/* Same, with the shape given as one macro that expands to "TR1, TR, TC". */
#define KX_DEFINE_S(...) KX_DEFINE(__VA_ARGS__)

#endif
