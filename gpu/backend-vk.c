/* gpu/backend-vk.c: the Vulkan backend's vtable (backend-vk.h): tensors in
 * device memory, the step (staging of writes and reads, the block tables,
 * submit and wait) and each op recorded through the kernels of gpu/vk-mm.h
 * and gpu/vk-ops.h. Weights are in backend-vk-weights.c, the KV store in
 * backend-vk-kv.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/backend-vk-impl.h"

static const uint32_t spv_moe_sum[] =
#include "gpu/shaders/be_moe_sum.spv.h"
    ;

void bvk_fail(struct bvk_ctx *c, int code, const char *fmt, ...) {
    if (c->err_code)
        return;
    c->err_code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err_msg, sizeof c->err_msg, fmt, ap);
    va_end(ap);
}

bool bvk_rec_raw(struct bvk_ctx *c) {
    if (c->err_code)
        return false;
    if (c->io_group) { /* the writes (reads) before this op: one barrier after them */
        vk_rec_group(c->dev, false);
        c->io_group = 0;
    }
    if (!c->in_step) {
        bvk_fail(c, STRATA_E_INVALID, "backend vulkan: an op outside a step (no begin)");
        return false;
    }
    if (vk_rec_active(c->dev))
        return true;
    struct strata_error e = {0};
    c->io_group = 0;
    if (vk_rec_begin(c->dev, &e)) { /* waits for the submitted part first */
        bvk_fail(c, e.code, "%s", e.message);
        return false;
    }
    return true;
}

bool bvk_rec(struct bvk_ctx *c) {
    bvk_pend_flush(c);
    return bvk_rec_raw(c);
}

static void bvk_retire(struct bvk_ctx *c, struct vk_buf *b) {
    if (!b)
        return;
    if (c->n_retired == c->cap_retired) {
        int cap = c->cap_retired ? 2 * c->cap_retired : 8;
        struct vk_buf **nr = realloc(c->retired, (size_t)cap * sizeof *nr);
        if (!nr) { /* cannot defer: wait for the device, then free now */
            (void)vk_rec_wait(c->dev, NULL);
            vk_buf_free(c->dev, b);
            return;
        }
        c->retired = nr;
        c->cap_retired = cap;
    }
    c->retired[c->n_retired++] = b;
}

static void bvk_retired_free(struct bvk_ctx *c) {
    for (int i = 0; i < c->n_retired; i++) {
        c->tensor_bytes -= vk_buf_size(c->retired[i]);
        vk_buf_free(c->dev, c->retired[i]);
    }
    c->n_retired = 0;
}

bool bvk_scratch(struct bvk_ctx *c, struct vk_buf **b, uint64_t n) {
    if (n == 0)
        n = 4;
    if (*b && vk_buf_size(*b) >= n)
        return true;
    uint64_t sz = *b ? 2 * vk_buf_size(*b) : n;
    if (sz < n)
        sz = n;
    const uint64_t lim = vk_dev_info(c->dev)->max_storage_range & ~255ull;
    if (sz > lim && n <= lim)
        sz = lim;
    struct strata_error e = {0};
    struct vk_buf *nb = vk_buf_alloc(c->dev, sz, VK_MEM_DEVICE, &e);
    if (!nb) {
        bvk_fail(c, e.code, "backend vulkan: scratch of %llu bytes: %s", (unsigned long long)sz,
                 e.message);
        return false;
    }
    bvk_retire(c, *b);
    c->tensor_bytes += sz;
    *b = nb;
    return true;
}

/* bvk_rec for a tensor write (kind 1) or read (2): consecutive writes copy
 * from staging into different rows or tensors, consecutive reads into
 * different staging, so each run of them shares one barrier (the ids,
 * positions and sequences of a step; a step's read-backs). */
static bool bvk_rec_io(struct bvk_ctx *c, int kind) {
    if (c->io_group == kind && !c->n_pend && !c->err_code && vk_rec_active(c->dev))
        return true;
    if (!bvk_rec(c))
        return false;
    vk_rec_group(c->dev, true);
    c->io_group = kind;
    return true;
}

