/* gen_blocks — random rows in a tensor's own block format (see gen_gguf.h). */
#include "tools/gen-gguf/gen_gguf.h"

#include <string.h>

#include "engine/kernels/quant.h"

uint64_t gen_rng_next(uint64_t *s) {
    /* splitmix64: fast, good enough for weights, identical on every machine */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static float unif(uint64_t *s) {
    return (float)((double)(gen_rng_next(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static void rand_bytes(uint64_t *s, void *dst, size_t n) {
    uint8_t *p = dst;
    while (n >= 8) {
        uint64_t r = gen_rng_next(s);
        memcpy(p, &r, 8);
        p += 8;
        n -= 8;
    }
    if (n) {
        uint64_t r = gen_rng_next(s);
        memcpy(p, &r, n);
    }
}

static quant_half half(float f) { return quant_f32_to_f16(f); }

/* Scale of one block, jittered ±25 % so that blocks differ, for a target element std.
 * `qstd` is the std of the block's integer codes (uniform codes, minus their mid-point). */
static float jitter(uint64_t *s, float std, float qstd) {
    return std / qstd * (1.0f + 0.25f * unif(s));
}

/*
 * Q4_K / Q5_K scales: eight (scale, min) pairs of 6 bits packed into 12 bytes as
 * ggml's get_scale_min_k4 reads them.
 */
static void pack_k4_scales(uint8_t q[12], const uint8_t sc[8], const uint8_t m[8]) {
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}

/* A K-quant super-block with codes 0..qmax: value = d*sc*q - dmin*m, centred on zero by
 * m = sc and dmin = d * qmax / 2. */
static void k4_scales(uint64_t *s, float std, float qmax, quant_half *d, quant_half *dmin,
                      uint8_t scales[12]) {
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++) sc[j] = m[j] = (uint8_t)(24 + (gen_rng_next(s) % 17)); /* 24..40 */
    pack_k4_scales(scales, sc, m);
    const float dd = jitter(s, std, 32.0f * qmax * 0.2887f); /* uniform 0..qmax: std qmax/sqrt12 */
    *d = half(dd);
    *dmin = half(dd * qmax * 0.5f);
}

int gen_blocks_row(uint32_t type, int64_t n, float std, uint64_t *rng, void *dst) {
    const struct quant_info *qi = quant_info(type);
    if (!qi || n % qi->blck) return -1;
    const int64_t nb = n / qi->blck;
    switch (type) {
    case QT_F32: {
        float *f = dst;
        for (int64_t i = 0; i < n; i++) f[i] = std * 1.7320508f * unif(rng);
        return 0;
    }
    case QT_F16: {
        quant_half *h = dst;
        for (int64_t i = 0; i < n; i++) h[i] = half(std * 1.7320508f * unif(rng));
        return 0;
    }
    case QT_BF16: {
        uint16_t *h = dst;
        for (int64_t i = 0; i < n; i++) h[i] = quant_f32_to_bf16(std * 1.7320508f * unif(rng));
        return 0;
    }
    case QT_Q4_0:
    case QT_IQ4_NL: { /* codes -8..7 (std 4.6); IQ4_NL's table -127..113 (std ~70) */
        struct block_q4_0 *b = dst;
        for (int64_t i = 0; i < nb; i++) {
            rand_bytes(rng, b[i].qs, sizeof b[i].qs);
            b[i].d = half(jitter(rng, std, type == QT_Q4_0 ? 4.61f : 70.0f));
        }
        return 0;
    }
    case QT_Q4_1: { /* d*q + m, q 0..15 */
        struct block_q4_1 *b = dst;
        for (int64_t i = 0; i < nb; i++) {
            rand_bytes(rng, b[i].qs, sizeof b[i].qs);
            const float d = jitter(rng, std, 4.61f);
            b[i].d = half(d);
            b[i].m = half(-7.5f * d);
        }
        return 0;
    }
    case QT_Q5_0: { /* codes -16..15 */
        struct block_q5_0 *b = dst;
        for (int64_t i = 0; i < nb; i++) {
            rand_bytes(rng, b[i].qh, sizeof b[i].qh);
            rand_bytes(rng, b[i].qs, sizeof b[i].qs);
            b[i].d = half(jitter(rng, std, 9.23f));
        }
        return 0;
    }
    case QT_Q5_1: {
        struct block_q5_1 *b = dst;
        for (int64_t i = 0; i < nb; i++) {
            rand_bytes(rng, b[i].qh, sizeof b[i].qh);
            rand_bytes(rng, b[i].qs, sizeof b[i].qs);
            const float d = jitter(rng, std, 9.23f);
            b[i].d = half(d);
            b[i].m = half(-15.5f * d);
        }
        return 0;
    }
    case QT_Q8_0: {
        struct block_q8_0 *b = dst;
        for (int64_t i = 0; i < nb; i++) {
            for (int j = 0; j < 32; j++) b[i].qs[j] = (int8_t)(gen_rng_next(rng) % 255 - 127);
            b[i].d = half(jitter(rng, std, 73.6f));
        }
        return 0;
    }
    case QT_Q4_K: {
        struct block_q4_K *b = dst;
        for (int64_t i = 0; i < nb; i++) {
            rand_bytes(rng, b[i].qs, sizeof b[i].qs);
            k4_scales(rng, std, 15.0f, &b[i].d, &b[i].dmin, b[i].scales);
        }
        return 0;
    }
    case QT_Q5_K: {
        struct block_q5_K *b = dst;
        for (int64_t i = 0; i < nb; i++) {
            rand_bytes(rng, b[i].qh, sizeof b[i].qh);
            rand_bytes(rng, b[i].qs, sizeof b[i].qs);
            k4_scales(rng, std, 31.0f, &b[i].d, &b[i].dmin, b[i].scales);
        }
        return 0;
    }
    case QT_Q6_K: { /* d * sc * (q - 32), q 0..63 (std 18.5), int8 sub-block scales */
        struct block_q6_K *b = dst;
        for (int64_t i = 0; i < nb; i++) {
            rand_bytes(rng, b[i].ql, sizeof b[i].ql);
            rand_bytes(rng, b[i].qh, sizeof b[i].qh);
            for (int j = 0; j < 16; j++) b[i].scales[j] = (int8_t)(24 + gen_rng_next(rng) % 17);
            b[i].d = half(jitter(rng, std, 32.0f * 18.5f));
        }
        return 0;
    }
    default:
        return -1; /* Q2_K, Q3_K and activation-only types: not generated */
    }
}
