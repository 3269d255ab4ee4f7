/*
 * stop — stop-string matching with hold-back. See stop.h.
 */
#define _GNU_SOURCE /* memmem */
#include "scheduler/stop.h"

#include <stdlib.h>
#include <string.h>

int stop_init(struct stop_state *s, const char *const *stops, int n, size_t max_push) {
    memset(s, 0, sizeof(*s));
    s->max_push = max_push;
    if (n > 0) {
        s->stops = calloc((size_t)n, sizeof(char *));
        s->lens = calloc((size_t)n, sizeof(size_t));
        s->index = calloc((size_t)n, sizeof(int));
        if (!s->stops || !s->lens || !s->index) goto fail;
    }
    for (int i = 0; i < n; i++) {
        size_t len = stops[i] ? strlen(stops[i]) : 0;
        if (len == 0) continue;
        s->stops[s->n] = malloc(len + 1);
        if (!s->stops[s->n]) goto fail;
        memcpy(s->stops[s->n], stops[i], len + 1);
        s->index[s->n] = i;
        s->lens[s->n++] = len;
        if (len > s->max_len) s->max_len = len;
    }
    s->cap = s->max_len + max_push + 1;
    s->held = malloc(s->cap);
    s->out = malloc(s->cap);
    if (!s->held || !s->out) goto fail;
    return 0;
fail:
    stop_free(s);
    return -1;
}

void stop_free(struct stop_state *s) {
    for (int i = 0; s->stops && i < s->n; i++) free(s->stops[i]);
    free(s->stops);
    free(s->lens);
    free(s->index);
    free(s->held);
    free(s->out);
    memset(s, 0, sizeof(*s));
}

static void release(struct stop_state *s, size_t n, const char **out, size_t *out_len) {
    memcpy(s->out, s->held, n);
    memmove(s->held, s->held + n, s->n_held - n);
    s->n_held -= n;
    *out = s->out;
    *out_len = n;
}

int stop_push(struct stop_state *s, const char *text, size_t len, const char **out,
              size_t *out_len) {
    *out = s->out;
    *out_len = 0;
    if (s->matched) return 1;
    if (len > s->max_push) return -1;
    memcpy(s->held + s->n_held, text, len);
    s->n_held += len;
    /* Earliest complete match of any stop string. Everything before the held text was
     * released only when no stop string could start in it, so matches lie inside held. */
    size_t first = (size_t)-1;
    int which = -1;
    for (int i = 0; i < s->n; i++) {
        if (s->lens[i] > s->n_held) continue;
        const char *p = memmem(s->held, s->n_held, s->stops[i], s->lens[i]);
        if (p && (size_t)(p - s->held) < first) {
            first = (size_t)(p - s->held);
            which = i;
        }
    }
    if (first != (size_t)-1) {
        s->matched = 1;
        s->match_index = s->index[which];
        release(s, first, out, out_len);
        s->n_held = 0;
        return 1;
    }
    /* Hold back the longest suffix that is a proper prefix of some stop string. */
    size_t keep = 0;
    for (int i = 0; i < s->n; i++) {
        size_t lim = s->lens[i] - 1 < s->n_held ? s->lens[i] - 1 : s->n_held;
        for (size_t k = lim; k > keep; k--)
            if (!memcmp(s->held + s->n_held - k, s->stops[i], k)) {
                keep = k;
                break;
            }
    }
    release(s, s->n_held - keep, out, out_len);
    return 0;
}

void stop_flush(struct stop_state *s, const char **out, size_t *out_len) {
    if (s->matched) {
        *out = s->out;
        *out_len = 0;
        return;
    }
    release(s, s->n_held, out, out_len);
}
