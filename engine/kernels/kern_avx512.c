/*
 * kern_avx512 — AVX-512 (F, BW, VL, DQ, VNNI) kernels for Q4_0, Q5_0, Q8_0 (two 32-element
 * blocks per 512-bit register, VNNI vpdpbusd for the int8 products) and Q4_K, Q5_K, Q6_K
 * (two 32-element chunks per register). F16/BF16 and the activation quantizers come from
 * the AVX2 table, which kern_init installs first (see kern_impl.h).
 *
 * As in kern_avx2.c, vec_dot is the 1x1 instance of the same tile template as gemm, so the
 * two agree bit for bit. The float steps (lane layout, fused scale per block pair, final
 * sum) differ from the AVX2 kernels, so AVX-512 and AVX2 results may differ in the last
 * bits; each stays within the reference bound.
 */
#include "engine/kernels/kern_impl.h"
#include "engine/kernels/kern_x86.h"

KX_AI float kz_hsum16(__m512 v) {
    return kx_hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

/* ---- Q4_0 / Q5_0 / Q8_0 x Q8_0: two blocks per register ---------------------------------- */

/* Weight blocks ib and ib+1 (ib+1 only when `two`) as 64 signed bytes and two scales. */
KX_AI __m512i kz_q8f_load2(enum kx_q8f k, const uint8_t *p, int two, float *d0, float *d1) {
    const size_t bs = kx_q8f_size(k);
    __m256i lo = kx_q8f_load(k, p, d0);
    __m256i hi = _mm256_setzero_si256();
    *d1 = 0.0f;
    if (two) hi = kx_q8f_load(k, p + bs, d1);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

KX_AI __m512i kz_act_load2(const struct block_q8_0 *ab, int two, float *d0, float *d1) {
    __m256i lo = _mm256_loadu_si256((const __m256i *)ab[0].qs);
    __m256i hi = two ? _mm256_loadu_si256((const __m256i *)ab[1].qs) : _mm256_setzero_si256();
    *d0 = kx_h2f(ab[0].d);
    *d1 = two ? kx_h2f(ab[1].d) : 0.0f;
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

KX_AI void kz_tile_q8f(enum kx_q8f k, const int NR, const int NC, int64_t n, const uint8_t *w,
                       size_t ws, const uint8_t *a, size_t as, float *y, size_t ldy) {
    const size_t bs = kx_q8f_size(k);
    const int64_t nb = n / 32;
    __m512 acc[KX_MAXR][KX_MAXC];
    KX_UNROLL(8)
    for (int r = 0; r < NR; r++) {
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++)
            acc[r][c] = _mm512_setzero_ps();
    }
    for (int64_t ib = 0; ib < nb; ib += 2) {
        const int two = ib + 1 < nb;
        __m512i wa[KX_MAXR];
        __mmask64 neg[KX_MAXR];
        float dw0[KX_MAXR], dw1[KX_MAXR];
        KX_UNROLL(8)
        for (int r = 0; r < NR; r++) {
            __m512i v =
                kz_q8f_load2(k, w + (size_t)r * ws + (size_t)ib * bs, two, &dw0[r], &dw1[r]);
            wa[r] = _mm512_abs_epi8(v);
            neg[r] = _mm512_movepi8_mask(v);
        }
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++) {
            float da0, da1;
            const __m512i av = kz_act_load2(
                (const void *)(a + (size_t)c * as + (size_t)ib * sizeof(struct block_q8_0)), two,
                &da0, &da1);
            KX_UNROLL(8)
            for (int r = 0; r < NR; r++) {
                /* a with w's sign, so that |w| can be the unsigned operand of vpdpbusd */
                __m512i sa = _mm512_mask_sub_epi8(av, neg[r], _mm512_setzero_si512(), av);
                __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wa[r], sa);
                __m512 d = _mm512_insertf32x8(_mm512_set1_ps(dw0[r] * da0),
                                              _mm256_set1_ps(dw1[r] * da1), 1);
                acc[r][c] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc[r][c]);
            }
        }
    }
    KX_UNROLL(8)
    for (int r = 0; r < NR; r++) {
        KX_UNROLL(8)
        for (int c = 0; c < NC; c++)
            y[(size_t)c * ldy + r] = kz_hsum16(acc[r][c]);
    }
}

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

/* ---- instantiation (same scheme as kern_avx2.c) ------------------------------------------- */

KX_DEFINE(kz, q4_0, kz_tile_q8f, KX_Q4_0, 1, 2, 4)
KX_DEFINE(kz, q5_0, kz_tile_q8f, KX_Q5_0, 1, 2, 4)
KX_DEFINE(kz, q8_0, kz_tile_q8f, KX_Q8_0, 1, 2, 4)
KX_DEFINE(kz, q4_K, kz_tile_kq, KX_Q4_K, 1, 2, 4)
KX_DEFINE(kz, q5_K, kz_tile_kq, KX_Q5_K, 1, 2, 4)
KX_DEFINE(kz, q6_K, kz_tile_kq, KX_Q6_K, 1, 2, 4)

void kern_register_avx512(struct kern_ops *ops) {
    static const struct {
        uint32_t t;
        quant_vec_dot_fn dot;
        kern_gemm_fn gemm;
    } tab[] = {
        {QT_Q4_0, kz_dot_q4_0, kz_gemm_q4_0}, {QT_Q5_0, kz_dot_q5_0, kz_gemm_q5_0},
        {QT_Q8_0, kz_dot_q8_0, kz_gemm_q8_0}, {QT_Q4_K, kz_dot_q4_K, kz_gemm_q4_K},
        {QT_Q5_K, kz_dot_q5_K, kz_gemm_q5_K}, {QT_Q6_K, kz_dot_q6_K, kz_gemm_q6_K},
    };
    for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++) {
        ops->t[tab[i].t].vec_dot = tab[i].dot;
        ops->t[tab[i].t].gemm = tab[i].gemm;
    }
}
