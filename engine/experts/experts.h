/* engine/experts/experts.h: the tiered expert seam: where the forward pass gets
 * a routed expert's weights (DESIGN.md "Tiers of an expert's bytes"). A
 * source is a chain of tiers, each a small vtable: a device arena (VRAM
 * slots, later) -> a RAM tier (experts-ram.c: copies in host memory, today
 * the CPU backend's weight arena) -> the file (experts-file.c: slices of the
 * mapped 3-D GGUF tensors). A get walks the chain to the first tier that
 * holds the matrix and says which tier that was.
 *
 *   struct experts_source *file = experts_file_init(gguf, n_layer, NULL, &err);
 *   struct experts_source *src = experts_ram_init(file, &err);    // steals file
 *   experts_ram_place(src, layer, EXPERTS_GATE, &stack_view);     // a RAM copy
 *   struct experts_ref r;
 *   if (experts_get(src, layer, e, EXPERTS_GATE, step, &r, &err) == 0) {
 *       // r.tier: EXPERTS_TIER_DEVICE (r.mat.w: a bound weight, r.mat.index),
 *       // EXPERTS_TIER_RAM or EXPERTS_TIER_FILE (r.mat.host: host bytes)
 *       ... record the step's moe_ffn with r.mat, submit, wait ...
 *   }
 *   experts_release(src, step);            // every get of that step ends
 *   experts_need(src, layer, ids, n, step, &err); // a layer's picks, before their gets
 *   experts_prefetch(src, layer, ids, n);  // from a predictor thread
 *   experts_free(src);
 *
 * Release is keyed to the step that used the weights: a GPU step runs after
 * its recording returns, so a tier may evict or reuse a matrix handed out
 * for step s only after experts_release(src, s), which the model calls once
 * that step's wait returned (several steps may be in flight, up to
 * EXPERTS_STEPS_MAX). Step ids are the caller's, increasing.
 *
 * Prefetch: experts_prefetch asks the chain to have every matrix of the
 * given experts of one layer ready soon (a predictor guessed them). Each
 * tier takes what it can and passes the rest on; a tier that queues work
 * never blocks: a full (or busy) queue drops the request, counted in stats.
 *
 * Threading: get/release/free belong to the forward thread (the
 * scheduler's); experts_prefetch and experts_stats are safe from any thread
 * at any time between init and free. Matrices handed out may be read by the
 * pool's workers (or a device) until released.
 */
#ifndef STRATA_EXPERTS_H
#define STRATA_EXPERTS_H

#include <stdatomic.h>
#include <stdint.h>

#include "engine/backend/backend.h"
#include "engine/core/error.h"

struct gguf_file;

enum experts_which {
    EXPERTS_GATE = 0, /* ffn_gate_exps: (n_ff_exp, n_embd) per expert */
    EXPERTS_UP = 1,   /* ffn_up_exps:   (n_ff_exp, n_embd) */
    EXPERTS_DOWN = 2, /* ffn_down_exps: (n_embd, n_ff_exp) */
    EXPERTS_WHICH_COUNT = 3,
};

enum experts_tier {
    EXPERTS_TIER_DEVICE = 0, /* a slot in the compute backend's memory: ref.mat.w */
    EXPERTS_TIER_RAM = 1,    /* a copy in host memory: ref.mat.host */
    EXPERTS_TIER_FILE = 2,   /* the model file's mapped pages: ref.mat.host */
    EXPERTS_TIER_COUNT = 3,
};

struct experts_ref {
    enum experts_tier tier;
    struct backend_mat mat; /* DEVICE: mat.w + mat.index (bound to the backend the tier serves);
                               RAM, FILE: mat.host (mat.w NULL). Valid until the release. */
};

/* Counters of a chain (experts_stats sums them). */
struct experts_stats {
    uint64_t gets[EXPERTS_TIER_COUNT]; /* matrices handed out, by the tier that held them */
    uint64_t held;                     /* handed out and not yet released */
    uint64_t prefetch_asked;           /* expert ids passed to experts_prefetch */
    uint64_t prefetch_queued;          /* taken by a tier's queue */
    uint64_t prefetch_dropped;         /* dropped: queue full or busy */
    uint64_t prefetch_done;            /* queued ones the tier has carried out */
};

