/*
 * chat — the Gemma chat formats, rendered in C. See chat.h.
 *
 * Gemma 1–3 follow llama.cpp's built-in `gemma` template and the HF Gemma 3 template: a
 * leading system message is folded into the first user turn as "SYS\n\nUSER", roles must
 * then alternate user/model starting with user, and every content is trimmed.
 * Gemma 4 follows the HF template shipped with llama.cpp (models/templates/
 * google-gemma-4-31B-it.jinja) for text-only conversations: a native system turn, model
 * content with thinking channels removed, consecutive assistant messages continuing the same
 * model turn, and the generation prompt with an empty thought channel (thinking disabled).
 */
#include "engine/chat.h"

#include <stdio.h>
#include <string.h>

/* Output sink that counts the full length even when the buffer is too small. */
struct sink {
    char *out;  /* may be NULL when cap == 0 */
    size_t cap; /* bytes */
    size_t len; /* bytes produced so far (may exceed cap) */
    struct tok_span *spans; /* where message content landed (NULL: not wanted) */
    int cap_spans, n_spans; /* n_spans counts them all, even past cap_spans */
};

static void put(struct sink *s, const char *p, size_t n) {
    if (s->len < s->cap) {
        size_t room = s->cap - s->len;
        memcpy(s->out + s->len, p, n < room ? n : room);
    }
    s->len += n;
}
static void puts_(struct sink *s, const char *p) { put(s, p, strlen(p)); }

/* Message content: recorded as a span (joined to the previous one when adjacent). */
static void put_content(struct sink *s, const char *p, size_t n) {
    if (!n) return;
    if (s->spans) {
        struct tok_span *last = s->n_spans && s->n_spans <= s->cap_spans
                                    ? &s->spans[s->n_spans - 1] : NULL;
        if (last && last->off + last->len == s->len) {
            last->len += n;
        } else {
            if (s->n_spans < s->cap_spans) s->spans[s->n_spans] = (struct tok_span){s->len, n};
            s->n_spans++;
        }
    }
    put(s, p, n);
}

static int is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* Trim ASCII whitespace (as llama.cpp's trim and Jinja's |trim do for ASCII). */
static void trim(const char **p, size_t *n) {
    const char *s = *p;
    size_t len = *n;
    while (len && is_ws(s[0])) s++, len--;
    while (len && is_ws(s[len - 1])) len--;
    *p = s;
    *n = len;
}

static const char *role_name(enum chat_role r) {
    switch (r) {
    case CHAT_ROLE_SYSTEM: return "system";
    case CHAT_ROLE_USER: return "user";
    case CHAT_ROLE_ASSISTANT: return "assistant";
    case CHAT_ROLE_TOOL: return "tool";
    }
    return "unknown";
}

static const char *content_of(const struct chat_msg *m, size_t *n) {
    *n = m->content ? m->content_len : 0;
    return m->content ? m->content : "";
}

static void seterr(char *err, size_t errlen, int idx, const char *what, enum chat_role r) {
    if (err && errlen) snprintf(err, errlen, "messages[%d]: %s (role '%s')", idx, what,
                                role_name(r));
}

/* Checks shared by both styles: roles known, system only first, no tool messages (tool
 * calling is not supported), at least one user message. */
static int check_roles(const struct chat_msg *msgs, int n_msgs, char *err, size_t errlen) {
    int users = 0;
    if (!msgs || n_msgs <= 0) {
        if (err && errlen) snprintf(err, errlen, "messages: at least one message is required");
        return CHAT_EEMPTY;
    }
    for (int i = 0; i < n_msgs; i++) {
        enum chat_role r = msgs[i].role;
        if (r == CHAT_ROLE_USER) users++;
        else if (r == CHAT_ROLE_SYSTEM && i != 0) {
            seterr(err, errlen, i, "a system message is only allowed first", r);
            return CHAT_EROLE;
        } else if (r != CHAT_ROLE_SYSTEM && r != CHAT_ROLE_ASSISTANT) {
            seterr(err, errlen, i, "role not supported by the Gemma chat format", r);
            return CHAT_EROLE;
        }
    }
    if (!users) {
        if (err && errlen) snprintf(err, errlen, "messages: at least one user message is required");
        return CHAT_EEMPTY;
    }
    return 0;
}

/* Gemma 1–3. */
static int render_gemma(const struct chat_msg *msgs, int n_msgs, int add_gen, struct sink *s,
                        char *err, size_t errlen) {
    const char *sys = NULL;
    size_t sys_len = 0;
    int first = 0;
    if (msgs[0].role == CHAT_ROLE_SYSTEM) {
        sys = content_of(&msgs[0], &sys_len);
        trim(&sys, &sys_len);
        first = 1;
    }
    puts_(s, "<bos>");
    for (int i = first; i < n_msgs; i++) {
        enum chat_role want = (i - first) % 2 == 0 ? CHAT_ROLE_USER : CHAT_ROLE_ASSISTANT;
        if (msgs[i].role != want) {
            seterr(err, errlen, i, want == CHAT_ROLE_USER
                                       ? "roles must alternate user/assistant; expected user"
                                       : "roles must alternate user/assistant; expected assistant",
                   msgs[i].role);
            return CHAT_EROLE;
        }
        size_t n;
        const char *c = content_of(&msgs[i], &n);
        trim(&c, &n);
        puts_(s, want == CHAT_ROLE_USER ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
        if (i == first && sys_len) {
            put_content(s, sys, sys_len);
            puts_(s, "\n\n");
        }
        put_content(s, c, n);
        puts_(s, "<end_of_turn>\n");
    }
    if (add_gen) puts_(s, "<start_of_turn>model\n");
    return 0;
}

/* Find needle in (p, n); NULL when absent. */
static const char *find(const char *p, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(p + i, needle, k) == 0) return p + i;
    return NULL;
}

