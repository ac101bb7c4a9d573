/* tests/engine/cpu/test-moe-numa.c: routed experts divided whole between the
 * two groups of --numa split (engine/cpu/cpu-moe-numa.h): the home rule,
 * the division's balance on balanced and skewed routing (and that no single
 * move would improve it), the table of memory homes, and a synthesized
 * qwen3moe giving the same logits bit for bit with the pool split in two
 * logical halves as without groups, on every ISA the host runs, arena and
 * file layouts. Every machine here has one NUMA node: the groups are the
 * pool's (pool_set_groups), as --numa split sets them on one node. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/cpu/backend-cpu.h"
#include "engine/cpu/cpu-moe-numa.h"
#include "engine/cpu/kernels.h"
#include "engine/host/numa-homes.h"
#include "engine/host/pool.h"
#include "engine/kv/kv.h"
#include "engine/gguf/gguf.h"
#include "engine/host/numa.h"
#include "engine/model/model-numa.h"
#include "engine/model/model.h"
#include "tests/engine/model/model-helper.h"
#include "tests/engine/model/model-spec.h"
#include "tests/harness.h"

START_TEST(home_rule) {
    const int even[2] = {1, 1}, two_one[2] = {2, 1}, one_two[2] = {1, 2}, all0[2] = {3, 0};
    for (int e = 0; e < 12; e++) {
        ck_assert_int_eq(host_numa_home_rule(e, even), e % 2);
        ck_assert_int_eq(host_numa_home_rule(e, two_one), e % 3 == 2);
        ck_assert_int_eq(host_numa_home_rule(e, one_two), e % 3 != 0);
        ck_assert_int_eq(host_numa_home_rule(e, all0), 0);
    }
    /* the shares follow the threads over any run of experts */
    int n1 = 0;
    const int t[2] = {5, 3};
    for (int e = 0; e < 128; e++)
        n1 += host_numa_home_rule(e, t);
    ck_assert_int_eq(n1, 128 * 3 / 8);
}
END_TEST

/* The slower group's cost per thread of a division (as divide counts it). */
static double span_of(int ne, const int *cnt, const int8_t *home, const int8_t *g, const int th[2],
                      double r) {
    double load[2] = {0, 0};
    for (int e = 0; e < ne; e++)
        if (cnt[e] > 0)
            load[g[e]] += home[e] == g[e] ? cnt[e] : r * cnt[e];
    return fmax(load[0] / th[0], load[1] / th[1]);
}

/* No single move of one expert lowers the span any more. */
static void assert_no_better_move(int ne, const int *cnt, const int8_t *home, int8_t *g,
                                  const int th[2], double r, double span) {
    for (int e = 0; e < ne; e++) {
        if (cnt[e] <= 0)
            continue;
        g[e] ^= 1;
        const double s = span_of(ne, cnt, home, g, th, r);
        g[e] ^= 1;
        ck_assert_msg(s >= span - 1e-9, "moving expert %d gives %g < %g", e, s, span);
    }
}

START_TEST(divide_balanced_moves_nothing) {
    /* decode, top 8 of 16, four picks homed on each group */
    int cnt[16] = {0};
    int8_t home[16], g[16];
    const int th[2] = {1, 1};
    for (int e = 0; e < 16; e++)
        home[e] = (int8_t)host_numa_home_rule(e, th);
    for (int e = 0; e < 8; e++)
        cnt[e] = 1;
    struct cpu_moe_numa_stats st = {0};
    const double s = cpu_moe_numa_divide(16, cnt, home, th, CPU_MOE_REMOTE_COST, g, &st);
    ck_assert(fabs(s - 4.0) < 1e-9);
    for (int e = 0; e < 8; e++)
        ck_assert_int_eq(g[e], home[e]);
    ck_assert_uint_eq(st.moved, 0);
    ck_assert_uint_eq(st.picks[0], 4);
    ck_assert_uint_eq(st.picks[1], 4);
    ck_assert_uint_eq(st.experts[0], 4);
    ck_assert_uint_eq(st.calls, 1);
    ck_assert(fabs(st.span / st.ideal - 1.0) < 1e-9);
}
END_TEST

