/*
 * kern_panel_avx512 — the AVX-512 VNNI kernels over Q8_0, Q5_0, Q4_0, IQ4_NL, Q4_1, Q5_1,
 * Q3_K, Q4_K, Q5_K and Q6_K panels (layout and arithmetic: panel.h; the K-quants: pk_panel below).
 *
 * Block b of 16 rows unpacks into eight registers of [16 rows x 4 unsigned bytes] (Q8_0:
 * loaded as they are; the nibble types: nibbles split, Q5_0's / Q5_1's high bits added under
 * a byte mask, IQ4_NL's levels looked up by vpshufb); an activation contributes each 4-byte
 * group as a broadcast, so eight vpdpbusd leave the 16 rows' block sums in the 16 lanes,
 * already reduced. The weights enter unsigned (u = q + off, off = 128 for Q8_0 and IQ4_NL,
 * 16 for Q5_0, 8 for Q4_0): the accumulator starts at -off * sum(a) of the block, so the
 * lanes are exact sum(q * a). Q4_1 / Q5_1 sum u itself (off 0) and add their min as
 * fma(m, s_a, acc) after the block's product, as panel_gemm_ref does.
 * Integer sums are exact in any order (two chains, for latency); the float steps per row
 * and block are panel_gemm_ref's.
 *
 * The unpacked weights must stay in registers across a pass's activations, and each
 * activation group must be a {1to16} memory operand of vpdpbusd (pz_dp), not a separate
 * vpbroadcastd. Until 2026-12-07 neither held: gcc turned Q8_0's eight loads into a memmove
 * to the stack and the nibble types' unpack loop kept w[] in memory, so every activation
 * reloaded it. Fixing both (bench_kern, 2 threads, the 2-core Zen 4, M = 32, min of 2 runs
 * alternating, ms): Q8_0 LM head 25.3 -> 20.1, Q5_0 640 -> 2048 0.228 -> 0.157, Q6_K
 * 2048 -> 640 0.331 -> 0.230, Q4_K 0.248 -> 0.238; M = 1 no slower.
 *
 * Activations are taken in passes (PZ_NC at a time; Q8_0 4, the K-quants PK_G); each pass's
 * group is prepared once per call (block sums and scales on the stack) and the call's panels
 * stream past it, so with more activations than one pass takes, the task's panels are re-read
 * from cache, not memory.
 */
#include <immintrin.h>
#include <stddef.h>

#include "engine/kernels/kern_impl.h"
#include "engine/kernels/panel.h"
#include "engine/kernels/panel_x86.h"

#define PZ_PRAGMA(x) _Pragma(#x)
/* The loops over NC unroll so the accumulators stay in registers (-O2 leaves them a loop
 * over memory otherwise: one store and reload per block and activation). */
#define PZ_UNROLL(n) PZ_PRAGMA(GCC unroll n)
/* How far ahead every pass prefetches the records, as the AVX2 panel kernel does (the
 * hardware prefetchers stop at each 4 KiB page). Q8_0 LM head, 2 threads, wall clock, on a
 * 2-core Xeon (AVX-512, AMX): M = 1 / 2 / 4 4.5-4.7 / 6.9-7.5 / 9.2-9.8 ms without,
 * 4.2-4.5 / 4.6-4.8 / 5.6-6.4 with; M = 8, where the multiply-adds bound it, no change
 * (11.5-12.0 ms). Passes of 5-8 went without it until 2026-12-07, which made them the slow
 * case of a speculative check's rows: Q5_0 640 -> 2048 (bench_kern, 2 threads, the same
 * Xeon) M = 4 / 5 / 6 / 8 0.056 / 0.072-0.083 / 0.075-0.090 / 0.090-0.092 ms without,
 * 0.056 / 0.045-0.051 / 0.043-0.048 / 0.049-0.051 with. */