#define EXPERTS_MISS 1           /* get: this tier does not hold the matrix (ask the next) */
#define EXPERTS_ASK_NEXT 2       /* resident: yes for what this tier holds; ask the next */
#define EXPERTS_STEPS_MAX 16     /* steps with matrices handed out and not released, at once */
#define EXPERTS_PREFETCH_MAX 256 /* ids one experts_prefetch call takes (more are cut) */

struct experts_ops {
    const char *name; /* "file", "ram", "arena" */
    /* Fills *out with (layer, expert, which)'s matrix for `step`: 0, or
     * EXPERTS_MISS where this tier does not hold it (the chain asks the
     * next), or STRATA_E_* (the forward step fails with it). */
    int (*get)(void *ctx, int layer, int expert, enum experts_which which, uint64_t step,
               struct experts_ref *out, struct strata_error *err);
    /* Everything handed out for `step` is no longer read. Optional (NULL:
     * nothing is ever evicted). */
    void (*release)(void *ctx, uint64_t step);
    /* Takes the ids of `layer` this tier holds or will fetch; writes the
     * others to miss (capacity n) and returns how many (the chain passes
     * them on). Any thread; never blocks. Optional (NULL: all pass on). */
    int (*prefetch)(void *ctx, int layer, const int32_t *ids, int n, int32_t *miss);
    /* Whether the matrices of `layer` this tier serves stay where they are
     * until free (get hands out the same refs every step, release frees
     * nothing): 1 yes for every matrix of the layer; 0 no (it may evict, or
     * it cannot tell); EXPERTS_ASK_NEXT: yes for those it holds, ask the
     * next tier about the rest. Forward thread. Optional (NULL: 0). */
    int (*resident)(void *ctx, int layer);
    /* Adds this tier's prefetch counters to *acc. Any thread. Optional. */
    void (*stats)(void *ctx, struct experts_stats *acc);
    /* Frees ctx (not next). Optional (NULL: nothing to free). */
    void (*free)(void *ctx);
    /* The ids (distinct, n of them) of `layer` that `step` is about to get:
     * a tier that reads (the store, xstore.h) fetches the ones it lacks in
     * one batch. The caller promises that whatever it got for `step` in
     * other layers is no longer read (the forward pass waits for the step's
     * recorded work before each layer's picks), so the tier may reuse it.
     * 0 or STRATA_E_* (the step fails). Forward thread. Optional. */
    int (*need)(void *ctx, int layer, const int32_t *ids, int n, uint64_t step,
                struct strata_error *err);
};

struct experts_source {
    const struct experts_ops *ops; /* borrowed: static table */
    void *ctx;                     /* owned: freed by ops->free */
    struct experts_source *next;   /* owned: the tier behind this one; NULL for the last */
    int n_layer;
    int n_expert; /* experts per MoE layer */
    /* Holds per step in flight (the chain's head counts them; experts.c). */
    uint64_t hold_step[EXPERTS_STEPS_MAX];       /* written by the forward thread only */
    _Atomic uint32_t hold_n[EXPERTS_STEPS_MAX];  /* 0: slot free; read by experts_stats */
    _Atomic uint64_t n_gets[EXPERTS_TIER_COUNT]; /* written by the forward thread */
    char pad[64];             /* keeps n_asked off the forward thread's cache lines */
    _Atomic uint64_t n_asked; /* written by predictor threads */
};

/* Wraps a tier (ctx owned by it from now on, freed by ops->free even on
 * failure) in front of next (stolen). n_layer / n_expert: next's when next
 * is not NULL. Returns NULL with err when out of memory. */
struct experts_source *experts_source_init(const struct experts_ops *ops, void *ctx,
                                           struct experts_source *next, int n_layer, int n_expert,
                                           struct strata_error *err); /* owned: experts_free() */

