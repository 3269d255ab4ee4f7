/*
 * intake — oai_parse on libuv's worker pool. See intake.h.
 */
#include "server/intake.h"

#include <stdlib.h>

struct intake_job {
    uv_work_t work;
    struct srv *srv;
    json_t *root;               /* a reference of its own */
    int is_chat;
    struct oai_limits lim;
    int rc;
    struct oai_params *p;       /* the result when rc == 0 */
    struct oai_error e;         /* the refusal when rc != 0 */
    intake_done_fn done;
    void *arg;
};

/* Worker thread: touches only the job, the read-only JSON and the immutable vocabulary. */
static void intake_work(uv_work_t *w) {
    struct intake_job *j = w->data;
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

int intake_parse(struct srv *s, json_t *root, int is_chat, const struct oai_limits *lim,
                 intake_done_fn done, void *arg) {
    struct intake_job *j = calloc(1, sizeof *j);
    if (!j) return -1;
    j->work.data = j;
    j->srv = s;
    j->root = json_incref(root);
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
