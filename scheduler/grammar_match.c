/*
 * grammar_match — stacks and the incremental matcher.
 *
 * A stack is a chain of struct gnode (top first); its top is always a byte-set element once
 * closed. closure() expands rule references at the top (pushing the continuation unless it
 * is the end of an alternative, so right recursion such as R ::= x R keeps stacks flat) and
 * pops finished alternatives. A set holds distinct stacks only (compared frame by frame,
 * pointer equality ending the comparison early). Every node of an operation comes from the
 * scratch's bump arena; a matcher copies its live stacks into its own double-buffered pool
 * after each accepted token, so nothing allocates while decoding.
 */
#include "scheduler/grammar_int.h"

#include <stdlib.h>
#include <string.h>

const struct gnode gram_sent = {-2, NULL};

#define GRAM_CLOSURE_DEPTH 20000 /* rule expansions without a byte: a bound, not a budget */
#define GRAM_MATCH_NODES_DIV 8   /* a matcher's pool is max_nodes / this */

static uint64_t node_hash(int32_t pos, const struct gnode *up) {
    return ((uint64_t)(uint32_t)pos * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)(uintptr_t)up * 0xff51afd7ed558ccdull);
}

const struct gnode *gram_node(struct gram_scratch *x, int32_t pos, const struct gnode *up) {
    int slot = -1;
    if (x->intern) {
        const int mask = x->nh_cap - 1;
        slot = (int)((node_hash(pos, up) >> 17) & (uint64_t)mask);
        while (x->nh[slot]) {
            if (x->nh[slot]->pos == pos && x->nh[slot]->up == up) return x->nh[slot];
            slot = (slot + 1) & mask;
        }
        if (x->n_nodes * 2 >= x->nh_cap) {
            x->overflow = 1;
            return NULL;
        }
    }
    if (x->n_nodes >= x->lim.max_nodes) {
        x->overflow = 1;
        return NULL;
    }
    struct gnode *n = &x->nodes[x->n_nodes++];
    n->pos = pos;
    n->up = up;
    if (slot >= 0) {
        x->nh[slot] = n;
        x->nh_used[x->n_nh_used++] = slot;
    }
    return n;
}

const struct gnode *gram_canon(struct gram_scratch *x, const struct gnode *st) {
    int n = 0;
    const struct gnode *up = st;
    for (; up && up != &gram_sent; up = up->up) {
        if (n >= x->lim.max_nodes) {
            x->overflow = 1;
            return NULL;
        }
        x->posbuf[n++] = up->pos;
    }
    while (n > 0) { /* rebuild from the bottom */
        up = gram_node(x, x->posbuf[--n], up);
        if (x->overflow) return NULL;
    }
    return up;
}

static int stack_eq(const struct gnode *a, const struct gnode *b) {
    while (a != b) {
        if (!a || !b || a == &gram_sent || b == &gram_sent || a->pos != b->pos) return 0;
        a = a->up;
        b = b->up;
    }
    return 1;
}

static int dd_slot(const struct gnode *p, int mask) {
    return (int)((((uint64_t)(uintptr_t)p >> 3) * 0x9e3779b97f4a7c15ull) >> 40) & mask;
}

static int set_add(struct gram_scratch *x, const struct gnode **out, int *n, int cap,
                   const struct gnode *st) {
    if (x->intern) { /* every node is the one of its stack (gram_canon): equal is identical */
        if (*n < GRAM_DD_MIN) {
            for (int i = 0; i < *n; i++)
                if (out[i] == st) return 0;
        } else { /* a big set: a hash of its pointers, built at GRAM_DD_MIN entries */
            const int mask = x->dd_cap - 1;
            if (!x->dd_on) {
                x->dd_on = 1;
                for (int i = 0; i < *n; i++) {
                    int h = dd_slot(out[i], mask);
                    while (x->dd_gen[h] == x->gen) h = (h + 1) & mask;
                    x->dd[h] = out[i];
                    x->dd_gen[h] = x->gen;
                }
            }
            int h = dd_slot(st, mask);
            for (; x->dd_gen[h] == x->gen; h = (h + 1) & mask)
                if (x->dd[h] == st) return 0;
            if (*n < cap) {
                x->dd[h] = st;
                x->dd_gen[h] = x->gen;
            }
        }
    } else {
        for (int i = 0; i < *n; i++)
            if (stack_eq(out[i], st)) return 0;
    }
    if (*n >= cap) {
        x->overflow = 1;
        return -1;
    }
    out[(*n)++] = st;
    return 0;
}

static int is_end(const struct gram *g, int32_t pos) {
    return g->el[pos].type == GE_ALT || g->el[pos].type == GE_END;
}

