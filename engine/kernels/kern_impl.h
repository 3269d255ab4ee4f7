/*
 * kern_impl — private interface between kern.c (dispatch, matmul) and the per-instruction-set
 * kernel files kern_avx2.c / kern_avx512.c. Not for use outside engine/kernels/.
 *
 * kern_init() fills one struct kern_ops with the scalar references from quant.c, then lets
 * the instruction-set files override entries: kern_register_avx2(ops) when the active ISA is
 * AVX2 or AVX-512, then kern_register_avx512(ops) when it is AVX-512 (so an AVX-512 file only
 * sets what it does better and inherits the rest from AVX2). A register function only writes
 * entries of `ops`; it must not allocate, and it runs once, on the thread calling kern_init.
 *
 * Data layout contract for every entry of type w (a weight type, enum quant_type):
 *   - a weight row of n elements is quant_row_size(w, n) bytes in ggml's block layout;
 *   - an activation row is quant_row_size(act, n) bytes with act = quant_info(w)->vec_dot_type,
 *     in ggml's block layout for act (Q8_0, Q8_1, Q8_K, F16, BF16 or F32), as written by
 *     quant_act. vec_dot and gemm must accept any row produced by quant_act_row_ref too.
 *   - n is a multiple of the weight type's block size (and of QK_K for the K-quants).
 *
 * Determinism contract (kern.h promises it to the forward pass):
 *   - vec_dot(n, w, a) is a pure function of its inputs: same bytes in, same bits out.
 *   - gemm, when set, writes for each pair exactly the bits vec_dot would return for it,
 *     whatever n_w_rows and n_acts are; it exists only to load each weight block once for
 *     several activation rows. kern_matmul calls it with tiles of up to KERN_GEMM_MAX_ROWS
 *     weight rows and KERN_GEMM_MAX_ACTS activation rows, and also with smaller edge tiles;
 *     a gemm with gemm_task set gets any number of weight rows instead.
 *   - Accuracy: against quant_vec_dot_ref, |fast - ref| / sum_i |w_i * a_i| < 1e-4 (the only
 *     slack is float summation order and FMA; integer block sums are exact).
 */
#ifndef GEMMAD_KERN_IMPL_H
#define GEMMAD_KERN_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/kernels/quant.h"

/* f32 row of n elements -> one activation row in the weight type's vec_dot_type. */
typedef void (*kern_quant_act_fn)(const float *x, void *dst, int64_t n);

/* y[j * ldy + i] = vec_dot(n, w_rows + i * w_stride, acts + j * a_stride)
 * for i < n_w_rows, j < n_acts. Strides are in bytes; ldy is in floats. */
typedef void (*kern_gemm_fn)(int64_t n, const void *w_rows, size_t w_stride, int n_w_rows,
                             const void *acts, size_t a_stride, int n_acts, float *y, int ldy);

/* Largest tile kern_matmul hands to gemm (a gemm may rely on these bounds for its stack).
 * 64 activations: the AVX-512 gemms unpack each weight block once per call, so a long
 * batch pays that once per 64 rows (measured with bench_kern at M = 512: Q5_0 1.3x faster
 * than with 8); the AVX2 sweep still walks the activations 8 at a time (KX_GC). */
#define KERN_GEMM_MAX_ROWS 16
#define KERN_GEMM_MAX_ACTS 64

/* Rows per block of kern_bf16p's packed BF16 activations (layout: kern_bf16p.c): one 64-byte
 * line holds one pair of every row of a block, so the AVX-512 kernels' 16 lanes read a pair
 * of 16 rows per load. kern.c's pack tasks take a whole block each. */
#define KERN_BF16P_ROWS 16

/* Rows in block b of a packed batch of M rows (the last block may be short). */
static inline int kern_bf16p_block_rows(int M, int b) {
    return M - KERN_BF16P_ROWS * b < KERN_BF16P_ROWS ? M - KERN_BF16P_ROWS * b : KERN_BF16P_ROWS;
}

/* Rows [r0, r1) of a weight repacked into panels (panel.h) against n_acts activation rows:
 * y[j * ldy + r] for r0 <= r < r1 (absolute row numbers), j < n_acts. */
typedef void (*kern_panel_fn)(int64_t n, const void *panels, int64_t r0, int64_t r1,
                              const void *acts, size_t a_stride, int n_acts, float *y, int ldy);

/* Weight row of n elements -> f32, bit-identical to quant_dequant_row_ref. */
typedef void (*kern_dequant_fn)(const void *src, float *dst, int64_t n);

/* Packed BF16 batches (kern_bf16p.c: the layout, the sums, the scalar references).
 * pack_act writes activation row m of M (n elements) into the packed buffer `act` (M * n * 2
 * bytes); gemm_packed computes y[m * ldy + i] for m < M, i < n_w_rows against weight rows
 * w_rows + i * w_stride (BF16, n even). Not the bits of gemm / vec_dot: kern_matmul uses them
 * only for a weight with the blas flag and at least KERN_BLAS_MIN_M rows. */
typedef void (*kern_pack_act_fn)(const float *x, void *act, int m, int M, int64_t n);
typedef void (*kern_gemm_packed_fn)(int64_t n, const void *w_rows, size_t w_stride,
                                    int64_t n_w_rows, const void *act, int M, float *y, int ldy);
