/*
 * kern_panel_avx2 — the AVX2 kernels over Q8_0, Q5_0, Q4_0, IQ4_NL, Q4_1 and Q5_1 panels
 * (layout and arithmetic: panel.h), for CPUs without AVX-512 VNNI. Registered by kern.c after
 * kern_register_avx2 when the ISA is AVX2 (the AVX-512 kernels replace it there).
 *
 * A block of 16 rows unpacks into sixteen registers of [8 rows x 4 bytes]. For an
 * activation, each 4-byte group is broadcast and vpmaddubsw gives, per row, two int16 pair
 * sums; vpmaddwd by ones turns each row's sums into one int32 lane:
 *   - Q5_0 / Q4_0, unsigned weights u = q + 16 / q + 8 from nibbles (and high bits):
 *     |u * a| <= 31 * 128 per byte, so four groups add up in int16 without overflow
 *     (4 * 2 * 3968 < 32768) before one vpmaddwd; adding the block's correction
 *     -off * sum(a) gives the exact S = sum(q * a) per row. Q4_1 / Q5_1 the same with S over
 *     u itself (no correction); their min enters as fma(m, s_a, acc) after the product.
 *   - Q8_0 / IQ4_NL, signed weights (q = u ^ 0x80, or IQ4_NL's level looked up by nibble):
 *     |q| goes into the unsigned operand and q's sign onto the activation (vpsignb), as the
 *     row kernels do; a pair sum reaches 2 * 128 * 127, so every group takes its own
 *     vpmaddwd. |q| and q are unpacked once per block and shared by every activation.
 * The float steps per row and block are panel_gemm_ref's: acc = fma((float)S, dw * da, acc),
 * blocks in order from 0, so the bits are the scalar twin's and the AVX-512 kernels'
 * whatever the batch.
 *
 * Up to 4 activations of the unsigned types, and any number of the signed ones in chunks of
 * 8, read each weight register straight from the record (pa_gemmn). More activations of the
 * unsigned types unpack a task's panels PA_KB blocks at a time into a buffer on the stack,
 * swept by every activation (the unpacking, their costly part, is shared by all of them).
 * The loops over activations are unrolled (PA_UNROLL): at -O2 gcc otherwise keeps 3+
 * activations' sums in memory (Q8_0 640 x 2048 at M = 3 / 4, one thread: 0.157 / 0.183 ms
 * as a loop, 0.084 / 0.101 unrolled).
 */
#include <immintrin.h>
#include <string.h>

#include "engine/kernels/kern_impl.h"
#include "engine/kernels/panel.h"

#define PA_AI static inline __attribute__((always_inline))
#define PA_PRAGMA(x) _Pragma(#x)
#define PA_UNROLL(n) PA_PRAGMA(GCC unroll n)
#define PA_KB 16 /* blocks unpacked at once: 16 x 512 bytes */
/* One activation: how far ahead the records are prefetched (the hardware prefetchers stop at
 * each 4 KiB page; kern.c's KERN_PF_DIST). LM head at M = 1, one thread on the Zen 3 guest:
 * none 11.3-11.9 ms, 1-2 KiB 11.5-11.7, 4 KiB 9.1-9.5, 8 KiB 9.3-9.4 (row kernel: 10.3) */
#define PA_PF_DIST 4096
#define PA_NA_MAX 8 /* up to this many activations read the records directly (pa_gemmn) */

/* 32 bytes: 0x10 where bit j of the little-endian u32 `bits` is set, else 0. */
PA_AI __m256i pa_bits16(uint32_t bits) {
    const __m256i idx = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                         2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), idx);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(b, sel), sel),
                            _mm256_set1_epi8(0x10));
}

/* Where block h's nibbles and high bits start in a record (panel.h). */
PA_AI const uint8_t *pa_nib(uint32_t t, const uint8_t *rec, int h) {
    return rec + panel_nib_at(t) + h * 256;
}
PA_AI const uint8_t *pa_hbits(uint32_t t, const uint8_t *rec, int h) {
    return rec + panel_hbits_at(t) + h * 64;
}
PA_AI const int8_t *pa_aqs(uint32_t t, const uint8_t *blk) {
    return (const int8_t *)(blk + panel_act_qoff(t));
}
/* Signed weights (Q8_0, IQ4_NL: |q| and q's sign, no correction), and the unsigned types'
 * offset (u = q + off; 0 for Q4_1 / Q5_1, whose min replaces it). */
