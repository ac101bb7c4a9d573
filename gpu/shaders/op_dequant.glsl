/* gpu/shaders/op_dequant.glsl: one element of a GGUF row as f32, for the
 * embedding gather (op_embed.comp). Declare `dq_data` (a uint[] buffer)
 * before including. Rows start at any byte (Q8_0 rows are 34-byte blocks),
 * so bytes are picked out of words; the gather reads one row a token, so
 * this is never the cost of a step.
 *
 * Block layouts (engine/quant/quant.h, ggml-common.h), element e of a block:
 *   Q8_0 (34 B, 32): d f16, qs[32] int8           y = qs[e] * d
 *   Q4_0 (18 B, 32): d f16, qs[16]                 y = (nibble - 8) * d
 *                    (e < 16: low nibble of qs[e], else high nibble of qs[e - 16])
 *   Q4_K (144 B, 256): d, dmin f16, scales[12], qs[128]
 *   Q5_K (176 B, 256): d, dmin, scales[12], qh[32], qs[128]
 *   Q6_K (210 B, 256): ql[128], qh[64], scales[16] int8, d f16
 * K-quants: y = (d * sc) * L - dmin * mn as engine/quant/quant-k.c
 * quant_kblock_to_f32 computes it (precise: no fused multiply-add). */

#define DQ_F32 0u
#define DQ_F16 1u
#define DQ_Q4_0 2u
#define DQ_Q8_0 8u
#define DQ_Q4_K 12u
#define DQ_Q5_K 13u
#define DQ_Q6_K 14u
#define DQ_BF16 30u

uint dq_byte(uint b) {
    return (dq_data[b >> 2] >> ((b & 3u) * 8u)) & 0xffu;
}

uint dq_u16(uint b) {
    return dq_byte(b) | (dq_byte(b + 1u) << 8);
}

float dq_f16(uint b) {
    return unpackHalf2x16(dq_u16(b)).x;
}

int dq_i8(uint b) {
    return int(dq_byte(b) << 24) >> 24;
}

/* Q4_K / Q5_K 6-bit scale and min of sub-block j (of 8) at scales byte s. */
void dq_k4_scale_min(uint s, uint j, out uint sc, out uint mn) {
    if (j < 4u) {
        sc = dq_byte(s + j) & 63u;
        mn = dq_byte(s + j + 4u) & 63u;
    } else {
        sc = (dq_byte(s + j + 4u) & 0xfu) | ((dq_byte(s + j - 4u) >> 6) << 4);
        mn = (dq_byte(s + j + 4u) >> 4) | ((dq_byte(s + j) >> 6) << 4);
    }
}

/* Element i of the row that starts at byte `row` of dq_data. */
float dq_elem(uint type, uint row, uint i) {
    if (type == DQ_F32)
        return uintBitsToFloat(dq_data[row / 4u + i]); /* F32 rows are word-aligned */
    if (type == DQ_F16)
        return dq_f16(row + 2u * i);
    if (type == DQ_BF16)
        return uintBitsToFloat(dq_u16(row + 2u * i) << 16);
    if (type == DQ_Q8_0) {
        const uint b = row + (i / 32u) * 34u;
        return float(dq_i8(b + 2u + i % 32u)) * dq_f16(b);
    }
    if (type == DQ_Q4_0) {
        const uint b = row + (i / 32u) * 18u, e = i % 32u;
        const uint q = dq_byte(b + 2u + e % 16u);
        const int L = int(e < 16u ? q & 0xfu : q >> 4) - 8;
        return float(L) * dq_f16(b);
    }
    const uint e = i % 256u;
    if (type == DQ_Q4_K || type == DQ_Q5_K) {
        const bool five = type == DQ_Q5_K;
        const uint b = row + (i / 256u) * (five ? 176u : 144u);
        const uint h = e / 64u, l = e % 32u, hi = (e % 64u) / 32u; /* hi: the high nibble */
        const uint qs = b + (five ? 48u : 16u) + 32u * h + l;
        uint L = hi != 0u ? dq_byte(qs) >> 4 : dq_byte(qs) & 0xfu;
        if (five)
            L |= ((dq_byte(b + 16u + l) >> (2u * h + hi)) & 1u) << 4;
        uint sc, mn;
        dq_k4_scale_min(b + 4u, e / 32u, sc, mn);
        precise float dl = dq_f16(b) * float(sc);
        precise float ml = dq_f16(b + 2u) * float(mn);
        precise float y = dl * float(L) - ml;
        return y;
    }
    if (type == DQ_Q6_K) {
        const uint b = row + (i / 256u) * 210u;
        const uint h = e / 128u, k = (e % 128u) / 32u, l = e % 32u;
        const uint ql = dq_byte(b + 64u * h + 32u * (k & 1u) + l);
        const uint lo = k < 2u ? ql & 0xfu : ql >> 4;
        const uint hi = (dq_byte(b + 128u + 32u * h + l) >> (2u * k)) & 3u;
        const int L = int(lo | (hi << 4)) - 32;
        precise float dl = dq_f16(b + 208u) * float(dq_i8(b + 192u + e / 16u));
        precise float y = dl * float(L);
        return y;
    }
    return 0.0;
}
