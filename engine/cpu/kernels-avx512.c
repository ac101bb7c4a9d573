/* engine/cpu/kernels-avx512.c: the kernels of kernels-x86.inc built with AVX-512
 * F/BW/VL: Q4_0 and MXFP4 in units of 8 blocks (4 zmm, vpmaddubsw +
 * vpmaddwd), the rest on 256-bit vectors with EVEX encodings and 32
 * registers for the token tiles; called only when kernels.c detected AVX-512
 * F/BW/VL. */
#define KX_VNNI 0
#include "engine/cpu/kernels-x86.inc"

void kern_avx512_fill(struct kern_table *t) {
    kx_fill(t);
}
