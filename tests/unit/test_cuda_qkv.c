/*
 * test_cuda_qkv — cf_qkv_rope_store (engine/cuda/cuda_qkv.h) on a GPU: bit-identical to the
 * separate launches (cf_norm_rope or cf_rope_neox for q and k, cf_rms_norm for v,
 * cf_kv_store) in q, k, v and both caches, for Gemma 3's shape (q/k norms, 4 q heads on 1 KV
 * head of 256) and Gemma 4's (V norm, head dim 512, 2 KV heads, frequency divisors, a partial
 * rotation), FULL tables and a SWA ring, and without q/k norms (Gemma 1/2). Every case SKIPs
 * without a device or in a build without CUDA.
 */
#include "tests/unit/harness.h"

#define CUDA_QKV_TESTS(X) X(test_qkv_same_bits)

#ifndef GEMMAD_CUDA

#define CF_SKIP_CASE(f)                                                                            \
    static void f(void) {                                                                          \
        T_SKIP("built without CUDA (make CUDA=1)");                                                \
    }
CUDA_QKV_TESTS(CF_SKIP_CASE)

#else /* GEMMAD_CUDA */

#include <stdint.h>

#include "engine/cuda/cuda_attn.h"
#include "engine/cuda/cuda_norm.h"
#include "engine/cuda/cuda_qkv.h"
#include "engine/cuda/cuda_rope.h"
#include "tests/unit/cuda_test_util.h"

#include "tests/unit/cuda_dev_util.h"

struct qkv_case {
    int n_head, n_kv, hd, hdv, n_rot, norms, v_norm, ring, divs;
};

#define QKV_EPS 1e-6f
#define QKV_BASE 10000.0f
#define QKV_FSCALE 0.5f

/* The separate launch for q or k heads, as cuda_step.c's cf_heads_rope chooses it. */
static void heads_rope(const struct qkv_case *C, float *x, int n_heads, const float *norm,
                       const int32_t *pos, int rows, const float *fd) {
    const int ld = n_heads * C->hd;
    if (norm)
        T_ASSERT(cf_norm_rope(0, x, ld, n_heads, C->hd, norm, QKV_EPS, C->n_rot, pos, rows,
                              QKV_BASE, QKV_FSCALE, fd) == 0);
    else
        T_ASSERT(cf_rope_neox(0, x, ld, n_heads, C->hd, C->n_rot, pos, rows, QKV_BASE, QKV_FSCALE,
                              fd) == 0);
}