/* n bytes of host-visible staging for this step: its buffer and offset. */
static bool bvk_stage(struct bvk_ctx *c, uint64_t n, struct vk_buf **buf, uint64_t *off) {
    n = (n + 15) & ~15ull;
    while (c->cur_chunk < c->n_chunk) {
        struct bvk_chunk *k = &c->chunks[c->cur_chunk];
        if (vk_buf_size(k->buf) - k->used >= n) {
            *buf = k->buf;
            *off = k->used;
            k->used += n;
            return true;
        }
        c->cur_chunk++;
    }
    if (c->n_chunk == c->cap_chunk) {
        int cap = c->cap_chunk ? 2 * c->cap_chunk : 4;
        struct bvk_chunk *nc = realloc(c->chunks, (size_t)cap * sizeof *nc);
        if (!nc) {
            bvk_fail(c, STRATA_E_NOMEM, "backend vulkan: out of memory for staging");
            return false;
        }
        c->chunks = nc;
        c->cap_chunk = cap;
    }
    struct strata_error e = {0};
    struct vk_buf *b =
        vk_buf_alloc(c->dev, n > BVK_STAGE_CHUNK ? n : BVK_STAGE_CHUNK, VK_MEM_HOST, &e);
    if (!b) {
        bvk_fail(c, e.code, "backend vulkan: staging: %s", e.message);
        return false;
    }
    c->chunks[c->n_chunk++] = (struct bvk_chunk){b, n};
    c->cur_chunk = c->n_chunk - 1;
    *buf = b;
    *off = 0;
    return true;
}

/* ---- tensors ------------------------------------------------------------------ */

static struct backend_tensor *bvk_tensor_alloc(void *ctx, enum backend_dtype dtype, int64_t n_rows,
                                               int64_t n_cols, struct strata_error *err) {
    struct bvk_ctx *c = ctx;
    if (n_rows < 0 || n_cols < 0) {
        strata_error_set(err, STRATA_E_INVALID, "backend vulkan: a %lld x %lld tensor",
                         (long long)n_rows, (long long)n_cols);
        return NULL;
    }
    struct bvk_tensor *t = calloc(1, sizeof *t);
    if (!t) {
        strata_error_set(err, STRATA_E_NOMEM, "backend vulkan: out of memory");
        return NULL;
    }
    const uint64_t bytes = (uint64_t)(n_rows ? n_rows : 1) * (uint64_t)(n_cols ? n_cols : 1) * 4;
    if (bytes > vk_dev_info(c->dev)->max_storage_range) {
        strata_error_set(err, STRATA_E_UNSUPPORTED,
                         "backend vulkan: a %lld x %lld tensor exceeds one binding (%llu bytes)",
                         (long long)n_rows, (long long)n_cols,
                         (unsigned long long)vk_dev_info(c->dev)->max_storage_range);
        free(t);
        return NULL;
    }
    if (!(t->buf = vk_buf_alloc(c->dev, bytes, VK_MEM_DEVICE, err))) {
        free(t);
        return NULL;
    }
    c->tensor_bytes += bytes;
    t->t = (struct backend_tensor){dtype, n_rows, n_cols};
    return &t->t;
}

static void bvk_tensor_free(void *ctx, struct backend_tensor *bt) {
    struct bvk_ctx *c = ctx;
    struct bvk_tensor *t = bvk_t(bt);
    if (!t)
        return;
    c->tensor_bytes -= vk_buf_size(t->buf);
    vk_buf_free(c->dev, t->buf);
    free(t);
}

/* ---- the step ---------------------------------------------------------------- */

/* Copies the reads of every waited-for submit out of staging. */
static void bvk_land_reads(struct bvk_ctx *c) {
    int k = 0;
    for (int i = 0; i < c->n_read; i++) {
        const struct bvk_read *r = &c->reads[i];
        if (r->sub <= c->n_waited)
            memcpy(r->dst, r->src, r->n);
        else
            c->reads[k++] = *r;
    }
    c->n_read = k;
}

static int bvk_wait(void *ctx, struct strata_error *err) {
    struct bvk_ctx *c = ctx;
    int rc = vk_rec_wait(c->dev, err);
    if (rc)
        return rc;
    c->n_waited = c->n_sub;
    bvk_land_reads(c);
    bvk_retired_free(c);
    return 0;
}

