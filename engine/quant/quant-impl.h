/* engine/quant/quant-impl.h: internals shared by quant.c, quant-k.c, quant-iq.c and
 * quant-dot.c. Not a public header: other modules use engine/quant/quant.h.
 *
 * Every per-type function works on whole blocks: `nb` is the number of blocks,
 * the caller (quant.c) has already checked that n is a multiple of the block
 * size. Sources and destinations are borrowed and must not overlap.
 *
 * Threading: pure functions, no shared state.
 */
#ifndef STRATA_QUANT_IMPL_H
#define STRATA_QUANT_IMPL_H

#include <math.h>
#include <stdint.h>

#include "engine/quant/quant.h"

/* ggml's nearest_int adds 1.5 * 2^23 and reads the mantissa bits: round half to
 * even, valid for |v| <= 4194303 (ggml asserts that). rintf under the default
 * rounding mode gives the same integers on that range; outside it (only
 * reachable with inf/nan or absurd inputs) we clamp instead of ggml's
 * wrap-around so that no conversion is undefined. */
static inline int quant_nearest_int(float v) {
    if (!(fabsf(v) <= 4194303.f))
        return v > 0 ? 4194303 : (v < 0 ? -4194303 : 0);
    return (int)rintf(v);
}

/* C's float -> integer conversion (truncation toward zero) as ggml's
 * `(int8_t)(x + 8.5f)`, clamped to [lo, hi] first so that nan or out-of-range
 * values never reach an undefined conversion. lo must be <= 0. */
static inline int quant_trunc_clamp(float v, int lo, int hi) {
    if (!(v > (float)lo))
        return lo;
    if (v >= (float)hi)
        return hi;
    return (int)v;
}

/* A K-quant super-block unpacked to integers (QK_K elements):
 *   y[e] = (d * sc[e/16]) * L[e] - dmin * mn[e/16]
 * is ggml's dequantization for Q2_K..Q6_K and IQ4_XS, with its float
 * operation order (types without a min have mn = 0 and dmin = 0: x - 0 is x).
 * The dot product with Q8_K uses the same form with integer sums. */
struct quant_kblock {
    float d;        /* super-block scale */
    float dmin;     /* super-block scale of the mins; 0 when the type has none */
    int8_t L[QK_K]; /* signed levels, the type's offset already removed */
    int16_t sc[16]; /* per 16 elements: integer scale */
    int16_t mn[16]; /* per 16 elements: integer min (subtracted) */
    bool has_min;   /* Q2_K, Q4_K, Q5_K */
};

/* quant.c: 32-element block types and the activation formats. */
void quant_quantize_q4_0(const float *x, void *y, int64_t nb);
void quant_quantize_q4_1(const float *x, void *y, int64_t nb);
void quant_quantize_q5_0(const float *x, void *y, int64_t nb);
void quant_quantize_q5_1(const float *x, void *y, int64_t nb);
void quant_quantize_q8_0(const float *x, void *y, int64_t nb);
void quant_quantize_q8_1(const float *x, void *y, int64_t nb);
void quant_dequantize_q4_0(const void *x, float *y, int64_t nb);
void quant_dequantize_q4_1(const void *x, float *y, int64_t nb);
void quant_dequantize_q5_0(const void *x, float *y, int64_t nb);
void quant_dequantize_q5_1(const void *x, float *y, int64_t nb);
void quant_dequantize_q8_0(const void *x, float *y, int64_t nb);
void quant_dequantize_q8_1(const void *x, float *y, int64_t nb);
/* Levels of one 32-element block as signed integers (scale applied later). */
void quant_levels_q4_0(const block_q4_0 *b, int8_t L[32]);
void quant_levels_q4_1(const block_q4_1 *b, int8_t L[32]);
void quant_levels_q5_0(const block_q5_0 *b, int8_t L[32]);
void quant_levels_q5_1(const block_q5_1 *b, int8_t L[32]);

/* quant-k.c: K-quants and Q8_K. */
void quant_quantize_q2_K(const float *x, void *y, int64_t nb);
void quant_quantize_q3_K(const float *x, void *y, int64_t nb);
void quant_quantize_q4_K(const float *x, void *y, int64_t nb);
void quant_quantize_q5_K(const float *x, void *y, int64_t nb);
void quant_quantize_q6_K(const float *x, void *y, int64_t nb);
void quant_quantize_q8_K(const float *x, void *y, int64_t nb);
void quant_dequantize_q8_K(const void *x, float *y, int64_t nb);
void quant_unpack_q2_K(const block_q2_K *b, struct quant_kblock *u);
void quant_unpack_q3_K(const block_q3_K *b, struct quant_kblock *u);
void quant_unpack_q4_K(const block_q4_K *b, struct quant_kblock *u);
void quant_unpack_q5_K(const block_q5_K *b, struct quant_kblock *u);
void quant_unpack_q6_K(const block_q6_K *b, struct quant_kblock *u);
/* Dequantizes an unpacked super-block (the formula above) into y[QK_K]. */
void quant_kblock_to_f32(const struct quant_kblock *u, float *y);

/* quant-iq.c: non-linear 4-bit types and MXFP4. */
extern const int8_t quant_kvalues_iq4nl[16];
extern const int8_t quant_kvalues_mxfp4[16];
float quant_e8m0_to_f32_half(uint8_t e);
void quant_quantize_iq4_nl(const float *x, void *y, int64_t nb);
void quant_quantize_iq4_xs(const float *x, void *y, int64_t nb);
void quant_quantize_mxfp4(const float *x, void *y, int64_t nb);
void quant_dequantize_iq4_nl(const void *x, float *y, int64_t nb);
void quant_dequantize_mxfp4(const void *x, float *y, int64_t nb);
void quant_unpack_iq4_xs(const block_iq4_xs *b, struct quant_kblock *u);

/* quant-dot.c: scalar reference dots, one weight row (nb blocks) against an
 * activation row in the type's vec_dot_type. */
float quant_dot_f32(const void *w, const void *a, int64_t n);
float quant_dot_f16(const void *w, const void *a, int64_t n);
float quant_dot_bf16(const void *w, const void *a, int64_t n);
float quant_dot_q4_0(const void *w, const void *a, int64_t nb);
float quant_dot_q4_1(const void *w, const void *a, int64_t nb);
float quant_dot_q5_0(const void *w, const void *a, int64_t nb);
float quant_dot_q5_1(const void *w, const void *a, int64_t nb);
float quant_dot_q8_0(const void *w, const void *a, int64_t nb);
float quant_dot_q8_1(const void *w, const void *a, int64_t nb);
float quant_dot_iq4_nl(const void *w, const void *a, int64_t nb);
float quant_dot_mxfp4(const void *w, const void *a, int64_t nb);
float quant_dot_q2_K(const void *w, const void *a, int64_t nb);
float quant_dot_q3_K(const void *w, const void *a, int64_t nb);
float quant_dot_q4_K(const void *w, const void *a, int64_t nb);
float quant_dot_q5_K(const void *w, const void *a, int64_t nb);
float quant_dot_q6_K(const void *w, const void *a, int64_t nb);
float quant_dot_iq4_xs(const void *w, const void *a, int64_t nb);
float quant_dot_q8_K(const void *w, const void *a, int64_t nb);

#endif
