/*
 * attn_avx2 — AVX2 + FMA + F16C attention tile kernel (algorithm and contract in attn.h).
 *
 * Scores: two query vectors x ATTN_KGROUP keys per step (8 accumulators of 8 lanes, each
 * an FMA chain over the head dim from zero), each reduced by the same hadd tree. Key groups
 * are aligned to absolute positions, so a score's bits depend only on (q, k), never on
 * which query vector it was paired with or which other keys share its group.
 * Softmax: vector exp (Cephes polynomial, ~2 ulp), masked lanes are exactly 0, the block
 * sum is a fixed tree over the ATTN_BLOCK lanes of the block.
 * P.V: two query vectors of one row share each V load (32 dims x 2 in 8 registers), else 64
 * dims in 8 registers; per element always acc * corr, then the keys in ascending order.
 */
#include <immintrin.h>
#include <math.h>

#include "engine/kernels/attn.h"

#define NV (ATTN_BLOCK / 8) /* vectors of 8 per block */

void attn_cvt_f16_avx2(const uint16_t *src, float *dst, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
}

/* Four 8-lane accumulators -> their four sums, one fixed tree per lane:
 * ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7)). */
static inline __m128 red4(__m256 a, __m256 b, __m256 c, __m256 d) {
    const __m256 ab = _mm256_hadd_ps(a, b);
    const __m256 cd = _mm256_hadd_ps(c, d);
    const __m256 x = _mm256_hadd_ps(ab, cd);
    return _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
}

/* The head-dim tail (hd % 8) of the dots of q with 4 consecutive keys (row stride ld),
 * added after the vector part in ascending order. */
static inline void dot_tail4(const float *q, const float *k, int ld, int d0, int hd, float *s) {
    for (int i = 0; i < 4; i++)
        for (int d = d0; d < hd; d++) s[i] = fmaf(q[d], k[(size_t)i * (size_t)ld + d], s[i]);
}

/* Scores of keys [j0, j1) (j0, j1 multiples of ATTN_KGROUP) for one or two query vectors. */
static void scores2(const float *q0, const float *q1, const float *k, int hd, int j0, int j1,
                    float *s0, float *s1) {
    const int hd8 = hd & ~7;
    for (int j = j0; j < j1; j += 4) {
        const float *k0 = k + (size_t)j * (size_t)hd, *k1 = k0 + hd, *k2 = k1 + hd,
                    *k3 = k2 + hd;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
        if (q1) {
            for (int d = 0; d < hd8; d += 8) {
                const __m256 x = _mm256_loadu_ps(q0 + d), y = _mm256_loadu_ps(q1 + d);
                const __m256 v0 = _mm256_loadu_ps(k0 + d), v1 = _mm256_loadu_ps(k1 + d);
                const __m256 v2 = _mm256_loadu_ps(k2 + d), v3 = _mm256_loadu_ps(k3 + d);
                a0 = _mm256_fmadd_ps(x, v0, a0);
                a1 = _mm256_fmadd_ps(x, v1, a1);
                a2 = _mm256_fmadd_ps(x, v2, a2);
                a3 = _mm256_fmadd_ps(x, v3, a3);
                b0 = _mm256_fmadd_ps(y, v0, b0);
                b1 = _mm256_fmadd_ps(y, v1, b1);
                b2 = _mm256_fmadd_ps(y, v2, b2);
                b3 = _mm256_fmadd_ps(y, v3, b3);
            }
        } else {
            for (int d = 0; d < hd8; d += 8) {
                const __m256 x = _mm256_loadu_ps(q0 + d);
                a0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k0 + d), a0);
                a1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k1 + d), a1);
                a2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k2 + d), a2);
                a3 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k3 + d), a3);
            }
        }
        _mm_storeu_ps(s0 + j, red4(a0, a1, a2, a3));
        if (hd8 < hd) dot_tail4(q0, k0, hd, hd8, hd, s0 + j);
        if (q1) {
            _mm_storeu_ps(s1 + j, red4(b0, b1, b2, b3));
            if (hd8 < hd) dot_tail4(q1, k0, hd, hd8, hd, s1 + j);
        }
    }
}

