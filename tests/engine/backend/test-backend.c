/* tests/engine/backend/test-backend.c: the backend seam (engine/backend/backend.h).
 *
 *  1. A recording backend (a wrapper that logs every member call and checks
 *     the seam's contract, then forwards to a CPU backend) runs the forward
 *     pass of real and synthesized models: the logits are the plain CPU
 *     backend's bit for bit; every op falls inside a step (begin .. wait);
 *     a step is one submit, dense or MoE, while the experts are resident
 *     (the RAM tier over the CPU's arena), and one more a MoE layer behind a
 *     tier that may evict (its picks read back); the routing profile counts
 *     every pick either way; host bytes a tensor_write hands over are
 *     unchanged until the submit that runs it; the op counts are the
 *     architecture's (so every op of the step goes through the seam).
 *  2. The CPU backend's ops against direct formulas: router top-k with the
 *     arch table's renormalisation and scale rules, the shared expert's
 *     gate, a MoE split over two tables (what a second backend computes),
 *     matmul over bound weights and host matrices, begin dropping an
 *     unsubmitted recording, binding errors and host views.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend/backend.h"
#include "engine/cpu/backend-cpu.h"
#include "engine/cpu/ops.h"
#include "engine/experts/experts.h"
#include "engine/experts/profile.h"
#include "engine/kv/kv.h"
#include "engine/model/model.h"
#include "tests/engine/model/model-spec.h"
#include "tests/harness.h"

/* ---- the recording backend ---------------------------------------------------- */

enum rec_op {
    R_WRITE,
    R_READ,
    R_EMBED,
    R_COPY_ROWS,
    R_RMSNORM,
    R_MATMUL,
    R_ADD_BIAS,
    R_ADD,
    R_ROPE,
    R_KV_WRITE,
    R_ATTN,
    R_SWIGLU,
    R_ROUTE,
    R_MOE,
    R_ADD_GATED,
    R_OPS,
};

#define REC_SNAPS 64

struct rec {
    struct backend *inner; /* owned */
    bool open;             /* between begin and the wait after the last submit */
    bool submitted;        /* a submit since the last wait */
    int n_begin, n_submit, n_wait;
    int ops[R_OPS];
    int ops_outside; /* ops recorded with no step open: must stay 0 */
    /* tensor_write sources not yet run: their bytes when recorded */
    struct {
        const void *src;
        size_t n;
        void *copy;
    } snap[REC_SNAPS];
    int n_snap, snap_changed;
};

static struct rec *R(void *ctx) {
    return ctx;
}
#define IN(ctx) (R(ctx)->inner)

static void op(void *ctx, enum rec_op o) {
    struct rec *r = ctx;
    r->ops[o]++;
    if (!r->open)
        r->ops_outside++;
}

