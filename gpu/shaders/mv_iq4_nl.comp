// gpu/shaders/mv_iq4_nl.comp: the matvec (decode, expert-indexed) over IQ4_NL rows (mv_body.glsl / mm_body.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "mm_common.glsl"
#include "mm_type_iq4_nl.glsl"
#include "mv_body.glsl"
