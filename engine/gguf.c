/*
 * gguf — read-only, zero-copy GGUF v2/v3 reader. See gguf.h.
 *
 * The parser walks the file once with a bounds-checked cursor. Every length and count is
 * checked against the bytes left before it is used, every multiplication is overflow-checked,
 * and every check failure produces a message naming the field and its byte offset. Tables
 * (kv, tensors, sorted lookup indices, string offsets) are the only allocations; their sizes
 * are bounded by the file size because each record takes at least a fixed number of bytes.
 */
#include "engine/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/strbuf.h"
#include "engine/kernels/quant.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_ALIGNMENT (1u << 20) /* sane upper bound for general.alignment */
#define GGUF_MAX_KEY_LEN 65535u       /* spec limit */
#define GGUF_MAX_NAME 64u             /* tensor names are < 64 bytes (GGML_MAX_NAME) */
#define GGUF_MAX_COUNT (1ull << 24)   /* tensors / keys: far above any real model */
#define GGUF_MAX_DIM (1ll << 40)      /* one dimension; products are checked separately */

/* Smallest possible records, for "count x smallest record <= bytes left". */
#define GGUF_MIN_KV_BYTES (8 + 1 + 4 + 1)          /* key len, 1-byte key, type, u8 value */
#define GGUF_MIN_TENSOR_BYTES (8 + 1 + 4 + 8 + 4 + 8) /* name len, name, n_dims, ne0, type, off */

/* The public struct plus private lookup tables. Callers only see `pub`. */
struct gguf_file_priv {
    struct gguf_file pub;
    uint32_t *kv_sorted;     /* [n_kv] kv indices sorted by key (bsearch in gguf_find) */
    uint32_t *tensor_sorted; /* [n_tensors] tensor indices sorted by name */
};

static struct gguf_file_priv *priv_of(const struct gguf_file *f) {
    return (struct gguf_file_priv *)(void *)((char *)(uintptr_t)f -
                                             offsetof(struct gguf_file_priv, pub));
}

/* Bounds-checked read cursor over the mapping. */
struct cursor {
    const uint8_t *p; /* the whole file */
    size_t size;      /* bytes */
    size_t pos;       /* next byte to read */
    char *err;        /* message buffer (may be NULL) */
    size_t errlen;
};

static void seterr(struct cursor *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void seterr(struct cursor *c, const char *fmt, ...) {
    if (!c->err) return;
    struct strbuf b;
    strbuf_init(&b, c->err, c->errlen);
    strbuf_printf(&b, "gguf: ");
    va_list ap;
    va_start(ap, fmt);
    strbuf_vprintf(&b, fmt, ap);
    va_end(ap);
}

static size_t left(const struct cursor *c) { return c->size - c->pos; }

static uint16_t rd16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
static uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Check that n more bytes exist for the field `what`; report its offset if not. */
static int need(struct cursor *c, const char *what, size_t n) {
    if (left(c) >= n) return 0;
    seterr(c, "%s at byte %zu: file truncated (%zu bytes)", what, c->pos, c->size);
    return GGUF_EFORMAT;
}
static int get_u32(struct cursor *c, const char *what, uint32_t *out) {
    if (need(c, what, 4)) return GGUF_EFORMAT;
    *out = rd32(c->p + c->pos);
    c->pos += 4;
    return 0;
}
static int get_u64(struct cursor *c, const char *what, uint64_t *out) {
    if (need(c, what, 8)) return GGUF_EFORMAT;
    *out = rd64(c->p + c->pos);
    c->pos += 8;
    return 0;
}

/* A gguf string: u64 length then bytes. `what` names the field for messages. */
static int get_str(struct cursor *c, const char *what, uint64_t maxlen, const char **s,
                   uint64_t *len) {
    size_t at = c->pos;
    uint64_t n;
    if (get_u64(c, what, &n)) return GGUF_EFORMAT;
    if (n > maxlen) {
        seterr(c, "%s at byte %zu: string length %llu over the limit %llu", what, at,
               (unsigned long long)n, (unsigned long long)maxlen);
        return GGUF_EFORMAT;
    }
    if (n > left(c)) {
        seterr(c, "%s at byte %zu: string length %llu past end of file (%zu bytes left)", what,
               at, (unsigned long long)n, left(c));
        return GGUF_EFORMAT;
    }
    *s = (const char *)(c->p + c->pos);
    *len = n;
    c->pos += (size_t)n;
    return 0;
}

/* Bytes of one fixed-size value, 0 for STRING / ARRAY / unknown. */
static size_t vtype_size(uint32_t t) {
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_UINT16: case GGUF_VT_INT16: return 2;
    case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_FLOAT32: return 4;
    case GGUF_VT_UINT64: case GGUF_VT_INT64: case GGUF_VT_FLOAT64: return 8;
    default: return 0;
    }
}

