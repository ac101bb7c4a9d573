/* gpu/backend-vk-impl.h: the Vulkan backend's internals shared by
 * gpu/backend-vk.c (tensors, the step, the ops), gpu/backend-vk-fuse.c (the
 * ops with fused forms), gpu/backend-vk-weights.c (weights_bind) and
 * gpu/backend-vk-kv.c (the KV store). Callers use
 * gpu/backend-vk.h.
 *
 * Threading: the forward thread only (backend.h).
 */
#ifndef STRATA_BACKEND_VK_IMPL_H
#define STRATA_BACKEND_VK_IMPL_H

#include "gpu/backend-vk.h"
#include "gpu/vk-mm.h"
#include "gpu/vk-ops.h"
#include "gpu/vk.h"

#define BVK_STAGE_CHUNK (4ull << 20) /* staging chunk for tensor writes and reads: 4 MiB */

/* A tensor: one device buffer of n_rows * n_cols * 4 bytes. */
struct bvk_tensor {
    struct backend_tensor t; /* first: the seam's view */
    struct vk_buf *buf;      /* owned */
};

/* One bound weight. */
struct bvk_weight {
    enum backend_use use;
    enum quant_type type;
    int64_t n_rows, n_cols, n_expert; /* n_expert >= 1 */
    int64_t rows_per;                 /* rows of one expert (n_rows / n_expert) */
    size_t row_bytes;
    int n_piece;
    struct vk_wpiece *piece;  /* (n_piece) owned: whole rows (whole experts) each */
    struct vkops_piece *rows; /* (n_piece) the same pieces as vkops binds */
    struct vk_wmat mat;       /* the matrix kernels' view over piece */
};

/* The buffers one weights_bind call made, and its handles. */
struct backend_weights {
    int n_buf;
    struct vk_buf **buf; /* (n_buf) owned */
    int n_w;
    struct bvk_weight *w; /* (n_w) owned: the handles */
};

/* A host-visible staging chunk of this step's writes and reads. */
struct bvk_chunk {
    struct vk_buf *buf;
    uint64_t used;
};

/* A tensor_read whose bytes land at a wait. */
struct bvk_read {
    void *dst;
    const void *src; /* in a staging chunk */
    size_t n;
    uint64_t sub; /* the submit that runs its copy */
};

struct bvk_kv; /* the KV store (backend-vk-kv.c) */

/* be_moe_sum.comp's push block: n_tok @0, k @4, n_embd @8, accumulate @12,
 * resid @16 */
struct bvk_moe_sum_push {
    uint32_t n_tok, k, n_embd, accumulate, resid;
};
_Static_assert(sizeof(struct bvk_moe_sum_push) == 20, "be_moe_sum push constants");

/* An op held back because the next one may complete a fused pattern
 * (backend-vk-fuse.c); the fields of its kind are set. */
enum bvk_pend_kind {
    BVK_PEND_NORM = 1, /* rmsnorm */
    BVK_PEND_MATMUL,   /* matmul (a gate+up pair, or one job) */
    BVK_PEND_ROPE,     /* rope */
    BVK_PEND_MOE_SUM,  /* moe_ffn's weighted sum (its matmuls are recorded) */
    BVK_PEND_ACC,      /* matmul (one job, one token) and the add into mm.res after it */
    BVK_PEND_ROPE_KV,  /* the norms, ropes and KV write of rk (vkops_rope_kv), for the
                          attention after them (BACKEND_VK_FUSE_ATTN) */
};
struct bvk_pend {
    enum bvk_pend_kind kind;
    struct {
        const struct backend_tensor *x;
        const struct backend_weight *w;
        struct backend_tensor *y;
        int64_t n_rows, n_cols;
        float eps;
    } norm;
    struct {
        const struct backend_tensor *x;
        int64_t n_rows;
        struct backend_mm jobs[BACKEND_MM_MAX];
        int n_jobs;
        struct backend_tensor *res; /* BVK_PEND_ACC: the residual the product adds into */
    } mm;
    struct {
        struct backend_tensor *x;
        const struct backend_tensor *pos;
        int n_tok, n_head, head_dim;
        struct backend_rope cfg;
    } rope;
    struct {
        const struct backend_tensor *x, *sel_w;
        struct backend_tensor *out;
        int n_tok, k;
        int64_t n_embd;
        bool accumulate;
    } moe;
    struct {
        struct vkops_rope_kv a;
        const struct backend_tensor *q; /* the unroped q the attention must read */
    } rk;
};
#define BVK_PEND_MAX 4 /* q-norm, k-norm, rope q, rope k */

