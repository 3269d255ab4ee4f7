/*
 * tokenizer — llama.cpp-compatible SentencePiece ("llama"/SPM) tokenizer over the GGUF vocab:
 * loading and validation, hashing and the accessors. Encoding (the special-token partition
 * and the SPM merge) is in tokenizer_encode.c, the Gemma 4 BPE fragment encoder in
 * tokenizer_bpe.c, decoding and streaming in tokenizer_decode.c. Behaviour follows
 * llama.cpp's src/llama-vocab.cpp (see
 * shared/docs/gemma-gguf-facts.md §6.2); comments say where a rule comes from.
 */
#include "engine/tokenizer.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "engine/gguf.h"
#include "engine/tokenizer_int.h"

/* ---- hashing ---------------------------------------------------------------------------- */

uint64_t tok_hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

static int hash_init(struct tok_hash *t, size_t n_keys) {
    size_t cap = 16;
    while (cap < n_keys * 2)
        cap <<= 1;
    t->mask = (uint32_t)(cap - 1);
    t->slot = malloc(cap * sizeof(*t->slot));
    t->hv = malloc(cap * sizeof(*t->hv));
    if (!t->slot || !t->hv) return TOK_ENOMEM;
    memset(t->slot, 0xff, cap * sizeof(*t->slot));
    return 0;
}

static void hash_free(struct tok_hash *t) {
    free(t->slot);
    free(t->hv);
    t->slot = NULL;
    t->hv = NULL;
}

int32_t tok_find(const struct tok_vocab *v, const char *text, size_t len) {
    uint32_t h = (uint32_t)tok_hash_bytes(text, len);
    for (uint32_t i = h & v->pieces.mask;; i = (i + 1) & v->pieces.mask) {
        int32_t id = v->pieces.slot[i];
        if (id < 0) return -1;
        if (v->pieces.hv[i] == h && v->tok[id].len == len && !memcmp(v->tok[id].text, text, len))
            return id;
    }
}

/* Inserts id under its piece text; returns the id already there for a duplicate, else -1. */
static int32_t piece_insert(struct tok_vocab *v, int32_t id) {
    const struct tok_entry *e = &v->tok[id];
    uint32_t h = (uint32_t)tok_hash_bytes(e->text, e->len);
    uint32_t i = h & v->pieces.mask;
    for (;; i = (i + 1) & v->pieces.mask) {
        int32_t o = v->pieces.slot[i];
        if (o < 0) break;
        if (v->pieces.hv[i] == h && v->tok[o].len == e->len &&
            !memcmp(v->tok[o].text, e->text, e->len))
            return o;
    }
    v->pieces.slot[i] = id;
    v->pieces.hv[i] = h;
    return -1;
}

static int32_t find_cstr(const struct tok_vocab *v, const char *s) {
    return tok_find(v, s, strlen(s));
}

/* ---- vocab loading ---------------------------------------------------------------------- */

/* Texts llama.cpp recognises (src/llama-vocab.cpp, `load`); the first vocab token found in
 * each detection list becomes that special id and is forced to CONTROL. llama.cpp walks an
 * unordered map, so with several candidates its pick is arbitrary; we take the lowest id. */
static const char *const eot_texts[] = {"<|eot_id|>",
                                        "<|im_end|>",
                                        "<|end|>",
                                        "<end_of_turn>",
                                        "<|endoftext|>",
                                        "<|end_of_text|>",
                                        "<EOT>",
                                        "_<EOT>",
                                        "[EOT]",
                                        "<\xef\xbd\x9c"
                                        "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                        "<end_of_utterance>",
                                        NULL};
static const char *const eom_texts[] = {"<|eom_id|>", NULL};
static const char *const fim_pre_texts[] = {"<|fim_prefix|>",
                                            "<fim-prefix>",
                                            "<fim_prefix>",
                                            "<\xef\xbd\x9c"
                                            "fim\xe2\x96\x81"
                                            "begin\xef\xbd\x9c>",
                                            "<PRE>",
                                            "\xe2\x96\x81<PRE>",
                                            "<|code_prefix|>",
                                            "<|prefix|>",
                                            NULL};
