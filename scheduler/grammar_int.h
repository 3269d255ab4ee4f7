/*
 * grammar_int — the grammar module's private structures, shared by grammar_gbnf.c (the GBNF
 * parser), grammar_build.c (the builder and the checks), grammar_match.c (stacks, closure,
 * matcher), grammar_vocab.c (the vocabulary's trie), grammar_mask.c (mask walks) and
 * grammar_cache.c (the mask cache). Nothing outside scheduler/grammar*.c includes it (tests
 * aside).
 */
#ifndef GEMMAD_GRAMMAR_INT_H
#define GEMMAD_GRAMMAR_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "scheduler/grammar.h"

/* Element kinds of the flat rule table. A rule is its alternatives one after another, each a
 * run of SET/REF elements ended by ALT (another alternative follows) or END (last one). */
enum { GE_END = 0, GE_ALT = 1, GE_REF = 2, GE_SET = 3 };

struct gram_elem {
    uint32_t type : 2;
    uint32_t v : 30;     /* REF: rule id; SET: index into gram.sets */
};

/* A byte set: bit b of w[b >> 6]. */
struct gram_set {
    uint64_t w[4];
};
/* FNV-1a, the grammar module's one hash: start from GRAM_FNV0, fold each value in. */
#define GRAM_FNV0 1469598103934665603ull
static inline uint64_t gram_fnv(uint64_t h, uint64_t v) {
    return (h ^ v) * 1099511628211ull;
}

static inline int gram_set_has(const struct gram_set *s, unsigned b) {
    return (int)((s->w[b >> 6] >> (b & 63)) & 1);
}

/* Positions kept per stack in a cache key (the top frames of each stack). */
#define GRAM_CACHE_DEPTH 4
#define GRAM_KEY_W (GRAM_CACHE_DEPTH + 1) /* int32s per stack in a key */
#define GRAM_CACHE_MAX 256    /* entries per grammar; beyond: walks without the cache */

/* One entry per matcher state as the cache sees it: the sorted, distinct top frames of its
 * stacks. */
struct gram_centry {
    uint64_t hash;
    int32_t *key;                  /* [n_keys * GRAM_KEY_W] per stack: positions, then -1
                                    * (stack ends) or -2 (cut), then 0s */
    int n_keys;
    uint64_t *acc;                 /* [n_vocab / 64] accepted whatever is below */
    int32_t *unc;                  /* [n_unc] sorted-vocabulary indexes, undecided */
    uint8_t *unc_lcp;              /* [n_unc] common prefix with the previous entry */
    int n_unc;
};

struct gram {
    int refs;                      /* atomic */
    uint64_t serial;               /* unique among the grammars a process compiles */
    struct gram_limits lim;
    struct gram_elem *el;          /* [n_el] all rules */
    int n_el;
    int32_t *rule_start;           /* [n_rules] first element of each rule */
    int32_t *alt_first;            /* [n_rules + 1] index into alts of each rule's first */
    int32_t *alts;                 /* [alternatives] start position of each alternative */
    int n_rules;
    struct gram_set *sets;         /* [n_sets] */
    int n_sets;
    int root;                      /* rule id of "root" */
    /* mask cache (guarded by lock); built for one vocabulary (cache_vocab) */
    pthread_mutex_t lock;
    const struct gram_vocab *cache_vocab;
    struct gram_centry *cache;     /* [GRAM_CACHE_MAX] */
    int n_cache;
    long long lookups, hits;
};

/* A persistent stack node: the position to continue at, and the rest of the stack. */
struct gnode {
    int32_t pos;
    const struct gnode *up;
};
/* The sentinel below a cache key's frames: "whatever the real stack holds". */
extern const struct gnode gram_sent;

/* A stack set: NULL entries are empty stacks (the sentence may end), &gram_sent entries mark
 * a path that reached the frames below a cache key. */
