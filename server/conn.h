/*
 * conn — the connection layer: TCP connections (struct hconn), HTTP requests (struct hreq)
 * and their life: allocation when MHD sees a URI, the body buffer, replies, suspend/resume,
 * the reference count, and per-request hooks.
 *
 * Request lifetime: conn_uri_log allocates a struct hreq (refs = 1 for MHD). Whoever
 * attaches state to a request registers how to release it: conn_close_add(hr, fn, arg) runs
 * fn when MHD is done with the request (the reply went out or the client went away; used to
 * cancel work still running for it), conn_cleanup_add(hr, fn, arg) runs fn when the last
 * reference is dropped, just before the request is freed. Each further owner (one per
 * running scheduler request) takes a reference with conn_ref and drops it with conn_unref.
 * Hooks run once, newest first.
 *
 * Threads: the loop thread only.
 */
#ifndef GEMMAD_SERVER_CONN_H
#define GEMMAD_SERVER_CONN_H

#include <jansson.h>
#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>

#include "server/openai.h"
#include "server/state.h"

/* One TCP connection (MHD socket context). */
struct hconn {
    struct hconn *prev, *next;  /* srv.conns list */
    int fd;                     /* the socket, for shutdown() past the deadline */
    double t_phase;             /* when the current request (or the idle wait) started */
    struct hreq *cur;           /* request being read or answered; NULL between requests */
    int n_done;                 /* requests completed on this connection */
    int line_seen;              /* the request line of the next request arrived */
};

enum hreq_phase {
    PH_NEW = 0,                 /* URI seen, headers not yet checked */
    PH_BODY,                    /* receiving the body */
    PH_WAIT,                    /* handed to a route that answers later (after a resume) */
    PH_STREAM,                  /* a streamed response is queued */
    PH_REPLIED                  /* a whole response is queued */
};

typedef void (*conn_hook_fn)(struct hreq *hr, void *arg);
#define CONN_MAX_HOOKS 4
struct conn_hook {
    conn_hook_fn fn;
    void *arg;
};

struct cmpl;

struct hreq {
    struct srv *srv;
    struct hreq *prev, *next;   /* srv.reqs */
    struct MHD_Connection *conn; /* NULL once MHD completed the request */
    struct hconn *hc;
    uint64_t id;
    char path[256];             /* raw path (no query), truncated */
    enum route_id route;
    const char *allow;          /* the route's methods, for a 405's Allow header */
    enum hreq_phase phase;
    int status;                 /* HTTP status sent */
    double t_start, deadline;   /* monotonic seconds */
    int refs;                   /* 1 while MHD holds it + one per other owner */
    int mhd_done;
    int suspended;
    int client_gone;            /* the peer closed while the request was suspended */
    int key;                    /* index of the API key it used, -1 for none */

    char *body;                 /* request body (owned) */
    size_t body_len, body_cap;
    uint64_t body_seen;         /* bytes received, also those discarded */
    int too_large;
    int replied_raw;            /* a 413 went straight to the socket (chunked body) */

    struct conn_hook on_close[CONN_MAX_HOOKS], cleanup[CONN_MAX_HOOKS];
    int n_on_close, n_cleanup;

    struct cmpl *cmpl;          /* completion state (completion.c), or NULL */
    char origin[256];           /* the request's Origin header, "" for none */
    /* The route's error shape (NULL: OpenAI's) and a renaming of the fields of the chat
     * request it was translated into (NULL: none); both set by the route. */
    json_t *(*error_body)(const struct oai_error *e);
    void (*map_error)(struct oai_error *e);
    /* For the access log line, filled by whoever runs the request. */
    int prompt_tokens, completion_tokens;
    double ttft;                /* seconds to the first token; < 0: none */
};

/* Hooks (see above). A request has room for CONN_MAX_HOOKS of each kind: more is a
 * programmer error (asserted). */
void conn_close_add(struct hreq *hr, conn_hook_fn fn, void *arg);
void conn_cleanup_add(struct hreq *hr, conn_hook_fn fn, void *arg);
void conn_ref(struct hreq *hr);
/* Drops one reference; the last one runs the cleanup hooks and frees hr. */
void conn_unref(struct hreq *hr);

/* Replies. text is malloc'd and taken over; body is taken over. */
enum MHD_Result conn_reply_text(struct hreq *hr, int status, const char *ctype, char *text,
                                size_t len);
enum MHD_Result conn_reply_json(struct hreq *hr, int status, json_t *body);
/* body (taken) as conn_reply_json's text (compact, a newline at the end; *len set), or NULL
 * when out of memory. Any thread: for large replies serialized off the loop. */
char *conn_json_text(json_t *body, size_t *len);
/* An OpenAI error body; type NULL: derived from the status. */
enum MHD_Result conn_reply_error(struct hreq *hr, int status, const char *type,
                                 const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Access-Control-Allow-Origin (and Vary) when the request's Origin is allowed; every reply
 * of the connection layer carries them, other responses call this. */
void conn_cors_headers(struct hreq *hr, struct MHD_Response *r);
/* A 200 response of unknown length read through reader(cls, …): phase PH_STREAM. */
enum MHD_Result conn_reply_stream(struct hreq *hr, const char *ctype,
                                  MHD_ContentReaderCallback reader, void *cls);

/* Pause the connection until conn_wake (no-op when already paused or MHD is done). */
void conn_suspend(struct hreq *hr);
void conn_wake(struct hreq *hr);

/* Appends upload bytes to the body (bounded by body_limit and the request deadline);
 * MHD_NO hangs up. */
enum MHD_Result conn_body_append(struct hreq *hr, const char *data, size_t *size);

/* libmicrohttpd callbacks (cls = struct srv). */
void *conn_uri_log(void *cls, const char *uri, struct MHD_Connection *conn);
void conn_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                    enum MHD_RequestTerminationCode toe);
void conn_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                 enum MHD_ConnectionNotificationCode code);

#endif
