/* gen_gguf — see gen_gguf.h. The GGUF v3 layout written here is the one engine/gguf.c
 * reads: header, metadata records, tensor infos, padding to the alignment, tensor data
 * (each tensor padded to the alignment). */
#include "tools/gen-gguf/gen_gguf.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "engine/gguf.h"
#include "engine/kernels/quant.h"

#define GEN_ALIGN 32

/* One tensor to write. */
struct gen_tensor {
    char name[64];
    uint32_t n_dims;
    int64_t ne[4];  /* ne[0] contiguous; 1 past n_dims */
    uint32_t type;  /* enum quant_type of the source layout */
};

/* A growable byte buffer for the header. */
struct gen_buf {
    uint8_t *p;
    size_t n, cap;
    uint64_t n_rec; /* metadata records put */
    int oom;
};

static void put(struct gen_buf *b, const void *src, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < b->n + n) cap *= 2;
        uint8_t *np = realloc(b->p, cap);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_u32(struct gen_buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(struct gen_buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(struct gen_buf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}

/* ---- metadata of the built-in table ---- */

static void kv_head(struct gen_buf *b, const char *key, uint32_t type) {
    b->n_rec++;
    put_str(b, key);
    put_u32(b, type);
}
static void kv_str(struct gen_buf *b, const char *key, const char *v) {
    kv_head(b, key, GGUF_VT_STRING);
    put_str(b, v);
}
static void kv_u32(struct gen_buf *b, const char *key, uint32_t v) {
    kv_head(b, key, GGUF_VT_UINT32);
    put_u32(b, v);
}
static void kv_f32(struct gen_buf *b, const char *key, float v) {
    kv_head(b, key, GGUF_VT_FLOAT32);
    put(b, &v, 4);
}
static void kv_bool(struct gen_buf *b, const char *key, int v) {
    kv_head(b, key, GGUF_VT_BOOL);
    const uint8_t u = (uint8_t)(v != 0);
    put(b, &u, 1);
}
static void kv_arr(struct gen_buf *b, const char *key, uint32_t elem, uint64_t n) {
    kv_head(b, key, GGUF_VT_ARRAY);
    put_u32(b, elem);
    put_u64(b, n);
}

/* Token i of the synthetic vocabulary: Gemma's control tokens where Gemma has them (so BOS
 * 2, EOS 1 and the turn markers 105/106 mean what they mean there), the 256 byte tokens,
 * then unique ordinary pieces. Returns its token type (1 normal, 3 control, 6 byte). */
static int vocab_piece(int i, char *s, size_t n) {
    static const char *ctl[] = {"<pad>", "<eos>", "<bos>", "<unk>", "<mask>"};
    if (i < 5) return snprintf(s, n, "%s", ctl[i]), 3;
    if (i == 105) return snprintf(s, n, "<start_of_turn>"), 3;
    if (i == 106) return snprintf(s, n, "<end_of_turn>"), 3;
    if (i < 105) return snprintf(s, n, "<unused%d>", i - 5), 3;
    if (i < 107 + 256) return snprintf(s, n, "<0x%02X>", i - 107), 6;
    return snprintf(s, n, "t%d", i), 1;
}

enum { G3_LAYERS = 18, G3_EMBD = 640, G3_HEAD = 4, G3_HD = 256, G3_KV = 1, G3_FF = 2048,
       G3_VOCAB = 262144 };

static void builtin_meta(struct gen_buf *b, int n_layer, int n_vocab, int f32) {
    kv_str(b, "general.architecture", "gemma3");
    kv_str(b, "general.name",
           f32 == GEN_TWIN_F32    ? "gemma3-270m-shape-random-f32"
           : f32 == GEN_TWIN_BF16 ? "gemma3-270m-shape-random-bf16"
                                  : "gemma3-270m-shape-random");
    kv_u32(b, "general.file_type", f32 == GEN_TWIN_F32 ? 0 : f32 == GEN_TWIN_BF16 ? 32 : 15);
    kv_u32(b, "general.quantization_version", 2);
    kv_u32(b, "gemma3.context_length", 32768);
    kv_u32(b, "gemma3.embedding_length", G3_EMBD);
    kv_u32(b, "gemma3.block_count", (uint32_t)n_layer);
    kv_u32(b, "gemma3.feed_forward_length", G3_FF);
    kv_u32(b, "gemma3.attention.head_count", G3_HEAD);
    kv_u32(b, "gemma3.attention.head_count_kv", G3_KV);
    kv_f32(b, "gemma3.attention.layer_norm_rms_epsilon", 1e-6f);
    kv_u32(b, "gemma3.attention.key_length", G3_HD);
    kv_u32(b, "gemma3.attention.value_length", G3_HD);
    kv_f32(b, "gemma3.rope.freq_base", 1e6f);
    kv_u32(b, "gemma3.attention.sliding_window", 512);
    kv_str(b, "tokenizer.ggml.model", "llama");
    kv_str(b, "tokenizer.ggml.pre", "default");
    char s[32];
    kv_arr(b, "tokenizer.ggml.tokens", GGUF_VT_STRING, (uint64_t)n_vocab);
    for (int i = 0; i < n_vocab; i++) {
        vocab_piece(i, s, sizeof s);
        put_str(b, s);
    }
    kv_arr(b, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, (uint64_t)n_vocab);
    for (int i = 0; i < n_vocab; i++) {
        const float sc = vocab_piece(i, s, sizeof s) == 1 ? -(float)i : 0.0f;
        put(b, &sc, 4);
    }
    kv_arr(b, "tokenizer.ggml.token_type", GGUF_VT_INT32, (uint64_t)n_vocab);
    for (int i = 0; i < n_vocab; i++) {
        const int32_t t = vocab_piece(i, s, sizeof s);
        put(b, &t, 4);
    }
    kv_u32(b, "tokenizer.ggml.bos_token_id", 2);
    kv_u32(b, "tokenizer.ggml.eos_token_id", 1);
    kv_u32(b, "tokenizer.ggml.unknown_token_id", 3);
    kv_u32(b, "tokenizer.ggml.padding_token_id", 0);
    kv_bool(b, "tokenizer.ggml.add_bos_token", 1);
    kv_bool(b, "tokenizer.ggml.add_eos_token", 0);
    kv_bool(b, "tokenizer.ggml.add_space_prefix", 0);
}

static void add_t(struct gen_tensor *t, int *n, const char *name, uint32_t type, int64_t ne0,
                  int64_t ne1) {
    struct gen_tensor *x = &t[(*n)++];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    x->n_dims = ne1 > 0 ? 2 : 1;
    x->ne[0] = ne0;
    x->ne[1] = ne1 > 0 ? ne1 : 1;
    x->ne[2] = x->ne[3] = 1;
    x->type = type;
}

/* The published Gemma 3 270M Q4_K_M mixes types per layer: attn_v Q8_0 and ffn_down Q6_K
 * on these layers, Q5_0 / Q4_K on the others. */
static int g3_hi_layer(int l) {
    static const int hi[G3_LAYERS] = {1, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 1, 1, 1};
    return hi[l % G3_LAYERS];
}

static int builtin_tensors(struct gen_tensor *t, int n_layer, int n_vocab) {
    int n = 0;
    char nm[64];
    add_t(t, &n, "output_norm.weight", QT_F32, G3_EMBD, 0);
    add_t(t, &n, "token_embd.weight", QT_Q8_0, G3_EMBD, n_vocab);
    for (int l = 0; l < n_layer; l++) {
        const int hi = g3_hi_layer(l);
#define T(suffix, type, a, b)                                   \
    do {                                                        \
        snprintf(nm, sizeof nm, "blk.%d." suffix ".weight", l); \
        add_t(t, &n, nm, type, a, b);                           \
    } while (0)
        T("attn_k", QT_Q5_0, G3_EMBD, G3_KV * G3_HD);
        T("attn_k_norm", QT_F32, G3_HD, 0);
        T("attn_norm", QT_F32, G3_EMBD, 0);
        T("attn_output", QT_Q4_K, G3_HEAD * G3_HD, G3_EMBD);
        T("attn_q", QT_Q5_0, G3_EMBD, G3_HEAD * G3_HD);
        T("attn_q_norm", QT_F32, G3_HD, 0);
        T("attn_v", hi ? QT_Q8_0 : QT_Q5_0, G3_EMBD, G3_KV * G3_HD);
        T("ffn_down", hi ? QT_Q6_K : QT_Q4_K, G3_FF, G3_EMBD);
        T("ffn_gate", QT_Q5_0, G3_EMBD, G3_FF);
        T("ffn_norm", QT_F32, G3_EMBD, 0);
        T("ffn_up", QT_Q5_0, G3_EMBD, G3_FF);
        T("post_attention_norm", QT_F32, G3_EMBD, 0);
        T("post_ffw_norm", QT_F32, G3_EMBD, 0);
#undef T
    }
    return n;
}

/* ---- metadata copied from a real file ---- */

static size_t vt_size(uint32_t t) {
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_UINT16: case GGUF_VT_INT16: return 2;
    case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_FLOAT32: return 4;
    case GGUF_VT_UINT64: case GGUF_VT_INT64: case GGUF_VT_FLOAT64: return 8;
    }
    return 0;
}

/* Re-serialises one validated record (gguf.c: `value` is a string's length prefix, or an
 * array's first element). */
static void copy_kv(struct gen_buf *b, const struct gguf_kv *kv) {
    b->n_rec++;
    put_u64(b, kv->key_len);
    put(b, kv->key, kv->key_len);
    put_u32(b, kv->type);
    if (kv->type == GGUF_VT_STRING) {
        uint64_t len;
        memcpy(&len, kv->value, 8);
        put(b, kv->value, 8 + (size_t)len);
    } else if (kv->type == GGUF_VT_ARRAY) {
        put_u32(b, kv->arr_type);
        put_u64(b, kv->arr_n);
        size_t span = 0;
        if (kv->arr_type == GGUF_VT_STRING) {
            if (kv->arr_n) {
                const uint64_t last = kv->str_offsets[kv->arr_n - 1];
                uint64_t len;
                memcpy(&len, kv->value + last, 8);
                span = (size_t)(last + 8 + len);
            }
        } else {
            span = (size_t)kv->arr_n * vt_size(kv->arr_type);
        }
        put(b, kv->value, span);
    } else {
        put(b, kv->value, vt_size(kv->type));
    }
}

/* ---- values ---- */

/* The spread of a tensor's elements, and for 1-D tensors the value they centre on. */
static void tensor_dist(const struct gen_tensor *t, float *std, float *mean) {
    *mean = 0.0f;
    if (t->n_dims == 1) {
        if (strstr(t->name, "rope_freqs") || strstr(t->name, "output_scale")) {
            *std = 0.0f; /* divisors / scales: exactly 1 */
            *mean = 1.0f;
        } else {
            *std = 0.05f; /* norm weights, stored as 1 + w by llama.cpp's converter */
            *mean = 1.0f;
        }
    } else if (strstr(t->name, "token_embd")) {
        *std = 0.02f;
    } else {
        *std = 1.0f / sqrtf((float)t->ne[0]);
    }
}

static uint64_t name_seed(uint64_t seed, const char *name) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    return h ^ (seed * 0x9e3779b97f4a7c15ull);
}

