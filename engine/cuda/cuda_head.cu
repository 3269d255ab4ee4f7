/* cuda_head — see cuda_head.h. */
#include "engine/cuda/cuda_head.h"

#include <math.h>

#include "engine/cuda/cuda_dequant.cuh"

#define CF_HEAD_THREADS 256
#define CF_HEAD_OT 64 /* output rows per block */
#define CF_HEAD_KT 64 /* columns per k-tile: two 32-element chunks */
#define CF_HEAD_P (CF_HEAD_KT + 1) /* padded shared-memory row (no bank conflicts) */

/*
 * Thread t owns outputs o0 + (t % 16) + 16 i (i < 4) × rows m0 + (t / 16) + 16 j (j < MT/16).
 * For each k-tile the first 128 threads decode one chunk each of the block's 64 weight rows
 * into ws, all threads stage the activation tile in xs, then every busy thread runs its fma
 * chains over the tile's columns in order. MT (16 or 64) is only a tiling choice: the chain
 * of each output is the same.
 */
template <int T, int MT>
__global__ void __launch_bounds__(CF_HEAD_THREADS)
    cf_head_kernel(const uint8_t *__restrict__ W, size_t row_bytes, int n_in, int n_out,
                   const float *__restrict__ X, int M, float *__restrict__ Y, int ldy) {
    constexpr int MJ = MT / 16;
    __shared__ float ws[CF_HEAD_OT * CF_HEAD_P];
    __shared__ float xs[MT * CF_HEAD_P];
    const int tid = threadIdx.x;
    const int og = tid & 15, mg = tid >> 4;
    const int o0 = (int)blockIdx.x * CF_HEAD_OT;
    for (int m0 = 0; m0 < M; m0 += MT) {
        const int mt = min(MT, M - m0);
        const bool busy = mg < mt;
        float acc[4][MJ];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < MJ; j++)
                acc[i][j] = 0.0f;
        for (int kt = 0; kt < n_in; kt += CF_HEAD_KT) {
            const int kn = min(CF_HEAD_KT, n_in - kt); /* 32 or 64 */
            __syncthreads(); /* the previous tile is consumed */
            if (tid < 2 * CF_HEAD_OT) {
                const int r = tid >> 1, cc = tid & 1;
                if (cc * 32 < kn) {
                    const int o = o0 + r;
                    float v[32];
                    cf_dq_chunk<T>(W + (size_t)(o < n_out ? o : 0) * row_bytes, (kt >> 5) + cc,
                                   v);
#pragma unroll
                    for (int k = 0; k < 32; k++)
                        ws[r * CF_HEAD_P + cc * 32 + k] = v[k];
                }
            }
            for (int i = tid; i < mt * kn; i += CF_HEAD_THREADS) {
                const int m = i / kn, k = i - m * kn;
                xs[m * CF_HEAD_P + k] = X[(size_t)(m0 + m) * n_in + kt + k];
            }
            __syncthreads();
            if (busy) {
#pragma unroll 4
                for (int k = 0; k < kn; k++) {
                    float w[4], x[MJ];
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        w[i] = ws[(og + 16 * i) * CF_HEAD_P + k];
#pragma unroll
                    for (int j = 0; j < MJ; j++) /* rows past mt read stale values, never stored */
                        x[j] = xs[(mg + 16 * j) * CF_HEAD_P + k];
#pragma unroll
                    for (int i = 0; i < 4; i++)
#pragma unroll
                        for (int j = 0; j < MJ; j++)
                            acc[i][j] = __fmaf_rn(w[i], x[j], acc[i][j]);
                }
            }
        }
        if (busy) {
#pragma unroll
            for (int j = 0; j < MJ; j++) {
                const int m = mg + 16 * j;
                if (m >= mt) continue;
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int o = o0 + og + 16 * i;
                    if (o < n_out) Y[(size_t)(m0 + m) * ldy + o] = acc[i][j];
                }
            }
        }
    }
}

