/*
 * sample — sampling of one token from one logits row. See sample.h for the order of
 * operations and the determinism rules.
 */
#define _GNU_SOURCE /* qsort_r */
#include "scheduler/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SMP_BUCKETS 1024
#define SMP_SPAN 24.0f
#define SMP_DRAW_BLOCK 256 /* ids per block mass in the draw (a multiple of 16) */ /* logits further than this below the max share the last bucket */

struct smp_ctx {
    int n_vocab;
    int32_t *idx;   /* [n_vocab] candidate ids */
    int32_t *cnt;   /* [n_vocab] output-token counts; all zero between calls */
    uint8_t *seen;  /* [n_vocab] prompt+output membership; all zero between calls */
    float *val;     /* [n_vocab] unnormalised probabilities of kept ids (0 = dropped) */
    uint16_t *bucket; /* [n_vocab] top_p logit bucket */
    double *mass;   /* [SMP_BUCKETS + 1] top_p bucket masses */
    double *blk;    /* [n_vocab / SMP_DRAW_BLOCK + 1] kept mass per draw block */
};

/* ---- RNG ---------------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void smp_rng_seed(struct smp_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t smp_rng_next(struct smp_rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double smp_rng_uniform(struct smp_rng *r) { return (double)(smp_rng_next(r) >> 11) * 0x1p-53; }

/* ---- context ------------------------------------------------------------------------ */

int smp_ctx_create(int n_vocab, struct smp_ctx **out) {
    *out = NULL;
    if (n_vocab < 1) return -1;
    struct smp_ctx *c = calloc(1, sizeof(*c));
    if (!c) return -1;
    c->n_vocab = n_vocab;
    c->idx = malloc((size_t)n_vocab * sizeof(int32_t));
    c->cnt = calloc((size_t)n_vocab, sizeof(int32_t));
    c->seen = calloc((size_t)n_vocab, 1);
    c->val = malloc((size_t)n_vocab * sizeof(float));
    c->bucket = malloc((size_t)n_vocab * sizeof(uint16_t));
    c->mass = malloc((SMP_BUCKETS + 1) * sizeof(double));
    c->blk = malloc(((size_t)n_vocab / SMP_DRAW_BLOCK + 1) * sizeof(double));
    if (!c->idx || !c->cnt || !c->seen || !c->val || !c->bucket || !c->mass || !c->blk) {
        smp_ctx_destroy(c);
        return -1;
    }
    *out = c;
    return 0;
}

void smp_ctx_destroy(struct smp_ctx *c) {
    if (!c) return;
    free(c->idx);
    free(c->cnt);
    free(c->seen);
    free(c->val);
    free(c->bucket);
    free(c->mass);
    free(c->blk);
    free(c);
}

/* ---- ordering helpers --------------------------------------------------------------- */

/* Total order: higher logit first, then lower id. */
static int better(const float *l, int32_t a, int32_t b) {
    return l[a] > l[b] || (l[a] == l[b] && a < b);
}

static int cmp_desc(const void *pa, const void *pb, void *ctx) {
    const float *l = ctx;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    if (a == b) return 0;
    return better(l, a, b) ? -1 : 1;
}

static uint16_t bucket_of(float v, float m) {
    float d = (m - v) * (SMP_BUCKETS / SMP_SPAN);
    return d >= SMP_BUCKETS ? SMP_BUCKETS : (uint16_t)d;
}

static void swap32(int32_t *a, int32_t *b) {
    int32_t t = *a;
    *a = *b;
    *b = t;
}

/* Rearrange idx[0..n) so that its first k entries are the k best (in any order). */
static void select_top(const float *l, int32_t *idx, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi && k > lo && k <= hi) {
        /* Median-of-three pivot, moved to hi. */
        int mid = lo + (hi - lo) / 2;
        if (better(l, idx[mid], idx[lo])) swap32(&idx[mid], &idx[lo]);
        if (better(l, idx[hi], idx[lo])) swap32(&idx[hi], &idx[lo]);
        if (better(l, idx[mid], idx[hi])) swap32(&idx[mid], &idx[hi]);
        int32_t pivot = idx[hi];
        int store = lo;
        for (int i = lo; i < hi; i++)
            if (better(l, idx[i], pivot)) swap32(&idx[i], &idx[store++]);
        swap32(&idx[store], &idx[hi]);
        if (store == k) return;
        if (store < k) lo = store + 1;
        else hi = store - 1;
    }
}

