/*
 * sched — the scheduler: accepts generation requests from any thread, runs them on one
 * scheduler thread with continuous batching (every step = one fwd_run over one decode row
 * per running sequence plus prefill chunks, within a token budget), samples, applies stop
 * rules, and reports each sequence's progress through events.
 *
 * Ownership: sched_submit copies everything it needs from the request (prompt, stop
 * strings, session id, logit biases), so the caller may free its request at once. The
 * scheduler owns sequences, their KV blocks and sampling state, and frees them when a
 * sequence finishes, fails or is cancelled.
 *
 * Threads: sched_create/sched_destroy from the owning (main) thread. sched_submit,
 * sched_cancel, sched_pause, sched_drain, sched_get_counts and sched_stats may be called from any thread (they take
 * the scheduler's lock, never wait for compute). on_event callbacks run on the scheduler
 * thread: they must not block, must copy what they keep (pointers inside the event are valid
 * only during the call), and must not call back into sched_* except sched_cancel.
 */
#ifndef GEMMAD_SCHED_H
#define GEMMAD_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "base/prom.h"
#include "scheduler/sched_params.h"
#include "engine/forward.h"
#include "engine/kvstore.h"
#include "engine/model.h"

struct sched;
struct sched_event;
struct gram;

struct sched_opts {
    int n_threads;            /* compute threads (0 = physical cores) */
    int n_ctx;                /* max positions per sequence (prompt + generated) */
    int max_batch_tokens;     /* token budget of one step (decode rows + prefill chunks) */
    double prefill_stall;     /* > 1: while sequences decode, prefill chunks are cut so a step
                               * takes about this many times a decode-only step (measured;
                               * sched_spec.c); otherwise only max_batch_tokens bounds them */
    int max_seqs;             /* sequences running at once */
    int kv_block_size;        /* positions per KV block */
    size_t kv_memory_mib;     /* KV pool size in MiB (0: derive from kv_tokens) */
    int kv_tokens;            /* alternatively, total FULL-class token capacity */
    enum kvstore_dtype kv_dtype;  /* f16 default */
    int max_queue;            /* waiting requests before 429 (paused ones not counted) */
    int max_queued_tokens;    /* waiting prompt tokens before 429 (paused ones not counted) */
    int prefix_cache;         /* 1: reuse cached prefix blocks */
    double session_ttl_s;     /* keep a finished session's blocks warm this long */
    int deterministic;        /* batch- and thread-invariant results */
    int speculative;          /* enum spec_mode: 0 off, 1 adaptive, 2 always (prompt-lookup
                               * speculative decoding, scheduler/spec.h); used where results
                               * are batch-invariant: the CPU backend, or any backend with
                               * deterministic = 1 */
    enum fwd_device device;
    int group_max_seqs;       /* decode slots one group keeps while others wait (sched_fair.c) */
};
/* Fills o from the defaults table (config/defaults.h). */
void sched_opts_default(struct sched_opts *o);
/* "cpu", "cuda"; anything else (the config accepts only "auto" besides) is AUTO. */
enum fwd_device sched_device_parse(const char *name);

