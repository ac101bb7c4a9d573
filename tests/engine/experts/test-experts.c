/* tests/engine/experts/test-experts.c: the tiered expert seam (engine/experts).
 *
 * Tiers and chaining on a synthesized qwen3moe file: the file tier hands out
 * slices of the mapped tensors; a RAM tier serves what was placed in it and
 * passes the rest on; a device tier written here (an arena over weights it
 * binds to a CPU backend, serving even experts) goes in front. Holds are
 * counted per step and released per step; EXPERTS_STEPS_MAX steps in flight
 * at most. Prefetch from another thread while the forward thread gets: held
 * experts stop at the RAM tier, the rest are queued or dropped (never
 * waited for) and carried out. Then the model over such a chain
 * (model_params.experts_front): logits bit-identical to the plain chain's,
 * every get released with its step, the routing profile still counted, and
 * a failing tier failing the step cleanly. Last, a backend without host
 * matrices (the CPU's ops dressed as a device's) with a second, CPU backend
 * beside it: the device tier's experts run on the first, the host tiers'
 * on the second, and the logits agree with one backend's to the last bits.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/cpu/backend-cpu.h"
#include "engine/experts/experts.h"
#include "engine/experts/profile.h"
#include "engine/gguf/gguf.h"
#include "engine/kv/kv.h"
#include "engine/model/model.h"
#include "tests/engine/model/model-spec.h"
#include "tests/harness.h"

static const char *const exps_name[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};

static const struct gguf_tensor_info *exps(const struct gguf_file *f, int layer, int which) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s.weight", layer, exps_name[which]);
    return gguf_find_tensor(f, name);
}

/* The qwen3moe spec (2 layers, 8 experts, top 3) written to path, opened. */
static struct gguf_file *moe_file(char *path, size_t cap, const char *tag) {
    struct spec s = spec_of("qwen3moe");
    tmp_path(path, cap, tag);
    write_model(path, &s);
    struct strata_error err = {0};
    struct gguf_file *f = gguf_open(path, &err);
    ck_assert_msg(f != NULL, "%s", err.message);
    return f;
}

static struct experts_source *file_tier(const struct gguf_file *f, int queue) {
    struct strata_error err = {0};
    struct experts_file_params fp = {.queue = queue};
    struct experts_source *src = experts_file_init(f, 2, &fp, &err);
    ck_assert_msg(src != NULL, "%s", err.message);
    return src;
}

/* ---- a device tier: an arena over weights bound to a backend -------------------- */

struct arena {
    struct backend *be;             /* borrowed */
    struct backend_weights *set;    /* owned */
    struct backend_weight *w[2][3]; /* (layer, which) stacks bound to be */
    int fail_after;                 /* > 0: the fail_after-th get fails with STRATA_E_IO */
    int n_gets;
    uint64_t held_step[8]; /* steps with holds; 0 = free */
    int held_n[8];
    int n_release, bad_release, max_steps;
};

static int arena_get(void *ctx, int layer, int expert, enum experts_which which, uint64_t step,
                     struct experts_ref *out, struct strata_error *err) {
    struct arena *a = ctx;
    if (a->fail_after > 0 && ++a->n_gets >= a->fail_after)
        return strata_error_set(err, STRATA_E_IO, "arena: upload failed");
    if (expert % 2)
        return EXPERTS_MISS;
    int slot = -1, used = 0;
    for (int i = 0; i < 8; i++) {
        if (a->held_step[i] == step)
            slot = i;
        used += a->held_step[i] != 0;
    }
    for (int i = 0; i < 8 && slot < 0; i++)
        if (!a->held_step[i])
            slot = i, a->held_step[i] = step, used++;
    ck_assert(slot >= 0);
    a->held_n[slot]++;
    if (used > a->max_steps)
        a->max_steps = used;
    out->tier = EXPERTS_TIER_DEVICE;
    out->mat = (struct backend_mat){.w = a->w[layer][which], .index = expert};
    return 0;
}

