/* engine/host/numa-homes.h: which pool group's node holds a range of memory
 * that was placed for one group (issue 16: under --numa split each node's
 * threads compute the experts whose bytes sit on their node).
 *
 *   host_numa_homes_add(region, len, 1, &err);  // the expert store's node-1 slots
 *   int g = host_numa_home_of(ptr);              // 1 inside it; -1: never registered
 *   host_numa_homes_remove(region);              // before the region is unmapped
 *
 * Registered global (STYLE.md 6): one table for the process, written by
 * whoever lays out memory for a group (the expert store's per-node slot
 * regions, xstore-numa.c) and read by the CPU backend's MoE division
 * (cpu-moe-numa.c) on the forward thread. A mutex guards it; a lookup of a
 * step's experts takes it once (host_numa_homes_lookup). A stale entry can
 * only misdirect which group computes an expert, never change a result.
 * Memory not registered (the weight arena, whose first touch follows a rule
 * the division knows, cpu-moe-numa.h) answers -1.
 *
 * Threading: any thread. The table is freed by host_numa_homes_remove of its
 * last entry (so a process that removes what it adds ends with nothing). */
#ifndef STRATA_HOST_NUMA_HOMES_H
#define STRATA_HOST_NUMA_HOMES_H

#include <stddef.h>

#include "engine/core/error.h"

/* [addr, addr + len) is group's (0 or 1); ranges must not overlap one
 * already registered. 0, or STRATA_E_INVALID (bad group, empty or
 * overlapping range) / STRATA_E_NOMEM with err. */
int host_numa_homes_add(const void *addr, size_t len, int group, struct strata_error *err);
/* Forgets the range starting at addr (no-op when none does). */
void host_numa_homes_remove(const void *addr);
/* Forgets every range starting in [lo, lo + len) (a mapping being unmapped). */
void host_numa_homes_remove_within(const void *lo, size_t len);
/* The group of the range holding addr, or -1. */
int host_numa_home_of(const void *addr);
/* groups[i] = host_numa_home_of(addrs[i]) for n addresses under one lock. */
void host_numa_homes_lookup(const void *const *addrs, int n, int *groups);
/* Ranges registered now (tests). */
int host_numa_homes_count(void);

/* The home group of expert e of a MoE layer where nothing registered says
 * otherwise (the weight arena's first touch, cpu-weights.c; file pages,
 * model-numa.c; the MoE division, cpu-moe-numa.c): experts interleaved in
 * proportion to the groups' threads (threads[g] of group g; 1 + 1 threads:
 * even experts group 0, odd group 1; 2 + 1: 0 0 1 0 0 1 ...). Pure. */
int host_numa_home_rule(int e, const int threads[2]);

#endif
