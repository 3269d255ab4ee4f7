/*
 * test_attn — the attention tile kernel (engine/kernels/attn.h).
 *
 * A small driver here does what engine/cpu_attn.c does with the cache (f32 K/V arrays
 * instead of cache blocks): per tile it walks the key blocks aligned to absolute positions
 * twice (K rows and scores, softmax, V rows and P.V), copies the visible rows, zeroes the
 * group slack and calls the kernels. Checked:
 *   - each SIMD kernel against the scalar reference, normalised error
 *     max |fast - ref| / max |v| < 1e-4 per output row (the slack is summation order, FMA and
 *     the ~2 ulp vector exp; observed values are printed); with the probabilities rounded to
 *     F16 (as for an F16 cache) < 2e-3, since one ulp of exp may move a probability by one
 *     F16 step (2^-11 relative);
 *   - the softmax against a direct one in double, with and without the F16 rounding
 *     (which must give F16 values);
 *   - batch invariance, per kernel: a row's output is bit-identical alone, in one tile with
 *     all rows, and in tiles cut at other places (which changes which query vectors a SIMD
 *     kernel pairs and which keys share a block of the tile), with causal and sliding-window
 *     ranges;
 *   - value rows nobody may see are never read (they hold NaN here);
 *   - F16 conversion is exact.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/attn.h"
#include "engine/kernels/quant.h"
#include "harness.h"

#define MAX_POS 200
#define MAX_ROWS 40
#define MAX_G 4
#define MAX_HD 256

struct shape {
    int g, hd, hdv;
    float softcap;
    int window; /* 0: causal over everything */
};

static int g_round_p; /* probabilities rounded to F16 (the F16-cache path) */

