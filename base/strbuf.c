/*
 * strbuf — bounded appends; truncation is sticky so the output is always a prefix of what
 * an unbounded writer would have produced.
 */
#include "base/strbuf.h"

#include <stdio.h>
#include <string.h>

void strbuf_init(struct strbuf *b, char *buf, size_t cap) {
    b->p = buf;
    b->cap = cap;
    b->n = 0;
    b->truncated = cap == 0;
    if (cap) buf[0] = 0;
}

void strbuf_vprintf(struct strbuf *b, const char *fmt, va_list ap) {
    if (b->truncated || b->n + 1 >= b->cap) {
        b->truncated = 1;
        return;
    }
    int w = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
    if (w < 0) return;
    if ((size_t)w >= b->cap - b->n) {
        b->n = b->cap - 1;
        b->truncated = 1;
    } else {
        b->n += (size_t)w;
    }
}

void strbuf_printf(struct strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    strbuf_vprintf(b, fmt, ap);
    va_end(ap);
}

void strbuf_add(struct strbuf *b, const char *s, size_t len) {
    if (b->truncated || b->cap == 0) {
        b->truncated = 1;
        return;
    }
    size_t room = b->cap - 1 - b->n;
    if (len > room) {
        len = room;
        b->truncated = 1;
    }
    memcpy(b->p + b->n, s, len);
    b->n += len;
    b->p[b->n] = 0;
}

void strbuf_vsetf(char *buf, size_t cap, const char *fmt, va_list ap) {
    if (!buf || !cap) return;
    vsnprintf(buf, cap, fmt, ap);
}

void strbuf_setf(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    strbuf_vsetf(buf, cap, fmt, ap);
    va_end(ap);
}
