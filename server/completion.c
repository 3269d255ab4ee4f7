/*
 * completion — generation requests: submit one scheduler request per choice, receive their
 * events on the loop thread (the scheduler thread only copies each event into the queue and
 * wakes the loop), and turn them into a JSON reply or an SSE stream. The JSON shapes come
 * from openai.c.
 *
 * Streams: a callback response (conn_reply_stream) reads cmpl.out; when it is empty the
 * reader suspends the connection, and new bytes resume it (conn_wake). Non-stream requests
 * suspend after submitting and are resumed when every choice is done; the access handler is
 * then called again (cmpl_resume) and queues the reply.
 */
#include "server/completion.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "engine/model.h"
#include "engine/tokenizer.h"
#include "server/api_embeddings.h"
#include "server/api_tools.h"
#include "server/completion_int.h"
#include "server/openai.h"

#define CMPL_MOD "gen"

/* One event from the scheduler thread, copied (the event's pointers die with the call). */
struct cmpl_event {
    struct cmpl_event *next;
    struct hchoice *choice;   /* the choice it belongs to */
    struct sched_event ev;    /* text / top / error point into this item */
    double t;                 /* CLOCK_MONOTONIC seconds when the scheduler emitted it */
    struct sched_top top[20];
    char data[];              /* text bytes, the NUL-terminated error, then (aligned) the
                               * embedding's floats */
};

/* ---- scheduler thread -------------------------------------------------------------------- */

static void cmpl_on_event(void *user, const struct sched_event *ev) {
    struct hchoice *c = user;
    struct srv *s = c->hr->srv;
    size_t elen = ev->kind == SCHED_EV_ERROR && ev->error ? strlen(ev->error) : 0;
    size_t tlen = ev->text ? ev->text_len : 0;
    size_t eoff = (tlen + elen + 1 + 15) & ~(size_t)15; /* embedding floats, aligned */
    size_t nemb = ev->embedding ? (size_t)ev->n_embd : 0;
    struct cmpl_event *it = malloc(sizeof *it + eoff + nemb * sizeof(float));
    if (!it) return; /* the DONE of a request is small; losing a token event only drops text */
    it->next = NULL;
    it->choice = c;
    it->ev = *ev;
    it->t = clock_mono_s();
    memcpy(it->data, ev->text ? ev->text : "", tlen);
    it->ev.text = it->data;
    it->ev.text_len = tlen;
    memcpy(it->data + tlen, elen ? ev->error : "", elen);
    it->data[tlen + elen] = 0;
    it->ev.error = it->data + tlen;
    if (nemb) {
        float *emb = (float *)(void *)(it->data + eoff);
        memcpy(emb, ev->embedding, nemb * sizeof(float));
        it->ev.embedding = emb;
    }
    int nt = ev->n_top < 0 ? 0 : ev->n_top > 20 ? 20 : ev->n_top;
    if (nt && ev->top) memcpy(it->top, ev->top, (size_t)nt * sizeof *it->top);
    it->ev.n_top = nt;
    it->ev.top = it->top;
    pthread_mutex_lock(&s->qlock);
    if (s->qtail) s->qtail->next = it;
    else s->qhead = it;
    s->qtail = it;
    pthread_mutex_unlock(&s->qlock);
    uv_async_send(&s->async);
}

/* ---- output helpers ---------------------------------------------------------------------- */

/* Grows *buf (capacity *cap, doubling from first) to hold need bytes; -1 when out of memory. */
static int cmpl_reserve(char **buf, size_t *cap, size_t need, size_t first) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : first;
    while (c < need) c *= 2;
    char *b = realloc(*buf, c);
    if (!b) return -1;
    *buf = b;
    *cap = c;
    return 0;
}

/* Backpressure: once stream_pause_bytes wait unsent (the client stopped reading: MHD and
 * the kernel buffers are full), the stream's choices leave the batch; they resume when the
 * client has taken half of it. */
static void cmpl_backpressure(struct hreq *hr) {
    struct srv *s = hr->srv;
    struct cmpl *g = hr->cmpl;
    size_t unsent = g->out_len - g->out_off, bound = (size_t)s->cfg->stream_pause_bytes;
    int want = g->paused ? unsent > bound / 2 : unsent > bound;
    if (want == g->paused || !s->sched) return;
    g->paused = want;
    for (int i = 0; i < g->n_ch; i++)
        if (g->ch[i].submitted && !g->ch[i].done) sched_pause(s->sched, g->ch[i].sched_id, want);
    LOG_D(CMPL_MOD, hr->id, "%s: %zu bytes unsent", want ? "paused" : "resumed", unsent);
}

