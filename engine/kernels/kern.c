/*
 * kern — instruction-set dispatch and the threaded matmul (see kern.h, kern_impl.h).
 *
 * kern_matmul quantizes the M activation rows once into act_scratch (one 64-byte aligned
 * row per activation), then splits the output rows into chunks that the pool's threads take
 * one at a time. Every output element is one vec_dot (or the bit-identical gemm tile) of a
 * weight row with an activation row, so the result never depends on M, on the chunking or
 * on the number of threads.
 */
#include "engine/kernels/kern.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "engine/kernels/kern_impl.h"

static struct kern_ops g_ops;                     /* active table, written by kern_init only */
static enum kern_isa g_isa = KERN_ISA_REF;        /* what g_ops holds */
static pthread_once_t g_once = PTHREAD_ONCE_INIT; /* default init when kern_init was skipped */
static int g_inited;                              /* 1 once kern_init has filled g_ops */

/* ---- dispatch ----------------------------------------------------------------------------- */

const char *kern_isa_name(enum kern_isa isa) {
    switch (isa) {
    case KERN_ISA_REF:
        return "scalar";
    case KERN_ISA_AVX2:
        return "avx2";
    case KERN_ISA_AVX512:
        return "avx512";
    case KERN_ISA_AMX:
        return "avx512-amx";
    default:
        return "auto";
    }
}

#if defined(__x86_64__)
/* AMX-TILE and AMX-INT8 (CPUID leaf 7: EDX bits 24 and 25), then the tile data state
 * (XFEATURE_XTILEDATA, 18) requested from the kernel for this process: Linux 5.16+ leaves
 * it off until asked, and refuses on kernels or hypervisors without it. Asked once. */
#define KERN_ARCH_REQ_XCOMP_PERM 0x1023
#define KERN_XFEATURE_XTILEDATA 18
static int g_amx_ok = -1;
static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;

static void kern_amx_probe(void) {
    unsigned a, b, c, d;
    g_amx_ok = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25)))
        return;
    g_amx_ok = syscall(SYS_arch_prctl, KERN_ARCH_REQ_XCOMP_PERM, KERN_XFEATURE_XTILEDATA) == 0;
}

static int kern_amx_permitted(void) {
    pthread_once(&g_amx_once, kern_amx_probe);
    return g_amx_ok;
}
#endif

/* The one vendor check: AMD cores' prefetcher (kern_stream_one_row, kern_prefetch_far) and
 * BF16 dot-product rate (kern_bf16p_wanted) are what the kernel choices below differ on. */
static int kern_cpu_is_amd(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_is("amd");
#else
    return 0;
#endif
}

int kern_stream_one_row(void) {
    return kern_cpu_is_amd();
}

/* Measured on a Zen 4 guest only (kern_panel_avx512.c: pz_pf_for, pk_pf_for); Intel hosts
 * keep the near prefetch the panel kernels were tuned with there. */
int kern_prefetch_far(void) {
    return kern_cpu_is_amd();
}

/* The packed BF16 batch kernels (kern_bf16p_avx512.c) need AVX512_BF16, and are used only
 * where they were measured faster than OpenBLAS sgemm: AMD (Zen 4: 2x at M = 512, BENCHMARKS
 * 2026-12-07). Intel cores run vdpbf16ps on one port, at the rate of their two f32 FMA
 * ports; not measured there, so sgemm stays. */
