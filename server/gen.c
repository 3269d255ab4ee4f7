/*
 * gen — generation requests: submit one scheduler request per choice, receive their events
 * on the loop thread (the scheduler thread only copies each event into the queue and wakes
 * the loop), and turn them into a JSON reply or an SSE stream.
 *
 * Streams: a callback response (MHD_create_response_from_callback) reads hr->out; when it is
 * empty the reader suspends the connection, and new bytes resume it (http_wake). Non-stream
 * requests suspend after submitting and are resumed when every choice is done; the access
 * handler is then called again (gen_resume) and queues the reply.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "engine/tokenizer.h"
#include "server/openai.h"
#include "server/server_int.h"

#define GEN_MOD "gen"

/* ---- scheduler thread -------------------------------------------------------------------- */

static void gen_on_event(void *user, const struct sched_event *ev) {
    struct hchoice *c = user;
    struct srv *s = c->hr->srv;
    size_t elen = ev->kind == SCHED_EV_ERROR && ev->error ? strlen(ev->error) : 0;
    size_t tlen = ev->text ? ev->text_len : 0;
    struct ev_item *it = malloc(sizeof *it + tlen + elen + 1);
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

static void gen_out(struct hreq *hr, const char *data, size_t len) {
    if (hr->out_end || hr->mhd_done) return;
    if (hr->out_off && hr->out_off == hr->out_len) hr->out_off = hr->out_len = 0;
    if (hr->out_len + len > hr->out_cap) {
        size_t cap = hr->out_cap ? hr->out_cap : 4096;
        while (cap < hr->out_len + len) cap *= 2;
        char *b = realloc(hr->out, cap);
        if (!b) return;
        hr->out = b;
        hr->out_cap = cap;
    }
    memcpy(hr->out + hr->out_len, data, len);
    hr->out_len += len;
    hr->last_write = clock_mono_s();
    http_wake(hr);
}

/* One SSE event "data: JSON\n\n" (takes ownership of j). */
static void gen_sse(struct hreq *hr, json_t *j) {
    char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!t) return;
    gen_out(hr, "data: ", 6);
    gen_out(hr, t, strlen(t));
    gen_out(hr, "\n\n", 2);
    free(t);
}

static json_t *gen_chunk_base(struct hreq *hr) {
    struct srv *s = hr->srv;
    json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:s}", "id", hr->cmpl_id, "object",
                          hr->params->is_chat ? "chat.completion.chunk" : "text_completion",
                          "created", (json_int_t)hr->created, "model", s->model_id,
                          "system_fingerprint", "gemmad");
    if (hr->params->include_usage) json_object_set_new(j, "usage", json_null());
    return j;
}

/* A chunk with one choice: delta text (chat) or text (completions). */
static void gen_sse_choice(struct hreq *hr, int index, const char *role, const char *text,
                           size_t len, json_t *lp, const char *finish) {
    json_t *j = gen_chunk_base(hr);
    json_t *ch;
    if (hr->params->is_chat) {
        json_t *delta = json_object();
        if (role) json_object_set_new(delta, "role", json_string(role));
        if (text) json_object_set_new(delta, "content", oai_string(text, len));
        ch = json_pack("{s:i,s:o}", "index", index, "delta", delta);
    } else {
        ch = json_pack("{s:i,s:o}", "index", index, "text", oai_string(text ? text : "", len));
    }
    json_object_set_new(ch, "logprobs", lp ? lp : json_null());
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(j, "choices", json_pack("[o]", ch));
    gen_sse(hr, j);
}

static void gen_sse_error(struct hreq *hr, const char *type, const char *msg) {
    gen_sse(hr, json_pack("{s:{s:o,s:s,s:n,s:n}}", "error", "message",
                          oai_string(msg, strlen(msg)), "type", type, "param", "code"));
    hr->out_end = 1;
    http_wake(hr);
}

static void gen_usage(struct hreq *hr, int *prompt, int *completion, int *cached) {
    struct oai_params *p = hr->params;
    *prompt = *completion = *cached = 0;
    for (int i = 0; i < p->n_prompts; i++) *prompt += p->prompt_len[i];
    for (int i = 0; i < hr->n_ch; i++) {
        *completion += hr->ch[i].completion_tokens;
        if (i % p->n == 0) *cached += hr->ch[i].cached_tokens;
    }
}

static json_t *gen_usage_json(struct hreq *hr) {
    int pt, ct, cached;
    gen_usage(hr, &pt, &ct, &cached);
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", pt, "completion_tokens", ct,
                     "total_tokens", pt + ct, "prompt_tokens_details", "cached_tokens", cached);
}

