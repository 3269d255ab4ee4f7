/*
 * grammar_cache — the per-grammar mask cache (see grammar.h) and gram_match_mask.
 *
 * An entry is keyed by a matcher state: the sorted, distinct top GRAM_CACHE_DEPTH frames of
 * its stacks. It is filled by one walk (grammar_mask.c) in "sentinel" mode: each key's
 * frames over gram_sent, and a path that pops into the sentinel with bytes left marks the
 * token uncertain; a token fully consumed with any path alive (the sentinel included: the
 * key's frames are done exactly at the token's end) is accepted whatever lies below.
 * Filling an entry allocates (once per key and grammar); lookups do not.
 */
#include "scheduler/grammar_int.h"

#include <stdlib.h>
#include <string.h>

static void make_key(const struct gnode *st, int32_t *key) {
    int i = 0;
    for (; i < GRAM_CACHE_DEPTH && st; i++, st = st->up) key[i] = st->pos;
    key[i] = st ? -2 : -1;
    for (int j = i + 1; j <= GRAM_CACHE_DEPTH; j++) key[j] = 0;
}

static int cmp_key(const void *a, const void *b) {
    const int32_t *p = a, *q = b;
    for (int i = 0; i < GRAM_KEY_W; i++)
        if (p[i] != q[i]) return p[i] < q[i] ? -1 : 1;
    return 0;
}

/* The cache key of the stacks st[0..n) into x->keys: each live stack's top frames, sorted,
 * without repeats. Returns how many. */
static int make_keys(struct gram_scratch *x, const struct gnode *const *st, int n) {
    int nk = 0;
    for (int i = 0; i < n; i++)
        if (st[i]) make_key(st[i], x->keys + (size_t)nk++ * GRAM_KEY_W);
    if (nk > 1) qsort(x->keys, (size_t)nk, GRAM_KEY_W * sizeof(int32_t), cmp_key);
    int w = nk > 0;
    for (int i = 1; i < nk; i++)
        if (cmp_key(x->keys + (size_t)i * GRAM_KEY_W, x->keys + (size_t)(w - 1) * GRAM_KEY_W))
            memmove(x->keys + (size_t)w++ * GRAM_KEY_W, x->keys + (size_t)i * GRAM_KEY_W,
                    GRAM_KEY_W * sizeof(int32_t));
    return w;
}

static uint64_t key_hash(const int32_t *key, int nk) {
    uint64_t h = GRAM_FNV0;
    for (size_t i = 0; i < (size_t)nk * GRAM_KEY_W; i++) h = gram_fnv(h, (uint32_t)key[i]);
    return h;
}

static void centry_free(struct gram_centry *e) {
    free(e->key);
    free(e->acc);
    free(e->unc);
    free(e->unc_lcp);
    memset(e, 0, sizeof(*e));
}

/* Fill an entry for the key in x->keys (nk stacks), outside the lock: one walk from all the
 * key's stacks at once, each its frames over the sentinel. */
static int fill(const struct gram *g, struct gram_scratch *x, const struct gram_vocab *V,
                int nk, uint64_t hash, struct gram_centry *e) {
    memset(e, 0, sizeof(*e));
    e->hash = hash;
    e->n_keys = nk;
    const size_t words = ((size_t)V->n_vocab + 63) / 64;
    e->key = malloc((size_t)nk * GRAM_KEY_W * sizeof(int32_t));
    e->acc = calloc(words, sizeof(uint64_t));
    int32_t *unc = malloc((size_t)(V->n + 1) * sizeof(int32_t));
    if (!e->key || !e->acc || !unc) goto fail;
    memcpy(e->key, x->keys, (size_t)nk * GRAM_KEY_W * sizeof(int32_t));
    x->n_nodes = x->n_keep;
    x->overflow = 0;
    x->depth_guard = 0;
    for (int k = 0; k < nk; k++) {
        const int32_t *key = e->key + (size_t)k * GRAM_KEY_W;
        int d = 0;
        while (d <= GRAM_CACHE_DEPTH && key[d] >= 0) d++;
        const struct gnode *st = key[d] == -2 ? &gram_sent : NULL;
        for (int i = d - 1; i >= 0; i--) st = gram_node(x, key[i], st);
        x->sets[k] = st;
    }
    if (x->overflow) goto fail;
    x->set_n[0] = nk;
    struct gram_walk_out o = {e->acc, unc, 0};
    if (gram_walk(g, x, V, NULL, NULL, V->n, &o)) goto fail;
    e->n_unc = o.n_unc;
    e->unc = malloc((size_t)(o.n_unc + 1) * sizeof(int32_t));
    e->unc_lcp = malloc((size_t)(o.n_unc + 1));
    if (!e->unc || !e->unc_lcp) goto fail;
    memcpy(e->unc, unc, (size_t)o.n_unc * sizeof(int32_t));
    for (int i = 0; i < o.n_unc; i++) {
        int l = 0;
        if (i > 0) {
            const uint8_t *a = V->bytes + V->off[unc[i - 1]], *b = V->bytes + V->off[unc[i]];
            int la = (int)(V->off[unc[i - 1] + 1] - V->off[unc[i - 1]]);
            int lb = (int)(V->off[unc[i] + 1] - V->off[unc[i]]);
            int m = la < lb ? la : lb;
            while (l < m && a[l] == b[l]) l++;
        }
        e->unc_lcp[i] = (uint8_t)l;
    }
    free(unc);
    return GRAM_OK;
fail:
    free(unc);
    centry_free(e);
    return x->overflow ? GRAM_EBUDGET : GRAM_ENOMEM;
}

