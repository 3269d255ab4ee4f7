/*
 * g4note — Gemma 4's object notation to and from JSON (see g4note.h, docs/TOOLS.md).
 */
#include "server/g4note.h"

#include "scheduler/grammar.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define G4NOTE_MAX_DEPTH 64 /* nesting read or written */

static void add(struct g4note_buf *b, const char *s, size_t len) { jsc_buf_add(&b->t, s, len); }

static void adds(struct g4note_buf *b, const char *s) { add(b, s, strlen(s)); }

/* Caller text: appended and recorded as a text-only span (adjacent spans merge). */
static void add_text(struct g4note_buf *b, const char *s, size_t len) {
    if (!len || b->t.oom) return;
    const size_t at = b->t.n;
    add(b, s, len);
    if (b->t.oom) return;
    if (b->n_spans && b->spans[b->n_spans - 1].off + b->spans[b->n_spans - 1].len == at) {
        b->spans[b->n_spans - 1].len += len;
        return;
    }
    if (b->n_spans == b->cap_spans) {
        int nc = b->cap_spans ? b->cap_spans * 2 : 16;
        struct tok_span *ns = realloc(b->spans, (size_t)nc * sizeof(*ns));
        if (!ns) {
            b->t.oom = 1;
            return;
        }
        b->spans = ns;
        b->cap_spans = nc;
    }
    b->spans[b->n_spans++] = (struct tok_span){at, len};
}

void g4note_buf_free(struct g4note_buf *b) {
    jsc_buf_free(&b->t);
    free(b->spans);
    memset(b, 0, sizeof(*b));
}

static void add_string(struct g4note_buf *b, const char *s, size_t len, int upper) {
    adds(b, G4NOTE_QUOTE);
    if (upper) {
        for (size_t i = 0; i < len; i++) {
            char c = (char)toupper((unsigned char)s[i]);
            add_text(b, &c, 1);
        }
    } else {
        add_text(b, s, len);
    }
    adds(b, G4NOTE_QUOTE);
}

static int cmp_key(const void *x, const void *y) {
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

int g4note_bare_key(const char *key) {
    if (!key[0]) return 0;
    for (const char *k = key; *k; k++)
        if (strchr(":,{}[]", *k) || (unsigned char)*k <= 0x20) return 0;
    return 1;
}

static int write_value(struct g4note_buf *b, const json_t *v, int upper_types, int upper_this,
                       int depth) {
    if (depth > G4NOTE_MAX_DEPTH) return -1;
    switch (json_typeof(v)) {
    case JSON_STRING:
        add_string(b, json_string_value(v), json_string_length(v), upper_this);
        return 0;
    case JSON_OBJECT: {
        const size_t n = json_object_size(v);
        const char **keys = malloc((n ? n : 1) * sizeof(*keys));
        if (!keys) return -1;
        size_t k = 0;
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)v, key, val) keys[k++] = key;
        qsort(keys, n, sizeof(*keys), cmp_key);
        adds(b, "{");
        int rc = 0;
        for (size_t i = 0; i < n && !rc; i++) {
            if (i) adds(b, ",");
            if (g4note_bare_key(keys[i])) add_text(b, keys[i], strlen(keys[i]));
            else add_string(b, keys[i], strlen(keys[i]), 0);
            adds(b, ":");
            rc = write_value(b, json_object_get(v, keys[i]), upper_types,
                             upper_types && strcmp(keys[i], "type") == 0, depth + 1);
        }
        adds(b, "}");
        free(keys);
        return rc;
    }
    case JSON_ARRAY:
        adds(b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) adds(b, ",");
            if (write_value(b, json_array_get(v, i), upper_types, upper_this, depth + 1)) return -1;
        }
        adds(b, "]");
        return 0;
    case JSON_TRUE: adds(b, "true"); return 0;
    case JSON_FALSE: adds(b, "false"); return 0;
    case JSON_NULL: adds(b, "null"); return 0;
    default: { /* numbers: JSON's own text */
        char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        if (!t) return -1;
        adds(b, t);
        free(t);
        return 0;
    }
    }
}

int g4note_write(struct g4note_buf *b, const json_t *v, int upper_types) {
    int rc = write_value(b, v, upper_types, 0, 0);
    return rc || b->t.oom ? -1 : 0;
}

