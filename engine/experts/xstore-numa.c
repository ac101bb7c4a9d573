/* engine/experts/xstore-numa.c: the expert store's slots per node under
 * --numa split (xstore-numa.h). */
#include "engine/experts/xstore-numa.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/host/numa-homes.h"
#include "engine/host/numa.h"
#include "engine/host/pool.h"

struct xs_numa {
    int n_slots;
    int first[3]; /* region g: slots [first[g], first[g + 1]) */
    int threads[2];
    uint8_t *mem;
    uint64_t slot_bytes;
    bool registered[2];
    struct xs_numa_info info;
};

struct touch_job {
    struct xs_numa *n;
    struct pool *pool;
    const struct host_numa_ops *ops;
    size_t page;
    _Atomic int refused, asked;
    _Atomic uint64_t touched;
    _Atomic int node[2];
};

/* Participant w of group g writes one byte a page of its share (by rank in
 * the group) of region g; the group's first participant asks for the node
 * first. */
static void touch_region(void *ctx, int worker) {
    struct touch_job *j = ctx;
    struct xs_numa *n = j->n;
    const int g = pool_group_of(j->pool, worker);
    int rank = 0;
    for (int w = 0; w < worker; w++)
        rank += pool_group_of(j->pool, w) == g;
    uint8_t *lo = n->mem + (size_t)n->first[g] * n->slot_bytes;
    const size_t len = (size_t)(n->first[g + 1] - n->first[g]) * n->slot_bytes;
    if (rank == 0) {
        unsigned cpu = 0, node = 0;
        if (getcpu(&cpu, &node) == 0) {
            atomic_store(&j->node[g], (int)node);
            atomic_fetch_add(&j->asked, 1);
            if (host_numa_prefer(j->ops, lo, len, (int)node) != 0)
                atomic_fetch_add(&j->refused, 1);
        }
    }
    /* pages in whole: the region's slot bytes are page multiples (xstore.c) */
    const size_t pages = len / j->page, m = (size_t)n->threads[g];
    const size_t p0 = pages * (size_t)rank / m, p1 = pages * (size_t)(rank + 1) / m;
    for (size_t p = p0; p < p1; p++)
        ((volatile uint8_t *)lo)[p * j->page] = 0;
    atomic_fetch_add(&j->touched, (uint64_t)(p1 - p0) * j->page);
}

int xs_numa_init(uint8_t *mem, int n_slots, uint64_t slot_bytes, struct pool *pool,
                 const struct host_numa_ops *ops, struct xs_numa **out, struct strata_error *err) {
    *out = NULL;
    if (!pool || pool_n_groups(pool) != 2 || n_slots < 2 || !mem)
        return 0;
    struct xs_numa *n = calloc(1, sizeof *n);
    if (!n)
        return strata_error_set(err, STRATA_E_NOMEM, "expert store: out of memory");
    for (int w = 0; w < pool_n_threads(pool); w++)
        n->threads[pool_group_of(pool, w)]++;
    const int T = n->threads[0] + n->threads[1];
    int c = (int)((int64_t)n_slots * n->threads[0] / T);
    c = c < 1 ? 1 : c > n_slots - 1 ? n_slots - 1 : c;
    n->first[0] = 0, n->first[1] = c, n->first[2] = n_slots;
    n->n_slots = n_slots;
    n->mem = mem;
    n->slot_bytes = slot_bytes;
    struct touch_job j = {.n = n, .pool = pool, .ops = ops};
    const long pg = sysconf(_SC_PAGESIZE);
    j.page = pg > 0 ? (size_t)pg : 4096;
    atomic_init(&j.node[0], -1);
    atomic_init(&j.node[1], -1);
    pool_run_each(pool, touch_region, &j, pool_n_threads(pool));
    for (int g = 0; g < 2; g++) {
        const size_t len = (size_t)(n->first[g + 1] - n->first[g]) * slot_bytes;
        if (host_numa_homes_add(mem + (size_t)n->first[g] * slot_bytes, len, g, err) < 0) {
            xs_numa_free(n);
            return -1;
        }
        n->registered[g] = true;
        n->info.slots[g] = n->first[g + 1] - n->first[g];
        n->info.node[g] = atomic_load(&j.node[g]);
    }
    n->info.n_regions = 2;
    n->info.touched_bytes = atomic_load(&j.touched);
    n->info.placement = atomic_load(&j.asked) == 0 ? "first touch (node unknown)"
                        : atomic_load(&j.refused)  ? "first touch (mbind refused)"
                                                   : "mbind + first touch";
    *out = n;
    return 0;
}

void xs_numa_free(struct xs_numa *n) {
    if (!n)
        return;
    for (int g = 0; g < 2; g++)
        if (n->registered[g])
            host_numa_homes_remove(n->mem + (size_t)n->first[g] * n->slot_bytes);
    free(n);
}

int xs_numa_region_of_slot(const struct xs_numa *n, int slot) {
    if (!n || slot < 0 || slot >= n->n_slots)
        return -1;
    return slot >= n->first[1];
}

int xs_numa_region_of_expert(const struct xs_numa *n, int e) {
    return n ? host_numa_home_rule(e, n->threads) : -1;
}

int xs_numa_free_index(const struct xs_numa *n, const int32_t *free_list, int n_free, int r) {
    if (!n || r < 0)
        return n_free > 0 ? n_free - 1 : -1;
    for (int k = n_free - 1; k >= 0; k--)
        if (xs_numa_region_of_slot(n, free_list[k]) == r)
            return k;
    return -1;
}

void xs_numa_info(const struct xs_numa *n, struct xs_numa_info *out) {
    memset(out, 0, sizeof *out);
    out->node[0] = out->node[1] = -1;
    out->placement = "none";
    if (n)
        *out = n->info;
}
