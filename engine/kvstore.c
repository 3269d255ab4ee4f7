/*
 * kvstore — block storage for keys and values (see kvstore.h).
 *
 * Memory layout: one allocation; for every layer that owns storage, a K region and a V
 * region of n_blocks[class] blocks each. Within a block, positions are consecutive rows
 * of row_bytes (n_head_kv * head_dim elements in the storage type), so one position of
 * one layer is one contiguous row, the unit fwd_run writes and reads.
 */
#include "engine/kvstore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "engine/kernels/quant.h"
#include "engine/model.h"

const char *kvstore_dtype_name(enum kvstore_dtype dt) {
    switch (dt) {
    case KVSTORE_F16: return "f16";
    case KVSTORE_Q8_0: return "q8_0";
    case KVSTORE_F32: return "f32";
    }
    return "?";
}

int kvstore_dtype_parse(const char *s, enum kvstore_dtype *out) {
    if (!s) return -1;
    if (strcmp(s, "f16") == 0) *out = KVSTORE_F16;
    else if (strcmp(s, "q8_0") == 0) *out = KVSTORE_Q8_0;
    else if (strcmp(s, "f32") == 0) *out = KVSTORE_F32;
    else return -1;
    return 0;
}

/* Bytes of n elements in the storage type; 0 when n does not fit it (Q8_0 needs n % 32). */
static size_t row_bytes(enum kvstore_dtype dt, int64_t n) {
    switch (dt) {
    case KVSTORE_F16: return (size_t)n * 2;
    case KVSTORE_F32: return (size_t)n * 4;
    case KVSTORE_Q8_0: return quant_row_size(QT_Q8_0, n);
    }
    return 0;
}

/* Storage class of layer l, or -1 when it reads another layer's cache. */
static int layer_class(const struct model *m, int l) {
    const struct model_layer_cfg *lc = &m->cfg.layer[l];
    if (lc->kv_layer != l) return -1;
    return (lc->sliding && m->cfg.sliding_window > 0) ? KVSTORE_SWA : KVSTORE_FULL;
}

size_t kvstore_block_bytes(const struct model *m, enum kvstore_dtype dt, int block_size,
                       enum kvstore_class cls) {
    size_t total = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        if (layer_class(m, l) != (int)cls) continue;
        const struct model_layer_cfg *lc = &m->cfg.layer[l];
        total += (row_bytes(dt, lc->head_dim) + row_bytes(dt, lc->head_dim_v)) *
                 (size_t)lc->n_head_kv *
                 (size_t)block_size;
    }
    return total;
}

int kvstore_swa_ring_blocks(const struct model *m, int block_size, int max_new) {
    int w = m->cfg.sliding_window;
    if (w <= 0 || block_size <= 0) return 0;
    int any = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) any |= layer_class(m, l) == KVSTORE_SWA;
    if (!any) return 0;
    if (max_new < 1) max_new = 1;
    return (w + max_new - 2) / block_size + 2;
}

int kvstore_create(const struct model *m, enum kvstore_dtype dt, int block_size, int n_blocks_full,
               int n_blocks_swa, struct kvstore_pool **out, char *err, size_t errlen) {
    *out = NULL;
    if (block_size <= 0 || block_size > (1 << 16) || n_blocks_full < 0 || n_blocks_swa < 0) {
        if (err) snprintf(err, errlen, "kvstore_create: block_size %d / block counts %d, %d invalid",
                          block_size, n_blocks_full, n_blocks_swa);
        return -1;
    }
    if (dt != KVSTORE_F16 && dt != KVSTORE_Q8_0 && dt != KVSTORE_F32) {
        if (err) snprintf(err, errlen, "kvstore_create: unknown KV type %d", (int)dt);
        return -1;
    }
    struct kvstore_pool *p = calloc(1, sizeof *p);
    if (!p) goto fail_nomem;
    p->model = m;
    p->dtype = dt;
    p->block_size = block_size;
    p->n_blocks[KVSTORE_FULL] = n_blocks_full;
    p->n_blocks[KVSTORE_SWA] = n_blocks_swa;
    p->block_bytes[KVSTORE_FULL] = kvstore_block_bytes(m, dt, block_size, KVSTORE_FULL);
    p->block_bytes[KVSTORE_SWA] = kvstore_block_bytes(m, dt, block_size, KVSTORE_SWA);
    if (p->block_bytes[KVSTORE_SWA] == 0) p->n_blocks[KVSTORE_SWA] = 0;
    if (p->block_bytes[KVSTORE_FULL] == 0) p->n_blocks[KVSTORE_FULL] = 0;

    size_t total = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        int c = layer_class(m, l);
        p->cls[l] = c;
        if (c < 0) continue;
        const struct model_layer_cfg *lc = &m->cfg.layer[l];
        /* per head, so that a Q8_0 block never straddles two heads */
        p->row_bytes_k[l] = row_bytes(dt, lc->head_dim) * (size_t)lc->n_head_kv;
        p->row_bytes_v[l] = row_bytes(dt, lc->head_dim_v) * (size_t)lc->n_head_kv;
        if (p->row_bytes_k[l] == 0 || p->row_bytes_v[l] == 0) {
            if (err) snprintf(err, errlen, "kvstore_create: layer %d head dims %d/%d do not fit KV "
                              "type %s (blocks of 32)", l, lc->head_dim, lc->head_dim_v,
                              kvstore_dtype_name(dt));
            free(p);
            return -1;
        }
        p->k_block_stride[l] = p->row_bytes_k[l] * (size_t)block_size;
        p->v_block_stride[l] = p->row_bytes_v[l] * (size_t)block_size;
        size_t nb = (size_t)p->n_blocks[c];
        /* keep every region 64-byte aligned */
        total += (p->k_block_stride[l] * nb + 63) & ~(size_t)63;
        total += (p->v_block_stride[l] * nb + 63) & ~(size_t)63;
    }
    for (int l = m->cfg.n_layer; l < 512; l++) p->cls[l] = -1;
    p->mem_bytes = total;
    if (total) {
        /* Anonymous mapping: page-aligned, zero-filled (a read of a never-written row, a
         * caller bug, yields zeros rather than NaN), and pages cost memory only once used. */
        void *mem = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                         0);
        if (mem == MAP_FAILED) {
            free(p);
            goto fail_nomem;
        }
        p->mem = mem;
    }
    uint8_t *cur = p->mem;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        int c = p->cls[l];
        if (c < 0) continue;
        size_t nb = (size_t)p->n_blocks[c];
        p->k_base[l] = cur;
        cur += (p->k_block_stride[l] * nb + 63) & ~(size_t)63;
        p->v_base[l] = cur;
        cur += (p->v_block_stride[l] * nb + 63) & ~(size_t)63;
    }
    *out = p;
    return 0;
fail_nomem:
    if (err) snprintf(err, errlen, "kvstore_create: out of memory for the KV cache");
    return -5;
}

void kvstore_destroy(struct kvstore_pool *p) {
    if (!p) return;
    if (p->mem) munmap(p->mem, p->mem_bytes);
    free(p);
}
