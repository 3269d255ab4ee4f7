/*
 * http — the event loop. One libuv loop on the main thread owns all network I/O: it drives
 * libmicrohttpd in external-polling mode (MHD's epoll descriptor watched by a uv_poll; a
 * uv_timer follows MHD_get_timeout()), runs a periodic tick (SSE keep-alives, request
 * deadlines, drain), handles SIGINT/SIGTERM (graceful drain), and takes scheduler events
 * from a mutex-guarded queue woken by uv_async_send (gen.c drains the whole queue per wake).
 *
 * The model is loaded on a loader thread while /health already answers 503 "loading".
 *
 * Request lifetime: the URI-log callback allocates a struct hreq (refs = 1 for MHD); each
 * submitted scheduler request adds a ref, dropped at its DONE/ERROR event; the MHD
 * request-completed callback cancels what still runs and drops MHD's ref. The last ref frees.
 */
#define _GNU_SOURCE
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

#include "engine/chat.h"
#include "base/clock.h"
#include "base/log.h"
#include "engine/model.h"
#include "engine/tokenizer.h"
#include "server/openai.h"
#include "server/server_int.h"

#define HTTP_MOD "http"

/* ---- replies --------------------------------------------------------------------------- */

static void http_common_headers(struct hreq *hr, struct MHD_Response *r, int status) {
    struct srv *s = hr->srv;
    char id[24];
    snprintf(id, sizeof id, "%llu", (unsigned long long)hr->id);
    MHD_add_response_header(r, "X-Request-Id", id);
    if (status == 429 || status == 503) MHD_add_response_header(r, "Retry-After", "1");
    if (s->state >= SRV_DRAINING && hr->route != ROUTE_HEALTH)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
}

enum MHD_Result http_reply_text(struct hreq *hr, int status, const char *ctype, char *text,
                                size_t len) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    http_common_headers(hr, r, status);
    if (status == 405) {
        const char *allow = NULL;
        route_lookup(hr->path, &allow);
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow ? allow : "GET");
    }
    if (status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    hr->status = status;
    hr->phase = PH_REPLIED;
    enum MHD_Result ret = MHD_queue_response(hr->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result http_reply_json(struct hreq *hr, int status, json_t *body) {
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text) {
        text = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                      "\"param\":null,\"code\":null}}");
        status = 500;
        if (!text) return MHD_NO;
    }
    size_t len = strlen(text);
    text[len] = 0;
    /* MHD owns text now; a trailing newline makes curl output readable. */
    char *t2 = realloc(text, len + 2);
    if (t2) {
        text = t2;
        text[len++] = '\n';
        text[len] = 0;
    }
    return http_reply_text(hr, status, "application/json", text, len);
}

enum MHD_Result http_reply_error(struct hreq *hr, int status, const char *type,
                                 const char *param, const char *code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!type)
        type = status == 401   ? "authentication_error"
               : status >= 500 ? (status == 503 ? "service_unavailable" : "server_error")
               : status == 404 ? "not_found_error"
               : status == 429 ? "rate_limit_error"
                               : "invalid_request_error";
    json_t *err = json_pack("{s:o,s:s,s:o,s:o}", "message", oai_string(msg, strlen(msg)), "type",
                            type, "param", param && *param ? json_string(param) : json_null(),
                            "code", code ? json_string(code) : json_null());
    LOG_D(HTTP_MOD, hr->id, "%d %s: %s", status, param && *param ? param : "-", msg);
    return http_reply_json(hr, status, json_pack("{s:o}", "error", err));
}

/* ---- request lifetime ------------------------------------------------------------------- */

static void http_free(struct hreq *hr) {
    struct srv *s = hr->srv;
    if (hr->prev) hr->prev->next = hr->next;
    else s->reqs = hr->next;
    if (hr->next) hr->next->prev = hr->prev;
    gen_free(hr);
    free(hr->body);
    free(hr);
}

void http_unref(struct hreq *hr) {
    if (--hr->refs == 0) http_free(hr);
}