/* The block tables of the step's sequences, recorded into c->table. */
static int bvk_tables(struct bvk_ctx *c, const struct backend_step *s, struct strata_error *err) {
    const struct kv_params *kp = kv_get_params(s->kv);
    const int stride = (kp->n_ctx + kp->n_block - 1) / kp->n_block;
    const uint64_t bytes = (uint64_t)kp->n_seq_max * (uint64_t)stride * 4;
    if (!c->table || c->table_seqs != kp->n_seq_max || c->table_stride != stride) {
        struct vk_buf *t = vk_buf_alloc(c->dev, bytes, VK_MEM_DEVICE, err);
        int32_t *h = realloc(c->h_table, (size_t)stride * sizeof *h);
        if (!t || !h) {
            vk_buf_free(c->dev, t);
            if (h)
                c->h_table = h;
            return err && err->code
                       ? err->code
                       : strata_error_set(err, STRATA_E_NOMEM, "backend vulkan: out of memory");
        }
        vk_buf_free(c->dev, c->table); /* nothing is pending (begin waited) */
        c->table = t;
        c->h_table = h;
        c->table_seqs = kp->n_seq_max;
        c->table_stride = stride;
    }
    vk_rec_group(c->dev, true); /* one barrier after the rows and the step's writes */
    c->io_group = 1;
    c->one_per_seq = true;
    for (int i = 0; i < s->n_tok; i++) {
        const int seq = s->seq[i];
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = s->seq[j] == seq;
        c->one_per_seq = c->one_per_seq && !seen;
        if (seen || seq < 0 || seq >= kp->n_seq_max)
            continue;
        int nb = kv_seq_n_blocks(s->kv, seq);
        if (nb > stride)
            nb = stride;
        for (int b = 0; b < nb; b++)
            c->h_table[b] = kv_seq_block(s->kv, seq, b);
        if (nb == 0)
            continue;
        struct vk_buf *sb;
        uint64_t so;
        if (!bvk_stage(c, (uint64_t)nb * 4, &sb, &so))
            return strata_error_set(err, c->err_code, "%s", c->err_msg);
        memcpy((uint8_t *)vk_buf_map(sb) + so, c->h_table, (size_t)nb * 4);
        vk_copy(c->dev, sb, so, c->table, (uint64_t)seq * stride * 4, (uint64_t)nb * 4);
    }
    c->kvv.table = (struct vk_bind){c->table, 0, 0};
    c->kvv.table_stride = stride;
    return 0;
}

static int bvk_begin(void *ctx, const struct backend_step *s, struct strata_error *err) {
    struct bvk_ctx *c = ctx;
    int rc = bvk_wait(c, err); /* a submitted part not waited for */
    if (rc)
        return rc;
    c->n_read = 0; /* reads of a dropped recording never land */
    c->err_code = 0;
    c->err_msg[0] = '\0';
    for (int i = 0; i < c->n_chunk; i++)
        c->chunks[i].used = 0;
    c->cur_chunk = 0;
    c->in_step = false;
    c->io_group = 0;
    c->n_pend = 0;
    c->kv = NULL;
    c->n_kv_max = s->n_kv_max;
    c->one_per_seq = false; /* bvk_tables decides */
    if ((rc = vk_rec_begin(c->dev, err)))
        return rc;
    if (s->kv) {
        if ((rc = bvk_kv_view(c, s->kv, &c->kvv, err)) || (rc = bvk_tables(c, s, err)))
            return rc;
        c->kv = s->kv;
    }
    c->in_step = true;
    return 0;
}

static int bvk_submit(void *ctx, struct strata_error *err) {
    struct bvk_ctx *c = ctx;
    if (c->err_code) {
        const int rc = c->err_code;
        c->err_code = 0;
        c->in_step = false; /* the next begin drops the recording */
        return strata_error_set(err, rc, "%s", c->err_msg);
    }
    if (c->in_step && c->n_pend) /* the ops held back, as they were asked for */
        bvk_pend_flush(c);
    int rc = vkmm_status(c->mm, err);
    if (rc) {
        c->in_step = false;
        return rc;
    }
    if (!vk_rec_active(c->dev))
        return 0;    /* nothing recorded since the last submit */
    c->io_group = 0; /* vk_rec_submit closes it */
    rc = vk_rec_submit(c->dev, err);
    if (rc)
        return rc;
    c->n_sub++;
    return 0;
}

/* ---- recording the ops ---------------------------------------------------------- */

