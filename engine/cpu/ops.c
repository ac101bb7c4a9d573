/* engine/cpu/ops.c: scalar elementwise and attention ops (see ops.h). The
 * formulas follow ggml's CPU ops so logits track llama.cpp closely: rope's
 * angle is the running product theta *= base^(-2/n_rot) in f32 (ggml
 * ggml_compute_forward_rope_f32), rmsnorm sums squares in f32 after the mean
 * in ggml_float (double). */
#include "engine/cpu/ops.h"

#include <math.h>
#include <stddef.h>

#include "engine/core/error.h"
#include "engine/cpu/kernels.h"
#include "engine/quant/quant.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define OPS_X86 1
#define OPS_AVX2 __attribute__((target("avx2,fma,f16c")))
#else
#define OPS_X86 0
#endif

/* The SIMD paths follow the kernels' ISA (kernels_isa_active): AVX2 means
 * AVX2 + FMA + F16C there, so forcing an ISA (`--isa`, the tests) makes the
 * attention and elementwise ops take that ISA's path too, and every path
 * runs on a host that has a higher one. */
static int ops_isa(void) {
    return (int)kernels_isa_active();
}

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

/* The sum of squares in eight double accumulators, not one chain: a single
 * chain of dependent double adds ran ~4 cycles an element (1 us for a 1024-
 * wide row, 26 rows a layer in qwen3 with its per-head norms: ~1% of a
 * decode step in `perf record bench-model qwen3-0.6b-q8_0.gguf 2 512 16 1`).
 * The order of the double adds differs from ggml's one chain: either order
 * is within n * 2^-53 (relative, squares are positive) of the exact sum,
 * 2^-39 for n = 16384, so the float mean can differ from ggml's only when
 * the exact value lies that close to a float rounding boundary (float's unit
 * is 2^-24): greedy tokens against llama.cpp and test-logits unchanged. */
static double sum_squares(const float *x, int64_t n) {
    double s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            s[k] += (double)(x[i + k] * x[i + k]);
    double sum = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; i < n; i++)
        sum += (double)(x[i] * x[i]);
    return sum;
}

void ops_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps) {
    const double sum = sum_squares(x, n);
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

static void swiglu_scalar(const float *g, const float *u, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = ops_silu(g[i]) * u[i];
}

#if OPS_X86
OPS_AVX2 static void swiglu_avx2(const float *g, const float *u, float *y, int64_t n);
#endif

void ops_swiglu(const float *g, const float *u, float *y, int64_t n) {
#if OPS_X86
    if (ops_isa() >= KERNELS_ISA_AVX2) {
        swiglu_avx2(g, u, y, n);
        return;
    }
#endif
    swiglu_scalar(g, u, y, n);
}

/* f32 -> f16 bits for the KV cache rows. One quant_f32_to_f16 call per
 * element was 0.6% of olmoe-1b-7b decode cycles, all on the forward thread
 * while the worker waited (perf, strata run -t 2, 4096 values a layer). F16C
 * rounds to nearest even like quant_f32_to_f16 and gives the same bits for
 * every finite or infinite input; a block of 8 with a NaN takes the scalar
 * path (quant_f32_to_f16 gives sign | 0x7e00, F16C keeps payload bits). */
#if OPS_X86
OPS_AVX2 static int64_t f32_to_f16_f16c(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)))
            for (int k = 0; k < 8; k++)
                y[i + k] = quant_f32_to_f16(x[i + k]);
        else
            _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    return i;
}
#endif

