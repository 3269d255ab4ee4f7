/*
 * gemmad-cli — command-line front end of the engine, for checking it without the server.
 *
 *   gemmad-cli tokenize -m MODEL [--special] TEXT
 *   gemmad-cli generate -m MODEL -p PROMPT [-n N] [--temp T] [--seed S] [--chat] [--print-ids]
 *                       [--top-k K] [--top-p P] [--min-p P]
 *   gemmad-cli logits   -m MODEL (-p PROMPT | --tokens ID,ID,...) [--top K] [--all] [--chat]
 *   gemmad-cli taps     -m MODEL (-p PROMPT | --tokens ...)
 *   gemmad-cli bench    -m MODEL [--prompt-tokens 512] [--gen 128] [--seqs 1]
 * Common: -t/--threads N, --kv-type f16|q8_0|f32, --device cpu|cuda|auto, --batch N,
 *         --isa ref|avx2|avx512|auto (kernels), --log-level L.
 *
 * Only results go to stdout (generated text, JSON); logs go to stderr. Bad arguments or
 * files give one line on stderr and exit status 1 (2 for usage errors).
 */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/chat.h"
#include "engine/forward.h"
#include "engine/gguf.h"
#include "engine/kernels/kern.h"
#include "engine/kernels/pool.h"
#include "engine/kvstore.h"
#include "base/clock.h"
#include "base/log.h"
#include "engine/model.h"
#include "engine/tokenizer.h"
#include "scheduler/sample.h"

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
    enum kvs_dtype kv_type;
    enum fwd_device device;
    enum kern_isa isa;       /* --isa: kernel instruction set (AUTO = best) */
    int prompt_tokens;       /* bench */
    int bench_gen;
    int seqs;                /* bench: sequences decoded together (1: the single-stream bench) */
    int ctx;                 /* kvmem: session length in tokens */
    int block_size;          /* kvmem: KV block size */
};

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
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

static const char *usage_text =
    "usage: gemmad-cli COMMAND -m MODEL [options]\n"
    "commands:\n"
    "  tokenize -m MODEL [--special] TEXT      JSON array of token ids (BOS first)\n"
    "  generate -m MODEL -p PROMPT [-n N] [--temp T] [--seed S] [--chat] [--print-ids]\n"
    "           [--top-k K] [--top-p P] [--min-p P]\n"
    "  logits   -m MODEL (-p PROMPT | --tokens ID,...) [--top K] [--all] [--chat]\n"
    "  taps     -m MODEL (-p PROMPT | --tokens ID,...) [--dump FILE]\n"
    "           per-layer hidden-state summaries; --dump writes every row of every layer\n"
    "           (then the final-norm rows) as raw little-endian f32\n"
    "  bench    -m MODEL [--prompt-tokens 512] [--gen 128] [--seqs 1]\n"
    "  kvmem    -m MODEL [--ctx 32768] [--block-size 16] [--batch 512] [--kv-type T]\n"
    "           KV memory of one session, with and without the sliding-window ring\n"
    "options: -t/--threads N, --batch N (prefill chunk, default 512), --kv-type "
    "f16|q8_0|f32,\n"
    "         --device cpu|cuda|auto, --isa ref|avx2|avx512|auto, --log-level L\n";

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

static void parse_args(int argc, char **argv, struct cli_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_gen = 32;
    o->temp = 0.8f;
    o->top_p = 1.0f;
    o->seed = 42;
    o->top = 10;
    o->threads = 0;
    o->batch = 512;
    o->kv_type = KVS_F16;
    o->device = FWD_DEVICE_CPU;
    o->isa = KERN_ISA_AUTO;
    o->prompt_tokens = 512;
    o->bench_gen = 128;
    o->seqs = 1;
    o->ctx = 32768;
    o->block_size = 16;
    if (argc < 2) usage_die("missing command");
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fputs(usage_text, stdout);
        exit(0);
    }
    o->cmd = argv[1];
    if (strcmp(o->cmd, "tokenize") && strcmp(o->cmd, "generate") && strcmp(o->cmd, "logits") &&
        strcmp(o->cmd, "taps") && strcmp(o->cmd, "bench") && strcmp(o->cmd, "kvmem"))
        usage_die("unknown command '%s'", o->cmd);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
