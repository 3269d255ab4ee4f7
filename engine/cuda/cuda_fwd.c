/*
 * cuda_fwd — the CUDA backend of the forward pass (engine/backend.h: be_cuda), built only
 * with `make CUDA=1`. engine/forward.c hands it validated steps; the scheduler and server
 * never see the difference.
 *
 * Create uploads every weight once (kept packed in its GGUF format) and allocates the KV
 * blocks on the device with the same block ids and tables as the host KV pool describes
 * (the host pool then holds no data). A step copies only token ids, positions and block
 * tables to the device and only the requested logit rows back.
 *
 * The step mirrors engine/cpu_fwd.c operation for operation (same order, same places where
 * values are rounded: F16 KV with q rounded to F16, the fp16-rounded GELU, RMS sums in
 * double), with each operation one kernel from engine/cuda/cuda_*.cu, all queued on one
 * stream. Per step the host copies one int32 block (tokens, positions, row->sequence map,
 * block tables, selected logit rows) to the device and the selected logit rows back; that is
 * the only traffic. Everything the step needs was allocated by cf_fwd_create.
 *
 * Not supported (cf_fwd_create fails with "not supported on CUDA yet: ..."): tensor types
 * other than those cf_type_supported() lists (Q2_K, Q3_K), head dims that are not multiples
 * of 32 or above 512 (BE_EBACKEND: FWD_DEVICE_AUTO falls back to the CPU); KV caches other
 * than F16 (BE_EINVAL: an option the user chose, so AUTO fails at start-up instead of
 * moving to the CPU unannounced).
 *
 * Threads: one owner thread per context, like fwd_ctx. The tap copies rows back
 * synchronously (debugging only); its host buffer is allocated when a tap is installed.
 */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/cuda_act.h"
#include "engine/cuda/cuda_attn.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/cuda_getrows.h"
#include "engine/cuda/cuda_matmul.h"
#include "engine/cuda/cuda_norm.h"
#include "engine/cuda/cuda_probe.h"
#include "engine/cuda/cuda_rope.h"
#include "base/log.h"
#include "engine/backend.h"
#include "engine/kernels/quant.h"

#define CF_ALIGN 256

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

struct cf_fwd {
    const struct be_model *m;
    const struct be_kv *kvp;
    struct be_opts o;       /* as given (max_logit_rows >= 1) */
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
    void *mm_scratch;       /* cuBLAS path scratch (NULL when deterministic) */
    size_t mm_scratch_bytes;

    /* Step metadata, one int32 block, host (pinned) and device copies of the same layout:
     * tokens[T] | pos[T] | seq[T] | seq_info[S][4] | sel[Lx] | tables[tab_cap] */
    int32_t *meta_h, *meta_d;
    size_t off_pos, off_seq, off_info, off_sel, off_tab, tab_cap;

    /* Step timing: events before the metadata copy, after it, before the logits copy and
     * after it; `timed` is 1 once a step recorded all four. */
    cudaEvent_t ev[4];
    int n_ev, timed;

    be_tap_fn tap; /* debugging hook (cf_fwd_set_tap) */
    void *tap_user;
    float *tap_buf; /* host [max(T, Lx)][n_embd], allocated by cf_fwd_set_tap */
};

static size_t cf_al(size_t n) {
    return (n + CF_ALIGN - 1) & ~(size_t)(CF_ALIGN - 1);
}

static void cf_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void cf_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static int cf_fwd_available(char *why, size_t whylen) {
    char buf[256];
    int ok = cf_probe(buf, sizeof buf);
    if (why && whylen) snprintf(why, whylen, "%s", buf);
    return ok;
}

/* ---- create: checks ------------------------------------------------------------------- */

/* Reports the first thing this backend cannot run; 0 when the model is fully supported,
 * -2 when an option (the KV cache type) is what it cannot run, -1 for the model. */
static int cf_check_weight(const struct be_tensor *w, const char *name, char *err,
                           size_t errlen) {
    if (!w->data) return 0;
    const struct quant_info *qi = quant_info(w->type);
    if (!cf_type_supported(w->type)) {
        cf_err(err, errlen, "not supported on CUDA yet: tensor type %s (%s)",
               qi ? qi->name : "unknown", name);
        return -1;
    }
    if (w->n_in % 32 || w->n_in > INT_MAX / 2 || w->n_out > INT_MAX / 2) {
        cf_err(err, errlen, "not supported on CUDA yet: %s with %lld x %lld elements", name,
               (long long)w->n_in, (long long)w->n_out);
        return -1;
    }
    return 0;
}