static const char *vtype_name(uint32_t t) {
    static const char *const names[GGUF_VT_COUNT] = {
        "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
        "BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64"};
    return t < GGUF_VT_COUNT ? names[t] : "unknown";
}

/* Parse one key/value record at c->pos into kv. */
static int parse_kv(struct cursor *c, uint64_t idx, struct gguf_kv *kv) {
    size_t at = c->pos;
    char what[64];
    snprintf(what, sizeof what, "key %llu", (unsigned long long)idx);
    const char *key;
    uint64_t klen;
    if (get_str(c, what, GGUF_MAX_KEY_LEN, &key, &klen)) return GGUF_EFORMAT;
    if (klen == 0) {
        seterr(c, "key %llu (at byte %zu): empty key", (unsigned long long)idx, at);
        return GGUF_EFORMAT;
    }
    kv->key = key;
    kv->key_len = (size_t)klen;
    kv->offset = at;
    int kl = klen > 200 ? 200 : (int)klen; /* message excerpt */
    size_t tpos = c->pos;
    if (get_u32(c, "value type", &kv->type)) return GGUF_EFORMAT;
    if (kv->type >= GGUF_VT_COUNT) {
        seterr(c, "key '%.*s' (at byte %zu): value type %u at byte %zu out of range", kl, key,
               at, kv->type, tpos);
        return GGUF_EFORMAT;
    }
    if (kv->type == GGUF_VT_STRING) {
        const char *s;
        uint64_t n;
        kv->value = c->p + c->pos;
        if (get_str(c, "string value", UINT64_MAX, &s, &n)) goto fail_value;
        return 0;
    }
    if (kv->type != GGUF_VT_ARRAY) {
        size_t sz = vtype_size(kv->type);
        if (left(c) < sz) {
            seterr(c, "key '%.*s' (at byte %zu): %s value at byte %zu past end of file", kl, key,
                   at, vtype_name(kv->type), c->pos);
            return GGUF_EFORMAT;
        }
        kv->value = c->p + c->pos;
        if (kv->type == GGUF_VT_BOOL && kv->value[0] > 1) {
            seterr(c, "key '%.*s' (at byte %zu): BOOL value %u at byte %zu is not 0 or 1", kl,
                   key, at, kv->value[0], c->pos);
            return GGUF_EFORMAT;
        }
        c->pos += sz;
        return 0;
    }
    /* ARRAY: element type, count, packed elements. */
    size_t apos = c->pos;
    if (get_u32(c, "array element type", &kv->arr_type)) goto fail_value;
    if (kv->arr_type >= GGUF_VT_COUNT) {
        seterr(c, "key '%.*s' (at byte %zu): array element type %u at byte %zu out of range", kl,
               key, at, kv->arr_type, apos);
        return GGUF_EFORMAT;
    }
    if (kv->arr_type == GGUF_VT_ARRAY) {
        seterr(c, "key '%.*s' (at byte %zu): nested arrays are not supported (byte %zu)", kl,
               key, at, apos);
        return GGUF_EFORMAT;
    }
    size_t npos = c->pos;
    if (get_u64(c, "array length", &kv->arr_n)) goto fail_value;
    kv->value = c->p + c->pos;
    if (kv->arr_type == GGUF_VT_STRING) {
        /* Each string takes at least its 8-byte length prefix. */
        if (kv->arr_n > left(c) / 8) {
            seterr(c, "key '%.*s' (at byte %zu): array of %llu strings at byte %zu needs more "
                   "than the %zu bytes left",
                   kl, key, at, (unsigned long long)kv->arr_n, npos, left(c));
            return GGUF_EFORMAT;
        }
        uint64_t *offs = malloc(kv->arr_n ? kv->arr_n * sizeof *offs : 1);
        if (!offs) {
            seterr(c, "key '%.*s': out of memory for %llu string offsets", kl, key,
                   (unsigned long long)kv->arr_n);
            return GGUF_ENOMEM;
        }
        kv->str_offsets = offs;
        for (uint64_t i = 0; i < kv->arr_n; i++) {
            offs[i] = (uint64_t)(c->p + c->pos - kv->value);
            if (left(c) < 8 || rd64(c->p + c->pos) > left(c) - 8) {
                seterr(c, "key '%.*s' (at byte %zu): string element %llu at byte %zu runs past "
                       "end of file (%zu bytes)",
                       kl, key, at, (unsigned long long)i, c->pos, c->size);
                return GGUF_EFORMAT;
            }
            c->pos += 8 + (size_t)rd64(c->p + c->pos);
        }
        return 0;
    }
    size_t esz = vtype_size(kv->arr_type);
    uint64_t bytes;
    if (__builtin_mul_overflow(kv->arr_n, (uint64_t)esz, &bytes) || bytes > left(c)) {
        seterr(c, "key '%.*s' (at byte %zu): array of %llu %s at byte %zu past end of file "
               "(%zu bytes left)",
               kl, key, at, (unsigned long long)kv->arr_n, vtype_name(kv->arr_type), npos,
               left(c));
        return GGUF_EFORMAT;
    }
    if (kv->arr_type == GGUF_VT_BOOL) {
        for (uint64_t i = 0; i < kv->arr_n; i++)
            if (kv->value[i] > 1) {
                seterr(c, "key '%.*s' (at byte %zu): BOOL element %llu at byte %zu is %u, not "
                       "0 or 1",
                       kl, key, at, (unsigned long long)i, c->pos + (size_t)i, kv->value[i]);
                return GGUF_EFORMAT;
            }
    }
    c->pos += (size_t)bytes;
    return 0;
fail_value:
    /* get_* already wrote a message naming the field; prefix-less is fine, add the key. */
    if (c->err && c->errlen) {
        char tmp[256];
        snprintf(tmp, sizeof tmp, "%s", c->err);
        snprintf(c->err, c->errlen, "gguf: key '%.*s' (at byte %zu): %s", kl, key, at,
                 strncmp(tmp, "gguf: ", 6) == 0 ? tmp + 6 : tmp);
    }
    return GGUF_EFORMAT;
}

