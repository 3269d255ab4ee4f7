/*
 * test_forward — batch invariance of the forward pass on the bundled model, its taps, and
 * fwd_create failing cleanly at every step.
 *
 * The CPU backend's step times and profile (test_step_times_cpu).
 *
 * A sequence's logits must be bit-identical (memcmp) whether it runs alone or in a step with
 * other sequences at other positions, whether its prompt is fed whole or in chunks of
 * 1 / 7 / 64 tokens, and whatever the KV block size (which moves the SWA ring around).
 * GEMMAD_TEST_QUICK=1 uses shorter prompts (for sanitizer builds).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward.h"
#include "engine/kernels/kern.h"
#include "engine/kvstore.h"
#include "engine/model.h"
#include "engine/tokenizer.h"
#include "tests/unit/harness.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

static int quick(void) {
    const char *q = getenv("GEMMAD_TEST_QUICK");
    return q && q[0] == '1';
}

static struct model *load_or_skip(void) {
    if (access(t_model_path(), R_OK) != 0) T_SKIP("model %s not present", t_model_path());
    kern_init(KERN_ISA_AUTO);
    struct model *m = NULL;
    char err[512];
    int rc = model_load(t_model_path(), &m, err, sizeof err);
    T_ASSERTF(rc == 0, "model_load: %s", err);
    return m;
}

/* n deterministic prompt tokens: BOS then a text's ids repeated. */
static int32_t *make_prompt(const struct model *m, const char *text, int n) {
    int32_t tmp[512];
    int k = tok_encode(m->vocab, text, strlen(text), 0, 0, tmp, 512);
    T_ASSERT(k > 0 && k <= 512);
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    T_ASSERT(ids);
    ids[0] = tok_bos(m->vocab);
    for (int i = 1; i < n; i++) ids[i] = tmp[(i - 1) % k];
    return ids;
}

/* One sequence's KV: its own FULL blocks and SWA ring, carved from a shared pool. */
struct tseq {
    int32_t full[512], swa[512];
    struct kvstore_seq kv;
};

static void tseq_init(struct tseq *s, const struct kvstore_pool *p, int *next_full, int *next_swa,
                      int n_full, int n_swa) {
    T_ASSERT(n_full <= 512 && n_swa <= 512);
    for (int i = 0; i < n_full; i++) s->full[i] = (*next_full)++;
    for (int i = 0; i < n_swa; i++) s->swa[i] = (*next_swa)++;
    T_ASSERT(*next_full <= p->n_blocks[KVSTORE_FULL] || p->n_blocks[KVSTORE_FULL] == 0);
    T_ASSERT(*next_swa <= p->n_blocks[KVSTORE_SWA] || p->n_blocks[KVSTORE_SWA] == 0);
    s->kv.full = s->full;
    s->kv.n_full = n_full;
    s->kv.swa = n_swa ? s->swa : NULL;
    s->kv.n_swa = n_swa;
}

struct env {
    struct kvstore_pool *kv;
    struct fwd_ctx *fwd;
    int next_full, next_swa;
    int bs, max_tokens;
};

static void env_init(struct env *e, const struct model *m, int bs, int n_full, int n_swa,
                     int max_tokens, int max_seqs, int threads) {
    memset(e, 0, sizeof *e);
    char err[256];
    T_ASSERTF(kvstore_create(m, KVSTORE_F16, bs, n_full, n_swa, &e->kv, err, sizeof err) == 0, "%s",
              err);
    struct fwd_opts o = {.max_tokens = max_tokens, .max_seqs = max_seqs,
                         .max_logit_rows = max_seqs, .n_threads = threads,
                         .device = FWD_DEVICE_CPU, .deterministic = 1};
    T_ASSERTF(fwd_create(m, e->kv, &o, &e->fwd, err, sizeof err) == 0, "%s", err);
    e->bs = bs;
    e->max_tokens = max_tokens;
}

static void env_free(struct env *e) {
    fwd_destroy(e->fwd);
    kvstore_destroy(e->kv);
}

