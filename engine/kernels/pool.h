/*
 * pool — a persistent pool of compute threads.
 *
 * pool_create() starts n_threads - 1 workers; the thread that calls pool_run() works too,
 * so a pool of 1 runs everything inline. Workers sleep between runs (no busy waiting while
 * idle longer than a short spin). No thread is created or destroyed per operation.
 *
 * Threads: pool_run() may be called by one thread at a time (the engine thread that owns
 * the pool); it returns only after every task has finished, so the caller may reuse its
 * buffers at once. create/destroy from the owning thread.
 */
#ifndef GEMMAD_POOL_H
#define GEMMAD_POOL_H

struct pool;

/* fn(arg, task, n_tasks) runs once for every task in [0, n_tasks). */
typedef void (*pool_fn)(void *arg, int task, int n_tasks);

int pool_create(int n_threads, struct pool **out); /* 0 or -errno */
void pool_destroy(struct pool *p);                 /* NULL is fine */
int pool_size(const struct pool *p);               /* threads including the caller */
/* Runs fn over n_tasks tasks spread over the pool; p == NULL runs them inline. */
void pool_run(struct pool *p, pool_fn fn, void *arg, int n_tasks);

/* Which thread of the running pool_run the caller is: 0 for the thread that called
 * pool_run, 1 .. pool_size - 1 for the workers; each runs one task at a time, so per-thread
 * scratch indexed by this needs no locking. 0 outside any run. */
int pool_thread_index(void);
/* Physical cores of this machine (fallback: online CPUs). */
int pool_default_threads(void);

#endif
