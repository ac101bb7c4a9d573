/* engine/host/sysinfo.c: CPU and memory limits, container aware (see sysinfo.h).
 *
 * Files read (all under params->root, all optional):
 *   proc/self/cgroup     "0::/a/b" (v2), "4:memory:/a/b" or "1:cpu,cpuacct:/a" (v1)
 *   proc/self/mountinfo  "31 23 0:28 /mroot /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory"
 *   <mount>/<path>/cpu.max                  v2: "max 100000" or "150000 100000" (us per period)
 *   <mount>/<path>/memory.max               v2: "max" or bytes
 *   <mount>/<path>/cpu.cfs_quota_us + _period_us   v1: -1 = no quota
 *   <mount>/<path>/memory.limit_in_bytes    v1: 9223372036854771712 (page-rounded
 *                                           INT64_MAX) = no limit
 *   proc/meminfo         "MemAvailable:   22972320 kB"
 */
#include "engine/host/sysinfo.h"

#include <errno.h>
#include <stdbool.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SYSINFO_PATH_MAX 4096
/* v1 reports "no limit" as INT64_MAX rounded down to a page; anything at or
 * above 2^60 bytes (1 EiB) is no real limit. */
#define SYSINFO_MEM_UNLIMITED (1LL << 60)

struct sysinfo_params sysinfo_params_default(void) {
    return (struct sysinfo_params){"/", 0};
}

/* out = root + path ("/" + "/proc/x" -> "/proc/x"). Returns -1 if too long. */
static int join(char *out, size_t cap, const char *root, const char *path) {
    size_t rl = strlen(root);
    while (rl > 0 && root[rl - 1] == '/')
        rl--;
    int n = snprintf(out, cap, "%.*s%s%s", (int)rl, root, path[0] == '/' ? "" : "/", path);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* fopen(root + path, "r"); NULL if the joined path is too long or the open fails. */
static FILE *open_rooted(const char *root, const char *path) {
    char full[SYSINFO_PATH_MAX];
    return join(full, sizeof(full), root, path) ? NULL : fopen(full, "r");
}

/* Reads at most cap-1 bytes of a small file into buf (NUL-terminated). */
static int read_small(const char *path, char *buf, size_t cap) {
    FILE *fp = fopen(path, "r");
    if (!fp)
        return -1;
    size_t n = fread(buf, 1, cap - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    return 0;
}

/* Parses a decimal integer (optionally negative) with trailing whitespace. */
static int parse_ll(const char *s, long long *out) {
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno)
        return -1;
    while (*end == ' ' || *end == '\n' || *end == '\t')
        end++;
    if (*end)
        return -1;
    *out = v;
    return 0;
}

double sysinfo_parse_cpu_max(const char *text) {
    char q[32], p[32];
    if (!text || sscanf(text, "%31s %31s", q, p) < 1)
        return -1;
    if (!strcmp(q, "max"))
        return 0;
    long long quota = 0, period = 100000; /* the kernel's default period */
    if (parse_ll(q, &quota) || quota <= 0)
        return -1;
    if (sscanf(text, "%31s %31s", q, p) == 2 && (parse_ll(p, &period) || period <= 0))
        return -1;
    return (double)quota / (double)period;
}

/* One cgroup hierarchy: where it is mounted and which cgroup path we are in. */
struct hier {
    char mount[SYSINFO_PATH_MAX]; /* mount point, root-prefixed; "" = not found */
    char mroot[SYSINFO_PATH_MAX]; /* the mount's root inside the hierarchy ("/" usually) */
    char path[SYSINFO_PATH_MAX];  /* our cgroup path from proc/self/cgroup; "" = not listed */
};

struct cgroups {
    struct hier v2, cpu, mem;
};

static bool has_token(const char *list, const char *tok) {
    size_t n = strlen(tok);
    for (const char *s = list; s && *s;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == n && !strncmp(s, tok, n))
            return true;
        s = e ? e + 1 : NULL;
    }
    return false;
}

