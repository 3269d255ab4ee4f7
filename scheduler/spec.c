/*
 * spec — prompt-lookup drafting, the cost model, verification and back-off (see spec.h). The
 * scheduler's side (planning a step's drafts, reporting accepted tokens) is sched_spec.c.
 */
#include "scheduler/spec.h"

#include <string.h>

void spec_init(struct spec_state *st, int on) {
    memset(st, 0, sizeof(*st));
    st->on = on;
    st->limit = SPEC_START_DRAFT;
}

/* Tokens of the suffix of h[0..n) that also end at e (e < n - 1), up to cap. */
static int spec_match(const int32_t *h, int n, int e, int cap) {
    int len = 0;
    while (len < cap && e - len >= 0 && h[e - len] == h[n - 1 - len]) len++;
    return len;
}

int spec_lookup(const int32_t *h, int n, int max_draft, int32_t *draft, int *align) {
    if (n < 2 || max_draft < 1) return 0;
    if (max_draft > SPEC_MAX_DRAFT) max_draft = SPEC_MAX_DRAFT;
    int best_end = -1;
    /* The copy's alignment first: x = n - 1 - *align is where the last token would sit in
     * the text being copied if the copy went on. The nearest occurrence from x - 1 on wins:
     * at x - 1 or x one matching token is enough, further on SPEC_NGRAM_MIN. */
    const int x = align && *align > 0 ? n - 1 - *align : -1;
    if (x >= 0)
        for (int e = x > 0 ? x - 1 : 0; e < n - 1 && best_end < 0; e++) {
            const int len = h[e] == h[n - 1] ? spec_match(h, n, e, SPEC_NGRAM_MIN) : 0;
            if (len >= SPEC_NGRAM_MIN || (len >= 1 && e <= x)) best_end = e;
        }
    if (best_end < 0 && n >= SPEC_NGRAM_MIN + 1) {
        /* Occurrences end at e < n - 1; newest first, so the longest match found first
         * wins. */
        int best_len = 0;
        for (int e = n - 2; e >= SPEC_NGRAM_MIN - 1; e--) {
            if (h[e] != h[n - 1]) continue;
            const int len = spec_match(h, n, e, SPEC_NGRAM_MAX);
            if (len > best_len) {
                best_len = len;
                best_end = e;
                if (len == SPEC_NGRAM_MAX) break;
            }
        }
        if (best_len < SPEC_NGRAM_MIN) best_end = -1;
    }
    if (best_end < 0) return 0;
    if (align) *align = n - 1 - best_end;
    /* What followed the occurrence; past the end of the history, the drafts themselves (the
     * same period repeats). */
    int k = 0;
    for (int i = best_end + 1; k < max_draft; i++) draft[k++] = i < n ? h[i] : draft[i - n];
    return k;
}

double spec_alpha(const struct spec_state *st) {
    return (st->accepted + 1.2) / (st->tested + 2.0);
}

double spec_alpha_forced(const struct spec_state *st) {
    return (st->faccepted + 1.8) / (st->ftested + 2.0);
}

void spec_feedback_forced(struct spec_state *st, int drafted, int accepted) {
    if (drafted < 1) return;
    st->ftested = 0.8 * st->ftested + (accepted < drafted ? accepted + 1 : drafted);
    st->faccepted = 0.8 * st->faccepted + accepted;
}

void spec_cost_observe(struct spec_cost *c, int rows, double seconds) {
    if (rows < 1 || rows > SPEC_COST_ROWS || !(seconds > 0)) return;
    c->t[rows] = c->seen[rows] ? 0.8 * c->t[rows] + 0.2 * seconds : seconds;
    c->seen[rows]++;
}

/* A straight line a + b (n - 1) through the measured buckets, each weighted by its
 * observations (at most 8), so one noisy bucket does not decide; b >= 0. With one bucket
 * measured, b is SPEC_PRIOR_ROW of a 1-row step. */