struct bvk_ctx {
    struct vk_dev *dev;
    struct vkmm *mm;
    struct vkops *ops;
    struct backend_vk_params params;
    struct vk_pipe *moe_sum; /* the routed experts' weighted sum (be_moe_sum.comp) */
    unsigned fuse;           /* BACKEND_VK_FUSE_* of params */
    /* the step */
    bool in_step;
    int err_code;      /* first recording error (STRATA_E_*), reported at submit */
    char err_msg[256]; /* its message */
    int io_group;      /* an open barrier group of consecutive writes (1) or reads (2) */
    /* ops held back for a fusion with the next (backend-vk-fuse.c); any op
     * that completes no pattern records them first, as they were asked */
    struct bvk_pend pend[BVK_PEND_MAX];
    int n_pend;
    uint64_t n_sub;           /* submits so far */
    uint64_t n_waited;        /* submits whose reads have landed */
    struct bvk_chunk *chunks; /* (n_chunk) staging, reset at begin */
    int n_chunk, cap_chunk, cur_chunk;
    struct bvk_read *reads; /* (n_read) pending reads */
    int n_read, cap_read;
    /* the KV view of the step (begin), and its block table */
    struct kv_cache *kv;
    struct vkops_kv kvv;
    struct vk_buf *table; /* I32 (n_seq_max, table_stride) */
    int32_t *h_table;     /* host mirror of one row */
    int table_seqs, table_stride;
    int n_kv_max;
    bool one_per_seq; /* no sequence has two tokens in the step (BACKEND_VK_FUSE_ATTN) */
    /* scratch grown on demand; the old ones are freed after the next wait */
    struct vk_buf *attn_scratch, *moe_g, *moe_u, *moe_d;
    /* BACKEND_VK_FUSE_Q8: the q8 copy of the last norm's output (q8_src),
     * valid while the device's dispatch count is q8_n (bvk_q8_valid) */
    struct vk_buf *xq8;
    const struct backend_tensor *q8_src;
    uint64_t q8_n;
    int64_t q8_rows;         /* rows of q8_src the copy holds (BACKEND_VK_FUSE_TQ8: a prefill's) */
    struct vk_buf **retired; /* (n_retired) freed at the next wait */
    int n_retired, cap_retired;
    uint64_t weight_bytes, tensor_bytes, kv_bytes; /* device memory held now */
};

static inline struct bvk_tensor *bvk_t(const struct backend_tensor *t) {
    return (struct bvk_tensor *)t;
}
static inline const struct bvk_weight *bvk_w(const struct backend_weight *w) {
    return (const struct bvk_weight *)w;
}
static inline struct vk_bind bvk_bind(const struct backend_tensor *t) {
    return (struct vk_bind){bvk_t(t)->buf, 0, 0};
}
/* A VEC weight's one piece as a binding. */
static inline struct vk_bind bvk_vec_bind(const struct backend_weight *bw) {
    const struct bvk_weight *w = bvk_w(bw);
    STRATA_ASSERT(w->use == BACKEND_USE_VEC && w->n_piece == 1);
    return w->rows[0].data;
}
/* Asserts that a (rows, cols) view fits the tensor: a caller bug otherwise. */
static inline void bvk_fits(const struct backend_tensor *t, int64_t n_rows, int64_t n_cols) {
    STRATA_ASSERT(t && n_rows >= 0 && n_cols >= 0 && n_rows * n_cols <= t->n_rows * t->n_cols);
}

