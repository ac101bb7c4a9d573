/* engine/experts/experts-mmap.c: routed-expert weights as slices of the mmap'd 3-D
 * tensors blk.<l>.ffn_{gate,up,down}_exps.weight, ne = (n_cols, n_rows,
 * n_expert): expert e's matrix starts e * n_rows * row_bytes into the tensor.
 * Nothing is copied here, so get/release are O(1) and release is a no-op;
 * the model may place a RAM copy of a tensor (model-pack.c: anonymous
 * memory, packed where the kernels have the layout), which get then serves. */
#include "engine/experts/experts.h"

#include <stdio.h>
#include <stdlib.h>

#include "engine/gguf/gguf.h"

struct experts_mmap {
    const struct gguf_tensor_info **t; /* (n_layer, EXPERTS_WHICH_COUNT), NULL = no experts */
    const uint8_t **copy; /* (n_layer, EXPERTS_WHICH_COUNT): a RAM copy of t's data, or NULL */
    uint8_t *packed;      /* (n_layer, EXPERTS_WHICH_COUNT): the copy is in kernels_pack's layout */
    int n_layer;
    int n_expert;
};

static const char *const which_name[EXPERTS_WHICH_COUNT] = {"ffn_gate_exps", "ffn_up_exps",
                                                            "ffn_down_exps"};

static int mmap_get(void *ctx, int layer, int expert, enum experts_which which,
                    struct kern_mat *out, struct strata_error *err) {
    struct experts_mmap *m = ctx;
    if (layer < 0 || layer >= m->n_layer || expert < 0 || expert >= m->n_expert || (int)which < 0 ||
        which >= EXPERTS_WHICH_COUNT)
        return strata_error_set(err, STRATA_E_INVALID, "experts: (%d, %d, %d) out of range", layer,
                                expert, (int)which);
    const struct gguf_tensor_info *t = m->t[(size_t)layer * EXPERTS_WHICH_COUNT + which];
    if (!t)
        return strata_error_set(err, STRATA_E_NOT_FOUND, "experts: layer %d has no %s", layer,
                                which_name[which]);
    size_t rb = quant_row_size((enum quant_type)t->type, t->ne[0]);
    const size_t i = (size_t)layer * EXPERTS_WHICH_COUNT + which;
    out->type = (enum quant_type)t->type;
    out->n_cols = t->ne[0];
    out->n_rows = t->ne[1];
    out->row_bytes = rb;
    /* a packed copy keeps expert e's rows at the same offset: they are whole
     * 16-row groups (experts_mmap_place checks n_rows) */
    out->data = (m->copy[i] ? m->copy[i] : (const uint8_t *)t->data) +
                (size_t)expert * (size_t)t->ne[1] * rb;
    out->packed = m->packed[i];
    return 0;
}

static void mmap_free(void *ctx) {
    struct experts_mmap *m = ctx;
    if (!m)
        return;
    free(m->t);
    free(m->copy);
    free(m->packed);
    free(m);
}

static const struct experts_ops mmap_ops = {
    .name = "mmap", .get = mmap_get, .release = NULL, .free = mmap_free};

int experts_get(struct experts_source *src, int layer, int expert, enum experts_which which,
                struct kern_mat *out, struct strata_error *err) {
    return src->ops->get(src->ctx, layer, expert, which, out, err);
}

void experts_release(struct experts_source *src, int layer, int expert, enum experts_which which) {
    if (src->ops->release)
        src->ops->release(src->ctx, layer, expert, which);
}

void experts_free(struct experts_source *src) {
    if (!src)
        return;
    if (src->ops && src->ops->free)
        src->ops->free(src->ctx);
    free(src);
}

const struct gguf_tensor_info *experts_mmap_tensor(const struct experts_source *src, int layer,
                                                   enum experts_which which) {
    const struct experts_mmap *m = src->ctx;
    if (src->ops != &mmap_ops || layer < 0 || layer >= m->n_layer || (int)which < 0 ||
        which >= EXPERTS_WHICH_COUNT)
        return NULL;
    return m->t[(size_t)layer * EXPERTS_WHICH_COUNT + which];
}

int experts_mmap_place(struct experts_source *src, int layer, enum experts_which which,
                       const void *data, int packed) {
    const struct gguf_tensor_info *t = experts_mmap_tensor(src, layer, which);
    if (!t || !data || (packed && t->ne[1] % KERNELS_PACK_ROWS != 0))
        return STRATA_E_INVALID;
    struct experts_mmap *m = src->ctx;
    const size_t i = (size_t)layer * EXPERTS_WHICH_COUNT + which;
    m->copy[i] = data;
    m->packed[i] = packed ? 1 : 0;
    return 0;
}

struct experts_source *experts_mmap_init(const struct gguf_file *f, int n_layer,
                                         struct strata_error *err) {
    struct experts_source *src = calloc(1, sizeof *src);
    struct experts_mmap *m = calloc(1, sizeof *m);
    if (!src || !m || n_layer < 1)
        goto nomem;
    m->n_layer = n_layer;
    m->t = calloc((size_t)n_layer * EXPERTS_WHICH_COUNT, sizeof *m->t);
    m->copy = calloc((size_t)n_layer * EXPERTS_WHICH_COUNT, sizeof *m->copy);
    m->packed = calloc((size_t)n_layer * EXPERTS_WHICH_COUNT, 1);
    if (!m->t || !m->copy || !m->packed)
        goto nomem;
    src->ops = &mmap_ops;
    src->ctx = m;
    src->n_layer = n_layer;
    for (int l = 0; l < n_layer; l++) {
        for (int w = 0; w < EXPERTS_WHICH_COUNT; w++) {
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, which_name[w]);
            const struct gguf_tensor_info *t = gguf_find_tensor(f, name);
            if (!t)
                continue;
            const struct quant_traits *tr = quant_type_traits(t->type);
            if (t->n_dims != 3 || !tr || quant_row_size((enum quant_type)t->type, t->ne[0]) == 0 ||
                (m->n_expert && t->ne[2] != m->n_expert) || t->ne[2] < 1 || t->ne[2] > 65536) {
                strata_error_set(err, STRATA_E_FORMAT, "experts: %s has a bad shape or type", name);
                goto fail;
            }
            m->n_expert = (int)t->ne[2];
            m->t[(size_t)l * EXPERTS_WHICH_COUNT + w] = t;
        }
    }
    src->n_expert = m->n_expert;
    return src;
nomem:
    strata_error_set(err, STRATA_E_NOMEM, "experts: out of memory");
fail:
    if (!src || !src->ctx)
        mmap_free(m);
    experts_free(src);
    return NULL;
}
