/*
 * cuda_gelu — the GELU-tanh of the GeGLU as a device function, shared by the element-wise
 * GeGLU (cuda_act.cu) and the fused gate/up matmul (cuda_matmul.cu), so both give the same
 * bits. As ggml's CPU table gives it (and engine/kernels/vec.h): the input rounded to fp16,
 * the result rounded to fp16, 0 at or below -10 and the identity at or above 10.
 */
#ifndef GEMMAD_CUDA_GELU_CUH
#define GEMMAD_CUDA_GELU_CUH

#include <cuda_fp16.h>

#define CF_GELU_COEF_A 0.044715f
#define CF_SQRT_2_OVER_PI 0.79788456080286535587989211986876f

__device__ __forceinline__ float cf_gelu(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    const float xh = __half2float(__float2half_rn(x));
    const float g =
        0.5f * xh * (1.0f + tanhf(CF_SQRT_2_OVER_PI * xh * (1.0f + CF_GELU_COEF_A * xh * xh)));
    return __half2float(__float2half_rn(g));
}

#endif