/* Feeds ids[0..n) to one sequence in chunks of `chunk`; last logits into out. */
static void feed(struct env *e, struct tseq *s, const int32_t *ids, int n, int pos0, int chunk,
                 float *out) {
    for (int done = 0; done < n;) {
        int k = n - done < chunk ? n - done : chunk;
        struct fwd_seq q = {ids + done, k, pos0 + done, &s->kv,
                            done + k == n ? FWD_LOGITS_LAST : FWD_LOGITS_NONE};
        int rc = fwd_run(e->fwd, &q, 1, done + k == n ? out : NULL);
        T_ASSERTF(rc == 0, "fwd_run: %s", fwd_strerror(rc));
        done += k;
    }
}

static void assert_same(const float *a, const float *b, int n, const char *what) {
    if (memcmp(a, b, (size_t)n * sizeof(float)) == 0) return;
    float md = 0;
    int at = 0;
    for (int i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (d > md) { md = d; at = i; }
    }
    T_FAIL("%s: logits differ (max |diff| %g at id %d)", what, (double)md, at);
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* A alone vs A in one step with B and C (other lengths, other positions), for the prefill
 * step and for a following decode step. */
static void test_batched_vs_alone(void) {
    struct model *m = load_or_skip();
    const int V = m->cfg.n_vocab;
    const int nA = quick() ? 24 : 57, nB = quick() ? 9 : 23, nC = quick() ? 17 : 41;
    int32_t *A = make_prompt(m, "Alpha beta gamma: the quick brown fox jumps over it.", nA);
    int32_t *B = make_prompt(m, "def f(x):\n    return x * 2  # doubles\n", nB);
    int32_t *C = make_prompt(m, "東京は日本の首都です。 Emoji 🙂 and Arabic مرحبا", nC);
    float *alone = malloc((size_t)V * sizeof(float));
    float *bat3 = malloc((size_t)V * 3 * sizeof(float)), *dec1 = malloc((size_t)V * sizeof(float));
    float *dec3 = malloc((size_t)V * 3 * sizeof(float));
    T_ASSERT(alone && bat3 && dec1 && dec3);
    const int bs = 16, nf = 8, ns = kvstore_swa_ring_blocks(m, bs, 128);

    /* alone */
    struct env e;
    env_init(&e, m, bs, 3 * nf, 3 * ns, 128, 3, 2);
    struct tseq sa;
    tseq_init(&sa, e.kv, &e.next_full, &e.next_swa, nf, ns);
    feed(&e, &sa, A, nA, 0, 128, alone);
    int32_t tA = argmax(alone, V);
    feed(&e, &sa, &tA, 1, nA, 1, dec1);
    env_free(&e);

    /* batched: B, A, C in one step, A's blocks not the first ones of the pool */
    env_init(&e, m, bs, 3 * nf, 3 * ns, 128, 3, 2);
    struct tseq sb, sa2, sc;
    tseq_init(&sb, e.kv, &e.next_full, &e.next_swa, nf, ns);
    tseq_init(&sa2, e.kv, &e.next_full, &e.next_swa, nf, ns);
    tseq_init(&sc, e.kv, &e.next_full, &e.next_swa, nf, ns);
    /* give B a head start so positions differ between sequences in the shared step */
    feed(&e, &sb, B, 5, 0, 5, bat3);
    struct fwd_seq step[3] = {
        {B + 5, nB - 5, 5, &sb.kv, FWD_LOGITS_LAST},
        {A, nA, 0, &sa2.kv, FWD_LOGITS_LAST},
        {C, nC, 0, &sc.kv, FWD_LOGITS_LAST},
    };
    T_ASSERT(fwd_run(e.fwd, step, 3, bat3) == 0);
    assert_same(alone, bat3 + V, V, "prefill: A alone vs batched with B, C");
    int32_t t3[3] = {argmax(bat3, V), argmax(bat3 + V, V), argmax(bat3 + 2 * (size_t)V, V)};
    struct fwd_seq dstep[3] = {
        {&t3[0], 1, nB, &sb.kv, FWD_LOGITS_LAST},
        {&t3[1], 1, nA, &sa2.kv, FWD_LOGITS_LAST},
        {&t3[2], 1, nC, &sc.kv, FWD_LOGITS_LAST},
    };
    T_ASSERT(fwd_run(e.fwd, dstep, 3, dec3) == 0);
    assert_same(dec1, dec3 + V, V, "decode: A alone vs batched with B, C");
    env_free(&e);
    free(alone);
    free(bat3);
    free(dec1);
    free(dec3);
    free(A);
    free(B);
    free(C);
    model_free(m);
}

/* The same prompt and decode step with 1, 2 and 3 compute threads: identical logits (the
 * CPU path promises thread-count invariance, which --deterministic relies on). With more
 * threads than attention tiles (the decode step; the quick prompt on 3 threads) attention
 * runs each tile over the whole pool (cpu_attn.c's split mode), with 1 thread never. The
 * prompt's 20+ rows also split the element-wise row stages (cpu_fwd.c: 8+ rows) by thread. */
static void test_thread_count_invariant(void) {
    struct model *m = load_or_skip();
    const int V = m->cfg.n_vocab;
    const int n = quick() ? 20 : 45;
    int32_t *ids = make_prompt(m, "Threads must not change a single bit of these logits.", n);
    float *ref = malloc((size_t)V * 2 * sizeof(float)), *got = malloc((size_t)V * 2 * sizeof(float));
    T_ASSERT(ref && got);
    const int bs = 16, nf = 6;
    const int threads[] = {1, 2, 3};
    for (size_t ti = 0; ti < sizeof threads / sizeof threads[0]; ti++) {
        float *out = ti == 0 ? ref : got;
        struct env e;
        int ns = kvstore_swa_ring_blocks(m, bs, 96);
        env_init(&e, m, bs, nf, ns, 64, 1, threads[ti]);
        struct tseq s;
        tseq_init(&s, e.kv, &e.next_full, &e.next_swa, nf, ns);
        feed(&e, &s, ids, n, 0, 64, out);
        int32_t t = argmax(out, V);
        feed(&e, &s, &t, 1, n, 1, out + V);
        env_free(&e);
        if (ti > 0) {
            char what[64];
            snprintf(what, sizeof what, "prefill: 1 vs %d threads", threads[ti]);
            assert_same(ref, got, V, what);
            snprintf(what, sizeof what, "decode: 1 vs %d threads", threads[ti]);
            assert_same(ref + V, got + V, V, what);
        }
    }
    free(ref);
    free(got);
    free(ids);
    model_free(m);
}

/* The same prompt whole and in chunks of 1, 7 and 64 tokens: identical last logits. */
static void test_chunked_prefill(void) {
    struct model *m = load_or_skip();
    const int V = m->cfg.n_vocab;
    const int n = quick() ? 40 : 150;
    int32_t *ids = make_prompt(m, "In 1851 the Great Exhibition opened in London's Hyde Park, "
                                  "showing machines from around the world.", n);
    float *whole = malloc((size_t)V * sizeof(float)), *part = malloc((size_t)V * sizeof(float));
    T_ASSERT(whole && part);
    const int bs = 32, nf = (n + bs - 1) / bs + 1;
    const int chunks[] = {n, 1, 7, 64};
    for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++) {
        struct env e;
        int ns = kvstore_swa_ring_blocks(m, bs, n);
        env_init(&e, m, bs, nf, ns, n, 1, 2);
        struct tseq s;
        tseq_init(&s, e.kv, &e.next_full, &e.next_swa, nf, ns);
        feed(&e, &s, ids, n, 0, chunks[ci], ci == 0 ? whole : part);
        if (ci > 0) {
            char what[64];
            snprintf(what, sizeof what, "whole prompt vs chunks of %d", chunks[ci]);
            assert_same(whole, part, V, what);
        }
        env_free(&e);
    }
    free(whole);
    free(part);
    free(ids);
    model_free(m);
}

