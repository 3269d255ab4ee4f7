/*
 * kern_amx — the panel kernels (panel.h: Q8_0, Q5_0, Q4_0, IQ4_NL, Q4_1, Q5_1; the
 * K-quants Q3_K, Q4_K, Q5_K, Q6_K below) on AMX tiles, for batches of 16 and more activation rows
 * (prefill, multi-sequence decode). Compiled with the AVX-512 options plus -mamx-tile
 * -mamx-int8; kern_init installs it only when kern_isa_supported(KERN_ISA_AMX) (the CPU has
 * AMX-INT8 and the kernel granted this process the tile state).
 *
 * One tile product per (16 activations, 16 weight rows, block): A = the 16 activation rows'
 * 32 quant bytes of block b, read in place from the Q8_0 (Q8_1 for Q4_1 / Q5_1) rows (stride
 * a_stride); B = the block's 8 groups x [16 rows x 4 bytes] of signed weights q (Q4_1 / Q5_1:
 * u, 0..31), unpacked from the panel record (panel_x86.h) once per panel and chunk of blocks
 * and shared by all the activations of the call; TDPBSSD gives C[m][i] = S, the exact integer
 * block sum. Q8_0's record is already a B tile (of u = q + 128): it is loaded in place and
 * TDPBSUD's C = S + 128 * sum a is corrected in integers (ax_direct). The float steps then are the
 * VNNI kernel's, in the same order: acc = fma((float)S, dw * da, acc) per block from acc = 0, then
 * for Q4_1 / Q5_1 acc = fma(m, s_a, acc). Integer sums are exact in any order, so the result has
 * the VNNI kernel's bits (and panel_gemm_ref's, the scalar twin): test_panel and test_kpanel check
 * it bit for bit. Batch and thread invariance therefore hold whichever kernel computes a row. The
 * tile products of up to AX_TB blocks run back to back (four in flight) before their float steps,
 * so the tile unit and the vector units overlap.
 *
 * Activations beyond the last whole group of 16 go to the VNNI kernel (same bits). A Q8_0 call of
 * AX_MIN_M..15 activations (speculative checks, a few streams) runs as one group of that many
 * tile rows instead: the tile products cost about the same at any row count, and the VNNI
 * kernel's multiply-adds grow with each activation (LM head, 2 threads, bench_kern: M = 5 / 8 /
 * 12 11.0-11.6 / 12.3 / 16.2-16.4 ms on VNNI, 8.2 / 9.6 / 11.5 on tiles; M = 4 about 8 either
 * way).
 * Tile configuration: loaded at the start of every call on the calling (pool) thread and
 * released at its end, so no thread keeps tile state between calls.
 */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine/kernels/kern_impl.h"
#include "engine/kernels/panel.h"
#include "engine/kernels/panel_x86.h"

#define AX_G 16  /* activations per tile (A and C rows) */
#define AX_NA 64 /* activations per call (KERN_GEMM_MAX_ACTS) handled at once */
#define AX_KB 64 /* blocks per chunk: B tiles 32 KiB, activation scales 16 KiB */
_Static_assert(KERN_GEMM_MAX_ACTS <= AX_NA, "a call's activations must fit the prep arrays");

/* The VNNI kernels, which take the activations past the last whole group of 16, by
 * ax_types' index. */
static const uint32_t ax_types[] = {QT_Q8_0, QT_Q5_0, QT_Q4_0, QT_IQ4_NL, QT_Q4_1, QT_Q5_1};
#define AX_NT ((int)(sizeof ax_types / sizeof ax_types[0]))
static kern_panel_fn g_vnni[AX_NT];

/* Tile numbers: C0, C1 accumulate two blocks in flight, A0/A1 and B0/B1 their operands.
 * (Macros, expanded before the intrinsics paste them into the instruction text.) */
