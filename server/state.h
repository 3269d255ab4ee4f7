/*
 * state — the server's shared state (struct srv): what every server file reads, created and
 * owned by the life cycle (server.c). Plain data; it sits below every server file so that
 * the connection layer, the completion flow and the routes can read it without including
 * the life cycle.
 *
 * Threads: everything here belongs to the loop thread (the main thread, which runs libuv
 * and, from it, libmicrohttpd), except srv.qlock / srv.qhead / srv.qtail (the event queue
 * the scheduler thread fills, see completion.c) and srv.load_* (written by the model-loading
 * thread before it signals srv.load_async).
 */
#ifndef GEMMAD_SERVER_STATE_H
#define GEMMAD_SERVER_STATE_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdint.h>
#include <uv.h>

#include "config/config.h"
#include "scheduler/sched.h"
#include "server/cors.h"
#include "server/metrics.h"

#define SRV_MAX_LISTEN 9 /* listen addresses (the host setting: 8) + the admin listener */

enum srv_state { SRV_LOADING = 0, SRV_READY, SRV_DRAINING, SRV_STOPPING, SRV_FAILED };
static inline const char *srv_state_name(enum srv_state st) {
    static const char *const n[] = {"loading", "ready", "draining", "stopping", "failed"};
    return (unsigned)st < sizeof n / sizeof n[0] ? n[st] : "unknown";
}

/* Routes, indexed into metrics tables. */
enum route_id {
    ROUTE_CHAT = 0, ROUTE_COMPLETIONS, ROUTE_MODELS, ROUTE_HEALTH, ROUTE_METRICS,
    ROUTE_TOKENIZE, ROUTE_DETOKENIZE, ROUTE_RESPONSES, ROUTE_MESSAGES, ROUTE_COUNT_TOKENS,
    ROUTE_EMBEDDINGS, ROUTE_UI, ROUTE_LIVE, ROUTE_MODEL, ROUTE_NOT_FOUND, ROUTE_COUNT
};

struct hreq;
struct hconn;
struct cmpl_event;
struct resp_store;
struct intake_lane;

struct srv {
    const struct config *cfg;
    uv_loop_t *loop;
    struct srv_listener {       /* one libmicrohttpd daemon per listen address */
        struct MHD_Daemon *mhd;
        uv_poll_t poll;         /* readable when the daemon's epoll set has events */
        char addr[64];          /* numeric address, for logs */
        int admin;              /* 1: the admin listener (/health, /live, /metrics only) */
    } listen[SRV_MAX_LISTEN];
    int n_listen;
    uv_timer_t mhd_timer;       /* the earliest MHD_get_timeout() of the daemons */
    uv_timer_t tick;            /* keep-alives, deadlines, drain */
    uv_async_t async;           /* scheduler events ready in the queue */
    uv_async_t load_async;      /* the model loader finished */
    uv_signal_t sigint, sigterm;
    int port;                   /* bound port */
    struct MHD_Daemon *admin;   /* the admin listener's daemon (one of listen[]), or NULL */
    int admin_port;             /* its bound port, 0 when off */

    pthread_mutex_t qlock;      /* guards qhead/qtail */
    struct cmpl_event *qhead, *qtail;

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
    struct gram_lru *gram_cache; /* owned: compiled grammars shared by requests (api_tools.c;
                                  * its own lock, used by intake threads), NULL when off */
    const struct tok_vocab *vocab;
    int chat_style;             /* enum chat_style */
    char model_id[256];         /* served model id (the first alias) */
    char **aliases;             /* [n_aliases] every id /v1/models lists (owned) */
    int n_aliases;
    struct cors cors;           /* allowed origins */
    struct resp_store *rstore;  /* stored /v1/responses conversations */
    int64_t created;            /* unix seconds at start, for "created" */

    char **keys;                /* API keys (NULL: open) */
    int n_keys;

    int n_intake;               /* requests being parsed off the loop (intake.c) */
    struct intake_lane *intake_lane; /* intake's thread for large bodies, or NULL */
    struct hreq *reqs;          /* live requests (doubly linked) */
    struct hconn *conns;        /* open connections */
    uint64_t next_id;           /* request ids */
    struct metrics metrics;
    int exit_code;
};

#endif
