/*
 * grammar_gbnf — the GBNF compiler: llama.cpp's grammar syntax (rules `name ::= ...`,
 * alternation `|`, groups, `* + ?`, `{m}` `{m,}` `{m,n}`, string literals and character
 * classes with escapes \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH, negated classes, `.` for any
 * code point, `#` comments) into the flat byte-level rule table of grammar_int.h.
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

#define GRAM_MAX_NESTING 256 /* parenthesised groups inside one another */

struct bvec {
    struct gram_elem *e;
    int n, cap;
};

struct bld {
    struct bvec *rules;
    char **names;          /* [n_rules] NULL for helper rules */
    uint8_t *defined;      /* [n_rules] */
    int n_rules, cap_rules;
    struct gram_set *sets;
    int n_sets, cap_sets;
    int single[256];       /* set index of each one-byte set, or -1 */
    long long n_elems;
    int max_elems;
    int *ht;               /* name hash: rule id + 1, 0 = empty */
    int *set_ht;           /* set hash: set index + 1, 0 = empty */
    int set_ht_cap;
    int ht_cap;
    const char *p, *end, *start;
    int depth;             /* nested groups */
    char *err;
    size_t errlen;
    int status;
};

static int bfail(struct bld *b, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bfail(struct bld *b, int status, const char *fmt, ...) {
    if (b->status) return -1;
    b->status = status;
    if (b->err && b->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->err, b->errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int at_off(const struct bld *b) { return (int)(b->p - b->start); }

/* ---- builder ------------------------------------------------------------------------ */

static int push(struct bld *b, int rule, int type, uint32_t v) {
    if (++b->n_elems > b->max_elems)
        return bfail(b, GRAM_EBUDGET, "grammar too large (more than %d elements)", b->max_elems);
    struct bvec *r = &b->rules[rule];
    if (r->n == r->cap) {
        int nc = r->cap ? r->cap * 2 : 8;
        void *ne = realloc(r->e, (size_t)nc * sizeof(*r->e));
        if (!ne) return bfail(b, GRAM_ENOMEM, "out of memory");
        r->e = ne;
        r->cap = nc;
    }
    r->e[r->n].type = (uint32_t)type;
    r->e[r->n].v = v;
    r->n++;
    return 0;
}

static int new_rule(struct bld *b, const char *name, size_t len) {
    if (b->n_rules == b->cap_rules) {
        int nc = b->cap_rules ? b->cap_rules * 2 : 64;
        void *nr = realloc(b->rules, (size_t)nc * sizeof(*b->rules));
        if (nr) b->rules = nr;
        void *nn = realloc(b->names, (size_t)nc * sizeof(*b->names));
        if (nn) b->names = nn;
        void *nd = realloc(b->defined, (size_t)nc);
        if (nd) b->defined = nd;
        if (!nr || !nn || !nd) return bfail(b, GRAM_ENOMEM, "out of memory");
        b->cap_rules = nc;
    }
    int id = b->n_rules++;
    memset(&b->rules[id], 0, sizeof(b->rules[id]));
    b->defined[id] = name ? 0 : 1;
    b->names[id] = NULL;
    if (name) {
        b->names[id] = strndup(name, len);
        if (!b->names[id]) return bfail(b, GRAM_ENOMEM, "out of memory");
    }
    return id;
}

static uint64_t hash_name(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

/* The rule named s[0..n), created (undefined) on first sight. */
static int rule_id(struct bld *b, const char *s, size_t n) {
    if (b->ht_cap == 0 || (b->n_rules + 1) * 2 > b->ht_cap) {
        int nc = b->ht_cap ? b->ht_cap * 2 : 256;
        int *nh = calloc((size_t)nc, sizeof(int));
        if (!nh) return bfail(b, GRAM_ENOMEM, "out of memory");
        for (int r = 0; r < b->n_rules; r++) {
            if (!b->names[r]) continue;
            uint64_t h = hash_name(b->names[r], strlen(b->names[r]));
            int i = (int)(h & (uint64_t)(nc - 1));
            while (nh[i]) i = (i + 1) & (nc - 1);
            nh[i] = r + 1;
        }
        free(b->ht);
        b->ht = nh;
        b->ht_cap = nc;
    }
    uint64_t h = hash_name(s, n);
    int i = (int)(h & (uint64_t)(b->ht_cap - 1));
    while (b->ht[i]) {
        const char *nm = b->names[b->ht[i] - 1];
        if (strlen(nm) == n && memcmp(nm, s, n) == 0) return b->ht[i] - 1;
        i = (i + 1) & (b->ht_cap - 1);
    }
    int id = new_rule(b, s, n);
    if (id < 0) return -1;
    b->ht[i] = id + 1;
    return id;
}

static uint64_t set_hash(const struct gram_set *s) {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 4; i++) h = (h ^ s->w[i]) * 0x100000001b3ull + (h >> 29);
    return h;
}

/* Index of set s in the table, added when new (hash lookup: large grammars have thousands). */
static int add_set(struct bld *b, const struct gram_set *s) {
    int n1 = 0;
    for (int i = 0; i < 4; i++) n1 += __builtin_popcountll(s->w[i]);
    int one = -1;
    if (n1 == 1)
        for (int i = 0; i < 4; i++)
            if (s->w[i]) one = i * 64 + __builtin_ctzll(s->w[i]);
    if (n1 == 1 && b->single[one] >= 0) return b->single[one];
    if ((b->n_sets + 1) * 2 > b->set_ht_cap) {
        int nc = b->set_ht_cap ? b->set_ht_cap * 2 : 256;
        int *nh = calloc((size_t)nc, sizeof(int));
        if (!nh) return bfail(b, GRAM_ENOMEM, "out of memory");
        for (int k = 0; k < b->n_sets; k++) {
            int i = (int)(set_hash(&b->sets[k]) & (uint64_t)(nc - 1));
            while (nh[i]) i = (i + 1) & (nc - 1);
            nh[i] = k + 1;
        }
        free(b->set_ht);
        b->set_ht = nh;
        b->set_ht_cap = nc;
    }
    int i = (int)(set_hash(s) & (uint64_t)(b->set_ht_cap - 1));
    while (b->set_ht[i]) {
        if (memcmp(&b->sets[b->set_ht[i] - 1], s, sizeof(*s)) == 0) return b->set_ht[i] - 1;
        i = (i + 1) & (b->set_ht_cap - 1);
    }
    if (b->n_sets == b->cap_sets) {
        int nc = b->cap_sets ? b->cap_sets * 2 : 64;
        void *ns = realloc(b->sets, (size_t)nc * sizeof(*b->sets));
        if (!ns) return bfail(b, GRAM_ENOMEM, "out of memory");
        b->sets = ns;
        b->cap_sets = nc;
    }
    b->sets[b->n_sets] = *s;
    b->set_ht[i] = b->n_sets + 1;
    if (n1 == 1) b->single[one] = b->n_sets;
    return b->n_sets++;
}

static int push_byte(struct bld *b, int rule, unsigned c) {
    struct gram_set s = {{0}};
    s.w[c >> 6] |= 1ull << (c & 63);
    int si = add_set(b, &s);
    return si < 0 ? -1 : push(b, rule, GE_SET, (uint32_t)si);
}

static int push_range(struct bld *b, int rule, unsigned lo, unsigned hi) {
    struct gram_set s = {{0}};
    for (unsigned c = lo; c <= hi; c++) s.w[c >> 6] |= 1ull << (c & 63);
    int si = add_set(b, &s);
    return si < 0 ? -1 : push(b, rule, GE_SET, (uint32_t)si);
}

/* ---- code-point classes ------------------------------------------------------------- */

struct cp_range {
    uint32_t lo, hi;
};

static int utf8_enc(uint32_t c, uint8_t *o) {
    if (c < 0x80) { o[0] = (uint8_t)c; return 1; }
    if (c < 0x800) { o[0] = (uint8_t)(0xc0 | (c >> 6)); o[1] = (uint8_t)(0x80 | (c & 63)); return 2; }
    if (c < 0x10000) {
        o[0] = (uint8_t)(0xe0 | (c >> 12));
        o[1] = (uint8_t)(0x80 | ((c >> 6) & 63));
        o[2] = (uint8_t)(0x80 | (c & 63));
        return 3;
    }
    o[0] = (uint8_t)(0xf0 | (c >> 18));
    o[1] = (uint8_t)(0x80 | ((c >> 12) & 63));
    o[2] = (uint8_t)(0x80 | ((c >> 6) & 63));
    o[3] = (uint8_t)(0x80 | (c & 63));
    return 4;
}

/* Alternatives of byte-range sequences for code points lo..hi (>= 0x80), appended to rule
 * (each alternative preceded by ALT when the rule already has one). */
static int utf8_split(struct bld *b, int rule, uint32_t lo, uint32_t hi) {
    static const uint32_t lim[] = {0x7f, 0x7ff, 0xffff};
    for (int i = 0; i < 3; i++)
        if (lo <= lim[i] && hi > lim[i])
            return utf8_split(b, rule, lo, lim[i]) || utf8_split(b, rule, lim[i] + 1, hi) ? -1 : 0;
    for (int i = 1; i < 4; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0)
                return utf8_split(b, rule, lo, lo | m) || utf8_split(b, rule, (lo | m) + 1, hi) ? -1 : 0;
            if ((hi & m) != m)
                return utf8_split(b, rule, lo, (hi & ~m) - 1) || utf8_split(b, rule, hi & ~m, hi) ? -1 : 0;
        }
    }
    uint8_t a[4], z[4];
    int n = utf8_enc(lo, a);
    utf8_enc(hi, z);
    if (b->rules[rule].n > 0 && push(b, rule, GE_ALT, 0)) return -1;
    for (int k = 0; k < n; k++)
        if (push_range(b, rule, a[k], z[k])) return -1;
    return 0;
}

static int cmp_range(const void *x, const void *y) {
    const struct cp_range *a = x, *c = y;
    return a->lo < c->lo ? -1 : a->lo > c->lo;
}

/* Element(s) for a class: one SET for ASCII, else a REF to a helper rule. */
static int emit_class(struct bld *b, int rule, struct cp_range *r, int n, int negate) {
    qsort(r, (size_t)n, sizeof(*r), cmp_range);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && r[i].lo <= r[m - 1].hi + 1) {
            if (r[i].hi > r[m - 1].hi) r[m - 1].hi = r[i].hi;
        } else {
            r[m++] = r[i];
        }
    }
    n = m;
    struct cp_range *u = r, tmp[130];
    if (negate) {
        /* complement over [0, 0x10ffff] minus the surrogates */
        int k = 0;
        uint32_t next = 0;
        for (int i = 0; i < n && k < 128; i++) {
            if (r[i].lo > next) tmp[k++] = (struct cp_range){next, r[i].lo - 1};
            next = r[i].hi + 1;
        }
        if (next <= 0x10ffff) tmp[k++] = (struct cp_range){next, 0x10ffff};
        u = tmp;
        n = k;
    }
    struct gram_set ascii = {{0}};
    int has_ascii = 0, has_multi = 0;
    for (int i = 0; i < n; i++) {
        for (uint32_t c = u[i].lo; c <= u[i].hi && c < 0x80; c++) {
            ascii.w[c >> 6] |= 1ull << (c & 63);
            has_ascii = 1;
        }
        if (u[i].hi >= 0x80) has_multi = 1;
    }
    if (!has_multi) {
        if (!has_ascii) return bfail(b, GRAM_ESYNTAX, "empty character class at byte %d", at_off(b));
        int si = add_set(b, &ascii);
        return si < 0 ? -1 : push(b, rule, GE_SET, (uint32_t)si);
    }
    int h = new_rule(b, NULL, 0);
    if (h < 0) return -1;
    if (has_ascii) {
        int si = add_set(b, &ascii);
        if (si < 0 || push(b, h, GE_SET, (uint32_t)si)) return -1;
    }
    /* Every non-ASCII code point (negated classes such as a JSON string's): three
     * alternatives by sequence length instead of eight exact ones. The looser form also takes
     * overlong forms and surrogates; text is decoded with invalid UTF-8 replaced (U+FFFD),
     * and no valid UTF-8 string is accepted that the exact form would reject. */
    int all = 0;
    for (int i = 0; i < n; i++)
        if (u[i].lo <= 0x80 && u[i].hi >= 0x10ffff) all = 1;
    for (int i = 0; i + 1 < n && !all; i++)
        if (u[i].lo <= 0x80 && u[i].hi >= 0xd7ff && u[i + 1].lo <= 0xe000 && u[i + 1].hi >= 0x10ffff)
            all = 1;
    if (all) {
        static const uint8_t lead[3][2] = {{0xc2, 0xdf}, {0xe0, 0xef}, {0xf0, 0xf4}};
        for (int k = 0; k < 3; k++) {
            if (b->rules[h].n > 0 && push(b, h, GE_ALT, 0)) return -1;
            if (push_range(b, h, lead[k][0], lead[k][1])) return -1;
            for (int c = 0; c <= k; c++)
                if (push_range(b, h, 0x80, 0xbf)) return -1;
        }
        if (push(b, h, GE_END, 0)) return -1;
        return push(b, rule, GE_REF, (uint32_t)h);
    }
    for (int i = 0; i < n; i++) {
        uint32_t lo = u[i].lo < 0x80 ? 0x80 : u[i].lo, hi = u[i].hi;
        if (hi < 0x80) continue;
        /* skip the surrogates */
        if (lo <= 0xdfff && hi >= 0xd800) {
            if (lo < 0xd800 && utf8_split(b, h, lo, 0xd7ff)) return -1;
            if (hi > 0xdfff && utf8_split(b, h, 0xe000, hi)) return -1;
        } else if (utf8_split(b, h, lo, hi)) {
            return -1;
        }
    }
    if (push(b, h, GE_END, 0)) return -1;
    return push(b, rule, GE_REF, (uint32_t)h);
}

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
    if (b->p >= b->end) return bfail(b, GRAM_ESYNTAX, "unexpected end of grammar");
    const uint8_t *s = (const uint8_t *)b->p;
    if (*s == '\\') {
        if (b->p + 1 >= b->end) return bfail(b, GRAM_ESYNTAX, "unexpected end after '\\'");
        char e = b->p[1];
        b->p += 2;
        int nh = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (nh) {
            uint32_t v = 0;
            for (int i = 0; i < nh; i++) {
                int h = b->p < b->end ? hexval(*b->p) : -1;
                if (h < 0) return bfail(b, GRAM_ESYNTAX, "bad \\%c escape at byte %d", e, at_off(b));
                v = v * 16 + (uint32_t)h;
                b->p++;
            }
            if (v > 0x10ffff) return bfail(b, GRAM_ESYNTAX, "code point out of range at byte %d", at_off(b));
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
    if (!n || b->p + n > b->end) return bfail(b, GRAM_ESYNTAX, "invalid UTF-8 at byte %d", at_off(b));
    if (n > 1) c &= 0x3f >> (n - 1);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return bfail(b, GRAM_ESYNTAX, "invalid UTF-8 at byte %d", at_off(b));
        c = (c << 6) | (s[i] & 0x3f);
    }
    b->p += n;
    *out = c;
    return 0;
}

