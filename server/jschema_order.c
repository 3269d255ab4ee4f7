/*
 * jschema_order — objects whose declared keys may come in any order (jschema_opts.any_order),
 * the key counts minProperties / maxProperties, and patternProperties beside declared
 * keys: part of the jschema module (jschema_int.h).
 *
 * JSON Schema puts no order on an object's keys; the default grammar writes them in the
 * schema's order. The exact language of "each declared key at most once, the required
 * ones all, in any order" needs to know which keys are written: one rule per subset S of
 * the n declared keys (T_S: S written, something written), so 2^n rules; objects with more
 * keys keep the schema's order (jschema.c).
 *
 * Also patternProperties beside declared keys (jschema_pattern_values): each declared key
 * is matched against every pattern (jschema_pattern_keys), and one that matches takes the
 * pattern's schema as well; the object then writes its declared keys only.
 */
#include "server/jschema.h"
#include "server/jschema_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long jschema_any_order_cost(const struct jsc_keys *k) {
    long per = k->okv ? (long)strlen(k->okv) + 24 : 0;
    for (int i = 0; i < k->n; i++) per += ((long)strlen(k->kvs[i]) + 24) / 2; /* in half the rules */
    return per << k->n;
}

int jschema_key_deps(struct jsc *c, json_t *s, const char *ptr, const char *const *names,
                     struct jsc_keys *k) {
    json_t *deps = json_object_get(s, "dependencies"), *v;
    const char *key;
    if (!deps) return 0;
    if (!json_is_object(deps)) return jfail(c, "'dependencies' must be an object at %s", ptr);
    json_object_foreach(deps, key, v) {
        int i = 0;
        while (i < k->n && strcmp(names[i], key) != 0) i++;
        if (!json_is_array(v) || (i == k->n && k->okv))
            return jfail(c, "unsupported keyword 'dependencies' (a schema, or a key that may be "
                         "written among the other keys) at %s/dependencies", ptr);
        if (i == k->n) continue; /* never written */
        for (size_t j = 0; j < json_array_size(v); j++) {
            json_t *d = json_array_get(v, j);
            int t = 0;
            if (!json_is_string(d)) return jfail(c, "'dependencies' must hold strings at %s", ptr);
            while (t < k->n && strcmp(names[t], json_string_value(d)) != 0) t++;
            if (t == k->n) k->never |= 1u << i; /* a key never written: i never is either */
            else k->dep[i] |= 1u << t;
        }
    }
    for (int changed = 1; changed;) { /* a key that depends on one never written */
        changed = 0;
        for (int i = 0; i < k->n; i++)
            if (!(k->never & (1u << i)) && (k->dep[i] & k->never)) k->never |= 1u << i, changed = 1;
    }
    if (k->never & k->req)
        return jfail(c, "a required key's 'dependencies' cannot be met at %s/dependencies", ptr);
    return 0;
}

/* T_S may end when the required keys and every dependency of the keys of S are in S. */
static int may_end(const struct jsc_keys *k, unsigned S) {
    if ((S & k->req) != k->req) return 0;
    for (int i = 0; i < k->n; i++)
        if ((S & (1u << i)) && (k->dep[i] & ~S)) return 0;
    return 1;
}

int jschema_gen_any_order(struct jsc *c, const struct jsc_keys *k, struct jsc_buf *b) {
    const int n = k->n;
    if (n < 0 || n > JSC_ANY_ORDER_MAX) return jfail(c, "too many keys for any order");
    const unsigned full = (1u << n) - 1;
    const int T0 = c->next_id; /* T_S is rule T0 + S */
    c->next_id += (int)full + 1;
    const int F = c->next_id++;
    struct jsc_buf t = {0};
    for (unsigned S = 0; S <= full; S++) {
        if (S & k->never) continue;
        t.n = 0;
        int alts = 0;
        for (int i = 0; i < n; i++) {
            if ((S | k->never) & (1u << i)) continue;
            jsc_buf_printf(&t, "%s\",\" ws %s %s-%d", alts++ ? " | " : "", k->kvs[i], c->name,
                           T0 + (int)(S | (1u << i)));
        }
        if (k->okv) jsc_buf_printf(&t, "%s\",\" ws %s %s-%d", alts++ ? " | " : "", k->okv, c->name, T0 + (int)S);
        if (may_end(k, S)) jsc_buf_printf(&t, "%s\"\"", alts++ ? " | " : "");
        jsc_buf_printf(c->out, "%s-%d ::= %s\n", c->name, T0 + (int)S, alts ? t.p : "\"\"");
    }
    t.n = 0;
    int alts = 0;
    for (int i = 0; i < n; i++)
        if (!(k->never & (1u << i)))
            jsc_buf_printf(&t, "%s%s %s-%d", alts++ ? " | " : "", k->kvs[i], c->name, T0 + (1 << i));
    if (k->okv) jsc_buf_printf(&t, "%s%s %s-%d", alts++ ? " | " : "", k->okv, c->name, T0);
    if (!k->req && !k->nonempty) jsc_buf_printf(&t, "%s\"\"", alts++ ? " | " : "");
    if (!alts) {
        jsc_buf_free(&t);
        return jfail(c, "no object satisfies minProperties and dependencies");
    }
    jsc_buf_printf(c->out, "%s-%d ::= %s\n", c->name, F, t.p);
    const int oom = t.oom;
    jsc_buf_free(&t);
    jsc_buf_printf(b, "\"{\" ws %s-%d \"}\"", c->name, F);
    return oom || b->oom ? jfail(c, "schema too large") : 0;
}

