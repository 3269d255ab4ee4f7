/*
 * api_anthropic — see api_anthropic.h.
 *
 * Usage follows Anthropic's accounting: input_tokens counts the prompt tokens that were
 * computed, cache_read_input_tokens those whose KV came from the prefix cache or a session,
 * so the two add up to the prompt (count_tokens' number).
 */
#include "server/api_anthropic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const anth_text_types[] = {"text", NULL};

/* system: a string or text blocks, as the chat request's first message. */
static int anth_system(json_t *req, json_t *msgs, struct oai_error *e) {
    json_t *sys = api_field(req, "system");
    if (!sys) return 0;
    json_t *text = api_text_content(sys, anth_text_types, "system", e);
    if (!text) return -1;
    json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", "system", "content", text));
    return 0;
}

static int anth_messages(json_t *req, json_t *msgs, struct oai_error *e) {
    json_t *in = api_field(req, "messages");
    if (!in) return oai_fail(e, 400, "messages", NULL, "'messages' is required");
    if (!json_is_array(in) || json_array_size(in) == 0)
        return oai_fail(e, 400, "messages", NULL, "'messages' must be a non-empty array");
    size_t i;
    json_t *m;
    json_array_foreach(in, i, m) {
        char param[64];
        snprintf(param, sizeof param, "messages[%zu].role", i);
        json_t *role = json_is_object(m) ? json_object_get(m, "role") : NULL;
        if (!json_is_object(m))
            return oai_fail(e, 400, "messages", NULL, "messages[%zu] must be an object", i);
        if (!json_is_string(role) || (strcmp(json_string_value(role), "user") != 0 &&
                                      strcmp(json_string_value(role), "assistant") != 0))
            return oai_fail(e, 400, param, NULL, "'%s' must be 'user' or 'assistant'", param);
        snprintf(param, sizeof param, "messages[%zu].content", i);
        json_t *c = json_object_get(m, "content");
        if (!c) return oai_fail(e, 400, param, NULL, "'%s' is required", param);
        json_t *text = api_text_content(c, anth_text_types, param, e);
        if (!text) return -1;
        json_array_append_new(msgs, json_pack("{s:O,s:o}", "role", role, "content", text));
    }
    return 0;
}

static int anth_stops(json_t *req, json_t **stops, struct oai_error *e) {
    json_t *s = api_field(req, "stop_sequences");
    *stops = NULL;
    if (!s) return 0;
    if (!json_is_array(s) || json_array_size(s) > OAI_MAX_STOP)
        return oai_fail(e, 400, "stop_sequences", NULL,
                        "'stop_sequences' must be an array of at most %d strings", OAI_MAX_STOP);
    size_t i;
    json_t *x;
    json_array_foreach(s, i, x) {
        if (!json_is_string(x) || json_string_length(x) == 0 ||
            json_string_length(x) > OAI_MAX_STOP_LEN)
            return oai_fail(e, 400, "stop_sequences", NULL,
                            "stop_sequences[%zu] must be a string of 1 to %d bytes", i,
                            OAI_MAX_STOP_LEN);
    }
    *stops = json_incref(s);
    return 0;
}

int anth_to_chat(json_t *req, int count_only, json_t **chat, json_t **stops, struct oai_error *e) {
    memset(e, 0, sizeof *e);
    *chat = NULL;
    *stops = NULL;
    if (!json_is_object(req))
        return oai_fail(e, 400, NULL, NULL, "the request body must be a JSON object");
    json_t *c = json_object();
    json_t *msgs = json_array();
    if (!c || !msgs) {
        json_decref(c);
        json_decref(msgs);
        return oai_fail(e, 500, NULL, NULL, "out of memory");
    }
    json_object_set_new(c, "messages", msgs);
    long long max_tokens = 0;
    int stream = 0;
    if (!count_only && !api_field(req, "max_tokens")) {
        oai_fail(e, 400, "max_tokens", NULL, "'max_tokens' is required");
        goto fail;
    }
    if (api_int_field(req, "max_tokens", 1, 1LL << 30, &max_tokens, e)) goto fail;
    if (!count_only && api_bool_field(req, "stream", &stream, e)) goto fail;
    json_t *tools = api_field(req, "tools");
    if (tools && !(json_is_array(tools) && json_array_size(tools) == 0)) {
        oai_fail(e, 400, "tools", NULL, "'tools' is not supported");
        goto fail;
    }
    if (anth_system(req, msgs, e) || anth_messages(req, msgs, e)) goto fail;
    if (anth_stops(req, stops, e)) goto fail;
    if (*stops) json_object_set(c, "stop", *stops);
    if (max_tokens) json_object_set_new(c, "max_tokens", json_integer(max_tokens));
    if (stream) json_object_set_new(c, "stream", json_true());
    /* Sampling fields keep their names (the chat validation names them); top_k is a chat
     * extension of gemmad's. model goes through so the chat rules apply to it. */
    static const char *const same[] = {"model", "temperature", "top_p", "top_k"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        json_t *v = api_field(req, same[i]);
        if (v) json_object_set(c, same[i], v);
    }
    *chat = c;
    return 0;
fail:
    json_decref(c);
    json_decref(*stops);
    *stops = NULL;
    return -1;
}

/* ---- replies ---------------------------------------------------------------------------- */

struct anth_state {
    char id[48];
    char *model;
    json_t *stops;
};

