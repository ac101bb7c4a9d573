/* tests/engine/experts/test-xstore.c: the expert store (engine/experts/xstore).
 *
 * On small synthesized models (tests/engine/model/model-spec.h: qwen3moe with
 * Q8_0 experts whose 2176-byte matrices start at unaligned offsets, qwen2moe
 * with a shared expert, mixtral-style llama MoE):
 * - every expert matrix the store hands out has the file's bytes, in each
 *   mode (io_uring, pread; O_DIRECT, buffered), through a budget of a few
 *   slots that evicts on almost every get;
 * - replacement: the per-layer floor keeps a layer's slot where a global LRU
 *   would take it; held slots are never taken (the overflow goes to the file
 *   tier); a budget below one token's experts is refused at init;
 * - warm: the slots filled at init, evenly over the layers, counted apart;
 * - the model with the store gives bit-identical logits (hence the same
 *   greedy tokens) to the model with every expert resident, in every mode and
 *   budget;
 * - batches: a step of several sequences reads each picked expert once (the
 *   misses are the distinct picks the routing profile counted), one batch of
 *   reads per layer;
 * - the start-up decision (xstore_plan): auto on only when weights, KV and
 *   the margin exceed the budget; the default tier size; bad option values;
 * - read errors: an injected EIO (both modes), the file truncated under the
 *   store, rewritten in place: the step fails with STRATA_E_IO and a message
 *   naming the cause, and the next step (errors gone) gives the right logits.
 *   A file replaced by rename keeps being served (the store reads the inode
 *   it opened).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/cpu/backend-cpu.h"
#include "engine/cpu/kernels.h"
#include "engine/experts/experts.h"
#include "engine/experts/profile.h"
#include "engine/experts/xstore.h"
#include "engine/gguf/gguf.h"
#include "engine/kv/kv.h"
#include "engine/model/model.h"
#include "tests/engine/model/model-spec.h"
#include "tests/harness.h"

static const char *const exps_name[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};

/* A qwen3moe slot: three 2176-byte Q8_0 matrices, each widened to 4 KiB
 * blocks on both ends: 8 KiB each. */
#define QSLOT (3 * 8192)

static struct gguf_file *spec_file(char *path, size_t cap, const char *spec) {
    struct spec s = spec_of(spec);
    tmp_path(path, cap, spec);
    write_model(path, &s);
    struct strata_error err = {0};
    struct gguf_file *f = gguf_open(path, &err);
    ck_assert_msg(f != NULL, "%s", err.message);
    return f;
}

static struct experts_source *store_over(const struct gguf_file *f, int n_layer, int k,
                                         const struct xstore_params *xp) {
    struct strata_error err = {0};
    struct experts_file_params fp = {.queue = 0};
    struct experts_source *file = experts_file_init(f, n_layer, &fp, &err);
    ck_assert_msg(file != NULL, "%s", err.message);
    struct experts_source *s = xstore_init(f, n_layer, k, file, xp, &err);
    ck_assert_msg(s != NULL, "%s", err.message);
    return s;
}

/* io_uring + O_DIRECT twice: plain reads, and into registered buffers
 * (IORING_OP_READ_FIXED, the last) */
#define N_MODES 5
static const struct {
    enum xstore_io io;
    enum xstore_direct direct;
    enum xstore_fixed fixed;
    const char *mode;
} modes[N_MODES] = {
    {XSTORE_IO_URING, XSTORE_DIRECT_ON, XSTORE_FIXED_OFF, "io_uring+direct"},
    {XSTORE_IO_URING, XSTORE_DIRECT_OFF, XSTORE_FIXED_AUTO, "io_uring+buffered"},
    {XSTORE_IO_PREAD, XSTORE_DIRECT_ON, XSTORE_FIXED_AUTO, "pread+direct"},
    {XSTORE_IO_PREAD, XSTORE_DIRECT_OFF, XSTORE_FIXED_AUTO, "pread+buffered"},
    {XSTORE_IO_URING, XSTORE_DIRECT_ON, XSTORE_FIXED_ON, "io_uring+direct"},
};

/* ---- the bytes ----------------------------------------------------------------- */

