/*
 * model — a loaded Gemma model: the GGUF mapping, the configuration derived from its
 * metadata (Gemma 1, 2, 3, 4), per-layer weight views into the mapping, and the tokenizer.
 *
 * model_load() validates the configuration against every tensor shape before returning.
 * After that a struct model is immutable and shared read-only by every thread; it must
 * outlive every kvstore_pool, fwd_ctx and tokenizer user built on it.
 */
#ifndef GEMMAD_MODEL_H
#define GEMMAD_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/kernels/kern.h"

struct gguf_file;
struct tok_vocab;

enum model_arch { MODEL_ARCH_GEMMA = 1, MODEL_ARCH_GEMMA2, MODEL_ARCH_GEMMA3, MODEL_ARCH_GEMMA4 };

#define MODEL_MAX_LAYERS 512

/* Per-layer configuration (Gemma 4 varies these per layer). */
struct model_layer_cfg {
    int n_head;        /* query heads */
    int n_head_kv;     /* key/value heads */
    int head_dim;      /* key (and query) head dim */
    int head_dim_v;    /* value head dim */
    int n_ff;          /* FFN width */
    int n_rot;         /* rotary dims (<= head_dim) */
    int sliding;       /* 1: sliding-window layer, 0: global */
    float rope_base;   /* theta */
    float rope_scale;  /* freq_scale = 1 / rope scaling factor (1 = none) */
    int kv_layer;      /* layer whose KV cache this layer reads (== own index unless shared) */
    int has_kv;        /* 1: computes and stores its own K/V */
    int k_eq_v;        /* Gemma 4: V is the raw K projection (no attn_v) */
};

struct model_config {
    enum model_arch arch;
    int n_layer, n_embd, n_vocab, n_ctx_train;
    float eps;            /* RMS norm epsilon */
    int sliding_window;   /* tokens visible on sliding layers (incl. self); 0 = none */
    float attn_scale;     /* multiplies q before QK^T */
    float attn_softcap;   /* 0 = off (Gemma 2: 50) */
    float final_softcap;  /* 0 = off (Gemma 2: 30) */
    float embd_scale;     /* sqrt(n_embd) */
    int qk_norm;          /* per-head RMS norm of q and k (Gemma 3, 4) */
    int v_norm;           /* weightless per-head RMS norm of v (Gemma 4) */
    int post_norms;       /* sandwich norms (Gemma 2, 3, 4) */
    int n_embd_pl;        /* Gemma 4 per-layer embedding width; 0 = none */
    struct model_layer_cfg layer[MODEL_MAX_LAYERS];
};

/* Weight views of one layer. NULL .data / NULL pointers where the layer has none. */
struct model_layer_w {
    const float *attn_norm;       /* [n_embd] */
    struct kern_weight wq;        /* {n_embd, n_head*hd} */
    struct kern_weight wk;        /* {n_embd, n_head_kv*hd} */
    struct kern_weight wv;        /* {n_embd, n_head_kv*hd_v} */
    struct kern_weight wo;        /* {n_head*hd_v, n_embd} */
    const float *q_norm, *k_norm; /* [hd] */
    const float *post_attn_norm;  /* [n_embd] */
    const float *ffn_norm;        /* [n_embd] */
    struct kern_weight gate, up;  /* {n_embd, n_ff} */
    struct kern_weight down;      /* {n_ff, n_embd} */
    const float *post_ffw_norm;   /* [n_embd] */
    /* Gemma 4 */
    struct kern_weight inp_gate;  /* {n_embd, n_embd_pl} */
    struct kern_weight proj;      /* {n_embd_pl, n_embd} */
    const float *post_norm;       /* [n_embd] */
    float out_scale;              /* layer_output_scale, 1 when absent */
    const float *rope_freqs;      /* [n_rot/2] divisors, or NULL */
};

struct model {
    struct gguf_file *gguf;       /* owned; the mapping every weight points into */
    struct model_config cfg;
    struct kern_weight tok_embd;  /* {n_embd, n_vocab} */
    struct kern_weight output;    /* LM head: == tok_embd when tied */
    const float *output_norm;     /* [n_embd] */
    struct model_layer_w layer[MODEL_MAX_LAYERS];
    /* Gemma 4 per-layer embeddings */
    struct kern_weight per_layer_tok_embd;  /* {n_embd_pl*n_layer, n_vocab} */
    struct kern_weight per_layer_model_proj;/* {n_embd, n_embd_pl*n_layer} */
    const float *per_layer_proj_norm;       /* [n_embd_pl] */
    struct tok_vocab *vocab;      /* owned */
    char name[128];               /* general.name or the file name */
    void *owned_f32;              /* small f32 copies of norm vectors stored as F16/BF16 */
};

enum model_status {
    MODEL_OK = 0, MODEL_EIO = -1, MODEL_EFORMAT = -2, MODEL_EUNSUPPORTED = -3, MODEL_ENOMEM = -5
};

int model_load(const char *path, struct model **out, char *err, size_t errlen);
/* Same from an already-open gguf (takes ownership of f, also on failure). */
int model_load_gguf(struct gguf_file *f, struct model **out, char *err, size_t errlen);
void model_free(struct model *m);
const char *model_arch_name(enum model_arch a);

#endif
