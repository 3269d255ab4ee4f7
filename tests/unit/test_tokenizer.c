/*
 * test_tokenizer — tokenizer parity with llama.cpp on the bundled Gemma 3 vocab (fixture made
 * by tests/fixtures/tokenizer/gen_tokenizer_fixture.py), round trips, the stream decoder,
 * vocab validation, and small synthetic SPM / Gemma 4 BPE vocabs written as GGUF in memory.
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdint.h>

#include "engine/gguf.h"
#include "engine/tokenizer.h"
#include "tests/unit/gguf_writer.h"
#include "tests/unit/harness.h"

#define FIXTURE "tests/fixtures/tokenizer/expected.json"
#define FIXTURE_G4 "tests/fixtures/tokenizer/expected_gemma4.json"
#define FIXTURE_G4_MODEL "tests/fixtures/tokenizer/gemma4-tiny.gguf"

/* ---- synthetic vocabs (GGUF built by tests/unit/gguf_writer.h) ------------------------- */

/* Wraps the kv records in a GGUF v3 header (no tensors); returns the file bytes. */
static uint8_t *vocab_file(struct gw *kvs, size_t *len) {
    struct gw f = {0};
    gw_header(&f, 3, 0, kvs->n_kv);
    gw_bytes(&f, kvs->p, kvs->n);
    free(kvs->p);
    *len = f.n;
    return f.p;
}

/* Opens a synthetic vocab; returns tok_create's status and the error text. */
static int open_vocab(struct gw *kvs, struct gguf_file **gf, struct tok_vocab **v, char *err,
                      size_t errlen) {
    size_t len;
    uint8_t *bytes = vocab_file(kvs, &len);
    char gerr[256];
    int rc = gguf_open_buffer(bytes, len, gf, gerr, sizeof(gerr));
    T_ASSERTF(rc == 0, "gguf_open_buffer: %s", gerr);
    t_keep(bytes); /* the gguf_file points into it: alive until the test ends */
    err[0] = 0;
    return tok_create(*gf, v, err, errlen);
}

/* A small SPM vocab: control and byte tokens, a user-defined tag, and scored pieces. */
static const char *const spm_tokens[] = {"<pad>",
                                         "<eos>",
                                         "<bos>",
                                         "<unk>",
                                         "<start_of_turn>",
                                         "<end_of_turn>",
                                         "<tag>",
                                         "\xe2\x96\x81",
                                         "a",
                                         "b",
                                         "c",
                                         "ab",
                                         "bc",
                                         "abc",
                                         "\xe2\x96\x81"
                                         "a",
                                         "\xe2\x96\x81"
                                         "ab",
                                         "h",
                                         "i",
                                         "hi",
                                         "\n",
                                         "<0x00>",
                                         "<0x0A>",
                                         "<0xC3>",
                                         "<0xA9>",
                                         "<0xE2>",
                                         "<0x82>",
                                         "<0xAC>",
                                         "\xc3\xa9"};
#define SPM_N ((int)(sizeof(spm_tokens) / sizeof(spm_tokens[0])))

static void spm_kvs(struct gw *b, int n_scores, int n_types, uint32_t bos) {
    float sc[SPM_N + 1] = {0}; /* one spare entry for the "too long" validation case */
    int32_t ty[SPM_N + 1] = {0};
    for (int i = 0; i < SPM_N; i++) {
        sc[i] = -(float)i;
        ty[i] = 1;
        if (i < 6) ty[i] = 3;
        if (i == 6) ty[i] = 4;
        if (!strncmp(spm_tokens[i], "<0x", 3)) ty[i] = 6;
    }
    sc[13] = 5.0f; /* "abc" beats everything */
    sc[12] = 1.0f; /* "bc" beats "ab" */
    gw_kv_str(b, "general.architecture", "gemma3");
    gw_kv_str(b, "tokenizer.ggml.model", "llama");
    gw_kv_strs(b, "tokenizer.ggml.tokens", spm_tokens, SPM_N);
    gw_kv_f32s(b, "tokenizer.ggml.scores", sc, n_scores);
    gw_kv_i32s(b, "tokenizer.ggml.token_type", ty, n_types);
    gw_kv_u32(b, "tokenizer.ggml.bos_token_id", bos);
    gw_kv_u32(b, "tokenizer.ggml.eos_token_id", 1);
    gw_kv_bool(b, "tokenizer.ggml.add_bos_token", 1);
    gw_kv_bool(b, "tokenizer.ggml.add_space_prefix", 0);
}

