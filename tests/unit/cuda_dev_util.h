/*
 * cuda_dev_util — device-side helpers shared by the tests that run kernels on a GPU
 * (test_cuda.c, test_cuda_head.c): device buffers, a seeded random source, random but valid
 * packed weight rows of every supported type, and double-precision references. Test-only;
 * CUDA builds only; include after cuda_test_util.h.
 */
#ifndef GEMMAD_CUDA_DEV_UTIL_H
#define GEMMAD_CUDA_DEV_UTIL_H

#include <stdint.h>
#include <string.h>

#include "engine/cuda/cuda_matmul.h"
#include "tests/unit/cuda_test_util.h"

/* ---- helpers ---------------------------------------------------------------------------- */

static inline void *dev_alloc(size_t n) {
    void *p = NULL;
    T_ASSERTF(cudaMalloc(&p, n ? n : 1) == cudaSuccess, "cudaMalloc(%zu)", n);
    return p;
}

static inline void *dev_up(const void *h, size_t n) {
    void *d = dev_alloc(n);
    T_ASSERT(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice) == cudaSuccess);
    return d;
}

static inline void dev_down(void *h, const void *d, size_t n) {
    T_ASSERTF(cudaDeviceSynchronize() == cudaSuccess, "kernel failed: %s",
              cudaGetErrorString(cudaGetLastError()));
    T_ASSERT(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost) == cudaSuccess);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static inline uint32_t rnd(void) {
    return (uint32_t)(t_xorshift64(&rng_state) >> 11);
}
static inline float frand(void) {
    return (float)(rnd() & 0xFFFFFF) / (float)0x1000000 * 2.0f - 1.0f;
}


static const uint32_t kTypes[] = {QT_F32,  QT_F16,  QT_BF16,   QT_Q4_0, QT_Q4_1, QT_Q5_0,
                                  QT_Q5_1, QT_Q8_0, QT_IQ4_NL, QT_Q4_K, QT_Q5_K, QT_Q6_K};
#define N_TYPES (int)(sizeof kTypes / sizeof kTypes[0])

/* Random but valid packed rows: random bytes with sane fp16 scale fields (or, for the float
 * types, random values). */
static inline void *make_rows(uint32_t type, int n_in, int n_out, size_t *row_bytes) {
    const struct quant_info *qi = quant_info(type);
    T_ASSERT(qi);
    const size_t rb = quant_row_size(type, n_in);
    T_ASSERT(rb > 0);
    uint8_t *w = cu_xmalloc(rb * (size_t)n_out);
    const size_t n = (size_t)n_in * (size_t)n_out;
    if (type == QT_F32) {
        for (size_t i = 0; i < n; i++)
            ((float *)w)[i] = frand();
    } else if (type == QT_F16) {
        for (size_t i = 0; i < n; i++)
            ((uint16_t *)w)[i] = quant_f32_to_f16(frand());
    } else if (type == QT_BF16) {
        for (size_t i = 0; i < n; i++)
            ((uint16_t *)w)[i] = quant_f32_to_bf16(frand());
    } else {
        for (size_t i = 0; i < rb * (size_t)n_out; i++)
            w[i] = (uint8_t)rnd();
        int offs[2] = {0, -1};
        if (type == QT_Q4_1 || type == QT_Q5_1 || type == QT_Q4_K || type == QT_Q5_K) offs[1] = 2;
        if (type == QT_Q6_K) offs[0] = 208;
        const size_t nblk = rb * (size_t)n_out / (size_t)qi->size;
        for (size_t b = 0; b < nblk; b++)
            for (int k = 0; k < 2; k++) {
                if (offs[k] < 0) continue;
                uint16_t h = quant_f32_to_f16(0.001f + 0.02f * fabsf(frand()));
                memcpy(w + b * (size_t)qi->size + (size_t)offs[k], &h, 2);
            }
    }
    *row_bytes = rb;
    return w;
}

static inline struct cf_weight dev_weight(uint32_t type, int n_in, int n_out, void **host) {
    size_t rb = 0;
    *host = make_rows(type, n_in, n_out, &rb);
    struct cf_weight w = {type, n_in, n_out, rb, dev_up(*host, rb * (size_t)n_out)};
    return w;
}

static inline float *ref_dequant(uint32_t type, const void *rows, int n_in, int n_out) {
    float *out = cu_xmalloc(sizeof(float) * (size_t)n_in * (size_t)n_out);
    const size_t rb = quant_row_size(type, n_in);
    for (int r = 0; r < n_out; r++)
        T_ASSERT(quant_dequant_row_ref(type, (const uint8_t *)rows + (size_t)r * rb,
                                       out + (size_t)r * n_in, n_in) == 0);
    return out;
}

static inline float *ref_matmul(const float *W, const float *X, int n_in, int n_out, int M) {
    float *Y = cu_xmalloc(sizeof(float) * (size_t)M * n_out);
    for (int m = 0; m < M; m++)
        for (int o = 0; o < n_out; o++) {
            double s = 0;
            for (int i = 0; i < n_in; i++)
                s += (double)W[(size_t)o * n_in + i] * (double)X[(size_t)m * n_in + i];
            Y[(size_t)m * n_out + o] = (float)s;
        }
    return Y;
}

#endif
