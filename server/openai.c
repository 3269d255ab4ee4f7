/*
 * openai — request validation. Each field is looked up once, JSON null counts as absent, and
 * a wrong type, a value out of range or an unsupported feature becomes a 400 naming the
 * field. Numbers must be JSON numbers ("10" is refused), integers must be JSON integers.
 */
#include "server/openai.h"
#include "server/openai_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat.h"
#include "engine/tokenizer.h"

int oai_fail(struct oai_error *e, int status, const char *param, const char *code,
                    const char *fmt, ...) {
    e->status = status;
    e->type = status == 404 ? "invalid_request_error" : "invalid_request_error";
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

/* The field, or NULL when absent or null. */
static json_t *oai_get(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_null(v) ? NULL : v;
}

static int oai_num(json_t *o, const char *k, double lo, double hi, int lo_open, double *out,
                   struct oai_error *e) {
    json_t *v = oai_get(o, k);
    if (!v) return 0;
    if (!json_is_number(v)) return oai_fail(e, 400, k, NULL, "'%s' must be a number", k);
    double d = json_number_value(v);
    if (!isfinite(d) || d > hi || (lo_open ? d <= lo : d < lo))
        return oai_fail(e, 400, k, NULL, "'%s' must be in %s%g, %g]", k, lo_open ? "(" : "[",
                        lo, hi);
    *out = d;
    return 0;
}

static int oai_int(json_t *o, const char *k, long long lo, long long hi, long long *out,
                   struct oai_error *e) {
    json_t *v = oai_get(o, k);
    if (!v) return 0;
    if (!json_is_integer(v)) return oai_fail(e, 400, k, NULL, "'%s' must be an integer", k);
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return oai_fail(e, 400, k, NULL, "'%s' must be an integer in [%lld, %lld]", k, lo, hi);
    *out = x;
    return 0;
}

static int oai_bool(json_t *o, const char *k, int *out, struct oai_error *e) {
    json_t *v = oai_get(o, k);
    if (!v) return 0;
    if (!json_is_boolean(v)) return oai_fail(e, 400, k, NULL, "'%s' must be a boolean", k);
    *out = json_is_true(v);
    return 0;
}

/* Fields we do not implement: refuse them by name rather than ignore them silently. */
static int oai_unsupported(json_t *root, int is_chat, struct oai_error *e) {
    static const char *const never[] = {"tools", "functions", "function_call", "audio",
                                        "prediction"};
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (oai_get(root, never[i]))
            return oai_fail(e, 400, never[i], NULL, "'%s' is not supported", never[i]);
    json_t *tc = oai_get(root, "tool_choice");
    if (tc && !(json_is_string(tc) && !strcmp(json_string_value(tc), "none")))
        return oai_fail(e, 400, "tool_choice", NULL, "'tool_choice' is not supported");
    json_t *rf = oai_get(root, "response_format");
    if (rf) {
        json_t *t = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
        if (!json_is_string(t))
            return oai_fail(e, 400, "response_format", NULL,
                            "'response_format' must be an object with a string 'type'");
        if (strcmp(json_string_value(t), "text") != 0)
            return oai_fail(e, 400, "response_format", NULL,
                            "response_format type '%.32s' is not supported (only 'text')",
                            json_string_value(t));
    }
    json_t *mod = oai_get(root, "modalities");
    if (mod) {
        if (!json_is_array(mod))
            return oai_fail(e, 400, "modalities", NULL, "'modalities' must be an array");
        size_t i;
        json_t *x;
        json_array_foreach(mod, i, x) {
            if (!json_is_string(x) || strcmp(json_string_value(x), "text") != 0)
                return oai_fail(e, 400, "modalities", NULL, "only the 'text' modality is supported");
        }
    }
    if (!is_chat) {
        json_t *suf = oai_get(root, "suffix");
        if (suf && !(json_is_string(suf) && json_string_length(suf) == 0))
            return oai_fail(e, 400, "suffix", NULL, "'suffix' is not supported");
    }
    return 0;
}

static int oai_stop(json_t *root, struct oai_params *p, struct oai_error *e) {
    json_t *v = oai_get(root, "stop");
    if (!v) return 0;
    size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : (size_t)-1;
    if (n == (size_t)-1)
        return oai_fail(e, 400, "stop", NULL, "'stop' must be a string or an array of strings");
    if (n > OAI_MAX_STOP)
        return oai_fail(e, 400, "stop", NULL, "at most %d stop strings", OAI_MAX_STOP);
    p->stop = calloc(n ? n : 1, sizeof *p->stop);
    if (!p->stop) return oai_fail(e, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_string(v) ? v : json_array_get(v, i);
        if (!json_is_string(s))
            return oai_fail(e, 400, "stop", NULL, "'stop' must be a string or an array of strings");
        size_t l = json_string_length(s);
        if (l == 0 || l > OAI_MAX_STOP_LEN)
            return oai_fail(e, 400, "stop", NULL, "each stop string must have 1 to %d bytes",
                            OAI_MAX_STOP_LEN);
        p->stop[p->n_stop] = strndup(json_string_value(s), l);
        if (!p->stop[p->n_stop]) return oai_fail(e, 500, NULL, NULL, "out of memory");
        p->n_stop++;
    }
    return 0;
}

static int oai_bias(json_t *root, int n_vocab, struct oai_params *p, struct oai_error *e) {
    json_t *v = oai_get(root, "logit_bias");
    if (!v) return 0;
    if (!json_is_object(v))
        return oai_fail(e, 400, "logit_bias", NULL, "'logit_bias' must be an object");
    size_t n = json_object_size(v);
    if (n > OAI_MAX_BIAS)
        return oai_fail(e, 400, "logit_bias", NULL, "at most %d logit_bias entries", OAI_MAX_BIAS);
    p->bias = calloc(n ? n : 1, sizeof *p->bias);
    if (!p->bias) return oai_fail(e, 500, NULL, NULL, "out of memory");
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        char *end;
        long id = strtol(key, &end, 10);
        if (!*key || *end || key[0] == '-' || key[0] == '+' || key[0] == ' ' || id < 0 ||
            id >= n_vocab)
            return oai_fail(e, 400, "logit_bias", NULL,
                            "logit_bias key '%.32s' is not a token id in [0, %d)", key, n_vocab);
        if (!json_is_number(val) || !isfinite(json_number_value(val)) ||
            fabs(json_number_value(val)) > 100)
            return oai_fail(e, 400, "logit_bias", NULL,
                            "logit_bias values must be numbers in [-100, 100]");
        p->bias[p->sp.n_logit_bias].token = (int32_t)id;
        p->bias[p->sp.n_logit_bias].bias = (float)json_number_value(val);
        p->sp.n_logit_bias++;
    }
    p->sp.logit_bias = p->bias;
    return 0;
}

