/*
 * test_gguf — the GGUF reader against the bundled model, hand-made malformed files for every
 * class of reliability-checklist §A, every prefix of a small valid file, and seeded byte
 * mutations (of the small file and of the real model's header region).
 *
 * Files are built in memory with the tiny writer below and opened with gguf_open_buffer from
 * an exact-size heap copy, so an ASan build catches any read past the end.
 */
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "base/clock.h"
#include "engine/gguf.h"
#include "engine/kernels/quant.h"
#include "tests/unit/gguf_writer.h"
#include "tests/unit/harness.h"

/* Open an exact-size heap copy of (p, n). */
static int open_copy(const void *p, size_t n, struct gguf_file **f, char *err, size_t errlen) {
    void *copy = malloc(n ? n : 1);
    T_ASSERT(copy);
    if (n) memcpy(copy, p, n);
    int rc = gguf_open_buffer(copy, n, f, err, errlen);
    if (rc == 0) return 0; /* the gguf_file points into the copy: the caller frees f->map */
    T_ASSERT(*f == NULL);
    free(copy);
    return rc;
}

/* The file must be rejected with EFORMAT and a message containing `want`. */
static void expect_fail_at(struct gw *w, const char *want, int line) {
    struct gguf_file *f = NULL;
    char err[512];
    int rc = open_copy(w->p, w->n, &f, err, sizeof err);
    if (rc != GGUF_EFORMAT || !strstr(err, want))
        T_FAIL("line %d: rc %d, err \"%s\", wanted EFORMAT with \"%s\"", line, rc, err, want);
    free(w->p);
    *w = (struct gw){0};
}
#define EXPECT_FAIL(w, want) expect_fail_at(w, want, __LINE__)

/* A small valid file exercising every value type; tensors F32 [8,2], Q8_0 [64,2], Q4_K [256]. */
static void make_valid(struct gw *w, uint32_t version, uint32_t alignment) {
    gw_header(w, version, 3, 22);
    gw_kv_str(w, "general.architecture", "gemma3");
    gw_kv_u32(w, "general.alignment", alignment);
    gw_str(w, "t.u8"), gw_u32(w, GGUF_VT_UINT8), gw_u8(w, 200);
    gw_str(w, "t.i8"), gw_u32(w, GGUF_VT_INT8), gw_u8(w, 0xfe); /* -2 */
    uint16_t u16 = 60000, i16 = (uint16_t)-300;
    gw_str(w, "t.u16"), gw_u32(w, GGUF_VT_UINT16), gw_bytes(w, &u16, 2);
    gw_str(w, "t.i16"), gw_u32(w, GGUF_VT_INT16), gw_bytes(w, &i16, 2);
    gw_kv_u32(w, "t.u32", 4000000000u);
    gw_str(w, "t.i32"), gw_u32(w, GGUF_VT_INT32), gw_u32(w, (uint32_t)-5);
    float fv = 1.5f;
    gw_str(w, "t.f32"), gw_u32(w, GGUF_VT_FLOAT32), gw_bytes(w, &fv, 4);
    gw_str(w, "t.bool"), gw_u32(w, GGUF_VT_BOOL), gw_u8(w, 1);
    gw_str(w, "t.u64"), gw_u32(w, GGUF_VT_UINT64), gw_u64(w, 1ull << 40);
    gw_str(w, "t.u64big"), gw_u32(w, GGUF_VT_UINT64), gw_u64(w, UINT64_MAX);
    gw_str(w, "t.i64"), gw_u32(w, GGUF_VT_INT64), gw_u64(w, (uint64_t)-7);
    double dv = -2.25;
    gw_str(w, "t.f64"), gw_u32(w, GGUF_VT_FLOAT64), gw_bytes(w, &dv, 8);
    gw_kv_str(w, "t.empty_str", "");
    /* arrays */
    gw_str(w, "a.i32"), gw_u32(w, GGUF_VT_ARRAY), gw_u32(w, GGUF_VT_INT32), gw_u64(w, 3);
    gw_u32(w, 1), gw_u32(w, (uint32_t)-2), gw_u32(w, 3);
    gw_str(w, "a.f32"), gw_u32(w, GGUF_VT_ARRAY), gw_u32(w, GGUF_VT_FLOAT32), gw_u64(w, 2);
    float fa[2] = {0.25f, -8.0f};
    gw_bytes(w, fa, 8);
    gw_str(w, "a.str"), gw_u32(w, GGUF_VT_ARRAY), gw_u32(w, GGUF_VT_STRING), gw_u64(w, 4);
    gw_str(w, "<pad>"), gw_str(w, ""), gw_str(w, "hello"), gw_str(w, "\xe2\x96\x81x");
    gw_str(w, "a.bool"), gw_u32(w, GGUF_VT_ARRAY), gw_u32(w, GGUF_VT_BOOL), gw_u64(w, 3);
    gw_u8(w, 0), gw_u8(w, 1), gw_u8(w, 1);
    gw_str(w, "a.u16"), gw_u32(w, GGUF_VT_ARRAY), gw_u32(w, GGUF_VT_UINT16), gw_u64(w, 2);
    gw_bytes(w, &u16, 2), gw_bytes(w, &i16, 2);
    gw_str(w, "a.f64"), gw_u32(w, GGUF_VT_ARRAY), gw_u32(w, GGUF_VT_FLOAT64), gw_u64(w, 1);
    gw_bytes(w, &dv, 8);
    gw_str(w, "a.empty"), gw_u32(w, GGUF_VT_ARRAY), gw_u32(w, GGUF_VT_UINT8), gw_u64(w, 0);
    /* tensors: sizes 64, 136 (2 rows x 2 blocks x 34), 144 (one Q4_K block) */
    size_t s0 = 64, s1 = 136;
    size_t o1 = (s0 + alignment - 1) / alignment * alignment;
    size_t o2 = (o1 + s1 + alignment - 1) / alignment * alignment;
    gw_tinfo(w, "a", 2, (uint64_t[]){8, 2}, QT_F32, 0);
    gw_tinfo(w, "blk.0.b", 2, (uint64_t[]){64, 2}, QT_Q8_0, o1);
    gw_tinfo(w, "c", 1, (uint64_t[]){256}, QT_Q4_K, o2);
    gw_pad(w, alignment);
    size_t d0 = w->n;
    for (int i = 0; i < 16; i++) {
        float x = (float)i;
        gw_bytes(w, &x, 4);
    }
    gw_fill(w, d0 + o1 - w->n, 0);
    gw_fill(w, s1, 0x11);
    gw_fill(w, d0 + o2 - w->n, 0);
    gw_fill(w, 144, 0x22);
}

