/*
 * cpu_attn — RoPE, K/V cache writes and attention for the CPU backend.
 *
 * Attention runs per tile: up to ATTN_TILE_QV query vectors (consecutive rows of one
 * sequence x the g query heads sharing one KV head) walk the visible key positions in blocks
 * of ATTN_BLOCK aligned to absolute positions, twice (engine/kernels/attn.h): K blocks for
 * the scores, then the softmax of each query vector as llama.cpp computes it (probabilities
 * rounded to F16 for an F16 cache), then V blocks for P.V; each block's rows are converted
 * to f32 once per tile. The scores of a tile live in the pool thread's scratch; a tile
 * whose scores would not fit is run in fewer rows at a time. A row's result depends only on
 * its query, its position and the cache contents, not on the tile, batch or chunk it is
 * computed in. Tiles are spread over the pool by estimated cost (visible keys), not by row
 * count; a step with fewer tiles than threads (one sequence decoding) runs each tile over
 * the whole pool instead (split mode, the same bits). Keys and values are always read back
 * from the cache (also those written in this very step), so a prompt cut into chunks sees
 * exactly the same (rounded) keys as a whole one.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/cpu_int.h"
#include "engine/kernels/attn.h"
#include "engine/kernels/quant.h"
#include "engine/model.h"

/* ---- RoPE ---- */

static int rope_equal(const struct cpu_rope *a, const struct cpu_rope *b) {
    /* freqs by content: the CPU forward copies each layer's view separately */
    return a->base == b->base && a->scale == b->scale && a->n_rot == b->n_rot &&
           (a->freqs == b->freqs ||
            (a->freqs && b->freqs &&
             !memcmp(a->freqs, b->freqs, (size_t)(a->n_rot / 2) * sizeof(float))));
}

/* Finds the distinct RoPE configurations of the model (usually two: local and global).
 * Returns -1 when there are more than CPU_MAX_ROPE. */
int cpu_rope_init(struct cpu_ctx *c) {
    const struct model *m = c->m;
    c->max_rot = 0;
    c->n_rope = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const struct model_layer_cfg *lc = &m->cfg.layer[l];
        struct cpu_rope r = {lc->rope_base, lc->rope_scale, lc->n_rot, c->lw[l].rope_freqs};
        int ci;
        for (ci = 0; ci < c->n_rope; ci++)
            if (rope_equal(&c->rope[ci], &r)) break;
        if (ci == c->n_rope) {
            if (c->n_rope == CPU_MAX_ROPE) return -1;
            c->rope[c->n_rope++] = r;
        }
        c->layer_rope[l] = ci;
        if (r.n_rot > c->max_rot) c->max_rot = r.n_rot;
    }
    return 0;
}

/* Computes cos/sin for every row and every RoPE configuration the way ggml_rope_cache_init
 * does: theta starts at the position and is multiplied by base^(-2/n_rot) per pair, divided
 * by the optional frequency factor, then times freq_scale. */
void cpu_rope_prepare(struct cpu_ctx *c) {
    const int T = c->n_rows;
    for (int ci = 0; ci < c->n_rope; ci++) {
        const struct cpu_rope *r = &c->rope[ci];
        const float theta_scale = powf(r->base, -2.0f / (float)r->n_rot);
        for (int row = 0; row < T; row++) {
            float *cs = c->rope_cs + ((size_t)ci * (size_t)c->o.max_tokens + (size_t)row) *
                                         (size_t)c->max_rot;
            float theta = (float)c->row_pos[row];
            const int half = r->n_rot / 2;
            for (int i = 0; i < half; i++) {
                const float ff = r->freqs ? r->freqs[i] : 1.0f;
                const float th = r->scale * (theta / ff);
                cs[i] = cosf(th);
                cs[half + i] = sinf(th);
                theta *= theta_scale;
            }
        }
    }
}

