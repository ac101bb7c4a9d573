/* gpu/vk-ops.h: the Vulkan kernels of the forward pass other than the
 * matrix products (gpu/vk-mm.h has those): embedding gather, row copies,
 * RMSNorm, RoPE, KV writes into the paged cache, attention (decode split-K
 * and causal prefill), softmax, SwiGLU, the adds, MoE routing, argmax and
 * top-k/top-p sampling. Each vkops_NAME records its dispatches into the
 * device's current recording (vk_rec_begin .. vk_rec_submit, gpu/vk.h) and
 * computes what backend.h's op of the same name computes on the CPU
 * (engine/cpu/ops.c, cpu-attn.c, cpu-moe.c), within float tolerance
 * (tests/gpu/test-vk-ops.c checks each against the CPU op).
 *
 *   struct vkops *o;
 *   vkops_init(dev, &o, &err);                         // pipelines, once
 *   vk_rec_begin(dev, &err);
 *   vkops_embed(o, &tok_embd, ids, n_tok, x);          // x: (n_tok, n_embd) f32
 *   vkops_rmsnorm(o, x, w, true, y, n_tok, n_embd, 1e-5f);
 *   ... vkmm_matmul (Q, K, V) ...
 *   vkops_rope(o, q, n_tok, n_head, head_dim, pos, &rope);
 *   vkops_kv_write(o, &kv, layer, k, v, seq, pos, n_tok, n_head_kv, hd, hd);
 *   vkops_attention(o, &kv, &attn);                    // out: (n_tok, n_head * hd)
 *   vk_rec_submit(dev, &err); vk_rec_wait(dev, &err);
 *   vkops_free(o);
 *
 * Arguments: every tensor is a struct vk_bind (gpu/vk.h) whose bytes start
 * at the tensor's first element; f32 tensors are row-major (rows, cols),
 * I32 tensors (ids, positions, sequences, picks) likewise. Shapes are the
 * op's arguments as in backend.h. A bind may be passed twice (y = x) where
 * backend.h allows the alias.
 *
 * The KV cache (struct vkops_kv): engine/kv/kv.h's block layout, in f16:
 *   block: k (n_layer, n_part, n_block, n_embd_k / n_part), then v likewise
 * where n_part is kv_params.n_head_kv (the parts a row is stored in). Block
 * b lives in pool piece b / blocks_per_piece at byte
 * (b % blocks_per_piece) * block_bytes (block_bytes = kv_block_bytes()),
 * so a pool larger than one binding (max_storage_range: 128 MiB on
 * lavapipe, 4 GiB - 1 on NVIDIA) is up to VKOPS_KV_PIECES buffers. The block
 * table is an I32 buffer (n_seq_max, table_stride): entry i of sequence s is
 * the block that holds positions [i * n_block, (i + 1) * n_block), copied
 * from kv_seq_block() by the backend at begin (kv_seq_reserve_pos runs
 * before the step, so the table holds every block the step writes).
 *
 * Attention: query head h reads KV head h / (n_head / n_head_kv) (GQA);
 * token t attends positions 0 .. pos[t] of seq[t]. Two kernels:
 *   decode (split-K): one workgroup per (token, KV head, chunk of positions)
 *     computes all query heads of the KV head's group over its chunk with
 *     an online softmax and writes a partial (max, sum, weighted V); the
 *     workgroup that finishes a (token, KV head) last merges the chunks
 *     (a counter per pair in the scratch), so there is no second launch and
 *     no second barrier per layer. The number of chunks
 *     grows with n_kv_max, so a long context fills the device instead of
 *     serialising over positions in one workgroup (an H200 has 132 SMs:
 *     one sequence's 8 KV heads alone would use 8 of them).
 *   prefill (n_tok above VKOPS_ATTN_DECODE_MAX, and with host_seq given,
 *     runs of one sequence of 4 tokens or more on average): one workgroup
 *     per (tile of 16 / G consecutive tokens, KV head), so each K/V tile
 *     loaded into shared memory serves up to 16 query rows; a tile spanning
 *     several sequences is processed once per sequence. Needs subgroups of
 *     a multiple of 8 (all real devices); otherwise the split serves all.
 * The split needs scratch (vkops_attn_scratch_bytes, an upper bound over
 * n_head_kv and the kernel choice: 0 when the split has one chunk, which
 * writes the output directly); the caller passes a device buffer of at
 * least that size, zeroed when allocated (vk_buf_alloc zeroes) and used
 * for nothing else: its first 256 KiB are the merge counters, which every
 * attention leaves zero again.
 *
 * Sampling (vkops_argmax, vkops_sample): on one row of logits per token;
 * the uniform random number comes from the host (engine/core/rng.h), so the
 * host's RNG decides and results are reproducible. See vkops_sample for
 * where the rule differs from engine/sample/sampler.c.
 *
 * Limits (asserted; vkops_attn_supported etc. say it before a model loads):
 * head dims even and <= VKOPS_HEAD_DIM_MAX, n_head / n_head_kv <=
 * VKOPS_GROUP_MAX, n_expert <= VKOPS_ROUTE_MAX, k <= VKOPS_ROUTE_K_MAX,
 * top_k <= VKOPS_SAMPLE_K_MAX, n_rot <= VKOPS_ROT_MAX.
 *
 * Ownership: a struct vkops is owned by its creator (vkops_free); binds are
 * borrowed and must stay valid until the recording's wait returns.
 * Threading: the device's thread only (gpu/vk.h).
 */
