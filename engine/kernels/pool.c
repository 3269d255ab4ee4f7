/*
 * pool — persistent compute threads (see pool.h).
 *
 * A run is published by bumping `gen` (release) after writing fn/arg/n_tasks; workers that
 * see the new generation (acquire) take task numbers from the shared counter `next` until it
 * runs past n_tasks, then decrement `active`. The caller takes tasks too and returns once
 * `active` reaches zero, so nothing of a run is touched after pool_run returns.
 *
 * Waiting is a short spin on the atomics (back-to-back runs inside one forward pass cost no
 * system call), then a condition-variable sleep. The mutex guards only the sleep/wake
 * hand-over. A run touches the mutex only when somebody sleeps: a worker announces itself in
 * `sleepers` (under the mutex, then re-checks `gen`), and the caller bumps `gen` before it
 * reads `sleepers`; both are sequentially consistent, so either the worker sees the new run
 * or the caller sees the sleeper and broadcasts under the mutex, which the worker holds until
 * it is inside pthread_cond_wait. `caller_sleeps` does the same for the join.
 */
#define _GNU_SOURCE
#include "engine/kernels/pool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define POOL_RELAX() _mm_pause()
#else
#define POOL_RELAX() ((void)0)
#endif

/* Spin iterations before sleeping: about 0.1-0.3 ms on current x86 cores. */
#define POOL_SPIN 4096

struct pool {
    int n_threads;          /* including the caller */
    pthread_t *threads;     /* [n_threads - 1] workers */
    pthread_mutex_t lock;   /* guards the sleeps on wake_cv / done_cv */
    pthread_cond_t wake_cv; /* workers wait here for a new generation or stop */
    pthread_cond_t done_cv; /* the caller waits here for active == 0 */

    /* The current run: written by the caller before `gen` is bumped, read-only after. */
    pool_fn fn;
    void *arg;
    int n_tasks;

    atomic_uint gen;   /* run counter; a bump (release) publishes fn/arg/n_tasks */
    atomic_int next;   /* next task number to hand out */
    atomic_int active; /* workers that have not finished the current run */
    atomic_int stop;   /* 1: workers exit */
    atomic_int sleepers;      /* workers asleep (or about to be) on wake_cv */
    atomic_int caller_sleeps; /* 1 while the caller is asleep (or about to be) on done_cv */
    atomic_int named;         /* workers that took their index */
};

/* Takes and runs tasks until none is left. */
static void pool_drain(struct pool *p) {
    const int n = p->n_tasks;
    for (;;) {
        int t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= n) break;
        p->fn(p->arg, t, n);
    }
}

/* 0 for a thread inside pool_run (and any other thread), 1 .. n - 1 for a pool's workers. */
static __thread int tls_index;

int pool_thread_index(void) { return tls_index; }

static void *pool_worker(void *vp) {
    struct pool *p = vp;
    tls_index = atomic_fetch_add(&p->named, 1) + 1;
    unsigned seen = 0; /* gen starts at 0; a run may be published before we get here */
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
               !atomic_load_explicit(&p->stop, memory_order_acquire) && spins < POOL_SPIN) {
            POOL_RELAX();
            spins++;
        }
        if (g == seen && !atomic_load_explicit(&p->stop, memory_order_acquire)) {
            pthread_mutex_lock(&p->lock);
            atomic_fetch_add(&p->sleepers, 1);
            while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake_cv, &p->lock);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->lock);
        }
        if (g == seen) break; /* stop requested and no new run */
        seen = g;
        pool_drain(p);
        if (atomic_fetch_sub(&p->active, 1) == 1 && atomic_load(&p->caller_sleeps)) {
            pthread_mutex_lock(&p->lock);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->lock);
        }
    }
    return NULL;
}

