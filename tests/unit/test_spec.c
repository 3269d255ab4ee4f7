/* Speculative decoding (scheduler/spec.h): prompt lookup, the back-off, verification against
 * plain sequential sampling (greedy and seeded, tokens, RNG state and logprobs), and KV
 * rollback: rejected draft rows in FULL blocks and in the sliding-window ring never hide or
 * corrupt a position a later query reads, with the prefix cache on, and every block comes
 * back. The end-to-end check (same output with and without speculation on the bundled
 * model) is tests/integration/test_spec.py; test_sched runs with speculation on too. */
#include <string.h>

#include "scheduler/kvcache.h"
#include "scheduler/sample.h"
#include "scheduler/spec.h"
#include "tests/unit/harness.h"

static void test_lookup(void) {
    int32_t d[SPEC_MAX_DRAFT];
    /* No repeated bigram: nothing. */
    const int32_t a[] = {1, 2, 3, 4, 5, 6};
    T_ASSERT(spec_lookup(a, 6, 4, d, NULL) == 0);
    /* A single-token match is not enough (SPEC_NGRAM_MIN = 2). */
    const int32_t b[] = {7, 1, 9, 9, 8, 1};
    T_ASSERT(spec_lookup(b, 6, 4, d, NULL) == 0);
    /* "5 6" occurred before, followed by 7 8 9 ... */
    const int32_t c[] = {5, 6, 7, 8, 9, 1, 2, 5, 6};
    T_ASSERT(spec_lookup(c, 9, 3, d, NULL) == 3);
    T_ASSERT(d[0] == 7 && d[1] == 8 && d[2] == 9);
    /* The longest suffix match wins over a more recent shorter one: "1 2 3" at 0 vs "2 3"
     * at 5. */
    const int32_t e[] = {1, 2, 3, 40, 41, 2, 3, 50, 51, 1, 2, 3};
    T_ASSERT(spec_lookup(e, 12, 2, d, NULL) == 2);
    T_ASSERT(d[0] == 40 && d[1] == 41);
    /* Among equal matches the most recent one. */
    const int32_t f[] = {1, 2, 30, 1, 2, 31, 1, 2};
    T_ASSERT(spec_lookup(f, 8, 1, d, NULL) == 1 && d[0] == 31);
    /* Periodic continuation past the end of the history: "... 4 5 4 5" -> 4 5 4 5 ... */
    const int32_t g[] = {9, 4, 5, 4, 5};
    T_ASSERT(spec_lookup(g, 5, 5, d, NULL) == 5);
    T_ASSERT(d[0] == 4 && d[1] == 5 && d[2] == 4 && d[3] == 5 && d[4] == 4);
    /* max_draft is capped by SPEC_MAX_DRAFT; tiny histories propose nothing. */
    const int32_t h[] = {3, 3, 3, 3};
    T_ASSERT(spec_lookup(h, 4, 100, d, NULL) == SPEC_MAX_DRAFT);
    T_ASSERT(spec_lookup(h, 2, 4, d, NULL) == 0);
    T_ASSERT(spec_lookup(h, 4, 0, d, NULL) == 0);
}

/* The copy's alignment (spec_lookup's *align): the text being copied goes on, over a newer
 * occurrence, while it matches; a single token is enough only where the copy is expected. */
