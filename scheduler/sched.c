/*
 * sched — continuous batching on one scheduler thread. See sched.h for the contract.
 *
 * Each step: take cancellations and admit waiting requests (FCFS: the queue's head blocks
 * those behind it, so nobody starves), then build one batch in arrival order with one
 * decode row per decoding sequence and prefill chunks from the budget left after the decode
 * rows, run fwd_run once, sample one token for every sequence whose row reached the end of
 * its known tokens (in parallel on the forward pass's compute threads through fwd_parallel,
 * one sampler scratch per task), and finish sequences at once (stop, length, cancel,
 * deadline).
 *
 * A sequence's tokens live in one array: the prompt, then every sampled token. n_kv counts
 * positions already in the KV cache, so "what to feed next" is always hist[n_kv..n_hist):
 * a decode row when that is one token, a prefill chunk otherwise. Preemption just drops
 * the blocks and sets n_kv back to 0 (its complete blocks stay in the prefix cache); on
 * re-admission the sequence prefills its whole history and samples the next token with the
 * RNG state it already had, so its output is the same as if nothing had happened.
 */
#include "scheduler/sched.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/prom.h"
#include "config/defaults.h"
#include "engine/tokenizer.h"
#include "scheduler/kv.h"
#include "scheduler/sample.h"
#include "scheduler/stop.h"

#define SCHED_MOD "sched"
#define SCHED_MAX_TOP 20
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
    struct sched_sampling sp;    /* logit_bias points at bias */
    struct sched_bias *bias;     /* [sp.n_logit_bias] copy */
    struct smp_rng rng;
    struct stop_state stop;
    struct tok_stream ts;
    char *session_id;            /* copy or NULL */
    int top_logprobs, ignore_eos;
    void (*on_event)(void *user, const struct sched_event *ev);
    void *user;
    struct kv_seq kv;            /* block tables */
    /* per step */
    int step_n;                  /* tokens fed this step (0 = not in the batch) */
    int logit_row;               /* row of the logits buffer, or -1 */
    int32_t tok;                 /* sampled this step (sample_task) */
    float logprob;               /* its log-probability, when top_logprobs >= 0 */
    char text[TOK_STREAM_MAX];   /* token text scratch */
    char *done_text;             /* [done_cap] text released with DONE */
    size_t done_cap;
    struct sched_top top[SCHED_MAX_TOP];
};

struct sched {
    const struct model *m;
    struct sched_opts o;
    const struct tok_vocab *vocab;
    int n_vocab;
    int ring;                    /* SWA ring slots per sequence */
    struct kvs_pool *pool;
    struct fwd_ctx *fwd;
    struct kv_cache *kv;
    struct smp_ctx **smp;        /* [n_smp] one sampler scratch per compute thread */
    int n_smp;
    int32_t *eog;                /* [n_eog] end-of-generation ids (banned under ignore_eos) */
    int n_eog;
    float *logits;               /* [max_seqs][n_vocab] */
    float *scratch;              /* [n_smp][n_vocab] logits copies when logprobs are asked for */
    struct seq **sampling;       /* [max_seqs] sequences sampled this step */
    struct fwd_seq *rows;        /* [max_seqs] */
    struct kvs_seq *views;       /* [max_seqs] */
    struct seq **run;            /* [max_seqs] running, by arrival order (scheduler thread) */
    int n_run;
    struct seq **batch;          /* [max_seqs] */
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
    uint64_t *cancel_ids;        /* pending sched_cancel ids */
    int n_cancel, cap_cancel;
    int stopping, draining;
    uint64_t next_id, next_order;
    struct sched_counts counts;
    struct kv_stats kst;
    long long preemptions, rejections, steps;
    struct prom_hist h_batch, h_tokens, h_step;
};

const char *sched_strerror(int status) {
    switch (status) {
    case SCHED_OK: return "ok";
    case SCHED_EINVAL: return "invalid request";
    case SCHED_EFULL: return "too many requests are waiting";
    case SCHED_ECTX: return "prompt plus max_tokens exceeds the context size";
    case SCHED_EDRAIN: return "the server is shutting down";
    case SCHED_ENOMEM: return "out of memory";
    case SCHED_EBACKEND: return "the compute backend failed";
    default: return "unknown error";
    }
}

enum fwd_device sched_device_parse(const char *name) {
    return !strcmp(name, "cpu")    ? FWD_DEVICE_CPU
           : !strcmp(name, "cuda") ? FWD_DEVICE_CUDA
                                   : FWD_DEVICE_AUTO;
}

/* From the one defaults table (config/defaults.h), so the server, the tools and the tests
 * start from the same scheduler settings. */
