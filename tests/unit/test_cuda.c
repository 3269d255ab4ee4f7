/*
 * test_cuda — the CUDA kernels against scalar references (the forward pass end to end is
 * test_cuda_fwd.c).
 *
 * Kernels: every weight format's dequantization and matmul (kernel and cuBLAS paths) against
 * the quant _ref decoders with a normalised error bound, and the kernel path's batch
 * invariance (bit-identical rows whatever M); RMS norm, NEOX RoPE, GeGLU, softcap and the
 * paged-KV attention (FULL tables and SWA rings, GQA, window, softcap) against scalar
 * references written here.
 *
 * Without a CUDA build every case says SKIP ("built without CUDA"); with one but no usable
 * device, SKIP with the runtime's reason. Skips never count as passes. Synthetic models are
 * read from $GEMMAD_TEST_SYNTH_DIR (default build/synthetic; written by
 * tests/fixtures/synthetic/gen_synthetic.py --out DIR).
 */
#include "tests/unit/harness.h"

#define CUDA_TESTS(X)                                                                              \
    X(test_fallback_without_device)                                                                \
    X(test_dequant_host_vs_ref)                                                                    \
    X(test_dequant_vs_ref)                                                                         \
    X(test_matmul_vs_ref)                                                                          \
    X(test_matmul_batch_invariant)                                                                 \
    X(test_matmul_set_same_bits)                                                                   \
    X(test_norm_rope_act)                                                                          \
    X(test_norm_rope_same_bits)                                                                    \
    X(test_attention_vs_ref)                                                                       \
    X(test_attention_real_shapes)

#ifndef GEMMAD_CUDA

#define CF_SKIP_CASE(f)                                                                            \
    static void f(void) {                                                                          \
        T_SKIP("built without CUDA (make CUDA=1)");                                                \
    }
CUDA_TESTS(CF_SKIP_CASE)

#else /* GEMMAD_CUDA */

#include <stdint.h>

#include "engine/cuda/cuda_act.h"
#include "engine/cuda/cuda_attn.h"
#include "engine/cuda/cuda_getrows.h"
#include "engine/cuda/cuda_matmul.h"
#include "engine/cuda/cuda_norm.h"
#include "engine/cuda/cuda_probe.h"
#include "engine/cuda/cuda_rope.h"
#include "engine/forward.h"
#include "engine/kernels/kern.h"
#include "engine/kernels/quant.h"
#include "engine/kvstore.h"
#include "engine/model.h"
#include "engine/tokenizer.h"
#include "tests/unit/cuda_test_util.h"

#include "tests/unit/cuda_dev_util.h"

/* ---- no device: the fallback ------------------------------------------------------------ */

/* Runs everywhere in a CUDA build: AUTO picks CUDA exactly when a device is usable, and an
 * explicit CUDA request without a device fails with the reason. */
static void test_fallback_without_device(void) {
    struct model *m = cu_load_model(t_model_path());
    struct kvstore_pool *kv = NULL;
    char err[512] = "", why[256] = "";
    T_ASSERT(kvstore_create(m, KVSTORE_F16, 16, 4, kvstore_swa_ring_blocks(m, 16, 4), &kv, err, sizeof err) ==
             0);
    const int have = fwd_device_available(FWD_DEVICE_CUDA, why, sizeof why);
    T_ASSERTF(why[0] != 0, "fwd_device_available gave no reason");
    struct fwd_opts o = {.max_tokens = 4,
                         .max_seqs = 1,
                         .max_logit_rows = 1,
                         .n_threads = 1,
                         .device = FWD_DEVICE_AUTO};
    struct fwd_ctx *f = NULL;
    T_ASSERTF(fwd_create(m, kv, &o, &f, err, sizeof err) == 0, "AUTO: %s", err);
    T_ASSERTF(fwd_device(f) == (have ? FWD_DEVICE_CUDA : FWD_DEVICE_CPU),
              "AUTO chose %d with fwd_device_available = %d (%s)", (int)fwd_device(f), have, why);
    fwd_destroy(f);
    f = NULL;
    o.device = FWD_DEVICE_CUDA;
    int rc = fwd_create(m, kv, &o, &f, err, sizeof err);
    if (have) {
        T_ASSERTF(rc == 0 && fwd_device(f) == FWD_DEVICE_CUDA, "CUDA: %s", err);
        fwd_destroy(f);
    } else {
        T_ASSERT(rc != 0 && f == NULL);
        T_ASSERTF(err[0] != 0, "no message for a missing device");
        printf("    no device, as expected: %s\n", err);
    }
    kvstore_destroy(kv);
    model_free(m);
}

/* ---- kernels ---------------------------------------------------------------------------- */

/* Runs without a device: the kernels' decoders (compiled for the host from the same template)
 * against the quant _ref functions, for every supported type. */
