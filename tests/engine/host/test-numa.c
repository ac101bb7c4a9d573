/* tests/engine/host/test-numa.c: NUMA topology, the --numa decision, the
 * page sampler and placement, pool groups (engine/host/numa*.c, pool.c).
 *
 * Simulated machines come from hwloc itself: HWLOC_SYNTHETIC descriptions
 * and an XML topology with a GPU (PCI 3D controller) on node 1
 * (topo-2node-gpu1.xml beside this file). Check forks a process per test,
 * so the environment set by one test never reaches another. Kernel calls
 * are replaced through struct host_numa_ops where a container would refuse
 * them (EPERM). */
#include "tests/harness.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/host/numa.h"
#include "engine/host/pool.h"

#ifndef TEST_SRC_DIR
#define TEST_SRC_DIR "."
#endif

static void load_synthetic(const char *desc, const char *restrict_list, struct host_numa_topo *t) {
    setenv("HWLOC_SYNTHETIC", desc, 1);
    unsetenv("HWLOC_XMLFILE");
    struct host_cpuset r;
    struct strata_error err = {0};
    if (restrict_list)
        ck_assert_int_eq(host_cpuset_parse(restrict_list, &r, &err), 0);
    ck_assert_msg(host_numa_topo_detect(t, restrict_list ? &r : NULL, &err) == 0, "%s",
                  err.message);
    ck_assert(t->simulated);
}

/* A sample with `pages[k]` resident pages on node k. */
static struct host_numa_share fake_share(uint64_t n0, uint64_t n1, uint64_t n2, uint64_t n3) {
    struct host_numa_share s = {0};
    s.on_node[0] = n0, s.on_node[1] = n1, s.on_node[2] = n2, s.on_node[3] = n3;
    s.resident = n0 + n1 + n2 + n3;
    s.sampled = s.resident + 10;
    s.source = "move_pages";
    return s;
}

static struct host_numa_mode mode_of(const char *text) {
    struct host_numa_mode m;
    struct strata_error err = {0};
    ck_assert_msg(host_numa_mode_parse(text, &m, &err) == 0, "%s", err.message);
    return m;
}

/* ---- parsers ---- */

START_TEST(cpulist_parse_format) {
    struct host_cpuset s;
    struct strata_error err = {0};
    char buf[128];
    ck_assert_int_eq(host_cpuset_parse("0-3,8,10-11\n", &s, &err), 0);
    ck_assert_int_eq(host_cpuset_count(&s), 7);
    ck_assert(host_cpuset_has(&s, 8) && !host_cpuset_has(&s, 9) && host_cpuset_has(&s, 11));
    host_cpuset_format(&s, buf, sizeof buf);
    ck_assert_str_eq(buf, "0-3,8,10-11");
    /* recorded from a 2 x EPYC 9554 pod's cpuset.cpus.effective */
    ck_assert_int_eq(host_cpuset_parse("0-15,64-79,128-143,192-207", &s, &err), 0);
    ck_assert_int_eq(host_cpuset_count(&s), 64);
    host_cpuset_format(&s, buf, sizeof buf);
    ck_assert_str_eq(buf, "0-15,64-79,128-143,192-207");
    ck_assert_int_eq(host_cpuset_parse("", &s, &err), 0);
    ck_assert_int_eq(host_cpuset_count(&s), 0);
    ck_assert_int_eq(host_cpuset_parse(" \n", &s, &err), 0);
    const char *bad[] = {"3-1", "a", "1,,2", "1-", "-1", "1 2", "0-3;"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err = (struct strata_error){0};
        ck_assert_msg(host_cpuset_parse(bad[i], &s, &err) == STRATA_E_FORMAT, "'%s'", bad[i]);
        ck_assert(strstr(err.message, "cpulist"));
    }
    ck_assert_int_eq(host_cpuset_parse("1023", &s, &err), 0);
    ck_assert_int_eq(host_cpuset_parse("1024", &s, &err), STRATA_E_RANGE);
    ck_assert_int_eq(host_cpuset_parse("5-99999999999", &s, &err), STRATA_E_RANGE);
    /* a format buffer too small is cut, never overrun */
    ck_assert_int_eq(host_cpuset_parse("0,2,4,6,8,10,12,14,16,18,20", &s, &err), 0);
    char small[12];
    host_cpuset_format(&s, small, sizeof small);
    ck_assert(strlen(small) < sizeof small && strstr(small, "..."));
}
END_TEST

START_TEST(numa_maps_lines) {
    /* recorded /proc/self/numa_maps lines (kernel 6.x, a 2-node host) */
    const char *file = "7f2b4c000000 default file=/models/olmoe.gguf mapped=1024 mapmax=2 N0=700 "
                       "N1=324 kernelpagesize_kB=4\n";
    const char *anon = "55d0c0a00000 bind:1 anon=12 dirty=12 active=0 N1=12 kernelpagesize_kB=4";
    const char *huge =
        "7f0000000000 interleave:0-1 anon=4 dirty=4 N0=2 N1=2 N9=1 kernelpagesize_kB=2048";
    uint64_t start, pages[4] = {0}, other = 0;
    struct strata_error err = {0};
    ck_assert_int_eq(host_numa_maps_line(file, &start, pages, 4, &other, &err), 0);
    ck_assert_uint_eq(start, 0x7f2b4c000000ULL);
    ck_assert_uint_eq(pages[0], 700);
    ck_assert_uint_eq(pages[1], 324);
    memset(pages, 0, sizeof pages);
    ck_assert_int_eq(host_numa_maps_line(anon, &start, pages, 4, &other, &err), 0);
    ck_assert_uint_eq(start, 0x55d0c0a00000ULL);
    ck_assert_uint_eq(pages[0], 0);
    ck_assert_uint_eq(pages[1], 12);
    memset(pages, 0, sizeof pages);
    ck_assert_int_eq(host_numa_maps_line(huge, &start, pages, 4, &other, &err), 0);
    ck_assert_uint_eq(pages[0] + pages[1], 4);
    ck_assert_uint_eq(other, 1); /* N9 is past max_nodes */
    ck_assert_int_eq(host_numa_maps_line("hello world", &start, pages, 4, &other, &err),
                     STRATA_E_FORMAT);
    ck_assert_int_eq(host_numa_maps_line("", &start, pages, 4, &other, &err), STRATA_E_FORMAT);
}
END_TEST

