/*
 * tokenizer_int — private declarations shared by tokenizer.c (vocab, special tokens, SPM,
 * decoding, streaming) and tokenizer_bpe.c (the Gemma 4 BPE variant). Not for other modules.
 *
 * The vocab is immutable after tok_create(); every function here only reads it, so any
 * number of threads may encode at once. Per-call scratch memory lives in struct tok_scratch
 * and belongs to one tok_encode() call.
 */
#ifndef GEMMAD_TOKENIZER_INT_H
#define GEMMAD_TOKENIZER_INT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/tokenizer.h"

/* Token attributes as llama.cpp keeps them (a token may gain CONTROL on top of its type). */
enum {
    TOK_ATTR_UNKNOWN = 1 << 0,
    TOK_ATTR_UNUSED = 1 << 1,
    TOK_ATTR_NORMAL = 1 << 2,
    TOK_ATTR_CONTROL = 1 << 3,
    TOK_ATTR_USER_DEFINED = 1 << 4,
    TOK_ATTR_BYTE = 1 << 5,
};

enum tok_model { TOK_MODEL_SPM = 0, TOK_MODEL_GEMMA4 = 1 };

struct tok_entry {
    const char *text; /* piece bytes, in the GGUF mapping (or the vocab's arena) */
    uint32_t len;     /* bytes */
    float score;      /* SentencePiece score (SPM merge priority) */
    uint8_t attr;     /* TOK_ATTR_* bits */
};

/* Open-addressing hash table of ids; keys live elsewhere (pieces or merges). */
struct tok_hash {
    uint32_t mask; /* capacity - 1, capacity a power of two */
    int32_t *slot; /* [capacity] id or -1 */
    uint32_t *hv;  /* [capacity] hash of the key in that slot (fast reject) */
};

/* One BPE merge "a b" (Gemma 4); both halves point into the GGUF mapping. */
struct tok_merge {
    const char *a, *b;   /* left and right parts */
    uint32_t alen, blen; /* bytes */
};

/* The distinct lengths of special tokens that may be split out, longest first, each with
 * the set of first bytes such tokens start with (a cheap filter before hashing). */
struct tok_slen {
    uint32_t len;      /* bytes */
    uint8_t first[32]; /* bitset over the first byte */
};

struct tok_vocab {
    int n;                           /* vocab size */
    struct tok_entry *tok;           /* [n] */
    struct tok_hash pieces;          /* piece text -> id */
    int model;                       /* enum tok_model */
    int32_t bos, eos, unk, eot, eom; /* special ids, -1 when absent */
    int add_bos, add_eos;            /* tokenizer.ggml.add_bos_token / add_eos_token */
    int add_space_prefix;            /* prepend ' ' to text after BOS/special (not for Gemma) */
    uint32_t max_len;                /* longest piece, bytes */
    int32_t byte_tok[256];           /* byte fallback id per byte value, -1 when none */
    struct tok_slen *slen_all;       /* lengths over all special tokens (parse_special) */
    int n_slen_all;
    struct tok_slen *slen_ud; /* lengths over tokens split out without parse_special */
    int n_slen_ud;
    int32_t *eog; /* sorted end-of-generation ids */
    int n_eog;
    struct tok_merge *merges; /* [n_merges] Gemma 4 BPE merges, rank = index */
    int n_merges;
    struct tok_hash merge_hash; /* (a, b) -> rank */
    char *arena;                /* replacement text for empty pieces ("[EMPTY_i]") */
};

/* Output id writer: keeps counting past cap so the caller learns the full length. */
struct tok_out {
    int32_t *ids; /* caller buffer */
    int cap;      /* its capacity */
    int n;        /* ids produced so far */
};

/* Symbol of the merge loops: a run of bytes of the fragment, linked to its neighbours. */
struct tok_sym {
    uint32_t off;       /* byte offset into the fragment */
    uint32_t n;         /* bytes; 0 once merged into the left neighbour */
    int32_t prev, next; /* neighbour indices or -1 */
};

/* Candidate pair in the merge heap. SPM ranks by score (high first), BPE by rank (low first);
 * both break ties on the smaller left index. */
struct tok_pair {
    float key;           /* SPM: score; BPE: -rank, so "higher key first" serves both */
    int32_t left, right; /* symbol indices */
    uint32_t size;       /* combined bytes when pushed (stale check) */
};

/* Per-call scratch, sized to the whole input once per tok_encode(). */
struct tok_scratch {
    char *buf;           /* escaped fragment text */
    struct tok_sym *sym; /* symbols */
    struct tok_pair *heap;
    size_t heap_cap;
};

void tok_out_push(struct tok_out *o, int32_t id);
uint64_t tok_hash_bytes(const void *p, size_t n);
int32_t tok_find(const struct tok_vocab *v, const char *text, size_t len);
/* Split a fragment into UTF-8 symbols the way llama.cpp does (lead byte decides the width,
 * clipped at the end); returns the symbol count. */
int tok_split_syms(const char *t, uint32_t off, uint32_t m, struct tok_sym *sym, int base);
/* Priority of merging the adjacent symbols a[0..alen) and a[alen..alen+blen): 1 and *key
 * (higher merges first) when they may merge, else 0. */
typedef int (*tok_key_fn)(const struct tok_vocab *v, const char *a, uint32_t alen, uint32_t blen,
                          float *key);
/* The merge loop shared by SPM and BPE over s->sym[0..ns) (llama.cpp's work queue). */
void tok_merge(const struct tok_vocab *v, struct tok_scratch *s, const char *t, int ns,
               tok_key_fn keyfn);
/* Appends the ids of the final symbols: the piece, else per-byte fallback; a byte without a
 * fallback piece is TOK_ENOBYTE when strict, else dropped. */
int tok_emit(const struct tok_vocab *v, const struct tok_sym *sym, const char *t, struct tok_out *o,
             int strict);

/* Gemma 4 BPE (tokenizer_bpe.c). */
int tok_bpe_load(struct tok_vocab *v, const struct gguf_file *f, char *err, size_t errlen);
int tok_bpe_fragment(const struct tok_vocab *v, struct tok_scratch *s, const char *t, uint32_t m,
                     struct tok_out *o);

#endif
