/*
 * test_cuda_host — the CUDA backend's host code (engine/cuda/cuda_fwd.c: uploads, buffer
 * layout, step metadata, block tables, the order of operations, Gemma 2/4 extras) run on a
 * machine WITHOUT a GPU, against the CPU forward pass.
 *
 * How: this test binary defines the CUDA runtime calls cuda_fwd.c makes (device memory is
 * host memory, copies are memcpy) and the kernel launchers of engine/cuda/cuda_*.h with plain
 * C implementations of the same contracts (the headers' formulas; the matmul sums in the
 * kernel's lane/chunk order). The executable's definitions take precedence over libcudart's
 * and keep the real launchers out of the link, so cuda_fwd.o runs unchanged. The GPU kernels
 * themselves are checked by test_cuda on a GPU; this checks everything around them, here.
 *
 * It is CUDA-build only (make CUDA=1); otherwise every case says SKIP. Synthetic models come
 * from $GEMMAD_TEST_SYNTH_DIR (default build/synthetic).
 */
#include "tests/unit/harness.h"

#ifndef GEMMAD_CUDA

static void test_host_bundled_vs_cpu(void) {
    T_SKIP("built without CUDA (make CUDA=1)");
}
static void test_host_synthetic_vs_cpu(void) {
    T_SKIP("built without CUDA (make CUDA=1)");
}
static void test_host_fwd_dispatch(void) {
    T_SKIP("built without CUDA (make CUDA=1)");
}
static void test_host_matmul_modes(void) {
    T_SKIP("built without CUDA (make CUDA=1)");
}
static void test_host_kv_type_refused(void) {
    T_SKIP("built without CUDA (make CUDA=1)");
}

#else

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

/* ---- the CUDA runtime, on the host -------------------------------------------------------- */

static char fake_stream, fake_blas;

