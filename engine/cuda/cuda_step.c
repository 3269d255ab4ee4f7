/*
 * cuda_step — one step of the CUDA backend (engine/cuda/cuda_fwd_int.h): the host checks
 * the step and fills one pinned int32 metadata block, one async copy moves it to the
 * device, the layers run as kernels on the context's stream (operation for operation as
 * engine/cpu_fwd.c), and the selected logit rows come back.
 *
 * Decode steps (one token per sequence, last-row logits) run as CUDA graphs: the step is
 * padded to a power-of-two number of rows by repeating its last row (which recomputes the
 * same values and rewrites the same KV slot with the same bits: rows never depend on each
 * other), its attention grids sized by a power-of-two bucket of splits, captured once per
 * (rows, splits) and replayed; only the metadata copy, the graph launch and the logits copy
 * are issued per step. Anything else, a tap, profiling, or a failed capture runs the kernels
 * one by one (the same kernels with the same arguments, so the same results).
 *
 * Profiling (cf_fwd_set_profile) records an event after every operation and sums the
 * intervals per class (enum be_prof).
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/cuda_act.h"
#include "engine/cuda/cuda_fwd_int.h"
#include "engine/cuda/cuda_getrows.h"
#include "engine/cuda/cuda_head.h"
#include "engine/cuda/cuda_norm.h"
#include "engine/cuda/cuda_qkv.h"
#include "engine/cuda/cuda_rope.h"
#include "base/log.h"

int cf_fwd_set_tap(struct cf_fwd *c, be_tap_fn fn, void *user) {
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
                      int *n_sel, size_t *n_ints, int *max_pos, int *decode) {
    const struct be_model *m = c->m;
    const struct be_kv *p = c->kvp;
    int need[2] = {0, 0};
    for (int l = 0; l < m->n_layer; l++)
        if (p->cls[l] >= 0) need[p->cls[l]] = 1;
    if (!seqs || n_seqs < 1 || n_seqs > c->o.max_seqs) return BE_EINVAL;
    const int bs = p->block_size;
    int32_t *meta = c->meta_h;
    int rows = 0, sel = 0, pmax = 0, dec = 1;
    size_t tab = 0;
    for (int s = 0; s < n_seqs; s++) {
        const struct be_seq *q = &seqs[s];
        if (q->n_tokens != 1 || q->logits != BE_LOGITS_LAST) dec = 0;
        if (!q->tokens || q->n_tokens < 1 || q->pos < 0) return BE_EINVAL;
        if (q->n_tokens > c->o.max_tokens - rows) return BE_EINVAL;
        if ((int64_t)q->pos + q->n_tokens > (int64_t)1 << 30) return BE_EINVAL;
        if (q->pos + q->n_tokens - 1 > pmax) pmax = q->pos + q->n_tokens - 1;
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
    /* more attention splits than the scratch was sized for (positions past the context) */
    if (cf_attn_splits(pmax, 0) > c->split_cap) return BE_EINVAL;
    *n_rows = rows;
    *n_sel = sel;
    *n_ints = c->off_tab + tab;
    *max_pos = pmax;
    *decode = dec;
    return BE_OK;
}

/* What one step's kernels need besides the context: rows (padded when graphed), logit rows,
 * the attention splits of a FULL layer, and the device views of the metadata. */
struct cf_stepk {
    int T, n_sel, n_split;
    const int32_t *tok;
    struct cf_rows R;
};

/* Profiling: an event after the operation that just ended, of class k. No-op when off. */
static int cf_mark(struct cf_fwd *c, enum be_prof k) {
    if (!c->prof || c->n_pev >= c->n_pev_made) return 0;
    c->pcls[c->n_pev] = (uint8_t)k;
    return CUDA_CHECK(cudaEventRecord(c->pev[c->n_pev++], c->stream));
}

/* 1 when the step's matmuls of weight w take the MMVQ path (cuda_mmvq.h). */
static int cf_use_mmvq(const struct cf_fwd *c, const struct cf_weight *w, int M) {
    return c->mmvq && M <= CF_MMVQ_MAX_ROWS && cf_mmvq_supported(w->type);
}

