/*
 * kv — block allocator, block tables, SWA ring, prefix cache and warm sessions.
 * See kvcache.h for the model; the comments here explain the mechanics.
 */
#include "scheduler/kvcache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KV_SESSION_ID_MAX 256
#define KV_HASH_SEED 0x6a09e667f3bcc908ull

/* One block class: reference counts, the evictable LRU list and the free stack. A block is
 * free (ref 0, not cached: on the stack), evictable (ref 0, cached: on the LRU list) or in
 * use (ref > 0). */
struct kv_class {
    int n;                /* blocks */
    int32_t *ref;         /* [n] references by sequences and sessions */
    uint8_t *cached;      /* [n] 1: part of the prefix cache */
    int32_t *prev, *next; /* [n] LRU links of evictable blocks (-1 ends) */
    int32_t head, tail;   /* least / most recently released evictable block */
    int32_t *stack;       /* [n] free block ids */
    int n_free;           /* entries on the stack */
    int n_evictable;      /* blocks on the LRU list */
    int n_cached;         /* blocks with cached = 1 */
};

struct kv_session {
    char id[KV_SESSION_ID_MAX]; /* NUL-terminated; "" = slot unused */
    double t_last;        /* CLOCK_MONOTONIC seconds of the last put */
    struct kvcache_seq seq;    /* the blocks it keeps */
    int32_t *tokens;      /* [max_seq_blocks * block_size] positions in its KV */
    int n_tokens;
};

struct kvcache {
    struct kvcache_opts o;
    struct kv_class k[2]; /* [KVSTORE_FULL], [KVSTORE_SWA] */
    /* Prefix-cache entries, indexed by FULL block id (valid while cached): */
    uint64_t *bhash;      /* [n_full] chain hash of the block */
    uint64_t *bparent;    /* [n_full] chain hash of the block before it (seed for the first) */
    int32_t *btok;        /* [n_full * block_size] its tokens, to rule out hash collisions */
    int32_t *bswa;        /* [n_full] SWA block holding the same positions, or -1 */
    int32_t *sowner;      /* [n_swa] FULL block an SWA block is attached to, or -1 */
    int32_t *table;       /* [tmask + 1] open-addressing hash table of FULL ids, -1 empty */
    uint64_t tmask;
    struct kv_session *sess; /* [max_sessions] */
    long long queries, hits, hit_tokens, evictions;
    long long query_tokens;       /* prompt positions looked up (vLLM's prefix-cache queries) */
    int last_counted, last_reuse; /* what the last kvcache_seq_attach added to the counters */
    int last_query;
};

/* ---- hashing ------------------------------------------------------------------------ */

static uint64_t kv_mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

uint64_t kvcache_hash_block(uint64_t parent, const int32_t *tokens, int n) {
    uint64_t h = kv_mix(parent ^ 0x9e3779b97f4a7c15ull);
    for (int i = 0; i < n; i++) h = kv_mix(h + (uint32_t)tokens[i] + 0x9e3779b97f4a7c15ull);
    return h;
}

static int32_t kv_table_find(const struct kvcache *c, uint64_t h, uint64_t parent,
                             const int32_t *tokens) {
    int bs = c->o.block_size;
    for (uint64_t i = h & c->tmask;; i = (i + 1) & c->tmask) {
        int32_t b = c->table[i];
        if (b < 0) return -1;
        if (c->bhash[b] == h && c->bparent[b] == parent &&
            !memcmp(c->btok + (size_t)b * bs, tokens, (size_t)bs * sizeof(int32_t)))
            return b;
    }
}

static void kv_table_insert(struct kvcache *c, int32_t b) {
    uint64_t i = c->bhash[b] & c->tmask;
    while (c->table[i] >= 0) i = (i + 1) & c->tmask;
    c->table[i] = b;
}

/* Linear-probing delete with backward shift (no tombstones). */
static void kv_table_delete(struct kvcache *c, int32_t b) {
    uint64_t i = c->bhash[b] & c->tmask;
    while (c->table[i] != b) {
        if (c->table[i] < 0) return;
        i = (i + 1) & c->tmask;
    }
    c->table[i] = -1;
    for (uint64_t j = (i + 1) & c->tmask; c->table[j] >= 0; j = (j + 1) & c->tmask) {
        uint64_t home = c->bhash[c->table[j]] & c->tmask;
        /* The entry at j may move to the hole at i unless its home lies cyclically in (i, j]. */
        int keep = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!keep) {
            c->table[i] = c->table[j];
            c->table[j] = -1;
            i = j;
        }
    }
}

