/*
 * jschema_scalar — strings, integers and numbers of the JSON Schema compiler, and the count
 * keywords (minLength, minItems, ...): part of the jschema module (jschema_int.h).
 */
#include "server/jschema.h"
#include "server/jschema_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int jschema_count(struct jsc *c, json_t *s, const char *k, long long *out, const char *ptr) {
    json_t *v = json_object_get(s, k);
    if (!v) return 0;
    if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 1e6 ||
        json_number_value(v) != floor(json_number_value(v)))
        return jfail(c, "'%s' must be a non-negative integer at %s/%s", k, ptr, k);
    *out = (long long)json_number_value(v);
    return 0;
}

/* ---- strings and numbers ------------------------------------------------------------ */

/* 1 when a JSON Schema draft (3 to 2020-12) defines this format name. */
static int spec_format(const char *f) {
    static const char *const names[] = {
        "date-time", "date", "time", "duration", "email", "idn-email", "hostname",
        "idn-hostname", "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid",
        "uri-template", "json-pointer", "relative-json-pointer", "regex", "host-name",
        "ip-address", "color", "style", "phone", "utc-millisec", NULL,
    };
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], f) == 0) return 1;
    return 0;
}

int jschema_gen_string(struct jsc *c, json_t *s, const char *ptr, struct jsc_buf *b) {
    long long mn = 0, mx = -1;
    if (jschema_count(c, s, "minLength", &mn, ptr) || jschema_count(c, s, "maxLength", &mx, ptr)) return -1;
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    if (mx >= 0 && mn > mx) return jfail(c, "minLength > maxLength at %s", ptr);
    int known_fmt = fmt && json_is_string(fmt) && jschema_format(json_string_value(fmt)) != NULL;
    int n_kw = (pat != NULL) + known_fmt + (mn > 0 || mx >= 0);
    long fmn, fmx;
    if (n_kw == 2 && known_fmt && !pat && !jschema_format_len(json_string_value(fmt), &fmn, &fmx)) {
        /* the bounds hold for every string of the format, or for none */
        if (fmn >= mn && (mx < 0 || (fmx >= 0 && fmx <= mx))) n_kw = 1, mn = 0, mx = -1;
        else if ((mx >= 0 && fmn > mx) || (fmx >= 0 && fmx < mn))
            return jfail(c, "no '%.40s' string has a length within minLength/maxLength at %s",
                         json_string_value(fmt), ptr);
    }
    if (n_kw > 1 && !(pat && !known_fmt))
        return jfail(c, "unsupported keyword combination (pattern, format, minLength/maxLength) at %s", ptr);
    if (pat) {
        if (!json_is_string(pat)) return jfail(c, "'pattern' must be a string at %s/pattern", ptr);
        char e2[200];
        jsc_buf_printf(b, "%s (", c->q);
        if (n_kw > 1) { /* pattern with minLength / maxLength */
            if (jschema_pattern_len(json_string_value(pat), c->g4, (long)mn, (long)mx, b, e2,
                                    sizeof e2)) {
                if (strncmp(e2, "unsupported keyword combination", 31) == 0)
                    return jfail(c, "%s at %s", e2, ptr);
                return jfail(c, "unsupported keyword 'pattern' at %s/pattern: %s", ptr, e2);
            }
        } else if (jschema_pattern(json_string_value(pat), c->g4, b, e2, sizeof e2))
            return jfail(c, "unsupported keyword 'pattern' at %s/pattern: %s", ptr, e2);
        jsc_buf_printf(b, ") %s", c->q);
        return 0;
    }
    if (fmt) {
        if (!json_is_string(fmt)) return jfail(c, "'format' must be a string at %s/format", ptr);
        const char *g = jschema_format(json_string_value(fmt));
        /* A format the JSON Schema drafts define is asserted by validators that know it:
         * never let one through unchecked. Other names are annotations (no validator can
         * check them): the string is any string. */
        if (!g && spec_format(json_string_value(fmt)))
            return jfail(c, "unsupported keyword 'format' ('%.40s') at %s/format",
                         json_string_value(fmt), ptr);
        if (g) {
            jsc_buf_printf(b, "%s %s %s", c->q, g, c->q);
            return 0;
        }
    }
    if (mn == 0 && mx < 0) {
        jsc_buf_add(b, "string", sizeof("string") - 1);
    } else if (mx < 0) {
        jsc_buf_printf(b, "%s char1{%lld,} %s", c->q, mn, c->q);
    } else {
        jsc_buf_printf(b, "%s char1{%lld,%lld} %s", c->q, mn, mx, c->q);
    }
    return 0;
}

