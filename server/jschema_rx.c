/*
 * jschema_rx — the regex subset of JSON Schema's "pattern" as GBNF (server/jschema_fmt.h:
 * jschema_pattern, jschema_pattern_len). Pure functions: any thread.
 *
 * A pattern describes the decoded string; the grammar writes its JSON encoding, so a '"'
 * or '\\' the pattern allows is written escaped, and classes leave out the other control
 * characters (the generated strings are a subset of the pattern's, never a superset).
 * Without ^ the pattern may start anywhere and without $ end anywhere (JSON Schema
 * patterns search), so the expression is framed by any-string parts.
 */
#include "server/jschema_fmt.h"

#include "scheduler/grammar.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- regex subset ------------------------------------------------------------------- */

#define RX_INF (-1L)       /* an unbounded length */
#define RX_MAX_ITEMS 64

/* One item of the pattern's top-level sequence: its atom's grammar text (o from..to), the
 * atom's length range in code points and its repeat range. */
struct rx_item {
    size_t from, to;
    long amn, amx, qlo, qhi;
};

struct rx {
    const char *p, *end;
    struct jsc_buf *o;
    char *err;
    size_t errlen;
    int failed;
    int depth;
    long mn, mx; /* code points the last atom / sequence / alternation matches */
    int record;  /* record the top-level sequence's items (jschema_pattern_len) */
    int top_alt; /* the top level has alternatives */
    int n_items;
    struct rx_item items[RX_MAX_ITEMS];
    int raw;           /* content written as is (Gemma 4's notation), not JSON-escaped */
    long cap;          /* > 0: unbounded repeats (* + {m,}) repeat at most this often */
    /* Set when the last sequence, alternation or group was one item: an atom of at least one
     * code point, repeated one_it.qlo to one_it.qhi times; one_it.from..to is the atom's
     * text in o. rx_seq sets it, rx_alt clears it for alternatives, rx_atom keeps
     * it for a group and clears it for anything else. */
    int one;
    struct rx_item one_it;
};

static long len_add(long a, long b) { return a == RX_INF || b == RX_INF ? RX_INF : a + b; }
static long len_mul(long a, long q) { return a == 0 || q == 0 ? 0 : a == RX_INF || q == RX_INF ? RX_INF : a * q; }

struct cpr {
    unsigned lo, hi;
};

static int rfail(struct rx *r, const char *msg) {
    if (!r->failed) snprintf(r->err, r->errlen, "%s at offset %d", msg, (int)(r->end - r->p));
    r->failed = 1;
    return -1;
}

/* One code point of the pattern (UTF-8). */
static unsigned rx_cp(struct rx *r) {
    const unsigned char *s = (const unsigned char *)r->p;
    unsigned c = s[0];
    int n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : 4;
    if (r->p + n > r->end) n = 1;
    if (n > 1) c &= 0x3f >> (n - 1);
    for (int i = 1; i < n; i++) c = (c << 6) | (s[i] & 0x3f);
    r->p += n;
    return c;
}

/* The JSON encoding of code point c as a GBNF literal (raw: c itself). */
static void emit_cp(struct jsc_buf *o, unsigned c, int raw) {
    char u[8];
    size_t n;
    if (raw && (c == '"' || c == '\\' || c < 0x20)) {
        jsc_buf_printf(o, "[\\x%02X]", c);
        return;
    }
    if (c == '"') {
        jsc_buf_add(o, "\"\\\\\\\"\"", sizeof("\"\\\\\\\"\"") - 1);
        return;
    }
    if (c == '\\') {
        jsc_buf_add(o, "\"\\\\\\\\\"", sizeof("\"\\\\\\\\\"") - 1);
        return;
    }
    if (c < 0x20) {
        const char *e = c == '\n' ? "n" : c == '\t' ? "t" : c == '\r' ? "r" : c == '\f' ? "f" : c == '\b' ? "b" : NULL;
        if (e) jsc_buf_printf(o, "\"\\\\%s\"", e);
        else jsc_buf_printf(o, "\"\\\\u%04X\"", c);
        return;
    }
    if (c < 0x80) { u[0] = (char)c; n = 1; }
    else if (c < 0x800) { u[0] = (char)(0xc0 | (c >> 6)); u[1] = (char)(0x80 | (c & 63)); n = 2; }
    else if (c < 0x10000) {
        u[0] = (char)(0xe0 | (c >> 12)); u[1] = (char)(0x80 | ((c >> 6) & 63)); u[2] = (char)(0x80 | (c & 63)); n = 3;
    } else {
        u[0] = (char)(0xf0 | (c >> 18)); u[1] = (char)(0x80 | ((c >> 12) & 63));
        u[2] = (char)(0x80 | ((c >> 6) & 63)); u[3] = (char)(0x80 | (c & 63)); n = 4;
    }
    jsc_buf_lit(o, u, n);
}