/* ---- penalties ---------------------------------------------------------------------- */

static void apply_penalties(struct smp_ctx *c, const struct sched_sampling *sp, float *l,
                            const int32_t *hist, int n_hist, int n_out) {
    int rep = sp->repetition_penalty > 0 && sp->repetition_penalty != 1.0f;
    int of = sp->presence_penalty != 0 || sp->frequency_penalty != 0;
    int nv = c->n_vocab;
    if (rep) {
        /* llama.cpp: divide positive logits, multiply negative ones, once per distinct id. */
        for (int i = 0; i < n_hist; i++) {
            int32_t t = hist[i];
            if (t < 0 || t >= nv || c->seen[t]) continue;
            c->seen[t] = 1;
            l[t] = l[t] > 0 ? l[t] / sp->repetition_penalty : l[t] * sp->repetition_penalty;
        }
        for (int i = 0; i < n_hist; i++)
            if (hist[i] >= 0 && hist[i] < nv) c->seen[hist[i]] = 0;
    }
    if (of) {
        /* OpenAI: logit -= count * frequency_penalty + (count > 0) * presence_penalty. */
        const int32_t *out = hist + (n_hist - n_out);
        for (int i = 0; i < n_out; i++)
            if (out[i] >= 0 && out[i] < nv) c->cnt[out[i]]++;
        for (int i = 0; i < n_out; i++) {
            int32_t t = out[i];
            if (t < 0 || t >= nv || c->cnt[t] == 0) continue;
            l[t] -= (float)c->cnt[t] * sp->frequency_penalty + sp->presence_penalty;
            c->cnt[t] = 0;
        }
    }
}

/* The last token of the shortest best-first prefix whose mass reaches top_p * z. Masses
 * e[] (0 = excluded) are bucketed by logit so that only the boundary bucket is sorted. l and
 * e hold nv entries: the whole row, or the candidates in id order (then the result is a
 * position among them: positions order like the ids, so ties break the same way). */
static int32_t top_p_cut(struct smp_ctx *c, const float *l, float m, const float *e, double z,
                         float top_p, int nv) {
    double *mass = c->mass, target = (double)top_p * z;
    memset(mass, 0, (SMP_BUCKETS + 1) * sizeof(double));
    for (int i = 0; i < nv; i++) {
        if (e[i] == 0) continue;
        c->bucket[i] = bucket_of(l[i], m);
        mass[c->bucket[i]] += e[i];
    }
    double acc = 0;
    int b = 0;
    for (; b < SMP_BUCKETS; b++) {
        if (acc + mass[b] >= target) break;
        acc += mass[b];
    }
    int n = 0;
    for (int i = 0; i < nv; i++)
        if (e[i] > 0 && c->bucket[i] == b) c->idx[n++] = i;
    if (n == 0) return -1;
    qsort_r(c->idx, (size_t)n, sizeof(int32_t), cmp_desc, (void *)l);
    for (int i = 0; i < n; i++) {
        acc += e[c->idx[i]];
        if (acc >= target) return c->idx[i];
    }
    return c->idx[n - 1];
}

/* ---- sampling ----------------------------------------------------------------------- */

/* e^x for x <= 0, 0 below -87 (and for -inf): Cephes' expf range reduction and degree-6
 * polynomial, within 2 ulp of expf. The scalar form and the 16-lane form (GNU C vector
 * extensions, so the compiler emits SIMD for whatever the target has) do the same float
 * operations, so an id's value does not depend on which form computed it. expf itself is a
 * library call per id: ~1.2 ms per 262k-id step. Rounding to an integer uses the 1.5 * 2^23
 * trick (round to nearest even), which also yields n's bits. */