/* NEOX rotation of the first n_rot dims of every head of rows [r0, r1): pairs (i, i + n_rot/2). */
void cpu_rope_apply(const struct cpu_ctx *c, int layer, float *x, int n_heads, int hd, int r0,
                    int r1) {
    const int ci = c->layer_rope[layer];
    const int n_rot = c->rope[ci].n_rot, half = n_rot / 2;
    for (int row = r0; row < r1; row++) {
        const float *cs = c->rope_cs + ((size_t)ci * (size_t)c->o.max_tokens + (size_t)row) *
                                           (size_t)c->max_rot;
        for (int h = 0; h < n_heads; h++) {
            float *v = x + ((size_t)row * (size_t)n_heads + (size_t)h) * (size_t)hd;
            c->vec->rope_neox(v, cs, half);
        }
    }
}

/* ---- KV cache ---- */

static inline uint8_t *kv_row(const struct kvstore_pool *p, int l, int is_v, const struct be_seq *s,
                              int pos) {
    const int bs = p->block_size;
    const int blk = pos / bs;
    const int32_t id = p->cls[l] == KVSTORE_FULL ? s->full[blk] : s->swa[blk % s->n_swa];
    const uint8_t *base = is_v ? p->v_base[l] + (size_t)id * p->v_block_stride[l]
                               : p->k_base[l] + (size_t)id * p->k_block_stride[l];
    const size_t rb = is_v ? p->row_bytes_v[l] : p->row_bytes_k[l];
    return (uint8_t *)base + (size_t)(pos % bs) * rb;
}

static void store_row(const struct vec_ops *vec, enum kvstore_dtype dt, const float *x, uint8_t *dst,
                      int n) {
    switch (dt) {
    case KVSTORE_F16: vec->f32_to_f16(x, (uint16_t *)dst, n); break;
    case KVSTORE_F32: memcpy(dst, x, (size_t)n * sizeof(float)); break;
    case KVSTORE_Q8_0: quant_q8_0_row_ref(x, dst, n); break;
    }
}

/* One head segment (n elements starting at element e0 of the row) to f32. */
static void load_seg(const struct vec_ops *vec, enum kvstore_dtype dt, const uint8_t *row, int e0,
                     float *dst, int n) {
    switch (dt) {
    case KVSTORE_F16: vec->f16_to_f32((const uint16_t *)row + e0, dst, n); break;
    case KVSTORE_F32: memcpy(dst, (const float *)row + e0, (size_t)n * sizeof(float)); break;
    case KVSTORE_Q8_0:
        quant_dequant_q8_0_ref(row + (size_t)(e0 / QK8_0) * sizeof(struct block_q8_0), dst, n);
        break;
    }
}

/* Writes this step's K and V rows of a layer that owns its cache. */
void cpu_kv_write(struct cpu_ctx *c, int layer) {
    const struct kvstore_pool *p = c->kv;
    const struct model_layer_cfg *lc = &c->m->cfg.layer[layer];
    const int nk = lc->n_head_kv * lc->head_dim, nv = lc->n_head_kv * lc->head_dim_v;
    const int hd = lc->head_dim, hdv = lc->head_dim_v;
    for (int r = 0; r < c->n_rows; r++) {
        const struct be_seq *s = &c->seqs[c->row_seq[r]];
        const int pos = c->row_pos[r];
        uint8_t *kd = kv_row(p, layer, 0, s, pos), *vd = kv_row(p, layer, 1, s, pos);
        if (p->dtype == KVSTORE_Q8_0) { /* per head: blocks never straddle heads */
            for (int h = 0; h < lc->n_head_kv; h++) {
                store_row(c->vec, p->dtype, c->k + (size_t)r * nk + (size_t)h * hd,
                          kd + (size_t)h * (p->row_bytes_k[layer] / (size_t)lc->n_head_kv), hd);
                store_row(c->vec, p->dtype, c->v + (size_t)r * nv + (size_t)h * hdv,
                          vd + (size_t)h * (p->row_bytes_v[layer] / (size_t)lc->n_head_kv), hdv);
            }
        } else {
            store_row(c->vec, p->dtype, c->k + (size_t)r * nk, kd, nk);
            store_row(c->vec, p->dtype, c->v + (size_t)r * nv, vd, nv);
        }
    }
}

/* ---- attention ---- */

/* Query rows per tile: ATTN_TILE_QV query vectors (at least one row). More rows share each
 * converted key block; fewer give the pool finer pieces to balance. */
static int attn_tile_rows(int g) {
    int r = ATTN_TILE_QV / g;
    return r < 1 ? 1 : r > 32 ? 32 : r;
}

