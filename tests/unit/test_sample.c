/* Unit tests for scheduler/sample: every knob, RNG determinism, raw logprobs. */
#include "base/clock.h"
#include "scheduler/sample.h"
#include "tests/unit/harness.h"


static struct sched_sampling greedy(void) {
    struct sched_sampling sp = {.temperature = 0, .top_p = 1, .repetition_penalty = 1};
    return sp;
}

static struct smp_ctx *ctx(int nv) {
    struct smp_ctx *c = NULL;
    T_ASSERT(smp_ctx_create(nv, &c) == 0 && c);
    return c;
}

/* Draw `n` tokens from logits (copied each time) and count them. */
static void histogram(struct smp_ctx *c, const struct sched_sampling *sp, const float *l0, int nv,
                      int n, int *count, uint64_t seed) {
    struct smp_rng r;
    smp_rng_seed(&r, seed);
    float *l = malloc((size_t)nv * sizeof(float));
    memset(count, 0, (size_t)nv * sizeof(int));
    for (int i = 0; i < n; i++) {
        memcpy(l, l0, (size_t)nv * sizeof(float));
        int32_t t = smp_sample(c, sp, &r, l, NULL, 0, 0, NULL, 0);
        T_ASSERT(t >= 0 && t < nv);
        count[t]++;
    }
    free(l);
}

static void test_rng(void) {
    struct smp_rng a, b, d;
    smp_rng_seed(&a, 42);
    smp_rng_seed(&b, 42);
    smp_rng_seed(&d, 43);
    int differ = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = smp_rng_next(&a), y = smp_rng_next(&b), z = smp_rng_next(&d);
        T_ASSERT(x == y);
        differ += x != z;
    }
    T_ASSERT(differ > 990);
    double sum = 0;
    for (int i = 0; i < 100000; i++) {
        double u = smp_rng_uniform(&a);
        T_ASSERT(u >= 0 && u < 1);
        sum += u;
    }
    T_ASSERT(fabs(sum / 100000 - 0.5) < 0.01);
}

static void test_greedy_and_ties(void) {
    struct smp_ctx *c = ctx(5);
    struct sched_sampling sp = greedy();
    float l[5] = {1, 3, 2, 3, -1};
    T_ASSERT(smp_sample(c, &sp, NULL, l, NULL, 0, 0, NULL, 0) == 1); /* tie: lower id */
    float l2[5] = {1, 3, 2, 3, -1};
    int32_t ban[1] = {1};
    T_ASSERT(smp_sample(c, &sp, NULL, l2, NULL, 0, 0, ban, 1) == 3);
    smp_ctx_destroy(c);
}

/* smp_argmax (two-pass, vectorisable) against the plain first-maximum loop: random
 * vocabularies of every length 1..70 and 262,144, ties, -inf, NaNs, max in the tail. */
static void test_argmax_matches_loop(void) {
    const int big = 262144;
    float *l = malloc((size_t)big * sizeof(float));
    T_ASSERT(l);
    uint32_t x = 12345;
    for (int trial = 0; trial < 400; trial++) {
        int n = trial < 70 ? trial + 1 : (trial % 4 == 0 ? big : 1 + trial * 37 % 5000);
        for (int i = 0; i < n; i++) {
            x = x * 1664525u + 1013904223u;
            l[i] = (float)(x >> 8 & 0xffff) / 4096.0f - 8.0f; /* coarse: many ties */
            if ((x & 0xff) == 7) l[i] = NAN;
            if ((x & 0xff) == 9) l[i] = -INFINITY;
        }
        int32_t want = 0;
        int any = 0;
        for (int32_t i = 0; i < n; i++)
            if (l[i] == l[i] && (!any || l[i] > l[want])) {
                if (!any && l[i] == -INFINITY) continue;
                want = i;
                any = 1;
            }
        T_ASSERTF(smp_argmax(l, n) == want, "n %d: got %d want %d", n, smp_argmax(l, n),
                  want);
    }
    for (int i = 0; i < 100; i++) l[i] = -INFINITY;
    T_ASSERT(smp_argmax(l, 100) == 0);
    l[0] = NAN;
    T_ASSERT(smp_argmax(l, 100) == 0);
    l[99] = 1.0f;
    T_ASSERT(smp_argmax(l, 100) == 99);
    free(l);
}

