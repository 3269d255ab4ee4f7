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
#include "scheduler/grammar.h"
#include "server/api_responses.h"
#include "server/completion.h"
#include "server/conn.h"
#include "server/intake.h"
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

/* Runs every daemon (a resumed connection may belong to any), then arms the timer for the
 * earliest timeout among them. */
static void srv_mhd_run(struct srv *s) {
    MHD_UNSIGNED_LONG_LONG best = 60000;
    int any = 0;
    for (int i = 0; i < s->n_listen; i++) {
        struct MHD_Daemon *d = s->listen[i].mhd;
        if (!d) continue;
        MHD_run(d);
        MHD_UNSIGNED_LONG_LONG to;
        if (MHD_get_timeout(d, &to) == MHD_YES) {
            any = 1;
            if (to < best) best = to;
        }
    }
    if (any)
        uv_timer_start(&s->mhd_timer, srv_on_mhd_timer, best, 0);
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
    /* Connections that dribble headers never reach the handler: a new connection, or one
     * whose next request line arrived, gets header_timeout_s for the whole header; an idle
     * kept-alive one is left to MHD's idle timeout (connection_timeout_s). */
    for (struct hconn *hc = s->conns; hc; hc = hc->next) {
        if (hc->cur || hc->fd < 0) continue;
        int waiting_header = hc->n_done == 0 || hc->line_seen;
        if ((waiting_header && now - hc->t_phase > s->cfg->header_timeout_s) ||
            now - hc->t_phase > s->cfg->request_timeout_s)
            shutdown(hc->fd, SHUT_RDWR);
    }
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
    o.prefill_stall = c->prefill_stall;
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
    o.group_max_seqs = c->group_max_seqs;
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
          s->listen[0].addr, s->port);
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

/* One libmicrohttpd daemon on `host` (a name or a numeric address, IPv6 with or without
 * brackets) at `port` (0: any free port), added to s->listen[] and driven from the loop
 * through a uv_poll on its epoll descriptor. `limit` and `per_ip` are its connection limits:
 * the admin listener has its own, so it answers while the main ones are full. *bound gets
 * the bound port. Returns the daemon, or NULL after logging why. */
