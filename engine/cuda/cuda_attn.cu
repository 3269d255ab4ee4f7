/* cuda_attn — see cuda_attn.h. */
#include "engine/cuda/cuda_attn.h"

#include <cuda_fp16.h>
#include <math.h>

#define CF_ATT_WARPS 8
#define CF_ATT_PER_LANE (CF_ATT_MAX_HD / 32)

#include "engine/cuda/cuda_attn.cuh"

__global__ void cf_kv_store_kernel(struct cf_rows R, struct cf_kv kv, const float *__restrict__ k,
                                   int ld_k, const float *__restrict__ v, int ld_v) {
    const int r = blockIdx.x;
    const int64_t slot = cf_kv_slot(R, kv, R.seq[r], R.pos[r]);
    const int nk = kv.n_kv * kv.hd, nv = kv.n_kv * kv.hd_v;
    __half *kd = static_cast<__half *>(kv.k) + slot * nk;
    __half *vd = static_cast<__half *>(kv.v) + slot * nv;
    for (int i = threadIdx.x; i < nk; i += blockDim.x)
        kd[i] = __float2half_rn(k[(size_t)r * ld_k + i]);
    for (int i = threadIdx.x; i < nv; i += blockDim.x)
        vd[i] = __float2half_rn(v[(size_t)r * ld_v + i]);
}

/* One key's K and V elements of this lane (dims lane + 32 i), all loads issued together. */
__device__ __forceinline__ void cf_attn_load_kv(const __half *kr, const __half *vr, int lane,
                                                int nd, int nv, float *kf, float *vf) {
#pragma unroll
    for (int i = 0; i < CF_ATT_PER_LANE; i++) {
        kf[i] = i < nd ? __half2float(kr[lane + 32 * i]) : 0.0f;
        vf[i] = i < nv ? __half2float(vr[lane + 32 * i]) : 0.0f;
    }
}

/*
 * Split-key attention (flash-decoding). Keys are cut at absolute positions into splits of
 * CF_ATT_SPLIT: split s of a row holds its visible keys in [s * SPLIT, (s + 1) * SPLIT).
 * Block (row, head, z) computes split lo / SPLIT + z: warp w walks keys j0 + w, j0 + w + WARPS,
 * … with its own running max m, sum l and accumulator (lane holds dims lane + 32 i); the warps
 * are merged in warp order and the unnormalised (M, L, acc) of the split is stored. A second
 * kernel merges a row's splits in split order. Both orders depend only on the row's position
 * and window, so a row's result does not depend on the step it is in, nor on the grid size
 * (blocks past the row's last split return at once).
 */