void kern_bf16p_pack_ref(const float *x, void *act, int m, int M, int64_t n);
void kern_bf16p_gemm_ref(int64_t n, const void *w_rows, size_t w_stride, int64_t n_w_rows,
                         const void *act, int M, float *y, int ldy);

/* The kernels for one weight type. vec_dot, quant_act and dequant are set for every
 * supported type (kern_init starts from the scalar references); gemm is optional. */
struct kern_type_ops {
    quant_vec_dot_fn vec_dot;    /* one weight row . one activation row */
    kern_quant_act_fn quant_act; /* f32 -> vec_dot_type, rounding as vec_dot expects */
    kern_gemm_fn gemm;           /* optional tile of dots, bit-identical to vec_dot */
    kern_dequant_fn dequant;     /* row -> f32 (kern_get_row) */
    kern_panel_fn panel;         /* optional: the kernel over panel_pack'ed weights */
    int gemm_task;               /* 1: gemm takes any number of weight rows, and with one
                                  * activation prefetches its weight rows itself;
                                  * kern_matmul then hands it whole tasks (else tiles of
                                  * KERN_GEMM_MAX_ROWS, or a few rows with one activation) */
    kern_pack_act_fn pack_act;   /* optional, with gemm_packed (BF16 only) */
    kern_gemm_packed_fn gemm_packed;
};

/* kern_blas.c: rows [r0, r1) of w (F32 / F16 / BF16, each row widened to f32 by `widen`)
 * against the M f32 activation rows X ([M][n_in]) into Y[m * ldy + r], by BLAS sgemm.
 * Returns 0, or -1 when built without BLAS or out of memory (nothing written: the caller
 * runs its own kernels). Any thread; it keeps a buffer per calling thread. */
struct kern_weight;
int kern_blas_rows(const struct kern_weight *w, void (*widen)(const void *, float *, int64_t),
                   const float *X, int M, int64_t r0, int64_t r1, float *Y, int ldy);

/* The whole dispatch table, indexed by weight type id. */
struct kern_ops {
    struct kern_type_ops t[QT_COUNT];
};

/* Implemented by kern_avx2.c (compiled with -mavx2 -mfma -mf16c) and kern_avx512.c
 * (-mavx512f/bw/vl/dq/vnni). Called only when the CPU supports that ISA. */
void kern_register_avx2(struct kern_ops *ops);
void kern_register_avx512(struct kern_ops *ops);
/* kern_lowbit_avx2.c: Q4_1, Q5_1, Q2_K, Q3_K (and the Q8_1 activation quantizer); called
 * by kern_register_avx2. */
void kern_register_lowbit_avx2(struct kern_ops *ops);
/* The same with the Q4_0/Q5_0/Q8_0 streaming kernels (1-16 activations) reading
 * stream_rows weight rows side by side (1, or anything else for 4), and with 1 the K-quant
 * batches blocked for Zen 4 (2 x 8 tiles over 8 super-blocks instead of 4 x 4 over 4) and
 * F16 / BF16 with one activation one row at a time (else two);
 * kern_register_avx512 passes kern_avx512_stream_rows(): 1 on AMD, 4 elsewhere. Results
 * are the same bits either way. */
void kern_register_avx512_rows(struct kern_ops *ops, int stream_rows);
/* kern_panel_avx2.c: the Q8_0, Q5_0, Q4_0, IQ4_NL, Q4_1 and Q5_1 panel kernels (panel.h) for
 * AVX2 without AVX-512, installed after kern_register_avx2 (kern_register_avx512's panel
 * kernels replace them). */
void panel_register_avx2(struct kern_ops *ops);
/* kern_panel_avx512.c: the panel kernels (panel.h), installed after kern_register_avx512. */
void panel_register_avx512(struct kern_ops *ops);
/* kern_amx.c: the AMX panel kernels for 16+ activations, installed after
 * panel_register_avx512 (whose kernels it keeps for the rest), when the ISA is KERN_ISA_AMX. */
void panel_register_amx(struct kern_ops *ops);
/* The active ISA's panel kernel for a weight type, or NULL (kern.c). */
kern_panel_fn kern_panel_kernel(uint32_t type);
int kern_avx512_stream_rows(void);
/* 1 when the CPU's prefetcher wants one weight row streamed at a time rather than several
 * side by side (AMD: it follows one sequential stream); kern.c, for every ISA's registration. */
int kern_stream_one_row(void);
/* 1 when the AVX-512 panel kernels' passes of few activations prefetch 16 KiB ahead into L2
 * rather than 4 KiB ahead into L1 (AMD); kern.c, for panel_register_avx512. */
int kern_prefetch_far(void);
/* kern_bf16p_avx512.c (-mavx512bf16): the packed BF16 batch kernels, installed after
 * kern_register_avx512 when kern_bf16p_wanted() (kern.c). */
void kern_register_bf16p_avx512(struct kern_ops *ops);
int kern_bf16p_wanted(void);
/* kern_dequant_avx2.c (owned with kern.c): SIMD dequant entries, called before
 * kern_register_avx2 so that file may still override them. */
void kern_register_dequant_avx2(struct kern_ops *ops);

#endif