START_TEST(test_bytes_every_mode) {
    char path[256];
    struct gguf_file *f = spec_file(path, sizeof path, "qwen3moe");
    for (int md = 0; md < N_MODES; md++) {
        struct xstore_params xp = xstore_params_default();
        xp.io = modes[md].io;
        xp.direct = modes[md].direct;
        xp.fixed = modes[md].fixed;
        xp.ram_bytes = 1; /* below one slot: refused, the message says the least */
        struct strata_error err = {0};
        struct experts_file_params fp = {.queue = 0};
        ck_assert(xstore_init(f, 2, 3, experts_file_init(f, 2, &fp, &err), &xp, &err) == NULL);
        ck_assert_int_eq(err.code, STRATA_E_RANGE);
        ck_assert_msg(strstr(err.message, "one token needs 3") != NULL, "%s", err.message);
        xp.ram_bytes = 3 * QSLOT; /* three slots */
        struct experts_source *src = store_over(f, 2, 3, &xp);
        struct xstore_stats st;
        xstore_stats(xstore_of(src), &st);
        ck_assert_str_eq(xstore_mode(xstore_of(src)), modes[md].mode);
        ck_assert_int_eq(st.n_slots, 3);
        ck_assert_int_eq(st.fixed, md == 4);
        ck_assert_msg(strncmp(st.fixed_rule, md == 4 ? "on" : "off", md == 4 ? 2 : 3) == 0, "%s",
                      st.fixed_rule);
        xstore_stats_free(&st);
        uint64_t step = 1;
        for (int round = 0; round < 2; round++)
            for (int l = 0; l < 2; l++)
                for (int e = 0; e < 8; e++, step++) {
                    const int32_t id = e;
                    ck_assert_int_eq(experts_need(src, l, &id, 1, step, &err), 0);
                    for (int w = 0; w < 3; w++) {
                        char name[64];
                        snprintf(name, sizeof name, "blk.%d.%s.weight", l, exps_name[w]);
                        const struct gguf_tensor_info *t = gguf_find_tensor(f, name);
                        const size_t bytes = t->n_bytes / 8;
                        struct experts_ref r;
                        ck_assert_int_eq(experts_get(src, l, e, w, step, &r, &err), 0);
                        ck_assert_int_eq(r.tier, EXPERTS_TIER_RAM);
                        ck_assert_int_eq(r.mat.host.n_rows, t->ne[1]);
                        ck_assert_int_eq(r.mat.host.n_cols, t->ne[0]);
                        ck_assert_msg(memcmp(r.mat.host.data, (const uint8_t *)t->data + e * bytes,
                                             bytes) == 0,
                                      "%s: layer %d expert %d %s differs", modes[md].mode, l, e,
                                      exps_name[w]);
                    }
                    experts_release(src, step);
                }
        xstore_stats(xstore_of(src), &st);
        ck_assert_uint_eq(st.misses, 32); /* 16 experts, twice, 3 slots: always cold */
        ck_assert_uint_eq(st.hits, 0);
        ck_assert_uint_eq(st.evictions, 32 - 3);
        ck_assert_uint_eq(st.reads, 32 * 3);
        ck_assert_uint_eq(st.batches, 32);
        ck_assert_uint_ge(st.bytes_read, 32 * 3 * 2176);
        ck_assert_uint_eq(st.read_errors, 0);
        ck_assert_str_eq(st.direct, modes[md].direct == XSTORE_DIRECT_ON ? "direct" : "buffered");
        uint64_t nl = 0;
        for (int b = 0; b < XSTORE_LAT_BUCKETS; b++)
            nl += st.lat[b];
        ck_assert_uint_eq(nl, st.reads);
        ck_assert_uint_eq(st.layer_misses[0] + st.layer_misses[1], 32);
        xstore_stats_free(&st);
        experts_free(src);
    }
    /* registered buffers asked where they cannot be: buffered reads, pread */
    for (int md = 1; md < 3; md++) {
        struct xstore_params xp = xstore_params_default();
        xp.io = modes[md].io;
        xp.direct = modes[md].direct;
        xp.fixed = XSTORE_FIXED_ON;
        xp.ram_bytes = 3 * QSLOT;
        struct strata_error err = {0};
        struct experts_file_params fp = {.queue = 0};
        ck_assert(xstore_init(f, 2, 3, experts_file_init(f, 2, &fp, &err), &xp, &err) == NULL);
        ck_assert_int_eq(err.code, STRATA_E_UNSUPPORTED);
        ck_assert_msg(strstr(err.message, "registered buffers need io_uring and O_DIRECT"), "%s",
                      err.message);
    }
    gguf_close(f);
    unlink(path);
}
END_TEST

/* ---- replacement --------------------------------------------------------------- */