/* minProperties: implied by the required keys, or 1 (the object is not empty); other values
 * are refused. maxProperties: implied when the object writes at most that many declared keys
 * and no others; with others allowed, none are written beside declared keys (narrower, still
 * valid), and without declared keys their count is capped. */
int jschema_object_counts(struct jsc *c, json_t *s, const char *ptr, int n, int n_req,
                          int *extra, int *nonempty, long long *cap) {
    long long mn = 0, mx = -1;
    if (jschema_count(c, s, "minProperties", &mn, ptr) || jschema_count(c, s, "maxProperties", &mx, ptr))
        return -1;
    *nonempty = 0;
    *cap = -1;
    if (mn > n_req && mn > 1)
        return jfail(c, "unsupported keyword 'minProperties' (more than 1 beyond the required "
                     "keys) at %s/minProperties", ptr);
    if (mn > n_req) *nonempty = 1;
    if (mx >= 0 && n > mx)
        return jfail(c, "unsupported keyword 'maxProperties' (fewer than the declared keys) at "
                     "%s/maxProperties", ptr);
    const int fixed = !c->any_order || (n < 2 && !json_object_get(s, "dependencies"));
    if (mx >= 0 && *extra != -3 && n > 0 && n == n_req && fixed && mx > n)
        *cap = mx - n + 1; /* every declared key written: then at most mx - n others (the
                            * tail after a written key takes cap - 1) */
    else if (mx >= 0 && *extra != -3 && n > 0) *extra = -3;
    else if (mx >= 0 && *extra != -3) *cap = mx;
    if (*nonempty && (mx == 0 || (n == 0 && *extra == -3)))
        return jfail(c, "no object satisfies minProperties at %s", ptr);
    return 0;
}

int jschema_pattern_values(struct jsc *c, json_t *pp, struct jsc_prop *pr, int n, json_t *owned,
                           int *hits, const char *ptr) {
    if (!json_is_object(pp))
        return jfail(c, "'patternProperties' must be an object at %s/patternProperties", ptr);
    const char **names = malloc((size_t)n * sizeof(*names));
    unsigned char *hit = malloc((size_t)n);
    json_t **parts = calloc((size_t)n, sizeof(*parts));
    int rc = names && hit && parts ? 0 : jfail(c, "out of memory");
    for (int i = 0; !rc && i < n; i++) names[i] = pr[i].key;
    const char *pat;
    json_t *pv;
    json_object_foreach(pp, pat, pv) {
        char e2[200];
        if (rc) break;
        if (jschema_pattern_keys(pat, names, n, hit, e2, sizeof e2)) {
            rc = jfail(c, "unsupported keyword 'patternProperties' at %s/patternProperties: %s",
                       ptr, e2);
            break;
        }
        for (int i = 0; i < n; i++) {
            if (!hit[i]) continue;
            if (!parts[i] && !(parts[i] = json_array())) {
                rc = jfail(c, "out of memory");
                break;
            }
            if (pr[i].schema && json_array_size(parts[i]) == 0)
                json_array_append(parts[i], pr[i].schema);
            json_array_append(parts[i], pv);
        }
    }
    *hits = 0;
    for (int i = 0; i < n; i++) {
        if (!parts[i]) continue;
        ++*hits;
        if (!rc) {
            json_t *v = json_array_size(parts[i]) == 1
                              ? json_incref(json_array_get(parts[i], 0))
                              : json_pack("{sO}", "allOf", parts[i]);
            if (!v || json_array_append_new(owned, v)) rc = jfail(c, "out of memory");
            else pr[i].schema = v;
        }
        json_decref(parts[i]);
    }
    free(names);
    free(hit);
    free(parts);
    return rc;
}
