/*
 * panel — packing of Q8_0 / Q5_0 / Q4_0 / IQ4_NL rows into 16-row panels, and the scalar twin of
 * the panel kernels (see panel.h for the layout and the arithmetic).
 */
#include "engine/kernels/panel.h"

#include <math.h>
#include <string.h>
#include <sys/mman.h>

#include "engine/kernels/kern_impl.h"

int panel_supported(const struct kern_weight *w) {
    if (!w || !w->data || !panel_rec_bytes(w->type) || w->n_in <= 0 ||
        w->n_in % (panel_is_k(w->type) ? 256 : 32) != 0 || w->n_in / 32 > PANEL_NB_MAX ||
        w->n_out <= 0)
        return 0;
    return kern_panel_kernel(w->type) != NULL;
}

static int64_t n_panels(const struct kern_weight *w) {
    return (w->n_out + PANEL_ROWS - 1) / PANEL_ROWS;
}

size_t panel_bytes(const struct kern_weight *w) {
    return (size_t)n_panels(w) * (size_t)panel_recs(w->type, w->n_in) * panel_rec_bytes(w->type);
}

struct pack_job {
    const struct kern_weight *w;
    uint8_t *mem;
    int64_t per; /* panels per task */
};

/* Block b of row r of w, or NULL past the last row or block (the panel's zero padding). */
static const void *src_block(const struct kern_weight *w, int64_t r, int64_t b, int64_t nb) {
    if (r >= w->n_out || b >= nb) return NULL;
    return (const uint8_t *)w->data + (size_t)r * w->row_bytes +
           (size_t)b * quant_row_size(w->type, 32);
}

/* (scale, min) pair j of the 12 packed Q4_K scale bytes (quant_dequant_q4_K_ref's). */
static void k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
        *mn = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Panel p of a Q4_K or Q5_K weight (layout: panel.h); padding rows stay zero (fresh
 * memory). Both blocks start d, dmin, scales[12]; Q5_K then has qh[32] before qs. */
static void pack_q45_K(const struct kern_weight *w, uint8_t *pp, int64_t p) {
    const int64_t nsb = w->n_in / 256;
    const int five = w->type == QT_Q5_K;
    const size_t bs = five ? sizeof(struct block_q5_K) : sizeof(struct block_q4_K);
    const size_t rb = panel_rec_bytes(w->type);
    for (int64_t s = 0; s < nsb; s++) {
        uint8_t *rec = pp + (size_t)s * rb;
        for (int i = 0; i < PANEL_ROWS && p * PANEL_ROWS + i < w->n_out; i++) {
            const uint8_t *blk = (const uint8_t *)w->data +
                                 (size_t)(p * PANEL_ROWS + i) * w->row_bytes + (size_t)s * bs;
            const uint8_t *qs = blk + (five ? 48 : 16);
            memcpy(rec + 2 * i, blk, 2);
            memcpy(rec + 32 + 2 * i, blk + 2, 2);
            for (int j = 0; j < 8; j++)
                k4_scale_min(j, blk + 4, rec + 64 + j * 16 + i, rec + 192 + j * 16 + i);
            for (int c = 0; c < 4; c++)
                for (int g = 0; g < 8; g++)
                    memcpy(rec + 320 + c * 512 + g * 64 + i * 4, qs + 32 * c + 4 * g, 4);
            for (int g = 0; g < 8 && five; g++)
                memcpy(rec + 2368 + g * 64 + i * 4, blk + 16 + 4 * g, 4);
        }
    }
}