void sched_opts_default(struct sched_opts *o) {
    const struct gemmad_defaults *d = &gemmad_defaults;
    memset(o, 0, sizeof(*o));
    o->n_threads = d->threads;
    o->n_ctx = d->ctx_size;
    o->max_batch_tokens = d->max_batch_tokens;
    o->max_seqs = d->max_seqs;
    o->kv_block_size = d->kv_block_size;
    o->kv_memory_mib = (size_t)d->kv_memory_mib;
    o->kv_tokens = d->kv_tokens;
    if (kvs_dtype_parse(d->kv_dtype, &o->kv_dtype)) o->kv_dtype = KVS_F16;
    o->max_queue = d->max_queue;
    o->max_queued_tokens = d->max_queued_tokens;
    o->prefix_cache = d->prefix_cache;
    o->session_ttl_s = d->session_ttl_s;
    o->deterministic = d->deterministic;
    o->device = sched_device_parse(d->device);
}

/* ---- sequences ---------------------------------------------------------------------- */

static void seq_free(struct seq *q) {
    if (!q) return;
    free(q->hist);
    free(q->bias);
    stop_free(&q->stop);
    free(q->session_id);
    kv_seq_free(&q->kv);
    free(q->done_text);
    free(q);
}

static void emit(struct seq *q, const struct sched_event *ev) { q->on_event(q->user, ev); }

static void emit_done(struct seq *q, enum sched_finish fin, const char *text, size_t len) {
    struct sched_event ev = {0};
    ev.kind = SCHED_EV_DONE;
    ev.id = q->id;
    ev.text = text ? text : "";
    ev.text_len = len;
    ev.finish = fin;
    ev.prompt_tokens = q->n_prompt;
    ev.completion_tokens = q->n_out;
    ev.cached_tokens = q->cached_tokens;
    ev.queue_s = q->admitted ? q->queue_s : clock_mono_s() - q->t_submit;
    emit(q, &ev);
}

static void emit_error(struct seq *q, const char *msg) {
    struct sched_event ev = {0};
    ev.kind = SCHED_EV_ERROR;
    ev.id = q->id;
    ev.text = "";
    ev.finish = SCHED_FINISH_ERROR;
    ev.prompt_tokens = q->n_prompt;
    ev.completion_tokens = q->n_out;
    ev.cached_tokens = q->cached_tokens;
    ev.error = msg;
    emit(q, &ev);
}

/* Text still held back at the end: a pending UTF-8 tail and a stop-string prefix that
 * never completed. Returns its length in q->done_text. */
static size_t final_text(struct seq *q) {
    size_t n = 0;
    const char *out;
    size_t len;
    if (!q->stop.matched) {
        int k = tok_stream_flush(&q->ts, q->text, (int)sizeof(q->text));
        if (k > 0 && stop_push(&q->stop, q->text, (size_t)k, &out, &len) >= 0) {
            memcpy(q->done_text, out, len);
            n = len;
        }
        stop_flush(&q->stop, &out, &len);
        memcpy(q->done_text + n, out, len);
        n += len;
    }
    return n;
}

/* Remove a running sequence from run[] keeping arrival order. */
static void run_remove(struct sched *s, struct seq *q) {
    for (int i = 0; i < s->n_run; i++)
        if (s->run[i] == q) {
            memmove(&s->run[i], &s->run[i + 1], (size_t)(s->n_run - i - 1) * sizeof(*s->run));
            s->n_run--;
            return;
        }
}

static void run_insert(struct sched *s, struct seq *q) {
    int i = s->n_run;
    while (i > 0 && s->run[i - 1]->order > q->order) i--;
    memmove(&s->run[i + 1], &s->run[i], (size_t)(s->n_run - i) * sizeof(*s->run));
    s->run[i] = q;
    s->n_run++;
}

/* Finish a running sequence: DONE event, blocks to the session or back to the pool. */
static void finish_running(struct sched *s, struct seq *q, enum sched_finish fin) {
    size_t n = (fin == SCHED_FINISH_STOP || fin == SCHED_FINISH_LENGTH) ? final_text(q) : 0;
    emit_done(q, fin, q->done_text, n);
    if (q->session_id && (fin == SCHED_FINISH_STOP || fin == SCHED_FINISH_LENGTH))
        kv_session_put(s->kv, q->session_id, &q->kv, q->hist, q->n_kv, clock_mono_s());
    else
        kv_seq_release(s->kv, &q->kv);
    run_remove(s, q);
    seq_free(q);
}

