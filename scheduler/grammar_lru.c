/*
 * grammar_lru — a bounded cache of compiled grammars shared by requests (see grammar.h).
 *
 * Entries are keyed by the exact grammar text and the limits it was compiled under; a hit
 * hands out another reference to the same struct gram, so its mask cache (filled by earlier
 * requests' sampling steps) is warm. Up to cap entries; the least recently used one is
 * dropped when a new one comes (its grammar lives on while sequences hold references).
 * One mutex guards the table; lookups compare a 64-bit hash before the bytes, and cap is
 * small (a linear scan costs microseconds), so no second index is kept.
 */
#include "scheduler/grammar_int.h"

#include <stdlib.h>
#include <string.h>

struct gram_lru_ent {
    uint64_t hash;
    char *text;
    size_t len;
    struct gram_limits lim;
    struct gram *g;
    uint64_t used;         /* tick of the last hit or insertion; 0 = empty slot */
};

struct gram_lru {
    pthread_mutex_t lock;
    struct gram_lru_ent *e;    /* [cap] */
    int cap, n;
    uint64_t tick;
    long long hits, misses;
};

static uint64_t lru_hash(const char *p, size_t n, const struct gram_limits *l) {
    uint64_t h = GRAM_FNV0;
    for (size_t i = 0; i < n; i++) h = gram_fnv(h, (uint8_t)p[i]);
    h = gram_fnv(h, (uint32_t)l->max_elems);
    h = gram_fnv(h, (uint32_t)l->max_stacks);
    return gram_fnv(h, (uint32_t)l->max_nodes);
}

static int lru_same(const struct gram_lru_ent *e, uint64_t h, const char *p, size_t n,
                    const struct gram_limits *l) {
    return e->used && e->hash == h && e->len == n && e->lim.max_elems == l->max_elems &&
           e->lim.max_stacks == l->max_stacks && e->lim.max_nodes == l->max_nodes &&
           memcmp(e->text, p, n) == 0;
}

int gram_lru_create(int cap, struct gram_lru **out) {
    *out = NULL;
    if (cap < 1) return GRAM_EINVAL;
    struct gram_lru *c = calloc(1, sizeof(*c));
    if (!c) return GRAM_ENOMEM;
    c->e = calloc((size_t)cap, sizeof(*c->e));
    if (!c->e) {
        free(c);
        return GRAM_ENOMEM;
    }
    c->cap = cap;
    pthread_mutex_init(&c->lock, NULL);
    *out = c;
    return GRAM_OK;
}

static void ent_clear(struct gram_lru_ent *e) {
    gram_unref(e->g);
    free(e->text);
    memset(e, 0, sizeof(*e));
}

void gram_lru_destroy(struct gram_lru *c) {
    if (!c) return;
    for (int i = 0; i < c->cap; i++) ent_clear(&c->e[i]);
    pthread_mutex_destroy(&c->lock);
    free(c->e);
    free(c);
}

struct gram *gram_lru_get(struct gram_lru *c, const char *text, size_t len,
                          const struct gram_limits *lim) {
    if (!c) return NULL;
    struct gram_limits l;
    if (!lim) gram_limits_default(&l);
    else l = *lim;
    const uint64_t h = lru_hash(text, len, &l);
    struct gram *g = NULL;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->cap && !g; i++)
        if (lru_same(&c->e[i], h, text, len, &l)) {
            c->e[i].used = ++c->tick;
            g = gram_ref(c->e[i].g);
        }
    if (g) c->hits++;
    else c->misses++;
    pthread_mutex_unlock(&c->lock);
    return g;
}

int gram_lru_put(struct gram_lru *c, const char *text, size_t len, struct gram *g) {
    if (!c || !g) return GRAM_EINVAL;
    const uint64_t h = lru_hash(text, len, &g->lim);
    char *copy = malloc(len + 1);
    if (!copy) return GRAM_ENOMEM;
    memcpy(copy, text, len);
    copy[len] = 0;
    struct gram_lru_ent old = {0};
    pthread_mutex_lock(&c->lock);
    int slot = -1;
    for (int i = 0; i < c->cap; i++) {
        if (lru_same(&c->e[i], h, text, len, &g->lim)) { /* another request won the race */
            slot = -2;
            break;
        }
        if (slot < 0 || c->e[i].used < c->e[slot].used) slot = i;
    }
    if (slot >= 0) {
        old = c->e[slot];
        if (!old.used) c->n++;
        c->e[slot] = (struct gram_lru_ent){.hash = h, .text = copy, .len = len, .lim = g->lim,
                                           .g = gram_ref(g), .used = ++c->tick};
        copy = NULL;
    }
    pthread_mutex_unlock(&c->lock);
    free(copy);
    if (old.used) ent_clear(&old); /* outside the lock: may free a large grammar */
    return GRAM_OK;
}

void gram_lru_stats(struct gram_lru *c, int *entries, long long *hits, long long *misses) {
    *entries = 0;
    *hits = *misses = 0;
    if (!c) return;
    pthread_mutex_lock(&c->lock);
    *entries = c->n;
    *hits = c->hits;
    *misses = c->misses;
    pthread_mutex_unlock(&c->lock);
}
