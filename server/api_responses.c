/*
 * api_responses — see api_responses.h.
 */
#include "server/api_responses.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "server/api_resp_tools.h"
#include "server/api_tools.h"

/* ---- the store ------------------------------------------------------------------------- */

struct resp_entry {
    struct resp_entry *prev, *next; /* most recently used first */
    char id[48];
    char session[48];
    json_t *messages; /* the whole conversation, reply included (owned) */
    double t;         /* when stored (monotonic s) */
};

struct resp_store {
    pthread_mutex_t mu; /* resp_to_chat reads it on intake's workers */
    struct resp_entry *head, *tail;
    int n, cap;
    double ttl_s;
};

int resp_store_create(int cap, double ttl_s, struct resp_store **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return -1;
    pthread_mutex_init(&(*out)->mu, NULL);
    (*out)->cap = cap < 0 ? 0 : cap;
    (*out)->ttl_s = ttl_s;
    return 0;
}

static void resp_unlink(struct resp_store *s, struct resp_entry *e) {
    if (e->prev)
        e->prev->next = e->next;
    else
        s->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        s->tail = e->prev;
    e->prev = e->next = NULL;
}

static void resp_push_front(struct resp_store *s, struct resp_entry *e) {
    e->next = s->head;
    e->prev = NULL;
    if (s->head) s->head->prev = e;
    s->head = e;
    if (!s->tail) s->tail = e;
}

static void resp_drop(struct resp_store *s, struct resp_entry *e) {
    resp_unlink(s, e);
    json_decref(e->messages);
    free(e);
    s->n--;
}

void resp_store_destroy(struct resp_store *s) {
    if (!s) return;
    while (s->head)
        resp_drop(s, s->head);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int resp_store_count(struct resp_store *s) {
    if (!s) return 0;
    pthread_mutex_lock(&s->mu);
    int n = s->n;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static void resp_expire(struct resp_store *s, double now) {
    while (s->tail && (s->n > s->cap || (s->ttl_s > 0 && now - s->tail->t > s->ttl_s)))
        resp_drop(s, s->tail);
}

/* Looks id up (and makes it the most recent), or NULL. Lock held. */
static struct resp_entry *resp_store_get(struct resp_store *s, const char *id, double now) {
    if (!s) return NULL;
    resp_expire(s, now);
    for (struct resp_entry *e = s->head; e; e = e->next)
        if (!strcmp(e->id, id)) {
            resp_unlink(s, e);
            resp_push_front(s, e);
            return e;
        }
    return NULL;
}

/* Takes messages. */
static void resp_store_put(struct resp_store *s, const char *id, const char *session,
                           json_t *messages, double now) {
    if (!s || s->cap == 0) {
        json_decref(messages);
        return;
    }
    struct resp_entry *e = calloc(1, sizeof *e);
    if (!e) {
        json_decref(messages);
        return;
    }
    snprintf(e->id, sizeof e->id, "%s", id);
    snprintf(e->session, sizeof e->session, "%s", session);
    e->messages = messages;
    e->t = now;
    pthread_mutex_lock(&s->mu);
    resp_push_front(s, e);
    s->n++;
    resp_expire(s, now);
    pthread_mutex_unlock(&s->mu);
}

/* ---- the request ------------------------------------------------------------------------- */

/* One input item as a chat message appended to msgs. */
static int resp_item(json_t *it, size_t i, json_t *msgs, struct oai_error *e) {
    if (!json_is_object(it))
        return oai_fail(e, 400, "input", NULL, "input[%zu] must be an object", i);
    json_t *type = api_field(it, "type");
    const char *ty = json_is_string(type) ? json_string_value(type) : "";
    if (!strcmp(ty, "function_call") || !strcmp(ty, "function_call_output"))
        return resp_tools_item(it, ty, i, msgs, e);
    if (type && (!json_is_string(type) || strcmp(json_string_value(type), "message") != 0))
        return oai_fail(e, 400, "input", NULL,
                        "input[%zu]: items of type '%.40s' are not supported", i,
                        json_is_string(type) ? json_string_value(type) : "?");
    json_t *role = json_object_get(it, "role");
    const char *r = json_is_string(role) ? json_string_value(role) : "";
    if (!strcmp(r, "developer")) r = "system";
    if (strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "system"))
        return oai_fail(e, 400, "input", NULL,
                        "input[%zu].role must be 'user', 'assistant', 'system' or 'developer'", i);
    json_t *text = resp_input_text(it, "content", i, e);
    if (!text) return -1;
    json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", r, "content", text));
    return 0;
}

static int resp_input(json_t *req, json_t *msgs, struct oai_error *e) {
    json_t *in = api_field(req, "input");
    if (!in) return oai_fail(e, 400, "input", NULL, "'input' is required");
    if (json_is_string(in)) {
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", in));
        return 0;
    }
    if (!json_is_array(in) || json_array_size(in) == 0)
        return oai_fail(e, 400, "input", NULL,
                        "'input' must be a string or a non-empty array of items");
    size_t i;
    json_t *it;
    json_array_foreach(in, i, it) if (resp_item(it, i, msgs, e)) return -1;
    return 0;
}

/* text.format -> the chat response_format (whose rules then apply). */
static int resp_text_format(json_t *req, json_t *chat, struct oai_error *e) {
    json_t *text = api_field(req, "text");
    if (!text) return 0;
    if (!json_is_object(text)) return oai_fail(e, 400, "text", NULL, "'text' must be an object");
    json_t *f = api_field(text, "format");
    if (!f) return 0;
    json_t *t = json_is_object(f) ? json_object_get(f, "type") : NULL;
    if (!json_is_string(t))
        return oai_fail(e, 400, "text.format", NULL,
                        "'text.format' must be an object with a 'type'");
    const char *ty = json_string_value(t);
    if (!strcmp(ty, "text")) return 0;
    if (!strcmp(ty, "json_object")) {
        json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", "json_object"));
        return 0;
    }
    if (!strcmp(ty, "json_schema")) {
        json_t *js = json_object();
        static const char *const keys[] = {"name", "schema", "strict", "description"};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
            if (api_field(f, keys[i])) json_object_set(js, keys[i], json_object_get(f, keys[i]));
        json_object_set_new(chat, "response_format",
                            json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js));
        return 0;
    }
    return oai_fail(e, 400, "text.format", NULL, "text.format type '%.32s' is not supported", ty);
}