START_TEST(test_floor_and_holds) {
    char path[256];
    struct gguf_file *f = spec_file(path, sizeof path, "qwen3moe");
    struct xstore_params xp = xstore_params_default();
    struct strata_error err = {0};
    xp.ram_bytes = 4 * QSLOT; /* 4 slots */
    xp.floor = 1;
    struct experts_source *src = store_over(f, 2, 3, &xp);
    /* step 1: layer 0 {0}, layer 1 {1, 2, 3}: full */
    const int32_t a[1] = {0}, b[3] = {1, 2, 3}, c[1] = {5};
    ck_assert_int_eq(experts_need(src, 0, a, 1, 1, &err), 0);
    ck_assert_int_eq(experts_need(src, 1, b, 3, 1, &err), 0);
    experts_release(src, 1);
    /* step 2: layer 0 {5}: a global LRU would evict layer 0's expert 0 (the
     * oldest); the floor keeps it and takes layer 1's oldest, expert 1 */
    ck_assert_int_eq(experts_need(src, 0, c, 1, 2, &err), 0);
    experts_release(src, 2);
    ck_assert_int_eq(experts_need(src, 0, a, 1, 3, &err), 0); /* a hit */
    struct xstore_stats st;
    xstore_stats(xstore_of(src), &st);
    ck_assert_uint_eq(st.layer_hits[0], 1);
    ck_assert_uint_eq(st.layer_misses[0], 2);
    xstore_stats_free(&st);
    experts_release(src, 3);
    const int32_t d[1] = {1};
    ck_assert_int_eq(experts_need(src, 1, d, 1, 4, &err), 0); /* it was evicted: a miss */
    xstore_stats(xstore_of(src), &st);
    ck_assert_uint_eq(st.layer_misses[1], 4);
    ck_assert_uint_eq(st.evictions, 2);
    xstore_stats_free(&st);
    experts_release(src, 4);

    /* holds: a layer needing 6 experts of 4 slots keeps the 4 it read and
     * the other 2 overflow to the file tier for this step */
    const int32_t six[6] = {0, 1, 2, 3, 4, 5};
    ck_assert_int_eq(experts_need(src, 0, six, 6, 5, &err), 0);
    xstore_stats(xstore_of(src), &st);
    ck_assert_uint_eq(st.overflow, 2);
    ck_assert_int_eq(st.slots_used, 4);
    xstore_stats_free(&st);
    int tiers[EXPERTS_TIER_COUNT] = {0};
    for (int e = 0; e < 6; e++) {
        struct experts_ref r;
        ck_assert_int_eq(experts_get(src, 0, e, EXPERTS_DOWN, 5, &r, &err), 0);
        tiers[r.tier]++;
        const struct gguf_tensor_info *t = gguf_find_tensor(f, "blk.0.ffn_down_exps.weight");
        ck_assert(memcmp(r.mat.host.data, (const uint8_t *)t->data + e * (t->n_bytes / 8),
                         t->n_bytes / 8) == 0);
    }
    ck_assert_int_eq(tiers[EXPERTS_TIER_RAM], 4);
    ck_assert_int_eq(tiers[EXPERTS_TIER_FILE], 2);
    /* the held four stay through another layer's need of the same step?
     * no: ops.need says the step's other layers are done, so layer 1 may
     * take them; but another step's holds stay: step 6 is not released */
    experts_release(src, 5);
    ck_assert_int_eq(experts_need(src, 0, a, 1, 6, &err), 0);
    const int32_t four[4] = {4, 5, 6, 7};
    ck_assert_int_eq(experts_need(src, 0, four, 4, 7, &err), 0);
    struct experts_ref r;
    ck_assert_int_eq(experts_get(src, 0, 0, EXPERTS_GATE, 6, &r, &err), 0);
    ck_assert_int_eq(r.tier, EXPERTS_TIER_RAM); /* step 6 held it: never evicted */
    experts_release(src, 6);
    experts_release(src, 7);
    struct experts_stats es;
    experts_stats(src, &es);
    ck_assert_uint_eq(es.held, 0);
    /* prefetch is the store's, never passed to the file tier (its readahead
     * would fill the page cache); experts it holds are not read again */
    experts_prefetch(src, 0, four, 4);
    experts_stats(src, &es);
    ck_assert_uint_eq(es.prefetch_dropped, 0);
    ck_assert_uint_le(es.prefetch_queued, 4);
    experts_free(src);
    gguf_close(f);
    unlink(path);
}
END_TEST

/* ---- warm: the slots filled at init ------------------------------------------------ */

