/*
 * panel — Q8_0, Q5_0, Q4_0, IQ4_NL, Q4_1, Q5_1, Q3_K, Q4_K, Q5_K and Q6_K weight matrices
 * repacked once, at start-up, into 16-row panels for the AVX-512 VNNI kernels
 * (kern_panel_avx512.c), their AMX twins (kern_amx.c) and, for the first six, the AVX2 ones
 * (kern_panel_avx2.c: vpmaddubsw over [8 rows x 4 bytes], 2.4x
 * the row kernel's multiply-adds per second at 64+ rows on a Zen 4 core for Q5_0). The
 * mmap'd rows stay as they are; a panel copy holds the same bytes in another order, and the
 * forward pass hands the original pages back to the kernel (madvise) so memory does not
 * double.
 *
 * Why: in the row layout a 512-bit register holds two 32-element blocks of ONE row, so each
 * 64 multiply-adds need a conversion, a scale product and an FMA over 16 lanes that carry
 * only two distinct sums. In a panel the register holds 4 bytes of each of 16 rows, eight
 * vpdpbusd finish one block of 16 rows, and the float work is one conversion, one product
 * and one FMA per 16 rows and block: about 3x fewer instructions per multiply-add.
 *
 * Layout (npair = ceil(nb / 2) block pairs, nb = n_in / 32): panel p covers rows 16p..16p+15
 * (a last partial panel is padded with zero rows) and is npair records, each starting on a
 * 64-byte boundary. Within a record, block b of the pair is h = b & 1, row i in 0..15, and
 * element k of the block belongs to group g = k / 4 (bytes k % 4 of the group):
 *   Q8_0, 1088 bytes per record:
 *     [0, 64)      f16 scales [h][i]
 *     [64, 1088)   quants [h][g = 0..7][i][k % 4] as unsigned bytes u = q + 128 (q ^ 0x80)
 *   Q5_0, 704 bytes per record (u = q + 16 = nibble | high bit << 4, in 0..31):
 *     [0, 64)      f16 scales [h][i]
 *     [64, 192)    high bits [h][g = 0..7] as 64-bit words, bit i * 4 + k % 4 = u >> 4
 *     [192, 704)   nibbles [h][g = 0..3][i][k % 4]: low nibble u & 15 of element k = 4g + k%4,
 *                  high nibble u & 15 of element 16 + 4g + k % 4
 *   Q4_0, 576 bytes per record (u = q + 8, the file's nibble):
 *     [0, 64)      f16 scales [h][i]
 *     [64, 576)    nibbles [h][g = 0..3][i][k % 4], as Q5_0's
 *   IQ4_NL: Q4_0's record; the nibble indexes the level, q = quant_iq4_nl_level
 *     (padding rows: nibble 8, level 1, scale 0)
 *   Q4_1, 640 bytes (u = the nibble, value d * u + m):
 *     [0, 64) f16 scales [h][i], [64, 128) f16 mins [h][i], [128, 640) nibbles as Q4_0's
 *   Q5_1, 768 bytes (u = nibble | high bit << 4, value d * u + m):
 *     [0, 64) scales, [64, 128) mins, [128, 256) high bits as Q5_0's, [256, 768) nibbles
 * The same bytes per block and row as the mmap (34, 22, 18, 18, 20 and 24). The kernels unpack a
 * block of 16 rows into eight registers [16 rows x 4 unsigned bytes] and feed vpdpbusd directly.
 *
 * Q4_K (AVX-512 and AMX only): a record is one 256-element super-block of 16 rows (nsb =
 * n_in / 256 records per panel), 2368 bytes, 148 per row against the file's 144:
 *     [0, 32) f16 d [i], [32, 64) f16 dmin [i],
 *     [64, 192) 6-bit sub-block scales sc [j = 0..7][i], [192, 320) 6-bit mins mn [j][i],
 *     [320, 2368) nibbles [c = 0..3][g = 0..7][i][k % 4]: the file's qs[32c + 4g + k % 4]
 *     of row i, whose low nibble u is element 64c + 4g + k % 4 (sub-block j = 2c, group g)
 *     and high nibble element 64c + 32 + 4g + k % 4 (sub-block 2c + 1, group g).
 * Its value is d * sc_j * u - dmin * mn_j (quant_dequant_q4_K_ref's). Padding rows: all 0.
 * Q5_K: Q4_K's record and 512 bytes more, 2880 (180 per row against the file's 176): [2368,
 *     2880) fifth bits [g][i][k % 4], the file's qh[4g + k % 4]: bit 2c (2c + 1) is the fifth
 *     bit of u of element 64c + 4g + k % 4 (64c + 32 + 4g + k % 4); u = 0..31.
 * Q6_K (AVX-512 and AMX only): the same, one super-block of 16 rows, 3392 bytes (210 per row
 * as in the file, plus 32 of padding), u = q + 32 in 0..63:
 *     [0, 32) f16 d [i], [32, 288) signed scales sc [j = 0..15][i] (sub-blocks of 16),
 *     [320, 2368) low nibbles of u as Q4_K's nibbles (element 64c + 4g + k % 4 low, 64c +
 *     32 + 4g + k % 4 high), [2368, 3392) high bits [h = 0..1][g = 0..7][i][k % 4]: bits 2t,
 *     2t + 1 of the byte are u >> 4 of element 128h + 32t + 4g + k % 4.
 * Its value is d * sc_j * (u - 32) (quant_dequant_q6_K_ref's).
 * Q3_K (AVX-512 and AMX only): one super-block of 16 rows, 1856 bytes (116 per row against the
 * file's 110), u = q + 4 in 0..7:
 *     [0, 32) f16 d [i], [32, 288) signed scales sc = the file's 6-bit scale - 32 [j][i],
 *     [320, 1344) low two bits [h = 0..1][g][i][k % 4], the file's qs[32h + 4g + k % 4]: bits
 *     2t, 2t + 1 are those of element 128h + 32t + 4g + k % 4, [1344, 1856) third bits
 *     [g][i][k % 4], the file's hmask[4g + k % 4]: bit t of element 32t + 4g + k % 4.
 * Its value is d * sc_j * (u - 4) (quant_dequant_q3_K_ref's).
 *
 * Arithmetic, fixed for every M, row range and thread count (so deterministic mode holds):
 * per row and block the exact integer S = sum q * a, then acc = fma((float)S, dw * da, acc)
 * over the blocks in order from acc = 0; Q4_1 / Q5_1 (S over u, activations Q8_1 with their
 * s = da * sum a) then also acc = fma(mw, s_a, acc) after each block's product.
 * Q4_K / Q5_K (activations Q8_K: a float d_a per 256, bsums per 16), per row and super-block:
 * exact integers S = sum_j sc_j * (sum u * a over sub-block j) and M = sum_j mn_j *
 * (bsums[2j] + bsums[2j + 1]), then acc = fma((float)S, d * d_a, acc) and acc =
 * fma(-(float)M, dmin * d_a, acc), super-blocks in order from acc = 0 (vec_dot's formula,
 * d * S - dmin * M, with its products fused). Q6_K: S = sum_j sc_j * (sum q * a over
 * sub-block j of 16), then acc = fma((float)S, d * d_a, acc); Q3_K the same. panel_gemm_ref is the
 * scalar twin (same bits). It is not vec_dot's order: a weight with a panel always goes through the
 * panel kernels.
 *
 * Ownership: panel_pack returns memory the caller owns and frees with panel_free.
 * Threads: pure functions; panel_pack and panel_free on the owning thread.
 */