static int cmp_cpr(const void *a, const void *b) {
    const struct cpr *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Emit a class (ranges r[0..n), negated or not) as a GBNF group. */
static int emit_class(struct rx *r, struct cpr *cr, int n, int neg) {
    qsort(cr, (size_t)n, sizeof(*cr), cmp_cpr);
    struct cpr u[160];
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && cr[i].lo <= u[m - 1].hi + 1) {
            if (cr[i].hi > u[m - 1].hi) u[m - 1].hi = cr[i].hi;
        } else if (m < 150) {
            u[m++] = cr[i];
        } else {
            return rfail(r, "character class too large");
        }
    }
    if (neg) {
        struct cpr t[160];
        int k = 0;
        unsigned next = 0;
        for (int i = 0; i < m; i++) {
            if (u[i].lo > next) t[k++] = (struct cpr){next, u[i].lo - 1};
            next = u[i].hi + 1;
        }
        if (next <= 0x10ffff) t[k++] = (struct cpr){next, 0x10ffff};
        memcpy(u, t, (size_t)k * sizeof(*u));
        m = k;
    }
    int has_q = 0, has_bs = 0, has_nl = 0, has_tab = 0, any = 0;
    struct jsc_buf cls = {0};
    for (int i = 0; i < m; i++) {
        unsigned lo = u[i].lo, hi = u[i].hi;
        if (lo <= '"' && hi >= '"') has_q = 1;
        if (lo <= '\\' && hi >= '\\') has_bs = 1;
        if (lo <= '\n' && hi >= '\n') has_nl = 1;
        if (lo <= '\t' && hi >= '\t') has_tab = 1;
        /* cut out 0x00-0x1f, '"', '\\' and the surrogates */
        unsigned cuts[][2] = {{0, 0x1f}, {'"', '"'}, {'\\', '\\'}, {0xd800, 0xdfff}};
        unsigned a = lo;
        while (a <= hi) {
            unsigned b = hi;
            int moved = 0;
            for (int k = 0; k < 4; k++) {
                if (a >= cuts[k][0] && a <= cuts[k][1]) {
                    a = cuts[k][1] + 1;
                    moved = 1;
                    break;
                }
                if (cuts[k][0] > a && cuts[k][0] - 1 < b) b = cuts[k][0] - 1;
            }
            if (moved) continue;
            if (b > hi) b = hi;
            jsc_buf_printf(&cls, "\\U%08X-\\U%08X", a, b);
            any = 1;
            if (b == 0x10ffff) break;
            a = b + 1;
        }
    }
    int alts = 0;
    jsc_buf_add(r->o, "(", sizeof("(") - 1);
    if (any) {
        jsc_buf_printf(r->o, "[%s]", cls.p);
        alts++;
    }
    jsc_buf_free(&cls);
    const unsigned extra[4] = {'"', '\\', '\n', '\t'};
    const int has[4] = {has_q, has_bs, has_nl, has_tab};
    for (int k = 0; k < 4; k++) {
        if (!has[k]) continue;
        if (alts++) jsc_buf_add(r->o, " | ", sizeof(" | ") - 1);
        emit_cp(r->o, extra[k], r->raw);
    }
    if (!alts) return rfail(r, "empty character class");
    jsc_buf_add(r->o, ")", sizeof(")") - 1);
    return 0;
}

/* Ranges of a shorthand class \d \w \s (upper case: negated). Returns the count. */
static int shorthand(char c, struct cpr *out, int *neg) {
    *neg = c >= 'A' && c <= 'Z';
    switch (c | 0x20) {
    case 'd': out[0] = (struct cpr){'0', '9'}; return 1;
    case 'w':
        out[0] = (struct cpr){'0', '9'}; out[1] = (struct cpr){'A', 'Z'};
        out[2] = (struct cpr){'a', 'z'}; out[3] = (struct cpr){'_', '_'};
        return 4;
    case 's':
        out[0] = (struct cpr){'\t', '\r'}; out[1] = (struct cpr){' ', ' '};
        out[2] = (struct cpr){0xa0, 0xa0}; out[3] = (struct cpr){0x2028, 0x2029};
        out[4] = (struct cpr){0xfeff, 0xfeff};
        return 5;
    }
    return 0;
}

static int hexn(struct rx *r, int n, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < n; i++) {
        if (r->p >= r->end) return rfail(r, "bad escape");
        char c = *r->p++;
        int h = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
        if (h < 0) return rfail(r, "bad escape");
        v = v * 16 + (unsigned)h;
    }
    *out = v;
    return 0;
}