#define NEXT() (i + 1 < argc ? argv[++i] : (usage_die("%s needs a value", a), (char *)NULL))
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = NEXT();
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) o->prompt = NEXT();
        else if (!strcmp(a, "--tokens")) o->tokens = NEXT();
        else if (!strcmp(a, "--dump")) o->dump = NEXT();
        else if (!strcmp(a, "--special")) o->special = 1;
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
        else if (!strcmp(a, "--ctx")) o->ctx = (int)parse_long(a, NEXT(), 1, 1 << 24);
        else if (!strcmp(a, "--block-size"))
            o->block_size = (int)parse_long(a, NEXT(), 1, 1 << 16);
        else if (!strcmp(a, "--kv-type")) {
            const char *v = NEXT();
            if (kvs_dtype_parse(v, &o->kv_type) != 0)
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
            else if (!strcmp(v, "auto")) o->isa = KERN_ISA_AUTO;
            else usage_die("--isa: '%s' is not ref, avx2, avx512 or auto", v);
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
    if (!o->model) usage_die("%s: -m MODEL is required", o->cmd);
    if (!strcmp(o->cmd, "tokenize") && !o->text && !o->prompt)
        usage_die("tokenize: TEXT is required");
    if (!strcmp(o->cmd, "generate") && !o->prompt && !o->tokens)
        usage_die("generate: -p PROMPT is required");
    if ((!strcmp(o->cmd, "logits") || !strcmp(o->cmd, "taps")) && !o->prompt && !o->tokens)
        usage_die("%s: -p PROMPT or --tokens is required", o->cmd);
    if (o->prompt && o->tokens) usage_die("give either -p or --tokens, not both");
}

static double rss_mib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1.0;
    char line[256];
    double kb = -1.0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = strtod(line + 6, NULL);
    fclose(f);
    return kb < 0 ? -1.0 : kb / 1024.0;
}

/* ---- prompt -> ids ---- */

static int32_t *parse_token_list(const char *s, int n_vocab, int *n_out) {
    int cap = 16, n = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) die("out of memory");
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v >= n_vocab)
            die("--tokens: '%s' is not a list of token ids below %d", s, n_vocab);
        if (n == cap) {
            cap *= 2;
            ids = realloc(ids, (size_t)cap * sizeof *ids);
            if (!ids) die("out of memory");
        }
        ids[n++] = (int32_t)v;
        p = end;
        if (*p == ',') p++;
        else if (*p) die("--tokens: unexpected '%c' in '%s'", *p, s);
    }
    if (n == 0) die("--tokens: empty list");
    *n_out = n;
    return ids;
}

static int32_t *encode(const struct tok_vocab *v, const char *text, size_t len, int add_bos,
                       int special, int *n_out) {
    int n = tok_encode(v, text, len, add_bos, special, NULL, 0);
    if (n < 0) die("cannot tokenize the prompt (%d)", n);
    int32_t *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
    if (!ids) die("out of memory");
    int n2 = tok_encode(v, text, len, add_bos, special, ids, n);
    if (n2 != n) die("tokenizer returned inconsistent lengths");
    *n_out = n;
    return ids;
}

/* The prompt as ids: --tokens, or -p (with --chat: rendered as one user turn). Plain
 * prompts are tokenized like llama.cpp's tools do: BOS added, control tokens parsed. */
static int32_t *prompt_ids(const struct cli_opts *o, const struct model *m, int *n) {
    if (o->tokens) return parse_token_list(o->tokens, m->cfg.n_vocab, n);
    if (!o->chat) return encode(m->vocab, o->prompt, strlen(o->prompt), 1, 1, n);
    struct chat_msg msg = {CHAT_ROLE_USER, o->prompt, strlen(o->prompt)};
    enum chat_style st = m->cfg.arch == MODEL_ARCH_GEMMA4 ? CHAT_STYLE_GEMMA4 : CHAT_STYLE_GEMMA;
    size_t need = 0, cap = strlen(o->prompt) + 256;
    char err[256] = "";
    char *buf = malloc(cap);
    if (!buf) die("out of memory");
    int rc = chat_render(st, &msg, 1, 1, buf, cap, &need, err, sizeof err);
    if (rc == CHAT_ENOSPC) {
        free(buf);
        cap = need + 1;
        buf = malloc(cap);
        if (!buf) die("out of memory");
        rc = chat_render(st, &msg, 1, 1, buf, cap, &need, err, sizeof err);
    }
    if (rc != CHAT_OK) die("chat template: %s", err[0] ? err : "cannot render");
    int32_t *ids = encode(m->vocab, buf, need, 0, 1, n);
    free(buf);
    return ids;
}