static void test_dequant_host_vs_ref(void) {
    const int n_in = 768, n_out = 3;
    float y[32];
    for (int t = 0; t < N_TYPES; t++) {
        size_t rb = 0;
        uint8_t *rows = make_rows(kTypes[t], n_in, n_out, &rb);
        float *ref = ref_dequant(kTypes[t], rows, n_in, n_out);
        for (int r = 0; r < n_out; r++)
            for (int c = 0; c < n_in / 32; c++) {
                T_ASSERT(cf_dequant_chunk_host(kTypes[t], rows + (size_t)r * rb, c, y) == 0);
                const float *want = ref + (size_t)r * n_in + (size_t)c * 32;
                double e = cu_norm_err(y, want, 32);
                T_ASSERTF(e <= 1e-6, "%s row %d chunk %d: normalised error %g",
                          quant_info(kTypes[t])->name, r, c, e);
            }
        free(rows);
        free(ref);
    }
    T_ASSERT(cf_dequant_chunk_host(QT_Q2_K, NULL, 0, y) == -1);
    T_ASSERT(!cf_type_supported(QT_Q3_K) && cf_type_supported(QT_Q6_K));
}

static void test_dequant_vs_ref(void) {
    cu_need_device();
    const int n_in = 512, n_out = 7;
    const int32_t ids[3] = {5, 0, 3};
    int32_t *d_ids = dev_up(ids, sizeof ids);
    float *d_out = dev_alloc(sizeof(float) * (size_t)n_in * n_out);
    float *out = cu_xmalloc(sizeof(float) * (size_t)n_in * n_out);
    for (int t = 0; t < N_TYPES; t++) {
        void *host;
        struct cf_weight w = dev_weight(kTypes[t], n_in, n_out, &host);
        float *ref = ref_dequant(kTypes[t], host, n_in, n_out);
        T_ASSERT(cf_get_rows(0, &w, NULL, n_out, 1.0f, d_out, n_in) == 0);
        dev_down(out, d_out, sizeof(float) * (size_t)n_in * n_out);
        double e = cu_norm_err(out, ref, (size_t)n_in * n_out);
        T_ASSERTF(e <= 1e-6, "%s dequant: normalised error %g", quant_info(kTypes[t])->name, e);
        /* embedding form: selected rows, scaled */
        T_ASSERT(cf_get_rows(0, &w, d_ids, 3, 2.5f, d_out, n_in) == 0);
        dev_down(out, d_out, sizeof(float) * (size_t)n_in * 3);
        float *sel = cu_xmalloc(sizeof(float) * (size_t)n_in * 3);
        for (int r = 0; r < 3; r++)
            for (int i = 0; i < n_in; i++)
                sel[(size_t)r * n_in + i] = ref[(size_t)ids[r] * n_in + i] * 2.5f;
        e = cu_norm_err(out, sel, (size_t)n_in * 3);
        free(sel);
        T_ASSERTF(e <= 1e-6, "%s get_rows: normalised error %g", quant_info(kTypes[t])->name, e);
        cudaFree((void *)w.data);
        free(host);
        free(ref);
    }
    cudaFree(d_ids);
    cudaFree(d_out);
    free(out);
}

/* Y = X Wᵀ in double from the reference dequantization. */
static void test_matmul_vs_ref(void) {
    cu_need_device();
    const int n_in = 1280, n_out = 37; /* two k-tiles, a partial block of warps */
    const int Ms[] = {1, 2, 3, 5, 8, 13, 70};
    const int maxM = 70;
    cublasHandle_t blas;
    T_ASSERT(cublasCreate(&blas) == CUBLAS_STATUS_SUCCESS);
    float *X = cu_xmalloc(sizeof(float) * (size_t)maxM * n_in);
    for (size_t i = 0; i < (size_t)maxM * n_in; i++)
        X[i] = frand();
    float *d_X = dev_up(X, sizeof(float) * (size_t)maxM * n_in);
    float *d_Y = dev_alloc(sizeof(float) * (size_t)maxM * n_out);
    float *Y = cu_xmalloc(sizeof(float) * (size_t)maxM * n_out);
    for (int t = 0; t < N_TYPES; t++) {
        void *host;
        struct cf_weight w = dev_weight(kTypes[t], n_in, n_out, &host);
        float *W = ref_dequant(kTypes[t], host, n_in, n_out);
        float *R = ref_matmul(W, X, n_in, n_out, maxM);
        const size_t sb = cf_matmul_scratch_bytes(&w, maxM);
        void *scratch = dev_alloc(sb);
        for (size_t k = 0; k < sizeof Ms / sizeof Ms[0]; k++) {
            const int M = Ms[k];
            T_ASSERT(cf_matmul(0, NULL, &w, d_X, M, d_Y, n_out, CF_MM_KERNEL, NULL, 0) == 0);
            dev_down(Y, d_Y, sizeof(float) * (size_t)M * n_out);
            double e = cu_norm_err(Y, R, (size_t)M * n_out);
            T_ASSERTF(e <= 2e-6, "%s kernel M=%d: normalised error %g", quant_info(kTypes[t])->name,
                      M, e);
            T_ASSERT(cf_matmul(0, blas, &w, d_X, M, d_Y, n_out, CF_MM_CUBLAS, scratch, sb) == 0);
            dev_down(Y, d_Y, sizeof(float) * (size_t)M * n_out);
            e = cu_norm_err(Y, R, (size_t)M * n_out);
            /* fp16 activations (bf16 for BF16 weights): a few parts in 1e3 */
            T_ASSERTF(e <= (kTypes[t] == QT_BF16 ? 2e-2 : 5e-3), "%s cuBLAS M=%d: error %g",
                      quant_info(kTypes[t])->name, M, e);
        }
        cudaFree(scratch);
        cudaFree((void *)w.data);
        free(host);
        free(W);
        free(R);
    }
    cublasDestroy(blas);
    cudaFree(d_X);
    cudaFree(d_Y);
    free(X);
    free(Y);
}