static int oai_sampling(json_t *root, const struct oai_limits *lim, struct oai_params *p,
                        struct oai_error *e) {
    double d;
    long long x;
    p->sp.temperature = 1.0f;
    p->sp.top_p = 1.0f;
    p->sp.repetition_penalty = 1.0f;
    d = 1;
    if (oai_num(root, "temperature", 0, 2, 0, &d, e)) return -1;
    p->sp.temperature = (float)d;
    d = 1;
    if (oai_num(root, "top_p", 0, 1, 1, &d, e)) return -1;
    p->sp.top_p = (float)d;
    d = 0;
    if (oai_num(root, "min_p", 0, 1, 0, &d, e)) return -1;
    p->sp.min_p = (float)d;
    x = 0;
    if (oai_int(root, "top_k", 0, 1 << 20, &x, e)) return -1;
    p->sp.top_k = (int)x;
    d = 0;
    if (oai_num(root, "presence_penalty", -2, 2, 0, &d, e)) return -1;
    p->sp.presence_penalty = (float)d;
    d = 0;
    if (oai_num(root, "frequency_penalty", -2, 2, 0, &d, e)) return -1;
    p->sp.frequency_penalty = (float)d;
    d = 1;
    if (oai_num(root, "repetition_penalty", 0, 10, 1, &d, e)) return -1;
    p->sp.repetition_penalty = (float)d;
    json_t *seed = oai_get(root, "seed");
    if (seed) {
        if (!json_is_integer(seed)) return oai_fail(e, 400, "seed", NULL, "'seed' must be an integer");
        p->sp.seed = (uint64_t)json_integer_value(seed);
        p->sp.has_seed = 1;
    }
    if (oai_bias(root, tok_n_vocab(lim->vocab), p, e)) return -1;
    if (oai_stop(root, p, e)) return -1;
    if (oai_bool(root, "ignore_eos", &p->ignore_eos, e)) return -1;
    int spec = 1;
    if (oai_bool(root, "speculative", &spec, e)) return -1;
    p->no_speculative = !spec;
    return 0;
}

