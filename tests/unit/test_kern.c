/*
 * test_kern — the SIMD kernels (kern_avx2.c, kern_avx512.c) against the scalar references
 * of quant.c, and kern_matmul's batch invariance.
 *
 * Accuracy bound, per dot product: |simd - ref| / sum_i |w_i * a_i| < 1e-5, with w and a
 * the dequantized weight and activation values (the only slack is float summation order
 * and FMA; integer block sums are exact). Dot products are compared on the SAME quantized
 * activation bytes. Activation quantizers are compared byte for byte with the reference,
 * allowing an int8 difference of 1 (a rounding tie) in at most 1 value in 1000.
 * gemm tiles must equal vec_dot bit for bit for every tile shape.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/kern.h"
#include "engine/kernels/kern_impl.h"
#include "engine/kernels/pool.h"
#include "engine/kernels/quant.h"
#include "tests/unit/harness.h"

#define NMAX 4096 /* longest test row */
#define ERR_BOUND 1e-5

/* ---- deterministic random data --------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;

static uint32_t rnd_u32(void) {
    return (uint32_t)(t_xorshift64(&rng_state) >> 16);
}

static float rnd_f(float lo, float hi) {
    return lo + (hi - lo) * (float)(rnd_u32() & 0xFFFFFF) / 16777216.0f;
}

/* Activation-like data: mostly small, an outlier now and then, some exact ties. */
static void rnd_act(float *x, int64_t n, int kind) {
    for (int64_t i = 0; i < n; i++) {
        float v = rnd_f(-1.0f, 1.0f);
        if (rnd_u32() % 50 == 0) v *= 20.0f;
        x[i] = v;
    }
    if (kind == 1) { /* ties: amax 127 makes the Q8_0 scale exactly 1 */
        for (int64_t i = 0; i < n; i++)
            x[i] = (float)((int)(rnd_u32() % 200) - 100) + 0.5f;
        for (int64_t b = 0; b < n; b += 32)
            x[b] = 127.0f;
    }
    if (kind == 2) /* an all-zero block and a block whose extremes have both signs */
        for (int64_t i = 0; i < n && i < 512; i++)
            x[i] = i < 256 ? 0.0f : (i == 300 ? -7.0f : i == 400 ? 7.0f : 1.0f);
}

static quant_half rnd_scale(void) {
    return quant_f32_to_f16(rnd_f(0.0005f, 0.02f));
}

/* Random weight row of type t with valid (finite) scale fields. */
static void rnd_weights(uint32_t t, uint8_t *w, int64_t n) {
    size_t bytes = quant_row_size(t, n);
    for (size_t i = 0; i < bytes; i++)
        w[i] = (uint8_t)rnd_u32();
    const struct quant_info *qi = quant_info(t);
    int64_t nb = n / qi->blck;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *p = w + (size_t)b * (size_t)qi->size;
        quant_half h[2] = {rnd_scale(), rnd_scale()};
        switch (t) {
        case QT_Q4_0:
        case QT_Q5_0:
        case QT_Q8_0:
        case QT_IQ4_NL:
            memcpy(p, h, 2);
            break;
        case QT_Q4_1:
        case QT_Q5_1:
        case QT_Q4_K:
        case QT_Q5_K:
            memcpy(p, h, 4);
            break;
        case QT_Q2_K:
            memcpy(p + offsetof(struct block_q2_K, d), h, 4);
            break;
        case QT_Q3_K:
            memcpy(p + offsetof(struct block_q3_K, d), h, 2);
            break;
        case QT_Q6_K:
            memcpy(p + offsetof(struct block_q6_K, d), h, 2);
            break;
        case QT_F16: {
            quant_half v = quant_f32_to_f16(rnd_f(-2.0f, 2.0f));
            memcpy(p, &v, 2);
            break;
        }
        case QT_BF16: {
            uint16_t v = quant_f32_to_bf16(rnd_f(-2.0f, 2.0f));
            memcpy(p, &v, 2);
            break;
        }
        default:
            break;
        }
    }
}

