// gpu/shaders/mm_type_q4_0.glsl: Q4_0 blocks (18 bytes: f16 d, qs[16];
// element j in the low nibble of qs[j], j + 16 in the high one; value
// (nibble - 8) * d). A unit is one word of qs: 8 elements (j..j+3 and
// j+16..j+19), so four lanes cover a block.
const uint UNIT = 8;
const uint NV = 2;
void unit_pos(uint u, out uint p0, out uint p1) {
    p0 = 32u * (u >> 2) + 4u * (u & 3u);
    p1 = p0 + 16u;
}
void unit_load(uint wh, uint rb, uint u, out vec4 v0, out vec4 v1) {
    uint bb = rb + 18u * (u >> 2);
    float d = rdh(wh, bb);
    uint q = rd32e(wh, bb + 2u + 4u * (u & 3u));
    v0 = (nib_lo(q) - 8.0) * d;
    v1 = (nib_hi(q) - 8.0) * d;
}
vec4 deq4(uint wh, uint rb, uint e) {
    uint bb = rb + 18u * (e >> 5), j = e & 31u;
    uint q = rd32e(wh, bb + 2u + (j & 15u));
    return ((j < 16u ? nib_lo(q) : nib_hi(q)) - 8.0) * rdh(wh, bb);
}
// The matvec's block path (mv_body.glsl): a lane takes a whole block, its
// four qs words as integers; vec4 v of the block is elements 4v..4v+3 (the
// low nibbles of word v, then the high nibbles of word v - 4).
#define MV_BLK 1
const uint BQ = 4, BB = 18, BV = 8;
const float BOFF = 8.0;
vec4 blk_vec(uint q[BQ], uint v) { return v < 4u ? nib_lo(q[v]) : nib_hi(q[v - 4u]); }
