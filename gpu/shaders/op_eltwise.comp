#version 450
/* gpu/shaders/op_eltwise.comp: the elementwise ops over (n_rows, n_cols) f32
 * (vkops_add, vkops_add_bias, vkops_swiglu, vkops_add_gated in
 * gpu/vk-ops.c), one element an invocation: these are bandwidth-bound, one
 * pass over the data, so nothing is gained by more work per invocation.
 *
 * Bindings by mode (push constant `mode`, pinned in gpu/vk-ops.c):
 *   0 add:       a (rw) += b
 *   1 add_bias:  a (rw) += b[i % n_cols]
 *   2 swiglu:    a (w)   = silu(b) * c          (a may alias b)
 *   3 add_gated: a (rw) += sigmoid(c[row]) * b  (c: one gate logit a row) */
#include "op_common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) readonly buffer C { float c[]; };

layout(push_constant) uniform P {
    uint n;      /* elements: n_rows * n_cols */
    uint n_cols;
    uint mode;
} p;

void main() {
    const uint i = ops_group_id() * 256u + gl_LocalInvocationID.x;
    if (i >= p.n)
        return;
    if (p.mode == 0u) {
        a[i] = a[i] + b[i];
    } else if (p.mode == 1u) {
        a[i] = a[i] + b[i % p.n_cols];
    } else if (p.mode == 2u) {
        const float g = b[i];
        a[i] = g / (1.0 + exp(-g)) * c[i];
    } else {
        const float gs = 1.0 / (1.0 + exp(-c[i / p.n_cols]));
        a[i] = a[i] + gs * b[i];
    }
}