static void test_lookup_align(void) {
    int32_t d[SPEC_MAX_DRAFT];
    /* "1 2 3" occurs at 0 and at 5 (then 9); the history ends "1 2 3". Newest of the equal
     * matches: 9, and the alignment is taken from it; aligned with the copy of position 0
     * (x = 12 - 10 = 2): 4. */
    const int32_t h1[] = {1, 2, 3, 4, 5, 1, 2, 3, 9, 7, 1, 2, 3};
    int align = 0;
    T_ASSERT(spec_lookup(h1, 13, 1, d, &align) == 1 && d[0] == 9 && align == 5);
    align = 10;
    T_ASSERT(spec_lookup(h1, 13, 2, d, &align) == 2 && d[0] == 4 && d[1] == 5 && align == 10);
    /* One matching token at x: the model replaced a token ("... 3 8") and then wrote 5, as
     * the source has at x = 14 - 10 = 4. */
    const int32_t h2[] = {1, 2, 3, 4, 5, 1, 2, 3, 9, 7, 1, 2, 3, 8, 5};
    align = 10;
    T_ASSERT(spec_lookup(h2, 15, 2, d, &align) == 2 && d[0] == 1 && d[1] == 2 && align == 10);
    /* After x a single token is not enough (the lone 3 at 5 would give 7), a bigram is (at
     * 8: 5); without the alignment the longest match wins ("1 2 3" at 2: 4). */
    const int32_t h3[] = {1, 2, 3, 4, 0, 3, 7, 2, 3, 5, 1, 2, 3};
    align = 8; /* x = 4 */
    T_ASSERT(spec_lookup(h3, 13, 1, d, &align) == 1 && d[0] == 5 && align == 4);
    align = 0;
    T_ASSERT(spec_lookup(h3, 13, 1, d, &align) == 1 && d[0] == 4 && align == 10);
    /* Nothing at or after x - 1: the newest longest match, and the alignment moves; an
     * alignment beyond the history's start is ignored. */
    const int32_t h4[] = {5, 6, 30, 7, 8, 5, 6};
    align = 1;
    T_ASSERT(spec_lookup(h4, 7, 1, d, &align) == 1 && d[0] == 30 && align == 5);
    align = 50;
    T_ASSERT(spec_lookup(h4, 7, 1, d, &align) == 1 && d[0] == 30 && align == 5);
}

static void test_backoff(void) {
    struct spec_state st;
    spec_init(&st, 0);
    T_ASSERT(spec_budget(&st, 8) == 0); /* off */
    spec_init(&st, 1);
    T_ASSERT(spec_budget(&st, 8) == SPEC_START_DRAFT);
    T_ASSERT(spec_budget(&st, 2) == 2);
    T_ASSERT(spec_budget(&st, 0) == 0);
    /* Full acceptance doubles the limit up to SPEC_MAX_DRAFT. */
    spec_feedback(&st, 4, 4);
    T_ASSERT(st.limit == 8);
    spec_feedback(&st, 8, 8);
    T_ASSERT(st.limit == SPEC_MAX_DRAFT);
    /* Partial acceptance: one more than accepted. */
    spec_feedback(&st, 8, 2);
    T_ASSERT(st.limit == 3 && st.misses == 0);
    /* Misses: cooldowns 0, 1, 2, ... steps with no lookup (one more per consecutive miss)
     * up to SPEC_MAX_COOLDOWN, limit halves to 1. */
    for (int m = 0; m < SPEC_MAX_COOLDOWN + 3; m++) {
        spec_feedback(&st, 1, 0);
        const int expect = m < SPEC_MAX_COOLDOWN ? m : SPEC_MAX_COOLDOWN;
        T_ASSERTF(st.cooldown == expect, "miss %d: cooldown %d", m + 1, st.cooldown);
        T_ASSERT(st.limit == 1 || m < 3);
        for (int k = 0; k < expect; k++) T_ASSERT(spec_budget(&st, 8) == 0);
        T_ASSERT(spec_budget(&st, 8) == 1);
    }
    /* In steady misses at most one drafted row per 33 steps. */
    int drafted = 0;
    for (int step = 0; step < 3300; step++) {
        int k = spec_budget(&st, 8);
        if (k) {
            drafted += k;
            spec_feedback(&st, k, 0);
        }
    }
    T_ASSERT(drafted <= 100);
    /* One success resets the back-off. */
    while (spec_budget(&st, 8) == 0) {
    }
    spec_feedback(&st, 1, 1);
    T_ASSERT(st.misses == 0 && st.cooldown == 0 && st.limit == 2);
}