#define SMP_EXP_MAGIC 12582912.0f /* 1.5 * 2^23 */
#define SMP_EXP_P(p, r)                                                                  \
    do {                                                                                 \
        p = p * (r) + 1.3981999507e-3f;                                                  \
        p = p * (r) + 8.3334519073e-3f;                                                  \
        p = p * (r) + 4.1665795894e-2f;                                                  \
        p = p * (r) + 1.6666665459e-1f;                                                  \
        p = p * (r) + 5.0000001201e-1f;                                                  \
        p = p * ((r) * (r)) + (r) + 1.0f;                                                \
    } while (0)

static inline __attribute__((always_inline)) float exp_le0(float x) {
    const int under = x < -87.0f;
    x = under ? -87.0f : x;
    const float t = x * 1.44269504088896341f + SMP_EXP_MAGIC;
    const float fx = t - SMP_EXP_MAGIC;
    const float r = x - fx * 0.693359375f + fx * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    SMP_EXP_P(p, r);
    int32_t tb, mb;
    const float magic = SMP_EXP_MAGIC;
    memcpy(&tb, &t, 4);
    memcpy(&mb, &magic, 4);
    const uint32_t bits = (uint32_t)(tb - mb + 127) << 23; /* n in [-126, 0] */
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return under ? 0.0f : p * two_n;
}

typedef float smp_v16f __attribute__((vector_size(64)));
typedef int32_t smp_v16i __attribute__((vector_size(64)));

/* *out = e^x lane by lane (by pointer: no vector-typed arguments or returns, whose ABI
 * depends on the instruction set the file is built for). */
static inline __attribute__((always_inline)) void exp_le0_v(const smp_v16f *xp, smp_v16f *out) {
    smp_v16f x = *xp;
    const smp_v16f lo = (smp_v16f){0} - 87.0f;
    const smp_v16i under = x < lo;
    x = (smp_v16f)(((smp_v16i)x & ~under) | ((smp_v16i)lo & under));
    const smp_v16f magic = (smp_v16f){0} + SMP_EXP_MAGIC;
    const smp_v16f t = x * 1.44269504088896341f + magic;
    const smp_v16f fx = t - magic;
    const smp_v16f r = x - fx * 0.693359375f + fx * 2.12194440e-4f;
    smp_v16f p = (smp_v16f){0} + 1.9875691500e-4f;
    SMP_EXP_P(p, r);
    const smp_v16i bits = ((smp_v16i)t - (smp_v16i)magic + 127) << 23;
    const smp_v16f y = p * (smp_v16f)bits;
    *out = (smp_v16f)((smp_v16i)y & ~under);
}

float smp_exp_le0(float x) {
    return exp_le0(x);
}

#define SMP_LANES 16

/* l[i] *= inv_t for all i; returns the maximum (NaNs never win). */
static float scale_max(float *l, int n, float inv_t) {
    float m16[SMP_LANES];
    for (int j = 0; j < SMP_LANES; j++) m16[j] = -INFINITY;
    int i = 0;
    for (; i + SMP_LANES <= n; i += SMP_LANES)
        for (int j = 0; j < SMP_LANES; j++) {
            const float v = l[i + j] * inv_t;
            l[i + j] = v;
            m16[j] = v > m16[j] ? v : m16[j];
        }
    float m = -INFINITY;
    for (int j = 0; j < SMP_LANES; j++) m = m16[j] > m ? m16[j] : m;
    for (; i < n; i++) {
        l[i] *= inv_t;
        m = l[i] > m ? l[i] : m;
    }
    return m;
}

/* e[i] = e^(l[i] - m) for all i (e may be NULL: sum only); returns the sum (16 vector
 * lanes, then double). */
static double exp_all(const float *l, float *e, int n, float m) {
    smp_v16f zv = {0};
    int i = 0;
    for (; i + SMP_LANES <= n; i += SMP_LANES) {
        smp_v16f x, v;
        memcpy(&x, l + i, sizeof x);
        x -= m;
        exp_le0_v(&x, &v);
        if (e) memcpy(e + i, &v, sizeof v);
        zv += v;
    }
    double z = 0;
    for (int j = 0; j < SMP_LANES; j++) z += zv[j];
    for (; i < n; i++) {
        const float v = exp_le0(l[i] - m);
        if (e) e[i] = v;
        z += v;
    }
    return z;
}

