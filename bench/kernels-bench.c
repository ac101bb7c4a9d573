/* bench/kernels-bench.c: matvec / matmul throughput per type and
 * ISA, single thread and through the pool. Not a test suite (numbers depend
 * on the box); build it in a release build directory and run it by hand:
 *
 *   meson setup build-rel --buildtype=release && ninja -C build-rel bench/kernels-bench
 *   build-rel/bench/kernels-bench [MB=128] [threads=2] [isa=-1: best; 0 ref, 1 avx2, 2 avx2-vnni, 3
 * avx512, 4 avx512-vnni] [reps=5] [types=all] [ntok=8] [prefetch=the CPU's default: off | nta:BYTES
 * | t0:BYTES | t1:BYTES] (types: comma-separated ggml names, e.g. q4_0,q4_K; ntok: tokens of the
 * batched (prefill) figure, also given as G multiply-adds per second)
 *
 * Times are the best of `reps` runs (on a shared box the best run is the one
 * nobody preempted). MB=1 keeps the matrix in L2: the kernel's compute
 * ceiling; MB=128 is far beyond the 32 MB L3: the memory stream.
 * Prints, per type: GB/s of weights streamed for n_tok = 1 (decode) with one
 * thread and with `threads` threads, and tokens*rows/s for n_tok = 8. Beside
 * each decode figure, reads of the same bytes measured in the same rounds
 * (each rep runs every measurement once, so they share the minute's
 * bandwidth): "plain read" (4 mixed accumulators through the pool's row
 * chunks), "8-acc" (bench/roofline.c's loop through the pool), "probe"
 * (that loop over contiguous 1/n slices, all participants started by one
 * dispatch: bench/roofline.c on these bytes) with decode as a multiple of
 * it, and "probe+pf" (the probe with the decode kernels' prefetch). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/probe.h"
#include "engine/cpu/kernels-impl.h"
#include "engine/cpu/kernels.h"
#include "engine/host/pool.h"

static uint32_t rng = 0x9E3779B9u;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct mm_job {
    struct kern_mat *w;
    const void *xq;
    size_t xs;
    int64_t n_tok;
    float *y;
};

static void mm_rows(void *vctx, int64_t r0, int64_t r1, int worker) {
    struct mm_job *j = vctx;
    kernels_matmul(j->w, j->xq, j->xs, j->n_tok, j->y, j->w->n_rows, r0, r1);
}

/* A packed matrix split in whole 16-row groups, as engine/cpu/backend-cpu.c does. */
static void mm_groups(void *vctx, int64_t g0, int64_t g1, int worker) {
    mm_rows(vctx, g0 * KERNELS_PACK_ROWS, g1 * KERNELS_PACK_ROWS, worker);
}

/* Plain streaming read of the same bytes: the bandwidth the box gives right
 * now, to compare the kernels with (the box is shared). */
struct read_job {
    const uint8_t *data;
    size_t row_bytes;
    uint64_t sink[64];
};

static void read_rows(void *vctx, int64_t r0, int64_t r1, int worker) {
    struct read_job *j = vctx;
    const uint64_t *p = (const uint64_t *)(j->data + (size_t)r0 * j->row_bytes);
    size_t n = (size_t)(r1 - r0) * j->row_bytes / 8;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 4 <= n; i += 4) {
        a += p[i];
        b ^= p[i + 1];
        c += p[i + 2];
        d ^= p[i + 3];
    }
    j->sink[(worker & 7) * 8] += a + b + c + d;
}

/* The probe's loop (bench/probe.h, bench/roofline.c's) over the same rows,
 * through the pool's row chunks. */
static void read_rows8(void *vctx, int64_t r0, int64_t r1, int worker) {
    struct read_job *j = vctx;
    const uint64_t *p = (const uint64_t *)(j->data + (size_t)r0 * j->row_bytes);
    size_t n = (size_t)(r1 - r0) * j->row_bytes / 8 & ~(size_t)7;
    j->sink[(worker & 7) * 8] += probe_read8(p, n, 0);
}

/* read_rows8 with the decode kernels' software prefetch (every line 8 KB
 * ahead, non-temporal): what one core can stream when it does not rely on
 * the hardware prefetchers alone. */
