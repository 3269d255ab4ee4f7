/*
 * test_cuda_mmvq — the int8 matrix-vector path (engine/cuda/cuda_mmvq.h) on a GPU.
 *
 * For every type it takes (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL), n_in 640 and 2048, 1 to 8
 * rows: the quantized activations byte for byte against the CPU's quantizer
 * (quant_q8_1_row_ref, whose qs and d are quant_q8_0_row_ref's), ties included; the products
 * against cu_mmvq_row_ref (the CPU's reference dot of each block in the kernel's lane order;
 * normalised error <= 1e-5, the integer parts are exact); each row bit-identical alone and
 * among 8; cf_mmvq_matmul_set (QKV; gate/up + GeGLU; one type or mixed) bit-identical to
 * separate cf_mmvq_matmul calls (and cf_geglu).
 *
 * test_mmvq_row_host runs anywhere in a CUDA build: the kernel's per-row code compiled for the
 * host against the same reference. Without a CUDA build every case says SKIP; without a usable
 * device, the others SKIP with the runtime's reason.
 */
#include "tests/unit/harness.h"

#define MMVQ_TESTS(X)                                                                              \
    X(test_mmvq_row_host)                                                                          \
    X(test_mmvq_quantize_bytes)                                                                    \
    X(test_mmvq_vs_ref)                                                                            \
    X(test_mmvq_batch_invariant)                                                                   \
    X(test_mmvq_set_same_bits)

#ifndef GEMMAD_CUDA

#define CF_SKIP_CASE(f)                                                                            \
    static void f(void) {                                                                          \
        T_SKIP("built without CUDA (make CUDA=1)");                                                \
    }
MMVQ_TESTS(CF_SKIP_CASE)

#else /* GEMMAD_CUDA */

#include <stdint.h>

#include "engine/cuda/cuda_act.h"
#include "engine/cuda/cuda_matmul.h"
#include "engine/cuda/cuda_mmvq.h"
#include "engine/kernels/quant.h"
#include "tests/unit/cuda_test_util.h"

#include "tests/unit/cuda_dev_util.h"

static const uint32_t kMmvqTypes[] = {QT_Q4_0, QT_Q4_1, QT_Q5_0, QT_Q5_1, QT_Q8_0, QT_IQ4_NL};
#define N_MMVQ_TYPES (int)(sizeof kMmvqTypes / sizeof kMmvqTypes[0])

/* M rows of n_in activations: random, scaled per row; row 1 (when there) has blocks whose
 * amax is 127 (multiplier 1) and half-integer values, so the ties-to-even rounding shows;
 * one block of row 0 is all zero (d = 0). */
static float *make_x(int M, int n_in) {
    float *X = cu_xmalloc(sizeof(float) * (size_t)M * n_in);
    for (int m = 0; m < M; m++)
        for (int i = 0; i < n_in; i++)
            X[(size_t)m * n_in + i] = (0.5f + (float)m) * frand();
    for (int i = 32; i < 64 && i < n_in; i++)
        X[i] = 0.0f;
    if (M > 1)
        for (int i = 0; i < n_in; i++)
            X[(size_t)n_in + i] = i % 32 == 0 ? 127.0f : (float)((int)(rnd() % 250) - 125) + 0.5f;
    return X;
}

/* The CPU's quantization of the M rows, one block_q8_1 per block of 32. */
static struct block_q8_1 *cpu_quant(const float *X, int M, int n_in) {
    struct block_q8_1 *q = cu_xmalloc(sizeof *q * (size_t)M * (n_in / 32));
    for (int m = 0; m < M; m++)
        quant_q8_1_row_ref(X + (size_t)m * n_in, q + (size_t)m * (n_in / 32), n_in);
    return q;
}

static void *dev_quant(const float *d_X, int M, int n_in, size_t *bytes) {
    *bytes = cf_mmvq_bytes(M, n_in);
    void *buf = dev_alloc(*bytes);
    T_ASSERT(cf_mmvq_quantize(0, d_X, M, n_in, buf, *bytes) == 0);
    return buf;
}

/* Runs without a device: the kernel's per-row code compiled for the host (weight words,
 * dp4a, block terms, lane order and butterfly) against cu_mmvq_row_ref, every type, n_in 640
 * and 2048: the same bits, except where the C compiler contracts the reference's
 * d·s + m·s into an FMA (Q4_1, Q5_1), there within 1e-6 of the row's largest output. */
