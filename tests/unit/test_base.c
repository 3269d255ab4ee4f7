/* test_base — the bounded string appender (truncation is sticky, always NUL-terminated), the
 * error-message setter, and the Prometheus text writer (exact lines, cumulative buckets). */
#include "base/prom.h"
#include "base/strbuf.h"
#include "tests/unit/harness.h"

#include <string.h>

static void test_strbuf(void) {
    char buf[8];
    struct strbuf b;
    strbuf_init(&b, buf, sizeof buf);
    T_ASSERT(b.n == 0 && buf[0] == 0 && !b.truncated);
    strbuf_printf(&b, "%d-", 12);
    strbuf_add(&b, "ab", 2);
    T_ASSERT(b.n == 5 && !strcmp(buf, "12-ab") && !b.truncated);
    strbuf_printf(&b, "%s", "xyz!");
    T_ASSERTF(b.n == 7 && !strcmp(buf, "12-abxy") && b.truncated, "%zu '%s'", b.n, buf);
    strbuf_add(&b, "q", 1);
    T_ASSERT(b.n == 7 && !strcmp(buf, "12-abxy"));
    strbuf_init(&b, buf, sizeof buf);
    strbuf_add(&b, "0123456789", 10);
    T_ASSERT(b.n == 7 && !strcmp(buf, "0123456") && b.truncated);
    strbuf_init(&b, buf, 0); /* no room at all: nothing written */
    strbuf_printf(&b, "x");
    T_ASSERT(b.n == 0 && b.truncated);
}

static void test_strbuf_setf(void) {
    char buf[6] = "old";
    strbuf_setf(buf, sizeof buf, "%s %d", "ab", 1);
    T_ASSERT(!strcmp(buf, "ab 1"));
    strbuf_setf(buf, sizeof buf, "%s", "0123456789"); /* replaced and cut to fit */
    T_ASSERT(!strcmp(buf, "01234"));
    strbuf_setf(NULL, 0, "%s", "x"); /* no buffer: nothing happens */
    strbuf_setf(buf, 0, "%s", "x");  /* no room: buf untouched */
    T_ASSERT(!strcmp(buf, "01234"));
}

static void test_prom(void) {
    char buf[1024];
    struct strbuf b;
    strbuf_init(&b, buf, sizeof buf);
    prom_family(&b, "x_total", "counter", "Things.");
    prom_u64(&b, "x_total", (const struct prom_label[]){{"a", "1"}, {"b", "two"}, {0}}, 3);
    prom_i64(&b, "g", NULL, -2);
    prom_f64(&b, "r", (const struct prom_label[]){{"c", "full"}, {0}}, 0.5);
    static const double le[] = {0.5, 2};
    struct prom_hist h;
    prom_hist_init(&h, le, 2);
    prom_hist_observe(&h, 0.25);
    prom_hist_observe(&h, 1);
    prom_hist_observe(&h, 0.5);
    prom_hist_observe(&h, 9);
    prom_hist_write(&b, "h_seconds", "Durations.", &h);
    const char *want = "# HELP x_total Things.\n# TYPE x_total counter\n"
                       "x_total{a=\"1\",b=\"two\"} 3\ng -2\nr{c=\"full\"} 0.500000\n"
                       "# HELP h_seconds Durations.\n# TYPE h_seconds histogram\n"
                       "h_seconds_bucket{le=\"0.5\"} 2\nh_seconds_bucket{le=\"2\"} 3\n"
                       "h_seconds_bucket{le=\"+Inf\"} 4\nh_seconds_sum 10.750000\n"
                       "h_seconds_count 4\n";
    T_ASSERTF(!strcmp(buf, want), "got:\n%s", buf);
}

/* Label values are escaped; a labelled histogram puts le last on every bucket. */
static void test_prom_labels(void) {
    char buf[1024];
    struct strbuf b;
    strbuf_init(&b, buf, sizeof buf);
    prom_i64(&b, "i", (const struct prom_label[]){{"m", "a\"b\\c\nd"}, {0}}, 1);
    static const double le[] = {1};
    struct prom_hist h;
    prom_hist_init(&h, le, 1);
    prom_hist_observe(&h, 3);
    prom_hist_write_l(&b, "vllm:x_seconds", "X.", (const struct prom_label[]){{"m", "g"}, {0}},
                      &h);
    const char *want = "i{m=\"a\\\"b\\\\c\\nd\"} 1\n"
                       "# HELP vllm:x_seconds X.\n# TYPE vllm:x_seconds histogram\n"
                       "vllm:x_seconds_bucket{m=\"g\",le=\"1\"} 0\n"
                       "vllm:x_seconds_bucket{m=\"g\",le=\"+Inf\"} 1\n"
                       "vllm:x_seconds_sum{m=\"g\"} 3.000000\nvllm:x_seconds_count{m=\"g\"} 1\n";
    T_ASSERTF(!strcmp(buf, want), "got:\n%s", buf);
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {T_CASE(test_strbuf), T_CASE(test_strbuf_setf),
                                          T_CASE(test_prom), T_CASE(test_prom_labels),
                                          {NULL, NULL}};
    return t_main(argc, argv, cases);
}