/* Panel p of a Q6_K weight (layout: panel.h); padding rows stay zero. */
static void pack_q6_K(const struct kern_weight *w, uint8_t *pp, int64_t p) {
    const int64_t nsb = w->n_in / 256;
    for (int64_t s = 0; s < nsb; s++) {
        uint8_t *rec = pp + (size_t)s * PANEL_REC_Q6_K;
        for (int i = 0; i < PANEL_ROWS && p * PANEL_ROWS + i < w->n_out; i++) {
            const struct block_q6_K *blk =
                (const struct block_q6_K *)((const uint8_t *)w->data +
                                            (size_t)(p * PANEL_ROWS + i) * w->row_bytes) +
                s;
            memcpy(rec + 2 * i, &blk->d, 2);
            for (int j = 0; j < 16; j++)
                rec[32 + j * 16 + i] = (uint8_t)blk->scales[j];
            /* the file's half h: ql[64h + l] holds elements 128h + l (low nibble) and
             * 128h + 64 + l (high), ql[64h + 32 + l] elements 128h + 32 + l and 128h + 96 + l,
             * qh[32h + l] their high bits at 2t: chunk 2h takes the low nibbles, 2h + 1 the
             * high ones, and qh is the high-bit plane's bytes as they are */
            for (int h = 0; h < 2; h++)
                for (int l = 0; l < 32; l++) {
                    const uint8_t a = blk->ql[64 * h + l], b = blk->ql[64 * h + 32 + l];
                    const size_t at = (size_t)(l / 4) * 64 + (size_t)i * 4 + (size_t)(l % 4);
                    rec[320 + (2 * h) * 512 + at] = (uint8_t)((a & 15) | (b & 15) << 4);
                    rec[320 + (2 * h + 1) * 512 + at] = (uint8_t)((a >> 4) | (b & 0xF0));
                    rec[2368 + h * 512 + at] = blk->qh[32 * h + l];
                }
        }
    }
}

/* Panel p of a Q3_K weight (layout: panel.h): the file's qs and hmask bytes regrouped, its
 * 6-bit scales (quant_dequant_q3_K_ref's unpacking) minus 32. */
static void pack_q3_K(const struct kern_weight *w, uint8_t *pp, int64_t p) {
    const int64_t nsb = w->n_in / 256;
    for (int64_t s = 0; s < nsb; s++) {
        uint8_t *rec = pp + (size_t)s * PANEL_REC_Q3_K;
        for (int i = 0; i < PANEL_ROWS && p * PANEL_ROWS + i < w->n_out; i++) {
            const struct block_q3_K *blk =
                (const struct block_q3_K *)((const uint8_t *)w->data +
                                            (size_t)(p * PANEL_ROWS + i) * w->row_bytes) +
                s;
            const uint8_t *sp = blk->scales;
            memcpy(rec + 2 * i, &blk->d, 2);
            for (int m = 0; m < 4; m++) {
                const int S[4] = {(sp[m] & 0xf) | (((sp[8 + m] >> 0) & 3) << 4),
                                  (sp[4 + m] & 0xf) | (((sp[8 + m] >> 2) & 3) << 4),
                                  (sp[m] >> 4) | (((sp[8 + m] >> 4) & 3) << 4),
                                  (sp[4 + m] >> 4) | (((sp[8 + m] >> 6) & 3) << 4)};
                for (int q = 0; q < 4; q++)
                    rec[32 + (4 * q + m) * 16 + i] = (uint8_t)(int8_t)(S[q] - 32);
            }
            for (int g = 0; g < 8; g++) {
                memcpy(rec + 320 + g * 64 + i * 4, blk->qs + 4 * g, 4);
                memcpy(rec + 320 + 512 + g * 64 + i * 4, blk->qs + 32 + 4 * g, 4);
                memcpy(rec + 1344 + g * 64 + i * 4, blk->hmask + 4 * g, 4);
            }
        }
    }
}

