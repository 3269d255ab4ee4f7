/*
 * cuda_mmvq — Y = X · Wᵀ for 1 to CF_MMVQ_MAX_ROWS activation rows (decode steps) with the
 * activations quantized to int8 and integer dot products (llama.cpp's MMVQ idea), for the
 * 32-element block types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and IQ4_NL. Other types (the K-quants,
 * the float types) keep cuda_matmul's f32 kernel.
 *
 * Two steps, both asynchronous on the caller's stream, nothing allocated:
 *  1. cf_mmvq_quantize: each row of X, per block of 32, exactly as the CPU quantizes
 *     activations (engine/kernels quant_q8_0_row_ref / quant_q8_1_row_ref): amax = max |x|,
 *     d = amax / 127 rounded to fp16, multiplier 127 / amax, q = x · multiplier rounded half to
 *     even; s = fp16(d · Σq) (unrounded d), the Q8_1 sum Q4_1 and Q5_1 need. Written into a
 *     caller-provided buffer in the layout of cf_mmvq_layout (one quantization serves every
 *     matmul over the same X).
 *  2. cf_mmvq_matmul / cf_mmvq_matmul_set: one warp per output row; lane l takes blocks l,
 *     l + 32, … in order; per block the exact integer sum Σ w_q · x_q (__dp4a) and the block's
 *     term, computed as the CPU's reference dot (quant_vec_dot_ref of one block):
 *       (d_w · d_x) · isum               Q4_0, Q5_0, Q8_0, IQ4_NL
 *       (d_w · d_x) · isum + m_w · s_x   Q4_1, Q5_1
 *     (each operation rounded on its own, never contracted into an FMA), added to the lane's
 *     sum; then the lanes' sums by the xor butterfly (16, 8, 4, 2, 1). Nothing in a row's
 *     arithmetic depends on M or on the other rows: a row's result is bit-identical alone or
 *     among 8 (batch invariance). cf_mmvq_matmul_set is cf_matmul_set's contract (QKV; gate
 *     and up with the GeGLU), weights of different types allowed, with this arithmetic: row
 *     for row the bits of cf_mmvq_matmul.
 *
 * Used by the CUDA forward pass (cuda_step.c) for steps of at most CF_MMVQ_MAX_ROWS rows when
 * GEMMAD_CUDA_MMVQ=1 was set at context creation (off by default).
 */
#ifndef GEMMAD_CUDA_MMVQ_H
#define GEMMAD_CUDA_MMVQ_H

#include <stddef.h>
#include <stdint.h>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/cuda_matmul.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CF_MMVQ_MAX_ROWS 8

/* Quantized activations of M rows of n_in elements (n_in a multiple of 32), device pointers:
 * qs [M][n_in] int8, d [M][n_in / 32] and s [M][n_in / 32] f32 (fp16 values widened). */
struct cf_mmvq_act {
    int8_t *qs;
    float *d, *s;
};

/* Bytes of the quantized form of M rows of n_in elements. */
static inline size_t cf_mmvq_bytes(int M, int n_in) {
    return (size_t)M * (size_t)n_in + 2 * sizeof(float) * (size_t)M * (size_t)(n_in / 32);
}

/* Where the parts of M rows of n_in elements lie in buf (16-byte aligned when buf is). */
static inline struct cf_mmvq_act cf_mmvq_layout(void *buf, int M, int n_in) {
    struct cf_mmvq_act a;
    const size_t nb = (size_t)M * (size_t)(n_in / 32);
    a.qs = (int8_t *)buf;
    a.d = (float *)((uint8_t *)buf + (size_t)M * (size_t)n_in);
    a.s = a.d + nb;
    return a;
}

/* 1 when cf_mmvq_matmul takes weights of this type. */
int cf_mmvq_supported(uint32_t type);

/* Quantizes X [M][n_in] (f32, device) into buf (bytes >= cf_mmvq_bytes(M, n_in)).
 * 1 <= M <= CF_MMVQ_MAX_ROWS. Returns 0 or -1 (message in cf_last_error()). */
int cf_mmvq_quantize(cudaStream_t stream, const float *X, int M, int n_in, void *buf,
                     size_t bytes);

/* Y[m * ldy + o] = X[m] · W[o] for m < M, o < n_out, from buf as cf_mmvq_quantize left it for
 * the same M and n_in == w->n_in. */
int cf_mmvq_matmul(cudaStream_t stream, const struct cf_weight *w, const void *buf, int M,
                   float *Y, int ldy);

/* cf_matmul_set (cuda_matmul.h) over quantized activations: n (<= CF_MM_SET_MAX) weights of
 * one n_in in one launch, each of a supported type (unlike cf_matmul_set, the types may
 * differ: the bundled model's Q and K are Q5_0, its V Q8_0); geglu (n == 2):
 * Y[0] = gelu(X·W[0]ᵀ) · (X·W[1]ᵀ) as cf_geglu computes it from the two products. */
int cf_mmvq_matmul_set(cudaStream_t stream, const struct cf_weight *const *w, int n,
                       const void *buf, int M, float *const *Y, const int *ldy, int geglu);

/* The kernel's arithmetic for one output row on the host (the same code compiled for the
 * host): *y = row · the activation row (qs [n_in], d and s [n_in / 32], as in the layout).
 * Lets the tests check the bit layouts and the order on machines without a GPU. 0, or -1 for
 * a type cf_mmvq_supported refuses. */
int cf_mmvq_row_host(uint32_t type, const void *row, int n_in, const int8_t *qs, const float *d,
                     const float *s, float *y);

#ifdef __cplusplus
}
#endif

#endif