static void test_mmvq_row_host(void) {
    const int ns[2] = {640, 2048}, n_out = 40, M = 3;
    for (int t = 0; t < N_MMVQ_TYPES; t++) {
        const uint32_t type = kMmvqTypes[t];
        for (int k = 0; k < 2; k++) {
            const int n_in = ns[k], nb = n_in / 32;
            size_t rb = 0;
            uint8_t *W = make_rows(type, n_in, n_out, &rb);
            float *X = make_x(M, n_in);
            struct block_q8_1 *q = cpu_quant(X, M, n_in);
            int8_t *qs = cu_xmalloc((size_t)n_in);
            float *d = cu_xmalloc(sizeof(float) * nb), *sx = cu_xmalloc(sizeof(float) * nb);
            float *Y = cu_xmalloc(sizeof(float) * n_out), *R = cu_xmalloc(sizeof(float) * n_out);
            int same = 0;
            double worst = 0;
            for (int m = 0; m < M; m++) {
                const struct block_q8_1 *qm = q + (size_t)m * nb;
                for (int b = 0; b < nb; b++) {
                    memcpy(qs + 32 * b, qm[b].qs, 32);
                    d[b] = quant_f16_to_f32(qm[b].d);
                    sx[b] = quant_f16_to_f32(qm[b].s);
                }
                for (int o = 0; o < n_out; o++) {
                    T_ASSERT(cf_mmvq_row_host(type, W + (size_t)o * rb, n_in, qs, d, sx, &Y[o]) == 0);
                    R[o] = cu_mmvq_row_ref(type, W + (size_t)o * rb, n_in, qm);
                    same += Y[o] == R[o];
                }
                const double e = cu_norm_err(Y, R, (size_t)n_out);
                if (e > worst) worst = e;
            }
            printf("    %s n_in %d: %d/%d bit-equal, normalised error %.3g\n",
                   quant_info(type)->name, n_in, same, M * n_out, worst);
            T_ASSERTF(worst <= 1e-6, "%s n_in %d: error %g", quant_info(type)->name, n_in, worst);
            if (type != QT_Q4_1 && type != QT_Q5_1)
                T_ASSERTF(same == M * n_out, "%s n_in %d: %d of %d outputs differ",
                          quant_info(type)->name, n_in, M * n_out - same, M * n_out);
            free(W), free(X), free(q), free(qs), free(d), free(sx), free(Y), free(R);
        }
    }
    float y;
    T_ASSERT(cf_mmvq_row_host(QT_Q4_K, NULL, 256, NULL, NULL, NULL, &y) == -1);
}

/* The device's quantized bytes, d and s equal the CPU's, for 1 to 8 rows. */
static void test_mmvq_quantize_bytes(void) {
    cu_need_device();
    const int ns[2] = {640, 2048};
    for (int k = 0; k < 2; k++) {
        const int n_in = ns[k], nb = n_in / 32;
        for (int M = 1; M <= CF_MMVQ_MAX_ROWS; M++) {
            float *X = make_x(M, n_in);
            float *d_X = dev_up(X, sizeof(float) * (size_t)M * n_in);
            size_t bytes = 0;
            void *buf = dev_quant(d_X, M, n_in, &bytes);
            uint8_t *h = cu_xmalloc(bytes);
            dev_down(h, buf, bytes);
            const struct cf_mmvq_act A = cf_mmvq_layout(h, M, n_in);
            struct block_q8_1 *q = cpu_quant(X, M, n_in);
            int bad = 0;
            for (int b = 0; b < M * nb && !bad; b++) {
                const int m = b / nb, j = b % nb;
                bad = memcmp(A.qs + (size_t)m * n_in + 32 * j, q[b].qs, 32) != 0 ||
                      A.d[b] != quant_f16_to_f32(q[b].d) || A.s[b] != quant_f16_to_f32(q[b].s);
                T_ASSERTF(!bad, "n_in %d M %d row %d block %d: d %g/%g s %g/%g or qs differ",
                          n_in, M, m, j, A.d[b], quant_f16_to_f32(q[b].d), A.s[b],
                          quant_f16_to_f32(q[b].s));
            }
            free(q), free(h), free(X);
            cudaFree(buf), cudaFree(d_X);
        }
    }
}

/* Every type, n_in 640 and 2048, 1-8 rows, against the host reference; n_out 75 leaves a
 * partly filled last block of rows. */
