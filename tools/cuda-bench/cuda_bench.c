/* cuda_bench — see cuda_bench.h. */
#include "tools/cuda-bench/cuda_bench.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "engine/kernels/kern.h"
#include "engine/kvstore.h"
#include "engine/model.h"
#include "engine/tokenizer.h"

#define CB_BLOCK 16

static int cb_argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Per-step accounting of one timed run: wall time and the device's share (CUDA events). */
struct cb_acc {
    double wall, h2d, gpu, d2h; /* seconds, summed over the run's steps */
    double cls[5];              /* profiled runs: matmul, attn, norm, other, head (seconds) */
    int steps, timed, graphed;  /* timed: steps the backend timed; graphed: replayed graphs */
};

/* Median of n values (sorts them). */
static int cb_cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double cb_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cb_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Everything one measurement run holds; freed by cb_free. */
struct cb {
    struct model *m;
    struct kvstore_pool *kv;
    struct fwd_ctx *f;
    int32_t *full, *swa; /* [n_seqs][n_full], [n_seqs][ring] */
    struct kvstore_seq *seq; /* [n_seqs] */
    int32_t *ids;        /* [n_seqs][ctx] token ids */
    float *logits;       /* [n_seqs][n_vocab] */
    uint8_t *gflag;      /* [n_seqs] decode rows asked as greedy ids (all 1), or NULL */
    int32_t *gid;        /* [n_seqs] the ids fwd_run_greedy returned (-1: a full row) */
    int n_full, ring, ctx;
    struct cb_acc *acc;  /* where the current run's steps are counted, or NULL */
};

/* One fwd_run (fwd_run_greedy with greedy flags), counted into b->acc. */
static int cb_step(struct cb *b, const struct fwd_seq *q, int n, float *logits,
                   const uint8_t *greedy) {
    const double t0 = clock_mono_s();
    const int rc = fwd_run_greedy(b->f, q, n, logits, greedy, b->gid);
    if (rc != FWD_OK || !b->acc) return rc;
    struct cb_acc *a = b->acc;
    a->wall += clock_mono_s() - t0;
    a->steps++;
    struct fwd_step_times st;
    if (fwd_last_step_times(b->f, &st) == 0) {
        a->h2d += st.h2d_ms * 1e-3;
        a->gpu += st.gpu_ms * 1e-3;
        a->d2h += st.d2h_ms * 1e-3;
        const double cls[5] = {st.matmul_ms, st.attn_ms, st.norm_ms, st.other_ms, st.head_ms};
        for (int i = 0; i < 5; i++)
            a->cls[i] += cls[i] * 1e-3;
        a->graphed += st.graph;
        a->timed++;
    }
    return rc;
}

static void cb_free(struct cb *b) {
    fwd_destroy(b->f);
    kvstore_destroy(b->kv);
    model_free(b->m);
    free(b->full);
    free(b->swa);
    free(b->seq);
    free(b->ids);
    free(b->logits);
    free(b->gflag);
    free(b->gid);
}

/* Prefills n tokens of sequence s from position 0 in steps of at most `step` tokens. */
static int cb_prefill(struct cb *b, int s, int n, int step) {
    for (int done = 0; done < n;) {
        const int k = n - done < step ? n - done : step;
        struct fwd_seq q = {b->ids + (size_t)s * b->ctx + done, k, done, &b->seq[s],
                            done + k == n ? FWD_LOGITS_LAST : FWD_LOGITS_NONE};
        int rc = cb_step(b, &q, 1, b->logits + (size_t)s * b->m->cfg.n_vocab, NULL);
        if (rc != FWD_OK) return rc;
        done += k;
    }
    return FWD_OK;
}

/* n_steps greedy decode steps of sequences [0, n) together, each at its own position. With
 * b->gflag the steps ask for greedy ids (what the scheduler does for greedy requests), so a
 * backend that reduces on the device copies back one id per row. */
static int cb_decode(struct cb *b, int n, const int *pos0, int n_steps, struct fwd_seq *qs) {
    const int V = b->m->cfg.n_vocab;
    for (int t = 0; t < n_steps; t++) {
        for (int s = 0; s < n; s++) {
            int32_t *row = b->ids + (size_t)s * b->ctx;
            const int p = pos0[s] + t;
            row[p] = t > 0 && b->gflag && b->gid[s] >= 0 ? b->gid[s]
                                                         : cb_argmax(b->logits + (size_t)s * V, V);
            qs[s] = (struct fwd_seq){row + p, 1, p, &b->seq[s], FWD_LOGITS_LAST};
        }
        int rc = cb_step(b, qs, n, b->logits, b->gflag);
        if (rc != FWD_OK) return rc;
    }
    return FWD_OK;
}

