/*
 * completion_start — starting generation and embedding requests: the body is parsed,
 * rendered and tokenized off the loop thread (intake.h), then the choices are submitted
 * from the connection's access handler (cmpl_resume -> cmpl_begin). Other routes' work on
 * their bodies goes the same way (cmpl_start_job -> the route's then).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/model.h"
#include "server/api_embeddings.h"
#include "server/completion_int.h"
#include "server/api_tools.h"
#include "server/intake.h"

/* The parsed request (or its refusal) on the loop thread: reply or submit. Runs from the
 * access handler, so replies may be queued. */
enum MHD_Result cmpl_begin(struct hreq *hr, int rc, struct oai_params *p,
                                  const struct oai_error *e) {
    struct srv *s = hr->srv;
    struct cmpl *g = hr->cmpl;
    if (g->fail_status) { /* ended (deadline, drain) while it was being parsed */
        oai_params_free(p);
        return conn_reply_error(hr, g->fail_status, g->fail_status == 504 ? "timeout_error" : NULL,
                                NULL, NULL, "%s", g->fail_msg);
    }
    if (rc)
        return conn_reply_error(hr, e->status, e->status == 404 ? "not_found_error" : e->type,
                                e->param, e->code, "%s", e->msg);
    int is_chat = p->is_chat;
    g->params = p;
    /* A balancer routes on headers, not bodies: X-Session-Id names the KV session when the
     * body does not (the body's session_id wins). */
    const char *hsid = hr->conn ? MHD_lookup_connection_value(hr->conn, MHD_HEADER_KIND,
                                                              "X-Session-Id")
                                : NULL;
    if (hsid && !p->session_id) {
        size_t hl = strlen(hsid);
        if (hl == 0 || hl > 128)
            return conn_reply_error(hr, 400, NULL, "X-Session-Id", NULL,
                                    "the X-Session-Id header must be 1 to 128 bytes");
        if (!(p->session_id = strdup(hsid)))
            return conn_reply_error(hr, 500, NULL, NULL, NULL, "out of memory");
    }
    snprintf(g->model, sizeof g->model, "%s", p->model);
    g->stream = p->stream;
    snprintf(g->id, sizeof g->id, "%s-%" PRIx64 "%08x", is_chat ? "chatcmpl" : "cmpl", hr->id,
             (unsigned)((uint64_t)s->created * 2654435761u));
    g->resp = (struct oai_resp){.id = g->id, .is_chat = p->is_chat,
                                .created = (int64_t)time(NULL), .model = g->model,
                                .include_usage = p->include_usage};
    return cmpl_submit(hr);
}

/* intake's callback (loop thread): keep the outcome and wake the connection; its access
 * handler (cmpl_resume) goes on with cmpl_begin. */
static void cmpl_parsed(void *arg, int rc, struct oai_params *p, const struct oai_error *e) {
    struct hreq *hr = arg;
    struct cmpl *g = hr->cmpl;
    g->parsing = 0;
    if (hr->mhd_done || hr->client_gone) {
        oai_params_free(p);
    } else {
        g->parsed = 1;
        g->parse_rc = rc;
        g->parsed_params = p;
        if (rc) g->parse_err = *e;
        conn_wake(hr);
    }
    conn_unref(hr); /* the job's reference */
}

enum MHD_Result cmpl_start_body(struct hreq *hr, int is_chat) {
    struct srv *s = hr->srv;
    struct oai_limits lim;
    cmpl_limits(s, &lim);
    struct cmpl *g = cmpl_new(hr, NULL);
    if (!g) return conn_reply_error(hr, 500, NULL, NULL, NULL, "out of memory");
    /* Parsing, rendering and tokenizing a long prompt take long: off the loop thread. */
    conn_ref(hr);
    g->parsing = 1;
    if (intake_parse(s, NULL, hr->body, hr->body_len, is_chat, &lim, cmpl_parsed, hr) == 0) {
        hr->phase = PH_WAIT;
        conn_suspend(hr);
        return MHD_YES;
    }
    g->parsing = 0;
    conn_unref(hr);
    return conn_reply_error(hr, 503, NULL, NULL, NULL, "cannot queue the request");
}

