/*
 * cli — what the gemmad-cli subcommands share: the parsed options, failing with one line on
 * stderr, loading the model, turning the prompt into ids, and the runner (scheduler/runner.h)
 * every command that runs the model goes through.
 *
 * Each subcommand is `int cli_NAME(const struct cli_opts *)`, listed in main.c's command
 * table with its usage lines. Single-threaded: everything here runs on the main thread.
 */
#ifndef GEMMAD_CLI_H
#define GEMMAD_CLI_H

#include <stdint.h>

#include "engine/forward.h"
#include "engine/kernels/kern.h"
#include "engine/kvstore.h"
#include "engine/model.h"
#include "scheduler/runner.h"

/* Positions per KV block of the runner: large, since one CLI sequence never shares blocks. */
#define CLI_BLOCK 256

struct cli_opts {
    const char *cmd;
    const char *model;
    const char *prompt;
    const char *tokens;      /* "1,2,3" */
    const char *dump;        /* taps: raw f32 file of every tapped row */
    const char *text;        /* tokenize: positional TEXT */
    int special;
    int n_gen;               /* generate: -n */
    float temp;
    int top_k;
    float top_p, min_p;
    uint64_t seed;
    int chat;
    int print_ids;
    int top;                 /* logits --top */
    int all;
    int threads;
    int batch;               /* prefill chunk (rows per step) */
    enum kvstore_dtype kv_type;
    enum fwd_device device;
    enum kern_isa isa;       /* --isa: kernel instruction set (AUTO = best) */
    int deterministic;       /* bench: the server's default unless --deterministic; the other
                              * commands always run deterministic (batch-invariant) */
    int prompt_tokens;       /* bench */
    int bench_gen;
    int seqs;                /* bench: sequences decoded together (1: the single-stream bench) */
    int profile;             /* bench: split the steps' time by operation class */
    int ctx;                 /* kvmem: session length in tokens */
    int block_size;          /* kvmem: KV block size */
    const char *schema;      /* grammar: JSON Schema file */
    const char *gbnf;        /* grammar: GBNF file */
    const char *check;       /* grammar: instance file to run through the matcher */
    int bench;               /* grammar: timings */
    const char *times;       /* grammar: with -m, each token's mask time written here */
    int print;               /* grammar: print the GBNF */
    int spec_keys;           /* grammar: 1: jschema_opts.extra_keys and any_order (JSON Schema's
                              * meaning of an absent additionalProperties and of key order);
                              * 2: extra_keys alone (--extra-keys) */
};

/* "gemmad-cli: error: MESSAGE" on stderr, exit status 1. */
void cli_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* The model named by -m; load_s (may be NULL) receives the seconds it took. */
struct model *cli_load(const struct cli_opts *o, double *load_s);
double cli_rss_mib(void);    /* resident memory now, -1 when unknown */

/* Text to ids (caller frees); dies on failure. */
int32_t *cli_encode(const struct tok_vocab *v, const char *text, size_t len, int add_bos,
                    int special, int *n_out);
/* The prompt as ids: --tokens, or -p (with --chat: rendered as one user turn). */
int32_t *cli_prompt_ids(const struct cli_opts *o, const struct model *m, int *n);

/* A runner of n_seqs sequences of max_ctx positions, batch tokens per step, with the
 * options' KV type, threads and device; dies on failure. */
struct runner *cli_runner(const struct model *m, const struct cli_opts *o, int n_seqs,
                          int max_ctx, int batch, int max_logit_rows);
/* runner_feed / runner_step that die on failure. */
void cli_feed(struct runner *r, int seq, const int32_t *ids, int n, enum fwd_logits lg,
              float *out);
void cli_step(struct runner *r, const int32_t *token, int n_seqs, float *logits);

int cli_tokenize(const struct cli_opts *o);
int cli_generate(const struct cli_opts *o);
int cli_logits(const struct cli_opts *o);
int cli_taps(const struct cli_opts *o);
int cli_bench(const struct cli_opts *o);
int cli_kvmem(const struct cli_opts *o);
int cli_grammar(const struct cli_opts *o);

#endif
