/* gpu/backend-vk-fuse.c: the Vulkan backend's ops that have fused forms
 * (backend-vk.h): rmsnorm, matmul, add, rope, kv_write, swiglu and moe_ffn's
 * weighted sum. An op that may begin a pattern is held back (c->pend); the
 * next op either completes the pattern, recorded as one dispatch, or records
 * the held ops as they were asked for (bvk_pend_flush, which every other op
 * runs through bvk_rec) and is then taken on its own. The patterns:
 *
 *   matmul(gate, up), swiglu                 one fused gate+up+SwiGLU matvec
 *   matmul(a, one job -> t), add(x, t)       the matvec adds into x too
 *                                            (vkmm_matmul_acc)
 *   moe_ffn(-> t), add(x, t)                 the weighted sum adds into x too
 *   [rmsnorm(q), rmsnorm(k),] rope(q),       vkops_rope_kv
 *     rope(k), kv_write(k, v)
 *   matmul(a, one job -> t), add(x, t),      the matvec's last workgroup norms x
 *     rmsnorm(x -> n) (one token)            (vkmm_matmul_acc_norm; FUSE_NORM,
 *                                            opt-in: slower on an H100)
 *
 * A decode step of a llama then takes 10 dispatches a layer instead of 14,
 * a qwen3moe 13 instead of 19: on an H100 (device calls of 2026-12-06,
 * `gpu-bench MODEL -1 128 512 8,32 0 4300 PC auto FUSE`) the 7B Q4_0's
 * tg128 went 206 -> 219-225 tok/s and the 128-expert MoE's ~131-155 ->
 * 162-178. bench/README.md, "fused decode", has the figures, and those of
 * an RMSNorm taken inside the next matvec, which cost more than the
 * dispatch it saved (7B 220.5 -> 202.6) and was taken out. Each fused
 * form writes every tensor its ops write (the matmul's product, the roped
 * k), so nothing later can tell.
 */
#include <string.h>

#include "gpu/backend-vk-impl.h"

/* ---- the ops as asked ---------------------------------------------------------- */

/* ---- q8 activations (BACKEND_VK_FUSE_Q8) ------------------------------------------ */

bool bvk_q8_valid(const struct bvk_ctx *c, const struct backend_tensor *x) {
    return c->q8_src && (!x || x == c->q8_src) && vk_dev_dispatches(c->dev) == c->q8_n &&
           vk_rec_active(c->dev);
}

bool bvk_xq_ok(const struct bvk_ctx *c, const struct bvk_weight *w, int64_t n_rows) {
    return (c->fuse & BACKEND_VK_FUSE_XQ) && n_rows == 1 && w->n_cols % 32 == 0 &&
           vkmm_q8x_ok(c->mm, w->type);
}

void bvk_q8_keep(struct bvk_ctx *c) {
    c->q8_n = vk_dev_dispatches(c->dev);
}

static void rmsnorm_now(struct bvk_ctx *c, const struct backend_tensor *x,
                        const struct backend_weight *w, struct backend_tensor *y, int64_t n_rows,
                        int64_t n_cols, float eps) {
    if (!bvk_rec_raw(c))
        return;
    c->q8_src = NULL;
    const struct vk_bind wb = w ? bvk_vec_bind(w) : bvk_bind(x);
    /* a decode token's norm also writes its q8 copy for the matvecs after
     * it, a prefill's for the tiles (BACKEND_VK_FUSE_TQ8); in place only
     * for one row (the output's norm: the output matrix then runs on the
     * integer-dot matvec too), not the per-head q and k norms */
    const bool want = n_rows == 1 ? (c->fuse & BACKEND_VK_FUSE_Q8) != 0
                      : vkmm_tiled_tokens(n_rows)
                          ? (c->fuse & BACKEND_VK_FUSE_TQ8) && vk_dev_info(c->dev)->int_dot
                          : (c->fuse & BACKEND_VK_FUSE_MQ8) && vk_dev_info(c->dev)->int_dot;
    if (want && (x != y || n_rows == 1) && n_cols % 32 == 0 &&
        bvk_scratch(c, &c->xq8, vkops_q8_bytes(n_rows, n_cols)) &&
        vkops_rmsnorm_q8(c->ops, bvk_bind(x), wb, w != NULL, bvk_bind(y),
                         (struct vk_bind){c->xq8, 0, 0}, n_rows, n_cols, eps)) {
        c->q8_src = y;
        c->q8_rows = n_rows;
        bvk_q8_keep(c);
        return;
    }
    vkops_rmsnorm(c->ops, bvk_bind(x), wb, w != NULL, bvk_bind(y), n_rows, n_cols, eps);
}

