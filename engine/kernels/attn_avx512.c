/*
 * attn_avx512 — AVX-512 (F, DQ, VL) + F16C attention tile kernel (algorithm and contract in
 * attn.h); the structure of attn_avx2.c with 16-lane vectors.
 *
 * Scores: four (or two) query vectors x ATTN_KGROUP keys per step, each score an FMA chain over the
 * head dim from zero in 16 lanes, folded to 8 lanes (low + high half) and reduced by one
 * fixed hadd tree; key groups are aligned to absolute positions, so a score's bits depend
 * only on (q, k). Softmax: vector exp (Cephes polynomial) 16 at a time from the range's
 * start, each 16 reduced to one float and added to the double sum; F16 rounding by F16C.
 * P.V: two query vectors of the same row (same visible keys) share each V load; 128 output
 * dims in 8 registers per query vector, keys in ascending order (the same chain per element
 * whether or not a vector is paired).
 */
#include <immintrin.h>
#include <math.h>

#include "engine/kernels/attn.h"

/* Four 16-lane accumulators -> their four sums, the same tree for every lane. */
static inline __m128 red4(__m512 a, __m512 b, __m512 c, __m512 d) {
#define HALF(x) _mm256_add_ps(_mm512_castps512_ps256(x), _mm512_extractf32x8_ps(x, 1))
    const __m256 ab = _mm256_hadd_ps(HALF(a), HALF(b));
    const __m256 cd = _mm256_hadd_ps(HALF(c), HALF(d));
#undef HALF
    const __m256 x = _mm256_hadd_ps(ab, cd);
    return _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
}

/* The head-dim tail (hd % 16) of the dots of q with 4 consecutive keys (row stride ld). */
static inline void dot_tail4(const float *q, const float *k, int ld, int d0, int hd, float *s) {
    for (int i = 0; i < 4; i++)
        for (int d = d0; d < hd; d++) s[i] = fmaf(q[d], k[(size_t)i * (size_t)ld + d], s[i]);
}

/* Scores of keys [j0, j1) (multiples of ATTN_KGROUP) for one or two query vectors. */
static void scores2(const float *q0, const float *q1, const float *k, int hd, int j0, int j1,
                    float *s0, float *s1) {
    const int hd16 = hd & ~15;
    for (int j = j0; j < j1; j += 4) {
        const float *k0 = k + (size_t)j * (size_t)hd, *k1 = k0 + hd, *k2 = k1 + hd,
                    *k3 = k2 + hd;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        __m512 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
        if (q1) {
            for (int d = 0; d < hd16; d += 16) {
                const __m512 x = _mm512_loadu_ps(q0 + d), y = _mm512_loadu_ps(q1 + d);
                const __m512 v0 = _mm512_loadu_ps(k0 + d), v1 = _mm512_loadu_ps(k1 + d);
                const __m512 v2 = _mm512_loadu_ps(k2 + d), v3 = _mm512_loadu_ps(k3 + d);
                a0 = _mm512_fmadd_ps(x, v0, a0);
                a1 = _mm512_fmadd_ps(x, v1, a1);
                a2 = _mm512_fmadd_ps(x, v2, a2);
                a3 = _mm512_fmadd_ps(x, v3, a3);
                b0 = _mm512_fmadd_ps(y, v0, b0);
                b1 = _mm512_fmadd_ps(y, v1, b1);
                b2 = _mm512_fmadd_ps(y, v2, b2);
                b3 = _mm512_fmadd_ps(y, v3, b3);
            }
        } else {
            for (int d = 0; d < hd16; d += 16) {
                const __m512 x = _mm512_loadu_ps(q0 + d);
                a0 = _mm512_fmadd_ps(x, _mm512_loadu_ps(k0 + d), a0);
                a1 = _mm512_fmadd_ps(x, _mm512_loadu_ps(k1 + d), a1);
                a2 = _mm512_fmadd_ps(x, _mm512_loadu_ps(k2 + d), a2);
                a3 = _mm512_fmadd_ps(x, _mm512_loadu_ps(k3 + d), a3);
            }
        }
        _mm_storeu_ps(s0 + j, red4(a0, a1, a2, a3));
        if (hd16 < hd) dot_tail4(q0, k0, hd, hd16, hd, s0 + j);
        if (q1) {
            _mm_storeu_ps(s1 + j, red4(b0, b1, b2, b3));
            if (hd16 < hd) dot_tail4(q1, k0, hd, hd16, hd, s1 + j);
        }
    }
}

