/*
 * grammar_mask — mask walks over the vocabulary's trie (grammar_vocab.c).
 *
 * A walk visits tokens in byte order keeping one stack set per depth: a token reuses the
 * sets of the prefix it shares with the previous one (lcp) and computes only the rest.
 * When no stack survives a prefix, the whole subtree of tokens sharing it is skipped (a
 * whole-vocabulary walk goes over the trie's nodes, each knowing its subtree's end; the plain
 * walk jumps by next_shorter) or costs O(1) per token (walks over a list).
 *
 * The cache (grammar_cache.c) fills its entries with walks in "sentinel" mode: a stack's
 * frames over gram_sent, where a path that pops into the sentinel with bytes left marks the
 * token uncertain, and a token fully consumed with any path alive (the sentinel included)
 * is accepted whatever lies below.
 *
 * Whole-vocabulary walks (walk_interned) go over interned stack sets with a (set, byte)
 * memo, kept between walks of one grammar (gram_intern_prepare). Per set they learn its chain
 * (set_chain: the groups of bytes after which it goes to one same set, and for how many
 * characters that holds) or its family (set_family), which lets a node's subtree be taken
 * whole or down to a depth (walk_range, walk_bounded).
 */
#include "scheduler/grammar_int.h"

#include <stdlib.h>
#include <string.h>

/* ---- walks -------------------------------------------------------------------------- */

/* First sorted index j > i whose token does not share token i's first d bytes: the first
 * j with lcp[j] < d. Jumping by next_shorter (each jump only passes entries whose lcp is at
 * least the current one's, so at least d) needs a few steps at most, one per trie level. */
static int subtree_end(const struct gram_vocab *V, int i, int d) {
    int j = i + 1;
    while (j < V->n && V->lcp[j] >= d) j = V->next_shorter[j];
    return j;
}

static int level_has(const struct gram_scratch *x, int d, int cap, const struct gnode *what,
                     int want_live) {
    const struct gnode *const *s = x->sets + (size_t)d * (size_t)cap;
    for (int j = 0; j < x->set_n[d]; j++) {
        if (want_live ? (s[j] && s[j] != &gram_sent) : s[j] == what) return 1;
    }
    return 0;
}

static int cmp_ptr(const void *a, const void *b) {
    const uintptr_t p = (uintptr_t) * (const void *const *)a, q = (uintptr_t) * (const void *const *)b;
    return p < q ? -1 : p > q;
}

/* The id of the set v[0..n) (sorted in place), added when new; -1 when the tables are full. */
static int intern_set(struct gram_scratch *x, const struct gnode **v, int n) {
    if (n > 64) {
        qsort(v, (size_t)n, sizeof(*v), cmp_ptr);
    } else { /* most sets are a few stacks: no call per comparison */
        for (int i = 1; i < n; i++) {
            const struct gnode *t = v[i];
            int j = i;
            for (; j > 0 && (uintptr_t)v[j - 1] > (uintptr_t)t; j--) v[j] = v[j - 1];
            v[j] = t;
        }
    }
    uint64_t h = GRAM_FNV0;
    for (int i = 0; i < n; i++) h = gram_fnv(h, (uint64_t)(uintptr_t)v[i]);
    int slot = (int)((h >> 7) & (GRAM_SH_CAP - 1));
    while (x->sh[slot]) {
        const int id = x->sh[slot] - 1;
        if (x->set_len[id] == n && memcmp(x->ss + x->set_off[id], v, (size_t)n * sizeof(*v)) == 0)
            return id;
        slot = (slot + 1) & (GRAM_SH_CAP - 1);
    }
    if (x->n_isets >= GRAM_MAX_SETS || x->ss_n + n > GRAM_SS_CAP) return -1;
    const int id = x->n_isets++;
    x->set_off[id] = x->ss_n;
    x->set_len[id] = n;
    memcpy(x->ss + x->ss_n, v, (size_t)n * sizeof(*v));
    x->ss_n += n;
    uint8_t f = n > 0 ? GRAM_SF_ANY : 0;
    for (int i = 0; i < n; i++)
        f |= v[i] == &gram_sent ? GRAM_SF_SENT : v[i] ? GRAM_SF_LIVE : 0;
    x->set_flags[id] = f;
    x->set_gok[id] = GRAM_GOK_UNKNOWN;
    x->set_reach[id] = 255;
    memset(x->memo + (size_t)id * 256, 0xff, 256 * sizeof(int32_t));
    x->sh[slot] = id + 1;
    x->set_slot[id] = slot;
    return id;
}

