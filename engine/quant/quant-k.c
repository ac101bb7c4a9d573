/* engine/quant/quant-k.c: K-quants (Q2_K..Q6_K, 256-element super-blocks) and the
 * Q8_K activation format.
 *
 * The quantizers are ggml's imatrix-free reference path (what
 * ggml_quantize_chunk runs with imatrix = NULL): per 16- or 32-element
 * sub-block a scale (and for Q2_K/Q4_K/Q5_K a min) is fitted by a small
 * search, the sub-block scales are themselves quantized to 4/6/8 bits against
 * one f16 super-block scale, and the levels are recomputed from the stored
 * (rounded) scales. Bit-exactness needs ggml's float operation order, which is
 * kept expression by expression (a*b*c is (a*b)*c; sums run in index order).
 *
 * Byte layouts (ggml-common.h; element e of the super-block):
 *   Q2_K: scales[16] (low nibble scale, high nibble min, per 16), qs[64]
 *         (2 bits: e = 128h + 32j + l in qs[32h + l] >> 2j), d, dmin
 *   Q3_K: hmask[32] (bit 4*h + j of hmask[l]: high bit of e = 128h + 32j + l),
 *         qs[64] as Q2_K, scales[12] (16 x 6 bits, offset 32), d
 *   Q4_K: d, dmin, scales[12] (8 x 6-bit scale + 8 x 6-bit min, per 32),
 *         qs[128] (e = 64h + l low nibble of qs[32h + l], e + 32 high nibble)
 *   Q5_K: as Q4_K plus qh[32] (bit 2h of qh[l]: bit 4 of e = 64h + l; bit 2h+1:
 *         of e + 32)
 *   Q6_K: ql[128], qh[64], scales[16] (int8, per 16), d; levels offset 32
 */
#include "engine/quant/quant-impl.h"

#include <string.h>

/* Tiny groups (all |x| below this) quantize to zero, as ggml's GROUP_MAX_EPS. */
#define QUANT_GROUP_EPS 1e-15f

static int clampi(int v, int lo, int hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

/* ---- sub-block fitting (ggml: make_qx_quants, make_q3_quants, make_qkx2_quants) */

/* Symmetric levels in [-nmax, nmax-1] with weights x^2 (ggml's rmse_type 1):
 * start from the scale that maps the largest magnitude to -nmax, then try 18
 * nearby scales and keep the best weighted least-squares fit. Returns the
 * scale; L gets levels + nmax. Used by Q6_K. */
static float fit_symmetric(int n, int nmax, const float *x, int8_t *L) {
    float amax = 0, vmax = 0;
    for (int i = 0; i < n; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            vmax = x[i];
        }
    }
    if (amax < QUANT_GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / vmax;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int step = -9; step <= 9; step++) {
        if (step == 0)
            continue;
        iscale = -(nmax + 0.1f * step) / vmax;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + clampi(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Q3_K's fit: symmetric levels in [-nmax, nmax-1], weights x^2, then up to 5
 * passes of coordinate descent moving one level at a time while the weighted
 * fit improves. Returns the scale; L gets levels + nmax (or all 0 for a zero
 * group, which then keeps level -nmax: ggml does the same). */
static float fit_q3(int n, int nmax, const float *x, int8_t *L) {
    float amax = 0, vmax = 0;
    for (int i = 0; i < n; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            vmax = x[i];
        }
    }
    if (amax < QUANT_GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / vmax;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int pass = 0; pass < 5; pass++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (!(slx > 0))
                continue;
            float sl2 = suml2 - w * L[i] * L[i];
            int nl = clampi(quant_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (nl == L[i])
                continue;
            slx += w * x[i] * nl;
            sl2 += w * nl * nl;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)nl;
                sumlx = slx;
                suml2 = sl2;
                n_changed++;
            }
        }
        if (!n_changed)
            break;
    }
    for (int i = 0; i < n; i++)
        L[i] = (int8_t)(L[i] + nmax);
    return sumlx / suml2;
}

/* Affine levels in [0, nmax]: x ~ scale*L - the_min, min <= 0. Tries nstep+1
 * scales (nmax + rmin + rdelta*k over the range) and keeps the one with the
 * smallest weighted error (absolute if use_mad, else squared); each candidate
 * solves the 2x2 least-squares system for scale and min. */
