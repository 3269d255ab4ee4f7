/*
 * routes — the route table (exact paths: no normalisation, so `/v1/../x`, `//v1/models`,
 * `%2e%2e` and case variants are simply unknown) and the routes that answer at once:
 * /v1/models, /health, /metrics, /tokenize, /detokenize. Generation lives in gen.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer.h"
#include "server/openai.h"
#include "server/server_int.h"

struct route {
    const char *path;
    enum route_id id;
    int post;         /* 1: POST with a JSON body; 0: GET/HEAD */
    int auth;         /* 1: needs the API key when keys are configured */
    const char *allow;
    const char *name; /* metrics label */
};

static const struct route route_table[] = {
    {"/v1/chat/completions", ROUTE_CHAT, 1, 1, "POST", "chat_completions"},
    {"/v1/completions", ROUTE_COMPLETIONS, 1, 1, "POST", "completions"},
    {"/v1/models", ROUTE_MODELS, 0, 1, "GET, HEAD", "models"},
    {"/health", ROUTE_HEALTH, 0, 0, "GET, HEAD", "health"},
    {"/metrics", ROUTE_METRICS, 0, 1, "GET, HEAD", "metrics"},
    {"/tokenize", ROUTE_TOKENIZE, 1, 1, "POST", "tokenize"},
    {"/detokenize", ROUTE_DETOKENIZE, 1, 1, "POST", "detokenize"},
};
#define ROUTE_N (sizeof route_table / sizeof route_table[0])

enum route_id route_lookup(const char *path, const char **allow) {
    for (size_t i = 0; i < ROUTE_N; i++)
        if (!strcmp(path, route_table[i].path)) {
            if (allow) *allow = route_table[i].allow;
            return route_table[i].id;
        }
    return ROUTE_NOT_FOUND;
}

int route_needs_auth(enum route_id r) { return r < ROUTE_NOT_FOUND && route_table[r].auth; }
int route_is_post(enum route_id r) { return r < ROUTE_NOT_FOUND && route_table[r].post; }
const char *route_name(enum route_id r) {
    return r < ROUTE_NOT_FOUND ? route_table[r].name : "not_found";
}

/* Parses the body as one JSON object (duplicates, NUL escapes and bad UTF-8 refused by
 * jansson; nesting depth bounded by it). NULL after queuing the 400. */