static void bvk_tensor_write(void *ctx, struct backend_tensor *t, int64_t row0, const void *src,
                             int64_t n_rows) {
    struct bvk_ctx *c = ctx;
    bvk_fits(t, row0 + n_rows, t->n_cols);
    const uint64_t n = (uint64_t)n_rows * (uint64_t)t->n_cols * 4;
    struct vk_buf *sb;
    uint64_t so;
    if (n == 0 || !bvk_rec_io(c, 1) || !bvk_stage(c, n, &sb, &so))
        return;
    memcpy((uint8_t *)vk_buf_map(sb) + so, src, n);
    vk_copy(c->dev, sb, so, bvk_t(t)->buf, (uint64_t)row0 * (uint64_t)t->n_cols * 4, n);
}

static void bvk_tensor_read(void *ctx, const struct backend_tensor *t, int64_t row0, void *dst,
                            int64_t n_rows) {
    struct bvk_ctx *c = ctx;
    bvk_fits(t, row0 + n_rows, t->n_cols);
    const uint64_t n = (uint64_t)n_rows * (uint64_t)t->n_cols * 4;
    struct vk_buf *sb;
    uint64_t so;
    if (n == 0 || !bvk_rec_io(c, 2) || !bvk_stage(c, n, &sb, &so))
        return;
    if (c->n_read == c->cap_read) {
        int cap = c->cap_read ? 2 * c->cap_read : 16;
        struct bvk_read *nr = realloc(c->reads, (size_t)cap * sizeof *nr);
        if (!nr) {
            bvk_fail(c, STRATA_E_NOMEM, "backend vulkan: out of memory for a read");
            return;
        }
        c->reads = nr;
        c->cap_read = cap;
    }
    vk_copy(c->dev, bvk_t(t)->buf, (uint64_t)row0 * (uint64_t)t->n_cols * 4, sb, so, n);
    c->reads[c->n_read++] =
        (struct bvk_read){dst, (const uint8_t *)vk_buf_map(sb) + so, n, c->n_sub + 1};
}

static void bvk_embed(void *ctx, const struct backend_weight *bw, const struct backend_tensor *ids,
                      int n, struct backend_tensor *out) {
    struct bvk_ctx *c = ctx;
    const struct bvk_weight *w = bvk_w(bw);
    STRATA_ASSERT(w->use == BACKEND_USE_ROWS);
    bvk_fits(ids, n, 1);
    bvk_fits(out, n, w->n_cols);
    if (!bvk_rec(c))
        return;
    const struct vkops_rows rows = {.type = w->type,
                                    .n_rows = w->n_rows,
                                    .n_cols = w->n_cols,
                                    .row_bytes = w->row_bytes,
                                    .n_piece = w->n_piece,
                                    .piece = w->rows};
    vkops_embed(c->ops, &rows, bvk_bind(ids), n, bvk_bind(out));
}

static void bvk_copy_rows(void *ctx, const struct backend_tensor *src,
                          const struct backend_tensor *ids, int n, int64_t n_cols,
                          struct backend_tensor *dst) {
    struct bvk_ctx *c = ctx;
    bvk_fits(ids, n, 1);
    bvk_fits(dst, n, n_cols);
    if (bvk_rec(c))
        vkops_copy_rows(c->ops, bvk_bind(src), bvk_bind(ids), n, n_cols, bvk_bind(dst));
}

static void bvk_add_bias(void *ctx, struct backend_tensor *y, const struct backend_weight *b,
                         int64_t n_rows, int64_t n_cols) {
    struct bvk_ctx *c = ctx;
    bvk_fits(y, n_rows, n_cols);
    if (bvk_rec(c))
        vkops_add_bias(c->ops, bvk_bind(y), bvk_vec_bind(b), n_rows, n_cols);
}

bool bvk_kv_is_step(struct bvk_ctx *c, const struct kv_cache *kv) {
    if (kv && kv == c->kv)
        return true;
    bvk_fail(c, STRATA_E_INVALID, "backend vulkan: a KV cache other than the step's");
    return false;
}