/* Message content: a string, or an array of {"type":"text","text":…} parts joined by "\n". */
static int oai_content(json_t *c, int i, char **out, size_t *len, struct oai_error *e) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (!c) {
        *out = strdup("");
        *len = 0;
        return *out ? 0 : oai_fail(e, 500, NULL, NULL, "out of memory");
    }
    if (json_is_string(c)) {
        *len = json_string_length(c);
        *out = malloc(*len + 1);
        if (!*out) return oai_fail(e, 500, NULL, NULL, "out of memory");
        memcpy(*out, json_string_value(c), *len + 1);
        return 0;
    }
    if (!json_is_array(c))
        return oai_fail(e, 400, param, NULL, "'%s' must be a string or an array of text parts",
                        param);
    size_t total = 0, j;
    json_t *part;
    json_array_foreach(c, j, part) {
        json_t *t = json_is_object(part) ? json_object_get(part, "type") : NULL;
        json_t *tx = json_is_object(part) ? json_object_get(part, "text") : NULL;
        if (!json_is_string(t) || strcmp(json_string_value(t), "text") != 0)
            return oai_fail(e, 400, param, NULL,
                            "%s[%zu]: only parts of type 'text' are supported", param, j);
        if (!json_is_string(tx))
            return oai_fail(e, 400, param, NULL, "%s[%zu].text must be a string", param, j);
        total += json_string_length(tx) + 1;
    }
    *out = malloc(total + 1);
    if (!*out) return oai_fail(e, 500, NULL, NULL, "out of memory");
    size_t n = 0;
    json_array_foreach(c, j, part) {
        json_t *tx = json_object_get(part, "text");
        if (j) (*out)[n++] = '\n';
        memcpy(*out + n, json_string_value(tx), json_string_length(tx));
        n += json_string_length(tx);
    }
    (*out)[n] = 0;
    *len = n;
    return 0;
}

static int oai_alloc_prompts(struct oai_params *p, int n, struct oai_error *e) {
    p->n_prompts = n;
    p->prompt = calloc((size_t)n, sizeof *p->prompt);
    p->prompt_len = calloc((size_t)n, sizeof *p->prompt_len);
    p->max_tokens = calloc((size_t)n, sizeof *p->max_tokens);
    p->prompt_text = calloc((size_t)n, sizeof *p->prompt_text);
    p->prompt_text_len = calloc((size_t)n, sizeof *p->prompt_text_len);
    if (!p->prompt || !p->prompt_len || !p->max_tokens || !p->prompt_text || !p->prompt_text_len)
        return oai_fail(e, 500, NULL, NULL, "out of memory");
    return 0;
}

