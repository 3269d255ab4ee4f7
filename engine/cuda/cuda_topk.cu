/* cuda_topk — see cuda_topk.h. */
#include "engine/cuda/cuda_topk.h"

#include <math.h>

#define CF_TOPK_THREADS 1024
#define CF_TOPK_WARPS (CF_TOPK_THREADS / 32)

/* Order-preserving key: larger value, larger key; every NaN 0 (below −inf's 0x007fffff);
 * −0 keyed as +0, since the host's comparisons find them equal. */
__device__ __forceinline__ unsigned cf_topk_key(float v) {
    if (v != v) return 0u;
    if (v == 0.0f) v = 0.0f;
    const unsigned b = __float_as_uint(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__global__ void __launch_bounds__(CF_TOPK_THREADS)
    cf_topk_kernel(const float *__restrict__ Y, int ldy, int n, const int32_t *__restrict__ rows,
                   const float *__restrict__ scale, int32_t *__restrict__ ids,
                   float *__restrict__ vals) {
    __shared__ unsigned hist[256];
    __shared__ unsigned s_prefix, s_need, s_base, s_wsum[CF_TOPK_WARPS];
    __shared__ int s_cnt;
    __shared__ unsigned ck[CF_TOPK_MAX];
    __shared__ int ci[CF_TOPK_MAX];
    __shared__ float cv[CF_TOPK_MAX];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const float *y = Y + (size_t)rows[blockIdx.x] * ldy;
    const float sc = scale[blockIdx.x];
    const int K = n < CF_TOPK_MAX ? n : CF_TOPK_MAX;

    /* The K-th largest key, 8 bits at a time: among keys matching the bits found so far,
     * the digit where the count from the top reaches the number still needed. */
    unsigned prefix = 0, mask = 0, need = (unsigned)K;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += CF_TOPK_THREADS) hist[i] = 0;
        __syncthreads();
        for (int i0 = 0; i0 < n; i0 += CF_TOPK_THREADS) {
            const int i = i0 + tid;
            unsigned d = 256; /* no digit */
            if (i < n) {
                const unsigned k = cf_topk_key(__fmul_rn(y[i], sc));
                if ((k & mask) == prefix) d = (k >> shift) & 255u;
            }
            /* one shared atomic per distinct digit of the warp */
            const unsigned same = __match_any_sync(0xffffffffu, d);
            if (d < 256 && lane == __ffs(same) - 1) atomicAdd(&hist[d], (unsigned)__popc(same));
        }
        __syncthreads();
        if (tid == 0) {
            unsigned acc = 0;
            int d = 255;
            for (; d > 0; d--) {
                if (acc + hist[d] >= need) break;
                acc += hist[d];
            }
            s_prefix = prefix | ((unsigned)d << shift);
            s_need = need - acc;
        }
        __syncthreads();
        prefix = s_prefix;
        need = s_need;
        mask |= 255u << shift;
    }
    /* prefix is the K-th key: every key above it (K - need of them) and the `need` lowest
     * ids equal to it, in chunks of the block in id order. */
    const unsigned thr = prefix, n_gt = (unsigned)K - need;
    if (tid == 0) s_cnt = 0, s_base = 0;
    __syncthreads();
    for (int i0 = 0; i0 < n; i0 += CF_TOPK_THREADS) {
        const int i = i0 + tid;
        float v = 0.0f;
        unsigned k = 0;
        if (i < n) v = __fmul_rn(y[i], sc), k = cf_topk_key(v);
        const bool eq = i < n && k == thr;
        if (i < n && k > thr) {
            const int p = atomicAdd(&s_cnt, 1);
            ck[p] = k, ci[p] = i, cv[p] = v;
        }
        const unsigned bal = __ballot_sync(0xffffffffu, eq);
        if (lane == 0) s_wsum[warp] = (unsigned)__popc(bal);
        __syncthreads();
        unsigned before = s_base + (unsigned)__popc(bal & ((1u << lane) - 1u));
        for (int w = 0; w < warp; w++) before += s_wsum[w];
        if (eq && before < need) {
            const unsigned p = n_gt + before;
            ck[p] = k, ci[p] = i, cv[p] = v;
        }
        __syncthreads();
        if (tid == 0) {
            unsigned t = 0;
            for (int w = 0; w < CF_TOPK_WARPS; w++) t += s_wsum[w];
            s_base += t;
        }
        __syncthreads();
        const bool done = s_base >= need && (unsigned)s_cnt == n_gt;
        __syncthreads(); /* every thread has read them before the next chunk changes them */
        if (done) break;
    }
    /* Rank the K collected entries by (key desc, id asc); NaN entries (key 0) become pads. */
    const size_t o = (size_t)blockIdx.x * CF_TOPK_MAX;
    if (tid < K) {
        const unsigned k = ck[tid];
        const int i = ci[tid];
        int rank = 0;
        for (int j = 0; j < K; j++) rank += ck[j] > k || (ck[j] == k && ci[j] < i);
        ids[o + rank] = k ? i : -1;
        vals[o + rank] = k ? cv[tid] : __int_as_float(0x7fc00000);
    } else if (tid < CF_TOPK_MAX) {
        ids[o + tid] = -1;
        vals[o + tid] = __int_as_float(0x7fc00000);
    }
}

extern "C" int cf_topk_rows(cudaStream_t stream, const float *Y, int ldy, int n,
                            const int32_t *rows, const float *scale, int M, int32_t *ids,
                            float *vals) {
    if (M <= 0) return 0;
    if (n <= 0 || ldy < n) return cf_fail("cf_topk_rows: bad shape n=%d ldy=%d", n, ldy);
    cf_topk_kernel<<<(unsigned)M, CF_TOPK_THREADS, 0, stream>>>(Y, ldy, n, rows, scale, ids,
                                                                 vals);
    return CUDA_CHECK_LAUNCH();
}
