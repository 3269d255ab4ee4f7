/*
 * api_tools — request side of structured output and function calling. See api_tools.h.
 */
#include "server/api_tools_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat.h"
#include "engine/chat_tools.h"
#include "scheduler/grammar.h"
#include "server/api_common.h"
#include "server/jschema.h"

#define TOOLS_MAX_PARALLEL 8 /* calls in one reply with parallel_tool_calls */

void tools_req_free(struct tools_req *t) {
    if (!t) return;
    gram_unref(t->grammar);
    free(t->trigger);
    free(t);
}

static int valid_name(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > 64) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* GBNF for a schema value into gb, failing with param named. */
static int schema_gbnf(json_t *schema, const char *param, const struct tools_limits *lim,
                       struct jsc_buf *gb, struct oai_error *e) {
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return oai_fail(e, 400, param, NULL, "'%s' must be a JSON Schema object", param);
    char *dump = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
    size_t n = dump ? strlen(dump) : 0;
    free(dump);
    if (n > lim->max_schema_bytes)
        return oai_fail(e, 400, param, NULL, "'%s' is larger than %zu bytes", param,
                        lim->max_schema_bytes);
    char err[400];
    const struct jschema_opts opt = {.extra_keys = lim->json_schema_extra_keys,
                                     .any_order = lim->json_schema_any_order};
    if (jschema_to_gbnf(schema, &opt, gb, err, sizeof err))
        return oai_fail(e, 400, param, NULL, "invalid '%s': %s", param, err);
    return 0;
}

/* response_format / grammar / json_schema: the output grammar text, or nothing. */
static int structured(json_t *root, const struct tools_limits *lim, struct jsc_buf *gb,
                      const char **param, struct oai_error *e) {
    json_t *rf = api_field(root, "response_format"), *gr = api_field(root, "grammar");
    json_t *js = api_field(root, "json_schema");
    *param = NULL;
    if (rf) {
        json_t *t = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
        if (!json_is_string(t))
            return oai_fail(e, 400, "response_format", NULL,
                            "'response_format' must be an object with a string 'type'");
        const char *ty = json_string_value(t);
        if (strcmp(ty, "json_object") == 0) {
            if (jschema_any_object(gb)) return oai_fail(e, 500, NULL, NULL, "out of memory");
            *param = "response_format";
        } else if (strcmp(ty, "json_schema") == 0) {
            json_t *jsn = json_object_get(rf, "json_schema");
            json_t *sc = json_is_object(jsn) ? json_object_get(jsn, "schema") : NULL;
            if (!sc)
                return oai_fail(e, 400, "response_format.json_schema.schema", NULL,
                                "'response_format.json_schema.schema' is required");
            if (schema_gbnf(sc, "response_format.json_schema.schema", lim, gb, e)) return -1;
            *param = "response_format";
        } else if (strcmp(ty, "text") != 0) {
            return oai_fail(e, 400, "response_format", NULL,
                            "response_format type '%.32s' is not supported (text, json_object, "
                            "json_schema)", ty);
        }
    }
    if (gr) {
        if (*param)
            return oai_fail(e, 400, "grammar", NULL, "give only one of response_format, grammar "
                            "and json_schema");
        if (!json_is_string(gr)) return oai_fail(e, 400, "grammar", NULL, "'grammar' must be a string");
        if (json_string_length(gr) > lim->max_schema_bytes)
            return oai_fail(e, 400, "grammar", NULL, "'grammar' is larger than %zu bytes",
                            lim->max_schema_bytes);
        jsc_buf_add(gb, json_string_value(gr), json_string_length(gr));
        *param = "grammar";
    }
    if (js) {
        if (*param)
            return oai_fail(e, 400, "json_schema", NULL, "give only one of response_format, "
                            "grammar and json_schema");
        if (schema_gbnf(js, "json_schema", lim, gb, e)) return -1;
        *param = "json_schema";
    }
    return 0;
}