static void cmpl_out(struct hreq *hr, const char *data, size_t len) {
    struct cmpl *g = hr->cmpl;
    if (g->out_end || hr->mhd_done) return;
    if (g->out_off && g->out_off == g->out_len) g->out_off = g->out_len = 0;
    if (cmpl_reserve(&g->out, &g->out_cap, g->out_len + len, 4096)) return;
    memcpy(g->out + g->out_len, data, len);
    g->out_len += len;
    g->last_write = clock_mono_s();
    cmpl_backpressure(hr);
    conn_wake(hr);
}

/* One SSE event "data: JSON\n\n" (takes ownership of j). */
static void cmpl_sse(struct hreq *hr, json_t *j) {
    char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!t) return;
    cmpl_out(hr, "data: ", 6);
    cmpl_out(hr, t, strlen(t));
    cmpl_out(hr, "\n\n", 2);
    free(t);
}

static void cmpl_sse_choice(struct hreq *hr, int index, const char *role, const char *text,
                            size_t len, json_t *lp, const char *finish) {
    cmpl_sse(hr, oai_chunk_choice(&hr->cmpl->resp, index, role, text, len, lp, finish));
}

/* SSE bytes a reply shape returned (freed here). */
static void cmpl_shape_out(struct hreq *hr, char *buf, size_t n) {
    if (buf) cmpl_out(hr, buf, n);
    free(buf);
}

static void cmpl_shape_delta(struct hreq *hr, const char *text, size_t len) {
    struct api_shape *sh = hr->cmpl->shape;
    size_t n = 0;
    char *buf = sh->stream_delta(sh->st, text, len, &n);
    cmpl_shape_out(hr, buf, n);
}

/* Ends a shape's stream with its closing events for r. */
static void cmpl_shape_end(struct hreq *hr, const struct api_result *r) {
    struct api_shape *sh = hr->cmpl->shape;
    size_t n = 0;
    char *buf = sh->stream_end(sh->st, r, &n);
    cmpl_shape_out(hr, buf, n);
    hr->cmpl->out_end = 1;
    conn_wake(hr);
}

static void cmpl_sse_error(struct hreq *hr, const char *type, const char *msg) {
    if (hr->cmpl->shape) {
        struct api_result r = {.finish = SCHED_FINISH_ERROR, .stop_index = -1, .error = msg};
        cmpl_shape_end(hr, &r);
        return;
    }
    cmpl_sse(hr, oai_error_body(msg, type, NULL, NULL));
    hr->cmpl->out_end = 1;
    conn_wake(hr);
}

static json_t *cmpl_usage_json(struct hreq *hr) {
    struct cmpl *g = hr->cmpl;
    struct oai_params *p = g->params;
    int pt = 0, ct = 0, cached = 0;
    for (int i = 0; i < p->n_prompts; i++) pt += p->prompt_len[i];
    for (int i = 0; i < g->n_ch; i++) {
        ct += g->ch[i].completion_tokens;
        if (i % p->n == 0) cached += g->ch[i].cached_tokens;
    }
    return oai_usage(pt, ct, cached);
}

static void cmpl_legacy_lp(struct hreq *hr, json_t *obj, const struct sched_event *ev,
                           size_t offset) {
    int n_top = ev->n_top < hr->cmpl->params->top_logprobs ? ev->n_top
                                                           : hr->cmpl->params->top_logprobs;
    oai_legacy_lp_add(hr->srv->vocab, obj, ev->token, ev->logprob, ev->top, n_top, offset);
}

/* The logprobs value for one token event: chat {"content":[entry]} or the legacy shape. */
static json_t *cmpl_lp_value(struct hreq *hr, struct hchoice *c, const struct sched_event *ev) {
    struct oai_params *p = hr->cmpl->params;
    if (!p->logprobs) return NULL;
    if (p->is_chat)
        return oai_chat_lp(json_pack(
            "[o]", oai_lp_entry(hr->srv->vocab, ev->token, ev->logprob, ev->top, ev->n_top, 1)));
    json_t *o = oai_legacy_lp_new();
    cmpl_legacy_lp(hr, o, ev, c->lp_offset);
    return o;
}

/* Bytes of one token as the legacy logprobs show it (at most 256). */
static size_t cmpl_piece(struct hreq *hr, int32_t token, char *buf) {
    int n = tok_token_to_bytes(hr->srv->vocab, token, 0, buf, 256);
    return n < 0 ? 0 : n > 256 ? 256 : (size_t)n;
}

/* Echo + logprobs: the legacy object starts with the prompt's first token, which has no
 * logprob (nothing precedes it); the others arrive as PROMPT events. */