cudaError_t cudaSetDevice(int device) {
    return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    (void)flags;
    *s = (cudaStream_t)(void *)&fake_stream;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    (void)s;
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    (void)s;
    return cudaSuccess;
}
/* Events: a step's timing is zero on the host. */
static char fake_event;
cudaError_t cudaEventCreate(cudaEvent_t *e) {
    *e = (cudaEvent_t)(void *)&fake_event;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    (void)e, (void)s;
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    (void)a, (void)b;
    *ms = 0.0f;
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    (void)e;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void) {
    return cudaSuccess;
}
const char *cudaGetErrorString(cudaError_t e) {
    return e == cudaSuccess ? "no error" : "error";
}
const char *cudaGetErrorName(cudaError_t e) {
    return e == cudaSuccess ? "cudaSuccess" : "cudaError";
}
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    *free_b = (size_t)16 << 30;
    *total = (size_t)16 << 30;
    return cudaSuccess;
}
/* Fresh device memory is garbage: fill it with NaN patterns so a read before a write shows. */
cudaError_t cudaMalloc(void **p, size_t n) {
    *p = malloc(n ? n : 1);
    if (*p) memset(*p, 0xFF, n);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaMallocHost(void **p, size_t n) {
    return cudaMalloc(p, n);
}
cudaError_t cudaFree(void *p) {
    free(p);
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int v, size_t n) {
    memset(p, v, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k) {
    (void)k;
    memmove(d, s, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k,
                            cudaStream_t st) {
    (void)st;
    return cudaMemcpy(d, s, n, k);
}
cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
    *h = (cublasHandle_t)(void *)&fake_blas;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
    (void)h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
    (void)h, (void)s;
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- the kernels' contracts, on the host ------------------------------------------------ */

int cf_probe(char *why, size_t whylen) {
    if (why && whylen) snprintf(why, whylen, "host emulation (test_cuda_host)");
    return 1;
}

int cf_type_supported(uint32_t type) {
    static const uint32_t ok[] = {QT_F32,  QT_F16,  QT_BF16,   QT_Q4_0, QT_Q4_1, QT_Q5_0,
                                  QT_Q5_1, QT_Q8_0, QT_IQ4_NL, QT_Q4_K, QT_Q5_K, QT_Q6_K};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (ok[i] == type) return 1;
    return 0;
}

/* The same sizes as cuda_matmul.cu (fp16 copy of the weight, fp16 activations). */
size_t cf_matmul_scratch_bytes(const struct cf_weight *w, int M) {
    const size_t wb = w->type == QT_F16 || w->type == QT_BF16 ? 0 : (size_t)w->n_out * w->n_in * 2;
    return wb + (size_t)M * w->n_in * 2;
}

/* What the forward pass asked of cf_matmul: calls by path (KERNEL forced, AUTO with enough
 * cuBLAS scratch, AUTO without), for rows >= CF_MM_CUBLAS_MIN_ROWS and fewer. */
static struct { int kernel, auto_blas, auto_noblas; } mm_seen[2];

static float *row_buf(size_t n) {
    static float *buf;
    static size_t cap;
    if (n > cap) {
        free(buf);
        buf = malloc(n * sizeof(float));
        cap = n;
    }
    return buf;
}

/* Lane l sums chunks l, l+32, … (each chunk sequentially), then the xor butterfly. */
int cf_matmul(cudaStream_t stream, cublasHandle_t blas, const struct cf_weight *w, const float *X,
              int M, float *Y, int ldy, enum cf_mm_mode mode, void *scratch, size_t sb) {
    (void)stream;
    if (w->n_in % 32 || ldy < w->n_out || !cf_type_supported(w->type)) return -1;
    const int big = M >= CF_MM_CUBLAS_MIN_ROWS;
    if (mode == CF_MM_KERNEL)
        mm_seen[big].kernel++;
    else if (blas && scratch && sb >= cf_matmul_scratch_bytes(w, M))
        mm_seen[big].auto_blas++;
    else
        mm_seen[big].auto_noblas++;
    float *wr = row_buf((size_t)w->n_in);
    for (int o = 0; o < w->n_out; o++) {
        if (quant_dequant_row_ref(w->type, (const uint8_t *)w->data + (size_t)o * w->row_bytes, wr,
                                  w->n_in))
            return -1;
        for (int m = 0; m < M; m++) {
            const float *x = X + (size_t)m * w->n_in;
            float lane[32] = {0};
            for (int c = 0; c < w->n_in / 32; c++) {
                float s = 0.0f;
                for (int k = 0; k < 32; k++)
                    s += wr[c * 32 + k] * x[c * 32 + k];
                lane[c % 32] += s;
            }
            for (int off = 16; off > 0; off >>= 1) {
                float t[32];
                for (int l = 0; l < 32; l++)
                    t[l] = lane[l] + lane[l ^ off];
                memcpy(lane, t, sizeof t);
            }
            Y[(size_t)m * ldy + o] = lane[0];
        }
    }
    return 0;
}

int cf_get_rows(cudaStream_t stream, const struct cf_weight *w, const int32_t *ids, int n_rows,
                float scale, float *out, int ld_out) {
    (void)stream;
    for (int r = 0; r < n_rows; r++) {
        const int64_t src = ids ? ids[r] : r;
        float *o = out + (size_t)r * ld_out;
        if (src < 0 || src >= w->n_out ||
            quant_dequant_row_ref(w->type, (const uint8_t *)w->data + (size_t)src * w->row_bytes, o,
                                  w->n_in))
            return -1;
        for (int i = 0; i < w->n_in; i++)
            o[i] = o[i] * scale;
    }
    return 0;
}

int cf_rms_norm(cudaStream_t stream, const float *x, int ld_x, const float *w, const float *res,
                int ld_res, float *y, int ld_y, int n, int rows, float eps) {
    (void)stream;
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * ld_x;
        double s = 0;
        for (int i = 0; i < n; i++)
            s += (double)(xr[i] * xr[i]);
        const float scale = 1.0f / sqrtf((float)(s / n) + eps);
        float *yr = y + (size_t)r * ld_y;
        for (int i = 0; i < n; i++) {
            float v = xr[i] * scale;
            if (w) v = v * w[i];
            if (res) v = res[(size_t)r * ld_res + i] + v;
            yr[i] = v;
        }
    }
    return 0;
}

int cf_rope_neox(cudaStream_t stream, float *x, int ld, int n_heads, int hd, int n_rot,
                 const int32_t *pos, int rows, float base, float freq_scale,
                 const float *freq_div) {
    (void)stream;
    const float ts = powf(base, -2.0f / (float)n_rot);
    const int half = n_rot / 2;
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)r * ld + (size_t)h * hd;
            float theta = (float)pos[r];
            for (int i = 0; i < half; i++) {
                const float th = freq_scale * (theta / (freq_div ? freq_div[i] : 1.0f));
                const float c = cosf(th), s = sinf(th), x0 = v[i], x1 = v[i + half];
                v[i] = x0 * c - x1 * s;
                v[i + half] = x0 * s + x1 * c;
                theta *= ts;
            }
        }
    return 0;
}