void ops_f32_to_f16_row(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
#if OPS_X86
    if (ops_isa() >= KERNELS_ISA_AVX2)
        i = f32_to_f16_f16c(x, y, n);
#endif
    for (; i < n; i++)
        y[i] = quant_f32_to_f16(x[i]);
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

/* n values of q (heads of a group) rounded to f16 as ggml's F16 K x F32 Q matmul converts it. */
static void attn_round_q(const float *q, int n, float *qh) {
    for (int i = 0; i < n; i++)
        qh[i] = quant_f16_to_f32(quant_f32_to_f16(q[i]));
}

void ops_attn_head(const float *q, const uint16_t *const *k_rows, const uint16_t *const *v_rows,
                   int n_kv, int head_dim_k, int head_dim_v, float scale, float *scores,
                   float *out) {
    float qh[1024];
    attn_round_q(q, head_dim_k, qh); /* ggml's vec_dot_type F16 */
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

/* ---- grouped attention ------------------------------------------------------ */

/* Max-subtracted exp of each head's n_kv scores in place; inv[g] = 1 / sum. */
static void attn_exp_scalar(float *scores, int n_q, int n_kv, float *inv) {
    for (int g = 0; g < n_q; g++) {
        float *s = scores + (size_t)g * n_kv;
        float mx = -INFINITY;
        for (int p = 0; p < n_kv; p++)
            mx = s[p] > mx ? s[p] : mx;
        double sum = 0.0;
        for (int p = 0; p < n_kv; p++) {
            s[p] = expf(s[p] - mx);
            sum += s[p];
        }
        inv[g] = (float)(1.0 / sum);
    }
}

void ops_attn_group_scalar(const float *q, int n_q, const uint16_t *const *k_rows,
                           const uint16_t *const *v_rows, int n_kv, int head_dim_k, int head_dim_v,
                           float scale, float *scores, float *out) {
    STRATA_ASSERT(n_q >= 1 && n_q <= OPS_ATTN_GROUP_MAX && head_dim_k <= OPS_HEAD_DIM_MAX &&
                  head_dim_v <= OPS_HEAD_DIM_MAX);
    float qh[OPS_ATTN_GROUP_MAX * OPS_HEAD_DIM_MAX], row[OPS_HEAD_DIM_MAX], inv[OPS_ATTN_GROUP_MAX];
    attn_round_q(q, n_q * head_dim_k, qh);
    for (int p = 0; p < n_kv; p++) {
        for (int i = 0; i < head_dim_k; i++) /* each K row converted once per group */
            row[i] = f16_to_f32(k_rows[p][i]);
        for (int g = 0; g < n_q; g++) {
            const float *qg = qh + (size_t)g * head_dim_k;
            float s = 0.0f;
            for (int i = 0; i < head_dim_k; i++)
                s += qg[i] * row[i];
            scores[(size_t)g * n_kv + p] = s * scale;
        }
    }
    attn_exp_scalar(scores, n_q, n_kv, inv);
    for (int i = 0; i < n_q * head_dim_v; i++)
        out[i] = 0.0f;
    for (int p = 0; p < n_kv; p++) {
        for (int i = 0; i < head_dim_v; i++)
            row[i] = f16_to_f32(v_rows[p][i]);
        for (int g = 0; g < n_q; g++) {
            const float w = scores[(size_t)g * n_kv + p];
            float *o = out + (size_t)g * head_dim_v;
            for (int i = 0; i < head_dim_v; i++)
                o[i] += w * row[i];
        }
    }
    for (int g = 0; g < n_q; g++)
        for (int i = 0; i < head_dim_v; i++)
            out[(size_t)g * head_dim_v + i] *= inv[g];
}

#if OPS_X86

OPS_AVX2 static inline __m256 attn_load_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* exp(x) for x <= 0 (max-subtracted scores), Cephes' expf: x = n ln2 + r with
 * |r| <= ln2/2, a degree-6 polynomial for e^r, 2^n through the exponent bits.
 * Relative error <= 2 ulp against expf over [-87, 0] (test-ops checks 1e-6);
 * below -87.3 it returns ~0 (flushed, as e^x < 2^-126 does not matter next to
 * the max's weight 1). */
OPS_AVX2 static inline __m256 attn_exp_avx2(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

/* silu(g) * u with the exp above (g clamped to [-88, 87.3] inside exp so
 * 2^n stays a normal float): one expf per FFN element is as many exps as
 * the attention softmax of a 512-token prefill (n_ff = 8192 per token and
 * layer for llama-3.2-1b). */
OPS_AVX2 static void swiglu_avx2(const float *g, const float *u, float *y, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 e = attn_exp_avx2(
            _mm256_min_ps(_mm256_sub_ps(_mm256_setzero_ps(), x), _mm256_set1_ps(88.0f)));
        __m256 s = _mm256_div_ps(x, _mm256_add_ps(one, e));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
    swiglu_scalar(g + i, u + i, y + i, n - i);
}

OPS_AVX2 static void attn_exp_avx2_rows(float *scores, int n_q, int n_kv, float *inv) {
    for (int g = 0; g < n_q; g++) {
        float *s = scores + (size_t)g * n_kv;
        int p = 0;
        __m256 vmx = _mm256_set1_ps(-INFINITY);
        for (; p + 8 <= n_kv; p += 8)
            vmx = _mm256_max_ps(vmx, _mm256_loadu_ps(s + p));
        float lanes[8];
        _mm256_storeu_ps(lanes, vmx);
        float mx = -INFINITY;
        for (int i = 0; i < 8; i++)
            mx = lanes[i] > mx ? lanes[i] : mx;
        for (; p < n_kv; p++)
            mx = s[p] > mx ? s[p] : mx;
        const __m256 bmx = _mm256_set1_ps(mx);
        __m256d sum0 = _mm256_setzero_pd(), sum1 = _mm256_setzero_pd();
        for (p = 0; p + 8 <= n_kv; p += 8) {
            __m256 e = attn_exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + p), bmx));
            _mm256_storeu_ps(s + p, e);
            sum0 = _mm256_add_pd(sum0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
            sum1 = _mm256_add_pd(sum1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
        }
        double d[4];
        _mm256_storeu_pd(d, _mm256_add_pd(sum0, sum1));
        double sum = (d[0] + d[1]) + (d[2] + d[3]);
        if (p < n_kv) { /* tail through the same exp, padded with -inf (exp = 0) */
            float t[8];
            for (int i = 0; i < 8; i++)
                t[i] = p + i < n_kv ? s[p + i] - mx : -INFINITY;
            _mm256_storeu_ps(t, attn_exp_avx2(_mm256_loadu_ps(t)));
            for (int i = 0; p + i < n_kv; i++) {
                s[p + i] = t[i];
                sum += t[i];
            }
        }
        inv[g] = (float)(1.0 / sum);
    }
}

/* Four dot products of 8-lane accumulators into one vector of 4 sums. */
OPS_AVX2 static inline __m128 attn_hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

/* head_dim_k and head_dim_v multiples of 8. Heads go four at a time so each
 * 8-wide K chunk is converted once and feeds four FMAs. */
OPS_AVX2 static void attn_group_avx2(const float *q, int n_q, const uint16_t *const *k_rows,
                                     const uint16_t *const *v_rows, int n_kv, int dk, int dv,
                                     float scale, float *scores, float *out) {
    float qh[OPS_ATTN_GROUP_MAX * OPS_HEAD_DIM_MAX] __attribute__((aligned(32)));
    float inv[OPS_ATTN_GROUP_MAX];
    for (int i = 0; i < n_q * dk; i += 8) /* F16C rounds to nearest even, as quant_f32_to_f16 */
        _mm256_store_ps(qh + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(q + i),
                                                                _MM_FROUND_TO_NEAREST_INT)));
    for (int g0 = 0; g0 < n_q; g0 += 4) {
        const int ng = n_q - g0 < 4 ? n_q - g0 : 4;
        const float *q0 = qh + (size_t)g0 * dk;
        const float *q1 = q0 + (ng > 1 ? dk : 0), *q2 = q0 + (ng > 2 ? 2 * dk : 0),
                    *q3 = q0 + (ng > 3 ? 3 * dk : 0);
        for (int p = 0; p < n_kv; p++) {
            const uint16_t *k = k_rows[p];
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int i = 0; i < dk; i += 8) {
                __m256 kv = attn_load_f16(k + i);
                a0 = _mm256_fmadd_ps(_mm256_load_ps(q0 + i), kv, a0);
                a1 = _mm256_fmadd_ps(_mm256_load_ps(q1 + i), kv, a1);
                a2 = _mm256_fmadd_ps(_mm256_load_ps(q2 + i), kv, a2);
                a3 = _mm256_fmadd_ps(_mm256_load_ps(q3 + i), kv, a3);
            }
            float s4[4];
            _mm_storeu_ps(s4, _mm_mul_ps(attn_hsum4(a0, a1, a2, a3), _mm_set1_ps(scale)));
            for (int g = 0; g < ng; g++)
                scores[(size_t)(g0 + g) * n_kv + p] = s4[g];
        }
    }
    attn_exp_avx2_rows(scores, n_q, n_kv, inv);
    for (int i = 0; i < n_q * dv; i++)
        out[i] = 0.0f;
    int p = 0;
    /* four positions at a time: each output chunk is loaded and stored once
     * per four FMAs instead of once per FMA */
    for (; p + 4 <= n_kv; p += 4) {
        const uint16_t *v0 = v_rows[p], *v1 = v_rows[p + 1], *v2 = v_rows[p + 2],
                       *v3 = v_rows[p + 3];
        for (int i = 0; i < dv; i += 8) {
            const __m256 x0 = attn_load_f16(v0 + i), x1 = attn_load_f16(v1 + i),
                         x2 = attn_load_f16(v2 + i), x3 = attn_load_f16(v3 + i);
            for (int g = 0; g < n_q; g++) {
                const float *w = scores + (size_t)g * n_kv + p;
                float *o = out + (size_t)g * dv + i;
                __m256 acc = _mm256_fmadd_ps(_mm256_broadcast_ss(w), x0, _mm256_loadu_ps(o));
                acc = _mm256_fmadd_ps(_mm256_broadcast_ss(w + 1), x1, acc);
                acc = _mm256_fmadd_ps(_mm256_broadcast_ss(w + 2), x2, acc);
                acc = _mm256_fmadd_ps(_mm256_broadcast_ss(w + 3), x3, acc);
                _mm256_storeu_ps(o, acc);
            }
        }
    }
    for (; p < n_kv; p++) {
        const uint16_t *v = v_rows[p];
        for (int i = 0; i < dv; i += 8) {
            const __m256 vv = attn_load_f16(v + i);
            for (int g = 0; g < n_q; g++) {
                float *o = out + (size_t)g * dv + i;
                const __m256 w = _mm256_broadcast_ss(&scores[(size_t)g * n_kv + p]);
                _mm256_storeu_ps(o, _mm256_fmadd_ps(w, vv, _mm256_loadu_ps(o)));
            }
        }
    }
    for (int g = 0; g < n_q; g++) {
        const __m256 s = _mm256_set1_ps(inv[g]);
        for (int i = 0; i < dv; i += 8)
            _mm256_storeu_ps(out + (size_t)g * dv + i,
                             _mm256_mul_ps(_mm256_loadu_ps(out + (size_t)g * dv + i), s));
    }
}

