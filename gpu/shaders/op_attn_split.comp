#version 450
/* gpu/shaders/op_attn_split.comp: causal attention over the paged f16 KV
 * cache, split-K (vkops_attention in gpu/vk-ops.c). One workgroup per
 * (chunk of positions, KV head, token) = (x, y, z): it computes every query
 * head of the KV head's GQA group over the chunk, so each K and V word is
 * read once for up to 8 query heads, and writes the unnormalised partial
 * (running max m, sum l, weighted V sum) per (token, head, chunk) to
 * scratch; the workgroup that finishes a (token, KV head) last merges its
 * chunks into the output (below). With one chunk (direct) the output is
 * written at once.
 *
 * Why split-K: decode has one query row per sequence and head, so without
 * a split one workgroup would walk the whole context alone: on an H200
 * (132 SMs) a single sequence with 8 KV heads would keep 8 SMs busy. The
 * host sizes chunks so (chunks x KV heads x tokens) is at least ~2 per SM.
 *
 * Inside a workgroup, tiles of up to 64 positions. The block table is read
 * once a tile, a position a lane, into shared memory (the first tile's
 * beside q's loads, each next one's before the barrier that ends the tile
 * before it), so no K or V load waits on a table read. 8 lanes a position
 * split the K row's words (16 positions at once, each lane's loads issued
 * before its arithmetic, the dot summed by 3 shuffles per query head); then
 * a subgroup per head updates the online softmax (max, rescale factor,
 * sum); then each invocation owns one f16 pair of the V row for every head
 * of the group and a share of the tile's positions (VLD loads in flight),
 * the shares summed through shared memory at the end.
 * q is rounded to f16 first, as ops_attn_head does (ggml's F16 K x F32 Q).
 *
 * q8out = 1 (vkops_attention's yq; head_dim_v a multiple of 32): the
 * workgroup that writes a (token, KV head)'s output (the direct one, or
 * the merge) also writes it as q8 blocks (q8_block.glsl's rule, the layout
 * of vkops_rmsnorm_q8's yq: a row of n_head * hdv values is n_head * hdv /
 * 32 blocks) from a copy in shared memory, so the o projection after it
 * runs on the integer-dot matvec over exactly the blocks vkops_quant_q8
 * would make of out, with no dispatch of its own. */
#include "op_attn_split_body.glsl"