/* Y = X · Wᵀ. On the MMVQ path X is quantized into c->q8x first, unless *q_ready says that
 * this very X already is (then it is left alone); q_ready NULL: always quantize. */
static int cf_mm_q(struct cf_fwd *c, const struct cf_weight *w, const float *X, int M, float *Y,
                   int ldy, int *q_ready) {
    if (cf_use_mmvq(c, w, M)) {
        if ((!q_ready || !*q_ready) &&
            cf_mmvq_quantize(c->stream, X, M, w->n_in, c->q8x, c->q8x_bytes))
            return -1;
        if (q_ready) *q_ready = 1;
        if (cf_mmvq_matmul(c->stream, w, c->q8x, M, Y, ldy)) return -1;
        return cf_mark(c, BE_PROF_MATMUL);
    }
    if (cf_matmul(c->stream, c->blas, w, X, M, Y, ldy, c->mm_mode, c->mm_scratch,
                  c->mm_scratch_bytes))
        return -1;
    return cf_mark(c, BE_PROF_MATMUL);
}

static int cf_mm(struct cf_fwd *c, const struct cf_weight *w, const float *X, int M, float *Y,
                 int ldy) {
    return cf_mm_q(c, w, X, M, Y, ldy, NULL);
}

/* 1 when the n weights (one n_in) can go in one MMVQ set launch (their types may differ). */
static int cf_use_mmvq_set(const struct cf_fwd *c, const struct cf_weight *const *w, int n,
                           int M) {
    for (int i = 0; i < n; i++)
        if (!cf_use_mmvq(c, w[i], M) || w[i]->n_in != w[0]->n_in) return 0;
    return 1;
}

/* cf_matmul_set, on the MMVQ path when the weights' types take it (X quantized once). */
static int cf_mm_set(struct cf_fwd *c, const struct cf_weight *const *w, int n, const float *X,
                     int M, float *const *Y, const int *ldy, int geglu) {
    if (cf_use_mmvq_set(c, w, n, M)) {
        if (cf_mmvq_quantize(c->stream, X, M, w[0]->n_in, c->q8x, c->q8x_bytes) ||
            cf_mmvq_matmul_set(c->stream, w, n, c->q8x, M, Y, ldy, geglu))
            return -1;
    } else if (cf_matmul_set(c->stream, w, n, X, M, Y, ldy, geglu)) {
        return -1;
    }
    return cf_mark(c, BE_PROF_MATMUL);
}