/* The cost model: estimates from measured step times, and draft lengths that pay. */
static void test_cost_model(void) {
    struct spec_cost c;
    memset(&c, 0, sizeof(c));
    T_ASSERT(spec_cost_est(&c, 1) == 0);
    T_ASSERT(spec_choose(&c, 1, 1.0, 0.99, 8) == 0); /* nothing measured: no drafts */
    spec_cost_observe(&c, 1, 0.010);
    /* Unmeasured bigger steps: SPEC_PRIOR_ROW of a 1-row step per extra row. */
    T_ASSERT(fabs(spec_cost_est(&c, 5) - 0.010 * (1 + 4 * SPEC_PRIOR_ROW)) < 1e-12);
    spec_cost_observe(&c, 9, 0.020);
    T_ASSERT(fabs(spec_cost_est(&c, 5) - 0.015) < 1e-12); /* interpolated */
    T_ASSERT(fabs(spec_cost_est(&c, 9) - 0.020) < 1e-12);
    spec_cost_observe(&c, 9, 0.030); /* an EMA, not the last value */
    T_ASSERT(spec_cost_est(&c, 9) > 0.020 && spec_cost_est(&c, 9) < 0.030);
    /* Linear costs 10 ms + 1 ms per extra row. */
    memset(&c, 0, sizeof(c));
    for (int n = 1; n <= SPEC_COST_ROWS; n++) spec_cost_observe(&c, n, 0.010 + 0.001 * (n - 1));
    T_ASSERT(spec_choose(&c, 1, 1.0, 0.95, 8) == 8);  /* near-certain drafts: all of them */
    T_ASSERT(spec_choose(&c, 1, 1.0, 0.02, 8) == 0);  /* hopeless ones: none */
    int k = spec_choose(&c, 1, 1.0, 0.5, 8);
    T_ASSERT(k >= 1 && k <= 4);                       /* half: a few */
    /* Joining a 16-row step (25 ms, 0.64 tokens per ms), an extra row (1 ms) must beat the
     * other rows' throughput: a fair draft no longer pays, a near-certain one does. */
    T_ASSERT(spec_choose(&c, 16, 16.0, 0.5, 8) == 0);
    T_ASSERT(spec_choose(&c, 16, 16.0, 0.98, 8) >= 4);
    /* Rows beyond the table are priced as the last one. */
    T_ASSERT(spec_cost_est(&c, 1000) == spec_cost_est(&c, SPEC_COST_ROWS));
}

#define NV 64

static void fill_rows(float *rows, int n, uint64_t *rs) {
    for (int i = 0; i < n * NV; i++)
        rows[i] = (float)((t_xorshift64(rs) >> 40) % 1000) / 100.0f - 5.0f;
}

/* spec_verify against the sampler called position by position with the accepted tokens
 * appended, as plain decoding would: same tokens, same logprobs, same RNG state after. */
