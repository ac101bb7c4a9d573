/* tests/engine/experts/test-xstore-fast.c: what makes the expert store as
 * fast as the arena when memory suffices, and its reads overlap compute
 * (engine/experts/xstore.h "Packing", "Overlap"; xstore-dev.c):
 * - packing: on a synthesized qwen3moe whose expert matrices have the
 *   packed layout (Q4_K / Q6_K, 256 x 256), a store with pack hands out
 *   PACK16 matrices exactly where the active ISA has packed kernels (the
 *   arena's rule), whose unpacked bytes are the file's; the model with the
 *   store (a budget of 2 slots: constant eviction; and every expert) gives
 *   the arena's bits on every ISA the host runs, io_uring and pread;
 * - overlap: experts_need_start leaves the cold experts' reads in flight and
 *   marks exactly those late (hits are not); experts_need_wait completes
 *   them with the file's bytes; an injected EIO surfaces at the wait with a
 *   message naming the expert, not at the start, and the store serves the
 *   next need; a release with reads in flight waits for them (no write
 *   into a reused slot: ASan);
 * - prefetch: experts_prefetch reads the named cold experts ahead, each
 *   once; the next need counts them useful or wasted and the prediction's
 *   recall and precision; a need waits for a read ahead in flight instead of
 *   reading again, and reads again one that failed; the model with the side
 *   thread's router lookahead of 1 and 2 layers gives the same bits under a
 *   budget of K slots and of NE, io_uring with and without registered
 *   buffers, pread;
 * - the queue depth: from the device by default (4..256 with the rule that
 *   gave it), or as asked.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/cpu/backend-cpu.h"
#include "engine/cpu/kernels.h"
#include "engine/experts/experts.h"
#include "engine/experts/xstore.h"
#include "engine/gguf/gguf.h"
#include "engine/kv/kv.h"
#include "engine/model/model.h"
#include "tests/harness.h"
#include "tools/synth/synth.h"

#define NE 8 /* experts a layer */
#define K 2  /* picked a token */
#define NL 2 /* layers */
#define N_TOK 6
#define N_DEC 6

static const char *const exps_name[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};

/* qwen3moe 256 x 2 layers, 8 experts top-2 of ff 256, Q4_K_M: expert
 * matrices of 256 rows (16-row groups), Q4_K and (down, some layers) Q6_K. */
static void write_model(char *path, size_t cap) {
    snprintf(path, cap, "/tmp/strata-test-xstore-fast-%d.gguf", (int)getpid());
    struct synth_params p;
    synth_params_default(&p);
    snprintf(p.arch, sizeof p.arch, "qwen3moe");
    p.n_embd = 256, p.n_layer = NL, p.n_head = 4, p.n_head_kv = 2, p.head_dim = 64;
    p.n_ff = 512, p.n_vocab = 512, p.n_expert = NE, p.n_expert_used = K, p.n_ff_exp = 256;
    p.n_ctx = 64;
    snprintf(p.recipe, sizeof p.recipe, "q4_k_m");
    p.seed = 7;
    p.route_skew = 1.0;
    p.n_threads = 1;
    struct strata_error err = {0};
    ck_assert_msg(synth_write(&p, path, NULL, &err) == 0, "%s", err.message);
}

static struct experts_source *store_over(const struct gguf_file *f,
                                         const struct xstore_params *xp) {
    struct strata_error err = {0};
    struct experts_file_params fp = {.queue = 0};
    struct experts_source *file = experts_file_init(f, NL, &fp, &err);
    ck_assert_msg(file != NULL, "%s", err.message);
    struct experts_source *s = xstore_init(f, NL, K, file, xp, &err);
    ck_assert_msg(s != NULL, "%s", err.message);
    return s;
}

/* The file's bytes of (layer, expert, which). */
static const uint8_t *file_bytes(const struct gguf_file *f, int l, int e, int w, size_t *n) {
    char name[64];
    snprintf(name, sizeof name, "blk.%d.%s.weight", l, exps_name[w]);
    const struct gguf_tensor_info *t = gguf_find_tensor(f, name);
    ck_assert(t != NULL);
    *n = t->n_bytes / NE;
    return (const uint8_t *)t->data + (size_t)e * *n;
}