static int cf_norm(struct cf_fwd *c, const float *x, int ld_x, const float *w, const float *res,
                   int ld_res, float *y, int ld_y, int n, int rows) {
    if (cf_rms_norm(c->stream, x, ld_x, w, res, ld_res, y, ld_y, n, rows, c->m->eps)) return -1;
    return cf_mark(c, BE_PROF_NORM);
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
static int cf_ple_prepare(struct cf_fwd *c, const struct cf_stepk *K) {
    const struct be_model *cfg = c->m;
    const int T = K->T, npl = cfg->n_embd_pl, nl = cfg->n_layer;
    const size_t P = (size_t)npl * (size_t)nl;
    cudaStream_t s = c->stream;
    if (cf_get_rows(s, &c->pl_tok_embd, K->tok, T, sqrtf((float)npl), c->ple, (int)P) ||
        cf_mm(c, &c->pl_proj, c->x, T, c->ple_tmp, (int)P) ||
        cf_scale(s, c->ple_tmp, (size_t)T * P, 1.0f / sqrtf((float)cfg->n_embd)) ||
        cf_norm(c, c->ple_tmp, npl, c->pl_proj_norm, NULL, 0, c->ple_tmp, npl, npl, T * nl) ||
        cf_add_scale(s, c->ple, c->ple_tmp, c->ple, (size_t)T * P, 1.0f / sqrtf(2.0f)))
        return -1;
    return cf_mark(c, BE_PROF_OTHER);
}

/* x = x + t, or x = x + RMS(t, w) when the layer has that post-norm. */
static int cf_residual(struct cf_fwd *c, const float *w, int T) {
    const int E = c->m->n_embd;
    if (w) return cf_norm(c, c->t, E, w, c->x, E, c->x, E, E, T);
    if (cf_add_scale(c->stream, c->x, c->x, c->t, (size_t)T * E, 1.0f)) return -1;
    return cf_mark(c, BE_PROF_NORM);
}

/* A post-norm residual, x = x + RMS(t, w_post), followed by h = RMS(x, w_next): one launch
 * when both weights exist, else the two operations. */
static int cf_residual_norm(struct cf_fwd *c, const float *w_post, const float *w_next, int T) {
    const int E = c->m->n_embd;
    if (w_post && w_next) {
        if (cf_post_norm_next(c->stream, c->t, E, w_post, c->x, E, w_next, c->h, E, E, T,
                              c->m->eps))
            return -1;
        return cf_mark(c, BE_PROF_NORM);
    }
    if (cf_residual(c, w_post, T)) return -1;
    return cf_norm(c, c->x, E, w_next, NULL, 0, c->h, E, E, T);
}

/* RoPE over n_heads heads of layer l in x ([T][n_heads * hd]), after the per-head RMS norm
 * (Gemma 3/4's q/k norm) when norm is not NULL, then in the same launch. */
static int cf_heads_rope(struct cf_fwd *c, int l, float *x, int n_heads, const float *norm,
                         const struct cf_stepk *K) {
    const struct be_layer *lc = &c->m->layer[l];
    const struct cf_layer *L = &c->L[l];
    const int hd = lc->head_dim, ld = n_heads * hd;
    if (norm)
        return cf_norm_rope(c->stream, x, ld, n_heads, hd, norm, c->m->eps, lc->n_rot, K->R.pos,
                            K->T, lc->rope_base, lc->rope_scale, L->rope_freqs) ||
               cf_mark(c, BE_PROF_NORM);
    return cf_rope_neox(c->stream, x, ld, n_heads, hd, lc->n_rot, K->R.pos, K->T, lc->rope_base,
                        lc->rope_scale, L->rope_freqs) ||
           cf_mark(c, BE_PROF_OTHER);
}

/* One layer. *h_ready: on entry, 1 when the previous layer already left RMS(x, attn_norm) in
 * h; on return, 1 when this layer did that for layer l + 1. */
static int cf_layer(struct cf_fwd *c, int l, const struct cf_stepk *K, int *h_ready) {
    const struct be_model *cfg = c->m;
    const struct be_layer *lc = &cfg->layer[l];
    const struct cf_layer *L = &c->L[l];
    const struct cf_rows *R = &K->R;
    cudaStream_t s = c->stream;
    const int T = K->T, E = cfg->n_embd;
    const int hd = lc->head_dim, hdv = lc->head_dim_v;
    const int nh = lc->n_head, nkv = lc->n_head_kv;
    const int nq = nh * hd, nk = nkv * hd, nv = nkv * hdv;

    /* The kernel path for sure (deterministic, or too few rows for cuBLAS): projections that
     * share their input and weight type go in one launch (cf_matmul_set, the same bits); on
     * the MMVQ path (steps of <= 8 rows, GEMMAD_CUDA_MMVQ=1) also projections of different
     * types (cf_mmvq_matmul_set). */
    const int fuse = !c->blas || T < CF_MM_CUBLAS_MIN_ROWS;
    const struct cf_weight *w3[3] = {&L->wq, &L->wk, &L->wv};
    const int qkv = fuse && lc->has_kv && !lc->k_eq_v &&
                    ((L->wk.type == L->wq.type && L->wv.type == L->wq.type &&
                      L->wk.n_in == L->wq.n_in && L->wv.n_in == L->wq.n_in) ||
                     cf_use_mmvq_set(c, w3, 3, T)); /* MMVQ sets may mix types */

    /* attention: the scale is applied to q inside cf_attention, as cpu_fwd.c does before
     * rounding q to fp16 */
    if (!*h_ready && cf_norm(c, c->x, E, L->attn_norm, NULL, 0, c->h, E, E, T)) return -1;
    *h_ready = 0;
    /* 1 once c->q8x holds h quantized for the q/k/v projections (fq: for gate/up) */
    int hq = 0, fq = 0;
    if (qkv) {
        float *y3[3] = {c->q, c->k, c->v};
        const int ld3[3] = {nq, nk, nv};
        if (cf_mm_set(c, w3, 3, c->h, T, y3, ld3, 0)) return -1;
    } else if (cf_mm_q(c, &L->wq, c->h, T, c->q, nq, &hq)) {
        return -1;
    }
    const int fuse_kv = c->fuse_kv && lc->has_kv; /* q's rotation waits for k and v */
    if (!fuse_kv && cf_heads_rope(c, l, c->q, nh, L->q_norm, K)) return -1;
    if (lc->has_kv) {
        if (!qkv && cf_mm_q(c, &L->wk, c->h, T, c->k, nk, &hq)) return -1;
        if (qkv) {
            /* V came with Q and K */
        } else if (lc->k_eq_v) { /* V is the raw K projection, before k_norm and RoPE */
            if (CUDA_CHECK(cudaMemcpyAsync(c->v, c->k, (size_t)T * nv * sizeof(float),
                                           cudaMemcpyDeviceToDevice, s)))
                return -1;
        } else if (cf_mm_q(c, &L->wv, c->h, T, c->v, nv, &hq)) {
            return -1;
        }
        if (fuse_kv) {
            const struct cf_rope rp = {lc->n_rot, lc->rope_base, lc->rope_scale, L->rope_freqs};
            if (cf_qkv_rope_store(s, R, &L->kv, c->q, nq, nh, L->q_norm, c->k, nk, L->k_norm,
                                  c->v, nv, cfg->v_norm, cfg->eps, &rp) ||
                cf_mark(c, BE_PROF_ATTN))
                return -1;
        } else {
            if (cfg->v_norm && cf_norm(c, c->v, hdv, NULL, NULL, 0, c->v, hdv, hdv, T * nkv))
                return -1;
            if (cf_heads_rope(c, l, c->k, nkv, L->k_norm, K) ||
                cf_kv_store(s, R, &L->kv, c->k, nk, c->v, nv)) return -1;
        }
    }
    const int window = lc->sliding && cfg->sliding_window > 0 ? cfg->sliding_window : 0;
    const struct cf_attn A = {nh, cfg->attn_scale, cfg->attn_softcap, window};
    /* K->n_split covers the step's largest position with no window; a window needs fewer */
    const int win_split = window > 0 ? cf_attn_splits(INT_MAX - CF_ATT_SPLIT, window) : INT_MAX;
    const int n_split = K->n_split < win_split ? K->n_split : win_split;
    if (cf_attention(s, R, &L->kv, &A, c->q, nq, c->att, nh * hdv, &c->att_sc, n_split) ||
        cf_mark(c, BE_PROF_ATTN) || cf_mm(c, &L->wo, c->att, T, c->t, E) ||
        cf_residual_norm(c, L->post_attn_norm, L->ffn_norm, T))
        return -1;

    /* feed-forward */
    const int nff = lc->n_ff;
    const struct cf_weight *w2[2] = {&L->gate, &L->up};
    if (fuse && L->gate.n_out == L->up.n_out &&
        ((L->gate.type == L->up.type && L->gate.n_in == L->up.n_in) ||
         cf_use_mmvq_set(c, w2, 2, T))) { /* gate, up and GeGLU in one launch */
        float *y2[2] = {c->g, c->u};
        const int ld2[2] = {nff, nff};
        if (cf_mm_set(c, w2, 2, c->h, T, y2, ld2, 1)) return -1;
    } else if (cf_mm_q(c, &L->gate, c->h, T, c->g, nff, &fq) ||
               cf_mm_q(c, &L->up, c->h, T, c->u, nff, &fq) ||
               cf_geglu(s, c->g, nff, c->u, nff, nff, T) || cf_mark(c, BE_PROF_OTHER)) {
        return -1;
    }
    const int ple = cfg->n_embd_pl > 0 && L->inp_gate.data;
    const float os = c->m->layer[l].out_scale;
    /* the next layer's input norm with this residual when nothing comes between them */
    const float *next_norm =
        !ple && os == 1.0f && l + 1 < cfg->n_layer ? c->L[l + 1].attn_norm : NULL;
    if (cf_mm(c, &L->down, c->g, T, c->t, E)) return -1;
    if (L->post_ffw_norm && next_norm) {
        if (cf_residual_norm(c, L->post_ffw_norm, next_norm, T)) return -1;
        *h_ready = 1;
    } else if (cf_residual(c, L->post_ffw_norm, T)) {
        return -1;
    }

    /* Gemma 4 per-layer embedding and layer scale */
    if (ple) {
        const int npl = cfg->n_embd_pl;
        if (cf_mm(c, &L->inp_gate, c->x, T, c->g, npl) ||
            cf_geglu(s, c->g, npl, c->ple + (size_t)l * npl, npl * cfg->n_layer, npl, T) ||
            cf_mark(c, BE_PROF_OTHER) || cf_mm(c, &L->proj, c->g, T, c->t, E) ||
            cf_norm(c, c->t, E, L->post_norm, c->x, E, c->x, E, E, T))
            return -1;
    }
    if (os != 1.0f && (cf_scale(s, c->x, (size_t)T * E, os) || cf_mark(c, BE_PROF_OTHER)))
        return -1;
    return 0;
}

/* Every kernel of a step, between the metadata copy and the logits copy: what a graph
 * captures. */
static int cf_kernels(struct cf_fwd *c, const struct cf_stepk *K) {
    const struct be_model *cfg = c->m;
    cudaStream_t s = c->stream;
    const int E = cfg->n_embd, V = cfg->n_vocab;
    if (cf_get_rows(s, &c->tok_embd, K->tok, K->T, cfg->embd_scale, c->x, E) ||
        cf_mark(c, BE_PROF_OTHER))
        return -1;
    if (cfg->n_embd_pl > 0 && cf_ple_prepare(c, K)) return -1;
    int h_ready = 0;
    for (int l = 0; l < cfg->n_layer; l++) {
        if (cf_layer(c, l, K, &h_ready)) return -1;
        if (c->tap && cf_tap(c, l, c->x, K->T)) return -1;
    }
    if (K->n_sel <= 0) return 0;
    if (cf_gather_rows(s, c->x, E, c->meta_d + c->off_sel, K->n_sel, E, c->xsel, E) ||
        cf_rms_norm(s, c->xsel, E, c->output_norm, NULL, 0, c->xsel, E, E, K->n_sel, cfg->eps))
        return -1;
    if (c->tap && cf_tap(c, cfg->n_layer, c->xsel, K->n_sel)) return -1;
    /* The LM head has its own kernel (cuda_head.h: each weight tile read once for all rows;
     * a cuBLAS copy of it would cost n_vocab*n_embd halves of scratch). */
    if (cf_head(s, &c->output, c->xsel, K->n_sel, c->logits, V)) return -1;
    if (cfg->final_softcap > 0.0f &&
        cf_softcap(s, c->logits, (size_t)K->n_sel * V, cfg->final_softcap))
        return -1;
    return cf_mark(c, BE_PROF_HEAD);
}

/* ---- CUDA graphs of decode steps ---------------------------------------------------------- */

static int cf_pow2_at_least(int n) {
    int p = 1;
    while (p < n && p < (1 << 30))
        p *= 2;
    return p;
}

/* The graph for K's shape, captured on first use; NULL when graphs are off or the cache is
 * full (the caller then launches the kernels one by one). A failed capture turns graphs off
 * for this context, with a warning. */
static const struct cf_graph *cf_graph_get(struct cf_fwd *c, const struct cf_stepk *K) {
    for (int i = 0; i < c->n_graphs; i++)
        if (c->graphs[i].rows == K->T && c->graphs[i].n_split == K->n_split) return &c->graphs[i];
    if (c->graphs_off || c->n_graphs >= CF_MAX_GRAPHS) return NULL;
    cudaGraph_t g = NULL;
    cudaGraphExec_t exec = NULL;
    if (CUDA_CHECK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal)))
        goto fail;
    const int rc = cf_kernels(c, K);
    const int erc = CUDA_CHECK(cudaStreamEndCapture(c->stream, &g)); /* ends it in any case */
    if (rc || erc || !g) goto fail;
    if (CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0))) goto fail;
    cudaGraphDestroy(g);
    c->graphs[c->n_graphs] = (struct cf_graph){exec, K->T, K->n_split};
    return &c->graphs[c->n_graphs++];
