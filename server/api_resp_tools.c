/*
 * api_resp_tools — see api_resp_tools.h.
 */
#include "server/api_resp_tools.h"

#include <stdio.h>
#include <string.h>

#include "server/api_common.h"

/* One flat Responses tool as a chat tool. */
static json_t *resp_tool(json_t *t, size_t i, struct oai_error *e) {
    json_t *ty = json_is_object(t) ? json_object_get(t, "type") : NULL;
    char param[48];
    snprintf(param, sizeof param, "tools[%zu]", i);
    if (!json_is_string(ty)) {
        oai_fail(e, 400, param, NULL, "'%s' must be an object with a string 'type'", param);
        return NULL;
    }
    if (strcmp(json_string_value(ty), "function") != 0) {
        snprintf(param, sizeof param, "tools[%zu].type", i);
        oai_fail(e, 400, param, NULL, "tool type '%.32s' is not supported (only 'function')",
                 json_string_value(ty));
        return NULL;
    }
    json_t *fn = json_object();
    static const char *const keys[] = {"name", "description", "parameters", "strict"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        if (api_field(t, keys[k])) json_object_set(fn, keys[k], json_object_get(t, keys[k]));
    return json_pack("{s:s,s:o}", "type", "function", "function", fn);
}

int resp_tools_to_chat(json_t *req, json_t *chat, int *on, struct oai_error *e) {
    *on = 0;
    json_t *tools = api_field(req, "tools"), *tc = api_field(req, "tool_choice");
    json_t *ptc = api_field(req, "parallel_tool_calls");
    if (ptc) json_object_set(chat, "parallel_tool_calls", ptc);
    if (tools) {
        if (!json_is_array(tools)) return oai_fail(e, 400, "tools", NULL, "'tools' must be an array");
        json_t *ct = json_array();
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            json_t *c = resp_tool(t, i, e);
            if (!c) {
                json_decref(ct);
                return -1;
            }
            json_array_append_new(ct, c);
        }
        json_object_set_new(chat, "tools", ct);
    }
    if (tc) {
        if (json_is_object(tc)) {
            json_t *ty = json_object_get(tc, "type"), *nm = json_object_get(tc, "name");
            if (!json_is_string(ty) || strcmp(json_string_value(ty), "function") != 0 ||
                !json_is_string(nm))
                return oai_fail(e, 400, "tool_choice", NULL,
                                "'tool_choice' must be none, auto, required or "
                                "{\"type\": \"function\", \"name\": ...}");
            json_object_set_new(chat, "tool_choice",
                                json_pack("{s:s,s:{s:O}}", "type", "function", "function",
                                          "name", nm));
        } else {
            json_object_set(chat, "tool_choice", tc); /* api_tools checks the string */
        }
    }
    int none = json_is_string(tc) && strcmp(json_string_value(tc), "none") == 0;
    *on = json_is_array(tools) && json_array_size(tools) > 0 && !none;
    return 0;
}

json_t *resp_input_text(json_t *it, const char *key, size_t i, struct oai_error *e) {
    static const char *const types[] = {"input_text", "output_text", "text", NULL};
    json_t *c = json_object_get(it, key);
    if (!c) {
        oai_fail(e, 400, "input", NULL, "input[%zu].%s is required", i, key);
        return NULL;
    }
    char param[48];
    snprintf(param, sizeof param, "input[%zu].%s", i, key);
    json_t *text = api_text_content(c, types, param, e);
    if (!text) snprintf(e->param, sizeof e->param, "input");
    return text;
}

/* A string field of item i, or NULL with e naming input. */
static const char *item_str(json_t *it, const char *k, size_t i, struct oai_error *e) {
    json_t *v = json_object_get(it, k);
    if (!json_is_string(v)) {
        oai_fail(e, 400, "input", NULL, "input[%zu].%s must be a string", i, k);
        return NULL;
    }
    return json_string_value(v);
}

int resp_tools_item(json_t *it, const char *type, size_t i, json_t *msgs, struct oai_error *e) {
    const char *cid = item_str(it, "call_id", i, e);
    if (!cid) return -1;
    if (!strcmp(type, "function_call_output")) {
        json_t *text = resp_input_text(it, "output", i, e);
        if (!text) return -1;
        json_array_append_new(msgs, json_pack("{s:s,s:s,s:o}", "role", "tool", "tool_call_id",
                                              cid, "content", text));
        return 0;
    }
    const char *name = item_str(it, "name", i, e);
    const char *args = name ? item_str(it, "arguments", i, e) : NULL;
    if (!args) return -1;
    json_t *call = json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", cid, "type", "function", "function",
                             "name", name, "arguments", args);
    /* The calls of one turn join the assistant message before them (a copy: the history
     * may share its messages with the store). */
    size_t n = json_array_size(msgs);
    json_t *last = n ? json_array_get(msgs, n - 1) : NULL;
    json_t *role = last ? json_object_get(last, "role") : NULL;
    if (json_is_string(role) && !strcmp(json_string_value(role), "assistant")) {
        json_t *m = json_deep_copy(last);
        json_t *calls = json_object_get(m, "tool_calls");
        if (!json_is_array(calls)) {
            calls = json_array();
            json_object_set_new(m, "tool_calls", calls);
        }
        json_array_append_new(calls, call);
        json_array_set_new(msgs, n - 1, m);
        return 0;
    }
    json_array_append_new(msgs, json_pack("{s:s,s:n,s:[o]}", "role", "assistant", "content",
                                          "tool_calls", call));
    return 0;
}

void resp_tools_item_id(const char *call_id, char *out, size_t cap) {
    if (!strncmp(call_id, "call_", 5))
        snprintf(out, cap, "fc_%s", call_id + 5);
    else
        snprintf(out, cap, "fc_%s", call_id);
}

json_t *resp_tools_call_item(json_t *call, const char *status) {
    json_t *fn = json_object_get(call, "function");
    const char *cid = json_string_value(json_object_get(call, "id"));
    const char *name = json_string_value(json_object_get(fn, "name"));
    json_t *args = json_object_get(fn, "arguments");
    char id[64];
    resp_tools_item_id(cid ? cid : "", id, sizeof id);
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "id", id, "type", "function_call", "call_id",
                     cid ? cid : "", "name", name ? name : "", "arguments",
                     json_is_string(args) ? json_string_value(args) : "", "status", status);
}

int resp_tools_map_param(char *param, size_t cap) {
    unsigned idx;
    int off = 0;
    if (sscanf(param, "tools[%u].function%n", &idx, &off) != 1 || off == 0) return 0;
    char rest[64];
    snprintf(rest, sizeof rest, "%s", param + off);
    snprintf(param, cap, "tools[%u]%s", idx, rest);
    return 1;
}