/* Touch every value and tensor byte range a successfully opened file exposes. */
static unsigned walk(const struct gguf_file *f) {
    unsigned h = 0;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const struct gguf_kv *kv = &f->kv[i];
        for (size_t j = 0; j < kv->key_len; j++) h += (uint8_t)kv->key[j];
        char key[256];
        if (kv->key_len < sizeof key && !memchr(kv->key, 0, kv->key_len)) {
            memcpy(key, kv->key, kv->key_len);
            key[kv->key_len] = 0;
            T_ASSERT(gguf_find(f, key) != NULL);
            int64_t v;
            float x;
            const char *s;
            size_t n;
            if (gguf_get_i64(f, key, &v) == 0) h += (unsigned)v;
            if (gguf_get_f32(f, key, &x) == 0) h += (unsigned)(x == x);
            if (gguf_get_str(f, key, &s, &n) == 0 && n) h += (uint8_t)s[0] + (uint8_t)s[n - 1];
        }
        if (kv->type != GGUF_VT_ARRAY) continue;
        for (uint64_t j = 0; j < kv->arr_n; j++) {
            int64_t v;
            float x;
            const char *s;
            size_t n;
            if (gguf_arr_i64(kv, j, &v) == 0) h += (unsigned)v;
            if (gguf_arr_f32(kv, j, &x) == 0) h += (unsigned)(x == x);
            if (gguf_arr_str(kv, j, &s, &n) == 0 && n) h += (uint8_t)s[0] + (uint8_t)s[n - 1];
        }
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        const uint8_t *d = t->data;
        T_ASSERT(d >= f->map + f->data_offset && d + t->size <= f->map + f->map_size);
        h += d[0] + d[t->size - 1];
        T_ASSERT(gguf_find_tensor(f, t->name) == t);
    }
    return h;
}

/* ---- valid files ------------------------------------------------------------------------ */