/* ---- block classes ------------------------------------------------------------------ */

static void lru_remove(struct kv_class *k, int32_t b) {
    if (k->prev[b] >= 0) k->next[k->prev[b]] = k->next[b];
    else k->head = k->next[b];
    if (k->next[b] >= 0) k->prev[k->next[b]] = k->prev[b];
    else k->tail = k->prev[b];
    k->prev[b] = k->next[b] = -1;
    k->n_evictable--;
}

static void lru_append(struct kv_class *k, int32_t b) {
    k->prev[b] = k->tail;
    k->next[b] = -1;
    if (k->tail >= 0) k->next[k->tail] = b;
    else k->head = b;
    k->tail = b;
    k->n_evictable++;
}

static void blk_ref(struct kv_class *k, int32_t b) {
    if (k->ref[b] == 0 && k->cached[b]) lru_remove(k, b);
    k->ref[b]++;
}

static void blk_unref(struct kv_class *k, int32_t b) {
    if (--k->ref[b] > 0) return;
    if (k->cached[b]) lru_append(k, b);
    else k->stack[k->n_free++] = b;
}

/* Take a block out of the cache. An unreferenced block goes to the free stack. */
static void blk_uncache(struct kv_class *k, int32_t b) {
    if (!k->cached[b]) return;
    if (k->ref[b] == 0) {
        lru_remove(k, b);
        k->stack[k->n_free++] = b;
    }
    k->cached[b] = 0;
    k->n_cached--;
}

static void swa_detach(struct kvcache *c, int32_t full_b) {
    int32_t s = c->bswa[full_b];
    if (s < 0) return;
    c->bswa[full_b] = -1;
    c->sowner[s] = -1;
    blk_uncache(&c->k[1], s);
}

/* Evict the least recently released cached block of class cls onto the free stack. */
static int kv_evict_one(struct kvcache *c, int cls) {
    struct kv_class *k = &c->k[cls];
    int32_t b = k->head;
    if (b < 0) return 0;
    if (cls == 0) {
        kv_table_delete(c, b);
        swa_detach(c, b);
    } else if (c->sowner[b] >= 0) {
        c->bswa[c->sowner[b]] = -1;
        c->sowner[b] = -1;
    }
    blk_uncache(k, b);
    c->evictions++;
    return 1;
}

/* A fresh block with ref 1, evicting cached blocks and then dropping warm sessions as
 * needed; -1 when the pool is exhausted by running sequences. */
static int32_t kv_alloc(struct kvcache *c, int cls) {
    struct kv_class *k = &c->k[cls];
    for (;;) {
        if (k->n_free == 0) kv_evict_one(c, cls);
        if (k->n_free > 0) {
            int32_t b = k->stack[--k->n_free];
            k->ref[b] = 1;
            return b;
        }
        if (!kvcache_session_drop_lru(c)) return -1;
    }
}

static int class_init(struct kv_class *k, int n) {
    k->n = n;
    k->head = k->tail = -1;
    size_t m = n > 0 ? (size_t)n : 1;
    k->ref = calloc(m, sizeof(int32_t));
    k->cached = calloc(m, 1);
    k->prev = malloc(m * sizeof(int32_t));
    k->next = malloc(m * sizeof(int32_t));
    k->stack = malloc(m * sizeof(int32_t));
    if (!k->ref || !k->cached || !k->prev || !k->next || !k->stack) return KVCACHE_ENOMEM;
    /* Pop order: block 0 first. */
    for (int i = 0; i < n; i++) {
        k->prev[i] = k->next[i] = -1;
        k->stack[i] = n - 1 - i;
    }
    k->n_free = n;
    return KVCACHE_OK;
}

static void class_free(struct kv_class *k) {
    free(k->ref);
    free(k->cached);
    free(k->prev);
    free(k->next);
    free(k->stack);
}

/* ---- create / destroy --------------------------------------------------------------- */

