/* engine/cpu/kernels-avx2.c: AVX2 + FMA + F16C kernels (built with -mavx2 -mfma
 * -mf16c; called only when kernels.c detected those). The kernels live in
 * kernels-x86.inc, shared with the AVX-512 builds, and the AVX2 build's own
 * packed-layout kernels in kernels-avx2-pk.inc. */
#define KX_VNNI 0
#include "engine/cpu/kernels-x86.inc"

#include "engine/cpu/kernels-avx2-pk.inc"

void kern_avx2_fill(struct kern_table *t) {
    kx_fill(t);
    kx_p2_fill(t);
}
