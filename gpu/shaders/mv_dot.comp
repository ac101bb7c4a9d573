// gpu/shaders/mv_dot.comp: the decode matvec on 8-bit integer dot products
// over activations already quantized to q8 blocks (vkmm_matmul_q8x),
// compiled once per block type (-DTYPE_<type>: Q4_0, Q8_0, Q4_K, Q5_K, Q6_K).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_spirv_intrinsics : require
#include "mm_common.glsl"
#include "mm_type.glsl"
#include "mm_dot_types.glsl"
#include "q8_block.glsl"
#include "mv_dot_body.glsl"