/* smp_exp_le0 against expf on [-87, 0]: relative error within a few ulp; 0 below -87. */
static void test_exp_le0(void) {
    double worst = 0;
    for (int k = 0; k <= 870000; k++) {
        const float x = -87.0f * (float)k / 870000.0f;
        const double want = exp((double)x), got = smp_exp_le0(x);
        const double rel = fabs(got - want) / want;
        if (rel > worst) worst = rel;
    }
    T_ASSERTF(worst < 5e-7, "max relative error %g", worst);
    T_ASSERT(smp_exp_le0(0.0f) == 1.0f);
    T_ASSERT(smp_exp_le0(-88.0f) == 0.0f && smp_exp_le0(-INFINITY) == 0.0f);
}

static void test_temperature_distribution(void) {
    struct smp_ctx *c = ctx(3);
    struct sched_sampling sp = greedy();
    sp.temperature = 1;
    float l[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    int cnt[3];
    histogram(c, &sp, l, 3, 20000, cnt, 7);
    T_ASSERTF(abs(cnt[0] - 10000) < 400 && abs(cnt[1] - 6000) < 400 && abs(cnt[2] - 4000) < 400,
              "%d %d %d", cnt[0], cnt[1], cnt[2]);
    /* Temperature 0.5 squares the odds: 25:9:4. */
    sp.temperature = 0.5f;
    histogram(c, &sp, l, 3, 20000, cnt, 8);
    T_ASSERTF(abs(cnt[0] - 20000 * 25 / 38) < 400 && abs(cnt[2] - 20000 * 4 / 38) < 300,
              "%d %d %d", cnt[0], cnt[1], cnt[2]);
    smp_ctx_destroy(c);
}

static void test_top_k_top_p_min_p(void) {
    struct smp_ctx *c = ctx(4);
    struct sched_sampling sp = greedy();
    sp.temperature = 1;
    float l[4] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)};
    int cnt[4];
    sp.top_k = 1;
    histogram(c, &sp, l, 4, 2000, cnt, 1);
    T_ASSERT(cnt[0] == 2000);
    sp.top_k = 2;
    histogram(c, &sp, l, 4, 4000, cnt, 2);
    T_ASSERT(cnt[2] == 0 && cnt[3] == 0 && cnt[0] > cnt[1] && cnt[1] > 1200);
    sp.top_k = 0;
    sp.top_p = 0.65f; /* 0.4 + 0.3 >= 0.65 */
    histogram(c, &sp, l, 4, 4000, cnt, 3);
    T_ASSERT(cnt[2] == 0 && cnt[3] == 0 && cnt[1] > 1200);
    sp.top_p = 0.35f;
    histogram(c, &sp, l, 4, 1000, cnt, 4);
    T_ASSERT(cnt[0] == 1000);
    sp.top_p = 1;
    sp.min_p = 0.5f; /* keep p >= 0.2 */
    histogram(c, &sp, l, 4, 4000, cnt, 5);
    T_ASSERT(cnt[3] == 0 && cnt[2] > 500);
    sp.min_p = 0.6f; /* keep p >= 0.24 */
    histogram(c, &sp, l, 4, 4000, cnt, 6);
    T_ASSERT(cnt[2] == 0 && cnt[3] == 0);
    smp_ctx_destroy(c);
}

/* top_p over a large vocabulary exercises the growing partial selection. */
static void test_top_p_large_vocab(void) {
    int nv = 262144;
    struct smp_ctx *c = ctx(nv);
    float *l0 = malloc((size_t)nv * sizeof(float)), *l = malloc((size_t)nv * sizeof(float));
    unsigned s = 1;
    for (int i = 0; i < nv; i++) {
        s = s * 1103515245u + 12345u;
        l0[i] = (float)((s >> 8) % 1000) / 100.0f; /* flat-ish: many candidates survive */
    }
    struct sched_sampling sp = greedy();
    sp.temperature = 1;
    sp.top_p = 0.9f;
    struct smp_rng r1, r2;
    smp_rng_seed(&r1, 99);
    smp_rng_seed(&r2, 99);
    double t0 = clock_mono_s();
    for (int i = 0; i < 20; i++) {
        memcpy(l, l0, (size_t)nv * sizeof(float));
        int32_t a = smp_sample(c, &sp, &r1, l, NULL, 0, 0, NULL, 0);
        memcpy(l, l0, (size_t)nv * sizeof(float));
        int32_t b = smp_sample(c, &sp, &r2, l, NULL, 0, 0, NULL, 0);
        T_ASSERT(a == b && l0[a] >= 2.0f); /* bottom tenth never survives 0.9 */
    }
    double ms = (clock_mono_s() - t0) * 1e3 / 40;
    printf("    top_p over 262144 ids: %.2f ms per token\n", ms);
    free(l0);
    free(l);
    smp_ctx_destroy(c);
}

