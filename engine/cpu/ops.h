/* engine/cpu/ops.h: scalar elementwise and attention ops of the forward pass
 * (rmsnorm, rope, softmax, silu, one head's attention). These are the
 * reference versions: backend-cpu.c calls them on row ranges handed out by
 * the pool; a GPU backend is tested against them.
 *
 *   ops_rmsnorm(x, w, y, n_embd, eps);               // y = x / rms(x) * w
 *   ops_rope(q, n_head, head_dim, pos, &rope_cfg);   // in place
 *
 * Threading: every function is pure on its arguments (no shared state).
 */
#ifndef STRATA_OPS_H
#define STRATA_OPS_H

#include <stdint.h>

struct ops_rope_cfg {
    int n_rot;                 /* rotated dims per head (<= head_dim, even) */
    int mode;                  /* 0 = adjacent pairs (llama), 2 = neox halves (qwen) */
    float freq_base;           /* theta base */
    float freq_scale;          /* 1 / linear or YaRN factor */
    float ext_factor;          /* YaRN ramp mix: 1 for YaRN, else 0 */
    float attn_factor;         /* magnitude scale (1) */
    float corr_dims[2];        /* YaRN correction range (from ops_rope_yarn_corr_dims) */
    const float *freq_factors; /* borrowed: (n_rot/2) divisors (llama3 rope_freqs), or NULL */
};

/* ggml's YaRN correction dims for beta_fast = 32, beta_slow = 1. */
void ops_rope_yarn_corr_dims(int n_rot, int n_ctx_orig, float freq_base, float dims[2]);

/* y[i] = x[i] / sqrt(mean(x^2) + eps) * (w ? w[i] : 1); y may alias x. */
void ops_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps);
/* Rotates the first n_rot dims of each of n_head heads of x (n_head, head_dim) at pos. */
void ops_rope(float *x, int n_head, int head_dim, int32_t pos, const struct ops_rope_cfg *cfg);
/* In-place softmax over n values (max-subtracted, f32 accumulation). */
void ops_softmax(float *x, int64_t n);
/* y[i] = silu(g[i]) * u[i]; y may alias g or u. */
void ops_swiglu(const float *g, const float *u, float *y, int64_t n);
float ops_silu(float x);
/* y[i] = quant_f32_to_f16(x[i]) for n values (F16C when the CPU has it; the
 * same bits, NaN included). */
void ops_f32_to_f16_row(const float *x, uint16_t *y, int64_t n);
/* IEEE binary16 bits to f32, exact (same results as quant_f16_to_f32). */
float ops_f16_to_f32(uint16_t h);

/* One query head against n_kv cached positions:
 *   out = sum_p softmax_p(scale * q.k_p) v_p
 * q: (head_dim_k) f32, rounded to f16 before the dot as ggml does with F16 K;
 * k_rows[p], v_rows[p]: (head_dim_k) / (head_dim_v) f16 (already offset to the
 * head); scores: (n_kv) scratch; out: (head_dim_v) f32. */
void ops_attn_head(const float *q, const uint16_t *const *k_rows, const uint16_t *const *v_rows,
                   int n_kv, int head_dim_k, int head_dim_v, float scale, float *scores,
                   float *out);

/* Most query heads one ops_attn_group call takes, and the largest head_dim. */
#define OPS_ATTN_GROUP_MAX 8
#define OPS_HEAD_DIM_MAX 1024

/* n_q query heads that share one KV head (GQA) against n_kv positions: each
 * K and V row is read and converted once for the whole group.
 * q: (n_q, head_dim_k) f32, rounded to f16 as in ops_attn_head;
 * k_rows[p], v_rows[p] as in ops_attn_head; scores: (n_q, n_kv) scratch;
 * out: (n_q, head_dim_v) f32. 1 <= n_q <= OPS_ATTN_GROUP_MAX, head dims <=
 * OPS_HEAD_DIM_MAX (asserted). Uses the kernels' active ISA
 * (kernels_isa_active: AVX-512 when both head dims are multiples of 16,
 * AVX2+FMA+F16C when multiples of 8; the choice depends only on the ISA and
 * the shape, so results never depend on batching or thread count), else the
 * scalar path. Within ~1e-6 relative of ops_attn_head per head (summation
 * order and a polynomial exp; test-ops checks). */
void ops_attn_group(const float *q, int n_q, const uint16_t *const *k_rows,
                    const uint16_t *const *v_rows, int n_kv, int head_dim_k, int head_dim_v,
                    float scale, float *scores, float *out);
/* The scalar path of ops_attn_group (the reference SIMD is tested against). */
void ops_attn_group_scalar(const float *q, int n_q, const uint16_t *const *k_rows,
                           const uint16_t *const *v_rows, int n_kv, int head_dim_k, int head_dim_v,
                           float scale, float *scores, float *out);

#endif
