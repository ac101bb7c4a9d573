/* engine/kernels-avx512.c: AVX-512 F/BW/VL (+VNNI) kernels. */
#include "engine/kernels-impl.h"

void kern_avx512_fill(struct kern_table *t, int vnni) {
    (void)t;
    (void)vnni;
}
