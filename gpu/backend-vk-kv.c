/* gpu/backend-vk-kv.c: the KV store of the Vulkan backend (backend-vk.h):
 * block memory in up to VKOPS_KV_PIECES device buffers of whole blocks,
 * block b in piece b / blocks_per_piece at byte (b % blocks_per_piece) *
 * block_bytes (gpu/vk-ops.h's layout). A piece starts at 16 blocks and
 * doubles (a synchronous copy of what it held) when a block past its end
 * is first used, up to blocks_per_piece: a tiny test's cache stays small,
 * a server's fills whole 4 GiB bindings. Past BVK_KV_JUMP_BYTES a piece
 * takes its whole size at once, so growing needs at most that much beside
 * the final piece (4 GiB + 256 MiB, not 2 + 4 GiB), and a pool sized to the
 * device's memory still fits while it grows. block_alloc and block_copy run
 * between steps (kv_seq_reserve_pos before begin), so no recording is
 * open. */
#include <stdlib.h>
#include <string.h>

#include "gpu/backend-vk-impl.h"

#define BVK_KV_FIRST_BLOCKS 2            /* a piece's first size */
#define BVK_KV_JUMP_BYTES (256ull << 20) /* doubling past this: the whole piece */

struct bvk_kv {
    struct bvk_ctx *c;    /* borrowed: the backend outlives its stores */
    uint64_t block_bytes; /* 0 until the first block_alloc */
    int blocks_per_piece;
    struct vk_buf *piece[VKOPS_KV_PIECES]; /* owned */
    int cap[VKOPS_KV_PIECES];              /* blocks each piece holds now */
};

static int bvk_kv_block_alloc(void *ctx, int block, size_t bytes) {
    struct bvk_kv *s = ctx;
    struct bvk_ctx *c = s->c;
    const struct vk_dev_info *in = vk_dev_info(c->dev);
    if (s->block_bytes == 0) {
        /* whole blocks within one binding and one allocation */
        uint64_t lim = in->max_storage_range < in->max_buffer_bytes ? in->max_storage_range
                                                                    : in->max_buffer_bytes;
        if (c->params.kv_piece_bytes && c->params.kv_piece_bytes < lim) /* tests: >= 1 block */
            lim = c->params.kv_piece_bytes > bytes ? c->params.kv_piece_bytes : bytes;
        if (bytes == 0 || bytes > lim)
            return STRATA_E_NOMEM;
        s->block_bytes = bytes;
        uint64_t bpp = lim / bytes;
        s->blocks_per_piece = bpp > (1u << 30) ? (1 << 30) : (int)bpp;
    }
    STRATA_ASSERT(bytes == s->block_bytes && block >= 0);
    const int p = block / s->blocks_per_piece, in_piece = block % s->blocks_per_piece;
    if (p >= VKOPS_KV_PIECES)
        return STRATA_E_NOMEM; /* the pool spans more than VKOPS_KV_PIECES bindings */
    if (in_piece < s->cap[p])
        return 0;
    int cap = s->cap[p] ? s->cap[p] : BVK_KV_FIRST_BLOCKS;
    while (cap <= in_piece)
        cap *= 2;
    if ((uint64_t)cap * s->block_bytes > BVK_KV_JUMP_BYTES)
        cap = s->blocks_per_piece;
    if (cap > s->blocks_per_piece)
        cap = s->blocks_per_piece;
    struct vk_buf *nb = vk_buf_alloc(c->dev, (uint64_t)cap * s->block_bytes, VK_MEM_DEVICE, NULL);
    if (!nb)
        return STRATA_E_NOMEM;
    if (s->piece[p] &&
        vk_buf_copy(c->dev, s->piece[p], 0, nb, 0, (uint64_t)s->cap[p] * s->block_bytes, NULL)) {
        vk_buf_free(c->dev, nb);
        return STRATA_E_NOMEM;
    }
    if (s->piece[p]) {
        c->kv_bytes -= vk_buf_size(s->piece[p]);
        vk_buf_free(c->dev, s->piece[p]);
    }
    c->kv_bytes += vk_buf_size(nb);
    s->piece[p] = nb;
    s->cap[p] = cap;
    return 0;
}