static void verify_case(const struct sched_sampling *sp, uint64_t seed, int n_draft,
                        int n_good) {
    struct smp_ctx *c1, *c2;
    T_ASSERT(smp_ctx_create(NV, &c1) == 0 && smp_ctx_create(NV, &c2) == 0);
    float rows[(SPEC_MAX_DRAFT + 1) * NV], ref_rows[(SPEC_MAX_DRAFT + 1) * NV], tmp[NV];
    uint64_t rs = seed * 7 + 1;
    fill_rows(rows, n_draft + 1, &rs);
    memcpy(ref_rows, rows, sizeof(rows));
    int32_t hist[64], ref_hist[64];
    int n_hist = 10, n_out = 3;
    for (int i = 0; i < n_hist; i++) hist[i] = ref_hist[i] = (int32_t)(i * 5 % NV);
    /* Plain decoding first: n_good drafts equal to what it samples, then a wrong one. */
    struct smp_rng r1, r2;
    smp_rng_seed(&r1, seed);
    smp_rng_seed(&r2, seed);
    int32_t want[SPEC_MAX_DRAFT + 1];
    float want_lp[SPEC_MAX_DRAFT + 1];
    struct sched_top want_top[SPEC_MAX_DRAFT + 1][SPEC_MAX_TOP];
    int n_plain = n_good < n_draft ? n_good + 1 : n_draft + 1;
    for (int j = 0; j < n_plain; j++) {
        memcpy(tmp, ref_rows + j * NV, sizeof(tmp));
        want[j] = smp_sample(c1, sp, &r1, tmp, ref_hist, n_hist + j, n_out + j, NULL, 0);
        want_lp[j] = smp_logprobs(ref_rows + j * NV, NV, want[j], 3, want_top[j]);
        ref_hist[n_hist + j] = want[j];
    }
    for (int j = 0; j < n_draft; j++)
        hist[n_hist + j] = j < n_good ? want[j] : (j == n_good ? (want[j] + 1) % NV : 0);
    struct spec_state st;
    spec_init(&st, 1);
    struct spec_rows r = {.logits = rows, .n_vocab = NV, .scratch = tmp, .hist = hist,
                          .n_hist = n_hist, .n_out = n_out, .n_draft = n_draft,
                          .top_logprobs = 3};
    int n = spec_verify(&st, c2, sp, &r2, &r);
    T_ASSERT(n == n_plain && st.n_emit == n);
    for (int j = 0; j < n; j++) {
        T_ASSERT(st.tok[j] == want[j]);
        T_ASSERT(st.logprob[j] == want_lp[j]);
        for (int k = 0; k < 3; k++)
            T_ASSERT(st.top[j][k].token == want_top[j][k].token &&
                     st.top[j][k].logprob == want_top[j][k].logprob);
    }
    T_ASSERT(!memcmp(&r1, &r2, sizeof(r1)));
    smp_ctx_destroy(c1);
    smp_ctx_destroy(c2);
}

static void test_verify_equals_plain(void) {
    struct sched_sampling greedy = {.temperature = 0, .top_p = 1, .repetition_penalty = 1};
    struct sched_sampling hot = {.temperature = 0.9f, .top_k = 20, .top_p = 0.9f,
                                 .repetition_penalty = 1.1f, .frequency_penalty = 0.5f};
    for (uint64_t seed = 1; seed <= 40; seed++)
        for (int nd = 1; nd <= SPEC_MAX_DRAFT; nd += 3)
            for (int good = 0; good <= nd; good++) {
                verify_case(&greedy, seed, nd, good);
                verify_case(&hot, seed, nd, good);
            }
}

/* Verification stops at an end-of-generation token even when the drafts after it match:
 * plain decoding would have ended there. */
static void test_verify_stops_at_end(void) {
    struct smp_ctx *c;
    T_ASSERT(smp_ctx_create(NV, &c) == 0);
    float rows[4 * NV];
    memset(rows, 0, sizeof(rows));
    rows[0 * NV + 5] = 9; /* greedy picks 5, 1 (the end id), 7, 8 */
    rows[1 * NV + 1] = 9;
    rows[2 * NV + 7] = 9;
    rows[3 * NV + 8] = 9;
    int32_t hist[8] = {3, 4, 5, 5, 1, 7};
    const int32_t end[] = {1, 2};
    struct sched_sampling greedy = {.top_p = 1, .repetition_penalty = 1};
    struct smp_rng rng;
    smp_rng_seed(&rng, 1);
    struct spec_state st;
    spec_init(&st, 1);
    struct spec_rows r = {.logits = rows, .n_vocab = NV, .hist = hist, .n_hist = 3, .n_out = 0,
                          .n_draft = 3, .end = end, .n_end = 2, .top_logprobs = -1};
    T_ASSERT(spec_verify(&st, c, &greedy, &rng, &r) == 2);
    T_ASSERT(st.tok[0] == 5 && st.tok[1] == 1);
    smp_ctx_destroy(c);
}

