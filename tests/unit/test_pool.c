/*
 * test_pool — the persistent compute pool: every task runs exactly once per run, over many
 * runs of varying sizes, with idle and busy workers; create/destroy edge cases. Also run
 * under ThreadSanitizer (make SAN=thread).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/kernels/pool.h"
#include "tests/unit/harness.h"

#define MAX_TASKS 4096

struct counts {
    atomic_int hit[MAX_TASKS]; /* times task i ran in this run */
    atomic_int bad_n;          /* calls that saw a wrong n_tasks */
    int expect_n;              /* n_tasks of the run (written before pool_run) */
    pthread_t threads[64];     /* distinct threads seen (guarded by lock) */
    int n_threads;
    pthread_mutex_t lock;
};

static void count_task(void *arg, int task, int n_tasks) {
    struct counts *c = arg;
    if (n_tasks != c->expect_n || task < 0 || task >= n_tasks)
        atomic_fetch_add(&c->bad_n, 1);
    else
        atomic_fetch_add(&c->hit[task], 1);
    pthread_t self = pthread_self();
    pthread_mutex_lock(&c->lock);
    int known = 0;
    for (int i = 0; i < c->n_threads && !known; i++)
        known = pthread_equal(c->threads[i], self);
    if (!known && c->n_threads < 64) c->threads[c->n_threads++] = self;
    pthread_mutex_unlock(&c->lock);
}

/* Runs n tasks and checks each ran exactly once. */
static void run_and_check(struct pool *p, struct counts *c, int n) {
    for (int i = 0; i < n; i++)
        atomic_store(&c->hit[i], 0);
    c->expect_n = n;
    pool_run(p, count_task, c, n);
    T_ASSERT(atomic_load(&c->bad_n) == 0);
    for (int i = 0; i < n; i++)
        T_ASSERTF(atomic_load(&c->hit[i]) == 1, "n=%d task %d ran %d times", n, i,
                  atomic_load(&c->hit[i]));
}

