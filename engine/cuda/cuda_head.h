/*
 * cuda_head — the LM head on the GPU: logits = X · Wᵀ over the whole vocabulary for every
 * selected row of a step, and the greedy choice (argmax) of logit rows on the device.
 *
 * cf_head reads each weight tile once for all rows of the step: a block decodes 64 output
 * rows × 64 columns of W into shared memory once and multiplies them with up to 64
 * activation rows staged beside them (each thread 4 outputs × up to 4 rows). Every output
 * element is one sequential fused multiply-add chain over k = 0 .. n_in - 1 starting at 0,
 * whatever M and the tiling are, so a row's logits never depend on the other rows of the
 * step (batch invariance) — the same contract as cf_matmul's kernel path, with a different
 * (sequential) order, so the two do not give the same bits.
 *
 * cf_argmax_rows: ids[m] = the first index of the largest of Y[m][0 .. n) (NaNs never win;
 * 0 when nothing beats -inf), scheduler/sample.c smp_argmax's rule.
 *
 * Asynchronous on the given stream; device pointers. Return 0 or -1 (cf_last_error()).
 */
#ifndef GEMMAD_CUDA_HEAD_H
#define GEMMAD_CUDA_HEAD_H

#include <stddef.h>
#include <stdint.h>

#include "engine/cuda/cuda_matmul.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Y[m * ldy + o] = sum_i W[o][i] * X[m * n_in + i] (sequential fma order), m < M, o < n_out. */
int cf_head(cudaStream_t stream, const struct cf_weight *w, const float *X, int M, float *Y,
            int ldy);

/* ids[m] = argmax of Y[m * ldy + 0 .. n), m < M (see above). */
int cf_argmax_rows(cudaStream_t stream, const float *Y, int ldy, int n, int M, int32_t *ids);

#ifdef __cplusplus
}
#endif

#endif