static int resp_scalars(json_t *req, int max_tokens, struct resp_req *r, struct oai_error *e) {
    long long mo = 0;
    const char *s = NULL;
    r->store = 1;
    if (api_int_field(req, "max_output_tokens", 1, max_tokens, &mo, e) ||
        api_bool_field(req, "stream", &r->stream, e) ||
        api_bool_field(req, "store", &r->store, e) ||
        api_str_field(req, "instructions", 1 << 24, &s, e))
        return -1;
    s = NULL;
    if (api_str_field(req, "previous_response_id", 64, &s, e)) return -1;
    json_t *md = api_field(req, "metadata");
    if (md && !json_is_object(md))
        return oai_fail(e, 400, "metadata", NULL, "'metadata' must be an object");
    if (resp_tools_to_chat(req, r->chat, &r->tools_on, e)) return -1;
    if (mo) json_object_set_new(r->chat, "max_tokens", json_integer(mo));
    if (r->stream) json_object_set_new(r->chat, "stream", json_true());
    static const char *const same[] = {"model", "temperature", "top_p", "top_k", "seed", "user"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        if (api_field(req, same[i]))
            json_object_set(r->chat, same[i], json_object_get(req, same[i]));
    /* Echoed in the response object, as the API does. */
    static const char *const echo[] = {
        "instructions",         "max_output_tokens", "temperature", "top_p",
        "previous_response_id", "metadata",          "text",        "user",
        "tools",                "tool_choice",       "parallel_tool_calls"};
    for (size_t i = 0; i < sizeof echo / sizeof echo[0]; i++)
        if (api_field(req, echo[i]))
            json_object_set(r->echo, echo[i], json_object_get(req, echo[i]));
    return 0;
}

int resp_to_chat(json_t *req, struct resp_store *st, int max_tokens, struct resp_req *r,
                 struct oai_error *e) {
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    if (!json_is_object(req))
        return oai_fail(e, 400, NULL, NULL, "the request body must be a JSON object");
    r->chat = json_object();
    r->history = json_array();
    r->echo = json_object();
    json_t *msgs = json_array();
    if (!r->chat || !r->history || !r->echo || !msgs) {
        json_decref(msgs);
        oai_fail(e, 500, NULL, NULL, "out of memory");
        goto fail;
    }
    api_new_id("resp_", r->id, sizeof r->id);
    if (resp_scalars(req, max_tokens, r, e) || resp_text_format(req, r->chat, e)) goto fail_msgs;
    json_t *prev = api_field(req, "previous_response_id");
    snprintf(r->session, sizeof r->session, "%s", r->id);
    if (prev) {
        if (st) pthread_mutex_lock(&st->mu);
        struct resp_entry *pe = resp_store_get(st, json_string_value(prev), clock_mono_s());
        if (pe) {
            json_array_extend(r->history, pe->messages);
            snprintf(r->session, sizeof r->session, "%s", pe->session);
        }
        if (st) pthread_mutex_unlock(&st->mu);
        if (!pe) {
            oai_fail(e, 400, "previous_response_id", NULL,
                     "previous response with id '%.64s' not found", json_string_value(prev));
            goto fail_msgs;
        }
    }
    if (resp_input(req, r->history, e)) goto fail_msgs;
    json_t *ins = api_field(req, "instructions");
    if (ins) json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "system", "content", ins));
    json_array_extend(msgs, r->history);
    json_object_set_new(r->chat, "messages", msgs);
    /* A conversation that may continue keeps its KV warm under one key for all its turns. */
    if (r->store || prev) json_object_set_new(r->chat, "session_id", json_string(r->session));
    return 0;