/* Parse one tensor info at c->pos. */
static int parse_tensor(struct cursor *c, uint64_t idx, uint32_t alignment,
                        struct gguf_tensor *t) {
    size_t at = c->pos;
    char what[64];
    snprintf(what, sizeof what, "tensor %llu name", (unsigned long long)idx);
    const char *name;
    uint64_t nlen;
    if (get_str(c, what, UINT64_MAX, &name, &nlen)) return GGUF_EFORMAT;
    if (nlen == 0 || nlen >= GGUF_MAX_NAME) {
        seterr(c, "tensor %llu (info at byte %zu): name length %llu not in 1..%u",
               (unsigned long long)idx, at, (unsigned long long)nlen, GGUF_MAX_NAME - 1);
        return GGUF_EFORMAT;
    }
    if (memchr(name, 0, (size_t)nlen)) {
        seterr(c, "tensor %llu (info at byte %zu): name contains a NUL byte",
               (unsigned long long)idx, at);
        return GGUF_EFORMAT;
    }
    memcpy(t->name, name, (size_t)nlen);
    t->name[nlen] = 0;
    const char *nm = t->name;
    size_t dpos = c->pos;
    if (get_u32(c, "n_dims", &t->n_dims)) goto fail_trunc;
    if (t->n_dims < 1 || t->n_dims > 4) {
        seterr(c, "tensor '%s' (info at byte %zu): n_dims %u at byte %zu not in 1..4", nm, at,
               t->n_dims, dpos);
        return GGUF_EFORMAT;
    }
    uint64_t nel = 1;
    for (int i = 0; i < 4; i++) t->ne[i] = 1;
    for (uint32_t i = 0; i < t->n_dims; i++) {
        size_t epos = c->pos;
        uint64_t d;
        if (get_u64(c, "dimension", &d)) goto fail_trunc;
        if (d < 1 || d > (uint64_t)GGUF_MAX_DIM) {
            seterr(c, "tensor '%s' (info at byte %zu): ne[%u] = %llu at byte %zu not in 1..2^40",
                   nm, at, i, (unsigned long long)d, epos);
            return GGUF_EFORMAT;
        }
        if (__builtin_mul_overflow(nel, d, &nel) || nel > (uint64_t)INT64_MAX) {
            seterr(c, "tensor '%s' (info at byte %zu): element count overflows at ne[%u]", nm,
                   at, i);
            return GGUF_EFORMAT;
        }
        t->ne[i] = (int64_t)d;
    }
    size_t tpos = c->pos;
    if (get_u32(c, "type", &t->type)) goto fail_trunc;
    const struct quant_info *qi = quant_info(t->type);
    if (!qi || qi->blck <= 0 || qi->size <= 0) {
        seterr(c, "tensor '%s' (info at byte %zu): unknown tensor type %u at byte %zu", nm, at,
               t->type, tpos);
        return GGUF_EFORMAT;
    }
    if (t->ne[0] % qi->blck != 0) {
        seterr(c, "tensor '%s' (info at byte %zu): ne[0] = %lld is not a multiple of the %s "
               "block size %d",
               nm, at, (long long)t->ne[0], qi->name, qi->blck);
        return GGUF_EFORMAT;
    }
    uint64_t size;
    if (__builtin_mul_overflow(nel / (uint64_t)qi->blck, (uint64_t)qi->size, &size)) {
        seterr(c, "tensor '%s' (info at byte %zu): byte size overflows", nm, at);
        return GGUF_EFORMAT;
    }
    t->size = size;
    size_t opos = c->pos;
    if (get_u64(c, "offset", &t->offset)) goto fail_trunc;
    if (t->offset % alignment != 0) {
        seterr(c, "tensor '%s' (info at byte %zu): offset %llu at byte %zu is not a multiple "
               "of the alignment %u",
               nm, at, (unsigned long long)t->offset, opos, alignment);
        return GGUF_EFORMAT;
    }
    return 0;
fail_trunc:
    seterr(c, "tensor '%s' (info at byte %zu): info truncated at byte %zu (file is %zu bytes)",
           nm, at, c->pos, c->size);
    return GGUF_EFORMAT;
}

