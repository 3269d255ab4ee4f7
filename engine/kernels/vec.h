/*
 * vec — the row-wise kernels of the CPU forward pass besides matmul and attention: F16
 * conversion of cache rows and queries, RMS norm, NEOX RoPE rotation, the fp16-table GELU
 * and GeGLU, and the Gemma 4 per-layer input mix.
 *
 * Each has a scalar reference (vec_ref.c) and ISA twins (vec_avx2.c: AVX2 + FMA + F16C;
 * vec_avx512.c: AVX-512 GeGLU, the rest from AVX2), chosen at run time with the matmuls'
 * instruction set (vec_ops_for(kern_active_isa())). The plain-C loops (norm, RoPE, table,
 * mix) are one source (vec_impl.h) compiled with each file's flags, so a NATIVE=0 build
 * computes the same bits as a -march=native one on the same CPU. F16 conversions round to
 * nearest even on every ISA (bit-identical to quant_f32_to_f16 / quant_f16_to_f32), and the
 * SIMD GeGLU gives exactly the scalar table values.
 *
 * Threads: pure; any thread.
 */
#ifndef GEMMAD_VEC_H
#define GEMMAD_VEC_H

#include <stddef.h>
#include <stdint.h>

#include "engine/kernels/kern.h"

#define VEC_GELU_TAB 65536 /* entries of the fp16 GELU table */

struct vec_ops {
    void (*f16_to_f32)(const uint16_t *src, float *dst, int n);
    void (*f32_to_f16)(const float *src, uint16_t *dst, int n);
    void (*round_f16)(const float *src, float *dst, int n); /* to fp16 and back */
    /* y = x / sqrt(mean(x^2) + eps) * w (w may be NULL); squares summed in double in 8
     * lanes folded in a fixed order, as ggml's serial double sum to float precision; y may
     * be x itself or apart from it, never partly overlapping */
    void (*rms_norm)(float *y, const float *x, const float *w, int n, float eps);
    /* v[i], v[i + half] rotated by cs[i] (cos), cs[half + i] (sin), i < half */
    void (*rope_neox)(float *v, const float *cs, int half);
    /* tab[h] = GELU-tanh of the fp16 value h, rounded to fp16 (ggml's CPU table) */
    void (*gelu_table)(float *tab);
    /* g[i] = GELU(g[i]) * u[i], GELU from the table (x >= 10: x; x <= -10: 0) */
    void (*geglu)(const float *tab, float *g, const float *u, int64_t n);
    /* e[i] = (p[i] + e[i] * s_e) * s_in (Gemma 4 per-layer inputs) */
    void (*ple_mix)(float *e, const float *p, float s_e, float s_in, size_t n);
    const char *name;
};

const struct vec_ops *vec_ops_for(enum kern_isa isa);

/* The twins behind the table (vec_ref.c, vec_avx2.c, vec_avx512.c). */
extern const struct vec_ops vec_ops_ref, vec_ops_avx2, vec_ops_avx512;
/* vec_avx2.c's entries, which vec_avx512.c's table shares. */
void vec_f16_to_f32_avx2(const uint16_t *src, float *dst, int n);
void vec_f32_to_f16_avx2(const float *src, uint16_t *dst, int n);
void vec_round_f16_avx2(const float *src, float *dst, int n);
void vec_rms_norm_avx2(float *y, const float *x, const float *w, int n, float eps);
void vec_rope_neox_avx2(float *v, const float *cs, int half);
void vec_gelu_table_avx2(float *tab);
void vec_ple_mix_avx2(float *e, const float *p, float s_e, float s_in, size_t n);

#endif
