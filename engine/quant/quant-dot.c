/* engine/quant/quant-dot.c: scalar reference dot products, weight row x activation
 * row in the weight type's vec_dot_type (quant_type_traits(t)->vec_dot_type):
 *   F32 x F32, F16 x F16, BF16 x BF16          products in f32, summed in f64
 *   Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4 x Q8_0      integer sums per 32, f32 total
 *   Q4_1, Q5_1 x Q8_1                           + m_w * s_act per block
 *   Q2_K..Q6_K, IQ4_XS x Q8_K                   integer sums per 16, mins via bsums
 * These are what the SIMD kernels (engine/kernels*.c) are tested against; their
 * summation order differs, so comparisons use a tolerance (see
 * tests/engine/quant/test-quant.c for the figures against ggml).
 */
#include "engine/quant/quant-impl.h"

float quant_dot_f32(const void *vw, const void *va, int64_t n) {
    const float *w = vw, *a = va;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)(w[i] * a[i]);
    return (float)s;
}

float quant_dot_f16(const void *vw, const void *va, int64_t n) {
    const quant_f16 *w = vw, *a = va;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)(quant_f16_to_f32(w[i]) * quant_f16_to_f32(a[i]));
    return (float)s;
}

float quant_dot_bf16(const void *vw, const void *va, int64_t n) {
    const uint16_t *w = vw, *a = va;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)(quant_bf16_to_f32(w[i]) * quant_bf16_to_f32(a[i]));
    return (float)s;
}

static int dot32(const int8_t *L, const int8_t *q) {
    int s = 0;
    for (int j = 0; j < 32; j++)
        s += L[j] * q[j];
    return s;
}

/* Symmetric types against Q8_0: sum += (sumi * d_w) * d_a per block. */
#define DOT_SYM_Q8_0(fname, btype, levels)                                                         \
    float fname(const void *vw, const void *va, int64_t nb) {                                      \
        const btype *w = vw;                                                                       \
        const block_q8_0 *a = va;                                                                  \
        int8_t L[32];                                                                              \
        float sum = 0;                                                                             \
        for (int64_t b = 0; b < nb; b++) {                                                         \
            levels(&w[b], L);                                                                      \
            sum += dot32(L, a[b].qs) * quant_f16_to_f32(w[b].d) * quant_f16_to_f32(a[b].d);        \
        }                                                                                          \
        return sum;                                                                                \
    }

static void levels_q8_0(const block_q8_0 *b, int8_t L[32]) {
    for (int j = 0; j < 32; j++)
        L[j] = b->qs[j];
}

static void levels_iq4_nl(const block_iq4_nl *b, int8_t L[32]) {
    for (int j = 0; j < 16; j++) {
        L[j] = quant_kvalues_iq4nl[b->qs[j] & 0xf];
        L[j + 16] = quant_kvalues_iq4nl[b->qs[j] >> 4];
    }
}

DOT_SYM_Q8_0(quant_dot_q4_0, block_q4_0, quant_levels_q4_0)
DOT_SYM_Q8_0(quant_dot_q5_0, block_q5_0, quant_levels_q5_0)
DOT_SYM_Q8_0(quant_dot_q8_0, block_q8_0, levels_q8_0)
DOT_SYM_Q8_0(quant_dot_iq4_nl, block_iq4_nl, levels_iq4_nl)

/* MXFP4: the block scale is the E8M0 half scale instead of an f16. */
float quant_dot_mxfp4(const void *vw, const void *va, int64_t nb) {
    const block_mxfp4 *w = vw;
    const block_q8_0 *a = va;
    int8_t L[32];
    float sum = 0;
    for (int64_t b = 0; b < nb; b++) {
        for (int j = 0; j < 16; j++) {
            L[j] = quant_kvalues_mxfp4[w[b].qs[j] & 0xf];
            L[j + 16] = quant_kvalues_mxfp4[w[b].qs[j] >> 4];
        }
        const float d = quant_e8m0_to_f32_half(w[b].e) * quant_f16_to_f32(a[b].d);
        sum += d * dot32(L, a[b].qs);
    }
    return sum;
}

