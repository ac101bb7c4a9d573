// gpu/shaders/mm_type_f32.glsl: F32 rows (4 bytes an element). A unit is 4
// elements, one 16-byte load (rows start 16-byte aligned: n_cols % 4 == 0,
// vkmm_supports).
const uint UNIT = 4;  // elements per unit (mv)
const uint NV = 1;    // vec4s per unit
layout(std430, binding = 0) readonly buffer BufW4 { uvec4 w4[]; };
void unit_pos(uint u, out uint p0, out uint p1) { p0 = 4u * u; p1 = p0; }
void unit_load(uint rb, uint u, out vec4 v0, out vec4 v1) {
    v0 = uintBitsToFloat(w4[(rb >> 4) + u]);
    v1 = vec4(0.0);
}
vec4 deq4(uint rb, uint e) { return uintBitsToFloat(w4[(rb >> 4) + (e >> 2)]); }
