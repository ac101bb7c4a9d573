// gpu/shaders/mm_dot_body.glsl: the tiled matmul for prefill on 8-bit
// integer dot products, y[t, r] = W[r, :] . x[t, :], with the expert-indexed
// (ID = 1) and fused gate + up + SwiGLU (GLU = 1) forms of mm_body.glsl.
// Included by mm_dot.comp after mm_dot_types.glsl.
//
// A workgroup computes a tile of BM row slots x BN tokens, each lane TM x TN
// of them (rows lm + i * BM / TM, tokens ln + j * BN / TN: a subgroup's
// shared loads fall on consecutive 16-byte slots or broadcast). The fused
// form puts the gate rows in slots [0, BM / 2) and the same rows of up in
// [BM / 2, BM), so a lane's slot i and i + TM / 2 are one output row's gate
// and up and BM / 2 rows come out of a tile. A K step is NB q8 blocks of 32:
// per block and slot the weights' levels as two uvec4 of packed int8 with
// their scales (blk_load / blk_conv), per block and token the activations
// quantized by q8_block.glsl's rule (the host reference's: d = max|x| / 127,
// q = round(x / d); one lane a (token, block): the 32 values are its own,
// no reduction across lanes) with d and, for the types with a min, d * sum(q).
// Each output then takes 8 packed dot products a block (OpSDot,
// SPV_KHR_integer_dot_product: core in Vulkan 1.3, through
// GL_EXT_spirv_intrinsics because Debian 12's glslang lacks
// GL_EXT_integer_dot_product) and
//   acc += (s * dx) * dot - mn * (dx * sum(q))        (Q6_K: s0, s1 a half)
// Integer sums are exact (|dot| <= 32 * 128 * 127 < 2^22, turned into a
// float by adding to 2^23 + 2^22's bits: two full-rate ops where a
// conversion runs at a quarter of the rate), so the result is the
// dequantized weights times the dequantized q8 activations up to f32
// rounding; quantizing the activations is the only approximation.
//
// Shared memory holds two K steps (buffers s & 1): a lane loads step s + 1's
// weight words and activations into registers before it computes step s and
// writes them (converted) into the other buffer after, so the loads' latency
// hides behind the dot products and one barrier a step remains. What each
// choice gave on an H100 is in gpu/vk-mm-coop.c (dot_tiles).
//
// XQ8 = 1 (vkmm_matmul_tq8): x comes quantized already, as q8 blocks of
// vkops_rmsnorm_q8's layout (p.x_stride words a row), so a lane stages
// three uvec4 of a (token, block) where it held 8 vec4 and quantized them:
// the activations are quantized once a call instead of once per row tile,
// and the prefetch registers drop from 32 to 12 (the 512-lane tile: 128 ->
// 112 registers, STRATA_VK_PIPE_STATS on an H100; pp512 of the 7B Q4_0
// 2,894 -> 3,296 tok/s, bench/README.md "H100, 2026-12-07 (fourth
// session)"). Same levels, so the same sums.
layout(constant_id = 0) const uint WG = 256; // lanes: (BM / TM) * (BN / TN)
layout(constant_id = 1) const uint BM = 128; // row slots per tile (GLU: BM / 2 rows)
layout(constant_id = 2) const uint BN = 128; // tokens per tile
layout(constant_id = 3) const uint TM = 8;   // row slots per lane (GLU: even)
layout(constant_id = 4) const uint TN = 8;   // tokens per lane
layout(constant_id = 5) const uint ID = 0;   // 1: expert-indexed
layout(constant_id = 6) const uint LCAP = 1; // pairs listed per window (ID = 1)
layout(constant_id = 7) const uint GLU = 0;  // 1: silu(gate) * up, up in binding 4
layout(constant_id = 8) const uint NB = 2;   // q8 blocks of 32 per K step
layout(constant_id = 9) const uint XQ8 = 0;  // 1: x as q8 blocks
layout(local_size_x_id = 0) in;

spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018],
                  id = 4450) int sdot4(uint a, uint b, spirv_literal int packed_4x8);

const uint TILE_ROWS = GLU != 0u ? BM / 2u : BM; // output rows of a tile (mm_tiles.glsl)
const uint SM = BM / TM, SN = BN / TN;           // the lanes' grid
const uint NWU = (BM * NB + WG - 1u) / WG;       // (slot, block) units a lane stages
const uint NXU = (BN * NB + WG - 1u) / WG;       // (token, block) units a lane stages
const bool DOT_EXTRA = DOT_MIN || DOT_TWO;

shared uvec4 wq[2u * NB * 2u * BM];                // [buf][block][half][slot] levels
shared float ws[2u * NB * BM];                     // [buf][block][slot] scale (first half)
shared float ws1[DOT_EXTRA ? 2u * NB * BM : 1u];   // s1 (DOT_TWO) or mn (DOT_MIN)
shared uvec4 xq[2u * NB * 2u * BN];                // [buf][block][half][token] q
shared float xd[2u * NB * BN];                     // [buf][block][token] d
shared float xs[DOT_MIN ? 2u * NB * BN : 1u];      // d * sum(q)

