#version 450
/* gpu/shaders/op_moe_route.comp: the MoE router of one token a workgroup
 * (vkops_moe_route; engine/cpu/cpu-moe.c cpu_route_run is the reference):
 * softmax over n_expert logits in place, k passes of a workgroup argmax
 * (ties to the lower id) over the experts not yet taken, the picks'
 * probabilities summed in pick order, renormalised when norm_topk, then
 * times scale unless it is 0 or 1. Each invocation owns experts lid + 256 j
 * (j < 4: up to 1024 experts) and remembers which of them are taken. */
#include "op_common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) buffer L { float logits[]; };
layout(std430, binding = 1) writeonly buffer S { int sel[]; };
layout(std430, binding = 2) writeonly buffer W { float sel_w[]; };

layout(push_constant) uniform P {
    uint n_expert;
    uint k;
    uint norm_topk;
    float scale;
    uint n_tok;
} p;

shared uint s_id[32];
shared float s_w[32];

void main() {
    const uint t = ops_group_id(), lid = gl_LocalInvocationID.x;
    if (t >= p.n_tok)
        return;
    const uint base = t * p.n_expert;
    float pr[4];
    bool taken[4];
    float mx = -1.0 / 0.0;
    for (uint j = 0u; j < 4u; j++) {
        const uint e = lid + 256u * j;
        pr[j] = e < p.n_expert ? logits[base + e] : -1.0 / 0.0;
        taken[j] = e >= p.n_expert;
        mx = max(mx, pr[j]);
    }
    mx = ops_wg_max(mx);
    float s = 0.0;
    for (uint j = 0u; j < 4u; j++) {
        pr[j] = taken[j] ? 0.0 : exp(pr[j] - mx);
        s += pr[j];
    }
    const float inv = 1.0 / ops_wg_sum(s);
    for (uint j = 0u; j < 4u; j++) {
        const uint e = lid + 256u * j;
        pr[j] *= inv;
        if (e < p.n_expert)
            logits[base + e] = pr[j];
    }
    for (uint pass = 0u; pass < p.k; pass++) {
        float bv = -1.0 / 0.0;
        uint bi = 0xffffffffu;
        for (uint j = 0u; j < 4u; j++) {
            const uint e = lid + 256u * j;
            if (!taken[j] && (bi == 0xffffffffu || pr[j] > bv)) {
                bv = pr[j];
                bi = e;
            }
        }
        ops_wg_argmax(bv, bi);
        for (uint j = 0u; j < 4u; j++)
            if (lid + 256u * j == bi)
                taken[j] = true;
        if (lid == 0u) {
            s_id[pass] = bi;
            s_w[pass] = bv;
        }
    }
    if (lid == 0u) {
        float sum = 0.0;
        for (uint j = 0u; j < p.k; j++)
            sum += s_w[j];
        for (uint j = 0u; j < p.k; j++) {
            float w = s_w[j];
            if (p.norm_topk != 0u)
                w /= sum;
            if (p.scale != 0.0 && p.scale != 1.0)
                w *= p.scale;
            sel[t * p.k + j] = int(s_id[j]);
            sel_w[t * p.k + j] = w;
        }
    }
}