static int cf_check_model(const struct be_model *m, const struct be_kv *kv,
                          const struct be_opts *o, char *err, size_t errlen) {
    const struct be_model *cfg = m;
    char name[64];
    if (kv->dtype != BE_KV_F16) { /* an option, not the model: -2 makes it BE_EINVAL */
        cf_err(err, errlen,
               "not supported on CUDA yet: KV cache type %s (use --kv-type f16 on the GPU, "
               "or --device cpu for %s)",
               kv->dtype_name, kv->dtype_name);
        return -2;
    }
    if (o->max_tokens > 65535) {
        cf_err(err, errlen, "not supported on CUDA yet: max_tokens %d > 65535", o->max_tokens);
        return -1;
    }
    if (cfg->n_embd % 32 || cfg->n_embd <= 0) {
        cf_err(err, errlen, "not supported on CUDA yet: n_embd %d", cfg->n_embd);
        return -1;
    }
    if (cf_check_weight(&m->tok_embd, "token_embd", err, errlen) ||
        cf_check_weight(&m->output, "output", err, errlen) ||
        cf_check_weight(&m->pl_tok_embd, "per_layer_token_embd", err, errlen) ||
        cf_check_weight(&m->pl_proj, "per_layer_model_proj", err, errlen))
        return -1;
    for (int l = 0; l < cfg->n_layer; l++) {
        const struct be_layer *lc = &cfg->layer[l];
        const struct be_layer *w = &m->layer[l];
        const struct be_tensor *ws[] = {&w->wq, &w->wk,   &w->wv,       &w->wo,  &w->gate,
                                          &w->up, &w->down, &w->inp_gate, &w->proj};
        static const char *wn[] = {"attn_q", "attn_k",   "attn_v",   "attn_output", "ffn_gate",
                                   "ffn_up", "ffn_down", "inp_gate", "proj"};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
            snprintf(name, sizeof name, "blk.%d.%s", l, wn[i]);
            if (cf_check_weight(ws[i], name, err, errlen)) return -1;
        }
        if (lc->n_head < 1 || lc->n_head_kv < 1 || lc->n_head > 65535) {
            cf_err(err, errlen, "layer %d: %d query heads, %d KV heads", l, lc->n_head,
                   lc->n_head_kv);
            return -1;
        }
        if (lc->head_dim % 32 || lc->head_dim > CF_ATT_MAX_HD || lc->head_dim_v % 32 ||
            lc->head_dim_v > CF_ATT_MAX_HD || lc->n_rot % 2 || lc->n_rot > lc->head_dim ||
            lc->n_rot <= 0) {
            cf_err(err, errlen,
                   "not supported on CUDA yet: layer %d head dims %d/%d (n_rot %d); need "
                   "multiples of 32 up to %d",
                   l, lc->head_dim, lc->head_dim_v, lc->n_rot, CF_ATT_MAX_HD);
            return -1;
        }
        const int src = lc->kv_layer;
        if (lc->has_kv && src != l) {
            cf_err(err, errlen, "layer %d computes K/V but reads layer %d's cache", l, src);
            return -1;
        }
        if (src < 0 || src >= cfg->n_layer || kv->cls[src] < 0) {
            cf_err(err, errlen, "layer %d reads the KV cache of layer %d, which has none", l, src);
            return -1;
        }
        const struct be_layer *sc = &cfg->layer[src];
        if (sc->n_head_kv != lc->n_head_kv || sc->head_dim != lc->head_dim ||
            sc->head_dim_v != lc->head_dim_v || lc->n_head % lc->n_head_kv) {
            cf_err(err, errlen, "layer %d: KV shape differs from its cache layer %d", l, src);
            return -1;
        }
        if (lc->k_eq_v && lc->head_dim_v != lc->head_dim) {
            cf_err(err, errlen, "layer %d: k_eq_v with head_dim_v != head_dim", l);
            return -1;
        }
    }
    return 0;
}

/* ---- create: uploads ------------------------------------------------------------------ */

/*
 * Places `bytes` of host data in the weight arena. Called twice over the whole model: first
 * with wmem == NULL to size the arena (dev is set to NULL), then to copy. The same host
 * pointer is placed once.
 */
static int cf_put(struct cf_fwd *c, const void *host, size_t bytes, const void **dev) {
    *dev = NULL;
    if (!host || !bytes) return 0;
    for (int i = 0; i < c->n_ups; i++)
        if (c->ups[i].host == host && c->ups[i].bytes == bytes) {
            *dev = c->ups[i].dev;
            return 0;
        }
    if (c->n_ups == c->cap_ups) {
        int cap = c->cap_ups ? 2 * c->cap_ups : 256;
        struct cf_upload *nu = realloc(c->ups, (size_t)cap * sizeof *nu);
        if (!nu) return cf_fail("out of host memory for the upload table");
        c->ups = nu;
        c->cap_ups = cap;
    }
    const size_t off = c->wmem_used;
    c->wmem_used += cf_al(bytes);
    if (c->wmem) {
        if (CUDA_CHECK(cudaMemcpy(c->wmem + off, host, bytes, cudaMemcpyHostToDevice))) return -1;
        *dev = c->wmem + off;
    }
    c->ups[c->n_ups++] = (struct cf_upload){host, bytes, *dev};
    return 0;
}

static int cf_put_w(struct cf_fwd *c, const struct be_tensor *w, struct cf_weight *out) {
    memset(out, 0, sizeof *out);
    if (!w->data) return 0;
    out->type = w->type;
    out->n_in = (int)w->n_in;
    out->n_out = (int)w->n_out;
    out->row_bytes = w->row_bytes;
    return cf_put(c, w->data, (size_t)w->n_out * w->row_bytes, &out->data);
}

