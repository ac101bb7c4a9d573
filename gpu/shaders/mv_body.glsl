// gpu/shaders/mv_body.glsl: the dequantizing matvec, y[t, r] = W[r, :] . x[t, :]
// for up to NT tokens at once (decode and batched decode, n_tok <= 8), and
// its expert-indexed form (ID = 1: pair gl_WorkGroupID.z multiplies x by
// expert sel[pair] of a stack). Included by mv_<type>.comp after the type file.
//
// Shape of the work, for the H200 (132 SMs, 32-lane subgroups, 4.8 TB/s):
// decode is bound by the bytes of W, so each workgroup of WG lanes takes NR
// whole rows and its lanes stride over the rows' units (8 elements of a
// block; 4 for F32/F16/BF16): one pass over W, consecutive lanes on
// consecutive words (coalesced), each dequantized unit used for all NT
// tokens (a batched step reads W once) and each x load shared by the NR
// rows. Partial sums stay in registers; one subgroupAdd per (row, token),
// then, when the workgroup has several subgroups (lavapipe's are 8 wide),
// a shared-memory sum. The row split never depends on the subgroup size the
// driver picks, only on NR (the host's dispatch): correct on any device.
//
// GLU = 1: the fused feed-forward input, y = silu(G x) * (U x) with G in
// binding 0 and U in binding 4 (same type and shape): one dispatch instead
// of three (gate, up, swiglu) per layer, x loaded once for both; decode is
// launch-bound on big GPUs, so fewer dispatches per token count.
//
// ACC = 1 (plain matvec only): y is also added into binding 5, the
// residual (one workgroup owns each row, so the read-modify-write does not
// race): the residual add after an output or down projection, which is
// then no dispatch and no barrier of its own (bench/README.md, "fused
// decode"). The residual's value is read before the sums, so its load
// waits on nothing at the end.
//
// UNR > 1 (block path): a lane loads the words of UNR blocks (b, b + WG,
// ...) before it multiplies any, more bytes in flight a lane. SOA = 1
// (block path of Q4_0 / Q8_0): rows laid out as the row's nb scales (f16),
// then its nb quant groups of BQ words (vkmm_soa_row), so a lane's quants
// are BQ / 4 aligned 16-byte loads where the GGUF block costs BQ + 1 word
// loads and a select each. Both are benchmark knobs (the ":uN" and ":soa"
// matvec specs, bench/mv-bench): on the H100 neither moved the Q4_0
// matvec beyond the run's noise (bench/README.md, "fused decode"), so the
// defaults are 1 and 0 and no upload repacks.
layout(constant_id = 0) const uint WG = 32; // lanes per workgroup
layout(constant_id = 1) const uint NR = 2;  // rows per workgroup
layout(constant_id = 2) const uint NT = 1;  // tokens per pass (accumulators)
layout(constant_id = 3) const uint ID = 0;  // 1: expert-indexed (sel, one token per pair)
layout(constant_id = 4) const uint GLU = 0; // 1: silu(gate) * up, up in binding 4
layout(constant_id = 5) const uint ACC = 0; // 1: y also added into binding 5
layout(constant_id = 6) const uint UNR = 1; // blocks a lane loads at once (block path)
layout(constant_id = 7) const uint SOA = 0; // 1: scales-then-quants rows (block path)
layout(constant_id = 8) const uint TAIL = 0; // 1 (with ACC, one token): the norm of res after
layout(local_size_x_id = 0) in;

// coherent: under TAIL the last workgroup reads what the others added
layout(std430, binding = 5) coherent buffer BufR { float res[]; };
// TAIL: the RMSNorm's weight, its output, that output as q8 blocks (the
// layout of op_rmsnorm.comp's yq) and the last-workgroup counter
layout(std430, binding = 6) readonly buffer BufNW { float nw[]; };
layout(std430, binding = 7) writeonly buffer BufNY { float ny[]; };
layout(std430, binding = 8) writeonly buffer BufNQ { uint nqw[]; };
layout(std430, binding = 9) coherent buffer BufCnt { uint cnt[]; };

