/* The backend table's shared piece: fault injection for fwd_create's failure tests. */
#include "engine/backend.h"

static int be_fail_at;   /* which failable step fails; 0 = none */
static int be_fail_step; /* steps counted in the current create */

void be_fault_arm(int n) {
    be_fail_at = n > 0 ? n : 0;
    be_fail_step = 0;
}

void be_fault_restart(void) { be_fail_step = 0; }

int be_fault(void) { return be_fail_at > 0 && ++be_fail_step == be_fail_at; }