static int read_uint(struct bld *b, long *out) {
    if (b->p >= b->end || *b->p < '0' || *b->p > '9')
        return bfail(b, GRAM_ESYNTAX, "expected a number at byte %d", at_off(b));
    long v = 0;
    while (b->p < b->end && *b->p >= '0' && *b->p <= '9') {
        v = v * 10 + (*b->p - '0');
        if (v > 1000000) return bfail(b, GRAM_EBUDGET, "repetition count too large at byte %d", at_off(b));
        b->p++;
    }
    *out = v;
    return 0;
}

/* ---- parsing ------------------------------------------------------------------------ */

static int parse_alternates(struct bld *b, int rule, int nested);

/* Move elements [from, n) of rule into a new helper rule; the rule keeps a REF to it. */
static int wrap_item(struct bld *b, int rule, int from) {
    struct bvec *r = &b->rules[rule];
    if (r->n - from == 1 && r->e[from].type != GE_ALT) return 0;
    int h = new_rule(b, NULL, 0);
    if (h < 0) return -1;
    r = &b->rules[rule];
    for (int i = from; i < r->n; i++)
        if (push(b, h, (int)r->e[i].type, r->e[i].v)) return -1;
    if (push(b, h, GE_END, 0)) return -1;
    b->n_elems -= r->n - from;
    r->n = from;
    return push(b, rule, GE_REF, (uint32_t)h);
}

