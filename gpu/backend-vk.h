/* gpu/backend-vk.h: the Vulkan implementation of the backend seam
 * (engine/backend/backend.h) over the runtime (gpu/vk.h) and the kernels
 * (gpu/vk-mm.h: matrix products; gpu/vk-ops.h: every other op).
 *
 *   struct backend_vk_params vp = backend_vk_params_default();
 *   vp.device = -1;                                  // the best device (--gpu auto)
 *   struct backend *be = backend_vk_init(&vp, &err); // NULL + err: use the CPU
 *   struct model_params mp = model_params_default();
 *   mp.backend = be;                                 // borrowed by the model
 *   ... model_load / model_forward / model_free ...
 *   backend_free(be);
 *
 * What it does with the seam:
 *   - weights_bind uploads each weight through staging into device buffers
 *     (a few large ones, sub-allocated), as pieces of whole rows (whole
 *     experts of a stack) of at most max_storage_range bytes each, so a
 *     matrix bigger than one binding (128 MiB on lavapipe) is several
 *     bindings (struct vk_wmat for the matrix kernels, struct vkops_rows for
 *     the embedding gather). The same host bytes bound twice (a tied
 *     output) are uploaded once.
 *   - tensors are device buffers; tensor_write copies the host rows into a
 *     host-visible staging chunk when it is recorded and records a copy
 *     into the tensor, tensor_read records a copy into a staging chunk and
 *     the host copy lands at the wait: a dense step is one command buffer
 *     with no host round trip.
 *   - kv_store_init gives blocks in device memory: up to VKOPS_KV_PIECES
 *     buffers, each of whole blocks within max_storage_range, grown by
 *     doubling as blocks are first used (block_host NULL; block_copy is a
 *     synchronous device copy, called between steps by copy-on-write).
 *   - begin uploads the block tables of the step's sequences (recorded);
 *     every op records the kernels' dispatches; submit queues the command
 *     buffer; wait waits for it and copies the reads out.
 *   - a matmul of two jobs of one type and shape (a gate and an up) is
 *     held back; when the next op is a swiglu over its two outputs into one
 *     of them, the three are one dispatch (vkmm_matmul_glu) and the other
 *     output tensor is not written (it keeps what it held: the forward pass
 *     never reads the up product after the SwiGLU, engine/model's
 *     ffn_dense); any other next op records the matmul as asked.
 *   - more fusions of neighbouring ops (params.fuse, backend-vk-fuse.c),
 *     each one dispatch and one barrier where the ops take two or more
 *     (a decode step on a big GPU is bound by its dispatches): a residual
 *     add of a one-job matmul's output of up to 32 rows (or of moe_ffn's)
 *     next (added inside the matvec, the product still written); per-head
 *     q/k rmsnorms, the two ropes and the kv_write of a layer (one kernel). An op held back is
 *     recorded as asked when the next one does not complete its pattern,
 *     so every tensor an op writes is written, fused or not.
 *   - moe_ffn computes the routed experts of a resident stack on the device
 *     (expert-indexed matmuls, SwiGLU, the weighted sum); a table that
 *     names experts outside one resident stack fails the step
 *     (STRATA_E_UNSUPPORTED).
 *
 * Profile: params.profile makes every dispatch timed (gpu/vk.h); the table
 * per kernel is printed to stderr when the backend is freed, or on
 * backend_vk_profile_report.
 *
 * Threading: one thread records, submits and waits (the forward thread), as
 * backend.h says; nothing here is shared between backends.
 */
#ifndef STRATA_BACKEND_VK_H
#define STRATA_BACKEND_VK_H

#include <stdbool.h>
#include <stdio.h>

#include "engine/backend/backend.h"
#include "gpu/vk.h"

struct backend_vk_params {
    int device;                 /* physical device index, -1: the best (vk_dev_open) */
    bool profile;               /* time every dispatch (STRATA_GPU_PROFILE=1) */
    const char *pipeline_cache; /* borrowed during init: the pipeline cache file, or NULL */
    /* borrowed during init: the prefill matmul's path, vkmm_configure's spec
     * ("auto", "f32", "int-dot", "coopmat[:tile]"); NULL: auto. Benchmarks. */
    const char *mm_path;
    /* Tests: caps on one weight piece and one KV piece in bytes (0: the
     * device's binding limit), so small models cross binding boundaries. */
    uint64_t piece_bytes, kv_piece_bytes;
    /* Device memory the backend may hold in bytes (vk_dev_set_budget); 0:
     * the device's. */
    uint64_t mem_budget;
    /* BACKEND_VK_FUSE_* bits: which neighbouring ops the step may record as
     * one dispatch (default all; benchmarks and tests compare with fewer). */
    unsigned fuse;
};

