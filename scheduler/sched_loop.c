/*
 * sched_loop — continuous batching on one scheduler thread. See sched.h for the contract.
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
#include "scheduler/sched_int.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "engine/tokenizer.h"

/* ---- sequences ---------------------------------------------------------------------- */

void sched_seq_free(struct seq *q) {
    if (!q) return;
    free(q->hist);
    free(q->bias);
    stop_free(&q->stop);
    free(q->session_id);
    kvcache_seq_free(&q->kv);
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
        kvcache_session_put(s->kv, q->session_id, &q->kv, q->hist, q->n_kv, clock_mono_s());
    else
        kvcache_seq_release(s->kv, &q->kv);
    run_remove(s, q);
    sched_seq_free(q);
}

static void fail_running(struct sched *s, struct seq *q, const char *msg) {
    emit_error(q, msg);
    kvcache_seq_release(s->kv, &q->kv);
    run_remove(s, q);
    sched_seq_free(q);
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

void sched_wait_push_back(struct sched *s, struct seq *q) {
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


/* Try to admit the waiting sequence q (lock held): attach a cached prefix or warm session,
 * check that blocks exist for the rest of its tokens plus a reserve, fill its SWA ring. */
static int try_admit(struct sched *s, struct seq *q, double now) {
    int bs = s->o.kv_block_size;
    int reuse = kvcache_seq_attach(s->kv, &q->kv, q->hist, q->n_hist, q->n_hist - 1,
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
    if (need_full > kvcache_available(s->kv, KVSTORE_FULL, 1) ||
        (need_swa > 0 && need_swa > kvcache_available(s->kv, KVSTORE_SWA, 1)) ||
        kvcache_seq_fill_ring(s->kv, &q->kv) != KVCACHE_OK) {
        kvcache_seq_release(s->kv, &q->kv);
        kvcache_uncount_attach(s->kv);
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
    kvcache_seq_release(s->kv, &q->kv);
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
        while ((rc = kvcache_seq_prepare(s->kv, &q->kv, q->n_kv, n)) == KVCACHE_ENOSPACE) {
            int self = s->run[s->n_run - 1] == q;
            preempt_youngest(s);
            if (self) break;
        }
        if (rc == KVCACHE_ENOSPACE) break; /* q itself was the youngest: it waits */
        if (rc != KVCACHE_OK) {
            LOG_E(SCHED_MOD, q->id, "block tables inconsistent (rc %d)", rc);
            fail_running(s, q, "internal scheduler error");
            i--;
            continue;
        }
        if (todo > 1) prefill_budget -= n;
        q->step_n = n;
        struct kvstore_seq *v = &s->views[nb];
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
        kvcache_seq_commit(s->kv, &q->kv, q->hist, q->n_kv);
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
    kvcache_session_expire(s->kv, now);
    while (s->wait_head && s->n_run < s->o.max_seqs && try_admit(s, s->wait_head, now)) {
    }
    return gone;
}

void sched_publish_counts(struct sched *s) {
    struct kvcache_stats st;
    kvcache_get_stats(s->kv, &st);
    pthread_mutex_lock(&s->lock);
    s->kst = st;
    s->counts.running = s->n_run;
    s->counts.waiting = s->n_waiting;
    s->counts.kv_blocks_used = st.used[KVSTORE_FULL];
    s->counts.kv_blocks_total = st.total[KVSTORE_FULL];
    pthread_mutex_unlock(&s->lock);
}

void *sched_main(void *arg) {
    struct sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        while (!s->stopping && s->n_run == 0 && !s->wait_head && s->n_cancel == 0) {
            if (kvcache_session_count(s->kv) > 0) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_sec += 1;
                pthread_cond_timedwait(&s->cond, &s->lock, &ts);
                kvcache_session_expire(s->kv, clock_mono_s());
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
            kvcache_seq_release(s->kv, &q->kv);
            sched_seq_free(q);
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
        sched_publish_counts(s);
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
        kvcache_seq_release(s->kv, &q->kv);
        sched_seq_free(q);
    }
    while (s->n_run > 0) finish_running(s, s->run[0], SCHED_FINISH_CANCELLED);
    sched_publish_counts(s);
    return NULL;
}
