/*
 * test_quant — the scalar reference code in engine/kernels/quant.c, and kern_matmul's
 * determinism (same result for a row whatever the batch size or thread count).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/kern.h"
#include "engine/kernels/pool.h"
#include "engine/kernels/quant.h"
#include "tests/unit/harness.h"

#define FIXTURE "tests/fixtures/quant/quant_fixture.bin"

static uint32_t rd_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint8_t *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)sz);
    if (buf && fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)sz;
    return buf;
}

/* ---- random weights ---------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rng_u32(void) {
    return (uint32_t)(t_xorshift64(&rng_state) >> 32);
}

/* Uniform in [-1, 1). */
static float rng_f(void) {
    return (float)((double)rng_u32() / 2147483648.0 - 1.0);
}

/* The weight types kern_matmul supports, and where their fp16 scale fields sit. */
static const struct {
    uint32_t type;
    int scale_off[2]; /* byte offsets of fp16 d (and dmin / m), -1 when absent */
} wtypes[] = {
    {QT_F32, {-1, -1}},   {QT_F16, {-1, -1}},   {QT_BF16, {-1, -1}}, {QT_Q4_0, {0, -1}},
    {QT_Q4_1, {0, 2}},    {QT_Q5_0, {0, -1}},   {QT_Q5_1, {0, 2}},   {QT_Q8_0, {0, -1}},
    {QT_Q2_K, {80, 82}},  {QT_Q3_K, {108, -1}}, {QT_Q4_K, {0, 2}},   {QT_Q5_K, {0, 2}},
    {QT_Q6_K, {208, -1}}, {QT_IQ4_NL, {0, -1}},
};
#define N_WTYPES ((int)(sizeof(wtypes) / sizeof(wtypes[0])))

/* rows x n random weights of wtypes[k]: random bits, then sane scales (or random floats). */
static uint8_t *random_weights(int k, int64_t rows, int64_t n) {
    uint32_t type = wtypes[k].type;
    size_t rb = quant_row_size(type, n);
    uint8_t *w = malloc(rb * (size_t)rows);
    T_ASSERT(w && rb);
    if (type == QT_F32 || type == QT_F16 || type == QT_BF16) {
        for (int64_t i = 0; i < rows * n; i++) {
            float f = rng_f();
            if (type == QT_F32)
                memcpy(w + 4 * i, &f, 4);
            else if (type == QT_F16)
                quant_f16_row_ref(&f, w + 2 * i, 1);
            else
                quant_bf16_row_ref(&f, w + 2 * i, 1);
        }
        return w;
    }
    for (size_t i = 0; i < rb * (size_t)rows; i++)
        w[i] = (uint8_t)rng_u32();
    const struct quant_info *qi = quant_info(type);
    for (size_t b = 0; b < rb * (size_t)rows / (size_t)qi->size; b++)
        for (int s = 0; s < 2; s++) {
            if (wtypes[k].scale_off[s] < 0) continue;
            /* Either sign: a zero level times a negative scale gives -0, which must stay. */
            float sc = 0.002f + 0.02f * (rng_f() + 1);
            quant_half h = quant_f32_to_f16(rng_u32() & 1 ? sc : -sc);
            memcpy(w + b * (size_t)qi->size + (size_t)wtypes[k].scale_off[s], &h, 2);
        }
    return w;
}

/* An n_out x n weight matrix of wtypes[k] with random contents; free((void *)w.data). */
static struct kern_weight random_matrix(int k, int64_t n_out, int64_t n) {
    struct kern_weight w = {.type = wtypes[k].type,
                            .n_in = n,
                            .n_out = n_out,
                            .row_bytes = quant_row_size(wtypes[k].type, n)};
    w.data = random_weights(k, n_out, n);
    return w;
}

static float *random_acts(int64_t count) {
    float *x = malloc(sizeof(float) * (size_t)count);
    T_ASSERT(x);
    for (int64_t i = 0; i < count; i++)
        x[i] = rng_f() * 2.5f;
    return x;
}

/* (b) vec_dot_ref against dequantize-then-dot in double. Two bounds, both normalised by
 * S = sum_i |w_i * x_i|: against the dequantized activation the only error is float
 * rounding (1e-5; 2e-3 for Q8_1's fp16 sum s); against the f32 activation it is the
 * activation quantization (1e-2 for the 8-bit formats and BF16, 2e-3 for F16, 1e-5 F32). */
