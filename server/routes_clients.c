/*
 * routes_clients — see routes_clients.h.
 */
#include "server/routes_clients.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/api_anthropic.h"
#include "server/api_embeddings.h"
#include "server/api_responses.h"
#include "server/api_tools.h"
#include "server/completion.h"
#include "server/ui.h"

void route_error_shape(struct hreq *hr) {
    if (hr->route == ROUTE_MESSAGES || hr->route == ROUTE_COUNT_TOKENS)
        hr->error_body = anth_error_body;
}

/* The id a reply names for the request's "model": the alias asked for, else the served id;
 * NULL when the name is unknown and any model is not accepted. */
static const char *clients_model(struct srv *s, json_t *model) {
    if (!json_is_string(model)) return s->model_id;
    const char *m = json_string_value(model);
    for (int i = 0; i < s->n_aliases; i++)
        if (!strcmp(m, s->aliases[i])) return s->aliases[i];
    if (!strcmp(m, s->model_id) || (s->model && !strcmp(m, s->model->name)) ||
        s->cfg->accept_any_model)
        return s->model_id;
    return NULL;
}

static enum MHD_Result clients_fail(struct hreq *hr, const struct oai_error *e) {
    return conn_reply_error(hr, e->status, e->type, e->param, e->code, "%s", e->msg);
}

/* A translated request's work off the loop (cmpl_start_job): the JSON body, the translation
 * into a chat request and oai_parse (rendering, tokenizing), or the embeddings' inputs. */
struct clients_job {
    struct srv *srv;
    int count_only;           /* /v1/messages/count_tokens */
    struct oai_limits lim;
    int parse_failed;         /* the refusal is oai_parse's, not the translation's */
    struct oai_params *p;     /* the parsed chat request */
    struct resp_req rq;       /* /v1/responses: the translation */
    json_t *stops;            /* /v1/messages: stop_sequences, or NULL */
    struct emb_req *emb;      /* /v1/embeddings: the inputs */
    const char *name;         /* /v1/embeddings: the model id answered */
};

static void clients_job_free(void *ctx) {
    struct clients_job *j = ctx;
    oai_params_free(j->p);
    resp_req_free(&j->rq);
    json_decref(j->stops);
    if (j->emb) emb_req_free(j->emb);
    free(j->emb);
    free(j);
}

static enum MHD_Result clients_start(struct hreq *hr, const struct cmpl_job *job,
                                     int count_only) {
    struct clients_job *j = calloc(1, sizeof *j);
    if (!j) return conn_reply_error(hr, 500, NULL, NULL, NULL, "out of memory");
    j->srv = hr->srv;
    j->count_only = count_only;
    cmpl_limits(hr->srv, &j->lim);
    return cmpl_start_job(hr, job, j);
}

/* Worker: resp_to_chat (the store is locked) and oai_parse (with text.format's grammar). */
static int clients_responses_work(void *arg, json_t *root, struct oai_error *e) {
    struct clients_job *j = arg;
    if (resp_to_chat(root, j->srv->rstore, j->srv->cfg->max_tokens, &j->rq, e)) return -1;
    j->parse_failed = 1;
    return tools_parse_request(j->rq.chat, 1, &j->lim, &j->p, e);
}

static enum MHD_Result clients_responses_then(struct hreq *hr, void *ctx, int rc,
                                              const struct oai_error *e) {
    struct clients_job *j = ctx;
    if (rc && !j->parse_failed) return clients_fail(hr, e);
    if (rc) return cmpl_start_parsed(hr, rc, NULL, e, NULL);
    struct api_shape *shape =
        resp_shape_create(&j->rq, j->p->model, (int64_t)time(NULL), hr->srv->rstore);
    resp_req_free(&j->rq);
    if (!shape) return conn_reply_error(hr, 500, NULL, NULL, NULL, "out of memory");
    struct oai_params *p = j->p;
    j->p = NULL;
    return cmpl_start_parsed(hr, 0, p, NULL, shape);
}

enum MHD_Result route_responses(struct hreq *hr) {
    static const struct cmpl_job job = {clients_responses_work, clients_responses_then,
                                        clients_job_free};
    hr->map_error = resp_map_error;
    return clients_start(hr, &job, 0);
}

/* Worker: anth_to_chat and oai_parse. */
static int clients_messages_work(void *arg, json_t *root, struct oai_error *e) {
    struct clients_job *j = arg;
    json_t *chat;
    if (anth_to_chat(root, j->count_only, &chat, &j->stops, e)) return -1;
    j->parse_failed = 1;
    int rc = j->count_only ? oai_parse(chat, 1, &j->lim, &j->p, e)
                           : tools_parse_request(chat, 1, &j->lim, &j->p, e);
    json_decref(chat);
    return rc;
}

