/* engine/host/numa-topo.c: CPU sets and the hwloc topology as plain data
 * (numa.h). */
#include <ctype.h>
#include <hwloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/host/numa.h"

void host_cpuset_clear(struct host_cpuset *s) {
    memset(s, 0, sizeof *s);
}

void host_cpuset_add(struct host_cpuset *s, int cpu) {
    if (cpu >= 0 && cpu < HOST_NUMA_MAX_CPUS)
        s->bits[cpu / 64] |= (uint64_t)1 << (cpu % 64);
}

bool host_cpuset_has(const struct host_cpuset *s, int cpu) {
    return cpu >= 0 && cpu < HOST_NUMA_MAX_CPUS && (s->bits[cpu / 64] >> (cpu % 64)) & 1;
}

int host_cpuset_count(const struct host_cpuset *s) {
    int n = 0;
    for (int i = 0; i < HOST_NUMA_MAX_CPUS / 64; i++)
        n += __builtin_popcountll(s->bits[i]);
    return n;
}

void host_cpuset_and(struct host_cpuset *s, const struct host_cpuset *with) {
    for (int i = 0; i < HOST_NUMA_MAX_CPUS / 64; i++)
        s->bits[i] &= with->bits[i];
}

static const char *skip_space(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

/* One decimal CPU number at *p; -1 when there is none. */
static long parse_cpu(const char **p) {
    if (**p < '0' || **p > '9')
        return -1;
    long v = 0;
    while (**p >= '0' && **p <= '9') {
        v = v * 10 + (**p - '0');
        if (v > 1 << 20)
            return 1 << 20; /* clipped: reported as out of range */
        (*p)++;
    }
    return v;
}

int host_cpuset_parse(const char *text, struct host_cpuset *out, struct strata_error *err) {
    host_cpuset_clear(out);
    const char *p = skip_space(text);
    if (!*p)
        return 0;
    for (;;) {
        const char *item = p;
        long a = parse_cpu(&p), b = a;
        if (a < 0)
            return strata_error_set(err, STRATA_E_FORMAT,
                                    "cpulist: expected a CPU number at '%.16s'", item);
        if (*p == '-') {
            p++;
            b = parse_cpu(&p);
            if (b < a)
                return strata_error_set(err, STRATA_E_FORMAT, "cpulist: bad range at '%.16s'",
                                        item);
        }
        if (b >= HOST_NUMA_MAX_CPUS)
            return strata_error_set(err, STRATA_E_RANGE, "cpulist: CPU %ld >= %d at '%.16s'", b,
                                    HOST_NUMA_MAX_CPUS, item);
        for (long c = a; c <= b; c++)
            host_cpuset_add(out, (int)c);
        p = skip_space(p);
        if (!*p)
            return 0;
        if (*p != ',')
            return strata_error_set(err, STRATA_E_FORMAT, "cpulist: unexpected '%.16s'", p);
        p++;
    }
}

void host_cpuset_format(const struct host_cpuset *s, char *buf, size_t cap) {
    if (!cap)
        return;
    size_t n = 0;
    buf[0] = 0;
    for (int c = 0; c < HOST_NUMA_MAX_CPUS; c++) {
        if (!host_cpuset_has(s, c))
            continue;
        int e = c;
        while (e + 1 < HOST_NUMA_MAX_CPUS && host_cpuset_has(s, e + 1))
            e++;
        char item[24];
        int k = e > c ? snprintf(item, sizeof item, "%s%d-%d", n ? "," : "", c, e)
                      : snprintf(item, sizeof item, "%s%d", n ? "," : "", c);
        if (n + (size_t)k + 4 > cap) {
            snprintf(buf + n, cap - n, "...");
            return;
        }
        memcpy(buf + n, item, (size_t)k + 1);
        n += (size_t)k;
        c = e;
    }
}

static void from_hwloc(hwloc_const_cpuset_t in, struct host_cpuset *out) {
    host_cpuset_clear(out);
    unsigned i;
    hwloc_bitmap_foreach_begin(i, in) host_cpuset_add(out, (int)i);
    hwloc_bitmap_foreach_end();
}

/* The node a non-I/O object's locality falls on (its first node), or -1. */
static int node_of(hwloc_topology_t t, const struct host_numa_topo *out, hwloc_obj_t obj) {
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, obj);
    if (!anc || !anc->nodeset)
        return -1;
    int first = hwloc_bitmap_first(anc->nodeset);
    if (first < 0 || hwloc_bitmap_isequal(anc->nodeset, hwloc_topology_get_topology_nodeset(t)))
        return out->n_nodes == 1 ? 0 : -1; /* the whole machine: no locality */
    return host_numa_node_index(out, first);
}

