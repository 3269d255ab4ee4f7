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
static void test_host_graph_decode(void) {
    T_SKIP("built without CUDA (make CUDA=1)");
}
static void test_host_fused_kv(void) {
    T_SKIP("built without CUDA (make CUDA=1)");
}
static void test_host_mmvq_vs_cpu(void) {
    T_SKIP("built without CUDA (make CUDA=1)");
}
static void test_host_mmvq_graph_decode(void) {
    T_SKIP("built without CUDA (make CUDA=1)");
}

#else

#include <stdint.h>

#include "engine/cuda/cuda_act.h"
#include "engine/cuda/cuda_attn.h"
#include "engine/cuda/cuda_getrows.h"
#include "engine/cuda/cuda_head.h"
#include "engine/cuda/cuda_topk.h"
#include "engine/cuda/cuda_qkv.h"
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

#include "tests/unit/cuda_host_emul.h"
#include "tests/unit/cuda_host_mmvq.h"

/* ---- the comparisons -------------------------------------------------------------------- */

/*
 * Two sequences, prompts in chunks, then decode steps with both in one step; the same steps
 * on the CPU forward and on the CUDA host code. Each logit row: max |diff| / max |cpu| <= tol
 * and the same top-1 unless the CPU's own gap is within twice the observed max |diff|.
 */