static void cmpl_prompt_lp_start(struct hreq *hr, struct hchoice *c) {
    const struct oai_params *p = hr->cmpl->params;
    char buf[256];
    size_t n = cmpl_piece(hr, p->prompt[c->prompt_idx][0], buf);
    c->lp = oai_legacy_lp_new();
    json_array_append_new(json_object_get(c->lp, "tokens"), oai_string(buf, n));
    json_array_append_new(json_object_get(c->lp, "token_logprobs"), json_null());
    json_array_append_new(json_object_get(c->lp, "top_logprobs"), json_null());
    json_array_append_new(json_object_get(c->lp, "text_offset"), json_integer(0));
    c->lp_offset = n;
    if (p->prompt_len[c->prompt_idx] == 1) c->lp_offset = p->prompt_text_len[c->prompt_idx];
    c->prompt_pending = hr->cmpl->stream;
}

/* Stream: the echoed prompt goes out in one chunk with all its logprobs. */
static void cmpl_prompt_flush(struct hreq *hr, struct hchoice *c) {
    const struct oai_params *p = hr->cmpl->params;
    c->prompt_pending = 0;
    cmpl_sse_choice(hr, c->index, NULL, p->prompt_text[c->prompt_idx],
                    p->prompt_text_len[c->prompt_idx], c->lp, NULL);
    c->lp = NULL;
}

static void cmpl_on_prompt(struct hreq *hr, struct hchoice *c, const struct sched_event *ev) {
    const struct oai_params *p = hr->cmpl->params;
    if (!p->logprobs || !c->lp || hr->mhd_done || hr->cmpl->aborted) return;
    char buf[256];
    cmpl_legacy_lp(hr, c->lp, ev, c->lp_offset);
    c->lp_offset += cmpl_piece(hr, ev->token, buf);
    if (ev->pos == p->prompt_len[c->prompt_idx] - 1) {
        c->lp_offset = p->prompt_text_len[c->prompt_idx];
        if (c->prompt_pending) cmpl_prompt_flush(hr, c);
    }
}

static void cmpl_append_text(struct hchoice *c, const char *t, size_t n) {
    if (!n) return;
    if (cmpl_reserve(&c->text, &c->text_cap, c->text_len + n + 1, 256)) return;
    memcpy(c->text + c->text_len, t, n);
    c->text_len += n;
    c->text[c->text_len] = 0;
}

/* ---- events on the loop thread ---------------------------------------------------------- */

/* Tools stream: the output's text and call deltas, one chunk each. */
static void cmpl_tool_deltas(struct hreq *hr, struct hchoice *c, const char *t, size_t n,
                             int final) {
    json_t *d = tools_out_feed(c->to, t ? t : "", n, final);
    for (size_t i = 0; i < json_array_size(d); i++)
        cmpl_sse(hr, tools_chunk(&hr->cmpl->resp, c->index, json_incref(json_array_get(d, i))));
    json_decref(d);
}

static void cmpl_on_token(struct hreq *hr, struct hchoice *c, const struct sched_event *ev,
                          double t) {
    struct cmpl *g = hr->cmpl;
    struct oai_params *p = g->params;
    struct metrics *m = &hr->srv->metrics;
    if (c->t_first == 0) {
        c->t_first = t;
        if (hr->ttft < 0 || t - hr->t_start < hr->ttft) hr->ttft = t - hr->t_start;
        metrics_observe(m, METRICS_TTFT, t - hr->t_start);
    } else {
        metrics_observe(m, METRICS_ITL, t - c->t_last);
    }
    c->t_last = t;
    c->n_tokens++;
    m->generation_tokens++; /* per token, so a rate moves while streams run */
    if (!hr->mhd_done) hr->completion_tokens++; /* the access log counts what went out */
    if (hr->mhd_done || g->aborted) return;
    if (g->stream && g->shape) {
        if (ev->text_len) cmpl_shape_delta(hr, ev->text, ev->text_len);
    } else if (g->stream && c->to) {
        cmpl_tool_deltas(hr, c, ev->text, ev->text_len, 0);
    } else if (g->stream) {
        if (c->prompt_pending) cmpl_prompt_flush(hr, c);
        if (ev->text_len || p->logprobs)
            cmpl_sse_choice(hr, c->index, NULL, ev->text, ev->text_len,
                            cmpl_lp_value(hr, c, ev), NULL);
    } else {
        cmpl_append_text(c, ev->text, ev->text_len);
        if (p->logprobs) {
            if (!c->lp) c->lp = p->is_chat ? json_array() : oai_legacy_lp_new();
            if (p->is_chat)
                json_array_append_new(c->lp, oai_lp_entry(hr->srv->vocab, ev->token, ev->logprob,
                                                          ev->top, ev->n_top, 1));
            else
                cmpl_legacy_lp(hr, c->lp, ev, c->lp_offset);
        }
    }
    c->lp_offset += ev->text_len;
}

