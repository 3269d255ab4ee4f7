/*
 * metrics — the server's Prometheus counters and histograms (requests by route and status,
 * by finish reason, token counters, latency histograms) and the rendering of /metrics,
 * which adds the scheduler's numbers (struct sched_stats) after the server's own, then
 * (metrics_gw.c) the families inference gateways read under vLLM's names, build, config and
 * state information, and the process's own numbers. Updated and rendered on the loop thread
 * only, so no lock.
 */
#ifndef GEMMAD_METRICS_H
#define GEMMAD_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "base/prom.h"
#include "base/strbuf.h"
#include "config/config.h"
#include "scheduler/sched.h"

#define METRICS_ROUTES 8
#define METRICS_STATUSES 16
#define METRICS_BUCKETS 22

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
    struct prom_hist hist[METRICS_N_HIST];           /* seconds */
};

void metrics_init(struct metrics *m);
void metrics_http(struct metrics *m, int route, int status);
/* Negative durations count as 0. */
void metrics_observe(struct metrics *m, enum metrics_hist_id h, double seconds);
/* Renders /metrics: the server's metrics (route names from route_names[METRICS_ROUTES]),
 * then, when st is not NULL, the scheduler's. */
void metrics_render(const struct metrics *m, const char *const *route_names,
                    const struct sched_stats *st, struct strbuf *b);
/* The shared cache of compiled grammars (scheduler/grammar.h gram_lru_stats): entries held,
 * lookups that found a grammar, lookups that had to compile one. */
void metrics_render_grammar(int entries, long long hits, long long misses, struct strbuf *b);

/* Histogram names and help, finish-reason names (metrics.c), shared with metrics_gw.c. */
extern const char *const metrics_hist_names[METRICS_N_HIST][2];
extern const char *const metrics_fin_names[METRICS_N_FIN];

/* What the gateway families need besides the counters. */
struct metrics_info {
    const char *model_name;          /* the served model id */
    const char *state;               /* loading | ready | draining | stopping | failed */
    const struct config *cfg;
    double start_time;               /* unix seconds the process started */
};
/* Appends the vLLM-named families (with a model_name label; st NULL: scheduler gauges
 * left out), gemmad_server_state, gemmad_build_info, gemmad_config_info and process_*. */
void metrics_render_gw(const struct metrics *m, const struct metrics_info *inf,
                       const struct sched_stats *st, struct strbuf *b);

#endif
