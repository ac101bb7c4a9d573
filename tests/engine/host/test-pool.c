/* tests/engine/host/test-pool.c: the persistent worker pool (engine/host/pool.c). */
#include "tests/harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "engine/cpu/kernels.h"
#include "engine/host/pool.h"

/* ---- watchdog: a hang becomes a failure instead of a stuck suite ------------ */

struct watchdog {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int seconds;
    const char *what;
};

static void *watchdog_main(void *arg) {
    struct watchdog *wd = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += wd->seconds;
    pthread_mutex_lock(&wd->mu);
    while (!wd->done) {
        if (pthread_cond_timedwait(&wd->cv, &wd->mu, &until) != 0 && !wd->done) {
            fprintf(stderr, "watchdog: %s still running after %d s: hang\n", wd->what, wd->seconds);
            fflush(stderr);
            _exit(3); /* Check (fork mode) reports the test as failed */
        }
    }
    pthread_mutex_unlock(&wd->mu);
    return NULL;
}

static void watchdog_start(struct watchdog *wd, int seconds, const char *what) {
    memset(wd, 0, sizeof *wd);
    pthread_mutex_init(&wd->mu, NULL);
    pthread_cond_init(&wd->cv, NULL);
    wd->seconds = seconds;
    wd->what = what;
    pthread_create(&wd->thread, NULL, watchdog_main, wd);
}

static void watchdog_stop(struct watchdog *wd) {
    pthread_mutex_lock(&wd->mu);
    wd->done = 1;
    pthread_cond_signal(&wd->cv);
    pthread_mutex_unlock(&wd->mu);
    pthread_join(wd->thread, NULL);
    pthread_mutex_destroy(&wd->mu);
    pthread_cond_destroy(&wd->cv);
}

