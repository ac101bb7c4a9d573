/* engine/cpu/cpu-moe-numa.h: routed experts divided whole between the two
 * nodes of --numa split (issue 16), each node's threads computing their own.
 *
 *   // the CPU backend does this in every MoE call on a pool with two groups:
 *   int8_t group[NE];
 *   cpu_moe_numa_divide(NE, cnt, home, threads, CPU_MOE_REMOTE_COST, group, &stats);
 *   // expert e's gate, up and down rows all go to group[e]'s threads
 *   struct cpu_moe_numa_stats st;
 *   backend_cpu_moe_numa_stats(be, &st);   // the balance so far
 *
 * An expert's home is the group whose node holds its bytes:
 *  - the weight arena: first touch by the rule host_numa_home_rule (the
 *    copy at load hands each expert's rows, whole, to its home's threads,
 *    cpu-weights.c), so the division knows it without asking the kernel;
 *  - memory registered in engine/host/numa-homes.h (the expert store's
 *    per-node slot regions, xstore-numa.c): that;
 *  - file-mapped experts: the rule too; model_numa_finish moves each
 *    expert's page-cache pages, whole, to its home's node.
 * The division then balances a call's picks (a (token, slot) pair is one
 * pick: an expert picked by 5 tokens of a batch costs 5), not expert counts,
 * so skewed routing that picks only one node's experts still keeps both
 * nodes busy: see cpu_moe_numa_divide for the rule.
 *
 * Results never depend on the division: an expert's rows are computed by
 * the same kernel calls whichever group runs them, into the same rows of
 * the call's scratch, and each token's outputs are summed in pick order
 * afterwards on the forward thread (cpu-moe.c).
 *
 * Threading: the forward thread (the pool's dispatcher); divide is pure. */
#ifndef STRATA_CPU_MOE_NUMA_H
#define STRATA_CPU_MOE_NUMA_H

#include <stddef.h>
#include <stdint.h>

struct backend;

/* A pick computed away from its home node costs this much against one at
 * home: seed 000's 74 vs 42 GB/s for decode workers kept on the weights'
 * node vs unpinned ones (which read about half their rows remotely), so a
 * wholly remote read is at least this much slower; one figure, not measured
 * here (every machine of this project has one node). */
#define CPU_MOE_REMOTE_COST 1.76

/* What the divisions so far did (summed over MoE calls on a grouped pool). */
struct cpu_moe_numa_stats {
    uint64_t calls;      /* MoE calls divided */
    uint64_t picks[2];   /* picks computed per group */
    uint64_t experts[2]; /* experts computed per group */
    uint64_t moved;      /* experts computed away from their home (remote reads) */
    double span;         /* sum over calls of the slower group's cost per thread */
    double ideal;        /* sum of (every pick at home) / (all threads): span's floor */
    double home_span;    /* sum of the slower group's cost with every expert at home (no moves) */
};

/* The division of one call. cnt[e]: picks of expert e (0: not picked);
 * home[e]: its home group. Writes group[e] for every picked expert and
 * returns the slower group's cost per thread (picks, remote ones at
 * remote_cost), adding the call to acc when not NULL.
 *
 * The rule: start with every expert at home; then, while it lowers the
 * slower group's cost per thread, move one expert between the groups: the
 * picked expert of the slower group whose move leaves the lowest such cost
 * (a remote expert costs remote_cost times its picks, so an expert moves
 * only when the other group is idle enough to pay for the remote read, and
 * one moved earlier may come back; ties go to the lower id). Each move
 * lowers the cost, so it ends; at most n_expert moves. Deterministic. */
double cpu_moe_numa_divide(int n_expert, const int *cnt, const int8_t *home, const int threads[2],
                           double remote_cost, int8_t *group, struct cpu_moe_numa_stats *acc);

/* The figures as one line ("MoE division: 40 calls; picks 160 / 160, ...;
 * span 1.05 x ideal"), always NUL-terminated. */
void cpu_moe_numa_line(const struct cpu_moe_numa_stats *st, char *buf, size_t cap);

/* The CPU backend's divisions so far; 0, or -1 when be is not the CPU
 * backend (out zeroed). */
int backend_cpu_moe_numa_stats(const struct backend *be, struct cpu_moe_numa_stats *out);

#endif
