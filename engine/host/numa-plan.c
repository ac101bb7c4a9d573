/* engine/host/numa-plan.c: the --numa decision, the kernel calls behind
 * struct host_numa_ops, and the page-node sampler (numa.h). */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine/host/numa.h"

/* ---- the real calls ---- */

static long real_move_pages(unsigned long count, void **pages, int *status) {
#ifdef SYS_move_pages
    return syscall(SYS_move_pages, 0, count, pages, NULL, status, 0);
#else
    (void)count, (void)pages, (void)status;
    errno = ENOSYS;
    return -1;
#endif
}

static long real_mbind_preferred(void *addr, unsigned long len, int os_node) {
#ifdef SYS_mbind
    unsigned long mask[HOST_NUMA_MAX_NODES / 64 + 1] = {0};
    if (os_node < 0 || os_node >= HOST_NUMA_MAX_NODES) {
        errno = EINVAL;
        return -1;
    }
    mask[os_node / 64] |= 1UL << (os_node % 64);
    /* MPOL_PREFERRED = 1 (linux/mempolicy.h); maxnode counts bits + 1 */
    return syscall(SYS_mbind, addr, len, 1, mask, (unsigned long)HOST_NUMA_MAX_NODES + 1, 0);
#else
    (void)addr, (void)len, (void)os_node;
    errno = ENOSYS;
    return -1;
#endif
}

static int real_set_affinity(const struct host_cpuset *cpus) {
    cpu_set_t *set = CPU_ALLOC(HOST_NUMA_MAX_CPUS);
    if (!set) {
        errno = ENOMEM;
        return -1;
    }
    size_t sz = CPU_ALLOC_SIZE(HOST_NUMA_MAX_CPUS);
    CPU_ZERO_S(sz, set);
    for (int c = 0; c < HOST_NUMA_MAX_CPUS; c++)
        if (host_cpuset_has(cpus, c))
            CPU_SET_S(c, sz, set);
    int rc = sched_setaffinity(0, sz, set);
    CPU_FREE(set);
    return rc;
}

static int real_mincore(void *addr, size_t len, unsigned char *vec) {
    return mincore(addr, len, vec);
}

static FILE *real_open_numa_maps(void) {
    return fopen("/proc/self/numa_maps", "re");
}

static const struct host_numa_ops real_ops = {
    .move_pages = real_move_pages,
    .mbind_preferred = real_mbind_preferred,
    .set_affinity = real_set_affinity,
    .mincore = real_mincore,
    .open_numa_maps = real_open_numa_maps,
};

const struct host_numa_ops *host_numa_ops_real(void) {
    return &real_ops;
}

/* ---- numa_maps ---- */

int host_numa_maps_line(const char *line, uint64_t *start, uint64_t *pages, int max_nodes,
                        uint64_t *other, struct strata_error *err) {
    char *end;
    errno = 0;
    unsigned long long a = strtoull(line, &end, 16);
    if (end == line || errno || (*end != ' ' && *end != '\t'))
        return strata_error_set(err, STRATA_E_FORMAT, "numa_maps: no address in '%.40s'", line);
    *start = a;
    /* fields are space separated; "N<k>=<pages>" per node */
    for (const char *p = end; *p;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (p[0] == 'N' && p[1] >= '0' && p[1] <= '9') {
            char *q;
            unsigned long k = strtoul(p + 1, &q, 10);
            if (*q == '=') {
                unsigned long long n = strtoull(q + 1, &q, 10);
                if (k < (unsigned long)max_nodes)
                    pages[k] += n;
                else if (other)
                    *other += n;
            }
            p = q;
        }
        while (*p && *p != ' ' && *p != '\t')
            p++;
    }
    return 0;
}

/* numa_maps' counts of every mapping [lo, hi) touches: the mapping that
 * starts at or before lo and every one starting inside. */
