#version 450
/* gpu/shaders/op_rmsnorm.comp: RMSNorm of rows whose width is a multiple of
 * 4 (vkops_rmsnorm; op_rows.comp mode 0 takes the others), one workgroup a
 * row. The first 4096 values of a row are loaded once, as four independent
 * vec4 loads an invocation kept in registers for the scaling pass: the
 * first version looped over 16 dependent scalar loads an invocation and
 * took 11.1 us a 4096-wide row on the H200 (lead's profile of llama-2-7b
 * Q4_0 decode, 1040 calls), bound by load latency, not bandwidth.
 * Same arithmetic as op_rows.comp: y = x * (1 / sqrt(mean(x^2) + eps)) * w. */
#include "op_common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer X { vec4 x[]; };
layout(std430, binding = 1) readonly buffer W { vec4 w[]; };
layout(std430, binding = 2) writeonly buffer Y { vec4 y[]; };

layout(push_constant) uniform P {
    uint n4; /* n_cols / 4 */
    uint has_w;
    float eps;
    uint n_rows;
} p;

void main() {
    const uint row = ops_group_id(), lid = gl_LocalInvocationID.x;
    if (row >= p.n_rows)
        return;
    const uint base = row * p.n4;
    vec4 v[4];
    float s = 0.0;
    for (uint j = 0u; j < 4u; j++) {
        const uint i = lid + 256u * j;
        v[j] = i < p.n4 ? x[base + i] : vec4(0.0);
    }
    for (uint j = 0u; j < 4u; j++)
        s += dot(v[j], v[j]);
    for (uint i = lid + 1024u; i < p.n4; i += 256u) /* rows wider than 4096 */
        s += dot(x[base + i], x[base + i]);
    const float scale = 1.0 / sqrt(ops_wg_sum(s) / float(4u * p.n4) + p.eps);
    for (uint j = 0u; j < 4u; j++) {
        const uint i = lid + 256u * j;
        if (i < p.n4)
            y[base + i] = p.has_w != 0u ? v[j] * scale * w[i] : v[j] * scale;
    }
    for (uint i = lid + 1024u; i < p.n4; i += 256u) {
        const vec4 o = x[base + i] * scale;
        y[base + i] = p.has_w != 0u ? o * w[i] : o;
    }
}