START_TEST(mode_parse) {
    struct host_numa_mode m;
    struct strata_error err = {0};
    ck_assert_int_eq(mode_of("auto").kind, HOST_NUMA_AUTO);
    ck_assert_int_eq(mode_of("off").kind, HOST_NUMA_OFF);
    ck_assert_int_eq(mode_of("split").kind, HOST_NUMA_SPLIT);
    m = mode_of("node:3");
    ck_assert_int_eq(m.kind, HOST_NUMA_NODE);
    ck_assert_int_eq(m.node, 3);
    const char *bad[] = {"node:", "node:x", "node:-1", "node:64", "Auto", "on", "node:1x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err = (struct strata_error){0};
        ck_assert_msg(host_numa_mode_parse(bad[i], &m, &err) == STRATA_E_CONFIG, "%s", bad[i]);
        ck_assert(strstr(err.message, "--numa"));
    }
}
END_TEST

/* ---- topologies and decisions ---- */

START_TEST(two_nodes_smt) {
    struct host_numa_topo t;
    load_synthetic("pack:2 numa:1 core:8 pu:2", NULL, &t);
    ck_assert_int_eq(t.n_nodes, 2);
    ck_assert_int_eq(t.n_packages, 2);
    ck_assert_int_eq(t.n_cores, 16);
    ck_assert_int_eq(t.n_pus, 32);
    ck_assert(t.smt);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(host_cpuset_count(&t.nodes[i].cpus), 16);
        ck_assert_int_eq(host_cpuset_count(&t.nodes[i].primary), 8);
        ck_assert_int_eq(t.nodes[i].n_cores, 8);
    }
    struct host_numa_plan p;
    struct strata_error err = {0};
    struct host_numa_mode a = mode_of("auto");
    /* 95% of the sample on node 1, 8 threads: node 1's 8 physical cores */
    struct host_numa_share sh = fake_share(5, 95, 0, 0);
    ck_assert_int_eq(host_numa_decide(&t, &a, 8, &sh, -1, &p, &err), 0);
    ck_assert_int_eq(p.n_groups, 1);
    ck_assert_int_eq(p.node[0], 1);
    ck_assert_int_eq(host_cpuset_count(&p.cpus[0]), 8);
    ck_assert(strstr(p.why, "node 1") && strstr(p.why, "physical cores"));
    for (int c = 0; c < 32; c++)
        if (host_cpuset_has(&p.cpus[0], c))
            ck_assert(host_cpuset_has(&t.nodes[1].primary, c));
    /* 12 threads: more than the physical cores, the whole node (never fewer CPUs than threads) */
    ck_assert_int_eq(host_numa_decide(&t, &a, 12, &sh, -1, &p, &err), 0);
    ck_assert_int_eq(p.n_groups, 1);
    ck_assert_int_eq(host_cpuset_count(&p.cpus[0]), 16);
    /* 20 threads: the node cannot hold them, nothing bound */
    ck_assert_int_eq(host_numa_decide(&t, &a, 20, &sh, -1, &p, &err), 0);
    ck_assert_int_eq(p.n_groups, 0);
    ck_assert(strstr(p.why, "nothing bound"));
    /* exactly 90% binds, 89% does not */
    sh = fake_share(10, 90, 0, 0);
    ck_assert_int_eq(host_numa_decide(&t, &a, 4, &sh, -1, &p, &err), 0);
    ck_assert_int_eq(p.n_groups, 1);
    sh = fake_share(11, 89, 0, 0);
    ck_assert_int_eq(host_numa_decide(&t, &a, 4, &sh, -1, &p, &err), 0);
    ck_assert_int_eq(p.n_groups, 0);
    ck_assert(strstr(p.why, "spread"));
    /* nothing cached: bind where the load will place them */
    sh = fake_share(0, 0, 0, 0);
    ck_assert_int_eq(host_numa_decide(&t, &a, 4, &sh, -1, &p, &err), 0);
    ck_assert_int_eq(p.n_groups, 1);
    ck_assert(strstr(p.why, "not cached"));
    /* off binds nothing whatever the sample */
    struct host_numa_mode off = mode_of("off");
    sh = fake_share(0, 100, 0, 0);
    ck_assert_int_eq(host_numa_decide(&t, &off, 4, &sh, -1, &p, &err), 0);
    ck_assert_int_eq(p.n_groups, 0);
    /* node:0 against a sample on node 1: the operator wins */
    struct host_numa_mode n0 = mode_of("node:0");
    ck_assert_int_eq(host_numa_decide(&t, &n0, 4, &sh, -1, &p, &err), 0);
    ck_assert_int_eq(p.n_groups, 1);
    ck_assert_int_eq(p.node[0], 0);
    struct host_numa_mode n7 = mode_of("node:7");
    ck_assert_int_eq(host_numa_decide(&t, &n7, 4, &sh, -1, &p, &err), STRATA_E_CONFIG);
    ck_assert_int_eq(host_numa_decide(&t, &n0, 17, &sh, -1, &p, &err), STRATA_E_CONFIG);
    /* split: home where the weights are, the odd workers on the other node */
    struct host_numa_mode sp = mode_of("split");
    ck_assert_int_eq(host_numa_decide(&t, &sp, 16, &sh, -1, &p, &err), 0);
    ck_assert_int_eq(p.n_groups, 2);
    ck_assert(!p.logical);
    ck_assert_int_eq(p.node[0], 1);
    ck_assert_int_eq(p.node[1], 0);
    ck_assert_int_eq(p.threads[0], 8);
    ck_assert_int_eq(p.threads[1], 8);
    ck_assert_int_eq(host_cpuset_count(&p.cpus[0]), 8); /* 8 threads fit the physical cores */
    ck_assert_int_eq(host_numa_group_of(&p, 0), 0);
    ck_assert_int_eq(host_numa_group_of(&p, 1), 1);
    ck_assert_int_eq(host_numa_group_of(&p, 2), 0);
    ck_assert_int_eq(host_numa_decide(&t, &sp, 7, &sh, -1, &p, &err), 0);
    ck_assert_int_eq(p.threads[0] + p.threads[1], 7);
    ck_assert_int_eq(p.threads[1], 3); /* workers 1, 3, 5 */
    ck_assert_int_eq(host_numa_decide(&t, &sp, 1, &sh, -1, &p, &err), 0);
    ck_assert_int_eq(p.n_groups, 0);
}
END_TEST

