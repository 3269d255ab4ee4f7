/*
 * cpu_fwd — the CPU backend of the forward pass (engine/backend.h, state in cpu_int.h).
 *
 * One step: embed every row, then per layer RMS norm -> Q/K/V (one kern_matmul over all
 * rows) -> q/k (v) norms -> RoPE -> K/V into the cache -> attention (cpu_attn.c) ->
 * Wo -> post norm -> residual -> GeGLU FFN -> post norm -> residual (-> Gemma 4 PLE and
 * layer scale); finally the output norm and LM head for the requested rows only.
 *
 * Numerics follow llama.cpp's CPU path where it is cheap: f32 activations, RMS sums in
 * double, F16 KV cache with Q rounded to F16, and the fp16-table GELU (facts §4.6). The row
 * kernels (norm, RoPE, F16, GeGLU) are engine/kernels/vec.h's, chosen with the matmuls' ISA.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "engine/cpu_int.h"
#include "engine/kernels/panel.h"

static void rms_rows(const struct cpu_ctx *c, float *y, const float *x, const float *w, int rows,
                     int n, float eps) {
    for (int r = 0; r < rows; r++)
        c->vec->rms_norm(y + (size_t)r * (size_t)n, x + (size_t)r * (size_t)n, w, n, eps);
}

/* The Q/K/V projections of layer l as one matmul group (K and V only when the layer owns
 * its cache; V is copied from K when k_eq_v). Returns the number of outputs. */
static int qkv_outs(const struct cpu_ctx *c, int l, struct kern_mm_out *o) {
    const struct model_layer_cfg *lc = &c->m->cfg.layer[l];
    const struct model_layer_w *w = &c->lw[l];
    int n = 0;
    o[n++] = (struct kern_mm_out){&w->wq, c->q, lc->n_head * lc->head_dim};
    if (lc->has_kv) {
        o[n++] = (struct kern_mm_out){&w->wk, c->k, lc->n_head_kv * lc->head_dim};
        if (!lc->k_eq_v)
            o[n++] = (struct kern_mm_out){&w->wv, c->v, lc->n_head_kv * lc->head_dim_v};
    }
    return n;
}

/* ---- create / destroy ---- */

static void *xalloc(size_t n, int *fail) {
    if (*fail || be_fault()) { /* stop at the first failure: each step fails on its own */
        *fail = 1;
        return NULL;
    }
    if (n == 0) n = 64;
    void *p = aligned_alloc(64, (n + 63) & ~(size_t)63);
    if (!p) *fail = 1;
    return p;
}

static size_t max_act(const struct kern_weight *w, int M, size_t cur) {
    if (!w->data) return cur;
    size_t b = kern_act_bytes(w, M);
    return b > cur ? b : cur;
}

static void cpu_destroy(void *b);