static void check_valid(uint32_t version, uint32_t alignment) {
    struct gw w = {0};
    make_valid(&w, version, alignment);
    struct gguf_file *f = NULL;
    char err[256];
    int rc = gguf_open_buffer(w.p, w.n, &f, err, sizeof err);
    T_ASSERTF(rc == 0, "rc %d: %s", rc, err);
    T_ASSERT(f->version == version && f->alignment == alignment);
    T_ASSERT(f->n_kv == 22 && f->n_tensors == 3);
    T_ASSERT(f->data_offset % alignment == 0);
    uint32_t u;
    int64_t v;
    float x;
    int b;
    const char *s;
    size_t n;
    T_ASSERT(gguf_get_str(f, "general.architecture", &s, &n) == 0 && n == 6 &&
             !memcmp(s, "gemma3", 6));
    T_ASSERT(gguf_get_u32(f, "t.u8", &u) == 0 && u == 200);
    T_ASSERT(gguf_get_i64(f, "t.i8", &v) == 0 && v == -2);
    T_ASSERT(gguf_get_u32(f, "t.i8", &u) == GGUF_ERANGE);
    T_ASSERT(gguf_get_u32(f, "t.u16", &u) == 0 && u == 60000);
    T_ASSERT(gguf_get_i64(f, "t.i16", &v) == 0 && v == -300);
    T_ASSERT(gguf_get_u32(f, "t.u32", &u) == 0 && u == 4000000000u);
    T_ASSERT(gguf_get_i64(f, "t.i32", &v) == 0 && v == -5);
    T_ASSERT(gguf_get_f32(f, "t.f32", &x) == 0 && x == 1.5f);
    T_ASSERT(gguf_get_bool(f, "t.bool", &b) == 0 && b == 1);
    T_ASSERT(gguf_get_u32(f, "t.u64", &u) == GGUF_ERANGE);
    T_ASSERT(gguf_get_i64(f, "t.u64", &v) == 0 && v == (1ll << 40));
    T_ASSERT(gguf_get_i64(f, "t.u64big", &v) == GGUF_ERANGE);
    T_ASSERT(gguf_get_i64(f, "t.i64", &v) == 0 && v == -7);
    T_ASSERT(gguf_get_f32(f, "t.f64", &x) == 0 && x == -2.25f);
    T_ASSERT(gguf_get_str(f, "t.empty_str", &s, &n) == 0 && n == 0);
    /* typed getters verify the type before reading */
    T_ASSERT(gguf_get_u32(f, "general.architecture", &u) == GGUF_ETYPE);
    T_ASSERT(gguf_get_f32(f, "t.u32", &x) == GGUF_ETYPE);
    T_ASSERT(gguf_get_str(f, "t.u32", &s, &n) == GGUF_ETYPE);
    T_ASSERT(gguf_get_bool(f, "t.u8", &b) == GGUF_ERANGE);
    T_ASSERT(gguf_get_u32(f, "a.i32", &u) == GGUF_ETYPE);
    T_ASSERT(gguf_get_u32(f, "missing", &u) == GGUF_ENOTFOUND);
    T_ASSERT(gguf_find(f, "general") == NULL && gguf_find(f, "") == NULL);
    const struct gguf_kv *a;
    T_ASSERT(gguf_get_arr(f, "t.u32", &a) == GGUF_ETYPE);
    T_ASSERT(gguf_get_arr(f, "a.i32", &a) == 0 && a->arr_n == 3 && a->arr_type == GGUF_VT_INT32);
    T_ASSERT(gguf_arr_i64(a, 1, &v) == 0 && v == -2);
    T_ASSERT(gguf_arr_f32(a, 2, &x) == 0 && x == 3.0f);
    T_ASSERT(gguf_arr_i64(a, 3, &v) == GGUF_ERANGE);
    T_ASSERT(gguf_arr_str(a, 0, &s, &n) == GGUF_ETYPE);
    T_ASSERT(gguf_get_arr(f, "a.f32", &a) == 0);
    T_ASSERT(gguf_arr_f32(a, 1, &x) == 0 && x == -8.0f);
    T_ASSERT(gguf_arr_i64(a, 0, &v) == GGUF_ETYPE);
    T_ASSERT(gguf_get_arr(f, "a.str", &a) == 0 && a->arr_n == 4);
    T_ASSERT(gguf_arr_str(a, 0, &s, &n) == 0 && n == 5 && !memcmp(s, "<pad>", 5));
    T_ASSERT(gguf_arr_str(a, 1, &s, &n) == 0 && n == 0);
    T_ASSERT(gguf_arr_str(a, 3, &s, &n) == 0 && n == 4 && !memcmp(s, "\xe2\x96\x81x", 4));
    T_ASSERT(gguf_arr_str(a, 4, &s, &n) == GGUF_ERANGE);
    T_ASSERT(gguf_get_arr(f, "a.bool", &a) == 0 && gguf_arr_i64(a, 2, &v) == 0 && v == 1);
    T_ASSERT(gguf_get_arr(f, "a.u16", &a) == 0 && gguf_arr_i64(a, 1, &v) == 0 && v == 65236);
    T_ASSERT(gguf_get_arr(f, "a.f64", &a) == 0 && gguf_arr_f32(a, 0, &x) == 0 && x == -2.25f);
    T_ASSERT(gguf_get_arr(f, "a.empty", &a) == 0 && a->arr_n == 0);
    T_ASSERT(gguf_arr_i64(a, 0, &v) == GGUF_ERANGE);
    const struct gguf_tensor *t = gguf_find_tensor(f, "a");
    T_ASSERT(t && t->n_dims == 2 && t->ne[0] == 8 && t->ne[1] == 2 && t->ne[2] == 1);
    T_ASSERT(t->type == QT_F32 && t->size == 64 && t->offset == 0);
    T_ASSERT((const uint8_t *)t->data == w.p + f->data_offset);
    float x15;
    memcpy(&x15, (const uint8_t *)t->data + 60, 4);
    T_ASSERT(x15 == 15.0f);
    t = gguf_find_tensor(f, "blk.0.b");
    T_ASSERT(t && t->type == QT_Q8_0 && t->size == 136 && ((const uint8_t *)t->data)[0] == 0x11);
    t = gguf_find_tensor(f, "c");
    T_ASSERT(t && t->type == QT_Q4_K && t->size == 144 && ((const uint8_t *)t->data)[143] == 0x22);
    T_ASSERT(gguf_find_tensor(f, "blk.0") == NULL && gguf_find_tensor(f, "d") == NULL);
    walk(f);
    gguf_close(f);
    free(w.p);
}

static void test_valid_v3(void) { check_valid(3, 32); }
static void test_valid_v2(void) { check_valid(2, 32); }
static void test_valid_alignment_64(void) { check_valid(3, 64); }
static void test_valid_alignment_8(void) { check_valid(3, 8); }

static void test_no_tensors_no_kv(void) {
    struct gw w = {0};
    gw_header(&w, 3, 0, 0);
    struct gguf_file *f = NULL;
    char err[256];
    T_ASSERTF(gguf_open_buffer(w.p, w.n, &f, err, sizeof err) == 0, "%s", err);
    T_ASSERT(f->n_kv == 0 && f->n_tensors == 0 && f->alignment == 32);
    T_ASSERT(gguf_find(f, "x") == NULL && gguf_find_tensor(f, "x") == NULL);
    gguf_close(f);
    gguf_close(NULL);
    free(w.p);
}