static void arena_release(void *ctx, uint64_t step) {
    struct arena *a = ctx;
    a->n_release++;
    for (int i = 0; i < 8; i++)
        if (a->held_step[i] == step) {
            a->held_step[i] = 0;
            a->held_n[i] = 0;
            return;
        }
}

static int arena_holds(const struct arena *a) {
    int n = 0;
    for (int i = 0; i < 8; i++)
        n += a->held_n[i];
    return n;
}

static void arena_free(void *ctx) {
    struct arena *a = ctx;
    if (a->set)
        a->be->ops->weights_free(a->be->ctx, a->set);
    free(a);
}

static const struct experts_ops arena_ops = {
    .name = "arena",
    .get = arena_get,
    .release = arena_release,
    .prefetch = NULL,
    .stats = NULL,
    .free = arena_free,
};

/* An arena over f's expert stacks, bound to be as the file's rows. */
static struct arena *arena_new(struct backend *be, const struct gguf_file *f) {
    struct arena *a = calloc(1, sizeof *a);
    ck_assert(a);
    a->be = be;
    struct backend_weight_desc d[6];
    for (int l = 0; l < 2; l++)
        for (int w = 0; w < 3; w++) {
            const struct gguf_tensor_info *t = exps(f, l, w);
            const enum quant_type ty = (enum quant_type)t->type;
            d[l * 3 + w] =
                (struct backend_weight_desc){exps_name[w],
                                             {t->data, ty, t->ne[1] * t->ne[2], t->ne[0],
                                              quant_row_size(ty, t->ne[0]), BACKEND_LAYOUT_ROWS},
                                             t->ne[2],
                                             BACKEND_USE_MATMUL,
                                             false,
                                             0};
        }
    struct strata_error err = {0};
    a->set = be->ops->weights_bind(be->ctx, d, 6, NULL, &a->w[0][0], NULL, &err);
    ck_assert_msg(a->set != NULL, "%s", err.message);
    return a;
}

/* ---- tiers ------------------------------------------------------------------------ */

START_TEST(test_file_tier) {
    char path[256];
    struct gguf_file *f = moe_file(path, sizeof path, "file");
    struct experts_source *src = file_tier(f, 0);
    struct strata_error err = {0};
    ck_assert_str_eq(src->ops->name, "file");
    ck_assert_int_eq(src->n_expert, 8);
    struct experts_ref r;
    for (int w = 0; w < 3; w++) {
        ck_assert_int_eq(experts_get(src, 1, 5, (enum experts_which)w, 7, &r, &err), 0);
        const struct gguf_tensor_info *t = exps(f, 1, w);
        const size_t rb = quant_row_size((enum quant_type)t->type, t->ne[0]);
        ck_assert_int_eq(r.tier, EXPERTS_TIER_FILE);
        ck_assert(r.mat.w == NULL);
        ck_assert(r.mat.host.data == (const uint8_t *)t->data + 5 * t->ne[1] * rb);
        ck_assert(r.mat.host.n_rows == t->ne[1] && r.mat.host.n_cols == t->ne[0]);
        ck_assert(r.mat.host.row_bytes == rb && r.mat.host.layout == BACKEND_LAYOUT_ROWS);
    }
    struct experts_stats st;
    experts_stats(src, &st);
    ck_assert_uint_eq(st.gets[EXPERTS_TIER_FILE], 3);
    ck_assert_uint_eq(st.held, 3);
    experts_release(src, 6); /* another step: nothing */
    experts_stats(src, &st);
    ck_assert_uint_eq(st.held, 3);
    experts_release(src, 7);
    experts_stats(src, &st);
    ck_assert_uint_eq(st.held, 0);
    /* out of range: layer, expert, which */
    ck_assert_int_eq(experts_get(src, 2, 0, EXPERTS_GATE, 1, &r, &err), STRATA_E_INVALID);
    ck_assert_int_eq(experts_get(src, 0, 8, EXPERTS_GATE, 1, &r, &err), STRATA_E_INVALID);
    ck_assert_int_eq(experts_get(src, 0, -1, EXPERTS_GATE, 1, &r, &err), STRATA_E_INVALID);
    ck_assert_int_eq(experts_get(src, 0, 0, EXPERTS_WHICH_COUNT, 1, &r, &err), STRATA_E_INVALID);
    experts_free(src);
    /* a layer without expert tensors: NOT_FOUND */
    struct experts_file_params fp = {.queue = 0};
    src = experts_file_init(f, 3, &fp, &err);
    ck_assert(src != NULL);
    ck_assert_int_eq(experts_get(src, 2, 0, EXPERTS_UP, 1, &r, &err), STRATA_E_NOT_FOUND);
    experts_free(src);
    ck_assert(experts_file_init(f, 0, NULL, &err) == NULL);
    fp.queue = -1;
    ck_assert(experts_file_init(f, 2, &fp, &err) == NULL);
    gguf_close(f);
    unlink(path);
}
END_TEST

