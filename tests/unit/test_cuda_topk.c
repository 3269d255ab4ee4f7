/*
 * test_cuda_topk — the device top-k candidates (engine/cuda/cuda_topk.h) on a GPU against
 * the host's be_topk_row (engine/backend.c), bit for bit: 262,181-wide rows with random
 * values, ties at the top and at the cut, NaNs, -inf, -0 against +0, rows with fewer
 * non-NaN ids than candidates, a row narrower than CF_TOPK_MAX, scales that make near-equal
 * logits tie; rows picked through the index list in any order, each row's result the same
 * alone and among others. Every case SKIPs without a device or in a build without CUDA.
 */
#include "tests/unit/harness.h"

#define CUDA_TOPK_TESTS(X)                                                                         \
    X(test_topk_vs_host)                                                                           \
    X(test_topk_narrow_row)

#ifndef GEMMAD_CUDA

#define CF_SKIP_CASE(f)                                                                            \
    static void f(void) {                                                                          \
        T_SKIP("built without CUDA (make CUDA=1)");                                                \
    }
CUDA_TOPK_TESTS(CF_SKIP_CASE)

#else /* GEMMAD_CUDA */

#include <stdint.h>

#include "engine/backend.h"
#include "engine/cuda/cuda_topk.h"
#include "tests/unit/cuda_test_util.h"

#include "tests/unit/cuda_dev_util.h"

/* Runs rows[0 .. M) of Y (device d_Y) with their scales; checks each against be_topk_row. */
static void check_rows(const float *Y, const float *d_Y, int ld, int n, const int32_t *rows,
                       const float *scale, int M) {
    int32_t *d_rows = dev_up(rows, sizeof(int32_t) * (size_t)M);
    float *d_scale = dev_up(scale, sizeof(float) * (size_t)M);
    int32_t *d_ids = dev_alloc(sizeof(int32_t) * (size_t)M * CF_TOPK_MAX);
    float *d_vals = dev_alloc(sizeof(float) * (size_t)M * CF_TOPK_MAX);
    int32_t *ids = cu_xmalloc(sizeof(int32_t) * (size_t)M * CF_TOPK_MAX);
    float *vals = cu_xmalloc(sizeof(float) * (size_t)M * CF_TOPK_MAX);
    T_ASSERT(cf_topk_rows(0, d_Y, ld, n, d_rows, d_scale, M, d_ids, d_vals) == 0);
    dev_down(ids, d_ids, sizeof(int32_t) * (size_t)M * CF_TOPK_MAX);
    dev_down(vals, d_vals, sizeof(float) * (size_t)M * CF_TOPK_MAX);
    int32_t want_id[BE_TOPK_MAX];
    float want_val[BE_TOPK_MAX];
    for (int j = 0; j < M; j++) {
        be_topk_row(Y + (size_t)rows[j] * ld, n, scale[j], want_id, want_val);
        for (int k = 0; k < CF_TOPK_MAX; k++) {
            const int32_t got = ids[(size_t)j * CF_TOPK_MAX + k];
            const float gv = vals[(size_t)j * CF_TOPK_MAX + k];
            T_ASSERTF(got == want_id[k], "row %d (scale %g) candidate %d: id %d, host %d", rows[j],
                      scale[j], k, got, want_id[k]);
            T_ASSERTF(memcmp(&gv, &want_val[k], 4) == 0, "row %d candidate %d: value %a, host %a",
                      rows[j], k, gv, want_val[k]);
        }
    }
    cudaFree(d_rows);
    cudaFree(d_scale);
    cudaFree(d_ids);
    cudaFree(d_vals);
    free(ids);
    free(vals);
}

