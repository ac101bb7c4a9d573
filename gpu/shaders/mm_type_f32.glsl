// gpu/shaders/mm_type_f32.glsl: F32 rows (4 bytes an element). A unit is 4
// elements, one 16-byte load (rows start 16-byte aligned: n_cols % 4 == 0,
// vkmm_supports).
const uint UNIT = 4;  // elements per unit (mv)
const uint NV = 1;    // vec4s per unit
layout(std430, binding = 0) readonly buffer BufW4 { uvec4 w4[]; };
layout(std430, binding = 4) readonly buffer BufU4 { uvec4 wu4[]; };
uvec4 wv(uint wh, uint i) { return wh == 0u ? w4[i] : wu4[i]; }
void unit_pos(uint u, out uint p0, out uint p1) { p0 = 4u * u; p1 = p0; }
void unit_load(uint wh, uint rb, uint u, out vec4 v0, out vec4 v1) {
    v0 = uintBitsToFloat(wv(wh, (rb >> 4) + u));
    v1 = vec4(0.0);
}
vec4 deq4(uint wh, uint rb, uint e) { return uintBitsToFloat(wv(wh, (rb >> 4) + (e >> 2))); }
