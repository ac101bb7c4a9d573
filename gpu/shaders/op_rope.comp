#version 450
/* gpu/shaders/op_rope.comp: in-place RoPE of x (n_tok, n_head * head_dim),
 * one invocation a rotated pair (vkops_rope in gpu/vk-ops.c); the angle is
 * op_rope.glsl's.
 *
 * Pairs: mode 0 rotates (2i, 2i + 1), mode 2 (neox) (i, i + n_rot / 2);
 * dims from n_rot on are left alone. */
#include "op_common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Pos { int pos[]; };
layout(std430, binding = 2) readonly buffer FF { float ff[]; };

layout(push_constant) uniform P {
    uint n_head;
    uint head_dim;
    uint n_rot;
    uint mode;
    float theta_scale; /* powf(freq_base, -2 / n_rot) */
    float freq_scale;
    float ext_factor;
    float mscale; /* attn_factor, times 1 + 0.1 log(1 / freq_scale) under YaRN */
    float corr0, corr1; /* YaRN correction dims (ops_rope_yarn_corr_dims) */
    uint has_ff;
    uint n_tok;
} p;

#include "op_rope.glsl"

void main() {
    /* one invocation a (token, head, pair): each computes its own angle
     * (the product chain is at most n_rot / 2 multiplies of ALU work) and
     * does one load of each value, so nothing waits on a chain of loads:
     * the workgroup-a-token version looped 8 times over dependent loads and
     * took 6.4 us a token on the H200 (lead's llama-2-7b decode profile) */
    const uint half_rot = p.n_rot / 2u;
    const uint g = ops_group_id() * 256u + gl_LocalInvocationID.x;
    if (g >= p.n_tok * p.n_head * half_rot)
        return;
    const uint i = g % half_rot, h = (g / half_rot) % p.n_head, t = g / (half_rot * p.n_head);
    const vec2 cs = rope_cs(pos[t], i, p.theta_scale, p.has_ff != 0u, p.has_ff != 0u ? ff[i] : 1.0,
                            p.freq_scale, p.ext_factor, p.corr0, p.corr1, p.mscale);
    const uint i0 = (t * p.n_head + h) * p.head_dim + (p.mode == 2u ? i : 2u * i);
    const uint i1 = i0 + (p.mode == 2u ? half_rot : 1u);
    const float a = x[i0], b = x[i1];
    x[i0] = a * cs.x - b * cs.y;
    x[i1] = a * cs.y + b * cs.x;
}
