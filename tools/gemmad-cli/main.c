/*
 * gemmad-cli — command-line front end of the engine, for checking it without the server.
 *
 *   gemmad-cli tokenize -m MODEL [--special] TEXT
 *   gemmad-cli generate -m MODEL -p PROMPT [-n N] [--temp T] [--seed S] [--chat] [--print-ids]
 *                       [--top-k K] [--top-p P] [--min-p P]
 *   gemmad-cli logits   -m MODEL (-p PROMPT | --tokens ID,ID,...) [--top K] [--all] [--chat]
 *   gemmad-cli taps     -m MODEL (-p PROMPT | --tokens ...)
 *   gemmad-cli bench    -m MODEL [--prompt-tokens 512] [--gen 128] [--seqs 1] [--deterministic]
 *                       [--profile]
 *   gemmad-cli kvmem    -m MODEL [--ctx 32768] [--block-size 16]
 *   gemmad-cli grammar  (--schema FILE | --gbnf FILE) [--check INSTANCE] [-m MODEL] [--bench]
 *                       [--times FILE]
 * Common: -t/--threads N, --kv-type f16|q8_0|f32, --device cpu|cuda|auto, --batch N,
 *         --isa ref|avx2|avx512|amx|auto (kernels), --log-level L.
 *
 * Only results go to stdout (generated text, JSON); logs go to stderr. Bad arguments or
 * files give one line on stderr and exit status 1 (2 for usage errors).
 *
 * This file parses the arguments and dispatches through the command table; each command
 * lives in its own cli_*.c.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "config/defaults.h"
#include "engine/kvstore.h"
#include "tools/gemmad-cli/cli.h"

/* A subcommand: its name, what runs it, and its lines of the --help text. */
struct cli_cmd {
    const char *name;
    int (*run)(const struct cli_opts *o);
    const char *usage;
};

static const struct cli_cmd cli_cmds[] = {
    {"tokenize", cli_tokenize,
     "  tokenize -m MODEL [--special] TEXT      JSON array of token ids (BOS first)\n"},
    {"generate", cli_generate,
     "  generate -m MODEL -p PROMPT [-n N] [--temp T] [--seed S] [--chat] [--print-ids]\n"
     "           [--top-k K] [--top-p P] [--min-p P]\n"},
    {"logits", cli_logits,
     "  logits   -m MODEL (-p PROMPT | --tokens ID,...) [--top K] [--all] [--chat]\n"},
    {"taps", cli_taps,
     "  taps     -m MODEL (-p PROMPT | --tokens ID,...) [--dump FILE]\n"
     "           per-layer hidden-state summaries; --dump writes every row of every layer\n"
     "           (then the final-norm rows) as raw little-endian f32\n"},
    {"bench", cli_bench,
     "  bench    -m MODEL [--prompt-tokens 512] [--gen 128] [--seqs 1] [--deterministic]\n"
     "           [--profile]\n"
     "           the server's default kernels (OpenBLAS / cuBLAS batches) unless --deterministic;\n"
     "           --profile adds the steps' time by operation class (ms: prefill, decode per "
     "step)\n"},
    {"kvmem", cli_kvmem,
     "  kvmem    -m MODEL [--ctx 32768] [--block-size 16] [--batch 512] [--kv-type T]\n"
     "           KV memory of one session, with and without the sliding-window ring\n"},
    {"grammar", cli_grammar,
     "  grammar  (--schema FILE | --gbnf FILE) [--check INSTANCE.json] [-m MODEL] [--bench]\n"
     "           [--print] [--spec-keys | --extra-keys]  compile (exit 0, or the reason and\n"
     "           exit 2); --check:\n"
     "           0 when the grammar accepts the file whole, 1 when not (-m: token by token\n"
     "           through the vocabulary masks); --bench: compile and mask times; --print: the\n"
     "           GBNF; --spec-keys: an absent additionalProperties lets other keys follow the\n"
     "           declared ones, and keys come in any order, as JSON Schema says (the\n"
     "           server's json_schema_extra_keys and json_schema_any_order); --extra-keys:\n"
     "           other keys may follow the declared ones, which keep the schema's order\n"
     "           (json_schema_extra_keys alone; LLGuidance's rule); --times FILE\n"
     "           (with -m and --check): each token's mask time in microseconds, a line per\n"
     "           token, the first pass (cold cache) and the second (warm)\n"},
};
#define CLI_N_CMDS (int)(sizeof cli_cmds / sizeof cli_cmds[0])