static const char *const fim_suf_texts[] = {"<|fim_suffix|>",
                                            "<fim-suffix>",
                                            "<fim_suffix>",
                                            "<\xef\xbd\x9c"
                                            "fim\xe2\x96\x81hole\xef\xbd\x9c>",
                                            "<SUF>",
                                            "\xe2\x96\x81<SUF>",
                                            "<|code_suffix|>",
                                            "<|suffix|>",
                                            NULL};
static const char *const fim_mid_texts[] = {"<|fim_middle|>",
                                            "<fim-middle>",
                                            "<fim_middle>",
                                            "<\xef\xbd\x9c"
                                            "fim\xe2\x96\x81"
                                            "end\xef\xbd\x9c>",
                                            "<MID>",
                                            "\xe2\x96\x81<MID>",
                                            "<|code_middle|>",
                                            "<|middle|>",
                                            NULL};
static const char *const fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>",
                                            "<PAD>",       "[PAD]",     NULL};
static const char *const fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                            "<REPO>",       "<reponame>",    NULL};
static const char *const fim_sep_texts[] = {"<|file_sep|>", NULL};
/* Every token with one of these texts ends generation (and becomes CONTROL). */
static const char *const eog_texts[] = {"<|eot_id|>",
                                        "<|im_end|>",
                                        "<|end|>",
                                        "<|return|>",
                                        "<|call|>",
                                        "<|flush|>",
                                        "<|calls|>",
                                        "<end_of_turn>",
                                        "<|endoftext|>",
                                        "</s>",
                                        "<|eom_id|>",
                                        "<EOT>",
                                        "_<EOT>",
                                        "[EOT]",
                                        "[EOS]",
                                        "<|end_of_text|>",
                                        "<end_of_utterance>",
                                        "<eos>",
                                        "<turn|>",
                                        "<|tool_response>",
                                        "<\xef\xbd\x9c"
                                        "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                        "[e~[",
                                        NULL};
/* gpt-oss markers llama.cpp always renders (forced USER_DEFINED). */
static const char *const always_render_texts[] = {"<|channel|>", "<|message|>", "<|start|>",
                                                  "<|constrain|>", NULL};

static int32_t detect_first(struct tok_vocab *v, const char *const *texts) {
    int32_t best = -1;
    for (int i = 0; texts[i]; i++) {
        int32_t id = find_cstr(v, texts[i]);
        if (id >= 0 && (best < 0 || id < best)) best = id;
    }
    if (best >= 0) v->tok[best].attr |= TOK_ATTR_CONTROL;
    return best;
}

static int eog_has(const struct tok_vocab *v, int32_t id) {
    for (int i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) return 1;
    return 0;
}

static void eog_add(struct tok_vocab *v, int32_t id) {
    if (id >= 0 && !eog_has(v, id)) v->eog[v->n_eog++] = id;
}

static void eog_remove(struct tok_vocab *v, int32_t id) {
    for (int i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) {
            v->eog[i] = v->eog[--v->n_eog];
            return;
        }
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int eog_text_is(const struct tok_vocab *v, int32_t id, const char *s) {
    size_t n = strlen(s);
    return v->tok[id].len == n && !memcmp(v->tok[id].text, s, n);
}

/* End-of-generation set exactly as llama.cpp builds it (text list, then eos/eot/eom, then
 * its two clean-up rules for <|end|> and </s>). */
static int build_eog(struct tok_vocab *v, int32_t fim_pad, int32_t fim_rep, int32_t fim_sep) {
    int cap = 8;
    for (int i = 0; eog_texts[i]; i++)
        cap++;
    v->eog = malloc((size_t)cap * sizeof(*v->eog));
    if (!v->eog) return TOK_ENOMEM;
    eog_add(v, fim_pad);
    eog_add(v, fim_rep);
    eog_add(v, fim_sep);
    for (int i = 0; eog_texts[i]; i++) {
        int32_t id = find_cstr(v, eog_texts[i]);
        if (id < 0) continue;
        eog_add(v, id);
        v->tok[id].attr |= TOK_ATTR_CONTROL;
    }
    for (int i = 0; always_render_texts[i]; i++) {
        int32_t id = find_cstr(v, always_render_texts[i]);
        if (id >= 0) v->tok[id].attr = TOK_ATTR_USER_DEFINED;
    }
    eog_add(v, v->eos);
    eog_add(v, v->eot);
    eog_add(v, v->eom);

    int has_return = 0, has_call = 0, has_flush = 0, has_marker = 0;
    int32_t end_id = -1, s_id = -1;
    for (int i = 0; i < v->n_eog; i++) {
        int32_t id = v->eog[i];
        if (eog_text_is(v, id, "<|return|>"))
            has_return = 1;
        else if (eog_text_is(v, id, "<|call|>") || eog_text_is(v, id, "<|calls|>"))
            has_call = 1;
        else if (eog_text_is(v, id, "<|flush|>"))
            has_flush = 1;
        else if (eog_text_is(v, id, "<|end|>"))
            end_id = id;
        if (eog_text_is(v, id, "<|tool_response>") || eog_text_is(v, id, "<|plamo:eos|>"))
            has_marker = 1;
        else if (eog_text_is(v, id, "</s>"))
            s_id = id;
    }
    if (end_id >= 0 && ((has_return && has_call) || (has_call && has_flush))) {
        eog_remove(v, end_id);
        v->tok[end_id].attr = TOK_ATTR_USER_DEFINED;
    }
    if (has_marker && s_id >= 0) { /* Gemma 4: </s> is an ordinary token there */
        eog_remove(v, s_id);
        v->tok[s_id].attr = TOK_ATTR_NORMAL;
    }
    qsort(v->eog, (size_t)v->n_eog, sizeof(*v->eog), cmp_i32);
    return 0;
}

static void slen_add(struct tok_slen *s, int *n, const struct tok_entry *e) {
    int i = 0;
    while (i < *n && s[i].len != e->len)
        i++;
    if (i == *n) {
        memset(&s[i], 0, sizeof(s[i]));
        s[i].len = e->len;
        (*n)++;
    }
    uint8_t b = (uint8_t)e->text[0];
    s[i].first[b >> 3] |= (uint8_t)(1u << (b & 7));
}

static int cmp_slen_desc(const void *a, const void *b) {
    uint32_t x = ((const struct tok_slen *)a)->len, y = ((const struct tok_slen *)b)->len;
    return (x < y) - (x > y);
}

/* Special-token partition tables (llama.cpp `cache_special_tokens`): CONTROL, USER_DEFINED and
 * UNKNOWN tokens take part; without parse_special only those with neither CONTROL nor UNKNOWN. */
static int build_special(struct tok_vocab *v) {
    size_t max_lens = 0;
    for (int i = 0; i < v->n; i++)
        if (v->tok[i].len > max_lens) max_lens = v->tok[i].len;
    max_lens = max_lens + 1 < (size_t)v->n ? max_lens + 1 : (size_t)v->n;
    v->slen_all = calloc(max_lens, sizeof(*v->slen_all));
    v->slen_ud = calloc(max_lens, sizeof(*v->slen_ud));
    if (!v->slen_all || !v->slen_ud) return TOK_ENOMEM;
    for (int i = 0; i < v->n; i++) {
        const struct tok_entry *e = &v->tok[i];
        int a = e->attr;
        if (!(a & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN))) continue;
        slen_add(v->slen_all, &v->n_slen_all, e);
        if (!(a & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN))) slen_add(v->slen_ud, &v->n_slen_ud, e);
    }
    qsort(v->slen_all, (size_t)v->n_slen_all, sizeof(*v->slen_all), cmp_slen_desc);
    qsort(v->slen_ud, (size_t)v->n_slen_ud, sizeof(*v->slen_ud), cmp_slen_desc);
    return 0;
}

static int attr_of_type(int64_t t) {
    switch (t) {
    case TOK_TYPE_UNKNOWN:
        return TOK_ATTR_UNKNOWN;
    case TOK_TYPE_UNUSED:
        return TOK_ATTR_UNUSED;
    case TOK_TYPE_NORMAL:
        return TOK_ATTR_NORMAL;
    case TOK_TYPE_CONTROL:
        return TOK_ATTR_CONTROL;
    case TOK_TYPE_USER_DEFINED:
        return TOK_ATTR_USER_DEFINED;
    case TOK_TYPE_BYTE:
        return TOK_ATTR_BYTE;
    default:
        return 0;
    }
}

/* Reads an optional special-token id; absent keeps *id. Out of range is an error. */
static int read_special(const struct gguf_file *f, const char *key, int n, int32_t *id, char *err,
                        size_t errlen) {
    uint32_t u;
    int rc = gguf_get_u32(f, key, &u);
    if (rc == GGUF_ENOTFOUND) return 0;
    if (rc || u >= (uint32_t)n) {
        strbuf_setf(err, errlen, "%s: %s (vocab has %d tokens)", key,
                    rc ? gguf_strerror(rc) : "id out of range", n);
        return TOK_EFORMAT;
    }
    *id = (int32_t)u;
    return 0;
}

static int read_flag(const struct gguf_file *f, const char *key, int *out, char *err,
                     size_t errlen) {
    int b, rc = gguf_get_bool(f, key, &b);
    if (rc == GGUF_ENOTFOUND) return 0;
    if (rc) {
        strbuf_setf(err, errlen, "%s: %s", key, gguf_strerror(rc));
        return TOK_EFORMAT;
    }
    *out = b;
    return 0;
}

static int load_tokens(struct tok_vocab *v, const struct gguf_file *f, char *err, size_t errlen) {
    const struct gguf_kv *toks, *scores = NULL, *types = NULL;
    if (gguf_get_arr(f, "tokenizer.ggml.tokens", &toks) || toks->arr_type != GGUF_VT_STRING) {
        strbuf_setf(err, errlen, "tokenizer.ggml.tokens: missing or not an array of strings");
        return TOK_EFORMAT;
    }
    if (toks->arr_n == 0 || toks->arr_n > (uint64_t)INT32_MAX / 4) {
        strbuf_setf(err, errlen, "tokenizer.ggml.tokens: bad token count %llu",
                    (unsigned long long)toks->arr_n);
        return TOK_EFORMAT;
    }
    v->n = (int)toks->arr_n;
    int rc = gguf_get_arr(f, "tokenizer.ggml.scores", &scores);
    if (rc == GGUF_ENOTFOUND)
        scores = NULL;
    else if (rc || (scores->arr_type != GGUF_VT_FLOAT32 && scores->arr_type != GGUF_VT_INT32) ||
             scores->arr_n != toks->arr_n) {
        strbuf_setf(err, errlen, "tokenizer.ggml.scores: %s (tokens has %d entries)",
                    rc                             ? gguf_strerror(rc)
                    : scores->arr_n != toks->arr_n ? "length differs"
                                                   : "not f32/i32",
                    v->n);
        return TOK_EFORMAT;
    }
    rc = gguf_get_arr(f, "tokenizer.ggml.token_type", &types);
    if (rc == GGUF_ENOTFOUND)
        types = NULL;
    else if (rc || types->arr_type != GGUF_VT_INT32 || types->arr_n != toks->arr_n) {
        strbuf_setf(err, errlen, "tokenizer.ggml.token_type: %s (tokens has %d entries)",
                    rc                            ? gguf_strerror(rc)
                    : types->arr_n != toks->arr_n ? "length differs"
                                                  : "not an i32 array",
                    v->n);
        return TOK_EFORMAT;
    }

    v->tok = calloc((size_t)v->n, sizeof(*v->tok));
    if (!v->tok) return TOK_ENOMEM;
    size_t n_empty = 0;
    for (int i = 0; i < v->n; i++) {
        const char *s;
        size_t len;
        if (gguf_arr_str(toks, (uint64_t)i, &s, &len) || len > UINT32_MAX / 2) {
            strbuf_setf(err, errlen, "tokenizer.ggml.tokens[%d]: unreadable", i);
            return TOK_EFORMAT;
        }
        struct tok_entry *e = &v->tok[i];
        e->text = s;
        e->len = (uint32_t)len;
        if (!len) n_empty++;
        e->attr = TOK_ATTR_NORMAL;
        if (scores && gguf_arr_f32(scores, (uint64_t)i, &e->score)) {
            strbuf_setf(err, errlen, "tokenizer.ggml.scores[%d]: unreadable", i);
            return TOK_EFORMAT;
        }
        if (types) {
            int64_t t;
            if (gguf_arr_i64(types, (uint64_t)i, &t)) {
                strbuf_setf(err, errlen, "tokenizer.ggml.token_type[%d]: unreadable", i);
                return TOK_EFORMAT;
            }
            e->attr = (uint8_t)attr_of_type(t);
        }
    }
    /* llama.cpp renames empty pieces to "[EMPTY_<id>]" so that they stay unique. */
    if (n_empty) {
        v->arena = malloc(n_empty * 24);
        if (!v->arena) return TOK_ENOMEM;
        char *p = v->arena;
        for (int i = 0; i < v->n; i++) {
            if (v->tok[i].len) continue;
            int k = snprintf(p, 24, "[EMPTY_%d]", i);
            v->tok[i].text = p;
            v->tok[i].len = (uint32_t)k;
            p += k + 1;
        }
    }
    if (hash_init(&v->pieces, (size_t)v->n)) return TOK_ENOMEM;
    for (int i = 0; i < v->n; i++) {
        int32_t dup = piece_insert(v, i);
        if (dup >= 0) {
            strbuf_setf(err, errlen, "tokenizer.ggml.tokens: tokens %d and %d have the same text",
                        (int)dup, i);
            return TOK_EFORMAT;
        }
        if (v->tok[i].len > v->max_len) v->max_len = v->tok[i].len;
    }
    return 0;
}

static int load_model(struct tok_vocab *v, const struct gguf_file *f, char *err, size_t errlen) {
    const char *m;
    size_t mlen;
    if (gguf_get_str(f, "tokenizer.ggml.model", &m, &mlen)) {
        strbuf_setf(err, errlen, "tokenizer.ggml.model: missing or not a string");
        return TOK_EFORMAT;
    }
    if (mlen == 5 && !memcmp(m, "llama", 5)) {
        /* llama.cpp SPM defaults; Gemma files override all of them. */
        v->model = TOK_MODEL_SPM;
        v->bos = 1;
        v->eos = 2;
        v->unk = 0;
        v->add_space_prefix = 1;
    } else if (mlen == 6 && !memcmp(m, "gemma4", 6)) {
        v->model = TOK_MODEL_GEMMA4;
        v->bos = v->eos = v->unk = -1;
        v->add_space_prefix = 0;
    } else {
        strbuf_setf(err, errlen, "tokenizer.ggml.model: unsupported tokenizer '%.*s'",
                    (int)(mlen > 64 ? 64 : mlen), m);
        return TOK_EFORMAT;
    }
    v->add_bos = 1;
    v->add_eos = 0;
    v->eot = v->eom = -1;
    return 0;
}

int tok_create(const struct gguf_file *f, struct tok_vocab **out, char *err, size_t errlen) {
    int rc;
    *out = NULL;
    struct tok_vocab *v = calloc(1, sizeof(*v));
    if (!v) return TOK_ENOMEM;
    if ((rc = load_model(v, f, err, errlen))) goto fail;
    if ((rc = load_tokens(v, f, err, errlen))) goto fail;
    if (v->bos >= v->n) v->bos = -1; /* defaults outside a small vocab are disabled */
    if (v->eos >= v->n) v->eos = -1;
    if (v->unk >= v->n) v->unk = -1;
    int32_t pad = -1;
    if ((rc = read_special(f, "tokenizer.ggml.bos_token_id", v->n, &v->bos, err, errlen)) ||
        (rc = read_special(f, "tokenizer.ggml.eos_token_id", v->n, &v->eos, err, errlen)) ||
        (rc = read_special(f, "tokenizer.ggml.unknown_token_id", v->n, &v->unk, err, errlen)) ||
        (rc = read_special(f, "tokenizer.ggml.padding_token_id", v->n, &pad, err, errlen)) ||
        (rc = read_special(f, "tokenizer.ggml.eot_token_id", v->n, &v->eot, err, errlen)) ||
        (rc = read_special(f, "tokenizer.ggml.eom_token_id", v->n, &v->eom, err, errlen)))
        goto fail;
    if ((rc = read_flag(f, "tokenizer.ggml.add_bos_token", &v->add_bos, err, errlen)) ||
        (rc = read_flag(f, "tokenizer.ggml.add_eos_token", &v->add_eos, err, errlen)) ||
        (rc = read_flag(f, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err, errlen)))
        goto fail;
    if (v->model == TOK_MODEL_GEMMA4) {
        v->add_bos = 1; /* llama.cpp forces BOS for Gemma 4 */
        v->add_space_prefix = 0;
        if ((rc = tok_bpe_load(v, f, err, errlen))) goto fail;
    }
    if (v->add_bos && v->bos < 0) {
        strbuf_setf(err, errlen, "tokenizer.ggml.bos_token_id: missing but add_bos_token is set");
        rc = TOK_EFORMAT;
        goto fail;
    }
    if (v->add_eos && v->eos < 0) {
        strbuf_setf(err, errlen, "tokenizer.ggml.eos_token_id: missing but add_eos_token is set");
        rc = TOK_EFORMAT;
        goto fail;
    }

    /* Auto-detected specials (llama.cpp): each forced to CONTROL. */
    if (v->eot < 0) v->eot = detect_first(v, eot_texts);
    if (v->eom < 0) v->eom = detect_first(v, eom_texts);
    detect_first(v, fim_pre_texts);
    detect_first(v, fim_suf_texts);
    detect_first(v, fim_mid_texts);
    int32_t fim_pad = detect_first(v, fim_pad_texts);
    int32_t fim_rep = detect_first(v, fim_rep_texts);
    int32_t fim_sep = detect_first(v, fim_sep_texts);
    if ((rc = build_eog(v, fim_pad, fim_rep, fim_sep))) goto fail;
    if ((rc = build_special(v))) goto fail;

    /* Byte fallback: "<0xXX>" (uppercase hex), else the one-byte piece. */
    for (int b = 0; b < 256; b++) {
        char hex[7];
        snprintf(hex, sizeof(hex), "<0x%02X>", b);
        v->byte_tok[b] = tok_find(v, hex, 6);
        if (v->byte_tok[b] < 0 && v->model == TOK_MODEL_SPM) {
            char c = (char)b;
            v->byte_tok[b] = tok_find(v, &c, 1);
        }
    }
    *out = v;
    return 0;
fail:
    if (rc == TOK_ENOMEM) strbuf_setf(err, errlen, "tokenizer: out of memory");
    tok_destroy(v);
    return rc;
}

void tok_destroy(struct tok_vocab *v) {
    if (!v) return;
    free(v->tok);
    hash_free(&v->pieces);
    free(v->slen_all);
    free(v->slen_ud);
    free(v->eog);
    free(v->merges);
    hash_free(&v->merge_hash);
    free(v->arena);
    free(v);
}

/* ---- accessors -------------------------------------------------------------------------- */

int tok_n_vocab(const struct tok_vocab *v) {
    return v->n;
}
int32_t tok_bos(const struct tok_vocab *v) {
    return v->bos;
}
int32_t tok_eos(const struct tok_vocab *v) {
    return v->eos;
}
int tok_is_eog(const struct tok_vocab *v, int32_t id) {
    return id >= 0 && bsearch(&id, v->eog, (size_t)v->n_eog, sizeof(*v->eog), cmp_i32) != NULL;
}

/* The effective type after llama.cpp's adjustments (e.g. "</s>" becomes CONTROL in Gemma 3). */
int tok_type(const struct tok_vocab *v, int32_t id) {
    if (id < 0 || id >= v->n) return TOK_ERANGE;
    int a = v->tok[id].attr;
    if (a & TOK_ATTR_CONTROL) return TOK_TYPE_CONTROL;
    if (a & TOK_ATTR_USER_DEFINED) return TOK_TYPE_USER_DEFINED;
    if (a & TOK_ATTR_UNKNOWN) return TOK_TYPE_UNKNOWN;
    if (a & TOK_ATTR_BYTE) return TOK_TYPE_BYTE;
    if (a & TOK_ATTR_NORMAL) return TOK_TYPE_NORMAL;
    if (a & TOK_ATTR_UNUSED) return TOK_TYPE_UNUSED;
    return TOK_TYPE_UNDEFINED;
}

int32_t tok_lookup(const struct tok_vocab *v, const char *text, size_t len) {
    return tok_find(v, text, len);
}