/* multipleOf m of a number as the decimals its values may have: -1 without it, d when m is
 * 10^-d (0.01: 2; 1: 0), which a decimal number with at most d decimals (then zeros) is a
 * multiple of. Other values are refused. *dec, 0 or -1. */
/* multipleOf k, a whole number from 2 to 1e9: k, else 0. */
static long long multiple_int(json_t *s) {
    json_t *v = json_object_get(s, "multipleOf");
    const double m = v && json_is_number(v) ? json_number_value(v) : 0;
    return m >= 2 && m <= 1e9 && m == floor(m) ? (long long)m : 0;
}

static int multiple_dec(struct jsc *c, json_t *s, const char *ptr, int *dec) {
    json_t *v = json_object_get(s, "multipleOf");
    *dec = -1;
    if (!v) return 0;
    if (multiple_int(s)) return *dec = 0, 0; /* integers (jschema_gen_integer) */
    double m = json_is_number(v) ? json_number_value(v) : 0, p = 1;
    for (int d = 0; d <= 15 && m > 0; d++, p /= 10)
        if (fabs(m - p) <= p * 1e-9) return *dec = d, 0;
    return jfail(c, "unsupported keyword 'multipleOf' (only 1, 0.1, 0.01, ...) at %s/multipleOf", ptr);
}

#define MULT_ENUM_MAX 512 /* multiples within both bounds written out, at most */
#define MULT_DFA_MAX 100  /* a multipleOf the digit automaton (mult_dfa) takes, at most */

/* Non-negative multiples of k (2 <= k <= MULT_DFA_MAX) of up to 16 digits, with 0 or not:
 * the decimal digits read by the automaton of the remainder mod k, one rule per remainder
 * and digit count (S_r,n: what may follow n digits whose value is r mod k). */
static void mult_dfa(struct jsc *c, long long k, int zero, struct jsc_buf *b) {
    int id[MULT_DFA_MAX][17];
    struct jsc_buf t = {0};
    for (int n = 16; n >= 1; n--)
        for (int r = 0; r < k; r++) {
            t.n = 0;
            int alts = 0;
            if (r == 0) jsc_buf_add(&t, "\"\"", 2), alts++;
            for (int to = 0; n < 16 && to < k; to++) {
                char ds[11];
                int nd = 0;
                for (int d = 0; d <= 9; d++)
                    if ((10 * r + d) % k == to && id[to][n + 1] >= 0) ds[nd++] = (char)('0' + d);
                if (!nd) continue;
                ds[nd] = 0;
                jsc_buf_printf(&t, "%s[%s] %s-%d", alts++ ? " | " : "", ds, c->name, id[to][n + 1]);
            }
            id[r][n] = alts ? jschema_add_rule(c, &t) : -1;
        }
    jsc_buf_free(&t);
    jsc_buf_add(b, "(", 1);
    int alts = 0;
    if (zero) jsc_buf_add(b, "\"0\"", 3), alts++;
    for (int d = 1; d <= 9; d++)
        if (id[d % k][1] >= 0)
            jsc_buf_printf(b, "%s\"%d\" %s-%d", alts++ ? " | " : "", d, c->name, id[d % k][1]);
    jsc_buf_add(b, ")", 1);
}

/* Integers in [lo, hi] (has_lo / has_hi 0: unbounded) that k divides: written out when
 * there are at most MULT_ENUM_MAX; else, without an upper bound and a lower one of at most
 * k, the digit automaton (with "-" when unbounded below). 0, or -1 naming multipleOf. */
