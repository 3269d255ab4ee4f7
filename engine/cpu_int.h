/*
 * cpu_int — private state of the CPU backend (engine/backend.h), shared by cpu_fwd.c
 * (create/run/destroy, embeddings, norms, FFN, LM head), cpu_weights.c (the weights as the
 * matmuls read them: copies and panels) and cpu_attn.c (RoPE, KV writes, attention).
 * Nothing outside engine/cpu_*.c includes this.
 */
#ifndef GEMMAD_CPU_INT_H
#define GEMMAD_CPU_INT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/kernels/kern.h"
#include "engine/kernels/pool.h"
#include "engine/kernels/quant.h"
#include "engine/kernels/vec.h"
#include "engine/kvstore.h"
#include "engine/model.h"

#define CPU_MAX_ROPE 8 /* distinct (base, scale, n_rot, freqs) configurations */

struct cpu_rope {
    float base;           /* theta */
    float scale;          /* freq_scale */
    int n_rot;            /* rotary dims */
    const float *freqs;   /* [n_rot/2] divisors or NULL */
};

struct cpu_ctx {
    const struct model *m;
    struct kvstore_pool *kv;
    struct be_opts o;           /* as given */
    struct pool *pool;          /* forward.c's compute threads (not owned) */
    const struct vec_ops *vec;  /* row kernels of the active ISA */
    be_tap_fn tap;
    void *tap_user;

    /* Row metadata of the current step (rows are the step's tokens, seq after seq). */
    const struct be_seq *seqs;  /* the caller's array during cpu_run */
    int n_rows;
    int32_t *row_tok;           /* [max_tokens] */
    int32_t *row_pos;           /* [max_tokens] */
    int32_t *row_seq;           /* [max_tokens] index into seqs */

    /* Activations, [max_tokens][width] with the tight width of the current layer. */
    float *x;                   /* residual stream [T][n_embd] */
    float *h;                   /* normed input [T][n_embd] */
    float *t;                   /* sublayer output [T][n_embd] */
    float *q;                   /* [T][n_head*hd] */
    float *k;                   /* [T][n_head_kv*hd] */
    float *v;                   /* [T][n_head_kv*hd_v] */
    float *att;                 /* attention output [T][n_head*hd_v] */
    float *ff_g;                /* [T][n_ff] gate, then GeGLU result */
    float *ff_u;                /* [T][n_ff] up */
    void *act;                  /* kern_matmul activation scratch */
    size_t act_bytes;
    /* Gemma 4 per-layer embeddings */
    float *ple;                 /* [T][n_layer][n_pl] P_l inputs */
    float *ple_tmp;             /* [T][n_layer*n_pl] projection */
    float *pl_g;                /* [T][n_pl] gate */

    /* RoPE: cos/sin per config per row: rope_cs[(ci * T + r) * max_rot + {i, n_rot/2 + i}] */
    int n_rope;
    struct cpu_rope rope[CPU_MAX_ROPE];
    int layer_rope[MODEL_MAX_LAYERS];
    int max_rot;
    float *rope_cs;

    /* Attention: tiles (rows of one sequence x one KV head) are split by cost into at most
     * attn_chunks pool tasks; each pool thread has its own scratch (cpu_attn_scratch_floats,
     * indexed by pool_thread_index). */
    int attn_chunks;
    size_t attn_stride;         /* floats per thread, a multiple of 16 (64-byte aligned) */
    size_t attn_score_floats;   /* of which the tile's scores (cpu_attn_score_floats) */
    float *attn_scratch;

    /* LM head */
    float *xsel;                /* [max_logit_rows][n_embd] */
    int32_t *sel_row;           /* [max_logit_rows] */

    float *gelu_tab;            /* [VEC_GELU_TAB] GELU-tanh of every fp16 value, as fp16 */

    /* CPU weights as the matmuls see them: copies of the model's, with panel copies
     * (engine/kernels/panel.h) attached where the active ISA has a panel kernel. Owned. */
    struct model_layer_w *lw;   /* [n_layer] */
    struct kern_weight output;  /* LM head */
    const float *output_norm;
    int detached;               /* 1: nothing reads the model's file mapping any more */
    struct cpu_panel {
        void *p;
        size_t bytes;
    } *panels;                  /* [n_panels] panel and plain copies (anonymous mmaps) */
    int n_panels;
    size_t panel_bytes;         /* their total */
    int blas_weights;           /* weights that may take the BLAS path (kern_weight.blas):
                                 * F32 / F16 / BF16 matmuls when not deterministic */

    /* Step timing (be_ops.step_times): the last run's wall time and, with profiling on
     * (set_profile), its split by operation class (enum be_prof), taken at the boundaries
     * between operations on the engine thread. */
    int prof;                  /* 1: profile later runs */
    int timed;                 /* 1: `last` holds a run */
    double prof_t;             /* clock_mono_s of the last boundary */
    struct be_step_times last; /* the last run's */
};

/* cpu_weights.c */
int cpu_weights_init(struct cpu_ctx *c);
void cpu_weights_free(struct cpu_ctx *c);

/* cpu_attn.c */
int cpu_rope_init(struct cpu_ctx *c);
void cpu_rope_prepare(struct cpu_ctx *c);
void cpu_rope_apply(const struct cpu_ctx *c, int layer, float *x, int n_heads, int hd, int r0,
                    int r1);
void cpu_kv_write(struct cpu_ctx *c, int layer);
void cpu_attention(struct cpu_ctx *c, int layer);
size_t cpu_attn_scratch_floats(const struct model *m, int max_span);
size_t cpu_attn_score_floats(const struct model *m, int max_span);
int cpu_attn_max_span(const struct model *m, const struct kvstore_pool *kv, int max_ctx);

#endif
