/* engine/host/numa.h: the machine's NUMA nodes and where this process runs
 * and allocates (hwloc).
 *
 *   struct host_numa n;
 *   char why[96];
 *   if (host_numa_query(&n, why, sizeof why) == 0)
 *       printf("%d nodes, %s\n", n.n_nodes, n.binding);
 *
 * The topology is detected once, on the first query (loading it reads sysfs
 * and takes milliseconds, too slow for every /status scrape), then only
 * read. The CPU binding and the last CPU location are the union over all the
 * process's threads (hwloc reads every /proc/self/task entry), so the pool
 * workers are included. The memory policy is the calling thread's (threads
 * inherit the main thread's unless something changed it). A binding shown
 * is --numa's (host_numa_apply, below) or whoever started the process's
 * (numactl, taskset, a cgroup cpuset).
 *
 * Threading: any thread; the topology is loaded under pthread_once and
 * never freed (it lives as long as the process).
 */
#ifndef STRATA_HOST_NUMA_H
#define STRATA_HOST_NUMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define HOST_NUMA_MAX_NODES 64

/* A set of node indexes (clipped to the machine's nodes); n < 0: unknown. */
struct host_numa_nodes {
    int n;
    int ids[HOST_NUMA_MAX_NODES];
};

struct host_numa {
    int n_nodes;
    struct host_numa_nodes cpubind;    /* nodes of the CPUs the process may run on */
    struct host_numa_nodes threads_on; /* nodes its threads last ran on */
    struct host_numa_nodes membind;    /* the memory policy's nodes */
    const char *membind_policy;        /* static: "default", "bind", ...; NULL = unknown */
    bool cpu_bound;                    /* may not use every CPU the OS allows the process */
    bool mem_bound;                    /* a binding policy on fewer nodes than allowed */
    const char *binding;               /* static: "cpus+memory", "cpus", "memory" or "unbound" */
};

/* 0, or -1 with why filled (hwloc could not load the topology, or out of
 * memory). */
int host_numa_query(struct host_numa *out, char *why, size_t cap);

/* ---- topology, the binding decision, page placement (issue 16) -----------
 *
 *   const struct host_numa_topo *t = host_numa_topo();   // detected once
 *   struct host_numa_mode mode;
 *   host_numa_mode_parse("auto", &mode, &err);
 *   struct host_numa_share sh;
 *   host_numa_sample(NULL, weights, weights_len, 256, &sh, &err);
 *   struct host_numa_plan plan;
 *   host_numa_decide(t, &mode, n_threads, &sh, -1, &plan, &err);
 *   host_numa_apply(&plan, pool, NULL, &err);            // binds the workers + caller
 *   puts(plan.why);                                      // "1 node: nothing to bind"
 *
 * The topology is plain data (struct host_numa_topo) so the decision is a
 * pure function the tests feed with hwloc's simulated machines
 * (HWLOC_SYNTHETIC, HWLOC_XMLFILE read by host_numa_topo_detect) and fake
 * page samples. Memory is never sized from hwloc's per-node figure (it
 * reports 8 GB of a 23.5 GiB machine here: ENVIRONMENT.md).
 *
 * Every system call that a container may refuse (move_pages, mbind,
 * sched_setaffinity) or that reads the kernel's view (mincore,
 * /proc/self/numa_maps) goes through struct host_numa_ops, so tests inject
 * EPERM and recorded text; NULL ops means the real calls.
 *
 * Threading: host_numa_topo() is safe from any thread (pthread_once, never
 * freed). host_numa_apply and host_numa_place_file_pages dispatch on the pool
 * and so run on the pool's one dispatching thread. The rest are pure. */

#include "engine/core/error.h"

#define HOST_NUMA_MAX_CPUS 1024
#define HOST_NUMA_MAX_GPUS 16

struct host_cpuset {
    uint64_t bits[HOST_NUMA_MAX_CPUS / 64]; /* bit i: OS CPU index i */
};
void host_cpuset_clear(struct host_cpuset *s);
void host_cpuset_add(struct host_cpuset *s, int cpu); /* out of range: ignored */
bool host_cpuset_has(const struct host_cpuset *s, int cpu);
int host_cpuset_count(const struct host_cpuset *s);
void host_cpuset_and(struct host_cpuset *s, const struct host_cpuset *with);
/* Kernel cpulist text ("0-3,8,10-11\n", as in /sys/.../cpulist and
 * cpuset.cpus); "" is the empty set. 0, or STRATA_E_FORMAT / STRATA_E_RANGE
 * (a CPU >= HOST_NUMA_MAX_CPUS) with err naming the offending text. */
int host_cpuset_parse(const char *text, struct host_cpuset *out, struct strata_error *err);
/* The cpulist form of s into buf (always NUL-terminated, "..." when cut). */
void host_cpuset_format(const struct host_cpuset *s, char *buf, size_t cap);

struct host_numa_node {
    int os_index;               /* the kernel's node number (N<k> in numa_maps) */
    int n_cores;                /* cores with at least one allowed PU */
    struct host_cpuset cpus;    /* allowed PUs of the node */
    struct host_cpuset primary; /* the first allowed PU of each core (no SMT siblings) */
};