static int sample_numa_maps(const struct host_numa_ops *ops, uintptr_t lo, uintptr_t hi,
                            struct host_numa_share *out, struct strata_error *err) {
    FILE *f = ops->open_numa_maps();
    if (!f)
        return strata_error_set(err, STRATA_E_UNSUPPORTED,
                                "numa: move_pages refused and numa_maps unreadable: %s",
                                strerror(errno));
    char line[4096];
    uint64_t best_start = 0, best[HOST_NUMA_MAX_NODES] = {0}, inside[HOST_NUMA_MAX_NODES] = {0};
    bool have_best = false;
    while (fgets(line, sizeof line, f)) {
        uint64_t start, pg[HOST_NUMA_MAX_NODES] = {0};
        if (host_numa_maps_line(line, &start, pg, HOST_NUMA_MAX_NODES, NULL, NULL) < 0)
            continue;
        if (start <= lo && (!have_best || start >= best_start)) {
            have_best = true;
            best_start = start;
            memcpy(best, pg, sizeof best);
        } else if (start > lo && start < hi) {
            for (int k = 0; k < HOST_NUMA_MAX_NODES; k++)
                inside[k] += pg[k];
        }
    }
    fclose(f);
    uint64_t total = 0;
    for (int k = 0; k < HOST_NUMA_MAX_NODES; k++) {
        out->on_node[k] = best[k] + inside[k];
        total += out->on_node[k];
    }
    out->resident = total;
    out->source = "numa_maps";
    return 0;
}

int host_numa_sample(const struct host_numa_ops *ops, const void *addr, size_t len, int n_samples,
                     struct host_numa_share *out, struct strata_error *err) {
    if (!ops)
        ops = &real_ops;
    memset(out, 0, sizeof *out);
    out->source = "none";
    const long pg = sysconf(_SC_PAGESIZE);
    if (!addr || !len || pg <= 0)
        return 0;
    const uintptr_t lo = (uintptr_t)addr & ~(uintptr_t)(pg - 1), hi = (uintptr_t)addr + len;
    const uint64_t n_pages = (hi - lo + (uintptr_t)pg - 1) / (uintptr_t)pg;
    uint64_t n = n_samples < 1 ? 1 : (uint64_t)n_samples;
    if (n > n_pages)
        n = n_pages;
    void **pages = malloc(n * sizeof *pages);
    int *status = malloc(n * sizeof *status);
    int rc = 0;
    if (!pages || !status) {
        rc =
            strata_error_set(err, STRATA_E_NOMEM, "numa: out of memory for %" PRIu64 " samples", n);
        goto done;
    }
    uint64_t n_res = 0;
    for (uint64_t i = 0; i < n; i++) {
        void *p = (void *)(lo + (uintptr_t)(i * n_pages / n) * (uintptr_t)pg);
        unsigned char v = 0;
        if (ops->mincore(p, (size_t)pg, &v) == 0 && (v & 1)) {
            /* move_pages answers only for pages this process maps (-ENOENT
             * else): a read maps a cached page without I/O or allocation,
             * so it stays on its node; pages not cached are never touched */
            (void)*(const volatile uint8_t *)p;
            pages[n_res++] = p;
        }
    }
    out->sampled = n;
    if (!n_res)
        goto done;
    if (ops->move_pages(n_res, pages, status) == 0) {
        out->source = "move_pages";
        for (uint64_t i = 0; i < n_res; i++)
            if (status[i] >= 0 && status[i] < HOST_NUMA_MAX_NODES) {
                out->on_node[status[i]]++;
                out->resident++;
            }
        goto done;
    }
    if (errno != EPERM && errno != ENOSYS && errno != EACCES) {
        rc = strata_error_set(err, STRATA_E_IO, "numa: move_pages: %s", strerror(errno));
        goto done;
    }
    /* refused (a container's seccomp): the kernel's per-mapping counts */
    rc = sample_numa_maps(ops, lo, hi, out, err);
done:
    free(status);
    free(pages);
    return rc;
}

double host_numa_share_of(const struct host_numa_share *s, int os_node) {
    if (!s || !s->resident || os_node < 0 || os_node >= HOST_NUMA_MAX_NODES)
        return 0;
    return (double)s->on_node[os_node] / (double)s->resident;
}

int host_numa_share_top(const struct host_numa_share *s) {
    int best = -1;
    for (int k = 0; s && s->resident && k < HOST_NUMA_MAX_NODES; k++)
        if (s->on_node[k] && (best < 0 || s->on_node[k] > s->on_node[best]))
            best = k;
    return best;
}

/* ---- the decision ---- */

