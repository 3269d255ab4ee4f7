/*
 * tool_parse — splits a tools request's output into text and calls (struct tools_out, see
 * api_tools.h). The call blocks are those of engine/chat_tools.h:
 *
 *     ```tool_call\n{"name": "NAME", "arguments": {...}}\n```
 *
 * Text is released up to the point where the call marker could begin, so no part of a
 * marker ever reaches the content; a call's first delta goes out when its name is complete
 * and its arguments as they arrive (the bytes of the arguments object only, tracked with a
 * small JSON scanner: depth, strings, escapes). Something that starts like a marker but does
 * not continue like a call is given back as text.
 *
 * Gemma 4's native calls (tools_out_set_g4) are <|tool_call>call:NAME{...}<tool_call|>, the
 * tool tokens arriving as their grammar.h bytes; other control tokens never reach the text.
 * The notation is converted to JSON when a call's closing brace arrives, and the arguments
 * go out in one delta.
 */
#define _GNU_SOURCE /* memmem */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat_tools.h"
#include "scheduler/grammar.h"
#include "server/api_tools.h"
#include "server/jschema.h"

enum { M_TEXT, M_HEAD, M_ARGS, M_TAIL, M_GAP };

struct tools_out {
    char prefix[64];         /* call ids: prefix_N */
    struct jsc_buf pend;     /* bytes not yet classified */
    struct jsc_buf content;  /* all text released */
    struct jsc_buf args;     /* the current call's arguments */
    json_t *calls;           /* [{id, type, function: {name, arguments}}] */
    int mode;
    int depth, in_str, esc;  /* JSON scanner over the arguments */
    int g4;                  /* Gemma 4's native calls */
    char enc_call[GRAM_TOK_BYTES + 1], enc_end[GRAM_TOK_BYTES + 1], enc_q[GRAM_TOK_BYTES + 1];
};

struct tools_out *tools_out_new(const char *id_prefix) {
    struct tools_out *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    snprintf(o->prefix, sizeof o->prefix, "%s", id_prefix);
    o->calls = json_array();
    return o;
}

void tools_out_set_g4(struct tools_out *o, const struct g4note_ids *ids) {
    o->g4 = 1;
    gram_token_bytes(ids->call, (uint8_t *)o->enc_call);
    gram_token_bytes(ids->call_end, (uint8_t *)o->enc_end);
    gram_token_bytes(ids->quote, (uint8_t *)o->enc_q);
}

void tools_out_free(struct tools_out *o) {
    if (!o) return;
    jsc_buf_free(&o->pend);
    jsc_buf_free(&o->content);
    jsc_buf_free(&o->args);
    json_decref(o->calls);
    free(o);
}

static void drop(struct jsc_buf *b, size_t n) {
    if (n >= b->n) {
        b->n = 0;
    } else {
        memmove(b->p, b->p + n, b->n - n);
        b->n -= n;
    }
    if (b->p) b->p[b->n] = 0;
}

static void text_out(struct tools_out *o, json_t *deltas, const char *s, size_t n) {
    if (!n) return;
    jsc_buf_add(&o->content, s, n);
    json_t *t = json_stringn_nocheck(s, n);
    json_array_append_new(deltas, json_pack("{s:o}", "content", t));
}

static json_t *call_delta(int index, json_t *fields) {
    json_object_set_new(fields, "index", json_integer(index));
    return json_pack("{s:[o]}", "tool_calls", fields);
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of m. */
static size_t partial(const char *s, size_t n, const char *m) {
    size_t ml = strlen(m);
    for (size_t k = ml - 1 < n ? ml - 1 : n; k > 0; k--)
        if (memcmp(s + n - k, m, k) == 0) return k;
    return 0;
}

/* Text of a Gemma 4 output: control tokens (0xFF and their id bytes) left out. */
static void text_out_g4(struct tools_out *o, json_t *deltas, const char *s, size_t n) {
    size_t a = 0, i = 0;
    while (i < n) {
        if ((uint8_t)s[i] != 0xff) {
            i++;
            continue;
        }
        text_out(o, deltas, s + a, i - a);
        i = i + GRAM_TOK_BYTES < n ? i + GRAM_TOK_BYTES : n;
        a = i;
    }
    text_out(o, deltas, s + a, n - a);
}

static int valid_name_g4(const char *p, size_t n) {
    if (n == 0 || n > 64) return 0;
    for (size_t i = 0; i < n; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", p[i]) || !p[i])
            return 0;
    return 1;
}

static void start_call(struct tools_out *o, json_t *deltas, const char *name) {
    char id[96];
    const int idx = (int)json_array_size(o->calls);
    snprintf(id, sizeof id, "call_%s_%d", o->prefix, idx);
    json_array_append_new(o->calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type",
                                              "function", "function", "name", name,
                                              "arguments", ""));
    json_array_append_new(deltas, call_delta(idx, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id,
                                                            "type", "function", "function",
                                                            "name", name, "arguments", "")));
    o->mode = M_ARGS;
    o->args.n = 0;
    o->depth = o->in_str = o->esc = 0;
}