static void fail_running(struct sched *s, struct seq *q, const char *msg) {
    emit_error(q, msg);
    kv_seq_release(s->kv, &q->kv);
    run_remove(s, q);
    seq_free(q);
}

/* ---- waiting list (lock held) ------------------------------------------------------- */

static void wait_unlink(struct sched *s, struct seq *q) {
    if (q->prev) q->prev->next = q->next;
    else s->wait_head = q->next;
    if (q->next) q->next->prev = q->prev;
    else s->wait_tail = q->prev;
    q->prev = q->next = NULL;
    s->n_waiting--;
    s->waiting_tokens -= q->n_hist;
}

static void wait_push_back(struct sched *s, struct seq *q) {
    q->prev = s->wait_tail;
    q->next = NULL;
    if (s->wait_tail) s->wait_tail->next = q;
    else s->wait_head = q;
    s->wait_tail = q;
    s->n_waiting++;
    s->waiting_tokens += q->n_hist;
}

/* Preempted sequences go before every newcomer, in arrival order among themselves. */
static void wait_push_preempted(struct sched *s, struct seq *q) {
    struct seq *at = s->wait_head;
    while (at && at->order < q->order && at->admitted) at = at->next;
    q->next = at;
    q->prev = at ? at->prev : s->wait_tail;
    if (q->prev) q->prev->next = q;
    else s->wait_head = q;
    if (at) at->prev = q;
    else s->wait_tail = q;
    s->n_waiting++;
    s->waiting_tokens += q->n_hist;
}

/* ---- admission ---------------------------------------------------------------------- */

static int ceil_div(int a, int b) { return (a + b - 1) / b; }

/* Try to admit the waiting sequence q (lock held): attach a cached prefix or warm session,
 * check that blocks exist for the rest of its tokens plus a reserve, fill its SWA ring. */
static int try_admit(struct sched *s, struct seq *q, double now) {
    int bs = s->o.kv_block_size;
    int reuse = kv_seq_attach(s->kv, &q->kv, q->hist, q->n_hist, q->n_hist - 1,
                              q->admitted ? NULL : q->session_id, now);
    /* Blocks for its own tokens, for the tokens running sequences have yet to prefill, and
     * one block of growth per running sequence. */
    int need_full = ceil_div(q->n_hist + 1, bs) - reuse / bs + s->n_run;
    for (int i = 0; i < s->n_run; i++) {
        int owed = ceil_div(s->run[i]->n_hist + 1, bs) - s->run[i]->kv.n_full;
        if (owed > 0) need_full += owed;
    }
    int need_swa = 0;
    for (int j = 0; j < q->kv.n_swa; j++) need_swa += q->kv.swa[j] < 0;
    if (need_full > kv_available(s->kv, KVS_FULL, 1) ||
        (need_swa > 0 && need_swa > kv_available(s->kv, KVS_SWA, 1)) ||
        kv_seq_fill_ring(s->kv, &q->kv) != KV_OK) {
        kv_seq_release(s->kv, &q->kv);
        kv_uncount_attach(s->kv);
        return 0;
    }
    q->n_kv = reuse;
    if (!q->admitted) {
        q->admitted = 1;
        q->cached_tokens = reuse;
        q->queue_s = now - q->t_submit;
    }
    wait_unlink(s, q);
    run_insert(s, q);
    return 1;
}

/* Move the youngest running sequence back to the waiting queue, dropping its blocks. */
static void preempt_youngest(struct sched *s) {
    struct seq *q = s->run[s->n_run - 1];
    kv_seq_release(s->kv, &q->kv);
    q->n_kv = 0;
    q->step_n = 0;
    s->n_run--;
    pthread_mutex_lock(&s->lock);
    wait_push_preempted(s, q);
    s->preemptions++;
    pthread_mutex_unlock(&s->lock);
    LOG_D(SCHED_MOD, q->id, "preempted after %d tokens", q->n_out);
}

/* ---- one step ----------------------------------------------------------------------- */

/* Samples the sequences of this step with their logits rows: task t takes sequences t,
 * t + n_tasks, ... with sampler scratch t, so the tasks run on the compute threads at once.
 * Each sequence's token depends only on its own row, RNG and history (never on the task or
 * thread), and nothing shared is written. */
struct sample_job {
    struct sched *s;
    int n;
};