/* ---- malformed files, one class of checklist §A at a time ------------------------------- */

static void test_bad_magic_version(void) {
    struct gw w = {0};
    EXPECT_FAIL(&w, "magic at byte 0"); /* empty */
    gw_bytes(&w, "GGU", 3);
    EXPECT_FAIL(&w, "magic at byte 0");
    gw_bytes(&w, "GGUF", 4);
    EXPECT_FAIL(&w, "version at byte 4");
    gw_header(&w, 3, 0, 0);
    w.p[3] = 'X';
    EXPECT_FAIL(&w, "not a GGUF file");
    gw_header(&w, 1, 0, 0);
    EXPECT_FAIL(&w, "unsupported GGUF version 1");
    gw_header(&w, 4, 0, 0);
    EXPECT_FAIL(&w, "unsupported GGUF version 4");
    gw_header(&w, 0, 0, 0);
    EXPECT_FAIL(&w, "unsupported GGUF version 0");
    gw_header(&w, 0x03000000u, 0, 0); /* version 3 written big-endian */
    EXPECT_FAIL(&w, "byte-swapped");
    gw_bytes(&w, "GGUF", 4), gw_u32(&w, 3), gw_u64(&w, 0);
    EXPECT_FAIL(&w, "key count at byte 16");
}

static void test_bad_counts(void) {
    struct gw w = {0};
    gw_header(&w, 3, 0, 1ull << 40);
    EXPECT_FAIL(&w, "key count at byte 16");
    gw_header(&w, 3, 0, UINT64_MAX);
    EXPECT_FAIL(&w, "key count");
    gw_header(&w, 3, 1ull << 62, 0);
    EXPECT_FAIL(&w, "tensor count at byte 8");
    /* count x smallest record must fit: 2 keys claimed, bytes for one */
    gw_header(&w, 3, 0, 2);
    gw_kv_u32(&w, "k", 1);
    EXPECT_FAIL(&w, "key count");
    /* 1 tensor claimed, no bytes for it */
    gw_header(&w, 3, 1, 1);
    gw_kv_str(&w, "general.architecture", "gemma3");
    EXPECT_FAIL(&w, "tensor count");
}

static void test_bad_strings(void) {
    struct gw w = {0};
    gw_header(&w, 3, 0, 1), gw_u64(&w, 1ull << 63), gw_fill(&w, 20, 'k');
    EXPECT_FAIL(&w, "string length 9223372036854775808 over the limit");
    gw_header(&w, 3, 0, 1), gw_u64(&w, 30), gw_fill(&w, 20, 'k');
    EXPECT_FAIL(&w, "key 0 at byte 24: string length 30 past end of file");
    gw_header(&w, 3, 0, 1), gw_u64(&w, 0), gw_u32(&w, GGUF_VT_UINT32), gw_u32(&w, 1);
    EXPECT_FAIL(&w, "empty key");
    gw_header(&w, 3, 0, 1), gw_str(&w, "k"), gw_u32(&w, GGUF_VT_STRING), gw_u64(&w, UINT64_MAX);
    gw_fill(&w, 8, 'x');
    EXPECT_FAIL(&w, "key 'k' (at byte 24): string value at byte 37");
    gw_header(&w, 3, 0, 1), gw_str(&w, "k"), gw_u32(&w, GGUF_VT_STRING), gw_u64(&w, 9);
    gw_fill(&w, 8, 'x');
    EXPECT_FAIL(&w, "past end of file");
    /* truncated in the middle of a scalar value */
    gw_header(&w, 3, 0, 1), gw_str(&w, "kk"), gw_u32(&w, GGUF_VT_UINT64), gw_u32(&w, 0);
    gw_fill(&w, 2, 0);
    EXPECT_FAIL(&w, "UINT64 value at byte 38 past end of file");
}

static void test_bad_arrays(void) {
    struct gw w = {0};
    /* 2^62 u32 elements: count x 4 wraps to 0 in 64 bits */
    gw_header(&w, 3, 0, 1), gw_str(&w, "a"), gw_u32(&w, GGUF_VT_ARRAY);
    gw_u32(&w, GGUF_VT_UINT32), gw_u64(&w, 1ull << 62), gw_fill(&w, 16, 0);
    EXPECT_FAIL(&w, "array of 4611686018427387904 UINT32");
    gw_header(&w, 3, 0, 1), gw_str(&w, "a"), gw_u32(&w, GGUF_VT_ARRAY);
    gw_u32(&w, GGUF_VT_UINT16), gw_u64(&w, 9), gw_fill(&w, 16, 0);
    EXPECT_FAIL(&w, "past end of file");
    gw_header(&w, 3, 0, 1), gw_str(&w, "a"), gw_u32(&w, GGUF_VT_ARRAY);
    gw_u32(&w, GGUF_VT_STRING), gw_u64(&w, UINT64_MAX / 2), gw_fill(&w, 16, 0);
    EXPECT_FAIL(&w, "strings at byte");
    gw_header(&w, 3, 0, 1), gw_str(&w, "a"), gw_u32(&w, GGUF_VT_ARRAY);
    gw_u32(&w, GGUF_VT_STRING), gw_u64(&w, 2), gw_str(&w, "x"), gw_u64(&w, 100);
    gw_fill(&w, 8, 0);
    EXPECT_FAIL(&w, "string element 1 at byte");
    gw_header(&w, 3, 0, 1), gw_str(&w, "a"), gw_u32(&w, GGUF_VT_ARRAY);
    gw_u32(&w, GGUF_VT_ARRAY), gw_u64(&w, 1), gw_u32(&w, GGUF_VT_UINT8), gw_u64(&w, 1);
    gw_u8(&w, 0);
    EXPECT_FAIL(&w, "nested arrays");
    gw_header(&w, 3, 0, 1), gw_str(&w, "a"), gw_u32(&w, GGUF_VT_ARRAY);
    gw_u32(&w, 13), gw_u64(&w, 1), gw_fill(&w, 8, 0);
    EXPECT_FAIL(&w, "array element type 13");
    gw_header(&w, 3, 0, 1), gw_str(&w, "a"), gw_u32(&w, GGUF_VT_ARRAY);
    gw_u32(&w, GGUF_VT_UINT32), gw_u32(&w, 1);
    EXPECT_FAIL(&w, "array length at byte 41");
}