/* intake's callback for a route's job (loop thread): like cmpl_parsed. */
static void cmpl_job_done(void *arg, int rc, const struct oai_error *e) {
    struct hreq *hr = arg;
    struct cmpl *g = hr->cmpl;
    g->parsing = 0;
    if (!hr->mhd_done && !hr->client_gone) {
        g->parsed = 1;
        g->parse_rc = rc;
        if (rc) g->parse_err = *e;
        conn_wake(hr);
    }
    conn_unref(hr); /* the job's reference */
}

enum MHD_Result cmpl_start_job(struct hreq *hr, const struct cmpl_job *job, void *ctx) {
    struct cmpl *g = cmpl_new(hr, NULL);
    if (!g) {
        if (job->free_ctx) job->free_ctx(ctx);
        return conn_reply_error(hr, 500, NULL, NULL, NULL, "out of memory");
    }
    g->job = *job;
    g->job_ctx = ctx;
    conn_ref(hr);
    g->parsing = 1;
    if (intake_call(hr->srv, NULL, hr->body, hr->body_len, job->work, ctx, cmpl_job_done, hr)) {
        g->parsing = 0;
        conn_unref(hr);
        return conn_reply_error(hr, 503, NULL, NULL, NULL, "cannot queue the request");
    }
    hr->phase = PH_WAIT;
    conn_suspend(hr);
    return MHD_YES;
}

enum MHD_Result cmpl_start_parsed(struct hreq *hr, int rc, struct oai_params *p,
                                  const struct oai_error *e, struct api_shape *shape) {
    struct cmpl *g = hr->cmpl;
    if (g->shape) {
        g->shape->destroy(g->shape->st);
        free(g->shape);
    }
    g->shape = shape;
    return cmpl_begin(hr, rc, p, e);
}

/* Embeddings: one prefill-only scheduler request per input, answered when all are done. */
enum MHD_Result cmpl_start_embed(struct hreq *hr, struct emb_req *emb, const char *model) {
    struct srv *s = hr->srv;
    const int E = s->model->cfg.n_embd;
    struct cmpl *g = hr->cmpl ? hr->cmpl : cmpl_new(hr, NULL); /* a job's, or a new one */
    if (!g) {
        emb_req_free(emb);
        free(emb);
        return conn_reply_error(hr, 500, NULL, NULL, NULL, "out of memory");
    }
    g->emb = emb;
    g->emb_dim = E;
    snprintf(g->model, sizeof g->model, "%s", model);
    g->ch = calloc((size_t)emb->n, sizeof *g->ch);
    g->emb_vecs = calloc((size_t)emb->n * (size_t)E, sizeof(float));
    if (!g->ch || !g->emb_vecs) return conn_reply_error(hr, 500, NULL, NULL, NULL, "out of memory");
    g->n_ch = emb->n;
    hr->prompt_tokens = emb->total;
    for (int i = 0; i < emb->n; i++) {
        struct hchoice *c = &g->ch[i];
        c->hr = hr;
        c->index = i;
        c->prompt_idx = i;
        struct sched_req r = {0};
        r.prompt = emb->ids[i];
        r.n_prompt = emb->len[i];
        r.embed = 1;
        r.pooling = emb->pooling == EMB_POOL_LAST ? SCHED_POOL_LAST : SCHED_POOL_MEAN;
        r.top_logprobs = -1;
        int rc = cmpl_submit_one(hr, c, &r);
        if (rc == SCHED_EBACKEND)
            return conn_reply_error(hr, 501, NULL, NULL, NULL,
                                    "embeddings need the CPU backend (--device cpu)");
        if (rc) return cmpl_submit_error(hr, rc);
    }
    hr->phase = PH_WAIT;
    conn_suspend(hr);
    return MHD_YES;
}
