/* engine/host/pool.c: persistent worker pool with per-worker tickets (see pool.h).
 *
 * Protocol (DESIGN.md "Persistent pool"; the seed 000 pool's history explains
 * why each piece is there):
 *   1. The caller (one dispatching thread) writes the job descriptor, resets
 *      the row cursor and sets `remaining` to the number of invited workers.
 *   2. For each invited worker w it bumps slot[w].ticket (seq_cst) and, only if
 *      slot[w].parked is set, issues a futex wake. A worker never reads the
 *      descriptor unless its own ticket moved, so an uninvited worker can
 *      neither run a job twice nor be woken by a limited job.
 *   3. The caller participates as worker 0, then waits until `remaining`
 *      is 0 (bounded spin, then futex wait with a `caller_waiting` flag so
 *      the last worker only makes the wake syscall when somebody sleeps).
 *      A worker runs its ticket only after claiming it (CAS on slot.claim);
 *      once a row job's cursor is exhausted the caller revokes every ticket
 *      not yet claimed with the same CAS, so a descheduled worker costs
 *      nothing (with 2 threads on a loaded 2-core box an empty dispatch
 *      waited 0.3-0.5 ms for the worker's time slice before this).
 *   4. The descriptor is rewritten only after `remaining` hit 0, so no ticket
 *      holder ever reads a half-written descriptor.
 * Lost wake-ups are excluded Dekker-style: the sleeper stores its flag then
 * re-reads the word it sleeps on, the waker stores the word then reads the
 * flag, all seq_cst, so at least one side sees the other; the futex itself
 * re-checks the word value in the kernel.
 */
#include "engine/host/pool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define POOL_CPU_RELAX() _mm_pause()
#else
#define POOL_CPU_RELAX() ((void)0)
#endif

/* 128 bytes: a cache line plus its adjacent-line prefetch pair on x86. */
#define POOL_LINE 128
#define POOL_MAX_THREADS 1024
/* Tasks per published descriptor; pool_run splits longer lists into batches. */
#define POOL_MAX_TASKS 16
/* Chunking (pool_cut): one slab of equal rows per participant, cut into
 * chunks that halve down to 1/16 of the slab (512 rows: 256, 128, 64, 32, 32).
 * History: 4 equal chunks per task per participant beat 8 (olmoe-1b-7b
 * `strata run ... -t 2`, gen_tok_s 48.2 47.0 48.0 47.8 46.5 -> 52.8 52.9 52.1
 * 50.9 51.8: longer runs of rows per kernel call) and 16; 2 was within noise;
 * capping every decode chunk at 256 KiB was slower (llama-3.2-1b Q4_K_M 63.5
 * -> 59.4). Halving keeps the long runs and shortens the tail: with 4 equal
 * chunks whoever finished first waited up to a quarter of the other's slab,
 * and the slabs of a multi-task job (Q 2048 rows, K and V 1024 each) were cut
 * by chunk count, 2560 against 1536 rows. Measured (2-vCPU EPYC VM,
 * 2026-12-01, `bench-model qwen3-0.6b-q8_0.gguf 2 128 16 1` with rdtsc
 * counters in a scratch copy, three interleaved pairs): the caller's wait for
 * the worker at the end of dispatches 77.7 / 65.1 / 99.5 -> 68.6 / 56.2 / 96.8
 * M cycles of ~4500 M of work. */

enum pool_job_kind { POOL_JOB_ROWS, POOL_JOB_EACH };

/* One worker's mailbox, alone on its line: only the caller writes `ticket`,
 * only the worker writes `parked`. */
struct pool_slot {
    _Alignas(POOL_LINE) _Atomic uint32_t ticket; /* jobs handed to this worker */
    _Atomic uint32_t parked;                     /* 1 while in (or entering) futex wait */
    /* The last ticket value resolved: claimed by the worker (it runs the job)
     * or revoked by the caller (a row job whose cursor ran out before the
     * worker showed up; the worker then skips it). One CAS from ticket-1 to
     * ticket decides which, so a late worker never touches a finished job. */
    _Atomic uint32_t claim;
    struct pool *pool;
    int index; /* 1..n_threads-1 */
    pthread_t thread;
};

struct pool_cursor {
    _Alignas(POOL_LINE) _Atomic int64_t next;
};

/* Rows [r0, r1) of task `task`. */
struct pool_chunk {
    int64_t r0, r1;
    int task;
};

