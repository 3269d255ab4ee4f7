/*
 * cuda_attn.cuh — where a row's keys/values live in the paged cache (cuda_attn.h's layout),
 * shared by cuda_attn.cu and cuda_qkv.cu. Device code only.
 */
#ifndef GEMMAD_CUDA_ATTN_CUH
#define GEMMAD_CUDA_ATTN_CUH

#include <stdint.h>

#include "engine/cuda/cuda_attn.h"

/* Row index (in units of one position of this layer) where position p of sequence seq is
 * stored: block * block_size + p % block_size. */
__device__ __forceinline__ int64_t cf_kv_slot(const struct cf_rows &R, const struct cf_kv &kv,
                                              int seq, int p) {
    const int32_t *info = R.seq_info + 4 * seq;
    const int b = p / kv.block_size;
    const int32_t blk = kv.ring ? R.tables[info[2] + b % info[3]] : R.tables[info[0] + b];
    return (int64_t)blk * kv.block_size + p % kv.block_size;
}

#endif