/* tools + tool_choice: the call grammar (mode != OFF) into gb. */
static int tool_spec(json_t *root, const struct tools_limits *lim, struct tools_req *t,
                     struct jsc_buf *gb, struct oai_error *e) {
    json_t *tools = api_field(root, "tools"), *tc = api_field(root, "tool_choice");
    t->parallel = 1;
    if (api_bool_field(root, "parallel_tool_calls", &t->parallel, e)) return -1;
    if (tools && !json_is_array(tools)) return oai_fail(e, 400, "tools", NULL, "'tools' must be an array");
    size_t n = tools ? json_array_size(tools) : 0;
    if ((long long)n > lim->max_tools)
        return oai_fail(e, 400, "tools", NULL, "at most %d tools are allowed", lim->max_tools);
    const char *named = NULL;
    t->mode = n ? TOOLS_AUTO : TOOLS_OFF;
    if (tc) {
        if (json_is_string(tc)) {
            const char *v = json_string_value(tc);
            if (strcmp(v, "none") == 0) t->mode = TOOLS_OFF;
            else if (strcmp(v, "auto") == 0) t->mode = n ? TOOLS_AUTO : TOOLS_OFF;
            else if (strcmp(v, "required") == 0) t->mode = TOOLS_REQUIRED;
            else return oai_fail(e, 400, "tool_choice", NULL, "unknown tool_choice '%.32s'", v);
        } else if (json_is_object(tc)) {
            json_t *ty = json_object_get(tc, "type"), *fn = json_object_get(tc, "function");
            json_t *nm = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
            if (!json_is_string(ty) || strcmp(json_string_value(ty), "function") != 0 || !json_is_string(nm))
                return oai_fail(e, 400, "tool_choice", NULL,
                                "'tool_choice' must be none, auto, required or "
                                "{\"type\": \"function\", \"function\": {\"name\": ...}}");
            named = json_string_value(nm);
            t->mode = TOOLS_REQUIRED;
        } else {
            return oai_fail(e, 400, "tool_choice", NULL, "'tool_choice' must be a string or an object");
        }
        if (t->mode == TOOLS_REQUIRED && n == 0)
            return oai_fail(e, 400, "tool_choice", NULL, "tool_choice needs 'tools'");
    }
    char *dump = tools ? json_dumps(tools, JSON_COMPACT) : NULL;
    size_t bytes = dump ? strlen(dump) : 0;
    free(dump);
    if (bytes > lim->max_schema_bytes)
        return oai_fail(e, 400, "tools", NULL, "'tools' is larger than %zu bytes", lim->max_schema_bytes);
    int found = named == NULL;
    struct jsc_buf alts = {0};
    int base = 1, n_alts = 0;
    char param[96], err[400];
    for (size_t i = 0; i < n; i++) {
        json_t *tl = json_array_get(tools, i);
        json_t *ty = json_is_object(tl) ? json_object_get(tl, "type") : NULL;
        json_t *fn = json_is_object(tl) ? json_object_get(tl, "function") : NULL;
        snprintf(param, sizeof param, "tools[%zu]", i);
        if (!json_is_string(ty) || strcmp(json_string_value(ty), "function") != 0 || !json_is_object(fn)) {
            jsc_buf_free(&alts);
            return oai_fail(e, 400, param, NULL, "'%s' must be {\"type\": \"function\", \"function\": {...}}", param);
        }
        json_t *nm = json_object_get(fn, "name"), *pa = json_object_get(fn, "parameters");
        snprintf(param, sizeof param, "tools[%zu].function.name", i);
        if (!json_is_string(nm) || !valid_name(json_string_value(nm))) {
            jsc_buf_free(&alts);
            return oai_fail(e, 400, param, NULL, "'%s' must match ^[a-zA-Z0-9_-]{1,64}$", param);
        }
        const char *name = json_string_value(nm);
        for (size_t j = 0; j < i; j++) {
            json_t *o = json_object_get(json_object_get(json_array_get(tools, j), "function"), "name");
            if (json_is_string(o) && strcmp(json_string_value(o), name) == 0) {
                jsc_buf_free(&alts);
                return oai_fail(e, 400, param, NULL, "duplicate tool name '%s'", name);
            }
        }
        if (named && strcmp(named, name) == 0) found = 1;
        if (t->mode == TOOLS_OFF || (named && strcmp(named, name) != 0)) continue;
        snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
        json_t *schema = pa ? json_incref(pa) : json_pack("{s:s}", "type", "object");
        char rule[32];
        snprintf(rule, sizeof rule, "tool%u", (unsigned)i);
        const struct jschema_opts opt = {.extra_keys = lim->json_schema_extra_keys,
                                     .any_order = lim->json_schema_any_order};
        int rc = lim->g4 ? jschema_rules_g4(schema, rule, gb, base, lim->g4->quote, &opt, err,
                                            sizeof err)
                         : jschema_rules(schema, rule, gb, base, &opt, err, sizeof err);
        json_decref(schema);
        if (rc) {
            jsc_buf_free(&alts);
            return oai_fail(e, 400, param, NULL, "invalid '%s': %s", param, err);
        }
        base = 0;
        if (n_alts++) jsc_buf_add(&alts, " | ", sizeof(" | ") - 1);
        jsc_buf_lit(&alts, name, strlen(name));
        if (lim->g4) jsc_buf_printf(&alts, " tool%zu", i);
        else jsc_buf_printf(&alts, " \"\\\", \\\"arguments\\\": \" tool%zu", i);
    }
    if (!found) {
        jsc_buf_free(&alts);
        return oai_fail(e, 400, "tool_choice", NULL, "tool_choice names '%.64s', which is not in "
                        "'tools'", named);
    }
    if (t->mode != TOOLS_OFF && lim->g4) {
        tools_g4_grammar(lim->g4, alts.p, t->parallel, TOOLS_MAX_PARALLEL, gb);
    } else if (t->mode != TOOLS_OFF) {
        jsc_buf_add(gb, "call ::= ", sizeof("call ::= ") - 1);
        jsc_buf_lit(gb, CHAT_TOOL_OPEN CHAT_TOOL_NAME_KEY, strlen(CHAT_TOOL_OPEN CHAT_TOOL_NAME_KEY));
        jsc_buf_printf(gb, " (%s) ", alts.p);
        jsc_buf_lit(gb, "}" CHAT_TOOL_CLOSE, strlen("}" CHAT_TOOL_CLOSE));
        if (t->parallel) jsc_buf_printf(gb, "\nroot ::= call (\"\\n\" call){0,%d}\n", TOOLS_MAX_PARALLEL - 1);
        else jsc_buf_add(gb, "\nroot ::= call\n", sizeof("\nroot ::= call\n") - 1);
    }
    jsc_buf_free(&alts);
    return 0;
}

