// gpu/shaders/mm_type_q4_k.glsl: Q4_K super-blocks (144 bytes, 256 elements:
// f16 d, f16 dmin, scales[12], qs[128]; element 64h + l in the low nibble of
// qs[32h + l], 64h + 32 + l in the high one; value (d * sc) * L - dmin * mn
// per 32-element sub-block). A unit is one word of qs: 8 elements of
// sub-blocks 2h and 2h + 1, so 32 lanes cover a super-block.
#include "mm_type_kscale.glsl"
const uint UNIT = 8;
const uint NV = 2;
void unit_pos(uint u, out uint p0, out uint p1) {
    uint uu = u & 31u;
    p0 = 256u * (u >> 5) + 64u * (uu >> 3) + 4u * (uu & 7u);
    p1 = p0 + 32u;
}
void unit_load(uint wh, uint rb, uint u, out vec4 v0, out vec4 v1) {
    uint bb = rb + 144u * (u >> 5), uu = u & 31u, h = uu >> 3;
    vec2 dm = unpackHalf2x16(rd32(wh, bb));
    float s0, m0, s1, m1;
    k4_scale_min(wh, bb + 4u, 2u * h, s0, m0);
    k4_scale_min(wh, bb + 4u, 2u * h + 1u, s1, m1);
    uint q = rd32(wh, bb + 16u + 32u * h + 4u * (uu & 7u));
    v0 = (dm.x * s0) * nib_lo(q) - dm.y * m0;
    v1 = (dm.x * s1) * nib_hi(q) - dm.y * m1;
}
vec4 deq4(uint wh, uint rb, uint e) {
    uint bb = rb + 144u * (e >> 8), j = e & 255u, h = j >> 6, hi = (j >> 5) & 1u;
    vec2 dm = unpackHalf2x16(rd32(wh, bb));
    float sc, mn;
    k4_scale_min(wh, bb + 4u, 2u * h + hi, sc, mn);
    uint q = rd32(wh, bb + 16u + 32u * h + (j & 31u));
    return (dm.x * sc) * (hi == 0u ? nib_lo(q) : nib_hi(q)) - dm.y * mn;
}