/* BACKEND_VK_FUSE_TQ8 (more than 32 rows) and BACKEND_VK_FUSE_MQ8 (2 to
 * 32): whether a matmul of w over n_rows rows takes q8 x (the integer-dot
 * tiles, or the integer-dot matvec's passes). */
static bool tq8_ok(const struct bvk_ctx *c, const struct bvk_weight *w, int64_t n_rows) {
    if (w->n_expert > 1 || w->n_cols % 32 != 0)
        return false;
    if (vkmm_tiled_tokens(n_rows))
        return (c->fuse & BACKEND_VK_FUSE_TQ8) && vkmm_tq8_ok(c->mm, w->type, n_rows);
    return (c->fuse & BACKEND_VK_FUSE_MQ8) && vkmm_mq8_ok(c->mm, w->type, n_rows);
}

bool bvk_tq8_x(struct bvk_ctx *c, const struct backend_tensor *x, int64_t n_rows, int64_t n_cols) {
    if (bvk_q8_valid(c, x) && c->q8_rows >= n_rows)
        return true;
    if (!bvk_scratch(c, &c->xq8, vkops_q8_bytes(n_rows, n_cols)) ||
        !vkops_quant_q8(c->ops, bvk_bind(x), (struct vk_bind){c->xq8, 0, 0}, n_rows, n_cols))
        return false;
    c->q8_src = x;
    c->q8_rows = n_rows;
    bvk_q8_keep(c);
    return true;
}

/* One token's jobs over x in one dispatch (BACKEND_VK_FUSE_MULTI), on x's
 * q8 copy (q8) or on x quantized in the lanes (BACKEND_VK_FUSE_XQ); false,
 * with nothing recorded, where the jobs cannot (vkmm_multi_ok). */
static bool multi_now(struct bvk_ctx *c, const struct backend_tensor *x, bool q8,
                      const struct backend_mm *jobs, int n_jobs) {
    if (!(c->fuse & BACKEND_VK_FUSE_MULTI) || n_jobs < 2 || n_jobs > VKMM_MULTI_MAX)
        return false;
    const struct vk_wmat *w[VKMM_MULTI_MAX];
    struct vk_bind y[VKMM_MULTI_MAX];
    for (int j = 0; j < n_jobs; j++) {
        if (!jobs[j].w.w)
            return false;
        const struct bvk_weight *bw = bvk_w(jobs[j].w.w);
        if (bw->use != BACKEND_USE_MATMUL || bw->n_expert > 1 || (!q8 && !bvk_xq_ok(c, bw, 1)))
            return false;
        bvk_fits(x, 1, bw->n_cols);
        bvk_fits(jobs[j].y, 1, bw->rows_per);
        w[j] = &bw->mat;
        y[j] = bvk_bind(jobs[j].y);
    }
    if (!vkmm_multi_ok(c->mm, w, n_jobs))
        return false;
    vkmm_matmul_multi(c->mm, w, n_jobs, q8 ? (struct vk_bind){c->xq8, 0, 0} : bvk_bind(x), !q8, y);
    return true;
}

