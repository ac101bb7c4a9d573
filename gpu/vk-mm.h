/* gpu/vk-mm.h: the matrix kernels of the Vulkan backend: y = W x for GGUF
 * weight rows of F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, MXFP4 and
 * IQ4_NL, recorded into the current recording of gpu/vk.h.
 *
 *   struct vkmm *mm;
 *   vkmm_init(dev, &mm, &err);
 *   vkmm_prepare(mm, QUANT_Q4_0, &err);            // at weights_bind: compiles its pipelines
 *   struct vk_wpiece pc = {wbuf, 0, 0, 4096};      // one range holds all rows
 *   struct vk_wmat w = {QUANT_Q4_0, 4096, 4096, quant_row_size(QUANT_Q4_0, 4096), 0, 1, &pc};
 *   vk_rec_begin(dev, &err);
 *   vkmm_matmul(mm, &w, -1, (struct vk_bind){xbuf, 0, 0}, (struct vk_bind){ybuf, 0, 0}, n_tok);
 *   vk_rec_submit(dev, &err); vk_rec_wait(dev, &err);
 *   if (vkmm_status(mm, &err)) ...                 // a matmul that could not be recorded
 *
 * Kernels: n_tok <= 32 takes the matvec in passes of up to 8 tokens (mv_<type>.comp: each workgroup
 * a few whole rows, its lanes across the row, every weight unit dequantized once for all tokens of
 * the pass, subgroup sums); n_tok > 32 the tiled matmul (mm_<type>.comp: 64 x 64 tiles of rows x
 * tokens, the weight tile dequantized once per K step into shared memory); the expert-indexed forms
 * switch at 8 tokens (mm_id lists each expert's picks). Activations and results
 * are f32; the matvec and the f32 tiles quantize nothing on the activation
 * side, so their results are those of the dequantized weights times x up to
 * float summation order. Above 32 tokens (8 expert-indexed) the tiled matmul takes one of three
 * paths per type (vkmm_configure, gpu/vk-mm-coop.c): f32 FMA tiles, 8-bit integer dot products on
 * activations quantized to q8 blocks inside the kernel, or f16 cooperative matrices (tensor cores)
 * with f32 sums; the last two round the activations (q8 or f16), so their results differ from the
 * f32 tiles' by that rounding (tests/gpu/test-vk-mm.c bounds it).
 *
 * Matrices over several buffer ranges: one binding spans at most
 * vk_dev_info()->max_storage_range bytes (128 MiB on lavapipe), so a bigger
 * matrix comes as pieces of whole rows, an expert stack as pieces of whole
 * experts; each piece is one dispatch (or, expert-indexed, one dispatch
 * whose workgroups skip the pairs whose expert another piece holds).
 *
 * Errors: the record functions return nothing (the contract of the
 * backend's op calls); a call they cannot record (an unsupported type or
 * shape, pieces that do not cover the matrix, a pipeline that fails to
 * compile) records nothing and latches the first error, which vkmm_status
 * returns. Compiling at record time only happens for a type vkmm_prepare
 * was not called for.
 *
 * Ownership: struct vkmm owned by the caller (vkmm_free); the device is
 * borrowed and must outlive it. Buffers in vk_wmat / vk_bind are borrowed
 * and must live until the recording's wait returns.
 *
 * Threading: as gpu/vk.h: one thread (the device's) at a time.
 */
#ifndef STRATA_VK_MM_H
#define STRATA_VK_MM_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/error.h"
#include "engine/quant/quant.h"
#include "gpu/vk.h"

struct vkmm; /* the pipelines (made at first use or by vkmm_prepare) and the tuning */

/* One buffer range holding rows [row0, row0 + n_rows) of a matrix (rows of
 * the whole stack for an expert stack: whole experts only). off must be a
 * multiple of min_storage_align; n_rows * row_bytes must fit
 * max_storage_range. */
struct vk_wpiece {
    const struct vk_buf *buf; /* borrowed */
    uint64_t off;             /* bytes */
    int64_t row0, n_rows;
};

/* A weight matrix on the device: GGUF rows (layout ROWS), row r at byte
 * (r - piece.row0) * row_bytes of the piece that holds it. */
struct vk_wmat {
    enum quant_type type;
    int64_t n_rows;   /* rows of the whole tensor (a stack: n_expert x the expert's rows) */
    int64_t n_cols;   /* elements per row */
    size_t row_bytes; /* quant_row_size(type, n_cols) */
    int64_t n_expert; /* > 1: a stack of experts of n_rows / n_expert rows each; 0 or 1 otherwise */
    int n_piece;
    const struct vk_wpiece *piece; /* borrowed: (n_piece), in row order, covering every row */
};

