/*
 * test_cuda_fwd — the CUDA forward pass end to end, through the public engine/forward.h API:
 * logits of the CUDA forward vs the CPU forward on the bundled model, the synthetic models
 * and an all-F32 model at the bundled model's shapes (top-1 agreement and max |diff|); a
 * batched step equal to solo runs and a chunked prompt equal to a whole one (bit for bit,
 * deterministic mode); decode steps replayed as CUDA graphs (padded batches) equal to the
 * same steps run kernel by kernel; step validation.
 *
 * Without a CUDA build every case says SKIP ("built without CUDA"); with one but no usable
 * device, SKIP with the runtime's reason. Skips never count as passes. Synthetic models are
 * read from $GEMMAD_TEST_SYNTH_DIR (default build/synthetic).
 */
#include "tests/unit/harness.h"

#define CUDA_TESTS(X)                                                                              \
    X(test_e2e_bundled_vs_cpu)                                                                     \
    X(test_e2e_synthetic_vs_cpu)                                                                   \
    X(test_e2e_gen_f32_vs_cpu)                                                                     \
    X(test_e2e_batched_equals_solo)                                                                \
    X(test_e2e_graph_decode)                                                                       \
    X(test_e2e_step_validation)

#ifndef GEMMAD_CUDA

#define CF_SKIP_CASE(f)                                                                            \
    static void f(void) {                                                                          \
        T_SKIP("built without CUDA (make CUDA=1)");                                                \
    }
CUDA_TESTS(CF_SKIP_CASE)

#else /* GEMMAD_CUDA */

#include <stdint.h>
#include <stdlib.h>

#include "engine/forward.h"
#include "engine/kvstore.h"
#include "engine/model.h"
#include "engine/tokenizer.h"
#include "tests/unit/cuda_test_util.h"

/* ---- end to end ------------------------------------------------------------------------- */

/* Block tables for one sequence, handed out from a pool's ids. */
struct e2e_seq {
    int32_t full[256], swa[64];
    struct kvstore_seq kv;
};

static void e2e_seq_init(struct e2e_seq *s, const struct kvstore_pool *p, int first_full, int n_full,
                         int first_swa, int n_swa) {
    T_ASSERT(n_full <= 256 && n_swa <= 64);
    T_ASSERT(first_full + n_full <= p->n_blocks[KVSTORE_FULL] || p->n_blocks[KVSTORE_FULL] == 0);
    T_ASSERT(first_swa + n_swa <= p->n_blocks[KVSTORE_SWA] || p->n_blocks[KVSTORE_SWA] == 0);
    for (int i = 0; i < n_full; i++)
        s->full[i] = first_full + i;
    for (int i = 0; i < n_swa; i++)
        s->swa[i] = first_swa + i;
    s->kv = (struct kvstore_seq){s->full, p->n_blocks[KVSTORE_FULL] ? n_full : 0, s->swa,
                             p->n_blocks[KVSTORE_SWA] ? n_swa : 0};
    if (!p->n_blocks[KVSTORE_SWA]) s->kv.swa = NULL;
}

struct e2e {
    struct model *m;
    struct kvstore_pool *kv;
    struct fwd_ctx *cpu;
    struct fwd_ctx *gpu; /* the CUDA backend through the public API */
    int bs, ring;
};

static void e2e_init(struct e2e *e, struct model *m, int max_tokens, int max_seqs,
                     int deterministic) {
    char err[512];
    memset(e, 0, sizeof *e);
    e->m = m;
    e->bs = 16;
    e->ring = kvstore_swa_ring_blocks(m, e->bs, max_tokens);
    T_ASSERTF(kvstore_create(m, KVSTORE_F16, e->bs, 256 * max_seqs, e->ring * max_seqs, &e->kv, err,
                         sizeof err) == 0,
              "%s", err);
    struct fwd_opts o = {.max_tokens = max_tokens,
                         .max_seqs = max_seqs,
                         .max_logit_rows = max_seqs,
                         .n_threads = 2,
                         .device = FWD_DEVICE_CPU,
                         .deterministic = 1};
    T_ASSERTF(fwd_create(m, e->kv, &o, &e->cpu, err, sizeof err) == 0, "%s", err);
    o.device = FWD_DEVICE_CUDA;
    o.deterministic = deterministic;
    int rc = fwd_create(m, e->kv, &o, &e->gpu, err, sizeof err);
    if (rc != 0 && strstr(err, "not supported on CUDA yet")) T_SKIP("%s: %s", m->name, err);
    T_ASSERTF(rc == 0 && fwd_device(e->gpu) == FWD_DEVICE_CUDA, "fwd_create (CUDA): %s", err);
}