#define AX_C0 0
#define AX_C1 1
#define AX_C2 2
#define AX_C3 3
#define AX_A0 4
#define AX_A1 5
#define AX_B0 6
#define AX_B1 7
#define AX_ZERO(t) _tile_zero(t)
#define AX_LOAD(t, p, stride) _tile_loadd(t, p, stride)
#define AX_STORE(t, p, stride) _tile_stored(t, p, stride)
#define AX_DP(c, a, b) _tile_dpbssd(c, a, b)
#define AX_DPU(c, a, b) _tile_dpbsud(c, a, b) /* A signed, B unsigned */

struct ax_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* kb: the bytes of one product's K (32: a block, or a Q4_K sub-block; 16: a Q6_K one); rows:
 * the activations of a group (A and C rows), AX_G but for a call of fewer (ax_gemm). */
static void ax_config(int kb, int rows) {
    struct ax_cfg c __attribute__((aligned(64)));
    memset(&c, 0, sizeof(c));
    c.palette = 1;
    for (int t = AX_C0; t <= AX_C3; t++)
        c.rows[t] = (uint8_t)rows, c.colsb[t] = PANEL_ROWS * 4; /* rows x 16 int32 */
    for (int t = AX_A0; t <= AX_A1; t++)
        c.rows[t] = (uint8_t)rows, c.colsb[t] = (uint16_t)kb; /* activations x kb bytes */
    for (int t = AX_B0; t <= AX_B1; t++)
        c.rows[t] = (uint8_t)(kb / 4), c.colsb[t] = PANEL_ROWS * 4; /* groups x [16 x 4 bytes] */
    /* not _tile_loadconfig: gcc's intrinsic names only the first 8 bytes as its input, so
     * the stores above may be dropped as dead once ax_config is inlined (then tilezero
     * faults with SIGILL); the whole struct as the operand keeps them */
    __asm__ volatile("ldtilecfg %0" : : "m"(c));
}

/* Scales (and Q8_1's s) of one chunk's activation blocks: [activation][block of the chunk]. */
struct ax_prep {
    float d[AX_NA][AX_KB];
    float sa[AX_NA][AX_KB];
    int32_t corr[AX_NA][AX_KB]; /* pz_prep's -off * (sum of the block's quants) */
};

/* Q8_0's panel record already holds each block as 8 groups x [16 rows x 4 bytes] of u = q +
 * 128: a B tile as it is. Its products load B straight from the record and run TDPBSUD (signed
 * activations a, unsigned u), so C = S + 128 * sum a, and ax_accum adds pz_prep's corr:
 * the same exact S, nothing unpacked or copied. */
static inline int ax_direct(uint32_t type) {
    return type == QT_Q8_0;
}

/* Blocks of a chunk that go through the tiles before their float steps (16 KiB of C). */
#define AX_TB 16
#define AX_MIN_M 5 /* fewest activations of a Q8_0 call on tiles */
/* Panels ahead whose B tiles a direct (Q8_0) product prefetches: 1 was faster than 2 or 4,
 * and than L2 or non-temporal hints, on the LM head at 16 activations. */
#define AX_PF 1

/* The float steps of one block for 16 activations: C (16 x 16 int32 = the exact sums S)
 * converted, times dw * da, into acc, then (mins) + mw * s_a. Exactly pz_panel's per-block
 * steps. */
static inline __attribute__((always_inline)) void ax_accum(int mins, const int32_t *cbuf, __m512 dw,
                                                           __m512 mw, const float *da,
                                                           const float *sa, const int32_t *corr,
                                                           int kb, int nm, __m512 *acc) {
#pragma GCC unroll 16
    for (int m = 0; m < AX_G; m++) {
        if (m >= nm) break;
        const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(da[m * AX_KB + kb]));
        __m512i c = _mm512_load_si512(cbuf + m * PANEL_ROWS);
        if (corr) c = _mm512_add_epi32(c, _mm512_set1_epi32(corr[m * AX_KB + kb]));
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c), d, acc[m]);
        if (mins) acc[m] = _mm512_fmadd_ps(mw, _mm512_set1_ps(sa[m * AX_KB + kb]), acc[m]);
    }
}

