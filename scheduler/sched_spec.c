/*
 * sched_spec — the scheduler's side of speculative decoding (scheduler/spec.h): plan the
 * drafts of a step, verify a drafting sequence's rows, hand its accepted tokens to the step
 * one by one, feed the cost model and publish the counters; and the cost model's other use,
 * the prefill chunk cap of prefill_stall. Scheduler thread, except sched_spec_sample (a
 * compute task, one sequence).
 */
#include "scheduler/sched_int.h"

#include <limits.h>
#include <string.h>

_Static_assert(SPEC_MAX_TOP == SCHED_MAX_TOP, "spec keeps as many alternatives as events carry");

void sched_spec_plan(struct sched *s, int *tokens_left, int *rows_left) {
    int prefilling = 0;
    for (int i = 0; i < s->n_run; i++) {
        s->run[i]->spec.n_draft = 0;
        s->run[i]->spec.n_forced = 0;
        prefilling |= s->run[i]->n_hist - s->run[i]->n_kv > 1;
    }
    if (!s->spec_on) return;
    /* A prompt being prefilled keeps at least half of what the decode rows leave. */
    int budget = prefilling ? *tokens_left / 2 : *tokens_left;
    if (budget > *rows_left) budget = *rows_left;
    int used = 0, rows = 0;
    for (int i = 0; i < s->n_run; i++) rows += s->run[i]->n_hist - s->run[i]->n_kv == 1;
    double tokens = rows; /* what the step is expected to yield so far */
    for (int i = 0; i < s->n_run && used < budget; i++) {
        struct seq *q = s->run[i];
        if (q->n_hist - q->n_kv != 1 || q->embed || (q->prompt_lp && q->n_kv < q->n_prompt))
            continue;
        int room = q->max_tokens - q->n_out - 1; /* the last row's token must fit too */
        if (room > budget - used) room = budget - used;
        int k = 0, forced = 0;
        if (q->gm && q->spec.on && room > 0) /* the bytes its grammar forces, if any */
            k = forced = sched_gram_draft(s, q, room < SPEC_MAX_DRAFT ? room : SPEC_MAX_DRAFT);
        if (k == 0) {
            k = spec_budget(&q->spec, room);
            if (k > 0)
                k = spec_lookup(q->hist, q->n_hist, k, q->hist + q->n_hist, &q->spec.align);
        }
        const double alpha = forced ? spec_alpha_forced(&q->spec) : spec_alpha(&q->spec);
        if (k > 0 && s->spec_on == SPEC_MODE_ALWAYS) {
            tokens += k * alpha;
        } else if (k > 0) {
            int kc = spec_choose(&s->spec_cost, rows + used, tokens, alpha, k);
            if (kc == 0 && ++q->spec.idle >= SPEC_MAX_COOLDOWN) kc = 1; /* probe */
            if (kc > 0) q->spec.idle = 0;
            double pw = 1;
            for (int j = 0; j < kc; j++) tokens += (pw *= alpha);
            k = kc;
        }
        q->spec.n_forced = forced > 0 && k > 0;
        q->spec.n_draft = k;
        used += k;
    }
    *tokens_left -= used;
    *rows_left -= used;
}

void sched_spec_sample(struct sched *s, struct seq *q, int task) {
    if (q->gm) { /* a greedy constrained sequence (sched.c lets no other one draft) */
        sched_gram_spec_verify(s, q, task);
        return;
    }
    const size_t nv = (size_t)s->n_vocab;
    struct spec_rows r = {.logits = s->logits + (size_t)q->logit_row * nv,
                          .n_vocab = s->n_vocab,
                          .scratch = s->scratch + (size_t)task * nv,
                          .hist = q->hist,
                          .n_hist = q->n_hist,
                          .n_out = q->n_out,
                          .n_draft = q->spec.n_draft,
                          .ban = q->ignore_eos ? s->eog : NULL,
                          .n_ban = q->ignore_eos ? s->n_eog : 0,
                          .end = q->ignore_eos ? NULL : s->eog,
                          .n_end = q->ignore_eos ? 0 : s->n_eog,
                          .top_logprobs = q->top_logprobs};
    spec_verify(&q->spec, s->smp[task], &q->sp, &q->rng, &r);
}

int sched_spec_accept(struct sched *s, struct seq *q) {
    struct spec_state *st = &q->spec;
    if (st->n_draft == 0) return 1;
    int accepted = st->n_emit - 1;
    if (st->n_forced) spec_feedback_forced(st, st->n_draft, accepted);
    else spec_feedback(st, st->n_draft, accepted);
    s->spec_pend[0] += (uint64_t)st->n_draft;
    s->spec_pend[1] += (uint64_t)accepted;
    s->spec_pend[2]++;
    if (st->n_forced) s->spec_pend[3] += (uint64_t)st->n_draft;
    return st->n_emit;
}

void sched_spec_take(struct seq *q, int j) {
    const struct spec_state *st = &q->spec;
    /* Every token before this one is in the KV cache: the decode row and the j - 1 drafts
     * accepted before it. */
    q->n_kv = q->n_hist;
    q->tok = st->tok[j];
    q->logprob = st->logprob[j];
    if (q->top_logprobs > 0)
        memcpy(q->top, st->top[j], (size_t)q->top_logprobs * sizeof(q->top[0]));
}

void sched_spec_step_done(struct sched *s, int rows, int n_prefill, double seconds) {
    if (n_prefill == 0) {
        spec_cost_observe(&s->spec_cost, rows, seconds);
        return;
    }
    /* What the prefill tokens added to the step: its time less a decode-only step of the
     * same decode rows (all of it when there were none). */
    int dec = rows - n_prefill;
    double base = dec > 0 ? spec_cost_est(&s->spec_cost, dec) : 0;
    if (dec > 0 && base <= 0) return; /* no decode-only step of that size measured yet */
    double per = (seconds - base) / n_prefill;
    if (!(per > 0)) return;
    s->pf_tok_s = s->pf_tok_s > 0 ? 0.8 * s->pf_tok_s + 0.2 * per : per;
}

/* Prefill chunks of a step with running decoders: (prefill_stall - 1) decode-only steps'
 * worth of prefill tokens, so the decoders' next token comes about prefill_stall times later
 * than without the prompt, never fewer than SCHED_PREFILL_MIN tokens (every prompt makes
 * progress). That share grows by (dec + waiting) / dec with the prompts waiting: one long
 * prompt among 16 streams changes it by 1/16, while 28 prompts arriving with 4 streams that
 * started first are not held to a few dozen tokens a step behind those 4 (32 requests at
 * once, bench_server: TTFT p99 12.3-12.6 s with the plain share, 2.6-3.0 s without a cap). */
#define SCHED_PREFILL_MIN 16
int sched_prefill_cap(const struct sched *s, int dec, int waiting) {
    if (!(s->o.prefill_stall > 1) || dec <= 0 || !(s->pf_tok_s > 0)) return INT_MAX;
    double t = spec_cost_est(&s->spec_cost, dec);
    if (!(t > 0)) return INT_MAX;
    double n = (s->o.prefill_stall - 1) * t / s->pf_tok_s * (double)(dec + waiting) / dec;
    if (n >= (double)INT_MAX) return INT_MAX;
    return n < SCHED_PREFILL_MIN ? SCHED_PREFILL_MIN : (int)n;
}

void sched_spec_publish(struct sched *s) {
    for (int i = 0; i < 4; i++) {
        s->spec_total[i] += s->spec_pend[i];
        s->spec_pend[i] = 0;
    }
}
