/*
 * routes — the route table (exact paths: no normalisation, so `/v1/../x`, `//v1/models`,
 * `%2e%2e` and case variants are simply unknown), the access handler libmicrohttpd calls
 * for every request (method, API key, content type, body, then the route's handler), and
 * the handlers themselves: /v1/models, /health, /metrics, /tokenize, /detokenize answer at
 * once; /v1/chat/completions and /v1/completions hand over to the completion flow.
 *
 * Threads: the loop thread only.
 */
#ifndef GEMMAD_SERVER_ROUTES_H
#define GEMMAD_SERVER_ROUTES_H

#include <microhttpd.h>

#include "server/state.h"

/* The MHD access handler (cls = struct srv). */
enum MHD_Result route_access(void *cls, struct MHD_Connection *conn, const char *url,
                             const char *method, const char *version, const char *upload_data,
                             size_t *upload_data_size, void **con_cls);
/* The metrics label of a route. */
const char *route_name(enum route_id r);

#endif
