/*
 * prom — the Prometheus text exposition format (version 0.0.4), written into a strbuf:
 * HELP/TYPE lines, samples with labels, and fixed-bucket histograms.
 *
 * A histogram (struct prom_hist) is plain numbers: its owner observes values under whatever
 * lock guards it and may copy the struct out to render it elsewhere. Label values are
 * escaped as the format asks (backslash, double quote, newline).
 * No allocation, no global state: any thread, one strbuf per writer.
 */
#ifndef GEMMAD_BASE_PROM_H
#define GEMMAD_BASE_PROM_H

#include <stdint.h>

#include "base/strbuf.h"

#define PROM_HIST_MAX 24 /* finite buckets per histogram */

struct prom_hist {
    int n;                              /* finite buckets */
    double le[PROM_HIST_MAX];           /* upper bounds, increasing */
    uint64_t count[PROM_HIST_MAX + 1];  /* per bucket (not cumulative); [n] is +Inf */
    double sum;                         /* of observed values */
    uint64_t total;                     /* observations */
};

/* One label of a sample; arrays of them end with {NULL, NULL}. */
struct prom_label {
    const char *name, *value;
};

/* "# HELP name help" and "# TYPE name type" (type: "counter", "gauge", "histogram"). */
void prom_family(struct strbuf *b, const char *name, const char *type, const char *help);
/* One sample line "name{labels} value"; labels may be NULL. */
void prom_u64(struct strbuf *b, const char *name, const struct prom_label *labels, uint64_t v);
void prom_i64(struct strbuf *b, const char *name, const struct prom_label *labels, int64_t v);
void prom_f64(struct strbuf *b, const char *name, const struct prom_label *labels, double v);

/* n <= PROM_HIST_MAX bounds (le[] copied); everything else zero. */
void prom_hist_init(struct prom_hist *h, const double *le, int n);
/* Counts v in the first bucket whose bound is >= v (+Inf past the last). */
void prom_hist_observe(struct prom_hist *h, double v);
/* The whole family: HELP/TYPE, cumulative _bucket lines, _sum and _count. */
void prom_hist_write(struct strbuf *b, const char *name, const char *help,
                     const struct prom_hist *h);
/* The same with labels on every sample (le comes last); labels may be NULL. */
void prom_hist_write_l(struct strbuf *b, const char *name, const char *help,
                       const struct prom_label *labels, const struct prom_hist *h);

#endif