#define OPS_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx2,fma,f16c")))

/* AVX-512, head dims multiples of 16. The V sum keeps a 4 heads x 64 dims
 * tile of outputs in 16 zmm registers across all positions (one f16 load and
 * convert per 16 V values, one FMA with a broadcast weight per 16 outputs),
 * where the AVX2 path loads and stores its outputs every four positions.
 * Measured on the dev box (2-vCPU AMD EPYC VM, AVX-512, /tmp microbenchmark of one
 * 4-head group, head_dim 64, 512 positions, gcc -O2): AVX2 7.5 us, this
 * 6.0 us; scalar ops_attn_head x4: 242 us (before this change: 13.5 us
 * for the first AVX2 version that loaded/stored outputs every position). */
static inline __m256 OPS_AVX512 attn_fold512(__m512 a) {
    return _mm256_add_ps(_mm512_castps512_ps256(a),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
}

/* Decode attention reads each position's f16 K row (and then its V row)
 * once, at the KV cache's row stride (1-4 KiB: heads interleave, blocks jump),
 * so the rows OPS_ATTN_PF positions ahead are prefetched (T0: the V pass of
 * the group tile reads each row twice). Only loads are added; the arithmetic
 * and bits are unchanged. Measured with a scratch bench (28 layers of an f16
 * cache shaped like kv.c's, ops_attn_group over every KV head, one token, 1
 * thread, best of 20; 2-vCPU EPYC dev box, 2026-12-01 02:31-02:33, binaries
 * interleaved under the bench lock, 3 rounds), ms a token, none / 4 / 8 / 16
 * positions ahead:
 *   qwen3-like (8 KV heads of 2 query heads, 512 positions): 7.10 6.98 7.20 /
 *     6.67 6.74 6.65 / 6.43 6.31 6.42 / 5.40 5.55 5.43 (-23%)
 *   olmoe-like (16 KV heads of 1, 512 positions): 7.72 7.63 7.63 /
 *     7.27 7.13 6.88 / 6.97 7.06 7.07 / 7.17 7.11 7.12 (-7%)
 * An earlier run, none -> 8 ahead, qwen3-like at 256 / 512 / 2048 positions:
 * 2.31 2.76 2.43 -> 2.04 1.74 1.99, 7.03 7.08 7.39 -> 6.00 5.90 5.73, 28.5
 * 29.3 30.6 -> 24.7 25.3 26.0. Then none / 16 / 32 ahead (02:34-02:36, two
 * runs, 3 rounds each): qwen3-like 6.92 7.60 7.72 / 5.37 5.68 5.75 / 4.66
 * 5.51 5.11 and 7.02 7.15 7.17 / 5.41 5.43 5.51 / 4.93 4.85 4.83 (-31%);
 * olmoe-like 7.67 8.05 7.97 / 7.37 7.52 7.51 / 7.85 7.67 7.42 (-4%, 16 and
 * 32 alike); prefetching each whole V row in the tile's first pass instead
 * (the second pass then reads L2) gave the same as 32 (5.02 4.85 5.09 at 16,
 * 4.96 4.96 5.01 at 32). Chosen: 32. End to end with 16 ahead (`strata run
 * -m MODEL --ids 100 -n N --temp 0 --ignore-eos -t 2`, old / new interleaved,
 * bench/roofline 61-114 GB/s in the same locked runs, 02:31-02:33): qwen3-0.6b Q8_0 -n 513
 * 81.5/84.3 82.0/83.7 82.9/84.3 tok/s (+2-3.5%); olmoe-1b-7b Q4_K_M -n 385
 * 73.3/77.0 76.5/75.0 77.4/76.8 (noise). Tokens and logits identical at 1
 * and 2 threads (qwen3, olmoe, llama-3.2-1b). 32 ahead, a busier minute
 * (probe 49-65 GB/s), qwen3 -n 513: 65.1/66.8 64.4/63.0 65.2/66.7. */
#ifndef OPS_ATTN_PF
#define OPS_ATTN_PF 32
#endif
OPS_AVX512 static inline void attn_pf_row(const uint16_t *r, int n) {
    for (int i = 0; i < n; i += 32) /* 32 f16 = one 64-byte line */
        _mm_prefetch((const char *)(r + i), _MM_HINT_T0);
}

/* One query head per KV head (no GQA: olmoe, 16 heads of 128): the 4-head
 * tile below would compute the head 4 times. This does each score and output
 * with the same operations in the same order as the tile (so the same bits),
 * four positions a time for the scores and 128 outputs a pass in registers
 * for the V sum. Measured: olmoe-1b-7b Q4_K_M decode, `perf record` of
 * `strata run --ids 1 -n 257 --temp 0 --ignore-eos -t 2` (2-vCPU EPYC dev
 * box): attn_group_avx512 5.4% -> 4.0% of cycles. What is left is reading
 * the f16 K/V rows (16 layers x 2 x 4 KiB a position: ~16 MiB a token on
 * average over the run), not arithmetic. */
OPS_AVX512 static void attn_head1_avx512(const float *qh, const uint16_t *const *k_rows,
                                         const uint16_t *const *v_rows, int n_kv, int dk, int dv,
                                         float scale, float *scores, float *out) {
    int p = 0;
    for (; p + 4 <= n_kv; p += 4) {
        const uint16_t *k0 = k_rows[p], *k1 = k_rows[p + 1], *k2 = k_rows[p + 2],
                       *k3 = k_rows[p + 3];
        for (int j = p + OPS_ATTN_PF; j < p + OPS_ATTN_PF + 4 && j < n_kv; j++)
            attn_pf_row(k_rows[j], dk);
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int i = 0; i < dk; i += 16) {
            const __m512 qv = _mm512_load_ps(qh + i);
            a0 = _mm512_fmadd_ps(qv, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k0 + i))),
                                 a0);
            a1 = _mm512_fmadd_ps(qv, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k1 + i))),
                                 a1);
            a2 = _mm512_fmadd_ps(qv, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k2 + i))),
                                 a2);
            a3 = _mm512_fmadd_ps(qv, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k3 + i))),
                                 a3);
        }
        _mm_storeu_ps(scores + p, _mm_mul_ps(attn_hsum4(attn_fold512(a0), attn_fold512(a1),
                                                        attn_fold512(a2), attn_fold512(a3)),
                                             _mm_set1_ps(scale)));
    }
    for (; p < n_kv; p++) {
        __m512 a0 = _mm512_setzero_ps();
        for (int i = 0; i < dk; i += 16)
            a0 = _mm512_fmadd_ps(
                _mm512_load_ps(qh + i),
                _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k_rows[p] + i))), a0);
        const __m256 b0 = attn_fold512(a0);
        float s4[4];
        _mm_storeu_ps(s4, _mm_mul_ps(attn_hsum4(b0, b0, b0, b0), _mm_set1_ps(scale)));
        scores[p] = s4[0];
    }
    float inv;
    attn_exp_avx2_rows(scores, 1, n_kv, &inv);
    const __m512 vinv = _mm512_set1_ps(inv);
    int i0 = 0;
    for (; i0 + 128 <= dv; i0 += 128) { /* 8 accumulators of 16 outputs */
        __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0,
               c7 = c0;
        for (int pp = 0; pp < n_kv; pp++) {
            const uint16_t *v = v_rows[pp] + i0;
            const __m512 w = _mm512_set1_ps(scores[pp]);
            if (pp + OPS_ATTN_PF < n_kv)
                attn_pf_row(v_rows[pp + OPS_ATTN_PF] + i0, 128);
#define OPS_V16(j) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + 16 * (j))))
            c0 = _mm512_fmadd_ps(w, OPS_V16(0), c0);
            c1 = _mm512_fmadd_ps(w, OPS_V16(1), c1);
            c2 = _mm512_fmadd_ps(w, OPS_V16(2), c2);
            c3 = _mm512_fmadd_ps(w, OPS_V16(3), c3);
            c4 = _mm512_fmadd_ps(w, OPS_V16(4), c4);
            c5 = _mm512_fmadd_ps(w, OPS_V16(5), c5);
            c6 = _mm512_fmadd_ps(w, OPS_V16(6), c6);
            c7 = _mm512_fmadd_ps(w, OPS_V16(7), c7);
#undef OPS_V16
        }
        const __m512 acc[8] = {c0, c1, c2, c3, c4, c5, c6, c7};
        for (int j = 0; j < 8; j++)
            _mm512_storeu_ps(out + i0 + 16 * j, _mm512_mul_ps(acc[j], vinv));
    }
    for (; i0 < dv; i0 += 16) { /* the rest, 16 outputs a pass */
        __m512 c0 = _mm512_setzero_ps();
        for (int pp = 0; pp < n_kv; pp++)
            c0 = _mm512_fmadd_ps(
                _mm512_set1_ps(scores[pp]),
                _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v_rows[pp] + i0))), c0);
        _mm512_storeu_ps(out + i0, _mm512_mul_ps(c0, vinv));
    }
}

