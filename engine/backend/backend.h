/* engine/backend/backend.h: the compute seam of the forward pass (DESIGN.md,
 * STYLE.md rule 10). The model describes each step over tensors the backend
 * owns; engine/cpu (backend-cpu.h) implements it on the CPU kernels and the
 * worker pool, and a Vulkan backend implements the same members by recording
 * one command buffer per step.
 *
 *   struct backend *be = backend_cpu_init(&cpu_params, &err);   // engine/cpu
 *   struct backend_weights *set = be->ops->weights_bind(be->ctx, descs, n, &bp, handles, &info,
 * &err); struct backend_tensor *x = be->ops->tensor_alloc(be->ctx, BACKEND_F32, B, n_embd, &err);
 *   be->ops->begin(be->ctx, &step, &err);                 // a step: one batch
 *   be->ops->tensor_write(be->ctx, ids, 0, host_ids, n);  // token ids in
 *   be->ops->embed(be->ctx, handles[TOK_EMBD], ids, n, x);
 *   ... rmsnorm, matmul, rope, kv_write, attention, swiglu, add ... (recorded)
 *   be->ops->tensor_read(be->ctx, logits, 0, host_logits, n_out); // logits out
 *   be->ops->submit(be->ctx, &err);                       // runs / queues the recording
 *   be->ops->wait(be->ctx, &err);                         // host_logits valid now
 *   be->ops->weights_free(be->ctx, set); be->ops->tensor_free(be->ctx, x);
 *   backend_free(be);
 *
 * Weights are bound once at load (weights_bind): the model hands each
 * matrix's file bytes, type, shape and layout, and the backend decides where
 * and how it keeps them (the CPU copies them into one huge-page arena with
 * K-quants in its 16-row packed layout; a GPU uploads them). Activations are
 * tensors the backend allocates (tensor_alloc), and the KV cache's block
 * memory comes from the backend's kv_store_init (engine/kv keeps the block
 * tables and the prefix cache). The host reaches tensor bytes only through
 * tensor_write / tensor_read.
 *
 * Recording: begin opens a step; every op after it is recorded, not run, and
 * ops run in the order they were recorded when submit hands the recording
 * over; wait returns when all of it has run. A step may be submitted in
 * several pieces (the MoE layers of a tiered model read their expert picks
 * back, see moe_ffn), but a dense model's step is one submit, so a GPU
 * backend needs no host round trip inside a token. Host memory an op or a
 * tensor_write reads, and memory a tensor_read writes, stays the caller's and
 * must stay valid until the wait after the submit that runs it. A begin
 * drops whatever was recorded and not submitted (an error path just returns).
 *
 * Tensors are buffers of n_rows x n_cols elements (their capacity); each op
 * reads and writes a row-major (rows, cols) array whose shape its arguments
 * give (asserted to fit), so one buffer serves several widths (a dense FFN and
 * a shared expert, K rows seen as (n_tok * n_head_kv, head_dim) for the k-norm).
 *
 * A second backend beside the first: the expert seam (engine/experts) says
 * which tier holds each routed expert: a device slot (a struct backend_mat
 * with .w, bound to the backend that computes it) or host memory (.host: a
 * RAM-tier copy or the file's pages). A backend without BACKEND_CAP_HOST_MATS
 * (a GPU) cannot take the host ones, so the model gives those experts to a
 * CPU backend instance (model_params.backend_cold): the same moe_ffn op on
 * both, each with a table that names only the experts it computes (unnamed
 * entries contribute nothing). The model reads the layer's input, picks and
 * weights back from the GPU step (tensor_read, at the submit that brings
 * the picks to the host anyway), runs a step of its own on the CPU backend
 * over them, and writes that partial sum into the GPU step (tensor_write,
 * then add after the GPU's own moe_ffn). Results of such a split may differ
 * from one backend's in the last bits (another summation order; tested in
 * tests/engine/experts); a single backend's never depend on which tier an
 * expert came from.
 *
 * Threading: a backend and everything it hands out belong to the thread that
 * runs the forward pass (the scheduler's); the backend parallelises inside
 * (the CPU's pool). Results never depend on the thread count.
 */
#ifndef STRATA_BACKEND_H
#define STRATA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/error.h"
#include "engine/core/progress.h"
#include "engine/kv/kv.h"
#include "engine/quant/quant.h"