/* exp(x) for x <= 0 (and -inf), Cephes expf as in attn_avx2.c. */
static inline __m512 exp_neg(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.33654f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    const __m512 r2 = _mm512_mul_ps(r, r);
    p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    const __m512i e = _mm512_slli_epi32(
        _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

void attn_softmax_avx512(float *p, int n, int round_f16) {
    const int n16 = n & ~15;
    const __mmask16 tail = (__mmask16)((1u << (n - n16)) - 1u);
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < n16; j += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(p + j));
    if (tail) mx = _mm512_mask_max_ps(mx, tail, mx, _mm512_maskz_loadu_ps(tail, p + n16));
    const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    double sum = 0.0;
    for (int j = 0; j < n16; j += 16) {
        const __m512 e = exp_neg(_mm512_sub_ps(_mm512_loadu_ps(p + j), m));
        _mm512_storeu_ps(p + j, e);
        sum += (double)_mm512_reduce_add_ps(e);
    }
    if (tail) {
        const __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(tail, p + n16), m);
        const __m512 e = _mm512_maskz_mov_ps(tail, exp_neg(_mm512_min_ps(x, _mm512_setzero_ps())));
        _mm512_mask_storeu_ps(p + n16, tail, e);
        sum += (double)_mm512_reduce_add_ps(e);
    }
    const __m512 inv = _mm512_set1_ps((float)(1.0 / sum));
    for (int j = 0; j < n; j += 16) {
        const __mmask16 k = j + 16 <= n ? (__mmask16)0xFFFF : tail;
        __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + j), inv);
        if (round_f16) x = _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
        _mm512_mask_storeu_ps(p + j, k, x);
    }
}

/* acc_x += sum_{j=lo..hi} p_x[j] v_j for x = 0 and, when acc1, 1 (both with the same
 * [lo, hi]); keys ascending. */
static void pv2(float *acc0, float *acc1, const float *p0, const float *p1, const float *v,
                int hdv, int lo, int hi) {
    int d = 0;
    if (acc1)
        for (; d + 64 <= hdv; d += 64) {
            __m512 a0 = _mm512_loadu_ps(acc0 + d);
            __m512 a1 = _mm512_loadu_ps(acc0 + d + 16);
            __m512 a2 = _mm512_loadu_ps(acc0 + d + 32);
            __m512 a3 = _mm512_loadu_ps(acc0 + d + 48);
            __m512 b0 = _mm512_loadu_ps(acc1 + d);
            __m512 b1 = _mm512_loadu_ps(acc1 + d + 16);
            __m512 b2 = _mm512_loadu_ps(acc1 + d + 32);
            __m512 b3 = _mm512_loadu_ps(acc1 + d + 48);
            for (int j = lo; j <= hi; j++) {
                const __m512 x = _mm512_set1_ps(p0[j]), y = _mm512_set1_ps(p1[j]);
                const float *vr = v + (size_t)j * (size_t)hdv + d;
                const __m512 v0 = _mm512_loadu_ps(vr), v1 = _mm512_loadu_ps(vr + 16);
                const __m512 v2 = _mm512_loadu_ps(vr + 32), v3 = _mm512_loadu_ps(vr + 48);
                a0 = _mm512_fmadd_ps(x, v0, a0);
                a1 = _mm512_fmadd_ps(x, v1, a1);
                a2 = _mm512_fmadd_ps(x, v2, a2);
                a3 = _mm512_fmadd_ps(x, v3, a3);
                b0 = _mm512_fmadd_ps(y, v0, b0);
                b1 = _mm512_fmadd_ps(y, v1, b1);
                b2 = _mm512_fmadd_ps(y, v2, b2);
                b3 = _mm512_fmadd_ps(y, v3, b3);
            }
            _mm512_storeu_ps(acc0 + d, a0);
            _mm512_storeu_ps(acc0 + d + 16, a1);
            _mm512_storeu_ps(acc0 + d + 32, a2);
            _mm512_storeu_ps(acc0 + d + 48, a3);
            _mm512_storeu_ps(acc1 + d, b0);
            _mm512_storeu_ps(acc1 + d + 16, b1);
            _mm512_storeu_ps(acc1 + d + 32, b2);
            _mm512_storeu_ps(acc1 + d + 48, b3);
        }
    /* Whatever is left: one query vector at a time, 16 dims at a time, then scalar. */
    for (int x = 0; x < (acc1 ? 2 : 1); x++) {
        float *acc = x ? acc1 : acc0;
        const float *p = x ? p1 : p0;
        int e = d;
        for (; e + 128 <= hdv; e += 128) {
            __m512 a[8];
            for (int u = 0; u < 8; u++)
                a[u] = _mm512_loadu_ps(acc + e + 16 * u);
            for (int j = lo; j <= hi; j++) {
                const __m512 pj = _mm512_set1_ps(p[j]);
                const float *vr = v + (size_t)j * (size_t)hdv + e;
                for (int u = 0; u < 8; u++)
                    a[u] = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vr + 16 * u), a[u]);
            }
            for (int u = 0; u < 8; u++) _mm512_storeu_ps(acc + e + 16 * u, a[u]);
        }
        for (; e + 16 <= hdv; e += 16) {
            __m512 a = _mm512_loadu_ps(acc + e);
            for (int j = lo; j <= hi; j++)
                a = _mm512_fmadd_ps(_mm512_set1_ps(p[j]),
                                    _mm512_loadu_ps(v + (size_t)j * (size_t)hdv + e), a);
            _mm512_storeu_ps(acc + e, a);
        }
        for (; e < hdv; e++) {
            float a = acc[e];
            for (int j = lo; j <= hi; j++) a = fmaf(p[j], v[(size_t)j * (size_t)hdv + e], a);
            acc[e] = a;
        }
    }
}

