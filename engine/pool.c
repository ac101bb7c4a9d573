/* engine/pool.c: persistent worker pool with per-worker tickets (see pool.h).
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
#include "engine/pool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
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
/* ~4 chunks per task per participant: small enough that stealing still
 * balances a fast and a preempted worker, large enough that each kernel call
 * streams a long contiguous run of rows. Measured (2-vCPU EPYC dev box,
 * release, `strata run -m olmoe-1b-7b-q4_k_m.gguf --ids 1 -n 129 --temp 0
 * --ignore-eos -t 2 --json`, gen_tok_s, binaries alternated under the bench
 * lock, other jobs compiling): 8 -> 4 chunks: 48.2 47.0 48.0 47.8 46.5 ->
 * 52.8 52.9 52.1 50.9 51.8; a quiet pair 61.9 -> 65.0; 8 -> 16 was worse
 * (best of 6: 59.1 -> 56.5). For an expert's 1024 x 2048 gate that is 128
 * rows a chunk. 2 chunks was within noise (olmoe median ~61.9 -> ~63.0 over
 * 6 pairs, 4 of 6 won; llama-3.2-1b Q4_K_M 60.4 -> 61.4 best of 4) and
 * halves the granularity of stealing from a preempted thread: not taken.
 * Capping decode chunks at 256 KiB of weights (shorter tails for the
 * 1-2 MB chunks of a dense FFN) was slower: llama-3.2-1b Q4_K_M best of 5
 * 63.5 -> 59.4. */
#define POOL_CHUNKS_PER_THREAD 4

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

struct pool_job {
    enum pool_job_kind kind;
    const struct pool_task *tasks;           /* borrowed: (n_tasks) */
    int n_tasks;                             /* <= POOL_MAX_TASKS */
    int64_t grain[POOL_MAX_TASKS];           /* rows per chunk, per task */
    int64_t chunk_begin[POOL_MAX_TASKS + 1]; /* prefix sums of chunks per task */
    pool_each_fn each_fn;
    void *each_ctx;
};

struct pool {
    int n_threads; /* participants including the caller */
    int spin;
    int min_grain;
    int oversubscribed;      /* more threads than CPUs: spinners yield */
    struct pool_slot *slots; /* (n_threads) slot 0 unused (the caller) */
    int n_spawned;

    struct pool_job job; /* written by the caller only while no ticket is live */

    /* Row jobs: the chunks [0, n) are cut into n_slabs contiguous slabs, one
     * per participant; slab s spans [s * n / n_slabs, (s + 1) * n / n_slabs)
     * and slabs[s].next is its next unclaimed chunk. */
    struct pool_cursor *slabs; /* (n_threads) */
    int n_slabs;
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
    const int64_t n_chunks = job->chunk_begin[job->n_tasks];
    const int ns = p->n_slabs;
    int t = 0;
    /* Own slab first (one contiguous stream of weight rows per thread), then
     * the others' leftovers: a preempted or slower participant's rows are
     * taken over chunk by chunk from the front of its slab, so balance is
     * as fine as with one shared cursor. Measured (2-vCPU EPYC dev box,
     * release, 2 threads, `build-p2-rel/tests/bench-model
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
        const int64_t end = (int64_t)(s + 1) * n_chunks / ns;
        for (;;) {
            int64_t c = atomic_fetch_add_explicit(&p->slabs[s].next, 1, memory_order_relaxed);
            if (c >= end)
                break;
            /* Chunks are taken in increasing order within a slab. */
            if (c < job->chunk_begin[t])
                t = 0;
            while (c >= job->chunk_begin[t + 1])
                t++;
            const struct pool_task *task = &job->tasks[t];
            int64_t r0 = (c - job->chunk_begin[t]) * job->grain[t];
            int64_t r1 = r0 + job->grain[t];
            if (r1 > task->n_rows)
                r1 = task->n_rows;
            task->fn(task->ctx, r0, r1, worker);
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
    free(p);
}

/* Publishes the job already written to p->job to workers 1..n_invite, runs it
 * as worker 0 and waits for the invited workers. */
static void pool_dispatch(struct pool *p, int n_invite) {
    atomic_fetch_add_explicit(&p->dispatches, 1, memory_order_relaxed);
    if (p->job.kind == POOL_JOB_ROWS) {
        const int64_t n_chunks = p->job.chunk_begin[p->job.n_tasks];
        p->n_slabs = n_invite + 1;
        for (int s = 0; s < p->n_slabs; s++)
            atomic_store_explicit(&p->slabs[s].next, (int64_t)s * n_chunks / p->n_slabs,
                                  memory_order_relaxed);
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
    if (p->job.kind == POOL_JOB_ROWS) {
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
        job->chunk_begin[0] = 0;
        for (int i = 0; i < n; i++) {
            const struct pool_task *t = &tasks[base + i];
            int64_t floor_rows = t->min_grain > 0 ? t->min_grain : p->min_grain;
            int64_t want = (int64_t)p->n_threads * POOL_CHUNKS_PER_THREAD;
            int64_t g = (t->n_rows + want - 1) / want;
            if (g < floor_rows)
                g = floor_rows;
            if (t->max_grain > 0 && g > t->max_grain)
                g = t->max_grain;
            job->grain[i] = g;
            job->chunk_begin[i + 1] = job->chunk_begin[i] + (t->n_rows + g - 1) / g;
        }
        int64_t n_chunks = job->chunk_begin[n];
        if (n_chunks == 0)
            continue;
        /* A job with few chunks invites only that many participants. */
        int64_t n_invite = n_chunks - 1;
        if (n_invite > p->n_threads - 1)
            n_invite = p->n_threads - 1;
        pool_dispatch(p, (int)n_invite);
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