/* qsort contexts: qsort has no user pointer, so sort index records that carry the key. */
struct sort_rec {
    const char *s;
    size_t len;
    uint64_t off; /* data offset (tensors by offset) */
    uint32_t idx;
};

static int cmp_str(const char *a, size_t alen, const char *b, size_t blen) {
    int r = memcmp(a, b, alen < blen ? alen : blen);
    if (r) return r;
    return alen < blen ? -1 : alen > blen;
}
static int cmp_rec_str(const void *a, const void *b) {
    const struct sort_rec *x = a, *y = b;
    return cmp_str(x->s, x->len, y->s, y->len);
}
static int cmp_rec_off(const void *a, const void *b) {
    const struct sort_rec *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Build the sorted key index and reject duplicate keys. */
static int index_keys(struct cursor *c, struct gguf_file_priv *fp, struct sort_rec *recs) {
    struct gguf_file *f = &fp->pub;
    for (uint64_t i = 0; i < f->n_kv; i++)
        recs[i] = (struct sort_rec){f->kv[i].key, f->kv[i].key_len, 0, (uint32_t)i};
    qsort(recs, (size_t)f->n_kv, sizeof *recs, cmp_rec_str);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        if (i > 0 && cmp_rec_str(&recs[i - 1], &recs[i]) == 0) {
            const struct gguf_kv *a = &f->kv[recs[i - 1].idx], *b = &f->kv[recs[i].idx];
            if (a->offset > b->offset) {
                const struct gguf_kv *t = a;
                a = b;
                b = t;
            }
            int kl = a->key_len > 200 ? 200 : (int)a->key_len;
            seterr(c, "key '%.*s' (at byte %llu): duplicate key (first at byte %llu)", kl,
                   a->key, (unsigned long long)b->offset, (unsigned long long)a->offset);
            return GGUF_EFORMAT;
        }
        fp->kv_sorted[i] = recs[i].idx;
    }
    return 0;
}

