/*
 * grammar_gbnf — the GBNF compiler: llama.cpp's grammar syntax (rules `name ::= ...`,
 * alternation `|`, groups, `* + ?`, `{m}` `{m,}` `{m,n}`, string literals and character
 * classes with escapes \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH, negated classes, `.` for any
 * code point, `#` comments, `<[ID]>` for one token by id: see gram_token_bytes) into the flat
 * byte-level rule table of grammar_int.h.
 *
 * Repetitions become helper rules (x* -> R ::= x R | empty; x{m,n} -> m copies then a chain
 * of n-m optional rules, so the size is linear in n); a class over code points becomes a
 * byte set when it is ASCII and otherwise a helper rule of UTF-8 byte-range sequences
 * (the classic split of a code-point range into ranges of equal encoded length and equal
 * leading bytes). Left recursion (also through rules that can match nothing) is refused:
 * the matcher expands rules eagerly and would never stop.
 */
#include "scheduler/grammar_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- lexing ------------------------------------------------------------------------- */

static void skip_space(struct bld *b, int newline_ok) {
    while (b->p < b->end) {
        char c = *b->p;
        if (c == ' ' || c == '\t' || c == '\r' || (newline_ok && c == '\n')) {
            b->p++;
        } else if (c == '#') {
            while (b->p < b->end && *b->p != '\n') b->p++;
        } else {
            break;
        }
    }
}

static int is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One (possibly escaped) code point of a literal or class. */
static int read_char(struct bld *b, uint32_t *out) {
    if (b->p >= b->end) return gram_bfail(b, GRAM_ESYNTAX, "unexpected end of grammar");
    const uint8_t *s = (const uint8_t *)b->p;
    if (*s == '\\') {
        if (b->p + 1 >= b->end) return gram_bfail(b, GRAM_ESYNTAX, "unexpected end after '\\'");
        char e = b->p[1];
        b->p += 2;
        int nh = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (nh) {
            uint32_t v = 0;
            for (int i = 0; i < nh; i++) {
                int h = b->p < b->end ? hexval(*b->p) : -1;
                if (h < 0) return gram_bfail(b, GRAM_ESYNTAX, "bad \\%c escape at byte %d", e, gram_at_off(b));
                v = v * 16 + (uint32_t)h;
                b->p++;
            }
            if (v > 0x10ffff) return gram_bfail(b, GRAM_ESYNTAX, "code point out of range at byte %d", gram_at_off(b));
            *out = v;
            return 0;
        }
        switch (e) {
        case 'n': *out = '\n'; break;
        case 'r': *out = '\r'; break;
        case 't': *out = '\t'; break;
        case '0': *out = 0; break;
        default: *out = (uint8_t)e; break;
        }
        return 0;
    }
    /* decode UTF-8 */
    uint32_t c = s[0];
    int n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (!n || b->p + n > b->end) return gram_bfail(b, GRAM_ESYNTAX, "invalid UTF-8 at byte %d", gram_at_off(b));
    if (n > 1) c &= 0x3f >> (n - 1);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return gram_bfail(b, GRAM_ESYNTAX, "invalid UTF-8 at byte %d", gram_at_off(b));
        c = (c << 6) | (s[i] & 0x3f);
    }
    b->p += n;
    *out = c;
    return 0;
}

static int read_uint(struct bld *b, long *out) {
    if (b->p >= b->end || *b->p < '0' || *b->p > '9')
        return gram_bfail(b, GRAM_ESYNTAX, "expected a number at byte %d", gram_at_off(b));
    long v = 0;
    while (b->p < b->end && *b->p >= '0' && *b->p <= '9') {
        v = v * 10 + (*b->p - '0');
        if (v > 1000000) return gram_bfail(b, GRAM_EBUDGET, "repetition count too large at byte %d", gram_at_off(b));
        b->p++;
    }
    *out = v;
    return 0;
}

/* ---- parsing ------------------------------------------------------------------------ */

static int parse_alternates(struct bld *b, int rule, int nested);