static void test_penalties(void) {
    struct smp_ctx *c = ctx(6);
    struct sched_sampling sp = greedy();
    int32_t hist[6] = {4, 5, /* prompt */ 0, 0, 1, 4};
    /* presence/frequency over the output only: t0 x2, t1 x1, t4 x1; t5 only in the prompt. */
    sp.presence_penalty = 0.5f;
    sp.frequency_penalty = 0.25f;
    float l[6] = {2, 2, 2, 2, 2, 2};
    smp_sample(c, &sp, NULL, l, hist, 6, 4, NULL, 0);
    T_ASSERT(fabsf(l[0] - (2 - 0.5f - 0.5f)) < 1e-6f);
    T_ASSERT(fabsf(l[1] - (2 - 0.5f - 0.25f)) < 1e-6f);
    T_ASSERT(fabsf(l[4] - (2 - 0.5f - 0.25f)) < 1e-6f);
    T_ASSERT(l[2] == 2 && l[3] == 2 && l[5] == 2);
    /* repetition (llama.cpp) over prompt + output, once per distinct id. */
    sp = greedy();
    sp.repetition_penalty = 2;
    float m[6] = {4, -4, 4, 4, -2, 6};
    T_ASSERT(smp_sample(c, &sp, NULL, m, hist, 6, 4, NULL, 0) == 2);
    T_ASSERT(m[0] == 2 && m[1] == -8 && m[2] == 4 && m[4] == -4 && m[5] == 3);
    /* The scratch is clean again: a call without penalties changes nothing. */
    sp = greedy();
    float n[6] = {1, 2, 3, 4, 5, 6};
    T_ASSERT(smp_sample(c, &sp, NULL, n, hist, 6, 4, NULL, 0) == 5 && n[0] == 1 && n[4] == 5);
    smp_ctx_destroy(c);
}

static void test_logit_bias(void) {
    struct smp_ctx *c = ctx(5);
    struct sched_sampling sp = greedy();
    struct sched_bias b[2] = {{2, 100}, {4, -100}};
    sp.logit_bias = b;
    sp.n_logit_bias = 2;
    float l[5] = {5, 4, -3, 1, 9};
    T_ASSERT(smp_sample(c, &sp, NULL, l, NULL, 0, 0, NULL, 0) == 2);
    sp.temperature = 1;
    struct smp_rng r;
    smp_rng_seed(&r, 3);
    for (int i = 0; i < 200; i++) {
        float m[5] = {5, 4, -3, 1, 9};
        b[0].bias = 0;
        T_ASSERT(smp_sample(c, &sp, &r, m, NULL, 0, 0, NULL, 0) != 4);
    }
    smp_ctx_destroy(c);
}