/* R ::= x R | empty (star) or R ::= x | empty (opt); returns R. */
static int helper_rep(struct bld *b, struct gram_elem x, int star, int inner) {
    int h = new_rule(b, NULL, 0);
    if (h < 0) return -1;
    if (push(b, h, (int)x.type, x.v)) return -1;
    if (star && push(b, h, GE_REF, (uint32_t)h)) return -1;
    if (inner >= 0 && push(b, h, GE_REF, (uint32_t)inner)) return -1;
    if (push(b, h, GE_ALT, 0) || push(b, h, GE_END, 0)) return -1;
    return h;
}

/* Apply x{lo,hi} (hi < 0: unbounded) to the single element at the end of rule. */
static int repeat(struct bld *b, int rule, long lo, long hi) {
    struct bvec *r = &b->rules[rule];
    struct gram_elem x = r->e[r->n - 1];
    r->n--;
    b->n_elems--;
    if (hi >= 0 && hi < lo) return bfail(b, GRAM_ESYNTAX, "repetition {%ld,%ld} has max < min", lo, hi);
    if ((long long)lo + (hi < 0 ? 2 : 3 * (hi - lo)) > b->max_elems)
        return bfail(b, GRAM_EBUDGET, "grammar too large (more than %d elements)", b->max_elems);
    for (long i = 0; i < lo; i++)
        if (push(b, rule, (int)x.type, x.v)) return -1;
    if (hi < 0) {
        int h = helper_rep(b, x, 1, -1);
        return h < 0 ? -1 : push(b, rule, GE_REF, (uint32_t)h);
    }
    int last = -1;
    for (long i = lo; i < hi; i++) {
        last = helper_rep(b, x, 0, last);
        if (last < 0) return -1;
    }
    return last >= 0 ? push(b, rule, GE_REF, (uint32_t)last) : 0;
}

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
            if (hi < lo) return bfail(b, GRAM_ESYNTAX, "bad class range at byte %d", at_off(b));
        }
        if (n == 128) return bfail(b, GRAM_EBUDGET, "character class too long at byte %d", at_off(b));
        r[n++] = (struct cp_range){lo, hi};
    }
    if (b->p >= b->end) return bfail(b, GRAM_ESYNTAX, "unterminated character class");
    b->p++;
    if (n == 0 && !negate) return bfail(b, GRAM_ESYNTAX, "empty character class at byte %d", at_off(b));
    return emit_class(b, rule, r, n, negate);
}