/* Owned: free with vkmm_free. Makes no pipeline yet. */
int vkmm_init(struct vk_dev *d, struct vkmm **out, struct strata_error *err);
void vkmm_free(struct vkmm *mm); /* NULL is a no-op */

/* True when the kernels compute weights of `type` with rows of n_cols
 * elements: a multiple of the block size (256 for the K-quants, 32 for
 * Q8_0/Q4_0/MXFP4/IQ4_NL), of 4 for F32/F16/BF16 (16-byte x loads). */
bool vkmm_supports(enum quant_type type, int64_t n_cols);

/* Compiles the pipelines of `type` now (weights_bind time) so that no
 * recording has to. STRATA_E_UNSUPPORTED for a type vkmm_supports rejects. */
int vkmm_prepare(struct vkmm *mm, enum quant_type type, struct strata_error *err);

/* y[t, :] = W x[t, :]^T for t < n_tok: x (n_tok, n_cols) f32 at x.off, row
 * stride n_cols (a multiple of 4); y (n_tok, W's rows) f32, or (n_tok, the
 * expert's rows) for expert >= 0 (expert `expert` of a stack). Recorded. */
void vkmm_matmul(struct vkmm *mm, const struct vk_wmat *w, int64_t expert, struct vk_bind x,
                 struct vk_bind y, int64_t n_tok);

/* MoE: for t < n_tok, j < k: y[t*k + j, :] = W[sel[t, j]] x[r, :] with
 * r = t*k + j when x_per_pick (x has one row per pick), else t. sel (n_tok, k)
 * I32; an id outside [0, n_expert) writes nothing for its pick. y (n_tok * k,
 * the expert's rows) f32. Recorded. */
void vkmm_matmul_id(struct vkmm *mm, const struct vk_wmat *w, struct vk_bind x, bool x_per_pick,
                    struct vk_bind sel, int k, int64_t n_tok, struct vk_bind y);

/* The fused feed-forward input: y[t, :] = silu(G x[t, :]) * (U x[t, :])
 * (silu(g) = g / (1 + exp(-g)), engine/cpu/ops.c's swiglu) in one dispatch
 * instead of three; gate and up of one type and shape (their pieces may
 * differ). Otherwise as vkmm_matmul / vkmm_matmul_id. Recorded. */
void vkmm_matmul_glu(struct vkmm *mm, const struct vk_wmat *gate, const struct vk_wmat *up,
                     int64_t expert, struct vk_bind x, struct vk_bind y, int64_t n_tok);
void vkmm_matmul_id_glu(struct vkmm *mm, const struct vk_wmat *gate, const struct vk_wmat *up,
                        struct vk_bind x, bool x_per_pick, struct vk_bind sel, int k, int64_t n_tok,
                        struct vk_bind y);

/* vkmm_matmul of a plain matrix, up to 32 tokens (the matvec), with y also
 * added into res ((n_tok, W's rows) f32, not x): the residual add after an
 * output projection in the same dispatch, one dispatch and barrier fewer
 * (decode on a big GPU is made of dispatches). res gets exactly res + y
 * (one f32 add an element, as vkops_add). Recorded. */
bool vkmm_acc_ok(int64_t n_tok);
void vkmm_matmul_acc(struct vkmm *mm, const struct vk_wmat *w, struct vk_bind x, struct vk_bind y,
                     int64_t n_tok, struct vk_bind res);

/* vkmm_matmul_acc of one token followed by the RMSNorm of the sum: res +=
 * W x (y = W x as well), then tail->y = rmsnorm(res) * tail->w (f32, W's
 * rows wide, epsilon tail->eps) and tail->yq = tail->y as q8 blocks (the
 * layout of vkops_rmsnorm_q8's yq), in one dispatch: the last workgroup
 * to finish computes the norm (mv_body.glsl TAIL), which saves the norm's
 * own dispatch and barrier after the output and down projections of a
 * decode step. W: one piece (the counter spans one dispatch), rows a
 * multiple of 32; matvec workgroups a multiple of 8 lanes, subgroups of 8
 * or more (vkmm_acc_norm_ok). The norm equals vkops_rmsnorm_q8's up
 * to the order of the sum of squares. Recorded. */
struct vkmm_tail {
    struct vk_bind w, y, yq;
    float eps;
};
bool vkmm_acc_norm_ok(const struct vkmm *mm, const struct vk_wmat *w);
void vkmm_matmul_acc_norm(struct vkmm *mm, const struct vk_wmat *w, struct vk_bind x,
                          struct vk_bind y, struct vk_bind res, const struct vkmm_tail *tail);

