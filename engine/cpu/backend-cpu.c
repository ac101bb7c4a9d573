/* engine/cpu/backend-cpu.c: the CPU backend's vtable (backend-cpu.h):
 * tensors in host memory, the recording and its executor (cpu-impl.h), and
 * the elementwise ops, parallel over rows on the pool. Small elementwise
 * jobs run on the calling thread: a dispatch costs more than normalising one
 * 64-wide row. Matmuls are in cpu-matmul.c, attention in cpu-attn.c, the
 * MoE in cpu-moe.c, weights in cpu-weights.c. */
#include "engine/cpu/cpu-impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/buf.h"
#include "engine/host/pool.h"
#include "engine/kv/kv.h"
#include "engine/quant/quant.h"

/* Elements below which an elementwise op runs inline (one dispatch costs
 * about as much as ~16k multiply-adds on the 2-core dev box). */
#define CPU_INLINE_ELEMS 16384

void cpu_run_tasks(struct cpu_ctx *c, struct pool_task *t, int n) {
    if (c->pool) {
        pool_run(c->pool, t, n);
        return;
    }
    for (int i = 0; i < n; i++)
        if (t[i].n_rows > 0)
            t[i].fn(t[i].ctx, 0, t[i].n_rows, 0);
}

static void record_error(struct cpu_ctx *c, const char *what) {
    if (c->err_code)
        return;
    c->err_code = STRATA_E_NOMEM;
    snprintf(c->err_msg, sizeof c->err_msg, "backend cpu: out of memory for %s", what);
}

int cpu_buf_reserve(struct cpu_ctx *c, struct cpu_buf *b, size_t n) {
    if (b->cap >= n)
        return 0;
    void *p = realloc(b->p, n);
    if (!p) {
        record_error(c, "scratch");
        return -1;
    }
    b->p = p;
    b->cap = n;
    return 0;
}

struct cpu_cmd *cpu_record(struct cpu_ctx *c, enum cpu_op op) {
    if (strata_grow((void **)&c->cmds, &c->cap_cmds, c->n_cmds + 1, sizeof *c->cmds) < 0) {
        record_error(c, "the recording");
        return NULL;
    }
    struct cpu_cmd *cmd = &c->cmds[c->n_cmds++];
    cmd->op = op;
    return cmd;
}

struct kern_mat cpu_mat(const struct backend_mat *m) {
    if (!m->w) {
        const struct backend_host_mat *h = &m->host;
        return (struct kern_mat){h->data,   h->type,      h->n_rows,
                                 h->n_cols, h->row_bytes, h->layout == BACKEND_LAYOUT_PACK16};
    }
    const struct cpu_weight *w = cpu_w(m->w);
    STRATA_ASSERT(m->index >= 0 && m->index < w->n_expert);
    struct kern_mat k = w->m;
    k.n_rows = w->rows_per;
    k.data = (const uint8_t *)k.data + (size_t)m->index * (size_t)w->rows_per * k.row_bytes;
    return k;
}

/* ---- tensors ------------------------------------------------------------------ */

static struct backend_tensor *cpu_tensor_alloc(void *ctx, enum backend_dtype dtype, int64_t n_rows,
                                               int64_t n_cols, struct strata_error *err) {
    struct cpu_tensor *t = calloc(1, sizeof *t);
    const size_t n = (size_t)(n_rows > 0 ? n_rows : 1) * (size_t)(n_cols > 0 ? n_cols : 1);
    if (t)
        t->data = calloc(n, 4); /* F32 and I32: 4 bytes an element */
    if (!t || !t->data || n_rows < 0 || n_cols < 0) {
        if (t)
            free(t->data);
        free(t);
        strata_error_set(err, STRATA_E_NOMEM, "backend cpu: no memory for a %lld x %lld tensor",
                         (long long)n_rows, (long long)n_cols);
        return NULL;
    }
    t->t = (struct backend_tensor){dtype, n_rows, n_cols};
    return &t->t;
}

static void cpu_tensor_free(void *ctx, struct backend_tensor *bt) {
    struct cpu_tensor *t = cpu_t(bt);
    if (!t)
        return;
    free(t->data);
    free(t);
}