static void read_rows8_pf(void *vctx, int64_t r0, int64_t r1, int worker) {
    struct read_job *j = vctx;
    const uint64_t *p = (const uint64_t *)(j->data + (size_t)r0 * j->row_bytes);
    size_t n = (size_t)(r1 - r0) * j->row_bytes / 8 & ~(size_t)7;
    j->sink[(worker & 7) * 8] += probe_read8(p, n, 8192);
}

/* The probe itself on the same bytes: participant w of n streams the w-th
 * contiguous 1/n of them with read_rows8's loop (pool_run_each: all start at
 * one dispatch, as the probe's threads leave one barrier). */
struct probe_job {
    struct read_job *rj;
    int64_t n_rows;
    int n;
    int pf; /* 1: read_rows8_pf */
};

static void probe_each(void *vctx, int worker) {
    struct probe_job *pj = vctx;
    int64_t r0 = pj->n_rows * worker / pj->n, r1 = pj->n_rows * (worker + 1) / pj->n;
    if (r1 > r0)
        (pj->pf ? read_rows8_pf : read_rows8)(pj->rj, r0, r1, worker);
}

static double run_probe(struct pool *p, struct read_job *j, int64_t n_rows, int n, int pf) {
    struct probe_job pj = {j, n_rows, n, pf};
    double t0 = now_s();
    pool_run_each(p, probe_each, &pj, n);
    return now_s() - t0;
}

static double run_read8(struct pool *p, struct read_job *j, int64_t n_rows) {
    double t0 = now_s();
    struct pool_task t = {.fn = read_rows8, .ctx = j, .n_rows = n_rows};
    pool_run(p, &t, 1);
    return now_s() - t0;
}

static double run_read(struct pool *p, struct read_job *j, int64_t n_rows, int reps) {
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        double t0 = now_s();
        struct pool_task t = {.fn = read_rows, .ctx = j, .n_rows = n_rows};
        pool_run(p, &t, 1);
        double dt = now_s() - t0;
        if (dt < best)
            best = dt;
    }
    return best;
}

static void noop_rows(void *ctx, int64_t r0, int64_t r1, int worker) {
    (void)ctx;
    (void)r0;
    (void)r1;
    (void)worker;
}

static void noop_each(void *ctx, int worker) {
    (void)ctx;
    (void)worker;
}

static double run_groups(struct pool *p, struct mm_job *j) {
    double t0 = now_s();
    struct pool_task t = {
        .fn = mm_groups, .ctx = j, .n_rows = j->w->n_rows / KERNELS_PACK_ROWS, .min_grain = 2};
    pool_run(p, &t, 1);
    return now_s() - t0;
}

static double run(struct pool *p, struct mm_job *j, int reps) {
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        double t0 = now_s();
        struct pool_task t = {.fn = mm_rows, .ctx = j, .n_rows = j->w->n_rows};
        pool_run(p, &t, 1);
        double dt = now_s() - t0;
        if (dt < best)
            best = dt;
    }
    return best;
}