static void test_mmvq_vs_ref(void) {
    cu_need_device();
    const int ns[2] = {640, 2048}, n_out = 75;
    for (int t = 0; t < N_MMVQ_TYPES; t++) {
        T_ASSERT(cf_mmvq_supported(kMmvqTypes[t]));
        for (int k = 0; k < 2; k++) {
            const int n_in = ns[k], nb = n_in / 32;
            void *hw = NULL;
            const struct cf_weight w = dev_weight(kMmvqTypes[t], n_in, n_out, &hw);
            for (int M = 1; M <= CF_MMVQ_MAX_ROWS; M++) {
                float *X = make_x(M, n_in);
                float *d_X = dev_up(X, sizeof(float) * (size_t)M * n_in);
                size_t bytes = 0;
                void *buf = dev_quant(d_X, M, n_in, &bytes);
                float *d_Y = dev_alloc(sizeof(float) * (size_t)M * n_out);
                T_ASSERT(cf_mmvq_matmul(0, &w, buf, M, d_Y, n_out) == 0);
                float *Y = cu_xmalloc(sizeof(float) * (size_t)M * n_out);
                float *R = cu_xmalloc(sizeof(float) * (size_t)M * n_out);
                dev_down(Y, d_Y, sizeof(float) * (size_t)M * n_out);
                struct block_q8_1 *q = cpu_quant(X, M, n_in);
                int same = 0;
                for (int m = 0; m < M; m++)
                    for (int o = 0; o < n_out; o++) {
                        R[(size_t)m * n_out + o] =
                            cu_mmvq_row_ref(w.type, (const uint8_t *)hw + (size_t)o * w.row_bytes,
                                            n_in, q + (size_t)m * nb);
                        same += R[(size_t)m * n_out + o] == Y[(size_t)m * n_out + o];
                    }
                const double e = cu_norm_err(Y, R, (size_t)M * n_out);
                T_ASSERTF(e <= 1e-5, "%s n_in %d M %d: normalised error %g", quant_info(w.type)->name,
                          n_in, M, e);
                if (M == CF_MMVQ_MAX_ROWS)
                    printf("    %s n_in %d: error %.3g, %d/%d outputs bit-equal to the reference\n",
                           quant_info(w.type)->name, n_in, e, same, M * n_out);
                free(q), free(R), free(Y), free(X);
                cudaFree(d_Y), cudaFree(buf), cudaFree(d_X);
            }
            cudaFree((void *)w.data);
            free(hw);
        }
    }
}

/* Row m of an 8-row product is bit-identical to that row alone (M = 1) and to the same row in
 * a product of m + 1 rows. */
static void test_mmvq_batch_invariant(void) {
    cu_need_device();
    const int n_in = 2048, n_out = 130, M = CF_MMVQ_MAX_ROWS;
    for (int t = 0; t < N_MMVQ_TYPES; t++) {
        void *hw = NULL;
        const struct cf_weight w = dev_weight(kMmvqTypes[t], n_in, n_out, &hw);
        float *X = make_x(M, n_in);
        float *d_X = dev_up(X, sizeof(float) * (size_t)M * n_in);
        float *d_Y = dev_alloc(sizeof(float) * (size_t)M * n_out);
        float *all = cu_xmalloc(sizeof(float) * (size_t)M * n_out);
        float *one = cu_xmalloc(sizeof(float) * (size_t)M * n_out);
        size_t bytes = 0;
        void *buf = dev_quant(d_X, M, n_in, &bytes);
        T_ASSERT(cf_mmvq_matmul(0, &w, buf, M, d_Y, n_out) == 0);
        dev_down(all, d_Y, sizeof(float) * (size_t)M * n_out);
        for (int m = 0; m < M; m++) {
            /* alone: the row's own quantization */
            T_ASSERT(cf_mmvq_quantize(0, d_X + (size_t)m * n_in, 1, n_in, buf, bytes) == 0);
            T_ASSERT(cf_mmvq_matmul(0, &w, buf, 1, d_Y, n_out) == 0);
            dev_down(one, d_Y, sizeof(float) * (size_t)n_out);
            T_ASSERTF(memcmp(one, all + (size_t)m * n_out, sizeof(float) * n_out) == 0,
                      "%s: row %d alone differs from row %d of %d", quant_info(w.type)->name, m,
                      m, M);
            /* among the first m + 1 rows */
            T_ASSERT(cf_mmvq_quantize(0, d_X, m + 1, n_in, buf, bytes) == 0);
            T_ASSERT(cf_mmvq_matmul(0, &w, buf, m + 1, d_Y, n_out) == 0);
            dev_down(one, d_Y, sizeof(float) * (size_t)(m + 1) * n_out);
            T_ASSERTF(memcmp(one, all, sizeof(float) * (size_t)(m + 1) * n_out) == 0,
                      "%s: %d rows differ from the first %d of %d", quant_info(w.type)->name,
                      m + 1, m + 1, M);
        }
        free(all), free(one), free(X);
        cudaFree(buf), cudaFree(d_Y), cudaFree(d_X), cudaFree((void *)w.data);
        free(hw);
    }
}