START_TEST(test_ram_tier_chain) {
    char path[256];
    struct gguf_file *f = moe_file(path, sizeof path, "ram");
    struct strata_error err = {0};
    ck_assert(experts_ram_init(NULL, &err) == NULL);
    ck_assert_int_eq(err.code, STRATA_E_INVALID);
    struct experts_source *file = file_tier(f, 0);
    const struct gguf_tensor_info *t = exps(f, 0, EXPERTS_GATE);
    const enum quant_type ty = (enum quant_type)t->type;
    const size_t rb = quant_row_size(ty, t->ne[0]);
    const struct backend_host_mat file_stack = {t->data,  ty, t->ne[1] * t->ne[2],
                                                t->ne[0], rb, BACKEND_LAYOUT_ROWS};
    ck_assert_int_eq(experts_ram_place(file, 0, EXPERTS_GATE, &file_stack), STRATA_E_INVALID);
    struct experts_source *src = experts_ram_init(file, &err); /* steals file */
    ck_assert_msg(src != NULL, "%s", err.message);
    ck_assert_str_eq(src->ops->name, "ram");
    ck_assert(src->next == file && src->n_layer == 2 && src->n_expert == 8);
    /* a copy of layer 0's gate stack in host memory */
    uint8_t *copy = malloc(t->n_bytes);
    memcpy(copy, t->data, t->n_bytes);
    struct backend_host_mat stack = file_stack;
    stack.data = copy;
    ck_assert_int_eq(experts_ram_place(src, 0, EXPERTS_GATE, &stack), 0);
    struct backend_host_mat bad = stack;
    bad.n_rows -= 1; /* not a whole number of experts */
    ck_assert_int_eq(experts_ram_place(src, 0, EXPERTS_UP, &bad), STRATA_E_INVALID);
    bad = stack, bad.n_rows = 8 * 8, bad.layout = BACKEND_LAYOUT_PACK16; /* 8 rows an expert */
    ck_assert_int_eq(experts_ram_place(src, 0, EXPERTS_UP, &bad), STRATA_E_INVALID);
    ck_assert_int_eq(experts_ram_place(src, 5, EXPERTS_UP, &stack), STRATA_E_INVALID);
    struct experts_ref r;
    ck_assert_int_eq(experts_get(src, 0, 3, EXPERTS_GATE, 1, &r, &err), 0);
    ck_assert_int_eq(r.tier, EXPERTS_TIER_RAM);
    ck_assert(r.mat.host.data == copy + 3 * t->ne[1] * rb && r.mat.host.n_rows == t->ne[1]);
    ck_assert_int_eq(experts_get(src, 0, 3, EXPERTS_UP, 1, &r, &err), 0);
    ck_assert_int_eq(r.tier, EXPERTS_TIER_FILE); /* not placed: the next tier */
    ck_assert_int_eq(experts_get(src, 1, 3, EXPERTS_GATE, 1, &r, &err), 0);
    ck_assert_int_eq(r.tier, EXPERTS_TIER_FILE);
    struct experts_stats st;
    experts_stats(src, &st);
    ck_assert_uint_eq(st.gets[EXPERTS_TIER_RAM], 1);
    ck_assert_uint_eq(st.gets[EXPERTS_TIER_FILE], 2);
    experts_free(src); /* the chain */
    free(copy);
    gguf_close(f);
    unlink(path);
}
END_TEST