static void cmpl_stream_end(struct hreq *hr) {
    struct cmpl *g = hr->cmpl;
    if (g->params->include_usage) {
        json_t *j = oai_chunk(&g->resp);
        json_object_set_new(j, "choices", json_array());
        json_object_set_new(j, "usage", cmpl_usage_json(hr));
        cmpl_sse(hr, j);
    }
    cmpl_out(hr, "data: [DONE]\n\n", 14);
    g->out_end = 1;
    conn_wake(hr);
}

static void cmpl_on_done(struct hreq *hr, struct hchoice *c, const struct sched_event *ev,
                         double t) {
    struct cmpl *g = hr->cmpl;
    struct metrics *m = &hr->srv->metrics;
    c->done = 1;
    g->n_done++;
    c->finish = ev->kind == SCHED_EV_ERROR ? SCHED_FINISH_ERROR : ev->finish;
    c->prompt_tokens = ev->prompt_tokens;
    c->completion_tokens = ev->completion_tokens;
    c->cached_tokens = ev->cached_tokens;
    c->queue_s = ev->queue_s;
    c->stop_index = ev->stop_index;
    if (!hr->mhd_done && ev->completion_tokens > c->n_tokens) /* e.g. the end-of-turn token */
        hr->completion_tokens += ev->completion_tokens - c->n_tokens;
    if (g->emb && ev->embedding) {
        int e = ev->n_embd;
        emb_pool(ev->embedding, 1, e, EMB_POOL_MEAN, g->emb_vecs + (size_t)c->index * (size_t)e);
    }
    int fin = c->finish == SCHED_FINISH_STOP        ? METRICS_FIN_STOP
              : c->finish == SCHED_FINISH_LENGTH    ? METRICS_FIN_LENGTH
              : c->finish == SCHED_FINISH_CANCELLED ? METRICS_FIN_CANCELLED
              : c->finish == SCHED_FINISH_DEADLINE  ? METRICS_FIN_DEADLINE
                                                    : METRICS_FIN_ERROR;
    m->finish[fin]++;
    m->prompt_tokens += (uint64_t)(ev->prompt_tokens > 0 ? ev->prompt_tokens : 0);
    /* tokens without a TOKEN event (an end-of-generation token) count at the end */
    if (ev->completion_tokens > c->n_tokens)
        m->generation_tokens += (uint64_t)(ev->completion_tokens - c->n_tokens);
    metrics_observe(m, METRICS_E2E, t - hr->t_start);
    metrics_observe(m, METRICS_QUEUE, ev->queue_s);
    if (ev->kind == SCHED_EV_ERROR) {
        free(c->error);
        c->error = strdup(ev->error && *ev->error ? ev->error : "generation failed");
        LOG_W(CMPL_MOD, hr->id, "choice %d failed: %s", c->index, c->error ? c->error : "?");
    }
    if (hr->mhd_done || g->aborted) return;
    if (g->stream) {
        if (ev->kind == SCHED_EV_ERROR) {
            cmpl_cancel(hr);
            cmpl_sse_error(hr, "server_error", c->error ? c->error : "generation failed");
            return;
        }
        if (c->finish == SCHED_FINISH_DEADLINE) {
            cmpl_cancel(hr);
            cmpl_sse_error(hr, "timeout_error", "request deadline exceeded");
            return;
        }
        if (c->finish == SCHED_FINISH_CANCELLED) return; /* aborted by us; the error went out */
        if (g->shape) {
            if (ev->text_len) cmpl_shape_delta(hr, ev->text, ev->text_len);
            struct api_result r = {.finish = c->finish, .stop_index = c->stop_index,
                                   .prompt_tokens = c->prompt_tokens,
                                   .completion_tokens = c->completion_tokens,
                                   .cached_tokens = c->cached_tokens};
            cmpl_shape_end(hr, &r);
            return;
        }
        if (c->prompt_pending) cmpl_prompt_flush(hr, c);
        const char *fname = oai_finish_name(c->finish);
        if (c->to) {
            cmpl_tool_deltas(hr, c, ev->text, ev->text_len, 1);
            fname = tools_finish(c->to, fname);
        } else if (ev->text_len) {
            cmpl_sse_choice(hr, c->index, NULL, ev->text, ev->text_len, NULL, NULL);
        }
        cmpl_sse_choice(hr, c->index, NULL, g->params->is_chat ? NULL : "", 0, NULL, fname);
        if (g->n_done == g->n_ch) cmpl_stream_end(hr);
    } else {
        cmpl_append_text(c, ev->text, ev->text_len);
        if (ev->kind == SCHED_EV_ERROR && !g->fail_status) {
            g->fail_status = 500;
            snprintf(g->fail_msg, sizeof g->fail_msg, "%s", c->error ? c->error : "failed");
        } else if (c->finish == SCHED_FINISH_DEADLINE && !g->fail_status) {
            g->fail_status = 504;
            snprintf(g->fail_msg, sizeof g->fail_msg, "request deadline exceeded");
        }
        if (g->n_done == g->n_ch || g->fail_status) conn_wake(hr);
    }
}

