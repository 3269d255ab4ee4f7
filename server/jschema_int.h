/*
 * jschema_int — declarations shared by the files of the jschema module (jschema.c,
 * jschema_merge.c); nothing outside server/jschema*.c includes it. Pure functions: any
 * thread.
 */
#ifndef GEMMAD_JSCHEMA_INT_H
#define GEMMAD_JSCHEMA_INT_H

#include <jansson.h>
#include <stddef.h>

/* The schema a "#..." JSON pointer reference names inside root, or NULL. */
json_t *jschema_resolve(json_t *root, const char *ref);
/* 0: an annotation or unknown keyword (ignored), 1: supported, 2: refused. */
int jschema_keyword_kind(const char *k);
/* The intersection of parts[0..n) as one schema (a new reference): allOf of them, with
 * $ref and allOf inside resolved and anyOf/oneOf distributed over the rest (jschema_merge.c
 * lists the rules); NULL with the reason, naming the keyword and ptr, in err. extra_keys:
 * the generator's jschema_opts.extra_keys (which objects it writes other keys in decides
 * which oneOf branches provably exclude each other). */
json_t *jschema_merge(json_t *root, json_t *const *parts, size_t n, int extra_keys,
                      const char *ptr, char *err, size_t errlen);

/* ---- the compiler's state, shared by jschema.c and jschema_scalar.c ---- */

/* A declared (or required) key of an object being generated. */
struct jsc_prop {
    const char *key;
    json_t *schema; /* NULL: any value */
    int required;
    int rule;       /* the value's rule */
};

#include "server/jschema_fmt.h"

#define JSC_MAX_REFS 512

struct jsc {
    json_t *root;
    const char *name;
    struct jsc_buf *out;
    int next_id;
    struct {
        char *ref;
        int id;
    } refs[JSC_MAX_REFS];
    int n_refs;
    char *err;
    size_t errlen;
    int failed;
    int depth;
    char empty[256]; /* why the last JSC_EMPTY subschema accepts no value */
    int g4;                /* Gemma 4's object notation instead of JSON */
    char q[32];            /* GBNF of a string delimiter: "\"" in JSON, <[ID]> in notation */
    int extra_keys;        /* jschema_opts.extra_keys */
    int any_order;         /* jschema_opts.any_order */
    long order_bytes;      /* grammar text any-order objects may still take (JSC_ORDER_BYTES) */
    int v_init, v_draft, v_nested_id; /* jschema_value.c's view of root, found once */
};

/* gen_any's result for a subschema that no value satisfies (an enum none of whose values has
 * the schema's type): an optional property or an anyOf branch of it is left out; anywhere
 * else gen turns it into an error. */
#define JSC_EMPTY (-5)

