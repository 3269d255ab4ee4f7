/*
 * metrics — Prometheus text rendering of the server's counters and of the scheduler's
 * numbers. Histogram buckets are fixed (seconds): fine at the low end for inter-token
 * latency, long at the top for end-to-end.
 */
#include "server/metrics.h"

#include <stdio.h>
#include <string.h>

/* Up to an hour: request_timeout_s allows 600 s and more, and a request that ran 10 minutes
 * must land in a finite bucket rather than +Inf. */
static const double metrics_bounds[METRICS_BUCKETS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
    5,     10,     20,    30,   60,    120,  240, 480,  960, 1920, 3600};

const char *const metrics_hist_names[METRICS_N_HIST][2] = {
    {"gemmad_time_to_first_token_seconds", "Time from request arrival to the first token."},
    {"gemmad_inter_token_latency_seconds", "Time between consecutive tokens of one choice."},
    {"gemmad_e2e_request_latency_seconds", "Time from request arrival to its last token."},
    {"gemmad_request_queue_time_seconds", "Time a choice waited for admission."},
};

const char *const metrics_fin_names[METRICS_N_FIN] = {"stop", "length", "cancelled",
                                                             "deadline", "error"};

void metrics_init(struct metrics *m) {
    memset(m, 0, sizeof *m);
    for (int h = 0; h < METRICS_N_HIST; h++)
        prom_hist_init(&m->hist[h], metrics_bounds, METRICS_BUCKETS);
}

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
    prom_hist_observe(&m->hist[h], s < 0 ? 0 : s);
}

static void metrics_counter(struct strbuf *b, const char *name, const char *help, uint64_t v) {
    prom_family(b, name, "counter", help);
    prom_u64(b, name, NULL, v);
}

static void metrics_gauge(struct strbuf *b, const char *name, const char *help, int64_t v) {
    prom_family(b, name, "gauge", help);
    prom_i64(b, name, NULL, v);
}

static void metrics_render_sched(const struct sched_stats *st, struct strbuf *b) {
    static const char *const cls[2] = {"full", "swa"};
    prom_family(b, "gemmad_sched_sequences", "gauge", "Sequences by scheduler state.");
    prom_i64(b, "gemmad_sched_sequences", (const struct prom_label[]){{"state", "running"}, {0}},
             st->running);
    prom_i64(b, "gemmad_sched_sequences", (const struct prom_label[]){{"state", "waiting"}, {0}},
             st->waiting);
    prom_family(b, "gemmad_kv_blocks", "gauge",
                "KV cache blocks by class and state (used: referenced by a sequence or "
                "session; cached: prefix-cache blocks nobody references; free).");
    for (int c = 0; c < 2; c++) {
        if (st->kv_total[c] <= 0) continue;
        int cached = st->kv_total[c] - st->kv_used[c] - st->kv_free[c];
        prom_i64(b, "gemmad_kv_blocks",
                 (const struct prom_label[]){{"class", cls[c]}, {"state", "used"}, {0}},
                 st->kv_used[c]);
        prom_i64(b, "gemmad_kv_blocks",
                 (const struct prom_label[]){{"class", cls[c]}, {"state", "cached"}, {0}}, cached);
        prom_i64(b, "gemmad_kv_blocks",
                 (const struct prom_label[]){{"class", cls[c]}, {"state", "free"}, {0}},
                 st->kv_free[c]);
    }
    prom_family(b, "gemmad_kv_usage_ratio", "gauge",
                "Fraction of KV blocks in use by sequences.");
    for (int c = 0; c < 2; c++)
        if (st->kv_total[c] > 0)
            prom_f64(b, "gemmad_kv_usage_ratio", (const struct prom_label[]){{"class", cls[c]}, {0}},
                     (double)st->kv_used[c] / st->kv_total[c]);
    metrics_counter(b, "gemmad_prefix_cache_queries_total",
                    "Admissions that looked up the prefix cache.", st->prefix_queries);
    metrics_counter(b, "gemmad_prefix_cache_hits_total", "Admissions that reused cached KV blocks.",
                    st->prefix_hits);
    metrics_counter(b, "gemmad_prefix_cache_hit_tokens_total",
                    "Prompt positions reused from the cache.", st->prefix_hit_tokens);
    metrics_counter(b, "gemmad_kv_evictions_total", "Cached KV blocks evicted (LRU).",
                    st->kv_evictions);
    metrics_gauge(b, "gemmad_kv_sessions", "Warm sessions holding KV blocks.", st->kv_sessions);
    metrics_counter(b, "gemmad_sched_preemptions_total", "Sequences preempted when KV ran out.",
                    st->preemptions);
    metrics_counter(b, "gemmad_sched_queue_rejections_total",
                    "Submissions refused: queue full.", st->rejections);
    metrics_counter(b, "gemmad_sched_steps_total", "Scheduler steps (forward passes).", st->steps);
    metrics_counter(b, "gemmad_spec_draft_tokens_total",
                    "Tokens drafted and verified (speculative decoding): by prompt lookup, "
                    "or forced by a grammar.",
                    st->spec_draft_tokens);
    metrics_counter(b, "gemmad_spec_grammar_draft_tokens_total",
                    "Drafted tokens that a grammar forced (part of gemmad_spec_draft_tokens_total).",
                    st->spec_grammar_tokens);
    metrics_counter(b, "gemmad_spec_accepted_tokens_total",
                    "Drafted tokens accepted: tokens gained over plain decoding.",
                    st->spec_accepted_tokens);
    metrics_counter(b, "gemmad_spec_verify_steps_total",
                    "Sequence-steps that carried drafted tokens.", st->spec_verify_steps);
    metrics_counter(b, "gemmad_sched_loop_turns_total",
                    "Scheduler loop turns finished (the liveness progress counter).",
                    st->loop_turns);
    prom_family(b, "gemmad_sched_progress_age_seconds", "gauge",
                "Seconds since the scheduler thread last finished a loop turn (0 while idle); "
                "/live fails past live_stall_s with requests pending.");
    prom_f64(b, "gemmad_sched_progress_age_seconds", NULL, st->progress_age_s);
    prom_hist_write(b, "gemmad_sched_batch_sequences", "Sequences per step.", &st->batch_seqs);
    prom_hist_write(b, "gemmad_sched_batch_tokens",
                    "Tokens per step (decode rows plus prefill chunks).", &st->batch_tokens);
    prom_hist_write(b, "gemmad_sched_step_seconds",
                    "Wall time of one step (forward plus sampling).", &st->step_s);
}

