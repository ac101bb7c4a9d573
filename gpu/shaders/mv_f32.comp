// gpu/shaders/mv_f32.comp: the matvec (decode, expert-indexed) over F32 rows (mv_body.glsl / mm_body.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "mm_common.glsl"
#include "mm_type_f32.glsl"
#include "mv_body.glsl"