static void bvk_attention(void *ctx, const struct backend_attn *a) {
    struct bvk_ctx *c = ctx;
    bvk_fits(a->q, a->n_tok, (int64_t)a->n_head * a->head_dim_k);
    bvk_fits(a->out, a->n_tok, (int64_t)a->n_head * a->head_dim_v);
    struct vkops_rope_kv rk;
    const bool fused = bvk_take_rope_kv(c, a, &rk); /* before bvk_rec would record it */
    if (!bvk_rec(c) || !bvk_kv_is_step(c, a->kv))
        return;
    if (!vkops_attn_supported(a->n_head, a->n_head_kv, a->head_dim_k, a->head_dim_v)) {
        bvk_fail(c, STRATA_E_UNSUPPORTED,
                 "backend vulkan: no attention kernel for %d/%d heads of %d/%d dims", a->n_head,
                 a->n_head_kv, a->head_dim_k, a->head_dim_v);
        return;
    }
    const uint64_t sb = vkops_attn_scratch_bytes(a->n_tok, a->n_head, a->head_dim_v, c->n_kv_max);
    if (!bvk_scratch(c, &c->attn_scratch, sb))
        return;
    struct vkops_attn va = {.q = bvk_bind(a->q),
                            .out = bvk_bind(a->out),
                            .seq = bvk_bind(a->seq),
                            .pos = bvk_bind(a->pos),
                            .scratch = {c->attn_scratch, 0, 0},
                            .layer = a->layer,
                            .n_tok = a->n_tok,
                            .n_head = a->n_head,
                            .n_head_kv = a->n_head_kv,
                            .head_dim_k = a->head_dim_k,
                            .head_dim_v = a->head_dim_v,
                            .n_kv_max = c->n_kv_max,
                            .scale = a->scale,
                            .rope = fused ? &rk : NULL};
    /* a decode token's output also as q8 blocks (BACKEND_VK_FUSE_Q8) for
     * the o projection after it (the integer-dot matvec; backend-vk-fuse.c
     * pend_now's ACC) */
    const int64_t n_out = (int64_t)a->n_head * a->head_dim_v;
    const bool yq = a->n_tok == 1
                        ? (c->fuse & BACKEND_VK_FUSE_Q8) != 0
                        : (c->fuse & BACKEND_VK_FUSE_MQ8) && vk_dev_info(c->dev)->int_dot &&
                              a->n_tok <= VKOPS_ATTN_DECODE_MAX;
    if (yq && n_out % 32 == 0 && bvk_scratch(c, &c->xq8, vkops_q8_bytes(a->n_tok, n_out)))
        va.yq = (struct vk_bind){c->xq8, 0, 0};
    c->q8_src = NULL;
    if (vkops_attention(c->ops, &c->kvv, &va)) {
        c->q8_src = a->out;
        c->q8_rows = a->n_tok;
        bvk_q8_keep(c);
    }
}

static void bvk_moe_route(void *ctx, const struct backend_route *r) {
    struct bvk_ctx *c = ctx;
    bvk_fits(r->logits, r->n_tok, r->n_expert);
    bvk_fits(r->sel, r->n_tok, r->k);
    bvk_fits(r->sel_w, r->n_tok, r->k);
    if (r->n_expert > VKOPS_ROUTE_MAX || r->k > VKOPS_ROUTE_K_MAX) {
        bvk_fail(c, STRATA_E_UNSUPPORTED, "backend vulkan: routing %d experts, top %d", r->n_expert,
                 r->k);
        return;
    }
    if (bvk_rec(c)) {
        const bool q8 = bvk_q8_valid(c, NULL);
        vkops_moe_route(c->ops, bvk_bind(r->logits), bvk_bind(r->sel), bvk_bind(r->sel_w), r->n_tok,
                        r->n_expert, r->k, r->norm_topk, r->scale);
        if (q8) /* it writes neither the norm's output nor its q8 copy */
            bvk_q8_keep(c);
    }
}

/* The stack every expert of the table comes from (expert e at index e), or
 * NULL when the table is anything else. */
static const struct bvk_weight *moe_stack(const struct backend_moe *m, int which) {
    const struct bvk_weight *w = NULL;
    for (int e = 0; e < m->n_expert; e++) {
        const struct backend_expert *x = &m->experts[e];
        const struct backend_mat *mat = which == 0 ? &x->gate : which == 1 ? &x->up : &x->down;
        if (!mat->w || mat->index != e)
            return NULL;
        if (w && bvk_w(mat->w) != w)
            return NULL;
        w = bvk_w(mat->w);
    }
    return w && w->n_expert == m->n_expert ? w : NULL;
}