START_TEST(test_warm) {
    char path[256];
    struct gguf_file *f = spec_file(path, sizeof path, "qwen3moe");
    struct strata_error err = {0};
    struct xstore_params xp = xstore_params_default();
    xp.warm = true;
    xp.ram_bytes = 3 * QSLOT; /* layer 0 gets 2 (experts 0, 1), layer 1 one (expert 0) */
    struct experts_source *src = store_over(f, 2, 3, &xp);
    struct xstore_stats st;
    xstore_stats(xstore_of(src), &st);
    ck_assert_int_eq(st.slots_used, 3);
    ck_assert_uint_ge(st.warm_bytes, 9 * 2176);
    ck_assert_uint_eq(st.bytes_read + st.hits + st.misses + st.reads, 0);
    xstore_stats_free(&st);
    const int32_t a[2] = {0, 1}, b[1] = {0}, c[1] = {1};
    ck_assert_int_eq(experts_need(src, 0, a, 2, 1, &err), 0);
    ck_assert_int_eq(experts_need(src, 1, b, 1, 1, &err), 0);
    experts_release(src, 1);
    xstore_stats(xstore_of(src), &st);
    ck_assert_uint_eq(st.hits, 3);
    ck_assert_uint_eq(st.misses, 0);
    xstore_stats_free(&st);
    ck_assert_int_eq(experts_need(src, 1, c, 1, 2, &err), 0);
    struct experts_ref r;
    ck_assert_int_eq(experts_get(src, 1, 1, EXPERTS_UP, 2, &r, &err), 0);
    const struct gguf_tensor_info *t = gguf_find_tensor(f, "blk.1.ffn_up_exps.weight");
    ck_assert(memcmp(r.mat.host.data, (const uint8_t *)t->data + t->n_bytes / 8, t->n_bytes / 8) ==
              0);
    experts_release(src, 2);
    xstore_stats(xstore_of(src), &st);
    ck_assert_uint_eq(st.misses, 1);
    xstore_stats_free(&st);
    experts_free(src);
    /* a routing profile: each layer's share takes its most picked first */
    struct profile *prof = profile_init(2, 8, &err);
    for (int i = 0; i < 5; i++)
        profile_add(prof, 0, 6), profile_add(prof, 1, 3);
    profile_add(prof, 0, 2);
    xp.warm_profile = prof;
    src = store_over(f, 2, 3, &xp); /* layer 0: {6, 2}, layer 1: {3} */
    const int32_t hot0[2] = {2, 6}, hot1[1] = {3};
    ck_assert_int_eq(experts_need(src, 0, hot0, 2, 1, &err), 0);
    ck_assert_int_eq(experts_need(src, 1, hot1, 1, 1, &err), 0);
    xstore_stats(xstore_of(src), &st);
    ck_assert_uint_eq(st.hits, 3);
    ck_assert_uint_eq(st.misses, 0);
    xstore_stats_free(&st);
    experts_free(src);
    struct profile *other = profile_init(3, 8, &err); /* another shape: ignored, by id */
    profile_add(other, 0, 6);
    xp.warm_profile = other;
    src = store_over(f, 2, 3, &xp);
    ck_assert_int_eq(experts_need(src, 0, a, 2, 1, &err), 0);
    xstore_stats(xstore_of(src), &st);
    ck_assert_uint_eq(st.hits, 2);
    xstore_stats_free(&st);
    experts_free(src);
    profile_free(other);
    profile_free(prof);
    xp.warm_profile = NULL;
    /* every slot: nothing misses afterwards */
    xp.ram_bytes = 0;
    src = store_over(f, 2, 3, &xp);
    for (int l = 0; l < 2; l++)
        for (int e = 0; e < 8; e++) {
            const int32_t id = e;
            ck_assert_int_eq(experts_need(src, l, &id, 1, 3, &err), 0);
        }
    experts_release(src, 3);
    xstore_stats(xstore_of(src), &st);
    ck_assert_uint_eq(st.hits, 16);
    ck_assert_uint_eq(st.misses, 0);
    /* each 2176-byte matrix widened to one or two 4 KiB blocks */
    ck_assert_uint_ge(st.warm_bytes, 2 * 8 * 3 * 4096);
    ck_assert_uint_le(st.warm_bytes, 2 * 8 * 3 * 8192);
    xstore_stats_free(&st);
    experts_free(src);
    gguf_close(f);
    unlink(path);
}
END_TEST

/* ---- the model --------------------------------------------------------------------- */

#define N_TOK 6
#define N_DEC 6

struct fault {
    int fail_from; /* > 0: the fail_from-th read on fails with -EIO */
    _Atomic int n; /* the pread pool's threads count too */
};