struct hidden_tap {
    int n_layer;
    float *rows;   /* the final-norm rows the tap saw */
    int n;
};

static void hidden_tap_fn(void *user, int layer, const float *x, int n_rows, int n_embd) {
    struct hidden_tap *t = user;
    if (layer != t->n_layer) return;
    memcpy(t->rows + (size_t)t->n * (size_t)n_embd, x, (size_t)n_rows * n_embd * sizeof(float));
    t->n += n_rows;
}

/* fwd_seq.hidden: every row's final normalised state, the same bits the LM head reads (the
 * tap's final-norm rows with all logits asked for), and the same whole or chunked. */
static void test_hidden_rows(void) {
    struct model *m = load_or_skip();
    const int V = m->cfg.n_vocab, E = m->cfg.n_embd, n = 24, bs = 16, nf = 3;
    int32_t *ids = make_prompt(m, "Embeddings pool the final hidden states of a text.", n);
    float *hid = malloc((size_t)n * E * sizeof(float));
    float *hid2 = malloc((size_t)n * E * sizeof(float));
    float *logits = malloc((size_t)n * V * sizeof(float));
    struct hidden_tap tap = {m->cfg.n_layer, malloc((size_t)n * E * sizeof(float)), 0};
    T_ASSERT(hid && hid2 && logits && tap.rows);
    struct env e;
    int ns = kvstore_swa_ring_blocks(m, bs, n);
    env_init(&e, m, bs, nf, ns, n, 1, 2);
    fwd_destroy(e.fwd);
    char err[256];
    struct fwd_opts o = {.max_tokens = n, .max_seqs = 1, .max_logit_rows = n, .n_threads = 2,
                         .device = FWD_DEVICE_CPU, .deterministic = 1};
    T_ASSERTF(fwd_create(m, e.kv, &o, &e.fwd, err, sizeof err) == 0, "%s", err);
    fwd_set_tap(e.fwd, hidden_tap_fn, &tap);
    struct tseq s;
    tseq_init(&s, e.kv, &e.next_full, &e.next_swa, nf, ns);
    struct fwd_seq q = {ids, n, 0, &s.kv, FWD_LOGITS_ALL};
    T_ASSERT(fwd_run_hidden(e.fwd, &q, 1, logits, hid) == 0);
    T_ASSERT(tap.n == n && !memcmp(tap.rows, hid, (size_t)n * E * sizeof(float)));
    env_free(&e);
    /* chunks of 5, no logits at all */
    env_init(&e, m, bs, nf, ns, n, 1, 2);
    e.next_full = e.next_swa = 0;
    tseq_init(&s, e.kv, &e.next_full, &e.next_swa, nf, ns);
    for (int done = 0; done < n; done += 5) {
        int k = n - done < 5 ? n - done : 5;
        struct fwd_seq c = {ids + done, k, done, &s.kv, FWD_LOGITS_NONE};
        T_ASSERT(fwd_run_hidden(e.fwd, &c, 1, NULL, hid2 + (size_t)done * E) == 0);
    }
    T_ASSERT(!memcmp(hid, hid2, (size_t)n * E * sizeof(float)));
    env_free(&e);
    free(tap.rows);
    free(hid);
    free(hid2);
    free(logits);
    free(ids);
    model_free(m);
}