static int seq_arrays(const struct kvcache_opts *o, struct kvcache_seq *s) {
    memset(s, 0, sizeof(*s));
    s->full = malloc((size_t)o->max_seq_blocks * sizeof(int32_t));
    s->hash = malloc((size_t)o->max_seq_blocks * sizeof(uint64_t));
    s->n_swa = o->ring;
    if (o->ring > 0) {
        s->swa = malloc((size_t)o->ring * sizeof(int32_t));
        s->slot_lb = malloc((size_t)o->ring * sizeof(int32_t));
        if (!s->swa || !s->slot_lb) return KVCACHE_ENOMEM;
        for (int j = 0; j < o->ring; j++) s->swa[j] = s->slot_lb[j] = -1;
    }
    return (s->full && s->hash) ? KVCACHE_OK : KVCACHE_ENOMEM;
}

int kvcache_create(const struct kvcache_opts *o, struct kvcache **out) {
    *out = NULL;
    if (o->block_size < 1 || o->n_full < 1 || o->max_seq_blocks < 1 || o->n_swa < 0 ||
        o->max_sessions < 0 || (o->ring > 0) != (o->n_swa > 0) || (o->ring > 0 && o->window < 1))
        return KVCACHE_EINVAL;
    struct kvcache *c = calloc(1, sizeof(*c));
    if (!c) return KVCACHE_ENOMEM;
    c->o = *o;
    int rc = KVCACHE_ENOMEM;
    if (class_init(&c->k[0], o->n_full) || class_init(&c->k[1], o->n_swa)) goto fail;
    size_t nf = (size_t)o->n_full, ns = o->n_swa > 0 ? (size_t)o->n_swa : 1;
    c->bhash = calloc(nf, sizeof(uint64_t));
    c->bparent = calloc(nf, sizeof(uint64_t));
    c->btok = calloc(nf * (size_t)o->block_size, sizeof(int32_t));
    c->bswa = malloc(nf * sizeof(int32_t));
    c->sowner = malloc(ns * sizeof(int32_t));
    uint64_t cap = 16;
    while (cap < 2 * nf) cap *= 2;
    c->tmask = cap - 1;
    c->table = malloc(cap * sizeof(int32_t));
    if (!c->bhash || !c->bparent || !c->btok || !c->bswa || !c->sowner || !c->table) goto fail;
    memset(c->bswa, 0xff, nf * sizeof(int32_t));
    memset(c->sowner, 0xff, ns * sizeof(int32_t));
    memset(c->table, 0xff, cap * sizeof(int32_t));
    if (o->max_sessions > 0) {
        c->sess = calloc((size_t)o->max_sessions, sizeof(*c->sess));
        if (!c->sess) goto fail;
        for (int i = 0; i < o->max_sessions; i++) {
            struct kv_session *ss = &c->sess[i];
            if (seq_arrays(o, &ss->seq)) goto fail;
            ss->tokens = malloc((size_t)o->max_seq_blocks * o->block_size * sizeof(int32_t));
            if (!ss->tokens) goto fail;
        }
    }
    *out = c;
    return KVCACHE_OK;
fail:
    kvcache_destroy(c);
    return rc;
}

void kvcache_destroy(struct kvcache *c) {
    if (!c) return;
    if (c->sess) {
        for (int i = 0; i < c->o.max_sessions; i++) {
            kvcache_seq_free(&c->sess[i].seq);
            free(c->sess[i].tokens);
        }
        free(c->sess);
    }
    class_free(&c->k[0]);
    class_free(&c->k[1]);
    free(c->bhash);
    free(c->bparent);
    free(c->btok);
    free(c->bswa);
    free(c->sowner);
    free(c->table);
    free(c);
}

int kvcache_seq_init(struct kvcache *c, struct kvcache_seq *s) {
    int rc = seq_arrays(&c->o, s);
    if (rc) kvcache_seq_free(s);
    return rc;
}

void kvcache_seq_free(struct kvcache_seq *s) {
    if (!s) return;
    free(s->full);
    free(s->hash);
    free(s->swa);
    free(s->slot_lb);
    memset(s, 0, sizeof(*s));
}

/* Release order: FULL blocks last-first; ring slots by descending logical block, so the
 * LRU list evicts the tail of a prefix before its head. */
void kvcache_seq_release(struct kvcache *c, struct kvcache_seq *s) {
    for (int i = s->n_full - 1; i >= 0; i--) blk_unref(&c->k[0], s->full[i]);
    s->n_full = 0;
    s->n_hashed = 0;
    for (;;) {
        int best = -1;
        for (int j = 0; j < s->n_swa; j++)
            if (s->swa[j] >= 0 && (best < 0 || s->slot_lb[j] > s->slot_lb[best])) best = j;
        if (best < 0) break;
        blk_unref(&c->k[1], s->swa[best]);
        s->swa[best] = -1;
        s->slot_lb[best] = -1;
    }
    for (int j = 0; j < s->n_swa; j++) s->slot_lb[j] = -1;
}