/* Tensor names unique; data ranges inside the data section and disjoint. */
static int index_tensors(struct cursor *c, struct gguf_file_priv *fp, struct sort_rec *recs,
                         const uint64_t *info_at) {
    struct gguf_file *f = &fp->pub;
    uint64_t data_bytes = f->map_size - f->data_offset;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        if (t->offset > data_bytes || t->size > data_bytes - t->offset) {
            seterr(c, "tensor '%s' (info at byte %llu): offset %llu + size %llu past end of file "
                   "(%zu bytes, data section at byte %llu)",
                   t->name, (unsigned long long)info_at[i], (unsigned long long)t->offset,
                   (unsigned long long)t->size, f->map_size,
                   (unsigned long long)f->data_offset);
            return GGUF_EFORMAT;
        }
        recs[i] = (struct sort_rec){t->name, strlen(t->name), t->offset, (uint32_t)i};
    }
    qsort(recs, (size_t)f->n_tensors, sizeof *recs, cmp_rec_str);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        if (i > 0 && cmp_rec_str(&recs[i - 1], &recs[i]) == 0) {
            uint32_t later = recs[i].idx > recs[i - 1].idx ? recs[i].idx : recs[i - 1].idx;
            seterr(c, "tensor '%s' (info at byte %llu): duplicate tensor name", recs[i].s,
                   (unsigned long long)info_at[later]);
            return GGUF_EFORMAT;
        }
        fp->tensor_sorted[i] = recs[i].idx;
    }
    qsort(recs, (size_t)f->n_tensors, sizeof *recs, cmp_rec_off);
    for (uint64_t i = 1; i < f->n_tensors; i++) {
        const struct gguf_tensor *a = &f->tensors[recs[i - 1].idx];
        const struct gguf_tensor *b = &f->tensors[recs[i].idx];
        if (a->offset + a->size > b->offset) {
            seterr(c, "tensor '%s' (info at byte %llu): data [%llu, %llu) overlaps tensor '%s' "
                   "at offset %llu",
                   a->name, (unsigned long long)info_at[recs[i - 1].idx],
                   (unsigned long long)a->offset, (unsigned long long)(a->offset + a->size),
                   b->name, (unsigned long long)b->offset);
            return GGUF_EFORMAT;
        }
    }
    return 0;
}

static int parse_header(struct cursor *c, struct gguf_file *f) {
    if (c->size < 4 || memcmp(c->p, GGUF_MAGIC, 4) != 0) {
        seterr(c, "magic at byte 0: not a GGUF file (file is %zu bytes)", c->size);
        return GGUF_EFORMAT;
    }
    c->pos = 4;
    if (get_u32(c, "version", &f->version)) return GGUF_EFORMAT;
    if ((f->version & 0xFFFFu) == 0 && f->version != 0) {
        seterr(c, "version at byte 4: 0x%08x looks byte-swapped (big-endian file); only "
               "little-endian files are supported", f->version);
        return GGUF_EFORMAT;
    }
    if (f->version != 2 && f->version != 3) {
        seterr(c, "version at byte 4: unsupported GGUF version %u (supported: 2, 3)",
               f->version);
        return GGUF_EFORMAT;
    }
    if (get_u64(c, "tensor count", &f->n_tensors)) return GGUF_EFORMAT;
    if (get_u64(c, "key count", &f->n_kv)) return GGUF_EFORMAT;
    if (f->n_kv > GGUF_MAX_COUNT || f->n_kv > left(c) / GGUF_MIN_KV_BYTES) {
        seterr(c, "key count at byte 16: %llu keys cannot fit in the %zu bytes left",
               (unsigned long long)f->n_kv, left(c));
        return GGUF_EFORMAT;
    }
    if (f->n_tensors > GGUF_MAX_COUNT ||
        f->n_tensors > (left(c) - f->n_kv * GGUF_MIN_KV_BYTES) / GGUF_MIN_TENSOR_BYTES) {
        seterr(c, "tensor count at byte 8: %llu tensors cannot fit in the %zu bytes left",
               (unsigned long long)f->n_tensors, left(c));
        return GGUF_EFORMAT;
    }
    return 0;
}