/* The first index of the largest value (NaNs never win; 0 when nothing beats -inf). Two
 * passes: the maximum in 16 independent lanes (the compiler turns them into vector max
 * instructions, `x > m ? x : m` is exactly maxps), then the first index holding it. The
 * plain compare-and-branch loop cost ~1 ns per id, 0.26 ms per token on a 262k vocabulary,
 * paid serially on the scheduler thread for every sequence of a step. */
int32_t smp_argmax(const float *l, int n) {
    float m16[16];
    for (int j = 0; j < 16; j++) m16[j] = -INFINITY;
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) m16[j] = l[i + j] > m16[j] ? l[i + j] : m16[j];
    float m = -INFINITY;
    for (int j = 0; j < 16; j++) m = m16[j] > m ? m16[j] : m;
    for (; i < n; i++) m = l[i] > m ? l[i] : m;
    if (m == -INFINITY) return 0;
    for (i = 0; i < n; i++)
        if (l[i] == m) return i;
    return 0;
}

/* smp_sample's keep test: l > lc, or l == lc and position i <= ci; and l >= floor_l. */
static inline __attribute__((always_inline)) int kept(float lv, float lc, int i, int ci,
                                                      float floor_l) {
    return (lv > lc || (lv == lc && i <= ci)) && lv >= floor_l;
}

/* The 16 lane sums of a draw block, added in double in lane order. */
static double lanes_sum(const float *z16) {
    double bm = 0;
    for (int j = 0; j < SMP_LANES; j++) bm += z16[j];
    return bm;
}

/* min_p: keep p >= min_p * p_max, i.e. logit >= m + log(min_p). */
static float min_p_floor(const struct sched_sampling *sp, float m) {
    return sp->min_p > 0 && sp->min_p <= 1 ? m + logf(sp->min_p) : -INFINITY;
}

/* The draw: walks the segments' masses, then one segment's kept entries (e > 0) in order,
 * until the mass passed reaches r. Dense (id, seg0, segb NULL): segment s is draw block s,
 * positions [s * SMP_DRAW_BLOCK, ...) of the n = n_vocab ids. Sparse: segment s holds
 * positions [seg0[s], seg0[s + 1]) of id[], all in draw block segb[s]. Returns the id, or -1
 * when nothing has mass. */
static int32_t draw_walk(const struct smp_ctx *c, double r, const float *e, const int32_t *id,
                         int n, const int32_t *seg0, const int32_t *segb, const double *mass,
                         int n_seg) {
    const int nblk = (c->n_vocab + SMP_DRAW_BLOCK - 1) / SMP_DRAW_BLOCK;
    double acc = 0;
    int pick = -1;
    for (int s = 0; s < n_seg && pick < 0; s++) {
        if (mass[s] == 0) continue;
        const int last_blk = (segb ? segb[s] : s) == nblk - 1;
        if (acc + mass[s] <= r && !last_blk) {
            acc += mass[s];
            continue;
        }
        const int p0 = seg0 ? seg0[s] : s * SMP_DRAW_BLOCK;
        const int p1 = seg0 ? seg0[s + 1] : (p0 + SMP_DRAW_BLOCK < n ? p0 + SMP_DRAW_BLOCK : n);
        for (int p = p0; p < p1; p++) {
            if (e[p] == 0) continue;
            acc += e[p];
            pick = p;
            if (acc > r) break;
        }
        if (acc <= r && !last_blk) pick = -1; /* rounding: the block fell short, go on */
    }
    if (pick < 0) /* rounding left r beyond the last mass: the last kept id */
        for (int p = n - 1; p >= 0 && pick < 0; p--)
            if (e[p] > 0) pick = p;
    return pick < 0 ? -1 : (id ? id[pick] : pick);
}

