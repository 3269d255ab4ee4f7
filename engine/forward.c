/*
 * forward — the public forward API (forward.h) over the backends of engine/backend.h.
 *
 * fwd_create checks the options, starts the compute pool (whatever the device, so
 * fwd_parallel runs on every thread), describes the model and the KV pool to the backends
 * in backend.h's plain terms, and picks one: the CPU (engine/cpu_fwd.c) or, in a CUDA=1
 * build, CUDA when asked or available. fwd_run validates every step against the block
 * tables before the backend sees it; the tap reaches whichever backend runs.
 */
#include "engine/forward.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "engine/backend.h"
#include "engine/kernels/pool.h"

/* The only conditional: whether the CUDA backend is linked in. */
#ifdef GEMMAD_CUDA
static const struct be_ops *const g_cuda = &be_cuda;
#else
static const struct be_ops *const g_cuda = NULL;
#endif

_Static_assert(MODEL_MAX_LAYERS == BE_MAX_LAYERS, "one layer limit");
_Static_assert((int)KVSTORE_F16 == (int)BE_KV_F16 && (int)KVSTORE_Q8_0 == (int)BE_KV_Q8_0 &&
                   (int)KVSTORE_F32 == (int)BE_KV_F32,
               "kvstore_dtype and be_kv_dtype agree");
_Static_assert((int)KVSTORE_FULL == (int)BE_KV_FULL && (int)KVSTORE_SWA == (int)BE_KV_SWA,
               "kvstore_class and be_kv_class agree");
_Static_assert((int)FWD_LOGITS_LAST == (int)BE_LOGITS_LAST &&
                   (int)FWD_LOGITS_ALL == (int)BE_LOGITS_ALL,
               "fwd_logits and be_logits agree");

struct fwd_ctx {
    const struct model *m;
    struct kvstore_pool *kv;
    struct fwd_opts o;          /* as given, n_threads and max_logit_rows resolved */
    struct pool *pool;          /* owned: the compute threads */
    const struct be_ops *be;    /* the backend running the steps */
    void *b;                    /* its context */
    enum fwd_device dev;
    struct be_model bm;         /* what the backends are told */
    struct be_layer *layers;    /* [n_layer] */
    struct be_kv bkv;
    struct be_seq *bseq;        /* [max_seqs] the current step, backend.h's way */
    fwd_tap_fn tap;
    void *tap_user;
};

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

void fwd_set_fail_at(int n) { be_fault_arm(n); }

/* ---- descriptors ---- */

static struct be_tensor tensor(const struct kern_weight *w) {
    return (struct be_tensor){w->type, w->n_in, w->n_out, w->row_bytes, w->data};
}

static int describe(struct fwd_ctx *c) {
    const struct model *m = c->m;
    const struct model_config *cfg = &m->cfg;
    const int L = cfg->n_layer;
    c->layers = be_fault() ? NULL : calloc((size_t)(L > 0 ? L : 1), sizeof *c->layers);
    c->bseq = be_fault() ? NULL : calloc((size_t)c->o.max_seqs, sizeof *c->bseq);
    if (!c->layers || !c->bseq) return -1;
    for (int l = 0; l < L; l++) {
        const struct model_layer_cfg *lc = &cfg->layer[l];
        const struct model_layer_w *w = &m->layer[l];
        c->layers[l] = (struct be_layer){
            .n_head = lc->n_head, .n_head_kv = lc->n_head_kv, .head_dim = lc->head_dim,
            .head_dim_v = lc->head_dim_v, .n_ff = lc->n_ff, .n_rot = lc->n_rot,
            .sliding = lc->sliding, .rope_base = lc->rope_base, .rope_scale = lc->rope_scale,
            .kv_layer = lc->kv_layer, .has_kv = lc->has_kv, .k_eq_v = lc->k_eq_v,
            .out_scale = w->out_scale, .attn_norm = w->attn_norm, .q_norm = w->q_norm,
            .k_norm = w->k_norm, .post_attn_norm = w->post_attn_norm, .ffn_norm = w->ffn_norm,
            .post_ffw_norm = w->post_ffw_norm, .post_norm = w->post_norm,
            .rope_freqs = w->rope_freqs, .wq = tensor(&w->wq), .wk = tensor(&w->wk),
            .wv = tensor(&w->wv), .wo = tensor(&w->wo), .gate = tensor(&w->gate),
            .up = tensor(&w->up), .down = tensor(&w->down), .inp_gate = tensor(&w->inp_gate),
            .proj = tensor(&w->proj)};
    }
    c->bm = (struct be_model){
        .n_layer = L, .n_embd = cfg->n_embd, .n_vocab = cfg->n_vocab, .eps = cfg->eps,
        .attn_scale = cfg->attn_scale, .attn_softcap = cfg->attn_softcap,
        .final_softcap = cfg->final_softcap, .embd_scale = cfg->embd_scale,
        .sliding_window = cfg->sliding_window, .v_norm = cfg->v_norm,
        .n_embd_pl = cfg->n_embd_pl, .tok_embd = tensor(&m->tok_embd),
        .output = tensor(&m->output), .pl_tok_embd = tensor(&m->per_layer_tok_embd),
        .pl_proj = tensor(&m->per_layer_model_proj), .output_norm = m->output_norm,
        .pl_proj_norm = m->per_layer_proj_norm, .layer = c->layers};
    const struct kvstore_pool *kv = c->kv;
    c->bkv = (struct be_kv){(enum be_kv_dtype)kv->dtype, kvstore_dtype_name(kv->dtype),
                            kv->block_size, {kv->n_blocks[KVSTORE_FULL], kv->n_blocks[KVSTORE_SWA]},
                            kv->cls};
    return 0;
}

