/*
 * cuda-bench — command-line driver of cuda_bench_run (tools/cuda-bench/cuda_bench.h), built by
 * `make CUDA=1` into $(BUILD)/cuda-bench (deploy/gpu-check.sh runs it):
 *
 *   cuda-bench -m MODEL [--device cpu|cuda|auto] [--prompt 512] [--gen 64] [--seqs 64]
 *              [--seq-prompt 128] [--repeat 5] [-t THREADS] [--nondeterministic]
 *              [--full-logits]
 * (--full-logits: decode steps copy every logit row back instead of greedy ids)
 *
 * Prints one JSON object on stdout; errors on stderr with exit status 1 (2 for usage).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cuda-bench/cuda_bench.h"
#include "engine/kernels/kern.h"
#include "base/log.h"

static int arg_int(const char *name, const char *v) {
    char *end = NULL;
    long x = v ? strtol(v, &end, 10) : -1;
    if (!v || *end || x < 0 || x > (1 << 20)) {
        fprintf(stderr, "cuda-bench: %s needs a number, got '%s'\n", name, v ? v : "");
        exit(2);
    }
    return (int)x;
}

int main(int argc, char **argv) {
    struct cuda_bench_opts o = {.model = NULL,
                              .device = FWD_DEVICE_CUDA,
                              .prompt_tokens = 512,
                              .gen_tokens = 64,
                              .n_seqs = 64,
                              .seq_prompt_tokens = 128,
                              .threads = 0,
                              .deterministic = 1,
                              .repeats = 5};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m"))
            o.model = v, i++;
        else if (!strcmp(a, "--device")) {
            if (!v) v = "";
            o.device = !strcmp(v, "cpu")    ? FWD_DEVICE_CPU
                       : !strcmp(v, "auto") ? FWD_DEVICE_AUTO
                                            : FWD_DEVICE_CUDA;
            if (strcmp(v, "cpu") && strcmp(v, "auto") && strcmp(v, "cuda")) {
                fprintf(stderr, "cuda-bench: --device cpu|cuda|auto\n");
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--prompt"))
            o.prompt_tokens = arg_int(a, v), i++;
        else if (!strcmp(a, "--gen"))
            o.gen_tokens = arg_int(a, v), i++;
        else if (!strcmp(a, "--seqs"))
            o.n_seqs = arg_int(a, v), i++;
        else if (!strcmp(a, "--seq-prompt"))
            o.seq_prompt_tokens = arg_int(a, v), i++;
        else if (!strcmp(a, "--repeat"))
            o.repeats = arg_int(a, v), i++;
        else if (!strcmp(a, "-t"))
            o.threads = arg_int(a, v), i++;
        else if (!strcmp(a, "--nondeterministic"))
            o.deterministic = 0;
        else if (!strcmp(a, "--full-logits"))
            o.full_logits = 1;
        else {
            fprintf(stderr, "cuda-bench: unknown argument '%s'\n", a);
            return 2;
        }
    }
    if (!o.model) {
        fprintf(stderr, "usage: cuda-bench -m MODEL [--device cpu|cuda|auto] [--prompt N] "
                        "[--gen N] [--seqs N] [--seq-prompt N] [--repeat N] [-t N] "
                        "[--nondeterministic] [--full-logits]\n");
        return 2;
    }
    log_set_level(LOG_WARN);
    if (kern_init(KERN_ISA_AUTO) < 0) {
        fprintf(stderr, "cuda-bench: no usable CPU kernels\n");
        return 1;
    }
    char json[4096], err[512] = "";
    if (cuda_bench_run(&o, json, sizeof json, err, sizeof err) != 0) {
        fprintf(stderr, "cuda-bench: %s\n", err);
        return 1;
    }
    printf("%s\n", json);
    return 0;
}
