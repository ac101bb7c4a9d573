// gpu/shaders/mv_dot_body.glsl: y[t, r] = W[r, :] . x[t, :] for one token,
// with x given as q8 blocks (binding 1: vkops_rmsnorm_q8's layout, 48 bytes
// a block of 32: 8 words of int8 levels, d, the levels' sum, 2 zero words;
// p.x_stride is the words of one row of x). The plain, fused gate + up +
// SwiGLU (GLU = 1, up in binding 4) and expert-indexed (ID = 1) forms of
// mv_body.glsl, with its work split: each workgroup of WG lanes takes NR
// whole rows, its lanes one 32-element block of every row at a time.
//
// Why: decode's f32 matvec is not bound by DRAM on the H200. With half of
// a matrix already in L2 (the prefetch of branch vkpf) it ran no faster
// (bench/README.md, "H200, 2026-12-06 (late)"); it spends ~500
// instructions a lane on converting levels to floats, 8 vec4 loads of x a
// block and 32 FMAs a row. Here a block of a row costs its raw words, the
// levels as packed int8 (blk_conv, mm_dot_types.glsl) and 8 packed dot
// products (OpSDot, as mm_dot_body.glsl), and x three uvec4 loads a block
// shared by the NR rows:
//   acc += dx * (s0 * dot(q0, x0) + s1 * dot(q1, x1)) - mn * dx * sum(xq)
// Integer sums are exact; the result is the dequantized weights times the
// dequantized q8 activations up to f32 rounding (as the integer-dot tiles).
//
// XF = 1 (vkmm_matmul_xq): x is f32 (p.x_stride floats a row), as no norm
// wrote its q8 copy (decode's o and down projections, whose inputs come
// from attention and the SwiGLU; the output matrix after its in-place
// norm). The lane that takes a block quantizes its 32 values as
// op_rmsnorm.comp does (q8_block.glsl's rule), so the
// product equals the q8 form's over a separately quantized x, with no
// dispatch to quantize: every workgroup quantizes the blocks again (NR rows
// share each), which costs ALU and L2 reads, not DRAM.
// ACC = 1 (plain, one token): y is also added into binding 5, the residual
// (mv_body.glsl's ACC; one workgroup owns each row).
// SPLIT = 1 (plain, one token; vkmm_matmul_multi): two or three
// matrices of one type and width that read the same x (a layer's q, k and
// v) in one dispatch instead of one each. Binding 0 holds them all: rows
// [0, split1) are the first's from w_base, [split1, split2) the second's
// from w_base2, [split2, n_rows) the third's from w_base3; each writes its
// own y (bindings 2, 6 and 7), row r - split at index r - split. Every row
// runs the plain form's arithmetic, so its result is that form's bits. Why:
// a 7B decode step's profile had q, k and v at 8.5-8.6 us a dispatch where
// one matvec of 11,008 x 4,096 took 11.5-11.9 us (mv-bench, H100). Timed
// without the profile (which serializes dispatches) the gain is small:
// 7B tg128 +0.6% on an H100 (backend-vk.h BACKEND_VK_FUSE_MULTI).
// NT > 1 (plain, GLU and ACC forms over q8 x; vkmm_matmul_tq8 of 2-32
// tokens, in passes of up to NT): tokens tok0 .. tok0 + n_tok - 1 (rows of
// x and y) at once, each block of each row converted once for all of them
// and each token's x block loaded once for the NR rows; a token's sums are
// those of the one-token form. Why: batched decode's f32 matvec (mv_body.glsl
// NT) loads 8 vec4s of x a block for every token and converts levels to
// floats, which made a step of 8 sequences cost ~4x a one-token step on an
// H100 (7B Q4_0 b8 542 tok/s against tg128 262, bench/README.md).
layout(constant_id = 0) const uint WG = 128; // lanes per workgroup
layout(constant_id = 1) const uint NR = 4;   // rows per workgroup
layout(constant_id = 2) const uint GLU = 0;  // 1: silu(gate) * up, up in binding 4
layout(constant_id = 3) const uint ID = 0;   // 1: expert-indexed (sel, one token per pair)
layout(constant_id = 4) const uint XF = 0;   // 1: x as f32, quantized in the lane
layout(constant_id = 5) const uint ACC = 0;  // 1: y also added into binding 5
layout(constant_id = 6) const uint SPLIT = 0; // 1: two or three matrices, y in bindings 2, 6, 7
layout(constant_id = 7) const uint NT = 1;    // tokens a pass (ID, XF and SPLIT: 1)
layout(local_size_x_id = 0) in;

