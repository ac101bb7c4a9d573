/* tests/engine/host/test-sysinfo.c: CPU and memory limits from fake cgroup v1/v2
 * and /proc trees built in a temp dir, and the thread policy over them
 * (engine/host/sysinfo.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/host/sysinfo.h"
#include "tests/harness.h"

#define GIB (1024LL * 1024 * 1024)
#define MIB (1024LL * 1024)

static char root[256];

/* mkdir -p for the parent of root/rel, then writes text there. */
static void put(const char *rel, const char *text) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            ck_assert(mkdir(path, 0755) == 0 || errno == EEXIST);
            *p = '/';
        }
    FILE *fp = fopen(path, "w");
    ck_assert_msg(fp != NULL, "cannot write %s", path);
    fputs(text, fp);
    fclose(fp);
}

static void setup(void) {
    snprintf(root, sizeof(root), "/tmp/strata-sysinfo-XXXXXX");
    ck_assert(mkdtemp(root) != NULL);
}

static void teardown(void) {
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    ck_assert_int_eq(system(cmd), 0);
}

static struct sysinfo_limits read_root(int n_affinity) {
    struct sysinfo_params p = sysinfo_params_default();
    p.root = root;
    p.n_affinity = n_affinity;
    struct sysinfo_limits lim;
    struct strata_error err = {0};
    ck_assert_int_eq(sysinfo_read(&p, &lim, &err), 0);
    return lim;
}

#define MEMINFO_4G "MemTotal:       8388608 kB\nMemFree:  100 kB\nMemAvailable:   4194304 kB\n"

START_TEST(cgroup_v2_leaf_and_parent) {
    put("proc/self/cgroup", "0::/system.slice/strata.service\n");
    put("proc/self/mountinfo", "22 1 0:21 / / rw - ext4 /dev/sda1 rw\n"
                               "31 22 0:28 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 "
                               "rw,nsdelegate\n");
    put("sys/fs/cgroup/cpu.max", "max 100000\n");
    put("sys/fs/cgroup/system.slice/cpu.max", "max 100000\n");
    put("sys/fs/cgroup/system.slice/strata.service/cpu.max", "150000 100000\n");
    put("sys/fs/cgroup/system.slice/memory.max", "1073741824\n"); /* the parent binds */
    put("sys/fs/cgroup/system.slice/strata.service/memory.max", "max\n");
    put("proc/meminfo", MEMINFO_4G);
    struct sysinfo_limits l = read_root(8);
    ck_assert_int_eq(l.cgroup_version, 2);
    ck_assert_int_eq(l.n_cpus_affinity, 8);
    ck_assert_int_eq(l.n_cpus_cgroup, 2); /* ceil(1.5) */
    ck_assert_double_eq_tol(l.cpu_quota, 1.5, 1e-9);
    ck_assert_int_eq(l.n_cpus, 2);
    ck_assert_str_eq(l.cpu_source, "cgroup");
    ck_assert_int_eq(l.mem_cgroup, GIB);
    ck_assert_int_eq(l.mem_available, 4 * GIB);
    ck_assert_int_eq(l.mem_budget, GIB);
    ck_assert_str_eq(l.mem_source, "cgroup");
    const char *src = NULL;
    ck_assert_int_eq(sysinfo_effective_threads(0, NULL, &l, &src), 1);
    ck_assert_str_eq(src, "cgroup");
}
END_TEST

START_TEST(cgroup_v2_namespace_root) {
    /* inside a container with its own cgroup namespace: "0::/" and the
     * container's limits on the mount point itself */
    put("proc/self/cgroup", "0::/\n");
    put("proc/self/mountinfo", "31 22 0:28 / /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n");
    put("sys/fs/cgroup/cpu.max", "400000 100000\n");
    put("sys/fs/cgroup/memory.max", "536870912\n");
    put("proc/meminfo", MEMINFO_4G);
    struct sysinfo_limits l = read_root(64);
    ck_assert_int_eq(l.n_cpus, 4);
    ck_assert_str_eq(l.cpu_source, "cgroup");
    ck_assert_int_eq(l.mem_budget, 512 * MIB);
    const char *src = NULL;
    ck_assert_int_eq(sysinfo_effective_threads(0, NULL, &l, &src), 3);
    ck_assert_str_eq(src, "cgroup");
}
END_TEST

