#version 450
/* gpu/shaders/op_argmax.comp: greedy pick, one workgroup a row of logits
 * (vkops_argmax): the largest, lowest id on ties, non-finite values as
 * -inf (engine/sample/sampler.c); -1 when no logit is finite. A 152k
 * vocabulary is ~600 loads an invocation: one workgroup a row keeps the
 * pick a single launch with no second pass. */
#include "op_common.glsl"

/* 1024 invocations where the device allows (gpu/vk-ops.c), else 256: one
 * workgroup streams the whole vocabulary, so wider is faster */
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer L { float logits[]; };
layout(std430, binding = 1) writeonly buffer I { int ids[]; };

layout(push_constant) uniform P {
    uint n_vocab;
    uint n_rows;
} p;

void main() {
    const uint row = ops_group_id(), lid = gl_LocalInvocationID.x;
    if (row >= p.n_rows)
        return;
    const uint base = row * p.n_vocab;
    float bv = -1.0 / 0.0;
    uint bi = 0xffffffffu;
    /* four loads in flight an invocation (ids ascending within a thread, so
     * the first of equal values stays): a loop of one dependent load after
     * another is bound by the load latency, not by bandwidth */
    const uint wg = gl_WorkGroupSize.x;
    for (uint i0 = lid; i0 < p.n_vocab; i0 += 4u * wg) {
        float v[4];
        for (uint u = 0u; u < 4u; u++) {
            const uint i = i0 + u * wg;
            v[u] = i < p.n_vocab ? logits[base + i] : -1.0 / 0.0;
        }
        for (uint u = 0u; u < 4u; u++) {
            if (!isnan(v[u]) && !isinf(v[u]) && (bi == 0xffffffffu || v[u] > bv)) {
                bv = v[u];
                bi = i0 + u * wg;
            }
        }
    }
    ops_wg_argmax(bv, bi);
    if (lid == 0u)
        ids[row] = bi == 0xffffffffu ? -1 : int(bi);
}