/* Legacy /v1/completions logprobs of one token, appended to obj's four arrays. */
static void gen_legacy_lp(struct hreq *hr, json_t *obj, const struct sched_event *ev,
                          size_t offset) {
    const struct tok_vocab *v = hr->srv->vocab;
    char buf[256];
    int n = tok_token_to_bytes(v, ev->token, 0, buf, (int)sizeof buf);
    n = n < 0 ? 0 : n > (int)sizeof buf ? (int)sizeof buf : n;
    json_array_append_new(json_object_get(obj, "tokens"), oai_string(buf, (size_t)n));
    json_array_append_new(json_object_get(obj, "token_logprobs"), json_real(ev->logprob));
    json_t *top = json_object();
    for (int i = 0; i < ev->n_top && i < hr->params->top_logprobs; i++) {
        int m = tok_token_to_bytes(v, ev->top[i].token, 0, buf, (int)sizeof buf - 1);
        m = m < 0 ? 0 : m > (int)sizeof buf - 1 ? (int)sizeof buf - 1 : m;
        json_t *k = oai_string(buf, (size_t)m);
        if (k) json_object_set_new(top, json_string_value(k), json_real(ev->top[i].logprob));
        json_decref(k);
    }
    json_array_append_new(json_object_get(obj, "top_logprobs"), top);
    json_array_append_new(json_object_get(obj, "text_offset"), json_integer((json_int_t)offset));
}

static json_t *gen_legacy_lp_new(void) {
    return json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs", "top_logprobs",
                     "text_offset");
}

/* The logprobs value for one token event: chat {"content":[entry]} or the legacy shape. */
static json_t *gen_lp_value(struct hreq *hr, struct hchoice *c, const struct sched_event *ev) {
    if (!hr->params->logprobs) return NULL;
    if (hr->params->is_chat)
        return json_pack("{s:[o],s:n}", "content",
                         oai_lp_entry(hr->srv->vocab, ev->token, ev->logprob, ev->top, ev->n_top,
                                      1),
                         "refusal");
    json_t *o = gen_legacy_lp_new();
    gen_legacy_lp(hr, o, ev, c->lp_offset);
    return o;
}

static void gen_append_text(struct hchoice *c, const char *t, size_t n) {
    if (!n) return;
    if (c->text_len + n + 1 > c->text_cap) {
        size_t cap = c->text_cap ? c->text_cap : 256;
        while (cap < c->text_len + n + 1) cap *= 2;
        char *b = realloc(c->text, cap);
        if (!b) return;
        c->text = b;
        c->text_cap = cap;
    }
    memcpy(c->text + c->text_len, t, n);
    c->text_len += n;
    c->text[c->text_len] = 0;
}

/* ---- events on the loop thread ---------------------------------------------------------- */

static void gen_on_token(struct hreq *hr, struct hchoice *c, const struct sched_event *ev,
                         double t) {
    struct metrics *m = &hr->srv->metrics;
    if (c->t_first == 0) {
        c->t_first = t;
        metrics_observe(m, METRICS_TTFT, t - hr->t_start);
    } else {
        metrics_observe(m, METRICS_ITL, t - c->t_last);
    }
    c->t_last = t;
    c->n_tokens++;
    if (hr->mhd_done || hr->aborted) return;
    if (hr->stream) {
        if (ev->text_len || hr->params->logprobs)
            gen_sse_choice(hr, c->index, NULL, ev->text, ev->text_len, gen_lp_value(hr, c, ev),
                           NULL);
    } else {
        gen_append_text(c, ev->text, ev->text_len);
        if (hr->params->logprobs) {
            if (!c->lp)
                c->lp = hr->params->is_chat ? json_array() : gen_legacy_lp_new();
            if (hr->params->is_chat)
                json_array_append_new(c->lp, oai_lp_entry(hr->srv->vocab, ev->token, ev->logprob,
                                                          ev->top, ev->n_top, 1));
            else
                gen_legacy_lp(hr, c->lp, ev, c->lp_offset);
        }
    }
    c->lp_offset += ev->text_len;
}

static void gen_stream_end(struct hreq *hr) {
    if (hr->params->include_usage) {
        json_t *j = gen_chunk_base(hr);
        json_object_set_new(j, "choices", json_array());
        json_object_set_new(j, "usage", gen_usage_json(hr));
        gen_sse(hr, j);
    }
    gen_out(hr, "data: [DONE]\n\n", 14);
    hr->out_end = 1;
    http_wake(hr);
}

