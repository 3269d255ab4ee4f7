/*
 * backend — what a forward backend implements and what it is given. engine/forward.c (the
 * public fwd API) validates every step, owns the compute pool and the tap, and hands the
 * step to one backend: the CPU backend (engine/cpu_fwd.c) or the CUDA backend
 * (engine/cuda/cuda_fwd.c, registered only in a `make CUDA=1` build).
 *
 * The descriptors below are self-contained (plain numbers, pointers to weight bytes, block
 * tables), so a backend outside engine/ needs no engine header: engine/cuda/ includes only
 * this one and engine/kernels/quant.h (tensor format definitions). The engine's own objects
 * (struct model, kvstore_pool, pool) are passed along as opaque pointers for the CPU backend,
 * which reads and writes them directly; other backends ignore them.
 *
 * Status codes are those of forward.h (FWD_OK, FWD_EINVAL, ...), repeated here as BE_*.
 *
 * Threads: a backend context belongs to the thread that owns the fwd_ctx; the descriptors
 * are owned by the fwd_ctx and outlive the backend context.
 */
#ifndef GEMMAD_BACKEND_H
#define GEMMAD_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#define BE_MAX_LAYERS 512 /* = MODEL_MAX_LAYERS */

enum be_status { BE_OK = 0, BE_EINVAL = -1, BE_EKV = -2, BE_ENOMEM = -5, BE_EBACKEND = -6 };

/* A 2-D weight in its packed GGUF format: n_out rows of n_in elements (enum quant_type). */
struct be_tensor {
    uint32_t type;
    int64_t n_in, n_out;
    size_t row_bytes;
    const void *data; /* NULL when the model has no such tensor */
};

/* One layer: its shape and its weights (NULL / .data NULL where it has none). */
struct be_layer {
    int n_head, n_head_kv, head_dim, head_dim_v, n_ff, n_rot;
    int sliding;            /* 1: sliding-window layer */
    float rope_base, rope_scale;
    int kv_layer;           /* layer whose KV cache this layer reads */
    int has_kv;             /* computes and stores its own K/V */
    int k_eq_v;             /* V is the raw K projection */
    float out_scale;        /* layer output scale (1 = none) */
    const float *attn_norm, *q_norm, *k_norm, *post_attn_norm, *ffn_norm, *post_ffw_norm;
    const float *post_norm; /* [n_embd] Gemma 4 per-layer embedding norm */
    const float *rope_freqs; /* [n_rot/2] divisors or NULL */
    struct be_tensor wq, wk, wv, wo, gate, up, down, inp_gate, proj;
};

struct be_model {
    int n_layer, n_embd, n_vocab;
    float eps, attn_scale, attn_softcap, final_softcap, embd_scale;
    int sliding_window;     /* 0 = none */
    int v_norm;             /* weightless RMS norm of v */
    int n_embd_pl;          /* Gemma 4 per-layer embedding width, 0 = none */
    struct be_tensor tok_embd, output, pl_tok_embd, pl_proj;
    const float *output_norm, *pl_proj_norm;
    const struct be_layer *layer; /* [n_layer] */
};

enum be_kv_dtype { BE_KV_F16 = 0, BE_KV_Q8_0 = 1, BE_KV_F32 = 2 };
enum be_kv_class { BE_KV_FULL = 0, BE_KV_SWA = 1 };

/* The KV block pool's shape (a backend may keep its own storage for it). */
struct be_kv {
    enum be_kv_dtype dtype;
    const char *dtype_name;
    int block_size;         /* positions per block */
    int n_blocks[2];        /* per enum be_kv_class */
    const int *cls;         /* [n_layer] class of the layer's own storage, -1 for none */
};

enum be_logits { BE_LOGITS_NONE = 0, BE_LOGITS_LAST = 1, BE_LOGITS_ALL = 2 };

/* One sequence of a step (already validated by forward.c against the KV tables). */
struct be_seq {
    const int32_t *tokens;
    int n_tokens, pos;
    const int32_t *full;    /* FULL block table [n_full] */
    int n_full;
    const int32_t *swa;     /* SWA ring [n_swa], NULL without SWA layers */
    int n_swa;
    enum be_logits logits;
    float *hidden;          /* NULL, or [n_tokens][n_embd]: every row's final normalised
                             * hidden state (CPU backend only; forward.c refuses it
                             * elsewhere) */
};

