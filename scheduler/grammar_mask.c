/*
 * grammar_mask — the vocabulary as a sorted trie, mask walks, and the per-grammar cache.
 *
 * A walk visits tokens in byte order keeping one stack set per depth: a token reuses the
 * sets of the prefix it shares with the previous one (lcp) and computes only the rest.
 * When no stack survives a prefix, the whole subtree of tokens sharing it is skipped (a
 * whole-vocabulary walk goes over the trie's nodes, each knowing its subtree's end; the plain
 * walk jumps by next_shorter) or costs O(1) per token (walks over a list).
 *
 * The cache (see grammar.h) is filled by a walk in "sentinel" mode: the stack is the key's
 * frames over gram_sent, and a path that pops into the sentinel with bytes left marks the
 * token uncertain; a token fully consumed with any path alive (the sentinel included: the
 * key's frames are done exactly at the token's end) is accepted whatever lies below.
 * Filling an entry allocates (once per key and grammar); lookups do not.
 */
#include "scheduler/grammar_int.h"

#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer.h"

/* ---- vocabulary --------------------------------------------------------------------- */

struct vsort {
    const uint8_t *b;
    int len;
    int rank; /* among equal strings, lower ranks sort first (gram_vocab_longest's pick) */
    int32_t id;
};

static int cmp_tok(const void *x, const void *y) {
    const struct vsort *a = x, *b = y;
    int n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->b, b->b, (size_t)n);
    if (c) return c;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static uint8_t byte_group(uint8_t c) {
    if (c >= 0x80) return GRAM_G_NONASCII;
    if (c < 0x20 || c == 0x7f) return GRAM_G_CTRL;
    if (c == '"') return GRAM_G_QUOTE;
    if (c == '\\') return GRAM_G_BSL;
    if (c == ' ') return GRAM_G_SPACE;
    if ((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'))
        return GRAM_G_ALNUM;
    return GRAM_G_PUNCT;
}

/* 1 when b[0..n) is whole, valid UTF-8 (no character cut off). */
static int utf8_whole(const uint8_t *b, int n) {
    for (int i = 0, r; i < n; i += r)
        if ((r = tok_utf8_seq(b + i, n - i)) <= 0) return 0;
    return 1;
}

#define GRAM_SKIP_MIN 16 /* nodes in a subtree (its root included) worth taking whole */

/* tn[k].sub for every node: the groups of the bytes below it, GRAM_G_BAD for a token below
 * that is not whole UTF-8, and GRAM_G_BAD when its own prefix is not (then its state is
 * inside a character). Children come after their parent: one reverse pass. */
static int build_sub(struct gram_vocab *gv) {
    const int nn = gv->n_tnodes;
    uint8_t *bad = malloc((size_t)nn + 1), *desc = calloc((size_t)nn + 1, 1);
    if (!bad || !desc) {
        free(bad);
        free(desc);
        return -1;
    }
    for (int k = 0; k < nn; k++) /* the prefix through node k is token tn_first[k]'s */
        bad[k] = !utf8_whole(gv->bytes + gv->off[gv->tn_first[k]], gv->tn[k].depth);
    for (int k = nn - 1; k >= 0; k--) {
        uint8_t below = 0;
        for (int c = k + 1; c < gv->tn_end[k]; c = gv->tn_end[c])
            below |= byte_group(gv->tn[c].byte) | desc[c] |
                     (gv->tn[c].id >= 0 && bad[c] ? GRAM_G_BAD : 0);
        desc[k] = below;
        /* A small subtree is walked: leaving the walk's loop for it would cost more. */
        const int small = gv->tn_end[k] - k <= GRAM_SKIP_MIN;
        gv->tn[k].sub = (uint8_t)(below | (bad[k] || small ? GRAM_G_BAD : 0));
    }
    free(bad);
    free(desc);
    return 0;
}

/* The trie's nodes in depth-first order (see struct gram_vocab): token i adds one node per
 * byte past its common prefix with token i - 1, the last one ending it; a token equal to the
 * previous one (a byte-fallback token and a one-byte token) repeats the previous token's
 * last node, so every node ends at most one token. */
static int build_nodes(struct gram_vocab *gv) {
    int nn = 0;
    for (int i = 0; i < gv->n; i++) {
        const int len = (int)(gv->off[i + 1] - gv->off[i]);
        nn += len > gv->lcp[i] ? len - gv->lcp[i] : 1;
    }
    gv->n_tnodes = nn;
    gv->tn = malloc(((size_t)nn + 1) * sizeof(*gv->tn));
    gv->tn_end = malloc(((size_t)nn + 1) * sizeof(int32_t));
    gv->tn_first = malloc(((size_t)nn + 1) * sizeof(int32_t));
    int32_t *stk = malloc(((size_t)nn + 1) * sizeof(int32_t));
    if (!gv->tn || !gv->tn_end || !gv->tn_first || !stk) {
        free(stk);
        return -1;
    }
    int k = 0;
    for (int i = 0; i < gv->n; i++) {
        const uint8_t *b = gv->bytes + gv->off[i];
        const int len = (int)(gv->off[i + 1] - gv->off[i]);
        for (int d = len > gv->lcp[i] ? gv->lcp[i] : len - 1; d < len; d++, k++) {
            gv->tn[k] = (struct gram_tnode){d == len - 1 ? gv->ord[i] : -1, b[d], (uint8_t)(d + 1), 0};
            gv->tn_first[k] = i;
        }
    }
    gv->tn_first[nn] = gv->n;
    /* tn_end[k]: the first node after k of depth <= k's, with a stack of waiting nodes */
    int top = 0;
    for (int j = 0; j <= nn; j++) {
        const int dep = j < nn ? gv->tn[j].depth : 0;
        while (top > 0 && dep <= gv->tn[stk[top - 1]].depth) gv->tn_end[stk[--top]] = j;
        stk[top++] = j;
    }
    free(stk);
    return build_sub(gv);
}

static int vocab_create(int n_vocab, const char *const *tok, const int *len,
                        const uint8_t *rank, struct gram_vocab **out) {
    *out = NULL;
    struct gram_vocab *gv = calloc(1, sizeof(*gv));
    struct vsort *vs = malloc((size_t)(n_vocab > 0 ? n_vocab : 1) * sizeof(*vs));
    if (!gv || !vs) goto fail;
    gv->n_vocab = n_vocab;
    size_t total = 0;
    int n = 0;
    for (int i = 0; i < n_vocab; i++) {
        if (len[i] <= 0) continue;
        if ((uint8_t)tok[i][0] == 0xff) { /* reserved: only token i's own control encoding */
            uint8_t enc[GRAM_TOK_BYTES];
            gram_token_bytes(i, enc);
            if (len[i] != GRAM_TOK_BYTES || memcmp(tok[i], enc, GRAM_TOK_BYTES)) continue;
        }
        vs[n++] = (struct vsort){(const uint8_t *)tok[i], len[i] > 255 ? 255 : len[i],
                                 rank ? rank[i] : 0, i};
        total += (size_t)vs[n - 1].len;
    }
    qsort(vs, (size_t)n, sizeof(*vs), cmp_tok);
    gv->n = n;
    gv->ord = malloc((size_t)(n + 1) * sizeof(int32_t));
    gv->lcp = malloc((size_t)(n + 1));
    gv->off = malloc((size_t)(n + 1) * sizeof(uint32_t));
    gv->bytes = malloc(total + 1);
    gv->pos_of = malloc((size_t)(n_vocab + 1) * sizeof(int32_t));
    gv->next_shorter = malloc((size_t)(n + 1) * sizeof(int32_t));
    if (!gv->ord || !gv->lcp || !gv->off || !gv->bytes || !gv->pos_of || !gv->next_shorter)
        goto fail;
    for (int i = 0; i < n_vocab; i++) gv->pos_of[i] = -1;
    uint32_t at = 0;
    for (int i = 0; i < n; i++) {
        gv->ord[i] = vs[i].id;
        gv->pos_of[vs[i].id] = i;
        gv->off[i] = at;
        memcpy(gv->bytes + at, vs[i].b, (size_t)vs[i].len);
        at += (uint32_t)vs[i].len;
        if (vs[i].len > gv->max_len) gv->max_len = vs[i].len;
        int l = 0;
        if (i > 0) {
            int m = vs[i].len < vs[i - 1].len ? vs[i].len : vs[i - 1].len;
            while (l < m && vs[i].b[l] == vs[i - 1].b[l]) l++;
        }
        gv->lcp[i] = (uint8_t)l;
    }
    gv->off[n] = at;
    /* next_shorter[i]: the first j > i with lcp[j] < lcp[i] (n: none), with a stack of the
     * indexes still waiting for theirs (lcp non-decreasing from bottom to top) */
    free(vs);
    vs = NULL;
    int32_t *stk = malloc((size_t)(n + 1) * sizeof(int32_t));
    if (!stk) goto fail;
    int top = 0;
    for (int i = 0; i <= n; i++) {
        const int l = i < n ? gv->lcp[i] : -1;
        while (top > 0 && l < gv->lcp[stk[top - 1]]) gv->next_shorter[stk[--top]] = i;
        stk[top++] = i;
    }
    free(stk);
    if (build_nodes(gv)) goto fail;
    *out = gv;
    return GRAM_OK;
fail:
    free(vs);
    gram_vocab_destroy(gv);
    return GRAM_ENOMEM;
}

int gram_vocab_create_raw(int n_vocab, const char *const *tok, const int *len,
                          struct gram_vocab **out) {
    return vocab_create(n_vocab, tok, len, NULL, out);
}

int gram_vocab_create(const struct tok_vocab *v, struct gram_vocab **out) {
    *out = NULL;
    const int nv = tok_n_vocab(v);
    char **tok = calloc((size_t)nv, sizeof(char *));
    int *len = calloc((size_t)nv, sizeof(int));
    uint8_t *rank = calloc((size_t)nv, 1); /* a byte token after a piece of the same text */
    int rc = GRAM_ENOMEM;
    if (!tok || !len || !rank) goto done;
    for (int i = 0; i < nv; i++) {
        char buf[512];
        int k;
        if (tok_type(v, i) == TOK_TYPE_CONTROL && i <= GRAM_TOK_MAX_ID) {
            gram_token_bytes(i, (uint8_t *)buf);
            k = GRAM_TOK_BYTES;
        } else {
            k = tok_token_to_bytes(v, i, 0, buf, (int)sizeof buf);
        }
        if (k <= 0) continue;
        if (k > (int)sizeof buf) k = (int)sizeof buf;
        tok[i] = malloc((size_t)k);
        if (!tok[i]) goto done;
        memcpy(tok[i], buf, (size_t)k);
        len[i] = k;
        rank[i] = tok_type(v, i) == TOK_TYPE_BYTE;
    }
    rc = vocab_create(nv, (const char *const *)tok, len, rank, out);
done:
    if (tok)
        for (int i = 0; i < nv; i++) free(tok[i]);
    free(tok);
    free(len);
    free(rank);
    return rc;
}

void gram_token_bytes(int32_t id, uint8_t out[GRAM_TOK_BYTES]) {
    out[0] = 0xff;
    for (int i = 0; i < 4; i++) out[1 + i] = (uint8_t)(0x80 | ((id >> (6 * (3 - i))) & 0x3f));
}

void gram_vocab_destroy(struct gram_vocab *gv) {
    if (!gv) return;
    free(gv->ord);
    free(gv->lcp);
    free(gv->off);
    free(gv->bytes);
    free(gv->pos_of);
    free(gv->next_shorter);
    free(gv->tn);
    free(gv->tn_end);
    free(gv->tn_first);
    free(gv);
}

int gram_vocab_n(const struct gram_vocab *gv) { return gv->n_vocab; }
int gram_vocab_max_len(const struct gram_vocab *gv) { return gv->max_len; }

int gram_vocab_token(const struct gram_vocab *gv, int32_t id, const uint8_t **b) {
    if (id < 0 || id >= gv->n_vocab || gv->pos_of[id] < 0) {
        *b = NULL;
        return 0;
    }
    int s = gv->pos_of[id];
    *b = gv->bytes + gv->off[s];
    return (int)(gv->off[s + 1] - gv->off[s]);
}

int gram_vocab_longest(const struct gram_vocab *gv, const uint8_t *b, int n, int32_t *id,
                       int *extended) {
    for (int len = n < gv->max_len ? n : gv->max_len; len > 0; len--) {
        int lo = 0, hi = gv->n; /* the first sorted string >= b[0..len) */
        while (lo < hi) {
            const int mid = lo + (hi - lo) / 2;
            const int ml = (int)(gv->off[mid + 1] - gv->off[mid]);
            int c = memcmp(gv->bytes + gv->off[mid], b, (size_t)(ml < len ? ml : len));
            if (c == 0) c = ml - len;
            if (c < 0) lo = mid + 1;
            else hi = mid;
        }
        if (lo < gv->n && (int)(gv->off[lo + 1] - gv->off[lo]) == len &&
            !memcmp(gv->bytes + gv->off[lo], b, (size_t)len)) {
            *id = gv->ord[lo];
            int j = lo + 1; /* past the other tokens of the same bytes */
            while (j < gv->n && (int)(gv->off[j + 1] - gv->off[j]) == len && gv->lcp[j] >= len) j++;
            if (extended) *extended = j < gv->n && gv->lcp[j] >= len;
            return len;
        }
    }
    return 0;
}

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

struct walk_out {
    uint64_t *acc;        /* bit per token id */
    int32_t *unc;         /* sentinel mode: sorted indexes of uncertain tokens */
    int n_unc;
};

static int cmp_ptr(const void *a, const void *b) {
    const uintptr_t p = (uintptr_t) * (const void *const *)a, q = (uintptr_t) * (const void *const *)b;
    return p < q ? -1 : p > q;
}

/* The id of the set v[0..n) (sorted in place), added when new; -1 when the tables are full. */
static int intern_set(struct gram_scratch *x, const struct gnode **v, int n) {
    if (n > 16) {
        qsort(v, (size_t)n, sizeof(*v), cmp_ptr);
    } else { /* most sets are a few stacks: no call per comparison */
        for (int i = 1; i < n; i++) {
            const struct gnode *t = v[i];
            int j = i;
            for (; j > 0 && (uintptr_t)v[j - 1] > (uintptr_t)t; j--) v[j] = v[j - 1];
            v[j] = t;
        }
    }
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) h = (h ^ (uint64_t)(uintptr_t)v[i]) * 1099511628211ull;
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
    memset(x->memo + (size_t)id * 256, 0xff, 256 * sizeof(int32_t));
    x->sh[slot] = id + 1;
    x->set_slot[id] = slot;
    return id;
}

/* Empties the node and set hashes (only the slots this walk filled). */
static void intern_clear(struct gram_scratch *x) {
    for (int i = 0; i < x->n_nh_used; i++) x->nh[x->nh_used[i]] = NULL;
    for (int i = 0; i < x->n_isets; i++) x->sh[x->set_slot[i]] = 0;
    x->n_nh_used = 0;
    x->n_isets = 0;
    x->intern = 0;
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

/* 1 when every valid non-ASCII character takes interned set s back to s, through live sets
 * inside the character: an exploration of (decoding state, set) pairs, each pair's bytes
 * once. 0 when not (or too many pairs to tell), -1 on overflow. */
#define GRAM_LOOP_PAIRS 64
static int loops_utf8(const struct gram *g, struct gram_scratch *x, int s,
                      const struct gnode **tmp, int cap) {
    int pu[GRAM_LOOP_PAIRS], ps[GRAM_LOOP_PAIRS], n = 0, done = 0;
    for (unsigned c = 0xc2; c <= 0xf4; c++) {
        const int32_t v = memo_next(g, x, s, c, tmp, cap);
        if (v < 0) return -1;
        if (!(v & GRAM_SF_LIVE)) return 0;
        int seen = 0;
        for (int i = 0; i < n && !seen; i++) seen = pu[i] == utf8_lead(c) && ps[i] == v >> GRAM_SV_SHIFT;
        if (seen) continue;
        if (n == GRAM_LOOP_PAIRS) return 0;
        pu[n] = utf8_lead(c);
        ps[n++] = v >> GRAM_SV_SHIFT;
    }
    for (; done < n; done++) {
        const int u = pu[done], cs = ps[done];
        for (unsigned c = utf8_st[u].lo; c <= utf8_st[u].hi; c++) {
            const int32_t v = memo_next(g, x, cs, c, tmp, cap);
            if (v < 0) return -1;
            const int nu = utf8_st[u].next;
            if (nu == 0) {
                if ((v >> GRAM_SV_SHIFT) != s) return 0;
                continue;
            }
            if (!(v & GRAM_SF_LIVE)) return 0;
            int seen = 0;
            for (int i = 0; i < n && !seen; i++) seen = pu[i] == nu && ps[i] == v >> GRAM_SV_SHIFT;
            if (seen) continue;
            if (n == GRAM_LOOP_PAIRS) return 0;
            pu[n] = nu;
            ps[n++] = v >> GRAM_SV_SHIFT;
        }
    }
    return 1;
}

/* x->set_gok[s]: the byte groups after each of whose bytes (GRAM_G_NONASCII: characters)
 * set s is s again. Letters and digits first: a set that does not loop on all of them
 * (nearly every set outside a string) costs a lookup or two and gets 0. -1 on overflow. */
static int set_loops(const struct gram *g, struct gram_scratch *x, int s,
                     const struct gnode **tmp, int cap) {
    static const char alnum[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    x->set_gok[s] = 0;
    for (const char *p = alnum; *p; p++) {
        const int32_t v = memo_next(g, x, s, (unsigned char)*p, tmp, cap);
        if (v < 0) return -1;
        if ((v >> GRAM_SV_SHIFT) != s) return 0;
    }
    uint8_t fail = 0; /* the other ASCII groups: all or nothing */
    for (unsigned c = 0; c < 0x80; c++) {
        const uint8_t gr = byte_group((uint8_t)c);
        if (gr == GRAM_G_ALNUM || (fail & gr)) continue;
        const int32_t v = memo_next(g, x, s, c, tmp, cap);
        if (v < 0) return -1;
        if ((v >> GRAM_SV_SHIFT) != s) fail |= gr;
    }
    uint8_t gk = (uint8_t)((GRAM_G_ALNUM | GRAM_G_SPACE | GRAM_G_PUNCT | GRAM_G_QUOTE |
                            GRAM_G_BSL | GRAM_G_CTRL) & ~fail);
    const int r = loops_utf8(g, x, s, tmp, cap);
    if (r < 0) return -1;
    if (r) gk |= GRAM_G_NONASCII;
    x->set_gok[s] = gk;
    return 0;
}

/* Walks the trie's nodes from node k while the memo knows every step; returns the node
 * whose step it does not know (or n_tnodes at the end). The parent of a node visited is
 * live (a node with no live stack skips its subtree), so a node costs one memo lookup, and
 * accepting its token is a branch-free OR (at nodes that end no token: 0 into word 0). No
 * call inside, so the loop keeps its pointers in registers. */
__attribute__((noinline)) static int walk_nodes(const struct gram_vocab *V, const int32_t *memo,
                                                const uint8_t *gok, int32_t *lv,
                                                struct walk_out *o, int k) {
    const struct gram_tnode *const tn = V->tn;
    const int nt = V->n_tnodes;
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
            /* The set loops on every byte below (or its loops are not known yet: GRAM_GOK_UNKNOWN
             * has every bit): the caller takes the subtree (or computes them). */
            if (__builtin_expect(!(tn[k].sub & ~gok[cur >> GRAM_SV_SHIFT]), 0)) break;
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

/* A whole-vocabulary walk over interned sets with the (set, byte) memo: inside a JSON string
 * nearly every prefix leads to the same few sets, so most trie nodes cost one lookup.
 * Returns 1 (nothing reported twice: o->n_unc is restored) when the tables overflow; the
 * caller then walks the plain way. */
static int walk_interned(const struct gram *g, struct gram_scratch *x, const struct gram_vocab *V,
                         struct walk_out *o) {
    const int cap = g->lim.max_stacks < x->lim.max_stacks ? g->lim.max_stacks : x->lim.max_stacks;
    const int n_unc0 = o->n_unc, nodes0 = x->n_nodes;
    x->n_nh_used = 0;
    x->n_isets = 0;
    x->ss_n = 0;
    x->intern = 1;
    const struct gnode **tmp = x->sets + cap; /* level 0 keeps the root */
    memcpy(tmp, x->sets, (size_t)x->set_n[0] * sizeof(*tmp));
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
    for (int k = 0;;) {
        k = walk_nodes(V, x->memo, x->set_gok, lv, o, k);
        if (k >= V->n_tnodes) break;
        const struct gram_tnode *t = &V->tn[k];
        const int up = lv[t->depth - 1] >> GRAM_SV_SHIFT;
        const int32_t cur = x->memo[(size_t)up * 256 + t->byte];
        if (cur < 0) { /* a memo miss (node k is visited again) */
            if (memo_fill(g, x, up, t->byte, tmp, cap) < 0) goto overflow;
            continue;
        }
        const int s = cur >> GRAM_SV_SHIFT;
        if (x->set_gok[s] == GRAM_GOK_UNKNOWN) { /* loops not known yet (visited again) */
            if (set_loops(g, x, s, tmp, cap) < 0) goto overflow;
            continue;
        }
        /* Node k's state loops on every byte below it: each token below comes back to that
         * live set at every character's end and stays live inside characters, so all are
         * accepted, whatever the sentinel flags (a token is uncertain only when its set is
         * empty). Node k itself was counted by walk_nodes. */
        const int e = V->tn_end[k];
        for (int i = V->tn_first[k] + (t->id >= 0); i < V->tn_first[e]; i++)
            o->acc[V->ord[i] >> 6] |= 1ull << (V->ord[i] & 63);
        k = e;
    }
done:
    intern_clear(x);
    return GRAM_OK;
overflow:
    intern_clear(x);
    x->overflow = 0;
    x->n_nodes = nodes0;
    o->n_unc = n_unc0;
    return 1;
}

/* Level 0 of x->sets holds the start set. list == NULL walks all V->n tokens. */
static int walk(const struct gram *g, struct gram_scratch *x, const struct gram_vocab *V,
                const int32_t *list, const uint8_t *llcp, int n, struct walk_out *o) {
    const int cap = g->lim.max_stacks < x->lim.max_stacks ? g->lim.max_stacks : x->lim.max_stacks;
    if (!list && !x->no_intern) {
        const int rc = walk_interned(g, x, V, o);
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

/* ---- cache -------------------------------------------------------------------------- */

static void make_key(const struct gnode *st, int32_t *key) {
    int i = 0;
    for (; i < GRAM_CACHE_DEPTH && st; i++, st = st->up) key[i] = st->pos;
    key[i] = st ? -2 : -1;
    for (int j = i + 1; j <= GRAM_CACHE_DEPTH; j++) key[j] = 0;
}

/* Fill an entry for key (outside the lock). */
static int fill(const struct gram *g, struct gram_scratch *x, const struct gram_vocab *V,
                const int32_t *key, struct gram_centry *e) {
    memset(e, 0, sizeof(*e));
    memcpy(e->key, key, sizeof(e->key));
    const size_t words = ((size_t)V->n_vocab + 63) / 64;
    e->acc = calloc(words, sizeof(uint64_t));
    int32_t *unc = malloc((size_t)(V->n + 1) * sizeof(int32_t));
    if (!e->acc || !unc) goto fail;
    x->n_nodes = 0;
    x->overflow = 0;
    x->depth_guard = 0;
    int nk = 0;
    while (nk <= GRAM_CACHE_DEPTH && key[nk] >= 0) nk++;
    const struct gnode *st = key[nk] == -2 ? &gram_sent : NULL;
    for (int i = nk - 1; i >= 0; i--) st = gram_node(x, key[i], st);
    if (x->overflow) goto fail;
    x->sets[0] = st;
    x->set_n[0] = 1;
    struct walk_out o = {e->acc, unc, 0};
    if (walk(g, x, V, NULL, NULL, V->n, &o)) goto fail;
    e->n_unc = o.n_unc;
    e->unc = malloc((size_t)(o.n_unc + 1) * sizeof(int32_t));
    e->unc_lcp = malloc((size_t)(o.n_unc + 1));
    if (!e->unc || !e->unc_lcp) goto fail;
    memcpy(e->unc, unc, (size_t)o.n_unc * sizeof(int32_t));
    for (int i = 0; i < o.n_unc; i++) {
        int l = 0;
        if (i > 0) {
            const uint8_t *a = V->bytes + V->off[unc[i - 1]], *b = V->bytes + V->off[unc[i]];
            int la = (int)(V->off[unc[i - 1] + 1] - V->off[unc[i - 1]]);
            int lb = (int)(V->off[unc[i] + 1] - V->off[unc[i]]);
            int m = la < lb ? la : lb;
            while (l < m && a[l] == b[l]) l++;
        }
        e->unc_lcp[i] = (uint8_t)l;
    }
    free(unc);
    return GRAM_OK;
fail:
    free(unc);
    free(e->acc);
    free(e->unc);
    free(e->unc_lcp);
    memset(e, 0, sizeof(*e));
    return x->overflow ? GRAM_EBUDGET : GRAM_ENOMEM;
}

/* The entry for key, filled on first use; NULL when the cache cannot hold it. */
static const struct gram_centry *cache_get(struct gram *g, struct gram_scratch *x,
                                           const struct gram_vocab *V, const int32_t *key,
                                           int *rc) {
    *rc = GRAM_OK;
    pthread_mutex_lock(&g->lock);
    g->lookups++;
    if (!g->cache_vocab) g->cache_vocab = V;
    const struct gram_centry *hit = NULL;
    if (g->cache_vocab == V)
        for (int i = 0; i < g->n_cache && !hit; i++)
            if (memcmp(g->cache[i].key, key, sizeof(g->cache[i].key)) == 0) hit = &g->cache[i];
    int room = g->cache_vocab == V && g->n_cache < GRAM_CACHE_MAX;
    if (hit) g->hits++;
    pthread_mutex_unlock(&g->lock);
    if (hit || !room) return hit;
    struct gram_centry e;
    *rc = fill(g, x, V, key, &e);
    if (*rc) return NULL;
    pthread_mutex_lock(&g->lock);
    if (!g->cache) g->cache = calloc(GRAM_CACHE_MAX, sizeof(*g->cache));
    for (int i = 0; i < g->n_cache && !hit; i++)
        if (memcmp(g->cache[i].key, key, sizeof(g->cache[i].key)) == 0) hit = &g->cache[i];
    int stored = 0;
    if (!hit && g->cache && g->n_cache < GRAM_CACHE_MAX) {
        g->cache[g->n_cache] = e;
        hit = &g->cache[g->n_cache++];
        stored = 1;
    }
    pthread_mutex_unlock(&g->lock);
    if (!stored) {
        free(e.acc);
        free(e.unc);
        free(e.unc_lcp);
    }
    return hit;
}

void gram_cache_free(struct gram *g) {
    for (int i = 0; i < g->n_cache; i++) {
        free(g->cache[i].acc);
        free(g->cache[i].unc);
        free(g->cache[i].unc_lcp);
    }
    free(g->cache);
    g->cache = NULL;
    g->n_cache = 0;
}

void gram_cache_stats(struct gram *g, int *entries, long long *lookups, long long *hits) {
    pthread_mutex_lock(&g->lock);
    if (entries) *entries = g->n_cache;
    if (lookups) *lookups = g->lookups;
    if (hits) *hits = g->hits;
    pthread_mutex_unlock(&g->lock);
}

/* ---- masks -------------------------------------------------------------------------- */

int gram_match_mask(struct gram_match *m, struct gram_scratch *x, const struct gram_vocab *V,
                    uint64_t *mask, int *n_allowed, int uncached) {
    struct gram *g = m->g;
    const size_t words = ((size_t)V->n_vocab + 63) / 64;
    memset(mask, 0, words * sizeof(uint64_t));
    if (V->max_len > x->max_len) return GRAM_EINVAL;
    int rc = GRAM_OK;
    for (int i = 0; i < m->n_st && !rc; i++) {
        const struct gnode *st = m->st[i];
        if (!st) continue;
        const struct gram_centry *e = NULL;
        if (!uncached) {
            int32_t key[GRAM_CACHE_DEPTH + 1];
            make_key(st, key);
            e = cache_get(g, x, V, key, &rc);
            if (rc) break;
        }
        x->n_nodes = 0;
        x->overflow = 0;
        x->depth_guard = 0;
        x->sets[0] = st;
        x->set_n[0] = 1;
        struct walk_out o = {mask, NULL, 0};
        if (!e) {
            rc = walk(g, x, V, NULL, NULL, V->n, &o);
            continue;
        }
        for (size_t w = 0; w < words; w++) mask[w] |= e->acc[w];
        if (e->n_unc) rc = walk(g, x, V, e->unc, e->unc_lcp, e->n_unc, &o);
    }
    int cnt = 0;
    for (size_t w = 0; w < words; w++) cnt += __builtin_popcountll(mask[w]);
    if (n_allowed) *n_allowed = cnt;
    return rc;
}
