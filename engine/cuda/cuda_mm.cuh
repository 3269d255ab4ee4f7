/*
 * cuda_mm.cuh — the dequantizing matmul's per-warp core (cf_mm_warp), shared by the single
 * matmul (cuda_matmul.cu) and the fused launches (cuda_mmset.cu), so both compute every row
 * with the same arithmetic (the same bits). Internal to engine/cuda/.
 */
#ifndef GEMMAD_CUDA_MM_CUH
#define GEMMAD_CUDA_MM_CUH

#include <string.h>

#include "engine/cuda/cuda_dequant.cuh"
#include "engine/cuda/cuda_matmul.h"

#define CF_MM_WARPS 8   /* output rows per block (one warp each) */
#define CF_MM_CHUNKS 32 /* 32-element chunks per k-tile: one per lane */
#define CF_MM_KT (CF_MM_CHUNKS * 32)
#define CF_MM_PITCH 33 /* padded chunk stride in shared memory (no bank conflicts) */

/*
 * Block (CF_MM_WARPS warps) = CF_MM_WARPS output rows × a tile of TM activation rows.
 * For each k-tile of 1024 elements the block stages X[m0..m0+TM)[kt..kt+1024) in shared
 * memory; lane l of each warp decodes chunk kt/32 + l of its weight row once and dots it with
 * every staged activation row. Per activation row the sum order is fixed (see the header), so
 * TM and M never change a result.
 *
 * cf_mm_warp: one warp's sums for its weight row `row` (`valid` 0: a row past n_out, which
 * only helps stage) and activation rows m0 .. m0 + tm; afterwards every lane holds the sums.
 * Every thread of the block must call it (it synchronises the block).
 */
template <int T, int TM>
__device__ __forceinline__ void cf_mm_warp(const uint8_t *__restrict__ row, bool valid, int n_in,
                                           const float *__restrict__ X, int m0, int tm,
                                           float (*xs)[CF_MM_CHUNKS * CF_MM_PITCH],
                                           float acc[TM]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int m = 0; m < TM; m++)
        acc[m] = 0.0f;
    for (int kt = 0; kt < n_in; kt += CF_MM_KT) {
        const int kn = min(CF_MM_KT, n_in - kt); /* a multiple of 32 */
        const bool act = valid && lane * 32 < kn;
        /* The weight chunk is loaded before the activation tile is staged, so the two
         * memory round trips overlap instead of following each other. */
        float w[32];
        if (act) cf_dq_chunk<T>(row, (kt >> 5) + lane, w);
        __syncthreads(); /* the previous tile is consumed */
        if (kn == CF_MM_KT) {
            for (int i = threadIdx.x; i < tm * CF_MM_KT; i += blockDim.x) {
                const int m = i / CF_MM_KT, k = i % CF_MM_KT;
                xs[m][(k >> 5) * CF_MM_PITCH + (k & 31)] = X[(size_t)(m0 + m) * n_in + kt + k];
            }
        } else { /* a short last tile: only its kn columns are staged and read */
            for (int i = threadIdx.x; i < tm * kn; i += blockDim.x) {
                const int m = i / kn, k = i % kn;
                xs[m][(k >> 5) * CF_MM_PITCH + (k & 31)] = X[(size_t)(m0 + m) * n_in + kt + k];
            }
        }
        __syncthreads();
        if (act) {
#pragma unroll
            for (int m = 0; m < TM; m++) {
                if (m < tm) {
                    const float *xp = &xs[m][lane * CF_MM_PITCH];
                    float s = 0.0f;
#pragma unroll
                    for (int k = 0; k < 32; k++)
                        s += w[k] * xp[k];
                    acc[m] += s;
                }
            }
        }
    }
#pragma unroll
    for (int m = 0; m < TM; m++) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], off);
    }
}

/* Up to CF_MM_SET_MAX weights of one type and n_in over the same input in one launch (the
 * argument of cf_matmul_set's and cf_mmvq_matmul_set's kernels): the blocks of weight i
 * follow those of weight i - 1, CF_MM_WARPS rows per block. */
struct cf_mm_set {
    const uint8_t *W[CF_MM_SET_MAX];
    float *Y[CF_MM_SET_MAX];
    size_t row_bytes[CF_MM_SET_MAX];
    int n_out[CF_MM_SET_MAX], ldy[CF_MM_SET_MAX], groups[CF_MM_SET_MAX];
    int n;
};

/* Checks the weights of a set (one type and n_in; geglu: two of one n_out, Y[1] unused) and
 * fills S. Returns 0 or -1 (cf_fail with `who`). Host code. */
static inline int cf_mm_set_make(const char *who, const struct cf_weight *const *w, int n,
                                 float *const *Y, const int *ldy, int geglu,
                                 struct cf_mm_set *S) {
    if (n < 1 || n > CF_MM_SET_MAX || (geglu && n != 2))
        return cf_fail("%s: %d weights (geglu %d)", who, n, geglu);
    memset(S, 0, sizeof *S);
    S->n = n;
    for (int i = 0; i < n; i++) {
        if (w[i]->type != w[0]->type || w[i]->n_in != w[0]->n_in || w[i]->n_in <= 0 ||
            w[i]->n_in % 32 || w[i]->n_out <= 0 || (geglu && w[i]->n_out != w[0]->n_out) ||
            (!(geglu && i == 1) && ldy[i] < w[i]->n_out))
            return cf_fail("%s: weight %d does not match (type %u/%u, n_in %d/%d)", who, i,
                           (unsigned)w[i]->type, (unsigned)w[0]->type, w[i]->n_in, w[0]->n_in);
        S->W[i] = static_cast<const uint8_t *>(w[i]->data);
        S->Y[i] = Y[i];
        S->row_bytes[i] = w[i]->row_bytes;
        S->n_out[i] = w[i]->n_out;
        S->ldy[i] = ldy[i];
        S->groups[i] = (w[i]->n_out + CF_MM_WARPS - 1) / CF_MM_WARPS;
    }
    return 0;
}

#endif
