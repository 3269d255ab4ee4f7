/*
 * kern_lowbit_avx2 — AVX2 + FMA + F16C dot products and gemm tiles for the formats that
 * llama-quantize falls back to, or picks, for Gemma's low-bit mixes: Q4_1 and Q5_1 (with
 * Q8_1 activations; Q5_K_M puts Q5_1 on the 640-wide rows of Gemma 3 270M), Q2_K and Q3_K
 * (with Q8_K activations). IQ4_NL runs through kern_x86.h's Q8_0 family (kern_avx2.c).
 *
 * Same scheme as kern_x86.h: each kernel is one NR x NC tile, vec_dot is the 1x1 tile, the
 * integer part of each block is exact and the float steps per block are fixed, so gemm
 * equals vec_dot bit for bit whatever the tile shape. Registered by kern_register_avx2().
 */
#include "engine/kernels/kern_impl.h"
#include "engine/kernels/kern_x86.h"

/* ---- Q4_1 / Q5_1 weights x Q8_1 activations --------------------------------------------
 * dot = sum_blocks d_w d_a (q . a) + m_w s_a, with q unsigned (0..15 or 0..31) and
 * s_a = d_a * sum(a) as Q8_1 stores it. The min terms are summed in a separate float. */

enum kl_q81 { KL_Q4_1, KL_Q5_1 };

/* One weight block as 32 unsigned bytes in element order, its scale and its min. */
KX_AI __m256i kl_q81_load(enum kl_q81 k, const uint8_t *p, float *d, float *m) {
    const struct block_q4_1 *b = (const void *)p; /* d and m lead both layouts */
    *d = kx_h2f(b->d);
    *m = kx_h2f(b->m);
    const uint8_t *qs = k == KL_Q4_1 ? b->qs : ((const struct block_q5_1 *)(const void *)p)->qs;
    __m128i t = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
    if (k == KL_Q5_1) {
        uint32_t qh;
        memcpy(&qh, ((const struct block_q5_1 *)(const void *)p)->qh, 4);
        v = _mm256_or_si256(v, _mm256_and_si256(kx_bytes_from_bits32(qh), _mm256_set1_epi8(0x10)));
    }
    return v;
}

KX_AI void kl_tile_q81(enum kl_q81 k, const int NR, const int NC, int64_t n, const uint8_t *w,
                       size_t ws, const uint8_t *a, size_t as, float *y, size_t ldy) {
    const size_t bs = k == KL_Q4_1 ? sizeof(struct block_q4_1) : sizeof(struct block_q5_1);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[KX_MAXR][KX_MAXC];
    float accm[KX_MAXR][KX_MAXC];
    KX_UNROLL(8)
    for (int r = 0; r < NR; r++) {
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++) {
            acc[r][c] = _mm256_setzero_ps();
            accm[r][c] = 0.0f;
        }
    }
    for (int64_t ib = 0; ib < n / 32; ib++) {
        __m256i wv[KX_MAXR];
        float dw[KX_MAXR], mw[KX_MAXR];
        KX_UNROLL(8)
        for (int r = 0; r < NR; r++)
            wv[r] = kl_q81_load(k, w + (size_t)r * ws + (size_t)ib * bs, &dw[r], &mw[r]);
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++) {
            const struct block_q8_1 *ab =
                (const void *)(a + (size_t)c * as + (size_t)ib * sizeof(struct block_q8_1));
            const __m256i av = _mm256_loadu_si256((const __m256i *)ab->qs);
            const float da = kx_h2f(ab->d), sa = kx_h2f(ab->s);
            KX_UNROLL(8)
            for (int r = 0; r < NR; r++) {
                __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(wv[r], av), ones);
                acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * da), _mm256_cvtepi32_ps(p),
                                            acc[r][c]);
                accm[r][c] = fmaf(mw[r], sa, accm[r][c]);
            }
        }
    }
    KX_UNROLL(8)
    for (int r = 0; r < NR; r++) {
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++)
            y[(size_t)c * ldy + r] = kx_hsum8(acc[r][c]) + accm[r][c];
    }
}

/* ---- Q2_K / Q3_K weights x Q8_K activations ----------------------------------------------
 * Both have 16 sub-blocks of 16 elements, laid out like Q6_K's: chunk j (elements 32j ..
 * 32j+31) takes its 2 low bits from byte l of qs[32 * (j / 4)] at bit 2 * (j % 4), and its
 * sub-blocks 2j, 2j+1 split at the 128-bit lane, so kx_q6_shuf spreads the scales.
 *   Q2_K: value q (0..3) * (scale & 15) - dmin/d * (scale >> 4) per sub-block.
 *   Q3_K: value q | hbit << 2 (0..7) less 4, times the 6-bit scale less 32; the -4 is taken
 *         off once per sub-block with the activation sums (bsums), as Q6_K's -32. */