static void sample_task(void *arg, int task, int n_tasks) {
    const struct sample_job *J = arg;
    struct sched *s = J->s;
    float *scratch = s->scratch + (size_t)task * (size_t)s->n_vocab;
    for (int i = task; i < J->n; i += n_tasks) {
        struct seq *q = s->sampling[i];
        float *row = s->logits + (size_t)q->logit_row * (size_t)s->n_vocab, *l = row;
        if (q->top_logprobs >= 0) {
            memcpy(scratch, row, (size_t)s->n_vocab * sizeof(float));
            l = scratch;
        }
        q->tok = smp_sample(s->smp[task], &q->sp, &q->rng, l, q->hist, q->n_hist, q->n_out,
                            q->ignore_eos ? s->eog : NULL, q->ignore_eos ? s->n_eog : 0);
        if (q->top_logprobs >= 0)
            q->logprob = smp_logprobs(row, s->n_vocab, q->tok, q->top_logprobs, q->top);
    }
}

/* Report the token sample_task chose. Returns 1 when the sequence finished. */
static int handle_token(struct sched *s, struct seq *q) {
    const int32_t tok = q->tok;
    q->hist[q->n_hist++] = tok;
    q->n_out++;
    if (!q->ignore_eos && tok_is_eog(s->vocab, tok)) {
        finish_running(s, q, SCHED_FINISH_STOP);
        return 1;
    }
    struct sched_event ev = {0};
    ev.kind = SCHED_EV_TOKEN;
    ev.id = q->id;
    ev.token = tok;
    if (q->top_logprobs >= 0) {
        ev.logprob = q->logprob;
        ev.top = q->top;
        ev.n_top = q->top_logprobs;
    }
    int k = tok_stream_push(&q->ts, s->vocab, tok, q->text, (int)sizeof(q->text));
    const char *out = "";
    size_t len = 0;
    int matched = k > 0 ? stop_push(&q->stop, q->text, (size_t)k, &out, &len) : 0;
    ev.text = out;
    ev.text_len = len;
    emit(q, &ev);
    if (matched == 1) {
        finish_running(s, q, SCHED_FINISH_STOP);
        return 1;
    }
    if (q->n_out >= q->max_tokens) {
        finish_running(s, q, SCHED_FINISH_LENGTH);
        return 1;
    }
    return 0;
}

static void step(struct sched *s) {
    double t0 = clock_mono_s();
    int dec = 0;
    for (int i = 0; i < s->n_run; i++) dec += s->run[i]->n_hist - s->run[i]->n_kv == 1;
    int prefill_budget = s->o.max_batch_tokens - dec, nb = 0, n_tokens = 0, n_logits = 0;
    for (int i = 0; i < s->n_run; i++) {
        struct seq *q = s->run[i];
        int todo = q->n_hist - q->n_kv, n = todo;
        q->step_n = 0;
        q->logit_row = -1;
        if (todo > 1) {
            if (n > prefill_budget) n = prefill_budget;
            if (n <= 0) continue;
        }
        int rc;
        while ((rc = kv_seq_prepare(s->kv, &q->kv, q->n_kv, n)) == KV_ENOSPACE) {
            int self = s->run[s->n_run - 1] == q;
            preempt_youngest(s);
            if (self) break;
        }
        if (rc == KV_ENOSPACE) break; /* q itself was the youngest: it waits */
        if (rc != KV_OK) {
            LOG_E(SCHED_MOD, q->id, "block tables inconsistent (rc %d)", rc);
            fail_running(s, q, "internal scheduler error");
            i--;
            continue;
        }
        if (todo > 1) prefill_budget -= n;
        q->step_n = n;
        struct kvs_seq *v = &s->views[nb];
        v->full = q->kv.full;
        v->n_full = q->kv.n_full;
        v->swa = q->kv.n_swa ? q->kv.swa : NULL;
        v->n_swa = q->kv.n_swa;
        struct fwd_seq *r = &s->rows[nb];
        r->tokens = q->hist + q->n_kv;
        r->n_tokens = n;
        r->pos = q->n_kv;
        r->kv = v;
        r->logits = q->n_kv + n == q->n_hist ? FWD_LOGITS_LAST : FWD_LOGITS_NONE;
        if (r->logits == FWD_LOGITS_LAST) q->logit_row = n_logits++;
        s->batch[nb++] = q;
        n_tokens += n;
    }
    if (nb == 0) return;
    int rc = fwd_run(s->fwd, s->rows, nb, s->logits);
    if (rc != FWD_OK) {
        LOG_E(SCHED_MOD, 0, "forward pass failed: %s", fwd_strerror(rc));
        for (int i = 0; i < nb; i++) fail_running(s, s->batch[i], "the compute backend failed");
        return;
    }
    int n_sample = 0;
    for (int i = 0; i < nb; i++) {
        struct seq *q = s->batch[i];
        q->n_kv += q->step_n;
        kv_seq_commit(s->kv, &q->kv, q->hist, q->n_kv);
        if (q->logit_row >= 0) s->sampling[n_sample++] = q;
    }
    if (n_sample > 0) {
        struct sample_job sj = {s, n_sample};
        const int nt = n_sample < s->n_smp ? n_sample : s->n_smp;
        if (nt > 1) fwd_parallel(s->fwd, sample_task, &sj, nt);
        else sample_task(&sj, 0, 1);
        for (int i = 0; i < n_sample; i++) handle_token(s, s->sampling[i]);
    }
    double dt = clock_mono_s() - t0;
    pthread_mutex_lock(&s->lock);
    prom_hist_observe(&s->h_batch, nb);
    prom_hist_observe(&s->h_tokens, n_tokens);
    prom_hist_observe(&s->h_step, dt);
    s->steps++;
    pthread_mutex_unlock(&s->lock);
}

