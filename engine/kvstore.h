/*
 * kvstore — the memory that holds keys and values, cut into fixed-size blocks of
 * `block_size` token positions. It knows layouts and addresses, nothing about which
 * sequence owns which block: allocation, block tables, prefix sharing and eviction belong
 * to the caller (scheduler/kvcache.* for the server, through scheduler/runner.* for gemmad-cli).
 *
 * Two block classes: FULL blocks back the global-attention layers (every position is
 * kept), SWA blocks back the sliding-window layers (a sequence keeps a ring of them, so
 * only the last window is stored). A block id of one class holds that block's positions
 * for every layer of the class. Layers that share another layer's cache (Gemma 4) own no
 * storage. Models without sliding layers have no SWA class.
 *
 * Storage precision: F16 (default, like llama.cpp), Q8_0 (blocks of 32 along the head
 * dim), or F32 (debugging). It stays packed in that format.
 *
 * Threads: create/destroy by the owner; the engine thread reads and writes block contents
 * during fwd_run; block ids are handed out by the scheduler thread, which is the engine
 * thread too, so no locking is needed here.
 */
#ifndef GEMMAD_KVSTORE_H
#define GEMMAD_KVSTORE_H

#include <stddef.h>
#include <stdint.h>

struct model;

enum kvstore_dtype { KVSTORE_F16 = 0, KVSTORE_Q8_0 = 1, KVSTORE_F32 = 2 };
enum kvstore_class { KVSTORE_FULL = 0, KVSTORE_SWA = 1 };

struct kvstore_pool {
    const struct model *model;
    enum kvstore_dtype dtype;
    int block_size;           /* token positions per block */
    int n_blocks[2];          /* blocks per class */
    size_t block_bytes[2];    /* bytes of one block of each class over all its layers (K+V) */
    /* Per layer (index = the layer that owns storage, i.e. cfg.layer[l].kv_layer == l): */
    int cls[512];             /* enum kvstore_class of layer l, or -1 when it owns no storage */
    uint8_t *k_base[512];     /* block b of layer l's keys at k_base[l] + b * k_block_stride[l] */
    uint8_t *v_base[512];
    size_t k_block_stride[512]; /* bytes per block for this layer's keys */
    size_t v_block_stride[512];
    size_t row_bytes_k[512];  /* bytes of one position: n_head_kv * head_dim in dtype */
    size_t row_bytes_v[512];
    void *mem;                /* owned allocation */
    size_t mem_bytes;
};

/* Bytes one block of a class costs (all its layers, K and V). 0 if the class is empty. */
size_t kvstore_block_bytes(const struct model *m, enum kvstore_dtype dt, int block_size,
                       enum kvstore_class cls);

int kvstore_create(const struct model *m, enum kvstore_dtype dt, int block_size, int n_blocks_full,
               int n_blocks_swa, struct kvstore_pool **out, char *err, size_t errlen);
void kvstore_destroy(struct kvstore_pool *p);
const char *kvstore_dtype_name(enum kvstore_dtype dt);
int kvstore_dtype_parse(const char *s, enum kvstore_dtype *out); /* "f16", "q8_0", "f32" */

/*
 * One sequence's block tables, owned by the caller and read by fwd_run.
 *  - FULL layers: position p lives in block full[p / block_size], so n_full must cover
 *    every position written so far and in this step.
 *  - SWA layers: position p lives in block swa[(p / block_size) % n_swa] (a ring). The ring
 *    must be long enough that every position a query of this step can see, plus the new
 *    ones, map to distinct ring slots: n_swa >= (window + n_new - 2) / block_size + 2.
 *    fwd_run checks this and fails the step with FWD_EKV otherwise.
 */
struct kvstore_seq {
    const int32_t *full;      /* [n_full] physical FULL block ids */
    int n_full;
    const int32_t *swa;       /* [n_swa] physical SWA block ids (ring); NULL if no SWA class */
    int n_swa;
};

/* Blocks of the SWA ring needed for steps of up to max_new tokens. */
int kvstore_swa_ring_blocks(const struct model *m, int block_size, int max_new);

#endif
