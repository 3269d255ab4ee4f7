/*
 * attn — the tile kernel of CPU attention: a tile of query rows of one sequence times the
 * g query heads that share one KV head, in two passes over the key blocks.
 *
 * The softmax is the one llama.cpp's CPU path computes without flash attention: every
 * score of a query vector first, then p_j = exp(s_j - max) * (1 / sum) with the sum in
 * double, and, for an F16 cache, p_j rounded to F16 before P.V (ggml converts the
 * probabilities to the V cache's type for that matmul). An online softmax gives other
 * roundings, and on this model such differences grow through the layers. So a tile keeps
 * the scores of its query vectors: p[i * ld_p + c] belongs to key position p0 + c.
 *
 * The caller (engine/cpu_attn.c) owns the KV cache layout. Pass 1: for every key block
 * it converts the block's K rows of the tile's visible range to f32 once (once per tile,
 * not per query row) and calls `scores`. Then attn_tile_softmax. Pass 2: the same with the
 * V rows and `pv`. Key blocks start at ABSOLUTE positions that are multiples of
 * ATTN_BLOCK, and everything a row computes depends only on its own query, its own visible
 * range [lo, hi] and the key/value values in that range — never on the other rows of the
 * tile. So a row's output is bit-identical whatever tile, batch or prompt chunk it is
 * computed in (batch invariance).
 *
 * Per query vector with visible keys [lo, hi]:
 *   s_j = q . k_j  (softcap: cap * tanh(s_j / cap));  m = max_j s_j;  e_j = exp(s_j - m);
 *   S = sum_j e_j in double (in a fixed order that starts at lo);  p_j = e_j * (float)(1/S),
 *   rounded to F16 when round_p;  out = sum_j p_j v_j  (j ascending, from 0).
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
    int round_p;         /* 1: probabilities rounded to F16 before P.V (F16 cache) */
    const int32_t *lo;   /* [n_rows] first visible key position of each row */
    const int32_t *hi;   /* [n_rows] last visible key position (inclusive), hi >= lo */
    const float *q;      /* [n_rows * g][hd] queries, scaled (and F16-rounded) */
    float *acc;          /* [n_rows * g][hdv] sum of p * v: the output */
    float *p;            /* [n_rows * g][ld_p] scores, then probabilities */
    int p0;              /* key position of column 0: a multiple of ATTN_BLOCK, <= every lo */
    int ld_p;            /* columns per vector: a multiple of ATTN_BLOCK past every hi */
};

/* One key block of the tile: keys b0 .. b0 + ATTN_BLOCK - 1. Row kv[j] holds key position
 * b0 + j (K rows [hd] for `scores`, V rows [hdv] for `pv`) for every j in the tile's union
 * range [min lo, max hi] clipped to the block. For `scores`, K rows outside that range but
 * inside the same aligned ATTN_KGROUP group may be read (their scores land in columns
 * nobody reads) and must hold finite values; the caller zeroes them. Other rows are never
 * read. */
struct attn_block {
    int b0;              /* absolute position of row 0, a multiple of ATTN_BLOCK */
    const float *kv;     /* [ATTN_BLOCK][hd] keys or [ATTN_BLOCK][hdv] values */
};

typedef void (*attn_block_fn)(const struct attn_tile *t, const struct attn_block *b);
/* p[0..n): scores in, probabilities out (max, exp, double sum, scale, optional F16). */
typedef void (*attn_softmax_fn)(float *p, int n, int round_f16);
/* F16 -> f32 of n values, exact (every F16 value is an f32 value). */
typedef void (*attn_cvt_f16_fn)(const uint16_t *src, float *dst, int n);

struct attn_ops {
    attn_block_fn scores;    /* pass 1, one key block: the scores of every vector seeing it */
    attn_softmax_fn softmax; /* one vector's visible range */
    attn_block_fn pv;        /* pass 2, one value block: acc += p v over the visible keys */
    attn_cvt_f16_fn cvt_f16; /* cache rows to f32 */
    const char *name;        /* "scalar", "avx2", "avx512" */
};

/* Block-relative visible range [*lo, *hi] of row r in block b; 0 when it sees none of it. */
static inline int attn_block_range(const struct attn_tile *t, const struct attn_block *b, int r,
                                   int *lo, int *hi) {
    const int l = t->lo[r] - b->b0, h = t->hi[r] - b->b0;
    *lo = l < 0 ? 0 : l;
    *hi = h > ATTN_BLOCK - 1 ? ATTN_BLOCK - 1 : h;
    return *lo <= *hi;
}

/* The same for query vectors i and i + 1 (in[1] = 0 when i + 1 is past the tile). */
static inline void attn_pair_ranges(const struct attn_tile *t, const struct attn_block *b, int i,
                                    int lo[2], int hi[2], int in[2]) {
    const int nq = t->n_rows * t->g;
    in[0] = attn_block_range(t, b, i / t->g, &lo[0], &hi[0]);
    lo[1] = 0;
    hi[1] = -1;
    in[1] = i + 1 < nq && attn_block_range(t, b, (i + 1) / t->g, &lo[1], &hi[1]);
}

/* acc_x += sum_{j=lo..hi} p_x[j] v_j (block-relative j, keys ascending) for x = 0 and, when
 * acc1 is not NULL, x = 1 with the same [lo, hi]. */
typedef void (*attn_pv2_fn)(float *acc0, float *acc1, const float *p0, const float *p1,
                            const float *v, int hdv, int lo, int hi);

/* The P.V pass of one block over query vectors in pairs: one fn call for both when their
 * ranges are equal (so a kernel can share the V loads), else one each. */
void attn_pv_pairs(const struct attn_tile *t, const struct attn_block *b, attn_pv2_fn fn);

/* The kernels for `isa` (the best this build and CPU have at or below it). */
const struct attn_ops *attn_ops_for(enum kern_isa isa);

/* acc = 0 for every query vector of the tile. */
void attn_tile_begin(const struct attn_tile *t);

/* Between the passes: softcap, then ops->softmax over each vector's visible range. */
void attn_tile_softmax(const struct attn_ops *ops, const struct attn_tile *t);

/* out[r * ld_row + h * hdv + d] = acc for row r, head h (ld_row in floats). */
void attn_tile_end(const struct attn_tile *t, float *out, size_t ld_row);

/* The per-ISA kernels (attn_ref.c, attn_avx2.c, attn_avx512.c). */
void attn_scores_ref(const struct attn_tile *t, const struct attn_block *b);
void attn_softmax_ref(float *p, int n, int round_f16);
void attn_pv_ref(const struct attn_tile *t, const struct attn_block *b);
void attn_cvt_f16_ref(const uint16_t *src, float *dst, int n);
void attn_scores_avx2(const struct attn_tile *t, const struct attn_block *b);
void attn_softmax_avx2(float *p, int n, int round_f16);
void attn_pv_avx2(const struct attn_tile *t, const struct attn_block *b);
void attn_cvt_f16_avx2(const uint16_t *src, float *dst, int n);
void attn_scores_avx512(const struct attn_tile *t, const struct attn_block *b);
void attn_softmax_avx512(float *p, int n, int round_f16);
void attn_pv_avx512(const struct attn_tile *t, const struct attn_block *b);

#endif