void http_wake(struct hreq *hr) {
    if (hr->suspended && !hr->mhd_done && hr->conn) {
        hr->suspended = 0;
        MHD_resume_connection(hr->conn);
    }
}

static void *http_uri_log(void *cls, const char *uri, struct MHD_Connection *conn) {
    struct srv *s = cls;
    (void)conn;
    struct hreq *hr = calloc(1, sizeof *hr);
    if (!hr) return NULL;
    hr->srv = s;
    hr->refs = 1;
    hr->id = ++s->next_id;
    hr->t_start = clock_mono_s();
    hr->deadline = hr->t_start + s->cfg->request_timeout_s;
    size_t l = strcspn(uri ? uri : "", "?");
    if (l >= sizeof hr->path) l = sizeof hr->path - 1;
    memcpy(hr->path, uri ? uri : "", l);
    hr->path[l] = 0;
    hr->next = s->reqs;
    if (s->reqs) s->reqs->prev = hr;
    s->reqs = hr;
    return hr;
}

static void http_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                           enum MHD_RequestTerminationCode toe) {
    struct srv *s = cls;
    (void)conn;
    struct hreq *hr = *con_cls;
    if (!hr) return;
    *con_cls = NULL;
    if (hr->hc) {
        hr->hc->cur = NULL;
        hr->hc->t_phase = clock_mono_s();
    }
    hr->mhd_done = 1;
    hr->conn = NULL;
    hr->suspended = 0;
    gen_cancel_all(hr);
    double total = clock_mono_s() - hr->t_start;
    int status = hr->status ? hr->status : 499; /* no response: the client went away */
    metrics_http(&s->metrics, hr->route, status);
    double ttft = -1;
    for (int i = 0; i < hr->n_ch; i++)
        if (hr->ch[i].t_first > 0 && (ttft < 0 || hr->ch[i].t_first - hr->t_start < ttft))
            ttft = hr->ch[i].t_first - hr->t_start;
    if (hr->phase != PH_NEW)
        LOG_I(HTTP_MOD, hr->id,
              "%s status=%d prompt_tokens=%d completion_tokens=%d ttft=%.3f total=%.3f%s",
              hr->path, status, hr->prompt_tokens, hr->completion_tokens, ttft < 0 ? 0 : ttft,
              total, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection lost)");
    http_unref(hr);
}

static void http_notify_conn(void *cls, struct MHD_Connection *conn, void **socket_context,
                             enum MHD_ConnectionNotificationCode code) {
    struct srv *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        struct hconn *hc = calloc(1, sizeof *hc);
        if (!hc) return;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        hc->fd = ci ? ci->connect_fd : -1;
        hc->t_phase = clock_mono_s();
        hc->next = s->conns;
        if (s->conns) s->conns->prev = hc;
        s->conns = hc;
        *socket_context = hc;
    } else {
        struct hconn *hc = *socket_context;
        if (!hc) return;
        if (hc->cur) hc->cur->hc = NULL;
        if (hc->prev) hc->prev->next = hc->next;
        else s->conns = hc->next;
        if (hc->next) hc->next->prev = hc->prev;
        free(hc);
        *socket_context = NULL;
    }
}

/* Constant-time comparison of the Bearer key with every configured key. */
static int http_auth_ok(struct srv *s, struct MHD_Connection *conn) {
    if (!s->n_keys) return 1;
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return 0;
    h += 7;
    while (*h == ' ') h++;
    size_t hl = strlen(h);
    int ok = 0;
    for (int i = 0; i < s->n_keys; i++) {
        size_t kl = strlen(s->keys[i]);
        unsigned diff = (unsigned)(kl ^ hl);
        for (size_t j = 0; j < kl; j++) diff |= (unsigned char)s->keys[i][j] ^ (unsigned char)(j < hl ? h[j] : 0);
        ok |= diff == 0;
    }
    return ok;
}

