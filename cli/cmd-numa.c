/* cli/cmd-numa.c: `strata numa-check [MODEL.gguf] [--threads N] [--mb N]
 * [--place] [--numa MODE]`: the topology hwloc sees (restricted to what this
 * process may use), where the model file's page-cache pages sit, the
 * decision --numa would take, and the streaming read bandwidth of a buffer
 * placed on each node, read from each node's CPUs by one thread and by the
 * thread set the pool would use. --place runs the page placement on the
 * model (every span dropped and re-read, so it shows the cost even where
 * nothing needs moving) and prints its time.
 *
 * Exit: 0, 1 on a failure, 2 on bad options. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/host/numa.h"
#include "engine/host/pool.h"
#include "engine/host/sysinfo.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void print_topo(const struct host_numa_topo *t) {
    printf("topology: %d package%s, %d node%s, %d cores, %d CPUs%s%s\n", t->n_packages,
           t->n_packages == 1 ? "" : "s", t->n_nodes, t->n_nodes == 1 ? "" : "s", t->n_cores,
           t->n_pus, t->smt ? " (SMT)" : "", t->simulated ? " [simulated by hwloc]" : "");
    for (int i = 0; i < t->n_nodes; i++) {
        char c[256], p[256];
        host_cpuset_format(&t->nodes[i].cpus, c, sizeof c);
        host_cpuset_format(&t->nodes[i].primary, p, sizeof p);
        printf("  node %d: %d cores, CPUs %s, physical %s\n", t->nodes[i].os_index,
               t->nodes[i].n_cores, c[0] ? c : "(none allowed)", p[0] ? p : "-");
    }
    for (int i = 0; i < t->n_gpus; i++)
        printf("  gpu %s: node %d\n", t->gpus[i].name,
               t->gpus[i].node >= 0 ? t->nodes[t->gpus[i].node].os_index : -1);
}

/* ---- streaming read bandwidth ---- */
struct reader {
    const uint64_t *buf;
    size_t n_words;
    const struct host_cpuset *cpus;
    int rounds;
    pthread_barrier_t *bar;
    double secs;
    uint64_t sink;
    int bind_failed;
};

static void *reader_main(void *arg) {
    struct reader *r = arg;
    if (r->cpus && host_numa_ops_real()->set_affinity(r->cpus) != 0)
        r->bind_failed = 1;
    pthread_barrier_wait(r->bar);
    const double t0 = now_s();
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (int k = 0; k < r->rounds; k++)
        for (size_t i = 0; i + 4 <= r->n_words; i += 4) {
            a += r->buf[i];
            b ^= r->buf[i + 1];
            c += r->buf[i + 2];
            d ^= r->buf[i + 3];
        }
    r->secs = now_s() - t0;
    r->sink = a + b + c + d;
    return NULL;
}

/* GB/s of n threads on cpus reading buf (each its own slice), best of 3. */
static double read_gbs(const uint8_t *buf, size_t bytes, const struct host_cpuset *cpus, int n) {
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)n);
        struct reader *r = calloc((size_t)n, sizeof *r);
        pthread_t *th = calloc((size_t)n, sizeof *th);
        if (!r || !th) {
            free(r);
            free(th);
            pthread_barrier_destroy(&bar);
            return 0;
        }
        const size_t per = bytes / (size_t)n / 64 * 64;
        int started = 0;
        for (int i = 0; i < n; i++) {
            r[i] = (struct reader){.buf = (const uint64_t *)(buf + (size_t)i * per),
                                   .n_words = per / 8,
                                   .cpus = cpus,
                                   .rounds = 2,
                                   .bar = &bar};
            if (pthread_create(&th[i], NULL, reader_main, &r[i]) != 0)
                break;
            started++;
        }
        double slowest = 0;
        if (started == n) {
            for (int i = 0; i < n; i++) {
                pthread_join(th[i], NULL);
                slowest = r[i].secs > slowest ? r[i].secs : slowest;
            }
        } else {
            /* cannot happen with a working libc; the barrier would hang */
            abort();
        }
        const double gbs = slowest > 0 ? (double)per * (double)n * 2 / slowest / 1e9 : 0;
        best = gbs > best ? gbs : best;
        free(th);
        free(r);
        pthread_barrier_destroy(&bar);
    }
    return best;
}

struct toucher {
    uint8_t *buf;
    size_t bytes;
    const struct host_cpuset *cpus;
};
static void *toucher_main(void *arg) {
    struct toucher *t = arg;
    (void)host_numa_ops_real()->set_affinity(t->cpus);
    memset(t->buf, 1, t->bytes); /* first touch from the node's CPUs */
    return NULL;
}

