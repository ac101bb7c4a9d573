/* engine/cpu/kernels-avx2-vnni.c: the AVX2 kernels again, built with
 * -mavxvnni as well (called only when kernels.c detected AVX2, FMA, F16C and
 * AVX-VNNI): the packed kernels of kernels-avx2-pk.inc take vpdpbusd on ymm
 * where it does less work per byte (KX_AVXVNNI). AVX-VNNI is its own ISA
 * level (KERNELS_ISA_AVX2_VNNI) between AVX2 and AVX-512: Alder Lake and
 * later Intel cores without AVX-512 have it, and Sapphire Rapids and Zen 4
 * have it beside AVX-512. */
#define KX_VNNI 0
#include "engine/cpu/kernels-x86.inc"

#define KX_AVXVNNI 1
#include "engine/cpu/kernels-avx2-pk.inc"

void kern_avx2vnni_fill(struct kern_table *t) {
    kx_fill(t);
    kx_p2_fill(t);
}
