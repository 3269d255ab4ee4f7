/*
 * metrics_gw — the /metrics families that inference gateways and operators read besides
 * gemmad's own: vLLM's names and meanings (the Gateway API Inference Extension's endpoint
 * picker and llm-d read vllm:num_requests_waiting, vllm:num_requests_running and
 * vllm:kv_cache_usage_perc; dashboards read the latency histograms), each with a model_name
 * label; the server's state (ready / draining); build and configuration info; and the
 * process's own numbers (RSS, descriptors, CPU time, start time) read from /proc.
 *
 * The same counters and histograms feed both names: a vllm:* family is another view of a
 * gemmad_* one, never a second count. Loop thread only (part of the metrics module).
 */
#include "server/metrics.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#ifndef GEMMAD_VERSION
#define GEMMAD_VERSION "unknown"
#endif

/* The binding KV pool's used fraction: a class that runs out stops admission, whichever. */
static double metrics_kv_usage(const struct sched_stats *st) {
    double u = 0;
    for (int c = 0; c < 2; c++)
        if (st->kv_total[c] > 0 && (double)st->kv_used[c] / st->kv_total[c] > u)
            u = (double)st->kv_used[c] / st->kv_total[c];
    return u;
}

/* One family of one sample. */
static void metrics_gw_one(struct strbuf *b, const char *name, const char *type,
                           const char *help, const struct prom_label *l, uint64_t v) {
    prom_family(b, name, type, help);
    prom_u64(b, name, l, v);
}

static void metrics_gw_vllm(const struct metrics *m, const struct metrics_info *inf,
                            const struct sched_stats *st, struct strbuf *b) {
    const struct prom_label ml[] = {{"model_name", inf->model_name}, {0}};
    if (st) {
        metrics_gw_one(b, "vllm:num_requests_running", "gauge",
                       "Requests being decoded (in the running batch).", ml, st->running);
        metrics_gw_one(b, "vllm:num_requests_waiting", "gauge",
                       "Requests waiting for admission (the queue).", ml, st->waiting);
        double u = metrics_kv_usage(st);
        prom_family(b, "vllm:kv_cache_usage_perc", "gauge",
                    "Fraction of KV-cache blocks in use by sequences and sessions (1 = full).");
        prom_f64(b, "vllm:kv_cache_usage_perc", ml, u);
        prom_family(b, "vllm:gpu_cache_usage_perc", "gauge",
                    "The same fraction under vLLM's older name (whatever the device).");
        prom_f64(b, "vllm:gpu_cache_usage_perc", ml, u);
        metrics_gw_one(b, "vllm:prefix_cache_queries_total", "counter",
                       "Prompt tokens looked up in the prefix cache.", ml,
                       st->prefix_query_tokens);
        metrics_gw_one(b, "vllm:prefix_cache_hits_total", "counter",
                       "Prompt tokens found in the prefix cache (or a warm session).", ml,
                       st->prefix_hit_tokens);
        metrics_gw_one(b, "vllm:num_preemptions_total", "counter",
                       "Sequences preempted when KV blocks ran out.", ml, st->preemptions);
        char bs[16], nb[16];
        snprintf(bs, sizeof bs, "%d", inf->cfg->kv_block_size);
        snprintf(nb, sizeof nb, "%d", st->kv_total[0]);
        prom_family(b, "vllm:cache_config_info", "gauge", "KV cache configuration (value 1).");
        prom_i64(b, "vllm:cache_config_info",
                 (const struct prom_label[]){{"block_size", bs},
                                             {"cache_dtype", inf->cfg->kv_dtype},
                                             {"enable_prefix_caching",
                                              inf->cfg->prefix_cache ? "True" : "False"},
                                             {"num_gpu_blocks", nb},
                                             {0}},
                 1);
    }
    metrics_gw_one(b, "vllm:prompt_tokens_total", "counter",
                   "Prompt tokens of finished requests.", ml, m->prompt_tokens);
    metrics_gw_one(b, "vllm:generation_tokens_total", "counter",
                   "Generated tokens, counted as each is produced.", ml, m->generation_tokens);
    /* vLLM's finish reasons: stop, length, abort (cancelled, past the deadline, failed). */
    uint64_t abort = m->finish[METRICS_FIN_CANCELLED] + m->finish[METRICS_FIN_DEADLINE] +
                     m->finish[METRICS_FIN_ERROR];
    prom_family(b, "vllm:request_success_total", "counter", "Finished requests by reason.");
    prom_u64(b, "vllm:request_success_total",
             (const struct prom_label[]){{"finished_reason", "stop"},
                                         {"model_name", inf->model_name}, {0}},
             m->finish[METRICS_FIN_STOP]);
    prom_u64(b, "vllm:request_success_total",
             (const struct prom_label[]){{"finished_reason", "length"},
                                         {"model_name", inf->model_name}, {0}},
             m->finish[METRICS_FIN_LENGTH]);
    prom_u64(b, "vllm:request_success_total",
             (const struct prom_label[]){{"finished_reason", "abort"},
                                         {"model_name", inf->model_name}, {0}},
             abort);
    static const char *const vname[METRICS_N_HIST] = {
        "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds"};
    for (int h = 0; h < METRICS_N_HIST; h++)
        prom_hist_write_l(b, vname[h], metrics_hist_names[h][1], ml, &m->hist[h]);
    prom_hist_write_l(b, "vllm:time_per_output_token_seconds",
                      "Time between consecutive tokens (vLLM's older name).", ml,
                      &m->hist[METRICS_ITL]);
    /* No LoRA adapters: the endpoint picker's LoRA-affinity scorer reads this family. */
    prom_family(b, "vllm:lora_requests_info", "gauge",
                "LoRA adapters (none: gemmad serves no adapters); value: when last updated.");
    prom_f64(b, "vllm:lora_requests_info",
             (const struct prom_label[]){{"max_lora", "0"},
                                         {"running_lora_adapters", ""},
                                         {"waiting_lora_adapters", ""},
                                         {0}},
             inf->start_time);
}