/* Same seed and logits: same tokens, no matter what else the context sampled meanwhile. */
static void test_seed_determinism(void) {
    int nv = 1000;
    struct smp_ctx *c = ctx(nv);
    float *l0 = malloc(nv * sizeof(float)), *l = malloc(nv * sizeof(float));
    for (int i = 0; i < nv; i++) l0[i] = sinf((float)i * 0.37f) * 3;
    struct sched_sampling sp = greedy();
    sp.temperature = 0.8f;
    sp.top_k = 50;
    sp.top_p = 0.95f;
    int32_t ref[64];
    struct smp_rng r, other;
    smp_rng_seed(&r, 1234);
    for (int i = 0; i < 64; i++) {
        memcpy(l, l0, nv * sizeof(float));
        ref[i] = smp_sample(c, &sp, &r, l, NULL, 0, 0, NULL, 0);
    }
    smp_rng_seed(&r, 1234);
    smp_rng_seed(&other, 5);
    int differ = 0;
    for (int i = 0; i < 64; i++) {
        memcpy(l, l0, nv * sizeof(float));
        l[i] += 1; /* an unrelated request with other logits in between */
        smp_sample(c, &sp, &other, l, NULL, 0, 0, NULL, 0);
        memcpy(l, l0, nv * sizeof(float));
        int32_t t = smp_sample(c, &sp, &r, l, NULL, 0, 0, NULL, 0);
        T_ASSERT(t == ref[i]);
        differ += t != ref[0];
    }
    T_ASSERT(differ > 0); /* it really samples */
    free(l0);
    free(l);
    smp_ctx_destroy(c);
}

static void test_logprobs(void) {
    float l[6] = {1, 3, 2, 3, -1, 0};
    struct sched_top top[20];
    double z = 0;
    for (int i = 0; i < 6; i++) z += exp(l[i]);
    float lp = smp_logprobs(l, 6, 2, 3, top);
    T_ASSERT(fabs(lp - (2 - log(z))) < 1e-5);
    T_ASSERT(top[0].token == 1 && top[1].token == 3 && top[2].token == 2);
    T_ASSERT(fabs(top[0].logprob - (3 - log(z))) < 1e-5);
    T_ASSERT(top[0].logprob >= top[1].logprob && top[1].logprob >= top[2].logprob);
    /* n_top larger than the vocab: all of them, sorted. */
    smp_logprobs(l, 6, 0, 6, top);
    T_ASSERT(top[5].token == 4 && top[4].token == 5);
}

/* ---- top-k candidates (smp_sample_topk) ---- */

static const float *g_topk_l;
static int cmp_best(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    float x = g_topk_l[a], y = g_topk_l[b];
    if (x != x || y != y) return (x != x) - (y != y) ? (x != x) - (y != y) : (a > b) - (a < b);
    if (x != y) return x > y ? -1 : 1;
    return (a > b) - (a < b);
}

/* The reference candidates: sort every id by scaled logit (NaNs last), take n. */
static void ref_topk(const float *l, int nv, float scale, int n, int32_t *id, float *val,
                     int32_t *order, float *scaled) {
    for (int i = 0; i < nv; i++) scaled[i] = l[i] * scale, order[i] = i;
    g_topk_l = scaled;
    qsort(order, (size_t)nv, sizeof(int32_t), cmp_best);
    for (int j = 0; j < n; j++) {
        const int ok = j < nv && scaled[order[j]] == scaled[order[j]];
        id[j] = ok ? order[j] : -1;
        val[j] = ok ? scaled[order[j]] : NAN;
    }
}

static uint64_t inv_odd(uint64_t x) { /* x^-1 mod 2^64, x odd (Newton) */
    uint64_t y = x;
    for (int i = 0; i < 6; i++) y *= 2 - x * y;
    return y;
}

/* An RNG state whose next smp_rng_uniform is k * 2^-53 (xoshiro256**'s output is
 * rotl(s[1] * 5, 7) * 9, invertible in s[1]). */
static struct smp_rng rng_at(uint64_t k) {
    struct smp_rng r = {{1, 0, 3, 4}};
    const uint64_t x = (k << 11) * inv_odd(9), y = (x >> 7) | (x << 57);
    r.s[1] = y * inv_odd(5);
    return r;
}

static int32_t full_at(struct smp_ctx *c, const struct sched_sampling *sp, const float *l0,
                       float *l, int nv, uint64_t k) {
    struct smp_rng r = rng_at(k);
    memcpy(l, l0, (size_t)nv * sizeof(float));
    return smp_sample(c, sp, &r, l, NULL, 0, 0, NULL, 0);
}

/* Where the full path's token changes between draws k0 and the largest one (bisection over
 * the 53-bit draws): both paths must agree on the two draws either side of the boundary,
 * which a different rounding of any mass sum would move. Returns 1 when a boundary exists. */