static int64_t fault_result(void *arg, uint64_t off, size_t n, int64_t res) {
    struct fault *ft = arg;
    return ft->fail_from > 0 && atomic_fetch_add(&ft->n, 1) + 1 >= ft->fail_from ? -EIO : res;
}

/* Prefill of N_TOK (every row's logits) then N_DEC greedy steps; the logits
 * of all, and the greedy tokens into toks. */
static float *run_model(const char *path, struct backend *be, const struct xstore_params *xp,
                        int32_t *toks, struct xstore_stats *st) {
    struct strata_error err = {0};
    struct model_params mp = model_params_default();
    mp.backend = be;
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
        toks[s] = best;
        struct model_batch_entry d = {0, N_TOK + s, best, true};
        ck_assert_msg(model_forward(m, kv, &(struct model_batch){&d, 1},
                                    out + (size_t)(N_TOK + s) * V, &err) == 0,
                      "%s", err.message);
    }
    if (st)
        xstore_stats(xstore_of(model_experts(m)), st);
    ck_assert_int_eq(xstore_of(model_experts(m)) != NULL, xp != NULL);
    kv_free(kv);
    model_free(m);
    return out;
}

START_TEST(test_same_logits) {
    static const char *const specs[3] = {"qwen3moe", "qwen2moe", "mixtral"};
    static const int K[3] = {3, 2, 2}, NE[3] = {8, 6, 4};
    struct strata_error err = {0};
    struct backend_cpu_params cp = backend_cpu_params_default();
    struct backend *be = backend_cpu_init(&cp, &err);
    ck_assert(be);
    /* every ISA the host runs, forced before each load (the arena's layout
     * follows the ISA; the store's slots keep the file's) */
    const enum kernels_isa saved = kernels_isa_active();
    for (int isa = 0; isa <= (int)kernels_isa_detected(); isa++)
        for (int sp = 0; sp < 3; sp++) {
            kernels_isa_force((enum kernels_isa)isa);
            char path[256];
            struct gguf_file *f = spec_file(path, sizeof path, specs[sp]);
            char name[64];
            snprintf(name, sizeof name, "blk.0.ffn_gate_exps.weight");
            const uint64_t mat = gguf_find_tensor(f, name)->n_bytes / (uint64_t)NE[sp];
            gguf_close(f);
            int32_t want_tok[N_DEC], got_tok[N_DEC];
            float *want = run_model(path, be, NULL, want_tok, NULL);
            const size_t n = (size_t)(N_TOK + N_DEC) * 96 * sizeof(float);
            for (int md = 0; md < N_MODES; md++)
                for (int budget = 0; budget < 2; budget++) {
                    struct xstore_params xp = xstore_params_default();
                    xp.io = modes[md].io;
                    xp.direct = modes[md].direct;
                    xp.fixed = modes[md].fixed;
                    /* K slots: constant eviction (and overflow in the prefill);
                     * or every expert */
                    const uint64_t slot = 3 * (((mat + 4095) & ~4095ull) + 4096);
                    xp.ram_bytes = budget == 0 ? (uint64_t)K[sp] * slot : 0;
                    struct xstore_stats st;
                    float *got = run_model(path, be, &xp, got_tok, &st);
                    ck_assert_msg(memcmp(got, want, n) == 0, "%s %s %s budget %d: logits differ",
                                  kernels_isa_name((enum kernels_isa)isa), specs[sp],
                                  modes[md].mode, budget);
                    ck_assert(memcmp(got_tok, want_tok, sizeof want_tok) == 0);
                    ck_assert_uint_gt(st.misses, 0);
                    ck_assert_uint_eq(st.read_errors, 0);
                    if (budget == 0) {
                        ck_assert_uint_gt(st.evictions, 0);
                    } else {
                        /* each expert read once: misses = distinct (layer, expert) picked */
                        ck_assert_uint_eq(st.evictions, 0);
                        ck_assert_uint_eq(st.overflow, 0);
                        ck_assert_uint_le(st.misses, 2 * (uint64_t)NE[sp]);
                        ck_assert_uint_gt(st.hits, 0);
                    }
                    /* a step's picks of a layer come in one batch */
                    ck_assert_uint_le(st.batches, 2 * (1 + N_DEC));
                    xstore_stats_free(&st);
                    free(got);
                }
            free(want);
            unlink(path);
        }
    kernels_isa_force(saved);
    backend_free(be);
}
END_TEST

/* ---- batches: a step's tokens grouped by expert ------------------------------------- */

