/*
 * chat_tools — the function-calling text of a Gemma 3 prompt. See chat_tools.h and
 * docs/TOOLS.md.
 */
#include "engine/chat_tools.h"

#include <string.h>

/* A snprintf-like appender: counts everything, writes what fits. */
struct ct_out {
    char *p;
    size_t cap, n;
};

static void put(struct ct_out *o, const char *s, size_t len) {
    if (o->n < o->cap) {
        size_t room = o->cap - o->n - 1;
        memcpy(o->p + o->n, s, len < room ? len : room);
    }
    o->n += len;
    if (o->cap) o->p[o->n < o->cap ? o->n : o->cap - 1] = 0;
}

static void puts0(struct ct_out *o, const char *s) { put(o, s, strlen(s)); }

size_t chat_tools_preamble(const char *const *tools, const size_t *len, int n, char *out,
                           size_t cap) {
    struct ct_out o = {out, cap, 0};
    if (cap) out[0] = 0;
    puts0(&o, "You can call functions. The available functions, as JSON:\n");
    for (int i = 0; i < n; i++) {
        put(&o, tools[i], len[i]);
        puts0(&o, "\n");
    }
    puts0(&o, "\nTo call a function, write a block exactly like this one, one block per call, "
              "and nothing after the last block:\n" CHAT_TOOL_OPEN CHAT_TOOL_NAME_KEY
              "function_name" CHAT_TOOL_ARGS_KEY "{\"argument\": \"value\"}}" CHAT_TOOL_CLOSE
              "\nThe results come back in ```tool_output blocks. If no function helps, answer "
              "in plain text.");
    return o.n;
}

size_t chat_tools_call(const char *name, const char *args, size_t args_len, char *out,
                       size_t cap) {
    struct ct_out o = {out, cap, 0};
    if (cap) out[0] = 0;
    puts0(&o, CHAT_TOOL_OPEN CHAT_TOOL_NAME_KEY);
    puts0(&o, name);
    puts0(&o, CHAT_TOOL_ARGS_KEY);
    put(&o, args, args_len);
    puts0(&o, "}" CHAT_TOOL_CLOSE);
    return o.n;
}

size_t chat_tools_result(const char *content, size_t len, char *out, size_t cap) {
    struct ct_out o = {out, cap, 0};
    if (cap) out[0] = 0;
    puts0(&o, "```tool_output\n");
    put(&o, content, len);
    puts0(&o, CHAT_TOOL_CLOSE);
    return o.n;
}
