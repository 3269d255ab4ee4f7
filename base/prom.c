/*
 * prom — Prometheus text lines. Bucket bounds print with %g and sums with six decimals, the
 * format every gemmad histogram has always exposed.
 */
#include "base/prom.h"

#include <string.h>

void prom_family(struct strbuf *b, const char *name, const char *type, const char *help) {
    strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void prom_name(struct strbuf *b, const char *name, const struct prom_label *l) {
    strbuf_add(b, name, strlen(name));
    if (!l || !l->name) return;
    strbuf_add(b, "{", 1);
    for (int i = 0; l[i].name; i++)
        strbuf_printf(b, "%s%s=\"%s\"", i ? "," : "", l[i].name, l[i].value);
    strbuf_add(b, "}", 1);
}

void prom_u64(struct strbuf *b, const char *name, const struct prom_label *labels, uint64_t v) {
    prom_name(b, name, labels);
    strbuf_printf(b, " %llu\n", (unsigned long long)v);
}

void prom_i64(struct strbuf *b, const char *name, const struct prom_label *labels, int64_t v) {
    prom_name(b, name, labels);
    strbuf_printf(b, " %lld\n", (long long)v);
}

void prom_f64(struct strbuf *b, const char *name, const struct prom_label *labels, double v) {
    prom_name(b, name, labels);
    strbuf_printf(b, " %.6f\n", v);
}

void prom_hist_init(struct prom_hist *h, const double *le, int n) {
    memset(h, 0, sizeof *h);
    if (n > PROM_HIST_MAX) n = PROM_HIST_MAX;
    h->n = n;
    memcpy(h->le, le, (size_t)n * sizeof *le);
}

void prom_hist_observe(struct prom_hist *h, double v) {
    int i = 0;
    while (i < h->n && v > h->le[i]) i++;
    h->count[i]++;
    h->sum += v;
    h->total++;
}

void prom_hist_write(struct strbuf *b, const char *name, const char *help,
                     const struct prom_hist *h) {
    prom_family(b, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->count[i];
        strbuf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[i], (unsigned long long)cum);
    }
    strbuf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                  (unsigned long long)h->total, name, h->sum, name,
                  (unsigned long long)h->total);
}
