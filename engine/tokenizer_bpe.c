/*
 * tokenizer_bpe — the Gemma 4 tokenizer (`tokenizer.ggml.model = "gemma4"`): BPE with ranked
 * merges over raw UTF-8 (no GPT-2 byte mapping), spaces already escaped to U+2581, the text
 * split only into runs of newlines and runs of everything else, and "<0xXX>" byte fallback.
 * Follows llama.cpp's llm_tokenizer_bpe_session for LLAMA_VOCAB_PRE_TYPE_GEMMA4.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/tokenizer_int.h"

static uint32_t merge_hash(const char *a, size_t alen, const char *b, size_t blen) {
    uint64_t h = tok_hash_bytes(a, alen) * 0x9E3779B97F4A7C15ull;
    h ^= tok_hash_bytes(b, blen) + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
    return (uint32_t)(h ^ (h >> 32));
}

static int merge_eq(const struct tok_merge *m, const char *a, size_t alen, const char *b,
                    size_t blen) {
    return m->alen == alen && m->blen == blen && !memcmp(m->a, a, alen) && !memcmp(m->b, b, blen);
}

/* Rank of the merge (a, b), or -1. */
static int merge_rank(const struct tok_vocab *v, const char *a, size_t alen, const char *b,
                      size_t blen) {
    const struct tok_hash *t = &v->merge_hash;
    uint32_t h = merge_hash(a, alen, b, blen);
    for (uint32_t i = h & t->mask;; i = (i + 1) & t->mask) {
        int32_t r = t->slot[i];
        if (r < 0) return -1;
        if (t->hv[i] == h && merge_eq(&v->merges[r], a, alen, b, blen)) return r;
    }
}

int tok_bpe_load(struct tok_vocab *v, const struct gguf_file *f, char *err, size_t errlen) {
    const struct gguf_kv *kv;
    if (gguf_get_arr(f, "tokenizer.ggml.merges", &kv) || kv->arr_type != GGUF_VT_STRING) {
        if (err && errlen)
            snprintf(err, errlen, "tokenizer.ggml.merges: missing or not an array of strings");
        return TOK_EFORMAT;
    }
    if (kv->arr_n > (1u << 24)) { /* ranks must stay exact as float heap keys */
        if (err && errlen)
            snprintf(err, errlen, "tokenizer.ggml.merges: too many merges (%llu)",
                     (unsigned long long)kv->arr_n);
        return TOK_EFORMAT;
    }
    v->n_merges = (int)kv->arr_n;
    v->merges = calloc(v->n_merges ? (size_t)v->n_merges : 1, sizeof(*v->merges));
    if (!v->merges) return TOK_ENOMEM;
    size_t cap = 16;
    while (cap < (size_t)v->n_merges * 2)
        cap <<= 1;
    v->merge_hash.mask = (uint32_t)(cap - 1);
    v->merge_hash.slot = malloc(cap * sizeof(int32_t));
    v->merge_hash.hv = malloc(cap * sizeof(uint32_t));
    if (!v->merge_hash.slot || !v->merge_hash.hv) return TOK_ENOMEM;
    memset(v->merge_hash.slot, 0xff, cap * sizeof(int32_t));

    for (int i = 0; i < v->n_merges; i++) {
        const char *s;
        size_t len;
        if (gguf_arr_str(kv, (uint64_t)i, &s, &len)) {
            if (err && errlen) snprintf(err, errlen, "tokenizer.ggml.merges[%d]: unreadable", i);
            return TOK_EFORMAT;
        }
        /* llama.cpp splits at the first space after the first byte; no space: ("", ""). */
        struct tok_merge *m = &v->merges[i];
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (sp) {
            m->a = s;
            m->alen = (uint32_t)(sp - s);
            m->b = sp + 1;
            m->blen = (uint32_t)(len - m->alen - 1);
        } else {
            m->a = m->b = s;
            m->alen = m->blen = 0;
        }
        /* Duplicates keep the first (lowest) rank, as std::map::emplace does. */
        uint32_t h = merge_hash(m->a, m->alen, m->b, m->blen);
        uint32_t j = h & v->merge_hash.mask;
        int dup = 0;
        for (; v->merge_hash.slot[j] >= 0; j = (j + 1) & v->merge_hash.mask) {
            int32_t r = v->merge_hash.slot[j];
            if (v->merge_hash.hv[j] == h && merge_eq(&v->merges[r], m->a, m->alen, m->b, m->blen)) {
                dup = 1;
                break;
            }
        }
        if (!dup) {
            v->merge_hash.slot[j] = i;
            v->merge_hash.hv[j] = h;
        }
    }
    return 0;
}

/* BPE pair priority: the lower the merge rank the higher the key. */
static int bpe_key(const struct tok_vocab *v, const char *a, uint32_t alen, uint32_t blen,
                   float *key) {
    int r = merge_rank(v, a, alen, a + alen, blen);
    if (r < 0) return 0;
    *key = -(float)r;
    return 1;
}

/* Merges one word t[0..m) and appends its tokens. */
static void bpe_word(const struct tok_vocab *v, struct tok_scratch *s, const char *t, uint32_t m,
                     struct tok_out *o) {
    struct tok_sym *sym = s->sym;
    int ns;
    int all_nl = 1;
    for (uint32_t i = 0; i < m && all_nl; i++)
        all_nl = t[i] == '\n';
    if (all_nl && tok_find(v, t, m) >= 0) {
        /* llama.cpp (Gemma 4 fix): a newline run that is a piece stays whole. */
        sym[0] = (struct tok_sym){0, m, -1, -1};
        ns = 1;
    } else {
        ns = tok_split_syms(t, 0, m, sym, 0);
    }
    tok_merge(v, s, t, ns, bpe_key);
    /* Byte fallback; bytes without a "<0xXX>" piece are dropped, as in llama.cpp. */
    tok_emit(v, sym, t, o, 0);
}

int tok_bpe_fragment(const struct tok_vocab *v, struct tok_scratch *s, const char *t, uint32_t m,
                     struct tok_out *o) {
    /* Pre-tokenizer "[^\n]+|[\n]+": alternate runs of newlines and of everything else. */
    uint32_t p = 0;
    while (p < m) {
        int nl = t[p] == '\n';
        uint32_t q = p + 1;
        while (q < m && (t[q] == '\n') == nl)
            q++;
        bpe_word(v, s, t + p, q - p, o);
        p = q;
    }
    return 0;
}