struct gram_scratch {
    struct gram_limits lim;
    struct gnode *nodes;           /* [max_nodes] bump arena */
    int n_nodes;
    const struct gnode **sets;     /* [(max_len + 2) * max_stacks] one set per depth */
    int *set_n;                    /* [max_len + 2] */
    uint8_t *unc;                  /* [max_len + 2] a path hit the sentinel before depth d */
    int *mark;                     /* [max_len + 2] arena mark per depth */
    int max_len;
    int overflow;                  /* a budget was exceeded during the current operation */
    int depth_guard;
    /* Whole-vocabulary walks intern nodes and sets and memoise (set, byte) -> set, so a
     * state met again anywhere in the trie costs one lookup (grammar_mask.c). */
    int intern;                    /* 1: gram_node returns the one node per (pos, up) */
    /* The interned nodes, sets and memo are kept between walks of one grammar (grammar_mask.c,
     * intern_prepare): nodes[0..n_keep) are theirs, and other uses of the arena start past
     * them. */
    int n_keep;
    uint64_t intern_serial;        /* the grammar they belong to (gram.serial), 0: none */
    int no_intern;                 /* tests: walk without interning */
    const struct gnode **nh;       /* [nh_cap] node hash (empty between walks) */
    int nh_cap;
    int *nh_used;                  /* [max_nodes] slots filled by this walk */
    int n_nh_used;
    const struct gnode **ss;       /* [GRAM_SS_CAP] contents of the interned sets */
    int ss_n;
    int *set_off, *set_len;        /* [GRAM_MAX_SETS] */
    uint8_t *set_flags;            /* [GRAM_MAX_SETS] GRAM_SF_* */
    int n_isets;
    int *sh;                       /* [GRAM_SH_CAP] set hash: id + 1 (empty between walks) */
    int *set_slot;                 /* [GRAM_MAX_SETS] its slot in sh */
    int32_t *memo;                 /* [GRAM_MAX_SETS * 256] next walk state, -1 unknown */
    int32_t *level_sid;            /* [max_len + 2] walk state per depth (grammar_mask.c) */
    uint8_t *set_gok;              /* [GRAM_MAX_SETS] GRAM_G_* groups of the set's chain */
    uint8_t *set_reach;            /* [GRAM_MAX_SETS] characters the chain holds for (255: ever,
                                    * or not known yet: set_rcap) */
    uint8_t *set_rlen;             /* [GRAM_MAX_SETS] ... as far as known */
    uint8_t *set_rcap;             /* [GRAM_MAX_SETS] 1: it may hold for more than set_rlen */
    int32_t *set_succ;             /* [GRAM_MAX_SETS] the set after one of those characters */
    int32_t *keys;                 /* [max_stacks * GRAM_KEY_W] a mask's cache key */
    int32_t *posbuf;               /* [max_nodes] gram_canon's positions */
    int u_on;                      /* this walk's start took gram_vocab.u_text */
    /* set_add's hash of a big set's stacks (interned walks): slot i holds dd[i] when
     * dd_gen[i] == gen; gram_advance starts a new one by a new gen */
    const struct gnode **dd;       /* [dd_cap] */
    uint32_t *dd_gen;              /* [dd_cap] */
    uint32_t gen;
    int dd_cap, dd_on;
};

#define GRAM_DD_MIN 16                /* set_add hashes sets from this size */
#define GRAM_MAX_SETS 16384 /* interned sets; a walk that needs more starts over plain (slow) */
#define GRAM_SS_CAP (GRAM_MAX_SETS * 16)
#define GRAM_SH_CAP (GRAM_MAX_SETS * 2)
#define GRAM_SF_LIVE 1                /* a stack that can take a byte */
#define GRAM_SF_SENT 2                /* the sentinel */
#define GRAM_SF_ANY 4                 /* not empty: a token ending here is accepted */

struct gram_match {
    struct gram *g;
    struct gnode *pool[2];         /* [max_nodes] double-buffered copies of the live stacks */
    int cur;
    const struct gnode **st;       /* [max_stacks] the current set */
    const struct gnode **tmp;      /* [max_stacks] */
    int n_st;
};