PA_AI int pa_signed(uint32_t t) {
    return t == QT_Q8_0 || t == QT_IQ4_NL;
}
PA_AI int pa_off(uint32_t t) {
    return t == QT_Q5_0 ? 16 : t == QT_Q4_0 ? 8 : 0;
}
/* IQ4_NL's 16 levels in both 128-bit lanes, for vpshufb (quant_iq4_nl_level's table). */
PA_AI __m256i pa_iq4_lut(void) {
    return _mm256_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89,
                            113, -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69,
                            89, 113);
}
/* f16 at p as float. */
PA_AI float pa_h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* Block h of a Q5_0 / Q4_0 / Q4_1 / Q5_1 record as w[g * 2 + half]: group g (elements 4g..4g+3), rows
 * 8 * half .. 8 * half + 7, 4 unsigned bytes each (u = q + 16 / q + 8). */
PA_AI void pa_unpack(uint32_t type, const uint8_t *rec, int h, __m256i *w) {
    const uint8_t *x = pa_nib(type, rec, h), *hb = pa_hbits(type, rec, h);
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int g = 0; g < 4; g++) {
        for (int half = 0; half < 2; half++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(x + 64 * g + 32 * half));
            w[2 * g + half] = _mm256_and_si256(v, m4);
            w[2 * (g + 4) + half] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            if (panel_has_hbits(type)) {
                uint32_t lo, hi;
                memcpy(&lo, hb + 8 * g + 4 * half, 4);
                memcpy(&hi, hb + 8 * (g + 4) + 4 * half, 4);
                w[2 * g + half] = _mm256_or_si256(w[2 * g + half], pa_bits16(lo));
                w[2 * (g + 4) + half] = _mm256_or_si256(w[2 * (g + 4) + half], pa_bits16(hi));
            }
        }
    }
}

/* Blocks [b0, b0 + nbk) of one activation row (the type's activation blocks): corrections
 * (-off * sum of the 32 activation bytes; 0 when off is 0), scales d and, for the types
 * with a min, the blocks' s (d * sum, as stored). */
PA_AI void pa_prep(uint32_t type, int off, int64_t b0, int nbk, const uint8_t *ab, int32_t *corr,
                   float *d, float *sa) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    const size_t bs = panel_act_bytes(type);
    for (int b = 0; b < nbk; b++) {
        const uint8_t *blk = ab + (size_t)(b0 + b) * bs;
        d[b] = pa_h2f(blk);
        if (panel_has_min(type)) sa[b] = pa_h2f(blk + 2);
        corr[b] = 0;
        if (!off) continue; /* signed weights, or a min instead: no correction */
        const __m256i u =
            _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)pa_aqs(type, blk)), flip);
        const __m256i s4 = _mm256_sad_epu8(u, _mm256_setzero_si256());
        const __m128i s2 =
            _mm_add_epi64(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
        const int64_t sum = _mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1) - 32 * 128;
        corr[b] = (int32_t)(-off * sum);
    }
}

/* The 16 rows' exact block sums for one activation block: s[0] rows 0-7, s[1] rows 8-15. */
PA_AI void pa_block(const __m256i *w, const int8_t *qs, int32_t corr, __m256i *s) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i t[2][2];
    for (int q = 0; q < 2; q++) { /* groups 4q .. 4q + 3, summed in int16 */
        int32_t v;
        memcpy(&v, qs + 16 * q, 4);
        __m256i a = _mm256_set1_epi32(v);
        t[q][0] = _mm256_maddubs_epi16(w[2 * (4 * q)], a);
        t[q][1] = _mm256_maddubs_epi16(w[2 * (4 * q) + 1], a);
        for (int g = 4 * q + 1; g < 4 * q + 4; g++) {
            memcpy(&v, qs + 4 * g, 4);
            a = _mm256_set1_epi32(v);
            t[q][0] = _mm256_add_epi16(t[q][0], _mm256_maddubs_epi16(w[2 * g], a));
            t[q][1] = _mm256_add_epi16(t[q][1], _mm256_maddubs_epi16(w[2 * g + 1], a));
        }
    }
    const __m256i c = _mm256_set1_epi32(corr);
    for (int half = 0; half < 2; half++)
        s[half] = _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(t[0][half], ones),
                                                    _mm256_madd_epi16(t[1][half], ones)),
                                   c);
}