/* An escape after '\' as one code point (returns 0) or a shorthand class (returns 1). */
static int escape(struct rx *r, unsigned *cp, struct cpr *cls, int *ncls, int *neg) {
    if (r->p >= r->end) return rfail(r, "trailing backslash");
    char c = *r->p++;
    if ((*ncls = shorthand(c, cls, neg)) > 0) return 1;
    switch (c) {
    case 'n': *cp = '\n'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case '0': *cp = 0; return 0;
    case 'x': return hexn(r, 2, cp);
    case 'u': return hexn(r, 4, cp);
    }
    if ((c >= '1' && c <= '9') || c == 'b' || c == 'B' || c == 'k' || c == 'p' || c == 'P' ||
        c == 'c')
        return rfail(r, "unsupported regex escape");
    r->p--;
    *cp = rx_cp(r);
    return 0;
}

static int rx_alt(struct rx *r);

static int rx_atom(struct rx *r) {
    char c = *r->p;
    if (c == '(') {
        r->p++;
        if (r->p < r->end && *r->p == '?') {
            if (r->p + 1 < r->end && r->p[1] == ':') r->p += 2;
            else return rfail(r, "unsupported regex group (lookaround or named)");
        }
        if (++r->depth > 64) return rfail(r, "regex nested too deeply");
        jsc_buf_add(r->o, "(", sizeof("(") - 1);
        if (rx_alt(r)) return -1; /* sets r->mn, r->mx */
        if (r->p >= r->end || *r->p != ')') return rfail(r, "missing ')'");
        r->p++;
        r->depth--;
        jsc_buf_add(r->o, ")", sizeof(")") - 1);
        return 0;
    }
    r->mn = r->mx = 1; /* everything else is one code point */
    r->one = 0;
    if (c == '[') {
        r->p++;
        int neg = 0, n = 0;
        struct cpr cr[150];
        if (r->p < r->end && *r->p == '^') {
            neg = 1;
            r->p++;
        }
        int first = 1;
        while (r->p < r->end && (*r->p != ']' || first)) {
            first = 0;
            unsigned lo, hi;
            if (*r->p == '\\') {
                r->p++;
                struct cpr sh[8];
                int nsh = 0, shneg = 0;
                int k = escape(r, &lo, sh, &nsh, &shneg);
                if (k < 0) return -1;
                if (k == 1) {
                    if (shneg) return rfail(r, "unsupported negated shorthand inside a class");
                    for (int i = 0; i < nsh && n < 140; i++) cr[n++] = sh[i];
                    continue;
                }
            } else {
                lo = rx_cp(r);
            }
            hi = lo;
            if (r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') {
                r->p++;
                if (*r->p == '\\') {
                    r->p++;
                    struct cpr sh[8];
                    int nsh, shneg;
                    if (escape(r, &hi, sh, &nsh, &shneg) != 0) return rfail(r, "bad class range");
                } else {
                    hi = rx_cp(r);
                }
                if (hi < lo) return rfail(r, "bad class range");
            }
            if (n >= 140) return rfail(r, "character class too large");
            cr[n++] = (struct cpr){lo, hi};
        }
        if (r->p >= r->end) return rfail(r, "missing ']'");
        r->p++;
        return emit_class(r, cr, n, neg);
    }
    if (c == '.') {
        r->p++;
        struct cpr nl = {'\n', '\n'};
        return emit_class(r, &nl, 1, 1);
    }
    if (c == '\\') {
        r->p++;
        unsigned cp;
        struct cpr sh[8];
        int nsh = 0, neg = 0;
        int k = escape(r, &cp, sh, &nsh, &neg);
        if (k < 0) return -1;
        if (k == 1) return emit_class(r, sh, nsh, neg);
        emit_cp(r->o, cp, r->raw);
        return 0;
    }
    if (c == '^' || c == '$') return rfail(r, "unsupported anchor inside the pattern");
    if (c == '*' || c == '+' || c == '?' || c == '{') return rfail(r, "quantifier without an item");
    emit_cp(r->o, rx_cp(r), r->raw);
    return 0;
}

/* (a{0,k}){m,n} with a never empty is a{0,k*n} (unbounded when either is): written so,
 * since a repeat of something that may match nothing is left recursion in GBNF (the usual
 * `(x*)*` of URL patterns). Replaces the group's text from `from` on with the atom and the
 * new quantifier; sets r->one_it.qhi to the new count. */
static int flatten_repeat(struct rx *r, size_t from, const struct rx_item *g, long n) {
    long k = g->qhi == RX_INF || n == RX_INF ? RX_INF : g->qhi * n;
    if (k != RX_INF && k > 1000000) return rfail(r, "repetition count too large");
    const size_t len = g->to - g->from;
    char *atom = malloc(len + 1);
    if (!atom) return rfail(r, "out of memory");
    memcpy(atom, r->o->p + g->from, len);
    r->o->n = from;
    jsc_buf_add(r->o, "(", 1);
    jsc_buf_add(r->o, atom, len);
    jsc_buf_add(r->o, ")", 1);
    free(atom);
    if (k == RX_INF && r->cap > 0) k = r->cap;
    if (k == RX_INF) jsc_buf_add(r->o, "*", 1);
    else jsc_buf_printf(r->o, "{0,%ld}", k);
    r->one_it.qhi = k;
    return 0;
}