enum kl_k23 { KL_Q2_K, KL_Q3_K };

struct kl_kblk {
    __m256i q[8];  /* chunk j as unsigned bytes */
    __m256i sc[8]; /* int16 scale per maddubs lane of q[j] */
    __m256i sc16;  /* Q2_K: the 16 mins; Q3_K: the 16 signed scales (offset term) */
    float d, dmin;
};

/* Q3_K's 16 six-bit scales from their 12 bytes (ggml's layout), less 32, as int16. */
KX_AI __m256i kl_q3_scales(const uint8_t *p) {
    uint32_t u[3], o[4];
    memcpy(u, p, 12);
    const uint32_t m2 = 0x0f0f0f0f, m1 = 0x03030303;
    o[0] = (u[0] & m2) | ((u[2] & m1) << 4);
    o[1] = (u[1] & m2) | (((u[2] >> 2) & m1) << 4);
    o[2] = ((u[0] >> 4) & m2) | (((u[2] >> 4) & m1) << 4);
    o[3] = ((u[1] >> 4) & m2) | (((u[2] >> 6) & m1) << 4);
    __m256i s = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)o));
    return _mm256_sub_epi16(s, _mm256_set1_epi16(32));
}

/* Unpacks the super-block at p into o; with `fused` (one activation row) it multiplies each
 * chunk at once into *s instead (kx_chunk_emit), the same lanes as kl_k23_sumi's. */
KX_AI void kl_k23_unpack_x(enum kl_k23 k, const uint8_t *p, struct kl_kblk *o, int fused,
                           const struct block_q8_K *ab, __m256i *s) {
    const __m256i m3 = _mm256_set1_epi8(3);
    const uint8_t *qs;
    __m256i s16, hv = _mm256_setzero_si256();
    if (k == KL_Q2_K) {
        const struct block_q2_K *b = (const void *)p;
        o->d = kx_h2f(b->d);
        o->dmin = kx_h2f(b->dmin);
        const __m128i raw = _mm_loadu_si128((const __m128i *)b->scales);
        const __m128i m4 = _mm_set1_epi8(0x0F);
        s16 = _mm256_cvtepu8_epi16(_mm_and_si128(raw, m4));
        o->sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), m4));
        qs = b->qs;
    } else {
        const struct block_q3_K *b = (const void *)p;
        o->d = kx_h2f(b->d);
        o->dmin = 0.0f;
        s16 = kl_q3_scales(b->scales);
        o->sc16 = s16;
        qs = b->qs;
        hv = _mm256_loadu_si256((const __m256i *)b->hmask);
    }
    kx_spread16(s16, o->sc);
    KX_UNROLL(8)
    for (int h = 0; h < 2; h++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * h));
        KX_UNROLL(8)
        for (int sh = 0; sh < 4; sh++) {
            __m256i q = _mm256_and_si256(_mm256_srli_epi16(v, 2 * sh), m3);
            if (k == KL_Q3_K) { /* bit b of each hmask byte moved to bit 2 in one shift: a
                                  * 16-bit shift of at most 5 keeps bit 2 within its byte */
                const int b = 4 * h + sh;
                const __m256i hb = b < 2    ? _mm256_slli_epi16(hv, 2 - b)
                                   : b == 2 ? hv
                                            : _mm256_srli_epi16(hv, b - 2);
                q = _mm256_or_si256(q, _mm256_and_si256(hb, _mm256_set1_epi8(4)));
            }
            kx_chunk_emit(o->q, o->sc, 4 * h + sh, q, fused, ab, s);
        }
    }
}

KX_AI void kl_k23_unpack(enum kl_k23 k, const uint8_t *p, struct kl_kblk *o) {
    kl_k23_unpack_x(k, p, o, 0, NULL, NULL);
}

/* Q3_K's offset term: its values carry +4, so take 4 * sum_j sc_j * bsum_j. */
KX_AI __m256i kl_k23_offset(enum kl_k23 k, __m256i s, const struct kl_kblk *wb,
                            const struct block_q8_K *ab) {
    if (k == KL_Q3_K) {
        __m256i bs = _mm256_loadu_si256((const __m256i *)ab->bsums);
        s = _mm256_sub_epi32(s, _mm256_slli_epi32(_mm256_madd_epi16(bs, wb->sc16), 2));
    }
    return s;
}

/* 8 int32 lanes of sum_j sc_j * (q_j . a_j); Q3_K: less 4 * sum_j sc_j * bsum_j. */
KX_AI __m256i kl_k23_sumi(enum kl_k23 k, const struct kl_kblk *wb, const struct block_q8_K *ab) {
    __m256i s = _mm256_setzero_si256();
    KX_UNROLL(8)
    for (int j = 0; j < 8; j++) {
        __m256i av = _mm256_loadu_si256((const __m256i *)(ab->qs + 32 * j));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(wb->q[j], av), wb->sc[j]));
    }
    return kl_k23_offset(k, s, wb, ab);
}

