// gpu/shaders/mm_dot_types.glsl: the integer form of the block types the
// integer-dot matmul (mm_dot_body.glsl) computes, picked by TYPE_<type>, one
// q8 block (32 elements) of a row at a time, in two steps so that the loads
// can be issued a K step before their words are needed:
//   blk_load(wh, rb, kb, r): RAWN words of block kb (elements 32 kb ..) of
//     the row at byte rb of binding wh;
//   blk_conv(r, q0, q1, s0, s1, mn): its 32 levels as signed 8-bit integers
//     (q0: elements 0..15, q1: 16..31, four a word), element = s0 * q - mn
//     in the first 16 and s1 * q - mn in the second;
//   DOT_MIN: whether mn can be nonzero (Q4_K, Q5_K); DOT_TWO: whether s1
//     can differ from s0 (Q6_K's sub-blocks are 16 wide).
// Q4_0 and Q8_0 load the block's aligned words (5 and 9: the 18- and
// 34-byte blocks start on a half word) and pick d and the levels out in
// blk_conv; the K-quants convert in blk_load (dot_q, dot_scales: element
// e..e+3 of a row, and the scales of the 32 from k0). Each follows the
// type's layout in mm_type_<type>.glsl (deq4) exactly; only the last step
// (integer -> float) moves to the end of the dot product.

// Four bytes each minus 8 (Q4_0's nibbles) or 32 (Q6_K's 6-bit levels),
// without borrows across bytes: every byte is below 0x80.
uint sub_bytes(uint q, uint c) { return ((q | 0x80808080u) - c) ^ 0x80808080u; }

#if defined(TYPE_q4_0)
const bool DOT_MIN = false, DOT_TWO = false;
const uint RAWN = 6u; // 5 words from the block's aligned start, and its offset in them
void blk_load(uint wh, uint rb, uint kb, out uint r[RAWN]) {
    const uint bb = rb + 18u * kb, i0 = bb >> 2;
    [[unroll]] for (uint k = 0u; k < 5u; k++)
        r[k] = wword(wh, i0 + k);
    r[5] = bb & 2u;
}
void blk_conv(uint r[RAWN], out uvec4 q0, out uvec4 q1, out float s0, out float s1,
              out float mn) {
    const bool al = r[5] == 0u; // d in r[0]'s low half, the 16 quant bytes from byte 2
    s0 = unpackHalf2x16(al ? r[0] : r[0] >> 16).x;
    s1 = s0;
    mn = 0.0;
    uint q[4];
    [[unroll]] for (uint k = 0u; k < 4u; k++)
        q[k] = al ? (r[k] >> 16) | (r[k + 1u] << 16) : r[k + 1u];
    q0 = uvec4(sub_bytes(q[0] & 0x0f0f0f0fu, 0x08080808u), sub_bytes(q[1] & 0x0f0f0f0fu, 0x08080808u),
               sub_bytes(q[2] & 0x0f0f0f0fu, 0x08080808u), sub_bytes(q[3] & 0x0f0f0f0fu, 0x08080808u));
    q1 = uvec4(sub_bytes((q[0] >> 4) & 0x0f0f0f0fu, 0x08080808u),
               sub_bytes((q[1] >> 4) & 0x0f0f0f0fu, 0x08080808u),
               sub_bytes((q[2] >> 4) & 0x0f0f0f0fu, 0x08080808u),
               sub_bytes((q[3] >> 4) & 0x0f0f0f0fu, 0x08080808u));
}
#elif defined(TYPE_q8_0)
const bool DOT_MIN = false, DOT_TWO = false;
const uint RAWN = 10u; // 9 words from the block's aligned start, and its offset in them
void blk_load(uint wh, uint rb, uint kb, out uint r[RAWN]) {
    const uint bb = rb + 34u * kb, i0 = bb >> 2;
    [[unroll]] for (uint k = 0u; k < 9u; k++)
        r[k] = wword(wh, i0 + k);
    r[9] = bb & 2u;
}
void blk_conv(uint r[RAWN], out uvec4 q0, out uvec4 q1, out float s0, out float s1,
              out float mn) {
    const bool al = r[9] == 0u;
    s0 = unpackHalf2x16(al ? r[0] : r[0] >> 16).x;
    s1 = s0;
    mn = 0.0;
    uint q[8];
    [[unroll]] for (uint k = 0u; k < 8u; k++)
        q[k] = al ? (r[k] >> 16) | (r[k + 1u] << 16) : r[k + 1u];
    q0 = uvec4(q[0], q[1], q[2], q[3]);
    q1 = uvec4(q[4], q[5], q[6], q[7]);
}
#elif defined(TYPE_q4_k)
const bool DOT_MIN = true, DOT_TWO = false;
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
const bool DOT_MIN = true, DOT_TWO = false;
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
const bool DOT_MIN = false, DOT_TWO = true;
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

#if !defined(TYPE_q4_0) && !defined(TYPE_q8_0)
// The K-quants: the converted levels (8 words) and the three scales' bits.
const uint RAWN = 11u;
void blk_load(uint wh, uint rb, uint kb, out uint r[RAWN]) {
    [[unroll]] for (uint k = 0u; k < 8u; k++)
        r[k] = dot_q(wh, rb, 32u * kb + 4u * k);
    float s0, s1, mn;
    dot_scales(wh, rb, 32u * kb, s0, s1, mn);
    r[8] = floatBitsToUint(s0);
    r[9] = floatBitsToUint(s1);
    r[10] = floatBitsToUint(mn);
}
void blk_conv(uint r[RAWN], out uvec4 q0, out uvec4 q1, out float s0, out float s1,
              out float mn) {
    q0 = uvec4(r[0], r[1], r[2], r[3]);
    q1 = uvec4(r[4], r[5], r[6], r[7]);
    s0 = uintBitsToFloat(r[8]);
    s1 = uintBitsToFloat(r[9]);
    mn = uintBitsToFloat(r[10]);
}
#endif