/* ---- the thread --------------------------------------------------------------------- */

/* With the lock held: take cancellations, drop expired and cancelled waiting requests onto
 * `gone` (linked through next), admit what fits. */
static struct seq *intake(struct sched *s, double now) {
    struct seq *gone = NULL;
    if (s->n_cancel > 0) {
        uint64_t *t = s->cancel_work;
        int cap = s->cap_work;
        s->cancel_work = s->cancel_ids;
        s->cap_work = s->cap_cancel;
        s->cancel_ids = t;
        s->cap_cancel = cap;
    }
    int n_cancel = s->n_cancel;
    s->n_cancel = 0;
    for (int c = 0; c < n_cancel; c++) {
        uint64_t id = s->cancel_work[c];
        for (int i = 0; i < s->n_run; i++)
            if (s->run[i]->id == id) s->run[i]->cancel = 1;
        for (struct seq *q = s->wait_head; q; q = q->next)
            if (q->id == id) q->cancel = 1;
    }
    for (struct seq *q = s->wait_head, *nx; q; q = nx) {
        nx = q->next;
        if (q->cancel || (q->deadline > 0 && now > q->deadline)) {
            wait_unlink(s, q);
            q->next = gone;
            gone = q;
        }
    }
    kv_session_expire(s->kv, now);
    while (s->wait_head && s->n_run < s->o.max_seqs && try_admit(s, s->wait_head, now)) {
    }
    return gone;
}

static void publish_counts(struct sched *s) {
    struct kv_stats st;
    kv_get_stats(s->kv, &st);
    pthread_mutex_lock(&s->lock);
    s->kst = st;
    s->counts.running = s->n_run;
    s->counts.waiting = s->n_waiting;
    s->counts.kv_blocks_used = st.used[KVS_FULL];
    s->counts.kv_blocks_total = st.total[KVS_FULL];
    pthread_mutex_unlock(&s->lock);
}

