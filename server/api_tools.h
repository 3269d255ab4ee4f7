/*
 * api_tools — structured output and function calling on the chat and completions APIs:
 * response_format (json_object, json_schema), llama.cpp's `grammar` (GBNF) and top-level
 * `json_schema`, `tools`, `tool_choice` (none | auto | required | a named function),
 * `parallel_tool_calls`, and the conversation's assistant `tool_calls` and `tool` messages.
 *
 * tools_prepare() runs before oai_parse: it validates those fields (400 naming the
 * parameter), compiles the grammar the output must follow (scheduler/grammar.h; a schema
 * goes through server/jschema.h first), and returns a copy of the request with the tools
 * rendered into the messages (engine/chat_tools.h; docs/TOOLS.md) and the fields it handled
 * removed, which oai_parse then validates like any request. With tool_choice auto the
 * grammar is lazy: it starts when the model writes the call marker.
 *
 * The model's output of a tools request is split back into text and calls by struct
 * tools_out (tool_parse.c), incrementally for streams: text never shows a marker; each
 * call's first delta carries index, id, type and name, later ones argument fragments.
 *
 * Loop thread; everything here belongs to one request.
 */
#ifndef GEMMAD_API_TOOLS_H
#define GEMMAD_API_TOOLS_H

#include <jansson.h>
#include <stddef.h>

#include "server/g4note.h"
#include "server/jschema_fmt.h"
#include "server/openai.h"

struct gram;

/* Limits of these fields (from the configuration). */
struct tools_limits {
    int max_tools;
    size_t max_schema_bytes;
    int max_stacks, max_elems;   /* grammar budgets */
    struct gram_lru *cache;      /* compiled grammars shared by requests, or NULL */
    const struct g4note_ids *g4; /* Gemma 4's tool tokens: its native format (docs/TOOLS.md);
                                  * NULL: the text format of Gemma 3 */
    int json_schema_extra_keys;  /* jschema_opts.extra_keys for every schema converted */
    int json_schema_any_order;   /* jschema_opts.any_order likewise */
};

enum tools_mode { TOOLS_OFF = 0, TOOLS_AUTO = 1, TOOLS_REQUIRED = 2 };

struct tools_req {
    struct gram *grammar;        /* the output's grammar (a reference) or NULL */
    char *trigger;               /* lazy grammar trigger (tool_choice auto) or NULL */
    enum tools_mode mode;        /* TOOLS_OFF: the output is plain text */
    int parallel;                /* parallel_tool_calls */
    int native;                  /* Gemma 4's native format: calls in its notation, its tool
                                  * tokens in the output as their grammar.h bytes
                                  * (sched_req.control_bytes) */
    struct g4note_ids g4;        /* with native */
};

/* Returns 0 with *out (NULL when the request uses none of these fields) and *root_out (a
 * new reference to the request to hand to oai_parse: root itself or a rewritten copy), or
 * -1 with e filled. */
int tools_prepare(json_t *root, int is_chat, const struct tools_limits *lim,
                  struct tools_req **out, json_t **root_out, struct oai_error *e);
void tools_req_free(struct tools_req *t);
/* tools_prepare (limits from lim) then oai_parse; the tools state rides in (*out)->tools.
 * Any thread (it touches only root, the limits and the immutable vocabulary). */
int tools_parse_request(json_t *root, int is_chat, const struct oai_limits *lim,
                        struct oai_params **out, struct oai_error *e);

/* ---- the output of a tools request (tool_parse.c) ---- */

struct tools_out;
/* id_prefix: unique per request (call ids are id_prefix + "_" + index). */
struct tools_out *tools_out_new(const char *id_prefix);
/* Read Gemma 4's native calls (tools_req.native) instead: <|tool_call>call:NAME{...}
 * <tool_call|> with the tool tokens as their grammar.h bytes; a call's arguments are
 * converted to JSON when the call ends and sent in one delta. Call before the first feed. */
void tools_out_set_g4(struct tools_out *o, const struct g4note_ids *ids);
void tools_out_free(struct tools_out *o);
/* Feed output text. Returns a JSON array of deltas made ready by it (new reference; may be
 * empty): {"content": "..."} text, or {"tool_calls": [{index, id?, type?, function}]}.
 * final = 1 at the end of the output releases held-back text. */
json_t *tools_out_feed(struct tools_out *o, const char *text, size_t len, int final);
/* After the final feed: the whole message's content (new string or json null when only
 * calls were made) and tool_calls (new array, or NULL when there were none). */
json_t *tools_out_content(struct tools_out *o);
json_t *tools_out_calls(struct tools_out *o);
int tools_out_n_calls(const struct tools_out *o);
/* A stream chunk of choice `index` whose delta is `delta` (taken over). */
json_t *tools_chunk(const struct oai_resp *r, int index, json_t *delta);
/* The finished choice of a non-stream reply: message {role, content, tool_calls?},
 * finish_reason "tool_calls" when calls were made and the output ended normally. */
json_t *tools_choice(struct tools_out *o, int index, const char *finish);
/* finish_reason of a choice: "tool_calls" instead of "stop" when calls were made. */
const char *tools_finish(const struct tools_out *o, const char *finish);

#endif