static int cpu_create(const struct be_desc *desc, void **out, char *err, size_t errlen) {
    *out = NULL;
    const struct model *m = desc->m;
    struct kvstore_pool *kv = desc->kv;
    int st = BE_ENOMEM;
    struct cpu_ctx *c = be_fault() ? NULL : calloc(1, sizeof *c);
    if (!c) goto fail_nomem;
    c->m = m;
    c->kv = kv;
    c->o = desc->o;
    c->pool = desc->pool;
    c->vec = vec_ops_for(kern_active_isa());
    if (cpu_weights_init(c) < 0) {
        if (err) snprintf(err, errlen, "fwd_create: out of memory for the weight table");
        goto fail;
    }
    if (be_fault() || cpu_rope_init(c) < 0) {
        if (err) snprintf(err, errlen, "fwd_create: more than %d RoPE configurations",
                          CPU_MAX_ROPE);
        st = BE_EINVAL;
        goto fail;
    }

    const struct model_config *cfg = &m->cfg;
    const size_t T = (size_t)c->o.max_tokens, E = (size_t)cfg->n_embd;
    size_t wq = 0, wk = 0, wv = 0, wo = 0, wff = 0;
    size_t act = 0;
    const int M = c->o.max_tokens > c->o.max_logit_rows ? c->o.max_tokens
                                                        : c->o.max_logit_rows;
    for (int l = 0; l < cfg->n_layer; l++) {
        const struct model_layer_cfg *lc = &cfg->layer[l];
        const struct model_layer_w *w = &m->layer[l];
        size_t a = (size_t)lc->n_head * (size_t)lc->head_dim;
        size_t b = (size_t)lc->n_head_kv * (size_t)lc->head_dim;
        size_t d = (size_t)lc->n_head_kv * (size_t)lc->head_dim_v;
        size_t e = (size_t)lc->n_head * (size_t)lc->head_dim_v;
        if (a > wq) wq = a;
        if (b > wk) wk = b;
        if (d > wv) wv = d;
        if (e > wo) wo = e;
        if ((size_t)lc->n_ff > wff) wff = (size_t)lc->n_ff;
        act = max_act(&w->wq, M, act);
        act = max_act(&w->wk, M, act);
        act = max_act(&w->wv, M, act);
        act = max_act(&w->wo, M, act);
        act = max_act(&w->gate, M, act);
        act = max_act(&w->up, M, act);
        act = max_act(&w->down, M, act);
        act = max_act(&w->inp_gate, M, act);
        struct kern_mm_out grp[3];
        int ng = qkv_outs(c, l, grp);
        size_t b_grp = kern_act_bytes_group(grp, ng, M);
        if (b_grp > act) act = b_grp;
        grp[0] = (struct kern_mm_out){&w->gate, NULL, 0};
        grp[1] = (struct kern_mm_out){&w->up, NULL, 0};
        b_grp = kern_act_bytes_group(grp, 2, M);
        if (b_grp > act) act = b_grp;
        act = max_act(&w->proj, M, act);
    }
    act = max_act(&m->output, M, act);
    act = max_act(&m->per_layer_model_proj, M, act);
    if (wk < wv) wk = wv; /* k_eq_v: V is read from the K buffer's width */

    int fail = 0;
    c->row_tok = xalloc(T * sizeof(int32_t), &fail);
    c->row_pos = xalloc(T * sizeof(int32_t), &fail);
    c->row_seq = xalloc(T * sizeof(int32_t), &fail);
    c->x = xalloc(T * E * sizeof(float), &fail);
    c->h = xalloc(T * E * sizeof(float), &fail);
    c->t = xalloc(T * E * sizeof(float), &fail);
    c->q = xalloc(T * wq * sizeof(float), &fail);
    c->k = xalloc(T * wk * sizeof(float), &fail);
    c->v = xalloc(T * wk * sizeof(float), &fail);
    c->att = xalloc(T * wo * sizeof(float), &fail);
    c->ff_g = xalloc(T * wff * sizeof(float), &fail);
    c->ff_u = xalloc(T * wff * sizeof(float), &fail);
    c->act_bytes = act;
    c->act = xalloc(act, &fail);
    if (cfg->n_embd_pl > 0) {
        size_t P = (size_t)cfg->n_embd_pl * (size_t)cfg->n_layer;
        c->ple = xalloc(T * P * sizeof(float), &fail);
        c->ple_tmp = xalloc(T * P * sizeof(float), &fail);
        c->pl_g = xalloc(T * (size_t)cfg->n_embd_pl * sizeof(float), &fail);
    }
    c->rope_cs = xalloc((size_t)c->n_rope * T * (size_t)c->max_rot * sizeof(float), &fail);
    c->attn_chunks = pool_size(c->pool) * 8;
    const int max_span = cpu_attn_max_span(m, kv, c->o.max_ctx);
    c->attn_stride = cpu_attn_scratch_floats(m, max_span);
    c->attn_score_floats = cpu_attn_score_floats(m, max_span);
    c->attn_scratch =
        xalloc((size_t)pool_size(c->pool) * c->attn_stride * sizeof(float), &fail);
    c->xsel = xalloc((size_t)c->o.max_logit_rows * E * sizeof(float), &fail);
    c->sel_row = xalloc((size_t)c->o.max_logit_rows * sizeof(int32_t), &fail);
    c->gelu_tab = xalloc(VEC_GELU_TAB * sizeof(float), &fail);
    if (fail) goto fail_nomem;
    c->vec->gelu_table(c->gelu_tab);
    *out = c;
    return BE_OK;
fail_nomem:
    if (err) snprintf(err, errlen, "fwd_create: out of memory for the forward scratch");
fail:
    cpu_destroy(c);
    return st;
}