/* BACKEND_VK_FUSE_TQ8 for the experts of a prefill (and BACKEND_VK_FUSE_MQ8
 * for 2-8 tokens: the expert-indexed integer-dot matvec over the same q8
 * rows, a workgroup column a pick): gate + up + SwiGLU over
 * x's q8 rows (the norm's copy, or quantized now), then the SwiGLU rows
 * quantized (into u's scratch, unused when gate and up fuse: 1.5 of its 4
 * bytes a value) for the down projection's tiles, one q8 row a pick. False,
 * with nothing recorded, where a type or shape does not take the tiles.
 * Measured on an H100 (device call of 2026-12-07, sixth session, the MoE
 * of 128 experts top-8 Q4_0, `gpu-bench moe -1 8 512 1 0 4300 PC auto`,
 * alternated): pp512 3,587 / 3,587 tok/s against 3,257 / 3,235 with the
 * experts quantizing their own tiles (+10%; the dense form's was +14%). */
static bool moe_tq8(struct bvk_ctx *c, const struct backend_moe *m, const struct bvk_weight *gw,
                    const struct bvk_weight *uw, const struct bvk_weight *dw, struct vk_bind g,
                    struct vk_bind u, struct vk_bind d) {
    /* past 8 tokens the expert tiles (FUSE_TQ8); 2-8 the expert-indexed
     * matvec over the same q8 rows (FUSE_MQ8) */
    const bool tiles = (c->fuse & BACKEND_VK_FUSE_TQ8) &&
                       vkmm_tq8_id_ok(c->mm, gw->type, m->n_tok) &&
                       vkmm_tq8_id_ok(c->mm, dw->type, m->n_tok);
    const bool passes = (c->fuse & BACKEND_VK_FUSE_MQ8) &&
                        vkmm_mq8_id_ok(c->mm, gw->type, m->n_tok) &&
                        vkmm_mq8_id_ok(c->mm, dw->type, m->n_tok);
    if ((!tiles && !passes) || gw->n_cols % 32 || dw->n_cols % 32 ||
        !bvk_tq8_x(c, m->x, m->n_tok, gw->n_cols))
        return false;
    const int64_t n_pick = (int64_t)m->n_tok * m->k;
    vkmm_matmul_id_tq8(c->mm, &gw->mat, &uw->mat, (struct vk_bind){c->xq8, 0, 0}, false,
                       bvk_bind(m->sel), m->k, m->n_tok, g);
    if (vkops_quant_q8(c->ops, g, u, n_pick, m->n_ff))
        vkmm_matmul_id_tq8(c->mm, &dw->mat, NULL, u, true, bvk_bind(m->sel), m->k, m->n_tok, d);
    else
        vkmm_matmul_id(c->mm, &dw->mat, g, true, bvk_bind(m->sel), m->k, m->n_tok, d);
    bvk_moe_sum(c, m);
    return true;
}

static void bvk_moe_ffn(void *ctx, const struct backend_moe *m) {
    struct bvk_ctx *c = ctx;
    bvk_fits(m->x, m->n_tok, m->n_embd);
    bvk_fits(m->sel, m->n_tok, m->k);
    bvk_fits(m->sel_w, m->n_tok, m->k);
    bvk_fits(m->out, m->n_tok, m->n_embd);
    if (!bvk_rec(c))
        return;
    const struct bvk_weight *gw = moe_stack(m, 0), *uw = moe_stack(m, 1), *dw = moe_stack(m, 2);
    if (!gw || !uw || !dw) {
        bvk_fail(c, STRATA_E_UNSUPPORTED,
                 "backend vulkan: routed experts outside one resident stack per matrix");
        return;
    }
    const uint64_t n_pick = (uint64_t)m->n_tok * (uint64_t)m->k;
    if (!bvk_scratch(c, &c->moe_g, n_pick * (uint64_t)m->n_ff * 4) ||
        !bvk_scratch(c, &c->moe_u, n_pick * (uint64_t)m->n_ff * 4) ||
        !bvk_scratch(c, &c->moe_d, n_pick * (uint64_t)m->n_embd * 4))
        return;
    const struct vk_bind g = {c->moe_g, 0, 0}, u = {c->moe_u, 0, 0}, d = {c->moe_d, 0, 0};
    const bool same = gw->type == uw->type && gw->n_rows == uw->n_rows && gw->n_cols == uw->n_cols;
    if (same && moe_tq8(c, m, gw, uw, dw, g, u, d))
        return;
    if (same && m->n_tok == 1 && bvk_q8_valid(c, m->x) && vkmm_q8x_ok(c->mm, gw->type)) {
        /* the norm's q8 copy of x: integer dot products */
        vkmm_matmul_id_q8x(c->mm, &gw->mat, &uw->mat, (struct vk_bind){c->xq8, 0, 0},
                           bvk_bind(m->sel), m->k, g);
    } else if (same) {
        /* gate, up and SwiGLU of every pick in one dispatch */
        vkmm_matmul_id_glu(c->mm, &gw->mat, &uw->mat, bvk_bind(m->x), false, bvk_bind(m->sel), m->k,
                           m->n_tok, g);
    } else {
        vk_rec_group(c->dev, true); /* gate and up: the same input, their own outputs */
        vkmm_matmul_id(c->mm, &gw->mat, bvk_bind(m->x), false, bvk_bind(m->sel), m->k, m->n_tok, g);
        vkmm_matmul_id(c->mm, &uw->mat, bvk_bind(m->x), false, bvk_bind(m->sel), m->k, m->n_tok, u);
        vk_rec_group(c->dev, false);
        vkops_swiglu(c->ops, g, u, g, (int64_t)n_pick, m->n_ff);
    }
    if (bvk_xq_ok(c, dw, m->n_tok))
        vkmm_matmul_id_xq(c->mm, &dw->mat, NULL, g, true, bvk_bind(m->sel), m->k, d);
    else
        vkmm_matmul_id(c->mm, &dw->mat, g, true, bvk_bind(m->sel), m->k, m->n_tok, d);
    bvk_moe_sum(c, m); /* the weighted sum: held, a residual add may follow */
}