static int cf_put_v(struct cf_fwd *c, const float *v, int n, const float **out) {
    const void *d = NULL;
    int rc = cf_put(c, v, v ? (size_t)n * sizeof(float) : 0, &d);
    *out = d;
    return rc;
}

/* One pass over every tensor the forward pass reads. */
static int cf_put_all(struct cf_fwd *c) {
    const struct be_model *m = c->m;
    const struct be_model *cfg = m;
    c->n_ups = 0;
    c->wmem_used = 0;
    if (cf_put_w(c, &m->tok_embd, &c->tok_embd) || cf_put_w(c, &m->output, &c->output) ||
        cf_put_w(c, &m->pl_tok_embd, &c->pl_tok_embd) ||
        cf_put_w(c, &m->pl_proj, &c->pl_proj) ||
        cf_put_v(c, m->output_norm, cfg->n_embd, &c->output_norm) ||
        cf_put_v(c, m->pl_proj_norm, cfg->n_embd_pl, &c->pl_proj_norm))
        return -1;
    for (int l = 0; l < cfg->n_layer; l++) {
        const struct be_layer *lc = &cfg->layer[l];
        const struct be_layer *w = &m->layer[l];
        struct cf_layer *L = &c->L[l];
        const int E = cfg->n_embd, hd = lc->head_dim;
        if (cf_put_v(c, w->attn_norm, E, &L->attn_norm) || cf_put_v(c, w->q_norm, hd, &L->q_norm) ||
            cf_put_v(c, w->k_norm, hd, &L->k_norm) ||
            cf_put_v(c, w->post_attn_norm, E, &L->post_attn_norm) ||
            cf_put_v(c, w->ffn_norm, E, &L->ffn_norm) ||
            cf_put_v(c, w->post_ffw_norm, E, &L->post_ffw_norm) ||
            cf_put_v(c, w->post_norm, E, &L->post_norm) ||
            cf_put_v(c, w->rope_freqs, lc->n_rot / 2, &L->rope_freqs) ||
            cf_put_w(c, &w->wq, &L->wq) || cf_put_w(c, &w->wk, &L->wk) ||
            cf_put_w(c, &w->wv, &L->wv) || cf_put_w(c, &w->wo, &L->wo) ||
            cf_put_w(c, &w->gate, &L->gate) || cf_put_w(c, &w->up, &L->up) ||
            cf_put_w(c, &w->down, &L->down) || cf_put_w(c, &w->inp_gate, &L->inp_gate) ||
            cf_put_w(c, &w->proj, &L->proj))
            return -1;
    }
    return 0;
}

/* KV storage: per owning layer K then V, [n_blocks][block_size][n_kv][hd] halves. Sizes the
 * arena when kvmem is NULL, else points every layer's cf_kv at its (source layer's) blocks. */
static size_t cf_kv_layout(struct cf_fwd *c) {
    const struct be_model *cfg = c->m;
    const struct be_kv *p = c->kvp;
    size_t off = 0;
    size_t koff[BE_MAX_LAYERS], voff[BE_MAX_LAYERS];
    for (int l = 0; l < cfg->n_layer; l++) {
        koff[l] = voff[l] = 0;
        if (p->cls[l] < 0) continue;
        const struct be_layer *lc = &cfg->layer[l];
        const size_t rows = (size_t)p->n_blocks[p->cls[l]] * (size_t)p->block_size;
        koff[l] = off;
        off += cf_al(rows * (size_t)lc->n_head_kv * (size_t)lc->head_dim * 2);
        voff[l] = off;
        off += cf_al(rows * (size_t)lc->n_head_kv * (size_t)lc->head_dim_v * 2);
    }
    if (c->kvmem) {
        for (int l = 0; l < cfg->n_layer; l++) {
            const int src = cfg->layer[l].kv_layer;
            const struct be_layer *sc = &cfg->layer[src];
            struct cf_kv *kv = &c->L[l].kv;
            kv->k = c->kvmem + koff[src];
            kv->v = c->kvmem + voff[src];
            kv->n_kv = sc->n_head_kv;
            kv->hd = sc->head_dim;
            kv->hd_v = sc->head_dim_v;
            kv->block_size = p->block_size;
            kv->ring = p->cls[src] == BE_KV_SWA;
        }
    }
    return off;
}

