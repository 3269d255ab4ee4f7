/* cuda_mmvq — see cuda_mmvq.h. */
#include "engine/cuda/cuda_mmvq.h"

#include <cuda_fp16.h>
#include <string.h>

#include "engine/cuda/cuda_gelu.cuh"
#include "engine/cuda/cuda_mmset.cuh"
#include "engine/kernels/quant.h"


/* ---- activation quantization ------------------------------------------------------------- */

/* One warp per (row, block of 32); lane j quantizes element j. The maximum is exact whatever
 * the reduction order, and each element's rounding is its own, so the bytes equal
 * quant_q8_1_row_ref's (whose qs and d are quant_q8_0_row_ref's). */
__global__ void __launch_bounds__(256)
    cf_mmvq_quant_kernel(const float *__restrict__ X, int n_in, int n_blocks,
                         struct cf_mmvq_act A) {
    const int lane = threadIdx.x & 31;
    const int b = (int)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); /* row * nb + blk */
    if (b >= n_blocks) return;                                                /* warp-uniform */
    const int nb = n_in >> 5;
    const int m = b / nb, k = b % nb;
    const size_t i = (size_t)m * n_in + (size_t)k * 32 + lane;
    const float x = X[i];
    float amax = fabsf(x);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float d = __fdiv_rn(amax, 127.0f);
    const float id = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
    const int q = __float2int_rn(__fmul_rn(x, id)); /* half to even; |q| <= 127 */
    A.qs[i] = (int8_t)q;
    int sum = q;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane == 0) {
        A.d[b] = __half2float(__float2half_rn(d));
        A.s[b] = __half2float(__float2half_rn(__fmul_rn(d, (float)sum)));
    }
}

/* ---- weight blocks as int8 ----------------------------------------------------------------- */

/* The integer and rounding intrinsics, with host versions so that the per-row code below can
 * be checked on a machine without a GPU (cf_mmvq_row_host). */
CF_HD unsigned cf_vsub4(unsigned a, unsigned b) { /* per-byte a - b, wrapping */
#ifdef __CUDA_ARCH__
    return __vsub4(a, b);
#else
    unsigned r = 0;
    for (int k = 0; k < 32; k += 8)
        r |= ((((a >> k) & 0xFFu) - ((b >> k) & 0xFFu)) & 0xFFu) << k;
    return r;
#endif
}

CF_HD unsigned cf_byte_perm(unsigned x, unsigned y, unsigned s) { /* selectors 0..7 only */
#ifdef __CUDA_ARCH__
    return __byte_perm(x, y, s);
#else
    const unsigned long long xy = (unsigned long long)x | ((unsigned long long)y << 32);
    unsigned r = 0;
    for (int k = 0; k < 4; k++)
        r |= (unsigned)((xy >> (8 * ((s >> (4 * k)) & 7u))) & 0xFFu) << (8 * k);
    return r;
#endif
}

CF_HD int cf_dp4a(int a, int b, int c) { /* c + the dot of the signed bytes of a and b */
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int k = 0; k < 32; k += 8)
        c += (int)(int8_t)(a >> k) * (int)(int8_t)(b >> k);
    return c;
#endif
}

CF_HD float cf_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