START_TEST(test_device_tier_steps) {
    char path[256];
    struct gguf_file *f = moe_file(path, sizeof path, "dev");
    struct strata_error err = {0};
    struct backend_cpu_params cp = backend_cpu_params_default();
    struct backend *be = backend_cpu_init(&cp, &err);
    struct arena *a = arena_new(be, f);
    struct experts_source *src = experts_source_init(&arena_ops, a, file_tier(f, 0), 0, 0, &err);
    ck_assert(src && src->n_layer == 2 && src->n_expert == 8);
    struct experts_ref r;
    /* even experts on the device, odd ones from the file */
    ck_assert_int_eq(experts_get(src, 1, 4, EXPERTS_DOWN, 1, &r, &err), 0);
    ck_assert_int_eq(r.tier, EXPERTS_TIER_DEVICE);
    ck_assert(r.mat.w == a->w[1][EXPERTS_DOWN] && r.mat.index == 4);
    ck_assert_int_eq(experts_get(src, 1, 5, EXPERTS_DOWN, 1, &r, &err), 0);
    ck_assert_int_eq(r.tier, EXPERTS_TIER_FILE);
    /* steps in flight: gets of steps 2 and 3, release of 2 leaves 3's */
    for (int e = 0; e < 8; e += 2) {
        ck_assert_int_eq(experts_get(src, 0, e, EXPERTS_GATE, 2, &r, &err), 0);
        ck_assert_int_eq(experts_get(src, 0, e, EXPERTS_UP, 3, &r, &err), 0);
    }
    ck_assert_int_eq(arena_holds(a), 9);
    experts_release(src, 2);
    ck_assert_int_eq(arena_holds(a), 5);
    struct experts_stats st;
    experts_stats(src, &st);
    ck_assert_uint_eq(st.held, 6); /* step 1's two (one arena, one file) + step 3's four */
    ck_assert_uint_eq(st.gets[EXPERTS_TIER_DEVICE], 9);
    ck_assert_uint_eq(st.gets[EXPERTS_TIER_FILE], 1);
    experts_release(src, 1);
    experts_release(src, 3);
    experts_stats(src, &st);
    ck_assert_uint_eq(st.held, 0);
    ck_assert_int_eq(arena_holds(a), 0);
    /* at most EXPERTS_STEPS_MAX steps hold weights at once */
    for (int s = 0; s < EXPERTS_STEPS_MAX; s++)
        ck_assert_int_eq(experts_get(src, 0, 1, EXPERTS_GATE, 100 + s, &r, &err), 0);
    ck_assert_int_eq(experts_get(src, 0, 1, EXPERTS_GATE, 200, &r, &err), STRATA_E_LIMIT);
    experts_release(src, 100);
    ck_assert_int_eq(experts_get(src, 0, 1, EXPERTS_GATE, 200, &r, &err), 0);
    for (int s = 0; s <= 100; s++)
        experts_release(src, 100 + s);
    experts_stats(src, &st);
    ck_assert_uint_eq(st.held, 0);
    /* a failing tier fails the get with its code; nothing is held for it */
    a->fail_after = 1;
    ck_assert_int_eq(experts_get(src, 0, 0, EXPERTS_GATE, 300, &r, &err), STRATA_E_IO);
    experts_stats(src, &st);
    ck_assert_uint_eq(st.held, 0);
    experts_free(src); /* frees the arena's weights too */
    /* a chain whose last tier misses: NOT_FOUND */
    a = arena_new(be, f);
    src = experts_source_init(&arena_ops, a, NULL, 2, 8, &err);
    ck_assert_int_eq(experts_get(src, 0, 1, EXPERTS_GATE, 1, &r, &err), STRATA_E_NOT_FOUND);
    experts_free(src);
    experts_free(NULL);
    backend_free(be);
    gguf_close(f);
    unlink(path);
}
END_TEST