static int bandwidth(const struct host_numa_topo *t, size_t bytes, int n_threads) {
    printf("read bandwidth (%zu MB buffer per node, placed by first touch from the node's CPUs; "
           "GB/s, best of 3):\n",
           bytes >> 20);
    for (int m = 0; m < t->n_nodes; m++) {
        if (!host_cpuset_count(&t->nodes[m].cpus))
            continue;
        uint8_t *buf =
            mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (buf == MAP_FAILED) {
            fprintf(stderr, "strata numa-check: cannot map %zu bytes: %s\n", bytes,
                    strerror(errno));
            return 1;
        }
        const int refused = host_numa_prefer(NULL, buf, bytes, t->nodes[m].os_index);
        struct toucher to = {buf, bytes, &t->nodes[m].cpus};
        pthread_t th;
        if (pthread_create(&th, NULL, toucher_main, &to) == 0)
            pthread_join(th, NULL);
        struct host_numa_share sh;
        (void)host_numa_sample(NULL, buf, bytes, 256, &sh, NULL);
        printf("  memory on node %d (%.1f%% of a sample there, by %s%s):\n", t->nodes[m].os_index,
               host_numa_share_of(&sh, t->nodes[m].os_index) * 100, sh.source,
               refused ? "; mbind refused: first touch only" : "");
        for (int r = 0; r < t->n_nodes; r++) {
            const struct host_numa_node *nd = &t->nodes[r];
            if (!host_cpuset_count(&nd->cpus))
                continue;
            const int n_set =
                n_threads < host_cpuset_count(&nd->cpus) ? n_threads : host_cpuset_count(&nd->cpus);
            const double one = read_gbs(buf, bytes, &nd->cpus, 1);
            const double set = read_gbs(buf, bytes, &nd->cpus, n_set);
            printf("    from node %d: 1 thread %.1f, %d threads %.1f\n", nd->os_index, one, n_set,
                   set);
        }
        if (t->n_nodes > 1) {
            const double all = read_gbs(buf, bytes, &t->allowed, n_threads);
            printf("    unpinned, %d threads: %.1f\n", n_threads, all);
        }
        munmap(buf, bytes);
    }
    return 0;
}

/* Where the file's page-cache pages sit; --place: drop and re-read all. */
static int model_pages(const char *path, const struct host_numa_plan *plan, int n_threads,
                       bool place) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || st.st_size <= 0) {
        fprintf(stderr, "strata numa-check: %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return 1;
    }
    const size_t len = (size_t)st.st_size;
    uint8_t *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "strata numa-check: mmap %s: %s\n", path, strerror(errno));
        close(fd);
        return 1;
    }
    struct strata_error err = {0};
    struct host_numa_share sh;
    int rc = 0;
    if (host_numa_sample(NULL, p, len, 4096, &sh, &err) < 0) {
        fprintf(stderr, "strata numa-check: %s\n", err.message);
        rc = 1;
        goto done;
    }
    printf("model %s: %.1f MB, %llu of %llu sampled pages cached (by %s)", path, (double)len / 1e6,
           (unsigned long long)sh.resident, (unsigned long long)sh.sampled, sh.source);
    for (int k = 0; k < HOST_NUMA_MAX_NODES; k++)
        if (sh.on_node[k])
            printf(", node %d %.1f%%", k, host_numa_share_of(&sh, k) * 100);
    printf("\n");
    if (place) {
        struct pool_params pp = pool_params_default();
        pp.n_threads = n_threads;
        struct pool *pool = pool_init(&pp, &err);
        struct host_numa_plan pl = *plan;
        if (!pl.n_groups) { /* nothing to bind: still measure the machinery on one group */
            pl.n_groups = 1;
            pl.logical = true;
            pl.node[0] = host_numa_share_top(&sh) >= 0 ? host_numa_share_top(&sh) : 0;
        }
        if (!pool || host_numa_apply(&pl, pool, NULL, &err) < 0) {
            fprintf(stderr, "strata numa-check: %s\n", err.message);
            pool_free(pool);
            rc = 1;
            goto done;
        }
        /* two spans a 1 GiB piece, halves for the two groups of a split */
        const size_t piece = (size_t)1 << 30;
        int n = (int)((len + piece - 1) / piece) * 2;
        struct host_numa_span *sp = calloc((size_t)n, sizeof *sp);
        int k = 0;
        for (size_t off = 0; sp && off < len; off += piece) {
            const size_t l = len - off < piece ? len - off : piece, h = l / 2 / 4096 * 4096;
            sp[k++] = (struct host_numa_span){p + off, h, off, 0};
            sp[k++] = (struct host_numa_span){p + off + h, l - h, off + h, 1};
        }
        struct host_numa_placement out;
        if (!sp || host_numa_place_file_pages(&pl, pool, NULL, fd, sp, k, true, &out, &err) < 0) {
            fprintf(stderr, "strata numa-check: place: %s\n", sp ? err.message : "out of memory");
            rc = 1;
        } else {
            printf(
                "place_file_pages (forced, %d threads): %.1f MB moved, %.1f MB filled in %.0f ms "
                "(%.2f GB/s); shares on the wanted node %.1f%% -> %.1f%%",
                n_threads, (double)out.bytes_moved / 1e6, (double)out.bytes_filled / 1e6, out.ms,
                (double)(out.bytes_moved + out.bytes_filled) / (out.ms / 1e3) / 1e9,
                out.share_before[0] * 100, out.share_after[0] * 100);
            if (pl.n_groups == 2)
                printf(" / %.1f%% -> %.1f%%", out.share_before[1] * 100, out.share_after[1] * 100);
            printf(" (by %s)\n", out.source);
        }
        free(sp);
        pool_free(pool);
    }
