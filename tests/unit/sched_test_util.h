/*
 * sched_test_util — what the scheduler tests with the real model share (test_sched.c,
 * test_sched_flow.c): a request's result filled by its events on the scheduler thread, a
 * scheduler with the tests' options, greedy and seeded sampling, submit-and-wait, and the
 * check that the KV pool is back to its baseline. Test-only.
 */
#ifndef GEMMAD_SCHED_TEST_UTIL_H
#define GEMMAD_SCHED_TEST_UTIL_H

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/model.h"
#include "engine/tokenizer.h"
#include "scheduler/sched.h"
#include "tests/unit/harness.h"

#define MAXTOK 256

/* What one request produced, filled on the scheduler thread. */
struct result {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t tok[MAXTOK];
    int n_tok;
    char text[8192];
    size_t n_text;
    int done;
    enum sched_ev_kind last_kind;
    enum sched_finish finish;
    int prompt_tokens, completion_tokens, cached_tokens;
    float lp[MAXTOK];
    int stop_index;
    int n_plp, plp_pos[512]; /* PROMPT events */
    float plp_lp[512];
    float emb[1024]; /* DONE of an embed request */
    int n_embd;
};

static inline void on_event(void *user, const struct sched_event *ev) {
    struct result *r = user;
    pthread_mutex_lock(&r->mu);
    if (ev->text_len && r->n_text + ev->text_len < sizeof(r->text)) {
        memcpy(r->text + r->n_text, ev->text, ev->text_len);
        r->n_text += ev->text_len;
        r->text[r->n_text] = 0;
    }
    if (ev->kind == SCHED_EV_PROMPT && r->n_plp < 512) {
        r->plp_pos[r->n_plp] = ev->pos;
        r->plp_lp[r->n_plp++] = ev->logprob;
        pthread_mutex_unlock(&r->mu);
        return;
    }
    if (ev->kind == SCHED_EV_TOKEN && r->n_tok < MAXTOK) {
        r->lp[r->n_tok] = ev->logprob;
        r->tok[r->n_tok++] = ev->token;
    }
    if (ev->kind != SCHED_EV_TOKEN) {
        r->done = 1;
        r->last_kind = ev->kind;
        r->finish = ev->finish;
        r->prompt_tokens = ev->prompt_tokens;
        r->completion_tokens = ev->completion_tokens;
        r->cached_tokens = ev->cached_tokens;
        r->stop_index = ev->stop_index;
        if (ev->embedding && ev->n_embd <= 1024) {
            memcpy(r->emb, ev->embedding, (size_t)ev->n_embd * sizeof(float));
            r->n_embd = ev->n_embd;
        }
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
}

static inline void res_init(struct result *r) {
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
}

static inline void res_wait(struct result *r) {
    pthread_mutex_lock(&r->mu);
    while (!r->done)
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

static inline int quick(void) {
    return getenv("GEMMAD_TEST_QUICK") != NULL;
}

static struct sched *mk(const struct model *m, void (*tweak)(struct sched_opts *)) {
    struct sched_opts o;
    sched_opts_default(&o);
    o.n_threads = 2;
    o.n_ctx = 512;
    o.max_seqs = 8;
    o.max_batch_tokens = 64;
    o.kv_tokens = 8192;
    o.deterministic = 1;
    o.device = FWD_DEVICE_CPU;
    if (tweak) tweak(&o);
    struct sched *s = NULL;
    char err[256];
    T_ASSERTF(sched_create(m, &o, &s, err, sizeof err) == SCHED_OK, "%s", err);
    return s;
}

static inline int encode(const struct model *m, const char *text, int32_t *ids, int cap) {
    int n = tok_encode(m->vocab, text, strlen(text), 1, 1, ids, cap);
    T_ASSERT(n > 0 && n <= cap);
    return n;
}

static inline struct sched_sampling greedy(void) {
    struct sched_sampling sp = {.temperature = 0, .top_p = 1, .repetition_penalty = 1};
    return sp;
}

static inline struct sched_sampling seeded(uint64_t seed) {
    struct sched_sampling sp = {.temperature = 0.9f,
                                .top_k = 40,
                                .top_p = 0.95f,
                                .repetition_penalty = 1,
                                .seed = seed,
                                .has_seed = 1};
    return sp;
}

/* A request without stop strings or logprobs, ignoring EOG; r is reset. */
static inline struct sched_req req(const int32_t *p, int n, struct sched_sampling sp,
                                   int max_tokens, struct result *r) {
    struct sched_req q = {0};
    q.prompt = p;
    q.n_prompt = n;
    q.sp = sp;
    q.max_tokens = max_tokens;
    q.ignore_eos = 1;
    q.top_logprobs = -1;
    q.on_event = on_event;
    q.user = r;
    res_init(r);
    return q;
}

static inline void submit(struct sched *s, const int32_t *p, int n, struct sched_sampling sp,
                          int max_tokens, struct result *r, uint64_t *id) {
    struct sched_req q = req(p, n, sp, max_tokens, r);
    uint64_t dummy;
    T_ASSERT(sched_submit(s, &q, id ? id : &dummy) == SCHED_OK);
}

static inline void run_one(struct sched *s, const int32_t *p, int n, struct sched_sampling sp,
                           int max_tokens, struct result *r) {
    submit(s, p, n, sp, max_tokens, r, NULL);
    res_wait(r);
    T_ASSERTF(r->last_kind == SCHED_EV_DONE, "request failed");
}

static inline void same(const struct result *a, const struct result *b, const char *what) {
    T_ASSERTF(a->n_tok == b->n_tok, "%s: %d vs %d tokens", what, a->n_tok, b->n_tok);
    for (int i = 0; i < a->n_tok; i++)
        T_ASSERTF(a->tok[i] == b->tok[i], "%s: token %d differs (%d vs %d)", what, i, a->tok[i],
                  b->tok[i]);
    T_ASSERTF(!strcmp(a->text, b->text), "%s: text differs", what);
}

__attribute__((unused)) static const char *prompts[] = {
    "The capital of France is", "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):",        "List three colours:",
    "The quick brown fox",      "In 1969, astronauts",
    "Water boils at",           "My favourite recipe is",
};

static inline void wait_kv_baseline(struct sched *s) {
    struct sched_counts c;
    for (int i = 0; i < 400; i++) {
        sched_get_counts(s, &c);
        if (c.running == 0 && c.waiting == 0 && c.kv_blocks_used == 0) return;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    T_FAIL("KV not back to baseline: running %d waiting %d used %d", c.running, c.waiting,
           c.kv_blocks_used);
}

static inline void tiny_kv(struct sched_opts *o) {
    o->n_ctx = 64;
    o->kv_tokens = 112; /* 7 blocks: two sequences fit at admission, not as they grow */
    o->max_seqs = 4;
    o->max_batch_tokens = 32;
    o->prefix_cache = 0;
}

/* Long enough for every sequence to need one more block while it generates (tiny_kv). */
static inline int seeded_gen(void) {
    return quick() ? 8 : 20;
}

/* One sequence at a time and a queue of one. */
static inline void one_seq_tiny_queue(struct sched_opts *o) {
    o->max_seqs = 1;
    o->max_queue = 1;
}

#endif