static void gen_on_done(struct hreq *hr, struct hchoice *c, const struct sched_event *ev,
                        double t) {
    struct metrics *m = &hr->srv->metrics;
    c->done = 1;
    hr->n_done++;
    c->finish = ev->kind == SCHED_EV_ERROR ? SCHED_FINISH_ERROR : ev->finish;
    c->prompt_tokens = ev->prompt_tokens;
    c->completion_tokens = ev->completion_tokens;
    c->cached_tokens = ev->cached_tokens;
    c->queue_s = ev->queue_s;
    hr->completion_tokens += ev->completion_tokens;
    int fin = c->finish == SCHED_FINISH_STOP       ? METRICS_FIN_STOP
              : c->finish == SCHED_FINISH_LENGTH   ? METRICS_FIN_LENGTH
              : c->finish == SCHED_FINISH_CANCELLED ? METRICS_FIN_CANCELLED
              : c->finish == SCHED_FINISH_DEADLINE ? METRICS_FIN_DEADLINE
                                                   : METRICS_FIN_ERROR;
    m->finish[fin]++;
    m->prompt_tokens += (uint64_t)(ev->prompt_tokens > 0 ? ev->prompt_tokens : 0);
    m->generation_tokens += (uint64_t)(ev->completion_tokens > 0 ? ev->completion_tokens : 0);
    metrics_observe(m, METRICS_E2E, t - hr->t_start);
    metrics_observe(m, METRICS_QUEUE, ev->queue_s);
    if (ev->kind == SCHED_EV_ERROR) {
        free(c->error);
        c->error = strdup(ev->error && *ev->error ? ev->error : "generation failed");
        LOG_W(GEN_MOD, hr->id, "choice %d failed: %s", c->index, c->error ? c->error : "?");
    }
    if (hr->mhd_done || hr->aborted) return;
    if (hr->stream) {
        if (ev->kind == SCHED_EV_ERROR) {
            gen_cancel_all(hr);
            gen_sse_error(hr, "server_error", c->error ? c->error : "generation failed");
            return;
        }
        if (c->finish == SCHED_FINISH_DEADLINE) {
            gen_cancel_all(hr);
            gen_sse_error(hr, "timeout_error", "request deadline exceeded");
            return;
        }
        if (c->finish == SCHED_FINISH_CANCELLED) return; /* aborted by us; the error went out */
        if (ev->text_len) gen_sse_choice(hr, c->index, NULL, ev->text, ev->text_len, NULL, NULL);
        gen_sse_choice(hr, c->index, NULL, hr->params->is_chat ? NULL : "", 0, NULL,
                       oai_finish_name(c->finish));
        if (hr->n_done == hr->n_ch) gen_stream_end(hr);
    } else {
        gen_append_text(c, ev->text, ev->text_len);
        if (ev->kind == SCHED_EV_ERROR && !hr->fail_status) {
            hr->fail_status = 500;
            snprintf(hr->fail_msg, sizeof hr->fail_msg, "%s", c->error ? c->error : "failed");
        } else if (c->finish == SCHED_FINISH_DEADLINE && !hr->fail_status) {
            hr->fail_status = 504;
            snprintf(hr->fail_msg, sizeof hr->fail_msg, "request deadline exceeded");
        }
        if (hr->n_done == hr->n_ch || hr->fail_status) http_wake(hr);
    }
}

void gen_process_queue(struct srv *s) {
    pthread_mutex_lock(&s->qlock);
    struct ev_item *it = s->qhead;
    s->qhead = s->qtail = NULL;
    pthread_mutex_unlock(&s->qlock);
    while (it) {
        struct ev_item *next = it->next;
        struct hchoice *c = it->choice;
        struct hreq *hr = c->hr;
        if (!c->submitted) {
            /* sched_submit refused it: no reference was taken, nothing to report */
        } else if (it->ev.kind == SCHED_EV_TOKEN) {
            gen_on_token(hr, c, &it->ev, it->t);
        } else if (!c->done) {
            gen_on_done(hr, c, &it->ev, it->t);
            http_unref(hr); /* the scheduler's reference: may free hr */
        }
        free(it);
        it = next;
    }
}

/* ---- start, resume, cancel ---------------------------------------------------------------- */

void gen_cancel_all(struct hreq *hr) {
    struct srv *s = hr->srv;
    if (!s->sched) return;
    for (int i = 0; i < hr->n_ch; i++)
        if (hr->ch[i].submitted && !hr->ch[i].done) sched_cancel(s->sched, hr->ch[i].sched_id);
}