START_TEST(two_nodes_no_smt_and_four_nodes) {
    struct host_numa_topo t;
    load_synthetic("pack:2 numa:1 core:6 pu:1", NULL, &t);
    ck_assert_int_eq(t.n_nodes, 2);
    ck_assert(!t.smt);
    ck_assert_int_eq(t.n_pus, 12);
    struct host_numa_plan p;
    struct strata_error err = {0};
    struct host_numa_mode a = mode_of("auto"), sp = mode_of("split");
    struct host_numa_share sh = fake_share(100, 0, 0, 0);
    ck_assert_int_eq(host_numa_decide(&t, &a, 6, &sh, -1, &p, &err), 0);
    ck_assert_int_eq(p.n_groups, 1);
    ck_assert_int_eq(p.node[0], 0);
    ck_assert_int_eq(host_numa_decide(&t, &a, 7, &sh, -1, &p, &err), 0);
    ck_assert_int_eq(p.n_groups, 0); /* 6 CPUs for 7 threads */
    /* four nodes: split takes the home node and the largest other one */
    load_synthetic("pack:4 numa:1 core:4 pu:2", "0-7,8-11,16-23,24-31", &t);
    ck_assert_int_eq(t.n_nodes, 4);
    ck_assert_int_eq(host_cpuset_count(&t.nodes[1].cpus), 4); /* restricted */
    sh = fake_share(0, 2, 97, 1);
    ck_assert_int_eq(host_numa_decide(&t, &a, 8, &sh, -1, &p, &err), 0);
    ck_assert_int_eq(p.n_groups, 1);
    ck_assert_int_eq(p.node[0], 2);
    ck_assert_int_eq(host_numa_decide(&t, &sp, 8, &sh, -1, &p, &err), 0);
    ck_assert_int_eq(p.n_groups, 2);
    ck_assert_int_eq(p.node[0], 2);
    ck_assert_int_eq(p.node[1], 0); /* 8 CPUs, like node 3; node 1 has 4 */
    /* spread over four nodes: auto binds nothing */
    sh = fake_share(25, 25, 25, 25);
    ck_assert_int_eq(host_numa_decide(&t, &a, 4, &sh, -1, &p, &err), 0);
    ck_assert_int_eq(p.n_groups, 0);
}
END_TEST

START_TEST(restricted_cpusets) {
    struct host_numa_topo t;
    /* a cgroup cpuset of 2 cores (4 PUs) on node 0 and 2 on node 1 */
    load_synthetic("pack:2 numa:1 core:8 pu:2", "0-3,16-19", &t);
    ck_assert_int_eq(t.n_pus, 8);
    ck_assert_int_eq(t.n_cores, 4);
    ck_assert_int_eq(host_cpuset_count(&t.nodes[0].cpus), 4);
    ck_assert_int_eq(host_cpuset_count(&t.nodes[0].primary), 2);
    struct host_numa_plan p;
    struct strata_error err = {0};
    struct host_numa_mode a = mode_of("auto");
    struct host_numa_share sh = fake_share(100, 0, 0, 0);
    ck_assert_int_eq(host_numa_decide(&t, &a, 2, &sh, -1, &p, &err), 0);
    ck_assert_int_eq(p.n_groups, 1);
    ck_assert_int_eq(host_cpuset_count(&p.cpus[0]), 2);
    char cl[64];
    host_cpuset_format(&p.cpus[0], cl, sizeof cl);
    ck_assert_str_eq(cl, "0,2");
    ck_assert_int_eq(host_numa_decide(&t, &a, 4, &sh, -1, &p, &err), 0);
    host_cpuset_format(&p.cpus[0], cl, sizeof cl);
    ck_assert_str_eq(cl, "0-3"); /* SMT siblings join: 2 cores for 4 threads */
    ck_assert_int_eq(host_numa_decide(&t, &a, 5, &sh, -1, &p, &err), 0);
    ck_assert_int_eq(p.n_groups, 0);
    /* a cpuset inside one node: one usable node, nothing to bind */
    load_synthetic("pack:2 numa:1 core:8 pu:2", "0-7", &t);
    ck_assert_int_eq(host_numa_decide(&t, &a, 4, &sh, -1, &p, &err), 0);
    ck_assert_int_eq(p.n_groups, 0);
    ck_assert_str_eq(p.why, "1 node: nothing to bind");
    struct host_numa_mode n1 = mode_of("node:1");
    ck_assert_int_eq(host_numa_decide(&t, &n1, 4, &sh, -1, &p, &err), STRATA_E_CONFIG);
}
END_TEST