static json_t *route_body(struct hreq *hr, enum MHD_Result *ret) {
    json_error_t je;
    json_t *root = json_loadb(hr->body ? hr->body : "", hr->body_len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        *ret = http_reply_error(hr, 400, NULL, NULL, NULL, "invalid JSON body at byte %d: %s",
                                je.position, je.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        *ret = http_reply_error(hr, 400, NULL, NULL, NULL, "the request body must be a JSON object");
        return NULL;
    }
    return root;
}

static enum MHD_Result route_not_ready(struct hreq *hr) {
    struct srv *s = hr->srv;
    if (s->state == SRV_LOADING)
        return http_reply_error(hr, 503, NULL, NULL, NULL, "the model is still loading");
    return http_reply_error(hr, 503, NULL, NULL, NULL, "the server is shutting down");
}

static enum MHD_Result route_health(struct hreq *hr) {
    struct srv *s = hr->srv;
    const char *st = s->state == SRV_READY     ? "ok"
                     : s->state == SRV_LOADING ? "loading"
                                               : "draining";
    return http_reply_json(hr, s->state == SRV_READY ? 200 : 503,
                           json_pack("{s:s}", "status", st));
}

static enum MHD_Result route_models(struct hreq *hr) {
    struct srv *s = hr->srv;
    json_t *m = json_pack("{s:s,s:s,s:I,s:s}", "id", s->model_id, "object", "model", "created",
                          (json_int_t)s->created, "owned_by", "gemmad");
    if (s->model) {
        json_object_set_new(m, "max_model_len", json_integer(s->cfg->ctx_size));
    }
    return http_reply_json(hr, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", m));
}

static enum MHD_Result route_metrics(struct hreq *hr) {
    struct srv *s = hr->srv;
    static const char *names[METRICS_ROUTES];
    for (int i = 0; i < METRICS_ROUTES; i++) names[i] = route_name((enum route_id)i);
    struct sched_counts c = {0};
    if (s->sched) sched_get_counts(s->sched, &c);
    size_t cap = 64 * 1024;
    char *buf = malloc(cap);
    if (!buf) return http_reply_error(hr, 500, NULL, NULL, NULL, "out of memory");
    size_t n = metrics_render(&s->metrics, names, c.running, c.waiting, buf, cap);
    if (s->sched && n + 1 < cap) n += sched_metrics_text(s->sched, buf + n, cap - n);
    return http_reply_text(hr, 200, "text/plain; version=0.0.4", buf, n);
}

static int route_get_bool(json_t *root, const char *k, int def, struct hreq *hr,
                          enum MHD_Result *ret) {
    json_t *v = json_object_get(root, k);
    if (!v || json_is_null(v)) return def;
    if (!json_is_boolean(v)) {
        *ret = http_reply_error(hr, 400, NULL, k, NULL, "'%s' must be a boolean", k);
        return -1;
    }
    return json_is_true(v);
}

static enum MHD_Result route_tokenize(struct hreq *hr) {
    struct srv *s = hr->srv;
    enum MHD_Result ret = MHD_YES;
    json_t *root = route_body(hr, &ret);
    if (!root) return ret;
    json_t *content = json_object_get(root, "content");
    int add_special = route_get_bool(root, "add_special", 0, hr, &ret);
    int parse_special = add_special < 0 ? -1 : route_get_bool(root, "parse_special", 1, hr, &ret);
    int with_pieces = parse_special < 0 ? -1 : route_get_bool(root, "with_pieces", 0, hr, &ret);
    int32_t *ids = NULL;
    if (with_pieces < 0) goto done;
    if (!json_is_string(content)) {
        ret = http_reply_error(hr, 400, NULL, "content", NULL, "'content' must be a string");
        goto done;
    }
    size_t len = json_string_length(content);
    int cap = (int)(len < (1u << 28) ? len : (1u << 28)) + 8, n = -1;
    for (int attempt = 0; attempt < 2; attempt++) {
        free(ids);
        ids = malloc((size_t)cap * sizeof *ids);
        if (!ids) break;
        n = tok_encode(s->vocab, json_string_value(content), len, add_special, parse_special, ids,
                       cap);
        if (n <= cap) break;
        cap = n;
    }
    if (!ids || n < 0 || n > cap) {
        ret = http_reply_error(hr, 400, NULL, "content", NULL, "'content' cannot be tokenized");
        goto done;
    }
    json_t *toks = json_array();
    for (int i = 0; i < n; i++) {
        if (!with_pieces) {
            json_array_append_new(toks, json_integer(ids[i]));
            continue;
        }
        char piece[256];
        int pl = tok_token_to_bytes(s->vocab, ids[i], 1, piece, (int)sizeof piece);
        if (pl < 0) pl = 0;
        if (pl > (int)sizeof piece) pl = (int)sizeof piece;
        json_array_append_new(toks, json_pack("{s:i,s:o}", "id", ids[i], "piece",
                                              oai_string(piece, (size_t)pl)));
    }
    ret = http_reply_json(hr, 200, json_pack("{s:o}", "tokens", toks));
done:
    free(ids);
    json_decref(root);
    return ret;
}

static enum MHD_Result route_detokenize(struct hreq *hr) {
    struct srv *s = hr->srv;
    enum MHD_Result ret = MHD_YES;
    json_t *root = route_body(hr, &ret);
    if (!root) return ret;
    json_t *toks = json_object_get(root, "tokens");
    int nv = tok_n_vocab(s->vocab);
    int32_t *ids = NULL;
    char *text = NULL;
    if (!json_is_array(toks) || json_array_size(toks) > (1u << 24)) {
        ret = http_reply_error(hr, 400, NULL, "tokens", NULL, "'tokens' must be an array of ids");
        goto done;
    }
    size_t n = json_array_size(toks);
    ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) {
        ret = http_reply_error(hr, 500, NULL, NULL, NULL, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(toks, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= nv) {
            ret = http_reply_error(hr, 400, NULL, "tokens", NULL,
                                   "'tokens' holds token ids in [0, %d)", nv);
            goto done;
        }
        ids[i] = (int32_t)json_integer_value(t);
    }
    char probe[1];
    int len = tok_decode(s->vocab, ids, (int)n, 1, probe, 0);
    text = malloc((size_t)(len > 0 ? len : 0) + 1);
    if (len < 0 || !text) {
        ret = http_reply_error(hr, 400, NULL, "tokens", NULL, "'tokens' cannot be decoded");
        goto done;
    }
    tok_decode(s->vocab, ids, (int)n, 1, text, len);
    ret = http_reply_json(hr, 200, json_pack("{s:o}", "content", oai_string(text, (size_t)len)));
done:
    free(text);
    free(ids);
    json_decref(root);
    return ret;
}

enum MHD_Result route_dispatch(struct hreq *hr, const char *method) {
    struct srv *s = hr->srv;
    (void)method;
    if (hr->route == ROUTE_HEALTH) return route_health(hr);
    if (hr->route == ROUTE_METRICS) return route_metrics(hr);
    if (hr->route == ROUTE_MODELS) return route_models(hr);
    int ready = s->state == SRV_READY;
    if (s->state == SRV_DRAINING && (hr->route == ROUTE_TOKENIZE || hr->route == ROUTE_DETOKENIZE))
        ready = 1; /* the vocabulary is still there */
    if (!ready) return route_not_ready(hr);
    switch (hr->route) {
    case ROUTE_TOKENIZE: return route_tokenize(hr);
    case ROUTE_DETOKENIZE: return route_detokenize(hr);
    case ROUTE_CHAT:
    case ROUTE_COMPLETIONS: {
        enum MHD_Result ret = MHD_YES;
        json_t *root = route_body(hr, &ret);
        if (!root) return ret;
        hr->body_len = 0;
        ret = gen_start_json(hr, root, hr->route == ROUTE_CHAT);
        json_decref(root);
        return ret;
    }
    default: break;
    }
    return http_reply_error(hr, 404, NULL, NULL, NULL, "no route for %s", hr->path);
}
