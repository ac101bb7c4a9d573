/* engine/cpu/cpu-moe-numa.c: the division of a MoE call's experts between the
 * pool's two groups (cpu-moe-numa.h), and the backend's figures of it. */
#include "engine/cpu/cpu-moe-numa.h"

#include <stdio.h>
#include <string.h>

#include "engine/cpu/cpu-impl.h"
#include "engine/host/numa-homes.h"
#include "engine/host/pool.h"

static double cost_on(int e, int g, const int *cnt, const int8_t *home, double remote) {
    return home[e] == g ? cnt[e] : remote * cnt[e];
}

double cpu_moe_numa_divide(int n_expert, const int *cnt, const int8_t *home, const int threads[2],
                           double remote_cost, int8_t *group, struct cpu_moe_numa_stats *acc) {
    const double th[2] = {threads[0] > 0 ? threads[0] : 1, threads[1] > 0 ? threads[1] : 1};
    const double r = remote_cost >= 1.0 ? remote_cost : 1.0;
    double load[2] = {0, 0};
    int64_t all = 0;
    for (int e = 0; e < n_expert; e++) {
        if (cnt[e] <= 0)
            continue;
        group[e] = home[e] == 1 ? 1 : 0;
        load[group[e]] += cnt[e];
        all += cnt[e];
    }
    double span = load[0] / th[0] > load[1] / th[1] ? load[0] / th[0] : load[1] / th[1];
    const double home_span = span;
    for (int moves = 0; moves < n_expert; moves++) {
        const int h = load[0] / th[0] >= load[1] / th[1] ? 0 : 1, l = 1 - h;
        int best = -1;
        double best_span = span;
        for (int e = 0; e < n_expert; e++) {
            if (cnt[e] <= 0 || group[e] != h)
                continue;
            const double nh = (load[h] - cost_on(e, h, cnt, home, r)) / th[h];
            const double nl = (load[l] + cost_on(e, l, cnt, home, r)) / th[l];
            const double s = nh > nl ? nh : nl;
            if (s < best_span - 1e-9) { /* strictly lower: ends; ties keep the lower id */
                best_span = s;
                best = e;
            }
        }
        if (best < 0)
            break;
        load[h] -= cost_on(best, h, cnt, home, r);
        load[l] += cost_on(best, l, cnt, home, r);
        group[best] = (int8_t)l;
        span = best_span;
    }
    if (acc) {
        acc->calls++;
        for (int e = 0; e < n_expert; e++) {
            if (cnt[e] <= 0)
                continue;
            acc->picks[group[e]] += (uint64_t)cnt[e];
            acc->experts[group[e]]++;
            acc->moved += group[e] != home[e];
        }
        acc->span += span;
        acc->home_span += home_span;
        acc->ideal += (double)all / (th[0] + th[1]);
    }
    return span;
}

const int8_t *cpu_moe_numa_plan(struct cpu_ctx *c, const struct backend_moe *m, const int *cnt) {
    if (!c->pool || pool_n_groups(c->pool) != 2)
        return NULL;
    const int NE = m->n_expert;
    const size_t need = (size_t)NE * (sizeof(const void *) + sizeof(int) + 4);
    if (cpu_buf_reserve(c, &c->moe_numa, need) < 0)
        return NULL; /* the pool's row cut then: same results */
    const void **addr = c->moe_numa.p;
    int *reg = (int *)(addr + NE);
    int8_t *home = (int8_t *)(reg + NE), *group = home + NE;
    int threads[2] = {0, 0};
    for (int w = 0; w < pool_n_threads(c->pool); w++)
        threads[pool_group_of(c->pool, w)]++;
    int n = 0;
    for (int e = 0; e < NE; e++)
        if (cnt[e] > 0)
            addr[n++] = cpu_mat(&m->experts[e].gate).data;
    host_numa_homes_lookup(addr, n, reg);
    for (int e = 0, i = 0; e < NE; e++) {
        group[e] = 0;
        if (cnt[e] > 0) {
            const int g = reg[i++];
            home[e] = (int8_t)(g >= 0 ? g : host_numa_home_rule(e, threads));
        }
    }
    cpu_moe_numa_divide(NE, cnt, home, threads, CPU_MOE_REMOTE_COST, group, &c->moe_numa_st);
    return group;
}

const int8_t *cpu_moe_numa_jobs(struct cpu_ctx *c, const int8_t *on, const int *cnt, int n_expert,
                                int per_expert) {
    if (!on)
        return NULL;
    /* after the homes and groups of cpu_moe_numa_plan: 2 n_expert bytes */
    int8_t *jobs = (int8_t *)on + n_expert;
    int n = 0;
    for (int e = 0; e < n_expert; e++)
        for (int k = 0; k < per_expert && cnt[e] > 0; k++)
            jobs[n++] = (int8_t)(1 + on[e]);
    return jobs;
}

int backend_cpu_moe_numa_stats(const struct backend *be, struct cpu_moe_numa_stats *out) {
    memset(out, 0, sizeof *out);
    if (!be || !be->ops || !be->ops->name || strcmp(be->ops->name, "cpu") != 0)
        return -1;
    *out = ((const struct cpu_ctx *)be->ctx)->moe_numa_st;
    return 0;
}

void cpu_moe_numa_line(const struct cpu_moe_numa_stats *st, char *buf, size_t cap) {
    const uint64_t p = st->picks[0] + st->picks[1], e = st->experts[0] + st->experts[1];
    snprintf(buf, cap,
             "MoE division: %llu calls; picks %llu / %llu (%.1f%% group 1); experts %llu / %llu, "
             "%llu away from home (%.1f%%); span %.3f x ideal (all at home: %.3f)",
             (unsigned long long)st->calls, (unsigned long long)st->picks[0],
             (unsigned long long)st->picks[1], p ? 100.0 * (double)st->picks[1] / (double)p : 0.0,
             (unsigned long long)st->experts[0], (unsigned long long)st->experts[1],
             (unsigned long long)st->moved, e ? 100.0 * (double)st->moved / (double)e : 0.0,
             st->ideal > 0 ? st->span / st->ideal : 0.0,
             st->ideal > 0 ? st->home_span / st->ideal : 0.0);
}