/* fwd_run_greedy on the CPU backend: every row comes back whole with id -1 (the CPU never
 * reduces), the same bits as fwd_run; greedy flags without ids are refused. fwd_run_rows:
 * a top-k row's candidates are the row's best ids in order, a full row is fwd_run's. */
static void test_greedy_ids_cpu(void) {
    struct model *m = load_or_skip();
    const int V = m->cfg.n_vocab, n = 6, bs = 16, nf = 1;
    int32_t *ids = make_prompt(m, "Greedy rows on the CPU come back whole.", n);
    const int ns = kvstore_swa_ring_blocks(m, bs, n);
    float *a = malloc((size_t)2 * V * sizeof(float)), *b = malloc((size_t)2 * V * sizeof(float));
    T_ASSERT(a && b);
    const uint8_t greedy[2] = {1, 0};
    int32_t gid[2] = {7, 7};
    struct env e;
    struct tseq s[2];
    for (int pass = 0; pass < 2; pass++) {
        env_init(&e, m, bs, 2 * nf, 2 * ns, 2 * n, 2, 1);
        struct fwd_seq q[2];
        for (int i = 0; i < 2; i++) {
            tseq_init(&s[i], e.kv, &e.next_full, &e.next_swa, nf, ns);
            q[i] = (struct fwd_seq){ids, n - i, 0, &s[i].kv, FWD_LOGITS_LAST};
        }
        if (pass == 0) {
            T_ASSERT(fwd_run_greedy(e.fwd, q, 2, a, greedy, NULL) == FWD_EINVAL);
            T_ASSERT(fwd_run_greedy(e.fwd, q, 2, a, greedy, gid) == FWD_OK);
        } else {
            T_ASSERT(fwd_run(e.fwd, q, 2, b) == FWD_OK);
        }
        env_free(&e);
    }
    T_ASSERT(gid[0] == -1 && gid[1] == -1);
    T_ASSERT(!memcmp(a, b, (size_t)2 * V * sizeof(float)));
    /* fwd_run_rows: row 0 as top-k candidates (from the row on the host), row 1 whole. */
    const uint8_t kind[2] = {FWD_ROW_TOPK, FWD_ROW_FULL}, bad[2] = {3, 0};
    const float scale[2] = {1.0f / 0.8f, 0};
    int32_t tid[2 * FWD_TOPK_MAX];
    float tval[2 * FWD_TOPK_MAX];
    env_init(&e, m, bs, 2 * nf, 2 * ns, 2 * n, 2, 1);
    struct fwd_seq q[2];
    for (int i = 0; i < 2; i++) {
        tseq_init(&s[i], e.kv, &e.next_full, &e.next_swa, nf, ns);
        q[i] = (struct fwd_seq){ids, n - i, 0, &s[i].kv, FWD_LOGITS_LAST};
    }
    T_ASSERT(fwd_run_rows(e.fwd, q, 2, a, kind, NULL, gid, tid, tval) == FWD_EINVAL);
    T_ASSERT(fwd_run_rows(e.fwd, q, 2, a, bad, scale, gid, tid, tval) == FWD_EINVAL);
    gid[0] = gid[1] = 7;
    T_ASSERT(fwd_run_rows(e.fwd, q, 2, a, kind, scale, gid, tid, tval) == FWD_OK);
    env_free(&e);
    T_ASSERT(gid[0] == -1 && gid[1] == -1);
    T_ASSERT(!memcmp(a + V, b + V, (size_t)V * sizeof(float)));
    int best = 0;
    for (int i = 1; i < V; i++)
        if (b[i] > b[best]) best = i;
    T_ASSERT(tid[0] == best);
    for (int j = 0; j < FWD_TOPK_MAX; j++) {
        T_ASSERT(tid[j] >= 0 && tid[j] < V && tval[j] == b[tid[j]] * scale[0]);
        if (j) T_ASSERT(tval[j] < tval[j - 1] || (tval[j] == tval[j - 1] && tid[j] > tid[j - 1]));
    }
    int beat = 0; /* ids that beat the last candidate: exactly the other candidates */
    for (int i = 0; i < V; i++)
        beat += b[i] * scale[0] > tval[FWD_TOPK_MAX - 1];
    T_ASSERT(beat <= FWD_TOPK_MAX - 1 && beat >= 1);
    free(a);
    free(b);
    free(ids);
    model_free(m);
}