static inline size_t up16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Score columns one query vector needs at most: its visible keys plus alignment slack. */
static size_t attn_max_cols(int max_span) { return (size_t)max_span + 2 * ATTN_BLOCK; }

/* The most keys one row may see: a sliding layer's window, a global layer's context
 * (max_ctx when given, else what the pool's full layers hold; fwd_run refuses more). */
int cpu_attn_max_span(const struct model *m, const struct kvstore_pool *kv, int max_ctx) {
    int ctx = kv->n_blocks[KVSTORE_FULL] * kv->block_size;
    if (max_ctx > 0 && (max_ctx < ctx || ctx == 0)) ctx = max_ctx;
    const int w = m->cfg.sliding_window;
    int span = 1;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const int s = m->cfg.layer[l].sliding && w > 0 ? w : ctx;
        span = s > span ? s : span;
    }
    return span;
}

/* Per-thread scratch (floats) for the largest layer, laid out by attn_subtile. max_span is
 * the most keys one row may see (the full layers' cache capacity or the sliding window). */
size_t cpu_attn_scratch_floats(const struct model *m, int max_span) {
    const size_t pcap = cpu_attn_score_floats(m, max_span);
    size_t mx = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const struct model_layer_cfg *lc = &m->cfg.layer[l];
        const size_t g = (size_t)(lc->n_head / lc->n_head_kv);
        const size_t R = (size_t)attn_tile_rows((int)g), nq = R * g;
        const size_t hd = (size_t)lc->head_dim, hdv = (size_t)lc->head_dim_v;
        size_t n = up16(nq * hd) + up16(nq * hdv) + up16(ATTN_BLOCK * hd) +
                   up16(ATTN_BLOCK * hdv) + 2 * up16(R) + pcap;
        if (n > mx) mx = n;
    }
    return (mx + 15) & ~(size_t)15;
}

/* Floats for the scores of a tile: all its query vectors over the longest span, so a tile
 * runs whole (a sliding layer's tile, whose rows see windows that start at different
 * places, may still be cut into fewer rows by attn_tile_run). */
size_t cpu_attn_score_floats(const struct model *m, int max_span) {
    size_t nq = 1;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const int g = m->cfg.layer[l].n_head / m->cfg.layer[l].n_head_kv;
        const size_t n = (size_t)attn_tile_rows(g) * (size_t)g;
        nq = n > nq ? n : nq;
    }
    return up16(nq * attn_max_cols(max_span));
}

struct attn_job {
    struct cpu_ctx *c;
    const struct attn_ops *ops;
    int layer;       /* the layer computing attention (its queries) */
    int kvl;         /* the layer whose cache it reads */
    int g, nkv, hd, hdv;
    int window;      /* sliding window (positions), 0 = none */
    int tile_rows;   /* rows per tile */
    int64_t total;   /* summed cost of all tiles (times nkv) */
    int n_tasks;
};

/* First position row r may see. */
static inline int attn_row_lo(const struct attn_job *J, int r) {
    const int pos = J->c->row_pos[r];
    const int lo = J->window > 0 ? pos - J->window + 1 : 0;
    return lo < 0 ? 0 : lo;
}

/* End (exclusive) of the tile that starts at row r0: at most tile_rows rows, one sequence. */
static int attn_tile_end_row(const struct attn_job *J, int r0) {
    const struct cpu_ctx *c = J->c;
    int r = r0 + 1;
    while (r < c->n_rows && r - r0 < J->tile_rows && c->row_seq[r] == c->row_seq[r0]) r++;
    return r;
}

/* Work estimate of one tile for one KV head: score + P.V work of every query vector plus the
 * conversion of the keys it spans. Causal rows cost in proportion to their visible keys. */
static int64_t attn_tile_cost(const struct attn_job *J, int r0, int r1) {
    int64_t cost = 0;
    int lo = INT32_MAX, hi = -1;
    for (int r = r0; r < r1; r++) {
        const int a = attn_row_lo(J, r), b = J->c->row_pos[r];
        cost += (int64_t)(b - a + 1 + ATTN_KGROUP) * J->g;
        lo = a < lo ? a : lo;
        hi = b > hi ? b : hi;
    }
    return cost + (hi - lo + 1) + 64;
}

