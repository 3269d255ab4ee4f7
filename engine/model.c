/*
 * model — configuration from GGUF metadata and weight views into the mapping.
 *
 * The rules (defaults, sliding patterns, attention scale, KV reuse) follow llama.cpp's
 * loaders for gemma, gemma2, gemma3 and gemma4 (see shared/docs/gemma-gguf-facts.md §3–§5).
 * Every tensor the forward pass reads is looked up here once and its shape checked against
 * the configuration, so fwd_run never meets a surprise.
 */
#include "engine/model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/strbuf.h"
#include "engine/gguf.h"
#include "engine/kernels/quant.h"
#include "engine/tokenizer.h"

/* Loader state: the model being built, the arch prefix for keys, the error buffer. */
struct ld {
    struct model *m;
    const struct gguf_file *f;
    const char *arch;       /* "gemma3" */
    char *err;
    size_t errlen;
    float *arena;           /* owned_f32: converted F16/BF16 norm vectors */
    size_t arena_n, arena_used; /* floats */
};

static void ld_err(struct ld *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ld_err(struct ld *L, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    strbuf_vsetf(L->err, L->errlen, fmt, ap);
    va_end(ap);
}

const char *model_arch_name(enum model_arch a) {
    switch (a) {
    case MODEL_ARCH_GEMMA: return "gemma";
    case MODEL_ARCH_GEMMA2: return "gemma2";
    case MODEL_ARCH_GEMMA3: return "gemma3";
    case MODEL_ARCH_GEMMA4: return "gemma4";
    }
    return "unknown";
}

/* ---- metadata helpers ---- */

static void key_name(const struct ld *L, const char *suffix, char *buf, size_t n) {
    snprintf(buf, n, "%s.%s", L->arch, suffix);
}

/* Reads {arch}.suffix as u32. Returns 1 found, 0 absent, -1 error (message set). */
static int get_u32(struct ld *L, const char *suffix, uint32_t *out) {
    char k[160];
    key_name(L, suffix, k, sizeof k);
    int rc = gguf_get_u32(L->f, k, out);
    if (rc == GGUF_ENOTFOUND) return 0;
    if (rc != 0) {
        ld_err(L, "metadata %s: %s", k, gguf_strerror(rc));
        return -1;
    }
    return 1;
}

static int get_f32(struct ld *L, const char *suffix, float *out) {
    char k[160];
    key_name(L, suffix, k, sizeof k);
    int rc = gguf_get_f32(L->f, k, out);
    if (rc == GGUF_ENOTFOUND) return 0;
    if (rc != 0) {
        ld_err(L, "metadata %s: %s", k, gguf_strerror(rc));
        return -1;
    }
    if (!isfinite(*out)) {
        ld_err(L, "metadata %s: not a finite number", k);
        return -1;
    }
    return 1;
}

static int req_u32(struct ld *L, const char *suffix, uint32_t *out) {
    int rc = get_u32(L, suffix, out);
    if (rc == 0) {
        char k[160];
        key_name(L, suffix, k, sizeof k);
        ld_err(L, "required metadata key %s is missing", k);
        return -1;
    }
    return rc < 0 ? -1 : 0;
}

/* A value that is a scalar or a per-layer array (llama.cpp get_key_or_arr). Fills
 * out[0..n_layer). Returns 1 found, 0 absent, -1 error. */
static int get_u32_or_arr(struct ld *L, const char *suffix, int n_layer, int *out) {
    char k[160];
    key_name(L, suffix, k, sizeof k);
    const struct gguf_kv *kv = gguf_find(L->f, k);
    if (!kv) return 0;
    if (kv->type == GGUF_VT_ARRAY) {
        if (kv->arr_n != (uint64_t)n_layer) {
            ld_err(L, "metadata %s: array has %llu entries, expected block_count %d", k,
                   (unsigned long long)kv->arr_n, n_layer);
            return -1;
        }
        for (int i = 0; i < n_layer; i++) {
            int64_t v;
            if (gguf_arr_i64(kv, (uint64_t)i, &v) != 0 || v < 0 || v > (1 << 24)) {
                ld_err(L, "metadata %s[%d]: not a valid count", k, i);
                return -1;
            }
            out[i] = (int)v;
        }
        return 1;
    }
    uint32_t v;
    int rc = gguf_get_u32(L->f, k, &v);
    if (rc != 0 || v > (1u << 24)) {
        ld_err(L, "metadata %s: %s", k, rc ? gguf_strerror(rc) : "value too large");
        return -1;
    }
    for (int i = 0; i < n_layer; i++) out[i] = (int)v;
    return 1;
}

/* ---- tensor helpers ---- */

static const struct gguf_tensor *find_t(struct ld *L, const char *name) {
    return gguf_find_tensor(L->f, name);
}

static void shape_str(const struct gguf_tensor *t, char *buf, size_t n) {
    if (t->n_dims <= 1)
        snprintf(buf, n, "{%lld}", (long long)t->ne[0]);
    else if (t->n_dims == 2)
        snprintf(buf, n, "{%lld, %lld}", (long long)t->ne[0], (long long)t->ne[1]);
    else
        snprintf(buf, n, "{%lld, %lld, %lld, %lld}", (long long)t->ne[0], (long long)t->ne[1],
                 (long long)t->ne[2], (long long)t->ne[3]);
}

/* A 2-D weight {ne0, ne1}. Returns 1 found, 0 absent (only when !required), -1 error. */
static int get_w(struct ld *L, const char *name, int64_t ne0, int64_t ne1, int required,
                 struct kern_weight *w) {
    memset(w, 0, sizeof *w);
    const struct gguf_tensor *t = find_t(L, name);
    if (!t) {
        if (!required) return 0;
        ld_err(L, "tensor %s is missing", name);
        return -1;
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1) {
        char s[96];
        shape_str(t, s, sizeof s);
        ld_err(L, "tensor %s has shape %s, expected {%lld, %lld}", name, s, (long long)ne0,
               (long long)ne1);
        return -1;
    }
    const struct quant_info *qi = quant_info(t->type);
    if (!qi || !qi->supported) {
        ld_err(L, "tensor %s has unsupported type %s", name, qi ? qi->name : "(unknown)");
        return -1;
    }
    size_t rb = quant_row_size(t->type, ne0);
    if (rb == 0 || t->size < rb * (uint64_t)ne1) {
        ld_err(L, "tensor %s: row of %lld elements does not fit type %s", name, (long long)ne0,
               qi->name);
        return -1;
    }
    w->type = t->type;
    w->n_in = ne0;
    w->n_out = ne1;
    w->row_bytes = rb;
    w->data = t->data;
    return 1;
}

/* A 1-D f32 vector of n elements (F32 in place; F16/BF16 converted into the arena). */
static int get_vec(struct ld *L, const char *name, int64_t n, int required, const float **out) {
    *out = NULL;
    const struct gguf_tensor *t = find_t(L, name);
    if (!t) {
        if (!required) return 0;
        ld_err(L, "tensor %s is missing", name);
        return -1;
    }
    if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1) {
        char s[96];
        shape_str(t, s, sizeof s);
        ld_err(L, "tensor %s has shape %s, expected {%lld}", name, s, (long long)n);
        return -1;
    }
    if (t->type == QT_F32) {
        if (((uintptr_t)t->data & 3) != 0) {
            ld_err(L, "tensor %s: F32 data is not 4-byte aligned", name);
            return -1;
        }
        *out = (const float *)t->data;
        return 1;
    }
    if (t->type != QT_F16 && t->type != QT_BF16) {
        const struct quant_info *qi = quant_info(t->type);
        ld_err(L, "tensor %s: type %s not allowed for a vector (F32, F16, BF16)", name,
               qi ? qi->name : "(unknown)");
        return -1;
    }
    if (L->arena_used + (size_t)n > L->arena_n) {
        ld_err(L, "tensor %s: internal arena too small", name);
        return -1;
    }
    float *dst = L->arena + L->arena_used;
    L->arena_used += (size_t)n;
    quant_dequant_row_ref(t->type, t->data, dst, n);
    *out = dst;
    return 1;
}