/* A prompt longer than the sliding window: whole (block size 256) vs chunks with a small
 * block size, so the SWA ring wraps many times; and the window must matter. */
static void test_sliding_window_chunked(void) {
    struct model *m = load_or_skip();
    const int V = m->cfg.n_vocab, W = m->cfg.sliding_window;
    if (W <= 0) T_SKIP("model has no sliding window");
    const int n = quick() ? W + 40 : W + 188;
    const int chunk = quick() ? 24 : 64;
    int32_t *ids = make_prompt(m, "Chapter one. It was a bright cold day in April, and the "
                                  "clocks were striking thirteen.", n);
    float *whole = malloc((size_t)V * sizeof(float)), *part = malloc((size_t)V * sizeof(float));
    T_ASSERT(whole && part);

    struct env e;
    int bs = 256, nf = (n + bs - 1) / bs, ns = kvstore_swa_ring_blocks(m, bs, n);
    env_init(&e, m, bs, nf, ns, n, 1, 2);
    struct tseq s;
    tseq_init(&s, e.kv, &e.next_full, &e.next_swa, nf, ns);
    feed(&e, &s, ids, n, 0, n, whole);
    env_free(&e);

    bs = quick() ? 8 : 16;
    nf = (n + bs - 1) / bs;
    ns = kvstore_swa_ring_blocks(m, bs, chunk);
    T_ASSERT(ns * bs < n); /* the ring really wraps */
    env_init(&e, m, bs, nf, ns, chunk, 1, 2);
    tseq_init(&s, e.kv, &e.next_full, &e.next_swa, nf, ns);
    feed(&e, &s, ids, n, 0, chunk, part);
    assert_same(whole, part, V, "sliding window: whole vs chunked with a wrapping ring");

    /* A ring one block too short for the step is refused, and nothing is run. */
    struct fwd_seq q = {ids, 1, n, &s.kv, FWD_LOGITS_LAST};
    struct kvstore_seq short_kv = s.kv;
    short_kv.n_swa = (W + 1 - 2) / bs + 1; /* one block less than a 1-token step needs */
    q.kv = &short_kv;
    T_ASSERT(fwd_run(e.fwd, &q, 1, part) == FWD_EKV);
    env_free(&e);
    free(whole);
    free(part);
    free(ids);
    model_free(m);
}

