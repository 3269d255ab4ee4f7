/* cuda_getrows — see cuda_getrows.h. */
#include "engine/cuda/cuda_getrows.h"

#include "engine/cuda/cuda_dequant.cuh"

/* One block per output row; threads walk the row's 32-element chunks. */
template <int T>
__global__ void cf_get_rows_kernel(const uint8_t *__restrict__ W, size_t row_bytes, int n_in,
                                   const int32_t *__restrict__ ids, float scale,
                                   float *__restrict__ out, int ld_out) {
    const int r = blockIdx.x;
    const int64_t src = ids ? ids[r] : r;
    const uint8_t *row = W + (size_t)src * row_bytes;
    float *o = out + (size_t)r * ld_out;
    for (int c = threadIdx.x; c < n_in / 32; c += blockDim.x) {
        float v[32];
        cf_dq_chunk<T>(row, c, v);
#pragma unroll
        for (int k = 0; k < 32; k++)
            o[c * 32 + k] = v[k] * scale;
    }
}

extern "C" int cf_get_rows(cudaStream_t stream, const struct cf_weight *w, const int32_t *ids,
                           int n_rows, float scale, float *out, int ld_out) {
    if (n_rows <= 0) return 0;
    if (w->n_in <= 0 || w->n_in % 32 != 0 || ld_out < w->n_in)
        return cf_fail("cf_get_rows: bad shape n_in=%d ld_out=%d", w->n_in, ld_out);
    const unsigned thr = 128;
    const uint8_t *W = static_cast<const uint8_t *>(w->data);
    switch (w->type) {
#define CF_CASE(TT)                                                                                \
    case TT:                                                                                       \
        cf_get_rows_kernel<TT><<<(unsigned)n_rows, thr, 0, stream>>>(W, w->row_bytes, w->n_in,     \
                                                                     ids, scale, out, ld_out);     \
        break;
        CF_FOR_EACH_TYPE(CF_CASE)
#undef CF_CASE
    default:
        return cf_fail("cf_get_rows: unsupported weight type %u", (unsigned)w->type);
    }
    return CUDA_CHECK_LAUNCH();
}

extern "C" int cf_dequant_chunk_host(uint32_t type, const void *row, int c, float *y) {
    const uint8_t *r = static_cast<const uint8_t *>(row);
    switch (type) {
#define CF_CASE(TT)                                                                                \
    case TT:                                                                                       \
        cf_dq_chunk<TT>(r, c, y);                                                                  \
        return 0;
        CF_FOR_EACH_TYPE(CF_CASE)
#undef CF_CASE
    default:
        return -1;
    }
}