/* ---- configuration ---- */

static int parse_arch(struct ld *L, enum model_arch *a) {
    const char *s;
    size_t n;
    int rc = gguf_get_str(L->f, "general.architecture", &s, &n);
    if (rc != 0) {
        ld_err(L, "metadata general.architecture: %s", gguf_strerror(rc));
        return -1;
    }
    static const struct { const char *name; enum model_arch a; } tab[] = {
        {"gemma", MODEL_ARCH_GEMMA}, {"gemma2", MODEL_ARCH_GEMMA2},
        {"gemma3", MODEL_ARCH_GEMMA3}, {"gemma4", MODEL_ARCH_GEMMA4},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
        if (strlen(tab[i].name) == n && memcmp(tab[i].name, s, n) == 0) {
            *a = tab[i].a;
            L->arch = tab[i].name;
            return 0;
        }
    }
    char shown[64];
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < sizeof shown; i++)
        shown[k++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    shown[k] = 0;
    ld_err(L, "unsupported architecture %s (supported: gemma, gemma2, gemma3, gemma4)", shown);
    return -1;
}

/* Sliding pattern: a bool array (true = sliding) or a scalar period, else the default
 * period (llama.cpp load_swa_pattern / set_swa_pattern, dense_first = false). */
static int read_swa_pattern(struct ld *L, int n_layer, int def_period, int required_array) {
    struct model_config *c = &L->m->cfg;
    char k[160];
    key_name(L, "attention.sliding_window_pattern", k, sizeof k);
    const struct gguf_kv *kv = gguf_find(L->f, k);
    if (kv && kv->type == GGUF_VT_ARRAY) {
        if (kv->arr_n != (uint64_t)n_layer) {
            ld_err(L, "metadata %s: %llu entries, expected %d", k, (unsigned long long)kv->arr_n,
                   n_layer);
            return -1;
        }
        for (int i = 0; i < n_layer; i++) {
            int64_t v;
            if (gguf_arr_i64(kv, (uint64_t)i, &v) != 0) {
                ld_err(L, "metadata %s[%d]: not a bool", k, i);
                return -1;
            }
            c->layer[i].sliding = v != 0;
        }
        return 0;
    }
    if (required_array) {
        ld_err(L, "required metadata key %s (per-layer bool array) is missing", k);
        return -1;
    }
    uint32_t period = (uint32_t)def_period;
    if (kv && get_u32(L, "attention.sliding_window_pattern", &period) < 0) return -1;
    for (int i = 0; i < n_layer; i++)
        c->layer[i].sliding = period == 0 || ((uint32_t)i % period < period - 1);
    return 0;
}