struct pool_job {
    enum pool_job_kind kind;
    const struct pool_task *tasks; /* borrowed: (n_tasks) */
    int n_tasks;                   /* <= POOL_MAX_TASKS */
    /* Row jobs: the chunks in order, slab s being [slab_begin[s],
     * slab_begin[s + 1]); both arrays are the pool's (see pool_cut). */
    struct pool_chunk *chunks;
    int64_t *slab_begin;
    pool_each_fn each_fn;
    void *each_ctx;
    bool grouped; /* participants steal only from their group's slabs */
};

struct pool {
    int n_threads; /* participants including the caller */
    int spin;
    int min_grain;
    int oversubscribed;      /* more threads than CPUs: spinners yield */
    struct pool_slot *slots; /* (n_threads) slot 0 unused (the caller) */
    int n_spawned;
    int n_groups;   /* 0: none; 2: NUMA split */
    int *group_of;  /* (n_threads) participant -> group */
    int group_n[2]; /* participants per group */

    struct pool_job job; /* written by the caller only while no ticket is live */

    /* Row jobs: one slab of chunks per participant; slabs[s].next is slab
     * s's next unclaimed chunk. */
    struct pool_cursor *slabs; /* (n_threads) */
    int n_slabs;
    struct pool_chunk *chunks; /* (chunk_cap), grown by pool_cut */
    int64_t chunk_cap;
    int64_t *slab_begin;                            /* (n_threads + 1) */
    _Alignas(POOL_LINE) _Atomic uint32_t remaining; /* invited workers still running */
    _Atomic uint32_t caller_waiting;
    _Alignas(POOL_LINE) _Atomic uint32_t shutdown; /* read by workers per ticket */
    /* Caller-side counters on their own line, so bumping them per dispatch
     * does not invalidate the line workers read `shutdown` from. */
    _Alignas(POOL_LINE) _Atomic uint64_t dispatches;
    _Atomic int in_dispatch; /* bug check: one dispatching thread at a time */
};

static void futex_wait(_Atomic uint32_t *addr, uint32_t expected) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr, int n) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

struct pool_params pool_params_default(void) {
    struct pool_params pp = {.n_threads = 1, .spin = 4000, .min_grain = 32};
    return pp;
}

static void spin_pause(const struct pool *p, int i) {
    POOL_CPU_RELAX();
    /* Oversubscribed: the thread with the work may need this CPU. */
    if (p->oversubscribed && (i & 63) == 63)
        sched_yield();
}

/* Runs the current job as participant `worker` until the cursor is exhausted. */
static void pool_participate(struct pool *p, int worker) {
    const struct pool_job *job = &p->job;
    if (job->kind == POOL_JOB_EACH) {
        job->each_fn(job->each_ctx, worker);
        return;
    }
    const int ns = p->n_slabs;
    /* Own slab first (one contiguous stream of weight rows per thread), then
     * the others' leftovers: a preempted or slower participant's rows are
     * taken over chunk by chunk from the front of its slab, so balance is
     * as fine as with one shared cursor. Measured (2-vCPU EPYC dev box,
     * release, 2 threads, `build-p2-rel/bench/bench-model
     * build/bench-models/llama-3.2-1b-q4_0.gguf 2 64 8 1`, alternated with
     * the shared-cursor build, 4 pairs, box shared with other builds):
     * decode 45.7 44.4 46.8 48.1 -> 42.1 49.9 50.0 50.0 tok/s (median
     * 46.3 -> 50.0, +8%); rerun with both builds on the same kernels
     * (commit 653adeb), 3 quiet pairs: llama 46.3 45.7 48.5 -> 48.9 48.8
     * 46.5; qwen3-0.6b Q8_0 45.5 57.9 56.8 -> 61.8 65.9 67.6. With one core
     * taken by another job both give the same ~23 tok/s. One shared
     * cursor interleaved the two threads' 16 chunks across the matrix;
     * separate contiguous streams read DRAM faster. Whole halves without
     * stealing (1 chunk per thread) got the same on a quiet box, but a
     * preempted thread then holds half the job. */
    for (int k = 0; k < ns; k++) {
        const int s = (worker + k) % ns;
        if (job->grouped && p->group_of[s] != p->group_of[worker])
            continue; /* the other node's rows: its own threads take them */
        const int64_t end = job->slab_begin[s + 1];
        for (;;) {
            int64_t c = atomic_fetch_add_explicit(&p->slabs[s].next, 1, memory_order_relaxed);
            if (c >= end)
                break;
            const struct pool_chunk *ck = &job->chunks[c];
            const struct pool_task *task = &job->tasks[ck->task];
            task->fn(task->ctx, ck->r0, ck->r1, worker);
        }
    }
}

