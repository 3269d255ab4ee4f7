/*
 * cuda_dequant — device-side decoding of packed GGUF weight rows, 32 elements at a time.
 *
 * Every supported type is read in "chunks" of 32 consecutive elements of a row: chunk c of a
 * 32-element-block type is block c; chunk c of a 256-element K-quant is sub-block c % 8 of
 * super-block c / 8. cf_dq_chunk<T>(row, c, y) writes y[0..31] with exactly the arithmetic of
 * ggml's dequantize_row_* (and engine/kernels quant_dequant_*_ref), so the matmul and
 * embedding kernels and the CPU reference agree on every weight value.
 *
 * Reads are byte-wise or 2-byte (fp16 fields sit at even offsets in every block), so no
 * alignment beyond 2 bytes is assumed for a row.
 *
 * C++/CUDA header (the decoders are __host__ __device__ so the tests can check them on a
 * machine without a GPU); the C-callable operations are in cuda_*.h.
 */
#ifndef GEMMAD_CUDA_DEQUANT_CUH
#define GEMMAD_CUDA_DEQUANT_CUH

#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#include "engine/kernels/quant.h"

/* Host-and-device so the same decoders can be checked on a machine without a GPU
 * (cf_dequant_chunk_host in cuda_getrows.cu). */
#define CF_HD __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__
#define CF_UNROLL _Pragma("unroll")
#else
#define CF_UNROLL /* host compilers do not know the pragma */
#endif

CF_HD float cf_ld_f16(const uint8_t *p) {
    return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short *>(p)));
}