static int load_config(struct ld *L) {
    struct model_config *c = &L->m->cfg;
    uint32_t u;
    int rc;

    if (req_u32(L, "block_count", &u) < 0) return -1;
    if (u == 0 || u > MODEL_MAX_LAYERS) {
        ld_err(L, "metadata %s.block_count = %u out of range 1..%d", L->arch, u,
               MODEL_MAX_LAYERS);
        return -1;
    }
    c->n_layer = (int)u;
    const int nl = c->n_layer;
    if (req_u32(L, "embedding_length", &u) < 0) return -1;
    if (u == 0 || u > (1u << 20)) {
        ld_err(L, "metadata %s.embedding_length = %u out of range", L->arch, u);
        return -1;
    }
    c->n_embd = (int)u;
    if (req_u32(L, "context_length", &u) < 0) return -1;
    c->n_ctx_train = u > (1u << 30) ? (1 << 30) : (int)u;
    if ((rc = get_f32(L, "attention.layer_norm_rms_epsilon", &c->eps)) <= 0) {
        if (rc == 0) ld_err(L, "required metadata key %s.attention.layer_norm_rms_epsilon "
                               "is missing", L->arch);
        return -1;
    }

    int tmp[MODEL_MAX_LAYERS];
    /* heads */
    rc = get_u32_or_arr(L, "attention.head_count", nl, tmp);
    if (rc <= 0) {
        if (rc == 0) ld_err(L, "required metadata key %s.attention.head_count is missing",
                            L->arch);
        return -1;
    }
    for (int i = 0; i < nl; i++) c->layer[i].n_head = tmp[i];
    rc = get_u32_or_arr(L, "attention.head_count_kv", nl, tmp);
    if (rc < 0) return -1;
    for (int i = 0; i < nl; i++) c->layer[i].n_head_kv = rc ? tmp[i] : c->layer[i].n_head;
    rc = get_u32_or_arr(L, "feed_forward_length", nl, tmp);
    if (rc <= 0) {
        if (rc == 0) ld_err(L, "required metadata key %s.feed_forward_length is missing",
                            L->arch);
        return -1;
    }
    for (int i = 0; i < nl; i++) c->layer[i].n_ff = tmp[i];
    for (int i = 0; i < nl; i++) {
        struct model_layer_cfg *lc = &c->layer[i];
        if (lc->n_head <= 0 || lc->n_head_kv <= 0 || lc->n_head % lc->n_head_kv != 0) {
            ld_err(L, "layer %d: head_count %d / head_count_kv %d invalid (need kv > 0 "
                      "dividing head_count)", i, lc->n_head, lc->n_head_kv);
            return -1;
        }
        if (lc->n_ff <= 0) {
            ld_err(L, "layer %d: feed_forward_length %d invalid", i, lc->n_ff);
            return -1;
        }
    }

    /* head dims and rotary dims (llama.cpp: key_length defaults to n_embd / n_head) */
    uint32_t hd_k = (uint32_t)(c->n_embd / c->layer[0].n_head);
    uint32_t hd_v = hd_k;
    if (get_u32(L, "attention.key_length", &hd_k) < 0) return -1;
    if (get_u32(L, "attention.value_length", &hd_v) < 0) return -1;
    uint32_t hd_k_swa = hd_k, hd_v_swa = hd_v;
    if (get_u32(L, "attention.key_length_swa", &hd_k_swa) < 0) return -1;
    if (get_u32(L, "attention.value_length_swa", &hd_v_swa) < 0) return -1;
    uint32_t n_rot = hd_k;
    if (get_u32(L, "rope.dimension_count", &n_rot) < 0) return -1;
    uint32_t n_rot_swa = n_rot;
    if (get_u32(L, "rope.dimension_count_swa", &n_rot_swa) < 0) return -1;

    /* RoPE bases and scaling */
    float base = 10000.0f, scale_factor = 0.0f;
    if (get_f32(L, "rope.freq_base", &base) < 0) return -1;
    if ((rc = get_f32(L, "rope.scaling.factor", &scale_factor)) < 0) return -1;
    if (rc == 0 && get_f32(L, "rope.scale_linear", &scale_factor) < 0) return -1;
    {
        char k[160];
        const char *s;
        size_t n;
        key_name(L, "rope.scaling.type", k, sizeof k);
        if (gguf_get_str(L->f, k, &s, &n) == 0 &&
            !((n == 6 && memcmp(s, "linear", 6) == 0) || (n == 4 && memcmp(s, "none", 4) == 0))) {
            ld_err(L, "metadata %s: only linear RoPE scaling is supported", k);
            return -1;
        }
    }
    float freq_scale = scale_factor == 0.0f ? 1.0f : 1.0f / scale_factor;
    float base_swa = 10000.0f, scale_swa = 1.0f;

    /* per-architecture rules */
    c->attn_softcap = 0.0f;
    c->final_softcap = 0.0f;
    c->sliding_window = 0;
    c->qk_norm = c->arch == MODEL_ARCH_GEMMA3 || c->arch == MODEL_ARCH_GEMMA4;
    c->post_norms = c->arch != MODEL_ARCH_GEMMA;
    c->v_norm = c->arch == MODEL_ARCH_GEMMA4;
    int shared_kv = 0;
    for (int i = 0; i < nl; i++) c->layer[i].sliding = 0;

    switch (c->arch) {
    case MODEL_ARCH_GEMMA:
        c->attn_scale = 1.0f / sqrtf((float)hd_k);
        break;
    case MODEL_ARCH_GEMMA2: {
        uint32_t w = 4096;
        if (read_swa_pattern(L, nl, 2, 0) < 0) return -1;
        base_swa = base;
        scale_swa = freq_scale;
        if (get_f32(L, "rope.freq_base_swa", &base_swa) < 0) return -1;
        if (get_u32(L, "attention.sliding_window", &w) < 0) return -1;
        c->sliding_window = (int)w;
        c->attn_softcap = 50.0f;
        c->final_softcap = 30.0f;
        if (get_f32(L, "attn_logit_softcapping", &c->attn_softcap) < 0) return -1;
        if (get_f32(L, "final_logit_softcapping", &c->final_softcap) < 0) return -1;
        c->attn_scale = nl == 46 ? 1.0f / sqrtf((float)(c->n_embd / c->layer[0].n_head))
                                 : 1.0f / sqrtf((float)hd_k);
        break;
    }
    case MODEL_ARCH_GEMMA3: {
        uint32_t w = 0;
        if ((rc = get_u32(L, "attention.sliding_window", &w)) < 0) return -1;
        if (rc == 1 && w > 0) {
            c->sliding_window = (int)w;
            if (read_swa_pattern(L, nl, 6, 0) < 0) return -1;
            if (get_f32(L, "rope.freq_base_swa", &base_swa) < 0) return -1;
        }
        if (get_f32(L, "final_logit_softcapping", &c->final_softcap) < 0) return -1;
        c->attn_scale = nl == 62 ? 1.0f / sqrtf((float)(c->n_embd / c->layer[0].n_head))
                                 : 1.0f / sqrtf((float)hd_k);
        break;
    }
    case MODEL_ARCH_GEMMA4: {
        uint32_t w = 0, sh = 0, npl = 0;
        if (read_swa_pattern(L, nl, 0, 1) < 0) return -1;
        if (get_u32(L, "attention.shared_kv_layers", &sh) < 0) return -1;
        if (get_f32(L, "rope.freq_base_swa", &base_swa) < 0) return -1;
        if (req_u32(L, "attention.sliding_window", &w) < 0) return -1;
        if (req_u32(L, "embedding_length_per_layer_input", &npl) < 0) return -1;
        /* llama.cpp keeps the struct default of 30 unless the file says otherwise */
        c->final_softcap = 30.0f;
        if (get_f32(L, "final_logit_softcapping", &c->final_softcap) < 0) return -1;
        c->sliding_window = (int)w;
        c->n_embd_pl = (int)npl;
        c->attn_scale = 1.0f;
        if (sh >= (uint32_t)nl) {
            ld_err(L, "metadata %s.attention.shared_kv_layers = %u >= block_count %d", L->arch,
                   sh, nl);
            return -1;
        }
        shared_kv = (int)sh;
        if (hd_k != hd_v || hd_k_swa != hd_v_swa) {
            ld_err(L, "gemma4 requires key_length == value_length (and the _swa pair)");
            return -1;
        }
        break;
    }
    }
    if (c->sliding_window < 0 || c->sliding_window > (1 << 30)) {
        ld_err(L, "sliding_window out of range");
        return -1;
    }
    /* No window means no sliding layers, and no sliding layers means no window. */
    int any_swa = 0;
    if (c->sliding_window == 0)
        for (int i = 0; i < nl; i++) c->layer[i].sliding = 0;
    for (int i = 0; i < nl; i++) any_swa |= c->layer[i].sliding;
    if (!any_swa) c->sliding_window = 0;

    /* per-layer derived values */
    int kv_from_start = nl - shared_kv;
    if (shared_kv > 0 && kv_from_start < 2) {
        ld_err(L, "shared_kv_layers leaves %d own-KV layers, need >= 2", kv_from_start);
        return -1;
    }
    for (int i = 0; i < nl; i++) {
        struct model_layer_cfg *lc = &c->layer[i];
        int sw = lc->sliding;
        lc->head_dim = (int)(sw ? hd_k_swa : hd_k);
        lc->head_dim_v = (int)(sw ? hd_v_swa : hd_v);
        lc->n_rot = (int)(sw ? n_rot_swa : n_rot);
        lc->rope_base = sw ? base_swa : base;
        lc->rope_scale = sw ? scale_swa : freq_scale;
        if (lc->head_dim <= 0 || lc->head_dim > 4096 || lc->head_dim_v <= 0 ||
            lc->head_dim_v > 4096 || (lc->head_dim & 1)) {
            ld_err(L, "layer %d: head dim %d / %d invalid", i, lc->head_dim, lc->head_dim_v);
            return -1;
        }
        if (lc->n_rot <= 0 || lc->n_rot > lc->head_dim || (lc->n_rot & 1)) {
            ld_err(L, "layer %d: rope dimension_count %d invalid for head dim %d", i, lc->n_rot,
                   lc->head_dim);
            return -1;
        }
        if (!(lc->rope_base > 0.0f) || !(lc->rope_scale > 0.0f)) {
            ld_err(L, "layer %d: RoPE base %g / scale %g invalid", i, (double)lc->rope_base,
                   (double)lc->rope_scale);
            return -1;
        }
        if (i < kv_from_start) {
            lc->kv_layer = i;
            lc->has_kv = 1;
        } else {
            lc->kv_layer = kv_from_start - (sw ? 2 : 1);
            lc->has_kv = 0;
        }
    }
    for (int i = kv_from_start; i < nl; i++) {
        const struct model_layer_cfg *lc = &c->layer[i], *src = &c->layer[lc->kv_layer];
        if (src->sliding != lc->sliding || src->head_dim != lc->head_dim ||
            src->head_dim_v != lc->head_dim_v || src->n_head_kv != lc->n_head_kv) {
            ld_err(L, "layer %d shares the KV of layer %d, but their attention types or KV "
                      "shapes differ", i, lc->kv_layer);
            return -1;
        }
    }
    c->embd_scale = sqrtf((float)c->n_embd);
    return 0;
}

