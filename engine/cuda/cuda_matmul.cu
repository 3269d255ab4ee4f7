/* cuda_matmul — see cuda_matmul.h. */
#include "engine/cuda/cuda_matmul.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "engine/cuda/cuda_mm.cuh"

template <int T, int TM>
__global__ void __launch_bounds__(CF_MM_WARPS * 32)
    cf_mm_kernel(const uint8_t *__restrict__ W, size_t row_bytes, int n_in, int n_out,
                 const float *__restrict__ X, int M, float *__restrict__ Y, int ldy) {
    __shared__ float xs[TM][CF_MM_CHUNKS * CF_MM_PITCH];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    /* 1-D grid, tile-fastest: the blocks that decode the same weight rows for different
     * activation tiles run back to back, so the rows come from L2 after the first tile. */
    const int n_tiles = (M + TM - 1) / TM;
    const int o = (int)(blockIdx.x / n_tiles) * CF_MM_WARPS + warp;
    const int m0 = (int)(blockIdx.x % n_tiles) * TM;
    const int tm = min(TM, M - m0);
    const uint8_t *row = W + (size_t)(o < n_out ? o : 0) * row_bytes;
    float acc[TM];
    cf_mm_warp<T, TM>(row, o < n_out, n_in, X, m0, tm, xs, acc);
    if (o < n_out && lane == 0) {
#pragma unroll
        for (int m = 0; m < TM; m++)
            if (m < tm) Y[(size_t)(m0 + m) * ldy + o] = acc[m];
    }
}

template <int T>
static int cf_mm_launch(cudaStream_t s, const struct cf_weight *w, const float *X, int M, float *Y,
                        int ldy) {
    const dim3 block(CF_MM_WARPS * 32);
    const long long groups = (w->n_out + CF_MM_WARPS - 1) / CF_MM_WARPS;
    const int tm = M == 1 ? 1 : M == 2 ? 2 : M <= 4 ? 4 : 8;
    const long long blocks = groups * ((M + tm - 1) / tm);
    if (blocks > 0x7fffffffLL) return cf_fail("cf_matmul: %lld blocks", blocks);
    const dim3 grid((unsigned)blocks);
    const uint8_t *W = static_cast<const uint8_t *>(w->data);
    switch (tm) {
    case 1:
        cf_mm_kernel<T, 1><<<grid, block, 0, s>>>(W, w->row_bytes, w->n_in, w->n_out, X, M, Y, ldy);
        break;
    case 2:
        cf_mm_kernel<T, 2><<<grid, block, 0, s>>>(W, w->row_bytes, w->n_in, w->n_out, X, M, Y, ldy);
        break;
    case 4:
        cf_mm_kernel<T, 4><<<grid, block, 0, s>>>(W, w->row_bytes, w->n_in, w->n_out, X, M, Y, ldy);
        break;
    default:
        cf_mm_kernel<T, 8><<<grid, block, 0, s>>>(W, w->row_bytes, w->n_in, w->n_out, X, M, Y, ldy);
        break;
    }
    return 0;
}

/* ---- cuBLAS path ------------------------------------------------------------------------- */

template <int T>
__global__ void cf_dq_half_kernel(const uint8_t *__restrict__ W, size_t row_bytes, int n_in,
                                  __half *__restrict__ out) {
    const int r = blockIdx.x;
    const uint8_t *row = W + (size_t)r * row_bytes;
    for (int c = threadIdx.x; c < n_in / 32; c += blockDim.x) {
        float v[32];
        cf_dq_chunk<T>(row, c, v);
        __half *o = out + (size_t)r * n_in + (size_t)c * 32;
#pragma unroll
        for (int k = 0; k < 32; k++)
            o[k] = __float2half_rn(v[k]);
    }
}

__global__ void cf_to_f16_kernel(const float *__restrict__ x, __half *__restrict__ y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2half_rn(x[i]);
}

__global__ void cf_to_bf16_kernel(const float *__restrict__ x, __nv_bfloat16 *__restrict__ y,
                                  size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16_rn(x[i]);
}

static size_t cf_align256(size_t n) {
    return (n + 255) & ~(size_t)255;
}

static int cf_weight_as_is(uint32_t type) {
    return type == QT_F16 || type == QT_BF16;
}

static unsigned cf_grid_1d(size_t n) {
    size_t g = (n + 255) / 256;
    return (unsigned)(g > 65535 ? 65535 : (g ? g : 1));
}

