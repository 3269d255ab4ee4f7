/*
 * jschema_value — constant JSON values against a schema: a validator that answers yes, no or
 * "cannot tell", and the grammar of a schema whose values form a finite set (an enum or a
 * const, here or in an allOf part, a $ref target, or every anyOf/oneOf branch): exactly the
 * candidates the validator finds valid against the whole schema, so keywords the generator
 * refuses (not, if, uniqueItems, contains, propertyNames, ...) are exact beside such a set.
 * See jschema_int.h. Pure functions: any thread.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/jschema_g4.h"
#include "server/jschema_int.h"

#define V_MAX_DEPTH 64
#define V_MAX_CANDIDATES 4096
#define V_MAX_UNIQUE 1000

struct vctx {
    json_t *root;
    int draft;     /* 4, 6, 7, 2019, 2020 from the root's $schema; 0 unknown; 3 unsupported */
    int nested_id; /* a subschema has its own $id: "#/..." may not mean the document root */
    int depth;
};

static int draft_of(json_t *root) {
    const char *u = json_is_object(root) ? json_string_value(json_object_get(root, "$schema"))
                                         : NULL;
    if (!u) return 0;
    if (strstr(u, "draft-03")) return 3;
    if (strstr(u, "draft-04")) return 4;
    if (strstr(u, "draft-06")) return 6;
    if (strstr(u, "draft-07")) return 7;
    if (strstr(u, "2019-09")) return 2019;
    if (strstr(u, "2020-12")) return 2020;
    return 0;
}

static int has_nested_id(json_t *s, int top, int depth) {
    if (depth > V_MAX_DEPTH) return 1;
    const char *k;
    json_t *v;
    size_t i;
    if (json_is_array(s)) {
        json_array_foreach(s, i, v) if (has_nested_id(v, 0, depth + 1)) return 1;
        return 0;
    }
    if (!json_is_object(s)) return 0;
    json_object_foreach(s, k, v) {
        if (!top && json_is_string(v) && (!strcmp(k, "$id") || !strcmp(k, "id"))) return 1;
        if (has_nested_id(v, 0, depth + 1)) return 1;
    }
    return 0;
}

/* JSON Schema equality: numbers by value (1 equals 1.0), objects without key order. */
static int eq(json_t *a, json_t *b) {
    if (json_is_number(a) && json_is_number(b)) {
        if (json_is_integer(a) && json_is_integer(b))
            return json_integer_value(a) == json_integer_value(b);
        return json_number_value(a) == json_number_value(b);
    }
    if (json_typeof(a) != json_typeof(b)) return 0;
    if (json_is_string(a))
        return json_string_length(a) == json_string_length(b) &&
               !memcmp(json_string_value(a), json_string_value(b), json_string_length(a));
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b)) return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!eq(json_array_get(a, i), json_array_get(b, i))) return 0;
        return 1;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b)) return 0;
        const char *k;
        json_t *v;
        json_object_foreach(a, k, v) {
            json_t *w = json_object_get(b, k);
            if (!w || !eq(v, w)) return 0;
        }
        return 1;
    }
    return 1; /* true, false, null */
}

/* -1, 0, 1 as a < b, a == b, a > b */
static int cmp_num(json_t *a, json_t *b) {
    if (json_is_integer(a) && json_is_integer(b)) {
        json_int_t x = json_integer_value(a), y = json_integer_value(b);
        return (x > y) - (x < y);
    }
    double x = json_number_value(a), y = json_number_value(b);
    return (x > y) - (x < y);
}

static int valid(struct vctx *x, json_t *s, json_t *v);

/* Three-valued and: a definite no decides; otherwise "cannot tell" wins over yes. */
#define V_AND(r, e)                                                                            \
    do {                                                                                       \
        const int t_ = (e);                                                                    \
        if (t_ == 0) return 0;                                                                 \
        if (t_ < 0) (r) = -1;                                                                  \
    } while (0)

int jschema_type_is(const char *t, json_t *v) {
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "integer"))
        return json_is_integer(v) ||
               (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    return -1;
}