/* The decode matvec over activations quantized to q8 blocks of 32 (the
 * layout of vkops_rmsnorm_q8's yq, VKMM_Q8_BLOCK_BYTES a block) on 8-bit
 * integer dot products (mv_dot.comp): one token, W's columns a multiple of
 * 32, for Q4_0, Q8_0, Q4_K, Q5_K and Q6_K where the device has integer dot
 * products (vkmm_q8x_ok). up non-NULL: the fused gate + up + SwiGLU form
 * (as vkmm_matmul_glu). _id: the expert-indexed form over the token's k
 * picks (sel: k ints; y: k rows; as vkmm_matmul_id_glu with x_per_pick
 * false). The results are the dequantized weights times the dequantized
 * activations up to f32 rounding, as the integer-dot tiles'. Recorded. */
#define VKMM_Q8_BLOCK_BYTES 48
bool vkmm_q8x_ok(const struct vkmm *mm, enum quant_type type);
void vkmm_matmul_q8x(struct vkmm *mm, const struct vk_wmat *w, const struct vk_wmat *up,
                     struct vk_bind xq, struct vk_bind y);
void vkmm_matmul_id_q8x(struct vkmm *mm, const struct vk_wmat *w, const struct vk_wmat *up,
                        struct vk_bind xq, struct vk_bind sel, int k, struct vk_bind y);
/* vkmm_matmul_q8x of a plain matrix with y also added into res, as
 * vkmm_matmul_acc (res gets exactly res + y): the o projection over the q8
 * blocks attention wrote (vkops_attn.yq), with the residual add after it;
 * n_tok rows of xq, y and res, up to VKMM_MV_CHUNK_TOK (32; more than one:
 * vkmm_mq8_ok's passes). */
void vkmm_matmul_q8x_acc(struct vkmm *mm, const struct vk_wmat *w, struct vk_bind xq,
                         struct vk_bind y, struct vk_bind res, int64_t n_tok);
/* Two or three matrices that read the same one-token x (a layer's q, k
 * and v) in one dispatch instead of one each: y[i] = W[i] x, over q8
 * blocks (xf false, as vkmm_matmul_q8x) or f32 quantized in the lanes (xf
 * true, as vkmm_matmul_xq). Each y[i]'s values are the bits the single
 * call gives. vkmm_multi_ok: the matrices can: plain (not stacks), one
 * piece each, one type with the integer-dot matvec, one width (a multiple
 * of 32), all in one buffer within one binding's range (the Vulkan
 * backend's weight arena places a layer's matrices in bind order, so q, k
 * and v usually are). Recorded. */
#define VKMM_MULTI_MAX 3
bool vkmm_multi_ok(const struct vkmm *mm, const struct vk_wmat *const *w, int n);
void vkmm_matmul_multi(struct vkmm *mm, const struct vk_wmat *const *w, int n, struct vk_bind x,
                       bool xf, const struct vk_bind *y);
/* The tiled matmul (more than VKMM_MV_CHUNK_TOK tokens) on the integer-dot
 * tiles over activations already quantized (xq: n_tok rows of q8 blocks,
 * vkops_rmsnorm_q8 / vkops_quant_q8), so the tiles stage 48 bytes a block
 * and quantize nothing (mm_dot_body.glsl XQ8); up non-NULL: the fused
 * gate + up + SwiGLU form. The same levels as the f32-x call's, so the same
 * sums. vkmm_tq8_ok: n_tok and the type take this path (the type's tiles
 * are the integer-dot ones). Recorded. */
bool vkmm_tq8_ok(const struct vkmm *mm, enum quant_type type, int64_t n_tok);
/* vkmm_matmul_tq8 of 2 to 32 tokens (batched decode, a short prefill):
 * the integer-dot matvec in passes of up to 8 tokens over their q8 rows
 * (mv_dot.comp NT), each token's sums those of the one-token
 * vkmm_matmul_q8x. vkmm_mq8_ok: n_tok and the type take it (the type has
 * the integer-dot matvec on this device). */
bool vkmm_mq8_ok(const struct vkmm *mm, enum quant_type type, int64_t n_tok);
/* Whether n_tok tokens take the tiled matmul (not the matvec passes). */
bool vkmm_tiled_tokens(int64_t n_tok);
void vkmm_matmul_tq8(struct vkmm *mm, const struct vk_wmat *w, const struct vk_wmat *up,
                     struct vk_bind xq, struct vk_bind y, int64_t n_tok);
