/*
 * spec — speculative decoding without a second model (prompt lookup). A decoding sequence
 * guesses its next tokens from its own history (prompt + output): it finds an earlier
 * occurrence of its last tokens and proposes what followed it: where the text it is copying
 * goes on, if that still matches, else the latest occurrence of its last
 * SPEC_NGRAM_MIN..SPEC_NGRAM_MAX tokens (the longest match wins; spec_lookup). The scheduler
 * feeds the guesses ("drafts") as extra rows of the sequence in the same step as everyone
 * else's rows, asks for the logits of all of them, and spec_verify checks them.
 *
 * Exactness. Verification samples each position in order with the request's own sampler and
 * RNG exactly as non-speculative decoding would (the history passed to the sampler holds the
 * drafts accepted so far, which equal the tokens sampled), and accepts a draft while the
 * sampled token equals it; the first sampled token that differs (or the one after the last
 * draft) is kept as well. Because the CPU kernels are batch-invariant, every row's logits are
 * bit for bit those a plain decode step would compute, so greedy output and seeded sampled
 * output are identical token for token with and without speculation, and the RNG draws the
 * same numbers. For a draft that is a single proposed token (a point mass), this is the
 * standard rejection rule: the draft is accepted with probability p(d), and on rejection the
 * token kept is distributed as p without d, renormalised; so the output distribution of an
 * unseeded request is unchanged too.
 *
 * Rollback is bookkeeping only: rejected rows wrote keys and values past the accepted point,
 * and the sequence's KV position count (n_kv) simply stays below them, so they are never read
 * (attention is causal) and are overwritten by the next step. The sliding-window ring holds
 * the window plus a whole step, and a draft span is far shorter than a step, so a draft
 * written ahead never evicts a block a later query needs (tests/unit/test_spec.c).
 *
 * Adaptivity. Extra rows are not free: with a large vocabulary the LM head's cost grows with
 * the rows of a step (Gemma 3 270M on 2 cores: about 1.8x for 9 rows), so drafts pay only when
 * enough of them are accepted. The scheduler measures its step time per number of rows
 * (struct spec_cost, steps without prefill chunks; a line fitted through them), each sequence
 * keeps a decaying estimate of the probability that a draft token is accepted (prior 0.6),
 * and spec_choose picks the draft length
 * that maximises the step's expected tokens per second (accepted drafts are taken to be a
 * geometric run), or none when no length beats plain decoding by SPEC_MARGIN. Besides, a
 * verification that accepts nothing halves the sequence's length limit and pauses lookups
 * for 0, 1, 2, ... steps (one more per consecutive miss) up to SPEC_MAX_COOLDOWN (doubling
 * pauses, as before 2026-12-06, skipped lookups that would have been accepted on code
 * being rewritten: tools/spec_bound.py, 1.73x -> 1.92x modelled); one that accepts
 * everything doubles it (up to SPEC_MAX_DRAFT); a sequence the cost model keeps from
 * drafting probes with one draft every SPEC_MAX_COOLDOWN steps, so its estimate can recover. A sequence with no match drafts
 * nothing and costs only the lookup (one pass over its history).
 *
 * Not drafted: prompt-logprob scoring, embeddings, requests that opted out, and constrained
 * requests other than greedy ones with a grammar active from the start (sampled rows would
 * need a masked rejection rule): the scheduler decides in sched_submit. A greedy constrained
 * sequence first drafts the bytes its grammar forces (sched_gram_draft; their acceptance has
 * its own estimate, spec_alpha_forced), and is verified under its grammar
 * (sched_gram_spec_verify). The
 * scheduler's side (planning a step's drafts, reporting the accepted tokens) is
 * scheduler/sched_spec.c.
 *
 * Threads: everything runs on the scheduler thread, except spec_verify, which runs on a
 * compute thread for one sequence (distinct sequences at once, each with its own state).
 */
#ifndef GEMMAD_SPEC_H
#define GEMMAD_SPEC_H

#include <stdint.h>

#include "scheduler/sample.h"
#include "scheduler/sched_params.h"

/* sched_opts.speculative: off, adaptive (the cost model decides), or always (every draft
 * the lookup finds, up to the length limit: tests, and hosts where extra rows cost little). */
enum spec_mode { SPEC_MODE_OFF = 0, SPEC_MODE_ADAPTIVE = 1, SPEC_MODE_ALWAYS = 2 };

#define SPEC_MAX_DRAFT 8       /* drafts per sequence and step */
#define SPEC_START_DRAFT 4     /* initial draft length limit */
#define SPEC_NGRAM_MIN 2       /* shortest suffix match that proposes anything */
#define SPEC_NGRAM_MAX 4       /* longer matches are not looked for */
#define SPEC_MAX_COOLDOWN 32   /* most steps without lookups after repeated misses */
#define SPEC_MAX_TOP 20        /* logprob alternatives kept per verified position */
#define SPEC_COST_ROWS 64      /* step times are tracked for 1..64 rows */
#define SPEC_MARGIN 0.03       /* a draft must promise this much more throughput */
#define SPEC_PRIOR_ROW 0.10    /* unmeasured extra row: this fraction of a 1-row step */

