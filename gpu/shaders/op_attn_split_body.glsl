/* gpu/shaders/op_attn_split_body.glsl: op_attn_split.comp's kernel (the
 * comment there), and with ROPE defined op_attn_rope.comp's: the same
 * attention for decode batches that also norms and ropes q and writes the
 * step's new K and V row itself, in place of op_rope_kv.comp's dispatch
 * before it (vkops_attention's rope). */
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
#define VLD 8u  /* V loads a lane has in flight */

layout(local_size_x = 128) in;

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer Seq { int seq[]; };
layout(std430, binding = 2) readonly buffer Pos { int pos[]; };
layout(std430, binding = 3) writeonly buffer Out { float out_[]; };
/* scratch: ATTN_COUNTERS uint counters, one per (token, KV head), then the
 * partials (m, l, acc[hdv]) per ((token, head), chunk), as uint bits */
layout(std430, binding = 9) coherent buffer Scr { uint scr[]; };
layout(std430, binding = 10) writeonly buffer OutQ { uvec4 oq[]; };
#ifdef ROPE
/* the step's new rows as the projections wrote them (q above unroped too),
 * and what the rope and norms take (op_rope_kv.comp's bindings 5-7) */
layout(std430, binding = 11) readonly buffer KN { float k_new[]; };
layout(std430, binding = 12) readonly buffer VN { float v_new[]; };
layout(std430, binding = 13) readonly buffer FF { float ff[]; };
layout(std430, binding = 14) readonly buffer QNW { float qnw[]; };
layout(std430, binding = 15) readonly buffer KNW { float knw[]; };
#endif

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
#ifdef ROPE
    uint n_rot, mode; /* op_rope_kv.comp's fields, same meaning */
    float theta_scale, freq_scale, ext_factor, mscale, corr0, corr1;
    uint has_ff, norm_q, norm_k;
    float eps_q, eps_k;
#endif
} p;

#ifdef ROPE
#include "op_rope.glsl"
#include "op_rope_head.glsl"

float ld(uint which, uint i) {
    return which == SQ ? q[i] : which == SK ? k_new[i] : v_new[i];
}

float nw(uint which, uint e) {
    return which == SQ ? qnw[e] : knw[e];
}

vec2 cs_of(int ps, uint i) {
    return rope_cs(ps, i, p.theta_scale, p.has_ff != 0u, p.has_ff != 0u ? ff[i] : 1.0,
                   p.freq_scale, p.ext_factor, p.corr0, p.corr1, p.mscale);
}

/* the new K and V row of the token's own position, as f16 pairs (the
 * writing chunk's loads of that position read these instead) */
shared uint s_knew[HDMAX / 2u], s_vnew[HDMAX / 2u];
#endif

shared float s_q[GMAX * HDMAX];
shared float s_sc[GMAX * TILE];
shared float s_m[GMAX], s_l[GMAX], s_alpha[GMAX];
shared bool s_last;
/* a tile's positions where they live in the cache, looked up once a tile
 * (double-buffered by the tile's parity, so the next tile's lookups go out
 * before the barrier that ends this one): the piece, and the word of
 * (position, KV head hk, pair 0) in it for K and for V */
shared uint s_piece[2u * TILE], s_kb[2u * TILE], s_vb[2u * TILE];
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

/* the cache words of positions tile0 .. tile0 + TILE - 1 (below p_end) into
 * buffer slot `buf` of s_piece / s_kb / s_vb: one table read a position, by
 * lanes 0 .. TILE - 1, before a barrier (the K and V loops then issue their
 * loads with no dependent table read in front of them) */
