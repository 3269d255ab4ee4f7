/*
 * openai_prompt — from request content to prompt ids: the leniencies that bring an OpenAI
 * conversation into the Gemma turn format, and tokenization that lets only the template
 * write control tokens.
 */
#include <stdlib.h>
#include <string.h>

#include "scheduler/grammar.h"
#include "server/openai_int.h"

/* OpenAI accepts what the Gemma format cannot write, so messages are first brought into it:
 * with no user message, system messages are user turns (a lone system prompt is a question);
 * a system message after the first one is a user turn; then adjacent messages of one role
 * are merged into one, their contents joined by a blank line (assistant messages only for
 * Gemma 1-3: Gemma 4's format continues one model turn across them itself). *n shrinks. */
int oai_merge_turns(struct chat_msg *cm, char **texts, size_t *n, int chat_style,
                           struct oai_error *e) {
    int users = 0;
    for (size_t i = 0; i < *n; i++) users += cm[i].role == CHAT_ROLE_USER;
    for (size_t i = 0; i < *n; i++)
        if (cm[i].role == CHAT_ROLE_SYSTEM && (!users || i > 0)) cm[i].role = CHAT_ROLE_USER;
    size_t j = 0;
    for (size_t i = 0; i < *n; i++) {
        enum chat_role r = cm[i].role;
        int merge = j > 0 && cm[j - 1].role == r && r != CHAT_ROLE_TOOL &&
                    !(r == CHAT_ROLE_ASSISTANT && chat_style == CHAT_STYLE_GEMMA4);
        if (!merge) {
            cm[j] = cm[i];
            texts[j] = texts[i];
            if (j != i) texts[i] = NULL;
            j++;
            continue;
        }
        size_t a = cm[j - 1].content_len, b = cm[i].content_len;
        char *t = realloc(texts[j - 1], a + b + 3);
        if (!t) return oai_fail(e, 500, NULL, NULL, "out of memory");
        memcpy(t + a, "\n\n", 2);
        memcpy(t + a + 2, texts[i], b);
        t[a + b + 2] = 0;
        texts[j - 1] = t;
        cm[j - 1].content = t;
        cm[j - 1].content_len = a + b + 2;
        free(texts[i]);
        texts[i] = NULL;
    }
    *n = j;
    return 0;
}

/* Tokenizes text into a fresh array. Control-token text is split out only where the chat
 * format wrote it: with spans (chat), outside them; without (a prompt string), nowhere;
 * unless the server allows control tokens in content. A text whose byte length alone
 * proves it needs more ids than the context holds is refused before any work: no id covers
 * more input bytes than the vocabulary's longest piece (tok_min_tokens). */
int oai_encode(const struct oai_limits *lim, const char *text, size_t len, int add_bos,
                      const struct tok_span *spans, int n_spans, int32_t **ids, int *n,
                      const char *param, struct oai_error *e) {
    const struct tok_vocab *v = lim->vocab;
    if (tok_min_tokens(v, len) > (size_t)lim->n_ctx)
        return oai_fail(e, 400, param, "context_length_exceeded",
                        "'%s' is %zu bytes: at least %zu tokens, over the context of %d", param,
                        len, tok_min_tokens(v, len), lim->n_ctx);
    int special = lim->allow_control_tokens || spans;
    if (lim->allow_control_tokens) n_spans = 0;
    int cap = (int)(len < (1u << 28) ? len : (1u << 28)) + 8;
    for (int attempt = 0; attempt < 2; attempt++) {
        *ids = malloc((size_t)cap * sizeof **ids);
        if (!*ids) return oai_fail(e, 500, NULL, NULL, "out of memory");
        int r = tok_encode_spans(v, text, len, add_bos, special, spans, n_spans, *ids, cap);
        if (r < 0) {
            free(*ids);
            *ids = NULL;
            return oai_fail(e, 400, param, NULL, "'%s' cannot be tokenized", param);
        }
        if (r <= cap) {
            *n = r;
            return 0;
        }
        free(*ids);
        *ids = NULL;
        cap = r;
    }
    return oai_fail(e, 500, NULL, NULL, "tokenizer size mismatch");
}


/* The id of the token whose bytes start at s (n bytes left), or -1. */
static int32_t token_at(const unsigned char *s, size_t n) {
    if (n < GRAM_TOK_BYTES || s[0] != 0xff) return -1;
    int32_t id = 0;
    for (int i = 1; i < GRAM_TOK_BYTES; i++) {
        if ((s[i] & 0xc0) != 0x80) return -1;
        id = (id << 6) | (s[i] & 0x3f);
    }
    return id;
}

int oai_expand_tokens(const struct tok_vocab *v, char **text, size_t *len,
                      struct tok_span **spans, int *n_spans) {
    const unsigned char *t = (const unsigned char *)*text;
    const size_t n = *len;
    size_t n_tok = 0;
    for (size_t i = 0; i < n; i++) n_tok += t[i] == 0xff;
    if (!n_tok) return 0;
    char *o = malloc(n + n_tok * 64 + 1);
    struct tok_span *sp = malloc(((size_t)*n_spans + n_tok + 1) * sizeof *sp);
    if (!o || !sp) {
        free(o);
        free(sp);
        return -1;
    }
    size_t k = 0;
    int ns = 0, si = 0;
    for (size_t i = 0; i < n;) {
        while (si < *n_spans && (*spans)[si].off + (*spans)[si].len <= i) si++;
        const int in_span = si < *n_spans && (*spans)[si].off <= i;
        const int32_t id = token_at(t + i, n - i);
        if (id >= 0 && id < tok_n_vocab(v)) {
            char piece[64];
            int pl = tok_token_to_bytes(v, id, 1, piece, (int)sizeof piece);
            if (pl < 0 || pl > (int)sizeof piece) pl = 0;
            memcpy(o + k, piece, (size_t)pl);
            k += (size_t)pl;
            i += GRAM_TOK_BYTES;
            continue;
        }
        if (in_span) { /* text-only: extend the last span or open one */
            if (ns && sp[ns - 1].off + sp[ns - 1].len == k) sp[ns - 1].len++;
            else sp[ns++] = (struct tok_span){k, 1};
        }
        o[k++] = (char)t[i++];
    }
    o[k] = 0;
    free(*text);
    free(*spans);
    *text = o;
    *len = k;
    *spans = sp;
    *n_spans = ns;
    return 0;
}
