/*
 * harness — the unit-test runner every tests/unit/test_*.c uses.
 *
 * Each test runs in a forked child with a timeout, so a crash or hang fails that test only.
 * One line per test ("ok", "FAIL", "SKIP <reason>"), then the closing line
 * "N passed, N failed, N skipped". A test calls T_SKIP("reason") when it cannot run here
 * (for example without a GPU); skipped tests are never counted as passed.
 *
 * Usage:
 *   static void test_x(void) { T_ASSERT(1 + 1 == 2); }
 *   int main(int argc, char **argv) {
 *       static const struct t_case cases[] = { T_CASE(test_x), {0} };
 *       return t_main(argc, argv, cases);
 *   }
 * `test_foo name` runs only the tests whose name contains `name`; T_NOFORK=1 runs in-process
 * (for gdb). T_TIMEOUT=seconds overrides the default 120 s.
 */
#ifndef GEMMAD_HARNESS_H
#define GEMMAD_HARNESS_H

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* One xorshift64 step (13, 7, 17) of *s, returning the new state: the tests' deterministic
 * random source (each test takes the bits it wants from it). */
static inline uint64_t t_xorshift64(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

struct t_case {
    const char *name;
    void (*fn)(void);
};
#define T_CASE(f) {#f, f}

#define T_EXIT_SKIP 77

#define T_FAIL(...)                                                                            \
    do {                                                                                       \
        fprintf(stderr, "    %s:%d: ", __FILE__, __LINE__);                                   \
        fprintf(stderr, __VA_ARGS__);                                                          \
        fprintf(stderr, "\n");                                                                 \
        fflush(stderr);                                                                        \
        _exit(1);                                                                              \
    } while (0)

#define T_ASSERT(cond)                                                                         \
    do {                                                                                       \
        if (!(cond)) T_FAIL("assertion failed: %s", #cond);                                    \
    } while (0)

#define T_ASSERTF(cond, ...)                                                                   \
    do {                                                                                       \
        if (!(cond)) T_FAIL(__VA_ARGS__);                                                      \
    } while (0)

#define T_SKIP(...)                                                                            \
    do {                                                                                       \
        printf("# SKIP ");                                                                     \
        printf(__VA_ARGS__);                                                                   \
        printf("\n");                                                                          \
        fflush(stdout);                                                                        \
        _exit(T_EXIT_SKIP);                                                                    \
    } while (0)

/* Path of a file under the repository root (tests run from there). */
static inline const char *t_model_path(void) {
    const char *p = getenv("GEMMAD_TEST_MODEL");
    return p ? p : "models/gemma-3-270m-q4_k_m.gguf";
}

#ifdef GEMMAD_MODEL_H
/* The test model (for tests that include engine/model.h first); skips when it is absent. */
static inline struct model *t_model_or_skip(void) {
    struct model *m = NULL;
    char err[256];
    if (access(t_model_path(), R_OK)) T_SKIP("model %s not present", t_model_path());
    T_ASSERTF(model_load(t_model_path(), &m, err, sizeof err) == 0, "%s", err);
    return m;
}
#endif

/* A forked test leaves with _exit, which skips LeakSanitizer's check at exit: under ASan the
 * child runs the check itself, so memory a test (or the code under test) leaves allocated
 * fails that test. Other builds: nothing. */
#define T_KEEP_MAX 256
static void *t_kept[T_KEEP_MAX]; /* buffers a test keeps alive to its end (t_keep) */
static int t_n_kept;

/* Memory that must stay valid until the test returns (a buffer a gguf_file points into):
 * freed after the test, before the leak check. */
static inline void t_keep(void *p) {
    if (t_n_kept < T_KEEP_MAX) t_kept[t_n_kept++] = p;
}

static inline void t_free_kept(void) {
    while (t_n_kept > 0) free(t_kept[--t_n_kept]);
}

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
static inline void t_leak_check_child(void) {
    t_free_kept();
    if (__lsan_do_recoverable_leak_check()) {
        printf("  leak: memory still allocated when the test returned (report above)\n");
        fflush(stdout);
        _exit(1);
    }
}
#else
static inline void t_leak_check_child(void) { t_free_kept(); }
#endif

static inline int t_main(int argc, char **argv, const struct t_case *cases) {
    int passed = 0, failed = 0, skipped = 0;
    int nofork = getenv("T_NOFORK") != NULL;
    int timeout = getenv("T_TIMEOUT") ? atoi(getenv("T_TIMEOUT")) : 120;
    const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    for (const struct t_case *c = cases; c->name; c++) {
        if (argc > 1 && !strstr(c->name, argv[1])) continue;
        fflush(stdout);
        int status = 0;
        if (nofork) {
            c->fn();
            status = 0;
        } else {
            pid_t pid = fork();
            if (pid == 0) {
                alarm((unsigned)timeout);
                c->fn();
                fflush(stdout);
                t_leak_check_child();
                _exit(0);
            }
            if (pid < 0 || waitpid(pid, &status, 0) < 0) status = 1 << 8;
        }
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            printf("ok   %s.%s\n", prog, c->name);
            passed++;
        } else if (WIFEXITED(status) && WEXITSTATUS(status) == T_EXIT_SKIP) {
            printf("SKIP %s.%s\n", prog, c->name);
            skipped++;
        } else {
            if (WIFSIGNALED(status))
                printf("FAIL %s.%s (signal %d%s)\n", prog, c->name, WTERMSIG(status),
                       WTERMSIG(status) == SIGALRM ? ", timeout" : "");
            else
                printf("FAIL %s.%s\n", prog, c->name);
            failed++;
        }
        fflush(stdout);
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}

#endif