static void cpu_destroy(void *b) {
    struct cpu_ctx *c = b;
    if (!c) return;
    free(c->row_tok);
    free(c->row_pos);
    free(c->row_seq);
    free(c->x);
    free(c->h);
    free(c->t);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->att);
    free(c->ff_g);
    free(c->ff_u);
    free(c->act);
    free(c->ple);
    free(c->ple_tmp);
    free(c->pl_g);
    free(c->rope_cs);
    free(c->attn_scratch);
    free(c->xsel);
    free(c->sel_row);
    free(c->gelu_tab);
    cpu_weights_free(c);
    free(c);
}

static int cpu_set_tap(void *b, be_tap_fn fn, void *user) {
    struct cpu_ctx *c = b;
    c->tap = fn;
    c->tap_user = user;
    return BE_OK;
}

/* ---- step timing ---- */

/* With profiling on, the time since the last boundary goes to class cls (enum be_prof). */
static inline void prof_mark(struct cpu_ctx *c, int cls) {
    if (!c->prof) return;
    const double t = clock_mono_s();
    c->last.class_ms[cls] += (t - c->prof_t) * 1e3;
    c->prof_t = t;
}

static int cpu_set_profile(void *b, int on) {
    ((struct cpu_ctx *)b)->prof = on != 0;
    return BE_OK;
}

/* gpu_ms is the step's wall time on this host (nothing is copied: h2d_ms = d2h_ms = 0);
 * BE_EINVAL before the first run. */
static int cpu_step_times(void *b, struct be_step_times *t) {
    const struct cpu_ctx *c = b;
    if (!c->timed) return BE_EINVAL;
    *t = c->last;
    return BE_OK;
}

/* ---- the layer ---- */

struct geglu_job {
    const struct vec_ops *vec;
    const float *tab; /* the fp16 GELU table */
    float *g;         /* [T][n_ff] gate in, GeGLU out */
    const float *u;   /* [T][n_ff] up */
    int T, n_ff;
};

/* g = GELU(g) * u for columns [o0, o1) of every row (the epilogue of the gate/up group). */
static void geglu_rows(void *arg, int64_t o0, int64_t o1) {
    const struct geglu_job *J = arg;
    for (int r = 0; r < J->T; r++)
        J->vec->geglu(J->tab, J->g + (size_t)r * (size_t)J->n_ff + o0,
                      J->u + (size_t)r * (size_t)J->n_ff + o0, o1 - o0);
}

/* Per-layer inputs of Gemma 4 (facts §4.4 PLE): P[r][l] = (RMS(proj(x0)/sqrt(E)) +
 * e[t]*sqrt(n_pl)) / sqrt(2). Called right after the embedding, x holds x0. */
static void ple_prepare(struct cpu_ctx *c) {
    const struct model *m = c->m;
    const int T = c->n_rows, npl = m->cfg.n_embd_pl, nl = m->cfg.n_layer;
    const size_t P = (size_t)npl * (size_t)nl;
    const float s_e = sqrtf((float)npl), s_p = 1.0f / sqrtf((float)m->cfg.n_embd);
    const float s_in = 1.0f / sqrtf(2.0f);
    kern_matmul(c->pool, &m->per_layer_model_proj, c->x, T, c->ple_tmp, (int)P, c->act);
    for (int r = 0; r < T; r++) {
        float *e = c->ple + (size_t)r * P, *pr = c->ple_tmp + (size_t)r * P;
        kern_get_row(&m->per_layer_tok_embd, c->row_tok[r], e);
        for (size_t i = 0; i < P; i++) pr[i] *= s_p;
        for (int l = 0; l < nl; l++) {
            float *sl = pr + (size_t)l * (size_t)npl;
            c->vec->rms_norm(sl, sl, m->per_layer_proj_norm, npl, m->cfg.eps);
        }
        c->vec->ple_mix(e, pr, s_e, s_in, P);
    }
}

/* ---- row stages: the element-wise work between the matmuls. A step of CPU_ROWS_PAR rows
 * or more (prefill, many streams) splits it by rows over the pool; with fewer it runs on the
 * calling thread, as a pool run would cost more than it saves. Each row goes through the same
 * operations in the same order whichever thread runs it: the bits do not depend on the split.
 * (The KV cache writes stay on the calling thread.) ---- */

