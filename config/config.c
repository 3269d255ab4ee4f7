/*
 * config — table-driven settings parser. One row per setting gives its name, type, place in
 * struct config, accepted range and help text; file, environment and flags all go through
 * config_set(), so the three sources accept exactly the same values.
 */
#include "config/config.h"
#include "config/defaults.h"
#include "base/strbuf.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* CFG_LIST: a comma-separated string; a flag repeated on the command line adds to it. */
enum cfg_type { CFG_INT, CFG_I64, CFG_DBL, CFG_BOOL, CFG_STR, CFG_ENUM, CFG_LIST };

struct cfg_opt {
    const char *name;   /* file key; env GEMMAD_<NAME>; flag --name (with - or _) */
    enum cfg_type type;
    size_t off;         /* offset in struct config */
    size_t size;        /* CFG_STR / CFG_ENUM: buffer size */
    double min, max;    /* numeric range, inclusive */
    const char *choices; /* CFG_ENUM: "a|b|c" */
    const char *help;
};

#define OFF(f) offsetof(struct config, f)
#define SZ(f) sizeof(((struct config *)0)->f)

static const struct cfg_opt cfg_opts[] = {
    {"model", CFG_STR, OFF(model), SZ(model), 0, 0, NULL, "path of the GGUF model file"},
    {"model_alias", CFG_LIST, OFF(model_alias), SZ(model_alias), 0, 0, NULL,
     "model ids served by /v1/models, comma-separated or the flag repeated (empty: the file "
     "name without .gguf)"},
    {"accept_any_model", CFG_BOOL, OFF(accept_any_model), 0, 0, 1, NULL,
     "accept any \"model\" value as the served model (off: unknown names get 404)"},
    {"host", CFG_LIST, OFF(host), SZ(host), 0, 0, NULL,
     "listen addresses, comma-separated or the flag repeated (IPv6 too: ::1, [::1], ::)"},
    {"port", CFG_INT, OFF(port), 0, 0, 65535, NULL, "listen port (0: any free port, logged)"},
    {"threads", CFG_INT, OFF(threads), 0, 0, 1024, NULL, "compute threads (0: physical cores)"},
    {"ctx_size", CFG_INT, OFF(ctx_size), 0, 16, 1 << 20, NULL,
     "context length per sequence (prompt + generated tokens)"},
    {"max_tokens", CFG_INT, OFF(max_tokens), 0, 1, 1 << 20, NULL,
     "most generated tokens per choice (also the default when a request gives none)"},
    {"max_n", CFG_INT, OFF(max_n), 0, 1, 128, NULL,
     "most choices in one request (n, times prompts for /v1/completions)"},
    {"body_limit", CFG_I64, OFF(body_limit), 0, 1024, 1LL << 32, NULL,
     "largest request body in bytes (413 above it)"},
    {"conn_memory_limit", CFG_INT, OFF(conn_memory_limit), 0, 4096, 1 << 24, NULL,
     "bytes libmicrohttpd may use per connection; bounds the request headers"},
    {"max_connections", CFG_INT, OFF(max_connections), 0, 1, 65536, NULL,
     "concurrent TCP connections"},
    {"connection_timeout_s", CFG_DBL, OFF(connection_timeout_s), 0, 1, 86400, NULL,
     "seconds an idle connection is kept"},
    {"request_timeout_s", CFG_DBL, OFF(request_timeout_s), 0, 1, 86400, NULL,
     "total seconds one request may take, from its first byte to its last"},
    {"header_timeout_s", CFG_DBL, OFF(header_timeout_s), 0, 0.1, 86400, NULL,
     "seconds a connection has to send a complete request header, from its accept or the "
     "request line of a later request on it"},
    {"admin_port", CFG_INT, OFF(admin_port), 0, -1, 65535, NULL,
     "port of the admin listener serving only /health, /live and /metrics (-1: off, 0: any "
     "free port, logged)"},
    {"admin_host", CFG_STR, OFF(admin_host), SZ(admin_host), 0, 0, NULL,
     "listen address of the admin listener (empty: host)"},
    {"max_conns_per_client", CFG_INT, OFF(max_conns_per_client), 0, 0, 65536, NULL,
     "concurrent connections from one client address (0: no limit; keep 0 behind a balancer)"},
    {"write_timeout_s", CFG_DBL, OFF(write_timeout_s), 0, 0.1, 86400, NULL,
     "a stream whose client reads nothing for this many seconds is ended"},
    {"stream_pause_bytes", CFG_INT, OFF(stream_pause_bytes), 0, 1024, 1 << 30, NULL,
     "unsent bytes of a stream at which its sequences leave the batch until the client reads "
     "(also the stream socket's send buffer)"},
    {"group_max_seqs", CFG_INT, OFF(group_max_seqs), 0, 1, 4096, NULL,
     "decode slots one request (or one API key) keeps while others wait; above it, it only "
     "uses slots nobody else waits for"},
    {"allow_control_tokens", CFG_BOOL, OFF(allow_control_tokens), 0, 0, 1, NULL,
     "tokenize control-token text in message content and prompt strings as control tokens "
     "(off: as ordinary text)"},
    {"sse_keepalive_s", CFG_DBL, OFF(sse_keepalive_s), 0, 0.05, 3600, NULL,
     "seconds between ': keep-alive' comments on a quiet stream"},
    {"drain_timeout_s", CFG_DBL, OFF(drain_timeout_s), 0, 0, 3600, NULL,
     "after SIGTERM, seconds running requests may take before they are ended"},
    {"live_stall_s", CFG_DBL, OFF(live_stall_s), 0, 1, 86400, NULL,
     "/live answers 503 when the scheduler thread made no progress for this many seconds "
     "while requests wait or run"},
    {"max_queue", CFG_INT, OFF(max_queue), 0, 1, 1 << 20, NULL,
     "waiting requests (paused streams not counted) before new ones get 429"},
    {"max_queued_tokens", CFG_INT, OFF(max_queued_tokens), 0, 1, 1 << 30, NULL,
     "waiting prompt tokens (paused streams not counted) before new requests get 429"},
    {"max_seqs", CFG_INT, OFF(max_seqs), 0, 1, 4096, NULL, "sequences decoded at once"},
    {"max_batch_tokens", CFG_INT, OFF(max_batch_tokens), 0, 1, 1 << 20, NULL,
     "token budget of one scheduler step (decode rows + prefill chunks)"},
    {"prefill_stall", CFG_DBL, OFF(prefill_stall), 0, 0, 100, NULL,
     "while sequences decode, prefill chunks are cut so a step takes about this many times "
     "a decode-only step (from measured step times), the prefill share scaled by (decoding "
     "+ prompts waiting) / decoding; 0 (or up to 1): only max_batch_tokens"},
    {"kv_block_size", CFG_INT, OFF(kv_block_size), 0, 1, 4096, NULL, "positions per KV block"},
    {"kv_memory_mib", CFG_INT, OFF(kv_memory_mib), 0, 0, 1 << 24, NULL,
     "KV cache size in MiB (0: sized from kv_tokens)"},
    {"kv_tokens", CFG_INT, OFF(kv_tokens), 0, 16, 1 << 26, NULL,
     "KV cache capacity in tokens when kv_memory_mib is 0"},
    {"kv_dtype", CFG_ENUM, OFF(kv_dtype), SZ(kv_dtype), 0, 0, "f16|q8_0|f32",
     "KV cache element type"},
    {"prefix_cache", CFG_BOOL, OFF(prefix_cache), 0, 0, 1, NULL,
     "reuse KV blocks of identical prompt prefixes (1/0)"},
    {"session_ttl_s", CFG_DBL, OFF(session_ttl_s), 0, 0, 86400 * 7, NULL,
     "seconds a finished session's KV blocks stay warm"},
    {"deterministic", CFG_BOOL, OFF(deterministic), 0, 0, 1, NULL,
     "batch- and thread-invariant results: no cuBLAS on CUDA, no OpenBLAS for F32/F16/BF16 "
     "weights on the CPU (1/0)"},
    {"speculative", CFG_INT, OFF(speculative), 0, 0, 2, NULL,
     "speculative decoding by prompt lookup, output unchanged: 0 off, 1 when it pays "
     "(measured), 2 always"},
    {"device", CFG_ENUM, OFF(device), SZ(device), 0, 0, "auto|cpu|cuda",
     "compute device (auto: CUDA when available)"},
    {"api_keys_file", CFG_STR, OFF(api_keys_file), SZ(api_keys_file), 0, 0, NULL,
     "file with one API key per line; empty: no authentication"},
    {"log_level", CFG_ENUM, OFF(log_level), SZ(log_level), 0, 0, "error|warn|info|debug",
     "log level"},
    {"cors_origins", CFG_STR, OFF(cors_origins), SZ(cors_origins), 0, 0, NULL,
     "origins allowed to call the API from a browser, comma-separated, or * (empty: none)"},
    {"no_ui", CFG_BOOL, OFF(no_ui), 0, 0, 1, NULL, "serve no chat page at GET /"},
    {"responses_store", CFG_INT, OFF(responses_store), 0, 0, 1 << 20, NULL,
     "stored /v1/responses conversations kept for previous_response_id (LRU)"},
    {"responses_ttl_s", CFG_DBL, OFF(responses_ttl_s), 0, 0, 86400 * 7, NULL,
     "seconds a stored response stays available (0: no limit)"},
    {"embedding_pooling", CFG_ENUM, OFF(embedding_pooling), SZ(embedding_pooling), 0, 0,
     "mean|last", "default pooling of /v1/embeddings"},
    {"max_tools", CFG_INT, OFF(max_tools), 0, 0, 4096, NULL,
     "function tools one request may declare"},
    {"max_schema_bytes", CFG_INT, OFF(max_schema_bytes), 0, 1024, 1 << 26, NULL,
     "bytes of one JSON schema, GBNF grammar or tool list"},
    {"grammar_max_stacks", CFG_INT, OFF(grammar_max_stacks), 0, 16, 1 << 20, NULL,
     "parser stacks a grammar may hold at once (a grammar past it fails: 400 or error)"},
    {"grammar_max_elems", CFG_INT, OFF(grammar_max_elems), 0, 1024, 1 << 26, NULL,
     "grammar elements after expanding repetitions (past it: 400)"},
    {"grammar_cache", CFG_INT, OFF(grammar_cache), 0, 0, 4096, NULL,
     "compiled grammars kept for reuse by later requests with the same schema (0: none)"},
    {"json_schema_extra_keys", CFG_BOOL, OFF(json_schema_extra_keys), 0, 0, 1, NULL,
     "JSON schemas: an absent additionalProperties lets keys other than the declared ones "
     "follow them (JSON Schema's meaning); 0: only the declared keys (llama.cpp's)"},
    {"json_schema_any_order", CFG_BOOL, OFF(json_schema_any_order), 0, 0, 1, NULL,
     "JSON schemas: an object's keys (up to 10 declared ones) in any order; 0: the "
     "schema's order (llama.cpp's)"},
};
#define CFG_N_OPTS (sizeof cfg_opts / sizeof cfg_opts[0])