static int oai_messages(json_t *root, const struct oai_limits *lim, struct oai_params *p,
                        struct oai_error *e) {
    json_t *msgs = oai_get(root, "messages");
    if (!msgs) return oai_fail(e, 400, "messages", NULL, "'messages' is required");
    if (!json_is_array(msgs)) return oai_fail(e, 400, "messages", NULL, "'messages' must be an array");
    size_t n = json_array_size(msgs);
    if (n == 0) return oai_fail(e, 400, "messages", NULL, "'messages' must not be empty");
    if (n > 100000) return oai_fail(e, 400, "messages", NULL, "too many messages");
    struct chat_msg *cm = calloc(n, sizeof *cm);
    char **texts = calloc(n, sizeof *texts);
    char *rendered = NULL;
    struct tok_span *spans = NULL;
    int rc = -1;
    if (!cm || !texts) {
        oai_fail(e, 500, NULL, NULL, "out of memory");
        goto fail_msgs;
    }
    size_t total = 256;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(msgs, i);
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) {
            oai_fail(e, 400, param, NULL, "'%s' must be an object", param);
            goto fail_msgs;
        }
        json_t *role = json_object_get(m, "role");
        snprintf(param, sizeof param, "messages[%zu].role", i);
        const char *r = json_is_string(role) ? json_string_value(role) : NULL;
        if (!r) {
            oai_fail(e, 400, param, NULL, "'%s' must be a string", param);
            goto fail_msgs;
        }
        if (!strcmp(r, "system") || !strcmp(r, "developer")) cm[i].role = CHAT_ROLE_SYSTEM;
        else if (!strcmp(r, "user")) cm[i].role = CHAT_ROLE_USER;
        else if (!strcmp(r, "assistant")) cm[i].role = CHAT_ROLE_ASSISTANT;
        else if (!strcmp(r, "tool")) cm[i].role = CHAT_ROLE_TOOL;
        else {
            oai_fail(e, 400, param, NULL, "unknown role '%.32s' in %s", r, param);
            goto fail_msgs;
        }
        if (oai_get(m, "tool_calls") || oai_get(m, "function_call")) {
            snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
            oai_fail(e, 400, param, NULL, "tool calls are not supported");
            goto fail_msgs;
        }
        json_t *c = oai_get(m, "content");
        if (!c && cm[i].role != CHAT_ROLE_ASSISTANT) {
            snprintf(param, sizeof param, "messages[%zu].content", i);
            oai_fail(e, 400, param, NULL, "'%s' is required", param);
            goto fail_msgs;
        }
        if (oai_content(c, (int)i, &texts[i], &cm[i].content_len, e)) goto fail_msgs;
        cm[i].content = texts[i];
        total += cm[i].content_len + 64;
    }
    if (oai_merge_turns(cm, texts, &n, lim->chat_style, e)) goto fail_msgs;
    size_t out_len = 0;
    char cerr[256] = "";
    int n_spans = 0;
    spans = malloc((n + 1) * sizeof *spans);
    if (!spans) {
        oai_fail(e, 500, NULL, NULL, "out of memory");
        goto fail_msgs;
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        rendered = malloc(total);
        if (!rendered) {
            oai_fail(e, 500, NULL, NULL, "out of memory");
            goto fail_msgs;
        }
        int r = chat_render_spans((enum chat_style)lim->chat_style, cm, (int)n, 1, rendered,
                                  total, &out_len, spans, (int)n + 1, &n_spans, cerr,
                                  sizeof cerr);
        if (r == CHAT_OK) break;
        free(rendered);
        rendered = NULL;
        if (r == CHAT_ENOSPC && attempt == 0) {
            total = out_len + 1;
            continue;
        }
        oai_fail(e, 400, "messages", NULL, "invalid messages: %s",
                 cerr[0] ? cerr : "roles must alternate user/assistant");
        goto fail_msgs;
    }
    if (n_spans > (int)n + 1) n_spans = (int)n + 1; /* cannot happen: chat.h's bound */
    if (oai_expand_tokens(lim->vocab, &rendered, &out_len, &spans, &n_spans)) {
        oai_fail(e, 500, NULL, NULL, "out of memory");
        goto fail_msgs;
    }
    if (oai_alloc_prompts(p, 1, e)) goto fail_msgs;
    if (oai_encode(lim, rendered, out_len, 0, spans, n_spans, &p->prompt[0], &p->prompt_len[0],
                   "messages", e))
        goto fail_msgs;
    rc = 0;
fail_msgs:
    free(spans);
    free(rendered);
    if (texts)
        for (size_t i = 0; i < n; i++) free(texts[i]);
    free(texts);
    free(cm);
    return rc;
}

static int oai_token_array(json_t *a, int n_vocab, int32_t **ids, int *n, const char *param,
                           struct oai_error *e) {
    size_t len = json_array_size(a);
    if (len == 0) return oai_fail(e, 400, param, NULL, "'%s' must not be empty", param);
    if (len > (1u << 24)) return oai_fail(e, 400, param, NULL, "'%s' is too long", param);
    *ids = malloc(len * sizeof **ids);
    if (!*ids) return oai_fail(e, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; i < len; i++) {
        json_t *t = json_array_get(a, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= n_vocab)
            return oai_fail(e, 400, param, NULL, "'%s' holds token ids in [0, %d)", param, n_vocab);
        (*ids)[i] = (int32_t)json_integer_value(t);
    }
    *n = (int)len;
    return 0;
}

