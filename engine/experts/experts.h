/* engine/experts/experts.h: where the forward pass gets a routed expert's weights
 * (DESIGN.md "Tiers of an expert's bytes"). A small vtable: today slices of
 * the mmap'd 3-D GGUF tensors (experts-mmap.c); later an io_uring RAM tier
 * and a VRAM arena implement the same members.
 *
 *   struct experts_source *src = experts_mmap_init(gguf, n_layer, &err);
 *   struct kern_mat w;
 *   if (experts_get(src, layer, e, EXPERTS_GATE, &w, &err) == 0) {
 *       ... kernels_matmul(&w, ...) ...
 *       experts_release(src, layer, e, EXPERTS_GATE);
 *   }
 *   experts_free(src);
 *
 * Every successful experts_get is paired with one experts_release once the
 * matmuls that read the weights have finished (a cache may then evict).
 *
 * Threading: get/release are called from the forward thread only (the
 * scheduler's); the returned matrix may be read by the pool's workers until
 * it is released.
 */
#ifndef STRATA_EXPERTS_H
#define STRATA_EXPERTS_H

#include "engine/core/error.h"
#include "engine/cpu/kernels.h"

struct gguf_file;
struct gguf_tensor_info;

enum experts_which {
    EXPERTS_GATE = 0, /* ffn_gate_exps: (n_ff_exp, n_embd) per expert */
    EXPERTS_UP = 1,   /* ffn_up_exps:   (n_ff_exp, n_embd) */
    EXPERTS_DOWN = 2, /* ffn_down_exps: (n_embd, n_ff_exp) */
    EXPERTS_WHICH_COUNT = 3,
};

struct experts_ops {
    const char *name; /* "mmap", "xstore", "arena" */
    /* Fills *out with the expert's matrix (rows, cols, type, stride); the data
     * stays valid until the matching release. Returns 0 or STRATA_E_*. */
    int (*get)(void *ctx, int layer, int expert, enum experts_which which, struct kern_mat *out,
               struct strata_error *err);
    /* Ends one get's use of the weights. Optional (NULL: nothing to do). */
    void (*release)(void *ctx, int layer, int expert, enum experts_which which);
    /* Frees ctx. Optional (NULL: nothing to free). */
    void (*free)(void *ctx);
};

struct experts_source {
    const struct experts_ops *ops; /* borrowed: static table */
    void *ctx;                     /* owned: freed by ops->free */
    int n_layer;
    int n_expert; /* experts per MoE layer */
};

int experts_get(struct experts_source *src, int layer, int expert, enum experts_which which,
                struct kern_mat *out, struct strata_error *err);
void experts_release(struct experts_source *src, int layer, int expert, enum experts_which which);
void experts_free(struct experts_source *src); /* NULL is a no-op */

/* Source over blk.<layer>.ffn_{gate,up,down}_exps.weight of a mapped file
 * (borrowed: must outlive the source). Layers without expert tensors give
 * STRATA_E_NOT_FOUND from get. Returns NULL on error (shapes inconsistent). */
struct experts_source *experts_mmap_init(const struct gguf_file *f, int n_layer,
                                         struct strata_error *err); /* owned: experts_free() */

/* The mmap source's tensor of (layer, which), or NULL (no such experts, or
 * not an mmap source). Borrowed from the file. */
const struct gguf_tensor_info *experts_mmap_tensor(const struct experts_source *src, int layer,
                                                   enum experts_which which);
/* Serves (layer, which) from `data` from now on: a copy of the tensor's bytes
 * (borrowed, must outlive the source), in kernels_pack's layout if packed
 * (then the rows per expert are a multiple of KERNELS_PACK_ROWS). Call
 * before any get of that tensor. Returns 0 or STRATA_E_INVALID. */
int experts_mmap_place(struct experts_source *src, int layer, enum experts_which which,
                       const void *data, int packed);

#endif