#ifndef STRATA_VK_OPS_H
#define STRATA_VK_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/error.h"
#include "engine/quant/quant.h"
#include "gpu/vk.h"

#define VKOPS_HEAD_DIM_MAX 256  /* head_dim_k, head_dim_v (shared memory: q of a group) */
#define VKOPS_GROUP_MAX 8       /* query heads per KV head (ops.h OPS_ATTN_GROUP_MAX) */
#define VKOPS_ATTN_DECODE_MAX 8 /* n_tok up to this: the split-K kernel; above: prefill */
#define VKOPS_KV_PIECES 4       /* buffers one KV pool may span */
#define VKOPS_ROUTE_MAX 1024    /* experts of one router */
#define VKOPS_ROUTE_K_MAX 32    /* experts picked per token */
#define VKOPS_SAMPLE_K_MAX 256  /* top_k of device sampling */
#define VKOPS_ROT_MAX 1024      /* rotated dims of rope */

struct vkops; /* the pipelines of these ops, created once per device */

/* Creates every pipeline. Owned: free with vkops_free. */
int vkops_init(struct vk_dev *d, struct vkops **out, struct strata_error *err);
void vkops_free(struct vkops *o); /* NULL is a no-op */

/* ---- gather ---- */

/* An embedding matrix in device memory, as whole-row pieces (one per
 * binding when it exceeds max_storage_range). Row r of piece i is at byte
 * (r - row0) * row_bytes of piece[i].data. */
struct vkops_piece {
    struct vk_bind data;
    int64_t row0, n_rows;
};
struct vkops_rows {
    enum quant_type type; /* F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K */
    int64_t n_rows, n_cols;
    size_t row_bytes; /* quant_row_size(type, n_cols) */
    int n_piece;
    const struct vkops_piece *piece; /* borrowed during the call */
};

/* True when vkops_embed gathers rows of this type and width. */
bool vkops_embed_supports(enum quant_type type, int64_t n_cols);
/* out row t = row ids[t] of w, dequantized to f32, t < n (ids I32). An id
 * outside [0, n_rows) gives a zero row. */
void vkops_embed(struct vkops *o, const struct vkops_rows *w, struct vk_bind ids, int n,
                 struct vk_bind out);
