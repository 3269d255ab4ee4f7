/*
 * cuda_rope — NEOX-style rotary position embedding (rotate-half, as every Gemma uses) applied
 * in place to rows of heads:
 *   for each row r, head h, i < n_rot/2, with p = pos[r]:
 *     theta = freq_scale * (p * base^(-2i/n_rot) / freq_div[i])      (freq_div NULL: 1)
 *     (x[i], x[i + n_rot/2]) rotated by theta; dims >= n_rot are left alone.
 * with p * base^(-2i/n_rot) built by repeated f32 multiplication like ggml's CPU rope cache
 * (ext_factor 0: no YaRN). Per-layer base, scale,
 * n_rot and divisors (Gemma 4's rope_freqs) come from the caller.
 *
 * x: [rows][ld] with head h at x + r*ld + h*hd. Asynchronous; device pointers.
 */
#ifndef GEMMAD_CUDA_ROPE_H
#define GEMMAD_CUDA_ROPE_H

#include <stdint.h>

#include "engine/cuda/cuda_check.h"

#ifdef __cplusplus
extern "C" {
#endif

int cf_rope_neox(cudaStream_t stream, float *x, int ld, int n_heads, int hd, int n_rot,
                 const int32_t *pos, int rows, float base, float freq_scale, const float *freq_div);

#ifdef __cplusplus
}
#endif

#endif