void config_defaults(struct config *c) {
    memset(c, 0, sizeof *c);
#define CFG_NUM_DEFAULT(type, name, value) c->name = gemmad_defaults.name;
#define CFG_STR_DEFAULT(name, value) snprintf(c->name, sizeof c->name, "%s", gemmad_defaults.name);
    GEMMAD_DEFAULTS_NUM(CFG_NUM_DEFAULT)
    GEMMAD_DEFAULTS_STR(CFG_STR_DEFAULT)
#undef CFG_NUM_DEFAULT
#undef CFG_STR_DEFAULT
}

/* Settings are matched with '-' and '_' treated alike, case-insensitively. */
static int cfg_name_eq(const char *a, const char *b, size_t blen) {
    size_t i = 0;
    for (; i < blen && a[i]; i++) {
        char x = (char)tolower((unsigned char)a[i]), y = (char)tolower((unsigned char)b[i]);
        if (x == '-') x = '_';
        if (y == '-') y = '_';
        if (x != y) return 0;
    }
    return i == blen && a[i] == 0;
}

static const struct cfg_opt *cfg_find(const char *name, size_t len) {
    for (size_t i = 0; i < CFG_N_OPTS; i++)
        if (cfg_name_eq(cfg_opts[i].name, name, len)) return &cfg_opts[i];
    return NULL;
}