/* The type a tensor is written as. */
static uint32_t out_type(const struct gen_tensor *t, int f32) {
    return f32 && t->n_dims >= 2 ? (f32 == GEN_TWIN_BF16 ? QT_BF16 : QT_F32) : t->type;
}

static int write_tensor(FILE *fp, const struct gen_tensor *t, const struct gen_gguf_opts *o,
                        void *row, float *frow, char *err, size_t errlen) {
    const int64_t n = t->ne[0];
    const int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    const size_t rb = quant_row_size(t->type, n);
    const uint32_t ot = out_type(t, o->f32);
    float std, mean;
    tensor_dist(t, &std, &mean);
    uint64_t rng = name_seed(o->seed, t->name);
    for (int64_t r = 0; r < rows; r++) {
        if (gen_blocks_row(t->type, n, std, &rng, row)) {
            strbuf_setf(err, errlen, "%s: cannot generate %s blocks", t->name,
                        quant_info(t->type) ? quant_info(t->type)->name : "unknown");
            return -1;
        }
        if (t->type == QT_F32 && mean != 0.0f)
            for (int64_t i = 0; i < n; i++) ((float *)row)[i] += mean;
        const void *src = row;
        size_t bytes = rb;
        if (ot != t->type) {
            if (quant_dequant_row_ref(t->type, row, frow, n)) {
                strbuf_setf(err, errlen, "%s: cannot dequantize %s", t->name,
                            quant_info(t->type)->name);
                return -1;
            }
            src = frow;
            bytes = (size_t)n * sizeof(float);
            if (ot == QT_BF16) { /* the BF16 rounding, into the buffer's second part */
                quant_bf16_row_ref(frow, frow + n, n);
                src = frow + n;
                bytes = (size_t)n * 2;
            }
        }
        if (fwrite(src, 1, bytes, fp) != bytes) {
            strbuf_setf(err, errlen, "%s: write failed: %s", o->out, strerror(errno));
            return -1;
        }
    }
    return 0;
}

