#version 450
/* gpu/shaders/op_rope_kv.comp: what follows the Q, K and V projections of a
 * layer, in one dispatch (vkops_rope_kv): the per-head RMSNorm of q and k
 * where the model has one (qwen3's q_norm, k_norm), RoPE of q and k in
 * place, and the K and V rows into the paged cache as f16. One workgroup a
 * (token, head slot): slots [0, n_head) are q heads, then n_head_kv k heads,
 * then n_head_kv v heads; one invocation an output word (elements 2 d2,
 * 2 d2 + 1) of the head. Every invocation loads what it needs (its pair and,
 * neox, the partners half a rotation away) before the workgroup's barrier
 * and writes after it, so the in-place writes never race a neighbour's
 * read. Same arithmetic as op_rmsnorm.comp (y = x * scale * w), op_rope.comp
 * (op_rope.glsl's angle, a * c - b * s) and op_kv_write.comp (kv_f32_to_f16),
 * in that order; it replaces their 3 to 5 dispatches, and the barrier after
 * each, per layer. A head's norm and rope are op_rope_head.glsl's, which
 * op_attn_rope.comp runs too (BACKEND_VK_FUSE_ATTN), so the two agree to
 * the bit. */
#define KV_BIND 8
#include "op_common.glsl"
#include "op_kv.glsl"

layout(local_size_x = 128) in; /* head_dim / 2 words at most: VKOPS_HEAD_DIM_MAX 256 */

layout(std430, binding = 0) buffer Q { float q[]; };
layout(std430, binding = 1) buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
layout(std430, binding = 3) readonly buffer Seq { int seq[]; };
layout(std430, binding = 4) readonly buffer Pos { int pos[]; };
layout(std430, binding = 5) readonly buffer FF { float ff[]; };
layout(std430, binding = 6) readonly buffer QN { float qnw[]; };
layout(std430, binding = 7) readonly buffer KN { float knw[]; };

layout(push_constant) uniform P {
    kv_geom g;
    uint layer, n_tok, n_head, n_head_kv, hdk, hdv;
    uint n_rot, mode;
    float theta_scale, freq_scale, ext_factor, mscale, corr0, corr1;
    uint has_ff, norm_q, norm_k;
    float eps_q, eps_k;
    uint pad;
} p;

#include "op_rope.glsl"
#include "op_rope_head.glsl"

float ld(uint which, uint i) {
    return which == SQ ? q[i] : which == SK ? k[i] : v[i];
}

float nw(uint which, uint e) {
    return which == SQ ? qnw[e] : knw[e];
}

vec2 cs_of(int ps, uint i) {
    return rope_cs(ps, i, p.theta_scale, p.has_ff != 0u, p.has_ff != 0u ? ff[i] : 1.0,
                   p.freq_scale, p.ext_factor, p.corr0, p.corr1, p.mscale);
}

void main() {
    const uint n_slot = p.n_head + 2u * p.n_head_kv;
    const uint gid = ops_group_id();
    const uint t = gid / n_slot, slot = gid % n_slot;
    if (t >= p.n_tok)
        return; /* the whole workgroup */
    const uint which = slot < p.n_head ? SQ : slot < p.n_head + p.n_head_kv ? SK : SV;
    const uint h = which == SQ ? slot : which == SK ? slot - p.n_head : slot - p.n_head - p.n_head_kv;
    const uint hd = which == SV ? p.hdv : p.hdk;
    const uint nh = which == SQ ? p.n_head : p.n_head_kv;
    const uint base = (t * nh + h) * hd;
    const uint d2 = gl_LocalInvocationID.x;
    const uint e0 = 2u * d2, e1 = e0 + 1u;
    float o0, o1;
    if (!rope_head(which, base, hd, pos[t], d2, o0, o1))
        return;
    if (which == SQ) {
        q[base + e0] = o0;
        q[base + e1] = o1;
        return;
    }
    if (which == SK) {
        k[base + e0] = o0;
        k[base + e1] = o1;
    }
    const uint blk = kv_block(p.g, seq[t], pos[t]);
    const uint i = kv_word_index(p.g, blk, p.layer, pos[t], h, hd, which == SV, d2);
    kv_store(blk / p.g.blocks_per_piece, i, kv_f32_to_f16(o0) | (kv_f32_to_f16(o1) << 16));
}