/* general.alignment: u32, non-zero power of two, <= 1 MiB. */
static int read_alignment(struct cursor *c, struct gguf_file *f) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const struct gguf_kv *kv = gguf_find(f, "general.alignment");
    if (!kv) return 0;
    if (kv->type != GGUF_VT_UINT32) {
        seterr(c, "key 'general.alignment' (at byte %llu): type %s, expected UINT32",
               (unsigned long long)kv->offset, vtype_name(kv->type));
        return GGUF_EFORMAT;
    }
    uint32_t a = rd32(kv->value);
    if (a == 0 || (a & (a - 1)) != 0 || a > GGUF_MAX_ALIGNMENT) {
        seterr(c, "key 'general.alignment' (at byte %llu): %u is not a power of two in "
               "1..%u",
               (unsigned long long)kv->offset, a, GGUF_MAX_ALIGNMENT);
        return GGUF_EFORMAT;
    }
    f->alignment = a;
    return 0;
}

static int parse_all(struct cursor *c, struct gguf_file_priv *fp) {
    struct gguf_file *f = &fp->pub;
    int rc = parse_header(c, f);
    if (rc) return rc;
    /* Counts are bounded by the file size above, so these allocations are too. */
    f->kv = calloc(f->n_kv ? (size_t)f->n_kv : 1, sizeof *f->kv);
    fp->kv_sorted = calloc(f->n_kv ? (size_t)f->n_kv : 1, sizeof *fp->kv_sorted);
    f->tensors = calloc(f->n_tensors ? (size_t)f->n_tensors : 1, sizeof *f->tensors);
    fp->tensor_sorted = calloc(f->n_tensors ? (size_t)f->n_tensors : 1, sizeof(uint32_t));
    uint64_t nrec = f->n_kv > f->n_tensors ? f->n_kv : f->n_tensors;
    struct sort_rec *recs = calloc(nrec ? (size_t)nrec : 1, sizeof *recs);
    uint64_t *info_at = calloc(f->n_tensors ? (size_t)f->n_tensors : 1, sizeof *info_at);
    if (!f->kv || !fp->kv_sorted || !f->tensors || !fp->tensor_sorted || !recs || !info_at) {
        seterr(c, "out of memory for %llu keys and %llu tensors", (unsigned long long)f->n_kv,
               (unsigned long long)f->n_tensors);
        rc = GGUF_ENOMEM;
        goto out;
    }
    /* The kv array is only partially filled while parsing; n_kv counts the parsed ones so
     * that gguf_close frees exactly the string-offset tables that exist. */
    uint64_t n_kv = f->n_kv;
    f->n_kv = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        rc = parse_kv(c, i, &f->kv[i]);
        f->n_kv = i + 1;
        if (rc) goto out;
    }
    if ((rc = index_keys(c, fp, recs))) goto out;
    if ((rc = read_alignment(c, f))) goto out;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        info_at[i] = c->pos;
        if ((rc = parse_tensor(c, i, f->alignment, &f->tensors[i]))) goto out;
    }
    uint64_t end = c->pos;
    uint64_t pad = (f->alignment - end % f->alignment) % f->alignment;
    f->data_offset = end + pad;
    if (f->data_offset > f->map_size) {
        if (f->n_tensors > 0) {
            seterr(c, "data section at byte %llu (after padding to %u) is past end of file "
                   "(%zu bytes)",
                   (unsigned long long)f->data_offset, f->alignment, f->map_size);
            rc = GGUF_EFORMAT;
            goto out;
        }
        f->data_offset = f->map_size; /* no tensors: the padding may be omitted */
    }
    if ((rc = index_tensors(c, fp, recs, info_at))) goto out;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        f->tensors[i].data = f->map + f->data_offset + f->tensors[i].offset;
    rc = 0;
out:
    free(recs);
    free(info_at);
    return rc;
}

static int open_common(const uint8_t *map, size_t size, int owns, struct gguf_file **out,
                       char *err, size_t errlen) {
    *out = NULL;
    if (err && errlen) err[0] = 0;
    struct gguf_file_priv *fp = calloc(1, sizeof *fp);
    if (!fp) {
        if (err && errlen) snprintf(err, errlen, "gguf: out of memory");
        if (owns) munmap((void *)(uintptr_t)map, size);
        return GGUF_ENOMEM;
    }
    fp->pub.map = map;
    fp->pub.map_size = size;
    fp->pub.owns_map = owns;
    struct cursor c = {map, size, 0, err, errlen};
    int rc = parse_all(&c, fp);
    if (rc) {
        gguf_close(&fp->pub);
        return rc;
    }
    *out = &fp->pub;
    return 0;
}