static struct MHD_Daemon *srv_listen(struct srv *s, const char *host, int port, unsigned limit,
                                     unsigned per_ip, int admin, int *bound) {
    if (s->n_listen >= (admin ? SRV_MAX_LISTEN : SRV_MAX_LISTEN - 1)) {
        LOG_E(SRV_MOD, 0, "host: more than %d listen addresses", SRV_MAX_LISTEN - 1);
        return NULL;
    }
    const struct config *c = s->cfg;
    struct srv_listener *l = &s->listen[s->n_listen];
    char name[256], serv[16];
    size_t n = strlen(host);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') host++, n -= 2;
    snprintf(name, sizeof name, "%.*s", (int)n, host);
    snprintf(serv, sizeof serv, "%d", port);
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int g = getaddrinfo(name, serv, &hints, &ai);
    if (g || !ai) {
        LOG_E(SRV_MOD, 0, "cannot resolve host '%s': %s", name, gai_strerror(g));
        return NULL;
    }
    char num[INET6_ADDRSTRLEN] = "?";
    getnameinfo(ai->ai_addr, ai->ai_addrlen, num, sizeof num, NULL, 0, NI_NUMERICHOST);
    int v6 = ai->ai_family == AF_INET6;
    snprintf(l->addr, sizeof l->addr, v6 ? "[%s]" : "%s", num);
    /* Without MHD_USE_DUAL_STACK an IPv6 socket is IPv6-only, so "0.0.0.0,::" binds both. */
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (v6) flags |= MHD_USE_IPv6;
    l->mhd = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, route_access, s, MHD_OPTION_EXTERNAL_LOGGER,
        srv_mhd_log, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_CONNECTION_LIMIT, limit, MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(c->connection_timeout_s + 0.999),
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)c->conn_memory_limit,
        MHD_OPTION_NOTIFY_COMPLETED, conn_completed, s, MHD_OPTION_NOTIFY_CONNECTION,
        conn_notify, s, MHD_OPTION_URI_LOG_CALLBACK, conn_uri_log, s,
        MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, MHD_OPTION_SIGPIPE_HANDLED_BY_APP, 1,
        MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!l->mhd) {
        LOG_E(SRV_MOD, 0, "cannot listen on %s:%d: %s", l->addr, port, strerror(errno));
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(l->mhd, MHD_DAEMON_INFO_BIND_PORT);
    *bound = di ? di->port : port;
    di = MHD_get_daemon_info(l->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    if (!di || uv_poll_init(s->loop, &l->poll, di->epoll_fd)) {
        LOG_E(SRV_MOD, 0, "cannot watch the libmicrohttpd epoll descriptor");
        MHD_stop_daemon(l->mhd);
        l->mhd = NULL;
        return NULL;
    }
    l->poll.data = s;
    l->admin = admin;
    uv_poll_start(&l->poll, UV_READABLE, srv_on_mhd_poll);
    s->n_listen++;
    return l->mhd;
}

/* The admin listener keeps a few connections of its own for probes and scrapers. */
#define SRV_ADMIN_CONNECTIONS 64

/* Every address of the host list, then the admin listener when admin_port >= 0. With port 0
 * the first daemon picks a free port and the others take the same one, so all addresses
 * serve one port. */
static int srv_start_mhd(struct srv *s) {
    const struct config *c = s->cfg;
    const char *p = c->host;
    while (*p) {
        size_t n = strcspn(p, ","), m = n;
        const char *q = p;
        while (m && *q == ' ') q++, m--;
        while (m && q[m - 1] == ' ') m--;
        if (m) {
            char host[256];
            int bound;
            snprintf(host, sizeof host, "%.*s", (int)m, q);
            if (!srv_listen(s, host, s->n_listen ? s->port : c->port,
                            (unsigned)c->max_connections, (unsigned)c->max_conns_per_client, 0,
                            &bound))
                return -1;
            if (s->n_listen == 1) s->port = bound;
        }
        p += n + (p[n] == ',');
    }
    if (!s->n_listen) {
        LOG_E(SRV_MOD, 0, "host: no listen address");
        return -1;
    }
    if (c->admin_port < 0) return 0;
    const char *ah = c->admin_host[0] ? c->admin_host : s->listen[0].addr;
    s->admin = srv_listen(s, ah, c->admin_port, SRV_ADMIN_CONNECTIONS, 0, 1, &s->admin_port);
    if (!s->admin) return -1;
    LOG_I(SRV_MOD, 0, "admin listener on http://%s:%d (/health, /live, /metrics)",
          s->listen[s->n_listen - 1].addr, s->admin_port);
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
    if (cfg->grammar_cache > 0 && gram_lru_create(cfg->grammar_cache, &s->gram_cache))
        LOG_W(SRV_MOD, 0, "no grammar cache: out of memory");
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
    for (int i = 0; i < s->n_listen; i++)
        if (!s->listen[i].admin)
            LOG_I(SRV_MOD, 0, "listening on http://%s:%d (model %s loading)", s->listen[i].addr,
                  s->port, s->model_id);
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
    for (int i = 0; i < s->n_listen; i++) {
        if (!s->listen[i].mhd) continue;
        uv_poll_stop(&s->listen[i].poll);
        MHD_stop_daemon(s->listen[i].mhd);
        s->listen[i].mhd = NULL;
    }
    s->admin = NULL;
    if (s->sched) {
        sched_destroy(s->sched); /* delivers DONE(CANCELLED) for everything still running */
        s->sched = NULL;
    }
    cmpl_process_queue(s);
    intake_wait(s); /* parses in flight hold their requests */
    while (s->reqs) { /* requests whose scheduler events never came (none expected) */
        struct hreq *hr = s->reqs;
        hr->refs = 1;
        conn_unref(hr);
    }
    uv_walk(&loop, srv_close_walk, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    intake_free(s);
fail_loop:
    gram_lru_destroy(s->gram_cache); /* after intake_free: no parse uses it any more */
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