void gen_abort(struct hreq *hr, int status, const char *msg) {
    if (hr->aborted || hr->mhd_done) return;
    hr->aborted = 1;
    gen_cancel_all(hr);
    LOG_W(GEN_MOD, hr->id, "ending request: %s", msg);
    if (hr->stream) {
        hr->aborted = 0; /* let the error event through */
        gen_sse_error(hr, status == 504 ? "timeout_error" : "server_error", msg);
        hr->aborted = 1;
    } else if (!hr->fail_status) {
        hr->fail_status = status;
        snprintf(hr->fail_msg, sizeof hr->fail_msg, "%s", msg);
        http_wake(hr);
    }
}

void gen_keepalive(struct hreq *hr, double now) {
    if (!hr->stream || hr->out_end) return;
    if (now - hr->last_write >= hr->srv->cfg->sse_keepalive_s) gen_out(hr, ": keep-alive\n\n", 14);
}

ssize_t gen_stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    struct hreq *hr = cls;
    (void)pos;
    if (hr->out_off < hr->out_len) {
        size_t n = hr->out_len - hr->out_off;
        if (n > max) n = max;
        memcpy(buf, hr->out + hr->out_off, n);
        hr->out_off += n;
        if (hr->out_off == hr->out_len) hr->out_off = hr->out_len = 0;
        return (ssize_t)n;
    }
    if (hr->client_gone) return MHD_CONTENT_READER_END_WITH_ERROR;
    if (hr->out_end) return MHD_CONTENT_READER_END_OF_STREAM;
    if (hr->conn && !hr->suspended) {
        hr->suspended = 1;
        MHD_suspend_connection(hr->conn);
    }
    return 0;
}

static enum MHD_Result gen_submit_error(struct hreq *hr, int rc) {
    switch (rc) {
    case SCHED_EFULL:
        return http_reply_error(hr, 429, NULL, NULL, NULL, "the server is busy: queue full");
    case SCHED_EDRAIN:
        return http_reply_error(hr, 503, NULL, NULL, NULL, "the server is shutting down");
    case SCHED_ECTX:
        return http_reply_error(hr, 400, NULL, hr->params->is_chat ? "messages" : "prompt",
                                "context_length_exceeded", "prompt + max_tokens exceed the context");
    case SCHED_EINVAL:
        return http_reply_error(hr, 400, NULL, NULL, NULL, "invalid request: %s",
                                sched_strerror(rc));
    default:
        return http_reply_error(hr, rc == SCHED_ENOMEM ? 503 : 500, NULL, NULL, NULL,
                                "cannot start generation: %s", sched_strerror(rc));
    }
}

