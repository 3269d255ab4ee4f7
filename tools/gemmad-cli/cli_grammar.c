/*
 * cli_grammar — `gemmad-cli grammar`: compile a JSON Schema (server/jschema.h) or a GBNF
 * file (scheduler/grammar.h), optionally check an instance against it, byte by byte or
 * (with -m) token by token through the model's vocabulary masks, and time it.
 *
 * Exit status: 0 compiled (and, with --check, accepted whole); 1 the instance was rejected;
 * 2 the schema or grammar does not compile, or a file cannot be read (reason on stderr).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "scheduler/grammar.h"
#include "server/jschema.h"
#include "tools/gemmad-cli/cli.h"

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap + 1);
    while (b) {
        size_t k = fread(b + n, 1, cap - n, f);
        n += k;
        if (n < cap) break;
        cap *= 2;
        char *nb = realloc(b, cap + 1);
        if (!nb) {
            free(b);
            b = NULL;
        }
        b = nb;
    }
    fclose(f);
    if (b) b[n] = 0;
    *len = n;
    return b;
}

static void fail2(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail2(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("gemmad-cli: grammar: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

/* GBNF text for the options' --schema or --gbnf (exits 2 on failure). */
static char *grammar_text(const struct cli_opts *o, size_t *len) {
    size_t n;
    const char *path = o->schema ? o->schema : o->gbnf;
    char *src = read_all(path, &n);
    if (!src) fail2("cannot read %s", path);
    if (o->gbnf) {
        *len = n;
        return src;
    }
    json_error_t je;
    json_t *schema = json_loadb(src, n, JSON_DECODE_ANY, &je);
    free(src);
    if (!schema) fail2("%s: invalid JSON: %s", path, je.text);
    struct jsc_buf b = {0};
    char err[512];
    const struct jschema_opts opt = {.extra_keys = o->spec_keys != 0,
                                     .any_order = o->spec_keys == 1};
    if (jschema_to_gbnf(schema, &opt, &b, err, sizeof err)) fail2("%s: %s", path, err);
    json_decref(schema);
    *len = b.n;
    return b.p;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, double *t, int n) {
    if (n == 0) return;
    qsort(t, (size_t)n, sizeof(double), cmp_d);
    printf("%s: %d tokens, p50 %.1f us, p99 %.1f us, max %.1f us\n", what, n, t[n / 2] * 1e6,
           t[(int)((double)(n - 1) * 0.99)] * 1e6, t[n - 1] * 1e6);
}

/* Token-by-token run with -m: each token must be in the mask of the state before it. The
 * path is the instance's tokens, or (no instance) up to 64 tokens picked from the masks. */