void cmpl_process_queue(struct srv *s) {
    pthread_mutex_lock(&s->qlock);
    struct cmpl_event *it = s->qhead;
    s->qhead = s->qtail = NULL;
    pthread_mutex_unlock(&s->qlock);
    while (it) {
        struct cmpl_event *next = it->next;
        struct hchoice *c = it->choice;
        struct hreq *hr = c->hr;
        if (!c->submitted) {
            /* sched_submit refused it: no reference was taken, nothing to report */
        } else if (it->ev.kind == SCHED_EV_TOKEN) {
            cmpl_on_token(hr, c, &it->ev, it->t);
        } else if (it->ev.kind == SCHED_EV_PROMPT) {
            cmpl_on_prompt(hr, c, &it->ev);
        } else if (!c->done) {
            cmpl_on_done(hr, c, &it->ev, it->t);
            conn_unref(hr); /* the scheduler's reference: may free hr */
        }
        free(it);
        it = next;
    }
}

/* ---- start, resume, cancel ---------------------------------------------------------------- */

int cmpl_active(const struct hreq *hr) {
    const struct cmpl *g = hr->cmpl;
    return g && (g->n_ch || g->parsing || g->parsed);
}

void cmpl_cancel(struct hreq *hr) {
    struct srv *s = hr->srv;
    struct cmpl *g = hr->cmpl;
    if (!s->sched || !g) return;
    for (int i = 0; i < g->n_ch; i++)
        if (g->ch[i].submitted && !g->ch[i].done) sched_cancel(s->sched, g->ch[i].sched_id);
}

void cmpl_abort(struct hreq *hr, int status, const char *msg) {
    struct cmpl *g = hr->cmpl;
    if (!g || g->aborted || hr->mhd_done) return;
    g->aborted = 1;
    cmpl_cancel(hr);
    LOG_W(CMPL_MOD, hr->id, "ending request: %s", msg);
    if (!g->n_ch) { /* still being parsed: cmpl_begin answers with this */
        g->fail_status = status;
        snprintf(g->fail_msg, sizeof g->fail_msg, "%s", msg);
        return;
    }
    if (g->stream) {
        g->aborted = 0; /* let the error event through */
        cmpl_sse_error(hr, status == 504 ? "timeout_error" : "server_error", msg);
        g->aborted = 1;
    } else if (!g->fail_status) {
        g->fail_status = status;
        snprintf(g->fail_msg, sizeof g->fail_msg, "%s", msg);
        conn_wake(hr);
    }
}

void cmpl_keepalive(struct hreq *hr, double now) {
    struct cmpl *g = hr->cmpl;
    if (!g || !g->stream) return;
    if (g->out_len > g->out_off && now - g->last_read > hr->srv->cfg->write_timeout_s &&
        hr->hc && hr->hc->fd >= 0) {
        /* Bytes wait and the client took none for write_timeout_s: end it. */
        LOG_W(CMPL_MOD, hr->id, "client read nothing for %.0f s: closing the stream",
              now - g->last_read);
        cmpl_cancel(hr);
        shutdown(hr->hc->fd, SHUT_RDWR);
        g->last_read = now; /* once */
        return;
    }
    if (g->out_end) return;
    if (now - g->last_write >= hr->srv->cfg->sse_keepalive_s) cmpl_out(hr, ": keep-alive\n\n", 14);
}

static ssize_t cmpl_stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    struct hreq *hr = cls;
    struct cmpl *g = hr->cmpl;
    (void)pos;
    if (g->out_off < g->out_len) {
        size_t n = g->out_len - g->out_off;
        if (n > max) n = max;
        memcpy(buf, g->out + g->out_off, n);
        g->out_off += n;
        if (g->out_off == g->out_len) g->out_off = g->out_len = 0;
        g->last_read = clock_mono_s();
        if (g->paused) cmpl_backpressure(hr);
        return (ssize_t)n;
    }
    if (hr->client_gone) return MHD_CONTENT_READER_END_WITH_ERROR;
    if (g->out_end) return MHD_CONTENT_READER_END_OF_STREAM;
    conn_suspend(hr);
    return 0;
}

