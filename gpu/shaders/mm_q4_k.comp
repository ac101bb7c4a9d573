// gpu/shaders/mm_q4_k.comp: the tiled matmul (prefill) over Q4_K rows (mv_body.glsl / mm_body.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "mm_common.glsl"
#include "mm_type_q4_k.glsl"
#include "mm_body.glsl"
