/*
 * kern_bf16p — BF16 weights against activations rounded to BF16 and packed in pairs, for
 * batches (kern_matmul with the weight's blas flag, KERN_BLAS_MIN_M rows and more) on CPUs
 * whose BF16 dot-product instruction (AVX512_BF16 vdpbf16ps) beats f32 sgemm: twice the
 * multiplies per instruction, half the bytes. This file holds the layout and the scalar
 * references; kern_bf16p_avx512.c the kernels (registered by kern.c, see kern_impl.h).
 *
 * Packed activations, M rows of n elements (n even), in blocks of 16 rows. Block b holds rows
 * 16b .. 16b + wb - 1 (wb = min(16, M - 16b)), starts at byte 32 * b * n (where row 16b starts
 * in a plain [M][n] BF16 array), and holds for each pair p < n / 2 the wb 32-bit words
 *     word[p * wb + l] = bf16(x[16b + l][2p]) | bf16(x[16b + l][2p + 1]) << 16,
 * so that one 64-byte load gives pair p of 16 rows. M * n * 2 bytes in all, which is no more
 * than the plain rows' scratch (kern_act_bytes). Rounding: quant_f32_to_bf16 (nearest even).
 *
 * Sums: y[m][o] starts at 0 and takes, for p = 0, 1, ..., first a[2p+1] * w[2p+1], then
 * a[2p] * w[2p], each added with one rounding to nearest even (the products of two BF16
 * values are exact in f32), with BF16 subnormal inputs read as zero and subnormal sums
 * flushed to zero: what vdpbf16ps does per lane (Intel's pseudocode). The result for a row
 * does not depend on M or on the split, but it is not the bits of the F32-product tiles that
 * smaller batches and --deterministic use (those take f32 products in another order).
 *
 * Threads: pure functions of their arguments; callers write disjoint rows.
 */
#include <math.h>
#include <string.h>

#include "engine/kernels/kern_impl.h"

void kern_bf16p_pack_ref(const float *x, void *act, int m, int M, int64_t n) {
    const int b = m / KERN_BF16P_ROWS, l = m % KERN_BF16P_ROWS;
    const int wb = kern_bf16p_block_rows(M, b);
    uint8_t *base = (uint8_t *)act + (size_t)(2 * KERN_BF16P_ROWS) * (size_t)b * (size_t)n;
    for (int64_t p = 0; p < n / 2; p++) {
        const uint32_t word =
            (uint32_t)quant_f32_to_bf16(x[2 * p]) | (uint32_t)quant_f32_to_bf16(x[2 * p + 1]) << 16;
        memcpy(base + ((size_t)p * (size_t)wb + (size_t)l) * 4, &word, 4);
    }
}

static float bp_daz(uint16_t h) {
    return (h & 0x7f80u) == 0 ? 0.0f : quant_bf16_to_f32(h); /* subnormal (or zero) -> 0 */
}

static float bp_ftz(float s) {
    return fabsf(s) < 0x1p-126f ? copysignf(0.0f, s) : s;
}

void kern_bf16p_gemm_ref(int64_t n, const void *w_rows, size_t w_stride, int64_t n_rows,
                         const void *act, int M, float *y, int ldy) {
    for (int m = 0; m < M; m++) {
        const int b = m / KERN_BF16P_ROWS, l = m % KERN_BF16P_ROWS;
        const int wb = kern_bf16p_block_rows(M, b);
        const uint8_t *base =
            (const uint8_t *)act + (size_t)(2 * KERN_BF16P_ROWS) * (size_t)b * (size_t)n;
        for (int64_t o = 0; o < n_rows; o++) {
            const uint8_t *w = (const uint8_t *)w_rows + (size_t)o * w_stride;
            float s = 0.0f;
            for (int64_t p = 0; p < n / 2; p++) {
                uint32_t aw, ww;
                memcpy(&aw, base + ((size_t)p * (size_t)wb + (size_t)l) * 4, 4);
                memcpy(&ww, w + (size_t)p * 4, 4);
                s = bp_ftz(fmaf(bp_daz((uint16_t)(aw >> 16)), bp_daz((uint16_t)(ww >> 16)), s));
                s = bp_ftz(fmaf(bp_daz((uint16_t)aw), bp_daz((uint16_t)ww), s));
            }
            y[(size_t)m * (size_t)ldy + (size_t)o] = s;
        }
    }
}