/* Affine types against Q8_1: sum_j (q_j d_w + m)(a_j d_a) = d_w d_a sumi + m s. */
#define DOT_AFFINE_Q8_1(fname, btype, levels)                                                      \
    float fname(const void *vw, const void *va, int64_t nb) {                                      \
        const btype *w = vw;                                                                       \
        const block_q8_1 *a = va;                                                                  \
        int8_t L[32];                                                                              \
        float sum = 0;                                                                             \
        for (int64_t b = 0; b < nb; b++) {                                                         \
            levels(&w[b], L);                                                                      \
            const float dd = quant_f16_to_f32(w[b].d) * quant_f16_to_f32(a[b].d);                  \
            sum += dd * dot32(L, a[b].qs) + quant_f16_to_f32(w[b].m) * quant_f16_to_f32(a[b].s);   \
        }                                                                                          \
        return sum;                                                                                \
    }

DOT_AFFINE_Q8_1(quant_dot_q4_1, block_q4_1, quant_levels_q4_1)
DOT_AFFINE_Q8_1(quant_dot_q5_1, block_q5_1, quant_levels_q5_1)

/* Q8_1 x Q8_1 (not a weight type ggml uses, but the table lists it). */
float quant_dot_q8_1(const void *vw, const void *va, int64_t nb) {
    const block_q8_1 *w = vw, *a = va;
    float sum = 0;
    for (int64_t b = 0; b < nb; b++)
        sum += dot32(w[b].qs, a[b].qs) * quant_f16_to_f32(w[b].d) * quant_f16_to_f32(a[b].d);
    return sum;
}

/* Super-block against Q8_K: d_w d_a sum_g sc_g (L . q)_g - dmin_w d_a sum_g mn_g bsums_g. */
static float dot_kblock(const struct quant_kblock *u, const block_q8_K *a) {
    int isum = 0, msum = 0;
    for (int g = 0; g < 16; g++) {
        int s = 0;
        for (int i = 0; i < 16; i++)
            s += u->L[16 * g + i] * a->qs[16 * g + i];
        isum += u->sc[g] * s;
        msum += u->mn[g] * a->bsums[g];
    }
    float r = u->d * a->d * (float)isum;
    if (u->has_min)
        r -= u->dmin * a->d * (float)msum;
    return r;
}

#define DOT_K(fname, btype, unpack)                                                                \
    float fname(const void *vw, const void *va, int64_t nb) {                                      \
        const btype *w = vw;                                                                       \
        const block_q8_K *a = va;                                                                  \
        struct quant_kblock u;                                                                     \
        float sum = 0;                                                                             \
        for (int64_t b = 0; b < nb; b++) {                                                         \
            unpack(&w[b], &u);                                                                     \
            sum += dot_kblock(&u, &a[b]);                                                          \
        }                                                                                          \
        return sum;                                                                                \
    }

DOT_K(quant_dot_q2_K, block_q2_K, quant_unpack_q2_K)
DOT_K(quant_dot_q3_K, block_q3_K, quant_unpack_q3_K)
DOT_K(quant_dot_q4_K, block_q4_K, quant_unpack_q4_K)
DOT_K(quant_dot_q5_K, block_q5_K, quant_unpack_q5_K)
DOT_K(quant_dot_q6_K, block_q6_K, quant_unpack_q6_K)
DOT_K(quant_dot_iq4_xs, block_iq4_xs, quant_unpack_iq4_xs)

/* Q8_K x Q8_K (the table lists Q8_K as its own vec_dot_type). */
float quant_dot_q8_K(const void *vw, const void *va, int64_t nb) {
    const block_q8_K *w = vw, *a = va;
    float sum = 0;
    for (int64_t b = 0; b < nb; b++) {
        int s = 0;
        for (int j = 0; j < QK_K; j++)
            s += w[b].qs[j] * a[b].qs[j];
        sum += w[b].d * a[b].d * (float)s;
    }
    return sum;
}
