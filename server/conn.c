/*
 * conn — requests and connections: replies with the common headers, the reference count
 * and hooks, the request body, and MHD's per-connection and per-request callbacks.
 */
#include "server/conn.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "base/clock.h"
#include "base/log.h"
#include "server/openai.h"

#define CONN_MOD "http"

/* ---- replies --------------------------------------------------------------------------- */

static void conn_common_headers(struct hreq *hr, struct MHD_Response *r, int status) {
    struct srv *s = hr->srv;
    char id[24];
    snprintf(id, sizeof id, "%llu", (unsigned long long)hr->id);
    MHD_add_response_header(r, "X-Request-Id", id);
    if (status == 429 || status == 503) MHD_add_response_header(r, "Retry-After", "1");
    if (s->state >= SRV_DRAINING && hr->route != ROUTE_HEALTH)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    conn_cors_headers(hr, r);
}

void conn_cors_headers(struct hreq *hr, struct MHD_Response *r) {
    const char *allow = cors_allow(&hr->srv->cors, hr->origin);
    if (!allow) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", allow);
    if (strcmp(allow, "*") != 0) MHD_add_response_header(r, "Vary", "Origin");
}

enum MHD_Result conn_reply_text(struct hreq *hr, int status, const char *ctype, char *text,
                                size_t len) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    conn_common_headers(hr, r, status);
    if (status == 405)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, hr->allow ? hr->allow : "GET");
    if (status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    hr->status = status;
    hr->phase = PH_REPLIED;
    enum MHD_Result ret = MHD_queue_response(hr->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

char *conn_json_text(json_t *body, size_t *len) {
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text) return NULL;
    *len = strlen(text);
    /* a trailing newline makes curl output readable */
    char *t2 = realloc(text, *len + 2);
    if (t2) {
        text = t2;
        text[(*len)++] = '\n';
        text[*len] = 0;
    }
    return text;
}

enum MHD_Result conn_reply_json(struct hreq *hr, int status, json_t *body) {
    size_t len = 0;
    char *text = conn_json_text(body, &len);
    if (!text) {
        text = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                      "\"param\":null,\"code\":null}}");
        status = 500;
        if (!text) return MHD_NO;
        len = strlen(text);
    }
    return conn_reply_text(hr, status, "application/json", text, len); /* MHD owns text now */
}

/* The error body in the route's shape (OpenAI's unless the route set another). */
static json_t *conn_error_json(struct hreq *hr, int status, const char *type, const char *param,
                               const char *code, const char *msg) {
    if (!type)
        type = status == 401   ? "authentication_error"
               : status >= 500 ? (status == 503 ? "service_unavailable" : "server_error")
               : status == 404 ? "not_found_error"
               : status == 429 ? "rate_limit_error"
                               : "invalid_request_error";
    struct oai_error e = {.status = status, .type = type, .code = code};
    snprintf(e.param, sizeof e.param, "%s", param ? param : "");
    snprintf(e.msg, sizeof e.msg, "%s", msg);
    if (hr->map_error) hr->map_error(&e);
    LOG_D(CONN_MOD, hr->id, "%d %s: %s", status, e.param[0] ? e.param : "-", e.msg);
    if (hr->error_body) return hr->error_body(&e);
    return oai_error_body(e.msg, type, e.param, code);
}

enum MHD_Result conn_reply_error(struct hreq *hr, int status, const char *type,
                                 const char *param, const char *code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return conn_reply_json(hr, status, conn_error_json(hr, status, type, param, code, msg));
}

/* A chunked body passed the limit. libmicrohttpd (0.9.x) refuses a response queued while a
 * body is still arriving, and hanging up mute leaves the client guessing, so the 413 is
 * written to the socket here, followed by a FIN (shutdown of our sending side); the rest of
 * the body is then read and discarded (bounded, see conn_body_append) so that closing does
 * not reset the connection under the reply. */
static void conn_send_413_now(struct hreq *hr) {
    if (!hr->hc || hr->hc->fd < 0) return;
    char *body = json_dumps(conn_error_json(hr, 413, NULL, NULL, NULL, "request body over the "
                                            "limit"), JSON_COMPACT);
    if (!body) return;
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 413 Content Too Large\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\nX-Request-Id: %llu\r\n\r\n",
                      strlen(body) + 1, (unsigned long long)hr->id);
    struct iovec iov[3] = {{head, (size_t)hl}, {body, strlen(body)}, {"\n", 1}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 3};
    if (sendmsg(hr->hc->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) > 0) {
        shutdown(hr->hc->fd, SHUT_WR);
        hr->status = 413;
        hr->replied_raw = 1;
    }
    free(body);
}

