/*
 * tokenizer_encode — text to ids (tokenizer.h's tok_encode): the special-token partition,
 * the SPM merge loop shared with the BPE fragment encoder (tokenizer_bpe.c), and the byte
 * fallback. Behaviour follows llama.cpp's src/llama-vocab.cpp.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer.h"
#include "engine/tokenizer_int.h"

#define TOK_MAX_INPUT (1u << 28) /* bytes; keeps every index in 32 bits with room to spare */

/* ---- small shared helpers --------------------------------------------------------------- */

void tok_out_push(struct tok_out *o, int32_t id) {
    if (o->n < o->cap) o->ids[o->n] = id;
    o->n++;
}

int tok_split_syms(const char *t, uint32_t off, uint32_t m, struct tok_sym *sym, int base) {
    /* llama.cpp's unicode_len_utf8: the lead byte's high nibble decides the width, so a
     * stray continuation byte is a 1-byte symbol and a truncated sequence is clipped. */
    static const uint8_t width[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    int k = 0;
    uint32_t p = 0;
    while (p < m) {
        uint32_t w = width[(uint8_t)t[off + p] >> 4];
        if (w > m - p) w = m - p;
        sym[k].off = off + p;
        sym[k].n = w;
        sym[k].prev = k == 0 ? -1 : base + k - 1;
        p += w;
        sym[k].next = p == m ? -1 : base + k + 1;
        k++;
    }
    return k;
}

static int pair_before(const struct tok_pair *a, const struct tok_pair *b) {
    return a->key > b->key || (a->key == b->key && a->left < b->left);
}

static void heap_push(struct tok_pair *h, size_t *n, struct tok_pair e) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!pair_before(&e, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static struct tok_pair heap_pop(struct tok_pair *h, size_t *n) {
    struct tok_pair top = h[0];
    struct tok_pair last = h[--(*n)];
    size_t i = 0, cnt = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= cnt) break;
        if (c + 1 < cnt && pair_before(&h[c + 1], &h[c])) c++;
        if (!pair_before(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (cnt) h[i] = last;
    return top;
}

/* ---- encoding --------------------------------------------------------------------------- */

void tok_merge(const struct tok_vocab *v, struct tok_scratch *s, const char *t, int ns,
               tok_key_fn keyfn) {
    struct tok_sym *sym = s->sym;
    size_t nh = 0;
    float key;
    for (int i = 1; i < ns; i++)
        if (keyfn(v, t + sym[i - 1].off, sym[i - 1].n, sym[i].n, &key))
            heap_push(s->heap, &nh, (struct tok_pair){key, i - 1, i, sym[i - 1].n + sym[i].n});
    while (nh) {
        struct tok_pair p = heap_pop(s->heap, &nh);
        struct tok_sym *L = &sym[p.left], *R = &sym[p.right];
        /* Stale when either side was merged since; both alive means still adjacent, so the
         * pair's text is unchanged exactly when its size is. */
        if (!L->n || !R->n || L->n + R->n != p.size) continue;
        L->n += R->n;
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0) sym[R->next].prev = p.left;
        int32_t l = L->prev, r = L->next;
        if (l >= 0 && keyfn(v, t + sym[l].off, sym[l].n, L->n, &key))
            heap_push(s->heap, &nh, (struct tok_pair){key, l, p.left, sym[l].n + L->n});
        if (r >= 0 && keyfn(v, t + L->off, L->n, sym[r].n, &key))
            heap_push(s->heap, &nh, (struct tok_pair){key, p.left, r, L->n + sym[r].n});
    }
}

int tok_emit(const struct tok_vocab *v, const struct tok_sym *sym, const char *t, struct tok_out *o,
             int strict) {
    for (int i = 0; i != -1; i = sym[i].next) {
        int32_t id = tok_find(v, t + sym[i].off, sym[i].n);
        if (id >= 0) {
            tok_out_push(o, id);
            continue;
        }
        for (uint32_t j = 0; j < sym[i].n; j++) {
            int32_t b = v->byte_tok[(uint8_t)t[sym[i].off + j]];
            if (b >= 0)
                tok_out_push(o, b);
            else if (strict)
                return TOK_ENOBYTE;
        }
    }
    return 0;
}

/* SPM pair priority: the score of the piece the two symbols spell, if there is one. */
static int spm_key(const struct tok_vocab *v, const char *a, uint32_t alen, uint32_t blen,
                   float *key) {
    int32_t id = tok_find(v, a, alen + blen);
    if (id < 0) return 0;
    *key = v->tok[id].score;
    return 1;
}

/* SPM merge of one fragment t[0..m) (spaces already escaped): seed all adjacent character
 * pairs that form a vocab piece, then repeatedly merge the best-scoring pair.
 * llama.cpp also records merges for "resegmenting" symbols that are not pieces; its map only
 * ever holds texts that are pieces, and it is only consulted for texts that are not, so the
 * lookup never succeeds: a final symbol is either a piece or falls back to bytes (and a
 * missing byte piece is an error there, as here). */
static int spm_fragment(const struct tok_vocab *v, struct tok_scratch *s, const char *t, uint32_t m,
                        struct tok_out *o) {
    int ns = tok_split_syms(t, 0, m, s->sym, 0);
    tok_merge(v, s, t, ns, spm_key);
    return tok_emit(v, s->sym, t, o, 1);
}

/* Escapes one raw fragment (optional leading space, ' ' -> U+2581) into s->buf and runs the
 * model's merge algorithm over it. */
static int encode_fragment(const struct tok_vocab *v, struct tok_scratch *s, const char *text,
                           size_t len, int prefix_space, struct tok_out *o) {
    uint32_t m = 0;
    if (prefix_space) {
        memcpy(s->buf, "\xe2\x96\x81", 3);
        m = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s->buf + m, "\xe2\x96\x81", 3);
            m += 3;
        } else {
            s->buf[m++] = text[i];
        }
    }
    if (v->model == TOK_MODEL_GEMMA4) return tok_bpe_fragment(v, s, s->buf, m, o);
    return spm_fragment(v, s, s->buf, m, o);
}

