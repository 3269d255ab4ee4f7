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

void attn_block_ref(const struct attn_tile *t, const struct attn_block *b) {
    const int hd = t->hd, hdv = t->hdv, g = t->g;
    const float cap = t->softcap;
    float *s = b->s;
    for (int r = 0; r < t->n_rows; r++) {
        const int lo = t->lo[r] > b->b0 ? t->lo[r] - b->b0 : 0;
        const int hi = t->hi[r] < b->b0 + ATTN_BLOCK - 1 ? t->hi[r] - b->b0 : ATTN_BLOCK - 1;
        if (lo > hi) continue;
        for (int h = 0; h < g; h++) {
            const size_t i = (size_t)r * (size_t)g + (size_t)h;
            const float *q = t->q + i * (size_t)hd;
            float mb = -INFINITY;
            for (int j = lo; j <= hi; j++) {
                float sc = dot_ref(q, b->k + (size_t)j * (size_t)hd, hd);
                if (cap > 0.0f) sc = cap * tanhf(sc * (1.0f / cap));
                s[j] = sc;
                if (sc > mb) mb = sc;
            }
            const float mn = mb > t->m[i] ? mb : t->m[i];
            /* 0 on the first block; exactly expf(0) = 1 while the max stays */
            const float corr = mn == t->m[i] ? 1.0f : expf(t->m[i] - mn);
            float sum = 0.0f;
            for (int j = lo; j <= hi; j++) {
                s[j] = expf(s[j] - mn);
                sum += s[j];
            }
            t->l[i] = t->l[i] * corr + sum;
            t->m[i] = mn;
            float *a = t->acc + i * (size_t)hdv;
            for (int d = 0; d < hdv; d++) a[d] *= corr;
            for (int j = lo; j <= hi; j++) {
                const float p = s[j];
                const float *v = b->v + (size_t)j * (size_t)hdv;
                for (int d = 0; d < hdv; d++) a[d] += p * v[d];
            }
        }
    }
}
