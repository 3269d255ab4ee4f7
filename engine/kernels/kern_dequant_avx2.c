/*
 * kern_dequant_avx2 — AVX2 + F16C row dequantization for the formats of Gemma Q4_K_M / Q8_0
 * files (Q4_0, Q5_0, Q8_0, Q4_K, Q6_K) and F16 / BF16, used by kern_get_row (embedding
 * lookups) and by the BLAS path (kern_blas.c) to widen F16 / BF16 weight rows.
 *
 * The values are bit-identical to quant_dequant_*_ref: every product here is computed with
 * the same operands as the reference (int -> float conversion is exact, one multiply, and for
 * Q4_K the min is subtracted from an exact product), so FMA contraction cannot change them.
 * Registered by kern.c (kern_register_dequant_avx2) when the CPU has AVX2, FMA and F16C.
 */
#include <immintrin.h>
#include <string.h>

#include "engine/kernels/kern_impl.h"

static inline float half_to_f32(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* dst[0..15] = q[0..15] * d - m, q signed bytes. */
static inline void store16(float *dst, __m128i q, float d, float m) {
    const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
    __m256 a = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
    __m256 b = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)));
    _mm256_storeu_ps(dst, _mm256_sub_ps(_mm256_mul_ps(a, vd), vm));
    _mm256_storeu_ps(dst + 8, _mm256_sub_ps(_mm256_mul_ps(b, vd), vm));
}

/* dst[0..31] = q * d, q 32 signed bytes. A plain multiply, as the reference: subtracting a
 * zero min would turn its -0 results into +0. */
static inline void store32_nomin(float *dst, __m256i q, float d) {
    const __m256 vd = _mm256_set1_ps(d);
    __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    _mm256_storeu_ps(dst, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), vd));
    _mm256_storeu_ps(
        dst + 8,
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), vd));
    _mm256_storeu_ps(dst + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), vd));
    _mm256_storeu_ps(
        dst + 24,
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), vd));
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles first, then high nibbles (ggml's order). */
static inline __m256i nibbles32(const uint8_t *qs) {
    __m128i v = _mm_loadu_si128((const __m128i *)qs);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    __m128i lo = _mm_and_si128(v, m4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
    return _mm256_set_m128i(hi, lo);
}

/* Bit j of the 32-bit word at p -> byte j = 0x10 when set, else 0. */
static inline __m256i bits32_to_0x10(const uint8_t *p) {
    uint32_t x;
    memcpy(&x, p, 4);
    const __m256i sel = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                          0x0101010101010101, 0x0000000000000000);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), sel);
    __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

static void dq_q4_0(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 32; i++, b += 18, dst += 32)
        store32_nomin(dst, _mm256_sub_epi8(nibbles32(b + 2), _mm256_set1_epi8(8)), half_to_f32(b));
}

static void dq_q5_0(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 32; i++, b += 22, dst += 32) {
        __m256i q = _mm256_or_si256(nibbles32(b + 6), bits32_to_0x10(b + 2));
        store32_nomin(dst, _mm256_sub_epi8(q, _mm256_set1_epi8(16)), half_to_f32(b));
    }
}

static void dq_q8_0(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / 32; i++, b += 34, dst += 32)
        store32_nomin(dst, _mm256_loadu_si256((const __m256i *)(b + 2)), half_to_f32(b));
}

