/*
 * cuda_getrows — row gather with dequantization from a packed device matrix: the embedding
 * lookup (token_embd row t, scaled by sqrt(n_embd); Gemma 4's per-layer table) and, in the
 * tests, whole-matrix dequantization to compare with the CPU _ref decoders.
 *
 * Asynchronous on the given stream; pointers are device pointers.
 */
#ifndef GEMMAD_CUDA_GETROWS_H
#define GEMMAD_CUDA_GETROWS_H

#include "engine/cuda/cuda_matmul.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[r * ld_out + i] = W[ids[r]][i] * scale for r < n_rows, i < n_in (ids == NULL: row r).
 * Ids must be < w->n_out (the caller validates them). Returns 0 or -1. */
int cf_get_rows(cudaStream_t stream, const struct cf_weight *w, const int32_t *ids, int n_rows,
                float scale, float *out, int ld_out);

/* The device decoder run on the host: y[0..31] = elements [32c, 32c+32) of a packed row.
 * Lets the tests check the kernels' bit layouts on machines without a GPU. 0, or -1 for an
 * unsupported type. */
int cf_dequant_chunk_host(uint32_t type, const void *row, int c, float *y);

#ifdef __cplusplus
}
#endif

#endif