CF_HD float cf_bf16_to_f32(unsigned short h) {
#ifdef __CUDA_ARCH__
    return __uint_as_float((unsigned)h << 16);
#else
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* ggml get_scale_min_k4: the 6-bit (scale, min) pair j (0..7) of a Q4_K / Q5_K block. */
CF_HD void cf_scale_min_k4(int j, const uint8_t *q, int *sc, int *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

#define CF_KVALUES_IQ4NL                                                                           \
    { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 }
__constant__ static const int8_t cf_kvalues_iq4nl_dev[16] = CF_KVALUES_IQ4NL;
static const int8_t cf_kvalues_iq4nl_host[16] = CF_KVALUES_IQ4NL;

CF_HD int cf_kvalue_iq4nl(int i) {
#ifdef __CUDA_ARCH__
    return cf_kvalues_iq4nl_dev[i];
#else
    return cf_kvalues_iq4nl_host[i];
#endif
}

/* y[0..31] = elements [32c, 32c + 32) of the packed row `row` of type T. */
template <int T>
CF_HD void cf_dq_chunk(const uint8_t *__restrict__ row, int c, float *__restrict__ y) {
    if constexpr (T == QT_F32) {
        const float *p = reinterpret_cast<const float *>(row) + (size_t)c * 32;
        CF_UNROLL
        for (int k = 0; k < 32; k++)
            y[k] = p[k];
    } else if constexpr (T == QT_F16) {
        const uint8_t *p = row + (size_t)c * 64;
        CF_UNROLL
        for (int k = 0; k < 32; k++)
            y[k] = cf_ld_f16(p + 2 * k);
    } else if constexpr (T == QT_BF16) {
        const unsigned short *p = reinterpret_cast<const unsigned short *>(row) + (size_t)c * 32;
        CF_UNROLL
        for (int k = 0; k < 32; k++)
            y[k] = cf_bf16_to_f32(p[k]);
    } else if constexpr (T == QT_Q4_0) {
        const uint8_t *b = row + (size_t)c * 18;
        const float d = cf_ld_f16(b);
        const uint8_t *qs = b + 2;
        CF_UNROLL
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((qs[j] & 0xF) - 8) * d;
            y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
        }
    } else if constexpr (T == QT_Q4_1) {
        const uint8_t *b = row + (size_t)c * 20;
        const float d = cf_ld_f16(b), m = cf_ld_f16(b + 2);
        const uint8_t *qs = b + 4;
        CF_UNROLL
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(qs[j] & 0xF) * d + m;
            y[j + 16] = (float)(qs[j] >> 4) * d + m;
        }
    } else if constexpr (T == QT_Q5_0) {
        const uint8_t *b = row + (size_t)c * 22;
        const float d = cf_ld_f16(b);
        const uint32_t qh = (uint32_t)b[2] | ((uint32_t)b[3] << 8) | ((uint32_t)b[4] << 16) |
                            ((uint32_t)b[5] << 24);
        const uint8_t *qs = b + 6;
        CF_UNROLL
        for (int j = 0; j < 16; j++) {
            const int x0 = (int)((qs[j] & 0xF) | (((qh >> j) & 1u) << 4)) - 16;
            const int x1 = (int)((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16;
            y[j] = (float)x0 * d;
            y[j + 16] = (float)x1 * d;
        }
    } else if constexpr (T == QT_Q5_1) {
        const uint8_t *b = row + (size_t)c * 24;
        const float d = cf_ld_f16(b), m = cf_ld_f16(b + 2);
        const uint32_t qh = (uint32_t)b[4] | ((uint32_t)b[5] << 8) | ((uint32_t)b[6] << 16) |
                            ((uint32_t)b[7] << 24);
        const uint8_t *qs = b + 8;
        CF_UNROLL
        for (int j = 0; j < 16; j++) {
            const int x0 = (int)((qs[j] & 0xF) | (((qh >> j) & 1u) << 4));
            const int x1 = (int)((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
            y[j] = (float)x0 * d + m;
            y[j + 16] = (float)x1 * d + m;
        }
    } else if constexpr (T == QT_Q8_0) {
        const uint8_t *b = row + (size_t)c * 34;
        const float d = cf_ld_f16(b);
        const int8_t *qs = reinterpret_cast<const int8_t *>(b + 2);
        CF_UNROLL
        for (int j = 0; j < 32; j++)
            y[j] = (float)qs[j] * d;
    } else if constexpr (T == QT_IQ4_NL) {
        const uint8_t *b = row + (size_t)c * 18;
        const float d = cf_ld_f16(b);
        const uint8_t *qs = b + 2;
        CF_UNROLL
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)cf_kvalue_iq4nl(qs[j] & 0xF);
            y[j + 16] = d * (float)cf_kvalue_iq4nl(qs[j] >> 4);
        }
    } else if constexpr (T == QT_Q4_K) {
        /* Sub-block j uses qs[32 * (j / 2) + l]: low nibbles for even j, high for odd j. */
        const uint8_t *b = row + (size_t)(c >> 3) * 144;
        const int j = c & 7;
        const float d = cf_ld_f16(b), dmin = cf_ld_f16(b + 2);
        int sc, mn;
        cf_scale_min_k4(j, b + 4, &sc, &mn);
        const float d1 = d * (float)sc, m1 = dmin * (float)mn;
        const uint8_t *q = b + 16 + 32 * (j >> 1);
        const int shift = (j & 1) * 4;
        CF_UNROLL
        for (int l = 0; l < 32; l++)
            y[l] = d1 * (float)((q[l] >> shift) & 0xF) - m1;
    } else if constexpr (T == QT_Q5_K) {
        /* As Q4_K, plus 16 where bit j of qh[l] is set. */
        const uint8_t *b = row + (size_t)(c >> 3) * 176;
        const int j = c & 7;
        const float d = cf_ld_f16(b), dmin = cf_ld_f16(b + 2);
        int sc, mn;
        cf_scale_min_k4(j, b + 4, &sc, &mn);
        const float d1 = d * (float)sc, m1 = dmin * (float)mn;
        const uint8_t *qh = b + 16;
        const uint8_t *q = b + 48 + 32 * (j >> 1);
        const int shift = (j & 1) * 4;
        CF_UNROLL
        for (int l = 0; l < 32; l++) {
            const int v = ((q[l] >> shift) & 0xF) + (((qh[l] >> j) & 1) ? 16 : 0);
            y[l] = d1 * (float)v - m1;
        }
    } else if constexpr (T == QT_Q6_K) {
        /* Half h = j / 4 covers 128 outputs; t = j % 4 picks which of ggml's q1..q4 lines. */
        const uint8_t *b = row + (size_t)(c >> 3) * 210;
        const int j = c & 7, h = j >> 2, t = j & 3;
        const uint8_t *ql = b + 64 * h + 32 * (t & 1);
        const uint8_t *qh = b + 128 + 32 * h;
        const int8_t *sc = reinterpret_cast<const int8_t *>(b + 192) + 8 * h + 2 * t;
        const float d = cf_ld_f16(b + 208);
        const int nshift = (t >> 1) * 4, hshift = 2 * t;
        CF_UNROLL
        for (int l = 0; l < 32; l++) {
            const int q = (int)(((ql[l] >> nshift) & 0xF) | (((qh[l] >> hshift) & 3) << 4)) - 32;
            y[l] = d * (float)sc[l / 16] * (float)q;
        }
    } else {
        static_assert(T < 0, "cf_dq_chunk: unsupported type");
    }
}

/* Expands X(T) once per supported type; use inside a switch over the runtime type. */
#define CF_FOR_EACH_TYPE(X)                                                                        \
    X(QT_F32)                                                                                      \
    X(QT_F16)                                                                                      \
    X(QT_BF16)                                                                                     \
    X(QT_Q4_0)                                                                                     \
    X(QT_Q4_1)                                                                                     \
    X(QT_Q5_0)                                                                                     \
    X(QT_Q5_1)                                                                                     \
    X(QT_Q8_0)                                                                                     \
    X(QT_IQ4_NL)                                                                                   \
    X(QT_Q4_K)                                                                                     \
    X(QT_Q5_K)                                                                                     \
    X(QT_Q6_K)

#endif