enum MHD_Result gen_start_json(struct hreq *hr, json_t *root, int is_chat) {
    struct srv *s = hr->srv;
    struct oai_limits lim = {.vocab = s->vocab, .chat_style = s->chat_style,
                             .n_ctx = s->cfg->ctx_size, .max_tokens = s->cfg->max_tokens,
                             .max_n = s->cfg->max_n, .model_id = s->model_id,
                             .model_name = s->model ? s->model->name : NULL};
    struct oai_error e;
    struct oai_params *p;
    if (oai_parse(root, is_chat, &lim, &p, &e))
        return http_reply_error(hr, e.status, e.status == 404 ? "not_found_error" : e.type,
                                e.param, e.code, "%s", e.msg);
    hr->params = p;
    hr->stream = p->stream;
    hr->created = (int64_t)time(NULL);
    snprintf(hr->cmpl_id, sizeof hr->cmpl_id, "%s-%" PRIx64 "%08x", is_chat ? "chatcmpl" : "cmpl",
             hr->id, (unsigned)((uint64_t)s->created * 2654435761u));
    int n_ch = p->n * p->n_prompts;
    hr->ch = calloc((size_t)n_ch, sizeof *hr->ch);
    if (!hr->ch) return http_reply_error(hr, 500, NULL, NULL, NULL, "out of memory");
    hr->n_ch = n_ch;
    for (int i = 0; i < p->n_prompts; i++) hr->prompt_tokens += p->prompt_len[i];
    for (int i = 0; i < n_ch; i++) {
        struct hchoice *c = &hr->ch[i];
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
        r.top_logprobs = p->logprobs ? p->top_logprobs : -1;
        r.session_id = p->session_id;
        r.deadline = hr->deadline;
        r.on_event = gen_on_event;
        r.user = c;
        int rc = sched_submit(s->sched, &r, &c->sched_id);
        if (rc) {
            gen_cancel_all(hr);
            return gen_submit_error(hr, rc);
        }
        c->submitted = 1;
        hr->refs++;
    }
    LOG_D(GEN_MOD, hr->id, "%s: %d choices, %d prompt tokens, max_tokens %d%s", hr->path, n_ch,
          hr->prompt_tokens, p->max_tokens[0], p->stream ? ", stream" : "");
    if (!p->stream) {
        hr->phase = PH_WAIT;
        hr->suspended = 1;
        MHD_suspend_connection(hr->conn);
        return MHD_YES;
    }
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, gen_stream_read, hr, NULL);
    if (!r) {
        gen_cancel_all(hr);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream; charset=utf-8");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    char rid[24];
    snprintf(rid, sizeof rid, "%llu", (unsigned long long)hr->id);
    MHD_add_response_header(r, "X-Request-Id", rid);
    hr->phase = PH_STREAM;
    hr->status = 200;
    for (int i = 0; i < n_ch; i++) {
        if (p->is_chat)
            gen_sse_choice(hr, i, "assistant", "", 0, NULL, NULL);
        else if (p->echo)
            gen_sse_choice(hr, i, NULL, p->prompt_text[i / p->n], p->prompt_text_len[i / p->n],
                           NULL, NULL);
    }
    hr->last_write = clock_mono_s();
    enum MHD_Result ret = MHD_queue_response(hr->conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* The access handler runs again after a resume: reply once every choice is done. */
enum MHD_Result gen_resume(struct hreq *hr) {
    struct oai_params *p = hr->params;
    if (!p || hr->client_gone) return MHD_NO; /* closes the connection */
    if (hr->fail_status)
        return http_reply_error(hr, hr->fail_status, hr->fail_status == 504 ? "timeout_error" : NULL,
                                NULL, NULL, "%s", hr->fail_msg);
    if (hr->n_done < hr->n_ch) {
        hr->suspended = 1;
        MHD_suspend_connection(hr->conn);
        return MHD_YES;
    }
    json_t *choices = json_array();
    for (int i = 0; i < hr->n_ch; i++) {
        struct hchoice *c = &hr->ch[i];
        json_t *lp = json_null();
        if (p->logprobs)
            lp = p->is_chat ? json_pack("{s:o,s:n}", "content", c->lp ? json_incref(c->lp) : json_array(),
                                        "refusal")
                            : (c->lp ? json_incref(c->lp) : gen_legacy_lp_new());
        json_t *ch;
        if (p->is_chat) {
            ch = json_pack("{s:i,s:{s:s,s:o,s:n},s:o,s:s}", "index", i, "message", "role",
                           "assistant", "content", oai_string(c->text ? c->text : "", c->text_len),
                           "refusal", "logprobs", lp, "finish_reason", oai_finish_name(c->finish));
        } else {
            json_t *text;
            if (p->echo) {
                size_t pl = p->prompt_text_len[c->prompt_idx];
                char *b = malloc(pl + c->text_len + 1);
                if (b) {
                    memcpy(b, p->prompt_text[c->prompt_idx], pl);
                    memcpy(b + pl, c->text ? c->text : "", c->text_len);
                }
                text = b ? oai_string(b, pl + c->text_len) : json_string("");
                free(b);
            } else {
                text = oai_string(c->text ? c->text : "", c->text_len);
            }
            ch = json_pack("{s:i,s:o,s:o,s:s}", "index", i, "text", text, "logprobs", lp,
                           "finish_reason", oai_finish_name(c->finish));
        }
        json_array_append_new(choices, ch);
    }
    json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:s,s:o,s:o}", "id", hr->cmpl_id, "object",
                          p->is_chat ? "chat.completion" : "text_completion", "created",
                          (json_int_t)hr->created, "model", hr->srv->model_id,
                          "system_fingerprint", "gemmad", "choices", choices, "usage",
                          gen_usage_json(hr));
    return http_reply_json(hr, 200, j);
}

void gen_free(struct hreq *hr) {
    for (int i = 0; i < hr->n_ch; i++) {
        free(hr->ch[i].text);
        free(hr->ch[i].error);
        json_decref(hr->ch[i].lp);
    }
    free(hr->ch);
    hr->ch = NULL;
    hr->n_ch = 0;
    oai_params_free(hr->params);
    hr->params = NULL;
    free(hr->out);
    hr->out = NULL;
}