/* ---- one sequence on the engine ---- */

struct runner {
    struct model *m;
    struct kvs_pool *kv;
    struct fwd_ctx *fwd;
    int32_t *full, *swa;     /* block tables: block i = physical block i */
    struct kvs_seq seq;
    int n_past;              /* positions already in the KV */
    int max_ctx;
    int batch;               /* rows per step */
};

static void runner_init(struct runner *r, struct model *m, const struct cli_opts *o,
                        int max_ctx, int max_logit_rows) {
    memset(r, 0, sizeof *r);
    r->m = m;
    r->max_ctx = max_ctx;
    r->batch = o->batch;
    int nb_full = (max_ctx + CLI_BLOCK - 1) / CLI_BLOCK;
    int nb_swa = kvs_swa_ring_blocks(m, CLI_BLOCK, r->batch);
    char err[256] = "";
    if (kvs_create(m, o->kv_type, CLI_BLOCK, nb_full, nb_swa, &r->kv, err, sizeof err) != 0)
        die("%s", err);
    r->full = malloc((size_t)(nb_full + 1) * sizeof(int32_t));
    r->swa = malloc((size_t)(nb_swa + 1) * sizeof(int32_t));
    if (!r->full || !r->swa) die("out of memory");
    for (int i = 0; i < nb_full; i++) r->full[i] = i;
    for (int i = 0; i < nb_swa; i++) r->swa[i] = i;
    r->seq.full = r->full;
    r->seq.n_full = nb_full;
    r->seq.swa = nb_swa ? r->swa : NULL;
    r->seq.n_swa = nb_swa;
    struct fwd_opts fo = {.max_tokens = r->batch, .max_seqs = 1,
                          .max_logit_rows = max_logit_rows, .n_threads = o->threads,
                          .device = o->device, .deterministic = 1};
    int rc = fwd_create(m, r->kv, &fo, &r->fwd, err, sizeof err);
    if (rc != 0) die("%s", err[0] ? err : fwd_strerror(rc));
}

static void runner_free(struct runner *r) {
    fwd_destroy(r->fwd);
    kvs_destroy(r->kv);
    free(r->full);
    free(r->swa);
}

/* Feeds n tokens; logits of the last (or of every, when all) fed token into out. */
static void runner_feed(struct runner *r, const int32_t *ids, int n, enum fwd_logits lg,
                        float *out) {
    if (r->n_past + n > r->max_ctx) die("context of %d tokens exceeded", r->max_ctx);
    int done = 0;
    while (done < n) {
        int k = n - done < r->batch ? n - done : r->batch;
        struct fwd_seq s = {ids + done, k, r->n_past, &r->seq, FWD_LOGITS_NONE};
        float *dst = NULL;
        if (lg == FWD_LOGITS_ALL) {
            s.logits = FWD_LOGITS_ALL;
            dst = out + (size_t)done * (size_t)r->m->cfg.n_vocab;
        } else if (lg == FWD_LOGITS_LAST && done + k == n) {
            s.logits = FWD_LOGITS_LAST;
            dst = out;
        }
        int rc = fwd_run(r->fwd, &s, 1, dst);
        if (rc != 0) die("forward pass failed: %s", fwd_strerror(rc));
        r->n_past += k;
        done += k;
    }
}

/* ---- sampling: the scheduler's sampler (scheduler/sample.h) ---- */

static int32_t argmax(const float *x, int n) {
    return smp_argmax(x, n);
}

/* ---- commands ---- */

static struct model *load(const struct cli_opts *o, double *load_s) {
    double t0 = clock_mono_s();
    struct model *m = NULL;
    char err[512] = "";
    int rc = model_load(o->model, &m, err, sizeof err);
    if (rc != 0) die("%s: %s", o->model, err[0] ? err : "cannot load the model");
    if (load_s) *load_s = clock_mono_s() - t0;
    LOG_I("cli", 0, "loaded %s (%s, %d layers, vocab %d)", m->name,
          model_arch_name(m->cfg.arch), m->cfg.n_layer, m->cfg.n_vocab);
    return m;
}