template <int T>
static void cf_head_launch(cudaStream_t s, const struct cf_weight *w, const float *X, int M,
                           float *Y, int ldy) {
    const unsigned blocks = (unsigned)((w->n_out + CF_HEAD_OT - 1) / CF_HEAD_OT);
    const uint8_t *W = static_cast<const uint8_t *>(w->data);
    if (M <= 16)
        cf_head_kernel<T, 16><<<blocks, CF_HEAD_THREADS, 0, s>>>(W, w->row_bytes, w->n_in,
                                                                  w->n_out, X, M, Y, ldy);
    else
        cf_head_kernel<T, 64><<<blocks, CF_HEAD_THREADS, 0, s>>>(W, w->row_bytes, w->n_in,
                                                                  w->n_out, X, M, Y, ldy);
}

extern "C" int cf_head(cudaStream_t stream, const struct cf_weight *w, const float *X, int M,
                       float *Y, int ldy) {
    if (M <= 0) return 0;
    if (w->n_in <= 0 || w->n_in % 32 != 0 || w->n_out <= 0 || ldy < w->n_out)
        return cf_fail("cf_head: bad shape n_in=%d n_out=%d ldy=%d", w->n_in, w->n_out, ldy);
    switch (w->type) {
#define CF_CASE(TT)                                                                                \
    case TT:                                                                                       \
        cf_head_launch<TT>(stream, w, X, M, Y, ldy);                                               \
        break;
        CF_FOR_EACH_TYPE(CF_CASE)
#undef CF_CASE
    default:
        return cf_fail("cf_head: unsupported weight type %u", (unsigned)w->type);
    }
    return CUDA_CHECK_LAUNCH();
}

/* ---- argmax ------------------------------------------------------------------------------ */

#define CF_ARGMAX_THREADS 1024

/* (v, i) beats (bv, bi): larger, or equal and earlier. NaN never beats anything (both
 * comparisons are false), and nothing beats a NaN-free best by being NaN. */
__device__ __forceinline__ bool cf_beats(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

/* One block per row: strided scan, then a tree over the block's candidates. */
__global__ void __launch_bounds__(CF_ARGMAX_THREADS)
    cf_argmax_kernel(const float *__restrict__ Y, int ldy, int n, int32_t *__restrict__ ids) {
    __shared__ float sv[CF_ARGMAX_THREADS / 32];
    __shared__ int si[CF_ARGMAX_THREADS / 32];
    const float *y = Y + (size_t)blockIdx.x * ldy;
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < n; i += CF_ARGMAX_THREADS) {
        const float v = y[i];
        if (cf_beats(v, i, bv, bi)) bv = v, bi = i;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float v = __shfl_xor_sync(0xffffffffu, bv, off);
        const int i = __shfl_xor_sync(0xffffffffu, bi, off);
        if (cf_beats(v, i, bv, bi)) bv = v, bi = i;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sv[warp] = bv, si[warp] = bi;
    __syncthreads();
    if (warp == 0) {
        bv = sv[lane];
        bi = si[lane];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            const float v = __shfl_xor_sync(0xffffffffu, bv, off);
            const int i = __shfl_xor_sync(0xffffffffu, bi, off);
            if (cf_beats(v, i, bv, bi)) bv = v, bi = i;
        }
        /* nothing above -inf (all -inf or NaN): id 0, as smp_argmax */
        if (lane == 0) ids[blockIdx.x] = bv == -INFINITY || bi >= n ? 0 : bi;
    }
}

extern "C" int cf_argmax_rows(cudaStream_t stream, const float *Y, int ldy, int n, int M,
                              int32_t *ids) {
    if (M <= 0) return 0;
    if (n <= 0 || ldy < n) return cf_fail("cf_argmax_rows: bad shape n=%d ldy=%d", n, ldy);
    cf_argmax_kernel<<<(unsigned)M, CF_ARGMAX_THREADS, 0, stream>>>(Y, ldy, n, ids);
    return CUDA_CHECK_LAUNCH();
}
