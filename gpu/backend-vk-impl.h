/* gpu/backend-vk-impl.h: the Vulkan backend's internals shared by
 * gpu/backend-vk.c (tensors, the step, the ops), gpu/backend-vk-weights.c
 * (weights_bind) and gpu/backend-vk-kv.c (the KV store). Callers use
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

struct bvk_ctx {
    struct vk_dev *dev;
    struct vkmm *mm;
    struct vkops *ops;
    struct backend_vk_params params;
    struct vk_pipe *moe_sum; /* the routed experts' weighted sum (be_moe_sum.comp) */
    /* the step */
    bool in_step;
    int err_code;      /* first recording error (STRATA_E_*), reported at submit */
    char err_msg[256]; /* its message */
    int io_group;      /* an open barrier group of consecutive writes (1) or reads (2) */
    /* a two-job matmul (gate, up) held back: a swiglu over its outputs next
     * makes it one fused dispatch (vkmm_matmul_glu); any other op records it */
    bool pend_on;
    const struct backend_tensor *pend_x;
    int64_t pend_rows;
    struct backend_mm pend_jobs[2];
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
    /* scratch grown on demand; the old ones are freed after the next wait */
    struct vk_buf *attn_scratch, *moe_g, *moe_u, *moe_d;
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

/* Records the first error of the step (reported at submit). */
void bvk_fail(struct bvk_ctx *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Opens a recording when none is (after a submit inside the step); false
 * when recording cannot go on (the error is recorded). */
bool bvk_rec(struct bvk_ctx *c);
/* Makes *b at least n bytes of device memory (the old buffer retired). */
bool bvk_scratch(struct bvk_ctx *c, struct vk_buf **b, uint64_t n);

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
