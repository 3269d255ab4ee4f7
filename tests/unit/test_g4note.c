/* Unit tests of server/g4note.c: Gemma 4's object notation written from JSON (calls,
 * results, declarations, text-only spans) and read back (round trips, delimiters given as
 * text or as the grammar engine's control-token bytes, malformed input); and of the
 * notation dialect of server/jschema.c (jschema_rules_g4): instances in notation accepted
 * exactly when they are valid. */
#include <jansson.h>

#include "engine/model.h"

#include "scheduler/grammar.h"
#include "server/api_tools.h"
#include "server/g4note.h"
#include "server/jschema.h"
#include "server/openai_int.h"
#include "tests/unit/harness.h"

static json_t *js(const char *text) {
    json_error_t je;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &je);
    T_ASSERTF(v, "bad JSON in test: %s", je.text);
    return v;
}

static void test_write_call(void) {
    struct g4note_buf b = {0};
    json_t *args = js("{\"unit\": \"c\", \"city\": \"Paris {x}, [y]\", \"n\": 3, \"f\": -1.5, "
                      "\"ok\": true, \"no\": null, \"list\": [1, \"a\", {\"z\": false, \"b\": []}]}");
    T_ASSERT(g4note_call(&b, "get_weather", args) == 0);
    const char *want = "<|tool_call>call:get_weather{city:<|\"|>Paris {x}, [y]<|\"|>,f:-1.5,"
                       "list:[1,<|\"|>a<|\"|>,{b:[],z:false}],n:3,no:null,ok:true,"
                       "unit:<|\"|>c<|\"|>}<tool_call|>";
    T_ASSERTF(strcmp(b.t.p, want) == 0, "got %s", b.t.p);
    /* spans: exactly the caller text (name, keys, string contents), never a control token */
    size_t covered = 0;
    for (int i = 0; i < b.n_spans; i++) {
        const char *s = b.t.p + b.spans[i].off;
        T_ASSERT(!memchr(s, '<', b.spans[i].len) || strncmp(s, "Paris", 5) == 0);
        covered += b.spans[i].len;
        if (i) T_ASSERT(b.spans[i].off > b.spans[i - 1].off + b.spans[i - 1].len);
    }
    T_ASSERT(b.n_spans > 0 && strncmp(b.t.p + b.spans[0].off, "get_weather", b.spans[0].len) == 0);
    T_ASSERT(covered < b.t.n);
    g4note_buf_free(&b);
    json_decref(args);
}

static void test_response_declaration(void) {
    struct g4note_buf b = {0};
    T_ASSERT(g4note_response(&b, "get_weather", "{\"temp\": 21}", 12) == 0);
    T_ASSERTF(strcmp(b.t.p, "<|tool_response>response:get_weather{value:<|\"|>{\"temp\": 21}<|\"|>}"
                          "<tool_response|>") == 0, "got %s", b.t.p);
    g4note_buf_free(&b);
    json_t *p = js("{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", "
                   "\"description\": \"the type of city\"}, \"n\": {\"type\": [\"integer\", \"null\"]}}, "
                   "\"required\": [\"city\"]}");
    T_ASSERT(g4note_declaration(&b, "get_weather", "Current weather", p) == 0);
    const char *want = "<|tool>declaration:get_weather{description:<|\"|>Current weather<|\"|>,"
                       "parameters:{properties:{city:{description:<|\"|>the type of city<|\"|>,"
                       "type:<|\"|>STRING<|\"|>},n:{type:[<|\"|>INTEGER<|\"|>,<|\"|>NULL<|\"|>]}},"
                       "required:[<|\"|>city<|\"|>],type:<|\"|>OBJECT<|\"|>}}<tool|>";
    T_ASSERTF(strcmp(b.t.p, want) == 0, "got %s", b.t.p);
    g4note_buf_free(&b);
    json_decref(p);
}