/* Activation buffers, carved from one allocation; sizes the arena when amem is NULL. */
static size_t cf_act_layout(struct cf_fwd *c) {
    const struct be_model *cfg = c->m;
    const size_t T = (size_t)c->o.max_tokens, E = (size_t)cfg->n_embd;
    const size_t Lx = (size_t)c->o.max_logit_rows;
    size_t wq = 0, wk = 0, wo = 0, wff = (size_t)cfg->n_embd_pl;
    for (int l = 0; l < cfg->n_layer; l++) {
        const struct be_layer *lc = &cfg->layer[l];
        size_t a = (size_t)lc->n_head * (size_t)lc->head_dim;
        size_t b = (size_t)lc->n_head_kv *
                   (size_t)(lc->head_dim > lc->head_dim_v ? lc->head_dim : lc->head_dim_v);
        size_t e = (size_t)lc->n_head * (size_t)lc->head_dim_v;
        if (a > wq) wq = a;
        if (b > wk) wk = b;
        if (e > wo) wo = e;
        if ((size_t)lc->n_ff > wff) wff = (size_t)lc->n_ff;
    }
    const size_t P = (size_t)cfg->n_embd_pl * (size_t)cfg->n_layer;
    const size_t sizes[] = {T * E,
                            T * E,
                            T * E,
                            T * wq,
                            T * wk,
                            T * wk,
                            T * wo,
                            T * wff,
                            T * wff,
                            T * P,
                            T * P,
                            Lx * E,
                            Lx * (size_t)cfg->n_vocab};
    float **ptrs[] = {&c->x, &c->h, &c->t,   &c->q,       &c->k,    &c->v,     &c->att,
                      &c->g, &c->u, &c->ple, &c->ple_tmp, &c->xsel, &c->logits};
    size_t off = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (c->amem) *ptrs[i] = sizes[i] ? (float *)(c->amem + off) : NULL;
        off += cf_al(sizes[i] * sizeof(float));
    }
    return off;
}

/* cuBLAS scratch: the largest any layer matmul needs for max_tokens rows. Runs before the
 * weights are copied (data still NULL), so presence is told by the shape (n_out > 0). */
static size_t cf_blas_scratch(const struct cf_fwd *c) {
    const struct be_model *cfg = c->m;
    const int T = c->o.max_tokens;
    size_t mx = 0;
    if (c->pl_proj.n_out) mx = cf_matmul_scratch_bytes(&c->pl_proj, T);
    for (int l = 0; l < cfg->n_layer; l++) {
        const struct cf_layer *L = &c->L[l];
        const struct cf_weight *ws[] = {&L->wq, &L->wk,   &L->wv,       &L->wo,  &L->gate,
                                        &L->up, &L->down, &L->inp_gate, &L->proj};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
            if (!ws[i]->n_out) continue;
            size_t b = cf_matmul_scratch_bytes(ws[i], T);
            if (b > mx) mx = b;
        }
    }
    return mx;
}

/*
 * Block-table entries one sequence can bring to a step: its FULL blocks up to max_ctx (the
 * pool's capacity when 0), and an SWA ring as long as a step of max_tokens rows needs (what
 * kvstore_swa_ring_blocks gives the scheduler). The metadata buffer holds max_seqs of these, not
 * max_seqs x the whole pool, which with a large pool would be hundreds of MB.
 */
static size_t cf_tab_per_seq(const struct be_model *m, const struct be_kv *kv,
                             const struct be_opts *o) {
    const size_t bs = (size_t)kv->block_size;
    size_t full = (size_t)kv->n_blocks[BE_KV_FULL];
    if (o->max_ctx > 0 && ((size_t)o->max_ctx + bs - 1) / bs < full)
        full = ((size_t)o->max_ctx + bs - 1) / bs;
    size_t swa = (size_t)kv->n_blocks[BE_KV_SWA];
    if (m->sliding_window > 0) {
        const size_t ring = ((size_t)m->sliding_window + (size_t)o->max_tokens - 2) / bs + 2;
        if (ring < swa) swa = ring;
    }
    return full + swa;
}

static void cf_fwd_destroy(struct cf_fwd *c);