static struct kv_store *cpu_kv_store_init(void *ctx, struct strata_error *err) {
    return kv_store_host_init(err);
}

/* Asserts that a (rows, cols) view fits the tensor: a caller bug otherwise. */
static void fits(const struct backend_tensor *t, int64_t n_rows, int64_t n_cols) {
    STRATA_ASSERT(t && n_rows >= 0 && n_cols >= 0 && n_rows * n_cols <= t->n_rows * t->n_cols);
}

static float *fdata(const struct cpu_tensor *t) {
    return t->data;
}
static int32_t *idata(const struct cpu_tensor *t) {
    return t->data;
}

/* ---- the step ---------------------------------------------------------------- */

static int cpu_begin(void *ctx, const struct backend_step *s, struct strata_error *err) {
    struct cpu_ctx *c = ctx;
    c->n_cmds = 0;
    c->err_code = 0;
    if (s->kv && !kv_get_store(s->kv)->ops->block_host)
        return strata_error_set(err, STRATA_E_INVALID,
                                "backend cpu: the KV cache's store (%s) is not in host memory",
                                kv_get_store(s->kv)->ops->name);
    if (cpu_attn_reserve(c, s->n_kv_max))
        return strata_error_set(err, STRATA_E_NOMEM, "backend cpu: no memory for attention over %d",
                                s->n_kv_max);
    return 0;
}

static void rmsnorm_rows(void *ctx, int64_t r0, int64_t r1, int worker) {
    const struct cpu_cmd *j = ctx;
    const int64_t n = j->a.ew.n_cols;
    for (int64_t r = r0; r < r1; r++)
        ops_rmsnorm(fdata(j->a.ew.a) + r * n, j->a.ew.w, fdata(j->a.ew.y) + r * n, n, j->a.ew.eps);
}

static void rope_rows(void *ctx, int64_t r0, int64_t r1, int worker) {
    const struct cpu_cmd *j = ctx;
    const int64_t w = (int64_t)j->a.rope.n_head * j->a.rope.head_dim;
    for (int64_t r = r0; r < r1; r++)
        ops_rope(fdata(j->a.rope.x) + r * w, j->a.rope.n_head, j->a.rope.head_dim,
                 idata(j->a.rope.pos)[r], &j->a.rope.cfg);
}

static void run_rows(struct cpu_ctx *c, pool_rows_fn fn, const struct cpu_cmd *j, int64_t n_rows,
                     int64_t elems) {
    if (elems < CPU_INLINE_ELEMS || !c->pool) {
        fn((void *)j, 0, n_rows, 0);
        return;
    }
    struct pool_task t = {.fn = fn, .ctx = (void *)j, .n_rows = n_rows, .min_grain = 1};
    pool_run(c->pool, &t, 1);
}

/* SwiGLU pieces: SWIGLU_PIECE columns of one row (a multiple of 8, so each
 * piece's vector/tail split is the whole row's and the bits do not change);
 * jobs of SWIGLU_INLINE values or more go to the pool. The exp costs ~1 ns a
 * value: olmoe's 8 x 1024 expert rows or a dense 8192-wide decode row kept the
 * workers waiting ~4-8 us a layer when run inline. */
#define SWIGLU_PIECE 2048
#define SWIGLU_INLINE 4096

struct swiglu_job {
    const float *g, *u;
    float *y;
    int64_t n_cols;
};

static void swiglu_pieces(void *ctx, int64_t r0, int64_t r1, int worker) {
    const struct swiglu_job *j = ctx;
    const int64_t per_row = (j->n_cols + SWIGLU_PIECE - 1) / SWIGLU_PIECE;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t c0 = (r % per_row) * SWIGLU_PIECE;
        const int64_t nc = j->n_cols - c0 < SWIGLU_PIECE ? j->n_cols - c0 : SWIGLU_PIECE;
        const int64_t o = (r / per_row) * j->n_cols + c0;
        ops_swiglu(j->g + o, j->u + o, j->y + o, nc);
    }
}