/* A PCI address: domain:bus:device.function, what VK_EXT_pci_bus_info
 * gives a Vulkan device (VkPhysicalDevicePCIBusInfoPropertiesEXT's pciDomain,
 * pciBus, pciDevice, pciFunction). */
struct host_numa_pci {
    uint32_t domain, bus, device, function;
};

struct host_numa_gpu {
    char name[48];            /* hwloc's OS device name, or "pci 0000:41:00.0" */
    int node;                 /* index into host_numa_topo.nodes; -1 unknown locality */
    struct host_numa_pci pci; /* its address */
};

struct host_numa_topo {
    int n_packages, n_cores, n_pus; /* allowed ones */
    int n_nodes;
    struct host_numa_node nodes[HOST_NUMA_MAX_NODES];
    int n_gpus;
    struct host_numa_gpu gpus[HOST_NUMA_MAX_GPUS];
    bool smt;                   /* some core has two or more allowed PUs */
    bool simulated;             /* HWLOC_SYNTHETIC / HWLOC_XMLFILE: not this system */
    struct host_cpuset allowed; /* what the process may run on */
};

/* Loads a fresh topology (hwloc honours HWLOC_SYNTHETIC and HWLOC_XMLFILE),
 * restricted to hwloc's allowed set (the cgroup cpuset), to the process's
 * affinity mask when the topology is this system's, and to `restrict_to`
 * when not NULL (tests: a restricted cpuset). 0 or -1 with err. */
int host_numa_topo_detect(struct host_numa_topo *out, const struct host_cpuset *restrict_to,
                          struct strata_error *err);
/* The process's topology, detected once; NULL when hwloc failed (then
 * nothing is ever bound). */
const struct host_numa_topo *host_numa_topo(void);
/* Index into topo->nodes of the node with kernel number os_index, or -1. */
int host_numa_node_index(const struct host_numa_topo *t, int os_index);
/* "0000:41:00.0" or "41:00.0" (domain 0), hex as lspci prints it, into out;
 * 0, or STRATA_E_FORMAT / STRATA_E_RANGE (a field past PCI's widths: bus 8
 * bits, device 5, function 3) naming the text. */
int host_numa_pci_parse(const char *text, struct host_numa_pci *out, struct strata_error *err);
/* The kernel node number local to the GPU at pci (a display-class PCI
 * device of t), or -1: no such device, or its locality is unknown. The
 * gpu_node host_numa_decide takes for a GPU in use. */
int host_numa_gpu_node_by_pci(const struct host_numa_topo *t, const struct host_numa_pci *pci);

/* ---- the kernel's calls, replaceable by tests ---- */
struct host_numa_ops {
    /* move_pages(2) in query mode (nodes == NULL): status[i] = node or -errno;
     * returns 0 or -1 with errno (EPERM under a container's seccomp). */
    long (*move_pages)(unsigned long count, void **pages, int *status);
    /* mbind(2) with MPOL_PREFERRED on one node; 0 or -1 with errno. */
    long (*mbind_preferred)(void *addr, unsigned long len, int os_node);
    /* sched_setaffinity(0, ...) of the calling thread; 0 or -1 with errno. */
    int (*set_affinity)(const struct host_cpuset *cpus);
    /* mincore(2). */
    int (*mincore)(void *addr, size_t len, unsigned char *vec);
    /* Opens /proc/self/numa_maps (or recorded text); NULL with errno. */
    FILE *(*open_numa_maps)(void);
};
const struct host_numa_ops *host_numa_ops_real(void);

/* One line of /proc/self/numa_maps: its start address and pages per kernel
 * node ("N1=4096"), summed into pages[os_node] (os_node < max_nodes; others
 * counted in *other). 0, or STRATA_E_FORMAT for a line without an address. */
int host_numa_maps_line(const char *line, uint64_t *start, uint64_t *pages, int max_nodes,
                        uint64_t *other, struct strata_error *err);

/* Where a sample of the pages of [addr, addr + len) sit. */
struct host_numa_share {
    uint64_t sampled;                      /* pages asked about */
    uint64_t resident;                     /* of them, in memory (mincore) */
    uint64_t on_node[HOST_NUMA_MAX_NODES]; /* resident pages per kernel node number */
    const char *source; /* static: "move_pages", "numa_maps" (move_pages refused), "none" */
};
/* n_samples pages spread evenly over the range (at least one). Pages not
 * resident are counted in `sampled` only. Where move_pages is refused, the
 * counts are numa_maps' for every mapping the range touches (per mapping,
 * not per page: the best the kernel tells then). 0 or -1 with err. */
int host_numa_sample(const struct host_numa_ops *ops, const void *addr, size_t len, int n_samples,
                     struct host_numa_share *out, struct strata_error *err);
/* Share of the resident sampled pages on kernel node os_node (0 when none). */
double host_numa_share_of(const struct host_numa_share *s, int os_node);
/* The kernel node holding most of the sample, or -1 when nothing is resident. */
int host_numa_share_top(const struct host_numa_share *s);