/* The arguments in notation (o->args) as JSON, set on the call and sent as one delta. */
static void end_args_g4(struct tools_out *o, json_t *deltas) {
    const int idx = (int)json_array_size(o->calls) - 1;
    char err[128];
    size_t used = 0;
    json_t *v = g4note_parse(o->args.p, o->args.n, o->enc_q, GRAM_TOK_BYTES, &used, err, sizeof err);
    char *js = v && used == o->args.n ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    json_t *fn = json_object_get(json_array_get(o->calls, (size_t)idx), "function");
    json_object_set_new(fn, "arguments", json_string(js ? js : ""));
    if (js) json_array_append_new(deltas, call_delta(idx, json_pack("{s:{s:s}}", "function", "arguments", js)));
    free(js);
}

static int step_g4(struct tools_out *o, json_t *deltas, int final) {
    char *p = o->pend.p;
    size_t n = o->pend.n;
    switch (o->mode) {
    case M_TEXT: {
        char *hit = memmem(p, n, o->enc_call, GRAM_TOK_BYTES);
        size_t upto = hit ? (size_t)(hit - p) : n - (final ? 0 : partial(p, n, o->enc_call));
        text_out_g4(o, deltas, p, upto);
        drop(&o->pend, upto + (hit ? GRAM_TOK_BYTES : 0));
        if (hit) o->mode = M_HEAD;
        return hit || upto > 0;
    }
    case M_HEAD: {
        const size_t cl = strlen("call:");
        char *br = n > cl ? memchr(p + cl, '{', n - cl) : NULL;
        int bad = memcmp(p, "call:", n < cl ? n : cl) != 0;
        if (!bad && br) {
            const size_t nl = (size_t)(br - (p + cl));
            if (valid_name_g4(p + cl, nl)) {
                char name[72];
                memcpy(name, p + cl, nl);
                name[nl] = 0;
                drop(&o->pend, cl + nl);
                start_call(o, deltas, name);
                return 1;
            }
            bad = 1;
        }
        if (bad || n > cl + 65) { /* not a call: the rest is text (the marker was a token) */
            o->mode = M_TEXT;
            return 1;
        }
        if (final) drop(&o->pend, n); /* cut short (max_tokens) before the name ended */
        return 0;
    }
    case M_ARGS: {
        size_t i = 0;
        int done = 0;
        while (i < n && !done) {
            if ((uint8_t)p[i] == 0xff) {
                if (n - i < GRAM_TOK_BYTES) break;
                if (memcmp(p + i, o->enc_q, GRAM_TOK_BYTES) == 0) o->in_str = !o->in_str;
                i += GRAM_TOK_BYTES;
                continue;
            }
            if (!o->in_str && (p[i] == '{' || p[i] == '[')) o->depth++;
            else if (!o->in_str && (p[i] == '}' || p[i] == ']') && --o->depth == 0) done = 1;
            i++;
        }
        jsc_buf_add(&o->args, p, i);
        drop(&o->pend, final && !done ? n : i);
        if (done) {
            end_args_g4(o, deltas);
            o->mode = M_TAIL;
        }
        return i > 0 && !final ? 1 : done;
    }
    case M_TAIL: {
        if (n < GRAM_TOK_BYTES && !final && memcmp(p, o->enc_end, n) == 0) return 0;
        const int m = n >= GRAM_TOK_BYTES && memcmp(p, o->enc_end, GRAM_TOK_BYTES) == 0;
        drop(&o->pend, m ? GRAM_TOK_BYTES : 0);
        o->mode = M_GAP;
        return 1;
    }
    }
    return 0;
}

