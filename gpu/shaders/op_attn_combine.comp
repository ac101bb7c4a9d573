#version 450
/* gpu/shaders/op_attn_combine.comp: merges op_attn_split's partials, one
 * workgroup per (token, head): out = sum_c exp(m_c - M) acc_c / sum_c
 * exp(m_c - M) l_c with M the largest m_c (chunk 0 is never empty, so M is
 * finite; empty chunks carry m = -inf and add nothing). */
#include "op_common.glsl"

layout(local_size_x = 128) in;

layout(std430, binding = 0) readonly buffer Part { float part[]; };
layout(std430, binding = 1) writeonly buffer Out { float out_[]; };

layout(push_constant) uniform P {
    uint n_rows; /* n_tok * n_head */
    uint hdv;
    uint n_chunk;
} p;

void main() {
    const uint row = ops_group_id();
    if (row >= p.n_rows)
        return;
    const uint stride = p.hdv + 2u, base = row * p.n_chunk * stride;
    float M = -1.0 / 0.0;
    for (uint c = 0u; c < p.n_chunk; c++)
        M = max(M, part[base + c * stride]);
    float L = 0.0;
    for (uint c = 0u; c < p.n_chunk; c++) {
        const float m = part[base + c * stride];
        if (m > -1.0 / 0.0)
            L += exp(m - M) * part[base + c * stride + 1u];
    }
    for (uint d = gl_LocalInvocationID.x; d < p.hdv; d += 128u) {
        float o = 0.0;
        for (uint c = 0u; c < p.n_chunk; c++) {
            const float m = part[base + c * stride];
            if (m > -1.0 / 0.0)
                o += exp(m - M) * part[base + c * stride + 2u + d];
        }
        out_[row * p.hdv + d] = o / L;
    }
}
