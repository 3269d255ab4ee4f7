/* cuda_rope — see cuda_rope.h. */
#include "engine/cuda/cuda_rope.h"

#include <math.h>

#include "engine/cuda/cuda_rope.cuh"

__global__ void cf_rope_neox_kernel(float *x, int ld, int hd, int n_rot,
                                    const int32_t *__restrict__ pos, float theta_scale,
                                    float freq_scale, const float *__restrict__ freq_div) {
    const int r = blockIdx.x, h = blockIdx.y;
    const int half = n_rot / 2;
    float *xr = x + (size_t)r * ld + (size_t)h * hd;
    const float p = (float)pos[r];
    for (int i = threadIdx.x; i < half; i += blockDim.x)
        cf_rope_pair(xr, i, half, p, theta_scale, freq_scale, freq_div);
}

extern "C" int cf_rope_neox(cudaStream_t stream, float *x, int ld, int n_heads, int hd, int n_rot,
                            const int32_t *pos, int rows, float base, float freq_scale,
                            const float *freq_div) {
    if (rows <= 0 || n_heads <= 0) return 0;
    if (n_rot <= 0 || n_rot % 2 || n_rot > hd || ld < n_heads * hd || n_heads > 65535)
        return cf_fail("cf_rope_neox: bad shape n_rot=%d hd=%d heads=%d ld=%d", n_rot, hd, n_heads,
                       ld);
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    const int half = n_rot / 2;
    const unsigned thr = half >= 128 ? 128 : (unsigned)((half + 31) / 32 * 32);
    cf_rope_neox_kernel<<<dim3((unsigned)rows, (unsigned)n_heads), thr, 0, stream>>>(
        x, ld, hd, n_rot, pos, theta_scale, freq_scale, freq_div);
    return CUDA_CHECK_LAUNCH();
}