/* Dequantized activation values of an activation row of type act. */
static void act_values(uint32_t act, const void *src, float *dst, int64_t n) {
    if (act == QT_Q8_K) {
        const struct block_q8_K *b = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = b[i / QK_K].d * (float)b[i / QK_K].qs[i % QK_K];
        return;
    }
    T_ASSERT(quant_dequant_row_ref(act, src, dst, n) == 0);
}

/* ---- the kernel tables under test ------------------------------------------------------- */

static const uint32_t k_types[] = {QT_Q4_0, QT_Q5_0, QT_Q8_0, QT_Q4_K, QT_Q5_K, QT_Q6_K,
                                   QT_F16,  QT_BF16, QT_Q4_1, QT_Q5_1, QT_IQ4_NL, QT_Q2_K,
                                   QT_Q3_K};
#define N_TYPES (sizeof(k_types) / sizeof(k_types[0]))

/* AVX-512 streaming rows for isa_ops (0: the CPU's choice, kern_avx512_stream_rows). */
static int g_stream_rows;

/* The entries the given ISA sets (AVX-512 inherits from AVX2, as in kern_init). */
static void isa_ops(enum kern_isa isa, struct kern_ops *ops) {
    memset(ops, 0, sizeof(*ops));
    kern_register_avx2(ops);
    if (isa == KERN_ISA_AVX512)
        kern_register_avx512_rows(ops, g_stream_rows ? g_stream_rows : kern_avx512_stream_rows());
}

static void need_isa(enum kern_isa isa) {
    if (!kern_isa_supported(isa))
        T_SKIP("CPU lacks %s", isa == KERN_ISA_AVX512 ? "AVX-512" : "AVX2+FMA+F16C");
}

/* SIMD quantizer vs ref, byte-exact apart from rare ties off by one. */
static void check_quant(enum kern_isa isa, uint32_t wt) {
    need_isa(isa);
    struct kern_ops ops;
    isa_ops(isa, &ops);
    const uint32_t act = quant_info(wt)->vec_dot_type;
    T_ASSERTF(ops.t[wt].quant_act != NULL, "no quant_act for %s", quant_info(wt)->name);
    static float x[NMAX];
    static uint8_t q_ref[NMAX * 2], q_simd[NMAX * 2];
    long diffs = 0, total = 0;
    for (int rep = 0; rep < 60; rep++) {
        const int64_t n = 256 * (1 + rep % 16);
        rnd_act(x, n, rep % 3);
        const size_t bytes = quant_row_size(act, n);
        T_ASSERT(quant_act_row_ref(act, x, q_ref, n) == 0);
        ops.t[wt].quant_act(x, q_simd, n);
        if (act == QT_Q8_0 || act == QT_Q8_1) {
            const size_t bsz = quant_row_size(act, 32), qo = act == QT_Q8_1 ? 4 : 2;
            for (int64_t i = 0; i < n / 32; i++) {
                const uint8_t *pa = q_ref + (size_t)i * bsz, *pb = q_simd + (size_t)i * bsz;
                quant_half da, db;
                memcpy(&da, pa, 2);
                memcpy(&db, pb, 2);
                T_ASSERTF(da == db, "block %lld: d %04x vs %04x", (long long)i, da, db);
                const int8_t *qa = (const int8_t *)(pa + qo), *qb = (const int8_t *)(pb + qo);
                for (int j = 0; j < 32; j++) {
                    int dq = qa[j] - qb[j];
                    T_ASSERTF(dq >= -1 && dq <= 1, "q[%d] %d vs %d", j, qa[j], qb[j]);
                    diffs += dq != 0;
                }
                if (act == QT_Q8_1 && memcmp(qa, qb, 32) == 0) /* same bytes: same s */
                    T_ASSERTF(memcmp(pa + 2, pb + 2, 2) == 0, "block %lld: s differs",
                              (long long)i);
            }
        } else if (act == QT_Q8_K) {
            const struct block_q8_K *a = (const void *)q_ref, *b = (const void *)q_simd;
            for (int64_t i = 0; i < n / QK_K; i++) {
                T_ASSERTF(a[i].d == b[i].d, "block %lld: d %g vs %g", (long long)i, a[i].d, b[i].d);
                for (int j = 0; j < QK_K; j++) {
                    int dq = a[i].qs[j] - b[i].qs[j];
                    T_ASSERTF(dq >= -1 && dq <= 1, "q[%d] %d vs %d", j, a[i].qs[j], b[i].qs[j]);
                    diffs += dq != 0;
                }
                /* bsums must describe the simd bytes themselves */
                for (int g = 0; g < 16; g++) {
                    int s = 0;
                    for (int k = 0; k < 16; k++)
                        s += b[i].qs[16 * g + k];
                    T_ASSERTF(s == b[i].bsums[g], "bsums[%d] %d vs %d", g, b[i].bsums[g], s);
                }
            }
        } else {
            T_ASSERTF(memcmp(q_ref, q_simd, bytes) == 0, "%s activation bytes differ",
                      quant_info(act)->name);
        }
        total += n;
    }
    T_ASSERTF(diffs * 1000 <= total, "%ld of %ld values differ", diffs, total);
}

