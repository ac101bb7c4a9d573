/* engine/kernels-ref.c: scalar reference dot products (every weight type with
 * its activation format) and the Q8 activation quantizers.
 *
 * The integer parts follow ggml's generic kernels: per block an exact int32
 * sum of weight x activation quants, then float scales. Float accumulation
 * across blocks is plain sequential float (SIMD versions reorder it, hence
 * the per-type tolerances in tests/engine/test-kernels.c). F32/F16/BF16 dots
 * accumulate in double like ggml's scalar ggml_vec_dot_f16.
 */
#include <math.h>

#include "engine/kernels-impl.h"

const int8_t kern_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                       1,    13,   25,  38,  53,  69,  89,  113};
/* MXFP4 (E2M1) values doubled, as ggml stores them. */
const int8_t kern_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* Round half to even through the float trick ggml's nearest_int uses. */
static inline int nearest_int(float fval) {
    float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

/* ---- activation quantizers ------------------------------------------------- */

void kern_quantize_q8_0(const float *x, void *dst, int64_t n) {
    block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const float *xb = x + i * QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++)
            amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127.0f;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = kern_f32_to_f16(d);
        for (int j = 0; j < QK8_0; j++)
            y[i].qs[j] = (int8_t)roundf(xb[j] * id);
    }
}

void kern_quantize_q8_1(const float *x, void *dst, int64_t n) {
    block_q8_1 *y = dst;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        const float *xb = x + i * QK8_1;
        float amax = 0.0f;
        for (int j = 0; j < QK8_1; j++)
            amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127.0f;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = kern_f32_to_f16(d);
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) {
            y[i].qs[j] = (int8_t)roundf(xb[j] * id);
            sum += y[i].qs[j];
        }
        y[i].s = kern_f32_to_f16((float)sum * d);
    }
}

void kern_quantize_q8_K(const float *x, void *dst, int64_t n) {
    block_q8_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float *xb = x + i * QK_K;
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < QK_K; j++) {
            float ax = fabsf(xb[j]);
            if (ax > amax) {
                amax = ax;
                max = xb[j];
            }
        }
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {
            int v = nearest_int(iscale * xb[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int k = 0; k < 16; k++)
                sum += y[i].qs[j * 16 + k];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

/* ---- dots: 32-element blocks ----------------------------------------------- */

static float dot_q4_0(int64_t n, const void *vw, const void *va) {
    const block_q4_0 *x = vw;
    const block_q8_0 *y = va;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += ((x[i].qs[j] & 0xf) - 8) * y[i].qs[j];
            sumi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        }
        sumf += (float)sumi * kern_f16_to_f32(x[i].d) * kern_f16_to_f32(y[i].d);
    }
    return sumf;
}

static float dot_q4_1(int64_t n, const void *vw, const void *va) {
    const block_q4_1 *x = vw;
    const block_q8_1 *y = va;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += (x[i].qs[j] & 0xf) * y[i].qs[j];
            sumi += (x[i].qs[j] >> 4) * y[i].qs[j + 16];
        }
        sumf += kern_f16_to_f32(x[i].d) * kern_f16_to_f32(y[i].d) * (float)sumi +
                kern_f16_to_f32(x[i].m) * kern_f16_to_f32(y[i].s);
    }
    return sumf;
}

static float dot_q5_0(int64_t n, const void *vw, const void *va) {
    const block_q5_0 *x = vw;
    const block_q8_0 *y = va;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK5_0; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            int h0 = ((qh >> j) << 4) & 0x10;
            int h1 = (qh >> (j + 12)) & 0x10;
            sumi += (((x[i].qs[j] & 0xf) | h0) - 16) * y[i].qs[j];
            sumi += (((x[i].qs[j] >> 4) | h1) - 16) * y[i].qs[j + 16];
        }
        sumf += (float)sumi * kern_f16_to_f32(x[i].d) * kern_f16_to_f32(y[i].d);
    }
    return sumf;
}