static void *sched_main(void *arg) {
    struct sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        while (!s->stopping && s->n_run == 0 && !s->wait_head && s->n_cancel == 0) {
            if (kv_session_count(s->kv) > 0) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_sec += 1;
                pthread_cond_timedwait(&s->cond, &s->lock, &ts);
                kv_session_expire(s->kv, clock_mono_s());
            } else {
                pthread_cond_wait(&s->cond, &s->lock);
            }
        }
        if (s->stopping) {
            pthread_mutex_unlock(&s->lock);
            break;
        }
        double now = clock_mono_s();
        struct seq *gone = intake(s, now);
        int idle = s->n_run == 0;
        pthread_mutex_unlock(&s->lock);

        for (struct seq *q = gone, *nx; q; q = nx) {
            nx = q->next;
            emit_done(q, q->cancel ? SCHED_FINISH_CANCELLED : SCHED_FINISH_DEADLINE, NULL, 0);
            kv_seq_release(s->kv, &q->kv);
            seq_free(q);
        }
        for (int i = 0; i < s->n_run; i++) {
            struct seq *q = s->run[i];
            if (q->cancel || (q->deadline > 0 && now > q->deadline)) {
                finish_running(s, q,
                               q->cancel ? SCHED_FINISH_CANCELLED : SCHED_FINISH_DEADLINE);
                i--;
            }
        }
        if (s->n_run > 0) step(s);
        publish_counts(s);
        if (idle && !gone) {
            /* Waiting requests that cannot be admitted with nothing running: should not
             * happen (submit checks sizes); back off instead of spinning. */
            struct timespec ts = {0, 5 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    /* Shut down: everything still here is cancelled. */
    pthread_mutex_lock(&s->lock);
    struct seq *gone = NULL;
    while (s->wait_head) {
        struct seq *q = s->wait_head;
        wait_unlink(s, q);
        q->next = gone;
        gone = q;
    }
    pthread_mutex_unlock(&s->lock);
    for (struct seq *q = gone, *nx; q; q = nx) {
        nx = q->next;
        emit_done(q, SCHED_FINISH_CANCELLED, NULL, 0);
        kv_seq_release(s->kv, &q->kv);
        seq_free(q);
    }
    while (s->n_run > 0) finish_running(s, s->run[0], SCHED_FINISH_CANCELLED);
    publish_counts(s);
    return NULL;
}

/* ---- public API ---------------------------------------------------------------------- */

int sched_create(const struct model *m, const struct sched_opts *o, struct sched **out,
                 char *err, size_t errlen) {
    *out = NULL;
    if (err && errlen) err[0] = 0;
    int bs = o->kv_block_size, rc = SCHED_EINVAL;
    if (!m || o->n_ctx < 2 || o->max_seqs < 1 || o->max_batch_tokens < o->max_seqs || bs < 1 ||
        o->max_queue < 0 || o->max_queued_tokens < 0) {
        if (err)
            snprintf(err, errlen,
                     "scheduler options invalid: n_ctx %d, max_seqs %d, max_batch_tokens %d "
                     "(must be >= max_seqs), kv_block_size %d",
                     o->n_ctx, o->max_seqs, o->max_batch_tokens, bs);
        return SCHED_EINVAL;
    }
    struct sched *s = calloc(1, sizeof(*s));
    if (!s) return SCHED_ENOMEM;
    s->m = m;
    s->o = *o;
    s->vocab = m->vocab;
    s->n_vocab = m->cfg.n_vocab;
    s->next_id = 1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);

    /* Pool sizes. Every running sequence owns a full SWA ring; a few windows more let the
     * prefix cache keep sliding-layer blocks. */
    s->ring = kvs_swa_ring_blocks(m, bs, o->max_batch_tokens);
    int n_swa = 0;
    if (s->ring > 0)
        n_swa = o->max_seqs * s->ring + 4 * (ceil_div(m->cfg.sliding_window, bs) + 1);
    int seq_blocks = ceil_div(o->n_ctx, bs) + 1;
    long long n_full;
    if (o->kv_memory_mib > 0) {
        size_t bf = kvs_block_bytes(m, o->kv_dtype, bs, KVS_FULL);
        size_t bw = kvs_block_bytes(m, o->kv_dtype, bs, KVS_SWA);
        long long bytes = (long long)o->kv_memory_mib << 20;
        long long left = bytes - (long long)n_swa * (long long)bw;
        n_full = bf ? left / (long long)bf : 0;
        if (n_full < seq_blocks) {
            double need = ((double)seq_blocks * bf + (double)n_swa * bw) / 1048576.0;
            if (err)
                snprintf(err, errlen,
                         "kv_memory_mib %zu too small: one %d-token sequence plus the "
                         "sliding-window rings of %d sequences need %.0f MiB",
                         o->kv_memory_mib, o->n_ctx, o->max_seqs, need + 1);
            goto fail;
        }
    } else {
        n_full = ceil_div(o->kv_tokens > 0 ? o->kv_tokens : 65536, bs);
        if (n_full < seq_blocks) {
            if (err)
                snprintf(err, errlen, "kv_tokens %d is smaller than one context (%d tokens)",
                         o->kv_tokens, (seq_blocks)*bs);
            goto fail;
        }
    }
    if (n_full > (1 << 30)) n_full = 1 << 30;
    rc = kvs_create(m, o->kv_dtype, bs, (int)n_full, n_swa, &s->pool, err, errlen);
    if (rc) {
        rc = SCHED_ENOMEM;
        goto fail;
    }
    struct kv_opts ko = {.n_full = (int)n_full, .n_swa = n_swa, .block_size = bs,
                         .window = m->cfg.sliding_window, .ring = s->ring,
                         .max_seq_blocks = seq_blocks, .prefix_cache = o->prefix_cache,
                         .max_sessions = o->session_ttl_s > 0 ? SCHED_MAX_SESSIONS : 0,
                         .session_ttl_s = o->session_ttl_s};
    rc = SCHED_ENOMEM;
    if (kv_create(&ko, &s->kv)) {
        if (err) snprintf(err, errlen, "cannot allocate the KV block tables");
        goto fail;
    }
    struct fwd_opts fo = {.max_tokens = o->max_batch_tokens, .max_seqs = o->max_seqs,
                          .max_ctx = o->n_ctx,
                          .max_logit_rows = o->max_seqs, .n_threads = o->n_threads,
                          .device = o->device, .deterministic = o->deterministic};
    int frc = fwd_create(m, s->pool, &fo, &s->fwd, err, errlen);
    if (frc) {
        rc = frc == FWD_ENOMEM ? SCHED_ENOMEM : SCHED_EBACKEND;
        goto fail;
    }
    s->n_smp = fwd_threads(s->fwd);
    s->smp = calloc((size_t)s->n_smp, sizeof(*s->smp));
    if (!s->smp) goto fail_mem;
    for (int i = 0; i < s->n_smp; i++)
        if (smp_ctx_create(s->n_vocab, &s->smp[i])) goto fail_mem;
    s->logits = malloc((size_t)o->max_seqs * (size_t)s->n_vocab * sizeof(float));
    s->scratch = malloc((size_t)s->n_smp * (size_t)s->n_vocab * sizeof(float));
    s->sampling = calloc((size_t)o->max_seqs, sizeof(*s->sampling));
    s->rows = calloc((size_t)o->max_seqs, sizeof(*s->rows));
    s->views = calloc((size_t)o->max_seqs, sizeof(*s->views));
    s->run = calloc((size_t)o->max_seqs, sizeof(*s->run));
    s->batch = calloc((size_t)o->max_seqs, sizeof(*s->batch));
    s->eog = malloc(64 * sizeof(int32_t));
    if (!s->logits || !s->scratch || !s->sampling || !s->rows || !s->views || !s->run ||
        !s->batch || !s->eog)
        goto fail_mem;
    for (int32_t t = 0; t < s->n_vocab && s->n_eog < 64; t++)
        if (tok_is_eog(s->vocab, t)) s->eog[s->n_eog++] = t;

    static const double le_batch[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    static const double le_tokens[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
    static const double le_step[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                     0.1,   0.25,   0.5,   1,    2.5,   5};
    prom_hist_init(&s->h_batch, le_batch, 9);
    prom_hist_init(&s->h_tokens, le_tokens, 13);
    prom_hist_init(&s->h_step, le_step, 12);
    publish_counts(s);
    if (pthread_create(&s->thread, NULL, sched_main, s)) {
        if (err) snprintf(err, errlen, "cannot start the scheduler thread");
        rc = SCHED_ENOMEM;
        goto fail;
    }
    s->thread_started = 1;
    LOG_I(SCHED_MOD, 0,
          "KV pool: %lld FULL blocks + %d SWA blocks of %d positions (%s, %.1f MiB), ring %d",
          n_full, n_swa, bs, kvs_dtype_name(o->kv_dtype), (double)s->pool->mem_bytes / 1048576.0,
          s->ring);
    *out = s;
    return SCHED_OK;
fail_mem:
    rc = SCHED_ENOMEM;
    if (err) snprintf(err, errlen, "out of memory creating the scheduler");
fail:
    sched_destroy(s);
    return rc;
}

void sched_destroy(struct sched *s) {
    if (!s) return;
    if (s->thread_started) {
        pthread_mutex_lock(&s->lock);
        s->stopping = 1;
        pthread_cond_signal(&s->cond);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->thread, NULL);
    }
    fwd_destroy(s->fwd);
    kv_destroy(s->kv);
    kvs_destroy(s->pool);
    if (s->smp)
        for (int i = 0; i < s->n_smp; i++) smp_ctx_destroy(s->smp[i]);
    free(s->smp);
    free(s->logits);
    free(s->scratch);
    free(s->sampling);
    free(s->rows);
    free(s->views);
    free(s->run);
    free(s->batch);
    free(s->eog);
    free(s->cancel_ids);
    free(s->cancel_work);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s);
}