/* Unsigned types (Q5_0, Q4_0, Q4_1, Q5_1), more than 4 activations: rows [r0, r1) x
 * activations [0, na) over panels of n_in = n (na <= KERN_GEMM_MAX_ACTS). Blocks PA_KB at
 * a time: the activations' corrections and scales for them once, then each panel's blocks
 * unpacked once and swept by every activation; the running sums wait in y. */
PA_AI void pa_gemm_part(uint32_t type, int64_t n, const void *panels, int64_t r0, int64_t r1,
                        const void *act, size_t as, int na, float *y, int ldy) {
    const int64_t nb = n / 32, npair = (nb + 1) / 2;
    const size_t rb = panel_rec_bytes(type);
    const int off = pa_off(type);
    const int mins = panel_has_min(type);
    const size_t abs_ = panel_act_bytes(type);
    __m256i W[PA_KB][16];
    __m256 DW[PA_KB][2], DM[PA_KB][2];
    int32_t corr[KERN_GEMM_MAX_ACTS][PA_KB];
    float da[KERN_GEMM_MAX_ACTS][PA_KB], sa[KERN_GEMM_MAX_ACTS][PA_KB];
    for (int64_t b0 = 0; b0 < nb; b0 += PA_KB) {
        const int nbk = (int)(nb - b0 < PA_KB ? nb - b0 : PA_KB);
        for (int c = 0; c < na; c++)
            pa_prep(type, off, b0, nbk, (const uint8_t *)act + (size_t)c * as, corr[c], da[c],
                    sa[c]);
        for (int64_t p = r0 / PANEL_ROWS; p * PANEL_ROWS < r1; p++) {
            const uint8_t *pp = (const uint8_t *)panels + (size_t)p * (size_t)npair * rb;
            const int64_t base = p * PANEL_ROWS;
            const int64_t lo = base < r0 ? r0 : base;
            const int64_t hi = base + PANEL_ROWS > r1 ? r1 : base + PANEL_ROWS;
            const int whole = lo == base && hi == base + PANEL_ROWS;
            for (int b = 0; b < nbk; b++) {
                const uint8_t *rec = pp + (size_t)((b0 + b) >> 1) * rb;
                const int h = (int)((b0 + b) & 1);
                pa_unpack(type, rec, h, W[b]);
                DW[b][0] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(rec + 32 * h)));
                DW[b][1] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(rec + 32 * h + 16)));
                if (mins)
                    for (int half = 0; half < 2; half++)
                        DM[b][half] = _mm256_cvtph_ps(
                            _mm_loadu_si128((const __m128i *)(rec + 64 + 32 * h + 16 * half)));
            }
            for (int c = 0; c < na; c++) {
                const uint8_t *ab = (const uint8_t *)act + (size_t)c * as;
                float tmp[PANEL_ROWS] = {0};
                float *yc = y + (size_t)c * (size_t)ldy + (size_t)base;
                float *src = whole ? yc : tmp;
                if (!whole && b0 > 0)
                    memcpy(tmp + (lo - base), yc + (lo - base), sizeof(float) * (size_t)(hi - lo));
                __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
                if (b0 > 0) {
                    acc0 = _mm256_loadu_ps(src);
                    acc1 = _mm256_loadu_ps(src + 8);
                }
                for (int b = 0; b < nbk; b++) {
                    __m256i s[2];
                    const int8_t *qs = pa_aqs(type, ab + (size_t)(b0 + b) * abs_);
                    pa_block(W[b], qs, corr[c][b], s);
                    const __m256 d = _mm256_set1_ps(da[c][b]);
                    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[0]), _mm256_mul_ps(DW[b][0], d),
                                           acc0);
                    acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[1]), _mm256_mul_ps(DW[b][1], d),
                                           acc1);
                    if (mins) { /* + m * s_a, after the product (panel_gemm_ref's order) */
                        acc0 = _mm256_fmadd_ps(DM[b][0], _mm256_set1_ps(sa[c][b]), acc0);
                        acc1 = _mm256_fmadd_ps(DM[b][1], _mm256_set1_ps(sa[c][b]), acc1);
                    }
                }
                _mm256_storeu_ps(src, acc0);
                _mm256_storeu_ps(src + 8, acc1);
                if (!whole)
                    memcpy(yc + (lo - base), tmp + (lo - base), sizeof(float) * (size_t)(hi - lo));
            }
        }
    }
}