static int type_one(struct vctx *x, const char *t, json_t *v) {
    if (!strcmp(t, "integer") && json_is_real(v) && jschema_type_is(t, v) == 1)
        return x->draft == 4 ? 0 : x->draft ? 1 : -1; /* 1.0: an integer since draft 6 */
    return jschema_type_is(t, v);
}

static int kw_type(struct vctx *x, json_t *kv, json_t *v) {
    if (json_is_string(kv)) return type_one(x, json_string_value(kv), v);
    if (!json_is_array(kv)) return -1;
    int r = 0;
    for (size_t i = 0; i < json_array_size(kv); i++) {
        json_t *t = json_array_get(kv, i);
        const int h = json_is_string(t) ? type_one(x, json_string_value(t), v) : -1;
        if (h == 1) return 1;
        if (h < 0) r = -1;
    }
    return r;
}

static int kw_string(const char *k, json_t *kv, json_t *v) {
    const char *p = json_string_value(v);
    if (!strcmp(k, "minLength") || !strcmp(k, "maxLength")) {
        if (!json_is_integer(kv)) return -1;
        long long n = 0; /* code points: bytes that do not continue a UTF-8 sequence */
        for (size_t i = 0; i < json_string_length(v); i++) n += ((unsigned char)p[i] & 0xc0) != 0x80;
        return k[1] == 'i' ? n >= json_integer_value(kv) : n <= json_integer_value(kv);
    }
    if (!strcmp(k, "pattern")) {
        if (!json_is_string(kv) || strlen(p) != json_string_length(v)) return -1;
        unsigned char hit = 0;
        char err[128];
        if (jschema_pattern_keys(json_string_value(kv), &p, 1, &hit, err, sizeof err)) return -1;
        return hit;
    }
    return -1; /* format: an assertion or an annotation depending on the draft and validator */
}

static int kw_number(struct vctx *x, json_t *s, const char *k, json_t *kv, json_t *v) {
    if (!strcmp(k, "multipleOf")) {
        if (!json_is_number(kv) || json_number_value(kv) <= 0) return -1;
        if (json_is_integer(kv) && json_is_integer(v)) {
            const json_int_t d = json_integer_value(kv);
            return d == 1 || json_integer_value(v) % d == 0;
        }
        const double q = json_number_value(v) / json_number_value(kv);
        if (!isfinite(q)) return -1;
        const double f = fabs(q - nearbyint(q));
        return f <= 1e-9 * fmax(1.0, fabs(q)) ? 1 : f > 1e-6 ? 0 : -1;
    }
    const int lo = !strcmp(k, "minimum") || !strcmp(k, "exclusiveMinimum");
    if (json_is_boolean(kv) && k[0] == 'e') return 1; /* draft 4's flag, read with its bound */
    if (!json_is_number(kv)) return -1;
    const int c = cmp_num(v, kv);
    int strict = k[0] == 'e';
    if (!strict) {
        json_t *ex = json_object_get(s, lo ? "exclusiveMinimum" : "exclusiveMaximum");
        if (json_is_boolean(ex) && x->draft != 4 && x->draft != 0) return -1;
        strict = json_is_true(ex);
    }
    return lo ? (strict ? c > 0 : c >= 0) : (strict ? c < 0 : c <= 0);
}

