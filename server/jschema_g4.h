/*
 * jschema_g4 — the pieces of JSON Schema → GBNF (server/jschema.h) particular to Gemma 4's
 * object notation (server/g4note.h; jschema_rules_g4): its base rules, property keys and
 * enum / const literals. q is the GBNF of the string delimiter token (`<[ID]>`).
 * Pure functions: any thread.
 */
#ifndef GEMMAD_JSCHEMA_G4_H
#define GEMMAD_JSCHEMA_G4_H

#include <jansson.h>

#include "server/jschema_fmt.h"

/* The rules ws (nothing), value, object, okey (a bare key), array, string, char, char1,
 * integer, number of the notation. */
void jschema_g4_base(const char *q, struct jsc_buf *out);
/* A property name as written before its ':': bare, or between delimiters when it is empty
 * or holds a character a bare key cannot (: , { } [ ], space or a control character). */
void jschema_g4_key(const char *key, const char *q, struct jsc_buf *out);
/* The literal of a value in notation (g4note_write's text with its delimiters as q). */
int jschema_g4_lit(const json_t *v, const char *q, struct jsc_buf *out);

#endif
