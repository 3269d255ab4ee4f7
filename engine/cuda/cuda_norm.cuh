/*
 * cuda_norm.cuh — the RMS scale of one row for a whole block, shared by cuda_norm.cu and
 * cuda_qkv.cu (the fused launches must reduce in the same order to give the same bits).
 * Device code only.
 */
#ifndef GEMMAD_CUDA_NORM_CUH
#define GEMMAD_CUDA_NORM_CUH

#define CF_NORM_THREADS 256

/* 1 / sqrt(mean(x^2) + eps) of one row for the whole block: squares in f32, their sum in
 * double (as ggml's CPU rms_norm and engine/kernels/vec.h), a fixed reduction order. Every
 * thread of the block must call it. */
__device__ __forceinline__ float cf_rms_scale(const float *xr, int n, float eps) {
    __shared__ double part[CF_NORM_THREADS / 32];
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
    return 1.0f / sqrtf(mean + eps);
}

/* A head (or row) normalised in place: x[i] = x[i] * scale, then * w[i] (w NULL: none), each
 * product rounded (never contracted into an fma), as cf_rms_norm_kernel; then a barrier, so
 * the normalised values are in memory for the block's next pass. Every thread must call it. */
__device__ __forceinline__ void cf_norm_inplace(float *xr, int n, const float *w, float eps) {
    const float scale = cf_rms_scale(xr, n, eps);
    for (int i = threadIdx.x; i < n; i += CF_NORM_THREADS) {
        float v = __fmul_rn(xr[i], scale);
        if (w) v = __fmul_rn(v, w[i]);
        xr[i] = v;
    }
    __syncthreads();
}

#endif