/* vec_dot vs ref on the same activation bytes, for every kernel type of the ISA. */
static void check_dots(enum kern_isa isa) {
    need_isa(isa);
    struct kern_ops ops;
    isa_ops(isa, &ops);
    static float x[NMAX], wf[NMAX], af[NMAX];
    static uint8_t w[NMAX * 4] __attribute__((aligned(64)));
    static uint8_t a[NMAX * 4] __attribute__((aligned(64)));
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const uint32_t t = k_types[ti];
        const struct quant_info *qi = quant_info(t);
        T_ASSERTF(ops.t[t].vec_dot != NULL, "%s: no vec_dot", qi->name);
        quant_vec_dot_fn ref = quant_vec_dot_ref(t);
        double worst = 0;
        for (int rep = 0; rep < 200; rep++) {
            const int64_t n = 256 * (1 + rep % 16);
            rnd_weights(t, w, n);
            rnd_act(x, n, rep % 3);
            T_ASSERT(quant_act_row_ref(qi->vec_dot_type, x, a, n) == 0);
            T_ASSERT(quant_dequant_row_ref(t, w, wf, n) == 0);
            act_values(qi->vec_dot_type, a, af, n);
            double mag = 0;
            for (int64_t i = 0; i < n; i++)
                mag += fabs((double)wf[i] * af[i]);
            const float r = ref(n, w, a), s = ops.t[t].vec_dot(n, w, a);
            const double err = mag > 0 ? fabs((double)s - r) / mag : fabs((double)s - r);
            if (err > worst) worst = err;
            T_ASSERTF(err < ERR_BOUND, "%s n=%lld: simd %.9g ref %.9g (rel %.3g)", qi->name,
                      (long long)n, s, r, err);
        }
        printf("    %-5s max normalised error %.2e\n", qi->name, worst);
    }
}

/* Runs one gemm of nr rows x na activations into y (rows of ldy floats, n_buf of them,
 * prefilled with a marker) and checks every slot: vec_dot's bits (want) inside the tile,
 * the marker outside it. */
static void check_tile(const struct kern_type_ops *o, uint32_t t, int64_t n, const uint8_t *w,
                       size_t wb, int nr, const uint8_t *a, size_t ab, int na, float *y,
                       const float *want, int ldy, int n_buf) {
    for (int i = 0; i < n_buf * ldy; i++)
        y[i] = -12345.0f;
    o->gemm(n, w, wb, nr, a, ab, na, y, ldy);
    for (int c = 0; c < n_buf; c++)
        for (int r = 0; r < ldy; r++) {
            const float wv = c < na && r < nr ? want[c * ldy + r] : -12345.0f;
            T_ASSERTF(memcmp(&wv, &y[c * ldy + r], 4) == 0,
                      "%s n=%lld tile %dx%d: y[%d][%d] = %.9g, vec_dot %.9g", quant_info(t)->name,
                      (long long)n, nr, na, c, r, y[c * ldy + r], wv);
        }
}