/* A handed-out matrix has the file's bytes (unpacked first when packed). */
static void check_bytes(const struct gguf_file *f, const struct experts_ref *r, int l, int e,
                        int w) {
    size_t n;
    const uint8_t *want = file_bytes(f, l, e, w, &n);
    const struct backend_host_mat *h = &r->mat.host;
    ck_assert_uint_eq((uint64_t)h->n_rows * h->row_bytes, n);
    if (h->layout == BACKEND_LAYOUT_ROWS) {
        ck_assert_msg(memcmp(h->data, want, n) == 0, "layer %d expert %d %s differs", l, e,
                      exps_name[w]);
        return;
    }
    uint8_t *rows = malloc(n);
    const struct kern_mat km = {h->data, h->type, h->n_rows, h->n_cols, h->row_bytes, 1};
    ck_assert_int_eq(kernels_unpack(&km, rows), 0);
    ck_assert_msg(memcmp(rows, want, n) == 0, "layer %d expert %d %s unpacked differs", l, e,
                  exps_name[w]);
    free(rows);
}

START_TEST(test_pack_layout) {
    char path[256];
    write_model(path, sizeof path);
    struct strata_error err = {0};
    struct gguf_file *f = gguf_open(path, &err);
    ck_assert_msg(f != NULL, "%s", err.message);
    const enum kernels_isa saved = kernels_isa_active();
    int n_packed = 0;
    for (int isa = 0; isa <= (int)kernels_isa_detected(); isa++)
        for (int pack = 0; pack < 2; pack++) {
            kernels_isa_force((enum kernels_isa)isa);
            struct xstore_params xp = xstore_params_default();
            xp.pack = pack;
            xp.ram_bytes = 0;
            struct experts_source *src = store_over(f, &xp);
            uint64_t step = 1;
            for (int l = 0; l < NL; l++)
                for (int e = 0; e < NE; e++, step++) {
                    const int32_t id = e;
                    ck_assert_int_eq(experts_need(src, l, &id, 1, step, &err), 0);
                    for (int w = 0; w < 3; w++) {
                        struct experts_ref r;
                        ck_assert_int_eq(experts_get(src, l, e, w, step, &r, &err), 0);
                        const struct backend_host_mat *h = &r.mat.host;
                        const bool want =
                            pack && kernels_pack_wanted(h->type, h->n_rows, h->n_cols);
                        ck_assert_int_eq(h->layout,
                                         want ? BACKEND_LAYOUT_PACK16 : BACKEND_LAYOUT_ROWS);
                        n_packed += want;
                        check_bytes(f, &r, l, e, w);
                    }
                    experts_release(src, step);
                }
            experts_free(src);
        }
    kernels_isa_force(saved);
    /* a host with AVX-512 packs every matrix of this model */
    if (kernels_isa_detected() >= KERNELS_ISA_AVX512)
        ck_assert_int_ge(n_packed, NL * NE * 3);
    gguf_close(f);
    unlink(path);
}
END_TEST

/* Prefill of N_TOK then N_DEC greedy steps: every row's logits, the tokens. */
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
        e[i] = (struct model_batch_entry){0, i, (i * 37 + 5) % V, true};
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
    kv_free(kv);
    model_free(m);
    return out;
}

START_TEST(test_pack_same_logits) {
    char path[256];
    write_model(path, sizeof path);
    struct strata_error err = {0};
    struct backend_cpu_params cp = backend_cpu_params_default();
    struct backend *be = backend_cpu_init(&cp, &err);
    ck_assert(be);
    struct gguf_file *f = gguf_open(path, &err);
    size_t mat;
    (void)file_bytes(f, 0, 0, 0, &mat);
    gguf_close(f);
    const size_t n = (size_t)(N_TOK + N_DEC) * 512 * sizeof(float);
    const enum kernels_isa saved = kernels_isa_active();
    for (int isa = 0; isa <= (int)kernels_isa_detected(); isa++) {
        kernels_isa_force((enum kernels_isa)isa);
        int32_t want_tok[N_DEC], got_tok[N_DEC];
        float *want = run_model(path, be, NULL, want_tok, NULL);
        for (int io = 0; io < 2; io++)
            for (int budget = 0; budget < 2; budget++) {
                struct xstore_params xp = xstore_params_default();
                xp.io = io ? XSTORE_IO_PREAD : XSTORE_IO_URING;
                xp.pack = true;
                /* NE slots (at least: a slot is the widest expert's three widened
                 * matrices): a layer's prefill picks always fit (an overflow pick
                 * would come from the file's rows, not packed: the same values in
                 * other last bits), and the two layers evict each other */
                const uint64_t slot = 3 * (((mat + 4095) & ~4095ull) + 4096) + 3 * 8192;
                xp.ram_bytes = budget == 0 ? NE * slot : 0;
                struct xstore_stats st;
                float *got = run_model(path, be, &xp, got_tok, &st);
                ck_assert_msg(memcmp(got, want, n) == 0, "%s %s budget %d: logits differ",
                              kernels_isa_name((enum kernels_isa)isa), io ? "pread" : "io_uring",
                              budget);
                ck_assert(memcmp(got_tok, want_tok, sizeof want_tok) == 0);
                ck_assert_uint_gt(st.misses, 0);
                ck_assert_uint_eq(st.read_errors, 0);
                ck_assert_uint_eq(st.overflow, 0);
                if (budget == 0)
                    ck_assert_uint_gt(st.evictions, 0);
                xstore_stats_free(&st);
                free(got);
            }
        free(want);
    }
    kernels_isa_force(saved);
    backend_free(be);
    unlink(path);
}
END_TEST