/* First call of a request: route, method, auth, content type and declared length. */
static enum MHD_Result http_first(struct hreq *hr, struct MHD_Connection *conn,
                                  const char *method) {
    struct srv *s = hr->srv;
    const char *allow = NULL;
    hr->conn = conn;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    hr->hc = ci ? ci->socket_context : NULL;
    if (hr->hc) hr->hc->cur = hr;
    hr->route = route_lookup(hr->path, &allow);
    hr->phase = PH_BODY;
    if (hr->route == ROUTE_NOT_FOUND)
        return http_reply_error(hr, 404, NULL, NULL, NULL, "no route for %s %.100s", method,
                                hr->path);
    int is_post = route_is_post(hr->route);
    int method_ok = is_post ? !strcmp(method, "POST")
                            : (!strcmp(method, "GET") || !strcmp(method, "HEAD"));
    if (!method_ok)
        return http_reply_error(hr, 405, NULL, NULL, NULL, "method %.16s not allowed on %s; use %s",
                                method, hr->path, allow);
    if (route_needs_auth(hr->route) && !http_auth_ok(s, conn))
        return http_reply_error(hr, 401, NULL, NULL, "invalid_api_key",
                                "missing or invalid API key (Authorization: Bearer KEY)");
    if (is_post) {
        const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
        if (ct && strncasecmp(ct, "application/json", 16) != 0)
            return http_reply_error(hr, 415, NULL, NULL, NULL,
                                    "Content-Type must be application/json");
        if (ct && ct[16] && ct[16] != ';' && ct[16] != ' ')
            return http_reply_error(hr, 415, NULL, NULL, NULL,
                                    "Content-Type must be application/json");
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(cl, &end, 10);
            if (errno || *end || (int64_t)v < 0 || v > (unsigned long long)s->cfg->body_limit)
                return http_reply_error(hr, 413, NULL, NULL, NULL,
                                        "request body over the limit of %lld bytes",
                                        (long long)s->cfg->body_limit);
        }
    }
    return MHD_YES;
}

static enum MHD_Result http_upload(struct hreq *hr, const char *data, size_t *size) {
    struct srv *s = hr->srv;
    size_t n = *size;
    *size = 0;
    hr->body_seen += n;
    if (clock_mono_s() > hr->deadline) return MHD_NO; /* slow sender: close */
    if (hr->too_large || hr->body_len + n > (uint64_t)s->cfg->body_limit) {
        hr->too_large = 1;
        /* Discard a little past the limit so the 413 can be sent, then hang up. */
        return hr->body_seen > (uint64_t)s->cfg->body_limit * 2 + (1u << 20) ? MHD_NO : MHD_YES;
    }
    if (hr->body_len + n + 1 > hr->body_cap) {
        size_t cap = hr->body_cap ? hr->body_cap : 4096;
        while (cap < hr->body_len + n + 1) cap *= 2;
        char *b = realloc(hr->body, cap);
        if (!b) return MHD_NO;
        hr->body = b;
        hr->body_cap = cap;
    }
    memcpy(hr->body + hr->body_len, data, n);
    hr->body_len += n;
    hr->body[hr->body_len] = 0;
    return MHD_YES;
}

static enum MHD_Result http_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                    const char *method, const char *version,
                                    const char *upload_data, size_t *upload_data_size,
                                    void **con_cls) {
    (void)cls;
    (void)url;
    (void)version;
    struct hreq *hr = *con_cls;
    if (!hr) return MHD_NO; /* allocation failed in the URI callback */
    switch (hr->phase) {
    case PH_NEW: return http_first(hr, conn, method);
    case PH_BODY:
        if (*upload_data_size) return http_upload(hr, upload_data, upload_data_size);
        if (hr->too_large)
            return http_reply_error(hr, 413, NULL, NULL, NULL,
                                    "request body over the limit of %lld bytes",
                                    (long long)hr->srv->cfg->body_limit);
        hr->phase = PH_WAIT;
        return route_dispatch(hr, method);
    case PH_WAIT: return gen_resume(hr);
    case PH_STREAM:
    case PH_REPLIED: *upload_data_size = 0; return MHD_YES;
    }
    return MHD_NO;
}

