/* cuda_norm — see cuda_norm.h. */
#include "engine/cuda/cuda_norm.h"

#define CF_NORM_THREADS 256

__global__ void __launch_bounds__(CF_NORM_THREADS)
    cf_rms_norm_kernel(const float *x, int ld_x, const float *__restrict__ w, const float *res,
                       int ld_res, float *y, int ld_y, int n, float eps) {
    __shared__ double part[CF_NORM_THREADS / 32];
    const int r = blockIdx.x;
    const float *xr = x + (size_t)r * ld_x;
    /* Squares in f32, their sum in double (as ggml's CPU rms_norm and engine/kernels/vec.h). */
    double s = 0.0;
    for (int i = threadIdx.x; i < n; i += CF_NORM_THREADS)
        s += (double)(xr[i] * xr[i]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, off);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
    __syncthreads();
    double tot = 0.0;
#pragma unroll
    for (int k = 0; k < CF_NORM_THREADS / 32; k++)
        tot += part[k];
    const float mean = (float)(tot / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    float *yr = y + (size_t)r * ld_y;
    const float *rr = res ? res + (size_t)r * ld_res : nullptr;
    for (int i = threadIdx.x; i < n; i += CF_NORM_THREADS) {
        float v = xr[i] * scale;
        if (w) v = v * w[i];
        if (rr) v = rr[i] + v;
        yr[i] = v;
    }
}

extern "C" int cf_rms_norm(cudaStream_t stream, const float *x, int ld_x, const float *w,
                           const float *res, int ld_res, float *y, int ld_y, int n, int rows,
                           float eps) {
    if (rows <= 0) return 0;
    if (n <= 0 || ld_x < n || ld_y < n || (res && ld_res < n))
        return cf_fail("cf_rms_norm: bad shape n=%d ld_x=%d ld_y=%d", n, ld_x, ld_y);
    cf_rms_norm_kernel<<<(unsigned)rows, CF_NORM_THREADS, 0, stream>>>(x, ld_x, w, res, ld_res, y,
                                                                       ld_y, n, eps);
    return CUDA_CHECK_LAUNCH();
}