static int cfg_enum_ok(const char *choices, const char *v) {
    size_t vl = strlen(v);
    const char *p = choices;
    while (*p) {
        const char *e = strchr(p, '|');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == vl && strncasecmp(p, v, l) == 0) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

static int cfg_bad(char *err, size_t errlen, const char *source, const char *name,
                   const char *value, const char *want) {
    if (err && errlen)
        snprintf(err, errlen, "%s: bad value for %s: '%.64s' (expected %s)", source, name, value,
                 want);
    return CONFIG_EVALUE;
}

int config_set(struct config *c, const char *name, const char *value, const char *source,
               char *err, size_t errlen) {
    const struct cfg_opt *o = cfg_find(name, strlen(name));
    if (!o) {
        if (err && errlen) snprintf(err, errlen, "%s: unknown setting '%.64s'", source, name);
        return CONFIG_EUNKNOWN;
    }
    char *dst = (char *)c + o->off;
    char want[160];
    switch (o->type) {
    case CFG_INT:
    case CFG_I64: {
        snprintf(want, sizeof want, "an integer in %.0f..%.0f", o->min, o->max);
        char *end;
        errno = 0;
        long long v = strtoll(value, &end, 10);
        if (!*value || *end || errno || (double)v < o->min || (double)v > o->max)
            return cfg_bad(err, errlen, source, o->name, value, want);
        if (o->type == CFG_INT) *(int *)(void *)dst = (int)v;
        else *(int64_t *)(void *)dst = (int64_t)v;
        return CONFIG_OK;
    }
    case CFG_DBL: {
        snprintf(want, sizeof want, "a number in %g..%g", o->min, o->max);
        char *end;
        errno = 0;
        double v = strtod(value, &end);
        if (!*value || *end || errno || !isfinite(v) || v < o->min || v > o->max)
            return cfg_bad(err, errlen, source, o->name, value, want);
        *(double *)(void *)dst = v;
        return CONFIG_OK;
    }
    case CFG_BOOL: {
        int v;
        if (!strcasecmp(value, "1") || !strcasecmp(value, "true") || !strcasecmp(value, "yes") ||
            !strcasecmp(value, "on"))
            v = 1;
        else if (!strcasecmp(value, "0") || !strcasecmp(value, "false") ||
                 !strcasecmp(value, "no") || !strcasecmp(value, "off"))
            v = 0;
        else
            return cfg_bad(err, errlen, source, o->name, value, "1 or 0");
        *(int *)(void *)dst = v;
        return CONFIG_OK;
    }
    case CFG_STR:
    case CFG_LIST:
        if (strlen(value) >= o->size) return cfg_bad(err, errlen, source, o->name, value,
                                                     "a shorter string");
        memcpy(dst, value, strlen(value) + 1);
        return CONFIG_OK;
    case CFG_ENUM:
        if (!cfg_enum_ok(o->choices, value)) {
            snprintf(want, sizeof want, "one of %s", o->choices);
            return cfg_bad(err, errlen, source, o->name, value, want);
        }
        for (size_t i = 0; value[i] && i + 1 < o->size; i++) dst[i] = (char)tolower((unsigned char)value[i]);
        dst[strlen(value)] = 0;
        return CONFIG_OK;
    }
    return CONFIG_EVALUE;
}

static char *cfg_trim(char *s) {
    while (*s && isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    return s;
}

int config_load_text(struct config *c, const char *text, const char *source, char *err,
                     size_t errlen) {
    int lineno = 0;
    const char *p = text;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        lineno++;
        char line[CONFIG_STR_MAX + 128];
        char where[CONFIG_STR_MAX + 64];
        snprintf(where, sizeof where, "%.1000s:%d", source, lineno);
        if (l >= sizeof line) {
            if (err && errlen) snprintf(err, errlen, "%s: line too long", where);
            return CONFIG_EVALUE;
        }
        memcpy(line, p, l);
        line[l] = 0;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *s = cfg_trim(line);
        if (*s) {
            char *eq = strchr(s, '=');
            if (!eq) {
                if (err && errlen) snprintf(err, errlen, "%s: expected 'name = value'", where);
                return CONFIG_EVALUE;
            }
            *eq = 0;
            char *k = cfg_trim(s), *v = cfg_trim(eq + 1);
            size_t vl = strlen(v);
            if (vl >= 2 && v[0] == '"' && v[vl - 1] == '"') {
                v[vl - 1] = 0;
                v++;
            }
            int rc = config_set(c, k, v, where, err, errlen);
            if (rc) return rc;
        }
        if (!e) break;
        p = e + 1;
    }
    return CONFIG_OK;
}

int config_load_file(struct config *c, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (err && errlen) snprintf(err, errlen, "cannot read config file '%.512s': %s", path,
                                    strerror(errno));
        return CONFIG_EIO;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    int rc = CONFIG_OK;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            if (cap > (1u << 20)) {
                if (err && errlen) snprintf(err, errlen, "config file '%.512s' too large", path);
                rc = CONFIG_EIO;
                goto fail_read;
            }
            char *nb = realloc(buf, cap);
            if (!nb) {
                rc = CONFIG_EIO;
                goto fail_read;
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, 4096, f);
        n += r;
        if (r < 4096) break;
    }
    buf[n] = 0;
    rc = config_load_text(c, buf, path, err, errlen);
fail_read:
    free(buf);
    fclose(f);
    return rc;
}