#define CPU_ROWS_PAR 8

typedef void (*cpu_rows_fn)(struct cpu_ctx *c, int l, int r0, int r1);

struct rows_job {
    struct cpu_ctx *c;
    int l;
    cpu_rows_fn fn;
};

static void rows_task(void *arg, int task, int n_tasks) {
    const struct rows_job *J = arg;
    const int64_t T = J->c->n_rows;
    const int r0 = (int)(T * task / n_tasks), r1 = (int)(T * (task + 1) / n_tasks);
    if (r1 > r0) J->fn(J->c, J->l, r0, r1);
}

static void run_rows(struct cpu_ctx *c, int l, cpu_rows_fn fn) {
    const int T = c->n_rows, n = pool_size(c->pool);
    if (T < CPU_ROWS_PAR || n <= 1) {
        fn(c, l, 0, T);
        return;
    }
    struct rows_job J = {c, l, fn};
    pool_run(c->pool, rows_task, &J, n);
}

/* x = the token's embedding row, scaled (l unused). */
static void rows_embed(struct cpu_ctx *c, int l, int r0, int r1) {
    (void)l;
    const struct model_config *cfg = &c->m->cfg;
    const int E = cfg->n_embd;
    for (int r = r0; r < r1; r++) {
        float *x = c->x + (size_t)r * (size_t)E;
        if (c->detached && c->output.panel) /* the tied head's panel holds the embedding rows */
            panel_get_row(&c->output, c->row_tok[r], x);
        else if (c->detached) /* or its copy (cpu_weights.c) */
            kern_get_row(&c->output, c->row_tok[r], x);
        else
            kern_get_row(&c->m->tok_embd, c->row_tok[r], x);
        for (int i = 0; i < E; i++)
            x[i] *= cfg->embd_scale;
    }
}

/* h = RMS(x) * attn_norm. */
static void rows_attn_norm(struct cpu_ctx *c, int l, int r0, int r1) {
    const size_t E = (size_t)c->m->cfg.n_embd;
    rms_rows(c, c->h + (size_t)r0 * E, c->x + (size_t)r0 * E, c->lw[l].attn_norm, r1 - r0, (int)E,
             c->m->cfg.eps);
}

/* After the Q/K/V matmuls: q / k (v) norms, RoPE, the attention scale. */
static void rows_qk(struct cpu_ctx *c, int l, int r0, int r1) {
    const struct model_config *cfg = &c->m->cfg;
    const struct model_layer_cfg *lc = &cfg->layer[l];
    const struct model_layer_w *w = &c->lw[l];
    const int hd = lc->head_dim, hdv = lc->head_dim_v, n = r1 - r0;
    const size_t nq = (size_t)lc->n_head * (size_t)hd, nk = (size_t)lc->n_head_kv * (size_t)hd,
                 nv = (size_t)lc->n_head_kv * (size_t)hdv;
    float *q = c->q + (size_t)r0 * nq;
    if (w->q_norm) rms_rows(c, q, q, w->q_norm, n * lc->n_head, hd, cfg->eps);
    cpu_rope_apply(c, l, c->q, lc->n_head, hd, r0, r1);
    if (cfg->attn_scale != 1.0f)
        for (size_t i = 0; i < (size_t)n * nq; i++)
            q[i] *= cfg->attn_scale;
    if (!lc->has_kv) return;
    float *k = c->k + (size_t)r0 * nk, *v = c->v + (size_t)r0 * nv;
    if (lc->k_eq_v) /* V is the raw K (pre-norm); model.c requires hd == hdv for it */
        memcpy(v, k, (size_t)n * nv * sizeof(float));
    if (w->k_norm) rms_rows(c, k, k, w->k_norm, n * lc->n_head_kv, hd, cfg->eps);
    if (cfg->v_norm) rms_rows(c, v, v, NULL, n * lc->n_head_kv, hdv, cfg->eps);
    cpu_rope_apply(c, l, c->k, lc->n_head_kv, hd, r0, r1);
}