int gguf_open(const char *path, struct gguf_file **out, char *err, size_t errlen) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (err && errlen) snprintf(err, errlen, "gguf: cannot open model file: %s",
                                    strerror(errno));
        return GGUF_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        if (err && errlen) snprintf(err, errlen, "gguf: cannot stat model file: %s",
                                    strerror(errno));
        goto fail_fd;
    }
    if (!S_ISREG(st.st_mode)) {
        if (err && errlen) snprintf(err, errlen, "gguf: model path is not a regular file");
        goto fail_fd;
    }
    if (st.st_size < 4) {
        if (err && errlen)
            snprintf(err, errlen, "gguf: magic at byte 0: not a GGUF file (file is %lld bytes)",
                     (long long)st.st_size);
        close(fd);
        return GGUF_EFORMAT;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        if (err && errlen) snprintf(err, errlen, "gguf: cannot map model file: %s",
                                    strerror(errno));
        goto fail_fd;
    }
    close(fd);
    return open_common(map, (size_t)st.st_size, 1, out, err, errlen);
fail_fd:
    close(fd);
    return GGUF_EIO;
}

int gguf_open_buffer(const void *buf, size_t len, struct gguf_file **out, char *err,
                     size_t errlen) {
    return open_common(buf, len, 0, out, err, errlen);
}

void gguf_close(struct gguf_file *f) {
    if (!f) return;
    struct gguf_file_priv *fp = priv_of(f);
    if (f->kv)
        for (uint64_t i = 0; i < f->n_kv; i++) free((void *)(uintptr_t)f->kv[i].str_offsets);
    free(f->kv);
    free(f->tensors);
    free(fp->kv_sorted);
    free(fp->tensor_sorted);
    if (f->owns_map && f->map) munmap((void *)(uintptr_t)f->map, f->map_size);
    free(fp);
}

const char *gguf_strerror(int status) {
    switch (status) {
    case GGUF_OK: return "success";
    case GGUF_EIO: return "cannot read model file";
    case GGUF_EFORMAT: return "malformed GGUF file";
    case GGUF_ENOTFOUND: return "not found";
    case GGUF_ETYPE: return "wrong metadata type";
    case GGUF_ENOMEM: return "out of memory";
    case GGUF_ERANGE: return "value out of range";
    default: return "unknown error";
    }
}

/* ---- lookups ---------------------------------------------------------------------------- */

const struct gguf_kv *gguf_find(const struct gguf_file *f, const char *key) {
    if (!f || !key) return NULL;
    const struct gguf_file_priv *fp = priv_of(f);
    size_t klen = strlen(key);
    size_t lo = 0, hi = (size_t)f->n_kv;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct gguf_kv *kv = &f->kv[fp->kv_sorted[mid]];
        int r = cmp_str(kv->key, kv->key_len, key, klen);
        if (r == 0) return kv;
        if (r < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name) {
    if (!f || !name) return NULL;
    const struct gguf_file_priv *fp = priv_of(f);
    size_t lo = 0, hi = (size_t)f->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct gguf_tensor *t = &f->tensors[fp->tensor_sorted[mid]];
        int r = strcmp(t->name, name);
        if (r == 0) return t;
        if (r < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* ---- typed values ----------------------------------------------------------------------- */

static int is_int_type(uint32_t t) {
    return t <= GGUF_VT_INT32 || t == GGUF_VT_BOOL || t == GGUF_VT_UINT64 || t == GGUF_VT_INT64;
}

/* Read one integer of type t at p. Unsigned 64-bit values above INT64_MAX set *big. */
static int64_t read_int(uint32_t t, const uint8_t *p, int *big) {
    *big = 0;
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_BOOL: return p[0];
    case GGUF_VT_INT8: return (int8_t)p[0];
    case GGUF_VT_UINT16: return rd16(p);
    case GGUF_VT_INT16: return (int16_t)rd16(p);
    case GGUF_VT_UINT32: return rd32(p);
    case GGUF_VT_INT32: return (int32_t)rd32(p);
    case GGUF_VT_INT64: return (int64_t)rd64(p);
    case GGUF_VT_UINT64: {
        uint64_t v = rd64(p);
        if (v > (uint64_t)INT64_MAX) *big = 1;
        return (int64_t)(v & (uint64_t)INT64_MAX);
    }
    default: return 0;
    }
}

static int read_float(uint32_t t, const uint8_t *p, float *out) {
    if (t == GGUF_VT_FLOAT32) {
        memcpy(out, p, 4);
        return 0;
    }
    if (t == GGUF_VT_FLOAT64) {
        double d;
        memcpy(&d, p, 8);
        *out = (float)d;
        return 0;
    }
    return GGUF_ETYPE;
}

int gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out) {
    const struct gguf_kv *kv = gguf_find(f, key);
    if (!kv) return GGUF_ENOTFOUND;
    if (!is_int_type(kv->type)) return GGUF_ETYPE;
    int big;
    int64_t v = read_int(kv->type, kv->value, &big);
    if (big) return GGUF_ERANGE;
    *out = v;
    return 0;
}

int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out) {
    int64_t v;
    int rc = gguf_get_i64(f, key, &v);
    if (rc) return rc;
    if (v < 0 || v > (int64_t)UINT32_MAX) return GGUF_ERANGE;
    *out = (uint32_t)v;
    return 0;
}

