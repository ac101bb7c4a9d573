/* engine/quant/quant.c: f16/bf16 conversions, the 32-element block types (Q4_0,
 * Q4_1, Q5_0, Q5_1, Q8_0, Q8_1) and the per-type dispatch of quant.h.
 *
 * Bit-exactness with ggml: every quantizer and dequantizer below repeats the
 * float operations of ggml's reference code (ggml-quants.c, *_ref and
 * dequantize_row_*) in the same order and with the same roundings, so the
 * results match byte for byte on any IEEE-754 machine. The library is built
 * with -ffp-contract=off (engine/meson.build) so that `q*d + m` is never fused
 * into an FMA, which ggml's x86-64 base build does not do either. Checked
 * against ../shared/fixtures/quant by tests/engine/quant/test-quant.c.
 */
#include "engine/quant/quant-impl.h"

#include <float.h>
#include <string.h>

#include "engine/core/error.h"

/* ---- f16 / bf16 ------------------------------------------------------------ */

float quant_f16_to_f32(quant_f16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) { /* inf / nan: keep the payload */
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) { /* zero or subnormal: man * 2^-24, exact in f32 */
        float v = (float)man * 0x1p-24f;
        memcpy(&bits, &v, 4);
        bits |= sign;
    } else { /* rebias 15 -> 127 */
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

quant_f16 quant_f32_to_f16(float f) {
    uint32_t w;
    memcpy(&w, &f, 4);
    uint16_t sign = (uint16_t)((w >> 16) & 0x8000u);
    uint32_t a = w & 0x7fffffffu;
    if (a > 0x7f800000u) /* nan -> quiet nan, as ggml's scalar path */
        return sign | 0x7e00u;
    if (a >= 0x477ff000u) /* >= 65520 rounds (ties to even) to inf */
        return sign | 0x7c00u;
    if (a < 0x38800000u) { /* below 2^-14: f16 subnormal, units of 2^-24 */
        uint32_t exp = a >> 23;
        uint32_t shift = 126 - exp; /* value = m * 2^(exp-150) = (m >> shift) units */
        if (exp == 0 || shift > 24)
            return sign; /* below 2^-25 (or exactly half of it): rounds to zero */
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++;
        return sign | (uint16_t)q; /* q == 0x400 is the smallest normal: right */
    }
    /* normal: drop 13 mantissa bits with round-to-nearest-even; a carry
     * propagates into the exponent, which is the right encoding */
    uint32_t h = (a >> 13) - (112u << 10);
    uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++;
    return sign | (uint16_t)h;
}

float quant_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t quant_f32_to_bf16(float f) {
    uint32_t w;
    memcpy(&w, &f, 4);
    if ((w & 0x7fffffffu) > 0x7f800000u) /* nan: keep the sign, force quiet */
        return (uint16_t)((w >> 16) | 0x40u);
    /* round to nearest even on the 16 dropped bits (inf stays inf, the
     * largest finite values round up to inf as IEEE says) */
    return (uint16_t)((w + 0x7fffu + ((w >> 16) & 1u)) >> 16);
}

static void quantize_f32(const float *x, void *y, int64_t n) {
    memcpy(y, x, (size_t)n * sizeof(float));
}
static void dequantize_f32(const void *x, float *y, int64_t n) {
    memcpy(y, x, (size_t)n * sizeof(float));
}
static void quantize_f16(const float *x, void *vy, int64_t n) {
    quant_f16 *y = vy;
    for (int64_t i = 0; i < n; i++)
        y[i] = quant_f32_to_f16(x[i]);
}
static void dequantize_f16(const void *vx, float *y, int64_t n) {
    const quant_f16 *x = vx;
    for (int64_t i = 0; i < n; i++)
        y[i] = quant_f16_to_f32(x[i]);
}
static void quantize_bf16(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++)
        y[i] = quant_f32_to_bf16(x[i]);
}
static void dequantize_bf16(const void *vx, float *y, int64_t n) {
    const uint16_t *x = vx;
    for (int64_t i = 0; i < n; i++)
        y[i] = quant_bf16_to_f32(x[i]);
}

/* ---- 32-element blocks ----------------------------------------------------- */

/* The value of largest magnitude (the first one on ties), with its sign. */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, vmax = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            vmax = x[j];
        }
    }
    return vmax;
}

static void min_max(const float *x, int n, float *mn, float *mx) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo)
            lo = x[j];
        if (x[j] > hi)
            hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

/* Symmetric 4 bit: d = max / -8 so the largest magnitude maps to level 0 and
 * the rest to round(x/d) + 8 in [0, 15]; element j in the low nibble of qs[j],
 * element j+16 in the high nibble. */
