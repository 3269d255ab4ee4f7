/*
 * cuda_test_util — helpers shared by test_cuda.c (on a GPU) and test_cuda_host.c (host
 * emulation): loading a model, the parity bound between the CUDA and CPU forward passes,
 * and a walk over the synthetic models. Test-only; CUDA builds only.
 */
#ifndef GEMMAD_CUDA_TEST_UTIL_H
#define GEMMAD_CUDA_TEST_UTIL_H

#include <dirent.h>
#include <math.h>
#include <stdlib.h>

#include "engine/backend.h"
#include "engine/cuda/cuda_probe.h"
#include "engine/forward.h"
#include "engine/kernels/kern.h"
#include "engine/kvstore.h"
#include "engine/tokenizer.h"
#include "engine/kernels/quant.h"
#include "engine/model.h"
#include "tests/unit/harness.h"

static inline struct model *cu_load_model(const char *path) {
    if (access(path, R_OK) != 0) T_SKIP("model %s not present", path);
    kern_init(KERN_ISA_AUTO);
    struct model *m = NULL;
    char err[512];
    T_ASSERTF(model_load(path, &m, err, sizeof err) == 0, "model_load %s: %s", path, err);
    return m;
}

static inline void cu_need_device(void) {
    char why[256];
    if (!cf_probe(why, sizeof why)) T_SKIP("no CUDA device: %s", why);
}

static inline void *cu_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    T_ASSERT(p);
    return p;
}

/* max |a - b| / max(|b|), the normalised error every comparison uses (NaN: infinite). */
static inline double cu_norm_err(const float *a, const float *b, size_t n) {
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d)) return INFINITY;
        if (d > md) md = d;
        if (fabs((double)b[i]) > mb) mb = fabs((double)b[i]);
    }
    return mb > 0 ? md / mb : md;
}

static inline int cu_argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* The bound on max |diff| / max |cpu logit| between the backends. The CPU quantizes every
 * activation to Q8_0/Q8_K (or F16) before a matmul with a quantized (or F16) weight, the CUDA
 * kernels keep activations in f32: with only F32 weights nothing is quantized and the two
 * agree to rounding order (measured ~1e-3 on the synthetic models, whose random weights
 * amplify differences); otherwise the quantization noise dominates (measured up to 0.07 on
 * the bundled model and 0.4 on the random synthetic ones). The kernels themselves are held
 * to 2e-6 against the references in test_cuda. */
static inline double cu_parity_bound(const struct model *m, int real_model) {
    int all_f32 = m->tok_embd.type == QT_F32;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const struct model_layer_w *w = &m->layer[l];
        const struct kern_weight *ws[] = {&w->wq, &w->wk,   &w->wv,       &w->wo,  &w->gate,
                                          &w->up, &w->down, &w->inp_gate, &w->proj};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            if (ws[i]->data && ws[i]->type != QT_F32) all_f32 = 0;
    }
    if (all_f32) return 1e-2;
    return real_model ? 0.15 : 0.6;
}

/* cuda_mmvq.h's contract for one weight row (type w_type, n_in elements) and one activation
 * row quantized by quant_q8_1_row_ref (whose qs and d are quant_q8_0_row_ref's): each block's
 * term by the CPU's reference dot of that block, lane l summing blocks l, l + 32, … in order,
 * then the xor butterfly over the 32 lanes. */
static inline float cu_mmvq_row_ref(uint32_t w_type, const uint8_t *row, int n_in,
                                    const struct block_q8_1 *act) {
    const quant_vec_dot_fn dot = quant_vec_dot_ref(w_type);
    const int q81 = quant_info(w_type)->vec_dot_type == QT_Q8_1;
    const size_t bsize = (size_t)quant_info(w_type)->size;
    float lane[32] = {0};
    for (int b = 0; b < n_in / 32; b++) {
        struct block_q8_0 a0;
        a0.d = act[b].d;
        memcpy(a0.qs, act[b].qs, 32);
        lane[b % 32] += dot(32, row + (size_t)b * bsize, q81 ? (const void *)&act[b] : &a0);
    }
    for (int off = 16; off > 0; off >>= 1) {
        float t[32];
        for (int l = 0; l < 32; l++)
            t[l] = lane[l] + lane[l ^ off];
        memcpy(lane, t, sizeof t);
    }
    return lane[0];
}

/* GELU-tanh as the CPU forward (ggml's fp16 table) and the CUDA kernel compute it. */
static inline float cu_ref_gelu(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    const float xh = quant_f16_to_f32(quant_f32_to_f16(x));
    const float g =
        0.5f * xh *
        (1.0f + tanhf(0.79788456080286535587989211986876f * xh * (1.0f + 0.044715f * xh * xh)));
    return quant_f16_to_f32(quant_f32_to_f16(g));
}

/* Calls fn on every model in $GEMMAD_TEST_SYNTH_DIR (default build/synthetic), written by
 * tests/fixtures/synthetic/gen_synthetic.py --out DIR; SKIP when there is none. */
