/*
 * jschema_merge — the intersection of JSON Schemas as one schema: what allOf accepts, and
 * what a combinator ($ref, anyOf, oneOf, allOf) with sibling keywords accepts. See jschema.h.
 *
 * Rules, per keyword present in both schemas (a keyword in one only is kept as it is):
 *  - type: the intersection (integer within number); none left is an error;
 *  - properties / additionalProperties / required: every key named by either side gets the
 *    intersection of what each side says of it (its property schema, else that side's
 *    additionalProperties); a key one side forbids becomes false (never written), and if it is required
 *    the schemas have no common object; additionalProperties is the intersection of both;
 *    required is the union;
 *  - minLength / minItems / minimum / exclusiveMinimum: the larger; the max* ones: the
 *    smaller;
 *  - items: the intersection; enum: the common values; const: equal values, or a const that
 *    the other side's enum holds;
 *  - anyOf / oneOf: distributed, (A and (B1 or B2)) = (A and B1) or (A and B2), at most
 *    JSM_MAX_ALTS branches;
 *  - any other keyword (pattern, format, prefixItems, ...) only when both sides are equal.
 * $ref and allOf inside a part are resolved first. Annotations and unknown keywords are
 * dropped; refused keywords are kept, so the generator names them.
 */
#include "server/jschema.h"
#include "server/jschema_int.h"

#include <stdio.h>
#include <string.h>

#define JSM_MAX_ALTS 64
#define JSM_MAX_DEPTH 64

struct jsm {
    json_t *root;
    const char *ptr;
    char *err;
    size_t errlen;
    int failed;
    int depth;
    int extra_keys; /* the generator writes other keys where additionalProperties is absent */
};

static json_t *jsm_fail(struct jsm *m, const char *what, const char *kw) {
    if (!m->failed && m->err && m->errlen)
        snprintf(m->err, m->errlen, "unsupported keyword combination (%s '%s') at %s",
                 what, kw, m->ptr);
    m->failed = 1;
    return NULL;
}

static int is_num_kw(const char *k, int *larger) {
    static const char *const lo[] = {"minLength", "minItems", "minimum", "exclusiveMinimum",
                                     "minProperties", NULL};
    static const char *const hi[] = {"maxLength", "maxItems", "maximum", "exclusiveMaximum",
                                     "maxProperties", NULL};
    for (int i = 0; lo[i]; i++)
        if (!strcmp(k, lo[i])) return *larger = 1, 1;
    for (int i = 0; hi[i]; i++)
        if (!strcmp(k, hi[i])) return *larger = 0, 1;
    return 0;
}

/* The type names of a `type` value as a bit set (NULL: all). */
static const char *const type_names[] = {"null", "boolean", "object", "array", "number", "string",
                                         "integer", NULL};
static unsigned type_bits(json_t *t) {
    if (!t) return 0x7F;
    unsigned bits = 0;
    for (size_t i = 0; i < (json_is_array(t) ? json_array_size(t) : 1); i++) {
        json_t *e = json_is_array(t) ? json_array_get(t, i) : t;
        for (int j = 0; type_names[j]; j++)
            if (json_is_string(e) && !strcmp(json_string_value(e), type_names[j])) bits |= 1u << j;
    }
    return bits;
}

static json_t *type_value(unsigned bits) {
    json_t *a = json_array();
    for (int j = 0; type_names[j]; j++)
        if (bits & (1u << j)) json_array_append_new(a, json_string(type_names[j]));
    if (json_array_size(a) == 1) {
        json_t *one = json_incref(json_array_get(a, 0));
        json_decref(a);
        return one;
    }
    return a;
}

static json_t *intersect_types(json_t *a, json_t *b) {
    unsigned x = type_bits(a), y = type_bits(b);
    enum { NUM = 1u << 4, INT = 1u << 6 };
    unsigned r = x & y;
    if ((x & NUM) && (y & INT)) r |= INT; /* integer within number */
    if ((y & NUM) && (x & INT)) r |= INT;
    if ((r & NUM) && (r & INT) && !((x & NUM) && (y & NUM))) r &= ~NUM;
    return r ? type_value(r) : NULL;
}

static json_t *merge2(struct jsm *m, json_t *a, json_t *b);

/* The effective types of s: its type, with null when nullable (OpenAPI). */
static unsigned eff_types(json_t *s) {
    json_t *t = json_is_object(s) ? json_object_get(s, "type") : NULL;
    if (!t) return 0x7F;
    return type_bits(t) | (json_is_true(json_object_get(s, "nullable")) ? 1u : 0u);
}