/* Records the first error (printf-style) and returns -1. */
int jschema_fail(struct jsc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define jfail(...) jschema_fail(__VA_ARGS__)
/* *out = s[k] when present: a non-negative integer (else an error naming k). 0 or -1. */
int jschema_count(struct jsc *c, json_t *s, const char *k, long long *out, const char *ptr);
/* A new rule NAME-id ::= body; returns id. */
int jschema_add_rule(struct jsc *c, const struct jsc_buf *body);
/* The rule of a JSON string (quotes included) that is none of keys[0..n) and has no
 * escapes (so its text is its value); its id or -1. */
int jschema_gen_other_key(struct jsc *c, const char *const *keys, int n);
/* The body of a string / integer / number schema, appended to b. 0 or -1. */
int jschema_gen_string(struct jsc *c, json_t *s, const char *ptr, struct jsc_buf *b);
int jschema_gen_integer(struct jsc *c, json_t *s, const char *ptr, struct jsc_buf *b);
int jschema_gen_number(struct jsc *c, json_t *s, const char *ptr, struct jsc_buf *b);
/* Whether value v (of an enum or const) satisfies schema s's other keywords (type, enum,
 * const and annotations aside): 1, 0, or -1 when one of them is beyond this check (a
 * pattern or format on a string, the keys of an object, the items of an array). */
int jschema_value_fits(json_t *s, json_t *v);
/* 1 when jschema_value_fits can tell for const cst (when not NULL) or every value of enum en. */
int jschema_values_checkable(json_t *s, json_t *cst, json_t *en);

/* Whether value v is valid against schema s (root: the document its "#..." $refs name):
 * 1, 0, or -1 when it cannot tell (a keyword beyond it: format, unevaluated*, nullable, a
 * $ref it cannot resolve, a keyword whose meaning depends on a draft the root's $schema does
 * not name, a pattern outside the regex subset). Exact where it answers 0 or 1
 * (jschema_value.c). */
int jschema_valid(json_t *root, json_t *s, json_t *v);
/* The type a schema without "type" implies by its keywords (object, array, string, number),
 * or NULL. */
const char *jschema_infer_type(json_t *s);
/* 1 when value v has JSON Schema type t ("integer": a real with no fraction too), 0 when
 * not, -1 for a name that is no type. */
int jschema_type_is(const char *t, json_t *v);
/* The literal of JSON value v (JSON's whitespace free between an object's or array's
 * tokens; Gemma 4's notation when c->g4), appended to b. 0 or -1. */
int jschema_lit(struct jsc *c, struct jsc_buf *b, json_t *v, const char *ptr);
/* Schema s, when its values form a finite set (an enum or const, in s, an allOf part, its
 * $ref target, or every anyOf/oneOf branch) and jschema_valid tells for each candidate:
 * those valid against all of s, as alternatives appended to b; 1, JSC_EMPTY when none is,
 * 0 when not such a schema (b untouched), -1 on error. */
int jschema_gen_values(struct jsc *c, json_t *s, const char *ptr, struct jsc_buf *b);

/* Schema s with its "not" written as positive keywords, an allOf part (a new reference), or
 * NULL when that "not" is not one of the forms jschema_value.c rewrites (a type list,
 * required keys, anyOf/allOf of such, a double not, true/false). */
json_t *jschema_drop_not(json_t *root, json_t *s);

/* Objects of at most this many declared keys may write them in any order (any_order), while
 * the schema's any-order objects take at most JSC_ORDER_BYTES of grammar text in all (the
 * rules grow as 2^n; the grammar engine's element budget is the limit that matters). */
#define JSC_ANY_ORDER_MAX 10
#define JSC_ORDER_BYTES 100000L
/* minProperties / maxProperties of object s, which writes n declared keys, n_req of them
 * required: may set *extra (gen_object's other keys) to none; *nonempty: at least one key
 * must be written; *cap: most other keys (-1: any number). 0, or -1 when the counts cannot
 * be kept (jschema_order.c). */
int jschema_object_counts(struct jsc *c, json_t *s, const char *ptr, int n, int n_req,
                          int *extra, int *nonempty, long long *cap);
/* An object's keys for jschema_gen_any_order. */
struct jsc_keys {
    char *kvs[JSC_ANY_ORDER_MAX]; /* [n] the GBNF of `"key" ws ":" ws value ws` */
    int n;                        /* declared keys */
    unsigned req;                 /* bit k: key k is required */
    unsigned dep[JSC_ANY_ORDER_MAX]; /* [n] keys that must be present when key k is */
    unsigned never;               /* keys never written (a dependency that cannot be met) */
    const char *okv;              /* the GBNF of one other key and its value, or NULL */
    int nonempty;                 /* at least one key (minProperties 1) */
};
/* The grammar text of jschema_gen_any_order's rules, about. */
long jschema_any_order_cost(const struct jsc_keys *k);
/* draft 4-7 "dependencies" of object s in k->dep / k->never; names[0..k->n): the declared
 * keys. Property lists only: a schema dependency, or a list naming a key that may be written
 * among the other keys, is refused. 0, or -1 with the reason. */
int jschema_key_deps(struct jsc *c, json_t *s, const char *ptr, const char *const *names,
                     struct jsc_keys *k);
/* patternProperties pp beside an object's declared keys pr[0..n): a key that patterns
 * match gets the allOf of its schema and theirs as its schema (new references kept in owned,
 * a JSON array); *hits: how many keys patterns match. 0, or -1 (an unsupported pattern,
 * named) (jschema_order.c). */
int jschema_pattern_values(struct jsc *c, json_t *pp, struct jsc_prop *pr, int n, json_t *owned,
                           int *hits, const char *ptr);
/* The body of an object whose k->n declared keys come in any order, each at most once, the
 * required ones always, each with its dependencies, other keys (k->okv) anywhere any number
 * of times. Appended to b, its rules to c->out (jschema_order.c). 0 or -1. */
int jschema_gen_any_order(struct jsc *c, const struct jsc_keys *k, struct jsc_buf *b);

#endif