START_TEST(cgroup_v1_docker) {
    /* v1 without a cgroup namespace: the path is /docker/<id> and the mount's
     * root is that same cgroup, so the files sit on the mount point */
    put("proc/self/cgroup", "12:pids:/docker/abc\n"
                            "4:memory:/docker/abc\n"
                            "2:cpu,cpuacct:/docker/abc\n"
                            "1:name=systemd:/docker/abc\n");
    put("proc/self/mountinfo",
        "40 31 0:29 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro master:12 - cgroup cgroup "
        "rw,cpu,cpuacct\n"
        "41 31 0:30 /docker/abc /sys/fs/cgroup/memory ro master:13 - cgroup cgroup rw,memory\n"
        "42 31 0:31 /docker/abc /sys/fs/cgroup/pids ro - cgroup cgroup rw,pids\n");
    put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "250000\n");
    put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    put("sys/fs/cgroup/memory/memory.limit_in_bytes", "536870912\n");
    put("proc/meminfo", "MemAvailable:     262144 kB\n"); /* less than the limit */
    struct sysinfo_limits l = read_root(16);
    ck_assert_int_eq(l.cgroup_version, 1);
    ck_assert_int_eq(l.n_cpus_cgroup, 3); /* ceil(2.5) */
    ck_assert_int_eq(l.n_cpus, 3);
    ck_assert_int_eq(l.mem_cgroup, 512 * MIB);
    ck_assert_int_eq(l.mem_budget, 256 * MIB);
    ck_assert_str_eq(l.mem_source, "meminfo");
}
END_TEST