/* 0 when a and b, schemas without combinators at the top, certainly share no value: no
 * common type, or consts/enums with no common value. */
static int compatible(json_t *a, json_t *b) {
    if (!json_is_object(a) || !json_is_object(b)) return 1;
    unsigned x = eff_types(a), y = eff_types(b), r = x & y;
    if ((x & (1u << 4)) && (y & (1u << 6))) r |= 1;
    if ((y & (1u << 4)) && (x & (1u << 6))) r |= 1;
    if (!r) return 0;
    json_t *va = json_object_get(a, "const"), *vb = json_object_get(b, "const");
    json_t *ea = json_object_get(a, "enum"), *eb = json_object_get(b, "enum");
    if (va && vb) return json_equal(va, vb);
    json_t *c = va ? va : vb, *e = va ? eb : ea;
    if (c && json_is_array(e)) {
        for (size_t i = 0; i < json_array_size(e); i++)
            if (json_equal(json_array_get(e, i), c)) return 1;
        return 0;
    }
    return 1;
}

/* s with $ref (chains), allOf and a rewritable not folded in; a new reference. */
static json_t *flatten(struct jsm *m, json_t *s) {
    if (!json_is_object(s)) return json_incref(s);
    json_t *dn = json_object_get(s, "not") ? jschema_drop_not(m->root, s) : NULL;
    if (dn) { /* a not that reads as positive keywords: one more allOf part */
        json_t *r = flatten(m, dn);
        json_decref(dn);
        return r;
    }
    json_t *ref = json_object_get(s, "$ref"), *all = json_object_get(s, "allOf");
    if (!ref && !all) return json_incref(s);
    if (++m->depth > JSM_MAX_DEPTH) return jsm_fail(m, "nesting too deep:", "$ref");
    json_t *rest = json_deep_copy(s), *acc = NULL;
    json_object_del(rest, "$ref");
    json_object_del(rest, "allOf");
    acc = rest;
    if (ref) {
        json_t *t = json_is_string(ref) ? jschema_resolve(m->root, json_string_value(ref)) : NULL;
        if (!t) {
            json_decref(acc);
            if (!m->failed && m->err)
                snprintf(m->err, m->errlen, "unknown $ref '%.200s' at %s",
                         json_is_string(ref) ? json_string_value(ref) : "", m->ptr);
            m->failed = 1;
            m->depth--;
            return NULL;
        }
        json_t *r = merge2(m, acc, t);
        json_decref(acc);
        acc = r;
    }
    for (size_t i = 0; acc && json_is_array(all) && i < json_array_size(all); i++) {
        json_t *r = merge2(m, acc, json_array_get(all, i));
        json_decref(acc);
        acc = r;
    }
    if (acc && all && !json_is_array(all)) {
        json_decref(acc);
        acc = jsm_fail(m, "a non-array", "allOf");
    }
    m->depth--;
    return acc;
}

