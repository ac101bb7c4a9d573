/* gpu/shaders/op_kv.glsl: the paged KV cache of engine/kv/kv.h as the
 * op_kv_write and op_attn_* kernels see it (gpu/vk-ops.h, struct vkops_kv).
 * Define KV_BIND (the first of five bindings: the block table, then the
 * pool's four pieces) before including.
 *
 * f16 element e of block b: word (b % blocks_per_piece) * block_words + e / 2
 * of piece b / blocks_per_piece (uint words: two f16 each, low half first,
 * as the little-endian host stores them). Unused pieces are bound to piece 0
 * and never read. */

layout(std430, binding = KV_BIND) readonly buffer KvTable { int kv_table[]; };
layout(std430, binding = KV_BIND + 1) buffer KvPool0 { uint kv_pool0[]; };
layout(std430, binding = KV_BIND + 2) buffer KvPool1 { uint kv_pool1[]; };
layout(std430, binding = KV_BIND + 3) buffer KvPool2 { uint kv_pool2[]; };
layout(std430, binding = KV_BIND + 4) buffer KvPool3 { uint kv_pool3[]; };

/* The geometry (a part of each kernel's push constants, same order). */
struct kv_geom {
    uint table_stride;
    uint blocks_per_piece;
    uint block_words; /* kv_block_bytes / 4 */
    uint n_block;     /* positions a block, a power of two */
    uint n_part;      /* parts a row is stored in (kv_params.n_head_kv) */
    uint n_embd_k, n_embd_v;
    uint k_words; /* words of K in a block: n_layer * n_block * n_embd_k / 2 */
};

/* The block of (seq, pos). */
uint kv_block(kv_geom g, int seq, int pos) {
    return uint(kv_table[uint(seq) * g.table_stride + uint(pos) / g.n_block]);
}

/* Word of head `head` (head_dim f16), pair d2 (elements 2 d2, 2 d2 + 1) of the
 * K (v = false) or V row at (layer, pos) in block b, as an index into its
 * piece; the piece is b / blocks_per_piece. */
uint kv_word_index(kv_geom g, uint b, uint layer, int pos, uint head, uint head_dim, bool v,
                   uint d2) {
    const uint w = (v ? g.n_embd_v : g.n_embd_k) / g.n_part; /* elements a part's row */
    const uint per = w / head_dim;                           /* heads a part holds */
    const uint part = head / per;
    const uint n_part_all = layer * g.n_part + part;
    const uint e = ((n_part_all * g.n_block + (uint(pos) & (g.n_block - 1u))) * w +
                    (head % per) * head_dim) / 2u;
    return (b % g.blocks_per_piece) * g.block_words + (v ? g.k_words : 0u) + e + d2;
}

uint kv_load(uint piece, uint i) {
    if (piece == 0u)
        return kv_pool0[i];
    if (piece == 1u)
        return kv_pool1[i];
    if (piece == 2u)
        return kv_pool2[i];
    return kv_pool3[i];
}

void kv_store(uint piece, uint i, uint v) {
    if (piece == 0u)
        kv_pool0[i] = v;
    else if (piece == 1u)
        kv_pool1[i] = v;
    else if (piece == 2u)
        kv_pool2[i] = v;
    else
        kv_pool3[i] = v;
}

/* f32 -> f16 bits, round to nearest even, NaN -> sign | 0x7e00: the bits of
 * quant_f32_to_f16 (engine/quant) on every device. packHalf2x16 leaves the
 * rounding to the driver (Vulkan allows round-toward-zero), so it is not used. */
uint kv_f32_to_f16(float f) {
    const uint x = floatBitsToUint(f);
    const uint sign = (x >> 16) & 0x8000u;
    const uint ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return sign | 0x7e00u;
    if (ax >= 0x477ff000u) /* 65520 and up round to inf */
        return sign | 0x7c00u;
    if (ax < 0x38800000u) { /* below 2^-14: f16 subnormal or zero */
        if (ax < 0x33000000u) /* below 2^-25: rounds to zero */
            return sign;
        const uint e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
        const uint shift = 126u - e; /* 14 .. 24 */
        uint h = m >> shift;
        const uint rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
        if (rem > halfway || (rem == halfway && (h & 1u) != 0u))
            h++;
        return sign | h;
    }
    uint h = (ax - 0x38000000u) >> 13; /* exponent re-biased 127 -> 15 */
    const uint rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u))
        h++; /* a carry into the exponent is right (and 65504 + 1/2 ulp -> inf above) */
    return sign | h;
}