/* The f16 row scales (at 0) or mins (at 64) of block b of a panel, as floats. */
static inline __attribute__((always_inline)) __m512 ax_half16(const uint8_t *pp, size_t rb,
                                                              int64_t b, int at) {
    const uint8_t *rec = pp + (size_t)(b >> 1) * rb;
    return _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(rec + at + (b & 1) * 32)));
}

/* B tiles of blocks [kb0, kb0 + kbn) of one panel as signed bytes q (unpacked as u = q + off;
 * Q4_1 / Q5_1: u, off 0): 512 bytes per block, 8 groups x [16 rows x 4 bytes]. */
static void ax_btiles(uint32_t type, const uint8_t *pp, size_t rb, int64_t kb0, int kbn,
                      uint8_t *bbuf) {
    const __m512i off = _mm512_set1_epi8((char)pz_off(type));
    for (int k = 0; k < kbn; k++) {
        const int64_t b = kb0 + k;
        __m512i w[8];
        pz_unpack(type, pp + (size_t)(b >> 1) * rb, (int)(b & 1), w);
        for (int g = 0; g < 8; g++)
            _mm512_store_si512(bbuf + (size_t)k * 512 + g * 64, _mm512_sub_epi8(w[g], off));
    }
}

/* One block's tile product for 16 activations: C = A (activations) x B (weights), B from
 * the unpacked copy or (direct) the record itself. */
#define AX_PROD(TC, TA, TB, b)                                                                     \
    do {                                                                                           \
        AX_LOAD(TA, ag + (size_t)(b)*abytes, (long)as);                                            \
        if (direct) {                                                                              \
            const uint8_t *bt_ = pp + (size_t)((b) >> 1) * rb + 64 + ((b)&1) * 512;                \
            if (pf)                                                                                \
                for (int l_ = 0; l_ < 512; l_ += 64)                                               \
                    _mm_prefetch((const char *)bt_ + pfd + l_, _MM_HINT_T0);                       \
            AX_LOAD(TB, bt_, 64);                                                                  \
            AX_DPU(TC, TA, TB);                                                                    \
        } else {                                                                                   \
            AX_LOAD(TB, bbuf + (size_t)((b)-kb0) * 512, 64);                                       \
            AX_DP(TC, TA, TB);                                                                     \
        }                                                                                          \
    } while (0)
#define AX_CST(TC, b) AX_STORE(TC, cbuf + (size_t)((b)-t0) * AX_G * PANEL_ROWS, 64)
#define AX_BLOCK(TC, TA, TB, b)                                                                    \
    do {                                                                                           \
        AX_ZERO(TC);                                                                               \
        AX_PROD(TC, TA, TB, b);                                                                    \
        AX_CST(TC, b);                                                                             \
    } while (0)