static int cf_mm_cublas(cudaStream_t s, cublasHandle_t blas, const struct cf_weight *w,
                        const float *X, int M, float *Y, int ldy, void *scratch) {
    uint8_t *sp = static_cast<uint8_t *>(scratch);
    const void *A = w->data;
    cudaDataType_t ab = CUDA_R_16F;
    if (w->type == QT_BF16) {
        ab = CUDA_R_16BF;
    } else if (w->type != QT_F16) {
        __half *wh = reinterpret_cast<__half *>(sp);
        sp += cf_align256((size_t)w->n_out * w->n_in * sizeof(__half));
        const unsigned thr = 128;
        switch (w->type) {
#define CF_CASE(TT)                                                                                \
    case TT:                                                                                       \
        cf_dq_half_kernel<TT><<<(unsigned)w->n_out, thr, 0, s>>>(                                  \
            static_cast<const uint8_t *>(w->data), w->row_bytes, w->n_in, wh);                     \
        break;
            CF_FOR_EACH_TYPE(CF_CASE)
#undef CF_CASE
        default:
            return cf_fail("cf_matmul: unsupported weight type %u", (unsigned)w->type);
        }
        if (CUDA_CHECK_LAUNCH()) return -1;
        A = wh;
    }
    const size_t nx = (size_t)M * w->n_in;
    if (ab == CUDA_R_16BF)
        cf_to_bf16_kernel<<<cf_grid_1d(nx), 256, 0, s>>>(X, reinterpret_cast<__nv_bfloat16 *>(sp),
                                                         nx);
    else
        cf_to_f16_kernel<<<cf_grid_1d(nx), 256, 0, s>>>(X, reinterpret_cast<__half *>(sp), nx);
    if (CUDA_CHECK_LAUNCH()) return -1;
    const float alpha = 1.0f, beta = 0.0f;
    if (CUBLAS_CHECK(cublasSetStream(blas, s))) return -1;
    /* Column-major view: Y(n_out × M, ld ldy) = Wᵀ · X with W (n_in × n_out, ld n_in) and
     * X (n_in × M, ld n_in). */
    if (CUBLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, w->n_out, M, w->n_in, &alpha, A,
                                  ab, w->n_in, sp, ab, w->n_in, &beta, Y, CUDA_R_32F, ldy,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)))
        return -1;
    return 0;
}

/* ---- C API ------------------------------------------------------------------------------- */

extern "C" int cf_type_supported(uint32_t type) {
    switch (type) {
#define CF_CASE(TT)                                                                                \
    case TT:                                                                                       \
        return 1;
        CF_FOR_EACH_TYPE(CF_CASE)
#undef CF_CASE
    default:
        return 0;
    }
}

extern "C" size_t cf_matmul_scratch_bytes(const struct cf_weight *w, int M) {
    size_t wb = cf_weight_as_is(w->type) ? 0 : cf_align256((size_t)w->n_out * w->n_in * 2);
    return wb + cf_align256((size_t)M * w->n_in * 2);
}

extern "C" int cf_matmul(cudaStream_t stream, cublasHandle_t blas, const struct cf_weight *w,
                         const float *X, int M, float *Y, int ldy, enum cf_mm_mode mode,
                         void *scratch, size_t scratch_bytes) {
    if (M <= 0) return 0;
    if (w->n_in <= 0 || w->n_in % 32 != 0 || w->n_out <= 0 || ldy < w->n_out)
        return cf_fail("cf_matmul: bad shape n_in=%d n_out=%d ldy=%d", w->n_in, w->n_out, ldy);
    const int can_blas = blas && scratch && scratch_bytes >= cf_matmul_scratch_bytes(w, M);
    if (mode == CF_MM_CUBLAS && !can_blas)
        return cf_fail("cf_matmul: cuBLAS path without handle or %zu bytes of scratch",
                       cf_matmul_scratch_bytes(w, M));
    if (mode == CF_MM_CUBLAS || (mode == CF_MM_AUTO && can_blas && M >= CF_MM_CUBLAS_MIN_ROWS))
        return cf_mm_cublas(stream, blas, w, X, M, Y, ldy, scratch);
    switch (w->type) {
#define CF_CASE(TT)                                                                                \
    case TT:                                                                                       \
        if (cf_mm_launch<TT>(stream, w, X, M, Y, ldy)) return -1;                                  \
        break;
        CF_FOR_EACH_TYPE(CF_CASE)
#undef CF_CASE
    default:
        return cf_fail("cf_matmul: unsupported weight type %u", (unsigned)w->type);
    }
    return CUDA_CHECK_LAUNCH();
}
