/*
 * gemmad-cli bench: prefill and greedy decode speed on a natural-text prompt.
 *
 * --seqs N: N sequences, each prefilled alone with its own prompt (the bench text started
 * at a different token), then decoded greedily together, one fwd_run of N rows per step
 * (what the scheduler does with N running streams). Reports the aggregate decode tok/s,
 * N * gen / time, like llama.cpp's batched-bench. N = 1 is the single-stream bench.
 *
 * --profile: the backend splits each step's time by operation class (fwd_set_profile); a
 * line {"profile": ...} before the usual one gives the prefill steps' classes summed and the
 * decode steps' averaged per step, with "step" (the backend's own time of a step) beside
 * "wall" (the loop's, sampling included), all in ms.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "engine/gguf.h"
#include "engine/kernels/pool.h"
#include "engine/tokenizer.h"
#include "scheduler/sample.h"
#include "tools/gemmad-cli/cli.h"

/* Sums of fwd_step_times over steps: class times and the step time, in ms. */
struct bench_prof {
    double cls[5], step;
    int steps;
};

static void prof_add(struct runner *r, struct bench_prof *p) {
    struct fwd_step_times t;
    if (fwd_last_step_times(runner_fwd(r), &t) != 0 || !t.profiled) return;
    const double c[5] = {t.matmul_ms, t.attn_ms, t.norm_ms, t.other_ms, t.head_ms};
    for (int i = 0; i < 5; i++)
        p->cls[i] += c[i];
    p->step += t.gpu_ms;
    p->steps++;
}

/* "name": {...} with the sums divided by div. */
static void prof_print(const char *name, const struct bench_prof *p, double div, double wall) {
    static const char *const cls[5] = {"matmul", "attn", "norm", "other", "head"};
    printf("\"%s\": {", name);
    for (int i = 0; i < 5; i++)
        printf("\"%s\": %.4f, ", cls[i], p->cls[i] / div);
    printf("\"step\": %.4f, \"wall\": %.4f, \"steps\": %d}", p->step / div, wall / div, p->steps);
}

int cli_bench(const struct cli_opts *o) {
    double load_s;
    struct model *m = cli_load(o, &load_s);
    double rss_load = cli_rss_mib();
    const int V = m->cfg.n_vocab, np = o->prompt_tokens, ng = o->bench_gen, ns = o->seqs;
    /* A natural-text prompt repeated up to the requested length. */
    static const char *text =
        "The history of the printing press begins in the fifteenth century, when movable "
        "type changed how books were made, sold and read across Europe and beyond. ";
    int nt;
    int32_t *base = cli_encode(m->vocab, text, strlen(text), 0, 0, &nt);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)np * (size_t)ns);
    int32_t *next = malloc(sizeof(int32_t) * (size_t)ns);
    float *logits = malloc(sizeof(float) * (size_t)V * (size_t)ns);
    if (!ids || nt == 0) cli_die("cannot build the benchmark prompt");
    if (!next || !logits) cli_die("out of memory");
    for (int s = 0; s < ns; s++) {
        int32_t *p = ids + (size_t)s * (size_t)np;
        p[0] = tok_bos(m->vocab);
        for (int i = 1; i < np; i++) p[i] = base[(i - 1 + s) % nt];
    }
    const int batch = o->batch < np ? np : o->batch; /* each prompt in one step */
    struct runner *r = cli_runner(m, o, ns, np + ng + 1, batch, ns);
    struct bench_prof pp = {0}, pd = {0};
    if (o->profile && fwd_set_profile(runner_fwd(r), 1) != 0)
        cli_die("--profile: this backend cannot profile its steps");
    double t0 = clock_mono_s();
    for (int s = 0; s < ns; s++) {
        cli_feed(r, s, ids + (size_t)s * (size_t)np, np, FWD_LOGITS_LAST, logits);
        if (o->profile) prof_add(r, &pp);
        next[s] = smp_argmax(logits, V);
    }
    double t1 = clock_mono_s();
    for (int i = 0; i < ng; i++) {
        cli_step(r, next, ns, logits);
        if (o->profile) prof_add(r, &pd);
        for (int s = 0; s < ns; s++) next[s] = smp_argmax(logits + (size_t)s * (size_t)V, V);
    }
    double t2 = clock_mono_s();
    if (o->profile) {
        printf("{\"profile\": {");
        prof_print("prefill_ms", &pp, 1.0, (t1 - t0) * 1e3);
        printf(", ");
        prof_print("decode_ms_per_step", &pd, ng, (t2 - t1) * 1e3);
        printf("}}\n");
    }
    const int threads = o->threads ? o->threads : pool_default_threads();
    if (ns == 1) {
        size_t file = m->gguf->map_size;
        printf("{\"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f, \"rss_mib\": %.1f, "
               "\"load_s\": %.3f, \"rss_after_load_mib\": %.1f, \"file_mib\": %.1f, "
               "\"prompt_tokens\": %d, \"gen_tokens\": %d, \"threads\": %d, \"isa\": \"%s\", "
               "\"deterministic\": %d}\n",
               np / (t1 - t0), ng / (t2 - t1), cli_rss_mib(), load_s, rss_load,
               (double)file / (1024.0 * 1024.0), np, ng, threads,
               kern_isa_name(kern_active_isa()), o->deterministic);
    } else {
        printf("{\"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f, \"rss_mib\": %.1f, "
               "\"load_s\": %.3f, \"rss_after_load_mib\": %.1f, \"prompt_tokens\": %d, "
               "\"gen_tokens\": %d, \"seqs\": %d, \"threads\": %d, \"isa\": \"%s\", "
               "\"deterministic\": %d}\n",
               (double)np * ns / (t1 - t0), (double)ng * ns / (t2 - t1), cli_rss_mib(),
               load_s, rss_load, np, ng, ns, threads, kern_isa_name(kern_active_isa()),
               o->deterministic);
    }
    runner_destroy(r);
    free(logits);
    free(next);
    free(ids);
    free(base);
    model_free(m);
    return 0;
}