static const char *anth_error_type(int status) {
    switch (status) {
    case 400:
        return "invalid_request_error";
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 404:
        return "not_found_error";
    case 413:
        return "request_too_large";
    case 429:
        return "rate_limit_error";
    case 503:
        return "overloaded_error";
    default:
        return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

json_t *anth_error_body(const struct oai_error *e) {
    return json_pack("{s:s,s:{s:s,s:o}}", "type", "error", "error", "type",
                     anth_error_type(e->status), "message", oai_string(e->msg, strlen(e->msg)));
}

json_t *anth_count_body(int input_tokens) {
    return json_pack("{s:i}", "input_tokens", input_tokens);
}

static void anth_stop(const struct anth_state *s, const struct api_result *r, json_t **reason,
                      json_t **seq) {
    const char *why = "end_turn";
    *seq = json_null();
    if (r->finish == SCHED_FINISH_LENGTH)
        why = "max_tokens";
    else if (r->finish == SCHED_FINISH_STOP && r->stop_index >= 0 && s->stops &&
             (size_t)r->stop_index < json_array_size(s->stops)) {
        why = "stop_sequence";
        *seq = json_incref(json_array_get(s->stops, (size_t)r->stop_index));
    }
    *reason = json_string(why);
}

/* message_start knows only the prompt's size; message_delta repeats the input counts once
 * the cached part is known (clients take the later values). */
static json_t *anth_usage(const struct api_result *r) {
    return json_pack("{s:i,s:i,s:i,s:i}", "input_tokens", r->prompt_tokens - r->cached_tokens,
                     "cache_creation_input_tokens", 0, "cache_read_input_tokens", r->cached_tokens,
                     "output_tokens", r->completion_tokens);
}

static json_t *anth_message(const struct anth_state *s, json_t *content, json_t *reason,
                            json_t *seq, json_t *usage) {
    return json_pack("{s:s,s:s,s:s,s:s,s:o,s:o,s:o,s:o}", "id", s->id, "type", "message", "role",
                     "assistant", "model", s->model, "content", content, "stop_reason", reason,
                     "stop_sequence", seq, "usage", usage);
}

static json_t *anth_reply(void *st, const struct api_result *r) {
    struct anth_state *s = st;
    json_t *reason, *seq;
    anth_stop(s, r, &reason, &seq);
    json_t *block = json_pack("{s:s,s:o}", "type", "text", "text",
                              oai_string(r->text ? r->text : "", r->text ? r->text_len : 0));
    return anth_message(s, json_pack("[o]", block), reason, seq, anth_usage(r));
}

static char *anth_stream_start(void *st, int prompt_tokens, size_t *len) {
    struct anth_state *s = st;
    char *buf = NULL;
    *len = 0;
    struct api_result r0 = {.prompt_tokens = prompt_tokens};
    json_t *msg = anth_message(s, json_array(), json_null(), json_null(), anth_usage(&r0));
    api_sse_append(&buf, len, "message_start",
                   json_pack("{s:s,s:o}", "type", "message_start", "message", msg));
    api_sse_append(&buf, len, "content_block_start",
                   json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_start", "index", 0,
                             "content_block", "type", "text", "text", ""));
    api_sse_append(&buf, len, "ping", json_pack("{s:s}", "type", "ping"));
    return buf;
}

static char *anth_stream_delta(void *st, const char *text, size_t n, size_t *len) {
    (void)st;
    char *buf = NULL;
    *len = 0;
    api_sse_append(&buf, len, "content_block_delta",
                   json_pack("{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index", 0,
                             "delta", "type", "text_delta", "text", oai_string(text, n)));
    return buf;
}

static char *anth_stream_end(void *st, const struct api_result *r, size_t *len) {
    struct anth_state *s = st;
    char *buf = NULL;
    *len = 0;
    if (r->error || r->finish == SCHED_FINISH_ERROR) {
        const char *m = r->error ? r->error : "generation failed";
        api_sse_append(&buf, len, "error",
                       json_pack("{s:s,s:{s:s,s:o}}", "type", "error", "error", "type", "api_error",
                                 "message", oai_string(m, strlen(m))));
        return buf;
    }
    json_t *reason, *seq;
    anth_stop(s, r, &reason, &seq);
    api_sse_append(&buf, len, "content_block_stop",
                   json_pack("{s:s,s:i}", "type", "content_block_stop", "index", 0));
    api_sse_append(&buf, len, "message_delta",
                   json_pack("{s:s,s:{s:o,s:o},s:o}", "type", "message_delta", "delta",
                             "stop_reason", reason, "stop_sequence", seq, "usage", anth_usage(r)));
    api_sse_append(&buf, len, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    return buf;
}

static void anth_destroy(void *st) {
    struct anth_state *s = st;
    if (!s) return;
    json_decref(s->stops);
    free(s->model);
    free(s);
}

struct api_shape *anth_shape_create(const char *model, json_t *stops) {
    struct api_shape *sh = calloc(1, sizeof *sh);
    struct anth_state *s = calloc(1, sizeof *s);
    if (!sh || !s || !(s->model = strdup(model))) {
        free(sh);
        anth_destroy(s);
        return NULL;
    }
    api_new_id("msg_", s->id, sizeof s->id);
    s->stops = json_incref(stops);
    *sh = (struct api_shape){s,          anth_stream_start, anth_stream_delta, anth_stream_end,
                             anth_reply, anth_error_body,   anth_destroy, NULL};
    return sh;
}