/* Records the first error of the step (reported at submit). */
void bvk_fail(struct bvk_ctx *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Records the held-back ops first, then as bvk_rec_raw. */
bool bvk_rec(struct bvk_ctx *c);
/* Opens a recording when none is (after a submit inside the step); false
 * when recording cannot go on (the error is recorded). */
bool bvk_rec_raw(struct bvk_ctx *c);
/* Whether kv is the step's KV cache (else the step fails). */
bool bvk_kv_is_step(struct bvk_ctx *c, const struct kv_cache *kv);

/* the ops with fused forms and the held-back ops (backend-vk-fuse.c) */
void bvk_pend_flush(struct bvk_ctx *c); /* records the held ops as asked */
/* The held rope + KV write for attention a (BACKEND_VK_FUSE_ATTN), taken
 * off the list into *rk: false when none is held for it. */
bool bvk_take_rope_kv(struct bvk_ctx *c, const struct backend_attn *a, struct vkops_rope_kv *rk);
void bvk_rmsnorm(void *ctx, const struct backend_tensor *x, const struct backend_weight *w,
                 struct backend_tensor *y, int64_t n_rows, int64_t n_cols, float eps);
void bvk_matmul(void *ctx, const struct backend_tensor *x, int64_t n_rows,
                const struct backend_mm *jobs, int n_jobs);
void bvk_add(void *ctx, struct backend_tensor *x, const struct backend_tensor *y, int64_t n_rows,
             int64_t n_cols);
void bvk_rope(void *ctx, struct backend_tensor *x, int n_tok, int n_head, int head_dim,
              const struct backend_tensor *pos, const struct backend_rope *cfg);
void bvk_kv_write(void *ctx, struct kv_cache *kv, int layer, const struct backend_tensor *k,
                  const struct backend_tensor *v, const struct backend_tensor *seq,
                  const struct backend_tensor *pos, int n_tok, int n_head_kv, int head_dim_k,
                  int head_dim_v);
void bvk_swiglu(void *ctx, const struct backend_tensor *g, const struct backend_tensor *u,
                struct backend_tensor *y, int64_t n_rows, int64_t n_cols);
/* moe_ffn's weighted sum of c->moe_d into m->out (held: an add of m->out
 * into the residual next is fused into it). */
void bvk_moe_sum(struct bvk_ctx *c, const struct backend_moe *m);
/* Makes *b at least n bytes of device memory (the old buffer retired). */
bool bvk_scratch(struct bvk_ctx *c, struct vk_buf **b, uint64_t n);
/* BACKEND_VK_FUSE_Q8 (backend-vk-fuse.c): whether c->xq8 holds the q8 copy
 * of x (NULL: of the last norm's output, whichever it was) because nothing
 * was recorded since the norm but ops that keep it (bvk_q8_keep after
 * them: matmuls that do not write x, the routing); bvk_q8_keep marks what
 * was just recorded as such. */
bool bvk_q8_valid(const struct bvk_ctx *c, const struct backend_tensor *x);
void bvk_q8_keep(struct bvk_ctx *c);
/* BACKEND_VK_FUSE_TQ8: c->xq8 holds x's q8 blocks (n_rows rows) after it:
 * the norm's copy, or quantized now (one dispatch, its barrier after it);
 * false where x cannot be. */
bool bvk_tq8_x(struct bvk_ctx *c, const struct backend_tensor *x, int64_t n_rows, int64_t n_cols);
/* BACKEND_VK_FUSE_XQ: whether a matvec of w over n_rows rows of f32 x runs
 * as vkmm_matmul_xq (one row, 32 | columns, an integer-dot type). */
bool bvk_xq_ok(const struct bvk_ctx *c, const struct bvk_weight *w, int64_t n_rows);

/* weights (backend-vk-weights.c) */
int bvk_supports(void *ctx, enum quant_type type, int64_t n_cols, enum backend_use use);
struct backend_weights *bvk_weights_bind(void *ctx, const struct backend_weight_desc *desc, int n,
                                         const struct backend_bind_params *params,
                                         struct backend_weight **out,
                                         struct backend_bind_info *info, struct strata_error *err);
void bvk_weights_free(void *ctx, struct backend_weights *set);

/* KV store (backend-vk-kv.c) */
struct kv_store *bvk_kv_store_init(void *ctx, struct strata_error *err);
/* The store's view for vkops (pool pieces, geometry; table left to the
 * caller), or STRATA_E_INVALID when kv's store is not this backend's. */
int bvk_kv_view(struct bvk_ctx *c, struct kv_cache *kv, struct vkops_kv *out,
                struct strata_error *err);

#endif