/* The object keywords of a and b, merged into out. 0 or -1. */
static int merge_object(struct jsm *m, json_t *a, json_t *b, json_t *out) {
    json_t *pa = json_object_get(a, "properties"), *pb = json_object_get(b, "properties");
    json_t *aa = json_object_get(a, "additionalProperties");
    json_t *ab = json_object_get(b, "additionalProperties");
    json_t *ra = json_object_get(a, "required"), *rb = json_object_get(b, "required");
    if ((pa && !json_is_object(pa)) || (pb && !json_is_object(pb)) ||
        (ra && !json_is_array(ra)) || (rb && !json_is_array(rb)))
        return jsm_fail(m, "malformed", "properties"), -1;
    /* patternProperties: the patterns of both sides (one pattern in both: allOf of its two
     * schemas). Beside object keywords of the other side the merged object must declare
     * keys (checked below): the generator then writes only those, each with the schemas
     * of the patterns it matches, which both sides' keys then meet. */
    static const char *const objkw[] = {"properties", "additionalProperties", "required",
                                        "patternProperties", NULL};
    int pp_beside = 0;
    for (int side = 0; side < 2; side++) {
        json_t *x = side ? b : a, *y = side ? a : b, *ppx = json_object_get(x, "patternProperties");
        if (!ppx) continue;
        if (!json_is_object(ppx)) return jsm_fail(m, "malformed", "patternProperties"), -1;
        for (int i = 0; objkw[i]; i++) pp_beside |= json_object_get(y, objkw[i]) != NULL;
        /* the other side's additionalProperties would hold for the keys x's patterns match,
         * which the generator may write after the declared ones: refused unless true */
        json_t *ay = json_object_get(y, "additionalProperties");
        if (ay && !json_is_true(ay))
            return jsm_fail(m, "object keywords of another part beside", "patternProperties"), -1;
        json_t *pp = json_object_get(out, "patternProperties");
        if (!pp) {
            json_object_set_new(out, "patternProperties", json_deep_copy(ppx));
            continue;
        }
        const char *k;
        json_t *v;
        json_object_foreach(ppx, k, v) {
            json_t *have = json_object_get(pp, k);
            json_object_set_new(pp, k, have ? json_pack("{s[OO]}", "allOf", have, v)
                                            : json_incref(v));
        }
    }
    json_t *props = json_object(), *req = json_array();
    int dropped = 0;
    for (int side = 0; side < 2; side++) {
        json_t *p = side ? pb : pa;
        const char *k;
        json_t *v;
        json_object_foreach(p, k, v) {
            if (json_object_get(props, k)) continue;
            json_t *sa = pa ? json_object_get(pa, k) : NULL, *sb = pb ? json_object_get(pb, k) : NULL;
            if (!sa) sa = aa ? aa : json_true();
            if (!sb) sb = ab ? ab : json_true();
            if (json_is_false(sa) || json_is_false(sb)) {
                dropped = 1;
                json_object_set_new(props, k, json_false()); /* never written */
                continue;
            }
            json_t *r = json_is_true(sa) ? json_incref(sb) : json_is_true(sb) ? json_incref(sa) : merge2(m, sa, sb);
            if (!r) goto fail;
            json_object_set_new(props, k, r);
        }
    }
    for (int side = 0; side < 2; side++) {
        json_t *r = side ? rb : ra;
        for (size_t i = 0; i < json_array_size(r); i++) {
            json_t *k = json_array_get(r, i);
            int seen = 0;
            for (size_t j = 0; j < json_array_size(req); j++) seen |= json_equal(json_array_get(req, j), k);
            if (!seen) json_array_append(req, k);
            if (!json_is_string(k)) continue;
            const char *ks = json_string_value(k);
            json_t *have = json_object_get(props, ks);
            if (!have) { /* required but named by neither side: each side's additionalProperties */
                json_t *sa = aa ? aa : json_true(), *sb = ab ? ab : json_true();
                if (json_is_false(sa) || json_is_false(sb)) {
                    have = json_false();
                } else if (!json_is_true(sa) || !json_is_true(sb)) {
                    json_t *x = json_is_true(sa) ? json_incref(sb) : json_is_true(sb) ? json_incref(sa) : merge2(m, sa, sb);
                    if (!x) goto fail;
                    json_object_set_new(props, ks, x);
                }
            }
            if (json_is_false(have)) {
                jsm_fail(m, "a required property that another part forbids:", ks);
                goto fail;
            }
        }
    }
    json_t *addl = NULL;
    if (aa && ab) addl = json_is_false(aa) || json_is_false(ab) ? json_false()
                         : json_is_true(aa) ? json_incref(ab) : json_is_true(ab) ? json_incref(aa)
                         : merge2(m, aa, ab);
    else if (aa || ab) addl = json_incref(aa ? aa : ab);
    if ((aa && ab) && !addl) goto fail;
    /* A forbidden key stays in properties as false: the generator never writes it, and
     * keeps it out of any other keys it writes. */
    (void)dropped;
    if (pp_beside && !json_object_size(props) && !json_array_size(req)) {
        jsm_fail(m, "object keywords of another part beside", "patternProperties");
        goto fail;
    }
    if (pa || pb || json_object_size(props)) json_object_set(out, "properties", props);
    if (json_array_size(req)) json_object_set(out, "required", req);
    if (addl) json_object_set_new(out, "additionalProperties", addl);
    json_decref(props);
    json_decref(req);
    return 0;
fail:
    json_decref(props);
    json_decref(req);
    return -1;
}