int main(int argc, char **argv) {
    double mb = argc > 1 ? atof(argv[1]) : 128.0;
    int nt = argc > 2 ? atoi(argv[2]) : 2;
    kernels_init();
    if (argc > 3 && atoi(argv[3]) >= 0)
        kernels_isa_force((enum kernels_isa)atoi(argv[3]));
    int reps = argc > 4 ? atoi(argv[4]) : 5;
    if (reps < 1)
        reps = 1;
    int ntok = argc > 6 ? atoi(argv[6]) : 8;
    if (ntok < 1 || ntok > 4096)
        ntok = 8;
    if (argc > 7) { /* decode prefetch: off, or HINT:BYTES with HINT nta|t0|t1 */
        struct kern_prefetch pf = {KERN_PF_OFF, 0};
        char hint[8] = "";
        if (strcmp(argv[7], "off") != 0 && sscanf(argv[7], "%7[a-z0-9]:%d", hint, &pf.dist) == 2)
            for (int h = KERN_PF_NTA; h <= KERN_PF_T1; h++)
                if (!strcmp(hint, kern_prefetch_name(h)))
                    pf.hint = h;
        kern_prefetch_set(pf);
    }
    printf("isa %s, %.0f MB of weights per type, 4096 columns, decode prefetch %s %d\n",
           kernels_isa_name(kernels_isa_active()), mb, kern_prefetch_name(kern_pf.hint),
           kern_pf.dist);
    static const enum quant_type types[] = {QUANT_Q4_0, QUANT_Q8_0,  QUANT_Q4_K,   QUANT_Q5_K,
                                            QUANT_Q6_K, QUANT_MXFP4, QUANT_IQ4_NL, QUANT_F16,
                                            QUANT_BF16, QUANT_F32};
    struct pool_params pp1 = pool_params_default(), ppn = pool_params_default();
    ppn.n_threads = nt;
    struct pool *p1 = pool_init(&pp1, NULL), *pn = pool_init(&ppn, NULL);
    const int64_t n_cols = 4096;
    {
        /* Round trip of an empty dispatch that every thread joins. */
        int n = 20000;
        double t0 = now_s();
        for (int i = 0; i < n; i++)
            pool_run_each(pn, noop_each, NULL, nt);
        double each_us = (now_s() - t0) / n * 1e6;
        /* A row job of one chunk per thread doing nothing (revocable). */
        struct pool_task t = {.fn = noop_rows, .n_rows = 32 * nt, .min_grain = 32};
        t0 = now_s();
        for (int i = 0; i < n; i++)
            pool_run(pn, &t, 1);
        printf("pool: %d threads, empty dispatch %.2f us (every thread joins), %.2f us (row job) "
               "(means of %d)\n",
               nt, each_us, (now_s() - t0) / n * 1e6, n);
    }
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        enum quant_type t = types[ti];
        if (argc > 5 && !strstr(argv[5], quant_type_name(t)))
            continue;
        const struct quant_traits *tr = quant_type_traits(t);
        size_t rb = quant_row_size(t, n_cols);
        int64_t n_rows = (int64_t)(mb * 1048576.0 / (double)rb);
        uint8_t *w = malloc((size_t)n_rows * rb);
        for (size_t i = 0; i < (size_t)n_rows * rb; i++)
            w[i] = (uint8_t)rnd();
        /* keep scales finite: zero the high byte of every f16 scale field */
        if (tr->block_size > 1)
            for (int64_t b = 0; b < n_rows * (n_cols / tr->block_size); b++) {
                uint8_t *blk = w + b * tr->type_size;
                if (t == QUANT_Q6_K)
                    blk[209] = 0x20;
                else if (t == QUANT_MXFP4)
                    blk[0] = 120;
                else {
                    blk[1] = 0x20;
                    blk[3] &= 0x3f;
                }
            }
        else if (t != QUANT_F32)
            for (size_t i = 1; i < (size_t)n_rows * rb; i += 2)
                w[i] = 0x3c;
        else
            for (size_t i = 3; i < (size_t)n_rows * rb; i += 4)
                w[i] = 0x3f;
        size_t ab = kernels_act_row_size(t, n_cols);
        float *x = malloc((size_t)n_cols * sizeof(float));
        uint8_t *xq = malloc((size_t)ntok * ab);
        for (int k = 0; k < ntok; k++) {
            for (int64_t i = 0; i < n_cols; i++)
                x[i] = (float)(rnd() >> 8) / 16777216.0f - 0.5f;
            kernels_quantize_act(t, x, xq + k * ab, n_cols);
        }
        float *y = malloc((size_t)ntok * (size_t)n_rows * sizeof(float));
        struct kern_mat m = {w, t, n_rows, n_cols, rb, 0};
        struct mm_job j = {&m, xq, ab, 1, y};
        run(pn, &j, 1); /* fault the pages in */
        double bytes = (double)n_rows * (double)rb;
        struct read_job rj = {.data = w, .row_bytes = rb};
        /* One round per rep, each measurement once in turn, so all of them
         * see the same minute of the shared box's bandwidth. */
        double t1 = 1e30, tn = 1e30, rd1 = 1e30, rdn = 1e30, r8n = 1e30, pr1 = 1e30, prn = 1e30,
               pf1 = 1e30, pfn = 1e30;
        for (int rep = 0; rep < reps; rep++) {
            t1 = fmin(t1, run(p1, &j, 1));
            tn = fmin(tn, run(pn, &j, 1));
            rd1 = fmin(rd1, run_read(p1, &rj, n_rows, 1));
            rdn = fmin(rdn, run_read(pn, &rj, n_rows, 1));
            r8n = fmin(r8n, run_read8(pn, &rj, n_rows));
            pr1 = fmin(pr1, run_probe(p1, &rj, n_rows, 1, 0));
            prn = fmin(prn, run_probe(pn, &rj, n_rows, nt, 0));
            pf1 = fmin(pf1, run_probe(p1, &rj, n_rows, 1, 1));
            pfn = fmin(pfn, run_probe(pn, &rj, n_rows, nt, 1));
        }
        j.n_tok = ntok;
        double t8 = run(pn, &j, reps);
        printf("%-7s decode 1 thread %5.1f GB/s (plain read %5.1f, probe %5.1f: %.2fx, probe+pf "
               "%5.1f)  %d threads %5.1f GB/s (plain read %5.1f, 8-acc %5.1f, probe %5.1f: %.2fx, "
               "probe+pf %5.1f)  n_tok=%d %d threads %5.1f GB/s (%.0f M row-tok/s, %.0f GMAC/s)\n",
               quant_type_name(t), bytes / t1 / 1e9, bytes / rd1 / 1e9, bytes / pr1 / 1e9, pr1 / t1,
               bytes / pf1 / 1e9, nt, bytes / tn / 1e9, bytes / rdn / 1e9, bytes / r8n / 1e9,
               bytes / prn / 1e9, prn / tn, bytes / pfn / 1e9, ntok, nt, bytes / t8 / 1e9,
               ntok * (double)n_rows / t8 / 1e6, ntok * (double)n_rows * (double)n_cols / t8 / 1e9);
        const int64_t r16 = n_rows / KERNELS_PACK_ROWS * KERNELS_PACK_ROWS;
        if (r16 > 0 && kernels_pack_wanted(t, r16, n_cols)) { /* the 16-row packed layout */
            uint8_t *pk = malloc((size_t)r16 * rb);
            struct kern_mat pm = m;
            pm.n_rows = r16;
            kernels_pack(&pm, pk, 0, r16 / KERNELS_PACK_ROWS);
            pm.data = pk;
            pm.packed = 1;
            bytes = (double)r16 * (double)rb;
            struct mm_job pj = {&pm, xq, ab, 1, y};
            struct kern_mat um = m; /* the same rows in the file layout, for the A/B */
            um.n_rows = r16;
            struct mm_job uj = {&um, xq, ab, 1, y};
            run(pn, &pj, 1);
            double p1t = 1e30, pnt = 1e30, u1t = 1e30, unt = 1e30;
            for (int rep = 0; rep < reps; rep++) { /* interleaved: the same minutes */
                u1t = fmin(u1t, run(p1, &uj, 1));
                p1t = fmin(p1t, run_groups(p1, &pj));
                unt = fmin(unt, run(pn, &uj, 1));
                pnt = fmin(pnt, run_groups(pn, &pj));
            }
            pj.n_tok = ntok;
            double p8 = 1e30;
            for (int rep = 0; rep < reps; rep++)
                p8 = fmin(p8, run_groups(pn, &pj));
            printf(
                "%-7s file layout (same rows, same rounds): decode 1 thread %5.1f GB/s, %d threads "
                "%5.1f GB/s\n",
                quant_type_name(t), bytes / u1t / 1e9, nt, bytes / unt / 1e9);
            printf("%-7s packed: decode 1 thread %5.1f GB/s, %d threads %5.1f GB/s; n_tok=%d %d "
                   "threads %.0f GMAC/s\n",
                   quant_type_name(t), bytes / p1t / 1e9, nt, bytes / pnt / 1e9, ntok, nt,
                   ntok * (double)r16 * (double)n_cols / p8 / 1e9);
            free(pk);
        }
        fflush(stdout);
        free(w);
        free(x);
        free(xq);
        free(y);
    }
    pool_free(p1);
    pool_free(pn);
    return 0;
}
