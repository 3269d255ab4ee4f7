/*
 * bench_kern — micro-benchmark of kern_matmul on Gemma 3 270M's matmul shapes, and a
 * STREAM-like read-bandwidth probe. Not a test: it prints timings, never pass/fail.
 *
 * Built and run by tests/bench/bench_engine.py (see docs/BENCHMARKS.md):
 *   bench_kern [--threads N] [--time S] [--ggml LIB] [--only NAME] [--json]   kernels
 *              [--m 1,16,64] [--cpu] [--fastest] [--isa avx2|avx512|amx|scalar] [--no-panels]
 *   bench_kern --bandwidth [--threads N] [--bw-mib 1024] [--json]   read bandwidth only
 *              (best of plain loads and loads with software prefetch into L1 or L2, each
 *              re-reading the buffer for BW_SECONDS: bytes over time)
 *
 * --m sets the activation row counts (up to 512). --cpu times kern_matmul on one thread by
 * that thread's CPU time, which other processes on a shared machine disturb less than the
 * wall clock (--threads then only sizes the bandwidth probe). --fastest reports each case's
 * best run instead of the median (for comparing two builds of a compute-bound kernel on a
 * noisy machine). --isa forces the kernel set. --blas lets F32/F16/BF16 weights take the
 * BLAS path (kern_blas.c) from KERN_BLAS_MIN_M rows on, as the CPU backend does when not
 * deterministic (BF16 on AMD CPUs with AVX512_BF16: the packed BF16 kernels, kern_bf16p.c,
 * instead). Weights the forward pass repacks into panels
 * (engine/kernels/panel.h: Q8_0 and Q5_0 under AVX-512 VNNI, also Q4_0, IQ4_NL, Q4_1 and
 * Q5_1 under AVX2) are packed the same way here, unless
 * --no-panels.
 *
 * Weights are random bytes with valid scales, copied enough times to overflow the last
 * level cache and visited in turn, so every call reads its weights from DRAM as a forward
 * pass does. With --ggml (path of llama.cpp's libggml-cpu shared library) it also times
 * ggml's own vec_dot on the same rows and activations, one thread each side.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "engine/kernels/kern.h"
#include "engine/kernels/panel.h"
#include "engine/kernels/pool.h"
#include "engine/kernels/quant.h"

#define COLD_BYTES ((size_t)96 << 20) /* > any L3 we expect: weights cycle through this */
#define MAX_M 512                      /* most activation rows --m accepts */

/* Wall clock, or this thread's CPU time for the one-thread comparisons (less disturbed by
 * other processes on a shared machine). */
