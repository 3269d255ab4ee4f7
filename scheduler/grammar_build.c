/*
 * grammar_build — the builder under the GBNF compiler (grammar_gbnf.c): rules and their
 * elements, byte sets (hashed), code-point classes as UTF-8 byte sequences, repetitions as
 * helper rules, and the checks every grammar passes (defined rules, no left recursion).
 * Also the grammar's reference counting and status strings.
 */
#include "scheduler/grammar_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gram_bfail(struct bld *b, int status, const char *fmt, ...) {
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

int gram_at_off(const struct bld *b) { return (int)(b->p - b->start); }

/* ---- builder ------------------------------------------------------------------------ */

int gram_push(struct bld *b, int rule, int type, uint32_t v) {
    if (++b->n_elems > b->max_elems)
        return gram_bfail(b, GRAM_EBUDGET, "grammar too large (more than %d elements)", b->max_elems);
    struct bvec *r = &b->rules[rule];
    if (r->n == r->cap) {
        int nc = r->cap ? r->cap * 2 : 8;
        void *ne = realloc(r->e, (size_t)nc * sizeof(*r->e));
        if (!ne) return gram_bfail(b, GRAM_ENOMEM, "out of memory");
        r->e = ne;
        r->cap = nc;
    }
    r->e[r->n].type = (uint32_t)type;
    r->e[r->n].v = v;
    r->n++;
    return 0;
}

int gram_new_rule(struct bld *b, const char *name, size_t len) {
    if (b->n_rules == b->cap_rules) {
        int nc = b->cap_rules ? b->cap_rules * 2 : 64;
        void *nr = realloc(b->rules, (size_t)nc * sizeof(*b->rules));
        if (nr) b->rules = nr;
        void *nn = realloc(b->names, (size_t)nc * sizeof(*b->names));
        if (nn) b->names = nn;
        void *nd = realloc(b->defined, (size_t)nc);
        if (nd) b->defined = nd;
        if (!nr || !nn || !nd) return gram_bfail(b, GRAM_ENOMEM, "out of memory");
        b->cap_rules = nc;
    }
    int id = b->n_rules++;
    memset(&b->rules[id], 0, sizeof(b->rules[id]));
    b->defined[id] = name ? 0 : 1;
    b->names[id] = NULL;
    if (name) {
        b->names[id] = strndup(name, len);
        if (!b->names[id]) return gram_bfail(b, GRAM_ENOMEM, "out of memory");
    }
    return id;
}

static uint64_t hash_name(const char *s, size_t n) {
    uint64_t h = GRAM_FNV0;
    for (size_t i = 0; i < n; i++) h = gram_fnv(h, (uint8_t)s[i]);
    return h;
}

/* The rule named s[0..n), created (undefined) on first sight. */
int gram_rule_id(struct bld *b, const char *s, size_t n) {
    if (b->ht_cap == 0 || (b->n_rules + 1) * 2 > b->ht_cap) {
        int nc = b->ht_cap ? b->ht_cap * 2 : 256;
        int *nh = calloc((size_t)nc, sizeof(int));
        if (!nh) return gram_bfail(b, GRAM_ENOMEM, "out of memory");
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
    int id = gram_new_rule(b, s, n);
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
        if (!nh) return gram_bfail(b, GRAM_ENOMEM, "out of memory");
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
        if (!ns) return gram_bfail(b, GRAM_ENOMEM, "out of memory");
        b->sets = ns;
        b->cap_sets = nc;
    }
    b->sets[b->n_sets] = *s;
    b->set_ht[i] = b->n_sets + 1;
    if (n1 == 1) b->single[one] = b->n_sets;
    return b->n_sets++;
}

int gram_push_byte(struct bld *b, int rule, unsigned c) {
    struct gram_set s = {{0}};
    s.w[c >> 6] |= 1ull << (c & 63);
    int si = add_set(b, &s);
    return si < 0 ? -1 : gram_push(b, rule, GE_SET, (uint32_t)si);
}

int gram_push_range(struct bld *b, int rule, unsigned lo, unsigned hi) {
    struct gram_set s = {{0}};
    for (unsigned c = lo; c <= hi; c++) s.w[c >> 6] |= 1ull << (c & 63);
    int si = add_set(b, &s);
    return si < 0 ? -1 : gram_push(b, rule, GE_SET, (uint32_t)si);
}

/* ---- code-point classes ------------------------------------------------------------- */


int gram_utf8_enc(uint32_t c, uint8_t *o) {
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
    int n = gram_utf8_enc(lo, a);
    gram_utf8_enc(hi, z);
    if (b->rules[rule].n > 0 && gram_push(b, rule, GE_ALT, 0)) return -1;
    for (int k = 0; k < n; k++)
        if (gram_push_range(b, rule, a[k], z[k])) return -1;
    return 0;
}

