/*
 * attn_avx2 — AVX2 + FMA + F16C attention tile kernel (algorithm and contract in attn.h).
 *
 * Scores: two query vectors x ATTN_KGROUP keys per step (8 accumulators of 8 lanes, each
 * an FMA chain over the head dim from zero), each reduced by the same hadd tree. Key groups
 * are aligned to absolute positions, so a score's bits depend only on (q, k), never on
 * which query vector it was paired with or which other keys share its group.
 * Softmax: vector exp (Cephes polynomial, ~2 ulp) 8 at a time from the range's start, each
 * 8 summed by a fixed tree and added to the double sum; F16 rounding by F16C.
 * P.V: two query vectors of one row share each V load (32 dims x 2 in 8 registers), else 64
 * dims in 8 registers; per element the keys in ascending order.
 */
#include <immintrin.h>
#include <math.h>

#include "engine/kernels/attn.h"

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

/* Lanes [0, n) of 8, n in 1..7, as a load/store mask. */
static inline __m256i lanes(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

void attn_softmax_avx2(float *p, int n, int round_f16) {
    const int n8 = n & ~7;
    const __m256i tail = lanes(n - n8 ? n - n8 : 1);
    __m256 mx = _mm256_set1_ps(-INFINITY);
    for (int j = 0; j < n8; j += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(p + j));
    if (n8 < n)
        mx = _mm256_max_ps(mx, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY),
                                                _mm256_maskload_ps(p + n8, tail),
                                                _mm256_castsi256_ps(tail)));
    const __m256 m = _mm256_set1_ps(hmax8(mx));
    double sum = 0.0;
    for (int j = 0; j < n8; j += 8) {
        const __m256 e = exp_neg(_mm256_sub_ps(_mm256_loadu_ps(p + j), m));
        _mm256_storeu_ps(p + j, e);
        sum += (double)hsum8(e);
    }
    if (n8 < n) {
        const __m256 x = _mm256_sub_ps(_mm256_maskload_ps(p + n8, tail), m);
        const __m256 e = _mm256_and_ps(exp_neg(_mm256_min_ps(x, _mm256_setzero_ps())),
                                       _mm256_castsi256_ps(tail));
        _mm256_maskstore_ps(p + n8, tail, e);
        sum += (double)hsum8(e);
    }
    const __m256 inv = _mm256_set1_ps((float)(1.0 / sum));
    for (int j = 0; j < n; j += 8) {
        const int full = j + 8 <= n;
        __m256 x = _mm256_mul_ps(full ? _mm256_loadu_ps(p + j) : _mm256_maskload_ps(p + j, tail),
                                 inv);
        if (round_f16) x = _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
        if (full)
            _mm256_storeu_ps(p + j, x);
        else
            _mm256_maskstore_ps(p + j, tail, x);
    }
}

/* acc[0..hdv) += sum_{j=lo..hi} p_j v_j, keys ascending; V rows ldv apart. */
static void pv(float *acc, const float *p, const float *v, int hdv, int lo, int hi, int ldv) {
    int d = 0;
    for (; d + 64 <= hdv; d += 64) {
        __m256 a0 = _mm256_loadu_ps(acc + d);
        __m256 a1 = _mm256_loadu_ps(acc + d + 8);
        __m256 a2 = _mm256_loadu_ps(acc + d + 16);
        __m256 a3 = _mm256_loadu_ps(acc + d + 24);
        __m256 a4 = _mm256_loadu_ps(acc + d + 32);
        __m256 a5 = _mm256_loadu_ps(acc + d + 40);
        __m256 a6 = _mm256_loadu_ps(acc + d + 48);
        __m256 a7 = _mm256_loadu_ps(acc + d + 56);
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
        __m256 a = _mm256_loadu_ps(acc + d);
        for (int j = lo; j <= hi; j++)
            a = _mm256_fmadd_ps(_mm256_broadcast_ss(p + j),
                                _mm256_loadu_ps(v + (size_t)j * (size_t)ldv + d), a);
        _mm256_storeu_ps(acc + d, a);
    }
    for (; d < hdv; d++) {
        float a = acc[d];
        for (int j = lo; j <= hi; j++) a = fmaf(p[j], v[(size_t)j * (size_t)ldv + d], a);
        acc[d] = a;
    }
}

/* pv for two query vectors with the same [lo, hi]: each V load feeds both; per element the
 * same chain as pv (keys ascending), so pairing never changes bits. */
static void pv_pair(float *acc0, float *acc1, const float *p0, const float *p1,
                    const float *v, int hdv, int lo, int hi) {
    int d = 0;
    for (; d + 32 <= hdv; d += 32) {
        __m256 a0 = _mm256_loadu_ps(acc0 + d);
        __m256 a1 = _mm256_loadu_ps(acc0 + d + 8);
        __m256 a2 = _mm256_loadu_ps(acc0 + d + 16);
        __m256 a3 = _mm256_loadu_ps(acc0 + d + 24);
        __m256 b0 = _mm256_loadu_ps(acc1 + d);
        __m256 b1 = _mm256_loadu_ps(acc1 + d + 8);
        __m256 b2 = _mm256_loadu_ps(acc1 + d + 16);
        __m256 b3 = _mm256_loadu_ps(acc1 + d + 24);
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
        pv(acc0 + d, p0, v + d, hdv - d, lo, hi, hdv);
        pv(acc1 + d, p1, v + d, hdv - d, lo, hi, hdv);
    }
}

/* Query vectors two at a time; p rows are offset to the block, so column j is key b0 + j. */
void attn_scores_avx2(const struct attn_tile *t, const struct attn_block *b) {
    const int hd = t->hd, nq = t->n_rows * t->g;
    const size_t off = (size_t)(b->b0 - t->p0), ld = (size_t)t->ld_p;
    for (int i = 0; i < nq; i += 2) {
        int lo[2], hi[2], in[2];
        attn_pair_ranges(t, b, i, lo, hi, in);
        const int in0 = in[0], in1 = in[1], lo0 = lo[0], hi0 = hi[0], lo1 = lo[1], hi1 = hi[1];
        if (!in0 && !in1) continue;
        const float *q0 = t->q + (size_t)i * (size_t)hd;
        float *s0 = t->p + (size_t)i * ld + off, *s1 = s0 + ld;
        /* Union of the two ranges, widened to aligned key groups. */
        int ulo = in0 ? lo0 : lo1, uhi = in0 ? hi0 : hi1;
        if (in0 && in1) {
            ulo = lo1 < ulo ? lo1 : ulo;
            uhi = hi1 > uhi ? hi1 : uhi;
        }
        const int j0 = ulo & ~(ATTN_KGROUP - 1), j1 = (uhi | (ATTN_KGROUP - 1)) + 1;
        if (in0 && in1)
            scores2(q0, q0 + hd, b->kv, hd, j0, j1, s0, s1);
        else if (in0)
            scores2(q0, NULL, b->kv, hd, j0, j1, s0, NULL);
        else
            scores2(q0 + hd, NULL, b->kv, hd, j0, j1, s1, NULL);
    }
}

/* attn_pv2_fn: the pair kernel, or pv for one vector. */
static void pv_one_or_pair(float *acc0, float *acc1, const float *p0, const float *p1,
                           const float *v, int hdv, int lo, int hi) {
    if (acc1)
        pv_pair(acc0, acc1, p0, p1, v, hdv, lo, hi);
    else
        pv(acc0, p0, v, hdv, lo, hi, hdv);
}

void attn_pv_avx2(const struct attn_tile *t, const struct attn_block *b) {
    attn_pv_pairs(t, b, pv_one_or_pair);
}
