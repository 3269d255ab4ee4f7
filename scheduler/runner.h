/*
 * runner — a few sequences run straight on the engine, without the scheduler's queue,
 * batching policy or sampling: for tools (gemmad-cli generate/logits/taps/bench) and tests
 * that want one fwd_run per call they make.
 *
 * Blocks come from the scheduler's bookkeeping (scheduler/kvcache.h) over a kvstore_pool sized
 * exactly for max_seqs sequences of max_ctx positions, so a runner never runs out of KV and
 * never preempts; there is no prefix cache and there are no sessions. All memory (pool,
 * block tables, step arrays) is allocated by runner_create; feeding and stepping allocate
 * nothing.
 *
 * Threads: a runner belongs to the thread that created it (fwd_run's rule); the model must
 * outlive it.
 */
#ifndef GEMMAD_RUNNER_H
#define GEMMAD_RUNNER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/forward.h"
#include "engine/kvstore.h"
#include "engine/model.h"

/* Errors are the fwd_status codes (a failed step), or RUNNER_ECTX. */
enum runner_status { RUNNER_OK = 0, RUNNER_ECTX = -10 /* past max_ctx */ };

struct runner_opts {
    int max_seqs;             /* sequences, each with its own KV (>= 1) */
    int max_ctx;              /* most positions one sequence reaches */
    int batch;                /* most tokens of one sequence per step (prefill chunk) */
    int max_logit_rows;       /* most logit rows one step returns */
    int block_size;           /* positions per KV block */
    enum kvstore_dtype kv_dtype;
    int n_threads;            /* compute threads (0 = physical cores) */
    enum fwd_device device;
    int deterministic;
};

struct runner;

/* On failure err holds a message (from the KV pool or fwd_create) and the status is
 * returned (FWD_ENOMEM, FWD_EINVAL, ...). */
int runner_create(const struct model *m, const struct runner_opts *o, struct runner **out,
                  char *err, size_t errlen);
void runner_destroy(struct runner *r);

/* Feed ids[0..n) to sequence seq at its next positions, in steps of at most batch tokens.
 * FWD_LOGITS_LAST: the last fed token's logits in out[n_vocab]; FWD_LOGITS_ALL: every fed
 * token's, out[n][n_vocab] (each step's rows must fit max_logit_rows); NONE: out unused. */
int runner_feed(struct runner *r, int seq, const int32_t *ids, int n, enum fwd_logits lg,
                float *out);

/* One decode step over sequences 0..n_seqs-1 together (one fwd_run of n_seqs rows): token[i]
 * goes to sequence i; logits[n_seqs][n_vocab] receives each one's next-token logits. When
 * any sequence is full (RUNNER_ECTX) nothing runs and no position advances. */
int runner_step(struct runner *r, const int32_t *token, int n_seqs, float *logits);

int runner_pos(const struct runner *r, int seq);     /* positions in sequence seq's KV */
int runner_max_ctx(const struct runner *r);
struct fwd_ctx *runner_fwd(struct runner *r);        /* for fwd_set_tap, fwd_threads */

#endif
