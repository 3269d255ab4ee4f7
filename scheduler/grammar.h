/*
 * grammar — context-free grammars over bytes for constrained decoding: a GBNF compiler
 * (llama.cpp's syntax), an incremental matcher, and per-step masks of the allowed tokens
 * over a whole vocabulary.
 *
 * The grammar is byte-level: character classes over code points are compiled into UTF-8
 * byte sequences, so tokens that end inside a code point (byte-fallback tokens) match like
 * any other. The matcher keeps a set of pushdown stacks (llama.cpp's model: each stack is a
 * list of grammar positions, its top a byte set); stacks are persistent linked nodes, so a
 * byte advances a set by pushing a few nodes. A mask walks the vocabulary in byte-sorted
 * order, which is a depth-first walk of its trie: the stack set after a prefix is computed
 * once for every token sharing it, and a prefix no stack accepts skips its whole subtree
 * (the trie is stored as nodes in that order, each with its subtree's end and depth). Stack
 * sets are interned and (set, byte) -> set memoised, one advance per byte class, and these
 * tables are kept from walk to walk of the same grammar on a scratch. A node whose set goes
 * on to one same set after every character below it, for as many characters as lie below,
 * takes its whole subtree as accepted without visiting it: inside a string the set comes
 * back to itself (and a walk that starts there ORs one precomputed bitmap of the text
 * subtrees), under minLength / maxLength it steps through the count (an ASCII subtree
 * deeper than the count goes takes its tokens down to the count's end), and where letters
 * and digits lead to different sets (a pattern searched for inside a string) a small closed
 * family of sets does the same. On top of that a per-grammar cache, in the spirit of
 * XGrammar's adaptive token mask cache, keyed by the matcher's state as the top
 * GRAM_CACHE_DEPTH positions of each of its stacks, stores the tokens accepted whatever lies
 * below those positions, and the few tokens whose fate depends on it ("uncertain": they run
 * past the key's frames); a mask is then one bitmap copy plus a walk over the uncertain
 * tokens only, both filled by one walk from all the state's stacks together.
 *
 * Libraries looked at: llama.cpp's llama-grammar (C++, inside libllama, no stable API and
 * no trie or cache), XGrammar and LLGuidance (C++/Rust, not packaged for Debian), PCRE2
 * (regular languages only), link-grammar and LPeg (natural-language / PEG parsers, no
 * incremental token masks). None does byte-level CFG masks from C, so this module does.
 *
 * Ownership and threads: a struct gram is immutable after gram_compile_gbnf except for its
 * mask cache, which takes the gram's mutex; it is reference counted (gram_ref/gram_unref,
 * atomic) so every sequence of a request can share it. A struct gram_vocab is immutable
 * after creation (any thread). A struct gram_scratch is used by one thread at a time. A
 * struct gram_match belongs to one sequence (one thread at a time). A struct gram_lru
 * (grammar_lru.c) is shared by any threads: one mutex guards its table, and the grammars it
 * hands out are the shared, reference-counted ones described above.
 */
#ifndef GEMMAD_GRAMMAR_H
#define GEMMAD_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

struct tok_vocab;
struct gram;
struct gram_vocab;
struct gram_scratch;
struct gram_match;
struct gram_lru;

enum gram_status {
    GRAM_OK = 0,
    GRAM_ESYNTAX = -1,   /* GBNF text does not parse (message says where) */
    GRAM_EBUDGET = -2,   /* a configured limit (elements, stacks, nodes) was exceeded */
    GRAM_ENOMEM = -3,
    GRAM_EREJECT = -4,   /* bytes or a token the grammar does not allow */
    GRAM_EINVAL = -5,    /* left recursion, undefined rule, bad argument */
};
const char *gram_strerror(int status);

/* Limits that make a hostile grammar fail fast with GRAM_EBUDGET. */
struct gram_limits {
    int max_elems;       /* grammar elements after desugaring ({m,n} copies count) */
    int max_stacks;      /* stacks in one matcher set */
    int max_nodes;       /* stack nodes a scratch (one mask walk) or a matcher may hold */
};
#define GRAM_DEFAULT_MAX_ELEMS 200000
#define GRAM_DEFAULT_MAX_STACKS 1024
#define GRAM_DEFAULT_MAX_NODES 262144
void gram_limits_default(struct gram_limits *l);

/* Compile GBNF text (root rule "root"). err receives a message fit for a client. */
int gram_compile_gbnf(const char *text, size_t len, const struct gram_limits *lim,
                      struct gram **out, char *err, size_t errlen);
struct gram *gram_ref(struct gram *g);
void gram_unref(struct gram *g);      /* NULL ok */
int gram_n_elems(const struct gram *g);
int gram_n_rules(const struct gram *g);

/* Control tokens in a grammar. GBNF `<[ID]>` (llama.cpp's syntax) matches exactly token ID.
 * The engine stays byte-level: token ID stands for GRAM_TOK_BYTES bytes, 0xFF then ID in four
 * 6-bit groups (0x80 | bits, most significant first). 0xFF never occurs in UTF-8 text and no
 * other grammar element produces it, so these bytes match only where the grammar names the
 * token, and a mask allows a control token exactly where its element stands. */