/* Walks the chain; 0 or STRATA_E_* (STRATA_E_NOT_FOUND when no tier holds
 * it; STRATA_E_LIMIT with EXPERTS_STEPS_MAX steps held). */
int experts_get(struct experts_source *src, int layer, int expert, enum experts_which which,
                uint64_t step, struct experts_ref *out, struct strata_error *err);
/* The picks of one layer before their gets (ops.need), along the chain:
 * 0 or the first tier's STRATA_E_*. Forward thread. */
int experts_need(struct experts_source *src, int layer, const int32_t *ids, int n, uint64_t step,
                 struct strata_error *err);
/* Ends every get of `step` in every tier. A step without gets is a no-op. */
void experts_release(struct experts_source *src, uint64_t step);
/* 1 if every matrix of `layer` is resident along the chain (ops.resident):
 * the caller may then take the layer's refs once and use them every step
 * without a get per pick (the forward pass then needs no read-back of the
 * picks inside a step). Forward thread. */
int experts_resident(struct experts_source *src, int layer);
/* Prefetch of n expert ids of one layer (see above). Any thread, never blocks. */
void experts_prefetch(struct experts_source *src, int layer, const int32_t *ids, int n);
/* The chain's counters. Any thread. */
void experts_stats(struct experts_source *src, struct experts_stats *out);
void experts_free(struct experts_source *src); /* the whole chain; NULL is a no-op */

/* ---- the file tier (experts-file.c) ------------------------------------------ */

struct experts_file_params {
    /* Prefetch queue slots (one expert of one layer each); a worker thread
     * started at init asks the kernel to read the queued experts' pages ahead
     * (MADV_WILLNEED). 0 = no queue, no thread (prefetches are dropped). */
    int queue;
};
struct experts_file_params experts_file_params_default(void); /* queue 64 */

/* Slices of blk.<layer>.ffn_{gate,up,down}_exps.weight of a mapped file
 * (borrowed: must outlive the source), tier FILE, layout ROWS. A layer
 * without expert tensors gives STRATA_E_NOT_FOUND from get. NULL params:
 * the defaults. Returns NULL on error (shapes inconsistent, no memory, no
 * thread). */
struct experts_source *experts_file_init(const struct gguf_file *f, int n_layer,
                                         const struct experts_file_params *params,
                                         struct strata_error *err); /* owned: experts_free() */

/* ---- the RAM tier (experts-ram.c) --------------------------------------------- */

/* A RAM tier in front of next (stolen): it serves the tensors placed in it
 * (every expert of a (layer, which)) and passes the rest on. */
struct experts_source *experts_ram_init(struct experts_source *next,
                                        struct strata_error *err); /* owned: experts_free() */
/* Serves (layer, which) from `stack` from now on: host bytes of all
 * n_expert experts one after the other (stack->n_rows = n_expert * rows an
 * expert; borrowed, must outlive the source; layout PACK16 needs whole
 * 16-row groups an expert). Call before any get of that tensor, from the
 * forward thread. 0 or STRATA_E_INVALID (not a RAM tier, bad shape). */
int experts_ram_place(struct experts_source *src, int layer, enum experts_which which,
                      const struct backend_host_mat *stack);

/* ---- the device tier (experts-device.c) ---------------------------------------- */

/* A device tier in front of next (stolen): it serves the expert stacks the
 * compute backend bound into its own memory (a GPU's: no host view), as the
 * bound weight and the expert's index (tier DEVICE), and passes the rest on.
 * Resident for what is placed. */
struct experts_source *experts_device_init(struct experts_source *next,
                                           struct strata_error *err); /* owned: experts_free() */
/* Serves (layer, which) from `stack` (a bound weight of n_expert experts;
 * borrowed, must outlive the source) from now on. Call before any get of
 * that tensor, from the forward thread. 0 or STRATA_E_INVALID. */
int experts_device_place(struct experts_source *src, int layer, enum experts_which which,
                         const struct backend_weight *stack);

#endif
