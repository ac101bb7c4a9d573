// gpu/shaders/mm_coop_body.glsl: the tiled matmul for prefill on cooperative
// matrices, y[t, r] = W[r, :] . x[t, :], with its expert-indexed (ID = 1)
// and fused gate + up + SwiGLU (GLU = 1) forms: the work of mm_body.glsl on
// the tensor cores. Included by mm_coop.comp after the type file.
//
// Each workgroup computes a BM x BN tile (rows x tokens) with WG / SG
// subgroups in an SGM x SGN grid, each subgroup a (BM / SGM) x (BN / SGN)
// block of 16 x 16 f32 accumulators. Per K step of BK elements the lanes
// dequantize the BM x BK weight tile into shared memory as f16 (whole units
// of the type file, unit_load, when BK is a multiple of their span USPAN:
// one read of a block's scales per 8 elements; else deq4, 4 elements a
// read) and convert the BN x BK activations to f16 beside it; then each subgroup multiplies 16 x 16 x 16 fragments out of
// shared memory (coopMatMulAddNV), f32 accumulation. Shared rows are BK + 8
// halves: a multiple of 16 bytes (the fragment loads' alignment) whose
// 8-row groups fall on distinct banks. Results go out through a 16 x 16
// staging block per subgroup (rows past n_rows and tokens past n_tok are
// not written; the expert-indexed form scatters to its picks' rows).
//
// Rounding: weights and activations are rounded to f16 (11-bit mantissa),
// sums are f32: the normalised squared error against the f32 kernels is
// ~1e-7 (tests/gpu/test-vk-mm.c); activations above 65,504 would overflow,
// which is why the F32 and BF16 weight types keep the f32 tiles by default.
layout(constant_id = 0) const uint WG = 128; // lanes: (WG / SG) subgroups
layout(constant_id = 1) const uint BM = 64;  // rows per tile
layout(constant_id = 2) const uint BN = 64;  // tokens per tile
layout(constant_id = 3) const uint BK = 32;  // K step, a multiple of 16
layout(constant_id = 4) const uint SGM = 2;  // subgroups along the rows
layout(constant_id = 5) const uint ID = 0;   // 1: expert-indexed
layout(constant_id = 6) const uint LCAP = 1; // pairs listed per window (ID = 1)
layout(constant_id = 7) const uint GLU = 0;  // 1: silu(gate) * up, up in binding 4
layout(constant_id = 8) const uint SG = 32;  // lanes of a subgroup
layout(local_size_x_id = 0) in;

const uint NSG = WG / SG, SGN = NSG / SGM;
const uint WM = BM / SGM, WN = BN / SGN; // one subgroup's block
const uint CM = WM / 16u, CN = WN / 16u; // its fragments
const uint NM = GLU != 0u ? 2u : 1u;     // matrices
const uint LDS = BK + 8u;                // halves per shared row
const uint BK4 = BK / 4u;
const uint TILE_ROWS = BM; // output rows of a tile (mm_tiles.glsl)
// Every shared array is a whole number of 16-byte units (the unused second
// weight tile 8 halves, not 1; mm_tiles.glsl's pick list and counter
// likewise), so wherever the driver places them each starts 16-byte
// aligned, as the fragment loads need. tests/gpu/test-vk-mm-coop.c on the
// H100 of 2026-12-06 read y[t][r] = x[t][r + 1] through an identity with a
// 1-element sa2: the weight tile one element off its address.
shared float16_t sa[BM * LDS];
shared float16_t sa2[GLU != 0u ? BM * LDS : 8u];
shared float16_t sb[BN * LDS];
shared float sc[NSG * 256u * NM];

#include "mm_tiles.glsl"

#define CM_ACC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define CM_IN fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>