fail:
    if (g) cudaGraphDestroy(g);
    (void)cudaGetLastError(); /* clear a launch error raised during the capture */
    c->graphs_off = 1;
    LOG_W("cuda", 0, "capturing a decode step as a CUDA graph failed (%s); running steps "
                     "without graphs",
          cf_last_error());
    return NULL;
}

/* Pads a decode step of T rows to P by repeating row T - 1 (token, position, sequence) and
 * its logit row: the copies compute exactly row T - 1's values and store the same bits in
 * the same KV slot. */
static void cf_pad_rows(struct cf_fwd *c, int T, int P) {
    int32_t *m = c->meta_h;
    for (int r = T; r < P; r++) {
        m[r] = m[T - 1];
        m[c->off_pos + (size_t)r] = m[c->off_pos + (size_t)(T - 1)];
        m[c->off_seq + (size_t)r] = m[c->off_seq + (size_t)(T - 1)];
        m[c->off_sel + (size_t)r] = T - 1;
    }
}

void cf_step_free(struct cf_fwd *c) {
    for (int i = 0; i < c->n_graphs; i++)
        cudaGraphExecDestroy(c->graphs[i].exec);
    c->n_graphs = 0;
    for (int i = 0; i < c->n_pev_made; i++)
        cudaEventDestroy(c->pev[i]);
    free(c->pev);
    free(c->pcls);
    c->pev = NULL;
    c->pcls = NULL;
    c->n_pev_made = c->n_pev = 0;
}

