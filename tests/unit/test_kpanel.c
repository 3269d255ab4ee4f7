/*
 * test_kpanel — Q3_K, Q4_K, Q5_K and Q6_K weights repacked into 16-row super-block panels
 * (engine/kernels/panel.h):
 *   - the layout: every element, scale and min read back from the panel gives the row's own
 *     values (quant_dequant_row_ref), padding rows are zero, and panel_get_row (the tied
 *     embedding lookup) equals the file row's dequantization bit for bit;
 *   - panel_gemm_ref is within the kernel bound of the scalar vec_dot reference;
 *   - the AVX-512 VNNI kernel and the AMX kernel (16+ activations on tiles, the rest VNNI)
 *     equal panel_gemm_ref bit for bit for 1-70 activations, row counts that are and are not
 *     multiples of 16, 1-16 super-blocks (the AMX kernel's chunks of 8 included) and row
 *     ranges starting and ending inside a panel;
 *   - kern_matmul on a packed weight: M = 1 row by row equals one M = 37 call, 1 and 2
 *     threads give the same bits, and they are panel_gemm_ref's.
 * The SIMD cases SKIP without AVX-512 (the AMX one without AMX-INT8 or the tile state);
 * AVX2 has no K-quant panel kernels, so there the weights stay in rows (checked).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/kernels/kern.h"
#include "engine/kernels/kern_impl.h"
#include "engine/kernels/panel.h"
#include "engine/kernels/pool.h"
#include "engine/kernels/quant.h"
#include "tests/unit/harness.h"

static uint64_t rng = 0x13198A2E03707344ULL;

static uint32_t rnd_u32(void) {
    return (uint32_t)(t_xorshift64(&rng) >> 16);
}

static float rnd_f(float lo, float hi) {
    return lo + (hi - lo) * (float)(rnd_u32() & 0xFFFFFF) / 16777216.0f;
}

static const uint32_t k_types[] = {QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_Q3_K};

/* n_out random rows of n_in of type t (valid d / dmin, all byte values elsewhere). */
static struct kern_weight rnd_rows(uint32_t t, uint8_t *buf, int64_t n_in, int64_t n_out) {
    struct kern_weight w = {
        .type = t, .n_in = n_in, .n_out = n_out, .row_bytes = quant_row_size(t, n_in), .data = buf};
    for (size_t i = 0; i < w.row_bytes * (size_t)n_out; i++)
        buf[i] = (uint8_t)rnd_u32();
    for (int64_t r = 0; r < n_out; r++)
        for (int64_t s = 0; s < n_in / 256; s++) {
            uint8_t *row = buf + (size_t)r * w.row_bytes;
            if (t == QT_Q6_K) {
                ((struct block_q6_K *)row)[s].d = quant_f32_to_f16(rnd_f(0.00005f, 0.001f));
                continue;
            }
            if (t == QT_Q3_K) {
                ((struct block_q3_K *)row)[s].d = quant_f32_to_f16(rnd_f(0.0005f, 0.01f));
                continue;
            }
            /* Q4_K / Q5_K: d, dmin first */
            const quant_half dd[2] = {quant_f32_to_f16(rnd_f(0.0001f, 0.002f)),
                                      quant_f32_to_f16(rnd_f(0.0f, 0.004f))};
            memcpy(row + (size_t)s * quant_row_size(t, 256), dd, 4);
        }
    return w;
}

static void rnd_act(uint8_t *a, size_t as, int na, int64_t n_in) {
    static float x[8192];
    for (int c = 0; c < na; c++) {
        for (int64_t i = 0; i < n_in; i++)
            x[i] = rnd_f(-1.0f, 1.0f) * (rnd_u32() % 50 == 0 ? 20.0f : 1.0f);
        T_ASSERT(quant_act_row_ref(QT_Q8_K, x, a + (size_t)c * as, n_in) == 0);
    }
}

