// gpu/shaders/mm_type_bf16.glsl: BF16 rows (the top 16 bits of an f32). A
// unit is 4 elements, one 8-byte load (n_cols % 4 == 0).
const uint UNIT = 4;
const uint NV = 1;
layout(std430, binding = 0) readonly buffer BufW2 { uvec2 w2[]; };
layout(std430, binding = 4) readonly buffer BufU2 { uvec2 wu2[]; };
uvec2 wv(uint wh, uint i) { return wh == 0u ? w2[i] : wu2[i]; }
vec4 bf16x4(uvec2 q) {
    return uintBitsToFloat(uvec4(q.x << 16, q.x & 0xffff0000u, q.y << 16, q.y & 0xffff0000u));
}
void unit_pos(uint u, out uint p0, out uint p1) { p0 = 4u * u; p1 = p0; }
void unit_load(uint wh, uint rb, uint u, out vec4 v0, out vec4 v1) {
    v0 = bf16x4(wv(wh, (rb >> 3) + u));
    v1 = vec4(0.0);
}
vec4 deq4(uint wh, uint rb, uint e) { return bf16x4(wv(wh, (rb >> 3) + (e >> 2))); }
