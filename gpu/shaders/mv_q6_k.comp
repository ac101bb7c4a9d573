// gpu/shaders/mv_q6_k.comp: the matvec (decode, expert-indexed) over Q6_K rows (mv_body.glsl / mm_body.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "mm_common.glsl"
#include "mm_type_q6_k.glsl"
#include "mv_body.glsl"
