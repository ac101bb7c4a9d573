/* engine/experts-mmap.c: routed-expert weights as slices of the mmap'd 3-D
 * tensors blk.<l>.ffn_{gate,up,down}_exps.weight, ne = (n_cols, n_rows,
 * n_expert): expert e's matrix starts e * n_rows * row_bytes into the tensor.
 * Nothing is copied, so get/release are O(1) and release is a no-op. */
#include "engine/experts.h"

#include <stdio.h>
#include <stdlib.h>

#include "engine/gguf.h"

struct experts_mmap {
    const struct gguf_tensor_info **t; /* (n_layer, EXPERTS_WHICH_COUNT), NULL = no experts */
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
    out->type = (enum quant_type)t->type;
    out->n_cols = t->ne[0];
    out->n_rows = t->ne[1];
    out->row_bytes = rb;
    out->data = (const uint8_t *)t->data + (size_t)expert * (size_t)t->ne[1] * rb;
    return 0;
}

static void mmap_free(void *ctx) {
    struct experts_mmap *m = ctx;
    if (!m)
        return;
    free(m->t);
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

struct experts_source *experts_mmap_init(const struct gguf_file *f, int n_layer,
                                         struct strata_error *err) {
    struct experts_source *src = calloc(1, sizeof *src);
    struct experts_mmap *m = calloc(1, sizeof *m);
    if (!src || !m || n_layer < 1)
        goto nomem;
    m->n_layer = n_layer;
    m->t = calloc((size_t)n_layer * EXPERTS_WHICH_COUNT, sizeof *m->t);
    if (!m->t)
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
