/*
 * test_model — model configuration and tensor checks.
 *
 * The bundled Gemma 3 270M file is checked against its known configuration, and process
 * memory after a forward pass against the file size. Tiny GGUF files built here in memory
 * (F32 random weights, a 8-token vocab) cover what the bundled file cannot: Gemma 2
 * defaults and the 27B attention-scale rule, Gemma 4 KV sharing / k_eq_v / per-layer
 * embeddings / split RoPE, and the errors (unsupported architecture, wrong shape, missing
 * tensor, special token outside the vocab).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward.h"
#include "engine/gguf.h"
#include "engine/kernels/kern.h"
#include "engine/kvstore.h"
#include "engine/model.h"
#include "tests/unit/gguf_writer.h"
#include "tests/unit/harness.h"

#define MAX_T 600
struct tiny {
    /* configuration */
    const char *arch;
    int n_layer, n_embd, n_head, n_kv, hd, hd_swa, n_ff, window, period, shared, n_pl;
    const int *swa_arr;       /* gemma4: per-layer sliding flags */
    int bos;
    const char *bad_shape;    /* tensor written with ne1 + 1 */
    const char *skip;         /* tensor left out */
    /* built tensors */
    int nt;
    char names[MAX_T][64];
    int64_t ne[MAX_T][2];
    int nd[MAX_T];
};

static void add_t(struct tiny *t, const char *name, int64_t ne0, int64_t ne1, int nd) {
    if (t->skip && !strcmp(t->skip, name)) return;
    T_ASSERT(t->nt < MAX_T);
    snprintf(t->names[t->nt], 64, "%s", name);
    t->ne[t->nt][0] = ne0;
    t->ne[t->nt][1] = ne1 + ((t->bad_shape && !strcmp(t->bad_shape, name)) ? 1 : 0);
    t->nd[t->nt] = nd;
    t->nt++;
}

static int tiny_swa(const struct tiny *t, int l) {
    if (t->swa_arr) return t->swa_arr[l];
    if (!t->window || !t->period) return 0;
    return l % t->period < t->period - 1;
}

static void tiny_tensors(struct tiny *t) {
    const int E = t->n_embd, V = 8;
    char nm[64];
    int g4 = !strcmp(t->arch, "gemma4");
    int kv_from = t->n_layer - t->shared;
    add_t(t, "token_embd.weight", E, V, 2);
    add_t(t, "output_norm.weight", E, 1, 1);
    if (g4 && t->n_pl) {
        add_t(t, "per_layer_token_embd.weight", (int64_t)t->n_pl * t->n_layer, V, 2);
        add_t(t, "per_layer_model_proj.weight", E, (int64_t)t->n_pl * t->n_layer, 2);
        add_t(t, "per_layer_proj_norm.weight", t->n_pl, 1, 1);
    }
    if (g4) add_t(t, "rope_freqs.weight", t->hd / 2, 1, 1);
    for (int l = 0; l < t->n_layer; l++) {
        int hd = (g4 && tiny_swa(t, l)) ? t->hd_swa : t->hd;
        int has_kv = l < kv_from;
#define A(s, a, b, d) (snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, s), add_t(t, nm, a, b, d))
        A("attn_norm", E, 1, 1);
        A("attn_q", E, t->n_head * hd, 2);
        if (has_kv) {
            A("attn_k", E, t->n_kv * hd, 2);
            if (!(g4 && !tiny_swa(t, l))) A("attn_v", E, t->n_kv * hd, 2); /* g4 full: k_eq_v */
        }
        A("attn_output", t->n_head * hd, E, 2);
        if (!strcmp(t->arch, "gemma3") || g4) {
            A("attn_q_norm", hd, 1, 1);
            if (has_kv) A("attn_k_norm", hd, 1, 1);
        }
        if (strcmp(t->arch, "gemma")) {
            A("post_attention_norm", E, 1, 1);
            A("post_ffw_norm", E, 1, 1);
        }
        A("ffn_norm", E, 1, 1);
        A("ffn_gate", E, t->n_ff, 2);
        A("ffn_up", E, t->n_ff, 2);
        A("ffn_down", t->n_ff, E, 2);
        if (g4 && t->n_pl) {
            A("inp_gate", E, t->n_pl, 2);
            A("proj", t->n_pl, E, 2);
            A("post_norm", E, 1, 1);
        }
        if (g4) A("layer_output_scale", 1, 1, 1);
#undef A
    }
}

