/* Unit tests of scheduler/grammar: GBNF parsing, incremental matching, masks against a
 * brute-force check of every token (small vocabularies and Gemma's), budgets. */
#include "engine/model.h"
#include "engine/tokenizer.h"
#include "scheduler/grammar.h"
#include "scheduler/grammar_int.h" /* no_intern: the plain walk too */
#include "tests/unit/harness.h"

#include <time.h>

static struct gram *compile(const char *text) {
    struct gram *g = NULL;
    char err[256];
    int rc = gram_compile_gbnf(text, strlen(text), NULL, &g, err, sizeof err);
    T_ASSERTF(rc == 0, "compile failed (%d): %s\n%s", rc, err, text);
    return g;
}

static int compile_err(const char *text, char *err, size_t errlen) {
    struct gram *g = NULL;
    int rc = gram_compile_gbnf(text, strlen(text), NULL, &g, err, errlen);
    gram_unref(g);
    return rc;
}

/* 1 when the grammar accepts s whole. */
static int accepts(struct gram *g, struct gram_scratch *x, const char *s) {
    struct gram_match *m = NULL;
    T_ASSERT(gram_match_create(g, x, &m) == 0);
    int rc = gram_match_accept(m, x, (const uint8_t *)s, strlen(s));
    int ok = rc == 0 && gram_match_can_end(m);
    gram_match_destroy(m);
    return ok;
}

static struct gram_scratch *scratch(int max_len) {
    struct gram_scratch *x = NULL;
    T_ASSERT(gram_scratch_create(NULL, max_len, &x) == 0);
    return x;
}

/* A vocabulary of the NUL-terminated strings toks[0..n) (token i is toks[i]). */
static struct gram_vocab *vocab_of(const char *const *toks, int n) {
    int len[64];
    T_ASSERT(n <= 64);
    for (int i = 0; i < n; i++) len[i] = (int)strlen(toks[i]);
    struct gram_vocab *gv = NULL;
    T_ASSERT(gram_vocab_create_raw(n, toks, len, &gv) == 0);
    return gv;
}

static const char *JSONG =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::=\n"
    "  \"{\" ws (\n"
    "            string \":\" ws value\n"
    "    (\",\" ws string \":\" ws value)*\n"
    "  )? \"}\" ws\n"
    "array  ::=\n"
    "  \"[\" ws (\n"
    "            value\n"
    "    (\",\" ws value)*\n"
    "  )? \"]\" ws\n"
    "string ::=\n"
    "  \"\\\"\" (\n"
    "    [^\"\\\\\\x7F\\x00-\\x1F] |\n"
    "    \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\n"
    "  )* \"\\\"\" ws\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static void test_parse_errors(void) {
    char err[256];
    T_ASSERT(compile_err("root ::= foo\n", err, sizeof err) == GRAM_EINVAL);
    T_ASSERT(strstr(err, "foo"));
    T_ASSERT(compile_err("root ::= root \"a\" | \"b\"\n", err, sizeof err) == GRAM_EINVAL);
    T_ASSERT(strstr(err, "left recursion"));
    T_ASSERT(compile_err("root ::= x \"a\"\nx ::= \"\" | root\n", err, sizeof err) == GRAM_EINVAL);
    T_ASSERT(compile_err("root ::= \"abc\n", err, sizeof err) == GRAM_ESYNTAX);
    T_ASSERT(compile_err("root ::= [abc\n", err, sizeof err) == GRAM_ESYNTAX);
    T_ASSERT(compile_err("root ::= (\"a\"\n", err, sizeof err) == GRAM_ESYNTAX);
    T_ASSERT(compile_err("rot ::= \"a\"\n", err, sizeof err) == GRAM_EINVAL);
    T_ASSERT(strstr(err, "root"));
    T_ASSERT(compile_err("root ::= \"a\"{3,2}\n", err, sizeof err) == GRAM_ESYNTAX);
    /* 210 counts of 1,000 copies each (under the size that builds a count from blocks) */
    char big[2400] = "root ::=";
    for (int i = 0; i < 210; i++) strcat(big, " \"b\"{1000}");
    strcat(big, "\n");
    T_ASSERT(compile_err(big, err, sizeof err) == GRAM_EBUDGET);
    T_ASSERT(compile_err("root ::= \"a\"\nroot ::= \"b\"\n", err, sizeof err) == GRAM_ESYNTAX);
    T_ASSERT(compile_err("root ::= \"\\q\" ] \n", err, sizeof err) == GRAM_ESYNTAX);
}