#ifndef GEMMAD_PANEL_H
#define GEMMAD_PANEL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/kernels/kern.h"

#define PANEL_ROWS 16
#define PANEL_REC_Q8_0 1088 /* bytes per record (block pair of 16 rows), see the layout */
#define PANEL_REC_Q5_0 704
#define PANEL_REC_Q4_0 576
#define PANEL_REC_IQ4_NL 576 /* Q4_0's layout */
#define PANEL_REC_Q4_1 640
#define PANEL_REC_Q5_1 768
#define PANEL_REC_Q4_K 2368 /* one super-block of 16 rows */
#define PANEL_REC_Q5_K 2880
#define PANEL_REC_Q6_K 3392
#define PANEL_REC_Q3_K 1856
#define PANEL_NB_MAX 512 /* blocks per row a panel kernel prepares on its stack (16384 in) */

/* Where the layout above puts a type's parts, for the kernels (inline: no call into panel.c).
 * Q4_1 / Q5_1 carry a min per row and block (their activations are Q8_1: d, s, qs); Q5_0 /
 * Q5_1 a fifth bit; block h's nibbles start at rec + panel_nib_at + h * 256 and its high bits
 * at rec + panel_hbits_at + h * 64. */
static inline int panel_has_min(uint32_t t) {
    return t == QT_Q4_1 || t == QT_Q5_1;
}
static inline int panel_has_hbits(uint32_t t) {
    return t == QT_Q5_0 || t == QT_Q5_1;
}
static inline size_t panel_nib_at(uint32_t t) {
    return t == QT_Q5_0 ? 192 : t == QT_Q4_1 ? 128 : t == QT_Q5_1 ? 256 : 64;
}
static inline size_t panel_hbits_at(uint32_t t) {
    return t == QT_Q5_1 ? 128 : 64;
}
/* Bytes of one activation block of the type's kernels (Q8_0, or Q8_1 for the types with a
 * min) and where its 32 quants start. */
