/*
 * stop — stop strings over a stream of output text. Text that could still turn into a stop
 * string is held back, so no part of a matched stop string ever reaches the client, also
 * when it arrives split over several tokens. The caller feeds complete UTF-8 (what
 * tok_stream_push returns); because a held-back suffix always begins where a stop string
 * begins, the released text never ends inside a code point either.
 *
 * A match ends the output at the earliest position where any stop string occurs.
 *
 * Ownership: stop_init copies the strings and allocates all buffers; stop_push never
 * allocates. One stop_state per sequence, used by one thread.
 */
#ifndef GEMMAD_STOP_H
#define GEMMAD_STOP_H

#include <stddef.h>

struct stop_state {
    char **stops;       /* [n] copies, NUL-terminated */
    size_t *lens;       /* [n] byte lengths (all >= 1) */
    int n;
    size_t max_len;     /* longest stop string */
    char *held;         /* text not released yet */
    size_t n_held;
    size_t cap;         /* held capacity: max_len + max_push */
    char *out;          /* released text of the last call */
    size_t max_push;    /* most bytes one stop_push may add */
    int matched;        /* 1 once a stop string matched: no more output */
    int *index;         /* [n] position of each kept string in the caller's list */
    int match_index;    /* once matched: the caller's index of the string that matched */
};

/* Empty strings are ignored (match_index still counts them). max_push: the most bytes one
 * push may add. 0 or -1 (memory). */
int stop_init(struct stop_state *s, const char *const *stops, int n, size_t max_push);
void stop_free(struct stop_state *s);

/* Add text; *out / *out_len receive the text now safe to release (valid until the next
 * call). Returns 1 when a stop string matched (the released text ends before it), 0
 * otherwise, -1 when len exceeds max_push. */
int stop_push(struct stop_state *s, const char *text, size_t len, const char **out,
              size_t *out_len);

/* Release everything held (at the end of generation without a match). */
void stop_flush(struct stop_state *s, const char **out, size_t *out_len);

#endif
