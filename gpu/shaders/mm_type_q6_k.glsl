// gpu/shaders/mm_type_q6_k.glsl: Q6_K super-blocks (210 bytes: ql[128],
// qh[64], int8 scales[16], f16 d; element 128h + 32k + l: low 4 bits in
// ql[64h + 32(k & 1) + l] (low nibble for k < 2), high 2 bits at bit 2k of
// qh[32h + l]; value (d * sc) * (L - 32) per 16 elements). A unit is one
// word of ql and one of qh: 8 elements (k = kp and kp + 2). 210-byte blocks
// are only 2-byte aligned, hence rd32's straddling read.
const uint UNIT = 8;
const uint NV = 2;
void unit_pos(uint u, out uint p0, out uint p1) {
    uint uu = u & 31u;
    p0 = 256u * (u >> 5) + 128u * (uu >> 4) + 32u * ((uu >> 3) & 1u) + 4u * (uu & 7u);
    p1 = p0 + 64u;
}
void unit_load(uint wh, uint rb, uint u, out vec4 v0, out vec4 v1) {
    uint bb = rb + 210u * (u >> 5), uu = u & 31u, h = uu >> 4, kp = (uu >> 3) & 1u, m = uu & 7u;
    float d = rdh(wh, bb + 208u);
    uint ql = rd32(wh, bb + 64u * h + 32u * kp + 4u * m);
    uint qh = rd32(wh, bb + 128u + 32u * h + 4u * m) >> (2u * kp);
    uint lo = (ql & 0x0f0f0f0fu) | ((qh & 0x03030303u) << 4);
    uint hi = ((ql >> 4) & 0x0f0f0f0fu) | (((qh >> 4) & 0x03030303u) << 4);
    uint g = 8u * h + 2u * kp + (m >> 2);
    v0 = (d * float(rd8s(wh, bb + 192u + g))) * (bytes4(lo) - 32.0);
    v1 = (d * float(rd8s(wh, bb + 196u + g))) * (bytes4(hi) - 32.0);
}
vec4 deq4(uint wh, uint rb, uint e) {
    uint bb = rb + 210u * (e >> 8), j = e & 255u, h = j >> 7, k = (j >> 5) & 3u, l = j & 31u;
    uint ql = rd32(wh, bb + 64u * h + 32u * (k & 1u) + l) >> (4u * (k >> 1));
    uint qh = rd32(wh, bb + 128u + 32u * h + l) >> (2u * k);
    uint v = (ql & 0x0f0f0f0fu) | ((qh & 0x03030303u) << 4);
    return (rdh(wh, bb + 208u) * float(rd8s(wh, bb + 192u + (j >> 4)))) * (bytes4(v) - 32.0);
}
