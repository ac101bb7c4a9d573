/* engine/cpu/cpu-moe.c: the CPU backend's MoE ops: the router's softmax and
 * top-k, and the routed experts' FFN. (token, slot) picks are grouped by
 * expert so each expert's weights are read once per call: the gate and up
 * matrices of every picked expert go in one dispatch, then the down ones,
 * then each token's weighted sum in slot order (independent of how the batch
 * grouped, so results never depend on the other entries of a batch).
 *
 * Where olmoe decode time goes (the 2-vCPU EPYC dev box, release, 2 threads,
 * `strata run -m MODEL --ids 100 -n 129 --temp 0 --ignore-eos -t 2`, 02:20-02:25
 * 2026-12-01, under the bench lock with bench/roofline at 42-56 GB/s; timers
 * around the matmuls, the MoE and model_forward in a scratch copy, not kept):
 * matmuls are 96% of a decode step (15.1 of 15.8 ms) and stream at the same
 * rate as the dense models' (olmoe 48.9, llama-3.2-1b Q4_K_M 48.8, qwen3-0.6b
 * Q8_0 50.9 GB/s of weights, one run each in a row); the expert gate+up and
 * down dispatches alone 45-48 GB/s, about kernels-bench's q4_K / q6_K decode
 * on 1024- and 2048-wide rows (47-50 GB/s, same box, same minute). Routing,
 * gather, swiglu, quantization and the weighted sum are ~0.3 ms a token, the
 * pool's end-of-dispatch wait 0.2 ms (27 ms over the run, ~200 dispatches
 * a token). Same run, models in turn, 2 rounds: olmoe 55.5 / 55.5 tok/s
 * (41 GB/s of its 740 MB a token), llama Q4_K_M 56.7 / 54.5 (44-45 GB/s of
 * 800 MB), qwen3 67.7 / 69.0 (43-44 GB/s of 633 MB): olmoe within ~8% of
 * the dense models per byte, not the 66% vs 87% of roofline of bench/cpu's
 * 02:16 run (each model against its own probe reads, which swing 42-77
 * GB/s). Tried and not kept (A/B interleaved in one locked run, old/new
 * pairs): prefetching the next job's first 8 KB while a decode chunk
 * computes its matrix's last 8 KB of rows (an expert matrix's head starts
 * cold; in cpu-matmul.c): 59.1/61.0 59.0/60.0 64.9/65.3 65.1/63.0 tok/s,
 * and in a second run gate+up 45.1/46.1 46.6/44.3 45.0/46.3 44.8/44.2
 * GB/s: noise. KX_DECODE_PF_BYTES 8/16/32 KB on olmoe, 3 rounds:
 * 61.7/59.9/60.5 61.6/61.7/61.2 62.0/60.0/61.7 tok/s: noise. */
#include "engine/cpu/cpu-impl.h"

#include <string.h>

void cpu_route_run(struct cpu_ctx *c, const struct backend_route *r) {
    const int NE = r->n_expert, K = r->k;
    float *logits = cpu_t(r->logits)->data, *sel_w = cpu_t(r->sel_w)->data;
    int32_t *sel_all = cpu_t(r->sel)->data;
    for (int t = 0; t < r->n_tok; t++) {
        float *p = logits + (size_t)t * NE;
        ops_softmax(p, NE);
        int32_t *sel = sel_all + (size_t)t * K;
        float *w = sel_w + (size_t)t * K;
        float sum = 0.0f;
        for (int j = 0; j < K; j++) { /* k passes of selection: ties go to the lower id */
            int best = -1;
            for (int e = 0; e < NE; e++) {
                bool taken = false;
                for (int i = 0; i < j; i++)
                    taken |= sel[i] == e;
                if (!taken && (best < 0 || p[e] > p[best]))
                    best = e;
            }
            sel[j] = best;
            w[j] = p[best];
            sum += w[j];
        }
        if (r->norm_topk)
            for (int j = 0; j < K; j++)
                w[j] /= sum;
        const float ws = r->scale;
        if (ws != 0.0f && ws != 1.0f)
            for (int j = 0; j < K; j++)
                w[j] *= ws;
    }
}

static bool named(const struct backend_expert *e) {
    return e->gate.w || e->gate.host.data;
}

