// gpu/shaders/mm_dot_types.glsl: the integer form of the block types the
// integer-dot matmul (mm_dot_body.glsl) computes, picked by TYPE_<type>:
//   dot_q(wh, rb, e): elements e..e+3 (e % 4 == 0) of the row at byte rb of
//     binding wh as four signed 8-bit integers in one word;
//   dot_scales(wh, rb, k0, s0, s1, mn): for the 32 elements from k0
//     (k0 % 32 == 0), element = s0 * q - mn in the first 16, s1 * q - mn in
//     the second (Q6_K's sub-blocks are 16 wide; the others' s0 == s1);
//   DOT_MIN: whether mn can be nonzero (Q4_K, Q5_K).
// Each follows the type's layout in mm_type_<type>.glsl (deq4) exactly; only
// the last step (integer -> float) moves to the end of the dot product.

// Four bytes each minus 8 (Q4_0's nibbles) or 32 (Q6_K's 6-bit levels),
// without borrows across bytes: every byte is below 0x80.
uint sub_bytes(uint q, uint c) { return ((q | 0x80808080u) - c) ^ 0x80808080u; }

#if defined(TYPE_q4_0)
const bool DOT_MIN = false;
uint dot_q(uint wh, uint rb, uint e) {
    uint bb = rb + 18u * (e >> 5), j = e & 31u;
    uint q = rd32e(wh, bb + 2u + (j & 15u));
    return sub_bytes(j < 16u ? q & 0x0f0f0f0fu : (q >> 4) & 0x0f0f0f0fu, 0x08080808u);
}
void dot_scales(uint wh, uint rb, uint k0, out float s0, out float s1, out float mn) {
    s0 = rdh(wh, rb + 18u * (k0 >> 5));
    s1 = s0;
    mn = 0.0;
}
#elif defined(TYPE_q8_0)
const bool DOT_MIN = false;
uint dot_q(uint wh, uint rb, uint e) { return rd32e(wh, rb + 34u * (e >> 5) + 2u + (e & 31u)); }
void dot_scales(uint wh, uint rb, uint k0, out float s0, out float s1, out float mn) {
    s0 = rdh(wh, rb + 34u * (k0 >> 5));
    s1 = s0;
    mn = 0.0;
}
#elif defined(TYPE_q4_k)
const bool DOT_MIN = true;
uint dot_q(uint wh, uint rb, uint e) {
    uint bb = rb + 144u * (e >> 8), j = e & 255u, h = j >> 6, hi = (j >> 5) & 1u;
    return (rd32(wh, bb + 16u + 32u * h + (j & 31u)) >> (4u * hi)) & 0x0f0f0f0fu;
}
void dot_scales(uint wh, uint rb, uint k0, out float s0, out float s1, out float mn) {
    uint bb = rb + 144u * (k0 >> 8);
    vec2 dm = unpackHalf2x16(rd32(wh, bb));
    float sc, m;
    k4_scale_min(wh, bb + 4u, (k0 & 255u) >> 5, sc, m);
    s0 = dm.x * sc;
    s1 = s0;
    mn = dm.y * m;
}
#elif defined(TYPE_q5_k)
const bool DOT_MIN = true;
uint dot_q(uint wh, uint rb, uint e) {
    uint bb = rb + 176u * (e >> 8), j = e & 255u, h = j >> 6, hi = (j >> 5) & 1u, l = j & 31u;
    uint q = rd32(wh, bb + 48u + 32u * h + l) >> (4u * hi);
    uint qh = rd32(wh, bb + 16u + l) >> (2u * h + hi);
    return (q & 0x0f0f0f0fu) | ((qh & 0x01010101u) << 4);
}
void dot_scales(uint wh, uint rb, uint k0, out float s0, out float s1, out float mn) {
    uint bb = rb + 176u * (k0 >> 8);
    vec2 dm = unpackHalf2x16(rd32(wh, bb));
    float sc, m;
    k4_scale_min(wh, bb + 4u, (k0 & 255u) >> 5, sc, m);
    s0 = dm.x * sc;
    s1 = s0;
    mn = dm.y * m;
}
#elif defined(TYPE_q6_k)
const bool DOT_MIN = false;
uint dot_q(uint wh, uint rb, uint e) {
    uint bb = rb + 210u * (e >> 8), j = e & 255u, h = j >> 7, k = (j >> 5) & 3u, l = j & 31u;
    uint ql = rd32(wh, bb + 64u * h + 32u * (k & 1u) + l) >> (4u * (k >> 1));
    uint qh = rd32(wh, bb + 128u + 32u * h + l) >> (2u * k);
    return sub_bytes((ql & 0x0f0f0f0fu) | ((qh & 0x03030303u) << 4), 0x20202020u);
}
void dot_scales(uint wh, uint rb, uint k0, out float s0, out float s1, out float mn) {
    uint bb = rb + 210u * (k0 >> 8), g = (k0 & 255u) >> 4;
    float d = rdh(wh, bb + 208u);
    s0 = d * float(rd8s(wh, bb + 192u + g));
    s1 = d * float(rd8s(wh, bb + 193u + g));
    mn = 0.0;
}
#else
#error "mm_dot_types.glsl: no integer form for this TYPE_<type>"
#endif
