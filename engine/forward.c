/*
 * forward — the CPU forward pass over a batch of sequences (see forward.h).
 *
 * One step: embed every row, then per layer RMS norm -> Q/K/V (one kern_matmul over all
 * rows) -> q/k (v) norms -> RoPE -> K/V into the cache -> attention (forward_attn.c) ->
 * Wo -> post norm -> residual -> GeGLU FFN -> post norm -> residual (-> Gemma 4 PLE and
 * layer scale); finally the output norm and LM head for the requested rows only.
 *
 * Numerics follow llama.cpp's CPU path where it is cheap: f32 activations, RMS sums in
 * double, F16 KV cache with Q rounded to F16, and the fp16-table GELU (facts §4.6).
 */
#include <math.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/forward_int.h"
#include "engine/gguf.h"
#include "engine/kernels/panel.h"
#include "engine/kernels/quant.h"
#include "base/log.h"
#include "engine/model.h"
#ifdef GEMMAD_CUDA
#include "engine/cuda/cuda_fwd.h"
#endif

const char *fwd_strerror(int status) {
    switch (status) {
    case FWD_OK: return "ok";
    case FWD_EINVAL: return "invalid step (token, position or batch size out of range)";
    case FWD_EKV: return "KV block tables do not cover the step";
    case FWD_ENOMEM: return "out of memory";
    case FWD_EBACKEND: return "compute backend failed";
    }
    return "unknown forward error";
}

/* y = x / sqrt(mean(x^2) + eps) * w (w may be NULL): ggml sums the squares in double. */
void fwd_rms_norm(float *y, const float *x, const float *w, int n, float eps) {
    /* The squares are summed in double like ggml does, in 8 independent lanes (one vector,
     * no serial chain of n dependent adds) folded in a fixed order: the float mean this
     * gives is that of a serial double sum except in ties far below float precision. */
    double lane[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) lane[j] += (double)(x[i + j] * x[i + j]);
    for (; i < n; i++) lane[0] += (double)(x[i] * x[i]);
    const double sum = ((lane[0] + lane[4]) + (lane[2] + lane[6])) +
                       ((lane[1] + lane[5]) + (lane[3] + lane[7]));
    const float mean = (float)(sum / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    if (w)
        for (i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
    else
        for (i = 0; i < n; i++) y[i] = x[i] * scale;
}

static void rms_rows(float *y, const float *x, const float *w, int rows, int n, float eps) {
    for (int r = 0; r < rows; r++)
        fwd_rms_norm(y + (size_t)r * (size_t)n, x + (size_t)r * (size_t)n, w, n, eps);
}

/* GELU-tanh as ggml's CPU table gives it: input rounded to fp16, output rounded to fp16,
 * identity above 10 and 0 below -10. */
static inline float gelu_tab(const float *tab, float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    return tab[f2h(x)];
}

static float *gelu_table_create(void) {
    float *t = malloc(65536 * sizeof(float));
    if (!t) return NULL;
    for (int i = 0; i < 65536; i++) {
        const float x = quant_f16_to_f32((quant_half)i);
        const float g = 0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x *
                                                 (1.0f + 0.044715f * x * x)));
        t[i] = quant_f16_to_f32(quant_f32_to_f16(g));
    }
    return t;
}

/* The Q/K/V projections of layer l as one matmul group (K and V only when the layer owns
 * its cache; V is copied from K when k_eq_v). Returns the number of outputs. */
