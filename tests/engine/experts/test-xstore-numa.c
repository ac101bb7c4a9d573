/* tests/engine/experts/test-xstore-numa.c: the expert store's RAM tier laid
 * out per node under --numa split (engine/experts/xstore-numa.c), on the
 * pool's two logical halves (every machine here has one NUMA node; --numa
 * split gives the pool the same groups there):
 * - the slots are cut into two regions by the groups' threads, each region
 *   first-touched by its group, registered as that group's memory; an
 *   mbind refused with EPERM falls back to first touch alone;
 * - an expert's slot comes from its home region (host_numa_home_rule), the
 *   victim from within that region (the odd experts stay resident while the
 *   even ones evict each other, where one global LRU would take the odd,
 *   older ones), and only a region whose every slot is held sends an expert
 *   to the other region;
 * - the model on the split store gives the same logits, bit for bit, as the
 *   model with every expert resident and no groups, on every ISA the host
 *   runs, and the MoE division computes experts on both groups. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/cpu/backend-cpu.h"
#include "engine/cpu/cpu-moe-numa.h"
#include "engine/cpu/kernels.h"
#include "engine/experts/experts.h"
#include "engine/experts/xstore-numa.h"
#include "engine/experts/xstore.h"
#include "engine/gguf/gguf.h"
#include "engine/host/numa-homes.h"
#include "engine/host/numa.h"
#include "engine/host/pool.h"
#include "engine/kv/kv.h"
#include "engine/model/model.h"
#include "tests/engine/model/model-spec.h"
#include "tests/harness.h"

/* A qwen3moe slot: three 2176-byte Q8_0 matrices widened to 8 KiB each. */
#define QSLOT (3 * 8192)

static struct pool *split_pool(void) {
    struct pool_params pp = pool_params_default();
    pp.n_threads = 4;
    struct pool *pool = pool_init(&pp, NULL);
    ck_assert(pool != NULL);
    const int groups[4] = {0, 1, 0, 1}; /* as --numa split: odd workers group 1 */
    ck_assert_int_eq(pool_set_groups(pool, 2, groups), 0);
    return pool;
}

static _Atomic int mbind_calls;
static long eperm_mbind(void *addr, unsigned long len, int node) {
    (void)addr, (void)len, (void)node;
    atomic_fetch_add(&mbind_calls, 1);
    errno = EPERM;
    return -1;
}

/* The region (group) of the slot serving (layer, e) in step. */
static int region_of(struct experts_source *src, int layer, int e, uint64_t step) {
    struct experts_ref r;
    struct strata_error err = {0};
    ck_assert_msg(experts_get(src, layer, e, EXPERTS_GATE, step, &r, &err) == 0, "%s", err.message);
    ck_assert_int_eq(r.tier, EXPERTS_TIER_RAM);
    return host_numa_home_of(r.mat.host.data);
}

static void need(struct experts_source *src, int layer, const int32_t *ids, int n, uint64_t step) {
    struct strata_error err = {0};
    ck_assert_msg(experts_need(src, layer, ids, n, step, &err) == 0, "%s", err.message);
}