struct fault {
    _Atomic int fail;   /* 1: every read fails with -EIO */
    _Atomic int fail_n; /* > 0: the next fail_n reads fail with -EIO */
};

static int64_t fault_result(void *arg, uint64_t off, size_t n, int64_t res) {
    struct fault *ft = arg;
    if (atomic_load(&ft->fail))
        return -EIO;
    return atomic_load(&ft->fail_n) > 0 && atomic_fetch_sub(&ft->fail_n, 1) > 0 ? -EIO : res;
}

START_TEST(test_overlap) {
    char path[256];
    write_model(path, sizeof path);
    struct strata_error err = {0};
    struct gguf_file *f = gguf_open(path, &err);
    ck_assert_msg(f != NULL, "%s", err.message);
    for (int io = 0; io < 2; io++) {
        struct fault ft = {0};
        const struct xstore_sysops sys = {.pread = NULL, .result = fault_result, .arg = &ft};
        struct xstore_params xp = xstore_params_default();
        xp.io = io ? XSTORE_IO_PREAD : XSTORE_IO_URING;
        xp.sys = &sys;
        struct experts_source *src = store_over(f, &xp); /* every expert has a slot */
        uint8_t late[NE] = {0};
        const int32_t a[2] = {1, 4};
        ck_assert_int_eq(experts_need_start(src, 0, a, 2, 1, late, &err), 0);
        for (int e = 0; e < NE; e++)
            ck_assert_int_eq(late[e], e == 1 || e == 4);
        struct experts_ref r[2][3];
        for (int i = 0; i < 2; i++) /* handed out before the bytes are there */
            for (int w = 0; w < 3; w++)
                ck_assert_int_eq(experts_get(src, 0, a[i], w, 1, &r[i][w], &err), 0);
        ck_assert_int_eq(experts_need_wait(src, &err), 0);
        for (int i = 0; i < 2; i++)
            for (int w = 0; w < 3; w++)
                check_bytes(f, &r[i][w], 0, a[i], w);
        ck_assert_int_eq(experts_need_wait(src, &err), 0); /* nothing in flight: a no-op */
        /* a hit is not late */
        memset(late, 0, sizeof late);
        const int32_t b[2] = {4, 6};
        ck_assert_int_eq(experts_need_start(src, 0, b, 2, 2, late, &err), 0);
        for (int e = 0; e < NE; e++)
            ck_assert_int_eq(late[e], e == 6);
        ck_assert_int_eq(experts_need_wait(src, &err), 0);
        /* a failed read: at the wait, naming the expert; the start succeeded */
        atomic_store(&ft.fail, 1);
        memset(late, 0, sizeof late);
        const int32_t c[1] = {3};
        ck_assert_int_eq(experts_need_start(src, 1, c, 1, 3, late, &err), 0);
        ck_assert_int_eq(late[3], 1);
        ck_assert_int_eq(experts_need_wait(src, &err), STRATA_E_IO);
        ck_assert_msg(strstr(err.message, "reading layer 1 expert 3") &&
                          strstr(err.message, "Input/output error"),
                      "%s", err.message);
        atomic_store(&ft.fail, 0);
        memset(late, 0, sizeof late);
        ck_assert_int_eq(experts_need_start(src, 1, c, 1, 4, late, &err), 0);
        ck_assert_int_eq(late[3], 1); /* its slot was emptied: read again */
        ck_assert_int_eq(experts_need_wait(src, &err), 0);
        for (int w = 0; w < 3; w++) {
            ck_assert_int_eq(experts_get(src, 1, 3, w, 4, &r[0][w], &err), 0);
            check_bytes(f, &r[0][w], 1, 3, w);
        }
        /* released (and freed) with reads in flight: they end first */
        memset(late, 0, sizeof late);
        const int32_t d[3] = {0, 2, 5};
        ck_assert_int_eq(experts_need_start(src, 1, d, 3, 5, late, &err), 0);
        experts_release(src, 5);
        ck_assert_int_eq(experts_need_start(src, 0, d, 3, 6, late, &err), 0);
        struct xstore_stats st;
        xstore_stats(xstore_of(src), &st);
        ck_assert_uint_eq(st.read_errors, 3); /* the failed expert's three matrices */
        xstore_stats_free(&st);
        experts_free(src);
    }
    gguf_close(f);
    unlink(path);
}
END_TEST

