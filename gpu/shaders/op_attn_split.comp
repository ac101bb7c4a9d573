#version 450
/* gpu/shaders/op_attn_split.comp: causal attention over the paged f16 KV
 * cache, split-K (vkops_attention in gpu/vk-ops.c). One workgroup per
 * (chunk of positions, KV head, token) = (x, y, z): it computes every query
 * head of the KV head's GQA group over the chunk, so each K and V word is
 * read once for up to 8 query heads, and writes the unnormalised partial
 * (running max m, sum l, weighted V sum) per (token, head, chunk) to
 * scratch; the workgroup that finishes a (token, KV head) last merges its
 * chunks into the output (below). With one chunk (direct) the output is
 * written at once.
 *
 * Why split-K: decode has one query row per sequence and head, so without
 * a split one workgroup would walk the whole context alone: on an H200
 * (132 SMs) a single sequence with 8 KV heads would keep 8 SMs busy. The
 * host sizes chunks so (chunks x KV heads x tokens) is at least ~2 per SM.
 *
 * Inside a workgroup, tiles of up to 64 positions: 8 lanes a position
 * split the K row's words (16 positions at once, each lane's loads issued
 * before its arithmetic, the dot summed by 3 shuffles per query head); then
 * a subgroup per head updates the online softmax (max, rescale factor,
 * sum); then each invocation owns one f16 pair of the V row for every head
 * of the group and a share of the tile's positions (4 loads in flight), the
 * shares summed through shared memory at the end.
 * q is rounded to f16 first, as ops_attn_head does (ggml's F16 K x F32 Q).
 *
 * q8out = 1 (vkops_attention's yq; head_dim_v a multiple of 32): the
 * workgroup that writes a (token, KV head)'s output (the direct one, or
 * the merge) also writes it as q8 blocks (q8_block.glsl's rule, the layout
 * of vkops_rmsnorm_q8's yq: a row of n_head * hdv values is n_head * hdv /
 * 32 blocks) from a copy in shared memory, so the o projection after it
 * runs on the integer-dot matvec over exactly the blocks vkops_quant_q8
 * would make of out, with no dispatch of its own. */
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : require
#define KV_BIND 4
#include "op_common.glsl"
#include "op_kv.glsl"
#include "q8_block.glsl"

#define WG 128u
#define TILE 64u
#define GMAX 8u
#define HDMAX 256u
#define SLW 16u /* words of a K row a lane loads: HDMAX / 2 / 8 */

layout(local_size_x = 128) in;

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer Seq { int seq[]; };
layout(std430, binding = 2) readonly buffer Pos { int pos[]; };
layout(std430, binding = 3) writeonly buffer Out { float out_[]; };
/* scratch: ATTN_COUNTERS uint counters, one per (token, KV head), then the
 * partials (m, l, acc[hdv]) per ((token, head), chunk), as uint bits */
layout(std430, binding = 9) coherent buffer Scr { uint scr[]; };
layout(std430, binding = 10) writeonly buffer OutQ { uvec4 oq[]; };

#define ATTN_COUNTERS 65536u

layout(push_constant) uniform P {
    kv_geom g;
    uint layer;
    uint n_tok, n_head, n_head_kv;
    uint hdk, hdv;
    uint chunk;   /* positions a chunk, a multiple of TILE */
    uint n_chunk; /* chunks per (token, head) in dst */
    uint direct;  /* 1: one chunk: no partials, out written at once */
    float scale;
    uint q8out; /* 1: out as q8 blocks too (binding 10) */
} p;

shared float s_q[GMAX * HDMAX];
shared float s_sc[GMAX * TILE];
shared float s_m[GMAX], s_l[GMAX], s_alpha[GMAX];
shared bool s_last;
shared vec2 s_red[GMAX * WG]; /* the reps' V sums: GMAX * WG = GMAX * HDMAX / 2 */

/* q8out: the G heads' output from h0 of token t, held in s_q (G * hdv
 * floats, s_q's q no longer read), as q8 blocks into binding 10. */
void q8_out(uint t, uint h0, uint G, uint lid) {
    const uint b0 = (t * p.n_head + h0) * p.hdv / 32u;
    for (uint b = lid; b < G * p.hdv / 32u; b += WG) {
        vec4 v[8];
        [[unroll]] for (uint k = 0u; k < 8u; k++)
            v[k] = vec4(s_q[32u * b + 4u * k], s_q[32u * b + 4u * k + 1u],
                        s_q[32u * b + 4u * k + 2u], s_q[32u * b + 4u * k + 3u]);
        uvec4 qa, qb;
        float d;
        int sum;
        q8_block(v, qa, qb, d, sum);
        oq[3u * (b0 + b)] = qa;
        oq[3u * (b0 + b) + 1u] = qb;
        oq[3u * (b0 + b) + 2u] = uvec4(floatBitsToUint(d), uint(sum), 0u, 0u);
    }
}