static clockid_t g_clock = CLOCK_MONOTONIC;
static int g_fastest; /* --fastest: the best run, not the median */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(g_clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 88172645463325252ULL;
static uint64_t rnd64(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Random weight rows with small finite fp16 scales where the type has them. */
static void fill_weights(uint32_t t, uint8_t *w, size_t bytes) {
    if (t == QT_F16 || t == QT_BF16) { /* normal values in [-0.05, 0.05]: no denormals */
        for (size_t i = 0; i + 2 <= bytes; i += 2) {
            const float f = 0.05f * ((float)(rnd64() & 0xFFFF) / 32768.0f - 1.0f);
            uint32_t u;
            memcpy(&u, &f, 4);
            const uint16_t h = t == QT_F16 ? quant_f32_to_f16(f) : (uint16_t)(u >> 16);
            memcpy(w + i, &h, 2);
        }
        return;
    }
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
        uint64_t v = rnd64();
        memcpy(w + i, &v, 8);
    }
    const struct quant_info *qi = quant_info(t);
    const quant_half h = quant_f32_to_f16(0.01f);
    for (size_t b = 0; b + (size_t)qi->size <= bytes; b += (size_t)qi->size) {
        switch (t) {
        case QT_Q4_0:
        case QT_Q5_0:
        case QT_Q8_0:
        case QT_IQ4_NL:
            memcpy(w + b, &h, 2);
            break;
        case QT_Q4_K:
        case QT_Q5_K:
        case QT_Q4_1: /* scale and min */
        case QT_Q5_1:
            memcpy(w + b, &h, 2);
            memcpy(w + b + 2, &h, 2);
            break;
        case QT_Q6_K:
            memcpy(w + b + offsetof(struct block_q6_K, d), &h, 2);
            break;
        default:
            break;
        }
    }
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- read bandwidth ---------------------------------------------------------------------- */

struct bw_arg {
    const uint8_t *p;
    size_t n;
    int prefetch; /* 1: software prefetch 2 KiB ahead into L1 (the hardware prefetcher stops at
                   * pages); 2: 16 KiB ahead into L2, as the AVX-512 panel kernels do on AMD */
    double sink;
};

/* AVX2 loads whatever the build flags (the probe is built with -march=native anyway). */
__attribute__((target("avx2"))) static void *bw_thread(void *v) {
    struct bw_arg *a = v;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < a->n; i += 128) {
        if (a->prefetch == 1) {
            _mm_prefetch((const char *)(a->p + i + 2048), _MM_HINT_T0);
            _mm_prefetch((const char *)(a->p + i + 2048 + 64), _MM_HINT_T0);
        } else if (a->prefetch == 2) {
            _mm_prefetch((const char *)(a->p + i + 16384), _MM_HINT_T2);
            _mm_prefetch((const char *)(a->p + i + 16384 + 64), _MM_HINT_T2);
        }
        s0 = _mm256_add_epi64(s0, _mm256_load_si256((const __m256i *)(a->p + i)));
        s1 = _mm256_add_epi64(s1, _mm256_load_si256((const __m256i *)(a->p + i + 32)));
        s2 = _mm256_add_epi64(s2, _mm256_load_si256((const __m256i *)(a->p + i + 64)));
        s3 = _mm256_add_epi64(s3, _mm256_load_si256((const __m256i *)(a->p + i + 96)));
    }
    s0 = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
    a->sink = (double)_mm256_extract_epi64(s0, 0);
    return NULL;
}

/* Each way of reading (plain loads, loads with either prefetch) re-reads the buffer for this long
 * and the figure is its bytes over its time: sustained, as a decode run of a second or more reads.
 * Until 2026-12-07 it was the median of 7 passes (a few ms each), and on a shared 2-core Zen 4
 * guest consecutive probes over 244 MiB read 24.6, 31.2 and 42.1 GB/s: short bursts. */
#define BW_SECONDS 0.5

/* GB/s of reading a `mib` MiB buffer with n threads (each a contiguous slice), with plain
 * loads and with either software prefetch; returns the best of the three. */
static double bandwidth(int nt, size_t mib) {
    const size_t total = (mib << 20) / (size_t)(128 * nt) * (size_t)(128 * nt);
    uint8_t *buf = aligned_alloc(64, total + 4096);
    if (!buf || nt < 1 || nt > 64) return 0;
    memset(buf, 1, total + 4096);
    double best = 0;
    for (int pf = 0; pf < 3; pf++) {
        double spent = 0;
        int reps = 0;
        while (reps < 3 || spent < BW_SECONDS) {
            pthread_t th[64];
            struct bw_arg args[64];
            double t0 = now_s();
            for (int i = 0; i < nt; i++) {
                args[i] = (struct bw_arg){buf + total / (size_t)nt * (size_t)i,
                                          total / (size_t)nt, pf, 0};
                pthread_create(&th[i], NULL, bw_thread, &args[i]);
            }
            for (int i = 0; i < nt; i++)
                pthread_join(th[i], NULL);
            spent += now_s() - t0;
            reps++;
        }
        const double gbs = (double)total * reps / spent / 1e9;
        if (gbs > best) best = gbs;
    }
    free(buf);
    return best;
}

/* ---- ggml's vec_dot, loaded at run time ---------------------------------------------------- */

struct ggml_traits_cpu { /* ggml-cpu.h: struct ggml_type_traits_cpu */
    void (*from_float)(const float *x, void *y, int64_t k);
    void (*vec_dot)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by,
                    int nrc);
    int vec_dot_type;
    int64_t nrows;
};
static const struct ggml_traits_cpu *(*ggml_traits)(int type);