static int oai_prompts(json_t *root, const struct oai_limits *lim, struct oai_params *p,
                       struct oai_error *e) {
    json_t *pr = oai_get(root, "prompt");
    int nv = tok_n_vocab(lim->vocab);
    if (!pr) return oai_fail(e, 400, "prompt", NULL, "'prompt' is required");
    if (json_is_string(pr)) {
        if (oai_alloc_prompts(p, 1, e)) return -1;
        return oai_encode(lim, json_string_value(pr), json_string_length(pr), 1, NULL, 0,
                          &p->prompt[0], &p->prompt_len[0], "prompt", e);
    }
    if (!json_is_array(pr) || json_array_size(pr) == 0)
        return oai_fail(e, 400, "prompt", NULL,
                        "'prompt' must be a string, an array of strings or token ids");
    json_t *first = json_array_get(pr, 0);
    if (json_is_integer(first)) {
        if (oai_alloc_prompts(p, 1, e)) return -1;
        return oai_token_array(pr, nv, &p->prompt[0], &p->prompt_len[0], "prompt", e);
    }
    size_t n = json_array_size(pr);
    if (n > (size_t)lim->max_n)
        return oai_fail(e, 400, "prompt", NULL, "at most %d prompts per request", lim->max_n);
    if (oai_alloc_prompts(p, (int)n, e)) return -1;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(pr, i);
        if (json_is_string(x)) {
            if (oai_encode(lim, json_string_value(x), json_string_length(x), 1, NULL, 0,
                           &p->prompt[i], &p->prompt_len[i], "prompt", e))
                return -1;
        } else if (json_is_array(x)) {
            if (oai_token_array(x, nv, &p->prompt[i], &p->prompt_len[i], "prompt", e)) return -1;
        } else {
            return oai_fail(e, 400, "prompt", NULL,
                            "'prompt' must be a string, an array of strings or token ids");
        }
    }
    return 0;
}

/* Echo text of each prompt: the string as given, or the decoded token ids. */
static int oai_echo_text(json_t *root, const struct oai_limits *lim, struct oai_params *p,
                         struct oai_error *e) {
    json_t *pr = oai_get(root, "prompt");
    for (int i = 0; i < p->n_prompts; i++) {
        json_t *x = json_is_string(pr) ? pr : json_array_get(pr, (size_t)i);
        if (json_is_array(pr) && json_is_integer(json_array_get(pr, 0))) x = pr;
        if (json_is_string(x)) {
            p->prompt_text_len[i] = json_string_length(x);
            p->prompt_text[i] = strndup(json_string_value(x), p->prompt_text_len[i]);
        } else {
            char probe[1];
            int n = tok_decode(lim->vocab, p->prompt[i], p->prompt_len[i], 0, probe, 0);
            if (n < 0) return oai_fail(e, 400, "prompt", NULL, "'prompt' cannot be decoded");
            p->prompt_text[i] = malloc((size_t)n + 1);
            if (p->prompt_text[i])
                tok_decode(lim->vocab, p->prompt[i], p->prompt_len[i], 0, p->prompt_text[i], n);
            p->prompt_text_len[i] = (size_t)n;
        }
        if (!p->prompt_text[i]) return oai_fail(e, 500, NULL, NULL, "out of memory");
    }
    return 0;
}