/* NA (1..PA_NA_MAX) activations, block h of a record: the 16 rows' exact sums S per
 * activation c (s[2 * c] rows 0-7, s[2 * c + 1] rows 8-15), each weight register read
 * straight from the record and used by all NA before the next (corr: pa_prep's, 0 when
 * signed). */
PA_AI void pa_blockn(uint32_t type, const int NA, const uint8_t *rec, int h,
                     const int8_t *const *qs, const int32_t *corr, __m256i *s) {
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(15);
    const __m256i lut = pa_iq4_lut();
    const int sgn = pa_signed(type);
    const uint8_t *x = type == QT_Q8_0 ? rec + 64 + h * 512 : pa_nib(type, rec, h);
    const uint8_t *hb = pa_hbits(type, rec, h); /* Q5_0's / Q5_1's high bits */
    PA_UNROLL(2) /* unrolled: Q5_0 640 x 2048 at M = 1 0.067 -> 0.055 ms (Zen 3) */
    for (int half = 0; half < 2; half++) {
        __m256i lo[PA_NA_MAX], hi[PA_NA_MAX];
        PA_UNROLL(8)
        for (int c = 0; c < NA; c++)
            lo[c] = hi[c] = _mm256_setzero_si256();
        for (int g = 0; g < (type == QT_Q8_0 ? 8 : 4); g++) {
            const __m256i w = _mm256_loadu_si256((const __m256i *)(x + 64 * g + 32 * half));
            __m256i ul, uh = _mm256_setzero_si256(), al, ah = _mm256_setzero_si256();
            if (type == QT_Q8_0) {
                ul = _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80));
            } else {
                ul = _mm256_and_si256(w, m4);
                uh = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
            }
            if (type == QT_IQ4_NL) {
                ul = _mm256_shuffle_epi8(lut, ul);
                uh = _mm256_shuffle_epi8(lut, uh);
            }
            if (sgn) {
                al = _mm256_abs_epi8(ul);
                ah = _mm256_abs_epi8(uh);
            } else if (panel_has_hbits(type)) {
                uint32_t bl, bh;
                memcpy(&bl, hb + 8 * g + 4 * half, 4);
                memcpy(&bh, hb + 8 * (g + 4) + 4 * half, 4);
                ul = _mm256_or_si256(ul, pa_bits16(bl));
                uh = _mm256_or_si256(uh, pa_bits16(bh));
            }
            PA_UNROLL(8)
            for (int c = 0; c < NA; c++) {
                int32_t v;
                memcpy(&v, qs[c] + 4 * g, 4);
                const __m256i a = _mm256_set1_epi32(v);
                memcpy(&v, qs[c] + 4 * g + 16, 4); /* the high nibbles: group g + 4 */
                const __m256i a4 = _mm256_set1_epi32(v);
                if (type == QT_Q8_0) {
                    lo[c] = _mm256_add_epi32(
                        lo[c],
                        _mm256_madd_epi16(_mm256_maddubs_epi16(al, _mm256_sign_epi8(a, ul)), ones));
                } else if (sgn) {
                    const __m256i t = _mm256_add_epi32(
                        _mm256_madd_epi16(_mm256_maddubs_epi16(al, _mm256_sign_epi8(a, ul)), ones),
                        _mm256_madd_epi16(_mm256_maddubs_epi16(ah, _mm256_sign_epi8(a4, uh)),
                                          ones));
                    lo[c] = _mm256_add_epi32(lo[c], t);
                } else { /* unsigned: int16 sums of four groups each (the top of the file) */
                    lo[c] = _mm256_add_epi16(lo[c], _mm256_maddubs_epi16(ul, a));
                    hi[c] = _mm256_add_epi16(hi[c], _mm256_maddubs_epi16(uh, a4));
                }
            }
        }
        PA_UNROLL(8)
        for (int c = 0; c < NA; c++)
            s[2 * c + half] =
                sgn ? lo[c]
                    : _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(lo[c], ones),
                                                        _mm256_madd_epi16(hi[c], ones)),
                                       _mm256_set1_epi32(corr[c]));
    }
}

