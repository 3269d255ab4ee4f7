/*
 * sched — the scheduler's public API: options from the defaults table, create/destroy,
 * submit, cancel, drain and the numbers for /metrics. The thread itself is in sched_loop.c.
 */
#include "scheduler/sched_int.h"

#include "scheduler/grammar.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "config/defaults.h"

const char *sched_strerror(int status) {
    switch (status) {
    case SCHED_OK: return "ok";
    case SCHED_EINVAL: return "invalid request";
    case SCHED_EFULL: return "too many requests are waiting";
    case SCHED_ECTX: return "prompt plus max_tokens exceeds the context size";
    case SCHED_EDRAIN: return "the server is shutting down";
    case SCHED_ENOMEM: return "out of memory";
    case SCHED_EBACKEND: return "the compute backend failed";
    default: return "unknown error";
    }
}

enum fwd_device sched_device_parse(const char *name) {
    return !strcmp(name, "cpu")    ? FWD_DEVICE_CPU
           : !strcmp(name, "cuda") ? FWD_DEVICE_CUDA
                                   : FWD_DEVICE_AUTO;
}

/* From the one defaults table (config/defaults.h), so the server, the tools and the tests
 * start from the same scheduler settings. */
void sched_opts_default(struct sched_opts *o) {
    const struct gemmad_defaults *d = &gemmad_defaults;
    memset(o, 0, sizeof(*o));
    o->n_threads = d->threads;
    o->n_ctx = d->ctx_size;
    o->max_batch_tokens = d->max_batch_tokens;
    o->prefill_stall = d->prefill_stall;
    o->max_seqs = d->max_seqs;
    o->kv_block_size = d->kv_block_size;
    o->kv_memory_mib = (size_t)d->kv_memory_mib;
    o->kv_tokens = d->kv_tokens;
    if (kvstore_dtype_parse(d->kv_dtype, &o->kv_dtype)) o->kv_dtype = KVSTORE_F16;
    o->max_queue = d->max_queue;
    o->max_queued_tokens = d->max_queued_tokens;
    o->prefix_cache = d->prefix_cache;
    o->session_ttl_s = d->session_ttl_s;
    o->deterministic = d->deterministic;
    o->speculative = d->speculative;
    o->device = sched_device_parse(d->device);
    o->group_max_seqs = d->group_max_seqs;
}

/* ---- public API ---------------------------------------------------------------------- */

