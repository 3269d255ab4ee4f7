/*
 * cpu_weights — the model's weights as the CPU backend's matmuls read them (cpu_int.h):
 * quantized weights repacked into panels where the active ISA has a panel kernel
 * (engine/kernels/panel.h), F32/F16/BF16 ones allowed the BLAS path unless deterministic;
 * for a tied-embedding model, copies (in huge pages) of everything else the forward pass
 * reads, so the model's file mapping is no longer read. The copies belong to the cpu_ctx;
 * the model itself is never modified.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/log.h"
#include "engine/cpu_int.h"
#include "engine/gguf.h"
#include "engine/kernels/panel.h"

/* Owned anonymous memory for a plain copy of some of the file's bytes, in transparent huge
 * pages where the host allows them (panels get theirs in panel_pack). */
static void *own(struct cpu_ctx *c, size_t bytes) {
    if (be_fault()) return NULL;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    madvise(p, bytes, MADV_HUGEPAGE); /* fewer TLB misses than the file's 4 KiB pages */
    c->panels[c->n_panels++] = (struct cpu_panel){p, bytes};
    return p;
}

/* The whole pages of the file mapping inside [p, p + bytes) handed back to the kernel once
 * copied (a read-only private file mapping: a later touch would only read them back), so
 * that start-up holds about the file's size, not file + copies. */
static void drop_pages(const struct gguf_file *f, const void *p, size_t bytes) {
    const uintptr_t m0 = (uintptr_t)f->map, m1 = m0 + f->map_size;
    if (!f->owns_map || (uintptr_t)p < m0 || (uintptr_t)p + bytes > m1) return;
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = ((uintptr_t)p + pg - 1) & ~(pg - 1);
    const uintptr_t e = ((uintptr_t)p + bytes) & ~(pg - 1);
    if (e > a) madvise((void *)a, e - a, MADV_DONTNEED);
}

/* w repacked into panels when the active ISA has a panel kernel for it (panel.h); the
 * pages of its rows go back to the kernel, as the matmuls read only the panel now (with
 * large page-cache folios another read nearby may map some back; cpu_weights_init drops
 * the whole mapping where it can). */
static void pack_weight(struct cpu_ctx *c, struct kern_weight *w) {
    if (!panel_supported(w)) return;
    void *p = NULL;
    size_t bytes = 0;
    if (panel_pack(w, c->pool, &p, &bytes) != 0) return;
    c->panels[c->n_panels++] = (struct cpu_panel){p, bytes};
    c->panel_bytes += bytes;
    w->panel = p;
    if (c->m->gguf) drop_pages(c->m->gguf, w->data, (size_t)w->n_out * w->row_bytes);
}

/* Unless deterministic, an unquantized weight's batches may go through BLAS sgemm, or BF16
 * ones through the packed BF16 kernels (faster from a few dozen rows, but the results
 * depend on the batch: kern.h). */
static void allow_blas(struct cpu_ctx *c, struct kern_weight *w) {
    const int half = w->type == QT_F32 || w->type == QT_F16 || w->type == QT_BF16;
    if (!w->data || !half || c->o.deterministic) return;
    if (!kern_blas_available() && !(w->type == QT_BF16 && kern_bf16_packed())) return;
    w->blas = 1;
    c->blas_weights++;
}

/* Bump allocator over one owned block for the small copies (weights left unpacked, norm
 * vectors): *at advances, 64-byte aligned; a NULL src stays NULL. */
static const void *copy_into(const struct gguf_file *f, uint8_t *base, size_t *at, const void *src,
                             size_t bytes) {
    if (!src || !bytes) return src;
    void *d = base + *at;
    memcpy(d, src, bytes);
    drop_pages(f, src, bytes);
    *at += (bytes + 63) & ~(size_t)63;
    return d;
}

/* The layer's views (kern_weights left unpacked, then its vectors) with their sizes: each
 * visit(ctx, ptr, bytes) may redirect *ptr. */
static void layer_views(const struct model_config *cfg, int l, struct model_layer_w *w,
                        void (*visit)(void *ctx, const void **ptr, size_t bytes), void *ctx) {
    const struct model_layer_cfg *lc = &cfg->layer[l];
    struct kern_weight *ws[] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->gate,
                                &w->up, &w->down, &w->inp_gate, &w->proj};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
        if (!ws[i]->panel) visit(ctx, &ws[i]->data, ws[i]->row_bytes * (size_t)ws[i]->n_out);
    const size_t E = (size_t)cfg->n_embd * sizeof(float), H = (size_t)lc->head_dim * sizeof(float);
    const float **vs[] = {&w->attn_norm, &w->post_attn_norm, &w->ffn_norm, &w->post_ffw_norm,
                          &w->post_norm, &w->q_norm, &w->k_norm, &w->rope_freqs};
    const size_t vb[] = {E, E, E, E, E, H, H, (size_t)(lc->n_rot / 2) * sizeof(float)};
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++)
        visit(ctx, (const void **)vs[i], vb[i]);
}

struct copy_ctx {
    const struct gguf_file *f; /* where the sources lie */
    uint8_t *base;             /* NULL while sizing */
    size_t at;
};

static void copy_visit(void *arg, const void **ptr, size_t bytes) {
    struct copy_ctx *k = arg;
    if (!*ptr || !bytes) return;
    if (k->base)
        *ptr = copy_into(k->f, k->base, &k->at, *ptr, bytes);
    else
        k->at += (bytes + 63) & ~(size_t)63;
}

