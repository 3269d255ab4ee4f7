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

enum MHD_Result route_responses(struct hreq *hr, json_t *root) {
    struct srv *s = hr->srv;
    struct resp_req rq;
    struct oai_error e;
    hr->map_error = resp_map_error;
    if (resp_to_chat(root, s->rstore, s->cfg->max_tokens, &rq, &e)) return clients_fail(hr, &e);
    const char *name = clients_model(s, json_object_get(rq.chat, "model"));
    struct api_shape *shape =
        resp_shape_create(&rq, name ? name : s->model_id, (int64_t)time(NULL), s->rstore);
    json_t *chat = json_incref(rq.chat);
    resp_req_free(&rq);
    if (!shape) {
        json_decref(chat);
        return conn_reply_error(hr, 500, NULL, NULL, NULL, "out of memory");
    }
    enum MHD_Result ret = cmpl_start_shape(hr, chat, 1, shape);
    json_decref(chat);
    return ret;
}

enum MHD_Result route_messages(struct hreq *hr, json_t *root, int count_only) {
    struct srv *s = hr->srv;
    json_t *chat, *stops;
    struct oai_error e;
    if (anth_to_chat(root, count_only, &chat, &stops, &e)) return clients_fail(hr, &e);
    enum MHD_Result ret;
    if (count_only) {
        struct oai_limits lim;
        struct oai_params *p;
        cmpl_limits(s, &lim);
        if (oai_parse(chat, 1, &lim, &p, &e)) {
            ret = clients_fail(hr, &e);
        } else {
            ret = conn_reply_json(hr, 200, anth_count_body(p->prompt_len[0]));
            oai_params_free(p);
        }
    } else {
        const char *name = clients_model(s, json_object_get(chat, "model"));
        struct api_shape *shape = anth_shape_create(name ? name : s->model_id, stops);
        ret = shape ? cmpl_start_shape(hr, chat, 1, shape)
                    : conn_reply_error(hr, 500, NULL, NULL, NULL, "out of memory");
    }
    json_decref(chat);
    json_decref(stops);
    return ret;
}

enum MHD_Result route_embeddings(struct hreq *hr, json_t *root) {
    struct srv *s = hr->srv;
    struct oai_error e;
    struct emb_req *r = calloc(1, sizeof *r);
    if (!r) return conn_reply_error(hr, 500, NULL, NULL, NULL, "out of memory");
    enum emb_pooling dflt =
        !strcmp(s->cfg->embedding_pooling, "last") ? EMB_POOL_LAST : EMB_POOL_MEAN;
    if (emb_parse(root, s->vocab, s->cfg->ctx_size, s->model->cfg.n_embd, dflt, r, &e)) {
        free(r);
        return clients_fail(hr, &e);
    }
    /* "model" follows the same rules as the generation routes */
    const char *name = clients_model(s, json_object_get(root, "model"));
    if (!name) {
        emb_req_free(r);
        free(r);
        return conn_reply_error(hr, 404, "not_found_error", "model", "model_not_found",
                                "the model '%.64s' does not exist",
                                json_string_value(json_object_get(root, "model")));
    }
    return cmpl_start_embed(hr, r, name);
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