static int merge_values(struct jsm *m, json_t *a, json_t *b, json_t *out) {
    json_t *ea = json_object_get(a, "enum"), *eb = json_object_get(b, "enum");
    json_t *ca = json_object_get(a, "const"), *cb = json_object_get(b, "const");
    if (ca && cb && !json_equal(ca, cb)) return jsm_fail(m, "two different values of", "const"), -1;
    json_t *c = ca ? ca : cb;
    if (c) {
        json_t *e = ea ? ea : eb;
        if (ea && eb) return jsm_fail(m, "a const and two", "enum"), -1;
        int in = !e;
        for (size_t i = 0; e && i < json_array_size(e); i++) in |= json_equal(json_array_get(e, i), c);
        if (!in) return jsm_fail(m, "a const outside the", "enum"), -1;
        json_object_set(out, "const", c);
        return 0;
    }
    if (ea && eb) {
        json_t *both = json_array();
        for (size_t i = 0; i < json_array_size(ea); i++)
            for (size_t j = 0; j < json_array_size(eb); j++)
                if (json_equal(json_array_get(ea, i), json_array_get(eb, j))) {
                    json_array_append(both, json_array_get(ea, i));
                    break;
                }
        if (!json_array_size(both)) {
            json_decref(both);
            return jsm_fail(m, "no common value of", "enum"), -1;
        }
        json_object_set_new(out, "enum", both);
    } else if (ea || eb) {
        json_object_set(out, "enum", ea ? ea : eb);
    }
    return 0;
}

static int skip_key(const char *k) {
    static const char *const handled[] = {"type", "properties", "additionalProperties", "required",
                                          "enum", "const", "anyOf", "oneOf", "items", "nullable",
                                          "patternProperties", NULL};
    for (int i = 0; handled[i]; i++)
        if (!strcmp(k, handled[i])) return 1;
    return jschema_keyword_kind(k) == 0;
}