static void copy_str(char *dst, size_t cap, const char *src) {
    snprintf(dst, cap, "%s", src);
}

static void read_proc_cgroup(const char *root, struct cgroups *cg) {
    char line[SYSINFO_PATH_MAX];
    FILE *fp = open_rooted(root, "/proc/self/cgroup");
    if (!fp)
        return;
    while (fgets(line, sizeof(line), fp)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/')
            continue;
        *c1 = *c2 = '\0';
        const char *ctrls = c1 + 1, *cpath = c2 + 1;
        if (!strcmp(line, "0") && !*ctrls)
            copy_str(cg->v2.path, sizeof(cg->v2.path), cpath);
        if (has_token(ctrls, "cpu"))
            copy_str(cg->cpu.path, sizeof(cg->cpu.path), cpath);
        if (has_token(ctrls, "memory"))
            copy_str(cg->mem.path, sizeof(cg->mem.path), cpath);
    }
    fclose(fp);
}

static void set_mount(struct hier *h, const char *root, const char *mroot, const char *mpoint) {
    if (h->mount[0])
        return; /* first mount wins (later ones are usually bind mounts) */
    if (join(h->mount, sizeof(h->mount), root, mpoint))
        h->mount[0] = '\0';
    copy_str(h->mroot, sizeof(h->mroot), mroot);
}

static void read_mountinfo(const char *root, struct cgroups *cg) {
    char line[SYSINFO_PATH_MAX];
    FILE *fp = open_rooted(root, "/proc/self/mountinfo");
    if (!fp)
        return;
    while (fgets(line, sizeof(line), fp)) {
        line[strcspn(line, "\n")] = '\0';
        /* fields: id parent maj:min root mountpoint options [optional...] - fstype source super */
        char *f[8] = {0};
        int nf = 0;
        char *save = NULL;
        for (char *t = strtok_r(line, " ", &save); t && nf < 5; t = strtok_r(NULL, " ", &save))
            f[nf++] = t;
        if (nf < 5)
            continue;
        char *t = NULL;
        while ((t = strtok_r(NULL, " ", &save)) && strcmp(t, "-"))
            ;
        char *fstype = t ? strtok_r(NULL, " ", &save) : NULL;
        char *source = fstype ? strtok_r(NULL, " ", &save) : NULL;
        char *super = source ? strtok_r(NULL, " ", &save) : NULL;
        if (!fstype)
            continue;
        if (!strcmp(fstype, "cgroup2")) {
            set_mount(&cg->v2, root, f[3], f[4]);
        } else if (!strcmp(fstype, "cgroup") && super) {
            if (has_token(super, "cpu"))
                set_mount(&cg->cpu, root, f[3], f[4]);
            if (has_token(super, "memory"))
                set_mount(&cg->mem, root, f[3], f[4]);
        }
    }
    fclose(fp);
}

/* The directory of our cgroup in hierarchy h: mount + (path minus mroot).
 * When the path is not under the mount's root (a cgroup namespace shows
 * "/"), the mount point itself is our cgroup's view. */
static int cgroup_dir(const struct hier *h, char *out, size_t cap) {
    if (!h->mount[0] || !h->path[0])
        return -1;
    const char *rel = h->path;
    size_t ml = strlen(h->mroot);
    if (strcmp(h->mroot, "/") && !strncmp(rel, h->mroot, ml) && (!rel[ml] || rel[ml] == '/'))
        rel += ml;
    else if (strcmp(h->mroot, "/"))
        rel = "";
    int n = snprintf(out, cap, "%s%s", h->mount, rel);
    if (n < 0 || (size_t)n >= cap)
        return -1;
    size_t len = strlen(out);
    while (len > strlen(h->mount) && out[len - 1] == '/')
        out[--len] = '\0';
    return 0;
}

/* Visits dir and each ancestor down to (and including) the mount point.
 * visit returns nothing; it folds a limit into ctx. */
