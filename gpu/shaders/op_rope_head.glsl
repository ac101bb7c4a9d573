/* gpu/shaders/op_rope_head.glsl: one head's share of what follows a
 * layer's Q, K and V projections, for invocation d2 of a 128-invocation
 * workgroup (elements 2 d2 and 2 d2 + 1 of the head): the per-head RMSNorm
 * where the model has one (qwen3's q_norm, k_norm), then RoPE. Shared by
 * op_rope_kv.comp (a workgroup a head) and the ROPE form of
 * op_attn_split_body.glsl (decode attention that ropes its own q heads and
 * the step's new K and V row), so both give the same bits.
 *
 * The including shader defines (after including this) ld(which, i) (the
 * head's source values), nw(which, e) (the norm's weight) and cs_of(pos, i)
 * (op_rope.glsl's rope_cs over its push constants), and before it the push
 * fields n_rot, mode, norm_q, norm_k, eps_q and eps_k. rope_head has barriers (the norm's sums, or one
 * that orders every load before the caller's writes): call it from uniform
 * control flow. */

/* what a head is */
const uint SQ = 0u, SK = 1u, SV = 2u;

float ld(uint which, uint i);
float nw(uint which, uint e);
vec2 cs_of(int ps, uint i);

/* The head `which` at element `base` of its source (hd values, position
 * ps): (o0, o1) = its normed, rotated pair d2. False when d2 is not a pair
 * of the head (d2 >= hd / 2): o0 and o1 are then meaningless. */
bool rope_head(uint which, uint base, uint hd, int ps, uint d2, out float o0, out float o1) {
    const bool live = d2 < hd / 2u;
    const uint e0 = 2u * d2, e1 = e0 + 1u;
    const uint hr = p.n_rot / 2u;
    const bool neox = p.mode == 2u;
    const bool rot = which != SV && live && e0 < p.n_rot;

    /* loads: the pair, and for neox rotation the partners */
    float a0 = 0.0, a1 = 0.0, b0 = 0.0, b1 = 0.0;
    uint pe0 = 0u, pe1 = 0u;
    if (live) {
        a0 = ld(which, base + e0);
        a1 = ld(which, base + e1);
    }
    if (rot && neox) {
        pe0 = e0 < hr ? e0 + hr : e0 - hr;
        pe1 = e1 < hr ? e1 + hr : e1 - hr;
        b0 = ld(which, base + pe0);
        b1 = ld(which, base + pe1);
    }
    /* the per-head norm (uniform per workgroup): its sums' barriers also
     * order every load above before any write below */
    const bool norm = (which == SQ && p.norm_q != 0u) || (which == SK && p.norm_k != 0u);
    if (norm) {
        const float eps = which == SQ ? p.eps_q : p.eps_k;
        const float scale = 1.0 / sqrt(ops_wg_sum(a0 * a0 + a1 * a1) / float(hd) + eps);
        if (live) {
            a0 = a0 * scale * nw(which, e0);
            a1 = a1 * scale * nw(which, e1);
        }
        if (rot && neox) {
            b0 = b0 * scale * nw(which, pe0);
            b1 = b1 * scale * nw(which, pe1);
        }
    } else {
        barrier();
    }
    o0 = a0;
    o1 = a1;
    if (rot) {
        if (!neox) { /* (2i, 2i + 1), i = d2 */
            const vec2 cs = cs_of(ps, d2);
            o0 = a0 * cs.x - a1 * cs.y;
            o1 = a0 * cs.y + a1 * cs.x;
        } else { /* (i, i + n_rot / 2): e < hr is the first of its pair */
            const vec2 c0 = cs_of(ps, e0 < hr ? e0 : e0 - hr);
            o0 = e0 < hr ? a0 * c0.x - b0 * c0.y : b0 * c0.y + a0 * c0.x;
            const vec2 c1 = cs_of(ps, e1 < hr ? e1 : e1 - hr);
            o1 = e1 < hr ? a1 * c1.x - b1 * c1.y : b1 * c1.y + a1 * c1.x;
        }
    }
    return live;
}
