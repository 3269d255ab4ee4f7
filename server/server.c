/*
 * server — the server's life cycle. One libuv loop on the main thread owns all network I/O:
 * it drives libmicrohttpd in external-polling mode (MHD's epoll descriptor watched by a
 * uv_poll; a uv_timer follows MHD_get_timeout()), runs a periodic tick (SSE keep-alives,
 * request deadlines, drain), handles SIGINT/SIGTERM (graceful drain), and takes scheduler
 * events from a mutex-guarded queue woken by uv_async_send (completion.c drains the whole
 * queue per wake). It turns the configuration into scheduler options and loads the API keys.
 *
 * The model is loaded on a loader thread while /health already answers 503 "loading".
 * Requests themselves live in the connection layer (conn.h).
 */
#define _GNU_SOURCE
#include "server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "engine/chat.h"
#include "engine/model.h"
#include "engine/tokenizer.h"
#include "server/api_responses.h"
#include "server/completion.h"
#include "server/conn.h"
#include "server/routes.h"
#include "server/state.h"

#define SRV_MOD "http"

/* ---- driving MHD from libuv -------------------------------------------------------------- */

static void srv_mhd_run(struct srv *s);

static void srv_on_mhd_timer(uv_timer_t *t) { srv_mhd_run(t->data); }

static void srv_on_mhd_poll(uv_poll_t *p, int status, int events) {
    (void)status;
    (void)events;
    srv_mhd_run(p->data);
}

static void srv_mhd_run(struct srv *s) {
    if (!s->mhd) return;
    MHD_run(s->mhd);
    MHD_UNSIGNED_LONG_LONG to;
    if (MHD_get_timeout(s->mhd, &to) == MHD_YES)
        uv_timer_start(&s->mhd_timer, srv_on_mhd_timer, to > 60000 ? 60000 : to, 0);
    else
        uv_timer_stop(&s->mhd_timer);
}

static void srv_on_async(uv_async_t *a) {
    struct srv *s = a->data;
    cmpl_process_queue(s);
    srv_mhd_run(s);
}

/* ---- drain and stop ---------------------------------------------------------------------- */

static int srv_live_generation(struct srv *s) {
    int n = 0;
    for (struct hreq *hr = s->reqs; hr; hr = hr->next)
        if (cmpl_active(hr) && !hr->mhd_done) n++;
    return n;
}

static void srv_stop(struct srv *s) {
    if (s->state == SRV_STOPPING) return;
    LOG_I(SRV_MOD, 0, "stopping");
    s->state = SRV_STOPPING;
    uv_stop(s->loop);
}

static void srv_begin_drain(struct srv *s) {
    if (s->state == SRV_DRAINING || s->state == SRV_STOPPING) {
        /* A second signal: end the drain now. */
        s->drain_deadline = 0;
        return;
    }
    if (s->state != SRV_READY) {
        srv_stop(s);
        return;
    }
    s->state = SRV_DRAINING;
    s->drain_deadline = clock_mono_s() + s->cfg->drain_timeout_s;
    if (s->sched) sched_drain(s->sched);
    LOG_I(SRV_MOD, 0, "draining: %d generation requests running, deadline %.0f s",
          srv_live_generation(s), s->cfg->drain_timeout_s);
}

static void srv_on_signal(uv_signal_t *h, int signum) {
    struct srv *s = h->data;
    LOG_I(SRV_MOD, 0, "signal %d", signum);
    srv_begin_drain(s);
}