void tile(uint wb, uint wb2, uint r0, uint t0, uint cnt) {
    const uint tid = gl_LocalInvocationID.x;
    const uint xs4 = p.x_stride >> 2;
    const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    const uint sm = sg % SGM, sn = sg / SGM;
    CM_ACC acc[CM * CN];
    CM_ACC acc2[GLU != 0u ? CM * CN : 1u];
    [[unroll]] for (uint i = 0u; i < CM * CN; i++) {
        acc[i] = CM_ACC(0.0);
        if (GLU != 0u)
            acc2[i] = CM_ACC(0.0);
    }

    for (uint k0 = 0u; k0 < p.n_cols; k0 += BK) {
        if (BK % USPAN == 0u) { // whole units: one load of scales per 8 elements
            for (uint g = tid; g < BM * (BK / UNIT); g += WG) {
                const uint m = g / (BK / UNIT), u = k0 / UNIT + g % (BK / UNIT), row = r0 + m;
                uint p0, p1;
                unit_pos(u, p0, p1);
                vec4 v[2] = vec4[2](vec4(0.0), vec4(0.0)), v2[2] = vec4[2](vec4(0.0), vec4(0.0));
                if (row < p.n_rows && p0 < p.n_cols) {
                    unit_load(0u, wb + row * p.row_bytes, u, v[0], v[1]);
                    if (GLU != 0u)
                        unit_load(1u, wb2 + row * p.row_bytes, u, v2[0], v2[1]);
                }
                [[unroll]] for (uint h = 0u; h < NV; h++) {
                    const uint o = m * LDS + (h == 0u ? p0 : p1) - k0;
                    sa[o] = float16_t(v[h].x);
                    sa[o + 1u] = float16_t(v[h].y);
                    sa[o + 2u] = float16_t(v[h].z);
                    sa[o + 3u] = float16_t(v[h].w);
                    if (GLU != 0u) {
                        sa2[o] = float16_t(v2[h].x);
                        sa2[o + 1u] = float16_t(v2[h].y);
                        sa2[o + 2u] = float16_t(v2[h].z);
                        sa2[o + 3u] = float16_t(v2[h].w);
                    }
                }
            }
        } else { // 4 elements a read (deq4)
            for (uint g = tid; g < BM * BK4; g += WG) {
                const uint m = g / BK4, kk = 4u * (g % BK4), e = k0 + kk, row = r0 + m;
                vec4 v = vec4(0.0), v2 = vec4(0.0);
                if (row < p.n_rows && e < p.n_cols) {
                    v = deq4(0u, wb + row * p.row_bytes, e);
                    if (GLU != 0u)
                        v2 = deq4(1u, wb2 + row * p.row_bytes, e);
                }
                const uint o = m * LDS + kk;
                sa[o] = float16_t(v.x);
                sa[o + 1u] = float16_t(v.y);
                sa[o + 2u] = float16_t(v.z);
                sa[o + 3u] = float16_t(v.w);
                if (GLU != 0u) {
                    sa2[o] = float16_t(v2.x);
                    sa2[o + 1u] = float16_t(v2.y);
                    sa2[o + 2u] = float16_t(v2.z);
                    sa2[o + 3u] = float16_t(v2.w);
                }
            }
        }
        for (uint g = tid; g < BN * BK4; g += WG) {
            const uint n = g / BK4, kk = 4u * (g % BK4), e = k0 + kk;
            uint xr, yr;
            vec4 v = vec4(0.0);
            if (tok_rows(t0, cnt, n, xr, yr) && e < p.n_cols)
                v = x4[xr * xs4 + (e >> 2)];
            const uint o = n * LDS + kk;
            sb[o] = float16_t(v.x);
            sb[o + 1u] = float16_t(v.y);
            sb[o + 2u] = float16_t(v.z);
            sb[o + 3u] = float16_t(v.w);
        }
        barrier();
        [[unroll]] for (uint kk = 0u; kk < BK; kk += 16u) {
            CM_IN fb[CN];
            [[unroll]] for (uint j = 0u; j < CN; j++) // B = x^T: K x N, column-major rows of sb
                coopMatLoadNV(fb[j], sb, (sn * WN + 16u * j) * LDS + kk, LDS, true);
            [[unroll]] for (uint i = 0u; i < CM; i++) {
                CM_IN fa;
                coopMatLoadNV(fa, sa, (sm * WM + 16u * i) * LDS + kk, LDS, false);
                [[unroll]] for (uint j = 0u; j < CN; j++)
                    acc[i * CN + j] = coopMatMulAddNV(fa, fb[j], acc[i * CN + j]);
                if (GLU != 0u) {
                    coopMatLoadNV(fa, sa2, (sm * WM + 16u * i) * LDS + kk, LDS, false);
                    [[unroll]] for (uint j = 0u; j < CN; j++)
                        acc2[i * CN + j] = coopMatMulAddNV(fa, fb[j], acc2[i * CN + j]);
                }
            }
        }
        barrier();
    }

    // out through this subgroup's staging block: sc[base + n * 16 + m] holds
    // row m, token n of a fragment, so consecutive lanes write consecutive rows
    const uint base = sg * 256u * NM;
    [[unroll]] for (uint i = 0u; i < CM; i++)
        [[unroll]] for (uint j = 0u; j < CN; j++) {
            coopMatStoreNV(acc[i * CN + j], sc, base, 16u, true);
            if (GLU != 0u)
                coopMatStoreNV(acc2[i * CN + j], sc, base + 256u, 16u, true);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            for (uint q = lane; q < 256u; q += SG) {
                const uint row = r0 + sm * WM + 16u * i + (q & 15u);
                uint xr, yr;
                if (row < p.n_rows && tok_rows(t0, cnt, sn * WN + 16u * j + (q >> 4), xr, yr)) {
                    const float g = sc[base + q];
                    y[yr * p.y_stride + p.y_col0 + row] =
                        GLU != 0u ? silu(g) * sc[base + 256u + q] : g;
                }
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();
        }
}