layout(std430, binding = 5) buffer BufR { float res[]; };
layout(std430, binding = 6) writeonly buffer BufY1 { float y1[]; };
layout(std430, binding = 7) writeonly buffer BufY2 { float y2[]; };

spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018],
                  id = 4450) int sdot4(uint a, uint b, spirv_literal int packed_4x8);

const uint NM = GLU != 0u ? 2u : 1u; // matrices
shared float red[NM * NR * NT * WG];

// |v| < 2^22 exactly as a float (mm_dot_body.glsl's i2f)
float i2f(int v) { return intBitsToFloat(v + 0x4B400000) - 12582912.0; }

// XF: block b of x's row from vec4 xv0 (8 vec4s) as q8 (q8_block.glsl):
// the levels of elements 0-15 (qa) and 16-31 (qb); the scale; the levels' sum.
void quant_blk(uint xv0, out uvec4 qa, out uvec4 qb, out float d, out int sum) {
    vec4 v[8];
    [[unroll]] for (uint k = 0u; k < 8u; k++)
        v[k] = x4[xv0 + k];
    q8_block(v, qa, qb, d, sum);
}

// y[o] = v; under ACC res[o] += v too, from res's value pre (read early).
// SPLIT: o is the row (one token, y_col0 0), stored in its matrix's y.
void store(uint o, float v, float pre) {
    if (SPLIT != 0u) {
        if (o >= p.split2)
            y2[o - p.split2] = v;
        else if (o >= p.split1)
            y1[o - p.split1] = v;
        else
            y[o] = v;
        return;
    }
    y[o] = v;
    if (ACC != 0u)
        res[o] = pre + v;
}

int dot16(uvec4 a, uvec4 b) {
    return sdot4(a.x, b.x, 0) + sdot4(a.y, b.y, 0) + sdot4(a.z, b.z, 0) + sdot4(a.w, b.w, 0);
}

