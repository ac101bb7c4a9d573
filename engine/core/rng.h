/* engine/core/rng.h: the one pseudo-random generator: xoshiro256** (Blackman
 * and Vigna) seeded through splitmix64. ~1 ns a number; for sampling and
 * synthesized weights, never for secrets.
 *
 *   struct strata_rng r;
 *   strata_rng_seed(&r, seed);
 *   double u = strata_rng_uniform(&r);        // [0, 1)
 *
 * The same seed gives the same stream on every machine (the sampler's
 * determinism for a request's `seed`, the synthesizer's reproducible files).
 * Threading: a state is used by one thread at a time.
 */
#ifndef STRATA_RNG_H
#define STRATA_RNG_H

#include <stdint.h>

struct strata_rng {
    uint64_t s[4];
};

/* splitmix64's next value of *x (also a good 64-bit mixer on its own). */
static inline uint64_t strata_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void strata_rng_seed(struct strata_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++)
        r->s[i] = strata_splitmix64(&seed);
}

static inline uint64_t strata_rng_next(struct strata_rng *r) {
    uint64_t *s = r->s;
    const uint64_t result = ((s[1] * 5) << 7 | (s[1] * 5) >> 57) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = s[3] << 45 | s[3] >> 19;
    return result;
}

/* Uniform in [0, 1) from the top 53 bits. */
static inline double strata_rng_uniform(struct strata_rng *r) {
    return (double)(strata_rng_next(r) >> 11) * 0x1.0p-53;
}

#endif
