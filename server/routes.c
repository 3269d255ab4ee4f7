/*
 * routes — the route table, the access handler and the handlers that answer at once;
 * generation lives in completion.c.
 */
#include "server/routes.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/strbuf.h"
#include "engine/tokenizer.h"
#include "scheduler/grammar.h"
#include "server/completion.h"
#include "server/conn.h"
#include "server/openai.h"
#include "server/routes_clients.h"

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
    {"/v1/responses", ROUTE_RESPONSES, 1, 1, "POST", "responses"},
    {"/v1/messages", ROUTE_MESSAGES, 1, 1, "POST", "messages"},
    {"/v1/messages/count_tokens", ROUTE_COUNT_TOKENS, 1, 1, "POST", "count_tokens"},
    {"/v1/embeddings", ROUTE_EMBEDDINGS, 1, 1, "POST", "embeddings"},
    {"/", ROUTE_UI, 0, 0, "GET, HEAD", "ui"},
    {"/live", ROUTE_LIVE, 0, 0, "GET, HEAD", "live"},
    {"/v1/models/", ROUTE_MODEL, 0, 1, "GET, HEAD", "model"}, /* prefix: /v1/models/{id} */
};
#define ROUTE_N (sizeof route_table / sizeof route_table[0])

/* The OpenAI routes also answer without the /v1 prefix: a base URL without /v1 is a common
 * client setting, and llama-server and vLLM accept it too. */
static int route_openai(enum route_id r) {
    return r == ROUTE_CHAT || r == ROUTE_COMPLETIONS || r == ROUTE_MODELS ||
           r == ROUTE_RESPONSES || r == ROUTE_EMBEDDINGS;
}

static enum route_id route_lookup(const char *path, const char **allow) {
    const char *mp = route_table[ROUTE_MODEL].path;
    if ((!strncmp(path, mp, strlen(mp)) && path[strlen(mp)]) ||
        (!strncmp(path, mp + 3, strlen(mp) - 3) && path[strlen(mp) - 3])) {
        if (allow) *allow = route_table[ROUTE_MODEL].allow;
        return ROUTE_MODEL;
    }
    for (size_t i = 0; i < ROUTE_N; i++)
        if (!strcmp(path, route_table[i].path) ||
            (route_openai(route_table[i].id) && !strcmp(path, route_table[i].path + 3))) {
            if (allow) *allow = route_table[i].allow;
            return route_table[i].id;
        }
    return ROUTE_NOT_FOUND;
}

static int route_needs_auth(enum route_id r) { return r < ROUTE_NOT_FOUND && route_table[r].auth; }
static int route_is_post(enum route_id r) { return r < ROUTE_NOT_FOUND && route_table[r].post; }
const char *route_name(enum route_id r) {
    return r < ROUTE_NOT_FOUND ? route_table[r].name : "not_found";
}

static enum MHD_Result route_not_ready(struct hreq *hr) {
    struct srv *s = hr->srv;
    if (s->state == SRV_LOADING)
        return conn_reply_error(hr, 503, NULL, NULL, NULL, "the model is still loading");
    return conn_reply_error(hr, 503, NULL, NULL, NULL, "the server is shutting down");
}

static enum MHD_Result route_health(struct hreq *hr) {
    struct srv *s = hr->srv;
    const char *st = s->state == SRV_READY     ? "ok"
                     : s->state == SRV_LOADING ? "loading"
                                               : "draining";
    return conn_reply_json(hr, s->state == SRV_READY ? 200 : 503,
                           json_pack("{s:s}", "status", st));
}

/* Liveness, unlike /health (readiness): 200 while loading and draining, so an orchestrator
 * never kills a pod that is finishing its streams; 503 only when the scheduler thread has
 * finished no loop turn for live_stall_s while requests wait or run (a stuck step). */
static enum MHD_Result route_live(struct hreq *hr) {
    struct srv *s = hr->srv;
    double age = 0;
    int pending = 0;
    if (s->sched) {
        struct sched_stats st;
        sched_stats(s->sched, &st);
        age = st.progress_age_s;
        pending = st.pending;
    }
    int stuck = pending > 0 && age > s->cfg->live_stall_s;
    if (stuck)
        LOG_W("http", hr->id, "/live: scheduler stuck for %.1f s with %d requests pending", age,
              pending);
    return conn_reply_json(hr, stuck ? 503 : 200,
                           json_pack("{s:s,s:s,s:f,s:i}", "status", stuck ? "stuck" : "ok",
                                     "state", srv_state_name(s->state), "progress_age_s", age,
                                     "pending", pending));
}