/* The first expert the table names, or NULL. */
static const struct backend_expert *first_named(const struct backend_moe *m) {
    for (int e = 0; e < m->n_expert; e++)
        if (named(&m->experts[e]))
            return &m->experts[e];
    return NULL;
}

void cpu_moe_record(struct cpu_ctx *c, const struct backend_moe *m) {
    STRATA_ASSERT(m->x->n_rows * m->x->n_cols >= (int64_t)m->n_tok * m->n_embd &&
                  m->out->n_rows * m->out->n_cols >= (int64_t)m->n_tok * m->n_embd &&
                  m->sel->n_rows * m->sel->n_cols >= (int64_t)m->n_tok * m->k);
    struct cpu_cmd *cmd = cpu_record(c, CPU_MOE);
    if (!cmd)
        return;
    cmd->a.moe = *m;
    const struct backend_expert *e = first_named(m);
    if (!e)
        return;
    /* scratch for the worst case: every pick's row */
    const size_t rows = (size_t)m->n_tok * (size_t)m->k;
    const struct kern_mat wg = cpu_mat(&e->gate), wu = cpu_mat(&e->up), wd = cpu_mat(&e->down);
    const size_t sg = kernels_act_row_size(wg.type, wg.n_cols);
    const size_t su = kernels_act_row_size(wu.type, wu.n_cols);
    const size_t sd = kernels_act_row_size(wd.type, wd.n_cols);
    (void)cpu_buf_reserve(c, &c->moe_xq[0], rows * (sg > sd ? sg : sd));
    (void)cpu_buf_reserve(c, &c->moe_xq[1], rows * su);
    (void)cpu_buf_reserve(c, &c->moe_stage, (size_t)m->n_tok * (sg > su ? sg : su));
    (void)cpu_buf_reserve(c, &c->moe_g, rows * (size_t)m->n_ff * sizeof(float));
    (void)cpu_buf_reserve(c, &c->moe_u, rows * (size_t)m->n_ff * sizeof(float));
    (void)cpu_buf_reserve(c, &c->moe_dn, rows * (size_t)m->n_embd * sizeof(float));
    (void)cpu_buf_reserve(c, &c->moe_idx, (3 * (size_t)m->n_expert + rows) * sizeof(int));
    (void)cpu_buf_reserve(c, &c->moe_jobs,
                          2 * (size_t)m->n_expert *
                              (sizeof(struct kern_mat) + sizeof(struct cpu_kjob)));
}

/* dst row row_of[i] = x row i / K in wtype's activation format (stride bytes
 * a row), for every pick i the table names: x is quantized once into the
 * staging buffer (a token's K picks share one input; quantizing the K
 * gathered f32 copies cost 2.4% of olmoe decode cycles, perf). */
static void gather_act(struct cpu_ctx *c, const struct backend_moe *m, enum quant_type wtype,
                       size_t stride, const int *row_of, uint8_t *dst) {
    uint8_t *stage = c->moe_stage.p;
    cpu_quantize(c, wtype, cpu_t(m->x)->data, m->n_tok, m->n_embd, stage, stride);
    for (int i = 0; i < m->n_tok * m->k; i++)
        if (row_of[i] >= 0)
            memcpy(dst + (size_t)row_of[i] * stride, stage + (size_t)(i / m->k) * stride, stride);
}