static uint64_t rng_state = 0x12345678abcdefULL;
static float frand(void) {
    return (float)((t_xorshift64(&rng_state) >> 40) & 0xffffff) / 16777216.0f - 0.5f;
}

/* Builds the GGUF into a malloc'd buffer. */
static uint8_t *tiny_build(struct tiny *t, size_t *len) {
    struct gw g = {0};
    char k[128];
    tiny_tensors(t);
    int n_kv = 0;
    struct gw kv = {0};
#define K(s) (snprintf(k, sizeof k, "%s.%s", t->arch, s), n_kv++, k)
    gw_kv_str(&kv, "general.architecture", t->arch), n_kv++;
    gw_kv_u32(&kv, K("block_count"), (uint32_t)t->n_layer);
    gw_kv_u32(&kv, K("embedding_length"), (uint32_t)t->n_embd);
    gw_kv_u32(&kv, K("context_length"), 4096);
    gw_kv_u32(&kv, K("feed_forward_length"), (uint32_t)t->n_ff);
    gw_kv_u32(&kv, K("attention.head_count"), (uint32_t)t->n_head);
    gw_kv_u32(&kv, K("attention.head_count_kv"), (uint32_t)t->n_kv);
    gw_kv_u32(&kv, K("attention.key_length"), (uint32_t)t->hd);
    gw_kv_u32(&kv, K("attention.value_length"), (uint32_t)t->hd);
    gw_kv_f32(&kv, K("attention.layer_norm_rms_epsilon"), 1e-6f);
    if (t->window) gw_kv_u32(&kv, K("attention.sliding_window"), (uint32_t)t->window);
    if (t->period) gw_kv_u32(&kv, K("attention.sliding_window_pattern"), (uint32_t)t->period);
    if (!strcmp(t->arch, "gemma3") || !strcmp(t->arch, "gemma4"))
        gw_kv_f32(&kv, K("rope.freq_base"), 1e6f);
    if (!strcmp(t->arch, "gemma4")) {
        gw_kv_u32(&kv, K("attention.key_length_swa"), (uint32_t)t->hd_swa);
        gw_kv_u32(&kv, K("attention.value_length_swa"), (uint32_t)t->hd_swa);
        gw_kv_u32(&kv, K("rope.dimension_count_swa"), (uint32_t)t->hd_swa);
        gw_kv_u32(&kv, K("attention.shared_kv_layers"), (uint32_t)t->shared);
        gw_kv_u32(&kv, K("embedding_length_per_layer_input"), (uint32_t)t->n_pl);
        gw_kv_f32(&kv, K("final_logit_softcapping"), 30.0f);
        gw_str(&kv, K("attention.sliding_window_pattern"));
        gw_u32(&kv, GGUF_VT_ARRAY);
        gw_u32(&kv, GGUF_VT_BOOL);
        gw_u64(&kv, (uint64_t)t->n_layer);
        for (int l = 0; l < t->n_layer; l++) {
            uint8_t b = (uint8_t)t->swa_arr[l];
            gw_bytes(&kv, &b, 1);
        }
    }
#undef K
    static const char *toks[8] = {"<pad>", "<eos>", "<bos>", "<unk>", "a", "b", "\xe2\x96\x81",
                                  "c"};
    gw_kv_str(&kv, "tokenizer.ggml.model", "llama"), n_kv++;
    gw_str(&kv, "tokenizer.ggml.tokens"), n_kv++;
    gw_u32(&kv, GGUF_VT_ARRAY);
    gw_u32(&kv, GGUF_VT_STRING);
    gw_u64(&kv, 8);
    for (int i = 0; i < 8; i++)
        gw_str(&kv, toks[i]);
    gw_str(&kv, "tokenizer.ggml.scores"), n_kv++;
    gw_u32(&kv, GGUF_VT_ARRAY);
    gw_u32(&kv, GGUF_VT_FLOAT32);
    gw_u64(&kv, 8);
    for (int i = 0; i < 8; i++) {
        float s = -(float)i;
        gw_bytes(&kv, &s, 4);
    }
    gw_str(&kv, "tokenizer.ggml.token_type"), n_kv++;
    gw_u32(&kv, GGUF_VT_ARRAY);
    gw_u32(&kv, GGUF_VT_INT32);
    gw_u64(&kv, 8);
    for (int i = 0; i < 8; i++) {
        int32_t ty = i < 4 ? (i == 3 ? 2 : 3) : 1;
        gw_bytes(&kv, &ty, 4);
    }
    gw_kv_u32(&kv, "tokenizer.ggml.bos_token_id", (uint32_t)t->bos), n_kv++;
    gw_kv_u32(&kv, "tokenizer.ggml.eos_token_id", 1), n_kv++;
    gw_kv_u32(&kv, "tokenizer.ggml.unknown_token_id", 3), n_kv++;
    gw_kv_bool(&kv, "tokenizer.ggml.add_bos_token", 1), n_kv++;
    gw_kv_bool(&kv, "tokenizer.ggml.add_space_prefix", 0), n_kv++;

    gw_bytes(&g, "GGUF", 4);
    gw_u32(&g, 3);
    gw_u64(&g, (uint64_t)t->nt);
    gw_u64(&g, (uint64_t)n_kv);
    gw_bytes(&g, kv.p, kv.n);
    free(kv.p);
    uint64_t off = 0;
    for (int i = 0; i < t->nt; i++) {
        gw_str(&g, t->names[i]);
        gw_u32(&g, (uint32_t)t->nd[i]);
        gw_u64(&g, (uint64_t)t->ne[i][0]);
        if (t->nd[i] == 2) gw_u64(&g, (uint64_t)t->ne[i][1]);
        gw_u32(&g, QT_F32);
        gw_u64(&g, off);
        off += ((uint64_t)(t->ne[i][0] * t->ne[i][1]) * 4 + 31) & ~(uint64_t)31;
    }
    while (g.n % 32)
        gw_bytes(&g, "", 1);
    for (int i = 0; i < t->nt; i++) {
        size_t n = (size_t)(t->ne[i][0] * t->ne[i][1]);
        int is_norm = t->nd[i] == 1;
        for (size_t j = 0; j < n; j++) {
            float v = is_norm ? 1.0f + 0.1f * frand() : 0.4f * frand();
            if (!strcmp(t->names[i], "rope_freqs.weight")) v = j < n / 2 ? 1.0f : 1e30f;
            if (strstr(t->names[i], "layer_output_scale")) v = 0.9f;
            gw_bytes(&g, &v, 4);
        }
        while (g.n % 32)
            gw_bytes(&g, "", 1);
    }
    *len = g.n;
    return g.p;
}

