/* engine/kernels-avx512-vnni.c: the kernels of kernels-x86.h with AVX-512
 * VNNI: Q4_0 and Q8_0 two blocks per 512-bit register with one vpdpbusd, and
 * the 256-bit kernels' int8 dot as one vpdpbusd (AVX512VL) instead of
 * vpmaddubsw + vpmaddwd; called only when kernels.c detected AVX512_VNNI. */
#define KX_VNNI 1
#include "engine/kernels-x86.h"

void kern_avx512vnni_fill(struct kern_table *t) {
    kx_fill(t);
}
