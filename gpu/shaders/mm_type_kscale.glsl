// gpu/shaders/mm_type_kscale.glsl: the 12-byte scale field of Q4_K and Q5_K
// (8 sub-blocks of 32, a 6-bit scale and a 6-bit min each; the split of
// engine/quant/quant-k.c k4_scale_min), at byte s of binding `wh`.
void k4_scale_min(uint wh, uint s, uint j, out float sc, out float mn) {
    if (j < 4u) {
        sc = float(rd8(wh, s + j) & 63u);
        mn = float(rd8(wh, s + j + 4u) & 63u);
    } else {
        uint b = rd8(wh, s + j + 4u);
        sc = float((b & 15u) | ((rd8(wh, s + j - 4u) >> 6) << 4));
        mn = float((b >> 4) | ((rd8(wh, s + j) >> 6) << 4));
    }
}