static int qkv_outs(const struct fwd_ctx *c, int l, struct kern_mm_out *o) {
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

/* Owned anonymous memory: a panel copy or a plain copy of some of the file's bytes. */
static void *own(struct fwd_ctx *c, size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    c->panels[c->n_panels++] = (struct fwd_panel){p, bytes};
    return p;
}

/* w repacked into panels when the active ISA has a panel kernel for it (panel.h); the
 * pages of its rows go back to the kernel, as the matmuls read only the panel now (with
 * large page-cache folios another read nearby may map some back; fwd_weights_init drops
 * the whole mapping where it can). */
static void pack_weight(struct fwd_ctx *c, struct kern_weight *w) {
    if (!panel_supported(w)) return;
    void *p = NULL;
    size_t bytes = 0;
    if (panel_pack(w, c->pool, &p, &bytes) != 0) return;
    c->panels[c->n_panels++] = (struct fwd_panel){p, bytes};
    c->panel_bytes += bytes;
    w->panel = p;
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = ((uintptr_t)w->data + pg - 1) & ~(pg - 1);
    const uintptr_t e = ((uintptr_t)w->data + (uintptr_t)w->n_out * w->row_bytes) & ~(pg - 1);
    if (e > a) madvise((void *)a, e - a, MADV_DONTNEED);
}

/* Bump allocator over one owned block for the small copies (weights left unpacked, norm
 * vectors): *at advances, 64-byte aligned; a NULL src stays NULL. */
static const void *copy_into(uint8_t *base, size_t *at, const void *src, size_t bytes) {
    if (!src || !bytes) return src;
    void *d = base + *at;
    memcpy(d, src, bytes);
    *at += (bytes + 63) & ~(size_t)63;
    return d;
}

/* The layer's views (kern_weights left unpacked, then its vectors) with their sizes: each
 * visit(ctx, ptr, bytes) may redirect *ptr. */
static void layer_views(const struct model_config *cfg, int l, struct model_layer_w *w,
                        void (*visit)(void *ctx, const void **ptr, size_t bytes), void *ctx) {
    const struct model_layer_cfg *lc = &cfg->layer[l];
    struct kern_weight *ws[] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->gate,
                                &w->up, &w->down, &w->inp_gate, &w->proj};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
        if (!ws[i]->panel) visit(ctx, &ws[i]->data, ws[i]->row_bytes * (size_t)ws[i]->n_out);
    const size_t E = (size_t)cfg->n_embd * sizeof(float), H = (size_t)lc->head_dim * sizeof(float);
    const float **vs[] = {&w->attn_norm, &w->post_attn_norm, &w->ffn_norm, &w->post_ffw_norm,
                          &w->post_norm, &w->q_norm, &w->k_norm, &w->rope_freqs};
    const size_t vb[] = {E, E, E, E, E, H, H, (size_t)(lc->n_rot / 2) * sizeof(float)};
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++)
        visit(ctx, (const void **)vs[i], vb[i]);
}

struct copy_ctx {
    uint8_t *base; /* NULL while sizing */
    size_t at;
};

static void copy_visit(void *arg, const void **ptr, size_t bytes) {
    struct copy_ctx *k = arg;
    if (!*ptr || !bytes) return;
    if (k->base)
        *ptr = copy_into(k->base, &k->at, *ptr, bytes);
    else
        k->at += (bytes + 63) & ~(size_t)63;
}

/* c->lw, c->output, c->output_norm: the model's weights as the CPU matmuls read them.
 * Where a panel kernel exists the weight is repacked; then, for a model whose embedding
 * lookup can read the LM head's panel (tied, Gemma 1-3), everything else the forward pass
 * reads is copied too and the file's pages are handed back to the kernel: the mapping is
 * not touched again, so memory stays the file's size instead of file + panels (touching
 * any byte of the mapping can map a whole large page-cache folio). */