static int ggml_load(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        fprintf(stderr, "bench_kern: %s\n", dlerror());
        return -1;
    }
    void (*init)(void) = (void (*)(void))dlsym(h, "ggml_cpu_init");
    ggml_traits = (const struct ggml_traits_cpu *(*)(int))dlsym(h, "ggml_get_type_traits_cpu");
    if (!init || !ggml_traits) return -1;
    init();
    return 0;
}

/* ---- kern_matmul ------------------------------------------------------------------------- */

struct shape {
    const char *what;
    uint32_t type;
    int64_t n_in, n_out;
};

static const struct shape shapes[] = {
    {"attn_q", QT_Q5_0, 640, 1024},    {"ffn_up/gate", QT_Q5_0, 640, 2048},
    {"ffn_down", QT_Q6_K, 2048, 640},  {"ffn_down", QT_Q4_K, 2048, 640},
    {"attn_out", QT_Q4_K, 1024, 640},  {"attn_v", QT_Q8_0, 640, 256},
    {"lm_head", QT_Q8_0, 640, 262144}, {"ffn_up_f16", QT_F16, 640, 2048},
    {"ffn_up_bf16", QT_BF16, 640, 2048},
    {"ffn_up_q8_0", QT_Q8_0, 640, 2048}, /* the Q8_0 and IQ4_NL files' matrices */
    {"ffn_up_iq4_nl", QT_IQ4_NL, 640, 2048},
    {"ffn_up_q4_1", QT_Q4_1, 640, 2048},
    {"ffn_up_q5_1", QT_Q5_1, 640, 2048},
    {"ffn_down_q3_k", QT_Q3_K, 2048, 640}, /* the Q2_K file's */
    {"lm_head_f16", QT_F16, 640, 262144}, /* the F16 / BF16 files' tied LM head */
    {"lm_head_bf16", QT_BF16, 640, 262144},
};

/* Median seconds per call of fn over at least `budget` seconds (>= 3 calls). */
static void **g_panels; /* per copy: its panel_pack copy, as the forward pass packs it */

static double bench_one(struct pool *pool, const struct kern_weight *w, int copies, const float *X,
                        int M, float *Y, void *scratch, double budget) {
    double t[256];
    int n = 0;
    double start = now_s();
    while (n < 256 && (n < 3 || now_s() - start < budget)) {
        struct kern_weight wc = *w;
        wc.data = (const uint8_t *)w->data + (size_t)(n % copies) * w->row_bytes * (size_t)w->n_out;
        wc.panel = g_panels ? g_panels[n % copies] : NULL;
        double t0 = now_s();
        kern_matmul(pool, &wc, X, M, Y, (int)w->n_out, scratch);
        t[n++] = now_s() - t0;
    }
    qsort(t, (size_t)n, sizeof(double), cmp_d);
    return g_fastest ? t[0] : t[n / 2];
}

/* ggml's vec_dot over the same rows (one thread), activations quantized by ggml. */
static double bench_ggml(const struct kern_weight *w, int copies, const float *X, int M, float *Y,
                         void *scratch, double budget) {
    const struct ggml_traits_cpu *tr = ggml_traits((int)w->type);
    const struct ggml_traits_cpu *ta = ggml_traits(tr->vec_dot_type);
    size_t as = quant_row_size((uint32_t)tr->vec_dot_type, w->n_in);
    double t[64];
    int n = 0;
    double start = now_s();
    while (n < 64 && (n < 3 || now_s() - start < budget)) {
        const uint8_t *wd =
            (const uint8_t *)w->data + (size_t)(n % copies) * w->row_bytes * (size_t)w->n_out;
        double t0 = now_s();
        for (int m = 0; m < M; m++)
            ta->from_float(X + (int64_t)m * w->n_in, (uint8_t *)scratch + (size_t)m * as, w->n_in);
        for (int64_t o = 0; o < w->n_out; o++)
            for (int m = 0; m < M; m++)
                tr->vec_dot((int)w->n_in, &Y[(int64_t)m * w->n_out + o], 0,
                            wd + (size_t)o * w->row_bytes, 0, (uint8_t *)scratch + (size_t)m * as,
                            0, 1);
        t[n++] = now_s() - t0;
    }
    qsort(t, (size_t)n, sizeof(double), cmp_d);
    return t[n / 2];
}