int32_t smp_sample(struct smp_ctx *c, const struct sched_sampling *sp, struct smp_rng *rng,
                   float *l, const int32_t *hist, int n_hist, int n_out, const int32_t *ban,
                   int n_ban) {
    int nv = c->n_vocab;
    for (int i = 0; i < sp->n_logit_bias; i++) {
        int32_t t = sp->logit_bias[i].token;
        if (t >= 0 && t < nv) l[t] += sp->logit_bias[i].bias;
    }
    apply_penalties(c, sp, l, hist, n_hist, n_out);
    for (int i = 0; i < n_ban; i++)
        if (ban[i] >= 0 && ban[i] < nv) l[ban[i]] = -INFINITY;

    if (!(sp->temperature > 0)) return smp_argmax(l, nv);

    const float m = scale_max(l, nv, smp_inv_temp(sp));
    if (m == -INFINITY) return 0; /* everything banned: nothing sensible to draw */

    /* The kept set is {i : i == cut or better(i, cut)} for a cut token found in O(n): the
     * top_k-th best, then the last token of the top_p prefix; min_p adds a logit floor.
     * The draw then walks the kept ids in id order, so no full sort is ever needed. */
    float *e = c->val;
    int32_t cut = -1;
    if (sp->top_k > 0 && sp->top_k < nv) {
        for (int i = 0; i < nv; i++) c->idx[i] = i;
        select_top(l, c->idx, nv, sp->top_k);
        cut = c->idx[0];
        for (int i = 1; i < sp->top_k; i++)
            if (better(l, cut, c->idx[i])) cut = c->idx[i];
    }
    double z = 0;
    if (cut < 0) {
        z = exp_all(l, e, nv, m);
    } else {
        for (int i = 0; i < nv; i++) {
            e[i] = (i == cut || better(l, i, cut)) ? exp_le0(l[i] - m) : 0.0f;
            z += e[i];
        }
    }
    if (sp->top_p > 0 && sp->top_p < 1) cut = top_p_cut(c, l, m, e, z, sp->top_p, nv);
    const float floor_l = min_p_floor(sp, m);
    /* Keep set applied to e[]; per block of SMP_DRAW_BLOCK ids its mass, so that the draw
     * walks block masses first and then one block. */
    /* i is kept iff i == cut or better(l, i, cut) — i.e. l > lc, or l == lc and i <= cut —
     * and l >= floor_l. Without a cut every id passes the first test (lc = -inf: -inf ids
     * have e = 0 anyway, NaN ids fail every comparison, as in the scalar form). */
    const float lc = cut >= 0 ? l[cut] : -INFINITY;
    const int ci = cut >= 0 ? cut : nv;
    const int nblk = (nv + SMP_DRAW_BLOCK - 1) / SMP_DRAW_BLOCK;
    double zk = 0;
    for (int b = 0; b < nblk; b++) {
        const int i0 = b * SMP_DRAW_BLOCK;
        const int i1 = i0 + SMP_DRAW_BLOCK < nv ? i0 + SMP_DRAW_BLOCK : nv;
        float z16[SMP_LANES] = {0};
        int i = i0;
        for (; i + SMP_LANES <= i1; i += SMP_LANES)
            for (int j = 0; j < SMP_LANES; j++) {
                const int keep = kept(l[i + j], lc, i + j, ci, floor_l);
                const float v = keep ? e[i + j] : 0.0f;
                e[i + j] = v;
                z16[j] += v;
            }
        for (; i < i1; i++) {
            if (!kept(l[i], lc, i, ci, floor_l)) e[i] = 0;
            z16[i % SMP_LANES] += e[i];
        }
        c->blk[b] = lanes_sum(z16);
        zk += c->blk[b];
    }
    const double r = smp_rng_uniform(rng) * zk;
    const int32_t pick = draw_walk(c, r, e, NULL, nv, NULL, NULL, c->blk, nblk);
    return pick >= 0 ? pick : (cut >= 0 ? cut : 0);
}

float smp_inv_temp(const struct sched_sampling *sp) { return 1.0f / sp->temperature; }

int smp_topk_ok(const struct sched_sampling *sp, int n_vocab, int n_cand) {
    return sp->temperature > 0 && sp->top_k >= 1 && sp->top_k <= n_cand &&
           sp->top_k <= SMP_TOPK_MAX && sp->top_k < n_vocab && sp->n_logit_bias == 0 &&
           sp->presence_penalty == 0 && sp->frequency_penalty == 0 &&
           !(sp->repetition_penalty > 0 && sp->repetition_penalty != 1.0f);
}