/* Skewed routing: a decode step picks 8 experts all homed on group 0.
 * Divided by home only, group 1 idles and the step costs 8 picks; moving
 * three of them (remote: 1.76 each) gives max(5, 5.28) = 5.28: the best
 * division of whole experts (2 moves: 6; 4: 7.04). */
START_TEST(divide_skewed_decode) {
    int cnt[16] = {0};
    int8_t home[16], g[16];
    const int th[2] = {1, 1};
    for (int e = 0; e < 16; e++)
        home[e] = (int8_t)host_numa_home_rule(e, th);
    for (int e = 0; e < 16; e += 2)
        cnt[e] = 1; /* the even experts: all group 0's */
    struct cpu_moe_numa_stats st = {0};
    const double s = cpu_moe_numa_divide(16, cnt, home, th, CPU_MOE_REMOTE_COST, g, &st);
    ck_assert_msg(fabs(s - 3 * CPU_MOE_REMOTE_COST) < 1e-9, "span %g", s);
    ck_assert_uint_eq(st.moved, 3);
    ck_assert_uint_eq(st.picks[0], 5);
    ck_assert_uint_eq(st.picks[1], 3);
    /* the balance figure: 5.28 / 4 (every pick at home, both groups busy) */
    ck_assert(fabs(st.span / st.ideal - 1.32) < 1e-9);
    ck_assert(fabs(st.home_span / st.ideal - 2.0) < 1e-9); /* 8 picks on one thread */
    assert_no_better_move(16, cnt, home, g, th, CPU_MOE_REMOTE_COST, s);
    /* with remote reads free (one node: the logical halves) 4 move */
    memset(&st, 0, sizeof st);
    ck_assert(fabs(cpu_moe_numa_divide(16, cnt, home, th, 1.0, g, &st) - 4.0) < 1e-9);
    ck_assert_uint_eq(st.moved, 4);
}
END_TEST

/* A batch where one expert is hot (picked by 20 tokens) and the others get
 * a pick or two: counting experts (8 a side) would leave one group with 20
 * more picks; counting picks puts the hot expert alone on its home group
 * and moves the cold ones of that group away. */
START_TEST(divide_skewed_batch) {
    int cnt[8] = {20, 2, 1, 2, 1, 2, 1, 2};
    int8_t home[8], g[8];
    const int th[2] = {2, 2};
    for (int e = 0; e < 8; e++)
        home[e] = (int8_t)(e % 2); /* 0, 2, 4, 6 on group 0: 23 picks vs 8 */
    struct cpu_moe_numa_stats st = {0};
    const double s = cpu_moe_numa_divide(8, cnt, home, th, CPU_MOE_REMOTE_COST, g, &st);
    ck_assert_int_eq(g[0], 0);
    for (int e = 1; e < 8; e += 2)
        ck_assert_int_eq(g[e], 1); /* group 1 keeps its own */
    for (int e = 2; e < 8; e += 2)
        ck_assert_int_eq(g[e], 1);    /* the cold ones of group 0 move */
    ck_assert(fabs(s - 10.0) < 1e-9); /* the hot expert alone: 20 picks on 2 threads */
    ck_assert_uint_eq(st.picks[0], 20);
    ck_assert_uint_eq(st.picks[1], 11);
    assert_no_better_move(8, cnt, home, g, th, CPU_MOE_REMOTE_COST, s);
}
END_TEST

/* Random routings: the division never does worse than home alone, never
 * beats the floor, leaves no improving single move, and is deterministic. */