void cpu_swiglu(struct cpu_ctx *c, const float *g, const float *u, float *y, int64_t n_rows,
                int64_t n_cols) {
    struct swiglu_job j = {g, u, y, n_cols};
    if (!c->pool || n_rows * n_cols < SWIGLU_INLINE || n_cols < 1) {
        for (int64_t r = 0; r < n_rows; r++)
            ops_swiglu(g + r * n_cols, u + r * n_cols, y + r * n_cols, n_cols);
        return;
    }
    const int64_t per_row = (n_cols + SWIGLU_PIECE - 1) / SWIGLU_PIECE;
    struct pool_task t = {
        .fn = swiglu_pieces, .ctx = &j, .n_rows = n_rows * per_row, .min_grain = 1};
    pool_run(c->pool, &t, 1);
}

static void run_embed(const struct cpu_cmd *cmd) {
    const struct cpu_weight *w = cmd->a.embed.w;
    const int64_t E = w->m.n_cols;
    for (int i = 0; i < cmd->a.embed.n; i++) {
        const uint8_t *row =
            (const uint8_t *)w->m.data + (size_t)idata(cmd->a.embed.ids)[i] * w->m.row_bytes;
        float *dst = fdata(cmd->a.embed.out) + i * E;
        if (w->m.type == QUANT_F32)
            memcpy(dst, row, (size_t)E * sizeof(float));
        else
            quant_dequantize_row(w->m.type, row, dst, E);
    }
}

static void run_cmd(struct cpu_ctx *c, const struct cpu_cmd *cmd) {
    switch (cmd->op) {
    case CPU_WRITE:
        memcpy((uint8_t *)cmd->a.io.t->data + cmd->a.io.row0 * cmd->a.io.t->t.n_cols * 4,
               cmd->a.io.src, (size_t)(cmd->a.io.n_rows * cmd->a.io.t->t.n_cols * 4));
        break;
    case CPU_READ:
        memcpy(cmd->a.io.dst,
               (const uint8_t *)cmd->a.io.t->data + cmd->a.io.row0 * cmd->a.io.t->t.n_cols * 4,
               (size_t)(cmd->a.io.n_rows * cmd->a.io.t->t.n_cols * 4));
        break;
    case CPU_EMBED:
        run_embed(cmd);
        break;
    case CPU_COPY_ROWS:
        for (int i = 0; i < cmd->a.rows.n; i++)
            memcpy(fdata(cmd->a.rows.dst) + (size_t)i * cmd->a.rows.n_cols,
                   fdata(cmd->a.rows.src) + (size_t)idata(cmd->a.rows.ids)[i] * cmd->a.rows.n_cols,
                   (size_t)cmd->a.rows.n_cols * sizeof(float));
        break;
    case CPU_RMSNORM:
        run_rows(c, rmsnorm_rows, cmd, cmd->a.ew.n_rows, cmd->a.ew.n_rows * cmd->a.ew.n_cols);
        break;
    case CPU_MATMUL:
        cpu_matmul_run(c, cmd);
        break;
    case CPU_ADD_BIAS: {
        float *y = fdata(cmd->a.ew.y);
        const float *b = cmd->a.ew.w;
        const int64_t n = cmd->a.ew.n_rows, width = cmd->a.ew.n_cols;
        for (int64_t t = 0; t < n; t++)
            for (int64_t i = 0; i < width; i++)
                y[t * width + i] += b[i];
        break;
    }
    case CPU_ADD: {
        float *x = fdata(cmd->a.ew.y);
        const float *y = fdata(cmd->a.ew.a);
        const int64_t n = cmd->a.ew.n_rows * cmd->a.ew.n_cols;
        for (int64_t i = 0; i < n; i++)
            x[i] += y[i];
        break;
    }
    case CPU_ROPE:
        run_rows(c, rope_rows, cmd, cmd->a.rope.n_tok, /* ~8 flops a value */
                 (int64_t)cmd->a.rope.n_tok * cmd->a.rope.n_head * cmd->a.rope.head_dim * 8);
        break;
    case CPU_KV_WRITE:
        cpu_kv_write_run(c, cmd);
        break;
    case CPU_ATTN:
        cpu_attn_run(c, &cmd->a.attn);
        break;
    case CPU_SWIGLU:
        cpu_swiglu(c, fdata(cmd->a.ew.a), fdata(cmd->a.ew.b), fdata(cmd->a.ew.y), cmd->a.ew.n_rows,
                   cmd->a.ew.n_cols);
        break;
    case CPU_ROUTE:
        cpu_route_run(c, &cmd->a.route);
        break;
    case CPU_MOE:
        cpu_moe_run(c, &cmd->a.moe);
        break;
    case CPU_ADD_GATED: {
        float *o = fdata(cmd->a.ew.y);
        const float *s = fdata(cmd->a.ew.a), *g = fdata(cmd->a.ew.b);
        const int64_t E = cmd->a.ew.n_cols;
        for (int64_t t = 0; t < cmd->a.ew.n_rows; t++) {
            const float gs = 1.0f / (1.0f + expf(-g[t]));
            for (int64_t i = 0; i < E; i++)
                o[t * E + i] += gs * s[t * E + i];
        }
        break;
    }
    }
}

