/* cuda_norm — see cuda_norm.h. */
#include "engine/cuda/cuda_norm.h"

#include <math.h>

#include "engine/cuda/cuda_norm.cuh"
#include "engine/cuda/cuda_rope.cuh"

__global__ void __launch_bounds__(CF_NORM_THREADS)
    cf_rms_norm_kernel(const float *x, int ld_x, const float *__restrict__ w, const float *res,
                       int ld_res, float *y, int ld_y, int n, float eps) {
    const int r = blockIdx.x;
    const float *xr = x + (size_t)r * ld_x;
    const float scale = cf_rms_scale(xr, n, eps);
    float *yr = y + (size_t)r * ld_y;
    const float *rr = res ? res + (size_t)r * ld_res : nullptr;
    /* explicit roundings: never contracted into an fma, so cf_post_norm_next_kernel computes
     * the same bits */
    for (int i = threadIdx.x; i < n; i += CF_NORM_THREADS) {
        float v = __fmul_rn(xr[i], scale);
        if (w) v = __fmul_rn(v, w[i]);
        if (rr) v = __fadd_rn(rr[i], v);
        yr[i] = v;
    }
}

/* One block per row: x = x + RMS(t) * w_post (as cf_rms_norm_kernel with res = y = x), then
 * h = RMS(x) * w_next (as cf_rms_norm_kernel without res). */
__global__ void __launch_bounds__(CF_NORM_THREADS)
    cf_post_norm_next_kernel(const float *t, int ld_t, const float *__restrict__ w_post, float *x,
                             int ld_x, const float *__restrict__ w_next, float *h, int ld_h, int n,
                             float eps) {
    const int r = blockIdx.x;
    const float *tr = t + (size_t)r * ld_t;
    float *xr = x + (size_t)r * ld_x;
    const float s1 = cf_rms_scale(tr, n, eps);
    for (int i = threadIdx.x; i < n; i += CF_NORM_THREADS)
        xr[i] = __fadd_rn(xr[i], __fmul_rn(__fmul_rn(tr[i], s1), w_post[i]));
    __syncthreads(); /* cf_rms_scale's shared partials are reused */
    const float s2 = cf_rms_scale(xr, n, eps);
    float *hr = h + (size_t)r * ld_h;
    for (int i = threadIdx.x; i < n; i += CF_NORM_THREADS)
        hr[i] = __fmul_rn(__fmul_rn(xr[i], s2), w_next[i]);
}

/* One block per (row, head): the head's RMS norm in place (as cf_rms_norm_kernel), then its
 * NEOX RoPE (as cf_rope_neox_kernel). */
__global__ void __launch_bounds__(CF_NORM_THREADS)
    cf_norm_rope_kernel(float *x, int ld, int hd, const float *__restrict__ w, float eps,
                        int n_rot, const int32_t *__restrict__ pos, float theta_scale,
                        float freq_scale, const float *__restrict__ freq_div) {
    const int r = blockIdx.x, h = blockIdx.y;
    float *xr = x + (size_t)r * ld + (size_t)h * hd;
    cf_norm_inplace(xr, hd, w, eps); /* then in memory for the rotation's pairs */
    const int half = n_rot / 2;
    const float p = (float)pos[r];
    for (int i = threadIdx.x; i < half; i += CF_NORM_THREADS)
        cf_rope_pair(xr, i, half, p, theta_scale, freq_scale, freq_div);
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

extern "C" int cf_norm_rope(cudaStream_t stream, float *x, int ld, int n_heads, int hd,
                            const float *w, float eps, int n_rot, const int32_t *pos, int rows,
                            float base, float freq_scale, const float *freq_div) {
    if (rows <= 0 || n_heads <= 0) return 0;
    if (n_rot <= 0 || n_rot % 2 || n_rot > hd || ld < n_heads * hd || n_heads > 65535)
        return cf_fail("cf_norm_rope: bad shape n_rot=%d hd=%d heads=%d ld=%d", n_rot, hd, n_heads,
                       ld);
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    cf_norm_rope_kernel<<<dim3((unsigned)rows, (unsigned)n_heads), CF_NORM_THREADS, 0, stream>>>(
        x, ld, hd, w, eps, n_rot, pos, theta_scale, freq_scale, freq_div);
    return CUDA_CHECK_LAUNCH();
}

extern "C" int cf_post_norm_next(cudaStream_t stream, const float *t, int ld_t, const float *w_post,
                                 float *x, int ld_x, const float *w_next, float *h, int ld_h,
                                 int n, int rows, float eps) {
    if (rows <= 0) return 0;
    if (n <= 0 || ld_t < n || ld_x < n || ld_h < n || !w_post || !w_next)
        return cf_fail("cf_post_norm_next: bad shape n=%d or missing weight", n);
    cf_post_norm_next_kernel<<<(unsigned)rows, CF_NORM_THREADS, 0, stream>>>(
        t, ld_t, w_post, x, ld_x, w_next, h, ld_h, n, eps);
    return CUDA_CHECK_LAUNCH();
}
