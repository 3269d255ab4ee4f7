/*
 * g4note — Gemma 4's tool-call object notation, the format its chat template and its
 * instruction-tuned models use (docs/TOOLS.md, "Tool calling with Gemma 4"): converters
 * between it and JSON, and the rendering of tool declarations, calls and results.
 *
 * The notation: strings between two string-delimiter tokens `<|"|>` with no escaping,
 * objects `{key:value,...}` with bare keys (sorted when written, as the template's dictsort
 * does), arrays `[value,...]`, numbers, true, false and null as in JSON, no whitespace.
 * A call is `<|tool_call>call:NAME{...}<tool_call|>`, a result
 * `<|tool_response>response:NAME{value:<|"|>...<|"|>}<tool_response|>`, a declaration
 * `<|tool>declaration:NAME{description:<|"|>...<|"|>,parameters:{...}}<tool|>` (the
 * parameters schema in notation, every "type" value upper-cased).
 *
 * Writing: the control tokens are written as their text (`<|"|>`, ...), and every piece of
 * caller text (string contents, names) is recorded as a text-only span, so a prompt
 * tokenized with tok_encode_spans gets control tokens only where this module wrote them.
 * Reading (g4note_parse): the string delimiter is a parameter, so the model's output can be
 * read with the delimiter token as whatever bytes the caller decoded it to (the grammar
 * engine's encoding of a control token, which no text can produce, or its text).
 *
 * Pure functions: any thread; a g4note_buf belongs to its caller.
 */
#ifndef GEMMAD_G4NOTE_H
#define GEMMAD_G4NOTE_H

#include <jansson.h>
#include <stddef.h>

#include "engine/tokenizer.h"
#include "server/jsc_buf.h"

#define G4NOTE_QUOTE "<|\"|>"
#define G4NOTE_CALL_OPEN "<|tool_call>"
#define G4NOTE_CALL_CLOSE "<tool_call|>"
#define G4NOTE_RESP_OPEN "<|tool_response>"
#define G4NOTE_RESP_CLOSE "<tool_response|>"
#define G4NOTE_DECL_OPEN "<|tool>"
#define G4NOTE_DECL_CLOSE "<tool|>"

/* Growing text (t.p, t.n bytes, NUL-terminated; t.oom on failure) with the spans of caller
 * text in it. */
struct g4note_buf {
    struct jsc_buf t;
    struct tok_span *spans;
    int n_spans, cap_spans;
};
void g4note_buf_free(struct g4note_buf *b);

/* 1 when key can be written bare: not empty, none of : , { } [ ], space or a control
 * character (else it is written between delimiters, which g4note_parse reads too). */
int g4note_bare_key(const char *key);
/* A JSON value in notation (objects' keys sorted). upper_types: the value of every "type"
 * key (a string, or strings in an array) upper-cased, as declarations write schemas. */
int g4note_write(struct g4note_buf *b, const json_t *v, int upper_types);
/* <|tool_call>call:NAME{...}<tool_call|>; args is a JSON object. */
int g4note_call(struct g4note_buf *b, const char *name, const json_t *args);
/* <|tool_response>response:NAME{value:<|"|>CONTENT<|"|>}<tool_response|>. */
int g4note_response(struct g4note_buf *b, const char *name, const char *content, size_t len);
/* <|tool>declaration:NAME{description:<|"|>D<|"|>,parameters:{...}}<tool|>; description
 * and parameters may be NULL (left out). */
int g4note_declaration(struct g4note_buf *b, const char *name, const char *description,
                       const json_t *parameters);

/* The ids of Gemma 4's tool tokens in a vocabulary. */
struct g4note_ids {
    int32_t call, call_end, quote, decl, decl_end, resp, resp_end;
};
/* 1 when the vocabulary has every tool token as a CONTROL token (ids filled), else 0. */
int g4note_ids_find(const struct tok_vocab *v, struct g4note_ids *ids);
/* b's text with every tool token outside its spans written as the grammar engine's bytes of
 * its id (scheduler/grammar.h, gram_token_bytes) appended to out: text no client can send
 * (it is not UTF-8), which the prompt's tokenization turns back into those tokens. */
void g4note_encode(const struct g4note_buf *b, const struct g4note_ids *ids, struct jsc_buf *out);

/* Parses one value of notation at s[0..n), strings delimited by q[0..qlen). Keys may be
 * bare (any bytes but : , { } [ ] and the delimiter) or delimited. Returns a new JSON value
 * with *used the bytes read, or NULL with err set. */
json_t *g4note_parse(const char *s, size_t n, const char *q, size_t qlen, size_t *used,
                     char *err, size_t errlen);

#endif
