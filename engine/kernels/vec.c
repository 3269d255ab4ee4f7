/* vec — instruction-set dispatch of the row kernels (see vec.h). */
#include "engine/kernels/vec.h"

const struct vec_ops *vec_ops_for(enum kern_isa isa) {
    if (isa >= KERN_ISA_AVX512 && kern_isa_supported(KERN_ISA_AVX512)) return &vec_ops_avx512;
    if (isa >= KERN_ISA_AVX2 && kern_isa_supported(KERN_ISA_AVX2))
        return &vec_ops_avx2;
    return &vec_ops_ref;
}
