/* engine/cpu/cpu-moe-late.c: the routed experts' FFN when some experts'
 * weights are still arriving (backend_moe.late: the expert store's reads in
 * flight, engine/experts/xstore.h "Overlap"): the experts already in memory
 * are computed first, while the reads run; then backend_moe.wait returns
 * (the reads are done) and the late experts are computed; then each token's
 * weighted sum in slot order, as cpu_moe_run does. Each expert's rows are
 * computed alone and the sum's order does not change, so the result is the
 * bits cpu_moe_run gives with every expert in memory.
 *
 * Rows are grouped by expert as in cpu_moe_run, the early experts' rows
 * first ([0, n_early)), the late ones after ([n_early, served)), so each
 * phase runs over one contiguous range: one gate+up dispatch, one swiglu,
 * one down dispatch a phase. A phase quantizes only its own rows' inputs:
 * the down inputs of the first phase overwrite the staging rows the first
 * phase's gate read, never the second's. */
#include "engine/cpu/cpu-impl.h"

#include <string.h>

static bool named(const struct backend_expert *e) {
    return e->gate.w || e->gate.host.data;
}

/* dst row row_of[i] = x row i / K in wtype's activation format, for the picks
 * whose rows lie in [r0, r1). */
static void gather_rows(struct cpu_ctx *c, const struct backend_moe *m, enum quant_type wtype,
                        size_t stride, const int *row_of, int r0, int r1, uint8_t *dst) {
    uint8_t *stage = c->moe_stage.p;
    cpu_quantize(c, wtype, cpu_t(m->x)->data, m->n_tok, m->n_embd, stage, stride);
    for (int i = 0; i < m->n_tok * m->k; i++)
        if (row_of[i] >= r0 && row_of[i] < r1)
            memcpy(dst + (size_t)row_of[i] * stride, stage + (size_t)(i / m->k) * stride, stride);
}

/* gate, up, swiglu, down of the experts e with cnt[e] and (late[e] != 0) ==
 * late_phase: rows [r0, r1). */
/* The kjob_on of a phase's dispatch (cpu_moe_numa_jobs for the experts of
 * that phase only: their jobs, per_expert each, in expert order), or NULL
 * off --numa split. */
static const int8_t *phase_jobs(const int8_t *on, const struct backend_moe *m, const int *cnt,
                                bool late_phase, int per_expert) {
    if (!on)
        return NULL;
    int8_t *jobs = (int8_t *)on + m->n_expert; /* cpu_moe_numa_jobs' bytes */
    int n = 0;
    for (int e = 0; e < m->n_expert; e++)
        if (cnt[e] && (m->late[e] != 0) == late_phase)
            for (int k = 0; k < per_expert; k++)
                jobs[n++] = (int8_t)(1 + on[e]);
    return jobs;
}

static void run_phase(struct cpu_ctx *c, const struct backend_moe *m, const int *cnt,
                      const int *off, const int *row_of, const int8_t *on, bool late_phase, int r0,
                      int r1) {
    const int NE = m->n_expert;
    const int64_t E = m->n_embd, FE = m->n_ff;
    if (r1 <= r0)
        return;
    const struct backend_expert *first = NULL;
    for (int e = 0; e < NE && !first; e++)
        if (cnt[e])
            first = &m->experts[e];
    const struct kern_mat wg0 = cpu_mat(&first->gate), wu0 = cpu_mat(&first->up);
    const struct kern_mat wd0 = cpu_mat(&first->down);
    const size_t sg = kernels_act_row_size(wg0.type, wg0.n_cols);
    const size_t su = kernels_act_row_size(wu0.type, wu0.n_cols);
    const size_t sd = kernels_act_row_size(wd0.type, wd0.n_cols);
    uint8_t *xg = c->moe_xq[0].p, *xu = xg;
    float *g = c->moe_g.p, *u = c->moe_u.p, *dn = c->moe_dn.p;
    gather_rows(c, m, wg0.type, sg, row_of, r0, r1, xg);
    if (kernels_act_type(wu0.type) != kernels_act_type(wg0.type)) {
        xu = c->moe_xq[1].p;
        gather_rows(c, m, wu0.type, su, row_of, r0, r1, xu);
    }
    struct kern_mat *mats = c->moe_jobs.p;
    struct cpu_kjob *jobs = (struct cpu_kjob *)(mats + 2 * (size_t)NE);
    int nm = 0;
    for (int e = 0; e < NE; e++) {
        if (!cnt[e] || (m->late[e] != 0) != late_phase)
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
    c->kjob_on = phase_jobs(on, m, cnt, late_phase, 2);
    cpu_kjobs_run(c, jobs, nm);
    float *gr = g + (size_t)r0 * FE;
    cpu_swiglu(c, gr, u + (size_t)r0 * FE, gr, r1 - r0, FE);
    /* the down inputs of rows [r0, r1) at their own offsets: no row of a
     * later phase is overwritten (its gate inputs are gathered after this) */
    cpu_quantize(c, wd0.type, gr, r1 - r0, FE, xg + (size_t)r0 * sd, sd);
    nm = 0;
    for (int e = 0; e < NE; e++) {
        if (!cnt[e] || (m->late[e] != 0) != late_phase)
            continue;
        mats[nm] = cpu_mat(&m->experts[e].down);
        jobs[nm] = (struct cpu_kjob){&mats[nm], xg + (size_t)off[e] * sd, sd,
                                     cnt[e],    dn + (size_t)off[e] * E,  E};
        nm++;
    }
    c->kjob_on = phase_jobs(on, m, cnt, late_phase, 1);
    cpu_kjobs_run(c, jobs, nm);
}

void cpu_moe_run_late(struct cpu_ctx *c, const struct backend_moe *m) {
    const int NE = m->n_expert, K = m->k, n = m->n_tok;
    const int32_t *sel = cpu_t(m->sel)->data;
    int *cnt = c->moe_idx.p, *off = cnt + NE, *fill = off + NE, *row_of = fill + NE;
    memset(cnt, 0, (size_t)NE * sizeof *cnt);
    for (int i = 0; i < n * K; i++)
        if (named(&m->experts[sel[i]]))
            cnt[sel[i]]++;
    int o = 0, n_early = 0;
    for (int pass = 0; pass < 2; pass++) { /* the early experts' rows first */
        for (int e = 0; e < NE; e++) {
            if ((m->late[e] != 0) != (pass == 1))
                continue;
            off[e] = o;
            fill[e] = 0;
            o += cnt[e];
        }
        if (pass == 0)
            n_early = o;
    }
    int served = 0;
    for (int i = 0; i < n * K; i++) {
        const int e = sel[i];
        row_of[i] = named(&m->experts[e]) ? off[e] + fill[e]++ : -1;
        served += row_of[i] >= 0;
    }
    if (c->moe_xq[0].p && c->moe_dn.p) { /* the record reserved the scratch */
        /* split: each expert's jobs whole to one group, the division made
         * once over both phases' picks (cpu-moe-numa.h) */
        const int8_t *on = served > 0 ? cpu_moe_numa_plan(c, m, cnt) : NULL;
        run_phase(c, m, cnt, off, row_of, on, false, 0, n_early);
        const bool ok = !m->wait || m->wait(m->wait_arg) == 0;
        if (ok) {
            run_phase(c, m, cnt, off, row_of, on, true, n_early, served);
        } else { /* the reads failed: the late experts' rows are left out (the step fails) */
            for (int i = 0; i < n * K; i++)
                row_of[i] = row_of[i] >= n_early ? -1 : row_of[i];
        }
    }
    cpu_moe_sum(c, m, row_of, served);
}
