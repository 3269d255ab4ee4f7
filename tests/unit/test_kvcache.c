/* Unit tests for scheduler/kv: block allocator, block tables, SWA ring, prefix cache
 * (hash chain, LRU eviction, refcounts) and warm sessions. No model needed. */
#include "scheduler/kvcache.h"
#include "tests/unit/harness.h"

#define BS 16

static struct kvcache *mk(int n_full, int n_swa, int window, int ring, int sessions) {
    struct kvcache_opts o = {.n_full = n_full, .n_swa = n_swa, .block_size = BS, .window = window,
                        .ring = ring, .max_seq_blocks = 64, .prefix_cache = 1,
                        .max_sessions = sessions, .session_ttl_s = 10};
    struct kvcache *c = NULL;
    T_ASSERT(kvcache_create(&o, &c) == KVCACHE_OK && c);
    return c;
}

static void toks(int32_t *t, int n, int seed) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)((i * 7919 + seed * 104729) % 5000);
}

/* Every block is in exactly one state and the counters agree. */
static void check_accounting(struct kvcache *c) {
    struct kvcache_stats st;
    kvcache_get_stats(c, &st);
    for (int k = 0; k < 2; k++) {
        int used = 0, evictable = 0, freeb = 0;
        for (int b = 0; b < st.total[k]; b++) {
            if (kvcache_block_ref(c, k, b) > 0) used++;
            else if (kvcache_block_cached(c, k, b)) evictable++;
            else freeb++;
        }
        T_ASSERTF(used == st.used[k] && freeb == st.free[k] &&
                      used + evictable + freeb == st.total[k],
                  "class %d: used %d/%d free %d/%d", k, used, st.used[k], freeb, st.free[k]);
    }
}

static void test_alloc_and_release(void) {
    struct kvcache *c = mk(8, 0, 0, 0, 0);
    struct kvcache_seq s;
    T_ASSERT(kvcache_seq_init(c, &s) == KVCACHE_OK);
    T_ASSERT(kvcache_seq_prepare(c, &s, 0, 40) == KVCACHE_OK);
    T_ASSERT(s.n_full == 3);
    T_ASSERT(s.full[0] != s.full[1] && s.full[1] != s.full[2] && s.full[0] != s.full[2]);
    T_ASSERT(kvcache_seq_prepare(c, &s, 40, 8) == KVCACHE_OK && s.n_full == 3);
    T_ASSERT(kvcache_seq_prepare(c, &s, 48, 1) == KVCACHE_OK && s.n_full == 4);
    /* A gap (position beyond what the table covers) is a caller bug. */
    T_ASSERT(kvcache_seq_prepare(c, &s, 100, 1) == KVCACHE_EINVAL);
    struct kvcache_stats st;
    kvcache_get_stats(c, &st);
    T_ASSERT(st.used[0] == 4 && st.free[0] == 4);
    check_accounting(c);
    kvcache_seq_release(c, &s);
    kvcache_get_stats(c, &st);
    T_ASSERT(st.used[0] == 0 && st.free[0] == 8 && s.n_full == 0);
    kvcache_seq_free(&s);
    kvcache_destroy(c);
}

static void test_exhaustion_keeps_blocks(void) {
    struct kvcache *c = mk(4, 0, 0, 0, 0);
    struct kvcache_seq a, b;
    T_ASSERT(kvcache_seq_init(c, &a) == KVCACHE_OK && kvcache_seq_init(c, &b) == KVCACHE_OK);
    T_ASSERT(kvcache_seq_prepare(c, &a, 0, 48) == KVCACHE_OK);
    T_ASSERT(kvcache_seq_prepare(c, &b, 0, 32) == KVCACHE_ENOSPACE);
    T_ASSERT(b.n_full == 1); /* what it got stays */
    T_ASSERT(kvcache_available(c, 0, 0) == 0);
    kvcache_seq_release(c, &a);
    T_ASSERT(kvcache_seq_prepare(c, &b, 0, 32) == KVCACHE_OK && b.n_full == 2);
    check_accounting(c);
    kvcache_seq_release(c, &b);
    kvcache_seq_free(&a);
    kvcache_seq_free(&b);
    kvcache_destroy(c);
}