int config_load_env(struct config *c, char *const *envp, char *err, size_t errlen) {
    if (!envp) return CONFIG_OK;
    for (size_t i = 0; envp[i]; i++) {
        const char *e = envp[i];
        if (strncmp(e, "GEMMAD_", 7) != 0) continue;
        const char *eq = strchr(e, '=');
        if (!eq) continue;
        const char *name = e + 7;
        size_t nl = (size_t)(eq - name);
        if (cfg_name_eq("config", name, nl)) continue; /* handled by config_load */
        const struct cfg_opt *o = cfg_find(name, nl);
        if (!o) continue; /* other GEMMAD_* variables (tests, tools) are not settings */
        char src[96];
        snprintf(src, sizeof src, "environment GEMMAD_%.*s", (int)(nl > 64 ? 64 : nl), name);
        int rc = config_set(c, o->name, eq + 1, src, err, errlen);
        if (rc) return rc;
    }
    return CONFIG_OK;
}

static int cfg_is_bool_word(const char *v) {
    static const char *const w[] = {"1", "0", "true", "false", "yes", "no", "on", "off"};
    for (size_t k = 0; k < sizeof w / sizeof w[0]; k++)
        if (!strcasecmp(v, w[k])) return 1;
    return 0;
}

/* Walks the flags; `only_config` picks out --config alone (first pass). */
static int cfg_args(struct config *c, int argc, char *const *argv, int only_config,
                    const char **config_path, char *err, size_t errlen) {
    unsigned char seen[CFG_N_OPTS] = {0}; /* lists given more than once add up */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            if (!only_config) return CONFIG_HELP;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            if (err && errlen) snprintf(err, errlen, "unexpected argument '%.64s'", a);
            return CONFIG_EUNKNOWN;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t nl = eq ? (size_t)(eq - name) : strlen(name);
        const char *value;
        int is_config = cfg_name_eq("config", name, nl);
        const struct cfg_opt *o = is_config ? NULL : cfg_find(name, nl);
        if (!is_config && !o) {
            if (err && errlen) snprintf(err, errlen, "unknown flag '--%.*s' (see --help)",
                                        (int)(nl > 64 ? 64 : nl), name);
            return CONFIG_EUNKNOWN;
        }
        if (eq) {
            value = eq + 1;
        } else if (o && o->type == CFG_BOOL && (i + 1 >= argc || !cfg_is_bool_word(argv[i + 1]))) {
            value = "1"; /* a bare boolean flag (--deterministic) switches it on */
        } else {
            if (i + 1 >= argc) {
                if (err && errlen) snprintf(err, errlen, "flag '--%.*s' needs a value",
                                            (int)(nl > 64 ? 64 : nl), name);
                return CONFIG_EVALUE;
            }
            value = argv[++i];
        }
        if (is_config) {
            if (config_path) *config_path = value;
            continue;
        }
        if (only_config) continue;
        char src[96], joined[CONFIG_STR_MAX];
        snprintf(src, sizeof src, "flag --%.*s", (int)(nl > 64 ? 64 : nl), name);
        size_t oi = (size_t)(o - cfg_opts);
        if (o->type == CFG_LIST && seen[oi] && *value) {
            const char *cur = (const char *)c + o->off;
            int jn = snprintf(joined, sizeof joined, "%s%s%s", cur, *cur ? "," : "", value);
            if (jn < 0 || (size_t)jn >= sizeof joined) joined[0] = 0; /* config_set refuses */
            value = joined[0] ? joined : value;
        }
        seen[oi] = 1;
        int rc = config_set(c, o->name, value, src, err, errlen);
        if (rc) return rc;
    }
    return CONFIG_OK;
}