void quant_quantize_q4_0(const float *x, void *vy, int64_t nb) {
    block_q4_0 *y = vy;
    for (int64_t b = 0; b < nb; b++, x += QK4_0) {
        const float d = signed_absmax(x, QK4_0) / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = quant_f32_to_f16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            int lo = quant_trunc_clamp(x[j] * id + 8.5f, 0, 15);
            int hi = quant_trunc_clamp(x[j + QK4_0 / 2] * id + 8.5f, 0, 15);
            y[b].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

/* Affine 4 bit: x ~ q*d + m with m the block minimum and d = range / 15. */
void quant_quantize_q4_1(const float *x, void *vy, int64_t nb) {
    block_q4_1 *y = vy;
    for (int64_t b = 0; b < nb; b++, x += QK4_1) {
        float mn, mx;
        min_max(x, QK4_1, &mn, &mx);
        const float d = (mx - mn) / 15;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = quant_f32_to_f16(d);
        y[b].m = quant_f32_to_f16(mn);
        for (int j = 0; j < QK4_1 / 2; j++) {
            int lo = quant_trunc_clamp((x[j] - mn) * id + 0.5f, 0, 15);
            int hi = quant_trunc_clamp((x[j + QK4_1 / 2] - mn) * id + 0.5f, 0, 15);
            y[b].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

/* 5-bit levels: low 4 bits in qs like Q4_0, bit 4 of element j in bit j of the
 * little-endian uint32 qh. */
static void pack5(const int L[32], uint8_t qs[16], uint8_t qh_bytes[4]) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((L[j] & 0x0f) | ((L[j + 16] & 0x0f) << 4));
        qh |= (uint32_t)((L[j] >> 4) & 1) << j;
        qh |= (uint32_t)((L[j + 16] >> 4) & 1) << (j + 16);
    }
    for (int k = 0; k < 4; k++)
        qh_bytes[k] = (uint8_t)(qh >> (8 * k));
}

static void unpack5(const uint8_t qs[16], const uint8_t qh_bytes[4], int L[32]) {
    uint32_t qh = (uint32_t)qh_bytes[0] | (uint32_t)qh_bytes[1] << 8 | (uint32_t)qh_bytes[2] << 16 |
                  (uint32_t)qh_bytes[3] << 24;
    for (int j = 0; j < 16; j++) {
        L[j] = (qs[j] & 0x0f) | (int)(((qh >> j) & 1) << 4);
        L[j + 16] = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
    }
}

void quant_quantize_q5_0(const float *x, void *vy, int64_t nb) {
    block_q5_0 *y = vy;
    for (int64_t b = 0; b < nb; b++, x += QK5_0) {
        const float d = signed_absmax(x, QK5_0) / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int L[32];
        y[b].d = quant_f32_to_f16(d);
        for (int j = 0; j < QK5_0; j++)
            L[j] = quant_trunc_clamp(x[j] * id + 16.5f, 0, 31);
        pack5(L, y[b].qs, y[b].qh);
    }
}

void quant_quantize_q5_1(const float *x, void *vy, int64_t nb) {
    block_q5_1 *y = vy;
    for (int64_t b = 0; b < nb; b++, x += QK5_1) {
        float mn, mx;
        min_max(x, QK5_1, &mn, &mx);
        const float d = (mx - mn) / 31;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int L[32];
        y[b].d = quant_f32_to_f16(d);
        y[b].m = quant_f32_to_f16(mn);
        for (int j = 0; j < QK5_1; j++)
            L[j] = quant_trunc_clamp((x[j] - mn) * id + 0.5f, 0, 31);
        pack5(L, y[b].qs, y[b].qh);
    }
}

/* Q8_0 / Q8_1: d = absmax / 127, q = roundf(x / d) (half away from zero, as
 * ggml's reference; its SIMD versions agree, see the manifest's
 * act_q_ref_mismatch_bytes = 0). Q8_1 also stores s = d * sum(q) in f16. */
static float q8_block(const float *x, int8_t *q, int *sum) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int s = 0;
    for (int j = 0; j < 32; j++) {
        float r = roundf(x[j] * id);
        int v = r >= 127.0f ? 127 : (r <= -127.0f ? -127 : (r == r ? (int)r : 0)); /* nan: 0 */
        q[j] = (int8_t)v;
        s += q[j];
    }
    *sum = s;
    return d;
}

void quant_quantize_q8_0(const float *x, void *vy, int64_t nb) {
    block_q8_0 *y = vy;
    int sum;
    for (int64_t b = 0; b < nb; b++, x += QK8_0)
        y[b].d = quant_f32_to_f16(q8_block(x, y[b].qs, &sum));
}

void quant_quantize_q8_1(const float *x, void *vy, int64_t nb) {
    block_q8_1 *y = vy;
    int sum;
    for (int64_t b = 0; b < nb; b++, x += QK8_1) {
        const float d = q8_block(x, y[b].qs, &sum);
        y[b].d = quant_f32_to_f16(d);
        y[b].s = quant_f32_to_f16((float)sum * d);
    }
}

void quant_levels_q4_0(const block_q4_0 *b, int8_t L[32]) {
    for (int j = 0; j < 16; j++) {
        L[j] = (int8_t)((b->qs[j] & 0x0f) - 8);
        L[j + 16] = (int8_t)((b->qs[j] >> 4) - 8);
    }
}

void quant_levels_q4_1(const block_q4_1 *b, int8_t L[32]) {
    for (int j = 0; j < 16; j++) {
        L[j] = (int8_t)(b->qs[j] & 0x0f);
        L[j + 16] = (int8_t)(b->qs[j] >> 4);
    }
}

void quant_levels_q5_0(const block_q5_0 *b, int8_t L[32]) {
    int u[32];
    unpack5(b->qs, b->qh, u);
    for (int j = 0; j < 32; j++)
        L[j] = (int8_t)(u[j] - 16);
}

void quant_levels_q5_1(const block_q5_1 *b, int8_t L[32]) {
    int u[32];
    unpack5(b->qs, b->qh, u);
    for (int j = 0; j < 32; j++)
        L[j] = (int8_t)u[j];
}

/* Dequantization: y = L*d, or L*d + m for the affine types (two roundings). */
void quant_dequantize_q4_0(const void *vx, float *y, int64_t nb) {
    const block_q4_0 *x = vx;
    int8_t L[32];
    for (int64_t b = 0; b < nb; b++, y += 32) {
        const float d = quant_f16_to_f32(x[b].d);
        quant_levels_q4_0(&x[b], L);
        for (int j = 0; j < 32; j++)
            y[j] = L[j] * d;
    }
}

void quant_dequantize_q4_1(const void *vx, float *y, int64_t nb) {
    const block_q4_1 *x = vx;
    int8_t L[32];
    for (int64_t b = 0; b < nb; b++, y += 32) {
        const float d = quant_f16_to_f32(x[b].d), m = quant_f16_to_f32(x[b].m);
        quant_levels_q4_1(&x[b], L);
        for (int j = 0; j < 32; j++)
            y[j] = L[j] * d + m;
    }
}

void quant_dequantize_q5_0(const void *vx, float *y, int64_t nb) {
    const block_q5_0 *x = vx;
    int8_t L[32];
    for (int64_t b = 0; b < nb; b++, y += 32) {
        const float d = quant_f16_to_f32(x[b].d);
        quant_levels_q5_0(&x[b], L);
        for (int j = 0; j < 32; j++)
            y[j] = L[j] * d;
    }
}

void quant_dequantize_q5_1(const void *vx, float *y, int64_t nb) {
    const block_q5_1 *x = vx;
    int8_t L[32];
    for (int64_t b = 0; b < nb; b++, y += 32) {
        const float d = quant_f16_to_f32(x[b].d), m = quant_f16_to_f32(x[b].m);
        quant_levels_q5_1(&x[b], L);
        for (int j = 0; j < 32; j++)
            y[j] = L[j] * d + m;
    }
}

void quant_dequantize_q8_0(const void *vx, float *y, int64_t nb) {
    const block_q8_0 *x = vx;
    for (int64_t b = 0; b < nb; b++, y += 32) {
        const float d = quant_f16_to_f32(x[b].d);
        for (int j = 0; j < 32; j++)
            y[j] = x[b].qs[j] * d;
    }
}

/* Q8_1's s is redundant for dequantization (ggml ignores it too). */
void quant_dequantize_q8_1(const void *vx, float *y, int64_t nb) {
    const block_q8_1 *x = vx;
    for (int64_t b = 0; b < nb; b++, y += 32) {
        const float d = quant_f16_to_f32(x[b].d);
        for (int j = 0; j < 32; j++)
            y[j] = x[b].qs[j] * d;
    }
}

/* ---- dispatch -------------------------------------------------------------- */

struct quant_ops {
    void (*quantize)(const float *x, void *y, int64_t nb);
    void (*dequantize)(const void *x, float *y, int64_t nb);
    float (*dot)(const void *w, const void *a, int64_t nb);
};

static const struct quant_ops quant_ops_table[QUANT_TYPE_COUNT] = {
    [QUANT_F32] = {quantize_f32, dequantize_f32, quant_dot_f32},
    [QUANT_F16] = {quantize_f16, dequantize_f16, quant_dot_f16},
    [QUANT_BF16] = {quantize_bf16, dequantize_bf16, quant_dot_bf16},
    [QUANT_Q4_0] = {quant_quantize_q4_0, quant_dequantize_q4_0, quant_dot_q4_0},
    [QUANT_Q4_1] = {quant_quantize_q4_1, quant_dequantize_q4_1, quant_dot_q4_1},
    [QUANT_Q5_0] = {quant_quantize_q5_0, quant_dequantize_q5_0, quant_dot_q5_0},
    [QUANT_Q5_1] = {quant_quantize_q5_1, quant_dequantize_q5_1, quant_dot_q5_1},
    [QUANT_Q8_0] = {quant_quantize_q8_0, quant_dequantize_q8_0, quant_dot_q8_0},
    [QUANT_Q8_1] = {quant_quantize_q8_1, quant_dequantize_q8_1, quant_dot_q8_1},
    [QUANT_Q2_K] = {quant_quantize_q2_K, NULL, quant_dot_q2_K},
    [QUANT_Q3_K] = {quant_quantize_q3_K, NULL, quant_dot_q3_K},
    [QUANT_Q4_K] = {quant_quantize_q4_K, NULL, quant_dot_q4_K},
    [QUANT_Q5_K] = {quant_quantize_q5_K, NULL, quant_dot_q5_K},
    [QUANT_Q6_K] = {quant_quantize_q6_K, NULL, quant_dot_q6_K},
    [QUANT_Q8_K] = {quant_quantize_q8_K, quant_dequantize_q8_K, quant_dot_q8_K},
    [QUANT_IQ4_NL] = {quant_quantize_iq4_nl, quant_dequantize_iq4_nl, quant_dot_iq4_nl},
    [QUANT_IQ4_XS] = {quant_quantize_iq4_xs, NULL, quant_dot_iq4_xs},
    [QUANT_MXFP4] = {quant_quantize_mxfp4, quant_dequantize_mxfp4, quant_dot_mxfp4},
};

/* Super-block types dequantize through their unpacked integer form. */
static bool dequantize_kblocks(enum quant_type t, const void *src, float *dst, int64_t nb) {
    struct quant_kblock u;
    for (int64_t b = 0; b < nb; b++, dst += QK_K) {
        switch (t) {
        case QUANT_Q2_K:
            quant_unpack_q2_K((const block_q2_K *)src + b, &u);
            break;
        case QUANT_Q3_K:
            quant_unpack_q3_K((const block_q3_K *)src + b, &u);
            break;
        case QUANT_Q4_K:
            quant_unpack_q4_K((const block_q4_K *)src + b, &u);
            break;
        case QUANT_Q5_K:
            quant_unpack_q5_K((const block_q5_K *)src + b, &u);
            break;
        case QUANT_Q6_K:
            quant_unpack_q6_K((const block_q6_K *)src + b, &u);
            break;
        case QUANT_IQ4_XS:
            quant_unpack_iq4_xs((const block_iq4_xs *)src + b, &u);
            break;
        default:
            return false;
        }
        quant_kblock_to_f32(&u, dst);
    }
    return true;
}

/* Blocks in n elements of t, or -1 when t has no ops or n does not fit. */
static int64_t block_count(enum quant_type t, int64_t n) {
    const struct quant_traits *tr = quant_type_traits((uint32_t)t);
    if (!tr || n < 0 || n % tr->block_size)
        return -1;
    return n / tr->block_size;
}

int quant_dequantize_row(enum quant_type t, const void *src, float *dst, int64_t n) {
    if ((unsigned)t >= QUANT_TYPE_COUNT || !quant_ops_table[t].dot)
        return STRATA_E_UNSUPPORTED;
    int64_t nb = block_count(t, n);
    if (nb < 0)
        return STRATA_E_INVALID;
    if (quant_ops_table[t].dequantize) {
        quant_ops_table[t].dequantize(src, dst, nb);
        return 0;
    }
    return dequantize_kblocks(t, src, dst, nb) ? 0 : STRATA_E_UNSUPPORTED;
}

int quant_quantize_row(enum quant_type t, const float *src, void *dst, int64_t n) {
    if ((unsigned)t >= QUANT_TYPE_COUNT || !quant_ops_table[t].quantize)
        return STRATA_E_UNSUPPORTED;
    int64_t nb = block_count(t, n);
    if (nb < 0)
        return STRATA_E_INVALID;
    quant_ops_table[t].quantize(src, dst, nb);
    return 0;
}

float quant_vec_dot_ref(enum quant_type t, int64_t n, const void *w, const void *act) {
    if ((unsigned)t >= QUANT_TYPE_COUNT || !quant_ops_table[t].dot)
        return NAN;
    int64_t nb = block_count(t, n);
    if (nb < 0)
        return NAN;
    return quant_ops_table[t].dot(w, act, nb);
}