/* One step of 4 sequences x 2 prompt tokens (8 tokens, top 3 of 8 experts:
 * most experts picked several times): each picked (layer, expert) is read
 * once (misses = the distinct picks the routing profile saw, three reads
 * each), one batch per layer; a decode step of the 4 sequences then reads
 * only what the first did not hold. */
START_TEST(test_step_reads_each_expert_once) {
    char path[256];
    struct gguf_file *f = spec_file(path, sizeof path, "qwen3moe");
    gguf_close(f);
    struct strata_error err = {0};
    struct backend_cpu_params cp = backend_cpu_params_default();
    struct backend *be = backend_cpu_init(&cp, &err);
    struct profile *prof = profile_init(2, 8, &err);
    ck_assert(be && prof);
    for (int md = 0; md < 4; md += 2) {
        struct xstore_params xp = xstore_params_default();
        xp.io = modes[md].io; /* every slot: nothing is evicted */
        struct model_params mp = model_params_default();
        mp.backend = be;
        mp.n_ctx_max = 32;
        mp.n_batch_max = 16;
        mp.xstore = &xp;
        mp.profile = prof;
        profile_reset(prof);
        struct model *m = model_load(path, &mp, &err);
        ck_assert_msg(m != NULL, "%s", err.message);
        struct kv_cache *kv = model_kv_init(m, 4, 0, &err);
        const int V = model_n_vocab(m);
        float *out = malloc((size_t)8 * V * sizeof(float));
        struct model_batch_entry e[8];
        for (int i = 0; i < 8; i++)
            e[i] = (struct model_batch_entry){i / 2, i % 2, (i * 29 + 7) % V, i % 2 == 1};
        ck_assert_msg(model_forward(m, kv, &(struct model_batch){e, 8}, out, &err) == 0, "%s",
                      err.message);
        uint64_t distinct = 0;
        for (int l = 0; l < 2; l++)
            for (int x = 0; x < 8; x++)
                distinct += profile_count(prof, l, x) > 0;
        ck_assert_uint_eq(profile_total(prof), 8 * 3 * 2);
        ck_assert_uint_lt(distinct, 8 * 3 * 2); /* some experts serve several tokens */
        struct xstore_stats st;
        xstore_stats(xstore_of(model_experts(m)), &st);
        ck_assert_uint_eq(st.misses, distinct);
        ck_assert_uint_eq(st.hits, 0);
        ck_assert_uint_eq(st.reads, 3 * distinct);
        ck_assert_uint_eq(st.batches, 2);
        xstore_stats_free(&st);
        /* decode: the 4 sequences' next tokens in one step */
        profile_reset(prof);
        struct model_batch_entry d[4];
        for (int q = 0; q < 4; q++)
            d[q] = (struct model_batch_entry){q, 2, (q * 11 + 5) % V, true};
        ck_assert(model_forward(m, kv, &(struct model_batch){d, 4}, out, &err) == 0);
        uint64_t picked = 0;
        for (int l = 0; l < 2; l++)
            for (int x = 0; x < 8; x++)
                picked += profile_count(prof, l, x) > 0;
        xstore_stats(xstore_of(model_experts(m)), &st);
        ck_assert_uint_eq(st.hits + st.misses, distinct + picked);
        ck_assert_uint_le(st.batches, 4);
        ck_assert_uint_eq(st.reads, 3 * st.misses);
        xstore_stats_free(&st);
        free(out);
        kv_free(kv);
        model_free(m);
    }
    profile_free(prof);
    backend_free(be);
    unlink(path);
}
END_TEST

/* ---- read errors ---------------------------------------------------------------- */

static void copy_file(const char *from, const char *to) {
    size_t n = 0;
    void *b = test_read_file(from, &n);
    ck_assert(b);
    FILE *o = fopen(to, "wb");
    ck_assert(o && fwrite(b, 1, n, o) == n);
    fclose(o);
    free(b);
}