#define PZ_PF_DIST 4096
/* Passes of 3+ activations on AMD (pz_pf_far) prefetch PZ_PF_FAR ahead into L2 (prefetcht2)
 * instead of PZ_PF_DIST into L1. The multiply-adds of such a pass hold the core long enough
 * that near prefetches into L1 (each holding one of the core's few L1 miss buffers) no longer
 * cover DRAM's latency: the memory stream and the arithmetic ran one after the other. With
 * this and the groups of a pass meeting each panel in turn (pz_rows), the Q8_0 LM head on a
 * 2-core Zen 4 guest (bench_kern --threads 2 --m 1,4,8,9,16 --only lm_head, 3 runs
 * alternating, ms): M = 4 / 8 / 9 / 16 5.9-7.2 / 7.6-9.3 / 8.4-10.4 / 11.2-14.0 before,
 * 5.1-5.2 / 5.5-5.9 / 6.5-7.0 / 10.6-11.4 after. The far prefetch alone: M = 8 7.6-7.8; only
 * the first group of a panel prefetching (the later ones' prefetches ask for lines already
 * asked for): M = 8 7.0-8.4. M = 1 and 2 keep the near one (far was no faster there); 8 KiB
 * ahead gave about the same as 16. Intel (tuned with the near prefetch, not measured with
 * this) keeps it. */
#define PZ_PF_FAR 16384
static int pz_pf_far; /* panel_register_avx512: kern_prefetch_far(), 1 on AMD */

/* A pass's prefetch of the record at rec: near (pf 1) or far (pf 2); a prefetch never
 * faults, so past the end of the panels is fine. */
PZ_AI void pz_prefetch(const uint8_t *rec, size_t rb, int pf) {
    if (pf == 2)
        for (size_t o = 0; o < rb; o += 64)
            __builtin_prefetch(rec + PZ_PF_FAR + o, 0, 1);
    else
        for (size_t o = 0; o < rb; o += 64)
            __builtin_prefetch(rec + PZ_PF_DIST + o, 0, 3);
}

/* The prefetch of a pass of nc activations in a call of na: far only where the weights come
 * from memory once for a few activations (decode, speculative checks, up to 16 streams); a
 * prefill's passes reread a task's rows from L2, where far prefetches only add traffic
 * (bench_kern --m 512, two runs each: Q5_0 640 -> 2048 2.45-2.59 ms near, 3.18-3.19 far). */
#define PZ_PF_FAR_MAX_NA 16
/* Q8_0 keeps the far prefetch up to 32 activations: its records carry the most bytes per
 * multiply-add, and from 17 rows on the near one made the LM head a cliff (bench_kern
 * --threads 2 --time 0.3 --m 16,17,24,32 --only lm_head, 5 runs alternating, medians, ms:
 * limit 16: 12.0 / 17.2 / 20.3 / 25.2; limit 32: 11.4 / 12.5 / 16.1 / 20.8), which made a
 * speculative probe's 17th row cost a 16-stream step a quarter more. The nibble types and
 * K-quants at 17-32 were slower with it (Q5_0 640 -> 1024 at M = 17 0.051-0.057 -> 0.064-0.070
 * ms, 640 -> 2048 0.104-0.110 -> 0.114-0.143). 40 and 48 were mixed for Q8_0. */
#define PZ_PF_FAR_MAX_NA_Q8 32
static inline int pz_pf_for(uint32_t type, int nc, int na) {
    const int lim = type == QT_Q8_0 ? PZ_PF_FAR_MAX_NA_Q8 : PZ_PF_FAR_MAX_NA;
    return pz_pf_far && nc >= 3 && na <= lim ? 2 : 1;
}

/* Most activations per pass: 12 accumulators + 8 weight registers + temps fit the 32 registers.
 * Up to 2026-12-07 it was 8, so a speculative check of 8 drafts (9 rows) took a pass of 8 and
 * one of 1: Q5_0 640 -> 1024 / 640 -> 2048 at M = 9 0.048 / 0.085-0.091 ms in two passes,
 * 0.041-0.042 / 0.074-0.076 in one (bench_kern, 2 threads, a 2-core Xeon), M = 12 0.053-0.055 /
 * 0.095-0.100 -> 0.045-0.048 / 0.083-0.087; M = 8, 16 and 64 (--isa avx512) the same. */
#define PZ_NC 12

struct pz_act {
    int32_t corr[PANEL_NB_MAX]; /* -off * sum of the block's 32 activation bytes */
    float d[PANEL_NB_MAX];      /* the block's scale */
    float sa[PANEL_NB_MAX];     /* Q8_1 (Q4_1 / Q5_1): the block's s */
};

/* *acc = vpdpbusd(*acc, w, the 4 bytes at p broadcast), the broadcast folded into the
 * instruction's memory operand ({1to16}): GCC emits a separate vpbroadcastd for the
 * intrinsic form. */