int gguf_get_f32(const struct gguf_file *f, const char *key, float *out) {
    const struct gguf_kv *kv = gguf_find(f, key);
    if (!kv) return GGUF_ENOTFOUND;
    return read_float(kv->type, kv->value, out);
}

int gguf_get_bool(const struct gguf_file *f, const char *key, int *out) {
    int64_t v;
    int rc = gguf_get_i64(f, key, &v);
    if (rc) return rc;
    if (v != 0 && v != 1) return GGUF_ERANGE;
    *out = (int)v;
    return 0;
}

int gguf_get_str(const struct gguf_file *f, const char *key, const char **s, size_t *len) {
    const struct gguf_kv *kv = gguf_find(f, key);
    if (!kv) return GGUF_ENOTFOUND;
    if (kv->type != GGUF_VT_STRING) return GGUF_ETYPE;
    *len = (size_t)rd64(kv->value);
    *s = (const char *)kv->value + 8;
    return 0;
}

int gguf_get_arr(const struct gguf_file *f, const char *key, const struct gguf_kv **out) {
    const struct gguf_kv *kv = gguf_find(f, key);
    if (!kv) return GGUF_ENOTFOUND;
    if (kv->type != GGUF_VT_ARRAY) return GGUF_ETYPE;
    *out = kv;
    return 0;
}

int gguf_arr_i64(const struct gguf_kv *kv, uint64_t i, int64_t *out) {
    if (!kv || kv->type != GGUF_VT_ARRAY || !is_int_type(kv->arr_type)) return GGUF_ETYPE;
    if (i >= kv->arr_n) return GGUF_ERANGE;
    int big;
    int64_t v = read_int(kv->arr_type, kv->value + i * vtype_size(kv->arr_type), &big);
    if (big) return GGUF_ERANGE;
    *out = v;
    return 0;
}

int gguf_arr_f32(const struct gguf_kv *kv, uint64_t i, float *out) {
    if (!kv || kv->type != GGUF_VT_ARRAY) return GGUF_ETYPE;
    if (kv->arr_type == GGUF_VT_FLOAT32 || kv->arr_type == GGUF_VT_FLOAT64) {
        if (i >= kv->arr_n) return GGUF_ERANGE;
        return read_float(kv->arr_type, kv->value + i * vtype_size(kv->arr_type), out);
    }
    int64_t v;
    int rc = gguf_arr_i64(kv, i, &v);
    if (rc) return rc;
    *out = (float)v;
    return 0;
}

int gguf_arr_str(const struct gguf_kv *kv, uint64_t i, const char **s, size_t *len) {
    if (!kv || kv->type != GGUF_VT_ARRAY || kv->arr_type != GGUF_VT_STRING) return GGUF_ETYPE;
    if (i >= kv->arr_n) return GGUF_ERANGE;
    const uint8_t *p = kv->value + kv->str_offsets[i];
    *len = (size_t)rd64(p);
    *s = (const char *)p + 8;
    return 0;
}