START_TEST(test_read_errors) {
    char path[256], copy[300];
    struct gguf_file *f = spec_file(path, sizeof path, "qwen3moe");
    gguf_close(f);
    struct strata_error err = {0};
    struct backend_cpu_params cp = backend_cpu_params_default();
    struct backend *be = backend_cpu_init(&cp, &err);
    int32_t toks[N_DEC];
    float *want = run_model(path, be, NULL, toks, NULL);
    const int V = 96;
    for (int md = 0; md < 4; md += 2) { /* io_uring and pread */
        struct fault ft = {0, 0};
        const struct xstore_sysops sys = {.pread = NULL, .result = fault_result, .arg = &ft};
        struct xstore_params xp = xstore_params_default();
        xp.io = modes[md].io;
        xp.sys = &sys;
        xp.ram_bytes = 3 * QSLOT;
        xp.prefetch = 1; /* the side thread's reads ahead fail no step, the need's do */
        struct model_params mp = model_params_default();
        mp.backend = be;
        mp.n_ctx_max = 32;
        mp.n_batch_max = 8;
        mp.xstore = &xp;
        struct model *m = model_load(path, &mp, &err);
        ck_assert_msg(m != NULL, "%s", err.message);
        struct kv_cache *kv = model_kv_init(m, 1, 0, &err);
        float *out = malloc((size_t)N_TOK * V * sizeof(float));
        struct model_batch_entry e[N_TOK];
        for (int i = 0; i < N_TOK; i++)
            e[i] = (struct model_batch_entry){0, i, (i * 17 + 3) % V, true};
        ft.fail_from = 2;
        ck_assert_int_eq(model_forward(m, kv, &(struct model_batch){e, N_TOK}, out, &err),
                         STRATA_E_IO);
        ck_assert_msg(strstr(err.message, "expert store: reading layer 0 expert") &&
                          strstr(err.message, "Input/output error"),
                      "%s", err.message);
        ck_assert_int_eq(kv_seq_len(kv, 0), 0);
        struct experts_stats es;
        experts_stats(model_experts(m), &es);
        ck_assert_uint_eq(es.held, 0);
        ft.fail_from = 0; /* the device recovers: the same step works */
        ck_assert_msg(model_forward(m, kv, &(struct model_batch){e, N_TOK}, out, &err) == 0, "%s",
                      err.message);
        ck_assert(memcmp(out, want, (size_t)N_TOK * V * sizeof(float)) == 0);
        struct xstore_stats st;
        xstore_stats(xstore_of(model_experts(m)), &st);
        ck_assert_uint_gt(st.read_errors, 0);
        xstore_stats_free(&st);
        free(out);
        kv_free(kv);
        model_free(m);
    }

    /* the file under the store: truncated, rewritten in place, renamed over */
    snprintf(copy, sizeof copy, "%s.copy", path);
    for (int how = 0; how < 3; how++) {
        copy_file(path, copy);
        struct xstore_params xp = xstore_params_default();
        xp.ram_bytes = 3 * QSLOT;
        struct model_params mp = model_params_default();
        mp.backend = be;
        mp.n_ctx_max = 32;
        mp.n_batch_max = 8;
        mp.xstore = &xp;
        struct model *m = model_load(copy, &mp, &err);
        ck_assert_msg(m != NULL, "%s", err.message);
        struct kv_cache *kv = model_kv_init(m, 1, 0, &err);
        float *out = malloc((size_t)N_TOK * V * sizeof(float));
        struct model_batch_entry e[N_TOK];
        for (int i = 0; i < N_TOK; i++)
            e[i] = (struct model_batch_entry){0, i, (i * 17 + 3) % V, true};
        struct stat sb;
        ck_assert(stat(copy, &sb) == 0);
        if (how == 0) {
            /* one byte: the skeleton's vectors read from the mapping
                                                 keep their pages (a page past the new end would
                                                 fault) */
            ck_assert(truncate(copy, sb.st_size - 1) == 0);
        } else if (how == 1) { /* same size, rewritten: a later mtime */
            usleep(20000);
            copy_file(path, copy);
        } else { /* a new file renamed over the path: the old inode is still read */
            char tmp[320];
            snprintf(tmp, sizeof tmp, "%s.new", copy);
            copy_file(path, tmp);
            ck_assert(rename(tmp, copy) == 0);
        }
        const int rc = model_forward(m, kv, &(struct model_batch){e, N_TOK}, out, &err);
        if (how < 2) {
            ck_assert_int_eq(rc, STRATA_E_IO);
            ck_assert_msg(strstr(err.message, "changed under the daemon"), "%s", err.message);
            ck_assert_int_eq(model_forward(m, kv, &(struct model_batch){e, N_TOK}, out, &err),
                             STRATA_E_IO); /* and stays failed, never a crash */
        } else {
            ck_assert_msg(rc == 0, "%s", err.message);
            ck_assert(memcmp(out, want, (size_t)N_TOK * V * sizeof(float)) == 0);
        }
        free(out);
        kv_free(kv);
        model_free(m);
        unlink(copy);
    }
    free(want);
    backend_free(be);
    unlink(path);
}
END_TEST

/* ---- the start-up decision ------------------------------------------------------- */

