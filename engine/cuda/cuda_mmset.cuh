/*
 * cuda_mmset — the argument of the kernels that run several matmuls over one input in one
 * launch (struct cf_mm_set) and its checks, shared by cf_matmul_set (cuda_mmset.cu) and
 * cf_mmvq_matmul_set (cuda_mmvq.cu). Internal to engine/cuda/.
 */
#ifndef GEMMAD_CUDA_MMSET_CUH
#define GEMMAD_CUDA_MMSET_CUH

#include <string.h>

#include "engine/cuda/cuda_matmul.h"
#include "engine/cuda/cuda_mm.cuh"

/* Up to CF_MM_SET_MAX weights of one type and n_in over the same input in one launch (the
 * argument of cf_matmul_set's and cf_mmvq_matmul_set's kernels): the blocks of weight i
 * follow those of weight i - 1, CF_MM_WARPS rows per block. */
struct cf_mm_set {
    const uint8_t *W[CF_MM_SET_MAX];
    uint32_t type[CF_MM_SET_MAX]; /* enum quant_type of each weight */
    float *Y[CF_MM_SET_MAX];
    size_t row_bytes[CF_MM_SET_MAX];
    int n_out[CF_MM_SET_MAX], ldy[CF_MM_SET_MAX], groups[CF_MM_SET_MAX];
    int n;
};

/* Checks the weights of a set (one n_in, one type unless mixed; geglu: two of one n_out, Y[1]
 * unused) and fills S. Returns 0 or -1 (cf_fail with `who`). Host code. */
static inline int cf_mm_set_make(const char *who, const struct cf_weight *const *w, int n,
                                 float *const *Y, const int *ldy, int geglu, int mixed,
                                 struct cf_mm_set *S) {
    if (n < 1 || n > CF_MM_SET_MAX || (geglu && n != 2))
        return cf_fail("%s: %d weights (geglu %d)", who, n, geglu);
    memset(S, 0, sizeof *S);
    S->n = n;
    for (int i = 0; i < n; i++) {
        if ((!mixed && w[i]->type != w[0]->type) || w[i]->n_in != w[0]->n_in || w[i]->n_in <= 0 ||
            w[i]->n_in % 32 || w[i]->n_out <= 0 || (geglu && w[i]->n_out != w[0]->n_out) ||
            (!(geglu && i == 1) && ldy[i] < w[i]->n_out))
            return cf_fail("%s: weight %d does not match (type %u/%u, n_in %d/%d)", who, i,
                           (unsigned)w[i]->type, (unsigned)w[0]->type, w[i]->n_in, w[0]->n_in);
        S->W[i] = static_cast<const uint8_t *>(w[i]->data);
        S->type[i] = w[i]->type;
        S->Y[i] = Y[i];
        S->row_bytes[i] = w[i]->row_bytes;
        S->n_out[i] = w[i]->n_out;
        S->ldy[i] = ldy[i];
        S->groups[i] = (w[i]->n_out + CF_MM_WARPS - 1) / CF_MM_WARPS;
    }
    return 0;
}

#endif