int cf_geglu(cudaStream_t stream, float *g, int ld_g, const float *u, int ld_u, int n, int rows) {
    (void)stream;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < n; i++)
            g[(size_t)r * ld_g + i] =
                cu_ref_gelu(g[(size_t)r * ld_g + i]) * u[(size_t)r * ld_u + i];
    return 0;
}

int cf_softcap(cudaStream_t stream, float *x, size_t count, float cap) {
    (void)stream;
    for (size_t i = 0; i < count; i++)
        x[i] = cap * tanhf(x[i] * (1.0f / cap));
    return 0;
}

int cf_scale(cudaStream_t stream, float *x, size_t count, float s) {
    (void)stream;
    for (size_t i = 0; i < count; i++)
        x[i] = x[i] * s;
    return 0;
}

int cf_add_scale(cudaStream_t stream, float *y, const float *a, const float *b, size_t count,
                 float s) {
    (void)stream;
    for (size_t i = 0; i < count; i++)
        y[i] = (a[i] + b[i]) * s;
    return 0;
}

int cf_gather_rows(cudaStream_t stream, const float *x, int ld_x, const int32_t *idx, int n_idx,
                   int n_cols, float *out, int ld_out) {
    (void)stream;
    for (int j = 0; j < n_idx; j++)
        memcpy(out + (size_t)j * ld_out, x + (size_t)idx[j] * ld_x, (size_t)n_cols * 4);
    return 0;
}

static int64_t kv_slot(const struct cf_rows *R, const struct cf_kv *kv, int seq, int p) {
    const int32_t *info = R->seq_info + 4 * seq;
    const int b = p / kv->block_size;
    if (kv->ring)
        T_ASSERT(info[3] > 0);
    else
        T_ASSERTF(b < info[1], "position %d beyond the %d FULL blocks uploaded", p, info[1]);
    const int32_t blk = kv->ring ? R->tables[info[2] + b % info[3]] : R->tables[info[0] + b];
    return (int64_t)blk * kv->block_size + p % kv->block_size;
}

int cf_kv_store(cudaStream_t stream, const struct cf_rows *R, const struct cf_kv *kv,
                const float *k, int ld_k, const float *v, int ld_v) {
    (void)stream;
    const int nk = kv->n_kv * kv->hd, nv = kv->n_kv * kv->hd_v;
    for (int r = 0; r < R->n_rows; r++) {
        const int64_t slot = kv_slot(R, kv, R->seq[r], R->pos[r]);
        uint16_t *kd = (uint16_t *)kv->k + slot * nk, *vd = (uint16_t *)kv->v + slot * nv;
        for (int i = 0; i < nk; i++)
            kd[i] = quant_f32_to_f16(k[(size_t)r * ld_k + i]);
        for (int i = 0; i < nv; i++)
            vd[i] = quant_f32_to_f16(v[(size_t)r * ld_v + i]);
    }
    return 0;
}