static int rec_supports(void *ctx, enum quant_type t, int64_t n, enum backend_use u) {
    return IN(ctx)->ops->supports(IN(ctx)->ctx, t, n, u);
}
static struct backend_weights *rec_bind(void *ctx, const struct backend_weight_desc *d, int n,
                                        const struct backend_bind_params *p,
                                        struct backend_weight **out, struct backend_bind_info *info,
                                        struct strata_error *err) {
    return IN(ctx)->ops->weights_bind(IN(ctx)->ctx, d, n, p, out, info, err);
}
static void rec_wfree(void *ctx, struct backend_weights *s) {
    IN(ctx)->ops->weights_free(IN(ctx)->ctx, s);
}
static int rec_whost(void *ctx, const struct backend_weight *w, int64_t i,
                     struct backend_host_mat *out) {
    return IN(ctx)->ops->weight_host(IN(ctx)->ctx, w, i, out);
}
static struct backend_tensor *rec_talloc(void *ctx, enum backend_dtype dt, int64_t r, int64_t c,
                                         struct strata_error *err) {
    return IN(ctx)->ops->tensor_alloc(IN(ctx)->ctx, dt, r, c, err);
}
static void rec_tfree(void *ctx, struct backend_tensor *t) {
    ck_assert_msg(!R(ctx)->open, "a tensor freed inside a step");
    IN(ctx)->ops->tensor_free(IN(ctx)->ctx, t);
}
static struct kv_store *rec_kvs(void *ctx, struct strata_error *err) {
    return IN(ctx)->ops->kv_store_init(IN(ctx)->ctx, err);
}
static int rec_begin(void *ctx, const struct backend_step *s, struct strata_error *err) {
    struct rec *r = ctx;
    r->n_begin++;
    r->open = true;
    r->submitted = false;
    for (int i = 0; i < r->n_snap; i++)
        free(r->snap[i].copy);
    r->n_snap = 0;
    ck_assert(s->n_tok >= 1 && s->kv && s->seq && s->pos && s->n_kv_max >= 1);
    return IN(ctx)->ops->begin(IN(ctx)->ctx, s, err);
}
static int rec_submit(void *ctx, struct strata_error *err) {
    struct rec *r = ctx;
    ck_assert_msg(r->open, "submit outside a step");
    r->n_submit++;
    r->submitted = true;
    for (int i = 0; i < r->n_snap; i++) { /* the host bytes are as they were recorded */
        if (memcmp(r->snap[i].src, r->snap[i].copy, r->snap[i].n))
            r->snap_changed++;
        free(r->snap[i].copy);
    }
    r->n_snap = 0;
    return IN(ctx)->ops->submit(IN(ctx)->ctx, err);
}
static int rec_wait(void *ctx, struct strata_error *err) {
    struct rec *r = ctx;
    r->n_wait++;
    r->submitted = false;
    return IN(ctx)->ops->wait(IN(ctx)->ctx, err);
}
static void rec_write(void *ctx, struct backend_tensor *t, int64_t row0, const void *src,
                      int64_t n) {
    struct rec *r = ctx;
    op(ctx, R_WRITE);
    ck_assert(r->n_snap < REC_SNAPS);
    const size_t bytes = (size_t)(n * t->n_cols) * 4;
    r->snap[r->n_snap].src = src;
    r->snap[r->n_snap].n = bytes;
    r->snap[r->n_snap].copy = malloc(bytes ? bytes : 1);
    memcpy(r->snap[r->n_snap++].copy, src, bytes);
    IN(ctx)->ops->tensor_write(IN(ctx)->ctx, t, row0, src, n);
}
static void rec_read(void *ctx, const struct backend_tensor *t, int64_t row0, void *dst,
                     int64_t n) {
    op(ctx, R_READ);
    IN(ctx)->ops->tensor_read(IN(ctx)->ctx, t, row0, dst, n);
}
static void rec_embed(void *ctx, const struct backend_weight *w, const struct backend_tensor *ids,
                      int n, struct backend_tensor *out) {
    op(ctx, R_EMBED);
    IN(ctx)->ops->embed(IN(ctx)->ctx, w, ids, n, out);
}
static void rec_copy_rows(void *ctx, const struct backend_tensor *s,
                          const struct backend_tensor *ids, int n, int64_t c,
                          struct backend_tensor *d) {
    op(ctx, R_COPY_ROWS);
    IN(ctx)->ops->copy_rows(IN(ctx)->ctx, s, ids, n, c, d);
}
static void rec_rmsnorm(void *ctx, const struct backend_tensor *x, const struct backend_weight *w,
                        struct backend_tensor *y, int64_t r, int64_t c, float eps) {
    op(ctx, R_RMSNORM);
    IN(ctx)->ops->rmsnorm(IN(ctx)->ctx, x, w, y, r, c, eps);
}
static void rec_matmul(void *ctx, const struct backend_tensor *x, int64_t r,
                       const struct backend_mm *j, int n) {
    op(ctx, R_MATMUL);
    IN(ctx)->ops->matmul(IN(ctx)->ctx, x, r, j, n);
}
static void rec_add_bias(void *ctx, struct backend_tensor *y, const struct backend_weight *b,
                         int64_t r, int64_t c) {
    op(ctx, R_ADD_BIAS);
    IN(ctx)->ops->add_bias(IN(ctx)->ctx, y, b, r, c);
}
static void rec_add(void *ctx, struct backend_tensor *x, const struct backend_tensor *y, int64_t r,
                    int64_t c) {
    op(ctx, R_ADD);
    IN(ctx)->ops->add(IN(ctx)->ctx, x, y, r, c);
}
static void rec_rope(void *ctx, struct backend_tensor *x, int n, int h, int d,
                     const struct backend_tensor *pos, const struct backend_rope *cfg) {
    op(ctx, R_ROPE);
    IN(ctx)->ops->rope(IN(ctx)->ctx, x, n, h, d, pos, cfg);
}
static void rec_kv_write(void *ctx, struct kv_cache *kv, int l, const struct backend_tensor *k,
                         const struct backend_tensor *v, const struct backend_tensor *seq,
                         const struct backend_tensor *pos, int n, int hkv, int dk, int dv) {
    op(ctx, R_KV_WRITE);
    IN(ctx)->ops->kv_write(IN(ctx)->ctx, kv, l, k, v, seq, pos, n, hkv, dk, dv);
}
static void rec_attn(void *ctx, const struct backend_attn *a) {
    op(ctx, R_ATTN);
    IN(ctx)->ops->attention(IN(ctx)->ctx, a);
}
static void rec_swiglu(void *ctx, const struct backend_tensor *g, const struct backend_tensor *u,
                       struct backend_tensor *y, int64_t r, int64_t c) {
    op(ctx, R_SWIGLU);
    IN(ctx)->ops->swiglu(IN(ctx)->ctx, g, u, y, r, c);
}
static void rec_route(void *ctx, const struct backend_route *r) {
    op(ctx, R_ROUTE);
    IN(ctx)->ops->moe_route(IN(ctx)->ctx, r);
}
static void rec_moe(void *ctx, const struct backend_moe *m) {
    op(ctx, R_MOE);
    IN(ctx)->ops->moe_ffn(IN(ctx)->ctx, m);
}
static void rec_add_gated(void *ctx, struct backend_tensor *o, const struct backend_tensor *s,
                          const struct backend_tensor *g, int64_t r, int64_t c) {
    op(ctx, R_ADD_GATED);
    IN(ctx)->ops->add_gated(IN(ctx)->ctx, o, s, g, r, c);
}
static void rec_free(void *ctx) {
    struct rec *r = ctx;
    for (int i = 0; i < r->n_snap; i++)
        free(r->snap[i].copy);
    backend_free(r->inner);
    free(r);
}