/* Scores of keys [j0, j1) for four query vectors: 16 accumulators, each K load used 4 times.
 * Every score is the same FMA chain and reduction as in scores2. */
static void scores4(const float *const *q, const float *k, int hd, int j0, int j1,
                    float *const *s) {
    const int hd16 = hd & ~15;
    for (int j = j0; j < j1; j += 4) {
        const float *k0 = k + (size_t)j * (size_t)hd, *k1 = k0 + hd, *k2 = k1 + hd,
                    *k3 = k2 + hd;
        __m512 a[4][4];
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++)
#pragma GCC unroll 4
            for (int y = 0; y < 4; y++) a[x][y] = _mm512_setzero_ps();
        for (int d = 0; d < hd16; d += 16) {
            const __m512 v0 = _mm512_loadu_ps(k0 + d), v1 = _mm512_loadu_ps(k1 + d);
            const __m512 v2 = _mm512_loadu_ps(k2 + d), v3 = _mm512_loadu_ps(k3 + d);
#pragma GCC unroll 4
            for (int x = 0; x < 4; x++) {
                const __m512 qx = _mm512_loadu_ps(q[x] + d);
                a[x][0] = _mm512_fmadd_ps(qx, v0, a[x][0]);
                a[x][1] = _mm512_fmadd_ps(qx, v1, a[x][1]);
                a[x][2] = _mm512_fmadd_ps(qx, v2, a[x][2]);
                a[x][3] = _mm512_fmadd_ps(qx, v3, a[x][3]);
            }
        }
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++) {
            _mm_storeu_ps(s[x] + j, red4(a[x][0], a[x][1], a[x][2], a[x][3]));
            if (hd16 < hd) dot_tail4(q[x], k0, hd, hd16, hd, s[x] + j);
        }
    }
}

/* Scores for query vectors x = 0, 1 of the given ones (either may be out of range). */
static void pair_scores(const float *const *q, const float *k, int hd, const int *lo,
                        const int *hi, const int *in, float *const *s) {
    if (!in[0] && !in[1]) return;
    int ulo = in[0] ? lo[0] : lo[1], uhi = in[0] ? hi[0] : hi[1];
    if (in[0] && in[1]) {
        ulo = lo[1] < ulo ? lo[1] : ulo;
        uhi = hi[1] > uhi ? hi[1] : uhi;
    }
    const int j0 = ulo & ~(ATTN_KGROUP - 1), j1 = (uhi | (ATTN_KGROUP - 1)) + 1;
    if (in[0] && in[1])
        scores2(q[0], q[1], k, hd, j0, j1, s[0], s[1]);
    else if (in[0])
        scores2(q[0], NULL, k, hd, j0, j1, s[0], NULL);
    else
        scores2(q[1], NULL, k, hd, j0, j1, s[1], NULL);
}

/* Query vectors in groups of four (scored together when all four see this block, else per
 * pair); p rows are offset to the block, so column j is key b0 + j. */
void attn_scores_avx512(const struct attn_tile *t, const struct attn_block *b) {
    const int hd = t->hd, g = t->g, nq = t->n_rows * g;
    const size_t off = (size_t)(b->b0 - t->p0), ld = (size_t)t->ld_p;
    for (int i = 0; i < nq; i += 4) {
        int lo[4], hi[4], in[4], n_in = 0;
        const float *q[4];
        float *s[4];
        for (int x = 0; x < 4; x++) {
            in[x] = lo[x] = hi[x] = 0;
            q[x] = NULL;
            s[x] = NULL;
            if (i + x >= nq) continue;
            q[x] = t->q + (size_t)(i + x) * (size_t)hd;
            s[x] = t->p + (size_t)(i + x) * ld + off;
            in[x] = attn_block_range(t, b, (i + x) / g, &lo[x], &hi[x]);
            n_in += in[x];
        }
        if (n_in == 0) continue;
        if (n_in == 4) {
            int ulo = lo[0], uhi = hi[0];
            for (int x = 1; x < 4; x++) {
                ulo = lo[x] < ulo ? lo[x] : ulo;
                uhi = hi[x] > uhi ? hi[x] : uhi;
            }
            scores4(q, b->kv, hd, ulo & ~(ATTN_KGROUP - 1), (uhi | (ATTN_KGROUP - 1)) + 1, s);
        } else {
            pair_scores(q, b->kv, hd, lo, hi, in, s);
            pair_scores(q + 2, b->kv, hd, lo + 2, hi + 2, in + 2, s + 2);
        }
    }
}

void attn_pv_avx512(const struct attn_tile *t, const struct attn_block *b) {
    attn_pv_pairs(t, b, pv2);
}