int cf_attention(cudaStream_t stream, const struct cf_rows *R, const struct cf_kv *kv,
                 const struct cf_attn *a, const float *q, int ld_q, float *out, int ld_out) {
    (void)stream;
    const int g = a->n_head / kv->n_kv;
    float qs[CF_ATT_MAX_HD], acc[CF_ATT_MAX_HD];
    for (int r = 0; r < R->n_rows; r++) {
        const int p = R->pos[r], seq = R->seq[r];
        const int lo = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
        for (int h = 0; h < a->n_head; h++) {
            const int kvh = h / g;
            for (int d = 0; d < kv->hd; d++)
                qs[d] = quant_f16_to_f32(
                    quant_f32_to_f16(q[(size_t)r * ld_q + h * kv->hd + d] * a->scale));
            float m = -INFINITY, l = 0;
            memset(acc, 0, sizeof acc);
            for (int j = lo; j <= p; j++) {
                const int64_t slot = kv_slot(R, kv, seq, j);
                const uint16_t *kr = (const uint16_t *)kv->k + (slot * kv->n_kv + kvh) * kv->hd;
                const uint16_t *vr = (const uint16_t *)kv->v + (slot * kv->n_kv + kvh) * kv->hd_v;
                float s = 0;
                for (int d = 0; d < kv->hd; d++)
                    s += qs[d] * quant_f16_to_f32(kr[d]);
                if (a->softcap > 0) s = a->softcap * tanhf(s * (1.0f / a->softcap));
                const float mn = m > s ? m : s, corr = expf(m - mn), pe = expf(s - mn);
                l = l * corr + pe;
                for (int d = 0; d < kv->hd_v; d++)
                    acc[d] = acc[d] * corr + pe * quant_f16_to_f32(vr[d]);
                m = mn;
            }
            for (int d = 0; d < kv->hd_v; d++)
                out[(size_t)r * ld_out + h * kv->hd_v + d] = acc[d] / l;
        }
    }
    return 0;
}

/* ---- the comparisons -------------------------------------------------------------------- */

/*
 * Two sequences, prompts in chunks, then decode steps with both in one step; the same steps
 * on the CPU forward and on the CUDA host code. Each logit row: max |diff| / max |cpu| <= tol
 * and the same top-1 unless the CPU's own gap is within twice the observed max |diff|.
 */