static const struct backend_ops rec_ops = {
    .name = "recording",
    .caps = BACKEND_CAP_HOST_MATS,
    .supports = rec_supports,
    .weights_bind = rec_bind,
    .weights_free = rec_wfree,
    .weight_host = rec_whost,
    .tensor_alloc = rec_talloc,
    .tensor_free = rec_tfree,
    .kv_store_init = rec_kvs,
    .begin = rec_begin,
    .submit = rec_submit,
    .wait = rec_wait,
    .tensor_write = rec_write,
    .tensor_read = rec_read,
    .embed = rec_embed,
    .copy_rows = rec_copy_rows,
    .rmsnorm = rec_rmsnorm,
    .matmul = rec_matmul,
    .add_bias = rec_add_bias,
    .add = rec_add,
    .rope = rec_rope,
    .kv_write = rec_kv_write,
    .attention = rec_attn,
    .swiglu = rec_swiglu,
    .moe_route = rec_route,
    .moe_ffn = rec_moe,
    .add_gated = rec_add_gated,
    .free = rec_free,
};

static struct backend *rec_init(void) {
    struct strata_error err = {0};
    struct backend_cpu_params cp = backend_cpu_params_default();
    struct rec *r = calloc(1, sizeof *r);
    struct backend *be = calloc(1, sizeof *be);
    ck_assert(r && be);
    r->inner = backend_cpu_init(&cp, &err);
    ck_assert_msg(r->inner != NULL, "%s", err.message);
    *be = (struct backend){&rec_ops, r};
    return be;
}

/* ---- 1. the forward pass through the recording backend ------------------------- */

#define N_STEPS 4

struct fcase {
    const char *spec; /* a model-spec.h kind, or NULL: stories260K */
    int n_moe;        /* MoE layers */
    bool front;       /* a tier in front of the chain that may evict: picks read back */
    bool profile;     /* count the routing profile */
};

/* A tier that holds nothing and says it may evict (resident NULL): the
 * model must then read each MoE layer's picks back inside the step. */
static int miss_get(void *ctx, int layer, int expert, enum experts_which which, uint64_t step,
                    struct experts_ref *out, struct strata_error *err) {
    return EXPERTS_MISS;
}
static const struct experts_ops miss_ops = {.name = "miss", .get = miss_get};
static struct experts_source *miss_front(void *arg, struct experts_source *chain,
                                         struct strata_error *err) {
    return experts_source_init(&miss_ops, NULL, chain, 0, 0, err);
}

/* Logits of N_STEPS forward calls on `be`: a 5-token prefill of seq 0 with
 * 2 outputs, then 3 steps decoding seqs 0 and 1 together. rec: the recorder
 * (NULL for a plain backend), checked after each call. */
static float *forward_run(const char *path, struct backend *be, struct rec *rec,
                          const struct fcase *c, struct profile *prof) {
    struct strata_error err = {0};
    struct model_params mp = model_params_default();
    mp.backend = be;
    mp.profile = prof;
    if (c->front)
        mp.experts_front = miss_front;
    mp.n_ctx_max = 32;
    mp.n_batch_max = 8;
    struct model *m = model_load(path, &mp, &err);
    ck_assert_msg(m != NULL, "%s: %s", path, err.message);
    struct kv_cache *kv = model_kv_init(m, 2, 0, &err);
    ck_assert_msg(kv != NULL, "%s", err.message);
    const int V = model_n_vocab(m);
    float *out = calloc((size_t)2 * N_STEPS * V, sizeof(float));
    struct model_batch_entry e[5];
    for (int i = 0; i < 5; i++)
        e[i] = (struct model_batch_entry){0, i, (i * 13 + 1) % V, i >= 3};
    for (int s = 0; s < N_STEPS; s++) {
        int n = 5;
        if (s > 0) {
            e[0] = (struct model_batch_entry){0, 4 + s, (s * 7 + 3) % V, true};
            e[1] = (struct model_batch_entry){1, s - 1, (s * 11 + 2) % V, true};
            n = 2;
        }
        const int sub0 = rec ? rec->n_submit : 0;
        ck_assert_msg(
            model_forward(m, kv, &(struct model_batch){e, n}, out + (size_t)2 * s * V, &err) == 0,
            "%s", err.message);
        if (rec) {
            /* one submit a step; one more a MoE layer whose picks come back */
            ck_assert_int_eq(rec->n_submit - sub0, 1 + (c->front ? c->n_moe : 0));
            ck_assert_int_eq(rec->n_wait, rec->n_submit);
            rec->open = false; /* the step is over: ops now would be outside one */
        }
    }
    kv_free(kv);
    model_free(m);
    return out;
}

