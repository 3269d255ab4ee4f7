/*
 * jschema_fmt — the pieces of JSON Schema → GBNF (server/jschema.h) that are languages of
 * their own: the regex subset of "pattern", integer ranges and string formats (written
 * into a jsc_buf, server/jsc_buf.h). Pure functions: any thread.
 */
#ifndef GEMMAD_JSCHEMA_FMT_H
#define GEMMAD_JSCHEMA_FMT_H

#include <stddef.h>

#include "server/jsc_buf.h"

/* The base rules of JSON grammars (ws, value, object, array, string, char, char1, integer,
 * number), which every schema's rules refer to. */
void jschema_json_base(struct jsc_buf *out);

/* The pattern subset as a GBNF expression over JSON string content (the
 * characters between the quotes; raw: the content unescaped, as Gemma 4's notation writes
 * strings); -1 with err naming the unsupported construct. */
int jschema_pattern(const char *re, int raw, struct jsc_buf *out, char *err, size_t errlen);
/* The same with a length range in code points (hi < 0: none) where it can be written;
 * -1 with the reason otherwise. */
int jschema_pattern_len(const char *re, int raw, long lo, long hi, struct jsc_buf *out,
                        char *err, size_t errlen);
/* hit[i] = 1 when keys[i] (UTF-8, NUL-terminated) matches pattern re (a search, as JSON
 * Schema's patternProperties match keys), for i < n; -1 with err for an unsupported pattern. */
int jschema_pattern_keys(const char *re, const char *const *keys, int n, unsigned char *hit,
                         char *err, size_t errlen);
/* Integers in [lo, hi] (has_lo/has_hi 0: unbounded) as a GBNF expression. */
void jschema_int_range(long long lo, int has_lo, long long hi, int has_hi, struct jsc_buf *out);
/* The GBNF expression of a string format's content, or NULL for an unknown format. */
const char *jschema_format(const char *fmt);
/* The fewest and most code points of jschema_format(fmt)'s strings (*mx -1: no most);
 * -1 when not a format. */
int jschema_format_len(const char *fmt, long *mn, long *mx);

#endif