/* Rows [r0, r1) x activations [0, ng * 16) for one chunk of blocks [kb0, kb0 + kbn). */
static inline __attribute__((always_inline)) void
ax_chunk(uint32_t type, int64_t nb, const uint8_t *panels, int64_t r0, int64_t r1,
         const uint8_t *act, size_t as, int ng, int nm, float *y, int ldy, int64_t kb0, int kbn,
         const struct ax_prep *P, uint8_t *bbuf, int32_t *cbuf) {
    const size_t rb = panel_rec_bytes(type), abytes = panel_act_bytes(type);
    const int mins = panel_has_min(type), direct = ax_direct(type);
    const int64_t npair = (nb + 1) / 2;
    for (int64_t p = r0 / PANEL_ROWS; p * PANEL_ROWS < r1; p++) {
        const uint8_t *pp = panels + (size_t)p * (size_t)npair * rb;
        if (!direct) ax_btiles(type, pp, rb, kb0, kbn, bbuf);
        const __mmask16 msk = pz_rows_mask(p, r0, r1);
        /* tile loads are not prefetched by the hardware: the first group's products ask for
         * the same block AX_PF panels on, 8 lines at a time */
        const size_t pfd = (size_t)AX_PF * (size_t)npair * rb;
        for (int g = 0; g < ng; g++) {
            const int pf = direct && g == 0 && (p + AX_PF) * PANEL_ROWS < r1;
            /* past the block's scale (and s) */
            const uint8_t *ag = act + (size_t)g * AX_G * as + panel_act_qoff(type);
            const float *da = P->d[g * AX_G], *sa = P->sa[g * AX_G];
            const int32_t *corr = direct ? P->corr[g * AX_G] : NULL;
            float *yg = y + (size_t)g * AX_G * (size_t)ldy + (size_t)(p * PANEL_ROWS);
            __m512 acc[AX_G];
            for (int m = 0; m < nm; m++)
                acc[m] = kb0 == 0 ? _mm512_setzero_ps()
                                  : _mm512_maskz_loadu_ps(msk, yg + (size_t)m * (size_t)ldy);
            for (int64_t t0 = kb0; t0 < kb0 + kbn; t0 += AX_TB) {
                const int64_t t1 = t0 + AX_TB < kb0 + kbn ? t0 + AX_TB : kb0 + kbn;
                int64_t b = t0; /* the tiles first, four blocks in flight, then the floats */
                for (; b + 3 < t1; b += 4) {
                    AX_ZERO(AX_C0);
                    AX_ZERO(AX_C1);
                    AX_ZERO(AX_C2);
                    AX_ZERO(AX_C3);
                    AX_PROD(AX_C0, AX_A0, AX_B0, b);
                    AX_PROD(AX_C1, AX_A1, AX_B1, b + 1);
                    AX_PROD(AX_C2, AX_A0, AX_B0, b + 2);
                    AX_PROD(AX_C3, AX_A1, AX_B1, b + 3);
                    AX_CST(AX_C0, b);
                    AX_CST(AX_C1, b + 1);
                    AX_CST(AX_C2, b + 2);
                    AX_CST(AX_C3, b + 3);
                }
                for (; b < t1; b++)
                    AX_BLOCK(AX_C0, AX_A0, AX_B0, b);
                for (b = t0; b < t1; b++)
                    ax_accum(mins, cbuf + (size_t)(b - t0) * AX_G * PANEL_ROWS,
                             ax_half16(pp, rb, b, 0),
                             mins ? ax_half16(pp, rb, b, 64) : _mm512_setzero_ps(), da, sa, corr,
                             (int)(b - kb0), nm, acc);
            }
            for (int m = 0; m < nm; m++)
                _mm512_mask_storeu_ps(yg + (size_t)m * (size_t)ldy, msk, acc[m]);
        }
    }
}

static inline __attribute__((always_inline)) void ax_gemm(int ti, int64_t n, const void *panels,
                                                          int64_t r0, int64_t r1, const void *act,
                                                          size_t as, int na, float *y, int ldy) {
    const uint32_t type = ax_types[ti];
    const kern_panel_fn vnni = g_vnni[ti];
    int ng = (na < AX_NA ? na : AX_NA) / AX_G, nm = AX_G;
    if (ng == 0 && ax_direct(type) && na >= AX_MIN_M) /* one group of na rows */
        ng = 1, nm = na;
    if (ng == 0 || r1 <= r0) {
        vnni(n, panels, r0, r1, act, as, na, y, ldy);
        return;
    }
    const int done = ng * nm;
    const int64_t nb = n / 32;
    struct ax_prep P __attribute__((aligned(64)));
    uint8_t bbuf[AX_KB * 512] __attribute__((aligned(64)));
    int32_t cbuf[AX_TB * AX_G * PANEL_ROWS] __attribute__((aligned(64)));
    ax_config(32, nm);
    for (int64_t kb0 = 0; kb0 < nb; kb0 += AX_KB) {
        const int kbn = (int)(nb - kb0 < AX_KB ? nb - kb0 : AX_KB);
        const size_t abytes = panel_act_bytes(type);
        for (int c = 0; c < done; c++) {
            const uint8_t *ab = (const uint8_t *)act + (size_t)c * as + (size_t)kb0 * abytes;
            pz_prep(type, kbn, ab, P.corr[c], P.d[c], P.sa[c]);
        }
        if (nm == AX_G) /* an instance with the group's rows fixed */
            ax_chunk(type, nb, panels, r0, r1, act, as, ng, AX_G, y, ldy, kb0, kbn, &P, bbuf, cbuf);
        else
            ax_chunk(type, nb, panels, r0, r1, act, as, ng, nm, y, ldy, kb0, kbn, &P, bbuf, cbuf);
    }
    _tile_release();
    if (na > done) /* fewer than 16 left */
        vnni(n, panels, r0, r1, (const uint8_t *)act + (size_t)done * as, as, na - done,
             y + (size_t)done * (size_t)ldy, ldy);
}

