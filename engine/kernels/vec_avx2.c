/* vec_avx2 — AVX2 + FMA + F16C row kernels (see vec.h): F16C conversions, 8 at a time. */
#include <immintrin.h>

#define VEC_H2F(h) _cvtsh_ss(h)
#define VEC_F2H(f) ((uint16_t)_cvtss_sh((f), 0))
#include "engine/kernels/vec_impl.h"

void vec_f16_to_f32_avx2(const uint16_t *src, float *dst, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = VEC_H2F(src[i]);
}

void vec_f32_to_f16_avx2(const float *src, uint16_t *dst, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) /* nearest even, as VEC_F2H */
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = VEC_F2H(src[i]);
}

void vec_round_f16_avx2(const float *src, float *dst, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                                                  _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++) dst[i] = VEC_H2F(VEC_F2H(src[i]));
}

void vec_rms_norm_avx2(float *y, const float *x, const float *w, int n, float eps) {
    vec_rms_norm_impl(y, x, w, n, eps);
}

void vec_rope_neox_avx2(float *v, const float *cs, int half) { vec_rope_neox_impl(v, cs, half); }

void vec_gelu_table_avx2(float *tab) { vec_gelu_table_impl(tab); }

static void geglu_avx2(const float *tab, float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) g[i] = vec_gelu_one(tab, g[i]) * u[i];
}

void vec_ple_mix_avx2(float *e, const float *p, float s_e, float s_in, size_t n) {
    vec_ple_mix_impl(e, p, s_e, s_in, n);
}

const struct vec_ops vec_ops_avx2 = {vec_f16_to_f32_avx2, vec_f32_to_f16_avx2, vec_round_f16_avx2,
                                     vec_rms_norm_avx2,   vec_rope_neox_avx2,  vec_gelu_table_avx2,
                                     geglu_avx2,          vec_ple_mix_avx2,    "avx2"};