static void matmul_now(struct bvk_ctx *c, const struct backend_tensor *x, int64_t n_rows,
                       const struct backend_mm *jobs, int n_jobs) {
    if (!bvk_rec_raw(c))
        return;
    /* a prefill's jobs on the q8-x tiles when every one takes them */
    bool tq8 = n_rows > 1 && n_jobs >= 1;
    for (int j = 0; j < n_jobs && tq8; j++)
        tq8 = jobs[j].w.w && tq8_ok(c, bvk_w(jobs[j].w.w), n_rows);
    tq8 = tq8 && bvk_tq8_x(c, x, n_rows, bvk_w(jobs[0].w.w)->n_cols);
    /* x's q8 copy from the norm before (BACKEND_VK_FUSE_Q8): taken by the
     * jobs of a type with the integer-dot matvec */
    const bool q8 = n_rows == 1 && bvk_q8_valid(c, x);
    /* the q8 copy (of x or of another tensor) outlives jobs that do not
     * write its source: a prefill's MoE router keeps the norm's copy for
     * the experts' tiles (backend-vk.c moe_tq8) */
    bool keep = bvk_q8_valid(c, NULL);
    for (int j = 0; j < n_jobs; j++)
        keep = keep && jobs[j].y != c->q8_src;
    /* the jobs (and a matrix's pieces) read x and write their own y: one
     * barrier after them all */
    vk_rec_group(c->dev, true);
    const bool multi = n_rows == 1 && multi_now(c, x, q8, jobs, n_jobs);
    for (int j = 0; j < n_jobs && !multi; j++) {
        const struct backend_mat *m = &jobs[j].w;
        if (!m->w) {
            bvk_fail(c, STRATA_E_UNSUPPORTED, "backend vulkan: a matrix in host memory");
            break;
        }
        const struct bvk_weight *w = bvk_w(m->w);
        STRATA_ASSERT(w->use == BACKEND_USE_MATMUL && m->index >= 0 && m->index < w->n_expert);
        bvk_fits(x, n_rows, w->n_cols);
        bvk_fits(jobs[j].y, n_rows, w->rows_per);
        if (tq8)
            vkmm_matmul_tq8(c->mm, &w->mat, NULL, (struct vk_bind){c->xq8, 0, 0},
                            bvk_bind(jobs[j].y), n_rows);
        else if (q8 && w->n_expert <= 1 && vkmm_q8x_ok(c->mm, w->type))
            vkmm_matmul_q8x(c->mm, &w->mat, NULL, (struct vk_bind){c->xq8, 0, 0},
                            bvk_bind(jobs[j].y));
        else if (bvk_xq_ok(c, w, n_rows))
            vkmm_matmul_xq(c->mm, &w->mat, NULL, bvk_bind(x), bvk_bind(jobs[j].y), NULL);
        else
            vkmm_matmul(c->mm, &w->mat, w->n_expert > 1 ? m->index : -1, bvk_bind(x),
                        bvk_bind(jobs[j].y), n_rows);
    }
    vk_rec_group(c->dev, false);
    if (keep)
        bvk_q8_keep(c);
}

static void rope_now(struct bvk_ctx *c, struct backend_tensor *x, int n_tok, int n_head,
                     int head_dim, const struct backend_tensor *pos,
                     const struct backend_rope *cfg) {
    if (!bvk_rec_raw(c))
        return;
    const struct vkops_rope r = {
        .n_rot = cfg->n_rot,
        .mode = cfg->mode,
        .freq_base = cfg->freq_base,
        .freq_scale = cfg->freq_scale,
        .ext_factor = cfg->ext_factor,
        .attn_factor = cfg->attn_factor,
        .n_ctx_orig = cfg->n_ctx_orig,
        .has_freq_factors = cfg->freq_factors != NULL,
        .freq_factors = cfg->freq_factors ? bvk_vec_bind(cfg->freq_factors) : bvk_bind(pos),
    };
    vkops_rope(c->ops, bvk_bind(x), n_tok, n_head, head_dim, bvk_bind(pos), &r);
}

/* The weighted sum of moe_ffn's picks (c->moe_d) into out, and with res
 * also into res (the residual add after it). */
static void moe_sum_now(struct bvk_ctx *c, const struct bvk_pend *p,
                        const struct backend_tensor *res) {
    if (!bvk_rec_raw(c))
        return;
    const struct bvk_moe_sum_push pc = {(uint32_t)p->moe.n_tok, (uint32_t)p->moe.k,
                                        (uint32_t)p->moe.n_embd, p->moe.accumulate ? 1u : 0u,
                                        res ? 1u : 0u};
    const struct vk_bind b[4] = {bvk_bind(p->moe.out),
                                 {c->moe_d, 0, 0},
                                 bvk_bind(p->moe.sel_w),
                                 res ? bvk_bind(res) : bvk_bind(p->moe.out)};
    vk_dispatch(c->dev, c->moe_sum, b, &pc, (uint32_t)((p->moe.n_embd + 63) / 64),
                (uint32_t)p->moe.n_tok, 1);
}

/* y = W a and res += y for n_rows rows: over the q8 blocks attention wrote
 * for a (one row, bvk_attention) or a dispatch of its own made
 * (BACKEND_VK_FUSE_QD), over a quantized in the lanes (BACKEND_VK_FUSE_XQ),
 * or over f32 a. */