PZ_AI void pz_dp(__m512i *acc, __m512i w, const uint8_t *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(*acc) : "v"(w), "m"(*(const int32_t *)p));
}

/* NC activations (prepared in A, quants of block b at act[c] + b * abytes) against one
 * panel: acc[c] = 16 rows. */
PZ_AI void pz_panel(uint32_t type, const int NC, int64_t nb, const uint8_t *pp,
                    const struct pz_act *A, const uint8_t *const *act, __m512 *acc, int pf) {
    const size_t rb = panel_rec_bytes(type), abytes = panel_act_bytes(type);
    PZ_UNROLL(12)
    for (int c = 0; c < NC; c++)
        acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *rec = pp + (size_t)(b >> 1) * rb;
        if (!(b & 1)) pz_prefetch(rec, rb, pf); /* a record ahead */
        const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(rec + (b & 1) * 32)));
        __m512 mw = _mm512_setzero_ps();
        if (panel_has_min(type))
            mw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(rec + 64 + (b & 1) * 32)));
        __m512i w[8];
        pz_unpack(type, rec, (int)(b & 1), w);
        PZ_UNROLL(12)
        for (int c = 0; c < NC; c++) {
            const uint8_t *qs = act[c] + (size_t)b * abytes;
            __m512i s0 = _mm512_set1_epi32(A[c].corr[b]), s1 = _mm512_setzero_si512();
            pz_dp(&s0, w[0], qs);
            pz_dp(&s1, w[1], qs + 4);
            pz_dp(&s0, w[2], qs + 8);
            pz_dp(&s1, w[3], qs + 12);
            pz_dp(&s0, w[4], qs + 16);
            pz_dp(&s1, w[5], qs + 20);
            pz_dp(&s0, w[6], qs + 24);
            pz_dp(&s1, w[7], qs + 28);
            const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(A[c].d[b]));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), d, acc[c]);
            if (panel_has_min(type)) /* + m * s_a, after the product (panel_gemm_ref's order) */
                acc[c] = _mm512_fmadd_ps(mw, _mm512_set1_ps(A[c].sa[b]), acc[c]);
        }
    }
}

/* Rows [r0, r1) of panels x activations [0, NC), in groups of G (the last one NC % G): every
 * group meets a panel before the next panel, so the panel streams from memory once and the
 * later groups read it from L1 (the memory stream and the multiply-adds overlap); partial
 * panels at either end store only their rows. */
PZ_AI void pz_rows(uint32_t type, const int NC, const int G, int64_t nb, const uint8_t *panels,
                   int64_t r0, int64_t r1, const struct pz_act *A, const uint8_t *const *act,
                   float *y, int ldy, int pf) {
    const size_t rb = panel_rec_bytes(type);
    const int64_t npair = (nb + 1) / 2;
    for (int64_t p = r0 / PANEL_ROWS; p * PANEL_ROWS < r1; p++) {
        const uint8_t *pp = panels + (size_t)p * (size_t)npair * rb;
        const __mmask16 m = pz_rows_mask(p, r0, r1);
        PZ_UNROLL(12)
        for (int g0 = 0; g0 < NC; g0 += G) {
            const int ng = NC - g0 < G ? NC - g0 : G;
            __m512 acc[PZ_NC];
            pz_panel(type, ng, nb, pp, A + g0, act + g0, acc, pf);
            PZ_UNROLL(12)
            for (int c = 0; c < ng; c++)
                _mm512_mask_storeu_ps(y + (size_t)(g0 + c) * (size_t)ldy + (size_t)(p * PANEL_ROWS),
                                      m, acc[c]);
        }
    }
}

