/* cuda_mmset — cf_matmul_set (cuda_matmul.h): several matmuls over one input in one launch.
 * Its own translation unit so that its kernels compile in parallel with cuda_matmul.cu's. */
#include "engine/cuda/cuda_matmul.h"

#include <string.h>

#include "engine/cuda/cuda_gelu.cuh"
#include "engine/cuda/cuda_mmset.cuh"

/* The blocks of weight i follow those of weight i - 1 (struct cf_mm_set, cuda_mm.cuh), each
 * block within one weight, so every row is computed exactly as cf_mm_kernel computes it.
 * GEGLU: two weights (gate, up); the warp of row o computes both and writes gelu(gate) * up,
 * as cf_geglu would, into Y[0]. */
template <int T, int TM, bool GEGLU>
__global__ void __launch_bounds__(CF_MM_WARPS * 32)
    cf_mm_set_kernel(struct cf_mm_set S, int n_in, const float *__restrict__ X, int M) {
    __shared__ float xs[TM][CF_MM_CHUNKS * CF_MM_PITCH];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int n_tiles = (M + TM - 1) / TM;
    int g = (int)(blockIdx.x / n_tiles), i = 0;
    while (i + 1 < S.n && g >= S.groups[i]) { /* uniform over the block */
        g -= S.groups[i];
        i++;
    }
    const int o = g * CF_MM_WARPS + warp;
    const int m0 = (int)(blockIdx.x % n_tiles) * TM;
    const int tm = min(TM, M - m0);
    const bool valid = o < S.n_out[i];
    float acc[TM];
    cf_mm_warp<T, TM>(S.W[i] + (size_t)(valid ? o : 0) * S.row_bytes[i], valid, n_in, X, m0, tm,
                      xs, acc);
    if (GEGLU) {
        float up[TM];
        cf_mm_warp<T, TM>(S.W[1] + (size_t)(valid ? o : 0) * S.row_bytes[1], valid, n_in, X, m0,
                          tm, xs, up);
#pragma unroll
        for (int m = 0; m < TM; m++)
            acc[m] = cf_gelu(acc[m]) * up[m];
    }
    if (valid && lane == 0) {
#pragma unroll
        for (int m = 0; m < TM; m++)
            if (m < tm) S.Y[i][(size_t)(m0 + m) * S.ldy[i] + o] = acc[m];
    }
}

template <int T, int TM>
static void cf_mm_set_go(cudaStream_t s, unsigned blocks, const struct cf_mm_set &S, int n_in,
                         const float *X, int M, int geglu) {
    if (geglu)
        cf_mm_set_kernel<T, TM, true><<<blocks, CF_MM_WARPS * 32, 0, s>>>(S, n_in, X, M);
    else
        cf_mm_set_kernel<T, TM, false><<<blocks, CF_MM_WARPS * 32, 0, s>>>(S, n_in, X, M);
}

template <int T>
static int cf_mm_set_launch(cudaStream_t s, const struct cf_mm_set &S, int n_in, const float *X,
                            int M, int geglu) {
    /* tiles of 1 or 8 rows only (a row's arithmetic does not depend on the tile): half the
     * instantiations of cf_matmul's four tile sizes, for compile time */
    const int tm = M == 1 ? 1 : 8;
    long long groups = 0;
    for (int i = 0; i < (geglu ? 1 : S.n); i++)
        groups += S.groups[i];
    const long long blocks = groups * ((M + tm - 1) / tm);
    if (blocks > 0x7fffffffLL) return cf_fail("cf_matmul_set: %lld blocks", blocks);
    if (tm == 1)
        cf_mm_set_go<T, 1>(s, (unsigned)blocks, S, n_in, X, M, geglu);
    else
        cf_mm_set_go<T, 8>(s, (unsigned)blocks, S, n_in, X, M, geglu);
    return 0;
}

extern "C" int cf_matmul_set(cudaStream_t stream, const struct cf_weight *const *w, int n,
                             const float *X, int M, float *const *Y, const int *ldy, int geglu) {
    if (M <= 0) return 0;
    struct cf_mm_set S;
    if (cf_mm_set_make("cf_matmul_set", w, n, Y, ldy, geglu, 0, &S)) return -1;
    switch (w[0]->type) {
#define CF_CASE(TT)                                                                                \
    case TT:                                                                                       \
        if (cf_mm_set_launch<TT>(stream, S, w[0]->n_in, X, M, geglu)) return -1;                   \
        break;
        CF_FOR_EACH_TYPE(CF_CASE)
#undef CF_CASE
    default:
        return cf_fail("cf_matmul_set: unsupported weight type %u", (unsigned)w[0]->type);
    }
    return CUDA_CHECK_LAUNCH();
}