/* ---- the step ----------------------------------------------------------------------------- */

_Static_assert(CF_TOPK_MAX == BE_TOPK_MAX, "cuda_topk.h and backend.h disagree");

/* Copies the step's results back: every logit row without kinds; else the greedy ids (one
 * int per row, into pinned memory) when a row is greedy, the top-k rows' candidates (packed,
 * pinned), and only the FULL rows' logits, run by run. */
static int cf_copy_back(struct cf_fwd *c, int n_sel, float *logits, const uint8_t *kind,
                        int n_greedy, int n_topk) {
    cudaStream_t s = c->stream;
    const size_t row = (size_t)c->m->n_vocab * sizeof(float);
    if (!kind)
        return CUDA_CHECK(cudaMemcpyAsync(logits, c->logits, (size_t)n_sel * row,
                                          cudaMemcpyDeviceToHost, s));
    if (n_greedy && CUDA_CHECK(cudaMemcpyAsync(c->ids_h, c->ids_d, (size_t)n_sel * sizeof(int32_t),
                                               cudaMemcpyDeviceToHost, s)))
        return -1;
    const size_t R = (size_t)c->o.max_logit_rows, tk = (size_t)n_topk * CF_TOPK_MAX * 4;
    if (n_topk && (CUDA_CHECK(cudaMemcpyAsync(c->tk_h + 2 * R, c->tk_d + 2 * R, tk,
                                              cudaMemcpyDeviceToHost, s)) ||
                   CUDA_CHECK(cudaMemcpyAsync(c->tk_h + 2 * R + R * CF_TOPK_MAX,
                                              c->tk_d + 2 * R + R * CF_TOPK_MAX, tk,
                                              cudaMemcpyDeviceToHost, s))))
        return -1;
    for (int r = 0; r < n_sel;) {
        if (kind[r] != BE_ROW_FULL) {
            r++;
            continue;
        }
        int e = r + 1;
        while (e < n_sel && kind[e] == BE_ROW_FULL)
            e++;
        if (CUDA_CHECK(cudaMemcpyAsync((char *)logits + (size_t)r * row,
                                       (const char *)c->logits + (size_t)r * row,
                                       (size_t)(e - r) * row, cudaMemcpyDeviceToHost, s)))
            return -1;
        r = e;
    }
    return 0;
}

