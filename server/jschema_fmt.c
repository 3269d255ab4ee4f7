/*
 * jschema_fmt — the parts of JSON Schema → GBNF that are languages of their own: integer
 * ranges and string formats here, the regex subset of "pattern" in jschema_rx.c. See
 * jschema.h.
 */
#include "server/jschema_fmt.h"

#include <stdarg.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static const char base_rules[] =
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n"
    "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws ( string ws \":\" ws value ws (\",\" ws string ws \":\" ws value ws)* )? \"}\"\n"
    "array ::= \"[\" ws ( value ws (\",\" ws value ws)* )? \"]\"\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "char1 ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" [\"\\\\/bfnrt]\n"
    "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
    "number ::= integer (\".\" [0-9]{1,15})? ([eE] [-+]? [0-9]{1,2})?\n";

void jschema_json_base(struct jsc_buf *out) { jsc_buf_add(out, base_rules, sizeof base_rules - 1); }


/* ---- integer ranges ----------------------------------------------------------------- */

/* Same-length digit strings a..b (leading zeros allowed) as a GBNF sequence. */
static void fixed(const char *a, const char *b, int n, struct jsc_buf *o) {
    if (n == 0) {
        jsc_buf_add(o, "\"\"", sizeof("\"\"") - 1);
        return;
    }
    if (a[0] == b[0]) {
        jsc_buf_printf(o, "\"%c\" ", a[0]);
        fixed(a + 1, b + 1, n - 1, o);
        return;
    }
    int a0 = 1, b9 = 1;
    for (int i = 1; i < n; i++) {
        if (a[i] != '0') a0 = 0;
        if (b[i] != '9') b9 = 0;
    }
    if (a0 && b9) {
        jsc_buf_printf(o, "[%c-%c]", a[0], b[0]);
        if (n > 1) jsc_buf_printf(o, " [0-9]{%d}", n - 1);
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    jsc_buf_printf(o, "(\"%c\" (", a[0]);
    fixed(a + 1, nines, n - 1, o);
    jsc_buf_add(o, ")", sizeof(")") - 1);
    if (a[0] + 1 <= b[0] - 1) {
        jsc_buf_printf(o, " | [%c-%c]", a[0] + 1, b[0] - 1);
        if (n > 1) jsc_buf_printf(o, " [0-9]{%d}", n - 1);
    }
    jsc_buf_printf(o, " | \"%c\" (", b[0]);
    fixed(zeros, b + 1, n - 1, o);
    jsc_buf_add(o, "))", sizeof("))") - 1);
}

static long long pow10ll(int d) {
    long long p = 1;
    while (d-- > 0) p *= 10;
    return p;
}

static int ndigits(long long v) {
    int d = 1;
    while (v >= 10) {
        v /= 10;
        d++;
    }
    return d;
}

/* Non-negative a..b without leading zeros. */
static void nonneg(long long a, long long b, struct jsc_buf *o) {
    int da = ndigits(a), db = ndigits(b);
    jsc_buf_add(o, "(", sizeof("(") - 1);
    for (int d = da; d <= db; d++) {
        long long lo = d == da ? a : pow10ll(d - 1), hi = d == db ? b : pow10ll(d) - 1;
        char sa[24], sb[24];
        snprintf(sa, sizeof sa, "%lld", lo);
        snprintf(sb, sizeof sb, "%lld", hi);
        if (d > da) jsc_buf_add(o, " | ", sizeof(" | ") - 1);
        jsc_buf_add(o, "(", sizeof("(") - 1);
        fixed(sa, sb, d, o);
        jsc_buf_add(o, ")", sizeof(")") - 1);
    }
    jsc_buf_add(o, ")", sizeof(")") - 1);
}

/* Non-negative integers >= a (up to 16 digits). */
static void nonneg_from(long long a, struct jsc_buf *o) {
    int da = ndigits(a);
    jsc_buf_add(o, "(", sizeof("(") - 1);
    nonneg(a, pow10ll(da) - 1, o);
    if (da < 16) jsc_buf_printf(o, " | [1-9] [0-9]{%d,15}", da);
    jsc_buf_add(o, ")", sizeof(")") - 1);
}

void jschema_int_range(long long lo, int has_lo, long long hi, int has_hi, struct jsc_buf *o) {
    int alts = 0;
    /* negative part: -(|hi'| .. |lo'|) */
    if (!has_lo || lo < 0) {
        long long nlo = has_hi && hi < 0 ? -hi : 1; /* smallest magnitude */
        jsc_buf_add(o, "\"-\" ", sizeof("\"-\" ") - 1);
        if (has_lo) nonneg(nlo, -lo, o);
        else nonneg_from(nlo, o);
        alts++;
    }
    if (!has_hi || hi >= 0) {
        long long plo = has_lo && lo > 0 ? lo : 0;
        if (alts) jsc_buf_add(o, " | ", sizeof(" | ") - 1);
        if (has_hi) nonneg(plo, hi, o);
        else nonneg_from(plo, o);
    }
}

/* ---- formats ------------------------------------------------------------------------ */

#define D2 "[0-9] [0-9]"
#define DATE                                                                                  \
    "[0-9]{4} \"-\" ((\"01\" | \"03\" | \"05\" | \"07\" | \"08\" | \"10\" | \"12\") \"-\" "   \
    "(\"0\" [1-9] | [12] [0-9] | \"3\" [01]) | (\"04\" | \"06\" | \"09\" | \"11\") \"-\" "    \
    "(\"0\" [1-9] | [12] [0-9] | \"30\") | \"02\" \"-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]))"
#define TIME                                                                                  \
    "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "     \
    "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])"

#define OCTET "(\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9])"

/* RFC 3986 (appendix A), as its ABNF reads; none of its characters needs a JSON escape. */
#define HEX "[0-9a-fA-F]"
#define PCT "\"%\" " HEX " " HEX
#define PCHAR "([a-zA-Z0-9._~!$&'()*+,;=:@-] | " PCT ")"
#define SEG_NZ_NC "([a-zA-Z0-9._~!$&'()*+,;=@-] | " PCT ")+"
#define QUERY "(" PCHAR " | [/?])*"
#define H16 HEX "{1,4}"
#define H16C "(" H16 " \":\")"
#define IPV4 "(" OCTET " \".\" " OCTET " \".\" " OCTET " \".\" " OCTET ")"
#define LS32 "(" H16 " \":\" " H16 " | " IPV4 ")"
#define IPV6                                                                                  \
    "(" H16C "{6} " LS32 " | \"::\" " H16C "{5} " LS32 " | (" H16 ")? \"::\" " H16C        \
    "{4} " LS32 " | (" H16C "{0,1} " H16 ")? \"::\" " H16C "{3} " LS32 " | (" H16C          \
    "{0,2} " H16 ")? \"::\" " H16C "{2} " LS32 " | (" H16C "{0,3} " H16 ")? \"::\" " H16C \
    " " LS32 " | (" H16C "{0,4} " H16 ")? \"::\" " LS32 " | (" H16C "{0,5} " H16            \
    ")? \"::\" " H16 " | (" H16C "{0,6} " H16 ")? \"::\")"
#define HOST                                                                                  \
    "(\"[\" (" IPV6 " | \"v\" " HEX "+ \".\" [a-zA-Z0-9._~!$&'()*+,;=:-]+) \"]\" | "     \
    "([a-zA-Z0-9._~!$&'()*+,;=-] | " PCT ")*)"
#define AUTHORITY                                                                             \
    "((([a-zA-Z0-9._~!$&'()*+,;=:-] | " PCT ")* \"@\")? " HOST " (\":\" [0-9]*)?)"
#define PATH_ABEMPTY "(\"/\" " PCHAR "*)*"
#define PATH_ABS "\"/\" (" PCHAR "+ (\"/\" " PCHAR "*)*)?"
#define TAIL "(\"?\" " QUERY ")? (\"#\" " QUERY ")?"
#define URI                                                                                   \
    "[a-zA-Z] [a-zA-Z0-9+.-]* \":\" (\"//\" " AUTHORITY " " PATH_ABEMPTY " | " PATH_ABS    \
    " | " PCHAR "+ (\"/\" " PCHAR "*)*)? " TAIL
#define RELATIVE_REF                                                                          \
    "(\"//\" " AUTHORITY " " PATH_ABEMPTY " | " PATH_ABS " | " SEG_NZ_NC " (\"/\" " PCHAR  \
    "*)*)? " TAIL

/* RFC 3339 appendix A. */
#define DUR_TIME                                                                              \
    "\"T\" ([0-9]+ \"H\" ([0-9]+ \"M\" ([0-9]+ \"S\")?)? | [0-9]+ \"M\" ([0-9]+ "    \
    "\"S\")? | [0-9]+ \"S\")"
#define DURATION                                                                              \
    "\"P\" (([0-9]+ \"D\" | [0-9]+ \"M\" ([0-9]+ \"D\")? | [0-9]+ \"Y\" ([0-9]+ "    \
    "\"M\" ([0-9]+ \"D\")?)?) (" DUR_TIME ")? | " DUR_TIME " | [0-9]+ \"W\")"

const char *jschema_format(const char *fmt) {
    if (!fmt) return NULL;
    if (strcmp(fmt, "date") == 0) return "(" DATE ")";
    if (strcmp(fmt, "time") == 0) return "(" TIME ")";
    if (strcmp(fmt, "date-time") == 0) return "(" DATE " \"T\" " TIME ")";
    if (strcmp(fmt, "uuid") == 0)
        return "([0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12})";
    if (strcmp(fmt, "email") == 0)
        return "([a-zA-Z0-9_+-] [a-zA-Z0-9._+-]{0,31} \"@\" [a-zA-Z0-9] [a-zA-Z0-9-]{0,30} "
               "(\".\" [a-zA-Z0-9] [a-zA-Z0-9-]{0,15}){1,3})";
    if (strcmp(fmt, "hostname") == 0)
        return "([a-zA-Z0-9] ([a-zA-Z0-9-]{0,20} [a-zA-Z0-9])? (\".\" [a-zA-Z0-9] "
               "([a-zA-Z0-9-]{0,20} [a-zA-Z0-9])?){0,4})";
    if (strcmp(fmt, "ipv4") == 0) return IPV4;
    if (strcmp(fmt, "ipv6") == 0) return IPV6;
    if (strcmp(fmt, "uri") == 0) return "(" URI ")";
    if (strcmp(fmt, "uri-reference") == 0) return "((" URI ") | (" RELATIVE_REF "))";
    if (strcmp(fmt, "duration") == 0) return "(" DURATION ")";
    return NULL;
}

int jschema_format_len(const char *fmt, long *mn, long *mx) {
    static const struct {
        const char *name;
        long mn, mx;
    } t[] = {
        {"date", 10, 10}, {"time", 9, 21}, {"date-time", 20, 32}, {"uuid", 36, 36},
        {"email", 5, 115}, {"hostname", 1, 114}, {"ipv4", 7, 15}, {"ipv6", 2, 45},
        {"uri", 2, -1}, {"uri-reference", 0, -1}, {"duration", 3, -1},
    };
    for (size_t i = 0; fmt && i < sizeof t / sizeof t[0]; i++)
        if (strcmp(fmt, t[i].name) == 0) {
            *mn = t[i].mn;
            *mx = t[i].mx;
            return 0;
        }
    return -1;
}