/* ---- tensors ---- */

static int load_tensors(struct ld *L) {
    struct model *m = L->m;
    struct model_config *c = &m->cfg;
    const int64_t E = c->n_embd, V = c->n_vocab;
    char nm[96];

    if (get_w(L, "token_embd.weight", E, V, 1, &m->tok_embd) < 0) return -1;
    int rc = get_w(L, "output.weight", E, V, 0, &m->output);
    if (rc < 0) return -1;
    if (rc == 0 || c->arch == MODEL_ARCH_GEMMA || c->arch == MODEL_ARCH_GEMMA2)
        m->output = m->tok_embd; /* tied (Gemma 1/2 always use token_embd) */
    if (get_vec(L, "output_norm.weight", E, 1, &m->output_norm) < 0) return -1;

    if (c->arch == MODEL_ARCH_GEMMA4 && c->n_embd_pl > 0) {
        int64_t P = (int64_t)c->n_embd_pl * c->n_layer;
        if (get_w(L, "per_layer_token_embd.weight", P, V, 1, &m->per_layer_tok_embd) < 0 ||
            get_w(L, "per_layer_model_proj.weight", E, P, 1, &m->per_layer_model_proj) < 0 ||
            get_vec(L, "per_layer_proj_norm.weight", c->n_embd_pl, 1,
                    &m->per_layer_proj_norm) < 0)
            return -1;
    }
    const float *rope_freqs_global = NULL;

    for (int i = 0; i < c->n_layer; i++) {
        struct model_layer_cfg *lc = &c->layer[i];
        struct model_layer_w *w = &m->layer[i];
        const int64_t hd = lc->head_dim, hdv = lc->head_dim_v;
        const int64_t nq = lc->n_head * hd, nk = lc->n_head_kv * hd, nv = lc->n_head_kv * hdv;
#define TN(s) (snprintf(nm, sizeof nm, "blk.%d.%s.weight", i, s), nm)
        if (get_vec(L, TN("attn_norm"), E, 1, &w->attn_norm) < 0) return -1;
        if (get_w(L, TN("attn_q"), E, nq, 1, &w->wq) < 0) return -1;
        if (lc->has_kv) {
            if (get_w(L, TN("attn_k"), E, nk, 1, &w->wk) < 0) return -1;
            rc = get_w(L, TN("attn_v"), E, nv, c->arch != MODEL_ARCH_GEMMA4, &w->wv);
            if (rc < 0) return -1;
            if (rc == 0) {
                if (hd != hdv) {
                    ld_err(L, "layer %d: attn_v is missing (k_eq_v) but key and value head "
                              "dims differ", i);
                    return -1;
                }
                lc->k_eq_v = 1;
            }
        } else if (find_t(L, TN("attn_k")) || find_t(L, TN("attn_v"))) {
            LOG_W("model", 0, "layer %d shares layer %d's KV; its attn_k/attn_v are ignored", i,
                  lc->kv_layer);
        }
        if (get_w(L, TN("attn_output"), lc->n_head * hdv, E, 1, &w->wo) < 0) return -1;
        if (c->qk_norm) {
            if (get_vec(L, TN("attn_q_norm"), hd, 1, &w->q_norm) < 0) return -1;
            if (get_vec(L, TN("attn_k_norm"), hd, lc->has_kv, &w->k_norm) < 0) return -1;
        }
        if (c->post_norms) {
            if (get_vec(L, TN("post_attention_norm"), E, 1, &w->post_attn_norm) < 0 ||
                get_vec(L, TN("post_ffw_norm"), E, 1, &w->post_ffw_norm) < 0)
                return -1;
        }
        if (get_vec(L, TN("ffn_norm"), E, 1, &w->ffn_norm) < 0) return -1;
        if (get_w(L, TN("ffn_gate"), E, lc->n_ff, 1, &w->gate) < 0 ||
            get_w(L, TN("ffn_up"), E, lc->n_ff, 1, &w->up) < 0 ||
            get_w(L, TN("ffn_down"), lc->n_ff, E, 1, &w->down) < 0)
            return -1;
        w->out_scale = 1.0f;
        if (c->arch == MODEL_ARCH_GEMMA4) {
            if (find_t(L, TN("ffn_gate_inp"))) {
                ld_err(L, "layer %d: Gemma 4 mixture-of-experts layers are not supported", i);
                return -1;
            }
            if (find_t(L, TN("attn_qkv"))) {
                ld_err(L, "layer %d: fused attn_qkv tensors are not supported", i);
                return -1;
            }
            if (c->n_embd_pl > 0) {
                if (get_w(L, TN("inp_gate"), E, c->n_embd_pl, 1, &w->inp_gate) < 0 ||
                    get_w(L, TN("proj"), c->n_embd_pl, E, 1, &w->proj) < 0 ||
                    get_vec(L, TN("post_norm"), E, 1, &w->post_norm) < 0)
                    return -1;
            }
            const float *os = NULL;
            if (get_vec(L, TN("layer_output_scale"), 1, 0, &os) < 0) return -1;
            if (os) {
                if (!isfinite(os[0])) {
                    ld_err(L, "tensor %s is not finite", nm);
                    return -1;
                }
                w->out_scale = os[0];
            }
            if (!lc->sliding) {
                /* one global tensor, used by every full-attention layer */
                if (!rope_freqs_global) {
                    const struct gguf_tensor *t = find_t(L, "rope_freqs.weight");
                    if (t && get_vec(L, "rope_freqs.weight", t->ne[0], 1, &rope_freqs_global) < 0)
                        return -1;
                    if (t && t->ne[0] < lc->n_rot / 2) {
                        ld_err(L, "tensor rope_freqs.weight has %lld entries, need >= %d",
                               (long long)t->ne[0], lc->n_rot / 2);
                        return -1;
                    }
                }
                w->rope_freqs = rope_freqs_global;
            }
        }
#undef TN
    }
    return 0;
}