static float fit_affine(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min,
                        float rmin, float rdelta, int nstep, bool use_mad) {
    uint8_t Laux[32];
    float mn = x[0], mx = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < mn)
            mn = x[i];
        if (x[i] > mx)
            mx = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (mn > 0)
        mn = 0;
    if (mx == mn) {
        memset(L, 0, (size_t)n);
        *the_min = -mn;
        return 0.f;
    }
    float iscale = nmax / (mx - mn);
    float scale = 1 / iscale;
    float best_err = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(quant_nearest_int(iscale * (x[i] - mn)), 0, nmax);
        float diff = scale * L[i] + mn - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_err += w[i] * diff;
    }
    for (int k = 0; k <= nstep; k++) {
        iscale = (rmin + rdelta * k + nmax) / (mx - mn);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(quant_nearest_int(iscale * (x[i] - mn)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (!(D > 0))
            continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            float diff = this_scale * Laux[i] + this_min - x[i];
            diff = use_mad ? fabsf(diff) : diff * diff;
            err += w[i] * diff;
        }
        if (err < best_err) {
            memcpy(L, Laux, (size_t)n);
            best_err = err;
            scale = this_scale;
            mn = this_min;
        }
    }
    *the_min = -mn;
    return scale;
}

/* Q2_K/Q3_K/Q6_K pack 2-bit fields of 4 elements 32 apart into one byte. */
static void pack_2bit(const uint8_t *L, uint8_t qs[QK_K / 4]) {
    for (int h = 0; h < QK_K; h += 128)
        for (int l = 0; l < 32; l++)
            qs[h / 4 + l] = (uint8_t)(L[h + l] | (L[h + l + 32] << 2) | (L[h + l + 64] << 4) |
                                      (L[h + l + 96] << 6));
}

/* ---- Q2_K ---------------------------------------------------------------------- */

void quant_quantize_q2_K(const float *x, void *vy, int64_t nb) {
    block_q2_K *y = vy;
    uint8_t L[QK_K];
    float w[16], mins[16], scales[16];
    for (int64_t b = 0; b < nb; b++, x += QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++)
                w[l] = fabsf(x[16 * j + l]);
            scales[j] =
                fit_affine(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale)
                max_scale = scales[j];
            if (mins[j] > max_min)
                max_min = mins[j];
        }
        /* 4-bit scales and mins against d = max/15, dmin = max_min/15; the
         * uint8 stores wrap exactly like ggml's for out-of-range values */
        if (max_scale > 0) {
            float iscale = 15.f / max_scale;
            for (int j = 0; j < 16; j++)
                y[b].scales[j] = (uint8_t)quant_nearest_int(iscale * scales[j]);
            y[b].d = quant_f32_to_f16(max_scale / 15.f);
        } else {
            memset(y[b].scales, 0, 16);
            y[b].d = quant_f32_to_f16(0.f);
        }
        if (max_min > 0) {
            float iscale = 15.f / max_min;
            for (int j = 0; j < 16; j++)
                y[b].scales[j] |= (uint8_t)((unsigned)quant_nearest_int(iscale * mins[j]) << 4);
            y[b].dmin = quant_f32_to_f16(max_min / 15.f);
        } else {
            y[b].dmin = quant_f32_to_f16(0.f);
        }
        for (int j = 0; j < 16; j++) {
            const float d = quant_f16_to_f32(y[b].d) * (y[b].scales[j] & 0xf);
            if (d == 0)
                continue;
            const float dm = quant_f16_to_f32(y[b].dmin) * (y[b].scales[j] >> 4);
            for (int i = 0; i < 16; i++)
                L[16 * j + i] = (uint8_t)clampi(quant_nearest_int((x[16 * j + i] + dm) / d), 0, 3);
        }
        pack_2bit(L, y[b].qs);
    }
}

void quant_unpack_q2_K(const block_q2_K *b, struct quant_kblock *u) {
    u->d = quant_f16_to_f32(b->d);
    u->dmin = quant_f16_to_f32(b->dmin);
    u->has_min = true;
    for (int g = 0; g < 16; g++) {
        u->sc[g] = b->scales[g] & 0xf;
        u->mn[g] = b->scales[g] >> 4;
    }
    for (int e = 0; e < QK_K; e++) {
        int h = e / 128, j = (e % 128) / 32, l = e % 32;
        u->L[e] = (int8_t)((b->qs[32 * h + l] >> (2 * j)) & 3);
    }
}