/* JSON -> notation -> JSON is the identity, with the delimiter as text and as bytes. */
static void test_round_trip(void) {
    static const char *vals[] = {
        "{}", "{\"a\": 1}", "{\"s\": \"x:y,{z}[w] <|tool_call> \\\"q\\\" \\n\", \"e\": \"\"}",
        "{\"deep\": {\"a\": [[], [1, 2.25, -3e-05], {\"b\": {\"c\": null}}], \"t\": true}}",
        "[1, \"two\", false]", "\"plain\"", "12345678901234", "{\"uni\": \"caf\\u00e9 \\u20ac\"}",
    };
    uint8_t enc[GRAM_TOK_BYTES];
    gram_token_bytes(52, enc);
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        json_t *v = js(vals[i]);
        struct g4note_buf b = {0};
        T_ASSERT(g4note_write(&b, v, 0) == 0);
        char err[128];
        size_t used = 0;
        json_t *back = g4note_parse(b.t.p, b.t.n, G4NOTE_QUOTE, 5, &used, err, sizeof err);
        T_ASSERTF(back && used == b.t.n && json_equal(v, back), "%s -> %s: %s", vals[i], b.t.p, err);
        json_decref(back);
        /* the same with the delimiter token as the grammar engine's bytes */
        char alt[1024];
        size_t k = 0;
        for (size_t j = 0; j < b.t.n;) {
            if (b.t.n - j >= 5 && memcmp(b.t.p + j, G4NOTE_QUOTE, 5) == 0) {
                memcpy(alt + k, enc, GRAM_TOK_BYTES);
                k += GRAM_TOK_BYTES;
                j += 5;
            } else {
                alt[k++] = b.t.p[j++];
            }
        }
        back = g4note_parse(alt, k, (const char *)enc, GRAM_TOK_BYTES, &used, err, sizeof err);
        T_ASSERTF(back && used == k && json_equal(v, back), "%s (bytes): %s", vals[i], err);
        json_decref(back);
        g4note_buf_free(&b);
        json_decref(v);
    }
}

static void test_parse(void) {
    char err[128];
    size_t used = 0;
    const char *s = "{a:<|\"|>x<|\"|>,<|\"|>quoted key<|\"|>:2}<tool_call|>";
    json_t *v = g4note_parse(s, strlen(s), G4NOTE_QUOTE, 5, &used, err, sizeof err);
    T_ASSERT(v && used == strlen(s) - strlen("<tool_call|>"));
    json_t *want = js("{\"a\": \"x\", \"quoted key\": 2}");
    T_ASSERT(json_equal(v, want));
    json_decref(v);
    json_decref(want);
    static const char *bad[] = {
        "{a:<|\"|>x}", "{a:1,}", "{:1}", "{a 1}", "{a:1", "[1,2", "{a:tru}", "{a:1.}", "{a:--1}",
        "", "}", "{a:<|\"|>\xff\xfe<|\"|>}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = g4note_parse(bad[i], strlen(bad[i]), G4NOTE_QUOTE, 5, &used, err, sizeof err);
        T_ASSERTF(!v && err[0], "accepted %s", bad[i]);
    }
    /* nesting is bounded */
    char deep[300];
    memset(deep, '[', 200);
    memset(deep + 200, ']', 99);
    deep[299] = 0;
    T_ASSERT(!g4note_parse(deep, strlen(deep), G4NOTE_QUOTE, 5, &used, err, sizeof err));
    T_ASSERT(strstr(err, "deep"));
}

#define QID 52 /* the delimiter token's id in these tests */

/* v in notation with the delimiter as the grammar engine's bytes of token QID. */
static size_t note_bytes(const json_t *v, char *out, size_t cap) {
    struct g4note_buf b = {0};
    T_ASSERT(g4note_write(&b, v, 0) == 0);
    uint8_t enc[GRAM_TOK_BYTES];
    gram_token_bytes(QID, enc);
    size_t k = 0, i = 0;
    int sp = 0;
    while (i < b.t.n) {
        const int in_span = sp < b.n_spans && i >= b.spans[sp].off;
        if (!in_span && b.t.n - i >= 5 && memcmp(b.t.p + i, G4NOTE_QUOTE, 5) == 0) {
            T_ASSERT(k + GRAM_TOK_BYTES < cap);
            memcpy(out + k, enc, GRAM_TOK_BYTES);
            k += GRAM_TOK_BYTES;
            i += 5;
            continue;
        }
        T_ASSERT(k + 1 < cap);
        out[k++] = b.t.p[i++];
        if (in_span && i == b.spans[sp].off + b.spans[sp].len) sp++;
    }
    g4note_buf_free(&b);
    return k;
}

/* 0 accepted, 1 rejected: the instance (JSON text) in notation against the schema's
 * notation grammar; an accepted one also reads back equal. */