static void e2e_free(struct e2e *e) {
    fwd_destroy(e->gpu);
    fwd_destroy(e->cpu);
    kvstore_destroy(e->kv);
}

/* A deterministic prompt: ids spread over the vocabulary, BOS first. */
static void make_ids(const struct model *m, int32_t *ids, int n, uint32_t salt) {
    ids[0] = tok_bos(m->vocab);
    for (int i = 1; i < n; i++)
        ids[i] = (int32_t)((1000u + (uint32_t)i * 7919u + salt * 104729u) %
                           (uint32_t)(m->cfg.n_vocab - 10)) +
                 5;
}

/*
 * Prefill n_prompt tokens (in chunks of `chunk`) then greedy-decode n_dec tokens on both
 * backends, feeding the CPU's choice to both. Every logit row: top-1 must agree unless the
 * CPU's top two are within `tie` of each other, and max |diff| / max |cpu| <= tol.
 */
static void e2e_compare(struct model *m, int n_prompt, int chunk, int n_dec, double tol) {
    struct e2e e;
    e2e_init(&e, m, chunk, 1, 1);
    struct e2e_seq s;
    e2e_seq_init(&s, e.kv, 0, 256, 0, e.ring);
    const int V = m->cfg.n_vocab;
    float *lc = cu_xmalloc((size_t)V * 4), *lg = cu_xmalloc((size_t)V * 4);
    int32_t ids[512];
    T_ASSERT(n_prompt + n_dec <= 512);
    make_ids(m, ids, n_prompt, 1);
    double worst = 0;
    int agree = 0, rows = 0;
    for (int done = 0; done < n_prompt + n_dec;) {
        const int n = done < n_prompt ? (n_prompt - done < chunk ? n_prompt - done : chunk) : 1;
        struct fwd_seq q = {ids + done, n, done, &s.kv, FWD_LOGITS_LAST};
        T_ASSERTF(fwd_run(e.cpu, &q, 1, lc) == 0, "cpu fwd_run");
        int rc = fwd_run(e.gpu, &q, 1, lg);
        T_ASSERTF(rc == 0, "fwd_run (CUDA): %s", fwd_strerror(rc));
        const double err = cu_norm_err(lg, lc, (size_t)V);
        if (err > worst) worst = err;
        const int ac = cu_argmax(lc, V), ag = cu_argmax(lg, V);
        rows++;
        if (ac == ag) {
            agree++;
        } else {
            /* Backends that differ by at most d per logit can only disagree on the top-1
             * where the CPU's own gap between the two candidates is at most 2d. */
            double d = 0;
            for (int i = 0; i < V; i++)
                if (fabs((double)lg[i] - (double)lc[i]) > d)
                    d = fabs((double)lg[i] - (double)lc[i]);
            const double gap = (double)lc[ac] - (double)lc[ag];
            T_ASSERTF(gap <= 2 * d,
                      "%s: top-1 differs at position %d (cpu %d %g, cuda %d %g; gap %g > 2 x "
                      "max |diff| %g)",
                      m->name, done + n - 1, ac, (double)lc[ac], ag, (double)lg[ag], gap, d);
        }
        T_ASSERTF(err <= tol, "%s: normalised max |diff| %g > %g at position %d", m->name, err, tol,
                  done + n - 1);
        done += n;
        if (done >= n_prompt && done < n_prompt + n_dec) ids[done] = ac;
    }
    printf("    %s: top-1 agreement %d/%d, worst normalised max |diff| %.3g\n", m->name, agree,
           rows, worst);
    free(lc);
    free(lg);
    e2e_free(&e);
}

