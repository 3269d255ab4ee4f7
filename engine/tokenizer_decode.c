/*
 * tokenizer_decode — ids back to bytes (llama.cpp token_to_piece / detokenize rules) and the
 * incremental decoder that only ever emits whole, valid UTF-8 code points. See tokenizer.h.
 */
#include <limits.h>
#include <string.h>

#include "engine/tokenizer.h"
#include "engine/tokenizer_int.h"

/* ---- decoding --------------------------------------------------------------------------- */

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Copies piece bytes, dropping `lstrip` leading spaces (llama.cpp token_to_piece). */
static int emit_piece(const char *p, int n, int lstrip, char *buf, int cap) {
    while (lstrip-- > 0 && n > 0 && *p == ' ') {
        p++;
        n--;
    }
    if (cap > 0) memcpy(buf, p, (size_t)(n < cap ? n : cap));
    return n;
}

static int token_bytes(const struct tok_vocab *v, int32_t id, int special, int lstrip, char *buf,
                       int cap) {
    if (id < 0 || id >= v->n) return TOK_ERANGE;
    if (cap < 0) cap = 0;
    const struct tok_entry *e = &v->tok[id];
    int a = e->attr;
    if (!special && (a & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL))) return 0;
    if (a & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED))
        return emit_piece(e->text, (int)e->len, lstrip, buf, cap);
    if (a & TOK_ATTR_NORMAL) {
        /* U+2581 -> ' ' (both SPM and the Gemma 4 BPE escape spaces this way). */
        int n = 0, skip = lstrip;
        for (uint32_t i = 0; i < e->len;) {
            char c;
            if (i + 3 <= e->len && !memcmp(e->text + i, "\xe2\x96\x81", 3)) {
                c = ' ';
                i += 3;
            } else {
                c = e->text[i++];
            }
            if (skip > 0 && n == 0 && c == ' ') {
                skip--;
                continue;
            }
            skip = 0;
            if (n < cap) buf[n] = c;
            n++;
        }
        return n;
    }
    if (a & TOK_ATTR_BYTE) {
        /* "<0xXX>": llama.cpp parses characters 3-4 as hex. */
        int val = 0;
        for (uint32_t i = 3; i < 5 && i < e->len && hexval(e->text[i]) >= 0; i++)
            val = val * 16 + hexval(e->text[i]);
        if (cap > 0) buf[0] = (char)val;
        return 1;
    }
    return 0;
}

int tok_token_to_bytes(const struct tok_vocab *v, int32_t id, int special, char *buf, int cap) {
    return token_bytes(v, id, special, 0, buf, cap);
}

int tok_decode(const struct tok_vocab *v, const int32_t *ids, int n, int special, char *buf,
               int cap) {
    /* llama.cpp detokenize: with add_space_prefix the first piece loses one leading space. */
    int total = 0;
    for (int i = 0; i < n; i++) {
        int room = cap - total;
        if (room < 0) room = 0;
        int k = token_bytes(v, ids[i], special, i == 0 && v->add_space_prefix,
                            room ? buf + total : NULL, room);
        if (k < 0) return k;
        if (k > INT_MAX - total) return TOK_ERANGE;
        total += k;
    }
    return total;
}

/* ---- streaming -------------------------------------------------------------------------- */

int tok_utf8_seq(const uint8_t *s, int n) {
    uint8_t c = s[0];
    int need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c == 0xE0)
        need = 2, lo = 0xA0;
    else if (c == 0xED)
        need = 2, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF)
        need = 2;
    else if (c == 0xF0)
        need = 3, lo = 0x90;
    else if (c == 0xF4)
        need = 3, hi = 0x8F;
    else if (c >= 0xF1 && c <= 0xF3)
        need = 3;
    else
        return -1;
    for (int k = 1; k <= need; k++) {
        if (k >= n) return 0;
        uint8_t x = s[k];
        if (x < lo || x > hi) return -k;
        lo = 0x80;
        hi = 0xBF;
    }
    return need + 1;
}

void tok_stream_init(struct tok_stream *s) {
    memset(s, 0, sizeof(*s));
}

int tok_stream_push(struct tok_stream *s, const struct tok_vocab *v, int32_t id, char *out,
                    int cap) {
    uint8_t in[TOK_STREAM_MAX];
    int np = s->n_pending;
    if (np < 0 || np > 4) np = 0;
    memcpy(in, s->pending, (size_t)np);
    int k = token_bytes(v, id, 0, 0, (char *)in + np, (int)sizeof(in) - np);
    if (k < 0) return k;
    if (k > (int)sizeof(in) - np) return TOK_ESPACE;
    int n = np + k, w = 0, i = 0;
    while (i < n) {
        int r = tok_utf8_seq(in + i, n - i);
        if (r == 0) break; /* unfinished tail: keep it */
        const uint8_t *src = in + i;
        int len = r;
        if (r < 0) {
            src = (const uint8_t *)"\xef\xbf\xbd";
            len = 3;
        }
        if (w + len > cap) return TOK_ESPACE;
        memcpy(out + w, src, (size_t)len);
        w += len;
        i += r > 0 ? r : -r;
    }
    s->n_pending = n - i;
    memcpy(s->pending, in + i, (size_t)(n - i));
    return w;
}

int tok_stream_flush(struct tok_stream *s, char *out, int cap) {
    if (s->n_pending <= 0) {
        s->n_pending = 0;
        return 0;
    }
    if (cap < 3) return TOK_ESPACE;
    memcpy(out, "\xef\xbf\xbd", 3);
    s->n_pending = 0;
    return 3;
}