/* Every served id: the aliases (the first is the main id), or the file name's stem. */
static enum MHD_Result route_models(struct hreq *hr) {
    struct srv *s = hr->srv;
    const char *one = s->model_id;
    const char *const *ids = s->n_aliases ? (const char *const *)s->aliases : &one;
    return conn_reply_json(hr, 200, oai_model_list(ids, s->n_aliases ? s->n_aliases : 1,
                                                   s->created, s->model ? s->cfg->ctx_size : 0));
}

/* GET /v1/models/{id}: one served id, or 404 model_not_found. */
static enum MHD_Result route_model(struct hreq *hr) {
    struct srv *s = hr->srv;
    const char *id = strstr(hr->path, "/models/") + 8;
    const char *one = s->model_id;
    const char *const *ids = s->n_aliases ? (const char *const *)s->aliases : &one;
    int n = s->n_aliases ? s->n_aliases : 1;
    for (int i = 0; i < n; i++) {
        if (strcmp(ids[i], id) != 0) continue;
        json_t *list = oai_model_list(&ids[i], 1, s->created, s->model ? s->cfg->ctx_size : 0);
        json_t *m = json_incref(json_array_get(json_object_get(list, "data"), 0));
        json_decref(list);
        return conn_reply_json(hr, 200, m);
    }
    return conn_reply_error(hr, 404, NULL, "model", "model_not_found",
                            "the model '%.200s' does not exist", id);
}

static enum MHD_Result route_metrics(struct hreq *hr) {
    struct srv *s = hr->srv;
    static const char *names[METRICS_ROUTES];
    for (int i = 0; i < METRICS_ROUTES; i++) names[i] = route_name((enum route_id)i);
    struct sched_stats st;
    if (s->sched) sched_stats(s->sched, &st);
    size_t cap = 256 * 1024;
    char *buf = malloc(cap);
    if (!buf) return conn_reply_error(hr, 500, NULL, NULL, NULL, "out of memory");
    struct strbuf b;
    strbuf_init(&b, buf, cap);
    metrics_render(&s->metrics, names, s->sched ? &st : NULL, &b);
    int g_n;
    long long g_hits, g_miss;
    gram_lru_stats(s->gram_cache, &g_n, &g_hits, &g_miss);
    metrics_render_grammar(g_n, g_hits, g_miss, &b);
    struct metrics_info inf = {.model_name = s->model_id, .state = srv_state_name(s->state),
                               .cfg = s->cfg, .start_time = (double)s->created};
    metrics_render_gw(&s->metrics, &inf, s->sched ? &st : NULL, &b);
    return conn_reply_text(hr, 200, "text/plain; version=0.0.4", buf, b.n);
}

static int route_get_bool(json_t *root, const char *k, int def, struct oai_error *e) {
    json_t *v = json_object_get(root, k);
    if (!v || json_is_null(v)) return def;
    if (!json_is_boolean(v)) return oai_fail(e, 400, k, NULL, "'%s' must be a boolean", k);
    return json_is_true(v);
}

/* /tokenize's and /detokenize's work off the loop (a 4 MB content takes the tokenizer about
 * a second): the body, the ids and the serialized reply. */
struct route_tok {
    const struct tok_vocab *vocab;
    char *text;                 /* the reply body (owned until replied) */
    size_t len;
};

/* Worker: body (taken) serialized as the 200 reply. */
static int route_tok_reply(struct route_tok *t, json_t *body, struct oai_error *e) {
    if (!(t->text = conn_json_text(body, &t->len)))
        return oai_fail(e, 500, NULL, NULL, "out of memory");
    return 0;
}

static int route_tokenize_work(void *arg, json_t *root, struct oai_error *e) {
    struct route_tok *t = arg;
    json_t *content = json_object_get(root, "content");
    int add_special = route_get_bool(root, "add_special", 0, e);
    int parse_special = add_special < 0 ? -1 : route_get_bool(root, "parse_special", 1, e);
    int with_pieces = parse_special < 0 ? -1 : route_get_bool(root, "with_pieces", 0, e);
    if (with_pieces < 0) return -1;
    if (!json_is_string(content))
        return oai_fail(e, 400, "content", NULL, "'content' must be a string");
    size_t len = json_string_length(content);
    int cap = (int)(len < (1u << 28) ? len : (1u << 28)) + 8, n = -1;
    int32_t *ids = NULL;
    for (int attempt = 0; attempt < 2; attempt++) {
        free(ids);
        ids = malloc((size_t)cap * sizeof *ids);
        if (!ids) break;
        n = tok_encode(t->vocab, json_string_value(content), len, add_special, parse_special, ids,
                       cap);
        if (n <= cap) break;
        cap = n;
    }
    if (!ids || n < 0 || n > cap) {
        free(ids);
        return oai_fail(e, 400, "content", NULL, "'content' cannot be tokenized");
    }
    json_t *toks = json_array();
    for (int i = 0; i < n; i++) {
        if (!with_pieces) {
            json_array_append_new(toks, json_integer(ids[i]));
            continue;
        }
        char piece[256];
        int pl = tok_token_to_bytes(t->vocab, ids[i], 1, piece, (int)sizeof piece);
        if (pl < 0) pl = 0;
        if (pl > (int)sizeof piece) pl = (int)sizeof piece;
        json_array_append_new(toks, json_pack("{s:i,s:o}", "id", ids[i], "piece",
                                              oai_string(piece, (size_t)pl)));
    }
    free(ids);
    return route_tok_reply(t, json_pack("{s:o}", "tokens", toks), e);
}

