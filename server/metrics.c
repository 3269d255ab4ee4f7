/*
 * metrics — Prometheus text rendering of the server's counters. Histogram buckets are fixed
 * (seconds): fine at the low end for inter-token latency, long at the top for end-to-end.
 */
#include "server/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const double metrics_bounds[METRICS_BUCKETS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};

static const char *const metrics_hist_names[METRICS_N_HIST][2] = {
    {"gemmad_time_to_first_token_seconds", "Time from request arrival to the first token."},
    {"gemmad_inter_token_latency_seconds", "Time between consecutive tokens of one choice."},
    {"gemmad_e2e_request_latency_seconds", "Time from request arrival to its last token."},
    {"gemmad_request_queue_time_seconds", "Time a choice waited for admission."},
};

static const char *const metrics_fin_names[METRICS_N_FIN] = {"stop", "length", "cancelled",
                                                             "deadline", "error"};

void metrics_init(struct metrics *m) { memset(m, 0, sizeof *m); }

void metrics_http(struct metrics *m, int route, int status) {
    if (route < 0 || route >= METRICS_ROUTES) return;
    for (int i = 0; i < METRICS_STATUSES; i++) {
        if (m->status_code[i] == 0) m->status_code[i] = status;
        if (m->status_code[i] == status) {
            m->http[route][i]++;
            return;
        }
    }
}

void metrics_observe(struct metrics *m, enum metrics_hist_id h, double s) {
    struct metrics_hist *hi = &m->hist[h];
    if (s < 0) s = 0;
    int b = 0;
    while (b < METRICS_BUCKETS && s > metrics_bounds[b]) b++;
    hi->counts[b]++;
    hi->sum += s;
    hi->n++;
}

static size_t metrics_put(char *buf, size_t cap, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static size_t metrics_put(char *buf, size_t cap, size_t n, const char *fmt, ...) {
    if (cap == 0 || n >= cap - 1) return n;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + n, cap - n, fmt, ap);
    va_end(ap);
    if (w < 0) return n;
    return (size_t)w >= cap - n ? cap - 1 : n + (size_t)w;
}

size_t metrics_render(const struct metrics *m, const char *const *route_names, int running,
                      int waiting, char *buf, size_t cap) {
    size_t n = 0;
    if (cap) buf[0] = 0;
    n = metrics_put(buf, cap, n,
                    "# HELP gemmad_http_requests_total HTTP requests by route and status.\n"
                    "# TYPE gemmad_http_requests_total counter\n");
    for (int r = 0; r < METRICS_ROUTES; r++)
        for (int i = 0; i < METRICS_STATUSES && m->status_code[i]; i++)
            if (m->http[r][i])
                n = metrics_put(buf, cap, n,
                                "gemmad_http_requests_total{route=\"%s\",status=\"%d\"} %llu\n",
                                route_names[r], m->status_code[i],
                                (unsigned long long)m->http[r][i]);
    n = metrics_put(buf, cap, n,
                    "# HELP gemmad_request_success_total Finished choices by finish reason.\n"
                    "# TYPE gemmad_request_success_total counter\n");
    for (int f = 0; f < METRICS_N_FIN; f++)
        n = metrics_put(buf, cap, n, "gemmad_request_success_total{finished_reason=\"%s\"} %llu\n",
                        metrics_fin_names[f], (unsigned long long)m->finish[f]);
    n = metrics_put(buf, cap, n,
                    "# HELP gemmad_prompt_tokens_total Prompt tokens of finished choices.\n"
                    "# TYPE gemmad_prompt_tokens_total counter\n"
                    "gemmad_prompt_tokens_total %llu\n"
                    "# HELP gemmad_generation_tokens_total Generated tokens.\n"
                    "# TYPE gemmad_generation_tokens_total counter\n"
                    "gemmad_generation_tokens_total %llu\n",
                    (unsigned long long)m->prompt_tokens, (unsigned long long)m->generation_tokens);
    n = metrics_put(buf, cap, n,
                    "# HELP gemmad_requests_running Scheduler requests being decoded.\n"
                    "# TYPE gemmad_requests_running gauge\ngemmad_requests_running %d\n"
                    "# HELP gemmad_requests_waiting Scheduler requests waiting for admission.\n"
                    "# TYPE gemmad_requests_waiting gauge\ngemmad_requests_waiting %d\n",
                    running, waiting);
    for (int h = 0; h < METRICS_N_HIST; h++) {
        const struct metrics_hist *hi = &m->hist[h];
        const char *name = metrics_hist_names[h][0];
        n = metrics_put(buf, cap, n, "# HELP %s %s\n# TYPE %s histogram\n", name,
                        metrics_hist_names[h][1], name);
        uint64_t cum = 0;
        for (int b = 0; b < METRICS_BUCKETS; b++) {
            cum += hi->counts[b];
            n = metrics_put(buf, cap, n, "%s_bucket{le=\"%g\"} %llu\n", name, metrics_bounds[b],
                            (unsigned long long)cum);
        }
        cum += hi->counts[METRICS_BUCKETS];
        n = metrics_put(buf, cap, n, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n",
                        name, (unsigned long long)cum, name, hi->sum, name,
                        (unsigned long long)hi->n);
    }
    return n;
}