static void bvk_kv_block_copy(void *ctx, int dst, int src, size_t off, size_t n_bytes) {
    struct bvk_kv *s = ctx;
    const int bpp = s->blocks_per_piece;
    struct vk_buf *sb = s->piece[src / bpp], *db = s->piece[dst / bpp];
    STRATA_ASSERT(sb && db);
    const uint64_t so = (uint64_t)(src % bpp) * s->block_bytes + off;
    const uint64_t dof = (uint64_t)(dst % bpp) * s->block_bytes + off;
    /* a lost device fails the next step's wait; nothing else to report here */
    (void)vk_buf_copy(s->c->dev, sb, so, db, dof, n_bytes, NULL);
}

static void bvk_kv_free(void *ctx) {
    struct bvk_kv *s = ctx;
    if (!s)
        return;
    for (int p = 0; p < VKOPS_KV_PIECES; p++) {
        if (!s->piece[p])
            continue;
        s->c->kv_bytes -= vk_buf_size(s->piece[p]);
        vk_buf_free(s->c->dev, s->piece[p]);
    }
    free(s);
}

static const struct kv_store_ops bvk_kv_ops = {
    .name = "vulkan",
    .block_alloc = bvk_kv_block_alloc,
    .block_host = NULL,
    .block_copy = bvk_kv_block_copy,
    .free = bvk_kv_free,
};

struct kv_store *bvk_kv_store_init(void *ctx, struct strata_error *err) {
    struct kv_store *st = calloc(1, sizeof *st);
    struct bvk_kv *s = calloc(1, sizeof *s);
    if (!st || !s) {
        free(st);
        free(s);
        strata_error_set(err, STRATA_E_NOMEM, "backend vulkan: out of memory for a KV store");
        return NULL;
    }
    s->c = ctx;
    st->ops = &bvk_kv_ops;
    st->ctx = s;
    return st;
}

int bvk_kv_view(struct bvk_ctx *c, struct kv_cache *kv, struct vkops_kv *out,
                struct strata_error *err) {
    /* this device's store, or its part of a split backend's (backend-split.h) */
    const struct kv_store *all = kv_get_store(kv), *st = kv_store_find(all, &bvk_kv_ops);
    if (!st || ((struct bvk_kv *)st->ctx)->c != c)
        return strata_error_set(err, STRATA_E_INVALID,
                                "backend vulkan: the KV cache's store (%s) is not this device's",
                                all ? all->ops->name : "none");
    const struct bvk_kv *s = st->ctx;
    const struct kv_params *kp = kv_get_params(kv);
    memset(out, 0, sizeof *out);
    const struct vk_buf *any = NULL;
    for (int p = 0; p < VKOPS_KV_PIECES; p++)
        if (s->piece[p]) {
            any = any ? any : s->piece[p];
            out->n_piece = p + 1;
        }
    if (!any)
        return strata_error_set(err, STRATA_E_INVALID, "backend vulkan: the KV cache has no block");
    for (int p = 0; p < out->n_piece; p++) /* a piece no block uses yet: any buffer binds */
        out->pool[p] = (struct vk_bind){s->piece[p] ? s->piece[p] : any, 0, 0};
    out->blocks_per_piece = s->blocks_per_piece;
    /* a split's part holds the first layers only (backend-split.h): as many
     * as its blocks have room for, in the same layout */
    const uint64_t per_layer = (uint64_t)kp->n_block * (kp->n_embd_k + kp->n_embd_v) * 2;
    if (s->block_bytes % per_layer || s->block_bytes > kv_block_bytes(kp))
        return strata_error_set(err, STRATA_E_INVALID,
                                "backend vulkan: KV blocks of %llu bytes for %llu a layer",
                                (unsigned long long)s->block_bytes, (unsigned long long)per_layer);
    out->block_bytes = s->block_bytes;
    out->n_layer = (int)(s->block_bytes / per_layer);
    out->n_block = kp->n_block;
    out->n_part = kp->n_head_kv;
    out->n_embd_k = kp->n_embd_k;
    out->n_embd_v = kp->n_embd_v;
    return 0;
}