static void pack_task(void *arg, int task, int n_tasks) {
    (void)n_tasks;
    const struct pack_job *j = arg;
    const struct kern_weight *w = j->w;
    const size_t rb = panel_rec_bytes(w->type);
    const int64_t nb = w->n_in / 32, npair = (nb + 1) / 2, np = n_panels(w);
    const int64_t p0 = (int64_t)task * j->per, p1 = p0 + j->per < np ? p0 + j->per : np;
    for (int64_t p = p0; p < p1; p++) {
        uint8_t *pp = j->mem + (size_t)p * (size_t)panel_recs(w->type, w->n_in) * rb;
        if (panel_is_k(w->type)) {
            (w->type == QT_Q6_K   ? pack_q6_K
             : w->type == QT_Q3_K ? pack_q3_K
                                  : pack_q45_K)(w, pp, p);
            continue;
        }
        for (int64_t b = 0; b < 2 * npair; b++) {
            uint8_t *rec = pp + (size_t)(b / 2) * rb;
            const int h = (int)(b & 1);
            quant_half *sc = (quant_half *)rec + h * PANEL_ROWS;
            uint64_t hb[8] = {0};
            uint8_t *nib = rec + 192 + h * 256;
            for (int i = 0; i < PANEL_ROWS; i++) {
                const int64_t r = p * PANEL_ROWS + i;
                if (w->type == QT_Q8_0) { /* the bulk (the LM head): words, not bytes */
                    const struct block_q8_0 *blk = src_block(w, r, b, nb);
                    sc[i] = blk ? blk->d : 0;
                    uint8_t *q = rec + 64 + h * 512 + i * 4;
                    for (int g = 0; g < 8; g++) {
                        uint32_t v = 0;
                        if (blk) memcpy(&v, blk->qs + 4 * g, 4);
                        v ^= 0x80808080u;
                        memcpy(q + g * 64, &v, 4);
                    }
                    continue;
                }
                if (w->type == QT_Q4_1 || w->type == QT_Q5_1) { /* scale, min, (bits), nibbles */
                    const uint8_t *blk = src_block(w, r, b, nb);
                    const int five = w->type == QT_Q5_1;
                    quant_half *mn = (quant_half *)(rec + 64) + h * PANEL_ROWS;
                    uint32_t qh = 0;
                    sc[i] = mn[i] = 0; /* padding: u = 0, scale 0, min 0 */
                    if (blk) {
                        memcpy(&sc[i], blk, 2);
                        memcpy(&mn[i], blk + 2, 2);
                        if (five) memcpy(&qh, blk + 4, 4);
                    }
                    for (int g = 0; g < 4; g++) {
                        uint32_t v = 0;
                        if (blk) memcpy(&v, blk + (five ? 8 : 4) + 4 * g, 4);
                        memcpy(rec + (five ? 256 : 128) + h * 256 + g * 64 + i * 4, &v, 4);
                    }
                    for (int g = 0; g < 8 && five; g++)
                        hb[g] |= (uint64_t)((qh >> (4 * g)) & 15) << (4 * i);
                    continue;
                }
                if (w->type == QT_Q4_0 || w->type == QT_IQ4_NL) { /* the nibbles as they are */
                    /* (struct block_iq4_nl is struct block_q4_0's layout: scale, 16 bytes) */
                    const struct block_q4_0 *blk = src_block(w, r, b, nb);
                    sc[i] = blk ? blk->d : 0;
                    for (int g = 0; g < 4; g++) {
                        uint32_t v = 0x88888888u; /* Q4_0: q = 0; IQ4_NL: level 1, scale 0 */
                        if (blk) memcpy(&v, blk->qs + 4 * g, 4);
                        memcpy(rec + 64 + h * 256 + g * 64 + i * 4, &v, 4);
                    }
                    continue;
                }
                /* Q5_0: qs[j] holds element j (low nibble) and j + 16 (high), which is the
                 * nibble plane's byte order already; qh bit k is element k's high bit */
                const struct block_q5_0 *blk = src_block(w, r, b, nb);
                uint32_t qh = 0xFFFFFFFFu; /* q = 0 is u = 16: high bit set, nibble 0 */
                sc[i] = 0;
                if (blk) {
                    sc[i] = blk->d;
                    memcpy(&qh, blk->qh, 4);
                }
                for (int g = 0; g < 4; g++) {
                    uint32_t v = 0;
                    if (blk) memcpy(&v, blk->qs + 4 * g, 4);
                    memcpy(nib + g * 64 + i * 4, &v, 4);
                }
                for (int g = 0; g < 8; g++)
                    hb[g] |= (uint64_t)((qh >> (4 * g)) & 15) << (4 * i);
            }
            if (w->type == QT_Q5_0) memcpy(rec + 64 + h * 64, hb, 64);
            if (w->type == QT_Q5_1) memcpy(rec + 128 + h * 64, hb, 64);
        }
    }
}