/* One step; returns 1 when it made progress. */
static int step(struct tools_out *o, json_t *deltas, int final) {
    if (o->g4 && o->mode != M_GAP && o->pend.n) return step_g4(o, deltas, final);
    const char *open = CHAT_TOOL_OPEN, *nk = CHAT_TOOL_NAME_KEY, *ak = CHAT_TOOL_ARGS_KEY;
    const size_t ol = strlen(open), nkl = strlen(nk), akl = strlen(ak);
    char *p = o->pend.p;
    size_t n = o->pend.n;
    if (n == 0) return 0;
    switch (o->mode) {
    case M_TEXT: {
        char *hit = memmem(p, n, open, ol);
        if (hit) {
            text_out(o, deltas, p, (size_t)(hit - p));
            drop(&o->pend, (size_t)(hit - p) + ol);
            o->mode = M_HEAD;
            return 1;
        }
        size_t hold = final ? 0 : partial(p, n, open);
        if (n - hold == 0) return 0;
        text_out(o, deltas, p, n - hold);
        drop(&o->pend, n - hold);
        return 1;
    }
    case M_HEAD: {
        size_t cmp = n < nkl ? n : nkl;
        char *end = n > nkl ? memmem(p + nkl, n - nkl, ak, akl) : NULL;
        int bad = memcmp(p, nk, cmp) != 0;
        if (!bad && end) {
            size_t nl = (size_t)(end - (p + nkl));
            char name[72];
            if (nl == 0 || nl > 64) bad = 1;
            else {
                memcpy(name, p + nkl, nl);
                name[nl] = 0;
                for (size_t i = 0; i < nl; i++)
                    if (name[i] == '"' || name[i] == '\\') bad = 1;
            }
            if (!bad) {
                char id[96];
                const int idx = (int)json_array_size(o->calls);
                snprintf(id, sizeof id, "call_%s_%d", o->prefix, idx);
                json_array_append_new(o->calls,
                                      json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type",
                                                "function", "function", "name", name,
                                                "arguments", ""));
                json_array_append_new(
                    deltas, call_delta(idx, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type",
                                                      "function", "function", "name", name,
                                                      "arguments", "")));
                drop(&o->pend, nkl + nl + akl);
                o->mode = M_ARGS;
                o->args.n = 0;
                o->depth = o->in_str = o->esc = 0;
                return 1;
            }
        }
        if (bad || n > nkl + 64 + akl + 8) { /* not a call: give it back */
            text_out(o, deltas, open, ol);
            o->mode = M_TEXT;
            return 1;
        }
        if (final) { /* a call cut short (max_tokens) before its name ended: dropped */
            drop(&o->pend, n);
            return 0;
        }
        return 0;
    }
    case M_ARGS: {
        size_t i = 0;
        int done = 0;
        for (; i < n && !done; i++) {
            const char c = p[i];
            if (o->in_str) {
                if (o->esc) o->esc = 0;
                else if (c == '\\') o->esc = 1;
                else if (c == '"') o->in_str = 0;
            } else if (c == '"') {
                o->in_str = 1;
            } else if (c == '{' || c == '[') {
                o->depth++;
            } else if (c == '}' || c == ']') {
                if (--o->depth == 0) done = 1;
            }
        }
        jsc_buf_add(&o->args, p, i);
        const int idx = (int)json_array_size(o->calls) - 1;
        json_array_append_new(
            deltas, call_delta(idx, json_pack("{s:{s:s%}}", "function", "arguments", p, i)));
        drop(&o->pend, i);
        if (done) {
            json_t *fn = json_object_get(json_array_get(o->calls, (size_t)idx), "function");
            json_object_set_new(fn, "arguments", json_stringn_nocheck(o->args.p, o->args.n));
            o->mode = M_TAIL;
        }
        return 1;
    }
    case M_TAIL: {
        const char *tail = "}" CHAT_TOOL_CLOSE;
        size_t tl = strlen(tail);
        if (n < tl && !final && memcmp(p, tail, n) == 0) return 0;
        drop(&o->pend, n >= tl && memcmp(p, tail, tl) == 0 ? tl : 0);
        o->mode = M_GAP;
        return 1;
    }
    case M_GAP: {
        size_t i = 0;
        while (i < n && (p[i] == '\n' || p[i] == ' ' || p[i] == '\t' || p[i] == '\r')) i++;
        if (i == n && !final) return 0;
        drop(&o->pend, i);
        o->mode = M_TEXT;
        return 1;
    }
    }
    return 0;
}

json_t *tools_out_feed(struct tools_out *o, const char *text, size_t len, int final) {
    json_t *deltas = json_array();
    jsc_buf_add(&o->pend, text, len);
    while (step(o, deltas, final)) {
    }
    return deltas;
}

json_t *tools_out_content(struct tools_out *o) {
    if (json_array_size(o->calls) && o->content.n == 0) return json_null();
    return json_stringn_nocheck(o->content.p ? o->content.p : "", o->content.n);
}

json_t *tools_out_calls(struct tools_out *o) {
    return json_array_size(o->calls) ? json_incref(o->calls) : NULL;
}

int tools_out_n_calls(const struct tools_out *o) { return (int)json_array_size(o->calls); }

json_t *tools_chunk(const struct oai_resp *r, int index, json_t *delta) {
    json_t *j = oai_chunk(r);
    json_t *ch = json_pack("{s:i,s:o,s:n,s:n}", "index", index, "delta", delta, "logprobs",
                           "finish_reason");
    json_object_set_new(j, "choices", json_pack("[o]", ch));
    return j;
}

const char *tools_finish(const struct tools_out *o, const char *finish) {
    return tools_out_n_calls(o) > 0 && finish && strcmp(finish, "stop") == 0 ? "tool_calls"
                                                                              : finish;
}

json_t *tools_choice(struct tools_out *o, int index, const char *finish) {
    json_t *m = json_pack("{s:s,s:o,s:n}", "role", "assistant", "content", tools_out_content(o),
                          "refusal");
    json_t *calls = tools_out_calls(o);
    if (calls) json_object_set_new(m, "tool_calls", calls);
    return json_pack("{s:i,s:o,s:n,s:s}", "index", index, "message", m, "logprobs",
                     "finish_reason", tools_finish(o, finish));
}