START_TEST(divide_random) {
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int round = 0; round < 500; round++) {
        int cnt[64];
        int8_t home[64], g[64], g2[64], hg[64];
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const int ne = 4 + (int)(x % 61);
        const int th[2] = {1 + (int)((x >> 8) % 4), 1 + (int)((x >> 12) % 4)};
        for (int e = 0; e < ne; e++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            cnt[e] = (x & 3) ? 0 : (int)((x >> 20) % (round % 3 ? 3 : 40));
            home[e] = (int8_t)((x >> 40) & 1);
            hg[e] = home[e];
        }
        const double s = cpu_moe_numa_divide(ne, cnt, home, th, CPU_MOE_REMOTE_COST, g, NULL);
        ck_assert(s <= span_of(ne, cnt, home, hg, th, CPU_MOE_REMOTE_COST) + 1e-9);
        int64_t all = 0;
        for (int e = 0; e < ne; e++)
            all += cnt[e] > 0 ? cnt[e] : 0;
        ck_assert(s >= (double)all / (th[0] + th[1]) - 1e-9);
        ck_assert(fabs(s - span_of(ne, cnt, home, g, th, CPU_MOE_REMOTE_COST)) < 1e-9);
        assert_no_better_move(ne, cnt, home, g, th, CPU_MOE_REMOTE_COST, s);
        cpu_moe_numa_divide(ne, cnt, home, th, CPU_MOE_REMOTE_COST, g2, NULL);
        for (int e = 0; e < ne; e++)
            if (cnt[e] > 0)
                ck_assert_int_eq(g[e], g2[e]);
    }
}
END_TEST

START_TEST(homes_table) {
    static char region[3][4096];
    struct strata_error err = {0};
    ck_assert_int_eq(host_numa_homes_count(), 0);
    ck_assert_int_eq(host_numa_home_of(region[0]), -1);
    ck_assert_int_eq(host_numa_homes_add(region[1], 4096, 1, &err), 0);
    ck_assert_int_eq(host_numa_homes_add(region[0], 4096, 0, &err), 0);
    ck_assert_int_eq(host_numa_homes_add(region[0] + 100, 10, 1, &err), STRATA_E_INVALID);
    ck_assert(strstr(err.message, "overlaps"));
    ck_assert_int_eq(host_numa_homes_add(region[2], 4096, 2, &err), STRATA_E_INVALID);
    ck_assert_int_eq(host_numa_homes_add(region[2], 0, 1, &err), STRATA_E_INVALID);
    ck_assert_int_eq(host_numa_home_of(region[0] + 4095), 0);
    ck_assert_int_eq(host_numa_home_of(region[1]), 1);
    ck_assert_int_eq(host_numa_home_of(region[1] + 4095), 1);
    ck_assert_int_eq(host_numa_home_of(region[2]), -1);
    const void *a[3] = {region[2], region[1] + 7, region[0]};
    int gs[3];
    host_numa_homes_lookup(a, 3, gs);
    ck_assert(gs[0] == -1 && gs[1] == 1 && gs[2] == 0);
    host_numa_homes_remove(region[1] + 1); /* not a range's start: nothing */
    ck_assert_int_eq(host_numa_homes_count(), 2);
    host_numa_homes_remove(region[1]);
    host_numa_homes_remove(region[0]);
    ck_assert_int_eq(host_numa_homes_count(), 0);
    ck_assert_int_eq(host_numa_home_of(region[1]), -1);
}
END_TEST

/* ---- the real path: a synthesized qwen3moe ------------------------------------------- */

static const int32_t prompt[6] = {1, 17, 42, 5, 88, 23};
#define N_POS 6

/* Logits of every position: token by token (mode 0) or one chunk (mode 1). */
static float *run_prompt(struct model *m, int mode) {
    const int V = model_n_vocab(m);
    struct strata_error err = {0};
    struct kv_cache *kv = model_kv_init(m, 1, 0, &err);
    ck_assert_msg(kv != NULL, "%s", err.message);
    float *out = malloc((size_t)N_POS * V * sizeof(float));
    struct model_batch_entry e[N_POS];
    for (int i = 0; i < N_POS; i++)
        e[i] = (struct model_batch_entry){0, i, prompt[i], true};
    if (mode == 1) {
        struct model_batch b = {e, N_POS};
        ck_assert_msg(model_forward(m, kv, &b, out, &err) == 0, "%s", err.message);
    } else {
        for (int i = 0; i < N_POS; i++) {
            struct model_batch b = {&e[i], 1};
            ck_assert_msg(model_forward(m, kv, &b, out + (size_t)i * V, &err) == 0, "%s",
                          err.message);
        }
    }
    kv_free(kv);
    return out;
}

/* Loads path on a 4-thread pool, split in two logical halves (as --numa
 * split on one node: odd workers group 1) or not, and runs both modes. */
