/*
 * chat — the Gemma chat format, written in C (the Jinja template stored in the file is
 * never executed).
 *
 * Gemma 1–3: <bos><start_of_turn>user\n{content}<end_of_turn>\n…<start_of_turn>model\n
 * with "assistant" renamed "model" and a system message folded into the first user turn
 * ("SYS\n\nuser text"). Gemma 4: <|turn>{role}\n…<turn|>\n with a native system turn.
 * Content is stripped of leading/trailing whitespace like the reference template.
 *
 * Pure functions; any thread.
 */
#ifndef GEMMAD_CHAT_H
#define GEMMAD_CHAT_H

#include <stddef.h>

#include "engine/tokenizer.h"

enum chat_role { CHAT_ROLE_SYSTEM, CHAT_ROLE_USER, CHAT_ROLE_ASSISTANT, CHAT_ROLE_TOOL };

struct chat_msg {
    enum chat_role role;
    const char *content; /* UTF-8, content_len bytes, not necessarily NUL-terminated */
    size_t content_len;
};

enum chat_style { CHAT_STYLE_GEMMA = 0, CHAT_STYLE_GEMMA4 = 1 };

enum chat_status {
    CHAT_OK = 0,
    CHAT_EROLE = -1,     /* roles do not alternate user/assistant after folding the system */
    CHAT_EEMPTY = -2,    /* no messages, or no user message */
    CHAT_ENOSPC = -3,    /* out buffer too small; *out_len has the size needed */
};

/* Render messages (+ the generation prompt when add_generation_prompt) into out as text to
 * be tokenized with parse_special = 1 and add_bos = 0 (the text starts with "<bos>").
 * *out_len receives the full length. err names the offending message index.
 * out is NUL-terminated when cap > *out_len; out may be NULL with cap 0 to query the size.
 * A system message is allowed only first; CHAT_ROLE_TOOL is rejected (CHAT_EROLE) because
 * tool calling is not supported. Gemma 4's generation prompt is "<|turn>model\n" followed by
 * the empty thought channel "<|channel>thought\n<channel|>" (thinking disabled), as the HF
 * template renders it. */
int chat_render(enum chat_style style, const struct chat_msg *msgs, int n_msgs,
                int add_generation_prompt, char *out, size_t cap, size_t *out_len, char *err,
                size_t errlen);

/* chat_render that also reports where message content landed in out: *n_spans spans
 * (sorted, disjoint; at most n_msgs + 1; only the first cap_spans are written). Tokenize the
 * result with tok_encode_spans(…, spans, n) so that content can never write control
 * tokens: only the format's own text does. */
int chat_render_spans(enum chat_style style, const struct chat_msg *msgs, int n_msgs,
                      int add_generation_prompt, char *out, size_t cap, size_t *out_len,
                      struct tok_span *spans, int cap_spans, int *n_spans, char *err,
                      size_t errlen);

#endif
