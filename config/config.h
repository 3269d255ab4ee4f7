/*
 * config — gemmad's settings: compiled-in defaults (mirrored and documented in
 * config/gemmad.conf), then a config file, then GEMMAD_* environment variables, then
 * command-line flags; each later source wins.
 *
 * Every setting has one name used in all three places: `ctx_size` in the file,
 * GEMMAD_CTX_SIZE in the environment, --ctx-size (or --ctx_size) on the command line.
 * Parsing never exits: errors come back as CONFIG_E* with a one-line message in err naming
 * the setting, its source and the accepted range. Main thread only.
 */
#ifndef GEMMAD_CONFIG_H
#define GEMMAD_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define CONFIG_STR_MAX 1024

struct config {
    char model[CONFIG_STR_MAX];         /* GGUF path */
    char model_alias[1024];             /* ids served by /v1/models, comma-separated (the first
                                         * is the main one); "" = file name stem */
    int accept_any_model;               /* 1: any "model" value names the served model */
    char host[256];                     /* listen addresses, comma-separated (IPv4, IPv6,
                                         * names; "[::1]" or "::1") */
    int port;                           /* listen port */
    int threads;                        /* compute threads; 0 = physical cores */
    int ctx_size;                       /* positions per sequence (prompt + output) */
    int max_tokens;                     /* cap (and default) of generated tokens per choice */
    int max_n;                          /* most choices in one request (n x prompts) */
    int64_t body_limit;                 /* bytes of request body */
    int conn_memory_limit;              /* bytes MHD may use per connection (headers) */
    int max_connections;                /* concurrent TCP connections */
    double connection_timeout_s;        /* idle connection timeout */
    double request_timeout_s;           /* total deadline per request, upload to last byte */
    double header_timeout_s;            /* seconds to a complete request header */
    int admin_port;                     /* admin listener port; -1 off, 0 any free port */
    char admin_host[256];               /* admin listen address; "" = host */
    int max_conns_per_client;           /* connections per client address; 0 = no limit */
    double write_timeout_s;             /* a stream not read for this long is ended */
    int stream_pause_bytes;             /* unsent stream bytes that pause its sequences */
    int group_max_seqs;                 /* decode slots per request/API key while others wait */
    int allow_control_tokens;           /* 1: control-token text in content is special */
    double sse_keepalive_s;             /* ": keep-alive" comment period on idle streams */
    double drain_timeout_s;             /* SIGTERM: how long running streams may finish */
    double live_stall_s;                /* /live fails when the scheduler made no progress
                                         * this long with work pending */
    int max_queue;                      /* waiting requests before 429 */
    int max_queued_tokens;              /* waiting prompt tokens before 429 */
    int max_seqs;                       /* sequences running at once */
    int max_batch_tokens;               /* token budget of one scheduler step */
    double prefill_stall;               /* a step with prefill chunks vs a decode-only one */
    int kv_block_size;                  /* positions per KV block */
    int kv_memory_mib;                  /* KV pool size in MiB; 0 = from kv_tokens */
    int kv_tokens;                      /* KV capacity in tokens when kv_memory_mib is 0 */
    char kv_dtype[16];                  /* f16 | q8_0 | f32 */
    int prefix_cache;                   /* 1: reuse cached prompt prefixes */
    double session_ttl_s;               /* keep a finished session's KV warm this long */
    int deterministic;                  /* 1: batch- and thread-invariant results */
    int speculative;                    /* 0 off, 1 adaptive, 2 always (spec.h) */
    char device[16];                    /* cpu | cuda | auto */
    char api_keys_file[CONFIG_STR_MAX]; /* one key per line; "" = no authentication */
    char log_level[16];                 /* error | warn | info | debug */
    char cors_origins[CONFIG_STR_MAX];  /* origins allowed cross-site ("*": any; "" none) */
    int no_ui;                          /* 1: no chat page at GET / */
    int responses_store;                /* stored /v1/responses conversations kept at most */
    double responses_ttl_s;             /* and for at most this long */
    char embedding_pooling[8];          /* mean | last: /v1/embeddings' default pooling */
    int max_tools;                      /* function tools in one request */
    int max_schema_bytes;               /* bytes of one schema, grammar or tool list */
    int grammar_max_stacks;             /* matcher stacks at once (a grammar past it: 400) */
    int grammar_max_elems;              /* grammar size after expansion (past it: 400) */
    int grammar_cache;                  /* compiled grammars kept for reuse (LRU; 0: none) */
    int json_schema_extra_keys;         /* 1: absent additionalProperties = true (jschema.h) */
    int json_schema_any_order;          /* 1: object keys in any order (jschema.h) */
};

enum config_status {
    CONFIG_OK = 0,
    CONFIG_EVALUE = -1,   /* a value out of range or of the wrong type */
    CONFIG_EUNKNOWN = -2, /* an unknown setting or flag */
    CONFIG_EIO = -3,      /* the config file cannot be read */
    CONFIG_HELP = 1,      /* --help was given: print config_help() and exit 0 */
};

void config_defaults(struct config *c);
/* Applies `key = value` lines ('#' comments, blank lines ignored). */
int config_load_file(struct config *c, const char *path, char *err, size_t errlen);
/* Same for one buffer of text; `source` names it in error messages. */
int config_load_text(struct config *c, const char *text, const char *source, char *err,
                     size_t errlen);
/* Applies every GEMMAD_<NAME> variable found in envp (NULL-terminated, like environ). */
int config_load_env(struct config *c, char *const *envp, char *err, size_t errlen);
/* Applies --name value / --name=value flags (argv[0] is skipped); --help gives CONFIG_HELP. */
int config_load_args(struct config *c, int argc, char *const *argv, char *err, size_t errlen);
/* The whole chain: defaults, --config/GEMMAD_CONFIG file, env, flags. */
int config_load(struct config *c, int argc, char *const *argv, char *const *envp, char *err,
                size_t errlen);
/* Cross-field checks (model given, limits consistent). */
int config_validate(const struct config *c, char *err, size_t errlen);
/* Sets one setting by name from text. */
int config_set(struct config *c, const char *name, const char *value, const char *source,
               char *err, size_t errlen);
/* Writes the --help text (every setting, its default and meaning) to buf. */
size_t config_help(char *buf, size_t cap);
/* Writes "name = value" lines for every setting (for logging and tests). */
size_t config_dump(const struct config *c, char *buf, size_t cap);

#endif