static int check_g4(const char *schema, const char *inst) {
    json_t *s = js(schema), *v = js(inst);
    struct jsc_buf b = {0};
    char err[256];
    T_ASSERTF(jschema_rules_g4(s, "args", &b, 1, QID, NULL, err, sizeof err) == 0, "%s: %s", schema, err);
    jsc_buf_add(&b, "root ::= args\n", 14);
    struct gram *g = NULL;
    T_ASSERTF(gram_compile_gbnf(b.p, b.n, NULL, &g, err, sizeof err) == 0, "%s\n%s", err, b.p);
    char text[1024];
    const size_t n = note_bytes(v, text, sizeof text);
    struct gram_scratch *x = NULL;
    struct gram_match *m = NULL;
    T_ASSERT(gram_scratch_create(NULL, 8, &x) == 0);
    T_ASSERT(gram_match_create(g, x, &m) == 0);
    int ok = gram_match_accept(m, x, (const uint8_t *)text, n) == 0 && gram_match_can_end(m);
    if (ok) {
        uint8_t enc[GRAM_TOK_BYTES];
        gram_token_bytes(QID, enc);
        size_t used = 0;
        json_t *back = g4note_parse(text, n, (const char *)enc, GRAM_TOK_BYTES, &used, err, sizeof err);
        T_ASSERTF(back && used == n && json_equal(back, v), "%s does not read back: %s", inst, err);
        json_decref(back);
    }
    gram_match_destroy(m);
    gram_scratch_destroy(x);
    gram_unref(g);
    jsc_buf_free(&b);
    json_decref(s);
    json_decref(v);
    return ok ? 0 : 1;
}

static void test_schema_dialect(void) {
    static const char *W =
        "{\"type\":\"object\",\"properties\":{\"unit\":{\"enum\":[\"c\",\"f\"]},"
        "\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\",\"minimum\":1,"
        "\"maximum\":7},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},"
        "\"maxItems\":2},\"opt\":{\"type\":[\"boolean\",\"null\"]},\"a:b\":{\"type\":\"number\"}},"
        "\"required\":[\"city\",\"days\"],\"additionalProperties\":false}";
    static const struct {
        const char *schema, *inst;
        int want;
    } cases[] = {
        {NULL, "{\"city\":\"Paris, \\\"FR\\\" {x}:[y]\\n\\\\\",\"days\":3}", 0},
        {NULL, "{\"city\":\"\",\"days\":7,\"unit\":\"f\",\"tags\":[],\"opt\":null}", 0},
        {NULL, "{\"city\":\"x\",\"days\":1,\"tags\":[\"a\",\"b\"],\"opt\":true,\"a:b\":-2.5}", 0},
        {NULL, "{\"city\":\"x\",\"days\":8}", 1},
        {NULL, "{\"city\":\"x\",\"days\":2,\"unit\":\"k\"}", 1},
        {NULL, "{\"city\":\"x\",\"days\":2,\"tags\":[\"a\",\"b\",\"c\"]}", 1},
        {NULL, "{\"days\":2}", 1},
        {NULL, "{\"city\":\"x\",\"days\":2,\"zz\":1}", 1},
        {NULL, "{\"city\":1,\"days\":2}", 1},
        {"{\"type\":\"string\",\"pattern\":\"^[a-z\\\"]+\\\\d$\"}", "\"ab\\\"c1\"", 0},
        {"{\"type\":\"string\",\"pattern\":\"^[a-z\\\"]+\\\\d$\"}", "\"ab\"", 1},
        {"{\"const\":{\"a b\":[1,\"x\"],\"c\":\"\"}}", "{\"a b\":[1,\"x\"],\"c\":\"\"}", 0},
        {"{\"const\":{\"a b\":[1,\"x\"],\"c\":\"\"}}", "{\"a b\":[1,\"y\"],\"c\":\"\"}", 1},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"\\u00e9\\n\"", 0},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"a\"", 1},
        {"{\"type\":\"string\",\"format\":\"date\"}", "\"2024-02-03\"", 0},
        {"{\"type\":\"string\",\"format\":\"date\"}", "\"2024-02-30\"", 1},
        {"{\"type\":\"object\"}", "{\"k\":{\"n\":[null,true,{}]},\"m\":\"v\"}", 0},
        {"{\"type\":\"object\"}", "[]", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *sch = cases[i].schema ? cases[i].schema : W;
        int got = check_g4(sch, cases[i].inst);
        T_ASSERTF(got == cases[i].want, "case %zu (%s): got %d want %d", i, cases[i].inst, got,
                  cases[i].want);
    }
}