/* gemm over every tile shape up to the kern_impl.h bounds == vec_dot bit for bit: all row
 * counts, activation counts around the kernels' tile and block sizes, and row lengths with
 * an odd number of 32-element blocks and past the kernels' K chunks (32 and 128 blocks,
 * 4 super-blocks). */
static void check_gemm(enum kern_isa isa) {
    need_isa(isa);
    struct kern_ops ops;
    isa_ops(isa, &ops);
    enum { NR = KERN_GEMM_MAX_ROWS, NA = KERN_GEMM_MAX_ACTS, NG = 4352, LDY = NR + 3 };
    static const int nas[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 31, 33, 63, NA};
    static const int64_t ns_32[] = {512, 544, 1056, 4128}, ns_k[] = {512, 768, 4352};
    static uint8_t w[NR * NG * 4] __attribute__((aligned(64)));
    static uint8_t a[NA * NG * 4] __attribute__((aligned(64)));
    static float x[NG], y[NA * LDY], want[NA * LDY];
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const uint32_t t = k_types[ti];
        const struct quant_info *qi = quant_info(t);
        T_ASSERTF(ops.t[t].gemm != NULL, "%s: no gemm", qi->name);
        const int kq = qi->blck == QK_K;
        for (int ni = 0; ni < (kq ? 3 : 4); ni++) {
            const int64_t n = kq ? ns_k[ni] : ns_32[ni];
            /* activation rows padded past their size, 64-byte aligned as kern_matmul lays
             * them out */
            T_ASSERT(n <= NG);
            const size_t wb = quant_row_size(t, n);
            const size_t ab = (quant_row_size(qi->vec_dot_type, n) + 127) & ~(size_t)63;
            T_ASSERT(wb * NR <= sizeof(w) && ab * NA <= sizeof(a));
            for (int r = 0; r < NR; r++)
                rnd_weights(t, w + (size_t)r * wb, n);
            for (int c = 0; c < NA; c++) {
                rnd_act(x, n, 0);
                if (ops.t[t].quant_act)
                    ops.t[t].quant_act(x, a + (size_t)c * ab, n);
                else
                    T_ASSERT(quant_act_row_ref(qi->vec_dot_type, x, a + (size_t)c * ab, n) == 0);
            }
            for (int c = 0; c < NA; c++)
                for (int r = 0; r < NR; r++)
                    want[c * LDY + r] = ops.t[t].vec_dot(n, w + (size_t)r * wb, a + (size_t)c * ab);
            for (int nr = 1; nr <= NR; nr++)
                for (size_t ai = 0; ai < sizeof(nas) / sizeof(nas[0]); ai++) {
                    const int na = nas[ai];
                    if (na > NA) continue;
                    check_tile(&ops.t[t], t, n, w, wb, nr, a, ab, na, y, want, LDY, NA);
                }
        }
    }
}

/* A gemm with gemm_task takes any number of rows (kern_matmul hands it whole tasks): up
 * to 70 rows with 1-6, 8, 12, 16 and KERN_GEMM_MAX_ACTS activations (the one-activation, the
 * few-activation streaming and the prepared-block paths), against vec_dot's bits. */
