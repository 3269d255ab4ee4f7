/*
 * attn — dispatch and the instruction-set-independent parts of the attention tile kernel
 * (see attn.h).
 */
#include <math.h>
#include <string.h>

#include "engine/kernels/attn.h"

static const struct attn_ops g_ref = {attn_block_ref, attn_cvt_f16_ref, "scalar"};
static const struct attn_ops g_avx2 = {attn_block_avx2, attn_cvt_f16_avx2, "avx2"};
static const struct attn_ops g_avx512 = {attn_block_avx512, attn_cvt_f16_avx2, "avx512"};

const struct attn_ops *attn_ops_for(enum kern_isa isa) {
    if (isa == KERN_ISA_AVX512 && kern_isa_supported(KERN_ISA_AVX512)) return &g_avx512;
    if ((isa == KERN_ISA_AVX2 || isa == KERN_ISA_AVX512) && kern_isa_supported(KERN_ISA_AVX2))
        return &g_avx2;
    return &g_ref;
}

void attn_tile_begin(const struct attn_tile *t) {
    const size_t n = (size_t)t->n_rows * (size_t)t->g;
    for (size_t i = 0; i < n; i++) {
        t->m[i] = -INFINITY;
        t->l[i] = 0.0f;
    }
    memset(t->acc, 0, n * (size_t)t->hdv * sizeof(float));
}

void attn_tile_end(const struct attn_tile *t, float *out, size_t ld_row) {
    const int hdv = t->hdv;
    for (int r = 0; r < t->n_rows; r++)
        for (int h = 0; h < t->g; h++) {
            const size_t i = (size_t)r * (size_t)t->g + (size_t)h;
            const float inv = 1.0f / t->l[i];
            const float *a = t->acc + i * (size_t)hdv;
            float *o = out + (size_t)r * ld_row + (size_t)h * (size_t)hdv;
            for (int d = 0; d < hdv; d++) o[d] = a[d] * inv;
        }
}
