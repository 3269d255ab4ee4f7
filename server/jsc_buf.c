/*
 * jsc_buf — see jsc_buf.h.
 */
#include "server/jsc_buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void jsc_buf_add(struct jsc_buf *b, const char *s, size_t len) {
    if (b->oom) return;
    if (b->limit && b->n + len > b->limit) {
        b->oom = 1;
        return;
    }
    if (b->n + len + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 1024;
        while (nc < b->n + len + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, len);
    b->n += len;
    b->p[b->n] = 0;
}

void jsc_buf_printf(struct jsc_buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k < sizeof tmp) {
        jsc_buf_add(b, tmp, (size_t)k);
        return;
    }
    char *big = malloc((size_t)k + 1);
    if (!big) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    jsc_buf_add(b, big, (size_t)k);
    free(big);
}

void jsc_buf_lit(struct jsc_buf *b, const char *s, size_t len) {
    jsc_buf_add(b, "\"", sizeof("\"") - 1);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            jsc_buf_add(b, e, 2);
        } else if (c < 0x20 || c == 0x7f) {
            jsc_buf_printf(b, "\\x%02X", c);
        } else {
            jsc_buf_add(b, (const char *)&s[i], 1);
        }
    }
    jsc_buf_add(b, "\"", sizeof("\"") - 1);
}

void jsc_buf_free(struct jsc_buf *b) {
    free(b->p);
    memset(b, 0, sizeof(*b));
}