static int rx_seq(struct rx *r) {
    struct rx_item last = {0};
    int items = 0;
    long smn = 0, smx = 0;
    while (r->p < r->end && *r->p != '|' && *r->p != ')') {
        if (*r->p == '$' && r->p + 1 == r->end) break;
        jsc_buf_add(r->o, " ", sizeof(" ") - 1);
        size_t from = r->o->n;
        r->one = 0;
        if (rx_atom(r)) return -1;
        size_t to = r->o->n;
        const int grp_one = r->one; /* a group of one repeated item */
        const struct rx_item g = r->one_it;
        long amn = r->mn, amx = r->mx, qlo = 1, qhi = 1;
        items++;
        if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '?')) {
            qlo = *r->p == '+' ? 1 : 0;
            qhi = *r->p == '?' ? 1 : RX_INF;
            if (qhi == RX_INF && r->cap > 0) jsc_buf_printf(r->o, "{%ld,%ld}", qlo, qhi = r->cap);
            else jsc_buf_add(r->o, r->p, 1);
            r->p++;
        } else if (r->p < r->end && *r->p == '{') {
            const char *q = r->p + 1;
            long lo = strtol(q, (char **)&q, 10);
            long hi = lo;
            if (q == r->p + 1) return rfail(r, "bad {m,n} quantifier");
            if (*q == ',') {
                q++;
                if (*q == '}') hi = -1;
                else hi = strtol(q, (char **)&q, 10);
            }
            if (*q != '}' || lo < 0 || lo > 1000 || hi > 1000 || (hi >= 0 && hi < lo))
                return rfail(r, "bad {m,n} quantifier");
            if (hi < 0 && r->cap > 0) hi = lo > r->cap ? lo : r->cap;
            if (hi < 0) jsc_buf_printf(r->o, "{%ld,}", lo);
            else jsc_buf_printf(r->o, "{%ld,%ld}", lo, hi);
            r->p = q + 1;
            qlo = lo;
            qhi = hi < 0 ? RX_INF : hi;
        }
        /* (a{0,k}){m,n}: left recursion in GBNF */
        if (grp_one && g.qlo == 0 && qhi != 1 && g.qhi != 0) {
            if (flatten_repeat(r, from, &g, qhi)) return -1;
            to = from + (g.to - g.from) + 2;
            amn = g.amn, amx = g.amx, qlo = 0, qhi = r->one_it.qhi;
        }
        last = (struct rx_item){from, to, amn, amx, qlo, qhi};
        smn = len_add(smn, len_mul(amn, qlo));
        smx = len_add(smx, len_mul(amx, qhi));
        if (r->record && r->depth == 0) {
            if (r->n_items == RX_MAX_ITEMS) r->record = 0; /* too many: no rewriting */
            else if (grp_one && qlo == 1 && qhi == 1) r->items[r->n_items++] = g; /* (a*): a* */
            else r->items[r->n_items++] = (struct rx_item){from, to, amn, amx, qlo, qhi};
        }
        if (r->p < r->end && *r->p == '?') r->p++; /* lazy: same language */
        if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '{'))
            return rfail(r, "unsupported stacked quantifier");
    }
    if (!items) jsc_buf_add(r->o, " \"\"", sizeof(" \"\"") - 1);
    r->one = items == 1 && last.amn > 0;
    r->one_it = last;
    r->mn = smn;
    r->mx = smx;
    return 0;
}

static int rx_alt(struct rx *r) {
    if (rx_seq(r)) return -1;
    long mn = r->mn, mx = r->mx;
    int alts = 0;
    while (r->p < r->end && *r->p == '|') {
        alts++;
        if (r->depth == 0) r->top_alt = 1;
        r->p++;
        jsc_buf_add(r->o, " |", sizeof(" |") - 1);
        if (rx_seq(r)) return -1;
        if (r->mn < mn) mn = r->mn;
        if (mx != RX_INF && (r->mx == RX_INF || r->mx > mx)) mx = r->mx;
    }
    if (alts) r->one = 0;
    r->mn = mn;
    r->mx = mx;
    return 0;
}

/* jschema_pattern with r.cap = cap; *mn / *mx: the code points a match of the expression
 * between any anchors takes. */
/* ---- anchors inside the pattern --------------------------------------------------- */

/* Anchors at the ends of alternatives (`^a$|^b$`, `(^x)|(^y)`, `^(a$|b)`): each alternative
 * with its own anchors, as `^(a|b)` is `^a|^b`. A branch that is one whole group is split
 * into its alternatives, which inherit its anchors. Anchors anywhere else are refused. */