static int tiny_load(struct tiny *t, struct model **m, char *err, size_t errlen,
                     uint8_t **buf) {
    size_t len;
    *buf = tiny_build(t, &len);
    struct gguf_file *f = NULL;
    int rc = gguf_open_buffer(*buf, len, &f, err, errlen);
    T_ASSERTF(rc == 0, "tiny gguf does not open: %s", err);
    return model_load_gguf(f, m, err, errlen);
}

/* Runs a few tokens through the model and checks the logits are finite. */
static void run_tiny(const struct model *m) {
    kern_init(KERN_ISA_AUTO);
    struct kvstore_pool *kv;
    char err[256];
    int ns = kvstore_swa_ring_blocks(m, 4, 6);
    T_ASSERTF(kvstore_create(m, KVSTORE_F16, 4, 4, ns, &kv, err, sizeof err) == 0, "%s", err);
    struct fwd_opts o = {.max_tokens = 6, .max_seqs = 1, .max_logit_rows = 6, .n_threads = 2};
    struct fwd_ctx *f;
    T_ASSERTF(fwd_create(m, kv, &o, &f, err, sizeof err) == 0, "%s", err);
    int32_t full[4] = {0, 1, 2, 3}, *swa = malloc((size_t)(ns + 1) * sizeof(int32_t));
    T_ASSERT(swa);
    for (int i = 0; i < ns; i++) swa[i] = i;
    struct kvstore_seq s = {full, 4, ns ? swa : NULL, ns};
    int32_t toks[12] = {2, 4, 5, 7, 6, 4, 5, 5, 7, 4, 6, 5};
    float lg[6 * 8];
    struct fwd_seq q = {toks, 6, 0, &s, FWD_LOGITS_ALL};
    T_ASSERT(fwd_run(f, &q, 1, lg) == 0);
    for (int i = 0; i < 48; i++) T_ASSERTF(isfinite(lg[i]), "logit %d not finite", i);
    q = (struct fwd_seq){toks + 6, 6, 6, &s, FWD_LOGITS_LAST};
    T_ASSERT(fwd_run(f, &q, 1, lg) == 0);
    for (int i = 0; i < 8; i++) T_ASSERT(isfinite(lg[i]));
    if (m->cfg.final_softcap > 0)
        for (int i = 0; i < 8; i++) T_ASSERT(fabsf(lg[i]) <= m->cfg.final_softcap);
    fwd_destroy(f);
    kvstore_destroy(kv);
    free(swa);
}

