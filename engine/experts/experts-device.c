/* engine/experts/experts-device.c: the device tier: expert stacks bound to
 * the compute backend (a GPU's weights_bind uploaded every expert into
 * device memory, which no host view reaches: backend weight_host is NULL),
 * served as the bound weight and the expert's index, tier DEVICE. The model
 * places each (layer, which) stack at load; nothing is ever evicted, so
 * release has nothing to do and resident says so; tensors not placed pass to
 * the next tier (the file's pages). A VRAM tier of fixed slots (a device
 * arena fed from RAM) would implement the same ops with evictions. */
#include <stdlib.h>

#include "engine/experts/experts.h"

struct experts_device {
    const struct backend_weight **stack; /* (n_layer, EXPERTS_WHICH_COUNT); NULL = not placed */
    int n_layer, n_expert;
};

static const struct backend_weight *stack_of(const struct experts_device *d, int layer, int which) {
    return d->stack[(size_t)layer * EXPERTS_WHICH_COUNT + which];
}

static int device_get(void *ctx, int layer, int expert, enum experts_which which, uint64_t step,
                      struct experts_ref *out, struct strata_error *err) {
    const struct experts_device *d = ctx;
    const struct backend_weight *w = stack_of(d, layer, which);
    if (!w)
        return EXPERTS_MISS;
    out->tier = EXPERTS_TIER_DEVICE;
    out->mat = (struct backend_mat){.w = w, .index = expert};
    return 0;
}

/* Ids of a layer whose three stacks are placed are held: not passed on. */
static int device_prefetch(void *ctx, int layer, const int32_t *ids, int n, int32_t *miss) {
    const struct experts_device *d = ctx; /* placements are fixed before any prefetch */
    for (int w = 0; w < EXPERTS_WHICH_COUNT; w++)
        if (!stack_of(d, layer, w)) {
            for (int i = 0; i < n; i++)
                miss[i] = ids[i];
            return n;
        }
    return 0;
}

static int device_resident(void *ctx, int layer) {
    const struct experts_device *d = ctx;
    for (int w = 0; w < EXPERTS_WHICH_COUNT; w++)
        if (!stack_of(d, layer, w))
            return EXPERTS_ASK_NEXT;
    return 1;
}

static void device_free(void *ctx) {
    struct experts_device *d = ctx;
    if (!d)
        return;
    free(d->stack);
    free(d);
}

static const struct experts_ops device_ops = {
    .name = "device",
    .get = device_get,
    .release = NULL,
    .prefetch = device_prefetch,
    .resident = device_resident,
    .stats = NULL,
    .free = device_free,
};

struct experts_source *experts_device_init(struct experts_source *next, struct strata_error *err) {
    if (!next) {
        strata_error_set(err, STRATA_E_INVALID, "experts: a device tier needs a tier behind it");
        return NULL;
    }
    struct experts_device *d = calloc(1, sizeof *d);
    if (d)
        d->stack = calloc((size_t)next->n_layer * EXPERTS_WHICH_COUNT, sizeof *d->stack);
    if (!d || !d->stack) {
        device_free(d);
        experts_free(next);
        strata_error_set(err, STRATA_E_NOMEM, "experts: out of memory");
        return NULL;
    }
    d->n_layer = next->n_layer;
    d->n_expert = next->n_expert;
    return experts_source_init(&device_ops, d, next, 0, 0, err);
}

int experts_device_place(struct experts_source *src, int layer, enum experts_which which,
                         const struct backend_weight *stack) {
    if (!src || src->ops != &device_ops || layer < 0 || layer >= src->n_layer || (int)which < 0 ||
        which >= EXPERTS_WHICH_COUNT || !stack)
        return STRATA_E_INVALID;
    struct experts_device *d = src->ctx;
    d->stack[(size_t)layer * EXPERTS_WHICH_COUNT + which] = stack;
    return 0;
}