static int kw_items(struct vctx *x, json_t *s, const char *k, json_t *kv, json_t *v) {
    const size_t n = json_array_size(v);
    int r = 1;
    if (!strcmp(k, "minItems") || !strcmp(k, "maxItems")) {
        if (!json_is_integer(kv)) return -1;
        return k[1] == 'i' ? (json_int_t)n >= json_integer_value(kv)
                           : (json_int_t)n <= json_integer_value(kv);
    }
    if (!strcmp(k, "uniqueItems")) {
        if (!json_is_boolean(kv)) return -1;
        if (json_is_false(kv)) return 1;
        if (n > V_MAX_UNIQUE) return -1;
        for (size_t i = 0; i < n; i++)
            for (size_t j = i + 1; j < n; j++)
                if (eq(json_array_get(v, i), json_array_get(v, j))) return 0;
        return 1;
    }
    if (!strcmp(k, "prefixItems")) {
        if (x->draft && x->draft < 2020) return 1; /* not a keyword before 2020-12 */
        if (!json_is_array(kv)) return -1;
        for (size_t i = 0; i < n && i < json_array_size(kv); i++)
            V_AND(r, valid(x, json_array_get(kv, i), json_array_get(v, i)));
        return r;
    }
    if (!strcmp(k, "items")) {
        if (json_is_array(kv)) { /* a tuple (before 2020-12), additionalItems after it */
            if (x->draft == 2020 || json_object_get(s, "prefixItems")) return -1;
            json_t *add = json_object_get(s, "additionalItems");
            for (size_t i = 0; i < n; i++) {
                json_t *sub = i < json_array_size(kv) ? json_array_get(kv, i) : add;
                if (sub) V_AND(r, valid(x, sub, json_array_get(v, i)));
            }
            return r;
        }
        json_t *pre = json_object_get(s, "prefixItems");
        size_t from = 0;
        if (pre && x->draft != 2020) return -1; /* whether prefixItems counts depends on the draft */
        if (pre) from = json_is_array(pre) ? json_array_size(pre) : n;
        for (size_t i = from; i < n; i++) V_AND(r, valid(x, kv, json_array_get(v, i)));
        return r;
    }
    if (!strcmp(k, "additionalItems")) return 1; /* read with an items array */
    if (!strcmp(k, "contains")) {
        if (x->draft == 4) return 1; /* not a keyword in draft 4 */
        json_t *mn = json_object_get(s, "minContains"), *mx = json_object_get(s, "maxContains");
        if ((mn || mx) && x->draft != 2019 && x->draft != 2020) return -1;
        if ((mn && !json_is_integer(mn)) || (mx && !json_is_integer(mx))) return -1;
        const long long lo = mn ? json_integer_value(mn) : 1, hi = mx ? json_integer_value(mx) : -1;
        long long yes = 0, unk = 0;
        for (size_t i = 0; i < n; i++) {
            const int h = valid(x, kv, json_array_get(v, i));
            yes += h == 1;
            unk += h < 0;
        }
        if (yes + unk < lo || (hi >= 0 && yes > hi)) return 0;
        if (yes >= lo && (hi < 0 || yes + unk <= hi)) return 1;
        return -1;
    }
    if (!strcmp(k, "minContains") || !strcmp(k, "maxContains")) return 1; /* with contains */
    return -1;
}

/* hit[i]: key i of v matches some patternProperties pattern; 0 or -1 */
static int pattern_hits(json_t *pp, json_t *v, const char **keys, unsigned char *hit) {
    const size_t n = json_object_size(v);
    unsigned char *one = calloc(n, 1);
    if (!one) return -1;
    const char *pk;
    json_t *sub;
    json_object_foreach(pp, pk, sub) {
        char err[128];
        if (jschema_pattern_keys(pk, keys, (int)n, one, err, sizeof err)) {
            free(one);
            return -1;
        }
        for (size_t i = 0; i < n; i++) hit[i] |= one[i];
        memset(one, 0, n);
    }
    free(one);
    return 0;
}