int config_load_args(struct config *c, int argc, char *const *argv, char *err, size_t errlen) {
    return cfg_args(c, argc, argv, 0, NULL, err, errlen);
}

int config_load(struct config *c, int argc, char *const *argv, char *const *envp, char *err,
                size_t errlen) {
    config_defaults(c);
    const char *path = NULL;
    for (size_t i = 0; envp && envp[i]; i++)
        if (!strncmp(envp[i], "GEMMAD_CONFIG=", 14)) path = envp[i] + 14;
    int rc = cfg_args(c, argc, argv, 1, &path, err, errlen);
    if (rc) return rc;
    if (path && *path) {
        rc = config_load_file(c, path, err, errlen);
        if (rc) return rc;
    }
    rc = config_load_env(c, envp, err, errlen);
    if (rc) return rc;
    return config_load_args(c, argc, argv, err, errlen);
}

int config_validate(const struct config *c, char *err, size_t errlen) {
    if (!c->model[0]) {
        if (err && errlen) snprintf(err, errlen, "no model: give --model PATH (or GEMMAD_MODEL)");
        return CONFIG_EVALUE;
    }
    if (!c->host[0]) {
        if (err && errlen) snprintf(err, errlen, "bad value for host: empty");
        return CONFIG_EVALUE;
    }
    return CONFIG_OK;
}