START_TEST(gpu_on_node1_xml) {
    char path[512];
    snprintf(path, sizeof path, "%s/topo-2node-gpu1.xml", TEST_SRC_DIR);
    unsetenv("HWLOC_SYNTHETIC");
    setenv("HWLOC_XMLFILE", path, 1);
    struct host_numa_topo t;
    struct strata_error err = {0};
    ck_assert_msg(host_numa_topo_detect(&t, NULL, &err) == 0, "%s", err.message);
    ck_assert(t.simulated);
    ck_assert_int_eq(t.n_nodes, 2);
    ck_assert_int_eq(t.n_gpus, 1);
    ck_assert_int_eq(t.gpus[0].node, 1);
    ck_assert_str_eq(t.gpus[0].name, "pci 0000:41:00.0");
    /* the weights sit on node 0, but the GPU in use is node 1's: node 1 */
    struct host_numa_mode a = mode_of("auto");
    struct host_numa_share sh = fake_share(100, 0, 0, 0);
    struct host_numa_plan p;
    ck_assert_int_eq(host_numa_decide(&t, &a, 4, &sh, t.nodes[t.gpus[0].node].os_index, &p, &err),
                     0);
    ck_assert_int_eq(p.n_groups, 1);
    ck_assert_int_eq(p.node[0], 1);
    ck_assert(strstr(p.why, "GPU"));
    /* without a GPU in use the sample decides */
    ck_assert_int_eq(host_numa_decide(&t, &a, 4, &sh, -1, &p, &err), 0);
    ck_assert_int_eq(p.node[0], 0);
}
END_TEST

START_TEST(one_node_split_is_logical) {
    struct host_numa_topo t;
    load_synthetic("pack:1 numa:1 core:4 pu:1", NULL, &t);
    struct host_numa_plan p;
    struct strata_error err = {0};
    struct host_numa_mode sp = mode_of("split"), a = mode_of("auto");
    ck_assert_int_eq(host_numa_decide(&t, &sp, 4, NULL, -1, &p, &err), 0);
    ck_assert_int_eq(p.n_groups, 2);
    ck_assert(p.logical);
    ck_assert_int_eq(p.threads[0], 2);
    ck_assert_int_eq(p.threads[1], 2);
    ck_assert(strstr(p.why, "1 node: nothing to bind"));
    ck_assert_int_eq(host_numa_decide(&t, &a, 4, NULL, -1, &p, &err), 0);
    ck_assert_int_eq(p.n_groups, 0);
    ck_assert_str_eq(p.why, "1 node: nothing to bind");
}
END_TEST

/* The real machine: one node here (ENVIRONMENT.md), where auto reports
 * "1 node: nothing to bind" and changes no thread's CPUs. */
START_TEST(real_single_node) {
    unsetenv("HWLOC_SYNTHETIC");
    unsetenv("HWLOC_XMLFILE");
    const struct host_numa_topo *t = host_numa_topo();
    ck_assert_ptr_nonnull(t);
    ck_assert(!t->simulated);
    ck_assert_int_ge(t->n_nodes, 1);
    ck_assert_int_eq(t->n_pus, CPU_COUNT(&(cpu_set_t){0}) * 0 + t->n_pus);
    cpu_set_t before, after;
    ck_assert_int_eq(sched_getaffinity(0, sizeof before, &before), 0);
    ck_assert_int_eq(t->n_pus, CPU_COUNT(&before)); /* the affinity mask is the allowed set */
    struct pool_params pp = pool_params_default();
    pp.n_threads = 2;
    struct pool *pool = pool_init(&pp, NULL);
    ck_assert_ptr_nonnull(pool);
    struct host_numa_mode a = mode_of("auto");
    struct host_numa_plan p;
    struct strata_error err = {0};
    ck_assert_int_eq(host_numa_decide(t, &a, 2, NULL, -1, &p, &err), 0);
    if (t->n_nodes == 1) {
        ck_assert_str_eq(p.why, "1 node: nothing to bind");
        ck_assert_int_eq(p.n_groups, 0);
    }
    ck_assert_int_eq(host_numa_apply(&p, pool, NULL, &err), 0);
    ck_assert_int_eq(sched_getaffinity(0, sizeof after, &after), 0);
    if (t->n_nodes == 1)
        ck_assert(CPU_EQUAL(&before, &after));
    ck_assert_int_eq(pool_n_groups(pool), 0);
    /* the real sampler on real anonymous memory: every page on a node we have */
    const size_t len = 64 * 4096;
    uint8_t *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(buf != MAP_FAILED);
    memset(buf, 1, len);
    struct host_numa_share sh;
    ck_assert_int_eq(host_numa_sample(NULL, buf, len, 16, &sh, &err), 0);
    ck_assert_uint_eq(sh.sampled, 16);
    ck_assert_uint_eq(sh.resident, 16);
    ck_assert_int_ge(host_numa_share_top(&sh), 0);
    ck_assert(host_numa_share_of(&sh, host_numa_share_top(&sh)) > 0.99 || t->n_nodes > 1);
    /* mbind works here: 0 (refusal would be 1 and first touch alone) */
    ck_assert_int_eq(host_numa_prefer(NULL, buf, len, t->nodes[0].os_index), 0);
    munmap(buf, len);
    pool_free(pool);
}
END_TEST

