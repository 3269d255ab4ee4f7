/*
 * gemmad-cli: the prompt as token ids (-p, --chat, --tokens), and `tokenize`, which prints
 * them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat.h"
#include "engine/tokenizer.h"
#include "tools/gemmad-cli/cli.h"

static int32_t *parse_token_list(const char *s, int n_vocab, int *n_out) {
    int cap = 16, n = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) cli_die("out of memory");
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v >= n_vocab)
            cli_die("--tokens: '%s' is not a list of token ids below %d", s, n_vocab);
        if (n == cap) {
            cap *= 2;
            ids = realloc(ids, (size_t)cap * sizeof *ids);
            if (!ids) cli_die("out of memory");
        }
        ids[n++] = (int32_t)v;
        p = end;
        if (*p == ',') p++;
        else if (*p) cli_die("--tokens: unexpected '%c' in '%s'", *p, s);
    }
    if (n == 0) cli_die("--tokens: empty list");
    *n_out = n;
    return ids;
}

int32_t *cli_encode(const struct tok_vocab *v, const char *text, size_t len, int add_bos,
                    int special, int *n_out) {
    int n = tok_encode(v, text, len, add_bos, special, NULL, 0);
    if (n < 0) cli_die("cannot tokenize the prompt (%d)", n);
    int32_t *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
    if (!ids) cli_die("out of memory");
    int n2 = tok_encode(v, text, len, add_bos, special, ids, n);
    if (n2 != n) cli_die("tokenizer returned inconsistent lengths");
    *n_out = n;
    return ids;
}

/* Plain prompts are tokenized like llama.cpp's tools do: BOS added, control tokens parsed. */
int32_t *cli_prompt_ids(const struct cli_opts *o, const struct model *m, int *n) {
    if (o->tokens) return parse_token_list(o->tokens, m->cfg.n_vocab, n);
    if (!o->chat) return cli_encode(m->vocab, o->prompt, strlen(o->prompt), 1, 1, n);
    struct chat_msg msg = {CHAT_ROLE_USER, o->prompt, strlen(o->prompt)};
    enum chat_style st = m->cfg.arch == MODEL_ARCH_GEMMA4 ? CHAT_STYLE_GEMMA4 : CHAT_STYLE_GEMMA;
    size_t need = 0, cap = strlen(o->prompt) + 256;
    char err[256] = "";
    char *buf = malloc(cap);
    if (!buf) cli_die("out of memory");
    int rc = chat_render(st, &msg, 1, 1, buf, cap, &need, err, sizeof err);
    if (rc == CHAT_ENOSPC) {
        free(buf);
        cap = need + 1;
        buf = malloc(cap);
        if (!buf) cli_die("out of memory");
        rc = chat_render(st, &msg, 1, 1, buf, cap, &need, err, sizeof err);
    }
    if (rc != CHAT_OK) cli_die("chat template: %s", err[0] ? err : "cannot render");
    int32_t *ids = cli_encode(m->vocab, buf, need, 0, 1, n);
    free(buf);
    return ids;
}

int cli_tokenize(const struct cli_opts *o) {
    struct model *m = cli_load(o, NULL);
    const char *text = o->text ? o->text : o->prompt;
    int n;
    int32_t *ids = cli_encode(m->vocab, text, strlen(text), 1, o->special, &n);
    putchar('[');
    for (int i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
    printf("]\n");
    free(ids);
    model_free(m);
    return 0;
}