static int kw_props(struct vctx *x, json_t *s, const char *k, json_t *kv, json_t *v) {
    int r = 1;
    if (!strcmp(k, "minProperties") || !strcmp(k, "maxProperties")) {
        if (!json_is_integer(kv)) return -1;
        const json_int_t n = (json_int_t)json_object_size(v);
        return k[1] == 'i' ? n >= json_integer_value(kv) : n <= json_integer_value(kv);
    }
    if (!strcmp(k, "required")) {
        if (!json_is_array(kv)) return -1;
        for (size_t i = 0; i < json_array_size(kv); i++) {
            json_t *name = json_array_get(kv, i);
            if (!json_is_string(name)) return -1;
            if (!json_object_get(v, json_string_value(name))) return 0;
        }
        return 1;
    }
    if (!strcmp(k, "properties")) {
        if (!json_is_object(kv)) return -1;
        const char *pk;
        json_t *sub;
        json_object_foreach(kv, pk, sub) {
            json_t *pv = json_object_get(v, pk);
            if (pv) V_AND(r, valid(x, sub, pv));
        }
        return r;
    }
    const int dep_old = !strcmp(k, "dependencies"), dep_req = !strcmp(k, "dependentRequired"),
              dep_sch = !strcmp(k, "dependentSchemas");
    if (dep_old || dep_req || dep_sch) {
        if (dep_old ? x->draft >= 2019 : (x->draft && x->draft < 2019)) return dep_old ? -1 : 1;
        if (!json_is_object(kv)) return -1;
        const char *pk;
        json_t *d;
        json_object_foreach(kv, pk, d) {
            if (!json_object_get(v, pk)) continue;
            if (json_is_array(d) && !dep_sch) {
                for (size_t i = 0; i < json_array_size(d); i++) {
                    if (!json_is_string(json_array_get(d, i))) return -1;
                    if (!json_object_get(v, json_string_value(json_array_get(d, i)))) return 0;
                }
            } else if (!dep_req) {
                V_AND(r, valid(x, d, v));
            } else {
                return -1;
            }
        }
        return r;
    }
    /* the rest look at every key: patternProperties, additionalProperties, propertyNames */
    if (strcmp(k, "propertyNames") && strcmp(k, "patternProperties") &&
        strcmp(k, "additionalProperties"))
        return -1;
    if (!strcmp(k, "propertyNames") && x->draft == 4) return 1; /* not a keyword in draft 4 */
    const size_t n = json_object_size(v);
    if (n == 0) return 1;
    const char **keys = calloc(n, sizeof(*keys));
    unsigned char *hit = calloc(n, 1);
    json_t **vals = calloc(n, sizeof(*vals));
    json_t *pp = json_object_get(s, "patternProperties"), *pr = json_object_get(s, "properties");
    if (!keys || !hit || !vals || (pp && !json_is_object(pp)) || (pr && !json_is_object(pr))) {
        r = -1;
        goto done;
    }
    size_t i = 0;
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        keys[i] = key;
        vals[i++] = val;
    }
    if (!strcmp(k, "propertyNames")) {
        for (i = 0; i < n; i++) {
            json_t *ks = json_string(keys[i]);
            const int h = ks ? valid(x, kv, ks) : -1;
            json_decref(ks);
            if (h == 0) {
                r = 0;
                goto done;
            }
            if (h < 0) r = -1;
        }
    } else if (!strcmp(k, "patternProperties")) {
        const char *pat;
        json_t *sub;
        json_object_foreach(kv, pat, sub) {
            char err[128];
            memset(hit, 0, n);
            if (jschema_pattern_keys(pat, keys, (int)n, hit, err, sizeof err)) {
                r = -1;
                goto done;
            }
            for (i = 0; i < n; i++) {
                const int h = hit[i] ? valid(x, sub, vals[i]) : 1;
                if (h == 0) {
                    r = 0;
                    goto done;
                }
                if (h < 0) r = -1;
            }
        }
    } else { /* additionalProperties: the keys neither properties nor a pattern names */
        if (pp && pattern_hits(pp, v, keys, hit)) {
            r = -1;
            goto done;
        }
        for (i = 0; i < n; i++) {
            if (hit[i] || (pr && json_object_get(pr, keys[i]))) continue;
            const int h = valid(x, kv, vals[i]);
            if (h == 0) {
                r = 0;
                goto done;
            }
            if (h < 0) r = -1;
        }
    }
done:
    free(keys);
    free(hit);
    free(vals);
    return r;
}

