/* engine/backend/backend-split.c: one backend over two by layer
 * (backend-split.h). */
#include "engine/backend/backend-split.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SIDE_LO 0
#define SIDE_HI 1
#define SIDE_BOTH 2 /* a weight bound on both sides */

struct split_tensor {
    struct backend_tensor base;
    struct backend_tensor *t[2]; /* owned: each side's */
    unsigned valid;              /* bit s: side s holds the latest rows */
    float *stage;                /* (n_rows, n_cols) 4-byte elements: rows moving across */
    int stage_side;              /* side whose recording reads stage, or -1 */
};

struct backend_weight {
    int side;                    /* SIDE_* */
    struct backend_weight *w[2]; /* borrowed from each side's set (NULL: not on that side) */
};

struct backend_weights {
    struct backend_weights *set[2]; /* owned: each side's (NULL: nothing bound there) */
    struct backend_weight *w;       /* (n) */
};

struct split_ctx {
    struct backend_ops ops; /* split_ops with this instance's caps; be->ops points here */
    struct backend *be[2];  /* owned */
    int n_lo, n_layer;
    int cur;          /* side of the last op */
    int n_tok;        /* the open step's */
    int rc;           /* the first failure of a move inside the step, returned at submit / wait */
    uint64_t n_mm[2]; /* matmul and MoE calls run on each side (backend_split_counts) */
    struct strata_error err;
    void **scratch; /* translated tables of the step: freed at the next begin */
    int n_scratch, cap_scratch;
};

/* The lo part (the GPU) holds only layers [0, n_lo) of each block: the same
 * layout (k of every layer, then v) for n_lo layers, which is what a
 * backend's own store of an n_lo-layer cache holds, so its kernels index it
 * as one (bvk_kv_view takes the layer count from the block size). The hi
 * part holds whole blocks (the host's kv_k_head addresses them). */
struct split_kv {
    struct kv_store *part[2]; /* owned */
    int n_lo, n_layer;
    bool shaped;             /* p set (kv_store_ops.shape) */
    struct kv_params p;      /* the cache's shape */
    size_t k_layer, v_layer; /* bytes of one layer's k (v) in a block */
};

static void skv_shape(void *ctx, const struct kv_params *p) {
    struct split_kv *k = ctx;
    k->p = *p;
    k->k_layer = (size_t)p->n_block * (size_t)p->n_embd_k * 2;
    k->v_layer = (size_t)p->n_block * (size_t)p->n_embd_v * 2;
    k->shaped = p->n_layer == k->n_layer;
}

static const struct backend_ops split_ops;

/* ---- helpers ------------------------------------------------------------------- */

static struct backend_tensor *tt(const struct backend_tensor *t, int s) {
    return t ? ((const struct split_tensor *)t)->t[s] : NULL;
}

static const struct backend_weight *ww(const struct backend_weight *w, int s) {
    return w ? w->w[s] : NULL;
}

static void fail(struct split_ctx *c, int rc, const struct strata_error *e) {
    if (c->rc)
        return;
    c->rc = rc;
    if (e)
        c->err = *e;
    else
        strata_error_set(&c->err, rc, "backend split: %s", strata_error_name(rc));
}

/* Side s now runs an op that reads t: moves the rows from the other side
 * when s does not hold the latest. */
static void need(struct split_ctx *c, int s, const struct backend_tensor *bt) {
    struct split_tensor *t = (struct split_tensor *)bt;
    if (!t || (t->valid & (1u << s)) || c->rc)
        return;
    const int o = 1 - s;
    struct backend *bo = c->be[o], *bs = c->be[s];
    struct strata_error e = {0};
    int rc;
    /* the stage may still be read by an earlier move's unsubmitted write */
    if (t->stage_side >= 0) {
        struct backend *bp = c->be[t->stage_side];
        if ((rc = bp->ops->submit(bp->ctx, &e)) || (rc = bp->ops->wait(bp->ctx, &e))) {
            fail(c, rc, &e);
            return;
        }
        t->stage_side = -1;
    }
    if (!t->stage && !(t->stage = malloc((size_t)t->base.n_rows * (size_t)t->base.n_cols * 4))) {
        fail(c, STRATA_E_NOMEM, NULL);
        return;
    }
    int64_t rows = c->n_tok < t->base.n_rows ? c->n_tok : t->base.n_rows;
    if (rows < 1)
        rows = t->base.n_rows;
    bo->ops->tensor_read(bo->ctx, t->t[o], 0, t->stage, rows);
    if ((rc = bo->ops->submit(bo->ctx, &e)) || (rc = bo->ops->wait(bo->ctx, &e))) {
        fail(c, rc, &e);
        return;
    }
    bs->ops->tensor_write(bs->ctx, t->t[s], 0, t->stage, rows);
    t->stage_side = s;
    t->valid |= 1u << s;
}