/* Sampling on the device (vkops_argmax, vkops_sample): a decode step hands
 * back token ids, not rows of n_vocab logits (bench/README.md, "Vulkan
 * split offload and device sampling"). */
static int bvk_sample(void *ctx, const struct backend_tensor *logits, int n_rows, int64_t n_vocab,
                      const struct backend_sample *p, const struct backend_tensor *u,
                      struct backend_tensor *ids) {
    struct bvk_ctx *c = ctx;
    const bool greedy = p->temperature <= 0.0f;
    if (!greedy && (p->top_k < 1 || p->top_k > VKOPS_SAMPLE_K_MAX))
        return STRATA_E_UNSUPPORTED; /* top_k 0 sorts the whole vocabulary: the host's */
    bvk_fits(logits, n_rows, n_vocab);
    bvk_fits(ids, n_rows, 1);
    if (!greedy)
        bvk_fits(u, n_rows, 1);
    if (bvk_rec(c)) {
        if (greedy) {
            vkops_argmax(c->ops, bvk_bind(logits), n_rows, n_vocab, bvk_bind(ids));
        } else {
            const struct vkops_sample vp = {p->top_k, p->top_p, p->min_p, p->temperature};
            vkops_sample(c->ops, bvk_bind(logits), n_rows, n_vocab, &vp, bvk_bind(u),
                         bvk_bind(ids));
        }
    }
    return 0;
}

static void bvk_add_gated(void *ctx, struct backend_tensor *out, const struct backend_tensor *s,
                          const struct backend_tensor *gate, int64_t n_rows, int64_t n_cols) {
    struct bvk_ctx *c = ctx;
    bvk_fits(out, n_rows, n_cols);
    bvk_fits(s, n_rows, n_cols);
    bvk_fits(gate, n_rows, 1);
    if (bvk_rec(c))
        vkops_add_gated(c->ops, bvk_bind(out), bvk_bind(s), bvk_bind(gate), n_rows, n_cols);
}

/* ---- lifetime --------------------------------------------------------------- */

static void bvk_free(void *ctx) {
    struct bvk_ctx *c = ctx;
    if (!c)
        return;
    if (c->dev) {
        (void)vk_rec_wait(c->dev, NULL);
        vk_prof_report(c->dev, stderr); /* the profile's table, when it timed anything */
        bvk_retired_free(c);
        for (int i = 0; i < c->n_chunk; i++)
            vk_buf_free(c->dev, c->chunks[i].buf);
        vk_buf_free(c->dev, c->table);
        vk_buf_free(c->dev, c->attn_scratch);
        vk_buf_free(c->dev, c->xq8);
        vk_buf_free(c->dev, c->moe_g);
        vk_buf_free(c->dev, c->moe_u);
        vk_buf_free(c->dev, c->moe_d);
        vk_pipe_free(c->dev, c->moe_sum);
        vkops_free(c->ops);
        vkmm_free(c->mm);
        vk_dev_close(c->dev);
    }
    free(c->chunks);
    free(c->reads);
    free(c->retired);
    free(c->h_table);
    free(c);
}