double spec_cost_est(const struct spec_cost *c, int rows) {
    if (rows < 1) return 0;
    if (rows > SPEC_COST_ROWS) rows = SPEC_COST_ROWS;
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    int buckets = 0, first = 0;
    for (int n = 1; n <= SPEC_COST_ROWS; n++) {
        if (!c->seen[n]) continue;
        if (!first) first = n;
        double w = c->seen[n] < 8 ? c->seen[n] : 8, x = n - 1;
        sw += w;
        sx += w * x;
        sy += w * c->t[n];
        sxx += w * x * x;
        sxy += w * x * c->t[n];
        buckets++;
    }
    if (buckets == 0 || first > rows) return 0; /* no basis for a step this small */
    double b, a;
    double den = sw * sxx - sx * sx;
    if (buckets >= 2 && den > 0) {
        b = (sw * sxy - sx * sy) / den;
        if (b < 0) b = 0;
        a = (sy - b * sx) / sw;
    } else {
        a = c->t[first] / (1 + SPEC_PRIOR_ROW * (first - 1));
        b = SPEC_PRIOR_ROW * a;
    }
    double t = a + b * (rows - 1);
    return t > 0 ? t : 0;
}

int spec_choose(const struct spec_cost *c, int rows, double tokens, double alpha, int kmax) {
    double t0 = spec_cost_est(c, rows);
    if (t0 <= 0 || kmax < 1) return 0;
    double best = tokens / t0 * (1.0 + SPEC_MARGIN), gain = 0, pw = 1;
    int k_best = 0;
    for (int k = 1; k <= kmax; k++) {
        pw *= alpha;
        gain += pw; /* expected accepted drafts: alpha + alpha^2 + ... + alpha^k */
        double t = spec_cost_est(c, rows + k);
        if (t > 0 && (tokens + gain) / t > best) {
            best = (tokens + gain) / t;
            k_best = k;
        }
    }
    return k_best;
}

int spec_budget(struct spec_state *st, int room) {
    if (!st->on || room < 1) return 0;
    if (st->cooldown > 0) {
        st->cooldown--;
        return 0;
    }
    return st->limit < room ? st->limit : room;
}

void spec_feedback(struct spec_state *st, int drafted, int accepted) {
    if (drafted < 1) return;
    /* A run of `accepted` then a rejection tested accepted + 1 tokens; a full run, drafted. */
    st->tested = 0.8 * st->tested + (accepted < drafted ? accepted + 1 : drafted);
    st->accepted = 0.8 * st->accepted + accepted;
    if (accepted == 0) {
        st->misses++;
        st->cooldown = st->misses - 1 < SPEC_MAX_COOLDOWN ? st->misses - 1 : SPEC_MAX_COOLDOWN;
        st->limit = st->limit > 1 ? st->limit / 2 : 1;
        return;
    }
    st->misses = 0;
    if (accepted < drafted) st->limit = accepted + 1;
    else st->limit = 2 * st->limit < SPEC_MAX_DRAFT ? 2 * st->limit : SPEC_MAX_DRAFT;
}

int spec_verify(struct spec_state *st, struct smp_ctx *c, const struct sched_sampling *sp,
                struct smp_rng *rng, const struct spec_rows *r) {
    const size_t nv = (size_t)r->n_vocab;
    int j = 0;
    for (;; j++) {
        float *row = r->logits + (size_t)j * nv, *l = row;
        if (r->top_logprobs >= 0) {
            memcpy(r->scratch, row, nv * sizeof(float));
            l = r->scratch;
        }
        /* The history the sampler sees holds the j drafts accepted so far: exactly the
         * tokens a plain decode would have sampled before this position. */
        int32_t t = smp_sample(c, sp, rng, l, r->hist, r->n_hist + j, r->n_out + j, r->ban,
                               r->n_ban);
        st->tok[j] = t;
        if (r->top_logprobs >= 0)
            st->logprob[j] = smp_logprobs(row, r->n_vocab, t, r->top_logprobs, st->top[j]);
        if (j == r->n_draft || t != r->hist[r->n_hist + j]) break;
        int end = 0;
        for (int e = 0; e < r->n_end && !end; e++) end = t == r->end[e];
        if (end) break; /* nothing after it is reported: plain decoding stops here */
    }
    st->n_emit = j + 1;
    return st->n_emit;
}