/* The top-k rows of a step into tk_h's head (rows, then scales) and its copy to the device;
 * returns how many, or -1. */
static int cf_topk_put(struct cf_fwd *c, int n_sel, const uint8_t *kind, const float *scale) {
    int M = 0;
    for (int r = 0; kind && r < n_sel; r++)
        M += kind[r] == BE_ROW_TOPK;
    if (!M) return 0;
    float *sc = (float *)(void *)(c->tk_h + M);
    for (int r = 0, j = 0; r < n_sel; r++)
        if (kind[r] == BE_ROW_TOPK) c->tk_h[j] = r, sc[j++] = scale[r];
    if (CUDA_CHECK(cudaMemcpyAsync(c->tk_d, c->tk_h, (size_t)M * 2 * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, c->stream)))
        return -1;
    return M;
}

int cf_fwd_run(struct cf_fwd *c, const struct be_seq *seqs, int n_seqs, float *logits,
               const uint8_t *kind, const float *scale, int32_t *ids, int32_t *topk_id,
               float *topk_val) {
    int T = 0, n_sel = 0, pmax = 0, decode = 0;
    size_t n_ints = 0;
    int st = cf_prepare(c, seqs, n_seqs, &T, &n_sel, &n_ints, &pmax, &decode);
    if (st != BE_OK) return st;
    if (n_sel > 0 && !logits) return BE_EINVAL;
    if (kind && !ids) return BE_EINVAL;
    int n_greedy = 0, n_topk = 0;
    for (int r = 0; kind && r < n_sel; r++) {
        if (kind[r] > BE_ROW_TOPK) return BE_EINVAL;
        n_greedy += kind[r] == BE_ROW_GREEDY;
        n_topk += kind[r] == BE_ROW_TOPK;
    }
    if (n_topk && (!scale || !topk_id || !topk_val)) return BE_EINVAL;
    cudaStream_t s = c->stream;
    const int V = c->m->n_vocab;
    struct cf_stepk K = {T,
                         n_sel,
                         cf_attn_splits(pmax, 0),
                         c->meta_d,
                         {c->meta_d + c->off_pos, c->meta_d + c->off_seq, c->meta_d + c->off_info,
                          c->meta_d + c->off_tab, T}};
    /* Graph shape: rows padded to a power of two while they fit the buffers, splits to a
     * power of two (at most split_cap, which is one). */
    const int graph = decode && !c->graphs_off && !c->prof && !c->tap &&
                      (!c->blas || cf_pow2_at_least(T) < CF_MM_CUBLAS_MIN_ROWS);
    if (graph) {
        const int P = cf_pow2_at_least(T);
        if (P <= c->o.max_tokens && P <= c->o.max_logit_rows) {
            cf_pad_rows(c, T, P);
            K.T = K.n_sel = K.R.n_rows = P;
        }
        K.n_split = cf_pow2_at_least(K.n_split);
    }

    c->timed = c->graphed = 0;
    c->n_pev = 0;
    if (CUDA_CHECK(cudaSetDevice(0)) || CUDA_CHECK(cudaEventRecord(c->ev[0], s)) ||
        CUDA_CHECK(cudaMemcpyAsync(c->meta_d, c->meta_h, n_ints * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, s)) ||
        cf_topk_put(c, n_sel, kind, scale) < 0 || CUDA_CHECK(cudaEventRecord(c->ev[1], s)))
        goto fail;
    const struct cf_graph *g = graph ? cf_graph_get(c, &K) : NULL;
    if (g) {
        if (CUDA_CHECK(cudaGraphLaunch(g->exec, s))) goto fail;
        c->graphed = 1;
    } else {
        if (graph) { /* no graph after all: the step as it is, unpadded */
            K.T = K.n_sel = K.R.n_rows = T;
            K.n_split = cf_attn_splits(pmax, 0);
        }
        if (cf_kernels(c, &K)) goto fail;
    }
    /* greedy and top-k rows: reduced on the device, outside the graph (the real rows only;
     * the top-k launch reads the packed rows and scales cf_topk_put copied) */
    if (n_greedy && cf_argmax_rows(s, c->logits, V, V, n_sel, c->ids_d)) goto fail;
    const size_t R = (size_t)c->o.max_logit_rows;
    if (n_topk && cf_topk_rows(s, c->logits, V, V, c->tk_d, (const float *)(void *)(c->tk_d + n_topk),
                               n_topk, c->tk_d + 2 * R,
                               (float *)(void *)(c->tk_d + 2 * R + R * CF_TOPK_MAX)))
        goto fail;
    if (CUDA_CHECK(cudaEventRecord(c->ev[2], s))) goto fail;
    if (n_sel > 0 && cf_copy_back(c, n_sel, logits, kind, n_greedy, n_topk)) goto fail;
    if (CUDA_CHECK(cudaEventRecord(c->ev[3], s)) || CUDA_CHECK(cudaStreamSynchronize(s)))
        goto fail;
    const int32_t *tid = c->tk_h + 2 * R;
    const float *tval = (const float *)(const void *)(c->tk_h + 2 * R + R * CF_TOPK_MAX);
    for (int r = 0, j = 0; kind && r < n_sel; r++) {
        ids[r] = kind[r] == BE_ROW_GREEDY ? c->ids_h[r] : -1;
        if (kind[r] != BE_ROW_TOPK) continue;
        memcpy(topk_id + (size_t)r * CF_TOPK_MAX, tid + (size_t)j * CF_TOPK_MAX,
               CF_TOPK_MAX * sizeof(int32_t));
        memcpy(topk_val + (size_t)r * CF_TOPK_MAX, tval + (size_t)j * CF_TOPK_MAX,
               CF_TOPK_MAX * sizeof(float));
        j++;
    }
    c->timed = 1;
    return BE_OK;
fail:
    LOG_E("cuda", 0, "forward step failed: %s", cf_last_error());
    cudaStreamSynchronize(s);
    return BE_EBACKEND;
}