START_TEST(test_queue_depth) {
    char path[256];
    write_model(path, sizeof path);
    struct strata_error err = {0};
    struct gguf_file *f = gguf_open(path, &err);
    ck_assert_msg(f != NULL, "%s", err.message);
    struct xstore_params xp = xstore_params_default();
    ck_assert_int_eq(xp.queue_depth, 0); /* from the device */
    struct experts_source *src = store_over(f, &xp);
    struct xstore_stats st;
    xstore_stats(xstore_of(src), &st);
    ck_assert_int_ge(st.queue_depth, 4);
    ck_assert_int_le(st.queue_depth, 256);
    ck_assert_msg(st.queue_rule &&
                      (strstr(st.queue_rule, "nr_requests") || strstr(st.queue_rule, "default 64")),
                  "%s", st.queue_rule ? st.queue_rule : "(null)");
    xstore_stats_free(&st);
    experts_free(src);
    xp.queue_depth = 8;
    src = store_over(f, &xp);
    xstore_stats(xstore_of(src), &st);
    ck_assert_int_eq(st.queue_depth, 8);
    ck_assert_str_eq(st.queue_rule, "asked");
    /* the store still reads right through a ring smaller than a batch */
    uint8_t late[NE] = {0};
    const int32_t all[NE] = {0, 1, 2, 3, 4, 5, 6, 7};
    ck_assert_int_eq(experts_need_start(src, 0, all, NE, 1, late, &err), 0);
    ck_assert_int_eq(experts_need_wait(src, &err), 0);
    for (int e = 0; e < NE; e++)
        for (int w = 0; w < 3; w++) {
            struct experts_ref r;
            ck_assert_int_eq(experts_get(src, 0, e, w, 1, &r, &err), 0);
            check_bytes(f, &r, 0, e, w);
        }
    xstore_stats_free(&st);
    experts_free(src);
    gguf_close(f);
    unlink(path);
}
END_TEST

/* Router lookahead: the store reads ahead what experts_prefetch names, once,
 * counts useful / wasted and the prediction's recall and precision at the
 * next need; the model with prefetch on gives the same bits. */