/* 1 when the peer has closed its end (a zero-byte peek); pipelined bytes are left alone. */
static int srv_peer_closed(int fd) {
    char b;
    if (fd < 0) return 0;
    ssize_t r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void srv_on_tick(uv_timer_t *t) {
    struct srv *s = t->data;
    double now = clock_mono_s();
    for (struct hreq *hr = s->reqs; hr; hr = hr->next) {
        if (hr->mhd_done) continue;
        if (hr->suspended && !hr->client_gone && hr->hc && srv_peer_closed(hr->hc->fd)) {
            /* MHD cannot see a suspended connection close: cancel now, let MHD clean up. */
            hr->client_gone = 1;
            cmpl_cancel(hr);
            conn_wake(hr);
            continue;
        }
        if (hr->phase == PH_STREAM) cmpl_keepalive(hr, now);
        if (now > hr->deadline && !hr->suspended && hr->phase == PH_BODY && hr->hc &&
            hr->hc->fd >= 0)
            shutdown(hr->hc->fd, SHUT_RDWR); /* slow upload past the request deadline */
        else if (now > hr->deadline + 1 && cmpl_active(hr))
            cmpl_abort(hr, 504, "request deadline exceeded");
    }
    /* Connections that dribble headers never reach the handler: close them at the deadline. */
    for (struct hconn *hc = s->conns; hc; hc = hc->next)
        if (!hc->cur && hc->fd >= 0 && now - hc->t_phase > s->cfg->request_timeout_s)
            shutdown(hc->fd, SHUT_RDWR);
    if (s->state == SRV_DRAINING) {
        int live = srv_live_generation(s);
        if (live == 0) {
            srv_stop(s);
        } else if (!s->drain_expired && now >= s->drain_deadline) {
            s->drain_expired = 1;
            s->stop_at = now + 2;
            LOG_W(SRV_MOD, 0, "drain deadline: ending %d requests", live);
            for (struct hreq *hr = s->reqs; hr; hr = hr->next)
                if (cmpl_active(hr) && !hr->mhd_done) cmpl_abort(hr, 503, "server shutting down");
        } else if (s->drain_expired && now >= s->stop_at) {
            srv_stop(s);
        }
    }
    srv_mhd_run(s);
}

/* ---- model loading ----------------------------------------------------------------------- */

static void *srv_loader(void *arg) {
    struct srv *s = arg;
    const struct config *c = s->cfg;
    struct sched_opts o;
    s->load_rc = model_load(c->model, &s->load_model, s->load_err, sizeof s->load_err);
    if (s->load_rc) goto done;
    sched_opts_default(&o);
    o.n_threads = c->threads;
    o.n_ctx = c->ctx_size;
    o.max_batch_tokens = c->max_batch_tokens;
    o.max_seqs = c->max_seqs;
    o.kv_block_size = c->kv_block_size;
    o.kv_memory_mib = (size_t)c->kv_memory_mib;
    o.kv_tokens = c->kv_tokens;
    if (kvstore_dtype_parse(c->kv_dtype, &o.kv_dtype)) o.kv_dtype = KVSTORE_F16;
    o.max_queue = c->max_queue;
    o.max_queued_tokens = c->max_queued_tokens;
    o.prefix_cache = c->prefix_cache;
    o.session_ttl_s = c->session_ttl_s;
    o.deterministic = c->deterministic;
    o.speculative = c->speculative;
    o.device = sched_device_parse(c->device);
    s->load_rc = sched_create(s->load_model, &o, &s->load_sched, s->load_err, sizeof s->load_err);
done:
    uv_async_send(&s->load_async);
    return NULL;
}

static void srv_on_loaded(uv_async_t *a) {
    struct srv *s = a->data;
    pthread_join(s->load_thread, NULL);
    s->load_thread = 0;
    s->model = s->load_model;
    s->sched = s->load_sched;
    if (s->load_rc) {
        LOG_E(SRV_MOD, 0, "cannot load the model: %s", s->load_err);
        s->exit_code = 1;
        s->state = SRV_FAILED;
        uv_stop(s->loop);
        return;
    }
    s->vocab = s->model->vocab;
    s->chat_style = s->model->cfg.arch == MODEL_ARCH_GEMMA4 ? CHAT_STYLE_GEMMA4 : CHAT_STYLE_GEMMA;
    if (s->state == SRV_LOADING) s->state = SRV_READY;
    LOG_I(SRV_MOD, 0, "model '%s' ready (%s, %d layers, vocab %d), ctx %d", s->model_id,
          model_arch_name(s->model->cfg.arch), s->model->cfg.n_layer, s->model->cfg.n_vocab,
          s->cfg->ctx_size);
    LOG_I(SRV_MOD, 0,
          "try: curl http://%s:%d/v1/chat/completions -H 'Content-Type: application/json' "
          "-d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'",
          s->cfg->host, s->port);
}

/* ---- start-up ---------------------------------------------------------------------------- */

static int srv_load_keys(struct srv *s, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        LOG_E(SRV_MOD, 0, "cannot read api_keys_file: %s", strerror(errno));
        return -1;
    }
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        size_t l = strcspn(p, "\r\n");
        while (l && (p[l - 1] == ' ' || p[l - 1] == '\t')) l--;
        p[l] = 0;
        if (!l || *p == '#') continue;
        char **k = realloc(s->keys, (size_t)(s->n_keys + 1) * sizeof *k);
        if (!k) break;
        s->keys = k;
        s->keys[s->n_keys] = strdup(p);
        if (s->keys[s->n_keys]) s->n_keys++;
    }
    fclose(f);
    if (!s->n_keys) {
        LOG_E(SRV_MOD, 0, "api_keys_file has no keys");
        return -1;
    }
    return 0;
}