static int cpu_submit(void *ctx, struct strata_error *err) {
    struct cpu_ctx *c = ctx;
    if (c->err_code) {
        const int rc = c->err_code;
        c->n_cmds = 0;
        c->err_code = 0;
        return strata_error_set(err, rc, "%s", c->err_msg);
    }
    for (size_t i = 0; i < c->n_cmds; i++)
        run_cmd(c, &c->cmds[i]);
    c->n_cmds = 0;
    return 0;
}

static int cpu_wait(void *ctx, struct strata_error *err) {
    return 0; /* submit ran everything */
}

/* ---- recording the ops ---------------------------------------------------------- */

static void cpu_tensor_write(void *ctx, struct backend_tensor *t, int64_t row0, const void *src,
                             int64_t n_rows) {
    fits(t, row0 + n_rows, t->n_cols);
    struct cpu_cmd *cmd = cpu_record(ctx, CPU_WRITE);
    if (cmd)
        cmd->a.io = (struct cpu_io){cpu_t(t), row0, n_rows, src, NULL};
}

static void cpu_tensor_read(void *ctx, const struct backend_tensor *t, int64_t row0, void *dst,
                            int64_t n_rows) {
    fits(t, row0 + n_rows, t->n_cols);
    struct cpu_cmd *cmd = cpu_record(ctx, CPU_READ);
    if (cmd)
        cmd->a.io = (struct cpu_io){cpu_t(t), row0, n_rows, NULL, dst};
}

static void cpu_embed(void *ctx, const struct backend_weight *w, const struct backend_tensor *ids,
                      int n, struct backend_tensor *out) {
    STRATA_ASSERT(cpu_w(w)->use == BACKEND_USE_ROWS);
    fits(ids, n, 1);
    fits(out, n, cpu_w(w)->m.n_cols);
    struct cpu_cmd *cmd = cpu_record(ctx, CPU_EMBED);
    if (cmd)
        cmd->a.embed = (struct cpu_embed){cpu_w(w), cpu_t(ids), n, cpu_t(out)};
}

static void cpu_copy_rows(void *ctx, const struct backend_tensor *src,
                          const struct backend_tensor *ids, int n, int64_t n_cols,
                          struct backend_tensor *dst) {
    fits(ids, n, 1);
    fits(dst, n, n_cols);
    struct cpu_cmd *cmd = cpu_record(ctx, CPU_COPY_ROWS);
    if (cmd)
        cmd->a.rows = (struct cpu_rows){cpu_t(src), cpu_t(ids), n, n_cols, cpu_t(dst)};
}

static const float *vec_of(const struct backend_weight *w) {
    if (!w)
        return NULL;
    STRATA_ASSERT(cpu_w(w)->use == BACKEND_USE_VEC);
    return cpu_w(w)->m.data;
}