struct be_opts {
    int max_tokens, max_seqs, max_logit_rows; /* max_logit_rows >= 1 */
    int deterministic;
    int max_ctx;            /* 0: the pool's capacity */
};

typedef void (*be_tap_fn)(void *user, int layer, const float *x, int n_rows, int n_embd);

struct model;
struct kvstore_pool;
struct pool;

struct be_desc {
    const struct be_model *bm;
    const struct be_kv *bkv;
    struct be_opts o;
    /* the engine's objects, for the CPU backend only */
    const struct model *m;
    struct kvstore_pool *kv;
    struct pool *pool;      /* the compute threads (forward.c owns them) */
};

/* A backend. available() says whether it can run here (why: the reason either way);
 * create() returns BE_OK with *out set, or an error with err filled and nothing left
 * allocated; run() has fwd_run's contract for a validated step (logits in order of seqs);
 * set_tap() installs the per-layer hook (fn NULL: none), which the backend calls after each
 * layer with all rows and once after the output norm (layer == n_layer) with the selected
 * rows; destroy(NULL) is a no-op. */
/* Operation classes of a profiled step (be_ops.set_profile). */
enum be_prof { BE_PROF_MATMUL, BE_PROF_ATTN, BE_PROF_NORM, BE_PROF_OTHER, BE_PROF_HEAD, BE_PROF_N };

/* A run's device times in ms: copies to the device, kernels, copies back; with profiling on,
 * the kernel time split by class (matmuls of the layers; KV store + attention; norms and
 * residual adds; embedding, RoPE, activations; final norm + LM head + softcap); graph: 1 when
 * the kernels ran as one replayed CUDA graph. */
struct be_step_times {
    double h2d_ms, gpu_ms, d2h_ms;
    double class_ms[BE_PROF_N];
    int profiled, graph;
};

struct be_ops {
    const char *name;
    int (*available)(char *why, size_t whylen);
    int (*create)(const struct be_desc *d, void **out, char *err, size_t errlen);
    int (*run)(void *b, const struct be_seq *seqs, int n_seqs, float *logits);
    int (*set_tap)(void *b, be_tap_fn fn, void *user);
    void (*destroy)(void *b);
    /* Optional (NULL: the backend does not time its steps): the last run's device times. */
    int (*step_times)(void *b, struct be_step_times *t);
    /* Optional (NULL: no profiling): 1 times every operation class of later runs with device
     * events (slower; no graphs), 0 stops. */
    int (*set_profile)(void *b, int on);
    /* Optional (NULL: forward.c runs run() and selects the TOPK rows' candidates on the
     * host, be_topk_row): run() with forward.h fwd_run_rows's per-row kinds (enum be_row;
     * kind non-NULL, topk arrays of BE_TOPK_MAX per row). */
    int (*run_rows)(void *b, const struct be_seq *seqs, int n_seqs, float *logits,
                    const uint8_t *kind, const float *scale, int32_t *ids, int32_t *topk_id,
                    float *topk_val);
    /* Optional: 1 when a row's results never depend on the other rows of its step (NULL:
     * only with be_opts.deterministic). */
    int (*batch_invariant)(void *b);
};

/* forward.h's FWD_TOPK_MAX and enum fwd_row. */
#define BE_TOPK_MAX 64
enum be_row { BE_ROW_FULL = 0, BE_ROW_GREEDY = 1, BE_ROW_TOPK = 2 };

/* The BE_TOPK_MAX best ids of l[0 .. n) by l[i] * scale (the product is the value written),
 * best first, ties to the lower id, NaNs never chosen (id -1, value NaN pad the rest):
 * forward.h's FWD_ROW_TOPK contract on the host. engine/backend.c. */
void be_topk_row(const float *l, int n, float scale, int32_t *id, float *val);

/* Fault injection for tests (forward.h's fwd_set_fail_at): be_fault() is 1 when this
 * failable step of fwd_create must fail; call it once before each allocation a create makes.
 * be_fault_arm(n) makes the n-th step of each later create fail (0: off); be_fault_restart()
 * starts a create's count from 1. Tests only; not thread-safe. engine/backend.c. */
int be_fault(void);
void be_fault_arm(int n);
void be_fault_restart(void);

extern const struct be_ops be_cpu;  /* engine/cpu_fwd.c */
extern const struct be_ops be_cuda; /* engine/cuda/cuda_fwd.c, CUDA=1 builds only */

#endif