/* A tile's working set in one thread's scratch (attn_setup lays it out). */
struct attn_view {
    struct attn_tile t;
    float *kb, *vb;   /* [ATTN_BLOCK][hd], [ATTN_BLOCK][hdv]: converted cache rows */
    int tlo, thi;     /* union of the rows' visible ranges */
};

/* Scratch layout for rows [r0, r1) x the g heads of KV head kvh; with `fill`, also the
 * queries and ranges (the split mode's helpers only use their own kb, vb and acc). */
static void attn_setup(const struct attn_job *J, int r0, int r1, int kvh, float *scr, int fill,
                       struct attn_view *v) {
    const struct cpu_ctx *c = J->c;
    const enum kvstore_dtype dt = c->kv->dtype;
    const int g = J->g, hd = J->hd, hdv = J->hdv, nh = g * J->nkv;
    const int R = r1 - r0, nq = R * g;

    float *qt = scr;                                        /* [nq][hd] */
    float *acc = qt + up16((size_t)nq * hd);                /* [nq][hdv] */
    v->kb = acc + up16((size_t)nq * hdv);                   /* [ATTN_BLOCK][hd] */
    v->vb = v->kb + up16((size_t)ATTN_BLOCK * hd);          /* [ATTN_BLOCK][hdv] */
    int32_t *lo = (int32_t *)(v->vb + up16((size_t)ATTN_BLOCK * hdv)); /* [R] */
    int32_t *hi = lo + up16((size_t)R);                     /* [R] */
    float *pm = (float *)(hi + up16((size_t)R));            /* [nq][ld_p] */

    int tlo = INT32_MAX, thi = -1;
    for (int i = 0; i < R; i++) {
        const int l = attn_row_lo(J, r0 + i), h = c->row_pos[r0 + i];
        tlo = l < tlo ? l : tlo;
        thi = h > thi ? h : thi;
        if (!fill) continue;
        lo[i] = l;
        hi[i] = h;
        const float *qrow = c->q + ((size_t)(r0 + i) * (size_t)nh + (size_t)kvh * g) * hd;
        float *dst = qt + (size_t)i * g * hd;
        /* llama.cpp multiplies Q by an F16 K in F16 (Q is rounded to half first) */
        if (dt == KVSTORE_F16)
            c->vec->round_f16(qrow, dst, g * hd);
        else
            memcpy(dst, qrow, (size_t)g * hd * sizeof(float));
    }
    const int p0 = tlo & ~(ATTN_BLOCK - 1);
    const int ld = (thi - p0 + ATTN_BLOCK) & ~(ATTN_BLOCK - 1);
    /* llama.cpp rounds the probabilities to the V cache's type (F16) for P.V */
    v->t = (struct attn_tile){R,  g,  hd,  hdv, c->m->cfg.attn_softcap, dt == KVSTORE_F16,
                              lo, hi, qt, acc, pm, p0, ld};
    v->tlo = tlo;
    v->thi = thi;
}

/* Bytes of the first e elements of a cache row segment (e a multiple of 32 for Q8_0). */
static inline size_t kv_seg_bytes(enum kvstore_dtype dt, int e) {
    return dt == KVSTORE_F16   ? (size_t)e * 2
           : dt == KVSTORE_F32 ? (size_t)e * 4
                               : (size_t)(e / QK8_0) * sizeof(struct block_q8_0);
}

/* Asks for elements [e0, e0 + w) of rows [b0, min(b0 + ATTN_BLOCK - 1, thi)] in L2 (a
 * software prefetch: no value changes). A decoding row reads its keys and values from DRAM
 * (the weights streamed since have evicted them), and the hardware prefetcher stops at every
 * 4 KiB page, 8 rows of an F16 cache with head_dim 256. Asked for one block ahead, the split
 * P.V pass of one decoding sequence took about half the time on a 2-core Zen 4 guest
 * (docs/BENCHMARKS.md). */