static void compare(struct model *m, int n_prompt, int chunk, int n_dec, double tol) {
    const int bs = 16, V = m->cfg.n_vocab, S = 2;
    const int ring = kvstore_swa_ring_blocks(m, bs, chunk * S);
    const int nfull = (n_prompt + n_dec + bs) / bs;
    struct kvstore_pool *kv = NULL;
    char err[512];
    T_ASSERTF(kvstore_create(m, KVSTORE_F16, bs, S * nfull, S * ring, &kv, err, sizeof err) == 0, "%s",
              err);
    struct fwd_opts o = {.max_tokens = chunk * S,
                         .max_seqs = S,
                         .max_logit_rows = S,
                         .n_threads = 2,
                         .device = FWD_DEVICE_CPU,
                         .deterministic = 1};
    struct fwd_ctx *cpu = NULL;
    struct fwd_ctx *gpu = NULL;
    T_ASSERTF(fwd_create(m, kv, &o, &cpu, err, sizeof err) == 0, "%s", err);
    struct fwd_opts og = o;
    og.device = FWD_DEVICE_CUDA;
    T_ASSERTF(fwd_create(m, kv, &og, &gpu, err, sizeof err) == 0, "fwd_create (CUDA): %s", err);
    int32_t full[2][64], swa[2][64], ids[2][256];
    struct kvstore_seq sk[2];
    T_ASSERT(nfull <= 64 && ring <= 64 && n_prompt + n_dec <= 256);
    for (int s = 0; s < S; s++) {
        for (int i = 0; i < nfull; i++)
            full[s][i] = (S * nfull - 1) - (s * nfull + i); /* reversed */
        for (int i = 0; i < ring; i++)
            swa[s][i] = s * ring + i;
        sk[s] = (struct kvstore_seq){full[s], kv->n_blocks[KVSTORE_FULL] ? nfull : 0, ring ? swa[s] : NULL,
                                 ring};
        ids[s][0] = tok_bos(m->vocab);
        for (int i = 1; i < 256; i++)
            ids[s][i] =
                (int32_t)(((uint32_t)i * 7919u + (uint32_t)s * 31u + 11u) % (uint32_t)(V - 10)) + 5;
    }
    float *lc = malloc((size_t)S * V * 4), *lg = malloc((size_t)S * V * 4);
    T_ASSERT(lc && lg);
    double worst = 0;
    int rows = 0, agree = 0;
    /* prompts: sequence 1 starts one chunk later, so steps mix prefill and other lengths */
    int done[2] = {0, 0};
    for (int step = 0; done[0] < n_prompt + n_dec || done[1] < n_prompt + n_dec; step++) {
        struct fwd_seq q[2];
        int nq = 0;
        for (int s = 0; s < S; s++) {
            if (s == 1 && step == 0) continue;
            if (done[s] >= n_prompt + n_dec) continue;
            int n = done[s] < n_prompt ? n_prompt - done[s] : 1;
            if (n > chunk) n = chunk;
            q[nq++] = (struct fwd_seq){ids[s] + done[s], n, done[s], &sk[s], FWD_LOGITS_LAST};
        }
        T_ASSERT(fwd_run(cpu, q, nq, lc) == 0);
        int rc = fwd_run(gpu, q, nq, lg);
        T_ASSERTF(rc == 0, "fwd_run (CUDA): %s", fwd_strerror(rc));
        for (int i = 0; i < nq; i++) {
            const float *a = lc + (size_t)i * V, *b = lg + (size_t)i * V;
            double md = 0, mx = 0;
            for (int t = 0; t < V; t++) {
                const double d = fabs((double)a[t] - (double)b[t]);
                T_ASSERTF(!isnan(d), "%s: NaN in logits", m->name);
                if (d > md) md = d;
                if (fabs((double)a[t]) > mx) mx = fabs((double)a[t]);
            }
            const double e = md / (mx > 0 ? mx : 1);
            if (e > worst) worst = e;
            const int ac = cu_argmax(a, V), ag = cu_argmax(b, V);
            rows++;
            agree += ac == ag;
            T_ASSERTF(ac == ag || (double)a[ac] - (double)a[ag] <= 2 * md,
                      "%s: top-1 %d vs %d beyond the noise (%g)", m->name, ac, ag, md);
            T_ASSERTF(e <= tol, "%s step %d row %d: normalised max |diff| %g > %g", m->name, step,
                      i, e, tol);
        }
        for (int i = 0; i < nq; i++) {
            const int s = q[i].kv == &sk[0] ? 0 : 1;
            done[s] += q[i].n_tokens;
            if (done[s] >= n_prompt && done[s] < n_prompt + n_dec)
                ids[s][done[s]] = cu_argmax(lc + (size_t)i * V, V);
        }
    }
    printf("    %s: %d logit rows, top-1 agreement %d/%d, worst normalised max |diff| %.3g\n",
           m->name, rows, agree, rows, worst);
    free(lc);
    free(lg);
    fwd_destroy(gpu);
    fwd_destroy(cpu);
    kvstore_destroy(kv);
}

static void test_host_bundled_vs_cpu(void) {
    struct model *m = cu_load_model(t_model_path());
    compare(m, 20, 8, 3, cu_parity_bound(m, 1));
    model_free(m);
}

