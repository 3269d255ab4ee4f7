/*
 * api_common — see api_common.h.
 */
#include "server/api_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

json_t *api_field(json_t *obj, const char *name) {
    json_t *v = json_object_get(obj, name);
    return v && !json_is_null(v) ? v : NULL;
}

int api_int_field(json_t *obj, const char *name, long long lo, long long hi, long long *out,
                  struct oai_error *e) {
    json_t *v = api_field(obj, name);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return oai_fail(e, 400, name, NULL, "'%s' must be an integer in [%lld, %lld]", name, lo,
                        hi);
    *out = json_integer_value(v);
    return 0;
}

int api_bool_field(json_t *obj, const char *name, int *out, struct oai_error *e) {
    json_t *v = api_field(obj, name);
    if (!v) return 0;
    if (!json_is_boolean(v)) return oai_fail(e, 400, name, NULL, "'%s' must be a boolean", name);
    *out = json_is_true(v);
    return 0;
}

int api_str_field(json_t *obj, const char *name, size_t max_len, const char **out,
                  struct oai_error *e) {
    json_t *v = api_field(obj, name);
    if (!v) return 0;
    if (!json_is_string(v) || json_string_length(v) > max_len)
        return oai_fail(e, 400, name, NULL, "'%s' must be a string of at most %zu bytes", name,
                        max_len);
    *out = json_string_value(v);
    return 0;
}

static int api_type_in(const char *t, const char *const *types) {
    for (; *types; types++)
        if (!strcmp(t, *types)) return 1;
    return 0;
}

json_t *api_text_content(json_t *c, const char *const *types, const char *param,
                         struct oai_error *e) {
    if (json_is_string(c)) return json_incref(c);
    if (!json_is_array(c)) {
        oai_fail(e, 400, param, NULL, "'%s' must be a string or an array of text blocks", param);
        return NULL;
    }
    size_t total = 0, i;
    json_t *part;
    json_array_foreach(c, i, part) {
        json_t *t = json_is_object(part) ? json_object_get(part, "type") : NULL;
        json_t *tx = json_is_object(part) ? json_object_get(part, "text") : NULL;
        if (!json_is_string(t)) {
            oai_fail(e, 400, param, NULL, "%s[%zu] must be an object with a 'type'", param, i);
            return NULL;
        }
        if (!api_type_in(json_string_value(t), types)) {
            oai_fail(e, 400, param, NULL, "%s[%zu]: blocks of type '%.40s' are not supported",
                     param, i, json_string_value(t));
            return NULL;
        }
        if (!json_is_string(tx)) {
            oai_fail(e, 400, param, NULL, "%s[%zu].text must be a string", param, i);
            return NULL;
        }
        total += json_string_length(tx);
    }
    char *buf = malloc(total + 1);
    if (!buf) {
        oai_fail(e, 500, NULL, NULL, "out of memory");
        return NULL;
    }
    size_t n = 0;
    json_array_foreach(c, i, part) {
        json_t *tx = json_object_get(part, "text");
        memcpy(buf + n, json_string_value(tx), json_string_length(tx));
        n += json_string_length(tx);
    }
    json_t *s = json_stringn_nocheck(buf, n);
    free(buf);
    if (!s) oai_fail(e, 500, NULL, NULL, "out of memory");
    return s;
}

char *api_sse_event(const char *name, json_t *j, size_t *len) {
    char *data = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!data) return NULL;
    size_t nl = strlen(name), dl = strlen(data);
    char *out = malloc(nl + dl + 18);
    if (out) *len = (size_t)sprintf(out, "event: %s\ndata: %s\n\n", name, data);
    free(data);
    return out;
}

void api_sse_append(char **buf, size_t *len, const char *name, json_t *j) {
    size_t n = 0;
    char *ev = api_sse_event(name, j, &n);
    char *b = ev ? realloc(*buf, *len + n + 1) : NULL;
    if (b) {
        memcpy(b + *len, ev, n + 1);
        *buf = b;
        *len += n;
    }
    free(ev);
}

void api_new_id(const char *prefix, char *out, size_t cap) {
    unsigned char r[12];
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        /* Only uniqueness matters here, not secrecy: fall back to the clock and a counter. */
        static unsigned long long ctr;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned long long x =
            (unsigned long long)ts.tv_nsec ^ ((unsigned long long)ts.tv_sec << 30);
        x += __atomic_add_fetch(&ctr, 1, __ATOMIC_RELAXED) * 0x9e3779b97f4a7c15ull;
        for (size_t i = 0; i < sizeof r; i++)
            r[i] = (unsigned char)(x >> (8 * (i % 8)) ^ i * 31);
    }
    int n = snprintf(out, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof r && n + 2 < (int)cap; i++)
        n += snprintf(out + n, cap - (size_t)n, "%02x", r[i]);
}
