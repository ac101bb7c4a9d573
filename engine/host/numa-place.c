/* engine/host/numa-place.c: binding the pool (host_numa_apply) and moving
 * page-cache pages to the node that computes them (numa.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "engine/host/numa.h"
#include "engine/host/pool.h"

/* ---- binding ---- */

struct bind_job {
    const struct host_numa_plan *plan;
    const struct host_numa_ops *ops;
    _Atomic int failed;
    _Atomic int first_errno;
};

static void bind_self(void *ctx, int worker) {
    struct bind_job *j = ctx;
    const int g = host_numa_group_of(j->plan, worker);
    if (j->ops->set_affinity(&j->plan->cpus[g]) != 0) {
        int zero = 0;
        atomic_compare_exchange_strong(&j->first_errno, &zero, errno);
        atomic_fetch_add(&j->failed, 1);
    }
}

int host_numa_apply(const struct host_numa_plan *plan, struct pool *pool,
                    const struct host_numa_ops *ops, struct strata_error *err) {
    if (!ops)
        ops = host_numa_ops_real();
    if (!plan->n_groups)
        return 0;
    const int n = pool ? pool_n_threads(pool) : 1;
    int *group_of = NULL;
    if (plan->n_groups == 2 && pool) {
        if (!(group_of = malloc((size_t)n * sizeof *group_of)))
            return strata_error_set(err, STRATA_E_NOMEM, "numa: out of memory");
        for (int w = 0; w < n; w++)
            group_of[w] = host_numa_group_of(plan, w);
    }
    if (!plan->logical) {
        /* each thread sets its own mask (a worker's tid is its own business) */
        struct bind_job j = {.plan = plan, .ops = ops};
        if (pool)
            pool_run_each(pool, bind_self, &j, n);
        else
            bind_self(&j, 0);
        if (atomic_load(&j.failed)) {
            /* refused for some: give every thread the process's whole set back */
            struct host_numa_plan back = *plan;
            const struct host_numa_topo *t = host_numa_topo();
            if (t) {
                back.cpus[0] = back.cpus[1] = t->allowed;
                struct bind_job u = {.plan = &back, .ops = ops};
                if (pool)
                    pool_run_each(pool, bind_self, &u, n);
                else
                    bind_self(&u, 0);
            }
            free(group_of);
            return strata_error_set(err, STRATA_E_UNSUPPORTED,
                                    "numa: sched_setaffinity refused for %d of %d threads (%s): "
                                    "running unbound",
                                    atomic_load(&j.failed), n,
                                    strerror(atomic_load(&j.first_errno)));
        }
    }
    if (group_of) {
        int rc = pool_set_groups(pool, 2, group_of);
        free(group_of);
        if (rc)
            return strata_error_set(err, rc, "numa: the pool refused two groups of %d threads", n);
    }
    return 0;
}

int host_numa_prefer(const struct host_numa_ops *ops, void *addr, size_t len, int os_node) {
    if (!ops)
        ops = host_numa_ops_real();
    return ops->mbind_preferred(addr, len, os_node) == 0 ? 0 : 1;
}

/* ---- page placement ---- */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Spans a group's threads read in (fault into the page cache from their node). */
struct read_job {
    const struct host_numa_span *spans;
    const int *todo; /* (n_todo) span indexes */
    int n_todo;
    struct pool *pool;
    _Atomic int next[2]; /* per group cursor over todo */
    long page;
    int n_g; /* the plan's groups: 1 puts every span in group 0 */
};

static int span_group(const struct host_numa_span *s, int n_g) {
    return n_g == 2 && s->group == 1 ? 1 : 0;
}

/* Reads one span through the mapping: a page-cache miss allocates the page
 * on the reading thread's node (first touch), which is the point. */
static void read_span(const struct host_numa_span *s, long page) {
    uintptr_t a = (uintptr_t)s->addr & ~(uintptr_t)(page - 1), b = (uintptr_t)s->addr + s->len;
#ifdef MADV_POPULATE_READ
    if (madvise((void *)a, b - a, MADV_POPULATE_READ) == 0)
        return;
#endif
    uint8_t acc = 0;
    for (uintptr_t p = a; p < b; p += (uintptr_t)page)
        acc ^= *(const volatile uint8_t *)(p < (uintptr_t)s->addr ? (uintptr_t)s->addr : p);
    __asm__ volatile("" : : "r"(acc));
}