START_TEST(test_plan) {
    const int64_t G = 1ll << 30, M = 1ll << 20;
    struct xstore_plan pl;
    struct strata_error err = {0};
    /* a 34 GB MoE (30 GB of experts), a 22 GB budget, 1 GB of KV: auto is on,
     * and the tier gets the budget less skeleton, KV and the 1/16 margin */
    struct xstore_plan_in in = {.mode = "auto",
                                .io = "auto",
                                .direct = "auto",
                                .model_bytes = 34 * G,
                                .expert_bytes = 30 * G,
                                .mem_budget = 22 * G,
                                .kv_bytes = 1 * G};
    ck_assert_int_eq(xstore_plan(&in, &pl, &err), 0);
    ck_assert(pl.on);
    ck_assert_uint_eq(pl.params.ram_bytes, (uint64_t)(22 * G - 4 * G - 1 * G - 22 * G / 16));
    ck_assert_msg(strstr(pl.rule, "auto: on") != NULL, "%s", pl.rule);
    ck_assert_int_eq(pl.params.io, XSTORE_IO_AUTO);
    /* it fits: auto is off, and says so */
    in.model_bytes = 8 * G, in.expert_bytes = 7 * G;
    ck_assert_int_eq(xstore_plan(&in, &pl, &err), 0);
    ck_assert(!pl.on);
    ck_assert_msg(strstr(pl.rule, "fit the") != NULL, "%s", pl.rule);
    /* on regardless, with an explicit budget and modes */
    in.mode = "on", in.ram = 512 * M, in.io = "pread", in.direct = "off";
    ck_assert_int_eq(xstore_plan(&in, &pl, &err), 0);
    ck_assert(pl.on);
    ck_assert_uint_eq(pl.params.ram_bytes, (uint64_t)(512 * M));
    ck_assert_int_eq(pl.params.io, XSTORE_IO_PREAD);
    ck_assert_int_eq(pl.params.direct, XSTORE_DIRECT_OFF);
    /* unknown budget: auto stays off; on takes a slot for every expert */
    in = (struct xstore_plan_in){.mode = "auto",
                                 .io = "auto",
                                 .direct = "auto",
                                 .model_bytes = 34 * G,
                                 .expert_bytes = 30 * G};
    ck_assert_int_eq(xstore_plan(&in, &pl, &err), 0);
    ck_assert(!pl.on);
    in.mode = "on";
    ck_assert_int_eq(xstore_plan(&in, &pl, &err), 0);
    ck_assert(pl.on);
    ck_assert_uint_eq(pl.params.ram_bytes, 0);
    /* a dense model: never */
    in.expert_bytes = 0;
    ck_assert_int_eq(xstore_plan(&in, &pl, &err), 0);
    ck_assert(!pl.on);
    /* a budget the skeleton and KV eat: the 64 MiB least (xstore_init then
     * refuses it if one token's experts do not fit) */
    in = (struct xstore_plan_in){.mode = "auto",
                                 .io = "auto",
                                 .direct = "auto",
                                 .model_bytes = 34 * G,
                                 .expert_bytes = 10 * G,
                                 .mem_budget = 8 * G,
                                 .kv_bytes = 1 * G};
    ck_assert_int_eq(xstore_plan(&in, &pl, &err), 0);
    ck_assert(pl.on);
    ck_assert_uint_eq(pl.params.ram_bytes, (uint64_t)(64 * M));
    /* bad values name the option */
    in.mode = "maybe";
    ck_assert_int_eq(xstore_plan(&in, &pl, &err), STRATA_E_INVALID);
    ck_assert_msg(strstr(err.message, "--expert-store: 'maybe' is not one of auto|on|off"), "%s",
                  err.message);
    in.mode = "on", in.io = "uring";
    ck_assert_int_eq(xstore_plan(&in, &pl, &err), STRATA_E_INVALID);
    ck_assert_msg(strstr(err.message, "--expert-io"), "%s", err.message);
    in.io = "io_uring", in.direct = NULL;
    ck_assert_int_eq(xstore_plan(&in, &pl, &err), STRATA_E_INVALID);
    ck_assert_msg(strstr(err.message, "--expert-direct"), "%s", err.message);
}
END_TEST

static Suite *xstore_suite(void) {
    Suite *s = suite_create("xstore");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_plan);
    tcase_add_test(tc, test_bytes_every_mode);
    tcase_add_test(tc, test_floor_and_holds);
    tcase_add_test(tc, test_warm);
    tcase_add_test(tc, test_same_logits);
    tcase_add_test(tc, test_step_reads_each_expert_once);
    tcase_add_test(tc, test_read_errors);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("xstore", xstore_suite)
