// gpu/shaders/mm_dot_body.glsl: the tiled matmul for prefill on 8-bit
// integer dot products, y[t, r] = W[r, :] . x[t, :], with the expert-indexed
// (ID = 1) and fused gate + up + SwiGLU (GLU = 1) forms of mm_body.glsl.
// Included by mm_dot.comp after mm_dot_types.glsl.
//
// The tile is mm_body.glsl's (BM x BN, TM x TN outputs a lane) with K steps
// of 32: one q8 block of activations. Per step the lanes write the weight
// tile's levels as packed int8 (dot_q) with two scales and a min per row
// (dot_scales), and the first BN lanes quantize one token's 32 activations
// each: d = max|x| / 127, q = round(x / d) (as tests/gpu/test-vk-mm.c's
// reference), with the sum of its q for the types with a min. Then each
// output takes 8 packed dot products (OpSDot, SPV_KHR_integer_dot_product:
// core in Vulkan 1.3, through GL_EXT_spirv_intrinsics because Debian 12's
// glslang lacks GL_EXT_integer_dot_product) and
//   acc += dx * (s0 * dot(first 16) + s1 * dot(second 16)) - dx * mn * sum(q).
// Integer sums are exact (|sum| <= 32 * 127 * 127), so the result is the
// dequantized weights times the dequantized q8 activations up to f32
// rounding; quantizing the activations is the only approximation.
layout(constant_id = 0) const uint WG = 256; // lanes: (BM / TM) * (BN / TN)
layout(constant_id = 1) const uint BM = 64;  // rows per tile
layout(constant_id = 2) const uint BN = 64;  // tokens per tile (<= WG)
layout(constant_id = 3) const uint TM = 4;   // rows per lane
layout(constant_id = 4) const uint TN = 4;   // tokens per lane
layout(constant_id = 5) const uint ID = 0;   // 1: expert-indexed
layout(constant_id = 6) const uint LCAP = 1; // pairs listed per window (ID = 1)
layout(constant_id = 7) const uint GLU = 0;  // 1: silu(gate) * up, up in binding 4
layout(local_size_x_id = 0) in;

spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018],
                  id = 4450) int sdot4(uint a, uint b, spirv_literal int packed_4x8);

const uint NM = GLU != 0u ? 2u : 1u;
const uint BMP = BM + 1u, BNP = BN + 1u; // padded: a load's lanes on distinct banks
shared uint wq[NM * 8u * BMP];           // [matrix][word][row] levels
shared float ws[NM * 2u * BM];           // [matrix][half][row] scales
shared float wmn[DOT_MIN ? NM * BM : 1u];
shared uint xq[8u * BNP]; // [word][token]
shared float xd[BN];
shared int xsum[DOT_MIN ? BN : 1u];

#include "mm_tiles.glsl"

void tile(uint wb, uint wb2, uint r0, uint t0, uint cnt) {
    const uint tid = gl_LocalInvocationID.x;
    const uint xs4 = p.x_stride >> 2;
    const uint lm = tid % (BM / TM), ln = tid / (BM / TM);
    float acc[NM * TM * TN]; // [matrix][row][token]
    [[unroll]] for (uint i = 0u; i < NM * TM * TN; i++)
        acc[i] = 0.0;
    uint xtr = 0u, ytr;
    const bool xtok = tid < BN && tok_rows(t0, cnt, tid, xtr, ytr);

    for (uint k0 = 0u; k0 < p.n_cols; k0 += 32u) {
        for (uint g = tid; g < BM * 8u; g += WG) {
            const uint m = g >> 3, w = g & 7u, row = r0 + m;
            const bool inr = row < p.n_rows;
            wq[w * BMP + m] = inr ? dot_q(0u, wb + row * p.row_bytes, k0 + 4u * w) : 0u;
            if (GLU != 0u)
                wq[(8u + w) * BMP + m] = inr ? dot_q(1u, wb2 + row * p.row_bytes, k0 + 4u * w) : 0u;
        }
        for (uint g = tid; g < NM * BM; g += WG) {
            const uint m = g % BM, mat = g / BM, row = r0 + m;
            float s0 = 0.0, s1 = 0.0, mn = 0.0;
            if (row < p.n_rows)
                dot_scales(mat, (mat == 0u ? wb : wb2) + row * p.row_bytes, k0, s0, s1, mn);
            ws[(2u * mat) * BM + m] = s0;
            ws[(2u * mat + 1u) * BM + m] = s1;
            if (DOT_MIN)
                wmn[mat * BM + m] = mn;
        }
        if (tid < BN) { // one token's q8 block
            vec4 v[8];
            float amax = 0.0;
            [[unroll]] for (uint w = 0u; w < 8u; w++) {
                v[w] = xtok ? x4[xtr * xs4 + (k0 >> 2) + w] : vec4(0.0);
                vec4 a = abs(v[w]);
                amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
            }
            const float d = amax / 127.0, id = d > 0.0 ? 1.0 / d : 0.0;
            int s = 0;
            [[unroll]] for (uint w = 0u; w < 8u; w++) {
                ivec4 q = ivec4(round(v[w] * id));
                s += q.x + q.y + q.z + q.w;
                xq[w * BNP + tid] = uint(q.x & 255) | (uint(q.y & 255) << 8) |
                                    (uint(q.z & 255) << 16) | (uint(q.w & 255) << 24);
            }
            xd[tid] = d;
            if (DOT_MIN)
                xsum[tid] = s;
        }
        barrier();
        uint xv[TN * 8u];
        [[unroll]] for (uint j = 0u; j < TN; j++)
            [[unroll]] for (uint w = 0u; w < 8u; w++)
                xv[j * 8u + w] = xq[w * BNP + ln + j * (BN / TN)];
        [[unroll]] for (uint mat = 0u; mat < NM; mat++)
            [[unroll]] for (uint i = 0u; i < TM; i++) {
                const uint m = lm + i * (BM / TM);
                uint a[8];
                [[unroll]] for (uint w = 0u; w < 8u; w++)
                    a[w] = wq[(mat * 8u + w) * BMP + m];
                const float s0 = ws[(2u * mat) * BM + m], s1 = ws[(2u * mat + 1u) * BM + m];
                const float mn = DOT_MIN ? wmn[mat * BM + m] : 0.0;
                [[unroll]] for (uint j = 0u; j < TN; j++) {
                    int d0 = 0, d1 = 0;
                    [[unroll]] for (uint w = 0u; w < 4u; w++) {
                        d0 += sdot4(a[w], xv[j * 8u + w], 0);
                        d1 += sdot4(a[w + 4u], xv[j * 8u + w + 4u], 0);
                    }
                    const uint n = ln + j * (BN / TN);
                    float t = s0 * float(d0) + s1 * float(d1);
                    if (DOT_MIN)
                        t -= mn * float(xsum[n]);
                    acc[(mat * TM + i) * TN + j] += xd[n] * t;
                }
            }
        barrier();
    }

    [[unroll]] for (uint j = 0u; j < TN; j++) {
        uint xr, yr;
        if (!tok_rows(t0, cnt, ln + j * (BN / TN), xr, yr))
            continue;
        [[unroll]] for (uint i = 0u; i < TM; i++) {
            const uint row = r0 + lm + i * (BM / TM);
            if (row < p.n_rows)
                y[yr * p.y_stride + p.y_col0 + row] =
                    GLU != 0u ? silu(acc[i * TN + j]) * acc[(TM + i) * TN + j] : acc[i * TN + j];
        }
    }
}