#include "mm_tiles.glsl"

// |v| < 2^22 exactly as a float: v's bits added to 1.5 * 2^23's, minus it.
float i2f(int v) { return intBitsToFloat(v + 0x4B400000) - 12582912.0; }

int dot16(uvec4 a, uvec4 b) {
    return sdot4(a.x, b.x, 0) + sdot4(a.y, b.y, 0) + sdot4(a.z, b.z, 0) + sdot4(a.w, b.w, 0);
}

// Raw words of weight unit u (slot, block) of the step from block kb0; zero
// past the rows or the columns.
void w_load(uint u, uint kb0, uint wb, uint wb2, uint r0, out uint r[RAWN]) {
    const uint mo = u % TILE_ROWS, rest = u / TILE_ROWS, b = rest % NB, mat = rest / NB;
    const uint row = r0 + mo, kb = kb0 + b;
    [[unroll]] for (uint k = 0u; k < RAWN; k++)
        r[k] = 0u;
    if (u < BM * NB && row < p.n_rows && kb * 32u < p.n_cols) {
        if (GLU != 0u && mat == 1u)
            blk_load(1u, wb2 + row * p.row_bytes, kb, r);
        else
            blk_load(0u, wb + row * p.row_bytes, kb, r);
    }
}

void w_store(uint u, uint buf, uint r[RAWN]) {
    if (u >= BM * NB)
        return;
    const uint mo = u % TILE_ROWS, rest = u / TILE_ROWS, b = rest % NB, mat = rest / NB;
    const uint slot = mat * TILE_ROWS + mo, bi = buf * NB + b;
    uvec4 q0, q1;
    float s0, s1, mn;
    blk_conv(r, q0, q1, s0, s1, mn);
    wq[(2u * bi) * BM + slot] = q0;
    wq[(2u * bi + 1u) * BM + slot] = q1;
    ws[bi * BM + slot] = s0;
    if (DOT_TWO)
        ws1[bi * BM + slot] = s1;
    else if (DOT_MIN)
        ws1[bi * BM + slot] = mn;
}

// Activation unit u (token u % BN, block u / BN) of the step from kb0.
void x_load(uint u, uint kb0, bool ok, uint xr, out vec4 v[8]) {
    const uint kb = kb0 + u / BN;
    const bool in_ = ok && u < BN * NB && kb * 32u < p.n_cols;
    const uint base = xr * (p.x_stride >> 2) + kb * 8u;
    [[unroll]] for (uint w = 0u; w < 8u; w++)
        v[w] = in_ ? x4[base + w] : vec4(0.0);
}

// XQ8: the q8 block of activation unit u: levels (two uvec4), then d and
// the levels' sum in the third.
void xq_load(uint u, uint kb0, bool ok, uint xr, out uvec4 v[3]) {
    const uint kb = kb0 + u / BN;
    const bool in_ = ok && u < BN * NB && kb * 32u < p.n_cols;
    const uint base = xr * (p.x_stride >> 2) + kb * 3u;
    [[unroll]] for (uint w = 0u; w < 3u; w++)
        v[w] = in_ ? floatBitsToUint(x4[base + w]) : uvec4(0u);
}

void xq_store(uint u, uint buf, uvec4 v[3]) {
    if (u >= BN * NB)
        return;
    const uint n = u % BN, bi = buf * NB + u / BN;
    const float d = uintBitsToFloat(v[2].x);
    xq[(2u * bi) * BN + n] = v[0];
    xq[(2u * bi + 1u) * BN + n] = v[1];
    xd[bi * BN + n] = d;
    if (DOT_MIN)
        xs[bi * BN + n] = d * float(int(v[2].y));
}

void x_store(uint u, uint buf, vec4 v[8]) {
    if (u >= BN * NB)
        return;
    const uint n = u % BN, bi = buf * NB + u / BN;
    uvec4 q0, q1;
    float d;
    int s;
    q8_block(v, q0, q1, d, s);
    xq[(2u * bi) * BN + n] = q0;
    xq[(2u * bi + 1u) * BN + n] = q1;
    xd[bi * BN + n] = d;
    if (DOT_MIN)
        xs[bi * BN + n] = d * float(s);
}