/* Move elements [from, n) of rule into a new helper rule; the rule keeps a REF to it. */
static int parse_class(struct bld *b, int rule) {
    b->p++; /* '[' */
    int negate = 0;
    if (b->p < b->end && *b->p == '^') {
        negate = 1;
        b->p++;
    }
    struct cp_range r[128];
    int n = 0;
    while (b->p < b->end && *b->p != ']') {
        uint32_t lo, hi;
        if (read_char(b, &lo)) return -1;
        hi = lo;
        if (b->p + 1 < b->end && *b->p == '-' && b->p[1] != ']') {
            b->p++;
            if (read_char(b, &hi)) return -1;
            if (hi < lo) return gram_bfail(b, GRAM_ESYNTAX, "bad class range at byte %d", gram_at_off(b));
        }
        if (n == 128) return gram_bfail(b, GRAM_EBUDGET, "character class too long at byte %d", gram_at_off(b));
        r[n++] = (struct cp_range){lo, hi};
    }
    if (b->p >= b->end) return gram_bfail(b, GRAM_ESYNTAX, "unterminated character class");
    b->p++;
    if (n == 0 && !negate) return gram_bfail(b, GRAM_ESYNTAX, "empty character class at byte %d", gram_at_off(b));
    return gram_emit_class(b, rule, r, n, negate);
}

/* A sequence of items up to '|', ')' or the end of the rule. */
/* `<[ID]>`: the bytes that stand for token ID (like a string literal: a repetition after it
 * wraps them all). Token text forms such as `<think>` need the vocabulary and are refused. */
static int parse_token(struct bld *b, int rule) {
    const int at = gram_at_off(b);
    b->p++; /* '<' */
    if (b->p >= b->end || *b->p != '[')
        return gram_bfail(b, GRAM_ESYNTAX,
                          "only token ids '<[ID]>' are supported, not token text, at byte %d", at);
    b->p++;
    long id = 0;
    int nd = 0;
    while (b->p < b->end && *b->p >= '0' && *b->p <= '9') {
        id = id * 10 + (*b->p++ - '0');
        if (++nd > 9 || id > GRAM_TOK_MAX_ID)
            return gram_bfail(b, GRAM_ESYNTAX, "token id too large at byte %d", at);
    }
    if (nd == 0 || b->end - b->p < 2 || b->p[0] != ']' || b->p[1] != '>')
        return gram_bfail(b, GRAM_ESYNTAX, "expected '<[ID]>' at byte %d", at);
    b->p += 2;
    uint8_t u[GRAM_TOK_BYTES];
    gram_token_bytes((int32_t)id, u);
    for (int i = 0; i < GRAM_TOK_BYTES; i++)
        if (gram_push_byte(b, rule, u[i])) return -1;
    return 0;
}

