// gpu/shaders/mv_q4_0.comp: the matvec (decode, expert-indexed) over Q4_0 rows (mv_body.glsl / mm_body.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "mm_common.glsl"
#include "mm_type_q4_0.glsl"
#include "mv_body.glsl"
