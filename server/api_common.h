/*
 * api_common — pieces shared by the non-OpenAI request shapes (api_responses: the OpenAI
 * Responses API; api_anthropic: Anthropic Messages; api_embeddings): field readers that
 * name the offending field in a struct oai_error, text content made of parts, named SSE
 * events, random object ids, and the interface through which the completion flow hands
 * a generation's progress to such a shape (struct api_shape).
 *
 * Those shapes are translated into an OpenAI chat request (a json_t for oai_parse) on the
 * way in, so every sampling rule is validated in one place, and rendered from the flow's
 * events on the way out. Pure functions on the loop thread; nothing here is shared.
 */
#ifndef GEMMAD_API_COMMON_H
#define GEMMAD_API_COMMON_H

#include <jansson.h>
#include <stddef.h>

#include "server/openai.h"

/* Field readers: absent or null leaves *out alone and returns 0; a wrong type or range fills
 * e (400, param = name; oai_fail) and returns -1. */
json_t *api_field(json_t *obj, const char *name); /* NULL when absent or null */
int api_int_field(json_t *obj, const char *name, long long lo, long long hi, long long *out,
                  struct oai_error *e);
int api_bool_field(json_t *obj, const char *name, int *out, struct oai_error *e);
int api_str_field(json_t *obj, const char *name, size_t max_len, const char **out,
                  struct oai_error *e);

/* Text of a content value: a string, or an array of parts {"type": one of types, "text":
 * string} joined without separator. Returns a new json string, or NULL with e naming param
 * (parts of another type are refused by name). */
json_t *api_text_content(json_t *c, const char *const *types, const char *param,
                         struct oai_error *e);

/* A named SSE event "event: NAME\ndata: JSON\n\n" (takes j). NULL on allocation failure. */
char *api_sse_event(const char *name, json_t *j, size_t *len);
/* Appends such an event to the malloc'd buffer *buf of *len bytes (NUL-terminated); on an
 * allocation failure the event is dropped and the buffer kept. */
void api_sse_append(char **buf, size_t *len, const char *name, json_t *j);

/* prefix + 24 random hex digits (e.g. "resp_…"), NUL-terminated in out[cap]. */
void api_new_id(const char *prefix, char *out, size_t cap);

/* What the completion flow knows when a generation ends. */
struct api_result {
    const char *text; /* the whole output (non-stream) or NULL (stream) */
    size_t text_len;
    enum sched_finish finish;
    int stop_index; /* which stop string ended it, or -1 (end of generation) */
    int prompt_tokens, completion_tokens, cached_tokens;
    const char *error; /* ERROR / failed outcome message, or NULL */
};

/* A response shape other than OpenAI chat/completions. The flow calls, on the loop thread:
 * stream_start once before any delta, stream_delta per piece of text, stream_end once, or
 * reply once for a non-stream request, and error_body for any error reply; destroy at the
 * end. The stream functions return malloc'd SSE bytes (NULL: nothing to send). */
struct tools_out;
struct api_shape {
    void *st;
    char *(*stream_start)(void *st, int prompt_tokens, size_t *len);
    char *(*stream_delta)(void *st, const char *text, size_t n, size_t *len);
    char *(*stream_end)(void *st, const struct api_result *r, size_t *len);
    json_t *(*reply)(void *st, const struct api_result *r);
    json_t *(*error_body)(const struct oai_error *e);
    void (*destroy)(void *st);
    struct tools_out *to;     /* the output's calls parser (api_tools.h), or NULL */
};

#endif
