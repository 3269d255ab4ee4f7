/*
 * kvcache — KV block bookkeeping for the scheduler: which sequence owns which block of the
 * engine's kvstore_pool, per-sequence block tables, the sliding-window ring, the prefix cache
 * and warm sessions. It manages block ids only; the memory behind them is the kvstore_pool.
 *
 * Two classes, as in kvstore.h. FULL blocks back the global layers: a sequence's table
 * grows one block per block_size positions. SWA blocks back the sliding layers: a
 * sequence owns a ring of `ring` slots; logical block lb lives in slot lb % ring.
 *
 * Blocks are refcounted (sequences and sessions hold references). The prefix cache keys a
 * complete FULL block by a hash of its tokens chained with the hash of the block before
 * it, so a key stands for the whole prefix up to the block's end. The SWA block holding
 * the same positions is attached to the cached FULL block: a prefix of k blocks can only
 * be reused when the SWA blocks of the last `window` positions before it are cached too,
 * because the sliding layers of every later token read them (recomputing only a tail is
 * not correct: the tail's hidden states depend on sliding keys before the tail). Reuse
 * always starts at a block boundary, so a sequence never writes into a shared block except
 * when its ring wraps onto a slot, where it swaps the shared block for a fresh one.
 *
 * Cached blocks nobody references are evicted least recently released first; sequences
 * release their blocks last-first so a prefix's tail is evicted before its head.
 *
 * Sessions keep a finished sequence's blocks (FULL table and SWA ring) and tokens under a
 * string id for ttl seconds; the next request with that id resumes at the longest common
 * block-aligned prefix. Sessions are dropped least recently used first when blocks run out.
 *
 * Threads: one thread (the scheduler's) uses a kvcache; nothing here locks.
 */
#ifndef GEMMAD_KVCACHE_H
#define GEMMAD_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

enum kvcache_status { KVCACHE_OK = 0, KVCACHE_EINVAL = -1, KVCACHE_ENOSPACE = -2, KVCACHE_ENOMEM = -5 };

struct kvcache_opts {
    int n_full;          /* FULL blocks in the pool */
    int n_swa;           /* SWA blocks in the pool (0 when the model has no sliding layers) */
    int block_size;      /* positions per block */
    int window;          /* sliding window (positions visible incl. self); 0 = none */
    int ring;            /* SWA ring slots per sequence (kvstore_swa_ring_blocks); 0 = none */
    int max_seq_blocks;  /* most FULL blocks one sequence may hold (n_ctx / block_size + 1) */
    int prefix_cache;    /* 1: cache complete blocks for reuse */
    int max_sessions;    /* warm sessions kept at most (0 = none) */
    double session_ttl_s;/* seconds a warm session lives */
};

/* One sequence's blocks. Arrays are allocated by kvcache_seq_init for the bounds in kvcache_opts;
 * nothing is allocated afterwards. full/n_full and swa/n_swa are what fwd_run reads. */
struct kvcache_seq {
    int32_t *full;       /* [max_seq_blocks] FULL block ids, logical block order */
    uint64_t *hash;      /* [max_seq_blocks] chain hash of each complete block */
    int n_full;          /* blocks in `full` */
    int n_hashed;        /* leading complete blocks whose hash is computed (and offered) */
    int32_t *swa;        /* [ring] SWA block ids, -1 = none yet */
    int32_t *slot_lb;    /* [ring] logical block each slot holds, -1 = none */
    int n_swa;           /* ring size (kvcache_opts.ring) */
};

struct kvcache;

int kvcache_create(const struct kvcache_opts *o, struct kvcache **out);
void kvcache_destroy(struct kvcache *c);

int kvcache_seq_init(struct kvcache *c, struct kvcache_seq *s);   /* allocates the arrays */
void kvcache_seq_free(struct kvcache_seq *s);                       /* frees the arrays (no refs held) */
/* Drops every reference the sequence holds; the arrays stay for reuse. */
void kvcache_seq_release(struct kvcache *c, struct kvcache_seq *s);

/* Attach the longest reusable cached prefix of tokens[0..n), at most max_reuse positions
 * (callers pass n - 1: at least one token must be computed). Looks at warm session
 * `session` first (may be NULL). Returns the reused positions (a multiple of block_size,
 * 0 on a miss). The sequence must hold no blocks. */
int kvcache_seq_attach(struct kvcache *c, struct kvcache_seq *s, const int32_t *tokens, int n,
                  int max_reuse, const char *session, double now);

/* Take back the statistics of the last kvcache_seq_attach when its sequence was released without
 * running (admission retried later), so each request counts once. */
void kvcache_uncount_attach(struct kvcache *c);

/* Fill the ring's empty slots with fresh blocks (done at admission so a running sequence
 * never waits for SWA blocks). KVCACHE_ENOSPACE when the pool cannot. */
int kvcache_seq_fill_ring(struct kvcache *c, struct kvcache_seq *s);

/* Make positions [pos, pos + n) writable: FULL blocks appended, ring slots that wrap onto a
 * shared block swapped for fresh ones. On KVCACHE_ENOSPACE nothing is lost (blocks already
 * obtained stay with the sequence); the caller frees memory (preemption) and retries. */
int kvcache_seq_prepare(struct kvcache *c, struct kvcache_seq *s, int pos, int n);

/* Offer every complete block of tokens[0..n_kv) (positions written) to the prefix cache. */
void kvcache_seq_commit(struct kvcache *c, struct kvcache_seq *s, const int32_t *tokens, int n_kv);

/* Move a finished sequence's blocks into warm session `id` (replacing an older one with
 * that id); the sequence is left empty. tokens[0..n_kv) are the positions in its KV. */
void kvcache_session_put(struct kvcache *c, const char *id, struct kvcache_seq *s,
                    const int32_t *tokens, int n_kv, double now);
void kvcache_session_expire(struct kvcache *c, double now);
int kvcache_session_count(const struct kvcache *c);

/* Blocks a sequence could obtain now without preempting anyone: free + evictable, plus
 * those held only by warm sessions when drop_sessions (they would be dropped). */
int kvcache_available(struct kvcache *c, int cls, int drop_sessions);
/* Drop the least recently used session; 0 if there was none. */
int kvcache_session_drop_lru(struct kvcache *c);

struct kvcache_stats {
    int total[2];        /* blocks per class */
    int used[2];         /* referenced by a sequence or session */
    int cached[2];       /* in the prefix cache (referenced or not) */
    int free[2];         /* neither referenced nor cached */
    long long queries, hits, hit_tokens, evictions;
    long long query_tokens; /* prompt positions looked up */
    int sessions;
};
void kvcache_get_stats(const struct kvcache *c, struct kvcache_stats *out);

/* Test hooks: the reference count and cache state of one block. */
int kvcache_block_ref(const struct kvcache *c, int cls, int32_t id);
int kvcache_block_cached(const struct kvcache *c, int cls, int32_t id);
uint64_t kvcache_hash_block(uint64_t parent, const int32_t *tokens, int n);

#endif
