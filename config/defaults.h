/*
 * defaults — the one table of gemmad's default settings. config_defaults() copies it into a
 * struct config, sched_opts_default() into the scheduler's options, and tools take their
 * defaults from it, so a default is written once; config/gemmad.conf documents the same
 * values (tests/unit/test_config.c checks that loading it changes nothing).
 *
 * GEMMAD_DEFAULTS_NUM rows are (type, setting, value); GEMMAD_DEFAULTS_STR rows are
 * (setting, value). Setting names are those of struct config. Read-only data: any thread.
 */
#ifndef GEMMAD_CONFIG_DEFAULTS_H
#define GEMMAD_CONFIG_DEFAULTS_H

#include <stdint.h>

#define GEMMAD_DEFAULTS_NUM(X)                                                               \
    X(int, port, 8080)                                                                       \
    X(int, threads, 0)                                                                       \
    X(int, ctx_size, 4096)                                                                   \
    X(int, max_tokens, 2048)                                                                 \
    X(int, max_n, 8)                                                                         \
    X(int64_t, body_limit, 4 << 20)                                                          \
    X(int, conn_memory_limit, 32768)                                                         \
    X(int, max_connections, 512)                                                             \
    X(double, connection_timeout_s, 60)                                                      \
    X(double, request_timeout_s, 600)                                                        \
    X(double, header_timeout_s, 10)                                                          \
    X(int, admin_port, -1)                                                                   \
    X(int, max_conns_per_client, 0)                                                          \
    X(double, write_timeout_s, 30)                                                           \
    X(int, stream_pause_bytes, 65536)                                                        \
    X(int, group_max_seqs, 4)                                                                \
    X(int, allow_control_tokens, 0)                                                          \
    X(double, sse_keepalive_s, 15)                                                           \
    X(double, drain_timeout_s, 30)                                                           \
    X(double, live_stall_s, 120)                                                             \
    X(int, max_queue, 256)                                                                   \
    X(int, max_queued_tokens, 262144)                                                        \
    X(int, max_seqs, 16)                                                                     \
    X(int, max_batch_tokens, 512)                                                            \
    X(double, prefill_stall, 3)                                                              \
    X(int, kv_block_size, 16)                                                                \
    X(int, kv_memory_mib, 0)                                                                 \
    X(int, kv_tokens, 65536)                                                                 \
    X(int, prefix_cache, 1)                                                                  \
    X(double, session_ttl_s, 300)                                                            \
    X(int, deterministic, 0)                                                                 \
    X(int, speculative, 1)                                                                   \
    X(int, accept_any_model, 0)                                                              \
    X(int, no_ui, 0)                                                                         \
    X(int, responses_store, 256)                                                             \
    X(double, responses_ttl_s, 3600)                                                         \
    X(int, max_tools, 128)                                                                   \
    X(int, max_schema_bytes, 262144)                                                         \
    X(int, grammar_max_stacks, 1024)                                                         \
    X(int, grammar_max_elems, 200000)                                                        \
    X(int, grammar_cache, 16)                                                                \
    X(int, json_schema_extra_keys, 0)                                                        \
    X(int, json_schema_any_order, 0)

#define GEMMAD_DEFAULTS_STR(X)                                                               \
    X(model, "")                                                                             \
    X(model_alias, "")                                                                       \
    X(host, "127.0.0.1")                                                                     \
    X(admin_host, "")                                                                        \
    X(kv_dtype, "f16")                                                                       \
    X(device, "auto")                                                                        \
    X(api_keys_file, "")                                                                     \
    X(log_level, "info")                                                                     \
    X(cors_origins, "")                                                                      \
    X(embedding_pooling, "mean")

struct gemmad_defaults {
#define DEFAULTS_NUM_FIELD(type, name, value) type name;
#define DEFAULTS_STR_FIELD(name, value) const char *name;
    GEMMAD_DEFAULTS_NUM(DEFAULTS_NUM_FIELD)
    GEMMAD_DEFAULTS_STR(DEFAULTS_STR_FIELD)
#undef DEFAULTS_NUM_FIELD
#undef DEFAULTS_STR_FIELD
};

extern const struct gemmad_defaults gemmad_defaults;

#endif
