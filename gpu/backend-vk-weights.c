/* gpu/backend-vk-weights.c: weights_bind of the Vulkan backend
 * (backend-vk.h). Every weight is cut into pieces of whole rows (whole
 * experts of a stack) of at most one binding (max_storage_range), the
 * pieces are placed one after the other in a few large device buffers
 * (BVK_ARENA_BYTES each at most, offsets aligned to BVK_ALIGN), and
 * uploaded through the runtime's staging buffer. Fewer buffers than
 * weights: drivers cap allocations (4096 on NVIDIA's maxMemoryAllocationCount)
 * and a 48-layer MoE has ~500 weights. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gpu/backend-vk-impl.h"

#define BVK_ARENA_BYTES (1ull << 30) /* one weight buffer: 1 GiB at most */
#define BVK_ALIGN 256                /* piece offsets: >= every minStorageBufferOffsetAlignment */

int bvk_supports(void *ctx, enum quant_type type, int64_t n_cols, enum backend_use use) {
    switch (use) {
    case BACKEND_USE_MATMUL:
        return vkmm_supports(type, n_cols);
    case BACKEND_USE_ROWS:
        return vkops_embed_supports(type, n_cols);
    case BACKEND_USE_VEC:
        return type == QUANT_F32;
    }
    return 0;
}

/* Where one piece goes: arena buffer `chunk` at byte `off`. */
struct bvk_place {
    int chunk;
    uint64_t off;
};

void bvk_weights_free(void *ctx, struct backend_weights *set) {
    struct bvk_ctx *c = ctx;
    if (!set)
        return;
    for (int i = 0; i < set->n_w; i++) {
        free(set->w[i].piece);
        free(set->w[i].rows);
    }
    free(set->w);
    for (int i = 0; i < set->n_buf; i++) {
        c->weight_bytes -= vk_buf_size(set->buf[i]);
        vk_buf_free(c->dev, set->buf[i]);
    }
    free(set->buf);
    free(set);
}

