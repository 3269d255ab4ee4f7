/*
 * cuda_attn — the paged KV cache on the device and attention over it.
 *
 * KV storage mirrors engine/kvstore.h: a layer's keys live in blocks of block_size positions,
 * laid out as __half [n_blocks][block_size][n_kv][hd] (values: [..][n_kv][hd_v]). Position p
 * of a sequence lives in block tables[full + p / bs] on FULL layers and in the ring slot
 * tables[swa + (p / bs) % n_swa] on sliding-window layers, at row p % bs of that block —
 * the same block ids and tables as struct kvstore_seq.
 *
 * cf_kv_store writes the step's new keys/values (f32 rows, rounded to fp16); cf_attention
 * then computes, for every row and query head, softmax(scale·q·k [softcapped]) · v over the
 * keys of its sequence at positions max(0, p - window + 1) … p (window 0: all of 0 … p),
 * where q·scale is rounded to fp16 first (as llama.cpp's CPU path does with an F16 cache),
 * with online softmax. GQA: query head h reads KV head h / (n_head / n_kv).
 *
 * Split keys (flash-decoding): a row's keys are cut at absolute positions into splits of
 * CF_ATT_SPLIT; one block per (row, head, split) computes that split's partial softmax into
 * the caller's scratch, and a merge kernel combines a row's splits in order. A single decode
 * row at a long context thus spreads over many multiprocessors. The split boundaries and
 * every summation order depend only on the row's position and window: a row's result does
 * not depend on the other rows in the step, on how its prompt was cut into chunks, nor on
 * n_split (blocks past a row's last split do nothing), so a CUDA graph can be captured with
 * the largest n_split the context allows and replayed at any position.
 *
 * Asynchronous on the given stream; device pointers.
 */
#ifndef GEMMAD_CUDA_ATTN_H
#define GEMMAD_CUDA_ATTN_H

#include <stdint.h>

#include "engine/cuda/cuda_check.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CF_ATT_MAX_HD 512 /* largest head dim (Gemma 4 global layers) */

/* One step's rows as the KV kernels see them (device pointers). */
struct cf_rows {
    const int32_t *pos;      /* [n_rows] position of each row */
    const int32_t *seq;      /* [n_rows] index of the row's sequence in this step */
    const int32_t *seq_info; /* [n_seqs][4]: FULL table offset, n_full, SWA ring offset, n_swa
                              * (offsets into tables) */
    const int32_t *tables;   /* block ids of every sequence's tables */
    int n_rows;
};

/* One layer's KV storage on the device. */
struct cf_kv {
    void *k;        /* __half [n_blocks][block_size][n_kv][hd] */
    void *v;        /* __half [n_blocks][block_size][n_kv][hd_v] */
    int n_kv;       /* KV heads */
    int hd, hd_v;   /* key and value head dims (multiples of 32, <= CF_ATT_MAX_HD) */
    int block_size; /* positions per block */
    int ring;       /* 1: SWA class (ring table), 0: FULL class */
};

/* Attention parameters of one layer. */
struct cf_attn {
    int n_head;    /* query heads, a multiple of kv->n_kv */
    float scale;   /* multiplies q before q·k */
    float softcap; /* 0 = off; else s = softcap * tanh(s / softcap) before softmax */
    int window;    /* > 0: only keys with p - j < window are visible (sliding layer) */
};

#define CF_ATT_SPLIT 64 /* keys per split */

/* Device scratch for the split partials: per (row, head, split) a (max, sum) pair and an
 * unnormalised accumulator of acc_ld floats (>= hd_v). Rows that do not fit at once are run
 * in several launches. */
struct cf_att_scratch {
    float *ml;      /* [n_parts][2] */
    float *acc;     /* [n_parts][acc_ld] */
    size_t n_parts; /* >= n_head * n_split (one row) */
    int acc_ld;
};

/* The splits a row at position <= max_pos needs with this window (0: none): the n_split to
 * pass to cf_attention. */
static inline int cf_attn_splits(int max_pos, int window) {
    const int all = max_pos / CF_ATT_SPLIT + 1;
    const int win = (window + CF_ATT_SPLIT - 1) / CF_ATT_SPLIT + 1;
    return window > 0 && win < all ? win : all;
}

/* k: [n_rows][ld_k] rows of n_kv*hd; v: [n_rows][ld_v] rows of n_kv*hd_v. */
int cf_kv_store(cudaStream_t stream, const struct cf_rows *rows, const struct cf_kv *kv,
                const float *k, int ld_k, const float *v, int ld_v);

/* q: [n_rows][ld_q] rows of n_head*hd; out: [n_rows][ld_out] rows of n_head*hd_v. n_split:
 * at least cf_attn_splits(largest position of the rows, a->window) (a row that needs more
 * gets NaN, never a silently short sum), at most 65535. */
int cf_attention(cudaStream_t stream, const struct cf_rows *rows, const struct cf_kv *kv,
                 const struct cf_attn *a, const float *q, int ld_q, float *out, int ld_out,
                 const struct cf_att_scratch *sc, int n_split);

#ifdef __cplusplus
}
#endif

#endif
