/*
 * sched_gram — grammar-constrained sequences in the scheduler (see sched.h, sched_req.grammar).
 *
 * The vocabulary trie, one grammar scratch and one mask buffer per compute thread are built
 * when the scheduler thread starts (sched_gram_warm, before it serves anything: about half
 * a second for Gemma's 262,144 tokens), so the first constrained request does not stall a
 * step; if that fails (memory) they are built when a constrained sequence first samples.
 * Sequences without a grammar pay nothing per step. A greedy sequence first tries the raw
 * row's argmax: when the grammar takes that token it is the masked argmax too (the first
 * index of the largest value among allowed ids), and no mask is built. Otherwise a sequence's
 * mask is computed inside its sampling task (sample_task in sched_loop.c, task t with
 * scratch t), so the masks of a step's constrained sequences are computed in parallel, and
 * applied before every other sampling rule. The mask is exact whatever the cache holds, so
 * greedy and seeded sampling stay deterministic and batch-invariant.
 *
 * A lazy grammar (grammar_trigger) watches the output bytes while dormant; when the trigger
 * appears, a matcher starts and is fed the bytes from the trigger's first byte on; if they
 * do not fit the grammar, the trigger is ignored at that place and the output stays free.
 */
#define _GNU_SOURCE /* memmem */
#include "scheduler/sched_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "scheduler/grammar.h"

static size_t mask_words(const struct sched *s) { return ((size_t)s->n_vocab + 63) / 64; }

static int ensure_shared(struct sched *s) {
    if (s->gv) return 0;
    struct gram_vocab *gv = NULL;
    if (gram_vocab_create(s->vocab, &gv)) return -1;
    s->gx = calloc((size_t)s->n_smp, sizeof(*s->gx));
    s->gmask = malloc((size_t)s->n_smp * mask_words(s) * sizeof(uint64_t));
    if (!s->gx || !s->gmask) goto fail;
    for (int i = 0; i < s->n_smp; i++)
        if (gram_scratch_create(NULL, gram_vocab_max_len(gv), &s->gx[i])) goto fail;
    s->gv = gv;
    return 0;
fail:
    if (s->gx)
        for (int i = 0; i < s->n_smp; i++) gram_scratch_destroy(s->gx[i]);
    free(s->gx);
    free(s->gmask);
    s->gx = NULL;
    s->gmask = NULL;
    gram_vocab_destroy(gv);
    return -1;
}

void sched_gram_warm(struct sched *s) {
    if (ensure_shared(s)) LOG_W(SCHED_MOD, 0, "cannot build the grammar vocabulary tables yet");
}

int sched_gram_prepare(struct sched *s, struct seq *q, const char **msg) {
    if (!q->gram) return 0;
    if (ensure_shared(s)) {
        *msg = "out of memory building the grammar tables";
        return -1;
    }
    if (q->trig && !q->trig_buf) {
        q->trig_cap = (int)strlen(q->trig) + 2 * gram_vocab_max_len(s->gv) + 16;
        q->trig_buf = malloc((size_t)q->trig_cap);
        if (!q->trig_buf) {
            *msg = "out of memory";
            return -1;
        }
    }
    if (q->trig || q->gm) return 0;
    int rc = gram_match_create(q->gram, s->gx[0], &q->gm);
    if (!rc && q->spec.on) rc = gram_match_create(q->gram, s->gx[0], &q->gm_spec);
    if (rc) {
        *msg = rc == GRAM_EBUDGET ? "the grammar exceeds its state budget" : "out of memory";
        return -1;
    }
    return 0;
}

/* Forbidden ids of l to -inf under matcher m (end of generation only where m may end). */
static void mask_row(struct sched *s, struct seq *q, struct gram_match *m, int task, float *l) {
    uint64_t *mask = s->gmask + (size_t)task * mask_words(s);
    int n_allowed = 0;
    int rc = gram_match_mask(m, s->gx[task], s->gv, mask, &n_allowed, 0);
    if (rc) {
        q->gram_err = rc == GRAM_EBUDGET ? "the grammar exceeded its state budget"
                                         : "the grammar mask failed";
        return;
    }
    const int can_end = gram_match_can_end(m);
    if (n_allowed == 0 && !can_end) {
        q->gram_err = "the grammar allows no token here";
        return;
    }
    float eog_l[64];
    for (int i = 0; i < s->n_eog; i++) eog_l[i] = l[s->eog[i]];
    const size_t words = mask_words(s);
    for (size_t w = 0; w < words; w++) {
        const uint64_t bits = mask[w];
        if (bits == ~0ull) continue;
        const int base = (int)(w * 64);
        const int top = base + 64 < s->n_vocab ? 64 : s->n_vocab - base;
        for (int b = 0; b < top; b++)
            if (!((bits >> b) & 1)) l[base + b] = -INFINITY;
    }
    if (can_end)
        for (int i = 0; i < s->n_eog; i++) l[s->eog[i]] = eog_l[i];
}

void sched_gram_mask(struct sched *s, struct seq *q, int task, float *l) {
    if (q->gm) mask_row(s, q, q->gm, task, l);
}

/* The raw argmax of l when matcher m takes it (see sched_gram_greedy). */
static int greedy_under(struct sched *s, const struct gram_match *m, int task, const float *l,
                        int32_t *tok) {
    const int32_t t = smp_argmax(l, s->n_vocab);
    if (!(l[t] > -INFINITY)) return 0; /* nothing finite: the mask decides */
    if (tok_is_eog(s->vocab, t)) {
        if (!gram_match_can_end(m)) return 0;
    } else {
        const uint8_t *b;
        const int len = gram_vocab_token(s->gv, t, &b);
        if (len <= 0 || gram_match_check(m, s->gx[task], b, (size_t)len) != GRAM_OK) return 0;
    }
    *tok = t;
    return 1;
}