static void test_bad_value_types(void) {
    struct gw w = {0};
    gw_header(&w, 3, 0, 1), gw_str(&w, "k"), gw_u32(&w, 13), gw_u32(&w, 0);
    EXPECT_FAIL(&w, "key 'k' (at byte 24): value type 13 at byte 33 out of range");
    gw_header(&w, 3, 0, 1), gw_str(&w, "k"), gw_u32(&w, 0x80000000u), gw_u32(&w, 0);
    EXPECT_FAIL(&w, "out of range");
    gw_header(&w, 3, 0, 1), gw_str(&w, "k"), gw_u32(&w, GGUF_VT_BOOL), gw_u8(&w, 2);
    EXPECT_FAIL(&w, "BOOL value 2 at byte 37");
    gw_header(&w, 3, 0, 1), gw_str(&w, "k"), gw_u32(&w, GGUF_VT_ARRAY);
    gw_u32(&w, GGUF_VT_BOOL), gw_u64(&w, 3), gw_u8(&w, 0), gw_u8(&w, 1), gw_u8(&w, 0xff);
    EXPECT_FAIL(&w, "BOOL element 2");
    gw_header(&w, 3, 0, 3);
    gw_kv_u32(&w, "dup", 1), gw_kv_u32(&w, "other", 2), gw_kv_str(&w, "dup", "x");
    EXPECT_FAIL(&w, "key 'dup' (at byte 64): duplicate key (first at byte 24)");
}

static void test_bad_alignment(void) {
    static const uint32_t bad[] = {0, 3, 48, 1u << 21, 0x80000000u};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct gw w = {0};
        gw_header(&w, 3, 0, 1);
        gw_kv_u32(&w, "general.alignment", bad[i]);
        EXPECT_FAIL(&w, "key 'general.alignment' (at byte 24)");
    }
    struct gw w = {0};
    gw_header(&w, 3, 0, 1), gw_str(&w, "general.alignment"), gw_u32(&w, GGUF_VT_UINT64);
    gw_u64(&w, 32);
    EXPECT_FAIL(&w, "expected UINT32");
    gw_header(&w, 3, 0, 1), gw_str(&w, "general.alignment"), gw_u32(&w, GGUF_VT_INT32);
    gw_u32(&w, 32);
    EXPECT_FAIL(&w, "expected UINT32");
}

/* One tensor after a header with no keys; info starts at byte 24. */
static void one_tensor(struct gw *w, const char *name, uint32_t n_dims, const uint64_t *ne,
                       uint32_t type, uint64_t off, size_t data) {
    gw_header(w, 3, 1, 0);
    gw_tinfo(w, name, n_dims, ne, type, off);
    gw_pad(w, 32);
    gw_fill(w, data, 0);
}

static void test_bad_dims(void) {
    struct gw w = {0};
    one_tensor(&w, "t", 0, NULL, QT_F32, 0, 64);
    EXPECT_FAIL(&w, "tensor 't' (info at byte 24): n_dims 0 at byte 33 not in 1..4");
    gw_header(&w, 3, 1, 0), gw_str(&w, "t"), gw_u32(&w, 5);
    for (int i = 0; i < 5; i++)
        gw_u64(&w, 1);
    gw_u32(&w, QT_F32), gw_u64(&w, 0), gw_pad(&w, 32), gw_fill(&w, 4, 0);
    EXPECT_FAIL(&w, "n_dims 5");
    gw_header(&w, 3, 1, 0), gw_str(&w, "t"), gw_u32(&w, 0xffffffffu), gw_fill(&w, 64, 0);
    EXPECT_FAIL(&w, "n_dims 4294967295");
    one_tensor(&w, "t", 2, (uint64_t[]){4, 0}, QT_F32, 0, 64);
    EXPECT_FAIL(&w, "ne[1] = 0 at byte 45");
    one_tensor(&w, "t", 1, (uint64_t[]){1ull << 63}, QT_F32, 0, 64);
    EXPECT_FAIL(&w, "ne[0] = 9223372036854775808");
    /* product wraps: 2^40 x 2^40 */
    one_tensor(&w, "t", 3, (uint64_t[]){1ull << 40, 1ull << 40, 1}, QT_F32, 0, 64);
    EXPECT_FAIL(&w, "element count overflows at ne[1]");
    /* element count fits, byte size (x4) does not */
    one_tensor(&w, "t", 2, (uint64_t[]){1ull << 40, 1ull << 22}, QT_F32, 0, 64);
    EXPECT_FAIL(&w, "byte size overflows");
    /* size fine but far past the end */
    one_tensor(&w, "t", 2, (uint64_t[]){1ull << 20, 1ull << 20}, QT_F32, 0, 64);
    EXPECT_FAIL(&w, "past end of file");
}

