// gpu/shaders/mm_type_f16.glsl: F16 rows. A unit is 4 elements, one 8-byte
// load (rows 8-byte aligned: n_cols % 4 == 0).
const uint UNIT = 4;
const uint NV = 1;
layout(std430, binding = 0) readonly buffer BufW2 { uvec2 w2[]; };
layout(std430, binding = 4) readonly buffer BufU2 { uvec2 wu2[]; };
uvec2 wv(uint wh, uint i) { return wh == 0u ? w2[i] : wu2[i]; }
vec4 f16x4(uvec2 q) { return vec4(unpackHalf2x16(q.x), unpackHalf2x16(q.y)); }
void unit_pos(uint u, out uint p0, out uint p1) { p0 = 4u * u; p1 = p0; }
void unit_load(uint wh, uint rb, uint u, out vec4 v0, out vec4 v1) {
    v0 = f16x4(wv(wh, (rb >> 3) + u));
    v1 = vec4(0.0);
}
vec4 deq4(uint wh, uint rb, uint e) { return f16x4(wv(wh, (rb >> 3) + (e >> 2))); }