static int fwd_weights_init(struct fwd_ctx *c) {
    const struct model *m = c->m;
    const struct model_config *cfg = &m->cfg;
    const int L = cfg->n_layer;
    c->lw = calloc((size_t)L, sizeof *c->lw);
    c->panels = calloc((size_t)L * 9 + 2, sizeof *c->panels);
    if (!c->lw || !c->panels) return -1;
    c->output = m->output;
    c->output_norm = m->output_norm;
    pack_weight(c, &c->output);
    for (int l = 0; l < L; l++) {
        struct model_layer_w *w = &c->lw[l];
        *w = m->layer[l];
        struct kern_weight *ws[] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->gate,
                                    &w->up, &w->down, &w->inp_gate, &w->proj};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            pack_weight(c, ws[i]);
    }
    const int detach = c->output.panel && m->tok_embd.data == m->output.data &&
                       cfg->n_embd_pl == 0 && m->gguf && m->gguf->map;
    if (detach) {
        struct copy_ctx k = {NULL, 0};
        for (int l = 0; l < L; l++)
            layer_views(cfg, l, &c->lw[l], copy_visit, &k);
        const size_t ob = (size_t)cfg->n_embd * sizeof(float);
        k.at += (ob + 63) & ~(size_t)63;
        k.base = own(c, k.at);
        if (!k.base) return -1;
        k.at = 0;
        for (int l = 0; l < L; l++)
            layer_views(cfg, l, &c->lw[l], copy_visit, &k);
        c->output_norm = copy_into(k.base, &k.at, m->output_norm, ob);
        const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
        madvise((void *)((uintptr_t)m->gguf->map & ~(pg - 1)), m->gguf->map_size,
                MADV_DONTNEED);
        c->detached = 1;
    }
    if (c->panel_bytes)
        LOG_I("forward", 0, "weights repacked into panels: %.1f MiB%s",
              (double)c->panel_bytes / (1024.0 * 1024.0),
              detach ? "; the file mapping is no longer read" : "");
    return 0;
}

