#version 450
/* gpu/shaders/op_moe_route.comp: the MoE router of one token a workgroup
 * (vkops_moe_route; engine/cpu/cpu-moe.c cpu_route_run is the reference):
 * softmax over n_expert logits in place, the top k (ties to the lower id;
 * in two levels, below), the picks'
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

#define ROUTE_K_MAX 32u /* VKOPS_ROUTE_K_MAX */
shared uint s_id[ROUTE_K_MAX];
shared float s_w[ROUTE_K_MAX];
#define ROUTE_SG_MAX 32u /* 256 invocations in subgroups of 8 or more (vkops_init) */
shared float s_cv[ROUTE_SG_MAX * ROUTE_K_MAX]; /* each subgroup's k best */
shared uint s_ci[ROUTE_SG_MAX * ROUTE_K_MAX];

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
    /* the top k in two levels: each subgroup its own k best (subgroup
     * argmaxes, no barrier), then subgroup 0 the k best of those. The k
     * passes of workgroup argmaxes this replaces took 2 barriers each: 9.1 us
     * a call for 128 experts top-8 on the H100 (bench/README.md, "fused
     * decode"). Same picks and ties (the lower id), since every expert of the
     * global top k is among its subgroup's top k. */
    const uint sgi = gl_SubgroupID, ns = gl_NumSubgroups, sl = gl_SubgroupInvocationID;
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
        const float m = subgroupMax(bv);
        const uint im = subgroupMin(bv == m ? bi : 0xffffffffu);
        for (uint j = 0u; j < 4u; j++)
            if (lid + 256u * j == im)
                taken[j] = true;
        if (subgroupElect()) {
            s_cv[sgi * ROUTE_K_MAX + pass] = m;
            s_ci[sgi * ROUTE_K_MAX + pass] = im;
        }
    }
    barrier();
    if (sgi == 0u) { /* candidates c = sl, sl + sg, ...: each lane reads and clears its own */
        const uint nc = ns * ROUTE_K_MAX, sg = gl_SubgroupSize;
        for (uint pass = 0u; pass < p.k; pass++) {
            float bv = -1.0 / 0.0;
            uint bi = 0xffffffffu, bc = 0u;
            for (uint c = sl; c < nc; c += sg) {
                if (c % ROUTE_K_MAX >= p.k || s_ci[c] == 0xffffffffu)
                    continue;
                const float v = s_cv[c];
                if (bi == 0xffffffffu || v > bv || (v == bv && s_ci[c] < bi)) {
                    bv = v;
                    bi = s_ci[c];
                    bc = c;
                }
            }
            const float m = subgroupMax(bi == 0xffffffffu ? -1.0 / 0.0 : bv);
            const uint im = subgroupMin(bi != 0xffffffffu && bv == m ? bi : 0xffffffffu);
            if (bi == im && bi != 0xffffffffu)
                s_ci[bc] = 0xffffffffu; /* taken */
            if (sl == 0u) {
                s_id[pass] = im;
                s_w[pass] = m;
            }
        }
    }
    barrier();
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