__global__ void __launch_bounds__(CF_ATT_WARPS * 32)
    cf_attn_split_kernel(struct cf_rows R, struct cf_kv kv, struct cf_attn A,
                         const float *__restrict__ q, int ld_q, int r0, float *__restrict__ pml,
                         float *__restrict__ pacc, int acc_ld) {
    __shared__ float qs[CF_ATT_MAX_HD];
    __shared__ float wm[CF_ATT_WARPS], wl[CF_ATT_WARPS];
    __shared__ float wacc[CF_ATT_WARPS][CF_ATT_MAX_HD];
    const int r = r0 + (int)blockIdx.x, h = blockIdx.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int kvh = h / (A.n_head / kv.n_kv);
    const int p = R.pos[r], seq = R.seq[r];
    const int lo = A.window > 0 ? max(0, p - A.window + 1) : 0;
    const int sp = lo / CF_ATT_SPLIT + (int)blockIdx.z;
    if (sp > p / CF_ATT_SPLIT) return; /* uniform over the block */
    const int j0 = max(lo, sp * CF_ATT_SPLIT), j1 = min(p, sp * CF_ATT_SPLIT + CF_ATT_SPLIT - 1);
    const int nd = kv.hd / 32, nv = kv.hd_v / 32;

    const float *qr = q + (size_t)r * ld_q + (size_t)h * kv.hd;
    /* Like llama.cpp's CPU path with an F16 cache (and engine/cpu_attn.c): q is scaled, then
     * rounded to fp16 before the dot products. */
    for (int d = threadIdx.x; d < kv.hd; d += blockDim.x)
        qs[d] = __half2float(__float2half_rn(qr[d] * A.scale));
    __syncthreads();

    float m = -INFINITY, l = 0.0f;
    float acc[CF_ATT_PER_LANE];
#pragma unroll
    for (int i = 0; i < CF_ATT_PER_LANE; i++)
        acc[i] = 0.0f;

    const __half *kbase = static_cast<const __half *>(kv.k);
    const __half *vbase = static_cast<const __half *>(kv.v);
    /* The warp's keys jw + CF_ATT_WARPS t (t < nkw <= 32): lane t looks up key t's cache slot
     * once, and key t + 1's K/V rows are loaded while key t is processed, so the memory round
     * trips overlap. Only the loads move: every key is processed as before, in the same
     * order, with the same arithmetic. */
    static_assert(CF_ATT_SPLIT / CF_ATT_WARPS <= 32, "a warp's keys of one split fit its lanes");
    const int jw = j0 + warp;
    const int nkw = jw <= j1 ? (j1 - jw) / CF_ATT_WARPS + 1 : 0; /* uniform over the warp */
    const long long my_slot =
        lane < nkw ? (long long)cf_kv_slot(R, kv, seq, jw + CF_ATT_WARPS * lane) : 0;
    float kf[CF_ATT_PER_LANE], vf[CF_ATT_PER_LANE];
    if (nkw > 0) {
        const long long slot = __shfl_sync(0xffffffffu, my_slot, 0);
        cf_attn_load_kv(kbase + (slot * kv.n_kv + kvh) * kv.hd,
                        vbase + (slot * kv.n_kv + kvh) * kv.hd_v, lane, nd, nv, kf, vf);
    }
    for (int t = 0; t < nkw; t++) {
        float kc[CF_ATT_PER_LANE], vc[CF_ATT_PER_LANE];
#pragma unroll
        for (int i = 0; i < CF_ATT_PER_LANE; i++) {
            kc[i] = kf[i];
            vc[i] = vf[i];
        }
        if (t + 1 < nkw) { /* uniform over the warp */
            const long long slot = __shfl_sync(0xffffffffu, my_slot, t + 1);
            cf_attn_load_kv(kbase + (slot * kv.n_kv + kvh) * kv.hd,
                            vbase + (slot * kv.n_kv + kvh) * kv.hd_v, lane, nd, nv, kf, vf);
        }
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < CF_ATT_PER_LANE; i++)
            if (i < nd) s += qs[lane + 32 * i] * kc[i];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, off);
        if (A.softcap > 0.0f) s = A.softcap * tanhf(s * (1.0f / A.softcap));
        const float mn = fmaxf(m, s);
        const float corr = expf(m - mn); /* 0 for the first key (m = -inf) */
        const float pe = expf(s - mn);
        l = l * corr + pe;
#pragma unroll
        for (int i = 0; i < CF_ATT_PER_LANE; i++)
            if (i < nv) acc[i] = acc[i] * corr + pe * vc[i];
        m = mn;
    }
    if (lane == 0) {
        wm[warp] = m;
        wl[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < CF_ATT_PER_LANE; i++)
        if (i < nv) wacc[warp][lane + 32 * i] = acc[i];
    __syncthreads();

    /* The split holds at least one key (j0 <= j1), so M is finite; warps that saw no key have
     * m = -inf and weigh exp(-inf) = 0. */
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < CF_ATT_WARPS; w++)
        M = fmaxf(M, wm[w]);
    const size_t part = ((size_t)blockIdx.x * gridDim.y + h) * gridDim.z + blockIdx.z;
    if (threadIdx.x == 0) {
        float L = 0.0f;
#pragma unroll
        for (int w = 0; w < CF_ATT_WARPS; w++)
            L += wl[w] * expf(wm[w] - M);
        pml[2 * part] = M;
        pml[2 * part + 1] = L;
    }
    float *pa = pacc + part * (size_t)acc_ld;
    for (int d = threadIdx.x; d < kv.hd_v; d += blockDim.x) {
        float o = 0.0f;
#pragma unroll
        for (int w = 0; w < CF_ATT_WARPS; w++)
            o += wacc[w][d] * expf(wm[w] - M);
        pa[d] = o;
    }
}

/* One block per (row, head): merges the row's splits in split order (online, so the first
 * split is taken as it is: exp(-inf) = 0 scales the empty start). */
