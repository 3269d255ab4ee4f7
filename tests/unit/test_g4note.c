/* Unit tests of server/g4note.c: Gemma 4's object notation written from JSON (calls,
 * results, declarations, text-only spans) and read back (round trips, delimiters given as
 * text or as the grammar engine's control-token bytes, malformed input); and of the
 * notation dialect of server/jschema.c (jschema_rules_g4): instances in notation accepted
 * exactly when they are valid. */
#include <jansson.h>

#include "scheduler/grammar.h"
#include "server/g4note.h"
#include "server/jschema.h"
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
    T_ASSERTF(jschema_rules_g4(s, "args", &b, 1, QID, err, sizeof err) == 0, "%s: %s", schema, err);
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

int main(int argc, char **argv) {
    static const struct t_case cases[] = {
        T_CASE(test_write_call), T_CASE(test_response_declaration), T_CASE(test_round_trip),
        T_CASE(test_parse), T_CASE(test_schema_dialect), {0},
    };
    return t_main(argc, argv, cases);
}