/* A sequence of items up to '|', ')' or the end of the rule. */
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
                int k = utf8_enc(cp, u);
                for (int i = 0; i < k; i++)
                    if (push_byte(b, rule, u[i])) return -1;
            }
            if (b->p >= b->end) return bfail(b, GRAM_ESYNTAX, "unterminated string literal");
            b->p++;
        } else if (c == '[') {
            last = b->rules[rule].n;
            if (parse_class(b, rule)) return -1;
        } else if (c == '.') {
            last = b->rules[rule].n;
            b->p++;
            struct cp_range any = {0, 0x10ffff};
            if (emit_class(b, rule, &any, 1, 0)) return -1;
        } else if (c == '(') {
            last = b->rules[rule].n;
            b->p++;
            if (++b->depth > GRAM_MAX_NESTING)
                return bfail(b, GRAM_EBUDGET, "groups nested too deeply at byte %d", at_off(b));
            int h = new_rule(b, NULL, 0);
            if (h < 0 || parse_alternates(b, h, 1)) return -1;
            b->depth--;
            skip_space(b, 1);
            if (b->p >= b->end || *b->p != ')')
                return bfail(b, GRAM_ESYNTAX, "expected ')' at byte %d", at_off(b));
            b->p++;
            if (push(b, rule, GE_REF, (uint32_t)h)) return -1;
        } else if (is_word(c)) {
            const char *s = b->p;
            while (b->p < b->end && is_word(*b->p)) b->p++;
            const char *save = b->p;
            skip_space(b, 0);
            if (b->end - b->p >= 3 && memcmp(b->p, "::=", 3) == 0)
                return bfail(b, GRAM_ESYNTAX, "missing newline before rule '%.*s' at byte %d",
                             (int)(save - s), s, (int)(s - b->start));
            b->p = save;
            int id = rule_id(b, s, (size_t)(save - s));
            last = b->rules[rule].n;
            if (id < 0 || push(b, rule, GE_REF, (uint32_t)id)) return -1;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0) return bfail(b, GRAM_ESYNTAX, "'%c' without an item at byte %d", c, at_off(b));
            if (wrap_item(b, rule, last)) return -1;
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
                    return bfail(b, GRAM_ESYNTAX, "expected '}' at byte %d", at_off(b));
                b->p++;
            }
            if (repeat(b, rule, lo, hi)) return -1;
            last = -1;
        } else {
            return bfail(b, GRAM_ESYNTAX, "unexpected '%c' at byte %d", c, at_off(b));
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
            if (push(b, rule, GE_ALT, 0)) return -1;
            skip_space(b, 1);
            continue;
        }
        return push(b, rule, GE_END, 0);
    }
}

