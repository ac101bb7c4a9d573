#version 450
/* gpu/shaders/op_rows.comp: per-row reductions, one workgroup a row
 * (vkops_rmsnorm, vkops_softmax in gpu/vk-ops.c). A row is at most a few
 * thousand values (n_embd, a head, n_expert), so one workgroup of 256
 * streams it with subgroup reductions (op_common.glsl) and the launch, not
 * the row, is the cost; many rows fill the device.
 *
 *   mode 0 rmsnorm: y = x / sqrt(mean(x^2) + eps) * (has_w ? w : 1)  (y may be x)
 *   mode 1 softmax: y = exp(y - max) / sum, in place (binding 2)
 * engine/cpu/ops.c sums the squares (and the softmax's exps) in double;
 * here they are f32 partial sums of ~n/256 values combined in a tree, within
 * ~1e-6 relative for the row widths of real models. */
#include "op_common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) buffer Y { float y[]; };

layout(push_constant) uniform P {
    uint n_cols;
    uint mode;
    uint has_w;
    float eps;
    uint n_rows;
} p;

void main() {
    const uint row = ops_group_id(), lid = gl_LocalInvocationID.x;
    const uint base = row * p.n_cols;
    if (row >= p.n_rows)
        return;
    if (p.mode == 0u) {
        float s = 0.0;
        for (uint i = lid; i < p.n_cols; i += 256u)
            s += x[base + i] * x[base + i];
        const float mean = ops_wg_sum(s) / float(p.n_cols);
        const float scale = 1.0 / sqrt(mean + p.eps);
        for (uint i = lid; i < p.n_cols; i += 256u) {
            const float v = x[base + i] * scale;
            y[base + i] = p.has_w != 0u ? v * w[i] : v;
        }
    } else {
        float m = -1.0 / 0.0;
        for (uint i = lid; i < p.n_cols; i += 256u)
            m = max(m, y[base + i]);
        m = ops_wg_max(m);
        float s = 0.0;
        for (uint i = lid; i < p.n_cols; i += 256u) {
            const float e = exp(y[base + i] - m);
            y[base + i] = e;
            s += e;
        }
        const float inv = 1.0 / ops_wg_sum(s);
        for (uint i = lid; i < p.n_cols; i += 256u)
            y[base + i] *= inv;
    }
}
