/*
 * quant — ggml tensor data types: block layouts, scalar reference dequantization,
 * activation quantization (Q8_0, Q8_1, Q8_K) and reference dot products.
 *
 * Everything here is the scalar `_ref` truth that SIMD kernels (kern_*.c) are tested
 * against. Functions are pure: they read their inputs and write only their outputs,
 * so any thread may call any of them at any time.
 *
 * Layouts and formulas follow ggml (see shared/docs/gemma-gguf-facts.md §2). A "row" is
 * n contiguous elements along ne0; n must be a multiple of the type's block size.
 */
#ifndef GEMMAD_QUANT_H
#define GEMMAD_QUANT_H

#include <stddef.h>
#include <stdint.h>

/* ggml type ids as stored in GGUF tensor infos. */
enum quant_type {
    QT_F32 = 0,
    QT_F16 = 1,
    QT_Q4_0 = 2,
    QT_Q4_1 = 3,
    QT_Q5_0 = 6,
    QT_Q5_1 = 7,
    QT_Q8_0 = 8,
    QT_Q8_1 = 9,
    QT_Q2_K = 10,
    QT_Q3_K = 11,
    QT_Q4_K = 12,
    QT_Q5_K = 13,
    QT_Q6_K = 14,
    QT_Q8_K = 15,
    QT_IQ4_NL = 20,
    QT_BF16 = 30,
    QT_COUNT = 43 /* one past the highest id any ggml.h defines */
};

#define QK4_0 32
#define QK8_0 32
#define QK_K 256

typedef uint16_t quant_half; /* IEEE binary16 bits */

/* Block structs, byte-for-byte as in ggml-common.h. */
struct block_q4_0 { quant_half d; uint8_t qs[16]; };
struct block_q4_1 { quant_half d, m; uint8_t qs[16]; };
struct block_q5_0 { quant_half d; uint8_t qh[4]; uint8_t qs[16]; };
struct block_q5_1 { quant_half d, m; uint8_t qh[4]; uint8_t qs[16]; };
struct block_q8_0 { quant_half d; int8_t qs[32]; };
struct block_q8_1 { quant_half d, s; int8_t qs[32]; };
struct block_iq4_nl { quant_half d; uint8_t qs[16]; };
struct block_q2_K { uint8_t scales[16]; uint8_t qs[64]; quant_half d, dmin; };
struct block_q3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; quant_half d; };
struct block_q4_K { quant_half d, dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct block_q5_K { quant_half d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct block_q6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; quant_half d; };
struct block_q8_K { float d; int8_t qs[256]; int16_t bsums[16]; };

/* Static facts about one type. */
struct quant_info {
    const char *name;   /* "Q4_K" */
    int blck;           /* elements per block */
    int size;           /* bytes per block */
    int supported;      /* 1 when this engine can dequantize / dot it */
    enum quant_type vec_dot_type; /* activation format llama.cpp pairs with it */
};

/* NULL for an unknown id (caller reports "unknown tensor type N"). */
const struct quant_info *quant_info(uint32_t type);

/* Bytes of a row of n elements; 0 when n is not a multiple of the block size. */
size_t quant_row_size(uint32_t type, int64_t n);

/* fp16 / bf16 conversions (exact, round-to-nearest-even for f32 -> f16). */
float quant_f16_to_f32(quant_half h);
quant_half quant_f32_to_f16(float f);
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f);

/* Dequantize one row of n elements of `type` from src into dst (f32). Returns 0, or -1
 * for an unsupported type. Dispatches to the per-type _ref functions below. */
int quant_dequant_row_ref(uint32_t type, const void *src, float *dst, int64_t n);

void quant_dequant_q4_0_ref(const void *src, float *dst, int64_t n);
void quant_dequant_q4_1_ref(const void *src, float *dst, int64_t n);
void quant_dequant_q5_0_ref(const void *src, float *dst, int64_t n);
void quant_dequant_q5_1_ref(const void *src, float *dst, int64_t n);
void quant_dequant_q8_0_ref(const void *src, float *dst, int64_t n);
void quant_dequant_iq4_nl_ref(const void *src, float *dst, int64_t n);
/* IQ4_NL's level for a 4-bit index (-127..113; the format's fixed table). */
int quant_iq4_nl_level(int nibble);
void quant_dequant_q2_K_ref(const void *src, float *dst, int64_t n);
void quant_dequant_q3_K_ref(const void *src, float *dst, int64_t n);
void quant_dequant_q4_K_ref(const void *src, float *dst, int64_t n);
void quant_dequant_q5_K_ref(const void *src, float *dst, int64_t n);
void quant_dequant_q6_K_ref(const void *src, float *dst, int64_t n);
void quant_dequant_f16_ref(const void *src, float *dst, int64_t n);
void quant_dequant_bf16_ref(const void *src, float *dst, int64_t n);

/* Activation quantization of one f32 row (ggml *_ref semantics: round half away from
 * zero). dst must hold quant_row_size(type, n) bytes. */
void quant_q8_0_row_ref(const float *x, void *dst, int64_t n);
void quant_q8_1_row_ref(const float *x, void *dst, int64_t n);
void quant_q8_K_row_ref(const float *x, void *dst, int64_t n);
void quant_f16_row_ref(const float *x, void *dst, int64_t n);
void quant_bf16_row_ref(const float *x, void *dst, int64_t n);

/* Quantize an activation row into the given vec_dot_type (Q8_0, Q8_1, Q8_K, F16, BF16,
 * or F32 = plain copy). Returns 0 or -1 for a type that is not an activation format. */
int quant_act_row_ref(uint32_t act_type, const float *x, void *dst, int64_t n);

/* Reference dot product of one weight row (type w_type, n elements) with one activation
 * row already in quant_info(w_type)->vec_dot_type. Returns the f32 result. */
typedef float (*quant_vec_dot_fn)(int64_t n, const void *w, const void *a);
quant_vec_dot_fn quant_vec_dot_ref(uint32_t w_type); /* NULL if unsupported */

#endif
