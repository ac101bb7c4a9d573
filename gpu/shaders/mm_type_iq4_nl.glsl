// gpu/shaders/mm_type_iq4_nl.glsl: IQ4_NL blocks (laid out as Q4_0; value
// d * kvalues[nibble], the non-linear table of engine/quant/quant-iq.c).
const uint UNIT = 8;
const uint NV = 2;
const float KV[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0,
                               13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);
vec4 kv4(uint q) { return vec4(KV[q & 15u], KV[(q >> 8) & 15u], KV[(q >> 16) & 15u], KV[(q >> 24) & 15u]); }
void unit_pos(uint u, out uint p0, out uint p1) {
    p0 = 32u * (u >> 2) + 4u * (u & 3u);
    p1 = p0 + 16u;
}
void unit_load(uint wh, uint rb, uint u, out vec4 v0, out vec4 v1) {
    uint bb = rb + 18u * (u >> 2);
    float d = rdh(wh, bb);
    uint q = rd32e(wh, bb + 2u + 4u * (u & 3u));
    v0 = kv4(q) * d;
    v1 = kv4(q >> 4) * d;
}
vec4 deq4(uint wh, uint rb, uint e) {
    uint bb = rb + 18u * (e >> 5), j = e & 31u;
    uint q = rd32e(wh, bb + 2u + (j & 15u));
    return kv4(j < 16u ? q : q >> 4) * rdh(wh, bb);
}