/* Sum of elements of the 1-D F16/BF16 tensors: the arena they may be converted into. */
static size_t arena_need(const struct gguf_file *f) {
    size_t n = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        if ((t->type == QT_F16 || t->type == QT_BF16) && t->ne[1] == 1 && t->ne[2] == 1 &&
            t->ne[3] == 1)
            n += (size_t)t->ne[0];
    }
    return n;
}

static int check_special(struct ld *L) {
    static const char *keys[] = {
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
        "tokenizer.ggml.eot_token_id", "tokenizer.ggml.seperator_token_id",
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int64_t v;
        int rc = gguf_get_i64(L->f, keys[i], &v);
        if (rc == GGUF_ENOTFOUND) continue;
        if (rc != 0) {
            ld_err(L, "metadata %s: %s", keys[i], gguf_strerror(rc));
            return -1;
        }
        /* llama.cpp treats -1 (as u32: 0xffffffff) as "none" */
        if (v == -1 || v == 0xffffffffLL) continue;
        if (v < 0 || v >= L->m->cfg.n_vocab) {
            ld_err(L, "metadata %s = %lld is outside the vocabulary (%d tokens)", keys[i],
                   (long long)v, L->m->cfg.n_vocab);
            return -1;
        }
    }
    return 0;
}

int model_load_gguf(struct gguf_file *f, struct model **out, char *err, size_t errlen) {
    *out = NULL;
    if (err && errlen) err[0] = 0;
    struct model *m = calloc(1, sizeof *m);
    if (!m) {
        gguf_close(f);
        if (err && errlen) snprintf(err, errlen, "out of memory");
        return MODEL_ENOMEM;
    }
    m->gguf = f;
    struct ld L = {.m = m, .f = f, .err = err, .errlen = errlen};
    int st = MODEL_EFORMAT;

    if (parse_arch(&L, &m->cfg.arch) < 0) {
        st = MODEL_EUNSUPPORTED;
        goto fail;
    }
    if (load_config(&L) < 0) goto fail;

    {
        char terr[256] = "";
        int rc = tok_create(f, &m->vocab, terr, sizeof terr);
        if (rc != 0) {
            ld_err(&L, "tokenizer: %s", terr[0] ? terr : "cannot build the vocabulary");
            goto fail;
        }
    }
    m->cfg.n_vocab = tok_n_vocab(m->vocab);
    if (m->cfg.n_vocab <= 0) {
        ld_err(&L, "tokenizer: empty vocabulary");
        goto fail;
    }
    if (check_special(&L) < 0) goto fail;
    if (tok_bos(m->vocab) >= m->cfg.n_vocab || tok_eos(m->vocab) >= m->cfg.n_vocab) {
        ld_err(&L, "tokenizer: BOS/EOS id outside the vocabulary");
        goto fail;
    }

    L.arena_n = arena_need(f);
    if (L.arena_n) {
        L.arena = malloc(L.arena_n * sizeof(float));
        if (!L.arena) {
            ld_err(&L, "out of memory");
            st = MODEL_ENOMEM;
            goto fail;
        }
        m->owned_f32 = L.arena;
    }
    if (load_tensors(&L) < 0) goto fail;

    {
        const char *s;
        size_t n;
        if (gguf_get_str(f, "general.name", &s, &n) == 0 && n > 0) {
            if (n >= sizeof m->name) n = sizeof m->name - 1;
            memcpy(m->name, s, n);
            m->name[n] = 0;
        }
    }
    *out = m;
    return MODEL_OK;
fail:
    model_free(m);
    return st;
}

int model_load(const char *path, struct model **out, char *err, size_t errlen) {
    *out = NULL;
    struct gguf_file *f = NULL;
    int rc = gguf_open(path, &f, err, errlen);
    if (rc != 0) return rc == GGUF_EIO ? MODEL_EIO : rc == GGUF_ENOMEM ? MODEL_ENOMEM
                                                                     : MODEL_EFORMAT;
    rc = model_load_gguf(f, out, err, errlen);
    if (rc == 0 && (*out)->name[0] == 0) {
        const char *base = strrchr(path, '/');
        snprintf((*out)->name, sizeof (*out)->name, "%s", base ? base + 1 : path);
    }
    return rc;
}

void model_free(struct model *m) {
    if (!m) return;
    tok_destroy(m->vocab);
    free(m->owned_f32);
    gguf_close(m->gguf);
    free(m);
}