/* dst row i = src row ids[i] for i < n; rows of n_cols f32. An id whose
 * row lies outside src's binding gives a zero row. */
void vkops_copy_rows(struct vkops *o, struct vk_bind src, struct vk_bind ids, int n, int64_t n_cols,
                     struct vk_bind dst);

/* ---- elementwise and rows ---- */

/* y = x / rms(x) * w per row of n_cols (w: (n_cols) f32 when has_w, else
 * ignored: pass any bind); y may be x. One workgroup a row. */
void vkops_rmsnorm(struct vkops *o, struct vk_bind x, struct vk_bind w, bool has_w,
                   struct vk_bind y, int64_t n_rows, int64_t n_cols, float eps);
/* vkops_rmsnorm that also writes y quantized to q8 blocks of 32 into yq
 * (VKOPS_Q8_BLOCK_BYTES a block, vkops_q8_bytes a tensor: op_rmsnorm.comp
 * gives the layout), the activations of the integer-dot matvec
 * (vkmm_matmul_q8x). y may be x (in place) for rows of at most 4096
 * (op_rmsnorm.comp's one-pass form). false, recording nothing, where n_cols
 * is not a multiple of 32, a binding is not 16-byte aligned, or y is x on a
 * wider row (or under STRATA_VK_NORM_Q8=2pass). */
#define VKOPS_Q8_BLOCK_BYTES 48
uint64_t vkops_q8_bytes(int64_t n_rows, int64_t n_cols);
bool vkops_rmsnorm_q8(struct vkops *o, struct vk_bind x, struct vk_bind w, bool has_w,
                      struct vk_bind y, struct vk_bind yq, int64_t n_rows, int64_t n_cols,
                      float eps);
/* x's rows as q8 blocks alone (no norm; yq as vkops_rmsnorm_q8's): the
 * activations of the integer-dot prefill tiles (vkmm_matmul_tq8) where no
 * norm wrote them. false, recording nothing, under the same conditions. */
bool vkops_quant_q8(struct vkops *o, struct vk_bind x, struct vk_bind yq, int64_t n_rows,
                    int64_t n_cols);
/* In-place softmax of each row of n_cols. */
void vkops_softmax(struct vkops *o, struct vk_bind x, int64_t n_rows, int64_t n_cols);
/* y = silu(g) * u over (n_rows, n_cols); y may be g. */
void vkops_swiglu(struct vkops *o, struct vk_bind g, struct vk_bind u, struct vk_bind y,
                  int64_t n_rows, int64_t n_cols);
/* x += y over (n_rows, n_cols). */
void vkops_add(struct vkops *o, struct vk_bind x, struct vk_bind y, int64_t n_rows, int64_t n_cols);
/* y[t, i] += b[i]; b: (n_cols) f32. */
void vkops_add_bias(struct vkops *o, struct vk_bind y, struct vk_bind b, int64_t n_rows,
                    int64_t n_cols);
/* out[t, i] += sigmoid(gate[t]) * s[t, i]; gate: (n_rows) f32 logits. */
void vkops_add_gated(struct vkops *o, struct vk_bind out, struct vk_bind s, struct vk_bind gate,
                     int64_t n_rows, int64_t n_cols);

/* ---- rope ---- */

struct vkops_rope {
    int n_rot;       /* rotated dims per head (<= head_dim, even, <= VKOPS_ROT_MAX) */
    int mode;        /* 0 = adjacent pairs (llama), 2 = neox halves (qwen) */
    float freq_base; /* theta base */
    float freq_scale;
    float ext_factor;  /* YaRN ramp mix: 1 for YaRN, else 0 */
    float attn_factor; /* magnitude scale (1) */
    int n_ctx_orig;    /* YaRN: the training context the correction dims come from */
    bool has_freq_factors;
    struct vk_bind freq_factors; /* (n_rot / 2) f32 divisors when has_freq_factors */
};

