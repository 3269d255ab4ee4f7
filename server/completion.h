/*
 * completion — the completion flow of /v1/chat/completions and /v1/completions: parse the
 * body (openai.c), submit one scheduler request per choice, receive their events on the
 * loop thread, and answer with one JSON response or an SSE stream.
 *
 * The state of one request (struct cmpl, private) hangs off hreq.cmpl; cmpl_start_body
 * registers its release with the connection layer (cancel at close, free at cleanup), and
 * each submitted choice holds a reference on the request until its DONE/ERROR event.
 *
 * Threads: the loop thread, except the scheduler's event callback, which only copies the
 * event into srv.qhead (under srv.qlock) and wakes the loop through srv.async.
 */
#ifndef GEMMAD_SERVER_COMPLETION_H
#define GEMMAD_SERVER_COMPLETION_H

#include <jansson.h>
#include <microhttpd.h>

#include "server/api_common.h"
#include "server/conn.h"
#include "server/intake.h"

struct emb_req;
struct oai_limits;

/* Parses the raw request body (hr->body, kept unchanged until answered) as a chat or
 * completions request and starts it; replies itself on every error. Parsing, rendering and
 * tokenizing run off the loop thread (intake.h). */
enum MHD_Result cmpl_start_body(struct hreq *hr, int is_chat);
/* A route's work on the request body off the loop thread (intake_call: hr->body, kept
 * unchanged until answered), then its answer from the access handler: then(hr, ctx, rc, e)
 * with work's outcome, which replies, or starts generation (cmpl_start_parsed) or
 * embeddings (cmpl_start_embed). ctx is the work's argument; free_ctx (may be NULL) releases
 * it with the request. Replies itself when the work cannot be queued. */
struct cmpl_job {
    intake_work_fn work;
    enum MHD_Result (*then)(struct hreq *hr, void *ctx, int rc, const struct oai_error *e);
    void (*free_ctx)(void *ctx);
};
enum MHD_Result cmpl_start_job(struct hreq *hr, const struct cmpl_job *job, void *ctx);
/* From a job's then: oai_parse's outcome (rc 0: p, taken over; else the refusal e) replied
 * or started, answered in shape (taken over, also on errors; NULL: OpenAI's). */
enum MHD_Result cmpl_start_parsed(struct hreq *hr, int rc, struct oai_params *p,
                                  const struct oai_error *e, struct api_shape *shape);
/* Embeddings: prefills each input (emb taken over), answers with emb_reply naming model. */
enum MHD_Result cmpl_start_embed(struct hreq *hr, struct emb_req *emb, const char *model);
/* The request limits of this server (for parsing a chat request outside the flow). */
void cmpl_limits(struct srv *s, struct oai_limits *lim);
/* The access handler runs again after a resume (phase PH_WAIT): reply once all is done. */
enum MHD_Result cmpl_resume(struct hreq *hr);
/* Handles every queued scheduler event (one uv_async wake may stand for many). */
void cmpl_process_queue(struct srv *s);
/* Cancels the request's running choices (no-op without a completion). */
void cmpl_cancel(struct hreq *hr);
/* Ends a running request with an error: an SSE error event or, later, an error reply. */
void cmpl_abort(struct hreq *hr, int status, const char *msg);
/* Streams: a keep-alive comment when nothing was written for sse_keepalive_s. */
void cmpl_keepalive(struct hreq *hr, double now);
/* 1 when hr runs scheduler choices (for drain and deadlines). */
int cmpl_active(const struct hreq *hr);

#endif