struct sched_req {
    const int32_t *prompt;    /* [n_prompt] token ids, copied */
    int n_prompt;
    struct sched_sampling sp;
    int max_tokens;           /* >= 1 (0 allowed with prompt_logprobs or embed); the server
                               * caps it at n_ctx - n_prompt */
    const char *const *stop;  /* [n_stop] NUL-terminated stop strings, copied */
    int n_stop;
    int ignore_eos;           /* 1: do not stop on end-of-generation tokens */
    int top_logprobs;         /* 0..20 alternatives per token; -1 = no logprobs at all */
    const char *session_id;   /* optional: keep this conversation's KV warm; copied */
    int prompt_logprobs;      /* 1: a PROMPT event for every prompt token after the first,
                               * with top_logprobs (>= 0) alternatives; the whole prompt is
                               * computed (no cached prefix) */
    int embed;                /* 1: no generation: prefill the prompt (no cached prefix, no
                               * session) and return its pooled final hidden state in DONE */
    enum sched_pooling { SCHED_POOL_MEAN = 0, SCHED_POOL_LAST = 1 } pooling; /* embed */
    double deadline;          /* CLOCK_MONOTONIC seconds; 0 = none */
    int no_speculative;       /* 1: never draft tokens for this request (the client opted
                               * out). Requests whose sampling is constrained (a grammar or
                               * schema mask) must set it: drafts are not checked against
                               * a mask */
    uint64_t group;           /* fairness group (one HTTP request, or one API key): decode
                               * slots are shared between groups (sched_fair.c); 0 = its own */
    struct gram *grammar;     /* optional (scheduler/grammar.h): every sampled token must keep
                               * the output a prefix of a sentence of it; end-of-generation
                               * only where the sentence may end; the scheduler takes its own
                               * reference */
    int control_bytes;        /* 1: a CONTROL token that does not end generation appears in
                               * the event text as its grammar.h bytes (gram_token_bytes: 0xFF
                               * then its id), so a caller can read a model's native markup
                               * (Gemma 4's tool calls); the text is then not UTF-8 only */
    const char *grammar_trigger; /* optional, with grammar: the output is free until it
                               * contains this text; from the trigger's first byte on, the
                               * grammar applies (a lazy grammar); copied */
    void (*on_event)(void *user, const struct sched_event *ev);
    void *user;
};

enum sched_ev_kind {
    SCHED_EV_TOKEN = 1, SCHED_EV_DONE = 2, SCHED_EV_ERROR = 3, SCHED_EV_PROMPT = 4
};
enum sched_finish {
    SCHED_FINISH_NONE = 0, SCHED_FINISH_STOP, SCHED_FINISH_LENGTH, SCHED_FINISH_CANCELLED,
    SCHED_FINISH_DEADLINE, SCHED_FINISH_ERROR
};

/* One event. TOKEN: one sampled token; `text` is the output text that became final with it
 * (may be empty while a stop string or a UTF-8 sequence is pending; never contains any part
 * of a matched stop string). DONE: the last event of a request, with finish reason and
 * usage (and any held-back text). ERROR: the request failed; no more events follow.
 * Details of this implementation (scheduler/sched.c): an end-of-generation token that ends a
 * request gets no TOKEN event but counts in completion_tokens (like vLLM); the token that
 * completes a stop string gets its TOKEN event (text before the stop only), then DONE(STOP).
 * logprob/top are log-softmax values of the raw model logits (before logit_bias, penalties
 * and temperature), as OpenAI and vLLM report them. A cancelled or expired request gets
 * DONE with CANCELLED/DEADLINE whether it was queued or running.
 * PROMPT (prompt_logprobs): prompt token `pos` (1 .. n_prompt - 1, in order, all before the
 * first TOKEN) scored from its prefix: token, logprob, top. */
struct sched_event {
    enum sched_ev_kind kind;
    uint64_t id;              /* the request id sched_submit returned */
    const char *text;         /* UTF-8, text_len bytes, not NUL-terminated */
    size_t text_len;
    int32_t token;            /* TOKEN: the sampled id; PROMPT: the prompt's id */
    int pos;                  /* PROMPT: its position in the prompt */
    float logprob;            /* TOKEN: its log-probability (when top_logprobs >= 0) */
    const struct sched_top *top; /* TOKEN: [n_top] best alternatives, most likely first */
    int n_top;
    enum sched_finish finish; /* DONE / ERROR */
    int prompt_tokens, completion_tokens, cached_tokens; /* DONE: usage */
    double queue_s;           /* DONE: seconds spent waiting for admission */
    int stop_index;           /* DONE with STOP: index of the stop string that matched, or -1
                               * (an end-of-generation token) */
    const float *embedding;   /* DONE of an embed request: [n_embd] pooled, not normalised */
    int n_embd;
    const char *error;        /* ERROR: a message fit for a client (no paths) */
};