static int cmd_tokenize(const struct cli_opts *o) {
    struct model *m = load(o, NULL);
    const char *text = o->text ? o->text : o->prompt;
    int n;
    int32_t *ids = encode(m->vocab, text, strlen(text), 1, o->special, &n);
    putchar('[');
    for (int i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
    printf("]\n");
    free(ids);
    model_free(m);
    return 0;
}

static int cmd_generate(const struct cli_opts *o) {
    struct model *m = load(o, NULL);
    int n_prompt;
    int32_t *ids = prompt_ids(o, m, &n_prompt);
    const int V = m->cfg.n_vocab;
    struct runner r;
    runner_init(&r, m, o, n_prompt + o->n_gen + 1, 1);
    float *logits = malloc((size_t)V * sizeof(float));
    if (!logits) die("out of memory");
    double t0 = clock_mono_s();
    runner_feed(&r, ids, n_prompt, FWD_LOGITS_LAST, logits);
    double t1 = clock_mono_s();
    struct sched_sampling sp = {.temperature = o->temp, .top_k = o->top_k, .top_p = o->top_p,
                                .min_p = o->min_p, .repetition_penalty = 1.0f,
                                .seed = o->seed, .has_seed = 1};
    struct smp_rng rng;
    smp_rng_seed(&rng, o->seed);
    struct smp_ctx *smp = NULL;
    if (smp_ctx_create(V, &smp) != 0) die("out of memory");
    int32_t *hist = malloc((size_t)(n_prompt + o->n_gen + 1) * sizeof(int32_t));
    if (!hist) die("out of memory");
    memcpy(hist, ids, (size_t)n_prompt * sizeof(int32_t));
    struct tok_stream ts;
    tok_stream_init(&ts);
    char buf[TOK_STREAM_MAX];
    int n_out = 0;
    if (o->print_ids) putchar('[');
    for (int i = 0; i < o->n_gen; i++) {
        int32_t t = smp_sample(smp, &sp, &rng, logits, hist, n_prompt + n_out, n_out, NULL, 0);
        if (tok_is_eog(m->vocab, t)) break;
        hist[n_prompt + n_out++] = t;
        if (o->print_ids) {
            printf(i ? ", %d" : "%d", t);
        } else {
            int k = tok_stream_push(&ts, m->vocab, t, buf, sizeof buf);
            if (k > 0) fwrite(buf, 1, (size_t)k, stdout);
        }
        fflush(stdout);
        if (i + 1 < o->n_gen) runner_feed(&r, &t, 1, FWD_LOGITS_LAST, logits);
    }
    if (o->print_ids) {
        printf("]\n");
    } else {
        int k = tok_stream_flush(&ts, buf, sizeof buf);
        if (k > 0) fwrite(buf, 1, (size_t)k, stdout);
        putchar('\n');
    }
    double t2 = clock_mono_s();
    LOG_I("cli", 0, "prompt %d tokens in %.3f s, generated %d in %.3f s", n_prompt, t1 - t0,
          n_out, t2 - t1);
    smp_ctx_destroy(smp);
    free(hist);
    free(logits);
    free(ids);
    runner_free(&r);
    model_free(m);
    return 0;
}

/* Top-k of one logit row as a JSON list. */
static void print_top(const float *x, int n, int k) {
    if (k > n) k = n;
    int *best = malloc((size_t)k * sizeof(int));
    if (!best) die("out of memory");
    int nb = 0;
    for (int i = 0; i < n; i++) {
        if (nb < k || x[i] > x[best[nb - 1]]) {
            int j = nb < k ? nb++ : k - 1;
            while (j > 0 && x[best[j - 1]] < x[i]) {
                best[j] = best[j - 1];
                j--;
            }
            best[j] = i;
        }
    }
    putchar('[');
    for (int i = 0; i < nb; i++)
        printf("%s{\"id\": %d, \"logit\": %.6f}", i ? ", " : "", best[i], (double)x[best[i]]);
    putchar(']');
    free(best);
}

static int cmd_logits(const struct cli_opts *o) {
    struct model *m = load(o, NULL);
    int n;
    int32_t *ids = prompt_ids(o, m, &n);
    const int V = m->cfg.n_vocab;
    struct cli_opts oo = *o;
    if (o->all && oo.batch > 64) oo.batch = 64; /* bounds the logits buffer */
    struct runner r;
    runner_init(&r, m, &oo, n, o->all ? oo.batch : 1);
    float *logits = malloc((size_t)V * (size_t)(o->all ? oo.batch : 1) * sizeof(float));
    if (!logits) die("out of memory");
    if (!o->all) {
        runner_feed(&r, ids, n, FWD_LOGITS_LAST, logits);
        print_top(logits, V, o->top);
        putchar('\n');
    } else {
        putchar('[');
        for (int done = 0; done < n;) {
            int k = n - done < oo.batch ? n - done : oo.batch;
            runner_feed(&r, ids + done, k, FWD_LOGITS_ALL, logits);
            for (int i = 0; i < k; i++) {
                if (done + i) fputs(",\n ", stdout);
                print_top(logits + (size_t)i * (size_t)V, V, o->top);
            }
            done += k;
        }
        puts("]");
    }
    free(logits);
    free(ids);
    runner_free(&r);
    model_free(m);
    return 0;
}

struct tap_state {
    int n_layer;
    FILE *dump;
};

static void tap_print(void *user, int layer, const float *x, int n_rows, int n_embd) {
    const struct tap_state *ts = user;
    const size_t nel = (size_t)n_rows * (size_t)n_embd;
    if (ts->dump && fwrite(x, sizeof(float), nel, ts->dump) != nel) die("--dump: write failed");
    const float *row = x + (size_t)(n_rows - 1) * (size_t)n_embd;
    double sum = 0, sq = 0;
    float mn = row[0], mx = row[0];
    for (int i = 0; i < n_embd; i++) {
        sum += row[i];
        sq += (double)row[i] * row[i];
        if (row[i] < mn) mn = row[i];
        if (row[i] > mx) mx = row[i];
    }
    printf("{\"layer\": %d, \"name\": \"%s\", \"mean\": %.6g, \"rms\": %.6g, \"min\": %.6g, "
           "\"max\": %.6g, \"first\": [",
           layer, layer == ts->n_layer ? "result_norm" : "l_out", sum / n_embd,
           sqrt(sq / n_embd), (double)mn, (double)mx);
    for (int i = 0; i < 8 && i < n_embd; i++) printf("%s%.6g", i ? ", " : "", (double)row[i]);
    printf("]}\n");
}

static int cmd_taps(const struct cli_opts *o) {
    struct model *m = load(o, NULL);
    int n;
    int32_t *ids = prompt_ids(o, m, &n);
    struct cli_opts oo = *o;
    oo.batch = n; /* one step, so the tapped last row is the prompt's last token */
    struct runner r;
    runner_init(&r, m, &oo, n, 1);
    struct tap_state ts = {m->cfg.n_layer, NULL};
    if (o->dump && !(ts.dump = fopen(o->dump, "wb"))) die("--dump: cannot open '%s'", o->dump);
    fwd_set_tap(r.fwd, tap_print, &ts);
    float *logits = malloc((size_t)m->cfg.n_vocab * sizeof(float));
    if (!logits) die("out of memory");
    runner_feed(&r, ids, n, FWD_LOGITS_LAST, logits);
    printf("{\"layer\": \"logits\", \"argmax\": %d, \"max\": %.6g}\n",
           argmax(logits, m->cfg.n_vocab), (double)logits[argmax(logits, m->cfg.n_vocab)]);
    if (ts.dump && fclose(ts.dump) != 0) die("--dump: write failed");
    free(logits);
    free(ids);
    runner_free(&r);
    model_free(m);
    return 0;
}

/* --seqs N > 1: N sequences, each prefilled alone with its own prompt (the bench text
 * started at a different token), then decoded greedily together, one fwd_run of N rows
 * per step (what the scheduler does with N running streams). Reports the aggregate
 * decode tok/s, N * gen / time, like llama.cpp's batched-bench. */
static int cmd_bench_seqs(const struct cli_opts *o, struct model *m, const int32_t *base,
                          int nt, double load_s, double rss_load) {
    const int V = m->cfg.n_vocab, np = o->prompt_tokens, ng = o->bench_gen, ns = o->seqs;
    const int max_ctx = np + ng + 1, nb_full = (max_ctx + CLI_BLOCK - 1) / CLI_BLOCK;
    const int batch = o->batch < np ? np : o->batch;
    const int nb_swa = kvs_swa_ring_blocks(m, CLI_BLOCK, batch);
    char err[256] = "";
    struct kvs_pool *kv = NULL;
    if (kvs_create(m, o->kv_type, CLI_BLOCK, nb_full * ns, nb_swa * ns, &kv, err, sizeof err))
        die("%s", err);
    int32_t *tab = malloc(sizeof(int32_t) * (size_t)(nb_full + nb_swa + 1) * (size_t)ns);
    struct kvs_seq *kseq = calloc((size_t)ns, sizeof *kseq);
    struct fwd_seq *fs = calloc((size_t)ns, sizeof *fs);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)np * (size_t)ns);
    int32_t *next = malloc(sizeof(int32_t) * (size_t)ns);
    float *logits = malloc(sizeof(float) * (size_t)V * (size_t)ns);
    if (!tab || !kseq || !fs || !ids || !next || !logits) die("out of memory");
    for (int s = 0; s < ns; s++) {
        int32_t *t = tab + (size_t)s * (size_t)(nb_full + nb_swa + 1);
        for (int i = 0; i < nb_full; i++) t[i] = s * nb_full + i;
        for (int i = 0; i < nb_swa; i++) t[nb_full + i] = s * nb_swa + i;
        kseq[s] = (struct kvs_seq){t, nb_full, nb_swa ? t + nb_full : NULL, nb_swa};
        int32_t *p = ids + (size_t)s * (size_t)np;
        p[0] = tok_bos(m->vocab);
        for (int i = 1; i < np; i++) p[i] = base[(i - 1 + s) % nt];
    }
    struct fwd_opts fo = {.max_tokens = batch > ns ? batch : ns, .max_seqs = ns,
                          .max_logit_rows = ns, .n_threads = o->threads,
                          .device = o->device, .deterministic = 1};
    struct fwd_ctx *fwd = NULL;
    int rc = fwd_create(m, kv, &fo, &fwd, err, sizeof err);
    if (rc != 0) die("%s", err[0] ? err : fwd_strerror(rc));
    double t0 = clock_mono_s();
    for (int s = 0; s < ns; s++) {
        fs[s] = (struct fwd_seq){ids + (size_t)s * (size_t)np, np, 0, &kseq[s], FWD_LOGITS_LAST};
        if ((rc = fwd_run(fwd, &fs[s], 1, logits)) != 0)
            die("forward pass failed: %s", fwd_strerror(rc));
        next[s] = argmax(logits, V);
    }
    double t1 = clock_mono_s();
    for (int i = 0; i < ng; i++) {
        for (int s = 0; s < ns; s++)
            fs[s] = (struct fwd_seq){&next[s], 1, np + i, &kseq[s], FWD_LOGITS_LAST};
        if ((rc = fwd_run(fwd, fs, ns, logits)) != 0)
            die("forward pass failed: %s", fwd_strerror(rc));
        for (int s = 0; s < ns; s++) next[s] = argmax(logits + (size_t)s * (size_t)V, V);
    }
    double t2 = clock_mono_s();
    printf("{\"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f, \"rss_mib\": %.1f, "
           "\"load_s\": %.3f, \"rss_after_load_mib\": %.1f, \"prompt_tokens\": %d, "
           "\"gen_tokens\": %d, \"seqs\": %d, \"threads\": %d, \"isa\": \"%s\"}\n",
           (double)np * ns / (t1 - t0), (double)ng * ns / (t2 - t1), rss_mib(), load_s,
           rss_load, np, ng, ns, o->threads ? o->threads : pool_default_threads(),
           kern_isa_name(kern_active_isa()));
    fwd_destroy(fwd);
    kvs_destroy(kv);
    free(logits);
    free(next);
    free(ids);
    free(fs);
    free(kseq);
    free(tab);
    return 0;
}