/* ---- create / destroy ---- */

/* Starts backend `be` on c; FWD_OK or its error (err filled). */
static int start(struct fwd_ctx *c, const struct be_ops *be, enum fwd_device dev, char *err,
                 size_t errlen) {
    const struct be_desc d = {
        .bm = &c->bm, .bkv = &c->bkv,
        .o = {c->o.max_tokens, c->o.max_seqs, c->o.max_logit_rows, c->o.deterministic,
              c->o.max_ctx},
        .m = c->m, .kv = c->kv, .pool = c->pool};
    int rc = be->create(&d, &c->b, err, errlen);
    if (rc != BE_OK) return rc;
    c->be = be;
    c->dev = dev;
    return FWD_OK;
}

/* The CUDA backend when asked for (FWD_EBACKEND with the reason when it cannot run) or,
 * for AUTO, when it can; 1 when the CPU should run instead. */
static int start_cuda(struct fwd_ctx *c, enum fwd_device want, char *err, size_t errlen) {
    if (!g_cuda) {
        if (want == FWD_DEVICE_AUTO) return 1;
        if (err) snprintf(err, errlen, "built without CUDA (make CUDA=1)");
        return FWD_EBACKEND;
    }
    char why[256] = "";
    if (!g_cuda->available(why, sizeof why)) {
        if (want == FWD_DEVICE_AUTO) return 1;
        if (err) snprintf(err, errlen, "no usable CUDA device: %s", why);
        return FWD_EBACKEND;
    }
    const int rc = start(c, g_cuda, FWD_DEVICE_CUDA, err, errlen);
    if (rc == FWD_OK) return FWD_OK;
    if (want == FWD_DEVICE_CUDA) return rc == FWD_EINVAL ? FWD_EINVAL : FWD_EBACKEND;
    if (rc == FWD_EINVAL) {
        /* The device is there but an option the user chose (the KV cache type) does not run
         * on it: a start-up error, not a quiet move of the whole model to the CPU. */
        char why2[256];
        snprintf(why2, sizeof why2, "%s", err ? err : "");
        if (err) snprintf(err, errlen, "--device auto found a CUDA device: %s", why2);
        return FWD_EINVAL;
    }
    LOG_W("forward", 0, "CUDA backend unavailable (%s); using the CPU", err ? err : "");
    if (err && errlen) err[0] = 0;
    return 1;
}

int fwd_create(const struct model *m, struct kvstore_pool *kv, const struct fwd_opts *opts,
               struct fwd_ctx **out, char *err, size_t errlen) {
    *out = NULL;
    be_fault_restart(); /* tests only: a no-op unless fwd_set_fail_at armed it */
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
    int st = FWD_ENOMEM;
    struct fwd_ctx *c = be_fault() ? NULL : calloc(1, sizeof *c);
    if (!c) goto fail_nomem;
    c->m = m;
    c->kv = kv;
    c->o = *opts;
    if (c->o.n_threads <= 0) c->o.n_threads = pool_default_threads();
    if (c->o.max_logit_rows < 1) c->o.max_logit_rows = 1;
    if (be_fault() || pool_create(c->o.n_threads, &c->pool) != 0) {
        if (err) snprintf(err, errlen, "fwd_create: cannot start %d compute threads",
                          c->o.n_threads);
        goto fail;
    }
    if (describe(c) < 0) goto fail_nomem;
    st = 1;
    if (opts->device == FWD_DEVICE_CUDA || opts->device == FWD_DEVICE_AUTO) {
        st = start_cuda(c, opts->device, err, errlen);
        if (st < 0) goto fail;
    }
    if (st == 1) {
        st = start(c, &be_cpu, FWD_DEVICE_CPU, err, errlen);
        if (st != FWD_OK) goto fail;
    }
    *out = c;
    return FWD_OK;
fail_nomem:
    if (err) snprintf(err, errlen, "fwd_create: out of memory");
fail:
    fwd_destroy(c);
    return st;
}

