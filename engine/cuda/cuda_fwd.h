/*
 * cuda_fwd — the CUDA backend of the forward pass (built only with `make CUDA=1`, which
 * defines GEMMAD_CUDA). engine/forward.c calls these when the fwd_ctx runs on a GPU; the
 * scheduler and server never see the difference.
 *
 * cudafwd_create uploads every weight once (kept packed in its GGUF format) and allocates
 * the KV blocks on the device with the same block ids and tables as the host kvs_pool
 * describes (the host pool then holds no data). cudafwd_run copies only token ids, positions
 * and block tables to the device and only the requested logit rows back.
 *
 * Threads: one owner thread per context, like fwd_ctx.
 */
#ifndef GEMMAD_CUDA_FWD_H
#define GEMMAD_CUDA_FWD_H

#include <stddef.h>

#include "engine/forward.h"

struct cudafwd;

/* 1 when a CUDA device is usable (driver present, at least one device). */
int cudafwd_available(char *why, size_t whylen);
int cudafwd_create(const struct model *m, const struct kvs_pool *kv, const struct fwd_opts *o,
                   struct cudafwd **out, char *err, size_t errlen);
void cudafwd_destroy(struct cudafwd *c);
/* Same contract as fwd_run. */
int cudafwd_run(struct cudafwd *c, const struct fwd_seq *seqs, int n_seqs, float *logits);

/* Added by the CUDA backend (not used by forward.c before it calls it):
 * Same as fwd_set_tap: fn gets the hidden rows after each layer and, for the selected logit
 * rows, after the output norm (layer == n_layer). Copies rows back synchronously, so it is
 * for debugging only. Allocates its host buffer here (FWD_ENOMEM if that fails). */
int cudafwd_set_tap(struct cudafwd *c, fwd_tap_fn fn, void *user);

#endif
