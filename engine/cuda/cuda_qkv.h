/*
 * cuda_qkv — a layer's q, k and v after their projections, in one launch: q heads' RMS norm
 * (weight q_norm; none when NULL) and NEOX RoPE, k heads' norm (k_norm) and RoPE and their
 * store into the paged F16 cache, v heads' weightless RMS norm (v_norm = 1, Gemma 4) and
 * their store; q, k and v are updated in place. The same bits as the separate launches
 * (cf_norm_rope or cf_rope_neox for q and k, cf_rms_norm for v, cf_kv_store): the same
 * device functions with the same block size and the same explicit roundings.
 *
 * Opt-in (GEMMAD_CUDA_FUSE_KV=1 at create, cuda_fwd.c): it has never run on a GPU.
 *
 * q: [rows][ld_q] rows of n_head heads of kv->hd; k: [rows][ld_k] rows of kv->n_kv heads of
 * kv->hd; v: [rows][ld_v] rows of kv->n_kv heads of kv->hd_v. Asynchronous; device pointers.
 */
#ifndef GEMMAD_CUDA_QKV_H
#define GEMMAD_CUDA_QKV_H

#include <stdint.h>

#include "engine/cuda/cuda_attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The rotation of one layer: as cf_rope_neox's arguments. */
struct cf_rope {
    int n_rot;
    float base, freq_scale;
    const float *freq_div; /* NULL: none */
};

int cf_qkv_rope_store(cudaStream_t stream, const struct cf_rows *rows, const struct cf_kv *kv,
                      float *q, int ld_q, int n_head, const float *q_norm, float *k, int ld_k,
                      const float *k_norm, float *v, int ld_v, int v_norm, float eps,
                      const struct cf_rope *rope);

#ifdef __cplusplus
}
#endif

#endif