static int kw_logic(struct vctx *x, json_t *s, const char *k, json_t *kv, json_t *v) {
    int r = 1;
    if (!strcmp(k, "not")) {
        const int h = valid(x, kv, v);
        return h < 0 ? -1 : !h;
    }
    if (!strcmp(k, "if")) {
        if (x->draft && x->draft < 7) return 1; /* not a keyword before draft 7 */
        const int h = valid(x, kv, v);
        if (h < 0) return -1;
        json_t *br = json_object_get(s, h ? "then" : "else");
        return br ? valid(x, br, v) : 1;
    }
    if (!strcmp(k, "then") || !strcmp(k, "else")) return 1; /* read with if */
    if (!json_is_array(kv) || json_array_size(kv) == 0) return -1;
    int yes = 0, unk = 0;
    for (size_t i = 0; i < json_array_size(kv); i++) {
        const int h = valid(x, json_array_get(kv, i), v);
        if (!strcmp(k, "allOf")) V_AND(r, h);
        yes += h == 1;
        unk += h < 0;
    }
    if (!strcmp(k, "allOf")) return r;
    if (!strcmp(k, "anyOf")) return yes ? 1 : unk ? -1 : 0;
    if (!strcmp(k, "oneOf")) return yes > 1 ? 0 : unk ? -1 : yes == 1;
    return -1;
}

static int in_(const char *k, const char *const *l) {
    for (; *l; l++)
        if (!strcmp(k, *l)) return 1;
    return 0;
}

/* One keyword of schema s for value v: 1, 0, -1 (cannot tell). */
static int keyword(struct vctx *x, json_t *s, const char *k, json_t *kv, json_t *v) {
    static const char *const str[] = {"minLength", "maxLength", "pattern", "format", NULL};
    static const char *const num[] = {"minimum", "maximum", "exclusiveMinimum",
                                      "exclusiveMaximum", "multipleOf", NULL};
    static const char *const arr[] = {"items", "prefixItems", "additionalItems", "minItems",
                                      "maxItems", "uniqueItems", "contains", "minContains",
                                      "maxContains", NULL};
    static const char *const obj[] = {"properties", "patternProperties", "additionalProperties",
                                      "required", "minProperties", "maxProperties",
                                      "dependencies", "dependentRequired", "dependentSchemas",
                                      "propertyNames", NULL};
    static const char *const logic[] = {"allOf", "anyOf", "oneOf", "not", "if", "then", "else",
                                        NULL};
    if (!strcmp(k, "$ref")) return 1; /* read by valid_obj */
    if (!strcmp(k, "type")) return kw_type(x, kv, v);
    if (!strcmp(k, "enum")) {
        if (!json_is_array(kv)) return -1;
        for (size_t i = 0; i < json_array_size(kv); i++)
            if (eq(json_array_get(kv, i), v)) return 1;
        return 0;
    }
    if (!strcmp(k, "const")) return x->draft == 4 ? -1 : eq(kv, v); /* draft 4: no keyword */
    if (in_(k, str)) return json_is_string(v) ? kw_string(k, kv, v) : 1;
    if (in_(k, num)) return json_is_number(v) ? kw_number(x, s, k, kv, v) : 1;
    if (in_(k, arr)) return json_is_array(v) ? kw_items(x, s, k, kv, v) : 1;
    if (in_(k, obj)) return json_is_object(v) ? kw_props(x, s, k, kv, v) : 1;
    if (in_(k, logic)) return kw_logic(x, s, k, kv, v);
    /* nullable, unevaluated*, $dynamicRef, $recursiveRef and any other keyword the generator
     * knows: beyond this check; annotations and unknown keywords do not change validity */
    return jschema_keyword_kind(k) == 0 ? 1 : -1;
}

static int keywords(struct vctx *x, json_t *s, json_t *v, int skip_ref) {
    int r = 1;
    const char *k;
    json_t *kv;
    json_object_foreach(s, k, kv) {
        if (skip_ref && !strcmp(k, "$ref")) continue;
        V_AND(r, keyword(x, s, k, kv, v));
    }
    return r;
}

static int valid_obj(struct vctx *x, json_t *s, json_t *v) {
    json_t *ref = json_object_get(s, "$ref");
    if (!ref) return keywords(x, s, v, 0);
    if (!json_is_string(ref) || x->nested_id) return -1;
    json_t *t = jschema_resolve(x->root, json_string_value(ref));
    if (!t) return -1;
    const int rr = valid(x, t, v);
    if (rr == 0 || (x->draft && x->draft <= 7)) return rr; /* draft 7 and before: siblings ignored */
    const int rs = keywords(x, s, v, 1);
    if (x->draft) return rr < 0 || rs < 0 ? (rs == 0 ? 0 : -1) : rs;
    return rr == 1 && rs == 1 ? 1 : -1; /* the draft decides whether the siblings count */
}

