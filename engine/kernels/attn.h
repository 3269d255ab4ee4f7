/*
 * attn — the tile kernel of CPU attention: a tile of query rows of one sequence times the
 * g query heads that share one KV head, walked over key blocks with an online softmax.
 *
 * The caller (engine/forward_attn.c) owns the KV cache layout: for every key block it
 * converts the block's K and V rows of the tile's visible range to f32 once (so a block is
 * converted once per tile, not once per query row) and hands them to `block`. Key blocks
 * start at ABSOLUTE positions that are multiples of ATTN_BLOCK, and everything a row
 * computes depends only on its own query, its own visible range [lo, hi] and the key/value
 * values in that range — never on the other rows of the tile. So a row's output is bit-
 * identical whatever tile, batch or prompt chunk it is computed in (batch invariance).
 *
 * Per row and head, per key block (the range clipped to the row's [lo, hi]):
 *   s_j = q . k_j  (softcap: cap * tanh(s_j / cap));  mb = max_j s_j;  m' = max(m, mb);
 *   c = exp(m - m');  p_j = exp(s_j - m');  l = l * c + sum_j p_j;
 *   acc = acc * c + sum_j p_j v_j  (j ascending);  m = m'.
 * attn_tile_end writes acc / l.
 *
 * Kernels: attn_ref.c (scalar reference), attn_avx2.c (AVX2 + FMA + F16C), attn_avx512.c
 * (AVX-512; it reuses the AVX2 F16 conversion). The instruction
 * set follows kern_active_isa(); results differ between instruction sets within the error
 * bound tests/unit/test_attn.c states, and are deterministic for a given one.
 *
 * Threads: everything here is pure; any thread may call it on its own tile and scratch.
 */
#ifndef GEMMAD_ATTN_H
#define GEMMAD_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "engine/kernels/kern.h"

#define ATTN_BLOCK 16    /* keys per block (K and V blocks stay in L1); blocks start at multiples */
#define ATTN_KGROUP 4    /* SIMD kernels score keys in aligned groups of this many */
#define ATTN_TILE_QV 64  /* query vectors (rows * g) per tile, at least one row */

/* One tile: n_rows query rows x g heads = n_rows * g query vectors, vector i = row i / g. */
struct attn_tile {
    int n_rows;          /* query rows */
    int g;               /* query heads per row (all share the KV head) */
    int hd;              /* key / query head dim */
    int hdv;             /* value head dim */
    float softcap;       /* > 0: s = softcap * tanh(s / softcap) (Gemma 2); 0: off */
    const int32_t *lo;   /* [n_rows] first visible key position of each row */
    const int32_t *hi;   /* [n_rows] last visible key position (inclusive), hi >= lo */
    const float *q;      /* [n_rows * g][hd] queries, scaled (and F16-rounded) */
    float *acc;          /* [n_rows * g][hdv] running sum of p * v */
    float *m;            /* [n_rows * g] running max */
    float *l;            /* [n_rows * g] running denominator */
};

/* One key block of the tile: keys b0 .. b0 + ATTN_BLOCK - 1. Row k[j] / v[j] hold key
 * position b0 + j for every j in the tile's union range [min lo, max hi] clipped to the
 * block. K rows outside that range but inside the same aligned ATTN_KGROUP group may be read
 * (their scores are discarded) and must hold finite values; the caller zeroes them. Other
 * rows are never read. */
struct attn_block {
    int b0;              /* absolute position of row 0, a multiple of ATTN_BLOCK */
    const float *k;      /* [ATTN_BLOCK][hd] */
    const float *v;      /* [ATTN_BLOCK][hdv] */
    float *s;            /* scratch [4 * ATTN_BLOCK] */
};

typedef void (*attn_block_fn)(const struct attn_tile *t, const struct attn_block *b);
/* F16 -> f32 of n values, exact (every F16 value is an f32 value). */
typedef void (*attn_cvt_f16_fn)(const uint16_t *src, float *dst, int n);

struct attn_ops {
    attn_block_fn block;     /* one key block, see above */
    attn_cvt_f16_fn cvt_f16; /* cache rows to f32 */
    const char *name;        /* "scalar", "avx2", "avx512" */
};

/* The kernels for `isa` (the best this build and CPU have at or below it). */
const struct attn_ops *attn_ops_for(enum kern_isa isa);

/* m = -inf, l = 0, acc = 0 for every query vector of the tile. */
void attn_tile_begin(const struct attn_tile *t);

/* out[r * ld_row + h * hdv + d] = acc / l for row r, head h (ld_row in floats). */
void attn_tile_end(const struct attn_tile *t, float *out, size_t ld_row);

/* The per-ISA kernels (attn_ref.c, attn_avx2.c, attn_avx512.c). */
void attn_block_ref(const struct attn_tile *t, const struct attn_block *b);
void attn_cvt_f16_ref(const uint16_t *src, float *dst, int n);
void attn_block_avx2(const struct attn_tile *t, const struct attn_block *b);
void attn_cvt_f16_avx2(const uint16_t *src, float *dst, int n);
void attn_block_avx512(const struct attn_tile *t, const struct attn_block *b);

#endif