#define RX_MAX_BRANCHES 64

struct rx_branch {
    const char *s, *e;
    int start, end; /* anchored at the string's start / end */
};

/* The position after the construct at p (an escape, a class, a group, one character), or
 * NULL when it is not closed before e. */
static const char *rx_next(const char *p, const char *e) {
    if (*p == '\\') return p + 2 <= e ? p + 2 : NULL;
    if (*p == '[') {
        p++;
        if (p < e && *p == '^') p++;
        if (p < e && *p == ']') p++; /* a ']' first is literal */
        while (p < e && *p != ']') p += *p == '\\' ? 2 : 1;
        return p < e ? p + 1 : NULL;
    }
    if (*p == '(') {
        p++;
        while (p < e && *p != ')')
            if (!(p = rx_next(p, e))) return NULL;
        return p < e ? p + 1 : NULL;
    }
    return p + 1;
}

/* 1 when re has a '^' or '$' outside a class other than its first and last character. */
static int rx_inner_anchor(const char *re, const char *e) {
    for (const char *p = re; p < e;) {
        if (*p == '\\') p += 2;
        else if (*p == '[') {
            if (!(p = rx_next(p, e))) return 0; /* rx_atom names the error */
        } else {
            if ((*p == '^' && p > re) || (*p == '$' && p + 1 < e)) return 1;
            p++;
        }
    }
    return 0;
}

static int rx_split(const char *s, const char *e, int st, int en, struct rx_branch *out, int *n);

static int rx_expand(const char *s, const char *e, int st, int en, struct rx_branch *out,
                     int *n) {
    if (s < e && *s == '^') s++, st = 1;
    if (e > s && e[-1] == '$') {
        int bs = 0; /* an odd run of backslashes before it escapes it */
        for (const char *q = e - 2; q >= s && *q == '\\'; q--) bs++;
        if (!(bs & 1)) e--, en = 1;
    }
    if (s < e && *s == '(' && rx_next(s, e) == e) { /* one whole group, no quantifier */
        const char *in = s + 1;
        if (in < e - 1 && *in == '?' && in + 1 < e - 1 && in[1] == ':') in += 2;
        if (*in != '?') return rx_split(in, e - 1, st, en, out, n);
    }
    if (*n == RX_MAX_BRANCHES) return -1;
    out[(*n)++] = (struct rx_branch){s, e, st, en};
    return 0;
}

/* The alternatives of s..e (its top-level '|'), each expanded. */
static int rx_split(const char *s, const char *e, int st, int en, struct rx_branch *out,
                    int *n) {
    for (const char *b = s, *p = s;;) {
        if (p == e || *p == '|') {
            if (rx_expand(b, p, st, en, out, n)) return -1;
            if (p == e) return 0;
            b = ++p;
        } else if (!(p = rx_next(p, e))) {
            return -1;
        }
    }
}

/* pattern_cap for a pattern with anchors inside: ( [char*] (branch) [char*] | ... ). */
static int pattern_branches(const char *re, int raw, long cap, struct jsc_buf *out, char *err,
                            size_t errlen, long *mn, long *mx) {
    struct rx_branch br[RX_MAX_BRANCHES];
    int n = 0;
    if (rx_split(re, re + strlen(re), 0, 0, br, &n))
        return snprintf(err, errlen, "unsupported anchor inside the pattern, or over %d "
                        "alternatives", RX_MAX_BRANCHES), -1;
    *mn = RX_INF;
    *mx = 0;
    jsc_buf_add(out, "(", 1);
    for (int i = 0; i < n; i++) {
        struct rx r = {.p = br[i].s, .end = br[i].e, .o = out, .err = err, .errlen = errlen,
                       .raw = raw, .cap = cap};
        if (i) jsc_buf_add(out, " |", 2);
        jsc_buf_add(out, br[i].start ? " (" : " char* (", br[i].start ? 2 : 8);
        if (rx_alt(&r)) return -1;
        if (r.p != r.end) return rfail(&r, *r.p == ')' ? "unbalanced ')'" : "unexpected text");
        jsc_buf_add(out, br[i].end ? ")" : ") char*", br[i].end ? 1 : 7);
        if (*mn == RX_INF || r.mn < *mn) *mn = r.mn;
        if (!br[i].start || !br[i].end || r.mx == RX_INF) *mx = RX_INF;
        else if (*mx != RX_INF && r.mx > *mx) *mx = r.mx;
    }
    jsc_buf_add(out, ")", 1);
    return out->oom ? (snprintf(err, errlen, "pattern too large"), -1) : 0;
}

