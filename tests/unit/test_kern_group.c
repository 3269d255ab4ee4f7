/*
 * test_kern_group — kern_matmul_group (several weights on one input in one pool run) against
 * separate kern_matmul calls: the same bits for every output, for mixed weight types (so two
 * activation types share the scratch), 1..3 threads, M = 1 (the decode path with its
 * prefetching row steps) and larger M, concatenated and zipped groups with an epilogue.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/kern.h"
#include "engine/kernels/pool.h"
#include "engine/kernels/quant.h"
#include "tests/unit/harness.h"

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint32_t rng_u32(void) {
    return (uint32_t)(t_xorshift64(&rng) >> 32);
}
static float rng_f(void) { /* [-1, 1) */
    return (float)((double)rng_u32() / 2147483648.0 - 1.0);
}

/* Types of the bundled model's matmuls, and where their fp16 scales sit in a block. */
static const struct {
    uint32_t type;
    int scale_off[2]; /* byte offsets of fp16 d (and dmin), -1 when absent */
} wtypes[] = {
    {QT_Q5_0, {0, -1}}, {QT_Q8_0, {0, -1}}, {QT_Q4_K, {0, 2}}, {QT_Q6_K, {208, -1}},
};
#define N_WTYPES ((int)(sizeof(wtypes) / sizeof(wtypes[0])))

/* n_out x n random weights of wtypes[k]: random bits, sane scales. free((void *)w.data). */
static struct kern_weight random_matrix(int k, int64_t n_out, int64_t n) {
    struct kern_weight w = {.type = wtypes[k].type, .n_in = n, .n_out = n_out,
                            .row_bytes = quant_row_size(wtypes[k].type, n)};
    const size_t bytes = w.row_bytes * (size_t)n_out;
    uint8_t *d = malloc(bytes);
    T_ASSERT(d);
    for (size_t i = 0; i < bytes; i++)
        d[i] = (uint8_t)rng_u32();
    const size_t bs = (size_t)quant_info(w.type)->size;
    for (size_t b = 0; b < bytes / bs; b++)
        for (int s = 0; s < 2; s++) {
            if (wtypes[k].scale_off[s] < 0) continue;
            quant_half h = quant_f32_to_f16(0.002f + 0.02f * (rng_f() + 1));
            memcpy(d + b * bs + (size_t)wtypes[k].scale_off[s], &h, 2);
        }
    w.data = d;
    return w;
}

static float *random_acts(int64_t count) {
    float *x = malloc(sizeof(float) * (size_t)count);
    T_ASSERT(x);
    for (int64_t i = 0; i < count; i++)
        x[i] = rng_f() * 3.0f;
    return x;
}

/* Epilogue used below: a[o] = a[o] * 0.5 + b[o] for the rows [o0, o1) of every act row. */
struct epi_arg {
    float *a;
    const float *b;
    int M, ld;
};

static void epi_combine(void *arg, int64_t o0, int64_t o1) {
    const struct epi_arg *e = arg;
    for (int m = 0; m < e->M; m++)
        for (int64_t o = o0; o < o1; o++)
            e->a[(size_t)m * e->ld + o] = e->a[(size_t)m * e->ld + o] * 0.5f +
                                          e->b[(size_t)m * e->ld + o];
}

/* Concatenated groups of 3 weights (n_in 256 for the K-quants' 256-element blocks):
 * Q5_0 + Q8_0 + Q4_K, Q6_K + Q5_0 + Q5_0 (row counts not multiples of 16 included). */
static void test_group_equals_separate(void) {
    static const int combos[][3] = {{0, 1, 2}, {3, 0, 0}, {1, 1, 1}, {2, 3, 2}};
    static const int64_t rows[3] = {200, 48, 37};
    static const int Ms[] = {1, 2, 5, 13};
    const int64_t n = 512;
    float *X = random_acts(13 * n);
    for (int ci = 0; ci < (int)(sizeof(combos) / sizeof(combos[0])); ci++) {
        struct kern_weight w[3];
        for (int i = 0; i < 3; i++)
            w[i] = random_matrix(combos[ci][i], rows[i], n);
        for (int mi = 0; mi < (int)(sizeof(Ms) / sizeof(Ms[0])); mi++) {
            const int M = Ms[mi];
            float *ref[3], *got[3];
            size_t sep = 0;
            for (int i = 0; i < 3; i++) {
                ref[i] = malloc(sizeof(float) * (size_t)(M * rows[i]));
                got[i] = malloc(sizeof(float) * (size_t)(M * rows[i]));
                T_ASSERT(ref[i] && got[i]);
                if (kern_act_bytes(&w[i], M) > sep) sep = kern_act_bytes(&w[i], M);
            }
            struct kern_mm_out outs[3];
            for (int i = 0; i < 3; i++)
                outs[i] = (struct kern_mm_out){&w[i], got[i], (int)rows[i]};
            const size_t gb = kern_act_bytes_group(outs, 3, M);
            void *scratch = aligned_alloc(64, ((gb > sep ? gb : sep) + 63) & ~(size_t)63);
            T_ASSERT(scratch);
            for (int i = 0; i < 3; i++)
                kern_matmul(NULL, &w[i], X, M, ref[i], (int)rows[i], scratch);
            for (int nt = 1; nt <= 3; nt++) {
                struct pool *p = NULL;
                T_ASSERT(pool_create(nt, &p) == 0);
                for (int i = 0; i < 3; i++)
                    memset(got[i], 0xFF, sizeof(float) * (size_t)(M * rows[i]));
                kern_matmul_group(p, outs, 3, X, M, scratch, NULL, NULL);
                for (int i = 0; i < 3; i++)
                    T_ASSERTF(!memcmp(ref[i], got[i], sizeof(float) * (size_t)(M * rows[i])),
                              "combo %d output %d (%s) M=%d threads=%d differs", ci, i,
                              quant_info(w[i].type)->name, M, nt);
                pool_destroy(p);
            }
            free(scratch);
            for (int i = 0; i < 3; i++) {
                free(ref[i]);
                free(got[i]);
            }
        }
        for (int i = 0; i < 3; i++)
            free((void *)w[i].data);
    }
    free(X);
}

