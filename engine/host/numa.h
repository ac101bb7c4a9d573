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
 * inherit the main thread's unless something changed it). strata binds
 * nothing yet: a binding shown was set by whoever started the process
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

#endif