/* a and b without combinators at their top (after flatten); neither has anyOf/oneOf. */
static json_t *merge_plain(struct jsm *m, json_t *a, json_t *b) {
    json_t *out = json_object();
    for (int side = 0; side < 2; side++) {
        json_t *x = side ? b : a;
        if (json_is_true(json_object_get(x, "nullable")) &&
            (json_object_get(x, "enum") || json_object_get(x, "const"))) {
            json_decref(out);
            return jsm_fail(m, "an enum or const beside", "nullable");
        }
    }
    if (json_object_get(a, "type") || json_object_get(b, "type")) {
        /* nullable (OpenAPI) becomes "null" in the type; the result never says nullable */
        json_t *ta = json_object_get(a, "type") ? type_value(eff_types(a)) : NULL;
        json_t *tb = json_object_get(b, "type") ? type_value(eff_types(b)) : NULL;
        json_t *t = intersect_types(ta, tb);
        json_decref(ta);
        json_decref(tb);
        if (!t) {
            json_decref(out);
            return jsm_fail(m, "no common type in", "type");
        }
        json_object_set_new(out, "type", t);
    }
    if (merge_object(m, a, b, out) || merge_values(m, a, b, out)) goto fail;
    json_t *ia = json_object_get(a, "items"), *ib = json_object_get(b, "items");
    if (ia || ib) {
        json_t *r = !ia ? json_incref(ib) : !ib ? json_incref(ia)
                    : json_is_false(ia) || json_is_false(ib) ? json_false()
                    : json_is_true(ia) ? json_incref(ib) : json_is_true(ib) ? json_incref(ia)
                    : merge2(m, ia, ib);
        if (!r) goto fail;
        json_object_set_new(out, "items", r);
    }
    for (int side = 0; side < 2; side++) {
        json_t *x = side ? b : a, *y = side ? a : b;
        const char *k;
        json_t *v;
        json_object_foreach(x, k, v) {
            if (skip_key(k) || json_object_get(out, k)) continue;
            json_t *w = json_object_get(y, k);
            int larger;
            if (!w || json_equal(v, w)) {
                json_object_set(out, k, v);
            } else if (is_num_kw(k, &larger) && json_is_number(v) && json_is_number(w)) {
                double dv = json_number_value(v), dw = json_number_value(w);
                json_object_set(out, k, (larger ? dv >= dw : dv <= dw) ? v : w);
            } else {
                jsm_fail(m, "cannot intersect two different", k);
                goto fail;
            }
        }
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}


/* ---- anyOf / oneOf over the rest ------------------------------------------------------ */

static int json_type_ok(json_t *types, json_t *v) {
    unsigned t = type_bits(types);
    if (json_is_null(v)) return t & 1u;
    if (json_is_boolean(v)) return t & 2u;
    if (json_is_object(v)) return t & 4u;
    if (json_is_array(v)) return t & 8u;
    if (json_is_string(v)) return t & 32u;
    if (t & 16u) return json_is_number(v);
    return json_is_integer(v) && (t & 64u);
}

/* The finite values x allows (const or enum), or NULL. */
static json_t *values_of(json_t *x) {
    json_t *c = json_object_get(x, "const");
    if (c) return json_pack("[O]", c);
    json_t *e = json_object_get(x, "enum");
    return json_is_array(e) ? json_incref(e) : NULL;
}

static int in_array(json_t *arr, json_t *v) {
    for (size_t i = 0; i < json_array_size(arr); i++)
        if (json_equal(json_array_get(arr, i), v)) return 1;
    return 0;
}

static int excl_any(json_t *x, json_t *y, int depth, int extra_keys);

/* 1 when no value the generator writes for x (a merged schema) satisfies y: no common type,
 * no common const/enum value, or, for objects, a key y requires that x never writes (x
 * sets it to false, or x declares properties and the generator writes no other key), or a
 * property one of them requires whose schemas exclude each other. 0 when that cannot be
 * shown. The generator writes an object's declared properties and required keys, and other
 * keys (never one set to false) only where additionalProperties allows them: true or a
 * schema, or absent with extra_keys (jschema.h). */
static int excl(json_t *x, json_t *y, int depth, int extra_keys) {
    if (!json_is_object(x) || !json_is_object(y) || depth > 8) return 0;
    unsigned tx = type_bits(json_object_get(x, "type")), ty = type_bits(json_object_get(y, "type"));
    unsigned common = tx & ty;
    if ((tx & 16u) && (ty & 64u)) common |= 64u;
    if ((ty & 16u) && (tx & 64u)) common |= 64u;
    if (!common) return 1;
    json_t *vx = values_of(x), *vy = values_of(y);
    int disjoint = 0;
    if (vx) {
        disjoint = 1;
        for (size_t i = 0; i < json_array_size(vx) && disjoint; i++) {
            json_t *v = json_array_get(vx, i);
            if ((!vy || in_array(vy, v)) && json_type_ok(json_object_get(y, "type"), v)) disjoint = 0;
        }
    } else if (vy) { /* x writes values of its types only: none of y's values has one */
        disjoint = 1;
        for (size_t i = 0; i < json_array_size(vy) && disjoint; i++)
            if (json_type_ok(json_object_get(x, "type"), json_array_get(vy, i))) disjoint = 0;
    }
    json_decref(vx);
    json_decref(vy);
    if (disjoint) return 1;
    json_t *px = json_object_get(x, "properties"), *py = json_object_get(y, "properties");
    json_t *rx = json_object_get(x, "required"), *ry = json_object_get(y, "required");
    /* closed: the generator writes no key beyond x's properties and required keys (it
     * writes others only with additionalProperties true or a schema beside declared keys,
     * or when none are declared and additionalProperties is not false) */
    json_t *ax = json_object_get(x, "additionalProperties");
    int declared = (json_is_object(px) && json_object_size(px) > 0) || json_array_size(rx) > 0;
    int open = json_is_true(ax) || json_is_object(ax) || (!ax && extra_keys);
    int closed = !json_object_get(x, "patternProperties") &&
                 (declared ? !open : json_is_false(ax));
    /* the key rules below tell objects apart: only when objects are all x writes that y
     * accepts (x without a type writes objects when it has object keywords) */
    int obj_kw = px || rx || json_object_get(x, "additionalProperties") ||
                 json_object_get(x, "patternProperties");
    unsigned wx = json_object_get(x, "type") ? tx : obj_kw ? 4u : 0x7Fu, shared = wx & ty;
    if ((wx & 16u) && (ty & 64u)) shared |= 64u;
    if ((ty & 16u) && (wx & 64u)) shared |= 64u;
    if (shared != 4u) return 0;
    /* a key x always writes (required) that y forbids: false in y's properties, or not
     * among them when y allows no other key */
    json_t *ay = json_object_get(y, "additionalProperties");
    int y_closed = json_is_false(ay) && !json_object_get(y, "patternProperties");
    for (size_t i = 0; i < json_array_size(rx); i++) {
        json_t *k = json_array_get(rx, i);
        json_t *sy = json_is_string(k) && json_is_object(py) ? json_object_get(py, json_string_value(k)) : NULL;
        if (json_is_string(k) && (sy ? json_is_false(sy) : y_closed)) return 1;
    }
    /* the keys x writes: its properties and its required keys, and when not closed any
     * other key but those it sets to false */
    for (size_t i = 0; i < json_array_size(ry); i++) {
        json_t *k = json_array_get(ry, i);
        json_t *sk = json_is_string(k) && json_is_object(px) ? json_object_get(px, json_string_value(k)) : NULL;
        if (json_is_string(k) && (closed ? !sk || json_is_false(sk) : json_is_false(sk)) &&
            !in_array(rx, k))
            return 1;
    }
    if (!json_is_object(px) || !json_is_object(py)) return 0;
    const char *k;
    json_t *sx;
    json_object_foreach(px, k, sx) {
        json_t *sy = json_object_get(py, k), *ks = json_string(k);
        int req = in_array(rx, ks) || in_array(ry, ks);
        json_decref(ks);
        if (sy && req && excl_any(sx, sy, depth + 1, extra_keys)) return 1;
    }
    return 0;
}

/* excl over branch lists: every value of x (any branch) satisfies no branch of y. */
static int excl_any(json_t *x, json_t *y, int depth, int extra_keys) {
    json_t *ax = json_is_object(x) ? json_object_get(x, "anyOf") : NULL;
    json_t *ay = json_is_object(y) ? json_object_get(y, "anyOf") : NULL;
    if (ax && json_object_size(x) == 1) {
        for (size_t i = 0; i < json_array_size(ax); i++)
            if (!excl_any(json_array_get(ax, i), y, depth, extra_keys)) return 0;
        return 1;
    }
    if (ay && json_object_size(y) == 1) {
        for (size_t i = 0; i < json_array_size(ay); i++)
            if (!excl_any(x, json_array_get(ay, i), depth, extra_keys)) return 0;
        return 1;
    }
    return excl(x, y, depth, extra_keys);
}

/* A oneOf branch x that may overlap branch y only through a property x does not require,
 * whose schemas in x and y exclude each other (a discriminator left optional): x now
 * requires it, which narrows what x generates to values y rejects. 1 when done (x changed;
 * y never is), else 0. */
static int discriminate(json_t *x, json_t *y, int extra_keys) {
    json_t *px = json_object_get(x, "properties"), *py = json_object_get(y, "properties");
    if (!json_is_object(px) || !json_is_object(py) || json_object_get(x, "anyOf") ||
        json_object_get(y, "anyOf"))
        return 0;
    const char *k;
    json_t *sx;
    json_object_foreach(px, k, sx) {
        json_t *sy = json_object_get(py, k);
        if (!sy || !excl_any(sx, sy, 1, extra_keys)) continue;
        json_t *old = json_object_get(x, "required");
        json_t *req = json_is_array(old) ? json_copy(old) : json_array(), *ks = json_string(k);
        if (!in_array(req, ks)) json_array_append(req, ks);
        json_object_set_new(x, "required", req); /* a fresh array: never the input's */
        json_decref(ks);
        return excl(x, y, 0, extra_keys);
    }
    return 0;
}

/* A oneOf branch x that may overlap branch y only because x may write, among the other keys
 * it allows, a key y requires: x now never writes it (a property set to false, which the
 * generator leaves out of the other keys too). Only keys x does not declare, so the
 * declared ones are written as before, and only where x still writes other keys after that
 * (with declared properties, an absent additionalProperties writes none unless
 * extra_keys). 1 when x then provably excludes y (x changed; y never is), else 0. */
static int forbid_required(json_t *x, json_t *y, int extra_keys) {
    json_t *px = json_object_get(x, "properties"), *ry = json_object_get(y, "required");
    json_t *rx = json_object_get(x, "required"), *ax = json_object_get(x, "additionalProperties");
    if (json_object_get(x, "anyOf") || json_object_get(x, "patternProperties") ||
        (px && !json_is_object(px)) || !json_is_array(ry) || json_is_false(ax))
        return 0;
    if (!(json_is_true(ax) || json_is_object(ax) || (!ax && extra_keys))) return 0;
    for (size_t i = 0; i < json_array_size(ry); i++) {
        json_t *k = json_array_get(ry, i);
        if (!json_is_string(k) || in_array(rx, k) || (px && json_object_get(px, json_string_value(k))))
            continue;
        json_t *np = px ? json_copy(px) : json_object(); /* a fresh object: never the input's */
        json_object_set_new(np, json_string_value(k), json_false());
        json_object_set_new(x, "properties", np);
        return excl(x, y, 0, extra_keys);
    }
    return 0;
}

/* 1 when br is {"required": [...]} and nothing else that matters. */
static int required_only(json_t *br) {
    if (!json_is_object(br) || !json_is_array(json_object_get(br, "required"))) return 0;
    const char *k;
    json_t *v;
    json_object_foreach(br, k, v) {
        if (!strcmp(k, "required")) continue;
        if (!strcmp(k, "type") && json_is_string(v) && !strcmp(json_string_value(v), "object")) continue;
        if (jschema_keyword_kind(k) != 0) return 0;
    }
    return 1;
}

/* oneOf of required-key sets S_1..S_n: branch i holds when S_i is present and, for every
 * other j, some key of S_j is missing. A missing key is a property set to false (the
 * generator never writes it, nor lets it in among other keys), so branch i becomes one alternative
 * per choice of a key of S_j \ S_i for each j; none to choose from means branch i can never
 * hold alone, and it is left out. */
static int one_of_required(struct jsm *m, json_t *alts, json_t *base_rest, json_t *other,
                           json_t *list) {
    size_t n = json_array_size(alts);
    for (size_t i = 0; i < n; i++) {
        json_t *si = json_object_get(json_array_get(alts, i), "required");
        json_t *req = json_object();
        json_object_set(req, "required", si);
        json_t *p = merge2(m, base_rest, req), *base = p ? merge2(m, p, other) : NULL;
        json_decref(req);
        json_decref(p);
        if (!base) return -1;
        json_t *props = json_object_get(base, "properties");
        if (json_object_get(base, "anyOf") || !json_is_object(props)) {
            json_decref(base);
            return jsm_fail(m, "required-key branches over an object without 'properties' in", "oneOf"), -1;
        }
        json_t *breq = json_object_get(base, "required");
        /* choices[j]: keys of S_j that branch i may leave out */
        size_t combos = 1, cnt[64] = {0};
        json_t *choices[64] = {0};
        int impossible = 0;
        if (n > 64) { json_decref(base); return jsm_fail(m, "too many branches of", "oneOf"), -1; }
        for (size_t j = 0; j < n; j++) {
            if (j == i) continue;
            json_t *sj = json_object_get(json_array_get(alts, j), "required");
            choices[j] = json_array();
            for (size_t t = 0; t < json_array_size(sj); t++) {
                json_t *k = json_array_get(sj, t);
                if (!in_array(breq, k) && !in_array(choices[j], k)) json_array_append(choices[j], k);
            }
            cnt[j] = json_array_size(choices[j]);
            if (!cnt[j]) impossible = 1;
            else if (combos <= JSM_MAX_ALTS) combos *= cnt[j];
        }
        int rc = 0;
        if (!impossible && combos > JSM_MAX_ALTS) rc = -1, jsm_fail(m, "too many branches of", "oneOf");
        for (size_t c = 0; !impossible && !rc && c < combos; c++) {
            json_t *alt = json_deep_copy(base), *ap = json_object_get(alt, "properties");
            size_t rem = c;
            for (size_t j = 0; j < n; j++) {
                if (j == i) continue;
                json_t *k = json_array_get(choices[j], rem % cnt[j]);
                rem /= cnt[j];
                json_object_set_new(ap, json_string_value(k), json_false()); /* never written */
            }
            json_array_append_new(list, alt);
        }
        for (size_t j = 0; j < n; j++) json_decref(choices[j]);
        json_decref(base);
        if (rc) return -1;
    }
    return 0;
}

/* (rest and (alts[0] or alts[1] or ...)) and other, as {"anyOf": [...]}. A branch that shares
 * no value with the rest drops out. oneOf: required-key branches are made exclusive
 * (one_of_required); other branches must be shown to exclude each other (excl), else the
 * schema is refused: the generator cannot enforce "exactly one". */
static json_t *distribute(struct jsm *m, const char *kw, json_t *alts, json_t *rest, json_t *other) {
    if (!json_is_array(alts) || !json_array_size(alts)) return jsm_fail(m, "an empty", kw);
    int one_of = !strcmp(kw, "oneOf"), req_only = one_of;
    size_t n = json_array_size(alts);
    json_t *flat = json_array(), *list = json_array(), *out = NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *br = flatten(m, json_array_get(alts, i));
        if (!br) goto done;
        if (!required_only(br)) req_only = 0;
        json_array_append_new(flat, br);
    }
    if (req_only && n > 1) {
        if (one_of_required(m, flat, rest, other, list)) goto done;
    } else {
        json_t *groups = json_array();
        for (size_t i = 0; i < n; i++) {
            json_t *br = json_array_get(flat, i);
            if (!compatible(br, rest) || !compatible(br, other)) continue;
            json_t *part = merge2(m, rest, br);
            json_t *r = part ? merge2(m, part, other) : NULL;
            json_decref(part);
            if (!r) {
                json_decref(groups);
                goto done;
            }
            json_array_append_new(groups, r);
        }
        /* oneOf: what branch i generates (narrowed where that helps) must satisfy no other
         * branch as the schema gives it */
        json_t *gen_groups = one_of ? json_array() : json_incref(groups);
        for (size_t i = 0; one_of && i < json_array_size(groups); i++) {
            json_t *gi = json_copy(json_array_get(groups, i));
            json_array_append_new(gen_groups, gi);
            for (size_t j = 0; j < json_array_size(groups); j++) {
                json_t *gj = json_array_get(groups, j);
                if (i == j || excl_any(gi, gj, 0, m->extra_keys) ||
                    discriminate(gi, gj, m->extra_keys) || forbid_required(gi, gj, m->extra_keys))
                    continue;
                json_decref(groups);
                json_decref(gen_groups);
                jsm_fail(m, "branches that may overlap in", "oneOf");
                goto done;
            }
        }
        json_decref(groups);
        groups = gen_groups;
        for (size_t i = 0; i < json_array_size(groups); i++) {
            json_t *r = json_array_get(groups, i), *sub = json_object_get(r, "anyOf");
            if (sub && json_object_size(r) == 1) json_array_extend(list, sub);
            else json_array_append(list, r);
        }
        json_decref(groups);
    }
    if (json_array_size(list) > JSM_MAX_ALTS) jsm_fail(m, "too many branches of", kw);
    else if (!json_array_size(list)) jsm_fail(m, "no branch compatible with the other keywords of", kw);
    else out = json_pack("{sO}", "anyOf", list);
done:
    json_decref(flat);
    json_decref(list);
    return out;
}

