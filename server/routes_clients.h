/*
 * routes_clients — the route handlers for more kinds of clients: the Responses API, the
 * Anthropic Messages API (and count_tokens), embeddings, the built-in chat page, and CORS
 * preflights. The request shapes are translated into chat requests (api_*.c) and run through
 * the completion flow, which renders the reply through the shape (struct api_shape).
 *
 * Threads: the loop thread, called from the access handler (routes.c); the *_work
 * functions run on intake's workers.
 */
#ifndef GEMMAD_SERVER_ROUTES_CLIENTS_H
#define GEMMAD_SERVER_ROUTES_CLIENTS_H

#include <jansson.h>
#include <microhttpd.h>

#include "server/conn.h"

/* Each works on the request body off the loop thread (JSON, translation, rendering and
 * tokenizing: cmpl_start_job), replies itself on every error. */
enum MHD_Result route_responses(struct hreq *hr);
enum MHD_Result route_messages(struct hreq *hr, int count_only);
enum MHD_Result route_embeddings(struct hreq *hr);
/* GET /: the chat page (404 with no_ui). */
enum MHD_Result route_ui(struct hreq *hr);
/* OPTIONS on any route: a CORS preflight. */
enum MHD_Result route_preflight(struct hreq *hr, struct MHD_Connection *conn);
/* Sets the request's error shape from its route (Anthropic's on /v1/messages*). */
void route_error_shape(struct hreq *hr);

#endif