void metrics_render_grammar(int entries, long long hits, long long misses, struct strbuf *b) {
    metrics_gauge(b, "gemmad_grammar_cache_entries", "Compiled grammars held for reuse.", entries);
    metrics_counter(b, "gemmad_grammar_cache_hits_total",
                    "Constrained requests whose grammar was already compiled (warm mask cache).",
                    (uint64_t)hits);
    metrics_counter(b, "gemmad_grammar_cache_misses_total",
                    "Constrained requests whose grammar was compiled (cache on).", (uint64_t)misses);
}

void metrics_render(const struct metrics *m, const char *const *route_names,
                    const struct sched_stats *st, struct strbuf *b) {
    prom_family(b, "gemmad_http_requests_total", "counter", "HTTP requests by route and status.");
    for (int r = 0; r < METRICS_ROUTES; r++)
        for (int i = 0; i < METRICS_STATUSES && m->status_code[i]; i++) {
            if (!m->http[r][i]) continue;
            char code[16];
            snprintf(code, sizeof code, "%d", m->status_code[i]);
            prom_u64(b, "gemmad_http_requests_total",
                     (const struct prom_label[]){{"route", route_names[r]}, {"status", code}, {0}},
                     m->http[r][i]);
        }
    prom_family(b, "gemmad_request_success_total", "counter",
                "Finished choices by finish reason.");
    for (int f = 0; f < METRICS_N_FIN; f++)
        prom_u64(b, "gemmad_request_success_total",
                 (const struct prom_label[]){{"finished_reason", metrics_fin_names[f]}, {0}},
                 m->finish[f]);
    metrics_counter(b, "gemmad_prompt_tokens_total", "Prompt tokens of finished choices.",
                    m->prompt_tokens);
    metrics_counter(b, "gemmad_generation_tokens_total",
                    "Generated tokens, counted as each is produced.",
                    m->generation_tokens);
    metrics_gauge(b, "gemmad_requests_running", "Scheduler requests being decoded.",
                  st ? st->running : 0);
    metrics_gauge(b, "gemmad_requests_waiting", "Scheduler requests waiting for admission.",
                  st ? st->waiting : 0);
    for (int h = 0; h < METRICS_N_HIST; h++)
        prom_hist_write(b, metrics_hist_names[h][0], metrics_hist_names[h][1], &m->hist[h]);
    if (st) metrics_render_sched(st, b);
}
