// gpu/shaders/mm_type_mxfp4.glsl: MXFP4 blocks (17 bytes: E8M0 exponent e,
// qs[16] of E2M1 codes laid out as IQ4_NL; value kvalues[code] * 2^(e-128),
// the table doubled as in engine/quant/quant-iq.c). 17-byte blocks start at
// any byte, hence rd32's straddling read.
const uint UNIT = 8;
const uint NV = 2;
const float KV[16] = float[16](0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 0.0, -1.0, -2.0, -3.0,
                               -4.0, -6.0, -8.0, -12.0);
vec4 kv4(uint q) { return vec4(KV[q & 15u], KV[(q >> 8) & 15u], KV[(q >> 16) & 15u], KV[(q >> 24) & 15u]); }
// 2^(e-128): e = 0 and 1 are f32 subnormals (quant_e8m0_to_f32_half).
float e8m0_half(uint e) { return uintBitsToFloat(e < 2u ? (0x00200000u << e) : ((e - 1u) << 23)); }
void unit_pos(uint u, out uint p0, out uint p1) {
    p0 = 32u * (u >> 2) + 4u * (u & 3u);
    p1 = p0 + 16u;
}
void unit_load(uint wh, uint rb, uint u, out vec4 v0, out vec4 v1) {
    uint bb = rb + 17u * (u >> 2);
    float d = e8m0_half(rd8(wh, bb));
    uint q = rd32(wh, bb + 1u + 4u * (u & 3u));
    v0 = kv4(q) * d;
    v1 = kv4(q >> 4) * d;
}
vec4 deq4(uint wh, uint rb, uint e) {
    uint bb = rb + 17u * (e >> 5), j = e & 31u;
    uint q = rd32(wh, bb + 1u + (j & 15u));
    return kv4(j < 16u ? q : q >> 4) * e8m0_half(rd8(wh, bb));
}