int sched_create(const struct model *m, const struct sched_opts *o, struct sched **out,
                 char *err, size_t errlen) {
    *out = NULL;
    if (err && errlen) err[0] = 0;
    int bs = o->kv_block_size, rc = SCHED_EINVAL;
    if (!m || o->n_ctx < 2 || o->max_seqs < 1 || o->max_batch_tokens < o->max_seqs || bs < 1 ||
        o->max_queue < 0 || o->max_queued_tokens < 0) {
        if (err)
            snprintf(err, errlen,
                     "scheduler options invalid: n_ctx %d, max_seqs %d, max_batch_tokens %d "
                     "(must be >= max_seqs), kv_block_size %d",
                     o->n_ctx, o->max_seqs, o->max_batch_tokens, bs);
        return SCHED_EINVAL;
    }
    struct sched *s = calloc(1, sizeof(*s));
    if (!s) return SCHED_ENOMEM;
    s->m = m;
    s->o = *o;
    s->vocab = m->vocab;
    s->n_vocab = m->cfg.n_vocab;
    s->next_id = 1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);

    /* Pool sizes. Every running sequence owns a full SWA ring; a few windows more let the
     * prefix cache keep sliding-layer blocks. */
    s->ring = kvstore_swa_ring_blocks(m, bs, o->max_batch_tokens);
    int n_swa = 0;
    if (s->ring > 0)
        n_swa = o->max_seqs * s->ring + 4 * (ceil_div(m->cfg.sliding_window, bs) + 1);
    int seq_blocks = ceil_div(o->n_ctx, bs) + 1;
    long long n_full;
    if (o->kv_memory_mib > 0) {
        size_t bf = kvstore_block_bytes(m, o->kv_dtype, bs, KVSTORE_FULL);
        size_t bw = kvstore_block_bytes(m, o->kv_dtype, bs, KVSTORE_SWA);
        long long bytes = (long long)o->kv_memory_mib << 20;
        long long left = bytes - (long long)n_swa * (long long)bw;
        n_full = bf ? left / (long long)bf : 0;
        if (n_full < seq_blocks) {
            double need = ((double)seq_blocks * bf + (double)n_swa * bw) / 1048576.0;
            if (err)
                snprintf(err, errlen,
                         "kv_memory_mib %zu too small: one %d-token sequence plus the "
                         "sliding-window rings of %d sequences need %.0f MiB",
                         o->kv_memory_mib, o->n_ctx, o->max_seqs, need + 1);
            goto fail;
        }
    } else {
        n_full = ceil_div(o->kv_tokens > 0 ? o->kv_tokens : gemmad_defaults.kv_tokens, bs);
        if (n_full < seq_blocks) {
            if (err)
                snprintf(err, errlen, "kv_tokens %d is smaller than one context (%d tokens)",
                         o->kv_tokens, (seq_blocks)*bs);
            goto fail;
        }
    }
    if (n_full > (1 << 30)) n_full = 1 << 30;
    rc = kvstore_create(m, o->kv_dtype, bs, (int)n_full, n_swa, &s->pool, err, errlen);
    if (rc) {
        rc = SCHED_ENOMEM;
        goto fail;
    }
    struct kvcache_opts ko = {.n_full = (int)n_full, .n_swa = n_swa, .block_size = bs,
                         .window = m->cfg.sliding_window, .ring = s->ring,
                         .max_seq_blocks = seq_blocks, .prefix_cache = o->prefix_cache,
                         .max_sessions = o->session_ttl_s > 0 ? SCHED_MAX_SESSIONS : 0,
                         .session_ttl_s = o->session_ttl_s};
    rc = SCHED_ENOMEM;
    if (kvcache_create(&ko, &s->kv)) {
        if (err) snprintf(err, errlen, "cannot allocate the KV block tables");
        goto fail;
    }
    struct fwd_opts fo = {.max_tokens = o->max_batch_tokens, .max_seqs = o->max_seqs,
                          .max_ctx = o->n_ctx,
                          .max_logit_rows = o->max_seqs + SCHED_PLP_ROWS,
                          .n_threads = o->n_threads,
                          .device = o->device, .deterministic = o->deterministic};
    int frc = fwd_create(m, s->pool, &fo, &s->fwd, err, errlen);
    if (frc) {
        rc = frc == FWD_ENOMEM ? SCHED_ENOMEM : SCHED_EBACKEND;
        goto fail;
    }
    /* Drafts are verified against rows computed in a bigger batch than a plain decode's:
     * exact only where a row's bits do not depend on its batch. */
    s->spec_on = fwd_batch_invariant(s->fwd) ? o->speculative : SPEC_MODE_OFF;
    s->n_smp = fwd_threads(s->fwd);
    s->smp = calloc((size_t)s->n_smp, sizeof(*s->smp));
    if (!s->smp) goto fail_mem;
    for (int i = 0; i < s->n_smp; i++)
        if (smp_ctx_create(s->n_vocab, &s->smp[i])) goto fail_mem;
    s->logits =
        malloc((size_t)(o->max_seqs + SCHED_PLP_ROWS) * (size_t)s->n_vocab * sizeof(float));
    s->greedy = malloc((size_t)(o->max_seqs + SCHED_PLP_ROWS));
    s->gid = malloc((size_t)(o->max_seqs + SCHED_PLP_ROWS) * sizeof(int32_t));
    const size_t ntk = (size_t)(o->max_seqs + SCHED_PLP_ROWS) * FWD_TOPK_MAX;
    s->tk_scale = malloc((size_t)(o->max_seqs + SCHED_PLP_ROWS) * sizeof(float));
    s->tk_id = malloc(ntk * sizeof(int32_t));
    s->tk_val = malloc(ntk * sizeof(float));
    const char *tke = getenv("GEMMAD_TOPK_ROWS");
    s->topk_rows = !(tke && strcmp(tke, "0") == 0);
    s->n_embd = m->cfg.n_embd;
    s->hidden = malloc((size_t)o->max_batch_tokens * (size_t)s->n_embd * sizeof(float));
    const size_t nplp = (size_t)(o->max_seqs + SCHED_PLP_ROWS);
    s->plp_row = malloc(nplp * sizeof(int));
    s->plp_k = malloc(nplp * sizeof(int));
    s->plp_tok = malloc(nplp * sizeof(int32_t));
    s->plp_lp = malloc(nplp * sizeof(float));
    s->plp_top = malloc(nplp * SCHED_MAX_TOP * sizeof(struct sched_top));
    if (!s->hidden || !s->plp_row || !s->plp_k || !s->plp_tok || !s->plp_lp || !s->plp_top)
        goto fail_mem;
    s->scratch = malloc((size_t)s->n_smp * (size_t)s->n_vocab * sizeof(float));
    s->sampling = calloc((size_t)o->max_seqs, sizeof(*s->sampling));
    s->rows = calloc((size_t)o->max_seqs, sizeof(*s->rows));
    s->views = calloc((size_t)o->max_seqs, sizeof(*s->views));
    s->run = calloc((size_t)o->max_seqs, sizeof(*s->run));
    s->batch = calloc((size_t)o->max_seqs, sizeof(*s->batch));
    s->eog = malloc(64 * sizeof(int32_t));
    if (!s->logits || !s->greedy || !s->gid || !s->tk_scale || !s->tk_id || !s->tk_val || !s->scratch || !s->sampling || !s->rows || !s->views || !s->run ||
        !s->batch || !s->eog)
        goto fail_mem;
    for (int32_t t = 0; t < s->n_vocab && s->n_eog < 64; t++)
        if (tok_is_eog(s->vocab, t)) s->eog[s->n_eog++] = t;

    static const double le_batch[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    static const double le_tokens[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
    static const double le_step[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                     0.1,   0.25,   0.5,   1,    2.5,   5};
    prom_hist_init(&s->h_batch, le_batch, 9);
    prom_hist_init(&s->h_tokens, le_tokens, 13);
    prom_hist_init(&s->h_step, le_step, 12);
    sched_publish_counts(s);
    s->progress_at = clock_mono_s();
    if (pthread_create(&s->thread, NULL, sched_main, s)) {
        if (err) snprintf(err, errlen, "cannot start the scheduler thread");
        rc = SCHED_ENOMEM;
        goto fail;
    }
    s->thread_started = 1;
    LOG_I(SCHED_MOD, 0,
          "KV pool: %lld FULL blocks + %d SWA blocks of %d positions (%s, %.1f MiB), ring %d",
          n_full, n_swa, bs, kvstore_dtype_name(o->kv_dtype), (double)s->pool->mem_bytes / 1048576.0,
          s->ring);
    if (o->speculative != SPEC_MODE_OFF && s->spec_on == SPEC_MODE_OFF)
        LOG_I(SCHED_MOD, 0,
              "speculative decoding off: rows depend on their batch here (cuBLAS, or OpenBLAS "
              "for F32/F16/BF16 weights); --deterministic keeps them exact");
    *out = s;
    return SCHED_OK;
fail_mem:
    rc = SCHED_ENOMEM;
    if (err) snprintf(err, errlen, "out of memory creating the scheduler");
fail:
    sched_destroy(s);
    return rc;
}

void sched_destroy(struct sched *s) {
    if (!s) return;
    if (s->thread_started) {
        pthread_mutex_lock(&s->lock);
        s->stopping = 1;
        pthread_cond_signal(&s->cond);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->thread, NULL);
    }
    fwd_destroy(s->fwd);
    kvcache_destroy(s->kv);
    kvstore_destroy(s->pool);
    if (s->smp)
        for (int i = 0; i < s->n_smp; i++) smp_ctx_destroy(s->smp[i]);
    free(s->smp);
    free(s->logits);
    free(s->greedy);
    free(s->gid);
    free(s->tk_scale);
    free(s->tk_id);
    free(s->tk_val);
    free(s->hidden);
    free(s->plp_row);
    free(s->plp_k);
    free(s->plp_tok);
    free(s->plp_lp);
    free(s->plp_top);
    free(s->scratch);
    free(s->sampling);
    free(s->rows);
    free(s->views);
    free(s->run);
    free(s->batch);
    free(s->eog);
    sched_gram_destroy(s);
    free(s->cancel_ids);
    free(s->pause_ops);
    free(s->cancel_work);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s);
}