static inline void cu_each_synthetic(void (*fn)(struct model *m)) {
    const char *dir = getenv("GEMMAD_TEST_SYNTH_DIR");
    if (!dir) dir = "build/synthetic";
    DIR *d = opendir(dir);
    if (!d)
        T_SKIP("no synthetic models in %s (tests/fixtures/synthetic/gen_synthetic.py --out %s)",
               dir, dir);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        const size_t len = strlen(de->d_name);
        if (len < 5 || strcmp(de->d_name + len - 5, ".gguf")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        struct model *m = cu_load_model(path);
        printf("    %s\n", de->d_name);
        fn(m);
        model_free(m);
        n++;
    }
    closedir(d);
    if (!n) T_SKIP("no .gguf files in %s", dir);
}

/*
 * Decode steps as CUDA graphs (deterministic mode): three sequences decoded together (padded
 * to four rows, one graph replayed per step) give the same bits as each one alone (one-row
 * graphs) and as the same steps run kernel by kernel (GEMMAD_CUDA_GRAPHS=0 at create); each
 * step says whether it replayed a graph. Tokens are fixed (no sampling), so the runs see the
 * same inputs. A fourth run asks (fwd_run_rows) for sequence 0 as a greedy id, sequence 2 as
 * top-k candidates at scale 1/0.7, with the device top-k on (GEMMAD_CUDA_TOPK=1): the id is
 * the first argmax of the first run's row, the candidates are be_topk_row's of it, both rows
 * are left alone, and sequence 1's row comes back with the same bits (id -1). A fifth run is
 * the fourth with the device top-k off (the default): the top-k row comes back whole and the
 * candidates, taken on the host, are the same.
 */