/* In-place rope of x: (n_tok, n_head * head_dim), token t at pos[t] (I32). */
void vkops_rope(struct vkops *o, struct vk_bind x, int n_tok, int n_head, int head_dim,
                struct vk_bind pos, const struct vkops_rope *cfg);

/* ---- KV cache and attention ---- */

struct vkops_kv {
    int n_piece;                          /* 1 .. VKOPS_KV_PIECES */
    struct vk_bind pool[VKOPS_KV_PIECES]; /* block memory (layout above) */
    int blocks_per_piece;                 /* blocks in each piece but maybe the last */
    uint64_t block_bytes;                 /* kv_block_bytes(&params) */
    struct vk_bind table;                 /* I32 (n_seq_max, table_stride) block ids */
    int table_stride;                     /* entries a sequence's row has */
    int n_layer, n_block, n_part;         /* kv_params n_layer, n_block, n_head_kv */
    int n_embd_k, n_embd_v;               /* f16 elements of a whole K (V) row */
};

/* K and V rows of n_tok tokens (k: (n_tok, n_head_kv * head_dim_k) f32, v
 * likewise) into the cache at (layer, seq[t], pos[t]) as f16 (round to
 * nearest even, as ops_f32_to_f16_row). */
void vkops_kv_write(struct vkops *o, const struct vkops_kv *kv, int layer, struct vk_bind k,
                    struct vk_bind v, struct vk_bind seq, struct vk_bind pos, int n_tok,
                    int n_head_kv, int head_dim_k, int head_dim_v);

/* What follows a layer's Q, K and V projections, in one dispatch: per head
 * of q (and of k) an optional RMSNorm with weight q_norm (k_norm: (head_dim_k)
 * f32, eps_q, eps_k), then rope (the rope's n_rot <= head_dim_k) of q and k
 * in place, then K and V rows into the cache as vkops_kv_write. q: (n_tok,
 * n_head * head_dim_k), k: (n_tok, n_head_kv * head_dim_k), v: (n_tok,
 * n_head_kv * head_dim_v) f32; results as vkops_rmsnorm, vkops_rope and
 * vkops_kv_write one after the other, within float rounding. */
struct vkops_rope_kv {
    struct vk_bind q, k, v, seq, pos;
    int layer, n_tok, n_head, n_head_kv, head_dim_k, head_dim_v;
    struct vkops_rope rope;
    bool norm_q, norm_k;
    struct vk_bind q_norm, k_norm;
    float eps_q, eps_k;
};

/* True when vkops_rope_kv takes these head dims and rotated dims. */
bool vkops_rope_kv_supported(int head_dim_k, int head_dim_v, int n_rot);
void vkops_rope_kv(struct vkops *o, const struct vkops_kv *kv, const struct vkops_rope_kv *a);

struct vkops_attn {
    struct vk_bind q;        /* (n_tok, n_head * head_dim_k) f32, roped */
    struct vk_bind out;      /* (n_tok, n_head * head_dim_v) f32 */
    struct vk_bind seq, pos; /* (n_tok) I32 */
    struct vk_bind scratch;  /* vkops_attn_scratch_bytes(...) bytes of device memory */
    int layer, n_tok;
    int n_head, n_head_kv; /* query head h reads KV head h / (n_head / n_head_kv) */
    int head_dim_k, head_dim_v;
    int n_kv_max; /* the step's largest pos + 1 (backend_step.n_kv_max) */
    float scale;  /* 1 / sqrt(head_dim_k) */
    /* Optional (NULL: unknown): (n_tok) host copy of seq (backend_step.seq),
     * borrowed during the call; it picks the kernel (below). */
    const int32_t *host_seq;
    /* Optional (buf NULL: none): out also as q8 blocks (vkops_rmsnorm_q8's
     * yq layout, vkops_q8_bytes(n_tok, n_head * head_dim_v) bytes), the
     * integer-dot matvec's x for the o projection; written by the split-K
     * kernel where head_dim_v is a multiple of 32 (and yq.off of 16). */
    struct vk_bind yq;
    /* Optional (NULL: none): the step's rope, norms and KV write
     * (vkops_rope_kv's arguments: q above is then unroped, rope->q the same
     * tensor, and layer, n_tok and the heads the same). The split-K kernel
     * does that work itself (op_attn_rope.comp), one dispatch fewer; q and
     * k stay unroped in their buffers. The caller promises that each
     * sequence has one token in the batch (the new row is read only by its
     * own token). Where the split does not run, vkops_rope_kv is recorded
     * first, as asked. */
    const struct vkops_rope_kv *rope;
};