static void walk_up(const struct hier *h, void (*visit)(const char *dir, void *ctx), void *ctx) {
    char dir[SYSINFO_PATH_MAX];
    if (cgroup_dir(h, dir, sizeof(dir)))
        return;
    size_t mlen = strlen(h->mount);
    for (;;) {
        visit(dir, ctx);
        size_t len = strlen(dir);
        if (len <= mlen)
            break;
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < mlen)
            break;
        *slash = '\0';
        if (strlen(dir) < mlen) /* never above the mount point */
            break;
    }
}

static int read_in(const char *dir, const char *name, char *buf, size_t cap) {
    char path[SYSINFO_PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof(path))
        return -1;
    return read_small(path, buf, cap);
}

struct cpu_fold {
    double quota; /* smallest quota/period seen, CPUs; 0 none */
    int n_cpus;   /* smallest ceil(quota/period) seen; 0 none */
};

static void fold_cpu(struct cpu_fold *c, long long quota, long long period) {
    if (quota <= 0 || period <= 0)
        return;
    double q = (double)quota / (double)period;
    long long n = (quota + period - 1) / period;
    if (n > 1 << 20)
        n = 1 << 20;
    if (c->quota == 0 || q < c->quota)
        c->quota = q;
    if (c->n_cpus == 0 || n < c->n_cpus)
        c->n_cpus = (int)n;
}

static void visit_cpu_v2(const char *dir, void *ctx) {
    char buf[128];
    if (read_in(dir, "cpu.max", buf, sizeof(buf)))
        return;
    char q[32] = "", p[32] = "";
    long long quota = 0, period = 100000;
    int n = sscanf(buf, "%31s %31s", q, p);
    if (n < 1 || !strcmp(q, "max") || parse_ll(q, &quota))
        return;
    if (n == 2 && parse_ll(p, &period))
        return;
    fold_cpu(ctx, quota, period);
}

static void visit_cpu_v1(const char *dir, void *ctx) {
    char qb[64], pb[64];
    long long quota = 0, period = 0;
    if (read_in(dir, "cpu.cfs_quota_us", qb, sizeof(qb)) || parse_ll(qb, &quota))
        return;
    if (read_in(dir, "cpu.cfs_period_us", pb, sizeof(pb)) || parse_ll(pb, &period))
        return;
    fold_cpu(ctx, quota, period);
}

static void fold_mem(int64_t *lim, const char *text) {
    long long v = 0;
    if (!strncmp(text, "max", 3) || parse_ll(text, &v) || v <= 0 || v >= SYSINFO_MEM_UNLIMITED)
        return;
    if (*lim < 0 || v < *lim)
        *lim = v;
}

static void visit_mem_v2(const char *dir, void *ctx) {
    char buf[64];
    if (!read_in(dir, "memory.max", buf, sizeof(buf)))
        fold_mem(ctx, buf);
}

static void visit_mem_v1(const char *dir, void *ctx) {
    char buf[64];
    if (!read_in(dir, "memory.limit_in_bytes", buf, sizeof(buf)))
        fold_mem(ctx, buf);
}

static int64_t read_mem_available(const char *root) {
    char line[256];
    FILE *fp = open_rooted(root, "/proc/meminfo");
    if (!fp)
        return -1;
    int64_t out = -1;
    while (fgets(line, sizeof(line), fp)) {
        unsigned long long kb = 0;
        char unit[8] = "";
        if (sscanf(line, "MemAvailable: %llu %7s", &kb, unit) >= 1) {
            if (kb < (1ULL << 50)) /* bounded: kB count below 1 EiB */
                out = (int64_t)kb * 1024;
            break;
        }
    }
    fclose(fp);
    return out;
}