/* After Wo: t = post norm (t); x += t; h = RMS(x) * ffn_norm. */
static void rows_post_attn(struct cpu_ctx *c, int l, int r0, int r1) {
    const struct model_layer_w *w = &c->lw[l];
    const size_t E = (size_t)c->m->cfg.n_embd;
    const float eps = c->m->cfg.eps;
    for (int r = r0; r < r1; r++) {
        float *t = c->t + (size_t)r * E, *x = c->x + (size_t)r * E;
        if (w->post_attn_norm) c->vec->rms_norm(t, t, w->post_attn_norm, (int)E, eps);
        for (size_t i = 0; i < E; i++)
            x[i] += t[i];
        c->vec->rms_norm(c->h + (size_t)r * E, x, w->ffn_norm, (int)E, eps);
    }
}

/* After the FFN's down matmul: t = post norm (t); x += t. */
static void rows_post_ffn(struct cpu_ctx *c, int l, int r0, int r1) {
    const struct model_layer_w *w = &c->lw[l];
    const size_t E = (size_t)c->m->cfg.n_embd;
    for (int r = r0; r < r1; r++) {
        float *t = c->t + (size_t)r * E, *x = c->x + (size_t)r * E;
        if (w->post_ffw_norm) c->vec->rms_norm(t, t, w->post_ffw_norm, (int)E, c->m->cfg.eps);
        for (size_t i = 0; i < E; i++)
            x[i] += t[i];
    }
}

static void layer_forward(struct cpu_ctx *c, int l) {
    const struct model *m = c->m;
    const struct model_config *cfg = &m->cfg;
    const struct model_layer_cfg *lc = &cfg->layer[l];
    const struct model_layer_w *w = &c->lw[l];
    const int T = c->n_rows, E = cfg->n_embd;
    struct pool *pool = c->pool;

    /* attention: Q, K and V in one pool run */
    run_rows(c, l, rows_attn_norm);
    prof_mark(c, BE_PROF_NORM);
    struct kern_mm_out qkv[3];
    int n_qkv = qkv_outs(c, l, qkv);
    kern_matmul_group(pool, qkv, n_qkv, c->h, T, c->act, NULL, NULL);
    prof_mark(c, BE_PROF_MATMUL);
    run_rows(c, l, rows_qk);
    prof_mark(c, BE_PROF_OTHER);
    if (lc->has_kv) cpu_kv_write(c, l);
    cpu_attention(c, l);
    prof_mark(c, BE_PROF_ATTN);
    kern_matmul(pool, &w->wo, c->att, T, c->t, E, c->act);
    prof_mark(c, BE_PROF_MATMUL);
    run_rows(c, l, rows_post_attn);
    prof_mark(c, BE_PROF_NORM);

    /* feed-forward: gate and up in one pool run, GeGLU on each task's rows as soon as both
     * are done */
    const struct kern_mm_out gu[2] = {{&w->gate, c->ff_g, lc->n_ff}, {&w->up, c->ff_u, lc->n_ff}};
    struct geglu_job gj = {c->vec, c->gelu_tab, c->ff_g, c->ff_u, T, lc->n_ff};
    kern_matmul_group(pool, gu, 2, c->h, T, c->act, geglu_rows, &gj);
    kern_matmul(pool, &w->down, c->ff_g, T, c->t, E, c->act);
    prof_mark(c, BE_PROF_MATMUL); /* with the GeGLU, run on each task's rows of gate/up */
    run_rows(c, l, rows_post_ffn);
    prof_mark(c, BE_PROF_NORM);

    /* Gemma 4 per-layer embedding and layer scale */
    if (cfg->n_embd_pl > 0 && w->inp_gate.data) {
        const int npl = cfg->n_embd_pl;
        kern_matmul(pool, &w->inp_gate, c->x, T, c->pl_g, npl, c->act);
        prof_mark(c, BE_PROF_MATMUL);
        for (int r = 0; r < T; r++) {
            float *g = c->pl_g + (size_t)r * (size_t)npl;
            const float *pin =
                c->ple + ((size_t)r * (size_t)cfg->n_layer + (size_t)l) * (size_t)npl;
            c->vec->geglu(c->gelu_tab, g, pin, npl);
        }
        prof_mark(c, BE_PROF_OTHER);
        kern_matmul(pool, &w->proj, c->pl_g, T, c->t, E, c->act);
        prof_mark(c, BE_PROF_MATMUL);
        rms_rows(c, c->t, c->t, w->post_norm, T, E, cfg->eps);
        for (size_t i = 0; i < (size_t)T * (size_t)E; i++) c->x[i] += c->t[i];
        prof_mark(c, BE_PROF_NORM);
    }
    if (w->out_scale != 1.0f)
        for (size_t i = 0; i < (size_t)T * (size_t)E; i++) c->x[i] *= w->out_scale;
    prof_mark(c, BE_PROF_OTHER);
}

