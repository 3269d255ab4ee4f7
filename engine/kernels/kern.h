/*
 * kern — CPU kernels the forward pass calls, with the instruction set chosen once at
 * start-up (kern_init) from the CPU's features: scalar reference, AVX2+FMA+F16C, AVX-512,
 * AVX-512 with AMX tiles.
 *
 * Weights are never dequantized as a whole: kern_matmul reads the packed rows in the mmap
 * directly, or, for a weight with a panel (panel.h), the same quantized bytes repacked once
 * at start-up. Activations are quantized to the weight type's vec_dot_type first
 * (as llama.cpp does), into caller-provided scratch, so nothing here allocates.
 *
 * Deterministic by construction: the result for one activation row never depends on how
 * many rows are in the batch or on the number of threads (fixed per-row reduction order);
 * the one exception is a weight whose blas flag its owner set (kern_weight.blas).
 *
 * Threads: kern_init once from the main thread before anything else; the rest is pure and
 * may run on any thread; kern_matmul itself fans out over the given pool.
 */
#ifndef GEMMAD_KERN_H
#define GEMMAD_KERN_H

#include <stddef.h>
#include <stdint.h>

#include "engine/kernels/pool.h"
#include "engine/kernels/quant.h"

/* KERN_ISA_AMX is AVX-512 plus the AMX-INT8 tile kernels for batches of quantized panel
 * rows (the same bits as AVX-512: kern_amx.c); it needs the CPU feature and the kernel's
 * permission for the tile state (arch_prctl ARCH_REQ_XCOMP_PERM), asked for once. */
enum kern_isa {
    KERN_ISA_AUTO = -1,
    KERN_ISA_REF = 0,
    KERN_ISA_AVX2 = 1,
    KERN_ISA_AVX512 = 2,
    KERN_ISA_AMX = 3
};

/* Picks the best ISA the CPU supports, or `force` when it is supported (else -1). */
int kern_init(enum kern_isa force);
enum kern_isa kern_active_isa(void);
const char *kern_isa_name(enum kern_isa isa);
int kern_isa_supported(enum kern_isa isa); /* 1 if this CPU (and build) can run it */

/* A 2-D weight matrix in its packed on-disk format: n_out rows of n_in elements. */
struct kern_weight {
    uint32_t type;    /* enum quant_type */
    int64_t n_in;     /* ne0: elements per row (the dot-product length) */
    int64_t n_out;    /* ne1: rows */
    size_t row_bytes; /* quant_row_size(type, n_in) */
    const void *data; /* n_out * row_bytes bytes, read-only (in the mmap) */
    const void *panel; /* NULL, or the same rows repacked by panel_pack (panel.h): then every
                        * matmul of this weight runs the panel kernel (its own fixed order) */
    int blas;          /* 1: an F32 / F16 / BF16 weight may take BLAS sgemm (BF16: the
                        * packed BF16 kernels where kern_bf16_packed) for batches of
                        * KERN_BLAS_MIN_M(_F16) rows and more (faster, NOT batch-invariant:
                        * the CPU backend sets it unless deterministic); 0: never */
};

/* Fewest activation rows for which a weight with the blas flag goes through sgemm; below,
 * the half-precision tiles are as fast or faster (tests/bench/bench_kern.c --blas, 640 x 2048,
 * one thread of a 2-core AMD EPYC with AVX2: F16 ties at 64 rows and wins from 128, BF16
 * wins from 16; not measured on an AVX-512 host, whose F16 tiles are faster). */
#define KERN_BLAS_MIN_M 16      /* BF16 and F32 */
#define KERN_BLAS_MIN_M_F16 128
/* 1 when this build has a BLAS (OpenBLAS, found by pkg-config at build time). */
int kern_blas_available(void);
/* 1 when BF16 weights with the blas flag take the packed BF16 kernels for those batches
 * instead of sgemm (kern_bf16p.c: activations rounded to BF16 and multiplied with
 * AVX512_BF16's vdpbf16ps, as llama.cpp does; registered on AMD CPUs with AVX512_BF16, where
 * they were measured twice as fast), with or without a BLAS in the build. */
int kern_bf16_packed(void);

/* Scratch bytes kern_matmul needs for M activation rows of W->n_in elements. */
size_t kern_act_bytes(const struct kern_weight *w, int M);

/* Y[m * ldy + o] = sum_i W[o][i] * X[m * n_in + i] for m < M, o < n_out.
 * X: [M][n_in] f32; act_scratch: >= kern_act_bytes(w, M) bytes, 64-byte aligned. */
void kern_matmul(struct pool *pool, const struct kern_weight *w, const float *X, int M, float *Y,
                 int ldy, void *act_scratch);

/* Several weights applied to the same input X in ONE pool run (one fork/join instead of
 * one per weight): Y_i[m * ldy_i + o] = W_i[o] . X[m] for every output i. Each distinct
 * activation type among the weights is quantized once. Every output element is computed
 * exactly as kern_matmul computes it, so the bits are the same as n separate calls.
 *
 * With epi == NULL the outputs' rows are simply concatenated into one range of work. With
 * epi set, all weights must have the same n_out: a task computes rows [o0, o1) of every
 * output (for all M activation rows), then calls epi(epi_arg, o0, o1) on the same thread,
 * which may combine those rows elementwise (e.g. GeGLU of gate and up) while they are hot.
 * The ranges the epilogue sees depend on the split; it must be elementwise in o. */
struct kern_mm_out {
    const struct kern_weight *w; /* n_in must be the same for every output of a group */
    float *Y;                    /* Y[m * ldy + o] */
    int ldy;                     /* floats */
};
typedef void (*kern_epi_fn)(void *arg, int64_t o0, int64_t o1);

#define KERN_GROUP_MAX 4 /* outputs per group */

/* Scratch bytes kern_matmul_group needs for M rows (the sum over the distinct act types). */
size_t kern_act_bytes_group(const struct kern_mm_out *outs, int n_outs, int M);
void kern_matmul_group(struct pool *pool, const struct kern_mm_out *outs, int n_outs,
                       const float *X, int M, void *act_scratch, kern_epi_fn epi, void *epi_arg);

/* Dequantize row r of w into dst[n_in] (embedding lookup). */
void kern_get_row(const struct kern_weight *w, int64_t r, float *dst);

/* The dot-product kernel kern_matmul uses for this weight type under the active ISA. */
quant_vec_dot_fn kern_vec_dot(uint32_t w_type);
/* Activation quantizer matching kern_vec_dot (SIMD rounding may differ from _ref). */
void kern_quant_act(uint32_t w_type, const float *x, void *dst, int64_t n);

#endif