static char *dup_str(const char *p) {
    size_t n = strlen(p) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, p, n);
    return d;
}

int sched_submit(struct sched *s, const struct sched_req *r, uint64_t *id_out) {
    if (id_out) *id_out = 0;
    const int min_tokens = r && (r->prompt_logprobs || r->embed) ? 0 : 1;
    if (!r || !r->prompt || r->n_prompt < 1 || r->max_tokens < min_tokens || !r->on_event ||
        (r->prompt_logprobs && r->top_logprobs < 0) || (r->embed && r->max_tokens != 0) ||
        r->n_stop < 0 || (r->n_stop > 0 && !r->stop) || r->top_logprobs > SCHED_MAX_TOP ||
        r->sp.n_logit_bias < 0 || (r->sp.n_logit_bias > 0 && !r->sp.logit_bias))
        return SCHED_EINVAL;
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= s->n_vocab) return SCHED_EINVAL;
    long long total = (long long)r->n_prompt + r->max_tokens;
    if (total > s->o.n_ctx) return SCHED_ECTX;
    if (r->embed && fwd_device(s->fwd) != FWD_DEVICE_CPU) return SCHED_EBACKEND;

    struct seq *q = calloc(1, sizeof(*q));
    if (!q) return SCHED_ENOMEM;
    q->cap = (int)total;
    q->hist = malloc((size_t)q->cap * sizeof(int32_t));
    q->done_cap = 2 * TOK_STREAM_MAX;
    for (int i = 0; i < r->n_stop; i++) q->done_cap += strlen(r->stop[i]);
    q->done_text = malloc(q->done_cap);
    if (!q->hist || !q->done_text || kvcache_seq_init(s->kv, &q->kv) ||
        stop_init(&q->stop, r->stop, r->n_stop, TOK_STREAM_MAX))
        goto fail;
    memcpy(q->hist, r->prompt, (size_t)r->n_prompt * sizeof(int32_t));
    q->n_hist = q->n_prompt = r->n_prompt;
    q->max_tokens = r->max_tokens;
    q->sp = r->sp;
    if (r->sp.n_logit_bias > 0) {
        q->bias = malloc((size_t)r->sp.n_logit_bias * sizeof(*q->bias));
        if (!q->bias) goto fail;
        memcpy(q->bias, r->sp.logit_bias, (size_t)r->sp.n_logit_bias * sizeof(*q->bias));
    }
    q->sp.logit_bias = q->bias;
    if (!r->embed && r->session_id && r->session_id[0] &&
        !(q->session_id = dup_str(r->session_id)))
        goto fail;
    q->prompt_lp = r->prompt_logprobs;
    q->embed = r->embed;
    q->pooling = r->pooling;
    q->n_embd = s->n_embd;
    if (q->embed && (!(q->emb_acc = calloc((size_t)s->n_embd, sizeof(double))) ||
                     !(q->emb_out = malloc((size_t)s->n_embd * sizeof(float)))))
        goto fail;
    q->top_logprobs = r->top_logprobs;
    q->ignore_eos = r->ignore_eos;
    q->control_bytes = r->control_bytes;
    q->deadline = r->deadline;
    q->group = r->group;
    if (r->grammar && !r->embed) {
        q->gram = gram_ref(r->grammar);
        if (r->grammar_trigger && r->grammar_trigger[0] && !(q->trig = dup_str(r->grammar_trigger)))
            goto fail;
    }
    /* A constrained request drafts only when greedy and its grammar is active from the start:
     * its drafts are verified under the grammar (sched_gram_spec_verify); a lazy grammar may
     * start in the middle of a step's drafts, and sampled rows would need masked rejection. */
    spec_init(&q->spec, !r->no_speculative && !r->embed && !r->prompt_logprobs &&
                            (!q->gram || (!q->trig && sched_greedy_sampling(q))));
    q->on_event = r->on_event;
    q->user = r->user;
    tok_stream_init(&q->ts);
    q->t_submit = clock_mono_s();

    pthread_mutex_lock(&s->lock);
    int rc = SCHED_OK;
    if (s->draining || s->stopping) rc = SCHED_EDRAIN;
    else if (s->n_waiting - s->n_wait_paused >= s->o.max_queue ||
             s->waiting_tokens - s->wait_paused_tokens + r->n_prompt >
                 s->o.max_queued_tokens) {
        rc = SCHED_EFULL;
        s->rejections++;
    }
    if (rc == SCHED_OK) {
        q->id = s->next_id++;
        q->order = s->next_order++;
        if (!q->group) q->group = q->id | (1ull << 63); /* apart from callers' groups */
        uint64_t seed = r->sp.has_seed ? r->sp.seed
                                       : (uint64_t)(q->t_submit * 1e9) ^ (q->id * 0x9e3779b97f4a7c15ull);
        smp_rng_seed(&q->rng, seed);
        sched_wait_push_back(s, q);
        if (id_out) *id_out = q->id;
        pthread_cond_signal(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    if (rc != SCHED_OK) sched_seq_free(q);
    return rc;
fail:
    sched_seq_free(q);
    return SCHED_ENOMEM;
}

void sched_cancel(struct sched *s, uint64_t id) {
    pthread_mutex_lock(&s->lock);
    if (s->n_cancel == s->cap_cancel) {
        int cap = s->cap_cancel ? 2 * s->cap_cancel : 64;
        uint64_t *p = realloc(s->cancel_ids, (size_t)cap * sizeof(uint64_t));
        if (!p) {
            pthread_mutex_unlock(&s->lock);
            return;
        }
        s->cancel_ids = p;
        s->cap_cancel = cap;
    }
    s->cancel_ids[s->n_cancel++] = id;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

void sched_pause(struct sched *s, uint64_t id, int paused) {
    pthread_mutex_lock(&s->lock);
    if (s->n_pause == s->cap_pause) {
        int cap = s->cap_pause ? 2 * s->cap_pause : 64;
        struct sched_pause_op *p = realloc(s->pause_ops, (size_t)cap * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&s->lock);
            return;
        }
        s->pause_ops = p;
        s->cap_pause = cap;
    }
    s->pause_ops[s->n_pause++] = (struct sched_pause_op){id, paused};
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

void sched_drain(struct sched *s) {
    pthread_mutex_lock(&s->lock);
    s->draining = 1;
    pthread_mutex_unlock(&s->lock);
}

void sched_get_counts(struct sched *s, struct sched_counts *out) {
    pthread_mutex_lock(&s->lock);
    *out = s->counts;
    pthread_mutex_unlock(&s->lock);
}

/* ---- statistics ---------------------------------------------------------------------- */

void sched_stats(struct sched *s, struct sched_stats *out) {
    pthread_mutex_lock(&s->lock);
    const struct kvcache_stats *k = &s->kst;
    out->running = s->counts.running;
    out->waiting = s->counts.waiting;
    for (int c = 0; c < 2; c++) {
        out->kv_total[c] = k->total[c];
        out->kv_used[c] = k->used[c];
        out->kv_free[c] = k->free[c];
    }
    out->prefix_queries = (uint64_t)k->queries;
    out->prefix_hits = (uint64_t)k->hits;
    out->prefix_hit_tokens = (uint64_t)k->hit_tokens;
    out->prefix_query_tokens = (uint64_t)k->query_tokens;
    out->kv_evictions = (uint64_t)k->evictions;
    out->kv_sessions = k->sessions;
    out->preemptions = (uint64_t)s->preemptions;
    out->rejections = (uint64_t)s->rejections;
    out->steps = (uint64_t)s->steps;
    out->batch_seqs = s->h_batch;
    out->batch_tokens = s->h_tokens;
    out->step_s = s->h_step;
    out->spec_draft_tokens = s->spec_total[0];
    out->spec_accepted_tokens = s->spec_total[1];
    out->spec_verify_steps = s->spec_total[2];
    out->spec_grammar_tokens = s->spec_total[3];
    out->topk_rows = (uint64_t)s->topk_rows_done;
    out->pending = s->n_waiting + s->counts.running;
    out->loop_turns = s->loop_turns;
    out->progress_age_s = s->idle_wait ? 0 : clock_mono_s() - s->progress_at;
    if (out->progress_age_s < 0) out->progress_age_s = 0;
    pthread_mutex_unlock(&s->lock);
}