enum backend_dtype {
    BACKEND_F32 = 0, /* activations, logits, expert weights */
    BACKEND_I32 = 1, /* token ids, positions, sequence ids, expert picks, row ids */
};

/* A tensor the backend owns. Each backend allocates a larger struct that
 * begins with this one (the CPU's adds the host address); the rest is
 * opaque to its callers. */
struct backend_tensor {
    enum backend_dtype dtype;
    int64_t n_rows, n_cols; /* capacity, in elements */
};

/* How a matrix's rows sit in memory. */
enum backend_layout {
    BACKEND_LAYOUT_ROWS = 0,   /* GGUF rows: row r at byte r * row_bytes */
    BACKEND_LAYOUT_PACK16 = 1, /* 16-row groups of Q4_K / Q6_K / Q4_0 (engine/cpu/kernels-pack.c):
                                  what the CPU backend makes of some matrices; same bytes a row */
};

/* A matrix in host memory: the file's bytes, or a host copy of them. */
struct backend_host_mat {
    const void *data;     /* borrowed: n_rows * row_bytes bytes */
    enum quant_type type; /* block format of the rows */
    int64_t n_rows;
    int64_t n_cols;   /* elements per row (a multiple of the type's block size) */
    size_t row_bytes; /* quant_row_size(type, n_cols) */
    enum backend_layout layout;
};

/* What a bound weight is used for. */
enum backend_use {
    BACKEND_USE_MATMUL = 0, /* multiplied by activations (matmul, moe_ffn) */
    BACKEND_USE_ROWS = 1,   /* rows gathered and dequantized to f32 (embed) */
    BACKEND_USE_VEC = 2,    /* an F32 vector (norm weights, biases, rope factors): n_rows 1 */
};

struct backend_weight_desc {
    const char *name;             /* borrowed during the call, for messages: the tensor's name */
    struct backend_host_mat host; /* the bytes (layout ROWS); borrowed until weights_free */
    int64_t n_expert;             /* > 1: a stack of routed experts, n_rows / n_expert rows each
                                     (experts stored one after the other); 0 or 1 otherwise */
    enum backend_use use;
    /* The layer the tensor belongs to (blk.<layer>.*; name holds only the part
     * after the prefix), when in_layer: how a backend over several devices by
     * layer (backend-split.h) places it. false: a model-wide tensor. */
    bool in_layer;
    int layer;
};

struct backend_weight;  /* one bound matrix or vector: opaque, lives as long as its set */
struct backend_weights; /* the set one weights_bind call made */

struct backend_bind_params {
    /* May copy the bytes into memory the backend owns and lay them out as it
     * computes them fastest. false: compute from the host bytes in place (the
     * CPU then reads the file's pages; a GPU ignores it for what it must
     * upload). The model passes model_params.repack and its memory checks. */
    bool copy;
    /* The host bytes are a file mapping: once a matrix is copied, its whole
     * source pages may be dropped from the mapping (MADV_DONTNEED; the page
     * cache keeps them, RSS stops counting them). Never for heap memory. */
    bool drop_source;
    /* Bytes copied or uploaded so far, phase "copying weights" (borrowed;
     * NULL = nobody asks). */
    const struct strata_progress *progress;
};

/* What weights_bind did, for logs and /status. */
struct backend_bind_info {
    uint64_t copied_bytes; /* bytes of matrices copied into backend memory */
    uint64_t packed_bytes; /* of which in a layout other than ROWS */
};

/* A matrix an op multiplies: a bound weight (expert `index` of a stack), or
 * host bytes (the RAM or file tier of an expert; BACKEND_CAP_HOST_MATS). */
struct backend_mat {
    const struct backend_weight *w; /* borrowed; NULL: use host */
    int64_t index;                  /* expert of a stacked w; 0 otherwise */
    struct backend_host_mat host;   /* when w is NULL; data borrowed until the wait */
};

/* One matrix of a matmul (all of a call share the input). */
struct backend_mm {
    struct backend_mat w;
    struct backend_tensor *y; /* (n_rows, w's rows) f32 */
};

#define BACKEND_MM_MAX 4 /* jobs of one matmul: Q, K, V; gate, up and the shared gate */