/* A sequence decoding with drafts over a sliding-window ring: every step writes its rows
 * (the decode row and k drafts) into the blocks kvcache_seq_prepare made writable, then
 * accepts a random number of them. Before each step, each position a query of the step can
 * read (the window before n_kv) must hold what its accepted step wrote. */
static void test_rollback_ring(void) {
    enum { BS = 4, W = 10, MAXNEW = 16, NPOS = 700 };
    int ring = (W + MAXNEW - 2) / BS + 2; /* kvstore_swa_ring_blocks */
    struct kvcache_opts o = {.n_full = 400, .n_swa = 4 * ring, .block_size = BS, .window = W,
                             .ring = ring, .max_seq_blocks = 256, .prefix_cache = 1};
    struct kvcache *c;
    T_ASSERT(kvcache_create(&o, &c) == KVCACHE_OK);
    const int full0 = kvcache_available(c, 0, 1), swa0 = kvcache_available(c, 1, 1);
    static int32_t tag_full[400][BS], tag_swa[64][BS]; /* what each block slot holds */
    static int32_t accepted[NPOS + 64], toks[NPOS + 64];
    struct kvcache_seq s;
    T_ASSERT(kvcache_seq_init(c, &s) == KVCACHE_OK);
    T_ASSERT(kvcache_seq_fill_ring(c, &s) == KVCACHE_OK);
    uint64_t rs = 12345;
    int n_kv = 0, step = 0;
    for (int i = 0; i < NPOS + 64; i++) toks[i] = i % 7; /* repetitive: blocks get cached */
    while (n_kv < NPOS) {
        int k = n_kv == 0 ? 5 : (int)(t_xorshift64(&rs) % (SPEC_MAX_DRAFT + 1));
        int n = 1 + k;
        T_ASSERT(kvcache_seq_prepare(c, &s, n_kv, n) == KVCACHE_OK);
        step++;
        for (int p = n_kv; p < n_kv + n; p++) {
            int lb = p / BS;
            T_ASSERT(lb < s.n_full);
            int j = lb % ring;
            T_ASSERT(s.slot_lb[j] == lb && s.swa[j] >= 0);
            /* A rejected row carries a wrong token; the tag says which step wrote it. */
            tag_full[s.full[lb]][p % BS] = step * 1000 + (p - n_kv);
            tag_swa[s.swa[j]][p % BS] = step * 1000 + (p - n_kv);
        }
        int a = n_kv == 0 ? k : (int)(t_xorshift64(&rs) % (k + 1));
        for (int p = n_kv; p <= n_kv + a; p++) accepted[p] = step * 1000 + (p - n_kv);
        n_kv += 1 + a;
        kvcache_seq_commit(c, &s, toks, n_kv);
        /* What the next step's first query (at n_kv) reads. */
        int lo = n_kv - W + 1 > 0 ? n_kv - W + 1 : 0;
        for (int p = lo; p < n_kv; p++) {
            int lb = p / BS, j = lb % ring;
            T_ASSERT(s.slot_lb[j] == lb);
            T_ASSERT(tag_swa[s.swa[j]][p % BS] == accepted[p]);
        }
        for (int p = 0; p < n_kv; p++) T_ASSERT(tag_full[s.full[p / BS]][p % BS] == accepted[p]);
        /* Blocks held: what the accepted positions need plus what the longest draft adds. */
        T_ASSERT(s.n_full <= (n_kv + SPEC_MAX_DRAFT) / BS + 1);
    }
    kvcache_seq_release(c, &s);
    T_ASSERT(kvcache_available(c, 0, 1) == full0);
    T_ASSERT(kvcache_available(c, 1, 1) == swa0);
    kvcache_seq_free(&s);
    kvcache_destroy(c);
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {T_CASE(test_lookup),
                                          T_CASE(test_lookup_align),
                                          T_CASE(test_backoff),
                                          T_CASE(test_cost_model),
                                          T_CASE(test_verify_equals_plain),
                                          T_CASE(test_verify_stops_at_end),
                                          T_CASE(test_rollback_ring), {0}};
    return t_main(argc, argv, cases);
}
