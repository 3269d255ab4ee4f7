/*
 * jschema — JSON Schema to GBNF. See jschema.h for what is supported.
 *
 * Every (sub)schema becomes one rule NAME-N; $ref targets get their rule id before their
 * body is generated, so recursive schemas are recursive rules. Objects list their
 * properties in the schema's order with a chain of rules that makes the optional ones
 * skippable while commas stay right (F_i: nothing written yet; T_i: something written).
 */
#include "server/jschema.h"
#include "server/jschema_int.h"
#include "server/jschema_g4.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSC_MAX_BYTES (4u << 20) /* grammar text per schema */
#define JSC_MAX_DEPTH 128        /* nested subschemas, $ref targets included */

/* ---- context ------------------------------------------------------------------------ */

int jschema_fail(struct jsc *c, const char *fmt, ...) {
    if (c->failed) return -1;
    c->failed = 1;
    if (c->err && c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* ptr + "/" + key with ~ and / escaped (truncated to fit). */
static void ptr_join(char *dst, size_t cap, const char *ptr, const char *key) {
    size_t n = (size_t)snprintf(dst, cap, "%s/", ptr);
    for (const char *k = key; *k && n + 3 < cap; k++) {
        if (*k == '~') { dst[n++] = '~'; dst[n++] = '0'; }
        else if (*k == '/') { dst[n++] = '~'; dst[n++] = '1'; }
        else dst[n++] = *k;
    }
    if (n < cap) dst[n] = 0;
}

static void ptr_idx(char *dst, size_t cap, const char *ptr, const char *key, size_t i) {
    snprintf(dst, cap, "%s/%s/%zu", ptr, key, i);
}

static const char *const annotations[] = {
    "title", "description", "default", "examples", "$comment", "$schema", "$id", "$anchor",
    "readOnly", "writeOnly", "deprecated", "$defs", "definitions", "contentMediaType",
    "contentEncoding", "discriminator", "strict", "name", "$vocabulary", "example", "xml",
    "externalDocs", NULL,
};
static const char *const supported[] = {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems",
    "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "minLength",
    "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "nullable", "patternProperties", "additionalItems", "minProperties",
    "maxProperties", "dependencies", "multipleOf", NULL,
};
static const char *const refused[] = {
    "not", "if", "then", "else", "dependentRequired", "dependentSchemas",
    "propertyNames", "uniqueItems",
    "contains", "minContains", "maxContains", "unevaluatedProperties",
    "unevaluatedItems", "$dynamicRef", "$recursiveRef", NULL,
};

static int in_list(const char *const *l, const char *k) {
    for (; *l; l++)
        if (strcmp(*l, k) == 0) return 1;
    return 0;
}

int jschema_keyword_kind(const char *k) {
    if (in_list(annotations, k)) return 0;
    return in_list(supported, k) ? 1 : in_list(refused, k) ? 2 : 0;
}

static int gen(struct jsc *c, json_t *s, const char *ptr);
static int gen_any(struct jsc *c, json_t *s, const char *ptr);

static int new_id(struct jsc *c) { return c->next_id++; }

/* Writes "NAME-id ::= body\n". */
static void emit_rule(struct jsc *c, int id, const struct jsc_buf *body) {
    jsc_buf_printf(c->out, "%s-%d ::= ", c->name, id);
    if (body->n) jsc_buf_add(c->out, body->p, body->n);
    else jsc_buf_add(c->out, "\"\"", sizeof("\"\"") - 1);
    jsc_buf_add(c->out, "\n", sizeof("\n") - 1);
}

int jschema_add_rule(struct jsc *c, const struct jsc_buf *body) {
    int id = new_id(c);
    emit_rule(c, id, body);
    return id;
}

static void ref_name(struct jsc *c, struct jsc_buf *b, int id) {
    jsc_buf_printf(b, " %s-%d ", c->name, id);
}

static int lit_json(struct jsc *c, struct jsc_buf *b, json_t *v, const char *ptr) {
    return jschema_lit(c, b, v, ptr);
}

/* ---- $ref --------------------------------------------------------------------------- */

json_t *jschema_resolve(json_t *root, const char *ref) {
    if (strcmp(ref, "#") == 0) return root;
    if (strncmp(ref, "#/", 2) != 0) return NULL;
    json_t *cur = root;
    const char *p = ref + 2;
    while (cur && *p) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char key[256];
        size_t k = 0;
        for (size_t i = 0; i < n && k + 1 < sizeof key; i++) {
            if (p[i] == '~' && i + 1 < n && (p[i + 1] == '0' || p[i + 1] == '1')) {
                key[k++] = p[i + 1] == '0' ? '~' : '/';
                i++;
            } else {
                key[k++] = p[i];
            }
        }
        key[k] = 0;
        if (json_is_object(cur)) cur = json_object_get(cur, key);
        else if (json_is_array(cur)) cur = json_array_get(cur, (size_t)strtoul(key, NULL, 10));
        else cur = NULL;
        p += n;
        if (*p == '/') p++;
    }
    return cur;
}

static int gen_ref(struct jsc *c, const char *ref, const char *ptr) {
    for (int i = 0; i < c->n_refs; i++)
        if (strcmp(c->refs[i].ref, ref) == 0) return c->refs[i].id;
    json_t *t = jschema_resolve(c->root, ref);
    if (!t) return jfail(c, "unknown $ref '%.200s' at %s", ref, ptr);
    if (c->n_refs == JSC_MAX_REFS) return jfail(c, "too many $ref targets at %s", ptr);
    int id = new_id(c);
    c->refs[c->n_refs].ref = strdup(ref);
    if (!c->refs[c->n_refs].ref) return jfail(c, "out of memory");
    c->refs[c->n_refs++].id = id;
    int inner = gen(c, t, ref); /* nesting through $ref counts: a chain of refs is a stack */
    if (inner < 0) return -1;
    struct jsc_buf b = {0};
    ref_name(c, &b, inner);
    emit_rule(c, id, &b);
    jsc_buf_free(&b);
    return id;
}

/* ---- objects ------------------------------------------------------------------------ */

static int cmp_prop(const void *a, const void *b) {
    return strcmp(((const struct jsc_prop *)a)->key, ((const struct jsc_prop *)b)->key);
}

/* The GBNF of `"key" ws ":" ws value ws` for property p (in notation: the key as
 * jschema_g4_key writes it), appended to kv. 0 or -1. */
static int prop_kv(struct jsc *c, const struct jsc_prop *p, const char *ptr, struct jsc_buf *kv) {
    if (c->g4) {
        jschema_g4_key(p->key, c->q, kv);
    } else {
        json_t *ks = json_string(p->key);
        char *kd = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
        json_decref(ks);
        if (!kd) return jfail(c, "bad property name at %s", ptr);
        jsc_buf_lit(kv, kd, strlen(kd));
        free(kd);
    }
    if (p->rule >= 0) jsc_buf_printf(kv, " ws \":\" ws %s-%d ws", c->name, p->rule);
    else jsc_buf_add(kv, " ws \":\" ws value ws", sizeof(" ws \":\" ws value ws") - 1);
    return kv->oom ? jfail(c, "schema too large") : 0;
}

/* The GBNF of one other key and its value: extra and key_rule as gen_object computes them. */
static void other_kv(struct jsc *c, int extra, int key_rule, char *kv, size_t cap) {
    char kname[64];
    snprintf(kname, sizeof kname, "%s", c->g4 ? "okey" : "string"); /* notation: bare keys */
    if (key_rule >= 0) snprintf(kname, sizeof kname, "%s-%d", c->name, key_rule);
    if (extra == -2) snprintf(kv, cap, "%s ws \":\" ws value ws", kname);
    else snprintf(kv, cap, "%s ws \":\" ws %s-%d ws", kname, c->name, extra);
}

/* gen_object's body with the keys in any order (jschema_gen_any_order); extra and key_rule
 * as gen_object computes them. 1 when that would pass the schema's budget for such objects
 * (c->order_bytes; nothing written: the caller keeps the schema's order). */
static int object_any_order(struct jsc *c, json_t *s, const struct jsc_prop *pr, int n, int extra,
                            int key_rule, int nonempty, const char *ptr, struct jsc_buf *b) {
    struct jsc_buf kv[JSC_ANY_ORDER_MAX] = {{0}};
    struct jsc_keys k = {.n = n, .nonempty = nonempty};
    const char *names[JSC_ANY_ORDER_MAX];
    char okv[160];
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        rc = prop_kv(c, &pr[i], ptr, &kv[i]);
        k.kvs[i] = kv[i].p;
        names[i] = pr[i].key;
        if (pr[i].required) k.req |= 1u << i;
    }
    if (!rc && extra != -3) other_kv(c, extra, key_rule, okv, sizeof okv);
    if (!rc && extra != -3) k.okv = okv;
    if (!rc) rc = jschema_key_deps(c, s, ptr, names, &k);
    long cost = rc ? 0 : jschema_any_order_cost(&k);
    if (!rc && cost > c->order_bytes) rc = 1;
    else if (!rc) {
        c->order_bytes -= cost;
        rc = jschema_gen_any_order(c, &k, b);
    }
    for (int i = 0; i < n; i++) jsc_buf_free(&kv[i]);
    return rc;
}