int host_numa_mode_parse(const char *text, struct host_numa_mode *out, struct strata_error *err) {
    *out = (struct host_numa_mode){HOST_NUMA_AUTO, -1};
    if (!text || !*text || !strcmp(text, "auto"))
        return 0;
    if (!strcmp(text, "off")) {
        out->kind = HOST_NUMA_OFF;
        return 0;
    }
    if (!strcmp(text, "split")) {
        out->kind = HOST_NUMA_SPLIT;
        return 0;
    }
    if (!strncmp(text, "node:", 5) && text[5] >= '0' && text[5] <= '9') {
        char *end;
        long n = strtol(text + 5, &end, 10);
        if (!*end && n < HOST_NUMA_MAX_NODES) {
            out->kind = HOST_NUMA_NODE;
            out->node = (int)n;
            return 0;
        }
    }
    return strata_error_set(err, STRATA_E_CONFIG,
                            "--numa '%.40s': expected auto, off, node:N (N < %d) or split", text,
                            HOST_NUMA_MAX_NODES);
}

const char *host_numa_mode_name(enum host_numa_mode_kind k) {
    switch (k) {
    case HOST_NUMA_OFF:
        return "off";
    case HOST_NUMA_AUTO:
        return "auto";
    case HOST_NUMA_NODE:
        return "node";
    case HOST_NUMA_SPLIT:
        return "split";
    }
    return "?";
}

/* The CPUs for n threads on node i: its physical cores (first SMT sibling)
 * when there are enough, else all its CPUs; false when even those are
 * fewer than n (binding would oversubscribe). */
static bool node_mask(const struct host_numa_topo *t, int i, int n, struct host_cpuset *out,
                      const char **which) {
    const struct host_numa_node *nd = &t->nodes[i];
    if (host_cpuset_count(&nd->primary) >= n) {
        *out = nd->primary;
        *which = "physical cores";
        return true;
    }
    if (host_cpuset_count(&nd->cpus) >= n) {
        *out = nd->cpus;
        *which = "all CPUs (SMT siblings too)";
        return true;
    }
    return false;
}

static int bind_one(const struct host_numa_topo *t, int i, int n_threads, const char *reason,
                    struct host_numa_plan *out, bool hard, struct strata_error *err) {
    const char *which;
    char cl[64];
    if (!node_mask(t, i, n_threads, &out->cpus[0], &which)) {
        if (hard)
            return strata_error_set(
                err, STRATA_E_CONFIG, "--numa: node %d has %d allowed CPUs for %d threads",
                t->nodes[i].os_index, host_cpuset_count(&t->nodes[i].cpus), n_threads);
        snprintf(out->why, sizeof out->why,
                 "%s, but node %d has %d allowed CPUs for %d threads: nothing bound", reason,
                 t->nodes[i].os_index, host_cpuset_count(&t->nodes[i].cpus), n_threads);
        return 0;
    }
    out->n_groups = 1;
    out->node[0] = t->nodes[i].os_index;
    out->threads[0] = n_threads;
    host_cpuset_format(&out->cpus[0], cl, sizeof cl);
    snprintf(out->why, sizeof out->why, "%s: %d threads on node %d, %s %s", reason, n_threads,
             out->node[0], which, cl);
    return 0;
}

