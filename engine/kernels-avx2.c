/* engine/kernels-avx2.c: AVX2 + FMA + F16C kernels (built with -mavx2 -mfma -mf16c). */
#include "engine/kernels-impl.h"

void kern_avx2_fill(struct kern_table *t) {
    (void)t;
}