static void check_layout(uint32_t t) {
    enum { NIN = 512, NOUT = 37 }; /* 2 super-blocks, 3 panels, the last one partial */
    static uint8_t wbuf[NOUT * 210 * 2];
    static float row[NIN], got[NIN];
    struct kern_weight w = rnd_rows(t, wbuf, NIN, NOUT);
    const char *name = quant_info(t)->name;
    void *p = NULL;
    size_t bytes = 0;
    T_ASSERT(panel_recs(t, NIN) == 2);
    T_ASSERT(panel_pack(&w, NULL, &p, &bytes) == 0);
    T_ASSERT(bytes == panel_bytes(&w) && bytes == 3 * 2 * panel_rec_bytes(t));
    for (int64_t r = 0; r < 48; r++) {
        const int real = r < NOUT;
        if (real) T_ASSERT(quant_dequant_row_ref(t, wbuf + (size_t)r * w.row_bytes, row, NIN) == 0);
        for (int64_t b = 0; b < NIN / 32; b++) {
            const float d = quant_f16_to_f32(panel_d(t, p, NIN, r, b));
            const float dmin = quant_f16_to_f32(panel_m(t, p, NIN, r, b));
            for (int k = 0; k < 32; k++) {
                int sc, mn;
                /* Q4_K: a scale and min per 32, Q6_K: a scale per 16 */
                const int k16 = t == QT_Q6_K || t == QT_Q3_K, lim = t == QT_Q6_K ? 32 : 4;
                panel_sub(t, p, NIN, r, k16 ? 2 * b + k / 16 : b, &sc, &mn);
                const int q = panel_q(t, p, NIN, r, b, k);
                const int ok =
                    k16 ? q >= -lim && q < lim && mn == 0 && dmin == 0
                        : q >= 0 && q < (t == QT_Q5_K ? 32 : 16) && sc < 64 && mn >= 0 && mn < 64;
                T_ASSERTF(ok, "%s row %ld block %ld: q %d sc %d mn %d", name, (long)r, (long)b, q,
                          sc, mn);
                const float v =
                    k16 ? d * (float)sc * (float)q : d * (float)sc * (float)q - dmin * (float)mn;
                /* padding: d, scales and mins 0 (Q6_K's u = 0 is q = -32, Q3_K's -4) */
                T_ASSERTF(real ? v == row[b * 32 + k] : (sc | mn) == 0 && d == 0 && dmin == 0,
                          "%s row %ld block %ld element %d: %g vs %g", name, (long)r, (long)b, k, v,
                          real ? row[b * 32 + k] : 0.0f);
            }
        }
        if (real) { /* the embedding lookup of a tied head */
            w.panel = p;
            panel_get_row(&w, r, got);
            w.panel = NULL;
            T_ASSERTF(memcmp(got, row, sizeof row) == 0, "%s panel_get_row %ld", name, (long)r);
        }
    }
    panel_free(p, bytes);
}

static void test_layout(void) {
    for (size_t ti = 0; ti < sizeof k_types / sizeof k_types[0]; ti++)
        check_layout(k_types[ti]);
}

static void check_type_bits(enum kern_isa isa, uint32_t t);

/* panel_gemm_ref against vec_dot_ref, and the ISA's kernel against panel_gemm_ref (bits). */
static void check_kernel_bits(enum kern_isa isa) {
    if (!kern_isa_supported(isa))
        T_SKIP("no %s on this CPU (or tile state refused)", kern_isa_name(isa));
    T_ASSERT(kern_init(isa) == 0);
    for (size_t ti = 0; ti < sizeof k_types / sizeof k_types[0]; ti++)
        check_type_bits(isa, k_types[ti]);
}

static void check_type_bits(enum kern_isa isa, uint32_t t) {
    const kern_panel_fn fn = kern_panel_kernel(t);
    T_ASSERTF(fn != NULL, "no %s %s panel kernel", kern_isa_name(isa), quant_info(t)->name);
    enum { NA = 70, NG = 4096, LDY = 208 };
    static const int64_t ns[] = {256, 512, 2048, NG};
    static const int64_t outs[] = {1, 15, 16, 17, 200};
    static const int nas[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 32, 47, 48, 64, NA};
    static uint8_t wbuf[200 * 210 * (NG / 256)];
    static uint8_t abuf[NA * (292 * (NG / 256) + 64)];
    static float y[NA * LDY], want[NA * LDY], wv[NG], av[NG];
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
        for (size_t oi = 0; oi < sizeof outs / sizeof outs[0]; oi++) {
            const int64_t n = ns[ni], no = outs[oi];
            struct kern_weight w = rnd_rows(t, wbuf, n, no);
            const size_t as = (quant_row_size(QT_Q8_K, n) + 63) & ~(size_t)63;
            rnd_act(abuf, as, NA, n);
            void *p = NULL;
            size_t bytes = 0;
            T_ASSERT(panel_pack(&w, NULL, &p, &bytes) == 0);
            panel_gemm_ref(t, n, p, 0, no, abuf, as, NA, want, LDY);
            for (int c = 0; c < NA; c += 7)
                for (int64_t r = 0; r < no; r++) {
                    const uint8_t *wr = wbuf + (size_t)r * w.row_bytes, *ar = abuf + c * as;
                    const float ref = quant_vec_dot_ref(t)(n, wr, ar);
                    T_ASSERT(quant_dequant_row_ref(t, wr, wv, n) == 0);
                    const struct block_q8_K *ab = (const struct block_q8_K *)ar;
                    double mag = 0;
                    for (int64_t i = 0; i < n; i++) {
                        av[i] = ab[i / 256].d * (float)ab[i / 256].qs[i % 256];
                        mag += fabs((double)wv[i] * av[i]);
                    }
                    const double e = fabs((double)want[c * LDY + r] - ref) / (mag > 0 ? mag : 1);
                    T_ASSERTF(e < 1e-5, "%s n %ld rows %ld: ref error %g", quant_info(t)->name,
                              (long)n, (long)no, e);
                }
            for (size_t ai = 0; ai < sizeof nas / sizeof nas[0]; ai++) {
                const int na = nas[ai];
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
                                T_ASSERTF(g == -12345.0f, "n %ld: row %ld outside [%ld, %ld)",
                                          (long)n, (long)r, (long)r0, (long)r1);
                            else
                                T_ASSERTF(memcmp(&g, &want[c * LDY + r], 4) == 0,
                                          "%s %s n %ld rows %ld na %d act %d row %ld: %.9g vs %.9g",
                                          kern_isa_name(isa), quant_info(t)->name, (long)n,
                                          (long)no, na, c, (long)r, g, want[c * LDY + r]);
                        }
                }
            }
            panel_free(p, bytes);
        }
}