/* A trie node (struct gram_vocab): what a whole-vocabulary walk reads at every node. */
struct gram_tnode {
    int32_t id;                    /* the token id ending here, or -1 */
    uint8_t byte;                  /* the node's last byte */
    uint8_t depth;                 /* its prefix length, 1.. */
    uint8_t sub;                   /* GRAM_G_* of the bytes below it; GRAM_G_BAD when its own
                                    * prefix or a token below is not whole, valid UTF-8, or
                                    * when the subtree is too small to be worth skipping */
    uint8_t below;                 /* the most bytes below it (its deepest token's length
                                    * minus its depth) */
};

/* Byte groups, for skipping subtrees in a walk: where a set S goes to one same set T after
 * every byte of some ASCII groups and after every valid non-ASCII character, and T does the
 * same with those groups, and so on for as many characters as a subtree is deep (a string's
 * inside, typically: T is S again, or, under minLength / maxLength, the next count), the
 * tokens below a node whose state is S and whose subtree holds only those are all accepted,
 * and the walk takes them without visiting their nodes (grammar_mask.c). */
#define GRAM_G_ALNUM 1                /* [0-9A-Za-z] */
#define GRAM_G_SPACE 2
#define GRAM_G_PUNCT 4                /* other printable ASCII but " and backslash */
#define GRAM_G_QUOTE 8
#define GRAM_G_BSL 16
#define GRAM_G_CTRL 32                /* 0x00-0x1F, 0x7F */
#define GRAM_G_NONASCII 64            /* bytes of valid non-ASCII characters */
#define GRAM_G_BAD 128
#define GRAM_G_TEXT (GRAM_G_ALNUM | GRAM_G_SPACE | GRAM_G_PUNCT | GRAM_G_NONASCII)
static inline uint8_t gram_byte_group(uint8_t c) {
    if (c >= 0x80) return GRAM_G_NONASCII;
    if (c < 0x20 || c == 0x7f) return GRAM_G_CTRL;
    if (c == '"') return GRAM_G_QUOTE;
    if (c == '\\') return GRAM_G_BSL;
    if (c == ' ') return GRAM_G_SPACE;
    if ((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'))
        return GRAM_G_ALNUM;
    return GRAM_G_PUNCT;
}
#define GRAM_GOK_UNKNOWN 0xff         /* set_gok: not computed yet (set_reach 255 then) */

struct gram_vocab {
    int n_vocab;
    int n;                         /* tokens with at least one byte */
    int32_t *ord;                  /* [n] token ids in byte order */
    uint8_t *lcp;                  /* [n] common prefix length with the previous entry */
    uint32_t *off;                 /* [n + 1] byte offsets into bytes, sorted order */
    uint8_t *bytes;
    int32_t *pos_of;               /* [n_vocab] sorted index of each id, -1 if no bytes */
    int32_t *next_shorter;         /* [n] first j > i with lcp[j] < lcp[i], else n */
    /* The trie as nodes in depth-first (byte) order, for whole-vocabulary walks: node k is
     * the prefix of tn[k].depth bytes ending with tn[k].byte; its parent is the nearest node
     * before it of depth tn[k].depth - 1, its subtree the nodes up to tn_end[k]. */
    int n_tnodes;
    struct gram_tnode *tn;         /* [n_tnodes] */
    int32_t *tn_end;               /* [n_tnodes] first node after k's subtree */
    int32_t *tn_first;             /* [n_tnodes + 1] sorted index of the first token ending at
                                    * node k or after it */
    uint8_t *ptext;                /* [n_tnodes] 1: every byte of node k's prefix is text
                                    * (GRAM_G_TEXT) */
    uint64_t *u_text;              /* [n_vocab / 64] the tokens below the topmost ptext nodes
                                    * whose subtrees hold text only (grammar_mask.c) */
    int max_len;
};


/* ---- the builder (grammar_build.c), used by the GBNF compiler (grammar_gbnf.c) ---- */

#define GRAM_MAX_NESTING 256 /* parenthesised groups inside one another */

struct bvec {
    struct gram_elem *e;
    int n, cap;
};

struct bld {
    struct bvec *rules;
    char **names;          /* [n_rules] NULL for helper rules */
    uint8_t *defined;      /* [n_rules] */
    int n_rules, cap_rules;
    struct gram_set *sets;
    int n_sets, cap_sets;
    int single[256];       /* set index of each one-byte set, or -1 */
    long long n_elems;
    int max_elems;
    int *ht;               /* name hash: rule id + 1, 0 = empty */
    int *set_ht;           /* set hash: set index + 1, 0 = empty */
    int set_ht_cap;
    int ht_cap;
    const char *p, *end, *start;
    int depth;             /* nested groups */
    int nonascii1;         /* 1 + the shared rule of every non-ASCII code point, 0: none yet */
    char *err;
    size_t errlen;
    int status;
};

struct cp_range {
    uint32_t lo, hi;
};

/* Every builder function returns 0 (or an id) or -1 with b->status and b->err set. */
int gram_bfail(struct bld *b, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int gram_at_off(const struct bld *b);
int gram_push(struct bld *b, int rule, int type, uint32_t v);
int gram_new_rule(struct bld *b, const char *name, size_t len);
int gram_rule_id(struct bld *b, const char *s, size_t n);
int gram_push_byte(struct bld *b, int rule, unsigned c);
int gram_push_range(struct bld *b, int rule, unsigned lo, unsigned hi);
int gram_utf8_enc(uint32_t c, uint8_t *o);
/* Element(s) for a class of code points: one SET for ASCII, else a REF to a helper rule. */
int gram_emit_class(struct bld *b, int rule, struct cp_range *r, int n, int negate);
/* Move elements [from, n) of rule into a helper rule (REF left in place). */
int gram_wrap_item(struct bld *b, int rule, int from);
/* x{lo,hi} (hi < 0: unbounded) on the single element at the end of rule. */
int gram_repeat(struct bld *b, int rule, long lo, long hi);
int gram_check(struct bld *b);
void gram_bld_free(struct bld *b);

/* grammar_match.c: closure of one stack into set `out` (n in/out, cap entries). Returns 0,
 * or -1 on a budget overflow (x->overflow set). */
int gram_closure(const struct gram *g, struct gram_scratch *x, const struct gnode *st,
                 const struct gnode **out, int *n, int cap);
/* Advance set in[0..n_in) by byte c into out; returns the count or -1 (overflow). */
int gram_advance(const struct gram *g, struct gram_scratch *x, const struct gnode *const *in,
                 int n_in, unsigned c, const struct gnode **out, int cap);
const struct gnode *gram_node(struct gram_scratch *x, int32_t pos, const struct gnode *up);
/* With x->intern on: the interned copy of stack st (every node through gram_node), so that
 * stacks built from it are equal exactly when they are the same pointer. NULL with
 * x->overflow set when the arena is full. */
const struct gnode *gram_canon(struct gram_scratch *x, const struct gnode *st);

/* grammar_mask.c: a walk's output: accepted tokens (bit per id) and, in sentinel mode, the
 * sorted indexes of the uncertain ones. */
struct gram_walk_out {
    uint64_t *acc;        /* bit per token id */
    int32_t *unc;         /* sentinel mode: sorted indexes of uncertain tokens */
    int n_unc;
};

/* Walks the tokens list[0..n) (sorted indexes with their common prefixes llcp; NULL: the
 * whole vocabulary) from the stacks at level 0 of x->sets. 0 or a status. */
int gram_walk(const struct gram *g, struct gram_scratch *x, const struct gram_vocab *V,
              const int32_t *list, const uint8_t *llcp, int n, struct gram_walk_out *o);
/* Before a mask's walks: keeps x's interned tables for g or flushes them. */
void gram_intern_prepare(const struct gram *g, struct gram_scratch *x);

/* grammar_cache.c */
void gram_cache_free(struct gram *g);

#endif