/* ---- tests ---- */

static void test_bundled_config(void) {
    if (access(t_model_path(), R_OK) != 0) T_SKIP("model %s not present", t_model_path());
    struct model *m;
    char err[512];
    T_ASSERTF(model_load(t_model_path(), &m, err, sizeof err) == 0, "%s", err);
    const struct model_config *c = &m->cfg;
    T_ASSERT(c->arch == MODEL_ARCH_GEMMA3);
    T_ASSERT(c->n_layer == 18 && c->n_embd == 640 && c->n_vocab == 262144);
    T_ASSERT(c->sliding_window == 512);
    T_ASSERT(fabsf(c->attn_scale - 0.0625f) < 1e-7f);
    T_ASSERT(c->attn_softcap == 0 && c->final_softcap == 0 && c->qk_norm && c->post_norms);
    for (int l = 0; l < 18; l++) {
        const struct model_layer_cfg *lc = &c->layer[l];
        T_ASSERT(lc->n_head == 4 && lc->n_head_kv == 1 && lc->head_dim == 256);
        T_ASSERT(lc->n_ff == 2048 && lc->n_rot == 256 && lc->kv_layer == l && lc->has_kv);
        int global = l == 5 || l == 11 || l == 17;
        T_ASSERTF(lc->sliding == !global, "layer %d sliding %d", l, lc->sliding);
        T_ASSERT(lc->rope_base == (global ? 1e6f : 1e4f) && lc->rope_scale == 1.0f);
    }
    T_ASSERT(m->output.data == m->tok_embd.data); /* tied */
    T_ASSERT(m->tok_embd.type == QT_Q8_0);
    model_free(m);
}

static double rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    T_ASSERT(f);
    char line[256];
    double kb = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = atof(line + 6);
    fclose(f);
    return kb * 1024.0;
}

/* After a forward pass has touched every weight (the LM head reads the whole embedding),
 * the process has grown by at most the file size + 10%: under AVX-512 and AVX2 the Q8_0 head
 * is a panel, under the scalar kernels (no panels) a plain copy in huge pages
 * (cpu_weights.c: copy_head), and either way the file's pages were let go once copied. */
static void rss_after_forward(int isa) {
    T_ASSERT(kern_init(isa) == 0);
    const double rss0 = rss_bytes(); /* (ASan keeps an earlier run's frees in quarantine) */
    struct model *m;
    char err[512];
    T_ASSERTF(model_load(t_model_path(), &m, err, sizeof err) == 0, "%s", err);
    struct kvstore_pool *kv;
    int ns = kvstore_swa_ring_blocks(m, 64, 8);
    T_ASSERT(kvstore_create(m, KVSTORE_F16, 64, 1, ns, &kv, err, sizeof err) == 0);
    struct fwd_opts o = {.max_tokens = 8, .max_seqs = 1, .max_logit_rows = 1, .n_threads = 2};
    struct fwd_ctx *f;
    T_ASSERT(fwd_create(m, kv, &o, &f, err, sizeof err) == 0);
    int32_t full[1] = {0}, swa[16];
    for (int i = 0; i < ns; i++) swa[i] = i;
    struct kvstore_seq s = {full, 1, swa, ns};
    int32_t toks[8] = {2, 818, 5279, 529, 7001, 563, 506, 9079};
    float *lg = malloc((size_t)m->cfg.n_vocab * sizeof(float));
    struct fwd_seq q = {toks, 8, 0, &s, FWD_LOGITS_LAST};
    T_ASSERT(fwd_run(f, &q, 1, lg) == 0);
    double rss = rss_bytes() - rss0, file = (double)m->gguf->map_size;
    printf("    %s: RSS grew by %.1f MiB in load + forward, file %.1f MiB (%.1f%%)\n",
           kern_isa_name(kern_active_isa()), rss / 1048576.0, file / 1048576.0, 100.0 * rss / file);
    T_ASSERTF(rss <= file * 1.10, "RSS %.1f MiB > file %.1f MiB + 10%%", rss / 1048576.0,
              file / 1048576.0);
    free(lg);
    fwd_destroy(f);
    kvstore_destroy(kv);
    model_free(m);
}

