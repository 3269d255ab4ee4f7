/*
 * cuda_host_mmvq — the launchers of engine/cuda/cuda_mmvq.h as plain host C, the companion of
 * cuda_host_emul.h (which it needs: emu_record, h_geglu; include it after that file), for
 * test_cuda_host.c only. The contract of the header, with the CPU's own pieces: the
 * activations quantized by quant_q8_1_row_ref (whose qs and d are quant_q8_0_row_ref's) into
 * the device layout, and each output by cu_mmvq_row_ref (cuda_test_util.h): each block's term
 * by the CPU's reference dot of that one block, summed per lane (blocks l, l + 32, …) and by
 * the xor butterfly.
 */
#ifndef GEMMAD_CUDA_HOST_MMVQ_H
#define GEMMAD_CUDA_HOST_MMVQ_H

#include "engine/cuda/cuda_mmvq.h"

static int mmvq_seen;       /* matmuls (a set counts once per weight) on the MMVQ path */
static int mmvq_mixed_seen; /* MMVQ set launches whose weights are not all of one type */

int cf_mmvq_supported(uint32_t type) {
    return type == QT_Q4_0 || type == QT_Q4_1 || type == QT_Q5_0 || type == QT_Q5_1 ||
           type == QT_Q8_0 || type == QT_IQ4_NL;
}

static int h_mmvq_quantize(const float *X, int M, int n_in, void *buf, size_t bytes) {
    if (M < 1 || M > CF_MMVQ_MAX_ROWS || n_in <= 0 || n_in % 32 || !buf ||
        bytes < cf_mmvq_bytes(M, n_in) || ((uintptr_t)buf & 15))
        return -1;
    const int nb = n_in / 32;
    const struct cf_mmvq_act A = cf_mmvq_layout(buf, M, n_in);
    struct block_q8_1 *blk = malloc((size_t)nb * sizeof *blk);
    T_ASSERT(blk);
    for (int m = 0; m < M; m++) {
        quant_q8_1_row_ref(X + (size_t)m * n_in, blk, n_in);
        for (int b = 0; b < nb; b++) {
            memcpy(A.qs + (size_t)m * n_in + 32 * (size_t)b, blk[b].qs, 32);
            A.d[(size_t)m * nb + b] = quant_f16_to_f32(blk[b].d);
            A.s[(size_t)m * nb + b] = quant_f16_to_f32(blk[b].s);
        }
    }
    free(blk);
    return 0;
}

/* Y = X · Wᵀ from the quantized rows in buf (cu_mmvq_row_ref for each output). */
static int h_mmvq_matmul(const struct cf_weight *w, const void *buf, int M, float *Y, int ldy) {
    if (!cf_mmvq_supported(w->type) || M < 1 || M > CF_MMVQ_MAX_ROWS || w->n_in % 32 ||
        ldy < w->n_out)
        return -1;
    mmvq_seen++;
    const int nb = w->n_in / 32;
    const struct cf_mmvq_act A = cf_mmvq_layout((void *)buf, M, w->n_in);
    struct block_q8_1 *act = malloc((size_t)nb * sizeof *act);
    T_ASSERT(act);
    for (int m = 0; m < M; m++) {
        for (int b = 0; b < nb; b++) { /* back to the CPU's blocks (fp16 values: exact) */
            act[b].d = quant_f32_to_f16(A.d[(size_t)m * nb + b]);
            act[b].s = quant_f32_to_f16(A.s[(size_t)m * nb + b]);
            memcpy(act[b].qs, A.qs + (size_t)m * w->n_in + 32 * (size_t)b, 32);
        }
        for (int o = 0; o < w->n_out; o++)
            Y[(size_t)m * ldy + o] = cu_mmvq_row_ref(
                w->type, (const uint8_t *)w->data + (size_t)o * w->row_bytes, w->n_in, act);
    }
    free(act);
    return 0;
}

static int h_mmvq_set(const struct cf_weight *w, int n, const void *buf, int M, float *const *Y,
                      const int *ldy, int geglu) {
    T_ASSERT(n >= 1 && n <= CF_MM_SET_MAX && (!geglu || n == 2));
    for (int i = 1; i < n; i++) {
        T_ASSERT(w[i].n_in == w[0].n_in); /* types may differ */
        if (w[i].type != w[0].type) mmvq_mixed_seen++;
    }
    if (!geglu) {
        for (int i = 0; i < n; i++)
            if (h_mmvq_matmul(&w[i], buf, M, Y[i], ldy[i])) return -1;
        return 0;
    }
    T_ASSERT(w[1].n_out == w[0].n_out);
    const int nf = w[0].n_out;
    float *up = malloc((size_t)M * nf * sizeof(float));
    T_ASSERT(up);
    int rc = h_mmvq_matmul(&w[0], buf, M, Y[0], ldy[0]) || h_mmvq_matmul(&w[1], buf, M, up, nf);
    if (!rc) rc = h_geglu(NULL, Y[0], ldy[0], up, nf, nf, M);
    free(up);
    return rc;
}

struct a_mmvq_q {
    const float *X;
    int M, n_in;
    void *buf;
    size_t bytes;
};
EMU_OP(a_mmvq_q, h_mmvq_quantize(a->X, a->M, a->n_in, a->buf, a->bytes))
int cf_mmvq_quantize(cudaStream_t stream, const float *X, int M, int n_in, void *buf,
                     size_t bytes) {
    (void)stream;
    const struct a_mmvq_q a = {X, M, n_in, buf, bytes};
    if (emu_capturing) return emu_record(emu_run_a_mmvq_q, &a, sizeof a);
    return h_mmvq_quantize(X, M, n_in, buf, bytes);
}

struct a_mmvq {
    struct cf_weight w[CF_MM_SET_MAX];
    float *Y[CF_MM_SET_MAX];
    int ldy[CF_MM_SET_MAX];
    const void *buf;
    int n, M, geglu;
};
EMU_OP(a_mmvq, h_mmvq_set(a->w, a->n, a->buf, a->M, a->Y, a->ldy, a->geglu))
int cf_mmvq_matmul_set(cudaStream_t stream, const struct cf_weight *const *w, int n,
                       const void *buf, int M, float *const *Y, const int *ldy, int geglu) {
    (void)stream;
    struct a_mmvq a;
    memset(&a, 0, sizeof a);
    T_ASSERT(n >= 1 && n <= CF_MM_SET_MAX);
    for (int i = 0; i < n; i++)
        a.w[i] = *w[i], a.Y[i] = Y[i], a.ldy[i] = ldy[i];
    a.buf = buf, a.n = n, a.M = M, a.geglu = geglu;
    if (emu_capturing) return emu_record(emu_run_a_mmvq, &a, sizeof a);
    return h_mmvq_set(a.w, a.n, a.buf, a.M, a.Y, a.ldy, a.geglu);
}

int cf_mmvq_matmul(cudaStream_t stream, const struct cf_weight *w, const void *buf, int M,
                   float *Y, int ldy) {
    float *const y[1] = {Y};
    const int ld[1] = {ldy};
    return cf_mmvq_matmul_set(stream, &w, 1, buf, M, y, ld, 0);
}

#endif