static const struct fcase fcases[] = {
    {NULL, 0, false, false},     {"llama-yarn", 0, false, false}, {"qwen2", 0, false, false},
    {"qwen3", 0, false, false},  {"qwen2moe", 2, false, true},    {"qwen3moe", 2, false, false},
    {"qwen3moe", 2, true, true}, {"qwen2moe", 2, true, false},
};

START_TEST(test_recording_backend_matches_cpu) {
    const struct fcase *c = &fcases[_i];
    char path[1024];
    struct spec s = {0};
    if (c->spec) {
        s = spec_of(c->spec);
        tmp_path(path, sizeof path, c->spec);
        write_model(path, &s);
    } else {
        test_shared_path(path, sizeof path, "models/stories260K.gguf");
    }
    struct strata_error err = {0};
    struct backend_cpu_params cp = backend_cpu_params_default();
    struct backend *cpu = backend_cpu_init(&cp, &err);
    const struct fcase plain = {c->spec, c->n_moe, false, false};
    float *want = forward_run(path, cpu, NULL, &plain, NULL);
    backend_free(cpu);
    struct backend *be = rec_init();
    struct rec *r = be->ctx;
    struct profile *prof = c->profile ? profile_init(c->n_moe, s.n_expert, &err) : NULL;
    float *got = forward_run(path, be, r, c, prof);
    struct gguf_file *f = gguf_open(path, &err);
    ck_assert(f != NULL);
    const int V = (int)gguf_find_tensor(f, "token_embd.weight")->ne[1];
    uint64_t nl = 0;
    char key[64];
    char arch[32];
    ck_assert(gguf_get_str_buf(f, "general.architecture", arch, sizeof arch, NULL) == 0);
    snprintf(key, sizeof key, "%s.block_count", arch);
    ck_assert(gguf_get_uint(f, key, &nl, NULL) == 0);
    gguf_close(f);
    ck_assert_msg(memcmp(got, want, (size_t)2 * N_STEPS * V * sizeof(float)) == 0,
                  "%s: the recording backend's logits differ from the CPU's",
                  c->spec ? c->spec : "stories260K");
    ck_assert_int_eq(r->ops_outside, 0);
    ck_assert_int_eq(r->snap_changed, 0);
    ck_assert_int_eq(r->n_begin, N_STEPS);
    /* every op of the step went through the seam, as often as the architecture says */
    const int L = (int)nl * N_STEPS;
    ck_assert_int_eq(r->ops[R_EMBED], N_STEPS);
    ck_assert_int_eq(r->ops[R_ATTN], L);
    ck_assert_int_eq(r->ops[R_KV_WRITE], L);
    ck_assert_int_eq(r->ops[R_ROPE], 2 * L);
    ck_assert_int_eq(r->ops[R_COPY_ROWS], N_STEPS);
    ck_assert_int_eq(r->ops[R_RMSNORM], (2 + (s.qk_norm ? 2 : 0)) * L + N_STEPS);
    ck_assert_int_eq(r->ops[R_ADD], 2 * L);
    ck_assert_int_eq(r->ops[R_ADD_BIAS], s.biases ? 3 * L : 0);
    ck_assert_int_eq(r->ops[R_ROUTE], c->n_moe * N_STEPS);
    ck_assert_int_eq(r->ops[R_MOE], c->n_moe * N_STEPS);
    ck_assert_int_eq(r->ops[R_ADD_GATED], s.n_ff_shexp ? c->n_moe * N_STEPS : 0);
    ck_assert_int_eq(r->ops[R_SWIGLU], c->n_moe ? (s.n_ff_shexp ? L : 0) : L);
    /* reads: the logits, and each MoE layer's picks where they come back (for
     * the tier in front, or for the profile after the step); writes: ids,
     * pos, seq, out rows */
    ck_assert_int_eq(r->ops[R_READ], (1 + (c->front || c->profile ? c->n_moe : 0)) * N_STEPS);
    if (prof) /* every pick: 5 + 2 + 2 + 2 tokens, top k, every layer */
        ck_assert_uint_eq(profile_total(prof), (uint64_t)11 * s.n_expert_used * c->n_moe);
    profile_free(prof);
    ck_assert_int_eq(r->ops[R_WRITE], 4 * N_STEPS);
    printf("%-12s%s%s %d steps: %d submits, %d matmuls, bit-identical to the CPU backend\n",
           c->spec ? c->spec : "stories260K", c->front ? " +front" : "",
           c->profile ? " +profile" : "", N_STEPS, r->n_submit, r->ops[R_MATMUL]);
    backend_free(be);
    free(want);
    free(got);
    if (c->spec)
        unlink(path);
}
END_TEST

/* ---- 2. the CPU backend's ops ------------------------------------------------------ */

