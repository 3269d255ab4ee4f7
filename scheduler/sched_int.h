/*
 * sched_int — the scheduler's private structures, shared by sched.c (the public API:
 * options, create/destroy, submit, cancel, statistics) and sched_loop.c (the scheduler
 * thread: admission, batching, one step, events). Nothing outside scheduler/ includes it.
 */
#ifndef GEMMAD_SCHED_INT_H
#define GEMMAD_SCHED_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "base/prom.h"
#include "engine/tokenizer.h"
#include "scheduler/kvcache.h"
#include "scheduler/sample.h"
#include "scheduler/sched.h"
#include "scheduler/spec.h"
#include "scheduler/stop.h"

#define SCHED_MOD "sched"
#define SCHED_MAX_TOP 20
/* Logits rows, beyond one per sequence, that the prompt chunks of prompt_logprobs requests
 * and speculative draft rows (sched_spec.c takes its share first) may use in one step (each row is
 * n_vocab floats). */
#define SCHED_PLP_ROWS 32
#define SCHED_MAX_SESSIONS 64

struct seq {
    uint64_t id;                 /* what sched_submit returned */
    uint64_t order;              /* arrival number: FCFS and "youngest" */
    struct seq *prev, *next;     /* waiting-list links (guarded by lock) */
    int32_t *hist;               /* [cap] prompt then output tokens */
    int n_hist, n_prompt, cap;
    int n_out;                   /* tokens sampled */
    int n_kv;                    /* positions in the KV cache */
    int max_tokens;
    int cached_tokens;           /* positions reused at the first admission */
    int admitted;                /* 1 once admitted (cached_tokens and queue_s fixed) */
    double t_submit, queue_s;    /* CLOCK_MONOTONIC seconds; wait before first admission */
    double deadline;             /* 0 = none */
    int cancel;                  /* scheduler-thread copy of a cancellation */
    uint64_t group;              /* fairness group (sched_req.group, or the id) */
    int paused;                  /* scheduler-thread copy of sched_pause */
    int out_at_admit;            /* n_out when last admitted (the fairness quantum) */
    int requeued;                /* preempted at least once (fairness) */
    struct sched_sampling sp;    /* logit_bias points at bias */
    struct sched_bias *bias;     /* [sp.n_logit_bias] copy */
    struct smp_rng rng;
    struct stop_state stop;
    struct tok_stream ts;
    char *session_id;            /* copy or NULL */
    int prompt_lp;               /* report prompt logprobs (PROMPT events) */
    int lp_next;                 /* next prompt position to report (survives preemption) */
    int lp_row0;                 /* per step: first logits row of a prompt chunk, or -1 */
    int embed;                   /* embedding request: no sampling */
    enum sched_pooling pooling;
    double *emb_acc;             /* [n_embd] embed: sum (mean) or last hidden row */
    float *emb_out;              /* [n_embd] embed: the pooled vector sent with DONE */
    int n_embd;
    int hidden_row0;             /* per step: the chunk's first row of sched.hidden */
    int top_logprobs, ignore_eos;
    int control_bytes;           /* sched_req.control_bytes */
    struct gram *gram;           /* the request's grammar (a reference) or NULL */
    struct gram_match *gm;       /* its matcher once active (sched_gram.c) */
    struct gram_match *gm_spec;  /* a spare one, for verifying drafts (greedy, not lazy) */
    char *trig;                  /* lazy grammar: trigger text (NUL-terminated) or NULL */
    char *trig_buf;              /* [trig_cap] the output's last bytes while dormant */
    int trig_n, trig_cap;
    const char *gram_err;        /* set by the sampling task: the grammar failed */
    void (*on_event)(void *user, const struct sched_event *ev);
    void *user;
    struct kvcache_seq kv;            /* block tables */
    /* per step */
    int step_n;                  /* tokens fed this step (0 = not in the batch) */
    int logit_row;               /* row of the logits buffer, or -1 */
    int32_t tok;                 /* sampled this step (sample_task) */
    float logprob;               /* its log-probability, when top_logprobs >= 0 */
    char text[TOK_STREAM_MAX];   /* token text scratch */
    char *done_text;             /* [done_cap] text released with DONE */
    size_t done_cap;
    struct sched_top top[SCHED_MAX_TOP];
    struct spec_state spec;      /* drafting state; per step: drafts after the decode row */
};

