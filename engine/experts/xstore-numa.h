/* engine/experts/xstore-numa.h: the expert store's RAM tier laid out per node
 * under --numa split (issue 16): each expert's slot on the node that
 * computes it.
 *
 *   // xstore_init, once the slots are mapped (xstore_params.pool given):
 *   struct xs_numa *n;
 *   xs_numa_init(mem, n_slots, slot_bytes, pool, ops, &n, &err);   // n NULL: no split
 *   int r = xs_numa_region_of_expert(n, e);     // the region a slot of e comes from
 *   int k = xs_numa_free_index(n, free_list, n_free, r);
 *   xs_numa_free(n);                            // before the slots are unmapped
 *
 * Layout: on a pool with two groups the slots are cut into two regions,
 * slots [0, first[1]) group 0's and [first[1], n_slots) group 1's, sized in
 * proportion to the groups' threads (as the experts are homed:
 * host_numa_home_rule, so each region holds its share of every layer).
 * Each region is asked of the kernel for its node (mbind MPOL_PREFERRED on
 * the node the group's thread runs on, from getcpu; a container's EPERM
 * leaves first touch alone) and then first-touched, a page at a time, by
 * that group's own threads, so its pages sit on that node whichever thread
 * reads into them later. The regions are registered in
 * engine/host/numa-homes.h, so the CPU backend's MoE division computes an
 * expert on the group whose region holds its slot (cpu-moe-numa.h).
 *
 * Replacement (xstore.c take_slot): expert e takes a free slot of its home
 * region, else the victim of that region (the store's floor + LRU rule
 * restricted to it), and only when every slot there is held one of the
 * other region (its bytes then sit on the other node, which then computes
 * it: the registry says so).
 *
 * Without groups (n_groups 0, or no pool) xs_numa_init returns NULL and
 * every function here answers as for one region: the store is unchanged.
 *
 * Threading: xs_numa_init dispatches on the pool (the loading thread, the
 * pool's one dispatcher); the rest are pure reads, the forward thread. */
#ifndef STRATA_XSTORE_NUMA_H
#define STRATA_XSTORE_NUMA_H

#include <stdint.h>

#include "engine/core/error.h"

struct pool;
struct host_numa_ops;
struct xs_numa;

/* What the layout did, for tests and the start-up log. */
struct xs_numa_info {
    int n_regions;         /* 0: one region (no split); 2 */
    int slots[2];          /* per region */
    int node[2];           /* kernel node the region was asked for (getcpu), -1 unknown */
    const char *placement; /* static: "mbind + first touch", "first touch (mbind refused)",
                              "none" */
    uint64_t touched_bytes;
};

/* *out = the layout, or NULL when the pool has no groups (or there are
 * fewer than 2 slots): nothing to lay out. ops NULL: the real mbind. 0, or
 * -1 with err (out of memory, the registry refused a range). */
int xs_numa_init(uint8_t *mem, int n_slots, uint64_t slot_bytes, struct pool *pool,
                 const struct host_numa_ops *ops, struct xs_numa **out, struct strata_error *err);
void xs_numa_free(struct xs_numa *n); /* unregisters the regions; NULL is a no-op */
/* Region of slot i; -1 without a layout. */
int xs_numa_region_of_slot(const struct xs_numa *n, int slot);
/* Home region of expert e (host_numa_home_rule over the groups' threads); -1 without. */
int xs_numa_region_of_expert(const struct xs_numa *n, int e);
/* Index into free_list[0, n_free) of a slot of region r (the most recently
 * freed one), or -1; r < 0 or no layout: the top (n_free - 1), -1 if empty. */
int xs_numa_free_index(const struct xs_numa *n, const int32_t *free_list, int n_free, int r);
/* Fills out (zeros and "none" for NULL). */
void xs_numa_info(const struct xs_numa *n, struct xs_numa_info *out);

struct xstore;
/* The store's layout (NULL: one region); defined in xstore.c. */
const struct xs_numa *xstore_numa(const struct xstore *s);

#endif