static void cfg_value_text(const struct config *c, const struct cfg_opt *o, char *buf,
                           size_t cap) {
    const char *src = (const char *)c + o->off;
    switch (o->type) {
    case CFG_INT:
    case CFG_BOOL: snprintf(buf, cap, "%d", *(const int *)(const void *)src); break;
    case CFG_I64: snprintf(buf, cap, "%lld", (long long)*(const int64_t *)(const void *)src); break;
    case CFG_DBL: snprintf(buf, cap, "%g", *(const double *)(const void *)src); break;
    case CFG_STR:
    case CFG_LIST:
    case CFG_ENUM: snprintf(buf, cap, "%s", src); break;
    }
}

size_t config_help(char *buf, size_t cap) {
    struct config d;
    config_defaults(&d);
    struct strbuf b;
    strbuf_init(&b, buf, cap);
    strbuf_printf(&b,
                   "usage: gemmad --model PATH [--host ADDR] [--port N] [--config FILE] "
                   "[--SETTING VALUE ...]\n\n"
                   "Settings come from the defaults below, then --config FILE (or "
                   "GEMMAD_CONFIG), then GEMMAD_<SETTING> environment variables, then flags; "
                   "later ones win.\n\n");
    for (size_t i = 0; i < CFG_N_OPTS; i++) {
        const struct cfg_opt *o = &cfg_opts[i];
        char flag[64], def[64];
        snprintf(flag, sizeof flag, "--%s", o->name);
        for (char *p = flag + 2; *p; p++)
            if (*p == '_') *p = '-';
        cfg_value_text(&d, o, def, sizeof def);
        strbuf_printf(&b, "  %-24s %s\n  %-24s default: %s%s%s\n", flag, o->help, "",
                       def[0] ? def : "(empty)", o->choices ? "; one of " : "",
                       o->choices ? o->choices : "");
    }
    return b.n;
}

size_t config_dump(const struct config *c, char *buf, size_t cap) {
    struct strbuf b;
    strbuf_init(&b, buf, cap);
    for (size_t i = 0; i < CFG_N_OPTS; i++) {
        char v[CONFIG_STR_MAX];
        cfg_value_text(c, &cfg_opts[i], v, sizeof v);
        strbuf_printf(&b, "%s = %s\n", cfg_opts[i].name, v);
    }
    return b.n;
}