/* One activation row (NC == 1): nothing to reuse, so unpack and multiply in one pass. */
KX_AI __m256i kl_k23_fused(enum kl_k23 k, const uint8_t *p, struct kl_kblk *o,
                           const struct block_q8_K *ab) {
    __m256i s = _mm256_setzero_si256();
    kl_k23_unpack_x(k, p, o, 1, ab, &s);
    return kl_k23_offset(k, s, o, ab);
}

KX_AI void kl_tile_k23(enum kl_k23 k, const int NR, const int NC, int64_t n, const uint8_t *w,
                       size_t ws, const uint8_t *a, size_t as, float *y, size_t ldy) {
    const size_t bs = k == KL_Q2_K ? sizeof(struct block_q2_K) : sizeof(struct block_q3_K);
    __m256 acc[KX_MAXR][KX_MAXC], accm[KX_MAXR][KX_MAXC];
    KX_UNROLL(8)
    for (int r = 0; r < NR; r++) {
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++)
            acc[r][c] = accm[r][c] = _mm256_setzero_ps();
    }
    struct kl_kblk wb[KX_MAXR];
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        if (NC > 1) {
            KX_UNROLL(8)
            for (int r = 0; r < NR; r++)
                kl_k23_unpack(k, w + (size_t)r * ws + (size_t)ib * bs, &wb[r]);
        }
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++) {
            const struct block_q8_K *ab =
                (const void *)(a + (size_t)c * as + (size_t)ib * sizeof(struct block_q8_K));
            KX_UNROLL(8)
            for (int r = 0; r < NR; r++) {
                __m256i si = NC > 1 ? kl_k23_sumi(k, &wb[r], ab)
                                    : kl_k23_fused(k, w + (size_t)r * ws + (size_t)ib * bs,
                                                   &wb[r], ab);
                acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(wb[r].d * ab->d),
                                            _mm256_cvtepi32_ps(si), acc[r][c]);
                if (k == KL_Q2_K) {
                    __m256i bsv = _mm256_loadu_si256((const __m256i *)ab->bsums);
                    __m256i mi = _mm256_madd_epi16(bsv, wb[r].sc16);
                    accm[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(-wb[r].dmin * ab->d),
                                                 _mm256_cvtepi32_ps(mi), accm[r][c]);
                }
            }
        }
    }
    KX_UNROLL(8)
    for (int r = 0; r < NR; r++) {
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++)
            y[(size_t)c * ldy + r] = k == KL_Q2_K ? kx_hsum8(acc[r][c]) + kx_hsum8(accm[r][c])
                                                  : kx_hsum8(acc[r][c]);
    }
}

/* Tile shapes (TR1 for one activation, TR x TC otherwise), as kern_avx2.c's: one weight row
 * at a time when streaming for one activation; 2 x 4 register tiles (Q4_1/Q5_1) and 1 x 4
 * (Q2_K/Q3_K: an unpacked super-block is 16 registers) for more. */
#define KL_Q81_SHAPE 1, 2, 4
#define KL_K23_SHAPE 1, 1, 4
KX_DEFINE_S(kl, q4_1, kl_tile_q81, KL_Q4_1, KL_Q81_SHAPE)
KX_DEFINE_S(kl, q5_1, kl_tile_q81, KL_Q5_1, KL_Q81_SHAPE)
KX_DEFINE_S(kl, q2_K, kl_tile_k23, KL_Q2_K, KL_K23_SHAPE)
KX_DEFINE_S(kl, q3_K, kl_tile_k23, KL_Q3_K, KL_K23_SHAPE)

static void kl_quant_q8_1(const float *x, void *dst, int64_t n) {
    kx_quant_q8(x, dst, n, 1);
}
static void kl_quant_q8_K(const float *x, void *dst, int64_t n) {
    kx_quant_q8_K(x, dst, n);
}

void kern_register_lowbit_avx2(struct kern_ops *ops) {
    const struct {
        uint32_t t;
        quant_vec_dot_fn dot;
        kern_gemm_fn gemm;
        kern_quant_act_fn qa;
    } tab[] = {
        {QT_Q4_1, kl_dot_q4_1, kl_gemm_q4_1, kl_quant_q8_1},
        {QT_Q5_1, kl_dot_q5_1, kl_gemm_q5_1, kl_quant_q8_1},
        {QT_Q2_K, kl_dot_q2_K, kl_gemm_q2_K, kl_quant_q8_K},
        {QT_Q3_K, kl_dot_q3_K, kl_gemm_q3_K, kl_quant_q8_K},
    };
    for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++) {
        ops->t[tab[i].t].vec_dot = tab[i].dot;
        ops->t[tab[i].t].gemm = tab[i].gemm;
        ops->t[tab[i].t].quant_act = tab[i].qa;
    }
}