static int token_run(const struct cli_opts *o, struct gram *g, const char *inst, size_t ilen) {
    struct model *m = cli_load(o, NULL);
    struct gram_vocab *gv = NULL;
    double t0 = clock_mono_s();
    if (gram_vocab_create(m->vocab, &gv)) cli_die("out of memory");
    double tv = clock_mono_s() - t0;
    struct gram_scratch *x = NULL;
    if (gram_scratch_create(NULL, gram_vocab_max_len(gv), &x)) cli_die("out of memory");
    const int nv = gram_vocab_n(gv);
    uint64_t *mask = calloc(((size_t)nv + 63) / 64, 8);
    int n_ids = 0;
    int32_t *ids = inst ? cli_encode(m->vocab, inst, ilen, 0, 0, &n_ids) : calloc(64, 4);
    int rc = 0, max_steps = inst ? n_ids : 64;
    double *cold = calloc((size_t)max_steps + 1, sizeof(double));
    double *warm = calloc((size_t)max_steps + 1, sizeof(double));
    int steps = 0;
    const int passes = o->bench || o->times ? 2 : 1;
    for (int pass = 0; pass < passes && rc == 0; pass++) {
        struct gram_match *mt = NULL;
        if (gram_match_create(g, x, &mt)) cli_die("matcher: budget exceeded at the start");
        uint64_t seed = 0x9e3779b97f4a7c15ull;
        for (int i = 0; i < max_steps; i++) {
            int n_allowed = 0;
            double a = clock_mono_s();
            int mr = gram_match_mask(mt, x, gv, mask, &n_allowed, 0);
            double dt = clock_mono_s() - a;
            if (mr) {
                fprintf(stderr, "mask failed at token %d: %s\n", i, gram_strerror(mr));
                rc = 1;
                break;
            }
            (pass ? warm : cold)[i] = dt;
            if (!inst) {
                if (n_allowed == 0) break;
                seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;
                int pick = (int)(seed % (uint64_t)n_allowed), id = 0;
                for (id = 0; id < nv; id++)
                    if (((mask[id >> 6] >> (id & 63)) & 1) && pick-- == 0) break;
                ids[i] = id;
                n_ids = i + 1;
            }
            const int32_t t = ids[i];
            if (!((mask[t >> 6] >> (t & 63)) & 1)) {
                printf("rejected: token %d (id %d) is not in the mask (%d allowed)\n", i, t, n_allowed);
                rc = 1;
                break;
            }
            const uint8_t *b;
            int len = gram_vocab_token(gv, t, &b);
            if (gram_match_accept(mt, x, b, (size_t)len)) {
                printf("rejected: token %d (id %d) not accepted\n", i, t);
                rc = 1;
                break;
            }
            steps = i + 1;
        }
        if (rc == 0 && inst && !gram_match_can_end(mt)) {
            printf("rejected: the instance is incomplete\n");
            rc = 1;
        }
        gram_match_destroy(mt);
    }
    if (o->times && rc == 0) { /* before report() sorts them */
        FILE *f = fopen(o->times, "w");
        if (!f) cli_die("cannot write %s", o->times);
        for (int i = 0; i < steps; i++) fprintf(f, "%.2f %.2f\n", cold[i] * 1e6, warm[i] * 1e6);
        if (fclose(f)) cli_die("cannot write %s", o->times);
    }
    if (o->bench) {
        printf("vocabulary trie: %d tokens, built in %.1f ms\n", nv, tv * 1e3);
        report("mask, cold cache", cold, steps);
        report("mask, warm cache", warm, steps);
        int ent;
        long long lk, hit;
        gram_cache_stats(g, &ent, &lk, &hit);
        printf("cache: %d entries, %lld lookups, %lld hits\n", ent, lk, hit);
    }
    free(cold);
    free(warm);
    free(ids);
    free(mask);
    gram_scratch_destroy(x);
    gram_vocab_destroy(gv);
    model_free(m);
    return rc;
}

int cli_grammar(const struct cli_opts *o) {
    size_t len;
    double t0 = clock_mono_s();
    char *text = grammar_text(o, &len);
    double t1 = clock_mono_s();
    struct gram *g = NULL;
    char err[512];
    int rc = gram_compile_gbnf(text, len, NULL, &g, err, sizeof err);
    double t2 = clock_mono_s();
    if (o->print) fwrite(text, 1, len, stdout);
    free(text);
    if (rc) fail2("%s: %s", o->schema ? o->schema : o->gbnf, err);
    if (o->bench)
        printf("compile: schema to GBNF %.2f ms, GBNF to grammar %.2f ms (%d rules, %d elements)\n",
               (t1 - t0) * 1e3, (t2 - t1) * 1e3, gram_n_rules(g), gram_n_elems(g));
    char *inst = NULL;
    size_t ilen = 0;
    if (o->check) {
        inst = read_all(o->check, &ilen);
        if (!inst) fail2("cannot read %s", o->check);
        /* whitespace after a JSON value is insignificant: a file's final newline is not part
         * of the instance */
        while (o->schema && ilen > 0 && (inst[ilen - 1] == '\n' || inst[ilen - 1] == ' ' ||
                                         inst[ilen - 1] == '\r' || inst[ilen - 1] == '\t'))
            ilen--;
    }
    int out = 0;
    if (o->model) {
        out = token_run(o, g, inst, ilen);
    } else if (inst) {
        struct gram_scratch *x = NULL;
        struct gram_match *m = NULL;
        if (gram_scratch_create(NULL, 1, &x) || gram_match_create(g, x, &m)) {
            fprintf(stderr, "gemmad-cli: grammar: matcher budget exceeded at the start\n");
            exit(2);
        }
        int ar = gram_match_accept(m, x, (const uint8_t *)inst, ilen);
        out = ar == 0 && gram_match_can_end(m) ? 0 : 1;
        if (ar == GRAM_EBUDGET) fprintf(stderr, "gemmad-cli: grammar: matcher budget exceeded\n");
        gram_match_destroy(m);
        gram_scratch_destroy(x);
    }
    if (inst) printf("%s\n", out == 0 ? "accepted" : "rejected");
    free(inst);
    gram_unref(g);
    return out;
}