/* The file pages fully inside [p, p + n) dropped from the mapping. */
static void drop_pages(const void *p, size_t n) {
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + pg - 1) & ~(pg - 1), b = ((uintptr_t)p + n) & ~(pg - 1);
    if (b > a)
        (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

struct backend_weights *bvk_weights_bind(void *ctx, const struct backend_weight_desc *desc, int n,
                                         const struct backend_bind_params *params,
                                         struct backend_weight **out,
                                         struct backend_bind_info *info, struct strata_error *err) {
    struct bvk_ctx *c = ctx;
    const struct vk_dev_info *in = vk_dev_info(c->dev);
    uint64_t dev_lim =
        in->max_storage_range < in->max_buffer_bytes ? in->max_storage_range : in->max_buffer_bytes;
    dev_lim &= ~(uint64_t)(BVK_ALIGN - 1);
    uint64_t lim = dev_lim;
    if (c->params.piece_bytes && c->params.piece_bytes < lim) /* tests */
        lim = c->params.piece_bytes > BVK_ALIGN ? c->params.piece_bytes : BVK_ALIGN;
    const uint64_t arena =
        in->max_buffer_bytes < BVK_ARENA_BYTES ? in->max_buffer_bytes : BVK_ARENA_BYTES;
    struct backend_weights *set = calloc(1, sizeof *set);
    int *alias = calloc((size_t)(n > 0 ? n : 1), sizeof *alias);
    struct bvk_place **place = calloc((size_t)(n > 0 ? n : 1), sizeof *place);
    uint64_t *chunk_used = NULL;
    int n_chunk = 0, cap_chunk = 0;
    uint64_t total = 0, done = 0;
    if (!set || !alias || !place)
        goto nomem;
    set->w = calloc((size_t)(n > 0 ? n : 1), sizeof *set->w);
    if (!set->w)
        goto nomem;
    set->n_w = n;

    /* pass 1: pieces and their places */
    for (int i = 0; i < n; i++) {
        const struct backend_weight_desc *d = &desc[i];
        const struct backend_host_mat *h = &d->host;
        struct bvk_weight *w = &set->w[i];
        alias[i] = -1;
        if (h->layout != BACKEND_LAYOUT_ROWS || h->n_rows < 1 || h->n_cols < 1 ||
            h->row_bytes != quant_row_size(h->type, h->n_cols) ||
            !bvk_supports(c, h->type, h->n_cols, d->use)) {
            strata_error_set(err, STRATA_E_UNSUPPORTED,
                             "backend vulkan: weight %s: %s, %lld x %lld not supported",
                             d->name ? d->name : "?", quant_type_name(h->type),
                             (long long)h->n_rows, (long long)h->n_cols);
            goto fail;
        }
        w->use = d->use;
        w->type = h->type;
        w->n_rows = h->n_rows;
        w->n_cols = h->n_cols;
        w->row_bytes = h->row_bytes;
        w->n_expert = d->n_expert > 1 ? d->n_expert : 1;
        if (h->n_rows % w->n_expert) {
            strata_error_set(err, STRATA_E_INVALID,
                             "backend vulkan: weight %s: %lld rows are not %lld experts",
                             d->name ? d->name : "?", (long long)h->n_rows, (long long)w->n_expert);
            goto fail;
        }
        w->rows_per = h->n_rows / w->n_expert;
        if (d->use == BACKEND_USE_MATMUL && vkmm_prepare(c->mm, h->type, err)) {
            strata_error_prefix(err, "backend vulkan: weight %s", d->name ? d->name : "?");
            goto fail;
        }
        for (int j = 0; j < i; j++) /* the same bytes bound before: share its pieces */
            if (alias[j] < 0 && desc[j].host.data == h->data && desc[j].host.type == h->type &&
                desc[j].host.n_rows == h->n_rows && desc[j].host.n_cols == h->n_cols &&
                set->w[j].n_expert == w->n_expert) {
                alias[i] = j;
                break;
            }
        if (alias[i] >= 0)
            continue;
        const uint64_t unit_rows = w->n_expert > 1 ? (uint64_t)w->rows_per : 1;
        const uint64_t unit = unit_rows * h->row_bytes;
        const uint64_t wlim = d->use == BACKEND_USE_VEC ? dev_lim : lim; /* a VEC: one piece */
        if (unit > wlim) {
            strata_error_set(err, STRATA_E_UNSUPPORTED,
                             "backend vulkan: weight %s: %s of %llu bytes exceeds one binding "
                             "(%llu)",
                             d->name ? d->name : "?", w->n_expert > 1 ? "an expert" : "a row",
                             (unsigned long long)unit, (unsigned long long)wlim);
            goto fail;
        }
        const uint64_t units_per = wlim / unit, n_units = (uint64_t)h->n_rows / unit_rows;
        w->n_piece = (int)((n_units + units_per - 1) / units_per);
        w->piece = calloc((size_t)w->n_piece, sizeof *w->piece);
        w->rows = calloc((size_t)w->n_piece, sizeof *w->rows);
        place[i] = calloc((size_t)w->n_piece, sizeof **place);
        if (!w->piece || !w->rows || !place[i])
            goto nomem;
        for (int p = 0; p < w->n_piece; p++) {
            const uint64_t u0 = (uint64_t)p * units_per;
            const uint64_t nu = n_units - u0 < units_per ? n_units - u0 : units_per;
            const uint64_t bytes = nu * unit;
            w->piece[p].row0 = (int64_t)(u0 * unit_rows);
            w->piece[p].n_rows = (int64_t)(nu * unit_rows);
            uint64_t off =
                n_chunk ? (chunk_used[n_chunk - 1] + BVK_ALIGN - 1) & ~(BVK_ALIGN - 1) : 0;
            if (n_chunk == 0 || off + bytes > arena) {
                if (n_chunk == cap_chunk) {
                    cap_chunk = cap_chunk ? 2 * cap_chunk : 8;
                    uint64_t *nc = realloc(chunk_used, (size_t)cap_chunk * sizeof *nc);
                    if (!nc)
                        goto nomem;
                    chunk_used = nc;
                }
                chunk_used[n_chunk++] = 0;
                off = 0;
            }
            place[i][p] = (struct bvk_place){n_chunk - 1, off};
            chunk_used[n_chunk - 1] = off + bytes;
            total += bytes;
        }
    }

    /* pass 2: the buffers, then the uploads */
    set->buf = calloc((size_t)(n_chunk ? n_chunk : 1), sizeof *set->buf);
    if (!set->buf)
        goto nomem;
    for (int k = 0; k < n_chunk; k++) {
        if (!(set->buf[k] = vk_buf_alloc(c->dev, chunk_used[k], VK_MEM_DEVICE, err))) {
            strata_error_prefix(err, "backend vulkan: weights (%.1f MiB)",
                                (double)total / (1 << 20));
            goto fail;
        }
        set->n_buf = k + 1;
        c->weight_bytes += chunk_used[k];
    }
    const struct strata_progress *pr = params ? params->progress : NULL;
    strata_progress_report(pr, "copying weights", 0, total);
    for (int i = 0; i < n; i++) {
        struct bvk_weight *w = &set->w[i];
        if (alias[i] >= 0)
            continue;
        const struct backend_host_mat *h = &desc[i].host;
        for (int p = 0; p < w->n_piece; p++) {
            struct vk_buf *b = set->buf[place[i][p].chunk];
            const uint64_t off = place[i][p].off;
            const uint64_t bytes = (uint64_t)w->piece[p].n_rows * h->row_bytes;
            const uint8_t *src = (const uint8_t *)h->data + (size_t)w->piece[p].row0 * h->row_bytes;
            if (vk_buf_upload(c->dev, b, off, src, bytes, err)) {
                strata_error_prefix(err, "backend vulkan: uploading %s",
                                    desc[i].name ? desc[i].name : "?");
                goto fail;
            }
            if (params && params->drop_source)
                drop_pages(src, bytes);
            w->piece[p].buf = b;
            w->piece[p].off = off;
            w->rows[p] = (struct vkops_piece){
                .data = {b, off, bytes}, .row0 = w->piece[p].row0, .n_rows = w->piece[p].n_rows};
            done += bytes;
            strata_progress_report(pr, "copying weights", done, total);
        }
    }
    for (int i = 0; i < n; i++) {
        struct bvk_weight *w = &set->w[i];
        if (alias[i] >= 0) { /* the pieces of the first binding of the same bytes */
            const struct bvk_weight *a = &set->w[alias[i]];
            w->n_piece = a->n_piece;
            w->piece = malloc((size_t)a->n_piece * sizeof *w->piece);
            w->rows = malloc((size_t)a->n_piece * sizeof *w->rows);
            if (!w->piece || !w->rows)
                goto nomem;
            memcpy(w->piece, a->piece, (size_t)a->n_piece * sizeof *w->piece);
            memcpy(w->rows, a->rows, (size_t)a->n_piece * sizeof *w->rows);
        }
        w->mat = (struct vk_wmat){.type = w->type,
                                  .n_rows = w->n_rows,
                                  .n_cols = w->n_cols,
                                  .row_bytes = w->row_bytes,
                                  .n_expert = w->n_expert,
                                  .n_piece = w->n_piece,
                                  .piece = w->piece};
        out[i] = (struct backend_weight *)w;
    }
    if (info) {
        info->copied_bytes = total;
        info->packed_bytes = 0;
    }
    for (int i = 0; i < n; i++)
        free(place[i]);
    free(place);
    free(alias);
    free(chunk_used);
    return set;
nomem:
    strata_error_set(err, STRATA_E_NOMEM, "backend vulkan: out of host memory binding weights");
fail:
    for (int i = 0; place && i < n; i++)
        free(place[i]);
    free(place);
    free(alias);
    free(chunk_used);
    bvk_weights_free(c, set);
    return NULL;
}