int oai_parse(json_t *root, int is_chat, const struct oai_limits *lim, struct oai_params **out,
              struct oai_error *e) {
    *out = NULL;
    memset(e, 0, sizeof *e);
    if (!json_is_object(root))
        return oai_fail(e, 400, NULL, NULL, "the request body must be a JSON object");
    struct oai_params *p = calloc(1, sizeof *p);
    if (!p) return oai_fail(e, 500, NULL, NULL, "out of memory");
    p->is_chat = is_chat;
    long long x;
    json_t *model = oai_get(root, "model");
    if (model && !json_is_string(model)) {
        oai_fail(e, 400, "model", NULL, "'model' must be a string");
        goto fail;
    }
    p->model = lim->model_id;
    if (model && strcmp(json_string_value(model), lim->model_id) != 0 &&
        (!lim->model_name || strcmp(json_string_value(model), lim->model_name) != 0)) {
        int i = 0;
        while (i < lim->n_aliases && strcmp(json_string_value(model), lim->aliases[i]) != 0) i++;
        if (i < lim->n_aliases) {
            p->model = lim->aliases[i];
        } else if (!lim->accept_any_model) {
            oai_fail(e, 404, "model", "model_not_found", "the model '%.64s' does not exist",
                     json_string_value(model));
            goto fail;
        }
    }
    if (oai_unsupported(root, is_chat, e)) goto fail;
    if (oai_bool(root, "stream", &p->stream, e)) goto fail;
    json_t *so = oai_get(root, "stream_options");
    if (so) {
        if (!json_is_object(so)) {
            oai_fail(e, 400, "stream_options", NULL, "'stream_options' must be an object");
            goto fail;
        }
        if (!p->stream) {
            oai_fail(e, 400, "stream_options", NULL, "'stream_options' needs 'stream': true");
            goto fail;
        }
        json_t *iu = oai_get(so, "include_usage");
        if (iu && !json_is_boolean(iu)) {
            oai_fail(e, 400, "stream_options.include_usage", NULL,
                     "'stream_options.include_usage' must be a boolean");
            goto fail;
        }
        p->include_usage = iu && json_is_true(iu);
    }
    x = 1;
    if (oai_int(root, "n", 1, lim->max_n, &x, e)) goto fail;
    p->n = (int)x;
    json_t *bo = oai_get(root, "best_of");
    if (!is_chat && bo && (!json_is_integer(bo) || json_integer_value(bo) != p->n)) {
        oai_fail(e, 400, "best_of", NULL, "'best_of' other than n is not supported");
        goto fail;
    }
    /* max_tokens 0 scores the prompt without generating: completions with echo only. */
    int echo = 0;
    if (!is_chat && oai_bool(root, "echo", &echo, e)) goto fail;
    long long max_tok = -1;
    const char *max_name = oai_get(root, "max_completion_tokens") && is_chat
                               ? "max_completion_tokens"
                               : "max_tokens";
    if (oai_int(root, max_name, echo ? 0 : 1, lim->max_tokens, &max_tok, e)) goto fail;
    if (is_chat) {
        if (oai_bool(root, "logprobs", &p->logprobs, e)) goto fail;
        x = -1;
        if (oai_int(root, "top_logprobs", 0, OAI_MAX_TOP_LOGPROBS, &x, e)) goto fail;
        if (x >= 0 && !p->logprobs) {
            oai_fail(e, 400, "top_logprobs", NULL, "'top_logprobs' needs 'logprobs': true");
            goto fail;
        }
        p->top_logprobs = x < 0 ? 0 : (int)x;
    } else {
        x = -1;
        if (oai_int(root, "logprobs", 0, OAI_MAX_TOP_LOGPROBS, &x, e)) goto fail;
        p->logprobs = x >= 0;
        p->top_logprobs = x < 0 ? 0 : (int)x;
        p->echo = echo;
        p->prompt_logprobs = echo && p->logprobs;
    }
    json_t *user = oai_get(root, "user");
    if (user && !json_is_string(user)) {
        oai_fail(e, 400, "user", NULL, "'user' must be a string");
        goto fail;
    }
    json_t *sid = oai_get(root, "session_id");
    if (sid) {
        if (!json_is_string(sid) || json_string_length(sid) == 0 || json_string_length(sid) > 128) {
            oai_fail(e, 400, "session_id", NULL, "'session_id' must be a string of 1 to 128 bytes");
            goto fail;
        }
        p->session_id = strdup(json_string_value(sid));
    }
    if (oai_sampling(root, lim, p, e)) goto fail;
    if (is_chat ? oai_messages(root, lim, p, e) : oai_prompts(root, lim, p, e)) goto fail;
    if (p->n * p->n_prompts > lim->max_n) {
        oai_fail(e, 400, "n", NULL, "n times the number of prompts must be at most %d", lim->max_n);
        goto fail;
    }
    const char *pparam = is_chat ? "messages" : "prompt";
    for (int i = 0; i < p->n_prompts; i++) {
        int np = p->prompt_len[i];
        if (max_tok >= 0) {
            if ((long long)np + max_tok > lim->n_ctx) {
                oai_fail(e, 400, pparam, "context_length_exceeded",
                         "this model's maximum context length is %d tokens; the request has %d "
                         "prompt tokens and asks for %lld more",
                         lim->n_ctx, np, max_tok);
                goto fail;
            }
            p->max_tokens[i] = (int)max_tok;
        } else {
            if (np >= lim->n_ctx) {
                oai_fail(e, 400, pparam, "context_length_exceeded",
                         "this model's maximum context length is %d tokens; the prompt has %d",
                         lim->n_ctx, np);
                goto fail;
            }
            int room = lim->n_ctx - np;
            p->max_tokens[i] = room < lim->max_tokens ? room : lim->max_tokens;
        }
    }
    if (p->echo && oai_echo_text(root, lim, p, e)) goto fail;
    *out = p;
    return 0;
fail:
    oai_params_free(p);
    return -1;
}