static void test_bad_types(void) {
    struct gw w = {0};
    one_tensor(&w, "t", 1, (uint64_t[]){32}, 99, 0, 128);
    EXPECT_FAIL(&w, "tensor 't' (info at byte 24): unknown tensor type 99 at byte 45");
    one_tensor(&w, "t", 1, (uint64_t[]){32}, 4, 0, 128); /* removed Q4_2 */
    EXPECT_FAIL(&w, "unknown tensor type 4");
    one_tensor(&w, "t", 1, (uint64_t[]){32}, QT_COUNT, 0, 128);
    EXPECT_FAIL(&w, "unknown tensor type");
    one_tensor(&w, "t", 2, (uint64_t[]){33, 1}, QT_Q8_0, 0, 128);
    EXPECT_FAIL(&w, "ne[0] = 33 is not a multiple of the Q8_0 block size 32");
    one_tensor(&w, "t", 1, (uint64_t[]){640}, QT_Q4_K, 0, 1024);
    EXPECT_FAIL(&w, "block size 256");
}

static void test_bad_offsets(void) {
    struct gw w = {0};
    one_tensor(&w, "t", 1, (uint64_t[]){4}, QT_F32, 1, 64);
    EXPECT_FAIL(&w, "offset 1 at byte 49 is not a multiple of the alignment 32");
    one_tensor(&w, "blk.0.attn_q.weight", 1, (uint64_t[]){16}, QT_F32, 32, 64);
    EXPECT_FAIL(&w, "tensor 'blk.0.attn_q.weight' (info at byte 24): offset 32 + size 64 past "
                    "end of file (160 bytes");
    one_tensor(&w, "t", 1, (uint64_t[]){4}, QT_F32, UINT64_MAX - 31, 64);
    EXPECT_FAIL(&w, "past end of file");
    /* tensor info present, data section missing entirely */
    gw_header(&w, 3, 1, 0), gw_tinfo(&w, "t", 1, (uint64_t[]){4}, QT_F32, 0);
    EXPECT_FAIL(&w, "data section at byte 64");
    /* overlap */
    gw_header(&w, 3, 2, 0);
    gw_tinfo(&w, "x", 1, (uint64_t[]){16}, QT_F32, 0),
        gw_tinfo(&w, "y", 1, (uint64_t[]){8}, QT_F32, 32);
    gw_pad(&w, 32), gw_fill(&w, 128, 0);
    EXPECT_FAIL(&w, "tensor 'x' (info at byte 24): data [0, 64) overlaps tensor 'y' at offset 32");
    /* same offset, listed in reverse */
    gw_header(&w, 3, 2, 0);
    gw_tinfo(&w, "x", 1, (uint64_t[]){8}, QT_F32, 32),
        gw_tinfo(&w, "y", 1, (uint64_t[]){8}, QT_F32, 32);
    gw_pad(&w, 32), gw_fill(&w, 128, 0);
    EXPECT_FAIL(&w, "overlaps");
}

static void test_bad_names(void) {
    struct gw w = {0};
    gw_header(&w, 3, 2, 0);
    gw_tinfo(&w, "x", 1, (uint64_t[]){8}, QT_F32, 0),
        gw_tinfo(&w, "x", 1, (uint64_t[]){8}, QT_F32, 32);
    gw_pad(&w, 32), gw_fill(&w, 64, 0);
    EXPECT_FAIL(&w, "tensor 'x' (info at byte 57): duplicate tensor name");
    char name[80];
    memset(name, 'n', 64), name[64] = 0;
    one_tensor(&w, name, 1, (uint64_t[]){8}, QT_F32, 0, 64);
    EXPECT_FAIL(&w, "name length 64 not in 1..63");
    name[63] = 0; /* 63 bytes is fine */
    one_tensor(&w, name, 1, (uint64_t[]){8}, QT_F32, 0, 32);
    struct gguf_file *f = NULL;
    char err[256];
    T_ASSERTF(open_copy(w.p, w.n, &f, err, sizeof err) == 0, "%s", err);
    T_ASSERT(gguf_find_tensor(f, name) != NULL);
    void *copy = (void *)(uintptr_t)f->map;
    gguf_close(f);
    free(copy);
    free(w.p), w = (struct gw){0};
    one_tensor(&w, "", 1, (uint64_t[]){8}, QT_F32, 0, 32);
    EXPECT_FAIL(&w, "name length 0");
    gw_header(&w, 3, 1, 0), gw_u64(&w, 3), gw_bytes(&w, "a\0b", 3), gw_u32(&w, 1);
    gw_u64(&w, 8), gw_u32(&w, QT_F32), gw_u64(&w, 0), gw_pad(&w, 32), gw_fill(&w, 32, 0);
    EXPECT_FAIL(&w, "NUL byte");
    gw_header(&w, 3, 1, 0), gw_u64(&w, 1ull << 60), gw_fill(&w, 40, 0);
    EXPECT_FAIL(&w, "tensor 0 name at byte 24");
}