static void acc_now(struct bvk_ctx *c, const struct bvk_weight *w, const struct backend_tensor *a,
                    const struct backend_tensor *y, int64_t n_rows,
                    const struct backend_tensor *res) {
    if (!bvk_rec_raw(c))
        return;
    const struct vk_bind rb = bvk_bind(res);
    const bool q8w = n_rows == 1 && vkmm_q8x_ok(c->mm, w->type) && w->n_cols % 32 == 0;
    /* BACKEND_VK_FUSE_QD: a's q8 copy made here, one dispatch */
    if (q8w && !bvk_q8_valid(c, a) && (c->fuse & BACKEND_VK_FUSE_QD))
        (void)bvk_tq8_x(c, a, 1, w->n_cols);
    /* BACKEND_VK_FUSE_MQ8: 2-32 rows over a's q8 rows (attention's, or a
     * dispatch of their own) */
    if (n_rows > 1 && tq8_ok(c, w, n_rows) && !vkmm_tiled_tokens(n_rows) &&
        bvk_tq8_x(c, a, n_rows, w->n_cols))
        vkmm_matmul_q8x_acc(c->mm, &w->mat, (struct vk_bind){c->xq8, 0, 0}, bvk_bind(y), rb,
                            n_rows);
    else if (q8w && bvk_q8_valid(c, a))
        vkmm_matmul_q8x_acc(c->mm, &w->mat, (struct vk_bind){c->xq8, 0, 0}, bvk_bind(y), rb, 1);
    else if (bvk_xq_ok(c, w, n_rows))
        vkmm_matmul_xq(c->mm, &w->mat, NULL, bvk_bind(a), bvk_bind(y), &rb);
    else
        vkmm_matmul_acc(c->mm, &w->mat, bvk_bind(a), bvk_bind(y), n_rows, rb);
}

static void pend_now(struct bvk_ctx *c, const struct bvk_pend *p) {
    switch (p->kind) {
    case BVK_PEND_NORM:
        rmsnorm_now(c, p->norm.x, p->norm.w, p->norm.y, p->norm.n_rows, p->norm.n_cols,
                    p->norm.eps);
        break;
    case BVK_PEND_MATMUL:
        matmul_now(c, p->mm.x, p->mm.n_rows, p->mm.jobs, p->mm.n_jobs);
        break;
    case BVK_PEND_ROPE:
        rope_now(c, p->rope.x, p->rope.n_tok, p->rope.n_head, p->rope.head_dim, p->rope.pos,
                 &p->rope.cfg);
        break;
    case BVK_PEND_MOE_SUM:
        moe_sum_now(c, p, NULL);
        break;
    case BVK_PEND_ACC:
        acc_now(c, bvk_w(p->mm.jobs[0].w.w), p->mm.x, p->mm.jobs[0].y, 1, p->mm.res);
        break;
    case BVK_PEND_ROPE_KV:
        if (bvk_rec_raw(c))
            vkops_rope_kv(c->ops, &c->kvv, &p->rk.a);
        break;
    }
}

void bvk_pend_flush(struct bvk_ctx *c) {
    const int n = c->n_pend;
    c->n_pend = 0;
    for (int i = 0; i < n; i++)
        pend_now(c, &c->pend[i]);
}

/* A new held op at the end of the list (flush first when it is full). */
static struct bvk_pend *pend_push(struct bvk_ctx *c, enum bvk_pend_kind kind) {
    if (c->n_pend == BVK_PEND_MAX)
        bvk_pend_flush(c);
    struct bvk_pend *p = &c->pend[c->n_pend++];
    memset(p, 0, sizeof *p);
    p->kind = kind;
    return p;
}

static bool pend_is(const struct bvk_ctx *c, int n, enum bvk_pend_kind kind) {
    return c->n_pend == n && c->pend[n - 1].kind == kind;
}

/* ---- rmsnorm, matmul, swiglu, add ---------------------------------------------- */

/* A plain bound matrix (not an expert of a stack): what the fused matvecs take. */
static bool plain(const struct backend_mm *job) {
    const struct bvk_weight *w = job->w.w ? bvk_w(job->w.w) : NULL;
    return w && w->use == BACKEND_USE_MATMUL && w->n_expert == 1;
}

/* Whether jobs are a gate and an up of one type and shape (bound, plain
 * matrices): the pair vkmm_matmul_glu fuses. */
static bool glu_pair(const struct backend_mm *jobs, int n_jobs) {
    if (n_jobs != 2 || !plain(&jobs[0]) || !plain(&jobs[1]))
        return false;
    const struct bvk_weight *g = bvk_w(jobs[0].w.w), *u = bvk_w(jobs[1].w.w);
    return g->type == u->type && g->n_rows == u->n_rows && g->n_cols == u->n_cols &&
           jobs[0].y != jobs[1].y;
}

/* Fused only where the matvec runs (<= 32 rows: 8-token passes). The
 * H200 (2026-12-02, bench/gpu, llama-2-7b Q4_0): fused, tg128 138.9 ->
 * 145.8 tok/s, but the fused tiled form took pp512 from 1397 to 320
 * tok/s (qwen3-0.6b Q8_0 11741 -> 4136), so prefill keeps two tiled
 * matmuls and the SwiGLU op. */