static int parse_sequence(struct bld *b, int rule, int nested) {
    int last = -1; /* start of the last item */
    for (;;) {
        skip_space(b, nested);
        if (b->p >= b->end) break;
        char c = *b->p;
        if (c == '|' || c == ')' || c == '\n') break;
        if (c == '"') {
            last = b->rules[rule].n;
            b->p++;
            while (b->p < b->end && *b->p != '"') {
                uint32_t cp;
                if (read_char(b, &cp)) return -1;
                uint8_t u[4];
                int k = gram_utf8_enc(cp, u);
                for (int i = 0; i < k; i++)
                    if (gram_push_byte(b, rule, u[i])) return -1;
            }
            if (b->p >= b->end) return gram_bfail(b, GRAM_ESYNTAX, "unterminated string literal");
            b->p++;
        } else if (c == '[') {
            last = b->rules[rule].n;
            if (parse_class(b, rule)) return -1;
        } else if (c == '<') {
            last = b->rules[rule].n;
            if (parse_token(b, rule)) return -1;
        } else if (c == '.') {
            last = b->rules[rule].n;
            b->p++;
            struct cp_range any = {0, 0x10ffff};
            if (gram_emit_class(b, rule, &any, 1, 0)) return -1;
        } else if (c == '(') {
            last = b->rules[rule].n;
            b->p++;
            if (++b->depth > GRAM_MAX_NESTING)
                return gram_bfail(b, GRAM_EBUDGET, "groups nested too deeply at byte %d", gram_at_off(b));
            int h = gram_new_rule(b, NULL, 0);
            if (h < 0 || parse_alternates(b, h, 1)) return -1;
            b->depth--;
            skip_space(b, 1);
            if (b->p >= b->end || *b->p != ')')
                return gram_bfail(b, GRAM_ESYNTAX, "expected ')' at byte %d", gram_at_off(b));
            b->p++;
            if (gram_push(b, rule, GE_REF, (uint32_t)h)) return -1;
        } else if (is_word(c)) {
            const char *s = b->p;
            while (b->p < b->end && is_word(*b->p)) b->p++;
            const char *save = b->p;
            skip_space(b, 0);
            if (b->end - b->p >= 3 && memcmp(b->p, "::=", 3) == 0)
                return gram_bfail(b, GRAM_ESYNTAX, "missing newline before rule '%.*s' at byte %d",
                             (int)(save - s), s, (int)(s - b->start));
            b->p = save;
            int id = gram_rule_id(b, s, (size_t)(save - s));
            last = b->rules[rule].n;
            if (id < 0 || gram_push(b, rule, GE_REF, (uint32_t)id)) return -1;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0) return gram_bfail(b, GRAM_ESYNTAX, "'%c' without an item at byte %d", c, gram_at_off(b));
            if (gram_wrap_item(b, rule, last)) return -1;
            long lo = 0, hi = -1;
            b->p++;
            if (c == '+') lo = 1;
            else if (c == '?') hi = 1;
            else if (c == '{') {
                skip_space(b, 0);
                if (read_uint(b, &lo)) return -1;
                skip_space(b, 0);
                hi = lo;
                if (b->p < b->end && *b->p == ',') {
                    b->p++;
                    skip_space(b, 0);
                    hi = -1;
                    if (b->p < b->end && *b->p != '}' && read_uint(b, &hi)) return -1;
                    skip_space(b, 0);
                }
                if (b->p >= b->end || *b->p != '}')
                    return gram_bfail(b, GRAM_ESYNTAX, "expected '}' at byte %d", gram_at_off(b));
                b->p++;
            }
            if (gram_repeat(b, rule, lo, hi)) return -1;
            last = -1;
        } else {
            return gram_bfail(b, GRAM_ESYNTAX, "unexpected '%c' at byte %d", c, gram_at_off(b));
        }
    }
    return 0;
}

static int parse_alternates(struct bld *b, int rule, int nested) {
    for (;;) {
        if (parse_sequence(b, rule, nested)) return -1;
        if (!nested && b->p < b->end && *b->p == '\n') {
            /* a top-level rule goes on when its next line starts with '|' */
            const char *save = b->p;
            skip_space(b, 1);
            if (b->p >= b->end || *b->p != '|') b->p = save;
        }
        if (b->p < b->end && *b->p == '|') {
            b->p++;
            if (gram_push(b, rule, GE_ALT, 0)) return -1;
            skip_space(b, 1);
            continue;
        }
        return gram_push(b, rule, GE_END, 0);
    }
}

static int parse_rules(struct bld *b) {
    for (;;) {
        skip_space(b, 1);
        if (b->p >= b->end) return 0;
        const char *s = b->p;
        while (b->p < b->end && is_word(*b->p)) b->p++;
        if (b->p == s) return gram_bfail(b, GRAM_ESYNTAX, "expected a rule name at byte %d", gram_at_off(b));
        int id = gram_rule_id(b, s, (size_t)(b->p - s));
        if (id < 0) return -1;
        if (b->defined[id])
            return gram_bfail(b, GRAM_ESYNTAX, "rule '%.*s' defined twice", (int)(b->p - s), s);
        b->defined[id] = 1;
        skip_space(b, 0);
        if (b->end - b->p < 3 || memcmp(b->p, "::=", 3) != 0)
            return gram_bfail(b, GRAM_ESYNTAX, "expected '::=' at byte %d", gram_at_off(b));
        b->p += 3;
        skip_space(b, 1);
        if (parse_alternates(b, id, 0)) return -1;
        if (b->p < b->end && *b->p != '\n')
            return gram_bfail(b, GRAM_ESYNTAX, "unexpected '%c' at byte %d", *b->p, gram_at_off(b));
    }
}