/* ---- messages ----------------------------------------------------------------------- */

json_t *tools_text_of(json_t *c, const char *param, struct oai_error *e) {
    static const char *const types[] = {"text", NULL};
    if (!c || json_is_null(c)) return json_string("");
    return api_text_content(c, types, param, e);
}

json_t *tools_result_of(json_t *m, size_t i, json_t *names, json_t **name, struct oai_error *e) {
    char param[96];
    json_t *id = json_object_get(m, "tool_call_id");
    *name = json_is_string(id) ? json_object_get(names, json_string_value(id)) : NULL;
    snprintf(param, sizeof param, "messages[%zu].tool_call_id", i);
    if (!*name) {
        oai_fail(e, 400, param, NULL, "'%s' must name a tool call of an earlier assistant "
                 "message", param);
        return NULL;
    }
    snprintf(param, sizeof param, "messages[%zu].content", i);
    return tools_text_of(json_object_get(m, "content"), param, e);
}

int tools_add_text(json_t *c, const char *param, struct jsc_buf *b, struct oai_error *e) {
    json_t *t = tools_text_of(c, param, e);
    if (!t) return -1;
    jsc_buf_add(b, json_string_value(t), json_string_length(t));
    json_decref(t);
    return 0;
}

static json_t *msg(const char *role, const char *text) {
    return json_pack("{s:s, s:s}", "role", role, "content", text);
}

static int has_tool_messages(json_t *msgs) {
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        json_t *r = json_is_object(m) ? json_object_get(m, "role") : NULL;
        if (json_is_string(r) && strcmp(json_string_value(r), "tool") == 0) return 1;
        if (json_is_object(m) && api_field(m, "tool_calls")) return 1;
    }
    return 0;
}

int tools_read_call(json_t *c, const char *param, json_t **id, json_t **name, json_t **args,
                    struct oai_error *e) {
    *id = json_is_object(c) ? json_object_get(c, "id") : NULL;
    json_t *fn = json_is_object(c) ? json_object_get(c, "function") : NULL;
    *name = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
    json_t *ar = json_is_object(fn) ? json_object_get(fn, "arguments") : NULL;
    if (!json_is_string(*id) || !json_is_string(*name) || !json_is_string(ar))
        return oai_fail(e, 400, param, NULL, "'%s' needs a string id, function.name and "
                        "function.arguments", param);
    json_error_t je;
    *args = json_loadb(json_string_value(ar), json_string_length(ar), 0, &je);
    if (!json_is_object(*args)) {
        json_decref(*args);
        *args = NULL;
        return oai_fail(e, 400, param, NULL, "'%s.function.arguments' must be a JSON object", param);
    }
    return 0;
}

