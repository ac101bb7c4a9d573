/* engine/ops.c: scalar elementwise and attention ops (see ops.h). The
 * formulas follow ggml's CPU ops so logits track llama.cpp closely: rope's
 * angle is the running product theta *= base^(-2/n_rot) in f32 (ggml
 * ggml_compute_forward_rope_f32), rmsnorm sums squares in f32 after the mean
 * in ggml_float (double). */
#include "engine/ops.h"

#include <math.h>

#include "engine/quant.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

static float yarn_corr_dim(int n_rot, int n_ctx_orig, float beta, float base) {
    return n_rot * logf(n_ctx_orig / (beta * 2 * (float)M_PI)) / (2 * logf(base));
}

void ops_rope_yarn_corr_dims(int n_rot, int n_ctx_orig, float freq_base, float dims[2]) {
    /* beta_fast = 32, beta_slow = 1: llama.cpp's defaults (yarn_beta_fast/slow). */
    float start = floorf(yarn_corr_dim(n_rot, n_ctx_orig, 32.0f, freq_base));
    float end = ceilf(yarn_corr_dim(n_rot, n_ctx_orig, 1.0f, freq_base));
    dims[0] = start > 0 ? start : 0;
    dims[1] = end < (float)(n_rot - 1) ? end : (float)(n_rot - 1);
}

void ops_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = w ? (x[i] * scale) * w[i] : x[i] * scale;
}

static float yarn_ramp(float low, float high, int i0) {
    float y = (i0 / 2 - low) / fmaxf(0.001f, high - low);
    return 1.0f - fminf(1.0f, fmaxf(0.0f, y));
}

/* cos/sin of pair i0's angle, YaRN-corrected (ggml rope_yarn). */
static void rope_angle(float theta_extrap, int i0, const struct ops_rope_cfg *c, float *cs,
                       float *sn) {
    float theta_interp = c->freq_scale * theta_extrap;
    float theta = theta_interp;
    float mscale = c->attn_factor;
    if (c->ext_factor != 0.0f) {
        float mix = yarn_ramp(c->corr_dims[0], c->corr_dims[1], i0) * c->ext_factor;
        theta = theta_interp * (1 - mix) + theta_extrap * mix;
        mscale *= 1.0f + 0.1f * logf(1.0f / c->freq_scale);
    }
    *cs = cosf(theta) * mscale;
    *sn = sinf(theta) * mscale;
}

void ops_rope(float *x, int n_head, int head_dim, int32_t pos, const struct ops_rope_cfg *cfg) {
    const int n_rot = cfg->n_rot;
    const float theta_scale = powf(cfg->freq_base, -2.0f / (float)n_rot);
    /* Angles are the same for every head: compute once per call. n_rot is
     * bounded by head_dim (checked at load), at most 1024 here. */
    float cs[512], sn[512];
    float theta = (float)pos;
    for (int i0 = 0; i0 < n_rot && i0 / 2 < 512; i0 += 2) {
        float ff = cfg->freq_factors ? cfg->freq_factors[i0 / 2] : 1.0f;
        rope_angle(theta / ff, i0, cfg, &cs[i0 / 2], &sn[i0 / 2]);
        theta *= theta_scale;
    }
    for (int h = 0; h < n_head; h++) {
        float *v = x + (int64_t)h * head_dim;
        if (cfg->mode == 2) {
            const int half = n_rot / 2;
            for (int i = 0; i < half; i++) {
                float a = v[i], b = v[i + half];
                v[i] = a * cs[i] - b * sn[i];
                v[i + half] = a * sn[i] + b * cs[i];
            }
        } else {
            for (int i0 = 0; i0 < n_rot; i0 += 2) {
                float a = v[i0], b = v[i0 + 1];
                v[i0] = a * cs[i0 / 2] - b * sn[i0 / 2];
                v[i0 + 1] = a * sn[i0 / 2] + b * cs[i0 / 2];
            }
        }
    }
}

void ops_softmax(float *x, int64_t n) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++)
        x[i] *= inv;
}

float ops_silu(float x) {
    return x / (1.0f + expf(-x));
}

void ops_swiglu(const float *g, const float *u, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = ops_silu(g[i]) * u[i];
}

/* f16 -> f32, exact for every input (normals, subnormals, inf, NaN): the
 * exponent is re-biased by a multiply with 2^(127-15), which is exact, and
 * also turns f16 subnormals into the right f32 normals. Inline because the
 * call to quant_f16_to_f32 per element was 34% of stories260K decode time at
 * 8 sequences x ~200 positions (perf, bench-model 1 thread). Checked against
 * quant_f16_to_f32 for all 65536 inputs in test-ops. */
static inline float f16_to_f32(uint16_t h) {
    union {
        uint32_t u;
        float f;
    } v;
    const uint32_t em = h & 0x7fffu;
    if (em >= 0x7c00u) {
        v.u = 0x7f800000u | ((em & 0x3ffu) << 13);
    } else {
        v.u = em << 13;
        v.f *= 0x1p112f;
    }
    v.u |= (uint32_t)(h & 0x8000u) << 16;
    return v.f;
}

float ops_f16_to_f32(uint16_t h) {
    return f16_to_f32(h);
}

void ops_attn_head(const float *q, const uint16_t *const *k_rows, const uint16_t *const *v_rows,
                   int n_kv, int head_dim_k, int head_dim_v, float scale, float *scores,
                   float *out) {
    /* q rounded to f16 as ggml's F16 K x F32 Q matmul converts it (vec_dot_type F16). */
    float qh[1024];
    for (int i = 0; i < head_dim_k; i++)
        qh[i] = quant_f16_to_f32(quant_f32_to_f16(q[i]));
    for (int p = 0; p < n_kv; p++) {
        const uint16_t *k = k_rows[p];
        float s = 0.0f;
        for (int i = 0; i < head_dim_k; i++)
            s += qh[i] * f16_to_f32(k[i]);
        scores[p] = s * scale;
    }
    ops_softmax(scores, n_kv);
    for (int i = 0; i < head_dim_v; i++)
        out[i] = 0.0f;
    for (int p = 0; p < n_kv; p++) {
        const uint16_t *v = v_rows[p];
        const float w = scores[p];
        for (int i = 0; i < head_dim_v; i++)
            out[i] += w * f16_to_f32(v[i]);
    }
}
