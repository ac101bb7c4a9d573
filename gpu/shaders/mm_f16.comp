// gpu/shaders/mm_f16.comp: the tiled matmul (prefill) over F16 rows (mv_body.glsl / mm_body.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "mm_common.glsl"
#include "mm_type_f16.glsl"
#include "mm_body.glsl"