/* Bad steps are refused with EINVAL/EKV. */
static void test_invalid_steps(void) {
    struct model *m = load_or_skip();
    struct env e;
    int ns = kvstore_swa_ring_blocks(m, 16, 8);
    env_init(&e, m, 16, 2, ns, 8, 1, 1);
    struct tseq s;
    tseq_init(&s, e.kv, &e.next_full, &e.next_swa, 2, ns);
    float *lg = malloc((size_t)m->cfg.n_vocab * sizeof(float));
    int32_t ok[9] = {2, 3, 4, 5, 6, 7, 8, 9, 10}, bad = m->cfg.n_vocab;
    struct fwd_seq q = {&bad, 1, 0, &s.kv, FWD_LOGITS_LAST};
    T_ASSERT(fwd_run(e.fwd, &q, 1, lg) == FWD_EINVAL);   /* token id >= n_vocab */
    q = (struct fwd_seq){ok, 9, 0, &s.kv, FWD_LOGITS_LAST};
    T_ASSERT(fwd_run(e.fwd, &q, 1, lg) == FWD_EINVAL);   /* more rows than max_tokens */
    q = (struct fwd_seq){ok, 1, 32, &s.kv, FWD_LOGITS_LAST};
    T_ASSERT(fwd_run(e.fwd, &q, 1, lg) == FWD_EKV);      /* position beyond the FULL blocks */
    q = (struct fwd_seq){ok, 1, -1, &s.kv, FWD_LOGITS_LAST};
    T_ASSERT(fwd_run(e.fwd, &q, 1, lg) == FWD_EINVAL);   /* negative position */
    struct fwd_seq two[2] = {{ok, 1, 0, &s.kv, FWD_LOGITS_LAST}, {ok, 1, 0, &s.kv, 0}};
    T_ASSERT(fwd_run(e.fwd, two, 2, lg) == FWD_EINVAL);  /* more sequences than max_seqs */
    q = (struct fwd_seq){ok, 1, 0, &s.kv, FWD_LOGITS_LAST};
    T_ASSERT(fwd_run(e.fwd, &q, 1, lg) == FWD_OK);
    /* a table that names more blocks than the pool has: the position is still refused */
    int32_t many[3] = {0, 1, 1};
    struct kvstore_seq alias = s.kv;
    alias.full = many;
    alias.n_full = 3;
    q = (struct fwd_seq){ok, 1, 32, &alias, FWD_LOGITS_LAST};
    T_ASSERT(fwd_run(e.fwd, &q, 1, lg) == FWD_EKV);
    /* max_ctx: positions up to it run, a step past it is refused */
    struct fwd_opts o = {.max_tokens = 8, .max_seqs = 1, .max_logit_rows = 1, .n_threads = 1,
                         .device = FWD_DEVICE_CPU, .deterministic = 1, .max_ctx = 20};
    struct fwd_ctx *f = NULL;
    char err[256];
    T_ASSERTF(fwd_create(m, e.kv, &o, &f, err, sizeof err) == 0, "%s", err);
    q = (struct fwd_seq){ok, 2, 19, &s.kv, FWD_LOGITS_LAST};
    T_ASSERT(fwd_run(f, &q, 1, lg) == FWD_EINVAL);
    q = (struct fwd_seq){ok, 8, 12, &s.kv, FWD_LOGITS_LAST};
    T_ASSERT(fwd_run(f, &q, 1, lg) == FWD_OK);
    fwd_destroy(f);
    free(lg);
    env_free(&e);
    model_free(m);
}

