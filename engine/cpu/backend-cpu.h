/* engine/cpu/backend-cpu.h: the CPU implementation of the backend seam
 * (engine/backend/backend.h) over the kernels (kernels.h), the elementwise
 * and attention ops (ops.h) and the worker pool.
 *
 *   struct backend_cpu_params cp = backend_cpu_params_default();
 *   cp.pool = pool;                                   // borrowed; NULL = caller thread only
 *   struct backend *be = backend_cpu_init(&cp, &err);
 *   struct model_params mp = model_params_default();
 *   mp.backend = be;                                  // borrowed by the model
 *   ... model_load / model_forward / model_free ...
 *   backend_free(be);
 *
 * What it does with the seam: weights_bind copies the matrices into one
 * anonymous huge-page arena (Q4_K / Q6_K / Q4_0 in the 16-row packed layout
 * where the active ISA has packed kernels, cpu-weights.c) or, without
 * params.copy, computes from the file's pages; tensors are host memory;
 * the KV store is engine/kv's host store; a step's ops are recorded into a
 * command list and run in order at submit (cpu-impl.h), so wait has nothing
 * left to wait for. Arithmetic and its order are those of the forward pass
 * before the seam (bit-identical logits).
 *
 * Threading: one thread records and submits (the forward thread); the pool's
 * workers run row ranges inside an op. The pool must outlive the backend.
 */
#ifndef STRATA_BACKEND_CPU_H
#define STRATA_BACKEND_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backend/backend.h"

struct pool;
struct kern_mat;

struct backend_cpu_params {
    struct pool *pool; /* borrowed; NULL = every op on the calling thread */
    /* Tests: called after every matmul job has run (dense and expert
     * matmuls alike) with the weights, the quantized input the kernels read
     * and the output, on the forward thread. NULL = none. */
    void (*on_matmul)(void *arg, const struct kern_mat *w, const void *xq, size_t xq_stride,
                      int64_t n_tok, const float *y, int64_t ldy);
    void *on_matmul_arg; /* borrowed */
};
struct backend_cpu_params backend_cpu_params_default(void);

struct backend *backend_cpu_init(const struct backend_cpu_params *params,
                                 struct strata_error *err); /* owned: free with backend_free() */

#endif
