/*
 * jschema_g4 — Gemma 4's notation in JSON Schema → GBNF. See jschema_g4.h.
 */
#include "server/jschema_g4.h"

#include <string.h>

#include "server/g4note.h"

/* char1: one code point, as exact UTF-8 (classes of one encoded length each, so the
 * grammar engine does not take its looser form, which lets overlong and surrogate bytes
 * through: decoded as U+FFFD they would lengthen a string past its maxLength). */
void jschema_g4_base(const char *q, struct jsc_buf *out) {
    jsc_buf_printf(out,
                   "ws ::= \"\"\n"
                   "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
                   "object ::= \"{\" ( okey \":\" value (\",\" okey \":\" value)* )? \"}\"\n"
                   "okey ::= [^:,{}\\[\\]\\x00-\\x20]+\n"
                   "array ::= \"[\" ( value (\",\" value)* )? \"]\"\n"
                   "string ::= %s char* %s\n"
                   "char ::= char1\n"
                   "char1 ::= [\\x01-\\x7F] | [\\u0080-\\u07FF] | [\\u0800-\\uD7FF] | "
                   "[\\uE000-\\uFFFF] | [\\U00010000-\\U0010FFFF]\n"
                   "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
                   "number ::= integer (\".\" [0-9]{1,15})? ([eE] [-+]? [0-9]{1,2})?\n",
                   q, q);
}

void jschema_g4_key(const char *key, const char *q, struct jsc_buf *out) {
    const int bare = g4note_bare_key(key);
    if (!bare) jsc_buf_printf(out, "%s ", q);
    jsc_buf_lit(out, key, strlen(key));
    if (!bare) jsc_buf_printf(out, " %s", q);
}

int jschema_g4_lit(const json_t *v, const char *q, struct jsc_buf *out) {
    struct g4note_buf b = {0};
    if (g4note_write(&b, v, 0)) {
        g4note_buf_free(&b);
        return -1;
    }
    /* caller text (the spans) literally; outside them only structure and delimiters */
    const size_t ql = strlen(G4NOTE_QUOTE);
    size_t i = 0;
    int sp = 0;
    jsc_buf_add(out, "(", 1);
    while (i < b.t.n) {
        size_t end = sp < b.n_spans ? b.spans[sp].off : b.t.n;
        while (i < end) {
            if (end - i >= ql && memcmp(b.t.p + i, G4NOTE_QUOTE, ql) == 0) {
                jsc_buf_printf(out, " %s ", q);
                i += ql;
            } else {
                size_t j = i;
                while (j < end && !(end - j >= ql && memcmp(b.t.p + j, G4NOTE_QUOTE, ql) == 0)) j++;
                jsc_buf_lit(out, b.t.p + i, j - i);
                i = j;
            }
        }
        if (sp < b.n_spans) {
            jsc_buf_lit(out, b.t.p + b.spans[sp].off, b.spans[sp].len);
            i = b.spans[sp].off + b.spans[sp].len;
            sp++;
        }
    }
    jsc_buf_add(out, ")", 1);
    g4note_buf_free(&b);
    return out->oom ? -1 : 0;
}