static void kv_prefetch_block(const struct kvstore_pool *p, int l, int is_v, const struct be_seq *s,
                              int b0, int thi, int e0, int w) {
    const size_t off = kv_seg_bytes(p->dtype, e0);
    const size_t len = kv_seg_bytes(p->dtype, e0 + w) - off;
    const size_t rb = is_v ? p->row_bytes_v[l] : p->row_bytes_k[l];
    const int j1 = thi < b0 + ATTN_BLOCK - 1 ? thi : b0 + ATTN_BLOCK - 1;
    /* rows consecutive in one cache block, as attn_pass reads them (see `same` there) */
    const int same = p->block_size % ATTN_BLOCK == 0;
    const char *first = (const char *)kv_row(p, l, is_v, s, b0) + off;
    for (int pos = b0; pos <= j1; pos++) {
        const char *row =
            same ? first + (size_t)(pos - b0) * rb : (const char *)kv_row(p, l, is_v, s, pos) + off;
        for (size_t o = 0; o < len; o += 64)
            __builtin_prefetch(row + o, 0, 2); /* locality 2: prefetcht1 on x86 */
    }
}

/* One pass over the key blocks [b_first, b_last] (absolute starts) of tile t: K rows and
 * `scores` (is_v = 0), or elements [d0, d0 + w) of the V rows and `pv` (t->hdv == w). */
static void attn_pass(const struct attn_job *J, const struct attn_tile *t, int r0, int kvh,
                      int tlo, int thi, int b_first, int b_last, int is_v, int d0, float *buf) {
    const struct kvstore_pool *p = J->c->kv;
    const enum kvstore_dtype dt = p->dtype;
    const struct be_seq *s = &J->c->seqs[J->c->row_seq[r0]];
    const int w = is_v ? t->hdv : t->hd, e0 = kvh * (is_v ? J->hdv : J->hd) + d0;
    const size_t rb = is_v ? p->row_bytes_v[J->kvl] : p->row_bytes_k[J->kvl];
    /* When the cache blocks hold whole attention blocks (block size a multiple of
     * ATTN_BLOCK, the usual case), the rows of [j0, j1] are consecutive in one cache block:
     * one address computation per attention block instead of one per row. */
    const int same = p->block_size % ATTN_BLOCK == 0;
    for (int b0 = b_first; b0 <= b_last; b0 += ATTN_BLOCK) {
        const int j0 = tlo > b0 ? tlo - b0 : 0;
        const int j1 = thi < b0 + ATTN_BLOCK - 1 ? thi - b0 : ATTN_BLOCK - 1;
        const uint8_t *r0p = same ? kv_row(p, J->kvl, is_v, s, b0 + j0) : NULL;
        if (b0 + ATTN_BLOCK <= b_last)
            kv_prefetch_block(p, J->kvl, is_v, s, b0 + ATTN_BLOCK, thi, e0, w);
        for (int j = j0; j <= j1; j++) {
            const uint8_t *row =
                same ? r0p + (size_t)(j - j0) * rb : kv_row(p, J->kvl, is_v, s, b0 + j);
            float *d = buf + (size_t)j * w;
            if (dt == KVSTORE_F16)
                J->ops->cvt_f16((const uint16_t *)row + (size_t)e0, d, w);
            else
                load_seg(J->c->vec, dt, row, e0, d, w);
        }
        const struct attn_block blk = {b0, buf};
        if (is_v) {
            J->ops->pv(t, &blk);
            continue;
        }
        /* Keys the SIMD kernels may read for group alignment but nobody sees: finite. */
        const int g0 = j0 & ~(ATTN_KGROUP - 1), g1 = j1 | (ATTN_KGROUP - 1);
        if (g0 < j0) memset(buf + (size_t)g0 * w, 0, (size_t)(j0 - g0) * w * sizeof(float));
        if (g1 > j1) memset(buf + (size_t)(j1 + 1) * w, 0, (size_t)(g1 - j1) * w * sizeof(float));
        J->ops->scores(t, &blk);
    }
}

/* Rows [r0, r1) (one sequence) x the g heads of KV head kvh, with the scores in scratch. */
static void attn_subtile(const struct attn_job *J, int r0, int r1, int kvh, float *scr) {
    const int nh = J->g * J->nkv;
    struct attn_view v;
    attn_setup(J, r0, r1, kvh, scr, 1, &v);
    attn_tile_begin(&v.t);
    const int last = v.thi & ~(ATTN_BLOCK - 1);
    attn_pass(J, &v.t, r0, kvh, v.tlo, v.thi, v.t.p0, last, 0, 0, v.kb);
    attn_tile_softmax(J->ops, &v.t);
    attn_pass(J, &v.t, r0, kvh, v.tlo, v.thi, v.t.p0, last, 1, 0, v.vb);
    attn_tile_end(&v.t, J->c->att + ((size_t)r0 * nh + (size_t)kvh * J->g) * J->hdv,
                  (size_t)nh * J->hdv);
}

