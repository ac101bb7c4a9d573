// gpu/shaders/mm_body.glsl: the tiled matmul for prefill (n_tok > 8),
// y[t, r] = W[r, :] . x[t, :], and its expert-indexed form (ID = 1: the
// prefill of a MoE layer). Included by mm_<type>.comp after the type file.
//
// Each workgroup computes a BM x BN tile (rows x tokens). Per K step of 32
// elements its WG lanes dequantize the BM x 32 weight tile once into shared
// memory (deq4: 4 elements per load) and copy the BN x 32 activations beside
// it; then each lane accumulates TM x TN outputs from shared memory. With
// 64 x 64 tiles a weight element is read from memory once per 64 tokens and
// dequantized once per tile (the step is compute-bound on the H200, where
// 64 x 64 x 4 fp32 FMAs per K element keep the SM's FMA pipes fed); the
// shared tiles take (32 x 65 + 32 x 65) x 4 = 16.6 KB, under lavapipe's
// 32 KB limit. Padding each shared row by one float keeps the lanes of a
// load on different banks. Rows past n_rows and tokens past n_tok are zero
// in the tiles and not written.
//
// Expert-indexed (ID = 1): workgroup (row tile, expert e0 + gl_WorkGroupID.y)
// first lists the pairs that picked its expert (a scan of sel in windows of
// LCAP pairs, compacted through a shared counter), then runs the tiles over
// those pairs as its tokens: each expert's rows are read once per BN picks,
// where the matvec would read them once per pick (a 512-token prefill of a
// top-8 MoE has 4,096 picks). A pair's result never depends on which other
// pairs share its tile, so the counter's order changes no bit. An expert
// nobody picked costs one scan of sel.
layout(constant_id = 0) const uint WG = 256; // lanes: (BM / TM) * (BN / TN)
layout(constant_id = 1) const uint BM = 64;  // rows per tile
layout(constant_id = 2) const uint BN = 64;  // tokens per tile
layout(constant_id = 3) const uint TM = 4;   // rows per lane
layout(constant_id = 4) const uint TN = 4;   // tokens per lane
layout(constant_id = 5) const uint ID = 0;   // 1: expert-indexed
layout(constant_id = 6) const uint LCAP = 1; // pairs listed per window (ID = 1)
layout(constant_id = 7) const uint GLU = 0;  // 1: silu(gate) * up, up in binding 4
layout(local_size_x_id = 0) in;

const uint BK = 32u;
const uint TILE_ROWS = BM; // output rows of a tile (mm_tiles.glsl)
shared float sa[BK * (BM + 1u)];
shared float sb[BK * (BN + 1u)];
shared float sa2[GLU != 0u ? BK * (BM + 1u) : 1u];
#include "mm_tiles.glsl"

// One BM x BN tile: rows r0.., tile columns t0.. (tokens, or listed pairs).
void tile(uint wb, uint wb2, uint r0, uint t0, uint cnt) {
    const uint tid = gl_LocalInvocationID.x;
    const uint xs4 = p.x_stride >> 2;
    const uint lm = tid % (BM / TM), ln = tid / (BM / TM);
    const uint NM = GLU != 0u ? 2u : 1u;
    float acc[NM * TM * TN]; // [matrix][row][token]
    [[unroll]] for (uint i = 0u; i < NM * TM * TN; i++)
        acc[i] = 0.0;

    for (uint k0 = 0u; k0 < p.n_cols; k0 += BK) {
        for (uint g = tid; g < BM * 8u; g += WG) {
            const uint m = g >> 3, e = k0 + 4u * (g & 7u), row = r0 + m;
            vec4 v = vec4(0.0), v2 = vec4(0.0);
            if (row < p.n_rows && e < p.n_cols) {
                v = deq4(0u, wb + row * p.row_bytes, e);
                if (GLU != 0u)
                    v2 = deq4(1u, wb2 + row * p.row_bytes, e);
            }
            const uint kk = 4u * (g & 7u);
            sa[(kk + 0u) * (BM + 1u) + m] = v.x;
            sa[(kk + 1u) * (BM + 1u) + m] = v.y;
            sa[(kk + 2u) * (BM + 1u) + m] = v.z;
            sa[(kk + 3u) * (BM + 1u) + m] = v.w;
            if (GLU != 0u) {
                sa2[(kk + 0u) * (BM + 1u) + m] = v2.x;
                sa2[(kk + 1u) * (BM + 1u) + m] = v2.y;
                sa2[(kk + 2u) * (BM + 1u) + m] = v2.z;
                sa2[(kk + 3u) * (BM + 1u) + m] = v2.w;
            }
        }
        for (uint g = tid; g < BN * 8u; g += WG) {
            const uint n = g >> 3, e = k0 + 4u * (g & 7u);
            uint xr, yr;
            vec4 v = vec4(0.0);
            if (tok_rows(t0, cnt, n, xr, yr) && e < p.n_cols)
                v = x4[xr * xs4 + (e >> 2)];
            const uint kk = 4u * (g & 7u);
            sb[(kk + 0u) * (BN + 1u) + n] = v.x;
            sb[(kk + 1u) * (BN + 1u) + n] = v.y;
            sb[(kk + 2u) * (BN + 1u) + n] = v.z;
            sb[(kk + 3u) * (BN + 1u) + n] = v.w;
        }
        barrier();
        // No unroll hint: the drivers unroll the 32 steps as they see fit, and
        // a forced unroll made lavapipe's first-dispatch compile of the fused
        // form 3.5x slower (77 s -> 22 s of CPU for test-vk-mm's glu case).
        for (uint kk = 0u; kk < BK; kk++) {
            float a[TM], b[TN];
            [[unroll]] for (uint i = 0u; i < TM; i++)
                a[i] = sa[kk * (BM + 1u) + lm + i * (BM / TM)];
            [[unroll]] for (uint j = 0u; j < TN; j++)
                b[j] = sb[kk * (BN + 1u) + ln + j * (BN / TN)];
            [[unroll]] for (uint i = 0u; i < TM; i++)
                [[unroll]] for (uint j = 0u; j < TN; j++)
                    acc[i * TN + j] = fma(a[i], b[j], acc[i * TN + j]);
            if (GLU != 0u) {
                [[unroll]] for (uint i = 0u; i < TM; i++)
                    a[i] = sa2[kk * (BM + 1u) + lm + i * (BM / TM)];
                [[unroll]] for (uint i = 0u; i < TM; i++)
                    [[unroll]] for (uint j = 0u; j < TN; j++)
                        acc[(TM + i) * TN + j] = fma(a[i], b[j], acc[(TM + i) * TN + j]);
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