#define BVK_GLU_MAX_ROWS 32

/* The held output / down projection and residual add (BVK_PEND_ACC) with
 * this norm of the sum in one dispatch (BACKEND_VK_FUSE_NORM); false when
 * the norm is not that (nothing recorded then). */
static bool acc_norm(struct bvk_ctx *c, const struct backend_tensor *x,
                     const struct backend_weight *w, struct backend_tensor *y, int64_t n_rows,
                     int64_t n_cols, float eps) {
    const struct bvk_pend *p = &c->pend[0];
    if (!pend_is(c, 1, BVK_PEND_ACC) || x != p->mm.res || !w || x == y || n_rows != 1 ||
        !(c->fuse & BACKEND_VK_FUSE_Q8) || y == p->mm.x || y == p->mm.jobs[0].y ||
        bvk_w(p->mm.jobs[0].w.w)->n_rows != n_cols || c->err_code)
        return false;
    const struct bvk_pend a = *p;
    c->n_pend = 0;
    if (!bvk_rec_raw(c))
        return true;
    c->q8_src = NULL;
    if (!bvk_scratch(c, &c->xq8, vkops_q8_bytes(1, n_cols))) {
        pend_now(c, &a);
        rmsnorm_now(c, x, w, y, n_rows, n_cols, eps);
        return true;
    }
    const struct vkmm_tail t = {bvk_vec_bind(w), bvk_bind(y), {c->xq8, 0, 0}, eps};
    vkmm_matmul_acc_norm(c->mm, &bvk_w(a.mm.jobs[0].w.w)->mat, bvk_bind(a.mm.x),
                         bvk_bind(a.mm.jobs[0].y), bvk_bind(a.mm.res), &t);
    c->q8_src = y;
    c->q8_rows = 1;
    bvk_q8_keep(c);
    return true;
}

void bvk_rmsnorm(void *ctx, const struct backend_tensor *x, const struct backend_weight *w,
                 struct backend_tensor *y, int64_t n_rows, int64_t n_cols, float eps) {
    struct bvk_ctx *c = ctx;
    bvk_fits(x, n_rows, n_cols);
    bvk_fits(y, n_rows, n_cols);
    if (acc_norm(c, x, w, y, n_rows, n_cols, eps))
        return;
    /* a per-head q or k norm in place: a rope and kv_write may follow */
    const bool held =
        w && x == y && (c->fuse & BACKEND_VK_FUSE_ROPE) &&
        (c->n_pend == 0 || (pend_is(c, 1, BVK_PEND_NORM) &&
                            c->pend[0].norm.x == c->pend[0].norm.y && c->pend[0].norm.x != x));
    if (!held) {
        bvk_pend_flush(c);
        rmsnorm_now(c, x, w, y, n_rows, n_cols, eps);
        return;
    }
    if (c->err_code)
        return;
    struct bvk_pend *p = pend_push(c, BVK_PEND_NORM);
    p->norm.x = x;
    p->norm.w = w;
    p->norm.y = y;
    p->norm.n_rows = n_rows;
    p->norm.n_cols = n_cols;
    p->norm.eps = eps;
}

void bvk_matmul(void *ctx, const struct backend_tensor *x, int64_t n_rows,
                const struct backend_mm *jobs, int n_jobs) {
    struct bvk_ctx *c = ctx;
    STRATA_ASSERT(n_jobs >= 1 && n_jobs <= BACKEND_MM_MAX);
    for (int j = 0; j < n_jobs; j++)
        if (jobs[j].w.w) {
            bvk_fits(x, n_rows, bvk_w(jobs[j].w.w)->n_cols);
            bvk_fits(jobs[j].y, n_rows, bvk_w(jobs[j].w.w)->rows_per);
        }
    bvk_pend_flush(c);
    if (c->err_code)
        return;
    const bool glu = n_rows <= BVK_GLU_MAX_ROWS && glu_pair(jobs, n_jobs);
    const bool acc =
        n_jobs == 1 && plain(&jobs[0]) && vkmm_acc_ok(n_rows) && (c->fuse & BACKEND_VK_FUSE_ACC);
    if (glu || acc) { /* held: a swiglu (an add) may follow */
        struct bvk_pend *p = pend_push(c, BVK_PEND_MATMUL);
        p->mm.x = x;
        p->mm.n_rows = n_rows;
        p->mm.n_jobs = n_jobs;
        memcpy(p->mm.jobs, jobs, (size_t)n_jobs * sizeof *jobs);
        return;
    }
    matmul_now(c, x, n_rows, jobs, n_jobs);
}

