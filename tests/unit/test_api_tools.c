/* Unit tests of server/tool_parse.c (tool-call output split into text and calls, at any
 * chunking) and server/jschema.c (schemas to grammars, accepted and rejected instances,
 * errors naming keyword and pointer). */
#include <jansson.h>

#include "scheduler/grammar.h"
#include "server/api_tools.h"
#include "server/jschema.h"
#include "tests/unit/harness.h"

static const char *OUT =
    "Let me check.```tool_call\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P{a}\\\"ris\", "
    "\"n\": [1, {\"x\": 2}]}}\n```\n```tool_call\n{\"name\": \"t2\", \"arguments\": {}}\n```";

/* Feed OUT in chunks of `step` bytes; returns (content, calls rebuilt from the deltas). */
static void run_chunks(size_t step, json_t **content, json_t **calls, json_t **final_calls) {
    struct tools_out *o = tools_out_new("x");
    json_t *acc = json_array();
    struct {
        char text[512];
    } args[4] = {{""}};
    char text[512] = "";
    size_t n = strlen(OUT);
    for (size_t at = 0; at <= n; at += step) {
        size_t k = at + step > n ? n - at : step;
        json_t *d = tools_out_feed(o, OUT + at, k, at + step > n);
        size_t i;
        json_t *x;
        json_array_foreach(d, i, x) {
            json_t *c = json_object_get(x, "content");
            if (c) strncat(text, json_string_value(c), sizeof text - strlen(text) - 1);
            json_t *tc = json_array_get(json_object_get(x, "tool_calls"), 0);
            if (!tc) continue;
            int idx = (int)json_integer_value(json_object_get(tc, "index"));
            T_ASSERT(idx >= 0 && idx < 4);
            json_t *fn = json_object_get(tc, "function");
            if (json_object_get(tc, "id")) {
                T_ASSERT(idx == (int)json_array_size(acc));
                json_array_append_new(acc, json_pack("{s:O}", "name", json_object_get(fn, "name")));
            }
            strncat(args[idx].text, json_string_value(json_object_get(fn, "arguments")),
                    sizeof args[idx].text - strlen(args[idx].text) - 1);
        }
        json_decref(d);
    }
    for (size_t i = 0; i < json_array_size(acc); i++)
        json_object_set_new(json_array_get(acc, i), "arguments", json_string(args[i].text));
    *content = json_string(text);
    *calls = acc;
    *final_calls = tools_out_calls(o);
    tools_out_free(o);
}

static void test_tool_output_any_chunking(void) {
    json_t *c1, *k1, *f1;
    run_chunks(10000, &c1, &k1, &f1);
    T_ASSERT(strcmp(json_string_value(c1), "Let me check.") == 0);
    T_ASSERT(json_array_size(k1) == 2);
    T_ASSERT(strcmp(json_string_value(json_object_get(json_array_get(k1, 0), "arguments")),
                    "{\"city\": \"P{a}\\\"ris\", \"n\": [1, {\"x\": 2}]}") == 0);
    T_ASSERT(strcmp(json_string_value(json_object_get(json_array_get(k1, 1), "name")), "t2") == 0);
    for (size_t step = 1; step < 40; step++) {
        json_t *c, *k, *f;
        run_chunks(step, &c, &k, &f);
        T_ASSERTF(json_equal(c, c1) && json_equal(k, k1) && json_equal(f, f1), "step %zu", step);
        json_decref(c);
        json_decref(k);
        json_decref(f);
    }
    json_decref(c1);
    json_decref(k1);
    json_decref(f1);
}

static void test_tool_output_not_a_call(void) {
    struct tools_out *o = tools_out_new("x");
    const char *t = "see ```tool_calls here and ```tool_call\nnope";
    json_t *d = tools_out_feed(o, t, strlen(t), 1);
    json_decref(d);
    json_t *c = tools_out_content(o);
    T_ASSERT(strcmp(json_string_value(c), t) == 0);
    T_ASSERT(tools_out_n_calls(o) == 0);
    json_decref(c);
    tools_out_free(o);
    /* only calls: content is null */
    o = tools_out_new("y");
    t = "```tool_call\n{\"name\": \"f\", \"arguments\": {}}\n```";
    json_decref(tools_out_feed(o, t, strlen(t), 1));
    c = tools_out_content(o);
    T_ASSERT(json_is_null(c));
    T_ASSERT(tools_out_n_calls(o) == 1);
    json_decref(c);
    tools_out_free(o);
}

