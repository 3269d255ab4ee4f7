/*
 * chat_tools — the text gemmad writes into a Gemma 3 prompt for function calling (the model
 * has no tool tokens): the instructions with the tool list, an earlier call of the
 * assistant, and a tool's result. docs/TOOLS.md shows the exact text and how it relates to
 * Google's published Gemma function-calling guidance. The server renders these into plain
 * messages before chat_render; the model's calls are the same blocks, parsed back by the
 * server.
 *
 * Each function writes at most cap bytes (NUL-terminated when cap > 0) and returns the full
 * length, like snprintf. Pure functions: any thread.
 */
#ifndef GEMMAD_CHAT_TOOLS_H
#define GEMMAD_CHAT_TOOLS_H

#include <stddef.h>

#define CHAT_TOOL_OPEN "```tool_call\n"   /* a call block starts with this line */
#define CHAT_TOOL_CLOSE "\n```"           /* and ends with this */
#define CHAT_TOOL_NAME_KEY "{\"name\": \"" /* the call's JSON begins: name first */
#define CHAT_TOOL_ARGS_KEY "\", \"arguments\": " /* then the arguments object */

/* The instructions and the tools (tools[i] is one compact JSON object {"name",
 * "description", "parameters"}, len[i] bytes), for the start of the system text. */
size_t chat_tools_preamble(const char *const *tools, const size_t *len, int n, char *out,
                           size_t cap);
/* One call block: name and the arguments' JSON text. */
size_t chat_tools_call(const char *name, const char *args, size_t args_len, char *out,
                       size_t cap);
/* One result block (the tool message's content). */
size_t chat_tools_result(const char *content, size_t len, char *out, size_t cap);

#endif