/* NA (1..PA_NA_MAX) activations (decode, a few streams, the rows of a draft): each block
 * read straight from its record into registers, since with few activations the stack buffer
 * of pa_gemm_part costs more than it saves (Q8_0 on Zen 3: 1.5x slower at M = 1). The same
 * integer sums and float steps. */
PA_AI void pa_gemmn(uint32_t type, const int NA, int64_t n, const void *panels, int64_t r0,
                    int64_t r1, const void *act, size_t as, float *y, int ldy) {
    const int64_t nb = n / 32, npair = (nb + 1) / 2;
    const size_t rb = panel_rec_bytes(type);
    const int off = pa_off(type);
    const int mins = panel_has_min(type);
    const size_t abs_ = panel_act_bytes(type);
    int32_t corr[PA_NA_MAX][PANEL_NB_MAX];
    float da[PA_NA_MAX][PANEL_NB_MAX], sa[PA_NA_MAX][PANEL_NB_MAX];
    const uint8_t *ab[PA_NA_MAX];
    PA_UNROLL(8)
    for (int c = 0; c < NA; c++) {
        ab[c] = (const uint8_t *)act + (size_t)c * as;
        pa_prep(type, off, 0, (int)nb, ab[c], corr[c], da[c], sa[c]);
    }
    for (int64_t p = r0 / PANEL_ROWS; p * PANEL_ROWS < r1; p++) {
        const uint8_t *pp = (const uint8_t *)panels + (size_t)p * (size_t)npair * rb;
        __m256 acc[2 * PA_NA_MAX];
        PA_UNROLL(8)
        for (int i = 0; i < 2 * NA; i++)
            acc[i] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *rec = pp + (size_t)(b >> 1) * rb;
            const int h = (int)(b & 1);
            if (!h) /* a record PA_PF_DIST ahead (past the end: a prefetch never faults) */
                for (size_t o = 0; o < rb; o += 64)
                    __builtin_prefetch(rec + PA_PF_DIST + o, 0, 3);
            const int8_t *qs[PA_NA_MAX];
            int32_t cb[PA_NA_MAX];
            PA_UNROLL(8)
            for (int c = 0; c < NA; c++) {
                qs[c] = pa_aqs(type, ab[c] + (size_t)b * abs_);
                cb[c] = corr[c][b];
            }
            __m256i s[2 * PA_NA_MAX];
            pa_blockn(type, NA, rec, h, qs, cb, s);
            for (int half = 0; half < 2; half++) {
                const __m256 dw =
                    _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(rec + 32 * h + 16 * half)));
                const __m256 dm = mins ? _mm256_cvtph_ps(_mm_loadu_si128(
                                             (const __m128i *)(rec + 64 + 32 * h + 16 * half)))
                                       : _mm256_setzero_ps();
                PA_UNROLL(8)
                for (int c = 0; c < NA; c++) {
                    acc[2 * c + half] =
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[2 * c + half]),
                                        _mm256_mul_ps(dw, _mm256_set1_ps(da[c][b])),
                                        acc[2 * c + half]);
                    if (mins) /* + m * s_a, after the product (panel_gemm_ref's order) */
                        acc[2 * c + half] =
                            _mm256_fmadd_ps(dm, _mm256_set1_ps(sa[c][b]), acc[2 * c + half]);
                }
            }
        }
        const int64_t base = p * PANEL_ROWS;
        const int whole = base >= r0 && base + PANEL_ROWS <= r1;
        PA_UNROLL(8)
        for (int c = 0; c < NA; c++) {
            float *yc = y + (size_t)c * (size_t)ldy;
            if (whole) {
                _mm256_storeu_ps(yc + base, acc[2 * c]);
                _mm256_storeu_ps(yc + base + 8, acc[2 * c + 1]);
                continue;
            }
            float tmp[PANEL_ROWS];
            _mm256_storeu_ps(tmp, acc[2 * c]);
            _mm256_storeu_ps(tmp + 8, acc[2 * c + 1]);
            for (int64_t r = base < r0 ? r0 : base; r < base + PANEL_ROWS && r < r1; r++)
                yc[r] = tmp[r - base];
        }
    }
}

