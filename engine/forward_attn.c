/*
 * forward_attn — RoPE, K/V cache writes and attention for the CPU forward pass.
 *
 * Attention runs per (row, KV head): the query heads that share that KV head walk the
 * visible positions once, in ascending order, with an online softmax, so there is never a
 * score matrix and the result for a row depends only on its query and the cache contents.
 * Keys and values are always read back from the cache (also those written in this very
 * step), so a prompt cut into chunks sees exactly the same (rounded) keys as a whole one.
 */
#include <math.h>
#include <string.h>

#include "engine/forward_int.h"
#include "engine/kernels/quant.h"
#include "engine/model.h"


/* ---- RoPE ---- */

static int rope_equal(const struct fwd_rope *a, const struct fwd_rope *b) {
    return a->base == b->base && a->scale == b->scale && a->n_rot == b->n_rot &&
           a->freqs == b->freqs;
}

/* Finds the distinct RoPE configurations of the model (usually two: local and global).
 * Returns -1 when there are more than FWD_MAX_ROPE. */
int fwd_rope_init(struct fwd_ctx *c) {
    const struct model *m = c->m;
    c->max_rot = 0;
    c->n_rope = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const struct model_layer_cfg *lc = &m->cfg.layer[l];
        struct fwd_rope r = {lc->rope_base, lc->rope_scale, lc->n_rot, m->layer[l].rope_freqs};
        int ci;
        for (ci = 0; ci < c->n_rope; ci++)
            if (rope_equal(&c->rope[ci], &r)) break;
        if (ci == c->n_rope) {
            if (c->n_rope == FWD_MAX_ROPE) return -1;
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
void fwd_rope_prepare(struct fwd_ctx *c) {
    const int T = c->n_rows;
    for (int ci = 0; ci < c->n_rope; ci++) {
        const struct fwd_rope *r = &c->rope[ci];
        const float theta_scale = powf(r->base, -2.0f / (float)r->n_rot);
        for (int row = 0; row < T; row++) {
            float *cs = c->rope_cs + ((size_t)ci * (size_t)c->o.max_tokens + (size_t)row) *
                                         (size_t)c->max_rot;
            float theta = (float)c->row_pos[row];
            for (int i0 = 0; i0 < r->n_rot; i0 += 2) {
                const float ff = r->freqs ? r->freqs[i0 / 2] : 1.0f;
                const float th = r->scale * (theta / ff);
                cs[i0] = cosf(th);
                cs[i0 + 1] = sinf(th);
                theta *= theta_scale;
            }
        }
    }
}

/* NEOX rotation of the first n_rot dims of every head of every row: pairs (i, i + n_rot/2). */
void fwd_rope_apply(const struct fwd_ctx *c, int layer, float *x, int n_heads, int hd) {
    const int ci = c->layer_rope[layer];
    const int n_rot = c->rope[ci].n_rot, half = n_rot / 2;
    for (int row = 0; row < c->n_rows; row++) {
        const float *cs = c->rope_cs + ((size_t)ci * (size_t)c->o.max_tokens + (size_t)row) *
                                           (size_t)c->max_rot;
        for (int h = 0; h < n_heads; h++) {
            float *v = x + ((size_t)row * (size_t)n_heads + (size_t)h) * (size_t)hd;
            for (int i = 0; i < half; i++) {
                const float co = cs[2 * i], si = cs[2 * i + 1];
                const float x0 = v[i], x1 = v[i + half];
                v[i] = x0 * co - x1 * si;
                v[i + half] = x0 * si + x1 * co;
            }
        }
    }
}

/* ---- KV cache ---- */

static inline uint8_t *kv_row(const struct kvs_pool *p, int l, int is_v, const struct kvs_seq *s,
                              int pos) {
    const int bs = p->block_size;
    const int blk = pos / bs;
    const int32_t id = p->cls[l] == KVS_FULL ? s->full[blk] : s->swa[blk % s->n_swa];
    const uint8_t *base = is_v ? p->v_base[l] + (size_t)id * p->v_block_stride[l]
                               : p->k_base[l] + (size_t)id * p->k_block_stride[l];
    const size_t rb = is_v ? p->row_bytes_v[l] : p->row_bytes_k[l];
    return (uint8_t *)base + (size_t)(pos % bs) * rb;
}

static void store_row(enum kvs_dtype dt, const float *x, uint8_t *dst, int n) {
    switch (dt) {
    case KVS_F16: {
        uint16_t *d = (uint16_t *)dst;
        for (int i = 0; i < n; i++) d[i] = f2h(x[i]);
        break;
    }
    case KVS_F32: memcpy(dst, x, (size_t)n * sizeof(float)); break;
    case KVS_Q8_0: quant_q8_0_row_ref(x, dst, n); break;
    }
}

/* One head segment (n elements starting at element e0 of the row) to f32. */
static void load_seg(enum kvs_dtype dt, const uint8_t *row, int e0, float *dst, int n) {
    switch (dt) {
    case KVS_F16: {
        const uint16_t *s = (const uint16_t *)row + e0;
        int i = 0;
#if defined(__F16C__) && defined(__AVX__)
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
#endif
        for (; i < n; i++) dst[i] = h2f(s[i]);
        break;
    }
    case KVS_F32: memcpy(dst, (const float *)row + e0, (size_t)n * sizeof(float)); break;
    case KVS_Q8_0:
        quant_dequant_q8_0_ref(row + (size_t)(e0 / QK8_0) * sizeof(struct block_q8_0), dst, n);
        break;
    }
}

/* Writes this step's K and V rows of a layer that owns its cache. */
void fwd_kv_write(struct fwd_ctx *c, int layer) {
    const struct kvs_pool *p = c->kv;
    const struct model_layer_cfg *lc = &c->m->cfg.layer[layer];
    const int nk = lc->n_head_kv * lc->head_dim, nv = lc->n_head_kv * lc->head_dim_v;
    const int hd = lc->head_dim, hdv = lc->head_dim_v;
    for (int r = 0; r < c->n_rows; r++) {
        const struct kvs_seq *s = c->seqs[c->row_seq[r]].kv;
        const int pos = c->row_pos[r];
        uint8_t *kd = kv_row(p, layer, 0, s, pos), *vd = kv_row(p, layer, 1, s, pos);
        if (p->dtype == KVS_Q8_0) { /* per head: blocks never straddle heads */
            for (int h = 0; h < lc->n_head_kv; h++) {
                store_row(p->dtype, c->k + (size_t)r * nk + (size_t)h * hd,
                          kd + (size_t)h * (p->row_bytes_k[layer] / (size_t)lc->n_head_kv), hd);
                store_row(p->dtype, c->v + (size_t)r * nv + (size_t)h * hdv,
                          vd + (size_t)h * (p->row_bytes_v[layer] / (size_t)lc->n_head_kv), hdv);
            }
        } else {
            store_row(p->dtype, c->k + (size_t)r * nk, kd, nk);
            store_row(p->dtype, c->v + (size_t)r * nv, vd, nv);
        }
    }
}

/* ---- attention ---- */

size_t fwd_attn_scratch_floats(const struct model *m) {
    size_t mx = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const struct model_layer_cfg *lc = &m->cfg.layer[l];
        size_t g = (size_t)(lc->n_head / lc->n_head_kv);
        size_t n = g * (size_t)lc->head_dim + (size_t)lc->head_dim + (size_t)lc->head_dim_v +
                   g * (size_t)lc->head_dim_v + 2 * g + 16;
        if (n > mx) mx = n;
    }
    return (mx + 15) & ~(size_t)15;
}

/* Fixed-order dot product (8 partial sums), so a row's scores never depend on the batch. */
static inline float dot(const float *a, const float *b, int n) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

struct attn_job {
    struct fwd_ctx *c;
    int layer;      /* the layer computing attention (its queries) */
    int kvl;        /* the layer whose cache it reads */
    int units;      /* n_rows * n_head_kv */
};

static void attn_unit(const struct attn_job *J, int unit, float *scr) {
    struct fwd_ctx *c = J->c;
    const struct model *m = c->m;
    const struct model_layer_cfg *lc = &m->cfg.layer[J->layer];
    const struct kvs_pool *p = c->kv;
    const enum kvs_dtype dt = p->dtype;
    const int nkv = lc->n_head_kv, g = lc->n_head / nkv;
    const int hd = lc->head_dim, hdv = lc->head_dim_v;
    const int r = unit / nkv, kvh = unit % nkv;
    const int pos = c->row_pos[r];
    const struct kvs_seq *s = c->seqs[c->row_seq[r]].kv;
    const float cap = m->cfg.attn_softcap;

    float *qg = scr;                          /* [g][hd] */
    float *kf = qg + (size_t)g * hd;          /* [hd] */
    float *vf = kf + hd;                      /* [hd_v] */
    float *acc = vf + hdv;                    /* [g][hd_v] */
    float *mx = acc + (size_t)g * hdv;        /* [g] running max */
    float *sum = mx + g;                      /* [g] running denominator */

    const float *qrow = c->q + (size_t)r * (size_t)lc->n_head * (size_t)hd;
    for (int j = 0; j < g; j++) {
        const float *src = qrow + (size_t)(kvh * g + j) * (size_t)hd;
        float *dst = qg + (size_t)j * hd;
        /* llama.cpp multiplies Q by an F16 K in F16 (Q is rounded to half first) */
        if (dt == KVS_F16)
            for (int d = 0; d < hd; d++) dst[d] = h2f(f2h(src[d]));
        else
            memcpy(dst, src, (size_t)hd * sizeof(float));
        mx[j] = -INFINITY;
        sum[j] = 0.0f;
    }
    memset(acc, 0, (size_t)g * (size_t)hdv * sizeof(float));

    int j0 = 0;
    if (lc->sliding && m->cfg.sliding_window > 0) {
        j0 = pos - m->cfg.sliding_window + 1;
        if (j0 < 0) j0 = 0;
    }
    for (int jp = j0; jp <= pos; jp++) {
        load_seg(dt, kv_row(p, J->kvl, 0, s, jp), kvh * hd, kf, hd);
        load_seg(dt, kv_row(p, J->kvl, 1, s, jp), kvh * hdv, vf, hdv);
        for (int j = 0; j < g; j++) {
            float sc = dot(qg + (size_t)j * hd, kf, hd);
            if (cap > 0.0f) sc = cap * tanhf(sc * (1.0f / cap));
            float *a = acc + (size_t)j * hdv;
            if (sc > mx[j]) {
                const float corr = expf(mx[j] - sc); /* 0 on the first position */
                sum[j] *= corr;
                for (int d = 0; d < hdv; d++) a[d] *= corr;
                mx[j] = sc;
            }
            const float pr = expf(sc - mx[j]);
            sum[j] += pr;
            for (int d = 0; d < hdv; d++) a[d] += pr * vf[d];
        }
    }
    float *orow = c->att + (size_t)r * (size_t)lc->n_head * (size_t)hdv;
    for (int j = 0; j < g; j++) {
        const float inv = 1.0f / sum[j];
        float *dst = orow + (size_t)(kvh * g + j) * (size_t)hdv;
        const float *a = acc + (size_t)j * hdv;
        for (int d = 0; d < hdv; d++) dst[d] = a[d] * inv;
    }
}

static void attn_task(void *arg, int task, int n_tasks) {
    const struct attn_job *J = arg;
    const int u0 = (int)((int64_t)J->units * task / n_tasks);
    const int u1 = (int)((int64_t)J->units * (task + 1) / n_tasks);
    float *scr = J->c->attn_scratch + (size_t)task * J->c->attn_stride;
    for (int u = u0; u < u1; u++) attn_unit(J, u, scr);
}

/* att[r][h*hd_v..] = softmax(q·K^T) V over the positions row r may see. */
void fwd_attention(struct fwd_ctx *c, int layer) {
    const struct model_layer_cfg *lc = &c->m->cfg.layer[layer];
    struct attn_job J = {c, layer, lc->kv_layer, c->n_rows * lc->n_head_kv};
    int n = c->attn_chunks < J.units ? c->attn_chunks : J.units;
    pool_run(c->pool, attn_task, &J, n);
}