static void test_prefix_hit_and_chain(void) {
    struct kvcache *c = mk(16, 0, 0, 0, 0);
    int32_t t[80], u[80];
    toks(t, 80, 1);
    struct kvcache_seq a, b;
    T_ASSERT(kvcache_seq_init(c, &a) == KVCACHE_OK && kvcache_seq_init(c, &b) == KVCACHE_OK);
    T_ASSERT(kvcache_seq_attach(c, &a, t, 70, 69, NULL, 0) == 0);
    T_ASSERT(kvcache_seq_prepare(c, &a, 0, 70) == KVCACHE_OK);
    kvcache_seq_commit(c, &a, t, 70); /* 4 complete blocks */
    struct kvcache_stats st;
    kvcache_get_stats(c, &st);
    T_ASSERT(st.cached[0] == 4);
    /* Same prompt: reuse 64 positions while a still holds them (refcount 2). */
    T_ASSERT(kvcache_seq_attach(c, &b, t, 70, 69, NULL, 0) == 64);
    T_ASSERT(b.n_full == 4 && b.full[3] == a.full[3] && kvcache_block_ref(c, 0, a.full[0]) == 2);
    kvcache_seq_release(c, &b);
    T_ASSERT(kvcache_block_ref(c, 0, a.full[0]) == 1);
    /* At least one token must be computed: a 64-token prompt reuses 48. */
    T_ASSERT(kvcache_seq_attach(c, &b, t, 64, 63, NULL, 0) == 48);
    kvcache_seq_release(c, &b);
    /* Differ inside block 2: reuse stops before it. */
    memcpy(u, t, sizeof(u));
    u[40] ^= 1;
    T_ASSERT(kvcache_seq_attach(c, &b, u, 70, 69, NULL, 0) == 32);
    kvcache_seq_release(c, &b);
    /* Same block contents after a different first block: the chain does not match. */
    memcpy(u, t, sizeof(u));
    u[0] ^= 1;
    T_ASSERT(kvcache_seq_attach(c, &b, u, 70, 69, NULL, 0) == 0);
    kvcache_get_stats(c, &st);
    T_ASSERT(st.queries == 5 && st.hits == 3 && st.hit_tokens == 64 + 48 + 32);
    /* A retried admission takes its attach back out of the statistics. */
    kvcache_seq_release(c, &b);
    T_ASSERT(kvcache_seq_attach(c, &b, t, 70, 69, NULL, 0) == 64);
    kvcache_uncount_attach(c);
    kvcache_uncount_attach(c); /* only once */
    kvcache_get_stats(c, &st);
    T_ASSERT(st.queries == 5 && st.hits == 3 && st.hit_tokens == 64 + 48 + 32);
    kvcache_seq_release(c, &a);
    check_accounting(c);
    kvcache_seq_free(&a);
    kvcache_seq_free(&b);
    kvcache_destroy(c);
}

static void test_lru_eviction_order(void) {
    struct kvcache *c = mk(8, 0, 0, 0, 0);
    int32_t t[64];
    toks(t, 64, 2);
    struct kvcache_seq a, b, x;
    T_ASSERT(kvcache_seq_init(c, &a) == KVCACHE_OK && kvcache_seq_init(c, &b) == KVCACHE_OK &&
             kvcache_seq_init(c, &x) == KVCACHE_OK);
    T_ASSERT(kvcache_seq_prepare(c, &a, 0, 64) == KVCACHE_OK);
    kvcache_seq_commit(c, &a, t, 64);
    kvcache_seq_release(c, &a); /* 4 evictable, 4 free */
    struct kvcache_stats st;
    kvcache_get_stats(c, &st);
    T_ASSERT(st.free[0] == 4 && st.cached[0] == 4 && st.used[0] == 0);
    /* Five blocks: the free four, then one eviction, which must take the prefix's tail. */
    T_ASSERT(kvcache_seq_prepare(c, &x, 0, 80) == KVCACHE_OK);
    kvcache_get_stats(c, &st);
    T_ASSERT(st.evictions == 1 && st.cached[0] == 3);
    T_ASSERT(kvcache_seq_attach(c, &b, t, 64, 64, NULL, 0) == 48);
    /* Referenced cached blocks are not evictable: the pool is exhausted now. */
    T_ASSERT(kvcache_seq_prepare(c, &x, 80, 16) == KVCACHE_ENOSPACE);
    kvcache_seq_release(c, &b);
    T_ASSERT(kvcache_seq_prepare(c, &x, 80, 16) == KVCACHE_OK);
    check_accounting(c);
    kvcache_seq_release(c, &x);
    kvcache_seq_free(&a);
    kvcache_seq_free(&b);
    kvcache_seq_free(&x);
    kvcache_destroy(c);
}

