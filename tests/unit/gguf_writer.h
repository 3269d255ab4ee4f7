/*
 * gguf_writer — builds GGUF files in memory for the unit tests (test_gguf, test_model,
 * test_tokenizer): a growable byte buffer with little-endian scalars, length-prefixed
 * strings, the file header, key/value pairs (each one counted in n_kv), tensor infos and
 * padding. A failed allocation fails the test (T_ASSERT). The caller frees w->p. One test
 * thread; header-only, as the harness is.
 */
#ifndef GEMMAD_TESTS_GGUF_WRITER_H
#define GEMMAD_TESTS_GGUF_WRITER_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "tests/unit/harness.h"

struct gw {
    uint8_t *p;
    size_t n, cap;
    uint64_t n_kv; /* key/value pairs written with gw_key */
};

static inline void gw_bytes(struct gw *w, const void *src, size_t n) {
    if (w->n + n > w->cap) {
        w->cap = (w->n + n) * 2 + 64;
        w->p = realloc(w->p, w->cap);
        T_ASSERT(w->p);
    }
    memcpy(w->p + w->n, src, n);
    w->n += n;
}
static inline void gw_u8(struct gw *w, uint8_t v) {
    gw_bytes(w, &v, 1);
}
static inline void gw_u32(struct gw *w, uint32_t v) {
    gw_bytes(w, &v, 4);
}
static inline void gw_u64(struct gw *w, uint64_t v) {
    gw_bytes(w, &v, 8);
}
static inline void gw_f32(struct gw *w, float v) {
    gw_bytes(w, &v, 4);
}
/* A GGUF string: u64 length, then the bytes (s need not be NUL-terminated). */
static inline void gw_strn(struct gw *w, const char *s, size_t n) {
    gw_u64(w, n);
    gw_bytes(w, s, n);
}
static inline void gw_str(struct gw *w, const char *s) {
    gw_strn(w, s, strlen(s));
}
static inline void gw_header(struct gw *w, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gw_bytes(w, "GGUF", 4);
    gw_u32(w, version);
    gw_u64(w, n_tensors);
    gw_u64(w, n_kv);
}
/* A key and its value type; the value follows. */
static inline void gw_key(struct gw *w, const char *key, uint32_t type) {
    gw_str(w, key);
    gw_u32(w, type);
    w->n_kv++;
}
static inline void gw_kv_u32(struct gw *w, const char *key, uint32_t v) {
    gw_key(w, key, GGUF_VT_UINT32);
    gw_u32(w, v);
}
static inline void gw_kv_f32(struct gw *w, const char *key, float v) {
    gw_key(w, key, GGUF_VT_FLOAT32);
    gw_f32(w, v);
}
static inline void gw_kv_bool(struct gw *w, const char *key, int v) {
    gw_key(w, key, GGUF_VT_BOOL);
    gw_u8(w, (uint8_t)(v != 0));
}
static inline void gw_kv_str(struct gw *w, const char *key, const char *v) {
    gw_key(w, key, GGUF_VT_STRING);
    gw_str(w, v);
}
static inline void gw_kv_strs(struct gw *w, const char *key, const char *const *s, int n) {
    gw_key(w, key, GGUF_VT_ARRAY);
    gw_u32(w, GGUF_VT_STRING);
    gw_u64(w, (uint64_t)n);
    for (int i = 0; i < n; i++)
        gw_str(w, s[i]);
}
static inline void gw_kv_f32s(struct gw *w, const char *key, const float *v, int n) {
    gw_key(w, key, GGUF_VT_ARRAY);
    gw_u32(w, GGUF_VT_FLOAT32);
    gw_u64(w, (uint64_t)n);
    gw_bytes(w, v, (size_t)n * 4);
}
static inline void gw_kv_i32s(struct gw *w, const char *key, const int32_t *v, int n) {
    gw_key(w, key, GGUF_VT_ARRAY);
    gw_u32(w, GGUF_VT_INT32);
    gw_u64(w, (uint64_t)n);
    gw_bytes(w, v, (size_t)n * 4);
}
/* A tensor info: name, n_dims sizes (ne[0] contiguous), enum quant_type, data offset. */
static inline void gw_tinfo(struct gw *w, const char *name, uint32_t n_dims, const uint64_t *ne,
                            uint32_t type, uint64_t off) {
    gw_str(w, name);
    gw_u32(w, n_dims);
    for (uint32_t i = 0; i < n_dims; i++)
        gw_u64(w, ne[i]);
    gw_u32(w, type);
    gw_u64(w, off);
}
static inline void gw_pad(struct gw *w, size_t align) {
    while (w->n % align)
        gw_u8(w, 0);
}
static inline void gw_fill(struct gw *w, size_t n, uint8_t byte) {
    for (size_t i = 0; i < n; i++)
        gw_u8(w, byte);
}

#endif