int gram_compile_gbnf(const char *text, size_t len, const struct gram_limits *lim,
                      struct gram **out, char *err, size_t errlen) {
    *out = NULL;
    if (err && errlen) err[0] = 0;
    struct gram_limits dl;
    if (!lim) {
        gram_limits_default(&dl);
        lim = &dl;
    }
    struct bld b = {0};
    memset(b.single, -1, sizeof b.single);
    b.max_elems = lim->max_elems;
    b.p = b.start = text;
    b.end = text + len;
    b.err = err;
    b.errlen = errlen;
    struct gram *g = NULL;
    if (parse_rules(&b)) goto fail_bld;
    int root = -1;
    for (int r = 0; r < b.n_rules; r++)
        if (b.names[r] && strcmp(b.names[r], "root") == 0) root = r;
    if (root < 0) {
        gram_bfail(&b, GRAM_EINVAL, "the grammar has no 'root' rule");
        goto fail_bld;
    }
    if (gram_check(&b)) goto fail_bld;
    g = calloc(1, sizeof(*g));
    if (!g) goto fail_nomem;
    g->refs = 1;
    static uint64_t serials;
    g->serial = __atomic_add_fetch(&serials, 1, __ATOMIC_RELAXED);
    g->lim = *lim;
    g->n_rules = b.n_rules;
    g->root = root;
    g->rule_start = malloc((size_t)b.n_rules * sizeof(int32_t));
    int total = 0;
    for (int r = 0; r < b.n_rules; r++) total += b.rules[r].n;
    g->el = malloc((size_t)(total + 1) * sizeof(*g->el));
    g->sets = malloc((size_t)(b.n_sets + 1) * sizeof(*g->sets));
    if (!g->rule_start || !g->el || !g->sets) goto fail_nomem;
    for (int r = 0; r < b.n_rules; r++) {
        g->rule_start[r] = g->n_el;
        memcpy(g->el + g->n_el, b.rules[r].e, (size_t)b.rules[r].n * sizeof(*g->el));
        g->n_el += b.rules[r].n;
    }
    if (b.n_sets) memcpy(g->sets, b.sets, (size_t)b.n_sets * sizeof(*g->sets));
    /* each rule's alternatives, so expanding a rule need not scan its elements */
    int n_alts = b.n_rules;
    for (int i = 0; i < g->n_el; i++) n_alts += g->el[i].type == GE_ALT;
    g->alt_first = malloc((size_t)(b.n_rules + 1) * sizeof(int32_t));
    g->alts = malloc((size_t)(n_alts + 1) * sizeof(int32_t));
    if (!g->alt_first || !g->alts) goto fail_nomem;
    int na = 0;
    for (int r = 0; r < b.n_rules; r++) {
        g->alt_first[r] = na;
        int32_t a = g->rule_start[r];
        g->alts[na++] = a;
        for (;; a++) {
            if (g->el[a].type == GE_END) break;
            if (g->el[a].type == GE_ALT) g->alts[na++] = a + 1;
        }
    }
    g->alt_first[b.n_rules] = na;
    g->n_sets = b.n_sets;
    pthread_mutex_init(&g->lock, NULL);
    gram_bld_free(&b);
    *out = g;
    return GRAM_OK;
fail_nomem:
    gram_bfail(&b, GRAM_ENOMEM, "out of memory");
    if (g) {
        free(g->alt_first);
        free(g->alts);
        free(g->rule_start);
        free(g->el);
        free(g->sets);
        free(g);
    }
fail_bld:
    gram_bld_free(&b);
    return b.status ? b.status : GRAM_EINVAL;
}