int host_numa_decide(const struct host_numa_topo *t, const struct host_numa_mode *mode,
                     int n_threads, const struct host_numa_share *share, int gpu_node,
                     struct host_numa_plan *out, struct strata_error *err) {
    memset(out, 0, sizeof *out);
    out->mode = *mode;
    out->node[0] = out->node[1] = -1;
    if (n_threads < 1)
        n_threads = 1;
    int usable = 0; /* nodes with allowed CPUs */
    for (int i = 0; t && i < t->n_nodes; i++)
        usable += host_cpuset_count(&t->nodes[i].cpus) > 0;
    if (mode->kind == HOST_NUMA_OFF) {
        snprintf(out->why, sizeof out->why, "--numa off: nothing bound");
        return 0;
    }
    if (!t) {
        snprintf(out->why, sizeof out->why, "no topology (hwloc failed): nothing bound");
        return mode->kind == HOST_NUMA_NODE
                   ? strata_error_set(err, STRATA_E_CONFIG, "--numa node:%d: no topology",
                                      mode->node)
                   : 0;
    }
    if (mode->kind == HOST_NUMA_NODE) {
        int i = host_numa_node_index(t, mode->node);
        if (i < 0 || !host_cpuset_count(&t->nodes[i].cpus))
            return strata_error_set(err, STRATA_E_CONFIG,
                                    "--numa node:%d: no such node with CPUs this process may use "
                                    "(%d nodes)",
                                    mode->node, t->n_nodes);
        if (usable < 2) {
            snprintf(out->why, sizeof out->why, "1 node: nothing to bind");
            return 0;
        }
        return bind_one(t, i, n_threads, "--numa node", out, true, err);
    }
    if (mode->kind == HOST_NUMA_SPLIT) {
        if (n_threads < 2) {
            snprintf(out->why, sizeof out->why, "split needs 2 threads, has %d: nothing bound",
                     n_threads);
            return 0;
        }
        out->n_groups = 2;
        out->threads[1] = n_threads / 2; /* odd workers */
        out->threads[0] = n_threads - out->threads[1];
        if (usable < 2) {
            /* one node: the split machinery runs (two row groups, each half
             * of the threads), nothing is bound and nothing moves */
            out->logical = true;
            out->node[0] = out->node[1] = t->n_nodes ? t->nodes[0].os_index : 0;
            snprintf(out->why, sizeof out->why,
                     "1 node: nothing to bind; split runs two logical halves (%d + %d threads) "
                     "on node %d",
                     out->threads[0], out->threads[1], out->node[0]);
            return 0;
        }
        /* home: the node the weights mostly sit on (else the first usable);
         * far: the other node with the most CPUs */
        int home = share ? host_numa_node_index(t, host_numa_share_top(share)) : -1;
        if (home < 0 || !host_cpuset_count(&t->nodes[home].cpus))
            for (home = 0; !host_cpuset_count(&t->nodes[home].cpus); home++)
                ;
        int far = -1;
        for (int i = 0; i < t->n_nodes; i++)
            if (i != home && (far < 0 || host_cpuset_count(&t->nodes[i].cpus) >
                                             host_cpuset_count(&t->nodes[far].cpus)))
                far = i;
        const char *w0, *w1;
        if (!node_mask(t, home, out->threads[0], &out->cpus[0], &w0) ||
            !node_mask(t, far, out->threads[1], &out->cpus[1], &w1))
            return strata_error_set(
                err, STRATA_E_CONFIG, "--numa split: nodes %d and %d lack CPUs for %d + %d threads",
                t->nodes[home].os_index, t->nodes[far].os_index, out->threads[0], out->threads[1]);
        out->node[0] = t->nodes[home].os_index;
        out->node[1] = t->nodes[far].os_index;
        snprintf(out->why, sizeof out->why,
                 "--numa split: %d threads on node %d (%s), %d on node %d (%s); each side "
                 "computes the rows on its node",
                 out->threads[0], out->node[0], w0, out->threads[1], out->node[1], w1);
        return 0;
    }
    /* auto */
    if (usable < 2) {
        snprintf(out->why, sizeof out->why, "1 node: nothing to bind");
        return 0;
    }
    char reason[120];
    if (gpu_node >= 0) {
        int i = host_numa_node_index(t, gpu_node);
        if (i >= 0 && host_cpuset_count(&t->nodes[i].cpus)) {
            snprintf(reason, sizeof reason, "auto: the GPU in use is local to node %d", gpu_node);
            return bind_one(t, i, n_threads, reason, out, false, err);
        }
    }
    int top = share ? host_numa_share_top(share) : -1;
    if (top < 0) {
        /* nothing cached yet: the load's first touch decides where the
         * pages go, so bind to the node with the most CPUs and let it */
        int best = -1;
        for (int i = 0; i < t->n_nodes; i++)
            if (best < 0 ||
                host_cpuset_count(&t->nodes[i].cpus) > host_cpuset_count(&t->nodes[best].cpus))
                best = i;
        snprintf(reason, sizeof reason,
                 "auto: the weights' pages are not cached yet, the load places them on node %d "
                 "(most CPUs)",
                 t->nodes[best].os_index);
        return bind_one(t, best, n_threads, reason, out, false, err);
    }
    double sh = host_numa_share_of(share, top);
    if (sh < HOST_NUMA_HOME_SHARE) {
        snprintf(out->why, sizeof out->why,
                 "auto: %d nodes, weights spread (%.1f%% on node %d, under %.0f%%): nothing bound",
                 usable, sh * 100, top, HOST_NUMA_HOME_SHARE * 100);
        return 0;
    }
    int i = host_numa_node_index(t, top);
    if (i < 0)
        return snprintf(out->why, sizeof out->why, "auto: weights on unknown node %d", top), 0;
    snprintf(reason, sizeof reason, "auto: %.1f%% of the weights' sampled pages on node %d",
             sh * 100, top);
    return bind_one(t, i, n_threads, reason, out, false, err);
}

int host_numa_group_of(const struct host_numa_plan *plan, int worker) {
    return plan && plan->n_groups == 2 && worker % 2 == 1 ? 1 : 0;
}