fail_msgs:
    json_decref(msgs);
fail:
    resp_req_free(r);
    return -1;
}

void resp_req_free(struct resp_req *r) {
    json_decref(r->chat);
    json_decref(r->history);
    json_decref(r->echo);
    r->chat = r->history = r->echo = NULL;
}

void resp_map_error(struct oai_error *e) {
    if (!strncmp(e->param, "messages", 8))
        snprintf(e->param, sizeof e->param, "input");
    else if (!strcmp(e->param, "max_tokens"))
        snprintf(e->param, sizeof e->param, "max_output_tokens");
    else if (!strncmp(e->param, "response_format.json_schema.", 28)) {
        char rest[40]; /* the format is flat in the Responses API */
        snprintf(rest, sizeof rest, "%s", e->param + 28);
        snprintf(e->param, sizeof e->param, "text.format.%s", rest);
    } else if (!strncmp(e->param, "response_format", 15))
        snprintf(e->param, sizeof e->param, "text.format");
    else if (!strcmp(e->param, "session_id"))
        snprintf(e->param, sizeof e->param, "previous_response_id");
    else
        resp_tools_map_param(e->param, sizeof e->param);
}

/* ---- the response ------------------------------------------------------------------------ */

enum { OPEN_NONE, OPEN_MSG, OPEN_CALL };

struct resp_state {
    struct resp_store *store; /* NULL: do not store */
    char id[48], msg_id[48], session[48];
    char *model;
    int64_t created;
    json_t *history;      /* owned */
    json_t *echo;         /* owned */
    struct tools_out *to; /* the output split into text and calls (tools on), or NULL */
    int seq;              /* next sequence_number */
    /* stream: the output items so far */
    json_t *items;          /* finished items (owned) */
    int open, open_index;   /* the item being written (OPEN_*) and its output_index */
    int n_msgs, call_k;     /* message items opened; the open call's index in the calls */
    char call_item[64];     /* the open call's item id */
    char *text;             /* the open message's text */
    size_t text_len, text_cap;
};

