/*
 * api_responses — the OpenAI Responses API (POST /v1/responses): `input` as a string or
 * message items, `instructions`, `max_output_tokens`, sampling fields, `text.format`, and
 * `store` + `previous_response_id`, function `tools` (api_resp_tools) whose calls come out as
 * function_call items (streamed as response.output_item.added, .function_call_arguments.delta,
 * .function_call_arguments.done, .output_item.done; items open as their output arrives). The request is translated into an OpenAI chat request
 * for oai_parse; the reply and the stream (response.created, response.in_progress,
 * response.output_item.added, response.content_part.added, response.output_text.delta,
 * response.output_text.done, response.content_part.done, response.output_item.done,
 * response.completed / response.incomplete / response.failed, each with a sequence_number)
 * are rendered through struct api_shape.
 *
 * Stored responses: a response with store (the default) keeps its conversation (input
 * messages plus the reply, without instructions, as the API defines) in a bounded LRU
 * (resp_store: at most `cap` entries, each at most ttl_s old). A request naming it in
 * previous_response_id continues that conversation under the same KV session key, so the
 * scheduler finds the earlier turns' KV blocks warm and prefills only the new input.
 *
 * Threads: resp_to_chat runs on intake's workers (the store is locked: resp_store_* from
 * any thread); the shapes are the loop thread's.
 */
#ifndef GEMMAD_API_RESPONSES_H
#define GEMMAD_API_RESPONSES_H

#include <jansson.h>

#include "server/api_common.h"

struct resp_store;

/* cap 0: nothing is stored (previous_response_id then never resolves). */
int resp_store_create(int cap, double ttl_s, struct resp_store **out);
void resp_store_destroy(struct resp_store *s);
int resp_store_count(struct resp_store *s);

/* One request, translated. */
struct resp_req {
    json_t *chat;     /* the chat request for oai_parse (owned) */
    json_t *history;  /* conversation before the reply, chat-shaped messages (owned) */
    json_t *echo;     /* request fields the response object repeats (owned) */
    char id[48];      /* "resp_…": this response's id */
    char session[48]; /* KV session key of the conversation */
    int stream, store;
    int tools_on;     /* the output may hold function calls */
};

/* Translates req. max_tokens: the server's cap, for naming max_output_tokens in errors.
 * Returns 0, or -1 with e filled (param names the Responses field). */
int resp_to_chat(json_t *req, struct resp_store *st, int max_tokens, struct resp_req *out,
                 struct oai_error *e);
void resp_req_free(struct resp_req *r);

/* oai_parse's error on the translated request, renamed to the Responses fields. */
void resp_map_error(struct oai_error *e);

/* The shape for one request; takes over r's history and echo (r->chat stays the caller's).
 * st may be NULL (nothing stored). NULL when out of memory. */
struct api_shape *resp_shape_create(struct resp_req *r, const char *model, int64_t created,
                                    struct resp_store *st);

#endif
