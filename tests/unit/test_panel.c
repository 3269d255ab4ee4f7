/*
 * test_panel — Q8_0, Q5_0, Q4_0, IQ4_NL, Q4_1 and Q5_1 weights repacked into 16-row panels (engine/kernels/panel.h):
 *   - the layout: every element and scale of every row read back from the panel equals the
 *     row's own (quant_dequant_row_ref), padding rows and blocks zero;
 *   - the SIMD panel kernel equals panel_gemm_ref bit for bit for row counts that are and
 *     are not multiples of 16, odd and even block counts, 1-70 activations and row ranges
 *     that start and end inside a panel;
 *   - panel_gemm_ref is within the kernel bound of the scalar vec_dot reference
 *     (|x - ref| / sum |w * a| < 1e-5: only the float summation order differs);
 *   - the same for the AMX kernel (16+ activations on tiles, the rest VNNI): the same bits;
 *   - kern_matmul on a packed weight: M = 1 row by row equals one M = 37 call, 1 and 2
 *     threads give the same bits.
 * The SIMD cases SKIP on a CPU without a panel kernel (AVX-512 VNNI for Q8_0 and Q5_0, AVX2
 * for all six), the AMX one without AMX-INT8 or when the kernel refuses the tile state.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "engine/kernels/kern.h"
#include "engine/kernels/kern_impl.h"
#include "engine/kernels/panel.h"
#include "engine/kernels/pool.h"
#include "engine/kernels/quant.h"
#include "tests/unit/harness.h"

static uint64_t rng = 0x243F6A8885A308D3ULL;

static uint32_t rnd_u32(void) {
    return (uint32_t)(t_xorshift64(&rng) >> 16);
}

static float rnd_f(float lo, float hi) {
    return lo + (hi - lo) * (float)(rnd_u32() & 0xFFFFFF) / 16777216.0f;
}

static const uint32_t k_types[] = {QT_Q8_0, QT_Q5_0, QT_Q4_0, QT_IQ4_NL, QT_Q4_1, QT_Q5_1};

/* The activation type of a weight type (Q8_1 for Q4_1 / Q5_1, else Q8_0). */
static uint32_t act_type(uint32_t t) {
    return quant_info(t)->vec_dot_type;
}

/* Types whose values are d * u + m (a min per block). */
static int has_min(uint32_t t) {
    return t == QT_Q4_1 || t == QT_Q5_1;
}

/* n_out random rows of n_in of type t (valid scales, all byte values elsewhere). */
static struct kern_weight rnd_rows(uint32_t t, uint8_t *buf, int64_t n_in, int64_t n_out) {
    struct kern_weight w = {
        .type = t, .n_in = n_in, .n_out = n_out, .row_bytes = quant_row_size(t, n_in), .data = buf};
    const size_t bs = quant_row_size(t, 32);
    for (int64_t r = 0; r < n_out; r++)
        for (int64_t b = 0; b < n_in / 32; b++) {
            uint8_t *blk = buf + (size_t)r * w.row_bytes + (size_t)b * bs;
            for (size_t k = 2; k < bs; k++)
                blk[k] = (uint8_t)rnd_u32();
            const quant_half d = quant_f32_to_f16(rnd_f(0.0005f, 0.02f));
            memcpy(blk, &d, 2);
            if (has_min(t)) { /* the min: a valid f16 too */
                const quant_half m = quant_f32_to_f16(rnd_f(-0.2f, 0.2f));
                memcpy(blk + 2, &m, 2);
            }
        }
    return w;
}

/* na activation rows of n_in as type at (Q8_0 or Q8_1), stride as. */
static void rnd_act(uint32_t at, uint8_t *a, size_t as, int na, int64_t n_in) {
    static float x[8192];
    for (int c = 0; c < na; c++) {
        for (int64_t i = 0; i < n_in; i++)
            x[i] = rnd_f(-1.0f, 1.0f) * (rnd_u32() % 50 == 0 ? 20.0f : 1.0f);
        T_ASSERT(quant_act_row_ref(at, x, a + (size_t)c * as, n_in) == 0);
    }
}

