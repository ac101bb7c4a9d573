/* engine/backend/backend.h: the compute seam of the forward pass (DESIGN.md,
 * STYLE.md rule 10). Every matmul, attention and elementwise op of
 * model-forward.c goes through this vtable; backend-cpu.c implements it on
 * kernels.h + ops.h + the pool, and a Vulkan backend will implement the same
 * members later.
 *
 *   struct backend *be = backend_cpu_init(pool, &err);   // pool borrowed, may be NULL
 *   struct backend_matmul mm[3] = {{&wq, xq, stride, n_tok, q, n_q}, ...};
 *   be->ops->matmul(be->ctx, mm, 3);                      // Q, K, V in one dispatch
 *   backend_free(be);
 *
 * Buffers are host f32 arrays laid out (n_tok, width) row-major unless a
 * member says otherwise. Threading: members are called from the forward
 * thread only; the backend parallelises inside (row ranges per task, so a
 * NUMA split can steer rows). Results never depend on the thread count.
 */
#ifndef STRATA_BACKEND_H
#define STRATA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "engine/core/error.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/ops.h"

struct pool;
struct kv_cache;

/* y[t*ldy + r] = dot(w row r, activation row t) for every row r of w. */
struct backend_matmul {
    const struct kern_mat *w; /* borrowed */
    const void *xq;           /* (n_tok, xq_stride bytes) from quantize_act for w->type */
    size_t xq_stride;
    int64_t n_tok;
    float *y; /* (n_tok, ldy) f32 */
    int64_t ldy;
};

/* Causal attention of n_tok query rows against the KV cache. */
struct backend_attn {
    const float *q;        /* (n_tok, n_head * head_dim_k), roped */
    float *out;            /* (n_tok, n_head * head_dim_v) */
    const int32_t *seq_id; /* (n_tok) */
    const int32_t *pos;    /* (n_tok): token t attends positions 0 .. pos[t] of its sequence */
    struct kv_cache *kv;   /* borrowed; rows for every attended position are already written */
    int layer;
    int n_tok;
    int n_head, n_head_kv; /* query head h reads KV head h / (n_head / n_head_kv) */
    int head_dim_k, head_dim_v;
    float scale; /* 1 / sqrt(head_dim_k) */
};

struct backend_ops {
    const char *name; /* "cpu", "vulkan" */
    /* Runs n_jobs independent matmuls in one dispatch (Q+K+V, gate+up, experts). */
    void (*matmul)(void *ctx, const struct backend_matmul *jobs, int n_jobs);
    /* Converts n_rows f32 rows (x: (n_rows, n_cols)) into wtype's activation
     * format, xq: (n_rows, xq_stride bytes). */
    void (*quantize_act)(void *ctx, enum quant_type wtype, const float *x, int64_t n_rows,
                         int64_t n_cols, void *xq, size_t xq_stride);
    /* y = rmsnorm(x) * w per row; x, y: (n_rows, n_cols); w: (n_cols) or NULL; y may alias x. */
    void (*rmsnorm)(void *ctx, const float *x, const float *w, float *y, int64_t n_rows,
                    int64_t n_cols, float eps);
    /* In-place rope of x: (n_tok, n_head * head_dim), token t at pos[t]. */
    void (*rope)(void *ctx, float *x, int64_t n_tok, int n_head, int head_dim, const int32_t *pos,
                 const struct ops_rope_cfg *cfg);
    /* Makes sure attention over up to n_kv positions can run without
     * allocating (per-worker scratch). Returns 0 or STRATA_E_NOMEM. */
    int (*reserve)(void *ctx, int n_kv, struct strata_error *err);
    /* Causal attention over the KV cache (see struct backend_attn); the
     * largest pos[t] + 1 must have been reserved. */
    void (*attention)(void *ctx, const struct backend_attn *a);
    /* y = silu(g) * u elementwise over (n_rows, n_cols); y may alias g. */
    void (*swiglu)(void *ctx, const float *g, const float *u, float *y, int64_t n_rows,
                   int64_t n_cols);
    /* Frees ctx. */
    void (*free)(void *ctx);
};

struct backend {
    const struct backend_ops *ops; /* borrowed: static table */
    void *ctx;                     /* owned: freed by ops->free */
};

/* CPU backend over kernels.h; pool borrowed (must outlive the backend), NULL = caller thread. */
struct backend *backend_cpu_init(struct pool *pool,
                                 struct strata_error *err); /* owned: free with backend_free() */
void backend_free(struct backend *be);                      /* NULL is a no-op */

#endif