void cli_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("gemmad-cli: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void usage_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void usage_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("gemmad-cli: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (see gemmad-cli --help)\n", stderr);
    va_end(ap);
    exit(2);
}

static void print_usage(void) {
    fputs("usage: gemmad-cli COMMAND -m MODEL [options]\n"
          "commands:\n", stdout);
    for (int i = 0; i < CLI_N_CMDS; i++) fputs(cli_cmds[i].usage, stdout);
    fputs("options: -t/--threads N, --batch N (prefill chunk, default 512), --kv-type "
          "f16|q8_0|f32,\n"
          "         --device cpu|cuda|auto, --isa ref|avx2|avx512|amx|auto, --log-level L\n",
          stdout);
}

static const struct cli_cmd *find_cmd(const char *name) {
    for (int i = 0; i < CLI_N_CMDS; i++)
        if (!strcmp(cli_cmds[i].name, name)) return &cli_cmds[i];
    return NULL;
}

static long parse_long(const char *flag, const char *s, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        usage_die("%s: '%s' is not an integer in %ld..%ld", flag, s, lo, hi);
    return v;
}

static float parse_float(const char *flag, const char *s, float lo, float hi) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        usage_die("%s: '%s' is not a number in %g..%g", flag, s, (double)lo, (double)hi);
    return v;
}

/* The CLI's own defaults (the server's come from config/). */
static void set_defaults(struct cli_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_gen = 32;
    o->temp = 0.8f;
    o->top_p = 1.0f;
    o->seed = 42;
    o->top = 10;
    /* The settings the server also has come from the one defaults table; the rest (sampling
     * for a quick look, benchmark shape, kvmem's context) are the CLI's own. */
    o->threads = gemmad_defaults.threads;
    o->batch = gemmad_defaults.max_batch_tokens;
    if (kvstore_dtype_parse(gemmad_defaults.kv_dtype, &o->kv_type) != 0) o->kv_type = KVSTORE_F16;
    o->device = FWD_DEVICE_CPU;
    o->isa = KERN_ISA_AUTO;
    o->deterministic = gemmad_defaults.deterministic;
    o->prompt_tokens = 512;
    o->bench_gen = 128;
    o->seqs = 1;
    o->ctx = 32768;
    o->block_size = gemmad_defaults.kv_block_size;
}

static const struct cli_cmd *parse_args(int argc, char **argv, struct cli_opts *o) {
    set_defaults(o);
    if (argc < 2) usage_die("missing command");
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        print_usage();
        exit(0);
    }
    o->cmd = argv[1];
    const struct cli_cmd *cmd = find_cmd(o->cmd);
    if (!cmd) usage_die("unknown command '%s'", o->cmd);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
