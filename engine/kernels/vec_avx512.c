/* vec_avx512 — the AVX-512 GeGLU (16 table lookups per gather); the other row kernels are
 * vec_avx2.c's (see vec.h). */
#include <immintrin.h>

#define VEC_H2F(h) _cvtsh_ss(h)
#define VEC_F2H(f) ((uint16_t)_cvtss_sh((f), 0))
#include "engine/kernels/vec_impl.h"

/* 16 at a time, the same values as vec_gelu_one: round to fp16 (nearest even), gather the
 * table entries, x itself from 10 up, 0 from -10 down. */
static void geglu_avx512(const float *tab, float *g, const float *u, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 x = _mm512_loadu_ps(g + i);
        const __m512i idx = _mm512_cvtepu16_epi32(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
        __m512 t = _mm512_i32gather_ps(idx, tab, 4);
        t = _mm512_mask_mov_ps(t, _mm512_cmp_ps_mask(x, _mm512_set1_ps(10.0f), _CMP_GE_OQ), x);
        t = _mm512_maskz_mov_ps(
            (__mmask16)~_mm512_cmp_ps_mask(x, _mm512_set1_ps(-10.0f), _CMP_LE_OQ), t);
        _mm512_storeu_ps(g + i, _mm512_mul_ps(t, _mm512_loadu_ps(u + i)));
    }
    for (; i < n; i++) g[i] = vec_gelu_one(tab, g[i]) * u[i];
}

const struct vec_ops vec_ops_avx512 = {
    vec_f16_to_f32_avx2, vec_f32_to_f16_avx2, vec_round_f16_avx2, vec_rms_norm_avx2,
    vec_rope_neox_avx2,  vec_gelu_table_avx2, geglu_avx512,       vec_ple_mix_avx2,
    "avx512"};
