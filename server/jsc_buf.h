/*
 * jsc_buf — the growing text buffer grammars are written into (JSON Schema → GBNF,
 * Gemma 4's notation, tool grammars). The buffer owns its heap text; one thread at a time
 * per buffer.
 */
#ifndef GEMMAD_JSC_BUF_H
#define GEMMAD_JSC_BUF_H

#include <stddef.h>

/* Appendable grammar text (heap, grows; NUL-terminated). */
struct jsc_buf {
    char *p;
    size_t n, cap;
    size_t limit;       /* bytes; past it jsc_buf_ok fails */
    int oom;
};
void jsc_buf_add(struct jsc_buf *b, const char *s, size_t len);
void jsc_buf_printf(struct jsc_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A GBNF string literal of bytes s[0..len). */
void jsc_buf_lit(struct jsc_buf *b, const char *s, size_t len);
void jsc_buf_free(struct jsc_buf *b);

#endif