#define NEXT() (i + 1 < argc ? argv[++i] : (usage_die("%s needs a value", a), (char *)NULL))
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = NEXT();
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) o->prompt = NEXT();
        else if (!strcmp(a, "--tokens")) o->tokens = NEXT();
        else if (!strcmp(a, "--dump")) o->dump = NEXT();
        else if (!strcmp(a, "--special")) o->special = 1;
        else if (!strcmp(a, "--schema")) o->schema = NEXT();
        else if (!strcmp(a, "--gbnf")) o->gbnf = NEXT();
        else if (!strcmp(a, "--check")) o->check = NEXT();
        else if (!strcmp(a, "--bench")) o->bench = 1;
        else if (!strcmp(a, "--times")) o->times = NEXT();
        else if (!strcmp(a, "--print")) o->print = 1;
        else if (!strcmp(a, "--spec-keys")) o->spec_keys = 1;
        else if (!strcmp(a, "--extra-keys")) o->spec_keys = 2;
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict"))
            o->n_gen = (int)parse_long(a, NEXT(), 0, 1 << 20);
        else if (!strcmp(a, "--temp")) o->temp = parse_float(a, NEXT(), 0.0f, 100.0f);
        else if (!strcmp(a, "--top-k")) o->top_k = (int)parse_long(a, NEXT(), 0, 1 << 24);
        else if (!strcmp(a, "--top-p")) o->top_p = parse_float(a, NEXT(), 0.0f, 1.0f);
        else if (!strcmp(a, "--min-p")) o->min_p = parse_float(a, NEXT(), 0.0f, 1.0f);
        else if (!strcmp(a, "--seed"))
            o->seed = (uint64_t)parse_long(a, NEXT(), 0, 0x7fffffffL);
        else if (!strcmp(a, "--chat")) o->chat = 1;
        else if (!strcmp(a, "--print-ids")) o->print_ids = 1;
        else if (!strcmp(a, "--top")) o->top = (int)parse_long(a, NEXT(), 1, 1 << 20);
        else if (!strcmp(a, "--all")) o->all = 1;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
            o->threads = (int)parse_long(a, NEXT(), 1, 1024);
        else if (!strcmp(a, "--batch")) o->batch = (int)parse_long(a, NEXT(), 1, 65536);
        else if (!strcmp(a, "--prompt-tokens"))
            o->prompt_tokens = (int)parse_long(a, NEXT(), 1, 1 << 20);
        else if (!strcmp(a, "--gen")) o->bench_gen = (int)parse_long(a, NEXT(), 1, 1 << 20);
        else if (!strcmp(a, "--seqs")) o->seqs = (int)parse_long(a, NEXT(), 1, 256);
        else if (!strcmp(a, "--deterministic")) o->deterministic = 1;
        else if (!strcmp(a, "--profile"))
            o->profile = 1;
        else if (!strcmp(a, "--ctx")) o->ctx = (int)parse_long(a, NEXT(), 1, 1 << 24);
        else if (!strcmp(a, "--block-size"))
            o->block_size = (int)parse_long(a, NEXT(), 1, 1 << 16);
        else if (!strcmp(a, "--kv-type")) {
            const char *v = NEXT();
            if (kvstore_dtype_parse(v, &o->kv_type) != 0)
                usage_die("--kv-type: '%s' is not f16, q8_0 or f32", v);
        } else if (!strcmp(a, "--device")) {
            const char *v = NEXT();
            if (!strcmp(v, "cpu")) o->device = FWD_DEVICE_CPU;
            else if (!strcmp(v, "cuda")) o->device = FWD_DEVICE_CUDA;
            else if (!strcmp(v, "auto")) o->device = FWD_DEVICE_AUTO;
            else usage_die("--device: '%s' is not cpu, cuda or auto", v);
        } else if (!strcmp(a, "--isa")) {
            const char *v = NEXT();
            if (!strcmp(v, "ref")) o->isa = KERN_ISA_REF;
            else if (!strcmp(v, "avx2")) o->isa = KERN_ISA_AVX2;
            else if (!strcmp(v, "avx512")) o->isa = KERN_ISA_AVX512;
            else if (!strcmp(v, "amx")) o->isa = KERN_ISA_AMX;
            else if (!strcmp(v, "auto")) o->isa = KERN_ISA_AUTO;
            else usage_die("--isa: '%s' is not ref, avx2, avx512, amx or auto", v);
        } else if (!strcmp(a, "--log-level")) {
            const char *v = NEXT();
            enum log_level lv;
            if (log_parse_level(v, &lv) != 0) usage_die("--log-level: '%s' unknown", v);
            log_set_level(lv);
        } else if (a[0] == '-' && a[1] != 0) {
            usage_die("unknown option '%s'", a);
        } else if (!strcmp(o->cmd, "tokenize") && !o->text) {
            o->text = a;
        } else {
            usage_die("unexpected argument '%s'", a);
        }