static int boundary_agrees(struct smp_ctx *c, struct smp_ctx *c2,
                           const struct sched_sampling *sp, const float *l0, float *l, int nv,
                           const int32_t *id, const float *val, int n_cand, uint64_t k0) {
    uint64_t lo = k0, hi = (1ull << 53) - 1;
    const int32_t tlo = full_at(c, sp, l0, l, nv, lo);
    if (full_at(c, sp, l0, l, nv, hi) == tlo) return 0;
    while (hi - lo > 1) {
        const uint64_t mid = lo + (hi - lo) / 2;
        if (full_at(c, sp, l0, l, nv, mid) == tlo) lo = mid;
        else hi = mid;
    }
    for (uint64_t k = lo; k <= hi; k++) {
        struct smp_rng r = rng_at(k);
        T_ASSERTF(smp_sample_topk(c2, sp, &r, id, val, n_cand) == full_at(c, sp, l0, l, nv, k),
                  "draw %llu at a boundary", (unsigned long long)k);
    }
    return 1;
}

/* Random rows (ties, -inf, several draw blocks) under many settings: the candidate path
 * gives smp_sample's token and leaves the RNG in the same state. */
static void test_topk_candidates_exact(void) {
    static const int nvs[] = {65, 300, 1000, 4099};
    static const float temps[] = {1.0f, 0.7f, 1.3f, 0.3f, 2.5f, 0.01f};
    static const float top_ps[] = {1.0f, 0.95f, 0.9f, 0.5f, 0.1f, 0.999f};
    static const float min_ps[] = {0.0f, 0.05f, 0.3f, 1.0f};
    struct smp_rng seeder;
    smp_rng_seed(&seeder, 7);
    int checked = 0, differ_from_argmax = 0, boundaries = 0;
    for (size_t vi = 0; vi < sizeof nvs / sizeof nvs[0]; vi++) {
        const int nv = nvs[vi];
        struct smp_ctx *c = ctx(nv), *c2 = ctx(nv);
        float *l0 = malloc((size_t)nv * sizeof(float)), *l = malloc((size_t)nv * sizeof(float));
        float *scaled = malloc((size_t)nv * sizeof(float));
        int32_t *order = malloc((size_t)nv * sizeof(int32_t));
        for (int rep = 0; rep < 150; rep++) {
            const int style = rep % 5;
            for (int i = 0; i < nv; i++) {
                const double u = smp_rng_uniform(&seeder);
                float v = (float)(u * 16.0 - 8.0);
                if (style == 1) v = (float)(int)(u * 6.0) * 0.5f; /* many ties */
                if (style == 2 && smp_rng_uniform(&seeder) < 0.5) v = -INFINITY;
                if (style == 3) v = (float)(u * 1e-3); /* near-equal: ties after scaling */
                if (style == 4 && i % 7) v = -INFINITY; /* few finite ids */
                l0[i] = v;
            }
            if (rep % 31 == 0)
                for (int i = 0; i < nv; i++) l0[i] = -INFINITY; /* all banned */
            struct sched_sampling sp = greedy();
            sp.temperature = temps[rep % 6];
            sp.top_k = 1 + (int)(smp_rng_next(&seeder) % SMP_TOPK_MAX);
            if (sp.top_k >= nv) sp.top_k = nv - 1;
            sp.top_p = top_ps[(rep / 6) % 6];
            sp.min_p = min_ps[(rep / 3) % 4];
            const int n_cand = rep % 2 ? SMP_TOPK_MAX : sp.top_k;
            T_ASSERT(smp_topk_ok(&sp, nv, n_cand));
            int32_t id[SMP_TOPK_MAX];
            float val[SMP_TOPK_MAX];
            ref_topk(l0, nv, smp_inv_temp(&sp), n_cand, id, val, order, scaled);
            for (int seed = 0; seed < 4; seed++) {
                struct smp_rng a, b;
                smp_rng_seed(&a, (uint64_t)rep * 131u + (uint64_t)seed);
                b = a;
                memcpy(l, l0, (size_t)nv * sizeof(float));
                const int32_t want = smp_sample(c, &sp, &a, l, NULL, 0, 0, NULL, 0);
                const int32_t got = smp_sample_topk(c2, &sp, &b, id, val, n_cand);
                T_ASSERTF(got == want, "nv %d rep %d seed %d top_k %d top_p %g min_p %g t %g: "
                          "%d != %d", nv, rep, seed, sp.top_k, sp.top_p, sp.min_p,
                          sp.temperature, got, want);
                T_ASSERT(memcmp(&a, &b, sizeof a) == 0);
                differ_from_argmax += want != smp_argmax(l0, nv);
                checked++;
            }
            boundaries += boundary_agrees(c, c2, &sp, l0, l, nv, id, val, n_cand,
                                          smp_rng_next(&seeder) >> 11);
        }
        smp_ctx_destroy(c);
        smp_ctx_destroy(c2);
        free(l0), free(l), free(scaled), free(order);
    }
    T_ASSERT(checked == 4 * 150 * 4);
    T_ASSERT(differ_from_argmax > checked / 10); /* the draws really sample */
    T_ASSERT(boundaries > 150);
    struct smp_rng r = rng_at(12345);
    T_ASSERT(smp_rng_uniform(&r) == 12345 * 0x1p-53);
}