static void *pool_worker_main(void *arg) {
    struct pool_slot *slot = arg;
    struct pool *p = slot->pool;
    /* 0, not a load: a job published before this thread first runs must
     * still count as new. */
    uint32_t seen = 0;
    for (;;) {
        uint32_t t;
        int i = 0;
        while ((t = atomic_load_explicit(&slot->ticket, memory_order_acquire)) == seen) {
            if (i < p->spin) {
                spin_pause(p, i++);
                continue;
            }
            atomic_store(&slot->parked, 1);
            if (atomic_load(&slot->ticket) == seen)
                futex_wait(&slot->ticket, seen);
            atomic_store(&slot->parked, 0);
            i = 0;
        }
        seen = t;
        if (atomic_load(&p->shutdown))
            break;
        uint32_t expect = t - 1;
        if (!atomic_compare_exchange_strong(&slot->claim, &expect, t))
            continue; /* revoked: the caller finished this job without us */
        pool_participate(p, slot->index);
        if (atomic_fetch_sub(&p->remaining, 1) == 1 && atomic_load(&p->caller_waiting))
            futex_wake(&p->remaining, 1);
    }
    return NULL;
}

struct pool *pool_init(const struct pool_params *params, struct strata_error *err) {
    struct pool_params pp = params ? *params : pool_params_default();
    if (pp.n_threads < 1 || pp.n_threads > POOL_MAX_THREADS) {
        strata_error_set(err, STRATA_E_RANGE, "pool: n_threads %d not in [1, %d]", pp.n_threads,
                         POOL_MAX_THREADS);
        return NULL;
    }
    if (pp.spin < 0 || pp.min_grain < 1) {
        strata_error_set(err, STRATA_E_RANGE, "pool: spin %d < 0 or min_grain %d < 1", pp.spin,
                         pp.min_grain);
        return NULL;
    }
    struct pool *p = aligned_alloc(POOL_LINE, sizeof *p);
    if (!p)
        goto fail_nomem;
    memset(p, 0, sizeof *p);
    p->n_threads = pp.n_threads;
    p->spin = pp.spin;
    p->min_grain = pp.min_grain;
    long n_cpu = sysconf(_SC_NPROCESSORS_ONLN);
    p->oversubscribed = n_cpu > 0 && pp.n_threads > n_cpu;
    size_t slots_bytes = sizeof(struct pool_slot) * (size_t)pp.n_threads;
    p->slots = aligned_alloc(POOL_LINE, slots_bytes);
    if (!p->slots)
        goto fail_nomem;
    memset(p->slots, 0, slots_bytes);
    p->slabs = aligned_alloc(POOL_LINE, sizeof *p->slabs * (size_t)pp.n_threads);
    if (!p->slabs)
        goto fail_nomem;
    memset(p->slabs, 0, sizeof *p->slabs * (size_t)pp.n_threads);
    p->slab_begin = calloc((size_t)pp.n_threads + 1, sizeof *p->slab_begin);
    if (!p->slab_begin)
        goto fail_nomem;
    for (int w = 1; w < pp.n_threads; w++) {
        struct pool_slot *s = &p->slots[w];
        s->pool = p;
        s->index = w;
        int rc = pthread_create(&s->thread, NULL, pool_worker_main, s);
        if (rc != 0) {
            strata_error_set(err, STRATA_E_NOMEM, "pool: cannot start worker %d of %d: %s", w,
                             pp.n_threads - 1, strerror(rc));
            pool_free(p);
            return NULL;
        }
        p->n_spawned = w;
    }
    return p;
fail_nomem:
    strata_error_set(err, STRATA_E_NOMEM, "pool: out of memory");
    pool_free(p);
    return NULL;
}

void pool_free(struct pool *p) {
    if (!p)
        return;
    atomic_store(&p->shutdown, 1);
    for (int w = 1; w <= p->n_spawned; w++) {
        /* A ticket bump, not only a wake: a worker about to sleep on its old
         * ticket value then returns at once and sees `shutdown`. */
        atomic_fetch_add(&p->slots[w].ticket, 1);
        futex_wake(&p->slots[w].ticket, 1);
    }
    for (int w = 1; w <= p->n_spawned; w++)
        pthread_join(p->slots[w].thread, NULL);
    free(p->slots);
    free(p->slabs);
    free(p->slab_begin);
    free(p->chunks);
    free(p->group_of);
    free(p);
}

