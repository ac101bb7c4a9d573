/* bench/model-bench.c: decode and prefill throughput of the
 * forward pass (not a test suite; built as bench-model).
 *
 *   bench-model MODEL [n_threads=2] [n_decode=64] [n_prefill=64] [n_seq=1]
 *               [probe_bytes=0] [isa=auto] [prefetch=the CPU's: off | nta:B | t0:B | t1:B]
 *
 * Prints prefill tok/s (one chunk of n_prefill tokens), then decode tok/s:
 * n_decode greedy steps, n_seq sequences per step batched into one call
 * (tok/s counts every sequence's token). STRATA_REPACK=0 in the environment
 * loads without the packed K-quant layout (model_params.repack). isa forces
 * the kernels (kernels_isa_parse's names: auto, avx512-vnni, avx512, avx2-vnni, avx2,
 * ref) before the model loads, so the weight layout follows it.
 *
 * probe_bytes > 0 (the weight bytes one decode step reads; bench/cpu passes
 * its count) interleaves the decode with the roofline probe: before every
 * step, n_threads threads stream probe_bytes with bench/probe.h's loop
 * (bench/roofline.c's), at an offset that moves on each time, twice: from
 * the model file's own mapped pages and from an anonymous huge-page copy of
 * the file (the kind of memory engine/cpu/cpu-weights.c copies the weights into;
 * here it streams 3-8% faster than the page cache). The probes and the step
 * then see the same machine within milliseconds of each other, which
 * before/after probes seconds away do not on a VM whose bandwidth moves with
 * its neighbours. Prints both probes' mean rate, the mean decode step, and
 * decode/roofline = the faster probe kind's mean time / the mean step time;
 * then the fastest probe (either kind) over the fastest step. */
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench/probe.h"

#include "engine/cpu/backend-cpu.h"
#include "engine/cpu/kernels-impl.h"
#include "engine/cpu/kernels.h"
#include "engine/kv/kv.h"
#include "engine/model/model.h"
#include "engine/host/pool.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The interleaved probe: helper threads wait on a barrier, read their slice,
 * wait again; the caller reads slice 0 and times barrier to barrier. */
struct probe {
    const uint64_t *map; /* owned: munmap(map, size) */
    uint64_t *anon;      /* owned: munmap(anon_raw, size + 2 MiB); a copy of map */
    void *anon_raw;
    const uint64_t *from; /* map or anon: what the next probe reads */
    size_t size, bytes, off;
    int n_threads;
    pthread_barrier_t bar;
    pthread_t th[16];
    uint64_t sum[16];
    bool quit;
};

struct probe_arg {
    struct probe *p;
    int t;
};

static void probe_slice(struct probe *p, int t) {
    size_t words = p->bytes / 8 / (size_t)p->n_threads & ~(size_t)7;
    p->sum[t] ^= probe_read8(p->from + p->off / 8 + (size_t)t * words, words, 0);
}

static void *probe_worker(void *arg) {
    struct probe_arg *a = arg;
    for (;;) {
        pthread_barrier_wait(&a->p->bar);
        if (a->p->quit)
            break;
        probe_slice(a->p, a->t);
        pthread_barrier_wait(&a->p->bar);
    }
    return NULL;
}