START_TEST(slots_per_node) {
    struct spec s = spec_of("qwen3moe"); /* 2 layers, 8 experts, top 3 */
    char path[256];
    tmp_path(path, sizeof path, "xsnuma");
    write_model(path, &s);
    struct strata_error err = {0};
    struct gguf_file *f = gguf_open(path, &err);
    ck_assert_msg(f != NULL, "%s", err.message);
    struct pool *pool = split_pool();
    struct host_numa_ops ops = *host_numa_ops_real();
    ops.mbind_preferred = eperm_mbind;
    struct xstore_params xp = xstore_params_default();
    xp.ram_bytes = 6 * QSLOT; /* 3 slots a region */
    xp.io = XSTORE_IO_PREAD;
    xp.direct = XSTORE_DIRECT_OFF;
    xp.pool = pool;
    xp.numa_ops = &ops;
    struct experts_file_params fp = {.queue = 0};
    struct experts_source *file = experts_file_init(f, 2, &fp, &err);
    ck_assert(file != NULL);
    struct experts_source *src = xstore_init(f, 2, 3, file, &xp, &err);
    ck_assert_msg(src != NULL, "%s", err.message);
    struct xs_numa_info in;
    xs_numa_info(xstore_numa(xstore_of(src)), &in);
    ck_assert_int_eq(in.n_regions, 2);
    ck_assert_int_eq(in.slots[0], 3);
    ck_assert_int_eq(in.slots[1], 3);
    ck_assert_str_eq(in.placement, "first touch (mbind refused)");
    ck_assert_int_eq(atomic_load(&mbind_calls), 2); /* one a region */
    ck_assert_uint_eq(in.touched_bytes, 6 * QSLOT);
    ck_assert_int_eq(host_numa_homes_count(), 2);

    /* step 1: the odd experts of layer 0 -> region 1 */
    const int32_t odd[2] = {1, 3}, even[4] = {0, 2, 4, 6};
    need(src, 0, odd, 2, 1);
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(region_of(src, 0, odd[k], 1), 1);
    experts_release(src, 1);
    /* step 2: three even ones fill region 0 */
    need(src, 0, even, 3, 2);
    for (int k = 0; k < 3; k++)
        ck_assert_int_eq(region_of(src, 0, even[k], 2), 0);
    experts_release(src, 2);
    /* step 3: two even experts of layer 1: region 0 is full, region 1 has
     * a free slot; the victims come from region 0 (the oldest even ones of
     * layer 0, over the floor of 3), not the older odd ones */
    need(src, 1, even, 2, 3);
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(region_of(src, 1, even[k], 3), 0);
    experts_release(src, 3);
    struct xstore_stats st;
    xstore_stats(xstore_of(src), &st);
    ck_assert_uint_eq(st.evictions, 2);
    ck_assert_int_eq(st.slots_used, 6 - 1);
    const uint64_t hits = st.hits;
    xstore_stats_free(&st);
    need(src, 0, odd, 2, 4); /* still resident */
    experts_release(src, 4);
    xstore_stats(xstore_of(src), &st);
    ck_assert_uint_eq(st.hits, hits + 2);
    xstore_stats_free(&st);
    /* step 5: a batch of four even experts of layer 1: three fill region 0
     * (layer 0's expert 4 evicted there), the fourth finds every region-0
     * slot held and goes to region 1's free slot: it is region 1's */
    need(src, 1, even, 4, 5);
    for (int k = 0; k < 3; k++)
        ck_assert_int_eq(region_of(src, 1, even[k], 5), 0);
    ck_assert_int_eq(region_of(src, 1, 6, 5), 1);
    experts_release(src, 5);

    experts_free(src);
    ck_assert_int_eq(host_numa_homes_count(), 0); /* unregistered with the store */
    /* no groups: one region, nothing registered or touched */
    ck_assert_int_eq(pool_set_groups(pool, 0, NULL), 0);
    file = experts_file_init(f, 2, &fp, &err);
    src = xstore_init(f, 2, 3, file, &xp, &err);
    ck_assert(src != NULL);
    ck_assert_ptr_null(xstore_numa(xstore_of(src)));
    ck_assert_int_eq(host_numa_homes_count(), 0);
    experts_free(src);
    pool_free(pool);
    gguf_close(f);
    unlink(path);
}
END_TEST

#define N_TOK 6
#define N_DEC 4

