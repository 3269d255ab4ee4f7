/*
 * cors — see cors.h. Origins compare exactly except for case (scheme and host are
 * case-insensitive, and browsers send them lower-case anyway); "http://a.example" does not
 * allow "http://a.example.evil.com", so no prefix or suffix matching.
 */
#include "server/cors.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int cors_add(struct cors *c, const char *s, size_t n, char *err, size_t errlen) {
    while (n && isspace((unsigned char)*s))
        s++, n--;
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    while (n > 1 && s[n - 1] == '/')
        n--;
    if (!n) return 0;
    if (n == 1 && *s == '*') {
        c->any = 1;
        return 0;
    }
    if (!(n > 7 && !strncasecmp(s, "http://", 7)) && !(n > 8 && !strncasecmp(s, "https://", 8))) {
        snprintf(err, errlen, "cors_origins: '%.*s' is not an origin (scheme://host[:port])",
                 (int)(n > 80 ? 80 : n), s);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= ' ' || s[i] == ',') {
            snprintf(err, errlen, "cors_origins: '%.*s' holds a blank or a control byte",
                     (int)(n > 80 ? 80 : n), s);
            return -1;
        }
    char **o = realloc(c->origins, (size_t)(c->n + 1) * sizeof *o);
    if (!o) goto oom;
    c->origins = o;
    if (!(o[c->n] = strndup(s, n))) goto oom;
    c->n++;
    return 0;
oom:
    snprintf(err, errlen, "out of memory");
    return -1;
}

int cors_init(struct cors *c, const char *list, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    for (const char *p = list ? list : ""; *p;) {
        const char *q = strchr(p, ',');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        if (cors_add(c, p, n, err, errlen) != 0) {
            cors_free(c);
            return -1;
        }
        p += n + (q != NULL);
    }
    return 0;
}

void cors_free(struct cors *c) {
    for (int i = 0; i < c->n; i++)
        free(c->origins[i]);
    free(c->origins);
    memset(c, 0, sizeof *c);
}

const char *cors_allow(const struct cors *c, const char *origin) {
    if (!origin || !*origin) return NULL;
    if (c->any) return "*";
    for (int i = 0; i < c->n; i++)
        if (!strcasecmp(origin, c->origins[i])) return origin;
    return NULL;
}

const char *cors_allow_headers(const char *requested) {
    if (!requested || !*requested || strlen(requested) > 1024) return CORS_DEFAULT_HEADERS;
    for (const char *p = requested; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("-_, ", *p)) return CORS_DEFAULT_HEADERS;
    return requested;
}