/* smp_sample's steps after the top_k cut, on the top_k kept candidates only: every id
 * outside them has e = 0 there, and adding 0 changes no sum, so each sum below takes the
 * same nonzero terms in the same order (z in id order; per draw block, lane id % 16 in
 * float, the 16 lanes in double, the blocks in order) and the walk visits the same ids. */
int32_t smp_sample_topk(struct smp_ctx *c, const struct sched_sampling *sp, struct smp_rng *rng,
                        const int32_t *id, const float *val, int n_cand) {
    const int nv = c->n_vocab;
    if (!smp_topk_ok(sp, nv, n_cand)) return -1;
    if (id[0] < 0) return 0; /* no id but NaNs: scale_max's maximum is -inf */
    const float m = val[0];
    if (m == -INFINITY) return 0;
    /* The kept ids (the first top_k; fewer only in a row with NaNs), sorted by id. */
    int32_t kid[SMP_TOPK_MAX] = {0}, seg0[SMP_TOPK_MAX + 1], segb[SMP_TOPK_MAX];
    float kl[SMP_TOPK_MAX], e[SMP_TOPK_MAX];
    double mass[SMP_TOPK_MAX];
    int n = 0;
    for (int j = 0; j < sp->top_k && id[j] >= 0; j++) {
        int p = n++;
        for (; p > 0 && kid[p - 1] > id[j]; p--) {
            kid[p] = kid[p - 1];
            kl[p] = kl[p - 1];
        }
        kid[p] = id[j];
        kl[p] = val[j];
    }
    int cut = 0; /* position of the top_k-th best */
    while (kid[cut] != id[n - 1]) cut++;
    double z = 0;
    for (int j = 0; j < n; j++) {
        e[j] = exp_le0(kl[j] - m);
        z += e[j];
    }
    if (sp->top_p > 0 && sp->top_p < 1) cut = top_p_cut(c, kl, m, e, z, sp->top_p, n);
    const float floor_l = min_p_floor(sp, m);
    const float lc = cut >= 0 ? kl[cut] : -INFINITY;
    const int ci = cut >= 0 ? cut : n;
    int n_seg = 0;
    double zk = 0;
    for (int j = 0; j < n;) {
        const int b = kid[j] / SMP_DRAW_BLOCK;
        float z16[SMP_LANES] = {0};
        seg0[n_seg] = j;
        segb[n_seg] = b;
        for (; j < n && kid[j] / SMP_DRAW_BLOCK == b; j++) {
            if (!kept(kl[j], lc, j, ci, floor_l)) e[j] = 0;
            z16[kid[j] % SMP_LANES] += e[j];
        }
        mass[n_seg] = lanes_sum(z16);
        zk += mass[n_seg++];
    }
    seg0[n_seg] = n;
    const double r = smp_rng_uniform(rng) * zk;
    const int32_t pick = draw_walk(c, r, e, kid, n, seg0, segb, mass, n_seg);
    return pick >= 0 ? pick : (cut >= 0 ? kid[cut] : 0);
}

float smp_logprobs(const float *l, int nv, int32_t token, int n_top, struct sched_top *top) {
    const float la = l[smp_argmax(l, nv)];
    const float m = la > -INFINITY ? la : -INFINITY;
    double lse = (double)m + log(exp_all(l, NULL, nv, m));
    if (n_top > 20) n_top = 20;
    int have = 0;
    int32_t best[20];
    for (int32_t i = 0; i < nv && n_top > 0; i++) {
        if (have == n_top && !better(l, i, best[have - 1])) continue;
        int j = have < n_top ? have++ : have - 1;
        while (j > 0 && better(l, i, best[j - 1])) {
            best[j] = best[j - 1];
            j--;
        }
        best[j] = i;
    }
    for (int i = 0; i < have; i++) {
        top[i].token = best[i];
        top[i].logprob = (float)((double)l[best[i]] - lse);
    }
    return token >= 0 && token < nv ? (float)((double)l[token] - lse) : -INFINITY;
}
