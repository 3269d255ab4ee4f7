/*
 * cuda_fwd_int — the CUDA backend's context, shared by its two halves: cuda_fwd.c (checks,
 * uploads, allocation, the backend table) and cuda_step.c (one step: metadata, the layers,
 * CUDA graphs, timing). Internal to engine/cuda/; nothing else includes it.
 *
 * Threads: one owner thread per context, like fwd_ctx.
 */
#ifndef GEMMAD_CUDA_FWD_INT_H
#define GEMMAD_CUDA_FWD_INT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/cuda/cuda_attn.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/cuda_matmul.h"
#include "engine/cuda/cuda_topk.h"
#include "engine/cuda/cuda_mmvq.h"

#define CF_ALIGN 256
#define CF_MAX_GRAPHS 64 /* captured decode steps kept (padded rows x split bucket) */
#define CF_PROF_EVENTS 4096 /* events of one profiled step (one per operation) */

/* Device copies of one layer's weights. NULL / .data == NULL where the layer has none. */
struct cf_layer {
    const float *attn_norm, *q_norm, *k_norm; /* [n_embd], [hd], [hd] */
    const float *post_attn_norm, *ffn_norm;   /* [n_embd] */
    const float *post_ffw_norm, *post_norm;   /* [n_embd] */
    const float *rope_freqs;                  /* [n_rot/2] divisors */
    struct cf_weight wq, wk, wv, wo;          /* attention projections */
    struct cf_weight gate, up, down;          /* FFN */
    struct cf_weight inp_gate, proj;          /* Gemma 4 per-layer embedding */
    struct cf_kv kv;                          /* the cache this layer reads (kv_layer's) */
};

/* One host pointer already uploaded (tied embeddings and shared rope_freqs upload once). */
struct cf_upload {
    const void *host;
    size_t bytes;
    const void *dev;
};

/* One instantiated CUDA graph of a decode step: `rows` rows (padded), attention grids of
 * `n_split` splits. */
struct cf_graph {
    cudaGraphExec_t exec;
    int rows, n_split;
};

struct cf_fwd {
    const struct be_model *m;
    const struct be_kv *kvp;
    struct be_opts o;        /* as given (max_logit_rows >= 1) */
    cudaStream_t stream;     /* every kernel of a step runs here */
    cublasHandle_t blas;     /* NULL when deterministic */
    enum cf_mm_mode mm_mode; /* KERNEL when deterministic, else AUTO */

    uint8_t *wmem; /* device: all weights, packed as in the GGUF */
    size_t wmem_bytes, wmem_used;
    struct cf_upload *ups; /* [n_ups] dedup table, create-time only */
    int n_ups, cap_ups;
    struct cf_weight tok_embd;             /* {n_embd, n_vocab} */
    struct cf_weight output;               /* LM head (== tok_embd when tied) */
    struct cf_weight pl_tok_embd, pl_proj; /* Gemma 4 PLE tables */
    const float *output_norm, *pl_proj_norm;
    struct cf_layer *L; /* [n_layer] */

    uint8_t *kvmem; /* device: every owning layer's K and V blocks (F16) */
    size_t kv_bytes;

    uint8_t *amem;          /* device: activations, carved below */
    float *x, *h, *t;       /* [T][n_embd] residual, normed input, sublayer output */
    float *q, *k, *v, *att; /* [T][n_head*hd], [T][nkv*hd], [T][nkv*hd_v], [T][n_head*hd_v] */
    float *g, *u;           /* [T][max(n_ff, n_pl)] gate / up */
    float *ple, *ple_tmp;   /* [T][n_layer*n_pl] Gemma 4 per-layer inputs */
    float *xsel;            /* [max_logit_rows][n_embd] */
    float *logits;          /* [max_logit_rows][n_vocab] */
    void *q8x;              /* [CF_MMVQ_MAX_ROWS] rows of the widest matmul input, quantized
                               (cf_mmvq_layout); NULL unless mmvq */
    size_t q8x_bytes;
    void *mm_scratch;       /* cuBLAS path scratch (NULL when deterministic) */
    size_t mm_scratch_bytes;
    struct cf_att_scratch att_sc; /* split-key attention partials (in amem) */
    int split_cap;                /* most splits a step may use (the context's, pow2) */

