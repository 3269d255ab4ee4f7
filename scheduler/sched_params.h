/*
 * sched_params — the per-request sampling parameters and the logprob alternative, shared by
 * the scheduler's public API (sched.h) and the sampler (sample.h) so that neither header has
 * to include the other. Plain data: any thread.
 */
#ifndef GEMMAD_SCHED_PARAMS_H
#define GEMMAD_SCHED_PARAMS_H

#include <stdint.h>

/* Sampling parameters, validated by the caller (the server names bad parameters). */
struct sched_bias { int32_t token; float bias; };
struct sched_sampling {
    float temperature;        /* 0 = greedy */
    int top_k;                /* 0 = off */
    float top_p;              /* 1 = off */
    float min_p;              /* 0 = off */
    float presence_penalty, frequency_penalty; /* OpenAI semantics, 0 = off */
    float repetition_penalty; /* llama.cpp semantics, 1 = off */
    uint64_t seed;            /* per-request RNG seed */
    int has_seed;             /* 0: seed drawn from the clock */
    const struct sched_bias *logit_bias; /* [n_logit_bias], copied */
    int n_logit_bias;
};

/* One alternative token of a logprobs report. */
struct sched_top { int32_t token; float logprob; };

#endif