enum MHD_Result cmpl_submit_error(struct hreq *hr, int rc) {
    switch (rc) {
    case SCHED_EFULL:
        return conn_reply_error(hr, 429, NULL, NULL, NULL, "the server is busy: queue full");
    case SCHED_EDRAIN:
        return conn_reply_error(hr, 503, NULL, NULL, NULL, "the server is shutting down");
    case SCHED_ECTX:
        return conn_reply_error(hr, 400, NULL,
                                !hr->cmpl->params          ? "input"
                                : hr->cmpl->params->is_chat ? "messages"
                                                           : "prompt",
                                "context_length_exceeded", "prompt + max_tokens exceed the context");
    case SCHED_EINVAL:
        return conn_reply_error(hr, 400, NULL, NULL, NULL, "invalid request: %s",
                                sched_strerror(rc));
    default:
        return conn_reply_error(hr, rc == SCHED_ENOMEM ? 503 : 500, NULL, NULL, NULL,
                                "cannot start generation: %s", sched_strerror(rc));
    }
}

static void cmpl_on_close(struct hreq *hr, void *arg) {
    (void)arg;
    cmpl_cancel(hr);
}

static void cmpl_free(struct hreq *hr, void *arg) {
    struct cmpl *g = arg;
    for (int i = 0; i < g->n_ch; i++) {
        free(g->ch[i].text);
        free(g->ch[i].error);
        json_decref(g->ch[i].lp);
        tools_out_free(g->ch[i].to);
    }
    free(g->ch);
    oai_params_free(g->params);
    oai_params_free(g->parsed_params);
    free(g->out);
    if (g->shape) {
        g->shape->destroy(g->shape->st);
        free(g->shape);
    }
    if (g->emb) emb_req_free(g->emb);
    free(g->emb);
    if (g->job.free_ctx) g->job.free_ctx(g->job_ctx);
    free(g->emb_vecs);
    free(g->reply);
    free(g);
    hr->cmpl = NULL;
}

/* Submits choice c's request; on a refusal the choices already running are cancelled. */
int cmpl_submit_one(struct hreq *hr, struct hchoice *c, struct sched_req *r) {
    r->deadline = hr->deadline;
    /* Fairness groups: an API key's requests together, else each request on its own. */
    r->group = hr->key >= 0 ? (uint64_t)hr->key + 1 : hr->id | (1ull << 62);
    r->on_event = cmpl_on_event;
    r->user = c;
    int rc = sched_submit(hr->srv->sched, r, &c->sched_id);
    if (rc) {
        cmpl_cancel(hr);
        return rc;
    }
    c->submitted = 1;
    conn_ref(hr);
    return 0;
}

