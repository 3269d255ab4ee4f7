/*
 * attn — dispatch and the instruction-set-independent parts of the attention tile kernel
 * (see attn.h).
 */
#include <math.h>
#include <string.h>

#include "engine/kernels/attn.h"

static const struct attn_ops g_ref = {attn_scores_ref, attn_softmax_ref, attn_pv_ref,
                                      attn_cvt_f16_ref, "scalar"};
static const struct attn_ops g_avx2 = {attn_scores_avx2, attn_softmax_avx2, attn_pv_avx2,
                                       attn_cvt_f16_avx2, "avx2"};
static const struct attn_ops g_avx512 = {attn_scores_avx512, attn_softmax_avx512,
                                         attn_pv_avx512, attn_cvt_f16_avx2, "avx512"};

const struct attn_ops *attn_ops_for(enum kern_isa isa) {
    if (isa >= KERN_ISA_AVX512 && kern_isa_supported(KERN_ISA_AVX512)) return &g_avx512;
    if (isa >= KERN_ISA_AVX2 && kern_isa_supported(KERN_ISA_AVX2))
        return &g_avx2;
    return &g_ref;
}

void attn_tile_begin(const struct attn_tile *t) {
    memset(t->acc, 0, (size_t)t->n_rows * (size_t)t->g * (size_t)t->hdv * sizeof(float));
}

void attn_tile_softmax(const struct attn_ops *ops, const struct attn_tile *t) {
    const float cap = t->softcap;
    for (int r = 0; r < t->n_rows; r++) {
        const int n = t->hi[r] - t->lo[r] + 1;
        for (int h = 0; h < t->g; h++) {
            float *p = t->p + ((size_t)r * (size_t)t->g + (size_t)h) * (size_t)t->ld_p +
                       (size_t)(t->lo[r] - t->p0);
            if (cap > 0.0f)
                for (int j = 0; j < n; j++) p[j] = cap * tanhf(p[j] * (1.0f / cap));
            ops->softmax(p, n, t->round_p);
        }
    }
}

void attn_pv_pairs(const struct attn_tile *t, const struct attn_block *b, attn_pv2_fn fn) {
    const int hdv = t->hdv, nq = t->n_rows * t->g;
    const size_t off = (size_t)(b->b0 - t->p0), ld = (size_t)t->ld_p;
    for (int i = 0; i < nq; i += 2) {
        int lo[2], hi[2], in[2];
        attn_pair_ranges(t, b, i, lo, hi, in);
        const float *p0 = t->p + (size_t)i * ld + off, *p1 = p0 + ld;
        float *acc0 = t->acc + (size_t)i * (size_t)hdv, *acc1 = acc0 + hdv;
        if (in[0] && in[1] && lo[0] == lo[1] && hi[0] == hi[1]) {
            fn(acc0, acc1, p0, p1, b->kv, hdv, lo[0], hi[0]);
        } else {
            if (in[0]) fn(acc0, NULL, p0, NULL, b->kv, hdv, lo[0], hi[0]);
            if (in[1]) fn(acc1, NULL, p1, NULL, b->kv, hdv, lo[1], hi[1]);
        }
    }
}

void attn_tile_end(const struct attn_tile *t, float *out, size_t ld_row) {
    const size_t hdv = (size_t)t->hdv;
    for (int r = 0; r < t->n_rows; r++)
        memcpy(out + (size_t)r * ld_row, t->acc + (size_t)r * (size_t)t->g * hdv,
               (size_t)t->g * hdv * sizeof(float));
}
