/*
 * test_vec — the row kernels of engine/kernels/vec.h: every instruction set this CPU runs
 * against the scalar reference. F16 conversions and GeGLU must be bit-identical (also at
 * the edges: subnormals, ties, infinities, NaN, beyond +-10); norm, RoPE, the GELU table
 * and the PLE mix are the same C source compiled with other flags, so they agree to float
 * rounding (FMA contraction may differ between a portable and a native reference).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/kern.h"
#include "engine/kernels/quant.h"
#include "engine/kernels/vec.h"
#include "tests/unit/harness.h"

#define N 1000

static float rnd(uint64_t *s, float scale) {
    return ((float)(t_xorshift64(s) >> 40) / (float)(1 << 24) * 2.0f - 1.0f) * scale;
}

static void close_or_fail(const char *what, const char *isa, const float *a, const float *b,
                          int n, float tol) {
    for (int i = 0; i < n; i++) {
        const float d = fabsf(a[i] - b[i]), s = fabsf(b[i]) > 1.0f ? fabsf(b[i]) : 1.0f;
        T_ASSERTF(d <= tol * s, "%s (%s) [%d]: %.9g vs ref %.9g", what, isa, i, a[i], b[i]);
    }
}

static void test_vec_isas_match_ref(void) {
    const struct vec_ops *ref = vec_ops_for(KERN_ISA_REF);
    T_ASSERT(ref == &vec_ops_ref);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    float *x = malloc(N * sizeof(float)), *a = malloc(N * sizeof(float));
    float *b = malloc(N * sizeof(float)), *u = malloc(N * sizeof(float));
    float *ta = malloc(VEC_GELU_TAB * sizeof(float)), *tb = malloc(VEC_GELU_TAB * sizeof(float));
    uint16_t *ha = malloc(N * sizeof(uint16_t)), *hb = malloc(N * sizeof(uint16_t));
    T_ASSERT(x && a && b && u && ta && tb && ha && hb);
    for (int i = 0; i < N; i++) {
        x[i] = rnd(&seed, i < N / 2 ? 12.0f : 1e-4f);
        u[i] = rnd(&seed, 3.0f);
    }
    const float edge[] = {0.0f,     -0.0f,        65504.0f, 65520.0f, -70000.0f, 5.96e-8f,
                          2.98e-8f, 1e-10f,       INFINITY, -INFINITY, NAN,      10.0f,
                          -10.0f,   1.00048828125f, 9.99f,  -9.99f};
    memcpy(x, edge, sizeof edge);
    ref->gelu_table(tb);
    for (int isa = KERN_ISA_AVX2; isa <= KERN_ISA_AVX512; isa++) {
        if (!kern_isa_supported((enum kern_isa)isa)) continue;
        const struct vec_ops *v = vec_ops_for((enum kern_isa)isa);
        T_ASSERT(v != ref);
        /* F16: bit for bit */
        v->f32_to_f16(x, ha, N);
        ref->f32_to_f16(x, hb, N);
        for (int i = 0; i < N; i++)
            T_ASSERTF(ha[i] == hb[i] || (isnan(x[i]) && (ha[i] & 0x7c00) == 0x7c00),
                      "f32_to_f16 (%s) of %g: %04x vs ref %04x", v->name, x[i], ha[i], hb[i]);
        v->f16_to_f32(hb, a, N);
        ref->f16_to_f32(hb, b, N);
        T_ASSERT(memcmp(a + 11, b + 11, (N - 11) * sizeof(float)) == 0);
        v->round_f16(x + 11, a, N - 11);
        ref->round_f16(x + 11, b, N - 11);
        T_ASSERT(memcmp(a, b, (N - 11) * sizeof(float)) == 0);
        /* GeGLU on one table: bit for bit */
        memcpy(a, x + 11, (N - 11) * sizeof(float));
        memcpy(b, x + 11, (N - 11) * sizeof(float));
        v->geglu(tb, a, u, N - 11);
        ref->geglu(tb, b, u, N - 11);
        T_ASSERT(memcmp(a, b, (N - 11) * sizeof(float)) == 0);
        /* the same source under other flags: to rounding */
        v->gelu_table(ta);
        for (int i = 0; i < VEC_GELU_TAB; i++)
            T_ASSERTF(ta[i] == tb[i] || (isnan(ta[i]) && isnan(tb[i])) ||
                          fabsf(ta[i] - tb[i]) <= 1e-3f * fabsf(tb[i]),
                      "gelu_table (%s) [%d]: %g vs ref %g", v->name, i, ta[i], tb[i]);
        v->rms_norm(a, x + 16, u, N - 16, 1e-6f);
        ref->rms_norm(b, x + 16, u, N - 16, 1e-6f);
        close_or_fail("rms_norm", v->name, a, b, N - 16, 1e-6f);
        float cs[2 * 64];
        for (int i = 0; i < 64; i++) {
            cs[i] = cosf(0.1f * (float)i);
            cs[64 + i] = sinf(0.1f * (float)i);
        }
        memcpy(a, x + 16, 128 * sizeof(float));
        memcpy(b, x + 16, 128 * sizeof(float));
        v->rope_neox(a, cs, 64);
        ref->rope_neox(b, cs, 64);
        close_or_fail("rope_neox", v->name, a, b, 128, 1e-6f);
        memcpy(a, u, N * sizeof(float));
        memcpy(b, u, N * sizeof(float));
        v->ple_mix(a, x + 16, 2.0f, 0.70710678f, N - 16);
        ref->ple_mix(b, x + 16, 2.0f, 0.70710678f, N - 16);
        close_or_fail("ple_mix", v->name, a, b, N - 16, 1e-6f);
    }
    free(x), free(a), free(b), free(u), free(ta), free(tb), free(ha), free(hb);
}

/* The reference F16 conversion is quant.h's (round to nearest even). */
static void test_vec_ref_f16(void) {
    const struct vec_ops *ref = vec_ops_for(KERN_ISA_REF);
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t in = (uint16_t)h, back;
        float f;
        ref->f16_to_f32(&in, &f, 1);
        T_ASSERT(memcmp(&f, &(float){quant_f16_to_f32(in)}, sizeof f) == 0);
        ref->f32_to_f16(&f, &back, 1);
        T_ASSERT(back == quant_f32_to_f16(f));
    }
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {
        T_CASE(test_vec_isas_match_ref),
        T_CASE(test_vec_ref_f16),
        {0},
    };
    return t_main(argc, argv, cases);
}
