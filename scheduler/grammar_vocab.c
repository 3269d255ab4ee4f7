/*
 * grammar_vocab — a vocabulary's byte strings sorted (the trie), its nodes in depth-first
 * order with what a mask walk reads at each (grammar_int.h, struct gram_tnode), and lookups
 * by id and by longest prefix.
 */
#include "scheduler/grammar_int.h"

#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer.h"

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
    for (int k = nn - 1; k >= 0; k--) {
        int deep = 0;
        for (int c = k + 1; c < gv->tn_end[k]; c = gv->tn_end[c])
            if (gv->tn[c].below + 1 > deep) deep = gv->tn[c].below + 1;
        gv->tn[k].below = (uint8_t)(deep > 255 ? 255 : deep);
    }
    for (int k = 0; k < nn; k++) /* the prefix through node k is token tn_first[k]'s */
        bad[k] = !utf8_whole(gv->bytes + gv->off[gv->tn_first[k]], gv->tn[k].depth);
    for (int k = nn - 1; k >= 0; k--) {
        uint8_t below = 0;
        for (int c = k + 1; c < gv->tn_end[k]; c = gv->tn_end[c])
            below |= gram_byte_group(gv->tn[c].byte) | desc[c] |
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

/* ptext (the nodes whose prefix is all text bytes, GRAM_G_TEXT) and u_text (the tokens a
 * walk from a set whose chain takes text as deep as any token goes, a string's inside,
 * takes as whole subtrees: below the topmost text-path nodes whose subtrees are text). */
static int build_text(struct gram_vocab *gv) {
    const int nn = gv->n_tnodes;
    gv->ptext = malloc((size_t)nn + 1);
    gv->u_text = calloc(((size_t)gv->n_vocab + 63) / 64 + 1, sizeof(uint64_t));
    if (!gv->ptext || !gv->u_text) return -1;
    uint8_t at[256 + 1];
    at[0] = 1;
    for (int k = 0; k < nn; k++) {
        const int d = gv->tn[k].depth;
        gv->ptext[k] = at[d] = (uint8_t)(at[d - 1] && (gram_byte_group(gv->tn[k].byte) & GRAM_G_TEXT));
    }
    for (int k = 0; k < nn;) {
        if (gv->ptext[k] && !(gv->tn[k].sub & ~GRAM_G_TEXT)) {
            const int e = gv->tn_end[k];
            for (int i = gv->tn_first[k]; i < gv->tn_first[e]; i++)
                gv->u_text[gv->ord[i] >> 6] |= 1ull << (gv->ord[i] & 63);
            k = e;
        } else {
            k++;
        }
    }
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
            gv->tn[k] = (struct gram_tnode){d == len - 1 ? gv->ord[i] : -1, b[d], (uint8_t)(d + 1), 0, 0};
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
    return build_sub(gv) ? -1 : build_text(gv);
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
    free(gv->ptext);
    free(gv->u_text);
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