// The NR rows from grp * NR (returns, for the whole workgroup, where a pick
// is another piece's).
void rows(uint grp) {
    const uint r0 = grp * NR;
    uint wb = SPLIT != 0u ? 0u : p.w_base, wb2 = p.w_base2, xr = p.tok0, yr = p.tok0;
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
    const uint tid = gl_LocalInvocationID.x, nb = p.n_cols / 32u;
    float acc[NM * NR * NT]; // [matrix][row][token]
    [[unroll]] for (uint i = 0u; i < NM * NR * NT; i++)
        acc[i] = 0.0;
    uint ro[NR];
    [[unroll]] for (uint r = 0u; r < NR; r++) {
        const uint row = min(r0 + r, p.n_rows - 1u); // past the end: the last row again
        ro[r] = row * p.row_bytes;
        if (SPLIT != 0u) // the row's matrix's own base (wb is 0 below)
            ro[r] = row >= p.split2   ? p.w_base3 + (row - p.split2) * p.row_bytes
                    : row >= p.split1 ? p.w_base2 + (row - p.split1) * p.row_bytes
                                      : p.w_base + ro[r];
    }
    const uint xq0 = (xr * p.x_stride) >> 2; // uvec4s (XF: vec4s)
    const uint nt = NT == 1u ? 1u : p.n_tok; // tokens of this pass (<= NT)
    // ACC: the residual of (row r0 + r, token t), loaded before the sums so
    // that nothing waits on it at the end (lanes below NR * NT store them)
    float pre[NR * NT];
    [[unroll]] for (uint r = 0u; r < NR; r++)
        [[unroll]] for (uint t = 0u; t < NT; t++)
            pre[r * NT + t] = ACC != 0u && r0 + r < p.n_rows && t < nt
                                  ? res[(yr + t) * p.y_stride + p.y_col0 + r0 + r]
                                  : 0.0;
    for (uint b = tid; b < nb; b += WG) {
        uint raw[NM * NR][RAWN];
        [[unroll]] for (uint r = 0u; r < NR; r++) {
            blk_load(0u, wb + ro[r], b, raw[r]);
            if (GLU != 0u)
                blk_load(1u, wb2 + ro[r], b, raw[NR + r]);
        }
        if (NT > 1u) { // every row's block converted once, then each token's x
            uvec4 q0[NM * NR], q1[NM * NR];
            float s0[NM * NR], s1[NM * NR], mn[NM * NR];
            [[unroll]] for (uint m = 0u; m < NM * NR; m++)
                blk_conv(raw[m], q0[m], q1[m], s0[m], s1[m], mn[m]);
            [[unroll]] for (uint t = 0u; t < NT; t++) {
                // tokens past n_tok repeat the last (their sums are not stored)
                const uint xo = xq0 + ((min(t, nt - 1u) * p.x_stride) >> 2) + 3u * b;
                const uvec4 xa = floatBitsToUint(x4[xo]), xb = floatBitsToUint(x4[xo + 1u]);
                const uvec4 xc = floatBitsToUint(x4[xo + 2u]);
                const float dx = uintBitsToFloat(xc.x);
                const float sx = DOT_MIN ? dx * i2f(int(xc.y)) : 0.0;
                [[unroll]] for (uint m = 0u; m < NM * NR; m++) {
                    float v = s0[m] * i2f(dot16(q0[m], xa));
                    v += DOT_TWO ? s1[m] * i2f(dot16(q1[m], xb)) : s0[m] * i2f(dot16(q1[m], xb));
                    acc[m * NT + t] += dx * v;
                    if (DOT_MIN)
                        acc[m * NT + t] -= mn[m] * sx;
                }
            }
            continue;
        }
        uvec4 xa, xb;
        float dx;
        int xs;
        if (XF != 0u) {
            quant_blk(xq0 + 8u * b, xa, xb, dx, xs);
        } else {
            const uint xo = xq0 + 3u * b;
            xa = floatBitsToUint(x4[xo]);
            xb = floatBitsToUint(x4[xo + 1u]);
            const uvec4 xc = floatBitsToUint(x4[xo + 2u]);
            dx = uintBitsToFloat(xc.x);
            xs = int(xc.y);
        }
        const float sx = DOT_MIN ? dx * i2f(xs) : 0.0;
        [[unroll]] for (uint m = 0u; m < NM * NR; m++) {
            uvec4 q0, q1;
            float s0, s1, mn;
            blk_conv(raw[m], q0, q1, s0, s1, mn);
            float v = s0 * i2f(dot16(q0, xa));
            v += DOT_TWO ? s1 * i2f(dot16(q1, xb)) : s0 * i2f(dot16(q1, xb));
            acc[m] += dx * v;
            if (DOT_MIN)
                acc[m] -= mn * sx;
        }
    }
    [[unroll]] for (uint i = 0u; i < NM * NR * NT; i++)
        acc[i] = subgroupAdd(acc[i]);
    // lane j < NR * NT stores (row r0 + j / NT, token j % NT): sum j, and
    // for GLU the up's sum NR * NT + j
    if (gl_NumSubgroups > 1u) {
        if (subgroupElect()) {
            [[unroll]] for (uint i = 0u; i < NM * NR * NT; i++)
                red[i * WG + gl_SubgroupID] = acc[i];
        }
        barrier();
        if (tid < NR * NT) {
            float s = 0.0, s2 = 0.0;
            for (uint g = 0u; g < gl_NumSubgroups; g++) {
                s += red[tid * WG + g];
                if (GLU != 0u)
                    s2 += red[(NR * NT + tid) * WG + g];
            }
            float pr = 0.0;
            [[unroll]] for (uint j = 0u; j < NR * NT; j++)
                pr = j == tid ? pre[j] : pr;
            const uint r = tid / NT, t = tid % NT;
            if (r0 + r < p.n_rows && t < nt)
                store((yr + t) * p.y_stride + p.y_col0 + r0 + r, GLU != 0u ? silu(s) * s2 : s,
                      pr);
        }
    } else if (tid == 0u) {
        [[unroll]] for (uint j = 0u; j < NR * NT; j++)
            if (r0 + j / NT < p.n_rows && j % NT < nt)
                store((yr + j % NT) * p.y_stride + p.y_col0 + r0 + j / NT,
                      GLU != 0u ? silu(acc[j]) * acc[NR * NT + j] : acc[j], pre[j]);
    }
}

// A workgroup takes row groups grp, grp + (workgroups), ...: one each when
// the host launches one a group (the default), several when it caps the
// launch (vkmm_configure's ":wN"); the shared sums are read before the
// next group writes them (the barrier).
void main() {
    const uint ngrp = gl_NumWorkGroups.x * gl_NumWorkGroups.y;
    const uint first = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    for (uint grp = first; grp * NR < p.n_rows; grp += ngrp) {
        if (grp != first)
            barrier();
        rows(grp);
    }
}