void fwd_destroy(struct fwd_ctx *c) {
    if (!c) return;
    if (c->be) c->be->destroy(c->b);
    pool_destroy(c->pool);
    free(c->bseq);
    free(c->layers);
    free(c);
}

enum fwd_device fwd_device(const struct fwd_ctx *c) { return c->dev; }

int fwd_batch_invariant(const struct fwd_ctx *c) {
    return c->be->batch_invariant ? c->be->batch_invariant(c->b) : c->o.deterministic;
}

int fwd_device_available(enum fwd_device dev, char *why, size_t whylen) {
    if (dev == FWD_DEVICE_CPU || dev == FWD_DEVICE_AUTO) return be_cpu.available(why, whylen);
    if (!g_cuda) {
        if (why && whylen) snprintf(why, whylen, "built without CUDA (make CUDA=1)");
        return 0;
    }
    return g_cuda->available(why, whylen);
}

void fwd_set_tap(struct fwd_ctx *c, fwd_tap_fn fn, void *user) {
    c->tap = fn;
    c->tap_user = user;
    if (c->be->set_tap(c->b, fn, user) != BE_OK) {
        LOG_E("forward", 0, "the %s backend cannot install the tap (out of memory)",
              c->be->name);
        c->be->set_tap(c->b, NULL, NULL);
        c->tap = NULL;
        c->tap_user = NULL;
    }
}

int fwd_last_step_times(const struct fwd_ctx *c, struct fwd_step_times *out) {
    struct be_step_times t;
    if (!c->be->step_times || c->be->step_times(c->b, &t) != BE_OK) return -1;
    *out = (struct fwd_step_times){.h2d_ms = t.h2d_ms,
                                   .gpu_ms = t.gpu_ms,
                                   .d2h_ms = t.d2h_ms,
                                   .matmul_ms = t.class_ms[BE_PROF_MATMUL],
                                   .attn_ms = t.class_ms[BE_PROF_ATTN],
                                   .norm_ms = t.class_ms[BE_PROF_NORM],
                                   .other_ms = t.class_ms[BE_PROF_OTHER],
                                   .head_ms = t.class_ms[BE_PROF_HEAD],
                                   .profiled = t.profiled,
                                   .graph = t.graph};
    return 0;
}

int fwd_set_profile(struct fwd_ctx *c, int on) {
    if (!c->be->set_profile || c->be->set_profile(c->b, on) != BE_OK) return -1;
    return 0;
}

int fwd_threads(const struct fwd_ctx *c) {
    return pool_size(c->pool);
}

void fwd_parallel(struct fwd_ctx *c, void (*fn)(void *arg, int task, int n_tasks), void *arg,
                  int n_tasks) {
    pool_run(c->pool, fn, arg, n_tasks);
}

/* ---- validation ---- */

static int has_class(const struct kvstore_pool *p, int n_layer, int cls) {
    for (int l = 0; l < n_layer; l++)
        if (p->cls[l] == cls) return 1;
    return 0;
}

/* Checks the whole step before anything is written. Returns the number of rows and of
 * logit rows through the out parameters. */
static int validate(const struct fwd_ctx *c, const struct fwd_seq *seqs, int n_seqs,
                    int *n_rows, int *n_logits) {
    const struct model *m = c->m;
    const struct kvstore_pool *p = c->kv;
    if (!seqs || n_seqs < 1 || n_seqs > c->o.max_seqs) return FWD_EINVAL;
    const int need_full = has_class(p, m->cfg.n_layer, KVSTORE_FULL);
    const int need_swa = has_class(p, m->cfg.n_layer, KVSTORE_SWA);
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
            if ((int64_t)end > (int64_t)p->n_blocks[KVSTORE_FULL] * bs) return FWD_EKV;
            const int nb = (end + bs - 1) / bs;
            if (!q->kv->full || q->kv->n_full < nb) return FWD_EKV;
            for (int b = 0; b < nb; b++)
                if (q->kv->full[b] < 0 || q->kv->full[b] >= p->n_blocks[KVSTORE_FULL]) return FWD_EKV;
        }
        if (need_swa) {
            const int ring = (m->cfg.sliding_window + q->n_tokens - 2) / bs + 2;
            if (!q->kv->swa || q->kv->n_swa < ring) return FWD_EKV;
            for (int b = 0; b < q->kv->n_swa; b++)
                if (q->kv->swa[b] < 0 || q->kv->swa[b] >= p->n_blocks[KVSTORE_SWA]) return FWD_EKV;
        }
    }
    if (lg > c->o.max_logit_rows) return FWD_EINVAL;
    *n_rows = rows;
    *n_logits = lg;
    return FWD_OK;
}

