/*
 * prom — Prometheus text lines. Bucket bounds print with %g and sums with six decimals, the
 * format every gemmad histogram has always exposed.
 */
#include "base/prom.h"

#include <stdio.h>
#include <string.h>

void prom_family(struct strbuf *b, const char *name, const char *type, const char *help) {
    strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void prom_value(struct strbuf *b, const char *v) {
    for (; *v; v++) {
        if (*v == '\\' || *v == '"') strbuf_add(b, "\\", 1);
        if (*v == '\n') strbuf_add(b, "\\n", 2);
        else strbuf_add(b, v, 1);
    }
}

/* name{a="x",b="y"[,le="..."]}: `le` (NULL: none) closes the set for histogram buckets. */
static void prom_name_le(struct strbuf *b, const char *name, const struct prom_label *l,
                         const char *le) {
    strbuf_add(b, name, strlen(name));
    int n = 0;
    for (; l && l[n].name; n++) {
        strbuf_printf(b, "%s%s=\"", n ? "," : "{", l[n].name);
        prom_value(b, l[n].value ? l[n].value : "");
        strbuf_add(b, "\"", 1);
    }
    if (le) strbuf_printf(b, "%sle=\"%s\"", n ? "," : "{", le);
    if (n || le) strbuf_add(b, "}", 1);
}

static void prom_name(struct strbuf *b, const char *name, const struct prom_label *l) {
    prom_name_le(b, name, l, NULL);
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

void prom_hist_write_l(struct strbuf *b, const char *name, const char *help,
                       const struct prom_label *labels, const struct prom_hist *h) {
    char nm[160], le[32];
    prom_family(b, name, "histogram", help);
    uint64_t cum = 0;
    snprintf(nm, sizeof nm, "%s_bucket", name);
    for (int i = 0; i <= h->n; i++) {
        cum += h->count[i];
        if (i < h->n) snprintf(le, sizeof le, "%g", h->le[i]);
        else snprintf(le, sizeof le, "+Inf");
        prom_name_le(b, nm, labels, le);
        strbuf_printf(b, " %llu\n", (unsigned long long)cum);
    }
    snprintf(nm, sizeof nm, "%s_sum", name);
    prom_name(b, nm, labels);
    strbuf_printf(b, " %.6f\n", h->sum);
    snprintf(nm, sizeof nm, "%s_count", name);
    prom_name(b, nm, labels);
    strbuf_printf(b, " %llu\n", (unsigned long long)h->total);
}

void prom_hist_write(struct strbuf *b, const char *name, const char *help,
                     const struct prom_hist *h) {
    prom_hist_write_l(b, name, help, NULL, h);
}