/* One sequence's drafting state (lives in the scheduler's struct seq). */
struct spec_state {
    int on;                    /* 1: this sequence may draft */
    int limit;                 /* current draft length limit, 1..SPEC_MAX_DRAFT */
    int misses;                /* consecutive verifications that accepted nothing */
    int cooldown;              /* steps left before the next lookup */
    int align;                 /* spec_lookup's copy alignment (0: none yet) */
    int idle;                  /* steps the cost model kept it from drafting (probe at
                                * SPEC_MAX_COOLDOWN) */
    double tested, accepted;   /* decaying counts of draft tokens verified / accepted */
    double ftested, faccepted; /* the same for drafts a grammar forced (sched_gram_draft) */
    /* per step */
    int n_draft;               /* drafts fed after the decode row (0: a plain decode row) */
    int n_forced;              /* 1: they are bytes a grammar forced, not a lookup's */
    int n_emit;                /* tokens spec_verify sampled: accepted drafts + 1 */
    int32_t tok[SPEC_MAX_DRAFT + 1];                       /* the tokens sampled */
    float logprob[SPEC_MAX_DRAFT + 1];                     /* their logprobs (if asked) */
    struct sched_top top[SPEC_MAX_DRAFT + 1][SPEC_MAX_TOP]; /* their alternatives */
};

void spec_init(struct spec_state *st, int on);

/* Prompt lookup over hist[0..n): up to max_draft tokens that followed an earlier occurrence
 * of the history's last tokens, continued periodically when the occurrence is so recent
 * that the history runs out. Writes them to draft and returns how many (0: no match).
 * Which occurrence: with *align > 0 (align may be NULL), the copy in progress goes on: the
 * nearest occurrence at or after x - 1, x = n - 1 - *align (where the last token would sit
 * in the copied text had the copy continued; one matching token at x - 1 or x, else
 * SPEC_NGRAM_MIN); otherwise, or with none there, the latest occurrence of the longest suffix
 * of SPEC_NGRAM_MIN..SPEC_NGRAM_MAX tokens. On a match *align becomes n - 1 - (its position):
 * the distance stays the same while the output keeps copying, token for token. */
int spec_lookup(const int32_t *hist, int n, int max_draft, int32_t *draft, int *align);

/* How many drafts the sequence may propose this step given `room` (what the step and the
 * request's max_tokens leave): 0 when off or cooling down (a cooling step counts down). */
int spec_budget(struct spec_state *st, int room);

/* Adapt after a verification of `drafted` drafts of which `accepted` were accepted. */
void spec_feedback(struct spec_state *st, int drafted, int accepted);

/* The acceptance probability estimate of one draft token (a prior of 0.6 worth 2 tokens). */
double spec_alpha(const struct spec_state *st);
/* The same for drafts a grammar forced (a prior of 0.9 worth 2 tokens), and its update:
 * forced drafts neither pause lookups nor change the length limit. */
double spec_alpha_forced(const struct spec_state *st);
void spec_feedback_forced(struct spec_state *st, int drafted, int accepted);

/* Step seconds by rows, measured (scheduler thread). */
struct spec_cost {
    double t[SPEC_COST_ROWS + 1];   /* EMA of the wall seconds of steps with n rows */
    int seen[SPEC_COST_ROWS + 1];   /* observations */
};
void spec_cost_observe(struct spec_cost *c, int rows, double seconds);
/* Estimated seconds of a step with `rows` rows from a line through the measured ones (one
 * measured size: SPEC_PRIOR_ROW per extra row); 0 when nothing at or below it is measured. */
double spec_cost_est(const struct spec_cost *c, int rows);
/* Draft length in 0..kmax for a sequence with acceptance estimate alpha joining a step of
 * `rows` rows expected to yield `tokens` tokens (the sequence's own one included). */
int spec_choose(const struct spec_cost *c, int rows, double tokens, double alpha, int kmax);

/* What spec_verify reads. hist[n_hist .. n_hist + n_draft) holds the drafts; logits holds
 * n_draft + 1 rows (the decode row, then one row per draft), which sampling modifies. */
struct spec_rows {
    float *logits;             /* [n_draft + 1][n_vocab] */
    int n_vocab;
    float *scratch;            /* [n_vocab] a row copy when top_logprobs >= 0 */
    const int32_t *hist;       /* prompt, output, then the drafts */
    int n_hist, n_out;         /* without the drafts */
    int n_draft;
    const int32_t *ban;        /* [n_ban] ids never sampled */
    int n_ban;
    const int32_t *end;        /* [n_end] ids that end the request (end of generation): */
    int n_end;                 /* verification stops at one */
    int top_logprobs;          /* -1: none */
};

/* Samples positions in order with the request's sampler state until a sampled token differs
 * from its draft, ends the request, or every row is used; fills st->tok/logprob/top and
 * st->n_emit (accepted drafts + 1) and returns n_emit. */
int spec_verify(struct spec_state *st, struct smp_ctx *c, const struct sched_sampling *sp,
                struct smp_rng *rng, const struct spec_rows *r);

#endif