static void add_gpus(hwloc_topology_t t, struct host_numa_topo *out) {
    /* PCI class 0x03xx: display controllers (VGA 0300, 3D 0302); an NVIDIA
     * H200 is 0302. OS devices would name them ("card0") but need the
     * drivers' sysfs, which a simulated topology does not have. */
    for (hwloc_obj_t o = NULL;
         (o = hwloc_get_next_pcidev(t, o)) && out->n_gpus < HOST_NUMA_MAX_GPUS;) {
        if ((o->attr->pcidev.class_id >> 8) != 0x03)
            continue;
        struct host_numa_gpu *g = &out->gpus[out->n_gpus++];
        snprintf(g->name, sizeof g->name, "pci %04x:%02x:%02x.%x", o->attr->pcidev.domain,
                 o->attr->pcidev.bus, o->attr->pcidev.dev, o->attr->pcidev.func);
        g->node = node_of(t, out, o);
        g->pci = (struct host_numa_pci){o->attr->pcidev.domain, o->attr->pcidev.bus,
                                        o->attr->pcidev.dev, o->attr->pcidev.func};
    }
}

int host_numa_pci_parse(const char *text, struct host_numa_pci *out, struct strata_error *err) {
    const char *p = text ? text : "";
    int colons = 0;
    for (const char *q = p; *q; q++)
        colons += *q == ':';
    /* fields in order; "bus:dev.fn" (one colon) starts at the bus */
    static const char seps[4] = {':', ':', '.', '\0'};
    unsigned long f[4] = {0, 0, 0, 0};
    bool ok = (colons == 1 || colons == 2) && !strpbrk(p, "xX"); /* no 0x prefixes */
    for (int i = colons == 2 ? 0 : 1; ok && i < 4; i++) {
        char *end = (char *)p;
        ok = isxdigit((unsigned char)*p) && (f[i] = strtoul(p, &end, 16), *end == seps[i]) &&
             end - p <= 8;
        p = end + (i < 3);
    }
    if (!ok)
        return strata_error_set(err, STRATA_E_FORMAT,
                                "numa: \"%.40s\" is not a PCI address (domain:bus:device.function)",
                                text ? text : "");
    if (f[0] > 0xffffffffu || f[1] > 0xff || f[2] > 0x1f || f[3] > 7)
        return strata_error_set(err, STRATA_E_RANGE, "numa: PCI address \"%.40s\" out of range",
                                text);
    *out = (struct host_numa_pci){(uint32_t)f[0], (uint32_t)f[1], (uint32_t)f[2], (uint32_t)f[3]};
    return 0;
}

int host_numa_gpu_node_by_pci(const struct host_numa_topo *t, const struct host_numa_pci *pci) {
    for (int i = 0; t && pci && i < t->n_gpus; i++) {
        const struct host_numa_gpu *g = &t->gpus[i];
        if (g->pci.domain == pci->domain && g->pci.bus == pci->bus &&
            g->pci.device == pci->device && g->pci.function == pci->function)
            return g->node >= 0 && g->node < t->n_nodes ? t->nodes[g->node].os_index : -1;
    }
    return -1;
}

int host_numa_node_index(const struct host_numa_topo *t, int os_index) {
    for (int i = 0; i < t->n_nodes; i++)
        if (t->nodes[i].os_index == os_index)
            return i;
    return -1;
}