static json_t *resp_usage(const struct api_result *r) {
    return json_pack("{s:i,s:{s:i},s:i,s:{s:i},s:i}", "input_tokens", r->prompt_tokens,
                     "input_tokens_details", "cached_tokens", r->cached_tokens, "output_tokens",
                     r->completion_tokens, "output_tokens_details", "reasoning_tokens", 0,
                     "total_tokens", r->prompt_tokens + r->completion_tokens);
}

static const char *resp_status(const struct api_result *r) {
    if (!r) return "in_progress";
    if (r->error || r->finish == SCHED_FINISH_ERROR) return "failed";
    if (r->finish == SCHED_FINISH_LENGTH || r->finish == SCHED_FINISH_DEADLINE) return "incomplete";
    if (r->finish == SCHED_FINISH_CANCELLED) return "cancelled";
    return "completed";
}

/* The status of the output items of a response with status st. */
static const char *resp_item_status(const char *st) {
    return !strcmp(st, "incomplete") ? "incomplete" : "completed";
}

static json_t *resp_echo_or(const struct resp_state *s, const char *k, json_t *dflt) {
    json_t *v = json_object_get(s->echo, k);
    if (v) {
        json_decref(dflt);
        return json_incref(v);
    }
    return dflt;
}

static json_t *resp_part(const char *text, size_t len) {
    return json_pack("{s:s,s:o,s:[],s:[]}", "type", "output_text", "text", oai_string(text, len),
                     "annotations", "logprobs");
}

static json_t *resp_item_json(const struct resp_state *s, const char *status, json_t *content) {
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "id", s->msg_id, "type", "message", "status", status,
                     "role", "assistant", "content", content);
}

/* The response object with output items `output` (taken); r NULL: in progress (no usage). */
static json_t *resp_object(const struct resp_state *s, const struct api_result *r,
                           json_t *output) {
    const char *status = resp_status(r);
    if (!r || !strcmp(status, "failed")) json_array_clear(output);
    json_t *err = json_null(), *inc = json_null();
    if (r && !strcmp(status, "failed")) {
        const char *m = r->error ? r->error : "generation failed";
        json_decref(err);
        err = json_pack("{s:s,s:o}", "code", "server_error", "message", oai_string(m, strlen(m)));
    }
    if (r && !strcmp(status, "incomplete")) {
        json_decref(inc);
        inc = json_pack("{s:s}", "reason",
                        r->finish == SCHED_FINISH_LENGTH ? "max_output_tokens" : "timeout");
    }
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:o,s:o,s:s,s:o}", "id", s->id, "object", "response",
                          "created_at", (json_int_t)s->created, "status", status, "error", err,
                          "incomplete_details", inc, "model", s->model, "output", output);
    json_object_set_new(o, "instructions", resp_echo_or(s, "instructions", json_null()));
    json_object_set_new(o, "max_output_tokens", resp_echo_or(s, "max_output_tokens", json_null()));
    json_object_set_new(o, "parallel_tool_calls",
                        resp_echo_or(s, "parallel_tool_calls", json_true()));
    json_object_set_new(o, "previous_response_id",
                        resp_echo_or(s, "previous_response_id", json_null()));
    json_object_set_new(o, "reasoning", json_pack("{s:n,s:n}", "effort", "summary"));
    json_object_set_new(o, "store", json_boolean(s->store != NULL));
    json_object_set_new(o, "temperature", resp_echo_or(s, "temperature", json_real(1.0)));
    json_object_set_new(o, "text",
                        resp_echo_or(s, "text", json_pack("{s:{s:s}}", "format", "type", "text")));
    json_object_set_new(o, "tool_choice", resp_echo_or(s, "tool_choice", json_string("auto")));
    json_object_set_new(o, "tools", resp_echo_or(s, "tools", json_array()));
    json_object_set_new(o, "top_p", resp_echo_or(s, "top_p", json_real(1.0)));
    json_object_set_new(o, "truncation", json_string("disabled"));
    json_object_set_new(o, "usage", r ? resp_usage(r) : json_null());
    json_object_set_new(o, "user", resp_echo_or(s, "user", json_null()));
    json_object_set_new(o, "metadata", resp_echo_or(s, "metadata", json_object()));
    return o;
}