static void test_errors_without_buffer(void) {
    struct gw w = {0};
    gw_header(&w, 3, 0, 1ull << 40);
    struct gguf_file *f = (struct gguf_file *)&w; /* must be reset to NULL */
    T_ASSERT(gguf_open_buffer(w.p, w.n, &f, NULL, 0) == GGUF_EFORMAT && f == NULL);
    char tiny[8];
    T_ASSERT(gguf_open_buffer(w.p, w.n, &f, tiny, sizeof tiny) == GGUF_EFORMAT);
    T_ASSERT(strlen(tiny) == 7);
    T_ASSERT(strcmp(gguf_strerror(GGUF_EFORMAT), "malformed GGUF file") == 0);
    T_ASSERT(gguf_strerror(-99) != NULL);
    free(w.p);
}

static void test_open_path_errors(void) {
    struct gguf_file *f = NULL;
    char err[256];
    T_ASSERT(gguf_open("/nonexistent/x.gguf", &f, err, sizeof err) == GGUF_EIO && !f);
    T_ASSERT(strstr(err, "cannot open"));
    T_ASSERT(gguf_open(".", &f, err, sizeof err) == GGUF_EIO && !f);
    char path[] = "/tmp/test_gguf_XXXXXX";
    int fd = mkstemp(path);
    T_ASSERT(fd >= 0);
    T_ASSERT(write(fd, "GGU", 3) == 3);
    close(fd);
    int rc = gguf_open(path, &f, err, sizeof err);
    T_ASSERT(rc == GGUF_EFORMAT && strstr(err, "magic"));
    /* a valid small file through the mmap path */
    struct gw w = {0};
    make_valid(&w, 3, 32);
    fd = open(path, O_WRONLY | O_TRUNC);
    T_ASSERT(fd >= 0 && write(fd, w.p, w.n) == (ssize_t)w.n);
    close(fd);
    rc = gguf_open(path, &f, err, sizeof err);
    unlink(path);
    T_ASSERTF(rc == 0, "%s", err);
    T_ASSERT(f->owns_map == 1 && f->n_tensors == 3);
    walk(f);
    gguf_close(f);
    free(w.p);
}

/* ---- truncations and mutations ---------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void test_every_truncation_fails(void) {
    struct gw w = {0};
    make_valid(&w, 3, 32);
    for (size_t n = 0; n < w.n; n++) {
        struct gguf_file *f = NULL;
        char err[512];
        int rc = open_copy(w.p, n, &f, err, sizeof err);
        T_ASSERTF(rc == GGUF_EFORMAT, "prefix of %zu of %zu bytes: rc %d", n, w.n, rc);
        T_ASSERTF(strncmp(err, "gguf: ", 6) == 0, "prefix %zu: \"%s\"", n, err);
    }
    free(w.p);
}

/* Mutate 1-4 random bytes (random values, bit flips, or boundary integers) per round. */
static void mutate(uint8_t *p, size_t n, uint64_t *seed) {
    int k = 1 + (int)(rng_next(seed) % 4);
    for (int j = 0; j < k; j++) {
        size_t at = (size_t)(rng_next(seed) % n);
        uint64_t r = rng_next(seed);
        switch (r % 4) {
        case 0: p[at] = (uint8_t)(r >> 8); break;
        case 1: p[at] ^= (uint8_t)(1u << ((r >> 8) % 8)); break;
        case 2: p[at] = 0xff; break;
        default: p[at] = 0; break;
        }
    }
}

static void test_mutations_small_file(void) {
    struct gw w = {0};
    make_valid(&w, 3, 32);
    uint64_t seed = 12345;
    int ok = 0, bad = 0;
    uint8_t *buf = malloc(w.n);
    T_ASSERT(buf);
    for (int round = 0; round < 600; round++) {
        memcpy(buf, w.p, w.n);
        mutate(buf, w.n, &seed);
        size_t n = w.n;
        if (round % 3 == 2) n = (size_t)(rng_next(&seed) % (w.n + 1)); /* and truncate */
        struct gguf_file *f = NULL;
        char err[512] = "";
        int rc = open_copy(buf, n, &f, err, sizeof err);
        if (rc == 0) {
            walk(f);
            void *copy = (void *)(uintptr_t)f->map;
            gguf_close(f);
            free(copy);
            ok++;
        } else {
            T_ASSERTF(rc == GGUF_EFORMAT && strncmp(err, "gguf: ", 6) == 0,
                      "round %d: rc %d \"%s\"", round, rc, err);
            bad++;
        }
    }
    printf("    mutations: %d accepted, %d rejected\n", ok, bad);
    T_ASSERT(ok > 0 && bad > 0);
    free(buf);
    free(w.p);
}

/* ---- the bundled model ------------------------------------------------------------------ */