const uint NM = GLU != 0u ? 2u : 1u; // matrices
shared float red[NM * NR * NT * WG];

#ifdef MV_BLK
// One block of the "f16 d, then BQ words of quants" types (Q4_0: 18 bytes,
// Q8_0: 34; the type file defines MV_BLK, BQ, BB, BV, BOFF and blk_vec).
// A block starts at an even byte, so its bytes lie in the BQ + 1 aligned
// words from bb >> 2 whichever half it starts in: one load per word and a
// select on the half, where the unit path (unit_load, rd32e) spends two
// loads per quant word and one more for d (12 loads per Q4_0 block, 5 here).
// The last word can hold 2 bytes past the block: still inside the binding,
// whose range is rounded up to 4 bytes (gpu/vk-mm-rec.c).
void blk_words(uint wh, uint bb, out float d, out uint q[BQ]) {
    const uint i = bb >> 2;
    const bool hi = (bb & 2u) != 0u;
    uint lo = wword(wh, i);
    d = unpackHalf2x16(hi ? lo >> 16 : lo).x;
    [[unroll]] for (uint j = 0u; j < BQ; j++) {
        const uint nx = wword(wh, i + 1u + j);
        q[j] = hi ? nx : (lo >> 16) | (nx << 16);
        lo = nx;
    }
}
// Block b of a scales-then-quants row at byte rb of nb blocks (SOA): its
// f16 scale at rb + 2 b, its BQ quant words at rb + 2 nb + 4 BQ b, 16-byte
// aligned where nb is a multiple of 8 (rows of 256 elements and more: every
// real model), then loaded as uvec4s; else word by word.
layout(std430, binding = 0) readonly buffer BufWQ { uvec4 wq4[]; };
layout(std430, binding = 4) readonly buffer BufUQ { uvec4 uq4[]; };
void blk_words_soa(uint wh, uint rb, uint nb, uint b, out float d, out uint q[BQ]) {
    const uint sb = rb + 2u * b;
    const uint sw = wword(wh, sb >> 2);
    d = unpackHalf2x16((sb & 2u) != 0u ? sw >> 16 : sw).x;
    const uint qb = rb + 2u * nb + 4u * BQ * b;
    if ((nb & 7u) == 0u) {
        [[unroll]] for (uint j = 0u; j < BQ / 4u; j++) {
            const uvec4 v = wh == 0u ? wq4[(qb >> 4) + j] : uq4[(qb >> 4) + j];
            q[4u * j] = v.x;
            q[4u * j + 1u] = v.y;
            q[4u * j + 2u] = v.z;
            q[4u * j + 3u] = v.w;
        }
    } else {
        [[unroll]] for (uint j = 0u; j < BQ; j++)
            q[j] = wword(wh, (qb >> 2) + j);
    }
}
#endif

// y[row, col] (row: token or pair) = s, or silu(s) * s2 (GLU); under ACC
// also res[that] += it, with res's value `pre` when `have` (loaded early).
void store(uint row, uint col, float s, float s2, bool have, float pre) {
    const float v = GLU != 0u ? silu(s) * s2 : s;
    const uint o = row * p.y_stride + p.y_col0 + col;
    y[o] = v;
    if (ACC != 0u)
        res[o] = (have ? pre : res[o]) + v;
}

shared bool s_last;