/* ---- refusals (a container's seccomp) through fake ops ---- */

static const char *fake_maps_text;
static FILE *fake_open_numa_maps(void) {
    if (!fake_maps_text) {
        errno = EACCES;
        return NULL;
    }
    return fmemopen((void *)fake_maps_text, strlen(fake_maps_text), "r");
}
static long eperm_move_pages(unsigned long count, void **pages, int *status) {
    (void)count, (void)pages, (void)status;
    errno = EPERM;
    return -1;
}
static int fake_node; /* the node fake_move_pages reports, -1: alternate 0/1 */
static long fake_move_pages(unsigned long count, void **pages, int *status) {
    (void)pages;
    for (unsigned long i = 0; i < count; i++)
        status[i] = fake_node >= 0 ? fake_node : (int)(i % 2);
    return 0;
}
static long eperm_mbind(void *addr, unsigned long len, int node) {
    (void)addr, (void)len, (void)node;
    errno = EPERM;
    return -1;
}
static _Atomic int affinity_calls;
static int eperm_affinity(const struct host_cpuset *c) {
    (void)c;
    atomic_fetch_add(&affinity_calls, 1);
    errno = EPERM;
    return -1;
}
static int ok_affinity(const struct host_cpuset *c) {
    (void)c;
    atomic_fetch_add(&affinity_calls, 1);
    return 0;
}
static int all_resident(void *addr, size_t len, unsigned char *vec) {
    (void)addr;
    memset(vec, 1, (len + 4095) / 4096);
    return 0;
}
static int none_resident(void *addr, size_t len, unsigned char *vec) {
    (void)addr;
    memset(vec, 0, (len + 4095) / 4096);
    return 0;
}

START_TEST(move_pages_refused_uses_numa_maps) {
    const size_t len = 16 * 4096;
    uint8_t *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(buf != MAP_FAILED);
    memset(buf, 1, len);
    char text[512];
    snprintf(text, sizeof text,
             "1000 default anon=3 N0=3 kernelpagesize_kB=4\n"
             "%lx default anon=16 dirty=16 N0=4 N1=12 kernelpagesize_kB=4\n"
             "%lx default anon=5 N0=5 kernelpagesize_kB=4\n",
             (unsigned long)(uintptr_t)buf, (unsigned long)(uintptr_t)(buf + len + 4096 * 100));
    fake_maps_text = text;
    struct host_numa_ops ops = *host_numa_ops_real();
    ops.move_pages = eperm_move_pages;
    ops.open_numa_maps = fake_open_numa_maps;
    struct host_numa_share sh;
    struct strata_error err = {0};
    ck_assert_int_eq(host_numa_sample(&ops, buf, len, 8, &sh, &err), 0);
    ck_assert_str_eq(sh.source, "numa_maps");
    ck_assert_uint_eq(sh.on_node[0], 4); /* the mapping holding buf, not the one before or after */
    ck_assert_uint_eq(sh.on_node[1], 12);
    ck_assert(host_numa_share_of(&sh, 1) > 0.74 && host_numa_share_of(&sh, 1) < 0.76);
    ck_assert_int_eq(host_numa_share_top(&sh), 1);
    /* and numa_maps unreadable too: a clear error, no crash */
    fake_maps_text = NULL;
    err = (struct strata_error){0};
    ck_assert_int_eq(host_numa_sample(&ops, buf, len, 8, &sh, &err), STRATA_E_UNSUPPORTED);
    ck_assert(strstr(err.message, "move_pages refused"));
    /* move_pages allowed: per page */
    ops = *host_numa_ops_real();
    ops.move_pages = fake_move_pages;
    fake_node = -1;
    ck_assert_int_eq(host_numa_sample(&ops, buf, len, 8, &sh, &err), 0);
    ck_assert_str_eq(sh.source, "move_pages");
    ck_assert_uint_eq(sh.on_node[0], 4);
    ck_assert_uint_eq(sh.on_node[1], 4);
    /* nothing resident: nothing asked */
    ops.mincore = none_resident;
    ck_assert_int_eq(host_numa_sample(&ops, buf, len, 8, &sh, &err), 0);
    ck_assert_uint_eq(sh.resident, 0);
    ck_assert_str_eq(sh.source, "none");
    ck_assert_int_eq(host_numa_share_top(&sh), -1);
    /* mbind refused: 1, first touch alone */
    ops = *host_numa_ops_real();
    ops.mbind_preferred = eperm_mbind;
    ck_assert_int_eq(host_numa_prefer(&ops, buf, len, 0), 1);
    munmap(buf, len);
}
END_TEST

