/*
 * api_embeddings — see api_embeddings.h.
 */
#include "server/api_embeddings.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer.h"

int emb_pooling_parse(const char *s) {
    if (!strcmp(s, "mean")) return EMB_POOL_MEAN;
    if (!strcmp(s, "last")) return EMB_POOL_LAST;
    return -1;
}

/* One input into r->ids[i] / r->len[i]. */
static int emb_one(json_t *x, size_t i, const struct tok_vocab *v, int n_ctx, struct emb_req *r,
                   struct oai_error *e) {
    int nv = tok_n_vocab(v), n = 0;
    int32_t *ids = NULL;
    if (json_is_string(x)) {
        size_t len = json_string_length(x);
        if (len == 0) return oai_fail(e, 400, "input", NULL, "input[%zu] must not be empty", i);
        if (tok_min_tokens(v, len) > (size_t)n_ctx) { /* too long by its length alone */
            oai_fail(e, 400, "input", NULL,
                     "input[%zu] is %zu bytes: at least %zu tokens; this model's maximum "
                     "context length is %d tokens",
                     i, len, tok_min_tokens(v, len), n_ctx);
            e->code = "context_length_exceeded";
            return -1;
        }
        int cap = (int)(len < (1u << 26) ? len : (1u << 26)) + 8;
        for (int attempt = 0; attempt < 2; attempt++) {
            free(ids);
            if (!(ids = malloc((size_t)cap * sizeof *ids))) break;
            n = tok_encode(v, json_string_value(x), len, 1, 0, ids, cap);
            if (n <= cap) break;
            cap = n;
        }
        if (!ids || n < 0 || n > cap) {
            free(ids);
            return oai_fail(e, 400, "input", NULL, "input[%zu] cannot be tokenized", i);
        }
    } else if (json_is_array(x)) {
        size_t m = json_array_size(x), j;
        json_t *t;
        if (m == 0) return oai_fail(e, 400, "input", NULL, "input[%zu] must not be empty", i);
        if (m > (size_t)n_ctx)
            n = (int)m; /* reported below without reading the ids */
        else if (!(ids = malloc(m * sizeof *ids)))
            return oai_fail(e, 500, NULL, NULL, "out of memory");
        else {
            json_array_foreach(x, j, t) {
                if (!json_is_integer(t) || json_integer_value(t) < 0 ||
                    json_integer_value(t) >= nv) {
                    free(ids);
                    return oai_fail(e, 400, "input", NULL, "input[%zu] holds token ids in [0, %d)",
                                    i, nv);
                }
                ids[j] = (int32_t)json_integer_value(t);
            }
            n = (int)m;
        }
    } else {
        return oai_fail(e, 400, "input", NULL,
                        "input[%zu] must be a string or an array of token ids", i);
    }
    if (n > n_ctx) {
        free(ids);
        oai_fail(e, 400, "input", NULL,
                 "input[%zu] has %d tokens; this model's maximum context "
                 "length is %d tokens",
                 i, n, n_ctx);
        e->code = "context_length_exceeded";
        return -1;
    }
    r->ids[i] = ids;
    r->len[i] = n;
    r->total += n;
    return 0;
}

static int emb_options(json_t *req, int n_embd, enum emb_pooling dflt, struct emb_req *r,
                       struct oai_error *e) {
    const char *s = NULL;
    if (api_str_field(req, "encoding_format", 16, &s, e)) return -1;
    if (s && strcmp(s, "float") && strcmp(s, "base64"))
        return oai_fail(e, 400, "encoding_format", NULL,
                        "'encoding_format' must be 'float' or 'base64'");
    r->base64 = s && !strcmp(s, "base64");
    long long d = n_embd;
    json_t *dim = api_field(req, "dimensions");
    if (dim && !json_is_integer(dim))
        return oai_fail(e, 400, "dimensions", NULL, "'dimensions' must be an integer");
    if (api_int_field(req, "dimensions", 1, 1 << 20, &d, e)) return -1;
    if (d != n_embd)
        return oai_fail(e, 400, "dimensions", NULL,
                        "this model's embeddings have %d dimensions; "
                        "other sizes are not supported",
                        n_embd);
    s = NULL;
    r->pooling = dflt;
    if (api_str_field(req, "pooling", 16, &s, e)) return -1;
    if (s) {
        int p = emb_pooling_parse(s);
        if (p < 0) return oai_fail(e, 400, "pooling", NULL, "'pooling' must be 'mean' or 'last'");
        r->pooling = (enum emb_pooling)p;
    }
    json_t *model = api_field(req, "model");
    if (model && !json_is_string(model))
        return oai_fail(e, 400, "model", NULL, "'model' must be a string");
    json_t *user = api_field(req, "user");
    if (user && !json_is_string(user))
        return oai_fail(e, 400, "user", NULL, "'user' must be a string");
    return 0;
}

