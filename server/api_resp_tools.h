/*
 * api_resp_tools — function calling on the Responses API (POST /v1/responses): the flat
 * function tools ({"type":"function","name","description","parameters","strict"}),
 * tool_choice (none | auto | required | {"type":"function","name"}) and
 * parallel_tool_calls are translated into the chat request's fields, and the input items
 * function_call / function_call_output into assistant tool_calls / tool messages, so
 * api_tools validates and constrains them as on chat completions. On the way out, a chat
 * tool call becomes a function_call output item.
 *
 * Pure functions on one request's JSON; any thread.
 */
#ifndef GEMMAD_API_RESP_TOOLS_H
#define GEMMAD_API_RESP_TOOLS_H

#include <jansson.h>
#include <stddef.h>

#include "server/openai.h"

/* tools, tool_choice, parallel_tool_calls of req into chat. *on: whether the output may hold
 * calls (tools given and tool_choice not "none"). 0, or -1 with e naming the field. */
int resp_tools_to_chat(json_t *req, json_t *chat, int *on, struct oai_error *e);

/* The text of input item i's `key` (a string or input_text / output_text / text parts), or
 * NULL with e naming input. New reference. */
json_t *resp_input_text(json_t *it, const char *key, size_t i, struct oai_error *e);

/* Input item i of type function_call or function_call_output appended to msgs as chat
 * messages (consecutive calls join one assistant message). 0, or -1 with e filled. */
int resp_tools_item(json_t *it, const char *type, size_t i, json_t *msgs, struct oai_error *e);

/* The function_call output item of a chat tool call {id, type, function: {name,
 * arguments}}; status "completed" or "in_progress". New reference. */
json_t *resp_tools_call_item(json_t *call, const char *status);

/* The output item id of a call id ("call_X" -> "fc_X") into out[cap]. */
void resp_tools_item_id(const char *call_id, char *out, size_t cap);

/* oai_parse / api_tools parameter names of the translated fields renamed to the Responses
 * ones (tools[i].function.name -> tools[i].name, ...); 1 when renamed. */
int resp_tools_map_param(char *param, size_t cap);

#endif