/* Window 32, block 16, ring 5: positions map to ring slots lb % 5; once the ring is full,
 * private blocks are rewritten in place (no new allocations). */
static void test_swa_ring(void) {
    struct kvcache *c = mk(32, 10, 32, 5, 0);
    struct kvcache_seq s;
    T_ASSERT(kvcache_seq_init(c, &s) == KVCACHE_OK && s.n_swa == 5);
    T_ASSERT(kvcache_seq_fill_ring(c, &s) == KVCACHE_OK);
    struct kvcache_stats st;
    kvcache_get_stats(c, &st);
    T_ASSERT(st.used[1] == 5);
    int32_t ring0[5];
    memcpy(ring0, s.swa, sizeof(ring0));
    for (int pos = 0; pos < 400; pos += 20) {
        T_ASSERT(kvcache_seq_prepare(c, &s, pos, 20) == KVCACHE_OK);
        for (int p = pos; p < pos + 20; p++) T_ASSERT(s.slot_lb[(p / BS) % 5] == p / BS);
    }
    T_ASSERT(!memcmp(ring0, s.swa, sizeof(ring0)));
    kvcache_get_stats(c, &st);
    T_ASSERT(st.used[1] == 5 && st.used[0] == 25);
    kvcache_seq_release(c, &s);
    kvcache_get_stats(c, &st);
    T_ASSERT(st.free[1] == 10 && st.free[0] == 32);
    kvcache_seq_free(&s);
    kvcache_destroy(c);
}

/* With the prefix cache, completed SWA blocks are donated; a wrap swaps them for fresh ones,
 * and a hit brings back exactly the window's blocks into the right slots. */
static void test_swa_prefix_reuse(void) {
    struct kvcache *c = mk(32, 20, 32, 5, 0);
    int32_t t[160];
    toks(t, 160, 3);
    struct kvcache_seq a, b;
    T_ASSERT(kvcache_seq_init(c, &a) == KVCACHE_OK && kvcache_seq_init(c, &b) == KVCACHE_OK);
    T_ASSERT(kvcache_seq_fill_ring(c, &a) == KVCACHE_OK);
    for (int pos = 0; pos < 144; pos += 16) {
        T_ASSERT(kvcache_seq_prepare(c, &a, pos, 16) == KVCACHE_OK);
        kvcache_seq_commit(c, &a, t, pos + 16);
    }
    struct kvcache_stats st;
    kvcache_get_stats(c, &st);
    T_ASSERT(st.cached[0] == 9 && st.cached[1] == 9); /* 9 donated, 5 in the ring */
    T_ASSERT(st.used[1] == 5);
    int32_t win[3] = {a.swa[6 % 5], a.swa[7 % 5], a.swa[8 % 5]};
    /* Reuse 144: window_lo(144) = (144 - 31) / 16 = 7, so logical blocks 7 and 8. */
    T_ASSERT(kvcache_seq_attach(c, &b, t, 150, 149, NULL, 0) == 144);
    T_ASSERT(b.slot_lb[7 % 5] == 7 && b.slot_lb[8 % 5] == 8);
    T_ASSERT(b.swa[7 % 5] == win[1] && b.swa[8 % 5] == win[2]);
    T_ASSERT(kvcache_seq_fill_ring(c, &b) == KVCACHE_OK);
    /* Writing block 9 into slot 4 and then 10 into slot 0 never touches shared blocks. */
    T_ASSERT(kvcache_seq_prepare(c, &b, 144, 32) == KVCACHE_OK);
    for (int j = 0; j < 5; j++)
        if (b.slot_lb[j] >= 9) T_ASSERT(!kvcache_block_cached(c, 1, b.swa[j]) &&
                                        kvcache_block_ref(c, 1, b.swa[j]) == 1);
    kvcache_seq_release(c, &b);
    kvcache_seq_release(c, &a);
    check_accounting(c);
    /* A second hit restores the same window. */
    int reuse = kvcache_seq_attach(c, &b, t, 150, 149, NULL, 0);
    T_ASSERT(reuse == 144);
    kvcache_seq_release(c, &b);
    /* Take every SWA block from other sequences: the cached SWA blocks are evicted, so the
     * FULL blocks alone (still cached) no longer make a usable prefix. */
    struct kvcache_seq x;
    T_ASSERT(kvcache_seq_init(c, &x) == KVCACHE_OK);
    kvcache_get_stats(c, &st);
    int evict = st.total[1] - st.free[1] - st.used[1];
    T_ASSERT(evict == 9);
    struct kvcache_seq y[8];
    int ny = 0, taken = 0;
    while (taken < st.free[1] + evict && ny < 8) {
        T_ASSERT(kvcache_seq_init(c, &y[ny]) == KVCACHE_OK);
        T_ASSERT(kvcache_seq_fill_ring(c, &y[ny]) == KVCACHE_OK);
        taken += 5;
        ny++;
    }
    struct kvcache_stats st2;
    kvcache_get_stats(c, &st2);
    T_ASSERT(st2.evictions > st.evictions);
    reuse = kvcache_seq_attach(c, &b, t, 150, 149, NULL, 0);
    T_ASSERT(reuse == 0 && st2.cached[0] == 9);
    kvcache_seq_release(c, &b);
    for (int i = 0; i < ny; i++) {
        kvcache_seq_release(c, &y[i]);
        kvcache_seq_free(&y[i]);
    }
    check_accounting(c);
    kvcache_seq_free(&x);
    kvcache_seq_free(&a);
    kvcache_seq_free(&b);
    kvcache_destroy(c);
}