/* Gemma 4's output (tool tokens as their grammar bytes) split into text and calls at every
 * chunking: other control tokens never reach the text, each call's first delta carries its
 * name, its arguments arrive as JSON in one fragment. */
static void test_output_g4(void) {
    const struct g4note_ids ids = {.call = 12, .call_end = 13, .quote = 16, .decl = 10,
                                   .decl_end = 11, .resp = 14, .resp_end = 15};
    uint8_t c[GRAM_TOK_BYTES], ce[GRAM_TOK_BYTES], q[GRAM_TOK_BYTES], other[GRAM_TOK_BYTES];
    gram_token_bytes(ids.call, c);
    gram_token_bytes(ids.call_end, ce);
    gram_token_bytes(ids.quote, q);
    gram_token_bytes(8, other);
    char out[512];
    size_t n = 0;
#define PUT(s, k) (memcpy(out + n, (s), (k)), n += (k))
#define PUTS(s) PUT(s, strlen(s))
    PUTS("Hi ");
    PUT(other, GRAM_TOK_BYTES);
    PUTS("there");
    PUT(c, GRAM_TOK_BYTES);
    PUTS("call:get_weather{city:");
    PUT(q, GRAM_TOK_BYTES);
    PUTS("P{a}\"r,is]");
    PUT(q, GRAM_TOK_BYTES);
    PUTS(",n:[1,{x:2}]}");
    PUT(ce, GRAM_TOK_BYTES);
    PUT(c, GRAM_TOK_BYTES);
    PUTS("call:t2{}");
    PUT(ce, GRAM_TOK_BYTES);
#undef PUT
#undef PUTS
    json_t *want0 = js("{\"city\": \"P{a}\\\"r,is]\", \"n\": [1, {\"x\": 2}]}");
    for (size_t step = 1; step <= n; step++) {
        struct tools_out *o = tools_out_new("x");
        tools_out_set_g4(o, &ids);
        char text[64] = "", args[2][256] = {"", ""}, names[2][32] = {"", ""};
        for (size_t at = 0; at < n || at == 0; at += step) {
            const size_t k = at + step > n ? n - at : step;
            json_t *d = tools_out_feed(o, out + at, k, at + step >= n);
            size_t i;
            json_t *x;
            json_array_foreach(d, i, x) {
                json_t *ct = json_object_get(x, "content");
                if (ct) strncat(text, json_string_value(ct), sizeof text - strlen(text) - 1);
                json_t *tc = json_array_get(json_object_get(x, "tool_calls"), 0);
                if (!tc) continue;
                const int idx = (int)json_integer_value(json_object_get(tc, "index"));
                T_ASSERT(idx == 0 || idx == 1);
                json_t *fn = json_object_get(tc, "function");
                json_t *nm = json_object_get(fn, "name");
                if (nm) {
                    T_ASSERT(!names[idx][0] && json_object_get(tc, "id"));
                    snprintf(names[idx], sizeof names[idx], "%s", json_string_value(nm));
                }
                json_t *a = json_object_get(fn, "arguments");
                if (a) strncat(args[idx], json_string_value(a), sizeof args[idx] - strlen(args[idx]) - 1);
            }
            json_decref(d);
            if (at + step >= n) break;
        }
        T_ASSERTF(strcmp(text, "Hi there") == 0, "step %zu: text '%s'", step, text);
        T_ASSERT(strcmp(names[0], "get_weather") == 0 && strcmp(names[1], "t2") == 0);
        json_t *a0 = js(args[0]), *a1 = js(args[1]);
        T_ASSERTF(json_equal(a0, want0), "step %zu: %s", step, args[0]);
        T_ASSERT(json_is_object(a1) && json_object_size(a1) == 0);
        json_decref(a0);
        json_decref(a1);
        T_ASSERT(tools_out_n_calls(o) == 2);
        json_t *calls = tools_out_calls(o);
        json_t *f0 = json_object_get(json_array_get(calls, 0), "function");
        T_ASSERT(strcmp(json_string_value(json_object_get(f0, "arguments")), args[0]) == 0);
        json_decref(calls);
        json_t *content = tools_out_content(o);
        T_ASSERT(json_is_string(content) && strcmp(json_string_value(content), "Hi there") == 0);
        json_decref(content);
        tools_out_free(o);
    }
    json_decref(want0);
}

