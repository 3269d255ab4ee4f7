/*
 * cuda_mm.cuh — the dequantizing matmul's per-warp core (cf_mm_warp), shared by the single
 * matmul (cuda_matmul.cu) and the fused launches (cuda_mmset.cu), so both compute every row
 * with the same arithmetic (the same bits). Internal to engine/cuda/.
 */
#ifndef GEMMAD_CUDA_MM_CUH
#define GEMMAD_CUDA_MM_CUH

#include "engine/cuda/cuda_dequant.cuh"

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

#endif