static int gen_multiples(struct jsc *c, long long k, long long lo, int has_lo, long long hi,
                         int has_hi, const char *ptr, struct jsc_buf *b) {
    if (has_lo && has_hi) {
        const long long first = lo >= 0 ? (lo + k - 1) / k * k : -((-lo) / k * k);
        const long long last = hi >= 0 ? hi / k * k : -((-hi + k - 1) / k * k);
        if (first > last) return jfail(c, "no multiple of %lld within the bounds at %s", k, ptr);
        if ((last - first) / k >= MULT_ENUM_MAX)
            return jfail(c, "unsupported keyword 'multipleOf' (more than %d multiples within "
                         "the bounds) at %s/multipleOf", MULT_ENUM_MAX, ptr);
        jsc_buf_add(b, "(", 1);
        for (long long v = first; v <= last; v += k)
            jsc_buf_printf(b, "%s\"%lld\"", v == first ? "" : " | ", v);
        jsc_buf_add(b, ")", 1);
        return 0;
    }
    if (k > MULT_DFA_MAX || has_hi || (has_lo && (lo <= -k || lo > k)))
        return jfail(c, "unsupported keyword 'multipleOf' (a whole number up to %d, without "
                     "an upper bound unless both bounds leave at most %d multiples) at "
                     "%s/multipleOf", MULT_DFA_MAX, MULT_ENUM_MAX, ptr);
    if (!has_lo) jsc_buf_add(b, "(\"-\"? ", sizeof("(\"-\"? ") - 1);
    mult_dfa(c, k, !has_lo || lo <= 0, b);
    if (!has_lo) jsc_buf_add(b, ")", 1);
    return 0;
}

int jschema_gen_integer(struct jsc *c, json_t *s, const char *ptr, struct jsc_buf *b) {
    int dec;
    if (multiple_dec(c, s, ptr, &dec)) return -1; /* every integer is a multiple of 10^-d */
    long long lo = 0, hi = 0;
    int has_lo = 0, has_hi = 0;
    static const char *const kw[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(s, kw[i]);
        if (!v) continue;
        if (json_is_boolean(v))
            return jfail(c, "unsupported keyword '%s' (draft-4 boolean form) at %s/%s", kw[i], ptr, kw[i]);
        if (!json_is_number(v)) return jfail(c, "'%s' must be a number at %s/%s", kw[i], ptr, kw[i]);
        double d = json_number_value(v);
        if (fabs(d) > 1e15) return jfail(c, "unsupported keyword '%s' (magnitude above 1e15) at %s/%s", kw[i], ptr, kw[i]);
        long long x;
        if (i < 2) {
            x = (long long)ceil(d);
            if (i == 1 && (double)x == d) x++;
            if (!has_lo || x > lo) lo = x;
            has_lo = 1;
        } else {
            x = (long long)floor(d);
            if (i == 3 && (double)x == d) x--;
            if (!has_hi || x < hi) hi = x;
            has_hi = 1;
        }
    }
    if (has_lo && has_hi && lo > hi) return jfail(c, "no integer satisfies the bounds at %s", ptr);
    const long long k = multiple_int(s);
    if (k) return gen_multiples(c, k, lo, has_lo, hi, has_hi, ptr, b);
    if (!has_lo && !has_hi) {
        jsc_buf_add(b, "integer", sizeof("integer") - 1);
        return 0;
    }
    jsc_buf_add(b, "(", sizeof("(") - 1);
    jschema_int_range(lo, has_lo, hi, has_hi, b);
    jsc_buf_add(b, ")", sizeof(")") - 1);
    return 0;
}

/* The integer part and fraction digits (no trailing zeros; "" for an integer) of |d|, exact
 * within 15 decimals. 0 or -1. */
static int dec_digits(double d, char *ip, size_t ipcap, char *fp, size_t fpcap) {
    char t[64];
    for (int p = 0; p <= 15; p++) {
        snprintf(t, sizeof t, "%.*f", p, fabs(d));
        if (strtod(t, NULL) != fabs(d)) continue;
        char *dot = strchr(t, '.');
        if (dot) *dot = 0;
        snprintf(ip, ipcap, "%s", t);
        snprintf(fp, fpcap, "%s", dot ? dot + 1 : "");
        size_t n = strlen(fp);
        while (n && fp[n - 1] == '0') fp[--n] = 0;
        return 0;
    }
    return -1;
}

/* Fraction digit strings (one or more digits) whose value is >= 0.F (ge) or <= 0.F (!ge),
 * strictly when strict; F has no trailing zeros. */