int panel_pack(const struct kern_weight *w, struct pool *pool, void **out, size_t *bytes) {
    *out = NULL;
    *bytes = 0;
    if (!panel_rec_bytes(w->type) || w->n_in % (panel_is_k(w->type) ? 256 : 32) != 0) return -1;
    const size_t sz = panel_bytes(w);
    void *mem = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return -1;
    madvise(mem, sz, MADV_HUGEPAGE); /* fewer page faults while packing, fewer TLB misses */
    const int64_t np = n_panels(w);
    const int n_tasks = pool ? pool_size(pool) * 4 : 1;
    struct pack_job j = {w, mem, (np + n_tasks - 1) / n_tasks};
    if (pool)
        pool_run(pool, pack_task, &j, (int)((np + j.per - 1) / j.per));
    else
        pack_task(&j, 0, 1);
    /* read-only from here on: a stray write faults instead of corrupting weights */
    mprotect(mem, sz, PROT_READ);
    *out = mem;
    *bytes = sz;
    return 0;
}

void panel_free(void *p, size_t bytes) {
    if (p) munmap(p, bytes);
}

/* The record holding block b (32 elements) of row r. */
static const uint8_t *rec_of(uint32_t type, const void *panels, int64_t n, int64_t r, int64_t b) {
    return (const uint8_t *)panels + ((size_t)(r / PANEL_ROWS) * (size_t)panel_recs(type, n) +
                                      (size_t)(panel_is_k(type) ? b / 8 : b / 2)) *
                                         panel_rec_bytes(type);
}

uint16_t panel_d(uint32_t type, const void *panels, int64_t n, int64_t r, int64_t b) {
    quant_half d;
    if (panel_is_k(type)) {
        memcpy(&d, rec_of(type, panels, n, r, b) + (r % PANEL_ROWS) * 2, 2);
        return d;
    }
    memcpy(&d, rec_of(type, panels, n, r, b) + ((b & 1) * PANEL_ROWS + r % PANEL_ROWS) * 2, 2);
    return d;
}

void panel_sub(uint32_t type, const void *panels, int64_t n, int64_t r, int64_t b, int *sc,
               int *mn) {
    *sc = *mn = 0;
    if (panel_k16(type)) { /* b: a sub-block of 16 */
        *sc = (int8_t)rec_of(type, panels, n, r, b / 2)[32 + (b % 16) * 16 + r % PANEL_ROWS];
        return;
    }
    if (!panel_is_k(type)) return;
    const uint8_t *rec = rec_of(type, panels, n, r, b);
    *sc = rec[64 + (b % 8) * 16 + r % PANEL_ROWS];
    *mn = rec[192 + (b % 8) * 16 + r % PANEL_ROWS];
}

uint16_t panel_m(uint32_t type, const void *panels, int64_t n, int64_t r, int64_t b) {
    quant_half m = 0;
    if (panel_k16(type)) return 0;
    if (type == QT_Q4_K || type == QT_Q5_K) {
        memcpy(&m, rec_of(type, panels, n, r, b) + 32 + (r % PANEL_ROWS) * 2, 2);
        return m;
    }
    if (type == QT_Q4_1 || type == QT_Q5_1)
        memcpy(&m, rec_of(type, panels, n, r, b) + 64 + ((b & 1) * PANEL_ROWS + r % PANEL_ROWS) * 2,
               2);
    return m;
}