/* A step: the batch its attention reads and writes. */
struct backend_step {
    int n_tok;           /* entries of the batch */
    int n_kv_max;        /* the largest pos + 1: attention spans at most this */
    struct kv_cache *kv; /* borrowed: made over this backend's kv_store_init; NULL for a
                            step without attention (the cold experts' step) */
    const int32_t *seq;  /* (n_tok) host copy of the sequence ids, valid until the wait: */
    const int32_t *pos;  /* (n_tok) for backends that upload block tables at begin */
};

struct backend_rope {
    int n_rot;       /* rotated dims per head (<= head_dim, even) */
    int mode;        /* 0 = adjacent pairs (llama), 2 = neox halves (qwen) */
    float freq_base; /* theta base */
    float freq_scale;
    float ext_factor;  /* YaRN ramp mix: 1 for YaRN, else 0 */
    float attn_factor; /* magnitude scale (1) */
    int n_ctx_orig;    /* YaRN: the training context the correction dims come from */
    const struct backend_weight *freq_factors; /* VEC (n_rot / 2) divisors, or NULL */
};

/* Causal attention of n_tok query rows against the KV cache. */
struct backend_attn {
    const struct backend_tensor *q;         /* (n_tok, n_head * head_dim_k), roped */
    struct backend_tensor *out;             /* (n_tok, n_head * head_dim_v) */
    const struct backend_tensor *seq, *pos; /* (n_tok) I32: token t attends 0 .. pos[t] of seq[t] */
    struct kv_cache *kv;                    /* borrowed: rows of every attended position written */
    int layer, n_tok;
    int n_head, n_head_kv; /* query head h reads KV head h / (n_head / n_head_kv) */
    int head_dim_k, head_dim_v;
    float scale; /* 1 / sqrt(head_dim_k) */
};

/* Router of a MoE layer: softmax over n_expert logits per token, the top k
 * (k passes, ties to the lower id), their probabilities as weights,
 * renormalised to sum 1 when norm_topk, then times scale unless it is 0 or 1
 * (llama.cpp's build_moe_ffn; the model's arch table picks norm_topk). */
struct backend_route {
    struct backend_tensor *logits; /* (n_tok, n_expert): softmaxed in place */
    struct backend_tensor *sel;    /* (n_tok, k) I32: picked expert ids, best first */
    struct backend_tensor *sel_w;  /* (n_tok, k) F32: their weights */
    int n_tok, n_expert, k;
    bool norm_topk;
    float scale;
};

/* The three matrices of one routed expert. */
struct backend_expert {
    struct backend_mat gate, up; /* (n_ff_exp, n_embd) */
    struct backend_mat down;     /* (n_embd, n_ff_exp) */
};

/* Routed experts of a MoE layer: out[t] = sum over j in slot order of
 * sel_w[t, j] * down(silu(gate x[t]) * up x[t]) of expert sel[t, j], for the
 * picks whose expert the table names (gate.w or gate.host.data set); others
 * add nothing. Every named expert of one call has the same types and shape. */
struct backend_moe {
    const struct backend_tensor *x;       /* (n_tok, n_embd) normalised input */
    const struct backend_tensor *sel;     /* (n_tok, k) I32 from moe_route */
    const struct backend_tensor *sel_w;   /* (n_tok, k) F32 */
    const struct backend_expert *experts; /* (n_expert) borrowed until the wait */
    struct backend_tensor *out;           /* (n_tok, n_embd) */
    int n_tok, k, n_expert;
    int64_t n_embd, n_ff;
    bool accumulate; /* add into out instead of overwriting it */
    /* Optional (NULL; only for a backend with BACKEND_CAP_MOE_LATE): late[e]
     * 1 marks an expert of the table whose weights are still arriving (the
     * expert store's reads in flight). The others are computed first, then
     * wait(wait_arg) runs (on the thread running the step) and returns once
     * the late ones are in memory: 0, or nonzero when they never will be
     * (their picks are then left out; the caller fails the step with the
     * error its wait kept). Same results as without late. */
    const uint8_t *late; /* (n_expert) borrowed until the wait */
    int (*wait)(void *arg);
    void *wait_arg;
};