struct sched {
    const struct model *m;
    struct sched_opts o;
    const struct tok_vocab *vocab;
    int n_vocab;
    int ring;                    /* SWA ring slots per sequence */
    struct kvstore_pool *pool;
    struct fwd_ctx *fwd;
    struct kvcache *kv;
    struct smp_ctx **smp;        /* [n_smp] one sampler scratch per compute thread */
    int n_smp;
    int32_t *eog;                /* [n_eog] end-of-generation ids (banned under ignore_eos) */
    int n_eog;
    float *logits;               /* [max_seqs + SCHED_PLP_ROWS][n_vocab] */
    uint8_t *greedy;             /* [max_seqs + SCHED_PLP_ROWS] per logits row, enum fwd_row:
                                  * GREEDY for a plain greedy request (fwd_run_rows may return
                                  * its id only), TOPK for topk_row's, else FULL */
    int32_t *gid;                /* [.. the same] the ids it returned, -1: the row is there */
    float *tk_scale;             /* [.. the same] a FWD_ROW_TOPK row's 1/temperature */
    int32_t *tk_id;              /* [.. the same][FWD_TOPK_MAX] a top-k row's candidates */
    float *tk_val;               /* [.. the same][FWD_TOPK_MAX] their scaled logits */
    int topk_rows;               /* 1: top_k requests may get candidates instead of rows
                                  * (topk_row; GEMMAD_TOPK_ROWS=0 in the environment: 0) */
    float *hidden;               /* [max_batch_tokens][n_embd] final hidden rows of a step
                                  * with embed sequences */
    int n_embd;
    /* prompt positions scored this step, one per logits row (computed on the pool) */
    int n_plp;
    int *plp_row, *plp_k;        /* [max_seqs + SCHED_PLP_ROWS] logits row, alternatives */
    int32_t *plp_tok;            /* the prompt token scored */
    float *plp_lp;               /* its logprob */
    struct sched_top *plp_top;   /* [.. * SCHED_MAX_TOP] its alternatives */
    float *scratch;              /* [n_smp][n_vocab] logits copies when logprobs are asked for */
    struct seq **sampling;       /* [max_seqs] sequences sampled this step */
    struct fwd_seq *rows;        /* [max_seqs] */
    struct kvstore_seq *views;       /* [max_seqs] */
    struct seq **run;            /* [max_seqs] running, by arrival order (scheduler thread) */
    int n_run;
    struct seq **batch;          /* [max_seqs] */
    struct gram_vocab *gv;       /* the vocabulary trie, built as the thread starts */
    struct gram_scratch **gx;    /* [n_smp] grammar scratch per compute thread, same */
    uint64_t *gmask;             /* [n_smp][(n_vocab + 63) / 64] allowed-token masks */
    uint64_t *cancel_work;       /* scheduler's copy of the cancel ids */
    int cap_work;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    /* Guarded by lock: */
    struct seq *wait_head, *wait_tail;
    int n_waiting;
    long long waiting_tokens;
    /* Of those, the paused ones (a client not reading): admitted work, not backlog, so
     * they do not count against max_queue / max_queued_tokens. */
    int n_wait_paused;
    long long wait_paused_tokens;
    uint64_t *cancel_ids;        /* pending sched_cancel ids */
    int n_cancel, cap_cancel;
    struct sched_pause_op { uint64_t id; int paused; } *pause_ops; /* pending sched_pause */
    int n_pause, cap_pause;
    int stopping, draining;
    uint64_t next_id, next_order;
    struct sched_counts counts;
    struct kvcache_stats kst;
    long long preemptions, rejections, steps;
    long long topk_rows_done;    /* logits rows sampled from top-k candidates (lock) */
    struct prom_hist h_batch, h_tokens, h_step;
    uint64_t loop_turns;         /* scheduler-loop turns finished (the progress counter) */
    double progress_at;          /* CLOCK_MONOTONIC s: the last turn ended or the thread woke */
    int idle_wait;               /* 1 while the thread sleeps for want of work */
    uint64_t spec_total[4];      /* draft tokens, accepted drafts, verified sequence-steps,
                                  * draft tokens a grammar forced */
    /* Scheduler thread: */
    int spec_on;                 /* enum spec_mode in effect (OFF unless batch-invariant) */
    uint64_t spec_pend[4];       /* this step's spec_total increments */
    struct spec_cost spec_cost;  /* step seconds by rows (steps without prefill) */
    double pf_tok_s;             /* EMA: seconds one prefill token adds to a step (0: unknown) */
};

static inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

/* sched_gram.c: grammar-constrained sequences. */
/* Builds the vocabulary trie and the per-thread grammar scratch (scheduler thread, at start). */
void sched_gram_warm(struct sched *s);
/* Scheduler thread, before a step's sampling: builds the trie and scratch on first use and
 * the sequence's matcher when its grammar is active. 0, or -1 with *msg set. */