enum sched_status {
    SCHED_OK = 0, SCHED_EINVAL = -1, SCHED_EFULL = -2 /* queue full: 429 */,
    SCHED_ECTX = -3 /* prompt + max_tokens > n_ctx */, SCHED_EDRAIN = -4 /* draining: 503 */,
    SCHED_ENOMEM = -5, SCHED_EBACKEND = -6
};
const char *sched_strerror(int status);

int sched_create(const struct model *m, const struct sched_opts *o, struct sched **out,
                 char *err, size_t errlen);
/* Cancels everything still running (DONE with CANCELLED), stops the thread, frees all. */
void sched_destroy(struct sched *s);

int sched_submit(struct sched *s, const struct sched_req *r, uint64_t *id_out);
/* Cancel a request: queued ones never run; running ones leave at the next step and get a
 * DONE event with SCHED_FINISH_CANCELLED. Unknown or finished ids: no effect. */
void sched_cancel(struct sched *s, uint64_t id);
/* Pause (1) or resume (0) request id: a paused request leaves the batch at the next step
 * (its KV blocks are released, complete ones stay in the prefix cache) and waits, not
 * admitted, until resumed; its output then continues exactly as if nothing had happened
 * (see preemption in sched_loop.c). Its deadline still applies. Any thread; unknown or
 * finished ids are ignored. */
void sched_pause(struct sched *s, uint64_t id, int paused);
/* Refuse new submissions (SCHED_EDRAIN) from now on; running requests continue. */
void sched_drain(struct sched *s);
/* Counts for /health and /metrics. */
struct sched_counts { int running, waiting; int kv_blocks_used, kv_blocks_total; };
void sched_get_counts(struct sched *s, struct sched_counts *out);
/* A snapshot of the scheduler's numbers for /metrics (the server renders them). */
struct sched_stats {
    int running, waiting;             /* sequences by state */
    int kv_total[2], kv_used[2], kv_free[2]; /* KV blocks per class (FULL, SWA) */
    uint64_t prefix_queries;          /* admissions that looked up the prefix cache */
    uint64_t prefix_hits;             /* admissions that reused cached blocks */
    uint64_t prefix_hit_tokens;       /* prompt positions reused */
    uint64_t prefix_query_tokens;     /* prompt positions looked up */
    uint64_t kv_evictions;            /* cached blocks evicted (LRU) */
    int kv_sessions;                  /* warm sessions holding blocks */
    uint64_t preemptions, rejections, steps;
    struct prom_hist batch_seqs;      /* sequences per step */
    struct prom_hist batch_tokens;    /* tokens per step */
    struct prom_hist step_s;          /* wall seconds per step */
    uint64_t spec_draft_tokens;       /* tokens drafted (lookup or grammar) and verified */
    uint64_t spec_accepted_tokens;    /* drafts accepted (tokens gained over plain decode) */
    uint64_t spec_verify_steps;       /* sequence-steps that carried drafts */
    uint64_t spec_grammar_tokens;     /* drafted tokens a grammar forced (of spec_draft_tokens) */
    uint64_t topk_rows;               /* tokens sampled from a row's top-k candidates only */
    /* Liveness: the thread's progress. pending counts the requests it owes work to (waiting,
     * including those submitted since it last published, plus running); progress_age_s is
     * how long ago it last finished a loop turn (0 while it sleeps for want of work). A
     * thread stuck inside a step shows pending > 0 with a growing progress_age_s. */
    int pending;
    uint64_t loop_turns;              /* loop turns finished (steps and idle turns) */
    double progress_age_s;            /* seconds */
};
/* Copies the numbers under the scheduler's lock (any thread). */
void sched_stats(struct sched *s, struct sched_stats *out);

#endif
