/* engine/experts/experts.c: the chain of tiers (experts.h): a get walks it to
 * the first tier that holds the matrix, release and free reach every tier,
 * prefetch hands each tier the ids the tiers before it did not take; the
 * head counts holds per step. */
#include "engine/experts/experts.h"

#include <stdlib.h>
#include <string.h>

struct experts_source *experts_source_init(const struct experts_ops *ops, void *ctx,
                                           struct experts_source *next, int n_layer, int n_expert,
                                           struct strata_error *err) {
    struct experts_source *s = calloc(1, sizeof *s);
    if (!s) {
        if (ops->free)
            ops->free(ctx);
        experts_free(next);
        strata_error_set(err, STRATA_E_NOMEM, "experts: out of memory");
        return NULL;
    }
    s->ops = ops;
    s->ctx = ctx;
    s->next = next;
    s->n_layer = next ? next->n_layer : n_layer;
    s->n_expert = next ? next->n_expert : n_expert;
    return s;
}

/* The head's hold counter of `step`, taking a free one; NULL when
 * EXPERTS_STEPS_MAX other steps are held. */
static _Atomic uint32_t *hold_of(struct experts_source *src, uint64_t step) {
    int free_slot = -1;
    for (int i = 0; i < EXPERTS_STEPS_MAX; i++) {
        const uint32_t n = atomic_load_explicit(&src->hold_n[i], memory_order_relaxed);
        if (n && src->hold_step[i] == step)
            return &src->hold_n[i];
        if (!n && free_slot < 0)
            free_slot = i;
    }
    if (free_slot < 0)
        return NULL;
    src->hold_step[free_slot] = step;
    return &src->hold_n[free_slot];
}

int experts_get(struct experts_source *src, int layer, int expert, enum experts_which which,
                uint64_t step, struct experts_ref *out, struct strata_error *err) {
    if (layer < 0 || layer >= src->n_layer || expert < 0 || expert >= src->n_expert ||
        (int)which < 0 || which >= EXPERTS_WHICH_COUNT)
        return strata_error_set(err, STRATA_E_INVALID, "experts: (%d, %d, %d) out of range", layer,
                                expert, (int)which);
    _Atomic uint32_t *hold = hold_of(src, step);
    if (!hold)
        return strata_error_set(err, STRATA_E_LIMIT,
                                "experts: %d steps hold weights (release the finished ones)",
                                EXPERTS_STEPS_MAX);
    for (struct experts_source *t = src; t; t = t->next) {
        const int rc = t->ops->get(t->ctx, layer, expert, which, step, out, err);
        if (rc == EXPERTS_MISS)
            continue;
        if (rc)
            return rc;
        atomic_fetch_add_explicit(hold, 1, memory_order_relaxed);
        if ((unsigned)out->tier < EXPERTS_TIER_COUNT)
            atomic_fetch_add_explicit(&src->n_gets[out->tier], 1, memory_order_relaxed);
        return 0;
    }
    return strata_error_set(err, STRATA_E_NOT_FOUND, "experts: no tier holds (%d, %d, %d)", layer,
                            expert, (int)which);
}

int experts_need(struct experts_source *src, int layer, const int32_t *ids, int n, uint64_t step,
                 struct strata_error *err) {
    return experts_need_start(src, layer, ids, n, step, NULL, err);
}

int experts_need_wait(struct experts_source *src, struct strata_error *err) {
    for (struct experts_source *t = src; t; t = t->next)
        if (t->ops->need_wait) {
            const int rc = t->ops->need_wait(t->ctx, err);
            if (rc)
                return rc;
        }
    return 0;
}

/* late NULL: experts_need (every tier's need). */
int experts_need_start(struct experts_source *src, int layer, const int32_t *ids, int n,
                       uint64_t step, uint8_t *late, struct strata_error *err) {
    if (layer < 0 || layer >= src->n_layer || n < 0 || (n > 0 && !ids))
        return strata_error_set(err, STRATA_E_INVALID, "experts: need of layer %d, %d ids", layer,
                                n);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= src->n_expert)
            return strata_error_set(err, STRATA_E_INVALID, "experts: need of expert %d of %d",
                                    ids[i], src->n_expert);
    for (struct experts_source *t = src; t; t = t->next) {
        int rc = 0;
        if (late && t->ops->need_start)
            rc = t->ops->need_start(t->ctx, layer, ids, n, step, late, err);
        else if (t->ops->need)
            rc = t->ops->need(t->ctx, layer, ids, n, step, err);
        if (rc)
            return rc;
    }
    return 0;
}

void experts_release(struct experts_source *src, uint64_t step) {
    for (int i = 0; i < EXPERTS_STEPS_MAX; i++)
        if (atomic_load_explicit(&src->hold_n[i], memory_order_relaxed) &&
            src->hold_step[i] == step)
            atomic_store_explicit(&src->hold_n[i], 0, memory_order_relaxed);
    for (struct experts_source *t = src; t; t = t->next)
        if (t->ops->release)
            t->ops->release(t->ctx, step);
}

int experts_resident(struct experts_source *src, int layer) {
    for (struct experts_source *t = src; t; t = t->next) {
        const int r = t->ops->resident ? t->ops->resident(t->ctx, layer) : 0;
        if (r != EXPERTS_ASK_NEXT)
            return r == 1;
    }
    return 0; /* every tier passed: nobody holds the rest */
}

void experts_prefetch(struct experts_source *src, int layer, const int32_t *ids, int n) {
    if (!src || !ids || n <= 0 || layer < 0 || layer >= src->n_layer)
        return;
    if (n > EXPERTS_PREFETCH_MAX)
        n = EXPERTS_PREFETCH_MAX;
    atomic_fetch_add_explicit(&src->n_asked, (uint64_t)n, memory_order_relaxed);
    int32_t a[EXPERTS_PREFETCH_MAX], b[EXPERTS_PREFETCH_MAX];
    int m = 0;
    for (int i = 0; i < n; i++) /* ids out of range are not anybody's */
        if (ids[i] >= 0 && ids[i] < src->n_expert)
            a[m++] = ids[i];
    int32_t *cur = a, *miss = b;
    for (struct experts_source *t = src; t && m > 0; t = t->next) {
        if (!t->ops->prefetch)
            continue;
        m = t->ops->prefetch(t->ctx, layer, cur, m, miss);
        int32_t *x = cur;
        cur = miss;
        miss = x;
    }
}

void experts_stats(struct experts_source *src, struct experts_stats *out) {
    memset(out, 0, sizeof *out);
    if (!src)
        return;
    for (int i = 0; i < EXPERTS_TIER_COUNT; i++)
        out->gets[i] = atomic_load_explicit(&src->n_gets[i], memory_order_relaxed);
    out->prefetch_asked = atomic_load_explicit(&src->n_asked, memory_order_relaxed);
    for (int i = 0; i < EXPERTS_STEPS_MAX; i++)
        out->held += atomic_load_explicit(&src->hold_n[i], memory_order_relaxed);
    for (struct experts_source *t = src; t; t = t->next)
        if (t->ops->stats)
            t->ops->stats(t->ctx, out);
}

void experts_free(struct experts_source *src) {
    while (src) {
        struct experts_source *next = src->next;
        if (src->ops && src->ops->free)
            src->ops->free(src->ctx);
        free(src);
        src = next;
    }
}
