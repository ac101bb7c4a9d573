/* engine/kernels-avx2.c: AVX2 + FMA + F16C kernels (built with -mavx2 -mfma
 * -mf16c; called only when kernels.c detected those). The kernels live in
 * kernels-x86.h, shared with the AVX-512 builds, and the AVX2 build's own
 * packed-layout kernels in kernels-avx2-pk.h. */
#define KX_VNNI 0
#include "engine/kernels-x86.h"

#include "engine/kernels-avx2-pk.h"

void kern_avx2_fill(struct kern_table *t) {
    kx_fill(t);
    kx_p2_fill(t);
}
