/*
 * server_int — private structures shared by the server's files (http.c: event loop and
 * libmicrohttpd; routes.c: simple routes; gen.c: generation requests and SSE; openai.c:
 * request validation and JSON shapes; metrics.c: Prometheus counters).
 *
 * Threads: everything here belongs to the loop thread (the main thread, which runs libuv
 * and, from it, libmicrohttpd), except srv.qlock / srv.qhead / srv.qtail (the event queue
 * the scheduler thread fills) and srv.load_* (written by the model-loading thread before it
 * signals srv.load_async).
 */
#ifndef GEMMAD_SERVER_INT_H
#define GEMMAD_SERVER_INT_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "config/config.h"
#include "scheduler/sched.h"
#include "server/metrics.h"
#include "server/server.h"

enum srv_state { SRV_LOADING = 0, SRV_READY, SRV_DRAINING, SRV_STOPPING, SRV_FAILED };

/* Routes, indexed into metrics tables. */
enum route_id {
    ROUTE_CHAT = 0, ROUTE_COMPLETIONS, ROUTE_MODELS, ROUTE_HEALTH, ROUTE_METRICS,
    ROUTE_TOKENIZE, ROUTE_DETOKENIZE, ROUTE_NOT_FOUND, ROUTE_COUNT
};

struct hreq;
struct route;

/* One event from the scheduler thread, copied (the event's pointers die with the call). */
struct ev_item {
    struct ev_item *next;
    struct hchoice *choice;   /* the choice it belongs to */
    struct sched_event ev;    /* text / top / error point into this item */
    double t;                 /* CLOCK_MONOTONIC seconds when the scheduler emitted it */
    struct sched_top top[20];
    char data[];              /* text bytes, then the NUL-terminated error */
};

/* One TCP connection (MHD socket context). */
struct hconn {
    struct hconn *prev, *next;  /* srv.conns list */
    int fd;                     /* the socket, for shutdown() past the deadline */
    double t_phase;             /* when the current request (or the idle wait) started */
    struct hreq *cur;           /* request being read or answered; NULL between requests */
};

struct srv {
    const struct config *cfg;
    uv_loop_t *loop;
    struct MHD_Daemon *mhd;
    uv_poll_t mhd_poll;         /* readable when MHD's epoll set has events */
    uv_timer_t mhd_timer;       /* MHD_get_timeout() */
    uv_timer_t tick;            /* keep-alives, deadlines, drain */
    uv_async_t async;           /* scheduler events ready in the queue */
    uv_async_t load_async;      /* the model loader finished */
    uv_signal_t sigint, sigterm;
    int port;                   /* bound port */

    pthread_mutex_t qlock;      /* guards qhead/qtail */
    struct ev_item *qhead, *qtail;

    enum srv_state state;
    double drain_deadline;      /* DRAINING: when remaining requests are ended */
    double stop_at;             /* DRAINING: hard stop after the final events went out */
    int drain_expired;

    pthread_t load_thread;
    int load_rc;                /* written by the loader; read after pthread_join */
    char load_err[512];
    struct model *load_model;   /* the loader's results, adopted after pthread_join */
    struct sched *load_sched;
    struct model *model;        /* owned; valid once state >= READY */
    struct sched *sched;        /* owned */
    const struct tok_vocab *vocab;
    int chat_style;             /* enum chat_style */
    char model_id[256];         /* served model id */
    int64_t created;            /* unix seconds at start, for "created" */

    char **keys;                /* API keys (NULL: open) */
    int n_keys;

    struct hreq *reqs;          /* live requests (doubly linked) */
    struct hconn *conns;        /* open connections */
    uint64_t next_id;           /* request ids */
    struct metrics metrics;
    int exit_code;
};

/* One choice of a generation request: one scheduler request. */
struct hchoice {
    struct hreq *hr;
    int index;                  /* choice index in the response */
    int prompt_idx;             /* which prompt (completions with a list) */
    uint64_t sched_id;
    int submitted, done;        /* submitted to the scheduler; DONE/ERROR seen */
    enum sched_finish finish;
    char *error;                /* ERROR message (owned) */
    char *text;                 /* non-stream: the output so far (owned) */
    size_t text_len, text_cap;
    json_t *lp;                 /* non-stream logprobs entries (owned), or NULL */
    int n_tokens;               /* TOKEN events seen */
    int prompt_tokens, completion_tokens, cached_tokens;
    double t_first, t_last;     /* first / latest token (monotonic s) */
    double queue_s;
    size_t lp_offset;           /* legacy logprobs: text offset of the next token */
};

enum hreq_phase { PH_NEW = 0, PH_BODY, PH_WAIT, PH_STREAM, PH_REPLIED };

struct hreq {
    struct srv *srv;
    struct hreq *prev, *next;   /* srv.reqs */
    struct MHD_Connection *conn; /* NULL once MHD completed the request */
    struct hconn *hc;
    uint64_t id;
    char path[256];             /* raw path (no query), truncated */
    enum route_id route;
    enum hreq_phase phase;
    int status;                 /* HTTP status sent */
    double t_start, deadline;   /* monotonic seconds */
    int refs;                   /* 1 while MHD holds it + one per unfinished choice */
    int mhd_done;
    int suspended;

    char *body;                 /* request body (owned) */
    size_t body_len, body_cap;
    uint64_t body_seen;         /* bytes received, also those discarded */
    int too_large;

    /* generation */
    struct oai_params *params;  /* parsed request (owned) */
    struct hchoice *ch;         /* [n_ch] */
    int n_ch;
    int n_done;
    int stream;
    char *out;                  /* stream: SSE bytes not yet handed to MHD (owned) */
    size_t out_len, out_off, out_cap;
    int out_end;                /* stream: nothing follows what is in out */
    double last_write;          /* stream: when bytes were last queued */
    char cmpl_id[48];           /* "chatcmpl-…" / "cmpl-…" */
    int64_t created;            /* unix seconds */
    int aborted;                /* gen_abort ran */
    int client_gone;            /* the peer closed while the request was suspended */
    int fail_status;            /* non-stream: HTTP status of an error outcome */
    char fail_msg[256];
    int prompt_tokens, completion_tokens; /* totals for the log line */
};

/* http.c */
enum MHD_Result http_reply_json(struct hreq *hr, int status, json_t *body);
enum MHD_Result http_reply_text(struct hreq *hr, int status, const char *ctype, char *text,
                                size_t len);
enum MHD_Result http_reply_error(struct hreq *hr, int status, const char *type,
                                 const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
void http_wake(struct hreq *hr);
void http_unref(struct hreq *hr);

/* routes.c */
enum route_id route_lookup(const char *path, const char **allow);
enum MHD_Result route_dispatch(struct hreq *hr, const char *method);
int route_needs_auth(enum route_id r);
int route_is_post(enum route_id r);
const char *route_name(enum route_id r);

/* gen.c */
enum MHD_Result gen_start_json(struct hreq *hr, json_t *root, int is_chat);
enum MHD_Result gen_resume(struct hreq *hr);
void gen_process_queue(struct srv *s);
void gen_cancel_all(struct hreq *hr);
void gen_abort(struct hreq *hr, int status, const char *msg);
void gen_free(struct hreq *hr);
ssize_t gen_stream_read(void *cls, uint64_t pos, char *buf, size_t max);
void gen_keepalive(struct hreq *hr, double now);

#endif