int pool_create(int n_threads, struct pool **out) {
    int rc;
    *out = NULL;
    if (n_threads < 1 || n_threads > 4096) return -EINVAL;
    struct pool *p = calloc(1, sizeof(*p));
    if (!p) return -ENOMEM;
    p->n_threads = n_threads;
    atomic_init(&p->gen, 0);
    atomic_init(&p->next, 0);
    atomic_init(&p->active, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_sleeps, 0);
    atomic_init(&p->named, 0);
    if ((rc = pthread_mutex_init(&p->lock, NULL))) goto fail_mutex;
    if ((rc = pthread_cond_init(&p->wake_cv, NULL))) goto fail_wake;
    if ((rc = pthread_cond_init(&p->done_cv, NULL))) goto fail_done;
    p->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    if (!p->threads) {
        rc = ENOMEM;
        goto fail_threads;
    }
    int started = 0;
    for (; started < n_threads - 1; started++) {
        if ((rc = pthread_create(&p->threads[started], NULL, pool_worker, p))) break;
        char name[16]; /* Linux thread names hold 15 bytes: "gemmad-w" + up to 7 digits */
        snprintf(name, sizeof(name), "gemmad-w%d", (started + 1) % 10000000);
        pthread_setname_np(p->threads[started], name);
    }
    if (started < n_threads - 1) {
        p->n_threads = started + 1;
        pool_destroy(p); /* joins the workers that did start */
        return -rc;
    }
    *out = p;
    return 0;

fail_threads:
    pthread_cond_destroy(&p->done_cv);
fail_done:
    pthread_cond_destroy(&p->wake_cv);
fail_wake:
    pthread_mutex_destroy(&p->lock);
fail_mutex:
    free(p);
    return -rc;
}

void pool_destroy(struct pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    atomic_store_explicit(&p->stop, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake_cv);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->n_threads - 1; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->done_cv);
    pthread_cond_destroy(&p->wake_cv);
    pthread_mutex_destroy(&p->lock);
    free(p->threads);
    free(p);
}

int pool_size(const struct pool *p) {
    return p ? p->n_threads : 1;
}

static void pool_run_inner(struct pool *p, pool_fn fn, void *arg, int n_tasks);

void pool_run(struct pool *p, pool_fn fn, void *arg, int n_tasks) {
    /* the caller is thread 0 of this run, even if it is a worker of another pool */
    const int saved = tls_index;
    tls_index = 0;
    pool_run_inner(p, fn, arg, n_tasks);
    tls_index = saved;
}

static void pool_run_inner(struct pool *p, pool_fn fn, void *arg, int n_tasks) {
    if (n_tasks <= 0) return;
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++)
            fn(arg, t, n_tasks);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->active, p->n_threads - 1, memory_order_relaxed);
    atomic_fetch_add(&p->gen, 1); /* seq_cst: publishes the run, ordered before `sleepers` */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->wake_cv);
        pthread_mutex_unlock(&p->lock);
    }

    pool_drain(p);

    for (int spins = 0; spins < POOL_SPIN; spins++) {
        if (atomic_load_explicit(&p->active, memory_order_acquire) == 0) return;
        POOL_RELAX();
    }
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->caller_sleeps, 1);
    while (atomic_load(&p->active) > 0)
        pthread_cond_wait(&p->done_cv, &p->lock);
    atomic_store(&p->caller_sleeps, 0);
    pthread_mutex_unlock(&p->lock);
}

/* Counts distinct (package, core) pairs among the CPUs this process may run on. */
static int count_physical_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return -1;
    enum { MAX_CORES = 1024 };
    long seen[MAX_CORES];
    int n_seen = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &set)) continue;
        char path[128];
        long pkg = 0, core = 0;
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/physical_package_id",
                 cpu);
        FILE *f = fopen(path, "r");
        if (!f) return -1;
        int ok = fscanf(f, "%ld", &pkg) == 1;
        fclose(f);
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        if (!ok || !(f = fopen(path, "r"))) return -1;
        ok = fscanf(f, "%ld", &core) == 1;
        fclose(f);
        if (!ok) return -1;
        long key = pkg * 65536 + core;
        int dup = 0;
        for (int i = 0; i < n_seen && !dup; i++)
            dup = seen[i] == key;
        if (!dup) {
            if (n_seen == MAX_CORES) return n_seen;
            seen[n_seen++] = key;
        }
    }
    return n_seen;
}

int pool_default_threads(void) {
    int n = count_physical_cores();
    if (n > 0) return n;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
}
