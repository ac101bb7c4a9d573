// gpu/shaders/be_moe_sum.comp: the routed experts' weighted sum of the
// Vulkan backend's moe_ffn (gpu/backend-vk.c): for t < n_tok, i < n_embd
//   out[t, i] = (accumulate ? out[t, i] : 0) + sum_j sel_w[t, j] * d[t * k + j, i]
// in slot order j = 0 .. k-1 (engine/cpu/cpu-moe.c's order), and with
// resid also res[t, i] += out[t, i]: the residual add after the layer
// fused in (one dispatch and barrier fewer a MoE layer).
// Push constants (20 bytes, pinned by struct bvk_moe_sum_push):
//   uint n_tok @0, uint k @4, uint n_embd @8, uint accumulate @12, uint resid @16.
// Grid: (ceil(n_embd / 64), n_tok).
#version 450

layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer Out { float out_[]; };
layout(std430, binding = 1) readonly buffer D { float d[]; };
layout(std430, binding = 2) readonly buffer W { float sel_w[]; };
layout(std430, binding = 3) buffer R { float res[]; };

layout(push_constant) uniform P {
    uint n_tok;
    uint k;
    uint n_embd;
    uint accumulate;
    uint resid;
} pc;

void main() {
    uint i = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
    if (i >= pc.n_embd || t >= pc.n_tok)
        return;
    uint o = t * pc.n_embd + i;
    float s = pc.accumulate != 0u ? out_[o] : 0.0;
    for (uint j = 0u; j < pc.k; j++)
        s += sel_w[t * pc.k + j] * d[(t * pc.k + j) * pc.n_embd + i];
    out_[o] = s;
    if (pc.resid != 0u)
        res[o] += s;
}