static void record_ew(struct cpu_ctx *c, enum cpu_op op, const struct backend_tensor *a,
                      const struct backend_tensor *b, const float *w, struct backend_tensor *y,
                      int64_t n_rows, int64_t n_cols, float eps) {
    fits(y, n_rows, n_cols);
    if (a)
        fits(a, n_rows, op == CPU_ADD_GATED ? n_cols : n_cols);
    struct cpu_cmd *cmd = cpu_record(c, op);
    if (cmd)
        cmd->a.ew = (struct cpu_ew){
            a ? cpu_t(a) : NULL, b ? cpu_t(b) : NULL, w, cpu_t(y), n_rows, n_cols, eps};
}

static void cpu_rmsnorm(void *ctx, const struct backend_tensor *x, const struct backend_weight *w,
                        struct backend_tensor *y, int64_t n_rows, int64_t n_cols, float eps) {
    record_ew(ctx, CPU_RMSNORM, x, NULL, vec_of(w), y, n_rows, n_cols, eps);
}

static void cpu_add_bias(void *ctx, struct backend_tensor *y, const struct backend_weight *b,
                         int64_t n_rows, int64_t n_cols) {
    record_ew(ctx, CPU_ADD_BIAS, NULL, NULL, vec_of(b), y, n_rows, n_cols, 0);
}

static void cpu_add(void *ctx, struct backend_tensor *x, const struct backend_tensor *y,
                    int64_t n_rows, int64_t n_cols) {
    record_ew(ctx, CPU_ADD, y, NULL, NULL, x, n_rows, n_cols, 0);
}

static void cpu_swiglu_op(void *ctx, const struct backend_tensor *g, const struct backend_tensor *u,
                          struct backend_tensor *y, int64_t n_rows, int64_t n_cols) {
    fits(u, n_rows, n_cols);
    record_ew(ctx, CPU_SWIGLU, g, u, NULL, y, n_rows, n_cols, 0);
}

static void cpu_add_gated(void *ctx, struct backend_tensor *out, const struct backend_tensor *s,
                          const struct backend_tensor *gate, int64_t n_rows, int64_t n_cols) {
    fits(gate, n_rows, 1);
    record_ew(ctx, CPU_ADD_GATED, s, gate, NULL, out, n_rows, n_cols, 0);
}

static void cpu_matmul_op(void *ctx, const struct backend_tensor *x, int64_t n_rows,
                          const struct backend_mm *jobs, int n_jobs) {
    cpu_matmul_record(ctx, x, n_rows, jobs, n_jobs);
}

static void cpu_rope(void *ctx, struct backend_tensor *x, int n_tok, int n_head, int head_dim,
                     const struct backend_tensor *pos, const struct backend_rope *cfg) {
    fits(x, n_tok, (int64_t)n_head * head_dim);
    fits(pos, n_tok, 1);
    struct cpu_cmd *cmd = cpu_record(ctx, CPU_ROPE);
    if (!cmd)
        return;
    cmd->a.rope = (struct cpu_rope){cpu_t(x), cpu_t(pos), n_tok, n_head, head_dim, {0}};
    cmd->a.rope.cfg = (struct ops_rope_cfg){.n_rot = cfg->n_rot,
                                            .mode = cfg->mode,
                                            .freq_base = cfg->freq_base,
                                            .freq_scale = cfg->freq_scale,
                                            .ext_factor = cfg->ext_factor,
                                            .attn_factor = cfg->attn_factor,
                                            .freq_factors = vec_of(cfg->freq_factors)};
    ops_rope_yarn_corr_dims(cfg->n_rot, cfg->n_ctx_orig, cfg->freq_base, cmd->a.rope.cfg.corr_dims);
}

static void cpu_kv_write(void *ctx, struct kv_cache *kv, int layer, const struct backend_tensor *k,
                         const struct backend_tensor *v, const struct backend_tensor *seq,
                         const struct backend_tensor *pos, int n_tok, int n_head_kv, int head_dim_k,
                         int head_dim_v) {
    fits(k, n_tok, (int64_t)n_head_kv * head_dim_k);
    fits(v, n_tok, (int64_t)n_head_kv * head_dim_v);
    struct cpu_cmd *cmd = cpu_record(ctx, CPU_KV_WRITE);
    if (cmd)
        cmd->a.kvw = (struct cpu_kvw){kv,    cpu_t(k), cpu_t(v),  cpu_t(seq), cpu_t(pos),
                                      layer, n_tok,    n_head_kv, head_dim_k, head_dim_v};
}