/* The rendered text of an assistant message's tool_calls (appended to buf). */
static int render_calls(json_t *calls, size_t i, json_t *ids, struct jsc_buf *buf,
                        struct oai_error *e) {
    char param[96];
    snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
    if (!json_is_array(calls)) return oai_fail(e, 400, param, NULL, "'%s' must be an array", param);
    size_t k;
    json_t *c;
    json_array_foreach(calls, k, c) {
        snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu]", i, k);
        json_t *id, *nm, *args;
        if (tools_read_call(c, param, &id, &nm, &args, e)) return -1;
        char *compact = json_dumps(args, JSON_COMPACT);
        json_decref(args);
        if (!compact) return oai_fail(e, 500, NULL, NULL, "out of memory");
        size_t need = chat_tools_call(json_string_value(nm), compact, strlen(compact), NULL, 0);
        char *t = malloc(need + 1);
        if (!t) {
            free(compact);
            return oai_fail(e, 500, NULL, NULL, "out of memory");
        }
        chat_tools_call(json_string_value(nm), compact, strlen(compact), t, need + 1);
        free(compact);
        if (buf->n) jsc_buf_add(buf, "\n", sizeof("\n") - 1);
        jsc_buf_add(buf, t, need);
        free(t);
        json_object_set(ids, json_string_value(id), nm);
    }
    return 0;
}

/* The conversation with tools rendered (see api_tools.h); a new array or NULL. */
static json_t *rewrite(json_t *msgs, json_t *tools, enum tools_mode mode, struct oai_error *e) {
    json_t *out = json_array(), *ids = json_object();
    struct jsc_buf pre = {0};
    int prev_tool = 0;
    size_t i;
    json_t *m;
    if (mode != TOOLS_OFF) {
        size_t n = json_array_size(tools);
        char **tx = calloc(n + 1, sizeof(char *));
        size_t *ln = calloc(n + 1, sizeof(size_t));
        for (size_t k = 0; tx && ln && k < n; k++) {
            json_t *fn = json_object_get(json_array_get(tools, k), "function");
            json_t *o = json_object();
            json_object_set(o, "name", json_object_get(fn, "name"));
            if (json_object_get(fn, "description")) json_object_set(o, "description", json_object_get(fn, "description"));
            json_object_set_new(o, "parameters", json_object_get(fn, "parameters")
                                                     ? json_incref(json_object_get(fn, "parameters"))
                                                     : json_pack("{s:s}", "type", "object"));
            tx[k] = json_dumps(o, JSON_COMPACT);
            ln[k] = tx[k] ? strlen(tx[k]) : 0;
            json_decref(o);
        }
        size_t need = chat_tools_preamble((const char *const *)tx, ln, (int)n, NULL, 0);
        char *p = malloc(need + 1);
        if (p) {
            chat_tools_preamble((const char *const *)tx, ln, (int)n, p, need + 1);
            jsc_buf_add(&pre, p, need);
        }
        free(p);
        for (size_t k = 0; tx && k < n; k++) free(tx[k]);
        free(tx);
        free(ln);
    }
    json_array_foreach(msgs, i, m) {
        char param[96];
        json_t *role = json_is_object(m) ? json_object_get(m, "role") : NULL;
        const char *r = json_is_string(role) ? json_string_value(role) : "";
        snprintf(param, sizeof param, "messages[%zu].content", i);
        if (i == 0 && pre.n && (strcmp(r, "system") == 0 || strcmp(r, "developer") == 0)) {
            json_t *t = tools_text_of(json_object_get(m, "content"), param, e);
            if (!t) goto fail;
            jsc_buf_printf(&pre, "\n\n%s", json_string_value(t));
            json_decref(t);
            json_array_append_new(out, msg("system", pre.p));
            jsc_buf_free(&pre);
            continue;
        }
        if (i == 0 && pre.n) {
            json_array_append_new(out, msg("system", pre.p));
            jsc_buf_free(&pre);
        }
        json_t *calls = json_is_object(m) ? api_field(m, "tool_calls") : NULL;
        if (strcmp(r, "assistant") == 0 && calls) {
            struct jsc_buf b = {0};
            if (tools_add_text(json_object_get(m, "content"), param, &b, e) ||
                render_calls(calls, i, ids, &b, e)) {
                jsc_buf_free(&b);
                goto fail;
            }
            json_array_append_new(out, msg("assistant", b.p ? b.p : ""));
            jsc_buf_free(&b);
            prev_tool = 0;
        } else if (strcmp(r, "tool") == 0) {
            json_t *nm;
            json_t *t = tools_result_of(m, i, ids, &nm, e);
            if (!t) goto fail;
            size_t need = chat_tools_result(json_string_value(t), json_string_length(t), NULL, 0);
            char *x = malloc(need + 1);
            if (x) chat_tools_result(json_string_value(t), json_string_length(t), x, need + 1);
            json_decref(t);
            if (!x) {
                oai_fail(e, 500, NULL, NULL, "out of memory");
                goto fail;
            }
            size_t last = json_array_size(out);
            if (prev_tool && last) { /* several results: one user turn */
                json_t *pm = json_array_get(out, last - 1);
                struct jsc_buf b = {0};
                jsc_buf_printf(&b, "%s\n%s", json_string_value(json_object_get(pm, "content")), x);
                json_object_set_new(pm, "content", json_string(b.p ? b.p : ""));
                jsc_buf_free(&b);
            } else {
                json_array_append_new(out, msg("user", x));
            }
            free(x);
            prev_tool = 1;
        } else if (strcmp(r, "user") == 0 && prev_tool) {
            json_t *t = tools_text_of(json_object_get(m, "content"), param, e);
            if (!t) goto fail;
            json_t *pm = json_array_get(out, json_array_size(out) - 1);
            struct jsc_buf b = {0};
            jsc_buf_printf(&b, "%s\n\n%s", json_string_value(json_object_get(pm, "content")),
                           json_string_value(t));
            json_decref(t);
            json_object_set_new(pm, "content", json_string(b.p ? b.p : ""));
            jsc_buf_free(&b);
            prev_tool = 0;
        } else {
            json_array_append(out, m);
            prev_tool = 0;
        }
    }
    jsc_buf_free(&pre);
    json_decref(ids);
    return out;
fail:
    jsc_buf_free(&pre);
    json_decref(ids);
    json_decref(out);
    return NULL;
}