static int valid(struct vctx *x, json_t *s, json_t *v) {
    if (json_is_boolean(s)) return json_is_true(s); /* draft 4: additionalProperties/Items */
    if (!json_is_object(s) || x->draft == 3) return -1;
    if (x->depth >= V_MAX_DEPTH) return -1;
    x->depth++;
    const int r = valid_obj(x, s, v);
    x->depth--;
    return r;
}

int jschema_valid(json_t *root, json_t *s, json_t *v) {
    struct vctx x = {.root = root, .draft = draft_of(root), .nested_id = has_nested_id(root, 1, 0)};
    return valid(&x, s, v);
}

const char *jschema_infer_type(json_t *s) {
    static const char *const obj[] = {"properties", "required", "additionalProperties",
                                      "patternProperties", "minProperties", "maxProperties",
                                      "dependencies", NULL};
    static const char *const arr[] = {"items", "prefixItems", "minItems", "maxItems", NULL};
    static const char *const str[] = {"minLength", "maxLength", "pattern", "format", NULL};
    static const char *const num[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                      "multipleOf", NULL};
    for (int i = 0; obj[i]; i++) if (json_object_get(s, obj[i])) return "object";
    for (int i = 0; arr[i]; i++) if (json_object_get(s, arr[i])) return "array";
    for (int i = 0; str[i]; i++) if (json_object_get(s, str[i])) return "string";
    for (int i = 0; num[i]; i++) if (json_object_get(s, num[i])) return "number";
    return NULL;
}

/* ---- literals and finite sets -------------------------------------------------------- */

/* A double as Python's repr writes it (and most JSON writers: the fewest digits that read
 * back the same, an exponent below 1e-4 and from 1e16, else ".0" on whole numbers). */
static void real_text(double d, char *out, size_t n) {
    char t[48];
    int p = 1;
    for (; p < 17; p++) {
        snprintf(t, sizeof t, "%.*e", p - 1, d);
        if (strtod(t, NULL) == d) break;
    }
    const char *e = strchr(t, 'e');
    const int ex = e ? atoi(e + 1) : 0;
    if (ex < -4 || ex >= 16) {
        snprintf(out, n, "%.*e", p - 1, d);
        return;
    }
    const int dec = p - 1 - ex > 0 ? p - 1 - ex : 0;
    snprintf(out, n, dec ? "%.*f" : "%.*f.0", dec, d);
}

int jschema_lit(struct jsc *c, struct jsc_buf *b, json_t *v, const char *ptr) {
    if (c->g4) return jschema_g4_lit(v, c->q, b) ? jfail(c, "cannot encode the value at %s", ptr) : 0;
    if (json_is_object(v) || json_is_array(v)) { /* JSON's free whitespace between tokens */
        const int obj = json_is_object(v);
        jsc_buf_add(b, obj ? "\"{\" ws" : "\"[\" ws", 6);
        const char *k;
        json_t *e;
        size_t i = 0;
        void *it = obj ? json_object_iter(v) : NULL;
        for (;; i++) {
            if (obj) {
                if (!it) break;
                k = json_object_iter_key(it);
                e = json_object_iter_value(it);
                it = json_object_iter_next(v, it);
            } else {
                if (i == json_array_size(v)) break;
                e = json_array_get(v, i);
            }
            if (i) jsc_buf_add(b, " \",\" ws ", 8);
            else jsc_buf_add(b, " ", 1);
            if (obj) {
                json_t *ks = json_string(k);
                int rc = ks ? jschema_lit(c, b, ks, ptr) : jfail(c, "out of memory");
                json_decref(ks);
                if (rc) return -1;
                jsc_buf_add(b, " ws \":\" ws ", 11);
            }
            if (jschema_lit(c, b, e, ptr)) return -1;
            jsc_buf_add(b, " ws", 3);
        }
        jsc_buf_add(b, obj ? " \"}\"" : " \"]\"", 4);
        return 0;
    }
    if (json_is_real(v) && isfinite(json_real_value(v))) {
        char r[64];
        real_text(json_real_value(v), r, sizeof r);
        jsc_buf_lit(b, r, strlen(r));
        return 0;
    }
    char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!t) return jfail(c, "cannot encode the value at %s", ptr);
    jsc_buf_lit(b, t, strlen(t));
    free(t);
    return 0;
}