/* Zipped group (gate/up shape) with an epilogue: the same as two matmuls then the
 * elementwise combination over the whole output. */
static void test_zipped_group_epilogue(void) {
    const int64_t n = 256, rows = 1000;
    float *X = random_acts(7 * n);
    for (int k = 0; k < N_WTYPES; k++) {
        struct kern_weight a = random_matrix(k, rows, n), b = random_matrix((k + 1) % N_WTYPES, rows, n);
        for (int M = 1; M <= 7; M += 3) {
            const size_t sz = sizeof(float) * (size_t)(M * rows);
            float *ra = malloc(sz), *rb = malloc(sz), *ga = malloc(sz), *gb = malloc(sz);
            T_ASSERT(ra && rb && ga && gb);
            struct kern_mm_out outs[2] = {{&a, ga, (int)rows}, {&b, gb, (int)rows}};
            const size_t need = kern_act_bytes_group(outs, 2, M) + kern_act_bytes(&a, M);
            void *scratch = aligned_alloc(64, (need + 63) & ~(size_t)63);
            T_ASSERT(scratch);
            kern_matmul(NULL, &a, X, M, ra, (int)rows, scratch);
            kern_matmul(NULL, &b, X, M, rb, (int)rows, scratch);
            struct epi_arg er = {ra, rb, M, (int)rows};
            epi_combine(&er, 0, rows);
            for (int nt = 1; nt <= 3; nt++) {
                struct pool *p = NULL;
                T_ASSERT(pool_create(nt, &p) == 0);
                memset(ga, 0xFF, sz);
                struct epi_arg eg = {ga, gb, M, (int)rows};
                kern_matmul_group(p, outs, 2, X, M, scratch, epi_combine, &eg);
                T_ASSERTF(!memcmp(ra, ga, sz), "%s+%s M=%d threads=%d: zipped group differs",
                          quant_info(a.type)->name, quant_info(b.type)->name, M, nt);
                pool_destroy(p);
            }
            free(scratch);
            free(ra);
            free(rb);
            free(ga);
            free(gb);
        }
        free((void *)a.data);
        free((void *)b.data);
    }
    free(X);
}

/* The scratch of a group: one region per distinct activation type, never more than the sum
 * of the separate sizes, and exactly one region when all weights share the type. */
static void test_group_scratch_size(void) {
    struct kern_weight q5 = random_matrix(0, 16, 256), q8 = random_matrix(1, 16, 256),
                       q4k = random_matrix(2, 16, 256);
    struct kern_mm_out same[2] = {{&q5, NULL, 0}, {&q8, NULL, 0}};
    struct kern_mm_out mixed[3] = {{&q5, NULL, 0}, {&q8, NULL, 0}, {&q4k, NULL, 0}};
    T_ASSERT(kern_act_bytes_group(same, 2, 3) == kern_act_bytes(&q5, 3));
    T_ASSERT(kern_act_bytes_group(mixed, 3, 3) == kern_act_bytes(&q5, 3) + kern_act_bytes(&q4k, 3));
    T_ASSERT(kern_act_bytes_group(mixed, 3, 0) == 0);
    free((void *)q5.data);
    free((void *)q8.data);
    free((void *)q4k.data);
}

int main(int argc, char **argv) {
    kern_init(KERN_ISA_AUTO);
    static const struct t_case cases[] = {
        T_CASE(test_group_equals_separate),
        T_CASE(test_zipped_group_epilogue),
        T_CASE(test_group_scratch_size),
        {0},
    };
    return t_main(argc, argv, cases);
}
