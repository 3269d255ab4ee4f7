/*
 * cuda_act — element-wise operations of the Gemma forward pass on the GPU:
 * GELU(tanh)-GeGLU, softcap, scaling, scaled sums, and the gather of selected rows.
 * Formulas follow ggml's CPU path: gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2)))
 * evaluated on x rounded to fp16 with the result rounded to fp16 (its lookup table; 0 below
 * -10, identity above 10),
 * softcap(x) = cap * tanh(x * (1/cap)).
 *
 * Asynchronous on the given stream; device pointers.
 */
#ifndef GEMMAD_CUDA_ACT_H
#define GEMMAD_CUDA_ACT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/cuda/cuda_check.h"

#ifdef __cplusplus
extern "C" {
#endif

/* g[r][i] = gelu(g[r][i]) * u[r][i] for r < rows, i < n (row strides ld_g, ld_u). */
int cf_geglu(cudaStream_t stream, float *g, int ld_g, const float *u, int ld_u, int n, int rows);
/* x[i] = cap * tanh(x[i] / cap), i < count. */
int cf_softcap(cudaStream_t stream, float *x, size_t count, float cap);
/* x[i] *= s. */
int cf_scale(cudaStream_t stream, float *x, size_t count, float s);
/* y[i] = (a[i] + b[i]) * s (y may alias a or b). */
int cf_add_scale(cudaStream_t stream, float *y, const float *a, const float *b, size_t count,
                 float s);
/* out[j][i] = x[idx[j]][i] for j < n_idx, i < n_cols. */
int cf_gather_rows(cudaStream_t stream, const float *x, int ld_x, const int32_t *idx, int n_idx,
                   int n_cols, float *out, int ld_out);

#ifdef __cplusplus
}
#endif

#endif
