/* engine/kernels-avx2.c: AVX2 + FMA + F16C kernels (built with -mavx2 -mfma
 * -mf16c; called only when kernels.c detected those). The kernels themselves
 * live in kernels-x86.h, shared with the AVX-512 builds. */
#define KX_VNNI 0
#include "engine/kernels-x86.h"

void kern_avx2_fill(struct kern_table *t) {
    kx_fill(t);
}