int emb_parse(json_t *req, const struct tok_vocab *v, int n_ctx, int n_embd, enum emb_pooling dflt,
              struct emb_req *r, struct oai_error *e) {
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    if (!json_is_object(req))
        return oai_fail(e, 400, NULL, NULL, "the request body must be a JSON object");
    if (emb_options(req, n_embd, dflt, r, e)) return -1;
    json_t *in = api_field(req, "input");
    if (!in) return oai_fail(e, 400, "input", NULL, "'input' is required");
    /* One input: a string or a flat array of ids. Several: an array of those. */
    int single = json_is_string(in) || (json_is_array(in) && json_array_size(in) > 0 &&
                                        json_is_integer(json_array_get(in, 0)));
    if (!single && (!json_is_array(in) || json_array_size(in) == 0))
        return oai_fail(e, 400, "input", NULL,
                        "'input' must be a non-empty string, array of strings, "
                        "array of token ids or array of such arrays");
    size_t n = single ? 1 : json_array_size(in);
    if (n > EMB_MAX_INPUTS)
        return oai_fail(e, 400, "input", NULL, "at most %d inputs per request", EMB_MAX_INPUTS);
    r->ids = calloc(n, sizeof *r->ids);
    r->len = calloc(n, sizeof *r->len);
    if (!r->ids || !r->len) {
        emb_req_free(r);
        return oai_fail(e, 500, NULL, NULL, "out of memory");
    }
    r->n = (int)n;
    for (size_t i = 0; i < n; i++) {
        json_t *x = single ? in : json_array_get(in, i);
        if (!single && json_is_integer(x)) {
            emb_req_free(r);
            return oai_fail(e, 400, "input", NULL, "input[%zu] must be a string or an array of ids",
                            i);
        }
        if (emb_one(x, i, v, n_ctx, r, e)) {
            emb_req_free(r);
            return -1;
        }
    }
    return 0;
}

void emb_req_free(struct emb_req *r) {
    for (int i = 0; r->ids && i < r->n; i++)
        free(r->ids[i]);
    free(r->ids);
    free(r->len);
    memset(r, 0, sizeof *r);
}

void emb_pool(const float *rows, int n_rows, int n_embd, enum emb_pooling p, float *out) {
    int first = p == EMB_POOL_LAST ? n_rows - 1 : 0;
    for (int k = 0; k < n_embd; k++) {
        double acc = 0; /* double: a long input's mean does not lose its small rows */
        for (int i = first; i < n_rows; i++)
            acc += rows[(size_t)i * (size_t)n_embd + (size_t)k];
        out[k] = (float)(acc / (n_rows - first));
    }
    double ss = 0;
    for (int k = 0; k < n_embd; k++)
        ss += (double)out[k] * out[k];
    if (ss > 0) {
        float inv = (float)(1.0 / sqrt(ss));
        for (int k = 0; k < n_embd; k++)
            out[k] *= inv;
    }
}

static json_t *emb_base64(const float *v, int n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t nb = (size_t)n * 4, no = (nb + 2) / 3 * 4;
    unsigned char *in = malloc(nb);
    char *out = malloc(no + 1);
    json_t *s = NULL;
    if (in && out) {
        for (int i = 0; i < n; i++) { /* little-endian float32, as OpenAI's clients read it */
            uint32_t u;
            memcpy(&u, &v[i], 4);
            for (int b = 0; b < 4; b++)
                in[4 * i + b] = (unsigned char)(u >> (8 * b));
        }
        size_t o = 0;
        for (size_t i = 0; i < nb; i += 3) {
            uint32_t w = (uint32_t)in[i] << 16 | (i + 1 < nb ? (uint32_t)in[i + 1] << 8 : 0) |
                         (i + 2 < nb ? in[i + 2] : 0);
            out[o++] = tab[w >> 18 & 63];
            out[o++] = tab[w >> 12 & 63];
            out[o++] = i + 1 < nb ? tab[w >> 6 & 63] : '=';
            out[o++] = i + 2 < nb ? tab[w & 63] : '=';
        }
        s = json_stringn_nocheck(out, o);
    }
    free(in);
    free(out);
    return s;
}

json_t *emb_reply(const struct emb_req *r, const float *vecs, int n_embd, const char *model) {
    json_t *data = json_array();
    for (int i = 0; i < r->n; i++) {
        const float *v = vecs + (size_t)i * (size_t)n_embd;
        json_t *emb;
        if (r->base64)
            emb = emb_base64(v, n_embd);
        else {
            emb = json_array();
            for (int k = 0; k < n_embd; k++)
                json_array_append_new(emb, json_real(v[k]));
        }
        json_array_append_new(
            data, json_pack("{s:s,s:i,s:o}", "object", "embedding", "index", i, "embedding", emb));
    }
    return json_pack("{s:s,s:o,s:s,s:{s:i,s:i}}", "object", "list", "data", data, "model", model,
                     "usage", "prompt_tokens", r->total, "total_tokens", r->total);
}