static void test_topk_vs_host(void) {
    cu_need_device();
    enum { M = 12 };
    const int n = 262144 + 37, ld = n + 3;
    float *Y = cu_xmalloc(sizeof(float) * (size_t)M * ld);
    for (size_t i = 0; i < (size_t)M * ld; i++)
        Y[i] = frand() * 8.0f;
    float *r;
    r = Y + (size_t)1 * ld; /* 100 ties above everything: the 64 lowest ids */
    for (int i = 0; i < 100; i++)
        r[(i * 2617 + 11) % n] = 20.0f;
    r = Y + (size_t)2 * ld; /* NaNs everywhere, some where the best would be */
    for (int i = 0; i < n; i += 3)
        r[i] = NAN;
    r = Y + (size_t)3 * ld; /* everything -inf: ids 0 .. 63, all -inf */
    for (int i = 0; i < n; i++)
        r[i] = -INFINITY;
    r = Y + (size_t)4 * ld; /* everything NaN: pads only */
    for (int i = 0; i < n; i++)
        r[i] = NAN;
    r = Y + (size_t)5 * ld; /* 30 finite ids, the rest -inf: then the lowest -inf ids */
    for (int i = 0; i < n; i++)
        r[i] = i % 8731 == 5 ? frand() : -INFINITY;
    r = Y + (size_t)6 * ld; /* 50 non-NaN ids, the rest NaN: 14 pads */
    for (int i = 0; i < n; i++)
        r[i] = i % 5000 == 7 ? frand() : NAN;
    r = Y + (size_t)7 * ld; /* values <= 0 with -0 and +0 tied at the top */
    for (int i = 0; i < n; i++)
        r[i] = -fabsf(frand()) - 1.0f;
    for (int i = 0; i < 80; i++)
        r[(i * 3001 + 17) % n] = i % 2 ? -0.0f : 0.0f;
    r = Y + (size_t)8 * ld; /* near-equal values: ties after a large scale */
    for (int i = 0; i < n; i++)
        r[i] = 1.0f + (float)(rnd() % 64) * 0x1p-23f;
    r = Y + (size_t)9 * ld; /* a tie group straddling the cut: 60 above, 20 equal at it */
    for (int i = 0; i < n; i++)
        r[i] = frand();
    for (int i = 0; i < 60; i++)
        r[(i * 4099 + 3) % n] = 10.0f + (float)i;
    for (int i = 0; i < 20; i++)
        r[(i * 7919 + 1000) % n] = 9.0f;
    r = Y + (size_t)10 * ld; /* +inf and huge values that overflow when scaled */
    for (int i = 0; i < 10; i++)
        r[i * 20000] = i % 2 ? INFINITY : 3e38f;
    float *d_Y = dev_up(Y, sizeof(float) * (size_t)M * ld);
    int32_t rows[M];
    float scale[M];
    static const float scales[] = {1.0f, 1.0f / 0.7f, 100.0f, 0.5f, 1.0f / 1.3f, 1e-3f};
    for (int pass = 0; pass < 6; pass++) {
        for (int j = 0; j < M; j++) {
            rows[j] = (j * 5 + pass) % M; /* a permutation: order through the index list */
            scale[j] = scales[(j + pass) % 6];
        }
        check_rows(Y, d_Y, ld, n, rows, scale, M);
        check_rows(Y, d_Y, ld, n, rows + pass, scale + pass, 1); /* one row alone */
    }
    cudaFree(d_Y);
    free(Y);
}

/* A row narrower than CF_TOPK_MAX: all of its ids, then pads; a row of exactly 64. */
static void test_topk_narrow_row(void) {
    cu_need_device();
    const int ns[] = {1, 40, 64, 65, 1025};
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        const int n = ns[t], ld = n + 1;
        float *Y = cu_xmalloc(sizeof(float) * (size_t)2 * ld);
        for (int i = 0; i < 2 * ld; i++)
            Y[i] = (float)(rnd() % 7); /* many ties */
        Y[ld + n / 2] = NAN;
        float *d_Y = dev_up(Y, sizeof(float) * (size_t)2 * ld);
        const int32_t rows[2] = {1, 0};
        const float scale[2] = {0.9f, 1.0f};
        check_rows(Y, d_Y, ld, n, rows, scale, 2);
        cudaFree(d_Y);
        free(Y);
    }
}

#endif /* GEMMAD_CUDA */

#define CF_CASE(f) T_CASE(f),
int main(int argc, char **argv) {
    static const struct t_case cases[] = {CUDA_TOPK_TESTS(CF_CASE){0}};
    return t_main(argc, argv, cases);
}