/* Settings the candidates cannot serve are refused without a draw; NaN rows never give a
 * NaN id. */
static void test_topk_candidates_rules(void) {
    struct smp_ctx *c = ctx(100);
    struct sched_sampling sp = greedy();
    sp.temperature = 1, sp.top_k = 10;
    T_ASSERT(smp_topk_ok(&sp, 100, 64));
    T_ASSERT(!smp_topk_ok(&sp, 100, 9));  /* fewer candidates than top_k */
    T_ASSERT(!smp_topk_ok(&sp, 10, 64));  /* top_k reaches the vocabulary: no cut */
    sp.top_k = SMP_TOPK_MAX + 1;
    T_ASSERT(!smp_topk_ok(&sp, 1000, SMP_TOPK_MAX + 1));
    sp.top_k = 0;
    T_ASSERT(!smp_topk_ok(&sp, 100, 64));
    sp.top_k = 10;
    struct sched_sampling g = sp;
    g.temperature = 0;
    T_ASSERT(!smp_topk_ok(&g, 100, 64));
    struct sched_bias lb = {.token = 3, .bias = 1.0f};
    g = sp, g.logit_bias = &lb, g.n_logit_bias = 1;
    T_ASSERT(!smp_topk_ok(&g, 100, 64));
    g = sp, g.repetition_penalty = 1.1f;
    T_ASSERT(!smp_topk_ok(&g, 100, 64));
    g = sp, g.presence_penalty = 0.5f;
    T_ASSERT(!smp_topk_ok(&g, 100, 64));
    g = sp, g.frequency_penalty = 0.5f;
    T_ASSERT(!smp_topk_ok(&g, 100, 64));
    struct smp_rng a, b;
    smp_rng_seed(&a, 1);
    b = a;
    int32_t id[64];
    float val[64];
    T_ASSERT(smp_sample_topk(c, &g, &a, id, val, 64) == -1 && memcmp(&a, &b, sizeof a) == 0);
    /* Every id NaN: token 0 without a draw, as smp_sample. */
    for (int j = 0; j < 64; j++) id[j] = -1, val[j] = NAN;
    T_ASSERT(smp_sample_topk(c, &sp, &a, id, val, 64) == 0 && memcmp(&a, &b, sizeof a) == 0);
    /* Three non-NaN ids: one of them. */
    id[0] = 40, val[0] = 1, id[1] = 7, val[1] = 0.5f, id[2] = 90, val[2] = 0.5f;
    for (int i = 0; i < 50; i++) {
        const int32_t t = smp_sample_topk(c, &sp, &a, id, val, 64);
        T_ASSERT(t == 40 || t == 7 || t == 90);
    }
    smp_ctx_destroy(c);
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {
        T_CASE(test_rng), T_CASE(test_greedy_and_ties), T_CASE(test_argmax_matches_loop), T_CASE(test_exp_le0), T_CASE(test_temperature_distribution),
        T_CASE(test_top_k_top_p_min_p), T_CASE(test_top_p_large_vocab), T_CASE(test_penalties),
        T_CASE(test_logit_bias), T_CASE(test_seed_determinism), T_CASE(test_logprobs),
        T_CASE(test_topk_candidates_exact), T_CASE(test_topk_candidates_rules), {0}};
    return t_main(argc, argv, cases);
}
