// gpu/shaders/mm_body.glsl: the tiled matmul for prefill (n_tok > 8),
// y[t, r] = W[r, :] . x[t, :]. Included by mm_<type>.comp after the type file.
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
layout(constant_id = 0) const uint WG = 256; // lanes: (BM / TM) * (BN / TN)
layout(constant_id = 1) const uint BM = 64;  // rows per tile
layout(constant_id = 2) const uint BN = 64;  // tokens per tile
layout(constant_id = 3) const uint TM = 4;   // rows per lane
layout(constant_id = 4) const uint TN = 4;   // tokens per lane
layout(local_size_x_id = 0) in;

const uint BK = 32u;
shared float sa[BK * (BM + 1u)];
shared float sb[BK * (BN + 1u)];

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint r0 = gl_WorkGroupID.x * BM, t0 = gl_WorkGroupID.y * BN;
    const uint xs4 = p.x_stride >> 2;
    const uint lm = tid % (BM / TM), ln = tid / (BM / TM);
    float acc[TM * TN];
    [[unroll]] for (uint i = 0u; i < TM * TN; i++)
        acc[i] = 0.0;

    for (uint k0 = 0u; k0 < p.n_cols; k0 += BK) {
        for (uint g = tid; g < BM * 8u; g += WG) {
            const uint m = g >> 3, e = k0 + 4u * (g & 7u), row = r0 + m;
            vec4 v = vec4(0.0);
            if (row < p.n_rows && e < p.n_cols)
                v = deq4(p.w_base + row * p.row_bytes, e);
            const uint kk = 4u * (g & 7u);
            sa[(kk + 0u) * (BM + 1u) + m] = v.x;
            sa[(kk + 1u) * (BM + 1u) + m] = v.y;
            sa[(kk + 2u) * (BM + 1u) + m] = v.z;
            sa[(kk + 3u) * (BM + 1u) + m] = v.w;
        }
        for (uint g = tid; g < BN * 8u; g += WG) {
            const uint n = g >> 3, e = k0 + 4u * (g & 7u), tok = t0 + n;
            vec4 v = vec4(0.0);
            if (tok < p.n_tok && e < p.n_cols)
                v = x4[tok * xs4 + (e >> 2)];
            const uint kk = 4u * (g & 7u);
            sb[(kk + 0u) * (BN + 1u) + n] = v.x;
            sb[(kk + 1u) * (BN + 1u) + n] = v.y;
            sb[(kk + 2u) * (BN + 1u) + n] = v.z;
            sb[(kk + 3u) * (BN + 1u) + n] = v.w;
        }
        barrier();
        [[unroll]] for (uint kk = 0u; kk < BK; kk++) {
            float a[TM], b[TN];
            [[unroll]] for (uint i = 0u; i < TM; i++)
                a[i] = sa[kk * (BM + 1u) + lm + i * (BM / TM)];
            [[unroll]] for (uint j = 0u; j < TN; j++)
                b[j] = sb[kk * (BN + 1u) + ln + j * (BN / TN)];
            [[unroll]] for (uint i = 0u; i < TM; i++)
                [[unroll]] for (uint j = 0u; j < TN; j++)
                    acc[i * TN + j] = fma(a[i], b[j], acc[i * TN + j]);
        }
        barrier();
    }

    [[unroll]] for (uint i = 0u; i < TM; i++) {
        const uint row = r0 + lm + i * (BM / TM);
        [[unroll]] for (uint j = 0u; j < TN; j++) {
            const uint tok = t0 + ln + j * (BN / TN);
            if (row < p.n_rows && tok < p.n_tok)
                y[tok * p.y_stride + p.y_col0 + row] = acc[i * TN + j];
        }
    }
}
