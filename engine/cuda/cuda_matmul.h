/*
 * cuda_matmul — Y = X · Wᵀ on the GPU with W kept in its packed GGUF format.
 *
 * Two paths:
 *  - CF_MM_KERNEL: the dequantizing kernel (cuda_matmul.cu). One warp per output row; lane l
 *    decodes chunks l, l+32, … of the row once per tile of up to 8 activation rows, which sit
 *    in shared memory. The per-row arithmetic (sequential sum inside a 32-element chunk, one
 *    partial per lane, a fixed butterfly across lanes) is the same whatever M is, so a row's
 *    result never depends on the other rows of the step (batch invariance).
 *  - CF_MM_CUBLAS: for many rows (prefill): the weight is decoded to fp16 (F16/BF16 used as
 *    they are), the activations converted to fp16/bf16, and cublasGemmEx computes in fp32.
 *    Faster for large M, but its rounding depends on the shape: never used when the caller
 *    asks for determinism.
 *  - CF_MM_AUTO picks CUBLAS for M >= CF_MM_CUBLAS_MIN_ROWS when a handle and scratch are
 *    given, else KERNEL.
 *
 * All calls are asynchronous on the given stream; pointers are device pointers.
 */
#ifndef GEMMAD_CUDA_MATMUL_H
#define GEMMAD_CUDA_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/cuda/cuda_check.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A weight matrix resident on the device: n_out rows of n_in elements, packed. */
struct cf_weight {
    uint32_t type;    /* enum quant_type */
    int n_in;         /* elements per row; a multiple of 32 */
    int n_out;        /* rows */
    size_t row_bytes; /* quant_row_size(type, n_in) */
    const void *data; /* device: n_out * row_bytes bytes */
};

enum cf_mm_mode { CF_MM_AUTO = 0, CF_MM_KERNEL = 1, CF_MM_CUBLAS = 2 };

#define CF_MM_CUBLAS_MIN_ROWS 64
#define CF_MM_SET_MAX 3

/* 1 when the kernels can decode this type (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * IQ4_NL, Q4_K, Q5_K, Q6_K). */
int cf_type_supported(uint32_t type);

/* Device scratch bytes the CUBLAS path needs for M rows of w (0 for the kernel path). */
size_t cf_matmul_scratch_bytes(const struct cf_weight *w, int M);

/* Y[m * ldy + o] = sum_i W[o][i] * X[m * n_in + i], m < M, o < n_out. X: [M][n_in] f32.
 * blas and scratch may be NULL/0 (then the kernel path is used). Returns 0 or -1 (message
 * in cf_last_error()). */
int cf_matmul(cudaStream_t stream, cublasHandle_t blas, const struct cf_weight *w, const float *X,
              int M, float *Y, int ldy, enum cf_mm_mode mode, void *scratch, size_t scratch_bytes);

/* Y[i] = X · W[i]ᵀ for n (<= CF_MM_SET_MAX) weights of one type and n_in over the same X, in
 * one launch of the kernel path: each row computed exactly as cf_matmul's kernel computes it
 * (the same bits). geglu (n == 2, gate and up of one n_out): Y[0] = gelu(X·W[0]ᵀ) · (X·W[1]ᵀ)
 * as cf_geglu computes it from the two products; Y[1] and ldy[1] are unused. */
int cf_matmul_set(cudaStream_t stream, const struct cf_weight *const *w, int n, const float *X,
                  int M, float *const *Y, const int *ldy, int geglu);

#ifdef __cplusplus
}
#endif

#endif