PZ_AI void pz_gemm(uint32_t type, int64_t n, const void *panels, int64_t r0, int64_t r1,
                   const void *act, size_t as, int na, float *y, int ldy) {
    const int64_t nb = n / 32;
    struct pz_act A[PZ_NC];
    const uint8_t *ap[PZ_NC];
    /* Activations per pass, measured with bench_kern --cpu --fastest (one Zen 4 thread):
     * Q8_0 LM head 4 at a time, M = 8 / 16: 16-17 / 26-28 ms, 8 at a time: 23-27 / 35-42 ms;
     * Q5_0 640 -> 2048, whose unpacking is shared by the pass, 8 at a time: M = 16 / 64
     * 0.20 / 0.67 ms against 0.24-0.31 / 0.73-1.12 ms with 4. The other nibble types unpack
     * as Q5_0 does (IQ4_NL: a table lookup more), so they take PZ_NC too. */
    const int G = type == QT_Q8_0 ? 4 : PZ_NC;
    for (int c0 = 0; c0 < na; c0 += PZ_NC) {
        const int nc = na - c0 < PZ_NC ? na - c0 : PZ_NC;
        for (int c = 0; c < nc; c++) {
            const uint8_t *ar = (const uint8_t *)act + (size_t)(c0 + c) * as;
            ap[c] = ar + panel_act_qoff(type);
            pz_prep(type, nb, ar, A[c].corr, A[c].d, A[c].sa);
        }
        float *yc = y + (size_t)c0 * (size_t)ldy;
        const int pf = pz_pf_for(type, nc, na);
        /* one instance per pass width; Q8_0's groups of 4 */
#define PZ_CASE(k)                                                                                 \
    case k:                                                                                        \
        if (G == 4)                                                                                \
            pz_rows(type, k, 4, nb, panels, r0, r1, A, ap, yc, ldy, pf);                           \
        else                                                                                       \
            pz_rows(type, k, PZ_NC, nb, panels, r0, r1, A, ap, yc, ldy, pf);                       \
        break;
        switch (nc) {
            PZ_CASE(1)
            PZ_CASE(2)
            PZ_CASE(3)
            PZ_CASE(4)
            PZ_CASE(5)
            PZ_CASE(6)
            PZ_CASE(7)
            PZ_CASE(8)
            PZ_CASE(9)
            PZ_CASE(10)
            PZ_CASE(11)
        default:
            PZ_CASE(12)
        }
#undef PZ_CASE
    }
}

/* K-quants: per activation, the super-blocks' d_a and sum pairs (panel_x86.h: pk_prep). */
#define PK_SB_MAX (PANEL_NB_MAX / 8)
struct pk_act {
    float d[PK_SB_MAX];
    int32_t bp[PK_SB_MAX][8];
};

/* Sum of vpdpbusd over groups [g0, g1) of one chunk's unpacked weights w against the
 * activation's quants qs (4 bytes a group). */
PZ_AI __m512i pk_dot(const __m512i *w, const uint8_t *qs, int g0, int g1) {
    __m512i t0 = _mm512_setzero_si512(), t1 = _mm512_setzero_si512();
    for (int g = g0; g < g1; g += 2) {
        pz_dp(&t0, w[g], qs + 4 * g);
        pz_dp(&t1, w[g + 1], qs + 4 * g + 4);
    }
    return _mm512_add_epi32(t0, t1);
}

/* Activations per pass: 8, though the unpacked chunk (16 registers), 8 sums and 8 accumulators
 * leave the compiler a few spills: against 4 a pass (M = 5-8 in two), Q6_K / Q4_K 2048 -> 640
 * at M = 5 / 6 / 8 0.088-0.091 / 0.094-0.097 / 0.101-0.107 -> 0.075-0.076 / 0.076-0.078 /
 * 0.093-0.094 ms and 0.070-0.074 / 0.079-0.081 / 0.091-0.092 -> 0.066 / 0.070 / 0.082-0.083
 * (bench_kern, 2 threads, the 2-core Xeon); M = 16 / 64 under --isa avx512 no slower. */
#define PK_G 8

/* NC Q8_K activations (quants of super-block s at act[c] + s * sizeof(block_q8_K)) against
 * one K-quant panel (Q3_K, Q4_K, Q5_K, Q6_K): per super-block and chunk of 64 elements, the
 * unpacked weights (pk_unpack) meet each activation in vpdpbusd, one sum per sub-block (Q4_K 2,
 * Q6_K / Q3_K 4 per chunk), and vpmulld by the sub-block scales adds them into the exact S; M is
 * four (eight) vpdpwssd, then pk_step. */