static void test_real_model(void) {
    if (access(t_model_path(), R_OK) != 0) T_SKIP("model %s not present", t_model_path());
    struct gguf_file *f = NULL;
    char err[512];
    double t0 = clock_mono_s();
    int rc = gguf_open(t_model_path(), &f, err, sizeof err);
    double t1 = clock_mono_s();
    T_ASSERTF(rc == 0, "%s", err);
    printf("    open: %.1f ms\n", (t1 - t0) * 1e3);
    T_ASSERT(f->version == 3 && f->n_tensors == 236 && f->n_kv == 33 && f->alignment == 32);
    T_ASSERT(f->data_offset == 6525120);
    const char *s;
    size_t n;
    T_ASSERT(gguf_get_str(f, "general.architecture", &s, &n) == 0 && n == 6 &&
             !memcmp(s, "gemma3", 6));
    uint32_t u;
    float x;
    int b;
    T_ASSERT(gguf_get_u32(f, "gemma3.block_count", &u) == 0 && u == 18);
    T_ASSERT(gguf_get_u32(f, "gemma3.embedding_length", &u) == 0 && u == 640);
    T_ASSERT(gguf_get_u32(f, "gemma3.attention.sliding_window", &u) == 0 && u == 512);
    T_ASSERT(gguf_get_f32(f, "gemma3.rope.freq_base", &x) == 0 && x == 1e6f);
    T_ASSERT(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b) == 0 && b == 1);
    T_ASSERT(gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &u) == 0 && u == 2);
    const struct gguf_kv *tok, *sc, *ty;
    T_ASSERT(gguf_get_arr(f, "tokenizer.ggml.tokens", &tok) == 0 && tok->arr_n == 262144);
    T_ASSERT(gguf_get_arr(f, "tokenizer.ggml.scores", &sc) == 0 && sc->arr_n == 262144);
    T_ASSERT(gguf_get_arr(f, "tokenizer.ggml.token_type", &ty) == 0 && ty->arr_n == 262144);
    T_ASSERT(gguf_arr_str(tok, 2, &s, &n) == 0 && n == 5 && !memcmp(s, "<bos>", 5));
    T_ASSERT(gguf_arr_str(tok, 106, &s, &n) == 0 && n == 13 && !memcmp(s, "<end_of_turn>", 13));
    T_ASSERT(gguf_arr_str(tok, 262143, &s, &n) == 0 && n > 0);
    T_ASSERT(gguf_arr_f32(sc, 0, &x) == 0 && x == -1000.0f);
    const struct gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
    T_ASSERT(t && t->type == QT_Q8_0 && t->n_dims == 2 && t->ne[0] == 640 && t->ne[1] == 262144);
    T_ASSERT(t->size == 178257920);
    t = gguf_find_tensor(f, "blk.0.ffn_down.weight");
    T_ASSERT(t && t->type == QT_Q6_K && t->ne[0] == 2048 && t->ne[1] == 640 && t->size == 1075200);
    t = gguf_find_tensor(f, "output_norm.weight");
    T_ASSERT(t && t->type == QT_F32 && t->size == 2560);
    T_ASSERT(gguf_find_tensor(f, "blk.17.attn_q.weight") != NULL);
    T_ASSERT(gguf_find_tensor(f, "blk.18.attn_q.weight") == NULL);
    walk(f);
    gguf_close(f);
}

/* Mutate bytes of the real model's first 64 KiB (keys, token strings) in a copy-on-write
 * mapping of the whole file, restoring them after each round. */
static void test_mutations_real_header(void) {
    if (access(t_model_path(), R_OK) != 0) T_SKIP("model %s not present", t_model_path());
    int fd = open(t_model_path(), O_RDONLY);
    T_ASSERT(fd >= 0);
    struct stat st;
    T_ASSERT(fstat(fd, &st) == 0 && st.st_size > 65536);
    size_t size = (size_t)st.st_size;
    uint8_t *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    close(fd);
    T_ASSERT(map != MAP_FAILED);
    uint8_t orig[65536];
    memcpy(orig, map, sizeof orig);
    uint64_t seed = 777;
    int ok = 0, bad = 0;
    for (int round = 0; round < 200; round++) {
        /* bias half the rounds towards the fixed header and first keys */
        size_t span = round % 2 ? sizeof orig : 512;
        mutate(map, span, &seed);
        struct gguf_file *f = NULL;
        char err[512] = "";
        int rc = gguf_open_buffer(map, size, &f, err, sizeof err);
        if (rc == 0) {
            T_ASSERT(f->n_tensors <= 236);
            gguf_close(f);
            ok++;
        } else {
            T_ASSERTF(rc == GGUF_EFORMAT && strncmp(err, "gguf: ", 6) == 0,
                      "round %d: rc %d \"%s\"", round, rc, err);
            bad++;
        }
        memcpy(map, orig, sizeof orig);
    }
    printf("    real-header mutations: %d accepted, %d rejected\n", ok, bad);
    T_ASSERT(bad > 0);
    munmap(map, size);
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {
        T_CASE(test_valid_v3),
        T_CASE(test_valid_v2),
        T_CASE(test_valid_alignment_64),
        T_CASE(test_valid_alignment_8),
        T_CASE(test_no_tensors_no_kv),
        T_CASE(test_bad_magic_version),
        T_CASE(test_bad_counts),
        T_CASE(test_bad_strings),
        T_CASE(test_bad_arrays),
        T_CASE(test_bad_value_types),
        T_CASE(test_bad_alignment),
        T_CASE(test_bad_dims),
        T_CASE(test_bad_types),
        T_CASE(test_bad_offsets),
        T_CASE(test_bad_names),
        T_CASE(test_errors_without_buffer),
        T_CASE(test_open_path_errors),
        T_CASE(test_every_truncation_fails),
        T_CASE(test_mutations_small_file),
        T_CASE(test_real_model),
        T_CASE(test_mutations_real_header),
        {0},
    };
    return t_main(argc, argv, cases);
}
