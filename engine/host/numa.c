/* engine/host/numa.c: NUMA topology and binding through hwloc (numa.h). */
#include "engine/host/numa.h"

#include <hwloc.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static hwloc_topology_t topo;
static char topo_error[96];
static pthread_once_t topo_once = PTHREAD_ONCE_INIT;

static void topo_load(void) {
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) != 0) {
        snprintf(topo_error, sizeof(topo_error), "hwloc_topology_init failed");
        return;
    }
    if (hwloc_topology_load(t) != 0) {
        snprintf(topo_error, sizeof(topo_error), "hwloc_topology_load failed");
        hwloc_topology_destroy(t);
        return;
    }
    topo = t;
}

/* The node indexes set in ns, clipped to the machine's nodes (so an "every
 * node" infinite set lists them all). */
static void node_list(hwloc_topology_t t, hwloc_const_nodeset_t ns, hwloc_bitmap_t clip,
                      struct host_numa_nodes *out) {
    out->n = 0;
    hwloc_bitmap_and(clip, ns, hwloc_topology_get_topology_nodeset(t));
    unsigned i;
    hwloc_bitmap_foreach_begin(i, clip) if (out->n < HOST_NUMA_MAX_NODES) out->ids[out->n++] =
        (int)i;
    hwloc_bitmap_foreach_end();
}

static const char *policy_name(hwloc_membind_policy_t p) {
    switch (p) {
    case HWLOC_MEMBIND_DEFAULT:
        return "default";
    case HWLOC_MEMBIND_FIRSTTOUCH:
        return "firsttouch";
    case HWLOC_MEMBIND_BIND:
        return "bind";
    case HWLOC_MEMBIND_INTERLEAVE:
        return "interleave";
    case HWLOC_MEMBIND_NEXTTOUCH:
        return "nexttouch";
    default:
        return "mixed";
    }
}

int host_numa_query(struct host_numa *out, char *why, size_t cap) {
    pthread_once(&topo_once, topo_load);
    if (!topo) {
        snprintf(why, cap, "hwloc: %s", topo_error);
        return -1;
    }
    hwloc_topology_t t = topo;
    hwloc_bitmap_t cpus = hwloc_bitmap_alloc(), last = hwloc_bitmap_alloc();
    hwloc_bitmap_t ns = hwloc_bitmap_alloc(), mem = hwloc_bitmap_alloc();
    hwloc_bitmap_t clip = hwloc_bitmap_alloc();
    int rc = 0;
    if (!cpus || !last || !ns || !mem || !clip) {
        snprintf(why, cap, "out of memory");
        rc = -1;
        goto done;
    }
    memset(out, 0, sizeof *out);
    out->n_nodes = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
    out->cpubind.n = out->threads_on.n = out->membind.n = -1;
    if (hwloc_get_cpubind(t, cpus, HWLOC_CPUBIND_PROCESS) == 0) {
        out->cpu_bound = !hwloc_bitmap_isincluded(hwloc_topology_get_allowed_cpuset(t), cpus);
        hwloc_cpuset_to_nodeset(t, cpus, ns);
        node_list(t, ns, clip, &out->cpubind);
    }
    if (hwloc_get_last_cpu_location(t, last, HWLOC_CPUBIND_PROCESS) == 0) {
        hwloc_cpuset_to_nodeset(t, last, ns);
        node_list(t, ns, clip, &out->threads_on);
    }
    hwloc_membind_policy_t pol;
    if (hwloc_get_membind(t, mem, &pol, HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET) == 0) {
        out->mem_bound = pol != HWLOC_MEMBIND_DEFAULT && pol != HWLOC_MEMBIND_FIRSTTOUCH &&
                         !hwloc_bitmap_isincluded(hwloc_topology_get_allowed_nodeset(t), mem);
        out->membind_policy = policy_name(pol);
        node_list(t, mem, clip, &out->membind);
    }
    out->binding = out->cpu_bound && out->mem_bound ? "cpus+memory"
                   : out->cpu_bound                 ? "cpus"
                   : out->mem_bound                 ? "memory"
                                                    : "unbound";
done:
    hwloc_bitmap_free(clip);
    hwloc_bitmap_free(mem);
    hwloc_bitmap_free(ns);
    hwloc_bitmap_free(last);
    hwloc_bitmap_free(cpus);
    return rc;
}

/* ---- the published report (numa.h) ---- */
static pthread_mutex_t report_mu = PTHREAD_MUTEX_INITIALIZER;
static struct host_numa_report report;
static bool report_set;

void host_numa_report_publish(const struct host_numa_report *r) {
    pthread_mutex_lock(&report_mu);
    report = *r;
    report_set = true;
    pthread_mutex_unlock(&report_mu);
}

bool host_numa_report_get(struct host_numa_report *out) {
    pthread_mutex_lock(&report_mu);
    bool ok = report_set;
    if (ok)
        *out = report;
    pthread_mutex_unlock(&report_mu);
    return ok;
}