static float dot_q5_1(int64_t n, const void *vw, const void *va) {
    const block_q5_1 *x = vw;
    const block_q8_1 *y = va;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK5_1; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            int h0 = ((qh >> j) << 4) & 0x10;
            int h1 = (qh >> (j + 12)) & 0x10;
            sumi += ((x[i].qs[j] & 0xf) | h0) * y[i].qs[j];
            sumi += ((x[i].qs[j] >> 4) | h1) * y[i].qs[j + 16];
        }
        sumf += kern_f16_to_f32(x[i].d) * kern_f16_to_f32(y[i].d) * (float)sumi +
                kern_f16_to_f32(x[i].m) * kern_f16_to_f32(y[i].s);
    }
    return sumf;
}

static float dot_q8_0(int64_t n, const void *vw, const void *va) {
    const block_q8_0 *x = vw;
    const block_q8_0 *y = va;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++)
            sumi += x[i].qs[j] * y[i].qs[j];
        sumf += (float)sumi * (kern_f16_to_f32(x[i].d) * kern_f16_to_f32(y[i].d));
    }
    return sumf;
}

static float dot_nl_table(int64_t n, const void *vw, const void *va, const int8_t *kv, int mxfp4) {
    const block_q8_0 *y = va;
    float sumf = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        const uint8_t *qs;
        float dx;
        if (mxfp4) {
            const block_mxfp4 *x = (const block_mxfp4 *)vw + i;
            qs = x->qs;
            dx = kern_e8m0_half(x->e);
        } else {
            const block_iq4_nl *x = (const block_iq4_nl *)vw + i;
            qs = x->qs;
            dx = kern_f16_to_f32(x->d);
        }
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += y[i].qs[j] * kv[qs[j] & 0xf] + y[i].qs[j + 16] * kv[qs[j] >> 4];
        sumf += dx * kern_f16_to_f32(y[i].d) * (float)sumi;
    }
    return sumf;
}

static float dot_iq4_nl(int64_t n, const void *w, const void *a) {
    return dot_nl_table(n, w, a, kern_kvalues_iq4nl, 0);
}

static float dot_mxfp4(int64_t n, const void *w, const void *a) {
    return dot_nl_table(n, w, a, kern_kvalues_mxfp4, 1);
}

/* ---- dots: K-quants (256-element super-blocks, Q8_K activations) ------------ */

/* 6-bit scale and min j (0..7) of Q4_K / Q5_K. */
static inline void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
    }
}

static float dot_q2_K(int64_t n, const void *vw, const void *va) {
    const block_q2_K *x = vw;
    const block_q8_K *y = va;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int summs = 0;
        for (int j = 0; j < 16; j++)
            summs += y[i].bsums[j] * (x[i].scales[j] >> 4);
        const float dall = y[i].d * kern_f16_to_f32(x[i].d);
        const float dmin = y[i].d * kern_f16_to_f32(x[i].dmin);
        int isum = 0, is = 0;
        const uint8_t *q2 = x[i].qs;
        const int8_t *q8 = y[i].qs;
        for (int k = 0; k < QK_K / 128; k++) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; half++) {
                    int d = x[i].scales[is++] & 0xf;
                    int isuml = 0;
                    for (int l = 0; l < 16; l++)
                        isuml += q8[half * 16 + l] * ((q2[half * 16 + l] >> shift) & 3);
                    isum += d * isuml;
                }
                q8 += 32;
            }
            q2 += 32;
        }
        sumf += dall * (float)isum - dmin * (float)summs;
    }
    return sumf;
}