static uint32_t g_rng = 12345;
static float rnd(void) { /* uniform in [-1, 1) */
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)((g_rng >> 8) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

/* The problem: keys/values for positions [0, MAX_POS), rows with positions and queries. */
static float g_k[MAX_POS * MAX_HD], g_v[MAX_POS * MAX_HD];
static float g_q[MAX_ROWS * MAX_G * MAX_HD];
static int32_t g_pos[MAX_ROWS];

static void make_problem(const struct shape *sh, int n_rows, int first_pos, float qscale) {
    for (int i = 0; i < MAX_POS * sh->hd; i++) g_k[i] = rnd();
    for (int i = 0; i < MAX_POS * sh->hdv; i++) g_v[i] = rnd();
    for (int i = 0; i < n_rows * sh->g * sh->hd; i++) g_q[i] = rnd() * qscale;
    for (int r = 0; r < n_rows; r++) g_pos[r] = first_pos + r;
}

static float g_scr_q[MAX_ROWS * MAX_G * MAX_HD], g_scr_acc[MAX_ROWS * MAX_G * MAX_HD];
static float g_p[MAX_ROWS * MAX_G * (MAX_POS + 2 * ATTN_BLOCK)];
static float g_kb[ATTN_BLOCK * MAX_HD], g_vb[ATTN_BLOCK * MAX_HD];

/* Rows [r0, r1) as one tile; out[r][h][hdv]. */
static void run_tile(const struct attn_ops *ops, const struct shape *sh, int r0, int r1,
                     float *out) {
    const int R = r1 - r0, g = sh->g, hd = sh->hd, hdv = sh->hdv;
    int32_t lo[MAX_ROWS], hi[MAX_ROWS];
    int tlo = 1 << 30, thi = -1;
    for (int i = 0; i < R; i++) {
        const int p = g_pos[r0 + i];
        lo[i] = sh->window > 0 && p - sh->window + 1 > 0 ? p - sh->window + 1 : 0;
        hi[i] = p;
        tlo = lo[i] < tlo ? lo[i] : tlo;
        thi = hi[i] > thi ? hi[i] : thi;
    }
    memcpy(g_scr_q, g_q + (size_t)r0 * g * hd, (size_t)R * g * hd * sizeof(float));
    const int p0 = tlo & ~(ATTN_BLOCK - 1), ld = (thi - p0 + ATTN_BLOCK) & ~(ATTN_BLOCK - 1);
    for (size_t i = 0; i < (size_t)R * g * ld; i++) g_p[i] = NAN; /* columns nobody sees */
    const struct attn_tile t = {R,  g,  hd,      hdv,       sh->softcap, g_round_p,
                                lo, hi, g_scr_q, g_scr_acc, g_p,         p0,
                                ld};
    attn_tile_begin(&t);
    for (int pass = 0; pass < 2; pass++) {
        const int w = pass ? hdv : hd;
        float *buf = pass ? g_vb : g_kb;
        const float *src = pass ? g_v : g_k;
        for (int b0 = p0; b0 <= thi; b0 += ATTN_BLOCK) {
            const int j0 = tlo > b0 ? tlo - b0 : 0;
            const int j1 = thi < b0 + ATTN_BLOCK - 1 ? thi - b0 : ATTN_BLOCK - 1;
            /* Rows the kernel must not use: NaN (K outside the group slack, V outside range). */
            for (int i = 0; i < ATTN_BLOCK * w; i++) buf[i] = NAN;
            for (int j = j0; j <= j1; j++)
                memcpy(buf + j * w, src + (b0 + j) * w, (size_t)w * sizeof(float));
            const struct attn_block blk = {b0, buf};
            if (pass) {
                ops->pv(&t, &blk);
                continue;
            }
            const int q0 = j0 & ~(ATTN_KGROUP - 1), q1 = j1 | (ATTN_KGROUP - 1);
            for (int j = q0; j < j0; j++) memset(buf + j * hd, 0, (size_t)hd * sizeof(float));
            for (int j = j1 + 1; j <= q1; j++) memset(buf + j * hd, 0, (size_t)hd * sizeof(float));
            ops->scores(&t, &blk);
        }
        if (!pass) attn_tile_softmax(ops, &t);
    }
    attn_tile_end(&t, out + (size_t)r0 * g * hdv, (size_t)g * hdv);
}

/* All rows, cut into tiles of `step` rows starting with a first tile of `first` rows. */
static void run_all(const struct attn_ops *ops, const struct shape *sh, int n_rows, int first,
                    int step, float *out) {
    int r = 0;
    int n = first;
    while (r < n_rows) {
        const int r1 = r + n < n_rows ? r + n : n_rows;
        run_tile(ops, sh, r, r1, out);
        r = r1;
        n = step;
    }
}

static const struct shape k_shapes[] = {
    {4, 256, 256, 0.0f, 0},   /* Gemma 3 270M / 1B, global layer */
    {4, 256, 256, 0.0f, 48},  /* ... sliding layer (small window) */
    {2, 256, 256, 50.0f, 40}, /* Gemma 2: softcap, g = 2 */
    {1, 128, 128, 0.0f, 0},   /* g = 1 */
    {3, 72, 40, 0.0f, 37},    /* odd g, head dims with tails, hd_v != hd */
    {1, 20, 256, 0.0f, 0},    /* tiny hd, large hd_v */
};
#define N_SHAPES (sizeof(k_shapes) / sizeof(k_shapes[0]))

static float g_out_a[MAX_ROWS * MAX_G * MAX_HD], g_out_b[MAX_ROWS * MAX_G * MAX_HD];
static float g_out_c[MAX_ROWS * MAX_G * MAX_HD];

/* Rows start at position 160 (after earlier "cached" positions), so tiles span blocks. */
static void check_invariance(enum kern_isa isa) {
    if (!kern_isa_supported(isa)) T_SKIP("%s not supported here", kern_isa_name(isa));
    const struct attn_ops *ops = attn_ops_for(isa);
    const int n_rows = MAX_ROWS - 3, first = MAX_POS - MAX_ROWS;
    for (size_t si = 0; si < 2 * N_SHAPES; si++) {
        g_round_p = si >= N_SHAPES; /* every shape with and without F16 probabilities */
        const struct shape *sh = &k_shapes[si % N_SHAPES];
        const size_t n = (size_t)n_rows * sh->g * sh->hdv;
        make_problem(sh, n_rows, first, 3.0f);
        run_all(ops, sh, n_rows, n_rows, n_rows, g_out_a);     /* one tile */
        run_all(ops, sh, n_rows, 1, 1, g_out_b);               /* one row at a time */
        T_ASSERTF(memcmp(g_out_a, g_out_b, n * sizeof(float)) == 0,
                  "%s shape %zu: one tile vs rows alone differ", ops->name, si);
        for (int f = 1; f <= 5; f += 2) {
            run_all(ops, sh, n_rows, f, 7, g_out_c);
            T_ASSERTF(memcmp(g_out_a, g_out_c, n * sizeof(float)) == 0,
                      "%s shape %zu: tiles of 7 after %d differ", ops->name, si, f);
        }
        for (size_t i = 0; i < n; i++)
            T_ASSERTF(isfinite(g_out_a[i]), "%s shape %zu: non-finite output", ops->name, si);
    }
    g_round_p = 0;
}

/* The softmax kernel alone, on lengths 1..70 with flat and peaked scores and -inf-free
 * inputs: against a direct computation in double (relative 5e-7 plus the rounding of the
 * f32 difference s - max; with F16 rounding: every value an F16 value within one F16 step
 * of the direct one). */
static void check_softmax(enum kern_isa isa) {
    if (!kern_isa_supported(isa)) T_SKIP("%s not supported here", kern_isa_name(isa));
    const struct attn_ops *ops = attn_ops_for(isa);
    float p[80];
    double want[80];
    for (int rnd_p = 0; rnd_p < 2; rnd_p++)
        for (int n = 1; n <= 70; n++)
            for (int sc = 0; sc < 3; sc++) {
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j < n; j++) {
                    p[j] = rnd() * (sc == 0 ? 0.1f : sc == 1 ? 3.0f : 30.0f);
                    mx = p[j] > mx ? p[j] : mx;
                }
                for (int j = 0; j < n; j++) sum += (want[j] = exp(p[j] - mx));
                for (int j = n; j < 80; j++) p[j] = -12345.0f; /* must stay untouched */
                ops->softmax(p, n, rnd_p);
                for (int j = 0; j < n; j++) {
                    const double w = want[j] / sum;
                    /* exp's own error plus that of the f32 difference s - max (half an ulp) */
                    const double rel = 5e-7 + 1.2e-7 * fabs(log(want[j]));
                    /* F16 subnormals (below 2^-14) are 2^-24 apart */
                    const double tol = fabs(w) * (rnd_p ? 1.0 / 1024 + rel : rel) +
                                       (rnd_p ? 0x1p-24 : 1e-30);
                    T_ASSERTF(fabs(p[j] - w) <= tol, "%s n %d scale %d round %d: p[%d] %g, want %g",
                              ops->name, n, sc, rnd_p, j, (double)p[j], w);
                    if (rnd_p)
                        T_ASSERTF(quant_f16_to_f32(quant_f32_to_f16(p[j])) == p[j],
                                  "%s: p[%d] = %g is not an F16 value", ops->name, j, (double)p[j]);
                }
                for (int j = n; j < 80; j++)
                    T_ASSERTF(p[j] == -12345.0f, "%s n %d: wrote past the range", ops->name, n);
            }
}