/* Two query heads of a KV head (qwen3-0.6b's 16 heads over 8): the 4-head
 * tile below would compute two of its four heads twice. Each score and
 * output goes through the same operations in the same order as in the tile
 * (a head's lanes never mix with another's in attn_hsum4), so the same bits;
 * scores two positions a time, and a whole 128-dim V row a pass (2 heads x
 * 128 dims in 16 registers) instead of two 64-dim passes. Measured (2-vCPU
 * EPYC VM, 2026-12-01, `attn-bench N 8 2 20 16`: qwen3-0.6b's shape, kv.c's
 * per-head block layout, 1 thread, two interleaved rounds), ms a token: 80
 * positions (in L3) 0.285 / 0.292 -> 0.197 / 0.204; 1024 positions (DRAM)
 * 7.18 / 7.32 -> 4.81 / 4.93. In a decode at ~80 positions
 * (`bench-model qwen3-0.6b-q8_0.gguf 2 128 16 1`) attention's share of
 * cycles fell 3.5% -> 1.6% (perf), but the dispatch still takes ~12 us a
 * layer: there it waits on cold K/V rows, not on arithmetic. */
OPS_AVX512 static void attn_scores_pair(const float *q0, const float *q1,
                                        const uint16_t *const *k_rows, int n_kv, int dk,
                                        float scale, float *s0, float *s1) {
    int p = 0;
    for (; p + 2 <= n_kv; p += 2) {
        const uint16_t *k0 = k_rows[p], *k1 = k_rows[p + 1];
        for (int j = p + OPS_ATTN_PF; j < p + OPS_ATTN_PF + 2 && j < n_kv; j++)
            attn_pf_row(k_rows[j], dk);
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
        for (int i = 0; i < dk; i += 16) {
            const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k0 + i)));
            const __m512 y = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k1 + i)));
            const __m512 u0 = _mm512_load_ps(q0 + i), u1 = _mm512_load_ps(q1 + i);
            a0 = _mm512_fmadd_ps(u0, x, a0);
            a1 = _mm512_fmadd_ps(u1, x, a1);
            b0 = _mm512_fmadd_ps(u0, y, b0);
            b1 = _mm512_fmadd_ps(u1, y, b1);
        }
        float s4[4];
        _mm_storeu_ps(s4, _mm_mul_ps(attn_hsum4(attn_fold512(a0), attn_fold512(a1),
                                                attn_fold512(b0), attn_fold512(b1)),
                                     _mm_set1_ps(scale)));
        s0[p] = s4[0], s1[p] = s4[1], s0[p + 1] = s4[2], s1[p + 1] = s4[3];
    }
    if (p < n_kv) {
        const uint16_t *k0 = k_rows[p];
        __m512 a0 = _mm512_setzero_ps(), a1 = a0;
        for (int i = 0; i < dk; i += 16) {
            const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k0 + i)));
            a0 = _mm512_fmadd_ps(_mm512_load_ps(q0 + i), x, a0);
            a1 = _mm512_fmadd_ps(_mm512_load_ps(q1 + i), x, a1);
        }
        const __m256 f0 = attn_fold512(a0), f1 = attn_fold512(a1);
        float s4[4];
        _mm_storeu_ps(s4, _mm_mul_ps(attn_hsum4(f0, f1, f0, f1), _mm_set1_ps(scale)));
        s0[p] = s4[0], s1[p] = s4[1];
    }
}

