/*
 * jschema — JSON Schema to GBNF (the grammar text scheduler/grammar.h compiles), for
 * response_format json_schema, llama.cpp's top-level json_schema field and tool arguments.
 *
 * Supported: type (every type and unions), properties, required, additionalProperties
 * (false, true, a schema: beside declared properties, true or a schema lets other keys
 * follow them; absent, only the declared ones are generated unless jschema_opts.extra_keys
 * says otherwise, see below), patternProperties
 * (one pattern, no properties or required keys: only matching keys are generated; beside
 * declared keys, each declared key takes the schemas of the patterns it matches, and one
 * pattern that matches no declared key, or that matches every key (".*"), writes other
 * keys after the declared ones), items
 * (schema or false; an array is prefixItems, with additionalItems), prefixItems, minItems,
 * maxItems, enum, const (beside any keywords: a finite set of values, from an enum or const
 * in the schema, an allOf part, a $ref target or every anyOf/oneOf branch, keeps the values a
 * validator of constants finds valid against the whole schema, so not, if/then/else,
 * uniqueItems, contains, propertyNames, dependentRequired/dependentSchemas and the rest are
 * exact there; jschema_value.c says where that validator cannot tell), not (rewritten as
 * positive keywords where it is a type list, required keys, anyOf/allOf of such, a double
 * not, true or false; other forms are refused), anyOf, oneOf (branches that provably exclude each other, or
 * required-key branches made exclusive; other oneOfs are refused), allOf (the parts
 * intersected into one schema; so are $ref, anyOf and oneOf with sibling keywords: see
 * jschema_merge.c), $ref into $defs /
 * definitions / the root (recursion included), minLength, maxLength, pattern (a regex
 * subset: literals, ., classes with ranges and negation, \d \w \s \D \W \S, groups,
 * alternation, * + ? {m} {m,} {m,n}, ^ and $ at the ends; no backreferences, lookaround or
 * \b), format (date, time, date-time, uuid, email, hostname, ipv4, ...; other names a draft
 * defines are refused, names no draft defines are annotations), integer
 * minimum / maximum / exclusiveMinimum / exclusiveMaximum (numbers: bounds of up to 15
 * decimals, with an integer between a lower and an upper one; no exponent is written),
 * minProperties (implied by the required keys, or 1), maxProperties (at least the declared
 * keys; other keys beside them only when every declared key is required and keys keep the
 * schema's order: at most maxProperties minus the declared ones), dependencies (property
 * lists, with any_order only), multipleOf (1, 0.1, 0.01, ...: at most that many decimals, exact in
 * decimal arithmetic), nullable (OpenAPI) and type
 * unions with "null". Annotations (title, description, default, examples, $comment, ...)
 * are ignored. A keyword that would change validity and is not supported fails with a
 * message naming the keyword and its JSON pointer; nothing falls back to unconstrained.
 * Whitespace between tokens: nothing, one space, or a newline and at most 20 spaces/tabs.
 * Strings limited by minLength/maxLength use no \u escapes (one code point per char).
 *
 * An absent additionalProperties means true in JSON Schema. By default (jschema_opts NULL or
 * extra_keys 0) gemmad still writes only the declared keys of an object that declares some,
 * as llama.cpp and XGrammar's strict mode do: every object written is valid, and a small
 * model cannot invent keys the caller never asked for. Narrower than the schema, so a grammar
 * checker (gemmad-cli grammar --check) rejects valid instances with other keys. extra_keys 1
 * gives the schema's own meaning: keys that are none of the declared ones may follow them,
 * any value (as with additionalProperties true). Gemma 4's notation writes declared keys only
 * either way (as for an explicit true). Likewise keys are written in the schema's order by
 * default; any_order 1 lets an object's keys come in any order (each declared one at most
 * once: 2^n rules for n declared keys, so only objects of up to 10 of them, within a budget
 * of grammar text per schema; larger ones keep the order). Not in Gemma 4's notation, whose
 * chat template sorts keys.
 *
 * Pure functions: any thread.
 */
#ifndef GEMMAD_JSCHEMA_H
#define GEMMAD_JSCHEMA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "server/jschema_fmt.h"

/* Options of the conversion; a NULL pointer means all zero. */
struct jschema_opts {
    int extra_keys; /* 1: an absent additionalProperties lets other keys follow the declared
                     * ones (JSON Schema's meaning); 0: only the declared ones are written */
    int any_order;  /* 1: an object's declared keys (up to 10 of them) and its other keys may
                     * come in any order; 0: the declared ones in the schema's order, the
                     * others after them */
};

/* Rules of the schema's language appended to out, the schema's value rule named
 * `name` (a GBNF rule name; other rules get `name`-prefixed names). The base rules (ws,
 * string, ...) are appended once per buffer when base is 1; call with base 0 for more
 * schemas into the same text (tool arguments). Returns 0, or -1 with err set. */
int jschema_rules(json_t *schema, const char *name, struct jsc_buf *out, int base,
                  const struct jschema_opts *opt, char *err, size_t errlen);
/* The same in Gemma 4's object notation (server/g4note.h), strings delimited by token
 * quote_id: keys bare (delimited when a name holds one of : , { } [ ] or is empty), string
 * contents unescaped (patterns match them as they are), no whitespace, enum and const values
 * in notation. The base rules are the notation's. */
int jschema_rules_g4(json_t *schema, const char *name, struct jsc_buf *out, int base,
                     int32_t quote_id, const struct jschema_opts *opt, char *err, size_t errlen);
/* A whole grammar: root ::= the schema's value. */
int jschema_to_gbnf(json_t *schema, const struct jschema_opts *opt, struct jsc_buf *out,
                    char *err, size_t errlen);
/* The grammar of any JSON object (response_format json_object). */
int jschema_any_object(struct jsc_buf *out);

#endif