static int cmp_range(const void *x, const void *y) {
    const struct cp_range *a = x, *c = y;
    return a->lo < c->lo ? -1 : a->lo > c->lo;
}

/* Element(s) for a class: one SET for ASCII, else a REF to a helper rule. */
int gram_emit_class(struct bld *b, int rule, struct cp_range *r, int n, int negate) {
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
        if (!has_ascii) return gram_bfail(b, GRAM_ESYNTAX, "empty character class at byte %d", gram_at_off(b));
        int si = add_set(b, &ascii);
        return si < 0 ? -1 : gram_push(b, rule, GE_SET, (uint32_t)si);
    }
    int h = gram_new_rule(b, NULL, 0);
    if (h < 0) return -1;
    if (has_ascii) {
        int si = add_set(b, &ascii);
        if (si < 0 || gram_push(b, h, GE_SET, (uint32_t)si)) return -1;
    }
    /* Non-ASCII code points as exact UTF-8 (utf8_split): no overlong form, surrogate or
     * code point past U+10FFFF, so each match is one code point of valid UTF-8 (a looser
     * lead-byte form would let three bytes decode to three U+FFFD and break maxLength).
     * Every non-ASCII code point (negated classes such as a JSON string's) is one rule
     * shared by the whole grammar, referenced, not copied: its 8 sequences cost once. */
    int all = 0;
    for (int i = 0; i < n; i++)
        if (u[i].lo <= 0x80 && u[i].hi >= 0x10ffff) all = 1;
    for (int i = 0; i + 1 < n && !all; i++)
        if (u[i].lo <= 0x80 && u[i].hi >= 0xd7ff && u[i + 1].lo <= 0xe000 && u[i + 1].hi >= 0x10ffff)
            all = 1;
    if (all) {
        if (!b->nonascii1) {
            const int na = gram_new_rule(b, NULL, 0);
            if (na < 0 || utf8_split(b, na, 0x80, 0xd7ff) || utf8_split(b, na, 0xe000, 0x10ffff) ||
                gram_push(b, na, GE_END, 0))
                return -1;
            b->nonascii1 = na + 1;
        }
        if (b->rules[h].n > 0 && gram_push(b, h, GE_ALT, 0)) return -1;
        if (gram_push(b, h, GE_REF, (uint32_t)(b->nonascii1 - 1))) return -1;
        if (gram_push(b, h, GE_END, 0)) return -1;
        return gram_push(b, rule, GE_REF, (uint32_t)h);
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
    if (gram_push(b, h, GE_END, 0)) return -1;
    return gram_push(b, rule, GE_REF, (uint32_t)h);
}

int gram_wrap_item(struct bld *b, int rule, int from) {
    struct bvec *r = &b->rules[rule];
    if (r->n - from == 1 && r->e[from].type != GE_ALT) return 0;
    int h = gram_new_rule(b, NULL, 0);
    if (h < 0) return -1;
    r = &b->rules[rule];
    for (int i = from; i < r->n; i++)
        if (gram_push(b, h, (int)r->e[i].type, r->e[i].v)) return -1;
    if (gram_push(b, h, GE_END, 0)) return -1;
    b->n_elems -= r->n - from;
    r->n = from;
    return gram_push(b, rule, GE_REF, (uint32_t)h);
}

/* R ::= x R | empty (star) or R ::= x | empty (opt); returns R. */
static int helper_rep(struct bld *b, struct gram_elem x, int star, int inner) {
    int h = gram_new_rule(b, NULL, 0);
    if (h < 0) return -1;
    if (gram_push(b, h, (int)x.type, x.v)) return -1;
    if (star && gram_push(b, h, GE_REF, (uint32_t)h)) return -1;
    if (inner >= 0 && gram_push(b, h, GE_REF, (uint32_t)inner)) return -1;
    if (gram_push(b, h, GE_ALT, 0) || gram_push(b, h, GE_END, 0)) return -1;
    return h;
}

/* Counts past GRAM_REP_BLOCK are built from blocks of about sqrt(count) copies, so that a
 * `maxLength` of 32,767 costs about 2,000 elements instead of 100,000. x{n}: a block rule
 * B ::= x{s} referenced n / s times, then n % s copies. x{0,k} with k = q*s + r (r < s):
 * O_0 ::= x{0,r}, O_i ::= B O_(i-1) | x{0,s-1}; O_i matches 0 .. i*s + r copies (the second
 * branch covers fewer than s, the first s more than O_(i-1)), so O_q is x{0,k}. The two
 * branches of a level share their first s - 1 copies, so a matcher holds at most two stacks
 * per level where there was one. */
#define GRAM_REP_BLOCK 1024

static long rep_block_size(long n) {
    long s = 1;
    while (s * s < n) s++;
    return s;
}