static void wrote(int s, const struct backend_tensor *bt) {
    if (bt)
        ((struct split_tensor *)bt)->valid = 1u << s;
}

/* The side of an op with weight w (NULL or on both: the last op's). */
static int side_of(struct split_ctx *c, const struct backend_weight *w) {
    if (w && w->side != SIDE_BOTH)
        c->cur = w->side;
    return c->cur;
}

static int layer_side(struct split_ctx *c, int layer) {
    c->cur = layer < c->n_lo ? SIDE_LO : SIDE_HI;
    return c->cur;
}

static void *scratch(struct split_ctx *c, size_t bytes) {
    if (c->n_scratch == c->cap_scratch) {
        const int cap = c->cap_scratch ? 2 * c->cap_scratch : 16;
        void **p = realloc(c->scratch, (size_t)cap * sizeof *p);
        if (!p)
            return NULL;
        c->scratch = p;
        c->cap_scratch = cap;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p)
        c->scratch[c->n_scratch++] = p;
    return p;
}

static void scratch_clear(struct split_ctx *c) {
    for (int i = 0; i < c->n_scratch; i++)
        free(c->scratch[i]);
    c->n_scratch = 0;
}

static struct backend_mat mat_on(const struct backend_mat *m, int s) {
    struct backend_mat r = *m;
    r.w = ww(m->w, s);
    return r;
}

/* The side of a weight by its layer and use (backend-split.h). The layer
 * travels in the descriptor (in_layer), never parsed out of a name: the
 * model names a layer's tensors without their "blk.N." prefix. */
static int weight_side(const struct split_ctx *c, const struct backend_weight_desc *d) {
    if (d->in_layer)
        return d->layer < c->n_lo ? SIDE_LO : SIDE_HI;
    if (d->use == BACKEND_USE_VEC)
        return SIDE_BOTH;
    return d->use == BACKEND_USE_ROWS ? SIDE_LO : SIDE_HI;
}

/* ---- weights, tensors ------------------------------------------------------------ */

static int sp_supports(void *ctx, enum quant_type type, int64_t n_cols, enum backend_use use) {
    struct split_ctx *c = ctx;
    return c->be[0]->ops->supports(c->be[0]->ctx, type, n_cols, use) &&
           c->be[1]->ops->supports(c->be[1]->ctx, type, n_cols, use);
}

static void sp_weights_free(void *ctx, struct backend_weights *set) {
    struct split_ctx *c = ctx;
    if (!set)
        return;
    for (int s = 1; s >= 0; s--)
        if (set->set[s])
            c->be[s]->ops->weights_free(c->be[s]->ctx, set->set[s]);
    free(set->w);
    free(set);
}

