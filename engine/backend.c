/* The backend table's shared pieces: fault injection for fwd_create's failure tests, and
 * the host selection of a row's top candidates. */
#include "engine/backend.h"

#include <math.h>

static int be_fail_at;   /* which failable step fails; 0 = none */
static int be_fail_step; /* steps counted in the current create */

void be_fault_arm(int n) {
    be_fail_at = n > 0 ? n : 0;
    be_fail_step = 0;
}

void be_fault_restart(void) { be_fail_step = 0; }

int be_fault(void) { return be_fail_at > 0 && ++be_fail_step == be_fail_at; }

/* One pass in id order keeping the best BE_TOPK_MAX sorted: a later id enters only when
 * strictly better than the worst kept (an equal value with a higher id loses the tie). */
void be_topk_row(const float *l, int n, float scale, int32_t *id, float *val) {
    int have = 0;
    for (int i = 0; i < n; i++) {
        const float v = l[i] * scale;
        if (v != v) continue;
        if (have == BE_TOPK_MAX && !(v > val[have - 1])) continue;
        int j = have < BE_TOPK_MAX ? have++ : have - 1;
        for (; j > 0 && v > val[j - 1]; j--) {
            val[j] = val[j - 1];
            id[j] = id[j - 1];
        }
        val[j] = v;
        id[j] = i;
    }
    for (int j = have; j < BE_TOPK_MAX; j++) {
        id[j] = -1;
        val[j] = NAN;
    }
}