/* Empties the node and set hashes (only the slots filled) and the tables behind them. */
static void intern_clear(struct gram_scratch *x) {
    for (int i = 0; i < x->n_nh_used; i++) x->nh[x->nh_used[i]] = NULL;
    for (int i = 0; i < x->n_isets; i++) x->sh[x->set_slot[i]] = 0;
    x->n_nh_used = 0;
    x->n_isets = 0;
    x->ss_n = 0;
    x->n_keep = 0;
    x->intern = 0;
}

/* Before a mask: the interned tables (nodes, sets, memo, chains) are kept from walk to walk
 * of the same grammar, since what one walk learnt of the grammar holds for the next (a
 * string's count, say, is walked again one token further on); they are flushed for another
 * grammar or when half full. Then x's arena starts past the kept nodes. */
void gram_intern_prepare(const struct gram *g, struct gram_scratch *x) {
    if (x->intern_serial != g->serial || x->n_keep > x->lim.max_nodes / 2 ||
        x->n_isets > GRAM_MAX_SETS / 2 || x->ss_n > GRAM_SS_CAP / 2) {
        intern_clear(x);
        x->intern_serial = g->serial;
    }
    x->n_nodes = x->n_keep;
}

/* A walk's state at a trie depth, one int: the interned set's id << GRAM_SV_SHIFT, its
 * GRAM_SF_* flags, and GRAM_SV_UNC when a set on the path before this depth held the
 * sentinel (a token ending below is then uncertain). The memo holds states without UNC.
 * The shift makes state & ~GRAM_SV_LOW the byte offset of the set's memo row (256 int32),
 * one AND on the chain of dependent loads a walk is. */
#define GRAM_SV_SHIFT 10
#define GRAM_SV_LOW ((1 << GRAM_SV_SHIFT) - 1)
_Static_assert((int64_t)GRAM_MAX_SETS << GRAM_SV_SHIFT <= INT32_MAX, "walk states fit an int32");
#define GRAM_SV_UNC 8

/* The state after byte c from interned set cur, on a memo miss: advance, intern, and store
 * the result for c and for every byte the set's stacks cannot tell from c (the same stacks
 * take it, and the closure after a byte does not depend on the byte), so a set costs one
 * advance per byte class (inside a JSON string: a handful) instead of one per byte seen.
 * Returns -1 when a table overflows. */
static int32_t memo_fill(const struct gram *g, struct gram_scratch *x, int cur, unsigned c,
                         const struct gnode **tmp, int cap) {
    const struct gnode *const *in = x->ss + x->set_off[cur];
    const int n = x->set_len[cur];
    const int r = gram_advance(g, x, in, n, c, tmp, cap);
    if (r < 0) return -1;
    const int nx = intern_set(x, tmp, r);
    if (nx < 0) return -1;
    const int32_t v = (int32_t)((nx << GRAM_SV_SHIFT) | x->set_flags[nx]);
    /* same[w]: bytes that each live stack takes exactly when it takes c */
    uint64_t same[4] = {~0ull, ~0ull, ~0ull, ~0ull};
    for (int i = 0; i < n; i++) {
        const struct gnode *st = in[i];
        if (!st || st == &gram_sent) continue;
        const struct gram_set *bs = &g->sets[g->el[st->pos].v];
        const uint64_t flip = gram_set_has(bs, c) ? 0 : ~0ull;
        for (int w = 0; w < 4; w++) same[w] &= bs->w[w] ^ flip;
    }
    int32_t *row = x->memo + (size_t)cur * 256;
    for (int w = 0; w < 4; w++)
        for (uint64_t m = same[w]; m; m &= m - 1) row[w * 64 + __builtin_ctzll(m)] = v;
    return v;
}

/* The walk state after byte c from interned set s, filling the memo on a miss; -1 on
 * overflow. */
static int32_t memo_next(const struct gram *g, struct gram_scratch *x, int s, unsigned c,
                         const struct gnode **tmp, int cap) {
    const int32_t v = x->memo[(size_t)s * 256 + c];
    return v >= 0 ? v : memo_fill(g, x, s, c, tmp, cap);
}

/* UTF-8 decoding states inside a character: the bytes the next one may take, and the state
 * after it (0: the character is whole). */