static void run_split(const char *path, bool split, bool repack, float *out[2],
                      struct cpu_moe_numa_stats *st) {
    struct pool_params pp = pool_params_default();
    pp.n_threads = 4;
    struct pool *pool = pool_init(&pp, NULL);
    ck_assert(pool != NULL);
    const int groups[4] = {0, 1, 0, 1};
    if (split)
        ck_assert_int_eq(pool_set_groups(pool, 2, groups), 0);
    struct strata_error err = {0};
    struct model_params mp = model_params_default();
    mp.pool = pool, mp.n_ctx_max = 32, mp.n_batch_max = 16, mp.repack = repack;
    struct model *m = test_model_load(path, &mp, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    ck_assert_int_eq(strncmp(model_weights_layout(m), repack ? "arena" : "file", 4), 0);
    for (int mode = 0; mode < 2; mode++)
        out[mode] = run_prompt(m, mode);
    for (int i = 0; i < TEST_MODELS_MAX; i++)
        if (test_models[i] == m)
            ck_assert_int_eq(backend_cpu_moe_numa_stats(test_backends[i], st), 0);
    test_model_free(m);
    pool_free(pool);
}

/* Experts wide enough that every MoE matmul goes to the pool (a 512 x 1024
 * Q8_0 expert matrix is 557 KB, over the 256 KB run inline). */
START_TEST(split_logits_bit_identical) {
    struct spec s = spec_of("qwen3moe");
    s.n_embd = 1024, s.n_head = s.n_head_kv = 2, s.head_dim = 64, s.n_layer = 1;
    s.n_expert = 8, s.n_expert_used = 3, s.n_ff_exp = 512;
    char path[256];
    tmp_path(path, sizeof path, "moe-numa");
    write_model(path, &s);
    const enum kernels_isa saved = kernels_isa_active();
    for (int isa = 0; isa <= (int)kernels_isa_detected(); isa++)
        for (int repack = 0; repack < 2; repack++) {
            kernels_isa_force((enum kernels_isa)isa);
            float *want[2], *got[2];
            struct cpu_moe_numa_stats st0, st;
            run_split(path, false, repack, want, &st0);
            run_split(path, true, repack, got, &st);
            const size_t n = (size_t)N_POS * 96 * sizeof(float);
            for (int mode = 0; mode < 2; mode++) {
                ck_assert_msg(memcmp(got[mode], want[mode], n) == 0,
                              "%s repack %d mode %d: split logits differ",
                              kernels_isa_name((enum kernels_isa)isa), repack, mode);
                free(got[mode]);
                free(want[mode]);
            }
            /* without groups nothing is divided; with them every MoE call
             * is: N_POS token-by-token calls + 1 chunk, 3 picks a token
             * each way, both groups computing experts */
            ck_assert_uint_eq(st0.calls, 0);
            ck_assert_uint_eq(st.calls, N_POS + 1);
            ck_assert_uint_eq(st.picks[0] + st.picks[1], 2 * N_POS * 3);
            ck_assert_uint_gt(st.experts[0], 0);
            ck_assert_uint_gt(st.experts[1], 0);
            ck_assert(st.span >= st.ideal - 1e-9);
        }
    kernels_isa_force(saved);
    unlink(path);
}
END_TEST

/* File-mapped experts (no arena) on a simulated two-node split: the page
 * sampler (fake move_pages: the gate pages of expert e on node e % 2, as
 * the rule homes them, except expert 0's, on node 1) makes expert 0 group
 * 1's though the rule gives it group 0; it is registered, so the division
 * computes it there; experts found where the rule puts them are not
 * registered, except expert 7: group 1 already has its 4 of 8 (0, 1, 3, 5),
 * so 7 is homed on group 0 (and registered) and its pages are to move;
 * logical halves on one node register nothing; the logits stay the same
 * bits; the model's free unregisters. */
static const uint8_t *gate_lo;
static uint64_t gate_mb, gate_n;
static long node1_move_pages(unsigned long count, void **pages, int *status) {
    for (unsigned long i = 0; i < count; i++) {
        const uint8_t *p = pages[i];
        const uint64_t e = p >= gate_lo ? (uint64_t)(p - gate_lo) / gate_mb : gate_n;
        status[i] = e >= gate_n ? 0 : e == 0 ? 1 : (int)(e % 2);
    }
    return 0;
}
static int resident(void *addr, size_t len, unsigned char *vec) {
    (void)addr;
    memset(vec, 1, (len + 4095) / 4096);
    return 0;
}

START_TEST(file_experts_home_by_pages) {
    struct spec s = spec_of("qwen3moe");
    s.n_embd = 1024, s.n_head = s.n_head_kv = 2, s.head_dim = 64, s.n_layer = 1;
    s.n_expert = 8, s.n_expert_used = 3, s.n_ff_exp = 512;
    char path[256];
    tmp_path(path, sizeof path, "moe-numa-file");
    write_model(path, &s);
    float *want[2];
    struct cpu_moe_numa_stats st;
    run_split(path, false, false, want, &st);

    struct pool_params pp = pool_params_default();
    pp.n_threads = 4;
    struct pool *pool = pool_init(&pp, NULL);
    const int groups[4] = {0, 1, 0, 1};
    ck_assert_int_eq(pool_set_groups(pool, 2, groups), 0);
    struct strata_error err = {0};
    struct model_params mp = model_params_default();
    mp.pool = pool, mp.n_ctx_max = 32, mp.n_batch_max = 16, mp.repack = false;
    struct model *m = test_model_load(path, &mp, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    const struct gguf_tensor_info *gate =
        gguf_find_tensor(model_gguf(m), "blk.0.ffn_gate_exps.weight");
    ck_assert(gate != NULL);
    const uint64_t mb = gate->n_bytes / 8;
    gate_lo = gate->data, gate_mb = mb, gate_n = 8;
    struct host_numa_ops ops = *host_numa_ops_real();
    ops.move_pages = node1_move_pages;
    ops.mincore = resident;
    struct host_numa_report rep;
    memset(&rep, 0, sizeof rep);
    rep.placement = "none";
    rep.plan.mode.kind = HOST_NUMA_SPLIT;
    rep.plan.n_groups = 2, rep.plan.threads[0] = rep.plan.threads[1] = 2;
    rep.plan.logical = true; /* one node: both groups on node 0 */
    ck_assert_msg(model_numa_finish(m, pool, &ops, false, &rep, &err) == 0, "%s", err.message);
    ck_assert_int_eq(host_numa_homes_count(), 0);
    rep.plan.logical = false, rep.plan.node[1] = 1; /* two nodes */
    ck_assert_msg(model_numa_finish(m, pool, &ops, false, &rep, &err) == 0, "%s", err.message);
    ck_assert_str_eq(rep.placement, "page cache");
    ck_assert_int_eq(host_numa_homes_count(), 2);
    ck_assert_int_eq(host_numa_home_of(gate->data), 1); /* the rule: 0 */
    ck_assert_int_eq(host_numa_home_of((const uint8_t *)gate->data + mb - 1), 1);
    for (int e = 1; e < 7; e++)
        ck_assert_int_eq(host_numa_home_of((const uint8_t *)gate->data + e * mb), -1);
    ck_assert_int_eq(host_numa_home_of((const uint8_t *)gate->data + 7 * mb), 0); /* the rule: 1 */
    for (int mode = 0; mode < 2; mode++) {
        float *got = run_prompt(m, mode);
        ck_assert_msg(memcmp(got, want[mode], (size_t)N_POS * 96 * sizeof(float)) == 0,
                      "mode %d: logits differ", mode);
        free(got);
        free(want[mode]);
    }
    test_model_free(m);
    ck_assert_int_eq(host_numa_homes_count(), 0);
    pool_free(pool);
    unlink(path);
}
END_TEST

static Suite *moe_numa_suite(void) {
    Suite *s = suite_create("moe-numa");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, home_rule);
    tcase_add_test(tc, divide_balanced_moves_nothing);
    tcase_add_test(tc, divide_skewed_decode);
    tcase_add_test(tc, divide_skewed_batch);
    tcase_add_test(tc, divide_random);
    tcase_add_test(tc, homes_table);
    tcase_add_test(tc, split_logits_bit_identical);
    tcase_add_test(tc, file_experts_home_by_pages);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("moe-numa", moe_numa_suite)