/* ---- driving MHD from libuv -------------------------------------------------------------- */

static void http_mhd_run(struct srv *s);

static void http_on_mhd_timer(uv_timer_t *t) { http_mhd_run(t->data); }

static void http_on_mhd_poll(uv_poll_t *p, int status, int events) {
    (void)status;
    (void)events;
    http_mhd_run(p->data);
}

static void http_mhd_run(struct srv *s) {
    if (!s->mhd) return;
    MHD_run(s->mhd);
    MHD_UNSIGNED_LONG_LONG to;
    if (MHD_get_timeout(s->mhd, &to) == MHD_YES)
        uv_timer_start(&s->mhd_timer, http_on_mhd_timer, to > 60000 ? 60000 : to, 0);
    else
        uv_timer_stop(&s->mhd_timer);
}

static void http_on_async(uv_async_t *a) {
    struct srv *s = a->data;
    gen_process_queue(s);
    http_mhd_run(s);
}

/* ---- drain and stop ---------------------------------------------------------------------- */

static int http_live_generation(struct srv *s) {
    int n = 0;
    for (struct hreq *hr = s->reqs; hr; hr = hr->next)
        if (hr->n_ch && !hr->mhd_done) n++;
    return n;
}

static void http_stop(struct srv *s) {
    if (s->state == SRV_STOPPING) return;
    LOG_I(HTTP_MOD, 0, "stopping");
    s->state = SRV_STOPPING;
    uv_stop(s->loop);
}

static void http_begin_drain(struct srv *s) {
    if (s->state == SRV_DRAINING || s->state == SRV_STOPPING) {
        /* A second signal: end the drain now. */
        s->drain_deadline = 0;
        return;
    }
    if (s->state != SRV_READY) {
        http_stop(s);
        return;
    }
    s->state = SRV_DRAINING;
    s->drain_deadline = clock_mono_s() + s->cfg->drain_timeout_s;
    if (s->sched) sched_drain(s->sched);
    LOG_I(HTTP_MOD, 0, "draining: %d generation requests running, deadline %.0f s",
          http_live_generation(s), s->cfg->drain_timeout_s);
}

static void http_on_signal(uv_signal_t *h, int signum) {
    struct srv *s = h->data;
    LOG_I(HTTP_MOD, 0, "signal %d", signum);
    http_begin_drain(s);
}

