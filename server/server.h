/*
 * server — gemmad's HTTP front end: an OpenAI-compatible API on one libuv loop thread
 * driving libmicrohttpd, with generation handed to the scheduler (scheduler/sched.h).
 *
 * server_run() owns everything it creates: it starts listening at once (/health answers
 * 503 "loading"), loads the model and creates the scheduler on a loader thread, serves until
 * SIGINT/SIGTERM, drains (running requests finish up to drain_timeout_s), and frees all.
 * Call it from the main thread; cfg must outlive the call.
 */
#ifndef GEMMAD_SERVER_H
#define GEMMAD_SERVER_H

#include "config/config.h"

/* Returns the process exit status: 0 after a clean drain, 1 when start-up failed. */
int server_run(const struct config *cfg);

#endif