static void test_vec_dot_ref_vs_dequant(void) {
    const int64_t n = 1024;
    float *wf = malloc(sizeof(float) * n), *af = malloc(sizeof(float) * n);
    uint8_t *act = aligned_alloc(64, 8192);
    T_ASSERT(wf && af && act);
    for (int k = 0; k < N_WTYPES; k++) {
        uint32_t type = wtypes[k].type;
        const struct quant_info *qi = quant_info(type);
        quant_vec_dot_fn dot = quant_vec_dot_ref(type);
        T_ASSERTF(dot && qi->supported, "%s has no reference dot", qi->name);
        for (int trial = 0; trial < 20; trial++) {
            uint8_t *w = random_weights(k, 1, n);
            float *x = random_acts(n);
            if (trial == 1) memset(x, 0, sizeof(float) * 256); /* an all-zero Q8_K block */
            T_ASSERT(quant_act_row_ref(qi->vec_dot_type, x, act, n) == 0);
            T_ASSERT(quant_dequant_row_ref(type, w, wf, n) == 0);
            T_ASSERT(quant_dequant_row_ref(qi->vec_dot_type, act, af, n) == 0);
            double exact_q = 0, exact_x = 0, S = 0;
            for (int64_t i = 0; i < n; i++) {
                exact_q += (double)wf[i] * af[i];
                exact_x += (double)wf[i] * x[i];
                S += fabs((double)wf[i] * x[i]);
            }
            double got = dot(n, w, act);
            double tol_q = qi->vec_dot_type == QT_Q8_1 ? 2e-3 : 1e-5;
            double tol_x = type == QT_F32 ? 1e-5 : type == QT_F16 ? 2e-3 : 1e-2;
            T_ASSERTF(fabs(got - exact_q) / S < tol_q, "%s: dot %.9g, dequantized %.9g (S %g)",
                      qi->name, got, exact_q, S);
            T_ASSERTF(fabs(got - exact_x) / S < tol_x, "%s: dot %.9g, f32 %.9g (S %g)", qi->name,
                      got, exact_x, S);
            free(w);
            free(x);
        }
    }
    free(wf);
    free(af);
    free(act);
}

/* Activation quantizers: round trip error within half a step, and Q8_K bsums/Q8_1 s. */
static void test_act_quantizers(void) {
    const int64_t n = 512;
    float *x = random_acts(n), *back = malloc(sizeof(float) * n);
    uint8_t *q = malloc(quant_row_size(QT_Q8_K, n) + quant_row_size(QT_Q8_1, n));
    T_ASSERT(back && q);
    x[3] = -7.0f; /* Q8_K keeps the sign of the largest element: it maps to +-127 exactly */
    quant_q8_K_row_ref(x, q, n);
    const struct block_q8_K *k = (const void *)q;
    T_ASSERT(k[0].qs[3] == -127 || k[0].qs[3] == 127);
    for (int b = 0; b < 2; b++)
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int i = 0; i < 16; i++)
                s += k[b].qs[16 * g + i];
            T_ASSERT(k[b].bsums[g] == s);
        }
    quant_dequant_row_ref(QT_Q8_K, q, back, n);
    for (int64_t i = 0; i < n; i++)
        T_ASSERT(fabsf(back[i] - x[i]) <= fabsf(k[i / 256].d) * 0.5f * 1.0001f);
    quant_q8_1_row_ref(x, q, n);
    const struct block_q8_1 *b1 = (const void *)q;
    for (int b = 0; b < n / 32; b++) {
        int s = 0;
        for (int i = 0; i < 32; i++)
            s += b1[b].qs[i];
        float want = (float)s * quant_f16_to_f32(b1[b].d);
        T_ASSERT(fabsf(quant_f16_to_f32(b1[b].s) - want) <= fabsf(want) * 1e-3f + 1e-6f);
    }
    /* Ties to even in the Q8_0 quantizer, as ggml-cpu on x86 (127/amax, nearest even). */
    float h[32] = {127.0f, 0.5f, -0.5f, 1.5f, -2.5f};
    struct block_q8_0 b0;
    quant_q8_0_row_ref(h, &b0, 32);
    T_ASSERT(b0.qs[0] == 127 && b0.qs[1] == 0 && b0.qs[2] == 0 && b0.qs[3] == 2 && b0.qs[4] == -2);
    free(x);
    free(back);
    free(q);
}