int cf_fwd_step_times(const struct cf_fwd *c, struct be_step_times *t) {
    if (!c->timed) return BE_EINVAL;
    memset(t, 0, sizeof *t);
    double ms[3];
    for (int i = 0; i < 3; i++) {
        float e = 0.0f;
        if (CUDA_CHECK(cudaEventElapsedTime(&e, c->ev[i], c->ev[i + 1]))) return BE_EBACKEND;
        ms[i] = e;
    }
    t->h2d_ms = ms[0];
    t->gpu_ms = ms[1];
    t->d2h_ms = ms[2];
    t->graph = c->graphed;
    if (c->prof && c->n_pev > 0) {
        cudaEvent_t prev = c->ev[1];
        for (int i = 0; i < c->n_pev; i++) {
            float e = 0.0f;
            if (CUDA_CHECK(cudaEventElapsedTime(&e, prev, c->pev[i]))) return BE_EBACKEND;
            t->class_ms[c->pcls[i]] += e;
            prev = c->pev[i];
        }
        float e = 0.0f; /* operations after the last mark (none when all are marked) */
        if (CUDA_CHECK(cudaEventElapsedTime(&e, prev, c->ev[2]))) return BE_EBACKEND;
        t->class_ms[BE_PROF_OTHER] += e;
        t->profiled = 1;
    }
    return BE_OK;
}

int cf_fwd_set_profile(struct cf_fwd *c, int on) {
    if (on && !c->pev) {
        c->pev = calloc(CF_PROF_EVENTS, sizeof *c->pev);
        c->pcls = calloc(CF_PROF_EVENTS, 1);
        if (!c->pev || !c->pcls) {
            cf_step_free(c);
            return BE_ENOMEM;
        }
        for (; c->n_pev_made < CF_PROF_EVENTS; c->n_pev_made++)
            if (CUDA_CHECK(cudaEventCreate(&c->pev[c->n_pev_made]))) {
                cf_step_free(c);
                return BE_EBACKEND;
            }
    }
    c->prof = on != 0;
    return BE_OK;
}
