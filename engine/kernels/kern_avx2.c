/*
 * kern_avx2 — AVX2 + FMA + F16C kernels: activation quantization (Q8_0, Q8_K, F16), dot
 * products and gemm tiles for Q4_0, Q5_0, Q8_0, IQ4_NL, Q4_K, Q5_K, Q6_K, F16 and BF16
 * weights (Q4_1, Q5_1, Q2_K and Q3_K: kern_lowbit_avx2.c, registered from here).
 *
 * The kernels are the inline tiles of kern_x86.h instantiated for fixed shapes; vec_dot is
 * the 1x1 tile, so gemm and vec_dot agree bit for bit (see kern_impl.h). Registered by
 * kern_register_avx2() only when the CPU has AVX2, FMA and F16C.
 */
#include "engine/kernels/kern_impl.h"
#include "engine/kernels/kern_x86.h"

/* Tile shapes (rows for one activation; rows x activations otherwise), by measurement on
 * Zen (tests/bench/bench_kern.c): with one activation row a matmul is a stream from DRAM and
 * one row at a time (sequential addresses, what the hardware prefetcher follows best) beats
 * interleaving several rows by up to 2x on the LM head; with more rows, 2 weight rows x 4
 * activations keeps 8 accumulators in registers and unpacks each weight block once per 4.
 * The batched Q4_0/Q5_0/Q8_0 tiles read prepared blocks, 4 rows x 2 activations (measured
 * on a Xeon with --isa avx2: 1.3x over the 2 x 4 register tiles for Q5_0 at M = 64..512). */
#ifndef KA_Q8F_BATCH
#define KA_Q8F_BATCH 4, 2
#endif
#ifndef KA_KQ_SHAPE
#define KA_KQ_SHAPE 1, 1, 4
#endif
#define KA_HALF_SHAPE 2, 2, 2

#define KA_CHECK(TR, TC)                                                                           \
    _Static_assert((TR) <= KX_MAXR && (TC) <= KX_MAXC && KX_BR % (TR) == 0 && KX_BC % (TC) == 0, \
                   "KA_Q8F_BATCH: tile too large or not dividing the prepared block")
#define KA_CHECK_S(...) KA_CHECK(__VA_ARGS__)
KA_CHECK_S(KA_Q8F_BATCH);

/* Q4_0/Q5_0/Q8_0: vec_dot and one activation through kx_tile_q8f (rows one at a time),
 * more through kx_gemm_q8f_batch; both do the same per-block steps (same bits). */
#define KA_DEFINE_Q8F(name, kind)                                                                  \
    KX_DEFINE(ka1, name, kx_tile_q8f, kind, 1, 1, 1)                                               \
    static float ka_dot_##name(int64_t n, const void *w, const void *a) {                          \
        return ka1_dot_##name(n, w, a);                                                            \
    }                                                                                              \
    static void ka_gemm_##name(int64_t n, const void *w, size_t ws, int nw, const void *a,         \
                               size_t as, int na, float *y, int ldy) {                             \
        if (na == 1)                                                                               \
            ka1_gemm_##name(n, w, ws, nw, a, as, na, y, ldy);                                      \
        else                                                                                       \
            KA_BATCH(kind, KA_Q8F_BATCH, n, w, ws, nw, a, as, na, y, ldy);                         \
    }
#define KA_BATCH(kind, ...) kx_gemm_q8f_batch(kind, __VA_ARGS__)
KA_DEFINE_Q8F(q4_0, KX_Q4_0)
KA_DEFINE_Q8F(q5_0, KX_Q5_0)
KA_DEFINE_Q8F(q8_0, KX_Q8_0)
KA_DEFINE_Q8F(iq4_nl, KX_IQ4_NL)
KX_DEFINE_S(ka, q4_K, kx_tile_kq, KX_Q4_K, KA_KQ_SHAPE)
KX_DEFINE_S(ka, q5_K, kx_tile_kq, KX_Q5_K, KA_KQ_SHAPE)
KX_DEFINE_S(ka, q6_K, kx_tile_kq, KX_Q6_K, KA_KQ_SHAPE)
KX_DEFINE_S(ka, f16, kx_tile_half, 0, KA_HALF_SHAPE)
KX_DEFINE_S(ka, bf16, kx_tile_half, 1, KA_HALF_SHAPE)
/* On AMD, one activation takes one row at a time: Zen's prefetcher streams one row after
 * another, not two side by side (kern_stream_one_row; on a 2-core EPYC, Zen 4, under
 * --isa avx2, bench_kern --threads 2 --m 1 lm_head_f16 / lm_head_bf16: two rows 17.7-19.4 /
 * 18.6-26.3 ms, one row 10.2-10.6 / 10.6-12.3 ms). Same bits. */
KX_DEFINE_GEMM(ka_gemm1r_f16, kx_tile_half, 0, 1, 2, 2)
KX_DEFINE_GEMM(ka_gemm1r_bf16, kx_tile_half, 1, 1, 2, 2)

static void ka_quant_q8_0(const float *x, void *dst, int64_t n) {
    kx_quant_q8_0(x, dst, n);
}
static void ka_quant_q8_K(const float *x, void *dst, int64_t n) {
    kx_quant_q8_K(x, dst, n);
}
static void ka_quant_f16(const float *x, void *dst, int64_t n) {
    kx_quant_f16(x, dst, n);
}

static void ka_set(struct kern_ops *ops, uint32_t t, quant_vec_dot_fn dot, kern_gemm_fn gemm,
                   kern_quant_act_fn qa) {
    ops->t[t].vec_dot = dot;
    ops->t[t].gemm = gemm;
    if (qa) ops->t[t].quant_act = qa;
}

void kern_register_avx2(struct kern_ops *ops) {
    ka_set(ops, QT_Q4_0, ka_dot_q4_0, ka_gemm_q4_0, ka_quant_q8_0);
    ka_set(ops, QT_Q5_0, ka_dot_q5_0, ka_gemm_q5_0, ka_quant_q8_0);
    ka_set(ops, QT_Q8_0, ka_dot_q8_0, ka_gemm_q8_0, ka_quant_q8_0);
    ka_set(ops, QT_IQ4_NL, ka_dot_iq4_nl, ka_gemm_iq4_nl, ka_quant_q8_0);
    ka_set(ops, QT_Q4_K, ka_dot_q4_K, ka_gemm_q4_K, ka_quant_q8_K);
    ka_set(ops, QT_Q5_K, ka_dot_q5_K, ka_gemm_q5_K, ka_quant_q8_K);
    ka_set(ops, QT_Q6_K, ka_dot_q6_K, ka_gemm_q6_K, ka_quant_q8_K);
    const int one = kern_stream_one_row();
    ka_set(ops, QT_F16, ka_dot_f16, one ? ka_gemm1r_f16 : ka_gemm_f16, ka_quant_f16);
    ka_set(ops, QT_BF16, ka_dot_bf16, one ? ka_gemm1r_bf16 : ka_gemm_bf16, NULL);
    /* whole tasks: one activation streams its rows (two at a time, one on AMD), prefetching
     * in the row (kern.c's per-call step would hand over one 1,280-byte row per call) */
    ops->t[QT_F16].gemm_task = ops->t[QT_BF16].gemm_task = 1;
    kern_register_lowbit_avx2(ops);
}
