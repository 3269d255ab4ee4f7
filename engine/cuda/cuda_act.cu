/* cuda_act — see cuda_act.h. */
#include "engine/cuda/cuda_act.h"

#include <cuda_fp16.h>
#include <math.h>

#include "engine/cuda/cuda_gelu.cuh"

static unsigned cf_blocks(size_t n, unsigned thr) {
    size_t g = (n + thr - 1) / thr;
    return (unsigned)(g > 65535 ? 65535 : (g ? g : 1));
}

__global__ void cf_geglu_kernel(float *g, int ld_g, const float *__restrict__ u, int ld_u, int n) {
    const int r = blockIdx.y;
    float *gr = g + (size_t)r * ld_g;
    const float *ur = u + (size_t)r * ld_u;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        gr[i] = cf_gelu(gr[i]) * ur[i];
}

__global__ void cf_softcap_kernel(float *x, size_t n, float cap) {
    const float inv = 1.0f / cap;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = cap * tanhf(x[i] * inv);
}

__global__ void cf_scale_kernel(float *x, size_t n, float s) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = x[i] * s;
}

__global__ void cf_add_scale_kernel(float *y, const float *a, const float *b, size_t n, float s) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = (a[i] + b[i]) * s;
}

__global__ void cf_gather_rows_kernel(const float *__restrict__ x, int ld_x,
                                      const int32_t *__restrict__ idx, int n_cols,
                                      float *__restrict__ out, int ld_out) {
    const int j = blockIdx.x;
    const float *src = x + (size_t)idx[j] * ld_x;
    float *dst = out + (size_t)j * ld_out;
    for (int i = threadIdx.x; i < n_cols; i += blockDim.x)
        dst[i] = src[i];
}

extern "C" int cf_geglu(cudaStream_t stream, float *g, int ld_g, const float *u, int ld_u, int n,
                        int rows) {
    if (rows <= 0 || n <= 0) return 0;
    if (rows > 65535) return cf_fail("cf_geglu: %d rows > 65535", rows);
    const unsigned thr = 256;
    const unsigned gx = (unsigned)((n + thr - 1) / thr);
    cf_geglu_kernel<<<dim3(gx, (unsigned)rows), thr, 0, stream>>>(g, ld_g, u, ld_u, n);
    return CUDA_CHECK_LAUNCH();
}

extern "C" int cf_softcap(cudaStream_t stream, float *x, size_t count, float cap) {
    if (!count) return 0;
    if (!(cap > 0.0f)) return cf_fail("cf_softcap: cap %g must be > 0", (double)cap);
    cf_softcap_kernel<<<cf_blocks(count, 256), 256, 0, stream>>>(x, count, cap);
    return CUDA_CHECK_LAUNCH();
}

extern "C" int cf_scale(cudaStream_t stream, float *x, size_t count, float s) {
    if (!count) return 0;
    cf_scale_kernel<<<cf_blocks(count, 256), 256, 0, stream>>>(x, count, s);
    return CUDA_CHECK_LAUNCH();
}

extern "C" int cf_add_scale(cudaStream_t stream, float *y, const float *a, const float *b,
                            size_t count, float s) {
    if (!count) return 0;
    cf_add_scale_kernel<<<cf_blocks(count, 256), 256, 0, stream>>>(y, a, b, count, s);
    return CUDA_CHECK_LAUNCH();
}

extern "C" int cf_gather_rows(cudaStream_t stream, const float *x, int ld_x, const int32_t *idx,
                              int n_idx, int n_cols, float *out, int ld_out) {
    if (n_idx <= 0) return 0;
    cf_gather_rows_kernel<<<(unsigned)n_idx, 256, 0, stream>>>(x, ld_x, idx, n_cols, out, ld_out);
    return CUDA_CHECK_LAUNCH();
}
