/*
 * bench_blas — prefill matmul: the quantized kernels (kern_set_blas(0)) against the OpenBLAS
 * path (dequantized f32 tiles + cblas_sgemm, kern_set_blas(1)) on Gemma 3 270M Q4_K_M's
 * shapes, for M = 64, 256, 512 activation rows. Prints milliseconds per call (best of R),
 * never pass/fail. Used to choose where kern_matmul takes the BLAS path.
 *
 *   make BUILD=build/b build/b/libgemmad.a
 *   gcc -O2 -march=native -I. -I/usr/include/x86_64-linux-gnu tests/bench/bench_blas.c \
 *       build/b/libgemmad.a -o build/b/bench_blas -lopenblas -lm -lpthread
 *   build/b/bench_blas [threads] [reps]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/kernels/kern.h"
#include "engine/kernels/pool.h"
#include "engine/kernels/quant.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

/* Wall clock; with one thread, process CPU time (steadier on a shared, loaded machine). */
static clockid_t g_clock = CLOCK_MONOTONIC;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(g_clock, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

/* Random blocks with small positive fp16 scales at the given offsets. */
static void *make_weights(uint32_t type, int64_t n_in, int64_t n_out, int off0, int off1) {
    const struct quant_info *qi = quant_info(type);
    size_t bytes = quant_row_size(type, n_in) * (size_t)n_out;
    uint8_t *w = malloc(bytes);
    if (!w) return NULL;
    for (size_t i = 0; i < bytes; i++)
        w[i] = (uint8_t)rnd();
    quant_half h = quant_f32_to_f16(0.01f);
    for (size_t b = 0; b < bytes / (size_t)qi->size; b++) {
        memcpy(w + b * (size_t)qi->size + off0, &h, 2);
        if (off1 >= 0) memcpy(w + b * (size_t)qi->size + off1, &h, 2);
    }
    return w;
}

static double time_call(struct pool *p, const struct kern_weight *w, const float *X, int M,
                        float *Y, void *act, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_ms();
        kern_matmul(p, w, X, M, Y, (int)w->n_out, act);
        double t = now_ms() - t0;
        if (t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : pool_default_threads();
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    static const struct {
        const char *name;
        uint32_t type;
        int64_t n_in, n_out;
        int off0, off1;
        int max_m;
    } shapes[] = {
        {"attn_q  Q5_0 640->1024", QT_Q5_0, 640, 1024, 0, -1, 512},
        {"ffn_up  Q5_0 640->2048", QT_Q5_0, 640, 2048, 0, -1, 512},
        {"attn_o  Q4_K 1024->640", QT_Q4_K, 1024, 640, 0, 2, 512},
        {"ffn_dn  Q4_K 2048->640", QT_Q4_K, 2048, 640, 0, 2, 512},
        {"ffn_dn  Q6_K 2048->640", QT_Q6_K, 2048, 640, 208, -1, 512},
        {"lm_head Q8_0 640->262144", QT_Q8_0, 640, 262144, 0, -1, 64},
    };
    static const int Ms[] = {8, 16, 32, 64, 256, 512};
    if (threads == 1) g_clock = CLOCK_PROCESS_CPUTIME_ID;
    struct pool *p = NULL;
    if (pool_create(threads, &p)) return 1;
    kern_init(KERN_ISA_AUTO);
    kern_set_blas_min_m(1); /* time the BLAS path at every M, not only where it is chosen */
    printf("isa %s, %d threads, best of %d; ms (%s) per kern_matmul call\n",
           kern_isa_name(kern_active_isa()), threads, reps, threads == 1 ? "cpu" : "wall");
    printf("%-26s %5s %10s %10s %8s\n", "shape", "M", "quantized", "blas", "q/blas");
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        struct kern_weight w = {.type = shapes[s].type,
                                .n_in = shapes[s].n_in,
                                .n_out = shapes[s].n_out,
                                .row_bytes = quant_row_size(shapes[s].type, shapes[s].n_in)};
        w.data = make_weights(w.type, w.n_in, w.n_out, shapes[s].off0, shapes[s].off1);
        int maxm = shapes[s].max_m;
        float *X = malloc(sizeof(float) * (size_t)maxm * (size_t)w.n_in);
        float *Y = malloc(sizeof(float) * (size_t)maxm * (size_t)w.n_out);
        void *act = aligned_alloc(64, kern_act_bytes(&w, maxm));
        if (!w.data || !X || !Y || !act) return 1;
        for (int64_t i = 0; i < (int64_t)maxm * w.n_in; i++)
            X[i] = (float)rnd() / 4e9f - 0.5f;
        { /* dequantization alone: the part of the BLAS path that does not scale with M */
            double t0 = now_ms();
            for (int64_t r = 0; r < w.n_out && r < 65536; r++)
                kern_get_row(&w, r, Y);
            int64_t rows = w.n_out < 65536 ? w.n_out : 65536;
            printf("%-26s dequant %.2f ns/element\n", shapes[s].name,
                   (now_ms() - t0) * 1e6 / (double)(rows * w.n_in));
        }
        for (size_t k = 0; k < sizeof(Ms) / sizeof(Ms[0]); k++) {
            int M = Ms[k];
            if (M > maxm) continue;
            kern_set_blas(0);
            double tq = time_call(p, &w, X, M, Y, act, reps);
            kern_set_blas(1);
            double tb = time_call(p, &w, X, M, Y, act, reps);
            printf("%-26s %5d %10.2f %10.2f %8.2f\n", shapes[s].name, M, tq, tb, tq / tb);
            fflush(stdout);
        }
        kern_set_blas(0);
        free((void *)w.data);
        free(X);
        free(Y);
        free(act);
    }
    pool_destroy(p);
    return 0;
}