void lookup(uint buf, uint tile0, uint p_end, int st, uint hk, uint lid) {
    if (lid < TILE && tile0 + lid < p_end) {
        const int ps = int(tile0 + lid);
        const uint blk = kv_block(p.g, st, ps);
        s_piece[buf * TILE + lid] = blk / p.g.blocks_per_piece;
        s_kb[buf * TILE + lid] = kv_word_index(p.g, blk, p.layer, ps, hk, p.hdk, false, 0u);
        s_vb[buf * TILE + lid] = kv_word_index(p.g, blk, p.layer, ps, hk, p.hdv, true, 0u);
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

#ifdef ROPE
    /* q's heads normed and roped here (op_rope_head.glsl, the arithmetic
     * of op_rope_kv.comp); the chunk that holds the token's own position
     * also does its K and V row: into the cache, and kept in s_knew /
     * s_vnew, which that chunk's loads of the position read (no other
     * workgroup of the dispatch reads it: the caller's promise that each
     * sequence has one token in the batch) */
    const int ps_t = pos[t];
    const bool writer = c == uint(ps_t) / p.chunk;
    for (uint k = 0u; k < G; k++) {
        float o0, o1;
        if (rope_head(SQ, (t * p.n_head + h0 + k) * p.hdk, p.hdk, ps_t, lid, o0, o1)) {
            s_q[k * p.hdk + 2u * lid] = unpackHalf2x16(kv_f32_to_f16(o0)).x;
            s_q[k * p.hdk + 2u * lid + 1u] = unpackHalf2x16(kv_f32_to_f16(o1)).x;
        }
    }
    if (writer) {
        const uint blk = kv_block(p.g, st, ps_t), piece = blk / p.g.blocks_per_piece;
        float o0, o1;
        if (rope_head(SK, (t * p.n_head_kv + hk) * p.hdk, p.hdk, ps_t, lid, o0, o1)) {
            const uint w = kv_f32_to_f16(o0) | (kv_f32_to_f16(o1) << 16);
            s_knew[lid] = w;
            kv_store(piece, kv_word_index(p.g, blk, p.layer, ps_t, hk, p.hdk, false, lid), w);
        }
        if (rope_head(SV, (t * p.n_head_kv + hk) * p.hdv, p.hdv, ps_t, lid, o0, o1)) {
            const uint w = kv_f32_to_f16(o0) | (kv_f32_to_f16(o1) << 16);
            s_vnew[lid] = w;
            kv_store(piece, kv_word_index(p.g, blk, p.layer, ps_t, hk, p.hdv, true, lid), w);
        }
    }
#else
    for (uint i = lid; i < G * p.hdk; i += WG) /* heads h0 .. h0+G-1 are contiguous in q */
        s_q[i] = unpackHalf2x16(kv_f32_to_f16(q[(t * p.n_head + h0) * p.hdk + i])).x;
#endif
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
    lookup(0u, p_begin, p_end, st, hk, lid); /* the first tile's, beside q's loads */
    barrier();

    const uint hw = p.hdk / 2u, sg = gl_SubgroupSize, lane = gl_SubgroupInvocationID;
    for (uint tile0 = p_begin; tile0 < p_end; tile0 += TILE) {
        const uint nt = min(TILE, p_end - tile0);
        const uint tb = ((tile0 - p_begin) / TILE) & 1u; /* this tile's lookup slot */
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
                const uint piece = s_piece[tb * TILE + pp], base = s_kb[tb * TILE + pp];
                uint kw[SLW];
#ifdef ROPE
                if (writer && tile0 + pp == uint(ps_t)) {
                    for (uint i = 0u; i < SLW; i++) {
                        const uint w = l8 + 8u * i;
                        kw[i] = w < hw ? s_knew[w] : 0u;
                    }
                } else
#endif
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
            for (uint pp0 = r; pp0 < nt; pp0 += VLD * reps) { /* VLD loads in flight */
                vec2 vv[VLD];
                for (uint u = 0u; u < VLD; u++) {
                    const uint pp = pp0 + u * reps;
                    vv[u] = vec2(0.0);
#ifdef ROPE
                    if (pp < nt && writer && tile0 + pp == uint(ps_t))
                        vv[u] = unpackHalf2x16(s_vnew[dp]);
                    else
#endif
                        if (pp < nt)
                        vv[u] = unpackHalf2x16(
                            kv_load(s_piece[tb * TILE + pp], s_vb[tb * TILE + pp] + dp));
                }
                for (uint u = 0u; u < VLD; u++) {
                    const uint pp = pp0 + u * reps;
                    if (pp < nt)
                        for (uint k = 0u; k < GMAX; k++)
                            if (k < G)
                                acc[k] += s_sc[k * TILE + pp] * vv[u];
                }
            }
        }
        if (tile0 + TILE < p_end)
            lookup(tb ^ 1u, tile0 + TILE, p_end, st, hk, lid);
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