#undef NEXT
    }
    if (!strcmp(o->cmd, "grammar")) {
        if (!o->schema == !o->gbnf) usage_die("grammar: give one of --schema FILE or --gbnf FILE");
    } else if (!o->model) {
        usage_die("%s: -m MODEL is required", o->cmd);
    }
    if (!strcmp(o->cmd, "tokenize") && !o->text && !o->prompt)
        usage_die("tokenize: TEXT is required");
    if (!strcmp(o->cmd, "generate") && !o->prompt && !o->tokens)
        usage_die("generate: -p PROMPT is required");
    if ((!strcmp(o->cmd, "logits") || !strcmp(o->cmd, "taps")) && !o->prompt && !o->tokens)
        usage_die("%s: -p PROMPT or --tokens is required", o->cmd);
    if (o->prompt && o->tokens) usage_die("give either -p or --tokens, not both");
    return cmd;
}

double cli_rss_mib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1.0;
    char line[256];
    double kb = -1.0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = strtod(line + 6, NULL);
    fclose(f);
    return kb < 0 ? -1.0 : kb / 1024.0;
}

struct model *cli_load(const struct cli_opts *o, double *load_s) {
    double t0 = clock_mono_s();
    struct model *m = NULL;
    char err[512] = "";
    int rc = model_load(o->model, &m, err, sizeof err);
    if (rc != 0) cli_die("%s: %s", o->model, err[0] ? err : "cannot load the model");
    if (load_s) *load_s = clock_mono_s() - t0;
    LOG_I("cli", 0, "loaded %s (%s, %d layers, vocab %d)", m->name,
          model_arch_name(m->cfg.arch), m->cfg.n_layer, m->cfg.n_vocab);
    return m;
}

struct runner *cli_runner(const struct model *m, const struct cli_opts *o, int n_seqs,
                          int max_ctx, int batch, int max_logit_rows) {
    struct runner_opts ro = {.max_seqs = n_seqs, .max_ctx = max_ctx, .batch = batch,
                             .max_logit_rows = max_logit_rows, .block_size = CLI_BLOCK,
                             .kv_dtype = o->kv_type, .n_threads = o->threads,
                             .device = o->device,
                             .deterministic = strcmp(o->cmd, "bench") ? 1 : o->deterministic};
    struct runner *r = NULL;
    char err[256] = "";
    int rc = runner_create(m, &ro, &r, err, sizeof err);
    if (rc != 0) cli_die("%s", err[0] ? err : fwd_strerror(rc));
    return r;
}

static void check_run(struct runner *r, int rc) {
    if (rc == RUNNER_ECTX) cli_die("context of %d tokens exceeded", runner_max_ctx(r));
    if (rc != 0) cli_die("forward pass failed: %s", fwd_strerror(rc));
}

void cli_feed(struct runner *r, int seq, const int32_t *ids, int n, enum fwd_logits lg,
              float *out) {
    check_run(r, runner_feed(r, seq, ids, n, lg, out));
}

void cli_step(struct runner *r, const int32_t *token, int n_seqs, float *logits) {
    check_run(r, runner_step(r, token, n_seqs, logits));
}

int main(int argc, char **argv) {
    struct cli_opts o;
    log_set_level(LOG_WARN);
    const struct cli_cmd *cmd = parse_args(argc, argv, &o);
    if (kern_init(o.isa) < 0)
        cli_die("--isa %s is not supported on this CPU/build", kern_isa_name(o.isa));
    return cmd->run(&o);
}