/* Publishes the job already written to p->job to workers 1..n_invite, runs it
 * as worker 0 and waits for the invited workers. */
static void pool_dispatch(struct pool *p, int n_invite) {
    atomic_fetch_add_explicit(&p->dispatches, 1, memory_order_relaxed);
    if (p->job.kind == POOL_JOB_ROWS) {
        p->n_slabs = n_invite + 1;
        for (int s = 0; s < p->n_slabs; s++)
            atomic_store_explicit(&p->slabs[s].next, p->slab_begin[s], memory_order_relaxed);
    }
    if (n_invite > 0) {
        atomic_store(&p->remaining, (uint32_t)n_invite);
        for (int w = 1; w <= n_invite; w++) {
            struct pool_slot *s = &p->slots[w];
            atomic_fetch_add(&s->ticket, 1);
            if (atomic_load(&s->parked))
                futex_wake(&s->ticket, 1);
        }
    }
    pool_participate(p, 0);
    if (n_invite == 0)
        return;
    if (p->job.kind == POOL_JOB_ROWS && !p->job.grouped) {
        /* Every chunk is taken; invited workers that have not claimed their
         * ticket yet (descheduled on a busy box) would find nothing to do, so
         * revoke them instead of waiting for their next time slice. */
        uint32_t revoked = 0;
        for (int w = 1; w <= n_invite; w++) {
            struct pool_slot *s = &p->slots[w];
            uint32_t t = atomic_load(&s->ticket);
            uint32_t expect = t - 1;
            if (atomic_compare_exchange_strong(&s->claim, &expect, t))
                revoked++;
        }
        if (revoked)
            atomic_fetch_sub(&p->remaining, revoked);
    }
    for (int i = 0; atomic_load_explicit(&p->remaining, memory_order_acquire) != 0; i++) {
        if (i < p->spin) {
            spin_pause(p, i);
            continue;
        }
        atomic_store(&p->caller_waiting, 1);
        uint32_t r = atomic_load(&p->remaining);
        if (r != 0)
            futex_wait(&p->remaining, r);
        atomic_store(&p->caller_waiting, 0);
    }
    atomic_thread_fence(memory_order_acquire);
}

/* Rows of task i that chunk boundaries are multiples of (from its start). */
static int64_t task_floor(const struct pool *p, const struct pool_task *t) {
    return t->min_grain > 0 ? t->min_grain : p->min_grain;
}

/* Cuts rows [r0, r1) of task i into chunks, appended at out[n] (counted
 * only, when out is NULL): each chunk is half of what is left of the slab,
 * but at least `tail` rows, a multiple of the task's floor and at most its
 * max_grain. Returns the new count. */
static int64_t cut_piece(const struct pool *p, const struct pool_job *job, struct pool_chunk *out,
                         int64_t n, int i, int64_t r0, int64_t r1, int64_t *slab_left,
                         int64_t tail) {
    const struct pool_task *t = &job->tasks[i];
    const int64_t fl = task_floor(p, t);
    while (r0 < r1) {
        int64_t g = (*slab_left + 1) / 2;
        if (g < tail)
            g = tail;
        g = (g + fl - 1) / fl * fl;
        if (t->max_grain > 0 && g > t->max_grain)
            g = t->max_grain;
        if (g > r1 - r0)
            g = r1 - r0;
        if (out)
            out[n] = (struct pool_chunk){.r0 = r0, .r1 = r0 + g, .task = i};
        n++;
        r0 += g;
        *slab_left -= g;
    }
    return n;
}

/* One pass of pool_cut over `ns` slabs; out as in cut_piece. */
static int64_t cut_slabs(const struct pool *p, struct pool_job *job, struct pool_chunk *out, int ns,
                         int64_t total) {
    int64_t n = 0, done = 0, r = 0; /* r: next row of task i */
    int i = 0;
    for (int s = 0; s < ns; s++) {
        job->slab_begin[s] = n;
        const int64_t want = (int64_t)(s + 1) * total / ns; /* slab end, in rows of all tasks */
        int64_t slab_left = want - done;
        const int64_t tail = (slab_left + 15) / 16;
        while (i < job->n_tasks && done < want) {
            const struct pool_task *t = &job->tasks[i];
            const int64_t fl = task_floor(p, t);
            int64_t e = r + (want - done);
            if (s == ns - 1 || e > t->n_rows)
                e = t->n_rows;
            e = (e + fl - 1) / fl * fl; /* slab boundaries on the task's floor */
            if (e > t->n_rows)
                e = t->n_rows;
            n = cut_piece(p, job, out, n, i, r, e, &slab_left, tail);
            done += e - r;
            r = e;
            if (r == t->n_rows) {
                i++;
                r = 0;
            }
        }
    }
    job->slab_begin[ns] = n;
    return n;
}