int sched_gram_greedy(struct sched *s, struct seq *q, int task, const float *l, int32_t *tok) {
    return greedy_under(s, q->gm, task, l, tok);
}

void sched_gram_spec_verify(struct sched *s, struct seq *q, int task) {
    struct spec_state *st = &q->spec;
    const size_t nv = (size_t)s->n_vocab;
    float *scratch = s->scratch + (size_t)task * nv;
    struct gram_match *m = q->gm_spec;
    int j = 0;
    if (gram_match_copy(m, q->gm)) {
        q->gram_err = "the grammar state could not be copied";
        st->tok[0] = 0;
        st->n_emit = 1;
        return;
    }
    for (;; j++) {
        const float *row = s->logits + ((size_t)q->logit_row + (size_t)j) * nv;
        int32_t t;
        if (!greedy_under(s, m, task, row, &t)) { /* the mask decides, on a copy of the row */
            memcpy(scratch, row, nv * sizeof(float));
            mask_row(s, q, m, task, scratch);
            t = smp_argmax(scratch, s->n_vocab);
        }
        st->tok[j] = t;
        if (q->gram_err || j == st->n_draft || t != q->hist[q->n_hist + j] ||
            tok_is_eog(s->vocab, t))
            break;
        const uint8_t *b;
        const int len = gram_vocab_token(s->gv, t, &b);
        if (len <= 0 || gram_match_accept(m, s->gx[task], b, (size_t)len) ||
            gram_match_done(m))
            break; /* (a draft the grammar took; done: only the end may follow) */
    }
    st->n_emit = j + 1;
}

#define SCHED_GRAM_FORCED 128 /* forced bytes looked at for one step's drafts */

int sched_gram_draft(struct sched *s, struct seq *q, int k) {
    if (!s->gv || !q->gm) return 0;
    uint8_t fb[SCHED_GRAM_FORCED];
    int32_t *d = q->hist + q->n_hist;
    const int n = gram_match_forced(q->gm, s->gx[0], fb, (int)sizeof(fb));
    int nd = 0;
    for (int at = 0; nd < k && at < n;) {
        int32_t id;
        int ext = 0;
        const int len = gram_vocab_longest(s->gv, fb + at, n - at, &id, &ext);
        /* A token ending where the grammar branches, when a longer token starts with its bytes:
         * the model may well take the longer one (`"` then `:` is often `":`), so stop. */
        if (len <= 0 || (at + len == n && n < (int)sizeof(fb) && ext)) break;
        d[nd++] = id;
        at += len;
    }
    return nd;
}

/* Dormant lazy grammar: append the token's bytes and start the matcher at the trigger. */
static int watch_trigger(struct sched *s, struct seq *q, const uint8_t *b, int len,
                         const char **msg) {
    const int tl = (int)strlen(q->trig);
    if (q->trig_n + len > q->trig_cap) { /* keep what could still start the trigger */
        int keep = tl - 1 < q->trig_n ? tl - 1 : q->trig_n;
        memmove(q->trig_buf, q->trig_buf + q->trig_n - keep, (size_t)keep);
        q->trig_n = keep;
    }
    if (len > q->trig_cap - q->trig_n) len = q->trig_cap - q->trig_n;
    memcpy(q->trig_buf + q->trig_n, b, (size_t)len);
    q->trig_n += len;
    const char *hit = memmem(q->trig_buf, (size_t)q->trig_n, q->trig, (size_t)tl);
    if (!hit) return 0;
    const int at = (int)(hit - q->trig_buf);
    int rc = gram_match_create(q->gram, s->gx[0], &q->gm);
    if (rc) {
        *msg = rc == GRAM_EBUDGET ? "the grammar exceeds its state budget" : "out of memory";
        return -1;
    }
    rc = gram_match_accept(q->gm, s->gx[0], (const uint8_t *)q->trig_buf + at,
                           (size_t)(q->trig_n - at));
    if (rc) { /* the text after the trigger does not fit: not a call, stay free */
        gram_match_destroy(q->gm);
        q->gm = NULL;
        q->trig_n -= at + 1;
        memmove(q->trig_buf, q->trig_buf + at + 1, (size_t)q->trig_n);
        return 0;
    }
    q->trig_n = 0;
    return gram_match_done(q->gm) ? 2 : 0;
}

int sched_gram_accept(struct sched *s, struct seq *q, int32_t tok, const char **msg) {
    if (!q->gram) return 0;
    const uint8_t *b;
    const int len = gram_vocab_token(s->gv, tok, &b);
    if (!q->gm) return len > 0 ? watch_trigger(s, q, b, len, msg) : 0;
    if (tok_is_eog(s->vocab, tok)) {
        if (gram_match_can_end(q->gm)) return 0;
        *msg = "end of generation where the grammar cannot end";
        return -1;
    }
    if (len == 0 || gram_match_accept(q->gm, s->gx[0], b, (size_t)len)) {
        *msg = "a sampled token does not fit the grammar";
        return -1;
    }
    return gram_match_done(q->gm) ? 2 : 0;
}

void sched_gram_seq_free(struct seq *q) {
    gram_match_destroy(q->gm);
    gram_match_destroy(q->gm_spec);
    gram_unref(q->gram);
    free(q->trig);
    free(q->trig_buf);
}

void sched_gram_destroy(struct sched *s) {
    if (s->gx)
        for (int i = 0; i < s->n_smp; i++) gram_scratch_destroy(s->gx[i]);
    free(s->gx);
    free(s->gmask);
    gram_vocab_destroy(s->gv);
}
