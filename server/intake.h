/*
 * intake — request preparation off the loop thread. oai_parse (validation, chat rendering,
 * tokenization: milliseconds to seconds for a long prompt), and any route's work on its
 * request body (intake_call: the /v1/responses and /v1/messages translations, /tokenize,
 * the embeddings' tokenization), runs on libuv's worker pool, so
 * the loop keeps serving streams, probes and metrics meanwhile; the result comes back on the
 * loop thread through the callback.
 *
 * Given the raw body instead, the job also runs jansson on it (JSON_REJECT_DUPLICATES).
 * The job holds a reference on root and a copy of the limits (whose pointers must stay valid
 * until the callback: the server's vocabulary and ids, alive until shutdown).
 *
 * Large bodies are parsed one at a time on a thread of lower CPU priority (intake.c).
 *
 * Threads: intake_* on the loop thread; the callback runs there too.
 */
#ifndef GEMMAD_SERVER_INTAKE_H
#define GEMMAD_SERVER_INTAKE_H

#include <jansson.h>

#include "server/openai.h"
#include "server/state.h"

/* Work on a request body off the loop. fn(fn_arg, root, e) runs on a worker with root the
 * body's JSON object (a body that is not one is refused before, with a 400 in e), and
 * returns 0, or -1 with e filled; it may touch only fn_arg, root and immutable server state
 * (the vocabulary, the configuration). end(arg, rc, e) then runs on the loop thread. */
typedef int (*intake_work_fn)(void *fn_arg, json_t *root, struct oai_error *e);
typedef void (*intake_end_fn)(void *arg, int rc, const struct oai_error *e);

/* Queues fn on root, or (root NULL) on the JSON request body[body_len], which must stay
 * unchanged until end; 0, or -1 when it cannot be queued (nothing taken). */
int intake_call(struct srv *s, json_t *root, const char *body, size_t body_len,
                intake_work_fn fn, void *fn_arg, intake_end_fn end, void *arg);
/* The same without a body (fn gets root NULL), on the worker pool: building and serializing
 * a large reply. */
int intake_task(struct srv *s, intake_work_fn fn, void *fn_arg, intake_end_fn end, void *arg);

/* rc 0: p is the parsed request (taken over by the callback); else e says why. */
typedef void (*intake_done_fn)(void *arg, int rc, struct oai_params *p, const struct oai_error *e);

/* Queues the parse of root, or (root NULL) of the JSON request body[body_len], which must
 * stay unchanged until the callback; 0, or -1 when it cannot be queued (nothing taken). */
int intake_parse(struct srv *s, json_t *root, const char *body, size_t body_len, int is_chat,
                 const struct oai_limits *lim, intake_done_fn done, void *arg);

/* Runs the loop until no parse is in flight, then stops the big-request thread (shutdown,
 * before requests are freed). */
void intake_wait(struct srv *s);
/* Frees what is left after the loop closed its handles (shutdown, after uv_loop_close). */
void intake_free(struct srv *s);

#endif
