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
        uint32_t type = rd_u32(buf + off), n = rd_u32(buf + off + 4), nbytes = rd_u32(buf + off + 8);
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
        {0},
    };
    return t_main(argc, argv, cases);
}
