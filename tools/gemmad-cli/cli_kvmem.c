/*
 * gemmad-cli kvmem: KV memory one session of --ctx tokens needs: every layer keeping every
 * position, and the layout the scheduler uses (global layers keep every position;
 * sliding-window layers a ring of blocks covering the window plus one step of up to --batch
 * new tokens). Nothing runs; only the model's shapes are read.
 */
#include <stdio.h>

#include "config/defaults.h"
#include "tools/gemmad-cli/cli.h"

int cli_kvmem(const struct cli_opts *o) {
    double load_s;
    struct model *m = cli_load(o, &load_s);
    const int bs = o->block_size;
    const size_t blocks = ((size_t)o->ctx + (size_t)bs - 1) / (size_t)bs;
    const size_t full = kvstore_block_bytes(m, o->kv_type, bs, KVSTORE_FULL);
    const size_t swa = kvstore_block_bytes(m, o->kv_type, bs, KVSTORE_SWA);
    const int batch = o->batch ? o->batch : gemmad_defaults.max_batch_tokens;
    size_t ring = (size_t)kvstore_swa_ring_blocks(m, bs, batch);
    if (ring > blocks) ring = blocks;
    int n_swa = 0, n_full = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        if (m->cfg.layer[l].kv_layer != l) continue; /* shares another layer's cache */
        if (m->cfg.layer[l].sliding && m->cfg.sliding_window > 0) n_swa++;
        else n_full++;
    }
    const double mib = 1024.0 * 1024.0;
    const double without = (double)((full + swa) * blocks) / mib;
    const double with = (double)(full * blocks + swa * ring) / mib;
    printf("{\"ctx\": %d, \"kv_type\": \"%s\", \"block_size\": %d, \"global_layers\": %d, "
           "\"sliding_layers\": %d, \"sliding_window\": %d, \"ring_blocks\": %zu, "
           "\"without_ring_mib\": %.1f, \"with_ring_mib\": %.1f, \"saving\": %.2f}\n",
           o->ctx, kvstore_dtype_name(o->kv_type), bs, n_full, n_swa, m->cfg.sliding_window, ring,
           without, with, without > 0 ? 1.0 - with / without : 0.0);
    model_free(m);
    return 0;
}
