// gpu/shaders/mm_mxfp4.comp: the tiled matmul (prefill) over MXFP4 rows (mv_body.glsl / mm_body.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "mm_common.glsl"
#include "mm_type_mxfp4.glsl"
#include "mm_body.glsl"