static int pattern_cap(const char *re, int raw, long cap, struct jsc_buf *out, char *err,
                       size_t errlen, long *mn, long *mx) {
    if (rx_inner_anchor(re, re + strlen(re)))
        return pattern_branches(re, raw, cap, out, err, errlen, mn, mx);
    struct rx r = {.p = re, .end = re + strlen(re), .o = out, .err = err, .errlen = errlen, .raw = raw,
                   .cap = cap};
    int start = r.p < r.end && *r.p == '^';
    if (start) r.p++;
    size_t n = strlen(re);
    int end = n > 0 && re[n - 1] == '$' && (n < 2 || re[n - 2] != '\\');
    if (!start) jsc_buf_add(out, "char* ", sizeof("char* ") - 1);
    jsc_buf_add(out, "(", sizeof("(") - 1);
    if (rx_alt(&r)) return -1;
    if (r.p < r.end && *r.p == ')') return rfail(&r, "unbalanced ')'");
    if (r.p < r.end && *r.p == '$') r.p++;
    if (r.p != r.end) return rfail(&r, "unexpected text");
    jsc_buf_add(out, ")", sizeof(")") - 1);
    if (!end) jsc_buf_add(out, " char*", sizeof(" char*") - 1);
    *mn = r.mn;
    *mx = r.mx;
    return out->oom ? rfail(&r, "pattern too large") : 0;
}

int jschema_pattern(const char *re, int raw, struct jsc_buf *out, char *err, size_t errlen) {
    long mn, mx;
    return pattern_cap(re, raw, 0, out, err, errlen, &mn, &mx);
}

/* An anchored pattern whose matches are not all within [lo, hi] code points and cannot be
 * bounded exactly (jschema_pattern_len): its unbounded repeats get the largest common cap
 * under which every match fits in hi, when every match already has lo at least. Narrower
 * than the schema (long matches are left out), never wider. 0, or -1 with err. */
static int pattern_capped(const char *re, int raw, long lo, long hi, struct jsc_buf *out,
                          char *err, size_t errlen) {
    size_t n = strlen(re);
    long best = 0, a = 1, b = hi, mn = 0, mx = 0;
    if (hi < 1 || re[0] != '^' || n < 2 || re[n - 1] != '$' || re[n - 2] == '\\')
        return snprintf(err, errlen, "unsupported keyword combination (pattern with "
                        "minLength/maxLength)"), -1;
    while (a <= b) { /* the largest cap whose longest match fits */
        long q = a + (b - a) / 2;
        struct jsc_buf t = {0};
        int rc = pattern_cap(re, raw, q, &t, err, errlen, &mn, &mx);
        jsc_buf_free(&t);
        if (rc) return -1;
        if (mx != RX_INF && mx <= hi) best = q, a = q + 1;
        else b = q - 1;
    }
    if (!best || mn < lo)
        return snprintf(err, errlen, "unsupported keyword combination (pattern with "
                        "minLength/maxLength)"), -1;
    return pattern_cap(re, raw, best, out, err, errlen, &mn, &mx);
}

/* Of several variable items, the one whose count jschema_pattern_len sets: the last open
 * end (an unanchored end before an unanchored start: text tends to start with the match),
 * else the last unbounded repeat of a fixed width, else -1. */
static int rx_adjuster(const struct rx_item *it, int k) {
    int open = -1, best = -1;
    for (int i = 0; i < k; i++) {
        const int fixed_w = it[i].amn == it[i].amx && it[i].amx != RX_INF && it[i].amx > 0;
        if (fixed_w && it[i].to == 0) open = i;
        if (fixed_w && it[i].qhi == RX_INF) best = i;
    }
    return open >= 0 ? open : best;
}

/* Caps the unbounded repeats of it[0..k) at one common count under which the longest
 * match has hi code points at most (each keeps at least its fewest). 0, or -1 when that
 * cannot be (a repeat of an unbounded atom, or no room). */
static int rx_cap_free(struct rx_item *it, int k, long hi) {
    long fin = 0, unb = 0;
    for (int i = 0; i < k; i++) {
        if (it[i].amx == RX_INF) return -1;
        if (it[i].qhi == RX_INF) unb += it[i].amx;
        else fin += it[i].amx * it[i].qhi;
    }
    if (!unb) return 0;
    const long c = hi - fin >= 0 ? (hi - fin) / unb : -1;
    for (int i = 0; i < k; i++)
        if (it[i].qhi == RX_INF) {
            if (c < it[i].qlo) return -1;
            it[i].qhi = c;
        }
    return 0;
}

/* var's repeat count [*qlo, *qhi] under which every length the other items of it[0..k) can
 * take fits lo..hi (hi < 0: no bound); var -1: none varies. 0; 1 when no count fits; -1 when
 * var's width is not fixed, or the others have no longest length under a bound. */
