/*
 * sample — turns one row of logits into a token for one sequence.
 *
 * Order of operations (like vLLM): logit_bias, then penalties (repetition with llama.cpp's
 * rule over the prompt and the output; presence/frequency with OpenAI's rule over the
 * output), banned tokens (EOG ids under ignore_eos) set to -inf, then greedy argmax when
 * temperature is 0; otherwise temperature, top_k, top_p, min_p, and one draw from the
 * request's own RNG. Ties always break towards the lower id, and the draw walks the kept
 * tokens in a fixed order, so the same logits and the same RNG state give the same token
 * whatever else runs in the batch.
 *
 * Log-probabilities (smp_logprobs) are those of the raw model distribution: a log-softmax
 * of the logits before bias, penalties and temperature, as OpenAI and vLLM report them.
 *
 * Threads: a smp_ctx holds scratch for one thread at a time (the scheduler keeps one per
 * compute thread and samples a step's sequences on them at once); smp_rng is per request.
 * Nothing allocates after smp_ctx_create.
 */
#ifndef GEMMAD_SAMPLE_H
#define GEMMAD_SAMPLE_H

#include <stdint.h>

#include "scheduler/sched_params.h"

/* xoshiro256** state, seeded through splitmix64. */
struct smp_rng {
    uint64_t s[4];
};
void smp_rng_seed(struct smp_rng *r, uint64_t seed);
uint64_t smp_rng_next(struct smp_rng *r);
double smp_rng_uniform(struct smp_rng *r); /* [0, 1), 53 bits */

struct smp_ctx;
int smp_ctx_create(int n_vocab, struct smp_ctx **out); /* 0 or -1 (no memory) */
void smp_ctx_destroy(struct smp_ctx *c);

/* Pick a token. logits [n_vocab] are modified in place. hist[0..n_hist) is the prompt
 * followed by the output; its last n_out entries are the output. ban[0..n_ban) ids are
 * never chosen. Draws exactly one number from rng when temperature > 0, none otherwise. */
/* e^x for x <= 0 (0 below -87 and for -inf), within 2 ulp of expf; vectorisable. */
float smp_exp_le0(float x);

/* First index of the largest logit (greedy choice); NaNs never win, 0 if nothing beats -inf. */
int32_t smp_argmax(const float *logits, int n);

int32_t smp_sample(struct smp_ctx *c, const struct sched_sampling *sp, struct smp_rng *rng,
                   float *logits, const int32_t *hist, int n_hist, int n_out,
                   const int32_t *ban, int n_ban);

/* Sampling from the top candidates of a row instead of the whole row (the CUDA backend
 * selects them on the device, engine/forward.h fwd_run_rows). SMP_TOPK_MAX: the most
 * candidates smp_sample_topk reads. smp_topk_ok: 1 when sp's token depends only on the row's
 * top_k best ids (temperature > 0, 1 <= top_k <= min(n_cand, SMP_TOPK_MAX), top_k < n_vocab,
 * no logit_bias, no penalties); bans, grammar masks and logprobs also read other ids, and
 * are the caller's to rule out. smp_inv_temp: the factor smp_sample scales logits by.
 *
 * smp_sample_topk: id/val [n_cand] are the row's n_cand best ids and their logits times
 * smp_inv_temp(sp) (one float multiply), best first, ties to the lower id (NaNs never chosen;
 * id -1 pads a row with fewer non-NaN ids). For a row without NaNs it returns exactly
 * smp_sample's token for the same row (no hist, no bans) and draws the same one number from
 * rng; -1 (no draw) when !smp_topk_ok(sp, n_vocab, n_cand). smp_sample's choice is not
 * well defined with NaNs in the row and top_k set; this path never picks a NaN id. */
#define SMP_TOPK_MAX 64
int smp_topk_ok(const struct sched_sampling *sp, int n_vocab, int n_cand);
float smp_inv_temp(const struct sched_sampling *sp);
int32_t smp_sample_topk(struct smp_ctx *c, const struct sched_sampling *sp, struct smp_rng *rng,
                        const int32_t *id, const float *val, int n_cand);

/* Log-probability of `token` under softmax(logits) and the n_top most likely ids (most
 * likely first, ties to the lower id). n_top <= 20. */
float smp_logprobs(const float *logits, int n_vocab, int32_t token, int n_top,
                   struct sched_top *top);

#endif
