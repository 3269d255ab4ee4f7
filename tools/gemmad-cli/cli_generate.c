/*
 * gemmad-cli generate: the prompt, then up to -n tokens sampled with the scheduler's sampler
 * (scheduler/sample.h), printed as text while they come or as ids (--print-ids).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "engine/tokenizer.h"
#include "scheduler/sample.h"
#include "tools/gemmad-cli/cli.h"

int cli_generate(const struct cli_opts *o) {
    struct model *m = cli_load(o, NULL);
    int n_prompt;
    int32_t *ids = cli_prompt_ids(o, m, &n_prompt);
    const int V = m->cfg.n_vocab;
    struct runner *r = cli_runner(m, o, 1, n_prompt + o->n_gen + 1, o->batch, 1);
    float *logits = malloc((size_t)V * sizeof(float));
    if (!logits) cli_die("out of memory");
    double t0 = clock_mono_s();
    cli_feed(r, 0, ids, n_prompt, FWD_LOGITS_LAST, logits);
    double t1 = clock_mono_s();
    struct sched_sampling sp = {.temperature = o->temp, .top_k = o->top_k, .top_p = o->top_p,
                                .min_p = o->min_p, .repetition_penalty = 1.0f,
                                .seed = o->seed, .has_seed = 1};
    struct smp_rng rng;
    smp_rng_seed(&rng, o->seed);
    struct smp_ctx *smp = NULL;
    if (smp_ctx_create(V, &smp) != 0) cli_die("out of memory");
    int32_t *hist = malloc((size_t)(n_prompt + o->n_gen + 1) * sizeof(int32_t));
    if (!hist) cli_die("out of memory");
    memcpy(hist, ids, (size_t)n_prompt * sizeof(int32_t));
    struct tok_stream ts;
    tok_stream_init(&ts);
    char buf[TOK_STREAM_MAX];
    int n_out = 0;
    if (o->print_ids) putchar('[');
    for (int i = 0; i < o->n_gen; i++) {
        int32_t t = smp_sample(smp, &sp, &rng, logits, hist, n_prompt + n_out, n_out, NULL, 0);
        if (tok_is_eog(m->vocab, t)) break;
        hist[n_prompt + n_out++] = t;
        if (o->print_ids) {
            printf(i ? ", %d" : "%d", t);
        } else {
            int k = tok_stream_push(&ts, m->vocab, t, buf, sizeof buf);
            if (k > 0) fwrite(buf, 1, (size_t)k, stdout);
        }
        fflush(stdout);
        if (i + 1 < o->n_gen) cli_feed(r, 0, &t, 1, FWD_LOGITS_LAST, logits);
    }
    if (o->print_ids) {
        printf("]\n");
    } else {
        int k = tok_stream_flush(&ts, buf, sizeof buf);
        if (k > 0) fwrite(buf, 1, (size_t)k, stdout);
        putchar('\n');
    }
    double t2 = clock_mono_s();
    LOG_I("cli", 0, "prompt %d tokens in %.3f s, generated %d in %.3f s", n_prompt, t1 - t0,
          n_out, t2 - t1);
    smp_ctx_destroy(smp);
    free(hist);
    free(logits);
    free(ids);
    runner_destroy(r);
    model_free(m);
    return 0;
}