void bvk_swiglu(void *ctx, const struct backend_tensor *g, const struct backend_tensor *u,
                struct backend_tensor *y, int64_t n_rows, int64_t n_cols) {
    struct bvk_ctx *c = ctx;
    bvk_fits(g, n_rows, n_cols);
    bvk_fits(u, n_rows, n_cols);
    bvk_fits(y, n_rows, n_cols);
    const struct bvk_pend *p = &c->pend[0];
    if (pend_is(c, 1, BVK_PEND_MATMUL) && p->mm.n_jobs == 2 && glu_pair(p->mm.jobs, 2) &&
        p->mm.jobs[0].y == g && p->mm.jobs[1].y == u && p->mm.n_rows == n_rows &&
        bvk_w(p->mm.jobs[0].w.w)->n_rows == n_cols && (y == g || y == u) && !c->err_code) {
        /* gate, up and SwiGLU in one dispatch: y = silu(G x) * (U x). The
         * other of g and u keeps what it held (backend-vk.h) */
        c->n_pend = 0;
        if (bvk_rec_raw(c)) {
            const struct bvk_weight *gw = bvk_w(p->mm.jobs[0].w.w), *uw = bvk_w(p->mm.jobs[1].w.w);
            if (n_rows == 1 && bvk_q8_valid(c, p->mm.x) && vkmm_q8x_ok(c->mm, gw->type))
                vkmm_matmul_q8x(c->mm, &gw->mat, &uw->mat, (struct vk_bind){c->xq8, 0, 0},
                                bvk_bind(y));
            else if (n_rows > 1 && tq8_ok(c, gw, n_rows) &&
                     bvk_tq8_x(c, p->mm.x, n_rows, gw->n_cols))
                vkmm_matmul_tq8(c->mm, &gw->mat, &uw->mat, (struct vk_bind){c->xq8, 0, 0},
                                bvk_bind(y), n_rows);
            else
                vkmm_matmul_glu(c->mm, &gw->mat, &uw->mat, -1, bvk_bind(p->mm.x), bvk_bind(y),
                                n_rows);
        }
        return;
    }
    if (bvk_rec(c))
        vkops_swiglu(c->ops, bvk_bind(g), bvk_bind(u), bvk_bind(y), n_rows, n_cols);
}

void bvk_add(void *ctx, struct backend_tensor *x, const struct backend_tensor *y, int64_t n_rows,
             int64_t n_cols) {
    struct bvk_ctx *c = ctx;
    bvk_fits(x, n_rows, n_cols);
    bvk_fits(y, n_rows, n_cols);
    const struct bvk_pend *p = &c->pend[0];
    if (pend_is(c, 1, BVK_PEND_MATMUL) && p->mm.n_jobs == 1 && !p->norm.x && p->mm.jobs[0].y == y &&
        p->mm.n_rows == n_rows && bvk_w(p->mm.jobs[0].w.w)->n_rows == n_cols && x != y &&
        x != p->mm.x && !c->err_code) {
        /* x += W a inside the matvec (which still writes y = W a) */
        if (n_rows == 1 && (c->fuse & BACKEND_VK_FUSE_NORM) &&
            vkmm_acc_norm_ok(c->mm, &bvk_w(p->mm.jobs[0].w.w)->mat)) {
            /* held again: the norm of x may follow (acc_norm) */
            c->pend[0].kind = BVK_PEND_ACC;
            c->pend[0].mm.res = x;
            return;
        }
        c->n_pend = 0;
        acc_now(c, bvk_w(p->mm.jobs[0].w.w), p->mm.x, y, n_rows, x);
        return;
    }
    if (pend_is(c, 1, BVK_PEND_MOE_SUM) && p->moe.out == y && p->moe.n_tok == n_rows &&
        p->moe.n_embd == n_cols && x != y && x != p->moe.x && x != p->moe.sel_w && !c->err_code) {
        c->n_pend = 0;
        moe_sum_now(c, p, x);
        return;
    }
    if (bvk_rec(c))
        vkops_add(c->ops, bvk_bind(x), bvk_bind(y), n_rows, n_cols);
}