#define BACKEND_VK_FUSE_ACC 1u  /* a residual add into the matvec (MoE sum) it adds */
#define BACKEND_VK_FUSE_ROPE 2u /* q/k norms, ropes and the KV write: one dispatch */
/* A decode step's RMSNorm also writes its output as q8 blocks, and the
 * matvecs that read it next (q, k, v; the fused gate + up; the routed
 * experts' gate + up; not the output, whose norm runs in place, nor o and
 * down, whose inputs no norm writes) run on integer dot products over them
 * (vkmm_matmul_q8x): not a fusion of dispatches but of the activations'
 * quantization into the norm (bench/README.md, "q8 activations").
 * Measured on an H100 (device call of 2026-12-07, `gpu-bench MODEL -1 128
 * 16 8 0 4300 PC auto 3|7`, alternated in one call): 7B Q4_0 tg128 221.2,
 * 224.4 -> 251.1, 252.7 tok/s; the 128-expert MoE 155.2 -> 161.2; b8
 * unchanged (612-615, the 8-token matvec keeps f32 x). Per call (16 steps'
 * profile): q/k/v 11.0 -> 8.6 us, gate+up 33.9 -> 24.8, the norm 6.3 ->
 * 7.8 (it writes the q8 copy too). */
#define BACKEND_VK_FUSE_Q8 4u
/* A decode step's output or down projection, the residual add after it and
 * the RMSNorm of the sum (with its q8 copy, so FUSE_Q8 too): one dispatch,
 * the norm computed by the matvec's last workgroup (vkmm_matmul_acc_norm).
 * Not in FUSE_ALL: slower on an H100 (device calls of 2026-12-07, third
 * session, `gpu-bench 7b -1 128 16 1 0 4300 PC auto 7|15` alternated: 7B
 * Q4_0 tg128 266.9-267.3 tok/s without, 222.1-222.8 with; the fused call
 * 32.5 us where the matvec took 16.3 and the norm's dispatch 6.0;
 * bench/README.md, "H100, 2026-12-07 (third session)"). */
#define BACKEND_VK_FUSE_NORM 8u
/* A decode step's matvecs whose x no norm quantized (o and down, with the
 * residual add after them; the output matrix; the routed experts' down)
 * run on integer dot products too, each lane quantizing the x blocks it
 * takes (vkmm_matmul_xq). Not in FUSE_ALL: slower on an H100 (device call
 * of 2026-12-07, fourth session, `gpu-bench 7b -1 128 16 1 0 4300 PC auto
 * 7|23` alternated: tg128 254.4-256.8 tok/s without, 250.2-251.3 with; o
 * and down 17.57 us a call against 16.29 on f32 x: quantizing 32 values a
 * block in every workgroup costs what the integer dot products save). */
#define BACKEND_VK_FUSE_XQ 16u
/* A prefill's tiled matmuls on the integer-dot tiles read their
 * activations as q8 blocks quantized once a call (vkmm_matmul_tq8): the
 * norm before q, k, v and gate + up writes its q8 copy for every row, and
 * o's and down's inputs are quantized by a dispatch of their own
 * (vkops_quant_q8), where every 128-row tile quantized its own copy.
 * Measured on an H100 (device call of 2026-12-07, fourth session,
 * `gpu-bench MODEL -1 128 512 1 0 4300 PC auto 7|39` alternated): pp512 of
 * the 7B Q4_0 2,893-2,894 -> 3,295-3,297 tok/s, qwen3-0.6b Q8_0
 * 20,934-20,969 -> 23,207-23,209; the 7B's q4_0.mm_dot 698.7 -> 595.7 us a
 * call, 128 -> 112 registers (bench/README.md, "H100, 2026-12-07 (fourth
 * session)"). */
