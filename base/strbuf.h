/*
 * strbuf — a bounded string appender over a caller's buffer.
 *
 * The buffer stays NUL-terminated after every call; text that does not fit is cut at
 * cap - 1 bytes and every later append is a no-op, so a writer can append unconditionally
 * and check strbuf_truncated() once at the end. The caller owns the memory; a strbuf never
 * allocates. One writer at a time (no lock).
 */
#ifndef GEMMAD_BASE_STRBUF_H
#define GEMMAD_BASE_STRBUF_H

#include <stdarg.h>
#include <stddef.h>

struct strbuf {
    char *p;       /* the caller's buffer [cap] */
    size_t cap;    /* bytes, NUL included */
    size_t n;      /* bytes written, < cap (0 when cap is 0) */
    int truncated; /* 1 once some text did not fit */
};

/* Starts an empty string in buf[cap] (buf[0] = 0 when cap > 0). */
void strbuf_init(struct strbuf *b, char *buf, size_t cap);
void strbuf_printf(struct strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void strbuf_vprintf(struct strbuf *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
/* Appends len bytes of s (which need not be NUL-terminated). */
void strbuf_add(struct strbuf *b, const char *s, size_t len);

/* Replaces the message in a caller's buffer buf[cap] (the `char *err, size_t errlen` pair of
 * the loaders' APIs) with fmt, cut to fit; nothing when buf is NULL or cap is 0. */
void strbuf_setf(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void strbuf_vsetf(char *buf, size_t cap, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

#endif