static int cf_fwd_create(const struct be_model *m, const struct be_kv *kv, const struct be_opts *o,
                   struct cf_fwd **out, char *err, size_t errlen) {
    *out = NULL;
    if (err && errlen) err[0] = 0;
    if (!m || !kv || !o || o->max_tokens < 1 || o->max_seqs < 1 || kv->block_size < 1) {
        cf_err(err, errlen, "cf_fwd_create: invalid arguments");
        return BE_EINVAL;
    }
    const int chk = cf_check_model(m, kv, o, err, errlen);
    if (chk) return chk == -2 ? BE_EINVAL : BE_EBACKEND;
    const struct be_model *cfg = m;

    struct cf_fwd *c = calloc(1, sizeof *c);
    if (!c) goto fail_host;
    c->m = m;
    c->kvp = kv;
    c->o = *o;
    if (c->o.max_logit_rows < 1) c->o.max_logit_rows = 1;
    c->L = calloc((size_t)(cfg->n_layer > 0 ? cfg->n_layer : 1), sizeof *c->L);
    if (!c->L) goto fail_host;

    if (CUDA_CHECK(cudaSetDevice(0))) goto fail_cuda;
    if (CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking))) goto fail_cuda;
    c->mm_mode = CF_MM_KERNEL;
    if (!o->deterministic) {
        if (CUBLAS_CHECK(cublasCreate(&c->blas))) goto fail_cuda;
        if (CUBLAS_CHECK(cublasSetStream(c->blas, c->stream))) goto fail_cuda;
        c->mm_mode = CF_MM_AUTO;
    }

    for (; c->n_ev < 4; c->n_ev++)
        if (CUDA_CHECK(cudaEventCreate(&c->ev[c->n_ev]))) goto fail_cuda;

    /* Sizes first, then one check against free memory, then the allocations. */
    if (cf_put_all(c)) goto fail_cuda;
    c->wmem_bytes = c->wmem_used;
    c->kv_bytes = cf_kv_layout(c);
    const size_t act_bytes = cf_act_layout(c);
    if (c->blas && o->max_tokens >= CF_MM_CUBLAS_MIN_ROWS) c->mm_scratch_bytes = cf_blas_scratch(c);
    const size_t T = (size_t)c->o.max_tokens, S = (size_t)c->o.max_seqs;
    const size_t Lx = (size_t)c->o.max_logit_rows;
    c->tab_cap = S * cf_tab_per_seq(m, kv, o) + 64;
    c->off_pos = T;
    c->off_seq = 2 * T;
    c->off_info = 3 * T;
    c->off_sel = c->off_info + 4 * S;
    c->off_tab = c->off_sel + Lx;
    const size_t meta_bytes = (c->off_tab + c->tab_cap) * sizeof(int32_t);

    size_t free_b = 0, total_b = 0;
    if (CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b))) goto fail_cuda;
    const size_t need = c->wmem_bytes + c->kv_bytes + act_bytes + c->mm_scratch_bytes + meta_bytes;
    if (need > free_b) {
        cf_err(err, errlen,
               "CUDA device memory: need %zu MiB (weights %zu, KV %zu, activations %zu, "
               "scratch %zu), %zu MiB free",
               need >> 20, c->wmem_bytes >> 20, c->kv_bytes >> 20, act_bytes >> 20,
               c->mm_scratch_bytes >> 20, free_b >> 20);
        cf_fwd_destroy(c);
        return BE_ENOMEM;
    }
    if (CUDA_CHECK(cudaMalloc((void **)&c->wmem, c->wmem_bytes ? c->wmem_bytes : 1)) ||
        CUDA_CHECK(cudaMalloc((void **)&c->kvmem, c->kv_bytes ? c->kv_bytes : 1)) ||
        CUDA_CHECK(cudaMalloc((void **)&c->amem, act_bytes)) ||
        CUDA_CHECK(cudaMalloc((void **)&c->meta_d, meta_bytes)) ||
        CUDA_CHECK(cudaMallocHost((void **)&c->meta_h, meta_bytes)))
        goto fail_nomem;
    if (c->mm_scratch_bytes && CUDA_CHECK(cudaMalloc(&c->mm_scratch, c->mm_scratch_bytes)))
        goto fail_nomem;
    /* Zeroed KV: a bad table then reads zeros, never NaN bit patterns. */
    if (CUDA_CHECK(cudaMemset(c->kvmem, 0, c->kv_bytes ? c->kv_bytes : 1))) goto fail_cuda;
    if (cf_put_all(c)) goto fail_cuda; /* the copies */
    cf_kv_layout(c);
    cf_act_layout(c);
    free(c->ups);
    c->ups = NULL;
    c->n_ups = c->cap_ups = 0;
    if (CUDA_CHECK(cudaDeviceSynchronize())) goto fail_cuda;
    LOG_I("cuda", 0,
          "CUDA backend ready: weights %zu MiB, KV %zu MiB, activations %zu MiB, cuBLAS "
          "scratch %zu MiB, %s matmuls",
          c->wmem_bytes >> 20, c->kv_bytes >> 20, act_bytes >> 20, c->mm_scratch_bytes >> 20,
          c->blas ? "shape-dependent (cuBLAS for >= 64 rows)" : "batch-invariant");
    *out = c;
    return BE_OK;

fail_nomem:
    cf_err(err, errlen, "CUDA: out of device memory: %s", cf_last_error());
    cf_fwd_destroy(c);
    return BE_ENOMEM;
fail_cuda:
    cf_err(err, errlen, "CUDA: %s", cf_last_error());
    cf_fwd_destroy(c);
    return BE_EBACKEND;
fail_host:
    cf_err(err, errlen, "cf_fwd_create: out of host memory");
    cf_fwd_destroy(c);
    return BE_ENOMEM;
}

static void cf_fwd_destroy(struct cf_fwd *c) {
    if (!c) return;
    if (c->stream) cudaStreamSynchronize(c->stream);
    if (c->blas) cublasDestroy(c->blas);
    for (int i = 0; i < c->n_ev; i++) cudaEventDestroy(c->ev[i]);
    cudaFree(c->mm_scratch);
    cudaFree(c->meta_d);
    cudaFreeHost(c->meta_h);
    cudaFree(c->amem);
    cudaFree(c->kvmem);
    cudaFree(c->wmem);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c->ups);
    free(c->tap_buf);
    free(c->L);
    free(c);
}

static int cf_fwd_set_tap(struct cf_fwd *c, be_tap_fn fn, void *user) {
    if (fn && !c->tap_buf) {
        const size_t rows =
            (size_t)(c->o.max_tokens > c->o.max_logit_rows ? c->o.max_tokens : c->o.max_logit_rows);
        c->tap_buf = malloc(rows * (size_t)c->m->n_embd * sizeof(float));
        if (!c->tap_buf) return BE_ENOMEM;
    }
    c->tap = fn;
    c->tap_user = user;
    return BE_OK;
}