/* The next-token rule of backend_ops.sample (engine/sample/sampler.h's
 * pipeline without logit bias, penalties and logprobs, which stay on the
 * host): temperature <= 0 is greedy (argmax, lowest id on ties); otherwise
 * top_k (required: 1 .. the backend's limit), softmax, top_p, min_p, the
 * temperature, and a draw with the host's uniform u. */
struct backend_sample {
    int top_k;
    float top_p;       /* >= 1: off */
    float min_p;       /* <= 0: off */
    float temperature; /* <= 0: greedy */
};

#define BACKEND_CAP_HOST_MATS 1u /* computes backend_mat.host matrices (host-tier experts) */
#define BACKEND_CAP_MOE_LATE 2u  /* takes backend_moe.late (computes the present experts first) */

struct backend_ops {
    const char *name; /* "cpu", "vulkan" */
    unsigned caps;    /* BACKEND_CAP_* */

    /* ---- weights, tensors, KV storage (outside a step) ---- */

    /* 1 if the backend computes a weight of this type and row width for
     * `use` (the model refuses the file otherwise). */
    int (*supports)(void *ctx, enum quant_type type, int64_t n_cols, enum backend_use use);
    /* Binds n weights in one set (one arena): out[i] is desc[i]'s handle
     * (borrowed: valid until the set is freed). Matrices bound twice (the
     * same host bytes: a tied output) are copied once. params NULL: no copy;
     * info may be NULL. Returns the set (owned: free with weights_free), or
     * NULL with err (nothing bound). */
    struct backend_weights *(*weights_bind)(void *ctx, const struct backend_weight_desc *desc,
                                            int n, const struct backend_bind_params *params,
                                            struct backend_weight **out,
                                            struct backend_bind_info *info,
                                            struct strata_error *err);
    /* Frees a set (its handles die with it). NULL is a no-op. */
    void (*weights_free)(void *ctx, struct backend_weights *set);
    /* Host bytes of expert `index` of w (0 for an unstacked one; -1: the
     * whole matrix, every expert of a stack) where the backend keeps w in
     * host memory (a RAM tier serves them, to this backend or another);
     * 0, STRATA_E_INVALID for a bad index, or STRATA_E_NOT_FOUND where w
     * lives in device memory. Optional (NULL: never host memory). */
    int (*weight_host)(void *ctx, const struct backend_weight *w, int64_t index,
                       struct backend_host_mat *out);
    /* A zeroed tensor (owned: free with tensor_free, outside a step), or
     * NULL with err. */
    struct backend_tensor *(*tensor_alloc)(void *ctx, enum backend_dtype dtype, int64_t n_rows,
                                           int64_t n_cols, struct strata_error *err);
    void (*tensor_free)(void *ctx, struct backend_tensor *t); /* NULL is a no-op */
    /* Block memory for a KV cache this backend computes attention over
     * (owned: kv_init_store steals it; kv_store_free otherwise). NULL with
     * err on failure. */
    struct kv_store *(*kv_store_init)(void *ctx, struct strata_error *err);

    /* ---- a step ---- */

    /* Opens a step (drops an unsubmitted recording) and reserves what its
     * attention needs. STRATA_E_NOMEM; STRATA_E_INVALID for a kv not made
     * over this backend's store. */
    int (*begin)(void *ctx, const struct backend_step *step, struct strata_error *err);
    /* Hands what was recorded since begin or the last submit over to run.
     * Returns 0 or the first error of recording (out of memory for scratch). */
    int (*submit)(void *ctx, struct strata_error *err);
    /* Returns when everything submitted has run; its first error, or 0. */
    int (*wait)(void *ctx, struct strata_error *err);

    /* ---- ops (recorded; run in order at submit) ---- */