int cuda_bench_run(const struct cuda_bench_opts *o, char *json, size_t jsonlen, char *err,
                 size_t errlen) {
    struct cb b;
    memset(&b, 0, sizeof b);
    const int S = o->n_seqs > 0 ? o->n_seqs : 1;
    const int P = o->prompt_tokens > 0 ? o->prompt_tokens : 1;
    const int G = o->gen_tokens > 0 ? o->gen_tokens : 1;
    const int SP = o->seq_prompt_tokens > 0 ? o->seq_prompt_tokens : 1;
    struct fwd_seq *qs = NULL;
    int *pos0 = NULL;
    int rc = model_load(o->model, &b.m, err, errlen);
    if (rc != 0) goto fail;
    const int V = b.m->cfg.n_vocab;
    const int max_tokens = P > S ? P : S;
    b.ctx = (P > SP ? P : SP) + G + 1;
    b.n_full = (b.ctx + CB_BLOCK - 1) / CB_BLOCK;
    b.ring = kvstore_swa_ring_blocks(b.m, CB_BLOCK, max_tokens);
    rc = kvstore_create(b.m, KVSTORE_F16, CB_BLOCK, S * b.n_full, S * b.ring, &b.kv, err, errlen);
    if (rc != 0) goto fail;
    b.full = malloc(sizeof(int32_t) * (size_t)S * (size_t)b.n_full);
    b.swa = malloc(sizeof(int32_t) * (size_t)S * (size_t)(b.ring ? b.ring : 1));
    b.seq = calloc((size_t)S, sizeof *b.seq);
    b.ids = malloc(sizeof(int32_t) * (size_t)S * (size_t)b.ctx);
    b.logits = malloc(sizeof(float) * (size_t)S * (size_t)V);
    b.gid = malloc(sizeof(int32_t) * (size_t)S);
    if (!o->full_logits) b.gflag = malloc((size_t)S);
    if (b.gflag) memset(b.gflag, 1, (size_t)S);
    qs = malloc(sizeof *qs * (size_t)S);
    pos0 = malloc(sizeof *pos0 * (size_t)S);
    if (!b.full || !b.swa || !b.seq || !b.ids || !b.logits || !b.gid ||
        (!o->full_logits && !b.gflag) || !qs || !pos0) {
        snprintf(err, errlen, "out of host memory");
        goto fail;
    }
    for (int s = 0; s < S; s++) {
        for (int i = 0; i < b.n_full; i++)
            b.full[s * b.n_full + i] = s * b.n_full + i;
        for (int i = 0; i < b.ring; i++)
            b.swa[s * b.ring + i] = s * b.ring + i;
        b.seq[s] = (struct kvstore_seq){b.full + (size_t)s * b.n_full, b.n_full,
                                    b.ring ? b.swa + (size_t)s * b.ring : NULL, b.ring};
        int32_t *row = b.ids + (size_t)s * b.ctx;
        row[0] = tok_bos(b.m->vocab);
        for (int i = 1; i < b.ctx; i++)
            row[i] = (int32_t)(((uint32_t)i * 7919u + (uint32_t)s * 104729u + 1000u) %
                               (uint32_t)(V - 10)) +
                     5;
    }
    const struct fwd_opts fo = {.max_tokens = max_tokens,
                                .max_seqs = S,
                                .max_logit_rows = S,
                                .n_threads = o->threads,
                                .device = o->device,
                                .deterministic = o->deterministic};
    rc = fwd_create(b.m, b.kv, &fo, &b.f, err, errlen);
    if (rc != 0) goto fail;
    const enum fwd_device ran = fwd_device(b.f);
    if (o->device == FWD_DEVICE_CUDA && ran != FWD_DEVICE_CUDA) {
        snprintf(err, errlen, "asked for CUDA, got the CPU");
        goto fail;
    }

    /* Warm-up: one full-size prefill and a few decode steps, so that first launches, lazy
     * module loading, allocator and clocks are outside every timed run. */
    if ((rc = cb_prefill(&b, 0, P, P)) != FWD_OK) goto fail_run;
    pos0[0] = P;
    if ((rc = cb_decode(&b, 1, pos0, G < 4 ? G : 4, qs)) != FWD_OK) goto fail_run;

    /* R repeats of each measurement; medians over repeats. Sequence 0 is re-prefilled from
     * position 0 each time (the KV rows are overwritten). */
    enum { M_PREFILL, M_DEC1, M_DECS, M_N };
    static const char *mname[M_N] = {"prefill", "decode_1seq", "decode_nseq"};
    const int R = o->repeats > 0 ? (o->repeats < 64 ? o->repeats : 64) : 1;
    double rate[M_N][64], step_ms[M_N][64], host_ms[M_N][64], gpu_ms[M_N][64],
        copy_ms[M_N][64];
    int timed_all = 1;
    double graphed[M_N] = {0};
    struct cb_acc prof[M_N];
    memset(prof, 0, sizeof prof);
    /* R timed repeats, then (when the backend can) one profiled pass: an event after every
     * operation, summed per class (slower than the timed runs: no graphs). */
    const int can_prof = fwd_set_profile(b.f, 0) == 0;
    for (int r = 0; r < R + can_prof; r++) {
        if (r == R) fwd_set_profile(b.f, 1);
        for (int mi = 0; mi < M_N; mi++) {
            if (mi == M_DECS) /* S prompts prefilled one by one, not timed */
                for (int s = 0; s < S; s++) {
                    if ((rc = cb_prefill(&b, s, SP, max_tokens)) != FWD_OK) goto fail_run;
                    pos0[s] = SP;
                }
            struct cb_acc acc = {0};
            b.acc = r == R ? &prof[mi] : &acc;
            if (mi == M_PREFILL) rc = cb_prefill(&b, 0, P, P);
            else if (mi == M_DEC1) pos0[0] = P, rc = cb_decode(&b, 1, pos0, G, qs);
            else rc = cb_decode(&b, S, pos0, G, qs);
            b.acc = NULL;
            if (rc != FWD_OK) goto fail_run;
            if (r == R) continue;
            graphed[mi] += acc.steps ? (double)acc.graphed / acc.steps / R : 0.0;
            const double toks = mi == M_PREFILL ? P : mi == M_DEC1 ? G : (double)S * G;
            rate[mi][r] = toks / acc.wall;
            step_ms[mi][r] = 1e3 * acc.wall / acc.steps;
            gpu_ms[mi][r] = 1e3 * acc.gpu / acc.steps;
            copy_ms[mi][r] = 1e3 * (acc.h2d + acc.d2h) / acc.steps;
            host_ms[mi][r] = step_ms[mi][r] - gpu_ms[mi][r] - copy_ms[mi][r];
            if (acc.timed != acc.steps) timed_all = 0;
        }
    }
    size_t at = (size_t)snprintf(
        json, jsonlen,
        "{\"model\": \"%s\", \"file\": \"%s\", \"device\": \"%s\", \"deterministic\": %d, \"greedy_ids\": %d, \"repeats\": %d, "
        "\"prefill_tokens\": %d, \"gen_tokens\": %d, \"n_seqs\": %d, \"seq_prompt_tokens\": %d, "
        "\"threads\": %d, \"isa\": \"%s\", \"device_timed\": %d",
        b.m->name, o->model, ran == FWD_DEVICE_CUDA ? "cuda" : "cpu", o->deterministic, !o->full_logits, R, P,
        G, S, SP,
        o->threads, kern_isa_name(kern_active_isa()), timed_all);
    for (int mi = 0; mi < M_N && at < jsonlen; mi++) {
        const double best = rate[mi][0];
        double mx = best;
        for (int r = 1; r < R; r++)
            if (rate[mi][r] > mx) mx = rate[mi][r];
        at += (size_t)snprintf(
            json + at, jsonlen - at,
            ", \"%s_tok_s\": %.1f, \"%s_tok_s_max\": %.1f, \"%s_step_ms\": %.3f, "
            "\"%s_gpu_ms\": %.3f, \"%s_copy_ms\": %.3f, \"%s_host_ms\": %.3f",
            mname[mi], cb_median(rate[mi], R), mname[mi], mx, mname[mi],
            cb_median(step_ms[mi], R), mname[mi], cb_median(gpu_ms[mi], R), mname[mi],
            cb_median(copy_ms[mi], R), mname[mi], cb_median(host_ms[mi], R));
    }
    for (int mi = 0; mi < M_N && at < jsonlen; mi++) {
        at += (size_t)snprintf(json + at, jsonlen - at, ", \"%s_graph_share\": %.2f", mname[mi],
                               graphed[mi]);
        const struct cb_acc *a = &prof[mi];
        if (!can_prof || !a->steps || at >= jsonlen) continue;
        const double k = 1e3 / a->steps; /* ms per step */
        at += (size_t)snprintf(json + at, jsonlen - at,
                               ", \"%s_prof_ms\": {\"gpu\": %.3f, \"matmul\": %.3f, "
                               "\"attention\": %.3f, \"norm\": %.3f, \"other\": %.3f, "
                               "\"head\": %.3f, \"copies\": %.3f, \"wall\": %.3f}",
                               mname[mi], k * a->gpu, k * a->cls[0], k * a->cls[1], k * a->cls[2],
                               k * a->cls[3], k * a->cls[4], k * (a->h2d + a->d2h), k * a->wall);
    }
    if (at < jsonlen) snprintf(json + at, jsonlen - at, "}");
    free(qs);
    free(pos0);
    cb_free(&b);
    return 0;
fail_run:
    snprintf(err, errlen, "fwd_run: %s", fwd_strerror(rc));
fail:
    free(qs);
    free(pos0);
    cb_free(&b);
    return -1;
}