/* Prefill then greedy decode; the logits of every row. */
static float *run_model(const char *path, struct pool *pool, const struct xstore_params *xp,
                        struct cpu_moe_numa_stats *div, struct xstore_stats *st) {
    struct strata_error err = {0};
    struct backend_cpu_params cp = backend_cpu_params_default();
    cp.pool = pool;
    struct backend *be = backend_cpu_init(&cp, &err);
    ck_assert(be != NULL);
    struct model_params mp = model_params_default();
    mp.backend = be;
    mp.pool = pool;
    mp.n_ctx_max = 32;
    mp.n_batch_max = 8;
    mp.xstore = xp;
    struct model *m = model_load(path, &mp, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    const int V = model_n_vocab(m);
    struct kv_cache *kv = model_kv_init(m, 1, 0, &err);
    float *out = calloc((size_t)(N_TOK + N_DEC), (size_t)V * sizeof(float));
    struct model_batch_entry e[N_TOK];
    for (int i = 0; i < N_TOK; i++)
        e[i] = (struct model_batch_entry){0, i, (i * 17 + 3) % V, true};
    ck_assert_msg(model_forward(m, kv, &(struct model_batch){e, N_TOK}, out, &err) == 0, "%s",
                  err.message);
    for (int s = 0; s < N_DEC; s++) {
        const float *prev = out + (size_t)(N_TOK - 1 + s) * V;
        int best = 0;
        for (int v = 1; v < V; v++)
            best = prev[v] > prev[best] ? v : best;
        struct model_batch_entry d = {0, N_TOK + s, best, true};
        ck_assert_msg(model_forward(m, kv, &(struct model_batch){&d, 1},
                                    out + (size_t)(N_TOK + s) * V, &err) == 0,
                      "%s", err.message);
    }
    if (st)
        xstore_stats(xstore_of(model_experts(m)), st);
    ck_assert_int_eq(backend_cpu_moe_numa_stats(be, div), 0);
    kv_free(kv);
    model_free(m);
    backend_free(be);
    return out;
}

/* Experts wide enough for the pool to get their rows (a 512 x 1024 Q8_0
 * matrix is 557 KB, over the backend's 256 KB run inline). */
START_TEST(split_store_same_logits) {
    struct spec s = spec_of("qwen3moe");
    s.n_embd = 1024, s.n_head = s.n_head_kv = 2, s.head_dim = 64, s.n_layer = 1;
    s.n_expert = 8, s.n_expert_used = 3, s.n_ff_exp = 512;
    char path[256];
    tmp_path(path, sizeof path, "xsnuma-model");
    write_model(path, &s);
    const size_t n = (size_t)(N_TOK + N_DEC) * 96 * sizeof(float);
    const enum kernels_isa saved = kernels_isa_active();
    for (int isa = 0; isa <= (int)kernels_isa_detected(); isa++) {
        kernels_isa_force((enum kernels_isa)isa);
        struct pool_params pp = pool_params_default();
        pp.n_threads = 4;
        struct pool *plain = pool_init(&pp, NULL);
        struct cpu_moe_numa_stats d0, d1;
        float *want = run_model(path, plain, NULL, &d0, NULL);
        pool_free(plain);
        struct pool *pool = split_pool();
        struct xstore_params xp = xstore_params_default();
        /* 4 slots: 2 a region, evictions every step (each slot: three
         * 557 KB matrices widened to 4 KiB on both ends) */
        xp.ram_bytes = 4 * 3 * ((557056 + 4095) / 4096 * 4096 + 4096);
        xp.io = XSTORE_IO_PREAD;
        struct xstore_stats st;
        float *got = run_model(path, pool, &xp, &d1, &st);
        ck_assert_msg(memcmp(got, want, n) == 0, "%s: split store logits differ",
                      kernels_isa_name((enum kernels_isa)isa));
        ck_assert(st.n_slots >= 4 && st.n_slots <= 5);
        ck_assert_uint_gt(st.evictions, 0);
        ck_assert_uint_eq(st.read_errors, 0);
        ck_assert_uint_eq(d0.calls, 0);
        ck_assert_uint_eq(d1.calls, 1 + N_DEC);
        ck_assert_uint_gt(d1.experts[0], 0);
        ck_assert_uint_gt(d1.experts[1], 0);
        ck_assert_int_eq(host_numa_homes_count(), 0);
        xstore_stats_free(&st);
        free(got);
        free(want);
        pool_free(pool);
    }
    kernels_isa_force(saved);
    unlink(path);
}
END_TEST

static Suite *xstore_numa_suite(void) {
    Suite *s = suite_create("xstore-numa");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, slots_per_node);
    tcase_add_test(tc, split_store_same_logits);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("xstore-numa", xstore_numa_suite)
