/*
 * cuda_bench — throughput of the forward pass through the public fwd API, on the CPU or the
 * CUDA backend, for deploy/gpu-check.sh (driver: tools/cuda-bench/main.c).
 *
 * Measures, on one fwd_ctx, after a warm-up: prefill of one prompt in a single step; greedy
 * decode of one sequence; and decode of n_seqs sequences advancing together, one token each
 * per step. Each is repeated and reported as the median over repeats (and the best rate),
 * with the median per-step split: device kernel time and copies (CUDA events, through
 * fwd_last_step_times) and the rest (host work, launches, synchronisation), and the share
 * of steps that replayed a CUDA graph (<m>_graph_share). When the backend can profile
 * (fwd_set_profile), one more pass of each measurement records an event after every
 * operation and reports per step the kernel time by class (<m>_prof_ms: matmul, attention,
 * norm, other, head; slower than the timed runs since it launches kernel by kernel).
 * fwd_run returns only when the logits are on the host, so wall-clock times are honest.
 * Decode steps ask for greedy ids (fwd_run_greedy, as the scheduler does for greedy
 * requests: the CUDA backend copies back one id per row, not the row) unless full_logits.
 * Built by `make CUDA=1` as build/.../cuda-bench, outside libgemmad; it allocates freely.
 */
#ifndef GEMMAD_CUDA_BENCH_H
#define GEMMAD_CUDA_BENCH_H

#include <stddef.h>

#include "engine/forward.h"

struct cuda_bench_opts {
    const char *model;      /* GGUF path */
    enum fwd_device device; /* CPU, CUDA or AUTO */
    int prompt_tokens;      /* prefill length of the single-sequence run */
    int gen_tokens;         /* decode steps of each decode run */
    int n_seqs;             /* sequences of the batched decode run */
    int seq_prompt_tokens;  /* prompt of each batched sequence (prefilled, not timed) */
    int threads;            /* CPU threads (0 = physical cores) */
    int deterministic;      /* fwd_opts.deterministic */
    int repeats;            /* timed repeats of each measurement (medians reported) */
    int full_logits;        /* 1: decode copies every logit row back (fwd_run) */
};

/* Runs the three measurements and writes one JSON object into json. 0, or -1 with err. */
int cuda_bench_run(const struct cuda_bench_opts *o, char *json, size_t jsonlen, char *err,
                 size_t errlen);

#endif