/* ---- Q3_K ---------------------------------------------------------------------- */

/* 6-bit scale g of Q3_K: low 4 bits in scales[g % 8] (nibble g / 8), high 2
 * bits in scales[8 + g % 4] (bits 2*(g/4)). Stored with offset 32. */
static int q3_scale(const uint8_t s[12], int g) {
    int lo = g < 8 ? s[g] & 0xf : s[g - 8] >> 4;
    int hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

void quant_quantize_q3_K(const float *x, void *vy, int64_t nb) {
    block_q3_K *y = vy;
    int8_t L[QK_K];
    float scales[16];
    for (int64_t b = 0; b < nb; b++, x += QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = fit_q3(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        memset(y[b].scales, 0, 12);
        if (max_scale != 0) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; j++) {
                int l = clampi((int8_t)quant_nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8)
                    y[b].scales[j] = (uint8_t)(l & 0xf);
                else
                    y[b].scales[j - 8] |= (uint8_t)((l & 0xf) << 4);
                y[b].scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            y[b].d = quant_f32_to_f16(1 / iscale);
        } else {
            y[b].d = quant_f32_to_f16(0.f);
        }
        for (int j = 0; j < 16; j++) {
            const float d = quant_f16_to_f32(y[b].d) * q3_scale(y[b].scales, j);
            if (d == 0)
                continue;
            for (int i = 0; i < 16; i++)
                L[16 * j + i] = (int8_t)(clampi(quant_nearest_int(x[16 * j + i] / d), -4, 3) + 4);
        }
        /* level bit 2 -> hmask, low two bits -> qs */
        uint8_t lo[QK_K];
        memset(y[b].hmask, 0, QK_K / 8);
        for (int e = 0; e < QK_K; e++) {
            if (L[e] > 3)
                y[b].hmask[e % 32] |= (uint8_t)(1u << (e / 32));
            lo[e] = (uint8_t)(L[e] & 3);
        }
        pack_2bit(lo, y[b].qs);
    }
}

void quant_unpack_q3_K(const block_q3_K *b, struct quant_kblock *u) {
    u->d = quant_f16_to_f32(b->d);
    u->dmin = 0;
    u->has_min = false;
    for (int g = 0; g < 16; g++) {
        u->sc[g] = (int16_t)q3_scale(b->scales, g);
        u->mn[g] = 0;
    }
    for (int e = 0; e < QK_K; e++) {
        int h = e / 128, j = (e % 128) / 32, l = e % 32;
        int q = (b->qs[32 * h + l] >> (2 * j)) & 3;
        int high = (b->hmask[l] >> (4 * h + j)) & 1;
        u->L[e] = (int8_t)(q - (high ? 0 : 4));
    }
}

/* ---- Q4_K / Q5_K ----------------------------------------------------------------- */

/* 6-bit scale and min of sub-block j (of 8) in the 12-byte K-scale field:
 * j < 4: scale in s[j] & 63, min in s[j+4] & 63; j >= 4: low 4 bits in the
 * nibbles of s[j+4], high 2 bits in the top bits of s[j-4] / s[j]. */
static void k4_scale_min(const uint8_t s[12], int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): fits the 8 sub-blocks, stores
 * d, dmin and the 6-bit scales, and writes the final levels into L. */
static void quantize_k_affine(const float *x, int nmax, float rmin, int nstep, quant_f16 *d_out,
                              quant_f16 *dmin_out, uint8_t scales_out[12], uint8_t L[QK_K]) {
    float w[32], mins[8], scales[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++)
            sum_x2 += xs[l] * xs[l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++)
            w[l] = av_x + fabsf(xs[l]);
        scales[j] = fit_affine(32, nmax, xs, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep, false);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)quant_nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)quant_nearest_int(inv_min * mins[j]);
        ls = ls > 63 ? 63 : ls;
        lm = lm > 63 ? 63 : lm;
        if (j < 4) {
            scales_out[j] = ls;
            scales_out[j + 4] = lm;
        } else {
            scales_out[j + 4] = (uint8_t)((ls & 0xf) | ((lm & 0xf) << 4));
            scales_out[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales_out[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = quant_f32_to_f16(max_scale / 63.f);
    *dmin_out = quant_f32_to_f16(max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        int sc, m;
        k4_scale_min(scales_out, j, &sc, &m);
        const float d = quant_f16_to_f32(*d_out) * sc;
        if (d == 0)
            continue;
        const float dm = quant_f16_to_f32(*dmin_out) * m;
        for (int i = 0; i < 32; i++)
            L[32 * j + i] = (uint8_t)clampi(quant_nearest_int((x[32 * j + i] + dm) / d), 0, nmax);
    }
}

void quant_quantize_q4_K(const float *x, void *vy, int64_t nb) {
    block_q4_K *y = vy;
    uint8_t L[QK_K];
    for (int64_t b = 0; b < nb; b++, x += QK_K) {
        quantize_k_affine(x, 15, -1.f, 20, &y[b].d, &y[b].dmin, y[b].scales, L);
        for (int h = 0; h < 4; h++)
            for (int l = 0; l < 32; l++)
                y[b].qs[32 * h + l] = (uint8_t)(L[64 * h + l] | (L[64 * h + l + 32] << 4));
    }
}

void quant_quantize_q5_K(const float *x, void *vy, int64_t nb) {
    block_q5_K *y = vy;
    uint8_t L[QK_K];
    for (int64_t b = 0; b < nb; b++, x += QK_K) {
        quantize_k_affine(x, 31, -0.5f, 15, &y[b].d, &y[b].dmin, y[b].scales, L);
        memset(y[b].qh, 0, QK_K / 8);
        for (int h = 0; h < 4; h++) {
            for (int l = 0; l < 32; l++) {
                int l1 = L[64 * h + l], l2 = L[64 * h + l + 32];
                y[b].qh[l] |= (uint8_t)(((l1 >> 4) << (2 * h)) | ((l2 >> 4) << (2 * h + 1)));
                y[b].qs[32 * h + l] = (uint8_t)((l1 & 0xf) | ((l2 & 0xf) << 4));
            }
        }
    }
}

static void unpack_k4_scales(const uint8_t s[12], float d, float dmin, struct quant_kblock *u) {
    u->d = d;
    u->dmin = dmin;
    u->has_min = true;
    for (int j = 0; j < 8; j++) {
        int sc, m;
        k4_scale_min(s, j, &sc, &m);
        u->sc[2 * j] = u->sc[2 * j + 1] = (int16_t)sc;
        u->mn[2 * j] = u->mn[2 * j + 1] = (int16_t)m;
    }
}

void quant_unpack_q4_K(const block_q4_K *b, struct quant_kblock *u) {
    unpack_k4_scales(b->scales, quant_f16_to_f32(b->d), quant_f16_to_f32(b->dmin), u);
    for (int h = 0; h < 4; h++) {
        for (int l = 0; l < 32; l++) {
            u->L[64 * h + l] = (int8_t)(b->qs[32 * h + l] & 0xf);
            u->L[64 * h + l + 32] = (int8_t)(b->qs[32 * h + l] >> 4);
        }
    }
}

void quant_unpack_q5_K(const block_q5_K *b, struct quant_kblock *u) {
    unpack_k4_scales(b->scales, quant_f16_to_f32(b->d), quant_f16_to_f32(b->dmin), u);
    for (int h = 0; h < 4; h++) {
        for (int l = 0; l < 32; l++) {
            int hi1 = (b->qh[l] >> (2 * h)) & 1, hi2 = (b->qh[l] >> (2 * h + 1)) & 1;
            u->L[64 * h + l] = (int8_t)((b->qs[32 * h + l] & 0xf) | (hi1 << 4));
            u->L[64 * h + l + 32] = (int8_t)((b->qs[32 * h + l] >> 4) | (hi2 << 4));
        }
    }
}

/* ---- Q6_K ---------------------------------------------------------------------- */

void quant_quantize_q6_K(const float *x, void *vy, int64_t nb) {
    block_q6_K *y = vy;
    int8_t L[QK_K];
    float scales[16];
    for (int64_t b = 0; b < nb; b++, x += QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int g = 0; g < 16; g++) {
            scales[g] = fit_symmetric(16, 32, x + 16 * g, L + 16 * g);
            if (fabsf(scales[g]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[g]);
                max_scale = scales[g];
            }
        }
        if (max_abs_scale < QUANT_GROUP_EPS) {
            memset(&y[b], 0, sizeof(block_q6_K));
            continue;
        }
        float iscale = -128.f / max_scale;
        y[b].d = quant_f32_to_f16(1 / iscale);
        for (int g = 0; g < 16; g++) {
            int s = quant_nearest_int(iscale * scales[g]);
            y[b].scales[g] = (int8_t)(s > 127 ? 127 : s);
        }
        for (int g = 0; g < 16; g++) {
            const float d = quant_f16_to_f32(y[b].d) * y[b].scales[g];
            if (d == 0)
                continue;
            for (int i = 0; i < 16; i++)
                L[16 * g + i] =
                    (int8_t)(clampi(quant_nearest_int(x[16 * g + i] / d), -32, 31) + 32);
        }
        /* low nibbles: e = 128h + l and e + 64 share ql[64h + l]; e + 32 and
         * e + 96 share ql[64h + 32 + l]; the four high 2-bit parts go to qh[32h + l] */
        for (int h = 0; h < 2; h++) {
            const int8_t *Lh = L + 128 * h;
            for (int l = 0; l < 32; l++) {
                y[b].ql[64 * h + l] = (uint8_t)((Lh[l] & 0xf) | ((Lh[l + 64] & 0xf) << 4));
                y[b].ql[64 * h + l + 32] =
                    (uint8_t)((Lh[l + 32] & 0xf) | ((Lh[l + 96] & 0xf) << 4));
                y[b].qh[32 * h + l] =
                    (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                              ((Lh[l + 96] >> 4) << 6));
            }
        }
    }
}

void quant_unpack_q6_K(const block_q6_K *b, struct quant_kblock *u) {
    u->d = quant_f16_to_f32(b->d);
    u->dmin = 0;
    u->has_min = false;
    for (int g = 0; g < 16; g++) {
        u->sc[g] = b->scales[g];
        u->mn[g] = 0;
    }
    for (int e = 0; e < QK_K; e++) {
        int h = e / 128, k = (e % 128) / 32, l = e % 32;
        uint8_t ql = b->ql[64 * h + 32 * (k & 1) + l];
        int lo = (k < 2) ? (ql & 0xf) : (ql >> 4);
        int hi = (b->qh[32 * h + l] >> (2 * k)) & 3;
        u->L[e] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

/* y[e] = (d * sc) * L - dmin * mn: ggml's dequantizers compute dl = d*sc and
 * ml = dmin*m once per sub-block, then dl*q - ml per element. */
void quant_kblock_to_f32(const struct quant_kblock *u, float *y) {
    for (int g = 0; g < 16; g++) {
        const float dl = u->d * u->sc[g];
        if (u->has_min) {
            const float ml = u->dmin * u->mn[g];
            for (int i = 0; i < 16; i++)
                y[16 * g + i] = dl * u->L[16 * g + i] - ml;
        } else {
            for (int i = 0; i < 16; i++)
                y[16 * g + i] = dl * u->L[16 * g + i];
        }
    }
}

/* ---- Q8_K ---------------------------------------------------------------------- */

/* Activation format of the K-quants: d = max / -127 in f32 (ggml uses -127, not
 * -128, so that the SIMD kernels never see -128), plus bsums = sum of each 16
 * levels for the min terms. */
void quant_quantize_q8_K(const float *x, void *vy, int64_t nb) {
    block_q8_K *y = vy;
    for (int64_t b = 0; b < nb; b++, x += QK_K) {
        float amax = 0, vmax = 0;
        for (int j = 0; j < QK_K; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                vmax = x[j];
            }
        }
        if (amax == 0) {
            memset(&y[b], 0, sizeof(block_q8_K)); /* ggml leaves bsums unset here */
            continue;
        }
        const float iscale = -127.f / vmax;
        for (int j = 0; j < QK_K; j++) {
            int v = quant_nearest_int(iscale * x[j]);
            y[b].qs[j] = (int8_t)clampi(v, -128, 127);
        }
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int i = 0; i < 16; i++)
                sum += y[b].qs[16 * g + i];
            y[b].bsums[g] = (int16_t)sum;
        }
        y[b].d = 1 / iscale;
    }
}

void quant_dequantize_q8_K(const void *vx, float *y, int64_t nb) {
    const block_q8_K *x = vx;
    for (int64_t b = 0; b < nb; b++)
        for (int j = 0; j < QK_K; j++)
            *y++ = x[b].d * x[b].qs[j];
}