static void metrics_gw_info(const struct metrics_info *inf, struct strbuf *b) {
    static const char *const states[] = {"loading", "ready", "draining", "stopping", "failed"};
    prom_family(b, "gemmad_server_state", "gauge",
                "1 for the server's current state: ready serves; draining refuses new work "
                "(/health 503) while running requests finish.");
    for (size_t i = 0; i < sizeof states / sizeof states[0]; i++)
        prom_i64(b, "gemmad_server_state", (const struct prom_label[]){{"state", states[i]}, {0}},
                 !strcmp(inf->state, states[i]));
#ifdef GEMMAD_CUDA
    const char *cuda = "1";
#else
    const char *cuda = "0";
#endif
    prom_family(b, "gemmad_build_info", "gauge", "Build of this binary (value 1).");
    prom_i64(b, "gemmad_build_info",
             (const struct prom_label[]){{"version", GEMMAD_VERSION}, {"cuda", cuda},
                                         {"compiler", __VERSION__}, {0}},
             1);
    const struct config *c = inf->cfg;
    char ctx[16], seqs[16], mbt[16], bs[16], kvt[16], kvm[16], q[16], drain[32], stall[32];
    snprintf(ctx, sizeof ctx, "%d", c->ctx_size);
    snprintf(seqs, sizeof seqs, "%d", c->max_seqs);
    snprintf(mbt, sizeof mbt, "%d", c->max_batch_tokens);
    snprintf(bs, sizeof bs, "%d", c->kv_block_size);
    snprintf(kvt, sizeof kvt, "%d", c->kv_tokens);
    snprintf(kvm, sizeof kvm, "%d", c->kv_memory_mib);
    snprintf(q, sizeof q, "%d", c->max_queue);
    snprintf(drain, sizeof drain, "%g", c->drain_timeout_s);
    snprintf(stall, sizeof stall, "%g", c->live_stall_s);
    prom_family(b, "gemmad_config_info", "gauge", "Settings that size a replica (value 1).");
    prom_i64(b, "gemmad_config_info",
             (const struct prom_label[]){{"model_name", inf->model_name},
                                         {"ctx_size", ctx},
                                         {"max_seqs", seqs},
                                         {"max_batch_tokens", mbt},
                                         {"max_queue", q},
                                         {"kv_block_size", bs},
                                         {"kv_tokens", kvt},
                                         {"kv_memory_mib", kvm},
                                         {"kv_dtype", c->kv_dtype},
                                         {"device", c->device},
                                         {"drain_timeout_s", drain},
                                         {"live_stall_s", stall},
                                         {0}},
             1);
}

/* process_* as the Prometheus client libraries name them, from /proc/self. */
static void metrics_gw_process(const struct metrics_info *inf, struct strbuf *b) {
    long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    unsigned long long ut = 0, stt = 0, vsize = 0;
    long long rss = 0;
    int have_stat = 0;
    FILE *f = fopen("/proc/self/stat", "r");
    if (f) {
        char line[1024];
        if (fgets(line, sizeof line, f)) {
            const char *p = strrchr(line, ')'); /* the command name may hold spaces */
            /* after ") ": state(3) ... utime(14) stime(15) ... vsize(23) rss(24) */
            if (p && sscanf(p + 2,
                            "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d "
                            "%*d %*d %*d %*u %llu %lld",
                            &ut, &stt, &vsize, &rss) == 4)
                have_stat = 1;
        }
        fclose(f);
    }
    if (have_stat && tck > 0) {
        prom_family(b, "process_cpu_seconds_total", "counter", "User and system CPU seconds.");
        prom_f64(b, "process_cpu_seconds_total", NULL, (double)(ut + stt) / (double)tck);
        prom_family(b, "process_resident_memory_bytes", "gauge", "Resident memory in bytes.");
        prom_i64(b, "process_resident_memory_bytes", NULL, rss * (long long)page);
        prom_family(b, "process_virtual_memory_bytes", "gauge", "Virtual memory in bytes.");
        prom_i64(b, "process_virtual_memory_bytes", NULL, (int64_t)vsize);
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        int n = 0;
        for (struct dirent *e; (e = readdir(d));)
            if (e->d_name[0] != '.') n++;
        closedir(d);
        prom_family(b, "process_open_fds", "gauge", "Open file descriptors.");
        prom_i64(b, "process_open_fds", NULL, n - 1); /* less the one opendir holds */
    }
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY) {
        prom_family(b, "process_max_fds", "gauge", "Limit on open file descriptors.");
        prom_i64(b, "process_max_fds", NULL, (int64_t)rl.rlim_cur);
    }
    prom_family(b, "process_start_time_seconds", "gauge",
                "Start time of the process since the Unix epoch, in seconds.");
    prom_f64(b, "process_start_time_seconds", NULL, inf->start_time);
}

void metrics_render_gw(const struct metrics *m, const struct metrics_info *inf,
                       const struct sched_stats *st, struct strbuf *b) {
    metrics_gw_vllm(m, inf, st, b);
    metrics_gw_info(inf, b);
    metrics_gw_process(inf, b);
}