static void test_kernel_bits(void) {
    check_kernel_bits(KERN_ISA_AVX512);
}

static void test_kernel_bits_amx(void) {
    if (kern_isa_supported(KERN_ISA_AMX)) { /* a kernel of its own, not VNNI's */
        T_ASSERT(kern_init(KERN_ISA_AVX512) == 0);
        const kern_panel_fn v4 = kern_panel_kernel(QT_Q4_K), v6 = kern_panel_kernel(QT_Q6_K),
                            v5 = kern_panel_kernel(QT_Q5_K), v3 = kern_panel_kernel(QT_Q3_K);
        T_ASSERT(kern_init(KERN_ISA_AMX) == 0);
        T_ASSERT(kern_panel_kernel(QT_Q4_K) != v4 && kern_panel_kernel(QT_Q6_K) != v6 &&
                 kern_panel_kernel(QT_Q5_K) != v5 && kern_panel_kernel(QT_Q3_K) != v3);
    }
    check_kernel_bits(KERN_ISA_AMX);
}

/* AVX2 has no K-quant panel kernels: the weights are not packed there (row kernels run). */
static void test_avx2_rows(void) {
    if (!kern_isa_supported(KERN_ISA_AVX2)) T_SKIP("no AVX2 on this CPU");
    static uint8_t wbuf[16 * 210];
    T_ASSERT(kern_init(KERN_ISA_AVX2) == 0);
    for (size_t ti = 0; ti < sizeof k_types / sizeof k_types[0]; ti++) {
        struct kern_weight w = rnd_rows(k_types[ti], wbuf, 256, 16);
        T_ASSERT(kern_panel_kernel(k_types[ti]) == NULL && !panel_supported(&w));
    }
    T_ASSERT(kern_init(KERN_ISA_AUTO) == 0);
}

static void check_matmul_invariant(uint32_t t) {
    enum { M = 37, NIN = 2048, NOUT = 200 };
    static uint8_t wbuf[NOUT * 210 * (NIN / 256)];
    static float X[M * NIN], Y1[M * NOUT], YM[M * NOUT], Y2[M * NOUT], want[M * NOUT];
    static uint8_t scratch[M * NIN * 4 + 4096] __attribute__((aligned(64)));
    static uint8_t act[M * 292 * (NIN / 256)];
    const char *name = quant_info(t)->name;
    struct kern_weight w = rnd_rows(t, wbuf, NIN, NOUT);
    if (!panel_supported(&w)) T_SKIP("no K-quant panel kernel on this CPU (needs AVX-512)");
    struct pool *p1 = NULL, *p2 = NULL;
    T_ASSERT(pool_create(1, &p1) == 0);
    T_ASSERT(pool_create(2, &p2) == 0);
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
    T_ASSERTF(memcmp(Y1, YM, sizeof Y1) == 0, "%s: M=1 and M=%d (2 threads) differ", name, M);
    T_ASSERTF(memcmp(Y2, YM, sizeof Y2) == 0, "%s: 1 and 2 threads differ", name);
    const size_t as = quant_row_size(QT_Q8_K, NIN);
    for (int m = 0; m < M; m++)
        kern_quant_act(t, X + m * NIN, act + (size_t)m * as, NIN);
    panel_gemm_ref(t, NIN, p, 0, NOUT, act, as, M, want, NOUT);
    T_ASSERTF(memcmp(want, YM, sizeof want) == 0, "%s: kern_matmul is not the panel kernel", name);
    panel_free(p, bytes);
    pool_destroy(p1);
    pool_destroy(p2);
}

static void test_matmul_invariant(void) {
    T_ASSERT(kern_init(KERN_ISA_AUTO) == 0);
    for (size_t ti = 0; ti < sizeof k_types / sizeof k_types[0]; ti++)
        check_matmul_invariant(k_types[ti]);
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {
        T_CASE(test_layout),    T_CASE(test_kernel_bits),      T_CASE(test_kernel_bits_amx),
        T_CASE(test_avx2_rows), T_CASE(test_matmul_invariant), {0},
    };
    return t_main(argc, argv, cases);
}