void oai_params_free(struct oai_params *p) {
    if (!p) return;
    if (p->tools && p->tools_free) p->tools_free(p->tools);
    free(p->bias);
    for (int i = 0; i < p->n_stop; i++) free(p->stop[i]);
    free(p->stop);
    free(p->session_id);
    for (int i = 0; i < p->n_prompts; i++) {
        if (p->prompt) free(p->prompt[i]);
        if (p->prompt_text) free(p->prompt_text[i]);
    }
    free(p->prompt);
    free(p->prompt_len);
    free(p->max_tokens);
    free(p->prompt_text);
    free(p->prompt_text_len);
    free(p);
}

/* Length of a valid UTF-8 sequence at s (1..4), or 0 when invalid. */
static int oai_utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? (c <= 0xEF ? 3 : 0) : c >= 0xC2 ? 2 : 0;
    if (!len || (size_t)len > n) return 0;
    for (int i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (len == 3 && ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] >= 0xA0))) return 0;
    if (len == 4 && ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] >= 0x90))) return 0;
    return len;
}

json_t *oai_string(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    int clean = 1;
    while (i < len) {
        int l = oai_utf8_len(u + i, len - i);
        if (!l || u[i] == 0) {
            clean = 0;
            break;
        }
        i += (size_t)l;
    }
    if (clean) return json_stringn(s, len);
    char *b = malloc(len * 3 + 1);
    if (!b) return NULL;
    size_t o = 0;
    for (i = 0; i < len;) {
        int l = oai_utf8_len(u + i, len - i);
        if (!l || u[i] == 0) {
            memcpy(b + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        } else {
            memcpy(b + o, u + i, (size_t)l);
            o += (size_t)l;
            i += (size_t)l;
        }
    }
    json_t *r = json_stringn(b, o);
    free(b);
    return r;
}

static json_t *oai_tok_obj(const struct tok_vocab *v, int32_t token, float logprob) {
    char buf[256];
    int n = tok_token_to_bytes(v, token, 0, buf, (int)sizeof buf);
    if (n < 0) n = 0;
    if (n > (int)sizeof buf) n = (int)sizeof buf;
    json_t *bytes = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(bytes, json_integer((unsigned char)buf[i]));
    return json_pack("{s:o,s:f,s:o}", "token", oai_string(buf, (size_t)n), "logprob",
                     (double)logprob, "bytes", bytes);
}

json_t *oai_lp_entry(const struct tok_vocab *v, int32_t token, float logprob,
                     const struct sched_top *top, int n_top, int with_top) {
    json_t *o = oai_tok_obj(v, token, logprob);
    if (!o) return NULL;
    json_t *tops = json_array();
    for (int i = 0; with_top && i < n_top; i++)
        json_array_append_new(tops, oai_tok_obj(v, top[i].token, top[i].logprob));
    json_object_set_new(o, "top_logprobs", tops);
    return o;
}

const char *oai_finish_name(enum sched_finish f) {
    switch (f) {
    case SCHED_FINISH_STOP: return "stop";
    case SCHED_FINISH_LENGTH: return "length";
    default: return "stop";
    }
}

/* ---- response shapes --------------------------------------------------------------------- */

json_t *oai_error_body(const char *msg, const char *type, const char *param, const char *code) {
    json_t *err = json_pack("{s:o,s:s,s:o,s:o}", "message", oai_string(msg, strlen(msg)), "type",
                            type, "param", param && *param ? json_string(param) : json_null(),
                            "code", code ? json_string(code) : json_null());
    return json_pack("{s:o}", "error", err);
}

json_t *oai_usage(int prompt, int completion, int cached) {
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", prompt, "completion_tokens",
                     completion, "total_tokens", prompt + completion, "prompt_tokens_details",
                     "cached_tokens", cached);
}

json_t *oai_chunk(const struct oai_resp *r) {
    json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:s}", "id", r->id, "object",
                          r->is_chat ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)r->created, "model", r->model, "system_fingerprint",
                          "gemmad");
    if (r->include_usage) json_object_set_new(j, "usage", json_null());
    return j;
}