int host_numa_topo_detect(struct host_numa_topo *out, const struct host_cpuset *restrict_to,
                          struct strata_error *err) {
    memset(out, 0, sizeof *out);
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) != 0)
        return strata_error_set(err, STRATA_E_UNSUPPORTED, "hwloc: topology init failed");
    /* PCI devices (a GPU's locality) but no OS devices: those come from
     * plugins (OpenCL, GL, ...) that load vendor libraries. */
    hwloc_topology_set_type_filter(t, HWLOC_OBJ_PCI_DEVICE, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    hwloc_topology_set_type_filter(t, HWLOC_OBJ_BRIDGE, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    hwloc_topology_set_type_filter(t, HWLOC_OBJ_OS_DEVICE, HWLOC_TYPE_FILTER_KEEP_NONE);
    /* libpciaccess (the "pci" plugin) leaks 136 bytes a load; hwloc's
     * Linux backend reads the same devices from sysfs */
    (void)hwloc_topology_set_components(t, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
    (void)hwloc_topology_set_components(t, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "gl");
    (void)hwloc_topology_set_components(t, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "opencl");
    if (hwloc_topology_load(t) != 0) {
        hwloc_topology_destroy(t);
        return strata_error_set(err, STRATA_E_UNSUPPORTED, "hwloc: topology load failed");
    }
    int rc = 0;
    hwloc_bitmap_t allowed = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(t));
    hwloc_bitmap_t bind = hwloc_bitmap_alloc();
    if (!allowed || !bind) {
        rc = strata_error_set(err, STRATA_E_NOMEM, "hwloc: out of memory");
        goto done;
    }
    out->simulated = !hwloc_topology_is_thissystem(t);
    if (!out->simulated && hwloc_get_cpubind(t, bind, HWLOC_CPUBIND_PROCESS) == 0 &&
        !hwloc_bitmap_iszero(bind))
        hwloc_bitmap_and(allowed, allowed, bind); /* taskset / numactl / the affinity mask */
    from_hwloc(allowed, &out->allowed);
    if (restrict_to)
        host_cpuset_and(&out->allowed, restrict_to);
    int nn = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < nn && out->n_nodes < HOST_NUMA_MAX_NODES; i++) {
        hwloc_obj_t node = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, i);
        struct host_numa_node *n = &out->nodes[out->n_nodes];
        n->os_index = (int)node->os_index;
        from_hwloc(node->cpuset, &n->cpus);
        host_cpuset_and(&n->cpus, &out->allowed);
        out->n_nodes++;
    }
    int nc = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
    for (int i = 0; i < nc; i++) {
        hwloc_obj_t core = hwloc_get_obj_by_type(t, HWLOC_OBJ_CORE, i);
        struct host_cpuset cs;
        from_hwloc(core->cpuset, &cs);
        host_cpuset_and(&cs, &out->allowed);
        int n_pu = host_cpuset_count(&cs), first = -1;
        if (!n_pu)
            continue;
        for (int c = 0; c < HOST_NUMA_MAX_CPUS && first < 0; c++)
            if (host_cpuset_has(&cs, c))
                first = c;
        out->n_cores++;
        out->smt |= n_pu > 1;
        for (int k = 0; k < out->n_nodes; k++)
            if (host_cpuset_has(&out->nodes[k].cpus, first)) {
                host_cpuset_add(&out->nodes[k].primary, first);
                out->nodes[k].n_cores++;
                break;
            }
    }
    out->n_pus = host_cpuset_count(&out->allowed);
    int np = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE);
    for (int i = 0; i < np; i++) {
        struct host_cpuset ps;
        from_hwloc(hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, i)->cpuset, &ps);
        host_cpuset_and(&ps, &out->allowed);
        out->n_packages += host_cpuset_count(&ps) > 0;
    }
    add_gpus(t, out);
done:
    hwloc_bitmap_free(bind);
    hwloc_bitmap_free(allowed);
    hwloc_topology_destroy(t);
    return rc;
}

/* Registered global (STYLE.md 6): the process's topology, written once
 * under pthread_once, then only read. */
static struct host_numa_topo proc_topo;
static bool proc_topo_ok;
static pthread_once_t proc_topo_once = PTHREAD_ONCE_INIT;

static void proc_topo_load(void) {
    proc_topo_ok = host_numa_topo_detect(&proc_topo, NULL, NULL) == 0;
}

const struct host_numa_topo *host_numa_topo(void) {
    pthread_once(&proc_topo_once, proc_topo_load);
    return proc_topo_ok ? &proc_topo : NULL;
}