static void srv_mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    buf[strcspn(buf, "\n")] = 0;
    LOG_D("mhd", 0, "%s", buf);
}

static int srv_start_mhd(struct srv *s) {
    const struct config *c = s->cfg;
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char port[16];
    snprintf(port, sizeof port, "%d", c->port);
    int g = getaddrinfo(c->host, port, &hints, &ai);
    if (g || !ai) {
        LOG_E(SRV_MOD, 0, "cannot resolve host '%s': %s", c->host, gai_strerror(g));
        return -1;
    }
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->mhd = MHD_start_daemon(
        flags, (uint16_t)c->port, NULL, NULL, route_access, s, MHD_OPTION_EXTERNAL_LOGGER,
        srv_mhd_log, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)c->max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)(c->connection_timeout_s + 0.999), MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)c->conn_memory_limit, MHD_OPTION_NOTIFY_COMPLETED, conn_completed, s,
        MHD_OPTION_NOTIFY_CONNECTION, conn_notify, s, MHD_OPTION_URI_LOG_CALLBACK,
        conn_uri_log, s,
        MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, MHD_OPTION_SIGPIPE_HANDLED_BY_APP, 1,
        MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->mhd) {
        LOG_E(SRV_MOD, 0, "cannot listen on %s:%d: %s", c->host, c->port, strerror(errno));
        return -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : c->port;
    di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    if (!di || uv_poll_init(s->loop, &s->mhd_poll, di->epoll_fd)) {
        LOG_E(SRV_MOD, 0, "cannot watch the libmicrohttpd epoll descriptor");
        return -1;
    }
    s->mhd_poll.data = s;
    uv_poll_start(&s->mhd_poll, UV_READABLE, srv_on_mhd_poll);
    return 0;
}

/* The served ids (model_alias, comma-separated), the allowed origins and the store of
 * /v1/responses conversations. Returns 0, or -1 with err filled. */