static struct backend_weights *sp_weights_bind(void *ctx, const struct backend_weight_desc *desc,
                                               int n, const struct backend_bind_params *params,
                                               struct backend_weight **out,
                                               struct backend_bind_info *info,
                                               struct strata_error *err) {
    struct split_ctx *c = ctx;
    struct backend_weights *set = calloc(1, sizeof *set);
    struct backend_weight_desc *sub = calloc((size_t)(n > 0 ? n : 1), sizeof *sub);
    struct backend_weight **h = calloc((size_t)(n > 0 ? n : 1), sizeof *h);
    int *idx = calloc((size_t)(n > 0 ? n : 1), sizeof *idx);
    if (set)
        set->w = calloc((size_t)(n > 0 ? n : 1), sizeof *set->w);
    if (!set || !set->w || !sub || !h || !idx) {
        strata_error_set(err, STRATA_E_NOMEM, "backend split: out of memory binding weights");
        goto fail;
    }
    if (info)
        memset(info, 0, sizeof *info);
    for (int i = 0; i < n; i++)
        set->w[i].side = weight_side(c, &desc[i]);
    for (int s = 0; s < 2; s++) { /* lo first: a device out of memory fails before the copy */
        int m = 0;
        for (int i = 0; i < n; i++)
            if (set->w[i].side == s || set->w[i].side == SIDE_BOTH) {
                sub[m] = desc[i];
                idx[m++] = i;
            }
        if (m == 0)
            continue;
        struct backend_bind_info bi = {0};
        struct backend *b = c->be[s];
        if (!(set->set[s] = b->ops->weights_bind(b->ctx, sub, m, params, h, &bi, err))) {
            strata_error_prefix(err, s == SIDE_LO ? "split (lo side)" : "split (hi side)");
            goto fail;
        }
        for (int j = 0; j < m; j++)
            set->w[idx[j]].w[s] = h[j];
        if (info) {
            info->copied_bytes += bi.copied_bytes;
            info->packed_bytes += bi.packed_bytes;
        }
    }
    for (int i = 0; i < n; i++)
        out[i] = &set->w[i];
    free(sub), free(h), free(idx);
    return set;
fail:
    free(sub), free(h), free(idx);
    sp_weights_free(c, set);
    return NULL;
}

static void sp_tensor_free(void *ctx, struct backend_tensor *bt) {
    struct split_ctx *c = ctx;
    struct split_tensor *t = (struct split_tensor *)bt;
    if (!t)
        return;
    for (int s = 1; s >= 0; s--)
        if (t->t[s])
            c->be[s]->ops->tensor_free(c->be[s]->ctx, t->t[s]);
    free(t->stage);
    free(t);
}

static struct backend_tensor *sp_tensor_alloc(void *ctx, enum backend_dtype dtype, int64_t n_rows,
                                              int64_t n_cols, struct strata_error *err) {
    struct split_ctx *c = ctx;
    struct split_tensor *t = calloc(1, sizeof *t);
    if (!t) {
        strata_error_set(err, STRATA_E_NOMEM, "backend split: out of memory for a tensor");
        return NULL;
    }
    t->base = (struct backend_tensor){dtype, n_rows, n_cols};
    t->valid = 3u; /* zeroed on both */
    t->stage_side = -1;
    for (int s = 0; s < 2; s++)
        if (!(t->t[s] = c->be[s]->ops->tensor_alloc(c->be[s]->ctx, dtype, n_rows, n_cols, err))) {
            sp_tensor_free(c, &t->base);
            return NULL;
        }
    return &t->base;
}

/* ---- the KV store: every block on both sides ---------------------------------- */

static int skv_block_alloc(void *ctx, int block, size_t bytes) {
    struct split_kv *k = ctx;
    for (int s = 0; s < 2; s++) {
        const size_t b =
            s == SIDE_LO && k->shaped ? (size_t)k->n_lo * (k->k_layer + k->v_layer) : bytes;
        const int rc = k->part[s]->ops->block_alloc(k->part[s]->ctx, block, b);
        if (rc)
            return rc;
    }
    return 0;
}

static uint16_t *skv_block_host(void *ctx, int block) {
    struct split_kv *k = ctx;
    const struct kv_store *h = k->part[SIDE_HI];
    return h->ops->block_host ? h->ops->block_host(h->ctx, block) : NULL;
}

/* A whole block's byte offset in the lo part (n_lo layers), or SIZE_MAX for
 * rows of a layer the lo part does not hold. kv.c copies one (layer, head)
 * run at a time, so a run never spans layers. */
static size_t skv_lo_off(const struct split_kv *k, size_t off) {
    if (!k->shaped)
        return off;
    const size_t k_all = (size_t)k->n_layer * k->k_layer;
    if (off < k_all)
        return off / k->k_layer < (size_t)k->n_lo ? off : SIZE_MAX;
    const size_t v = off - k_all;
    return v / k->v_layer < (size_t)k->n_lo ? (size_t)k->n_lo * k->k_layer + v : SIZE_MAX;
}