__global__ void cf_attn_merge_kernel(struct cf_rows R, struct cf_kv kv, struct cf_attn A, int r0,
                                     int n_split, const float *__restrict__ pml,
                                     const float *__restrict__ pacc, int acc_ld,
                                     float *__restrict__ out, int ld_out) {
    const int r = r0 + (int)blockIdx.x, h = blockIdx.y;
    const int p = R.pos[r];
    const int lo = A.window > 0 ? max(0, p - A.window + 1) : 0;
    const int n = p / CF_ATT_SPLIT - lo / CF_ATT_SPLIT + 1;
    const size_t part0 = ((size_t)blockIdx.x * gridDim.y + h) * (size_t)n_split;
    float *orow = out + (size_t)r * ld_out + (size_t)h * kv.hd_v;
    for (int d = threadIdx.x; d < kv.hd_v; d += blockDim.x) {
        if (n > n_split) { /* the caller's grid was too small: make it visible */
            orow[d] = NAN;
            continue;
        }
        float M = -INFINITY, L = 0.0f, o = 0.0f;
#pragma unroll 4 /* lets the loads of later splits issue early; the order is unchanged */
        for (int s = 0; s < n; s++) {
            const float ms = pml[2 * (part0 + s)], ls = pml[2 * (part0 + s) + 1];
            const float mn = fmaxf(M, ms);
            const float a = expf(M - mn), b = expf(ms - mn);
            L = L * a + ls * b;
            o = o * a + pacc[(part0 + s) * (size_t)acc_ld + d] * b;
            M = mn;
        }
        orow[d] = o / L;
    }
}

static int cf_kv_check(const struct cf_kv *kv) {
    if (kv->n_kv <= 0 || kv->hd <= 0 || kv->hd % 32 || kv->hd > CF_ATT_MAX_HD || kv->hd_v <= 0 ||
        kv->hd_v % 32 || kv->hd_v > CF_ATT_MAX_HD || kv->block_size <= 0)
        return cf_fail("cuda attention: unsupported KV shape n_kv=%d hd=%d hd_v=%d bs=%d", kv->n_kv,
                       kv->hd, kv->hd_v, kv->block_size);
    return 0;
}

extern "C" int cf_kv_store(cudaStream_t stream, const struct cf_rows *rows, const struct cf_kv *kv,
                           const float *k, int ld_k, const float *v, int ld_v) {
    if (rows->n_rows <= 0) return 0;
    if (cf_kv_check(kv)) return -1;
    cf_kv_store_kernel<<<(unsigned)rows->n_rows, 256, 0, stream>>>(*rows, *kv, k, ld_k, v, ld_v);
    return CUDA_CHECK_LAUNCH();
}

extern "C" int cf_attention(cudaStream_t stream, const struct cf_rows *rows, const struct cf_kv *kv,
                            const struct cf_attn *a, const float *q, int ld_q, float *out,
                            int ld_out, const struct cf_att_scratch *sc, int n_split) {
    if (rows->n_rows <= 0) return 0;
    if (cf_kv_check(kv)) return -1;
    if (a->n_head <= 0 || a->n_head > 65535 || a->n_head % kv->n_kv)
        return cf_fail("cuda attention: %d query heads for %d KV heads", a->n_head, kv->n_kv);
    if (ld_q < a->n_head * kv->hd || ld_out < a->n_head * kv->hd_v)
        return cf_fail("cuda attention: row strides too small");
    if (n_split < 1 || n_split > 65535 || !sc || !sc->ml || !sc->acc || sc->acc_ld < kv->hd_v)
        return cf_fail("cuda attention: %d splits, scratch %p (acc_ld %d for hd_v %d)", n_split,
                       (const void *)sc, sc ? sc->acc_ld : 0, kv->hd_v);
    const size_t per_row = (size_t)a->n_head * (size_t)n_split;
    const size_t chunk = sc->n_parts / per_row; /* rows per launch */
    if (chunk < 1)
        return cf_fail("cuda attention: scratch of %zu partials < %zu for one row", sc->n_parts,
                       per_row);
    for (int r0 = 0; r0 < rows->n_rows; r0 += (int)chunk) {
        const int nr = rows->n_rows - r0 < (int)chunk ? rows->n_rows - r0 : (int)chunk;
        cf_attn_split_kernel<<<dim3((unsigned)nr, (unsigned)a->n_head, (unsigned)n_split),
                               CF_ATT_WARPS * 32, 0, stream>>>(*rows, *kv, *a, q, ld_q, r0, sc->ml,
                                                               sc->acc, sc->acc_ld);
        if (CUDA_CHECK_LAUNCH()) return -1;
        cf_attn_merge_kernel<<<dim3((unsigned)nr, (unsigned)a->n_head), 128, 0, stream>>>(
            *rows, *kv, *a, r0, n_split, sc->ml, sc->acc, sc->acc_ld, out, ld_out);
        if (CUDA_CHECK_LAUNCH()) return -1;
    }
    return 0;
}