static json_t *merge2(struct jsm *m, json_t *a0, json_t *b0) {
    if (m->failed) return NULL;
    if (json_is_true(a0)) return json_incref(b0);
    if (json_is_true(b0)) return json_incref(a0);
    if (!json_is_object(a0) || !json_is_object(b0)) return jsm_fail(m, "a false or non-object schema beside", "allOf");
    if (++m->depth > JSM_MAX_DEPTH) return jsm_fail(m, "nesting too deep:", "allOf");
    json_t *a = flatten(m, a0), *b = a ? flatten(m, b0) : NULL, *out = NULL;
    if (!a || !b) goto done;
    /* distribute a branch list of either side */
    const char *kw = NULL;
    json_t *alts = NULL, *other = NULL, *rest = NULL;
    for (int side = 0; side < 2 && !alts; side++) {
        json_t *x = side ? b : a;
        kw = json_object_get(x, "anyOf") ? "anyOf" : json_object_get(x, "oneOf") ? "oneOf" : NULL;
        if (kw) {
            alts = json_object_get(x, kw);
            other = side ? a : b;
            rest = json_deep_copy(x);
            json_object_del(rest, kw);
        }
    }
    if (alts) {
        out = distribute(m, kw, alts, rest, other);
        json_decref(rest);
    } else {
        out = merge_plain(m, a, b);
    }
done:
    json_decref(a);
    json_decref(b);
    m->depth--;
    return out;
}