static inline size_t panel_act_bytes(uint32_t t) {
    return panel_has_min(t) ? sizeof(struct block_q8_1) : sizeof(struct block_q8_0);
}
static inline size_t panel_act_qoff(uint32_t t) {
    return panel_has_min(t) ? 4 : 2;
}
/* Types whose records are 256-element super-blocks (Q8_K activations), not block pairs. */
static inline int panel_is_k(uint32_t t) {
    return t == QT_Q4_K || t == QT_Q5_K || t == QT_Q6_K || t == QT_Q3_K;
}
/* K-quants with 16-element sub-blocks and signed scales, no min (Q6_K, Q3_K), and the
 * offset their unsigned weights carry (u = q + off). */
static inline int panel_k16(uint32_t t) {
    return t == QT_Q6_K || t == QT_Q3_K;
}
static inline int panel_k16_off(uint32_t t) {
    return t == QT_Q6_K ? 32 : 4;
}
/* Records per panel of a type for rows of n elements. */
static inline int64_t panel_recs(uint32_t t, int64_t n) {
    return panel_is_k(t) ? n / 256 : (n / 32 + 1) / 2;
}
/* Bytes of one record (a block pair of 16 rows) of a panel of this type, 0 if none. */
static inline size_t panel_rec_bytes(uint32_t type) {
    return type == QT_Q8_0     ? PANEL_REC_Q8_0
           : type == QT_Q5_0   ? PANEL_REC_Q5_0
           : type == QT_Q4_0   ? PANEL_REC_Q4_0
           : type == QT_IQ4_NL ? PANEL_REC_IQ4_NL
           : type == QT_Q4_1   ? PANEL_REC_Q4_1
           : type == QT_Q5_1   ? PANEL_REC_Q5_1
           : type == QT_Q4_K   ? PANEL_REC_Q4_K
           : type == QT_Q5_K   ? PANEL_REC_Q5_K
           : type == QT_Q6_K   ? PANEL_REC_Q6_K
           : type == QT_Q3_K   ? PANEL_REC_Q3_K
                               : 0;
}

/* 1 when the active ISA has a panel kernel for w (type, n_in within PANEL_NB_MAX). */
int panel_supported(const struct kern_weight *w);
/* Bytes of w's panel copy. */
size_t panel_bytes(const struct kern_weight *w);
/* Repacks w (which must be panel_supported's type) into fresh anonymous memory, on the
 * pool's threads when pool is not NULL:
 * 0 and *out, *bytes on success, -1 when the memory cannot be had (w then runs unpacked). */
int panel_pack(const struct kern_weight *w, struct pool *pool, void **out, size_t *bytes);
void panel_free(void *p, size_t bytes);

/* Element k of row i of block b (the integer of the weight: signed q, or Q4_1 / Q5_1's and
 * Q4_K's / Q5_K's unsigned u), that block's f16 scale and (Q4_1 / Q5_1, else 0) f16 min, read
 * from the panel layout above (tests and the scalar twin). K-quants: b counts 32-element
 * blocks; panel_d / panel_m give the super-block's d / dmin (Q6_K, Q3_K: 0); their q is
 * signed.
 * panel_sub gives Q4_K's / Q5_K's 6-bit scale and min of 32-element sub-block b, Q6_K's and
 * Q3_K's signed scale of 16-element sub-block b (min 0); the others: 0. */
int panel_q(uint32_t type, const void *panels, int64_t n, int64_t r, int64_t b, int k);
uint16_t panel_d(uint32_t type, const void *panels, int64_t n, int64_t r, int64_t b);
uint16_t panel_m(uint32_t type, const void *panels, int64_t n, int64_t r, int64_t b);
void panel_sub(uint32_t type, const void *panels, int64_t n, int64_t r, int64_t b, int *sc,
               int *mn);

/* Row r of a packed weight w (w->panel set) dequantized into dst[n_in]: the embedding
 * lookup of a tied LM head, the same values kern_get_row gives from the file's row. */
void panel_get_row(const struct kern_weight *w, int64_t r, float *dst);

/* Scalar twin of the panel kernels: y[c * ldy + r] for r in [r0, r1), c < na, from the
 * activation rows act + c * as (Q8_0; Q8_1 for Q4_1 / Q5_1; Q8_K for the K-quants). Same bits as
 * the SIMD kernel. */
void panel_gemm_ref(uint32_t type, int64_t n, const void *panels, int64_t r0, int64_t r1,
                    const void *act, size_t as, int na, float *y, int ldy);

#endif