int gram_closure(const struct gram *g, struct gram_scratch *x, const struct gnode *st,
                 const struct gnode **out, int *n, int cap) {
    if (++x->depth_guard > GRAM_CLOSURE_DEPTH) {
        x->overflow = 1;
        x->depth_guard--;
        return -1;
    }
    int rc = 0;
    for (;;) {
        if (!st || st == &gram_sent) {
            rc = set_add(x, out, n, cap, st);
            break;
        }
        const struct gram_elem e = g->el[st->pos];
        if (e.type == GE_SET) {
            rc = set_add(x, out, n, cap, st);
            break;
        }
        if (e.type != GE_REF) { /* end of an alternative: pop */
            st = st->up;
            continue;
        }
        const int32_t next = st->pos + 1;
        const struct gnode *up = is_end(g, next) ? st->up : gram_node(x, next, st->up);
        if (x->overflow) {
            rc = -1;
            break;
        }
        for (int32_t k = g->alt_first[e.v]; k < g->alt_first[e.v + 1]; k++) {
            const int32_t a = g->alts[k];
            const struct gnode *child = is_end(g, a) ? up : gram_node(x, a, up);
            if (x->overflow || gram_closure(g, x, child, out, n, cap)) {
                rc = -1;
                break;
            }
        }
        break;
    }
    x->depth_guard--;
    return rc;
}

int gram_advance(const struct gram *g, struct gram_scratch *x, const struct gnode *const *in,
                 int n_in, unsigned c, const struct gnode **out, int cap) {
    int n = 0;
    if (x->dd_on) { /* a new set: set_add's hash starts empty */
        x->dd_on = 0;
        if (++x->gen == 0) {
            memset(x->dd_gen, 0, (size_t)x->dd_cap * sizeof(*x->dd_gen));
            x->gen = 1;
        }
    }
    for (int i = 0; i < n_in; i++) {
        const struct gnode *st = in[i];
        if (!st || st == &gram_sent) continue;
        if (!gram_set_has(&g->sets[g->el[st->pos].v], c)) continue;
        const int32_t next = st->pos + 1;
        const struct gnode *cont = is_end(g, next) ? st->up : gram_node(x, next, st->up);
        if (x->overflow || gram_closure(g, x, cont, out, &n, cap)) return -1;
    }
    return n;
}

/* ---- scratch ------------------------------------------------------------------------ */

int gram_scratch_create(const struct gram_limits *lim, int max_token_len,
                        struct gram_scratch **out) {
    *out = NULL;
    struct gram_scratch *x = calloc(1, sizeof(*x));
    if (!x) return GRAM_ENOMEM;
    if (lim) x->lim = *lim;
    else gram_limits_default(&x->lim);
    x->max_len = max_token_len < 1 ? 1 : max_token_len;
    size_t levels = (size_t)x->max_len + 2;
    x->nodes = malloc((size_t)x->lim.max_nodes * sizeof(*x->nodes));
    x->sets = malloc(levels * (size_t)x->lim.max_stacks * sizeof(*x->sets));
    x->set_n = calloc(levels, sizeof(int));
    x->unc = calloc(levels, 1);
    x->mark = calloc(levels, sizeof(int));
    x->nh_cap = 1;
    while (x->nh_cap < 2 * x->lim.max_nodes) x->nh_cap *= 2;
    x->nh = calloc((size_t)x->nh_cap, sizeof(*x->nh));
    x->ss = malloc((size_t)GRAM_SS_CAP * sizeof(*x->ss));
    x->set_off = malloc(GRAM_MAX_SETS * sizeof(int));
    x->set_len = malloc(GRAM_MAX_SETS * sizeof(int));
    x->set_flags = malloc(GRAM_MAX_SETS);
    x->sh = calloc(GRAM_SH_CAP, sizeof(int));
    x->nh_used = malloc((size_t)x->lim.max_nodes * sizeof(int));
    x->set_slot = malloc(GRAM_MAX_SETS * sizeof(int));
    x->memo = malloc((size_t)GRAM_MAX_SETS * 256 * sizeof(int32_t));
    x->level_sid = calloc(levels, sizeof(*x->level_sid));
    x->set_gok = malloc(GRAM_MAX_SETS);
    x->set_reach = malloc(GRAM_MAX_SETS);
    x->set_rlen = malloc(GRAM_MAX_SETS);
    x->set_rcap = malloc(GRAM_MAX_SETS);
    x->set_succ = malloc(GRAM_MAX_SETS * sizeof(int32_t));
    x->keys = malloc((size_t)x->lim.max_stacks * GRAM_KEY_W * sizeof(int32_t));
    x->posbuf = malloc((size_t)x->lim.max_nodes * sizeof(int32_t));
    x->dd_cap = 64;
    while (x->dd_cap < 4 * x->lim.max_stacks) x->dd_cap *= 2;
    x->dd = malloc((size_t)x->dd_cap * sizeof(*x->dd));
    x->dd_gen = calloc((size_t)x->dd_cap, sizeof(*x->dd_gen));
    x->gen = 1;
    if (!x->nodes || !x->sets || !x->set_n || !x->unc || !x->mark || !x->nh || !x->ss ||
        !x->set_off || !x->set_len || !x->set_flags || !x->sh || !x->memo || !x->level_sid ||
        !x->nh_used || !x->set_slot || !x->set_gok || !x->keys ||
        !x->set_reach || !x->set_succ || !x->set_rlen || !x->set_rcap ||
        !x->posbuf || !x->dd || !x->dd_gen) {
        gram_scratch_destroy(x);
        return GRAM_ENOMEM;
    }
    *out = x;
    return GRAM_OK;
}