static char *dup_str(const char *p) {
    size_t n = strlen(p) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, p, n);
    return d;
}

int sched_submit(struct sched *s, const struct sched_req *r, uint64_t *id_out) {
    if (id_out) *id_out = 0;
    if (!r || !r->prompt || r->n_prompt < 1 || r->max_tokens < 1 || !r->on_event ||
        r->n_stop < 0 || (r->n_stop > 0 && !r->stop) || r->top_logprobs > SCHED_MAX_TOP ||
        r->sp.n_logit_bias < 0 || (r->sp.n_logit_bias > 0 && !r->sp.logit_bias))
        return SCHED_EINVAL;
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= s->n_vocab) return SCHED_EINVAL;
    long long total = (long long)r->n_prompt + r->max_tokens;
    if (total > s->o.n_ctx) return SCHED_ECTX;

    struct seq *q = calloc(1, sizeof(*q));
    if (!q) return SCHED_ENOMEM;
    q->cap = (int)total;
    q->hist = malloc((size_t)q->cap * sizeof(int32_t));
    q->done_cap = 2 * TOK_STREAM_MAX;
    for (int i = 0; i < r->n_stop; i++) q->done_cap += strlen(r->stop[i]);
    q->done_text = malloc(q->done_cap);
    if (!q->hist || !q->done_text || kv_seq_init(s->kv, &q->kv) ||
        stop_init(&q->stop, r->stop, r->n_stop, TOK_STREAM_MAX))
        goto fail;
    memcpy(q->hist, r->prompt, (size_t)r->n_prompt * sizeof(int32_t));
    q->n_hist = q->n_prompt = r->n_prompt;
    q->max_tokens = r->max_tokens;
    q->sp = r->sp;
    if (r->sp.n_logit_bias > 0) {
        q->bias = malloc((size_t)r->sp.n_logit_bias * sizeof(*q->bias));
        if (!q->bias) goto fail;
        memcpy(q->bias, r->sp.logit_bias, (size_t)r->sp.n_logit_bias * sizeof(*q->bias));
    }
    q->sp.logit_bias = q->bias;
    if (r->session_id && r->session_id[0] && !(q->session_id = dup_str(r->session_id)))
        goto fail;
    q->top_logprobs = r->top_logprobs;
    q->ignore_eos = r->ignore_eos;
    q->deadline = r->deadline;
    q->on_event = r->on_event;
    q->user = r->user;
    tok_stream_init(&q->ts);
    q->t_submit = clock_mono_s();

    pthread_mutex_lock(&s->lock);
    int rc = SCHED_OK;
    if (s->draining || s->stopping) rc = SCHED_EDRAIN;
    else if (s->n_waiting >= s->o.max_queue ||
             s->waiting_tokens + r->n_prompt > s->o.max_queued_tokens) {
        rc = SCHED_EFULL;
        s->rejections++;
    }
    if (rc == SCHED_OK) {
        q->id = s->next_id++;
        q->order = s->next_order++;
        uint64_t seed = r->sp.has_seed ? r->sp.seed
                                       : (uint64_t)(q->t_submit * 1e9) ^ (q->id * 0x9e3779b97f4a7c15ull);
        smp_rng_seed(&q->rng, seed);
        wait_push_back(s, q);
        if (id_out) *id_out = q->id;
        pthread_cond_signal(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    if (rc != SCHED_OK) seq_free(q);
    return rc;
fail:
    seq_free(q);
    return SCHED_ENOMEM;
}

void sched_cancel(struct sched *s, uint64_t id) {
    pthread_mutex_lock(&s->lock);
    if (s->n_cancel == s->cap_cancel) {
        int cap = s->cap_cancel ? 2 * s->cap_cancel : 64;
        uint64_t *p = realloc(s->cancel_ids, (size_t)cap * sizeof(uint64_t));
        if (!p) {
            pthread_mutex_unlock(&s->lock);
            return;
        }
        s->cancel_ids = p;
        s->cap_cancel = cap;
    }
    s->cancel_ids[s->n_cancel++] = id;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

void sched_drain(struct sched *s) {
    pthread_mutex_lock(&s->lock);
    s->draining = 1;
    pthread_mutex_unlock(&s->lock);
}

void sched_get_counts(struct sched *s, struct sched_counts *out) {
    pthread_mutex_lock(&s->lock);
    *out = s->counts;
    pthread_mutex_unlock(&s->lock);
}

/* ---- statistics ---------------------------------------------------------------------- */

void sched_stats(struct sched *s, struct sched_stats *out) {
    pthread_mutex_lock(&s->lock);
    const struct kv_stats *k = &s->kst;
    out->running = s->counts.running;
    out->waiting = s->counts.waiting;
    for (int c = 0; c < 2; c++) {
        out->kv_total[c] = k->total[c];
        out->kv_used[c] = k->used[c];
        out->kv_free[c] = k->free[c];
    }
    out->prefix_queries = (uint64_t)k->queries;
    out->prefix_hits = (uint64_t)k->hits;
    out->prefix_hit_tokens = (uint64_t)k->hit_tokens;
    out->kv_evictions = (uint64_t)k->evictions;
    out->kv_sessions = k->sessions;
    out->preemptions = (uint64_t)s->preemptions;
    out->rejections = (uint64_t)s->rejections;
    out->steps = (uint64_t)s->steps;
    out->batch_seqs = s->h_batch;
    out->batch_tokens = s->h_tokens;
    out->step_s = s->h_step;
    pthread_mutex_unlock(&s->lock);
}
