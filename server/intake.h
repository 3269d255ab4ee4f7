/*
 * intake — request preparation off the loop thread. oai_parse (validation, chat rendering,
 * tokenization: milliseconds to seconds for a long prompt) runs on libuv's worker pool, so
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