PZ_AI void pk_panel(uint32_t type, const int NC, int64_t nsb, const uint8_t *pp,
                    const struct pk_act *A, const uint8_t *const *act, __m512 *acc, int pf) {
    const size_t rb = panel_rec_bytes(type);
    PZ_UNROLL(8)
    for (int c = 0; c < NC; c++)
        acc[c] = _mm512_setzero_ps();
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *rec = pp + (size_t)s * rb;
        pz_prefetch(rec, rb, pf);
        __m512i S[PK_G];
        PZ_UNROLL(8)
        for (int c = 0; c < NC; c++)
            S[c] = _mm512_setzero_si512();
        for (int cc = 0; cc < 4; cc++) {
            __m512i lo[8], hi[8];
            pk_unpack(type, rec, cc, lo, hi);
            PZ_UNROLL(8)
            for (int c = 0; c < NC; c++) {
                const uint8_t *qs = act[c] + (size_t)s * sizeof(struct block_q8_K) + 64 * cc;
                __m512i t;
                if (panel_k16(type))
                    t = _mm512_add_epi32(
                        _mm512_add_epi32(
                            _mm512_mullo_epi32(pk_dot(lo, qs, 0, 4), pk_scale(type, rec, 4 * cc)),
                            _mm512_mullo_epi32(pk_dot(lo, qs, 4, 8),
                                               pk_scale(type, rec, 4 * cc + 1))),
                        _mm512_add_epi32(_mm512_mullo_epi32(pk_dot(hi, qs + 32, 0, 4),
                                                            pk_scale(type, rec, 4 * cc + 2)),
                                         _mm512_mullo_epi32(pk_dot(hi, qs + 32, 4, 8),
                                                            pk_scale(type, rec, 4 * cc + 3))));
                else
                    t = _mm512_add_epi32(
                        _mm512_mullo_epi32(pk_dot(lo, qs, 0, 8), pk_scale(type, rec, 2 * cc)),
                        _mm512_mullo_epi32(pk_dot(hi, qs + 32, 0, 8),
                                           pk_scale(type, rec, 2 * cc + 1)));
                S[c] = _mm512_add_epi32(S[c], t);
            }
        }
        __m512i mp[8];
        pk_pairs(type, rec, mp);
        const __m512 dw = pk_half(rec, 0);
        const __m512 mw = panel_k16(type) ? _mm512_setzero_ps() : pk_half(rec, 32);
        PZ_UNROLL(8)
        for (int c = 0; c < NC; c++)
            acc[c] = pk_step(type, S[c], pk_mins(type, mp, A[c].bp[s]), dw, mw, A[c].d[s], acc[c]);
    }
}

PZ_AI void pk_rows(uint32_t type, const int NC, int64_t nsb, const uint8_t *panels, int64_t r0,
                   int64_t r1, const struct pk_act *A, const uint8_t *const *act, float *y, int ldy,
                   int pf) {
    for (int64_t p = r0 / PANEL_ROWS; p * PANEL_ROWS < r1; p++) {
        const uint8_t *pp = panels + (size_t)p * (size_t)nsb * panel_rec_bytes(type);
        __m512 acc[PK_G];
        pk_panel(type, NC, nsb, pp, A, act, acc, pf);
        const __mmask16 m = pz_rows_mask(p, r0, r1);
        PZ_UNROLL(8)
        for (int c = 0; c < NC; c++)
            _mm512_mask_storeu_ps(y + (size_t)c * (size_t)ldy + (size_t)(p * PANEL_ROWS), m,
                                  acc[c]);
    }
}

/* The K-quants' prefetch: far (pz_pf_far) for every pass of a call of up to PZ_PF_FAR_MAX_NA
 * activations, one and two included. A K-quant record is a whole super-block of 16 rows
 * (Q4_K 2,304 bytes, Q6_K 3,360), so the near prefetch asks for 36-53 lines into L1 at once,
 * more than the core's L1 miss buffers hold, and the pass waits on them; into L2 it does not.
 * bench_kern --threads 2 --time 0.3 on the 2-core Zen 4, two runs each, ms, near -> far:
 * M = 1 Q4_K 2048 -> 640 0.034-0.039 -> 0.027-0.029, 1024 -> 640 0.021-0.024 -> 0.014,
 * Q6_K 2048 -> 640 0.053-0.054 -> 0.041-0.045; M = 2 Q4_K 2048 -> 640 0.046-0.049 ->
 * 0.028-0.033, Q6_K 0.057-0.062 -> 0.046-0.047. 8 or 32 KiB ahead gave about the same as 16;
 * 8 KiB into L1 was slower than 4. The 32-element types' records are 704 bytes or less at two
 * blocks: far at M = 1 and 2 was mixed for them (Q5_0 640 -> 1024 faster, 640 -> 2048
 * slower), so they keep pz_pf_for. */
