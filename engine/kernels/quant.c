/*
 * quant — scalar reference code for the ggml tensor types (see quant.h).
 *
 * Formulas follow ggml's dequantize_row_* / quantize_row_*_ref / ggml_vec_dot_*_generic
 * (shared/docs/gemma-gguf-facts.md §2). The floating-point expressions keep ggml's operand
 * order so that results match llama.cpp's reference path bit for bit where ggml is itself
 * deterministic. The dot products sum integers per block and scale once per block.
 */
#include "engine/kernels/quant.h"

#include <math.h>
#include <string.h>

#define QI(name, blck, size, sup, vdt)                                                             \
    { name, blck, size, sup, vdt }

/* Indexed by ggml type id; removed ids (4, 5, 31-33, 36-38) have name == NULL. */
static const struct quant_info quant_table[QT_COUNT] = {
    [QT_F32] = QI("F32", 1, 4, 1, QT_F32),          [QT_F16] = QI("F16", 1, 2, 1, QT_F16),
    [QT_Q4_0] = QI("Q4_0", 32, 18, 1, QT_Q8_0),     [QT_Q4_1] = QI("Q4_1", 32, 20, 1, QT_Q8_1),
    [QT_Q5_0] = QI("Q5_0", 32, 22, 1, QT_Q8_0),     [QT_Q5_1] = QI("Q5_1", 32, 24, 1, QT_Q8_1),
    [QT_Q8_0] = QI("Q8_0", 32, 34, 1, QT_Q8_0),     [QT_Q8_1] = QI("Q8_1", 32, 36, 0, QT_Q8_1),
    [QT_Q2_K] = QI("Q2_K", 256, 84, 1, QT_Q8_K),    [QT_Q3_K] = QI("Q3_K", 256, 110, 1, QT_Q8_K),
    [QT_Q4_K] = QI("Q4_K", 256, 144, 1, QT_Q8_K),   [QT_Q5_K] = QI("Q5_K", 256, 176, 1, QT_Q8_K),
    [QT_Q6_K] = QI("Q6_K", 256, 210, 1, QT_Q8_K),   [QT_Q8_K] = QI("Q8_K", 256, 292, 0, QT_Q8_K),
    [16] = QI("IQ2_XXS", 256, 66, 0, QT_Q8_K),      [17] = QI("IQ2_XS", 256, 74, 0, QT_Q8_K),
    [18] = QI("IQ3_XXS", 256, 98, 0, QT_Q8_K),      [19] = QI("IQ1_S", 256, 50, 0, QT_Q8_K),
    [QT_IQ4_NL] = QI("IQ4_NL", 32, 18, 1, QT_Q8_0), [21] = QI("IQ3_S", 256, 110, 0, QT_Q8_K),
    [22] = QI("IQ2_S", 256, 82, 0, QT_Q8_K),        [23] = QI("IQ4_XS", 256, 136, 0, QT_Q8_K),
    [24] = QI("I8", 1, 1, 0, (enum quant_type)24),  [25] = QI("I16", 1, 2, 0, (enum quant_type)25),
    [26] = QI("I32", 1, 4, 0, (enum quant_type)26), [27] = QI("I64", 1, 8, 0, (enum quant_type)27),
    [28] = QI("F64", 1, 8, 0, (enum quant_type)28), [29] = QI("IQ1_M", 256, 56, 0, QT_Q8_K),
    [QT_BF16] = QI("BF16", 1, 2, 1, QT_BF16),       [34] = QI("TQ1_0", 256, 54, 0, QT_Q8_K),
    [35] = QI("TQ2_0", 256, 66, 0, QT_Q8_K),        [39] = QI("MXFP4", 32, 17, 0, QT_Q8_0),
    [40] = QI("NVFP4", 64, 36, 0, QT_Q8_0),         [41] = QI("Q1_0", 128, 18, 0, QT_Q8_0),
    [42] = QI("Q2_0", 64, 18, 0, QT_Q8_0),
};

const struct quant_info *quant_info(uint32_t type) {
    if (type >= QT_COUNT || !quant_table[type].name) return NULL;
    return &quant_table[type];
}

size_t quant_row_size(uint32_t type, int64_t n) {
    const struct quant_info *qi = quant_info(type);
    if (!qi || n < 0 || n % qi->blck) return 0;
    return (size_t)(n / qi->blck) * (size_t)qi->size;
}

