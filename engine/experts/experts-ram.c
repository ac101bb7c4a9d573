/* engine/experts/experts-ram.c: the RAM tier: expert tensors copied into host
 * memory, served in place of the file's pages. Today the copies are the CPU
 * backend's weight arena (the model places each (layer, which) stack from
 * backend weight_host views; Q4_K / Q6_K / Q4_0 packed where the ISA has
 * packed kernels), holding every expert, so nothing is ever evicted and
 * release has nothing to do (and resident says so); tensors not placed pass
 * to the next tier. An
 * LRU tier over a byte budget (the io_uring store) implements the same ops
 * and pins what a step holds until its release. */
#include "engine/experts/experts.h"

#include <stdlib.h>

struct experts_ram {
    struct backend_host_mat *stack; /* (n_layer, EXPERTS_WHICH_COUNT); data NULL = not placed */
    int n_layer, n_expert;
};

static const struct backend_host_mat *stack_of(const struct experts_ram *r, int layer, int which) {
    const struct backend_host_mat *s = &r->stack[(size_t)layer * EXPERTS_WHICH_COUNT + which];
    return s->data ? s : NULL;
}

static int ram_get(void *ctx, int layer, int expert, enum experts_which which, uint64_t step,
                   struct experts_ref *out, struct strata_error *err) {
    const struct experts_ram *r = ctx;
    const struct backend_host_mat *s = stack_of(r, layer, which);
    if (!s)
        return EXPERTS_MISS;
    const int64_t rows = s->n_rows / r->n_expert;
    out->tier = EXPERTS_TIER_RAM;
    out->mat = (struct backend_mat){.w = NULL, .index = 0, .host = *s};
    out->mat.host.n_rows = rows;
    /* a packed expert's rows are whole 16-row groups at the same offset
     * (experts_ram_place checks) */
    out->mat.host.data = (const uint8_t *)s->data + (size_t)expert * (size_t)rows * s->row_bytes;
    return 0;
}

/* Ids of a layer whose three tensors are all placed are held: they are not
 * passed on. */
static int ram_prefetch(void *ctx, int layer, const int32_t *ids, int n, int32_t *miss) {
    const struct experts_ram *r = ctx; /* placements are fixed before any prefetch */
    for (int w = 0; w < EXPERTS_WHICH_COUNT; w++)
        if (!stack_of(r, layer, w)) {
            for (int i = 0; i < n; i++)
                miss[i] = ids[i];
            return n;
        }
    return 0;
}

/* Placed copies stay until free: resident for what is placed. */
static int ram_resident(void *ctx, int layer) {
    const struct experts_ram *r = ctx;
    for (int w = 0; w < EXPERTS_WHICH_COUNT; w++)
        if (!stack_of(r, layer, w))
            return EXPERTS_ASK_NEXT;
    return 1;
}

static void ram_free(void *ctx) {
    struct experts_ram *r = ctx;
    if (!r)
        return;
    free(r->stack);
    free(r);
}

static const struct experts_ops ram_ops = {
    .name = "ram",
    .get = ram_get,
    .release = NULL,
    .prefetch = ram_prefetch,
    .resident = ram_resident,
    .stats = NULL,
    .free = ram_free,
};

struct experts_source *experts_ram_init(struct experts_source *next, struct strata_error *err) {
    if (!next) {
        strata_error_set(err, STRATA_E_INVALID, "experts: a RAM tier needs a tier behind it");
        return NULL;
    }
    struct experts_ram *r = calloc(1, sizeof *r);
    if (r)
        r->stack = calloc((size_t)next->n_layer * EXPERTS_WHICH_COUNT, sizeof *r->stack);
    if (!r || !r->stack) {
        ram_free(r);
        experts_free(next);
        strata_error_set(err, STRATA_E_NOMEM, "experts: out of memory");
        return NULL;
    }
    r->n_layer = next->n_layer;
    r->n_expert = next->n_expert;
    return experts_source_init(&ram_ops, r, next, 0, 0, err);
}

int experts_ram_place(struct experts_source *src, int layer, enum experts_which which,
                      const struct backend_host_mat *stack) {
    if (!src || src->ops != &ram_ops || layer < 0 || layer >= src->n_layer || (int)which < 0 ||
        which >= EXPERTS_WHICH_COUNT || !stack || !stack->data || src->n_expert < 1 ||
        stack->n_rows % src->n_expert)
        return STRATA_E_INVALID;
    const int64_t rows = stack->n_rows / src->n_expert;
    if (stack->layout == BACKEND_LAYOUT_PACK16 && rows % 16 != 0)
        return STRATA_E_INVALID;
    struct experts_ram *r = src->ctx;
    r->stack[(size_t)layer * EXPERTS_WHICH_COUNT + which] = *stack;
    return 0;
}
