/* cuda_qkv — see cuda_qkv.h. */
#include "engine/cuda/cuda_qkv.h"

#include <cuda_fp16.h>
#include <math.h>

#include "engine/cuda/cuda_attn.cuh"
#include "engine/cuda/cuda_norm.cuh"
#include "engine/cuda/cuda_rope.cuh"

/* One block of CF_NORM_THREADS per (row, head): heads [0, n_head) of q, then the n_kv heads
 * of k, then those of v. Each: the norm in place (as cf_rms_norm_kernel / cf_norm_rope_kernel:
 * __fmul_rn by the scale, then by the weight), the rotation (cf_rope_pair, as cf_rope_neox and
 * cf_norm_rope), then for k and v the fp16 store (as cf_kv_store_kernel). */
__global__ void __launch_bounds__(CF_NORM_THREADS)
    cf_qkv_kernel(struct cf_rows R, struct cf_kv kv, float *q, int ld_q, int n_head,
                  const float *__restrict__ q_norm, float *k, int ld_k,
                  const float *__restrict__ k_norm, float *v, int ld_v, int v_norm, float eps,
                  int n_rot, float theta_scale, float freq_scale,
                  const float *__restrict__ freq_div) {
    const int r = blockIdx.x, y = blockIdx.y;
    float *xr;
    int n, rope, norm;
    const float *w = nullptr;
    __half *dst = nullptr;
    if (y < n_head) {
        xr = q + (size_t)r * ld_q + (size_t)y * kv.hd;
        n = kv.hd, rope = 1, norm = q_norm != nullptr, w = q_norm;
    } else {
        const int64_t slot = cf_kv_slot(R, kv, R.seq[r], R.pos[r]);
        if (y < n_head + kv.n_kv) {
            const int h = y - n_head;
            xr = k + (size_t)r * ld_k + (size_t)h * kv.hd;
            n = kv.hd, rope = 1, norm = k_norm != nullptr, w = k_norm;
            dst = static_cast<__half *>(kv.k) + slot * kv.n_kv * kv.hd + (size_t)h * kv.hd;
        } else {
            const int h = y - n_head - kv.n_kv;
            xr = v + (size_t)r * ld_v + (size_t)h * kv.hd_v;
            n = kv.hd_v, rope = 0, norm = v_norm;
            dst = static_cast<__half *>(kv.v) + slot * kv.n_kv * kv.hd_v + (size_t)h * kv.hd_v;
        }
    }
    if (norm) cf_norm_inplace(xr, n, w, eps); /* uniform over the block */
    if (rope) {
        const int half = n_rot / 2;
        const float p = (float)R.pos[r];
        for (int i = threadIdx.x; i < half; i += CF_NORM_THREADS)
            cf_rope_pair(xr, i, half, p, theta_scale, freq_scale, freq_div);
        __syncthreads(); /* the rotated head is in memory for the store */
    }
    if (dst)
        for (int i = threadIdx.x; i < n; i += CF_NORM_THREADS)
            dst[i] = __float2half_rn(xr[i]);
}

extern "C" int cf_qkv_rope_store(cudaStream_t stream, const struct cf_rows *rows,
                                 const struct cf_kv *kv, float *q, int ld_q, int n_head,
                                 const float *q_norm, float *k, int ld_k, const float *k_norm,
                                 float *v, int ld_v, int v_norm, float eps,
                                 const struct cf_rope *rope) {
    if (rows->n_rows <= 0) return 0;
    const int n_rot = rope->n_rot, heads = n_head + 2 * kv->n_kv;
    if (n_rot <= 0 || n_rot % 2 || n_rot > kv->hd || ld_q < n_head * kv->hd ||
        ld_k < kv->n_kv * kv->hd || ld_v < kv->n_kv * kv->hd_v || heads > 65535)
        return cf_fail("cf_qkv_rope_store: bad shape n_rot=%d hd=%d heads=%d", n_rot, kv->hd,
                       heads);
    const float theta_scale = powf(rope->base, -2.0f / (float)n_rot);
    cf_qkv_kernel<<<dim3((unsigned)rows->n_rows, (unsigned)heads), CF_NORM_THREADS, 0, stream>>>(
        *rows, *kv, q, ld_q, n_head, q_norm, k, ld_k, k_norm, v, ld_v, v_norm, eps, n_rot,
        theta_scale, rope->freq_scale, rope->freq_div);
    return CUDA_CHECK_LAUNCH();
}