/* ---- sessions ----------------------------------------------------------------------- */

static void session_drop(struct kvcache *c, struct kv_session *ss) {
    kvcache_seq_release(c, &ss->seq);
    ss->id[0] = 0;
    ss->n_tokens = 0;
}

static struct kv_session *session_find(struct kvcache *c, const char *id) {
    if (!id || !id[0]) return NULL;
    for (int i = 0; i < c->o.max_sessions; i++)
        if (c->sess[i].id[0] && !strncmp(c->sess[i].id, id, KV_SESSION_ID_MAX - 1))
            return &c->sess[i];
    return NULL;
}

int kvcache_session_drop_lru(struct kvcache *c) {
    struct kv_session *lru = NULL;
    for (int i = 0; i < c->o.max_sessions; i++)
        if (c->sess[i].id[0] && (!lru || c->sess[i].t_last < lru->t_last)) lru = &c->sess[i];
    if (!lru) return 0;
    session_drop(c, lru);
    return 1;
}

void kvcache_session_expire(struct kvcache *c, double now) {
    for (int i = 0; i < c->o.max_sessions; i++)
        if (c->sess[i].id[0] && now - c->sess[i].t_last > c->o.session_ttl_s)
            session_drop(c, &c->sess[i]);
}

int kvcache_session_count(const struct kvcache *c) {
    int n = 0;
    for (int i = 0; i < c->o.max_sessions; i++) n += c->sess[i].id[0] != 0;
    return n;
}

/* Move all of src's references into dst (both initialised for the same bounds). */
static void seq_move(struct kvcache_seq *dst, struct kvcache_seq *src) {
    memcpy(dst->full, src->full, (size_t)src->n_full * sizeof(int32_t));
    memcpy(dst->hash, src->hash, (size_t)src->n_hashed * sizeof(uint64_t));
    dst->n_full = src->n_full;
    dst->n_hashed = src->n_hashed;
    for (int j = 0; j < src->n_swa; j++) {
        dst->swa[j] = src->swa[j];
        dst->slot_lb[j] = src->slot_lb[j];
        src->swa[j] = src->slot_lb[j] = -1;
    }
    src->n_full = src->n_hashed = 0;
}

void kvcache_session_put(struct kvcache *c, const char *id, struct kvcache_seq *s,
                    const int32_t *tokens, int n_kv, double now) {
    int bs = c->o.block_size;
    if (!id || !id[0] || c->o.max_sessions == 0 || n_kv < bs) {
        kvcache_seq_release(c, s);
        return;
    }
    struct kv_session *ss = session_find(c, id);
    if (ss) session_drop(c, ss);
    for (int i = 0; i < c->o.max_sessions && !ss; i++)
        if (!c->sess[i].id[0]) ss = &c->sess[i];
    if (!ss) {
        kvcache_session_drop_lru(c);
        for (int i = 0; i < c->o.max_sessions && !ss; i++)
            if (!c->sess[i].id[0]) ss = &c->sess[i];
    }
    /* Blocks past the written positions carry nothing. */
    int keep = (n_kv + bs - 1) / bs;
    while (s->n_full > keep) blk_unref(&c->k[0], s->full[--s->n_full]);
    if (s->n_hashed > s->n_full) s->n_hashed = s->n_full;
    seq_move(&ss->seq, s);
    memcpy(ss->tokens, tokens, (size_t)n_kv * sizeof(int32_t));
    ss->n_tokens = n_kv;
    snprintf(ss->id, sizeof(ss->id), "%s", id);
    ss->t_last = now;
}

/* ---- attach / prepare / commit ------------------------------------------------------ */


/* First logical block whose positions a query at position p may still see. */
static int window_lo(const struct kvcache *c, int p) {
    int first = p - c->o.window + 1;
    return first > 0 ? first / c->o.block_size : 0;
}