static int affinity_count(void) {
    /* Grow the mask until the kernel accepts its size (EINVAL: too small). */
    for (int n = 1024; n <= 1 << 16; n *= 2) {
        cpu_set_t *set = CPU_ALLOC(n);
        if (!set)
            break;
        size_t sz = CPU_ALLOC_SIZE(n);
        CPU_ZERO_S(sz, set);
        if (sched_getaffinity(0, sz, set) == 0) {
            int c = CPU_COUNT_S(sz, set);
            CPU_FREE(set);
            return c > 0 ? c : 1;
        }
        CPU_FREE(set);
        if (errno != EINVAL)
            break;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int sysinfo_read(const struct sysinfo_params *params, struct sysinfo_limits *out,
                 struct strata_error *err) {
    if (!params || !params->root || !*params->root || !out || params->n_affinity < 0)
        return strata_error_set(err, STRATA_E_INVALID, "sysinfo: root directory required");
    const char *root = params->root;
    struct cgroups *cg = calloc(1, sizeof(*cg)); /* ~36 KiB of paths: not on the stack */
    if (!cg)
        return strata_error_set(err, STRATA_E_NOMEM, "sysinfo: out of memory");
    read_proc_cgroup(root, cg);
    read_mountinfo(root, cg);

    struct cpu_fold cpu = {0, 0};
    int64_t mem = -1;
    bool have_v2 = cg->v2.mount[0] && cg->v2.path[0];
    bool have_v1 = (cg->cpu.mount[0] && cg->cpu.path[0]) || (cg->mem.mount[0] && cg->mem.path[0]);
    if (have_v2) {
        walk_up(&cg->v2, visit_cpu_v2, &cpu);
        walk_up(&cg->v2, visit_mem_v2, &mem);
    }
    walk_up(&cg->cpu, visit_cpu_v1, &cpu);
    walk_up(&cg->mem, visit_mem_v1, &mem);
    free(cg);

    *out = (struct sysinfo_limits){0};
    out->cgroup_version = have_v2 && have_v1 ? 12 : have_v2 ? 2 : have_v1 ? 1 : 0;
    out->n_cpus_affinity = params->n_affinity > 0 ? params->n_affinity : affinity_count();
    out->n_cpus_cgroup = cpu.n_cpus;
    out->cpu_quota = cpu.quota;
    out->n_cpus = out->n_cpus_affinity;
    out->cpu_source = "affinity";
    if (cpu.n_cpus > 0 && cpu.n_cpus < out->n_cpus) {
        out->n_cpus = cpu.n_cpus;
        out->cpu_source = "cgroup";
    }
    out->mem_cgroup = mem;
    out->mem_available = read_mem_available(root);
    out->mem_budget = -1;
    out->mem_source = "unknown";
    if (out->mem_available >= 0) {
        out->mem_budget = out->mem_available;
        out->mem_source = "meminfo";
    }
    if (mem >= 0 && (out->mem_budget < 0 || mem < out->mem_budget)) {
        out->mem_budget = mem;
        out->mem_source = "cgroup";
    }
    return 0;
}

int sysinfo_effective_threads(int forced, const char *forced_source,
                              const struct sysinfo_limits *lim, const char **source_out) {
    const char *src;
    int n;
    if (forced > 0) {
        n = forced;
        src = forced_source ? forced_source : "cli";
    } else {
        int avail = lim && lim->n_cpus > 0 ? lim->n_cpus : 1;
        n = avail > 1 ? avail - 1 : 1;
        src = lim && lim->cpu_source ? lim->cpu_source : "affinity";
    }
    if (n > SYSINFO_MAX_THREADS)
        n = SYSINFO_MAX_THREADS;
    if (source_out)
        *source_out = src;
    return n;
}

int sysinfo_threads(const struct sysinfo_params *params, int forced, const char *forced_source,
                    struct sysinfo_limits *lim_out, struct sysinfo_threads *out,
                    struct strata_error *err) {
    struct sysinfo_params def = sysinfo_params_default();
    struct sysinfo_limits lim;
    int rc = sysinfo_read(params ? params : &def, &lim, err);
    if (rc < 0)
        return rc;
    if (lim_out)
        *lim_out = lim;
    if (out) {
        int want = forced > 0 ? forced : lim.n_cpus - 1;
        out->n_threads = sysinfo_effective_threads(forced, forced_source, &lim, &out->source);
        out->capped = want > SYSINFO_MAX_THREADS;
    }
    return 0;
}