static int parse_rules(struct bld *b) {
    for (;;) {
        skip_space(b, 1);
        if (b->p >= b->end) return 0;
        const char *s = b->p;
        while (b->p < b->end && is_word(*b->p)) b->p++;
        if (b->p == s) return bfail(b, GRAM_ESYNTAX, "expected a rule name at byte %d", at_off(b));
        int id = rule_id(b, s, (size_t)(b->p - s));
        if (id < 0) return -1;
        if (b->defined[id])
            return bfail(b, GRAM_ESYNTAX, "rule '%.*s' defined twice", (int)(b->p - s), s);
        b->defined[id] = 1;
        skip_space(b, 0);
        if (b->end - b->p < 3 || memcmp(b->p, "::=", 3) != 0)
            return bfail(b, GRAM_ESYNTAX, "expected '::=' at byte %d", at_off(b));
        b->p += 3;
        skip_space(b, 1);
        if (parse_alternates(b, id, 0)) return -1;
        if (b->p < b->end && *b->p != '\n')
            return bfail(b, GRAM_ESYNTAX, "unexpected '%c' at byte %d", *b->p, at_off(b));
    }
}

/* ---- checks and flattening ---------------------------------------------------------- */

/* Refuses undefined rules and left recursion (a rule reachable from itself through a
 * prefix of elements that can all match nothing). */
