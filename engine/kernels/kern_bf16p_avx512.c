/*
 * kern_bf16p_avx512 — the packed-BF16 batch kernels (layout and sums: kern_bf16p.c) with
 * AVX512_BF16's vdpbf16ps, which per lane adds two BF16 products into an f32 sum. Built with
 * the AVX-512 flags plus -mavx512bf16 (Makefile); kern.c registers them only where the CPU
 * has AVX512_BF16 and they were measured faster than sgemm (kern_bf16p_wanted).
 *
 * Outer-product form: a 64-byte load gives one pair of 16 activation rows, and each weight
 * row's pair is broadcast from memory, so a tile of 32 rows x 12 weight rows keeps 24 sums in
 * registers and needs no horizontal reduction at the end (the reduction per (row, output)
 * pair is what made an inner-product version of this kernel slower than sgemm on Zen 4,
 * BENCHMARKS 2026-12-07). A task's weight rows are taken 12 at a time and each such tile
 * is swept over every activation block while it stays in L1/L2.
 *
 * Measured on a 2-core AMD EPYC (Zen 4) guest against OpenBLAS 0.3.21 sgemm (with the
 * BF16 -> f32 widening kern_blas does), bench_kern --blas --threads 2 --only ffn_up_bf16
 * (640 -> 2048), two runs each: M = 16 0.48-0.73 -> 0.29-0.34 ms, M = 64 1.20-1.93 ->
 * 0.54-0.59 ms, M = 512 7.8-14.0 -> 3.8-4.4 ms (about 90 GMAC/s a thread, near the
 * instruction's one-per-cycle rate). Bits: each lane runs kern_bf16p_gemm_ref's sequence
 * (test_kern checks it).
 *
 * Threads: pure functions; callers write disjoint rows.
 */
#include <immintrin.h>
#include <string.h>

#include "engine/kernels/kern_impl.h"
#include "engine/kernels/kern_x86.h"

typedef uint32_t bp_u32 __attribute__((aligned(1), may_alias));

#define BP_NR 12 /* weight rows per tile */

_Static_assert(KERN_BF16P_ROWS == 16, "one 512-bit load holds a pair of every row of a block");

/* x[0..n) -> row m's words of the packed layout, rounded as quant_f32_to_bf16 (integer
 * nearest-even, quiet NaN), scattered 16 pairs at a time with the block's word stride. */
static __m512i bp_round(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(64));
}

static void bp_pack(const float *x, void *act, int m, int M, int64_t n) {
    const int b = m / KERN_BF16P_ROWS, l = m % KERN_BF16P_ROWS;
    const int wb = kern_bf16p_block_rows(M, b);
    int *base =
        (int *)(void *)((uint8_t *)act + (size_t)(2 * KERN_BF16P_ROWS) * (size_t)b * (size_t)n) + l;
    const __m512i vidx =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(wb));
    const int64_t np = n / 2;
    for (int64_t p = 0; p < np; p += 16) {
        const int64_t left = np - p < 16 ? np - p : 16;
        const __mmask16 k = (__mmask16)((1u << left) - 1);
        const __mmask16 klo = (__mmask16)(left >= 8 ? 0xffffu : (1u << (2 * left)) - 1);
        const __mmask16 khi = (__mmask16)(left <= 8 ? 0 : (1u << (2 * (left - 8))) - 1);
        const __m512 lo = _mm512_maskz_loadu_ps(klo, x + 2 * p);
        const __m512 hi = _mm512_maskz_loadu_ps(khi, x + 2 * p + 16);
        const __m256i h0 = _mm512_cvtepi32_epi16(bp_round(lo));
        const __m256i h1 = _mm512_cvtepi32_epi16(bp_round(hi));
        const __m512i words = _mm512_inserti64x4(_mm512_castsi256_si512(h0), h1, 1);
        _mm512_mask_i32scatter_epi32(base + p * wb, k, vidx, words, 4);
    }
}

/* NA (1 or 2) blocks of activations [a0: wb0 rows, a1: wb1 rows] x NR weight rows, over
 * np pairs, into tmp[j * 32 + row]. */