static void test_match_basic(void) {
    struct gram_scratch *x = scratch(64);
    struct gram *g = compile("root ::= \"ab\" [c-e]+ \"!\"? | \"x\"{2,3}\n");
    T_ASSERT(accepts(g, x, "abc"));
    T_ASSERT(accepts(g, x, "abcde!"));
    T_ASSERT(!accepts(g, x, "ab"));
    T_ASSERT(!accepts(g, x, "abf"));
    T_ASSERT(!accepts(g, x, "abc!!"));
    T_ASSERT(accepts(g, x, "xx"));
    T_ASSERT(accepts(g, x, "xxx"));
    T_ASSERT(!accepts(g, x, "x"));
    T_ASSERT(!accepts(g, x, "xxxx"));
    gram_unref(g);
    /* comments, multi-line alternation, groups, {m,} */
    g = compile("# a comment\nroot ::= a (\",\" a){1,}  # trailing\na ::= \"1\"\n  | \"22\"\n");
    T_ASSERT(accepts(g, x, "1,22"));
    T_ASSERT(accepts(g, x, "22,1,1"));
    T_ASSERT(!accepts(g, x, "1"));
    T_ASSERT(!accepts(g, x, "1,"));
    gram_unref(g);
    gram_scratch_destroy(x);
}

/* Counts past 1,024 are built from blocks (grammar_build.c, rep_upto): every length around
 * the bounds and the block edges, and the element count stays small. */
static void test_match_blocks(void) {
    struct gram_scratch *x = scratch(64);
    static const struct {
        const char *text;
        int lo, hi;
    } cases[] = {
        {"root ::= \"a\"{0,1056} \"!\"\n", 0, 1056}, /* 32 blocks of 33, none left over */
        {"root ::= \"a\"{0,1100} \"!\"\n", 0, 1100}, /* 32 of 34, 12 left */
        {"root ::= \"a\"{1030,2100} \"!\"\n", 1030, 2100},
        {"root ::= \"a\"{2000} \"!\"\n", 2000, 2000},
        {"root ::= \"a\"{1500,} \"!\"\n", 1500, 2300},
    };
    char *buf = malloc(2400);
    T_ASSERT(buf);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct gram *g = compile(cases[i].text);
        T_ASSERTF(g->n_el < 2000, "%s: %d elements", cases[i].text, g->n_el);
        for (int n = 0; n <= 2300; n++) {
            if (n > 40 && abs(n - cases[i].lo) > 40 && abs(n - cases[i].hi) > 40 && n % 17)
                continue; /* all lengths near the bounds, every 17th between */
            memset(buf, 'a', (size_t)n);
            buf[n] = '!';
            buf[n + 1] = 0;
            const int want = n >= cases[i].lo && n <= cases[i].hi;
            T_ASSERTF(accepts(g, x, buf) == want, "%s: length %d", cases[i].text, n);
        }
        gram_unref(g);
    }
    free(buf);
    /* a count of a million fits the default element budget */
    struct gram *g = compile("root ::= [a-z]{0,1000000}\n");
    T_ASSERT(accepts(g, x, "abc"));
    gram_unref(g);
    gram_scratch_destroy(x);
}

