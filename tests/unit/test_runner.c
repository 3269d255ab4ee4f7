/*
 * test_runner — scheduler/runner.h on the bundled model: decoding sequences together gives
 * each the logits it gets alone, prefill chunking (and the SWA ring wrapping) does not change
 * results, and limits are refused without touching the KV.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/model.h"
#include "scheduler/runner.h"
#include "tests/unit/harness.h"

static int quick(void) { return getenv("GEMMAD_TEST_QUICK") != NULL; }

static struct runner *mk(const struct model *m, int n_seqs, int max_ctx, int batch, int bs) {
    struct runner_opts o = {.max_seqs = n_seqs, .max_ctx = max_ctx, .batch = batch,
                            .max_logit_rows = n_seqs > batch ? n_seqs : batch,
                            .block_size = bs, .kv_dtype = KVSTORE_F16, .n_threads = 2,
                            .device = FWD_DEVICE_CPU, .deterministic = 1};
    struct runner *r = NULL;
    char err[256] = "";
    T_ASSERTF(runner_create(m, &o, &r, err, sizeof err) == RUNNER_OK, "%s", err);
    return r;
}

static void fill(int32_t *ids, int n, uint64_t seed) {
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(2 + t_xorshift64(&seed) % 4000);
}

/* Three sequences of different prompt lengths stepped together == each fed alone. */
static void test_step_equals_alone(void) {
    struct model *m = t_model_or_skip();
    const int V = m->cfg.n_vocab, ns = 3, steps = 4;
    const int len[3] = {5, 17, 33};
    int32_t prompt[3][33], tok[3][4];
    for (int s = 0; s < ns; s++) {
        fill(prompt[s], len[s], 11 + (uint64_t)s);
        fill(tok[s], steps, 97 + (uint64_t)s);
    }
    float *together = malloc(sizeof(float) * (size_t)V * ns * steps);
    float *alone = malloc(sizeof(float) * (size_t)V);
    T_ASSERT(together && alone);
    struct runner *r = mk(m, ns, 64, 8, 16);
    for (int s = 0; s < ns; s++)
        T_ASSERT(runner_feed(r, s, prompt[s], len[s], FWD_LOGITS_NONE, NULL) == RUNNER_OK);
    for (int i = 0; i < steps; i++) {
        int32_t t[3] = {tok[0][i], tok[1][i], tok[2][i]};
        T_ASSERT(runner_step(r, t, ns, together + (size_t)i * ns * V) == RUNNER_OK);
    }
    for (int s = 0; s < ns; s++) T_ASSERT(runner_pos(r, s) == len[s] + steps);
    runner_destroy(r);
    for (int s = 0; s < ns; s++) {
        struct runner *a = mk(m, 1, 64, 8, 16);
        T_ASSERT(runner_feed(a, 0, prompt[s], len[s], FWD_LOGITS_NONE, NULL) == RUNNER_OK);
        for (int i = 0; i < steps; i++) {
            T_ASSERT(runner_feed(a, 0, &tok[s][i], 1, FWD_LOGITS_LAST, alone) == RUNNER_OK);
            const float *got = together + ((size_t)i * ns + (size_t)s) * V;
            T_ASSERTF(!memcmp(got, alone, sizeof(float) * (size_t)V), "seq %d step %d", s, i);
        }
        runner_destroy(a);
    }
    free(alone);
    free(together);
    model_free(m);
}

/* A prompt fed in chunks of 16 (the sliding layers' ring wraps when it outgrows the window)
 * ends with the logits of one step over the whole prompt. */
static void test_chunked_prefill(void) {
    struct model *m = t_model_or_skip();
    const int V = m->cfg.n_vocab;
    const int n = quick() || m->cfg.sliding_window <= 0 ? 80 : m->cfg.sliding_window + 100;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    float *one = malloc(sizeof(float) * (size_t)V), *chunked = malloc(sizeof(float) * (size_t)V);
    T_ASSERT(ids && one && chunked);
    fill(ids, n, 5);
    struct runner *r = mk(m, 1, n, n, 16);
    T_ASSERT(runner_feed(r, 0, ids, n, FWD_LOGITS_LAST, one) == RUNNER_OK);
    runner_destroy(r);
    r = mk(m, 1, n, 16, 16);
    T_ASSERT(runner_feed(r, 0, ids, n, FWD_LOGITS_LAST, chunked) == RUNNER_OK);
    runner_destroy(r);
    T_ASSERT(!memcmp(one, chunked, sizeof(float) * (size_t)V));
    free(chunked);
    free(one);
    free(ids);
    model_free(m);
}

static void test_limits(void) {
    struct model *m = t_model_or_skip();
    struct runner_opts bad = {.max_seqs = 0, .max_ctx = 8, .batch = 8, .block_size = 16};
    struct runner *r = NULL;
    char err[256] = "";
    T_ASSERT(runner_create(m, &bad, &r, err, sizeof err) == FWD_EINVAL && !r && err[0]);
    r = mk(m, 2, 8, 8, 16);
    int32_t ids[9] = {2, 3, 4, 5, 6, 7, 8, 9, 10};
    T_ASSERT(runner_feed(r, 0, ids, 9, FWD_LOGITS_NONE, NULL) == RUNNER_ECTX);
    T_ASSERT(runner_pos(r, 0) == 0);
    T_ASSERT(runner_feed(r, 2, ids, 1, FWD_LOGITS_NONE, NULL) == FWD_EINVAL);
    T_ASSERT(runner_step(r, ids, 3, NULL) == FWD_EINVAL);
    T_ASSERT(runner_feed(r, 1, ids, 8, FWD_LOGITS_NONE, NULL) == RUNNER_OK);
    T_ASSERT(runner_pos(r, 1) == 8 && runner_max_ctx(r) == 8);
    float *lg = malloc(sizeof(float) * 2 * (size_t)m->cfg.n_vocab);
    T_ASSERT(lg);
    T_ASSERT(runner_step(r, ids, 2, lg) == RUNNER_ECTX); /* sequence 1 is full */
    T_ASSERT(runner_pos(r, 0) == 0 && runner_pos(r, 1) == 8);
    free(lg);
    runner_destroy(r);
    model_free(m);
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {
        T_CASE(test_step_equals_alone), T_CASE(test_chunked_prefill), T_CASE(test_limits), {0}};
    return t_main(argc, argv, cases);
}
