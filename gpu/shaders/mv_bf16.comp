// gpu/shaders/mv_bf16.comp: the matvec (decode, expert-indexed) over BF16 rows (mv_body.glsl / mm_body.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "mm_common.glsl"
#include "mm_type_bf16.glsl"
#include "mv_body.glsl"