json_t *jschema_merge(json_t *root, json_t *const *parts, size_t n, int extra_keys,
                      const char *ptr, char *err, size_t errlen) {
    struct jsm m = {.root = root, .ptr = ptr, .err = err, .errlen = errlen,
                    .extra_keys = extra_keys};
    json_t *acc = json_true();
    for (size_t i = 0; i < n && acc; i++) {
        json_t *r = merge2(&m, acc, parts[i]);
        json_decref(acc);
        acc = r;
    }
    /* merge2(true, x) is x itself: resolve what is left at its top ($ref, allOf), and
     * distribute a branch list over its siblings, so the result has no combinator beside
     * other keywords. */
    if (acc && json_is_object(acc)) {
        json_t *r = flatten(&m, acc);
        json_decref(acc);
        acc = r;
    }
    const char *kw = !acc || !json_is_object(acc) ? NULL
                     : json_object_get(acc, "anyOf") ? "anyOf"
                     : json_object_get(acc, "oneOf") ? "oneOf" : NULL;
    if (kw) {
        json_t *rest = json_deep_copy(acc), *alts = json_object();
        json_object_del(rest, kw);
        json_object_set(alts, kw, json_object_get(acc, kw));
        json_decref(acc);
        acc = merge2(&m, rest, alts);
        json_decref(rest);
        json_decref(alts);
    }
    return acc;
}