/* ---- the step ---- */

int fwd_run(struct fwd_ctx *c, const struct fwd_seq *seqs, int n_seqs, float *logits) {
    return fwd_run_hidden(c, seqs, n_seqs, logits, NULL);
}

/* The TOPK rows' candidates from whole rows on the host, over the compute threads. */
struct topk_job {
    const float *logits;
    size_t nv;
    int n;
    const uint8_t *kind;
    const float *scale;
    int32_t *id;
    float *val;
};

static void topk_task(void *arg, int task, int n_tasks) {
    const struct topk_job *J = arg;
    for (int r = task; r < J->n; r += n_tasks)
        if (J->kind[r] == FWD_ROW_TOPK)
            be_topk_row(J->logits + (size_t)r * J->nv, (int)J->nv, J->scale[r],
                        J->id + (size_t)r * FWD_TOPK_MAX, J->val + (size_t)r * FWD_TOPK_MAX);
}

_Static_assert(FWD_TOPK_MAX == BE_TOPK_MAX && (int)FWD_ROW_TOPK == (int)BE_ROW_TOPK &&
                   (int)FWD_ROW_GREEDY == (int)BE_ROW_GREEDY,
               "forward.h and backend.h disagree on the row kinds");

/* fwd_run_hidden and fwd_run_rows (kind NULL when not asked). */
static int run_step(struct fwd_ctx *c, const struct fwd_seq *seqs, int n_seqs, float *logits,
                    float *hidden, const uint8_t *kind, const float *scale, int32_t *ids,
                    int32_t *topk_id, float *topk_val) {
    int rows = 0, n_logits = 0;
    int st = validate(c, seqs, n_seqs, &rows, &n_logits);
    if (st != FWD_OK) return st;
    if (n_logits > 0 && !logits) return FWD_EINVAL;
    if (hidden && c->be != &be_cpu) return FWD_EINVAL;
    const size_t E = (size_t)c->m->cfg.n_embd;
    size_t row = 0;
    for (int s = 0; s < n_seqs; s++) {
        const struct fwd_seq *q = &seqs[s];
        c->bseq[s] = (struct be_seq){q->tokens,   q->n_tokens, q->pos,
                                     q->kv->full, q->kv->n_full, q->kv->swa,
                                     q->kv->n_swa, (enum be_logits)q->logits,
                                     hidden ? hidden + row * E : NULL};
        row += (size_t)q->n_tokens;
    }
    if (!kind || n_logits == 0) return c->be->run(c->b, c->bseq, n_seqs, logits);
    int n_topk = 0;
    for (int r = 0; r < n_logits; r++) {
        if (kind[r] > FWD_ROW_TOPK) return FWD_EINVAL;
        n_topk += kind[r] == FWD_ROW_TOPK;
    }
    if (!ids || (n_topk && (!scale || !topk_id || !topk_val))) return FWD_EINVAL;
    if (c->be->run_rows)
        return c->be->run_rows(c->b, c->bseq, n_seqs, logits, kind, scale, ids, topk_id,
                               topk_val);
    for (int r = 0; r < n_logits; r++) ids[r] = -1; /* the rows come back whole */
    st = c->be->run(c->b, c->bseq, n_seqs, logits);
    if (st == FWD_OK && n_topk) {
        struct topk_job J = {logits, (size_t)c->m->cfg.n_vocab, n_logits, kind, scale,
                             topk_id, topk_val};
        fwd_parallel(c, topk_task, &J, n_topk < fwd_threads(c) ? n_topk : fwd_threads(c));
    }
    return st;
}

int fwd_run_hidden(struct fwd_ctx *c, const struct fwd_seq *seqs, int n_seqs, float *logits,
                   float *hidden) {
    return run_step(c, seqs, n_seqs, logits, hidden, NULL, NULL, NULL, NULL, NULL);
}

int fwd_run_greedy(struct fwd_ctx *c, const struct fwd_seq *seqs, int n_seqs, float *logits,
                   const uint8_t *greedy, int32_t *ids) {
    return run_step(c, seqs, n_seqs, logits, NULL, greedy, NULL, ids, NULL, NULL);
}

int fwd_run_rows(struct fwd_ctx *c, const struct fwd_seq *seqs, int n_seqs, float *logits,
                 const uint8_t *kind, const float *scale, int32_t *ids, int32_t *topk_id,
                 float *topk_val) {
    return run_step(c, seqs, n_seqs, logits, NULL, kind, scale, ids, topk_id, topk_val);
}