/* The K-quants (panel.h: Q3_K, Q4_K, Q5_K, Q6_K): per super-block of 16 rows, one tile product per
 * sub-block j (Q4_K / Q5_K 8 of 32 elements, Q6_K / Q3_K 16 of 16): A = the activations' quants of
 * sub-block j, B = its unsigned weights u (pk_unpack: valid signed bytes, 0..63), so C_j[m][i]
 * is the exact sub-block sum; then per activation S = sum_j sc_j * C_j (vpmulld), M by
 * vpdpwssd and pk_step, as the VNNI kernel does. */
#define AK_SB 8 /* super-blocks per chunk: B tiles 32 KiB */
#define AK_TB 2 /* super-blocks whose tile products run before their integer steps */
static kern_panel_fn g_vnni_q3_K, g_vnni_q4_K, g_vnni_q5_K, g_vnni_q6_K;

struct ak_prep {
    float d[AX_NA][AK_SB];
    int32_t bp[AX_NA][AK_SB][8];
};

/* Sub-blocks per super-block and bytes per sub-block. */
#define AK_NSUB(t) (panel_k16(t) ? 16 : 8)
#define AK_KB(t) (panel_k16(t) ? 16 : 32)

/* B tiles of super-blocks [s0, s0 + sn) of one panel, 4096 bytes each, laid out [chunk][lo,
 * hi][g][16 rows x 4 bytes]: that is sub-block after sub-block for both types, sub-block j at
 * j * AK_KB * 16 (Q4_K 512 bytes each, Q6_K 256). */
static void ak_btiles(uint32_t type, const uint8_t *pp, int64_t s0, int sn, uint8_t *bbuf) {
    const size_t rb = panel_rec_bytes(type);
    for (int k = 0; k < sn; k++) {
        const uint8_t *rec = pp + (size_t)(s0 + k) * rb;
        uint8_t *o = bbuf + (size_t)k * 4096;
        for (int cc = 0; cc < 4; cc++) {
            __m512i lo[8], hi[8];
            pk_unpack(type, rec, cc, lo, hi);
            for (int g = 0; g < 8; g++) {
                _mm512_store_si512(o + cc * 1024 + g * 64, lo[g]);
                _mm512_store_si512(o + cc * 1024 + 512 + g * 64, hi[g]);
            }
        }
    }
}

/* One sub-block's tile product for 16 activations into cbuf slot q. */
#define AK_SUB(TC, TA, TB, k, j, q)                                                                \
    do {                                                                                           \
        AX_ZERO(TC);                                                                               \
        AX_LOAD(TA, ag + (size_t)(s0 + (k)) * sizeof(struct block_q8_K) + kb * (j), (long)as);     \
        AX_LOAD(TB, bbuf + (size_t)(k)*4096 + (size_t)(j) * (size_t)kb * 16, 64);                  \
        AX_DP(TC, TA, TB);                                                                         \
        AX_STORE(TC, cbuf + (size_t)(q)*AX_G * PANEL_ROWS, 64);                                    \
    } while (0)