void tile(uint wb, uint wb2, uint r0, uint t0, uint cnt) {
    const uint tid = gl_LocalInvocationID.x;
    const uint lm = tid % SM, ln = tid / SM;
    const uint nsteps = (p.n_cols / 32u + NB - 1u) / NB;
    float acc[TM * TN]; // [slot][token]
    [[unroll]] for (uint i = 0u; i < TM * TN; i++)
        acc[i] = 0.0;
    uint xrow[NXU];
    bool xok[NXU];
    [[unroll]] for (uint k = 0u; k < NXU; k++) {
        uint yr;
        xok[k] = tok_rows(t0, cnt, (tid + k * WG) % BN, xrow[k], yr);
    }
    uint wr[NWU * RAWN];
    vec4 xv[XQ8 != 0u ? 1u : NXU * 8u];
    uvec4 xqv[XQ8 != 0u ? NXU * 3u : 1u];
    barrier(); // the previous tile (ID = 1) has read both buffers

    // step 0 into buffer 0
    [[unroll]] for (uint k = 0u; k < NWU; k++) {
        uint r[RAWN];
        w_load(tid + k * WG, 0u, wb, wb2, r0, r);
        w_store(tid + k * WG, 0u, r);
    }
    [[unroll]] for (uint k = 0u; k < NXU; k++) {
        if (XQ8 != 0u) {
            uvec4 v[3];
            xq_load(tid + k * WG, 0u, xok[k], xrow[k], v);
            xq_store(tid + k * WG, 0u, v);
        } else {
            vec4 v[8];
            x_load(tid + k * WG, 0u, xok[k], xrow[k], v);
            x_store(tid + k * WG, 0u, v);
        }
    }
    barrier();

    for (uint s = 0u; s < nsteps; s++) {
        const uint buf = s & 1u;
        const bool more = s + 1u < nsteps;
        if (more) { // step s + 1's global loads, in flight during the dot products
            [[unroll]] for (uint k = 0u; k < NWU; k++) {
                uint r[RAWN];
                w_load(tid + k * WG, (s + 1u) * NB, wb, wb2, r0, r);
                [[unroll]] for (uint q = 0u; q < RAWN; q++)
                    wr[k * RAWN + q] = r[q];
            }
            [[unroll]] for (uint k = 0u; k < NXU; k++) {
                if (XQ8 != 0u) {
                    uvec4 v[3];
                    xq_load(tid + k * WG, (s + 1u) * NB, xok[k], xrow[k], v);
                    [[unroll]] for (uint w = 0u; w < 3u; w++)
                        xqv[k * 3u + w] = v[w];
                } else {
                    vec4 v[8];
                    x_load(tid + k * WG, (s + 1u) * NB, xok[k], xrow[k], v);
                    [[unroll]] for (uint w = 0u; w < 8u; w++)
                        xv[k * 8u + w] = v[w];
                }
            }
        }
        [[unroll]] for (uint b = 0u; b < NB; b++) {
            const uint bi = buf * NB + b;
            uvec4 xa[TN], xb[TN];
            float xdv[TN], xsv[TN];
            [[unroll]] for (uint j = 0u; j < TN; j++) {
                const uint n = ln + j * SN;
                xa[j] = xq[(2u * bi) * BN + n];
                xb[j] = xq[(2u * bi + 1u) * BN + n];
                xdv[j] = xd[bi * BN + n];
                xsv[j] = DOT_MIN ? xs[bi * BN + n] : 0.0;
            }
            [[unroll]] for (uint i = 0u; i < TM; i++) {
                const uint m = lm + i * SM;
                const uvec4 a0 = wq[(2u * bi) * BM + m], a1 = wq[(2u * bi + 1u) * BM + m];
                const float s0 = ws[bi * BM + m];
                const float e1 = DOT_EXTRA ? ws1[bi * BM + m] : 0.0;
                [[unroll]] for (uint j = 0u; j < TN; j++) {
                    float a = acc[i * TN + j];
                    if (DOT_TWO) {
                        const float t = s0 * i2f(dot16(a0, xa[j])) + e1 * i2f(dot16(a1, xb[j]));
                        a = fma(xdv[j], t, a);
                    } else {
                        a = fma(s0 * xdv[j], i2f(dot16(a0, xa[j]) + dot16(a1, xb[j])), a);
                        if (DOT_MIN)
                            a = fma(-e1, xsv[j], a);
                    }
                    acc[i * TN + j] = a;
                }
            }
        }
        if (more) {
            [[unroll]] for (uint k = 0u; k < NWU; k++) {
                uint r[RAWN];
                [[unroll]] for (uint q = 0u; q < RAWN; q++)
                    r[q] = wr[k * RAWN + q];
                w_store(tid + k * WG, buf ^ 1u, r);
            }
            [[unroll]] for (uint k = 0u; k < NXU; k++) {
                if (XQ8 != 0u) {
                    uvec4 v[3];
                    [[unroll]] for (uint w = 0u; w < 3u; w++)
                        v[w] = xqv[k * 3u + w];
                    xq_store(tid + k * WG, buf ^ 1u, v);
                } else {
                    vec4 v[8];
                    [[unroll]] for (uint w = 0u; w < 8u; w++)
                        v[w] = xv[k * 8u + w];
                    x_store(tid + k * WG, buf ^ 1u, v);
                }
            }
        }
        barrier();
    }

    const uint TO = GLU != 0u ? TM / 2u : TM; // a lane's output rows
    [[unroll]] for (uint j = 0u; j < TN; j++) {
        uint xr, yr;
        if (!tok_rows(t0, cnt, ln + j * SN, xr, yr))
            continue;
        [[unroll]] for (uint i = 0u; i < TO; i++) {
            const uint row = r0 + lm + i * SM;
            if (lm + i * SM < TILE_ROWS && row < p.n_rows)
                y[yr * p.y_stride + p.y_col0 + row] =
                    GLU != 0u ? silu(acc[i * TN + j]) * acc[(i + TO) * TN + j] : acc[i * TN + j];
        }
    }
}
