/* bench/roofline.c: memory read bandwidth probe for the decode roofline.
 *
 *   cc -O3 -march=native -pthread bench/roofline.c -o roofline
 *   ./roofline [THREADS=2] [MiB=1024] [PASSES=5]   -> "read_gbs 33.9"
 *
 * Each thread streams its own contiguous slice of one buffer (much larger
 * than the caches: default 1 GiB vs 32 MiB L3 here) with eight independent
 * accumulators, so the loop is bound by loads, not by an add chain. The
 * buffer is written once first (pages faulted in, on the reading threads'
 * node). Reports the best pass: bytes read / wall time, in GB/s (1e9 bytes).
 * Decode of a memory-bound model cannot beat weight bytes per token divided
 * by this figure.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "probe.h"

struct slice {
    const uint64_t *p; /* borrowed: (n) words */
    size_t n;
    uint64_t sum; /* result, so the reads are not optimised away */
    pthread_barrier_t *bar;
    double *t_start, *t_end;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *reader(void *arg) {
    struct slice *s = arg;
    pthread_barrier_wait(s->bar);
    s->sum = probe_read8(s->p, s->n & ~(size_t)7, 0);
    pthread_barrier_wait(s->bar);
    return NULL;
}

int main(int argc, char **argv) {
    int n_threads = argc > 1 ? atoi(argv[1]) : 2;
    size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 1024;
    int passes = argc > 3 ? atoi(argv[3]) : 5;
    if (n_threads < 1 || n_threads > 256 || mib < 1 || mib > (1 << 20) || passes < 1) {
        fprintf(stderr, "usage: roofline [THREADS] [MiB] [PASSES]\n");
        return 2;
    }
    size_t bytes = mib << 20, words = bytes / 8;
    uint64_t *buf = aligned_alloc(64, bytes);
    if (!buf) {
        fprintf(stderr, "roofline: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    for (size_t i = 0; i < words; i++)
        buf[i] = i * 0x9e3779b97f4a7c15ull;
    double best = 0;
    uint64_t check = 0;
    for (int pass = 0; pass < passes; pass++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)n_threads + 1);
        struct slice *sl = calloc((size_t)n_threads, sizeof(*sl));
        pthread_t *th = calloc((size_t)n_threads, sizeof(*th));
        if (!sl || !th)
            return 1;
        size_t per = words / (size_t)n_threads;
        for (int t = 0; t < n_threads; t++) {
            sl[t] = (struct slice){buf + (size_t)t * per, per, 0, &bar, NULL, NULL};
            pthread_create(&th[t], NULL, reader, &sl[t]);
        }
        pthread_barrier_wait(&bar); /* all threads ready */
        double t0 = now_s();
        pthread_barrier_wait(&bar); /* all threads done */
        double dt = now_s() - t0;
        for (int t = 0; t < n_threads; t++) {
            pthread_join(th[t], NULL);
            check ^= sl[t].sum;
        }
        double gbs = (double)(per * (size_t)n_threads * 8) / dt / 1e9;
        if (gbs > best)
            best = gbs;
        pthread_barrier_destroy(&bar);
        free(sl);
        free(th);
    }
    printf("read_gbs %.2f threads %d buffer_mib %zu passes %d (check %llx)\n", best, n_threads, mib,
           passes, (unsigned long long)(check & 0xff));
    free(buf);
    return 0;
}