int g4note_call(struct g4note_buf *b, const char *name, const json_t *args) {
    if (!json_is_object(args)) return -1;
    adds(b, G4NOTE_CALL_OPEN "call:");
    add_text(b, name, strlen(name));
    if (g4note_write(b, args, 0)) return -1;
    adds(b, G4NOTE_CALL_CLOSE);
    return b->t.oom ? -1 : 0;
}

int g4note_response(struct g4note_buf *b, const char *name, const char *content, size_t len) {
    adds(b, G4NOTE_RESP_OPEN "response:");
    add_text(b, name, strlen(name));
    adds(b, "{value:");
    add_string(b, content, len, 0);
    adds(b, "}" G4NOTE_RESP_CLOSE);
    return b->t.oom ? -1 : 0;
}

int g4note_declaration(struct g4note_buf *b, const char *name, const char *description,
                       const json_t *parameters) {
    adds(b, G4NOTE_DECL_OPEN "declaration:");
    add_text(b, name, strlen(name));
    adds(b, "{");
    if (description) {
        adds(b, "description:");
        add_string(b, description, strlen(description), 0);
    }
    if (parameters) {
        if (description) adds(b, ",");
        adds(b, "parameters:");
        if (g4note_write(b, parameters, 1)) return -1;
    }
    adds(b, "}" G4NOTE_DECL_CLOSE);
    return b->t.oom ? -1 : 0;
}

/* ---- reading -------------------------------------------------------------------------- */

struct rd {
    const char *s, *q;
    size_t n, i, qlen;
    char *err;
    size_t errlen;
};

static json_t *rfail(struct rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static json_t *rfail(struct rd *r, const char *fmt, ...) {
    if (r->errlen) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(r->err, r->errlen, fmt, ap);
        va_end(ap);
        if (k >= 0 && (size_t)k < r->errlen)
            snprintf(r->err + k, r->errlen - (size_t)k, " at byte %zu", r->i);
    }
    return NULL;
}

static int at_quote(const struct rd *r) {
    return r->n - r->i >= r->qlen && memcmp(r->s + r->i, r->q, r->qlen) == 0;
}

/* A delimited string's content: up to the next delimiter. */
static int read_string(struct rd *r, size_t *off, size_t *len) {
    r->i += r->qlen;
    const size_t start = r->i;
    while (r->i < r->n && !at_quote(r)) r->i++;
    if (r->i >= r->n) return -1;
    *off = start;
    *len = r->i - start;
    r->i += r->qlen;
    return 0;
}

static int is_word_lit(const struct rd *r, const char *w) {
    size_t k = strlen(w);
    return r->n - r->i >= k && memcmp(r->s + r->i, w, k) == 0;
}

static json_t *read_value(struct rd *r, int depth);

static json_t *read_object(struct rd *r, int depth) {
    json_t *o = json_object();
    if (!o) return rfail(r, "out of memory");
    r->i++; /* '{' */
    if (r->i < r->n && r->s[r->i] == '}') {
        r->i++;
        return o;
    }
    for (;;) {
        size_t koff, klen;
        if (at_quote(r)) {
            if (read_string(r, &koff, &klen)) goto bad_str;
        } else {
            koff = r->i;
            while (r->i < r->n && !strchr(":,{}[]", r->s[r->i]) && !at_quote(r)) r->i++;
            klen = r->i - koff;
            if (!klen) {
                json_decref(o);
                return rfail(r, "expected a key");
            }
        }
        if (r->i >= r->n || r->s[r->i] != ':') {
            json_decref(o);
            return rfail(r, "expected ':'");
        }
        r->i++;
        char *key = strndup(r->s + koff, klen);
        json_t *v = key ? read_value(r, depth + 1) : NULL;
        if (!v || json_object_set_new(o, key, v)) {
            free(key);
            json_decref(o);
            return v ? rfail(r, "bad key") : NULL;
        }
        free(key);
        if (r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            continue;
        }
        if (r->i < r->n && r->s[r->i] == '}') {
            r->i++;
            return o;
        }
        json_decref(o);
        return rfail(r, "expected ',' or '}'");
    }
bad_str:
    json_decref(o);
    return rfail(r, "unterminated string");
}