/* Rows [r0, r1) x activations [0, ng * 16) for super-blocks [s0, s0 + sn). */
static inline __attribute__((always_inline)) void
ak_chunk(uint32_t type, int64_t nsb, const uint8_t *panels, int64_t r0, int64_t r1,
         const uint8_t *act, size_t as, int ng, float *y, int ldy, int64_t s0, int sn,
         const struct ak_prep *P, uint8_t *bbuf, int32_t *cbuf) {
    const size_t rb = panel_rec_bytes(type);
    const int nsub = AK_NSUB(type), kb = AK_KB(type);
    for (int64_t p = r0 / PANEL_ROWS; p * PANEL_ROWS < r1; p++) {
        const uint8_t *pp = panels + (size_t)p * (size_t)nsb * rb;
        ak_btiles(type, pp, s0, sn, bbuf);
        const __mmask16 msk = pz_rows_mask(p, r0, r1);
        for (int g = 0; g < ng; g++) {
            const uint8_t *ag = act + (size_t)g * AX_G * as + offsetof(struct block_q8_K, qs);
            float *yg = y + (size_t)g * AX_G * (size_t)ldy + (size_t)(p * PANEL_ROWS);
            __m512 acc[AX_G];
            for (int m = 0; m < AX_G; m++)
                acc[m] = s0 == 0 ? _mm512_setzero_ps()
                                 : _mm512_maskz_loadu_ps(msk, yg + (size_t)m * (size_t)ldy);
            for (int t0 = 0; t0 < sn; t0 += AK_TB) {
                const int t1 = t0 + AK_TB < sn ? t0 + AK_TB : sn;
                for (int k = t0; k < t1; k++) /* the tiles first, two in flight */
                    for (int j = 0; j < nsub; j += 2) {
                        AK_SUB(AX_C0, AX_A0, AX_B0, k, j, (k - t0) * nsub + j);
                        AK_SUB(AX_C1, AX_A1, AX_B1, k, j + 1, (k - t0) * nsub + j + 1);
                    }
                for (int k = t0; k < t1; k++) {
                    const uint8_t *rec = pp + (size_t)(s0 + k) * rb;
                    __m512i sc[16], mp[8];
                    for (int j = 0; j < nsub; j++)
                        sc[j] = pk_scale(type, rec, j);
                    pk_pairs(type, rec, mp);
                    const __m512 dw = pk_half(rec, 0);
                    const __m512 mw = panel_k16(type) ? _mm512_setzero_ps() : pk_half(rec, 32);
                    const int32_t *ck = cbuf + (size_t)(k - t0) * (size_t)nsub * AX_G * PANEL_ROWS;
                    for (int m = 0; m < AX_G; m++) {
                        __m512i S = _mm512_setzero_si512();
                        for (int j = 0; j < nsub; j++)
                            S = _mm512_add_epi32(
                                S, _mm512_mullo_epi32(
                                       _mm512_load_si512(ck + (j * AX_G + m) * PANEL_ROWS), sc[j]));
                        const int c = g * AX_G + m;
                        acc[m] = pk_step(type, S, pk_mins(type, mp, P->bp[c][k]), dw, mw,
                                         P->d[c][k], acc[m]);
                    }
                }
            }
            for (int m = 0; m < AX_G; m++)
                _mm512_mask_storeu_ps(yg + (size_t)m * (size_t)ldy, msk, acc[m]);
        }
    }
}

static inline __attribute__((always_inline)) void ak_gemm(uint32_t type, kern_panel_fn vnni,
                                                          int64_t n, const void *panels, int64_t r0,
                                                          int64_t r1, const void *act, size_t as,
                                                          int na, float *y, int ldy) {
    const int ng = (na < AX_NA ? na : AX_NA) / AX_G;
    if (ng == 0 || r1 <= r0) {
        vnni(n, panels, r0, r1, act, as, na, y, ldy);
        return;
    }
    const int done = ng * AX_G;
    const int64_t nsb = n / 256;
    struct ak_prep P __attribute__((aligned(64)));
    uint8_t bbuf[AK_SB * 4096] __attribute__((aligned(64)));
    int32_t cbuf[AK_TB * 16 * AX_G * PANEL_ROWS] __attribute__((aligned(64)));
    ax_config(AK_KB(type), AX_G);
    for (int64_t s0 = 0; s0 < nsb; s0 += AK_SB) {
        const int sn = (int)(nsb - s0 < AK_SB ? nsb - s0 : AK_SB);
        for (int c = 0; c < done; c++)
            pk_prep(type, sn,
                    (const uint8_t *)act + (size_t)c * as + (size_t)s0 * sizeof(struct block_q8_K),
                    P.d[c], P.bp[c]);
        ak_chunk(type, nsb, panels, r0, r1, act, as, ng, y, ldy, s0, sn, &P, bbuf, cbuf);
    }
    _tile_release();
    if (na > done)
        vnni(n, panels, r0, r1, (const uint8_t *)act + (size_t)done * as, as, na - done,
             y + (size_t)done * (size_t)ldy, ldy);
}