/* ---- fp16 / bf16 ------------------------------------------------------------------------ */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float quant_f16_to_f32(quant_half h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13)); /* inf / nan */
    if (exp != 0) return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
    if (man == 0) return bits_f32(sign);
    /* Subnormal half: man * 2^-24, exact in f32. */
    float v = (float)man * 0x1p-24f;
    return sign ? -v : v;
}

quant_half quant_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* nan: keep a quiet nan, keep top payload bits */
        return (quant_half)(sign | 0x7e00 | ((a >> 13) & 0x3ff));
    if (a >= 0x477ff000u) return (quant_half)(sign | 0x7c00); /* rounds to >= 65520: inf */
    if (a >= 0x38800000u) {                                   /* normal half range */
        /* Re-bias exponent (127 -> 15) and round the 13 dropped bits to nearest even. */
        uint32_t r = a - 0x38000000u;
        r += 0xfff + ((r >> 13) & 1);
        return (quant_half)(sign | (r >> 13));
    }
    if (a < 0x33000000u) return sign; /* below half the smallest subnormal: +-0 */
    /* Subnormal half: value = a_mantissa_with_implicit_bit * 2^(e-150); target unit 2^-24. */
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e; /* e in [102, 112] -> shift 14..24 */
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1))) q++;
    return (quant_half)(sign | q);
}

float quant_bf16_to_f32(uint16_t h) {
    return bits_f32((uint32_t)h << 16);
}

uint16_t quant_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64); /* quiet nan */
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

#define H2F(h) quant_f16_to_f32(h)

/* ---- dequantization -------------------------------------------------------------------- */

static const int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                         1,    13,   25,  38,  53,  69,  89,  113};

int quant_iq4_nl_level(int nibble) {
    return kvalues_iq4nl[nibble & 15];
}

/* One 32-element block as integer levels q[32] (element order), its scale d and its min m
 * (has_min = 0 for the symmetric formats). Shared by dequantization and the dot products. */
struct blk32 {
    int8_t q[32];
    float d, m;
};

static void unpack_q4_0(const uint8_t *restrict p, struct blk32 *restrict b) {
    const struct block_q4_0 *x = (const void *)p;
    for (int j = 0; j < 16; j++) {
        b->q[j] = (int8_t)((x->qs[j] & 0xf) - 8);
        b->q[j + 16] = (int8_t)((x->qs[j] >> 4) - 8);
    }
    b->d = H2F(x->d);
    b->m = 0;
}

static void unpack_q4_1(const uint8_t *restrict p, struct blk32 *restrict b) {
    const struct block_q4_1 *x = (const void *)p;
    for (int j = 0; j < 16; j++) {
        b->q[j] = (int8_t)(x->qs[j] & 0xf);
        b->q[j + 16] = (int8_t)(x->qs[j] >> 4);
    }
    b->d = H2F(x->d);
    b->m = H2F(x->m);
}

/* The 5th bits of Q5_0 / Q5_1: bit j of qh for element j (and j + 16). */
static void add_q5_high(const uint8_t *restrict qh4, int8_t *restrict q, int bias) {
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    for (int j = 0; j < 32; j++)
        q[j] = (int8_t)(q[j] + (int)((qh >> j) & 1) * 16 - bias);
}

static void unpack_q5_0(const uint8_t *restrict p, struct blk32 *restrict b) {
    const struct block_q5_0 *x = (const void *)p;
    for (int j = 0; j < 16; j++) {
        b->q[j] = (int8_t)(x->qs[j] & 0xf);
        b->q[j + 16] = (int8_t)(x->qs[j] >> 4);
    }
    add_q5_high(x->qh, b->q, 16);
    b->d = H2F(x->d);
    b->m = 0;
}

static void unpack_q5_1(const uint8_t *restrict p, struct blk32 *restrict b) {
    const struct block_q5_1 *x = (const void *)p;
    for (int j = 0; j < 16; j++) {
        b->q[j] = (int8_t)(x->qs[j] & 0xf);
        b->q[j + 16] = (int8_t)(x->qs[j] >> 4);
    }
    add_q5_high(x->qh, b->q, 0);
    b->d = H2F(x->d);
    b->m = H2F(x->m);
}