/* How many activations one pa_gemmn call takes: 8 for the signed types (one pair of
 * accumulators per activation and half fits the 16 registers), 4 for the unsigned ones (two
 * int16 sums each). One thread, 640 x 2048 on the Zen 3 guest, ms at M = 4 / 8 / 16 / 64:
 * Q8_0 direct (chunks of 8) 0.103 / 0.196 / 0.39 / 1.53, through the buffer 0.19 / 0.296 /
 * 0.478 / 1.62; Q5_0 direct (chunks of 4) 0.108 / 0.216 / 0.43, the buffer - / 0.214 / 0.350.
 * LM head (640 x 262,144), two threads, M = 32 / 64: 73.6 / 137.5 ms through the buffer,
 * 60.2 / 119.3 direct (a task's rows stay in L2 between the chunks). */
PA_AI int pa_na_direct(uint32_t type) {
    return pa_signed(type) ? PA_NA_MAX : 4;
}

/* 1..pa_na_direct(type) activations straight from the records: a constant NA each, so the
 * loops over activations unroll (the cases past the type's pa_na_direct compile to nothing). */
#define PA_DIRECT(k)                                                                              \
    case k:                                                                                       \
        if (k <= pa_na_direct(type)) pa_gemmn(type, k, n, panels, r0, r1, act, as, y, ldy);       \
        return;
PA_AI void pa_gemm_direct(uint32_t type, int64_t n, const void *panels, int64_t r0, int64_t r1,
                          const void *act, size_t as, int na, float *y, int ldy) {
    switch (na) {
        PA_DIRECT(1) PA_DIRECT(2) PA_DIRECT(3) PA_DIRECT(4)
        PA_DIRECT(5) PA_DIRECT(6) PA_DIRECT(7) PA_DIRECT(8)
    default: break;
    }
}

/* Any number of activations (kern_matmul hands at most KERN_GEMM_MAX_ACTS): the signed
 * types, and up to 4 of the others, through pa_gemm_direct a chunk at a time (the task's
 * weights are read once per chunk); more of the unsigned types through pa_gemm_part. */
PA_AI void pa_gemm(uint32_t type, int64_t n, const void *panels, int64_t r0, int64_t r1,
                   const void *act, size_t as, int na, float *y, int ldy) {
    const int nd = pa_na_direct(type);
    if (na <= nd || pa_signed(type)) {
        for (int c0 = 0; c0 < na; c0 += nd)
            pa_gemm_direct(type, n, panels, r0, r1, (const uint8_t *)act + (size_t)c0 * as, as,
                           na - c0 < nd ? na - c0 : nd, y + (size_t)c0 * (size_t)ldy, ldy);
        return;
    }
    for (int c0 = 0; c0 < na; c0 += KERN_GEMM_MAX_ACTS)
        pa_gemm_part(type, n, panels, r0, r1, (const uint8_t *)act + (size_t)c0 * as, as,
                     na - c0 < KERN_GEMM_MAX_ACTS ? na - c0 : KERN_GEMM_MAX_ACTS,
                     y + (size_t)c0 * (size_t)ldy, ldy);
}

/* The kern_panel_fn entry of each type. */
#define PA_ENTRY(name, qt)                                                                        \
    static void pa_gemm_##name(int64_t n, const void *panels, int64_t r0, int64_t r1,              \
                               const void *act, size_t as, int na, float *y, int ldy) {           \
        pa_gemm(qt, n, panels, r0, r1, act, as, na, y, ldy);                                      \
    }
PA_ENTRY(q8_0, QT_Q8_0)
PA_ENTRY(q5_0, QT_Q5_0)
PA_ENTRY(q4_0, QT_Q4_0)
PA_ENTRY(iq4_nl, QT_IQ4_NL)
PA_ENTRY(q4_1, QT_Q4_1)
PA_ENTRY(q5_1, QT_Q5_1)

void panel_register_avx2(struct kern_ops *ops) {
    ops->t[QT_Q8_0].panel = pa_gemm_q8_0;
    ops->t[QT_Q5_0].panel = pa_gemm_q5_0;
    ops->t[QT_Q4_0].panel = pa_gemm_q4_0;
    ops->t[QT_IQ4_NL].panel = pa_gemm_iq4_nl;
    ops->t[QT_Q4_1].panel = pa_gemm_q4_1;
    ops->t[QT_Q5_1].panel = pa_gemm_q5_1;
}