static void test_rss_after_forward(void) {
    if (access(t_model_path(), R_OK) != 0) T_SKIP("model %s not present", t_model_path());
    rss_after_forward(KERN_ISA_AUTO);
    if (kern_active_isa() > KERN_ISA_AVX2) rss_after_forward(KERN_ISA_AVX2);
    rss_after_forward(KERN_ISA_REF); /* no panels: the head is a plain copy */
    kern_init(KERN_ISA_AUTO);
}

static void test_tiny_gemma3(void) {
    struct tiny t = {.arch = "gemma3", .n_layer = 4, .n_embd = 64, .n_head = 2, .n_kv = 1,
                     .hd = 32, .n_ff = 96, .window = 3, .period = 2, .bos = 2};
    struct model *m;
    uint8_t *buf;
    char err[512];
    T_ASSERTF(tiny_load(&t, &m, err, sizeof err, &buf) == 0, "%s", err);
    T_ASSERT(m->cfg.layer[0].sliding && !m->cfg.layer[1].sliding && m->cfg.layer[2].sliding);
    T_ASSERT(m->cfg.layer[0].rope_base == 10000.0f && m->cfg.layer[1].rope_base == 1e6f);
    T_ASSERT(fabsf(m->cfg.attn_scale - 1.0f / sqrtf(32.0f)) < 1e-7f);
    T_ASSERT(m->cfg.final_softcap == 0.0f && m->cfg.sliding_window == 3);
    run_tiny(m);
    model_free(m);
    free(buf);
}

/* Gemma 2 defaults: window 4096, period 2, softcaps 50/30; 46 layers take the 27B scale. */
static void test_tiny_gemma2_defaults(void) {
    struct tiny t = {.arch = "gemma2", .n_layer = 46, .n_embd = 32, .n_head = 2, .n_kv = 1,
                     .hd = 8, .n_ff = 32, .bos = 2};
    struct model *m;
    uint8_t *buf;
    char err[512];
    T_ASSERTF(tiny_load(&t, &m, err, sizeof err, &buf) == 0, "%s", err);
    T_ASSERT(m->cfg.sliding_window == 4096);
    T_ASSERT(m->cfg.attn_softcap == 50.0f && m->cfg.final_softcap == 30.0f);
    T_ASSERT(m->cfg.layer[0].sliding && !m->cfg.layer[1].sliding);
    T_ASSERT(!m->cfg.qk_norm && m->cfg.post_norms);
    /* 27B rule: 1/sqrt(n_embd / n_head) = 1/4, not 1/sqrt(head_dim) */
    T_ASSERTF(fabsf(m->cfg.attn_scale - 0.25f) < 1e-7f, "scale %g", (double)m->cfg.attn_scale);
    run_tiny(m);
    model_free(m);
    free(buf);
}

static void test_tiny_gemma1(void) {
    struct tiny t = {.arch = "gemma", .n_layer = 2, .n_embd = 32, .n_head = 2, .n_kv = 1,
                     .hd = 16, .n_ff = 32, .bos = 2};
    struct model *m;
    uint8_t *buf;
    char err[512];
    T_ASSERTF(tiny_load(&t, &m, err, sizeof err, &buf) == 0, "%s", err);
    T_ASSERT(m->cfg.sliding_window == 0 && !m->cfg.post_norms && !m->cfg.qk_norm);
    T_ASSERT(m->cfg.attn_softcap == 0 && m->cfg.final_softcap == 0);
    run_tiny(m);
    model_free(m);
    free(buf);
}

/* Gemma 4: bool pattern, head dims per layer type, KV sharing with llama.cpp's reuse rule,
 * k_eq_v on full layers, per-layer embeddings, rope_freqs, layer output scale. */