static void synthetic_one(struct model *m) {
    compare(m, 30, 7, 6, cu_parity_bound(m, 0));
}

static void test_host_synthetic_vs_cpu(void) {
    cu_each_synthetic(synthetic_one);
}

/* The matmul path the step asks for: deterministic -> always the batch-invariant kernel;
 * otherwise AUTO with cuBLAS scratch sized for max_tokens rows (the LM head stays on the
 * kernel). */
static void test_host_matmul_modes(void) {
    struct model *m = cu_load_model(t_model_path());
    const int T = 64, ring = kvstore_swa_ring_blocks(m, 16, T);
    struct kvstore_pool *kv = NULL;
    char err[512];
    T_ASSERT(kvstore_create(m, KVSTORE_F16, 16, 5, ring, &kv, err, sizeof err) == 0);
    int32_t full[5] = {0, 1, 2, 3, 4}, swa[64], ids[64];
    for (int i = 0; i < 64; i++)
        swa[i] = i;
    for (int i = 0; i < T; i++)
        ids[i] = 2 + 3 * i;
    struct kvstore_seq sk = {full, 5, ring ? swa : NULL, ring};
    float *lg = malloc((size_t)m->cfg.n_vocab * 4);
    T_ASSERT(lg);
    for (int det = 0; det < 2; det++) {
        struct fwd_opts o = {.max_tokens = T,
                             .max_seqs = 1,
                             .max_logit_rows = 1,
                             .n_threads = 1,
                             .device = FWD_DEVICE_CUDA,
                             .deterministic = det};
        struct fwd_ctx *g = NULL;
        T_ASSERTF(fwd_create(m, kv, &o, &g, err, sizeof err) == 0, "%s", err);
        memset(mm_seen, 0, sizeof mm_seen);
        struct fwd_seq q = {ids, T, 0, &sk, FWD_LOGITS_LAST};
        T_ASSERT(fwd_run(g, &q, 1, lg) == FWD_OK);
        if (det) {
            T_ASSERT(mm_seen[1].kernel > 0 && mm_seen[1].auto_blas == 0 &&
                     mm_seen[1].auto_noblas == 0);
        } else {
            T_ASSERTF(mm_seen[1].auto_blas >= 7 * m->cfg.n_layer && mm_seen[1].auto_noblas == 0,
                      "64-row matmuls: %d with cuBLAS scratch, %d without", mm_seen[1].auto_blas,
                      mm_seen[1].auto_noblas);
            T_ASSERT(mm_seen[0].kernel == 1); /* the LM head, one row */
        }
        fwd_destroy(g);
    }
    free(lg);
    kvstore_destroy(kv);
    model_free(m);
}

static void count_tap(void *user, int layer, const float *x, int n_rows, int n_embd) {
    (void)layer, (void)x, (void)n_rows, (void)n_embd;
    (*(int *)user)++;
}

/* forward.c's dispatch: AUTO picks the CUDA backend when it is available, and fwd_run
 * then runs on it, with the compute pool's threads for fwd_parallel and the tap fired
 * after every layer and the output norm. */