static enum MHD_Result route_tok_then(struct hreq *hr, void *ctx, int rc,
                                           const struct oai_error *e) {
    struct route_tok *t = ctx;
    if (rc) return conn_reply_error(hr, e->status, e->type, e->param, e->code, "%s", e->msg);
    char *text = t->text;
    t->text = NULL;
    return conn_reply_text(hr, 200, "application/json", text, t->len);
}

static void route_tok_free(void *ctx) {
    struct route_tok *t = ctx;
    free(t->text);
    free(t);
}

static enum MHD_Result route_tok_start(struct hreq *hr, const struct cmpl_job *job) {
    struct route_tok *t = calloc(1, sizeof *t);
    if (!t) return conn_reply_error(hr, 500, NULL, NULL, NULL, "out of memory");
    t->vocab = hr->srv->vocab;
    return cmpl_start_job(hr, job, t);
}

static int route_detokenize_work(void *arg, json_t *root, struct oai_error *e) {
    struct route_tok *t = arg;
    json_t *toks = json_object_get(root, "tokens");
    int nv = tok_n_vocab(t->vocab);
    if (!json_is_array(toks) || json_array_size(toks) > (1u << 24))
        return oai_fail(e, 400, "tokens", NULL, "'tokens' must be an array of ids");
    size_t n = json_array_size(toks);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    char *text = NULL;
    int rc = -1;
    if (!ids) {
        oai_fail(e, 500, NULL, NULL, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(toks, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= nv) {
            oai_fail(e, 400, "tokens", NULL, "'tokens' holds token ids in [0, %d)", nv);
            goto done;
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    char probe[1];
    int len = tok_decode(t->vocab, ids, (int)n, 1, probe, 0);
    text = malloc((size_t)(len > 0 ? len : 0) + 1);
    if (len < 0 || !text) {
        oai_fail(e, 400, "tokens", NULL, "'tokens' cannot be decoded");
        goto done;
    }
    tok_decode(t->vocab, ids, (int)n, 1, text, len);
    rc = route_tok_reply(t, json_pack("{s:o}", "content", oai_string(text, (size_t)len)), e);
done:
    free(text);
    free(ids);
    return rc;
}

static enum MHD_Result route_tokenize(struct hreq *hr) {
    static const struct cmpl_job job = {route_tokenize_work, route_tok_then, route_tok_free};
    return route_tok_start(hr, &job);
}

static enum MHD_Result route_detokenize(struct hreq *hr) {
    static const struct cmpl_job job = {route_detokenize_work, route_tok_then, route_tok_free};
    return route_tok_start(hr, &job);
}

static enum MHD_Result route_dispatch(struct hreq *hr) {
    struct srv *s = hr->srv;
    if (hr->route == ROUTE_HEALTH) return route_health(hr);
    if (hr->route == ROUTE_LIVE) return route_live(hr);
    if (hr->route == ROUTE_METRICS) return route_metrics(hr);
    if (hr->route == ROUTE_MODELS) return route_models(hr);
    if (hr->route == ROUTE_MODEL) return route_model(hr);
    if (hr->route == ROUTE_UI) return route_ui(hr);
    int ready = s->state == SRV_READY;
    if (s->state == SRV_DRAINING && (hr->route == ROUTE_TOKENIZE || hr->route == ROUTE_DETOKENIZE))
        ready = 1; /* the vocabulary is still there */
    if (!ready) return route_not_ready(hr);
    switch (hr->route) {
    case ROUTE_TOKENIZE: return route_tokenize(hr);
    case ROUTE_DETOKENIZE: return route_detokenize(hr);
    case ROUTE_CHAT:
    case ROUTE_COMPLETIONS: return cmpl_start_body(hr, hr->route == ROUTE_CHAT);
    case ROUTE_RESPONSES: return route_responses(hr);
    case ROUTE_EMBEDDINGS: return route_embeddings(hr);
    case ROUTE_MESSAGES:
    case ROUTE_COUNT_TOKENS: return route_messages(hr, hr->route == ROUTE_COUNT_TOKENS);
    default: break;
    }
    return conn_reply_error(hr, 404, NULL, NULL, NULL, "no route for %s", hr->path);
}

/* ---- the access handler ------------------------------------------------------------------ */

/* Constant-time comparison of the key (Authorization: Bearer KEY, or x-api-key: KEY as
 * Anthropic's clients send it) with every configured key. */
static int route_auth_ok(struct srv *s, struct MHD_Connection *conn, int *key) {
    *key = -1;
    if (!s->n_keys) return 1;
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (h && strncasecmp(h, "Bearer ", 7) == 0) {
        h += 7;
    } else {
        h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "x-api-key");
        if (!h) return 0;
    }
    while (*h == ' ') h++;
    size_t hl = strlen(h);
    int ok = 0;
    for (int i = 0; i < s->n_keys; i++) {
        size_t kl = strlen(s->keys[i]);
        unsigned diff = (unsigned)(kl ^ hl);
        for (size_t j = 0; j < kl; j++) diff |= (unsigned char)s->keys[i][j] ^ (unsigned char)(j < hl ? h[j] : 0);
        ok |= diff == 0;
        if (diff == 0) *key = i; /* the fairness group of its requests */
    }
    return ok;
}

/* First call of a request: route, method, auth, content type and declared length. */
static enum MHD_Result route_first(struct hreq *hr, struct MHD_Connection *conn,
                                  const char *method) {
    struct srv *s = hr->srv;
    const char *allow = NULL;
    hr->conn = conn;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    hr->hc = ci ? ci->socket_context : NULL;
    if (hr->hc) hr->hc->cur = hr;
    hr->route = route_lookup(hr->path, &allow);
    hr->allow = allow;
    /* The admin listener serves the probes and the metrics only. */
    const union MHD_ConnectionInfo *di = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_DAEMON);
    if (s->admin && di && di->daemon == s->admin && hr->route != ROUTE_HEALTH &&
        hr->route != ROUTE_LIVE && hr->route != ROUTE_METRICS)
        hr->route = ROUTE_NOT_FOUND;
    hr->phase = PH_BODY;
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    if (origin && strlen(origin) < sizeof hr->origin) strcpy(hr->origin, origin);
    route_error_shape(hr);
    if (!strcmp(method, "OPTIONS")) return route_preflight(hr, conn);
    if (hr->route == ROUTE_NOT_FOUND)
        return conn_reply_error(hr, 404, NULL, NULL, NULL, "no route for %s %.100s", method,
                                hr->path);
    int is_post = route_is_post(hr->route);
    int method_ok = is_post ? !strcmp(method, "POST")
                            : (!strcmp(method, "GET") || !strcmp(method, "HEAD"));
    if (!method_ok)
        return conn_reply_error(hr, 405, NULL, NULL, NULL, "method %.16s not allowed on %s; use %s",
                                method, hr->path, allow);
    if (route_needs_auth(hr->route) && !route_auth_ok(s, conn, &hr->key))
        return conn_reply_error(hr, 401, NULL, NULL, "invalid_api_key",
                                "missing or invalid API key (Authorization: Bearer KEY, or "
                                "x-api-key: KEY)");
    if (is_post) {
        const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
        if (ct && strncasecmp(ct, "application/json", 16) != 0)
            return conn_reply_error(hr, 415, NULL, NULL, NULL,
                                    "Content-Type must be application/json");
        if (ct && ct[16] && ct[16] != ';' && ct[16] != ' ')
            return conn_reply_error(hr, 415, NULL, NULL, NULL,
                                    "Content-Type must be application/json");
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(cl, &end, 10);
            if (errno || *end || (int64_t)v < 0 || v > (unsigned long long)s->cfg->body_limit)
                return conn_reply_error(hr, 413, NULL, NULL, NULL,
                                        "request body over the limit of %lld bytes",
                                        (long long)s->cfg->body_limit);
        }
    }
    return MHD_YES;
}

enum MHD_Result route_access(void *cls, struct MHD_Connection *conn, const char *url,
                             const char *method, const char *version, const char *upload_data,
                             size_t *upload_data_size, void **con_cls) {
    (void)cls;
    (void)url;
    (void)version;
    struct hreq *hr = *con_cls;
    if (!hr) return MHD_NO; /* allocation failed in the URI callback */
    switch (hr->phase) {
    case PH_NEW: return route_first(hr, conn, method);
    case PH_BODY:
        if (*upload_data_size) {
            return conn_body_append(hr, upload_data, upload_data_size);
        }
        if (hr->replied_raw) return MHD_NO; /* the 413 went out already: close */
        if (hr->too_large)
            return conn_reply_error(hr, 413, NULL, NULL, NULL,
                                    "request body over the limit of %lld bytes",
                                    (long long)hr->srv->cfg->body_limit);
        hr->phase = PH_WAIT;
        return route_dispatch(hr);
    case PH_WAIT: return cmpl_resume(hr);
    case PH_STREAM:
    case PH_REPLIED: *upload_data_size = 0; return MHD_YES;
    }
    return MHD_NO;
}