START_TEST(cgroup_v1_nested_path_unlimited) {
    /* host view, nested cgroup, "no limit" values: -1 quota, page-rounded INT64_MAX */
    put("proc/self/cgroup", "4:memory:/a/b\n3:cpu:/a/b\n");
    put("proc/self/mountinfo", "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
                               "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
    put("sys/fs/cgroup/cpu/a/b/cpu.cfs_quota_us", "-1\n");
    put("sys/fs/cgroup/cpu/a/b/cpu.cfs_period_us", "100000\n");
    put("sys/fs/cgroup/memory/a/b/memory.limit_in_bytes", "9223372036854771712\n");
    put("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    put("proc/meminfo", MEMINFO_4G);
    struct sysinfo_limits l = read_root(4);
    ck_assert_int_eq(l.n_cpus_cgroup, 0);
    ck_assert_int_eq(l.n_cpus, 4);
    ck_assert_str_eq(l.cpu_source, "affinity");
    ck_assert_int_eq(l.mem_cgroup, -1);
    ck_assert_int_eq(l.mem_budget, 4 * GIB);
    ck_assert_str_eq(l.mem_source, "meminfo");
    const char *src = NULL;
    ck_assert_int_eq(sysinfo_effective_threads(0, NULL, &l, &src), 3);
    ck_assert_str_eq(src, "affinity");

    /* a quota on the parent /a binds /a/b */
    put("sys/fs/cgroup/cpu/a/cpu.cfs_quota_us", "100001\n");
    put("sys/fs/cgroup/cpu/a/cpu.cfs_period_us", "100000\n");
    put("sys/fs/cgroup/memory/a/memory.limit_in_bytes", "2147483648\n");
    l = read_root(4);
    ck_assert_int_eq(l.n_cpus_cgroup, 2); /* ceil(1.00001) */
    ck_assert_int_eq(l.n_cpus, 2);
    ck_assert_int_eq(l.mem_budget, 2 * GIB);
    ck_assert_str_eq(l.mem_source, "cgroup");
}
END_TEST

START_TEST(hybrid_and_quota_above_affinity) {
    /* hybrid: v1 controllers plus an empty v2 tree; a quota of 8 CPUs on a
     * task pinned to 2 CPUs: the mask is the limit */
    put("proc/self/cgroup", "3:cpu:/\n0::/\n");
    put("proc/self/mountinfo", "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
                               "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n");
    put("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "800000\n");
    put("sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
    struct sysinfo_limits l = read_root(2);
    ck_assert_int_eq(l.cgroup_version, 12);
    ck_assert_int_eq(l.n_cpus_cgroup, 8);
    ck_assert_int_eq(l.n_cpus, 2);
    ck_assert_str_eq(l.cpu_source, "affinity");
    ck_assert_int_eq(l.mem_budget, -1); /* no meminfo, no limit: unknown */
    ck_assert_str_eq(l.mem_source, "unknown");
}
END_TEST

START_TEST(missing_and_garbled_files) {
    struct sysinfo_limits l = read_root(3); /* empty tree */
    ck_assert_int_eq(l.cgroup_version, 0);
    ck_assert_int_eq(l.n_cpus, 3);
    ck_assert_int_eq(l.mem_budget, -1);

    put("proc/self/cgroup", "garbage\n::\n0::relative\n0::/x\n1:cpu\n");
    put("proc/self/mountinfo", "1 2 3\n - \n31 22 0:28 / /sys/fs/cgroup rw - cgroup2\n"
                               "a b c d e f g h i j k l m n o p\n");
    put("sys/fs/cgroup/x/cpu.max", "lots 100000\n");
    put("sys/fs/cgroup/x/memory.max", "-5\n");
    put("proc/meminfo", "MemAvailable: many kB\n");
    l = read_root(3);
    ck_assert_int_eq(l.n_cpus_cgroup, 0);
    ck_assert_int_eq(l.n_cpus, 3);
    ck_assert_int_eq(l.mem_cgroup, -1);
    ck_assert_int_eq(l.mem_available, -1);

    put("sys/fs/cgroup/x/cpu.max", "100000 0\n"); /* zero period */
    put("sys/fs/cgroup/x/memory.max", "12abc\n");
    l = read_root(3);
    ck_assert_int_eq(l.n_cpus_cgroup, 0);
    ck_assert_int_eq(l.mem_cgroup, -1);

    /* a very long line is read in pieces, never overflowing */
    char *big = malloc(20000);
    ck_assert_ptr_nonnull(big);
    memset(big, 'a', 19999);
    big[19999] = '\0';
    put("proc/self/mountinfo", big);
    put("proc/self/cgroup", big);
    free(big);
    l = read_root(3);
    ck_assert_int_eq(l.n_cpus, 3);
}
END_TEST

START_TEST(effective_threads_precedence) {
    struct sysinfo_limits l = {0};
    l.n_cpus = 64;
    l.cpu_source = "affinity";
    const char *src = NULL;
    ck_assert_int_eq(sysinfo_effective_threads(5, "cli", &l, &src), 5);
    ck_assert_str_eq(src, "cli");
    ck_assert_int_eq(sysinfo_effective_threads(7, "env", &l, &src), 7);
    ck_assert_str_eq(src, "env");
    ck_assert_int_eq(sysinfo_effective_threads(100, "file", &l, &src), SYSINFO_MAX_THREADS);
    ck_assert_str_eq(src, "file");
    ck_assert_int_eq(sysinfo_effective_threads(0, NULL, &l, &src), 32); /* 63, capped */
    ck_assert_str_eq(src, "affinity");
    l.n_cpus = 1;
    ck_assert_int_eq(sysinfo_effective_threads(0, NULL, &l, &src), 1); /* at least 1 */
    ck_assert_int_eq(sysinfo_effective_threads(0, NULL, NULL, &src), 1);
}
END_TEST

/* sysinfo_threads: the one policy of `strata run` and `strata serve` on a
 * fake tree: a setting wins (its source kept), capped at 32; auto is the
 * cgroup quota or the affinity mask (whichever binds) minus one. */
START_TEST(thread_policy) {
    put("proc/self/cgroup", "0::/\n");
    put("proc/self/mountinfo", "31 22 0:28 / /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n");
    put("sys/fs/cgroup/cpu.max", "600000 100000\n"); /* --cpus 6 */
    put("proc/meminfo", MEMINFO_4G);
    struct sysinfo_params p = sysinfo_params_default();
    p.root = root;
    p.n_affinity = 64;
    struct sysinfo_limits lim;
    struct sysinfo_threads th;
    struct strata_error err = {0};
    ck_assert_int_eq(sysinfo_threads(&p, 0, NULL, &lim, &th, &err), 0);
    ck_assert_int_eq(th.n_threads, 5); /* 6 CPUs of quota - 1 */
    ck_assert_str_eq(th.source, "cgroup");
    ck_assert(!th.capped);
    ck_assert_int_eq(lim.n_cpus, 6);
    ck_assert_int_eq(lim.mem_budget, 4 * GIB);
    ck_assert_int_eq(sysinfo_threads(&p, 3, "env", NULL, &th, &err), 0);
    ck_assert_int_eq(th.n_threads, 3); /* a setting beats the quota, even below it */
    ck_assert_str_eq(th.source, "env");
    ck_assert_int_eq(sysinfo_threads(&p, 12, "cli", NULL, &th, &err), 0);
    ck_assert_int_eq(th.n_threads, 12); /* ... and above it: the user asked */
    ck_assert_str_eq(th.source, "cli");
    ck_assert_int_eq(sysinfo_threads(&p, 500, "file", NULL, &th, &err), 0);
    ck_assert_int_eq(th.n_threads, SYSINFO_MAX_THREADS);
    ck_assert_str_eq(th.source, "file");
    ck_assert(th.capped);
    put("sys/fs/cgroup/cpu.max", "max 100000\n"); /* no quota: the mask binds */
    ck_assert_int_eq(sysinfo_threads(&p, 0, NULL, NULL, &th, &err), 0);
    ck_assert_int_eq(th.n_threads, SYSINFO_MAX_THREADS); /* 63, capped */
    ck_assert_str_eq(th.source, "affinity");
    ck_assert(th.capped);
    p.n_affinity = 1;
    ck_assert_int_eq(sysinfo_threads(&p, 0, NULL, NULL, &th, &err), 0);
    ck_assert_int_eq(th.n_threads, 1); /* at least one */
    /* the real system through the defaults (params NULL) */
    ck_assert_int_eq(sysinfo_threads(NULL, 0, NULL, &lim, &th, &err), 0);
    ck_assert_int_ge(th.n_threads, 1);
    ck_assert_int_le(th.n_threads, lim.n_cpus > 1 ? lim.n_cpus - 1 : 1);
    p.root = "";
    ck_assert_int_eq(sysinfo_threads(&p, 0, NULL, NULL, &th, &err), STRATA_E_INVALID);
}
END_TEST

START_TEST(parse_cpu_max) {
    ck_assert_double_eq_tol(sysinfo_parse_cpu_max("max 100000\n"), 0, 1e-12);
    ck_assert_double_eq_tol(sysinfo_parse_cpu_max("50000 100000\n"), 0.5, 1e-12);
    ck_assert_double_eq_tol(sysinfo_parse_cpu_max("200000"), 2.0, 1e-12);
    ck_assert_double_eq_tol(sysinfo_parse_cpu_max("x 100000"), -1, 1e-12);
    ck_assert_double_eq_tol(sysinfo_parse_cpu_max("100 0"), -1, 1e-12);
    ck_assert_double_eq_tol(sysinfo_parse_cpu_max(""), -1, 1e-12);
    ck_assert_double_eq_tol(sysinfo_parse_cpu_max(NULL), -1, 1e-12);
}
END_TEST

START_TEST(real_system_and_bad_params) {
    struct sysinfo_params p = sysinfo_params_default();
    struct sysinfo_limits l;
    struct strata_error err = {0};
    ck_assert_int_eq(sysinfo_read(&p, &l, &err), 0);
    ck_assert_int_ge(l.n_cpus_affinity, 1);
    ck_assert_int_ge(l.n_cpus, 1);
    ck_assert_int_le(l.n_cpus, l.n_cpus_affinity);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    ck_assert_int_le(l.n_cpus_affinity, online);
    ck_assert_int_gt(l.mem_available, 0); /* every Linux since 3.14 has MemAvailable */
    ck_assert_int_gt(l.mem_budget, 0);
    p.root = NULL;
    ck_assert_int_eq(sysinfo_read(&p, &l, &err), STRATA_E_INVALID);
    ck_assert_int_eq(sysinfo_read(NULL, &l, NULL), STRATA_E_INVALID);
}
END_TEST

static Suite *sysinfo_suite(void) {
    Suite *s = suite_create("sysinfo");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, cgroup_v2_leaf_and_parent);
    tcase_add_test(tc, cgroup_v2_namespace_root);
    tcase_add_test(tc, cgroup_v1_docker);
    tcase_add_test(tc, cgroup_v1_nested_path_unlimited);
    tcase_add_test(tc, hybrid_and_quota_above_affinity);
    tcase_add_test(tc, missing_and_garbled_files);
    tcase_add_test(tc, effective_threads_precedence);
    tcase_add_test(tc, thread_policy);
    tcase_add_test(tc, parse_cpu_max);
    tcase_add_test(tc, real_system_and_bad_params);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("sysinfo", sysinfo_suite)
