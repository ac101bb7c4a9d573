/* tools/synth/synth-direct.c: random K-quant rows drawn directly as codes.
 *
 * ggml's reference K-quant quantizers search scales iteratively and cost
 * 40-66 ns per weight here (Q6_K / Q4_K, 4096-wide rows, -O2, this 2-core box
 * under load), which made a Llama-3.2-1B q4_k_m synth take 143 s. A random
 * model does not need the search: uniform random codes with a per-block scale
 * are already a uniform initialisation. Each block gets a scale jitter of
 * +-10% and codes spanning [-a, a], a = sqrt(3) * std, so the dequantized
 * weights have the requested standard deviation:
 *   Q4_K: y = d*sc*q - dmin*m, q in 0..15, sc = m = 63: d = 2a/(63*15), dmin = a/63
 *   Q5_K: the same with q in 0..31:                    d = 2a/(63*31), dmin = a/63
 *   Q6_K: y = d*sc*(q - 32), q in 0..63, sc = 16:      d = a/(16*32)
 * (sc = 16 rather than 127 keeps d out of f16's subnormal range for small
 * std). synth_params.exact_quant turns this off. */
#include "engine/quant/quant.h"
#include "tools/synth/synth-impl.h"

#include <string.h>

static void fill_random(struct synth_rng *r, uint8_t *p, size_t n) {
    while (n >= 8) {
        uint64_t v = synth_rng_next(r);
        memcpy(p, &v, 8);
        p += 8;
        n -= 8;
    }
    if (n) {
        uint64_t v = synth_rng_next(r);
        memcpy(p, &v, n);
    }
}

int synth_direct_row(uint32_t type, float std, struct synth_rng *r, void *dst, int64_t n) {
    const float a = 1.7320508f * std;
    const int64_t nb = n / QK_K;
    if (n % QK_K)
        return 1;
    switch (type) {
    case QUANT_Q4_K: {
        block_q4_K *y = dst;
        for (int64_t b = 0; b < nb; b++) {
            float j = 1.0f + 0.1f * synth_rng_sym(r);
            y[b].d = quant_f32_to_f16(j * 2.0f * a / (63.0f * 15.0f));
            y[b].dmin = quant_f32_to_f16(j * a / 63.0f);
            memset(y[b].scales, 0xFF, sizeof(y[b].scales)); /* every sc and m = 63 */
            fill_random(r, y[b].qs, sizeof(y[b].qs));
        }
        return 0;
    }
    case QUANT_Q5_K: {
        block_q5_K *y = dst;
        for (int64_t b = 0; b < nb; b++) {
            float j = 1.0f + 0.1f * synth_rng_sym(r);
            y[b].d = quant_f32_to_f16(j * 2.0f * a / (63.0f * 31.0f));
            y[b].dmin = quant_f32_to_f16(j * a / 63.0f);
            memset(y[b].scales, 0xFF, sizeof(y[b].scales));
            fill_random(r, y[b].qh, sizeof(y[b].qh));
            fill_random(r, y[b].qs, sizeof(y[b].qs));
        }
        return 0;
    }
    case QUANT_Q6_K: {
        block_q6_K *y = dst;
        for (int64_t b = 0; b < nb; b++) {
            float j = 1.0f + 0.1f * synth_rng_sym(r);
            y[b].d = quant_f32_to_f16(j * a / (16.0f * 32.0f));
            memset(y[b].scales, 16, sizeof(y[b].scales));
            fill_random(r, y[b].ql, sizeof(y[b].ql));
            fill_random(r, y[b].qh, sizeof(y[b].qh));
        }
        return 0;
    }
    default:
        return 1;
    }
}
