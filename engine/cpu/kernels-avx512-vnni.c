/* engine/cpu/kernels-avx512-vnni.c: the kernels of kernels-x86.inc with AVX-512
 * VNNI: Q4_0, Q8_0, IQ4_NL and MXFP4 in units of 8 blocks (4 zmm, 4
 * vpdpbusd per 256 weights), and the 256-bit kernels' int8 dot as one
 * vpdpbusd (AVX512VL) instead of vpmaddubsw + vpmaddwd; called only when
 * kernels.c detected AVX512_VNNI. */
#define KX_VNNI 1
#include "engine/cpu/kernels-x86.inc"

void kern_avx512vnni_fill(struct kern_table *t) {
    kx_fill(t);
}