static void check_gemm_rows(enum kern_isa isa) {
    need_isa(isa);
    struct kern_ops ops;
    isa_ops(isa, &ops);
    enum { NRM = 70, NA = KERN_GEMM_MAX_ACTS, NLONG = 4128, LDY = NRM + 1 };
    static const int64_t ns[] = {512, 544, NLONG};
    static const int nas[] = {1, 2, 3, 4, 5, 6, 8, 12, 16, NA};
    static uint8_t w[NRM * NLONG * 2] __attribute__((aligned(64)));
    static uint8_t a[NA * (NLONG * 2 + 64)] __attribute__((aligned(64)));
    static float x[NLONG], y[NA * LDY], want[NA * LDY];
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const uint32_t t = k_types[ti];
        if (!ops.t[t].gemm_task) continue;
        /* F16 / BF16 activations: kern.c's reference conversion (no SIMD quantizer) */
        const kern_quant_act_fn qa = ops.t[t].quant_act ? ops.t[t].quant_act
                                     : t == QT_F16      ? quant_f16_row_ref
                                                        : quant_bf16_row_ref;
        for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
            const int64_t n = ns[ni];
            const size_t wb = quant_row_size(t, n);
            const size_t ab = (quant_row_size(quant_info(t)->vec_dot_type, n) + 63) & ~(size_t)63;
            T_ASSERT(wb * NRM <= sizeof(w) && ab * NA <= sizeof(a));
            for (int r = 0; r < NRM; r++)
                rnd_weights(t, w + (size_t)r * wb, n);
            for (int c = 0; c < NA; c++) {
                rnd_act(x, n, 0);
                qa(x, a + (size_t)c * ab, n);
                for (int r = 0; r < NRM; r++)
                    want[c * LDY + r] = ops.t[t].vec_dot(n, w + (size_t)r * wb, a + (size_t)c * ab);
            }
            for (size_t ai = 0; ai < sizeof(nas) / sizeof(nas[0]); ai++)
                for (int nr = 17; nr <= NRM; nr += 3)
                    check_tile(&ops.t[t], t, n, w, wb, nr, a, ab, nas[ai], y, want, LDY, NA);
        }
    }
}

static void test_avx2_quant_q8_0(void) {
    check_quant(KERN_ISA_AVX2, QT_Q8_0);
}
static void test_avx2_quant_q8_K(void) {
    check_quant(KERN_ISA_AVX2, QT_Q4_K);
}
static void test_avx2_quant_f16(void) {
    check_quant(KERN_ISA_AVX2, QT_F16);
}
static void test_avx2_quant_q8_1(void) {
    check_quant(KERN_ISA_AVX2, QT_Q4_1);
}
static void test_avx2_vec_dot(void) {
    check_dots(KERN_ISA_AVX2);
}
static void test_avx2_gemm_bitexact(void) {
    check_gemm(KERN_ISA_AVX2);
    check_gemm_rows(KERN_ISA_AVX2); /* F16 / BF16 take whole tasks there */
}
static void test_avx512_quant_q8_0(void) {
    check_quant(KERN_ISA_AVX512, QT_Q8_0);
}
static void test_avx512_quant_q8_K(void) {
    check_quant(KERN_ISA_AVX512, QT_Q4_K);
}
static void test_avx512_vec_dot(void) {
    check_dots(KERN_ISA_AVX512);
}
/* The AVX-512 F16/BF16 kernels keep the AVX2 kernels' lanes and order: the same bits,
 * including the scalar tail of a row whose length is not a multiple of 16. */
static void test_avx512_half_equals_avx2(void) {
    need_isa(KERN_ISA_AVX512);
    struct kern_ops o2, o5;
    isa_ops(KERN_ISA_AVX2, &o2);
    isa_ops(KERN_ISA_AVX512, &o5);
    static const uint32_t types[] = {QT_F16, QT_BF16};
    static const int64_t ns[] = {8, 16, 40, 256, 1000, NMAX};
    static float x[NMAX];
    static uint8_t w[NMAX * 2], a[NMAX * 2];
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
            for (int rep = 0; rep < 20; rep++) {
                const uint32_t t = types[ti];
                const int64_t n = ns[ni];
                rnd_weights(t, w, n);
                rnd_act(x, n, rep % 3);
                T_ASSERT(quant_act_row_ref(quant_info(t)->vec_dot_type, x, a, n) == 0);
                const float s2 = o2.t[t].vec_dot(n, w, a), s5 = o5.t[t].vec_dot(n, w, a);
                T_ASSERTF(memcmp(&s2, &s5, 4) == 0, "%s n=%lld: avx512 %.9g, avx2 %.9g",
                          quant_info(t)->name, (long long)n, s5, s2);
            }
}

/* Both streaming layouts (one row at a time, four side by side), whichever this CPU uses. */
static void test_avx512_gemm_bitexact(void) {
    static const int rows[] = {1, 4};
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        g_stream_rows = rows[i];
        check_gemm(KERN_ISA_AVX512);
        check_gemm_rows(KERN_ISA_AVX512);
    }
    g_stream_rows = 0;
}