static void unpack_q8_0(const uint8_t *restrict p, struct blk32 *restrict b) {
    const struct block_q8_0 *x = (const void *)p;
    memcpy(b->q, x->qs, 32);
    b->d = H2F(x->d);
    b->m = 0;
}

static void unpack_iq4_nl(const uint8_t *restrict p, struct blk32 *restrict b) {
    const struct block_iq4_nl *x = (const void *)p;
    for (int j = 0; j < 16; j++) {
        b->q[j] = kvalues_iq4nl[x->qs[j] & 0xf];
        b->q[j + 16] = kvalues_iq4nl[x->qs[j] >> 4];
    }
    b->d = H2F(x->d);
    b->m = 0;
}

static void unpack_q8_1(const uint8_t *restrict p, struct blk32 *restrict b) {
    const struct block_q8_1 *x = (const void *)p;
    memcpy(b->q, x->qs, 32);
    b->d = H2F(x->d);
    b->m = 0;
}

typedef void (*unpack32_fn)(const uint8_t *restrict p, struct blk32 *restrict b);

/* y = q * d (+ m), the operand order of ggml's dequantize_row_*. */
static inline void dequant_blk32(const uint8_t *restrict src, size_t bsize, unpack32_fn unpack,
                                 int has_min, float *restrict dst, int64_t n) {
    struct blk32 b;
    for (int64_t i = 0; i < n / 32; i++, src += bsize, dst += 32) {
        unpack(src, &b);
        if (has_min)
            for (int j = 0; j < 32; j++)
                dst[j] = b.q[j] * b.d + b.m;
        else
            for (int j = 0; j < 32; j++)
                dst[j] = b.q[j] * b.d;
    }
}

void quant_dequant_q4_0_ref(const void *src, float *dst, int64_t n) {
    dequant_blk32(src, sizeof(struct block_q4_0), unpack_q4_0, 0, dst, n);
}
void quant_dequant_q4_1_ref(const void *src, float *dst, int64_t n) {
    dequant_blk32(src, sizeof(struct block_q4_1), unpack_q4_1, 1, dst, n);
}
void quant_dequant_q5_0_ref(const void *src, float *dst, int64_t n) {
    dequant_blk32(src, sizeof(struct block_q5_0), unpack_q5_0, 0, dst, n);
}
void quant_dequant_q5_1_ref(const void *src, float *dst, int64_t n) {
    dequant_blk32(src, sizeof(struct block_q5_1), unpack_q5_1, 1, dst, n);
}
void quant_dequant_q8_0_ref(const void *src, float *dst, int64_t n) {
    dequant_blk32(src, sizeof(struct block_q8_0), unpack_q8_0, 0, dst, n);
}
void quant_dequant_iq4_nl_ref(const void *src, float *dst, int64_t n) {
    dequant_blk32(src, sizeof(struct block_iq4_nl), unpack_iq4_nl, 0, dst, n);
}
static void dequant_q8_1_ref(const void *src, float *dst, int64_t n) {
    dequant_blk32(src, sizeof(struct block_q8_1), unpack_q8_1, 0, dst, n);
}

