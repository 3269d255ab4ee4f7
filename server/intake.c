/*
 * intake — request work (oai_parse and the like) off the loop thread. See intake.h.
 *
 * Two lanes. Ordinary requests go to libuv's worker pool at the process's priority. Large
 * ones (INTAKE_BIG bytes of body or more: a 4 MB prompt takes jansson alone 0.1 s) go, one
 * at a time, to a thread of their own running at a lower CPU priority (nice +INTAKE_NICE;
 * Linux gives each thread its own nice value) than the compute threads: a flood of huge
 * prompts then slows itself down, not the running streams, and cannot take more than one
 * core. (One lowered thread rather than lowering pool threads per job: an unprivileged
 * thread cannot raise its priority again.)
 */
#define _GNU_SOURCE
#include "server/intake.h"
#include "server/api_tools.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define INTAKE_NICE 10
#define INTAKE_BIG (256u << 10)

struct intake_job {
    uv_work_t work;             /* the pool lane */
    struct intake_job *next;    /* the big lane's queues */
    struct srv *srv;
    json_t *root;               /* a reference of its own, or NULL: parse body first */
    const char *body;           /* the request body (the caller keeps it alive) */
    size_t body_len;
    int raw;                    /* intake_task: no body, fn gets root NULL */
    intake_work_fn fn;          /* the work on root */
    void *fn_arg;
    int rc;
    struct oai_error e;         /* the refusal when rc != 0 */
    intake_end_fn end;
    void *arg;
};

/* intake_parse's work and callback. */
struct intake_parse_job {
    int is_chat;
    struct oai_limits lim;
    struct oai_params *p;       /* the result when rc == 0 */
    intake_done_fn done;
    void *arg;
};

/* The big lane: one thread, a FIFO in, a list of finished jobs out (both under mu). */
struct intake_lane {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct intake_job *in_head, *in_tail, *out;
    int stop;
    uv_async_t async;           /* finished jobs wait in out */
};

/* Any thread: touches only the job, the read-only JSON and the immutable vocabulary. */
static void intake_run(struct intake_job *j) {
    if (!j->root && !j->raw) { /* a 4 MB body takes jansson about 0.1 s: not on the loop */
        json_error_t je;
        j->root = json_loadb(j->body, j->body_len, JSON_REJECT_DUPLICATES, &je);
        memset(&j->e, 0, sizeof j->e);
        j->e.status = 400;
        j->e.type = "invalid_request_error";
        if (!j->root) {
            snprintf(j->e.msg, sizeof j->e.msg, "invalid JSON body at byte %d: %s", je.position,
                     je.text);
            j->rc = -1;
            return;
        }
        if (!json_is_object(j->root)) {
            snprintf(j->e.msg, sizeof j->e.msg, "the request body must be a JSON object");
            j->rc = -1;
            return;
        }
    }
    j->rc = j->fn(j->fn_arg, j->root, &j->e);
}

static void intake_finish(struct intake_job *j) {
    j->srv->n_intake--;
    json_decref(j->root);
    j->end(j->arg, j->rc, &j->e);
    free(j);
}

static void intake_work(uv_work_t *w) { intake_run(w->data); }

static void intake_after(uv_work_t *w, int status) {
    (void)status; /* the work always ran: nothing cancels it */
    intake_finish(w->data);
}

static void *intake_lane_main(void *arg) {
    struct intake_lane *L = arg;
    id_t tid = (id_t)syscall(SYS_gettid);
    errno = 0;
    int nice_now = getpriority(PRIO_PROCESS, tid);
    if (!(nice_now == -1 && errno)) setpriority(PRIO_PROCESS, tid, nice_now + INTAKE_NICE);
    pthread_mutex_lock(&L->mu);
    for (;;) {
        while (!L->in_head && !L->stop) pthread_cond_wait(&L->cv, &L->mu);
        if (!L->in_head) break;
        struct intake_job *j = L->in_head;
        L->in_head = j->next;
        if (!L->in_head) L->in_tail = NULL;
        pthread_mutex_unlock(&L->mu);
        intake_run(j);
        pthread_mutex_lock(&L->mu);
        j->next = L->out;
        L->out = j;
        uv_async_send(&L->async);
    }
    pthread_mutex_unlock(&L->mu);
    return NULL;
}

static void intake_lane_done(uv_async_t *a) {
    struct intake_lane *L = a->data;
    pthread_mutex_lock(&L->mu);
    struct intake_job *j = L->out;
    L->out = NULL;
    pthread_mutex_unlock(&L->mu);
    while (j) { /* order among big jobs does not matter: each wakes its own request */
        struct intake_job *nx = j->next;
        intake_finish(j);
        j = nx;
    }
}