static int rx_var_range(const struct rx_item *it, int k, int var, long lo, long hi, long *qlo,
                        long *qhi) {
    long base_lo = 0, base_hi = 0;
    for (int i = 0; i < k; i++)
        if (i != var) {
            base_lo += it[i].amn * it[i].qlo;
            base_hi = len_add(base_hi, len_mul(it[i].amx, it[i].qhi));
        }
    if (var < 0) return base_lo >= lo && (hi < 0 || (base_hi != RX_INF && base_hi <= hi)) ? 0 : 1;
    if (it[var].amn != it[var].amx || it[var].amx == RX_INF || it[var].amx == 0 ||
        (hi >= 0 && base_hi == RX_INF))
        return -1;
    const long w = it[var].amx;
    *qlo = it[var].qlo;
    *qhi = it[var].qhi;
    const long need_lo = lo - base_lo > 0 ? (lo - base_lo + w - 1) / w : 0;
    if (need_lo > *qlo) *qlo = need_lo;
    if (hi >= 0) {
        const long cap = hi - base_hi >= 0 ? (hi - base_hi) / w : -1;
        if (*qhi == RX_INF || cap < *qhi) *qhi = cap;
    }
    return *qhi != RX_INF && (*qhi < *qlo || *qhi < 0) ? 1 : 0;
}

/* The pattern's strings with between lo and hi code points (hi < 0: no upper bound), where
 * that can be written: when the bounds hold for every match anyway, or when the top level
 * is one sequence in which a single item's repeat count is free and each repeat is a fixed
 * number of code points (then the count is bounded instead). An unanchored end is such an
 * item (any character, repeated). With several variable items, one such item (an open end
 * first) gets the count that makes every length of the others fit: a subset of the
 * pattern's strings within the bounds, never a superset. Other combinations are refused. */
