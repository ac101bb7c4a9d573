/* bench/roofline.c: memory read bandwidth probe for the decode roofline.
 *
 *   cc -O3 -march=native -pthread bench/roofline.c -o roofline
 *   ./roofline [THREADS=2] [MiB=1024] [PASSES=5]   -> "read_gbs 33.9"
 *   ./roofline THREADS FILE [PASSES=5]     -> the same loop over FILE's pages
 *
 * Each thread streams its own contiguous slice of one buffer (much larger
 * than the caches: default 1 GiB vs 32 MiB L3 here) with eight independent
 * accumulators, so the loop is bound by loads, not by an add chain. The
 * buffer is written once first (pages faulted in, on the reading threads'
 * node). Reports the best pass: bytes read / wall time, in GB/s (1e9 bytes).
 * Decode of a memory-bound model cannot beat weight bytes per token divided
 * by this figure.
 *
 * FILE mode streams a file's own page-cache pages instead (mapped read-only
 * and shared, populated, one untimed pass first): the pages a model's decode
 * reads, wherever they sit. A fresh anonymous buffer lands on whatever memory
 * the VM's host hands out, and that moves the figure by up to 40% from one
 * run to the next; the page cache of the model stays put. This 2-vCPU EPYC
 * VM, 2026-12-01 03:1x, three back-to-back rounds under the bench lock of
 * `roofline 2 1024`, `roofline 2 763` and a 763 MiB probe over the mapped
 * llama-3.2-1b Q4_0 file: 49.0 / 70.5 / 47.2-48.6, 57.3 / 67.4 / 47.3-48.4,
 * 49.8 / 48.1 / 47.2-48.2 GB/s (an anonymous copy of the same bytes, probed
 * in the same process: 48.2-50.5).
 */
#include <fcntl.h>
#include <unistd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
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
    const char *file = argc > 2 && (argv[2][0] < '0' || argv[2][0] > '9') ? argv[2] : NULL;
    size_t mib = argc > 2 && !file ? (size_t)atol(argv[2]) : 1024;
    int passes = argc > 3 ? atoi(argv[3]) : 5;
    if (n_threads < 1 || n_threads > 256 || mib < 1 || mib > (1 << 20) || passes < 1) {
        fprintf(stderr, "usage: roofline [THREADS] [MiB|FILE] [PASSES]\n");
        return 2;
    }
    size_t bytes = mib << 20, words;
    uint64_t *buf;
    if (file) {
        int fd = open(file, O_RDONLY);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < 64 * n_threads) {
            fprintf(stderr, "roofline: cannot open %s (or it is too small)\n", file);
            return 1;
        }
        bytes = (size_t)st.st_size & ~(size_t)63;
        buf = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (buf == MAP_FAILED) {
            fprintf(stderr, "roofline: cannot map %s\n", file);
            return 1;
        }
#ifdef MADV_POPULATE_READ
        madvise(buf, bytes, MADV_POPULATE_READ); /* best effort: the pass below faults the rest */
#endif
        words = bytes / 8;
        volatile uint64_t warm = probe_read8(buf, words & ~(size_t)7, 0);
        (void)warm;
        mib = bytes >> 20;
    } else {
        words = bytes / 8;
        buf = aligned_alloc(64, bytes);
        if (!buf) {
            fprintf(stderr, "roofline: cannot allocate %zu MiB\n", mib);
            return 1;
        }
        for (size_t i = 0; i < words; i++)
            buf[i] = i * 0x9e3779b97f4a7c15ull;
    }
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
    printf("read_gbs %.2f threads %d buffer_mib %zu%s%s passes %d (check %llx)\n", best, n_threads,
           mib, file ? " file " : "", file ? file : "", passes, (unsigned long long)(check & 0xff));
    if (file)
        munmap(buf, bytes);
    else
        free(buf);
    return 0;
}
