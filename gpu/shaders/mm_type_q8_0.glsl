// gpu/shaders/mm_type_q8_0.glsl: Q8_0 blocks (34 bytes: f16 d, int8 qs[32]).
// A unit is 8 consecutive elements of one block (two words of qs), so four
// lanes cover a block and a 32-lane subgroup 8 blocks (272 bytes) per step.
const uint UNIT = 8;
const uint NV = 2;
void unit_pos(uint u, out uint p0, out uint p1) {
    p0 = 32u * (u >> 2) + 8u * (u & 3u);
    p1 = p0 + 4u;
}
void unit_load(uint wh, uint rb, uint u, out vec4 v0, out vec4 v1) {
    uint bb = rb + 34u * (u >> 2), o = bb + 2u + 8u * (u & 3u);
    float d = rdh(wh, bb);
    v0 = sbytes4(rd32e(wh, o)) * d;
    v1 = sbytes4(rd32e(wh, o + 4u)) * d;
}
vec4 deq4(uint wh, uint rb, uint e) {
    uint bb = rb + 34u * (e >> 5);
    return sbytes4(rd32e(wh, bb + 2u + (e & 31u))) * rdh(wh, bb);
}
// The matvec's block path (mv_body.glsl): a lane takes a whole block, its
// eight qs words as signed bytes, vec4 v = elements 4v..4v+3.
#define MV_BLK 1
const uint BQ = 8, BB = 34, BV = 8;
const float BOFF = 0.0;
vec4 blk_vec(uint q[BQ], uint v) { return sbytes4(q[v]); }