static void test_session_resume(void) {
    struct kvcache *c = mk(32, 20, 32, 5, 2);
    int32_t t[200];
    toks(t, 200, 4);
    struct kvcache_seq a, b;
    T_ASSERT(kvcache_seq_init(c, &a) == KVCACHE_OK && kvcache_seq_init(c, &b) == KVCACHE_OK);
    T_ASSERT(kvcache_seq_fill_ring(c, &a) == KVCACHE_OK);
    T_ASSERT(kvcache_seq_prepare(c, &a, 0, 100) == KVCACHE_OK);
    kvcache_seq_commit(c, &a, t, 100);
    kvcache_session_put(c, "conv-1", &a, t, 100, 1.0);
    T_ASSERT(a.n_full == 0 && kvcache_session_count(c) == 1);
    struct kvcache_stats st;
    kvcache_get_stats(c, &st);
    T_ASSERT(st.used[0] == 7 && st.used[1] == 5);
    /* Next turn extends the conversation: resume at 96 (aligned common prefix). */
    T_ASSERT(kvcache_seq_attach(c, &b, t, 180, 179, "conv-1", 2.0) == 96);
    T_ASSERT(kvcache_session_count(c) == 0 && b.n_full == 6);
    T_ASSERT(kvcache_seq_prepare(c, &b, 96, 84) == KVCACHE_OK);
    kvcache_seq_commit(c, &b, t, 180);
    kvcache_session_put(c, "conv-1", &b, t, 180, 3.0);
    /* Expired sessions give their blocks back. */
    kvcache_session_expire(c, 100.0);
    T_ASSERT(kvcache_session_count(c) == 0);
    kvcache_get_stats(c, &st);
    T_ASSERT(st.used[0] == 0 && st.used[1] == 0);
    /* A session is dropped when the pool needs its blocks. */
    T_ASSERT(kvcache_seq_fill_ring(c, &a) == KVCACHE_OK);
    T_ASSERT(kvcache_seq_prepare(c, &a, 0, 100) == KVCACHE_OK);
    kvcache_session_put(c, "conv-2", &a, t, 100, 5.0);
    T_ASSERT(kvcache_available(c, 0, 1) == 32 && kvcache_available(c, 0, 0) < 32);
    T_ASSERT(kvcache_seq_prepare(c, &b, 0, 32 * BS) == KVCACHE_OK);
    T_ASSERT(kvcache_session_count(c) == 0);
    kvcache_seq_release(c, &b);
    check_accounting(c);
    kvcache_seq_free(&a);
    kvcache_seq_free(&b);
    kvcache_destroy(c);
}