static void skv_block_copy(void *ctx, int dst, int src, size_t off0, size_t n_bytes) {
    struct split_kv *k = ctx;
    for (int s = 0; s < 2; s++) {
        const size_t off = s == SIDE_LO ? skv_lo_off(k, off0) : off0;
        if (off == SIZE_MAX)
            continue;
        const struct kv_store *p = k->part[s];
        if (p->ops->block_copy) {
            p->ops->block_copy(p->ctx, dst, src, off, n_bytes);
        } else {
            uint8_t *d = (uint8_t *)p->ops->block_host(p->ctx, dst);
            const uint8_t *sr = (const uint8_t *)p->ops->block_host(p->ctx, src);
            memcpy(d + off, sr + off, n_bytes);
        }
    }
}

static const struct kv_store *skv_part(void *ctx, const struct kv_store_ops *ops) {
    struct split_kv *k = ctx;
    for (int s = 0; s < 2; s++) {
        const struct kv_store *f = kv_store_find(k->part[s], ops);
        if (f)
            return f;
    }
    return NULL;
}

static void skv_free(void *ctx) {
    struct split_kv *k = ctx;
    if (!k)
        return;
    kv_store_free(k->part[1]);
    kv_store_free(k->part[0]);
    free(k);
}

static const struct kv_store_ops skv_ops = {
    .name = "split",
    .block_alloc = skv_block_alloc,
    .block_host = skv_block_host,
    .block_copy = skv_block_copy,
    .part = skv_part,
    .shape = skv_shape,
    .free = skv_free,
};

static struct kv_store *sp_kv_store_init(void *ctx, struct strata_error *err) {
    struct split_ctx *c = ctx;
    struct kv_store *st = calloc(1, sizeof *st);
    struct split_kv *k = calloc(1, sizeof *k);
    if (!st || !k) {
        strata_error_set(err, STRATA_E_NOMEM, "backend split: out of memory for a KV store");
        goto fail;
    }
    for (int s = 0; s < 2; s++)
        if (!(k->part[s] = c->be[s]->ops->kv_store_init(c->be[s]->ctx, err)))
            goto fail;
    for (int s = 0; s < 2; s++)
        if (!k->part[s]->ops->block_copy && !k->part[s]->ops->block_host) {
            strata_error_set(err, STRATA_E_INVALID, "backend split: KV store %s copies no block",
                             k->part[s]->ops->name);
            goto fail;
        }
    k->n_lo = c->n_lo;
    k->n_layer = c->n_layer;
    *st = (struct kv_store){&skv_ops, k};
    return st;
fail:
    free(st);
    skv_free(k);
    return NULL;
}

/* ---- the step ---------------------------------------------------------------- */

static int sp_begin(void *ctx, const struct backend_step *step, struct strata_error *err) {
    struct split_ctx *c = ctx;
    scratch_clear(c);
    c->rc = 0;
    c->cur = SIDE_LO;
    c->n_tok = step->n_tok;
    for (int s = 0; s < 2; s++) {
        const int rc = c->be[s]->ops->begin(c->be[s]->ctx, step, err);
        if (rc)
            return rc;
    }
    return 0;
}

static int step_rc(struct split_ctx *c, struct strata_error *err) {
    const int rc = c->rc;
    if (rc && err)
        *err = c->err;
    c->rc = 0;
    return rc;
}

static int sp_submit(void *ctx, struct strata_error *err) {
    struct split_ctx *c = ctx;
    if (c->rc)
        return step_rc(c, err);
    for (int s = 0; s < 2; s++) {
        const int rc = c->be[s]->ops->submit(c->be[s]->ctx, err);
        if (rc)
            return rc;
    }
    return 0;
}

static int sp_wait(void *ctx, struct strata_error *err) {
    struct split_ctx *c = ctx;
    int rc = 0;
    for (int s = 0; s < 2; s++) { /* both, whatever the first says */
        struct strata_error e = {0};
        const int r = c->be[s]->ops->wait(c->be[s]->ctx, &e);
        if (r && !rc) {
            rc = r;
            if (err)
                *err = e;
        }
    }
    if (c->rc)
        return step_rc(c, err);
    return rc;
}