OPS_AVX512 static void attn_values_pair(const float *w0, const float *w1,
                                        const uint16_t *const *v_rows, int n_kv, int dv, float inv0,
                                        float inv1, float *o0, float *o1) {
    int i0 = 0;
    for (; i0 + 128 <= dv; i0 += 128) {
        __m512 c[2][8];
        for (int j = 0; j < 8; j++)
            c[0][j] = c[1][j] = _mm512_setzero_ps();
        for (int p = 0; p < n_kv; p++) {
            const uint16_t *v = v_rows[p] + i0;
            if (p + OPS_ATTN_PF < n_kv)
                attn_pf_row(v_rows[p + OPS_ATTN_PF] + i0, 128);
            const __m512 x0 = _mm512_set1_ps(w0[p]), x1 = _mm512_set1_ps(w1[p]);
            for (int j = 0; j < 8; j++) {
                const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + 16 * j)));
                c[0][j] = _mm512_fmadd_ps(x0, x, c[0][j]);
                c[1][j] = _mm512_fmadd_ps(x1, x, c[1][j]);
            }
        }
        for (int j = 0; j < 8; j++) {
            _mm512_storeu_ps(o0 + i0 + 16 * j, _mm512_mul_ps(c[0][j], _mm512_set1_ps(inv0)));
            _mm512_storeu_ps(o1 + i0 + 16 * j, _mm512_mul_ps(c[1][j], _mm512_set1_ps(inv1)));
        }
    }
    for (; i0 < dv; i0 += 16) {
        __m512 c0 = _mm512_setzero_ps(), c1 = c0;
        for (int p = 0; p < n_kv; p++) {
            const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v_rows[p] + i0)));
            c0 = _mm512_fmadd_ps(_mm512_set1_ps(w0[p]), x, c0);
            c1 = _mm512_fmadd_ps(_mm512_set1_ps(w1[p]), x, c1);
        }
        _mm512_storeu_ps(o0 + i0, _mm512_mul_ps(c0, _mm512_set1_ps(inv0)));
        _mm512_storeu_ps(o1 + i0, _mm512_mul_ps(c1, _mm512_set1_ps(inv1)));
    }
}