/* A superset of the values s allows when they are finite (a new array), else NULL. */
static json_t *finite_set(json_t *root, json_t *s, int depth) {
    if (!json_is_object(s) || depth > 16) return NULL;
    json_t *cst = json_object_get(s, "const"), *en = json_object_get(s, "enum"), *l;
    if (cst) return json_pack("[O]", cst);
    if (json_is_array(en)) return json_copy(en);
    json_t *al = json_object_get(s, "allOf"), *ref = json_object_get(s, "$ref");
    for (size_t i = 0; i < json_array_size(al); i++)
        if ((l = finite_set(root, json_array_get(al, i), depth + 1))) return l;
    if (json_is_string(ref) && (l = finite_set(root, jschema_resolve(root, json_string_value(ref)),
                                           depth + 1)))
        return l;
    json_t *br = json_object_get(s, "anyOf");
    if (!br) br = json_object_get(s, "oneOf");
    if (!json_is_array(br) || json_array_size(br) == 0) return NULL;
    json_t *u = json_array();
    for (size_t i = 0; u && i < json_array_size(br); i++) {
        l = finite_set(root, json_array_get(br, i), depth + 1);
        if (!l || json_array_extend(u, l)) {
            json_decref(l);
            json_decref(u);
            return NULL;
        }
        json_decref(l);
    }
    return u;
}

int jschema_gen_values(struct jsc *c, json_t *s, const char *ptr, struct jsc_buf *b) {
    if (json_object_get(s, "nullable")) return 0;
    json_t *cand = finite_set(c->root, s, 0);
    if (!cand) return 0;
    if (!c->v_init) {
        c->v_draft = draft_of(c->root);
        c->v_nested_id = has_nested_id(c->root, 1, 0);
        c->v_init = 1;
    }
    struct vctx x = {.root = c->root, .draft = c->v_draft, .nested_id = c->v_nested_id};
    const size_t n = json_array_size(cand);
    unsigned char *ok = n <= V_MAX_CANDIDATES ? calloc(n + 1, 1) : NULL;
    int rc = ok ? 1 : 0;
    for (size_t i = 0; rc == 1 && i < n; i++) {
        json_t *v = json_array_get(cand, i);
        int dup = 0;
        for (size_t j = 0; j < i && !dup; j++) dup = ok[j] && eq(json_array_get(cand, j), v);
        const int h = dup ? 0 : valid(&x, s, v);
        if (h < 0) rc = 0;
        ok[i] = h == 1;
    }
    int n_ok = 0;
    for (size_t i = 0; rc == 1 && i < n; i++) {
        if (!ok[i]) continue;
        if (n_ok++) jsc_buf_add(b, " | ", 3);
        if (jschema_lit(c, b, json_array_get(cand, i), ptr)) rc = -1;
    }
    if (rc == 1 && n_ok == 0) {
        snprintf(c->empty, sizeof c->empty, "no value of the schema's enum or const is valid "
                 "against the whole schema at %s", ptr);
        rc = JSC_EMPTY;
    }
    free(ok);
    json_decref(cand);
    return rc;
}

/* ---- not, rewritten as positive keywords ---------------------------------------------- */

/* 1 when every keyword of s but `kw` is an annotation or unknown. */
static int only_kw(json_t *s, const char *kw) {
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) if (strcmp(k, kw) && jschema_keyword_kind(k) != 0) return 0;
    return json_object_get(s, kw) != NULL;
}

/* A schema that accepts exactly what n rejects, in keywords the generator knows, or NULL:
 * true/false, a type list, required keys, anyOf/allOf of negatable parts, a double not, a
 * lone $ref to one of these. */
