/*
 * panel_x86 — private inline helpers shared by the panel kernels (kern_panel_avx512.c, the
 * VNNI ones, and kern_amx.c, the AMX ones): the activation block sums and scales, and the
 * unpacking of one block of a 16-row panel record (layout: panel.h). Include only from
 * files compiled with the AVX-512 (BW, VL, VNNI) and F16C options.
 */
#ifndef GEMMAD_PANEL_X86_H
#define GEMMAD_PANEL_X86_H

#include <immintrin.h>
#include <stdint.h>

#include "engine/kernels/panel.h"
#include "engine/kernels/quant.h"

#define PZ_AI static inline __attribute__((always_inline))

/* Blocks [0, nb) of one Q8_0 activation row: corr[b] = -off * (sum of the block's 32
 * bytes), the correction for weights stored as unsigned q + off, and d[b] its scale. */
PZ_AI void pz_prep(int off, int64_t nb, const struct block_q8_0 *ab, int32_t *corr, float *d) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int64_t b = 0; b < nb; b++) {
        /* sum(a) = sum(a ^ 0x80 as unsigned) - 32 * 128 */
        const __m256i u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)ab[b].qs), flip);
        const __m256i s4 = _mm256_sad_epu8(u, _mm256_setzero_si256());
        const __m128i s2 =
            _mm_add_epi64(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
        const int64_t sum = _mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1) - 32 * 128;
        corr[b] = (int32_t)(-off * sum);
        d[b] = _cvtsh_ss(ab[b].d);
    }
}

/* Block h of a record as eight registers of unsigned weights [16 rows x 4 bytes]: group
 * g = 0..7 of the block, register w[g] = rows 0..15 x elements 4g..4g+3 (Q8_0: q + 128,
 * Q5_0: q + 16). */
PZ_AI void pz_unpack(uint32_t type, const uint8_t *rec, int h, __m512i *w) {
    if (type == QT_Q8_0) {
        const __m512i *q = (const __m512i *)(rec + 64 + h * 512);
        for (int g = 0; g < 8; g++)
            w[g] = _mm512_load_si512(q + g);
        return;
    }
    const __m512i *x = (const __m512i *)(rec + 192 + h * 256);
    const uint64_t *hb = (const uint64_t *)(rec + 64 + h * 64);
    const __m512i m4 = _mm512_set1_epi8(15), b16 = _mm512_set1_epi8(16);
    for (int g = 0; g < 4; g++) {
        const __m512i v = _mm512_load_si512(x + g);
        w[g] = _mm512_mask_add_epi8(_mm512_and_si512(v, m4), (__mmask64)hb[g],
                                    _mm512_and_si512(v, m4), b16);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        w[g + 4] = _mm512_mask_add_epi8(hi, (__mmask64)hb[g + 4], hi, b16);
    }
}

#endif
