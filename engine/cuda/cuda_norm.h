/*
 * cuda_norm — RMS normalization of rows on the GPU, as ggml computes it:
 *   y[r][i] = res[r][i] + (x[r][i] * (1 / sqrt(mean_i(x[r][i]^2) + eps))) * w[i]
 * with w == NULL meaning no weight (Gemma 4's v norm) and res == NULL meaning no residual.
 * The fused residual covers Gemma's post-norms (x = x + RMS(a, post_norm)). y may alias x or
 * res (each element is read before the same thread writes it).
 *
 * One block per row with a fixed reduction order, so a row's result never depends on the
 * other rows. Asynchronous on the given stream; device pointers.
 */
#ifndef GEMMAD_CUDA_NORM_H
#define GEMMAD_CUDA_NORM_H

#include <stdint.h>

#include "engine/cuda/cuda_check.h"

#ifdef __cplusplus
extern "C" {
#endif

int cf_rms_norm(cudaStream_t stream, const float *x, int ld_x, const float *w, const float *res,
                int ld_res, float *y, int ld_y, int n, int rows, float eps);

/* Per row: x = x + RMS(t) * w_post, then h = RMS(x) * w_next: a post-norm residual and the
 * next sublayer's input norm in one launch (the same bits as cf_rms_norm twice). */
int cf_post_norm_next(cudaStream_t stream, const float *t, int ld_t, const float *w_post, float *x,
                      int ld_x, const float *w_next, float *h, int ld_h, int n, int rows,
                      float eps);

/* In place, per row r and head h of x ([rows][ld], head h at h*hd): the head's RMS norm with
 * weight w (as cf_rms_norm over rows*n_heads rows of hd), then its NEOX RoPE (as cf_rope_neox
 * with these arguments): Gemma 3/4's q/k norm and rotation in one launch, the same bits. */
int cf_norm_rope(cudaStream_t stream, float *x, int ld, int n_heads, int hd, const float *w,
                 float eps, int n_rot, const int32_t *pos, int rows, float base, float freq_scale,
                 const float *freq_div);

#ifdef __cplusplus
}
#endif

#endif