int sched_gram_prepare(struct sched *s, struct seq *q, const char **msg);
/* Sampling task `task`: logits of tokens the grammar forbids become -inf (end-of-generation
 * ids only where the sentence may end). Sets q->gram_err when nothing is allowed. */
void sched_gram_mask(struct sched *s, struct seq *q, int task, float *logits);
/* Sampling task `task`, a greedy sequence: 1 and *tok when the raw row's argmax is a token
 * the grammar takes here (then it is also the masked row's argmax, so the mask is not
 * needed); 0 when the mask must decide. */
int sched_gram_greedy(struct sched *s, struct seq *q, int task, const float *logits,
                      int32_t *tok);
/* Sampling task `task`: verifies a greedy constrained sequence's drafts (spec_verify's job
 * for it): at each position the greedy token under the grammar, the spare matcher advanced
 * over the drafts accepted before it. Fills q->spec's tok and n_emit. */
void sched_gram_spec_verify(struct sched *s, struct seq *q, int task);
/* Scheduler thread, planning a step: up to k drafts for a greedy constrained sequence, written
 * after its history: the bytes its grammar forces from here (the rest of a key, punctuation,
 * the rest of an enum value once only one fits), cut into tokens by longest match. 0 when
 * the grammar forces nothing here (prompt lookup is tried instead). */
int sched_gram_draft(struct sched *s, struct seq *q, int k);
/* 1 when the request's sampling is plain greedy (temperature 0, no bias, penalties, banned
 * ids or logprobs): its tokens are argmaxes of the raw (or grammar-masked) rows. */
int sched_greedy_sampling(const struct seq *q);
/* Scheduler thread, after sampling: advance the matcher (or watch for the trigger).
 * Returns 0, 1 when the grammar allows nothing more (finish), -1 with *msg on failure. */
int sched_gram_accept(struct sched *s, struct seq *q, int32_t tok, const char **msg);
/* Frees the sequence's grammar state; sched_destroy's part: sched_gram_destroy. */
void sched_gram_seq_free(struct seq *q);
void sched_gram_destroy(struct sched *s);

/* sched_loop.c */
void sched_seq_free(struct seq *q);
/* Lock held. */
void sched_wait_push_back(struct sched *s, struct seq *q);
/* Lock held: try to admit waiting q (blocks for its tokens plus a reserve); 1 when admitted. */
int sched_try_admit(struct sched *s, struct seq *q, double now);
/* Lock held: running q back to the waiting list (before newcomers), its blocks released. */
void sched_requeue(struct sched *s, struct seq *q);

/* sched_fair.c, lock held: admit waiting sequences into free decode slots, fairly between
 * groups, preempting where the policy says so. */
void sched_fair_admit(struct sched *s, double now);

/* Lock held: copies the counts /health and /metrics read. */
void sched_publish_counts(struct sched *s);
/* The scheduler thread (arg = struct sched). */
void *sched_main(void *arg);

/* sched_spec.c: the step's speculative hooks (scheduler thread). sched_spec_plan, before the
 * batch is built: drafts for decoding sequences (q->spec.n_draft, written at hist[n_hist..]),
 * taken from the step's token budget and the extra logits rows. sched_spec_sample, in place
 * of one sample on compute task `task`: verifies a sequence's rows. sched_spec_accept, after
 * sampling: adapts, counts, and returns how many tokens to report (1 without drafts);
 * sched_spec_take(q, j) loads the j-th of them into q->tok (q->logprob, q->top) before
 * handle_token. sched_spec_step_done: the step's time for the cost model.
 * sched_spec_publish (lock held): adds the step's counts to spec_total.
 * sched_prefill_cap: the prefill tokens a step with `dec` decode rows and `waiting` prompts
 * still prefilling may carry under prefill_stall (INT_MAX when unbounded or not yet
 * measured). */
void sched_spec_plan(struct sched *s, int *tokens_left, int *rows_left);
void sched_spec_sample(struct sched *s, struct seq *q, int task);
int sched_spec_accept(struct sched *s, struct seq *q);
void sched_spec_take(struct seq *q, int j);
void sched_spec_publish(struct sched *s);
/* rows: the step's rows (n_prefill of them prefill tokens); seconds: its wall time. */
void sched_spec_step_done(struct sched *s, int rows, int n_prefill, double seconds);
int sched_prefill_cap(const struct sched *s, int dec, int waiting);

#endif