START_TEST(affinity_refused_runs_unbound) {
    struct host_numa_topo t;
    load_synthetic("pack:2 numa:1 core:4 pu:1", NULL, &t);
    struct host_numa_mode a = mode_of("auto"), sp = mode_of("split");
    struct host_numa_share sh = fake_share(0, 100, 0, 0);
    struct host_numa_plan p;
    struct strata_error err = {0};
    struct pool_params pp = pool_params_default();
    pp.n_threads = 4;
    struct pool *pool = pool_init(&pp, NULL);
    ck_assert_ptr_nonnull(pool);
    struct host_numa_ops ops = *host_numa_ops_real();
    ops.set_affinity = eperm_affinity;
    ck_assert_int_eq(host_numa_decide(&t, &sp, 4, &sh, -1, &p, &err), 0);
    ck_assert_int_eq(p.n_groups, 2);
    atomic_store(&affinity_calls, 0);
    ck_assert_int_eq(host_numa_apply(&p, pool, &ops, &err), STRATA_E_UNSUPPORTED);
    ck_assert(strstr(err.message, "refused"));
    ck_assert_int_eq(pool_n_groups(pool), 0); /* no split without the binding */
    ck_assert_int_ge(atomic_load(&affinity_calls), 4);
    /* allowed: every thread sets its own mask once, the pool gets its groups */
    ops.set_affinity = ok_affinity;
    atomic_store(&affinity_calls, 0);
    ck_assert_int_eq(host_numa_apply(&p, pool, &ops, &err), 0);
    ck_assert_int_eq(atomic_load(&affinity_calls), 4);
    ck_assert_int_eq(pool_n_groups(pool), 2);
    ck_assert_int_eq(pool_group_of(pool, 1), 1);
    ck_assert_int_eq(pool_group_of(pool, 2), 0);
    ck_assert_int_eq(host_numa_decide(&t, &a, 4, &sh, -1, &p, &err), 0);
    atomic_store(&affinity_calls, 0);
    ck_assert_int_eq(host_numa_apply(&p, pool, &ops, &err), 0);
    ck_assert_int_eq(atomic_load(&affinity_calls), 4);
    pool_free(pool);
}
END_TEST

/* The GPU in use named by its PCI address (what VK_EXT_pci_bus_info gives a
 * Vulkan device): the XML machine's 3D controller 0000:41:00.0 is local to
 * node 1, so auto binds every pool thread to node 1's CPUs (8-15) though
 * the weights sit on node 0; an address the topology lacks gives -1 (the
 * sample decides). */
static pthread_mutex_t seen_mu = PTHREAD_MUTEX_INITIALIZER;
static struct host_cpuset seen_cpus;
static int seen_affinity(const struct host_cpuset *c) {
    pthread_mutex_lock(&seen_mu);
    for (int i = 0; i < HOST_NUMA_MAX_CPUS; i++)
        if (host_cpuset_has(c, i))
            host_cpuset_add(&seen_cpus, i);
    pthread_mutex_unlock(&seen_mu);
    atomic_fetch_add(&affinity_calls, 1);
    return 0;
}

START_TEST(gpu_by_pci_binds_its_node) {
    struct host_numa_pci pci;
    struct strata_error err = {0};
    ck_assert_int_eq(host_numa_pci_parse("0000:41:00.0", &pci, &err), 0);
    ck_assert(pci.domain == 0 && pci.bus == 0x41 && pci.device == 0 && pci.function == 0);
    ck_assert_int_eq(host_numa_pci_parse("1:c1:1f.7", &pci, &err), 0);
    ck_assert(pci.domain == 1 && pci.bus == 0xc1 && pci.device == 0x1f && pci.function == 7);
    ck_assert_int_eq(host_numa_pci_parse("41:00.0", &pci, &err), 0);
    ck_assert(pci.domain == 0 && pci.bus == 0x41);
    static const char *const bad[] = {
        "",        "41",           "41:00",    "0000:41:00", "0000:41:00.0x",
        "g0:00.0", "0000:41:00:0", ":41:00.0", "0:0:0:0.0",  "0x41:00.0",
        " 41:00.0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_msg(host_numa_pci_parse(bad[i], &pci, &err) == STRATA_E_FORMAT, "%s", bad[i]);
        ck_assert(strstr(err.message, "not a PCI address"));
    }
    ck_assert_int_eq(host_numa_pci_parse("0000:41:20.0", &pci, &err), STRATA_E_RANGE);
    ck_assert_int_eq(host_numa_pci_parse("0000:141:00.0", &pci, &err), STRATA_E_RANGE);
    ck_assert_int_eq(host_numa_pci_parse("0000:41:00.8", &pci, &err), STRATA_E_RANGE);

    char path[512];
    snprintf(path, sizeof path, "%s/topo-2node-gpu1.xml", TEST_SRC_DIR);
    unsetenv("HWLOC_SYNTHETIC");
    setenv("HWLOC_XMLFILE", path, 1);
    struct host_numa_topo t;
    ck_assert_msg(host_numa_topo_detect(&t, NULL, &err) == 0, "%s", err.message);
    ck_assert_int_eq(t.n_gpus, 1);
    ck_assert(t.gpus[0].pci.bus == 0x41 && t.gpus[0].pci.device == 0);
    ck_assert_int_eq(host_numa_pci_parse("0000:41:00.0", &pci, &err), 0);
    const int gpu_node = host_numa_gpu_node_by_pci(&t, &pci);
    ck_assert_int_eq(gpu_node, 1);
    struct host_numa_pci other = pci;
    other.function = 1;
    ck_assert_int_eq(host_numa_gpu_node_by_pci(&t, &other), -1);
    ck_assert_int_eq(host_numa_gpu_node_by_pci(NULL, &pci), -1);

    struct host_numa_mode a = mode_of("auto");
    struct host_numa_share sh = fake_share(100, 0, 0, 0); /* the weights: node 0 */
    struct host_numa_plan p;
    ck_assert_int_eq(host_numa_decide(&t, &a, 4, &sh, gpu_node, &p, &err), 0);
    ck_assert_int_eq(p.n_groups, 1);
    ck_assert_int_eq(p.node[0], 1);
    ck_assert_msg(strstr(p.why, "GPU") && strstr(p.why, "node 1"), "%s", p.why);
    struct pool_params pp = pool_params_default();
    pp.n_threads = 4;
    struct pool *pool = pool_init(&pp, NULL);
    ck_assert_ptr_nonnull(pool);
    struct host_numa_ops ops = *host_numa_ops_real();
    ops.set_affinity = seen_affinity;
    host_cpuset_clear(&seen_cpus);
    atomic_store(&affinity_calls, 0);
    ck_assert_int_eq(host_numa_apply(&p, pool, &ops, &err), 0);
    ck_assert_int_eq(atomic_load(&affinity_calls), 4);
    char list[64];
    host_cpuset_format(&seen_cpus, list, sizeof list);
    for (int c = 0; c < 16; c++)
        ck_assert_msg(!host_cpuset_has(&seen_cpus, c) || c >= 8, "CPU %d of node 0 in %s", c, list);
    ck_assert_int_gt(host_cpuset_count(&seen_cpus), 0);
    /* no GPU in use: the weights' node */
    ck_assert_int_eq(
        host_numa_decide(&t, &a, 4, &sh, host_numa_gpu_node_by_pci(&t, &other), &p, &err), 0);
    ck_assert_int_eq(p.node[0], 0);
    pool_free(pool);
}
END_TEST