/* 0 accepted, 1 rejected, -1 the schema does not compile */
static int check(const char *schema, const char *inst, char *err, size_t errlen) {
    json_error_t je;
    json_t *s = json_loads(schema, JSON_DECODE_ANY, &je);
    T_ASSERTF(s, "bad test schema: %s", je.text);
    struct jsc_buf b = {0};
    int rc = jschema_to_gbnf(s, NULL, &b, err, errlen);
    json_decref(s);
    if (rc) {
        jsc_buf_free(&b);
        return -1;
    }
    struct gram *g = NULL;
    T_ASSERTF(gram_compile_gbnf(b.p, b.n, NULL, &g, err, errlen) == 0, "%s\n%s", err, b.p);
    jsc_buf_free(&b);
    struct gram_scratch *x = NULL;
    struct gram_match *m = NULL;
    T_ASSERT(gram_scratch_create(NULL, 8, &x) == 0);
    T_ASSERT(gram_match_create(g, x, &m) == 0);
    int ok = gram_match_accept(m, x, (const uint8_t *)inst, strlen(inst)) == 0 &&
             gram_match_can_end(m);
    gram_match_destroy(m);
    gram_scratch_destroy(x);
    gram_unref(g);
    return ok ? 0 : 1;
}

static void test_jschema_instances(void) {
    char err[256];
    static const struct {
        const char *schema, *inst;
        int want;
    } cases[] = {
        {"{\"type\":\"integer\",\"minimum\":-15,\"maximum\":230}", "-15", 0},
        {"{\"type\":\"integer\",\"minimum\":-15,\"maximum\":230}", "230", 0},
        {"{\"type\":\"integer\",\"minimum\":-15,\"maximum\":230}", "231", 1},
        {"{\"type\":\"integer\",\"minimum\":-15,\"maximum\":230}", "-16", 1},
        {"{\"type\":\"integer\",\"minimum\":-15,\"maximum\":230}", "007", 1},
        {"{\"type\":\"integer\",\"minimum\":100}", "99", 1},
        {"{\"type\":\"integer\",\"minimum\":100}", "123456", 0},
        {"{\"type\":\"integer\",\"exclusiveMaximum\":0}", "0", 1},
        {"{\"type\":\"integer\",\"exclusiveMaximum\":0}", "-7", 0},
        {"{\"type\":\"string\",\"pattern\":\"^a+b?$\"}", "\"aab\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"^a+b?$\"}", "\"abb\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"x\\\\d\"}", "\"..x5..\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"^[\\\"]$\"}", "\"\\\"\"", 0},
        {"{\"type\":\"string\",\"format\":\"date\"}", "\"2024-02-29\"", 1},
        {"{\"type\":\"string\",\"format\":\"date\"}", "\"2024-12-31\"", 0},
        {"{\"type\":\"string\",\"format\":\"uuid\"}", "\"123e4567-e89b-12d3-a456-426614174000\"", 0},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"\\u00e9\"", 1},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"\xc3\xa9\xc3\xa9\"", 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"},\"b\":{\"type\":\"boolean\"}},"
         "\"required\":[\"b\"]}", "{\"a\": null, \"b\": true}", 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"},\"b\":{\"type\":\"boolean\"}},"
         "\"required\":[\"b\"]}", "{\"b\": false}", 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"},\"b\":{\"type\":\"boolean\"}},"
         "\"required\":[\"b\"]}", "{\"a\": null}", 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"},\"b\":{\"type\":\"boolean\"}},"
         "\"required\":[\"b\"]}", "{\"b\": true,}", 1},
        {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"null\"}],\"items\":false}", "[null]", 0},
        {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"null\"}],\"items\":false}", "[null, null]", 1},
        {"{\"type\":\"array\",\"minItems\":2,\"maxItems\":3,\"items\":{\"const\":1}}", "[1]", 1},
        {"{\"type\":\"array\",\"minItems\":2,\"maxItems\":3,\"items\":{\"const\":1}}", "[1,1, 1]", 0},
        {"{\"type\":\"array\",\"minItems\":2,\"maxItems\":3,\"items\":{\"const\":1}}", "[1,1,1,1]", 1},
        {"{\"$defs\":{\"n\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"}}},\"$ref\":\"#/$defs/n\"}",
         "[[], [[[]]]]", 0},
        {"{\"anyOf\":[{\"type\":\"string\",\"maxLength\":1},{\"type\":\"integer\",\"minimum\":0,\"maximum\":1}]}",
         "2", 1},
        {"{\"type\":\"boolean\",\"nullable\":true}", "null", 0},
        {"{\"enum\":[\"a\",{\"b\":[1]}]}", "{\"b\":[1]}", 0},
        {"{\"enum\":[\"a\",{\"b\":[1]}]}", "{\"b\": [1]}", 0}, /* JSON's free whitespace */
        {"{\"enum\":[\"a\",{\"b\":[1]}]}", "{ \"b\" : [ 1 ] }", 0},
        {"{\"enum\":[\"a\",{\"b\":[1]}]}", "{\"b\": [2]}", 1},
        {"{\"enum\":[\"a\",{\"b\":[1]}]}", "{\"b\": [1],}", 1},
        /* one pattern every key matches, beside declared keys: other keys after them */
        {"{\"properties\":{\"a\":{\"type\":\"string\"}},\"patternProperties\":{\".*\":{\"type\":\"string\"}},\"required\":[\"a\"]}",
         "{\"a\": \"x\", \"b\": \"y\", \"c\": \"z\"}", 0},
        {"{\"properties\":{\"a\":{\"type\":\"string\"}},\"patternProperties\":{\".*\":{\"type\":\"string\"}},\"required\":[\"a\"]}",
         "{\"a\": \"x\", \"b\": 1}", 1},
        {"{\"properties\":{\"a\":{\"type\":\"string\"}},\"patternProperties\":{\".*\":{\"type\":\"string\"}},\"required\":[\"a\"]}",
         "{\"a\": \"x\", \"a\": \"y\"}", 1},
        {"{\"properties\":{\"a\":{}},\"patternProperties\":{\".*\":{\"type\":\"integer\"}},\"additionalProperties\":false}",
         "{\"a\": \"x\"}", 1}, /* the pattern's schema holds for the declared key too */
        {"{\"properties\":{\"a\":{}},\"patternProperties\":{\".*\":{\"type\":\"integer\"}},\"additionalProperties\":false}",
         "{\"a\": 1, \"zz\": 2}", 0},
        /* maxProperties beside declared keys that are all required: mx - n others */
        {"{\"properties\":{\"a\":{}},\"required\":[\"a\"],\"maxProperties\":3,\"additionalProperties\":{\"type\":\"integer\"}}",
         "{\"a\": 0, \"b\": 1, \"c\": 2}", 0},
        {"{\"properties\":{\"a\":{}},\"required\":[\"a\"],\"maxProperties\":3,\"additionalProperties\":{\"type\":\"integer\"}}",
         "{\"a\": 0, \"b\": 1, \"c\": 2, \"d\": 3}", 1},
        /* not as positive keywords: required keys, types, De Morgan */
        {"{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"not\":{\"required\":[\"a\",\"b\"]}}",
         "{\"a\": 1}", 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"not\":{\"required\":[\"a\",\"b\"]}}",
         "{\"a\": 1, \"b\": 2}", 1},
        {"{\"not\":{\"type\":[\"object\",\"array\"]}}", "\"x\"", 0},
        {"{\"not\":{\"type\":[\"object\",\"array\"]}}", "[1]", 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"not\":{\"anyOf\":[{\"required\":[\"a\"]},{\"type\":\"null\"}]}}",
         "{\"a\": 1}", 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"not\":{\"anyOf\":[{\"required\":[\"a\"]},{\"type\":\"null\"}]}}",
         "{}", 0},
        {"{\"enum\":[2.6,1e-05,100.0]}", "2.6", 0}, /* reals as Python writes them */
        {"{\"enum\":[2.6,1e-05,100.0]}", "1e-05", 0},
        {"{\"enum\":[2.6,1e-05,100.0]}", "100.0", 0},
        {"{\"enum\":[\"a\",\"b\"],\"not\":{\"const\":\"a\"}}", "\"b\"", 0},
        {"{\"enum\":[\"a\",\"b\"],\"not\":{\"const\":\"a\"}}", "\"a\"", 1},
        {"{\"enum\":[\"ab\",\"a1\"],\"pattern\":\"[0-9]\"}", "\"a1\"", 0},
        {"{\"enum\":[\"ab\",\"a1\"],\"pattern\":\"[0-9]\"}", "\"ab\"", 1},
        {"{\"enum\":[[1,2],[3,3]],\"uniqueItems\":true}", "[1, 2]", 0},
        {"{\"enum\":[[1,2],[3,3]],\"uniqueItems\":true}", "[3, 3]", 1},
        {"{\"enum\":[\"a\",1,2.0],\"type\":\"integer\"}", "\"a\"", 1},
        {"{\"enum\":[\"a\",1,2.0],\"type\":\"integer\"}", "2.0", 0},
        {"{\"type\":\"number\",\"minimum\":-3,\"exclusiveMaximum\":2}", "-2.5", 0},
        {"{\"type\":\"number\",\"minimum\":-3,\"exclusiveMaximum\":2}", "-3.5", 1},
        {"{\"type\":\"number\",\"minimum\":-3,\"exclusiveMaximum\":2}", "1.75", 0},
        {"{\"type\":\"number\",\"minimum\":-3,\"exclusiveMaximum\":2}", "2", 1},
        {"{\"type\":\"number\",\"minimum\":0}", "-0.5", 1},
        {"{\"type\":\"string\",\"format\":\"ipv4\"}", "\"192.168.0.255\"", 0},
        {"{\"type\":\"string\",\"format\":\"ipv4\"}", "\"192.168.0.256\"", 1},
        {"{\"type\":\"string\",\"format\":\"uri\"}", "\"http://u:p@example.com:8080/a/b;c?d=e&f#g\"", 0},
        {"{\"type\":\"string\",\"format\":\"uri\"}", "\"urn:isbn:0451450523\"", 0},
        {"{\"type\":\"string\",\"format\":\"uri\"}", "\"http://[fe80::1]/\"", 0},
        {"{\"type\":\"string\",\"format\":\"uri\"}", "\"file:///etc/hosts\"", 0},
        {"{\"type\":\"string\",\"format\":\"uri\"}", "\"/relative/path\"", 1},
        {"{\"type\":\"string\",\"format\":\"uri\"}", "\"http://a b\"", 1},
        {"{\"type\":\"string\",\"format\":\"uri\"}", "\"http://a/%zz\"", 1},
        {"{\"type\":\"string\",\"format\":\"uri\"}", "\"http://a:8x/\"", 1},
        {"{\"type\":\"string\",\"format\":\"uri\"}", "\"1a:b\"", 1},
        {"{\"type\":\"string\",\"format\":\"uri\"}", "\"http://[::1/\"", 1},
        {"{\"type\":\"string\",\"format\":\"uri-reference\"}", "\"../a/b?c#d\"", 0},
        {"{\"type\":\"string\",\"format\":\"uri-reference\"}", "\"//host/p\"", 0},
        {"{\"type\":\"string\",\"format\":\"uri-reference\"}", "\"\"", 0},
        {"{\"type\":\"string\",\"format\":\"uri-reference\"}", "\"#a#b\"", 1},
        {"{\"type\":\"string\",\"format\":\"uri-reference\"}", "\"a b\"", 1},
        {"{\"type\":\"string\",\"format\":\"ipv6\"}", "\"::\"", 0},
        {"{\"type\":\"string\",\"format\":\"ipv6\"}", "\"fe80::1:2\"", 0},
        {"{\"type\":\"string\",\"format\":\"ipv6\"}", "\"1:2:3:4:5:6:7:8\"", 0},
        {"{\"type\":\"string\",\"format\":\"ipv6\"}", "\"::ffff:10.0.0.1\"", 0},
        {"{\"type\":\"string\",\"format\":\"ipv6\"}", "\"1:2:3:4:5:6:7:8:9\"", 1},
        {"{\"type\":\"string\",\"format\":\"ipv6\"}", "\"1::2::3\"", 1},
        {"{\"type\":\"string\",\"format\":\"ipv6\"}", "\"12345::\"", 1},
        {"{\"type\":\"string\",\"format\":\"ipv6\"}", "\"::ffff:10.0.0.01\"", 1},
        {"{\"type\":\"string\",\"format\":\"ipv6\"}", "\"1:2:3:4:5:6:7\"", 1},
        /* a repeated group of one optional item (left recursion as written) is flattened */
        {"{\"type\":\"string\",\"pattern\":\"^(a*)*$\"}", "\"\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"^(a*)*$\"}", "\"aaaa\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"^(a*)*$\"}", "\"ab\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"^(?:x{0,3}){2}$\"}", "\"xxxxxx\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"^(?:x{0,3}){2}$\"}", "\"xxxxxxx\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"^(?:x?)+y$\"}", "\"y\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"^(?:x?)+y$\"}", "\"xxy\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"^(?:x?)+y$\"}", "\"xx\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"^(https?://)?([a-z.-]+)\\\\.([a-z.]{2,6})([/\\\\w .-]*)*/?$\"}",
         "\"https://example.com/a b/c_d/\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"^(https?://)?([a-z.-]+)\\\\.([a-z.]{2,6})([/\\\\w .-]*)*/?$\"}",
         "\"https://example.com/a?b\"", 1},
        /* anchors at the ends of alternatives (jschema_rx.c, pattern_branches) */
        {"{\"type\":\"string\",\"pattern\":\"^a$|^b$\"}", "\"a\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"^a$|^b$\"}", "\"b\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"^a$|^b$\"}", "\"ab\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"^a$|^b$\"}", "\"ba\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"(^x)|(^y)\"}", "\"xz\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"(^x)|(^y)\"}", "\"zx\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"^(a$|b)\"}", "\"a\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"^(a$|b)\"}", "\"ab\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"^(a$|b)\"}", "\"bzz\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"^$|^[0-9]{2,3}$\"}", "\"\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"^$|^[0-9]{2,3}$\"}", "\"12\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"^$|^[0-9]{2,3}$\"}", "\"1\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"^$|^[0-9]{2,3}$\"}", "\"1234\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"(^Hpt_|^Int_|_Armour_)\"}", "\"x_Armour_y\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"(^Hpt_|^Int_|_Armour_)\"}", "\"Hpt_1\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"(^Hpt_|^Int_|_Armour_)\"}", "\"xHpt_\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"^([^,]|$)\"}", "\"\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"^([^,]|$)\"}", "\"a,b\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"^([^,]|$)\"}", "\",a\"", 1},
        /* enum / const beside other keywords: the values that satisfy them */
        {"{\"enum\":[\"a\",\"bb\",\"ccc\"],\"maxLength\":2}", "\"bb\"", 0},
        {"{\"enum\":[\"a\",\"bb\",\"ccc\"],\"maxLength\":2}", "\"ccc\"", 1},
        {"{\"enum\":[\"\u00e9\u00e9\"],\"maxLength\":2}", "\"\u00e9\u00e9\"", 0},
        {"{\"enum\":[1,5,9],\"minimum\":2,\"exclusiveMaximum\":9}", "5", 0},
        {"{\"enum\":[1,5,9],\"minimum\":2,\"exclusiveMaximum\":9}", "1", 1},
        {"{\"enum\":[1,5,9],\"minimum\":2,\"exclusiveMaximum\":9}", "9", 1},
        {"{\"enum\":[1,5,6],\"minimum\":5,\"exclusiveMinimum\":true}", "5", 1},
        {"{\"enum\":[1,5,6],\"minimum\":5,\"exclusiveMinimum\":true}", "6", 0},
        {"{\"type\":[\"object\",\"boolean\"],\"properties\":{\"x\":{}},\"enum\":[true,{}]}", "true", 0},
        {"{\"type\":[\"object\",\"boolean\"],\"properties\":{\"x\":{}},\"enum\":[true,{}]}", "{}", 0},
        {"{\"type\":[\"string\",\"boolean\"],\"properties\":{\"x\":{}},\"enum\":[true,\"a\"]}", "true", 0},
        {"{\"const\":4,\"multipleOf\":3}", "4", -1},
        {"{\"enum\":[[],[1,2]],\"maxItems\":1}", "[]", 0},
        {"{\"enum\":[[],[1,2]],\"maxItems\":1}", "[1,2]", 1},
        /* patternProperties beside declared keys: a key a pattern matches takes its schema */
        {"{\"type\":\"object\",\"patternProperties\":{\"[allow|disallow]\":{\"type\":\"integer\"}},\"required\":[\"allow\",\"disallow\"]}",
         "{\"allow\": 1, \"disallow\": 2}", 0},
        {"{\"type\":\"object\",\"patternProperties\":{\"[allow|disallow]\":{\"type\":\"integer\"}},\"required\":[\"allow\",\"disallow\"]}",
         "{\"allow\": \"x\", \"disallow\": 2}", 1},
        {"{\"properties\":{\"ab\":{\"type\":\"string\"},\"c\":{}},\"patternProperties\":{\"^a\":{\"maxLength\":3}}}",
         "{\"ab\": \"xyz\"}", 0},
        {"{\"properties\":{\"ab\":{\"type\":\"string\"},\"c\":{}},\"patternProperties\":{\"^a\":{\"maxLength\":3}}}",
         "{\"ab\": \"xyzw\"}", 1},
        {"{\"properties\":{\"ab\":{\"type\":\"string\"},\"c\":{}},\"patternProperties\":{\"^a\":{\"maxLength\":3}}}",
         "{\"ab\": \"x\", \"c\": 5}", 0},
        {"{\"properties\":{\"ab\":{\"type\":\"string\"},\"c\":{}},\"patternProperties\":{\"^a\":{\"maxLength\":3}}}",
         "{\"ab\": \"x\", \"ax\": 5}", 1},
        /* pattern with lengths, several free items: a subset within the bounds */
        {"{\"type\":\"string\",\"minLength\":12,\"maxLength\":12,\"pattern\":\"[0-9a-f]+\"}",
         "\"0123456789ab\"", 0},
        {"{\"type\":\"string\",\"minLength\":12,\"maxLength\":12,\"pattern\":\"[0-9a-f]+\"}",
         "\"0123456789abc\"", 1},
        {"{\"type\":\"string\",\"minLength\":12,\"maxLength\":12,\"pattern\":\"[0-9a-f]+\"}",
         "\"0123456789a\"", 1},
        {"{\"type\":\"string\",\"minLength\":12,\"maxLength\":12,\"pattern\":\"[0-9a-f]+\"}",
         "\"zzzzzzzzzzzz\"", 1},
        {"{\"type\":\"string\",\"minLength\":5,\"maxLength\":11,\"pattern\":\"^\\\\S+@\\\\S+$\"}",
         "\"a@bcd\"", 0},
        {"{\"type\":\"string\",\"minLength\":5,\"maxLength\":11,\"pattern\":\"^\\\\S+@\\\\S+$\"}",
         "\"abcde@fghi\"", 0},
        {"{\"type\":\"string\",\"minLength\":5,\"maxLength\":11,\"pattern\":\"^\\\\S+@\\\\S+$\"}",
         "\"abcde@fghijk\"", 1},
        {"{\"type\":\"string\",\"minLength\":5,\"maxLength\":11,\"pattern\":\"^\\\\S+@\\\\S+$\"}",
         "\"a@b\"", 1},
        {"{\"type\":\"string\",\"minLength\":5,\"maxLength\":11,\"pattern\":\"^\\\\S+@\\\\S+$\"}",
         "\"ab cd@ef\"", 1},
        {"{\"type\":\"string\",\"minLength\":1,\"maxLength\":5,\"pattern\":\"^([a-z-]*)$\"}",
         "\"a-b\"", 0},
        {"{\"type\":\"string\",\"minLength\":1,\"maxLength\":5,\"pattern\":\"^([a-z-]*)$\"}",
         "\"\"", 1},
        {"{\"type\":\"string\",\"minLength\":1,\"maxLength\":5,\"pattern\":\"^([a-z-]*)$\"}",
         "\"abcdef\"", 1},
        {"{\"type\":\"string\",\"minLength\":1,\"maxLength\":5,\"pattern\":\"^([a-z-]*)$\"}",
         "\"aB\"", 1},
        /* format with lengths every string of the format meets (uri: at least 2) */
        {"{\"type\":\"string\",\"format\":\"uri\",\"minLength\":1}", "\"a:b\"", 0},
        {"{\"type\":\"string\",\"format\":\"uri\",\"minLength\":3}", "\"a:bc\"", -1},
        {"{\"type\":\"string\",\"format\":\"ipv6\",\"maxLength\":45}", "\"::1\"", 0},
        {"{\"type\":\"string\",\"format\":\"duration\",\"minLength\":2}", "\"P1D\"", 0},
        /* a whole multipleOf: written out within bounds, else the remainder automaton */
        {"{\"type\":\"integer\",\"multipleOf\":3}", "99", 0},
        {"{\"type\":\"integer\",\"multipleOf\":3}", "100", 1},
        {"{\"type\":\"integer\",\"multipleOf\":3}", "-3", 0},
        {"{\"type\":\"integer\",\"multipleOf\":3}", "1000000000000002", 0},
        {"{\"type\":\"integer\",\"minimum\":5,\"multipleOf\":12}", "0", 1},
        {"{\"type\":\"integer\",\"minimum\":5,\"multipleOf\":12}", "12", 0},
        {"{\"type\":\"integer\",\"minimum\":5,\"multipleOf\":12}", "13", 1},
        {"{\"type\":\"integer\",\"minimum\":5,\"multipleOf\":12}", "120", 0},
        {"{\"maximum\":100,\"minimum\":16,\"multipleOf\":4,\"type\":\"integer\"}", "16", 0},
        {"{\"maximum\":100,\"minimum\":16,\"multipleOf\":4,\"type\":\"integer\"}", "100", 0},
        {"{\"maximum\":100,\"minimum\":16,\"multipleOf\":4,\"type\":\"integer\"}", "12", 1},
        {"{\"maximum\":100,\"minimum\":16,\"multipleOf\":4,\"type\":\"integer\"}", "104", 1},
        {"{\"maximum\":100,\"minimum\":16,\"multipleOf\":4,\"type\":\"integer\"}", "18", 1},
        {"{\"type\":\"number\",\"multipleOf\":7,\"minimum\":10000,\"maximum\":10010}", "10003", 0},
        {"{\"type\":\"number\",\"multipleOf\":7,\"minimum\":10000,\"maximum\":10010}", "10010", 0},
        {"{\"type\":\"number\",\"multipleOf\":7,\"minimum\":10000,\"maximum\":10010}", "10004", 1},
        {"{\"type\":\"integer\",\"minimum\":50,\"multipleOf\":12}", "60", -1},
        {"{\"type\":\"integer\",\"minimum\":0,\"maximum\":100000,\"multipleOf\":3}", "3", -1},
        /* allOf of patternProperties and another part's properties */
        {"{\"allOf\":[{\"properties\":{\"xa\":{\"type\":\"string\"},\"b\":{}}},{\"patternProperties\":{\"^x\":{\"maxLength\":2}}}]}",
         "{\"xa\": \"ab\", \"b\": 1}", 0},
        {"{\"allOf\":[{\"properties\":{\"xa\":{\"type\":\"string\"},\"b\":{}}},{\"patternProperties\":{\"^x\":{\"maxLength\":2}}}]}",
         "{\"xa\": \"abc\"}", 1},
        {"{\"allOf\":[{\"properties\":{\"xa\":{\"type\":\"string\"},\"b\":{}}},{\"patternProperties\":{\"^x\":{\"maxLength\":2}}}]}",
         "{\"xa\": 1}", 1},
        {"{\"allOf\":[{\"patternProperties\":{\"^x\":{}}},{\"additionalProperties\":false}]}",
         "{}", -1},
        /* the other part's additionalProperties false would forbid the pattern's keys */
        {"{\"allOf\":[{\"patternProperties\":{\"^x\":{}}},{\"properties\":{\"a\":{}},\"additionalProperties\":false}]}",
         "{\"a\": 1, \"xfoo\": 2}", -1},
        /* one pattern that no declared key matches: its keys follow the declared ones */
        {"{\"properties\":{\"author\":{}},\"patternProperties\":{\"^c[1-9]$\":{\"type\":\"string\"}},\"additionalProperties\":false}",
         "{\"author\": 1, \"c1\": \"x\", \"c2\": \"y\"}", 0},
        {"{\"properties\":{\"author\":{}},\"patternProperties\":{\"^c[1-9]$\":{\"type\":\"string\"}},\"additionalProperties\":false}",
         "{\"author\": 1, \"c1\": 5}", 1},
        {"{\"properties\":{\"author\":{}},\"patternProperties\":{\"^c[1-9]$\":{\"type\":\"string\"}},\"additionalProperties\":false}",
         "{\"author\": 1, \"d\": \"y\"}", 1},
        {"{\"properties\":{\"author\":{}},\"patternProperties\":{\"^c[1-9]$\":{\"type\":\"string\"}},\"additionalProperties\":false}",
         "{\"c1\": \"x\"}", 0},
        {"{\"type\":\"string\",\"format\":\"duration\"}", "\"P1Y2M3DT4H5M6S\"", 0},
        {"{\"type\":\"string\",\"format\":\"duration\"}", "\"P4W\"", 0},
        {"{\"type\":\"string\",\"format\":\"duration\"}", "\"PT36H\"", 0},
        {"{\"type\":\"string\",\"format\":\"duration\"}", "\"P\"", 1},
        {"{\"type\":\"string\",\"format\":\"duration\"}", "\"PT\"", 1},
        {"{\"type\":\"string\",\"format\":\"duration\"}", "\"P1H\"", 1},
        {"{\"type\":\"string\",\"format\":\"duration\"}", "\"P1W1D\"", 1},
        {"{\"type\":\"string\",\"format\":\"duration\"}", "\"P1DT\"", 1},
        {"{\"type\":\"string\",\"format\":\"duration\"}", "\"PT1S2M\"", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int r = check(cases[i].schema, cases[i].inst, err, sizeof err);
        T_ASSERTF(r == cases[i].want, "case %zu (%s on %s): got %d (%s)", i, cases[i].inst,
                  cases[i].schema, r, r < 0 ? err : "");
    }
}

/* A string of n 'x' between quotes, the JSON text of an instance. */
static char *xs(int n) {
    char *s = malloc((size_t)n + 3);
    T_ASSERT(s);
    s[0] = '"';
    memset(s + 1, 'x', (size_t)n);
    s[n + 1] = '"';
    s[n + 2] = 0;
    return s;
}

/* Long counts (maxLength 32,767, as real schemas write them) are built from blocks
 * (scheduler/grammar_build.c): lengths at and around each bound and block edge. */
static void test_jschema_long_strings(void) {
    char err[256];
    static const struct {
        const char *schema;
        int lo, hi; /* accepted lengths */
    } cases[] = {
        {"{\"type\":\"string\",\"maxLength\":32767}", 0, 32767},
        {"{\"type\":\"string\",\"minLength\":50,\"maxLength\":32767}", 50, 32767},
        {"{\"type\":\"string\",\"minLength\":2000,\"maxLength\":3000}", 2000, 3000},
        {"{\"type\":\"string\",\"maxLength\":1089}", 0, 1089}, /* 33 blocks of 33 */
        {"{\"type\":\"string\",\"minLength\":5000}", 5000, -1},
    };
    const int probe[] = {0, 1, 49, 50, 51, 1024, 1025, 1088, 1089, 1090, 1999, 2000, 2001,
                         2999, 3000, 3001, 4999, 5000, 5001, 32766, 32767, 32768, 40000};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (size_t j = 0; j < sizeof probe / sizeof probe[0]; j++) {
            const int n = probe[j];
            const int want = n >= cases[i].lo && (cases[i].hi < 0 || n <= cases[i].hi) ? 0 : 1;
            char *inst = xs(n);
            int r = check(cases[i].schema, inst, err, sizeof err);
            free(inst);
            T_ASSERTF(r == want, "%s, length %d: got %d (%s)", cases[i].schema, n, r,
                      r < 0 ? err : "");
        }
    /* every length near a block edge, for a count of 1,056 (32 blocks of 33, none left) */
    for (int n = 0; n <= 1060; n++) {
        char *inst = xs(n);
        int r = check("{\"type\":\"string\",\"maxLength\":1056}", inst, err, sizeof err);
        free(inst);
        T_ASSERTF(r == (n <= 1056 ? 0 : 1), "maxLength 1056, length %d: got %d", n, r);
    }
}

static void test_jschema_errors(void) {
    char err[256];
    T_ASSERT(check("{\"properties\":{\"a\":{\"not\":{\"minimum\":3}}}}", "", err, sizeof err) == -1);
    T_ASSERT(strstr(err, "'not'") && strstr(err, "#/properties/a"));
    T_ASSERT(check("{\"items\":{\"$ref\":\"#/$defs/x\"}}", "", err, sizeof err) == -1);
    T_ASSERT(strstr(err, "#/$defs/x") && strstr(err, "#/items"));
    T_ASSERT(check("{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "", err, sizeof err) == -1);
    T_ASSERT(strstr(err, "pattern"));
    T_ASSERT(check("{\"type\":\"string\",\"pattern\":\"a^b\"}", "", err, sizeof err) == -1);
    T_ASSERT(strstr(err, "anchor"));
    T_ASSERT(check("{\"type\":\"string\",\"pattern\":\"^(a|b^)$\"}", "", err, sizeof err) == -1);
    T_ASSERT(strstr(err, "anchor"));
    T_ASSERT(check("{\"type\":\"array\",\"uniqueItems\":true}", "", err, sizeof err) == -1);
    T_ASSERT(strstr(err, "uniqueItems"));
    T_ASSERT(check("false", "", err, sizeof err) == -1);
    T_ASSERT(check("{\"type\":\"string\",\"format\":\"iri\"}", "", err, sizeof err) == -1);
    T_ASSERT(strstr(err, "'format'") && strstr(err, "#/format"));
    T_ASSERT(check("{\"enum\":[\"a\"],\"format\":\"email\"}", "", err, sizeof err) == -1);
    T_ASSERT(strstr(err, "enum with other keywords"));
    T_ASSERT(check("{\"enum\":[\"a\"],\"not\":{\"const\":\"a\"}}", "", err, sizeof err) == -1);
    T_ASSERT(strstr(err, "no value of the schema's enum or const is valid"));
    T_ASSERT(check("{\"enum\":[{\"a\":1},{\"b\":1}],\"required\":[\"a\"]}", "{\"b\": 1}", err,
                   sizeof err) == 1);
}

/* The server's json_schema_extra_keys / json_schema_any_order reach the converter: a
 * response_format schema's grammar takes another key, and keys out of order, only with
 * them on. */
static void test_schema_options_reach_the_grammar(void) {
    const char *req = "{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                      "{\"name\":\"x\",\"schema\":{\"type\":\"object\",\"properties\":"
                      "{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}}}}}}";
    static const char *const inst[] = {"{\"a\": 1, \"z\": 2}", "{\"b\": 1, \"a\": 2}"};
    for (int on = 0; on < 2; on++) {
        struct tools_limits lim = {.max_tools = 8, .max_schema_bytes = 1 << 16,
                                   .max_stacks = 1024, .max_elems = 200000,
                                   .json_schema_extra_keys = on, .json_schema_any_order = on};
        json_t *root = json_loads(req, 0, NULL), *root2 = NULL;
        struct tools_req *t = NULL;
        struct oai_error e;
        T_ASSERT(root && tools_prepare(root, 1, &lim, &t, &root2, &e) == 0 && t && t->grammar);
        struct gram_scratch *x = NULL;
        T_ASSERT(gram_scratch_create(NULL, 8, &x) == 0);
        for (int i = 0; i < 2; i++) {
            struct gram_match *m = NULL;
            T_ASSERT(gram_match_create(t->grammar, x, &m) == 0);
            int ok = gram_match_accept(m, x, (const uint8_t *)inst[i], strlen(inst[i])) == 0 &&
                     gram_match_can_end(m);
            T_ASSERTF(ok == on, "%s with the options %s", inst[i], on ? "on" : "off");
            gram_match_destroy(m);
        }
        gram_scratch_destroy(x);
        tools_req_free(t);
        json_decref(root);
        json_decref(root2);
    }
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {
        T_CASE(test_tool_output_any_chunking), T_CASE(test_tool_output_not_a_call),
        T_CASE(test_jschema_instances), T_CASE(test_jschema_long_strings), T_CASE(test_jschema_errors),
        T_CASE(test_schema_options_reach_the_grammar), {0},
    };
    return t_main(argc, argv, cases);
}
