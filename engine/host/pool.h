/* engine/host/pool.h: persistent worker pool (DESIGN.md "Persistent pool").
 *
 *   struct pool_params pp = pool_params_default();
 *   pp.n_threads = 2;                       // workers + the calling thread
 *   struct pool *p = pool_init(&pp, &err);
 *   struct pool_task t = {.fn = rows_fn, .ctx = &job, .n_rows = 4096};
 *   pool_run(p, &t, 1);                     // caller participates; returns when all rows ran
 *   pool_free(p);
 *
 * Threads are spawned once in pool_init. A dispatch publishes one job
 * descriptor and bumps a per-worker ticket for each invited worker (a worker
 * learns it is invited from its own ticket only); workers spin a bounded
 * budget (params.spin, STRATA_POOL_SPIN via config, default 4000) then park,
 * and a parked flag lets the caller skip the wake syscall. The rows of a
 * job's tasks are cut into one slab of equal rows per participant, and each
 * slab into chunks that halve down to 1/16 of the slab (floor `min_grain`,
 * default 32 rows; at most a task's max_grain): a participant streams its
 * own slab in a few long calls and, once done, takes the others' unclaimed
 * chunks, which by then are short; a job with fewer floor-sized pieces than
 * threads invites only that many workers. Several tasks (e.g. Q, K and V, or gate and up) share one
 * dispatch. A worker claims its ticket before running; once every row is handed out the caller
 * revokes tickets nobody claimed yet, so a descheduled worker never delays a row job (pool_run_each
 * jobs always wait for every participant).
 *
 * Threading: one dispatching thread at a time per pool (the scheduler thread
 * owns it); fn runs concurrently on disjoint row ranges.
 */
#ifndef STRATA_POOL_H
#define STRATA_POOL_H

#include <stdint.h>

#include "engine/core/error.h"

struct pool_params {
    int n_threads; /* total threads including the caller, >= 1 */
    int spin;      /* spin iterations before parking (default 4000) */
    int min_grain; /* default floor of rows per grain (default 32) */
};
struct pool_params pool_params_default(void);

/* fn computes rows [r0, r1); worker is 0 for the caller, 1..n_threads-1 otherwise. */
typedef void (*pool_rows_fn)(void *ctx, int64_t r0, int64_t r1, int worker);

struct pool_task {
    pool_rows_fn fn;
    void *ctx; /* borrowed for the duration of pool_run */
    int64_t n_rows;
    int64_t min_grain; /* 0 = pool default */
    int64_t max_grain; /* 0 = none; else most rows per chunk (wins over min_grain);
                          backend-cpu caps decode matmul chunks at 4 MiB of weights */
    /* NUMA split (optional): n_groups = 2 and group_bounds = {0, b, n_rows}
     * (borrowed, ascending) give rows [bounds[g], bounds[g+1]) only to the
     * participants of group g (pool_set_groups: the threads on the node
     * holding those weight pages). A task without bounds on a grouped pool
     * is cut at pool_group_bound. Ignored on a pool without groups. */
    int n_groups;
    const int64_t *group_bounds;
};

struct pool;
struct pool *pool_init(const struct pool_params *params,
                       struct strata_error *err); /* owned: pool_free */
void pool_free(struct pool *p);
/* Runs every task's rows to completion; returns 0, or STRATA_E_INVALID for
 * a malformed task (NULL fn, negative n_rows), in which case nothing ran. */
int pool_run(struct pool *p, const struct pool_task *tasks, int n_tasks);

/* fn(ctx, worker) runs exactly once on each of n participants: the caller
 * (worker 0) and workers 1..n-1; n is clamped to [1, pool_n_threads]. For
 * per-thread set-up and for tests of the dispatch protocol ("limited" jobs
 * that invite fewer workers than exist). */
typedef void (*pool_each_fn)(void *ctx, int worker);
void pool_run_each(struct pool *p, pool_each_fn fn, void *ctx, int n);

/* Two row groups (NUMA split): group_of[w] (0 or 1, borrowed, copied) for
 * every participant w of pool_n_threads (0 = the caller); n_groups 0 or 1
 * turns grouping off. Row jobs then hand group g's rows only to group g's
 * participants (each row still computed exactly once, by the same kernel
 * call shape: results do not change). A job with fewer pieces than threads
 * is not grouped (it reads too little to matter). Call between dispatches,
 * from the dispatching thread. 0, or STRATA_E_INVALID (a group without a
 * participant, a value not 0/1). */
int pool_set_groups(struct pool *p, int n_groups, const int *group_of);
int pool_n_groups(const struct pool *p);
int pool_group_of(const struct pool *p, int worker);
/* Where a task of n_rows (min_grain as in pool_task, 0 = the pool's) is cut
 * between the groups when it names no bounds: n_rows times group 0's share
 * of the threads, down to the grain; n_rows without groups. The weight
 * arena's first touch cuts each matrix at the same row. */
int64_t pool_group_bound(const struct pool *p, int64_t n_rows, int64_t min_grain);

/* Workers currently parked (sleeping in the kernel); for tests and /status. */
int pool_n_parked(const struct pool *p);
int pool_n_threads(const struct pool *p);
uint64_t pool_dispatch_count(const struct pool *p); /* for /status */

#endif