void bvk_moe_sum(struct bvk_ctx *c, const struct backend_moe *m) {
    bvk_pend_flush(c); /* nothing is held: moe_ffn recorded through bvk_rec */
    struct bvk_pend p = {.kind = BVK_PEND_MOE_SUM};
    p.moe.x = m->x;
    p.moe.sel_w = m->sel_w;
    p.moe.out = m->out;
    p.moe.n_tok = m->n_tok;
    p.moe.k = m->k;
    p.moe.n_embd = m->n_embd;
    p.moe.accumulate = m->accumulate;
    if (!(c->fuse & BACKEND_VK_FUSE_ACC) || c->err_code) {
        moe_sum_now(c, &p, NULL);
        return;
    }
    c->pend[0] = p;
    c->n_pend = 1;
}

/* ---- rope and the KV write -------------------------------------------------------- */

void bvk_rope(void *ctx, struct backend_tensor *x, int n_tok, int n_head, int head_dim,
              const struct backend_tensor *pos, const struct backend_rope *cfg) {
    struct bvk_ctx *c = ctx;
    bvk_fits(x, n_tok, (int64_t)n_head * head_dim);
    bvk_fits(pos, n_tok, 1);
    /* the pattern so far: up to two in-place norms, then at most one rope */
    int n_norm = 0, n_rope = 0;
    for (int i = 0; i < c->n_pend; i++) {
        const struct bvk_pend *p = &c->pend[i];
        if (p->kind == BVK_PEND_NORM && n_rope == 0 && p->norm.x == p->norm.y)
            n_norm++;
        else if (p->kind == BVK_PEND_ROPE && p->rope.pos == pos)
            n_rope++;
        else
            n_norm = n_rope = -BVK_PEND_MAX;
    }
    if (!(c->fuse & BACKEND_VK_FUSE_ROPE) || n_norm < 0 || n_rope > 1 ||
        n_norm + n_rope + 1 > BVK_PEND_MAX) {
        bvk_pend_flush(c);
        if (!(c->fuse & BACKEND_VK_FUSE_ROPE)) {
            rope_now(c, x, n_tok, n_head, head_dim, pos, cfg);
            return;
        }
    }
    if (c->err_code)
        return;
    struct bvk_pend *p = pend_push(c, BVK_PEND_ROPE);
    p->rope.x = x;
    p->rope.pos = pos;
    p->rope.n_tok = n_tok;
    p->rope.n_head = n_head;
    p->rope.head_dim = head_dim;
    p->rope.cfg = *cfg;
}

static bool same_rope(const struct backend_rope *a, const struct backend_rope *b) {
    return a->n_rot == b->n_rot && a->mode == b->mode && a->freq_base == b->freq_base &&
           a->freq_scale == b->freq_scale && a->ext_factor == b->ext_factor &&
           a->attn_factor == b->attn_factor && a->n_ctx_orig == b->n_ctx_orig &&
           a->freq_factors == b->freq_factors;
}

/* The first n_norm held ops as the in-place norms of q (*nq) and k (*nk),
 * rows of head_dim, n_tok * n_head of them (either may be NULL); false when
 * one is another op, of neither tensor, or of another shape. */
static bool held_norms(const struct bvk_ctx *c, int n_norm, const struct bvk_pend *rq,
                       const struct bvk_pend *rk, const struct bvk_pend **nq,
                       const struct bvk_pend **nk) {
    *nq = *nk = NULL;
    for (int i = 0; i < n_norm; i++) {
        const struct bvk_pend *n = &c->pend[i];
        if (n->kind != BVK_PEND_NORM || n->norm.x != n->norm.y)
            return false;
        const struct bvk_pend *r = n->norm.x == rq->rope.x   ? rq
                                   : n->norm.x == rk->rope.x ? rk
                                                             : NULL;
        if (!r || n->norm.n_cols != r->rope.head_dim ||
            n->norm.n_rows != (int64_t)r->rope.n_tok * r->rope.n_head)
            return false;
        const struct bvk_pend **slot = r == rq ? nq : nk;
        if (*slot)
            return false;
        *slot = n;
    }
    return true;
}

bool bvk_take_rope_kv(struct bvk_ctx *c, const struct backend_attn *a, struct vkops_rope_kv *rk) {
    if (!pend_is(c, 1, BVK_PEND_ROPE_KV))
        return false;
    const struct bvk_pend *h = &c->pend[0];
    if (h->rk.q != a->q || h->rk.a.layer != a->layer || h->rk.a.n_tok != a->n_tok ||
        h->rk.a.n_head != a->n_head || h->rk.a.n_head_kv != a->n_head_kv ||
        h->rk.a.head_dim_k != a->head_dim_k || h->rk.a.head_dim_v != a->head_dim_v)
        return false;
    const struct vk_bind s = bvk_bind(a->seq), p = bvk_bind(a->pos);
    if (h->rk.a.seq.buf != s.buf || h->rk.a.seq.off != s.off || h->rk.a.pos.buf != p.buf ||
        h->rk.a.pos.off != p.off)
        return false;
    *rk = h->rk.a;
    c->n_pend = 0;
    return true;
}

