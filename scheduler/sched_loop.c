/*
 * sched_loop — continuous batching on one scheduler thread. See sched.h for the contract.
 *
 * Each step: take cancellations and pauses, and admit waiting requests (sched_fair.c: fair
 * between groups, arrival order within that; one that lacks KV blocks blocks those behind
 * it, so nobody starves), then build one batch in arrival order with one
 * decode row per decoding sequence and prefill chunks from the budget left after the decode
 * rows (while sequences decode, cut further to prefill_stall: sched_spec.c), run fwd_run once, sample one token for every sequence whose row reached the end of
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
#include "scheduler/grammar.h"

/* ---- sequences ---------------------------------------------------------------------- */

void sched_seq_free(struct seq *q) {
    if (!q) return;
    free(q->hist);
    free(q->bias);
    stop_free(&q->stop);
    free(q->session_id);
    free(q->emb_acc);
    free(q->emb_out);
    kvcache_seq_free(&q->kv);
    free(q->done_text);
    sched_gram_seq_free(q);
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
    ev.stop_index = fin == SCHED_FINISH_STOP && q->stop.matched ? q->stop.match_index : -1;
    if (q->embed && fin == SCHED_FINISH_STOP) {
        ev.embedding = q->emb_out;
        ev.n_embd = q->n_embd;
    }
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

/* A paused waiting sequence entering (+1) or leaving (-1) the paused counts. */
static void wait_count_paused(struct sched *s, const struct seq *q, int d) {
    s->n_wait_paused += d;
    s->wait_paused_tokens += d * (long long)q->n_hist;
}

static void wait_unlink(struct sched *s, struct seq *q) {
    if (q->prev) q->prev->next = q->next;
    else s->wait_head = q->next;
    if (q->next) q->next->prev = q->prev;
    else s->wait_tail = q->prev;
    q->prev = q->next = NULL;
    s->n_waiting--;
    s->waiting_tokens -= q->n_hist;
    if (q->paused) wait_count_paused(s, q, -1);
}

void sched_wait_push_back(struct sched *s, struct seq *q) {
    q->prev = s->wait_tail;
    q->next = NULL;
    if (s->wait_tail) s->wait_tail->next = q;
    else s->wait_head = q;
    s->wait_tail = q;
    s->n_waiting++;
    s->waiting_tokens += q->n_hist;
    if (q->paused) wait_count_paused(s, q, 1);
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
    if (q->paused) wait_count_paused(s, q, 1);
}

/* ---- admission ---------------------------------------------------------------------- */


/* Try to admit the waiting sequence q (lock held): attach a cached prefix or warm session,
 * check that blocks exist for the rest of its tokens plus a reserve, fill its SWA ring. */
int sched_try_admit(struct sched *s, struct seq *q, double now) {
    int bs = s->o.kv_block_size;
    /* Prompt logprobs and embeddings need every prompt row computed: no reuse. */
    int whole = q->prompt_lp || q->embed;
    int reuse = kvcache_seq_attach(s->kv, &q->kv, q->hist, q->n_hist, whole ? 0 : q->n_hist - 1,
                              q->admitted || whole ? NULL : q->session_id, now);
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
    q->out_at_admit = q->n_out;
    if (!q->admitted) {
        q->admitted = 1;
        q->cached_tokens = reuse;
        q->queue_s = now - q->t_submit;
    }
    wait_unlink(s, q);
    run_insert(s, q);
    return 1;
}

void sched_requeue(struct sched *s, struct seq *q) {
    kvcache_seq_release(s->kv, &q->kv);
    q->n_kv = 0;
    q->step_n = 0;
    q->requeued = 1;
    if (q->embed) memset(q->emb_acc, 0, (size_t)q->n_embd * sizeof(double));
    run_remove(s, q);
    wait_push_preempted(s, q);
    s->preemptions++;
    LOG_D(SCHED_MOD, q->id, "preempted after %d tokens", q->n_out);
}

/* Move the youngest running sequence back to the waiting queue, dropping its blocks. */
static void preempt_youngest(struct sched *s) {
    pthread_mutex_lock(&s->lock);
    sched_requeue(s, s->run[s->n_run - 1]);
    pthread_mutex_unlock(&s->lock);
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

static int greedy_rules(const struct seq *q);

static void sample_task(void *arg, int task, int n_tasks) {
    const struct sample_job *J = arg;
    struct sched *s = J->s;
    float *scratch = s->scratch + (size_t)task * (size_t)s->n_vocab;
    for (int i = task; i < J->n; i += n_tasks) {
        struct seq *q = s->sampling[i];
        if (q->spec.n_draft > 0) {
            sched_spec_sample(s, q, task); /* the decode row and the drafts' rows */
            continue;
        }
        if (s->gid[q->logit_row] >= 0) { /* the backend took the argmax (greedy_row) */
            q->tok = s->gid[q->logit_row];
            continue;
        }
        if (s->greedy[q->logit_row] == FWD_ROW_TOPK) { /* candidates only (topk_row) */
            const size_t o = (size_t)q->logit_row * FWD_TOPK_MAX;
            q->tok = smp_sample_topk(s->smp[task], &q->sp, &q->rng, s->tk_id + o, s->tk_val + o,
                                     FWD_TOPK_MAX);
            continue;
        }
        float *row = s->logits + (size_t)q->logit_row * (size_t)s->n_vocab, *l = row;
        if (q->top_logprobs >= 0) {
            memcpy(scratch, row, (size_t)s->n_vocab * sizeof(float));
            l = scratch;
        }
        if (q->gm && greedy_rules(q) && sched_gram_greedy(s, q, task, l, &q->tok)) continue;
        if (q->gm) sched_gram_mask(s, q, task, l); /* before every other rule */
        q->tok = smp_sample(s->smp[task], &q->sp, &q->rng, l, q->hist, q->n_hist, q->n_out,
                            q->ignore_eos ? s->eog : NULL, q->ignore_eos ? s->n_eog : 0);
        if (q->top_logprobs >= 0)
            q->logprob = smp_logprobs(row, s->n_vocab, q->tok, q->top_logprobs, q->top);
    }
}

/* Report the token sample_task chose. Returns 1 when the sequence finished. */
static int handle_token(struct sched *s, struct seq *q) {
    const int32_t tok = q->tok;
    const char *gmsg = q->gram_err;
    const int gdone = gmsg ? -1 : sched_gram_accept(s, q, tok, &gmsg);
    if (gdone < 0) {
        fail_running(s, q, gmsg);
        return 1;
    }
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
    int k;
    if (q->control_bytes && tok_type(s->vocab, tok) == TOK_TYPE_CONTROL) {
        k = tok_stream_flush(&q->ts, q->text, (int)sizeof(q->text) - GRAM_TOK_BYTES);
        if (k < 0) k = 0;
        gram_token_bytes(tok, (uint8_t *)q->text + k);
        k += GRAM_TOK_BYTES;
    } else {
        k = tok_stream_push(&q->ts, s->vocab, tok, q->text, (int)sizeof(q->text));
    }
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
    if (gdone == 2) { /* the grammar allows nothing more */
        finish_running(s, q, SCHED_FINISH_STOP);
        return 1;
    }
    if (q->n_out >= q->max_tokens) {
        finish_running(s, q, SCHED_FINISH_LENGTH);
        return 1;
    }
    return 0;
}

/* The prompt positions this step's logits score: row j of a chunk at position pos0 + j
 * scores the token at pos0 + j + 1 (positions reported before a preemption are skipped).
 * Their log-softmaxes run on the compute threads, one row per task slot. */
static void plp_task(void *arg, int task, int n_tasks) {
    struct sched *s = arg;
    for (int i = task; i < s->n_plp; i += n_tasks)
        s->plp_lp[i] = smp_logprobs(s->logits + (size_t)s->plp_row[i] * (size_t)s->n_vocab,
                                    s->n_vocab, s->plp_tok[i], s->plp_k[i],
                                    s->plp_top + (size_t)i * SCHED_MAX_TOP);
}

static void score_prompts(struct sched *s, int nb) {
    s->n_plp = 0;
    for (int b = 0; b < nb; b++) {
        struct seq *q = s->batch[b];
        if (q->lp_row0 < 0) continue;
        for (int j = 0; j < q->step_n; j++) {
            int p = q->n_kv + j + 1; /* n_kv: still the chunk's first position */
            if (p >= q->n_prompt) break;
            if (p < q->lp_next) continue;
            s->plp_row[s->n_plp] = q->lp_row0 + j;
            s->plp_tok[s->n_plp] = q->hist[p];
            s->plp_k[s->n_plp++] = q->top_logprobs;
        }
    }
    if (s->n_plp == 0) return;
    int nt = s->n_plp < fwd_threads(s->fwd) ? s->n_plp : fwd_threads(s->fwd);
    if (nt > 1) fwd_parallel(s->fwd, plp_task, s, nt);
    else plp_task(s, 0, 1);
}

/* PROMPT events for what score_prompts computed (in the same order). */
static void report_prompt(struct seq *q, int pos0, const struct sched *s, int *at) {
    for (int j = 0; j < q->step_n; j++) {
        int p = pos0 + j + 1;
        if (p >= q->n_prompt) break;
        if (p < q->lp_next) continue;
        int i = (*at)++;
        struct sched_event ev = {0};
        ev.kind = SCHED_EV_PROMPT;
        ev.id = q->id;
        ev.text = "";
        ev.pos = p;
        ev.token = q->hist[p];
        ev.logprob = s->plp_lp[i];
        ev.top = s->plp_top + (size_t)i * SCHED_MAX_TOP;
        ev.n_top = q->top_logprobs;
        emit(q, &ev);
        q->lp_next = p + 1;
    }
}

/* Adds this step's final hidden rows of an embed sequence to its pooled vector; once the
 * whole input is in, emb_out holds the mean (or the last row). */
static void pool_hidden(struct sched *s, struct seq *q, int pos0) {
    const int E = s->n_embd;
    const float *h = s->hidden + (size_t)q->hidden_row0 * (size_t)E;
    for (int j = q->pooling == SCHED_POOL_LAST ? q->step_n - 1 : 0; j < q->step_n; j++) {
        if (q->pooling == SCHED_POOL_LAST && pos0 + j != q->n_hist - 1) continue;
        for (int k = 0; k < E; k++) q->emb_acc[k] += h[(size_t)j * (size_t)E + (size_t)k];
    }
    if (q->n_kv < q->n_hist) return;
    const double div = q->pooling == SCHED_POOL_LAST ? 1.0 : (double)q->n_hist;
    for (int k = 0; k < E; k++) q->emb_out[k] = (float)(q->emb_acc[k] / div);
}

/* Greedy ids from the backend: a request whose token is exactly smp_argmax of its raw
 * logits row (smp_sample changes nothing else for it: no bias, penalties, bans, logprobs,
 * prompt scoring), so fwd_run_greedy may return that id instead of the row. Any new
 * per-request change to the logits must make this 0. */
int sched_greedy_sampling(const struct seq *q) {
    const struct sched_sampling *sp = &q->sp;
    return !(sp->temperature > 0) && sp->n_logit_bias == 0 && sp->presence_penalty == 0 &&
           sp->frequency_penalty == 0 &&
           !(sp->repetition_penalty > 0 && sp->repetition_penalty != 1.0f) &&
           q->top_logprobs < 0 && !q->ignore_eos;
}

static int greedy_rules(const struct seq *q) {
    return sched_greedy_sampling(q) && q->lp_row0 < 0 &&
           q->spec.n_draft == 0; /* verification samples every row of the drafts */
}

static int greedy_row(const struct seq *q) {
    return greedy_rules(q) && !q->gm; /* a grammar may mask the row: it needs the whole row */
}

/* Top-k candidates from the backend (fwd_run_rows): a request whose token smp_sample_topk
 * draws exactly as smp_sample would from the whole row (smp_topk_ok: temperature > 0,
 * 1 <= top_k <= FWD_TOPK_MAX, no bias, no penalties) and nothing else reads the row: no bans
 * (ignore_eos), logprobs, prompt scoring, grammar mask or drafts. Any new per-request use of
 * the row must make this 0. */
static int topk_row(const struct sched *s, const struct seq *q) {
    return s->topk_rows && smp_topk_ok(&q->sp, s->n_vocab, FWD_TOPK_MAX) &&
           q->top_logprobs < 0 && !q->ignore_eos && q->lp_row0 < 0 && !q->gm &&
           q->spec.n_draft == 0;
}

_Static_assert(SMP_TOPK_MAX == FWD_TOPK_MAX, "sample.h and forward.h disagree on top-k");

static void step(struct sched *s) {
    double t0 = clock_mono_s();
    int dec = 0, waiting = 0;
    for (int i = 0; i < s->n_run; i++) {
        dec += s->run[i]->n_hist - s->run[i]->n_kv == 1;
        waiting += s->run[i]->n_hist - s->run[i]->n_kv > 1;
    }
    int prefill_budget = s->o.max_batch_tokens - dec, nb = 0, n_tokens = 0, n_logits = 0;
    int plp_left = SCHED_PLP_ROWS, any_hidden = 0, n_prefill = 0;
    sched_spec_plan(s, &prefill_budget, &plp_left);
    int cap = sched_prefill_cap(s, dec, waiting);
    if (prefill_budget > cap) prefill_budget = cap;
    for (int i = 0; i < s->n_run; i++) {
        struct seq *q = s->run[i];
        int todo = q->n_hist - q->n_kv, n = todo;
        int scoring = q->prompt_lp && q->n_kv < q->n_prompt; /* a logits row per token */
        q->step_n = 0;
        q->logit_row = -1;
        q->lp_row0 = -1;
        if (todo > 1) {
            if (n > prefill_budget) n = prefill_budget;
            if (scoring && n > plp_left + 1) n = plp_left + 1;
            if (n <= 0) continue;
        } else {
            n += q->spec.n_draft; /* hist[n_kv..] = the last token, then the drafts */
        }
        int rc;
        while ((rc = kvcache_seq_prepare(s->kv, &q->kv, q->n_kv, n)) == KVCACHE_ENOSPACE) {
            if (q->spec.n_draft > 0) { /* drafts never preempt anyone */
                n -= q->spec.n_draft;
                q->spec.n_draft = 0;
                continue;
            }
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
        if (todo > 1) {
            prefill_budget -= n;
            n_prefill += n;
        }
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
        int last = q->n_kv + n - q->spec.n_draft == q->n_hist;
        int sample = last && !q->embed && q->max_tokens > 0;
        r->logits = scoring || q->spec.n_draft ? FWD_LOGITS_ALL
                    : sample                   ? FWD_LOGITS_LAST
                                               : FWD_LOGITS_NONE;
        if (q->spec.n_draft > 0) {
            q->logit_row = n_logits;
            n_logits += n;
        } else if (scoring) {
            q->lp_row0 = n_logits;
            n_logits += n;
            plp_left -= n - 1;
            if (sample) q->logit_row = n_logits - 1;
        } else if (sample) {
            q->logit_row = n_logits++;
        }
        if (q->embed) {
            q->hidden_row0 = n_tokens;
            any_hidden = 1;
        }
        s->batch[nb++] = q;
        n_tokens += n;
    }
    if (nb == 0) return;
    for (int r = 0; r < n_logits; r++)
        s->greedy[r] = 0, s->gid[r] = -1;
    for (int i = 0; i < nb; i++) {
        const struct seq *q = s->batch[i];
        if (q->logit_row < 0 || any_hidden) continue; /* fwd_run_hidden: whole rows */
        s->greedy[q->logit_row] = greedy_row(q)  ? FWD_ROW_GREEDY
                                  : topk_row(s, q) ? FWD_ROW_TOPK
                                                   : FWD_ROW_FULL;
        s->tk_scale[q->logit_row] = smp_inv_temp(&q->sp);
    }
    int n_topk = 0;
    for (int r = 0; r < n_logits; r++)
        n_topk += s->greedy[r] == FWD_ROW_TOPK;
    int rc = any_hidden ? fwd_run_hidden(s->fwd, s->rows, nb, s->logits, s->hidden)
                        : fwd_run_rows(s->fwd, s->rows, nb, s->logits, s->greedy, s->tk_scale,
                                       s->gid, s->tk_id, s->tk_val);
    if (rc != FWD_OK) {
        LOG_E(SCHED_MOD, 0, "forward pass failed: %s", fwd_strerror(rc));
        for (int i = 0; i < nb; i++) fail_running(s, s->batch[i], "the compute backend failed");
        return;
    }
    int n_sample = 0, plp_at = 0;
    score_prompts(s, nb);
    for (int i = 0; i < nb; i++) {
        struct seq *q = s->batch[i];
        int pos0 = q->n_kv;
        q->n_kv += q->step_n - q->spec.n_draft; /* drafts count once accepted (sched_spec_take) */
        /* an embedding's blocks are not offered to the prefix cache: nothing of it is kept */
        if (!q->embed) kvcache_seq_commit(s->kv, &q->kv, q->hist, q->n_kv);
        if (q->lp_row0 >= 0) report_prompt(q, pos0, s, &plp_at);
        if (q->embed) {
            pool_hidden(s, q, pos0);
            if (q->n_kv == q->n_hist) finish_running(s, q, SCHED_FINISH_STOP);
        } else if (q->max_tokens == 0 && q->n_kv == q->n_hist) {
            finish_running(s, q, SCHED_FINISH_LENGTH); /* scored, nothing to generate */
        } else if (q->logit_row >= 0) {
            s->sampling[n_sample++] = q;
        }
    }
    if (n_sample > 0) {
        int kept = 0; /* grammar state for constrained sequences (scheduler thread) */
        for (int i = 0; i < n_sample; i++) {
            struct seq *q = s->sampling[i];
            const char *gmsg = NULL;
            if (q->gram && sched_gram_prepare(s, q, &gmsg)) fail_running(s, q, gmsg);
            else s->sampling[kept++] = q;
        }
        n_sample = kept;
    }
    if (n_sample > 0) {
        struct sample_job sj = {s, n_sample};
        const int nt = n_sample < s->n_smp ? n_sample : s->n_smp;
        if (nt > 1) fwd_parallel(s->fwd, sample_task, &sj, nt);
        else sample_task(&sj, 0, 1);
        for (int i = 0; i < n_sample; i++) {
            struct seq *q = s->sampling[i];
            const int n_emit = sched_spec_accept(s, q);
            for (int j = 0; j < n_emit; j++) {
                if (q->spec.n_draft > 0) sched_spec_take(q, j);
                if (handle_token(s, q)) break; /* finished: q is gone */
            }
        }
    }
    double dt = clock_mono_s() - t0;
    sched_spec_step_done(s, n_tokens, n_prefill, dt);
    pthread_mutex_lock(&s->lock);
    prom_hist_observe(&s->h_batch, nb);
    prom_hist_observe(&s->h_tokens, n_tokens);
    prom_hist_observe(&s->h_step, dt);
    s->steps++;
    s->topk_rows_done += n_topk;
    sched_spec_publish(s);
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
    /* Pauses: a paused running sequence leaves the batch (its client stopped reading). */
    for (int c = 0; c < s->n_pause; c++) {
        struct sched_pause_op op = s->pause_ops[c];
        for (struct seq *q = s->wait_head; q; q = q->next)
            if (q->id == op.id && q->paused != op.paused) {
                q->paused = op.paused;
                wait_count_paused(s, q, op.paused ? 1 : -1);
            }
        for (int i = 0; i < s->n_run; i++)
            if (s->run[i]->id == op.id && (s->run[i]->paused = op.paused) && !s->run[i]->cancel) {
                sched_requeue(s, s->run[i]);
                break;
            }
    }
    s->n_pause = 0;
    for (struct seq *q = s->wait_head, *nx; q; q = nx) {
        nx = q->next;
        if (q->cancel || (q->deadline > 0 && now > q->deadline)) {
            wait_unlink(s, q);
            q->next = gone;
            gone = q;
        }
    }
    kvcache_session_expire(s->kv, now);
    sched_fair_admit(s, now);
    /* Admitted sequences count as running before the step starts, so sched_stats' pending
     * covers a step that never ends (the liveness check) from its first turn. */
    s->counts.running = s->n_run;
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
    s->loop_turns++;
    s->progress_at = clock_mono_s();
    pthread_mutex_unlock(&s->lock);
}

void *sched_main(void *arg) {
    struct sched *s = arg;
    /* The grammar tables first (about 0.5 s for Gemma's vocabulary). Counted as idle, not as
     * a stuck turn: requests that come meanwhile wait, and their progress age starts when
     * the loop picks them up. */
    pthread_mutex_lock(&s->lock);
    s->idle_wait = 1;
    pthread_mutex_unlock(&s->lock);
    sched_gram_warm(s);
    for (;;) {
        pthread_mutex_lock(&s->lock);
        while (!s->stopping && s->n_run == 0 && !s->wait_head && s->n_cancel == 0 &&
               s->n_pause == 0) {
            s->idle_wait = 1;
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
        if (s->idle_wait) { /* progress is counted from the wake-up, not from the sleep */
            s->idle_wait = 0;
            s->progress_at = clock_mono_s();
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
