/*
 * kern_blas — batches against F32 / F16 / BF16 weights through BLAS sgemm (OpenBLAS), for
 * kern_matmul when the weight's blas flag is set (see kern.h). Built with GEMMAD_BLAS
 * (the Makefile sets it when pkg-config finds openblas); without it kern_blas_rows always
 * declines and the half-precision tiles run.
 *
 * A task's weight rows are widened to f32, up to KERN_BLAS_SLAB rows at a time, into a buffer of
 * the calling thread (allocated on its first use and when a longer row needs more; freed
 * when the thread exits), then one cblas_sgemm multiplies all M activation rows (the f32
 * input itself, not its F16/BF16 rounding) by the slab. OpenBLAS runs single-threaded on
 * the calling pool thread (openblas_set_num_threads(1) once), so the pool's split stays the
 * only parallelism. sgemm's blocking depends on M: results are not batch-invariant.
 */
#include "engine/kernels/kern.h"
#include "engine/kernels/kern_impl.h"

#include <pthread.h>
#include <stdlib.h>

#if defined(GEMMAD_BLAS)
#include <cblas.h>

/* Weight rows widened per sgemm call: 256 (bench_kern --blas, F16 640 x 2048, M = 512, one
 * thread: 64 rows 38.9, 128 43.0, 256 44.6 GMAC/s), fewer for long rows so that the buffer
 * stays within KERN_BLAS_BUF bytes. */
#define KERN_BLAS_SLAB 256
#define KERN_BLAS_BUF ((size_t)4 << 20)

struct blas_buf {
    float *w;     /* [slab_rows(cap_in)][cap_in] */
    int64_t cap_in;
};

static int slab_rows(int64_t n_in) {
    const int64_t r = (int64_t)(KERN_BLAS_BUF / sizeof(float)) / n_in;
    return r >= KERN_BLAS_SLAB ? KERN_BLAS_SLAB : r < 16 ? 16 : (int)r;
}

static pthread_key_t g_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static int g_key_ok;

static void blas_buf_free(void *p) {
    struct blas_buf *b = p;
    if (b) free(b->w);
    free(b);
}

static void blas_init_once(void) {
    g_key_ok = pthread_key_create(&g_key, blas_buf_free) == 0;
    openblas_set_num_threads(1);
}

/* This thread's buffer, holding slab_rows(n_in) rows of n_in floats, or NULL. */
static float *blas_scratch(int64_t n_in) {
    pthread_once(&g_key_once, blas_init_once);
    if (!g_key_ok) return NULL;
    struct blas_buf *b = pthread_getspecific(g_key);
    if (!b) {
        b = calloc(1, sizeof *b);
        if (!b) return NULL;
        if (pthread_setspecific(g_key, b) != 0) {
            free(b);
            return NULL;
        }
    }
    if (b->cap_in < n_in) {
        const size_t bytes = (size_t)slab_rows(n_in) * (size_t)n_in * sizeof(float);
        float *w = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        if (!w) return NULL;
        free(b->w);
        b->w = w;
        b->cap_in = n_in;
    }
    return b->w;
}

int kern_blas_available(void) {
    return 1;
}

int kern_blas_rows(const struct kern_weight *w, void (*widen)(const void *, float *, int64_t),
                   const float *X, int M, int64_t r0, int64_t r1, float *Y, int ldy) {
    const int64_t n = w->n_in;
    if (w->type == QT_F32) { /* the rows are f32 already */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, (int)(r1 - r0), (int)n, 1.0f, X,
                    (int)n, (const float *)w->data + r0 * n, (int)n, 0.0f, Y + r0, ldy);
        return 0;
    }
    float *buf = blas_scratch(n);
    if (!buf) return -1;
    const int slab = slab_rows(n);
    for (int64_t r = r0; r < r1; r += slab) {
        const int nr = (int)(r1 - r < slab ? r1 - r : slab);
        for (int i = 0; i < nr; i++)
            widen((const uint8_t *)w->data + (size_t)(r + i) * w->row_bytes, buf + (size_t)i * n,
                  n);
        /* Y[m][r + i] = sum_k X[m][k] * W[r + i][k] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, nr, (int)n, 1.0f, X, (int)n, buf,
                    (int)n, 0.0f, Y + r, ldy);
    }
    return 0;
}

#else

int kern_blas_available(void) {
    return 0;
}

int kern_blas_rows(const struct kern_weight *w, void (*widen)(const void *, float *, int64_t),
                   const float *X, int M, int64_t r0, int64_t r1, float *Y, int ldy) {
    (void)w, (void)widen, (void)X, (void)M, (void)r0, (void)r1, (void)Y, (void)ldy;
    return -1;
}

#endif