    /* Step metadata, one int32 block, host (pinned) and device copies of the same layout:
     * tokens[T] | pos[T] | seq[T] | seq_info[S][4] | sel[Lx] | tables[tab_cap] */
    int32_t *meta_h, *meta_d;
    int32_t *ids_h, *ids_d; /* [max_logit_rows] greedy ids of a step (host pinned, device) */
    /* Top-k rows of a step (cuda_topk.h), host pinned and device copies of one layout:
     * rows[M] | scale[M] (M: the step's top-k rows, packed) at tk_*, ids at tk_* + 2R and
     * values at tk_* + 2R + R·CF_TOPK_MAX (R = max_logit_rows; 4-byte elements). */
    int32_t *tk_h, *tk_d;
    size_t off_pos, off_seq, off_info, off_sel, off_tab, tab_cap;

    /* Step timing: events before the metadata copy, after it, before the logits copy and
     * after it; `timed` is 1 once a step recorded all four, `graphed` when it replayed a
     * graph. */
    cudaEvent_t ev[4];
    int n_ev, timed, graphed;

    /* Profiling (cf_fwd_set_profile): an event after each operation, its class in pcls. */
    int prof;
    cudaEvent_t *pev; /* [CF_PROF_EVENTS], created on the first set_profile(1) */
    uint8_t *pcls;    /* [CF_PROF_EVENTS] enum be_prof of the operation ending at pev[i] */
    int n_pev_made, n_pev;

    /* CUDA graphs of decode steps (cuda_step.c); graphs_off after a failed capture or with
     * GEMMAD_CUDA_GRAPHS=0 in the environment. */
    struct cf_graph graphs[CF_MAX_GRAPHS];
    int n_graphs, graphs_off;
    /* 1 (GEMMAD_CUDA_FUSE_KV=1 at create): q/k/v norm + RoPE + KV store in one launch
     * (cuda_qkv.h; never ran on a GPU) */
    int fuse_kv;

    /* 1 with GEMMAD_CUDA_MMVQ=1 at creation: steps of <= CF_MMVQ_MAX_ROWS rows run the
     * matmuls of cf_mmvq_supported weight types on int8 activations (cuda_mmvq.h). */
    int mmvq;
    /* 1 with GEMMAD_CUDA_TOPK=1 at creation: top-k rows' candidates from cf_topk_rows on
     * the device (never ran on a GPU); else the rows come back whole and the candidates are
     * taken on the host (be_topk_row), kind_tmp holding the step's kinds with TOPK as FULL */
    int dev_topk;
    uint8_t *kind_tmp; /* host [max_logit_rows] */

    be_tap_fn tap; /* debugging hook (cf_fwd_set_tap) */
    void *tap_user;
    float *tap_buf; /* host [max(T, Lx)][n_embd], allocated by cf_fwd_set_tap */
};

/* Bytes of tk_h / tk_d for R = max_logit_rows (layout above). */
static inline size_t cf_tk_bytes(int R) {
    return (size_t)R * (2 + 2 * CF_TOPK_MAX) * 4;
}

static inline size_t cf_al(size_t n) {
    return (n + CF_ALIGN - 1) & ~(size_t)(CF_ALIGN - 1);
}

/* cuda_step.c */
/* kind, scale, ids, topk_id, topk_val: NULL, or forward.h fwd_run_rows's arguments. */
int cf_fwd_run(struct cf_fwd *c, const struct be_seq *seqs, int n_seqs, float *logits,
               const uint8_t *kind, const float *scale, int32_t *ids, int32_t *topk_id,
               float *topk_val);
int cf_fwd_step_times(const struct cf_fwd *c, struct be_step_times *t);
int cf_fwd_set_tap(struct cf_fwd *c, be_tap_fn fn, void *user);
int cf_fwd_set_profile(struct cf_fwd *c, int on);
void cf_step_free(struct cf_fwd *c); /* graphs and profiling events */

#endif
