/* engine/cpu/kernels-ref.c: the reference path of the kernel tables. Dot products
 * and the Q8 activation quantizers are engine/quant/quant.h's scalar reference
 * (quant_vec_dot_ref, quant_quantize_row), so the SIMD kernels are tested
 * against the same code as the (de)quantizers. Only F32 x F32 stays here: it
 * multiplies in double (quant_vec_dot_ref multiplies in float). Float
 * accumulation across blocks is sequential (SIMD versions reorder it, hence
 * the per-type tolerances in tests/engine/cpu/test-kernels.c).
 */
#include "engine/cpu/kernels-impl.h"

const int8_t kern_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                       1,    13,   25,  38,  53,  69,  89,  113};
/* MXFP4 (E2M1) values doubled, as ggml stores them. */
const int8_t kern_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* ---- activation quantizers: quant.h's reference ---------------------------- */
/* n must be a multiple of the block size (kernels_matmul rejects other
 * widths); for other n dst is left untouched. */

void kern_quantize_q8_0(const float *x, void *dst, int64_t n) {
    (void)quant_quantize_row(QUANT_Q8_0, x, dst, n);
}

void kern_quantize_q8_1(const float *x, void *dst, int64_t n) {
    (void)quant_quantize_row(QUANT_Q8_1, x, dst, n);
}

void kern_quantize_q8_K(const float *x, void *dst, int64_t n) {
    (void)quant_quantize_row(QUANT_Q8_K, x, dst, n);
}

/* ---- dots ------------------------------------------------------------------ */

static float dot_f32(int64_t n, const void *vw, const void *va) {
    const float *x = vw, *y = va;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)x[i] * (double)y[i];
    return (float)s;
}

int kern_ref_has_dot(enum quant_type wt) {
    switch (wt) {
    case QUANT_F32:
    case QUANT_F16:
    case QUANT_BF16:
    case QUANT_Q4_0:
    case QUANT_Q4_1:
    case QUANT_Q5_0:
    case QUANT_Q5_1:
    case QUANT_Q8_0:
    case QUANT_Q2_K:
    case QUANT_Q3_K:
    case QUANT_Q4_K:
    case QUANT_Q5_K:
    case QUANT_Q6_K:
    case QUANT_IQ4_NL:
    case QUANT_IQ4_XS:
    case QUANT_MXFP4:
        return 1;
    default:
        return 0;
    }
}

float kern_ref_dot(enum quant_type wt, int64_t n, const void *w, const void *act) {
    if (!kern_ref_has_dot(wt))
        return 0.0f;
    if (wt == QUANT_F32)
        return dot_f32(n, w, act);
    return quant_vec_dot_ref(wt, n, w, act);
}

static void ref_matmul(const struct kern_mat *w, const void *xq, size_t xq_stride, int64_t n_tok,
                       float *y, int64_t ldy, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
        for (int64_t t = 0; t < n_tok; t++)
            y[t * ldy + r] =
                kern_ref_dot(w->type, w->n_cols, row, (const uint8_t *)xq + (size_t)t * xq_stride);
    }
}

void kern_ref_fill(struct kern_table *t) {
    for (int i = 0; i < QUANT_TYPE_COUNT; i++)
        t->matmul[i] = kern_ref_has_dot((enum quant_type)i) ? ref_matmul : NULL;
}