/* A tied LM head that has no panel kernel (F32 / F16 / BF16; K-quants under AVX2), copied
 * as it is into owned huge pages: every token reads it whole, and read through the file's
 * 4 KiB pages it decoded 5-18% slower (TLB misses; docs/BENCHMARKS.md). The copy is also
 * where the embedding lookup reads its rows, as the file is let go. Same bytes, same bits. */
static int copy_head(struct cpu_ctx *c) {
    const size_t bytes = (size_t)c->output.n_out * c->output.row_bytes;
    void *p = own(c, bytes);
    if (!p) return -1;
    const size_t step = (size_t)32 << 20; /* 32 MiB at a time: start-up holds one more */
    for (size_t at = 0; at < bytes; at += step) {
        const size_t b = bytes - at < step ? bytes - at : step;
        memcpy((uint8_t *)p + at, (const uint8_t *)c->output.data + at, b);
        drop_pages(c->m->gguf, (const uint8_t *)c->output.data + at, b);
    }
    mprotect(p, bytes, PROT_READ); /* read-only, like the panels */
    c->output.data = p;
    return 0;
}

/* c->lw, c->output, c->output_norm: the model's weights as the CPU matmuls read them.
 * Where a panel kernel exists the weight is repacked. For a model whose embedding lookup
 * can read the LM head (tied, Gemma 1-3), the head is copied when it has no panel, and
 * everything else the forward pass reads is copied too; then the file's pages are handed
 * back to the kernel: the mapping is not touched again, so memory stays the file's size
 * instead of file + panels (touching any byte of the mapping can map a whole large
 * page-cache folio), and every weight sits in memory the process owns. */
int cpu_weights_init(struct cpu_ctx *c) {
    const struct model *m = c->m;
    const struct model_config *cfg = &m->cfg;
    const int L = cfg->n_layer;
    c->lw = be_fault() ? NULL : calloc((size_t)L, sizeof *c->lw);
    if (!c->lw) return -1;
    c->panels = be_fault() ? NULL : calloc((size_t)L * 9 + 2, sizeof *c->panels);
    if (!c->panels) return -1;
    c->output = m->output;
    c->output_norm = m->output_norm;
    pack_weight(c, &c->output);
    for (int l = 0; l < L; l++) {
        struct model_layer_w *w = &c->lw[l];
        *w = m->layer[l];
        struct kern_weight *ws[] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->gate,
                                    &w->up, &w->down, &w->inp_gate, &w->proj};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
            pack_weight(c, ws[i]);
            allow_blas(c, ws[i]);
        }
    }
    /* (a caller's buffer, gguf_open_buffer, is not the file's pages to hand back) */
    const int tied = m->tok_embd.data == m->output.data && cfg->n_embd_pl == 0 && m->gguf &&
                     m->gguf->map && m->gguf->owns_map;
    if (tied && !c->output.panel && copy_head(c) != 0) return -1;
    allow_blas(c, &c->output);
    if (tied) {
        struct copy_ctx k = {m->gguf, NULL, 0};
        for (int l = 0; l < L; l++)
            layer_views(cfg, l, &c->lw[l], copy_visit, &k);
        const size_t ob = (size_t)cfg->n_embd * sizeof(float);
        k.at += (ob + 63) & ~(size_t)63;
        k.base = own(c, k.at);
        if (!k.base) return -1;
        k.at = 0;
        for (int l = 0; l < L; l++)
            layer_views(cfg, l, &c->lw[l], copy_visit, &k);
        c->output_norm = copy_into(m->gguf, k.base, &k.at, m->output_norm, ob);
        const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
        const uintptr_t m0 = (uintptr_t)m->gguf->map & ~(pg - 1),
                        m1 = (uintptr_t)m->gguf->map + m->gguf->map_size;
        madvise((void *)m0, m1 - m0, MADV_DONTNEED);
        c->detached = 1;
    }
    if (c->blas_weights)
        LOG_I("forward", 0,
              "%d F32/F16/BF16 weights: batches of %d+ rows (F16: %d+) through %s, so rows "
              "depend on their batch (--deterministic turns this off)",
              c->blas_weights, KERN_BLAS_MIN_M, KERN_BLAS_MIN_M_F16,
              !kern_bf16_packed()     ? "OpenBLAS sgemm"
              : kern_blas_available() ? "OpenBLAS sgemm (BF16: vdpbf16ps on activations "
                                        "rounded to BF16)"
                                      : "vdpbf16ps on activations rounded to BF16 (BF16 only)");
    if (c->panel_bytes)
        LOG_I("forward", 0, "weights repacked into panels: %.1f MiB%s",
              (double)c->panel_bytes / (1024.0 * 1024.0),
              c->detached ? "; the file mapping is no longer read" : "");
    return 0;
}

/* Everything cpu_weights_init made, also after it failed half way. */
void cpu_weights_free(struct cpu_ctx *c) {
    if (c->panels)
        for (int i = 0; i < c->n_panels; i++)
            panel_free(c->panels[i].p, c->panels[i].bytes);
    free(c->panels);
    free(c->lw);
    c->panels = NULL;
    c->lw = NULL;
    c->n_panels = 0;
}
