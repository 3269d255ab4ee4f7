/*
 * metrics — the server's Prometheus counters and histograms (requests by route and status,
 * by finish reason, token counters, latency histograms). Updated and rendered on the loop
 * thread only, so no lock; the scheduler's own metrics are appended by the caller.
 */
#ifndef GEMMAD_METRICS_H
#define GEMMAD_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define METRICS_ROUTES 8
#define METRICS_STATUSES 16
#define METRICS_BUCKETS 16

struct metrics_hist {
    uint64_t counts[METRICS_BUCKETS + 1]; /* per bucket (not cumulative) + the +Inf bucket */
    double sum;                           /* seconds */
    uint64_t n;
};

enum metrics_hist_id {
    METRICS_TTFT = 0, METRICS_ITL, METRICS_E2E, METRICS_QUEUE, METRICS_N_HIST
};

enum metrics_finish {
    METRICS_FIN_STOP = 0, METRICS_FIN_LENGTH, METRICS_FIN_CANCELLED, METRICS_FIN_DEADLINE,
    METRICS_FIN_ERROR, METRICS_N_FIN
};

struct metrics {
    uint64_t http[METRICS_ROUTES][METRICS_STATUSES]; /* requests by route and status slot */
    int status_code[METRICS_STATUSES];               /* the code of each slot, 0 = free */
    uint64_t finish[METRICS_N_FIN];                  /* finished choices by reason */
    uint64_t prompt_tokens, generation_tokens;       /* counters */
    struct metrics_hist hist[METRICS_N_HIST];
};

void metrics_init(struct metrics *m);
void metrics_http(struct metrics *m, int route, int status);
void metrics_observe(struct metrics *m, enum metrics_hist_id h, double seconds);
/* Renders the server's metrics (route names from route_names[METRICS_ROUTES]); returns
 * bytes written, NUL-terminated, truncated at cap - 1. */
size_t metrics_render(const struct metrics *m, const char *const *route_names, int running,
                      int waiting, char *buf, size_t cap);

#endif
