/*
 * ui — the built-in chat page (server/ui/index.html), compiled into the binary so that the
 * server needs no files at run time. The bytes are read-only and live as long as the
 * process: any thread may read them, and a response may point at them without copying.
 */
#ifndef GEMMAD_UI_H
#define GEMMAD_UI_H

#include <stddef.h>

/* The page's bytes (UTF-8 HTML, not NUL-terminated); *len receives their count. */
const unsigned char *ui_page(size_t *len);

/* Headers the page is served with: it loads nothing from elsewhere, so the policy forbids it
 * (a check that the page stays self-contained, and a guard against injected scripts). */
#define UI_CONTENT_TYPE "text/html; charset=utf-8"
#define UI_CSP                                                                                     \
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "                  \
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "              \
    "frame-ancestors 'none'"

#endif