/* ---- the step ---- */

static int cpu_run(void *b, const struct be_seq *seqs, int n_seqs, float *logits) {
    struct cpu_ctx *c = b;
    int rows = 0;
    for (int s = 0; s < n_seqs; s++) rows += seqs[s].n_tokens;
    const struct model *m = c->m;
    const struct model_config *cfg = &m->cfg;
    const int E = cfg->n_embd;

    c->seqs = seqs;
    c->n_rows = rows;
    int r = 0, ns = 0;
    for (int s = 0; s < n_seqs; s++) {
        const struct be_seq *q = &seqs[s];
        for (int i = 0; i < q->n_tokens; i++, r++) {
            c->row_tok[r] = q->tokens[i];
            c->row_pos[r] = q->pos + i;
            c->row_seq[r] = s;
            if (q->logits == BE_LOGITS_ALL ||
                (q->logits == BE_LOGITS_LAST && i == q->n_tokens - 1))
                c->sel_row[ns++] = r;
        }
    }

    const double t_start = clock_mono_s();
    memset(&c->last, 0, sizeof(c->last));
    c->last.profiled = c->prof;
    c->prof_t = t_start;
    run_rows(c, 0, rows_embed); /* embeddings */
    if (cfg->n_embd_pl > 0) ple_prepare(c);
    cpu_rope_prepare(c);

    prof_mark(c, BE_PROF_OTHER);

    for (int l = 0; l < cfg->n_layer; l++) {
        layer_forward(c, l);
        if (c->tap) c->tap(c->tap_user, l, c->x, rows, E);
        prof_mark(c, BE_PROF_OTHER);
    }

    /* every row's final normalised state, for the sequences that asked */
    for (int s = 0, r0 = 0; s < n_seqs; r0 += seqs[s].n_tokens, s++)
        if (seqs[s].hidden)
            for (int i = 0; i < seqs[s].n_tokens; i++)
                c->vec->rms_norm(seqs[s].hidden + (size_t)i * (size_t)E,
                                 c->x + (size_t)(r0 + i) * (size_t)E, c->output_norm, E,
                                 cfg->eps);

    /* output norm and LM head for the selected rows */
    if (ns > 0) {
        for (int i = 0; i < ns; i++)
            c->vec->rms_norm(c->xsel + (size_t)i * (size_t)E, c->x + (size_t)c->sel_row[i] * E,
                             c->output_norm, E, cfg->eps);
        if (c->tap) c->tap(c->tap_user, cfg->n_layer, c->xsel, ns, E);
        kern_matmul(c->pool, &c->output, c->xsel, ns, logits, cfg->n_vocab, c->act);
        if (cfg->final_softcap > 0.0f) {
            const float cap = cfg->final_softcap, inv = 1.0f / cap;
            for (size_t i = 0; i < (size_t)ns * (size_t)cfg->n_vocab; i++)
                logits[i] = tanhf(logits[i] * inv) * cap;
        }
    }
    prof_mark(c, BE_PROF_HEAD);
    c->last.gpu_ms = (clock_mono_s() - t_start) * 1e3;
    c->timed = 1;
    c->seqs = NULL;
    return BE_OK;
}

static int cpu_available(char *why, size_t whylen) {
    if (why && whylen)
        snprintf(why, whylen, "the CPU (%s kernels)", kern_isa_name(kern_active_isa()));
    return 1;
}

/* Rows are batch-invariant unless some weight takes the BLAS path (cpu_weights.c). */
static int cpu_batch_invariant(void *b) {
    const struct cpu_ctx *c = b;
    return c->blas_weights == 0;
}

const struct be_ops be_cpu = {.name = "cpu",
                              .available = cpu_available,
                              .create = cpu_create,
                              .run = cpu_run,
                              .set_tap = cpu_set_tap,
                              .destroy = cpu_destroy,
                              .step_times = cpu_step_times,
                              .set_profile = cpu_set_profile,
                              .batch_invariant = cpu_batch_invariant};
