#version 450
/* gpu/shaders/op_attn_prefill.comp: causal attention of many query tokens
 * over the paged f16 KV cache (vkops_attention above VKOPS_ATTN_DECODE_MAX
 * tokens). One workgroup per (tile of TQ consecutive query tokens, KV head):
 * its rows are the tile's tokens x the KV head's GQA group (TQ * G <= 16
 * rows), so each K/V tile, loaded once into shared memory, serves up to 16
 * query rows (a prefill of 512 tokens of 8 heads over 8 KV heads reads each
 * K row 512 / 16 = 32 times from the cache instead of 512 times).
 *
 * Eight consecutive invocations own a row: each holds 1/8 of the row's q
 * (interleaved words) and 1/8 of its output, the score of a key is their
 * partial dots summed by three subgroupShuffleXor steps (subgroups of at
 * least 8; lavapipe has no clustered reductions), and every one of the eight
 * then runs the same online softmax in registers: no shared memory for
 * scores and no barrier inside a key tile but the loads.
 *
 * A tile whose tokens belong to several sequences (a batch of prefill
 * chunks) is processed once per sequence, with the rows of the others
 * masked. q is rounded to f16 as ops_attn_head does.
 *
 * Order (LATE = 1, the default): the grid is (KV head, tile) and tile
 * n - 1 - y, so the device starts the last tiles of every head first: in a
 * causal prefill they walk the most keys, and the short ones fill the gaps
 * behind them (the longest-first rule), where (tile, KV head) order ran
 * each head's tiles together, the longest last, wave after wave.
 *
 * Tried and taken out: each key's K and V words read from shared memory as
 * uvec4s (a lane holding words 32 i + 4 sl .. + 3, rows padded to whole
 * uvec4s; db63356), a quarter of the shared-load instructions: 750.3 us a
 * layer against this form's 554.4, 7B pp512 3,600 / 3,600 against 3,795 /
 * 3,797 tok/s (H100, device call of 2026-12-07, sixth session, alternated). */
#extension GL_KHR_shader_subgroup_shuffle : require
#define KV_BIND 4
#include "op_common.glsl"
#include "op_kv.glsl"

#define WG 128u
#define TK 16u   /* keys a tile */
#define HWMAX 128u /* words (f16 pairs) of a head: head_dim <= 256 */
#define SLW 16u  /* words an invocation holds of q / out: HWMAX / 8 */

layout(local_size_x = 128) in;
layout(constant_id = 0) const uint LATE = 1; /* 1: (KV head, tile) grid, last tile first */

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer Seq { int seq[]; };
layout(std430, binding = 2) readonly buffer Pos { int pos[]; };
layout(std430, binding = 3) writeonly buffer Out { float out_[]; };

layout(push_constant) uniform P {
    kv_geom g;
    uint layer;
    uint n_tok, n_head, n_head_kv;
    uint hdk, hdv;
    uint tq; /* tokens a tile: 16 / G */
    float scale;
} p;

shared uint s_k[TK * HWMAX], s_v[TK * HWMAX];
shared uint s_kb[TK], s_vb[TK], s_pc[TK]; /* a tile row's first K, V word and piece */