/* exp(x) for x <= 0 (and -inf), Cephes expf: 2^n * P(r), r = x - n ln2, |r| <= ln2/2.
 * Inputs below -87.3 give about 1e-38 instead of a smaller number or 0; callers mask. */
static inline __m256 exp_neg(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.33654f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    const __m256 r2 = _mm256_mul_ps(r, r);
    p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static inline float hsum8(__m256 x) { /* ((x0+x4) + (x2+x6)) + ((x1+x5) + (x3+x7)) */
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hmax8(__m256 x) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Softmax update of one query vector over block lanes [lo, hi]; s[] holds its raw scores
 * there (other lanes: anything). Leaves p_j in s[lo..hi]; returns the rescale factor. */
static float softmax_block(float *s, int lo, int hi, float cap, float *m, float *l) {
    if (cap > 0.0f)
        for (int j = lo; j <= hi; j++) s[j] = cap * tanhf(s[j] * (1.0f / cap));
    __m256i keep[NV];
    __m256 vs[NV];
    __m256 mx = _mm256_set1_ps(-INFINITY);
    const __m256i vlo = _mm256_set1_epi32(lo - 1), vhi = _mm256_set1_epi32(hi + 1);
    for (int v = 0; v < NV; v++) {
        const __m256i idx = _mm256_setr_epi32(8 * v, 8 * v + 1, 8 * v + 2, 8 * v + 3,
                                              8 * v + 4, 8 * v + 5, 8 * v + 6, 8 * v + 7);
        keep[v] = _mm256_and_si256(_mm256_cmpgt_epi32(idx, vlo), _mm256_cmpgt_epi32(vhi, idx));
        vs[v] = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_loadu_ps(s + 8 * v),
                                 _mm256_castsi256_ps(keep[v]));
        mx = _mm256_max_ps(mx, vs[v]);
    }
    const float mb = hmax8(mx);
    const float mn = mb > *m ? mb : *m;
    const float corr = mn == *m ? 1.0f : expf(*m - mn); /* 0 on the first block */
    const __m256 vm = _mm256_set1_ps(mn);
    __m256 sum[NV];
    for (int v = 0; v < NV; v++) {
        const __m256 p = _mm256_and_ps(exp_neg(_mm256_sub_ps(vs[v], vm)),
                                       _mm256_castsi256_ps(keep[v]));
        _mm256_storeu_ps(s + 8 * v, p);
        sum[v] = p;
    }
#if NV == 4
    const float bs = hsum8(_mm256_add_ps(_mm256_add_ps(sum[0], sum[1]),
                                         _mm256_add_ps(sum[2], sum[3])));
#else
    for (int v = 1; v < NV; v++) sum[0] = _mm256_add_ps(sum[0], sum[v]);
    const float bs = hsum8(sum[0]);
#endif
    *l = *l * corr + bs;
    *m = mn;
    return corr;
}

/* acc[0..hdv) = acc * corr + sum_{j=lo..hi} p_j v_j, keys ascending; V rows ldv apart. */
static void pv(float *acc, const float *p, const float *v, int hdv, int lo, int hi,
               float corr, int ldv) {
    const __m256 c = _mm256_set1_ps(corr);
    int d = 0;
    for (; d + 64 <= hdv; d += 64) {
        __m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(acc + d), c);
        __m256 a1 = _mm256_mul_ps(_mm256_loadu_ps(acc + d + 8), c);
        __m256 a2 = _mm256_mul_ps(_mm256_loadu_ps(acc + d + 16), c);
        __m256 a3 = _mm256_mul_ps(_mm256_loadu_ps(acc + d + 24), c);
        __m256 a4 = _mm256_mul_ps(_mm256_loadu_ps(acc + d + 32), c);
        __m256 a5 = _mm256_mul_ps(_mm256_loadu_ps(acc + d + 40), c);
        __m256 a6 = _mm256_mul_ps(_mm256_loadu_ps(acc + d + 48), c);
        __m256 a7 = _mm256_mul_ps(_mm256_loadu_ps(acc + d + 56), c);
        for (int j = lo; j <= hi; j++) {
            const __m256 pj = _mm256_broadcast_ss(p + j);
            const float *vr = v + (size_t)j * (size_t)ldv + d;
            a0 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vr), a0);
            a1 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vr + 8), a1);
            a2 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vr + 16), a2);
            a3 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vr + 24), a3);
            a4 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vr + 32), a4);
            a5 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vr + 40), a5);
            a6 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vr + 48), a6);
            a7 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vr + 56), a7);
        }
        _mm256_storeu_ps(acc + d, a0);
        _mm256_storeu_ps(acc + d + 8, a1);
        _mm256_storeu_ps(acc + d + 16, a2);
        _mm256_storeu_ps(acc + d + 24, a3);
        _mm256_storeu_ps(acc + d + 32, a4);
        _mm256_storeu_ps(acc + d + 40, a5);
        _mm256_storeu_ps(acc + d + 48, a6);
        _mm256_storeu_ps(acc + d + 56, a7);
    }
    for (; d + 8 <= hdv; d += 8) {
        __m256 a = _mm256_mul_ps(_mm256_loadu_ps(acc + d), c);
        for (int j = lo; j <= hi; j++)
            a = _mm256_fmadd_ps(_mm256_broadcast_ss(p + j),
                                _mm256_loadu_ps(v + (size_t)j * (size_t)ldv + d), a);
        _mm256_storeu_ps(acc + d, a);
    }
    for (; d < hdv; d++) {
        float a = acc[d] * corr;
        for (int j = lo; j <= hi; j++) a = fmaf(p[j], v[(size_t)j * (size_t)ldv + d], a);
        acc[d] = a;
    }
}