static uint64_t tensor_bytes(const struct gen_tensor *t, int f32) {
    return (uint64_t)quant_row_size(out_type(t, f32), t->ne[0]) *
           (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
}

static uint64_t al(uint64_t n) { return (n + GEN_ALIGN - 1) / GEN_ALIGN * GEN_ALIGN; }

int gen_gguf_write(const struct gen_gguf_opts *o, char *err, size_t errlen) {
    struct gguf_file *src = NULL;
    struct gen_tensor *t = NULL;
    struct gen_buf meta = {0}, info = {0}, hdr = {0};
    void *row = NULL;
    float *frow = NULL;
    FILE *fp = NULL;
    int n_t = 0, rc = -1;

    if (o->from) {
        if (o->n_layer || o->n_vocab) {
            strbuf_setf(err, errlen, "--layers and --vocab apply to the built-in table only");
            return -1;
        }
        if (gguf_open(o->from, &src, err, errlen) != GGUF_OK) return -1;
        if (src->alignment != GEN_ALIGN) {
            strbuf_setf(err, errlen, "%s: alignment %u (only %d is written)", o->from,
                        src->alignment, GEN_ALIGN);
            goto out;
        }
        t = calloc(src->n_tensors ? src->n_tensors : 1, sizeof *t);
        if (!t) goto oom;
        for (uint64_t i = 0; i < src->n_tensors; i++) {
            const struct gguf_tensor *g = &src->tensors[i];
            struct gen_tensor *x = &t[n_t++];
            memcpy(x->name, g->name, sizeof x->name);
            x->n_dims = g->n_dims;
            memcpy(x->ne, g->ne, sizeof x->ne);
            x->type = g->type;
        }
        for (uint64_t i = 0; i < src->n_kv; i++) copy_kv(&meta, &src->kv[i]);
    } else {
        const int L = o->n_layer > 0 ? o->n_layer : G3_LAYERS;
        const int V = o->n_vocab > 0 ? o->n_vocab : G3_VOCAB;
        if (L > 512 || V < 107 + 256 || V > (1 << 24)) {
            strbuf_setf(err, errlen, "--layers 1..512, --vocab %d..%d", 107 + 256, 1 << 24);
            return -1;
        }
        t = calloc((size_t)(2 + 13 * L), sizeof *t);
        if (!t) goto oom;
        n_t = builtin_tensors(t, L, V);
        builtin_meta(&meta, L, V, o->f32);
    }

    /* tensor infos, offsets in the order written */
    int64_t max_n = 0;
    uint64_t off = 0;
    for (int i = 0; i < n_t; i++) {
        put_str(&info, t[i].name);
        put_u32(&info, t[i].n_dims);
        for (uint32_t d = 0; d < t[i].n_dims; d++) put_u64(&info, (uint64_t)t[i].ne[d]);
        put_u32(&info, out_type(&t[i], o->f32));
        put_u64(&info, off);
        off = al(off + tensor_bytes(&t[i], o->f32));
        if (t[i].ne[0] > max_n) max_n = t[i].ne[0];
    }
    if (meta.oom || info.oom) goto oom;
    row = malloc((size_t)max_n * sizeof(float) + 64);
    frow = malloc((size_t)max_n * (sizeof(float) + 2) + 64); /* f32, then BF16 (write_tensor) */
    if (!row || !frow) goto oom;

    fp = fopen(o->out, "wb");
    if (!fp) {
        strbuf_setf(err, errlen, "%s: %s", o->out, strerror(errno));
        goto out;
    }
    put(&hdr, "GGUF", 4);
    put_u32(&hdr, 3);
    put_u64(&hdr, (uint64_t)n_t);
    put_u64(&hdr, meta.n_rec);
    if (hdr.oom) goto oom;
    static const uint8_t zeros[GEN_ALIGN];
    const uint64_t head = hdr.n + meta.n + info.n;
    int ok = fwrite(hdr.p, 1, hdr.n, fp) == hdr.n && fwrite(meta.p, 1, meta.n, fp) == meta.n &&
             fwrite(info.p, 1, info.n, fp) == info.n &&
             fwrite(zeros, 1, al(head) - head, fp) == al(head) - head;
    if (!ok) {
        strbuf_setf(err, errlen, "%s: write failed: %s", o->out, strerror(errno));
        goto out;
    }
    for (int i = 0; i < n_t; i++) {
        if (write_tensor(fp, &t[i], o, row, frow, err, errlen)) goto out;
        const uint64_t b = tensor_bytes(&t[i], o->f32);
        if (fwrite(zeros, 1, al(b) - b, fp) != al(b) - b) {
            strbuf_setf(err, errlen, "%s: write failed: %s", o->out, strerror(errno));
            goto out;
        }
    }
    if (fclose(fp) != 0) {
        fp = NULL;
        strbuf_setf(err, errlen, "%s: close failed: %s", o->out, strerror(errno));
        goto out;
    }
    fp = NULL;
    rc = 0;
    goto out;
oom:
    strbuf_setf(err, errlen, "out of memory");
out:
    if (fp) fclose(fp);
    if (rc && o->out) remove(o->out);
    free(row);
    free(frow);
    free(hdr.p);
    free(meta.p);
    free(info.p);
    free(t);
    gguf_close(src);
    return rc;
}