static json_t *read_array(struct rd *r, int depth) {
    json_t *a = json_array();
    if (!a) return rfail(r, "out of memory");
    r->i++; /* '[' */
    if (r->i < r->n && r->s[r->i] == ']') {
        r->i++;
        return a;
    }
    for (;;) {
        json_t *v = read_value(r, depth + 1);
        if (!v || json_array_append_new(a, v)) {
            json_decref(a);
            return NULL;
        }
        if (r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            continue;
        }
        if (r->i < r->n && r->s[r->i] == ']') {
            r->i++;
            return a;
        }
        json_decref(a);
        return rfail(r, "expected ',' or ']'");
    }
}

static json_t *read_value(struct rd *r, int depth) {
    if (depth > G4NOTE_MAX_DEPTH) return rfail(r, "nested too deeply");
    if (r->i >= r->n) return rfail(r, "unexpected end");
    if (at_quote(r)) {
        size_t off, len;
        if (read_string(r, &off, &len)) return rfail(r, "unterminated string");
        json_t *s = json_stringn(r->s + off, len);
        return s ? s : rfail(r, "string is not UTF-8");
    }
    const char c = r->s[r->i];
    if (c == '{') return read_object(r, depth);
    if (c == '[') return read_array(r, depth);
    static const char *const words[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++)
        if (is_word_lit(r, words[k])) {
            r->i += strlen(words[k]);
            return k == 0 ? json_true() : k == 1 ? json_false() : json_null();
        }
    const size_t start = r->i;
    while (r->i < r->n && strchr("-+0123456789.eE", r->s[r->i])) r->i++;
    if (r->i == start) return rfail(r, "unexpected '%c'", c);
    json_t *num = json_loadb(r->s + start, r->i - start, JSON_DECODE_ANY, NULL);
    if (!num || !json_is_number(num)) {
        json_decref(num);
        r->i = start;
        return rfail(r, "bad number");
    }
    return num;
}

json_t *g4note_parse(const char *s, size_t n, const char *q, size_t qlen, size_t *used,
                     char *err, size_t errlen) {
    struct rd r = {s, q, n, 0, qlen, err, errlen};
    if (errlen) err[0] = 0;
    if (!qlen) return rfail(&r, "empty string delimiter");
    json_t *v = read_value(&r, 0);
    if (used) *used = r.i;
    return v;
}

/* ---- token ids ---------------------------------------------------------------------- */

static const char *const tok_text[7] = {G4NOTE_CALL_OPEN, G4NOTE_CALL_CLOSE, G4NOTE_QUOTE,
                                        G4NOTE_DECL_OPEN, G4NOTE_DECL_CLOSE, G4NOTE_RESP_OPEN,
                                        G4NOTE_RESP_CLOSE};

static int32_t *id_slot(struct g4note_ids *ids, int k) {
    int32_t *slots[7] = {&ids->call, &ids->call_end, &ids->quote, &ids->decl,
                         &ids->decl_end, &ids->resp, &ids->resp_end};
    return slots[k];
}

int g4note_ids_find(const struct tok_vocab *v, struct g4note_ids *ids) {
    for (int k = 0; k < 7; k++) {
        const int32_t id = tok_lookup(v, tok_text[k], strlen(tok_text[k]));
        if (id < 0 || id > GRAM_TOK_MAX_ID || tok_type(v, id) != TOK_TYPE_CONTROL) return 0;
        *id_slot(ids, k) = id;
    }
    return 1;
}

void g4note_encode(const struct g4note_buf *b, const struct g4note_ids *ids, struct jsc_buf *out) {
    struct g4note_ids cp = *ids;
    size_t i = 0;
    int sp = 0;
    while (i < b->t.n) {
        if (sp < b->n_spans && i == b->spans[sp].off) {
            jsc_buf_add(out, b->t.p + i, b->spans[sp].len);
            i += b->spans[sp++].len;
            continue;
        }
        int hit = -1;
        for (int k = 0; k < 7 && hit < 0; k++) {
            const size_t tl = strlen(tok_text[k]);
            if (b->t.n - i >= tl && memcmp(b->t.p + i, tok_text[k], tl) == 0) hit = k;
        }
        if (hit < 0) {
            jsc_buf_add(out, b->t.p + i, 1);
            i++;
            continue;
        }
        uint8_t enc[GRAM_TOK_BYTES];
        gram_token_bytes(*id_slot(&cp, hit), enc);
        jsc_buf_add(out, (const char *)enc, GRAM_TOK_BYTES);
        i += strlen(tok_text[hit]);
    }
}