static int block_rule(struct bld *b, struct gram_elem x, long n) {
    int h = gram_new_rule(b, NULL, 0);
    if (h < 0) return -1;
    for (long i = 0; i < n; i++)
        if (gram_push(b, h, (int)x.type, x.v)) return -1;
    return gram_push(b, h, GE_END, 0) ? -1 : h;
}

/* Elements x{lo,hi} will take (an estimate within a few per block, for the budget check). */
static long long rep_cost(long lo, long hi) {
    long long c = lo > GRAM_REP_BLOCK ? 3LL * rep_block_size(lo) : lo;
    if (hi < 0) return c + 4;
    const long k = hi - lo;
    return c + (k > GRAM_REP_BLOCK ? 11LL * rep_block_size(k) : 4LL * k);
}

/* x{n}, copies pushed onto rule. */
static int rep_exact(struct bld *b, int rule, struct gram_elem x, long n) {
    long cnt = n, s = 0;
    int blk = -1;
    if (n > GRAM_REP_BLOCK) {
        s = rep_block_size(n);
        if ((blk = block_rule(b, x, s)) < 0) return -1;
        for (long i = 0; i < n / s; i++)
            if (gram_push(b, rule, GE_REF, (uint32_t)blk)) return -1;
        cnt = n % s;
    }
    for (long i = 0; i < cnt; i++)
        if (gram_push(b, rule, (int)x.type, x.v)) return -1;
    return 0;
}

/* x{0,k}, k > 0: returns the rule that matches it. */
static int rep_upto(struct bld *b, struct gram_elem x, long k) {
    const long s = k > GRAM_REP_BLOCK ? rep_block_size(k) : k + 1;
    const long r = k > GRAM_REP_BLOCK ? k % s : k;
    int last = -1, tail = -1, upto_r = -1; /* x{0,j} for j = 1 .. s - 1 */
    for (long j = 1; j < s; j++) {
        last = helper_rep(b, x, 0, last);
        if (last < 0) return -1;
        if (j == r) upto_r = last;
    }
    if (k <= GRAM_REP_BLOCK) return last;
    tail = last;
    const int blk = block_rule(b, x, s);
    if (blk < 0) return -1;
    int o = upto_r; /* O_0; -1 when r == 0 (matches nothing but the empty string) */
    for (long i = 1; i <= k / s; i++) {
        int h = gram_new_rule(b, NULL, 0);
        if (h < 0 || gram_push(b, h, GE_REF, (uint32_t)blk)) return -1;
        if (o >= 0 && gram_push(b, h, GE_REF, (uint32_t)o)) return -1;
        if (gram_push(b, h, GE_ALT, 0) || gram_push(b, h, GE_REF, (uint32_t)tail) ||
            gram_push(b, h, GE_END, 0))
            return -1;
        o = h;
    }
    return o;
}

/* Apply x{lo,hi} (hi < 0: unbounded) to the single element at the end of rule. */
int gram_repeat(struct bld *b, int rule, long lo, long hi) {
    struct bvec *r = &b->rules[rule];
    struct gram_elem x = r->e[r->n - 1];
    r->n--;
    b->n_elems--;
    if (hi >= 0 && hi < lo) return gram_bfail(b, GRAM_ESYNTAX, "repetition {%ld,%ld} has max < min", lo, hi);
    if (rep_cost(lo, hi) > b->max_elems)
        return gram_bfail(b, GRAM_EBUDGET, "grammar too large (more than %d elements)", b->max_elems);
    if (rep_exact(b, rule, x, lo)) return -1;
    if (hi < 0) {
        int h = helper_rep(b, x, 1, -1);
        return h < 0 ? -1 : gram_push(b, rule, GE_REF, (uint32_t)h);
    }
    if (hi == lo) return 0;
    const int h = rep_upto(b, x, hi - lo);
    return h < 0 ? -1 : gram_push(b, rule, GE_REF, (uint32_t)h);
}

/* ---- checks and flattening ---------------------------------------------------------- */

/* Refuses undefined rules and left recursion (a rule reachable from itself through a
 * prefix of elements that can all match nothing). */
int gram_check(struct bld *b) {
    int n = b->n_rules;
    for (int r = 0; r < n; r++)
        if (!b->defined[r])
            return gram_bfail(b, GRAM_EINVAL, "undefined rule '%s'", b->names[r] ? b->names[r] : "?");
    const size_t nn = n > 0 ? (size_t)n : 1;
    uint8_t *nullable = calloc(nn, 1);
    uint8_t *color = calloc(nn, 1);
    int *stk = malloc(nn * 3 * sizeof(int));
    if (!nullable || !color || !stk) {
        free(nullable);
        free(color);
        free(stk);
        return gram_bfail(b, GRAM_ENOMEM, "out of memory");
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
                    rc = gram_bfail(b, GRAM_EINVAL, "left recursion through rule '%s'",
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

void gram_bld_free(struct bld *b) {
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
