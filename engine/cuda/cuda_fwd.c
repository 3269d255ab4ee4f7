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

#include "engine/cuda/cuda_fwd_int.h"
#include "engine/cuda/cuda_probe.h"
#include "base/log.h"
#include "engine/kernels/quant.h"

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

/*
 * Split-key attention scratch: the most splits a step can need (a power of two at least the
 * splits of the longest context: max_ctx, else the pool's FULL capacity), and room for the
 * partials of at least one row at that many splits, or of as many rows as fit in 64 MiB
 * (cf_attention runs the rows in as many launches as the scratch needs).
 */
static void cf_att_dims(struct cf_fwd *c, size_t *parts, int *acc_ld) {
    const struct be_model *cfg = c->m;
    const struct be_kv *p = c->kvp;
    long long ctx = c->o.max_ctx > 0 ? c->o.max_ctx
                                     : (long long)p->n_blocks[BE_KV_FULL] * p->block_size;
    if (cfg->sliding_window > 0 && ctx < (long long)cfg->sliding_window + c->o.max_tokens)
        ctx = (long long)cfg->sliding_window + c->o.max_tokens; /* SWA-only models */
    if (ctx > (1LL << 30)) ctx = 1LL << 30;
    const int need = cf_attn_splits((int)ctx - 1, 0);
    int cap = 1;
    while (cap < need && cap < 32768)
        cap *= 2;
    c->split_cap = cap;
    int nh = 1, hdv = 32;
    for (int l = 0; l < cfg->n_layer; l++) {
        if (cfg->layer[l].n_head > nh) nh = cfg->layer[l].n_head;
        if (cfg->layer[l].head_dim_v > hdv) hdv = cfg->layer[l].head_dim_v;
    }
    *acc_ld = hdv;
    const size_t per_row = (size_t)nh * (size_t)cap;
    const size_t per_part = ((size_t)hdv + 2) * sizeof(float);
    size_t rows = ((size_t)64 << 20) / (per_row * per_part);
    if (rows > (size_t)c->o.max_tokens) rows = (size_t)c->o.max_tokens;
    if (rows < 1) rows = 1;
    *parts = per_row * rows;
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
    size_t parts = 0;
    int acc_ld = 0;
    cf_att_dims(c, &parts, &acc_ld);
    /* MMVQ: the quantized form of CF_MMVQ_MAX_ROWS rows of the widest matmul input */
    size_t q8x = 0;
    if (c->mmvq) {
        int n_in = c->pl_proj.n_in;
        for (int l = 0; l < cfg->n_layer; l++) {
            const struct cf_layer *L = &c->L[l];
            const struct cf_weight *ws[] = {&L->wq, &L->wk,   &L->wv,       &L->wo,  &L->gate,
                                            &L->up, &L->down, &L->inp_gate, &L->proj};
            for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
                if (ws[i]->n_out && ws[i]->n_in > n_in) n_in = ws[i]->n_in;
        }
        c->q8x_bytes = cf_mmvq_bytes(CF_MMVQ_MAX_ROWS, n_in);
        q8x = (c->q8x_bytes + sizeof(float) - 1) / sizeof(float);
    }
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
                            Lx * (size_t)cfg->n_vocab,
                            parts * 2,
                            parts * (size_t)acc_ld,
                            q8x};
    float *q8x_f = NULL;
    float **ptrs[] = {&c->x,       &c->h,    &c->t,      &c->q,         &c->k,
                      &c->v,       &c->att,  &c->g,      &c->u,         &c->ple,
                      &c->ple_tmp, &c->xsel, &c->logits, &c->att_sc.ml, &c->att_sc.acc,
                      &q8x_f};
    size_t off = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (c->amem) *ptrs[i] = sizes[i] ? (float *)(c->amem + off) : NULL;
        off += cf_al(sizes[i] * sizeof(float));
    }
    c->q8x = q8x_f;
    c->att_sc.n_parts = parts;
    c->att_sc.acc_ld = acc_ld;
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

    const char *ge = getenv("GEMMAD_CUDA_GRAPHS");
    c->graphs_off = ge && !strcmp(ge, "0");
    const char *fk = getenv("GEMMAD_CUDA_FUSE_KV");
    c->fuse_kv = fk && !strcmp(fk, "1");
    const char *mq = getenv("GEMMAD_CUDA_MMVQ"); /* opt-in: never run on a GPU yet */
    c->mmvq = mq && !strcmp(mq, "1");
    const char *tk = getenv("GEMMAD_CUDA_TOPK"); /* opt-in: never run on a GPU yet */
    c->dev_topk = tk && !strcmp(tk, "1");
    c->kind_tmp = malloc((size_t)c->o.max_logit_rows);
    if (!c->kind_tmp) {
        cf_err(err, errlen, "cf_fwd_create: out of memory");
        goto fail_cuda;
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
        CUDA_CHECK(cudaMallocHost((void **)&c->meta_h, meta_bytes)) ||
        CUDA_CHECK(cudaMalloc((void **)&c->ids_d, (size_t)o->max_logit_rows * sizeof(int32_t))) ||
        CUDA_CHECK(cudaMallocHost((void **)&c->ids_h, (size_t)o->max_logit_rows * sizeof(int32_t))) ||
        CUDA_CHECK(cudaMalloc((void **)&c->tk_d, cf_tk_bytes(o->max_logit_rows))) ||
        CUDA_CHECK(cudaMallocHost((void **)&c->tk_h, cf_tk_bytes(o->max_logit_rows))))
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
          "CUDA backend ready: weights %zu MiB, KV %zu MiB, activations %zu MiB (attention "
          "splits up to %d), cuBLAS scratch %zu MiB, %s matmuls, decode graphs %s%s",
          c->wmem_bytes >> 20, c->kv_bytes >> 20, act_bytes >> 20, c->split_cap,
          c->mm_scratch_bytes >> 20,
          c->blas ? "shape-dependent (cuBLAS for >= 64 rows)" : "batch-invariant",
          c->graphs_off ? "off (GEMMAD_CUDA_GRAPHS=0)" : "on",
          c->mmvq ? ", int8 MMVQ for steps of <= 8 rows on (GEMMAD_CUDA_MMVQ=1)" : "");
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
    free(c->kind_tmp);
    if (c->stream) cudaStreamSynchronize(c->stream);
    cf_step_free(c);
    if (c->blas) cublasDestroy(c->blas);
    for (int i = 0; i < c->n_ev; i++) cudaEventDestroy(c->ev[i]);
    cudaFree(c->mm_scratch);
    cudaFree(c->meta_d);
    cudaFreeHost(c->meta_h);
    cudaFree(c->ids_d);
    cudaFreeHost(c->ids_h);
    cudaFree(c->tk_d);
    cudaFreeHost(c->tk_h);
    cudaFree(c->amem);
    cudaFree(c->kvmem);
    cudaFree(c->wmem);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c->ups);
    free(c->tap_buf);
    free(c->L);
    free(c);
}