void gram_scratch_destroy(struct gram_scratch *x) {
    if (!x) return;
    free(x->nodes);
    free(x->sets);
    free(x->set_n);
    free(x->unc);
    free(x->mark);
    free(x->nh);
    free(x->ss);
    free(x->set_off);
    free(x->set_len);
    free(x->set_gok);
    free(x->set_reach);
    free(x->set_rlen);
    free(x->set_rcap);
    free(x->set_succ);
    free(x->keys);
    free(x->posbuf);
    free(x->dd);
    free(x->dd_gen);
    free(x->set_flags);
    free(x->sh);
    free(x->nh_used);
    free(x->set_slot);
    free(x->memo);
    free(x->level_sid);
    free(x);
}

/* ---- matcher ------------------------------------------------------------------------ */

static int match_cap(const struct gram *g) {
    int c = g->lim.max_nodes / GRAM_MATCH_NODES_DIV;
    return c < 1024 ? 1024 : c;
}

/* Copy set[0..n) (nodes anywhere) into the matcher's other pool and make it current. */
static int match_store(struct gram_match *m, const struct gnode *const *set, int n) {
    const int cap = match_cap(m->g);
    struct gnode *pool = m->pool[m->cur ^ 1];
    int used = 0;
    for (int i = 0; i < n; i++) {
        const struct gnode *s = set[i];
        if (!s) {
            m->tmp[i] = NULL;
            continue;
        }
        struct gnode *prev = NULL;
        for (const struct gnode *p = s; p; p = p->up) {
            if (used >= cap) return GRAM_EBUDGET;
            struct gnode *c = &pool[used++];
            c->pos = p->pos;
            c->up = NULL;
            if (prev) prev->up = c;
            else m->tmp[i] = c;
            prev = c;
        }
    }
    memcpy(m->st, m->tmp, (size_t)n * sizeof(*m->st));
    m->n_st = n;
    m->cur ^= 1;
    return GRAM_OK;
}

int gram_match_create(struct gram *g, struct gram_scratch *x, struct gram_match **out) {
    *out = NULL;
    struct gram_match *m = calloc(1, sizeof(*m));
    if (!m) return GRAM_ENOMEM;
    m->g = gram_ref(g);
    const int cap = match_cap(g);
    m->pool[0] = malloc((size_t)cap * sizeof(struct gnode));
    m->pool[1] = malloc((size_t)cap * sizeof(struct gnode));
    m->st = malloc((size_t)g->lim.max_stacks * sizeof(*m->st));
    m->tmp = malloc((size_t)g->lim.max_stacks * sizeof(*m->tmp));
    int rc = GRAM_ENOMEM;
    if (!m->pool[0] || !m->pool[1] || !m->st || !m->tmp) goto fail;
    x->n_nodes = x->n_keep;
    x->overflow = 0;
    x->depth_guard = 0;
    int n = 0, cap_st = g->lim.max_stacks < x->lim.max_stacks ? g->lim.max_stacks : x->lim.max_stacks;
    int32_t a = g->rule_start[g->root];
    for (;;) {
        const struct gnode *st = is_end(g, a) ? NULL : gram_node(x, a, NULL);
        if (x->overflow || gram_closure(g, x, st, x->sets, &n, cap_st)) {
            rc = GRAM_EBUDGET;
            goto fail;
        }
        while (!is_end(g, a)) a++;
        if (g->el[a].type == GE_END) break;
        a++;
    }
    rc = match_store(m, x->sets, n);
    if (rc) goto fail;
    *out = m;
    return GRAM_OK;
fail:
    gram_match_destroy(m);
    return rc;
}