/* The conversation with its reply (content: a string or null; calls: chat tool_calls or
 * NULL) goes into the store (a finished, non-failed reply). Takes content and calls. */
static void resp_keep(struct resp_state *s, const struct api_result *r, json_t *content,
                      json_t *calls) {
    json_t *m = NULL;
    if (!s->store || r->error || r->finish == SCHED_FINISH_ERROR ||
        r->finish == SCHED_FINISH_CANCELLED || !(m = json_deep_copy(s->history))) {
        json_decref(content);
        json_decref(calls);
        return;
    }
    json_t *msg = json_pack("{s:s,s:o}", "role", "assistant", "content", content);
    if (calls) json_object_set_new(msg, "tool_calls", calls);
    json_array_append_new(m, msg);
    resp_store_put(s->store, s->id, s->session, m, clock_mono_s());
}

/* The output of a tools request after its final feed: the message (when there is text or no
 * call), then one function_call item per call; the last item has item_status (as the stream
 * closes its open item with it), the others are completed. */
static json_t *resp_tools_output(struct resp_state *s, const char *item_status) {
    json_t *out = json_array(), *content = tools_out_content(s->to);
    json_t *calls = tools_out_calls(s->to);
    size_t n = json_array_size(calls), i;
    if (json_string_length(content) || !calls)
        json_array_append_new(
            out, resp_item_json(s, n ? "completed" : item_status,
                                json_pack("[o]", resp_part(json_string_value(content),
                                                           json_string_length(content)))));
    json_t *c;
    json_array_foreach(calls, i, c) json_array_append_new(
        out, resp_tools_call_item(c, i + 1 == n ? item_status : "completed"));
    json_decref(content);
    json_decref(calls);
    return out;
}

static json_t *resp_reply(void *st, const struct api_result *r) {
    struct resp_state *s = st;
    const char *t = r->text ? r->text : "";
    size_t n = r->text ? r->text_len : 0;
    const char *ist = resp_item_status(resp_status(r));
    if (s->to) {
        json_decref(tools_out_feed(s->to, t, n, 1));
        resp_keep(s, r, tools_out_content(s->to), tools_out_calls(s->to));
        return resp_object(s, r, resp_tools_output(s, ist));
    }
    resp_keep(s, r, oai_string(t, n), NULL);
    return resp_object(s, r, json_pack("[o]", resp_item_json(s, ist, json_pack("[o]",
                                                                             resp_part(t, n)))));
}

/* Appends event `type` (payload j, which gets type and sequence_number) to *buf. */
static void resp_put(struct resp_state *s, char **buf, size_t *len, const char *type, json_t *j) {
    if (!j) return;
    json_object_set_new(j, "type", json_string(type));
    json_object_set_new(j, "sequence_number", json_integer(s->seq++));
    api_sse_append(buf, len, type, j);
}

/* Stream: opens a message item. */
static void resp_open_msg(struct resp_state *s, char **buf, size_t *len) {
    if (s->n_msgs++) api_new_id("msg_", s->msg_id, sizeof s->msg_id);
    s->open = OPEN_MSG;
    s->open_index = (int)json_array_size(s->items);
    s->text_len = 0;
    resp_put(s, buf, len, "response.output_item.added",
             json_pack("{s:i,s:o}", "output_index", s->open_index, "item",
                       resp_item_json(s, "in_progress", json_array())));
    resp_put(s, buf, len, "response.content_part.added",
             json_pack("{s:s,s:i,s:i,s:o}", "item_id", s->msg_id, "output_index", s->open_index,
                       "content_index", 0, "part", resp_part("", 0)));
}

