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

/* The rows of panel p inside [r0, r1), as a lane mask. */
PZ_AI __mmask16 pz_rows_mask(int64_t p, int64_t r0, int64_t r1) {
    const int64_t lo = p * PANEL_ROWS < r0 ? r0 : p * PANEL_ROWS;
    const int64_t hi = (p + 1) * PANEL_ROWS > r1 ? r1 : (p + 1) * PANEL_ROWS;
    return (__mmask16)(((1u << (hi - p * PANEL_ROWS)) - 1) & ~((1u << (lo - p * PANEL_ROWS)) - 1));
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
        /* unrolled: as a loop, GCC turns the copy into a call to memmove and the kernel
         * reloads the eight registers from the stack */
        const __m512i *q = (const __m512i *)(rec + 64 + h * 512);
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++)
            w[g] = _mm512_load_si512(q + g);
        return;
    }
    const __m512i *x = (const __m512i *)(rec + panel_nib_at(type) + h * 256);
    const uint64_t *hb = (const uint64_t *)(rec + panel_hbits_at(type) + h * 64);
    const __m512i m4 = _mm512_set1_epi8(15), b16 = _mm512_set1_epi8(16);
    /* unrolled, so w stays in registers (a loop left w[] on the stack: stored, then reloaded
     * by every activation's vpdpbusd) */
#pragma GCC unroll 4
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

/* K-quant records (panel.h: Q3_K, Q4_K, Q5_K, Q6_K). Chunk cc (elements 64cc..64cc+63) of a
 * record as lo[g] / hi[g], g = 0..7: [16 rows x 4 unsigned bytes] of elements 64cc + 4g..
 * and 64cc + 32 + 4g..: Q4_K's nibbles u (sub-blocks 2cc, 2cc + 1), Q5_K's with their fifth
 * bit, Q6_K's u = q + 32 with its two high bits (sub-blocks 4cc + g / 4, 4cc + 2 + g / 4),
 * Q3_K's u = q + 4 from its two low bits and third bit (the same sub-blocks). */
PZ_AI void pk_unpack(uint32_t t, const uint8_t *rec, int cc, __m512i *lo, __m512i *hi) {
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    const __m512i *x = (const __m512i *)(rec + 320 + cc * 512);
    const __m512i *hb = (const __m512i *)(rec + 2368 + (cc / 2) * 512);
    const __m512i *hb5 = (const __m512i *)(rec + 2368);
    if (t == QT_Q3_K) { /* low bits 2t, 2t + 1 of the byte, t = 2 (cc & 1) (lo) or + 1 (hi) */
        const __m512i m3 = _mm512_set1_epi8(3), m04 = _mm512_set1_epi8(4);
        const __m512i *q2 = (const __m512i *)(rec + 320 + (cc / 2) * 512);
        const __m512i *h3 = (const __m512i *)(rec + 1344);
        const int s0 = 4 * (cc & 1);
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m512i v = _mm512_load_si512(q2 + g), h = _mm512_load_si512(h3 + g);
            /* third bits 2cc (lo) and 2cc + 1 (hi) moved to bit 2 */
            const __m512i hl = cc ? _mm512_srli_epi16(h, 2 * cc - 2) : _mm512_slli_epi16(h, 2);
            const __m512i hh = cc ? _mm512_srli_epi16(h, 2 * cc - 1) : _mm512_slli_epi16(h, 1);
            lo[g] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, s0), m3),
                                    _mm512_and_si512(hl, m04));
            hi[g] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, s0 + 2), m3),
                                    _mm512_and_si512(hh, m04));
        }
        return;
    }
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        const __m512i v = _mm512_load_si512(x + g);
        lo[g] = _mm512_and_si512(v, m4);
        hi[g] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if (t == QT_Q5_K) { /* fifth bits 2cc (lo) and 2cc + 1 (hi) to bit 4 */
            const __m512i h = _mm512_load_si512(hb5 + g), m10 = _mm512_set1_epi8(0x10);
            const __m512i hl = cc < 3 ? _mm512_slli_epi16(h, 4 - 2 * cc) : _mm512_srli_epi16(h, 2);
            const __m512i hh =
                cc < 2 ? _mm512_slli_epi16(h, 3 - 2 * cc) : _mm512_srli_epi16(h, 2 * cc - 3);
            lo[g] = _mm512_or_si512(lo[g], _mm512_and_si512(hl, m10));
            hi[g] = _mm512_or_si512(hi[g], _mm512_and_si512(hh, m10));
        }
        if (t != QT_Q6_K) continue;
        /* element 128h + 32t + 4g + k's high bits are bits 2t, 2t + 1: t = 0 / 1 for even
         * chunks, 2 / 3 for odd ones; moved to bits 4-5 */
        const __m512i h = _mm512_load_si512(hb + g);
        const __m512i hl = cc & 1 ? h : _mm512_slli_epi16(h, 4);
        const __m512i hh = cc & 1 ? _mm512_srli_epi16(h, 2) : _mm512_slli_epi16(h, 2);
        lo[g] = _mm512_or_si512(lo[g], _mm512_and_si512(hl, m30));
        hi[g] = _mm512_or_si512(hi[g], _mm512_and_si512(hh, m30));
    }
}

