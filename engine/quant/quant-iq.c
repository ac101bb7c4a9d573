/* engine/quant/quant-iq.c: non-linear 4-bit types (IQ4_NL, IQ4_XS) and MXFP4.
 *
 * Byte layouts (ggml-common.h):
 *   IQ4_NL (32 elements, 18 B): f16 d; qs[16]: element j in the low nibble of
 *          qs[j], element j+16 in the high nibble; value = d * kvalues[nibble].
 *   IQ4_XS (256 elements, 136 B): f16 d; uint16 scales_h (2 high bits per
 *          32-element sub-block); scales_l[4] (4 low bits per sub-block, two per
 *          byte); qs[128] as 8 IQ4_NL payloads; sub-block scale d * (ls - 32).
 *   MXFP4  (32 elements, 17 B): E8M0 exponent byte e; qs[16] of 4-bit E2M1
 *          codes laid out like IQ4_NL; value = kvalues_mxfp4[code] * 2^(e-128)
 *          (the table holds the E2M1 values doubled so that they are integers,
 *          hence the half scale).
 *
 * The IQ4 quantizer is ggml's quantize_row_iq4_nl_impl as ggml_quantize_chunk
 * runs it without an imatrix (weights x^2, ntry = 7), with its float order.
 */
#include "engine/quant/quant-impl.h"

#include <string.h>

#define QUANT_GROUP_EPS 1e-15f

const int8_t quant_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1,    13,   25,  38,  53,  69,  89,  113};

/* E2M1 values {0, .5, 1, 1.5, 2, 3, 4, 6} and their negatives, times 2. */
const int8_t quant_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* 2^(e-128) = E8M0 value / 2; e = 0 and 1 are f32 subnormals. */
float quant_e8m0_to_f32_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Index of the table value nearest to v (the lower one on ties), by bisection
 * over the sorted IQ4 table. */
static int nearest_iq4(float v) {
    const int8_t *t = quant_kvalues_iq4nl;
    if (v <= t[0])
        return 0;
    if (v >= t[15])
        return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < t[mid])
            hi = mid;
        else
            lo = mid;
    }
    return v - t[hi - 1] < t[hi] - v ? hi - 1 : hi;
}

/* Best scale for one 32-element block with weights x^2: start from the scale
 * that maps the largest magnitude onto -127 (the table's end), then try
 * 2*ntry+1 scales around it and keep the best weighted least-squares fit.
 * Returns 0 for an (almost) zero block. L gets the table indices of the start. */
