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

/* Everything one measurement run holds; freed by cb_free. */
struct cb {
    struct model *m;
    struct kvstore_pool *kv;
    struct fwd_ctx *f;
    int32_t *full, *swa; /* [n_seqs][n_full], [n_seqs][ring] */
    struct kvstore_seq *seq; /* [n_seqs] */
    int32_t *ids;        /* [n_seqs][ctx] token ids */
    float *logits;       /* [n_seqs][n_vocab] */
    int n_full, ring, ctx;
};

static void cb_free(struct cb *b) {
    fwd_destroy(b->f);
    kvstore_destroy(b->kv);
    model_free(b->m);
    free(b->full);
    free(b->swa);
    free(b->seq);
    free(b->ids);
    free(b->logits);
}

/* Prefills n tokens of sequence s from position 0 in steps of at most `step` tokens. */
static int cb_prefill(struct cb *b, int s, int n, int step) {
    for (int done = 0; done < n;) {
        const int k = n - done < step ? n - done : step;
        struct fwd_seq q = {b->ids + (size_t)s * b->ctx + done, k, done, &b->seq[s],
                            done + k == n ? FWD_LOGITS_LAST : FWD_LOGITS_NONE};
        int rc = fwd_run(b->f, &q, 1, b->logits + (size_t)s * b->m->cfg.n_vocab);
        if (rc != FWD_OK) return rc;
        done += k;
    }
    return FWD_OK;
}

/* n_steps greedy decode steps of sequences [0, n) together, each at its own position. */
static int cb_decode(struct cb *b, int n, const int *pos0, int n_steps, struct fwd_seq *qs) {
    const int V = b->m->cfg.n_vocab;
    for (int t = 0; t < n_steps; t++) {
        for (int s = 0; s < n; s++) {
            int32_t *row = b->ids + (size_t)s * b->ctx;
            const int p = pos0[s] + t;
            row[p] = cb_argmax(b->logits + (size_t)s * V, V);
            qs[s] = (struct fwd_seq){row + p, 1, p, &b->seq[s], FWD_LOGITS_LAST};
        }
        int rc = fwd_run(b->f, qs, n, b->logits);
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
    qs = malloc(sizeof *qs * (size_t)S);
    pos0 = malloc(sizeof *pos0 * (size_t)S);
    if (!b.full || !b.swa || !b.seq || !b.ids || !b.logits || !qs || !pos0) {
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

    /* warm-up (first launches, allocator and clocks), then the single-sequence runs */
    if ((rc = cb_prefill(&b, 0, P < 16 ? P : 16, P)) != FWD_OK) goto fail_run;
    double t0 = clock_mono_s();
    if ((rc = cb_prefill(&b, 0, P, P)) != FWD_OK) goto fail_run;
    const double t_prefill = clock_mono_s() - t0;
    pos0[0] = P;
    t0 = clock_mono_s();
    if ((rc = cb_decode(&b, 1, pos0, G, qs)) != FWD_OK) goto fail_run;
    const double t_dec1 = clock_mono_s() - t0;

    /* S sequences: prompts prefilled one by one (not timed), then decoded together */
    for (int s = 0; s < S; s++) {
        if ((rc = cb_prefill(&b, s, SP, max_tokens)) != FWD_OK) goto fail_run;
        pos0[s] = SP;
    }
    t0 = clock_mono_s();
    if ((rc = cb_decode(&b, S, pos0, G, qs)) != FWD_OK) goto fail_run;
    const double t_decS = clock_mono_s() - t0;

    snprintf(json, jsonlen,
             "{\"model\": \"%s\", \"device\": \"%s\", \"deterministic\": %d, "
             "\"prefill_tokens\": %d, \"prefill_tok_s\": %.1f, \"gen_tokens\": %d, "
             "\"decode_1seq_tok_s\": %.1f, \"n_seqs\": %d, \"seq_prompt_tokens\": %d, "
             "\"decode_nseq_tok_s\": %.1f, \"decode_nseq_step_ms\": %.3f, \"threads\": %d, "
             "\"isa\": \"%s\"}",
             b.m->name, ran == FWD_DEVICE_CUDA ? "cuda" : "cpu", o->deterministic, P, P / t_prefill,
             G, G / t_dec1, S, SP, (double)S * G / t_decS, 1e3 * t_decS / G, o->threads,
             kern_isa_name(kern_active_isa()));
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
