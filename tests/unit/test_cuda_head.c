/*
 * test_cuda_head — the LM head kernel and the device argmax (engine/cuda/cuda_head.h) on a
 * GPU: products against a double-precision reference for every weight type, bit-equal rows
 * whatever the number of rows in the step, and smp_argmax's rule (first maximum, NaNs never
 * win, 0 when nothing beats -inf). Every case SKIPs without a device or in a build without
 * CUDA.
 */
#include "tests/unit/harness.h"

#define CUDA_HEAD_TESTS(X)                                                                         \
    X(test_head_vs_ref)                                                                            \
    X(test_head_batch_invariant)                                                                   \
    X(test_argmax_rows)

#ifndef GEMMAD_CUDA

#define CF_SKIP_CASE(f)                                                                            \
    static void f(void) {                                                                          \
        T_SKIP("built without CUDA (make CUDA=1)");                                                \
    }
CUDA_HEAD_TESTS(CF_SKIP_CASE)

#else /* GEMMAD_CUDA */

#include <stdint.h>

#include "engine/cuda/cuda_head.h"
#include "tests/unit/cuda_test_util.h"

#include "tests/unit/cuda_dev_util.h"

/* Every type at 1280 columns (whole k-tiles), Q8_0 at 1312 (a last tile of one chunk); 1000
 * outputs (a partial block); row counts on both tilings (<= 16, > 16) and past one m-tile. */
static void test_head_vs_ref(void) {
    cu_need_device();
    const int n_out = 1000, maxM = 70;
    const int Ms[] = {1, 3, 16, 17, 64, 70};
    const int maxN = 1312;
    float *X = cu_xmalloc(sizeof(float) * (size_t)maxM * maxN);
    for (size_t i = 0; i < (size_t)maxM * maxN; i++)
        X[i] = frand();
    float *d_X = dev_up(X, sizeof(float) * (size_t)maxM * maxN);
    float *d_Y = dev_alloc(sizeof(float) * (size_t)maxM * n_out);
    float *Y = cu_xmalloc(sizeof(float) * (size_t)maxM * n_out);
    for (int t = 0; t <= N_TYPES; t++) {
        const uint32_t type = t < N_TYPES ? kTypes[t] : QT_Q8_0;
        const int n_in = t < N_TYPES ? 1280 : 1312;
        void *host;
        struct cf_weight w = dev_weight(type, n_in, n_out, &host);
        float *W = ref_dequant(type, host, n_in, n_out);
        float *R = ref_matmul(W, X, n_in, n_out, maxM);
        for (size_t k = 0; k < sizeof Ms / sizeof Ms[0]; k++) {
            const int M = Ms[k];
            T_ASSERT(cf_head(0, &w, d_X, M, d_Y, n_out) == 0);
            dev_down(Y, d_Y, sizeof(float) * (size_t)M * n_out);
            const double e = cu_norm_err(Y, R, (size_t)M * n_out);
            T_ASSERTF(e <= 1e-5, "%s n_in=%d M=%d: normalised error %g", quant_info(type)->name,
                      n_in, M, e);
        }
        cudaFree((void *)w.data);
        free(host);
        free(W);
        free(R);
    }
    cudaFree(d_X);
    cudaFree(d_Y);
    free(X);
    free(Y);
}

/* Row m of a 64-row head is bit-identical alone, in a 5-row step and in a 20-row step (the
 * other tiling), and with a row stride wider than n_out. */