/* Submits every choice; the stream's first chunks go out before its response is queued. */
enum MHD_Result cmpl_submit(struct hreq *hr) {
    struct cmpl *g = hr->cmpl;
    struct oai_params *p = g->params;
    int n_ch = p->n * p->n_prompts;
    g->ch = calloc((size_t)n_ch, sizeof *g->ch);
    if (!g->ch) return conn_reply_error(hr, 500, NULL, NULL, NULL, "out of memory");
    g->n_ch = n_ch;
    for (int i = 0; i < p->n_prompts; i++) hr->prompt_tokens += p->prompt_len[i];
    for (int i = 0; i < n_ch; i++) {
        struct hchoice *c = &g->ch[i];
        c->hr = hr;
        c->index = i;
        c->prompt_idx = i / p->n;
        struct sched_req r = {0};
        r.prompt = p->prompt[c->prompt_idx];
        r.n_prompt = p->prompt_len[c->prompt_idx];
        r.sp = p->sp;
        if (p->n > 1 && p->sp.has_seed) r.sp.seed = p->sp.seed + (uint64_t)i;
        r.max_tokens = p->max_tokens[c->prompt_idx];
        r.stop = (const char *const *)p->stop;
        r.n_stop = p->n_stop;
        r.ignore_eos = p->ignore_eos;
        r.no_speculative = p->no_speculative;
        r.top_logprobs = p->logprobs ? p->top_logprobs : -1;
        r.session_id = p->session_id;
        const struct tools_req *tr = p->tools;
        if (tr) {
            r.grammar = tr->grammar;
            r.grammar_trigger = tr->trigger;
            if (tr->mode != TOOLS_OFF && p->is_chat && !g->shape &&
                !(c->to = tools_out_new(g->id)))
                return conn_reply_error(hr, 500, NULL, NULL, NULL, "out of memory");
            r.control_bytes = tr->native; /* Gemma 4's calls are read from its tool tokens */
            if (tr->native && c->to) tools_out_set_g4(c->to, &tr->g4);
            if (tr->native && g->shape && g->shape->to) tools_out_set_g4(g->shape->to, &tr->g4);
        }
        /* echo with max_tokens 0 scores the prompt; with logprobs the scores are reported */
        r.prompt_logprobs = p->prompt_logprobs || r.max_tokens == 0;
        if (r.prompt_logprobs && r.top_logprobs < 0) r.top_logprobs = 0;
        if (p->prompt_logprobs) cmpl_prompt_lp_start(hr, c);
        int rc = cmpl_submit_one(hr, c, &r);
        if (rc) return cmpl_submit_error(hr, rc);
    }
    LOG_D(CMPL_MOD, hr->id, "%s: %d choices, %d prompt tokens, max_tokens %d%s", hr->path, n_ch,
          hr->prompt_tokens, p->max_tokens[0], p->stream ? ", stream" : "");
    if (!p->stream) {
        hr->phase = PH_WAIT;
        conn_suspend(hr);
        return MHD_YES;
    }
    for (int i = 0; i < n_ch; i++) {
        if (g->shape) {
            size_t n = 0;
            char *buf = g->shape->stream_start(g->shape->st, p->prompt_len[0], &n);
            cmpl_shape_out(hr, buf, n);
        } else if (p->is_chat) {
            cmpl_sse_choice(hr, i, "assistant", "", 0, NULL, NULL);
        } else if (g->ch[i].prompt_pending && p->prompt_len[i / p->n] == 1) {
            cmpl_prompt_flush(hr, &g->ch[i]);
        } else if (p->echo && !g->ch[i].prompt_pending) {
            cmpl_sse_choice(hr, i, NULL, p->prompt_text[i / p->n], p->prompt_text_len[i / p->n],
                            NULL, NULL);
        }
    }
    g->last_write = g->last_read = clock_mono_s();
    if (hr->hc && hr->hc->fd >= 0) {
        /* Cap the kernel's send buffer too (its autotuning grows it to megabytes on a fast
         * path): a client that stops reading is then noticed after about
         * 3 x stream_pause_bytes + what its own receive window holds. */
        int sb = hr->srv->cfg->stream_pause_bytes;
        setsockopt(hr->hc->fd, SOL_SOCKET, SO_SNDBUF, &sb, sizeof sb);
    }
    enum MHD_Result ret =
        conn_reply_stream(hr, "text/event-stream; charset=utf-8", cmpl_stream_read, hr);
    if (ret != MHD_YES) cmpl_cancel(hr);
    return ret;
}

void cmpl_limits(struct srv *s, struct oai_limits *lim) {
    *lim = (struct oai_limits){.vocab = s->vocab, .chat_style = s->chat_style,
                               .n_ctx = s->cfg->ctx_size, .max_tokens = s->cfg->max_tokens,
                               .max_n = s->cfg->max_n, .model_id = s->model_id,
                               .model_name = s->model ? s->model->name : NULL,
                               .aliases = (const char *const *)s->aliases,
                               .n_aliases = s->n_aliases,
                               .accept_any_model = s->cfg->accept_any_model,
                               .allow_control_tokens = s->cfg->allow_control_tokens,
                               .max_tools = s->cfg->max_tools,
                               .max_schema_bytes = s->cfg->max_schema_bytes,
                               .grammar_max_stacks = s->cfg->grammar_max_stacks,
                               .grammar_max_elems = s->cfg->grammar_max_elems,
                               .json_schema_extra_keys = s->cfg->json_schema_extra_keys,
                               .json_schema_any_order = s->cfg->json_schema_any_order,
                               .gram_cache = s->gram_cache};
}

/* The request's completion state, its release registered with the connection layer. */
struct cmpl *cmpl_new(struct hreq *hr, struct api_shape *shape) {
    struct cmpl *g = calloc(1, sizeof *g);
    if (!g) {
        if (shape) {
            shape->destroy(shape->st);
            free(shape);
        }
        return NULL;
    }
    g->shape = shape;
    hr->cmpl = g;
    conn_close_add(hr, cmpl_on_close, NULL);
    conn_cleanup_add(hr, cmpl_free, g);
    return g;
}

/* Embeddings: the reply (megabytes of numbers for many inputs) is built and serialized off
 * the loop (intake_task on g, which the loop leaves alone meanwhile); the access handler
 * then queues the text. */
