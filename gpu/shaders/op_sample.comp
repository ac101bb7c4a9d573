#version 450
/* gpu/shaders/op_sample.comp: top-k / top-p / min-p sampling of one row of
 * logits a workgroup (vkops_sample; the rule of engine/sample/sampler.c,
 * the host's uniform u[row] decides the draw).
 *
 * The top_k candidates (select_radix, or select_passes when very many
 * logits tie at the threshold) come out sorted best first with ties to the
 * lower id, as sampler.c's qsort orders them, and no candidate list of the
 * whole vocabulary is ever built. The rest (at most 256 values) runs
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

#define EQ_CAP 512u /* logits at the threshold key the radix select gathers */

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
shared uint s_hist[256];
shared uint s_n_gt, s_n_eq, s_sel, s_need, s_total;
shared float s_gv[256];   /* candidates above the threshold key (unordered) */
shared uint s_gi[256];
shared uint s_ei[EQ_CAP]; /* ids at the threshold key (unordered) */

/* An order-preserving key of a finite logit (-0 as +0: they tie in sampler.c). */
uint skey(float v) {
    uint b = floatBitsToUint(v);
    if (b == 0x80000000u)
        b = 0u;
    return (b & 0x80000000u) != 0u ? ~b : b | 0x80000000u;
}

/* The top_k by k workgroup argmax passes, each over the values strictly
 * below the previous pick: exact for any ties, but a pass over the
 * vocabulary a candidate. Returns the count. */
uint select_passes(uint base, uint lid) {
    float pv = 1.0 / 0.0; /* everything finite is below (inf, 0) */
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
    return nc;
}

/* The top_k by radix select: four histogram passes (8 bits of the key each)
 * find the key of the k-th best and how many of that key are needed, one
 * pass gathers those above it and those at it, and the ids at it are cut to
 * the lowest `need` by rank; then a rank sort orders the candidates (logit
 * descending, id ascending). Five passes over the vocabulary for any top_k
 * (the passes above take top_k of them). Returns the count, or 0xffffffff
 * when more than EQ_CAP logits share the threshold key (then the passes
 * decide). */
uint select_radix(uint base, uint lid) {
    const uint wg = gl_WorkGroupSize.x;
    uint prefix = 0u, mask = 0u, need = p.top_k;
    for (uint pass = 0u; pass < 4u; pass++) {
        const uint shift = 24u - 8u * pass;
        for (uint i = lid; i < 256u; i += wg)
            s_hist[i] = 0u;
        barrier();
        for (uint i = lid; i < p.n_vocab; i += wg) {
            const float v = logits[base + i];
            if (isnan(v) || isinf(v))
                continue;
            const uint k = skey(v);
            if ((k & mask) == prefix)
                atomicAdd(s_hist[(k >> shift) & 255u], 1u);
        }
        barrier();
        if (lid == 0u) {
            uint acc = 0u, bin = 0u;
            if (pass == 0u) { /* fewer finite logits than top_k: all of them */
                uint total = 0u;
                for (uint j = 0u; j < 256u; j++)
                    total += s_hist[j];
                s_total = total;
                need = min(need, total);
            }
            for (int j = 255; j >= 0; j--) {
                if (acc + s_hist[j] >= need) {
                    bin = uint(j);
                    break;
                }
                acc += s_hist[j];
            }
            s_sel = bin;
            s_need = need - acc;
        }
        barrier();
        if (pass == 0u && s_total == 0u)
            return 0u;
        prefix |= s_sel << shift;
        mask |= 255u << shift;
        need = s_need;
        barrier(); /* s_sel, s_need read by all before the next pass writes them */
    }
    /* prefix: the k-th best key; need: how many of that key belong in */
    if (lid == 0u) {
        s_n_gt = 0u;
        s_n_eq = 0u;
    }
    barrier();
    for (uint i = lid; i < p.n_vocab; i += wg) {
        const float v = logits[base + i];
        if (isnan(v) || isinf(v))
            continue;
        const uint k = skey(v);
        if (k > prefix) {
            const uint j = atomicAdd(s_n_gt, 1u);
            s_gv[j] = v; /* fewer than top_k <= 256 */
            s_gi[j] = i;
        } else if (k == prefix) {
            const uint j = atomicAdd(s_n_eq, 1u);
            if (j < EQ_CAP)
                s_ei[j] = i;
        }
    }
    barrier();
    const uint n_gt = s_n_gt, n_eq = s_n_eq;
    if (n_eq > EQ_CAP)
        return 0xffffffffu;
    /* the `need` lowest ids at the threshold join the candidates */
    for (uint j = lid; j < n_eq; j += wg) {
        uint r = 0u;
        for (uint q = 0u; q < n_eq; q++)
            r += s_ei[q] < s_ei[j] ? 1u : 0u;
        if (r < need) {
            s_gv[n_gt + r] = logits[base + s_ei[j]];
            s_gi[n_gt + r] = s_ei[j];
        }
    }
    barrier();
    const uint nc = n_gt + need;
    /* rank sort: (logit descending, id ascending) is a total order */
    for (uint j = lid; j < nc; j += wg) {
        const float v = s_gv[j];
        const uint id = s_gi[j];
        uint r = 0u;
        for (uint q = 0u; q < nc; q++) {
            const float w = s_gv[q];
            r += (w > v || (w == v && s_gi[q] < id)) ? 1u : 0u;
        }
        s_v[r] = v;
        s_i[r] = id;
    }
    barrier();
    return nc;
}

void main() {
    const uint row = ops_group_id(), lid = gl_LocalInvocationID.x;
    if (row >= p.n_rows)
        return;
    const uint base = row * p.n_vocab;
    uint nc = select_radix(base, lid);
    if (nc == 0xffffffffu)
        nc = select_passes(base, lid);
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
        /* sampler.c sums the f32 probabilities in double: a two-sum keeps the
         * running sum's rounding error (hi + lo), so a prefix that reaches
         * top_p exactly (equal probabilities: 45 x 0.02 against 0.9) is cut
         * where the CPU cuts it */
        precise float hi = 0.0, lo = 0.0;
        for (uint i = 0u; i < nc; i++) {
            precise float pr = exp(s_v[i] - mx) / z;
            precise float sum = hi + pr;
            precise float bb = sum - hi;
            lo += (hi - (sum - bb)) + (pr - bb);
            hi = sum;
            precise float d = hi - p.top_p; /* exact near top_p (Sterbenz) */
            if (d + lo >= 0.0) {
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