void main() {
    const uint c = gl_WorkGroupID.x, hk = gl_WorkGroupID.y, t = gl_WorkGroupID.z;
    const uint lid = gl_LocalInvocationID.x;
    const uint G = p.n_head / p.n_head_kv, h0 = hk * G;
    const int st = seq[t];
    const uint n_kv = uint(pos[t]) + 1u;
    const uint p_begin = c * p.chunk;
    const uint p_end = min(p_begin + p.chunk, n_kv);

    for (uint i = lid; i < G * p.hdk; i += WG) /* heads h0 .. h0+G-1 are contiguous in q */
        s_q[i] = unpackHalf2x16(kv_f32_to_f16(q[(t * p.n_head + h0) * p.hdk + i])).x;
    if (lid < G) {
        s_m[lid] = -1.0 / 0.0;
        s_l[lid] = 0.0;
    }
    /* V ownership: pair dp of the row for every head of the group; the
     * reps = WG / npair invocations of a pair take every reps-th position
     * of a tile and are summed at the end (s_red) */
    const uint npair = p.hdv / 2u;
    const uint reps = max(1u, WG / npair);
    const uint dp = lid % npair, r = lid / npair;
    const bool own = lid < npair * reps;
    vec2 acc[GMAX];
    for (uint k = 0u; k < GMAX; k++)
        acc[k] = vec2(0.0);
    barrier();

    const uint hw = p.hdk / 2u, sg = gl_SubgroupSize, lane = gl_SubgroupInvocationID;
    for (uint tile0 = p_begin; tile0 < p_end; tile0 += TILE) {
        const uint nt = min(TILE, p_end - tile0);
        /* 8 lanes a position, 16 positions at once: each lane loads its
         * (up to 16) words of the K row before any arithmetic, so the loads
         * overlap; a subgroup per position walked the tile one row at a time
         * and was latency-bound (15 us a call on the H200 at ~64 positions,
         * lead's 7B decode profile) */
        const uint grp = lid / 8u, l8 = lid % 8u;
        for (uint pp0 = 0u; pp0 < nt; pp0 += WG / 8u) {
            const uint pp = pp0 + grp;
            const bool okp = pp < nt;
            float dot[GMAX];
            for (uint k = 0u; k < GMAX; k++)
                dot[k] = 0.0;
            if (okp) {
                const int ps = int(tile0 + pp);
                const uint blk = kv_block(p.g, st, ps);
                const uint piece = blk / p.g.blocks_per_piece;
                const uint base = kv_word_index(p.g, blk, p.layer, ps, hk, p.hdk, false, 0u);
                uint kw[SLW];
                for (uint i = 0u; i < SLW; i++) {
                    const uint w = l8 + 8u * i;
                    kw[i] = w < hw ? kv_load(piece, base + w) : 0u;
                }
                for (uint i = 0u; i < SLW; i++) {
                    const uint w = l8 + 8u * i;
                    if (w < hw) {
                        const vec2 kk = unpackHalf2x16(kw[i]);
                        for (uint k = 0u; k < GMAX; k++)
                            if (k < G)
                                dot[k] += s_q[k * p.hdk + 2u * w] * kk.x +
                                          s_q[k * p.hdk + 2u * w + 1u] * kk.y;
                    }
                }
            }
            for (uint k = 0u; k < GMAX; k++) {
                if (k < G) {
                    float d = dot[k];
                    d += subgroupShuffleXor(d, 1u);
                    d += subgroupShuffleXor(d, 2u);
                    d += subgroupShuffleXor(d, 4u);
                    if (okp && l8 == 0u)
                        s_sc[k * TILE + pp] = d * p.scale;
                }
            }
        }
        barrier();
        for (uint k = gl_SubgroupID; k < G; k += gl_NumSubgroups) {
            float mx = -1.0 / 0.0;
            for (uint i = lane; i < nt; i += sg)
                mx = max(mx, s_sc[k * TILE + i]);
            mx = subgroupMax(mx);
            const float m_old = s_m[k], m_new = max(m_old, mx);
            float sum = 0.0;
            for (uint i = lane; i < nt; i += sg) {
                const float e = exp(s_sc[k * TILE + i] - m_new);
                s_sc[k * TILE + i] = e;
                sum += e;
            }
            sum = subgroupAdd(sum);
            if (subgroupElect()) {
                const float alpha = exp(m_old - m_new); /* 0 on the first tile (m_old -inf) */
                s_alpha[k] = alpha;
                s_l[k] = s_l[k] * alpha + sum;
                s_m[k] = m_new;
            }
        }
        barrier();
        if (own) {
            for (uint k = 0u; k < GMAX; k++)
                if (k < G)
                    acc[k] *= s_alpha[k];
            for (uint pp0 = r; pp0 < nt; pp0 += 4u * reps) { /* 4 loads in flight */
                vec2 vv[4];
                for (uint u = 0u; u < 4u; u++) {
                    const uint pp = pp0 + u * reps;
                    vv[u] = vec2(0.0);
                    if (pp < nt) {
                        const int ps = int(tile0 + pp);
                        const uint blk = kv_block(p.g, st, ps);
                        vv[u] = unpackHalf2x16(kv_load(
                            blk / p.g.blocks_per_piece,
                            kv_word_index(p.g, blk, p.layer, ps, hk, p.hdv, true, dp)));
                    }
                }
                for (uint u = 0u; u < 4u; u++) {
                    const uint pp = pp0 + u * reps;
                    if (pp < nt)
                        for (uint k = 0u; k < GMAX; k++)
                            if (k < G)
                                acc[k] += s_sc[k * TILE + pp] * vv[u];
                }
            }
        }
        barrier();
    }

    /* sum the reps' partial V sums of each pair into r == 0, in the order
     * r = 1, 2, ...: every rep writes its sums at once (G x WG vec2 fit
     * s_red; lid = r * npair + dp) and one barrier follows. A barrier a
     * rep (two, as this was) cost little at head_dim 128 (2 reps) but 62
     * barriers at head_dim 8 (32 reps): on lavapipe, where a barrier
     * switches every SIMD slice of the workgroup, stories260K's decode
     * attention took 4.8 ms a call, 73% of test-vk-model's device
     * sampling check (STRATA_GPU_PROFILE, 2-vCPU AMD EPYC, release). */
    if (reps > 1u) {
        if (own && r != 0u)
            for (uint k = 0u; k < GMAX; k++)
                if (k < G)
                    s_red[k * WG + lid] = acc[k];
        barrier();
        if (own && r == 0u)
            for (uint rr = 1u; rr < reps; rr++)
                for (uint k = 0u; k < GMAX; k++)
                    if (k < G)
                        acc[k] += s_red[k * WG + rr * npair + dp];
    }
    if (own && r == 0u) {
        for (uint k = 0u; k < GMAX; k++) {
            const uint gh = k;
            if (gh >= G)
                continue;
            const uint h = h0 + gh;
            if (p.direct != 0u) {
                const vec2 o = acc[k] / s_l[gh];
                const uint oi = (t * p.n_head + h) * p.hdv + 2u * dp;
                out_[oi] = o.x;
                out_[oi + 1u] = o.y;
                if (p.q8out != 0u) { /* the main loop's barriers are behind: s_q is free */
                    s_q[gh * p.hdv + 2u * dp] = o.x;
                    s_q[gh * p.hdv + 2u * dp + 1u] = o.y;
                }
            } else {
                const uint oi = ATTN_COUNTERS +
                                ((t * p.n_head + h) * p.n_chunk + c) * (p.hdv + 2u) + 2u + 2u * dp;
                scr[oi] = floatBitsToUint(acc[k].x);
                scr[oi + 1u] = floatBitsToUint(acc[k].y);
            }
        }
    }
    if (p.direct != 0u) {
        if (p.q8out != 0u) {
            barrier();
            q8_out(t, h0, G, lid);
        }
        return;
    }
    if (lid < G) {
        const uint oi = ATTN_COUNTERS + ((t * p.n_head + h0 + lid) * p.n_chunk + c) * (p.hdv + 2u);
        scr[oi] = floatBitsToUint(s_m[lid]);
        scr[oi + 1u] = floatBitsToUint(s_l[lid]);
    }

    /* The last of the (token, KV head)'s chunks to finish merges them all
     * (a counter per pair, reset for the next dispatch): no second launch,
     * and no barrier between two dispatches, per layer. Partials go out
     * before the count (memoryBarrierBuffer on a coherent buffer), and the
     * last one reads them after it. */
    memoryBarrierBuffer();
    barrier();
    if (lid == 0u)
        s_last = atomicAdd(scr[t * p.n_head_kv + hk], 1u) == p.n_chunk - 1u;
    barrier();
    if (!s_last)
        return;
    memoryBarrierBuffer();
    const uint stride = p.hdv + 2u;
    for (uint i = lid; i < G * p.hdv; i += WG) {
        const uint gh = i / p.hdv, d = i % p.hdv;
        const uint base = ATTN_COUNTERS + (t * p.n_head + h0 + gh) * p.n_chunk * stride;
        float M = -1.0 / 0.0;
        for (uint cc = 0u; cc < p.n_chunk; cc++)
            M = max(M, uintBitsToFloat(scr[base + cc * stride]));
        float L = 0.0, o = 0.0;
        for (uint cc = 0u; cc < p.n_chunk; cc++) {
            const float m = uintBitsToFloat(scr[base + cc * stride]);
            if (m > -1.0 / 0.0) { /* chunks past pos[t] are empty: m = -inf */
                const float e = exp(m - M);
                L += e * uintBitsToFloat(scr[base + cc * stride + 1u]);
                o += e * uintBitsToFloat(scr[base + cc * stride + 2u + d]);
            }
        }
        out_[(t * p.n_head + h0 + gh) * p.hdv + d] = o / L;
        if (p.q8out != 0u)
            s_q[i] = o / L;
    }
    if (p.q8out != 0u) {
        barrier();
        q8_out(t, h0, G, lid);
    }
    if (lid == 0u)
        scr[t * p.n_head_kv + hk] = 0u;
}