static void check_vs_ref(enum kern_isa isa, int round_p) {
    if (!kern_isa_supported(isa)) T_SKIP("%s not supported here", kern_isa_name(isa));
    const struct attn_ops *ops = attn_ops_for(isa), *ref = attn_ops_for(KERN_ISA_REF);
    T_ASSERT(ops != ref);
    const int n_rows = MAX_ROWS;
    double worst = 0.0;
    size_t worst_shape = 0;
    float worst_qs = 0.0f;
    const float qscales[] = {0.1f, 1.0f, 4.0f}; /* flat to peaked softmax */
    const double bound = round_p ? 2e-3 : 1e-4;
    g_round_p = round_p;
    for (size_t si = 0; si < N_SHAPES; si++)
        for (size_t qi = 0; qi < sizeof(qscales) / sizeof(qscales[0]); qi++) {
            const struct shape *sh = &k_shapes[si];
            make_problem(sh, n_rows, MAX_POS - MAX_ROWS, qscales[qi]);
            run_all(ref, sh, n_rows, 9, 9, g_out_a);
            run_all(ops, sh, n_rows, 9, 9, g_out_b);
            float vmax = 0.0f;
            for (int i = 0; i < MAX_POS * sh->hdv; i++)
                vmax = fabsf(g_v[i]) > vmax ? fabsf(g_v[i]) : vmax;
            for (size_t i = 0; i < (size_t)n_rows * sh->g * sh->hdv; i++) {
                const double e = fabs((double)g_out_a[i] - (double)g_out_b[i]) / vmax;
                T_ASSERTF(e < bound, "%s shape %zu qscale %g: element %zu: ref %g fast %g",
                          ops->name, si, (double)qscales[qi], i, (double)g_out_a[i],
                          (double)g_out_b[i]);
                if (e > worst) {
                    worst = e;
                    worst_shape = si;
                    worst_qs = qscales[qi];
                }
            }
        }
    g_round_p = 0;
    printf("    %s vs scalar%s: max normalised error %.3g (bound %g; shape %zu, qscale %g)\n",
           ops->name, round_p ? " (F16 probabilities)" : "", worst, bound, worst_shape,
           (double)worst_qs);
}

