// gpu/shaders/be_moe_sum.comp: the routed experts' weighted sum of the
// Vulkan backend's moe_ffn (gpu/backend-vk.c): for t < n_tok, i < n_embd
//   out[t, i] = (accumulate ? out[t, i] : 0) + sum_j sel_w[t, j] * d[t * k + j, i]
// in slot order j = 0 .. k-1 (engine/cpu/cpu-moe.c's order), and with
// resid also res[t, i] += out[t, i]: the residual add after the layer
// fused in (one dispatch and barrier fewer a MoE layer).
// With resid and norm, the RMSNorm of the residual after that add too,
//   ny[t, :] = res[t, :] * (1 / sqrt(mean(res[t, :]^2) + eps)) * nw
// by the workgroup that finishes last (the counter in binding 6, which it
// resets; each workgroup's residual stores go out before its count, as in
// mv_body.glsl NORM): the next layer's attention norm is then no dispatch
// of its own.
// Push constants (28 bytes, pinned by struct bvk_moe_sum_push):
//   uint n_tok @0, uint k @4, uint n_embd @8, uint accumulate @12, uint resid @16,
//   uint norm @20, float eps @24.
// Grid: (ceil(n_embd / 64), n_tok).
#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer Out { float out_[]; };
layout(std430, binding = 1) readonly buffer D { float d[]; };
layout(std430, binding = 2) readonly buffer W { float sel_w[]; };
layout(std430, binding = 3) coherent buffer R { float res[]; };
layout(std430, binding = 4) readonly buffer NW { float nw[]; };
layout(std430, binding = 5) writeonly buffer NY { float ny[]; };
layout(std430, binding = 6) coherent buffer Cnt { uint cnt[]; };

layout(push_constant) uniform P {
    uint n_tok;
    uint k;
    uint n_embd;
    uint accumulate;
    uint resid;
    uint norm;
    float eps;
} pc;

shared bool s_last;
shared float s_red[64];

void main() {
    const uint i = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
    if (i < pc.n_embd && t < pc.n_tok) {
        const uint o = t * pc.n_embd + i;
        float s = pc.accumulate != 0u ? out_[o] : 0.0;
        for (uint j = 0u; j < pc.k; j++)
            s += sel_w[t * pc.k + j] * d[(t * pc.k + j) * pc.n_embd + i];
        out_[o] = s;
        if (pc.resid != 0u)
            res[o] += s;
    }
    if (pc.norm == 0u)
        return; // uniform: every workgroup of the dispatch
    memoryBarrierBuffer();
    barrier();
    const uint lid = gl_LocalInvocationID.x;
    if (lid == 0u)
        s_last = atomicAdd(cnt[0], 1u) == gl_NumWorkGroups.x * gl_NumWorkGroups.y - 1u;
    barrier();
    if (!s_last)
        return;
    memoryBarrierBuffer();
    const uint n = pc.n_embd;
    for (uint tt = 0u; tt < pc.n_tok; tt++) {
        const uint base = tt * n;
        float ss = 0.0;
        for (uint c = lid; c < n; c += 64u)
            ss += res[base + c] * res[base + c];
        ss = subgroupAdd(ss);
        barrier(); // s_red of the previous token is read
        if (subgroupElect())
            s_red[gl_SubgroupID] = ss;
        barrier();
        float tot = 0.0;
        for (uint g = 0u; g < gl_NumSubgroups; g++)
            tot += s_red[g];
        const float scale = 1.0 / sqrt(tot / float(n) + pc.eps);
        for (uint c = lid; c < n; c += 64u)
            ny[base + c] = res[base + c] * scale * nw[c];
    }
    if (lid == 0u)
        cnt[0] = 0u;
}