/* The notation's strings are exact UTF-8: an overlong or surrogate byte sequence (which
 * would decode as U+FFFD and lengthen the string) is refused even where length is bounded. */
static void test_schema_dialect_utf8(void) {
    static const char *S = "{\"type\":\"string\",\"maxLength\":3}";
    json_t *s = js(S);
    struct jsc_buf b = {0};
    char err[256];
    T_ASSERT(jschema_rules_g4(s, "a", &b, 1, QID, NULL, err, sizeof err) == 0);
    jsc_buf_add(&b, "root ::= a\n", 11);
    struct gram *g = NULL;
    T_ASSERTF(gram_compile_gbnf(b.p, b.n, NULL, &g, err, sizeof err) == 0, "%s", err);
    uint8_t enc[GRAM_TOK_BYTES];
    gram_token_bytes(QID, enc);
    static const char *bodies[] = {"\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xc3\xa9", "\xf0\x9f\x98\x80"};
    for (int i = 0; i < 5; i++) {
        char t[32];
        size_t n = 0;
        memcpy(t, enc, GRAM_TOK_BYTES), n += GRAM_TOK_BYTES;
        memcpy(t + n, bodies[i], strlen(bodies[i])), n += strlen(bodies[i]);
        memcpy(t + n, enc, GRAM_TOK_BYTES), n += GRAM_TOK_BYTES;
        struct gram_scratch *x = NULL;
        struct gram_match *m = NULL;
        T_ASSERT(gram_scratch_create(NULL, 8, &x) == 0 && gram_match_create(g, x, &m) == 0);
        const int ok = gram_match_accept(m, x, (const uint8_t *)t, n) == 0 && gram_match_can_end(m);
        T_ASSERTF(ok == (i >= 3), "body %d accepted %d", i, ok);
        gram_match_destroy(m);
        gram_scratch_destroy(x);
    }
    gram_unref(g);
    jsc_buf_free(&b);
    json_decref(s);
}

/* Tool tokens written as grammar bytes become the tokens in the prompt, and only those:
 * the same token's text inside a text-only span stays text. */
static void test_expand_tokens(void) {
    struct model *md = t_model_or_skip();
    const struct tok_vocab *v = md->vocab;
    const int32_t sot = tok_lookup(v, "<start_of_turn>", 15);
    T_ASSERT(sot >= 0);
    char *text = malloc(64);
    size_t n = 0;
    text[n++] = 'a';
    gram_token_bytes(sot, (uint8_t *)text + n);
    n += GRAM_TOK_BYTES;
    memcpy(text + n, "b<start_of_turn>", 16);
    n += 16;
    text[n] = 0;
    struct tok_span *sp = malloc(sizeof *sp);
    sp[0] = (struct tok_span){0, n};
    int n_sp = 1;
    T_ASSERT(oai_expand_tokens(v, &text, &n, &sp, &n_sp) == 0);
    T_ASSERTF(strcmp(text, "a<start_of_turn>b<start_of_turn>") == 0, "%s", text);
    T_ASSERT(n_sp == 2 && sp[0].off == 0 && sp[0].len == 1 && sp[1].off == 16 && sp[1].len == 16);
    int32_t ids[64];
    int k = tok_encode_spans(v, text, n, 0, 1, sp, n_sp, ids, 64);
    T_ASSERT(k > 2);
    int n_sot = 0;
    for (int i = 0; i < k; i++) n_sot += ids[i] == sot;
    T_ASSERTF(n_sot == 1, "%d <start_of_turn> tokens", n_sot);
    /* no grammar bytes: unchanged */
    char *before = text;
    T_ASSERT(oai_expand_tokens(v, &text, &n, &sp, &n_sp) == 0 && text == before && n_sp == 2);
    free(text);
    free(sp);
    model_free(md);
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {
        T_CASE(test_write_call), T_CASE(test_response_declaration), T_CASE(test_round_trip),
        T_CASE(test_parse), T_CASE(test_schema_dialect),
        T_CASE(test_output_g4), T_CASE(test_schema_dialect_utf8),
        T_CASE(test_expand_tokens), {0},
    };
    return t_main(argc, argv, cases);
}
