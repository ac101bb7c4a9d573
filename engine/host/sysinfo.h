/* engine/host/sysinfo.h: how much CPU and memory this process may really use,
 * container limits included.
 *
 *   struct sysinfo_params sp = sysinfo_params_default();   // root "/"
 *   struct sysinfo_limits lim;
 *   if (sysinfo_read(&sp, &lim, &err) == 0)
 *       printf("%d CPUs (%s), %lld bytes (%s)\n", lim.n_cpus, lim.cpu_source,
 *              (long long)lim.mem_budget, lim.mem_source);
 *   struct sysinfo_threads th;               // the one thread policy (run and serve)
 *   sysinfo_threads(&sp, forced, "cli", &lim, &th, &err);   // th.n_threads, th.source
 *
 * CPUs: the smaller of the affinity mask (sched_getaffinity) and the cgroup
 * CPU quota, ceil(quota / period), from cgroup v2 `cpu.max` or v1
 * `cpu.cfs_quota_us` + `cpu.cfs_period_us`. A container started with
 * `--cpus 2` on a 64-core host sees 64 CPUs in its affinity mask but only
 * 2 CPUs of time: sizing the pool from the mask oversubscribes it 32 times.
 *
 * Memory: the smaller of the cgroup limit (v2 `memory.max`, v1
 * `memory.limit_in_bytes`) and /proc/meminfo MemAvailable. Never hwloc's
 * node memory (ENVIRONMENT.md: hwloc reports 8 GB on a 23.5 GiB box) and
 * never the host's MemTotal when a limit exists.
 *
 * Cgroup files are found the way the kernel exposes them: the process's
 * cgroup path from <root>/proc/self/cgroup, the mount points from
 * <root>/proc/self/mountinfo, and every ancestor up to the mount point is
 * read (a limit on a parent binds the child too). Hybrid hierarchies (v1
 * controllers plus an empty v2 tree) are read both ways and the smaller
 * limit wins. Every file is optional; missing or garbled files mean "no
 * limit known from there", never an error.
 *
 * `root` prefixes every path so tests point it at a fake tree.
 *
 * Threading: no shared state; every function is reentrant.
 */
#ifndef STRATA_SYSINFO_H
#define STRATA_SYSINFO_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/error.h"

/* Threads are capped here: decode is memory-bound (DESIGN.md: a 256-core
 * EPYC decoded 14.8 tok/s at 32 threads, 5.5 at 64, 1.6 at 256). */
#define SYSINFO_MAX_THREADS 32

struct sysinfo_params {
    const char *root; /* borrowed; "/" (default) or a fake tree for tests */
    int n_affinity;   /* > 0: use this instead of sched_getaffinity (tests); 0 = ask */
};
struct sysinfo_params sysinfo_params_default(void);

struct sysinfo_limits {
    int n_cpus_affinity;    /* CPUs in the affinity mask (>= 1) */
    int n_cpus_cgroup;      /* ceil(quota / period); 0 = no CPU quota found */
    double cpu_quota;       /* quota / period in CPUs; 0 = none */
    int n_cpus;             /* the smaller of the two: what we may use */
    const char *cpu_source; /* static: "cgroup" when the quota is the limit, else "affinity" */

    int64_t mem_cgroup;     /* bytes; -1 = no cgroup memory limit */
    int64_t mem_available;  /* MemAvailable bytes; -1 = unknown */
    int64_t mem_budget;     /* the smaller of the known ones; -1 = unknown */
    const char *mem_source; /* static: "cgroup", "meminfo" or "unknown" */
    int cgroup_version;     /* 2, 1, 12 (hybrid: both read), 0 = no cgroup fs found */
};

/* Fills *out. Fails only on bad parameters (STRATA_E_INVALID). */
int sysinfo_read(const struct sysinfo_params *params, struct sysinfo_limits *out,
                 struct strata_error *err);

/* Effective compute threads. forced > 0 is an explicit setting (CLI, env or
 * config file) and forced_source its name ("cli", "env", "file"); otherwise
 * available - 1 (at least 1), whose source is lim->cpu_source ("cgroup" or
 * "affinity"). The result is capped at SYSINFO_MAX_THREADS. *source_out
 * (may be NULL) gets a static or borrowed string. */
int sysinfo_effective_threads(int forced, const char *forced_source,
                              const struct sysinfo_limits *lim, const char **source_out);

/* The thread count of `strata run` and `strata serve` (one policy, so both
 * size their pool alike on the same machine):
 *   1. forced > 0: an explicit setting, forced_source its name in the
 *      option table's precedence ("cli" > "env" > "file"; `strata run -t`
 *      is "cli");
 *   2. else the CPUs this process may use (the smaller of the affinity mask
 *      and the cgroup quota) minus one for the HTTP and prep threads, at
 *      least 1; source "cgroup" or "affinity", whichever bound it;
 * capped at SYSINFO_MAX_THREADS either way. */
struct sysinfo_threads {
    int n_threads;      /* >= 1, <= SYSINFO_MAX_THREADS */
    const char *source; /* static, or forced_source (borrowed): for /status, --print-config */
    bool capped;        /* the setting or the CPUs were above SYSINFO_MAX_THREADS */
};
/* Reads the limits (params NULL = sysinfo_params_default()) into *lim_out
 * (may be NULL) and resolves the count into *out. Fails only where
 * sysinfo_read does (bad params). */
int sysinfo_threads(const struct sysinfo_params *params, int forced, const char *forced_source,
                    struct sysinfo_limits *lim_out, struct sysinfo_threads *out,
                    struct strata_error *err);

/* Parses a cgroup v2 cpu.max body ("max 100000", "150000 100000").
 * Returns the quota in CPUs, 0 for "max"/unlimited, -1 if malformed. */
double sysinfo_parse_cpu_max(const char *text);

#endif