int kern_bf16p_wanted(void) {
#if defined(__x86_64__) || defined(__i386__)
    return kern_cpu_is_amd() && __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

int kern_isa_supported(enum kern_isa isa) {
    switch (isa) {
    case KERN_ISA_REF:
        return 1;
#if defined(__x86_64__) || defined(__i386__)
    case KERN_ISA_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") &&
               __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case KERN_ISA_AVX512:
        __builtin_cpu_init();
        return kern_isa_supported(KERN_ISA_AVX2) &&
               __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vnni");
    case KERN_ISA_AMX:
        return kern_isa_supported(KERN_ISA_AVX512) && kern_amx_permitted();
#endif
    default:
        return 0;
    }
}

static void act_copy_f32(const float *x, void *dst, int64_t n) {
    memcpy(dst, x, (size_t)n * sizeof(float));
}

static kern_quant_act_fn ref_quant_act(uint32_t act_type) {
    switch (act_type) {
    case QT_F32:
        return act_copy_f32;
    case QT_F16:
        return quant_f16_row_ref;
    case QT_BF16:
        return quant_bf16_row_ref;
    case QT_Q8_0:
        return quant_q8_0_row_ref;
    case QT_Q8_1:
        return quant_q8_1_row_ref;
    case QT_Q8_K:
        return quant_q8_K_row_ref;
    default:
        return NULL;
    }
}

static void dequant_copy_f32(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static kern_dequant_fn ref_dequant(uint32_t type) {
    switch (type) {
    case QT_F32:
        return dequant_copy_f32;
    case QT_F16:
        return quant_dequant_f16_ref;
    case QT_BF16:
        return quant_dequant_bf16_ref;
    case QT_Q4_0:
        return quant_dequant_q4_0_ref;
    case QT_Q4_1:
        return quant_dequant_q4_1_ref;
    case QT_Q5_0:
        return quant_dequant_q5_0_ref;
    case QT_Q5_1:
        return quant_dequant_q5_1_ref;
    case QT_Q8_0:
        return quant_dequant_q8_0_ref;
    case QT_Q2_K:
        return quant_dequant_q2_K_ref;
    case QT_Q3_K:
        return quant_dequant_q3_K_ref;
    case QT_Q4_K:
        return quant_dequant_q4_K_ref;
    case QT_Q5_K:
        return quant_dequant_q5_K_ref;
    case QT_Q6_K:
        return quant_dequant_q6_K_ref;
    case QT_IQ4_NL:
        return quant_dequant_iq4_nl_ref;
    default:
        return NULL;
    }
}

int kern_init(enum kern_isa force) {
    enum kern_isa isa = force;
    if (force == KERN_ISA_AUTO) {
        isa = kern_isa_supported(KERN_ISA_AMX)      ? KERN_ISA_AMX
              : kern_isa_supported(KERN_ISA_AVX512) ? KERN_ISA_AVX512
              : kern_isa_supported(KERN_ISA_AVX2) ? KERN_ISA_AVX2
                                                  : KERN_ISA_REF;
    } else if (!kern_isa_supported(force)) {
        return -1;
    }
    struct kern_ops ops;
    memset(&ops, 0, sizeof(ops));
    for (uint32_t t = 0; t < QT_COUNT; t++) {
        const struct quant_info *qi = quant_info(t);
        if (!qi || !qi->supported) continue;
        ops.t[t].vec_dot = quant_vec_dot_ref(t);
        ops.t[t].quant_act = ref_quant_act(qi->vec_dot_type);
        ops.t[t].dequant = ref_dequant(t);
    }
#if defined(__x86_64__) || defined(__i386__)
    if (isa >= KERN_ISA_AVX2) kern_register_dequant_avx2(&ops);
#endif
    if (isa >= KERN_ISA_AVX2) kern_register_avx2(&ops);
    if (isa == KERN_ISA_AVX2) panel_register_avx2(&ops);
    if (isa >= KERN_ISA_AVX512) {
        kern_register_avx512(&ops);
        panel_register_avx512(&ops);
        if (kern_bf16p_wanted()) kern_register_bf16p_avx512(&ops);
    }
#if defined(__x86_64__)
    if (isa >= KERN_ISA_AMX) panel_register_amx(&ops);
#endif
    g_ops = ops;
    g_isa = isa;
    g_inited = 1;
    return 0;
}

static void kern_default_init(void) {
    if (!g_inited) kern_init(KERN_ISA_AUTO);
}

/* Lets tools and tests skip kern_init; the forward pass calls kern_init itself. */
static inline const struct kern_type_ops *kern_ops_for(uint32_t type) {
    pthread_once(&g_once, kern_default_init);
    return type < QT_COUNT ? &g_ops.t[type] : NULL;
}

int kern_bf16_packed(void) {
    const struct kern_type_ops *o = kern_ops_for(QT_BF16);
    return o && o->gemm_packed != NULL;
}

enum kern_isa kern_active_isa(void) {
    pthread_once(&g_once, kern_default_init);
    return g_isa;
}

kern_panel_fn kern_panel_kernel(uint32_t type) {
    const struct kern_type_ops *o = kern_ops_for(type);
    return o ? o->panel : NULL;
}

quant_vec_dot_fn kern_vec_dot(uint32_t w_type) {
    const struct kern_type_ops *o = kern_ops_for(w_type);
    return o ? o->vec_dot : NULL;
}

void kern_quant_act(uint32_t w_type, const float *x, void *dst, int64_t n) {
    const struct kern_type_ops *o = kern_ops_for(w_type);
    assert(o && o->quant_act);
    o->quant_act(x, dst, n);
}

/* ---- matmul ------------------------------------------------------------------------------- */

/* Bytes between activation rows in act_scratch: 64-byte aligned rows for the SIMD loads. */
static size_t act_stride_type(uint32_t act_type, int64_t n_in) {
    size_t sz = quant_row_size(act_type, n_in);
    return (sz + 63) & ~(size_t)63;
}

static size_t act_stride(const struct kern_weight *w) {
    const struct quant_info *qi = quant_info(w->type);
    return qi ? act_stride_type(qi->vec_dot_type, w->n_in) : 0;
}

size_t kern_act_bytes(const struct kern_weight *w, int M) {
    return M > 0 ? act_stride(w) * (size_t)M : 0;
}

/* One weight of a matmul job: output rows [o0, o1) of w into Y, in tasks of `chunk` rows
 * numbered from task0 (concatenated groups) or from 0 (zipped groups, see kern.h). */
struct mm_part {
    const struct kern_type_ops *ops;
    const struct kern_weight *w;
    const uint8_t *act; /* [M] rows of a_stride bytes: X quantized to w's vec_dot_type */
    size_t a_stride;    /* bytes */
    float *Y;           /* Y[m * ldy + o] */
    int ldy;
    const float *X;     /* the f32 input (the BLAS path reads it unquantized) */
    int packed;         /* 1: act is in kern_bf16p's packed layout: gemm_packed runs */
    int qi;             /* its entry in mm_job.q */
    int64_t o0, o1; /* output rows to compute */
    int task0;      /* first task of this part (concatenated groups) */
};

struct mm_job {
    int n_parts;
    struct mm_part part[KERN_GROUP_MAX];
    int M;
    int64_t chunk;    /* output rows per task (a multiple of KERN_GEMM_MAX_ROWS) */
    kern_epi_fn epi;  /* zipped groups: called after each task's rows */
    void *epi_arg;
    /* Activation quantization: one entry per distinct vec_dot_type. */
    const float *X; /* [M][n_in] f32 input */
    int64_t n_in;
    int n_q;
    struct {
        kern_quant_act_fn fn;
        kern_pack_act_fn pack; /* set: rows go into the packed layout instead */
        uint8_t *act;
        size_t stride;
    } q[KERN_GROUP_MAX];
};

/* Tasks of activation type k: a row each, or for a packed layout a block of KERN_BF16P_ROWS
 * rows, so the rows that share cache lines are written by one thread (a row a task had the
 * two cores writing the same lines: bp_pack took 3.7-10% of BF16 prefill profiles, 2.4%
 * after; prefill medians moved +1.3-1.5%, inside the noise). */
static int mm_quant_tasks(const struct mm_job *j, int k) {
    return j->q[k].pack ? (j->M + KERN_BF16P_ROWS - 1) / KERN_BF16P_ROWS : j->M;
}

/* Task = (act type, row or packed block): each activation row is quantized by exactly one
 * task, so the bytes do not depend on the split. */
static void mm_quant_task(void *arg, int task, int n_tasks) {
    (void)n_tasks;
    const struct mm_job *j = arg;
    int qi = 0;
    while (task >= mm_quant_tasks(j, qi))
        task -= mm_quant_tasks(j, qi++);
    if (j->q[qi].pack) {
        const int m0 = task * KERN_BF16P_ROWS, m1 = m0 + kern_bf16p_block_rows(j->M, task);
        for (int m = m0; m < m1; m++)
            j->q[qi].pack(j->X + (int64_t)m * j->n_in, j->q[qi].act, m, j->M, j->n_in);
        return;
    }
    const int m = task;
    j->q[qi].fn(j->X + (int64_t)m * j->n_in, j->q[qi].act + (size_t)m * j->q[qi].stride, j->n_in);
}

/* Decode (M = 1) streams every weight byte once from DRAM, and the hardware prefetchers stop
 * at each 4 KiB page, so the first lines of every page arrive late. A kernel that prefetches
 * inside its row loop (gemm_task: the AVX-512 Q4_0/Q5_0/Q8_0 ones, F16/BF16 on AVX-512 and
 * AVX2) gets whole tasks, so it prepares the activation once per task; the driver only
 * prefetches the task's first KERN_PF_DIST bytes. The others get a few rows at a time (about
 * KERN_PF_STEP bytes: a single row once rows pass 1 KiB, F16's 1,280-byte rows of 640 were
 * one per call until they took whole tasks), and
 * before each call the driver prefetches the bytes KERN_PF_DIST ahead of them: a steady
 * trickle of a dozen or so prefetches per call, few enough not to fill the line-fill
 * buffers. Measured on the Gemma 3 270M LM head (Q8_0, one thread, Xeon with AVX-512):
 * 26 ms -> 17-19 ms; bursts of 40+ lines (4+ rows at once) or distances of 4 KiB and more
 * gained little or lost. */
#define KERN_PF_DIST 2048
#define KERN_PF_STEP 1024

static inline void mm_prefetch(const uint8_t *p, const uint8_t *end) {
    for (; p < end; p += 64)
        __builtin_prefetch(p, 0, 3);
}

/* Output rows [r0, r1) for all M activation rows: tiles of KERN_GEMM_MAX_ROWS weight rows
 * (or the whole range for gemm_task kernels), each tile swept over all activations while it
 * is hot in cache (M = 1: see above). */
static int mm_blas(const struct mm_part *j, int M) {
    const uint32_t t = j->w->type;
    return j->w->blas && !j->w->panel &&
           (t == QT_F16 ? M >= KERN_BLAS_MIN_M_F16
                        : (t == QT_F32 || t == QT_BF16) && M >= KERN_BLAS_MIN_M);
}

static void mm_rows(const struct mm_part *j, int M, int64_t r0, int64_t r1) {
    if (j->packed) {
        j->ops->gemm_packed(j->w->n_in, (const uint8_t *)j->w->data + (size_t)r0 * j->w->row_bytes,
                            j->w->row_bytes, r1 - r0, j->act, M, j->Y + r0, j->ldy);
        return;
    }
    if (mm_blas(j, M) &&
        kern_blas_rows(j->w, j->ops->dequant, j->X, M, r0, r1, j->Y, j->ldy) == 0)
        return;
    const int64_t n = j->w->n_in;
    const size_t rb = j->w->row_bytes;
    const uint8_t *wdata = j->w->data;
    /* whole tasks for kernels that take them (they prepare the activations once per call) */
    int step = j->ops->gemm_task && r1 > r0 ? (int)(r1 - r0) : KERN_GEMM_MAX_ROWS;
    const uint8_t *wend = wdata + (size_t)j->w->n_out * rb;
    if (j->w->panel && j->ops->panel) { /* panels: one sequential stream per task */
        for (int m = 0; m < M; m += KERN_GEMM_MAX_ACTS) {
            int na = M - m < KERN_GEMM_MAX_ACTS ? M - m : KERN_GEMM_MAX_ACTS;
            j->ops->panel(n, j->w->panel, r0, r1, j->act + (size_t)m * j->a_stride, j->a_stride,
                          na, j->Y + (int64_t)m * j->ldy, j->ldy);
        }
        return;
    }
    if (M == 1) {
        if (!j->ops->gemm_task) {
            step = (int)((KERN_PF_STEP + rb - 1) / rb);
            if (step > KERN_GEMM_MAX_ROWS) step = KERN_GEMM_MAX_ROWS;
        }
        const uint8_t *p0 = wdata + (size_t)r0 * rb;
        mm_prefetch(p0, p0 + KERN_PF_DIST < wend ? p0 + KERN_PF_DIST : wend);
    }
    for (int64_t r = r0; r < r1; r += step) {
        int nr = (int)(r1 - r < step ? r1 - r : step);
        const uint8_t *wr = wdata + (size_t)r * rb;
        if (M == 1 && !j->ops->gemm_task) {
            const uint8_t *p0 = wr + KERN_PF_DIST, *p1 = p0 + (size_t)nr * rb;
            mm_prefetch(p0, p1 < wend ? p1 : wend);
        }
        if (j->ops->gemm) {
            for (int m = 0; m < M; m += KERN_GEMM_MAX_ACTS) {
                int na = M - m < KERN_GEMM_MAX_ACTS ? M - m : KERN_GEMM_MAX_ACTS;
                j->ops->gemm(n, wr, rb, nr, j->act + (size_t)m * j->a_stride, j->a_stride, na,
                             j->Y + (int64_t)m * j->ldy + r, j->ldy);
            }
        } else {
            quant_vec_dot_fn dot = j->ops->vec_dot;
            for (int m = 0; m < M; m++) {
                const uint8_t *a = j->act + (size_t)m * j->a_stride;
                float *y = j->Y + (int64_t)m * j->ldy + r;
                for (int i = 0; i < nr; i++)
                    y[i] = dot(n, wr + (size_t)i * rb, a);
            }
        }
    }
}

static void mm_task(void *arg, int task, int n_tasks) {
    (void)n_tasks;
    const struct mm_job *j = arg;
    if (j->epi) { /* zipped: the same rows of every part, then the epilogue */
        int64_t r0 = j->part[0].o0 + (int64_t)task * j->chunk;
        int64_t r1 = r0 + j->chunk < j->part[0].o1 ? r0 + j->chunk : j->part[0].o1;
        for (int p = 0; p < j->n_parts; p++)
            mm_rows(&j->part[p], j->M, r0, r1);
        j->epi(j->epi_arg, r0, r1);
        return;
    }
    int p = 0;
    while (p + 1 < j->n_parts && task >= j->part[p + 1].task0)
        p++;
    const struct mm_part *pt = &j->part[p];
    int64_t r0 = pt->o0 + (int64_t)(task - pt->task0) * j->chunk;
    int64_t r1 = r0 + j->chunk < pt->o1 ? r0 + j->chunk : pt->o1;
    mm_rows(pt, j->M, r0, r1);
}

/* Rows per task. Batches: about 4 tasks per thread, each 16..256 rows. One activation row
 * (decode): the work is a pure weight stream and a task costs one atomic, so cut finer
 * (about 8 per thread) to keep the threads' finishing times close. */
static int64_t mm_chunk(int64_t rows, int n_threads, int M) {
    int64_t c = rows / ((int64_t)n_threads * (M == 1 ? 8 : 4));
    if (c > 256) c = 256;
    c = (c + KERN_GEMM_MAX_ROWS - 1) / KERN_GEMM_MAX_ROWS * KERN_GEMM_MAX_ROWS;
    return c < KERN_GEMM_MAX_ROWS ? KERN_GEMM_MAX_ROWS : c;
}

size_t kern_act_bytes_group(const struct kern_mm_out *outs, int n_outs, int M) {
    uint32_t seen[KERN_GROUP_MAX];
    int n_seen = 0;
    size_t total = 0;
    for (int i = 0; i < n_outs && i < KERN_GROUP_MAX; i++) {
        const struct quant_info *qi = quant_info(outs[i].w->type);
        if (!qi) continue;
        int dup = 0;
        for (int k = 0; k < n_seen && !dup; k++)
            dup = seen[k] == qi->vec_dot_type;
        if (dup) continue;
        seen[n_seen++] = qi->vec_dot_type;
        total += M > 0 ? act_stride_type(qi->vec_dot_type, outs[i].w->n_in) * (size_t)M : 0;
    }
    return total;
}

/* Quantizes X once per distinct activation type into act_scratch and fills the parts. */
static void mm_setup(struct mm_job *j, const struct kern_mm_out *outs, int n_outs,
                     const float *X, int M, void *act_scratch) {
    memset(j, 0, sizeof(*j));
    j->n_parts = n_outs;
    j->M = M;
    j->X = X;
    j->n_in = outs[0].w->n_in;
    uint32_t qtype[KERN_GROUP_MAX];
    size_t off = 0;
    for (int i = 0; i < n_outs; i++) {
        const struct kern_weight *w = outs[i].w;
        const struct kern_type_ops *ops = kern_ops_for(w->type);
        assert(ops && ops->vec_dot && ops->quant_act);
        assert(w->row_bytes == quant_row_size(w->type, w->n_in));
        assert(w->n_in == j->n_in);
        const uint32_t at = quant_info(w->type)->vec_dot_type;
        int k = 0;
        while (k < j->n_q && qtype[k] != at)
            k++;
        if (k == j->n_q) {
            qtype[k] = at;
            j->q[k].fn = ops->quant_act;
            j->q[k].act = (uint8_t *)act_scratch + off;
            j->q[k].stride = act_stride_type(at, j->n_in);
            off += j->q[k].stride * (size_t)M;
            j->n_q++;
        }
        struct mm_part *p = &j->part[i];
        p->ops = ops;
        p->w = w;
        p->act = j->q[k].act;
        p->a_stride = j->q[k].stride;
        p->Y = outs[i].Y;
        p->ldy = outs[i].ldy;
        p->X = X;
        p->o0 = 0;
        p->o1 = w->n_out;
        p->qi = k;
    }
    /* Packed BF16 batches: only when every weight reading that activation type may take them */
    int veto[KERN_GROUP_MAX] = {0};
    for (int i = 0; i < n_outs; i++) {
        const struct kern_weight *w = outs[i].w;
        const struct kern_type_ops *ops = j->part[i].ops;
        const int k = j->part[i].qi;
        if (ops->gemm_packed && ops->pack_act && w->blas && !w->panel && M >= KERN_BLAS_MIN_M &&
            w->n_in % 2 == 0)
            j->q[k].pack = ops->pack_act;
        else
            veto[k] = 1;
    }
    for (int k = 0; k < j->n_q; k++)
        if (veto[k]) j->q[k].pack = NULL;
    for (int i = 0; i < n_outs; i++)
        j->part[i].packed = j->q[j->part[i].qi].pack != NULL;
}

static void mm_quantize(struct pool *pool, struct mm_job *j) {
    int n = 0;
    for (int k = 0; k < j->n_q; k++)
        n += mm_quant_tasks(j, k);
    if (j->M >= 4)
        pool_run(pool, mm_quant_task, j, n);
    else
        for (int t = 0; t < n; t++)
            mm_quant_task(j, t, n);
}

/* Runs the parts' rows (already set up and quantized) in one pool run. */
static void mm_launch(struct pool *pool, struct mm_job *j) {
    const int nt = pool_size(pool);
    int64_t n_tasks;
    if (j->epi) {
        const int64_t rows = j->part[0].o1 - j->part[0].o0;
        j->chunk = mm_chunk(rows, nt, j->M); /* tasks per thread as for one weight */
        n_tasks = (rows + j->chunk - 1) / j->chunk;
    } else {
        int64_t rows = 0;
        for (int p = 0; p < j->n_parts; p++)
            rows += j->part[p].o1 - j->part[p].o0;
        j->chunk = mm_chunk(rows, nt, j->M);
        n_tasks = 0;
        for (int p = 0; p < j->n_parts; p++) {
            j->part[p].task0 = (int)n_tasks;
            n_tasks += (j->part[p].o1 - j->part[p].o0 + j->chunk - 1) / j->chunk;
        }
    }
    pool_run(pool, mm_task, j, (int)n_tasks);
}

void kern_matmul(struct pool *pool, const struct kern_weight *w, const float *X, int M, float *Y,
                 int ldy, void *act_scratch) {
    if (M <= 0 || w->n_out <= 0) return;
    const struct kern_mm_out out = {w, Y, ldy};
    struct mm_job j;
    mm_setup(&j, &out, 1, X, M, act_scratch);
    mm_quantize(pool, &j);
    mm_launch(pool, &j);
}

void kern_matmul_group(struct pool *pool, const struct kern_mm_out *outs, int n_outs,
                       const float *X, int M, void *act_scratch, kern_epi_fn epi, void *epi_arg) {
    assert(n_outs >= 1 && n_outs <= KERN_GROUP_MAX);
    if (M <= 0) return;
    for (int i = 0; i < n_outs; i++) assert(!epi || outs[i].w->n_out == outs[0].w->n_out);
    struct mm_job j;
    mm_setup(&j, outs, n_outs, X, M, act_scratch);
    j.epi = epi;
    j.epi_arg = epi_arg;
    mm_quantize(pool, &j);
    mm_launch(pool, &j);
}

void kern_get_row(const struct kern_weight *w, int64_t r, float *dst) {
    assert(r >= 0 && r < w->n_out);
    const struct kern_type_ops *o = kern_ops_for(w->type);
    assert(o && o->dequant);
    o->dequant((const uint8_t *)w->data + (size_t)r * w->row_bytes, dst, w->n_in);
}
