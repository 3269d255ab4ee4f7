/*
 * sched_fair — who gets a decode slot (runs with the scheduler's lock held, on its thread).
 *
 * A group is one HTTP request (its n choices and prompts) or, when the server has API keys,
 * every request of one key. The policy, each step:
 *
 *  1. Fair admission. Free slots go first, in arrival order, to waiting sequences whose group
 *     runs fewer than group_max_seqs; then (work-conserving) to the others, in arrival
 *     order. One group alone still gets every slot.
 *  2. Fair preemption. When every slot is taken, a waiting sequence that has never run may
 *     take the slot of a running sequence whose group runs more sequences than its own; a
 *     sequence that was itself preempted may do so only from a group running at least two
 *     more (so two equal groups never trade slots back and forth). The victim is taken from
 *     the group running the most, the one that has run longest first, and only once it has
 *     produced FAIR_QUANTUM tokens since its admission (no preemption during prefill, and
 *     every admission makes progress). The victim keeps its output and returns to the front
 *     of the queue (sched_requeue: its complete KV blocks stay in the prefix cache, so it
 *     re-prefills at most one block).
 *
 * So an n-hog or a key with many requests gives slots back to a newcomer within one step
 * once its sequences have made FAIR_QUANTUM tokens of progress, and clients that hold
 * slots without reading (paused by the server, see sched_pause) never keep them.
 * Paused sequences are never admitted. A sequence that cannot get KV blocks stops the
 * admission of those behind it (arrival order, as before: large prompts do not starve).
 */
#include "scheduler/sched_int.h"

#define FAIR_QUANTUM 8             /* tokens a sequence makes before it can be preempted */
#define FAIR_MAX_PREEMPT 4         /* preemptions per step */

static int fair_running(const struct sched *s, uint64_t group) {
    int n = 0;
    for (int i = 0; i < s->n_run; i++) n += s->run[i]->group == group;
    return n;
}

/* The running sequence to give up its slot to w, or NULL. */
static struct seq *fair_victim(const struct sched *s, const struct seq *w) {
    int mine = fair_running(s, w->group);
    int need = mine + (w->requeued ? 2 : 1);
    struct seq *best = NULL;
    int best_n = 0;
    for (int i = 0; i < s->n_run; i++) { /* run[] is in arrival order: oldest first */
        struct seq *q = s->run[i];
        if (q->cancel || q->paused || q->n_out - q->out_at_admit < FAIR_QUANTUM) continue;
        int n = fair_running(s, q->group);
        if (n >= need && n > best_n) {
            best = q;
            best_n = n;
        }
    }
    return best;
}

void sched_fair_admit(struct sched *s, double now) {
    int cap = s->o.group_max_seqs > 0 ? s->o.group_max_seqs : s->o.max_seqs;
    /* 1. Under-cap groups first, then anyone; stop at the first that lacks KV blocks. */
    for (int pass = 0; pass < 2; pass++) {
        for (struct seq *q = s->wait_head, *nx; q && s->n_run < s->o.max_seqs; q = nx) {
            nx = q->next;
            if (q->paused || q->cancel) continue;
            if (pass == 0 && fair_running(s, q->group) >= cap) continue;
            if (!sched_try_admit(s, q, now)) return;
        }
    }
    /* 2. Full: newcomers (then preempted ones) take slots from bigger groups. */
    int preempted = 0;
    for (struct seq *q = s->wait_head, *nx; q && s->n_run >= s->o.max_seqs &&
                                             preempted < FAIR_MAX_PREEMPT; q = nx) {
        nx = q->next;
        if (q->paused || q->cancel) continue;
        struct seq *v = fair_victim(s, q);
        if (!v) continue;
        sched_requeue(s, v);
        preempted++;
        if (!sched_try_admit(s, q, now)) return;
    }
}
