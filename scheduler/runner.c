/*
 * runner — sequences on the engine with kvcache.h block tables and no scheduling (runner.h).
 */
#include "scheduler/runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/kvcache.h"

struct runner {
    const struct model *m;
    struct runner_opts o;
    struct kvstore_pool *pool;
    struct kvcache *kv;
    struct fwd_ctx *fwd;
    struct kvcache_seq *seq;       /* [max_seqs] block tables */
    struct kvstore_seq *view;     /* [max_seqs] what fwd_run reads of them */
    struct fwd_seq *rows;     /* [max_seqs] one step */
    int *n_past;              /* [max_seqs] positions in each sequence's KV */
};

static int ceil_div(int a, int b) { return (a + b - 1) / b; }

int runner_create(const struct model *m, const struct runner_opts *o, struct runner **out,
                  char *err, size_t errlen) {
    *out = NULL;
    if (o->max_seqs < 1 || o->max_ctx < 1 || o->batch < 1 || o->block_size < 1 ||
        o->max_logit_rows < 0) {
        if (err) snprintf(err, errlen, "runner: invalid options");
        return FWD_EINVAL;
    }
    int rc = FWD_ENOMEM;
    struct runner *r = calloc(1, sizeof *r);
    if (!r) goto fail_mem;
    r->m = m;
    r->o = *o;
    const int ns = o->max_seqs, bs = o->block_size;
    const int nb_full = ceil_div(o->max_ctx, bs);
    const int ring = kvstore_swa_ring_blocks(m, bs, o->batch);
    if (kvstore_create(m, o->kv_dtype, bs, nb_full * ns, ring * ns, &r->pool, err, errlen) != 0)
        goto fail;
    struct kvcache_opts ko = {.n_full = nb_full * ns, .n_swa = ring * ns, .block_size = bs,
                         .window = m->cfg.sliding_window, .ring = ring,
                         .max_seq_blocks = nb_full};
    if (kvcache_create(&ko, &r->kv) != KVCACHE_OK) {
        if (err) snprintf(err, errlen, "cannot allocate the KV block tables");
        goto fail;
    }
    r->seq = calloc((size_t)ns, sizeof *r->seq);
    r->view = calloc((size_t)ns, sizeof *r->view);
    r->rows = calloc((size_t)ns, sizeof *r->rows);
    r->n_past = calloc((size_t)ns, sizeof *r->n_past);
    if (!r->seq || !r->view || !r->rows || !r->n_past) goto fail_mem;
    for (int s = 0; s < ns; s++) {
        /* The pool holds every ring in full, so filling cannot fail for want of blocks. */
        if (kvcache_seq_init(r->kv, &r->seq[s]) != KVCACHE_OK ||
            kvcache_seq_fill_ring(r->kv, &r->seq[s]) != KVCACHE_OK)
            goto fail_mem;
    }
    /* max_ctx stays 0 (the pool's capacity) so the attention scratch, and with it every
     * kernel choice, is what it was when the tools sized the pool themselves. */
    struct fwd_opts fo = {.max_tokens = o->batch > ns ? o->batch : ns, .max_seqs = ns,
                          .max_logit_rows = o->max_logit_rows, .n_threads = o->n_threads,
                          .device = o->device, .deterministic = o->deterministic};
    rc = fwd_create(m, r->pool, &fo, &r->fwd, err, errlen);
    if (rc != 0) {
        if (err && !err[0]) snprintf(err, errlen, "%s", fwd_strerror(rc));
        goto fail;
    }
    *out = r;
    return RUNNER_OK;
fail_mem:
    if (err) snprintf(err, errlen, "out of memory");
fail:
    runner_destroy(r);
    return rc;
}

void runner_destroy(struct runner *r) {
    if (!r) return;
    fwd_destroy(r->fwd);
    for (int s = 0; r->seq && s < r->o.max_seqs; s++) {
        if (r->kv && r->seq[s].full) kvcache_seq_release(r->kv, &r->seq[s]);
        kvcache_seq_free(&r->seq[s]);
    }
    kvcache_destroy(r->kv);
    kvstore_destroy(r->pool);
    free(r->seq);
    free(r->view);
    free(r->rows);
    free(r->n_past);
    free(r);
}

/* Blocks for positions [n_past, n_past + n) of sequence s, and its row of the next step. */
static int prepare(struct runner *r, int s, const int32_t *ids, int n, enum fwd_logits lg,
                   struct fwd_seq *row) {
    if (r->n_past[s] + n > r->o.max_ctx) return RUNNER_ECTX;
    struct kvcache_seq *q = &r->seq[s];
    if (kvcache_seq_prepare(r->kv, q, r->n_past[s], n) != KVCACHE_OK) return FWD_EKV;
    struct kvstore_seq *v = &r->view[s];
    v->full = q->full;
    v->n_full = q->n_full;
    v->swa = q->n_swa ? q->swa : NULL;
    v->n_swa = q->n_swa;
    *row = (struct fwd_seq){ids, n, r->n_past[s], v, lg};
    return RUNNER_OK;
}

int runner_feed(struct runner *r, int seq, const int32_t *ids, int n, enum fwd_logits lg,
                float *out) {
    if (seq < 0 || seq >= r->o.max_seqs || n < 0) return FWD_EINVAL;
    if (r->n_past[seq] + n > r->o.max_ctx) return RUNNER_ECTX;
    const size_t V = (size_t)r->m->cfg.n_vocab;
    for (int done = 0; done < n;) {
        int k = n - done < r->o.batch ? n - done : r->o.batch;
        enum fwd_logits want = FWD_LOGITS_NONE;
        float *dst = NULL;
        if (lg == FWD_LOGITS_ALL) {
            want = FWD_LOGITS_ALL;
            dst = out + (size_t)done * V;
        } else if (lg == FWD_LOGITS_LAST && done + k == n) {
            want = FWD_LOGITS_LAST;
            dst = out;
        }
        struct fwd_seq row;
        int rc = prepare(r, seq, ids + done, k, want, &row);
        if (rc == RUNNER_OK) rc = fwd_run(r->fwd, &row, 1, dst);
        if (rc != 0) return rc;
        r->n_past[seq] += k;
        done += k;
    }
    return RUNNER_OK;
}

int runner_step(struct runner *r, const int32_t *token, int n_seqs, float *logits) {
    if (n_seqs < 1 || n_seqs > r->o.max_seqs) return FWD_EINVAL;
    for (int s = 0; s < n_seqs; s++) {
        int rc = prepare(r, s, &token[s], 1, FWD_LOGITS_LAST, &r->rows[s]);
        if (rc != RUNNER_OK) return rc;
    }
    int rc = fwd_run(r->fwd, r->rows, n_seqs, logits);
    if (rc != 0) return rc;
    for (int s = 0; s < n_seqs; s++) r->n_past[s]++;
    return RUNNER_OK;
}

int runner_pos(const struct runner *r, int seq) {
    return seq >= 0 && seq < r->o.max_seqs ? r->n_past[seq] : -1;
}

int runner_max_ctx(const struct runner *r) { return r->o.max_ctx; }

struct fwd_ctx *runner_fwd(struct runner *r) { return r->fwd; }