static int check(struct bld *b) {
    int n = b->n_rules;
    for (int r = 0; r < n; r++)
        if (!b->defined[r])
            return bfail(b, GRAM_EINVAL, "undefined rule '%s'", b->names[r] ? b->names[r] : "?");
    uint8_t *nullable = calloc((size_t)n, 1);
    uint8_t *color = calloc((size_t)n, 1);
    int *stk = malloc((size_t)n * 3 * sizeof(int));
    if (!nullable || !color || !stk) {
        free(nullable);
        free(color);
        free(stk);
        return bfail(b, GRAM_ENOMEM, "out of memory");
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < n; r++) {
            if (nullable[r]) continue;
            const struct bvec *v = &b->rules[r];
            int ok = 1;
            for (int i = 0; i < v->n; i++) {
                struct gram_elem e = v->e[i];
                if (e.type == GE_ALT || e.type == GE_END) {
                    if (ok) {
                        nullable[r] = 1;
                        changed = 1;
                        break;
                    }
                    ok = 1;
                } else if (e.type == GE_SET || !nullable[e.v]) {
                    ok = 0;
                }
            }
        }
    }
    int rc = 0;
    /* iterative DFS over "may start with" edges; stk holds (rule, next element, whether
     * that element is preceded only by nullable ones in its alternative) */
    for (int r0 = 0; r0 < n && !rc; r0++) {
        if (color[r0]) continue;
        int sp = 0;
        stk[sp++] = r0;
        stk[sp++] = 0;
        stk[sp++] = 1;
        color[r0] = 1;
        while (sp > 0 && !rc) {
            int r = stk[sp - 3], i = stk[sp - 2], alive = stk[sp - 1];
            const struct bvec *v = &b->rules[r];
            int pushed = 0;
            for (; i < v->n; i++) {
                struct gram_elem e = v->e[i];
                if (e.type == GE_ALT || e.type == GE_END) { alive = 1; continue; }
                if (!alive) continue;
                if (e.type == GE_SET) { alive = 0; continue; }
                int child = (int)e.v;
                if (!nullable[child]) alive = 0;
                if (color[child] == 1) {
                    rc = bfail(b, GRAM_EINVAL, "left recursion through rule '%s'",
                               b->names[child] ? b->names[child]
                               : b->names[r] ? b->names[r] : "(group)");
                    break;
                }
                if (color[child] == 0) {
                    stk[sp - 2] = i + 1;
                    stk[sp - 1] = alive;
                    color[child] = 1;
                    stk[sp++] = child;
                    stk[sp++] = 0;
                    stk[sp++] = 1;
                    pushed = 1;
                    break;
                }
            }
            if (!pushed && !rc) {
                color[r] = 2;
                sp -= 3;
            }
        }
    }
    free(nullable);
    free(color);
    free(stk);
    return rc;
}