/* Next kept range of the template's strip_thinking: split on "<channel|>" and keep each part
 * up to its "<|channel>". *p / *n is the rest of the input; returns the kept length at the
 * old *p, or -1 when the input is exhausted. */
static long next_kept(const char **p, size_t *n, const char **kept) {
    static const char close_tag[] = "<channel|>", open_tag[] = "<|channel>";
    if (!*p) return -1;
    const char *end = find(*p, *n, close_tag);
    size_t part_n = end ? (size_t)(end - *p) : *n;
    const char *open = find(*p, part_n, open_tag);
    *kept = *p;
    long keep = (long)(open ? (size_t)(open - *p) : part_n);
    if (end) {
        *n -= part_n + sizeof close_tag - 1;
        *p = end + sizeof close_tag - 1;
    } else {
        *p = NULL;
    }
    return keep;
}

/* strip_thinking(content): the kept ranges concatenated, then trimmed. The first pass finds
 * the first and last non-space kept bytes; the second emits the kept bytes between them. */
static void put_model_content(struct sink *s, const char *p, size_t n) {
    const char *lo = NULL, *hi = NULL, *q = p, *k;
    size_t qn = n;
    long kn;
    while ((kn = next_kept(&q, &qn, &k)) >= 0)
        for (long i = 0; i < kn; i++)
            if (!is_ws(k[i])) {
                if (!lo) lo = k + i;
                hi = k + i + 1;
            }
    if (!lo) return;
    q = p, qn = n;
    while ((kn = next_kept(&q, &qn, &k)) >= 0) {
        const char *a = k < lo ? lo : k, *b = k + kn > hi ? hi : k + kn;
        if (a < b) put_content(s, a, (size_t)(b - a));
    }
}

/* Gemma 4. */
static int render_gemma4(const struct chat_msg *msgs, int n_msgs, int add_gen, struct sink *s) {
    int first = 0;
    puts_(s, "<bos>");
    if (msgs[0].role == CHAT_ROLE_SYSTEM) {
        size_t n;
        const char *c = content_of(&msgs[0], &n);
        trim(&c, &n);
        puts_(s, "<|turn>system\n");
        put_content(s, c, n);
        puts_(s, "<turn|>\n");
        first = 1;
    }
    for (int i = first; i < n_msgs; i++) {
        size_t n;
        const char *c = content_of(&msgs[i], &n);
        if (msgs[i].role == CHAT_ROLE_ASSISTANT) {
            /* consecutive assistant messages continue the same model turn */
            if (!(i > first && msgs[i - 1].role == CHAT_ROLE_ASSISTANT))
                puts_(s, "<|turn>model\n");
            put_model_content(s, c, n);
        } else {
            trim(&c, &n);
            puts_(s, "<|turn>user\n");
            put_content(s, c, n);
        }
        puts_(s, "<turn|>\n");
    }
    if (add_gen) puts_(s, "<|turn>model\n<|channel>thought\n<channel|>");
    return 0;
}

int chat_render(enum chat_style style, const struct chat_msg *msgs, int n_msgs,
                int add_generation_prompt, char *out, size_t cap, size_t *out_len, char *err,
                size_t errlen) {
    return chat_render_spans(style, msgs, n_msgs, add_generation_prompt, out, cap, out_len,
                             NULL, 0, NULL, err, errlen);
}

int chat_render_spans(enum chat_style style, const struct chat_msg *msgs, int n_msgs,
                      int add_generation_prompt, char *out, size_t cap, size_t *out_len,
                      struct tok_span *spans, int cap_spans, int *n_spans, char *err,
                      size_t errlen) {
    struct sink s = {out, out ? cap : 0, 0, spans, spans ? cap_spans : 0, 0};
    if (n_spans) *n_spans = 0;
    if (err && errlen) err[0] = 0;
    if (out_len) *out_len = 0;
    int rc = check_roles(msgs, n_msgs, err, errlen);
    if (rc) return rc;
    if (style == CHAT_STYLE_GEMMA4)
        rc = render_gemma4(msgs, n_msgs, add_generation_prompt, &s);
    else
        rc = render_gemma(msgs, n_msgs, add_generation_prompt, &s, err, errlen);
    if (rc) return rc;
    if (out_len) *out_len = s.len;
    if (n_spans) *n_spans = s.n_spans;
    if (s.len > s.cap) {
        if (err && errlen)
            snprintf(err, errlen, "chat: output needs %zu bytes, buffer has %zu", s.len, cap);
        return CHAT_ENOSPC;
    }
    if (s.len < s.cap) s.out[s.len] = 0;
    return 0;
}