struct cpu_fix {
    struct backend *be;
    const struct backend_ops *o;
    void *c;
};

static struct cpu_fix cpu_fix(void) {
    struct strata_error err = {0};
    struct backend_cpu_params cp = backend_cpu_params_default();
    struct backend *be = backend_cpu_init(&cp, &err);
    ck_assert_msg(be != NULL, "%s", err.message);
    return (struct cpu_fix){be, be->ops, be->ctx};
}

static struct backend_tensor *tensor(struct cpu_fix *f, enum backend_dtype dt, int64_t r, int64_t c,
                                     const void *init) {
    struct strata_error err = {0};
    struct backend_tensor *t = f->o->tensor_alloc(f->c, dt, r, c, &err);
    ck_assert_msg(t != NULL, "%s", err.message);
    ck_assert(t->dtype == dt && t->n_rows == r && t->n_cols == c);
    if (init)
        f->o->tensor_write(f->c, t, 0, init, r);
    return t;
}

static void run(struct cpu_fix *f) {
    struct strata_error err = {0};
    ck_assert_msg(f->o->submit(f->c, &err) == 0, "%s", err.message);
    ck_assert(f->o->wait(f->c, &err) == 0);
}

static const struct backend_step no_kv = {1, 1, NULL, NULL, NULL};

START_TEST(test_route_rules) {
    struct cpu_fix f = cpu_fix();
    ck_assert(f.o->begin(f.c, &no_kv, NULL) == 0);
    /* token 0: experts 1 and 3 best; token 1: a tie between 0 and 2 goes to 0 */
    const float lg[2][4] = {{0.1f, 2.0f, -1.0f, 1.5f}, {1.0f, 0.0f, 1.0f, 0.5f}};
    for (int rule = 0; rule < 3; rule++) {
        struct backend_tensor *l = tensor(&f, BACKEND_F32, 2, 4, lg);
        struct backend_tensor *sel = tensor(&f, BACKEND_I32, 2, 2, NULL);
        struct backend_tensor *w = tensor(&f, BACKEND_F32, 2, 2, NULL);
        const struct backend_route r = {l, sel, w, 2, 4, 2, rule == 1, rule == 2 ? 2.5f : 1.0f};
        f.o->moe_route(f.c, &r);
        int32_t s[4];
        float wv[4], p[2][4];
        f.o->tensor_read(f.c, sel, 0, s, 2);
        f.o->tensor_read(f.c, w, 0, wv, 2);
        f.o->tensor_read(f.c, l, 0, p, 2);
        run(&f);
        ck_assert(s[0] == 1 && s[1] == 3 && s[2] == 0 && s[3] == 2);
        float q[4];
        memcpy(q, lg[0], sizeof q);
        ops_softmax(q, 4);
        ck_assert_float_eq(p[0][1], q[1]); /* the logits were softmaxed in place */
        const float sum = q[1] + q[3];
        const float want0 = rule == 1 ? q[1] / sum : rule == 2 ? q[1] * 2.5f : q[1];
        ck_assert_float_eq_tol(wv[0], want0, 1e-7f);
        if (rule == 1)
            ck_assert_float_eq_tol(wv[2] + wv[3], 1.0f, 1e-6f);
        f.o->tensor_free(f.c, l), f.o->tensor_free(f.c, sel), f.o->tensor_free(f.c, w);
        ck_assert(f.o->begin(f.c, &no_kv, NULL) == 0);
    }
    backend_free(f.be);
}
END_TEST