    /* Rows [row0, row0 + n_rows) of t = host bytes at src (tensor dtype, row-major). */
    void (*tensor_write)(void *ctx, struct backend_tensor *t, int64_t row0, const void *src,
                         int64_t n_rows);
    /* Host dst = rows [row0, row0 + n_rows) of t; dst is valid after the wait. */
    void (*tensor_read)(void *ctx, const struct backend_tensor *t, int64_t row0, void *dst,
                        int64_t n_rows);
    /* out row t = row ids[t] of w (USE_ROWS) as f32, t < n. */
    void (*embed)(void *ctx, const struct backend_weight *w, const struct backend_tensor *ids,
                  int n, struct backend_tensor *out);
    /* dst row i = src row ids[i] for i < n; rows of n_cols. */
    void (*copy_rows)(void *ctx, const struct backend_tensor *src, const struct backend_tensor *ids,
                      int n, int64_t n_cols, struct backend_tensor *dst);
    /* y = x / rms(x) * w per row of n_cols; w: VEC (n_cols) or NULL; y may be x. */
    void (*rmsnorm)(void *ctx, const struct backend_tensor *x, const struct backend_weight *w,
                    struct backend_tensor *y, int64_t n_rows, int64_t n_cols, float eps);
    /* jobs[i].y = x . jobs[i].w^T for x: (n_rows, w's cols) f32; n_jobs <= BACKEND_MM_MAX, all
     * with the same row width, in one dispatch. */
    void (*matmul)(void *ctx, const struct backend_tensor *x, int64_t n_rows,
                   const struct backend_mm *jobs, int n_jobs);
    /* y[t, i] += b[i]: b VEC (n_cols). */
    void (*add_bias)(void *ctx, struct backend_tensor *y, const struct backend_weight *b,
                     int64_t n_rows, int64_t n_cols);
    /* x += y elementwise over (n_rows, n_cols). */
    void (*add)(void *ctx, struct backend_tensor *x, const struct backend_tensor *y, int64_t n_rows,
                int64_t n_cols);
    /* In-place rope of x: (n_tok, n_head * head_dim), token t at pos[t] (I32 tensor). */
    void (*rope)(void *ctx, struct backend_tensor *x, int n_tok, int n_head, int head_dim,
                 const struct backend_tensor *pos, const struct backend_rope *cfg);
    /* K and V rows of the n_tok tokens (k: (n_tok, n_head_kv * head_dim_k),
     * v likewise) into the cache at (layer, seq[t], pos[t]) as f16; the
     * blocks are reserved (kv_seq_reserve_pos) before the step. */
    void (*kv_write)(void *ctx, struct kv_cache *kv, int layer, const struct backend_tensor *k,
                     const struct backend_tensor *v, const struct backend_tensor *seq,
                     const struct backend_tensor *pos, int n_tok, int n_head_kv, int head_dim_k,
                     int head_dim_v);
    /* Causal attention (struct backend_attn). */
    void (*attention)(void *ctx, const struct backend_attn *a);
    /* y = silu(g) * u elementwise over (n_rows, n_cols); y may be g. */
    void (*swiglu)(void *ctx, const struct backend_tensor *g, const struct backend_tensor *u,
                   struct backend_tensor *y, int64_t n_rows, int64_t n_cols);
    /* The router's top-k (struct backend_route). */
    void (*moe_route)(void *ctx, const struct backend_route *r);
    /* Routed experts' FFN and weighted sum (struct backend_moe). */
    void (*moe_ffn)(void *ctx, const struct backend_moe *m);
    /* out[t, i] += sigmoid(gate[t]) * s[t, i]: the shared expert's gate;
     * gate: (n_rows, 1) logits. */
    void (*add_gated)(void *ctx, struct backend_tensor *out, const struct backend_tensor *s,
                      const struct backend_tensor *gate, int64_t n_rows, int64_t n_cols);

    /* Optional (NULL: the host samples from the logits it reads back).
     * ids row r (I32 (n_rows, 1)) = the next token of logits row r (rows of
     * n_vocab) by p, the same rule for every row; u (F32 (n_rows, 1)): the
     * host's uniform draws in [0, 1), one per row (read when temperature >
     * 0). Returns 0 when recorded, STRATA_E_UNSUPPORTED for a rule the
     * backend does not take (nothing recorded: the caller reads the logits
     * back instead). */
    int (*sample)(void *ctx, const struct backend_tensor *logits, int n_rows, int64_t n_vocab,
                  const struct backend_sample *p, const struct backend_tensor *u,
                  struct backend_tensor *ids);

    /* Frees ctx (tensors, sets and stores it handed out must be freed first). */
    void (*free)(void *ctx);
};

struct backend {
    const struct backend_ops *ops; /* borrowed: static table */
    void *ctx;                     /* owned: freed by ops->free */
};

void backend_free(struct backend *be); /* NULL is a no-op */

#endif