/* The expert-indexed form of vkmm_matmul_tq8 (vkmm_matmul_id's shapes, more
 * than VKMM_MV_MAX_TOK tokens): xq holds n_tok rows of q8 blocks, or one
 * row a pick where x_per_pick (the down projection's SwiGLU rows).
 * vkmm_tq8_id_ok: n_tok and the type take it (the type's expert tiles are
 * the integer-dot ones). Recorded. */
bool vkmm_tq8_id_ok(const struct vkmm *mm, enum quant_type type, int64_t n_tok);
/* vkmm_matmul_id_tq8 of 2 to VKMM_MV_MAX_TOK (8) tokens: the integer-dot
 * matvec's expert-indexed form over the q8 rows (a workgroup column a
 * pick, each pick's sums those of a one-token call). vkmm_mq8_id_ok: n_tok
 * and the type take it. */
bool vkmm_mq8_id_ok(const struct vkmm *mm, enum quant_type type, int64_t n_tok);
void vkmm_matmul_id_tq8(struct vkmm *mm, const struct vk_wmat *w, const struct vk_wmat *up,
                        struct vk_bind xq, bool x_per_pick, struct vk_bind sel, int k,
                        int64_t n_tok, struct vk_bind y);
/* vkmm_matmul_q8x and _id_q8x over f32 x (one token, or one row a pick
 * where x_per_pick), each lane quantizing the blocks it takes to the same q8
 * levels vkops_rmsnorm_q8 writes (mv_dot.comp XF): the integer-dot matvec
 * where no norm wrote x's q8 copy, with no dispatch to quantize it. res
 * non-NULL (no up): res += y too, as vkmm_matmul_acc. Same conditions as
 * vkmm_matmul_q8x (vkmm_q8x_ok, 32 | cols). Recorded. */
void vkmm_matmul_xq(struct vkmm *mm, const struct vk_wmat *w, const struct vk_wmat *up,
                    struct vk_bind x, struct vk_bind y, const struct vk_bind *res);
void vkmm_matmul_id_xq(struct vkmm *mm, const struct vk_wmat *w, const struct vk_wmat *up,
                       struct vk_bind x, bool x_per_pick, struct vk_bind sel, int k,
                       struct vk_bind y);

/* Q4_0 and Q8_0: the types whose 1-2 token matvec has the block path. */
bool vkmm_soa_type(enum quant_type type);
/* A GGUF row of such a type (n_cols elements) rewritten as its nb f16
 * scales, then its nb groups of quants (the same bytes, row_bytes long),
 * the layout ":soa" reads (mv_body.glsl SOA). For benchmarks: no other
 * kernel reads it. */
void vkmm_soa_row(enum quant_type type, const void *src, void *dst, int64_t n_cols);

/* The tiled matmul's path (prefill, n_tok > 32), before any pipeline is
 * made: "auto" (or NULL: per device and type, gpu/vk-mm-coop.c), "f32"
 * (f32 FMA tiles), "int-dot" (8-bit integer dot products on activations
 * quantized to q8 blocks, for Q8_0, Q4_0, Q4_K, Q5_K, Q6_K; the f32 tiles for
 * the rest) or "coopmat[:BMxBNxBKxSGM[xSGN][/...]]" (f16 cooperative matrices
 * for every type, optionally with the tile shape of the plain / the
 * expert-indexed form), any of them (or nothing) followed by ",mv=WGxR1[xR]"
 * (or "mv=..." alone): the matvec's lanes and rows a workgroup for 1-2 tokens
 * and expert-indexed pairs, and for 4-8 tokens, optionally followed by
 * ":uN" (the 1-2 token block path of Q4_0 / Q8_0 loads N blocks a lane at
 * once), ":wN" (the q8 matvec, vkmm_matmul_q8x, on at most N workgroups,
 * each looping over row groups) and ":soa" (that path reads rows laid out by vkmm_soa_row: only for
 * matrices uploaded so, benchmarks). STRATA_E_CONFIG for a bad
 * spec, STRATA_E_UNSUPPORTED for a path or shape the device (or this build)
 * cannot run. For benchmarks and tests. */
int vkmm_configure(struct vkmm *mm, const char *spec, struct strata_error *err);
/* True when this build has the cooperative-matrix kernels (glslc had
 * GL_NV_cooperative_matrix); they run where vk_dev_info coopmat_nv. */
bool vkmm_coop_built(void);
/* The path of each type the kernels compute, e.g. "coopmat: f16 q8_0 q4_0
 * ...; f32: f32 bf16" (the start-up log). */
void vkmm_describe(const struct vkmm *mm, char *buf, size_t cap);

/* 0, or the first error a record call latched (then cleared). */
int vkmm_status(struct vkmm *mm, struct strata_error *err);

#endif