START_TEST(test_elementwise_ops) {
    struct cpu_fix f = cpu_fix();
    struct strata_error err = {0};
    ck_assert(f.o->begin(f.c, &no_kv, NULL) == 0);
    const float x0[2][4] = {{1, -2, 3, 0.5f}, {-1, 4, 0.25f, 2}};
    const float s0[2][4] = {{0.5f, 1, -1, 2}, {3, -0.5f, 1, 1}};
    const float g0[2] = {0.3f, -2.0f};
    const float b0[4] = {0.1f, 0.2f, 0.3f, 0.4f};
    struct backend_weight *bw;
    const struct backend_weight_desc d = {
        "bias", {b0, QUANT_F32, 1, 4, 16, BACKEND_LAYOUT_ROWS}, 1, BACKEND_USE_VEC, false, 0};
    struct backend_weights *set = f.o->weights_bind(f.c, &d, 1, NULL, &bw, NULL, &err);
    ck_assert_msg(set != NULL, "%s", err.message);
    struct backend_tensor *x = tensor(&f, BACKEND_F32, 2, 4, x0);
    struct backend_tensor *s = tensor(&f, BACKEND_F32, 2, 4, s0);
    struct backend_tensor *g = tensor(&f, BACKEND_F32, 2, 1, g0);
    struct backend_tensor *y = tensor(&f, BACKEND_F32, 2, 4, NULL);
    const int32_t ids0[2] = {1, 1};
    struct backend_tensor *ids = tensor(&f, BACKEND_I32, 2, 1, ids0);
    f.o->add_gated(f.c, x, s, g, 2, 4);   /* x += sigmoid(g) s */
    f.o->add_bias(f.c, x, bw, 2, 4);      /* x += b */
    f.o->copy_rows(f.c, x, ids, 2, 4, y); /* y = x rows 1, 1 */
    f.o->add(f.c, y, s, 2, 4);            /* y += s */
    float xo[2][4], yo[2][4];
    f.o->tensor_read(f.c, x, 0, xo, 2);
    f.o->tensor_read(f.c, y, 0, yo, 2);
    run(&f);
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < 4; i++) {
            const float gs = 1.0f / (1.0f + expf(-g0[t]));
            const float want = x0[t][i] + gs * s0[t][i] + b0[i];
            ck_assert_float_eq(xo[t][i], want);
            ck_assert_float_eq(yo[t][i], xo[1][i] + s0[t][i]);
        }
    /* begin drops an unsubmitted recording: this write never happens */
    ck_assert(f.o->begin(f.c, &no_kv, NULL) == 0);
    f.o->tensor_write(f.c, x, 0, s0, 2);
    ck_assert(f.o->begin(f.c, &no_kv, NULL) == 0);
    f.o->tensor_read(f.c, x, 0, yo, 2);
    run(&f);
    ck_assert(memcmp(yo, xo, sizeof yo) == 0);
    /* a KV cache whose blocks are not host memory is refused at begin */
    struct kv_params kp = {.n_layer = 1, .n_seq_max = 1, .n_ctx = 4, .n_embd_k = 4, .n_embd_v = 4};
    struct kv_cache *kv = kv_init(&kp, &err);
    struct backend_step st = {1, 1, kv, ids0, ids0};
    ck_assert_int_eq(f.o->begin(f.c, &st, &err), 0); /* host store: fine */
    kv_free(kv);
    f.o->tensor_free(f.c, x), f.o->tensor_free(f.c, s), f.o->tensor_free(f.c, g);
    f.o->tensor_free(f.c, y), f.o->tensor_free(f.c, ids);
    f.o->tensor_free(f.c, NULL);
    f.o->weights_free(f.c, set);
    f.o->weights_free(f.c, NULL);
    backend_free(f.be);
    backend_free(NULL);
}
END_TEST

/* A store without host addresses (a device's): the CPU backend refuses it. */
static int dev_alloc(void *ctx, int block, size_t bytes) {
    return 0;
}
static void dev_copy(void *ctx, int dst, int src, size_t off, size_t n) {
}
static const struct kv_store_ops dev_store_ops = {"device", dev_alloc, NULL, dev_copy,
                                                  NULL,     NULL,      NULL};

START_TEST(test_refuses_device_kv) {
    struct cpu_fix f = cpu_fix();
    struct strata_error err = {0};
    struct kv_store *st = calloc(1, sizeof *st);
    *st = (struct kv_store){&dev_store_ops, NULL};
    struct kv_params kp = {.n_layer = 1, .n_seq_max = 1, .n_ctx = 4, .n_embd_k = 4, .n_embd_v = 4};
    struct kv_cache *kv = kv_init_store(&kp, st, &err);
    ck_assert_msg(kv != NULL, "%s", err.message);
    const int32_t z = 0;
    struct backend_step s = {1, 1, kv, &z, &z};
    ck_assert_int_eq(f.o->begin(f.c, &s, &err), STRATA_E_INVALID);
    ck_assert_msg(strstr(err.message, "device") != NULL, "%s", err.message);
    kv_free(kv);
    backend_free(f.be);
}
END_TEST

/* An F32 matrix (rows, cols) from a seeded stream. */
static float *rand_mat(int64_t rows, int64_t cols, uint32_t seed) {
    float *w = malloc((size_t)(rows * cols) * sizeof *w);
    for (int64_t i = 0; i < rows * cols; i++) {
        seed = seed * 1664525u + 1013904223u;
        w[i] = (float)(seed >> 8) / (float)(1 << 24) - 0.5f;
    }
    return w;
}