static int cmpl_emb_work(void *arg, json_t *root, struct oai_error *e) {
    struct cmpl *g = arg;
    (void)root;
    g->reply = conn_json_text(emb_reply(g->emb, g->emb_vecs, g->emb_dim, g->model),
                              &g->reply_len);
    return g->reply ? 0 : oai_fail(e, 500, NULL, NULL, "out of memory");
}

static void cmpl_emb_done(void *arg, int rc, const struct oai_error *e) {
    struct hreq *hr = arg;
    (void)rc;
    (void)e;
    hr->cmpl->parsing = 0;
    hr->cmpl->emb_out = 1;
    if (!hr->mhd_done && !hr->client_gone) conn_wake(hr);
    conn_unref(hr); /* the job's reference */
}

static enum MHD_Result cmpl_emb_reply(struct hreq *hr) {
    struct cmpl *g = hr->cmpl;
    if (g->emb_out) {
        if (!g->reply) return conn_reply_error(hr, 500, NULL, NULL, NULL, "out of memory");
        char *text = g->reply;
        g->reply = NULL;
        return conn_reply_text(hr, 200, "application/json", text, g->reply_len);
    }
    conn_ref(hr);
    g->parsing = 1;
    if (intake_task(hr->srv, cmpl_emb_work, g, cmpl_emb_done, hr) == 0) {
        conn_suspend(hr);
        return MHD_YES;
    }
    g->parsing = 0;
    conn_unref(hr);
    return conn_reply_json(hr, 200, emb_reply(g->emb, g->emb_vecs, g->emb_dim, g->model));
}

enum MHD_Result cmpl_resume(struct hreq *hr) {
    struct cmpl *g = hr->cmpl;
    if (g && g->parsing) { /* woken before the parse finished */
        if (hr->client_gone) return MHD_NO;
        conn_suspend(hr);
        return MHD_YES;
    }
    if (g && g->parsed && g->job.then) { /* a route's job: its answer */
        g->parsed = 0;
        if (g->fail_status)
            return conn_reply_error(hr, g->fail_status,
                                    g->fail_status == 504 ? "timeout_error" : NULL, NULL, NULL,
                                    "%s", g->fail_msg);
        return g->job.then(hr, g->job_ctx, g->parse_rc, &g->parse_err);
    }
    if (g && g->parsed) {
        g->parsed = 0;
        struct oai_params *p = g->parsed_params;
        g->parsed_params = NULL;
        return cmpl_begin(hr, g->parse_rc, p, &g->parse_err);
    }
    if (!g || (!g->params && !g->emb) || hr->client_gone) return MHD_NO; /* closes it */
    struct oai_params *p = g->params;
    if (g->fail_status)
        return conn_reply_error(hr, g->fail_status, g->fail_status == 504 ? "timeout_error" : NULL,
                                NULL, NULL, "%s", g->fail_msg);
    if (g->n_done < g->n_ch) {
        conn_suspend(hr);
        return MHD_YES;
    }
    if (g->emb) return cmpl_emb_reply(hr);
    if (g->shape) {
        const struct hchoice *c = &g->ch[0];
        struct api_result r = {.text = c->text ? c->text : "", .text_len = c->text_len,
                               .finish = c->finish, .stop_index = c->stop_index,
                               .prompt_tokens = c->prompt_tokens,
                               .completion_tokens = c->completion_tokens,
                               .cached_tokens = c->cached_tokens};
        return conn_reply_json(hr, 200, g->shape->reply(g->shape->st, &r));
    }
    json_t *choices = json_array();
    for (int i = 0; i < g->n_ch; i++) {
        struct hchoice *c = &g->ch[i];
        json_t *lp = json_null();
        if (p->logprobs)
            lp = p->is_chat ? oai_chat_lp(c->lp ? json_incref(c->lp) : NULL)
                            : (c->lp ? json_incref(c->lp) : oai_legacy_lp_new());
        int echo = !p->is_chat && p->echo;
        if (c->to) {
            json_decref(tools_out_feed(c->to, c->text ? c->text : "", c->text_len, 1));
            json_decref(lp);
            json_array_append_new(choices, tools_choice(c->to, i, oai_finish_name(c->finish)));
            continue;
        }
        json_array_append_new(
            choices, oai_choice(p->is_chat, i, echo ? p->prompt_text[c->prompt_idx] : NULL,
                                echo ? p->prompt_text_len[c->prompt_idx] : 0, c->text,
                                c->text_len, lp, oai_finish_name(c->finish)));
    }
    return conn_reply_json(hr, 200, oai_response(&g->resp, choices, cmpl_usage_json(hr)));
}
