/* gpu/vk-ops-impl.h: internals shared by gpu/vk-ops.c (gather, elementwise,
 * rows, rope, routing, sampling) and gpu/vk-ops-attn.c (KV writes,
 * attention): the pipelines and the push-constant blocks, each pinned to its
 * shader's layout (std430 push blocks: 4-byte fields in declaration order).
 * Not for callers: they use gpu/vk-ops.h.
 *
 * Threading: as gpu/vk.h (the device's thread).
 */
#ifndef STRATA_VK_OPS_IMPL_H
#define STRATA_VK_OPS_IMPL_H

#include "gpu/vk-ops.h"

struct vkops {
    struct vk_dev *dev; /* borrowed */
    struct vk_pipe *eltwise, *copy_rows, *rows, *rmsnorm, *rope, *embed, *moe_route, *argmax,
        *sample;
    struct vk_pipe *kv_write, *attn_split, *rope_kv;
    /* op_attn_rope.comp (attn_split with rope_kv's work), made at its first
     * use: only BACKEND_VK_FUSE_ATTN takes it, and lavapipe spends ~0.13 s
     * compiling it (gpu-bench's init on this 2-vCPU EPYC: 0.38-0.42 s
     * without it, 0.53 with), which every test's device open paid */
    struct vk_pipe *attn_rope;
    bool attn_rope_failed;        /* it could not be made: vkops_rope_kv + the split instead */
    struct vk_pipe *attn_prefill; /* NULL on subgroups narrower than 8 (the split serves all) */
    struct vk_pipe *rmsnorm_q8;   /* op_rmsnorm.comp with its q8 output (Q8 = 1) */
    struct vk_pipe *quant_q8;     /* op_rmsnorm.comp's q8 of x alone (Q8 = 3) */
    bool attn_late;               /* op_attn_prefill.comp LATE: its (KV head, tile) grid */
    bool norm_q8_1pass;           /* rmsnorm_q8 is the one-pass form (Q8 = 1, not 2pass) */
};

/* gx, gy for n workgroups of a linear grid (ops_group_id in op_common.glsl):
 * x at most 65535, the floor of maxComputeWorkGroupCount; the shaders
 * return from the surplus groups of the last row. */
void vkops_grid(uint64_t n, uint32_t *gx, uint32_t *gy);

/* RoPE's per-call constants as op_rope.comp and op_rope_kv.comp take them
 * (engine/cpu/ops.c's arithmetic, YaRN's correction dims included). */
struct vkops_rope_angles {
    float theta_scale, freq_scale, ext_factor, mscale, corr0, corr1;
};
void vkops_rope_angles(const struct vkops_rope *cfg, struct vkops_rope_angles *a);

/* op_kv.glsl struct kv_geom */
struct vkops_kv_geom {
    uint32_t table_stride, blocks_per_piece, block_words, n_block, n_part, n_embd_k, n_embd_v,
        k_words;
};
_Static_assert(sizeof(struct vkops_kv_geom) == 32, "op_kv.glsl kv_geom");

/* Fills g from kv (checks the layout's assumptions: even rows, word sizes). */
void vkops_kv_geom(const struct vkops_kv *kv, struct vkops_kv_geom *g);

#endif