static void frac_cmp(const char *f, int ge, int strict, struct jsc_buf *b) {
    const int k = (int)strlen(f);
    int alts = 0;
    jsc_buf_add(b, "(", 1);
    for (int i = 0; i < k; i++) {
        if (ge ? f[i] == '9' : f[i] == '0') continue;
        if (alts++) jsc_buf_add(b, " | ", 3);
        if (i) jsc_buf_lit(b, f, (size_t)i);
        if (ge) jsc_buf_printf(b, " [%c-9] [0-9]*", f[i] + 1);
        else jsc_buf_printf(b, " [0-%c] [0-9]*", f[i] - 1);
    }
    for (int i = 1; !ge && i < k; i++) { /* a prefix of F, ending there: smaller */
        if (alts++) jsc_buf_add(b, " | ", 3);
        jsc_buf_lit(b, f, (size_t)i);
    }
    if (ge || !strict) { /* F, then more digits: any (>=), not all zeros (>), zeros (<=) */
        if (alts++) jsc_buf_add(b, " | ", 3);
        jsc_buf_lit(b, f, (size_t)k);
        if (ge) jsc_buf_add(b, strict ? " [0-9]* [1-9]" : " [0-9]*", strict ? 13 : 7);
        else jsc_buf_add(b, " \"0\"*", 5);
    }
    jsc_buf_add(b, ")", 1);
}

/* A number within integer bounds (lo / hi: the bounds as given, ilo / ihi: the integers
 * allowed): an integer in range (also written i.0), or i.f (f ending in a non-zero digit, so
 * strictly between i and i + 1) for i in [max(lo, 0), hi - 1], or -k.f (strictly between
 * -(k + 1) and -k) for k in [max(0, -hi), -lo - 1]; no exponent. The alternatives written. */
static int num_int_bounds(long long lo, long long ilo, int has_lo, long long hi, long long ihi,
                          int has_hi, int alts, const char *frac, struct jsc_buf *b) {
    if (!(has_lo && has_hi && ilo > ihi)) { /* integers, also as i.0 */
        if (alts++) jsc_buf_add(b, " | ", 3);
        jsc_buf_add(b, "(", 1);
        jschema_int_range(ilo, has_lo, ihi, has_hi, b);
        jsc_buf_add(b, ") (\".\" \"0\"{1,15})?", sizeof(") (\".\" \"0\"{1,15})?") - 1);
    }
    long long plo = has_lo && lo > 0 ? lo : 0, phi = hi - 1;
    if (!has_hi || phi >= plo) { /* i.f, i >= 0 */
        if (alts++) jsc_buf_add(b, " | ", 3);
        jsc_buf_add(b, "(", 1);
        jschema_int_range(plo, 1, phi, has_hi, b);
        jsc_buf_printf(b, ")%s", frac);
    }
    long long klo = has_hi && -hi > 0 ? -hi : 0, khi = -lo - 1;
    if (!has_lo || khi >= klo) { /* -k.f, k >= 0 */
        if (alts++) jsc_buf_add(b, " | ", 3);
        jsc_buf_add(b, "\"-\" (", 5);
        jschema_int_range(klo, 1, khi, has_lo, b);
        jsc_buf_printf(b, ")%s", frac);
    }
    return alts;
}

/* A number within bounds. Integer-valued bounds: num_int_bounds. A bound with a fraction
 * (up to 15 decimals) adds the part of its unit interval on the allowed side, digit by digit
 * (frac_cmp), to num_int_bounds between the integers inside both bounds; bounds within one
 * unit interval, or with no integer between them, are refused. */
