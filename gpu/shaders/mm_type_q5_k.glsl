// gpu/shaders/mm_type_q5_k.glsl: Q5_K super-blocks (176 bytes: d, dmin,
// scales[12], qh[32], qs[128]; as Q4_K plus a fifth bit: bit 2h of qh[l] for
// element 64h + l, bit 2h + 1 for 64h + 32 + l). A unit is one word of qs
// and the word of qh with the same l: 8 elements.
#include "mm_type_kscale.glsl"
const uint UNIT = 8;
const uint NV = 2;
void unit_pos(uint u, out uint p0, out uint p1) {
    uint uu = u & 31u;
    p0 = 256u * (u >> 5) + 64u * (uu >> 3) + 4u * (uu & 7u);
    p1 = p0 + 32u;
}
void unit_load(uint wh, uint rb, uint u, out vec4 v0, out vec4 v1) {
    uint bb = rb + 176u * (u >> 5), uu = u & 31u, h = uu >> 3, m = uu & 7u;
    vec2 dm = unpackHalf2x16(rd32(wh, bb));
    float s0, m0, s1, m1;
    k4_scale_min(wh, bb + 4u, 2u * h, s0, m0);
    k4_scale_min(wh, bb + 4u, 2u * h + 1u, s1, m1);
    uint q = rd32(wh, bb + 48u + 32u * h + 4u * m);
    uint qh = rd32(wh, bb + 16u + 4u * m);
    uint lo = (q & 0x0f0f0f0fu) | (((qh >> (2u * h)) & 0x01010101u) << 4);
    uint hi = ((q >> 4) & 0x0f0f0f0fu) | (((qh >> (2u * h + 1u)) & 0x01010101u) << 4);
    v0 = (dm.x * s0) * bytes4(lo) - dm.y * m0;
    v1 = (dm.x * s1) * bytes4(hi) - dm.y * m1;
}
vec4 deq4(uint wh, uint rb, uint e) {
    uint bb = rb + 176u * (e >> 8), j = e & 255u, h = j >> 6, hi = (j >> 5) & 1u, l = j & 31u;
    vec2 dm = unpackHalf2x16(rd32(wh, bb));
    float sc, mn;
    k4_scale_min(wh, bb + 4u, 2u * h + hi, sc, mn);
    uint q = rd32(wh, bb + 48u + 32u * h + l) >> (4u * hi);
    uint qh = rd32(wh, bb + 16u + l) >> (2u * h + hi);
    uint v = (q & 0x0f0f0f0fu) | ((qh & 0x01010101u) << 4);
    return (dm.x * sc) * bytes4(v) - dm.y * mn;
}
