/*
 * api_embeddings — POST /v1/embeddings: the request (input as a string, a list of strings,
 * token ids or lists of them; encoding_format float or base64; dimensions only when it is
 * the model's own; gemmad's "pooling": "mean" or "last") and the reply.
 *
 * An embedding is the model's final normalised hidden state (the output_norm rows that the
 * logits are computed from) pooled over the input's positions: the mean of all rows by
 * default (llama.cpp's LLAMA_POOLING_TYPE_MEAN; with a causal model every row has seen only
 * its prefix, and the mean weighs the whole text), or the last row (the only one that saw
 * the whole input), then L2-normalised. Text inputs are tokenized with BOS and without
 * special-token parsing, as llama.cpp's embed does.
 *
 * Pure functions, any thread; the request owns its token arrays.
 */
#ifndef GEMMAD_API_EMBEDDINGS_H
#define GEMMAD_API_EMBEDDINGS_H

#include <jansson.h>
#include <stdint.h>

#include "server/api_common.h"

struct tok_vocab;

enum emb_pooling { EMB_POOL_MEAN = 0, EMB_POOL_LAST = 1 };

#define EMB_MAX_INPUTS 2048

struct emb_req {
    int n;         /* inputs */
    int32_t **ids; /* [n][len[i]] token ids (owned) */
    int *len;
    int total;  /* sum of len */
    int base64; /* encoding_format "base64" */
    enum emb_pooling pooling;
};

/* Returns 0, or -1 with e filled (param names the field; an input longer than n_ctx is
 * 400 context_length_exceeded). */
int emb_parse(json_t *req, const struct tok_vocab *v, int n_ctx, int n_embd, enum emb_pooling dflt,
              struct emb_req *out, struct oai_error *e);
void emb_req_free(struct emb_req *r);

/* Pools rows [n_rows][n_embd] into out[n_embd] and L2-normalises it (a zero vector stays
 * zero). */
void emb_pool(const float *rows, int n_rows, int n_embd, enum emb_pooling p, float *out);

/* The reply {"object":"list","data":[…],"model","usage"} for vecs [r->n][n_embd]. */
json_t *emb_reply(const struct emb_req *r, const float *vecs, int n_embd, const char *model);

/* "mean" / "last" -> pooling; -1 for anything else. */
int emb_pooling_parse(const char *s);

#endif
