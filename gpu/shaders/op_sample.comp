#version 450
/* gpu/shaders/op_sample.comp: top-k / top-p / min-p sampling of one row of
 * logits a workgroup (vkops_sample; the rule of engine/sample/sampler.c,
 * the host's uniform u[row] decides the draw).
 *
 * The top_k candidates come from top_k workgroup argmax passes, each over
 * the values strictly below the previous pick in the order (logit
 * descending, id ascending), so they arrive sorted best first with ties to
 * the lower id, as sampler.c's qsort orders them, and no candidate list of
 * the whole vocabulary is ever built. The rest (at most 256 values) runs
 * in invocation 0: softmax at temperature 1 over the kept, the smallest
 * prefix reaching top_p, min_p against the best, then the draw at
 * temperature T. sampler.c sums in double; these sums are f32. */
#include "op_common.glsl"

/* 1024 invocations where the device allows (gpu/vk-ops.c), else 256: one
 * workgroup streams the whole vocabulary, so wider is faster */
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer L { float logits[]; };
layout(std430, binding = 1) readonly buffer U { float u[]; };
layout(std430, binding = 2) writeonly buffer I { int ids[]; };

layout(push_constant) uniform P {
    uint n_vocab;
    uint top_k;
    float top_p;
    float min_p;
    float temperature;
    uint n_rows;
} p;

shared float s_v[256];
shared uint s_i[256];

void main() {
    const uint row = ops_group_id(), lid = gl_LocalInvocationID.x;
    if (row >= p.n_rows)
        return;
    const uint base = row * p.n_vocab;
    float pv = 1.0 / 0.0; /* the previous pick: everything finite is below (inf, 0) */
    uint pi = 0u;
    uint nc = 0u;
    for (uint pass = 0u; pass < p.top_k; pass++) {
        float bv = -1.0 / 0.0;
        uint bi = 0xffffffffu;
        for (uint i = lid; i < p.n_vocab; i += gl_WorkGroupSize.x) {
            const float v = logits[base + i];
            if (isnan(v) || isinf(v))
                continue;
            if (!(v < pv || (v == pv && i > pi)))
                continue;
            if (bi == 0xffffffffu || v > bv) {
                bv = v;
                bi = i;
            }
        }
        ops_wg_argmax(bv, bi);
        if (bi == 0xffffffffu)
            break; /* fewer finite logits than top_k */
        if (lid == 0u) {
            s_v[pass] = bv;
            s_i[pass] = bi;
        }
        pv = bv;
        pi = bi;
        nc = pass + 1u;
    }
    if (lid != 0u)
        return;
    if (nc == 0u) {
        ids[row] = -1;
        return;
    }
    const float mx = s_v[0];
    float z = 0.0;
    for (uint i = 0u; i < nc; i++)
        z += exp(s_v[i] - mx);
    uint keep = nc;
    if (p.top_p < 1.0) {
        float cum = 0.0;
        for (uint i = 0u; i < nc; i++) {
            cum += exp(s_v[i] - mx) / z;
            if (cum >= p.top_p) {
                keep = i + 1u;
                break;
            }
        }
    }
    if (p.min_p > 0.0) { /* keeps a prefix: the candidates are sorted */
        const float lim = p.min_p * (1.0 / z);
        uint k2 = 0u;
        for (uint i = 0u; i < keep; i++)
            if (exp(s_v[i] - mx) / z >= lim)
                k2 = i + 1u;
        keep = max(k2, 1u); /* min_p > 1 would keep nothing: the best stays */
    }
    float zt = 0.0;
    for (uint i = 0u; i < keep; i++)
        zt += exp((s_v[i] - mx) / p.temperature);
    const float r = u[row] * zt;
    float acc = 0.0;
    uint pick = s_i[keep - 1u];
    for (uint i = 0u; i < keep; i++) {
        acc += exp((s_v[i] - mx) / p.temperature);
        if (r < acc) {
            pick = s_i[i];
            break;
        }
    }
    ids[row] = int(pick);
}