/* pv for two query vectors with the same [lo, hi]: each V load feeds both; per element the
 * same chain as pv (acc * corr, then keys ascending), so pairing never changes bits. */
static void pv_pair(float *acc0, float *acc1, const float *p0, const float *p1, float c0,
                    float c1, const float *v, int hdv, int lo, int hi) {
    const __m256 vc0 = _mm256_set1_ps(c0), vc1 = _mm256_set1_ps(c1);
    int d = 0;
    for (; d + 32 <= hdv; d += 32) {
        __m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(acc0 + d), vc0);
        __m256 a1 = _mm256_mul_ps(_mm256_loadu_ps(acc0 + d + 8), vc0);
        __m256 a2 = _mm256_mul_ps(_mm256_loadu_ps(acc0 + d + 16), vc0);
        __m256 a3 = _mm256_mul_ps(_mm256_loadu_ps(acc0 + d + 24), vc0);
        __m256 b0 = _mm256_mul_ps(_mm256_loadu_ps(acc1 + d), vc1);
        __m256 b1 = _mm256_mul_ps(_mm256_loadu_ps(acc1 + d + 8), vc1);
        __m256 b2 = _mm256_mul_ps(_mm256_loadu_ps(acc1 + d + 16), vc1);
        __m256 b3 = _mm256_mul_ps(_mm256_loadu_ps(acc1 + d + 24), vc1);
        for (int j = lo; j <= hi; j++) {
            const __m256 x = _mm256_broadcast_ss(p0 + j), y = _mm256_broadcast_ss(p1 + j);
            const float *vr = v + (size_t)j * (size_t)hdv + d;
            const __m256 v0 = _mm256_loadu_ps(vr), v1 = _mm256_loadu_ps(vr + 8);
            const __m256 v2 = _mm256_loadu_ps(vr + 16), v3 = _mm256_loadu_ps(vr + 24);
            a0 = _mm256_fmadd_ps(x, v0, a0);
            a1 = _mm256_fmadd_ps(x, v1, a1);
            a2 = _mm256_fmadd_ps(x, v2, a2);
            a3 = _mm256_fmadd_ps(x, v3, a3);
            b0 = _mm256_fmadd_ps(y, v0, b0);
            b1 = _mm256_fmadd_ps(y, v1, b1);
            b2 = _mm256_fmadd_ps(y, v2, b2);
            b3 = _mm256_fmadd_ps(y, v3, b3);
        }
        _mm256_storeu_ps(acc0 + d, a0);
        _mm256_storeu_ps(acc0 + d + 8, a1);
        _mm256_storeu_ps(acc0 + d + 16, a2);
        _mm256_storeu_ps(acc0 + d + 24, a3);
        _mm256_storeu_ps(acc1 + d, b0);
        _mm256_storeu_ps(acc1 + d + 8, b1);
        _mm256_storeu_ps(acc1 + d + 16, b2);
        _mm256_storeu_ps(acc1 + d + 24, b3);
    }
    if (d < hdv) { /* the rest one vector at a time, from element d on */
        pv(acc0 + d, p0, v + d, hdv - d, lo, hi, c0, hdv);
        pv(acc1 + d, p1, v + d, hdv - d, lo, hi, c1, hdv);
    }
}