// TAIL = 1 (vkmm_matmul_acc_norm; one token, rows n = p.n_rows, y_col0 0):
// once every workgroup has added its rows into res, the last one to count
// itself in (below) computes the RMSNorm of res into ny and ny's q8 blocks
// into nq; the others return. It replaces the norm's own dispatch
// and barrier after o and down (vkops_rmsnorm_q8: same arithmetic, y = x *
// (1 / sqrt(mean(x^2) + eps)) * w, d = max|y| / 127, levels round(y / d);
// the sum of squares is added in another order, so y may differ in the last
// bit).
//
// Coalesced: lane tid takes the 4 consecutive values of vec4 i = tid + WG j,
// so a block of 32 is 8 consecutive lanes, whose max and level sum come
// from 3 shuffles (as op_rmsnorm.comp's one-pass form; subgroups of 8 lanes
// or more), and each lane writes its word of the block's levels. Rows up to
// 32 WG wide are loaded once (8 vec4s and their weights a lane, all loads
// issued before any is used), wider ones read twice. The count is in two
// levels: workgroup grp counts itself in on sub-counter grp % TSUB (words
// 16 apart: their own 64-byte lines), the last of each on the top counter
// (word 0), and every last one sets its counter back to 0.
//
// Measured slower than the norm's own dispatch (H100, bench/README.md, "H100,
// 2026-12-07 (third session)"; bench/mv-bench MV_ACC=1, 4096 x 4096, us a
// launch, the matvec with its residual add alone / with this tail): lanes
// with whole blocks and one counter word 9.4 / 22.1; coalesced 8.4 / 16.4;
// two-level count 9.5 / 18.3; the norm's dispatch 6.0. So the form is an
// opt-in fusion (BACKEND_VK_FUSE_NORM), not the default.
const uint TV = 8u;    // vec4s a lane holds
const uint TSUB = 32u; // sub-counters (vkmm's counter buffer holds 16 (TSUB + 1) words)
void tail(uint grp) {
    const uint tid = gl_LocalInvocationID.x, n_grp = (p.n_rows + NR - 1u) / NR;
    memoryBarrierBuffer(); // this workgroup's res stores before its count
    barrier();
    if (tid == 0u) {
        const uint sub = grp % TSUB, members = (n_grp - sub + TSUB - 1u) / TSUB;
        const uint sw = 16u * (1u + sub);
        bool last = atomicAdd(cnt[sw], 1u) == members - 1u;
        if (last) {
            cnt[sw] = 0u;
            memoryBarrierBuffer(); // what the sub-counter's members made visible, on
            last = atomicAdd(cnt[0], 1u) == min(n_grp, TSUB) - 1u;
        }
        s_last = last;
    }
    barrier();
    if (!s_last)
        return;
    memoryBarrierBuffer();
    const uint n4 = p.n_rows / 4u;
    const bool one = n4 <= TV * WG;
    vec4 v[TV], g[TV];
    float ss = 0.0;
    if (one) {
        [[unroll]] for (uint j = 0u; j < TV; j++) {
            const uint i = tid + WG * j;
            v[j] = i < n4 ? vec4(res[4u * i], res[4u * i + 1u], res[4u * i + 2u],
                                 res[4u * i + 3u])
                          : vec4(0.0);
            g[j] = i < n4 ? vec4(nw[4u * i], nw[4u * i + 1u], nw[4u * i + 2u], nw[4u * i + 3u])
                          : vec4(0.0);
        }
        [[unroll]] for (uint j = 0u; j < TV; j++)
            ss += dot(v[j], v[j]);
    } else {
        for (uint i = tid; i < n4; i += WG) {
            const vec4 a = vec4(res[4u * i], res[4u * i + 1u], res[4u * i + 2u], res[4u * i + 3u]);
            ss += dot(a, a);
        }
    }
    ss = subgroupAdd(ss);
    if (gl_NumSubgroups > 1u) {
        if (subgroupElect())
            red[gl_SubgroupID] = ss;
        barrier();
        ss = 0.0;
        for (uint k = 0u; k < gl_NumSubgroups; k++)
            ss += red[k];
    }
    const float scale = 1.0 / sqrt(ss / float(4u * n4) + p.tail_eps);
    // every lane of a block runs the same rounds (n4 is a multiple of 8 and
    // WG of 8), so the shuffles below never mix live and dead lanes
    for (uint j0 = 0u; j0 * WG < n4; j0 += TV) {
        [[unroll]] for (uint j = 0u; j < TV; j++) {
            const uint i = tid + WG * (j0 + j);
            if ((j0 + j) * WG >= n4)
                break; // uniform: the whole workgroup
            vec4 a = one ? v[j] : vec4(0.0), w4 = one ? g[j] : vec4(0.0);
            if (!one && i < n4) {
                a = vec4(res[4u * i], res[4u * i + 1u], res[4u * i + 2u], res[4u * i + 3u]);
                w4 = vec4(nw[4u * i], nw[4u * i + 1u], nw[4u * i + 2u], nw[4u * i + 3u]);
            }
            const vec4 o = a * scale * w4;
            const vec4 ab = abs(o);
            float amax = max(max(ab.x, ab.y), max(ab.z, ab.w));
            amax = max(amax, subgroupShuffleXor(amax, 1u));
            amax = max(amax, subgroupShuffleXor(amax, 2u));
            amax = max(amax, subgroupShuffleXor(amax, 4u));
            const float d = amax / 127.0, id = d > 0.0 ? 1.0 / d : 0.0;
            const ivec4 l = ivec4(round(o * id));
            int sum = l.x + l.y + l.z + l.w;
            sum += subgroupShuffleXor(sum, 1u);
            sum += subgroupShuffleXor(sum, 2u);
            sum += subgroupShuffleXor(sum, 4u);
            if (i < n4) {
                ny[4u * i] = o.x;
                ny[4u * i + 1u] = o.y;
                ny[4u * i + 2u] = o.z;
                ny[4u * i + 3u] = o.w;
                const uint b = i / 8u, k = i % 8u;
                nqw[12u * b + k] = uint(l.x & 255) | (uint(l.y & 255) << 8) |
                                   (uint(l.z & 255) << 16) | (uint(l.w & 255) << 24);
                if (k == 0u) {
                    nqw[12u * b + 8u] = floatBitsToUint(d);
                    nqw[12u * b + 9u] = uint(sum);
                    nqw[12u * b + 10u] = 0u;
                    nqw[12u * b + 11u] = 0u;
                }
            }
        }
    }
    if (tid == 0u)
        cnt[0] = 0u;
}