static void test_match_utf8(void) {
    struct gram_scratch *x = scratch(64);
    struct gram *g = compile("root ::= [^a]* \"a\"\n");
    T_ASSERT(accepts(g, x, "a"));
    T_ASSERT(accepts(g, x, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80" "a")); /* é € 😀 */
    T_ASSERT(!accepts(g, x, "\xc3" "a"));          /* broken sequence */
    T_ASSERT(!accepts(g, x, "ba\xc3\xa9"));
    /* every class is exact UTF-8, the complete one too: no surrogate, no overlong form, nothing
     * past U+10FFFF (each would decode to several U+FFFD and break a length bound) */
    T_ASSERT(accepts(g, x, "\xed\x9f\xbf\xee\x80\x80\xf4\x8f\xbf\xbf" "a")); /* U+D7FF U+E000 U+10FFFF */
    T_ASSERT(!accepts(g, x, "\xed\xa0\x80" "a"));
    T_ASSERT(!accepts(g, x, "\xe0\x80\x80" "a"));
    T_ASSERT(!accepts(g, x, "\xe0\x9f\xbf" "a"));
    T_ASSERT(!accepts(g, x, "\xf0\x80\x80\x80" "a"));
    T_ASSERT(!accepts(g, x, "\xf4\x90\x80\x80" "a"));
    T_ASSERT(!accepts(g, x, "\xc1\xbf" "a"));
    gram_unref(g);
    g = compile("root ::= . \"a\"\n");
    T_ASSERT(accepts(g, x, "\xf0\x9f\x98\x80" "a"));
    T_ASSERT(!accepts(g, x, "\xe0\x80\x80" "a"));
    gram_unref(g);
    /* a class that is not every non-ASCII code point is exact UTF-8 as well */
    g = compile("root ::= [^a\\u00e9]* \"a\"\n");
    T_ASSERT(accepts(g, x, "\xc3\xa8" "a"));
    T_ASSERT(!accepts(g, x, "\xc3\xa9" "a"));
    T_ASSERT(!accepts(g, x, "\xed\xa0\x80" "a"));
    T_ASSERT(!accepts(g, x, "\xc0\x80" "a"));
    gram_unref(g);
    g = compile("root ::= [α-γ\\u00e9] \"\\x41\" .\n");
    T_ASSERT(accepts(g, x, "\xce\xb2" "A\xe2\x82\xac"));
    T_ASSERT(accepts(g, x, "\xc3\xa9" "Az"));
    T_ASSERT(!accepts(g, x, "\xce\xb4" "Az"));
    gram_unref(g);
    gram_scratch_destroy(x);
}

static void test_match_json(void) {
    struct gram_scratch *x = scratch(64);
    struct gram *g = compile(JSONG);
    T_ASSERT(accepts(g, x, "{}"));
    T_ASSERT(accepts(g, x, "{\"a\": [1, 2.5, -3e5, \"x\\n\\u00e9\"], \"b\": {\"c\": null}}"));
    T_ASSERT(!accepts(g, x, "{\"a\": }"));
    T_ASSERT(!accepts(g, x, "{\"a\": 1,}"));
    T_ASSERT(!accepts(g, x, "[1]"));
    T_ASSERT(!accepts(g, x, "{\"a\": \"\x01\"}"));
    gram_unref(g);
    gram_scratch_destroy(x);
}

/* Masks (cached and not) equal a brute-force check of every token, along random paths. */
static void check_masks(struct gram *g, struct gram_vocab *gv, struct gram_scratch *x,
                        int steps, uint64_t seed, int max_tok_checks) {
    const int nv = gram_vocab_n(gv);
    const size_t words = ((size_t)nv + 63) / 64;
    uint64_t *m1 = calloc(words, 8), *m2 = calloc(words, 8), *m3 = calloc(words, 8);
    struct gram_match *m = NULL, *t = NULL;
    T_ASSERT(gram_match_create(g, x, &m) == 0);
    T_ASSERT(gram_match_create(g, x, &t) == 0);
    for (int s = 0; s < steps; s++) {
        int n1 = 0, n2 = 0;
        T_ASSERT(gram_match_mask(m, x, gv, m1, &n1, 0) == 0);
        T_ASSERT(gram_match_mask(m, x, gv, m2, &n2, 1) == 0);
        T_ASSERTF(n1 == n2 && memcmp(m1, m2, words * 8) == 0, "cached %d vs uncached %d", n1, n2);
        int n3 = 0;
        x->no_intern = 1; /* the walk without interned sets gives the same mask */
        T_ASSERT(gram_match_mask(m, x, gv, m3, &n3, 1) == 0);
        x->no_intern = 0;
        T_ASSERTF(n3 == n2 && memcmp(m3, m2, words * 8) == 0, "plain %d vs interned %d", n3, n2);
        int checked = 0;
        for (int id = 0; id < nv; id++) {
            int bit = (int)((m1[id >> 6] >> (id & 63)) & 1);
            if (max_tok_checks && !bit && (t_xorshift64(&seed) % (uint64_t)nv) > (uint64_t)max_tok_checks)
                continue; /* sample rejected tokens on big vocabularies */
            const uint8_t *b;
            int len = gram_vocab_token(gv, id, &b);
            int ok = 0, chk = 0;
            if (len > 0) {
                T_ASSERT(gram_match_copy(t, m) == 0);
                ok = gram_match_accept(t, x, b, (size_t)len) == 0;
                chk = gram_match_check(m, x, b, (size_t)len) == 0; /* m itself unchanged */
            }
            T_ASSERTF(ok == bit, "step %d token %d ('%.*s'): mask %d, brute force %d", s, id, len,
                      (const char *)b, bit, ok);
            T_ASSERTF(chk == bit, "step %d token %d: mask %d, gram_match_check %d", s, id, bit,
                      chk);
            checked++;
        }
        if (n1 == 0) break;
        /* follow a random allowed token */
        int pick = (int)(t_xorshift64(&seed) % (uint64_t)n1), id = 0;
        for (id = 0; id < nv; id++)
            if (((m1[id >> 6] >> (id & 63)) & 1) && pick-- == 0) break;
        const uint8_t *b;
        int len = gram_vocab_token(gv, id, &b);
        T_ASSERT(gram_match_accept(m, x, b, (size_t)len) == 0);
        (void)checked;
    }
    gram_match_destroy(m);
    gram_match_destroy(t);
    free(m1);
    free(m2);
    free(m3);
}

static void test_mask_small_vocab(void) {
    static const char *toks[] = {
        "{", "}", "{\"", "\"", "\":", "\": ", ",", ", \"", "a", "ab", "abc", "b", "\"a", "a\"",
        "1", "12", "-", "-1", ".", ".5", "e", "E+", "true", "tr", "ue", "false", "null", "nul",
        "l", " ", "\n", "\n  ", "[", "]", "[]", "{}", "\\", "\\n", "\\u", "00", "e9", "\xc3",
        "\xa9", "\xc3\xa9", "\xe2\x82", "\xac", "x\"}", "\"}", "\"]", "1,", "\": {\"", "",
        "a", "\"}", /* the same bytes as another token (byte-fallback tokens in Gemma's) */
    };
    struct gram_vocab *gv = vocab_of(toks, (int)(sizeof toks / sizeof toks[0]));
    struct gram_scratch *x = scratch(gram_vocab_max_len(gv));
    const char *grams[] = {
        JSONG,
        "root ::= \"{\\\"a\\\": \" (\"true\" | \"false\" | [0-9]+) \"}\"\n",
        "root ::= ([^\"] | \"\\\\n\")* \"\\\"\"\n",
        "root ::= \"ab\"{1,3} c\nc ::= \"\" | \"c\" c\n",
        /* stacks whose byte sets overlap: the memo shares an advance between two bytes only
         * where every stack takes both or neither ('b' and 'c' differ from 'a' and 'd') */
        "root ::= ([a-c] \"b\"? | [b-e] \"\\\"\" | [^a\"] \"1\" | \"{\" [ab] | [\\x80-\\xff]+)*\n",
    };
    for (int gi = 0; gi < 5; gi++) {
        struct gram *g = compile(grams[gi]);
        for (uint64_t seed = 1; seed <= 6; seed++) check_masks(g, gv, x, 24, seed * 7919 + (uint64_t)gi, 0);
        gram_unref(g);
    }
    /* a count built from blocks of 33: walks long enough to cross block edges */
    struct gram *gb = compile("root ::= (\"a\" | \"b\"){0,1056} \"\\\"\"\n");
    for (uint64_t seed = 1; seed <= 4; seed++) check_masks(gb, gv, x, 80, seed * 104729, 0);
    gram_unref(gb);
    /* next_shorter (subtree skips) against its definition */
    for (int i = 0; i < gv->n; i++) {
        int j = i + 1;
        while (j < gv->n && gv->lcp[j] >= gv->lcp[i]) j++;
        T_ASSERTF(gv->next_shorter[i] == j, "next_shorter[%d] %d, want %d", i,
                  gv->next_shorter[i], j);
    }
    gram_scratch_destroy(x);
    gram_vocab_destroy(gv);
}

/* Stacks deeper than the cache key: tokens that run past the key's frames (the sentinel)
 * are uncertain, among them longer tokens below a trie node after which only the sentinel
 * is left, and the mask finishes them against the real stack. */
static void test_mask_deep_stacks(void) {
    static const char *toks[] = {
        "a", "ab", "b", "b>", "b>}", "b>})]", "ab>", "ab>})]", ">", ">}", ">})]", ">})]x", "}",
        "})", ")", ")]", "]", "[", "(", "{", "<", "[(", "[({<", "<a", "<ab>", "z", "}z", ">x",
        "b\"", "\"", "\">", "\">}",
    };
    struct gram_vocab *gv = vocab_of(toks, (int)(sizeof toks / sizeof toks[0]));
    struct gram_scratch *x = scratch(gram_vocab_max_len(gv));
    struct gram *g = compile("root ::= \"[\" p \"]\"\np ::= \"(\" c \")\"\nc ::= \"{\" t \"}\"\n"
                             "t ::= \"<\" w \">\"\nw ::= [ab] w | [ab] | \"\\\"\" w\n");
    for (uint64_t seed = 1; seed <= 12; seed++) check_masks(g, gv, x, 12, seed * 31, 0);
    gram_unref(g);
    gram_scratch_destroy(x);
    gram_vocab_destroy(gv);
}

/* `<[ID]>` elements: parse, match by the token's bytes only, masks that allow exactly that
 * control token (brute force over a vocabulary holding control tokens and a 0xFF byte). */
static void test_control_tokens(void) {
    char err[256];
    T_ASSERT(compile_err("root ::= <think>\n", err, sizeof err) == GRAM_ESYNTAX);
    T_ASSERT(strstr(err, "token ids"));
    T_ASSERT(compile_err("root ::= <[12\n", err, sizeof err) == GRAM_ESYNTAX);
    T_ASSERT(compile_err("root ::= <[]>\n", err, sizeof err) == GRAM_ESYNTAX);
    T_ASSERT(compile_err("root ::= <[16777216]>\n", err, sizeof err) == GRAM_ESYNTAX);
    uint8_t enc[GRAM_TOK_BYTES];
    gram_token_bytes(0x123456, enc);
    T_ASSERT(enc[0] == 0xff && enc[1] == (0x80 | 0x04) && enc[2] == (0x80 | 0x23) &&
             enc[3] == (0x80 | 0x11) && enc[4] == (0x80 | 0x16));
    /* ids 3, 4, 5 are control tokens; id 6 is the byte-fallback token of 0xFF */
    char ctl[3][GRAM_TOK_BYTES];
    for (int i = 0; i < 3; i++) gram_token_bytes(3 + i, (uint8_t *)ctl[i]);
    const char *toks[] = {"a", "b", "call:", ctl[0], ctl[1], ctl[2], "\xff", "x", "<|", "ab"};
    int len[10];
    for (int i = 0; i < 10; i++) len[i] = i >= 3 && i <= 5 ? GRAM_TOK_BYTES : (int)strlen(toks[i]);
    struct gram_vocab *gv = NULL;
    T_ASSERT(gram_vocab_create_raw(10, toks, len, &gv) == 0);
    struct gram_scratch *x = scratch(gram_vocab_max_len(gv));
    struct gram *g = compile("root ::= <[3]> \"call:\" [ab]+ (<[4]> [ax]* <[4]>)? <[5]>\n");
    /* the grammar's own bytes */
    char s1[64];
    int n = 0;
    memcpy(s1 + n, ctl[0], GRAM_TOK_BYTES), n += GRAM_TOK_BYTES;
    memcpy(s1 + n, "call:ab", 7), n += 7;
    memcpy(s1 + n, ctl[1], GRAM_TOK_BYTES), n += GRAM_TOK_BYTES;
    memcpy(s1 + n, "xa", 2), n += 2;
    memcpy(s1 + n, ctl[1], GRAM_TOK_BYTES), n += GRAM_TOK_BYTES;
    memcpy(s1 + n, ctl[2], GRAM_TOK_BYTES), n += GRAM_TOK_BYTES;
    s1[n] = 0;
    T_ASSERT(accepts(g, x, s1));
    T_ASSERT(!accepts(g, x, "call:ab"));
    /* the first mask is exactly token 3 (not the 0xFF byte token, not the other controls) */
    uint64_t mask[1] = {0};
    int n_allowed = 0;
    struct gram_match *m = NULL;
    T_ASSERT(gram_match_create(g, x, &m) == 0);
    T_ASSERT(gram_match_mask(m, x, gv, mask, &n_allowed, 0) == 0);
    T_ASSERTF(n_allowed == 1 && mask[0] == (1ull << 3), "allowed %d mask %llx", n_allowed,
              (unsigned long long)mask[0]);
    const uint8_t *b;
    T_ASSERT(gram_vocab_token(gv, 6, &b) == 0); /* the 0xFF byte token is left out */
    gram_match_destroy(m);
    for (uint64_t seed = 1; seed <= 8; seed++) check_masks(g, gv, x, 16, seed * 104729, 0);
    gram_unref(g);
    g = compile("root ::= (\"a\" | <[4]>){2,3} \"b\"\n");
    for (uint64_t seed = 1; seed <= 8; seed++) check_masks(g, gv, x, 8, seed * 7, 0);
    gram_unref(g);
    gram_scratch_destroy(x);
    gram_vocab_destroy(gv);
}

/* On a real vocabulary a control token gets its encoded bytes: `<[ID]>` allows it alone. */
static void test_control_tokens_real_vocab(void) {
    struct model *md = t_model_or_skip();
    const int32_t sot = tok_lookup(md->vocab, "<start_of_turn>", 15);
    T_ASSERT(sot >= 0 && tok_type(md->vocab, sot) == TOK_TYPE_CONTROL);
    struct gram_vocab *gv = NULL;
    T_ASSERT(gram_vocab_create(md->vocab, &gv) == 0);
    struct gram_scratch *x = scratch(gram_vocab_max_len(gv));
    char text[64];
    snprintf(text, sizeof text, "root ::= <[%d]> \"model\"\n", (int)sot);
    struct gram *g = compile(text);
    const int nv = gram_vocab_n(gv);
    uint64_t *mask = calloc(((size_t)nv + 63) / 64, 8);
    struct gram_match *m = NULL;
    T_ASSERT(gram_match_create(g, x, &m) == 0);
    int n_allowed = 0;
    T_ASSERT(gram_match_mask(m, x, gv, mask, &n_allowed, 0) == 0);
    T_ASSERT(n_allowed == 1 && ((mask[sot >> 6] >> (sot & 63)) & 1));
    const uint8_t *b;
    int len = gram_vocab_token(gv, sot, &b);
    T_ASSERT(len == GRAM_TOK_BYTES && gram_match_accept(m, x, b, (size_t)len) == 0);
    T_ASSERT(gram_match_mask(m, x, gv, mask, &n_allowed, 0) == 0);
    T_ASSERT(n_allowed > 0 && !((mask[sot >> 6] >> (sot & 63)) & 1));
    gram_match_destroy(m);
    check_masks(g, gv, x, 3, 5, 4096);
    free(mask);
    gram_unref(g);
    gram_scratch_destroy(x);
    gram_vocab_destroy(gv);
    model_free(md);
}

static void test_mask_real_vocab(void) {
    struct model *md = t_model_or_skip();
    struct gram_vocab *gv = NULL;
    T_ASSERT(gram_vocab_create(md->vocab, &gv) == 0);
    struct gram_scratch *x = scratch(gram_vocab_max_len(gv));
    struct gram *g = compile(JSONG);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    check_masks(g, gv, x, 6, 42, 4096);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("  real-vocab json: 6 states checked in %.2f s\n",
           (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec));
    gram_unref(g);
    gram_scratch_destroy(x);
    gram_vocab_destroy(gv);
    model_free(md);
}

/* Inside strings, where a walk takes whole subtrees of the trie at sets whose chains take
 * some byte groups (grammar_mask.c, set_chain): masks against the plain walk and brute force
 * on Gemma's vocabulary, for classes that loop on every group, on some, or on no non-ASCII,
 * for counted characters (the chain is the count: minLength, maxLength, both, and a count
 * that ends inside a token), for families of sets (a pattern searched for inside a string:
 * letters and digits lead to different sets), and for states of several stacks. */
static void test_mask_loops_real_vocab(void) {
    struct model *md = t_model_or_skip();
    struct gram_vocab *gv = NULL;
    T_ASSERT(gram_vocab_create(md->vocab, &gv) == 0);
    struct gram_scratch *x = scratch(gram_vocab_max_len(gv));
    const char *grams[] = {
        "root ::= \"\\\"\" [^\"\\\\\\x7F\\x00-\\x1F]* \"\\\"\"\n",          /* JSON's */
        "root ::= \"\\\"\" [^\"\\\\#\\x00-\\x1F]* \"\\\"\" \"!\"\n",         /* no '#' */
        "root ::= \"\\\"\" [^\"\\u00e9]* \"\\\"\"\n",                        /* no U+00E9 */
        "root ::= \"\\\"\" ([a-zA-Z0-9 ] | \"\\u00e9\")* \"\\\"\"\n",        /* ASCII loops */
        "root ::= \"\\\"\" [^\"\\\\\\x00-\\x1F]{0,40} \"\\\"\"\n",           /* bounded */
        "root ::= \"\\\"\" [^\"\\\\\\x00-\\x1F]{12,} \"\\\"\"\n",            /* minLength */
        "root ::= \"\\\"\" ([^\"\\\\\\x00-\\x1F] | \"\\\\\\\"\"){3,9} \"\\\"\" \"}\"\n", /* short */
        "root ::= \"\\\"\" ([ -!#-\\[\\]-\\U0010FFFF] | \"\\\\t\"){1,255} \"\\\"\"\n", /* a key */
        "root ::= \"\\\"\" [^\"\\\\\\x00-\\x1F]{2} [a-zA-Z0-9]* \"\\\"\"\n", /* narrower */
        "root ::= \"\\\"\" [^\"\\\\]* [0-9] [0-9] \"-\" [0-9] [^\"\\\\]* \"\\\"\"\n", /* search */
        "root ::= \"\\\"\" ([^\"\\\\]+ \"/\")? [^\"\\\\]+ \":\" [^\"\\\\]+ \"\\\"\"\n",
        "root ::= \"\\\"\" [a-z0-9 ]* [0-9] [0-9] [a-z ]* \"\\\"\"\n", /* no punctuation */
        "root ::= \"\\\"\" [a-z ]{5,30} \"\\\"\" | \"\\\"\" [^\"]* \"\\\",\" | \"\\\"\" [a-m]{2} \"x\"\n",
    };
    const int ng = (int)(sizeof grams / sizeof grams[0]);
    for (int gi = 0; gi < ng; gi++) {
        struct gram *g = compile(grams[gi]);
        check_masks(g, gv, x, gi < 4 ? 3 : 5, 1000 + (uint64_t)gi, 4096);
        gram_unref(g);
    }
    gram_scratch_destroy(x);
    gram_vocab_destroy(gv);
    model_free(md);
}

/* Every byte gram_match_forced returns is the only byte the grammar takes there (all 256
 * tried) and the sentence cannot end before it; where it stops, the next position is not
 * forced (two bytes or more, none, or the end allowed), unless max was reached. */
static void check_forced(struct gram *g, struct gram_scratch *x, struct gram_match *m, int max) {
    uint8_t fb[64];
    const int n = gram_match_forced(m, x, fb, max);
    T_ASSERT(n >= 0 && n <= max);
    struct gram_match *c = NULL;
    T_ASSERT(gram_match_create(g, x, &c) == 0);
    T_ASSERT(gram_match_copy(c, m) == 0);
    for (int i = 0;; i++) {
        int ok = 0, only = -1;
        for (int b = 0; b < 256; b++) {
            const uint8_t by = (uint8_t)b;
            if (gram_match_check(c, x, &by, 1) == GRAM_OK) {
                ok++;
                only = b;
            }
        }
        const int forced = ok == 1 && !gram_match_can_end(c);
        if (i == n) {
            T_ASSERT(n == max || !forced);
            break;
        }
        T_ASSERTF(forced && only == fb[i], "byte %d of %d not forced", i, n);
        T_ASSERT(gram_match_accept(c, x, &fb[i], 1) == GRAM_OK);
    }
    gram_match_destroy(c);
}

static void test_forced(void) {
    struct gram_scratch *x = scratch(16);
    struct gram *g = compile("root ::= \"{\\\"key\\\": \" (\"true\" | \"false\" | [0-9]+) \"}\"\n");
    struct gram_match *m = NULL;
    T_ASSERT(gram_match_create(g, x, &m) == 0);
    uint8_t fb[64];
    int n = gram_match_forced(m, x, fb, 64);
    T_ASSERT(n == 8 && !memcmp(fb, "{\"key\": ", 8));
    T_ASSERT(gram_match_forced(m, x, fb, 3) == 3); /* max */
    check_forced(g, x, m, 64);
    T_ASSERT(gram_match_accept(m, x, fb, 8) == GRAM_OK);
    T_ASSERT(gram_match_forced(m, x, fb, 64) == 0); /* t, f or a digit */
    T_ASSERT(gram_match_accept(m, x, (const uint8_t *)"t", 1) == GRAM_OK);
    n = gram_match_forced(m, x, fb, 64);
    T_ASSERT(n == 4 && !memcmp(fb, "rue}", 4)); /* then only the end */
    T_ASSERT(gram_match_accept(m, x, fb, 4) == GRAM_OK && gram_match_done(m));
    T_ASSERT(gram_match_forced(m, x, fb, 64) == 0);
    gram_match_destroy(m);
    gram_unref(g);
    /* JSON: along random valid texts, every state */
    g = compile(JSONG);
    const char *texts[] = {"{\"a\": [1, 2.5e3, true], \"bc\": {\"d\": null}}",
                           "{\"q\": [\"x\\n\", false, {}]}", "{ \"k\" : \"v\" }"};
    for (int t = 0; t < 3; t++) {
        T_ASSERTF(accepts(g, x, texts[t]), "%s", texts[t]);
        T_ASSERT(gram_match_create(g, x, &m) == 0);
        const size_t len = strlen(texts[t]);
        for (size_t i = 0; i <= len; i++) {
            check_forced(g, x, m, 64);
            check_forced(g, x, m, 2);
            if (i < len) T_ASSERT(gram_match_accept(m, x, (const uint8_t *)texts[t] + i, 1) == 0);
        }
        gram_match_destroy(m);
    }
    gram_unref(g);
    gram_scratch_destroy(x);
}

/* Longest match over a vocabulary, and whether a longer token starts with the match. */
static void test_vocab_longest(void) {
    static const char *toks[] = {"a", "ab", "abc", "b", "\"", "\":", "ab", "x"};
    struct gram_vocab *gv = vocab_of(toks, 8);
    int32_t id = -1;
    int ext = -1;
    T_ASSERT(gram_vocab_longest(gv, (const uint8_t *)"abd", 3, &id, &ext) == 2);
    T_ASSERT((id == 1 || id == 6) && ext == 1); /* "abc" starts with "ab" */
    T_ASSERT(gram_vocab_longest(gv, (const uint8_t *)"abc", 3, &id, &ext) == 3);
    T_ASSERT(id == 2 && ext == 0);
    T_ASSERT(gram_vocab_longest(gv, (const uint8_t *)"abc", 2, &id, NULL) == 2);
    T_ASSERT(gram_vocab_longest(gv, (const uint8_t *)"\"}", 2, &id, &ext) == 1);
    T_ASSERT(id == 4 && ext == 1);
    T_ASSERT(gram_vocab_longest(gv, (const uint8_t *)"xa", 2, &id, &ext) == 1);
    T_ASSERT(id == 7 && ext == 0);
    T_ASSERT(gram_vocab_longest(gv, (const uint8_t *)"q", 1, &id, &ext) == 0);
    gram_vocab_destroy(gv);
    /* Gemma's: a text piece wins over the byte token of the same bytes */
    struct model *md = t_model_or_skip();
    T_ASSERT(gram_vocab_create(md->vocab, &gv) == 0);
    int pieces = 0;
    for (int c = 0x21; c < 0x7f; c++) {
        const char b = (char)c;
        const int32_t piece = tok_lookup(md->vocab, &b, 1);
        T_ASSERT(gram_vocab_longest(gv, (const uint8_t *)&b, 1, &id, NULL) == 1);
        if (piece >= 0 && tok_type(md->vocab, piece) != TOK_TYPE_BYTE) {
            T_ASSERTF(tok_type(md->vocab, id) != TOK_TYPE_BYTE, "byte token for '%c'", c);
            pieces++;
        }
    }
    T_ASSERT(pieces > 50);
    gram_vocab_destroy(gv);
    model_free(md);
}

static void test_budget(void) {
    /* an ambiguous grammar whose stack set doubles per byte must fail, not hang */
    struct gram_limits lim;
    gram_limits_default(&lim);
    lim.max_stacks = 64;
    struct gram *g = NULL;
    char err[128];
    const char *t = "root ::= a*\na ::= \"x\" | \"x\" | b\nb ::= \"x\" c\nc ::= \"\" | \"x\"\n";
    T_ASSERT(gram_compile_gbnf(t, strlen(t), &lim, &g, err, sizeof err) == 0);
    struct gram_scratch *x = NULL;
    T_ASSERT(gram_scratch_create(&lim, 8, &x) == 0);
    struct gram_match *m = NULL;
    T_ASSERT(gram_match_create(g, x, &m) == 0);
    int rc = 0;
    for (int i = 0; i < 200 && rc == 0; i++) rc = gram_match_accept(m, x, (const uint8_t *)"x", 1);
    T_ASSERTF(rc == 0 || rc == GRAM_EBUDGET, "rc %d", rc);
    gram_match_destroy(m);
    gram_unref(g);
    gram_scratch_destroy(x);
}

/* The shared cache: same text and limits hit the same grammar; LRU eviction; counters. */
static void test_lru(void) {
    struct gram_lru *c = NULL;
    T_ASSERT(gram_lru_create(2, &c) == 0);
    const char *ta = "root ::= \"a\"\n", *tb = "root ::= \"b\"\n", *tc = "root ::= \"c\"\n";
    struct gram_limits lim;
    gram_limits_default(&lim);
    T_ASSERT(gram_lru_get(c, ta, strlen(ta), &lim) == NULL);
    struct gram *a = compile(ta), *b = compile(tb), *gc = compile(tc);
    T_ASSERT(gram_lru_put(c, ta, strlen(ta), a) == 0);
    struct gram *h = gram_lru_get(c, ta, strlen(ta), &lim);
    T_ASSERT(h == a);
    gram_unref(h);
    struct gram_limits other = lim;
    other.max_stacks = 7; /* compiled under other limits: not the same entry */
    T_ASSERT(gram_lru_get(c, ta, strlen(ta), &other) == NULL);
    T_ASSERT(gram_lru_get(c, ta, strlen(ta) - 1, &lim) == NULL);
    T_ASSERT(gram_lru_put(c, tb, strlen(tb), b) == 0);
    h = gram_lru_get(c, ta, strlen(ta), &lim); /* a is now the most recent */
    T_ASSERT(h == a);
    gram_unref(h);
    T_ASSERT(gram_lru_put(c, tc, strlen(tc), gc) == 0); /* evicts b */
    T_ASSERT(gram_lru_get(c, tb, strlen(tb), &lim) == NULL);
    h = gram_lru_get(c, tc, strlen(tc), &lim);
    T_ASSERT(h == gc);
    gram_unref(h);
    int n;
    long long hits, misses;
    gram_lru_stats(c, &n, &hits, &misses);
    T_ASSERTF(n == 2 && hits == 3 && misses == 4, "n %d hits %lld misses %lld", n, hits, misses);
    gram_lru_destroy(c);
    /* the grammars outlive the cache while referenced */
    struct gram_scratch *x = scratch(8);
    T_ASSERT(accepts(a, x, "a") && accepts(b, x, "b") && accepts(gc, x, "c"));
    gram_scratch_destroy(x);
    gram_unref(a);
    gram_unref(b);
    gram_unref(gc);
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {
        T_CASE(test_parse_errors), T_CASE(test_match_basic), T_CASE(test_match_blocks), T_CASE(test_match_utf8),
        T_CASE(test_match_json), T_CASE(test_mask_small_vocab), T_CASE(test_mask_deep_stacks),
        T_CASE(test_mask_real_vocab),
        T_CASE(test_control_tokens), T_CASE(test_control_tokens_real_vocab),
        T_CASE(test_budget), T_CASE(test_lru), T_CASE(test_forced),
        T_CASE(test_mask_loops_real_vocab),
        T_CASE(test_vocab_longest), {0},
    };
    return t_main(argc, argv, cases);
}