CF_HD float cf_add(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

/* Four bytes at a 2-byte aligned address (every block field sits at an even offset). */
CF_HD int cf_ld4(const uint8_t *p) {
    const unsigned short *h = reinterpret_cast<const unsigned short *>(p);
    return (int)((unsigned)h[0] | ((unsigned)h[1] << 16));
}

/* Bits 0..3 of hb to bit 4 of bytes 0..3 (the 5th bit of four Q5 elements). */
CF_HD unsigned cf_spread4(unsigned hb) {
    return ((hb & 1u) << 4) | ((hb & 2u) << 11) | ((hb & 4u) << 18) | ((hb & 8u) << 25);
}

/* Word j of the IQ4_NL table: values 4j .. 4j + 3 as int8 bytes. */
__host__ __device__ constexpr unsigned cf_iq4nl_word(int j) {
    constexpr int8_t v[16] = CF_KVALUES_IQ4NL;
    return (unsigned)(uint8_t)v[4 * j] | ((unsigned)(uint8_t)v[4 * j + 1] << 8) |
           ((unsigned)(uint8_t)v[4 * j + 2] << 16) | ((unsigned)(uint8_t)v[4 * j + 3] << 24);
}

/* Four IQ4_NL values for the four indices (0..15) in the bytes of n: byte_perm picks from
 * values 0-7 and from 8-15 by the low three bits, bit 3 chooses between the two. */
CF_HD int cf_iq4nl4(unsigned n) {
    constexpr unsigned t0 = cf_iq4nl_word(0), t1 = cf_iq4nl_word(1);
    constexpr unsigned t2 = cf_iq4nl_word(2), t3 = cf_iq4nl_word(3);
    const unsigned sel = (n & 7u) | ((n >> 4) & 0x70u) | ((n >> 8) & 0x700u) | ((n >> 12) & 0x7000u);
    const unsigned lo = cf_byte_perm(t0, t1, sel), hi = cf_byte_perm(t2, t3, sel);
    const unsigned mask = ((n >> 3) & 0x01010101u) * 0xFFu;
    return (int)((hi & mask) | (lo & ~mask));
}

/* Block b of row `row` as 8 words of int8 (word k = elements 4k .. 4k + 3), its scale d and
 * (Q4_1, Q5_1) its min m, with the values quant.c's unpack_* gives. */
template <int T>
CF_HD void cf_mmvq_wblock(const uint8_t *__restrict__ row, int b, int w[8], float *d, float *m) {
    if constexpr (T == QT_Q8_0) {
        const uint8_t *p = row + (size_t)b * 34;
        *d = cf_ld_f16(p);
        *m = 0.0f;
        CF_UNROLL
        for (int k = 0; k < 8; k++)
            w[k] = cf_ld4(p + 2 + 4 * k);
    } else {
        constexpr int bs = T == QT_Q4_0 || T == QT_IQ4_NL ? 18 : T == QT_Q4_1 ? 20
                           : T == QT_Q5_0                ? 22
                                                         : 24;
        constexpr bool has_min = T == QT_Q4_1 || T == QT_Q5_1;
        constexpr bool five = T == QT_Q5_0 || T == QT_Q5_1;
        constexpr int qs_off = (has_min ? 4 : 2) + (five ? 4 : 0);
        const uint8_t *p = row + (size_t)b * bs;
        *d = cf_ld_f16(p);
        *m = has_min ? cf_ld_f16(p + 2) : 0.0f;
        unsigned qh = 0;
        if (five) qh = (unsigned)cf_ld4(p + (has_min ? 4 : 2));
        CF_UNROLL
        for (int k = 0; k < 4; k++) {
            const unsigned q = (unsigned)cf_ld4(p + qs_off + 4 * k);
            unsigned lo = q & 0x0F0F0F0Fu, hi = (q >> 4) & 0x0F0F0F0Fu;
            if (five) {
                lo |= cf_spread4((qh >> (4 * k)) & 0xFu);
                hi |= cf_spread4((qh >> (16 + 4 * k)) & 0xFu);
            }
            if constexpr (T == QT_IQ4_NL) {
                w[k] = cf_iq4nl4(lo);
                w[k + 4] = cf_iq4nl4(hi);
            } else if constexpr (T == QT_Q4_0) {
                w[k] = (int)cf_vsub4(lo, 0x08080808u);
                w[k + 4] = (int)cf_vsub4(hi, 0x08080808u);
            } else if constexpr (T == QT_Q5_0) {
                w[k] = (int)cf_vsub4(lo, 0x10101010u);
                w[k + 4] = (int)cf_vsub4(hi, 0x10101010u);
            } else { /* Q4_1, Q5_1: unsigned values */
                w[k] = (int)lo;
                w[k + 4] = (int)hi;
            }
        }
    }
}

/* One block's term: the exact integer sum of the weight words w and the activation words x,
 * then (d_w · d_x) · isum (+ m_w · s_x), each operation rounded on its own. */
template <int T>
CF_HD float cf_mmvq_term(const int w[8], float dw, float mw, const int x[8], float dx, float sx) {
    int s = 0;
    CF_UNROLL
    for (int k = 0; k < 8; k++)
        s = cf_dp4a(w[k], x[k], s);
    float t = cf_mul(cf_mul(dw, dx), (float)s);
    if (T == QT_Q4_1 || T == QT_Q5_1) t = cf_add(t, cf_mul(mw, sx));
    return t;
}

/* One warp's sums for weight row `row` (n_in elements) and activation rows 0 .. M - 1
 * (TM >= M); afterwards every lane holds them. See the header for the order. */
template <int T, int TM>
__device__ __forceinline__ void cf_mmvq_warp(const uint8_t *__restrict__ row, int n_in,
                                             const struct cf_mmvq_act &A, int M, float acc[TM]) {
    const int lane = threadIdx.x & 31;
    const int nb = n_in >> 5;
#pragma unroll
    for (int m = 0; m < TM; m++)
        acc[m] = 0.0f;
    for (int b = lane; b < nb; b += 32) {
        int w[8];
        float dw, mw;
        cf_mmvq_wblock<T>(row, b, w, &dw, &mw);
#pragma unroll
        for (int m = 0; m < TM; m++) {
            if (m < M) {
                const int4 *xp = reinterpret_cast<const int4 *>(A.qs + (size_t)m * n_in + 32 * b);
                const int4 x0 = xp[0], x1 = xp[1];
                const int x[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
                const size_t ib = (size_t)m * nb + b;
                acc[m] = cf_add(acc[m], cf_mmvq_term<T>(w, dw, mw, x, A.d[ib], A.s[ib]));
            }
        }
    }
#pragma unroll
    for (int m = 0; m < TM; m++) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            acc[m] = cf_add(acc[m], __shfl_xor_sync(0xffffffffu, acc[m], off));
    }
}

/* cf_mmvq_warp's arithmetic for one activation row, on the host: lane by lane, then the
 * butterfly (lane l + lane l ^ off, as the shuffles add). */
template <int T>
static float cf_mmvq_row_host_t(const uint8_t *row, int n_in, const int8_t *qs, const float *d,
                                const float *s) {
    const int nb = n_in >> 5;
    float lane[32];
    for (int l = 0; l < 32; l++) {
        float acc = 0.0f;
        for (int b = l; b < nb; b += 32) {
            int w[8], x[8];
            float dw, mw;
            cf_mmvq_wblock<T>(row, b, w, &dw, &mw);
            memcpy(x, qs + 32 * b, sizeof x);
            acc = cf_add(acc, cf_mmvq_term<T>(w, dw, mw, x, d[b], s[b]));
        }
        lane[l] = acc;
    }
    for (int off = 16; off > 0; off >>= 1) {
        float t[32];
        for (int l = 0; l < 32; l++)
            t[l] = cf_add(lane[l], lane[l ^ off]);
        memcpy(lane, t, sizeof t);
    }
    return lane[0];
}

/* A set of weights over the same activations (struct cf_mm_set, cuda_mm.cuh; a single matmul
 * is a set of one). GEGLU: two weights (gate, up) of one n_out; the warp of row o writes
 * gelu(gate) * up into Y[0]. */
#define CF_MMVQ_FOR_EACH_TYPE(X)                                                                   \
    X(QT_Q4_0)                                                                                     \
    X(QT_Q4_1)                                                                                     \
    X(QT_Q5_0)                                                                                     \
    X(QT_Q5_1)                                                                                     \
    X(QT_Q8_0)                                                                                     \
    X(QT_IQ4_NL)

/* cf_mmvq_warp for a weight type known at run time (uniform over the block). */
template <int TM>
__device__ __forceinline__ void cf_mmvq_warp_any(uint32_t type, const uint8_t *__restrict__ row,
                                                 int n_in, const struct cf_mmvq_act &A, int M,
                                                 float acc[TM]) {
    switch (type) {
#define CF_CASE(TT)                                                                                \
    case TT:                                                                                       \
        cf_mmvq_warp<TT, TM>(row, n_in, A, M, acc);                                                \
        break;
        CF_MMVQ_FOR_EACH_TYPE(CF_CASE)
#undef CF_CASE
    default:
        break; /* refused by the launcher */
    }
}

/* One kernel for every supported type: a set may mix types (Q and K in Q5_0, V in Q8_0). */
template <int TM, bool GEGLU>
__global__ void __launch_bounds__(CF_MM_WARPS * 32)
    cf_mmvq_kernel(struct cf_mm_set S, int n_in, struct cf_mmvq_act A, int M) {
    const int lane = threadIdx.x & 31;
    int g = (int)blockIdx.x, i = 0;
    while (i + 1 < S.n && g >= S.groups[i]) { /* uniform over the block */
        g -= S.groups[i];
        i++;
    }
    const int o = g * CF_MM_WARPS + (threadIdx.x >> 5);
    if (o >= S.n_out[i]) return; /* warp-uniform; no block-wide synchronisation below */
    float acc[TM];
    cf_mmvq_warp_any<TM>(S.type[i], S.W[i] + (size_t)o * S.row_bytes[i], n_in, A, M, acc);
    if (GEGLU) {
        float up[TM];
        cf_mmvq_warp_any<TM>(S.type[1], S.W[1] + (size_t)o * S.row_bytes[1], n_in, A, M, up);
#pragma unroll
        for (int m = 0; m < TM; m++)
            acc[m] = cf_gelu(acc[m]) * up[m];
    }
    if (lane == 0) {
#pragma unroll
        for (int m = 0; m < TM; m++)
            if (m < M) S.Y[i][(size_t)m * S.ldy[i] + o] = acc[m];
    }
}

/* Row tiles of 1 or 8 only: a row's arithmetic does not depend on TM (the guard m < M), so
 * two instantiations keep the compile time down. */
static int cf_mmvq_launch(cudaStream_t s, const struct cf_mm_set &S, int n_in, const void *buf,
                          int M, int geglu) {
    long long blocks = 0;
    for (int i = 0; i < (geglu ? 1 : S.n); i++)
        blocks += S.groups[i];
    if (blocks > 0x7fffffffLL) return cf_fail("cf_mmvq: %lld blocks", blocks);
    const struct cf_mmvq_act A = cf_mmvq_layout(const_cast<void *>(buf), M, n_in);
    const unsigned g = (unsigned)blocks, t = CF_MM_WARPS * 32;
    if (M == 1 && geglu)
        cf_mmvq_kernel<1, true><<<g, t, 0, s>>>(S, n_in, A, M);
    else if (M == 1)
        cf_mmvq_kernel<1, false><<<g, t, 0, s>>>(S, n_in, A, M);
    else if (geglu)
        cf_mmvq_kernel<8, true><<<g, t, 0, s>>>(S, n_in, A, M);
    else
        cf_mmvq_kernel<8, false><<<g, t, 0, s>>>(S, n_in, A, M);
    return 0;
}


/* ---- C API ------------------------------------------------------------------------------- */

extern "C" int cf_mmvq_supported(uint32_t type) {
    switch (type) {
#define CF_CASE(TT)                                                                                \
    case TT:                                                                                       \
        return 1;
        CF_MMVQ_FOR_EACH_TYPE(CF_CASE)
#undef CF_CASE
    default:
        return 0;
    }
}

extern "C" int cf_mmvq_row_host(uint32_t type, const void *row, int n_in, const int8_t *qs,
                                const float *d, const float *s, float *y) {
    const uint8_t *r = static_cast<const uint8_t *>(row);
    switch (type) {
#define CF_CASE(TT)                                                                                \
    case TT:                                                                                       \
        *y = cf_mmvq_row_host_t<TT>(r, n_in, qs, d, s);                                            \
        return 0;
        CF_MMVQ_FOR_EACH_TYPE(CF_CASE)
#undef CF_CASE
    default:
        return -1;
    }
}

extern "C" int cf_mmvq_quantize(cudaStream_t stream, const float *X, int M, int n_in, void *buf,
                                size_t bytes) {
    if (M < 1 || M > CF_MMVQ_MAX_ROWS || n_in <= 0 || n_in % 32 ||
        bytes < cf_mmvq_bytes(M, n_in) || ((uintptr_t)buf & 15))
        return cf_fail("cf_mmvq_quantize: M=%d n_in=%d, %zu bytes at %p", M, n_in, bytes, buf);
    const int n_blocks = M * (n_in / 32);
    const unsigned grid = (unsigned)((n_blocks + 7) / 8);
    cf_mmvq_quant_kernel<<<grid, 256, 0, stream>>>(X, n_in, n_blocks,
                                                   cf_mmvq_layout(buf, M, n_in));
    return CUDA_CHECK_LAUNCH();
}

extern "C" int cf_mmvq_matmul_set(cudaStream_t stream, const struct cf_weight *const *w, int n,
                                  const void *buf, int M, float *const *Y, const int *ldy,
                                  int geglu) {
    if (M < 1 || M > CF_MMVQ_MAX_ROWS || ((uintptr_t)buf & 15))
        return cf_fail("cf_mmvq_matmul_set: M=%d, buffer at %p", M, buf);
    struct cf_mm_set S;
    if (cf_mm_set_make("cf_mmvq_matmul_set", w, n, Y, ldy, geglu, 1, &S)) return -1;
    for (int i = 0; i < n; i++)
        if (!cf_mmvq_supported(w[i]->type))
            return cf_fail("cf_mmvq: unsupported weight type %u", (unsigned)w[i]->type);
    if (cf_mmvq_launch(stream, S, w[0]->n_in, buf, M, geglu)) return -1;
    return CUDA_CHECK_LAUNCH();
}

extern "C" int cf_mmvq_matmul(cudaStream_t stream, const struct cf_weight *w, const void *buf,
                              int M, float *Y, int ldy) {
    float *const y[1] = {Y};
    const int ld[1] = {ldy};
    return cf_mmvq_matmul_set(stream, &w, 1, buf, M, y, ld, 0);
}