static inline int pk_pf_for(int na) {
    return pz_pf_far && na <= PZ_PF_FAR_MAX_NA ? 2 : 1;
}

PZ_AI void pk_gemm(uint32_t type, int64_t n, const void *panels, int64_t r0, int64_t r1,
                   const void *act, size_t as, int na, float *y, int ldy) {
    const int64_t nsb = n / 256;
    struct pk_act A[PK_G];
    const uint8_t *ap[PK_G];
    for (int c0 = 0; c0 < na; c0 += PK_G) {
        const int nc = na - c0 < PK_G ? na - c0 : PK_G;
        for (int c = 0; c < nc; c++) {
            const uint8_t *ar = (const uint8_t *)act + (size_t)(c0 + c) * as;
            ap[c] = ar + offsetof(struct block_q8_K, qs);
            pk_prep(type, nsb, ar, A[c].d, A[c].bp);
        }
        float *yc = y + (size_t)c0 * (size_t)ldy;
        const int pf = pk_pf_for(na);
        /* clang-format off */
        switch (nc) {
        case 1: pk_rows(type, 1, nsb, panels, r0, r1, A, ap, yc, ldy, pf); break;
        case 2: pk_rows(type, 2, nsb, panels, r0, r1, A, ap, yc, ldy, pf); break;
        case 3: pk_rows(type, 3, nsb, panels, r0, r1, A, ap, yc, ldy, pf); break;
        case 4: pk_rows(type, 4, nsb, panels, r0, r1, A, ap, yc, ldy, pf); break;
        case 5: pk_rows(type, 5, nsb, panels, r0, r1, A, ap, yc, ldy, pf); break;
        case 6: pk_rows(type, 6, nsb, panels, r0, r1, A, ap, yc, ldy, pf); break;
        case 7: pk_rows(type, 7, nsb, panels, r0, r1, A, ap, yc, ldy, pf); break;
        default: pk_rows(type, 8, nsb, panels, r0, r1, A, ap, yc, ldy, pf); break;
        }
        /* clang-format on */
    }
}

/* One entry per type: the 32-block types through pz_gemm, the K-quants through pk_gemm. */
#define PZ_ENTRY(name, T, impl)                                                                    \
    static void pz_gemm_##name(int64_t n, const void *panels, int64_t r0, int64_t r1,              \
                               const void *act, size_t as, int na, float *y, int ldy) {            \
        impl(T, n, panels, r0, r1, act, as, na, y, ldy);                                           \
    }
PZ_ENTRY(q8_0, QT_Q8_0, pz_gemm)
PZ_ENTRY(q5_0, QT_Q5_0, pz_gemm)
PZ_ENTRY(q4_0, QT_Q4_0, pz_gemm)
PZ_ENTRY(iq4_nl, QT_IQ4_NL, pz_gemm)
PZ_ENTRY(q4_1, QT_Q4_1, pz_gemm)
PZ_ENTRY(q5_1, QT_Q5_1, pz_gemm)
PZ_ENTRY(q4_K, QT_Q4_K, pk_gemm)
PZ_ENTRY(q5_K, QT_Q5_K, pk_gemm)
PZ_ENTRY(q3_K, QT_Q3_K, pk_gemm)
PZ_ENTRY(q6_K, QT_Q6_K, pk_gemm)

void panel_register_avx512(struct kern_ops *ops) {
    const int far = kern_prefetch_far(); /* written once, before any pass */
    if (pz_pf_far != far) pz_pf_far = far;
    ops->t[QT_Q8_0].panel = pz_gemm_q8_0;
    ops->t[QT_Q5_0].panel = pz_gemm_q5_0;
    ops->t[QT_Q4_0].panel = pz_gemm_q4_0;
    ops->t[QT_IQ4_NL].panel = pz_gemm_iq4_nl;
    ops->t[QT_Q4_1].panel = pz_gemm_q4_1;
    ops->t[QT_Q5_1].panel = pz_gemm_q5_1;
    ops->t[QT_Q4_K].panel = pz_gemm_q4_K;
    ops->t[QT_Q5_K].panel = pz_gemm_q5_K;
    ops->t[QT_Q6_K].panel = pz_gemm_q6_K;
    ops->t[QT_Q3_K].panel = pz_gemm_q3_K;
}