/* True when the shape is within the limits above. */
bool vkops_attn_supported(int n_head, int n_head_kv, int head_dim_k, int head_dim_v);
/* Scratch an attention of this shape may need (the split's partials;
 * 0 when the split would have one chunk). */
uint64_t vkops_attn_scratch_bytes(int n_tok, int n_head, int head_dim_v, int n_kv_max);
/* Causal attention over the paged cache (the kernels above). Returns true
 * when it also wrote a->yq (the split-K kernel, yq given, head_dim_v a
 * multiple of 32), the same bytes vkops_quant_q8 makes of out. */
bool vkops_attention(struct vkops *o, const struct vkops_kv *kv, const struct vkops_attn *a);

/* ---- MoE routing ---- */

/* Per token (one workgroup each): softmax of logits (n_tok, n_expert) in
 * place, the top k by k passes (ties to the lower id) into sel (n_tok, k)
 * I32 best first and their probabilities into sel_w (n_tok, k) f32,
 * renormalised to sum 1 when norm_topk, then times scale unless it is 0 or
 * 1 (backend.h struct backend_route, engine/cpu/cpu-moe.c). */
void vkops_moe_route(struct vkops *o, struct vk_bind logits, struct vk_bind sel,
                     struct vk_bind sel_w, int n_tok, int n_expert, int k, bool norm_topk,
                     float scale);

/* ---- sampling ---- */

/* ids[t] = the index of the largest logit of row t (n_rows rows of n_vocab),
 * lowest index on ties; NaN and +-inf count as -inf (sampler.c); -1 when
 * every logit is. */
void vkops_argmax(struct vkops *o, struct vk_bind logits, int n_rows, int64_t n_vocab,
                  struct vk_bind ids);

struct vkops_sample {
    int top_k;         /* 1 .. VKOPS_SAMPLE_K_MAX */
    float top_p;       /* >= 1: off */
    float min_p;       /* <= 0: off */
    float temperature; /* > 0 */
};

/* ids[t] = a token drawn from row t by sampler.c's rule after its logit
 * bias and penalties (applied by the caller): the top_k largest logits
 * (ties to the lower id, best first), softmax at temperature 1 over them,
 * the smallest prefix whose mass reaches top_p, min_p against the best,
 * then a draw at `temperature` with uniform u[t] in [0, 1) (n_rows f32,
 * from the host's RNG): the first candidate whose running sum of
 * exp((logit - max) / T) exceeds u * the total. Differences from
 * sampler.c: top_k must be set (the device never sorts the whole
 * vocabulary: top_k = 0 with temperature > 0 stays on the host); with
 * fewer finite logits than top_k and top_p off, sampler.c draws in id
 * order and this in sorted order (same distribution, another pick for the
 * same u); and the sums are f32 where sampler.c sums in double (the top_p
 * prefix sum is compensated, so only a draw whose u lies within ~1e-6 of
 * a boundary may pick the neighbour). Selection: a radix select (five
 * passes over the vocabulary for any top_k), or top_k argmax passes when
 * more than 512 logits tie at the k-th value. */
void vkops_sample(struct vkops *o, struct vk_bind logits, int n_rows, int64_t n_vocab,
                  const struct vkops_sample *p, struct vk_bind u, struct vk_bind ids);

#endif