static void test_layout(void) {
    enum { NIN = 96, NOUT = 37 }; /* 3 blocks (odd), 3 panels, the last one partial */
    static uint8_t wbuf[NOUT * 34 * 3];
    _Static_assert(sizeof(struct block_q5_1) <= 34, "wbuf holds 34 bytes per block");
    static float row[NIN];
    for (size_t ti = 0; ti < sizeof k_types / sizeof k_types[0]; ti++) {
        const uint32_t t = k_types[ti];
        struct kern_weight w = rnd_rows(t, wbuf, NIN, NOUT);
        void *p = NULL;
        size_t bytes = 0;
        T_ASSERT(panel_pack(&w, NULL, &p, &bytes) == 0);
        T_ASSERT(bytes == panel_bytes(&w) && bytes == 3 * 2 * panel_rec_bytes(t));
        for (int64_t r = 0; r < 48; r++) {
            if (r < NOUT)
                T_ASSERT(quant_dequant_row_ref(t, wbuf + (size_t)r * w.row_bytes, row, NIN) == 0);
            for (int64_t b = 0; b < 4; b++) {
                const int real = r < NOUT && b < 3;
                const quant_half d = panel_d(t, p, NIN, r, b);
                quant_half want = 0;
                if (real)
                    memcpy(&want,
                           wbuf + (size_t)r * w.row_bytes + (size_t)b * quant_row_size(t, 32),
                           2);
                T_ASSERTF(d == want, "%s row %ld block %ld: scale", quant_info(t)->name, (long)r,
                          (long)b);
                quant_half wantm = 0;
                if (real && has_min(t))
                    memcpy(&wantm,
                           wbuf + (size_t)r * w.row_bytes + (size_t)b * quant_row_size(t, 32) + 2,
                           2);
                T_ASSERTF(panel_m(t, p, NIN, r, b) == wantm, "%s row %ld block %ld: min",
                          quant_info(t)->name, (long)r, (long)b);
                const float m = quant_f16_to_f32(wantm);
                for (int k = 0; k < 32; k++) {
                    const int q = panel_q(t, p, NIN, r, b, k);
                    const float v =
                        has_min(t) ? (float)q * quant_f16_to_f32(d) + m : quant_f16_to_f32(d) * (float)q;
                    /* padding: q = 0 (IQ4_NL has no level 0: its padding is scale 0) */
                    T_ASSERTF(real ? v == row[b * 32 + k] : t == QT_IQ4_NL ? d == 0 : q == 0,
                              "%s row %ld block %ld element %d: %d", quant_info(t)->name, (long)r,
                              (long)b, k, q);
                }
            }
        }
        panel_free(p, bytes);
    }
}

/* The ISA's panel kernel against panel_gemm_ref (bits) and panel_gemm_ref against
 * vec_dot_ref. AVX-512 and AMX both equal panel_gemm_ref, hence each other. */
