/*
 * cuda_topk — a logit row's best candidates on the device, for rows the host samples with
 * top_k (engine/forward.h FWD_ROW_TOPK): per selected row, the CF_TOPK_MAX best ids by
 * Y[row][i] × scale (one round-to-nearest multiply, __fmul_rn: the host's `l * inv_t`),
 * best first, ties to the lower id, NaNs never chosen (id -1, value NaN pad a row with fewer
 * non-NaN ids), exactly engine/backend.c be_topk_row's output.
 *
 * One block per row: a radix select over an order-preserving 32-bit key of the scaled value
 * (NaN lowest, −0 as +0) finds the CF_TOPK_MAX-th best key in four 8-bit passes (shared
 * histograms, exact counts); a fifth pass in id order collects every id above it and the
 * lowest ids equal to it; the collected set is ranked by (key, id). Counts and ranks do not
 * depend on thread timing, so the result is deterministic and depends on the row only.
 *
 * Asynchronous on the given stream; device pointers. Return 0 or -1 (cf_last_error()).
 */
#ifndef GEMMAD_CUDA_TOPK_H
#define GEMMAD_CUDA_TOPK_H

#include <stdint.h>

#include "engine/cuda/cuda_check.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CF_TOPK_MAX 64 /* = BE_TOPK_MAX */

/* For j < M: the candidates of row rows[j] of Y (ldy floats apart, n wide) scaled by
 * scale[j] into ids[j * CF_TOPK_MAX + ...] and vals[j * CF_TOPK_MAX + ...]. */
int cf_topk_rows(cudaStream_t stream, const float *Y, int ldy, int n, const int32_t *rows,
                 const float *scale, int M, int32_t *ids, float *vals);

#ifdef __cplusplus
}
#endif

#endif
