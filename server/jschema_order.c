/*
 * jschema_order — objects whose declared keys may come in any order (jschema_opts.any_order),
 * and the key counts minProperties / maxProperties: part of the jschema module
 * (jschema_int.h).
 *
 * JSON Schema puts no order on an object's keys; the default grammar writes them in the
 * schema's order. The exact language of "each declared key at most once, the required
 * ones all, in any order" needs to know which keys are written: one rule per subset S of
 * the n declared keys (T_S: S written, something written), so 2^n rules; objects with more
 * keys keep the schema's order (jschema.c).
 */
#include "server/jschema.h"
#include "server/jschema_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long jschema_any_order_cost(char *const *kvs, int n, const char *okv) {
    long per = okv ? (long)strlen(okv) + 24 : 0;
    for (int k = 0; k < n; k++) per += ((long)strlen(kvs[k]) + 24) / 2; /* in half the rules */
    return per << n;
}

int jschema_gen_any_order(struct jsc *c, char *const *kvs, const int *required, int n,
                          const char *okv, int nonempty, struct jsc_buf *b) {
    if (n < 0 || n > JSC_ANY_ORDER_MAX) return jfail(c, "too many keys for any order");
    const unsigned full = (1u << n) - 1;
    unsigned req = 0;
    for (int k = 0; k < n; k++)
        if (required[k]) req |= 1u << k;
    const int T0 = c->next_id; /* T_S is rule T0 + S */
    c->next_id += (int)full + 1;
    const int F = c->next_id++;
    struct jsc_buf t = {0};
    for (unsigned S = 0; S <= full; S++) {
        t.n = 0;
        int alts = 0;
        for (int k = 0; k < n; k++) {
            if (S & (1u << k)) continue;
            jsc_buf_printf(&t, "%s\",\" ws %s %s-%d", alts++ ? " | " : "", kvs[k], c->name,
                           T0 + (int)(S | (1u << k)));
        }
        if (okv) jsc_buf_printf(&t, "%s\",\" ws %s %s-%d", alts++ ? " | " : "", okv, c->name, T0 + (int)S);
        if ((S & req) == req) jsc_buf_printf(&t, "%s\"\"", alts++ ? " | " : "");
        jsc_buf_printf(c->out, "%s-%d ::= %s\n", c->name, T0 + (int)S, t.p);
    }
    t.n = 0;
    int alts = 0;
    for (int k = 0; k < n; k++)
        jsc_buf_printf(&t, "%s%s %s-%d", alts++ ? " | " : "", kvs[k], c->name, T0 + (1 << k));
    if (okv) jsc_buf_printf(&t, "%s%s %s-%d", alts++ ? " | " : "", okv, c->name, T0);
    if (!req && !nonempty) jsc_buf_printf(&t, "%s\"\"", alts++ ? " | " : "");
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
    if (mx >= 0 && *extra != -3 && n > 0) *extra = -3;
    else if (mx >= 0 && *extra != -3) *cap = mx;
    if (*nonempty && (mx == 0 || (n == 0 && *extra == -3)))
        return jfail(c, "no object satisfies minProperties at %s", ptr);
    return 0;
}