/* ---- the step --------------------------------------------------------------------------- */

/*
 * Checks the step like fwd_run does and fills the host metadata block. Returns BE_OK,
 * BE_EINVAL or BE_EKV, with the row and logit-row counts and the ints to copy.
 */
static int cf_prepare(struct cf_fwd *c, const struct be_seq *seqs, int n_seqs, int *n_rows,
                      int *n_sel, size_t *n_ints) {
    const struct be_model *m = c->m;
    const struct be_kv *p = c->kvp;
    int need[2] = {0, 0};
    for (int l = 0; l < m->n_layer; l++)
        if (p->cls[l] >= 0) need[p->cls[l]] = 1;
    if (!seqs || n_seqs < 1 || n_seqs > c->o.max_seqs) return BE_EINVAL;
    const int bs = p->block_size;
    int32_t *meta = c->meta_h;
    int rows = 0, sel = 0;
    size_t tab = 0;
    for (int s = 0; s < n_seqs; s++) {
        const struct be_seq *q = &seqs[s];
        if (!q->tokens || q->n_tokens < 1 || q->pos < 0) return BE_EINVAL;
        if (q->n_tokens > c->o.max_tokens - rows) return BE_EINVAL;
        if ((int64_t)q->pos + q->n_tokens > (int64_t)1 << 30) return BE_EINVAL;
        if (q->logits != BE_LOGITS_NONE && q->logits != BE_LOGITS_LAST &&
            q->logits != BE_LOGITS_ALL)
            return BE_EINVAL;
        const int n_lg = q->logits == BE_LOGITS_ALL    ? q->n_tokens
                         : q->logits == BE_LOGITS_LAST ? 1
                                                        : 0;
        if (n_lg > c->o.max_logit_rows - sel) return BE_EINVAL;
        for (int i = 0; i < q->n_tokens; i++) {
            if (q->tokens[i] < 0 || q->tokens[i] >= m->n_vocab) return BE_EINVAL;
            meta[rows + i] = q->tokens[i];
            meta[c->off_pos + (size_t)(rows + i)] = q->pos + i;
            meta[c->off_seq + (size_t)(rows + i)] = s;
        }
        for (int i = q->n_tokens - n_lg; i < q->n_tokens; i++)
            meta[c->off_sel + (size_t)sel++] = rows + i;
        rows += q->n_tokens;

        int32_t *info = meta + c->off_info + 4 * (size_t)s;
        info[0] = info[1] = info[2] = info[3] = 0;
        if (need[BE_KV_FULL]) {
            const int nb = (q->pos + q->n_tokens + bs - 1) / bs;
            if (!q->full || q->n_full < nb || (size_t)nb > c->tab_cap - tab) return BE_EKV;
            info[0] = (int32_t)tab;
            info[1] = nb;
            for (int b = 0; b < nb; b++) {
                const int32_t id = q->full[b];
                if (id < 0 || id >= p->n_blocks[BE_KV_FULL]) return BE_EKV;
                meta[c->off_tab + tab++] = id;
            }
        }
        if (need[BE_KV_SWA]) {
            const int ring = (m->sliding_window + q->n_tokens - 2) / bs + 2;
            const int ns = q->n_swa;
            if (!q->swa || ns < ring || (size_t)ns > c->tab_cap - tab) return BE_EKV;
            info[2] = (int32_t)tab;
            info[3] = ns;
            for (int b = 0; b < ns; b++) {
                const int32_t id = q->swa[b];
                if (id < 0 || id >= p->n_blocks[BE_KV_SWA]) return BE_EKV;
                meta[c->off_tab + tab++] = id;
            }
        }
    }
    *n_rows = rows;
    *n_sel = sel;
    *n_ints = c->off_tab + tab;
    return BE_OK;
}

static int cf_mm(struct cf_fwd *c, const struct cf_weight *w, const float *X, int M, float *Y,
                 int ldy) {
    return cf_matmul(c->stream, c->blas, w, X, M, Y, ldy, c->mm_mode, c->mm_scratch,
                     c->mm_scratch_bytes);
}

/* Hands rows of device activations to the tap (debugging only: synchronous copies). */
static int cf_tap(struct cf_fwd *c, int layer, const float *dev, int rows) {
    const int E = c->m->n_embd;
    if (CUDA_CHECK(cudaMemcpyAsync(c->tap_buf, dev, (size_t)rows * E * sizeof(float),
                                   cudaMemcpyDeviceToHost, c->stream)) ||
        CUDA_CHECK(cudaStreamSynchronize(c->stream)))
        return -1;
    c->tap(c->tap_user, layer, c->tap_buf, rows, E);
    return 0;
}

/* Gemma 4 per-layer inputs, right after the embedding (x holds x0):
 * ple = (RMS(proj(x0) / sqrt(E), per_layer_proj_norm) + e[t] * sqrt(n_pl)) / sqrt(2). */