static void test_type_table(void) {
    T_ASSERT(quant_info(4) == NULL && quant_info(5) == NULL && quant_info(QT_COUNT) == NULL);
    T_ASSERT(quant_info(31) == NULL && quant_info(1000) == NULL);
    T_ASSERT(strcmp(quant_info(QT_Q4_K)->name, "Q4_K") == 0);
    T_ASSERT(quant_info(QT_Q4_K)->vec_dot_type == QT_Q8_K);
    T_ASSERT(quant_info(QT_Q5_1)->vec_dot_type == QT_Q8_1);
    T_ASSERT(quant_info(QT_IQ4_NL)->vec_dot_type == QT_Q8_0);
    T_ASSERT(quant_info(QT_BF16)->vec_dot_type == QT_BF16);
    T_ASSERT(quant_row_size(QT_Q4_K, 640) == 0); /* not a multiple of 256 */
    T_ASSERT(quant_row_size(QT_Q4_K, 1024) == 4 * 144);
    T_ASSERT(quant_row_size(QT_Q8_K, 256) == 292 && sizeof(struct block_q8_K) == 292);
    T_ASSERT(quant_row_size(QT_Q6_K, 256) == sizeof(struct block_q6_K));
    T_ASSERT(quant_row_size(QT_Q5_K, 256) == sizeof(struct block_q5_K));
    T_ASSERT(quant_row_size(QT_Q3_K, 256) == sizeof(struct block_q3_K));
    T_ASSERT(quant_row_size(QT_Q2_K, 256) == sizeof(struct block_q2_K));
    T_ASSERT(quant_row_size(QT_Q5_1, 32) == sizeof(struct block_q5_1));
    float f[32];
    T_ASSERT(quant_dequant_row_ref(16, f, f, 256) == -1); /* IQ2_XXS: known, unsupported */
    T_ASSERT(quant_vec_dot_ref(16) == NULL && quant_vec_dot_ref(QT_Q8_K) == NULL);
}

/* ---- kern ---------------------------------------------------------------------------------- */

/* Every ISA this machine runs: the active vec_dot against the reference (normalised 1e-4). */
static void test_kern_vec_dot_vs_ref(void) {
    const int64_t n = 2048;
    uint8_t *act = aligned_alloc(64, 16384);
    T_ASSERT(act);
    for (int isa = KERN_ISA_REF; isa <= KERN_ISA_AVX512; isa++) {
        if (!kern_isa_supported((enum kern_isa)isa)) continue;
        T_ASSERT(kern_init((enum kern_isa)isa) == 0 && kern_active_isa() == isa);
        for (int k = 0; k < N_WTYPES; k++) {
            uint32_t type = wtypes[k].type;
            quant_vec_dot_fn dot = kern_vec_dot(type), ref = quant_vec_dot_ref(type);
            T_ASSERT(dot && ref);
            for (int trial = 0; trial < 10; trial++) {
                uint8_t *w = random_weights(k, 1, n);
                float *x = random_acts(n), *wf = malloc(sizeof(float) * n);
                T_ASSERT(wf);
                kern_quant_act(type, x, act, n);
                quant_dequant_row_ref(type, w, wf, n);
                double S = 0;
                for (int64_t i = 0; i < n; i++)
                    S += fabs((double)wf[i] * x[i]);
                float a = dot(n, w, act), b = ref(n, w, act);
                T_ASSERTF(fabs((double)a - b) / S < 1e-4, "%s %s: %.9g vs ref %.9g",
                          kern_isa_name((enum kern_isa)isa), quant_info(type)->name, a, b);
                free(w);
                free(x);
                free(wf);
            }
        }
    }
    free(act);
}

/* (c) kern_matmul: row m of the result is the same bits for M = 1 and M = 7, for 1 and 2
 * threads, for a sub-range of rows, and equals kern_vec_dot on that row; for every ISA. */