static const struct gram_centry *cache_find(const struct gram *g, const int32_t *key, int nk,
                                            uint64_t hash) {
    for (int i = 0; i < g->n_cache; i++) {
        const struct gram_centry *e = &g->cache[i];
        if (e->hash == hash && e->n_keys == nk &&
            memcmp(e->key, key, (size_t)nk * GRAM_KEY_W * sizeof(int32_t)) == 0)
            return e;
    }
    return NULL;
}

/* The entry for the key in x->keys, filled on first use; NULL when the cache cannot hold
 * it. */
static const struct gram_centry *cache_get(struct gram *g, struct gram_scratch *x,
                                           const struct gram_vocab *V, int nk, int *rc) {
    *rc = GRAM_OK;
    const uint64_t hash = key_hash(x->keys, nk);
    pthread_mutex_lock(&g->lock);
    g->lookups++;
    if (!g->cache_vocab) g->cache_vocab = V;
    const struct gram_centry *hit = g->cache_vocab == V ? cache_find(g, x->keys, nk, hash) : NULL;
    int room = g->cache_vocab == V && g->n_cache < GRAM_CACHE_MAX;
    if (hit) g->hits++;
    pthread_mutex_unlock(&g->lock);
    if (hit || !room) return hit;
    struct gram_centry e;
    *rc = fill(g, x, V, nk, hash, &e);
    if (*rc) return NULL;
    pthread_mutex_lock(&g->lock);
    if (!g->cache) g->cache = calloc(GRAM_CACHE_MAX, sizeof(*g->cache));
    hit = cache_find(g, e.key, nk, hash);
    int stored = 0;
    if (!hit && g->cache && g->n_cache < GRAM_CACHE_MAX) {
        g->cache[g->n_cache] = e;
        hit = &g->cache[g->n_cache++];
        stored = 1;
    }
    pthread_mutex_unlock(&g->lock);
    if (!stored) centry_free(&e);
    return hit;
}

void gram_cache_free(struct gram *g) {
    for (int i = 0; i < g->n_cache; i++) centry_free(&g->cache[i]);
    free(g->cache);
    g->cache = NULL;
    g->n_cache = 0;
}

void gram_cache_stats(struct gram *g, int *entries, long long *lookups, long long *hits) {
    pthread_mutex_lock(&g->lock);
    if (entries) *entries = g->n_cache;
    if (lookups) *lookups = g->lookups;
    if (hits) *hits = g->hits;
    pthread_mutex_unlock(&g->lock);
}

/* ---- masks -------------------------------------------------------------------------- */

int gram_match_mask(struct gram_match *m, struct gram_scratch *x, const struct gram_vocab *V,
                    uint64_t *mask, int *n_allowed, int uncached) {
    struct gram *g = m->g;
    const size_t words = ((size_t)V->n_vocab + 63) / 64;
    memset(mask, 0, words * sizeof(uint64_t));
    if (V->max_len > x->max_len) return GRAM_EINVAL;
    gram_intern_prepare(g, x);
    int rc = GRAM_OK;
    const struct gram_centry *e = NULL;
    const int nk = make_keys(x, m->st, m->n_st);
    if (nk > 0 && !uncached) e = cache_get(g, x, V, nk, &rc);
    if (nk > 0 && !rc && (!e || e->n_unc)) {
        /* the uncertain tokens (or, past the cache's room, all) from the real stacks */
        x->n_nodes = x->n_keep;
        x->overflow = 0;
        x->depth_guard = 0;
        int n = 0;
        for (int i = 0; i < m->n_st; i++)
            if (m->st[i]) x->sets[n++] = m->st[i];
        x->set_n[0] = n;
        struct gram_walk_out o = {mask, NULL, 0};
        rc = e ? gram_walk(g, x, V, e->unc, e->unc_lcp, e->n_unc, &o) : gram_walk(g, x, V, NULL, NULL, V->n, &o);
    }
    if (e)
        for (size_t w = 0; w < words; w++) mask[w] |= e->acc[w];
    int cnt = 0;
    for (size_t w = 0; w < words; w++) cnt += __builtin_popcountll(mask[w]);
    if (n_allowed) *n_allowed = cnt;
    return rc;
}
