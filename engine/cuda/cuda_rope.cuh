/*
 * cuda_rope.cuh — the NEOX rotation of one pair (i, i + n_rot/2) of a head as a device
 * function, shared by cf_rope_neox (cuda_rope.cu) and the fused q/k norm + RoPE
 * (cuda_norm.cu), so both give the same bits. theta_i = p * theta_scale^i by repeated f32
 * multiplication, exactly as ggml_rope_cache_init (and engine/cpu_attn.c) build it.
 */
#ifndef GEMMAD_CUDA_ROPE_CUH
#define GEMMAD_CUDA_ROPE_CUH

__device__ __forceinline__ void cf_rope_pair(float *xr, int i, int half, float p, float theta_scale,
                                             float freq_scale, const float *freq_div) {
    float theta = p;
    for (int k = 0; k < i; k++)
        theta *= theta_scale;
    const float ff = freq_div ? freq_div[i] : 1.0f;
    theta = freq_scale * (theta / ff);
    const float c = cosf(theta), s = sinf(theta);
    const float x0 = xr[i], x1 = xr[i + half];
    xr[i] = x0 * c - x1 * s;
    xr[i + half] = x0 * s + x1 * c;
}

#endif