/* kern_matmul on the active ISA: M=1 row by row equals the rows of one M=13 call, on 1 and
 * 2 threads, and every output matches the ref vec_dot within the bound. */
static void test_matmul_batch_invariant(void) {
    T_ASSERT(kern_init(KERN_ISA_AUTO) == 0);
    printf("    active ISA: %s\n", kern_isa_name(kern_active_isa()));
    enum { M = 13, NIN = 1024, NOUT = 200 };
    static uint8_t wdata[NOUT * NIN * 2] __attribute__((aligned(64)));
    static float X[M * NIN], Y1[M * NOUT], YM[M * NOUT], Y2[M * NOUT];
    static uint8_t scratch[M * NIN * 4 + 4096] __attribute__((aligned(64)));
    struct pool *p1 = NULL, *p2 = NULL;
    T_ASSERT(pool_create(1, &p1) == 0);
    T_ASSERT(pool_create(2, &p2) == 0);
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const uint32_t t = k_types[ti];
        struct kern_weight w = {.type = t,
                                .n_in = NIN,
                                .n_out = NOUT,
                                .row_bytes = quant_row_size(t, NIN),
                                .data = wdata};
        for (int o = 0; o < NOUT; o++)
            rnd_weights(t, wdata + (size_t)o * w.row_bytes, NIN);
        for (int i = 0; i < M * NIN; i++)
            X[i] = rnd_f(-1.0f, 1.0f);
        T_ASSERT(kern_act_bytes(&w, M) <= sizeof(scratch));
        for (int m = 0; m < M; m++)
            kern_matmul(p1, &w, X + m * NIN, 1, Y1 + m * NOUT, NOUT, scratch);
        kern_matmul(p2, &w, X, M, YM, NOUT, scratch);
        kern_matmul(p1, &w, X, M, Y2, NOUT, scratch);
        T_ASSERTF(memcmp(Y1, YM, sizeof(Y1)) == 0, "%s: M=1 and M=13 (2 threads) differ",
                  quant_info(t)->name);
        T_ASSERTF(memcmp(Y2, YM, sizeof(Y2)) == 0, "%s: 1 and 2 threads differ",
                  quant_info(t)->name);
    }
    pool_destroy(p1);
    pool_destroy(p2);
}

/* The row widening the BLAS path uses (kern_get_row's dequant) equals the reference for every
 * F16 and BF16 value but NaNs (F16C quiets a signalling NaN; no weight holds one). */
static void test_dequant_half(void) {
    T_ASSERT(kern_init(KERN_ISA_AUTO) == 0);
    static uint16_t all[65536];
    static float got[65536], want[65536];
    for (int i = 0; i < 65536; i++)
        all[i] = (uint16_t)i;
    const uint32_t types[] = {QT_F16, QT_BF16};
    for (int k = 0; k < 2; k++) {
        const struct kern_weight w = {.type = types[k], .n_in = 65536, .n_out = 1,
                                      .row_bytes = quant_row_size(types[k], 65536), .data = all};
        kern_get_row(&w, 0, got);
        T_ASSERT(quant_dequant_row_ref(types[k], all, want, 65536) == 0);
        for (int i = 0; i < 65536; i++)
            if (!isnan(want[i]))
                T_ASSERTF(memcmp(&got[i], &want[i], 4) == 0, "%s %04x: %g vs %g",
                          quant_info(types[k])->name, i, got[i], want[i]);
    }
}

/* F32 / F16 / BF16 weights with the blas flag (kern_blas.c): below the row threshold the
 * bits of the kernels; from it sgemm on the f32 input, within 1e-5 of the exact sum
 * (normalised as in check_dots) and not the kernels' bits (so the path did run). BF16 on a
 * CPU that takes the packed kernels (kern_bf16_packed) instead: the exact sum of the
 * BF16-rounded input, and the bits of kern_bf16p_gemm_ref. */