/* Stream: closes the open item with status st. */
static void resp_close(struct resp_state *s, char **buf, size_t *len, const char *st) {
    const char *t = s->text ? s->text : "";
    json_t *item = NULL;
    if (s->open == OPEN_MSG) {
        resp_put(s, buf, len, "response.output_text.done",
                 json_pack("{s:s,s:i,s:i,s:o,s:[]}", "item_id", s->msg_id, "output_index",
                           s->open_index, "content_index", 0, "text",
                           oai_string(t, s->text_len), "logprobs"));
        resp_put(s, buf, len, "response.content_part.done",
                 json_pack("{s:s,s:i,s:i,s:o}", "item_id", s->msg_id, "output_index",
                           s->open_index, "content_index", 0, "part",
                           resp_part(t, s->text_len)));
        item = resp_item_json(s, st, json_pack("[o]", resp_part(t, s->text_len)));
    } else if (s->open == OPEN_CALL) {
        json_t *calls = tools_out_calls(s->to);
        item = resp_tools_call_item(json_array_get(calls, (size_t)s->call_k), st);
        json_decref(calls);
        resp_put(s, buf, len, "response.function_call_arguments.done",
                 json_pack("{s:s,s:i,s:O}", "item_id", s->call_item, "output_index",
                           s->open_index, "arguments", json_object_get(item, "arguments")));
    }
    if (item) {
        resp_put(s, buf, len, "response.output_item.done",
                 json_pack("{s:i,s:O}", "output_index", s->open_index, "item", item));
        json_array_append_new(s->items, item);
    }
    s->open = OPEN_NONE;
}

static void resp_text(struct resp_state *s, char **buf, size_t *len, const char *text, size_t n) {
    if (!n) return;
    if (s->open != OPEN_MSG) {
        resp_close(s, buf, len, "completed");
        resp_open_msg(s, buf, len);
    }
    if (s->text_len + n + 1 > s->text_cap) {
        size_t cap = s->text_cap ? s->text_cap : 256;
        while (cap < s->text_len + n + 1)
            cap *= 2;
        char *b = realloc(s->text, cap);
        if (!b) return;
        s->text = b;
        s->text_cap = cap;
    }
    memcpy(s->text + s->text_len, text, n);
    s->text_len += n;
    s->text[s->text_len] = 0;
    resp_put(s, buf, len, "response.output_text.delta",
             json_pack("{s:s,s:i,s:i,s:o,s:[]}", "item_id", s->msg_id, "output_index",
                       s->open_index, "content_index", 0, "delta", oai_string(text, n),
                       "logprobs"));
}

/* Stream: one tool_calls entry of a tools_out delta (a new call carries its id). */
static void resp_call_delta(struct resp_state *s, char **buf, size_t *len, json_t *tc) {
    json_t *id = json_object_get(tc, "id"), *fn = json_object_get(tc, "function");
    if (json_is_string(id)) {
        resp_close(s, buf, len, "completed");
        s->open = OPEN_CALL;
        s->open_index = (int)json_array_size(s->items);
        s->call_k = (int)json_integer_value(json_object_get(tc, "index"));
        resp_tools_item_id(json_string_value(id), s->call_item, sizeof s->call_item);
        json_t *c = json_pack("{s:O,s:s,s:{s:O,s:s}}", "id", id, "type", "function", "function",
                              "name", json_object_get(fn, "name"), "arguments", "");
        resp_put(s, buf, len, "response.output_item.added",
                 json_pack("{s:i,s:o}", "output_index", s->open_index, "item",
                           resp_tools_call_item(c, "in_progress")));
        json_decref(c);
    }
    json_t *a = json_object_get(fn, "arguments");
    if (s->open == OPEN_CALL && json_is_string(a) && json_string_length(a))
        resp_put(s, buf, len, "response.function_call_arguments.delta",
                 json_pack("{s:s,s:i,s:O}", "item_id", s->call_item, "output_index",
                           s->open_index, "delta", a));
}

/* Stream: the output text through the tools splitter. */
static void resp_feed(struct resp_state *s, char **buf, size_t *len, const char *text, size_t n,
                      int final) {
    json_t *d = tools_out_feed(s->to, text, n, final);
    size_t i, k;
    json_t *x, *tc;
    json_array_foreach(d, i, x) {
        json_t *c = json_object_get(x, "content");
        if (json_is_string(c)) resp_text(s, buf, len, json_string_value(c), json_string_length(c));
        json_array_foreach(json_object_get(x, "tool_calls"), k, tc) resp_call_delta(s, buf, len, tc);
    }
    json_decref(d);
}