void cpu_moe_run(struct cpu_ctx *c, const struct backend_moe *m) {
    if (m->late) { /* experts still being read: cpu-moe-late.c */
        cpu_moe_run_late(c, m);
        return;
    }
    const int NE = m->n_expert, K = m->k, n = m->n_tok;
    const int64_t E = m->n_embd, FE = m->n_ff;
    const int32_t *sel = cpu_t(m->sel)->data;
    const struct backend_expert *first = first_named(m);
    int *cnt = c->moe_idx.p, *off = cnt + NE, *fill = off + NE, *row_of = fill + NE;
    int served = 0;
    if (first) {
        /* Group (token, slot) picks by expert: rows [off[e], off[e] + cnt[e]) in token order. */
        memset(cnt, 0, (size_t)NE * sizeof *cnt);
        for (int i = 0; i < n * K; i++)
            if (named(&m->experts[sel[i]]))
                cnt[sel[i]]++;
        for (int e = 0, o = 0; e < NE; e++) {
            off[e] = o;
            fill[e] = 0;
            o += cnt[e];
        }
        for (int i = 0; i < n * K; i++) {
            const int e = sel[i];
            row_of[i] = named(&m->experts[e]) ? off[e] + fill[e]++ : -1;
            served += row_of[i] >= 0;
        }
    }
    if (served > 0) {
        /* All experts of a layer share the tensor types: quantize each
         * token's input once per format, then gather the rows by expert. */
        const struct kern_mat wg0 = cpu_mat(&first->gate), wu0 = cpu_mat(&first->up);
        const struct kern_mat wd0 = cpu_mat(&first->down);
        const size_t sg = kernels_act_row_size(wg0.type, wg0.n_cols);
        const size_t su = kernels_act_row_size(wu0.type, wu0.n_cols);
        const size_t sd = kernels_act_row_size(wd0.type, wd0.n_cols);
        uint8_t *xg = c->moe_xq[0].p, *xu = xg;
        float *g = c->moe_g.p, *u = c->moe_u.p, *dn = c->moe_dn.p;
        gather_act(c, m, wg0.type, sg, row_of, xg);
        if (kernels_act_type(wu0.type) != kernels_act_type(wg0.type)) {
            xu = c->moe_xq[1].p;
            gather_act(c, m, wu0.type, su, row_of, xu);
        }
        /* split: each expert's jobs whole to one group (cpu-moe-numa.h) */
        const int8_t *on = cpu_moe_numa_plan(c, m, cnt);
        /* gate + up of every picked expert in one dispatch: 2 jobs an expert */
        struct kern_mat *mats = c->moe_jobs.p;
        struct cpu_kjob *jobs = (struct cpu_kjob *)(mats + 2 * (size_t)NE);
        int nm = 0;
        for (int e = 0; e < NE; e++) {
            if (!cnt[e])
                continue;
            mats[nm] = cpu_mat(&m->experts[e].gate);
            jobs[nm] = (struct cpu_kjob){&mats[nm], xg + (size_t)off[e] * sg, sg,
                                         cnt[e],    g + (size_t)off[e] * FE,  FE};
            nm++;
            mats[nm] = cpu_mat(&m->experts[e].up);
            jobs[nm] = (struct cpu_kjob){&mats[nm], xu + (size_t)off[e] * su, su,
                                         cnt[e],    u + (size_t)off[e] * FE,  FE};
            nm++;
        }
        c->kjob_on = cpu_moe_numa_jobs(c, on, cnt, NE, 2);
        cpu_kjobs_run(c, jobs, nm);
        cpu_swiglu(c, g, u, g, served, FE);
        /* down of every picked expert in one dispatch */
        cpu_quantize(c, wd0.type, g, served, FE, xg, sd);
        nm = 0;
        for (int e = 0; e < NE; e++) {
            if (!cnt[e])
                continue;
            mats[nm] = cpu_mat(&m->experts[e].down);
            jobs[nm] = (struct cpu_kjob){&mats[nm], xg + (size_t)off[e] * sd, sd,
                                         cnt[e],    dn + (size_t)off[e] * E,  E};
            nm++;
        }
        c->kjob_on = cpu_moe_numa_jobs(c, on, cnt, NE, 1);
        cpu_kjobs_run(c, jobs, nm);
    }
    cpu_moe_sum(c, m, row_of, served);
}

/* Weighted sum per token in slot order (independent of batch grouping and
 * of which group computed a row): out[t] (+)= sum_j sel_w[t, j] * down row
 * row_of[t * k + j] of the scratch; rows < 0 add nothing. */
void cpu_moe_sum(struct cpu_ctx *c, const struct backend_moe *m, const int *row_of, int served) {
    const int K = m->k;
    const int64_t E = m->n_embd;
    const float *sel_w = cpu_t(m->sel_w)->data;
    float *out = cpu_t(m->out)->data;
    const float *dn = c->moe_dn.p;
    for (int t = 0; t < m->n_tok; t++) {
        float *o = out + (size_t)t * E;
        if (!m->accumulate)
            for (int64_t i = 0; i < E; i++)
                o[i] = 0.0f;
        for (int j = 0; j < K && served > 0; j++) {
            const int r = row_of[t * K + j];
            if (r < 0)
                continue;
            const float w = sel_w[t * K + j];
            const float *d = dn + (size_t)r * E;
            for (int64_t i = 0; i < E; i++)
                o[i] += w * d[i];
        }
    }
}