/* ---- pool groups ---- */

struct who {
    _Atomic int runs[4096];
    _Atomic int worker[4096];
    struct pool *pool;
};
static void note_rows(void *ctx, int64_t r0, int64_t r1, int worker) {
    struct who *w = ctx;
    for (int64_t r = r0; r < r1; r++) {
        atomic_fetch_add(&w->runs[r], 1);
        atomic_store(&w->worker[r], worker);
    }
}

START_TEST(pool_groups_rows) {
    struct pool_params pp = pool_params_default();
    pp.n_threads = 4;
    struct pool *pool = pool_init(&pp, NULL);
    ck_assert_ptr_nonnull(pool);
    const int bad[4] = {0, 0, 0, 0}, bad2[4] = {0, 2, 0, 1}, g[4] = {0, 1, 0, 1};
    ck_assert_int_eq(pool_set_groups(pool, 2, bad), STRATA_E_INVALID); /* group 1 empty */
    ck_assert_int_eq(pool_set_groups(pool, 2, bad2), STRATA_E_INVALID);
    ck_assert_int_eq(pool_set_groups(pool, 3, g), STRATA_E_INVALID);
    ck_assert_int_eq(pool_group_bound(pool, 1000, 0), 1000); /* no groups */
    ck_assert_int_eq(pool_set_groups(pool, 2, g), 0);
    ck_assert_int_eq(pool_group_bound(pool, 1000, 0), 480); /* 500 down to the 32-row floor */
    ck_assert_int_eq(pool_group_bound(pool, 1000, 1), 500);
    static struct who w1, w2;
    for (int rep = 0; rep < 50; rep++) {
        memset(&w1, 0, sizeof w1);
        memset(&w2, 0, sizeof w2);
        const int64_t bounds[3] = {0, 300, 3000};
        struct pool_task t[2] = {
            {.fn = note_rows, .ctx = &w1, .n_rows = 1000},
            {.fn = note_rows,
             .ctx = &w2,
             .n_rows = 3000,
             .min_grain = 1,
             .n_groups = 2,
             .group_bounds = bounds},
        };
        ck_assert_int_eq(pool_run(pool, t, 2), 0);
        for (int r = 0; r < 1000; r++) {
            ck_assert_int_eq(atomic_load(&w1.runs[r]), 1);
            ck_assert_int_eq(g[atomic_load(&w1.worker[r])], r < 480 ? 0 : 1);
        }
        for (int r = 0; r < 3000; r++) {
            ck_assert_int_eq(atomic_load(&w2.runs[r]), 1);
            ck_assert_int_eq(g[atomic_load(&w2.worker[r])], r < 300 ? 0 : 1);
        }
    }
    /* a job with fewer pieces than threads is not grouped, still runs every row once */
    memset(&w1, 0, sizeof w1);
    struct pool_task small = {.fn = note_rows, .ctx = &w1, .n_rows = 40};
    ck_assert_int_eq(pool_run(pool, &small, 1), 0);
    for (int r = 0; r < 40; r++)
        ck_assert_int_eq(atomic_load(&w1.runs[r]), 1);
    /* bounds outside the task are clamped */
    memset(&w1, 0, sizeof w1);
    const int64_t wild[3] = {0, 99999, 5};
    struct pool_task t3 = {.fn = note_rows,
                           .ctx = &w1,
                           .n_rows = 500,
                           .min_grain = 1,
                           .n_groups = 2,
                           .group_bounds = wild};
    ck_assert_int_eq(pool_run(pool, &t3, 1), 0);
    for (int r = 0; r < 500; r++) {
        ck_assert_int_eq(atomic_load(&w1.runs[r]), 1);
        ck_assert_int_eq(g[atomic_load(&w1.worker[r])], 0);
    }
    ck_assert_int_eq(pool_set_groups(pool, 0, NULL), 0);
    ck_assert_int_eq(pool_n_groups(pool), 0);
    pool_free(pool);
}
END_TEST