/* The kernel path: row m of an M-row product is bit-identical to the 1-row product. */
static void test_matmul_batch_invariant(void) {
    cu_need_device();
    const int n_in = 2048, n_out = 300, M = 45;
    float *X = cu_xmalloc(sizeof(float) * (size_t)M * n_in);
    for (size_t i = 0; i < (size_t)M * n_in; i++)
        X[i] = frand();
    float *d_X = dev_up(X, sizeof(float) * (size_t)M * n_in);
    float *d_Y = dev_alloc(sizeof(float) * (size_t)M * n_out);
    float *Yb = cu_xmalloc(sizeof(float) * (size_t)M * n_out);
    float *Ys = cu_xmalloc(sizeof(float) * (size_t)n_out);
    const uint32_t types[] = {QT_Q8_0, QT_Q5_0, QT_Q4_K, QT_Q6_K, QT_F16};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        void *host;
        struct cf_weight w = dev_weight(types[t], n_in, n_out, &host);
        T_ASSERT(cf_matmul(0, NULL, &w, d_X, M, d_Y, n_out, CF_MM_KERNEL, NULL, 0) == 0);
        dev_down(Yb, d_Y, sizeof(float) * (size_t)M * n_out);
        for (int m = 0; m < M; m += 4) {
            for (int sub = 1; sub <= 3; sub++) { /* 1, 2 and 3 rows starting at m */
                if (m + sub > M) break;
                T_ASSERT(cf_matmul(0, NULL, &w, d_X + (size_t)m * n_in, sub, d_Y, n_out,
                                   CF_MM_KERNEL, NULL, 0) == 0);
                dev_down(Ys, d_Y, sizeof(float) * (size_t)n_out);
                T_ASSERTF(memcmp(Ys, Yb + (size_t)m * n_out, sizeof(float) * n_out) == 0,
                          "%s: row %d differs between M=%d and M=%d", quant_info(types[t])->name, m,
                          M, sub);
            }
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

static void ref_rms(float *y, const float *x, const float *w, const float *res, int n, float eps) {
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)(x[i] * x[i]);
    const float scale = 1.0f / sqrtf((float)(s / n) + eps);
    for (int i = 0; i < n; i++) {
        float v = x[i] * scale;
        if (w) v = v * w[i];
        y[i] = res ? res[i] + v : v;
    }
}

static void test_norm_rope_act(void) {
    cu_need_device();
    const int rows = 5, n = 640, nh = 3, hd = 128, n_rot = 96;
    const size_t N = (size_t)rows * n;
    float *x = cu_xmalloc(N * 4), *w = cu_xmalloc((size_t)n * 4), *res = cu_xmalloc(N * 4);
    float *y = cu_xmalloc(N * 4), *r = cu_xmalloc(N * 4);
    for (size_t i = 0; i < N; i++)
        x[i] = 3.0f * frand(), res[i] = frand();
    for (int i = 0; i < n; i++)
        w[i] = 1.0f + frand();
    float *dx = dev_up(x, N * 4), *dw = dev_up(w, (size_t)n * 4), *dres = dev_up(res, N * 4);
    float *dy = dev_alloc(N * 4);

    /* RMS norm: weighted, weightless, with residual */
    T_ASSERT(cf_rms_norm(0, dx, n, dw, NULL, 0, dy, n, n, rows, 1e-6f) == 0);
    dev_down(y, dy, N * 4);
    for (int i = 0; i < rows; i++)
        ref_rms(r + (size_t)i * n, x + (size_t)i * n, w, NULL, n, 1e-6f);
    T_ASSERTF(cu_norm_err(y, r, N) <= 1e-6, "rms_norm: %g", cu_norm_err(y, r, N));
    T_ASSERT(cf_rms_norm(0, dx, n, NULL, dres, n, dy, n, n, rows, 1e-6f) == 0);
    dev_down(y, dy, N * 4);
    for (int i = 0; i < rows; i++)
        ref_rms(r + (size_t)i * n, x + (size_t)i * n, NULL, res + (size_t)i * n, n, 1e-6f);
    T_ASSERTF(cu_norm_err(y, r, N) <= 1e-6, "rms_norm+res: %g", cu_norm_err(y, r, N));

    /* RoPE NEOX with partial rotation and frequency divisors, positions up to 30000 */
    const int32_t pos[5] = {0, 1, 17, 511, 30000};
    float fd[48];
    for (int i = 0; i < n_rot / 2; i++)
        fd[i] = i < 16 ? 1.0f : 1e30f;
    int32_t *dpos = dev_up(pos, sizeof pos);
    float *dfd = dev_up(fd, sizeof fd);
    const int ld = nh * hd;
    for (int variant = 0; variant < 2; variant++) {
        const float base = variant ? 1e6f : 1e4f, fs = variant ? 0.125f : 1.0f;
        const float *div = variant ? fd : NULL;
        T_ASSERT(cudaMemcpy(dy, x, (size_t)rows * ld * 4, cudaMemcpyHostToDevice) == 0);
        T_ASSERT(cf_rope_neox(0, dy, ld, nh, hd, n_rot, dpos, rows, base, fs,
                              variant ? dfd : NULL) == 0);
        dev_down(y, dy, (size_t)rows * ld * 4);
        memcpy(r, x, (size_t)rows * ld * 4);
        const float ts = powf(base, -2.0f / (float)n_rot);
        for (int row = 0; row < rows; row++)
            for (int h = 0; h < nh; h++) {
                float *v = r + (size_t)row * ld + (size_t)h * hd;
                float theta = (float)pos[row];
                for (int i = 0; i < n_rot / 2; i++) {
                    const float th = fs * (theta / (div ? div[i] : 1.0f));
                    const float c = cosf(th), s = sinf(th);
                    const float x0 = v[i], x1 = v[i + n_rot / 2];
                    v[i] = x0 * c - x1 * s;
                    v[i + n_rot / 2] = x0 * s + x1 * c;
                    theta *= ts;
                }
            }
        /* cos/sin of the same f32 angle may differ by an ulp between libm and CUDA */
        double e = cu_norm_err(y, r, (size_t)rows * ld);
        T_ASSERTF(e <= 1e-5, "rope variant %d: %g", variant, e);
    }

    /* GeGLU (with a strided second operand), softcap, scale, add, gather */
    const int nf = 200;
    T_ASSERT(cudaMemcpy(dy, x, N * 4, cudaMemcpyHostToDevice) == 0);
    T_ASSERT(cf_geglu(0, dy, n, dres, n, nf, rows) == 0);
    dev_down(y, dy, N * 4);
    memcpy(r, x, N * 4);
    for (int row = 0; row < rows; row++)
        for (int i = 0; i < nf; i++)
            r[(size_t)row * n + i] = cu_ref_gelu(x[(size_t)row * n + i]) * res[(size_t)row * n + i];
    T_ASSERTF(cu_norm_err(y, r, N) <= 1e-3, "geglu: %g", cu_norm_err(y, r, N));

    T_ASSERT(cudaMemcpy(dy, x, N * 4, cudaMemcpyHostToDevice) == 0);
    T_ASSERT(cf_softcap(0, dy, N, 2.0f) == 0);
    dev_down(y, dy, N * 4);
    for (size_t i = 0; i < N; i++)
        r[i] = 2.0f * tanhf(x[i] * 0.5f);
    T_ASSERTF(cu_norm_err(y, r, N) <= 1e-6, "softcap: %g", cu_norm_err(y, r, N));

    T_ASSERT(cf_add_scale(0, dy, dx, dres, N, 0.5f) == 0);
    dev_down(y, dy, N * 4);
    for (size_t i = 0; i < N; i++)
        r[i] = (x[i] + res[i]) * 0.5f;
    T_ASSERT(memcmp(y, r, N * 4) == 0);

    const int32_t idx[2] = {4, 1};
    int32_t *didx = dev_up(idx, sizeof idx);
    T_ASSERT(cf_gather_rows(0, dx, n, didx, 2, n, dy, n) == 0);
    dev_down(y, dy, (size_t)2 * n * 4);
    T_ASSERT(memcmp(y, x + (size_t)4 * n, (size_t)n * 4) == 0);
    T_ASSERT(memcmp(y + n, x + (size_t)1 * n, (size_t)n * 4) == 0);

    cudaFree(dx), cudaFree(dw), cudaFree(dres), cudaFree(dy), cudaFree(dpos), cudaFree(dfd);
    cudaFree(didx);
    free(x), free(w), free(res), free(y), free(r);
}

/* cf_matmul_set (QKV in one launch; gate, up and GeGLU in one launch) gives exactly the bits
 * of the separate kernel-path matmuls (and cf_geglu), for 1 to 13 rows and a short last
 * k-tile. */
static void test_matmul_set_same_bits(void) {
    cu_need_device();
    const int n_in = 1280, n_out[3] = {96, 40, 40}, M = 13;
    float *X = cu_xmalloc(sizeof(float) * (size_t)M * n_in);
    for (size_t i = 0; i < (size_t)M * n_in; i++)
        X[i] = 2.0f * frand();
    float *d_X = dev_up(X, sizeof(float) * (size_t)M * n_in);
    float *d_Y[3], *d_Z = dev_alloc(sizeof(float) * (size_t)M * 96);
    float *ys = cu_xmalloc(sizeof(float) * (size_t)M * 96), *yf = cu_xmalloc(sizeof(float) * M * 96);
    for (int i = 0; i < 3; i++)
        d_Y[i] = dev_alloc(sizeof(float) * (size_t)M * n_out[i]);
    const uint32_t types[] = {QT_Q5_0, QT_Q8_0, QT_Q4_K, QT_Q6_K, QT_F32};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        void *host[3];
        struct cf_weight w[3];
        for (int i = 0; i < 3; i++)
            w[i] = dev_weight(types[t], n_in, n_out[i], &host[i]);
        const struct cf_weight *wp[3] = {&w[0], &w[1], &w[2]};
        const char *tn = quant_info(types[t])->name;
        for (int m = 1; m <= M; m += 4) {
            /* QKV: the set against each weight alone */
            T_ASSERT(cf_matmul_set(0, wp, 3, d_X, m, d_Y, n_out, 0) == 0);
            for (int i = 0; i < 3; i++) {
                dev_down(yf, d_Y[i], sizeof(float) * (size_t)m * n_out[i]);
                T_ASSERT(cf_matmul(0, NULL, &w[i], d_X, m, d_Z, n_out[i], CF_MM_KERNEL, NULL,
                                   0) == 0);
                dev_down(ys, d_Z, sizeof(float) * (size_t)m * n_out[i]);
                T_ASSERTF(memcmp(ys, yf, sizeof(float) * (size_t)m * n_out[i]) == 0,
                          "%s: weight %d of the set differs from its own matmul (M=%d)", tn, i, m);
            }
            /* gate/up/GeGLU (weights 1 and 2: same n_out) against matmuls + cf_geglu */
            const struct cf_weight *gu[2] = {&w[1], &w[2]};
            float *yg[2] = {d_Y[0], NULL};
            const int ldg[2] = {40, 0};
            T_ASSERT(cf_matmul_set(0, gu, 2, d_X, m, yg, ldg, 1) == 0);
            dev_down(yf, d_Y[0], sizeof(float) * (size_t)m * 40);
            T_ASSERT(cf_matmul(0, NULL, &w[1], d_X, m, d_Z, 40, CF_MM_KERNEL, NULL, 0) == 0);
            T_ASSERT(cf_matmul(0, NULL, &w[2], d_X, m, d_Y[1], 40, CF_MM_KERNEL, NULL, 0) == 0);
            T_ASSERT(cf_geglu(0, d_Z, 40, d_Y[1], 40, 40, m) == 0);
            dev_down(ys, d_Z, sizeof(float) * (size_t)m * 40);
            T_ASSERTF(memcmp(ys, yf, sizeof(float) * (size_t)m * 40) == 0,
                      "%s: fused gate/up/GeGLU differs from matmuls + cf_geglu (M=%d)", tn, m);
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

/* cf_norm_rope (q/k norm and RoPE in one launch) gives exactly the bits of cf_rms_norm over
 * the heads followed by cf_rope_neox, with and without rope_freqs divisors, n_rot < hd; and
 * cf_post_norm_next those of its two cf_rms_norm calls. */
static void test_norm_rope_same_bits(void) {
    cu_need_device();
    const int rows = 5, nh = 4, hd = 256, ld = nh * hd;
    float *x = cu_xmalloc(sizeof(float) * (size_t)rows * ld), *w = cu_xmalloc(sizeof(float) * hd);
    float *fd = cu_xmalloc(sizeof(float) * hd / 2);
    float *a = cu_xmalloc(sizeof(float) * (size_t)rows * ld), *b = cu_xmalloc(sizeof(float) * rows * ld);
    for (int i = 0; i < rows * ld; i++)
        x[i] = 3.0f * frand();
    for (int i = 0; i < hd; i++)
        w[i] = 1.0f + 0.5f * frand();
    for (int i = 0; i < hd / 2; i++)
        fd[i] = 1.0f + (float)(i % 7);
    const int32_t pos[5] = {0, 1, 77, 4095, 30000};
    float *dx = dev_up(x, sizeof(float) * (size_t)rows * ld), *dw = dev_up(w, sizeof(float) * hd);
    float *dfd = dev_up(fd, sizeof(float) * hd / 2);
    int32_t *dpos = dev_up(pos, sizeof pos);
    float *d1 = dev_alloc(sizeof(float) * (size_t)rows * ld);
    const int rots[2] = {hd, hd / 2};
    for (int v = 0; v < 4; v++) {
        const int n_rot = rots[v & 1];
        const float *div = v & 2 ? dfd : NULL;
        T_ASSERT(cudaMemcpy(d1, dx, sizeof(float) * (size_t)rows * ld, cudaMemcpyDeviceToDevice) ==
                 cudaSuccess);
        T_ASSERT(cf_rms_norm(0, d1, hd, dw, NULL, 0, d1, hd, hd, rows * nh, 1e-6f) == 0);
        T_ASSERT(cf_rope_neox(0, d1, ld, nh, hd, n_rot, dpos, rows, 10000.0f, 0.5f, div) == 0);
        dev_down(a, d1, sizeof(float) * (size_t)rows * ld);
        T_ASSERT(cudaMemcpy(d1, dx, sizeof(float) * (size_t)rows * ld, cudaMemcpyDeviceToDevice) ==
                 cudaSuccess);
        T_ASSERT(cf_norm_rope(0, d1, ld, nh, hd, dw, 1e-6f, n_rot, dpos, rows, 10000.0f, 0.5f,
                              div) == 0);
        dev_down(b, d1, sizeof(float) * (size_t)rows * ld);
        T_ASSERTF(memcmp(a, b, sizeof(float) * (size_t)rows * ld) == 0,
                  "norm + RoPE in one launch differs (n_rot %d, divisors %d)", n_rot, v >> 1);
    }
    /* cf_post_norm_next: x += RMS(t) * w, h = RMS(x) * w against two cf_rms_norm calls */
    float *dt = dev_up(x + hd, sizeof(float) * (size_t)rows * hd);
    float *dh = dev_alloc(sizeof(float) * (size_t)rows * hd);
    T_ASSERT(cudaMemcpy(d1, dx, sizeof(float) * (size_t)rows * hd, cudaMemcpyDeviceToDevice) ==
             cudaSuccess);
    T_ASSERT(cf_rms_norm(0, dt, hd, dw, d1, hd, d1, hd, hd, rows, 1e-6f) == 0);
    T_ASSERT(cf_rms_norm(0, d1, hd, dw, NULL, 0, dh, hd, hd, rows, 1e-6f) == 0);
    dev_down(a, d1, sizeof(float) * (size_t)rows * hd);
    dev_down(a + rows * hd, dh, sizeof(float) * (size_t)rows * hd);
    T_ASSERT(cudaMemcpy(d1, dx, sizeof(float) * (size_t)rows * hd, cudaMemcpyDeviceToDevice) ==
             cudaSuccess);
    T_ASSERT(cf_post_norm_next(0, dt, hd, dw, d1, hd, dw, dh, hd, hd, rows, 1e-6f) == 0);
    dev_down(b, d1, sizeof(float) * (size_t)rows * hd);
    dev_down(b + rows * hd, dh, sizeof(float) * (size_t)rows * hd);
    T_ASSERTF(memcmp(a, b, sizeof(float) * (size_t)2 * rows * hd) == 0,
              "post-norm residual + next norm in one launch differs from two norms");
    cudaFree(dt), cudaFree(dh);
    cudaFree(dx), cudaFree(dw), cudaFree(dfd), cudaFree(dpos), cudaFree(d1);
    free(x), free(w), free(fd), free(a), free(b);
}

/* ---- attention -------------------------------------------------------------------------- */

#define AT_SEQS 2

/* One attention configuration. Every sequence first prefills `start` positions in chunks of
 * `chunk` rows (only every 97th row and each chunk's last are checked: the reference costs
 * positions x head dim per row), then runs a fixed mix of short prefill and decode steps. */
struct at_case {
    int n_head, n_kv, hd, hdv, bs;
    int ring, window; /* SWA ring storage; sliding window (0: none) */
    float cap;        /* attention softcap (0: none) */
    int start, chunk;
};

/* Host truth: every sequence's keys/values by position, already rounded to fp16. */
struct at_ref {
    int n_kv, hd, hdv, maxpos;
    float *k, *v; /* [AT_SEQS][maxpos][n_kv * hd], [AT_SEQS][maxpos][n_kv * hdv] */
    double *s;    /* [maxpos] scores scratch */
};

static float *at_k(const struct at_ref *R, int seq, int p) {
    return R->k + ((size_t)seq * R->maxpos + p) * (size_t)(R->n_kv * R->hd);
}
static float *at_v(const struct at_ref *R, int seq, int p) {
    return R->v + ((size_t)seq * R->maxpos + p) * (size_t)(R->n_kv * R->hdv);
}

static float r16(float x) {
    return quant_f16_to_f32(quant_f32_to_f16(x));
}

static void ref_attend(const struct at_ref *R, int seq, int p, const float *q, int n_head,
                       float scale, float cap, int window, float *out) {
    const int g = n_head / R->n_kv, lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
    double *s = R->s;
    for (int h = 0; h < n_head; h++) {
        const int kh = h / g;
        float qr[512]; /* q rounded to fp16 after the scale, as the kernel and the CPU do */
        T_ASSERT(R->hd <= 512);
        for (int i = 0; i < R->hd; i++)
            qr[i] = r16(q[h * R->hd + i] * scale);
        double mx = -INFINITY;
        for (int j = lo; j <= p; j++) {
            const float *kj = at_k(R, seq, j) + kh * R->hd;
            double d = 0;
            for (int i = 0; i < R->hd; i++)
                d += (double)qr[i] * kj[i];
            if (cap > 0) d = cap * tanh(d / cap);
            s[j] = d;
            if (d > mx) mx = d;
        }
        /* one exp per key, then the values row by row (the order of a double sum over at
         * most a few thousand terms does not matter at the 1e-5 bound) */
        double l = 0, o[512] = {0};
        T_ASSERT(R->hdv <= 512);
        for (int j = lo; j <= p; j++) {
            const double w = exp(s[j] - mx);
            const float *vj = at_v(R, seq, j) + kh * R->hdv;
            l += w;
            for (int i = 0; i < R->hdv; i++)
                o[i] += w * vj[i];
        }
        for (int i = 0; i < R->hdv; i++)
            out[h * R->hdv + i] = (float)(o[i] / l);
    }
}

/*
 * Two sequences over many steps (long prefill chunks, short chunks, single-token decodes)
 * on a FULL layout or an SWA ring with shuffled block ids, each step writing its rows with
 * cf_kv_store and attending with cf_attention; rows are compared with ref_attend over the
 * host truth (normalised error <= 1e-5).
 */
static void run_attention_case(const struct at_case *C) {
    static const int tail[][2] = {{12, 3}, {5, 9}, {1, 1}, {1, 0}, {0, 1}, {10, 12}, {1, 1}};
    const int n_tail = (int)(sizeof tail / sizeof tail[0]);
    const int n_head = C->n_head, n_kv = C->n_kv, hd = C->hd, hdv = C->hdv, bs = C->bs;
    const float scale = 1.0f / sqrtf((float)hd);
    int tail_len = 0;
    for (int i = 0; i < n_tail; i++) tail_len += tail[i][0] > tail[i][1] ? tail[i][0] : tail[i][1];
    const int maxpos = C->start + tail_len + 1;
    const int MAXR = C->chunk > 16 ? C->chunk : 16; /* most rows of one step, per sequence */
    struct at_ref R = {n_kv, hd, hdv, maxpos, NULL, NULL, NULL};
    R.k = cu_xmalloc((size_t)AT_SEQS * maxpos * n_kv * hd * sizeof(float));
    R.v = cu_xmalloc((size_t)AT_SEQS * maxpos * n_kv * hdv * sizeof(float));
    R.s = cu_xmalloc((size_t)maxpos * sizeof(double));

    /* tables: FULL: enough blocks per sequence for maxpos; ring: the size fwd requires for
     * steps of up to MAXR rows. Block ids are shuffled across both sequences. */
    const int per_seq = C->ring ? (C->window + MAXR - 2) / bs + 2 : (maxpos + bs - 1) / bs;
    const int n_blocks = AT_SEQS * per_seq;
    int32_t *tables = cu_xmalloc((size_t)n_blocks * sizeof(int32_t));
    int mult = 7; /* coprime with n_blocks, so i -> i * mult + 3 is a permutation */
    for (;;) {
        int a = mult, b = n_blocks;
        while (b) {
            const int t = a % b;
            a = b, b = t;
        }
        if (a == 1) break;
        mult += 2;
    }
    for (int i = 0; i < n_blocks; i++)
        tables[i] = (int32_t)(((int64_t)i * mult + 3) % n_blocks); /* a permutation */
    int32_t info[AT_SEQS][4];
    for (int s = 0; s < AT_SEQS; s++) {
        info[s][0] = C->ring ? 0 : s * per_seq, info[s][1] = C->ring ? 0 : per_seq;
        info[s][2] = C->ring ? s * per_seq : 0, info[s][3] = C->ring ? per_seq : 0;
    }
    struct cf_kv kv = {dev_alloc((size_t)n_blocks * bs * n_kv * hd * 2),
                       dev_alloc((size_t)n_blocks * bs * n_kv * hdv * 2),
                       n_kv,
                       hd,
                       hdv,
                       bs,
                       C->ring};
    int32_t *d_tab = dev_up(tables, (size_t)n_blocks * sizeof(int32_t));
    int32_t *d_info = dev_up(info, sizeof info);
    const int ROWS = AT_SEQS * MAXR;
    int32_t *d_pos = dev_alloc((size_t)ROWS * 4), *d_seq = dev_alloc((size_t)ROWS * 4);
    float *d_q = dev_alloc((size_t)ROWS * n_head * hd * 4),
          *d_o = dev_alloc((size_t)ROWS * n_head * hdv * 4);
    float *d_k = dev_alloc((size_t)ROWS * n_kv * hd * 4),
          *d_v = dev_alloc((size_t)ROWS * n_kv * hdv * 4);
    float *q = cu_xmalloc((size_t)ROWS * n_head * hd * 4), *k = cu_xmalloc((size_t)ROWS * n_kv * hd * 4);
    float *v = cu_xmalloc((size_t)ROWS * n_kv * hdv * 4), *o = cu_xmalloc((size_t)ROWS * n_head * hdv * 4);
    float *ro = cu_xmalloc((size_t)n_head * hdv * 4);
    int32_t *pos = cu_xmalloc((size_t)ROWS * 4), *seq = cu_xmalloc((size_t)ROWS * 4);
    /* split partials for 5 rows at the most splits a step uses: steps of more rows run in
     * several launches */
    const int max_split = cf_attn_splits(maxpos, C->window) + 2;
    const size_t n_parts = (size_t)5 * n_head * max_split;
    struct cf_att_scratch sc = {dev_alloc(n_parts * 2 * 4), dev_alloc(n_parts * hdv * 4), n_parts,
                                hdv};

    const int n_pre = (C->start + C->chunk - 1) / (C->chunk > 0 ? C->chunk : 1);
    int next[AT_SEQS] = {0, 0};
    for (int st = 0; st < n_pre + n_tail; st++) {
        int want[AT_SEQS];
        for (int s = 0; s < AT_SEQS; s++) {
            if (st < n_pre) {
                const int left = C->start - next[s];
                want[s] = left < C->chunk ? left : C->chunk;
            } else {
                want[s] = tail[st - n_pre][s];
            }
        }
        int n = 0;
        for (int s = 0; s < AT_SEQS; s++)
            for (int i = 0; i < want[s]; i++, n++)
                seq[n] = s, pos[n] = next[s] + i;
        T_ASSERT(n <= ROWS);
        if (n == 0) continue;
        for (int i = 0; i < n * n_head * hd; i++)
            q[i] = frand();
        for (int i = 0; i < n * n_kv * hd; i++)
            k[i] = 2.0f * frand();
        for (int i = 0; i < n * n_kv * hdv; i++)
            v[i] = frand();
        for (int r = 0; r < n; r++) {
            T_ASSERT(pos[r] < maxpos);
            for (int i = 0; i < n_kv * hd; i++)
                at_k(&R, seq[r], pos[r])[i] = r16(k[r * n_kv * hd + i]);
            for (int i = 0; i < n_kv * hdv; i++)
                at_v(&R, seq[r], pos[r])[i] = r16(v[r * n_kv * hdv + i]);
        }
        cudaMemcpy(d_pos, pos, (size_t)n * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(d_seq, seq, (size_t)n * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(d_q, q, (size_t)n * n_head * hd * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(d_k, k, (size_t)n * n_kv * hd * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(d_v, v, (size_t)n * n_kv * hdv * 4, cudaMemcpyHostToDevice);
        const struct cf_rows rows = {d_pos, d_seq, d_info, d_tab, n};
        const struct cf_attn A = {n_head, scale, C->cap, C->window};
        /* the splits the step's last position needs, plus 0..2 spare ones (they must change
         * nothing) */
        int pm = 0;
        for (int r = 0; r < n; r++)
            pm = pos[r] > pm ? pos[r] : pm;
        const int n_split = cf_attn_splits(pm, C->window) + st % 3;
        T_ASSERT(n_split <= max_split);
        T_ASSERT(cf_kv_store(0, &rows, &kv, d_k, n_kv * hd, d_v, n_kv * hdv) == 0);
        T_ASSERT(cf_attention(0, &rows, &kv, &A, d_q, n_head * hd, d_o, n_head * hdv, &sc,
                              n_split) == 0);
        dev_down(o, d_o, (size_t)n * n_head * hdv * 4);
        for (int r = 0; r < n; r++) {
            const int last = r + 1 == n || seq[r + 1] != seq[r];
            if (st < n_pre && r % 97 && !last) continue;
            ref_attend(&R, seq[r], pos[r], q + (size_t)r * n_head * hd, n_head, scale, C->cap,
                       C->window, ro);
            double e = cu_norm_err(o + (size_t)r * n_head * hdv, ro, (size_t)n_head * hdv);
            T_ASSERTF(e <= 1e-5,
                      "attention (hd %d/%d, heads %d/%d, block %d, ring %d, window %d, cap %g) "
                      "step %d row %d (seq %d pos %d): normalised error %g",
                      hd, hdv, n_head, n_kv, bs, C->ring, C->window, (double)C->cap, st, r,
                      seq[r], pos[r], e);
        }
        for (int s = 0; s < AT_SEQS; s++)
            next[s] += want[s];
    }
    cudaFree(sc.ml), cudaFree(sc.acc);
    cudaFree(kv.k), cudaFree(kv.v), cudaFree(d_tab), cudaFree(d_info), cudaFree(d_pos);
    cudaFree(d_seq), cudaFree(d_q), cudaFree(d_o), cudaFree(d_k), cudaFree(d_v);
    free(R.k), free(R.v), free(R.s), free(tables), free(q), free(k), free(v), free(o), free(ro);
    free(pos), free(seq);
}

static void test_attention_vs_ref(void) {
    cu_need_device();
    /* small heads and blocks: every step checked */
    const struct at_case small[] = {
        {4, 2, 64, 64, 4, 0, 0, 0.0f, 0, 1}, /* FULL, causal */
        {4, 2, 64, 64, 4, 0, 0, 5.0f, 0, 1}, /* FULL, softcap */
        {4, 2, 64, 64, 4, 0, 7, 0.0f, 0, 1}, /* FULL storage, sliding mask */
        {4, 2, 64, 64, 4, 1, 7, 0.0f, 0, 1}, /* SWA ring */
        {4, 2, 64, 64, 4, 1, 4, 3.0f, 0, 1}, /* SWA ring, window = block size, softcap */
    };
    for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) run_attention_case(&small[i]);
}

/* The shapes the models have: head dim 256 (Gemma 3) and 512 (Gemma 4 global layers),
 * blocks of 16, positions past 4k, Gemma 3's 512-token window on an SWA ring and as a mask
 * over FULL storage, GQA. */
static void test_attention_real_shapes(void) {
    cu_need_device();
    const struct at_case big[] = {
        {4, 1, 256, 256, 16, 0, 0, 0.0f, 4090, 256},   /* Gemma 3 global layer */
        {4, 1, 256, 256, 16, 1, 512, 0.0f, 4090, 256}, /* Gemma 3 local layer (ring) */
        {4, 1, 256, 256, 16, 0, 512, 0.0f, 4090, 256}, /* window over FULL storage */
        {8, 2, 512, 512, 16, 0, 0, 0.0f, 4090, 256},   /* Gemma 4 global layer */
        {8, 2, 512, 512, 16, 1, 512, 30.0f, 4090, 256}, /* hd 512 ring, window, softcap */
    };
    const int quick = getenv("GEMMAD_TEST_QUICK") != NULL; /* sanitizers: past one window */
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        struct at_case c = big[i];
        if (quick) c.start = 700, c.chunk = 128;
        run_attention_case(&c);
    }
}

#endif /* GEMMAD_CUDA */

#define CF_CASE(f) T_CASE(f),
int main(int argc, char **argv) {
    static const struct t_case cases[] = {CUDA_TESTS(CF_CASE){0}};
    return t_main(argc, argv, cases);
}
