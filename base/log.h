/*
 * log — one logging module for every layer: `ts LEVEL module req=ID message` on stderr.
 *
 * The level is checked before any formatting (LOG_* macros), so disabled lines cost one
 * comparison. log_set_level() is called once at start-up; log_write() may be called from any
 * thread (one write(2) per line, so lines from different threads never interleave).
 */
#ifndef GEMMAD_BASE_LOG_H
#define GEMMAD_BASE_LOG_H

#include <stdint.h>

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

extern int log_level_current; /* read without a lock: set once before threads start */

void log_set_level(enum log_level lv);
int log_parse_level(const char *s, enum log_level *out); /* "error|warn|info|debug" */
/* req: request id, 0 for lines not about a request. */
void log_write(enum log_level lv, const char *module, uint64_t req, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define LOG_AT(lv, mod, req, ...)                                                              \
    do {                                                                                       \
        if ((int)(lv) <= log_level_current) log_write((lv), (mod), (req), __VA_ARGS__);        \
    } while (0)
#define LOG_E(mod, req, ...) LOG_AT(LOG_ERROR, mod, req, __VA_ARGS__)
#define LOG_W(mod, req, ...) LOG_AT(LOG_WARN, mod, req, __VA_ARGS__)
#define LOG_I(mod, req, ...) LOG_AT(LOG_INFO, mod, req, __VA_ARGS__)
#define LOG_D(mod, req, ...) LOG_AT(LOG_DEBUG, mod, req, __VA_ARGS__)

#endif