OPS_AVX512 static void attn_group_avx512(const float *q, int n_q, const uint16_t *const *k_rows,
                                         const uint16_t *const *v_rows, int n_kv, int dk, int dv,
                                         float scale, float *scores, float *out) {
    float qh[OPS_ATTN_GROUP_MAX * OPS_HEAD_DIM_MAX] __attribute__((aligned(64)));
    float inv[OPS_ATTN_GROUP_MAX];
    for (int i = 0; i < n_q * dk; i += 16) /* F16C rounds to nearest even, as quant_f32_to_f16 */
        _mm512_store_ps(qh + i, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(q + i),
                                                                _MM_FROUND_TO_NEAREST_INT)));
    if (n_q == 1) {
        attn_head1_avx512(qh, k_rows, v_rows, n_kv, dk, dv, scale, scores, out);
        return;
    }
    for (int g0 = 0; g0 < n_q; g0 += 4) {
        const int ng = n_q - g0 < 4 ? n_q - g0 : 4;
        const float *q0 = qh + (size_t)g0 * dk;
        const float *q1 = q0 + (ng > 1 ? dk : 0), *q2 = q0 + (ng > 2 ? 2 * dk : 0),
                    *q3 = q0 + (ng > 3 ? 3 * dk : 0);
        if (ng == 2) {
            attn_scores_pair(q0, q1, k_rows, n_kv, dk, scale, scores + (size_t)g0 * n_kv,
                             scores + (size_t)(g0 + 1) * n_kv);
            continue;
        }
        for (int p = 0; p < n_kv; p++) {
            const uint16_t *k = k_rows[p];
            if (p + OPS_ATTN_PF < n_kv)
                attn_pf_row(k_rows[p + OPS_ATTN_PF], dk);
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int i = 0; i < dk; i += 16) {
                __m512 kv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k + i)));
                a0 = _mm512_fmadd_ps(_mm512_load_ps(q0 + i), kv, a0);
                a1 = _mm512_fmadd_ps(_mm512_load_ps(q1 + i), kv, a1);
                a2 = _mm512_fmadd_ps(_mm512_load_ps(q2 + i), kv, a2);
                a3 = _mm512_fmadd_ps(_mm512_load_ps(q3 + i), kv, a3);
            }
            const __m128 h4 =
                attn_hsum4(attn_fold512(a0), attn_fold512(a1), attn_fold512(a2), attn_fold512(a3));
            float s4[4];
            _mm_storeu_ps(s4, _mm_mul_ps(h4, _mm_set1_ps(scale)));
            for (int g = 0; g < ng; g++)
                scores[(size_t)(g0 + g) * n_kv + p] = s4[g];
        }
    }
    attn_exp_avx2_rows(scores, n_q, n_kv, inv);
    for (int g0 = 0; g0 < n_q; g0 += 4) {
        const int ng = n_q - g0 < 4 ? n_q - g0 : 4;
        /* heads past ng repeat the last one (computed, not stored) */
        const float *w0 = scores + (size_t)g0 * n_kv;
        if (ng == 2) {
            attn_values_pair(w0, w0 + n_kv, v_rows, n_kv, dv, inv[g0], inv[g0 + 1],
                             out + (size_t)g0 * dv, out + (size_t)(g0 + 1) * dv);
            continue;
        }
        const float *w1 = w0 + (size_t)(ng > 1 ? 1 : 0) * n_kv,
                    *w2 = w0 + (size_t)(ng > 2 ? 2 : ng - 1) * n_kv,
                    *w3 = w0 + (size_t)(ng > 3 ? 3 : ng - 1) * n_kv;
        for (int i0 = 0; i0 < dv; i0 += 64) {
            const int nc = (dv - i0) / 16 < 4 ? (dv - i0) / 16 : 4;
            const int o1 = nc > 1 ? 16 : 0, o2 = nc > 2 ? 32 : 0, o3 = nc > 3 ? 48 : 0;
            __m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c03 = c00;
            __m512 c10 = c00, c11 = c00, c12 = c00, c13 = c00;
            __m512 c20 = c00, c21 = c00, c22 = c00, c23 = c00;
            __m512 c30 = c00, c31 = c00, c32 = c00, c33 = c00;
            for (int p = 0; p < n_kv; p++) {
                const uint16_t *v = v_rows[p] + i0;
                if (p + OPS_ATTN_PF < n_kv)
                    attn_pf_row(v_rows[p + OPS_ATTN_PF] + i0, 16 * nc);
                const __m512 x0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)v));
                const __m512 x1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + o1)));
                const __m512 x2 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + o2)));
                const __m512 x3 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + o3)));
                __m512 w = _mm512_set1_ps(w0[p]);
                c00 = _mm512_fmadd_ps(w, x0, c00);
                c01 = _mm512_fmadd_ps(w, x1, c01);
                c02 = _mm512_fmadd_ps(w, x2, c02);
                c03 = _mm512_fmadd_ps(w, x3, c03);
                w = _mm512_set1_ps(w1[p]);
                c10 = _mm512_fmadd_ps(w, x0, c10);
                c11 = _mm512_fmadd_ps(w, x1, c11);
                c12 = _mm512_fmadd_ps(w, x2, c12);
                c13 = _mm512_fmadd_ps(w, x3, c13);
                w = _mm512_set1_ps(w2[p]);
                c20 = _mm512_fmadd_ps(w, x0, c20);
                c21 = _mm512_fmadd_ps(w, x1, c21);
                c22 = _mm512_fmadd_ps(w, x2, c22);
                c23 = _mm512_fmadd_ps(w, x3, c23);
                w = _mm512_set1_ps(w3[p]);
                c30 = _mm512_fmadd_ps(w, x0, c30);
                c31 = _mm512_fmadd_ps(w, x1, c31);
                c32 = _mm512_fmadd_ps(w, x2, c32);
                c33 = _mm512_fmadd_ps(w, x3, c33);
            }
            const __m512 acc[4][4] = {{c00, c01, c02, c03},
                                      {c10, c11, c12, c13},
                                      {c20, c21, c22, c23},
                                      {c30, c31, c32, c33}};
            for (int g = 0; g < ng; g++)
                for (int c = 0; c < nc; c++)
                    _mm512_storeu_ps(out + (size_t)(g0 + g) * dv + i0 + c * 16,
                                     _mm512_mul_ps(acc[g][c], _mm512_set1_ps(inv[g0 + g])));
        }
    }
}
#endif

void ops_attn_group(const float *q, int n_q, const uint16_t *const *k_rows,
                    const uint16_t *const *v_rows, int n_kv, int head_dim_k, int head_dim_v,
                    float scale, float *scores, float *out) {
#if OPS_X86
    STRATA_ASSERT(n_q >= 1 && n_q <= OPS_ATTN_GROUP_MAX && head_dim_k <= OPS_HEAD_DIM_MAX &&
                  head_dim_v <= OPS_HEAD_DIM_MAX);
    const int isa = ops_isa();
    if (head_dim_k % 16 == 0 && head_dim_v % 16 == 0 && isa >= KERNELS_ISA_AVX512) {
        attn_group_avx512(q, n_q, k_rows, v_rows, n_kv, head_dim_k, head_dim_v, scale, scores, out);
        return;
    }
    if (head_dim_k % 8 == 0 && head_dim_v % 8 == 0 && isa >= KERNELS_ISA_AVX2) {
        attn_group_avx2(q, n_q, k_rows, v_rows, n_kv, head_dim_k, head_dim_v, scale, scores, out);
        return;
    }
#endif
    ops_attn_group_scalar(q, n_q, k_rows, v_rows, n_kv, head_dim_k, head_dim_v, scale, scores, out);
}