static int cmd_bench(const struct cli_opts *o) {
    double load_s;
    struct model *m = load(o, &load_s);
    double rss_load = rss_mib();
    const int V = m->cfg.n_vocab, np = o->prompt_tokens, ng = o->bench_gen;
    /* A natural-text prompt repeated up to the requested length. */
    static const char *text =
        "The history of the printing press begins in the fifteenth century, when movable "
        "type changed how books were made, sold and read across Europe and beyond. ";
    int nt;
    int32_t *base = encode(m->vocab, text, strlen(text), 0, 0, &nt);
    int32_t *ids = malloc((size_t)np * sizeof(int32_t));
    if (!ids || nt == 0) die("cannot build the benchmark prompt");
    if (o->seqs > 1) {
        int rc = cmd_bench_seqs(o, m, base, nt, load_s, rss_load);
        free(ids);
        free(base);
        model_free(m);
        return rc;
    }
    ids[0] = tok_bos(m->vocab);
    for (int i = 1; i < np; i++) ids[i] = base[(i - 1) % nt];
    struct cli_opts oo = *o;
    if (oo.batch < np) oo.batch = np;
    struct runner r;
    runner_init(&r, m, &oo, np + ng + 1, 1);
    float *logits = malloc((size_t)V * sizeof(float));
    if (!logits) die("out of memory");
    double t0 = clock_mono_s();
    runner_feed(&r, ids, np, FWD_LOGITS_LAST, logits);
    double t1 = clock_mono_s();
    for (int i = 0; i < ng; i++) {
        int32_t t = argmax(logits, V);
        runner_feed(&r, &t, 1, FWD_LOGITS_LAST, logits);
    }
    double t2 = clock_mono_s();
    size_t file = m->gguf->map_size;
    printf("{\"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f, \"rss_mib\": %.1f, "
           "\"load_s\": %.3f, \"rss_after_load_mib\": %.1f, \"file_mib\": %.1f, "
           "\"prompt_tokens\": %d, \"gen_tokens\": %d, \"threads\": %d, \"isa\": \"%s\"}\n",
           np / (t1 - t0), ng / (t2 - t1), rss_mib(), load_s, rss_load,
           (double)file / (1024.0 * 1024.0), np, ng,
           o->threads ? o->threads : pool_default_threads(), kern_isa_name(kern_active_isa()));
    free(logits);
    free(ids);
    free(base);
    runner_free(&r);
    model_free(m);
    return 0;
}