static void test_head_batch_invariant(void) {
    cu_need_device();
    const int n_in = 768, n_out = 1000, M = 64, ld = 1024; /* 768: whole K-quant blocks */
    float *X = cu_xmalloc(sizeof(float) * (size_t)M * n_in);
    for (size_t i = 0; i < (size_t)M * n_in; i++)
        X[i] = frand();
    float *d_X = dev_up(X, sizeof(float) * (size_t)M * n_in);
    float *d_Y = dev_alloc(sizeof(float) * (size_t)M * ld);
    float *Yb = cu_xmalloc(sizeof(float) * (size_t)M * ld);
    float *Ys = cu_xmalloc(sizeof(float) * (size_t)20 * ld);
    const uint32_t types[] = {QT_Q8_0, QT_Q6_K, QT_Q4_K, QT_F16};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        void *host;
        struct cf_weight w = dev_weight(types[t], n_in, n_out, &host);
        T_ASSERT(cf_head(0, &w, d_X, M, d_Y, ld) == 0);
        dev_down(Yb, d_Y, sizeof(float) * (size_t)M * ld);
        const int subs[] = {1, 5, 20};
        for (int m = 0; m < M; m += 7)
            for (size_t k = 0; k < sizeof subs / sizeof subs[0]; k++) {
                const int sub = m + subs[k] <= M ? subs[k] : M - m;
                T_ASSERT(cf_head(0, &w, d_X + (size_t)m * n_in, sub, d_Y, ld) == 0);
                dev_down(Ys, d_Y, sizeof(float) * (size_t)sub * ld);
                for (int r = 0; r < sub; r++)
                    T_ASSERTF(memcmp(Ys + (size_t)r * ld, Yb + (size_t)(m + r) * ld,
                                     sizeof(float) * n_out) == 0,
                              "%s: row %d differs between M=%d and M=%d",
                              quant_info(types[t])->name, m + r, M, sub);
            }
        cudaFree((void *)w.data);
        free(host);
    }
    cudaFree(d_X);
    cudaFree(d_Y);
    free(X);
    free(Yb);
    free(Ys);
}

/* smp_argmax's rule on the host. */
static int32_t host_argmax(const float *y, int n) {
    float b = -INFINITY;
    int32_t bi = 0;
    for (int i = 0; i < n; i++)
        if (y[i] > b) b = y[i], bi = i;
    return bi;
}

static void test_argmax_rows(void) {
    cu_need_device();
    const int n = 262144 + 37, ld = n + 3, M = 8;
    float *Y = cu_xmalloc(sizeof(float) * (size_t)M * ld);
    for (size_t i = 0; i < (size_t)M * ld; i++)
        Y[i] = frand();
    float *r;
    r = Y + (size_t)1 * ld; /* a tie: the first of two equal maxima wins */
    r[200000] = 5.0f, r[70000] = 5.0f, r[n - 1] = 5.0f;
    r = Y + (size_t)2 * ld; /* NaNs never win */
    r[0] = NAN, r[5] = NAN, r[1234] = 3.0f, r[n - 1] = NAN;
    r = Y + (size_t)3 * ld; /* everything -inf: id 0 */
    for (int i = 0; i < n; i++)
        r[i] = -INFINITY;
    r = Y + (size_t)4 * ld; /* everything NaN: id 0 */
    for (int i = 0; i < n; i++)
        r[i] = NAN;
    r = Y + (size_t)5 * ld; /* -inf and one finite value at the end */
    for (int i = 0; i < n; i++)
        r[i] = -INFINITY;
    r[n - 1] = -1e30f;
    r = Y + (size_t)6 * ld; /* the last element, +inf */
    r[n - 1] = INFINITY;
    r[ld - 1] = 1e30f; /* past n (row padding): never looked at */
    r = Y + (size_t)7 * ld; /* many equal maxima: the first */
    for (int i = 0; i < n; i++)
        r[i] = i % 3 == 2 ? 2.0f : 1.0f;
    float *d_Y = dev_up(Y, sizeof(float) * (size_t)M * ld);
    int32_t *d_ids = dev_alloc(sizeof(int32_t) * M);
    int32_t ids[8];
    T_ASSERT(cf_argmax_rows(0, d_Y, ld, n, M, d_ids) == 0);
    dev_down(ids, d_ids, sizeof ids);
    for (int m = 0; m < M; m++) {
        const int32_t want = host_argmax(Y + (size_t)m * ld, n);
        T_ASSERTF(ids[m] == want, "row %d: id %d, want %d", m, ids[m], want);
    }
    T_ASSERT(ids[1] == 70000 && ids[2] == 1234 && ids[3] == 0 && ids[4] == 0 &&
             ids[5] == n - 1 && ids[6] == n - 1 && ids[7] == 2);
    cudaFree(d_Y);
    cudaFree(d_ids);
    free(Y);
}

#endif /* GEMMAD_CUDA */

#define CF_CASE(f) T_CASE(f),
int main(int argc, char **argv) {
    static const struct t_case cases[] = {CUDA_HEAD_TESTS(CF_CASE){0}};
    return t_main(argc, argv, cases);
}