enum MHD_Result conn_reply_stream(struct hreq *hr, const char *ctype,
                                  MHD_ContentReaderCallback reader, void *cls) {
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, reader, cls, NULL);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    char rid[24];
    snprintf(rid, sizeof rid, "%llu", (unsigned long long)hr->id);
    MHD_add_response_header(r, "X-Request-Id", rid);
    conn_cors_headers(hr, r);
    hr->phase = PH_STREAM;
    hr->status = 200;
    enum MHD_Result ret = MHD_queue_response(hr->conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

void conn_suspend(struct hreq *hr) {
    if (hr->conn && !hr->suspended && !hr->mhd_done) {
        hr->suspended = 1;
        MHD_suspend_connection(hr->conn);
    }
}

void conn_wake(struct hreq *hr) {
    if (hr->suspended && !hr->mhd_done && hr->conn) {
        hr->suspended = 0;
        MHD_resume_connection(hr->conn);
    }
}

/* ---- request lifetime ------------------------------------------------------------------- */

static void conn_hook_add(struct conn_hook *h, int *n, conn_hook_fn fn, void *arg) {
    assert(*n < CONN_MAX_HOOKS);
    h[*n].fn = fn;
    h[*n].arg = arg;
    (*n)++;
}

void conn_close_add(struct hreq *hr, conn_hook_fn fn, void *arg) {
    conn_hook_add(hr->on_close, &hr->n_on_close, fn, arg);
}

void conn_cleanup_add(struct hreq *hr, conn_hook_fn fn, void *arg) {
    conn_hook_add(hr->cleanup, &hr->n_cleanup, fn, arg);
}

/* Runs and forgets the hooks, newest first (a hook may not add hooks of its own kind). */
static void conn_run_hooks(struct hreq *hr, struct conn_hook *h, int *n) {
    while (*n > 0) {
        struct conn_hook k = h[--*n];
        k.fn(hr, k.arg);
    }
}

static void conn_free(struct hreq *hr) {
    struct srv *s = hr->srv;
    if (hr->prev) hr->prev->next = hr->next;
    else s->reqs = hr->next;
    if (hr->next) hr->next->prev = hr->prev;
    conn_run_hooks(hr, hr->cleanup, &hr->n_cleanup);
    free(hr->body);
    free(hr);
}

void conn_ref(struct hreq *hr) { hr->refs++; }

void conn_unref(struct hreq *hr) {
    if (--hr->refs == 0) conn_free(hr);
}

void *conn_uri_log(void *cls, const char *uri, struct MHD_Connection *conn) {
    struct srv *s = cls;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct hconn *hc = ci ? ci->socket_context : NULL;
    if (hc && !hc->line_seen) {
        /* A later request on a kept-alive connection: its header clock starts now. */
        hc->line_seen = 1;
        if (hc->n_done) hc->t_phase = clock_mono_s();
    }
    struct hreq *hr = calloc(1, sizeof *hr);
    if (!hr) return NULL;
    hr->srv = s;
    hr->refs = 1;
    hr->id = ++s->next_id;
    hr->t_start = clock_mono_s();
    hr->deadline = hr->t_start + s->cfg->request_timeout_s;
    hr->ttft = -1;
    hr->key = -1;
    size_t l = strcspn(uri ? uri : "", "?");
    if (l >= sizeof hr->path) l = sizeof hr->path - 1;
    memcpy(hr->path, uri ? uri : "", l);
    hr->path[l] = 0;
    hr->next = s->reqs;
    if (s->reqs) s->reqs->prev = hr;
    s->reqs = hr;
    return hr;
}

void conn_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                    enum MHD_RequestTerminationCode toe) {
    struct srv *s = cls;
    (void)conn;
    struct hreq *hr = *con_cls;
    if (!hr) return;
    *con_cls = NULL;
    if (hr->hc) {
        hr->hc->cur = NULL;
        hr->hc->t_phase = clock_mono_s();
        hr->hc->n_done++;
        hr->hc->line_seen = 0;
    }
    hr->mhd_done = 1;
    hr->conn = NULL;
    hr->suspended = 0;
    conn_run_hooks(hr, hr->on_close, &hr->n_on_close);
    double total = clock_mono_s() - hr->t_start;
    int status = hr->status ? hr->status : 499; /* no response: the client went away */
    metrics_http(&s->metrics, hr->route, status);
    if (hr->phase != PH_NEW)
        LOG_I(CONN_MOD, hr->id,
              "%s status=%d prompt_tokens=%d completion_tokens=%d ttft=%.3f total=%.3f%s",
              hr->path, status, hr->prompt_tokens, hr->completion_tokens,
              hr->ttft < 0 ? 0 : hr->ttft, total,
              toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection lost)");
    conn_unref(hr);
}

void conn_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
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

enum MHD_Result conn_body_append(struct hreq *hr, const char *data, size_t *size) {
    struct srv *s = hr->srv;
    size_t n = *size;
    *size = 0;
    hr->body_seen += n;
    if (clock_mono_s() > hr->deadline) return MHD_NO; /* slow sender: close */
    if (hr->too_large || hr->body_len + n > (uint64_t)s->cfg->body_limit) {
        if (!hr->too_large) conn_send_413_now(hr);
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