/* Split mode: one tile over the whole pool (a sequence decoding alone would otherwise leave
 * all threads but one idle). Task t scores its share of the key blocks into the shared
 * score matrix (each score computed once, as in attn_subtile); the calling thread runs the
 * softmax; then task t accumulates its share of the output elements over all keys (each
 * element's chain over the keys unchanged). Same bits as attn_subtile. */
struct attn_split {
    const struct attn_job *J;
    int r0, r1, kvh;
    struct attn_view shared; /* in the calling thread's scratch */
    int n_blocks;            /* key blocks of the tile */
};

static float *attn_thread_scratch(const struct cpu_ctx *c) {
    return c->attn_scratch + (size_t)pool_thread_index() * c->attn_stride;
}

static void attn_split_scores(void *arg, int task, int n_tasks) {
    const struct attn_split *S = arg;
    const struct attn_view *sv = &S->shared;
    struct attn_view own;
    attn_setup(S->J, S->r0, S->r1, S->kvh, attn_thread_scratch(S->J->c), 0, &own);
    const int k0 = (int)((int64_t)S->n_blocks * task / n_tasks);
    const int k1 = (int)((int64_t)S->n_blocks * (task + 1) / n_tasks);
    const int b_first = sv->t.p0 + k0 * ATTN_BLOCK, b_last = sv->t.p0 + k1 * ATTN_BLOCK - 1;
    attn_pass(S->J, &sv->t, S->r0, S->kvh, sv->tlo, sv->thi, b_first, b_last, 0, 0, own.kb);
}

static void attn_split_pv(void *arg, int task, int n_tasks) {
    const struct attn_split *S = arg;
    const struct attn_job *J = S->J;
    const struct attn_view *sv = &S->shared;
    struct attn_view own;
    attn_setup(J, S->r0, S->r1, S->kvh, attn_thread_scratch(J->c), 0, &own);
    /* elements in whole 32s (a Q8_0 cache row dequantizes by blocks of 32) */
    const int n32 = J->hdv / 32;
    const int d0 = 32 * (int)((int64_t)n32 * task / n_tasks);
    const int d1 = task == n_tasks - 1 ? J->hdv : 32 * (int)((int64_t)n32 * (task + 1) / n_tasks);
    if (d1 <= d0) return;
    struct attn_tile t = sv->t;
    t.hdv = d1 - d0;
    t.acc = own.t.acc;
    attn_tile_begin(&t);
    attn_pass(J, &t, S->r0, S->kvh, sv->tlo, sv->thi, t.p0, sv->thi & ~(ATTN_BLOCK - 1), 1, d0,
              own.vb);
    const int nh = J->g * J->nkv;
    for (int r = 0; r < t.n_rows; r++)
        for (int h = 0; h < t.g; h++)
            memcpy(J->c->att + ((size_t)(S->r0 + r) * nh + (size_t)S->kvh * J->g + h) * J->hdv + d0,
                   t.acc + ((size_t)r * t.g + h) * (size_t)t.hdv, (size_t)t.hdv * sizeof(float));
}

static void attn_tile_split(const struct attn_job *J, int r0, int r1, int kvh) {
    struct attn_split S = {.J = J, .r0 = r0, .r1 = r1, .kvh = kvh};
    attn_setup(J, r0, r1, kvh, J->c->attn_scratch, 1, &S.shared); /* thread 0's scratch */
    S.n_blocks = ((S.shared.thi & ~(ATTN_BLOCK - 1)) - S.shared.t.p0) / ATTN_BLOCK + 1;
    const int n = pool_size(J->c->pool);
    pool_run(J->c->pool, attn_split_scores, &S, S.n_blocks < n ? S.n_blocks : n);
    attn_tile_softmax(J->ops, &S.shared.t);
    const int n32 = J->hdv / 32 > 0 ? J->hdv / 32 : 1;
    pool_run(J->c->pool, attn_split_pv, &S, n32 < n ? n32 : n);
}