int panel_q(uint32_t type, const void *panels, int64_t n, int64_t r, int64_t b, int k) {
    const uint8_t *rec = rec_of(type, panels, n, r, b);
    const int h = (int)(b & 1), i = (int)(r % PANEL_ROWS);
    if (type == QT_Q4_K || type == QT_Q5_K) { /* sub-block b % 8 = 2c (low nibbles), 2c + 1 */
        const int j = (int)(b % 8), at = (k / 4) * 64 + i * 4 + k % 4;
        const uint8_t x = rec[320 + (j / 2) * 512 + at];
        const int fifth = type == QT_Q5_K ? (rec[2368 + at] >> j & 1) << 4 : 0;
        return (j & 1 ? x >> 4 : x & 15) | fifth;
    }
    if (type == QT_Q3_K) { /* element e of the super-block: two low bits, a third */
        const int e = (int)(b % 8) * 32 + k, at = ((e % 32) / 4) * 64 + i * 4 + e % 4;
        const int lo = (rec[320 + (e / 128) * 512 + at] >> (2 * ((e % 128) / 32))) & 3;
        return (lo | ((rec[1344 + at] >> (e / 32)) & 1) << 2) - 4;
    }
    if (type == QT_Q6_K) { /* element e of the super-block */
        const int e = (int)(b % 8) * 32 + k, c = e / 64, hi = (e % 64) / 32, g = (e % 32) / 4;
        const int nib = (rec[320 + c * 512 + g * 64 + i * 4 + e % 4] >> (4 * hi)) & 15;
        const int hb =
            (rec[2368 + (e / 128) * 512 + g * 64 + i * 4 + e % 4] >> (2 * ((e % 128) / 32))) & 3;
        return (nib | hb << 4) - 32;
    }
    if (type == QT_Q8_0) return (int)rec[64 + h * 512 + (k / 4) * 64 + i * 4 + k % 4] - 128;
    if (type == QT_Q4_0 || type == QT_IQ4_NL) {
        const uint8_t x = rec[64 + h * 256 + ((k % 16) / 4) * 64 + i * 4 + k % 4];
        const int nib = k < 16 ? x & 15 : x >> 4;
        return type == QT_Q4_0 ? nib - 8 : quant_iq4_nl_level(nib);
    }
    if (type == QT_Q4_1) {
        const uint8_t x = rec[128 + h * 256 + ((k % 16) / 4) * 64 + i * 4 + k % 4];
        return k < 16 ? x & 15 : x >> 4;
    }
    const int five1 = type == QT_Q5_1; /* else Q5_0 */
    uint64_t hb;
    memcpy(&hb, rec + (five1 ? 128 : 64) + h * 64 + (k / 4) * 8, 8);
    const int g = (k % 16) / 4;
    const uint8_t x = rec[(five1 ? 256 : 192) + h * 256 + g * 64 + i * 4 + k % 4];
    const int nib = k < 16 ? x & 15 : x >> 4;
    return (nib | (int)((hb >> (i * 4 + k % 4)) & 1) << 4) - (five1 ? 0 : 16);
}

/* Row r of a Q4_K / Q5_K panel, quant_dequant_q4_K_ref's (q5_K's) expressions. */
static void get_row_q45_K(const struct kern_weight *w, int64_t r, float *dst) {
    for (int64_t b = 0; b < w->n_in / 32; b++) {
        const float d = quant_f16_to_f32(panel_d(w->type, w->panel, w->n_in, r, b));
        const float dmin = quant_f16_to_f32(panel_m(w->type, w->panel, w->n_in, r, b));
        int sc, mn;
        panel_sub(w->type, w->panel, w->n_in, r, b, &sc, &mn);
        const float d1 = d * (float)sc, m1 = dmin * (float)mn;
        for (int k = 0; k < 32; k++)
            dst[b * 32 + k] = d1 * (float)panel_q(w->type, w->panel, w->n_in, r, b, k) - m1;
    }
}

/* Row r of a Q6_K / Q3_K panel, quant_dequant_q6_K_ref's (q3_K's) expressions. */
static void get_row_q6_K(const struct kern_weight *w, int64_t r, float *dst) {
    for (int64_t b = 0; b < w->n_in / 32; b++) {
        const float d = quant_f16_to_f32(panel_d(w->type, w->panel, w->n_in, r, b));
        for (int k = 0; k < 32; k++) {
            int sc, mn;
            panel_sub(w->type, w->panel, w->n_in, r, b * 2 + k / 16, &sc, &mn);
            dst[b * 32 + k] = d * (float)sc * (float)panel_q(w->type, w->panel, w->n_in, r, b, k);
        }
    }
}

void panel_get_row(const struct kern_weight *w, int64_t r, float *dst) {
    if (panel_k16(w->type)) {
        get_row_q6_K(w, r, dst);
        return;
    }
    if (panel_is_k(w->type)) {
        get_row_q45_K(w, r, dst);
        return;
    }
    const int i = (int)(r % PANEL_ROWS);
    for (int64_t b = 0; b < w->n_in / 32; b++) {
        const uint8_t *rec = rec_of(w->type, w->panel, w->n_in, r, b);
        const int h = (int)(b & 1);
        quant_half dh;
        memcpy(&dh, rec + (h * PANEL_ROWS + i) * 2, 2);
        const float d = quant_f16_to_f32(dh);
        float *o = dst + b * 32;
        if (w->type == QT_Q8_0) {
            const uint8_t *q = rec + 64 + h * 512 + i * 4;
            for (int k = 0; k < 32; k++)
                o[k] = d * (float)((int)q[(k / 4) * 64 + k % 4] - 128);
            continue;
        }
        if (w->type == QT_Q4_1 || w->type == QT_Q5_1) { /* u * d + m, the file's dequant */
            const float m = quant_f16_to_f32(panel_m(w->type, w->panel, w->n_in, r, b));
            for (int k = 0; k < 32; k++)
                o[k] = (float)panel_q(w->type, w->panel, w->n_in, r, b, k) * d + m;
            continue;
        }
        for (int k = 0; k < 32; k++) /* the others: the layout's reader, once per element */
            o[k] = d * (float)panel_q(w->type, w->panel, w->n_in, r, b, k);
    }
}

