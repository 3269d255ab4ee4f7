/*
 * completion_int — what the files of the completion flow share: the request state
 * (struct cmpl, one per request, hreq.cmpl) and its choices, and the steps between starting
 * a request (completion_start.c: parse off the loop, then submit) and running it
 * (completion.c: submit, scheduler events, replies).
 *
 * Threads: the loop thread.
 */
#ifndef GEMMAD_SERVER_COMPLETION_INT_H
#define GEMMAD_SERVER_COMPLETION_INT_H

#include "server/completion.h"
#include "server/openai.h"

/* One choice of a generation request: one scheduler request. */
struct tools_out;

struct hchoice {
    struct hreq *hr;
    int index;                  /* choice index in the response */
    int prompt_idx;             /* which prompt (completions with a list) */
    uint64_t sched_id;
    int submitted, done;        /* submitted to the scheduler; DONE/ERROR seen */
    enum sched_finish finish;
    char *error;                /* ERROR message (owned) */
    char *text;                 /* non-stream: the output so far (owned) */
    size_t text_len, text_cap;
    json_t *lp;                 /* non-stream logprobs entries (owned), or NULL */
    int n_tokens;               /* TOKEN events seen */
    int prompt_tokens, completion_tokens, cached_tokens;
    double t_first, t_last;     /* first / latest token (monotonic s) */
    double queue_s;
    size_t lp_offset;           /* legacy logprobs: text offset of the next token */
    int stop_index;             /* DONE: which stop string matched, or -1 */
    int prompt_pending;         /* stream: the echoed prompt waits for its logprobs */
    struct tools_out *to;       /* tools request: the output split into text and calls */
};

/* One completion request (hreq.cmpl). */
struct cmpl {
    struct oai_params *params;  /* parsed request (owned) */
    struct hchoice *ch;         /* [n_ch] */
    int n_ch;
    int n_done;
    int stream;
    char *out;                  /* stream: SSE bytes not yet handed to MHD (owned) */
    size_t out_len, out_off, out_cap;
    int out_end;                /* stream: nothing follows what is in out */
    double last_write;          /* stream: when bytes were last queued */
    double last_read;           /* stream: when MHD last took bytes (the client reads) */
    int paused;                 /* stream: its choices are paused (sched_pause) */
    struct oai_resp resp;       /* id, object kind, created, model of every body */
    char id[48];                /* "chatcmpl-…" / "cmpl-…" (resp.id) */
    int aborted;                /* cmpl_abort ran */
    int fail_status;            /* non-stream: HTTP status of an error outcome */
    char fail_msg[256];
    char model[256];            /* the model id the reply names (resp.model) */
    struct api_shape *shape;    /* a non-OpenAI reply shape (owned), or NULL */
    struct emb_req *emb;        /* embeddings: the inputs (owned), or NULL */
    float *emb_vecs;            /* [emb->n][n_embd] results (owned) */
    int parsing;                /* intake is parsing the request on the worker pool */
    int parsed;                 /* its outcome waits for the access handler */
    int parse_rc;
    struct oai_params *parsed_params; /* rc 0: the parsed request (owned until begun) */
    struct oai_error parse_err; /* rc != 0: the refusal */
    int emb_dim;                /* embeddings: n_embd */
    int emb_out;                /* embeddings: the reply was serialized off the loop */
    char *reply;                /* its text (owned until queued), NULL when out of memory */
    size_t reply_len;
    struct cmpl_job job;        /* a route's job (cmpl_start_job), or all NULL */
    void *job_ctx;
};

/* The request's completion state, its release registered with the connection layer; NULL
 * when out of memory (shape destroyed). */
struct cmpl *cmpl_new(struct hreq *hr, struct api_shape *shape);
/* Submits every choice of hr->cmpl->params and queues or starts the reply. */
enum MHD_Result cmpl_submit(struct hreq *hr);
/* Submits choice c's request r; on a refusal the choices already running are cancelled. */
int cmpl_submit_one(struct hreq *hr, struct hchoice *c, struct sched_req *r);
/* The reply for a refusal of sched_submit. */
enum MHD_Result cmpl_submit_error(struct hreq *hr, int rc);
/* The parsed request (rc 0, p taken over) or its refusal e: reply or submit. Only from the
 * access handler. */
enum MHD_Result cmpl_begin(struct hreq *hr, int rc, struct oai_params *p,
                           const struct oai_error *e);

#endif