int main(int argc, char **argv) {
    int threads = 2, json = 0, bw_only = 0, cpu = 0, panels = 1, blas = 0;
    size_t bw_mib = 1024;
    enum kern_isa isa = KERN_ISA_AUTO;
    int Ms[16] = {1, 16, 64}, n_ms = 3;
    double budget = 0.5;
    const char *ggml = NULL, *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--time") && i + 1 < argc)
            budget = atof(argv[++i]);
        else if (!strcmp(argv[i], "--ggml") && i + 1 < argc)
            ggml = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--bandwidth"))
            bw_only = 1;
        else if (!strcmp(argv[i], "--bw-mib") && i + 1 < argc)
            bw_mib = (size_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--cpu"))
            cpu = 1;
        else if (!strcmp(argv[i], "--fastest"))
            g_fastest = 1;
        else if (!strcmp(argv[i], "--no-panels"))
            panels = 0;
        else if (!strcmp(argv[i], "--blas"))
            blas = 1;
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
            i++;
            isa = !strcmp(argv[i], "avx2")     ? KERN_ISA_AVX2
                  : !strcmp(argv[i], "avx512") ? KERN_ISA_AVX512
                  : !strcmp(argv[i], "amx")    ? KERN_ISA_AMX
                  : !strcmp(argv[i], "scalar") ? KERN_ISA_REF
                                               : KERN_ISA_AUTO;
        }
        else if (!strcmp(argv[i], "--m") && i + 1 < argc) {
            n_ms = 0;
            for (char *t = strtok(argv[++i], ","); t && n_ms < 16; t = strtok(NULL, ",")) {
                int m = atoi(t);
                if (m >= 1 && m <= MAX_M) Ms[n_ms++] = m;
            }
        }
        else {
            fprintf(stderr,
                    "usage: %s [--threads N] [--time S] [--ggml LIB] [--only NAME] [--json] "
                    "[--bandwidth [--bw-mib N]] [--m LIST] [--cpu] [--fastest] [--isa NAME] [--no-panels] [--blas]\n",
                    argv[0]);
            return 2;
        }
    }
    if (bw_mib < 1) bw_mib = 1;
    double bw = bandwidth(threads, bw_mib);
    if (bw_only) {
        printf(json ? "{\"read_gb_s\": %.3f, \"threads\": %d, \"mib\": %zu}\n"
                    : "read bandwidth %.2f GB/s (%d threads, %zu MiB)\n",
               bw, threads, bw_mib);
        return 0;
    }
    if (ggml && ggml_load(ggml) != 0) ggml = NULL;
    if (kern_init(isa) != 0) {
        fprintf(stderr, "bench_kern: ISA %s not supported here\n", kern_isa_name(isa));
        return 1;
    }
    struct pool *pool = NULL, *pool1 = NULL;
    if (pool_create(threads, &pool) != 0 || pool_create(1, &pool1) != 0) return 1;
    if (json)
        printf("{\"isa\": \"%s\", \"threads\": %d, \"read_gb_s\": %.3f, \"cases\": [",
               kern_isa_name(kern_active_isa()), threads, bw);
    else
        printf("isa %s, %d threads%s, read bandwidth %.2f GB/s\n%-12s %-5s %6s %7s %3s %9s %7s %8s "
               "%7s %s\n",
               kern_isa_name(kern_active_isa()), cpu ? 1 : threads,
               cpu ? " (CPU time)" : "", bw, "matmul", "type", "n_in", "n_out",
               "M", "ms", "GB/s", "GMAC/s", "%bw", ggml ? "1-thread ms: gemmad ggml ratio" : "");
    int first = 1;
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        const struct shape *sh = &shapes[s];
        if (only && strcmp(only, sh->what)) continue;
        struct kern_weight w = {.type = sh->type,
                                .n_in = sh->n_in,
                                .n_out = sh->n_out,
                                .row_bytes = quant_row_size(sh->type, sh->n_in),
                                .blas = blas};
        const size_t wbytes = w.row_bytes * (size_t)w.n_out;
        int copies = (int)(COLD_BYTES / wbytes) + 1;
        /* in transparent huge pages, as the engine's copies of unpacked weights are
         * (engine/cpu_weights.c) */
        const size_t hp = (size_t)2 << 20, wall = (wbytes * (size_t)copies + hp - 1) & ~(hp - 1);
        uint8_t *wd = aligned_alloc(hp, wall);
        if (wd) madvise(wd, wall, MADV_HUGEPAGE);
        int max_m = 1;
        for (int mi = 0; mi < n_ms; mi++)
            if (Ms[mi] > max_m) max_m = Ms[mi];
        float *X = malloc(sizeof(float) * (size_t)max_m * (size_t)sh->n_in);
        float *Y = malloc(sizeof(float) * (size_t)max_m * (size_t)sh->n_out);
        void *scratch = aligned_alloc(
            64, (kern_act_bytes(&w, max_m) + 4 * (size_t)sh->n_in * max_m + 63) & ~(size_t)63);
        if (!wd || !X || !Y || !scratch) return 1;
        fill_weights(sh->type, wd, wbytes * (size_t)copies);
        for (int64_t i = 0; i < max_m * sh->n_in; i++)
            X[i] = (float)((int64_t)(rnd64() % 2001) - 1000) / 1000.0f;
        w.data = wd;
        size_t pbytes = 0;
        g_panels = NULL;
        if (panels && panel_supported(&w) && (g_panels = calloc((size_t)copies, sizeof(void *))))
            for (int k = 0; k < copies; k++) {
                struct kern_weight wk = w;
                wk.data = wd + (size_t)k * wbytes;
                if (panel_pack(&wk, pool, &g_panels[k], &pbytes) != 0) return 1;
            }
        for (int mi = 0; mi < n_ms; mi++) {
            const int M = Ms[mi];
            if (cpu) g_clock = CLOCK_THREAD_CPUTIME_ID;
            double t = bench_one(cpu ? pool1 : pool, &w, copies, X, M, Y, scratch, budget);
            g_clock = CLOCK_MONOTONIC;
            double gbs = (double)wbytes / t / 1e9;
            double gmac = (double)sh->n_in * (double)sh->n_out * M / t / 1e9;
            double t1 = 0, tg = 0;
            if (ggml && (M == 1 || sh->n_out <= 4096) && !getenv("BENCH_NO_MT")) {
                g_clock = CLOCK_THREAD_CPUTIME_ID;
                t1 = bench_one(pool1, &w, copies, X, M, Y, scratch, budget / 2);
                tg = bench_ggml(&w, copies, X, M, Y, scratch, budget / 2);
                g_clock = CLOCK_MONOTONIC;
            }
            if (json) {
                printf(
                    "%s\n  {\"name\": \"%s\", \"type\": \"%s\", \"n_in\": %lld, \"n_out\": %lld, "
                    "\"M\": %d, \"ms\": %.4f, \"gb_s\": %.3f, \"gmac_s\": %.3f, \"bw_frac\": %.3f",
                    first ? "" : ",", sh->what, quant_info(sh->type)->name, (long long)sh->n_in,
                    (long long)sh->n_out, M, t * 1e3, gbs, gmac, gbs / bw);
                if (tg > 0)
                    printf(", \"ms_1t\": %.4f, \"ggml_ms_1t\": %.4f, \"vs_ggml\": %.3f", t1 * 1e3,
                           tg * 1e3, tg / t1);
                printf("}");
                first = 0;
            } else {
                printf("%-12s %-5s %6lld %7lld %3d %9.3f %7.2f %8.2f %6.0f%%", sh->what,
                       quant_info(sh->type)->name, (long long)sh->n_in, (long long)sh->n_out, M,
                       t * 1e3, gbs, gmac, 100 * gbs / bw);
                if (tg > 0) printf("  %8.3f %8.3f %5.2fx", t1 * 1e3, tg * 1e3, tg / t1);
                printf("\n");
            }
            fflush(stdout);
        }
        for (int k = 0; g_panels && k < copies; k++)
            panel_free(g_panels[k], pbytes);
        free(g_panels);
        g_panels = NULL;
        free(wd);
        free(X);
        free(Y);
        free(scratch);
    }
    if (json) printf("\n]}\n");
    pool_destroy(pool);
    pool_destroy(pool1);
    return 0;
}