static double compare(struct model *m, int n_prompt, int chunk, int n_dec, double tol) {
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
    return worst;
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

/* The first layer's output of one 6-token step, CPU against the CUDA host code (tap after
 * layer 0): normalised max |diff|. Upstream of it only the embedding and the attention norm,
 * so with MMVQ the matmuls see the CPU's own int8 activations. */
struct l0_tap {
    float *x;
    int rows, n;
};
static void l0_tap_fn(void *user, int layer, const float *x, int n_rows, int n_embd) {
    struct l0_tap *t = user;
    if (layer != 0) return;
    t->rows = n_rows, t->n = n_embd;
    t->x = realloc(t->x, (size_t)n_rows * n_embd * sizeof(float));
    T_ASSERT(t->x);
    memcpy(t->x, x, (size_t)n_rows * n_embd * sizeof(float));
}
static double layer0_diff(struct model *m) {
    enum { T = 6, bs = 16 };
    struct kvstore_pool *kv = NULL;
    char err[512];
    T_ASSERT(kvstore_create(m, KVSTORE_F16, bs, 1, kvstore_swa_ring_blocks(m, bs, T), &kv, err,
                            sizeof err) == 0);
    struct fwd_opts o = {.max_tokens = T, .max_seqs = 1, .max_logit_rows = 1, .n_threads = 1,
                         .device = FWD_DEVICE_CPU, .deterministic = 1};
    struct fwd_ctx *f[2] = {NULL, NULL};
    struct l0_tap tap[2] = {{NULL, 0, 0}, {NULL, 0, 0}};
    int32_t full[1] = {0}, swa[64], ids[T];
    for (int i = 0; i < 64; i++)
        swa[i] = i;
    for (int i = 0; i < T; i++)
        ids[i] = 2 + 37 * i;
    struct kvstore_seq sk = {full, 1, kv->n_blocks[KVSTORE_SWA] ? swa : NULL,
                             kvstore_swa_ring_blocks(m, bs, T)};
    struct fwd_seq q = {ids, T, 0, &sk, FWD_LOGITS_LAST};
    float *lg = malloc((size_t)m->cfg.n_vocab * 4);
    T_ASSERT(lg);
    for (int i = 0; i < 2; i++) {
        o.device = i ? FWD_DEVICE_CUDA : FWD_DEVICE_CPU;
        T_ASSERTF(fwd_create(m, kv, &o, &f[i], err, sizeof err) == 0, "%s", err);
        fwd_set_tap(f[i], l0_tap_fn, &tap[i]);
        T_ASSERT(fwd_run(f[i], &q, 1, lg) == FWD_OK);
        fwd_destroy(f[i]);
    }
    T_ASSERT(tap[0].x && tap[1].x && tap[0].rows == tap[1].rows && tap[0].n == tap[1].n);
    const double e = cu_norm_err(tap[1].x, tap[0].x, (size_t)tap[0].rows * tap[0].n);
    free(tap[0].x), free(tap[1].x), free(lg);
    kvstore_destroy(kv);
    return e;
}

/*
 * GEMMAD_CUDA_MMVQ=1: steps of <= 8 rows (chunks of 4, two sequences) run the matmuls of the
 * 32-element block types on int8 activations quantized as the CPU quantizes them; the
 * K-quant matmuls (Q8_K activations on the CPU) keep the f32 kernel, and so does the LM head.
 * Each matmul then agrees with the CPU's to the float summation order (~1e-7), but any
 * upstream difference of a few ulps (attention, fp16 roundings of q and of the GELU input)
 * still moves some int8 roundings by one step, so the logits agree only somewhat better than
 * on the f32 path. Measured here (worst normalised max |diff| of the logits, MMVQ against
 * f32 path at the same steps): bundled model 0.0889 / 0.0774; synthetic Q8_0 models
 * 0.0218-0.0753 / 0.0321-0.0916; Q4_K models (few MMVQ matmuls) up to 0.118 / 0.117. The
 * first layer's output (layer0_diff), where only the embedding and one norm come before the
 * matmuls, on models whose first-layer matmuls all take MMVQ: 0.0063-0.0121 with MMVQ
 * against 0.015-0.0255 without; asserted: strictly smaller with MMVQ. Logit bounds: 0.15
 * (bundled, as cu_parity_bound) and MMVQ_SYNTH_BOUND (about 1.7x the largest measured).
 */
#define MMVQ_SYNTH_BOUND 0.2

static int mmvq_weights(const struct model *m, int layers, int *n_all) {
    int n = 0, all = 0;
    for (int l = 0; l < layers; l++) {
        const struct model_layer_w *w = &m->layer[l];
        const struct kern_weight *ws[] = {&w->wq, &w->wk,   &w->wv,       &w->wo,  &w->gate,
                                          &w->up, &w->down, &w->inp_gate, &w->proj};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            if (ws[i]->data) {
                all++;
                n += cf_mmvq_supported(ws[i]->type);
            }
    }
    *n_all = all;
    return n;
}

static void mmvq_one(struct model *m, int real_model, double bound) {
    T_ASSERT(setenv("GEMMAD_CUDA_MMVQ", "0", 1) == 0);
    mmvq_seen = 0;
    const double l0_f32 = layer0_diff(m);
    T_ASSERT(mmvq_seen == 0);
    T_ASSERT(setenv("GEMMAD_CUDA_MMVQ", "1", 1) == 0);
    const double l0 = layer0_diff(m);
    const int l0_calls = mmvq_seen;
    mmvq_seen = 0;
    const double worst = compare(m, real_model ? 20 : 30, 4, real_model ? 3 : 6, bound);
    int n_all = 0, n0_all = 0;
    const int n = mmvq_weights(m, m->cfg.n_layer, &n_all);
    const int n0 = mmvq_weights(m, 1, &n0_all);
    T_ASSERTF(n == 0 || mmvq_seen > 0, "%s: MMVQ on, %d MMVQ matmuls", m->name, mmvq_seen);
    T_ASSERTF(n0 == 0 || l0_calls > 0, "%s: no MMVQ matmul in one 6-row step", m->name);
    printf("    %s: %d MMVQ matmuls, logits worst %.3g (bound %.3g), layer 0 %.3g (f32 path "
           "%.3g)\n", m->name, mmvq_seen, worst, bound, l0, l0_f32);
    if (n0 > 0 && n0 == n0_all)
        T_ASSERTF(l0 < l0_f32, "%s: layer 0 with MMVQ %g, not below the f32 path's %g", m->name,
                  l0, l0_f32);
}

static void mmvq_synthetic(struct model *m) {
    mmvq_one(m, 0, cu_parity_bound(m, 0) == 1e-2 ? 1e-2 : MMVQ_SYNTH_BOUND);
}

static void test_host_mmvq_vs_cpu(void) {
    struct model *m = cu_load_model(t_model_path());
    mmvq_seen = mmvq_mixed_seen = 0;
    mmvq_one(m, 1, cu_parity_bound(m, 1));
    const struct model_layer_w *w0 = &m->layer[0];
    if (w0->wq.type != w0->wv.type && cf_mmvq_supported(w0->wq.type) &&
        cf_mmvq_supported(w0->wk.type) && cf_mmvq_supported(w0->wv.type))
        T_ASSERTF(mmvq_mixed_seen > 0, "%s: Q, K, V (types %u, %u, %u) not in one MMVQ set",
                  m->name, w0->wq.type, w0->wk.type, w0->wv.type);
    model_free(m);
    cu_each_synthetic(mmvq_synthetic);
    unsetenv("GEMMAD_CUDA_MMVQ");
}

/* The graph test above with GEMMAD_CUDA_MMVQ=1: the captured quantize and MMVQ launches
 * (scratch pointer, rows) hold for every later step, padded or not. */
static void test_host_mmvq_graph_decode(void) {
    struct model *m = cu_load_model(t_model_path());
    T_ASSERT(setenv("GEMMAD_CUDA_MMVQ", "1", 1) == 0);
    mmvq_seen = 0;
    emu_replays = 0;
    cu_graph_decode_check(m);
    unsetenv("GEMMAD_CUDA_MMVQ");
    T_ASSERT(emu_replays > 0 && mmvq_seen > 0);
    model_free(m);
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
        head_seen = 0;
        struct fwd_seq q = {ids, T, 0, &sk, FWD_LOGITS_LAST};
        T_ASSERT(fwd_run(g, &q, 1, lg) == FWD_OK);
        if (det) {
            T_ASSERT(mm_seen[1].kernel > 0 && mm_seen[1].auto_blas == 0 &&
                     mm_seen[1].auto_noblas == 0);
        } else {
            T_ASSERTF(mm_seen[1].auto_blas >= 7 * m->cfg.n_layer && mm_seen[1].auto_noblas == 0,
                      "64-row matmuls: %d with cuBLAS scratch, %d without", mm_seen[1].auto_blas,
                      mm_seen[1].auto_noblas);
            T_ASSERT(mm_seen[0].kernel == 0 && head_seen == 1); /* the LM head: cf_head */
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
    /* profiling: every operation timed by class (no graph), then off again */
    T_ASSERT(fwd_set_profile(f, 1) == 0);
    T_ASSERT(fwd_run(f, &q, 1, lg) == FWD_OK);
    T_ASSERT(fwd_last_step_times(f, &st) == 0 && st.profiled == 1 && st.graph == 0);
    T_ASSERT(fwd_set_profile(f, 0) == 0);
    T_ASSERT(fwd_run(f, &q, 1, lg) == FWD_OK);
    T_ASSERT(fwd_last_step_times(f, &st) == 0 && st.profiled == 0);
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

/* Decode steps replayed as (emulated) CUDA graphs, padded or not, equal the same steps run
 * launcher by launcher: the captured arguments hold for every later step. */
static void test_host_graph_decode(void) {
    struct model *m = cu_load_model(t_model_path());
    cu_graph_decode_check(m);
    T_ASSERT(emu_replays > 0);
    model_free(m);
}

/* GEMMAD_CUDA_FUSE_KV=1: q/k/v norm + RoPE + KV store in one launch (cf_qkv_rope_store),
 * against the CPU on the bundled and synthetic models (Gemma 4's V norm and V = K among
 * them), and through captured and replayed graphs. */
static void fused_one(struct model *m) {
    compare(m, 30, 7, 6, cu_parity_bound(m, 0));
}

static void test_host_fused_kv(void) {
    setenv("GEMMAD_CUDA_FUSE_KV", "1", 1);
    const long before = emu_fused_kv;
    struct model *m = cu_load_model(t_model_path());
    compare(m, 20, 8, 3, cu_parity_bound(m, 1));
    T_ASSERT(emu_fused_kv > before);
    cu_graph_decode_check(m);
    model_free(m);
    const char *dir = getenv("GEMMAD_TEST_SYNTH_DIR");
    DIR *d = opendir(dir ? dir : "build/synthetic");
    if (d) { /* without them the bundled model's check stands alone */
        closedir(d);
        cu_each_synthetic(fused_one);
    }
    unsetenv("GEMMAD_CUDA_FUSE_KV");
}

#endif /* GEMMAD_CUDA */

int main(int argc, char **argv) {
    static const struct t_case cases[] = {T_CASE(test_host_fwd_dispatch),
                                          T_CASE(test_host_kv_type_refused),
                                          T_CASE(test_host_matmul_modes),
                                          T_CASE(test_host_bundled_vs_cpu),
                                          T_CASE(test_host_synthetic_vs_cpu),
                                          T_CASE(test_host_graph_decode),
                                          T_CASE(test_host_fused_kv),
                                          T_CASE(test_host_mmvq_vs_cpu),
                                          T_CASE(test_host_mmvq_graph_decode),
                                          {0}};
    return t_main(argc, argv, cases);
}
