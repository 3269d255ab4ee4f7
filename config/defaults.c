/* defaults — the table's values as one constant struct. */
#include "config/defaults.h"

const struct gemmad_defaults gemmad_defaults = {
#define DEFAULTS_NUM_INIT(type, name, value) .name = (value),
#define DEFAULTS_STR_INIT(name, value) .name = (value),
    GEMMAD_DEFAULTS_NUM(DEFAULTS_NUM_INIT)
    GEMMAD_DEFAULTS_STR(DEFAULTS_STR_INIT)
#undef DEFAULTS_NUM_INIT
#undef DEFAULTS_STR_INIT
};