/* One super-block s of row r against activation block a, from acc (panel.h's K-quant steps):
 * Q4_K / Q5_K integers S and M, then two fused steps; Q6_K one integer S over sub-blocks of
 * 16, one fused step. */
static float kref_step(uint32_t type, int64_t n, const void *panels, int64_t r, int64_t s,
                       const struct block_q8_K *a, float acc) {
    const int six = panel_k16(type), nsub = six ? 16 : 8, len = six ? 16 : 32;
    int32_t S = 0, M = 0;
    for (int j = 0; j < nsub; j++) {
        int sc, mn;
        panel_sub(type, panels, n, r, s * nsub + j, &sc, &mn);
        int32_t sj = 0;
        for (int k = 0; k < len; k++) { /* element e of the super-block: block s * 8 + e / 32 */
            const int e = j * len + k;
            sj += panel_q(type, panels, n, r, s * 8 + e / 32, e % 32) * (int32_t)a->qs[e];
        }
        S += sc * sj;
        if (!six) M += mn * ((int32_t)a->bsums[2 * j] + a->bsums[2 * j + 1]);
    }
    const float d = quant_f16_to_f32(panel_d(type, panels, n, r, s * 8));
    acc = fmaf((float)S, d * a->d, acc);
    if (six) return acc;
    const float dmin = quant_f16_to_f32(panel_m(type, panels, n, r, s * 8));
    return fmaf(-(float)M, dmin * a->d, acc);
}

void panel_gemm_ref(uint32_t type, int64_t n, const void *panels, int64_t r0, int64_t r1,
                    const void *act, size_t as, int na, float *y, int ldy) {
    if (panel_is_k(type)) {
        for (int64_t r = r0; r < r1; r++)
            for (int c = 0; c < na; c++) {
                const struct block_q8_K *a =
                    (const struct block_q8_K *)((const uint8_t *)act + (size_t)c * as);
                float acc = 0.0f;
                for (int64_t s = 0; s < n / 256; s++)
                    acc = kref_step(type, n, panels, r, s, a + s, acc);
                y[(size_t)c * (size_t)ldy + (size_t)r] = acc;
            }
        return;
    }
    const int64_t nb = n / 32;
    const int mins = type == QT_Q4_1 || type == QT_Q5_1; /* Q8_1 activations: d, s, qs */
    const size_t bs = mins ? sizeof(struct block_q8_1) : sizeof(struct block_q8_0);
    for (int64_t r = r0; r < r1; r++)
        for (int c = 0; c < na; c++) {
            const uint8_t *ar = (const uint8_t *)act + (size_t)c * as;
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *blk = ar + (size_t)b * bs;
                const int8_t *qs = (const int8_t *)(blk + (mins ? 4 : 2));
                quant_half da, sa;
                memcpy(&da, blk, 2);
                memcpy(&sa, blk + 2, 2);
                int32_t s = 0;
                for (int k = 0; k < 32; k++)
                    s += panel_q(type, panels, n, r, b, k) * (int32_t)qs[k];
                const float d =
                    quant_f16_to_f32(panel_d(type, panels, n, r, b)) * quant_f16_to_f32(da);
                acc = fmaf((float)s, d, acc);
                if (mins)
                    acc = fmaf(quant_f16_to_f32(panel_m(type, panels, n, r, b)),
                               quant_f16_to_f32(sa), acc);
            }
            y[(size_t)c * (size_t)ldy + (size_t)r] = acc;
        }
}