static void bld_free(struct bld *b) {
    for (int r = 0; r < b->n_rules; r++) {
        free(b->rules[r].e);
        free(b->names[r]);
    }
    free(b->rules);
    free(b->names);
    free(b->defined);
    free(b->sets);
    free(b->ht);
    free(b->set_ht);
}

void gram_limits_default(struct gram_limits *l) {
    l->max_elems = GRAM_DEFAULT_MAX_ELEMS;
    l->max_stacks = GRAM_DEFAULT_MAX_STACKS;
    l->max_nodes = GRAM_DEFAULT_MAX_NODES;
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
        bfail(&b, GRAM_EINVAL, "the grammar has no 'root' rule");
        goto fail_bld;
    }
    if (check(&b)) goto fail_bld;
    g = calloc(1, sizeof(*g));
    if (!g) goto fail_nomem;
    g->refs = 1;
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
    bld_free(&b);
    *out = g;
    return GRAM_OK;
fail_nomem:
    bfail(&b, GRAM_ENOMEM, "out of memory");
    if (g) {
        free(g->alt_first);
        free(g->alts);
        free(g->rule_start);
        free(g->el);
        free(g->sets);
        free(g);
    }
fail_bld:
    bld_free(&b);
    return b.status ? b.status : GRAM_EINVAL;
}

struct gram *gram_ref(struct gram *g) {
    if (g) __atomic_add_fetch(&g->refs, 1, __ATOMIC_RELAXED);
    return g;
}

void gram_unref(struct gram *g) {
    if (!g || __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    gram_cache_free(g);
    pthread_mutex_destroy(&g->lock);
    free(g->el);
    free(g->rule_start);
    free(g->alt_first);
    free(g->alts);
    free(g->sets);
    free(g);
}

int gram_n_elems(const struct gram *g) { return g->n_el; }
int gram_n_rules(const struct gram *g) { return g->n_rules; }

const char *gram_strerror(int s) {
    switch (s) {
    case GRAM_OK: return "ok";
    case GRAM_ESYNTAX: return "grammar syntax error";
    case GRAM_EBUDGET: return "grammar limit exceeded";
    case GRAM_ENOMEM: return "out of memory";
    case GRAM_EREJECT: return "rejected by the grammar";
    case GRAM_EINVAL: return "invalid grammar";
    default: return "unknown grammar error";
    }
}
