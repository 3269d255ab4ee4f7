/*
 * cuda_host_emul — the CUDA runtime and the kernel launchers of engine/cuda/cuda_*.h as plain
 * host C, for test_cuda_host.c only (it defines these symbols, so the executable's copies
 * take precedence over libcudart's and keep the real launchers out of the link):
 * device memory is host memory, copies are memmove, each launcher computes its header's
 * contract (the matmul in the kernel's lane/chunk order), and stream capture records
 * launches that a graph launch replays. Included by exactly one test file.
 */
#ifndef GEMMAD_CUDA_HOST_EMUL_H
#define GEMMAD_CUDA_HOST_EMUL_H

/* ---- the CUDA runtime, on the host -------------------------------------------------------- */

static char fake_stream, fake_blas;
static long emu_fused_kv; /* cf_qkv_rope_store calls (recorded or run) */

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
static int h_memcpy_async(void *d, const void *s, size_t n) {
    memmove(d, s, n);
    return 0;
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
static int h_matmul(cudaStream_t stream, cublasHandle_t blas, const struct cf_weight *w, const float *X,
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

static int h_get_rows(cudaStream_t stream, const struct cf_weight *w, const int32_t *ids, int n_rows,
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

static int h_rms_norm(cudaStream_t stream, const float *x, int ld_x, const float *w, const float *res,
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

static int h_rope_neox(cudaStream_t stream, float *x, int ld, int n_heads, int hd, int n_rot,
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

static int h_geglu(cudaStream_t stream, float *g, int ld_g, const float *u, int ld_u, int n, int rows) {
    (void)stream;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < n; i++)
            g[(size_t)r * ld_g + i] =
                cu_ref_gelu(g[(size_t)r * ld_g + i]) * u[(size_t)r * ld_u + i];
    return 0;
}

static int h_softcap(cudaStream_t stream, float *x, size_t count, float cap) {
    (void)stream;
    for (size_t i = 0; i < count; i++)
        x[i] = cap * tanhf(x[i] * (1.0f / cap));
    return 0;
}

static int h_scale(cudaStream_t stream, float *x, size_t count, float s) {
    (void)stream;
    for (size_t i = 0; i < count; i++)
        x[i] = x[i] * s;
    return 0;
}

static int h_add_scale(cudaStream_t stream, float *y, const float *a, const float *b, size_t count,
                 float s) {
    (void)stream;
    for (size_t i = 0; i < count; i++)
        y[i] = (a[i] + b[i]) * s;
    return 0;
}

static int h_gather_rows(cudaStream_t stream, const float *x, int ld_x, const int32_t *idx, int n_idx,
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

static int h_kv_store(cudaStream_t stream, const struct cf_rows *R, const struct cf_kv *kv,
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

static int h_attention(cudaStream_t stream, const struct cf_rows *R, const struct cf_kv *kv,
                 const struct cf_attn *a, const float *q, int ld_q, float *out, int ld_out,
                 const struct cf_att_scratch *sc, int n_split) {
    (void)stream;
    /* the launcher's contract: scratch for one row at least, enough splits for every row */
    T_ASSERT(sc && sc->ml && sc->acc && sc->acc_ld >= kv->hd_v);
    T_ASSERT(n_split >= 1 && n_split <= 65535);
    T_ASSERT(sc->n_parts >= (size_t)a->n_head * (size_t)n_split);
    for (int r = 0; r < R->n_rows; r++)
        T_ASSERTF(cf_attn_splits(R->pos[r], a->window) <= n_split,
                  "row at position %d (window %d) needs %d splits, the grid has %d", R->pos[r],
                  a->window, cf_attn_splits(R->pos[r], a->window), n_split);
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

/* ---- CUDA graphs on the host -------------------------------------------------------------
 * A stream capture records each launch with a copy of its arguments (structs by value, as a
 * kernel launch copies them) instead of running it; a graph launch replays the record, so a
 * replay reads the device memory of its own step, as on a GPU, and any argument the host
 * code computed from one step's data would show as a wrong result in a later step. */

struct emu_op {
    int (*run)(const void *args);
    unsigned char args[256];
};
struct emu_graph {
    struct emu_op *ops;
    int n;
};
static struct emu_graph emu_rec; /* the capture in progress */
static int emu_capturing, emu_replays;

static int emu_record(int (*run)(const void *), const void *args, size_t n) {
    T_ASSERT(n <= sizeof emu_rec.ops[0].args);
    struct emu_op *ops = realloc(emu_rec.ops, (size_t)(emu_rec.n + 1) * sizeof *ops);
    T_ASSERT(ops);
    emu_rec.ops = ops;
    ops[emu_rec.n].run = run;
    memcpy(ops[emu_rec.n].args, args, n);
    emu_rec.n++;
    return 0;
}

/* Wrapper of launcher NAME (implementation h_NAME): records or runs. A holds the arguments. */
#define EMU_OP(A, CALL)                                                                            \
    static int emu_run_##A(const void *p) {                                                        \
        const struct A *a = p;                                                                     \
        return CALL;                                                                               \
    }

struct a_mm {
    cublasHandle_t blas;
    struct cf_weight w;
    const float *X;
    int M;
    float *Y;
    int ldy;
    enum cf_mm_mode mode;
    void *scratch;
    size_t sb;
};
EMU_OP(a_mm, h_matmul(NULL, a->blas, &a->w, a->X, a->M, a->Y, a->ldy, a->mode, a->scratch, a->sb))
int cf_matmul(cudaStream_t stream, cublasHandle_t blas, const struct cf_weight *w, const float *X,
              int M, float *Y, int ldy, enum cf_mm_mode mode, void *scratch, size_t sb) {
    const struct a_mm a = {blas, *w, X, M, Y, ldy, mode, scratch, sb};
    if (emu_capturing) return emu_record(emu_run_a_mm, &a, sizeof a);
    return h_matmul(stream, blas, w, X, M, Y, ldy, mode, scratch, sb);
}

/* cf_head: one sequential fma chain per output over k = 0 .. n_in - 1 (cuda_head.h). */
static int head_seen; /* calls of cf_head */
static int h_head(const struct cf_weight *w, const float *X, int M, float *Y, int ldy) {
    if (w->n_in % 32 || ldy < w->n_out || !cf_type_supported(w->type)) return -1;
    head_seen++;
    float *wr = row_buf((size_t)w->n_in);
    for (int o = 0; o < w->n_out; o++) {
        if (quant_dequant_row_ref(w->type, (const uint8_t *)w->data + (size_t)o * w->row_bytes, wr,
                                  w->n_in))
            return -1;
        for (int m = 0; m < M; m++) {
            const float *x = X + (size_t)m * w->n_in;
            float acc = 0.0f;
            for (int k = 0; k < w->n_in; k++)
                acc = fmaf(wr[k], x[k], acc);
            Y[(size_t)m * ldy + o] = acc;
        }
    }
    return 0;
}

struct a_head {
    struct cf_weight w;
    const float *X;
    int M;
    float *Y;
    int ldy;
};
EMU_OP(a_head, h_head(&a->w, a->X, a->M, a->Y, a->ldy))
int cf_head(cudaStream_t stream, const struct cf_weight *w, const float *X, int M, float *Y,
            int ldy) {
    (void)stream;
    const struct a_head a = {*w, X, M, Y, ldy};
    if (emu_capturing) return emu_record(emu_run_a_head, &a, sizeof a);
    return h_head(w, X, M, Y, ldy);
}

/* cf_argmax_rows: smp_argmax's rule, row by row. */
static int h_argmax(const float *Y, int ldy, int n, int M, int32_t *ids) {
    if (n <= 0 || ldy < n) return -1;
    for (int m = 0; m < M; m++) {
        const float *y = Y + (size_t)m * ldy;
        float b = -INFINITY;
        int bi = 0;
        for (int i = 0; i < n; i++)
            if (y[i] > b) b = y[i], bi = i;
        ids[m] = bi;
    }
    return 0;
}

struct a_argmax {
    const float *Y;
    int ldy, n, M;
    int32_t *ids;
};
EMU_OP(a_argmax, h_argmax(a->Y, a->ldy, a->n, a->M, a->ids))
int cf_argmax_rows(cudaStream_t stream, const float *Y, int ldy, int n, int M, int32_t *ids) {
    (void)stream;
    const struct a_argmax a = {Y, ldy, n, M, ids};
    if (emu_capturing) return emu_record(emu_run_a_argmax, &a, sizeof a);
    return h_argmax(Y, ldy, n, M, ids);
}

/* cf_topk_rows: engine/backend.c be_topk_row, the contract's host form, row by row. */
static int h_topk(const float *Y, int ldy, int n, const int32_t *rows, const float *scale, int M,
                  int32_t *ids, float *vals) {
    if (n <= 0 || ldy < n) return -1;
    for (int j = 0; j < M; j++)
        be_topk_row(Y + (size_t)rows[j] * ldy, n, scale[j], ids + (size_t)j * CF_TOPK_MAX,
                    vals + (size_t)j * CF_TOPK_MAX);
    return 0;
}

struct a_topk {
    const float *Y;
    int ldy, n;
    const int32_t *rows;
    const float *scale;
    int M;
    int32_t *ids;
    float *vals;
};
EMU_OP(a_topk, h_topk(a->Y, a->ldy, a->n, a->rows, a->scale, a->M, a->ids, a->vals))
int cf_topk_rows(cudaStream_t stream, const float *Y, int ldy, int n, const int32_t *rows,
                 const float *scale, int M, int32_t *ids, float *vals) {
    (void)stream;
    const struct a_topk a = {Y, ldy, n, rows, scale, M, ids, vals};
    if (emu_capturing) return emu_record(emu_run_a_topk, &a, sizeof a);
    return h_topk(Y, ldy, n, rows, scale, M, ids, vals);
}

/* cf_matmul_set: each weight as the kernel path computes it; with geglu the up product goes
 * to a scratch row block (Y[1] is not the launcher's to write), then gelu(gate) * up. */
static int h_matmul_set(const struct cf_weight *w, int n, const float *X, int M, float *const *Y,
                        const int *ldy, int geglu) {
    T_ASSERT(n >= 1 && n <= CF_MM_SET_MAX && (!geglu || n == 2));
    for (int i = 1; i < n; i++)
        T_ASSERT(w[i].type == w[0].type && w[i].n_in == w[0].n_in);
    if (!geglu) {
        for (int i = 0; i < n; i++)
            if (h_matmul(NULL, NULL, &w[i], X, M, Y[i], ldy[i], CF_MM_KERNEL, NULL, 0)) return -1;
        return 0;
    }
    T_ASSERT(w[1].n_out == w[0].n_out);
    const int nf = w[0].n_out;
    float *up = malloc((size_t)M * nf * sizeof(float));
    T_ASSERT(up);
    int rc = h_matmul(NULL, NULL, &w[0], X, M, Y[0], ldy[0], CF_MM_KERNEL, NULL, 0) ||
             h_matmul(NULL, NULL, &w[1], X, M, up, nf, CF_MM_KERNEL, NULL, 0);
    if (!rc) rc = h_geglu(NULL, Y[0], ldy[0], up, nf, nf, M);
    free(up);
    return rc;
}

struct a_mset {
    struct cf_weight w[CF_MM_SET_MAX];
    float *Y[CF_MM_SET_MAX];
    int ldy[CF_MM_SET_MAX];
    const float *X;
    int n, M, geglu;
};
EMU_OP(a_mset, h_matmul_set(a->w, a->n, a->X, a->M, a->Y, a->ldy, a->geglu))
int cf_matmul_set(cudaStream_t stream, const struct cf_weight *const *w, int n, const float *X,
                  int M, float *const *Y, const int *ldy, int geglu) {
    (void)stream;
    struct a_mset a;
    memset(&a, 0, sizeof a);
    T_ASSERT(n >= 1 && n <= CF_MM_SET_MAX);
    for (int i = 0; i < n; i++)
        a.w[i] = *w[i], a.Y[i] = Y[i], a.ldy[i] = ldy[i];
    a.X = X, a.n = n, a.M = M, a.geglu = geglu;
    if (emu_capturing) return emu_record(emu_run_a_mset, &a, sizeof a);
    return h_matmul_set(a.w, a.n, a.X, a.M, a.Y, a.ldy, a.geglu);
}

struct a_rows {
    struct cf_weight w;
    const int32_t *ids;
    int n_rows;
    float scale;
    float *out;
    int ld_out;
};
EMU_OP(a_rows, h_get_rows(NULL, &a->w, a->ids, a->n_rows, a->scale, a->out, a->ld_out))
int cf_get_rows(cudaStream_t stream, const struct cf_weight *w, const int32_t *ids, int n_rows,
                float scale, float *out, int ld_out) {
    const struct a_rows a = {*w, ids, n_rows, scale, out, ld_out};
    if (emu_capturing) return emu_record(emu_run_a_rows, &a, sizeof a);
    return h_get_rows(stream, w, ids, n_rows, scale, out, ld_out);
}

struct a_norm {
    const float *x, *w, *res;
    float *y;
    int ld_x, ld_res, ld_y, n, rows;
    float eps;
};
EMU_OP(a_norm,
       h_rms_norm(NULL, a->x, a->ld_x, a->w, a->res, a->ld_res, a->y, a->ld_y, a->n, a->rows, a->eps))
int cf_rms_norm(cudaStream_t stream, const float *x, int ld_x, const float *w, const float *res,
                int ld_res, float *y, int ld_y, int n, int rows, float eps) {
    const struct a_norm a = {x, w, res, y, ld_x, ld_res, ld_y, n, rows, eps};
    if (emu_capturing) return emu_record(emu_run_a_norm, &a, sizeof a);
    return h_rms_norm(stream, x, ld_x, w, res, ld_res, y, ld_y, n, rows, eps);
}

struct a_rope {
    float *x;
    int ld, n_heads, hd, n_rot, rows;
    const int32_t *pos;
    float base, freq_scale;
    const float *freq_div;
};
EMU_OP(a_rope, h_rope_neox(NULL, a->x, a->ld, a->n_heads, a->hd, a->n_rot, a->pos, a->rows,
                           a->base, a->freq_scale, a->freq_div))
int cf_rope_neox(cudaStream_t stream, float *x, int ld, int n_heads, int hd, int n_rot,
                 const int32_t *pos, int rows, float base, float freq_scale,
                 const float *freq_div) {
    const struct a_rope a = {x, ld, n_heads, hd, n_rot, rows, pos, base, freq_scale, freq_div};
    if (emu_capturing) return emu_record(emu_run_a_rope, &a, sizeof a);
    return h_rope_neox(stream, x, ld, n_heads, hd, n_rot, pos, rows, base, freq_scale, freq_div);
}

struct a_pnn {
    const float *t, *w_post, *w_next;
    float *x, *h;
    int ld_t, ld_x, ld_h, n, rows;
    float eps;
};
static int h_post_norm_next(const struct a_pnn *a) {
    return h_rms_norm(NULL, a->t, a->ld_t, a->w_post, a->x, a->ld_x, a->x, a->ld_x, a->n, a->rows,
                      a->eps) ||
           h_rms_norm(NULL, a->x, a->ld_x, a->w_next, NULL, 0, a->h, a->ld_h, a->n, a->rows,
                      a->eps);
}
EMU_OP(a_pnn, h_post_norm_next(a))
int cf_post_norm_next(cudaStream_t stream, const float *t, int ld_t, const float *w_post, float *x,
                      int ld_x, const float *w_next, float *h, int ld_h, int n, int rows,
                      float eps) {
    (void)stream;
    T_ASSERT(w_post && w_next);
    const struct a_pnn a = {t, w_post, w_next, x, h, ld_t, ld_x, ld_h, n, rows, eps};
    if (emu_capturing) return emu_record(emu_run_a_pnn, &a, sizeof a);
    return h_post_norm_next(&a);
}

static int h_norm_rope(float *x, int ld, int n_heads, int hd, const float *w, float eps, int n_rot,
                       const int32_t *pos, int rows, float base, float freq_scale,
                       const float *freq_div) {
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < n_heads; h++) {
            float *xr = x + (size_t)r * ld + (size_t)h * hd;
            if (h_rms_norm(NULL, xr, hd, w, NULL, 0, xr, hd, hd, 1, eps)) return -1;
        }
    return h_rope_neox(NULL, x, ld, n_heads, hd, n_rot, pos, rows, base, freq_scale, freq_div);
}
struct a_nrope {
    float *x;
    const float *w, *freq_div;
    const int32_t *pos;
    int ld, n_heads, hd, n_rot, rows;
    float eps, base, freq_scale;
};
EMU_OP(a_nrope, h_norm_rope(a->x, a->ld, a->n_heads, a->hd, a->w, a->eps, a->n_rot, a->pos,
                            a->rows, a->base, a->freq_scale, a->freq_div))
int cf_norm_rope(cudaStream_t stream, float *x, int ld, int n_heads, int hd, const float *w,
                 float eps, int n_rot, const int32_t *pos, int rows, float base, float freq_scale,
                 const float *freq_div) {
    (void)stream;
    const struct a_nrope a = {x, w, freq_div, pos, ld, n_heads, hd, n_rot, rows, eps, base,
                              freq_scale};
    if (emu_capturing) return emu_record(emu_run_a_nrope, &a, sizeof a);
    return h_norm_rope(x, ld, n_heads, hd, w, eps, n_rot, pos, rows, base, freq_scale, freq_div);
}

struct a_geglu {
    float *g;
    const float *u;
    int ld_g, ld_u, n, rows;
};
EMU_OP(a_geglu, h_geglu(NULL, a->g, a->ld_g, a->u, a->ld_u, a->n, a->rows))
int cf_geglu(cudaStream_t stream, float *g, int ld_g, const float *u, int ld_u, int n, int rows) {
    const struct a_geglu a = {g, u, ld_g, ld_u, n, rows};
    if (emu_capturing) return emu_record(emu_run_a_geglu, &a, sizeof a);
    return h_geglu(stream, g, ld_g, u, ld_u, n, rows);
}

/* softcap, scale and add_scale: y = f(a, b) elementwise */
struct a_elt {
    int kind; /* 0 softcap, 1 scale, 2 add_scale */
    float *y;
    const float *a, *b;
    size_t count;
    float s;
};
static int emu_elt(const struct a_elt *e) {
    if (e->kind == 0) return h_softcap(NULL, e->y, e->count, e->s);
    if (e->kind == 1) return h_scale(NULL, e->y, e->count, e->s);
    return h_add_scale(NULL, e->y, e->a, e->b, e->count, e->s);
}
EMU_OP(a_elt, emu_elt(a))
int cf_softcap(cudaStream_t stream, float *x, size_t count, float cap) {
    (void)stream;
    const struct a_elt a = {0, x, NULL, NULL, count, cap};
    return emu_capturing ? emu_record(emu_run_a_elt, &a, sizeof a) : emu_elt(&a);
}
int cf_scale(cudaStream_t stream, float *x, size_t count, float s) {
    (void)stream;
    const struct a_elt a = {1, x, NULL, NULL, count, s};
    return emu_capturing ? emu_record(emu_run_a_elt, &a, sizeof a) : emu_elt(&a);
}
int cf_add_scale(cudaStream_t stream, float *y, const float *x, const float *b, size_t count,
                 float s) {
    (void)stream;
    const struct a_elt a = {2, y, x, b, count, s};
    return emu_capturing ? emu_record(emu_run_a_elt, &a, sizeof a) : emu_elt(&a);
}

struct a_gather {
    const float *x;
    const int32_t *idx;
    float *out;
    int ld_x, n_idx, n_cols, ld_out;
};
EMU_OP(a_gather, h_gather_rows(NULL, a->x, a->ld_x, a->idx, a->n_idx, a->n_cols, a->out, a->ld_out))
int cf_gather_rows(cudaStream_t stream, const float *x, int ld_x, const int32_t *idx, int n_idx,
                   int n_cols, float *out, int ld_out) {
    const struct a_gather a = {x, idx, out, ld_x, n_idx, n_cols, ld_out};
    if (emu_capturing) return emu_record(emu_run_a_gather, &a, sizeof a);
    return h_gather_rows(stream, x, ld_x, idx, n_idx, n_cols, out, ld_out);
}

struct a_kvs {
    struct cf_rows R;
    struct cf_kv kv;
    const float *k, *v;
    int ld_k, ld_v;
};
EMU_OP(a_kvs, h_kv_store(NULL, &a->R, &a->kv, a->k, a->ld_k, a->v, a->ld_v))
int cf_kv_store(cudaStream_t stream, const struct cf_rows *R, const struct cf_kv *kv,
                const float *k, int ld_k, const float *v, int ld_v) {
    const struct a_kvs a = {*R, *kv, k, v, ld_k, ld_v};
    if (emu_capturing) return emu_record(emu_run_a_kvs, &a, sizeof a);
    return h_kv_store(stream, R, kv, k, ld_k, v, ld_v);
}

/* cf_qkv_rope_store: the separate launches' host forms in the step's order (q, v's norm, k,
 * the store). */
static int h_heads_rope(float *x, int ld, int n_heads, int hd, const float *w, float eps,
                        const struct cf_rope *rp, const int32_t *pos, int rows) {
    if (w)
        return h_norm_rope(x, ld, n_heads, hd, w, eps, rp->n_rot, pos, rows, rp->base,
                           rp->freq_scale, rp->freq_div);
    return h_rope_neox(NULL, x, ld, n_heads, hd, rp->n_rot, pos, rows, rp->base, rp->freq_scale,
                       rp->freq_div);
}
struct a_qkv {
    struct cf_rows R;
    struct cf_kv kv;
    struct cf_rope rope;
    float *q, *k, *v;
    const float *q_norm, *k_norm;
    int ld_q, ld_k, ld_v, n_head, v_norm;
    float eps;
};
static int h_qkv(const struct a_qkv *a) {
    const int T = a->R.n_rows, nkv = a->kv.n_kv, hdv = a->kv.hd_v;
    if (h_heads_rope(a->q, a->ld_q, a->n_head, a->kv.hd, a->q_norm, a->eps, &a->rope, a->R.pos, T))
        return -1;
    for (int r = 0; a->v_norm && r < T; r++)
        for (int h = 0; h < nkv; h++) {
            float *vr = a->v + (size_t)r * a->ld_v + (size_t)h * hdv;
            if (h_rms_norm(NULL, vr, hdv, NULL, NULL, 0, vr, hdv, hdv, 1, a->eps)) return -1;
        }
    if (h_heads_rope(a->k, a->ld_k, nkv, a->kv.hd, a->k_norm, a->eps, &a->rope, a->R.pos, T))
        return -1;
    return h_kv_store(NULL, &a->R, &a->kv, a->k, a->ld_k, a->v, a->ld_v);
}
EMU_OP(a_qkv, h_qkv(a))
int cf_qkv_rope_store(cudaStream_t stream, const struct cf_rows *rows, const struct cf_kv *kv,
                      float *q, int ld_q, int n_head, const float *q_norm, float *k, int ld_k,
                      const float *k_norm, float *v, int ld_v, int v_norm, float eps,
                      const struct cf_rope *rope) {
    (void)stream;
    emu_fused_kv++;
    const struct a_qkv a = {*rows, *kv,   *rope, q,    k,      v,     q_norm,
                            k_norm, ld_q, ld_k,  ld_v, n_head, v_norm, eps};
    if (emu_capturing) return emu_record(emu_run_a_qkv, &a, sizeof a);
    return h_qkv(&a);
}

struct a_att {
    struct cf_rows R;
    struct cf_kv kv;
    struct cf_attn at;
    struct cf_att_scratch sc;
    const float *q;
    float *out;
    int ld_q, ld_out, n_split;
};
EMU_OP(a_att,
       h_attention(NULL, &a->R, &a->kv, &a->at, a->q, a->ld_q, a->out, a->ld_out, &a->sc, a->n_split))
int cf_attention(cudaStream_t stream, const struct cf_rows *R, const struct cf_kv *kv,
                 const struct cf_attn *at, const float *q, int ld_q, float *out, int ld_out,
                 const struct cf_att_scratch *sc, int n_split) {
    T_ASSERT(sc);
    const struct a_att a = {*R, *kv, *at, *sc, q, out, ld_q, ld_out, n_split};
    if (emu_capturing) return emu_record(emu_run_a_att, &a, sizeof a);
    return h_attention(stream, R, kv, at, q, ld_q, out, ld_out, sc, n_split);
}

struct a_cpy {
    void *d;
    const void *s;
    size_t n;
};
EMU_OP(a_cpy, h_memcpy_async(a->d, a->s, a->n))
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k,
                            cudaStream_t st) {
    (void)st;
    const struct a_cpy a = {d, s, n};
    if (emu_capturing) {
        T_ASSERTF(k == cudaMemcpyDeviceToDevice, "a host copy inside a graph capture");
        emu_record(emu_run_a_cpy, &a, sizeof a);
        return cudaSuccess;
    }
    h_memcpy_async(d, s, n);
    return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
    (void)s, (void)mode;
    T_ASSERT(!emu_capturing);
    emu_capturing = 1;
    emu_rec.n = 0;
    emu_rec.ops = NULL;
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    (void)s;
    T_ASSERT(emu_capturing);
    emu_capturing = 0;
    struct emu_graph *eg = malloc(sizeof *eg);
    T_ASSERT(eg);
    *eg = emu_rec;
    emu_rec.ops = NULL;
    emu_rec.n = 0;
    *g = (cudaGraph_t)(void *)eg;
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g,
                                 unsigned long long flags) {
    (void)flags;
    const struct emu_graph *src = (const struct emu_graph *)(void *)g;
    struct emu_graph *eg = malloc(sizeof *eg);
    T_ASSERT(eg);
    eg->n = src->n;
    eg->ops = malloc((size_t)(src->n ? src->n : 1) * sizeof *eg->ops);
    T_ASSERT(eg->ops);
    memcpy(eg->ops, src->ops, (size_t)src->n * sizeof *eg->ops);
    *exec = (cudaGraphExec_t)(void *)eg;
    return cudaSuccess;
}
static void emu_graph_free(struct emu_graph *eg) {
    if (!eg) return;
    free(eg->ops);
    free(eg);
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    emu_graph_free((struct emu_graph *)(void *)g);
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
    emu_graph_free((struct emu_graph *)(void *)e);
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
    (void)s;
    const struct emu_graph *eg = (const struct emu_graph *)(void *)e;
    emu_replays++;
    for (int i = 0; i < eg->n; i++)
        if (eg->ops[i].run(eg->ops[i].args)) return cudaErrorLaunchFailure;
    return cudaSuccess;
}

#endif
