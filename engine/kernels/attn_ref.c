/*
 * attn_ref — scalar reference of the attention tile kernel (see attn.h for the algorithm).
 * The SIMD kernels are checked against this one in tests/unit/test_attn.c.
 */
#include <math.h>

#include "engine/kernels/attn.h"
#include "engine/kernels/quant.h"

void attn_cvt_f16_ref(const uint16_t *src, float *dst, int n) {
    for (int i = 0; i < n; i++) dst[i] = quant_f16_to_f32(src[i]);
}

/* Fixed-order dot product (8 partial sums). */
static float dot_ref(const float *a, const float *b, int n) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

void attn_scores_ref(const struct attn_tile *t, const struct attn_block *b) {
    for (int r = 0; r < t->n_rows; r++) {
        int lo, hi;
        if (!attn_block_range(t, b, r, &lo, &hi)) continue;
        for (int h = 0; h < t->g; h++) {
            const size_t i = (size_t)r * (size_t)t->g + (size_t)h;
            const float *q = t->q + i * (size_t)t->hd;
            float *s = t->p + i * (size_t)t->ld_p + (size_t)(b->b0 - t->p0);
            for (int j = lo; j <= hi; j++) s[j] = dot_ref(q, b->kv + (size_t)j * t->hd, t->hd);
        }
    }
}

void attn_softmax_ref(float *p, int n, int round_f16) {
    float m = -INFINITY;
    for (int j = 0; j < n; j++) m = p[j] > m ? p[j] : m;
    double sum = 0.0;
    for (int j = 0; j < n; j++) {
        p[j] = expf(p[j] - m);
        sum += (double)p[j];
    }
    const float inv = (float)(1.0 / sum);
    for (int j = 0; j < n; j++) {
        const float x = p[j] * inv;
        p[j] = round_f16 ? quant_f16_to_f32(quant_f32_to_f16(x)) : x;
    }
}

void attn_pv_ref(const struct attn_tile *t, const struct attn_block *b) {
    const int hdv = t->hdv;
    for (int r = 0; r < t->n_rows; r++) {
        int lo, hi;
        if (!attn_block_range(t, b, r, &lo, &hi)) continue;
        for (int h = 0; h < t->g; h++) {
            const size_t i = (size_t)r * (size_t)t->g + (size_t)h;
            const float *p = t->p + i * (size_t)t->ld_p + (size_t)(b->b0 - t->p0);
            float *a = t->acc + i * (size_t)hdv;
            for (int j = lo; j <= hi; j++) {
                const float *v = b->kv + (size_t)j * (size_t)hdv;
                for (int d = 0; d < hdv; d++) a[d] += p[j] * v[d];
            }
        }
    }
}