static const struct backend_ops bvk_ops = {
    .name = "vulkan",
    .caps = 0,
    .supports = bvk_supports,
    .weights_bind = bvk_weights_bind,
    .weights_free = bvk_weights_free,
    .weight_host = NULL,
    .tensor_alloc = bvk_tensor_alloc,
    .tensor_free = bvk_tensor_free,
    .kv_store_init = bvk_kv_store_init,
    .begin = bvk_begin,
    .submit = bvk_submit,
    .wait = bvk_wait,
    .tensor_write = bvk_tensor_write,
    .tensor_read = bvk_tensor_read,
    .embed = bvk_embed,
    .copy_rows = bvk_copy_rows,
    .rmsnorm = bvk_rmsnorm,
    .matmul = bvk_matmul,
    .add_bias = bvk_add_bias,
    .add = bvk_add,
    .rope = bvk_rope,
    .kv_write = bvk_kv_write,
    .attention = bvk_attention,
    .swiglu = bvk_swiglu,
    .moe_route = bvk_moe_route,
    .moe_ffn = bvk_moe_ffn,
    .add_gated = bvk_add_gated,
    .sample = bvk_sample,
    .free = bvk_free,
};

struct backend_vk_params backend_vk_params_default(void) {
    return (struct backend_vk_params){.device = -1, .profile = false, .fuse = BACKEND_VK_FUSE_ALL};
}

struct backend *backend_vk_init(const struct backend_vk_params *p, struct strata_error *err) {
    struct backend *be = calloc(1, sizeof *be);
    struct bvk_ctx *c = calloc(1, sizeof *c);
    if (!be || !c) {
        strata_error_set(err, STRATA_E_NOMEM, "backend vulkan: out of memory");
        goto fail;
    }
    c->params = p ? *p : backend_vk_params_default();
    c->params.pipeline_cache = NULL; /* borrowed for init only */
    c->params.mm_path = NULL;
    c->fuse = c->params.fuse & BACKEND_VK_FUSE_MASK;
    const char *pcache = p ? p->pipeline_cache : NULL;
    if (vk_dev_open(c->params.device, &c->dev, err) ||
        (pcache && *pcache && vk_dev_pipeline_cache(c->dev, pcache, err)) ||
        vkmm_init(c->dev, &c->mm, err) || vkmm_configure(c->mm, p ? p->mm_path : NULL, err) ||
        vkops_init(c->dev, &c->ops, err))
        goto fail;
    if (!(c->moe_sum = vk_pipe_create(c->dev, "moe_sum", spv_moe_sum, sizeof spv_moe_sum, 4,
                                      sizeof(struct bvk_moe_sum_push), NULL, 0, err)))
        goto fail;
    vk_prof_enable(c->dev, c->params.profile);
    vk_dev_set_budget(c->dev, c->params.mem_budget);
    be->ops = &bvk_ops;
    be->ctx = c;
    return be;
fail:
    bvk_free(c);
    free(be);
    return NULL;
}

const struct vk_dev_info *backend_vk_info(const struct backend *be) {
    if (!be || be->ops != &bvk_ops)
        return NULL;
    return vk_dev_info(((struct bvk_ctx *)be->ctx)->dev);
}

uint64_t backend_vk_device_bytes(const struct backend *be) {
    if (!be || be->ops != &bvk_ops)
        return 0;
    const struct bvk_ctx *c = be->ctx;
    return c->weight_bytes + c->tensor_bytes + c->kv_bytes;
}

void backend_vk_mm_describe(const struct backend *be, char *buf, size_t cap) {
    if (cap)
        buf[0] = '\0';
    if (be && be->ops == &bvk_ops && cap)
        vkmm_describe(((struct bvk_ctx *)be->ctx)->mm, buf, cap);
}

void backend_vk_profile_enable(const struct backend *be, bool on) {
    if (be && be->ops == &bvk_ops)
        vk_prof_enable(((struct bvk_ctx *)be->ctx)->dev, on);
}

void backend_vk_profile_report(const struct backend *be, FILE *out) {
    if (be && be->ops == &bvk_ops)
        vk_prof_report(((struct bvk_ctx *)be->ctx)->dev, out);
}

uint64_t backend_vk_dispatches(const struct backend *be) {
    if (!be || be->ops != &bvk_ops)
        return 0;
    return vk_dev_dispatches(((struct bvk_ctx *)be->ctx)->dev);
}