static void test_cuda_without_build(void) {
#ifdef GEMMAD_CUDA
    T_SKIP("built with CUDA");
#else
    struct model *m = load_or_skip();
    struct kvstore_pool *kv;
    char err[256] = "";
    T_ASSERT(kvstore_create(m, KVSTORE_F16, 16, 1, kvstore_swa_ring_blocks(m, 16, 1), &kv, err,
                        sizeof err) == 0);
    struct fwd_opts o = {.max_tokens = 1, .max_seqs = 1, .max_logit_rows = 1, .n_threads = 1,
                         .device = FWD_DEVICE_CUDA};
    struct fwd_ctx *f = NULL;
    T_ASSERT(fwd_create(m, kv, &o, &f, err, sizeof err) != 0 && f == NULL);
    T_ASSERTF(strstr(err, "built without CUDA") != NULL, "message: %s", err);
    o.device = FWD_DEVICE_AUTO;
    T_ASSERT(fwd_create(m, kv, &o, &f, err, sizeof err) == 0);
    T_ASSERT(fwd_device(f) == FWD_DEVICE_CPU);
    fwd_destroy(f);
    kvstore_destroy(kv);
    model_free(m);
#endif
}

/* A pool of 4 FULL blocks of 16 and the SWA ring for 4-token steps. */
static struct kvstore_pool *small_kv(const struct model *m) {
    struct kvstore_pool *kv = NULL;
    char err[256] = "";
    T_ASSERTF(kvstore_create(m, KVSTORE_F16, 16, 4, kvstore_swa_ring_blocks(m, 16, 4), &kv, err,
                         sizeof err) == 0, "%s", err);
    return kv;
}

/* fwd_create fails cleanly at every failable step (fwd_set_fail_at(n), n = 1, 2, ... until it
 * succeeds): an error code, no context, a message. Under ASan the test runs LeakSanitizer
 * itself at the end (the harness's forked child leaves with _exit, which skips it), so
 * anything a failed create left allocated fails the test. */
static void test_create_fault_injection(void) {
    struct model *m = load_or_skip();
    struct kvstore_pool *kv = small_kv(m);
    char err[256] = "";
    struct fwd_opts o = {.max_tokens = 4, .max_seqs = 2, .max_logit_rows = 2, .n_threads = 2,
                         .device = FWD_DEVICE_AUTO};
    int n = 1;
    for (;; n++) {
        T_ASSERTF(n < 1000, "fwd_create still fails at step %d", n);
        fwd_set_fail_at(n);
        struct fwd_ctx *f = NULL;
        err[0] = 0;
        const int rc = fwd_create(m, kv, &o, &f, err, sizeof err);
        if (rc == FWD_OK) {
            fwd_destroy(f);
            break;
        }
        T_ASSERTF(rc == FWD_ENOMEM || rc == FWD_EINVAL, "step %d: status %d", n, rc);
        T_ASSERTF(f == NULL, "step %d: a context after a failure", n);
        T_ASSERTF(err[0] != 0, "step %d: no message", n);
    }
    fwd_set_fail_at(0);
    printf("    fwd_create: %d failable steps, each fails cleanly\n", n - 1);
    T_ASSERT(n > 10);
    kvstore_destroy(kv);
    model_free(m);
#if defined(__SANITIZE_ADDRESS__)
    T_ASSERTF(__lsan_do_recoverable_leak_check() == 0, "leaks after the failed creates");
#endif
}

struct tap_count {
    int calls, last_layer, rows_after_norm;
};

static void count_tap(void *user, int layer, const float *x, int n_rows, int n_embd) {
    struct tap_count *t = user;
    (void)x;
    (void)n_embd;
    t->calls++;
    t->last_layer = layer;
    t->rows_after_norm = n_rows;
}

/* A forward context of up to 4 tokens and one sequence on dev, and that sequence's blocks. */
static struct fwd_ctx *small_fwd(const struct model *m, struct kvstore_pool *kv,
                                 enum fwd_device dev, struct tseq *s) {
    char err[256] = "";
    struct fwd_opts o = {
        .max_tokens = 4, .max_seqs = 1, .max_logit_rows = 1, .n_threads = 2, .device = dev};
    struct fwd_ctx *f = NULL;
    T_ASSERTF(fwd_create(m, kv, &o, &f, err, sizeof err) == 0, "%s", err);
    int nf = 0, ns = 0;
    tseq_init(s, kv, &nf, &ns, 1,
              kv->n_blocks[KVSTORE_SWA] ? kvstore_swa_ring_blocks(m, 16, 4) : 0);
    return f;
}