/* ---- the decision ---- */
enum host_numa_mode_kind { HOST_NUMA_OFF, HOST_NUMA_AUTO, HOST_NUMA_NODE, HOST_NUMA_SPLIT };
struct host_numa_mode {
    enum host_numa_mode_kind kind;
    int node; /* HOST_NUMA_NODE: the kernel node number */
};
/* "auto", "off", "node:N", "split"; else STRATA_E_CONFIG naming the text. */
int host_numa_mode_parse(const char *text, struct host_numa_mode *out, struct strata_error *err);
const char *host_numa_mode_name(enum host_numa_mode_kind k); /* static */

/* Weights count as sitting on a node when at least this share of the
 * sample is there (issue 16; the seed's placement moved spans under it). */
#define HOST_NUMA_HOME_SHARE 0.9

struct host_numa_plan {
    struct host_numa_mode mode;
    int n_groups;               /* 0: nothing bound; 1: every thread on node[0]; 2: split */
    bool logical;               /* split on one node: two groups, nothing bound */
    int node[2];                /* kernel node numbers of the groups */
    int threads[2];             /* threads per group; group 0 has the caller */
    struct host_cpuset cpus[2]; /* each group's CPUs (unused when logical) */
    char why[200];              /* one line: what was chosen and why */
};
/* n_threads: the pool's threads including the caller. share: the sample of
 * the weights' pages (NULL or nothing resident: unknown). gpu_node: the
 * kernel node of the GPU in use, or -1. Never fails for auto (it binds
 * nothing instead, and why says why); node:N names a node the process may
 * not use, or any mode on a node with fewer CPUs than threads, fails with
 * STRATA_E_CONFIG. */
int host_numa_decide(const struct host_numa_topo *t, const struct host_numa_mode *mode,
                     int n_threads, const struct host_numa_share *share, int gpu_node,
                     struct host_numa_plan *out, struct strata_error *err);
/* Pool participant w's group under plan (0 for the caller and even workers,
 * 1 for odd workers when split), as host_numa_apply gives the pool. */
int host_numa_group_of(const struct host_numa_plan *plan, int worker);

struct pool;
/* Binds the pool's workers and the calling thread as planned (each thread
 * sets its own affinity) and, for split, gives the pool its two groups.
 * A refused sched_setaffinity leaves every thread as it was and returns
 * -1 with err (the caller logs it and runs unbound). n_groups 0: nothing. */
int host_numa_apply(const struct host_numa_plan *plan, struct pool *pool,
                    const struct host_numa_ops *ops, struct strata_error *err);

/* ---- page placement ---- */
/* A span of a mapped file and the pool group whose node should hold it. */
struct host_numa_span {
    const uint8_t *addr; /* inside a MAP_SHARED/PRIVATE file mapping */
    size_t len;
    uint64_t file_off; /* the file offset of addr */
    int group;         /* 0 or 1 */
};
struct host_numa_placement {
    uint64_t bytes_filled;  /* not in the page cache: read first by their group */
    uint64_t bytes_moved;   /* dropped and re-read from the group's node */
    double share_before[2]; /* per group: sampled share on its node */
    double share_after[2];
    const char *source; /* the sampler's */
    double ms;
};
/* Places the page-cache pages behind spans (all of one file, `fd` open on
 * it) on their group's node: spans under HOST_NUMA_HOME_SHARE on it are
 * dropped (madvise + posix_fadvise DONTNEED) and read again by the group's
 * own threads, so a second start moves nothing; `force` moves every span
 * (a measurement of the cost on one node). 0 or -1 with err. */
int host_numa_place_file_pages(const struct host_numa_plan *plan, struct pool *pool,
                               const struct host_numa_ops *ops, int fd,
                               const struct host_numa_span *spans, int n_spans, bool force,
                               struct host_numa_placement *out, struct strata_error *err);
/* Asks the kernel to put [addr, addr + len)'s future pages on os_node
 * (mbind MPOL_PREFERRED) before first touch; refused (EPERM): 1, first
 * touch alone places them; 0 done; the range is never touched. */
int host_numa_prefer(const struct host_numa_ops *ops, void *addr, size_t len, int os_node);

/* ---- what was chosen, for /status and the start-up log ---- */
struct host_numa_report {
    struct host_numa_plan plan;
    struct host_numa_share before; /* the weights' file pages before the load */
    const char *placement;         /* static: "first touch (arena)", "page cache", "none" */
    uint64_t bytes_first_touched;  /* arena bytes copied by the threads that compute them */
    uint64_t bytes_moved;          /* page-cache bytes dropped and re-read */
    uint64_t bytes_filled;         /* page-cache bytes first read by their node */
    double share[2];               /* per group: sampled share on its node after placement;
                                      < 0: not sampled (an arena is placed by first touch) */
    double place_ms;
    char note[200]; /* a refusal and its fallback, or "" */
};
/* Registered global (STYLE.md 6): the process's last report, written by
 * the loading thread once the model is placed and read by /status from any
 * thread (a mutex guards the copy). get: false when nothing was reported. */
void host_numa_report_publish(const struct host_numa_report *r);
bool host_numa_report_get(struct host_numa_report *out);

#endif