int jschema_pattern_len(const char *re, int raw, long lo, long hi, struct jsc_buf *out,
                        char *err, size_t errlen) {
    struct jsc_buf tmp = {0};
    struct rx *r = calloc(1, sizeof(*r));
    if (!r) return snprintf(err, errlen, "out of memory"), -1;
    *r = (struct rx){.end = re + strlen(re), .o = &tmp, .err = err, .errlen = errlen, .record = 1,
                     .raw = raw};
    r->p = re;
    int start = r->p < r->end && *r->p == '^', rc = -1;
    if (start) r->p++;
    size_t n = strlen(re);
    int end = n > 0 && re[n - 1] == '$' && (n < 2 || re[n - 2] != '\\');
    if (rx_alt(r)) goto done;
    if (r->p < r->end && *r->p == ')') { rfail(r, "unbalanced ')'"); goto done; }
    if (r->p < r->end && *r->p == '$') r->p++;
    if (r->p != r->end) { rfail(r, "unexpected text"); goto done; }
    if (tmp.oom) { rfail(r, "pattern too large"); goto done; }
    long mn = r->mn, mx = r->mx;
    if (!start || !end) mx = RX_INF;
    if ((hi >= 0 && mn > hi) || (mx != RX_INF && mx < lo)) {
        rfail(r, "no string of the pattern has a length within minLength/maxLength");
        goto done;
    }
    if (mn >= lo && (hi < 0 || (mx != RX_INF && mx <= hi))) { /* the bounds change nothing */
        rc = jschema_pattern(re, raw, out, err, errlen);
        goto done;
    }
    /* items in order, with the unanchored ends as "any character, repeated" */
    struct rx_item it[RX_MAX_ITEMS + 2];
    int k = 0, var = -1, n_var = 0;
    if (!start) it[k++] = (struct rx_item){0, 0, 1, 1, 0, RX_INF};
    for (int i = 0; i < r->n_items; i++) it[k++] = r->items[i];
    if (!end) it[k++] = (struct rx_item){0, 0, 1, 1, 0, RX_INF};
    if (r->top_alt || !r->record) {
        if (start && end) {
            rc = pattern_capped(re, raw, lo, hi, out, err, errlen);
            goto done;
        }
        snprintf(err, errlen, "unsupported keyword combination (pattern with alternatives at its top "
                 "level, with minLength/maxLength)");
        goto done;
    }
    /* An open end absorbs optional items next to it: X{0,n} followed by any characters is
     * any characters. */
    for (int i = 0; i < k; i++) {
        int near_open = (i > 0 && it[i - 1].to == 0) || (i + 1 < k && it[i + 1].to == 0);
        if (it[i].to != 0 && it[i].qlo == 0 && near_open) {
            memmove(&it[i], &it[i + 1], (size_t)(k - i - 1) * sizeof it[0]);
            k--;
            i = -1;
        }
    }
    long fixed = 0, least = 0;
    for (int i = 0; i < k; i++) {
        if (it[i].amn == it[i].amx && it[i].amx != RX_INF && it[i].qlo == it[i].qhi) {
            fixed += it[i].amn * it[i].qlo;
        } else {
            var = i;
            n_var++;
            least += it[i].amn * it[i].qlo;
        }
    }
    if (n_var > 1 && hi >= 0 && fixed + least == hi && fixed + least >= lo) {
        /* no room left: every free item takes its fewest repeats */
        for (int i = 0; i < k; i++)
            if (!(it[i].amn == it[i].amx && it[i].qlo == it[i].qhi)) it[i].qhi = it[i].qlo;
        fixed = hi;
        n_var = 0;
    }
    if (n_var == 0 && fixed >= lo && (hi < 0 || fixed <= hi)) var = -1;
    else if (n_var > 1) var = rx_adjuster(it, k);
    long qlo = 0, qhi = 0;
    int vr;
    if (n_var > 1 && var >= 0 && hi >= 0) {
        /* the unbounded repeats share the room equally (var among them); failing that, the
         * others take their fewest repeats and var the rest */
        struct rx_item keep[RX_MAX_ITEMS + 2];
        memcpy(keep, it, (size_t)k * sizeof it[0]);
        vr = rx_cap_free(it, k, hi) ? 1 : rx_var_range(it, k, var, lo, hi, &qlo, &qhi);
        if (vr) {
            memcpy(it, keep, (size_t)k * sizeof it[0]);
            for (int i = 0; i < k; i++)
                if (i != var && it[i].qhi == RX_INF) it[i].qhi = it[i].qlo;
            vr = rx_var_range(it, k, var, lo, hi, &qlo, &qhi);
        }
    } else {
        vr = rx_var_range(it, k, var, lo, hi, &qlo, &qhi);
    }
    if (vr < 0 || (vr > 0 && n_var > 1)) {
        rc = start && end ? pattern_capped(re, raw, lo, hi, out, err, errlen) : -1;
        if (rc) snprintf(err, errlen, "unsupported keyword combination (pattern with minLength/maxLength)");
        goto done;
    }
    if (vr > 0) {
        rfail(r, "no string of the pattern has a length within minLength/maxLength");
        goto done;
    }
    if (qlo > 100000 || qhi > 100000) {
        rfail(r, "pattern with minLength/maxLength too large");
        goto done;
    }
    jsc_buf_add(out, "(", 1);
    for (int i = 0; i < k; i++) {
        jsc_buf_add(out, " ", 1);
        if (it[i].to == 0) jsc_buf_add(out, "char1", sizeof("char1") - 1); /* an open end */
        else jsc_buf_add(out, tmp.p + it[i].from, it[i].to - it[i].from);
        long a = i == var ? qlo : it[i].qlo, b = i == var ? qhi : it[i].qhi;
        if (b == RX_INF) jsc_buf_printf(out, "{%ld,}", a);
        else if (a != 1 || b != 1) jsc_buf_printf(out, "{%ld,%ld}", a, b);
    }
    jsc_buf_add(out, ")", 1);
    rc = out->oom ? rfail(r, "pattern too large") : 0;
done:
    jsc_buf_free(&tmp);
    free(r);
    return rc;
}

/* ---- matching keys against a pattern ------------------------------------------------ */

int jschema_pattern_keys(const char *re, const char *const *keys, int n, unsigned char *hit,
                         char *err, size_t errlen) {
    struct jsc_buf t = {0};
    struct gram *g = NULL;
    struct gram_scratch *x = NULL;
    struct gram_match *m = NULL;
    int rc = -1;
    jschema_json_base(&t);
    jsc_buf_add(&t, "root ::= ", 9);
    if (jschema_pattern(re, 0, &t, err, errlen)) goto done;
    jsc_buf_add(&t, "\n", 1);
    if (t.oom) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    if (gram_compile_gbnf(t.p, t.n, NULL, &g, err, errlen) || gram_scratch_create(NULL, 8, &x))
        goto done;
    for (int i = 0; i < n; i++) {
        /* the key as JSON writes it between its quotes: what the pattern's grammar reads */
        json_t *js = json_string(keys[i]);
        char *q = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
        json_decref(js);
        if (!q || gram_match_create(g, x, &m)) {
            free(q);
            snprintf(err, errlen, "out of memory");
            goto done;
        }
        const size_t len = strlen(q);
        const int r = gram_match_accept(m, x, (const uint8_t *)q + 1, len - 2);
        hit[i] = r == GRAM_OK && gram_match_can_end(m);
        gram_match_destroy(m);
        m = NULL;
        free(q);
        if (r != GRAM_OK && r != GRAM_EREJECT) {
            snprintf(err, errlen, "pattern too complex to match keys against");
            goto done;
        }
    }
    rc = 0;
done:
    gram_scratch_destroy(x);
    gram_unref(g);
    jsc_buf_free(&t);
    return rc;
}