int jschema_gen_number(struct jsc *c, json_t *s, const char *ptr, struct jsc_buf *b) {
    static const char *const kw[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    double dl = 0, dh = 0;
    int has_lo = 0, has_hi = 0, sl = 0, sh = 0, kl = 0, kh = 0;
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(s, kw[i]);
        if (!v) continue;
        if (!json_is_number(v) || fabs(json_number_value(v)) > 1e15)
            return jfail(c, "unsupported keyword '%s' (on a number, a number of magnitude up to "
                         "1e15) at %s/%s", kw[i], ptr, kw[i]);
        double d = json_number_value(v);
        if (i < 2 && (!has_lo || d > dl || (d == dl && i == 1))) dl = d, sl = i == 1, kl = i, has_lo = 1;
        if (i >= 2 && (!has_hi || d < dh || (d == dh && i == 3))) dh = d, sh = i == 3, kh = i, has_hi = 1;
    }
    int mdec;
    if (multiple_dec(c, s, ptr, &mdec)) return -1;
    if (mdec == 0) return jschema_gen_integer(c, s, ptr, b); /* multipleOf 1 */
    /* i.f strictly between two integers: f ends in a non-zero digit (then zeros, when a
     * multipleOf bounds the decimals) */
    char frac[64] = " \".\" [0-9]{0,14} [1-9]";
    if (mdec > 0) snprintf(frac, sizeof frac, " \".\" [0-9]{0,%d} [1-9] \"0\"*", mdec - 1);
    if (!has_lo && !has_hi && mdec > 0) {
        jsc_buf_printf(b, "integer (\".\" [0-9]{1,%d} \"0\"*)?", mdec);
        return 0;
    }
    if (!has_lo && !has_hi) {
        jsc_buf_add(b, "number", sizeof("number") - 1);
        return 0;
    }
    const int lo_dec = has_lo && dl != floor(dl), hi_dec = has_hi && dh != floor(dh);
    /* the integers inside both bounds, and the bounds num_int_bounds takes */
    long long lo = has_lo ? (long long)ceil(dl) : 0, hi = has_hi ? (long long)floor(dh) : 0;
    long long ilo = !lo_dec && sl ? lo + 1 : lo, ihi = !hi_dec && sh ? hi - 1 : hi;
    char ip[64], fp[64];
    int alts = 0;
    if ((lo_dec || hi_dec) && has_lo && has_hi && ilo > ihi) {
        return jfail(c, "unsupported keyword '%s' (bounds with a fraction and no integer "
                     "between them) at %s/%s", kw[lo_dec ? kl : kh], ptr, kw[lo_dec ? kl : kh]);
    }
    jsc_buf_add(b, "(", 1);
    for (int side = 0; side < 2; side++) { /* the unit interval of a bound with a fraction */
        const int dec = side ? hi_dec : lo_dec, strict = side ? sh : sl;
        const double d = side ? dh : dl;
        if (!dec) continue;
        if (mdec > 0)
            return jfail(c, "unsupported keyword 'multipleOf' (beside a bound with a fraction) "
                         "at %s/multipleOf", ptr);
        if (dec_digits(d, ip, sizeof ip, fp, sizeof fp) || strlen(fp) > 15) {
            return jfail(c, "unsupported keyword '%s' (more than 15 decimals) at %s/%s",
                         kw[side ? kh : kl], ptr, kw[side ? kh : kl]);
        }
        /* lower bound: i.f >= I.F, or -(I.f) with f <= F; upper: mirrored */
        const int ge = (side == 0) == (d > 0);
        if (alts++) jsc_buf_add(b, " | ", 3);
        if (d < 0) jsc_buf_add(b, "\"-\" ", 4);
        jsc_buf_lit(b, ip, strlen(ip));
        jsc_buf_add(b, " \".\" ", 5);
        frac_cmp(fp, ge, strict, b);
    }
    alts = num_int_bounds(lo_dec ? lo : (long long)dl, ilo, has_lo, hi_dec ? hi : (long long)dh,
                          ihi, has_hi, alts, frac, b);
    jsc_buf_add(b, ")", 1);
    if (!alts) return jfail(c, "no number satisfies the bounds at %s", ptr);
    return 0;
}

/* ---- keys that are none of a set ---------------------------------------------------- */

/* UTF-8 s -> code points (at most cap); the count. */
static int cps_of(const char *s, unsigned *out, int cap) {
    int n = 0;
    const unsigned char *p = (const unsigned char *)s;
    while (*p && n < cap) {
        unsigned c = *p++;
        int more = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
        if (more) c &= 0x3F >> more;
        for (; more && (*p & 0xC0) == 0x80; more--) c = (c << 6) | (*p++ & 0x3F);
        out[n++] = c;
    }
    return n;
}

#define OK_MAX_CPS 256 /* longer declared keys only exclude their first OK_MAX_CPS chars' node */

struct okey {
    unsigned cp[OK_MAX_CPS];
    int n;
};