/* Rows of task i given to group g. */
static void group_range(const struct pool *p, const struct pool_task *t, int g, int64_t *lo,
                        int64_t *hi) {
    int64_t b = t->n_groups == 2 && t->group_bounds ? t->group_bounds[1]
                                                    : pool_group_bound(p, t->n_rows, t->min_grain);
    if (b < 0)
        b = 0;
    if (b > t->n_rows)
        b = t->n_rows;
    *lo = g == 0 ? 0 : b;
    *hi = g == 0 ? b : t->n_rows;
}

/* x (a row of [lo, hi)) moved up to the task's floor, the ends kept: the
 * same x always maps to the same row, so neighbouring slabs meet exactly. */
static int64_t floor_up(int64_t x, int64_t lo, int64_t hi, int64_t fl) {
    if (x <= lo || x >= hi)
        return x <= lo ? lo : hi;
    x = (x + fl - 1) / fl * fl;
    return x < hi ? x : hi;
}

/* The grouped form of cut_slabs: participant s's slab is its equal share
 * (by rank in its group) of its group's rows over all tasks, in participant
 * order so slab s stays [slab_begin[s], slab_begin[s + 1]). */
static int64_t cut_grouped(const struct pool *p, struct pool_job *job, struct pool_chunk *out) {
    int64_t total[2] = {0, 0}, n = 0;
    for (int i = 0; i < job->n_tasks; i++)
        for (int g = 0; g < 2; g++) {
            int64_t lo, hi;
            group_range(p, &job->tasks[i], g, &lo, &hi);
            total[g] += hi - lo;
        }
    int rank[2] = {0, 0};
    for (int s = 0; s < p->n_threads; s++) {
        const int g = p->group_of[s], k = rank[g]++, m = p->group_n[g];
        job->slab_begin[s] = n;
        const int64_t w0 = (int64_t)k * total[g] / m, w1 = (int64_t)(k + 1) * total[g] / m;
        int64_t slab_left = w1 - w0, pos = 0;
        const int64_t tail = (slab_left + 15) / 16;
        for (int i = 0; i < job->n_tasks && pos < w1; i++) {
            const struct pool_task *t = &job->tasks[i];
            int64_t lo, hi;
            group_range(p, t, g, &lo, &hi);
            const int64_t a = w0 > pos ? w0 : pos, b = w1 < pos + hi - lo ? w1 : pos + hi - lo;
            if (a < b) {
                const int64_t fl = task_floor(p, t);
                const int64_t r0 = floor_up(lo + a - pos, lo, hi, fl);
                const int64_t r1 = floor_up(lo + b - pos, lo, hi, fl);
                n = cut_piece(p, job, out, n, i, r0, r1, &slab_left, tail);
            }
            pos += hi - lo;
        }
    }
    job->slab_begin[p->n_threads] = n;
    return n;
}

/* Cuts the row job in p->job into one slab per participant (equal rows,
 * boundaries on each task's floor) and each slab into chunks that halve
 * down to 1/16 of the slab: a participant streams most of its slab in two or
 * three long calls, and its last chunks are short, so whoever finishes first
 * waits for at most a 1/16-slab chunk of the other's. Returns the number of
 * participants (0: no rows), or -1 without memory for the chunk list. */
static int pool_cut(struct pool *p, struct pool_job *job) {
    job->slab_begin = p->slab_begin;
    int64_t total = 0, pieces = 0;
    for (int i = 0; i < job->n_tasks; i++) {
        const int64_t fl = task_floor(p, &job->tasks[i]);
        total += job->tasks[i].n_rows;
        pieces += (job->tasks[i].n_rows + fl - 1) / fl;
    }
    if (total == 0)
        return 0;
    /* A job with few floor-sized pieces invites only that many participants. */
    const int ns = pieces < p->n_threads ? (int)pieces : p->n_threads;
    job->grouped = p->n_groups == 2 && ns == p->n_threads;
    const int64_t n = job->grouped ? cut_grouped(p, job, NULL) : cut_slabs(p, job, NULL, ns, total);
    if (n > p->chunk_cap) {
        struct pool_chunk *c = realloc(p->chunks, (size_t)n * sizeof *c);
        if (!c)
            return -1;
        p->chunks = c;
        p->chunk_cap = n;
    }
    if (job->grouped)
        cut_grouped(p, job, p->chunks);
    else
        cut_slabs(p, job, p->chunks, ns, total);
    job->chunks = p->chunks;
    return ns;
}

