/*
 * cors — cross-origin access for browser front ends: which Origins may call the API
 * (--cors-origins: a comma-separated list of exact origins such as
 * "https://chat.example.com", or "*" for any; empty, the default, allows none), and the
 * headers a preflight (OPTIONS) or a real response carries for an allowed one.
 *
 * Ownership: cors_init copies the list; cors_free releases it. After init the state is
 * read-only: any thread may call cors_allow.
 */
#ifndef GEMMAD_CORS_H
#define GEMMAD_CORS_H

#include <stddef.h>

struct cors {
    char **origins; /* [n] allowed origins, without a trailing slash */
    int n;
    int any; /* "*" was listed */
};

/* Returns 0, or -1 with err naming the bad entry. */
int cors_init(struct cors *c, const char *list, char *err, size_t errlen);
void cors_free(struct cors *c);

/* The Access-Control-Allow-Origin value for a request from origin (may be NULL): "*",
 * origin itself, or NULL when it is not allowed (then no CORS header is sent). */
const char *cors_allow(const struct cors *c, const char *origin);

/* The Access-Control-Allow-Headers value answering a preflight that asked for `requested`
 * (Access-Control-Request-Headers, may be NULL): the request is echoed when it is a plain
 * list of header names (browser SDKs add their own x-… headers), else the fixed list. */
const char *cors_allow_headers(const char *requested);

#define CORS_ALLOW_METHODS "GET, HEAD, POST, OPTIONS"
#define CORS_DEFAULT_HEADERS                                                                       \
    "Authorization, Content-Type, X-API-Key, Anthropic-Version, Anthropic-Beta, "                  \
    "OpenAI-Organization, OpenAI-Project, OpenAI-Beta"
#define CORS_MAX_AGE "600"

#endif
