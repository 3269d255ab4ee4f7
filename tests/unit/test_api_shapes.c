/*
 * test_api_shapes — the request translations and reply shapes of the non-OpenAI routes
 * (api_anthropic, api_responses, api_embeddings' pooling and base64, cors, named SSE
 * events), without a model: the JSON in, the JSON or SSE bytes out.
 */
#include <jansson.h>

#include "harness.h"
#include "server/api_anthropic.h"
#include "server/api_embeddings.h"
#include "server/api_responses.h"
#include "server/cors.h"
#include "server/jschema.h"
#include "server/ui.h"

static json_t *J(const char *s) {
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    if (!j) T_FAIL("bad test JSON: %s", je.text);
    return j;
}

static int json_same(json_t *a, const char *b) {
    json_t *jb = J(b);
    int eq = json_equal(a, jb);
    if (!eq) {
        char *s = json_dumps(a, JSON_COMPACT | JSON_SORT_KEYS);
        printf("got %s\n", s);
        free(s);
    }
    json_decref(jb);
    return eq;
}

static void test_anthropic_translation(void) {
    json_t *req = J("{\"model\":\"m\",\"max_tokens\":9,\"system\":[{\"type\":\"text\",\"text\":"
                    "\"Be \"},{\"type\":\"text\",\"text\":\"brief.\"}],\"messages\":[{\"role\":"
                    "\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":[{\"type\":"
                    "\"text\",\"text\":\"Yo\"}]}],\"stop_sequences\":[\"X\"],\"top_k\":5,"
                    "\"stream\":true,\"metadata\":{\"user_id\":\"u\"}}");
    json_t *chat, *stops;
    struct oai_error e;
    T_ASSERT(anth_to_chat(req, 0, &chat, &stops, &e) == 0);
    T_ASSERT(json_same(chat, "{\"model\":\"m\",\"max_tokens\":9,\"stream\":true,\"top_k\":5,"
                             "\"stop\":[\"X\"],\"messages\":[{\"role\":\"system\",\"content\":"
                             "\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":"
                             "\"assistant\",\"content\":\"Yo\"}]}"));
    T_ASSERT(json_array_size(stops) == 1);
    json_decref(chat);
    json_decref(stops);
    json_decref(req);
}

static void expect_anth_error(const char *body, int count_only, const char *param) {
    json_t *req = J(body), *chat = NULL, *stops = NULL;
    struct oai_error e;
    T_ASSERTF(anth_to_chat(req, count_only, &chat, &stops, &e) == -1, "%s", body);
    T_ASSERTF(e.status == 400 && !strcmp(e.param, param), "%s: %d %s", body, e.status, e.param);
    T_ASSERT(strstr(e.msg, param) != NULL);
    json_t *b = anth_error_body(&e);
    T_ASSERT(!strcmp(json_string_value(json_object_get(b, "type")), "error"));
    T_ASSERT(!strcmp(json_string_value(json_object_get(json_object_get(b, "error"), "type")),
                     "invalid_request_error"));
    json_decref(b);
    json_decref(req);
    T_ASSERT(!chat && !stops);
}

static void test_anthropic_errors(void) {
    const char *m = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    char b[256];
    snprintf(b, sizeof b, "{%s}", m);
    expect_anth_error(b, 0, "max_tokens");
    snprintf(b, sizeof b, "{\"max_tokens\":0,%s}", m);
    expect_anth_error(b, 0, "max_tokens");
    expect_anth_error("{\"max_tokens\":3}", 0, "messages");
    expect_anth_error("{\"max_tokens\":3,\"messages\":[{\"role\":\"bot\",\"content\":\"x\"}]}", 0,
                      "messages[0].role");
    expect_anth_error("{\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                      "\"image\"}]}]}",
                      0, "messages[0].content");
    snprintf(b, sizeof b, "{\"max_tokens\":3,\"stop_sequences\":\"x\",%s}", m);
    expect_anth_error(b, 0, "stop_sequences");
    snprintf(b, sizeof b, "{\"max_tokens\":3,\"system\":4,%s}", m);
    expect_anth_error(b, 0, "system");
    /* count_tokens needs no max_tokens. */
    snprintf(b, sizeof b, "{%s}", m);
    json_t *req = J(b), *chat, *stops;
    struct oai_error e;
    T_ASSERT(anth_to_chat(req, 1, &chat, &stops, &e) == 0);
    json_decref(chat);
    json_decref(req);
}

/* The data payloads of SSE bytes with their event names checked against "type". */
static json_t *sse_parse(const char *buf) {
    json_t *out = json_array();
    const char *p = buf;
    while (*p) {
        T_ASSERTF(!strncmp(p, "event: ", 7), "%.40s", p);
        const char *nl = strchr(p, '\n');
        T_ASSERT(nl && !strncmp(nl + 1, "data: ", 6));
        const char *end = strstr(nl, "\n\n");
        T_ASSERT(end);
        json_error_t je;
        json_t *d = json_loadb(nl + 7, (size_t)(end - nl - 7), 0, &je);
        T_ASSERT(d);
        const char *type = json_string_value(json_object_get(d, "type"));
        T_ASSERT(type && strlen(type) == (size_t)(nl - p - 7) &&
                 !strncmp(type, p + 7, strlen(type)));
        json_array_append_new(out, d);
        p = end + 2;
    }
    return out;
}

static const char *type_at(json_t *evs, size_t i) {
    return json_string_value(json_object_get(json_array_get(evs, i), "type"));
}

static void test_anthropic_stream(void) {
    json_t *stops = J("[\"END\"]");
    struct api_shape *sh = anth_shape_create("gemma", stops);
    T_ASSERT(sh);
    size_t n;
    char *a = sh->stream_start(sh->st, 12, &n);
    char *b = sh->stream_delta(sh->st, "Hel", 3, &n);
    struct api_result r = {.finish = SCHED_FINISH_STOP,
                           .stop_index = 0,
                           .prompt_tokens = 12,
                           .completion_tokens = 3,
                           .cached_tokens = 4};
    char *c = sh->stream_end(sh->st, &r, &n);
    size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
    char *all = malloc(la + lb + lc + 1);
    memcpy(all, a, la);
    memcpy(all + la, b, lb);
    memcpy(all + la + lb, c, lc + 1);
    json_t *evs = sse_parse(all);
    const char *want[] = {"message_start",       "content_block_start", "ping",
                          "content_block_delta", "content_block_stop",  "message_delta",
                          "message_stop"};
    T_ASSERT(json_array_size(evs) == 7);
    for (size_t i = 0; i < 7; i++)
        T_ASSERTF(!strcmp(type_at(evs, i), want[i]), "%zu", i);
    json_t *md = json_array_get(evs, 5);
    T_ASSERT(json_same(json_object_get(md, "delta"),
                       "{\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"END\"}"));
    T_ASSERT(json_integer_value(json_object_get(json_object_get(md, "usage"), "input_tokens")) ==
             8);
    r.text = "Hello";
    r.text_len = 5;
    r.stop_index = -1;
    json_t *rep = sh->reply(sh->st, &r);
    T_ASSERT(!strcmp(json_string_value(json_object_get(rep, "stop_reason")), "end_turn"));
    T_ASSERT(json_is_null(json_object_get(rep, "stop_sequence")));
    T_ASSERT(!strncmp(json_string_value(json_object_get(rep, "id")), "msg_", 4));
    json_decref(rep);
    json_decref(evs);
    free(all);
    free(a);
    free(b);
    free(c);
    sh->destroy(sh->st);
    free(sh);
    json_decref(stops);
}

static struct api_shape *resp_turn(struct resp_store *st, const char *body, const char *reply,
                                   json_t **chat_out, char *id_out) {
    json_t *req = J(body);
    struct resp_req rq;
    struct oai_error e;
    T_ASSERTF(resp_to_chat(req, st, 100, &rq, &e) == 0, "%s: %s", body, e.msg);
    json_decref(req);
    *chat_out = json_incref(rq.chat);
    strcpy(id_out, rq.id);
    struct api_shape *sh = resp_shape_create(&rq, "gemma", 1700000000, st);
    resp_req_free(&rq);
    struct api_result r = {.text = reply,
                           .text_len = strlen(reply),
                           .finish = SCHED_FINISH_STOP,
                           .stop_index = -1,
                           .prompt_tokens = 10,
                           .completion_tokens = 2};
    json_t *o = sh->reply(sh->st, &r);
    T_ASSERT(!strcmp(json_string_value(json_object_get(o, "status")), "completed"));
    T_ASSERT(!strcmp(json_string_value(json_object_get(o, "id")), id_out));
    json_decref(o);
    return sh;
}

static void free_shape(struct api_shape *sh) {
    sh->destroy(sh->st);
    free(sh);
}

static void test_responses_store_chain(void) {
    struct resp_store *st;
    T_ASSERT(resp_store_create(2, 3600, &st) == 0);
    json_t *c1, *c2, *c3;
    char id1[48], id2[48], id3[48], body[512];
    free_shape(resp_turn(st, "{\"input\":\"Hi\",\"instructions\":\"Terse.\"}", "Hello", &c1, id1));
    T_ASSERT(json_same(json_object_get(c1, "messages"),
                       "[{\"role\":\"system\",\"content\":\"Terse.\"},{\"role\":\"user\","
                       "\"content\":\"Hi\"}]"));
    snprintf(body, sizeof body,
             "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
             "\"input_text\",\"text\":\"Again\"}]}],\"previous_response_id\":\"%s\"}",
             id1);
    free_shape(resp_turn(st, body, "Sure", &c2, id2));
    /* Instructions are not carried over; the stored turn is. One KV session per chain. */
    T_ASSERT(json_same(json_object_get(c2, "messages"),
                       "[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\","
                       "\"content\":\"Hello\"},{\"role\":\"user\",\"content\":\"Again\"}]"));
    T_ASSERT(!strcmp(json_string_value(json_object_get(c1, "session_id")), id1));
    T_ASSERT(!strcmp(json_string_value(json_object_get(c2, "session_id")), id1));
    T_ASSERT(resp_store_count(st) == 2);
    free_shape(resp_turn(st, "{\"input\":\"Other\"}", "x", &c3, id3));
    T_ASSERT(resp_store_count(st) == 2); /* LRU: id1 was evicted */
    snprintf(body, sizeof body, "{\"input\":\"x\",\"previous_response_id\":\"%s\"}", id1);
    json_t *req = J(body);
    struct resp_req rq;
    struct oai_error e;
    T_ASSERT(resp_to_chat(req, st, 100, &rq, &e) == -1);
    T_ASSERT(!strcmp(e.param, "previous_response_id") && e.status == 400);
    json_decref(req);
    json_decref(c1);
    json_decref(c2);
    json_decref(c3);
    resp_store_destroy(st);
}

static void test_responses_errors(void) {
    static const char *const cases[][2] = {
        {"{}", "input"},
        {"{\"input\":5}", "input"},
        {"{\"input\":[]}", "input"},
        {"{\"input\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "input"},
        {"{\"input\":[{\"type\":\"function_call\"}]}", "input"},
        {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\"}]}]}", "input"},
        {"{\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens"},
        {"{\"input\":\"x\",\"max_output_tokens\":101}", "max_output_tokens"},
        {"{\"input\":\"x\",\"store\":1}", "store"},
        {"{\"input\":\"x\",\"instructions\":[]}", "instructions"},
        {"{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"xml\"}}}", "text.format"},
        {"{\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}", "tools[0].type"},
        {"{\"input\":\"x\",\"tools\":{}}", "tools"},
        {"{\"input\":\"x\",\"tool_choice\":{\"type\":\"function\"}}", "tool_choice"},
        {"{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\"}]}", "input"},
        {"{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\"}]}",
         "input"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *req = J(cases[i][0]);
        struct resp_req rq;
        struct oai_error e;
        T_ASSERTF(resp_to_chat(req, NULL, 100, &rq, &e) == -1, "%s", cases[i][0]);
        T_ASSERTF(!strcmp(e.param, cases[i][1]), "%s: %s", cases[i][0], e.param);
        json_decref(req);
    }
    struct oai_error e = {.status = 400};
    snprintf(e.param, sizeof e.param, "messages[2].content");
    resp_map_error(&e);
    T_ASSERT(!strcmp(e.param, "input"));
    static const char *const renamed[][2] = {
        {"tools[3].function.name", "tools[3].name"},
        {"tools[0].function.parameters", "tools[0].parameters"},
        {"response_format.json_schema.schema", "text.format.schema"},
        {"response_format", "text.format"},
        {"tool_choice", "tool_choice"},
    };
    for (size_t i = 0; i < sizeof renamed / sizeof renamed[0]; i++) {
        snprintf(e.param, sizeof e.param, "%s", renamed[i][0]);
        resp_map_error(&e);
        T_ASSERTF(!strcmp(e.param, renamed[i][1]), "%s: %s", renamed[i][0], e.param);
    }
}

/* Function tools: the flat tools, tool_choice and the function_call / function_call_output
 * items become chat fields and messages; a call in the output streams as a function_call
 * item, and a text-only reply is one message item. */
static void test_responses_tools(void) {
    json_t *req = J("{\"input\":[{\"role\":\"user\",\"content\":\"Hi\"},"
                    "{\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"f\","
                    "\"arguments\":\"{}\"},"
                    "{\"type\":\"function_call_output\",\"call_id\":\"call_1\",\"output\":\"7\"}],"
                    "\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{}}],"
                    "\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"}}");
    struct resp_req rq;
    struct oai_error e;
    T_ASSERT(resp_to_chat(req, NULL, 100, &rq, &e) == 0);
    T_ASSERT(rq.tools_on == 1);
    T_ASSERT(json_same(json_object_get(rq.chat, "tools"),
                       "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}}]"));
    T_ASSERT(json_same(json_object_get(rq.chat, "tool_choice"),
                       "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}"));
    T_ASSERT(json_same(json_object_get(rq.chat, "messages"),
                       "[{\"role\":\"user\",\"content\":\"Hi\"},"
                       "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\","
                       "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
                       "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"7\"}]"));
    struct api_shape *sh = resp_shape_create(&rq, "gemma", 1700000000, NULL);
    size_t n;
    char *parts[4];
    parts[0] = sh->stream_start(sh->st, 5, &n);
    static const char *const piece[2] = {"```tool_call\n{\"name\": \"f\", \"argu",
                                         "ments\": {\"a\": 1}}\n```"};
    parts[1] = sh->stream_delta(sh->st, piece[0], strlen(piece[0]), &n);
    parts[2] = sh->stream_delta(sh->st, piece[1], strlen(piece[1]), &n);
    struct api_result r = {.finish = SCHED_FINISH_STOP, .stop_index = -1, .prompt_tokens = 5,
                           .completion_tokens = 9};
    parts[3] = sh->stream_end(sh->st, &r, &n);
    struct jsc_buf all = {0};
    for (int i = 0; i < 4; i++) {
        if (parts[i]) jsc_buf_add(&all, parts[i], strlen(parts[i]));
        free(parts[i]);
    }
    json_t *evs = sse_parse(all.p);
    size_t ne = json_array_size(evs);
    T_ASSERT(ne >= 7);
    T_ASSERT(!strcmp(type_at(evs, 2), "response.output_item.added"));
    json_t *added = json_object_get(json_array_get(evs, 2), "item");
    T_ASSERT(!strcmp(json_string_value(json_object_get(added, "type")), "function_call"));
    T_ASSERT(!strcmp(json_string_value(json_object_get(added, "name")), "f"));
    struct jsc_buf args = {0};
    for (size_t i = 3; i + 3 < ne; i++) {
        T_ASSERTF(!strcmp(type_at(evs, i), "response.function_call_arguments.delta"), "%zu", i);
        json_t *d = json_object_get(json_array_get(evs, i), "delta");
        jsc_buf_add(&args, json_string_value(d), json_string_length(d));
    }
    T_ASSERT(!strcmp(type_at(evs, ne - 3), "response.function_call_arguments.done"));
    T_ASSERT(!strcmp(type_at(evs, ne - 2), "response.output_item.done"));
    T_ASSERT(!strcmp(type_at(evs, ne - 1), "response.completed"));
    const char *done = json_string_value(json_object_get(json_array_get(evs, ne - 3), "arguments"));
    T_ASSERT(args.p && !strcmp(args.p, done));
    json_t *dj = J(done);
    T_ASSERT(json_same(dj, "{\"a\":1}"));
    json_decref(dj);
    json_t *out = json_object_get(json_object_get(json_array_get(evs, ne - 1), "response"), "output");
    T_ASSERT(json_array_size(out) == 1);
    json_t *it = json_array_get(out, 0);
    T_ASSERT(!strcmp(json_string_value(json_object_get(it, "status")), "completed"));
    T_ASSERT(!strcmp(json_string_value(json_object_get(it, "arguments")), done));
    T_ASSERT(!strncmp(json_string_value(json_object_get(it, "id")), "fc_", 3));
    T_ASSERT(json_same(json_object_get(json_object_get(json_array_get(evs, ne - 1), "response"),
                                       "tool_choice"), "{\"type\":\"function\",\"name\":\"f\"}"));
    json_decref(evs);
    jsc_buf_free(&all);
    jsc_buf_free(&args);
    sh->destroy(sh->st);
    free(sh);
    resp_req_free(&rq);
    /* the same request answered with text only: one message item */
    T_ASSERT(resp_to_chat(req, NULL, 100, &rq, &e) == 0);
    sh = resp_shape_create(&rq, "gemma", 1700000000, NULL);
    struct api_result t = {.text = "Hello", .text_len = 5, .finish = SCHED_FINISH_STOP,
                           .stop_index = -1};
    json_t *o = sh->reply(sh->st, &t);
    out = json_object_get(o, "output");
    T_ASSERT(json_array_size(out) == 1);
    T_ASSERT(!strcmp(json_string_value(json_object_get(json_array_get(out, 0), "type")), "message"));
    json_decref(o);
    sh->destroy(sh->st);
    free(sh);
    resp_req_free(&rq);
    json_decref(req);
}

static void test_responses_stream(void) {
    json_t *req = J("{\"input\":\"Hi\",\"max_output_tokens\":2,\"metadata\":{\"k\":\"v\"}}");
    struct resp_req rq;
    struct oai_error e;
    T_ASSERT(resp_to_chat(req, NULL, 100, &rq, &e) == 0);
    struct api_shape *sh = resp_shape_create(&rq, "gemma", 1700000000, NULL);
    size_t n;
    char *parts[4];
    parts[0] = sh->stream_start(sh->st, 5, &n);
    parts[1] = sh->stream_delta(sh->st, "He", 2, &n);
    parts[2] = sh->stream_delta(sh->st, "y", 1, &n);
    struct api_result r = {.finish = SCHED_FINISH_LENGTH,
                           .stop_index = -1,
                           .prompt_tokens = 5,
                           .completion_tokens = 2,
                           .cached_tokens = 1};
    parts[3] = sh->stream_end(sh->st, &r, &n);
    size_t tot = 0;
    for (int i = 0; i < 4; i++)
        tot += strlen(parts[i]);
    char *all = malloc(tot + 1);
    all[0] = 0;
    for (int i = 0; i < 4; i++)
        strcat(all, parts[i]), free(parts[i]);
    json_t *evs = sse_parse(all);
    const char *want[] = {"response.created",           "response.in_progress",
                          "response.output_item.added", "response.content_part.added",
                          "response.output_text.delta", "response.output_text.delta",
                          "response.output_text.done",  "response.content_part.done",
                          "response.output_item.done",  "response.incomplete"};
    T_ASSERT(json_array_size(evs) == 10);
    for (size_t i = 0; i < 10; i++) {
        T_ASSERTF(!strcmp(type_at(evs, i), want[i]), "%zu: %s", i, type_at(evs, i));
        T_ASSERT(json_integer_value(json_object_get(json_array_get(evs, i), "sequence_number")) ==
                 (json_int_t)i);
    }
    T_ASSERT(!strcmp(json_string_value(json_object_get(json_array_get(evs, 6), "text")), "Hey"));
    json_t *fin = json_object_get(json_array_get(evs, 9), "response");
    T_ASSERT(json_same(json_object_get(fin, "usage"),
                       "{\"input_tokens\":5,\"input_tokens_details\":{\"cached_tokens\":1},"
                       "\"output_tokens\":2,\"output_tokens_details\":{\"reasoning_tokens\":0},"
                       "\"total_tokens\":7}"));
    T_ASSERT(json_same(json_object_get(fin, "incomplete_details"),
                       "{\"reason\":\"max_output_tokens\"}"));
    T_ASSERT(json_same(json_object_get(fin, "metadata"), "{\"k\":\"v\"}"));
    T_ASSERT(json_integer_value(json_object_get(fin, "max_output_tokens")) == 2);
    json_decref(evs);
    free(all);
    sh->destroy(sh->st);
    free(sh);
    resp_req_free(&rq);
    json_decref(req);
}

/* A generation that fails after its stream started ends with the API's error events:
 * Responses "error" then "response.failed" (status failed, the message, no output item);
 * Anthropic one "error" event in its own shape. */
static void test_stream_failures(void) {
    struct api_result r = {.finish = SCHED_FINISH_ERROR,
                           .stop_index = -1,
                           .prompt_tokens = 5,
                           .completion_tokens = 1,
                           .error = "compute backend failed"};
    size_t n;
    json_t *req = J("{\"input\":\"Hi\"}");
    struct resp_req rq;
    struct oai_error e;
    T_ASSERT(resp_to_chat(req, NULL, 100, &rq, &e) == 0);
    struct api_shape *sh = resp_shape_create(&rq, "gemma", 1700000000, NULL);
    char *a = sh->stream_start(sh->st, 5, &n);
    char *b = sh->stream_end(sh->st, &r, &n);
    json_t *evs = sse_parse(b);
    T_ASSERT(json_array_size(evs) == 2);
    T_ASSERT(!strcmp(type_at(evs, 0), "error") && !strcmp(type_at(evs, 1), "response.failed"));
    json_t *err = json_array_get(evs, 0);
    T_ASSERT(!strcmp(json_string_value(json_object_get(err, "message")), r.error));
    json_t *fin = json_object_get(json_array_get(evs, 1), "response");
    T_ASSERT(!strcmp(json_string_value(json_object_get(fin, "status")), "failed"));
    T_ASSERT(json_array_size(json_object_get(fin, "output")) == 0);
    T_ASSERT(json_same(json_object_get(fin, "error"),
                       "{\"code\":\"server_error\",\"message\":\"compute backend failed\"}"));
    json_decref(evs);
    free(a);
    free(b);
    free_shape(sh);
    resp_req_free(&rq);
    json_decref(req);

    sh = anth_shape_create("gemma", NULL);
    T_ASSERT(sh);
    a = sh->stream_start(sh->st, 5, &n);
    b = sh->stream_end(sh->st, &r, &n);
    evs = sse_parse(b);
    T_ASSERT(json_array_size(evs) == 1 && !strcmp(type_at(evs, 0), "error"));
    T_ASSERT(json_same(json_array_get(evs, 0),
                       "{\"type\":\"error\",\"error\":{\"type\":\"api_error\","
                       "\"message\":\"compute backend failed\"}}"));
    json_decref(evs);
    free(a);
    free(b);
    free_shape(sh);
}

static void test_embedding_pool_and_base64(void) {
    const float rows[3 * 2] = {1, 0, 3, 4, 0, 2};
    float out[2];
    emb_pool(rows, 3, 2, EMB_POOL_MEAN, out); /* mean (4/3, 2) -> normalised */
    double norm = sqrt(16.0 / 9 + 4);
    T_ASSERT(fabsf(out[0] - (float)(4.0 / 3 / norm)) < 1e-6f &&
             fabsf(out[1] - (float)(2 / norm)) < 1e-6f);
    emb_pool(rows, 3, 2, EMB_POOL_LAST, out);
    T_ASSERT(out[0] == 0 && out[1] == 1);
    struct emb_req r = {.n = 1, .total = 3, .base64 = 1};
    const float v[2] = {1.0f, -2.0f};
    json_t *j = emb_reply(&r, v, 2, "m");
    /* 1.0f = 00 00 80 3f, -2.0f = 00 00 00 c0 (little-endian) */
    T_ASSERT(!strcmp(json_string_value(json_object_get(
                         json_array_get(json_object_get(j, "data"), 0), "embedding")),
                     "AACAPwAAAMA="));
    json_decref(j);
    T_ASSERT(emb_pooling_parse("last") == EMB_POOL_LAST && emb_pooling_parse("max") == -1);
}

static void test_cors(void) {
    struct cors c;
    char err[128];
    T_ASSERT(cors_init(&c, " http://a.example , https://B.example:8443/ ", err, sizeof err) == 0);
    T_ASSERT(c.n == 2 && !c.any);
    T_ASSERT(cors_allow(&c, "http://a.example") &&
             !strcmp(cors_allow(&c, "http://a.example"), "http://a.example"));
    T_ASSERT(cors_allow(&c, "https://b.example:8443"));
    T_ASSERT(!cors_allow(&c, "http://a.example.evil.com"));
    T_ASSERT(!cors_allow(&c, "https://a.example"));
    T_ASSERT(!cors_allow(&c, NULL) && !cors_allow(&c, ""));
    cors_free(&c);
    T_ASSERT(cors_init(&c, "*", err, sizeof err) == 0 && !strcmp(cors_allow(&c, "http://x"), "*"));
    cors_free(&c);
    T_ASSERT(cors_init(&c, "", err, sizeof err) == 0 && !cors_allow(&c, "http://x"));
    cors_free(&c);
    T_ASSERT(cors_init(&c, "a.example", err, sizeof err) == -1 && strstr(err, "a.example"));
    T_ASSERT(!strcmp(cors_allow_headers("x-stainless-os, authorization"),
                     "x-stainless-os, authorization"));
    T_ASSERT(!strcmp(cors_allow_headers("x\r\nInjected: 1"), CORS_DEFAULT_HEADERS));
}

static void test_ui_embedded(void) {
    size_t n;
    const unsigned char *p = ui_page(&n);
    FILE *f = fopen("server/ui/index.html", "rb");
    if (!f) T_SKIP("not run from the repository root");
    char *buf = malloc(n + 1);
    size_t got = fread(buf, 1, n + 1, f);
    fclose(f);
    T_ASSERT(got == n && !memcmp(buf, p, n));
    free(buf);
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {T_CASE(test_anthropic_translation),
                                          T_CASE(test_anthropic_errors),
                                          T_CASE(test_anthropic_stream),
                                          T_CASE(test_responses_store_chain),
                                          T_CASE(test_responses_errors),
                                          T_CASE(test_responses_stream),
                                          T_CASE(test_responses_tools),
                                          T_CASE(test_stream_failures),
                                          T_CASE(test_embedding_pool_and_base64),
                                          T_CASE(test_cors),
                                          T_CASE(test_ui_embedded),
                                          {0}};
    return t_main(argc, argv, cases);
}