/* ---- ops ---------------------------------------------------------------------- */

static void sp_tensor_write(void *ctx, struct backend_tensor *t, int64_t row0, const void *src,
                            int64_t n_rows) {
    struct split_ctx *c = ctx;
    /* the host's rows go to both sides; the model writes every row a step
     * reads before reading it (ids, positions, the cold experts' sum) */
    for (int s = 0; s < 2; s++)
        c->be[s]->ops->tensor_write(c->be[s]->ctx, tt(t, s), row0, src, n_rows);
    ((struct split_tensor *)t)->valid = 3u;
}

static void sp_tensor_read(void *ctx, const struct backend_tensor *t, int64_t row0, void *dst,
                           int64_t n_rows) {
    struct split_ctx *c = ctx;
    const unsigned v = ((const struct split_tensor *)t)->valid;
    const int s = v & (1u << c->cur) ? c->cur : (v & 1u ? SIDE_LO : SIDE_HI);
    c->be[s]->ops->tensor_read(c->be[s]->ctx, tt(t, s), row0, dst, n_rows);
}

static void sp_embed(void *ctx, const struct backend_weight *w, const struct backend_tensor *ids,
                     int n, struct backend_tensor *out) {
    struct split_ctx *c = ctx;
    const int s = side_of(c, w);
    need(c, s, ids);
    c->be[s]->ops->embed(c->be[s]->ctx, ww(w, s), tt(ids, s), n, tt(out, s));
    wrote(s, out);
}

static void sp_copy_rows(void *ctx, const struct backend_tensor *src,
                         const struct backend_tensor *ids, int n, int64_t n_cols,
                         struct backend_tensor *dst) {
    struct split_ctx *c = ctx;
    const int s = c->cur;
    need(c, s, src);
    need(c, s, ids);
    c->be[s]->ops->copy_rows(c->be[s]->ctx, tt(src, s), tt(ids, s), n, n_cols, tt(dst, s));
    wrote(s, dst);
}

static void sp_rmsnorm(void *ctx, const struct backend_tensor *x, const struct backend_weight *w,
                       struct backend_tensor *y, int64_t n_rows, int64_t n_cols, float eps) {
    struct split_ctx *c = ctx;
    const int s = side_of(c, w);
    need(c, s, x);
    c->be[s]->ops->rmsnorm(c->be[s]->ctx, tt(x, s), ww(w, s), tt(y, s), n_rows, n_cols, eps);
    wrote(s, y);
}

static void sp_matmul(void *ctx, const struct backend_tensor *x, int64_t n_rows,
                      const struct backend_mm *jobs, int n_jobs) {
    struct split_ctx *c = ctx;
    const int s = side_of(c, n_jobs > 0 ? jobs[0].w.w : NULL);
    need(c, s, x);
    struct backend_mm j[BACKEND_MM_MAX];
    for (int i = 0; i < n_jobs && i < BACKEND_MM_MAX; i++)
        j[i] = (struct backend_mm){mat_on(&jobs[i].w, s), tt(jobs[i].y, s)};
    c->be[s]->ops->matmul(c->be[s]->ctx, tt(x, s), n_rows, j, n_jobs);
    c->n_mm[s]++;
    for (int i = 0; i < n_jobs; i++)
        wrote(s, jobs[i].y);
}

static void sp_add_bias(void *ctx, struct backend_tensor *y, const struct backend_weight *b,
                        int64_t n_rows, int64_t n_cols) {
    struct split_ctx *c = ctx;
    const int s = side_of(c, b);
    need(c, s, y);
    c->be[s]->ops->add_bias(c->be[s]->ctx, tt(y, s), ww(b, s), n_rows, n_cols);
    wrote(s, y);
}

static void sp_add(void *ctx, struct backend_tensor *x, const struct backend_tensor *y,
                   int64_t n_rows, int64_t n_cols) {
    struct split_ctx *c = ctx;
    const int s = c->cur;
    need(c, s, x);
    need(c, s, y);
    c->be[s]->ops->add(c->be[s]->ctx, tt(x, s), tt(y, s), n_rows, n_cols);
    wrote(s, x);
}

