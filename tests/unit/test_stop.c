/* Unit tests for scheduler/stop: stop strings are never leaked, also when split across
 * tokens, overlapping, or at the very start. */
#include "scheduler/stop.h"
#include "tests/unit/harness.h"

/* Feed pieces one by one; collect released text; return the matched flag. */
static int run(const char *const *stops, int n_stops, const char *const *pieces, int n_pieces,
               char *got, size_t cap) {
    struct stop_state s;
    T_ASSERT(stop_init(&s, stops, n_stops, 64) == 0);
    size_t n = 0;
    int matched = 0;
    const char *out;
    size_t len;
    for (int i = 0; i < n_pieces && !matched; i++) {
        int rc = stop_push(&s, pieces[i], strlen(pieces[i]), &out, &len);
        T_ASSERT(rc >= 0);
        T_ASSERT(n + len < cap);
        memcpy(got + n, out, len);
        n += len;
        matched = rc;
    }
    if (!matched) {
        stop_flush(&s, &out, &len);
        memcpy(got + n, out, len);
        n += len;
    }
    got[n] = 0;
    stop_free(&s);
    return matched;
}

static void test_no_stops_pass_through(void) {
    const char *p[] = {"Hel", "lo", " world"};
    char got[64];
    T_ASSERT(run(NULL, 0, p, 3, got, sizeof(got)) == 0 && !strcmp(got, "Hello world"));
}

static void test_split_across_tokens(void) {
    const char *stops[] = {"END"};
    const char *p[] = {"abc E", "N", "D tail"};
    char got[64];
    T_ASSERT(run(stops, 1, p, 3, got, sizeof(got)) == 1);
    T_ASSERT(!strcmp(got, "abc "));
    /* Hold-back: after "abc E" only "abc " is released. */
    struct stop_state s;
    T_ASSERT(stop_init(&s, stops, 1, 64) == 0);
    const char *out;
    size_t len;
    T_ASSERT(stop_push(&s, "abc E", 5, &out, &len) == 0 && len == 4 && !memcmp(out, "abc ", 4));
    T_ASSERT(stop_push(&s, "N", 1, &out, &len) == 0 && len == 0);
    /* A false start is released once it can no longer match. */
    T_ASSERT(stop_push(&s, "x", 1, &out, &len) == 0 && len == 3 && !memcmp(out, "ENx", 3));
    stop_free(&s);
}

static void test_at_start(void) {
    const char *stops[] = {"\n\n"};
    const char *p[] = {"\n", "\nmore"};
    char got[64];
    T_ASSERT(run(stops, 1, p, 2, got, sizeof(got)) == 1 && got[0] == 0);
    const char *q[] = {"\n\nabc"};
    T_ASSERT(run(stops, 1, q, 1, got, sizeof(got)) == 1 && got[0] == 0);
}

static void test_overlapping_and_earliest(void) {
    /* Both match; the earlier one wins even if listed second. */
    const char *stops[] = {"cde", "bc"};
    const char *p[] = {"a", "b", "cdef"};
    char got[64];
    T_ASSERT(run(stops, 2, p, 3, got, sizeof(got)) == 1 && !strcmp(got, "a"));
    /* A stop that is a prefix of the text's continuation of another candidate. */
    const char *s2[] = {"aab"};
    const char *p2[] = {"a", "a", "a", "b", "z"};
    T_ASSERT(run(s2, 1, p2, 5, got, sizeof(got)) == 1 && !strcmp(got, "a"));
    const char *s3[] = {"abab"};
    const char *p3[] = {"ab", "ab", "ab"};
    T_ASSERT(run(s3, 1, p3, 3, got, sizeof(got)) == 1 && got[0] == 0);
}

static void test_no_match_flushes_all(void) {
    const char *stops[] = {"STOP"};
    const char *p[] = {"ST", "O"};
    char got[64];
    T_ASSERT(run(stops, 1, p, 2, got, sizeof(got)) == 0 && !strcmp(got, "STO"));
}

static void test_utf8_stop(void) {
    /* "é" is two bytes; a stop of "日本" split in the middle of the text stream. */
    const char *stops[] = {"日本"};
    const char *p[] = {"caf\xc3\xa9 ", "日", "本語"};
    char got[64];
    T_ASSERT(run(stops, 1, p, 3, got, sizeof(got)) == 1 && !strcmp(got, "caf\xc3\xa9 "));
    /* A held-back prefix never splits a code point: "日" followed by "曜" releases both. */
    const char *q[] = {"日", "曜"};
    T_ASSERT(run(stops, 1, q, 2, got, sizeof(got)) == 0 && !strcmp(got, "日曜"));
}

static void test_empty_and_bounds(void) {
    const char *stops[] = {"", "x"};
    struct stop_state s;
    T_ASSERT(stop_init(&s, stops, 2, 4) == 0 && s.n == 1);
    const char *out;
    size_t len;
    T_ASSERT(stop_push(&s, "toolong", 7, &out, &len) == -1);
    T_ASSERT(stop_push(&s, "abx", 3, &out, &len) == 1 && len == 2);
    T_ASSERT(s.match_index == 1); /* the caller's index, the ignored "" counted */
    T_ASSERT(stop_push(&s, "more", 4, &out, &len) == 1 && len == 0);
    stop_free(&s);
}

static void test_match_index_earliest(void) {
    const char *stops[] = {"cde", "bc", "b"};
    struct stop_state s;
    T_ASSERT(stop_init(&s, stops, 3, 16) == 0);
    const char *out;
    size_t len;
    /* "b" and "bc" start at the same byte: the first listed of the earliest wins. */
    T_ASSERT(stop_push(&s, "abcdef", 6, &out, &len) == 1 && s.match_index == 1);
    stop_free(&s);
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {
        T_CASE(test_no_stops_pass_through), T_CASE(test_split_across_tokens),
        T_CASE(test_at_start), T_CASE(test_overlapping_and_earliest),
        T_CASE(test_no_match_flushes_all), T_CASE(test_utf8_stop), T_CASE(test_empty_and_bounds),
        T_CASE(test_match_index_earliest),
        {0}};
    return t_main(argc, argv, cases);
}
