/* engine/kernels-avx512-vnni.c: the kernels of kernels-x86.h with the signed
 * int8 dot as one AVX-512 VNNI vpdpbusd (256-bit, AVX512VL) instead of
 * vpmaddubsw + vpmaddwd; called only when kernels.c detected AVX512_VNNI. */
#define KX_VNNI 1
#include "engine/kernels-x86.h"

void kern_avx512vnni_fill(struct kern_table *t) {
    kx_fill(t);
}