static float dot_q3_K(int64_t n, const void *vw, const void *va) {
    const block_q3_K *x = vw;
    const block_q8_K *y = va;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        /* 16 6-bit scales packed in 12 bytes: low 4 bits then high 2 bits. */
        int8_t scales[16];
        const uint8_t *s = x[i].scales;
        for (int j = 0; j < 16; j++) {
            int lo = j < 8 ? (s[j] & 0xf) : (s[j - 8] >> 4);
            int hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
            scales[j] = (int8_t)((lo | (hi << 4)) - 32);
        }
        const uint8_t *q3 = x[i].qs;
        const uint8_t *hm = x[i].hmask;
        const int8_t *q8 = y[i].qs;
        uint8_t m = 1;
        int isum = 0, is = 0;
        for (int k = 0; k < QK_K / 128; k++) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; half++) {
                    int sumi = 0;
                    for (int l = half * 16; l < half * 16 + 16; l++) {
                        int q = ((q3[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
                        sumi += q * q8[l];
                    }
                    isum += scales[is++] * sumi;
                }
                q8 += 32;
                m <<= 1;
            }
            q3 += 32;
        }
        sumf += kern_f16_to_f32(x[i].d) * y[i].d * (float)isum;
    }
    return sumf;
}

static float dot_q4_K(int64_t n, const void *vw, const void *va) {
    const block_q4_K *x = vw;
    const block_q8_K *y = va;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0, summ = 0;
        for (int j = 0; j < QK_K / 32; j++) {
            uint8_t sc, m;
            scale_min_k4(j, x[i].scales, &sc, &m);
            const uint8_t *q4 = x[i].qs + (j / 2) * 32;
            const int8_t *q8 = y[i].qs + j * 32;
            int shift = (j & 1) * 4, sumi = 0;
            for (int l = 0; l < 32; l++)
                sumi += ((q4[l] >> shift) & 0xf) * q8[l];
            isum += sc * sumi;
            summ += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        const float d = kern_f16_to_f32(x[i].d) * y[i].d;
        const float dmin = kern_f16_to_f32(x[i].dmin) * y[i].d;
        sumf += d * (float)isum - dmin * (float)summ;
    }
    return sumf;
}

static float dot_q5_K(int64_t n, const void *vw, const void *va) {
    const block_q5_K *x = vw;
    const block_q8_K *y = va;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0, summ = 0;
        for (int j = 0; j < QK_K / 32; j++) {
            uint8_t sc, m;
            scale_min_k4(j, x[i].scales, &sc, &m);
            const uint8_t *q4 = x[i].qs + (j / 2) * 32;
            const int8_t *q8 = y[i].qs + j * 32;
            int shift = (j & 1) * 4, sumi = 0;
            for (int l = 0; l < 32; l++) {
                int q = ((q4[l] >> shift) & 0xf) | (((x[i].qh[l] >> j) & 1) << 4);
                sumi += q * q8[l];
            }
            isum += sc * sumi;
            summ += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        const float d = kern_f16_to_f32(x[i].d) * y[i].d;
        const float dmin = kern_f16_to_f32(x[i].dmin) * y[i].d;
        sumf += d * (float)isum - dmin * (float)summ;
    }
    return sumf;
}

static float dot_q6_K(int64_t n, const void *vw, const void *va) {
    const block_q6_K *x = vw;
    const block_q8_K *y = va;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *ql = x[i].ql;
        const uint8_t *qh = x[i].qh;
        const int8_t *q8 = y[i].qs;
        int isum = 0;
        for (int h = 0; h < 2; h++) { /* two halves of 128 */
            int s4[4][2] = {{0, 0}, {0, 0}, {0, 0}, {0, 0}};
            for (int l = 0; l < 32; l++) {
                int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                s4[0][l / 16] += q1 * q8[l];
                s4[1][l / 16] += q2 * q8[l + 32];
                s4[2][l / 16] += q3 * q8[l + 64];
                s4[3][l / 16] += q4 * q8[l + 96];
            }
            const int8_t *sc = x[i].scales + h * 8;
            for (int g = 0; g < 4; g++)
                for (int k = 0; k < 2; k++)
                    isum += sc[2 * g + k] * s4[g][k];
            ql += 64;
            qh += 32;
            q8 += 128;
        }
        sumf += kern_f16_to_f32(x[i].d) * y[i].d * (float)isum;
    }
    return sumf;
}

