/*
 * intake — oai_parse on libuv's worker pool. See intake.h.
 */
#define _GNU_SOURCE
#include "server/intake.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

struct intake_job {
    uv_work_t work;
    struct srv *srv;
    json_t *root;               /* a reference of its own, or NULL: parse body first */
    const char *body;           /* the request body (the caller keeps it alive) */
    size_t body_len;
    int is_chat;
    struct oai_limits lim;
    int rc;
    struct oai_params *p;       /* the result when rc == 0 */
    struct oai_error e;         /* the refusal when rc != 0 */
    intake_done_fn done;
    void *arg;
};

/* Worker threads run at a lower CPU priority than the compute threads (Linux lets a
 * thread have its own nice value): on a busy machine a flood of huge requests then slows
 * itself down, not the running streams. */
#define INTAKE_NICE 10

/* Worker thread: touches only the job, the read-only JSON and the immutable vocabulary. */
static void intake_work(uv_work_t *w) {
    struct intake_job *j = w->data;
    static __thread int niced;
    if (!niced) {
        niced = 1;
        id_t tid = (id_t)syscall(SYS_gettid);
        errno = 0;
        int cur = getpriority(PRIO_PROCESS, tid);
        if ((cur == -1 && errno) || setpriority(PRIO_PROCESS, tid, cur + INTAKE_NICE))
            LOG_D("http", 0, "intake: cannot lower the worker's priority");
    }
    if (!j->root) { /* a 4 MB body takes jansson about 0.1 s: not on the loop either */
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
    j->rc = oai_parse(j->root, j->is_chat, &j->lim, &j->p, &j->e);
}

static void intake_after(uv_work_t *w, int status) {
    struct intake_job *j = w->data;
    (void)status; /* the work always ran: nothing cancels it */
    j->srv->n_intake--;
    json_decref(j->root);
    j->done(j->arg, j->rc, j->rc ? NULL : j->p, &j->e);
    free(j);
}

int intake_parse(struct srv *s, json_t *root, const char *body, size_t body_len, int is_chat,
                 const struct oai_limits *lim, intake_done_fn done, void *arg) {
    struct intake_job *j = calloc(1, sizeof *j);
    if (!j) return -1;
    j->work.data = j;
    j->srv = s;
    j->root = json_incref(root);
    j->body = body ? body : "";
    j->body_len = body_len;
    j->is_chat = is_chat;
    j->lim = *lim;
    j->done = done;
    j->arg = arg;
    if (uv_queue_work(s->loop, &j->work, intake_work, intake_after)) {
        json_decref(j->root);
        free(j);
        return -1;
    }
    s->n_intake++;
    return 0;
}

void intake_wait(struct srv *s) {
    while (s->n_intake > 0) uv_run(s->loop, UV_RUN_ONCE);
}
