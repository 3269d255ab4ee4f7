/*
 * gen-gguf — command-line driver of gen_gguf_write (tools/gen-gguf/gen_gguf.h):
 *
 *   gen-gguf -o OUT.gguf [--from REAL.gguf] [--seed N] [--f32 | --bf16] [--layers N] [--vocab N]
 *
 * Without --from it writes the built-in Gemma 3 270M Q4_K_M layout; --layers / --vocab
 * shrink that table (a quick parity model keeps the real layer shapes). Exit status 0, 1 on
 * failure (one line on stderr), 2 for usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/gen-gguf/gen_gguf.h"

static long arg_num(const char *name, const char *v, long lo, long hi) {
    char *end = NULL;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || x < lo || x > hi) {
        fprintf(stderr, "gen-gguf: %s needs a number in %ld..%ld, got '%s'\n", name, lo, hi,
                v ? v : "");
        exit(2);
    }
    return x;
}

int main(int argc, char **argv) {
    struct gen_gguf_opts o = {.seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-o") && v) o.out = v, i++;
        else if (!strcmp(a, "--from") && v) o.from = v, i++;
        else if (!strcmp(a, "--seed")) o.seed = (uint64_t)arg_num(a, v, 0, 1L << 30), i++;
        else if (!strcmp(a, "--layers")) o.n_layer = (int)arg_num(a, v, 1, 512), i++;
        else if (!strcmp(a, "--vocab")) o.n_vocab = (int)arg_num(a, v, 363, 1 << 24), i++;
        else if (!strcmp(a, "--f32"))
            o.f32 = GEN_TWIN_F32;
        else if (!strcmp(a, "--bf16"))
            o.f32 = GEN_TWIN_BF16;
        else {
            fprintf(stderr, "gen-gguf: unknown or incomplete argument '%s'\n", a);
            return 2;
        }
    }
    if (!o.out) {
        fprintf(stderr, "usage: gen-gguf -o OUT.gguf [--from REAL.gguf] [--seed N] "
                        "[--f32 | --bf16] [--layers N] [--vocab N]\n");
        return 2;
    }
    char err[512] = "";
    if (gen_gguf_write(&o, err, sizeof err) != 0) {
        fprintf(stderr, "gen-gguf: %s\n", err);
        return 1;
    }
    return 0;
}