void body() {
    const uint grp = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    const uint r0 = grp * NR;
    if (r0 >= p.n_rows)
        return; // the whole workgroup: no barrier is skipped by part of it
    uint wb = p.w_base, wb2 = p.w_base2, xr = p.tok0, yr = p.tok0;
    if (ID != 0u) {
        const uint pair = gl_WorkGroupID.z + p.pair0;
        if (pair >= p.n_pairs)
            return;
        const int e = sel[pair];
        if (e < int(p.e0) || e >= int(p.e1))
            return; // another piece holds this expert (or a bad id: nothing written)
        wb += uint(e - int(p.e0)) * p.expert_bytes;
        wb2 += uint(e - int(p.e0)) * p.expert_bytes;
        xr = p.x_per_pick != 0u ? pair : pair / p.k;
        yr = pair;
    }
    const uint tid = gl_LocalInvocationID.x;
    const uint nu = p.n_cols / UNIT, xs4 = p.x_stride >> 2, nt = p.n_tok;
    float res_pre = 0.0; // ACC: the residual of output tid (the lane that stores it)
    if (ACC != 0u && tid < NR * NT && r0 + tid / NT < p.n_rows && tid % NT < nt)
        res_pre = res[(yr + tid % NT) * p.y_stride + p.y_col0 + r0 + tid / NT];
    float acc[NM * NR * NT]; // [matrix][row][token]
    [[unroll]] for (uint i = 0u; i < NM * NR * NT; i++)
        acc[i] = 0.0;
    uint ro[NR];
    [[unroll]] for (uint r = 0u; r < NR; r++)
        ro[r] = min(r0 + r, p.n_rows - 1u) * p.row_bytes; // a row past the end repeats the last

#ifdef MV_BLK
    // Block path (1 or 2 tokens a pass, and the expert-indexed matvec): a
    // lane takes whole blocks (BV vec4s of x each), loads its words once per
    // row (blk_words) and keeps the quants as integers: acc += d * (q . x -
    // BOFF * sum(x)), one scale multiply per (row, token) instead of one per
    // element. H200, 7B Q4_0 decode (gpu-bench /tmp/7b.gguf -1 32 16 1 1,
    // device calls of 2026-12-02, bench/README.md): the 1-token matvec 18.7
    // -> 12.9 us mean over the 4096 x 4096 and 11008-column rows, the fused
    // gate + up 54.3 -> 33.8 us; tg128 160 -> 209 tok/s (-1 128 512 8 0, two
    // runs each). With 4 or 8 tokens the same path ran at half the
    // unit path's speed (b8 598 -> 290 tok/s, pp16 through the matvec 710 ->
    // 313: registers of NR x NT partial sums and BQ words per row), so those
    // passes keep the unit path below.
    if (NT <= 2u && (UNR > 1u || SOA != 0u)) {
        const uint nb = p.n_cols / (4u * BV);
        for (uint b0 = tid; b0 < nb; b0 += WG * UNR) {
            float d[UNR][NM * NR];
            uint q[UNR][NM * NR][BQ];
            [[unroll]] for (uint k = 0u; k < UNR; k++) {
                const uint b = min(b0 + k * WG, nb - 1u); // past the end: repeat, not summed
                [[unroll]] for (uint r = 0u; r < NR; r++) {
                    if (SOA != 0u) {
                        blk_words_soa(0u, wb + ro[r], nb, b, d[k][r], q[k][r]);
                        if (GLU != 0u)
                            blk_words_soa(1u, wb2 + ro[r], nb, b, d[k][NR + r], q[k][NR + r]);
                    } else {
                        blk_words(0u, wb + ro[r] + BB * b, d[k][r], q[k][r]);
                        if (GLU != 0u)
                            blk_words(1u, wb2 + ro[r] + BB * b, d[k][NR + r], q[k][NR + r]);
                    }
                }
            }
            [[unroll]] for (uint k = 0u; k < UNR; k++) {
                const uint b = b0 + k * WG;
                if (b >= nb)
                    break;
                float s[NM * NR * NT], xs[NT];
                [[unroll]] for (uint i = 0u; i < NM * NR * NT; i++)
                    s[i] = 0.0;
                [[unroll]] for (uint t = 0u; t < NT; t++)
                    xs[t] = 0.0;
                [[unroll]] for (uint v = 0u; v < BV; v++) {
                    [[unroll]] for (uint t = 0u; t < NT; t++) {
                        const vec4 a = x4[(xr + min(t, nt - 1u)) * xs4 + BV * b + v];
                        xs[t] += dot(a, vec4(1.0));
                        [[unroll]] for (uint m = 0u; m < NM * NR; m++)
                            s[m * NT + t] += dot(blk_vec(q[k][m], v), a);
                    }
                }
                [[unroll]] for (uint m = 0u; m < NM * NR; m++)
                    [[unroll]] for (uint t = 0u; t < NT; t++)
                        acc[m * NT + t] += d[k][m] * (s[m * NT + t] - BOFF * xs[t]);
            }
        }
    } else if (NT <= 2u) {
        const uint nb = p.n_cols / (4u * BV);
        for (uint b = tid; b < nb; b += WG) {
            float d[NM * NR];
            uint q[NM * NR][BQ];
            [[unroll]] for (uint r = 0u; r < NR; r++) {
                blk_words(0u, wb + ro[r] + BB * b, d[r], q[r]);
                if (GLU != 0u)
                    blk_words(1u, wb2 + ro[r] + BB * b, d[NR + r], q[NR + r]);
            }
            float s[NM * NR * NT], xs[NT];
            [[unroll]] for (uint i = 0u; i < NM * NR * NT; i++)
                s[i] = 0.0;
            [[unroll]] for (uint t = 0u; t < NT; t++)
                xs[t] = 0.0;
            [[unroll]] for (uint v = 0u; v < BV; v++) {
                [[unroll]] for (uint t = 0u; t < NT; t++) {
                    const vec4 a = x4[(xr + min(t, nt - 1u)) * xs4 + BV * b + v];
                    xs[t] += dot(a, vec4(1.0));
                    [[unroll]] for (uint m = 0u; m < NM * NR; m++)
                        s[m * NT + t] += dot(blk_vec(q[m], v), a);
                }
            }
            [[unroll]] for (uint m = 0u; m < NM * NR; m++)
                [[unroll]] for (uint t = 0u; t < NT; t++)
                    acc[m * NT + t] += d[m] * (s[m * NT + t] - BOFF * xs[t]);
        }
    } else
#endif
    {
        for (uint u = tid; u < nu; u += WG) {
            uint q0, q1;
            unit_pos(u, q0, q1);
            vec4 a0[NT], a1[NT];
            [[unroll]] for (uint t = 0u; t < NT; t++) {
                const uint xb = (xr + min(t, nt - 1u)) * xs4; // tokens past n_tok repeat the last
                a0[t] = x4[xb + (q0 >> 2)];
                if (NV == 2u)
                    a1[t] = x4[xb + (q1 >> 2)];
            }
            [[unroll]] for (uint r = 0u; r < NR; r++) {
                vec4 v0, v1;
                unit_load(0u, wb + ro[r], u, v0, v1);
                [[unroll]] for (uint t = 0u; t < NT; t++) {
                    acc[r * NT + t] += dot(v0, a0[t]);
                    if (NV == 2u)
                        acc[r * NT + t] += dot(v1, a1[t]);
                }
                if (GLU != 0u) {
                    unit_load(1u, wb2 + ro[r], u, v0, v1);
                    [[unroll]] for (uint t = 0u; t < NT; t++) {
                        acc[(NR + r) * NT + t] += dot(v0, a0[t]);
                        if (NV == 2u)
                            acc[(NR + r) * NT + t] += dot(v1, a1[t]);
                    }
                }
            }
        }
    }

    [[unroll]] for (uint i = 0u; i < NM * NR * NT; i++)
        acc[i] = subgroupAdd(acc[i]);
    if (gl_NumSubgroups > 1u) {
        if (subgroupElect()) {
            [[unroll]] for (uint i = 0u; i < NM * NR * NT; i++)
                red[i * WG + gl_SubgroupID] = acc[i];
        }
        barrier();
        for (uint i = tid; i < NR * NT; i += WG) {
            float s = 0.0, s2 = 0.0;
            for (uint g = 0u; g < gl_NumSubgroups; g++) {
                s += red[i * WG + g];
                if (GLU != 0u)
                    s2 += red[(NR * NT + i) * WG + g];
            }
            const uint r = i / NT, t = i % NT;
            if (r0 + r < p.n_rows && t < nt)
                store(yr + t, r0 + r, s, s2, i == tid, res_pre);
        }
    } else if (tid == 0u) {
        [[unroll]] for (uint i = 0u; i < NR * NT; i++) {
            const uint r = i / NT, t = i % NT;
            if (r0 + r < p.n_rows && t < nt)
                store(yr + t, r0 + r, acc[i], acc[NR * NT + i], i == 0u, res_pre);
        }
    }
}

void main() {
    body();
    if (TAIL != 0u) {
        const uint grp = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
        if (grp * NR < p.n_rows)
            tail(grp);
    }
}
