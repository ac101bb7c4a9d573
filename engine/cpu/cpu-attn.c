/* engine/cpu/cpu-attn.c: the CPU backend's KV writes and causal attention
 * over the paged cache (engine/kv/kv.h, host store): one KV head's query
 * heads at a time through ops_attn_group, parallel over (KV head, token)
 * rows. */
#include "engine/cpu/cpu-impl.h"

#include <stdlib.h>

#include "engine/host/pool.h"
#include "engine/kv/kv.h"

/* Elements below which an attention runs inline (cpu-impl.h's elementwise
 * threshold x 4: a row's dot products are cheaper than a dispatch). */
#define CPU_INLINE_ATTN (16384 * 4)

void cpu_kv_write_run(struct cpu_ctx *c, const struct cpu_cmd *cmd) {
    const struct cpu_kvw *w = &cmd->a.kvw;
    const int64_t nk = (int64_t)w->n_head_kv * w->head_dim_k;
    const int64_t nv = (int64_t)w->n_head_kv * w->head_dim_v;
    const float *k = w->k->data, *v = w->v->data;
    const int32_t *seq = w->seq->data, *pos = w->pos->data;
    for (int t = 0; t < w->n_tok; t++)
        for (int h = 0; h < w->n_head_kv; h++) { /* each head into its part of the block */
            ops_f32_to_f16_row(k + t * nk + h * w->head_dim_k,
                               kv_k_head(w->kv, w->layer, seq[t], pos[t], h, w->head_dim_k),
                               w->head_dim_k);
            ops_f32_to_f16_row(v + t * nv + h * w->head_dim_v,
                               kv_v_head(w->kv, w->layer, seq[t], pos[t], h, w->head_dim_v),
                               w->head_dim_v);
        }
}

struct attn_job {
    const struct backend_attn *a;
    struct cpu_ctx *c;
};

/* Row r is (kv head hk = r / n_tok, token t = r % n_tok): the query heads of
 * one KV head go through ops_attn_group together, so each K/V row is read
 * and converted once per group instead of once per query head (4x fewer for
 * llama-3.2-1b's 32/8 heads), and a worker's consecutive rows share one KV
 * head's rows of a sequence, which stay in L2 across the tokens of a
 * prefill chunk (a cheap form of query x key tiling).
 * Measured on the 2-core dev box (AVX-512), release, 2 threads, llama-3.2-1b,
 * the same matmul kernels in both binaries (the old ops.c/backend-cpu.c of
 * commit 9a48289 vs this), alternated, best of 3 (other jobs kept the load at
 * ~3, single runs swing 2x):
 *   bench-model q4_0 MODEL 2 16 512 8: decode 8 seq at ~512 pos 213 -> 84.7 ms/step
 *     (37.5 -> 94.5 tok/s); 1 seq 40.2 -> 22.6 ms/step; prefill 512: 83.7 -> 240 tok/s
 *   strata run -m MODEL --ids <512 ids> -n 1 --temp 0 -t 2 --json, prompt_tok_s:
 *     q4_0 67.4 -> 234; q4_k_m 59.3 -> 74.4 (best of 2)
 * perf after (bench-model q4_0 2 48 512 8): attention 5.3% of cycles, matmuls 90%. */
static void attn_rows(void *ctx, int64_t r0, int64_t r1, int worker) {
    const struct attn_job *j = ctx;
    const struct backend_attn *a = j->a;
    struct cpu_scratch *s = &j->c->scratch[worker];
    const int group = a->n_head / a->n_head_kv;
    const float *q = cpu_t(a->q)->data;
    float *out = cpu_t(a->out)->data;
    const int32_t *seq = cpu_t(a->seq)->data, *pos = cpu_t(a->pos)->data;
    /* the paged KV cache keeps a block's rows contiguous (kv.h): one lookup a block */
    const struct kv_params *kp = kv_get_params(a->kv);
    const int nb = kp->n_block;
    const size_t sk = kv_k_stride(a->kv), sv = kv_v_stride(a->kv);
    for (int64_t r = r0; r < r1; r++) {
        const int hk = (int)(r / a->n_tok), t = (int)(r % a->n_tok);
        const int n_kv = pos[t] + 1;
        for (int p = 0; p < n_kv;) {
            const uint16_t *k0 = kv_k_head(a->kv, a->layer, seq[t], p, hk, a->head_dim_k);
            const uint16_t *v0 = kv_v_head(a->kv, a->layer, seq[t], p, hk, a->head_dim_v);
            int run = nb - p % nb;
            if (run > n_kv - p)
                run = n_kv - p;
            for (int i = 0; i < run; i++) {
                s->k_rows[p + i] = k0 + (size_t)i * sk;
                s->v_rows[p + i] = v0 + (size_t)i * sv;
            }
            p += run;
        }
        for (int g0 = 0; g0 < group; g0 += OPS_ATTN_GROUP_MAX) {
            const int h = hk * group + g0;
            const int ng = group - g0 < OPS_ATTN_GROUP_MAX ? group - g0 : OPS_ATTN_GROUP_MAX;
            ops_attn_group(q + ((size_t)t * a->n_head + h) * a->head_dim_k, ng, s->k_rows,
                           s->v_rows, n_kv, a->head_dim_k, a->head_dim_v, a->scale, s->scores,
                           out + ((size_t)t * a->n_head + h) * a->head_dim_v);
        }
    }
}

int cpu_attn_reserve(struct cpu_ctx *c, int n) {
    for (int w = 0; w < c->n_workers; w++) {
        struct cpu_scratch *s = &c->scratch[w];
        if (s->cap >= n)
            continue;
        int cap = n < 256 ? 256 : n;
        const uint16_t **k = realloc(s->k_rows, (size_t)cap * sizeof *k);
        if (k)
            s->k_rows = k;
        const uint16_t **v = realloc(s->v_rows, (size_t)cap * sizeof *v);
        if (v)
            s->v_rows = v;
        float *sc = realloc(s->scores, (size_t)cap * OPS_ATTN_GROUP_MAX * sizeof *sc);
        if (sc)
            s->scores = sc;
        if (!k || !v || !sc)
            return STRATA_E_NOMEM;
        s->cap = cap;
    }
    return 0;
}

void cpu_attn_run(struct cpu_ctx *c, const struct backend_attn *a) {
    const int32_t *pos = cpu_t(a->pos)->data;
    int max_kv = 0;
    for (int t = 0; t < a->n_tok; t++)
        max_kv = pos[t] + 1 > max_kv ? pos[t] + 1 : max_kv;
    for (int w = 0; w < c->n_workers; w++) /* a caller bug: begin reserves for n_kv_max */
        STRATA_ASSERT(c->scratch[w].cap >= max_kv);
    struct attn_job j = {a, c};
    const int64_t rows = (int64_t)a->n_tok * a->n_head_kv;
    if (rows * (a->n_head / a->n_head_kv) * max_kv * (a->head_dim_k + a->head_dim_v) <
            CPU_INLINE_ATTN ||
        !c->pool) {
        attn_rows(&j, 0, rows, 0);
        return;
    }
    struct pool_task t = {.fn = attn_rows, .ctx = &j, .n_rows = rows, .min_grain = 1};
    pool_run(c->pool, &t, 1);
}

void cpu_attn_free(struct cpu_ctx *c) {
    if (!c->scratch)
        return;
    for (int w = 0; w < c->n_workers; w++) {
        free(c->scratch[w].k_rows);
        free(c->scratch[w].v_rows);
        free(c->scratch[w].scores);
    }
    free(c->scratch);
    c->scratch = NULL;
}