/* ---- the backend table ---------------------------------------------------------------- */

static int cf_be_create(const struct be_desc *d, void **out, char *err, size_t errlen) {
    struct cf_fwd *c = NULL;
    int rc = cf_fwd_create(d->bm, d->bkv, &d->o, &c, err, errlen);
    *out = c;
    return rc;
}

static int cf_be_run(void *b, const struct be_seq *seqs, int n_seqs, float *logits) {
    return cf_fwd_run(b, seqs, n_seqs, logits, NULL, NULL, NULL, NULL, NULL);
}

static int cf_be_run_rows(void *b, const struct be_seq *seqs, int n_seqs, float *logits,
                          const uint8_t *kind, const float *scale, int32_t *ids,
                          int32_t *topk_id, float *topk_val) {
    struct cf_fwd *c = b;
    int n_rows = 0, n_topk = 0;
    for (int s = 0; s < n_seqs; s++)
        n_rows += seqs[s].logits == BE_LOGITS_ALL ? seqs[s].n_tokens
                  : seqs[s].logits == BE_LOGITS_LAST ? 1 : 0;
    if (n_rows > c->o.max_logit_rows) return BE_EINVAL;
    for (int r = 0; r < n_rows; r++) n_topk += kind[r] == BE_ROW_TOPK;
    if (c->dev_topk || n_topk == 0)
        return cf_fwd_run(c, seqs, n_seqs, logits, kind, scale, ids, topk_id, topk_val);
    /* the device kernel is opt-in: top-k rows come back whole, candidates taken here */
    for (int r = 0; r < n_rows; r++) c->kind_tmp[r] = kind[r] == BE_ROW_TOPK ? BE_ROW_FULL : kind[r];
    int st = cf_fwd_run(c, seqs, n_seqs, logits, c->kind_tmp, scale, ids, NULL, NULL);
    if (st != BE_OK) return st;
    const int V = c->m->n_vocab;
    for (int r = 0; r < n_rows; r++)
        if (kind[r] == BE_ROW_TOPK)
            be_topk_row(logits + (size_t)r * V, V, scale[r], topk_id + (size_t)r * BE_TOPK_MAX,
                        topk_val + (size_t)r * BE_TOPK_MAX);
    return BE_OK;
}

static int cf_be_set_tap(void *b, be_tap_fn fn, void *user) {
    return cf_fwd_set_tap(b, fn, user);
}

static void cf_be_destroy(void *b) {
    cf_fwd_destroy(b);
}

static int cf_be_step_times(void *b, struct be_step_times *t) {
    return cf_fwd_step_times(b, t);
}

static int cf_be_set_profile(void *b, int on) {
    return cf_fwd_set_profile(b, on);
}

const struct be_ops be_cuda = {"cuda",          cf_fwd_available, cf_be_create,
                               cf_be_run,       cf_be_set_tap,    cf_be_destroy,
                               cf_be_step_times, cf_be_set_profile, cf_be_run_rows,
                               NULL /* batch-invariant only with deterministic */};