static const struct {
    uint8_t lo, hi, next;
} utf8_st[8] = {
    {0, 0, 0},          /* 0: between characters (lead bytes: utf8_lead) */
    {0x80, 0xbf, 0},    /* 1: one continuation byte left */
    {0x80, 0xbf, 1},    /* 2: two left */
    {0xa0, 0xbf, 1},    /* 3: after E0 */
    {0x80, 0x9f, 1},    /* 4: after ED */
    {0x80, 0xbf, 2},    /* 5: three left */
    {0x90, 0xbf, 2},    /* 6: after F0 */
    {0x80, 0x8f, 2},    /* 7: after F4 */
};
static int utf8_lead(unsigned c) {
    if (c >= 0xc2 && c <= 0xdf) return 1;
    if (c == 0xe0) return 3;
    if (c == 0xed) return 4;
    if (c >= 0xe1 && c <= 0xef) return 2;
    if (c == 0xf0) return 6;
    if (c == 0xf4) return 7;
    if (c >= 0xf1 && c <= 0xf3) return 5;
    return -1;
}

#define GRAM_LOOP_PAIRS 64 /* (decoding state, set) pairs utf8_ends explores at most */
/* Adds pair (u, cs) to pu/ps unless there; 1 when full. */
static int pair_add(int *pu, int *ps, int *n, int u, int cs) {
    for (int i = 0; i < *n; i++)
        if (pu[i] == u && ps[i] == cs) return 0;
    if (*n == GRAM_LOOP_PAIRS) return 1;
    pu[*n] = u;
    ps[(*n)++] = cs;
    return 0;
}

#define GRAM_FAMILY_MAX 64
static int fam_add(int *fam, int *n, int t);

/* Every valid non-ASCII character from set s, through live sets inside it: with fam NULL,
 * 1 when each ends at set t; else 1 when each ends at a set that is not empty, those sets
 * added to fam[0..*nf) (2 when fam is full). 0 when not (or too many pairs to tell), -1 on
 * overflow. An exploration of (decoding state, set) pairs, each pair's bytes once. */
static int utf8_ends(const struct gram *g, struct gram_scratch *x, int s, int t, int *fam,
                     int *nf, const struct gnode **tmp, int cap) {
    int pu[GRAM_LOOP_PAIRS], ps[GRAM_LOOP_PAIRS], n = 0;
    int32_t last = -1; /* consecutive bytes mostly lead to the same pair: look it up once */
    int last_u = -1;
    for (unsigned c = 0xc2; c <= 0xf4; c++) {
        const int32_t v = memo_next(g, x, s, c, tmp, cap);
        if (v < 0) return -1;
        if (!(v & GRAM_SF_LIVE)) return 0;
        const int u = utf8_lead(c);
        if (v == last && u == last_u) continue;
        last = v;
        last_u = u;
        if (pair_add(pu, ps, &n, u, v >> GRAM_SV_SHIFT)) return 0;
    }
    for (int done = 0; done < n; done++) {
        const int u = pu[done], cs = ps[done], nu = utf8_st[u].next;
        last = -1;
        for (unsigned c = utf8_st[u].lo; c <= utf8_st[u].hi; c++) {
            const int32_t v = memo_next(g, x, cs, c, tmp, cap);
            if (v < 0) return -1;
            if (v == last) continue;
            last = v;
            if (nu == 0 && !fam) {
                if ((v >> GRAM_SV_SHIFT) != t) return 0;
            } else if (nu == 0) {
                if (!(v & GRAM_SF_ANY)) return 0;
                if (fam_add(fam, nf, v >> GRAM_SV_SHIFT)) return 2;
            } else {
                if (!(v & GRAM_SF_LIVE)) return 0;
                if (pair_add(pu, ps, &n, nu, v >> GRAM_SV_SHIFT)) return 0;
            }
        }
    }
    return 1;
}

/* x->set_gok[s] and x->set_succ[s]: the byte groups after each of whose bytes
 * (GRAM_G_NONASCII: characters) set s is one same set, not empty, and that set. Letters and
 * digits first: a set that does not go to one set after all of them (nearly every set
 * outside a string) costs a lookup or two and gets 0. -1 on overflow. */