static void enter_dispatch(struct pool *p) {
    int was = atomic_exchange(&p->in_dispatch, 1);
    STRATA_ASSERT(was == 0 && "pool: two threads dispatching at once");
}

int pool_run(struct pool *p, const struct pool_task *tasks, int n_tasks) {
    if (n_tasks < 0 || (n_tasks > 0 && !tasks))
        return STRATA_E_INVALID;
    for (int i = 0; i < n_tasks; i++)
        if (!tasks[i].fn || tasks[i].n_rows < 0 || tasks[i].min_grain < 0 || tasks[i].max_grain < 0)
            return STRATA_E_INVALID;
    enter_dispatch(p);
    for (int base = 0; base < n_tasks; base += POOL_MAX_TASKS) {
        struct pool_job *job = &p->job;
        int n = n_tasks - base < POOL_MAX_TASKS ? n_tasks - base : POOL_MAX_TASKS;
        job->kind = POOL_JOB_ROWS;
        job->tasks = tasks + base;
        job->n_tasks = n;
        const int n_part = pool_cut(p, job);
        if (n_part < 0) { /* no memory for the chunk list: the caller runs every row */
            for (int i = 0; i < n; i++) {
                const struct pool_task *t = &job->tasks[i];
                const int64_t g = t->max_grain > 0 ? t->max_grain : t->n_rows;
                for (int64_t r = 0; r < t->n_rows; r += g)
                    t->fn(t->ctx, r, r + g < t->n_rows ? r + g : t->n_rows, 0);
            }
            continue;
        }
        if (n_part == 0)
            continue;
        pool_dispatch(p, n_part - 1);
    }
    atomic_store(&p->in_dispatch, 0);
    return 0;
}

void pool_run_each(struct pool *p, pool_each_fn fn, void *ctx, int n) {
    if (n < 1)
        n = 1;
    if (n > p->n_threads)
        n = p->n_threads;
    enter_dispatch(p);
    p->job.kind = POOL_JOB_EACH;
    p->job.grouped = false;
    p->job.each_fn = fn;
    p->job.each_ctx = ctx;
    pool_dispatch(p, n - 1);
    atomic_store(&p->in_dispatch, 0);
}

int pool_n_threads(const struct pool *p) {
    return p->n_threads;
}

uint64_t pool_dispatch_count(const struct pool *p) {
    return atomic_load_explicit(&((struct pool *)p)->dispatches, memory_order_relaxed);
}

int pool_n_parked(const struct pool *p) {
    int n = 0;
    for (int w = 1; w < p->n_threads; w++)
        n += (int)atomic_load(&((struct pool *)p)->slots[w].parked);
    return n;
}

int pool_set_groups(struct pool *p, int n_groups, const int *group_of) {
    if (n_groups <= 1) {
        p->n_groups = 0;
        return 0;
    }
    if (n_groups != 2 || !group_of)
        return STRATA_E_INVALID;
    int cnt[2] = {0, 0};
    for (int w = 0; w < p->n_threads; w++) {
        if (group_of[w] != 0 && group_of[w] != 1)
            return STRATA_E_INVALID;
        cnt[group_of[w]]++;
    }
    if (!cnt[0] || !cnt[1])
        return STRATA_E_INVALID;
    if (!p->group_of && !(p->group_of = malloc((size_t)p->n_threads * sizeof *p->group_of)))
        return STRATA_E_NOMEM;
    memcpy(p->group_of, group_of, (size_t)p->n_threads * sizeof *p->group_of);
    p->group_n[0] = cnt[0];
    p->group_n[1] = cnt[1];
    p->n_groups = 2;
    return 0;
}

int pool_n_groups(const struct pool *p) {
    return p->n_groups;
}

int pool_group_of(const struct pool *p, int worker) {
    return p->n_groups == 2 && worker >= 0 && worker < p->n_threads ? p->group_of[worker] : 0;
}

int64_t pool_group_bound(const struct pool *p, int64_t n_rows, int64_t min_grain) {
    if (p->n_groups != 2 || n_rows <= 0)
        return n_rows;
    const int64_t fl = min_grain > 0 ? min_grain : p->min_grain;
    const int64_t b = n_rows * p->group_n[0] / p->n_threads;
    return b / fl * fl;
}
