/*
 * api_tools_g4 — the api_tools module's Gemma 4 side (see api_tools.h): a conversation with its
 * tools rendered in Gemma 4's native format (server/g4note.h), its tool tokens written as
 * the bytes only this code can put into a message (oai_messages turns them into the
 * tokens), and the call grammar in Gemma 4's notation.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/grammar.h"
#include "server/api_common.h"
#include "server/api_tools_int.h"
#include "server/jschema.h"

/* A message whose content may hold the tool tokens' bytes (not UTF-8: unchecked). */
static json_t *raw_msg(const char *role, const char *text, size_t n) {
    return json_pack("{s:s, s:o}", "role", role, "content",
                     json_stringn_nocheck(text ? text : "", n));
}

/* b encoded and appended to out; b emptied. */
static void flush_note(struct g4note_buf *b, const struct g4note_ids *ids, struct jsc_buf *out) {
    g4note_encode(b, ids, out);
    g4note_buf_free(b);
}

static int add_calls(json_t *calls, size_t i, json_t *names, const struct g4note_ids *ids,
                     struct jsc_buf *out, struct oai_error *e) {
    char param[96];
    snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
    if (!json_is_array(calls)) return oai_fail(e, 400, param, NULL, "'%s' must be an array", param);
    for (size_t k = 0; k < json_array_size(calls); k++) {
        snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu]", i, k);
        json_t *id, *nm, *args;
        if (tools_read_call(json_array_get(calls, k), param, &id, &nm, &args, e)) return -1;
        struct g4note_buf b = {0};
        int rc = g4note_call(&b, json_string_value(nm), args);
        json_decref(args);
        if (rc) {
            g4note_buf_free(&b);
            return oai_fail(e, 500, NULL, NULL, "out of memory");
        }
        flush_note(&b, ids, out);
        json_object_set(names, json_string_value(id), nm);
    }
    return 0;
}

/* The declarations of the tools (g4note_declaration each), encoded into out. */
static int declarations(json_t *tools, const struct g4note_ids *ids, struct jsc_buf *out) {
    for (size_t k = 0; k < json_array_size(tools); k++) {
        json_t *fn = json_object_get(json_array_get(tools, k), "function");
        json_t *d = json_object_get(fn, "description"), *pa = json_object_get(fn, "parameters");
        json_t *obj = pa ? json_incref(pa) : json_pack("{s:s}", "type", "object");
        struct g4note_buf b = {0};
        int rc = g4note_declaration(&b, json_string_value(json_object_get(fn, "name")),
                                    json_is_string(d) ? json_string_value(d) : NULL, obj);
        json_decref(obj);
        if (rc) {
            g4note_buf_free(&b);
            return -1;
        }
        flush_note(&b, ids, out);
    }
    return out->oom ? -1 : 0;
}

json_t *tools_g4_rewrite(json_t *msgs, json_t *tools, enum tools_mode mode,
                         const struct g4note_ids *ids, struct oai_error *e) {
    json_t *out = json_array(), *names = json_object();
    struct jsc_buf decl = {0};
    if (mode != TOOLS_OFF && declarations(tools, ids, &decl)) {
        oai_fail(e, 500, NULL, NULL, "out of memory");
        goto fail;
    }
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        char param[96];
        json_t *role = json_is_object(m) ? json_object_get(m, "role") : NULL;
        const char *r = json_is_string(role) ? json_string_value(role) : "";
        snprintf(param, sizeof param, "messages[%zu].content", i);
        const int sys = strcmp(r, "system") == 0 || strcmp(r, "developer") == 0;
        if (i == 0 && decl.n) { /* the declarations end the system turn */
            struct jsc_buf b = {0};
            if (sys && tools_add_text(json_object_get(m, "content"), param, &b, e)) {
                jsc_buf_free(&b);
                goto fail;
            }
            jsc_buf_add(&b, decl.p, decl.n);
            json_array_append_new(out, raw_msg("system", b.p, b.n));
            jsc_buf_free(&b);
            if (sys) continue;
        }
        json_t *calls = json_is_object(m) ? api_field(m, "tool_calls") : NULL;
        if (strcmp(r, "assistant") == 0 && calls) {
            struct jsc_buf b = {0};
            if (tools_add_text(json_object_get(m, "content"), param, &b, e) ||
                add_calls(calls, i, names, ids, &b, e)) {
                jsc_buf_free(&b);
                goto fail;
            }
            json_array_append_new(out, raw_msg("assistant", b.p, b.n));
            jsc_buf_free(&b);
        } else if (strcmp(r, "tool") == 0) {
            json_t *nm;
            json_t *t = tools_result_of(m, i, names, &nm, e);
            if (!t) goto fail;
            struct g4note_buf nb = {0};
            int rc = g4note_response(&nb, json_string_value(nm), json_string_value(t),
                                     json_string_length(t));
            json_decref(t);
            /* the result joins the model turn that made the call */
            json_t *pm = json_array_get(out, json_array_size(out) - 1);
            struct jsc_buf b = {0};
            if (pm) {
                json_t *pc = json_object_get(pm, "content");
                jsc_buf_add(&b, json_string_value(pc), json_string_length(pc));
            }
            if (!rc) g4note_encode(&nb, ids, &b);
            g4note_buf_free(&nb);
            if (rc || b.oom) {
                jsc_buf_free(&b);
                oai_fail(e, 500, NULL, NULL, "out of memory");
                goto fail;
            }
            json_object_set_new(pm, "content", json_stringn_nocheck(b.p, b.n));
            jsc_buf_free(&b);
        } else {
            json_array_append(out, m);
        }
    }
    jsc_buf_free(&decl);
    json_decref(names);
    return out;
fail:
    jsc_buf_free(&decl);
    json_decref(names);
    json_decref(out);
    return NULL;
}

int tools_g4_grammar(const struct g4note_ids *ids, const char *alts, int parallel,
                     int max_parallel, struct jsc_buf *gb) {
    jsc_buf_printf(gb, "call ::= <[%d]> \"call:\" (%s) <[%d]>\n", (int)ids->call, alts,
                   (int)ids->call_end);
    if (parallel) jsc_buf_printf(gb, "root ::= call{1,%d}\n", max_parallel);
    else jsc_buf_add(gb, "root ::= call\n", strlen("root ::= call\n"));
    return gb->oom ? -1 : 0;
}

char *tools_g4_trigger(const struct g4note_ids *ids) {
    char *t = malloc(GRAM_TOK_BYTES + 1);
    if (!t) return NULL;
    gram_token_bytes(ids->call, (uint8_t *)t);
    t[GRAM_TOK_BYTES] = 0;
    return t;
}
