/*
 * gguf — read-only, zero-copy reader for GGUF v2/v3 model files.
 *
 * gguf_open() maps the whole file read-only (MAP_PRIVATE, PROT_READ) and validates every
 * header field, metadata value and tensor info before anything else uses them
 * (shared/docs/reliability-checklist.md §A). After a successful open, every pointer this
 * module hands out points into the mapping or into tables owned by the gguf_file, and stays
 * valid until gguf_close(). Nothing is copied: tensor data is used in place.
 *
 * Threads: open/close from one thread; a successfully opened gguf_file is immutable and may
 * be read from any number of threads at once.
 *
 * Errors: functions return 0 or a negative GGUF_E* code; gguf_open() also writes a one-line
 * message naming the field and its byte offset into err (when err != NULL).
 */
#ifndef GEMMAD_GGUF_H
#define GEMMAD_GGUF_H

#include <stddef.h>
#include <stdint.h>

enum gguf_status {
    GGUF_OK = 0,
    GGUF_EIO = -1,       /* open/stat/mmap failed */
    GGUF_EFORMAT = -2,   /* malformed file (message says which field and offset) */
    GGUF_ENOTFOUND = -3, /* key or tensor absent */
    GGUF_ETYPE = -4,     /* key present with another type */
    GGUF_ENOMEM = -5,
    GGUF_ERANGE = -6,    /* value does not fit the requested type */
};
const char *gguf_strerror(int status);

enum gguf_vtype {
    GGUF_VT_UINT8 = 0, GGUF_VT_INT8 = 1, GGUF_VT_UINT16 = 2, GGUF_VT_INT16 = 3,
    GGUF_VT_UINT32 = 4, GGUF_VT_INT32 = 5, GGUF_VT_FLOAT32 = 6, GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8, GGUF_VT_ARRAY = 9, GGUF_VT_UINT64 = 10, GGUF_VT_INT64 = 11,
    GGUF_VT_FLOAT64 = 12,
    GGUF_VT_COUNT
};

/* One metadata key/value. Scalars and arrays of fixed-size elements are read in place. */
struct gguf_kv {
    const char *key;        /* points into the map; NOT NUL-terminated, see key_len */
    size_t key_len;         /* bytes */
    uint32_t type;          /* enum gguf_vtype */
    uint32_t arr_type;      /* element type when type == ARRAY */
    uint64_t arr_n;         /* element count when type == ARRAY */
    const uint8_t *value;   /* first byte of the value (for arrays: of the first element) */
    uint64_t offset;        /* byte offset of the key record in the file (for messages) */
    const uint64_t *str_offsets; /* ARRAY of STRING only: arr_n offsets (relative to
                                    value) of each string's u64 length prefix; owned */
};

/* One tensor info. ne[i] = 1 for i >= n_dims. */
struct gguf_tensor {
    char name[64];          /* NUL-terminated copy (names are < 64 bytes, checked) */
    uint32_t n_dims;        /* 1..4 */
    int64_t ne[4];          /* ne[0] innermost (contiguous) */
    uint32_t type;          /* enum quant_type */
    uint64_t offset;        /* relative to the data section */
    uint64_t size;          /* bytes, overflow-checked */
    const void *data;       /* inside the map */
};

struct gguf_file {
    const uint8_t *map;     /* the whole file, read-only */
    size_t map_size;        /* bytes */
    uint32_t version;       /* 2 or 3 */
    uint32_t alignment;     /* general.alignment or 32 */
    uint64_t data_offset;   /* start of the tensor data section */
    uint64_t n_kv;
    struct gguf_kv *kv;     /* [n_kv], owned */
    uint64_t n_tensors;
    struct gguf_tensor *tensors; /* [n_tensors], owned */
    int owns_map;           /* 1 when gguf_open mapped the file itself */
};

/* Open and validate a file. *out is NULL on failure. */
int gguf_open(const char *path, struct gguf_file **out, char *err, size_t errlen);
/* Same over a caller-owned buffer (tests, fuzzing); buf must outlive the gguf_file. */
int gguf_open_buffer(const void *buf, size_t len, struct gguf_file **out, char *err,
                     size_t errlen);
void gguf_close(struct gguf_file *f); /* NULL is fine */

/* Lookups. key is NUL-terminated. NULL / GGUF_ENOTFOUND when absent. */
const struct gguf_kv *gguf_find(const struct gguf_file *f, const char *key);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name);

/* Typed getters. Integer getters accept any integer width (and BOOL) and range-check into
 * the result; float getters accept FLOAT32/FLOAT64. Return 0, GGUF_ENOTFOUND, GGUF_ETYPE or
 * GGUF_ERANGE. */
int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out);
int gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out);
int gguf_get_f32(const struct gguf_file *f, const char *key, float *out);
int gguf_get_bool(const struct gguf_file *f, const char *key, int *out);
/* String value: *s points into the map (not NUL-terminated), *len bytes. */
int gguf_get_str(const struct gguf_file *f, const char *key, const char **s, size_t *len);

/* Arrays. gguf_get_arr returns the kv if it is an array (any element type). */
int gguf_get_arr(const struct gguf_file *f, const char *key, const struct gguf_kv **out);
/* Element i of an integer/bool array as int64 (GGUF_ETYPE for non-integer arrays). */
int gguf_arr_i64(const struct gguf_kv *kv, uint64_t i, int64_t *out);
/* Element i of a float (or integer) array as float. */
int gguf_arr_f32(const struct gguf_kv *kv, uint64_t i, float *out);
/* Element i of a string array; *s into the map, not NUL-terminated. */
int gguf_arr_str(const struct gguf_kv *kv, uint64_t i, const char **s, size_t *len);

#endif
