/* engine/cpu/cpu-impl.h: internals of the CPU backend shared by its files:
 * backend-cpu.c (the vtable, tensors, the recording and its executor, the
 * elementwise ops), cpu-matmul.c (matmul and activation quantization),
 * cpu-attn.c (KV writes, attention), cpu-moe.c (router, routed experts) and
 * cpu-weights.c (binding, the weight arena).
 *
 * Recording: every op appends one struct cpu_cmd (its arguments resolved to
 * host addresses and kern_mats) to ctx->cmds; submit runs the list in order
 * on the calling thread, each op using the pool inside, and empties it. Scratch
 * an op needs (quantized activations, the MoE's grouped rows) is grown when
 * the op is recorded and only addressed when it runs, so a growth between
 * two recorded ops never leaves one with a stale pointer.
 *
 * Threading: the forward thread records and submits; the pool's workers run
 * row ranges inside one op at a time.
 */
#ifndef STRATA_CPU_IMPL_H
#define STRATA_CPU_IMPL_H

#include "engine/backend/backend.h"
#include "engine/cpu/backend-cpu.h"
#include "engine/cpu/cpu-moe-numa.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/ops.h"

struct pool;
struct pool_task;

/* A tensor: the seam's header, then its host memory. */
struct cpu_tensor {
    struct backend_tensor t;
    void *data; /* owned: (n_rows, n_cols) of 4-byte elements */
};

/* A bound weight (what struct backend_weight points at). */
struct cpu_weight {
    struct kern_mat m;    /* the whole matrix (every expert of a stack); data: arena or host */
    int64_t n_expert;     /* >= 1 */
    int64_t rows_per;     /* rows of one expert: m.n_rows / n_expert */
    enum backend_use use; /* ROWS: m.data is the file's rows; VEC: m.data is (n_cols) f32 */
};

struct cpu_weights {
    struct cpu_weight *w; /* (n) */
    int n;
    void *raw; /* owned: munmap(raw, raw_bytes); NULL when nothing was copied */
    size_t raw_bytes;
};

/* Per-worker attention scratch. */
struct cpu_scratch {
    const uint16_t **k_rows; /* (cap) */
    const uint16_t **v_rows; /* (cap) */
    float *scores;           /* (OPS_ATTN_GROUP_MAX, cap) */
    int cap;
};

/* A growable scratch buffer (bytes). */
struct cpu_buf {
    void *p;
    size_t cap;
};

#define CPU_XQ_SLOTS BACKEND_MM_MAX

struct cpu_mm_job {
    struct kern_mat w;
    int slot; /* xq slot holding this job's quantized input */
    struct cpu_tensor *y;
};

enum cpu_op {
    CPU_WRITE,
    CPU_READ,
    CPU_EMBED,
    CPU_COPY_ROWS,
    CPU_RMSNORM,
    CPU_MATMUL,
    CPU_ADD_BIAS,
    CPU_ADD,
    CPU_ROPE,
    CPU_KV_WRITE,
    CPU_ATTN,
    CPU_SWIGLU,
    CPU_ROUTE,
    CPU_MOE,
    CPU_ADD_GATED,
};

struct cpu_cmd {
    enum cpu_op op;
    union {
        struct cpu_io { /* WRITE, READ */
            struct cpu_tensor *t;
            int64_t row0, n_rows;
            const void *src;
            void *dst;
        } io;
        struct cpu_embed { /* EMBED */
            const struct cpu_weight *w;
            const struct cpu_tensor *ids;
            int n;
            struct cpu_tensor *out;
        } embed;
        struct cpu_rows { /* COPY_ROWS */
            const struct cpu_tensor *src, *ids;
            int n;
            int64_t n_cols;
            struct cpu_tensor *dst;
        } rows;
        struct cpu_ew {                     /* RMSNORM, ADD_BIAS, ADD, SWIGLU, ADD_GATED */
            const struct cpu_tensor *a, *b; /* inputs (x; g, u; s, gate) */
            const float *w;                 /* norm weight or bias, NULL */
            struct cpu_tensor *y;
            int64_t n_rows, n_cols;
            float eps;
        } ew;
        struct cpu_mm { /* MATMUL */
            const struct cpu_tensor *x;
            int64_t n_rows;
            int n_jobs;
            struct cpu_mm_job jobs[BACKEND_MM_MAX];
            int quantize[BACKEND_MM_MAX]; /* 1: job i quantizes x into its slot */
        } mm;
        struct cpu_rope { /* ROPE */
            struct cpu_tensor *x;
            const struct cpu_tensor *pos;
            int n_tok, n_head, head_dim;
            struct ops_rope_cfg cfg;
        } rope;
        struct cpu_kvw { /* KV_WRITE */
            struct kv_cache *kv;
            const struct cpu_tensor *k, *v, *seq, *pos;
            int layer, n_tok, n_head_kv, head_dim_k, head_dim_v;
        } kvw;
        struct backend_attn attn;   /* ATTN */
        struct backend_route route; /* ROUTE */
        struct backend_moe moe;     /* MOE */
    } a;
};

