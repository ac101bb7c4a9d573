#version 450
/* gpu/shaders/op_embed.comp: out row t = row ids[t] of an embedding matrix,
 * dequantized (vkops_embed): workgroups over (column tile, token), one
 * element an invocation. One dispatch per piece of the matrix (whole rows,
 * one binding each); a token whose id lies in another piece is skipped, and
 * the first piece's dispatch writes zeros for an id outside the matrix. */
#include "op_common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer D { uint dq_data[]; };
layout(std430, binding = 1) readonly buffer I { int ids[]; };
layout(std430, binding = 2) writeonly buffer O { float out_[]; };

#include "op_dequant.glsl"

layout(push_constant) uniform P {
    uint type;
    uint n_cols;
    uint row_bytes;
    uint n_tiles;
    uint n;            /* tokens */
    int row0, n_rows;  /* this piece's rows */
    int n_rows_all;    /* the matrix's rows */
    uint zero_outside; /* this dispatch writes the rows of bad ids */
} p;

void main() {
    const uint g = ops_group_id();
    const uint t = g / p.n_tiles, col = (g % p.n_tiles) * 256u + gl_LocalInvocationID.x;
    if (t >= p.n || col >= p.n_cols)
        return;
    const int id = ids[t];
    if (id < 0 || id >= p.n_rows_all) {
        if (p.zero_outside != 0u)
            out_[t * p.n_cols + col] = 0.0;
        return;
    }
    if (id < p.row0 || id >= p.row0 + p.n_rows)
        return;
    out_[t * p.n_cols + col] = dq_elem(p.type, uint(id - p.row0) * p.row_bytes, col);
}