static void one_case(const struct qkv_case *C) {
    enum { ROWS = 6, BS = 4, NB = 8, SEQS = 2 };
    const int nq = C->n_head * C->hd, nk = C->n_kv * C->hd, nv = C->n_kv * C->hdv;
    const float eps = QKV_EPS, base = QKV_BASE, fscale = QKV_FSCALE;
    float *q = cu_xmalloc(sizeof(float) * ROWS * nq), *k = cu_xmalloc(sizeof(float) * ROWS * nk);
    float *v = cu_xmalloc(sizeof(float) * ROWS * nv), *qn = cu_xmalloc(sizeof(float) * C->hd);
    float *kn = cu_xmalloc(sizeof(float) * C->hd), *fd = cu_xmalloc(sizeof(float) * C->hd);
    for (int i = 0; i < ROWS * nq; i++) q[i] = 3.0f * frand();
    for (int i = 0; i < ROWS * nk; i++) k[i] = 3.0f * frand();
    for (int i = 0; i < ROWS * nv; i++) v[i] = 3.0f * frand();
    for (int i = 0; i < C->hd; i++) {
        qn[i] = 1.0f + 0.5f * frand(), kn[i] = 1.0f + 0.5f * frand();
        fd[i] = 1.0f + (float)(i % 5);
    }
    /* two sequences, three rows each, positions past one block (within the 4 each holds) */
    const int32_t pos[ROWS] = {5, 6, 7, 13, 14, 15}, seq[ROWS] = {0, 0, 0, 1, 1, 1};
    int32_t tables[NB], info[SEQS][4];
    for (int i = 0; i < NB; i++) tables[i] = (i * 3 + 1) % NB; /* a permutation */
    for (int s = 0; s < SEQS; s++) {
        info[s][0] = C->ring ? 0 : s * (NB / 2), info[s][1] = C->ring ? 0 : NB / 2;
        info[s][2] = C->ring ? s * (NB / 2) : 0, info[s][3] = C->ring ? NB / 2 : 0;
    }
    int32_t *d_pos = dev_up(pos, sizeof pos), *d_seq = dev_up(seq, sizeof seq);
    int32_t *d_tab = dev_up(tables, sizeof tables), *d_info = dev_up(info, sizeof info);
    const struct cf_rows R = {d_pos, d_seq, d_info, d_tab, ROWS};
    const size_t kc = (size_t)NB * BS * nk * 2, vc = (size_t)NB * BS * nv * 2;
    float *d_qn = C->norms ? dev_up(qn, sizeof(float) * C->hd) : NULL;
    float *d_kn = C->norms ? dev_up(kn, sizeof(float) * C->hd) : NULL;
    float *d_fd = C->divs ? dev_up(fd, sizeof(float) * C->hd) : NULL;
    float *out[2][3];
    uint8_t *cache[2][2];
    for (int path = 0; path < 2; path++) {
        float *d_q = dev_up(q, sizeof(float) * ROWS * nq), *d_k = dev_up(k, sizeof(float) * ROWS * nk);
        float *d_v = dev_up(v, sizeof(float) * ROWS * nv);
        struct cf_kv kv = {dev_alloc(kc), dev_alloc(vc), C->n_kv, C->hd, C->hdv, BS, C->ring};
        T_ASSERT(cudaMemset(kv.k, 0, kc) == cudaSuccess && cudaMemset(kv.v, 0, vc) == cudaSuccess);
        if (path == 0) { /* the separate launches, in cuda_step.c's order */
            heads_rope(C, d_q, C->n_head, d_qn, d_pos, ROWS, d_fd);
            if (C->v_norm)
                T_ASSERT(cf_rms_norm(0, d_v, C->hdv, NULL, NULL, 0, d_v, C->hdv, C->hdv,
                                     ROWS * C->n_kv, eps) == 0);
            heads_rope(C, d_k, C->n_kv, d_kn, d_pos, ROWS, d_fd);
            T_ASSERT(cf_kv_store(0, &R, &kv, d_k, nk, d_v, nv) == 0);
        } else {
            const struct cf_rope rp = {C->n_rot, base, fscale, d_fd};
            T_ASSERT(cf_qkv_rope_store(0, &R, &kv, d_q, nq, C->n_head, d_qn, d_k, nk, d_kn, d_v, nv,
                                       C->v_norm, eps, &rp) == 0);
        }
        out[path][0] = cu_xmalloc(sizeof(float) * ROWS * nq);
        out[path][1] = cu_xmalloc(sizeof(float) * ROWS * nk);
        out[path][2] = cu_xmalloc(sizeof(float) * ROWS * nv);
        cache[path][0] = cu_xmalloc(kc);
        cache[path][1] = cu_xmalloc(vc);
        dev_down(out[path][0], d_q, sizeof(float) * ROWS * nq);
        dev_down(out[path][1], d_k, sizeof(float) * ROWS * nk);
        dev_down(out[path][2], d_v, sizeof(float) * ROWS * nv);
        dev_down(cache[path][0], kv.k, kc);
        dev_down(cache[path][1], kv.v, vc);
        cudaFree(d_q), cudaFree(d_k), cudaFree(d_v), cudaFree(kv.k), cudaFree(kv.v);
    }
    T_ASSERTF(!memcmp(out[0][0], out[1][0], sizeof(float) * ROWS * nq), "hd %d: q differs", C->hd);
    T_ASSERTF(!memcmp(out[0][1], out[1][1], sizeof(float) * ROWS * nk), "hd %d: k differs", C->hd);
    T_ASSERTF(!memcmp(out[0][2], out[1][2], sizeof(float) * ROWS * nv), "hd %d: v differs", C->hd);
    T_ASSERTF(!memcmp(cache[0][0], cache[1][0], kc), "hd %d: K cache differs", C->hd);
    T_ASSERTF(!memcmp(cache[0][1], cache[1][1], vc), "hd %d: V cache differs", C->hd);
    int stored = 0; /* the store wrote something */
    for (size_t i = 0; i < kc; i++) stored |= cache[1][0][i];
    T_ASSERT(stored);
    for (int p = 0; p < 2; p++) {
        for (int j = 0; j < 3; j++) free(out[p][j]);
        free(cache[p][0]), free(cache[p][1]);
    }
    cudaFree(d_pos), cudaFree(d_seq), cudaFree(d_tab), cudaFree(d_info);
    cudaFree(d_qn), cudaFree(d_kn), cudaFree(d_fd);
    free(q), free(k), free(v), free(qn), free(kn), free(fd);
}

static void test_qkv_same_bits(void) {
    cu_need_device();
    static const struct qkv_case cases[] = {
        {4, 1, 256, 256, 256, 1, 0, 0, 0}, /* Gemma 3 270M global layer */
        {4, 1, 256, 256, 256, 1, 0, 1, 0}, /* ... sliding (ring) */
        {8, 2, 512, 512, 128, 1, 1, 0, 1}, /* Gemma 4 global: V norm, divisors, partial RoPE */
        {8, 4, 64, 64, 64, 0, 0, 0, 0},    /* Gemma 1/2: no q/k norms */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) one_case(&cases[i]);
}

#endif /* GEMMAD_CUDA */

#define CF_CASE(f) T_CASE(f),
int main(int argc, char **argv) {
    static const struct t_case cases[] = {CUDA_QKV_TESTS(CF_CASE){0}};
    return t_main(argc, argv, cases);
}