static enum MHD_Result clients_messages_then(struct hreq *hr, void *ctx, int rc,
                                             const struct oai_error *e) {
    struct clients_job *j = ctx;
    if (rc && (j->count_only || !j->parse_failed)) return clients_fail(hr, e);
    if (rc) return cmpl_start_parsed(hr, rc, NULL, e, NULL);
    if (j->count_only) return conn_reply_json(hr, 200, anth_count_body(j->p->prompt_len[0]));
    struct api_shape *shape = anth_shape_create(j->p->model, j->stops);
    if (!shape) return conn_reply_error(hr, 500, NULL, NULL, NULL, "out of memory");
    struct oai_params *p = j->p;
    j->p = NULL;
    return cmpl_start_parsed(hr, 0, p, NULL, shape);
}

enum MHD_Result route_messages(struct hreq *hr, int count_only) {
    static const struct cmpl_job job = {clients_messages_work, clients_messages_then,
                                        clients_job_free};
    return clients_start(hr, &job, count_only);
}

/* Worker: emb_parse (tokenizes every input) and the model's name. */
static int clients_embeddings_work(void *arg, json_t *root, struct oai_error *e) {
    struct clients_job *j = arg;
    struct srv *s = j->srv;
    if (!(j->emb = calloc(1, sizeof *j->emb))) return oai_fail(e, 500, NULL, NULL, "out of memory");
    enum emb_pooling dflt =
        !strcmp(s->cfg->embedding_pooling, "last") ? EMB_POOL_LAST : EMB_POOL_MEAN;
    if (emb_parse(root, s->vocab, s->cfg->ctx_size, s->model->cfg.n_embd, dflt, j->emb, e)) {
        free(j->emb);
        j->emb = NULL;
        return -1;
    }
    /* "model" follows the same rules as the generation routes */
    if (!(j->name = clients_model(s, json_object_get(root, "model")))) {
        oai_fail(e, 404, "model", "model_not_found", "the model '%.64s' does not exist",
                 json_string_value(json_object_get(root, "model")));
        e->type = "not_found_error";
        return -1;
    }
    return 0;
}

static enum MHD_Result clients_embeddings_then(struct hreq *hr, void *ctx, int rc,
                                               const struct oai_error *e) {
    struct clients_job *j = ctx;
    if (rc) return clients_fail(hr, e);
    struct emb_req *emb = j->emb;
    j->emb = NULL;
    return cmpl_start_embed(hr, emb, j->name);
}

enum MHD_Result route_embeddings(struct hreq *hr) {
    static const struct cmpl_job job = {clients_embeddings_work, clients_embeddings_then,
                                        clients_job_free};
    return clients_start(hr, &job, 0);
}

enum MHD_Result route_ui(struct hreq *hr) {
    if (hr->srv->cfg->no_ui)
        return conn_reply_error(hr, 404, NULL, NULL, NULL, "the chat page is turned off");
    size_t n;
    const unsigned char *page = ui_page(&n);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(n, (void *)page, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, UI_CONTENT_TYPE);
    MHD_add_response_header(r, "Content-Security-Policy", UI_CSP);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    conn_cors_headers(hr, r);
    hr->status = 200;
    hr->phase = PH_REPLIED;
    enum MHD_Result ret = MHD_queue_response(hr->conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* OPTIONS: a CORS preflight gets 204 with the allowed methods and headers when its Origin
 * is allowed; without one (or not allowed) the answer carries no Access-Control header, so
 * the browser refuses the real request. Preflights never carry the API key. */
enum MHD_Result route_preflight(struct hreq *hr, struct MHD_Connection *conn) {
    if (hr->route == ROUTE_NOT_FOUND)
        return conn_reply_error(hr, 404, NULL, NULL, NULL, "no route for OPTIONS %.100s", hr->path);
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    const char *allow = cors_allow(&hr->srv->cors, hr->origin);
    if (allow) {
        const char *req =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        MHD_add_response_header(r, "Access-Control-Allow-Origin", allow);
        MHD_add_response_header(r, "Access-Control-Allow-Methods", CORS_ALLOW_METHODS);
        MHD_add_response_header(r, "Access-Control-Allow-Headers", cors_allow_headers(req));
        MHD_add_response_header(r, "Access-Control-Max-Age", CORS_MAX_AGE);
    }
    MHD_add_response_header(r, "Vary", "Origin");
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, CORS_ALLOW_METHODS);
    hr->status = 204;
    hr->phase = PH_REPLIED;
    enum MHD_Result ret = MHD_queue_response(hr->conn, 204, r);
    MHD_destroy_response(r);
    return ret;
}