/* Longest block-aligned reuse the session supports, given its ring's contents. */
static int session_reuse(const struct kvcache *c, const struct kv_session *ss,
                         const int32_t *tokens, int n, int max_reuse) {
    int bs = c->o.block_size, d = 0, lim = ss->n_tokens < n ? ss->n_tokens : n;
    while (d < lim && ss->tokens[d] == tokens[d]) d++;
    if (d > max_reuse) d = max_reuse;
    for (int k = d / bs; k > 0; k--) {
        if (k > ss->seq.n_full) continue;
        int ok = 1;
        for (int lb = c->o.ring ? window_lo(c, k * bs) : k; lb < k && ok; lb++) {
            int j = lb % c->o.ring;
            ok = ss->seq.slot_lb[j] == lb && ss->seq.swa[j] >= 0;
        }
        if (ok) return k * bs;
    }
    return 0;
}

int kvcache_seq_attach(struct kvcache *c, struct kvcache_seq *s, const int32_t *tokens, int n,
                  int max_reuse, const char *session, double now) {
    (void)now;
    int bs = c->o.block_size, R = c->o.ring;
    struct kv_session *ss = session_find(c, session);
    c->last_counted = 0;
    if (!c->o.prefix_cache && !ss) return 0;
    c->queries++;
    c->query_tokens += n;
    c->last_query = n;
    c->last_counted = 1;
    if (max_reuse > n) max_reuse = n;
    if (max_reuse > c->o.max_seq_blocks * bs) max_reuse = c->o.max_seq_blocks * bs;

    /* Walk the hash chain; s->full/s->hash hold the matches before any reference is taken. */
    int found = 0;
    uint64_t parent = KV_HASH_SEED;
    while (c->o.prefix_cache && (found + 1) * bs <= max_reuse) {
        const int32_t *t = tokens + (size_t)found * bs;
        uint64_t h = kvcache_hash_block(parent, t, bs);
        int32_t b = kv_table_find(c, h, parent, t);
        if (b < 0) break;
        s->full[found] = b;
        s->hash[found] = h;
        parent = h;
        found++;
    }
    /* Usable only where the sliding layers' last window before the cut is cached too. */
    int k = found;
    while (R > 0 && k > 0) {
        int ok = 1;
        for (int lb = window_lo(c, k * bs); lb < k && ok; lb++) ok = c->bswa[s->full[lb]] >= 0;
        if (ok) break;
        k--;
    }
    int sreuse = ss ? session_reuse(c, ss, tokens, n, max_reuse) : 0;
    int reuse = 0;
    if (ss && sreuse > 0 && sreuse >= k * bs) {
        int kb = sreuse / bs;
        seq_move(s, &ss->seq);
        while (s->n_full > kb) blk_unref(&c->k[0], s->full[--s->n_full]);
        if (s->n_hashed > kb) s->n_hashed = kb;
        session_drop(c, ss);
        reuse = sreuse;
    } else {
        if (ss) session_drop(c, ss); /* the conversation moved on */
        for (int i = 0; i < k; i++) blk_ref(&c->k[0], s->full[i]);
        s->n_full = s->n_hashed = k;
        if (R > 0 && k > 0)
            for (int lb = window_lo(c, k * bs); lb < k; lb++) {
                int j = lb % R;
                s->swa[j] = c->bswa[s->full[lb]];
                s->slot_lb[j] = lb;
                blk_ref(&c->k[1], s->swa[j]);
            }
        reuse = k * bs;
    }
    if (reuse > 0) {
        c->hits++;
        c->hit_tokens += reuse;
    }
    c->last_reuse = reuse;
    return reuse;
}

void kvcache_uncount_attach(struct kvcache *c) {
    if (!c->last_counted) return;
    c->last_counted = 0;
    c->queries--;
    c->query_tokens -= c->last_query;
    if (c->last_reuse > 0) {
        c->hits--;
        c->hit_tokens -= c->last_reuse;
    }
}

int kvcache_seq_fill_ring(struct kvcache *c, struct kvcache_seq *s) {
    for (int j = 0; j < s->n_swa; j++) {
        if (s->swa[j] >= 0) continue;
        int32_t b = kv_alloc(c, 1);
        if (b < 0) return KVCACHE_ENOSPACE;
        s->swa[j] = b;
        s->slot_lb[j] = -1;
    }
    return KVCACHE_OK;
}

static int swa_shared(const struct kvcache *c, int32_t b) {
    return c->k[1].ref[b] > 1 || c->k[1].cached[b];
}

