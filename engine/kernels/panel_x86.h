/*
 * panel_x86 — private inline helpers shared by the panel kernels (kern_panel_avx512.c, the
 * VNNI ones, and kern_amx.c, the AMX ones): where a type's parts lie in a record, the
 * activation block sums and scales, and the unpacking of one block of a 16-row panel record
 * (layout: panel.h). Include only from files compiled with the AVX-512 (BW, VL, VNNI) and
 * F16C options.
 */
#ifndef GEMMAD_PANEL_X86_H
#define GEMMAD_PANEL_X86_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "engine/kernels/panel.h"
#include "engine/kernels/quant.h"

#define PZ_AI static inline __attribute__((always_inline))

/* The unsigned weight the kernels feed vpdpbusd is u = q + off (Q8_0 and IQ4_NL: q + 128;
 * Q4_1 / Q5_1: u itself, off 0, their min replaces the offset). */
PZ_AI int pz_off(uint32_t t) {
    return t == QT_Q8_0 || t == QT_IQ4_NL ? 128 : t == QT_Q5_0 ? 16 : t == QT_Q4_0 ? 8 : 0;
}
PZ_AI float pz_h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* Blocks [0, nb) of one activation row (the type's activation blocks): corr[b] = -off * (sum
 * of the block's 32 bytes), the correction for weights fed as u = q + off (0 when off is 0),
 * d[b] its scale and, for the types with a min, sa[b] its s (d * sum, as stored). */
PZ_AI void pz_prep(uint32_t type, int64_t nb, const uint8_t *ab, int32_t *corr, float *d,
                   float *sa) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    const int off = pz_off(type);
    const size_t bs = panel_act_bytes(type), qo = panel_act_qoff(type);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = ab + (size_t)b * bs;
        d[b] = pz_h2f(blk);
        if (panel_has_min(type)) sa[b] = pz_h2f(blk + 2);
        corr[b] = 0;
        if (!off) continue;
        /* sum(a) = sum(a ^ 0x80 as unsigned) - 32 * 128 */
        const __m256i u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + qo)), flip);
        const __m256i s4 = _mm256_sad_epu8(u, _mm256_setzero_si256());
        const __m128i s2 =
            _mm_add_epi64(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
        const int64_t sum = _mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1) - 32 * 128;
        corr[b] = (int32_t)(-off * sum);
    }
}

/* IQ4_NL's 16 levels plus 128 (quant_iq4_nl_level's table, unsigned) in every 128-bit lane,
 * for vpshufb. */
PZ_AI __m512i pz_iq4_lut(void) {
    return _mm512_broadcast_i32x4(_mm_setr_epi8((char)1, 24, 45, 63, 79, 93, 106, 118, (char)129,
                                                (char)141, (char)153, (char)166, (char)181,
                                                (char)197, (char)217, (char)241));
}

/* Block h of a record as eight registers of unsigned weights [16 rows x 4 bytes]: group
 * g = 0..7 of the block, register w[g] = rows 0..15 x elements 4g..4g+3, u = q + pz_off. */
PZ_AI void pz_unpack(uint32_t type, const uint8_t *rec, int h, __m512i *w) {
    if (type == QT_Q8_0) {
        const __m512i *q = (const __m512i *)(rec + 64 + h * 512);
        for (int g = 0; g < 8; g++)
            w[g] = _mm512_load_si512(q + g);
        return;
    }
    const __m512i *x = (const __m512i *)(rec + panel_nib_at(type) + h * 256);
    const uint64_t *hb = (const uint64_t *)(rec + panel_hbits_at(type) + h * 64);
    const __m512i m4 = _mm512_set1_epi8(15), b16 = _mm512_set1_epi8(16);
    for (int g = 0; g < 4; g++) {
        const __m512i v = _mm512_load_si512(x + g);
        __m512i lo = _mm512_and_si512(v, m4);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if (panel_has_hbits(type)) {
            lo = _mm512_mask_add_epi8(lo, (__mmask64)hb[g], lo, b16);
            hi = _mm512_mask_add_epi8(hi, (__mmask64)hb[g + 4], hi, b16);
        }
        if (type == QT_IQ4_NL) {
            lo = _mm512_shuffle_epi8(pz_iq4_lut(), lo);
            hi = _mm512_shuffle_epi8(pz_iq4_lut(), hi);
        }
        w[g] = lo;
        w[g + 4] = hi;
    }
}

#endif