static inline void cu_graph_decode_check(struct model *m) {
    enum { S = 3, NP = 12, ND = 3, BS = 16, NB = 2 };
    const size_t V = (size_t)m->cfg.n_vocab;
    const int ring = kvstore_swa_ring_blocks(m, BS, 32);
    int32_t ids[S][NP + ND], full[S][NB], swa[S][64];
    T_ASSERT(ring <= 64 && NP + ND <= NB * BS);
    for (int s = 0; s < S; s++)
        for (int i = 0; i < NP + ND; i++)
            ids[s][i] = i == 0 ? tok_bos(m->vocab)
                               : (int32_t)((977u * (uint32_t)i + 131u * (uint32_t)s) %
                                           (uint32_t)(m->cfg.n_vocab - 10)) +
                                     5;
    float *out[5];
    int32_t gid[2][ND][S];
    const uint8_t greedy[S] = {FWD_ROW_GREEDY, FWD_ROW_FULL, FWD_ROW_TOPK};
    const float scale[S] = {0, 0, 1.0f / 0.7f};
    static int32_t tk_id[2][ND][S * FWD_TOPK_MAX], want_id[BE_TOPK_MAX];
    static float tk_val[2][ND][S * FWD_TOPK_MAX], want_val[BE_TOPK_MAX];
    for (int k = 0; k < 5; k++)
        out[k] = cu_xmalloc((size_t)ND * S * V * 4);
    for (size_t i = 0; i < (size_t)ND * S * V; i++)
        out[3][i] = out[4][i] = -7.0f; /* what greedy rows must leave as it is */
    /* 0 graphs together, 1 graphs alone, 2 no graphs, 3 graphs together with greedy ids and
     * top-k on the device (GEMMAD_CUDA_TOPK=1), 4 the same with top-k taken on the host */
    for (int mode = 0; mode < 5; mode++) {
        struct kvstore_pool *kv = NULL;
        struct fwd_ctx *f = NULL;
        char err[512];
        T_ASSERTF(kvstore_create(m, KVSTORE_F16, BS, S * NB, S * ring, &kv, err, sizeof err) == 0,
                  "%s", err);
        const struct fwd_opts o = {.max_tokens = 32,
                                   .max_seqs = 4,
                                   .max_logit_rows = 4,
                                   .n_threads = 2,
                                   .device = FWD_DEVICE_CUDA,
                                   .deterministic = 1};
        if (mode == 2) setenv("GEMMAD_CUDA_GRAPHS", "0", 1);
        if (mode == 3) setenv("GEMMAD_CUDA_TOPK", "1", 1);
        const int rc = fwd_create(m, kv, &o, &f, err, sizeof err);
        unsetenv("GEMMAD_CUDA_GRAPHS");
        unsetenv("GEMMAD_CUDA_TOPK");
        T_ASSERTF(rc == 0, "fwd_create (CUDA): %s", err);
        struct kvstore_seq ks[S];
        struct fwd_seq qs[S];
        for (int s = 0; s < S; s++) {
            for (int b = 0; b < NB; b++)
                full[s][b] = s * NB + b;
            for (int b = 0; b < ring; b++)
                swa[s][b] = s * ring + b;
            ks[s] = (struct kvstore_seq){full[s], NB, ring ? swa[s] : NULL, ring};
            qs[s] = (struct fwd_seq){ids[s], NP, 0, &ks[s], FWD_LOGITS_NONE};
            T_ASSERT(fwd_run(f, &qs[s], 1, NULL) == FWD_OK);
        }
        for (int t = 0; t < ND; t++) {
            for (int s = 0; s < S; s++)
                qs[s] = (struct fwd_seq){ids[s] + NP + t, 1, NP + t, &ks[s], FWD_LOGITS_LAST};
            float *lg = out[mode] + (size_t)t * S * V;
            struct fwd_step_times st;
            if (mode == 1) {
                for (int s = 0; s < S; s++) {
                    T_ASSERT(fwd_run(f, &qs[s], 1, lg + s * V) == FWD_OK);
                    T_ASSERT(fwd_last_step_times(f, &st) == 0);
                    T_ASSERTF(st.graph == 1, "a one-row decode step did not replay a graph");
                }
            } else if (mode >= 3) {
                const int p = mode - 3;
                T_ASSERT(fwd_run_rows(f, qs, S, lg, greedy, scale, gid[p][t], tk_id[p][t],
                                      tk_val[p][t]) == FWD_OK);
                T_ASSERT(fwd_last_step_times(f, &st) == 0);
                T_ASSERTF(st.graph == 1, "a greedy decode step did not replay a graph");
            } else {
                T_ASSERT(fwd_run(f, qs, S, lg) == FWD_OK);
                T_ASSERT(fwd_last_step_times(f, &st) == 0);
                T_ASSERTF(st.graph == (mode == 0), "mode %d: graph %d", mode, st.graph);
            }
        }
        fwd_destroy(f);
        kvstore_destroy(kv);
    }
    T_ASSERTF(memcmp(out[0], out[1], (size_t)ND * S * V * 4) == 0,
              "a padded 3-sequence graph differs from one-sequence graphs");
    T_ASSERTF(memcmp(out[0], out[2], (size_t)ND * S * V * 4) == 0,
              "graph replays differ from the kernels run one by one");
    for (int p = 0; p < 2; p++)
    for (int t = 0; t < ND; t++)
        for (int s = 0; s < S; s++) {
            const float *ref = out[0] + ((size_t)t * S + s) * V;
            const float *got = out[3 + p] + ((size_t)t * S + s) * V;
            if (greedy[s] == FWD_ROW_TOPK && p == 1) { /* host top-k: the row came back whole */
                T_ASSERTF(gid[p][t][s] == -1, "step %d seq %d: id for a top-k row", t, s);
                T_ASSERTF(memcmp(ref, got, V * 4) == 0, "step %d seq %d: top-k row differs", t, s);
                be_topk_row(ref, (int)V, scale[s], want_id, want_val);
                T_ASSERTF(memcmp(want_id, tk_id[p][t] + s * FWD_TOPK_MAX, sizeof want_id) == 0 &&
                              memcmp(want_val, tk_val[p][t] + s * FWD_TOPK_MAX, sizeof want_val) == 0,
                          "step %d seq %d: host top-k candidates differ", t, s);
                continue;
            }
            if (greedy[s] == FWD_ROW_FULL) {
                T_ASSERTF(gid[p][t][s] == -1, "step %d seq %d: id %d for a full row", t, s, gid[p][t][s]);
                T_ASSERTF(memcmp(ref, got, V * 4) == 0, "step %d seq %d: full row differs", t, s);
                continue;
            }
            for (size_t i = 0; i < V; i++)
                T_ASSERTF(got[i] == -7.0f, "step %d seq %d: a reduced row was written", t, s);
            if (greedy[s] == FWD_ROW_TOPK) {
                T_ASSERTF(gid[p][t][s] == -1, "step %d seq %d: id %d for a top-k row", t, s, gid[p][t][s]);
                be_topk_row(ref, (int)V, scale[s], want_id, want_val);
                T_ASSERTF(memcmp(want_id, tk_id[p][t] + s * FWD_TOPK_MAX, sizeof want_id) == 0 &&
                              memcmp(want_val, tk_val[p][t] + s * FWD_TOPK_MAX, sizeof want_val) == 0,
                          "step %d seq %d: top-k candidates differ from the host's", t, s);
                T_ASSERT(want_id[0] >= 0 && want_id[FWD_TOPK_MAX - 1] >= 0);
                continue;
            }
            int32_t want = 0;
            for (size_t i = 1; i < V; i++)
                if (ref[i] > ref[want]) want = (int32_t)i;
            T_ASSERTF(gid[p][t][s] == want, "step %d seq %d: greedy id %d, argmax %d", t, s,
                      gid[p][t][s], want);
        }
    for (int k = 0; k < 5; k++)
        free(out[k]);
}

#endif