/* KV memory one session of o->ctx tokens needs: every layer keeping every position, and
 * the layout the scheduler uses (global layers keep every position; sliding-window layers a
 * ring of blocks covering the window plus one step of up to --batch new tokens). */
static int cmd_kvmem(const struct cli_opts *o) {
    double load_s;
    struct model *m = load(o, &load_s);
    const int bs = o->block_size;
    const size_t blocks = ((size_t)o->ctx + (size_t)bs - 1) / (size_t)bs;
    const size_t full = kvs_block_bytes(m, o->kv_type, bs, KVS_FULL);
    const size_t swa = kvs_block_bytes(m, o->kv_type, bs, KVS_SWA);
    const int batch = o->batch ? o->batch : 512;
    size_t ring = (size_t)kvs_swa_ring_blocks(m, bs, batch);
    if (ring > blocks) ring = blocks;
    int n_swa = 0, n_full = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        if (m->cfg.layer[l].kv_layer != l) continue; /* shares another layer's cache */
        if (m->cfg.layer[l].sliding && m->cfg.sliding_window > 0) n_swa++;
        else n_full++;
    }
    const double mib = 1024.0 * 1024.0;
    const double without = (double)((full + swa) * blocks) / mib;
    const double with = (double)(full * blocks + swa * ring) / mib;
    printf("{\"ctx\": %d, \"kv_type\": \"%s\", \"block_size\": %d, \"global_layers\": %d, "
           "\"sliding_layers\": %d, \"sliding_window\": %d, \"ring_blocks\": %zu, "
           "\"without_ring_mib\": %.1f, \"with_ring_mib\": %.1f, \"saving\": %.2f}\n",
           o->ctx, kvs_dtype_name(o->kv_type), bs, n_full, n_swa, m->cfg.sliding_window, ring,
           without, with, without > 0 ? 1.0 - with / without : 0.0);
    model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    struct cli_opts o;
    log_set_level(LOG_WARN);
    parse_args(argc, argv, &o);
    if (kern_init(o.isa) < 0) die("--isa %s is not supported on this CPU/build",
                                  kern_isa_name(o.isa));
    if (!strcmp(o.cmd, "tokenize")) return cmd_tokenize(&o);
    if (!strcmp(o.cmd, "generate")) return cmd_generate(&o);
    if (!strcmp(o.cmd, "logits")) return cmd_logits(&o);
    if (!strcmp(o.cmd, "taps")) return cmd_taps(&o);
    if (!strcmp(o.cmd, "kvmem")) return cmd_kvmem(&o);
    return cmd_bench(&o);
}