/* ---- entry -------------------------------------------------------------------------- */

static const char *const handled[] = {"response_format", "grammar", "json_schema", "tools",
                                      "tool_choice", "parallel_tool_calls", NULL};

/* The grammar of text: from the shared cache (same text and limits: the same compiled grammar,
 * its mask cache warm), or compiled, checked and put there. */
static int compile_cached(const char *text, size_t n, const struct gram_limits *gl,
                          struct gram_lru *cache, const char *gparam, struct gram **out,
                          struct oai_error *e) {
    if ((*out = gram_lru_get(cache, text, n, gl))) return 0;
    char err[400];
    if (gram_compile_gbnf(text, n, gl, out, err, sizeof err))
        return oai_fail(e, 400, gparam, NULL, "invalid '%s': %s", gparam, err);
    /* the start state must fit the budget */
    struct gram_scratch *x = NULL;
    struct gram_match *gm = NULL;
    int rc = gram_scratch_create(gl, 1, &x);
    if (!rc) rc = gram_match_create(*out, x, &gm);
    gram_match_destroy(gm);
    gram_scratch_destroy(x);
    if (rc) return oai_fail(e, 400, gparam, NULL, "'%s' exceeds the grammar's state budget", gparam);
    gram_lru_put(cache, text, n, *out); /* out of memory: simply not cached */
    return 0;
}