static void test_host_fwd_dispatch(void) {
    struct model *m = cu_load_model(t_model_path());
    struct kvstore_pool *kv = NULL;
    char err[512];
    T_ASSERT(kvstore_create(m, KVSTORE_F16, 16, 2, kvstore_swa_ring_blocks(m, 16, 4), &kv, err, sizeof err) ==
             0);
    struct fwd_opts o = {.max_tokens = 4,
                         .max_seqs = 1,
                         .max_logit_rows = 1,
                         .n_threads = 2,
                         .device = FWD_DEVICE_AUTO,
                         .deterministic = 1};
    struct fwd_ctx *f = NULL;
    T_ASSERTF(fwd_create(m, kv, &o, &f, err, sizeof err) == 0, "%s", err);
    T_ASSERT(fwd_device(f) == FWD_DEVICE_CUDA);
    T_ASSERT(fwd_threads(f) == 2);
    int taps = 0;
    fwd_set_tap(f, count_tap, &taps);
    int32_t full[2] = {0, 1}, swa[64];
    for (int i = 0; i < 64; i++)
        swa[i] = i;
    struct kvstore_seq sk = {full, 2, kv->n_blocks[KVSTORE_SWA] ? swa : NULL,
                         kvstore_swa_ring_blocks(m, 16, 4)};
    int32_t ids[4] = {2, 100, 200, 300};
    struct fwd_seq q = {ids, 4, 0, &sk, FWD_LOGITS_LAST};
    float *lg = malloc((size_t)m->cfg.n_vocab * 4);
    T_ASSERT(lg);
    struct fwd_step_times st;
    T_ASSERT(fwd_last_step_times(f, &st) == -1); /* no step yet */
    T_ASSERT(fwd_run(f, &q, 1, lg) == FWD_OK);
    T_ASSERT(fwd_last_step_times(f, &st) == 0 && st.gpu_ms >= 0 && st.h2d_ms >= 0);
    T_ASSERTF(taps == m->cfg.n_layer + 1, "%d tap calls for %d layers", taps, m->cfg.n_layer);
    T_ASSERT(!isnan(lg[0]) && !isnan(lg[cu_argmax(lg, m->cfg.n_vocab)]));
    q.pos = 40; /* beyond the two FULL blocks */
    T_ASSERT(fwd_run(f, &q, 1, lg) == FWD_EKV);
    free(lg);
    fwd_destroy(f);
    kvstore_destroy(kv);
    model_free(m);
}

/* A KV cache type the device cannot hold is a start-up error on AUTO and CUDA alike (the
 * message names the option and both ways out), never a quiet move to the CPU; the CPU
 * still takes it. */
static void test_host_kv_type_refused(void) {
    struct model *m = cu_load_model(t_model_path());
    struct kvstore_pool *kv = NULL;
    char err[512];
    T_ASSERT(kvstore_create(m, KVSTORE_Q8_0, 16, 2, kvstore_swa_ring_blocks(m, 16, 4), &kv, err,
                        sizeof err) == 0);
    struct fwd_opts o = {.max_tokens = 4, .max_seqs = 1, .max_logit_rows = 1, .n_threads = 1,
                         .device = FWD_DEVICE_AUTO, .deterministic = 1};
    const enum fwd_device devs[2] = {FWD_DEVICE_AUTO, FWD_DEVICE_CUDA};
    for (int i = 0; i < 2; i++) {
        struct fwd_ctx *f = NULL;
        o.device = devs[i];
        err[0] = 0;
        const int rc = fwd_create(m, kv, &o, &f, err, sizeof err);
        T_ASSERTF(rc == FWD_EINVAL && !f, "device %d: rc %d", (int)devs[i], rc);
        T_ASSERTF(strstr(err, "q8_0") && strstr(err, "--kv-type f16") &&
                      strstr(err, "--device cpu"),
                  "device %d: unclear error '%s'", (int)devs[i], err);
        if (devs[i] == FWD_DEVICE_AUTO) T_ASSERTF(strstr(err, "--device auto"), "%s", err);
    }
    struct fwd_ctx *f = NULL;
    o.device = FWD_DEVICE_CPU;
    T_ASSERTF(fwd_create(m, kv, &o, &f, err, sizeof err) == 0, "%s", err);
    fwd_destroy(f);
    kvstore_destroy(kv);
    model_free(m);
}

#endif /* GEMMAD_CUDA */

int main(int argc, char **argv) {
    static const struct t_case cases[] = {T_CASE(test_host_fwd_dispatch),
                                          T_CASE(test_host_kv_type_refused),
                                          T_CASE(test_host_matmul_modes),
                                          T_CASE(test_host_bundled_vs_cpu),
                                          T_CASE(test_host_synthetic_vs_cpu),
                                          {0}};
    return t_main(argc, argv, cases);
}