static struct counts *counts_new(void) {
    struct counts *c = calloc(1, sizeof(*c));
    T_ASSERT(c);
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

static void test_every_task_once_many_runs(void) {
    static const int sizes[] = {1, 2, 3, 4, 5, 7, 8, 16, 33, 64, 257, 1000, MAX_TASKS};
    const int n_sizes = (int)(sizeof(sizes) / sizeof(sizes[0]));
    const int runs = getenv("GEMMAD_TEST_QUICK") ? 200 : 2000;
    for (int nt = 1; nt <= 4; nt++) {
        struct pool *p = NULL;
        T_ASSERT(pool_create(nt, &p) == 0 && p);
        T_ASSERT(pool_size(p) == nt);
        struct counts *c = counts_new();
        for (int r = 0; r < runs; r++)
            run_and_check(p, c, sizes[(r * 7 + nt) % n_sizes]);
        T_ASSERTF(c->n_threads <= nt, "%d threads ran tasks in a pool of %d", c->n_threads, nt);
        pool_destroy(p);
        free(c);
    }
}

static void test_zero_tasks_and_null_pool(void) {
    struct counts *c = counts_new();
    struct pool *p = NULL;
    T_ASSERT(pool_create(3, &p) == 0);
    c->expect_n = 0;
    pool_run(p, count_task, c, 0); /* no call at all */
    T_ASSERT(c->n_threads == 0);
    run_and_check(NULL, c, 10); /* NULL pool runs inline on this thread */
    T_ASSERT(c->n_threads == 1 && pthread_equal(c->threads[0], pthread_self()));
    T_ASSERT(pool_size(NULL) == 1);
    run_and_check(p, c, 100);
    pool_destroy(p);
    free(c);
}

/* A pool of 1 has no workers: everything runs on the caller. */
static void test_single_thread_inline(void) {
    struct pool *p = NULL;
    T_ASSERT(pool_create(1, &p) == 0);
    struct counts *c = counts_new();
    run_and_check(p, c, 500);
    T_ASSERT(c->n_threads == 1 && pthread_equal(c->threads[0], pthread_self()));
    pool_destroy(p);
    free(c);
}

static void sleepy_task(void *arg, int task, int n_tasks) {
    (void)n_tasks;
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
    count_task(arg, task, n_tasks);
}

/* Slow tasks spread over more than one thread, and the caller takes part. */
static void test_tasks_spread_and_caller_participates(void) {
    struct pool *p = NULL;
    T_ASSERT(pool_create(4, &p) == 0);
    struct counts *c = counts_new();
    c->expect_n = 32;
    pool_run(p, sleepy_task, c, 32);
    for (int i = 0; i < 32; i++)
        T_ASSERT(atomic_load(&c->hit[i]) == 1);
    T_ASSERTF(c->n_threads >= 2, "only %d thread(s) ran 32 sleeping tasks", c->n_threads);
    int caller = 0;
    for (int i = 0; i < c->n_threads; i++)
        caller |= pthread_equal(c->threads[i], pthread_self());
    T_ASSERT(caller);
    pool_destroy(p);
    free(c);
}

/* pool_thread_index: in range, 0 for the caller, one index per thread, never two tasks at
 * once on one index (each task holds its index's slot while it sleeps), and the caller is
 * 0 again for a run of a second pool started from inside a task of the first. */
struct idx_state {
    atomic_int busy[8];  /* tasks running on index i right now */
    atomic_int bad;      /* out of range, caller not 0, or two at once */
    pthread_t owner[8];  /* the thread seen with index i (guarded by lock) */
    int seen[8];
    pthread_mutex_t lock;
    struct pool *inner;
    atomic_int inner_bad;
};

static void inner_task(void *arg, int task, int n_tasks) {
    (void)task, (void)n_tasks;
    struct idx_state *s = arg;
    const int i = pool_thread_index();
    if (i < 0 || i >= 2) atomic_fetch_add(&s->inner_bad, 1);
}

static void idx_task(void *arg, int task, int n_tasks) {
    (void)n_tasks;
    struct idx_state *s = arg;
    const int i = pool_thread_index();
    if (i < 0 || i >= 4) {
        atomic_fetch_add(&s->bad, 1);
        return;
    }
    pthread_mutex_lock(&s->lock);
    if (!s->seen[i]) {
        s->seen[i] = 1;
        s->owner[i] = pthread_self();
    } else if (!pthread_equal(s->owner[i], pthread_self())) {
        atomic_fetch_add(&s->bad, 1);
    }
    pthread_mutex_unlock(&s->lock);
    if (atomic_fetch_add(&s->busy[i], 1) != 0) atomic_fetch_add(&s->bad, 1);
    struct timespec ts = {0, 500 * 1000};
    nanosleep(&ts, NULL);
    if (task == 5 && s->inner) pool_run(s->inner, inner_task, s, 8);
    if (pool_thread_index() != i) atomic_fetch_add(&s->bad, 1); /* restored after the run */
    atomic_fetch_sub(&s->busy[i], 1);
}

static void test_thread_index(void) {
    struct pool *p = NULL, *q = NULL;
    T_ASSERT(pool_create(4, &p) == 0);
    T_ASSERT(pool_create(2, &q) == 0);
    struct idx_state *s = calloc(1, sizeof(*s));
    T_ASSERT(s);
    pthread_mutex_init(&s->lock, NULL);
    s->inner = q;
    T_ASSERT(pool_thread_index() == 0);
    for (int run = 0; run < 20; run++) pool_run(p, idx_task, s, 40);
    T_ASSERT(atomic_load(&s->bad) == 0);
    T_ASSERT(atomic_load(&s->inner_bad) == 0);
    T_ASSERT(s->seen[0] && pthread_equal(s->owner[0], pthread_self()));
    T_ASSERT(pool_thread_index() == 0);
    pool_destroy(p);
    pool_destroy(q);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* Destroy right after create (workers maybe not started), and after workers went to sleep. */
static void test_destroy_idle_and_fresh(void) {
    for (int i = 0; i < 50; i++) {
        struct pool *p = NULL;
        T_ASSERT(pool_create(1 + i % 5, &p) == 0);
        pool_destroy(p);
    }
    struct pool *p = NULL;
    T_ASSERT(pool_create(3, &p) == 0);
    struct counts *c = counts_new();
    run_and_check(p, c, 64);
    struct timespec ts = {0, 50 * 1000 * 1000}; /* well past the spin: workers sleep */
    nanosleep(&ts, NULL);
    run_and_check(p, c, 64); /* sleeping workers wake up for a run */
    nanosleep(&ts, NULL);
    pool_destroy(p);
    pool_destroy(NULL);
    free(c);
}

/* The last task of a run is slow (about the spin length), so the caller often gives up
 * spinning and sleeps on the join while a worker finishes it. */
static void slow_last_task(void *arg, int task, int n_tasks) {
    if (task == n_tasks - 1) {
        struct timespec ts = {0, 300 * 1000};
        nanosleep(&ts, NULL);
    }
    count_task(arg, task, n_tasks);
}

/* Gaps between runs around the spin length, so workers alternate between spinning and
 * sleeping when a run is published, and callers between spinning and sleeping on the join:
 * a lost wake-up on either side would hang here (the harness's timeout catches it). */
static void test_sleep_wake_handover(void) {
    const int runs = getenv("GEMMAD_TEST_QUICK") ? 100 : 400;
    for (int nt = 2; nt <= 3; nt++) {
        struct pool *p = NULL;
        T_ASSERT(pool_create(nt, &p) == 0);
        struct counts *c = counts_new();
        for (int r = 0; r < runs; r++) {
            struct timespec gap = {0, (long)(r % 9) * 50 * 1000}; /* 0 .. 400 us */
            nanosleep(&gap, NULL);
            const int n = 1 + r % 5;
            for (int i = 0; i < n; i++)
                atomic_store(&c->hit[i], 0);
            c->expect_n = n;
            pool_run(p, r % 2 ? slow_last_task : count_task, c, n);
            T_ASSERT(atomic_load(&c->bad_n) == 0);
            for (int i = 0; i < n; i++)
                T_ASSERTF(atomic_load(&c->hit[i]) == 1, "run %d task %d ran %d times", r, i,
                          atomic_load(&c->hit[i]));
        }
        pool_destroy(p);
        free(c);
    }
}

/* A run published before the workers have even started must not be missed. */
static void test_run_right_after_create(void) {
    struct counts *c = counts_new();
    for (int i = 0; i < 100; i++) {
        struct pool *p = NULL;
        T_ASSERT(pool_create(4, &p) == 0);
        run_and_check(p, c, 16);
        pool_destroy(p);
    }
    free(c);
}

/* Results written by tasks are visible to the caller as soon as pool_run returns. */
struct sum_arg {
    int64_t out[256];
    int round;
};

static void write_task(void *arg, int task, int n_tasks) {
    (void)n_tasks;
    struct sum_arg *s = arg;
    s->out[task] = (int64_t)task * 1000 + s->round;
}

static void test_results_visible_after_run(void) {
    struct pool *p = NULL;
    T_ASSERT(pool_create(3, &p) == 0);
    struct sum_arg *s = calloc(1, sizeof(*s));
    T_ASSERT(s);
    for (int r = 0; r < 1000; r++) {
        s->round = r;
        pool_run(p, write_task, s, 256);
        for (int t = 0; t < 256; t++)
            T_ASSERT(s->out[t] == (int64_t)t * 1000 + r);
    }
    pool_destroy(p);
    free(s);
}

static void test_create_invalid_and_default(void) {
    struct pool *p = (struct pool *)&p;
    T_ASSERT(pool_create(0, &p) == -EINVAL && p == NULL);
    T_ASSERT(pool_create(-3, &p) == -EINVAL && p == NULL);
    int n = pool_default_threads();
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    T_ASSERTF(n >= 1 && n <= online, "default threads %d, online %ld", n, online);
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {
        T_CASE(test_every_task_once_many_runs),
        T_CASE(test_zero_tasks_and_null_pool),
        T_CASE(test_single_thread_inline),
        T_CASE(test_tasks_spread_and_caller_participates),
        T_CASE(test_destroy_idle_and_fresh),
        T_CASE(test_run_right_after_create),
        T_CASE(test_sleep_wake_handover),
        T_CASE(test_results_visible_after_run),
        T_CASE(test_create_invalid_and_default),
        T_CASE(test_thread_index),
        {0},
    };
    return t_main(argc, argv, cases);
}