struct tok_match {
    int32_t id;   /* special token */
    uint32_t pos; /* byte offset of the occurrence */
};

static int cmp_match(const void *a, const void *b) {
    const struct tok_match *x = a, *y = b;
    if (x->id != y->id) return (x->id > y->id) - (x->id < y->id);
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* llama.cpp's tokenizer_st_partition: special tokens, longest first, each split out of the
 * remaining raw text at its leftmost non-overlapping occurrences. Equivalent formulation used
 * here: per length (descending), collect the occurrences of that length's special tokens and
 * accept them in (token, position) order when none of their bytes is taken yet.
 * mark[i] = 0 free, id + 1 at the start of an accepted token, -1 inside one. */
/* 1 when [p, p + L) overlaps one of the sorted, disjoint spans. */
static int in_spans(const struct tok_span *sp, int n, size_t p, size_t L) {
    int lo = 0, hi = n;
    while (lo < hi) { /* first span ending after p */
        int mid = (lo + hi) / 2;
        if (sp[mid].off + sp[mid].len <= p) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && sp[lo].off < p + L;
}

static void partition(const struct tok_vocab *v, const char *text, uint32_t len, int parse_special,
                      const struct tok_span *text_only, int n_text_only, int32_t *mark,
                      struct tok_match *mt) {
    const struct tok_slen *sl = parse_special ? v->slen_all : v->slen_ud;
    int nsl = parse_special ? v->n_slen_all : v->n_slen_ud;
    memset(mark, 0, (size_t)len * sizeof(*mark));
    for (int k = 0; k < nsl; k++) {
        uint32_t L = sl[k].len;
        if (L > len) continue;
        size_t nm = 0;
        for (uint32_t p = 0; p + L <= len; p++) {
            uint8_t b = (uint8_t)text[p];
            if (!(sl[k].first[b >> 3] & (1u << (b & 7)))) continue;
            if (mark[p] || mark[p + L - 1]) continue;
            int32_t id = tok_find(v, text + p, L);
            if (id < 0) continue;
            int a = v->tok[id].attr;
            if (!(a & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN))) continue;
            if (!parse_special && (a & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN))) continue;
            if (n_text_only && (a & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN)) &&
                in_spans(text_only, n_text_only, p, L))
                continue;
            mt[nm++] = (struct tok_match){id, p};
        }
        if (nm > 1) qsort(mt, nm, sizeof(*mt), cmp_match);
        for (size_t i = 0; i < nm; i++) {
            uint32_t p = mt[i].pos;
            uint32_t q = p;
            while (q < p + L && !mark[q])
                q++;
            if (q < p + L) continue;
            mark[p] = mt[i].id + 1;
            for (q = p + 1; q < p + L; q++)
                mark[q] = -1;
        }
    }
}

size_t tok_min_tokens(const struct tok_vocab *v, size_t len) {
    size_t m = v->max_len ? v->max_len : 1;
    return (len + m - 1) / m;
}

int tok_encode(const struct tok_vocab *v, const char *text, size_t len, int add_bos,
               int parse_special, int32_t *ids, int cap) {
    return tok_encode_spans(v, text, len, add_bos, parse_special, NULL, 0, ids, cap);
}

int tok_encode_spans(const struct tok_vocab *v, const char *text, size_t len, int add_bos,
                     int parse_special, const struct tok_span *text_only, int n_text_only,
                     int32_t *ids, int cap) {
    if (len >= TOK_MAX_INPUT || cap < 0) return TOK_ERANGE;
    struct tok_out o = {ids, cap, 0};
    if (add_bos && v->add_bos) tok_out_push(&o, v->bos);
    int rc = 0;
    if (len) {
        /* One allocation for all scratch: escaped text grows at most 3x (+3 for the prefix),
         * at most one symbol per input byte (+1 for the prefix), and the heap holds the seeds
         * plus two pairs per merge. */
        size_t nsym = len + 2;
        size_t bytes = len * sizeof(int32_t) + len * sizeof(struct tok_match) +
                       nsym * sizeof(struct tok_sym) + 3 * nsym * sizeof(struct tok_pair) +
                       3 * len + 4;
        char *mem = malloc(bytes);
        if (!mem) return TOK_ENOMEM;
        int32_t *mark = (int32_t *)mem;
        struct tok_match *mt = (struct tok_match *)(mark + len);
        struct tok_scratch s;
        s.sym = (struct tok_sym *)(mt + len);
        s.heap = (struct tok_pair *)(s.sym + nsym);
        s.heap_cap = 3 * nsym;
        s.buf = (char *)(s.heap + s.heap_cap);
        partition(v, text, (uint32_t)len, parse_special, text_only, n_text_only, mark, mt);
        int prev_special = 1; /* the start of text counts as "after a special token" */
        uint32_t p = 0;
        while (p < len && rc == 0) {
            if (mark[p] > 0) {
                int32_t id = mark[p] - 1;
                tok_out_push(&o, id);
                p += v->tok[id].len;
                prev_special = 1;
                continue;
            }
            uint32_t q = p;
            while (q < len && mark[q] == 0)
                q++;
            rc = encode_fragment(v, &s, text + p, q - p, v->add_space_prefix && prev_special, &o);
            prev_special = 0;
            p = q;
        }
        free(mem);
    }
    if (rc) return rc;
    if (add_bos && v->add_eos) tok_out_push(&o, v->eos);
    return o.n;
}