void quant_dequant_q2_K_ref(const void *src, float *dst_, int64_t n) {
    float *restrict dst = dst_; /* no aliasing with src: lets the loops vectorize */
    const struct block_q2_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = H2F(b[i].d), dmin = H2F(b[i].dmin);
        const uint8_t *q = b[i].qs;
        int is = 0;
        for (int h = 0; h < 2; h++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; half++) {
                    uint8_t sc = b[i].scales[is++];
                    float dl = d * (sc & 0xf), ml = dmin * (sc >> 4);
                    for (int l = 0; l < 16; l++)
                        *dst++ = dl * ((q[16 * half + l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

/* The 16 six-bit Q3_K scales from their 12 packed bytes (unsigned, 0..63). */
static void q3k_scales(const uint8_t *p, int S[16]) {
    for (int m = 0; m < 4; m++) {
        S[m] = (p[m] & 0xf) | (((p[8 + m] >> 0) & 3) << 4);
        S[4 + m] = (p[4 + m] & 0xf) | (((p[8 + m] >> 2) & 3) << 4);
        S[8 + m] = (p[m] >> 4) | (((p[8 + m] >> 4) & 3) << 4);
        S[12 + m] = (p[4 + m] >> 4) | (((p[8 + m] >> 6) & 3) << 4);
    }
}

void quant_dequant_q3_K_ref(const void *src, float *dst_, int64_t n) {
    float *restrict dst = dst_; /* no aliasing with src: lets the loops vectorize */
    const struct block_q3_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d_all = H2F(b[i].d);
        int S[16];
        q3k_scales(b[i].scales, S);
        const uint8_t *q = b[i].qs, *hm = b[i].hmask;
        uint8_t m = 1;
        int is = 0;
        for (int h = 0; h < 2; h++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
                float dl = d_all * (S[is++] - 32);
                for (int l = 0; l < 16; l++)
                    *dst++ = dl * ((int8_t)((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                dl = d_all * (S[is++] - 32);
                for (int l = 0; l < 16; l++)
                    *dst++ = dl * ((int8_t)((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
            }
        }
    }
}

/* (scale, min) pair j of the 12 packed Q4_K / Q5_K scale bytes. */
static inline void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
        *mn = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

void quant_dequant_q4_K_ref(const void *src, float *dst_, int64_t n) {
    float *restrict dst = dst_; /* no aliasing with src: lets the loops vectorize */
    const struct block_q4_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = H2F(b[i].d), dmin = H2F(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t sc, mn;
            scale_min_k4(2 * c, b[i].scales, &sc, &mn);
            const float d1 = d * sc, m1 = dmin * mn;
            scale_min_k4(2 * c + 1, b[i].scales, &sc, &mn);
            const float d2 = d * sc, m2 = dmin * mn;
            for (int l = 0; l < 32; l++)
                *dst++ = d1 * (q[l] & 0xf) - m1;
            for (int l = 0; l < 32; l++)
                *dst++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

void quant_dequant_q5_K_ref(const void *src, float *dst_, int64_t n) {
    float *restrict dst = dst_; /* no aliasing with src: lets the loops vectorize */
    const struct block_q5_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = H2F(b[i].d), dmin = H2F(b[i].dmin);
        const uint8_t *q = b[i].qs, *qh = b[i].qh;
        uint8_t u1 = 1, u2 = 2;
        for (int c = 0; c < 4; c++, q += 32, u1 <<= 2, u2 <<= 2) {
            uint8_t sc, mn;
            scale_min_k4(2 * c, b[i].scales, &sc, &mn);
            const float d1 = d * sc, m1 = dmin * mn;
            scale_min_k4(2 * c + 1, b[i].scales, &sc, &mn);
            const float d2 = d * sc, m2 = dmin * mn;
            for (int l = 0; l < 32; l++)
                *dst++ = d1 * ((q[l] & 0xf) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *dst++ = d2 * ((q[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

void quant_dequant_q6_K_ref(const void *src, float *dst_, int64_t n) {
    float *restrict dst = dst_; /* no aliasing with src: lets the loops vectorize */
    const struct block_q6_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = H2F(b[i].d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b[i].ql + 64 * h, *qh = b[i].qh + 32 * h;
            const int8_t *sc = b[i].scales + 8 * h;
            float *y = dst + 128 * h;
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = (int8_t)((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = (int8_t)((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = (int8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
        dst += QK_K;
    }
}

static void dequant_q8_K_ref(const void *src, float *dst, int64_t n) {
    const struct block_q8_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K)
        for (int j = 0; j < QK_K; j++)
            dst[j] = b[i].d * b[i].qs[j];
}

void quant_dequant_f16_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) {
        quant_half h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = quant_f16_to_f32(h);
    }
}

void quant_dequant_bf16_ref(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = quant_bf16_to_f32(h);
    }
}

int quant_dequant_row_ref(uint32_t type, const void *src, float *dst, int64_t n) {
    const struct quant_info *qi = quant_info(type);
    if (!qi || n % qi->blck) return -1;
    switch (type) {
    case QT_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return 0;
    case QT_F16:
        quant_dequant_f16_ref(src, dst, n);
        return 0;
    case QT_BF16:
        quant_dequant_bf16_ref(src, dst, n);
        return 0;
    case QT_Q4_0:
        quant_dequant_q4_0_ref(src, dst, n);
        return 0;
    case QT_Q4_1:
        quant_dequant_q4_1_ref(src, dst, n);
        return 0;
    case QT_Q5_0:
        quant_dequant_q5_0_ref(src, dst, n);
        return 0;
    case QT_Q5_1:
        quant_dequant_q5_1_ref(src, dst, n);
        return 0;
    case QT_Q8_0:
        quant_dequant_q8_0_ref(src, dst, n);
        return 0;
    case QT_Q8_1:
        dequant_q8_1_ref(src, dst, n);
        return 0;
    case QT_Q2_K:
        quant_dequant_q2_K_ref(src, dst, n);
        return 0;
    case QT_Q3_K:
        quant_dequant_q3_K_ref(src, dst, n);
        return 0;
    case QT_Q4_K:
        quant_dequant_q4_K_ref(src, dst, n);
        return 0;
    case QT_Q5_K:
        quant_dequant_q5_K_ref(src, dst, n);
        return 0;
    case QT_Q6_K:
        quant_dequant_q6_K_ref(src, dst, n);
        return 0;
    case QT_Q8_K:
        dequant_q8_K_ref(src, dst, n);
        return 0;
    case QT_IQ4_NL:
        quant_dequant_iq4_nl_ref(src, dst, n);
        return 0;
    default:
        return -1;
    }
}

/* ---- activation quantization ----------------------------------------------------------- */

/* Round to nearest, ties to even, as ggml's nearest_int (|v| < 2^22). */
static inline int nearest_int(float v) {
    float t = v + 12582912.f;
    uint32_t u = f32_bits(t);
    return (int)(u & 0x007fffff) - 0x00400000;
}

/* Q8_0 and Q8_1 as ggml-cpu quantizes activations on x86 (quantize_row_q8_0/_1 in its AVX
 * code, which every llama.cpp build on these machines runs): d = amax/127 stored as f16,
 * the multiplier 127/amax (not 1/d: the two differ in the last bit and move exact .5
 * products, which real activations hit), products rounded half to even. ggml's scalar
 * reference (1/d, round half away) gives other bytes on such ties. */
void quant_q8_0_row_ref(const float *x, void *dst, int64_t n) {
    struct block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[i].d = quant_f32_to_f16(d);
        for (int j = 0; j < 32; j++)
            y[i].qs[j] = (int8_t)nearest_int(x[j] * id);
    }
}

void quant_q8_1_row_ref(const float *x, void *dst, int64_t n) {
    struct block_q8_1 *y = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[i].d = quant_f32_to_f16(d);
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            y[i].qs[j] = (int8_t)nearest_int(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].s = quant_f32_to_f16(d * (float)sum);
    }
}

void quant_q8_K_row_ref(const float *x, void *dst, int64_t n) {
    struct block_q8_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < QK_K; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {
            int v = nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int k = 0; k < 16; k++)
                sum += y[i].qs[16 * j + k];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

void quant_f16_row_ref(const float *x, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) {
        quant_half h = quant_f32_to_f16(x[i]);
        memcpy(p + 2 * i, &h, 2);
    }
}

void quant_bf16_row_ref(const float *x, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = quant_f32_to_bf16(x[i]);
        memcpy(p + 2 * i, &h, 2);
    }
}

int quant_act_row_ref(uint32_t act_type, const float *x, void *dst, int64_t n) {
    switch (act_type) {
    case QT_F32:
        memcpy(dst, x, (size_t)n * sizeof(float));
        return 0;
    case QT_F16:
        quant_f16_row_ref(x, dst, n);
        return 0;
    case QT_BF16:
        quant_bf16_row_ref(x, dst, n);
        return 0;
    case QT_Q8_0:
        if (n % 32) return -1;
        quant_q8_0_row_ref(x, dst, n);
        return 0;
    case QT_Q8_1:
        if (n % 32) return -1;
        quant_q8_1_row_ref(x, dst, n);
        return 0;
    case QT_Q8_K:
        if (n % QK_K) return -1;
        quant_q8_K_row_ref(x, dst, n);
        return 0;
    default:
        return -1;
    }
}

/* ---- reference dot products ------------------------------------------------------------- */
/* Each block's integer sum is exact; the float accumulation runs block by block in order. */

static float dot_f32(int64_t n, const void *w, const void *a) {
    const float *x = w, *y = a;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)(x[i] * y[i]);
    return (float)s;
}

/* 16-bit float formats: widen each element exactly, accumulate in double (as ggml does). */
static inline float dot_half(int64_t n, const uint8_t *x, const uint8_t *y,
                             float (*cvt)(uint16_t)) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        uint16_t hx, hy;
        memcpy(&hx, x + 2 * i, 2);
        memcpy(&hy, y + 2 * i, 2);
        s += (double)(cvt(hx) * cvt(hy));
    }
    return (float)s;
}

static float dot_f16(int64_t n, const void *w, const void *a) {
    return dot_half(n, w, a, quant_f16_to_f32);
}

static float dot_bf16(int64_t n, const void *w, const void *a) {
    return dot_half(n, w, a, quant_bf16_to_f32);
}

/* 32-element formats against Q8_0 (has_min = 0) or Q8_1 (min term m_w * s_a). */
static inline float dot_blk32(int64_t n, const uint8_t *w, size_t bsize, unpack32_fn unpack,
                              int has_min, const void *a) {
    float sumf = 0;
    struct blk32 b;
    if (!has_min) {
        const struct block_q8_0 *y = a;
        for (int64_t i = 0; i < n / 32; i++, w += bsize) {
            unpack(w, &b);
            int s = 0;
            for (int j = 0; j < 32; j++)
                s += b.q[j] * y[i].qs[j];
            sumf += (b.d * H2F(y[i].d)) * s;
        }
    } else {
        const struct block_q8_1 *y = a;
        for (int64_t i = 0; i < n / 32; i++, w += bsize) {
            unpack(w, &b);
            int s = 0;
            for (int j = 0; j < 32; j++)
                s += b.q[j] * y[i].qs[j];
            sumf += (b.d * H2F(y[i].d)) * s + b.m * H2F(y[i].s);
        }
    }
    return sumf;
}

static float dot_q4_0(int64_t n, const void *w, const void *a) {
    return dot_blk32(n, w, sizeof(struct block_q4_0), unpack_q4_0, 0, a);
}
static float dot_q4_1(int64_t n, const void *w, const void *a) {
    return dot_blk32(n, w, sizeof(struct block_q4_1), unpack_q4_1, 1, a);
}
static float dot_q5_0(int64_t n, const void *w, const void *a) {
    return dot_blk32(n, w, sizeof(struct block_q5_0), unpack_q5_0, 0, a);
}
static float dot_q5_1(int64_t n, const void *w, const void *a) {
    return dot_blk32(n, w, sizeof(struct block_q5_1), unpack_q5_1, 1, a);
}
static float dot_q8_0(int64_t n, const void *w, const void *a) {
    return dot_blk32(n, w, sizeof(struct block_q8_0), unpack_q8_0, 0, a);
}
static float dot_iq4_nl(int64_t n, const void *w, const void *a) {
    return dot_blk32(n, w, sizeof(struct block_iq4_nl), unpack_iq4_nl, 0, a);
}

static float dot_q2_K(int64_t n, const void *w, const void *a) {
    const struct block_q2_K *x = w;
    const struct block_q8_K *y = a;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *q2 = x[i].qs, *sc = x[i].scales;
        const int8_t *q8 = y[i].qs;
        int summs = 0;
        for (int j = 0; j < 16; j++)
            summs += y[i].bsums[j] * (sc[j] >> 4);
        const float dall = y[i].d * H2F(x[i].d);
        const float dmin = y[i].d * H2F(x[i].dmin);
        int isum = 0, is = 0;
        for (int h = 0; h < 2; h++, q2 += 32) {
            for (int shift = 0; shift < 8; shift += 2, q8 += 32) {
                int s = 0;
                for (int l = 0; l < 16; l++)
                    s += q8[l] * ((q2[l] >> shift) & 3);
                isum += (sc[is++] & 0xf) * s;
                s = 0;
                for (int l = 16; l < 32; l++)
                    s += q8[l] * ((q2[l] >> shift) & 3);
                isum += (sc[is++] & 0xf) * s;
            }
        }
        sumf += dall * isum - dmin * summs;
    }
    return sumf;
}

static float dot_q3_K(int64_t n, const void *w, const void *a) {
    const struct block_q3_K *x = w;
    const struct block_q8_K *y = a;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int S[16];
        q3k_scales(x[i].scales, S);
        const uint8_t *q3 = x[i].qs, *hm = x[i].hmask;
        const int8_t *q8 = y[i].qs;
        int isum = 0, is = 0;
        /* Written with explicit indices and bit positions: GCC 12 miscompiles the equivalent
         * loop with running pointers and a `m <<= 1` high-bit mask when it vectorises for
         * -march=icelake-server/cooperlake (wrong sums; test_quant caught it). */
        for (int h = 0; h < 2; h++) {
            for (int sh = 0; sh < 4; sh++) {
                for (int half = 0; half < 2; half++) {
                    int s = 0;
                    for (int l = 16 * half; l < 16 * half + 16; l++) {
                        const int qv = (q3[32 * h + l] >> (2 * sh)) & 3;
                        const int hb = (hm[l] >> (4 * h + sh)) & 1;
                        s += q8[128 * h + 32 * sh + l] * (qv - (hb ? 0 : 4));
                    }
                    isum += (S[is++] - 32) * s;
                }
            }
        }
        sumf += H2F(x[i].d) * y[i].d * isum;
    }
    return sumf;
}

/* Q4_K and Q5_K share everything but the 5th bit; qh == NULL means Q4_K. */
static float dot_q45_K(int64_t nb, const uint8_t *blk, size_t bsize, const struct block_q8_K *y,
                       int five) {
    float sumf = 0;
    for (int64_t i = 0; i < nb; i++, blk += bsize) {
        quant_half hd, hdmin;
        memcpy(&hd, blk, 2);
        memcpy(&hdmin, blk + 2, 2);
        const uint8_t *scales = blk + 4;
        const uint8_t *qh = five ? blk + 16 : NULL;
        const uint8_t *q = five ? blk + 48 : blk + 16;
        const int8_t *q8 = y[i].qs;
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++)
            scale_min_k4(j, scales, &sc[j], &mn[j]);
        int summ = 0;
        for (int j = 0; j < 16; j++)
            summ += y[i].bsums[j] * mn[j / 2];
        int isum = 0;
        for (int c = 0; c < 4; c++, q += 32, q8 += 64) {
            int s_lo = 0, s_hi = 0;
            for (int l = 0; l < 32; l++) {
                int lo = q[l] & 0xf, hi = q[l] >> 4;
                if (qh) {
                    lo += (qh[l] >> (2 * c) & 1) << 4;
                    hi += (qh[l] >> (2 * c + 1) & 1) << 4;
                }
                s_lo += lo * q8[l];
                s_hi += hi * q8[l + 32];
            }
            isum += sc[2 * c] * s_lo + sc[2 * c + 1] * s_hi;
        }
        const float d = H2F(hd) * y[i].d;
        const float dmin = H2F(hdmin) * y[i].d;
        sumf += d * isum - dmin * summ;
    }
    return sumf;
}

static float dot_q4_K(int64_t n, const void *w, const void *a) {
    return dot_q45_K(n / QK_K, w, sizeof(struct block_q4_K), a, 0);
}

static float dot_q5_K(int64_t n, const void *w, const void *a) {
    return dot_q45_K(n / QK_K, w, sizeof(struct block_q5_K), a, 1);
}

static float dot_q6_K(int64_t n, const void *w, const void *a) {
    const struct block_q6_K *x = w;
    const struct block_q8_K *y = a;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t v[QK_K];
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            int8_t *o = v + 128 * h;
            for (int l = 0; l < 32; l++) {
                o[l] = (int8_t)(((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32);
                o[l + 32] = (int8_t)(((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32);
                o[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            }
        }
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++)
                s += v[16 * j + l] * y[i].qs[16 * j + l];
            isum += x[i].scales[j] * s;
        }
        sumf += H2F(x[i].d) * y[i].d * isum;
    }
    return sumf;
}

quant_vec_dot_fn quant_vec_dot_ref(uint32_t w_type) {
    switch (w_type) {
    case QT_F32:
        return dot_f32;
    case QT_F16:
        return dot_f16;
    case QT_BF16:
        return dot_bf16;
    case QT_Q4_0:
        return dot_q4_0;
    case QT_Q4_1:
        return dot_q4_1;
    case QT_Q5_0:
        return dot_q5_0;
    case QT_Q5_1:
        return dot_q5_1;
    case QT_Q8_0:
        return dot_q8_0;
    case QT_Q2_K:
        return dot_q2_K;
    case QT_Q3_K:
        return dot_q3_K;
    case QT_Q4_K:
        return dot_q4_K;
    case QT_Q5_K:
        return dot_q5_K;
    case QT_Q6_K:
        return dot_q6_K;
    case QT_IQ4_NL:
        return dot_iq4_nl;
    default:
        return NULL;
    }
}