static void test_tiny_gemma4(void) {
    static const int swa[6] = {1, 1, 0, 1, 1, 0};
    struct tiny t = {.arch = "gemma4", .n_layer = 6, .n_embd = 32, .n_head = 2, .n_kv = 1,
                     .hd = 32, .hd_swa = 16, .n_ff = 48, .window = 4, .shared = 3, .n_pl = 8,
                     .swa_arr = swa, .bos = 2};
    struct model *m;
    uint8_t *buf;
    char err[512];
    T_ASSERTF(tiny_load(&t, &m, err, sizeof err, &buf) == 0, "%s", err);
    const struct model_config *c = &m->cfg;
    T_ASSERT(c->attn_scale == 1.0f && c->v_norm && c->n_embd_pl == 8);
    T_ASSERT(c->layer[0].head_dim == 16 && c->layer[2].head_dim == 32);
    /* kv_from_start = 3: shared sliding layers read layer 1, shared full layers layer 2 */
    T_ASSERT(c->layer[3].kv_layer == 1 && c->layer[4].kv_layer == 1 && c->layer[5].kv_layer == 2);
    T_ASSERT(!c->layer[3].has_kv && c->layer[2].has_kv);
    T_ASSERT(c->layer[2].k_eq_v && !c->layer[1].k_eq_v);
    T_ASSERT(m->layer[2].rope_freqs && !m->layer[1].rope_freqs);
    T_ASSERT(m->layer[0].out_scale == 0.9f);
    run_tiny(m);
    model_free(m);
    free(buf);
}

static void expect_error(struct tiny *t, const char *needle) {
    struct model *m = NULL;
    uint8_t *buf;
    char err[512] = "";
    int rc = tiny_load(t, &m, err, sizeof err, &buf);
    T_ASSERTF(rc != 0 && m == NULL, "loaded although it should fail with '%s'", needle);
    T_ASSERTF(strstr(err, needle) != NULL, "message '%s' lacks '%s'", err, needle);
    free(buf);
}

static void test_unsupported_arch(void) {
    struct tiny t = {.arch = "llama", .n_layer = 1, .n_embd = 32, .n_head = 2, .n_kv = 1,
                     .hd = 16, .n_ff = 32, .bos = 2};
    expect_error(&t, "unsupported architecture llama");
}

static void test_bad_shape(void) {
    struct tiny t = {.arch = "gemma3", .n_layer = 2, .n_embd = 32, .n_head = 2, .n_kv = 1,
                     .hd = 16, .n_ff = 32, .bos = 2, .bad_shape = "blk.1.attn_q.weight"};
    expect_error(&t, "tensor blk.1.attn_q.weight has shape {32, 33}, expected {32, 32}");
}

static void test_missing_tensor(void) {
    struct tiny t = {.arch = "gemma3", .n_layer = 2, .n_embd = 32, .n_head = 2, .n_kv = 1,
                     .hd = 16, .n_ff = 32, .bos = 2, .skip = "blk.1.ffn_down.weight"};
    expect_error(&t, "tensor blk.1.ffn_down.weight is missing");
}

static void test_special_token_range(void) {
    struct tiny t = {.arch = "gemma3", .n_layer = 2, .n_embd = 32, .n_head = 2, .n_kv = 1,
                     .hd = 16, .n_ff = 32, .bos = 100};
    struct model *m = NULL;
    uint8_t *buf;
    char err[512] = "";
    int rc = tiny_load(&t, &m, err, sizeof err, &buf);
    T_ASSERTF(rc != 0 && m == NULL, "loaded with bos id 100 in a vocab of 8");
    T_ASSERTF(strstr(err, "bos_token_id") != NULL, "message '%s' does not name the key", err);
    free(buf);
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {
        T_CASE(test_bundled_config),
        T_CASE(test_rss_after_forward),
        T_CASE(test_tiny_gemma3),
        T_CASE(test_tiny_gemma2_defaults),
        T_CASE(test_tiny_gemma1),
        T_CASE(test_tiny_gemma4),
        T_CASE(test_unsupported_arch),
        T_CASE(test_bad_shape),
        T_CASE(test_missing_tensor),
        T_CASE(test_special_token_range),
        {0},
    };
    return t_main(argc, argv, cases);
}