static int srv_clients_init(struct srv *s, char *err, size_t errlen) {
    const struct config *c = s->cfg;
    for (const char *p = c->model_alias; *p;) {
        size_t n = strcspn(p, ","), m = n;
        const char *q = p;
        while (m && *q == ' ') q++, m--;
        while (m && q[m - 1] == ' ') m--;
        if (m >= sizeof s->model_id) {
            snprintf(err, errlen, "model_alias: '%.40s...' is longer than %zu bytes", q,
                     sizeof s->model_id - 1);
            return -1;
        }
        if (m) {
            char **a = realloc(s->aliases, (size_t)(s->n_aliases + 1) * sizeof *a);
            if (a) s->aliases = a;
            if (!a || !(a[s->n_aliases] = strndup(q, m))) {
                snprintf(err, errlen, "out of memory");
                return -1;
            }
            s->n_aliases++;
        }
        p += n + (p[n] == ',');
    }
    if (cors_init(&s->cors, c->cors_origins, err, errlen)) return -1;
    if (resp_store_create(c->responses_store, c->responses_ttl_s, &s->rstore)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

static void srv_clients_free(struct srv *s) {
    for (int i = 0; i < s->n_aliases; i++) free(s->aliases[i]);
    free(s->aliases);
    cors_free(&s->cors);
    resp_store_destroy(s->rstore);
}

static void srv_model_id(struct srv *s) {
    const struct config *c = s->cfg;
    if (s->n_aliases) {
        snprintf(s->model_id, sizeof s->model_id, "%s", s->aliases[0]);
        return;
    }
    const char *b = strrchr(c->model, '/');
    b = b ? b + 1 : c->model;
    size_t l = strlen(b);
    if (l > 5 && !strcasecmp(b + l - 5, ".gguf")) l -= 5;
    if (l >= sizeof s->model_id) l = sizeof s->model_id - 1;
    memcpy(s->model_id, b, l);
    s->model_id[l] = 0;
}

static void srv_close_walk(uv_handle_t *h, void *arg) {
    (void)arg;
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

int server_run(const struct config *cfg) {
    struct srv *s = calloc(1, sizeof *s);
    uv_loop_t loop;
    if (!s) return 1;
    signal(SIGPIPE, SIG_IGN);
    s->cfg = cfg;
    s->exit_code = 1;
    s->created = (int64_t)time(NULL);
    metrics_init(&s->metrics);
    char cerr[256];
    if (srv_clients_init(s, cerr, sizeof cerr)) {
        LOG_E(SRV_MOD, 0, "%s", cerr);
        srv_clients_free(s);
        free(s);
        return 1;
    }
    srv_model_id(s);
    pthread_mutex_init(&s->qlock, NULL);
    if (uv_loop_init(&loop)) goto fail_loop;
    s->loop = &loop;
    if (cfg->api_keys_file[0] && srv_load_keys(s, cfg->api_keys_file)) goto fail_handles;
    uv_timer_init(&loop, &s->mhd_timer);
    uv_timer_init(&loop, &s->tick);
    uv_async_init(&loop, &s->async, srv_on_async);
    uv_async_init(&loop, &s->load_async, srv_on_loaded);
    uv_signal_init(&loop, &s->sigint);
    uv_signal_init(&loop, &s->sigterm);
    s->mhd_timer.data = s->tick.data = s->async.data = s->load_async.data = s;
    s->sigint.data = s->sigterm.data = s;
    if (srv_start_mhd(s)) goto fail_handles;
    uv_signal_start(&s->sigint, srv_on_signal, SIGINT);
    uv_signal_start(&s->sigterm, srv_on_signal, SIGTERM);
    double tick = cfg->sse_keepalive_s / 4;
    if (tick > 0.25) tick = 0.25;
    if (tick < 0.01) tick = 0.01;
    uv_timer_start(&s->tick, srv_on_tick, (uint64_t)(tick * 1000), (uint64_t)(tick * 1000));
    LOG_I(SRV_MOD, 0, "listening on http://%s:%d (model %s loading)", cfg->host, s->port,
          s->model_id);
    if (pthread_create(&s->load_thread, NULL, srv_loader, s)) {
        LOG_E(SRV_MOD, 0, "cannot start the loader thread");
        goto fail_handles;
    }
    s->exit_code = 0;
    srv_mhd_run(s);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (s->load_thread) { /* stopped while loading */
        pthread_join(s->load_thread, NULL);
        s->model = s->load_model;
        s->sched = s->load_sched;
    }
fail_handles:
    /* Resume every suspended connection, then stop MHD: completed callbacks cancel the rest. */
    for (struct hreq *hr = s->reqs; hr; hr = hr->next) conn_wake(hr);
    if (s->mhd) {
        uv_poll_stop(&s->mhd_poll);
        MHD_stop_daemon(s->mhd);
        s->mhd = NULL;
    }
    if (s->sched) {
        sched_destroy(s->sched); /* delivers DONE(CANCELLED) for everything still running */
        s->sched = NULL;
    }
    cmpl_process_queue(s);
    while (s->reqs) { /* requests whose scheduler events never came (none expected) */
        struct hreq *hr = s->reqs;
        hr->refs = 1;
        conn_unref(hr);
    }
    uv_walk(&loop, srv_close_walk, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
fail_loop:
    if (s->model) model_free(s->model);
    for (int i = 0; i < s->n_keys; i++) free(s->keys[i]);
    free(s->keys);
    srv_clients_free(s);
    pthread_mutex_destroy(&s->qlock);
    int rc = s->exit_code;
    LOG_I(SRV_MOD, 0, "exit %d", rc);
    free(s);
    return rc;
}