static void test_blas_path(void) {
    if (!kern_blas_available()) T_SKIP("built without OpenBLAS");
    T_ASSERT(kern_init(KERN_ISA_AUTO) == 0);
    enum { MMAX = KERN_BLAS_MIN_M_F16, NIN = 640, NOUT = 300 };
    static uint8_t wdata[NOUT * NIN * 4] __attribute__((aligned(64)));
    static float X[MMAX * NIN], Y0[MMAX * NOUT], Y1[MMAX * NOUT], wf[NIN];
    static uint8_t scratch[MMAX * NIN * 4 + 4096] __attribute__((aligned(64)));
    struct pool *pool = NULL;
    T_ASSERT(pool_create(2, &pool) == 0);
    const uint32_t types[] = {QT_F32, QT_F16, QT_BF16};
    for (int k = 0; k < 3; k++) {
        const uint32_t t = types[k];
        struct kern_weight w = {.type = t, .n_in = NIN, .n_out = NOUT,
                                .row_bytes = quant_row_size(t, NIN), .data = wdata};
        for (int o = 0; o < NOUT; o++) {
            uint8_t *row = wdata + (size_t)o * w.row_bytes;
            if (t == QT_F32)
                for (int i = 0; i < NIN; i++)
                    ((float *)(void *)row)[i] = rnd_f(-2.0f, 2.0f);
            else
                rnd_weights(t, row, NIN);
        }
        for (int i = 0; i < MMAX * NIN; i++)
            X[i] = rnd_f(-1.0f, 1.0f);
        const int thr = t == QT_F16 ? KERN_BLAS_MIN_M_F16 : KERN_BLAS_MIN_M;
        const int packed = t == QT_BF16 && kern_bf16_packed();
        if (packed) { /* the reference: X rounded to BF16, packed, and the scalar sums */
            static uint8_t ref_act[KERN_BLAS_MIN_M * NIN * 2];
            for (int m = 0; m < thr; m++)
                kern_bf16p_pack_ref(X + m * NIN, ref_act, m, thr, NIN);
            kern_bf16p_gemm_ref(NIN, wdata, w.row_bytes, NOUT, ref_act, thr, Y0, NOUT);
            w.blas = 1;
            kern_matmul(pool, &w, X, thr, Y1, NOUT, scratch);
            T_ASSERTF(memcmp(Y0, Y1, sizeof(float) * (size_t)thr * NOUT) == 0,
                      "BF16 M=%d: the packed path must give kern_bf16p_gemm_ref's bits", thr);
        }
        for (int M = thr - 1; M <= thr; M++) {
            w.blas = 0;
            kern_matmul(pool, &w, X, M, Y0, NOUT, scratch);
            w.blas = 1;
            kern_matmul(pool, &w, X, M, Y1, NOUT, scratch);
            if (M < thr) {
                T_ASSERTF(memcmp(Y0, Y1, sizeof(float) * (size_t)M * NOUT) == 0,
                          "%s M=%d: below the threshold the bits must be the kernels'",
                          quant_info(t)->name, M);
                continue;
            }
            int differ = 0;
            for (int o = 0; o < NOUT; o++) {
                T_ASSERT(quant_dequant_row_ref(t, wdata + (size_t)o * w.row_bytes, wf, NIN) == 0);
                for (int m = 0; m < M; m++) {
                    double exact = 0, mag = 0;
                    for (int i = 0; i < NIN; i++) {
                        const float x = packed
                                            ? quant_bf16_to_f32(quant_f32_to_bf16(X[m * NIN + i]))
                                            : X[m * NIN + i];
                        exact += (double)wf[i] * x;
                        mag += fabs((double)wf[i] * x);
                    }
                    const float y = Y1[m * NOUT + o];
                    T_ASSERTF(fabs(y - exact) / mag < 1e-5, "%s M=%d [%d][%d]: %.9g, exact %.9g",
                              quant_info(t)->name, M, m, o, y, exact);
                    differ += memcmp(&y, &Y0[m * NOUT + o], 4) != 0;
                }
            }
            T_ASSERTF(differ > 0, "%s M=%d: the BLAS path did not run", quant_info(t)->name, M);
        }
    }
    pool_destroy(pool);
}

