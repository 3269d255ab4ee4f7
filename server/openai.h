/*
 * openai — the OpenAI JSON shapes: validation of request bodies (chat completions and
 * completions) into scheduler-ready parameters, and every response body the API sends
 * (errors, completion objects, stream chunks, usage, logprobs, the model list).
 *
 * oai_parse() checks every field it knows (type, range, size) and names the offending
 * parameter in the error; unknown fields are ignored and never reach the scheduler; fields
 * that gemmad does not support yet (tools, response_format other than text, suffix, …) are refused
 * by name. It renders chat messages (chat_render) and tokenizes prompts. Pure functions:
 * any thread; the vocab must outlive the result.
 */
#ifndef GEMMAD_OPENAI_H
#define GEMMAD_OPENAI_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "scheduler/sched.h"

struct tok_vocab;
struct gram_lru;

#define OAI_MAX_STOP 16        /* stop strings per request */
#define OAI_MAX_STOP_LEN 256   /* bytes per stop string */
#define OAI_MAX_BIAS 1024      /* logit_bias entries */
#define OAI_MAX_TOP_LOGPROBS 20

struct oai_limits {
    const struct tok_vocab *vocab;
    int chat_style;            /* enum chat_style */
    int n_ctx;                 /* positions per sequence */
    int max_tokens;            /* cap and default of generated tokens */
    int max_n;                 /* most choices per request */
    const char *model_id;      /* accepted values of "model" */
    const char *model_name;
    const char *const *aliases; /* [n_aliases] more accepted values (the served ids) */
    int n_aliases;
    int accept_any_model;      /* 1: any value names the served model */
    int allow_control_tokens;  /* 1: control-token text in content/prompts is special */
    int max_tools;             /* structured output and tools (api_tools.h) */
    int max_schema_bytes;
    int grammar_max_stacks, grammar_max_elems;
    int json_schema_extra_keys; /* jschema_opts.extra_keys (api_tools.h) */
    int json_schema_any_order;  /* jschema_opts.any_order */
    struct gram_lru *gram_cache; /* compiled grammars shared by requests (NULL: none) */
};

struct oai_error {
    int status;                /* HTTP status */
    const char *type;          /* "invalid_request_error", … */
    const char *code;          /* e.g. "context_length_exceeded", or NULL */
    char param[96];            /* offending parameter, "" for none */
    char msg[512];
};

struct oai_params {
    int is_chat;
    int stream, include_usage;
    int n;                     /* choices per prompt */
    struct sched_sampling sp;  /* sp.logit_bias points at bias */
    struct sched_bias *bias;   /* [sp.n_logit_bias] (owned) */
    char **stop;               /* [n_stop] (owned) */
    int n_stop;
    int ignore_eos;
    int no_speculative;        /* "speculative": false: no drafted tokens for this request */
    int logprobs;              /* 1: report logprobs */
    int top_logprobs;          /* alternatives per token (0..20) */
    int echo;                  /* completions: prepend the prompt */
    int prompt_logprobs;       /* completions: echo + logprobs: the prompt tokens' logprobs */
    const char *model;         /* the id to answer with: the alias asked for, or model_id
                                * (borrowed from the limits) */
    char *session_id;          /* optional (owned) */
    int n_prompts;
    int32_t **prompt;          /* [n_prompts][prompt_len[i]] token ids (owned) */
    int *prompt_len;
    int *max_tokens;           /* [n_prompts] resolved limit per prompt */
    char **prompt_text;        /* [n_prompts] echo text (owned; NULL unless echo) */
    size_t *prompt_text_len;
    void *tools;               /* structured output / tools state (server/api_tools.h: struct
                                * tools_req), or NULL; freed with the params by tools_free */
    void (*tools_free)(void *);
};

/* Fills e (type "invalid_request_error"; param and code may be NULL); returns -1. */
int oai_fail(struct oai_error *e, int status, const char *param, const char *code,
             const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Returns 0, or -1 with e filled. */
int oai_parse(json_t *root, int is_chat, const struct oai_limits *lim, struct oai_params **out,
              struct oai_error *e);
void oai_params_free(struct oai_params *p);

/* A JSON string of arbitrary bytes: invalid UTF-8 becomes U+FFFD. */
json_t *oai_string(const char *s, size_t len);
/* Chat logprobs entry {token, logprob, bytes, top_logprobs}. */
json_t *oai_lp_entry(const struct tok_vocab *v, int32_t token, float logprob,
                     const struct sched_top *top, int n_top, int with_top);
const char *oai_finish_name(enum sched_finish f);

/* ---- responses (each returns a new reference, NULL only when out of memory) ---- */

/* What every response or chunk of one completion request repeats. */
struct oai_resp {
    const char *id;            /* "chatcmpl-…" or "cmpl-…" */
    int is_chat;
    int64_t created;           /* unix seconds */
    const char *model;         /* served model id */
    int include_usage;         /* stream: every chunk carries "usage": null */
};

/* {"error":{message,type,param,code}}; param "" or NULL and code NULL become null. */
json_t *oai_error_body(const char *msg, const char *type, const char *param, const char *code);
json_t *oai_usage(int prompt, int completion, int cached);
/* A stream chunk without "choices". */
json_t *oai_chunk(const struct oai_resp *r);
/* A chunk with one choice: a delta (chat: role and/or content) or text (completions); lp is
 * taken over (NULL: null), finish NULL: null. */
json_t *oai_chunk_choice(const struct oai_resp *r, int index, const char *role, const char *text,
                         size_t len, json_t *lp, const char *finish);
/* Legacy /v1/completions logprobs {tokens, token_logprobs, top_logprobs, text_offset}. */
json_t *oai_legacy_lp_new(void);
void oai_legacy_lp_add(const struct tok_vocab *v, json_t *obj, int32_t token, float logprob,
                       const struct sched_top *top, int n_top, size_t offset);
/* Chat logprobs {"content": content (taken over; NULL: []), "refusal": null}. */
json_t *oai_chat_lp(json_t *content);
/* One choice of a finished response; completions prepend prefix (echo) when not NULL. */
json_t *oai_choice(int is_chat, int index, const char *prefix, size_t prefix_len,
                   const char *text, size_t len, json_t *lp, const char *finish);
json_t *oai_response(const struct oai_resp *r, json_t *choices, json_t *usage);
/* /v1/models listing ids [n]; max_model_len 0 leaves the field out. */
json_t *oai_model_list(const char *const *ids, int n, int64_t created, int max_model_len);

#endif