void bvk_kv_write(void *ctx, struct kv_cache *kv, int layer, const struct backend_tensor *k,
                  const struct backend_tensor *v, const struct backend_tensor *seq,
                  const struct backend_tensor *pos, int n_tok, int n_head_kv, int head_dim_k,
                  int head_dim_v) {
    struct bvk_ctx *c = ctx;
    bvk_fits(k, n_tok, (int64_t)n_head_kv * head_dim_k);
    bvk_fits(v, n_tok, (int64_t)n_head_kv * head_dim_v);
    const int n = c->n_pend;
    const struct bvk_pend *rq = n >= 2 ? &c->pend[n - 2] : NULL,
                          *rk = n >= 1 ? &c->pend[n - 1] : NULL;
    const struct bvk_pend *nq = NULL, *nk = NULL;
    if (n >= 2 && rq->kind == BVK_PEND_ROPE && rk->kind == BVK_PEND_ROPE && rk->rope.x == k &&
        rq->rope.x != k && rq->rope.x != v && k != v && rk->rope.pos == pos &&
        rq->rope.pos == pos && rq->rope.n_tok == n_tok && rk->rope.n_tok == n_tok &&
        rk->rope.n_head == n_head_kv && rk->rope.head_dim == head_dim_k &&
        rq->rope.head_dim == head_dim_k && same_rope(&rq->rope.cfg, &rk->rope.cfg) &&
        rq->rope.n_head % n_head_kv == 0 &&
        vkops_rope_kv_supported(head_dim_k, head_dim_v, rk->rope.cfg.n_rot) &&
        held_norms(c, n - 2, rq, rk, &nq, &nk) && !c->err_code) {
        const struct bvk_pend q = *rq;
        const struct bvk_pend qn = nq ? *nq : (struct bvk_pend){0};
        const struct bvk_pend kn = nk ? *nk : (struct bvk_pend){0};
        c->n_pend = 0;
        if (!bvk_rec_raw(c) || !bvk_kv_is_step(c, kv))
            return;
        const struct backend_rope *cfg = &q.rope.cfg;
        const struct vkops_rope_kv a = {
            .q = bvk_bind(q.rope.x),
            .k = bvk_bind(k),
            .v = bvk_bind(v),
            .seq = bvk_bind(seq),
            .pos = bvk_bind(pos),
            .layer = layer,
            .n_tok = n_tok,
            .n_head = q.rope.n_head,
            .n_head_kv = n_head_kv,
            .head_dim_k = head_dim_k,
            .head_dim_v = head_dim_v,
            .rope = {.n_rot = cfg->n_rot,
                     .mode = cfg->mode,
                     .freq_base = cfg->freq_base,
                     .freq_scale = cfg->freq_scale,
                     .ext_factor = cfg->ext_factor,
                     .attn_factor = cfg->attn_factor,
                     .n_ctx_orig = cfg->n_ctx_orig,
                     .has_freq_factors = cfg->freq_factors != NULL,
                     .freq_factors =
                         cfg->freq_factors ? bvk_vec_bind(cfg->freq_factors) : bvk_bind(pos)},
            .norm_q = nq != NULL,
            .norm_k = nk != NULL,
            .q_norm = nq ? bvk_vec_bind(qn.norm.w) : bvk_bind(pos),
            .k_norm = nk ? bvk_vec_bind(kn.norm.w) : bvk_bind(pos),
            .eps_q = qn.norm.eps,
            .eps_k = kn.norm.eps,
        };
        /* a decode batch of one token a sequence: held for the attention
         * after it, which does this work itself (BACKEND_VK_FUSE_ATTN) */
        if ((c->fuse & BACKEND_VK_FUSE_ATTN) && c->one_per_seq && n_tok <= VKOPS_ATTN_DECODE_MAX) {
            struct bvk_pend *h = pend_push(c, BVK_PEND_ROPE_KV);
            h->rk.a = a;
            h->rk.q = q.rope.x;
            return;
        }
        vkops_rope_kv(c->ops, &c->kvv, &a);
        return;
    }
    if (bvk_rec(c) && bvk_kv_is_step(c, kv))
        vkops_kv_write(c->ops, &c->kvv, layer, bvk_bind(k), bvk_bind(v), bvk_bind(seq),
                       bvk_bind(pos), n_tok, n_head_kv, head_dim_k, head_dim_v);
}