void gram_match_destroy(struct gram_match *m) {
    if (!m) return;
    gram_unref(m->g);
    free(m->pool[0]);
    free(m->pool[1]);
    free(m->st);
    free(m->tmp);
    free(m);
}

/* Starts a walk from m's stacks in x: resets x's arena and budgets, and gives the two stack
 * sets it alternates between and their capacity. */
static int walk_begin(const struct gram_match *m, struct gram_scratch *x,
                      const struct gnode **lv[2]) {
    const struct gram *g = m->g;
    const int cap = g->lim.max_stacks < x->lim.max_stacks ? g->lim.max_stacks : x->lim.max_stacks;
    x->n_nodes = x->n_keep;
    x->overflow = 0;
    x->depth_guard = 0;
    lv[0] = x->sets;
    lv[1] = x->sets + cap;
    return cap;
}

/* The stacks after bytes b[0..n) from m's, in x's sets (*out, *n_out; m's own for n = 0). */
static int match_advance(const struct gram_match *m, struct gram_scratch *x, const uint8_t *b,
                         size_t n, const struct gnode *const **out, int *n_out) {
    const struct gram *g = m->g;
    const struct gnode **lv[2];
    const int cap = walk_begin(m, x, lv);
    const struct gnode *const *in = m->st;
    int n_in = m->n_st;
    for (size_t i = 0; i < n; i++) {
        const struct gnode **o = lv[i & 1];
        int r = gram_advance(g, x, in, n_in, b[i], o, cap);
        if (r < 0) return GRAM_EBUDGET;
        if (r == 0) return GRAM_EREJECT;
        in = (const struct gnode *const *)o;
        n_in = r;
    }
    *out = in;
    *n_out = n_in;
    return GRAM_OK;
}

int gram_match_accept(struct gram_match *m, struct gram_scratch *x, const uint8_t *b, size_t n) {
    for (size_t at = 0; at < n;) { /* pieces: the scratch's nodes bound a piece, not all */
        const size_t k = n - at < GRAM_ACCEPT_PIECE ? n - at : GRAM_ACCEPT_PIECE;
        const struct gnode *const *st;
        int n_st;
        int rc = match_advance(m, x, b + at, k, &st, &n_st);
        if (!rc) rc = match_store(m, st, n_st);
        if (rc) return rc;
        at += k;
    }
    return GRAM_OK;
}

int gram_match_check(const struct gram_match *m, struct gram_scratch *x, const uint8_t *b,
                     size_t n) {
    const struct gnode *const *st;
    int n_st;
    return match_advance(m, x, b, n, &st, &n_st);
}

int gram_match_can_end(const struct gram_match *m) {
    for (int i = 0; i < m->n_st; i++)
        if (!m->st[i]) return 1;
    return 0;
}

int gram_match_done(const struct gram_match *m) {
    for (int i = 0; i < m->n_st; i++)
        if (m->st[i]) return 0;
    return 1;
}

int gram_match_copy(struct gram_match *dst, const struct gram_match *src) {
    if (dst->g != src->g) return GRAM_EINVAL;
    return match_store(dst, (const struct gnode *const *)src->st, src->n_st);
}

int gram_match_forced(const struct gram_match *m, struct gram_scratch *x, uint8_t *out,
                      int max) {
    const struct gram *g = m->g;
    const struct gnode **lv[2];
    const int cap = walk_begin(m, x, lv);
    const struct gnode *const *in = m->st;
    int n_in = m->n_st, n = 0;
    while (n < max) {
        struct gram_set u = {{0, 0, 0, 0}};
        for (int i = 0; i < n_in; i++) {
            if (!in[i]) return n; /* the sentence may end here: nothing is forced */
            const struct gram_set *s = &g->sets[g->el[in[i]->pos].v];
            for (int w = 0; w < 4; w++) u.w[w] |= s->w[w];
        }
        int c = -1;
        for (int w = 0; w < 4; w++) {
            if (!u.w[w]) continue;
            if (c >= 0 || (u.w[w] & (u.w[w] - 1))) return n; /* two bytes or more */
            c = w * 64 + __builtin_ctzll(u.w[w]);
        }
        if (c < 0) return n;
        const struct gnode **o = lv[n & 1];
        const int r = gram_advance(g, x, in, n_in, (unsigned)c, o, cap);
        if (r <= 0) return n;
        out[n++] = (uint8_t)c;
        in = (const struct gnode *const *)o;
        n_in = r;
    }
    return n;
}