static void check_kernel_bits(enum kern_isa isa) {
    if (!kern_isa_supported(isa))
        T_SKIP("no %s on this CPU (or tile state refused)", kern_isa_name(isa));
    T_ASSERT(kern_init(isa) == 0);
    if (!kern_panel_kernel(QT_Q5_0)) T_SKIP("no panel kernel on this CPU (needs AVX2)");
    enum { NA = 70, NG = 4128, LDY = 208 };
    static const int64_t ns[] = {32, 64, 96, 640, NG};
    static const int64_t outs[] = {1, 15, 16, 17, 200};
    static const int nas[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 32, 47, 48, 64, NA};
    static uint8_t wbuf[200 * 34 * (NG / 32)];
    static uint8_t abuf[NA * (36 * (NG / 32) + 64)]; /* Q8_1: 36 bytes a block */
    static float y[NA * LDY], want[NA * LDY];
    for (size_t ti = 0; ti < sizeof k_types / sizeof k_types[0]; ti++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
            for (size_t oi = 0; oi < sizeof outs / sizeof outs[0]; oi++) {
                const uint32_t t = k_types[ti];
                const kern_panel_fn fn = kern_panel_kernel(t);
                /* AVX2, AVX-512 and AMX each have all six */
                T_ASSERTF(fn != NULL, "%s: no %s panel kernel", quant_info(t)->name,
                          kern_isa_name(isa));
                const int64_t n = ns[ni], no = outs[oi];
                struct kern_weight w = rnd_rows(t, wbuf, n, no);
                const size_t as = (quant_row_size(act_type(t), n) + 63) & ~(size_t)63;
                rnd_act(act_type(t), abuf, as, NA, n);
                void *p = NULL;
                size_t bytes = 0;
                T_ASSERT(panel_pack(&w, NULL, &p, &bytes) == 0);
                panel_gemm_ref(t, n, p, 0, no, abuf, as, NA, want, LDY);
                for (int c = 0; c < NA; c++)
                    for (int64_t r = 0; r < no; r++) {
                        const uint8_t *wr = wbuf + (size_t)r * w.row_bytes,
                                      *ar = abuf + (size_t)c * as;
                        const float ref = quant_vec_dot_ref(t)(n, wr, ar);
                        static float wv[NG], av[NG];
                        T_ASSERT(quant_dequant_row_ref(t, wr, wv, n) == 0);
                        T_ASSERT(quant_dequant_row_ref(act_type(t), ar, av, n) == 0);
                        double mag = 0;
                        for (int64_t i = 0; i < n; i++)
                            mag += fabs((double)wv[i] * av[i]);
                        const double e =
                            fabs((double)want[c * LDY + r] - ref) / (mag > 0 ? mag : 1);
                        T_ASSERTF(e < 1e-5, "%s n %ld rows %ld: ref error %g", quant_info(t)->name,
                                  (long)n, (long)no, e);
                    }
                for (size_t ai = 0; ai < sizeof nas / sizeof nas[0]; ai++) {
                    const int na = nas[ai];
                    /* whole range, then ranges starting and ending inside panels */
                    const int64_t r0s[] = {0, no > 5 ? 5 : 0, no > 17 ? 17 : 0};
                    for (size_t k = 0; k < 3; k++) {
                        const int64_t r0 = r0s[k], r1 = k == 2 && no > 30 ? no - 3 : no;
                        for (size_t i = 0; i < sizeof y / sizeof y[0]; i++)
                            y[i] = -12345.0f;
                        fn(n, p, r0, r1, abuf, as, na, y, LDY);
                        for (int c = 0; c < na; c++)
                            for (int64_t r = 0; r < no; r++) {
                                const float g = y[c * LDY + r];
                                if (r < r0 || r >= r1)
                                    T_ASSERTF(g == -12345.0f,
                                              "n %ld: row %ld outside [%ld, %ld) "
                                              "written",
                                              (long)n, (long)r, (long)r0, (long)r1);
                                else
                                    T_ASSERTF(memcmp(&g, &want[c * LDY + r], 4) == 0,
                                              "%s n %ld rows %ld na %d act %d row %ld: %.9g vs "
                                              "ref %.9g",
                                              quant_info(t)->name, (long)n, (long)no, na, c,
                                              (long)r, g, want[c * LDY + r]);
                            }
                    }
                }
                panel_free(p, bytes);
            }
}

static void test_kernel_bits(void) {
    check_kernel_bits(KERN_ISA_AVX512);
}

static void test_kernel_bits_avx2(void) {
    check_kernel_bits(KERN_ISA_AVX2);
    T_ASSERT(kern_init(KERN_ISA_AUTO) == 0);
}

static void test_kernel_bits_amx(void) {
    if (kern_isa_supported(KERN_ISA_AMX)) { /* a kernel of its own, not VNNI's under its name */
        T_ASSERT(kern_init(KERN_ISA_AVX512) == 0);
        const kern_panel_fn vnni = kern_panel_kernel(QT_Q5_0);
        T_ASSERT(kern_init(KERN_ISA_AMX) == 0);
        T_ASSERT(kern_panel_kernel(QT_Q5_0) != vnni);
    }
    check_kernel_bits(KERN_ISA_AMX);
}

/* kern_matmul on a packed weight: batch and thread invariant (M = 37: the AMX kernel, where
 * the CPU has it, takes two groups of 16 rows and the VNNI kernel the last 5; M = 1 is VNNI). */
static void test_matmul_invariant(void) {
    T_ASSERT(kern_init(KERN_ISA_AUTO) == 0);
    enum { M = 37, NIN = 1024, NOUT = 200 };
    static uint8_t wbuf[NOUT * 34 * (NIN / 32)];
    static float X[M * NIN], Y1[M * NOUT], YM[M * NOUT], Y2[M * NOUT], want[M * NOUT];
    static uint8_t scratch[M * NIN * 4 + 4096] __attribute__((aligned(64)));
    static uint8_t act[M * 36 * (NIN / 32)];
    struct pool *p1 = NULL, *p2 = NULL;
    T_ASSERT(pool_create(1, &p1) == 0);
    T_ASSERT(pool_create(2, &p2) == 0);
    for (size_t ti = 0; ti < sizeof k_types / sizeof k_types[0]; ti++) {
        const uint32_t t = k_types[ti];
        struct kern_weight w = rnd_rows(t, wbuf, NIN, NOUT);
        T_ASSERTF(panel_supported(&w), "%s: no panel kernel", quant_info(t)->name);
        void *p = NULL;
        size_t bytes = 0;
        T_ASSERT(panel_pack(&w, p2, &p, &bytes) == 0);
        w.panel = p;
        for (int i = 0; i < M * NIN; i++)
            X[i] = rnd_f(-1.0f, 1.0f);
        for (int m = 0; m < M; m++)
            kern_matmul(p1, &w, X + m * NIN, 1, Y1 + m * NOUT, NOUT, scratch);
        kern_matmul(p2, &w, X, M, YM, NOUT, scratch);
        kern_matmul(p1, &w, X, M, Y2, NOUT, scratch);
        T_ASSERTF(memcmp(Y1, YM, sizeof Y1) == 0, "%s: M=1 and M=%d (2 threads) differ",
                  quant_info(t)->name, M);
        T_ASSERTF(memcmp(Y2, YM, sizeof Y2) == 0, "%s: 1 and 2 threads differ",
                  quant_info(t)->name);
        /* and the panel path is really taken: its bits are panel_gemm_ref's */
        const size_t as = quant_row_size(act_type(t), NIN);
        for (int m = 0; m < M; m++)
            kern_quant_act(t, X + m * NIN, act + (size_t)m * as, NIN);
        panel_gemm_ref(t, NIN, p, 0, NOUT, act, as, M, want, NOUT);
        T_ASSERTF(memcmp(want, YM, sizeof want) == 0, "%s: kern_matmul is not the panel kernel",
                  quant_info(t)->name);
        panel_free(p, bytes);
    }
    pool_destroy(p1);
    pool_destroy(p2);
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {
        T_CASE(test_layout),
        T_CASE(test_kernel_bits),
        T_CASE(test_kernel_bits_avx2),
        T_CASE(test_kernel_bits_amx),
        T_CASE(test_matmul_invariant),
        {0},
    };
    return t_main(argc, argv, cases);
}