/* 1 when the peer has closed its end (a zero-byte peek); pipelined bytes are left alone. */
static int http_peer_closed(int fd) {
    char b;
    if (fd < 0) return 0;
    ssize_t r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void http_on_tick(uv_timer_t *t) {
    struct srv *s = t->data;
    double now = clock_mono_s();
    for (struct hreq *hr = s->reqs; hr; hr = hr->next) {
        if (hr->mhd_done) continue;
        if (hr->suspended && !hr->client_gone && hr->hc && http_peer_closed(hr->hc->fd)) {
            /* MHD cannot see a suspended connection close: cancel now, let MHD clean up. */
            hr->client_gone = 1;
            gen_cancel_all(hr);
            http_wake(hr);
            continue;
        }
        if (hr->phase == PH_STREAM) gen_keepalive(hr, now);
        if (now > hr->deadline && !hr->suspended && hr->phase == PH_BODY && hr->hc &&
            hr->hc->fd >= 0)
            shutdown(hr->hc->fd, SHUT_RDWR); /* slow upload past the request deadline */
        else if (now > hr->deadline + 1 && hr->n_ch)
            gen_abort(hr, 504, "request deadline exceeded");
    }
    /* Connections that dribble headers never reach the handler: close them at the deadline. */
    for (struct hconn *hc = s->conns; hc; hc = hc->next)
        if (!hc->cur && hc->fd >= 0 && now - hc->t_phase > s->cfg->request_timeout_s)
            shutdown(hc->fd, SHUT_RDWR);
    if (s->state == SRV_DRAINING) {
        int live = http_live_generation(s);
        if (live == 0) {
            http_stop(s);
        } else if (!s->drain_expired && now >= s->drain_deadline) {
            s->drain_expired = 1;
            s->stop_at = now + 2;
            LOG_W(HTTP_MOD, 0, "drain deadline: ending %d requests", live);
            for (struct hreq *hr = s->reqs; hr; hr = hr->next)
                if (hr->n_ch && !hr->mhd_done) gen_abort(hr, 503, "server shutting down");
        } else if (s->drain_expired && now >= s->stop_at) {
            http_stop(s);
        }
    }
    http_mhd_run(s);
}

/* ---- model loading ----------------------------------------------------------------------- */

static void *http_loader(void *arg) {
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
    if (kvs_dtype_parse(c->kv_dtype, &o.kv_dtype)) o.kv_dtype = KVS_F16;
    o.max_queue = c->max_queue;
    o.max_queued_tokens = c->max_queued_tokens;
    o.prefix_cache = c->prefix_cache;
    o.session_ttl_s = c->session_ttl_s;
    o.deterministic = c->deterministic;
    o.device = !strcmp(c->device, "cpu")    ? FWD_DEVICE_CPU
               : !strcmp(c->device, "cuda") ? FWD_DEVICE_CUDA
                                            : FWD_DEVICE_AUTO;
    s->load_rc = sched_create(s->load_model, &o, &s->load_sched, s->load_err, sizeof s->load_err);
done:
    uv_async_send(&s->load_async);
    return NULL;
}

static void http_on_loaded(uv_async_t *a) {
    struct srv *s = a->data;
    pthread_join(s->load_thread, NULL);
    s->load_thread = 0;
    s->model = s->load_model;
    s->sched = s->load_sched;
    if (s->load_rc) {
        LOG_E(HTTP_MOD, 0, "cannot load the model: %s", s->load_err);
        s->exit_code = 1;
        s->state = SRV_FAILED;
        uv_stop(s->loop);
        return;
    }
    s->vocab = s->model->vocab;
    s->chat_style = s->model->cfg.arch == MODEL_ARCH_GEMMA4 ? CHAT_STYLE_GEMMA4 : CHAT_STYLE_GEMMA;
    if (s->state == SRV_LOADING) s->state = SRV_READY;
    LOG_I(HTTP_MOD, 0, "model '%s' ready (%s, %d layers, vocab %d), ctx %d", s->model_id,
          model_arch_name(s->model->cfg.arch), s->model->cfg.n_layer, s->model->cfg.n_vocab,
          s->cfg->ctx_size);
    LOG_I(HTTP_MOD, 0,
          "try: curl http://%s:%d/v1/chat/completions -H 'Content-Type: application/json' "
          "-d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'",
          s->cfg->host, s->port);
}

/* ---- start-up ---------------------------------------------------------------------------- */

static int http_load_keys(struct srv *s, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        LOG_E(HTTP_MOD, 0, "cannot read api_keys_file: %s", strerror(errno));
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
        LOG_E(HTTP_MOD, 0, "api_keys_file has no keys");
        return -1;
    }
    return 0;
}

static void http_mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    buf[strcspn(buf, "\n")] = 0;
    LOG_D("mhd", 0, "%s", buf);
}

static int http_start_mhd(struct srv *s) {
    const struct config *c = s->cfg;
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char port[16];
    snprintf(port, sizeof port, "%d", c->port);
    int g = getaddrinfo(c->host, port, &hints, &ai);
    if (g || !ai) {
        LOG_E(HTTP_MOD, 0, "cannot resolve host '%s': %s", c->host, gai_strerror(g));
        return -1;
    }
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->mhd = MHD_start_daemon(
        flags, (uint16_t)c->port, NULL, NULL, http_handler, s, MHD_OPTION_EXTERNAL_LOGGER,
        http_mhd_log, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)c->max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)(c->connection_timeout_s + 0.999), MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)c->conn_memory_limit, MHD_OPTION_NOTIFY_COMPLETED, http_completed, s,
        MHD_OPTION_NOTIFY_CONNECTION, http_notify_conn, s, MHD_OPTION_URI_LOG_CALLBACK,
        http_uri_log, s,
        MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, MHD_OPTION_SIGPIPE_HANDLED_BY_APP, 1,
        MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->mhd) {
        LOG_E(HTTP_MOD, 0, "cannot listen on %s:%d: %s", c->host, c->port, strerror(errno));
        return -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : c->port;
    di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    if (!di || uv_poll_init(s->loop, &s->mhd_poll, di->epoll_fd)) {
        LOG_E(HTTP_MOD, 0, "cannot watch the libmicrohttpd epoll descriptor");
        return -1;
    }
    s->mhd_poll.data = s;
    uv_poll_start(&s->mhd_poll, UV_READABLE, http_on_mhd_poll);
    return 0;
}