/* The packed BF16 kernels (kern_bf16p_avx512.c) against the scalar references of
 * kern_bf16p.c, byte for byte (packing) and bit for bit (sums), over partial blocks of rows,
 * every tile width, row lengths that are not a multiple of 32, and subnormal inputs. */
static void test_bf16p_equals_ref(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bf16") || !kern_isa_supported(KERN_ISA_AVX512))
        T_SKIP("no AVX512_BF16");
    struct kern_ops ops;
    memset(&ops, 0, sizeof(ops));
    kern_register_bf16p_avx512(&ops);
    const struct kern_type_ops *o = &ops.t[QT_BF16];
    T_ASSERT(o->pack_act && o->gemm_packed);
    enum { MM = 49, NN = 672, ROWS = 37, LDY = 41 };
    static float X[MM * NN], Y0[MM * LDY], Y1[MM * LDY];
    static uint8_t A0[MM * NN * 2] __attribute__((aligned(64)));
    static uint8_t A1[MM * NN * 2] __attribute__((aligned(64)));
    static uint8_t W[ROWS * NN * 2];
    const int ms[] = {1, 15, 16, 17, 31, 32, 33, 48, 49};
    const int ns[] = {2, 66, 640, 672};
    for (int ni = 0; ni < 4; ni++) {
        const int n = ns[ni];
        rnd_weights(QT_BF16, W, (int64_t)ROWS * n);
        for (int i = 0; i < ROWS * n; i++) { /* a few subnormals and negative zeros */
            const uint16_t v = i % 101 == 7 ? 0x0003 : i % 103 == 9 ? 0x8000 : 0;
            if (v) memcpy(W + 2 * i, &v, 2);
        }
        for (int i = 0; i < MM * n; i++)
            X[i] = i % 97 == 5 ? 1e-39f * (float)(i % 7) : i % 89 == 3 ? 0.0f : rnd_f(-3.0f, 3.0f);
        for (int mi = 0; mi < 9; mi++) {
            const int M = ms[mi];
            memset(A0, 0x5a, sizeof(A0));
            memset(A1, 0x5a, sizeof(A1));
            for (int m = 0; m < M; m++) {
                kern_bf16p_pack_ref(X + m * n, A0, m, M, n);
                o->pack_act(X + m * n, A1, m, M, n);
            }
            T_ASSERTF(memcmp(A0, A1, sizeof(A0)) == 0, "pack n=%d M=%d", n, M);
            for (int rows = 1; rows <= ROWS; rows += rows < 13 ? 1 : 24) {
                memset(Y0, 0, sizeof(Y0));
                memset(Y1, 0, sizeof(Y1));
                kern_bf16p_gemm_ref(n, W, (size_t)n * 2, rows, A0, M, Y0 + 3, LDY);
                o->gemm_packed(n, W, (size_t)n * 2, rows, A1, M, Y1 + 3, LDY);
                T_ASSERTF(memcmp(Y0, Y1, sizeof(Y0)) == 0, "gemm n=%d M=%d rows=%d", n, M, rows);
            }
        }
    }
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {
        T_CASE(test_avx2_quant_q8_0),
        T_CASE(test_avx2_quant_q8_K),
        T_CASE(test_avx2_quant_f16),
        T_CASE(test_avx2_quant_q8_1),
        T_CASE(test_avx2_vec_dot),
        T_CASE(test_avx2_gemm_bitexact),
        T_CASE(test_avx512_quant_q8_0),
        T_CASE(test_avx512_quant_q8_K),
        T_CASE(test_avx512_vec_dot),
        T_CASE(test_avx512_gemm_bitexact),
        T_CASE(test_avx512_half_equals_avx2),
        T_CASE(test_matmul_batch_invariant),
        T_CASE(test_dequant_half),
        T_CASE(test_blas_path),
        T_CASE(test_bf16p_equals_ref),
        {0},
    };
    return t_main(argc, argv, cases);
}