static float dot_iq4_xs(int64_t n, const void *vw, const void *va) {
    const block_iq4_xs *x = vw;
    const block_q8_K *y = va;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d4d8 = kern_f16_to_f32(x[i].d) * y[i].d;
        int sumi = 0;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            int ls = ((x[i].scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) |
                     (((x[i].scales_h >> 2 * ib) & 3) << 4);
            const uint8_t *qs = x[i].qs + ib * 16;
            const int8_t *q8 = y[i].qs + ib * 32;
            int s = 0;
            for (int j = 0; j < 16; j++)
                s += q8[j] * kern_kvalues_iq4nl[qs[j] & 0xf] +
                     q8[j + 16] * kern_kvalues_iq4nl[qs[j] >> 4];
            sumi += (ls - 32) * s;
        }
        sumf += d4d8 * (float)sumi;
    }
    return sumf;
}

/* ---- dots: plain floats ---------------------------------------------------- */

static float dot_f32(int64_t n, const void *vw, const void *va) {
    const float *x = vw, *y = va;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)x[i] * (double)y[i];
    return (float)s;
}

static float dot_f16(int64_t n, const void *vw, const void *va) {
    const uint16_t *x = vw, *y = va;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)(kern_f16_to_f32(x[i]) * kern_f16_to_f32(y[i]));
    return (float)s;
}

static float dot_bf16(int64_t n, const void *vw, const void *va) {
    const uint16_t *x = vw, *y = va;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)(kern_bf16_to_f32(x[i]) * kern_bf16_to_f32(y[i]));
    return (float)s;
}

typedef float (*ref_dot_fn)(int64_t n, const void *w, const void *act);

static ref_dot_fn ref_dot_for(enum quant_type t) {
    switch (t) {
    case QUANT_F32:
        return dot_f32;
    case QUANT_F16:
        return dot_f16;
    case QUANT_BF16:
        return dot_bf16;
    case QUANT_Q4_0:
        return dot_q4_0;
    case QUANT_Q4_1:
        return dot_q4_1;
    case QUANT_Q5_0:
        return dot_q5_0;
    case QUANT_Q5_1:
        return dot_q5_1;
    case QUANT_Q8_0:
        return dot_q8_0;
    case QUANT_Q2_K:
        return dot_q2_K;
    case QUANT_Q3_K:
        return dot_q3_K;
    case QUANT_Q4_K:
        return dot_q4_K;
    case QUANT_Q5_K:
        return dot_q5_K;
    case QUANT_Q6_K:
        return dot_q6_K;
    case QUANT_IQ4_NL:
        return dot_iq4_nl;
    case QUANT_IQ4_XS:
        return dot_iq4_xs;
    case QUANT_MXFP4:
        return dot_mxfp4;
    default:
        return NULL;
    }
}

int kern_ref_has_dot(enum quant_type wt) {
    return ref_dot_for(wt) != NULL;
}

float kern_ref_dot(enum quant_type wt, int64_t n, const void *w, const void *act) {
    ref_dot_fn f = ref_dot_for(wt);
    return f ? f(n, w, act) : 0.0f;
}

static void ref_matmul(const struct kern_mat *w, const void *xq, size_t xq_stride, int64_t n_tok,
                       float *y, int64_t ldy, int64_t r0, int64_t r1) {
    ref_dot_fn f = ref_dot_for(w->type);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
        for (int64_t t = 0; t < n_tok; t++)
            y[t * ldy + r] =
                f ? f(w->n_cols, row, (const uint8_t *)xq + (size_t)t * xq_stride) : 0.0f;
    }
}

void kern_ref_fill(struct kern_table *t) {
    for (int i = 0; i < QUANT_TYPE_COUNT; i++)
        t->matmul[i] = ref_dot_for((enum quant_type)i) ? ref_matmul : NULL;
}
