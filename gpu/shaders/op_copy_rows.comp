#version 450
/* gpu/shaders/op_copy_rows.comp: dst row r = src row ids[r] (vkops_copy_rows),
 * rows of n_cols f32; workgroups over (column tile, row). */
#include "op_common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer S { float src[]; };
layout(std430, binding = 1) readonly buffer I { int ids[]; };
layout(std430, binding = 2) writeonly buffer D { float dst[]; };

layout(push_constant) uniform P {
    uint n_cols;
    uint n;       /* rows to copy */
    uint n_tiles; /* column tiles of 256 a row */
} p;

void main() {
    const uint g = ops_group_id();
    const uint r = g / p.n_tiles, col = (g % p.n_tiles) * 256u + gl_LocalInvocationID.x;
    if (r >= p.n || col >= p.n_cols)
        return;
    /* an id outside src (its bound length) gives a zero row, never a stray read */
    const int id = ids[r];
    const bool ok = id >= 0 && (uint(id) + 1u) * p.n_cols <= uint(src.length());
    dst[r * p.n_cols + col] = ok ? src[uint(id) * p.n_cols + col] : 0.0;
}