/* The tap fires after every layer and once after the output norm, with the selected rows. */
static void test_tap(void) {
    struct model *m = load_or_skip();
    struct kvstore_pool *kv = small_kv(m);
    struct tseq s;
    struct fwd_ctx *f = small_fwd(m, kv, FWD_DEVICE_AUTO, &s);
    struct tap_count t = {0, -1, 0};
    fwd_set_tap(f, count_tap, &t);
    int32_t ids[4] = {tok_bos(m->vocab), 100, 200, 300};
    float *lg = malloc((size_t)m->cfg.n_vocab * sizeof(float));
    T_ASSERT(lg);
    struct fwd_seq q = {ids, 4, 0, &s.kv, FWD_LOGITS_LAST};
    T_ASSERT(fwd_run(f, &q, 1, lg) == FWD_OK);
    T_ASSERTF(t.calls == m->cfg.n_layer + 1, "%d tap calls for %d layers", t.calls,
              m->cfg.n_layer);
    T_ASSERT(t.last_layer == m->cfg.n_layer && t.rows_after_norm == 1);
    fwd_set_tap(f, NULL, NULL);
    T_ASSERT(fwd_run(f, &q, 1, lg) == FWD_OK);
    T_ASSERT(t.calls == m->cfg.n_layer + 1);
    free(lg);
    fwd_destroy(f);
    kvstore_destroy(kv);
    model_free(m);
}

/* The CPU backend times its steps (gpu_ms: the step's wall time) and, with profiling on,
 * splits that time by operation class; profiling changes no logit. */
static void test_step_times_cpu(void) {
    struct model *m = load_or_skip();
    struct kvstore_pool *kv = small_kv(m);
    struct tseq s;
    struct fwd_ctx *f = small_fwd(m, kv, FWD_DEVICE_CPU, &s);
    int32_t ids[4] = {tok_bos(m->vocab), 100, 200, 300};
    const size_t V = (size_t)m->cfg.n_vocab;
    float *lg = malloc(2 * V * sizeof(float));
    T_ASSERT(lg);
    struct fwd_seq q = {ids, 4, 0, &s.kv, FWD_LOGITS_LAST};
    struct fwd_step_times st;
    T_ASSERT(fwd_last_step_times(f, &st) == -1); /* no step yet */
    T_ASSERT(fwd_run(f, &q, 1, lg) == FWD_OK);
    T_ASSERT(fwd_last_step_times(f, &st) == 0);
    T_ASSERT(st.gpu_ms > 0 && st.h2d_ms == 0 && st.d2h_ms == 0 && !st.graph && !st.profiled);
    T_ASSERT(st.matmul_ms == 0 && st.attn_ms == 0 && st.head_ms == 0);

    T_ASSERT(fwd_set_profile(f, 1) == 0);
    T_ASSERT(fwd_run(f, &q, 1, lg + V) == FWD_OK); /* the same step again: the same cache rows */
    T_ASSERT(memcmp(lg, lg + V, V * sizeof(float)) == 0);
    T_ASSERT(fwd_last_step_times(f, &st) == 0 && st.profiled == 1);
    const double cls[5] = {st.matmul_ms, st.attn_ms, st.norm_ms, st.other_ms, st.head_ms};
    double sum = 0;
    for (int i = 0; i < 5; i++) {
        T_ASSERTF(cls[i] >= 0, "class %d: %f ms", i, cls[i]);
        sum += cls[i];
    }
    T_ASSERT(st.matmul_ms > 0 && st.attn_ms > 0 && st.head_ms > 0);
    /* the classes tile the step: their sum is the step up to the last clock read */
    T_ASSERTF(sum <= st.gpu_ms + 1e-9 && sum > 0, "classes %f ms, step %f ms", sum, st.gpu_ms);

    T_ASSERT(fwd_set_profile(f, 0) == 0);
    T_ASSERT(fwd_run(f, &q, 1, lg) == FWD_OK);
    T_ASSERT(fwd_last_step_times(f, &st) == 0 && st.profiled == 0 && st.matmul_ms == 0);
    free(lg);
    fwd_destroy(f);
    kvstore_destroy(kv);
    model_free(m);
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {
        T_CASE(test_create_fault_injection), T_CASE(test_tap),
        T_CASE(test_step_times_cpu),         T_CASE(test_batched_vs_alone),
        T_CASE(test_chunked_prefill),        T_CASE(test_hidden_rows),
        T_CASE(test_greedy_ids_cpu),         T_CASE(test_thread_count_invariant),
        T_CASE(test_sliding_window_chunked), T_CASE(test_invalid_steps),
        T_CASE(test_cuda_without_build),     {0},
    };
    return t_main(argc, argv, cases);
}