static void test_kern_matmul_deterministic(void) {
    struct pool *p2 = NULL;
    T_ASSERT(pool_create(2, &p2) == 0);
    const int M = 7;
    for (int isa = KERN_ISA_REF; isa <= KERN_ISA_AVX512; isa++) {
        if (!kern_isa_supported((enum kern_isa)isa)) continue;
        T_ASSERT(kern_init((enum kern_isa)isa) == 0);
        for (int k = 0; k < N_WTYPES; k++) {
            const int64_t n = 512, n_out = (k % 3 == 0) ? 1000 : 37;
            struct kern_weight w = random_matrix(k, n_out, n);
            uint8_t *wd = (uint8_t *)w.data;
            float *X = random_acts(M * n);
            const int ldy = (int)n_out + 3;
            float *Y7 = calloc((size_t)M * ldy, 4), *Y1 = calloc((size_t)ldy, 4);
            void *scratch = aligned_alloc(64, kern_act_bytes(&w, M));
            T_ASSERT(Y7 && Y1 && scratch);
            kern_matmul(p2, &w, X, M, Y7, ldy, scratch);
            for (int m = 0; m < M; m++) {
                memset(Y1, 0, sizeof(float) * ldy);
                kern_matmul(NULL, &w, X + m * n, 1, Y1, ldy, scratch);
                T_ASSERTF(memcmp(Y1, Y7 + (size_t)m * ldy, sizeof(float) * n_out) == 0,
                          "%s %s: row %d differs between M=1 and M=7",
                          kern_isa_name((enum kern_isa)isa), quant_info(w.type)->name, m);
                kern_quant_act(w.type, X + m * n, scratch, n);
                for (int64_t o = 0; o < n_out; o++) {
                    float d = kern_vec_dot(w.type)(n, wd + (size_t)o * w.row_bytes, scratch);
                    T_ASSERT(memcmp(&d, &Y7[(size_t)m * ldy + o], 4) == 0);
                }
                T_ASSERT(Y7[(size_t)m * ldy + n_out] == 0.0f); /* ldy padding untouched */
            }
            free(wd);
            free(X);
            free(Y7);
            free(Y1);
            free(scratch);
        }
    }
    pool_destroy(p2);
}

/* kern_get_row (the ISA's dequant) is bit-identical to the reference, for every ISA here. */
static void test_kern_get_row(void) {
    for (int isa = KERN_ISA_REF; isa <= KERN_ISA_AVX512; isa++) {
        if (!kern_isa_supported((enum kern_isa)isa)) continue;
        T_ASSERT(kern_init((enum kern_isa)isa) == 0);
        for (int k = 0; k < N_WTYPES; k++) {
            const int64_t n = 256, rows = 5;
            struct kern_weight w = random_matrix(k, rows, n);
            const uint8_t *wd = w.data;
            float got[256], want[256];
            kern_get_row(&w, 3, got);
            quant_dequant_row_ref(w.type, wd + 3 * w.row_bytes, want, n);
            for (int i = 0; i < 256; i++)
                T_ASSERTF(memcmp(&got[i], &want[i], 4) == 0, "%s %s element %d: %g vs %g",
                          kern_isa_name((enum kern_isa)isa), quant_info(w.type)->name, i, got[i],
                          want[i]);
            free((void *)w.data);
        }
    }
}

/* (a) Dequantization matches the gguf Python package on its own fixture, bit for bit. */
static void test_dequant_matches_gguf_py(void) {
    size_t len = 0;
    uint8_t *buf = read_file(FIXTURE, &len);
    if (!buf) T_SKIP("%s missing (run tests/fixtures/quant/gen_quant_fixture.py)", FIXTURE);
    T_ASSERT(len >= 12 && memcmp(buf, "GQFX", 4) == 0 && rd_u32(buf + 4) == 1);
    uint32_t n_entries = rd_u32(buf + 8);
    size_t off = 12;
    int seen_types = 0;
    for (uint32_t e = 0; e < n_entries; e++) {
        T_ASSERT(off + 12 <= len);
        uint32_t type = rd_u32(buf + off), n = rd_u32(buf + off + 4),
                 nbytes = rd_u32(buf + off + 8);
        off += 12;
        T_ASSERT(off + nbytes + 4 * (size_t)n <= len);
        T_ASSERTF(quant_row_size(type, n) == nbytes, "type %u: row size %zu, fixture %u", type,
                  quant_row_size(type, n), nbytes);
        float *got = malloc(4 * (size_t)n), *want = malloc(4 * (size_t)n);
        T_ASSERT(got && want);
        memcpy(want, buf + off + nbytes, 4 * (size_t)n);
        T_ASSERTF(quant_dequant_row_ref(type, buf + off, got, n) == 0, "type %u unsupported", type);
        for (uint32_t i = 0; i < n; i++)
            T_ASSERTF(memcmp(&got[i], &want[i], 4) == 0, "%s element %u: got %.9g want %.9g",
                      quant_info(type)->name, i, got[i], want[i]);
        free(got);
        free(want);
        off += nbytes + 4 * (size_t)n;
        seen_types++;
    }
    free(buf);
    T_ASSERT(seen_types >= 13);
}