static void dq_q4_K(const void *src, float *dst, int64_t n) {
    const struct block_q4_K *b = src;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = _cvtsh_ss(b[i].d), dmin = _cvtsh_ss(b[i].dmin);
        const uint8_t *s = b[i].scales;
        float sc[8], mn[8];
        for (int j = 0; j < 8; j++) {
            int a = j < 4 ? (s[j] & 63) : ((s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4));
            int m = j < 4 ? (s[j + 4] & 63) : ((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
            sc[j] = d * (float)a;
            mn[j] = dmin * (float)m;
        }
        for (int c = 0; c < 4; c++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * c));
            __m256i lo = _mm256_and_si256(v, m4),
                    hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            float *y = dst + 64 * c;
            store16(y, _mm256_castsi256_si128(lo), sc[2 * c], mn[2 * c]);
            store16(y + 16, _mm256_extracti128_si256(lo, 1), sc[2 * c], mn[2 * c]);
            store16(y + 32, _mm256_castsi256_si128(hi), sc[2 * c + 1], mn[2 * c + 1]);
            store16(y + 48, _mm256_extracti128_si256(hi, 1), sc[2 * c + 1], mn[2 * c + 1]);
        }
    }
}

/* dst[0..31] = (d * sc[0]) * q[0..15], (d * sc[1]) * q[16..31]: the reference's order. */
static inline void store32_2scales(float *dst, __m256i q, float d0, float d1) {
    __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m256 v0 = _mm256_set1_ps(d0), v1 = _mm256_set1_ps(d1);
    _mm256_storeu_ps(dst, _mm256_mul_ps(v0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
    _mm256_storeu_ps(dst + 8, _mm256_mul_ps(v0, _mm256_cvtepi32_ps(
                                                    _mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
    _mm256_storeu_ps(dst + 16, _mm256_mul_ps(v1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
    _mm256_storeu_ps(dst + 24, _mm256_mul_ps(v1, _mm256_cvtepi32_ps(
                                                     _mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
}

static void dq_q6_K(const void *src, float *dst, int64_t n) {
    const struct block_q6_K *b = src;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    const __m256i k32 = _mm256_set1_epi8(32);
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = _cvtsh_ss(b[i].d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b[i].ql + 64 * h, *qh = b[i].qh + 32 * h;
            const int8_t *sc = b[i].scales + 8 * h;
            float *y = dst + 128 * h;
            __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i hv = _mm256_loadu_si256((const __m256i *)qh);
            __m256i q1 = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                         _mm256_and_si256(_mm256_slli_epi16(hv, 4), m30));
            __m256i q2 = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                         _mm256_and_si256(_mm256_slli_epi16(hv, 2), m30));
            __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                         _mm256_and_si256(hv, m30));
            __m256i q4 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                         _mm256_and_si256(_mm256_srli_epi16(hv, 2), m30));
            store32_2scales(y, _mm256_sub_epi8(q1, k32), d * sc[0], d * sc[1]);
            store32_2scales(y + 32, _mm256_sub_epi8(q2, k32), d * sc[2], d * sc[3]);
            store32_2scales(y + 64, _mm256_sub_epi8(q3, k32), d * sc[4], d * sc[5]);
            store32_2scales(y + 96, _mm256_sub_epi8(q4, k32), d * sc[6], d * sc[7]);
        }
    }
}

/* F16 / BF16 rows: exact widenings (F16C and a 16-bit shift), as the reference's. */
static void dq_f16(const void *src, float *dst, int64_t n) {
    const uint16_t *p = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + i))));
    for (; i < n; i++)
        dst[i] = _cvtsh_ss(p[i]);
}

static void dq_bf16(const void *src, float *dst, int64_t n) {
    const uint16_t *p = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
    }
    for (; i < n; i++) {
        uint32_t u = (uint32_t)p[i] << 16;
        memcpy(&dst[i], &u, 4);
    }
}

void kern_register_dequant_avx2(struct kern_ops *ops) {
    ops->t[QT_F16].dequant = dq_f16;
    ops->t[QT_BF16].dequant = dq_bf16;
    ops->t[QT_Q4_0].dequant = dq_q4_0;
    ops->t[QT_Q5_0].dequant = dq_q5_0;
    ops->t[QT_Q8_0].dequant = dq_q8_0;
    ops->t[QT_Q4_K].dequant = dq_q4_K;
    ops->t[QT_Q6_K].dequant = dq_q6_K;
}
