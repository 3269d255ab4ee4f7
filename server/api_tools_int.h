/*
 * api_tools_int — the api_tools module's private declarations, shared by api_tools.c and
 * api_tools_g4.c (Gemma 4's native format). Loop thread; everything belongs to one request.
 */
#ifndef GEMMAD_API_TOOLS_INT_H
#define GEMMAD_API_TOOLS_INT_H

#include <jansson.h>

#include "server/api_tools.h"

/* A message's text content (a new string; null or absent: ""), or NULL with e filled;
 * tools_add_text appends it to b. */
json_t *tools_text_of(json_t *c, const char *param, struct oai_error *e);
int tools_add_text(json_t *c, const char *param, struct jsc_buf *b, struct oai_error *e);
/* A tool message (messages[i]): its content text (a new string) and *name, the function
 * of the call its tool_call_id names in names (id -> name); NULL with e filled. */
json_t *tools_result_of(json_t *m, size_t i, json_t *names, json_t **name, struct oai_error *e);
/* One entry of an assistant message's tool_calls: id, function.name (borrowed) and the
 * arguments parsed (a new object); 0, or -1 with e filled (400 naming param). */
int tools_read_call(json_t *c, const char *param, json_t **id, json_t **name, json_t **args,
                    struct oai_error *e);

/* ---- Gemma 4's native format (api_tools_g4.c) ---- */

/* The conversation with the tools rendered in Gemma 4's format: declarations at the end of
 * the system turn, assistant calls and tool results in the model turn, the tool tokens as
 * their grammar.h bytes (oai_messages turns them into tokens). A new array or NULL. */
json_t *tools_g4_rewrite(json_t *msgs, json_t *tools, enum tools_mode mode,
                         const struct g4note_ids *ids, struct oai_error *e);
/* The call rules after the tools' argument rules: alts is `"NAME" rule | ...`. */
int tools_g4_grammar(const struct g4note_ids *ids, const char *alts, int parallel,
                     int max_parallel, struct jsc_buf *gb);
/* The lazy grammar's trigger: the bytes of <|tool_call> (malloc'd string). */
char *tools_g4_trigger(const struct g4note_ids *ids);

#endif