/* ---- prefetch from another thread -------------------------------------------------- */

struct pf_arg {
    struct experts_source *src;
    int n_calls;
};

static void *pf_thread(void *p) {
    const struct pf_arg *a = p;
    for (int i = 0; i < a->n_calls; i++) {
        const int32_t ids[3] = {i % 8, (i + 3) % 8, 99}; /* 99: out of range, ignored */
        experts_prefetch(a->src, i % 2, ids, 3);
    }
    return NULL;
}

START_TEST(test_prefetch_other_thread) {
    char path[256];
    struct gguf_file *f = moe_file(path, sizeof path, "pf");
    struct strata_error err = {0};
    struct experts_source *src = experts_ram_init(file_tier(f, 8), &err);
    ck_assert(src != NULL);
    uint8_t *copies[3];
    for (int w = 0; w < 3; w++) { /* layer 0 wholly in RAM */
        const struct gguf_tensor_info *t = exps(f, 0, w);
        copies[w] = malloc(t->n_bytes);
        memcpy(copies[w], t->data, t->n_bytes);
        const enum quant_type ty = (enum quant_type)t->type;
        const struct backend_host_mat m = {
            copies[w],          ty, t->ne[1] * t->ne[2], t->ne[0], quant_row_size(ty, t->ne[0]),
            BACKEND_LAYOUT_ROWS};
        ck_assert_int_eq(experts_ram_place(src, 0, (enum experts_which)w, &m), 0);
    }
    struct pf_arg arg = {src, 4000};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, pf_thread, &arg), 0);
    /* meanwhile the forward thread gets and releases, step after step */
    struct experts_ref r;
    for (int s = 1; s <= 200; s++) {
        for (int e = 0; e < 8; e++)
            ck_assert_int_eq(experts_get(src, s % 2, e, EXPERTS_DOWN, s, &r, &err), 0);
        experts_release(src, s);
    }
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    struct experts_stats st;
    experts_stats(src, &st);
    ck_assert_uint_eq(st.prefetch_asked, 3 * 4000);
    /* layer 0's ids stop at the RAM tier; layer 1's 2 valid ids a call are
     * queued or dropped, never waited for */
    ck_assert_uint_eq(st.prefetch_queued + st.prefetch_dropped, 2 * 2000);
    ck_assert_uint_gt(st.prefetch_queued, 0);
    for (int i = 0; i < 5000 && st.prefetch_done < st.prefetch_queued; i++) {
        usleep(1000);
        experts_stats(src, &st);
    }
    ck_assert_uint_eq(st.prefetch_done, st.prefetch_queued);
    ck_assert_uint_eq(st.held, 0);
    printf("prefetch: %llu asked, %llu queued, %llu dropped, %llu done\n",
           (unsigned long long)st.prefetch_asked, (unsigned long long)st.prefetch_queued,
           (unsigned long long)st.prefetch_dropped, (unsigned long long)st.prefetch_done);
    experts_free(src);
    for (int w = 0; w < 3; w++)
        free(copies[w]);
    /* without a queue every prefetch is dropped at once */
    src = file_tier(f, 0);
    const int32_t ids[2] = {1, 2};
    experts_prefetch(src, 1, ids, 2);
    experts_prefetch(src, 7, ids, 2); /* no such layer: ignored */
    experts_stats(src, &st);
    ck_assert_uint_eq(st.prefetch_dropped, 2);
    ck_assert_uint_eq(st.prefetch_queued, 0);
    experts_free(src);
    gguf_close(f);
    unlink(path);
}
END_TEST