int fwd_create(const struct model *m, struct kvs_pool *kv, const struct fwd_opts *opts,
               struct fwd_ctx **out, char *err, size_t errlen) {
    *out = NULL;
    if (err && errlen) err[0] = 0;
    if (!m || !kv || !opts || opts->max_tokens < 1 || opts->max_seqs < 1 ||
        opts->max_logit_rows < 0 || opts->max_tokens > (1 << 20) || opts->max_ctx < 0) {
        if (err) snprintf(err, errlen, "fwd_create: invalid options (max_tokens %d, max_seqs "
                          "%d, max_logit_rows %d)", opts ? opts->max_tokens : 0,
                          opts ? opts->max_seqs : 0, opts ? opts->max_logit_rows : 0);
        return FWD_EINVAL;
    }
    if (kv->model != m) {
        if (err) snprintf(err, errlen, "fwd_create: the KV pool belongs to another model");
        return FWD_EINVAL;
    }
    struct fwd_ctx *c = calloc(1, sizeof *c);
    if (!c) goto fail_nomem_early;
    c->m = m;
    c->kv = kv;
    c->o = *opts;
    if (c->o.n_threads <= 0) c->o.n_threads = pool_default_threads();
    if (c->o.max_logit_rows < 1) c->o.max_logit_rows = 1;
    c->dev = FWD_DEVICE_CPU;

    if (opts->device == FWD_DEVICE_CUDA || opts->device == FWD_DEVICE_AUTO) {
#ifdef GEMMAD_CUDA
        char why[256] = "";
        if (cudafwd_available(why, sizeof why)) {
            struct cudafwd *cf = NULL;
            int rc = cudafwd_create(m, kv, &c->o, &cf, err, errlen);
            if (rc == 0) {
                c->cuda = cf;
                c->dev = FWD_DEVICE_CUDA;
                *out = c;
                return FWD_OK;
            }
            if (opts->device == FWD_DEVICE_CUDA) {
                free(c);
                return FWD_EBACKEND;
            }
            LOG_W("forward", 0, "CUDA backend unavailable (%s); using the CPU", err);
            if (err && errlen) err[0] = 0;
        } else if (opts->device == FWD_DEVICE_CUDA) {
            if (err) snprintf(err, errlen, "no usable CUDA device: %s", why);
            free(c);
            return FWD_EBACKEND;
        }
#else
        if (opts->device == FWD_DEVICE_CUDA) {
            if (err) snprintf(err, errlen, "built without CUDA (make CUDA=1)");
            free(c);
            return FWD_EBACKEND;
        }
#endif
    }

    if (pool_create(c->o.n_threads, &c->pool) != 0) {
        if (err) snprintf(err, errlen, "fwd_create: cannot start %d compute threads",
                          c->o.n_threads);
        free(c);
        return FWD_ENOMEM;
    }
    if (fwd_weights_init(c) < 0) {
        if (err) snprintf(err, errlen, "fwd_create: out of memory for the weight table");
        fwd_destroy(c);
        return FWD_ENOMEM;
    }
    if (fwd_rope_init(c) < 0) {
        if (err) snprintf(err, errlen, "fwd_create: more than %d RoPE configurations",
                          FWD_MAX_ROPE);
        pool_destroy(c->pool);
        free(c);
        return FWD_EINVAL;
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
    const int max_span = fwd_attn_max_span(m, kv, c->o.max_ctx);
    c->attn_stride = fwd_attn_scratch_floats(m, max_span);
    c->attn_score_floats = fwd_attn_score_floats(m, max_span);
    c->attn_scratch =
        xalloc((size_t)pool_size(c->pool) * c->attn_stride * sizeof(float), &fail);
    c->xsel = xalloc((size_t)c->o.max_logit_rows * E * sizeof(float), &fail);
    c->sel_row = xalloc((size_t)c->o.max_logit_rows * sizeof(int32_t), &fail);
    c->gelu_tab = gelu_table_create();
    if (!c->gelu_tab) fail = 1;
    if (fail) {
        fwd_destroy(c);
        goto fail_nomem_early;
    }
    *out = c;
    return FWD_OK;
fail_nomem_early:
    if (err) snprintf(err, errlen, "fwd_create: out of memory for the forward scratch");
    return FWD_ENOMEM;
}

void fwd_destroy(struct fwd_ctx *c) {
    if (!c) return;
#ifdef GEMMAD_CUDA
    if (c->cuda) cudafwd_destroy(c->cuda);
#endif
    pool_destroy(c->pool);
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
    for (int i = 0; i < c->n_panels; i++)
        panel_free(c->panels[i].p, c->panels[i].bytes);
    free(c->panels);
    free(c->lw);
    free(c);
}

enum fwd_device fwd_device(const struct fwd_ctx *c) { return c->dev; }

void fwd_set_tap(struct fwd_ctx *c, fwd_tap_fn fn, void *user) {
    c->tap = fn;
    c->tap_user = user;
}

/* ---- validation ---- */

static int has_class(const struct kvs_pool *p, int n_layer, int cls) {
    for (int l = 0; l < n_layer; l++)
        if (p->cls[l] == cls) return 1;
    return 0;
}

/* Checks the whole step before anything is written. Returns the number of rows and of
 * logit rows through the out parameters. */
static int validate(const struct fwd_ctx *c, const struct fwd_seq *seqs, int n_seqs,
                    int *n_rows, int *n_logits) {
    const struct model *m = c->m;
    const struct kvs_pool *p = c->kv;
    if (!seqs || n_seqs < 1 || n_seqs > c->o.max_seqs) return FWD_EINVAL;
    const int need_full = has_class(p, m->cfg.n_layer, KVS_FULL);
    const int need_swa = has_class(p, m->cfg.n_layer, KVS_SWA);
    const int bs = p->block_size;
    int rows = 0, lg = 0;
    for (int s = 0; s < n_seqs; s++) {
        const struct fwd_seq *q = &seqs[s];
        if (!q->tokens || q->n_tokens < 1 || q->pos < 0 || !q->kv) return FWD_EINVAL;
        if (q->n_tokens > c->o.max_tokens - rows) return FWD_EINVAL;
        if ((int64_t)q->pos + q->n_tokens > (int64_t)1 << 30) return FWD_EINVAL;
        if (c->o.max_ctx > 0 && q->pos + q->n_tokens > c->o.max_ctx) return FWD_EINVAL;
        for (int i = 0; i < q->n_tokens; i++)
            if (q->tokens[i] < 0 || q->tokens[i] >= m->cfg.n_vocab) return FWD_EINVAL;
        rows += q->n_tokens;
        if (q->logits == FWD_LOGITS_LAST) lg += 1;
        else if (q->logits == FWD_LOGITS_ALL) lg += q->n_tokens;
        else if (q->logits != FWD_LOGITS_NONE) return FWD_EINVAL;
        const int end = q->pos + q->n_tokens; /* one past the last position written */
        if (need_full) {
            /* a sequence's blocks are distinct, so it never holds more than the pool */
            if ((int64_t)end > (int64_t)p->n_blocks[KVS_FULL] * bs) return FWD_EKV;
            const int nb = (end + bs - 1) / bs;
            if (!q->kv->full || q->kv->n_full < nb) return FWD_EKV;
            for (int b = 0; b < nb; b++)
                if (q->kv->full[b] < 0 || q->kv->full[b] >= p->n_blocks[KVS_FULL]) return FWD_EKV;
        }
        if (need_swa) {
            const int ring = (m->cfg.sliding_window + q->n_tokens - 2) / bs + 2;
            if (!q->kv->swa || q->kv->n_swa < ring) return FWD_EKV;
            for (int b = 0; b < q->kv->n_swa; b++)
                if (q->kv->swa[b] < 0 || q->kv->swa[b] >= p->n_blocks[KVS_SWA]) return FWD_EKV;
        }
    }
    if (lg > c->o.max_logit_rows) return FWD_EINVAL;
    *n_rows = rows;
    *n_logits = lg;
    return FWD_OK;
}

/* ---- the layer ---- */

struct geglu_job {
    const float *tab; /* the fp16 GELU table */
    float *g;         /* [T][n_ff] gate in, GeGLU out */
    const float *u;   /* [T][n_ff] up */
    int T, n_ff;
};

/* g = GELU(g) * u for columns [o0, o1) of every row (the epilogue of the gate/up group). */
static void geglu_rows(void *arg, int64_t o0, int64_t o1) {
    const struct geglu_job *J = arg;
    for (int r = 0; r < J->T; r++) {
        float *g = J->g + (size_t)r * (size_t)J->n_ff;
        const float *u = J->u + (size_t)r * (size_t)J->n_ff;
        int64_t i = o0;
#if defined(__AVX512F__)
        /* 16 at a time, the same values as gelu_tab: round to fp16 (nearest even), gather
         * the table entries, x itself from 10 up, 0 from -10 down */
        for (; i + 16 <= o1; i += 16) {
            const __m512 x = _mm512_loadu_ps(g + i);
            const __m512i idx = _mm512_cvtepu16_epi32(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
            __m512 t = _mm512_i32gather_ps(idx, J->tab, 4);
            t = _mm512_mask_mov_ps(t, _mm512_cmp_ps_mask(x, _mm512_set1_ps(10.0f), _CMP_GE_OQ), x);
            t = _mm512_maskz_mov_ps(
                (__mmask16)~_mm512_cmp_ps_mask(x, _mm512_set1_ps(-10.0f), _CMP_LE_OQ), t);
            _mm512_storeu_ps(g + i, _mm512_mul_ps(t, _mm512_loadu_ps(u + i)));
        }
#endif
        for (; i < o1; i++) g[i] = gelu_tab(J->tab, g[i]) * u[i];
    }
}

/* Per-layer inputs of Gemma 4 (facts §4.4 PLE): P[r][l] = (RMS(proj(x0)/sqrt(E)) +
 * e[t]*sqrt(n_pl)) / sqrt(2). Called right after the embedding, x holds x0. */
static void ple_prepare(struct fwd_ctx *c) {
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
            fwd_rms_norm(sl, sl, m->per_layer_proj_norm, npl, m->cfg.eps);
        }
        for (size_t i = 0; i < P; i++) e[i] = (pr[i] + e[i] * s_e) * s_in;
    }
}