/* One probe of p->bytes of `from`; returns its seconds. */
static double probe_run(struct probe *p, const uint64_t *from) {
    p->from = from;
    double t0 = now_s();
    pthread_barrier_wait(&p->bar);
    probe_slice(p, 0);
    pthread_barrier_wait(&p->bar);
    double dt = now_s() - t0;
    if (p->size >= 2 * p->bytes) /* room to move: the next probe reads other pages */
        p->off = (p->off + p->bytes) % (p->size - p->bytes) & ~(size_t)63;
    return dt;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench-model MODEL [threads] [n_decode] [n_prefill] [n_seq] "
                        "[probe_bytes] [isa]\n");
        return 2;
    }
    int n_threads = argc > 2 ? atoi(argv[2]) : 2;
    int n_decode = argc > 3 ? atoi(argv[3]) : 64;
    int n_prefill = argc > 4 ? atoi(argv[4]) : 64;
    int n_seq = argc > 5 ? atoi(argv[5]) : 1;
    size_t probe_bytes = argc > 6 ? (size_t)atoll(argv[6]) : 0;
    enum kernels_isa isa;
    if (kernels_isa_parse(argc > 7 ? argv[7] : "auto", &isa) < 0) {
        fprintf(stderr, "bench-model: unknown isa '%s'\n", argv[7]);
        return 2;
    }
    kernels_isa_force(isa);
    if (argc > 8) { /* decode prefetch: off, or HINT:BYTES with HINT nta|t0|t1 */
        struct kern_prefetch pf = {KERN_PF_OFF, 0};
        char hint[8] = "";
        if (strcmp(argv[8], "off") != 0 && sscanf(argv[8], "%7[a-z0-9]:%d", hint, &pf.dist) == 2)
            for (int h = KERN_PF_NTA; h <= KERN_PF_T1; h++)
                if (!strcmp(hint, kern_prefetch_name(h)))
                    pf.hint = h;
        kern_prefetch_set(pf);
    }
    if (n_threads < 1 || n_threads > 16 || n_decode < 1 || n_prefill < 1 || n_seq < 1 ||
        n_seq > 64) {
        fprintf(stderr, "bench-model: bad arguments\n");
        return 2;
    }
    struct strata_error err = {0};
    struct pool_params pp = pool_params_default();
    pp.n_threads = n_threads;
    struct pool *pool = pool_init(&pp, &err);
    struct backend_cpu_params cp = backend_cpu_params_default();
    cp.pool = pool;
    struct backend *be = pool ? backend_cpu_init(&cp, &err) : NULL;
    struct model_params mp = model_params_default();
    mp.backend = be;
    mp.pool = pool;
    const char *rp = getenv("STRATA_REPACK"); /* A/B of the packed layout: STRATA_REPACK=0 */
    mp.repack = !(rp && rp[0] == '0');
    mp.n_ctx_max = n_prefill + n_decode + 8;
    mp.n_batch_max = n_prefill > n_seq ? n_prefill : n_seq;
    struct model *m = be ? model_load(argv[1], &mp, &err) : NULL;
    struct kv_cache *kv = m ? model_kv_init(m, n_seq, 0, &err) : NULL;
    if (!kv) {
        fprintf(stderr, "bench-model: %s\n", err.message);
        model_free(m);
        backend_free(be);
        pool_free(pool);
        return 1;
    }
    const int V = model_n_vocab(m);
    float *logits = malloc((size_t)n_seq * V * sizeof(float));
    struct model_batch_entry *e = malloc((size_t)mp.n_batch_max * sizeof *e);
    int32_t bos = model_hparams(m)->bos_token_id >= 0 ? model_hparams(m)->bos_token_id : 0;
    int rc = 0;
    /* prefill: seq 0, one chunk */
    for (int i = 0; i < n_prefill; i++)
        e[i] = (struct model_batch_entry){0, i, (bos + i * 7) % V, i == n_prefill - 1};
    double t0 = now_s();
    rc |= model_forward(m, kv, &(struct model_batch){e, n_prefill}, logits, &err);
    double t_pre = now_s() - t0;
    /* decode: every sequence continues from its own prefix */
    int32_t tok[64];
    for (int s = 0; s < n_seq; s++) {
        if (s > 0)
            rc |= kv_seq_copy(kv, s, 0, n_prefill, &err);
        tok[s] = argmax(logits, V);
    }
    static struct probe pr;
    static struct probe_arg pa[16];
    if (probe_bytes > 0) {
        int fd = open(argv[1], O_RDONLY);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0 || (size_t)st.st_size < probe_bytes ||
            probe_bytes < (size_t)64 * n_threads) {
            fprintf(stderr, "bench-model: probe_bytes must be at most the file's size\n");
            return 2;
        }
        pr.size = (size_t)st.st_size & ~(size_t)63;
        pr.bytes = probe_bytes & ~(size_t)63;
        pr.n_threads = n_threads;
        pr.map = mmap(NULL, pr.size, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (pr.map == MAP_FAILED)
            return 1;
        pthread_barrier_init(&pr.bar, NULL, (unsigned)n_threads);
        for (int t = 1; t < n_threads; t++) {
            pa[t] = (struct probe_arg){&pr, t};
            pthread_create(&pr.th[t], NULL, probe_worker, &pa[t]);
        }
        /* the same bytes in anonymous memory with huge pages: the kind the
         * packed weights live in (engine/cpu/cpu-weights.c), which streams faster
         * than page-cache pages here; the roofline takes the faster probe */
        const size_t huge = (size_t)2 << 20;
        pr.anon_raw =
            mmap(NULL, pr.size + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (pr.anon_raw == MAP_FAILED)
            return 1;
        pr.anon = (uint64_t *)(((uintptr_t)pr.anon_raw + huge - 1) & ~(uintptr_t)(huge - 1));
        madvise(pr.anon, pr.size, MADV_HUGEPAGE);
        memcpy(pr.anon, pr.map, pr.size);
        for (size_t i = 0; i < pr.size / pr.bytes + 1; i++) { /* fault the whole file in */
            probe_run(&pr, pr.map);
            probe_run(&pr, pr.anon);
        }
    }
    double t_dec = 0, t_probe = 0, t_anon = 0;
    double b_dec = 1e30, b_probe = 1e30; /* fastest step, fastest probe of either kind */
    for (int step = 0; step < n_decode && rc == 0; step++) {
        if (probe_bytes > 0) { /* both kinds, in turn first */
            const size_t off = pr.off;
            double tf, ta;
            if (step & 1) {
                tf = probe_run(&pr, pr.map);
                pr.off = off;
                ta = probe_run(&pr, pr.anon);
            } else {
                ta = probe_run(&pr, pr.anon);
                pr.off = off;
                tf = probe_run(&pr, pr.map);
            }
            t_probe += tf, t_anon += ta;
            b_probe = fmin(b_probe, fmin(tf, ta));
        }
        for (int s = 0; s < n_seq; s++)
            e[s] = (struct model_batch_entry){s, n_prefill + step, tok[s], true};
        t0 = now_s();
        rc |= model_forward(m, kv, &(struct model_batch){e, n_seq}, logits, &err);
        for (int s = 0; s < n_seq; s++)
            tok[s] = argmax(logits + (size_t)s * V, V);
        t_dec += now_s() - t0;
        b_dec = fmin(b_dec, now_s() - t0);
    }
    if (probe_bytes > 0) {
        pr.quit = true;
        pthread_barrier_wait(&pr.bar);
        for (int t = 1; t < n_threads; t++)
            pthread_join(pr.th[t], NULL);
        pthread_barrier_destroy(&pr.bar);
        munmap((void *)pr.map, pr.size);
        munmap(pr.anon_raw, pr.size + ((size_t)2 << 20));
        const double best = t_probe < t_anon ? t_probe : t_anon;
        if (rc == 0)
            printf("interleaved probe: file %.2f GB/s, anonymous %.2f GB/s (%.2f / %.2f ms per %zu "
                   "bytes), decode %.2f ms/step, decode/roofline %.1f%%; fastest probe %.2f ms, "
                   "fastest step %.2f ms: %.1f%%\n",
                   (double)pr.bytes * n_decode / t_probe / 1e9,
                   (double)pr.bytes * n_decode / t_anon / 1e9, t_probe * 1e3 / n_decode,
                   t_anon * 1e3 / n_decode, pr.bytes, t_dec * 1e3 / n_decode, 100.0 * best / t_dec,
                   b_probe * 1e3, b_dec * 1e3, 100.0 * b_probe / b_dec);
    }
    if (rc)
        fprintf(stderr, "bench-model: %s\n", err.message);
    else
        printf("%s arch=%s threads=%d isa=%s weights=%s prefill %d tok: %.1f tok/s; decode %d "
               "steps x %d seq: %.2f tok/s (%.2f ms/step)\n",
               argv[1], model_arch_name(m), n_threads, kernels_isa_name(kernels_isa_active()),
               model_weights_layout(m), n_prefill, n_prefill / t_pre, n_decode, n_seq,
               (double)n_decode * n_seq / t_dec, t_dec * 1e3 / n_decode);
    free(e);
    free(logits);
    kv_free(kv);
    model_free(m);
    backend_free(be);
    pool_free(pool);
    return rc ? 1 : 0;
}