/* Rows of tile [r0, r1) whose scores the scratch holds at once: the whole tile, or fewer
 * (at least one row, see cpu_attn_score_floats) when its rows' union span is long. */
static int attn_tile_step(const struct attn_job *J, int r0, int r1) {
    const int span = J->c->row_pos[r1 - 1] - attn_row_lo(J, r0) + 1;
    const size_t per_row = (size_t)J->g * attn_max_cols(span);
    const int step = (int)(J->c->attn_score_floats / per_row);
    return step < 1 ? 1 : step > r1 - r0 ? r1 - r0 : step;
}

/* Whether every tile of the step runs whole, as the split mode needs. */
static int attn_split_fits(const struct attn_job *J) {
    for (int r0 = 0; r0 < J->c->n_rows;) {
        const int r1 = attn_tile_end_row(J, r0);
        if (attn_tile_step(J, r0, r1) < r1 - r0) return 0;
        r0 = r1;
    }
    return 1;
}

/* One tile: rows [r0, r1) of one sequence x the g heads of KV head kvh, attn_tile_step rows
 * at a time. */
static void attn_tile_run(const struct attn_job *J, int r0, int r1, int kvh, float *scr) {
    const int step = attn_tile_step(J, r0, r1);
    for (int r = r0; r < r1; r += step) attn_subtile(J, r, r + step < r1 ? r + step : r1, kvh, scr);
}

/* Task `task` runs the tiles whose cost midpoint falls in its share of the total, so pieces
 * are balanced by work (later causal rows see more keys), not by row count. Every task
 * walks the (cheap) tile list; the pool hands tasks out dynamically. */
static void attn_task(void *arg, int task, int n_tasks) {
    const struct attn_job *J = arg;
    const struct cpu_ctx *c = J->c;
    float *scr = attn_thread_scratch(J->c);
    int64_t cum = 0;
    for (int r0 = 0; r0 < c->n_rows;) {
        const int r1 = attn_tile_end_row(J, r0);
        const int64_t cost = attn_tile_cost(J, r0, r1);
        for (int kvh = 0; kvh < J->nkv; kvh++) {
            const int64_t mid = cum + cost / 2;
            const int owner = (int)(mid * n_tasks / J->total);
            if (owner == task) attn_tile_run(J, r0, r1, kvh, scr);
            cum += cost;
        }
        r0 = r1;
    }
}

/* att[r][h*hd_v..] = softmax(q·K^T) V over the positions row r may see. */
void cpu_attention(struct cpu_ctx *c, int layer) {
    const struct model *m = c->m;
    const struct model_layer_cfg *lc = &m->cfg.layer[layer];
    struct attn_job J = {0};
    J.c = c;
    J.ops = attn_ops_for(kern_active_isa());
    J.layer = layer;
    J.kvl = lc->kv_layer;
    J.nkv = lc->n_head_kv;
    J.g = lc->n_head / lc->n_head_kv;
    J.hd = lc->head_dim;
    J.hdv = lc->head_dim_v;
    J.window = lc->sliding && m->cfg.sliding_window > 0 ? m->cfg.sliding_window : 0;
    J.tile_rows = attn_tile_rows(J.g);
    int n_tiles = 0;
    for (int r0 = 0; r0 < c->n_rows;) {
        const int r1 = attn_tile_end_row(&J, r0);
        J.total += attn_tile_cost(&J, r0, r1) * J.nkv;
        n_tiles += J.nkv;
        r0 = r1;
    }
    if (n_tiles == 0) return;
    if (n_tiles < pool_size(c->pool) && attn_split_fits(&J)) {
        for (int r0 = 0; r0 < c->n_rows;) {
            const int r1 = attn_tile_end_row(&J, r0);
            for (int kvh = 0; kvh < J.nkv; kvh++) attn_tile_split(&J, r0, r1, kvh);
            r0 = r1;
        }
        return;
    }
    J.n_tasks = c->attn_chunks < n_tiles ? c->attn_chunks : n_tiles;
    pool_run(c->pool, attn_task, &J, J.n_tasks);
}