START_TEST(test_prefetch) {
    char path[256];
    write_model(path, sizeof path);
    struct strata_error err = {0};
    struct gguf_file *f = gguf_open(path, &err);
    ck_assert_msg(f != NULL, "%s", err.message);
    size_t mat;
    (void)file_bytes(f, 0, 0, 0, &mat);
    const uint64_t slot = 3 * (((mat + 4095) & ~4095ull) + 4096) + 3 * 8192;
    struct xstore_params xp = xstore_params_default();
    struct experts_source *src = store_over(f, &xp);
    const int32_t a[1] = {0};
    ck_assert_int_eq(experts_need(src, 0, a, 1, 1, &err), 0); /* the forward thread's first need */
    const int32_t p[3] = {2, 5, 2};
    experts_prefetch(src, 1, p, 3); /* nothing in flight: read now, 2 once */
    experts_prefetch(src, 1, p, 2); /* queued before: not again */
    struct xstore_stats st;
    xstore_stats(xstore_of(src), &st);
    ck_assert_uint_eq(st.prefetch_issued, 2);
    xstore_stats_free(&st);
    const int32_t b[2] = {2, 3};
    ck_assert_int_eq(experts_need(src, 1, b, 2, 2, &err), 0);
    for (int w = 0; w < 3; w++) {
        struct experts_ref r;
        ck_assert_int_eq(experts_get(src, 1, 2, w, 2, &r, &err), 0);
        check_bytes(f, &r, 1, 2, w);
    }
    xstore_stats(xstore_of(src), &st);
    ck_assert_uint_eq(st.prefetch_useful, 1); /* 2 */
    ck_assert_uint_eq(st.prefetch_wasted, 1); /* 5 */
    ck_assert_uint_eq(st.pred_hit, 1);
    ck_assert_uint_eq(st.pred_used, 2);
    ck_assert_uint_eq(st.pred_n, 2);
    ck_assert_uint_eq(st.layer_hits[1], 1);
    ck_assert_uint_eq(st.layer_misses[1], 1);
    xstore_stats_free(&st);
    xstore_stats(xstore_of(src), &st);
    ck_assert_uint_eq(st.prefetch_dropped, 0);
    xstore_stats_free(&st);
    experts_free(src);
    gguf_close(f);

    /* the model: the side thread's lookahead at depth 1 and 2, with a
     * budget of K slots (constant eviction, reads ahead competing with the
     * needs for slots) and one of NE; io_uring into registered buffers and
     * plain, pread: the same bits as every expert resident. The thread's
     * timing decides what is read ahead, never what is computed. */
    struct backend_cpu_params cp = backend_cpu_params_default();
    struct backend *be = backend_cpu_init(&cp, &err);
    int32_t want_tok[N_DEC], got_tok[N_DEC];
    float *want = run_model(path, be, NULL, want_tok, NULL);
    const size_t n = (size_t)(N_TOK + N_DEC) * 512 * sizeof(float);
    static const struct {
        enum xstore_io io;
        enum xstore_fixed fixed;
        const char *name;
    } io_modes[3] = {{XSTORE_IO_URING, XSTORE_FIXED_ON, "io_uring fixed"},
                     {XSTORE_IO_URING, XSTORE_FIXED_OFF, "io_uring"},
                     {XSTORE_IO_PREAD, XSTORE_FIXED_AUTO, "pread"}};
    uint64_t issued = 0, asked = 0, used = 0;
    for (int md = 0; md < 3; md++)
        for (int depth = 1; depth <= 2; depth++)
            for (int budget = 0; budget < 2; budget++) {
                xp = xstore_params_default();
                xp.pack = true;
                xp.io = io_modes[md].io;
                xp.fixed = io_modes[md].fixed;
                xp.prefetch = depth;
                xp.ram_bytes = (budget == 0 ? K : NE) * slot;
                float *got = run_model(path, be, &xp, got_tok, &st);
                ck_assert_msg(memcmp(got, want, n) == 0, "%s, prefetch %d, %d slots: logits differ",
                              io_modes[md].name, depth, st.n_slots);
                ck_assert(memcmp(got_tok, want_tok, sizeof want_tok) == 0);
                ck_assert_int_eq(st.fixed, md == 0);
                ck_assert_uint_le(st.prefetch_useful + st.prefetch_wasted, st.prefetch_issued);
                ck_assert_uint_le(st.pred_hit, st.pred_used);
                ck_assert_uint_eq(st.read_errors, 0);
                if (budget == 0)
                    ck_assert_uint_gt(st.evictions, 0);
                issued += st.prefetch_issued;
                asked += st.prefetch_issued + st.prefetch_dropped;
                used += st.pred_used;
                printf("prefetch %s depth %d, %d slots: %llu issued, %llu useful, %llu wasted, "
                       "%llu dropped, recall %llu/%llu\n",
                       io_modes[md].name, depth, st.n_slots, (unsigned long long)st.prefetch_issued,
                       (unsigned long long)st.prefetch_useful,
                       (unsigned long long)st.prefetch_wasted,
                       (unsigned long long)st.prefetch_dropped, (unsigned long long)st.pred_hit,
                       (unsigned long long)st.pred_used);
                xstore_stats_free(&st);
                free(got);
            }
    /* 12 runs of 7 steps: the thread's predictions reached the store */
    ck_assert_uint_gt(asked, 0);
    ck_assert_uint_gt(issued, 0);
    ck_assert_uint_gt(used, 0);
    free(want);
    backend_free(be);
    unlink(path);
}
END_TEST