static int enc(const struct tok_vocab *v, const char *s, int special, int32_t *ids, int cap) {
    return tok_encode(v, s, strlen(s), 1, special, ids, cap);
}

static void expect_ids(const struct tok_vocab *v, const char *s, int special, const int32_t *want,
                       int n_want) {
    int32_t ids[64];
    int n = enc(v, s, special, ids, 64);
    int same = n == n_want;
    for (int i = 0; same && i < n; i++)
        same = ids[i] == want[i];
    if (!same) {
        fprintf(stderr, "    \"%s\" special=%d: got", s, special);
        for (int i = 0; i < n && i < 64; i++)
            fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    T_ASSERTF(same, "encoding mismatch for \"%s\"", s);
}

static void test_synthetic_spm(void) {
    struct gw b = {0};
    spm_kvs(&b, SPM_N, SPM_N, 2);
    struct gguf_file *gf;
    struct tok_vocab *v;
    char err[256];
    T_ASSERTF(open_vocab(&b, &gf, &v, err, sizeof(err)) == 0, "%s", err);
    T_ASSERT(tok_n_vocab(v) == SPM_N && tok_bos(v) == 2 && tok_eos(v) == 1);
    /* "abc" (score 5) wins over the pairs. */
    expect_ids(v, "abc", 0, (const int32_t[]){2, 13}, 2);
    /* "bc" (1) beats "ab" (-11): a + bc. */
    expect_ids(v, "abcb", 0, (const int32_t[]){2, 13, 9}, 3);
    /* Space becomes U+2581; no prefix space for this vocab. */
    expect_ids(v, "a ab", 0, (const int32_t[]){2, 8, 15}, 3);
    /* Byte fallback: 'é' is a piece, '€' (E2 82 AC) is not, NUL has <0x00>. */
    expect_ids(v, "\xc3\xa9\xe2\x82\xac", 0, (const int32_t[]){2, 27, 24, 25, 26}, 5);
    /* Control text only splits with parse_special; the user-defined tag always. */
    expect_ids(v, "<start_of_turn>hi", 1, (const int32_t[]){2, 4, 18}, 3);
    expect_ids(v, "a<tag>b", 0, (const int32_t[]){2, 8, 6, 9}, 4);
    int32_t ids[64];
    /* Without parse_special the control text is ordinary text; this vocab cannot spell '<'
     * (no piece, no <0x3C>), which llama.cpp treats as an error too. */
    int n = enc(v, "<start_of_turn>", 0, ids, 64);
    T_ASSERT(n == TOK_ENOBYTE);
    /* Capacity: the full count comes back even when the buffer is short. */
    T_ASSERT(enc(v, "abcb", 0, ids, 1) == 3 && ids[0] == 2);
    T_ASSERT(tok_encode(v, "", 0, 1, 0, ids, 64) == 1 && ids[0] == 2);
    T_ASSERT(tok_encode(v, "", 0, 0, 0, ids, 64) == 0);
    /* Decode rules. */
    char out[64];
    int32_t d[] = {2, 4, 14, 24, 25, 26, 6, 19};
    n = tok_decode(v, d, 8, 0, out, sizeof(out));
    T_ASSERT(n == 11 && !memcmp(out, " a\xe2\x82\xac<tag>\n", 11));
    n = tok_decode(v, d, 8, 1, out, sizeof(out));
    T_ASSERT(n == 31 && !memcmp(out, "<bos><start_of_turn> a", 22));
    T_ASSERT(tok_decode(v, d, 8, 1, out, 3) == 31 && !memcmp(out, "<bo", 3));
    T_ASSERT(tok_token_to_bytes(v, SPM_N, 0, out, 8) < 0);
    T_ASSERT(tok_lookup(v, "abc", 3) == 13 && tok_lookup(v, "abd", 3) == -1);
    T_ASSERT(tok_type(v, 4) == TOK_TYPE_CONTROL && tok_type(v, 6) == TOK_TYPE_USER_DEFINED &&
             tok_type(v, 20) == TOK_TYPE_BYTE && tok_type(v, 8) == TOK_TYPE_NORMAL);
    /* EOG: eos, plus <end_of_turn> by its text. */
    T_ASSERT(tok_is_eog(v, 1) && tok_is_eog(v, 5) && !tok_is_eog(v, 2) && !tok_is_eog(v, 4));
    tok_destroy(v);
    gguf_close(gf);
}

static void expect_create_error(struct gw *b, const char *key) {
    struct gguf_file *gf;
    struct tok_vocab *v = (struct tok_vocab *)1;
    char err[256];
    int rc = open_vocab(b, &gf, &v, err, sizeof(err));
    T_ASSERTF(rc < 0 && v == NULL, "tok_create accepted a bad vocab (%s)", key);
    T_ASSERTF(strstr(err, key) != NULL, "error \"%s\" does not name %s", err, key);
    gguf_close(gf);
}

static void test_create_validation(void) {
    struct gw b = {0};
    spm_kvs(&b, SPM_N - 1, SPM_N, 2);
    expect_create_error(&b, "tokenizer.ggml.scores");
    memset(&b, 0, sizeof(b));
    spm_kvs(&b, SPM_N, SPM_N + 1, 2);
    expect_create_error(&b, "tokenizer.ggml.token_type");
    memset(&b, 0, sizeof(b));
    spm_kvs(&b, SPM_N, SPM_N, SPM_N);
    expect_create_error(&b, "tokenizer.ggml.bos_token_id");
    memset(&b, 0, sizeof(b));
    gw_kv_str(&b, "tokenizer.ggml.model", "llama");
    expect_create_error(&b, "tokenizer.ggml.tokens");
    memset(&b, 0, sizeof(b));
    gw_kv_str(&b, "tokenizer.ggml.model", "wordpiece-ish");
    gw_kv_strs(&b, "tokenizer.ggml.tokens", spm_tokens, SPM_N);
    expect_create_error(&b, "tokenizer.ggml.model");
    memset(&b, 0, sizeof(b));
    const char *dup[] = {"a", "b", "a"};
    gw_kv_str(&b, "tokenizer.ggml.model", "llama");
    gw_kv_strs(&b, "tokenizer.ggml.tokens", dup, 3);
    expect_create_error(&b, "tokenizer.ggml.tokens");
    memset(&b, 0, sizeof(b));
    gw_kv_str(&b, "tokenizer.ggml.model", "gemma4");
    gw_kv_strs(&b, "tokenizer.ggml.tokens", spm_tokens, SPM_N);
    gw_kv_u32(&b, "tokenizer.ggml.bos_token_id", 2);
    expect_create_error(&b, "tokenizer.ggml.merges");
}

/* Gemma 4 style: BPE merges over raw UTF-8 with U+2581 for spaces, newline runs apart. */
static void test_synthetic_gemma4(void) {
    static const char *const toks[] = {"<pad>",
                                       "<eos>",
                                       "<bos>",
                                       "<unk>",
                                       "<|turn>",
                                       "<turn|>",
                                       "a",
                                       "b",
                                       "c",
                                       "\xe2\x96\x81",
                                       "ab",
                                       "abc",
                                       "\xe2\x96\x81"
                                       "a",
                                       "\n",
                                       "\n\n",
                                       "<0xF0>",
                                       "<0x9F>",
                                       "<0x98>",
                                       "<0x80>",
                                       "bc",
                                       "</s>",
                                       "<|tool_response>"};
    int n = (int)(sizeof(toks) / sizeof(toks[0]));
    int32_t ty[32];
    float sc[32];
    for (int i = 0; i < n; i++) {
        ty[i] = i < 6 ? 3 : !strncmp(toks[i], "<0x", 3) ? 6 : 1;
        sc[i] = 0;
    }
    ty[21] = 3;
    /* Rank order: "a b" first, then "ab c", "\xe2\x96\x81 a", "b c". */
    static const char *const merges[] = {"a b", "ab c", "\xe2\x96\x81 a", "b c", "\n \n"};
    struct gw b = {0};
    gw_kv_str(&b, "tokenizer.ggml.model", "gemma4");
    gw_kv_strs(&b, "tokenizer.ggml.tokens", toks, n);
    gw_kv_f32s(&b, "tokenizer.ggml.scores", sc, n);
    gw_kv_i32s(&b, "tokenizer.ggml.token_type", ty, n);
    gw_kv_strs(&b, "tokenizer.ggml.merges", merges, 5);
    gw_kv_u32(&b, "tokenizer.ggml.bos_token_id", 2);
    gw_kv_u32(&b, "tokenizer.ggml.eos_token_id", 1);
    gw_kv_bool(&b, "tokenizer.ggml.add_bos_token", 0); /* llama.cpp forces it on for gemma4 */
    struct gguf_file *gf;
    struct tok_vocab *v;
    char err[256];
    T_ASSERTF(open_vocab(&b, &gf, &v, err, sizeof(err)) == 0, "%s", err);
    expect_ids(v, "abc", 0, (const int32_t[]){2, 11}, 2);
    expect_ids(v, "bc a", 0, (const int32_t[]){2, 19, 12}, 3);
    /* "\n\n\n" is not a piece: split, then merged pairwise by rank. */
    expect_ids(v, "a\n\n\nb", 0, (const int32_t[]){2, 6, 14, 13, 7}, 5);
    expect_ids(v, "\n\n", 0, (const int32_t[]){2, 14}, 2);
    /* Byte fallback through <0xXX>; bytes without such a piece are dropped (E2 82 AC). */
    expect_ids(v, "\xf0\x9f\x98\x80", 0, (const int32_t[]){2, 15, 16, 17, 18}, 5);
    expect_ids(v, "\xe2\x82\xac", 0, (const int32_t[]){2}, 1);
    expect_ids(v, "<|turn>a<turn|>", 1, (const int32_t[]){2, 4, 6, 5}, 4);
    /* </s> is an ordinary token when <|tool_response> is an end-of-generation marker. */
    T_ASSERT(tok_is_eog(v, 5) && tok_is_eog(v, 1) && tok_is_eog(v, 21) && !tok_is_eog(v, 20));
    T_ASSERT(tok_type(v, 20) == TOK_TYPE_NORMAL);
    char out[32];
    int32_t d[] = {2, 12, 9, 11};
    T_ASSERT(tok_decode(v, d, 4, 0, out, sizeof(out)) == 6 && !memcmp(out, " a abc", 6));
    tok_destroy(v);
    gguf_close(gf);
}

/* ---- parity with llama.cpp on the bundled model ----------------------------------------- */

struct fx {
    struct gguf_file *gf;
    struct tok_vocab *v;
    json_t *doc;
    json_t *cases;
};

static void fx_open_at(struct fx *x, const char *model, const char *fixture) {
    char err[256];
    if (access(model, R_OK) != 0) T_SKIP("model %s not present", model);
    json_error_t je;
    x->doc = json_load_file(fixture, JSON_ALLOW_NUL, &je);
    T_ASSERTF(x->doc, "%s: %s (line %d)", fixture, je.text, je.line);
    x->cases = json_object_get(x->doc, "cases");
    T_ASSERT(json_is_array(x->cases) && json_array_size(x->cases) >= 200);
    T_ASSERTF(gguf_open(model, &x->gf, err, sizeof(err)) == 0, "%s", err);
    T_ASSERTF(tok_create(x->gf, &x->v, err, sizeof(err)) == 0, "%s", err);
}

static void fx_open(struct fx *x) {
    fx_open_at(x, t_model_path(), FIXTURE);
}

static void fx_close(struct fx *x) {
    tok_destroy(x->v);
    gguf_close(x->gf);
    json_decref(x->doc);
}

static int unhex(const char *h, char *out) {
    int n = 0;
    for (; h[0] && h[1]; h += 2) {
        unsigned v;
        sscanf(h, "%2x", &v);
        out[n++] = (char)v;
    }
    return n;
}

/* Text of case i (hex cases decoded); *valid = 1 for UTF-8 text cases. */
static char *case_text(json_t *c, size_t *len, int *valid) {
    json_t *t = json_object_get(c, "text");
    if (t) {
        *len = json_string_length(t);
        *valid = 1;
        char *s = malloc(*len + 1);
        memcpy(s, json_string_value(t), *len + 1);
        return s;
    }
    const char *h = json_string_value(json_object_get(c, "hex"));
    T_ASSERT(h);
    char *s = malloc(strlen(h) / 2 + 1);
    *len = (size_t)unhex(h, s);
    *valid = 0;
    return s;
}

static int32_t *json_ids(json_t *a, int *n) {
    *n = (int)json_array_size(a);
    int32_t *ids = malloc(((size_t)*n + 1) * sizeof(*ids));
    for (int i = 0; i < *n; i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    return ids;
}

static void print_ids(const char *what, const int32_t *ids, int n) {
    fprintf(stderr, "      %s:", what);
    for (int i = 0; i < n && i < 40; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

/* Asserts llama.cpp's ids for every case in one mode (the fixture stays open). */
static void parity(struct fx *x, int special) {
    size_t nc = json_array_size(x->cases);
    int same = 0;
    for (size_t i = 0; i < nc; i++) {
        json_t *c = json_array_get(x->cases, i);
        size_t len;
        int valid, nw;
        char *s = case_text(c, &len, &valid);
        int32_t *want = json_ids(json_object_get(c, special ? "ids_special" : "ids"), &nw);
        int32_t *got = malloc((len + 8) * 3 * sizeof(*got));
        int n = tok_encode(x->v, s, len, 1, special, got, (int)(len + 8) * 3);
        int ok = n == nw;
        for (int k = 0; ok && k < n; k++)
            ok = got[k] == want[k];
        if (ok)
            same++;
        else {
            fprintf(stderr, "    case %zu differs (%.60s)\n", i, valid ? s : "<bytes>");
            print_ids("want", want, nw);
            print_ids("got ", got, n);
        }
        free(s);
        free(want);
        free(got);
    }
    printf("# parity special=%d: %d/%zu strings identical\n", special, same, nc);
    T_ASSERTF(same == (int)nc, "%zu of %zu strings differ", nc - (size_t)same, nc);
}

static void test_parity_normal(void) {
    struct fx x;
    fx_open(&x);
    parity(&x, 0);
    fx_close(&x);
}

static void test_parity_special(void) {
    struct fx x;
    fx_open(&x);
    parity(&x, 1);
    fx_close(&x);
}

/* Gemma 4 BPE on a small synthetic vocab (committed GGUF), both modes, plus its EOG set. */
static void test_parity_gemma4(void) {
    struct fx x;
    fx_open_at(&x, FIXTURE_G4_MODEL, FIXTURE_G4);
    int n;
    int32_t *eog = json_ids(json_object_get(x.doc, "eog"), &n);
    for (int32_t id = 0, k = 0; id < tok_n_vocab(x.v); id++) {
        int want = k < n && eog[k] == id;
        k += want;
        T_ASSERTF(tok_is_eog(x.v, id) == want, "tok_is_eog(%d) = %d", id, !want);
    }
    free(eog);
    parity(&x, 0);
    parity(&x, 1);
    fx_close(&x);
}

/* One corpus case in one mode, as the per-case checks see it. */
struct fx_case {
    size_t index;     /* case number */
    const char *text; /* input bytes */
    size_t len;
    int valid;          /* 1 for UTF-8 text cases, 0 for the invalid-byte cases */
    int special;        /* which mode the ids come from */
    const int32_t *ids; /* llama.cpp's ids (BOS first) */
    int n;
    json_t *c; /* the fixture row */
};

/* Calls fn for every case in both modes. */
static void fx_each(struct fx *x, void (*fn)(struct fx *, const struct fx_case *)) {
    size_t nc = json_array_size(x->cases);
    for (size_t i = 0; i < nc; i++) {
        json_t *c = json_array_get(x->cases, i);
        struct fx_case k = {.index = i, .c = c};
        char *s = case_text(c, &k.len, &k.valid);
        k.text = s;
        for (k.special = 0; k.special < 2; k.special++) {
            int32_t *ids = json_ids(json_object_get(c, k.special ? "ids_special" : "ids"), &k.n);
            k.ids = ids;
            fn(x, &k);
            free(ids);
        }
        free(s);
    }
}

/* tok_decode matches llama.cpp's pieces, and decode(encode(s)) == s for UTF-8 text. */
static void check_decode(struct fx *x, const struct fx_case *k) {
    const char *h =
        json_string_value(json_object_get(k->c, k->special ? "detok_special" : "detok"));
    char *want = malloc(strlen(h) / 2 + 1);
    int nw = unhex(h, want);
    int cap = (int)k->len * 4 + 64;
    char *got = malloc((size_t)cap);
    int ng = tok_decode(x->v, k->ids, k->n, k->special, got, cap);
    T_ASSERTF(ng == nw && !memcmp(got, want, (size_t)nw),
              "case %zu special=%d: decode differs from llama.cpp", k->index, k->special);
    if (k->valid) { /* skip BOS; specials render verbatim only with special */
        ng = tok_decode(x->v, k->ids + 1, k->n - 1, k->special, got, cap);
        T_ASSERTF(ng == (int)k->len && !memcmp(got, k->text, k->len),
                  "case %zu special=%d: decode(encode(s)) != s", k->index, k->special);
    }
    free(want);
    free(got);
}

static void test_decode(void) {
    struct fx x;
    fx_open(&x);
    fx_each(&x, check_decode);
    fx_close(&x);
}

/* Independent oracle: jansson refuses strings that are not complete, valid UTF-8. */
static int utf8_valid(const char *s, int n) {
    json_t *j = json_stringn(s, (size_t)n);
    json_decref(j);
    return j != NULL;
}

/* Streaming every encoding: each chunk is complete UTF-8, and for UTF-8 input the chunks
 * add up to tok_decode's text. */
static void check_stream(struct fx *x, const struct fx_case *k) {
    int cap = (int)k->len * 4 + 64;
    char *want = malloc((size_t)cap), *got = malloc((size_t)cap + TOK_STREAM_MAX * 2);
    int nw = tok_decode(x->v, k->ids, k->n, 0, want, cap);
    struct tok_stream st;
    tok_stream_init(&st);
    int ng = 0;
    for (int t = 0; t < k->n; t++) {
        int w = tok_stream_push(&st, x->v, k->ids[t], got + ng, TOK_STREAM_MAX);
        T_ASSERTF(w >= 0, "case %zu: stream push failed (%d)", k->index, w);
        T_ASSERTF(utf8_valid(got + ng, w),
                  "case %zu: token %d emitted a partial or invalid UTF-8 chunk", k->index, t);
        ng += w;
    }
    int w = tok_stream_flush(&st, got + ng, TOK_STREAM_MAX);
    T_ASSERT(w >= 0 && utf8_valid(got + ng, w));
    ng += w;
    if (k->valid)
        T_ASSERTF(ng == nw && !memcmp(got, want, (size_t)nw),
                  "case %zu: stream text differs from decode", k->index);
    free(want);
    free(got);
}

static void test_stream(void) {
    struct fx x;
    fx_open(&x);
    fx_each(&x, check_stream);
    /* Byte tokens of U+20AC one by one: nothing until the last, flush of a partial -> U+FFFD. */
    struct tok_stream st;
    tok_stream_init(&st);
    char out[TOK_STREAM_MAX];
    int32_t e2 = tok_lookup(x.v, "<0xE2>", 6), x82 = tok_lookup(x.v, "<0x82>", 6),
            xac = tok_lookup(x.v, "<0xAC>", 6);
    T_ASSERT(e2 >= 0 && x82 >= 0 && xac >= 0);
    T_ASSERT(tok_stream_push(&st, x.v, e2, out, sizeof(out)) == 0);
    T_ASSERT(tok_stream_push(&st, x.v, x82, out, sizeof(out)) == 0);
    T_ASSERT(tok_stream_push(&st, x.v, xac, out, sizeof(out)) == 3 &&
             !memcmp(out, "\xe2\x82\xac", 3));
    T_ASSERT(tok_stream_push(&st, x.v, e2, out, sizeof(out)) == 0);
    T_ASSERT(tok_stream_flush(&st, out, sizeof(out)) == 3 && !memcmp(out, "\xef\xbf\xbd", 3));
    T_ASSERT(tok_stream_flush(&st, out, sizeof(out)) == 0);
    /* An interrupted sequence becomes U+FFFD followed by the next character. */
    int32_t a = tok_lookup(x.v, "a", 1);
    T_ASSERT(tok_stream_push(&st, x.v, e2, out, sizeof(out)) == 0);
    T_ASSERT(tok_stream_push(&st, x.v, a, out, sizeof(out)) == 4 && !memcmp(out,
                                                                            "\xef\xbf\xbd"
                                                                            "a",
                                                                            4));
    fx_close(&x);
}

static void test_eog_and_specials(void) {
    struct fx x;
    fx_open(&x);
    T_ASSERT(tok_n_vocab(x.v) == (int)json_integer_value(json_object_get(x.doc, "n_vocab")));
    T_ASSERT(tok_bos(x.v) == (int32_t)json_integer_value(json_object_get(x.doc, "bos")));
    T_ASSERT(tok_eos(x.v) == (int32_t)json_integer_value(json_object_get(x.doc, "eos")));
    int n;
    int32_t *eog = json_ids(json_object_get(x.doc, "eog"), &n);
    int k = 0;
    for (int32_t id = 0; id < tok_n_vocab(x.v); id++) {
        int want = k < n && eog[k] == id;
        if (want) k++;
        T_ASSERTF(tok_is_eog(x.v, id) == want, "tok_is_eog(%d) = %d, llama.cpp says %d", id,
                  tok_is_eog(x.v, id), want);
    }
    T_ASSERT(k == n);
    int32_t eot = tok_lookup(x.v, "<end_of_turn>", 13);
    T_ASSERT(eot >= 0 && tok_is_eog(x.v, eot) && tok_type(x.v, eot) == TOK_TYPE_CONTROL);
    free(eog);
    fx_close(&x);
}

/* A 20,000-character mixed text encodes (no timing asserts) and agrees with a short buffer's
 * count. */
static void test_long_text(void) {
    struct fx x;
    fx_open(&x);
    static const char *const parts[] = {
        "The quick brown fox ", "中文文本", " \n",          "😀👍🏽 ",
        "<start_of_turn>",      "    ",     "verylongword", "١٢٣ "};
    size_t cap = 20100, len = 0;
    char *s = malloc(cap);
    unsigned seed = 7;
    while (len < 20000) {
        seed = seed * 1103515245u + 12345u;
        const char *p = parts[(seed >> 16) % 8];
        size_t k = strlen(p);
        if (len + k > 20000) break;
        memcpy(s + len, p, k);
        len += k;
    }
    int32_t *ids = malloc(30000 * sizeof(*ids));
    for (int special = 0; special < 2; special++) {
        int n = tok_encode(x.v, s, len, 1, special, ids, 30000);
        T_ASSERT(n > 1000 && n < 30000);
        int32_t few[4];
        T_ASSERT(tok_encode(x.v, s, len, 1, special, few, 4) == n && few[0] == ids[0]);
        char *back = malloc(len + 1);
        T_ASSERT(tok_decode(x.v, ids + 1, n - 1, special, back, (int)len) == (int)len);
        T_ASSERT(!memcmp(back, s, len));
        free(back);
    }
    /* Pathological: all spaces (many overlapping user-defined runs) and no spaces at all. */
    memset(s, ' ', 20000);
    T_ASSERT(tok_encode(x.v, s, 20000, 1, 1, ids, 30000) > 1);
    memset(s, 'q', 20000);
    T_ASSERT(tok_encode(x.v, s, 20000, 1, 1, ids, 30000) > 1);
    free(s);
    free(ids);
    fx_close(&x);
}

/* Seeded random byte strings (valid or not): encoding never fails, the stream only ever emits
 * valid UTF-8, and decoding with special gives valid-UTF-8 inputs back. (Invalid input may not
 * come back: a lead byte can swallow an escaped space's first byte into a byte-fallback
 * symbol, so the space returns as U+2581's bytes, exactly as in llama.cpp; and a literal
 * U+2581 always decodes to ' '.) */
static void test_random_bytes(void) {
    struct fx x;
    fx_open(&x);
    static const char alphabet[] = "ab <>/\n\t_s\xe2\x96\x81\xc3\xa9\xf0\x9f\x98\x80\x80\xff";
    static const char *const words[] = {"<start_of_turn>", "</s>", "<bos>", "  ", "\n\n", "<td>"};
    static const char *const units[] = {
        "a",    "b",   " ", "<", ">", "\n", "\t", "\xc3\xa9", "\xf0\x9f\x98\x80", "\xe4\xb8\xad",
        "</s>", "<td>"};
    int n_exact = 0;
    uint64_t seed = 0x1234567;
    char s[160], back[640], out[TOK_STREAM_MAX];
    int32_t ids[400];
    for (int iter = 0; iter < 3000; iter++) {
        size_t len = 0;
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        size_t target = (size_t)(seed >> 33) % 96;
        while (len < target) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            unsigned r = (unsigned)(seed >> 33);
            if (iter % 2) { /* odd iterations: whole characters only, so valid UTF-8 */
                const char *u = units[r % 12];
                memcpy(s + len, u, strlen(u));
                len += strlen(u);
            } else if (r % 8 == 0) {
                const char *w = words[(r >> 3) % 6];
                memcpy(s + len, w, strlen(w));
                len += strlen(w);
            } else if (r % 8 == 1) {
                s[len++] = (char)(r >> 8);
            } else {
                s[len++] = alphabet[(r >> 8) % (sizeof(alphabet) - 1)];
            }
        }
        int exact = utf8_valid(s, (int)len) && !memmem(s, len, "\xe2\x96\x81", 3);
        n_exact += exact;
        for (int special = 0; special < 2; special++) {
            int n = tok_encode(x.v, s, len, 0, special, ids, 400);
            T_ASSERTF(n >= 0 && n <= 400, "iteration %d: encode returned %d", iter, n);
            int m = tok_decode(x.v, ids, n, 1, back, sizeof(back));
            T_ASSERTF(!exact || (m == (int)len && !memcmp(back, s, len)),
                      "iteration %d special=%d: bytes do not round-trip", iter, special);
            struct tok_stream st;
            tok_stream_init(&st);
            for (int k = 0; k < n; k++) {
                int w = tok_stream_push(&st, x.v, ids[k], out, sizeof(out));
                T_ASSERT(w >= 0 && utf8_valid(out, w));
            }
            int w = tok_stream_flush(&st, out, sizeof(out));
            T_ASSERT(w >= 0 && utf8_valid(out, w));
        }
    }
    T_ASSERTF(n_exact >= 1500, "only %d inputs were checked for the round trip", n_exact);
    fx_close(&x);
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {
        T_CASE(test_synthetic_spm), T_CASE(test_create_validation), T_CASE(test_synthetic_gemma4),
        T_CASE(test_parity_normal), T_CASE(test_parity_special),    T_CASE(test_decode),
        T_CASE(test_stream),        T_CASE(test_eog_and_specials),  T_CASE(test_long_text),
        T_CASE(test_parity_gemma4), T_CASE(test_random_bytes),      {0}};
    return t_main(argc, argv, cases);
}