static void ak_gemm_q4_K(int64_t n, const void *panels, int64_t r0, int64_t r1, const void *act,
                         size_t as, int na, float *y, int ldy) {
    ak_gemm(QT_Q4_K, g_vnni_q4_K, n, panels, r0, r1, act, as, na, y, ldy);
}

static void ak_gemm_q5_K(int64_t n, const void *panels, int64_t r0, int64_t r1, const void *act,
                         size_t as, int na, float *y, int ldy) {
    ak_gemm(QT_Q5_K, g_vnni_q5_K, n, panels, r0, r1, act, as, na, y, ldy);
}

static void ak_gemm_q3_K(int64_t n, const void *panels, int64_t r0, int64_t r1, const void *act,
                         size_t as, int na, float *y, int ldy) {
    ak_gemm(QT_Q3_K, g_vnni_q3_K, n, panels, r0, r1, act, as, na, y, ldy);
}

static void ak_gemm_q6_K(int64_t n, const void *panels, int64_t r0, int64_t r1, const void *act,
                         size_t as, int na, float *y, int ldy) {
    ak_gemm(QT_Q6_K, g_vnni_q6_K, n, panels, r0, r1, act, as, na, y, ldy);
}

#define AX_ENTRY(ti, name)                                                                         \
    static void ax_gemm_##name(int64_t n, const void *panels, int64_t r0, int64_t r1,              \
                               const void *act, size_t as, int na, float *y, int ldy) {            \
        ax_gemm(ti, n, panels, r0, r1, act, as, na, y, ldy);                                       \
    }
AX_ENTRY(0, q8_0)
AX_ENTRY(1, q5_0)
AX_ENTRY(2, q4_0)
AX_ENTRY(3, iq4_nl)
AX_ENTRY(4, q4_1)
AX_ENTRY(5, q5_1)

void panel_register_amx(struct kern_ops *ops) {
    static const kern_panel_fn amx[AX_NT] = {ax_gemm_q8_0,   ax_gemm_q5_0, ax_gemm_q4_0,
                                             ax_gemm_iq4_nl, ax_gemm_q4_1, ax_gemm_q5_1};
    for (int i = 0; i < AX_NT; i++) {
        if (!ops->t[ax_types[i]].panel) continue; /* no VNNI kernel below */
        g_vnni[i] = ops->t[ax_types[i]].panel;
        ops->t[ax_types[i]].panel = amx[i];
    }
    if (ops->t[QT_Q4_K].panel) {
        g_vnni_q4_K = ops->t[QT_Q4_K].panel;
        ops->t[QT_Q4_K].panel = ak_gemm_q4_K;
    }
    if (ops->t[QT_Q5_K].panel) {
        g_vnni_q5_K = ops->t[QT_Q5_K].panel;
        ops->t[QT_Q5_K].panel = ak_gemm_q5_K;
    }
    if (ops->t[QT_Q3_K].panel) {
        g_vnni_q3_K = ops->t[QT_Q3_K].panel;
        ops->t[QT_Q3_K].panel = ak_gemm_q3_K;
    }
    if (ops->t[QT_Q6_K].panel) {
        g_vnni_q6_K = ops->t[QT_Q6_K].panel;
        ops->t[QT_Q6_K].panel = ak_gemm_q6_K;
    }
}