/* (d) Every half converts to f32 and back to the same bits (NaNs stay NaNs). */
static void test_f16_roundtrip_exhaustive(void) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = quant_f16_to_f32((quant_half)h);
        quant_half back = quant_f32_to_f16(f);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
            T_ASSERTF(f != f && (back & 0x7c00) == 0x7c00 && (back & 0x3ff), "nan %04x", h);
            continue;
        }
        T_ASSERTF(back == h, "half %04x -> %g -> %04x", h, f, back);
    }
}

/* f32 -> f16 rounds to nearest even: check midpoints between neighbouring halves. */
static void test_f16_rounding(void) {
    for (uint32_t h = 0; h < 0x7bff; h++) {
        float lo = quant_f16_to_f32((quant_half)h), hi = quant_f16_to_f32((quant_half)(h + 1));
        double mid = ((double)lo + hi) / 2;
        float fm = (float)mid;
        T_ASSERT((double)fm == mid); /* every midpoint is representable in f32 */
        quant_half want = (h & 1) ? (quant_half)(h + 1) : (quant_half)h;
        T_ASSERTF(quant_f32_to_f16(fm) == want, "midpoint after %04x", h);
        T_ASSERT(quant_f32_to_f16(nextafterf(fm, 0)) == h);
        T_ASSERT(quant_f32_to_f16(nextafterf(fm, INFINITY)) == h + 1);
        T_ASSERT(quant_f32_to_f16(-fm) == (want | 0x8000));
    }
    T_ASSERT(quant_f32_to_f16(65520.0f) == 0x7c00);
    T_ASSERT(quant_f32_to_f16(nextafterf(65520.0f, 0)) == 0x7bff);
    T_ASSERT(quant_f32_to_f16(1e-9f) == 0);
    T_ASSERT(quant_f32_to_f16(INFINITY) == 0x7c00);
}

static void test_bf16_roundtrip_exhaustive(void) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = quant_bf16_to_f32((uint16_t)h);
        uint16_t back = quant_f32_to_bf16(f);
        if ((h & 0x7f80) == 0x7f80 && (h & 0x7f)) {
            T_ASSERTF(f != f && (back & 0x7f80) == 0x7f80 && (back & 0x7f), "nan %04x", h);
            continue;
        }
        T_ASSERTF(back == h, "bf16 %04x -> %g -> %04x", h, f, back);
    }
    /* Ties to even. */
    T_ASSERT(quant_f32_to_bf16(quant_bf16_to_f32(0x3f80) + 0x1p-8f) == 0x3f80);
    T_ASSERT(quant_f32_to_bf16(quant_bf16_to_f32(0x3f81) + 0x1p-8f) == 0x3f82);
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {
        T_CASE(test_dequant_matches_gguf_py),
        T_CASE(test_f16_roundtrip_exhaustive),
        T_CASE(test_f16_rounding),
        T_CASE(test_bf16_roundtrip_exhaustive),
        T_CASE(test_type_table),
        T_CASE(test_act_quantizers),
        T_CASE(test_vec_dot_ref_vs_dequant),
        T_CASE(test_kern_vec_dot_vs_ref),
        T_CASE(test_kern_matmul_deterministic),
        T_CASE(test_kern_get_row),
        {0},
    };
    return t_main(argc, argv, cases);
}
