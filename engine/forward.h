/*
 * forward — one forward pass of the model over a batch of sequences.
 *
 * Each sequence contributes a span of new tokens (a prefill chunk or one decode token) at
 * its own positions, with its own KV block tables. The pass embeds all rows of the step,
 * runs every layer over the whole batch at once (each weight matrix is read once per step
 * and used for all rows), writes the new keys/values into the sequences' blocks, attends
 * per sequence, and returns logits only for the rows the caller asks for.
 *
 * Batch invariance: a row's results do not depend on which other rows share the step nor on
 * how a prompt is cut into chunks (kernels use a fixed per-row reduction order).
 *
 * All scratch memory is allocated by fwd_create for max_tokens rows per step (the attention
 * scores per compute thread for max_ctx positions); fwd_run never allocates. The step runs
 * on a backend (engine/backend.h): the CPU (engine/cpu_fwd.c, which repacks weights into
 * panels and may stop reading the model's file mapping, engine/cpu_weights.c) or CUDA
 * (engine/cuda/, CUDA=1 builds). The model itself is never modified.
 *
 * Threads: a fwd_ctx belongs to one thread (the engine/scheduler thread); it fans work out
 * over its compute pool. The model and kvstore_pool must outlive it.
 */
#ifndef GEMMAD_FORWARD_H
#define GEMMAD_FORWARD_H

#include <stddef.h>
#include <stdint.h>

#include "engine/kvstore.h"
#include "engine/model.h"

struct pool;
struct fwd_ctx;

enum fwd_logits { FWD_LOGITS_NONE = 0, FWD_LOGITS_LAST = 1, FWD_LOGITS_ALL = 2 };

struct fwd_seq {
    const int32_t *tokens;      /* [n_tokens] ids, each < n_vocab */
    int n_tokens;               /* >= 1 */
    int pos;                    /* position of tokens[0]; earlier positions are in the KV */
    const struct kvstore_seq *kv;   /* this sequence's block tables */
    enum fwd_logits logits;     /* which rows to return */
};

enum fwd_status {
    FWD_OK = 0, FWD_EINVAL = -1, FWD_EKV = -2, FWD_ENOMEM = -5, FWD_EBACKEND = -6
};
const char *fwd_strerror(int status);

enum fwd_device { FWD_DEVICE_CPU = 0, FWD_DEVICE_CUDA = 1, FWD_DEVICE_AUTO = 2 };

struct fwd_opts {
    int max_tokens;             /* most rows (tokens) in one step */
    int max_seqs;               /* most sequences in one step */
    int max_logit_rows;         /* most logit rows one step returns */
    int n_threads;              /* compute threads (0 = physical cores) */
    enum fwd_device device;     /* CPU, CUDA, or AUTO */
    int deterministic;          /* 1: no shape-dependent kernel choice (CUDA: no cuBLAS);
                                 * the CPU path is batch-invariant either way */
    int max_ctx;                /* most positions one sequence reaches (0: as many as the
                                 * pool's full layers hold); sizes the attention scratch */
};

int fwd_create(const struct model *m, struct kvstore_pool *kv, const struct fwd_opts *opts,
               struct fwd_ctx **out, char *err, size_t errlen);
void fwd_destroy(struct fwd_ctx *c);
enum fwd_device fwd_device(const struct fwd_ctx *c); /* what actually runs */
/* 1 when a row's results never depend on what else is in its step: CUDA only with
 * deterministic; the CPU unless F32/F16/BF16 weights take the BLAS path (not deterministic,
 * built with OpenBLAS). Speculative decoding is exact only then. */
int fwd_batch_invariant(const struct fwd_ctx *c);
/* 1 when a backend for dev can run here (AUTO: always); why gets the reason either way. */
int fwd_device_available(enum fwd_device dev, char *why, size_t whylen);

/* Run one step. logits receives the requested rows in order of seqs (FWD_LOGITS_LAST: one
 * row; ALL: n_tokens rows), each n_vocab floats. Returns FWD_OK or an error (nothing
 * written to the KV on EINVAL/EKV). */
int fwd_run(struct fwd_ctx *c, const struct fwd_seq *seqs, int n_seqs, float *logits);
/* fwd_run that also writes every row's final normalised hidden state (what the LM head
 * reads; the embeddings route pools it) into hidden [rows of the step][n_embd], rows in
 * the order of seqs. hidden NULL: fwd_run. The CPU backend only (FWD_EINVAL elsewhere). */
int fwd_run_hidden(struct fwd_ctx *c, const struct fwd_seq *seqs, int n_seqs, float *logits,
                   float *hidden);