static float iq4_fit_block(const float *xb, uint8_t *L, int ntry) {
    const int8_t *t = quant_kvalues_iq4nl;
    float w[32];
    float amax = 0, vmax = 0;
    for (int j = 0; j < 32; j++) {
        w[j] = xb[j] * xb[j];
        if (fabsf(xb[j]) > amax) {
            amax = fabsf(xb[j]);
            vmax = xb[j];
        }
    }
    if (amax < QUANT_GROUP_EPS)
        return 0;
    float d = ntry > 0 ? -vmax / t[0] : vmax / t[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        int l = nearest_iq4(id * xb[j]);
        L[j] = (uint8_t)l;
        float q = t[l];
        sumqx += w[j] * q * xb[j];
        sumq2 += w[j] * q * q;
    }
    d = sumqx / sumq2;
    float best = d * sumqx;
    for (int k = -ntry; k <= ntry; k++) {
        id = (k + t[0]) / vmax;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            float q = t[nearest_iq4(id * xb[j])];
            sumqx += w[j] * q * xb[j];
            sumq2 += w[j] * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

static void pack_nibbles32(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
}

void quant_quantize_iq4_nl(const float *x, void *vy, int64_t nb) {
    block_iq4_nl *y = vy;
    uint8_t L[32];
    for (int64_t b = 0; b < nb; b++, x += QK4_NL) {
        float d = iq4_fit_block(x, L, 7);
        y[b].d = quant_f32_to_f16(d);
        /* levels are redone with the unrounded f32 scale (as ggml does) */
        float id = d != 0 ? 1 / d : 0;
        for (int j = 0; j < 32; j++)
            L[j] = (uint8_t)nearest_iq4(id * x[j]);
        pack_nibbles32(L, y[b].qs);
    }
}

void quant_quantize_iq4_xs(const float *x, void *vy, int64_t nb) {
    block_iq4_xs *y = vy;
    uint8_t L[32];
    float scales[8];
    for (int64_t b = 0; b < nb; b++, x += QK_K) {
        float max_scale = 0, amax_scale = 0;
        for (int ib = 0; ib < 8; ib++) {
            scales[ib] = iq4_fit_block(x + 32 * ib, L, 7);
            if (fabsf(scales[ib]) > amax_scale) {
                amax_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        /* 6-bit sub-block scales (offset 32) against d = -max/32 */
        const float d = -max_scale / 32;
        const float id = d != 0 ? 1 / d : 0.f;
        y[b].d = quant_f32_to_f16(d);
        y[b].scales_h = 0;
        for (int ib = 0; ib < 8; ib++) {
            int l = quant_nearest_int(id * scales[ib]);
            l = l < -32 ? -32 : (l > 31 ? 31 : l);
            const float dl = d * l;
            const float idl = dl != 0 ? 1 / dl : 0.f;
            for (int j = 0; j < 32; j++)
                L[j] = (uint8_t)nearest_iq4(idl * x[32 * ib + j]);
            pack_nibbles32(L, y[b].qs + 16 * ib);
            l += 32;
            if (ib % 2 == 0)
                y[b].scales_l[ib / 2] = (uint8_t)(l & 0xf);
            else
                y[b].scales_l[ib / 2] |= (uint8_t)((l & 0xf) << 4);
            y[b].scales_h |= (uint16_t)((l >> 4) << (2 * ib));
        }
    }
}

void quant_dequantize_iq4_nl(const void *vx, float *y, int64_t nb) {
    const block_iq4_nl *x = vx;
    for (int64_t b = 0; b < nb; b++, y += 32) {
        const float d = quant_f16_to_f32(x[b].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * quant_kvalues_iq4nl[x[b].qs[j] & 0xf];
            y[j + 16] = d * quant_kvalues_iq4nl[x[b].qs[j] >> 4];
        }
    }
}

void quant_unpack_iq4_xs(const block_iq4_xs *b, struct quant_kblock *u) {
    u->d = quant_f16_to_f32(b->d);
    u->dmin = 0;
    u->has_min = false;
    for (int ib = 0; ib < 8; ib++) {
        int ls = ((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) |
                 (((b->scales_h >> (2 * ib)) & 3) << 4);
        u->sc[2 * ib] = u->sc[2 * ib + 1] = (int16_t)(ls - 32);
        u->mn[2 * ib] = u->mn[2 * ib + 1] = 0;
        const uint8_t *qs = b->qs + 16 * ib;
        for (int j = 0; j < 16; j++) {
            u->L[32 * ib + j] = quant_kvalues_iq4nl[qs[j] & 0xf];
            u->L[32 * ib + j + 16] = quant_kvalues_iq4nl[qs[j] >> 4];
        }
    }
}

/* ---- MXFP4 ----------------------------------------------------------------- */

/* Nearest code to v at scale e (first of equals wins, so +0 beats -0). */
static int nearest_mxfp4(float v, float e) {
    int best = 0;
    float best_err = fabsf(quant_kvalues_mxfp4[0] * e - v);
    for (int i = 1; i < 16; i++) {
        float err = fabsf(quant_kvalues_mxfp4[i] * e - v);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

/* ggml's quantize_row_mxfp4_ref: exponent floor(log2(amax)) - 2 so that amax
 * lands in [4, 8) times the E2M1 unit, i.e. near the top code 6. The exponent
 * is clamped to [0, 254] (ggml casts without a check: undefined for amax below
 * 2^-125 or infinite). */
void quant_quantize_mxfp4(const float *x, void *vy, int64_t nb) {
    block_mxfp4 *y = vy;
    for (int64_t b = 0; b < nb; b++, x += QK_MXFP4) {
        float amax = 0.0f;
        for (int j = 0; j < QK_MXFP4; j++)
            if (amax < fabsf(x[j]))
                amax = fabsf(x[j]);
        uint8_t e = 0;
        if (amax > 0.0f) {
            float fe = floorf(log2f(amax)) - 2 + 127;
            e = (uint8_t)(fe < 0 ? 0 : (fe > 254 ? 254 : fe));
        }
        const float d = quant_e8m0_to_f32_half(e);
        y[b].e = e;
        for (int j = 0; j < QK_MXFP4 / 2; j++) {
            int lo = nearest_mxfp4(x[j], d);
            int hi = nearest_mxfp4(x[j + QK_MXFP4 / 2], d);
            y[b].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

void quant_dequantize_mxfp4(const void *vx, float *y, int64_t nb) {
    const block_mxfp4 *x = vx;
    for (int64_t b = 0; b < nb; b++, y += 32) {
        const float d = quant_e8m0_to_f32_half(x[b].e);
        for (int j = 0; j < 16; j++) {
            y[j] = quant_kvalues_mxfp4[x[b].qs[j] & 0xf] * d;
            y[j + 16] = quant_kvalues_mxfp4[x[b].qs[j] >> 4] * d;
        }
    }
}