static int cf_ple_prepare(struct cf_fwd *c, const struct cf_rows *R, const int32_t *tok) {
    const struct be_model *cfg = c->m;
    const int T = R->n_rows, npl = cfg->n_embd_pl, nl = cfg->n_layer;
    const size_t P = (size_t)npl * (size_t)nl;
    cudaStream_t s = c->stream;
    if (cf_get_rows(s, &c->pl_tok_embd, tok, T, sqrtf((float)npl), c->ple, (int)P) ||
        cf_mm(c, &c->pl_proj, c->x, T, c->ple_tmp, (int)P) ||
        cf_scale(s, c->ple_tmp, (size_t)T * P, 1.0f / sqrtf((float)cfg->n_embd)) ||
        cf_rms_norm(s, c->ple_tmp, npl, c->pl_proj_norm, NULL, 0, c->ple_tmp, npl, npl, T * nl,
                    cfg->eps) ||
        cf_add_scale(s, c->ple, c->ple_tmp, c->ple, (size_t)T * P, 1.0f / sqrtf(2.0f)))
        return -1;
    return 0;
}

/* x = x + t, or x = x + RMS(t, w) when the layer has that post-norm. */
static int cf_residual(struct cf_fwd *c, const float *w, int T) {
    const int E = c->m->n_embd;
    if (w) return cf_rms_norm(c->stream, c->t, E, w, c->x, E, c->x, E, E, T, c->m->eps);
    return cf_add_scale(c->stream, c->x, c->x, c->t, (size_t)T * E, 1.0f);
}

static int cf_layer(struct cf_fwd *c, int l, const struct cf_rows *R) {
    const struct be_model *cfg = c->m;
    const struct be_layer *lc = &cfg->layer[l];
    const struct cf_layer *L = &c->L[l];
    cudaStream_t s = c->stream;
    const int T = R->n_rows, E = cfg->n_embd;
    const int hd = lc->head_dim, hdv = lc->head_dim_v;
    const int nh = lc->n_head, nkv = lc->n_head_kv;
    const int nq = nh * hd, nk = nkv * hd, nv = nkv * hdv;
    const float eps = cfg->eps;

    /* attention: the scale is applied to q inside cf_attention, as cpu_fwd.c does before
     * rounding q to fp16 */
    if (cf_rms_norm(s, c->x, E, L->attn_norm, NULL, 0, c->h, E, E, T, eps) ||
        cf_mm(c, &L->wq, c->h, T, c->q, nq))
        return -1;
    if (L->q_norm && cf_rms_norm(s, c->q, hd, L->q_norm, NULL, 0, c->q, hd, hd, T * nh, eps))
        return -1;
    if (cf_rope_neox(s, c->q, nq, nh, hd, lc->n_rot, R->pos, T, lc->rope_base, lc->rope_scale,
                     L->rope_freqs))
        return -1;
    if (lc->has_kv) {
        if (cf_mm(c, &L->wk, c->h, T, c->k, nk)) return -1;
        if (lc->k_eq_v) { /* V is the raw K projection, before k_norm and RoPE */
            if (CUDA_CHECK(cudaMemcpyAsync(c->v, c->k, (size_t)T * nv * sizeof(float),
                                           cudaMemcpyDeviceToDevice, s)))
                return -1;
        } else if (cf_mm(c, &L->wv, c->h, T, c->v, nv)) {
            return -1;
        }
        if (L->k_norm && cf_rms_norm(s, c->k, hd, L->k_norm, NULL, 0, c->k, hd, hd, T * nkv, eps))
            return -1;
        if (cfg->v_norm && cf_rms_norm(s, c->v, hdv, NULL, NULL, 0, c->v, hdv, hdv, T * nkv, eps))
            return -1;
        if (cf_rope_neox(s, c->k, nk, nkv, hd, lc->n_rot, R->pos, T, lc->rope_base, lc->rope_scale,
                         L->rope_freqs) ||
            cf_kv_store(s, R, &L->kv, c->k, nk, c->v, nv))
            return -1;
    }
    const struct cf_attn A = {nh, cfg->attn_scale, cfg->attn_softcap,
                              lc->sliding && cfg->sliding_window > 0 ? cfg->sliding_window : 0};
    if (cf_attention(s, R, &L->kv, &A, c->q, nq, c->att, nh * hdv) ||
        cf_mm(c, &L->wo, c->att, T, c->t, E) || cf_residual(c, L->post_attn_norm, T))
        return -1;

    /* feed-forward */
    const int nff = lc->n_ff;
    if (cf_rms_norm(s, c->x, E, L->ffn_norm, NULL, 0, c->h, E, E, T, eps) ||
        cf_mm(c, &L->gate, c->h, T, c->g, nff) || cf_mm(c, &L->up, c->h, T, c->u, nff) ||
        cf_geglu(s, c->g, nff, c->u, nff, nff, T) || cf_mm(c, &L->down, c->g, T, c->t, E) ||
        cf_residual(c, L->post_ffw_norm, T))
        return -1;

    /* Gemma 4 per-layer embedding and layer scale */
    if (cfg->n_embd_pl > 0 && L->inp_gate.data) {
        const int npl = cfg->n_embd_pl;
        if (cf_mm(c, &L->inp_gate, c->x, T, c->g, npl) ||
            cf_geglu(s, c->g, npl, c->ple + (size_t)l * npl, npl * cfg->n_layer, npl, T) ||
            cf_mm(c, &L->proj, c->g, T, c->t, E) ||
            cf_rms_norm(s, c->t, E, L->post_norm, c->x, E, c->x, E, E, T, eps))
            return -1;
    }
    const float os = c->m->layer[l].out_scale;
    if (os != 1.0f && cf_scale(s, c->x, (size_t)T * E, os)) return -1;
    return 0;
}

