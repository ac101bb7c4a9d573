#version 450
/* gpu/shaders/op_kv_write.comp: K and V rows of n_tok tokens into the paged
 * cache as f16 (vkops_kv_write): one invocation an f16 pair (one word), so
 * no two invocations write the same word; workgroups over (pair tile,
 * token). */
#define KV_BIND 4
#include "op_common.glsl"
#include "op_kv.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer K { float k[]; };
layout(std430, binding = 1) readonly buffer V { float v[]; };
layout(std430, binding = 2) readonly buffer Seq { int seq[]; };
layout(std430, binding = 3) readonly buffer Pos { int pos[]; };

layout(push_constant) uniform P {
    kv_geom g;
    uint layer;
    uint n_head_kv;
    uint head_dim_k, head_dim_v;
    uint n_tiles; /* tiles of 256 pairs a token */
    uint n_tok;
} p;

void main() {
    const uint gid = ops_group_id();
    const uint t = gid / p.n_tiles;
    if (t >= p.n_tok)
        return;
    const uint j = (gid % p.n_tiles) * 256u + gl_LocalInvocationID.x; /* pair of K then V */
    const uint nk2 = p.n_head_kv * p.head_dim_k / 2u, nv2 = p.n_head_kv * p.head_dim_v / 2u;
    if (j >= nk2 + nv2)
        return;
    const bool is_v = j >= nk2;
    const uint jj = is_v ? j - nk2 : j;
    const uint hd = is_v ? p.head_dim_v : p.head_dim_k;
    const uint head = 2u * jj / hd, d2 = jj % (hd / 2u);
    const uint src = t * p.n_head_kv * hd + 2u * jj;
    const float a = is_v ? v[src] : k[src], b = is_v ? v[src + 1u] : k[src + 1u];
    const uint blk = kv_block(p.g, seq[t], pos[t]);
    const uint i = kv_word_index(p.g, blk, p.layer, pos[t], head, hd, is_v, d2);
    kv_store(blk / p.g.blocks_per_piece, i, kv_f32_to_f16(a) | (kv_f32_to_f16(b) << 16));
}