static char *resp_stream_start(void *st, int prompt_tokens, size_t *len) {
    struct resp_state *s = st;
    (void)prompt_tokens; /* the in-progress response carries no usage yet */
    char *buf = NULL;
    *len = 0;
    resp_put(s, &buf, len, "response.created",
             json_pack("{s:o}", "response", resp_object(s, NULL, json_array())));
    resp_put(s, &buf, len, "response.in_progress",
             json_pack("{s:o}", "response", resp_object(s, NULL, json_array())));
    /* With tools the first item may be a call: items open as their output arrives. */
    if (!s->to) resp_open_msg(s, &buf, len);
    return buf;
}

static char *resp_stream_delta(void *st, const char *text, size_t n, size_t *len) {
    struct resp_state *s = st;
    char *buf = NULL;
    *len = 0;
    if (s->to)
        resp_feed(s, &buf, len, text, n, 0);
    else
        resp_text(s, &buf, len, text, n);
    return buf;
}

static char *resp_stream_end(void *st, const struct api_result *r, size_t *len) {
    struct resp_state *s = st;
    char *buf = NULL;
    *len = 0;
    const char *status = resp_status(r);
    if (!strcmp(status, "failed")) {
        const char *m = r->error ? r->error : "generation failed";
        resp_put(s, &buf, len, "error",
                 json_pack("{s:s,s:o,s:n}", "code", "server_error", "message",
                           oai_string(m, strlen(m)), "param"));
        resp_put(s, &buf, len, "response.failed",
                 json_pack("{s:o}", "response", resp_object(s, r, json_array())));
        return buf;
    }
    if (s->to) {
        resp_feed(s, &buf, len, "", 0, 1);
        resp_keep(s, r, tools_out_content(s->to), tools_out_calls(s->to));
    } else {
        resp_keep(s, r, oai_string(s->text ? s->text : "", s->text_len), NULL);
    }
    if (s->open == OPEN_NONE && json_array_size(s->items) == 0) resp_open_msg(s, &buf, len);
    resp_close(s, &buf, len, resp_item_status(status));
    int incomplete = !strcmp(status, "incomplete");
    resp_put(s, &buf, len, incomplete ? "response.incomplete" : "response.completed",
             json_pack("{s:o}", "response", resp_object(s, r, json_copy(s->items))));
    return buf;
}

static json_t *resp_error_body(const struct oai_error *e) {
    return json_pack("{s:{s:o,s:s,s:o,s:o}}", "error", "message",
                     oai_string(e->msg, strlen(e->msg)), "type",
                     e->type ? e->type : "invalid_request_error", "param",
                     e->param[0] ? json_string(e->param) : json_null(), "code",
                     e->code ? json_string(e->code) : json_null());
}

static void resp_destroy(void *st) {
    struct resp_state *s = st;
    if (!s) return;
    json_decref(s->history);
    json_decref(s->echo);
    json_decref(s->items);
    tools_out_free(s->to);
    free(s->model);
    free(s->text);
    free(s);
}

struct api_shape *resp_shape_create(struct resp_req *r, const char *model, int64_t created,
                                    struct resp_store *st) {
    struct api_shape *sh = calloc(1, sizeof *sh);
    struct resp_state *s = calloc(1, sizeof *s);
    char cid[48];
    api_new_id("call_", cid, sizeof cid);
    if (!sh || !s || !(s->model = strdup(model)) || !(s->items = json_array()) ||
        (r->tools_on && !(s->to = tools_out_new(cid)))) {
        free(sh);
        resp_destroy(s);
        return NULL;
    }
    snprintf(s->id, sizeof s->id, "%s", r->id);
    snprintf(s->session, sizeof s->session, "%s", r->session);
    api_new_id("msg_", s->msg_id, sizeof s->msg_id);
    s->created = created;
    s->store = r->store ? st : NULL;
    s->history = r->history;
    s->echo = r->echo;
    r->history = r->echo = NULL;
    *sh = (struct api_shape){s,          resp_stream_start, resp_stream_delta, resp_stream_end,
                             resp_reply, resp_error_body,   resp_destroy, s->to};
    return sh;
}