/* The big lane, started on first use (loop thread); NULL when it cannot be. */
static struct intake_lane *intake_lane(struct srv *s) {
    if (s->intake_lane) return s->intake_lane;
    struct intake_lane *L = calloc(1, sizeof *L);
    if (!L) return NULL;
    pthread_mutex_init(&L->mu, NULL);
    pthread_cond_init(&L->cv, NULL);
    if (uv_async_init(s->loop, &L->async, intake_lane_done)) goto fail_async;
    L->async.data = L;
    if (pthread_create(&L->thread, NULL, intake_lane_main, L)) goto fail_thread;
    s->intake_lane = L;
    return L;
fail_thread:
    uv_close((uv_handle_t *)&L->async, NULL);
    /* L itself must outlive the close: it is freed with the loop (intake_free). */
    s->intake_lane = L;
    L->stop = 2; /* no thread */
    return NULL;
fail_async:
    pthread_cond_destroy(&L->cv);
    pthread_mutex_destroy(&L->mu);
    free(L);
    return NULL;
}

static int intake_queue(struct srv *s, json_t *root, const char *body, size_t body_len, int raw,
                        intake_work_fn fn, void *fn_arg, intake_end_fn end, void *arg) {
    struct intake_job *j = calloc(1, sizeof *j);
    if (!j) return -1;
    j->work.data = j;
    j->srv = s;
    j->root = json_incref(root);
    j->body = body ? body : "";
    j->body_len = body_len;
    j->raw = raw;
    j->fn = fn;
    j->fn_arg = fn_arg;
    j->end = end;
    j->arg = arg;
    struct intake_lane *L = !root && body_len >= INTAKE_BIG && (!s->intake_lane ||
                                                                 s->intake_lane->stop != 2)
                                ? intake_lane(s) : NULL;
    if (L) {
        pthread_mutex_lock(&L->mu);
        if (L->in_tail) L->in_tail->next = j;
        else L->in_head = j;
        L->in_tail = j;
        pthread_cond_signal(&L->cv);
        pthread_mutex_unlock(&L->mu);
    } else if (uv_queue_work(s->loop, &j->work, intake_work, intake_after)) {
        json_decref(j->root);
        free(j);
        return -1;
    }
    s->n_intake++;
    return 0;
}

int intake_call(struct srv *s, json_t *root, const char *body, size_t body_len,
                intake_work_fn fn, void *fn_arg, intake_end_fn end, void *arg) {
    return intake_queue(s, root, body, body_len, 0, fn, fn_arg, end, arg);
}

int intake_task(struct srv *s, intake_work_fn fn, void *fn_arg, intake_end_fn end, void *arg) {
    return intake_queue(s, NULL, NULL, 0, 1, fn, fn_arg, end, arg);
}

static int intake_parse_work(void *arg, json_t *root, struct oai_error *e) {
    struct intake_parse_job *pj = arg;
    return tools_parse_request(root, pj->is_chat, &pj->lim, &pj->p, e);
}

static void intake_parse_end(void *arg, int rc, const struct oai_error *e) {
    struct intake_parse_job *pj = arg;
    pj->done(pj->arg, rc, rc ? NULL : pj->p, e);
    free(pj);
}

int intake_parse(struct srv *s, json_t *root, const char *body, size_t body_len, int is_chat,
                 const struct oai_limits *lim, intake_done_fn done, void *arg) {
    struct intake_parse_job *pj = calloc(1, sizeof *pj);
    if (!pj) return -1;
    *pj = (struct intake_parse_job){.is_chat = is_chat, .lim = *lim, .done = done, .arg = arg};
    if (intake_call(s, root, body, body_len, intake_parse_work, pj, intake_parse_end, pj)) {
        free(pj);
        return -1;
    }
    return 0;
}

void intake_wait(struct srv *s) {
    while (s->n_intake > 0) uv_run(s->loop, UV_RUN_ONCE);
    struct intake_lane *L = s->intake_lane;
    if (L && L->stop != 2) {
        pthread_mutex_lock(&L->mu);
        L->stop = 1;
        pthread_cond_signal(&L->cv);
        pthread_mutex_unlock(&L->mu);
        pthread_join(L->thread, NULL);
        L->stop = 2;
    }
}

void intake_free(struct srv *s) {
    struct intake_lane *L = s->intake_lane;
    if (!L) return;
    pthread_cond_destroy(&L->cv);
    pthread_mutex_destroy(&L->mu);
    free(L);
    s->intake_lane = NULL;
}
