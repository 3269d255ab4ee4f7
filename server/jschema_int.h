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
 * lists the rules); NULL with the reason, naming the keyword and ptr, in err. */
json_t *jschema_merge(json_t *root, json_t *const *parts, size_t n, const char *ptr, char *err,
                      size_t errlen);

#endif