START_TEST(test_matmul_bound_and_host) {
    struct cpu_fix f = cpu_fix();
    struct strata_error err = {0};
    enum { R = 32, C = 64, N = 3 };
    float *w = rand_mat(R, C, 7), *x0 = rand_mat(N, C, 9);
    const struct backend_weight_desc d = {
        "w", {w, QUANT_F32, R, C, C * 4, BACKEND_LAYOUT_ROWS}, 1, BACKEND_USE_MATMUL, false, 0};
    struct backend_weight *h[2];
    struct backend_bind_params copy = {.copy = true, .drop_source = false};
    struct backend_bind_info info;
    struct backend_weights *s0 = f.o->weights_bind(f.c, &d, 1, NULL, &h[0], NULL, &err);
    struct backend_weights *s1 = f.o->weights_bind(f.c, &d, 1, &copy, &h[1], &info, &err);
    ck_assert(s0 && s1);
    ck_assert_uint_eq(info.copied_bytes, R * C * 4); /* F32 is never packed */
    ck_assert_uint_eq(info.packed_bytes, 0);
    struct backend_host_mat v;
    ck_assert_int_eq(f.o->weight_host(f.c, h[1], -1, &v), 0);
    ck_assert(v.data != w && memcmp(v.data, w, R * C * 4) == 0 && v.n_rows == R);
    ck_assert_int_eq(f.o->weight_host(f.c, h[0], 0, &v), 0);
    ck_assert(v.data == w); /* not copied: the host bytes in place */
    ck_assert_int_eq(f.o->weight_host(f.c, h[0], 1, &v), STRATA_E_INVALID);
    ck_assert(f.o->begin(f.c, &no_kv, NULL) == 0);
    struct backend_tensor *x = tensor(&f, BACKEND_F32, N, C, x0);
    struct backend_tensor *y[3];
    for (int i = 0; i < 3; i++)
        y[i] = tensor(&f, BACKEND_F32, N, R, NULL);
    const struct backend_mm jobs[3] = {
        {{.w = h[0]}, y[0]}, {{.w = h[1]}, y[1]}, {{.w = NULL, .host = d.host}, y[2]}};
    f.o->matmul(f.c, x, N, jobs, 3);
    float out[3][N][R];
    for (int i = 0; i < 3; i++)
        f.o->tensor_read(f.c, y[i], 0, out[i], N);
    run(&f);
    ck_assert(memcmp(out[0], out[1], sizeof out[0]) == 0); /* the same rows, copied: same bits */
    ck_assert(memcmp(out[0], out[2], sizeof out[0]) == 0); /* bound or host: same bits */
    for (int t = 0; t < N; t++)
        for (int r = 0; r < R; r++) {
            double want = 0;
            for (int c = 0; c < C; c++)
                want += (double)w[r * C + c] * x0[t * C + c];
            ck_assert_double_eq_tol(out[0][t][r], want, 1e-4);
        }
    for (int i = 0; i < 3; i++)
        f.o->tensor_free(f.c, y[i]);
    f.o->tensor_free(f.c, x);
    f.o->weights_free(f.c, s0), f.o->weights_free(f.c, s1);
    /* what the kernels cannot multiply is refused with the tensor's name */
    const struct backend_weight_desc bad = {
        "blk.0.odd",
        {w, QUANT_IQ2_XXS, 1, 256, quant_row_size(QUANT_IQ2_XXS, 256), BACKEND_LAYOUT_ROWS},
        1,
        BACKEND_USE_MATMUL,
        false,
        0};
    ck_assert(f.o->weights_bind(f.c, &bad, 1, NULL, h, NULL, &err) == NULL);
    ck_assert_int_eq(err.code, STRATA_E_UNSUPPORTED);
    ck_assert_msg(strstr(err.message, "blk.0.odd") && strstr(err.message, "iq2_xxs"), "%s",
                  err.message);
    const struct backend_weight_desc stack = {"s",   d.host, 5, BACKEND_USE_MATMUL,
                                              false, 0}; /* 32 % 5 */
    ck_assert(f.o->weights_bind(f.c, &stack, 1, NULL, h, NULL, &err) == NULL);
    ck_assert(f.o->supports(f.c, QUANT_Q4_K, 256, BACKEND_USE_MATMUL));
    ck_assert(!f.o->supports(f.c, QUANT_Q4_K, 256, BACKEND_USE_VEC));
    free(w);
    free(x0);
    backend_free(f.be);
}
END_TEST

/* The routed experts of 4 tokens (k = 2 of 4 experts) with every expert in
 * one table, and split in two tables (experts 0, 1 and 2, 3: what two
 * backends would compute, the second adding into the first's sum). */