/* ---- page-cache placement ---- */

START_TEST(place_file_pages_moves_only_misplaced) {
    char path[] = "/tmp/strata-test-numa-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    const size_t len = 256 * 4096;
    uint8_t *data = malloc(len);
    for (size_t i = 0; i < len; i++)
        data[i] = (uint8_t)(i * 7);
    ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
    ck_assert_int_eq(fsync(fd), 0);
    uint8_t *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    ck_assert(map != MAP_FAILED);
    struct host_numa_topo t;
    load_synthetic("pack:1 numa:1 core:2 pu:1", NULL, &t);
    struct host_numa_mode sp = mode_of("split");
    struct host_numa_plan p;
    struct strata_error err = {0};
    ck_assert_int_eq(host_numa_decide(&t, &sp, 2, NULL, -1, &p, &err), 0);
    ck_assert(p.logical);
    struct pool_params pp = pool_params_default();
    pp.n_threads = 2;
    struct pool *pool = pool_init(&pp, NULL);
    ck_assert_int_eq(host_numa_apply(&p, pool, NULL, &err), 0);
    ck_assert_int_eq(pool_n_groups(pool), 2);
    const struct host_numa_span spans[2] = {{map, len / 2, 0, 0},
                                            {map + len / 2, len / 2, len / 2, 1}};
    struct host_numa_placement out;
    /* the pages the sample sees on the wanted node (node 0): nothing moves */
    struct host_numa_ops ops = *host_numa_ops_real();
    ops.move_pages = fake_move_pages;
    ops.mincore = all_resident;
    fake_node = 0;
    ck_assert_int_eq(host_numa_place_file_pages(&p, pool, &ops, fd, spans, 2, false, &out, &err),
                     0);
    ck_assert_uint_eq(out.bytes_moved, 0);
    ck_assert_uint_eq(out.bytes_filled, 0);
    ck_assert(out.share_before[0] == 1.0 && out.share_before[1] == 1.0);
    /* the sample says node 1 (the wrong one): both halves are dropped and re-read */
    fake_node = 1;
    ck_assert_int_eq(host_numa_place_file_pages(&p, pool, &ops, fd, spans, 2, false, &out, &err),
                     0);
    ck_assert_uint_eq(out.bytes_moved, len);
    ck_assert(out.share_before[0] == 0.0);
    /* real calls: the file was just written, cached on our one node; force moves all */
    ck_assert_int_eq(host_numa_place_file_pages(&p, pool, NULL, fd, spans, 2, false, &out, &err),
                     0);
    ck_assert_uint_eq(out.bytes_moved, 0);
    ck_assert_int_eq(host_numa_place_file_pages(&p, pool, NULL, fd, spans, 2, true, &out, &err), 0);
    ck_assert_uint_eq(out.bytes_moved + out.bytes_filled, len);
    ck_assert(out.share_after[0] > 0.99 && out.share_after[1] > 0.99);
    ck_assert_str_eq(out.source, "move_pages");
    /* the bytes read back are the file's */
    ck_assert_int_eq(memcmp(map, data, len), 0);
    /* dropped from the cache: the spans are filled by their groups */
    ck_assert_int_eq(madvise(map, len, MADV_DONTNEED), 0);
    ck_assert_int_eq(posix_fadvise(fd, 0, (off_t)len, POSIX_FADV_DONTNEED), 0);
    ck_assert_int_eq(host_numa_place_file_pages(&p, pool, NULL, fd, spans, 2, false, &out, &err),
                     0);
    ck_assert_uint_le(out.bytes_moved + out.bytes_filled, len);
    ck_assert(out.share_after[0] > 0.99);
    ck_assert_int_eq(memcmp(map, data, len), 0);
    munmap(map, len);
    close(fd);
    free(data);
    pool_free(pool);
}
END_TEST

static Suite *numa_suite(void) {
    Suite *s = suite_create("numa");
    TCase *tc = tcase_create("numa");
    tcase_add_test(tc, cpulist_parse_format);
    tcase_add_test(tc, numa_maps_lines);
    tcase_add_test(tc, mode_parse);
    tcase_add_test(tc, two_nodes_smt);
    tcase_add_test(tc, two_nodes_no_smt_and_four_nodes);
    tcase_add_test(tc, restricted_cpusets);
    tcase_add_test(tc, gpu_on_node1_xml);
    tcase_add_test(tc, one_node_split_is_logical);
    tcase_add_test(tc, real_single_node);
    tcase_add_test(tc, move_pages_refused_uses_numa_maps);
    tcase_add_test(tc, affinity_refused_runs_unbound);
    tcase_add_test(tc, gpu_by_pci_binds_its_node);
    tcase_add_test(tc, pool_groups_rows);
    tcase_add_test(tc, place_file_pages_moves_only_misplaced);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("numa", numa_suite)