/* Sub-block j's scales of the 16 rows as int32 lanes (Q4_K: j < 8, 6-bit; Q6_K, Q3_K: j <
 * 16, signed). */
PZ_AI __m512i pk_scale(uint32_t t, const uint8_t *rec, int j) {
    if (panel_k16(t))
        return _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(rec + 32 + 16 * j)));
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(rec + 64 + 16 * j)));
}

/* Pairs of the per-row factors of the activation sums, as int16 pairs for vpdpwssd (lane i =
 * f_2p | f_2p+1 << 16): Q4_K's mins (4 pairs), Q6_K's scales (8 pairs). */
PZ_AI int pk_npair(uint32_t t) {
    return panel_k16(t) ? 8 : 4;
}
PZ_AI void pk_pairs(uint32_t t, const uint8_t *rec, __m512i *mp) {
    for (int p = 0; p < pk_npair(t); p++) {
        __m512i a, b;
        if (panel_k16(t)) {
            a = pk_scale(t, rec, 2 * p), b = pk_scale(t, rec, 2 * p + 1);
            a = _mm512_and_si512(a, _mm512_set1_epi32(0xFFFF));
        } else {
            a = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(rec + 192 + 32 * p)));
            b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(rec + 208 + 32 * p)));
        }
        mp[p] = _mm512_or_si512(a, _mm512_slli_epi32(b, 16));
    }
}

/* Super-blocks [0, nsb) of one Q8_K activation row: d[s] and its activation sums as int16
 * pairs bp[s][p]: Q4_K the sums of sub-blocks 2p and 2p + 1 (bsums[2j] + bsums[2j + 1],
 * |sum| <= 32 * 128), Q6_K bsums[2p] and bsums[2p + 1] as they are. */
PZ_AI void pk_prep(uint32_t t, int64_t nsb, const uint8_t *ab, float *d, int32_t (*bp)[8]) {
    for (int64_t s = 0; s < nsb; s++) {
        const struct block_q8_K *blk = (const struct block_q8_K *)ab + s;
        d[s] = blk->d;
        for (int p = 0; p < pk_npair(t); p++) {
            if (panel_k16(t)) {
                memcpy(&bp[s][p], blk->bsums + 2 * p, 4);
                continue;
            }
            const int b0 = blk->bsums[4 * p] + blk->bsums[4 * p + 1];
            const int b1 = blk->bsums[4 * p + 2] + blk->bsums[4 * p + 3];
            bp[s][p] = (int32_t)((uint32_t)(uint16_t)b0 | (uint32_t)(uint16_t)b1 << 16);
        }
    }
}

/* M = sum of the per-row factors times the activation sums: four or eight vpdpwssd. */
PZ_AI __m512i pk_mins(uint32_t t, const __m512i *mp, const int32_t *bp) {
    __m512i M = _mm512_setzero_si512();
    for (int p = 0; p < pk_npair(t); p++)
        M = _mm512_dpwssd_epi32(M, mp[p], _mm512_set1_epi32(bp[p]));
    return M;
}

/* The float steps of one super-block (panel.h). S = sum_j sc_j * (sum of u * a over j).
 * Q4_K: acc = fma(S, d * d_a, acc), then acc = fma(-M, dmin * d_a, acc). Q6_K / Q3_K: the
 * weights entered as u = q + off (32 / 4), so S - off * M (M = sum_j sc_j * bsum_j) is the
 * exact sum of sc_j * q * a; acc = fma(that, d * d_a, acc). */
PZ_AI __m512 pk_step(uint32_t t, __m512i S, __m512i M, __m512 dw, __m512 mw, float da, __m512 acc) {
    const __m512 a = _mm512_set1_ps(da);
    if (panel_k16(t)) { /* S - off * M, off = 32 (Q6_K) or 4 (Q3_K) */
        S = _mm512_sub_epi32(S, _mm512_mullo_epi32(M, _mm512_set1_epi32(panel_k16_off(t))));
        return _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(dw, a), acc);
    }
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(dw, a), acc);
    return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(mw, a), acc);
}

/* The records' d (and Q4_K's dmin) of the 16 rows. */
PZ_AI __m512 pk_half(const uint8_t *rec, int at) {
    return _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(rec + at)));
}

#endif