static int cmp_okey(const void *a, const void *b) {
    const struct okey *x = a, *y = b;
    for (int i = 0; i < x->n && i < y->n; i++)
        if (x->cp[i] != y->cp[i]) return x->cp[i] < y->cp[i] ? -1 : 1;
    return x->n - y->n;
}

/* The rule of the strings that extend the prefix k[lo].cp[0..d) (shared by k[lo..hi)) and
 * are not among k[lo..hi): a trie node. Characters are the escape-free ones. */
static int other_node(struct jsc *c, const struct okey *k, int lo, int hi, int d) {
    struct jsc_buf b = {0};
    int alts = 0, excl_n = 0;
    if (!(k[lo].n == d)) { /* the prefix itself is not a key */
        jsc_buf_add(&b, "\"\"", 2);
        alts++;
    }
    struct jsc_buf excl = {0};
    for (int i = lo; i < hi;) {
        if (k[i].n == d) {
            i++;
            continue;
        }
        unsigned ch = k[i].cp[d];
        int j = i;
        while (j < hi && k[j].n > d && k[j].cp[d] == ch) j++;
        if (ch >= 0x20 && ch != '"' && ch != '\\' && !(ch >= 0xD800 && ch <= 0xDFFF)) {
            int child = other_node(c, k, i, j, d + 1);
            if (child < 0) {
                jsc_buf_free(&b);
                jsc_buf_free(&excl);
                return -1;
            }
            char u[5] = {0};
            int m = 0;
            if (ch < 0x80) u[m++] = (char)ch;
            else if (ch < 0x800) { u[m++] = (char)(0xC0 | (ch >> 6)); u[m++] = (char)(0x80 | (ch & 63)); }
            else if (ch < 0x10000) {
                u[m++] = (char)(0xE0 | (ch >> 12)); u[m++] = (char)(0x80 | ((ch >> 6) & 63));
                u[m++] = (char)(0x80 | (ch & 63));
            } else {
                u[m++] = (char)(0xF0 | (ch >> 18)); u[m++] = (char)(0x80 | ((ch >> 12) & 63));
                u[m++] = (char)(0x80 | ((ch >> 6) & 63)); u[m++] = (char)(0x80 | (ch & 63));
            }
            if (alts++) jsc_buf_add(&b, " | ", 3);
            jsc_buf_lit(&b, u, (size_t)m);
            jsc_buf_printf(&b, " %s-%d", c->name, child);
            jsc_buf_printf(&excl, "\\U%08X", ch);
            excl_n++;
        }
        i = j;
    }
    /* any other first character, then anything */
    if (alts++) jsc_buf_add(&b, " | ", 3);
    jsc_buf_printf(&b, "[^\"\\\\\\x00-\\x1F%s] [^\"\\\\\\x00-\\x1F]*", excl_n ? excl.p : "");
    jsc_buf_free(&excl);
    int id = b.oom ? jfail(c, "schema too large") : jschema_add_rule(c, &b);
    jsc_buf_free(&b);
    return id;
}

int jschema_gen_other_key(struct jsc *c, const char *const *keys, int n) {
    struct okey *k = calloc((size_t)n + 1, sizeof(*k));
    if (!k) return jfail(c, "out of memory");
    for (int i = 0; i < n; i++) {
        k[i].n = cps_of(keys[i], k[i].cp, OK_MAX_CPS);
        if (keys[i][0] && k[i].n == OK_MAX_CPS) { /* too long to exclude exactly: refused */
            free(k);
            return jfail(c, "unsupported keyword 'additionalProperties' beside a property name "
                         "over %d characters", OK_MAX_CPS - 1);
        }
    }
    qsort(k, (size_t)n, sizeof(*k), cmp_okey);
    int body = other_node(c, k, 0, n, 0);
    free(k);
    if (body < 0) return -1;
    struct jsc_buf b = {0};
    jsc_buf_printf(&b, "\"\\\"\" %s-%d \"\\\"\"", c->name, body);
    int id = jschema_add_rule(c, &b);
    jsc_buf_free(&b);
    return id;
}

/* ---- enum / const values against their sibling keywords ----------------------------- */

static double num_of(json_t *v) { return json_number_value(v); }

/* 1 when the keyword k = kv of a schema holds for value v, 0 when it does not, -1 when this
 * checker cannot tell; keywords about another type than v's hold. */