static void layer_forward(struct fwd_ctx *c, int l) {
    const struct model *m = c->m;
    const struct model_config *cfg = &m->cfg;
    const struct model_layer_cfg *lc = &cfg->layer[l];
    const struct model_layer_w *w = &c->lw[l];
    const int T = c->n_rows, E = cfg->n_embd;
    const int hd = lc->head_dim, hdv = lc->head_dim_v;
    const int nq = lc->n_head * hd, nv = lc->n_head_kv * hdv;
    const float eps = cfg->eps;
    struct pool *pool = c->pool;

    /* attention: Q, K and V in one pool run */
    rms_rows(c->h, c->x, w->attn_norm, T, E, eps);
    struct kern_mm_out qkv[3];
    int n_qkv = qkv_outs(c, l, qkv);
    kern_matmul_group(pool, qkv, n_qkv, c->h, T, c->act, NULL, NULL);
    if (w->q_norm) rms_rows(c->q, c->q, w->q_norm, T * lc->n_head, hd, eps);
    fwd_rope_apply(c, l, c->q, lc->n_head, hd);
    if (cfg->attn_scale != 1.0f)
        for (size_t i = 0; i < (size_t)T * (size_t)nq; i++) c->q[i] *= cfg->attn_scale;
    if (lc->has_kv) {
        if (lc->k_eq_v)
            memcpy(c->v, c->k, (size_t)T * (size_t)nv * sizeof(float)); /* raw K, pre-norm */
        if (w->k_norm) rms_rows(c->k, c->k, w->k_norm, T * lc->n_head_kv, hd, eps);
        if (cfg->v_norm) rms_rows(c->v, c->v, NULL, T * lc->n_head_kv, hdv, eps);
        fwd_rope_apply(c, l, c->k, lc->n_head_kv, hd);
        fwd_kv_write(c, l);
    }
    fwd_attention(c, l);
    kern_matmul(pool, &w->wo, c->att, T, c->t, E, c->act);
    if (w->post_attn_norm) rms_rows(c->t, c->t, w->post_attn_norm, T, E, eps);
    for (size_t i = 0; i < (size_t)T * (size_t)E; i++) c->x[i] += c->t[i];

    /* feed-forward */
    rms_rows(c->h, c->x, w->ffn_norm, T, E, eps);
    /* gate and up in one pool run, GeGLU on each task's rows as soon as both are done */
    const struct kern_mm_out gu[2] = {{&w->gate, c->ff_g, lc->n_ff}, {&w->up, c->ff_u, lc->n_ff}};
    struct geglu_job gj = {c->gelu_tab, c->ff_g, c->ff_u, T, lc->n_ff};
    kern_matmul_group(pool, gu, 2, c->h, T, c->act, geglu_rows, &gj);
    kern_matmul(pool, &w->down, c->ff_g, T, c->t, E, c->act);
    if (w->post_ffw_norm) rms_rows(c->t, c->t, w->post_ffw_norm, T, E, eps);
    for (size_t i = 0; i < (size_t)T * (size_t)E; i++) c->x[i] += c->t[i];

    /* Gemma 4 per-layer embedding and layer scale */
    if (cfg->n_embd_pl > 0 && w->inp_gate.data) {
        const int npl = cfg->n_embd_pl;
        kern_matmul(pool, &w->inp_gate, c->x, T, c->pl_g, npl, c->act);
        for (int r = 0; r < T; r++) {
            float *g = c->pl_g + (size_t)r * (size_t)npl;
            const float *pin =
                c->ple + ((size_t)r * (size_t)cfg->n_layer + (size_t)l) * (size_t)npl;
            for (int i = 0; i < npl; i++) g[i] = gelu_tab(c->gelu_tab, g[i]) * pin[i];
        }
        kern_matmul(pool, &w->proj, c->pl_g, T, c->t, E, c->act);
        rms_rows(c->t, c->t, w->post_norm, T, E, eps);
        for (size_t i = 0; i < (size_t)T * (size_t)E; i++) c->x[i] += c->t[i];
    }
    if (w->out_scale != 1.0f)
        for (size_t i = 0; i < (size_t)T * (size_t)E; i++) c->x[i] *= w->out_scale;
}