int kvcache_seq_prepare(struct kvcache *c, struct kvcache_seq *s, int pos, int n) {
    int bs = c->o.block_size, R = c->o.ring;
    if (n < 1 || pos < 0 || pos > s->n_full * bs) return KVCACHE_EINVAL;
    int first = pos / bs, last = (pos + n - 1) / bs;
    if (last >= c->o.max_seq_blocks) return KVCACHE_EINVAL;
    while (s->n_full <= last) {
        int32_t b = kv_alloc(c, 0);
        if (b < 0) return KVCACHE_ENOSPACE;
        s->full[s->n_full++] = b;
    }
    for (int lb = first; R > 0 && lb <= last; lb++) {
        int j = lb % R;
        if (lb == first && pos % bs) {
            /* Continuing a block this sequence wrote itself: it must be private. */
            if (s->slot_lb[j] != lb || s->swa[j] < 0 || swa_shared(c, s->swa[j]))
                return KVCACHE_EINVAL;
            continue;
        }
        if (s->swa[j] >= 0 && swa_shared(c, s->swa[j])) {
            blk_unref(&c->k[1], s->swa[j]);
            s->swa[j] = -1;
        }
        if (s->swa[j] < 0) {
            s->slot_lb[j] = -1;
            int32_t b = kv_alloc(c, 1);
            if (b < 0) return KVCACHE_ENOSPACE;
            s->swa[j] = b;
        }
        s->slot_lb[j] = lb;
    }
    return KVCACHE_OK;
}

void kvcache_seq_commit(struct kvcache *c, struct kvcache_seq *s, const int32_t *tokens, int n_kv) {
    int bs = c->o.block_size, R = c->o.ring;
    if (!c->o.prefix_cache) return;
    int complete = n_kv / bs;
    if (complete > s->n_full) complete = s->n_full;
    for (int i = s->n_hashed; i < complete; i++) {
        uint64_t parent = i ? s->hash[i - 1] : KV_HASH_SEED;
        const int32_t *t = tokens + (size_t)i * bs;
        uint64_t h = kvcache_hash_block(parent, t, bs);
        s->hash[i] = h;
        int32_t b = s->full[i];
        if (c->k[0].cached[b] || kv_table_find(c, h, parent, t) >= 0) continue;
        c->k[0].cached[b] = 1;
        c->k[0].n_cached++;
        c->bhash[b] = h;
        c->bparent[b] = parent;
        memcpy(c->btok + (size_t)b * bs, t, (size_t)bs * sizeof(int32_t));
        kv_table_insert(c, b);
        if (R > 0) {
            int j = i % R;
            int32_t sb = s->swa[j];
            if (s->slot_lb[j] == i && sb >= 0 && !c->k[1].cached[sb]) {
                c->k[1].cached[sb] = 1;
                c->k[1].n_cached++;
                c->bswa[b] = sb;
                c->sowner[sb] = b;
            }
        }
    }
    if (complete > s->n_hashed) s->n_hashed = complete;
}

/* ---- accounting --------------------------------------------------------------------- */

int kvcache_available(struct kvcache *c, int cls, int drop_sessions) {
    struct kv_class *k = &c->k[cls];
    int n = k->n_free + k->n_evictable;
    for (int i = 0; drop_sessions && i < c->o.max_sessions; i++) {
        const struct kv_session *ss = &c->sess[i];
        if (!ss->id[0]) continue;
        if (cls == 0) {
            for (int b = 0; b < ss->seq.n_full; b++) n += k->ref[ss->seq.full[b]] == 1;
        } else {
            for (int j = 0; j < ss->seq.n_swa; j++)
                n += ss->seq.swa[j] >= 0 && k->ref[ss->seq.swa[j]] == 1;
        }
    }
    return n;
}

void kvcache_get_stats(const struct kvcache *c, struct kvcache_stats *out) {
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < 2; i++) {
        const struct kv_class *k = &c->k[i];
        out->total[i] = k->n;
        out->free[i] = k->n_free;
        out->used[i] = k->n - k->n_free - k->n_evictable;
        out->cached[i] = k->n_cached;
    }
    out->queries = c->queries;
    out->hits = c->hits;
    out->hit_tokens = c->hit_tokens;
    out->query_tokens = c->query_tokens;
    out->evictions = c->evictions;
    out->sessions = kvcache_session_count(c);
}

int kvcache_block_ref(const struct kvcache *c, int cls, int32_t id) { return c->k[cls].ref[id]; }
int kvcache_block_cached(const struct kvcache *c, int cls, int32_t id) {
    return c->k[cls].cached[id];
}