static void sp_rope(void *ctx, struct backend_tensor *x, int n_tok, int n_head, int head_dim,
                    const struct backend_tensor *pos, const struct backend_rope *cfg) {
    struct split_ctx *c = ctx;
    const int s = c->cur;
    need(c, s, x);
    need(c, s, pos);
    struct backend_rope r = *cfg;
    r.freq_factors = ww(cfg->freq_factors, s);
    c->be[s]->ops->rope(c->be[s]->ctx, tt(x, s), n_tok, n_head, head_dim, tt(pos, s), &r);
    wrote(s, x);
}

static void sp_kv_write(void *ctx, struct kv_cache *kv, int layer, const struct backend_tensor *k,
                        const struct backend_tensor *v, const struct backend_tensor *seq,
                        const struct backend_tensor *pos, int n_tok, int n_head_kv, int head_dim_k,
                        int head_dim_v) {
    struct split_ctx *c = ctx;
    const int s = layer_side(c, layer);
    need(c, s, k);
    need(c, s, v);
    need(c, s, seq);
    need(c, s, pos);
    c->be[s]->ops->kv_write(c->be[s]->ctx, kv, layer, tt(k, s), tt(v, s), tt(seq, s), tt(pos, s),
                            n_tok, n_head_kv, head_dim_k, head_dim_v);
}

static void sp_attention(void *ctx, const struct backend_attn *a) {
    struct split_ctx *c = ctx;
    const int s = layer_side(c, a->layer);
    need(c, s, a->q);
    need(c, s, a->seq);
    need(c, s, a->pos);
    struct backend_attn b = *a;
    b.q = tt(a->q, s);
    b.out = tt(a->out, s);
    b.seq = tt(a->seq, s);
    b.pos = tt(a->pos, s);
    c->be[s]->ops->attention(c->be[s]->ctx, &b);
    wrote(s, a->out);
}

static void sp_swiglu(void *ctx, const struct backend_tensor *g, const struct backend_tensor *u,
                      struct backend_tensor *y, int64_t n_rows, int64_t n_cols) {
    struct split_ctx *c = ctx;
    const int s = c->cur;
    need(c, s, g);
    need(c, s, u);
    c->be[s]->ops->swiglu(c->be[s]->ctx, tt(g, s), tt(u, s), tt(y, s), n_rows, n_cols);
    wrote(s, y);
}

static void sp_moe_route(void *ctx, const struct backend_route *r) {
    struct split_ctx *c = ctx;
    const int s = c->cur;
    need(c, s, r->logits);
    struct backend_route q = *r;
    q.logits = tt(r->logits, s);
    q.sel = tt(r->sel, s);
    q.sel_w = tt(r->sel_w, s);
    c->be[s]->ops->moe_route(c->be[s]->ctx, &q);
    wrote(s, r->logits);
    wrote(s, r->sel);
    wrote(s, r->sel_w);
}

static void sp_moe_ffn(void *ctx, const struct backend_moe *m) {
    struct split_ctx *c = ctx;
    int s = c->cur;
    for (int e = 0; e < m->n_expert; e++) /* the side holding the named experts */
        if (m->experts[e].gate.w) {
            s = side_of(c, m->experts[e].gate.w);
            break;
        }
    need(c, s, m->x);
    need(c, s, m->sel);
    need(c, s, m->sel_w);
    c->n_mm[s]++;
    if (m->accumulate)
        need(c, s, m->out);
    struct backend_expert *tab = scratch(c, (size_t)m->n_expert * sizeof *tab);
    if (!tab) {
        fail(c, STRATA_E_NOMEM, NULL);
        return;
    }
    for (int e = 0; e < m->n_expert; e++)
        tab[e] =
            (struct backend_expert){mat_on(&m->experts[e].gate, s), mat_on(&m->experts[e].up, s),
                                    mat_on(&m->experts[e].down, s)};
    struct backend_moe q = *m;
    q.x = tt(m->x, s);
    q.sel = tt(m->sel, s);
    q.sel_w = tt(m->sel_w, s);
    q.out = tt(m->out, s);
    q.experts = tab;
    c->be[s]->ops->moe_ffn(c->be[s]->ctx, &q);
    wrote(s, m->out);
}