/* Random workload: accounting and hash-table consistency hold throughout, and every
 * prefix hit returns blocks whose cached tokens match. */
static void test_random_stress(void) {
    struct kvcache *c = mk(48, 30, 32, 5, 2);
    enum { NS = 4 };
    struct kvcache_seq s[NS];
    int len[NS] = {0}, seed[NS] = {0}, active[NS] = {0};
    int32_t t[NS][256];
    int shadow_f[48], shadow_s[30]; /* which (prompt, logical block) each block holds */
    for (int i = 0; i < NS; i++) T_ASSERT(kvcache_seq_init(c, &s[i]) == KVCACHE_OK);
    unsigned r = 12345;
    int iters = getenv("GEMMAD_TEST_QUICK") ? 2000 : 20000;
    for (int it = 0; it < iters; it++) {
        r = r * 1103515245u + 12345u;
        int i = (int)((r >> 16) % NS), op = (int)((r >> 8) % 8);
        if (!active[i]) {
            seed[i] = (int)((r >> 4) % 3); /* few distinct prompts: many hits */
            toks(t[i], 256, seed[i]);
            int n = 20 + (int)((r >> 12) % 150);
            int reuse = kvcache_seq_attach(c, &s[i], t[i], n, n - 1, (r & 1) ? "x" : NULL, it);
            T_ASSERT(reuse % BS == 0 && reuse < n);
            int kb = reuse / BS, lo = reuse - 31 > 0 ? (reuse - 31) / BS : 0;
            for (int lb = 0; lb < kb; lb++)
                T_ASSERTF(shadow_f[s[i].full[lb]] == seed[i] * 1000 + lb, "stale FULL block");
            for (int lb = lo; lb < kb; lb++)
                T_ASSERTF(s[i].slot_lb[lb % 5] == lb &&
                              shadow_s[s[i].swa[lb % 5]] == seed[i] * 1000 + lb,
                          "stale SWA block");
            if (kvcache_seq_fill_ring(c, &s[i]) != KVCACHE_OK) {
                kvcache_seq_release(c, &s[i]);
                continue;
            }
            len[i] = reuse;
            active[i] = 1;
        } else if (op == 0) {
            if (r & 2) kvcache_session_put(c, "x", &s[i], t[i], len[i], it);
            else kvcache_seq_release(c, &s[i]);
            len[i] = active[i] = 0;
        } else {
            int n = 1 + (int)((r >> 4) % 20);
            if (len[i] + n > 256) n = 256 - len[i];
            if (n < 1) {
                kvcache_seq_release(c, &s[i]);
                len[i] = active[i] = 0;
                continue;
            }
            if (kvcache_seq_prepare(c, &s[i], len[i], n) == KVCACHE_OK) {
                for (int lb = len[i] / BS; lb <= (len[i] + n - 1) / BS; lb++) {
                    shadow_f[s[i].full[lb]] = seed[i] * 1000 + lb;
                    shadow_s[s[i].swa[lb % 5]] = seed[i] * 1000 + lb;
                }
                len[i] += n;
                kvcache_seq_commit(c, &s[i], t[i], len[i]);
            }
        }
        if (it % 97 == 0) check_accounting(c);
    }
    for (int i = 0; i < NS; i++) {
        kvcache_seq_release(c, &s[i]);
        kvcache_seq_free(&s[i]);
    }
    while (kvcache_session_drop_lru(c)) {
    }
    struct kvcache_stats st;
    kvcache_get_stats(c, &st);
    T_ASSERT(st.used[0] == 0 && st.used[1] == 0);
    T_ASSERT(st.hits > 0);
    check_accounting(c);
    kvcache_destroy(c);
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {
        T_CASE(test_alloc_and_release), T_CASE(test_exhaustion_keeps_blocks),
        T_CASE(test_prefix_hit_and_chain), T_CASE(test_lru_eviction_order),
        T_CASE(test_swa_ring), T_CASE(test_swa_prefix_reuse), T_CASE(test_session_resume),
        T_CASE(test_random_stress), {0}};
    return t_main(argc, argv, cases);
}