static int gen_object(struct jsc *c, json_t *s, const char *ptr, struct jsc_buf *b) {
    json_t *props = json_object_get(s, "properties");
    json_t *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    json_t *pp = json_object_get(s, "patternProperties"), *owned = NULL;
    int pp_hits = 0; /* declared keys a pattern matches */
    char p2[512];
    if (props && !json_is_object(props)) return jfail(c, "'properties' must be an object at %s", ptr);
    if (req && !json_is_array(req)) return jfail(c, "'required' must be an array at %s", ptr);
    if (addl && !json_is_object(addl) && !json_is_boolean(addl))
        return jfail(c, "'additionalProperties' must be a schema at %s", ptr);
    if (!addl && c->extra_keys) addl = json_true(); /* JSON Schema's meaning (jschema.h) */
    size_t np = props ? json_object_size(props) : 0, nr = req ? json_array_size(req) : 0;
    struct jsc_prop *pr = calloc(np + nr + 1, sizeof(*pr));
    const char **names = NULL; /* the declared keys, for the keys that are none of them */
    if (!pr) return jfail(c, "out of memory");
    int n = 0, rc = -1;
    const char *key;
    json_t *val;
    if (props)
        json_object_foreach(props, key, val) pr[n++] = (struct jsc_prop){key, val, 0, -1};
    for (size_t i = 0; i < nr; i++) {
        json_t *r = json_array_get(req, i);
        if (!json_is_string(r)) {
            jfail(c, "'required' must hold strings at %s/required", ptr);
            goto done;
        }
        int found = 0;
        for (int j = 0; j < n; j++)
            if (strcmp(pr[j].key, json_string_value(r)) == 0) {
                pr[j].required = 1;
                found = 1;
            }
        if (!found) { /* not declared: additionalProperties decides its value */
            if (json_is_false(addl)) {
                jfail(c, "required property '%.100s' is not allowed by additionalProperties "
                      "false at %s/required", json_string_value(r), ptr);
                goto done;
            }
            pr[n++] = (struct jsc_prop){json_string_value(r), json_is_object(addl) ? addl : NULL, 1, -1};
        }
    }
    if (pp && n > 0 && !c->g4 &&
        (!(owned = json_array()) || jschema_pattern_values(c, pp, pr, n, owned, &pp_hits, ptr))) {
        if (!owned) jfail(c, "out of memory");
        goto done;
    }
    if (c->g4) qsort(pr, (size_t)n, sizeof(*pr), cmp_prop); /* the template sorts keys */
    for (int i = 0; i < n; i++) {
        ptr_join(p2, sizeof p2, ptr, "properties");
        char p3[512];
        ptr_join(p3, sizeof p3, p2, pr[i].key);
        pr[i].rule = !pr[i].schema ? -2 : pr[i].required ? gen(c, pr[i].schema, p3)
                                                         : gen_any(c, pr[i].schema, p3);
        if (pr[i].rule == -1) goto done;
    }
    /* an optional property no value satisfies is left out (the object then never has it);
     * whether extra keys are written still depends on the declared ones */
    names = calloc((size_t)n + 1, sizeof(*names));
    if (!names) {
        jfail(c, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) names[i] = pr[i].key;
    int n_decl = n, kept = 0;
    for (int i = 0; i < n; i++)
        if (pr[i].rule != JSC_EMPTY) pr[kept++] = pr[i];
    n = kept;
    /* extra keys: only for objects without declared properties */
    int extra = -3; /* -3: none; -2: any value; >= 0: that rule */
    int key_rule = -1; /* the rule of an extra key's text; -1: any string */
    const char *upat = NULL; /* the one pattern, when it matches every key (".*") */
    json_t *uval = NULL;
    if (json_is_object(pp) && json_object_size(pp) == 1) json_object_foreach(pp, upat, uval) break;
    if (upat && strcmp(upat, "") && strcmp(upat, ".*") && strcmp(upat, "^.*") &&
        strcmp(upat, ".*$"))
        upat = NULL; /* (not "^.*$": "." stops at a line break) */
    if (upat && n_decl > 0 && !c->g4) {
        /* every key matches: the declared ones (with the pattern's schema, pattern_values),
         * then any others, each with the pattern's schema; additionalProperties is moot */
        key_rule = jschema_gen_other_key(c, names, n_decl);
        ptr_join(p2, sizeof p2, ptr, "patternProperties");
        char p3[512];
        ptr_join(p3, sizeof p3, p2, upat);
        if (key_rule < 0 || (extra = gen(c, uval, p3)) < 0) goto done;
    } else if (pp && n_decl > 0 && !c->g4 && (json_object_size(pp) != 1 || pp_hits)) {
        /* declared keys only, each with the pattern schemas its key matches (pattern_values):
         * another key would have to be kept apart from every pattern */
    } else if (pp) {
        /* Keys matching the one pattern, each with its schema, after any declared keys
         * (none of which it matches): valid whatever additionalProperties says of others. */
        const char *pat;
        json_t *pv = NULL;
        if (json_is_object(pp) && json_object_size(pp) == 1) json_object_foreach(pp, pat, pv) break;
        if (!pv || c->g4) {
            jfail(c, "unsupported keyword 'patternProperties' (several patterns on an object "
                  "without properties or required keys, or in Gemma 4's notation) at "
                  "%s/patternProperties", ptr);
            goto done;
        }
        char e2[200];
        struct jsc_buf kb = {0};
        jsc_buf_add(&kb, "\"\\\"\" (", sizeof("\"\\\"\" (") - 1);
        if (jschema_pattern(pat, 0, &kb, e2, sizeof e2)) {
            jsc_buf_free(&kb);
            jfail(c, "unsupported keyword 'patternProperties' at %s/patternProperties: %s", ptr, e2);
            goto done;
        }
        jsc_buf_add(&kb, ") \"\\\"\"", sizeof(") \"\\\"\"") - 1);
        key_rule = new_id(c);
        emit_rule(c, key_rule, &kb);
        jsc_buf_free(&kb);
        ptr_join(p2, sizeof p2, ptr, "patternProperties");
        char p3[512];
        ptr_join(p3, sizeof p3, p2, pat);
        extra = gen(c, pv, p3);
        if (extra < 0) goto done;
    } else if (n_decl == 0 && (!addl || json_is_true(addl))) {
        extra = -2;
    } else if (n_decl == 0 && json_is_object(addl)) {
        ptr_join(p2, sizeof p2, ptr, "additionalProperties");
        extra = gen(c, addl, p2);
        if (extra < 0) goto done;
    } else if (n_decl > 0 && !c->g4 && (json_is_true(addl) || json_is_object(addl))) {
        /* declared properties and allowed others: after the declared ones, keys that are
         * none of them (an absent additionalProperties writes only the declared ones unless
         * extra_keys, as llama.cpp does: always valid, and no invented keys) */
        key_rule = jschema_gen_other_key(c, names, n_decl);
        if (key_rule < 0) goto done;
        if (json_is_true(addl)) {
            extra = -2;
        } else {
            ptr_join(p2, sizeof p2, ptr, "additionalProperties");
            extra = gen(c, addl, p2);
            if (extra < 0) goto done;
        }
    }
    int n_req = 0, nonempty;
    long long cap;
    for (int i = 0; i < n; i++) n_req += pr[i].required;
    if (jschema_object_counts(c, s, ptr, n, n_req, &extra, &nonempty, &cap)) goto done;
    json_t *deps = json_object_get(s, "dependencies");
    if (c->any_order && !c->g4 && n <= JSC_ANY_ORDER_MAX && (n >= 2 || deps)) {
        rc = object_any_order(c, s, pr, n, extra, key_rule, nonempty, ptr, b);
        if (rc <= 0) goto done;
        rc = -1;
    }
    if (deps) { /* the key sets they need are known in any order only */
        jfail(c, "unsupported keyword 'dependencies' (with keys in any order only, on objects "
              "of up to %d declared keys) at %s/dependencies", JSC_ANY_ORDER_MAX, ptr);
        goto done;
    }
    /* kv_i text */
    int *F = malloc((size_t)(n + 1) * sizeof(int)), *T = malloc((size_t)(n + 1) * sizeof(int));
    if (!F || !T) {
        free(F);
        free(T);
        jfail(c, "out of memory");
        goto done;
    }
    for (int i = 0; i <= n; i++) {
        F[i] = new_id(c);
        T[i] = new_id(c);
    }
    /* T_n / F_n: the tail of extra keys */
    struct jsc_buf t = {0};
    if (extra == -3) {
        emit_rule(c, T[n], &t);
        emit_rule(c, F[n], &t);
    } else if (cap == 0) { /* maxProperties 0 */
        emit_rule(c, T[n], &t);
        emit_rule(c, F[n], &t);
    } else {
        char kv[160];
        other_kv(c, extra, key_rule, kv, sizeof kv);
        if (cap > 0) jsc_buf_printf(&t, "(\",\" ws %s){0,%lld}", kv, cap - 1);
        else jsc_buf_printf(&t, "(\",\" ws %s)*", kv);
        emit_rule(c, T[n], &t);
        t.n = 0;
        jsc_buf_printf(&t, nonempty ? "%s %s-%d" : "(%s %s-%d)?", kv, c->name, T[n]);
        emit_rule(c, F[n], &t);
    }
    for (int i = n - 1; i >= 0; i--) {
        struct jsc_buf kv = {0};
        if (prop_kv(c, &pr[i], ptr, &kv)) {
            jsc_buf_free(&kv);
            jsc_buf_free(&t);
            free(F);
            free(T);
            goto done;
        }
        t.n = 0;
        if (pr[i].required) jsc_buf_printf(&t, "\",\" ws %s %s-%d", kv.p, c->name, T[i + 1]);
        else jsc_buf_printf(&t, "(\",\" ws %s)? %s-%d", kv.p, c->name, T[i + 1]);
        emit_rule(c, T[i], &t);
        t.n = 0;
        if (pr[i].required) jsc_buf_printf(&t, "%s %s-%d", kv.p, c->name, T[i + 1]);
        else if (nonempty && extra == -3 && i == n - 1) /* F_n writes nothing: not empty */
            jsc_buf_printf(&t, "%s %s-%d", kv.p, c->name, T[i + 1]);
        else jsc_buf_printf(&t, "%s %s-%d | %s-%d", kv.p, c->name, T[i + 1], c->name, F[i + 1]);
        emit_rule(c, F[i], &t);
        jsc_buf_free(&kv);
    }
    jsc_buf_printf(b, "\"{\" ws %s-%d \"}\"", c->name, F[0]);
    jsc_buf_free(&t);
    free(F);
    free(T);
    rc = 0;
done:
    json_decref(owned);
    free(names);
    free(pr);
    return rc;
}

/* ---- arrays ------------------------------------------------------------------------- */

static int gen_array(struct jsc *c, json_t *s, const char *ptr, struct jsc_buf *b) {
    json_t *pre = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
    long long mn = 0, mx = -1;
    if (jschema_count(c, s, "minItems", &mn, ptr) || jschema_count(c, s, "maxItems", &mx, ptr)) return -1;
    if (pre && !json_is_array(pre)) return jfail(c, "'prefixItems' must be an array at %s", ptr);
    const char *pre_kw = "prefixItems";
    if (json_is_array(items)) {
        /* draft 4-7 tuples: items [..] are prefixItems, additionalItems the rest (absent:
         * anything); with items as a schema, additionalItems means nothing */
        if (pre) return jfail(c, "unsupported keyword combination (items as an array beside prefixItems) at %s", ptr);
        pre = items;
        pre_kw = "items";
        items = json_object_get(s, "additionalItems");
        if (items && !json_is_object(items) && !json_is_boolean(items))
            return jfail(c, "'additionalItems' must be a schema at %s/additionalItems", ptr);
    }
    size_t k = pre ? json_array_size(pre) : 0;
    if (json_is_false(items) && (mx < 0 || mx > (long long)k)) mx = (long long)k;
    if (mx >= 0 && mn > mx) return jfail(c, "minItems > maxItems at %s", ptr);
    int *pr = calloc(k + 1, sizeof(int));
    if (!pr) return jfail(c, "out of memory");
    char p2[512];
    for (size_t i = 0; i < k; i++) {
        ptr_idx(p2, sizeof p2, ptr, pre_kw, i);
        pr[i] = gen(c, json_array_get(pre, i), p2);
        if (pr[i] < 0) {
            free(pr);
            return -1;
        }
    }
    int item = -2;
    if (items && !json_is_boolean(items)) {
        ptr_join(p2, sizeof p2, ptr, pre_kw[0] == 'i' ? "additionalItems" : "items");
        item = gen(c, items, p2);
        if (item < 0) {
            free(pr);
            return -1;
        }
    }
    char it[64];
    if (item >= 0) snprintf(it, sizeof it, "%s-%d ws", c->name, item);
    else snprintf(it, sizeof it, "value ws");
    jsc_buf_add(b, "\"[\" ws ", sizeof("\"[\" ws ") - 1);
    /* elements j = 0 .. k-1 explicit, then the rest */
    int open = 0;
    for (size_t j = 0;; j++) {
        if (mx >= 0 && (long long)j >= mx) break;
        const char *sep = j > 0 ? "\",\" ws " : "";
        if (j < k) {
            if ((long long)j >= mn) {
                jsc_buf_add(b, "(", sizeof("(") - 1);
                open++;
            }
            jsc_buf_printf(b, "%s%s-%d ws ", sep, c->name, pr[j]);
            continue;
        }
        long long lo = mn - (long long)j > 0 ? mn - (long long)j : 0;
        long long hi = mx < 0 ? -1 : mx - (long long)j;
        if (j == 0) {
            if (lo == 0) {
                jsc_buf_printf(b, "(%s", it);
                if (hi < 0) jsc_buf_printf(b, " (\",\" ws %s)*)?", it);
                else if (hi > 1) jsc_buf_printf(b, " (\",\" ws %s){0,%lld})?", it, hi - 1);
                else jsc_buf_add(b, ")?", sizeof(")?") - 1);
            } else {
                jsc_buf_printf(b, "%s", it);
                if (hi < 0) jsc_buf_printf(b, " (\",\" ws %s){%lld,}", it, lo - 1);
                else if (hi > 1) jsc_buf_printf(b, " (\",\" ws %s){%lld,%lld}", it, lo - 1, hi - 1);
            }
        } else if (hi < 0) {
            jsc_buf_printf(b, "(\",\" ws %s){%lld,}", it, lo);
        } else if (hi > 0) {
            jsc_buf_printf(b, "(\",\" ws %s){%lld,%lld}", it, lo, hi);
        }
        break;
    }
    for (int i = 0; i < open; i++) jsc_buf_add(b, ")?", sizeof(")?") - 1);
    jsc_buf_add(b, " \"]\"", sizeof(" \"]\"") - 1);
    free(pr);
    return 0;
}

static int gen_typed(struct jsc *c, json_t *s, const char *type, const char *ptr,
                     struct jsc_buf *b) {
    if (strcmp(type, "string") == 0) return jschema_gen_string(c, s, ptr, b);
    if (strcmp(type, "integer") == 0) return jschema_gen_integer(c, s, ptr, b);
    if (strcmp(type, "number") == 0) return jschema_gen_number(c, s, ptr, b);
    if (strcmp(type, "boolean") == 0) {
        jsc_buf_add(b, "(\"true\" | \"false\")", sizeof("(\"true\" | \"false\")") - 1);
        return 0;
    }
    if (strcmp(type, "null") == 0) {
        jsc_buf_add(b, "\"null\"", sizeof("\"null\"") - 1);
        return 0;
    }
    if (strcmp(type, "object") == 0) return gen_object(c, s, ptr, b);
    if (strcmp(type, "array") == 0) return gen_array(c, s, ptr, b);
    return jfail(c, "unknown type '%.40s' at %s/type", type, ptr);
}

/* ---- combinators -------------------------------------------------------------------- */

static int gen_alts(struct jsc *c, json_t *arr, const char *kw, const char *ptr,
                    struct jsc_buf *b) {
    if (!json_is_array(arr) || json_array_size(arr) == 0)
        return jfail(c, "'%s' must be a non-empty array at %s/%s", kw, ptr, kw);
    char p2[512];
    int written = 0;
    for (size_t i = 0; i < json_array_size(arr); i++) {
        ptr_idx(p2, sizeof p2, ptr, kw, i);
        int r = gen_any(c, json_array_get(arr, i), p2);
        if (r == JSC_EMPTY) continue; /* a branch no value satisfies */
        if (r < 0) return -1;
        if (written++) jsc_buf_add(b, " |", sizeof(" |") - 1);
        ref_name(c, b, r);
    }
    return written ? 0 : JSC_EMPTY;
}

/* s (a $ref, anyOf, oneOf or allOf with other keywords, or an allOf of several parts) as
 * one schema: the intersection jschema_merge computes. nullable stays with s. */
static int gen_merged(struct jsc *c, json_t *s, const char *ptr, struct jsc_buf *b) {
    json_t *self = json_deep_copy(s);
    if (!self) return jfail(c, "out of memory");
    json_object_del(self, "nullable");
    char err[512] = "";
    json_t *parts[1] = {self};
    json_t *m = jschema_merge(c->root, parts, 1, c->extra_keys, ptr, err, sizeof err);
    json_decref(self);
    if (!m) return jfail(c, "%s", err[0] ? err : "unsupported keyword combination");
    int r = gen(c, m, ptr);
    json_decref(m);
    if (r < 0) return -1;
    ref_name(c, b, r);
    return 0;
}

static int type_allows(json_t *type, json_t *v) {
    if (!type) return 1;
    if (json_is_string(type)) return jschema_type_is(json_string_value(type), v) == 1;
    for (size_t i = 0; i < json_array_size(type); i++)
        if (json_is_string(json_array_get(type, i)) &&
            jschema_type_is(json_string_value(json_array_get(type, i)), v) == 1)
            return 1;
    return 0;
}

static int in_enum(json_t *en, json_t *v) {
    for (size_t i = 0; i < json_array_size(en); i++)
        if (json_equal(json_array_get(en, i), v)) return 1;
    return 0;
}

/* One rule for schema s; returns its id, -1, or JSC_EMPTY. */
static int gen_any(struct jsc *c, json_t *s, const char *ptr) {
    if (c->failed) return -1;
    if (c->out->oom) return jfail(c, "schema too large (grammar over %zu bytes)", c->out->limit);
    if (json_is_true(s)) {
        int id = new_id(c);
        struct jsc_buf b = {0};
        jsc_buf_add(&b, "value", sizeof("value") - 1);
        emit_rule(c, id, &b);
        jsc_buf_free(&b);
        return id;
    }
    if (json_is_false(s)) { /* an optional property or anyOf branch of it is left out */
        snprintf(c->empty, sizeof c->empty, "schema 'false' at %s accepts nothing", ptr);
        return JSC_EMPTY;
    }
    if (!json_is_object(s)) return jfail(c, "a schema must be an object or a boolean at %s", ptr);
    if (++c->depth > JSC_MAX_DEPTH) return jfail(c, "schema nested too deeply at %s", ptr);
    struct jsc_buf b = {0};
    int id = new_id(c), rc = jschema_gen_values(c, s, ptr, &b);
    if (rc) { /* a finite set of values, each checked against the whole schema */
        c->depth--;
        if (rc == 1 && !c->failed) emit_rule(c, id, &b);
        jsc_buf_free(&b);
        return rc == 1 && !c->failed ? id : rc == JSC_EMPTY && !c->failed ? JSC_EMPTY : -1;
    }
    json_t *pos = json_object_get(s, "not") ? jschema_drop_not(c->root, s) : NULL;
    if (pos) { /* not, as positive keywords in an allOf part */
        rc = gen_any(c, pos, ptr);
        json_decref(pos);
        c->depth--;
        return rc;
    }
    const char *k;
    json_t *v;
    int n_valid = 0;
    json_object_foreach(s, k, v) {
        if (in_list(refused, k)) {
            if (strcmp(k, "uniqueItems") == 0 && json_is_false(v)) continue;
            return jfail(c, "unsupported keyword '%s' at %s/%s", k, ptr, k);
        }
        if (in_list(supported, k) && strcmp(k, "nullable") != 0) n_valid++;
    }
    json_t *ref = json_object_get(s, "$ref");
    json_t *anyof = json_object_get(s, "anyOf"), *oneof = json_object_get(s, "oneOf");
    json_t *allof = json_object_get(s, "allOf"), *cst = json_object_get(s, "const");
    json_t *en = json_object_get(s, "enum"), *type = json_object_get(s, "type");
    json_t *nullable = json_object_get(s, "nullable");
    int add_null = json_is_true(nullable);
    if (((ref || anyof || oneof || allof) && n_valid > 1) ||
        (oneof && !anyof && json_is_array(oneof) && json_array_size(oneof) > 1)) {
        /* a combinator with sibling keywords: their intersection as one schema; a oneOf of
         * several branches: they must exclude each other (jschema_merge checks) */
        rc = gen_merged(c, s, ptr, &b);
    } else if (ref) {
        if (!json_is_string(ref)) rc = jfail(c, "'$ref' must be a string at %s/$ref", ptr);
        else {
            int r = gen_ref(c, json_string_value(ref), ptr);
            if (r < 0) rc = -1;
            else ref_name(c, &b, r);
        }
    } else if (anyof || oneof) {
        rc = gen_alts(c, anyof ? anyof : oneof, anyof ? "anyOf" : "oneOf", ptr, &b);
    } else if (allof) {
        if (!json_is_array(allof) || json_array_size(allof) == 0)
            rc = jfail(c, "'allOf' must be a non-empty array at %s/allOf", ptr);
        else if (json_array_size(allof) == 1) {
            char p2[512];
            ptr_idx(p2, sizeof p2, ptr, "allOf", 0);
            int r = gen(c, json_array_get(allof, 0), p2);
            if (r < 0) rc = -1;
            else ref_name(c, &b, r);
        } else {
            rc = gen_merged(c, s, ptr, &b);
        }
    } else if (cst || en) {
        /* the values that also have an allowed type and satisfy the other keywords, where
         * jschema_value_fits can tell for every value; refused where it cannot */
        int others = n_valid - 1 - (type != NULL) - (cst && en), checked = 0;
        if (others > 0 && jschema_values_checkable(s, cst, en)) others = 0, checked = 1;
        if (others > 0) {
            rc = jfail(c, "unsupported keyword combination (%s with other keywords) at %s",
                       cst ? "const" : "enum", ptr);
        } else if (en && (!json_is_array(en) || json_array_size(en) == 0)) {
            rc = jfail(c, "'enum' must be a non-empty array at %s/enum", ptr);
        } else {
            json_t *vals = cst ? json_pack("[O]", cst) : json_incref(en);
            int n_ok = 0;
            for (size_t i = 0; !rc && i < json_array_size(vals); i++) {
                json_t *ev = json_array_get(vals, i);
                if (!type_allows(type, ev) || (cst && en && !in_enum(en, ev)) ||
                    (checked && !jschema_value_fits(s, ev)))
                    continue;
                if (n_ok++) jsc_buf_add(&b, " | ", sizeof(" | ") - 1);
                rc = lit_json(c, &b, ev, ptr);
            }
            json_decref(vals);
            if (!rc && n_ok == 0 && add_null) { /* only null is left (nullable) */
                jsc_buf_add(&b, "\"null\"", sizeof("\"null\"") - 1);
                add_null = 0;
            } else if (!rc && n_ok == 0) {
                snprintf(c->empty, sizeof c->empty,
                         "no value of '%s' fits the schema's type and other keywords at %s",
                         cst ? "const" : "enum", ptr);
                rc = JSC_EMPTY;
            }
        }
    } else if (json_is_string(type)) {
        rc = gen_typed(c, s, json_string_value(type), ptr, &b);
    } else if (json_is_array(type)) {
        if (json_array_size(type) == 0) rc = jfail(c, "'type' must not be empty at %s/type", ptr);
        for (size_t i = 0; !rc && i < json_array_size(type); i++) {
            json_t *t = json_array_get(type, i);
            if (!json_is_string(t)) {
                rc = jfail(c, "'type' must hold strings at %s/type", ptr);
                break;
            }
            if (i) jsc_buf_add(&b, " | ", sizeof(" | ") - 1);
            jsc_buf_add(&b, "(", sizeof("(") - 1);
            rc = gen_typed(c, s, json_string_value(t), ptr, &b);
            jsc_buf_add(&b, ")", sizeof(")") - 1);
        }
    } else if (type) {
        rc = jfail(c, "'type' must be a string or an array at %s/type", ptr);
    } else {
        const char *t = jschema_infer_type(s);
        if (t) rc = gen_typed(c, s, t, ptr, &b);
        else jsc_buf_add(&b, "value", sizeof("value") - 1);
    }
    if (rc == JSC_EMPTY && add_null) { /* anyOf with no branch left, but nullable */
        jsc_buf_add(&b, "\"null\"", sizeof("\"null\"") - 1);
        rc = 0;
        add_null = 0;
    }
    if (!rc && add_null) jsc_buf_add(&b, " | \"null\"", sizeof(" | \"null\"") - 1);
    c->depth--;
    if (!rc && !c->failed) emit_rule(c, id, &b);
    jsc_buf_free(&b);
    if (rc == JSC_EMPTY && !c->failed) return JSC_EMPTY;
    return rc || c->failed ? -1 : id;
}

/* gen_any, with a subschema that accepts no value an error. */
static int gen(struct jsc *c, json_t *s, const char *ptr) {
    int r = gen_any(c, s, ptr);
    if (r == JSC_EMPTY) return jfail(c, "%s", c->empty);
    return r;
}

/* ---- entry points ------------------------------------------------------------------- */

static int rules(json_t *schema, const char *name, struct jsc_buf *out, int base,
                 int32_t g4_quote, const struct jschema_opts *opt, char *err, size_t errlen) {
    struct jsc *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    c->root = schema;
    c->name = name;
    c->out = out;
    c->err = err;
    c->errlen = errlen;
    c->g4 = g4_quote >= 0;
    c->extra_keys = opt && opt->extra_keys;
    c->any_order = opt && opt->any_order;
    c->order_bytes = JSC_ORDER_BYTES;
    if (c->g4) snprintf(c->q, sizeof c->q, "<[%d]>", (int)g4_quote);
    else snprintf(c->q, sizeof c->q, "\"\\\"\"");
    if (!out->limit) out->limit = JSC_MAX_BYTES;
    if (base && c->g4) jschema_g4_base(c->q, out);
    else if (base) jschema_json_base(out);
    int r = gen(c, schema, "#");
    if (r >= 0) jsc_buf_printf(out, "%s ::= %s-%d\n", name, name, r);
    if (out->oom && !c->failed) jfail(c, "schema too large (grammar over %zu bytes)", out->limit);
    for (int i = 0; i < c->n_refs; i++) free(c->refs[i].ref);
    int failed = c->failed;
    free(c);
    return failed ? -1 : 0;
}

int jschema_rules(json_t *schema, const char *name, struct jsc_buf *out, int base,
                  const struct jschema_opts *opt, char *err, size_t errlen) {
    return rules(schema, name, out, base, -1, opt, err, errlen);
}

int jschema_rules_g4(json_t *schema, const char *name, struct jsc_buf *out, int base,
                     int32_t quote_id, const struct jschema_opts *opt, char *err, size_t errlen) {
    return rules(schema, name, out, base, quote_id < 0 ? 0 : quote_id, opt, err, errlen);
}

int jschema_to_gbnf(json_t *schema, const struct jschema_opts *opt, struct jsc_buf *out,
                    char *err, size_t errlen) {
    if (jschema_rules(schema, "schema", out, 1, opt, err, errlen)) return -1;
    jsc_buf_add(out, "root ::= schema\n", sizeof("root ::= schema\n") - 1);
    return out->oom ? -1 : 0;
}

int jschema_any_object(struct jsc_buf *out) {
    jschema_json_base(out);
    jsc_buf_add(out, "root ::= object\n", sizeof("root ::= object\n") - 1);
    return out->oom ? -1 : 0;
}