static void check_cvt(enum kern_isa isa) {
    if (!kern_isa_supported(isa)) T_SKIP("%s not supported here", kern_isa_name(isa));
    const struct attn_ops *ops = attn_ops_for(isa);
    static uint16_t h[65536 + 5];
    static float a[65536 + 5];
    for (int i = 0; i < 65536 + 5; i++) h[i] = (uint16_t)(i * 40503u);
    ops->cvt_f16(h, a, 65536 + 5);
    for (int i = 0; i < 65536 + 5; i++) {
        const float e = quant_f16_to_f32(h[i]);
        T_ASSERTF(memcmp(&e, &a[i], sizeof(float)) == 0 || (isnan(e) && isnan(a[i])),
                  "%s: f16 %04x -> %g, want %g", ops->name, h[i], (double)a[i], (double)e);
    }
}

/* The reference itself against a direct two-pass softmax in double. */
static void test_ref_vs_direct(void) {
    const struct attn_ops *ref = attn_ops_for(KERN_ISA_REF);
    const int n_rows = 12;
    for (size_t si = 0; si < N_SHAPES; si++) {
        const struct shape *sh = &k_shapes[si];
        make_problem(sh, n_rows, 100, 2.0f);
        run_all(ref, sh, n_rows, 5, 5, g_out_a);
        for (int r = 0; r < n_rows; r++)
            for (int h = 0; h < sh->g; h++) {
                const float *q = g_q + ((size_t)r * sh->g + h) * sh->hd;
                const int p = g_pos[r];
                const int lo = sh->window > 0 && p - sh->window + 1 > 0 ? p - sh->window + 1 : 0;
                double s[MAX_POS], mx = -INFINITY, sum = 0.0;
                for (int j = lo; j <= p; j++) {
                    double d = 0.0;
                    for (int i = 0; i < sh->hd; i++) d += (double)q[i] * g_k[j * sh->hd + i];
                    if (sh->softcap > 0.0f) d = sh->softcap * tanh(d / sh->softcap);
                    s[j] = d;
                    mx = d > mx ? d : mx;
                }
                for (int j = lo; j <= p; j++) sum += (s[j] = exp(s[j] - mx));
                for (int d = 0; d < sh->hdv; d++) {
                    double o = 0.0;
                    for (int j = lo; j <= p; j++) o += s[j] * g_v[j * sh->hdv + d];
                    o /= sum;
                    const float got = g_out_a[((size_t)r * sh->g + h) * sh->hdv + d];
                    T_ASSERTF(fabs(o - got) < 1e-4, "shape %zu row %d head %d dim %d: %g vs %g",
                              si, r, h, d, (double)got, o);
                }
            }
    }
}

static void test_ref_invariance(void) { check_invariance(KERN_ISA_REF); }
static void test_avx2_invariance(void) { check_invariance(KERN_ISA_AVX2); }
static void test_avx2_vs_ref(void) { check_vs_ref(KERN_ISA_AVX2, 0); }
static void test_avx2_vs_ref_f16p(void) { check_vs_ref(KERN_ISA_AVX2, 1); }
static void test_ref_softmax(void) { check_softmax(KERN_ISA_REF); }
static void test_avx2_softmax(void) { check_softmax(KERN_ISA_AVX2); }
static void test_avx512_softmax(void) { check_softmax(KERN_ISA_AVX512); }
static void test_avx2_cvt_f16(void) { check_cvt(KERN_ISA_AVX2); }
static void test_avx512_invariance(void) { check_invariance(KERN_ISA_AVX512); }
static void test_avx512_vs_ref(void) { check_vs_ref(KERN_ISA_AVX512, 0); }
static void test_avx512_vs_ref_f16p(void) { check_vs_ref(KERN_ISA_AVX512, 1); }

int main(int argc, char **argv) {
    static const struct t_case cases[] = {
        T_CASE(test_ref_vs_direct),   T_CASE(test_ref_invariance), T_CASE(test_avx2_invariance),
        T_CASE(test_avx2_vs_ref),     T_CASE(test_avx2_cvt_f16),   T_CASE(test_avx512_invariance),
        T_CASE(test_avx512_vs_ref),   T_CASE(test_avx2_vs_ref_f16p),
        T_CASE(test_avx512_vs_ref_f16p),
        T_CASE(test_ref_softmax),     T_CASE(test_avx2_softmax),   T_CASE(test_avx512_softmax),
        {0},
    };
    return t_main(argc, argv, cases);
}