int tools_prepare(json_t *root, int is_chat, const struct tools_limits *lim,
                  struct tools_req **out, json_t **root_out, struct oai_error *e) {
    *out = NULL;
    *root_out = NULL;
    memset(e, 0, sizeof *e);
    json_t *msgs = json_is_object(root) ? json_object_get(root, "messages") : NULL;
    int any = 0;
    for (int i = 0; handled[i] && json_is_object(root); i++)
        if (json_object_get(root, handled[i])) any = 1;
    int tool_msgs = is_chat && json_is_array(msgs) && has_tool_messages(msgs);
    if (!any && !tool_msgs) {
        *root_out = json_incref(root);
        return 0;
    }
    json_t *tools = api_field(root, "tools");
    if (tools && json_is_array(tools) && json_array_size(tools) == 0) tools = NULL;
    if (!is_chat && (tools || api_field(root, "tool_choice")))
        return oai_fail(e, 400, tools ? "tools" : "tool_choice", NULL,
                        "'%s' is only supported on /v1/chat/completions", tools ? "tools" : "tool_choice");
    struct tools_req *t = calloc(1, sizeof *t);
    struct jsc_buf gb = {0};
    json_t *copy = NULL;
    if (!t) return oai_fail(e, 500, NULL, NULL, "out of memory");
    gb.limit = 16u << 20;
    const char *sparam = NULL;
    if (structured(root, lim, &gb, &sparam, e)) goto fail;
    if (tool_spec(root, lim, t, &gb, e)) goto fail;
    if (t->mode != TOOLS_OFF && sparam) {
        oai_fail(e, 400, sparam, NULL, "'%s' cannot be combined with tools unless tool_choice "
                 "is 'none'", sparam);
        goto fail;
    }
    const char *gparam = t->mode != TOOLS_OFF ? "tools" : sparam;
    if (gb.oom) {
        oai_fail(e, 400, gparam ? gparam : "tools", NULL, "the grammar is too large");
        goto fail;
    }
    if (gparam) {
        struct gram_limits gl;
        gram_limits_default(&gl);
        gl.max_stacks = lim->max_stacks;
        gl.max_elems = lim->max_elems;
        if (compile_cached(gb.p, gb.n, &gl, lim->cache, gparam, &t->grammar, e)) goto fail;
        if (t->mode == TOOLS_AUTO &&
            !(t->trigger = lim->g4 ? tools_g4_trigger(lim->g4) : strdup(CHAT_TOOL_OPEN))) {
            oai_fail(e, 500, NULL, NULL, "out of memory");
            goto fail;
        }
    }
    copy = json_deep_copy(root);
    if (!copy) {
        oai_fail(e, 500, NULL, NULL, "out of memory");
        goto fail;
    }
    for (int i = 0; handled[i]; i++) json_object_del(copy, handled[i]);
    if (is_chat && json_is_array(msgs)) {
        json_t *nm = lim->g4 ? tools_g4_rewrite(msgs, tools, t->mode, lim->g4, e)
                             : rewrite(msgs, tools, t->mode, e);
        if (!nm) goto fail;
        json_object_set_new(copy, "messages", nm);
    }
    jsc_buf_free(&gb);
    if (lim->g4 && t->mode != TOOLS_OFF) {
        t->native = 1;
        t->g4 = *lim->g4;
    }
    if (!t->grammar && t->mode == TOOLS_OFF) {
        tools_req_free(t);
        t = NULL;
    }
    *out = t;
    *root_out = copy;
    return 0;
fail:
    jsc_buf_free(&gb);
    json_decref(copy);
    tools_req_free(t);
    return -1;
}

static void tools_free_v(void *t) { tools_req_free(t); }

int tools_parse_request(json_t *root, int is_chat, const struct oai_limits *lim,
                        struct oai_params **out, struct oai_error *e) {
    *out = NULL;
    struct g4note_ids g4;
    const int native = lim->chat_style == CHAT_STYLE_GEMMA4 && lim->vocab &&
                       g4note_ids_find(lim->vocab, &g4);
    const struct tools_limits tl = {.max_tools = lim->max_tools,
                                    .max_schema_bytes = (size_t)lim->max_schema_bytes,
                                    .max_stacks = lim->grammar_max_stacks,
                                    .max_elems = lim->grammar_max_elems,
                                    .cache = lim->gram_cache,
                                    .g4 = native ? &g4 : NULL,
                                    .json_schema_extra_keys = lim->json_schema_extra_keys,
                                    .json_schema_any_order = lim->json_schema_any_order};
    struct tools_req *t = NULL;
    json_t *req = NULL;
    if (tools_prepare(root, is_chat, &tl, &t, &req, e)) return -1;
    int rc = oai_parse(req, is_chat, lim, out, e);
    json_decref(req);
    if (rc) {
        tools_req_free(t);
        return -1;
    }
    (*out)->tools = t;
    (*out)->tools_free = tools_free_v;
    return 0;
}