#define GRAM_TOK_BYTES 5
#define GRAM_TOK_MAX_ID ((1 << 24) - 1)
void gram_token_bytes(int32_t id, uint8_t out[GRAM_TOK_BYTES]);

/* The byte strings of a vocabulary, sorted (the trie). A CONTROL token's string is its
 * gram_token_bytes encoding, so a mask allows it only where a `<[ID]>` element stands; the
 * byte-fallback token of byte 0xFF (never valid in UTF-8 text) is left out, so that byte
 * starts nothing but a control token. Other tokens with no text are never allowed. */
int gram_vocab_create(const struct tok_vocab *v, struct gram_vocab **out);
/* The same from explicit byte strings (tests): tok[i] has len[i] bytes; a string starting
 * with 0xFF is kept only when it is gram_token_bytes(i). */
int gram_vocab_create_raw(int n_vocab, const char *const *tok, const int *len,
                          struct gram_vocab **out);
void gram_vocab_destroy(struct gram_vocab *gv);
int gram_vocab_n(const struct gram_vocab *gv);
int gram_vocab_max_len(const struct gram_vocab *gv);
/* The bytes of token id (*b points into gv); 0 for tokens without text. */
int gram_vocab_token(const struct gram_vocab *gv, int32_t id, const uint8_t **b);
/* The longest token whose bytes are a prefix of b[0..n): its length (0: none) and id. Among
 * tokens of equal bytes it picks a text piece over a byte token (gram_vocab_create).
 * *extended (NULL: not asked) is 1 when a longer token starts with those bytes. */
int gram_vocab_longest(const struct gram_vocab *gv, const uint8_t *b, int n, int32_t *id,
                       int *extended);

/* Per-thread working memory of matching and mask walks. */
int gram_scratch_create(const struct gram_limits *lim, int max_token_len,
                        struct gram_scratch **out);
void gram_scratch_destroy(struct gram_scratch *x);

/* A matcher at the grammar's start. Holds a reference to g. */
int gram_match_create(struct gram *g, struct gram_scratch *x, struct gram_match **out);
void gram_match_destroy(struct gram_match *m);
/* Feed bytes. GRAM_EREJECT leaves the matcher unchanged, for texts of up to
 * GRAM_ACCEPT_PIECE bytes (every token); a longer text is taken a piece at a time, so that
 * the scratch's node budget bounds a piece rather than the whole text, and a rejection
 * leaves the matcher after the pieces before the one that failed. */
#define GRAM_ACCEPT_PIECE 256
int gram_match_accept(struct gram_match *m, struct gram_scratch *x, const uint8_t *b,
                      size_t n);
/* GRAM_OK when gram_match_accept would take the bytes (the same walk; m is left as it is),
 * else GRAM_EREJECT or GRAM_EBUDGET. */
int gram_match_check(const struct gram_match *m, struct gram_scratch *x, const uint8_t *b,
                     size_t n);
/* Make dst (a matcher of the same grammar) a copy of src. */
int gram_match_copy(struct gram_match *dst, const struct gram_match *src);
/* 1 when the bytes so far form a complete sentence (end of generation allowed). */
int gram_match_can_end(const struct gram_match *m);
/* 1 when no more bytes can follow (only the end is allowed). */
int gram_match_done(const struct gram_match *m);
/* The bytes the grammar forces from here (exactly one byte allowed at each, and no end),
 * up to max, written to out; returns how many (m is left as it is). */
int gram_match_forced(const struct gram_match *m, struct gram_scratch *x, uint8_t *out,
                      int max);
/* mask[(n_vocab + 63) / 64]: bit t set iff token t's bytes are accepted from here.
 * *n_allowed receives the count. Returns 0 or a status (GRAM_EBUDGET). uncached = 1 walks
 * the whole vocabulary without the cache (tests, benchmarks). */
int gram_match_mask(struct gram_match *m, struct gram_scratch *x, const struct gram_vocab *gv,
                    uint64_t *mask, int *n_allowed, int uncached);
/* Cache statistics of a grammar: entries filled, lookups, hits. */
void gram_cache_stats(struct gram *g, int *entries, long long *lookups, long long *hits);

/* A bounded LRU of compiled grammars keyed by their exact text and limits, so requests that
 * send the same schema or grammar share one compiled grammar and its warm mask cache.
 * gram_lru_get returns a new reference (the caller unrefs) or NULL on a miss (counted);
 * gram_lru_put stores a reference to g under text (compiled under g's limits), dropping the
 * least recently used entry when full; a key already present keeps its grammar. Only
 * grammars that compiled and passed the caller's checks should be put. c NULL: no cache. */
int gram_lru_create(int cap, struct gram_lru **out);
void gram_lru_destroy(struct gram_lru *c);
struct gram *gram_lru_get(struct gram_lru *c, const char *text, size_t len,
                          const struct gram_limits *lim);
int gram_lru_put(struct gram_lru *c, const char *text, size_t len, struct gram *g);
void gram_lru_stats(struct gram_lru *c, int *entries, long long *hits, long long *misses);

#endif