json_t *oai_chunk_choice(const struct oai_resp *r, int index, const char *role, const char *text,
                         size_t len, json_t *lp, const char *finish) {
    json_t *j = oai_chunk(r);
    json_t *ch;
    if (r->is_chat) {
        json_t *delta = json_object();
        if (role) json_object_set_new(delta, "role", json_string(role));
        if (text) json_object_set_new(delta, "content", oai_string(text, len));
        ch = json_pack("{s:i,s:o}", "index", index, "delta", delta);
    } else {
        ch = json_pack("{s:i,s:o}", "index", index, "text", oai_string(text ? text : "", len));
    }
    json_object_set_new(ch, "logprobs", lp ? lp : json_null());
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(j, "choices", json_pack("[o]", ch));
    return j;
}

json_t *oai_legacy_lp_new(void) {
    return json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs", "top_logprobs",
                     "text_offset");
}

void oai_legacy_lp_add(const struct tok_vocab *v, json_t *obj, int32_t token, float logprob,
                       const struct sched_top *top, int n_top, size_t offset) {
    char buf[256];
    int n = tok_token_to_bytes(v, token, 0, buf, (int)sizeof buf);
    n = n < 0 ? 0 : n > (int)sizeof buf ? (int)sizeof buf : n;
    json_array_append_new(json_object_get(obj, "tokens"), oai_string(buf, (size_t)n));
    json_array_append_new(json_object_get(obj, "token_logprobs"), json_real(logprob));
    json_t *tops = json_object();
    for (int i = 0; i < n_top; i++) {
        int m = tok_token_to_bytes(v, top[i].token, 0, buf, (int)sizeof buf - 1);
        m = m < 0 ? 0 : m > (int)sizeof buf - 1 ? (int)sizeof buf - 1 : m;
        json_t *k = oai_string(buf, (size_t)m);
        if (k) json_object_set_new(tops, json_string_value(k), json_real(top[i].logprob));
        json_decref(k);
    }
    json_array_append_new(json_object_get(obj, "top_logprobs"), tops);
    json_array_append_new(json_object_get(obj, "text_offset"), json_integer((json_int_t)offset));
}

json_t *oai_chat_lp(json_t *content) {
    return json_pack("{s:o,s:n}", "content", content ? content : json_array(), "refusal");
}

json_t *oai_choice(int is_chat, int index, const char *prefix, size_t prefix_len,
                   const char *text, size_t len, json_t *lp, const char *finish) {
    if (is_chat)
        return json_pack("{s:i,s:{s:s,s:o,s:n},s:o,s:s}", "index", index, "message", "role",
                         "assistant", "content", oai_string(text ? text : "", len), "refusal",
                         "logprobs", lp, "finish_reason", finish);
    json_t *t;
    if (prefix) {
        char *b = malloc(prefix_len + len + 1);
        if (b) {
            memcpy(b, prefix, prefix_len);
            memcpy(b + prefix_len, text ? text : "", len);
        }
        t = b ? oai_string(b, prefix_len + len) : json_string("");
        free(b);
    } else {
        t = oai_string(text ? text : "", len);
    }
    return json_pack("{s:i,s:o,s:o,s:s}", "index", index, "text", t, "logprobs", lp,
                     "finish_reason", finish);
}

json_t *oai_response(const struct oai_resp *r, json_t *choices, json_t *usage) {
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:o,s:o}", "id", r->id, "object",
                     r->is_chat ? "chat.completion" : "text_completion", "created",
                     (json_int_t)r->created, "model", r->model, "system_fingerprint", "gemmad",
                     "choices", choices, "usage", usage);
}

json_t *oai_model_list(const char *const *ids, int n, int64_t created, int max_model_len) {
    json_t *data = json_array();
    for (int i = 0; i < n; i++) {
        json_t *m = json_pack("{s:s,s:s,s:I,s:s}", "id", ids[i], "object", "model", "created",
                              (json_int_t)created, "owned_by", "gemmad");
        if (max_model_len > 0)
            json_object_set_new(m, "max_model_len", json_integer(max_model_len));
        json_array_append_new(data, m);
    }
    return json_pack("{s:s,s:o}", "object", "list", "data", data);
}
