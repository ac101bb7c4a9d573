#version 450
/* gpu/shaders/op_rmsnorm.comp: RMSNorm of rows whose width is a multiple of
 * 4 (vkops_rmsnorm; op_rows.comp mode 0 takes the others), one workgroup a
 * row. The first 4096 values of a row are loaded once, as four independent
 * vec4 loads an invocation kept in registers for the scaling pass: the
 * first version looped over 16 dependent scalar loads an invocation and
 * took 11.1 us a 4096-wide row on the H200 (lead's profile of llama-2-7b
 * Q4_0 decode, 1040 calls), bound by load latency, not bandwidth.
 * Same arithmetic as op_rows.comp: y = x * (1 / sqrt(mean(x^2) + eps)) * w.
 *
 * Q8 = 1 (vkops_rmsnorm_q8, rows a multiple of 32 wide): y also quantized
 * to q8 blocks of 32 into binding 3, the activations of the integer-dot
 * matvec (mv_dot.comp) that reads the norm next. Block b of row r at word
 * 12 (r * n / 32 + b): 8 words of int8 levels (element j in byte j % 4 of
 * word j / 4), then d (float bits), the levels' sum, two zero words; d =
 * max|y| / 127, level = round(y / d): q8_block.glsl's rule, which the
 * integer-dot kernels share. An invocation recomputes its blocks' y from x
 * (cached) rather than reading what other invocations wrote.
 *
 * Q8 = 3 (vkops_quant_q8): no norm: x's rows as q8 blocks only (binding 3,
 * the same layout and rule), y not written: the prefill tiles' activations
 * where no norm wrote their q8 copy (the o and down projections' inputs). */
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "op_common.glsl"
#include "q8_block.glsl"

layout(constant_id = 0) const uint Q8 = 0; /* 2: the two-pass form at every width; 3: q8 of x */
layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer X { vec4 x[]; };
layout(std430, binding = 1) readonly buffer W { vec4 w[]; };
layout(std430, binding = 2) writeonly buffer Y { vec4 y[]; };
layout(std430, binding = 3) writeonly buffer YQ { uvec4 yq[]; };

layout(push_constant) uniform P {
    uint n4; /* n_cols / 4 */
    uint has_w;
    float eps;
    uint n_rows;
} p;

/* Q8 = 1 and rows of at most 4096: one pass. Invocation lid holds the 16
 * consecutive values from 16 lid (with their weights, loaded beside them),
 * so invocations 2b and 2b + 1 hold block b: its max and level sum come
 * from one shuffle, and x is read once. Two passes over x (the y pass, then
 * each block's 32 values again for its levels) took 7.8 us a call in the
 * 7B's decode profile on an H100 (bench/README.md, "q8 activations"). */
void norm_q8_row(uint row, uint lid) {
    const uint base = row * p.n4, nb = p.n4 / 8u;
    vec4 v[4], g[4];
    float s = 0.0;
    [[unroll]] for (uint j = 0u; j < 4u; j++) {
        const uint i = 4u * lid + j;
        v[j] = i < p.n4 ? x[base + i] : vec4(0.0);
        g[j] = p.has_w != 0u && i < p.n4 ? w[i] : vec4(1.0);
        s += dot(v[j], v[j]);
    }
    const float scale = 1.0 / sqrt(ops_wg_sum(s) / float(4u * p.n4) + p.eps);
    float amax = 0.0;
    [[unroll]] for (uint j = 0u; j < 4u; j++) {
        const uint i = 4u * lid + j;
        v[j] = p.has_w != 0u ? v[j] * scale * g[j] : v[j] * scale;
        if (i < p.n4)
            y[base + i] = v[j];
        amax = q8_amax(amax, v[j]);
    }
    amax = max(amax, subgroupShuffleXor(amax, 1u));
    const float d = amax / 127.0, id = q8_inv(d);
    int sum = 0;
    uint q[4];
    [[unroll]] for (uint j = 0u; j < 4u; j++)
        q[j] = q8_pack(v[j], id, sum);
    sum += subgroupShuffleXor(sum, 1u);
    if (4u * lid < p.n4) {
        const uint o = 3u * (row * nb + lid / 2u);
        yq[o + (lid & 1u)] = uvec4(q[0], q[1], q[2], q[3]);
        if ((lid & 1u) == 0u)
            yq[o + 2u] = uvec4(floatBitsToUint(d), uint(sum), 0u, 0u);
    }
}

/* block k of binding 3 (3 uvec4 a block) from the 32 values in v */
void q8_store(uint k, vec4 v[8]) {
    uvec4 qa, qb;
    float d;
    int sum;
    q8_block(v, qa, qb, d, sum);
    yq[3u * k] = qa;
    yq[3u * k + 1u] = qb;
    yq[3u * k + 2u] = uvec4(floatBitsToUint(d), uint(sum), 0u, 0u);
}

/* Q8 = 3: block b of the row from invocation lid on, 32 values each. */
void quant_row(uint row, uint lid) {
    const uint base = row * p.n4, nb = p.n4 / 8u;
    for (uint b = lid; b < nb; b += 256u) {
        vec4 v[8];
        [[unroll]] for (uint k = 0u; k < 8u; k++)
            v[k] = x[base + 8u * b + k];
        q8_store(row * nb + b, v);
    }
}

void main() {
    const uint row = ops_group_id(), lid = gl_LocalInvocationID.x;
    if (row >= p.n_rows)
        return;
    if (Q8 == 3u) {
        quant_row(row, lid);
        return;
    }
    if (Q8 == 1u && p.n4 <= 1024u) {
        norm_q8_row(row, lid);
        return;
    }
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
    if (Q8 == 0u)
        return;
    const uint nb = p.n4 / 8u;
    for (uint b = lid; b < nb; b += 256u) {
        vec4 v[8];
        [[unroll]] for (uint k = 0u; k < 8u; k++) {
            const uint i = 8u * b + k;
            v[k] = p.has_w != 0u ? x[base + i] * scale * w[i] : x[base + i] * scale;
        }
        q8_store(row * nb + b, v);
    }
}