/* A pool of n_threads participants that spin `spin` rounds before parking. */
static struct pool *open_pool(int n_threads, int spin) {
    struct pool_params pp = pool_params_default();
    pp.n_threads = n_threads;
    pp.spin = spin;
    struct pool *p = pool_init(&pp, NULL);
    ck_assert_ptr_nonnull(p);
    return p;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int n_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* ---- rows: every row of every task exactly once ---------------------------- */

struct rows_ctx {
    _Atomic int *hits; /* (n_rows) */
    int64_t n_rows;
    _Atomic int bad; /* a range out of [0, n_rows) or empty */
    _Atomic int max_worker;
};

static void rows_fn(void *vctx, int64_t r0, int64_t r1, int worker) {
    struct rows_ctx *c = vctx;
    if (r0 < 0 || r1 > c->n_rows || r0 >= r1) {
        atomic_store(&c->bad, 1);
        return;
    }
    for (int64_t r = r0; r < r1; r++)
        atomic_fetch_add(&c->hits[r], 1);
    int m = atomic_load(&c->max_worker);
    while (worker > m && !atomic_compare_exchange_weak(&c->max_worker, &m, worker)) {
    }
}

START_TEST(test_rows_exactly_once) {
    static const int64_t sizes[] = {0, 1, 31, 32, 33, 100, 1000, 4096, 100003};
    const int n_sizes = (int)(sizeof sizes / sizeof sizes[0]);
    for (int nt = 1; nt <= 4; nt++) {
        struct pool_params pp = pool_params_default();
        pp.n_threads = nt;
        pp.spin = 200;
        struct strata_error err = {0};
        struct pool *p = pool_init(&pp, &err);
        ck_assert_msg(p, "pool_init: %s", err.message);
        ck_assert_int_eq(pool_n_threads(p), nt);
        /* All sizes as separate tasks of one dispatch, then each alone. */
        struct rows_ctx ctx[9];
        struct pool_task tasks[9];
        for (int i = 0; i < n_sizes; i++) {
            ctx[i] = (struct rows_ctx){.n_rows = sizes[i]};
            ctx[i].hits = calloc((size_t)sizes[i] + 1, sizeof(_Atomic int));
            tasks[i] = (struct pool_task){.fn = rows_fn, .ctx = &ctx[i], .n_rows = sizes[i]};
        }
        uint64_t d0 = pool_dispatch_count(p);
        ck_assert_int_eq(pool_run(p, tasks, n_sizes), 0);
        ck_assert_uint_eq(pool_dispatch_count(p), d0 + 1);
        for (int i = 0; i < n_sizes; i++)
            ck_assert_int_eq(pool_run(p, &tasks[i], 1), 0);
        for (int i = 0; i < n_sizes; i++) {
            ck_assert_int_eq(atomic_load(&ctx[i].bad), 0);
            ck_assert_int_lt(atomic_load(&ctx[i].max_worker), nt);
            for (int64_t r = 0; r < sizes[i]; r++)
                ck_assert_msg(atomic_load(&ctx[i].hits[r]) == 2,
                              "threads %d size %lld row %lld ran %d times (want 2)", nt,
                              (long long)sizes[i], (long long)r, atomic_load(&ctx[i].hits[r]));
            free(ctx[i].hits);
        }
        pool_free(p);
    }
}
END_TEST

START_TEST(test_many_tasks_and_bad_input) {
    struct pool_params pp = pool_params_default(); /* reused for the bad-params checks below */
    pp.n_threads = 3;
    pp.spin = 100;
    struct pool *p = pool_init(&pp, NULL);
    ck_assert_ptr_nonnull(p);
    enum { N = 40 }; /* more than one descriptor's worth of tasks */
    struct rows_ctx ctx[N];
    struct pool_task tasks[N];
    for (int i = 0; i < N; i++) {
        ctx[i] = (struct rows_ctx){.n_rows = 17 * i + 5};
        ctx[i].hits = calloc((size_t)ctx[i].n_rows, sizeof(_Atomic int));
        tasks[i] = (struct pool_task){
            .fn = rows_fn, .ctx = &ctx[i], .n_rows = ctx[i].n_rows, .min_grain = 1 + i % 3};
    }
    ck_assert_int_eq(pool_run(p, tasks, N), 0);
    for (int i = 0; i < N; i++) {
        for (int64_t r = 0; r < ctx[i].n_rows; r++)
            ck_assert_int_eq(atomic_load(&ctx[i].hits[r]), 1);
        free(ctx[i].hits);
    }
    /* The NUMA seam's fields are accepted and (for now) change nothing. */
    {
        _Atomic int hits[500] = {0};
        struct rows_ctx c = {.hits = hits, .n_rows = 500};
        const int64_t bounds[3] = {0, 250, 500};
        struct pool_task t = {
            .fn = rows_fn, .ctx = &c, .n_rows = 500, .n_groups = 2, .group_bounds = bounds};
        ck_assert_int_eq(pool_run(p, &t, 1), 0);
        for (int r = 0; r < 500; r++)
            ck_assert_int_eq(atomic_load(&hits[r]), 1);
    }
    struct pool_task bad = {.fn = NULL, .n_rows = 10};
    ck_assert_int_eq(pool_run(p, &bad, 1), STRATA_E_INVALID);
    bad = (struct pool_task){.fn = rows_fn, .n_rows = -1};
    ck_assert_int_eq(pool_run(p, &bad, 1), STRATA_E_INVALID);
    ck_assert_int_eq(pool_run(p, NULL, 0), 0);
    pool_free(p);
    pool_free(NULL);

    struct strata_error err = {0};
    pp.n_threads = 0;
    ck_assert_ptr_null(pool_init(&pp, &err));
    ck_assert_int_eq(err.code, STRATA_E_RANGE);
    pp.n_threads = 2;
    pp.min_grain = 0;
    ck_assert_ptr_null(pool_init(&pp, &err));
    ck_assert_int_eq(err.code, STRATA_E_RANGE);
}
END_TEST

/* ---- straggler stress: limited jobs on an oversubscribed pool --------------- */

enum { STRESS_MAX_THREADS = 256 };

struct each_ctx {
    _Atomic int runs[STRESS_MAX_THREADS]; /* per participant, this job */
    _Atomic int total;
};

static void each_fn(void *vctx, int worker) {
    struct each_ctx *c = vctx;
    if (worker >= 0 && worker < STRESS_MAX_THREADS)
        atomic_fetch_add(&c->runs[worker], 1);
    atomic_fetch_add(&c->total, 1);
}

START_TEST(test_straggler_stress) {
    int nt = 4 * n_cpus(); /* 4x more participants than CPUs */
    if (nt > STRESS_MAX_THREADS)
        nt = STRESS_MAX_THREADS;
    if (nt < 4)
        nt = 4;
    struct pool *p = open_pool(nt, 64); /* ASan makes spinning slow; the protocol is the same */
    struct watchdog wd;
    watchdog_start(&wd, 60, "straggler stress (20000 limited dispatches)");
    double t0 = now_s();
    struct each_ctx *c = calloc(1, sizeof *c);
    int failures = 0;
    const int n_jobs = 20000;
    for (int j = 0; j < n_jobs; j++) {
        int limit = j % (nt - 1); /* invited workers: 0 .. nt-2, always fewer than exist */
        pool_run_each(p, each_fn, c, limit + 1);
        if (atomic_load(&c->total) != limit + 1)
            failures++;
        for (int w = 0; w < nt; w++) {
            int want = w <= limit ? 1 : 0;
            if (atomic_load(&c->runs[w]) != want) {
                if (failures < 5)
                    fprintf(stderr, "job %d limit %d: participant %d ran %d times (want %d)\n", j,
                            limit, w, atomic_load(&c->runs[w]), want);
                failures++;
            }
            atomic_store(&c->runs[w], 0);
        }
        atomic_store(&c->total, 0);
    }
    double dt = now_s() - t0;
    watchdog_stop(&wd);
    fprintf(stderr, "straggler stress: %d threads on %d cpus, %d dispatches in %.2f s\n", nt,
            n_cpus(), n_jobs, dt);
    ck_assert_int_eq(failures, 0);
    ck_assert_uint_eq(pool_dispatch_count(p), (uint64_t)n_jobs);
    free(c);
    pool_free(p);
}
END_TEST

/* Limited row jobs: few chunks invite few workers; rows still exactly once. */
START_TEST(test_limited_rows_stress) {
    int nt = 4 * n_cpus();
    struct pool *p = open_pool(nt, 64);
    struct watchdog wd;
    watchdog_start(&wd, 60, "limited rows stress");
    _Atomic int hits[384];
    int bad = 0;
    for (int j = 0; j < 3000; j++) {
        int64_t n = 1 + (j * 37) % 384; /* 1..12 chunks of 32 rows */
        for (int64_t r = 0; r < n; r++)
            atomic_store(&hits[r], 0);
        struct rows_ctx ctx = {.hits = hits, .n_rows = n};
        struct pool_task t = {.fn = rows_fn, .ctx = &ctx, .n_rows = n};
        pool_run(p, &t, 1);
        bad += atomic_load(&ctx.bad);
        for (int64_t r = 0; r < n; r++)
            bad += atomic_load(&hits[r]) != 1;
    }
    watchdog_stop(&wd);
    ck_assert_int_eq(bad, 0);
    pool_free(p);
}
END_TEST

/* max_grain caps the rows of every chunk (it wins over min_grain); rows stay
 * exactly once; a negative cap is refused. */
struct span_ctx {
    struct rows_ctx rows;
    _Atomic int64_t max_span;
    int64_t align;          /* chunks must start at multiples of this (0: not checked) */
    _Atomic int misaligned; /* chunks that did not */
    _Atomic int n_chunks;
};

static void span_fn(void *vctx, int64_t r0, int64_t r1, int worker) {
    struct span_ctx *c = vctx;
    rows_fn(&c->rows, r0, r1, worker);
    atomic_fetch_add(&c->n_chunks, 1);
    if (c->align > 0 && r0 % c->align != 0)
        atomic_fetch_add(&c->misaligned, 1);
    int64_t m = atomic_load(&c->max_span);
    while (r1 - r0 > m && !atomic_compare_exchange_weak(&c->max_span, &m, r1 - r0)) {
    }
}

START_TEST(test_max_grain) {
    static const int64_t caps[] = {1, 7, 32, 100, 5000};
    for (int nt = 1; nt <= 3; nt++) {
        struct pool_params pp = pool_params_default();
        pp.n_threads = nt;
        struct pool *p = pool_init(&pp, NULL);
        ck_assert_ptr_nonnull(p);
        for (size_t k = 0; k < sizeof caps / sizeof caps[0]; k++) {
            enum { N = 4099 };
            static _Atomic int hits[N];
            for (int64_t r = 0; r < N; r++)
                atomic_store(&hits[r], 0);
            struct span_ctx c = {.rows = {.hits = hits, .n_rows = N}};
            struct pool_task t = {
                .fn = span_fn, .ctx = &c, .n_rows = N, .min_grain = 64, .max_grain = caps[k]};
            ck_assert_int_eq(pool_run(p, &t, 1), 0);
            ck_assert_int_eq(atomic_load(&c.rows.bad), 0);
            for (int64_t r = 0; r < N; r++)
                ck_assert_int_eq(atomic_load(&hits[r]), 1);
            ck_assert_int_le(atomic_load(&c.max_span), caps[k]);
        }
        struct pool_task bad = {.fn = span_fn, .ctx = NULL, .n_rows = 10, .max_grain = -1};
        ck_assert_int_eq(pool_run(p, &bad, 1), STRATA_E_INVALID);
        pool_free(p);
    }
}
END_TEST

/* Chunks start on each task's min_grain (from the task's first row) also
 * when slabs span several tasks, and a slab is cut into a few long chunks
 * then short ones: 2 participants over 1024 rows of floor 32 take 5 chunks
 * each (256, 128, 64, 32, 32). */
START_TEST(test_chunks_on_floor) {
    for (int nt = 1; nt <= 3; nt++) {
        struct pool *p = open_pool(nt, 200);
        enum { NT = 3 };
        static const int64_t rows[NT] = {1000, 333, 4099}, floors[NT] = {64, 1, 48};
        struct span_ctx c[NT];
        struct pool_task t[NT];
        _Atomic int *hits[NT];
        for (int i = 0; i < NT; i++) {
            hits[i] = calloc((size_t)rows[i], sizeof(_Atomic int));
            ck_assert_ptr_nonnull(hits[i]);
            c[i] =
                (struct span_ctx){.rows = {.hits = hits[i], .n_rows = rows[i]}, .align = floors[i]};
            t[i] = (struct pool_task){
                .fn = span_fn, .ctx = &c[i], .n_rows = rows[i], .min_grain = floors[i]};
        }
        ck_assert_int_eq(pool_run(p, t, NT), 0);
        for (int i = 0; i < NT; i++) {
            ck_assert_int_eq(atomic_load(&c[i].misaligned), 0);
            for (int64_t r = 0; r < rows[i]; r++)
                ck_assert_int_eq(atomic_load(&hits[i][r]), 1);
            free(hits[i]);
        }
        struct span_ctx one = {.rows = {.hits = calloc(1024, sizeof(_Atomic int)), .n_rows = 1024}};
        ck_assert_ptr_nonnull(one.rows.hits);
        struct pool_task t1 = {.fn = span_fn, .ctx = &one, .n_rows = 1024, .min_grain = 32};
        ck_assert_int_eq(pool_run(p, &t1, 1), 0);
        /* one slab: 512, 256, 128, 64, 64; two: 256, 128, 64, 32, 32 each */
        const int want_chunks = nt == 1 ? 5 : 10, want_max = nt == 1 ? 512 : 256;
        if (nt <= 2) {
            ck_assert_int_eq(atomic_load(&one.n_chunks), want_chunks);
            ck_assert_int_eq(atomic_load(&one.max_span), want_max);
        } else {
            ck_assert_int_le(atomic_load(&one.n_chunks), 6 * nt);
            ck_assert_int_le(atomic_load(&one.max_span), 1024 / nt);
        }
        free(one.rows.hits);
        pool_free(p);
    }
}
END_TEST

/* Parked workers (spin 0) are often revoked: the caller takes every chunk
 * before they wake, and a late worker must then skip that job and still run
 * the next one it is invited to. Rows stay exactly once. */
START_TEST(test_revoked_workers) {
    struct pool *p = open_pool(4, 0);
    struct watchdog wd;
    watchdog_start(&wd, 60, "revoked workers");
    _Atomic int hits[4 * 32];
    int bad = 0;
    for (int j = 0; j < 5000; j++) {
        int64_t n = 32 + (j % 97);
        for (int64_t r = 0; r < n; r++)
            atomic_store(&hits[r], 0);
        struct rows_ctx ctx = {.hits = hits, .n_rows = n};
        struct pool_task t = {.fn = rows_fn, .ctx = &ctx, .n_rows = n};
        pool_run(p, &t, 1);
        bad += atomic_load(&ctx.bad);
        for (int64_t r = 0; r < n; r++)
            bad += atomic_load(&hits[r]) != 1;
        if (j % 1000 == 999) { /* an every-participant job still reaches all */
            struct each_ctx *c = calloc(1, sizeof *c);
            pool_run_each(p, each_fn, c, 4);
            bad += atomic_load(&c->total) != 4;
            free(c);
        }
    }
    watchdog_stop(&wd);
    ck_assert_int_eq(bad, 0);
    pool_free(p);
}
END_TEST

/* ---- park / wake ------------------------------------------------------------ */

START_TEST(test_park_and_wake) {
    struct pool *p = open_pool(3, 100);
    struct watchdog wd;
    watchdog_start(&wd, 60, "park and wake");
    for (int round = 0; round < 5; round++) {
        /* Workers park once their spin budget is spent. */
        double t0 = now_s();
        while (pool_n_parked(p) != 2 && now_s() - t0 < 5.0)
            usleep(1000);
        ck_assert_int_eq(pool_n_parked(p), 2);
        /* A later dispatch wakes them and completes with every participant. */
        struct each_ctx *c = calloc(1, sizeof *c);
        pool_run_each(p, each_fn, c, 3);
        ck_assert_int_eq(atomic_load(&c->total), 3);
        for (int w = 0; w < 3; w++)
            ck_assert_int_eq(atomic_load(&c->runs[w]), 1);
        free(c);
    }
    watchdog_stop(&wd);
    pool_free(p);
}
END_TEST

/* ---- bit-identity of a real matmul across thread counts --------------------- */

struct mm_ctx {
    const struct kern_mat *w;
    const void *xq;
    size_t xs;
    int64_t n_tok;
    float *y;
};

static void mm_rows(void *vctx, int64_t r0, int64_t r1, int worker) {
    struct mm_ctx *c = vctx;
    kernels_matmul(c->w, c->xq, c->xs, c->n_tok, c->y, c->w->n_rows, r0, r1);
}

START_TEST(test_matmul_bit_identical) {
    static const enum quant_type types[] = {QUANT_Q4_0, QUANT_Q8_0, QUANT_Q4_K, QUANT_Q6_K,
                                            QUANT_F16};
    const int64_t n_rows = 1000, n_cols = 1024, n_tok = 6;
    uint32_t s = 0xC0FFEEu;
    for (int ti = 0; ti < 5; ti++) {
        enum quant_type t = types[ti];
        const struct quant_traits *tr = quant_type_traits(t);
        size_t rb = quant_row_size(t, n_cols), ab = kernels_act_row_size(t, n_cols);
        uint8_t *w = malloc((size_t)n_rows * rb);
        for (size_t i = 0; i < (size_t)n_rows * rb; i++) {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            w[i] = (uint8_t)s;
        }
        /* finite f16 values / scales: clear the top exponent bits */
        if (tr->block_size == 1) {
            for (size_t i = 1; i < (size_t)n_rows * rb; i += 2)
                w[i] &= 0x3f;
        } else {
            for (int64_t b = 0; b < n_rows * (n_cols / tr->block_size); b++) {
                uint8_t *blk = w + b * tr->type_size;
                if (t == QUANT_Q6_K)
                    blk[209] &= 0x3f;
                else
                    blk[1] &= 0x3f;
                if (t == QUANT_Q4_K)
                    blk[3] &= 0x3f;
            }
        }
        float x[1024];
        uint8_t *xq = malloc((size_t)n_tok * ab);
        for (int64_t k = 0; k < n_tok; k++) {
            for (int i = 0; i < 1024; i++)
                x[i] = (float)((int)(i * 7 + k * 13) % 61 - 30) / 17.0f;
            kernels_quantize_act(t, x, xq + k * ab, n_cols);
        }
        struct kern_mat m = {w, t, n_rows, n_cols, rb, 0};
        float *serial = malloc((size_t)(n_rows * n_tok) * sizeof(float));
        float *got = malloc((size_t)(n_rows * n_tok) * sizeof(float));
        kernels_matmul(&m, xq, ab, n_tok, serial, n_rows, 0, n_rows);
        for (int nt = 1; nt <= 4; nt++) {
            struct pool_params pp = pool_params_default();
            pp.n_threads = nt;
            pp.min_grain = 8; /* many chunks, many different splits */
            struct pool *p = pool_init(&pp, NULL);
            ck_assert_ptr_nonnull(p);
            for (int rep = 0; rep < 3; rep++) {
                memset(got, 0, (size_t)(n_rows * n_tok) * sizeof(float));
                struct mm_ctx c = {&m, xq, ab, n_tok, got};
                struct pool_task task = {.fn = mm_rows, .ctx = &c, .n_rows = n_rows};
                ck_assert_int_eq(pool_run(p, &task, 1), 0);
                ck_assert_msg(memcmp(got, serial, (size_t)(n_rows * n_tok) * sizeof(float)) == 0,
                              "%s: %d threads differ from the serial result", quant_type_name(t),
                              nt);
            }
            pool_free(p);
        }
        free(w);
        free(xq);
        free(serial);
        free(got);
    }
}
END_TEST

static Suite *pool_suite(void) {
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_rows_exactly_once);
    tcase_add_test(tc, test_many_tasks_and_bad_input);
    tcase_add_test(tc, test_straggler_stress);
    tcase_add_test(tc, test_limited_rows_stress);
    tcase_add_test(tc, test_park_and_wake);
    tcase_add_test(tc, test_revoked_workers);
    tcase_add_test(tc, test_max_grain);
    tcase_add_test(tc, test_chunks_on_floor);
    tcase_add_test(tc, test_matmul_bit_identical);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("pool", pool_suite)