static int keyword_holds(json_t *s, const char *k, json_t *kv, json_t *v) {
    if (json_is_string(v) && (!strcmp(k, "minLength") || !strcmp(k, "maxLength"))) {
        if (!json_is_integer(kv)) return -1;
        long long n = 0; /* code points: bytes that do not continue a UTF-8 sequence */
        for (const char *p = json_string_value(v); *p; p++) n += ((unsigned char)*p & 0xc0) != 0x80;
        return k[1] == 'i' ? n >= json_integer_value(kv) : n <= json_integer_value(kv);
    }
    if (json_is_string(v) && (!strcmp(k, "pattern") || !strcmp(k, "format"))) return -1;
    if (json_is_number(v) && (!strcmp(k, "minimum") || !strcmp(k, "maximum"))) {
        if (!json_is_number(kv)) return -1;
        json_t *ex = json_object_get(s, k[1] == 'i' ? "exclusiveMinimum" : "exclusiveMaximum");
        const int strict = json_is_true(ex); /* draft 4: a boolean beside the bound */
        const double a = num_of(v), b = num_of(kv);
        return k[1] == 'i' ? (strict ? a > b : a >= b) : (strict ? a < b : a <= b);
    }
    if (json_is_number(v) && (!strcmp(k, "exclusiveMinimum") || !strcmp(k, "exclusiveMaximum"))) {
        if (json_is_boolean(kv)) return 1; /* the draft 4 form, checked with its bound */
        if (!json_is_number(kv)) return -1;
        return k[9] == 'i' ? num_of(v) > num_of(kv) : num_of(v) < num_of(kv);
    }
    if (json_is_number(v) && !strcmp(k, "multipleOf")) {
        if (!json_is_integer(kv) || json_integer_value(kv) <= 0) return -1;
        if (!json_is_integer(v)) return -1;
        return json_integer_value(v) % json_integer_value(kv) == 0;
    }
    if (json_is_array(v) && (!strcmp(k, "minItems") || !strcmp(k, "maxItems"))) {
        if (!json_is_integer(kv)) return -1;
        const long long n = (long long)json_array_size(v);
        return k[1] == 'i' ? n >= json_integer_value(kv) : n <= json_integer_value(kv);
    }
    if (json_is_array(v) && (!strcmp(k, "items") || !strcmp(k, "prefixItems") ||
                             !strcmp(k, "additionalItems")))
        return json_array_size(v) == 0 ? 1 : -1;
    static const char *const obj[] = {"properties", "required", "additionalProperties",
                                      "patternProperties", "minProperties", "maxProperties",
                                      "dependencies", NULL};
    for (int i = 0; obj[i]; i++)
        if (!strcmp(k, obj[i])) return json_is_object(v) ? -1 : 1;
    static const char *const str[] = {"minLength", "maxLength", "pattern", "format", NULL};
    static const char *const num[] = {"minimum", "maximum", "exclusiveMinimum",
                                      "exclusiveMaximum", "multipleOf", NULL};
    static const char *const arr[] = {"minItems", "maxItems", "items", "prefixItems",
                                      "additionalItems", NULL};
    for (int i = 0; str[i]; i++)
        if (!strcmp(k, str[i])) return 1; /* v is not a string: about another type */
    for (int i = 0; num[i]; i++)
        if (!strcmp(k, num[i])) return 1;
    for (int i = 0; arr[i]; i++)
        if (!strcmp(k, arr[i])) return 1;
    return -1;
}

int jschema_value_fits(json_t *s, json_t *v) {
    const char *k;
    json_t *kv;
    int res = 1;
    json_object_foreach(s, k, kv) {
        if (jschema_keyword_kind(k) != 1 || !strcmp(k, "enum") || !strcmp(k, "const") ||
            !strcmp(k, "type") || !strcmp(k, "nullable"))
            continue;
        const int h = keyword_holds(s, k, kv, v);
        if (h < 0) return -1;
        if (!h) res = 0;
    }
    return res;
}

int jschema_values_checkable(json_t *s, json_t *cst, json_t *en) {
    if (cst) return jschema_value_fits(s, cst) >= 0;
    if (!json_is_array(en)) return 0;
    for (size_t i = 0; i < json_array_size(en); i++)
        if (jschema_value_fits(s, json_array_get(en, i)) < 0) return 0;
    return 1;
}