void main() {
    const uint hk = LATE != 0u ? gl_WorkGroupID.x : gl_WorkGroupID.y;
    const uint tile =
        LATE != 0u ? gl_NumWorkGroups.y - 1u - gl_WorkGroupID.y : gl_WorkGroupID.x;
    const uint lid = gl_LocalInvocationID.x;
    const uint G = p.n_head / p.n_head_kv;
    const uint t0 = tile * p.tq;
    const uint row = lid / 8u, sl = lid % 8u;
    const uint t = t0 + row / G, gh = row % G;
    const bool live = row < p.tq * G && t < p.n_tok;
    const uint hwk = p.hdk / 2u, hwv = p.hdv / 2u;

    /* this invocation's q words: w = sl + 8 i */
    vec2 qv[SLW];
    for (uint i = 0u; i < SLW; i++) {
        const uint w = sl + 8u * i;
        qv[i] = vec2(0.0);
        if (live && w < hwk) {
            const uint qi = (t * p.n_head + hk * G + gh) * p.hdk + 2u * w;
            qv[i] = vec2(unpackHalf2x16(kv_f32_to_f16(q[qi])).x,
                         unpackHalf2x16(kv_f32_to_f16(q[qi + 1u])).x);
        }
    }
    const int my_seq = live ? seq[t] : -1;
    const int my_pos = live ? pos[t] : -1;
    const uint n_tile_tok = min(p.tq, p.n_tok - t0);

    for (uint it = 0u; it < n_tile_tok; it++) {
        /* segment: the tile's tokens of sequence seq[t0 + it], once */
        const int sq = seq[t0 + it];
        bool seen = false;
        int max_pos = 0;
        for (uint j = 0u; j < n_tile_tok; j++) {
            if (seq[t0 + j] == sq) {
                seen = seen || j < it;
                max_pos = max(max_pos, pos[t0 + j]);
            }
        }
        if (seen)
            continue;
        const bool act = live && my_seq == sq;
        float m = -1.0 / 0.0, l = 0.0;
        vec2 acc[SLW];
        for (uint i = 0u; i < SLW; i++)
            acc[i] = vec2(0.0);
        for (uint k0 = 0u; k0 <= uint(max_pos); k0 += TK) {
            barrier(); /* the previous tile's readers are done */
            /* the tile's rows: one table lookup a position, then every
             * word's load is independent of the others (4 in flight an
             * invocation) instead of a lookup and a load after another */
            if (lid < TK) {
                const int ps = int(k0 + lid);
                uint kb = 0xffffffffu, vb = 0u, pc = 0u;
                if (ps <= max_pos) {
                    const uint blk = kv_block(p.g, sq, ps);
                    pc = blk / p.g.blocks_per_piece;
                    kb = kv_word_index(p.g, blk, p.layer, ps, hk, p.hdk, false, 0u);
                    vb = kv_word_index(p.g, blk, p.layer, ps, hk, p.hdv, true, 0u);
                }
                s_kb[lid] = kb;
                s_vb[lid] = vb;
                s_pc[lid] = pc;
            }
            barrier();
            const uint hwm = max(hwk, hwv);
            for (uint i0 = lid; i0 < TK * hwm; i0 += 4u * WG) {
                uint kw[4], vw[4];
                for (uint u = 0u; u < 4u; u++) {
                    const uint i = i0 + u * WG, j = i / hwm, w = i % hwm;
                    kw[u] = 0u;
                    vw[u] = 0u;
                    if (i < TK * hwm && s_kb[j] != 0xffffffffu) {
                        if (w < hwk)
                            kw[u] = kv_load(s_pc[j], s_kb[j] + w);
                        if (w < hwv)
                            vw[u] = kv_load(s_pc[j], s_vb[j] + w);
                    }
                }
                for (uint u = 0u; u < 4u; u++) {
                    const uint i = i0 + u * WG, j = i / hwm, w = i % hwm;
                    if (i < TK * hwm) {
                        s_k[j * HWMAX + w] = kw[u];
                        s_v[j * HWMAX + w] = vw[u];
                    }
                }
            }
            barrier();
            float sc[TK];
            float mt = -1.0 / 0.0;
            for (uint j = 0u; j < TK; j++) {
                float d = 0.0;
                for (uint i = 0u; i < SLW; i++) {
                    const uint w = sl + 8u * i;
                    if (w < hwk) {
                        const vec2 kk = unpackHalf2x16(s_k[j * HWMAX + w]);
                        d += qv[i].x * kk.x + qv[i].y * kk.y;
                    }
                }
                d += subgroupShuffleXor(d, 1u);
                d += subgroupShuffleXor(d, 2u);
                d += subgroupShuffleXor(d, 4u);
                sc[j] = act && int(k0 + j) <= my_pos ? d * p.scale : -1.0 / 0.0;
                mt = max(mt, sc[j]);
            }
            if (act) { /* no barrier or shuffle in here */
                const float m_new = max(m, mt);
                const float alpha = exp(m - m_new);
                l *= alpha;
                for (uint i = 0u; i < SLW; i++)
                    acc[i] *= alpha;
                for (uint j = 0u; j < TK; j++) {
                    const float e = exp(sc[j] - m_new);
                    l += e;
                    for (uint i = 0u; i < SLW; i++) {
                        const uint w = sl + 8u * i;
                        if (w < hwv)
                            acc[i] += e * unpackHalf2x16(s_v[j * HWMAX + w]);
                    }
                }
                m = m_new;
            }
        }
        if (act) {
            const uint ob = (t * p.n_head + hk * G + gh) * p.hdv;
            for (uint i = 0u; i < SLW; i++) {
                const uint w = sl + 8u * i;
                if (w < hwv) {
                    out_[ob + 2u * w] = acc[i].x / l;
                    out_[ob + 2u * w + 1u] = acc[i].y / l;
                }
            }
        }
    }
}