/* ---- the model over a chain ----------------------------------------------------------- */

struct front_arg {
    struct backend *be;
    const struct gguf_file *f;
    struct arena *a; /* the one made by the last front call */
};

static struct experts_source *front(void *p, struct experts_source *chain,
                                    struct strata_error *err) {
    struct front_arg *fa = p;
    fa->a = arena_new(fa->be, fa->f);
    return experts_source_init(&arena_ops, fa->a, chain, 0, 0, err);
}

static struct experts_source *front_fail(void *p, struct experts_source *chain,
                                         struct strata_error *err) {
    experts_free(chain);
    strata_error_set(err, STRATA_E_NOMEM, "arena: no VRAM for the slots");
    return NULL;
}

#define N_TOK 6

/* Logits of a 6-token prefill (all rows) and 2 decode steps; with a profile. */
static float *model_run(const char *path, struct backend *be, bool repack, struct front_arg *fa,
                        struct profile *prof, int fail_after, int *fail_rc) {
    struct strata_error err = {0};
    struct model_params mp = model_params_default();
    mp.backend = be;
    mp.repack = repack;
    mp.n_ctx_max = 32;
    mp.n_batch_max = 8;
    mp.profile = prof;
    if (fa) {
        mp.experts_front = front;
        mp.experts_front_arg = fa;
    }
    struct model *m = model_load(path, &mp, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    const int V = model_n_vocab(m);
    struct kv_cache *kv = model_kv_init(m, 1, 0, &err);
    float *out = malloc((size_t)(N_TOK + 2) * V * sizeof(float));
    struct model_batch_entry e[N_TOK];
    for (int i = 0; i < N_TOK; i++)
        e[i] = (struct model_batch_entry){0, i, (i * 17 + 3) % V, true};
    if (fa && fail_after > 0) { /* the prefill fails in a tier, then works */
        fa->a->fail_after = fail_after;
        *fail_rc = model_forward(m, kv, &(struct model_batch){e, N_TOK}, out, &err);
        ck_assert_int_eq(kv_seq_len(kv, 0), 0);
        struct experts_stats st;
        experts_stats(model_experts(m), &st);
        ck_assert_uint_eq(st.held, 0);
        ck_assert_int_eq(arena_holds(fa->a), 0);
        fa->a->fail_after = 0;
        if (prof)
            profile_reset(prof);
    }
    ck_assert_msg(model_forward(m, kv, &(struct model_batch){e, N_TOK}, out, &err) == 0, "%s",
                  err.message);
    for (int s = 0; s < 2; s++) {
        struct model_batch_entry d = {0, N_TOK + s, (s * 5 + 1) % V, true};
        ck_assert(model_forward(m, kv, &(struct model_batch){&d, 1}, out + (size_t)(N_TOK + s) * V,
                                &err) == 0);
        struct experts_stats st;
        experts_stats(model_experts(m), &st);
        ck_assert_uint_eq(st.held, 0); /* every get released with its step */
    }
    if (fa) {
        struct experts_stats st;
        experts_stats(model_experts(m), &st);
        ck_assert_uint_gt(st.gets[EXPERTS_TIER_DEVICE], 0);
        ck_assert_uint_gt(st.gets[repack ? EXPERTS_TIER_RAM : EXPERTS_TIER_FILE], 0);
        ck_assert_int_eq(arena_holds(fa->a), 0);
        ck_assert_int_eq(fa->a->max_steps, 1); /* one step in flight at a time */
        ck_assert_int_ge(fa->a->n_release, 3);
    }
    kv_free(kv);
    model_free(m);
    return out;
}

START_TEST(test_model_over_chain) {
    char path[256];
    struct gguf_file *f = moe_file(path, sizeof path, "model");
    struct strata_error err = {0};
    struct backend_cpu_params cp = backend_cpu_params_default();
    struct backend *be = backend_cpu_init(&cp, &err);
    struct profile *prof = profile_init(2, 8, &err);
    ck_assert(be && prof);
    for (int repack = 0; repack < 2; repack++) {
        /* the spec's Q8_0 experts are never packed: the RAM tier's copy has the
         * file's rows, so every tier gives the same bits */
        float *want = model_run(path, be, repack, NULL, NULL, 0, NULL);
        struct front_arg fa = {be, f, NULL};
        profile_reset(prof);
        float *got = model_run(path, be, repack, &fa, prof, 0, NULL);
        const int V = 96;
        ck_assert_msg(memcmp(got, want, (size_t)(N_TOK + 2) * V * sizeof(float)) == 0,
                      "repack %d: logits through the device tier differ", repack);
        /* the routing profile: every pick of every layer, N_TOK + 2 tokens, top 3 */
        ck_assert_uint_eq(profile_total(prof), (uint64_t)(N_TOK + 2) * 3 * 2);
        /* a tier failing in the prefill fails that step only */
        int rc = 0;
        float *again = model_run(path, be, repack, &fa, prof, 5, &rc);
        ck_assert_int_eq(rc, STRATA_E_IO);
        ck_assert(memcmp(again, want, (size_t)(N_TOK + 2) * V * sizeof(float)) == 0);
        free(again);
        free(want);
        free(got);
    }
    /* a front tier that fails to start fails the load with its error */
    struct model_params mp = model_params_default();
    mp.backend = be;
    mp.experts_front = front_fail;
    ck_assert(model_load(path, &mp, &err) == NULL);
    ck_assert_int_eq(err.code, STRATA_E_NOMEM);
    ck_assert_msg(strstr(err.message, "no VRAM") != NULL, "%s", err.message);
    /* nor does a model load without a backend */
    mp = model_params_default();
    ck_assert(model_load(path, &mp, &err) == NULL);
    ck_assert_int_eq(err.code, STRATA_E_INVALID);
    profile_free(prof);
    backend_free(be);
    gguf_close(f);
    unlink(path);
}
END_TEST

/* ---- a backend without host matrices, a CPU beside it -------------------------------- */

/* The CPU backend dressed as a device one: no BACKEND_CAP_HOST_MATS, and its
 * moe_ffn checks that it is never handed host bytes. */
static struct backend_ops nohost_ops;
static const struct backend_ops *nohost_inner;
static int nohost_moe_calls, cold_matmuls;

static void nohost_moe(void *ctx, const struct backend_moe *m) {
    for (int e = 0; e < m->n_expert; e++) {
        const struct backend_expert *x = &m->experts[e];
        ck_assert_msg(!x->gate.host.data && !x->up.host.data && !x->down.host.data,
                      "expert %d handed to a backend without host matrices as host bytes", e);
    }
    nohost_moe_calls++;
    nohost_inner->moe_ffn(ctx, m);
}

static void count_matmul(void *arg, const struct kern_mat *w, const void *xq, size_t xq_stride,
                         int64_t n_tok, const float *y, int64_t ldy) {
    cold_matmuls++;
}

START_TEST(test_cold_experts_on_second_backend) {
    char path[256];
    struct gguf_file *f = moe_file(path, sizeof path, "cold");
    struct strata_error err = {0};
    struct backend_cpu_params cp = backend_cpu_params_default();
    struct backend *cpu = backend_cpu_init(&cp, &err);
    cp.on_matmul = count_matmul;
    struct backend *cold = backend_cpu_init(&cp, &err);
    ck_assert(cpu && cold);
    nohost_inner = cpu->ops;
    nohost_ops = *cpu->ops;
    nohost_ops.name = "device";
    nohost_ops.caps = 0;
    nohost_ops.moe_ffn = nohost_moe;
    struct backend dev = {&nohost_ops, cpu->ctx}; /* borrows the CPU backend's state */
    const int V = 96;
    for (int repack = 0; repack < 2; repack++) {
        float *want = model_run(path, cpu, repack, NULL, NULL, 0, NULL);
        /* even experts in the device tier (bound to dev), odd ones in host
         * memory (the RAM tier or the file) computed by the cold CPU backend */
        struct front_arg fa = {&dev, f, NULL};
        struct model_params mp = model_params_default();
        mp.backend = &dev;
        mp.backend_cold = cold;
        mp.repack = repack;
        mp.n_ctx_max = 32;
        mp.n_batch_max = 8;
        mp.experts_front = front;
        mp.experts_front_arg = &fa;
        struct model *m = model_load(path, &mp, &err);
        ck_assert_msg(m != NULL, "%s", err.message);
        struct kv_cache *kv = model_kv_init(m, 1, 0, &err);
        float *got = malloc((size_t)(N_TOK + 2) * V * sizeof(float));
        struct model_batch_entry e[N_TOK];
        for (int i = 0; i < N_TOK; i++)
            e[i] = (struct model_batch_entry){0, i, (i * 17 + 3) % V, true};
        nohost_moe_calls = cold_matmuls = 0;
        ck_assert_msg(model_forward(m, kv, &(struct model_batch){e, N_TOK}, got, &err) == 0, "%s",
                      err.message);
        for (int s = 0; s < 2; s++) {
            struct model_batch_entry d = {0, N_TOK + s, (s * 5 + 1) % V, true};
            ck_assert(model_forward(m, kv, &(struct model_batch){&d, 1},
                                    got + (size_t)(N_TOK + s) * V, &err) == 0);
        }
        ck_assert_int_eq(nohost_moe_calls, 3 * 2); /* every MoE layer of 3 steps */
        ck_assert_int_gt(cold_matmuls, 0);         /* the odd experts ran on the CPU */
        /* the two partial sums add in another order than one backend's slot
         * order: the last bits move, nothing more */
        double emax = 0, amax = 0;
        for (int i = 0; i < (N_TOK + 2) * V; i++) {
            emax = fmax(emax, fabs((double)got[i] - want[i]));
            amax = fmax(amax, fabs((double)want[i]));
        }
        printf("cold experts on a second backend (repack %d): logits within %.2e of one "
               "backend's (max |logit| %.3f)\n",
               repack, emax / amax, amax);
        ck_assert_msg(emax <= 1e-4 * amax, "split vs one backend: %g of %g", emax, amax);
        struct experts_stats st;
        experts_stats(model_experts(m), &st);
        ck_assert_uint_gt(st.gets[EXPERTS_TIER_DEVICE], 0);
        ck_assert_uint_gt(st.gets[repack ? EXPERTS_TIER_RAM : EXPERTS_TIER_FILE], 0);
        ck_assert_uint_eq(st.held, 0);
        kv_free(kv);
        model_free(m);
        /* without the cold backend a host expert fails the step */
        mp.backend_cold = NULL;
        m = model_load(path, &mp, &err);
        ck_assert_msg(m != NULL, "%s", err.message);
        kv = model_kv_init(m, 1, 0, &err);
        ck_assert_int_eq(model_forward(m, kv, &(struct model_batch){e, N_TOK}, got, &err),
                         STRATA_E_UNSUPPORTED);
        ck_assert_msg(strstr(err.message, "no backend_cold") != NULL, "%s", err.message);
        ck_assert_int_eq(kv_seq_len(kv, 0), 0);
        kv_free(kv);
        model_free(m);
        free(want);
        free(got);
    }
    backend_free(cold);
    backend_free(cpu);
    gguf_close(f);
    unlink(path);
}
END_TEST

static Suite *experts_suite(void) {
    Suite *s = suite_create("experts");
    TCase *tc = tcase_create("experts");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_file_tier);
    tcase_add_test(tc, test_ram_tier_chain);
    tcase_add_test(tc, test_device_tier_steps);
    tcase_add_test(tc, test_prefetch_other_thread);
    tcase_add_test(tc, test_model_over_chain);
    tcase_add_test(tc, test_cold_experts_on_second_backend);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("experts", experts_suite)