int fwd_threads(const struct fwd_ctx *c) {
    return pool_size(c->pool);
}

void fwd_parallel(struct fwd_ctx *c, void (*fn)(void *arg, int task, int n_tasks), void *arg,
                  int n_tasks) {
    pool_run(c->pool, fn, arg, n_tasks);
}

/* ---- the step ---- */

int fwd_run(struct fwd_ctx *c, const struct fwd_seq *seqs, int n_seqs, float *logits) {
    int rows = 0, n_logits = 0;
    int st = validate(c, seqs, n_seqs, &rows, &n_logits);
    if (st != FWD_OK) return st;
    if (n_logits > 0 && !logits) return FWD_EINVAL;
#ifdef GEMMAD_CUDA
    if (c->cuda) return cudafwd_run(c->cuda, seqs, n_seqs, logits);
#endif
    const struct model *m = c->m;
    const struct model_config *cfg = &m->cfg;
    const int E = cfg->n_embd;

    c->seqs = seqs;
    c->n_rows = rows;
    int r = 0, ns = 0;
    for (int s = 0; s < n_seqs; s++) {
        const struct fwd_seq *q = &seqs[s];
        for (int i = 0; i < q->n_tokens; i++, r++) {
            c->row_tok[r] = q->tokens[i];
            c->row_pos[r] = q->pos + i;
            c->row_seq[r] = s;
            if (q->logits == FWD_LOGITS_ALL || (q->logits == FWD_LOGITS_LAST &&
                                                i == q->n_tokens - 1))
                c->sel_row[ns++] = r;
        }
    }

    /* embeddings */
    for (r = 0; r < rows; r++) {
        float *x = c->x + (size_t)r * (size_t)E;
        if (c->detached) /* the tied LM head's panel holds the embedding rows */
            panel_get_row(&c->output, c->row_tok[r], x);
        else
            kern_get_row(&m->tok_embd, c->row_tok[r], x);
        for (int i = 0; i < E; i++) x[i] *= cfg->embd_scale;
    }
    if (cfg->n_embd_pl > 0) ple_prepare(c);
    fwd_rope_prepare(c);

    for (int l = 0; l < cfg->n_layer; l++) {
        layer_forward(c, l);
        if (c->tap) c->tap(c->tap_user, l, c->x, rows, E);
    }

    /* output norm and LM head for the selected rows */
    if (ns > 0) {
        for (int i = 0; i < ns; i++)
            fwd_rms_norm(c->xsel + (size_t)i * (size_t)E, c->x + (size_t)c->sel_row[i] * E,
                         c->output_norm, E, cfg->eps);
        if (c->tap) c->tap(c->tap_user, cfg->n_layer, c->xsel, ns, E);
        kern_matmul(c->pool, &c->output, c->xsel, ns, logits, cfg->n_vocab, c->act);
        if (cfg->final_softcap > 0.0f) {
            const float cap = cfg->final_softcap, inv = 1.0f / cap;
            for (size_t i = 0; i < (size_t)ns * (size_t)cfg->n_vocab; i++)
                logits[i] = tanhf(logits[i] * inv) * cap;
        }
    }
    c->seqs = NULL;
    return FWD_OK;
}