/* cf_mmvq_matmul_set: QKV (three weights) and gate/up + GeGLU give the bits of separate
 * cf_mmvq_matmul calls (and cf_geglu), 1 to 8 rows, each type and a set of mixed types. */
static void test_mmvq_set_same_bits(void) {
    cu_need_device();
    const int n_in = 640, n_out[3] = {96, 40, 40}, M = CF_MMVQ_MAX_ROWS;
    float *X = make_x(M, n_in);
    float *d_X = dev_up(X, sizeof(float) * (size_t)M * n_in);
    float *d_Y[3], *d_Z = dev_alloc(sizeof(float) * (size_t)M * 96);
    float *ys = cu_xmalloc(sizeof(float) * (size_t)M * 96), *yf = cu_xmalloc(sizeof(float) * M * 96);
    for (int i = 0; i < 3; i++)
        d_Y[i] = dev_alloc(sizeof(float) * (size_t)M * n_out[i]);
    /* each type alone, then a set of three types (as the bundled model's Q5_0/Q5_0/Q8_0) */
    static const uint32_t mixed[3] = {QT_Q5_0, QT_Q4_1, QT_Q8_0};
    for (int t = 0; t <= N_MMVQ_TYPES; t++) {
        void *host[3];
        struct cf_weight w[3];
        for (int i = 0; i < 3; i++)
            w[i] = dev_weight(t < N_MMVQ_TYPES ? kMmvqTypes[t] : mixed[i], n_in, n_out[i],
                              &host[i]);
        const struct cf_weight *wp[3] = {&w[0], &w[1], &w[2]};
        const char *tn = t < N_MMVQ_TYPES ? quant_info(kMmvqTypes[t])->name : "mixed";
        for (int m = 1; m <= M; m++) {
            size_t bytes = 0;
            void *buf = dev_quant(d_X, m, n_in, &bytes);
            T_ASSERT(cf_mmvq_matmul_set(0, wp, 3, buf, m, d_Y, n_out, 0) == 0);
            for (int i = 0; i < 3; i++) {
                dev_down(yf, d_Y[i], sizeof(float) * (size_t)m * n_out[i]);
                T_ASSERT(cf_mmvq_matmul(0, &w[i], buf, m, d_Z, n_out[i]) == 0);
                dev_down(ys, d_Z, sizeof(float) * (size_t)m * n_out[i]);
                T_ASSERTF(memcmp(ys, yf, sizeof(float) * (size_t)m * n_out[i]) == 0,
                          "%s: weight %d of the set differs from its own matmul (M=%d)", tn, i, m);
            }
            const struct cf_weight *gu[2] = {&w[1], &w[2]};
            float *yg[2] = {d_Y[0], NULL};
            const int ldg[2] = {40, 0};
            T_ASSERT(cf_mmvq_matmul_set(0, gu, 2, buf, m, yg, ldg, 1) == 0);
            dev_down(yf, d_Y[0], sizeof(float) * (size_t)m * 40);
            T_ASSERT(cf_mmvq_matmul(0, &w[1], buf, m, d_Z, 40) == 0);
            T_ASSERT(cf_mmvq_matmul(0, &w[2], buf, m, d_Y[1], 40) == 0);
            T_ASSERT(cf_geglu(0, d_Z, 40, d_Y[1], 40, 40, m) == 0);
            dev_down(ys, d_Z, sizeof(float) * (size_t)m * 40);
            T_ASSERTF(memcmp(ys, yf, sizeof(float) * (size_t)m * 40) == 0,
                      "%s: fused gate/up/GeGLU differs from matmuls + cf_geglu (M=%d)", tn, m);
            cudaFree(buf);
        }
        for (int i = 0; i < 3; i++) {
            cudaFree((void *)w[i].data);
            free(host[i]);
        }
    }
    for (int i = 0; i < 3; i++)
        cudaFree(d_Y[i]);
    cudaFree(d_X), cudaFree(d_Z);
    free(X), free(ys), free(yf);
}

#endif /* GEMMAD_CUDA */

#define CF_CASE(f) T_CASE(f),
int main(int argc, char **argv) {
    static const struct t_case cases[] = {MMVQ_TESTS(CF_CASE){0}};
    return t_main(argc, argv, cases);
}