static void test_e2e_bundled_vs_cpu(void) {
    cu_need_device();
    struct model *m = cu_load_model(t_model_path());
    e2e_compare(m, 70, 32, 12, cu_parity_bound(m, 1));
    model_free(m);
}

static void synthetic_one(struct model *m) {
    e2e_compare(m, 32, 7, 8, cu_parity_bound(m, 0));
}

static void test_e2e_synthetic_vs_cpu(void) {
    cu_need_device();
    cu_each_synthetic(synthetic_one);
}

/* The bundled model's shape in F32 ($GEMMAD_TEST_GEN_F32, written by `gen-gguf --f32`: the
 * dequantized twin of a random Q4_K_M model): neither backend quantizes activations, so
 * they differ only in summation order, and the bound is 1e-3 of the logit range. */
static void test_e2e_gen_f32_vs_cpu(void) {
    cu_need_device();
    const char *path = getenv("GEMMAD_TEST_GEN_F32");
    if (!path || !*path)
        T_SKIP("GEMMAD_TEST_GEN_F32 not set (gen-gguf --f32 -o FILE writes one; "
               "deploy/gpu-check.sh does)");
    struct model *m = cu_load_model(path);
    T_ASSERTF(cu_parity_bound(m, 0) < 0.1, "%s: not an all-F32 model", path);
    e2e_compare(m, 70, 32, 12, 1e-3);
    model_free(m);
}

/* Deterministic CUDA: a sequence's logits are bit-identical alone, in a batch with others
 * at other positions, and with its prompt cut into chunks. */
static void test_e2e_batched_equals_solo(void) {
    cu_need_device();
    struct model *m = cu_load_model(t_model_path());
    const int V = m->cfg.n_vocab, NP = 40;
    int32_t a[64], b[64];
    make_ids(m, a, 64, 2);
    make_ids(m, b, NP + 1, 3);
    float *solo = cu_xmalloc((size_t)V * 4), *bat = cu_xmalloc((size_t)2 * V * 4);
    float *chunked = cu_xmalloc((size_t)V * 4);

    struct e2e e;
    e2e_init(&e, m, 64, 2, 1);
    struct e2e_seq sa, sb;
    e2e_seq_init(&sa, e.kv, 0, 8, 0, e.ring);
    e2e_seq_init(&sb, e.kv, 8, 8, e.ring, e.ring);
    /* solo: A's prompt whole, then one decode token */
    struct fwd_seq q = {a, NP, 0, &sa.kv, FWD_LOGITS_NONE};
    T_ASSERT(fwd_run(e.gpu, &q, 1, NULL) == 0);
    q = (struct fwd_seq){a + NP, 1, NP, &sa.kv, FWD_LOGITS_LAST};
    T_ASSERT(fwd_run(e.gpu, &q, 1, solo) == 0);
    /* chunked: A's prompt in chunks of 7, into the same blocks (overwritten) */
    for (int done = 0; done < NP; done += 7) {
        q = (struct fwd_seq){a + done, NP - done < 7 ? NP - done : 7, done, &sa.kv,
                             FWD_LOGITS_NONE};
        T_ASSERT(fwd_run(e.gpu, &q, 1, NULL) == 0);
    }
    q = (struct fwd_seq){a + NP, 1, NP, &sa.kv, FWD_LOGITS_LAST};
    T_ASSERT(fwd_run(e.gpu, &q, 1, chunked) == 0);
    T_ASSERTF(memcmp(solo, chunked, (size_t)V * 4) == 0, "chunked prompt changed the logits");
    /* batched: B's first 25 tokens, then A's decode together with B's next 13 tokens */
    q = (struct fwd_seq){b, 25, 0, &sb.kv, FWD_LOGITS_NONE};
    T_ASSERT(fwd_run(e.gpu, &q, 1, NULL) == 0);
    struct fwd_seq two[2] = {{b + 25, 13, 25, &sb.kv, FWD_LOGITS_LAST},
                             {a + NP, 1, NP, &sa.kv, FWD_LOGITS_LAST}};
    T_ASSERT(fwd_run(e.gpu, two, 2, bat) == 0);
    T_ASSERTF(memcmp(solo, bat + V, (size_t)V * 4) == 0, "batched step changed A's logits");

    /* A 64-row prompt (the cuBLAS path in the shape-dependent mode) as reference. */
    q = (struct fwd_seq){a, 64, 0, &sa.kv, FWD_LOGITS_LAST};
    T_ASSERT(fwd_run(e.gpu, &q, 1, solo) == 0);
    e2e_free(&e);

    /* The shape-dependent mode (cuBLAS for >= 64 rows) is close, not identical. */
    e2e_init(&e, m, 64, 2, 0);
    e2e_seq_init(&sa, e.kv, 0, 8, 0, e.ring);
    q = (struct fwd_seq){a, 64, 0, &sa.kv, FWD_LOGITS_LAST};
    T_ASSERT(fwd_run(e.gpu, &q, 1, chunked) == 0);
    const double d = cu_norm_err(chunked, solo, (size_t)V);
    printf("    cuBLAS prefill vs kernel prefill: normalised max |diff| %.3g\n", d);
    T_ASSERTF(d <= 5e-2, "cuBLAS prefill differs by %g", d);
    e2e_free(&e);
    free(solo), free(bat), free(chunked);
    model_free(m);
}