/* A need that picks an expert whose read ahead is still in flight waits
 * for that read (no second read); a read ahead that failed under a need
 * is read again as the need's. pread with no worker thread: queued reads
 * run only when the forward thread waits, so "in flight" is certain. */
START_TEST(test_prefetch_in_flight) {
    char path[256];
    write_model(path, sizeof path);
    struct strata_error err = {0};
    struct gguf_file *f = gguf_open(path, &err);
    ck_assert_msg(f != NULL, "%s", err.message);
    struct fault ft = {0};
    const struct xstore_sysops sys = {.pread = NULL, .result = fault_result, .arg = &ft};
    struct xstore_params xp = xstore_params_default();
    xp.io = XSTORE_IO_PREAD;
    xp.n_threads = 1;
    xp.sys = &sys;
    struct experts_source *src = store_over(f, &xp);
    const int32_t a[1] = {0};
    ck_assert_int_eq(experts_need(src, 0, a, 1, 1, &err), 0);
    const int32_t p[2] = {2, 5};
    experts_prefetch(src, 1, p, 2); /* queued, not read yet */
    struct xstore_stats st;
    xstore_stats(xstore_of(src), &st);
    ck_assert_uint_eq(st.prefetch_issued, 2);
    ck_assert_uint_eq(st.reads, 3); /* expert 0's only */
    xstore_stats_free(&st);
    uint8_t late[NE] = {0};
    const int32_t b[1] = {2};
    ck_assert_int_eq(experts_need_start(src, 1, b, 1, 2, late, &err), 0);
    for (int e = 0; e < NE; e++)
        ck_assert_int_eq(late[e], e == 2); /* a hit, its bytes still to come */
    ck_assert_int_eq(experts_need_wait(src, &err), 0);
    for (int w = 0; w < 3; w++) {
        struct experts_ref r;
        ck_assert_int_eq(experts_get(src, 1, 2, w, 2, &r, &err), 0);
        check_bytes(f, &r, 1, 2, w);
    }
    experts_release(src, 2);
    xstore_stats(xstore_of(src), &st);
    ck_assert_uint_eq(st.layer_hits[1], 1);
    ck_assert_uint_eq(st.layer_misses[1], 0);
    ck_assert_uint_eq(st.prefetch_useful, 1);
    ck_assert_uint_eq(st.reads, 3 + 3); /* 2 once; 5 still queued */
    xstore_stats_free(&st);
    /* a read ahead that fails under a need: read again, the step succeeds */
    const int32_t q[1] = {6};
    experts_prefetch(src, 0, q, 1);                               /* queued behind 5's */
    ck_assert_int_eq(experts_need(src, 1, p + 1, 1, 3, &err), 0); /* waits for 5's reads only */
    atomic_store(&ft.fail_n, 3);                                  /* 6's three reads fail */
    memset(late, 0, sizeof late);
    ck_assert_int_eq(experts_need_start(src, 0, q, 1, 4, late, &err), 0);
    ck_assert_int_eq(late[6], 1);
    ck_assert_int_eq(experts_need_wait(src, &err), 0);
    for (int w = 0; w < 3; w++) {
        struct experts_ref r;
        ck_assert_int_eq(experts_get(src, 0, 6, w, 4, &r, &err), 0);
        check_bytes(f, &r, 0, 6, w);
    }
    experts_release(src, 4);
    xstore_stats(xstore_of(src), &st);
    ck_assert_uint_eq(st.read_errors, 3);
    ck_assert_uint_eq(st.reads, 6 + 3 + 3 + 3); /* 5, 6 failed, 6 again */
    ck_assert_uint_eq(st.prefetch_issued, 3);
    xstore_stats_free(&st);
    experts_free(src);
    gguf_close(f);
    unlink(path);
}
END_TEST

static Suite *xstore_fast_suite(void) {
    Suite *s = suite_create("xstore-fast");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_queue_depth);
    tcase_add_test(tc, test_pack_layout);
    tcase_add_test(tc, test_overlap);
    tcase_add_test(tc, test_pack_same_logits);
    tcase_add_test(tc, test_prefetch);
    tcase_add_test(tc, test_prefetch_in_flight);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("xstore-fast", xstore_fast_suite)
