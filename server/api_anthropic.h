/*
 * api_anthropic — the Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens):
 * the request is checked field by field (errors name Anthropic's fields) and translated into
 * an OpenAI chat request that oai_parse then validates like any other; the reply and the
 * stream (message_start, content_block_start, ping, content_block_delta, content_block_stop,
 * message_delta, message_stop) are rendered from the completion flow's results through
 * struct api_shape. Errors have Anthropic's shape {"type":"error","error":{"type","message"}}.
 *
 * Loop thread only. The shape owns its state; destroy() frees it.
 */
#ifndef GEMMAD_API_ANTHROPIC_H
#define GEMMAD_API_ANTHROPIC_H

#include <jansson.h>

#include "server/api_common.h"

/* Translates req into a new chat request (*chat). count_only: for count_tokens, where
 * max_tokens is not required and stream is ignored. *stops receives a new reference to
 * stop_sequences (or NULL) for the stop_sequence field. Returns 0 or -1 with e filled. */
int anth_to_chat(json_t *req, int count_only, json_t **chat, json_t **stops, struct oai_error *e);

/* The shape for one request: model as answered, stop_sequences (a reference is taken).
 * NULL when out of memory. */
struct api_shape *anth_shape_create(const char *model, json_t *stops);

/* {"type":"error","error":{"type":…,"message":…}} for any error reply of these routes. */
json_t *anth_error_body(const struct oai_error *e);

/* count_tokens' answer. */
json_t *anth_count_body(int input_tokens);

#endif