static int cf_fwd_run(struct cf_fwd *c, const struct be_seq *seqs, int n_seqs, float *logits) {
    const struct be_model *cfg = c->m;
    int T = 0, n_sel = 0;
    size_t n_ints = 0;
    int st = cf_prepare(c, seqs, n_seqs, &T, &n_sel, &n_ints);
    if (st != BE_OK) return st;
    if (n_sel > 0 && !logits) return BE_EINVAL;
    cudaStream_t s = c->stream;
    const int E = cfg->n_embd, V = cfg->n_vocab;
    const int32_t *tok = c->meta_d;
    const struct cf_rows R = {c->meta_d + c->off_pos, c->meta_d + c->off_seq,
                              c->meta_d + c->off_info, c->meta_d + c->off_tab, T};

    c->timed = 0;
    if (CUDA_CHECK(cudaSetDevice(0)) || CUDA_CHECK(cudaEventRecord(c->ev[0], s)) ||
        CUDA_CHECK(cudaMemcpyAsync(c->meta_d, c->meta_h, n_ints * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, s)) ||
        CUDA_CHECK(cudaEventRecord(c->ev[1], s)))
        goto fail;
    if (cf_get_rows(s, &c->tok_embd, tok, T, cfg->embd_scale, c->x, E)) goto fail;
    if (cfg->n_embd_pl > 0 && cf_ple_prepare(c, &R, tok)) goto fail;
    for (int l = 0; l < cfg->n_layer; l++) {
        if (cf_layer(c, l, &R)) goto fail;
        if (c->tap && cf_tap(c, l, c->x, T)) goto fail;
    }
    if (n_sel > 0) {
        if (cf_gather_rows(s, c->x, E, c->meta_d + c->off_sel, n_sel, E, c->xsel, E) ||
            cf_rms_norm(s, c->xsel, E, c->output_norm, NULL, 0, c->xsel, E, E, n_sel, cfg->eps))
            goto fail;
        if (c->tap && cf_tap(c, cfg->n_layer, c->xsel, n_sel)) goto fail;
        /* The LM head always uses the kernel: a cuBLAS copy of it would cost n_vocab*n_embd
         * halves of scratch. */
        if (cf_matmul(s, NULL, &c->output, c->xsel, n_sel, c->logits, V, CF_MM_KERNEL, NULL, 0))
            goto fail;
        if (cfg->final_softcap > 0.0f &&
            cf_softcap(s, c->logits, (size_t)n_sel * V, cfg->final_softcap))
            goto fail;
    }
    if (CUDA_CHECK(cudaEventRecord(c->ev[2], s))) goto fail;
    if (n_sel > 0 &&
        CUDA_CHECK(cudaMemcpyAsync(logits, c->logits, (size_t)n_sel * V * sizeof(float),
                                   cudaMemcpyDeviceToHost, s)))
        goto fail;
    if (CUDA_CHECK(cudaEventRecord(c->ev[3], s)) || CUDA_CHECK(cudaStreamSynchronize(s)))
        goto fail;
    c->timed = 1;
    return BE_OK;
fail:
    LOG_E("cuda", 0, "forward step failed: %s", cf_last_error());
    cudaStreamSynchronize(s);
    return BE_EBACKEND;
}

static int cf_fwd_step_times(const struct cf_fwd *c, double ms[3]) {
    if (!c->timed) return BE_EINVAL;
    for (int i = 0; i < 3; i++) {
        float t = 0.0f;
        if (CUDA_CHECK(cudaEventElapsedTime(&t, c->ev[i], c->ev[i + 1]))) return BE_EBACKEND;
        ms[i] = t;
    }
    return BE_OK;
}

/* ---- the backend table ---------------------------------------------------------------- */

static int cf_be_create(const struct be_desc *d, void **out, char *err, size_t errlen) {
    struct cf_fwd *c = NULL;
    int rc = cf_fwd_create(d->bm, d->bkv, &d->o, &c, err, errlen);
    *out = c;
    return rc;
}

static int cf_be_run(void *b, const struct be_seq *seqs, int n_seqs, float *logits) {
    return cf_fwd_run(b, seqs, n_seqs, logits);
}

static int cf_be_set_tap(void *b, be_tap_fn fn, void *user) {
    return cf_fwd_set_tap(b, fn, user);
}

static void cf_be_destroy(void *b) {
    cf_fwd_destroy(b);
}

static int cf_be_step_times(void *b, double ms[3]) {
    return cf_fwd_step_times(b, ms);
}

const struct be_ops be_cuda = {"cuda",        cf_fwd_available, cf_be_create,    cf_be_run,
                               cf_be_set_tap, cf_be_destroy,    cf_be_step_times};