START_TEST(test_moe_split_tables) {
    struct cpu_fix f = cpu_fix();
    struct strata_error err = {0};
    enum { E = 32, FF = 48, NE = 4, K = 2, T = 4 };
    float *gate = rand_mat(NE * FF, E, 1), *up = rand_mat(NE * FF, E, 2);
    float *down = rand_mat(NE * E, FF, 3), *x0 = rand_mat(T, E, 4);
    const struct backend_weight_desc d[3] = {
        {"g",
         {gate, QUANT_F32, NE * FF, E, E * 4, BACKEND_LAYOUT_ROWS},
         NE,
         BACKEND_USE_MATMUL,
         false,
         0},
        {"u",
         {up, QUANT_F32, NE * FF, E, E * 4, BACKEND_LAYOUT_ROWS},
         NE,
         BACKEND_USE_MATMUL,
         false,
         0},
        {"d",
         {down, QUANT_F32, NE * E, FF, FF * 4, BACKEND_LAYOUT_ROWS},
         NE,
         BACKEND_USE_MATMUL,
         false,
         0}};
    struct backend_weight *h[3];
    struct backend_weights *set = f.o->weights_bind(f.c, d, 3, NULL, h, NULL, &err);
    ck_assert_msg(set != NULL, "%s", err.message);
    struct backend_expert all[NE], lo[NE], hi[NE];
    memset(lo, 0, sizeof lo), memset(hi, 0, sizeof hi);
    for (int e = 0; e < NE; e++) {
        all[e] = (struct backend_expert){{h[0], e, {0}}, {h[1], e, {0}}, {h[2], e, {0}}};
        if (e < 2)
            lo[e] = all[e];
        else
            hi[e] = all[e];
    }
    /* expert 2 as host bytes (a RAM tier's) instead of the bound weight: same bits */
    for (int w = 0; w < 3; w++) {
        struct backend_mat *m = w == 0 ? &hi[2].gate : w == 1 ? &hi[2].up : &hi[2].down;
        ck_assert_int_eq(f.o->weight_host(f.c, h[w], 2, &m->host), 0);
        m->w = NULL;
    }
    const int32_t sel0[T][K] = {{0, 2}, {3, 1}, {1, 0}, {2, 3}};
    const float w0[T][K] = {{0.7f, 0.3f}, {0.6f, 0.4f}, {0.5f, 0.5f}, {0.9f, 0.1f}};
    ck_assert(f.o->begin(f.c, &no_kv, NULL) == 0);
    struct backend_tensor *x = tensor(&f, BACKEND_F32, T, E, x0);
    struct backend_tensor *sel = tensor(&f, BACKEND_I32, T, K, sel0);
    struct backend_tensor *sw = tensor(&f, BACKEND_F32, T, K, w0);
    struct backend_tensor *o1 = tensor(&f, BACKEND_F32, T, E, NULL);
    struct backend_tensor *o2 = tensor(&f, BACKEND_F32, T, E, NULL);
    struct backend_moe m = {x, sel, sw, all, o1, T, K, NE, E, FF, false, NULL, NULL, NULL};
    f.o->moe_ffn(f.c, &m);
    m.out = o2, m.experts = lo;
    f.o->moe_ffn(f.c, &m);
    m.experts = hi, m.accumulate = true;
    f.o->moe_ffn(f.c, &m);
    float a[T][E], b[T][E];
    f.o->tensor_read(f.c, o1, 0, a, T);
    f.o->tensor_read(f.c, o2, 0, b, T);
    run(&f);
    double emax = 0, amax = 0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < E; i++) {
            emax = fmax(emax, fabs((double)a[t][i] - b[t][i]));
            amax = fmax(amax, fabs((double)a[t][i]));
            /* the direct formula for token t, output i */
            double want = 0;
            for (int j = 0; j < K; j++) {
                const int e = sel0[t][j];
                double acc = 0;
                for (int r = 0; r < FF; r++) {
                    double gv = 0, uv = 0;
                    for (int c = 0; c < E; c++) {
                        gv += (double)gate[(e * FF + r) * E + c] * x0[t * E + c];
                        uv += (double)up[(e * FF + r) * E + c] * x0[t * E + c];
                    }
                    acc += (double)down[(e * E + i) * FF + r] * (gv / (1 + exp(-gv)) * uv);
                }
                want += w0[t][j] * acc;
            }
            ck_assert_double_eq_tol(a[t][i], want, 1e-4);
        }
    /* slot order differs only where a token's first pick is in the second table */
    ck_assert_msg(emax <= 1e-6 * amax, "split vs one table: %g", emax);
    ck_assert(memcmp(a[0], b[0], sizeof a[0]) == 0); /* token 0: slot 0 in lo, slot 1 in hi */
    /* a table that names no expert: out is zeros, or untouched when accumulating */
    struct backend_expert none[NE];
    memset(none, 0, sizeof none);
    m.experts = none, m.accumulate = true;
    f.o->moe_ffn(f.c, &m);
    m.out = o1, m.accumulate = false;
    f.o->moe_ffn(f.c, &m);
    float c2[T][E], z[T][E];
    f.o->tensor_read(f.c, o2, 0, c2, T);
    f.o->tensor_read(f.c, o1, 0, z, T);
    run(&f);
    ck_assert(memcmp(c2, b, sizeof b) == 0);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < E; i++)
            ck_assert_float_eq(z[t][i], 0.0f);
    struct backend_tensor *ts[] = {x, sel, sw, o1, o2};
    for (int i = 0; i < 5; i++)
        f.o->tensor_free(f.c, ts[i]);
    f.o->weights_free(f.c, set);
    free(gate), free(up), free(down), free(x0);
    backend_free(f.be);
}
END_TEST

static Suite *backend_suite(void) {
    Suite *s = suite_create("backend");
    TCase *tc = tcase_create("backend");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_recording_backend_matches_cpu, 0,
                        (int)(sizeof fcases / sizeof fcases[0]));
    tcase_add_test(tc, test_route_rules);
    tcase_add_test(tc, test_elementwise_ops);
    tcase_add_test(tc, test_refuses_device_kv);
    tcase_add_test(tc, test_matmul_bound_and_host);
    tcase_add_test(tc, test_moe_split_tables);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("backend", backend_suite)
