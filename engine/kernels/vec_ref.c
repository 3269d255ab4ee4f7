/* vec_ref — the scalar reference row kernels (see vec.h). */
#include <string.h>

#include "engine/kernels/quant.h"

#define VEC_H2F(h) quant_f16_to_f32(h)
#define VEC_F2H(f) quant_f32_to_f16(f)
#include "engine/kernels/vec_impl.h"

static void f16_to_f32_ref(const uint16_t *src, float *dst, int n) {
    for (int i = 0; i < n; i++) dst[i] = VEC_H2F(src[i]);
}

static void f32_to_f16_ref(const float *src, uint16_t *dst, int n) {
    for (int i = 0; i < n; i++) dst[i] = VEC_F2H(src[i]);
}

static void round_f16_ref(const float *src, float *dst, int n) {
    for (int i = 0; i < n; i++) dst[i] = VEC_H2F(VEC_F2H(src[i]));
}

static void geglu_ref(const float *tab, float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) g[i] = vec_gelu_one(tab, g[i]) * u[i];
}

const struct vec_ops vec_ops_ref = {f16_to_f32_ref,     f32_to_f16_ref,      round_f16_ref,
                                    vec_rms_norm_impl,  vec_rope_neox_impl,  vec_gelu_table_impl,
                                    geglu_ref,          vec_ple_mix_impl,    "scalar"};