done:
    munmap(p, len);
    close(fd);
    return rc;
}

static void usage(FILE *f) {
    fprintf(f, "usage: strata numa-check [MODEL.gguf] [--threads N] [--mb N] [--place] "
               "[--numa auto|off|node:N|split] [--gpu I] [--no-bandwidth]\n"
               "  --gpu I: decide as if the I-th GPU listed were in use (its node wins)\n");
}

int cli_numa_main(int argc, char **argv) {
    const char *model = NULL, *mode_text = "auto";
    int n_threads = 0, mb = 256, gpu = -1;
    bool place = false, bw = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--threads") && v) {
            n_threads = atoi(v), i++;
            if (n_threads < 1 || n_threads > 1024)
                return usage(stderr), 2;
        } else if (!strcmp(a, "--mb") && v) {
            mb = atoi(v), i++;
            if (mb < 1 || mb > 1 << 16)
                return usage(stderr), 2;
        } else if (!strcmp(a, "--gpu") && v) {
            gpu = atoi(v), i++;
            if (gpu < 0 || gpu >= HOST_NUMA_MAX_GPUS)
                return usage(stderr), 2;
        } else if (!strcmp(a, "--numa") && v)
            mode_text = v, i++;
        else if (!strcmp(a, "--place"))
            place = true;
        else if (!strcmp(a, "--no-bandwidth"))
            bw = false;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return usage(stdout), 0;
        else if (a[0] != '-' && !model)
            model = a;
        else
            return usage(stderr), 2;
    }
    struct strata_error err = {0};
    struct host_numa_mode mode;
    if (host_numa_mode_parse(mode_text, &mode, &err) < 0) {
        fprintf(stderr, "strata numa-check: %s\n", err.message);
        return 2;
    }
    if (!n_threads) {
        struct sysinfo_threads th;
        n_threads = sysinfo_threads(NULL, 0, "cli", NULL, &th, NULL) == 0 ? th.n_threads : 1;
    }
    const struct host_numa_topo *t = host_numa_topo();
    if (!t) {
        fprintf(stderr, "strata numa-check: hwloc could not load the topology\n");
        return 1;
    }
    print_topo(t);
    struct host_numa_share sh = {0};
    sh.source = "none";
    if (model) {
        int fd = open(model, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0) {
            void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
            if (p != MAP_FAILED) {
                (void)host_numa_sample(NULL, p, (size_t)st.st_size, 1024, &sh, NULL);
                munmap(p, (size_t)st.st_size);
            }
        }
        if (fd >= 0)
            close(fd);
    }
    if (gpu >= t->n_gpus) {
        fprintf(stderr, "strata numa-check: --gpu %d: %d GPUs found\n", gpu, t->n_gpus);
        return 2;
    }
    const int gpu_node =
        gpu >= 0 && t->gpus[gpu].node >= 0 ? t->nodes[t->gpus[gpu].node].os_index : -1;
    struct host_numa_plan plan;
    if (host_numa_decide(t, &mode, n_threads, model ? &sh : NULL, gpu_node, &plan, &err) < 0) {
        fprintf(stderr, "strata numa-check: %s\n", err.message);
        return 2;
    }
    printf("--numa %s with %d threads: %s\n", mode_text, n_threads, plan.why);
    int rc = 0;
    if (model)
        rc = model_pages(model, &plan, n_threads, place);
    if (!rc && bw)
        rc = bandwidth(t, (size_t)mb << 20, n_threads);
    return rc;
}
