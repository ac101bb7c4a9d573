/* bench/probe.h: the read probe's loop, shared by bench/roofline.c (the
 * decode roofline) and bench/kernels-bench.c (the same loop over
 * the kernels' bytes, so that its figures compare with the roofline's).
 *
 *   uint64_t sum = probe_read8(words, n_words & ~(size_t)7, 0);
 *
 * Eight independent add accumulators, so the loop is bound by loads, not by
 * an add chain. n must be a multiple of 8. pf_bytes > 0 adds the decode
 * kernels' software prefetch (every line pf_bytes ahead, non-temporal); pass
 * a constant: 0 compiles to the plain loop (roofline's code is the same
 * instructions as before the loop moved here, checked with objdump -d at
 * -O3 -march=native). Pure function of the bytes; no state.
 */
#ifndef STRATA_BENCH_PROBE_H
#define STRATA_BENCH_PROBE_H

#include <stddef.h>
#include <stdint.h>

static inline __attribute__((always_inline)) uint64_t probe_read8(const uint64_t *p, size_t n,
                                                                  size_t pf_bytes) {
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    for (size_t i = 0; i < n; i += 8) {
        if (pf_bytes)
            __builtin_prefetch((const char *)(p + i) + pf_bytes, 0, 0);
        a0 += p[i];
        a1 += p[i + 1];
        a2 += p[i + 2];
        a3 += p[i + 3];
        a4 += p[i + 4];
        a5 += p[i + 5];
        a6 += p[i + 6];
        a7 += p[i + 7];
    }
    return a0 ^ a1 ^ a2 ^ a3 ^ a4 ^ a5 ^ a6 ^ a7;
}

#endif