static json_t *negate(json_t *root, json_t *n, int depth) {
    if (depth > 16) return NULL;
    if (json_is_boolean(n)) return json_boolean(!json_is_true(n));
    if (!json_is_object(n)) return NULL;
    const char *k;
    json_t *v;
    int any = 0;
    json_object_foreach(n, k, v) any |= jschema_keyword_kind(k) != 0;
    if (!any) return json_false(); /* {}: everything */
    if (only_kw(n, "$ref") && json_is_string(json_object_get(n, "$ref")))
        return negate(root, jschema_resolve(root, json_string_value(json_object_get(n, "$ref"))),
                      depth + 1);
    if (only_kw(n, "not")) return json_incref(json_object_get(n, "not"));
    if (only_kw(n, "type")) { /* the other types ("integer" alone: not without fractions) */
        static const char *const all[] = {"string", "number", "boolean", "null", "object",
                                          "array", NULL};
        json_t *t = json_object_get(n, "type"), *out = json_array();
        int has[6] = {0}, num = 0, integer = 0;
        for (size_t i = 0; out && i < (json_is_array(t) ? json_array_size(t) : 1); i++) {
            const char *name = json_string_value(json_is_array(t) ? json_array_get(t, i) : t);
            if (!name) goto bad;
            int known = !strcmp(name, "integer");
            integer |= known;
            for (int j = 0; all[j]; j++) {
                has[j] |= !strcmp(name, all[j]);
                known |= !strcmp(name, all[j]);
            }
            if (!known) goto bad; /* no such type: the schema is malformed */
        }
        num = has[1];
        if (integer && !num) goto bad;
        for (int j = 0; out && all[j]; j++)
            if (!has[j]) json_array_append_new(out, json_string(all[j]));
        if (!out) return NULL;
        if (json_array_size(out)) return json_pack("{so}", "type", out);
        json_decref(out);
        return json_false();
    bad:
        json_decref(out);
        return NULL;
    }
    if (only_kw(n, "required")) { /* an object without one of the keys */
        json_t *r = json_object_get(n, "required"), *alts = json_array();
        if (!json_is_array(r) || !json_array_size(r) || !alts) {
            json_decref(alts);
            return NULL;
        }
        for (size_t i = 0; i < json_array_size(r); i++) {
            const char *key = json_string_value(json_array_get(r, i));
            if (!key) {
                json_decref(alts);
                return NULL;
            }
            json_array_append_new(alts, json_pack("{s{sb}}", "properties", key, 0));
        }
        if (json_array_size(alts) == 1) {
            json_t *one = json_incref(json_array_get(alts, 0));
            json_decref(alts);
            json_object_set_new(one, "type", json_string("object"));
            return one;
        }
        return json_pack("{ssso}", "type", "object", "anyOf", alts);
    }
    const int is_any = only_kw(n, "anyOf");
    if (is_any || only_kw(n, "allOf")) { /* De Morgan */
        json_t *parts = json_object_get(n, is_any ? "anyOf" : "allOf"), *out = json_array();
        if (!json_is_array(parts) || !json_array_size(parts) || !out) {
            json_decref(out);
            return NULL;
        }
        for (size_t i = 0; i < json_array_size(parts); i++) {
            json_t *p = negate(root, json_array_get(parts, i), depth + 1);
            if (!p) {
                json_decref(out);
                return NULL;
            }
            json_array_append_new(out, p);
        }
        return json_pack("{so}", is_any ? "allOf" : "anyOf", out);
    }
    return NULL;
}

json_t *jschema_drop_not(json_t *root, json_t *s) {
    json_t *pos = negate(root, json_object_get(s, "not"), 0);
    if (!pos) return NULL;
    json_t *out = json_copy(s), *al = json_object_get(s, "allOf");
    json_t *parts = json_is_array(al) ? json_copy(al) : json_array();
    if (!out || !parts || json_array_append_new(parts, pos)) {
        json_decref(out);
        json_decref(parts);
        return NULL;
    }
    json_object_del(out, "not");
    json_object_set_new(out, "allOf", parts);
    return out;
}