static void read_side(void *ctx, int worker) {
    struct read_job *j = ctx;
    const int g = j->pool ? pool_group_of(j->pool, worker) : 0;
    for (;;) {
        int k = atomic_fetch_add(&j->next[g], 1);
        /* the k-th todo entry of group g */
        int seen = 0, idx = -1;
        for (int i = 0; i < j->n_todo; i++)
            if (span_group(&j->spans[j->todo[i]], j->n_g) == g && seen++ == k) {
                idx = j->todo[i];
                break;
            }
        if (idx < 0)
            return;
        read_span(&j->spans[idx], j->page);
    }
}

/* 64 sampled pages a span: 1 GB spans then cost ~0.1 ms of move_pages. */
#define PLACE_SAMPLES 64

/* Share of the group's spans on its node, and whether span i is resident
 * at all (any sampled page). */
static int group_share(const struct host_numa_ops *ops, const struct host_numa_span *sp, int n,
                       int n_g, int g, int node, bool *resident, double *share, const char **source,
                       struct strata_error *err) {
    uint64_t on = 0, all = 0;
    for (int i = 0; i < n; i++) {
        if (span_group(&sp[i], n_g) != g)
            continue;
        struct host_numa_share s;
        if (host_numa_sample(ops, sp[i].addr, sp[i].len, PLACE_SAMPLES, &s, err) < 0)
            return -1;
        if (resident)
            resident[i] = s.resident > 0;
        if (node >= 0 && node < HOST_NUMA_MAX_NODES)
            on += s.on_node[node];
        all += s.resident;
        if (strcmp(s.source, "none"))
            *source = s.source;
    }
    *share = all ? (double)on / (double)all : 0;
    return 0;
}

int host_numa_place_file_pages(const struct host_numa_plan *plan, struct pool *pool,
                               const struct host_numa_ops *ops, int fd,
                               const struct host_numa_span *spans, int n_spans, bool force,
                               struct host_numa_placement *out, struct strata_error *err) {
    if (!ops)
        ops = host_numa_ops_real();
    memset(out, 0, sizeof *out);
    out->source = "none";
    const double t0 = now_ms();
    const long page = sysconf(_SC_PAGESIZE);
    if (!plan->n_groups || n_spans <= 0 || page <= 0)
        return 0;
    bool *resident = calloc((size_t)n_spans, sizeof *resident);
    int *todo = malloc((size_t)n_spans * sizeof *todo);
    int rc = 0;
    if (!resident || !todo) {
        rc = strata_error_set(err, STRATA_E_NOMEM, "numa: out of memory for %d spans", n_spans);
        goto done;
    }
    const int n_g = plan->n_groups == 2 ? 2 : 1;
    bool move[2] = {false, false};
    for (int g = 0; g < n_g; g++) {
        if (group_share(ops, spans, n_spans, n_g, g, plan->node[g], resident, &out->share_before[g],
                        &out->source, err) < 0) {
            rc = -1;
            goto done;
        }
        move[g] = force || out->share_before[g] < HOST_NUMA_HOME_SHARE;
    }
    /* spans not cached at all are read by their group (first touch); cached
     * spans of a group under the share are dropped and read again */
    int n_todo = 0;
    for (int i = 0; i < n_spans; i++) {
        const int g = span_group(&spans[i], n_g);
        if (!resident[i]) {
            out->bytes_filled += spans[i].len;
            todo[n_todo++] = i;
        } else if (move[g]) {
            uintptr_t a = (uintptr_t)spans[i].addr & ~(uintptr_t)(page - 1);
            /* unmap our view first: fadvise cannot drop a page a process maps */
            (void)madvise((void *)a, (uintptr_t)spans[i].addr + spans[i].len - a, MADV_DONTNEED);
            (void)posix_fadvise(fd, (off_t)spans[i].file_off, (off_t)spans[i].len,
                                POSIX_FADV_DONTNEED);
            out->bytes_moved += spans[i].len;
            todo[n_todo++] = i;
        }
    }
    if (n_todo) {
        struct read_job j = {
            .spans = spans, .todo = todo, .n_todo = n_todo, .pool = pool, .page = page, .n_g = n_g};
        if (pool && (n_g == 1 || pool_n_groups(pool) == 2))
            pool_run_each(pool, read_side, &j, pool_n_threads(pool));
        else /* no pool, or its groups were refused: the caller reads all */
            for (int i = 0; i < n_todo; i++)
                read_span(&spans[todo[i]], page);
    }
    for (int g = 0; g < n_g; g++) {
        if (!n_todo) { /* nothing read again: the sample stands (a second start costs one pass) */
            out->share_after[g] = out->share_before[g];
            continue;
        }
        if (group_share(ops, spans, n_spans, n_g, g, plan->node[g], NULL, &out->share_after[g],
                        &out->source, err) < 0) {
            rc = -1;
            goto done;
        }
    }
done:
    out->ms = now_ms() - t0;
    free(todo);
    free(resident);
    return rc;
}