/* fwd_run that may hand logit rows back as their greedy choice only. greedy: one flag (0 or
 * 1; fwd_run_rows's FWD_ROW_FULL / FWD_ROW_GREEDY) per logit row the step returns (in logits' order); for a row flagged 1 the backend may write
 * ids[r] = the first index of the row's largest logit (NaNs never win; 0 when nothing beats
 * -inf: scheduler/sample.c smp_argmax's rule) and leave logits row r unwritten (the CUDA
 * backend computes it on the device and copies one id back instead of the row). Every other
 * row, and every row of a backend that does not reduce (the CPU), gets ids[r] = -1 and its
 * logits as from fwd_run. greedy NULL: fwd_run (ids not touched). */
int fwd_run_greedy(struct fwd_ctx *c, const struct fwd_seq *seqs, int n_seqs, float *logits,
                   const uint8_t *greedy, int32_t *ids);

/* fwd_run with a choice per logit row of what comes back (fwd_run_greedy generalised).
 * kind[r] (enum fwd_row) for each logit row the step returns, in logits' order:
 *  FWD_ROW_FULL   logits row r; ids[r] = -1.
 *  FWD_ROW_GREEDY as fwd_run_greedy's flag: ids[r] = the argmax and row r maybe unwritten,
 *                 or ids[r] = -1 and the row.
 *  FWD_ROW_TOPK   topk_id/topk_val[r * FWD_TOPK_MAX + j], j < FWD_TOPK_MAX: the row's
 *                 FWD_TOPK_MAX best ids by logit × scale[r] (one float multiply, round to
 *                 nearest: the value written), best first, ties to the lower id; NaNs never
 *                 chosen: a row with fewer non-NaN ids pads with id -1, value NaN. Every
 *                 backend writes them (the CUDA one on the device, copying 512 bytes instead
 *                 of the row; the others from the row on the host); ids[r] = -1; logits row
 *                 r maybe unwritten.
 * scale: read for TOPK rows only (NULL when there are none); topk_id/topk_val: NULL when no
 * row is TOPK. kind NULL: fwd_run. FWD_TOPK_MAX = 64: the top_k of common requests (40, 50,
 * 64) fits, and the device selection and the copy grow with it. */
#define FWD_TOPK_MAX 64
enum fwd_row { FWD_ROW_FULL = 0, FWD_ROW_GREEDY = 1, FWD_ROW_TOPK = 2 };
int fwd_run_rows(struct fwd_ctx *c, const struct fwd_seq *seqs, int n_seqs, float *logits,
                 const uint8_t *kind, const float *scale, int32_t *ids, int32_t *topk_id,
                 float *topk_val);

/* The compute threads of the context (including the calling one), and a way to run other
 * work on them between steps (the scheduler samples its sequences there): fn(arg, task,
 * n_tasks) runs once for every task in [0, n_tasks), each task on one thread, and the call
 * returns when all are done. Only from the thread that owns the context, never during
 * fwd_run. */
int fwd_threads(const struct fwd_ctx *c);
void fwd_parallel(struct fwd_ctx *c, void (*fn)(void *arg, int task, int n_tasks), void *arg,
                  int n_tasks);

/* Optional per-layer hook for debugging parity: called after each layer (layer index) and
 * once after the final norm (layer == n_layer) with the hidden rows [n_rows][n_embd]. */
typedef void (*fwd_tap_fn)(void *user, int layer, const float *x, int n_rows, int n_embd);
void fwd_set_tap(struct fwd_ctx *c, fwd_tap_fn fn, void *user);

/* Where the last fwd_run spent its time, in milliseconds. CUDA backend: measured with
 * device events, copies to the device, kernels, copies back; the rest of the step's wall
 * time is host work and launch overhead; graph: 1 when the step's kernels ran as a replayed
 * CUDA graph. CPU backend: gpu_ms is the step's wall time (no copies, graph 0). With
 * fwd_set_profile(c, 1) that time is also split by class (profiled = 1): layer matmuls, KV
 * store + attention, norms + residual adds, other (embedding, RoPE, activations), and the
 * head (final norm, LM head, softcap). On CUDA profiling records an event after every
 * operation and turns graphs off, so it measures the kernels, not the best step time; on the
 * CPU it reads the clock at each boundary between operations (about 100 reads a step).
 * Returns 0, or -1 when the backend running does not time its steps. fwd_set_profile
 * returns 0, or -1 when the backend cannot profile. */
struct fwd_step_times {
    double h2d_ms, gpu_ms, d2h_ms;
    double matmul_ms, attn_ms, norm_ms, other_ms, head_ms;
    int profiled, graph;
};
int fwd_last_step_times(const struct fwd_ctx *c, struct fwd_step_times *out);
int fwd_set_profile(struct fwd_ctx *c, int on);

/* Test hook: when n > 0, the n-th failable step (allocation, thread start, ...) of each
 * later fwd_create fails as if out of memory; each fwd_create counts from 1 again.
 * 0 (the default): off. Tests only; not thread-safe. */
void fwd_set_fail_at(int n);

#endif