#define BACKEND_VK_FUSE_TQ8 32u
/* A decode step's matvecs over one x in one dispatch where their matrices
 * allow it (vkmm_matmul_multi: one type with the integer-dot matvec, one
 * width, one buffer): a layer's q, k and v, a shared expert's gate, up and
 * gate input; each result the bits of its own dispatch. Measured on an
 * H100 (device call of 2026-12-07, sixth session, `gpu-bench 7b -1 128 16
 * 1 0 4300 PC auto 103|39` alternated): 7B tg128 261.5 / 262.8 tok/s
 * against 260.1 / 260.9, 260 dispatches a token against 324; the profile
 * has q/k/v at 16.77 us a layer against 3 x 8.5, but untimed the GPU
 * overlapped the three, so the clock gains ~0.6%; the MoE showed no gain
 * (170.2 against 170.7 in the clean round). Kept: the same bits, fewer
 * launches. */
#define BACKEND_VK_FUSE_MULTI 64u
/* A decode step's down projection (a matvec with the residual add whose x
 * has no q8 copy) quantizes x in a dispatch of its own (vkops_quant_q8)
 * and runs on the integer-dot matvec: one dispatch more a layer, for a
 * matvec that ran 18.5-19.1 us on f32 x against 11.6 on q8 (4096 x
 * 11,008, H100, mv-bench, third session). Not in FUSE_ALL: on an H100
 * (device call of 2026-12-07, sixth session, alternated) 7B tg128 263.7 /
 * 263.9 tok/s against the default's 261.5 / 262.8, +0.7%, within what the
 * same binary moves between rounds. */
#define BACKEND_VK_FUSE_QD 128u
/* A decode step whose every sequence has one token (a single stream, or
 * the scheduler's decoding batch of up to VKOPS_ATTN_DECODE_MAX): the
 * split-K attention norms and ropes q itself and writes the new K and V
 * row (vkops_attention's rope, op_attn_rope.comp), where FUSE_ROPE's
 * vkops_rope_kv ran a dispatch of its own before it: one dispatch and one
 * barrier fewer a layer, the same bits (test-vk-ops' test_attention_rope,
 * test-vk-model's test_attn_rope). Needs FUSE_ROPE. Not in FUSE_ALL until
 * measured on a device. */
#define BACKEND_VK_FUSE_ATTN 256u
/* A step of 2 to 32 rows (batched decode, a short prefill chunk): its
 * plain matmuls (q, k, v, gate + up, o and down with their residual adds,
 * the output) run on the integer-dot matvec in passes of up to 8 tokens
 * over q8 rows (vkmm_mq8_ok, mv_dot.comp NT), as one token's do under
 * FUSE_Q8: the norm writes its q8 copy for every row, attention (2-8
 * tokens) writes o's, and the other inputs are quantized by a dispatch of
 * their own (vkops_quant_q8). Where it is off, those rows take the f32
 * matvec passes. Not in FUSE_ALL until measured on a device. */
#define BACKEND_VK_FUSE_MQ8 512u
#define BACKEND_VK_FUSE_ALL 103u
#define BACKEND_VK_FUSE_MASK 1023u

struct backend_vk_params backend_vk_params_default(void);

/* Opens the device and creates the kernels' pipelines. NULL with err:
 * STRATA_E_NOT_FOUND without a device, STRATA_E_UNSUPPORTED, STRATA_E_NOMEM,
 * STRATA_E_IO. Owned: free with backend_free. */
struct backend *backend_vk_init(const struct backend_vk_params *p, struct strata_error *err);

/* The device of a backend made by backend_vk_init (borrowed), or NULL for
 * any other backend. */
const struct vk_dev_info *backend_vk_info(const struct backend *be);
/* Device memory the backend holds now: weights, tensors and scratch, KV blocks. */
uint64_t backend_vk_device_bytes(const struct backend *be);
/* The prefill matmul's path per type (vkmm_describe), "" for another backend. */
void backend_vk_mm_describe(const struct backend *be, char *buf, size_t cap);
/* Times every dispatch from the next recording on (or stops). */
void backend_vk_profile_enable(const struct backend *be, bool on);
/* Prints the profile table so far (and resets it); nothing when empty. */
void backend_vk_profile_report(const struct backend *be, FILE *out);
/* Dispatches the backend has recorded so far (vk_dev_dispatches); 0 for
 * another backend. */
uint64_t backend_vk_dispatches(const struct backend *be);

#endif