static void http_model_id(struct srv *s) {
    const struct config *c = s->cfg;
    if (c->model_alias[0]) {
        snprintf(s->model_id, sizeof s->model_id, "%s", c->model_alias);
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

static void http_close_walk(uv_handle_t *h, void *arg) {
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
    http_model_id(s);
    pthread_mutex_init(&s->qlock, NULL);
    if (uv_loop_init(&loop)) goto fail_loop;
    s->loop = &loop;
    if (cfg->api_keys_file[0] && http_load_keys(s, cfg->api_keys_file)) goto fail_handles;
    uv_timer_init(&loop, &s->mhd_timer);
    uv_timer_init(&loop, &s->tick);
    uv_async_init(&loop, &s->async, http_on_async);
    uv_async_init(&loop, &s->load_async, http_on_loaded);
    uv_signal_init(&loop, &s->sigint);
    uv_signal_init(&loop, &s->sigterm);
    s->mhd_timer.data = s->tick.data = s->async.data = s->load_async.data = s;
    s->sigint.data = s->sigterm.data = s;
    if (http_start_mhd(s)) goto fail_handles;
    uv_signal_start(&s->sigint, http_on_signal, SIGINT);
    uv_signal_start(&s->sigterm, http_on_signal, SIGTERM);
    double tick = cfg->sse_keepalive_s / 4;
    if (tick > 0.25) tick = 0.25;
    if (tick < 0.01) tick = 0.01;
    uv_timer_start(&s->tick, http_on_tick, (uint64_t)(tick * 1000), (uint64_t)(tick * 1000));
    LOG_I(HTTP_MOD, 0, "listening on http://%s:%d (model %s loading)", cfg->host, s->port,
          s->model_id);
    if (pthread_create(&s->load_thread, NULL, http_loader, s)) {
        LOG_E(HTTP_MOD, 0, "cannot start the loader thread");
        goto fail_handles;
    }
    s->exit_code = 0;
    http_mhd_run(s);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (s->load_thread) { /* stopped while loading */
        pthread_join(s->load_thread, NULL);
        s->model = s->load_model;
        s->sched = s->load_sched;
    }
fail_handles:
    /* Resume every suspended connection, then stop MHD: completed callbacks cancel the rest. */
    for (struct hreq *hr = s->reqs; hr; hr = hr->next) http_wake(hr);
    if (s->mhd) {
        uv_poll_stop(&s->mhd_poll);
        MHD_stop_daemon(s->mhd);
        s->mhd = NULL;
    }
    if (s->sched) {
        sched_destroy(s->sched); /* delivers DONE(CANCELLED) for everything still running */
        s->sched = NULL;
    }
    gen_process_queue(s);
    while (s->reqs) { /* requests whose scheduler events never came (none expected) */
        struct hreq *hr = s->reqs;
        hr->refs = 1;
        http_unref(hr);
    }
    uv_walk(&loop, http_close_walk, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
fail_loop:
    if (s->model) model_free(s->model);
    for (int i = 0; i < s->n_keys; i++) free(s->keys[i]);
    free(s->keys);
    pthread_mutex_destroy(&s->qlock);
    int rc = s->exit_code;
    LOG_I(HTTP_MOD, 0, "exit %d", rc);
    free(s);
    return rc;
}