struct cpu_ctx {
    struct backend_cpu_params params;
    struct pool *pool; /* borrowed, may be NULL */
    int n_workers;
    struct cpu_scratch *scratch; /* (n_workers) */
    struct cpu_cmd *cmds;        /* the recording: [0, n_cmds) */
    size_t n_cmds, cap_cmds;
    int err_code;                        /* first recording error (scratch growth), 0 */
    char err_msg[128];                   /* its message */
    struct cpu_buf xq[CPU_XQ_SLOTS];     /* quantized matmul inputs */
    struct cpu_buf moe_xq[2], moe_stage; /* MoE: grouped gate / up inputs, the quantized x */
    struct cpu_buf moe_g, moe_u, moe_dn; /* MoE: (rows, n_ff) gate, up; (rows, n_embd) down */
    struct cpu_buf moe_idx;              /* MoE: cnt, off, fill (n_expert), row_of (rows) */
    struct cpu_buf moe_jobs;             /* MoE: (2 n_expert) kern_mats, then as many jobs */
    struct cpu_buf moe_numa;             /* MoE split: (n_expert) addresses, ints, homes, groups */
    struct cpu_moe_numa_stats moe_numa_st; /* the divisions so far (cpu-moe-numa.h) */
    /* (n_jobs) of the next cpu_kjobs_run, which clears it: 1 + g gives job
     * i's rows all to pool group g, 0 lets the pool cut them; NULL: all 0 */
    const int8_t *kjob_on;
};

static inline struct cpu_tensor *cpu_t(const struct backend_tensor *t) {
    return (struct cpu_tensor *)t;
}
static inline const struct cpu_weight *cpu_w(const struct backend_weight *w) {
    return (const struct cpu_weight *)w;
}

/* backend-cpu.c */
void cpu_run_tasks(struct cpu_ctx *c, struct pool_task *t, int n);
/* Makes b hold at least n bytes; on failure records STRATA_E_NOMEM (the next
 * submit returns it) and returns -1. */
int cpu_buf_reserve(struct cpu_ctx *c, struct cpu_buf *b, size_t n);
/* Appends a command (NULL, with the error recorded, when out of memory). */
struct cpu_cmd *cpu_record(struct cpu_ctx *c, enum cpu_op op);
/* The kern_mat of a matrix operand (a bound weight's expert, or host bytes). */
struct kern_mat cpu_mat(const struct backend_mat *m);

/* y = silu(g) * u over (n_rows, n_cols), on the pool for large jobs; y may be g. */
void cpu_swiglu(struct cpu_ctx *c, const float *g, const float *u, float *y, int64_t n_rows,
                int64_t n_cols);

/* cpu-matmul.c */
void cpu_matmul_record(struct cpu_ctx *c, const struct backend_tensor *x, int64_t n_rows,
                       const struct backend_mm *jobs, int n_jobs);
void cpu_matmul_run(struct cpu_ctx *c, const struct cpu_cmd *cmd);
/* Runs n matmul jobs in one dispatch (the CPU's matmul core). */
struct cpu_kjob {
    const struct kern_mat *w;
    const void *xq;
    size_t xq_stride;
    int64_t n_tok;
    float *y;
    int64_t ldy;
};
void cpu_kjobs_run(struct cpu_ctx *c, const struct cpu_kjob *jobs, int n_jobs);
/* x: (n_rows, n_cols) f32 -> xq: (n_rows, stride bytes) in wtype's activation format. */
void cpu_quantize(struct cpu_ctx *c, enum quant_type wtype, const float *x, int64_t n_rows,
                  int64_t n_cols, void *xq, size_t stride);

/* cpu-moe-numa.c: group[e] (0/1) of every picked expert (cnt[e] > 0) of the
 * call on a pool with two groups, the call counted in c->moe_numa_st; NULL
 * without groups (or memory for the division: the pool's cut then). */
const int8_t *cpu_moe_numa_plan(struct cpu_ctx *c, const struct backend_moe *m, const int *cnt);
/* The kjob_on of a dispatch of per_expert jobs an expert with cnt[e] > 0,
 * in expert order, each 1 + on[e]; NULL when on is NULL. */
const int8_t *cpu_moe_numa_jobs(struct cpu_ctx *c, const int8_t *on, const int *cnt, int n_expert,
                                int per_expert);

/* cpu-attn.c */
int cpu_attn_reserve(struct cpu_ctx *c, int n_kv);
void cpu_kv_write_run(struct cpu_ctx *c, const struct cpu_cmd *cmd);
void cpu_attn_run(struct cpu_ctx *c, const struct backend_attn *a);
void cpu_attn_free(struct cpu_ctx *c);

/* cpu-moe.c */
void cpu_route_run(struct cpu_ctx *c, const struct backend_route *r);
void cpu_moe_record(struct cpu_ctx *c, const struct backend_moe *m);
void cpu_moe_run(struct cpu_ctx *c, const struct backend_moe *m);
/* cpu-moe-late.c: cpu_moe_run for a moe with late experts (backend_moe.late) */
void cpu_moe_run_late(struct cpu_ctx *c, const struct backend_moe *m);
/* The MoE call's weighted sum of its down rows (cpu-moe.c), shared by both paths. */
void cpu_moe_sum(struct cpu_ctx *c, const struct backend_moe *m, const int *row_of, int served);

/* cpu-weights.c */
int cpu_supports(void *ctx, enum quant_type type, int64_t n_cols, enum backend_use use);
struct backend_weights *cpu_weights_bind(void *ctx, const struct backend_weight_desc *desc, int n,
                                         const struct backend_bind_params *params,
                                         struct backend_weight **out,
                                         struct backend_bind_info *info, struct strata_error *err);
void cpu_weights_free(void *ctx, struct backend_weights *set);
int cpu_weight_host(void *ctx, const struct backend_weight *w, int64_t index,
                    struct backend_host_mat *out);

#endif