static void sp_add_gated(void *ctx, struct backend_tensor *out, const struct backend_tensor *sv,
                         const struct backend_tensor *gate, int64_t n_rows, int64_t n_cols) {
    struct split_ctx *c = ctx;
    const int s = c->cur;
    need(c, s, out);
    need(c, s, sv);
    need(c, s, gate);
    c->be[s]->ops->add_gated(c->be[s]->ctx, tt(out, s), tt(sv, s), tt(gate, s), n_rows, n_cols);
    wrote(s, out);
}

static void sp_free(void *ctx) {
    struct split_ctx *c = ctx;
    if (!c)
        return;
    scratch_clear(c);
    free(c->scratch);
    backend_free(c->be[1]);
    backend_free(c->be[0]);
    free(c);
}

static const struct backend_ops split_ops = {
    .name = "split",
    .caps = 0, /* per instance (split_ctx.ops) */
    .supports = sp_supports,
    .weights_bind = sp_weights_bind,
    .weights_free = sp_weights_free,
    .weight_host = NULL,
    .tensor_alloc = sp_tensor_alloc,
    .tensor_free = sp_tensor_free,
    .kv_store_init = sp_kv_store_init,
    .begin = sp_begin,
    .submit = sp_submit,
    .wait = sp_wait,
    .tensor_write = sp_tensor_write,
    .tensor_read = sp_tensor_read,
    .embed = sp_embed,
    .copy_rows = sp_copy_rows,
    .rmsnorm = sp_rmsnorm,
    .matmul = sp_matmul,
    .add_bias = sp_add_bias,
    .add = sp_add,
    .rope = sp_rope,
    .kv_write = sp_kv_write,
    .attention = sp_attention,
    .swiglu = sp_swiglu,
    .moe_route = sp_moe_route,
    .moe_ffn = sp_moe_ffn,
    .add_gated = sp_add_gated,
    .free = sp_free,
};

struct backend *backend_split_init(struct backend *lo, struct backend *hi, int n_lo, int n_layer,
                                   struct strata_error *err) {
    struct backend *be = NULL;
    struct split_ctx *c = NULL;
    if (!lo || !hi || n_lo <= 0 || n_lo >= n_layer) {
        strata_error_set(err, STRATA_E_INVALID, "backend split: %d of %d layers on the first side",
                         n_lo, n_layer);
        goto fail;
    }
    if (!(be = calloc(1, sizeof *be)) || !(c = calloc(1, sizeof *c))) {
        strata_error_set(err, STRATA_E_NOMEM, "backend split: out of memory");
        goto fail;
    }
    /* the table lives in ctx: caps are what both sides have */
    c->ops = split_ops;
    c->ops.caps = lo->ops->caps & hi->ops->caps;
    c->ops.sample = NULL; /* the logits come from hi (the CPU): the host samples */
    c->be[SIDE_LO] = lo;
    c->be[SIDE_HI] = hi;
    c->n_lo = n_lo;
    c->n_layer = n_layer;
    be->ops = &c->ops;
    be->ctx = c;
    return be;
fail:
    free(c);
    free(be);
    backend_free(hi);
    backend_free(lo);
    return NULL;
}

static struct split_ctx *split_of(const struct backend *be) {
    return be && be->ops && be->ops->free == sp_free ? be->ctx : NULL;
}

struct backend *backend_split_lo(const struct backend *be) {
    struct split_ctx *c = split_of(be);
    return c ? c->be[SIDE_LO] : NULL;
}

struct backend *backend_split_hi(const struct backend *be) {
    struct split_ctx *c = split_of(be);
    return c ? c->be[SIDE_HI] : NULL;
}

void backend_split_counts(const struct backend *be, uint64_t *n_mm_lo, uint64_t *n_mm_hi) {
    struct split_ctx *c = split_of(be);
    *n_mm_lo = c ? c->n_mm[SIDE_LO] : 0;
    *n_mm_hi = c ? c->n_mm[SIDE_HI] : 0;
}
