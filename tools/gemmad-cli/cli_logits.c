/*
 * gemmad-cli logits and taps: what the model computes for a prompt. logits prints the top-k
 * of the last (or, with --all, every) position as JSON; taps prints a summary of each layer's
 * last hidden row (and can dump every row) through the forward pass's per-layer hook.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "scheduler/sample.h"
#include "tools/gemmad-cli/cli.h"

/* Top-k of one logit row as a JSON list. */
static void print_top(const float *x, int n, int k) {
    if (k > n) k = n;
    int *best = malloc((size_t)k * sizeof(int));
    if (!best) cli_die("out of memory");
    int nb = 0;
    for (int i = 0; i < n; i++) {
        if (nb < k || x[i] > x[best[nb - 1]]) {
            int j = nb < k ? nb++ : k - 1;
            while (j > 0 && x[best[j - 1]] < x[i]) {
                best[j] = best[j - 1];
                j--;
            }
            best[j] = i;
        }
    }
    putchar('[');
    for (int i = 0; i < nb; i++)
        printf("%s{\"id\": %d, \"logit\": %.6f}", i ? ", " : "", best[i], (double)x[best[i]]);
    putchar(']');
    free(best);
}

int cli_logits(const struct cli_opts *o) {
    struct model *m = cli_load(o, NULL);
    int n;
    int32_t *ids = cli_prompt_ids(o, m, &n);
    const int V = m->cfg.n_vocab;
    int batch = o->batch;
    if (o->all && batch > 64) batch = 64; /* bounds the logits buffer */
    const int rows = o->all ? batch : 1;
    struct runner *r = cli_runner(m, o, 1, n, batch, rows);
    float *logits = malloc((size_t)V * (size_t)rows * sizeof(float));
    if (!logits) cli_die("out of memory");
    if (!o->all) {
        cli_feed(r, 0, ids, n, FWD_LOGITS_LAST, logits);
        print_top(logits, V, o->top);
        putchar('\n');
    } else {
        putchar('[');
        for (int done = 0; done < n;) {
            int k = n - done < batch ? n - done : batch;
            cli_feed(r, 0, ids + done, k, FWD_LOGITS_ALL, logits);
            for (int i = 0; i < k; i++) {
                if (done + i) fputs(",\n ", stdout);
                print_top(logits + (size_t)i * (size_t)V, V, o->top);
            }
            done += k;
        }
        puts("]");
    }
    free(logits);
    free(ids);
    runner_destroy(r);
    model_free(m);
    return 0;
}

struct tap_state {
    int n_layer;
    FILE *dump;
};

static void tap_print(void *user, int layer, const float *x, int n_rows, int n_embd) {
    const struct tap_state *ts = user;
    const size_t nel = (size_t)n_rows * (size_t)n_embd;
    if (ts->dump && fwrite(x, sizeof(float), nel, ts->dump) != nel)
        cli_die("--dump: write failed");
    const float *row = x + (size_t)(n_rows - 1) * (size_t)n_embd;
    double sum = 0, sq = 0;
    float mn = row[0], mx = row[0];
    for (int i = 0; i < n_embd; i++) {
        sum += row[i];
        sq += (double)row[i] * row[i];
        if (row[i] < mn) mn = row[i];
        if (row[i] > mx) mx = row[i];
    }
    printf("{\"layer\": %d, \"name\": \"%s\", \"mean\": %.6g, \"rms\": %.6g, \"min\": %.6g, "
           "\"max\": %.6g, \"first\": [",
           layer, layer == ts->n_layer ? "result_norm" : "l_out", sum / n_embd,
           sqrt(sq / n_embd), (double)mn, (double)mx);
    for (int i = 0; i < 8 && i < n_embd; i++) printf("%s%.6g", i ? ", " : "", (double)row[i]);
    printf("]}\n");
}

int cli_taps(const struct cli_opts *o) {
    struct model *m = cli_load(o, NULL);
    int n;
    int32_t *ids = cli_prompt_ids(o, m, &n);
    /* One step (batch = n), so the tapped last row is the prompt's last token. */
    struct runner *r = cli_runner(m, o, 1, n, n, 1);
    struct tap_state ts = {m->cfg.n_layer, NULL};
    if (o->dump && !(ts.dump = fopen(o->dump, "wb")))
        cli_die("--dump: cannot open '%s'", o->dump);
    fwd_set_tap(runner_fwd(r), tap_print, &ts);
    float *logits = malloc((size_t)m->cfg.n_vocab * sizeof(float));
    if (!logits) cli_die("out of memory");
    cli_feed(r, 0, ids, n, FWD_LOGITS_LAST, logits);
    const int best = smp_argmax(logits, m->cfg.n_vocab);
    printf("{\"layer\": \"logits\", \"argmax\": %d, \"max\": %.6g}\n", best,
           (double)logits[best]);
    if (ts.dump && fclose(ts.dump) != 0) cli_die("--dump: write failed");
    free(logits);
    free(ids);
    runner_destroy(r);
    model_free(m);
    return 0;
}