KX_AI void bp_tile(const int NA, const int NR, int64_t np, const uint32_t *a0, int wb0,
                   const uint32_t *a1, int wb1, const uint8_t *w, size_t ws, float *tmp) {
    __m512 s0[BP_NR], s1[BP_NR];
    const bp_u32 *wr[BP_NR];
    KX_UNROLL(12) /* the sums stay in registers */
    for (int j = 0; j < NR; j++) {
        s0[j] = _mm512_setzero_ps();
        s1[j] = _mm512_setzero_ps();
        wr[j] = (const bp_u32 *)(const void *)(w + (size_t)j * ws);
    }
    const __mmask16 k0 = (__mmask16)((1u << wb0) - 1), k1 = (__mmask16)((1u << wb1) - 1);
    for (int64_t p = 0; p < np; p++) {
        const __m512bh v0 = (__m512bh)_mm512_maskz_loadu_epi32(k0, a0 + p * wb0);
        const __m512bh v1 = NA > 1 ? (__m512bh)_mm512_maskz_loadu_epi32(k1, a1 + p * wb1) : v0;
        KX_UNROLL(12)
        for (int j = 0; j < NR; j++) {
            const __m512bh wv = (__m512bh)_mm512_set1_epi32((int)wr[j][p]);
            s0[j] = _mm512_dpbf16_ps(s0[j], v0, wv);
            if (NA > 1) s1[j] = _mm512_dpbf16_ps(s1[j], v1, wv);
        }
    }
    KX_UNROLL(12)
    for (int j = 0; j < NR; j++) {
        _mm512_storeu_ps(tmp + j * 32, s0[j]);
        if (NA > 1) _mm512_storeu_ps(tmp + j * 32 + 16, s1[j]);
    }
}

#define BP_CASE(R)                                                                                 \
    case R:                                                                                        \
        if (na == 2)                                                                               \
            bp_tile(2, R, np, a0, wb0, a1, wb1, w, ws, tmp);                                       \
        else                                                                                       \
            bp_tile(1, R, np, a0, wb0, a0, wb0, w, ws, tmp);                                       \
        break;

static void bp_gemm(int64_t n, const void *w_rows, size_t w_stride, int64_t n_rows, const void *act,
                    int M, float *y, int ldy) {
    float tmp[BP_NR * 32] __attribute__((aligned(64)));
    const int64_t np = n / 2;
    const int nb = (M + KERN_BF16P_ROWS - 1) / KERN_BF16P_ROWS;
    for (int64_t r = 0; r < n_rows; r += BP_NR) {
        const int nr = (int)(n_rows - r < BP_NR ? n_rows - r : BP_NR);
        const uint8_t *w = (const uint8_t *)w_rows + (size_t)r * w_stride;
        const size_t ws = w_stride;
        for (int b = 0; b < nb; b += 2) {
            const int na = b + 1 < nb ? 2 : 1;
            const uint32_t *a0 =
                (const uint32_t *)(const void *)((const uint8_t *)act +
                                                 (size_t)(2 * KERN_BF16P_ROWS) * b * n);
            const uint32_t *a1 = a0 + KERN_BF16P_ROWS * np;
            const int wb0 = kern_bf16p_block_rows(M, b);
            const int wb1 = na == 2 ? kern_bf16p_block_rows(M, b + 1) : 0;
            switch (nr) {
                BP_CASE(1)
                BP_CASE(2)
                BP_CASE(3)
                BP_CASE(4)
                BP_CASE(5)
                BP_CASE(6)
                BP_CASE(7)
                BP_CASE(8)
                BP_CASE(9)
                BP_CASE(10)
                BP_CASE(11)
                BP_CASE(12)
            default:
                break;
            }
            const int rows = wb0 + wb1;
            float *yb = y + (size_t)KERN_BF16P_ROWS * b * (size_t)ldy + r;
            for (int i = 0; i < rows; i++)
                for (int j = 0; j < nr; j++)
                    yb[(size_t)i * (size_t)ldy + j] = tmp[j * 32 + i];
        }
    }
}

void kern_register_bf16p_avx512(struct kern_ops *ops) {
    ops->t[QT_BF16].pack_act = bp_pack;
    ops->t[QT_BF16].gemm_packed = bp_gemm;
}
