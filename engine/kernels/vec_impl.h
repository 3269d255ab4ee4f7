/*
 * vec_impl — the plain-C bodies of the row kernels (vec.h), included by vec_ref.c and the
 * ISA files so each compiles them with its own flags (the same source gives the same
 * contraction into FMA wherever FMA is enabled). VEC_H2F / VEC_F2H: that file's fp16
 * conversion of one value (bit-identical everywhere). Nothing else includes this.
 */
#ifndef GEMMAD_VEC_IMPL_H
#define GEMMAD_VEC_IMPL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/kernels/quant.h"
#include "engine/kernels/vec.h"

static inline void vec_rms_norm_impl(float *y, const float *x, const float *w, int n,
                                     float eps) {
    /* 8 independent double lanes (no serial chain of n dependent adds) folded in a fixed
     * order: the float mean is that of a serial double sum except in ties far below float
     * precision. */
    double lane[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) lane[j] += (double)(x[i + j] * x[i + j]);
    for (; i < n; i++) lane[0] += (double)(x[i] * x[i]);
    const double sum = ((lane[0] + lane[4]) + (lane[2] + lane[6])) +
                       ((lane[1] + lane[5]) + (lane[3] + lane[7]));
    const float mean = (float)(sum / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    /* eight at a time, each block read whole before it is written (y may be x), so the
     * compiler makes it a vector multiply-multiply-store. Without w: x * scale, which is
     * (x * scale) * 1.0f exactly. The test of w stays out of the loop: inside it, gcc built
     * the weights eight scalar stores at a time and reloaded them as one vector, a failed
     * store-to-load forward per eight elements (the norms were 4% of a 2,048-token prefill
     * on Zen 4, two thirds of it that stall). */
    i = 0;
    if (w) {
        for (; i + 8 <= n; i += 8) {
            float xs[8], ws[8];
            for (int j = 0; j < 8; j++)
                xs[j] = x[i + j], ws[j] = w[i + j];
            for (int j = 0; j < 8; j++)
                y[i + j] = (xs[j] * scale) * ws[j];
        }
        for (; i < n; i++)
            y[i] = (x[i] * scale) * w[i];
    } else {
        for (; i + 8 <= n; i += 8) {
            float xs[8];
            for (int j = 0; j < 8; j++)
                xs[j] = x[i + j];
            for (int j = 0; j < 8; j++)
                y[i + j] = xs[j] * scale;
        }
        for (; i < n; i++)
            y[i] = x[i] * scale;
    }
}

static inline void vec_rope_neox_impl(float *v, const float *cs, int half) {
    for (int i = 0; i < half; i++) {
        const float co = cs[i], si = cs[half + i];
        const float x0 = v[i], x1 = v[i + half];
        v[i] = x0 * co - x1 * si;
        v[i + half] = x0 * si + x1 * co;
    }
}

static inline void vec_gelu_table_impl(float *t) {
    for (int i = 0; i < VEC_GELU_TAB; i++) {
        const float x = quant_f16_to_f32((quant_half)i);
        const float g = 0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x *
                                                 (1.0f + 0.044715f * x * x)));
        t[i] = quant_f16_to_f32(quant_f32_to_f16(g));
    }
}

static inline float vec_gelu_one(const float *tab, float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    return tab[VEC_F2H(x)];
}

static inline void vec_ple_mix_impl(float *e, const float *p, float s_e, float s_in, size_t n) {
    for (size_t i = 0; i < n; i++) e[i] = (p[i] + e[i] * s_e) * s_in;
}

#endif