/* Decode steps replayed as CUDA graphs equal the same steps run kernel by kernel, padded
 * or not (cuda_test_util.h). */
static void test_e2e_graph_decode(void) {
    cu_need_device();
    struct model *m = cu_load_model(t_model_path());
    cu_graph_decode_check(m);
    model_free(m);
}

static void test_e2e_step_validation(void) {
    cu_need_device();
    struct model *m = cu_load_model(t_model_path());
    struct e2e e;
    e2e_init(&e, m, 8, 1, 1);
    struct e2e_seq s;
    e2e_seq_init(&s, e.kv, 0, 2, 0, e.ring);
    float *lg = cu_xmalloc((size_t)m->cfg.n_vocab * 4);
    int32_t ok[8] = {2, 5, 6, 7, 8, 9, 10, 11}, bad = m->cfg.n_vocab;
    struct fwd_seq q = {&bad, 1, 0, &s.kv, FWD_LOGITS_LAST};
    T_ASSERT(fwd_run(e.gpu, &q, 1, lg) == FWD_EINVAL);
    q = (struct fwd_seq){ok, 1, 32, &s.kv, FWD_LOGITS_LAST};
    T_ASSERT(fwd_run(e.gpu, &q, 1, lg) == FWD_EKV); /* beyond 2 blocks of 16 */
    q = (struct fwd_seq){ok, 9, 0, &s.kv, FWD_LOGITS_LAST};
    T_ASSERT(fwd_run(e.gpu, &q, 1, lg) == FWD_EINVAL); /* more than max_tokens */
    q = (struct fwd_seq){ok, 8, 0, &s.kv, FWD_LOGITS_ALL};
    T_ASSERT(fwd_run(e.gpu, &q, 1, lg) == FWD_EINVAL); /* more logit rows than allowed */
    q = (struct fwd_seq){ok, 8, 0, &s.kv, FWD_LOGITS_LAST};
    T_ASSERT(fwd_run(e.gpu, &q, 1, lg) == FWD_OK);
    free(lg);
    e2e_free(&e);
    model_free(m);
}

#endif /* GEMMAD_CUDA */

#define CF_CASE(f) T_CASE(f),
int main(int argc, char **argv) {
    static const struct t_case cases[] = {CUDA_TESTS(CF_CASE){0}};
    return t_main(argc, argv, cases);
}