void attn_block_avx2(const struct attn_tile *t, const struct attn_block *b) {
    const int hd = t->hd, hdv = t->hdv, g = t->g;
    const int nq = t->n_rows * g;
    float *s0 = b->s, *s1 = b->s + ATTN_BLOCK;
    for (int i = 0; i < nq; i += 2) {
        const int two = i + 1 < nq;
        const int r0 = i / g, r1 = two ? (i + 1) / g : r0;
        int lo0 = t->lo[r0] - b->b0, hi0 = t->hi[r0] - b->b0;
        int lo1 = t->lo[r1] - b->b0, hi1 = t->hi[r1] - b->b0;
        lo0 = lo0 < 0 ? 0 : lo0;
        lo1 = lo1 < 0 ? 0 : lo1;
        hi0 = hi0 > ATTN_BLOCK - 1 ? ATTN_BLOCK - 1 : hi0;
        hi1 = hi1 > ATTN_BLOCK - 1 ? ATTN_BLOCK - 1 : hi1;
        const int in0 = lo0 <= hi0, in1 = two && lo1 <= hi1;
        if (!in0 && !in1) continue;
        const float *q0 = t->q + (size_t)i * (size_t)hd;
        /* Union of the two ranges, widened to aligned key groups. */
        int ulo = in0 ? lo0 : lo1, uhi = in0 ? hi0 : hi1;
        if (in0 && in1) {
            ulo = lo1 < ulo ? lo1 : ulo;
            uhi = hi1 > uhi ? hi1 : uhi;
        }
        const int j0 = ulo & ~(ATTN_KGROUP - 1), j1 = (uhi | (ATTN_KGROUP - 1)) + 1;
        if (in0 && in1)
            scores2(q0, q0 + hd, b->k, hd, j0, j1, s0, s1);
        else if (in0)
            scores2(q0, NULL, b->k, hd, j0, j1, s0, NULL);
        else
            scores2(q0 + hd, NULL, b->k, hd, j0, j1, s1, NULL);
        float *acc0 = t->acc + (size_t)i * (size_t)hdv, *acc1 = acc0 + hdv;
        float c0 = 0.0f, c1 = 0.0f;
        if (in0) c0 = softmax_block(s0, lo0, hi0, t->softcap, &t->m[i], &t->l[i]);
        if (in1) c1 = softmax_block(s1, lo1, hi1, t->softcap, &t->m[i + 1], &t->l[i + 1]);
        if (in0 && in1 && lo0 == lo1 && hi0 == hi1) {
            pv_pair(acc0, acc1, s0, s1, c0, c1, b->v, hdv, lo0, hi0);
        } else {
            if (in0) pv(acc0, s0, b->v, hdv, lo0, hi0, c0, hdv);
            if (in1) pv(acc1, s1, b->v, hdv, lo1, hi1, c1, hdv);
        }
    }
}