static int set_groups(const struct gram *g, struct gram_scratch *x, int s,
                      const struct gnode **tmp, int cap) {
    static const char alnum[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    x->set_gok[s] = 0;
    x->set_succ[s] = -1;
    const int32_t v0 = memo_next(g, x, s, '0', tmp, cap);
    if (v0 < 0) return -1;
    if (!(v0 & GRAM_SF_ANY)) return 0;
    const int t = v0 >> GRAM_SV_SHIFT;
    for (const char *p = alnum + 1; *p; p++) {
        const int32_t v = memo_next(g, x, s, (unsigned char)*p, tmp, cap);
        if (v < 0) return -1;
        if ((v >> GRAM_SV_SHIFT) != t) return 0;
    }
    uint8_t fail = 0; /* the other ASCII groups: all or nothing */
    for (unsigned c = 0; c < 0x80; c++) {
        const uint8_t gr = gram_byte_group((uint8_t)c);
        if (gr == GRAM_G_ALNUM || (fail & gr)) continue;
        const int32_t v = memo_next(g, x, s, c, tmp, cap);
        if (v < 0) return -1;
        if ((v >> GRAM_SV_SHIFT) != t) fail |= gr;
    }
    uint8_t gk = (uint8_t)((GRAM_G_ALNUM | GRAM_G_SPACE | GRAM_G_PUNCT | GRAM_G_QUOTE |
                            GRAM_G_BSL | GRAM_G_CTRL) & ~fail);
    const int r = utf8_ends(g, x, s, t, NULL, NULL, tmp, cap);
    if (r < 0) return -1;
    if (r) gk |= GRAM_G_NONASCII;
    x->set_gok[s] = gk;
    x->set_succ[s] = t;
    return 0;
}

/* Adds set t to fam[0..*n) unless there; 1 when full. */
static int fam_add(int *fam, int *n, int t) {
    for (int i = 0; i < *n; i++)
        if (fam[i] == t) return 0;
    if (*n == GRAM_FAMILY_MAX) return 1;
    fam[(*n)++] = t;
    return 0;
}

/* For a set whose characters lead to different sets (a pattern's search inside a string): a
 * family of at most GRAM_FAMILY_MAX sets, s among them, and groups G with letters and digits
 * among them, such that every character of G takes each member to a member, not empty. Then
 * every token made of G's characters is accepted from any member, however long: each member
 * gets G with reach 255. Nothing is set when there is none (s keeps gok 0). -1 on overflow. */
static int set_family(const struct gram *g, struct gram_scratch *x, int s,
                      const struct gnode **tmp, int cap) {
    int fam[GRAM_FAMILY_MAX], n = 0;
    /* not quotes, backslashes or controls: they end or escape a string, and a member after
     * them (the sentence past the string) would refuse letters */
    uint8_t gk = GRAM_G_TEXT;
    fam[n++] = s;
    for (int i = 0; i < n; i++) {
        const int t = fam[i];
        for (unsigned c = '0'; c < 0x80 + '0'; c++) { /* letters and digits early */
            const unsigned b = c & 0x7f;
            const uint8_t gr = gram_byte_group((uint8_t)b);
            if (!(gk & gr)) continue;
            const int32_t v = memo_next(g, x, t, b, tmp, cap);
            if (v < 0) return -1;
            if (!(v & GRAM_SF_ANY)) {
                if (gr == GRAM_G_ALNUM) return 0;
                gk &= (uint8_t)~gr;
                continue;
            }
            if (fam_add(fam, &n, v >> GRAM_SV_SHIFT)) return 0;
        }
        if (gk & GRAM_G_NONASCII) {
            const int r = utf8_ends(g, x, t, -1, fam, &n, tmp, cap);
            if (r < 0) return -1;
            if (r == 2) return 0;
            if (r == 0) gk &= (uint8_t)~GRAM_G_NONASCII;
        }
    }
    for (int i = 0; i < n; i++) { /* not over a member's chain: walk_bounded follows it */
        if (fam[i] != s && x->set_gok[fam[i]] != GRAM_GOK_UNKNOWN) continue;
        x->set_gok[fam[i]] = gk;
        x->set_reach[fam[i]] = 255;
        x->set_rlen[fam[i]] = 255;
        x->set_rcap[fam[i]] = 0;
        x->set_succ[fam[i]] = -1;
    }
    return 0;
}

/* x->set_rlen of s and the sets its chain goes through, computed (set_groups) where not
 * known yet, as far as want characters: past that, or where the tables fill, the last one's
 * is a lower bound (x->set_rcap), and x->set_reach, what walk_nodes reads, says 255 so that
 * a node deeper than the bound comes to walk_range, which asks for more (a long string's
 * count is followed only as deep as the trie needs). -1 on overflow. */
static int set_chain(const struct gram *g, struct gram_scratch *x, int s, int want,
                     const struct gnode **tmp, int cap) {
    int chain[256], n = 0;
    for (int c = s;;) {
        if (x->set_gok[c] == GRAM_GOK_UNKNOWN) {
            if (set_groups(g, x, c, tmp, cap) < 0) return -1;
            if (c == s && (x->set_gok[s] & GRAM_G_TEXT) != GRAM_G_TEXT) {
                /* one successor for letters and digits, or not even that: a family may do
                 * more */
                if (set_family(g, x, s, tmp, cap) < 0) return -1;
                if (x->set_gok[s] && x->set_succ[s] < 0) return 0;
            }
        }
        chain[n++] = c;
        const int t = x->set_succ[c];
        if (!x->set_gok[c] || t == c || t < 0) break;
        if (x->set_gok[t] != GRAM_GOK_UNKNOWN && !x->set_rcap[t]) break; /* known from there */
        if (n > want || n == 255 || x->n_isets > GRAM_MAX_SETS * 3 / 4) break;
        c = t;
    }
    for (int i = n - 1; i >= 0; i--) {
        const int c = chain[i], t = x->set_succ[c];
        const uint8_t gk = x->set_gok[c];
        int r = 0, capd = 0;
        if (gk && t < 0) { /* a family's member */
            r = x->set_rlen[c];
            capd = x->set_rcap[c];
        } else if (gk && t == c) {
            r = 255;
        } else if (gk && x->set_gok[t] == GRAM_GOK_UNKNOWN) {
            r = 1;
            capd = 1;
        } else if (gk && !(gk & ~x->set_gok[t])) {
            r = 1 + x->set_rlen[t];
            capd = x->set_rcap[t];
            if (r > 254) r = 254;
        } else if (gk) {
            r = 1;
        }
        x->set_rlen[c] = (uint8_t)r;
        x->set_rcap[c] = (uint8_t)capd;
        x->set_reach[c] = (uint8_t)(capd ? 255 : r);
    }
    if (x->set_rcap[s] && x->set_rlen[s] < want) { /* no deeper (tables full): take it as is */
        x->set_rcap[s] = 0;
        x->set_reach[s] = x->set_rlen[s];
    }
    return 0;
}

/* Walks the trie's nodes from node k while the memo knows every step; returns the node
 * whose step it does not know (or n_tnodes at the end). The parent of a node visited is
 * live (a node with no live stack skips its subtree), so a node costs one memo lookup, and
 * accepting its token is a branch-free OR (at nodes that end no token: 0 into word 0). No
 * call inside, so the loop keeps its pointers in registers. */
__attribute__((noinline)) static int walk_nodes(const struct gram_vocab *V, const int32_t *memo,
                                                const uint8_t *gok, const uint8_t *reach,
                                                int32_t *lv, struct gram_walk_out *o, int k,
                                                int nt) {
    const struct gram_tnode *const tn = V->tn;
    uint64_t *const acc = o->acc;
    const int32_t uncf = GRAM_SF_SENT | GRAM_SV_UNC;
    for (; k < nt;) {
        const int d = tn[k].depth;
        const int32_t up = lv[d - 1];
        int32_t cur = *(const int32_t *)((const char *)memo + (up & ~GRAM_SV_LOW) +
                                         sizeof(int32_t) * tn[k].byte);
        if (cur < 0) break;
        cur |= (up & uncf) ? GRAM_SV_UNC : 0;
        lv[d] = cur;
        const int32_t id = tn[k].id;
        const int32_t at = id & ~(id >> 31); /* 0 for -1 */
        const uint64_t ok = (uint64_t)((id >= 0) & ((cur & GRAM_SF_ANY) != 0));
        acc[at >> 6] |= ok << (at & 63);
        if (__builtin_expect(id >= 0 && !(cur & GRAM_SF_ANY) && (cur & uncf) && o->unc, 0))
            o->unc[o->n_unc++] = V->tn_first[k];
        if (__builtin_expect(cur & GRAM_SF_LIVE, 1)) {
            /* The set's chain takes every byte below (or it is not known yet:
             * GRAM_GOK_UNKNOWN has every bit, reach 255): the caller takes the subtree, or
             * the part of it the chain reaches when the bytes are ASCII (or computes the
             * chain). */
            if (__builtin_expect(!(tn[k].sub & ~gok[cur >> GRAM_SV_SHIFT]), 0) &&
                (tn[k].below <= reach[cur >> GRAM_SV_SHIFT] ||
                 (!(tn[k].sub & GRAM_G_NONASCII) && reach[cur >> GRAM_SV_SHIFT] > 0)))
                break;
            k++;
            continue;
        }
        /* no byte can follow: the longer tokens below are uncertain or refused */
        const int e = V->tn_end[k];
        if ((cur & uncf) && o->unc)
            for (int i = V->tn_first[k] + (id >= 0); i < V->tn_first[e]; i++)
                o->unc[o->n_unc++] = i;
        k = e;
    }
    return k;
}

/* The start set (level 0 of x->sets) into tmp with interned stacks; -1 on overflow. */
static int canon_root(struct gram_scratch *x, const struct gnode **tmp) {
    for (int i = 0; i < x->set_n[0]; i++) {
        tmp[i] = gram_canon(x, x->sets[i]);
        if (x->overflow) return -1;
    }
    return 0;
}

/* Accepts the tokens of sorted indexes [i, end). */
static void take_range(uint64_t *restrict acc, const int32_t *restrict ord, int i, int end) {
    for (; i < end; i++) acc[ord[i] >> 6] |= 1ull << (ord[i] & 63);
}

static int walk_range(const struct gram *g, struct gram_scratch *x, const struct gram_vocab *V,
                      struct gram_walk_out *o, int k, int end, const struct gnode **tmp, int cap);

/* Below node k, whose set s keeps to its chain for fewer characters than bytes lie below
 * it, all ASCII: the set at a node j levels down is the chain's j-th (each ASCII byte is one
 * character, and the chain's groups go to one set), so the tokens down to its reach are
 * accepted and the nodes one level further continue from its last set. -1 on overflow. */
static int walk_bounded(const struct gram *g, struct gram_scratch *x, const struct gram_vocab *V,
                        struct gram_walk_out *o, int k, int s, const struct gnode **tmp, int cap) {
    const struct gram_tnode *const tn = V->tn;
    const int e = V->tn_end[k], d0 = tn[k].depth, r = x->set_rlen[s];
    int32_t *const lv = x->level_sid;
    int c = s, unc = (lv[d0] & (GRAM_SF_SENT | GRAM_SV_UNC)) != 0;
    for (int j = 0; j < r && c >= 0; j++) {
        unc |= (x->set_flags[c] & GRAM_SF_SENT) != 0;
        c = x->set_succ[c];
    }
    if (c < 0) return walk_range(g, x, V, o, k + 1, e, tmp, cap); /* a chain no longer kept */
    const int32_t last = (int32_t)((c << GRAM_SV_SHIFT) | x->set_flags[c]) | (unc ? GRAM_SV_UNC : 0);
    const int32_t uncf = GRAM_SF_SENT | GRAM_SV_UNC;
    for (int j = k + 1; j < e;) {
        const int32_t id = tn[j].id;
        if (tn[j].depth - d0 <= r) {
            if (id >= 0) o->acc[id >> 6] |= 1ull << (id & 63);
            j++;
            continue;
        }
        int32_t v = x->memo[(size_t)c * 256 + tn[j].byte];
        if (v < 0 && (v = memo_fill(g, x, c, tn[j].byte, tmp, cap)) < 0) return -1;
        const int ej = V->tn_end[j];
        if (v & GRAM_SF_LIVE) { /* the walk goes on below */
            lv[d0 + r] = last;
            if (walk_range(g, x, V, o, j, ej, tmp, cap) < 0) return -1;
            j = ej;
            continue;
        }
        /* past the chain's end nothing follows (mostly): as walk_nodes does */
        v |= (last & uncf) ? GRAM_SV_UNC : 0;
        if (id >= 0 && (v & GRAM_SF_ANY)) o->acc[id >> 6] |= 1ull << (id & 63);
        else if (id >= 0 && (v & uncf) && o->unc) o->unc[o->n_unc++] = V->tn_first[j];
        if ((v & uncf) && o->unc)
            for (int i = V->tn_first[j] + (id >= 0); i < V->tn_first[ej]; i++) o->unc[o->n_unc++] = i;
        j = ej;
    }
    return 0;
}

/* The walk of nodes [k, end) (a run of whole subtrees), the sets above them in x->level_sid.
 * -1 on overflow. */
static int walk_range(const struct gram *g, struct gram_scratch *x, const struct gram_vocab *V,
                      struct gram_walk_out *o, int k, int end, const struct gnode **tmp, int cap) {
    int32_t *const lv = x->level_sid;
    for (;;) {
        k = walk_nodes(V, x->memo, x->set_gok, x->set_reach, lv, o, k, end);
        if (k >= end) return 0;
        const struct gram_tnode *t = &V->tn[k];
        const int up = lv[t->depth - 1] >> GRAM_SV_SHIFT;
        const int32_t cur = x->memo[(size_t)up * 256 + t->byte];
        if (cur < 0) { /* a memo miss (node k is visited again) */
            if (memo_fill(g, x, up, t->byte, tmp, cap) < 0) return -1;
            continue;
        }
        const int s = cur >> GRAM_SV_SHIFT;
        if (x->set_gok[s] == GRAM_GOK_UNKNOWN || (t->below > x->set_rlen[s] && x->set_rcap[s])) {
            /* chain not known yet, or not as deep as this node's subtree (visited again) */
            if (set_chain(g, x, s, t->below, tmp, cap) < 0) return -1;
            continue;
        }
        const int e = V->tn_end[k];
        if (t->below > x->set_rlen[s]) {
            if (walk_bounded(g, x, V, o, k, s, tmp, cap) < 0) return -1;
            k = e;
            continue;
        }
        /* Node k's state keeps to its chain for every byte below it: each token below is at a
         * set of the chain, not empty, at every character's end and at live sets inside
         * characters, so all are accepted, whatever the sentinel flags (a token is uncertain
         * only when its set is empty). Node k itself was counted by walk_nodes. Below a
         * text path from a start that took u_text, they are in it already. */
        if (!(x->u_on && V->ptext[k]))
            take_range(o->acc, V->ord, V->tn_first[k] + (t->id >= 0), V->tn_first[e]);
        k = e;
    }
}

/* A whole-vocabulary walk over interned sets with the (set, byte) memo: inside a JSON string
 * nearly every prefix leads to the same few sets, so most trie nodes cost one lookup.
 * Returns 1 (nothing reported twice: o->n_unc is restored) when the tables overflow; the
 * caller then walks the plain way. */
static int walk_interned(const struct gram *g, struct gram_scratch *x, const struct gram_vocab *V,
                         struct gram_walk_out *o) {
    const int cap = g->lim.max_stacks < x->lim.max_stacks ? g->lim.max_stacks : x->lim.max_stacks;
    const int n_unc0 = o->n_unc, nodes0 = x->n_nodes;
    x->intern = 1;
    const struct gnode **tmp = x->sets + cap; /* level 0 keeps the root */
    if (canon_root(x, tmp)) goto overflow;
    int sid = intern_set(x, tmp, x->set_n[0]);
    if (sid < 0) goto overflow;
    int32_t *const lv = x->level_sid;
    const int32_t uncf = GRAM_SF_SENT | GRAM_SV_UNC;
    lv[0] = (int32_t)((sid << GRAM_SV_SHIFT) | x->set_flags[sid]);
    if (!(lv[0] & GRAM_SF_LIVE)) { /* no byte at all: every token uncertain or refused */
        if (o->unc && (lv[0] & uncf))
            for (int i = 0; i < V->n; i++) o->unc[o->n_unc++] = i;
        goto done;
    }
    /* A start whose chain takes text as deep as any token goes (inside a string): the tokens
     * the walk would take below text paths are u_text, one OR (walk_range leaves them). */
    x->u_on = 0;
    if ((x->set_gok[sid] == GRAM_GOK_UNKNOWN || x->set_rcap[sid]) &&
        set_chain(g, x, sid, V->max_len, tmp, cap) < 0)
        goto overflow;
    if (!(GRAM_G_TEXT & ~x->set_gok[sid]) && x->set_rlen[sid] >= V->max_len) {
        const size_t words = ((size_t)V->n_vocab + 63) / 64;
        for (size_t w = 0; w < words; w++) o->acc[w] |= V->u_text[w];
        x->u_on = 1;
    }
    const int rw = walk_range(g, x, V, o, 0, V->n_tnodes, tmp, cap);
    x->u_on = 0;
    if (rw < 0) goto overflow;
done:
    x->intern = 0;
    x->n_keep = x->n_nodes;
    return GRAM_OK;
overflow:
    intern_clear(x);
    x->overflow = 0;
    x->n_nodes = nodes0;
    o->n_unc = n_unc0;
    return 1;
}

/* walk_interned's way over a sorted list of tokens (llcp: each one's common prefix with the
 * one before): a state per depth, one memo lookup per byte past that prefix. Returns 1 on
 * overflow, as walk_interned. */
static int walk_list_interned(const struct gram *g, struct gram_scratch *x,
                              const struct gram_vocab *V, const int32_t *list,
                              const uint8_t *llcp, int n, struct gram_walk_out *o) {
    const int cap = g->lim.max_stacks < x->lim.max_stacks ? g->lim.max_stacks : x->lim.max_stacks;
    const int n_unc0 = o->n_unc, nodes0 = x->n_nodes;
    x->intern = 1;
    const struct gnode **tmp = x->sets + cap;
    if (canon_root(x, tmp)) goto overflow;
    const int sid = intern_set(x, tmp, x->set_n[0]);
    if (sid < 0) goto overflow;
    int32_t *const lv = x->level_sid;
    const int32_t uncf = GRAM_SF_SENT | GRAM_SV_UNC;
    lv[0] = (int32_t)((sid << GRAM_SV_SHIFT) | x->set_flags[sid]);
    int valid = 0;
    for (int i = 0; i < n; i++) {
        const int s = list[i];
        const uint8_t *b = V->bytes + V->off[s];
        const int len = (int)(V->off[s + 1] - V->off[s]);
        int d = i == 0 ? 0 : llcp[i];
        if (d > valid) d = valid;
        for (; d < len && (lv[d] & GRAM_SF_LIVE); d++) {
            const int32_t v = memo_next(g, x, lv[d] >> GRAM_SV_SHIFT, b[d], tmp, cap);
            if (v < 0) goto overflow;
            lv[d + 1] = v | ((lv[d] & uncf) ? GRAM_SV_UNC : 0);
        }
        valid = d;
        if (d == len && (lv[d] & GRAM_SF_ANY)) {
            o->acc[V->ord[s] >> 6] |= 1ull << (V->ord[s] & 63);
        } else if ((lv[d] & uncf) && o->unc) {
            o->unc[o->n_unc++] = s;
        }
    }
    x->intern = 0;
    x->n_keep = x->n_nodes;
    return GRAM_OK;
overflow:
    intern_clear(x);
    x->overflow = 0;
    x->n_nodes = nodes0;
    o->n_unc = n_unc0;
    return 1;
}

/* Level 0 of x->sets holds the start set. list == NULL walks all V->n tokens. */
int gram_walk(const struct gram *g, struct gram_scratch *x, const struct gram_vocab *V,
                const int32_t *list, const uint8_t *llcp, int n, struct gram_walk_out *o) {
    const int cap = g->lim.max_stacks < x->lim.max_stacks ? g->lim.max_stacks : x->lim.max_stacks;
    if (!x->no_intern) {
        const int fresh = x->n_isets == 0;
        int rc = list ? walk_list_interned(g, x, V, list, llcp, n, o) : walk_interned(g, x, V, o);
        if (rc == 1 && !fresh) /* the kept tables filled up: again with them empty */
            rc = list ? walk_list_interned(g, x, V, list, llcp, n, o) : walk_interned(g, x, V, o);
        if (rc != 1) return rc;
    }
    int valid = 0;
    x->unc[0] = 0;
    x->mark[1] = x->n_nodes;
    for (int i = 0; i < n;) {
        const int s = list ? list[i] : i;
        const uint8_t *b = V->bytes + V->off[s];
        const int len = (int)(V->off[s + 1] - V->off[s]);
        int k = i == 0 ? 0 : (list ? llcp[i] : V->lcp[s]);
        if (k > valid) k = valid;
        if (k < valid) x->n_nodes = x->mark[k + 1];
        int d = k;
        while (d < len) {
            if (!level_has(x, d, cap, NULL, 1)) break;
            x->mark[d + 1] = x->n_nodes;
            const int r = gram_advance(g, x, x->sets + (size_t)d * (size_t)cap, x->set_n[d],
                                       b[d], x->sets + (size_t)(d + 1) * (size_t)cap, cap);
            if (r < 0) return GRAM_EBUDGET;
            x->set_n[d + 1] = r;
            x->unc[d + 1] = (uint8_t)(x->unc[d] | level_has(x, d, cap, &gram_sent, 0));
            d++;
        }
        valid = d;
        if (d == len && x->set_n[len] > 0) {
            const int32_t id = V->ord[s];
            o->acc[id >> 6] |= 1ull << (id & 63);
            i++;
            continue;
        }
        const int uncertain = x->unc[d] || level_has(x, d, cap, &gram_sent, 0);
        if (uncertain) {
            if (o->unc) o->unc[o->n_unc++] = s;
            i++;
        } else if (!list && d < len) {
            i = subtree_end(V, i, d); /* every longer token with this prefix dies too */
        } else {
            i++;
        }
    }
    return GRAM_OK;
}