static void cpu_attention(void *ctx, const struct backend_attn *a) {
    fits(a->q, a->n_tok, (int64_t)a->n_head * a->head_dim_k);
    fits(a->out, a->n_tok, (int64_t)a->n_head * a->head_dim_v);
    struct cpu_cmd *cmd = cpu_record(ctx, CPU_ATTN);
    if (cmd)
        cmd->a.attn = *a;
}

static void cpu_moe_route(void *ctx, const struct backend_route *r) {
    fits(r->logits, r->n_tok, r->n_expert);
    fits(r->sel, r->n_tok, r->k);
    fits(r->sel_w, r->n_tok, r->k);
    struct cpu_cmd *cmd = cpu_record(ctx, CPU_ROUTE);
    if (cmd)
        cmd->a.route = *r;
}

static void cpu_moe_ffn(void *ctx, const struct backend_moe *m) {
    cpu_moe_record(ctx, m);
}

/* ---- lifetime --------------------------------------------------------------- */

static void cpu_free(void *ctx) {
    struct cpu_ctx *c = ctx;
    if (!c)
        return;
    cpu_attn_free(c);
    free(c->cmds);
    for (int i = 0; i < CPU_XQ_SLOTS; i++)
        free(c->xq[i].p);
    free(c->moe_xq[0].p), free(c->moe_xq[1].p), free(c->moe_stage.p);
    free(c->moe_g.p), free(c->moe_u.p), free(c->moe_dn.p), free(c->moe_idx.p), free(c->moe_jobs.p);
    free(c->moe_numa.p);
    free(c);
}

static const struct backend_ops cpu_ops = {
    .name = "cpu",
    .caps = BACKEND_CAP_HOST_MATS | BACKEND_CAP_MOE_LATE,
    .supports = cpu_supports,
    .weights_bind = cpu_weights_bind,
    .weights_free = cpu_weights_free,
    .weight_host = cpu_weight_host,
    .tensor_alloc = cpu_tensor_alloc,
    .tensor_free = cpu_tensor_free,
    .kv_store_init = cpu_kv_store_init,
    .begin = cpu_begin,
    .submit = cpu_submit,
    .wait = cpu_wait,
    .tensor_write = cpu_tensor_write,
    .tensor_read = cpu_tensor_read,
    .embed = cpu_embed,
    .copy_rows = cpu_copy_rows,
    .rmsnorm = cpu_rmsnorm,
    .matmul = cpu_matmul_op,
    .add_bias = cpu_add_bias,
    .add = cpu_add,
    .rope = cpu_rope,
    .kv_write = cpu_kv_write,
    .attention = cpu_attention,
    .swiglu = cpu_swiglu_op,
    .moe_route = cpu_moe_route,
    .moe_ffn = cpu_moe_ffn,
    .add_gated = cpu_add_gated,
    .free = cpu_free,
};

struct backend_cpu_params backend_cpu_params_default(void) {
    return (struct backend_cpu_params){.pool = NULL, .on_matmul = NULL, .on_matmul_arg = NULL};
}

struct backend *backend_cpu_init(const struct backend_cpu_params *params,
                                 struct strata_error *err) {
    kernels_init();
    struct backend *be = calloc(1, sizeof *be);
    struct cpu_ctx *c = calloc(1, sizeof *c);
    if (!be || !c)
        goto fail;
    c->params = params ? *params : backend_cpu_params_default();
    c->pool = c->params.pool;
    c->n_workers = c->pool ? pool_n_threads(c->pool) : 1;
    c->scratch = calloc((size_t)c->n_workers, sizeof *c->scratch);
    if (!c->scratch || cpu_attn_reserve(c, 256))
        goto fail;
    be->ops = &cpu_ops;
    be->ctx = c;
    return be;
fail:
    cpu_free(c);
    free(be);
    strata_error_set(err, STRATA_E_NOMEM, "backend_cpu_init: out of memory");
    return NULL;
}
