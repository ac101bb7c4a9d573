// gpu/shaders/mm_coop.comp: the tiled matmul (prefill) on cooperative
// matrices (f16 x f16 + f32), compiled once per type (-DTYPE_<type>) when
// glslc has GL_NV_cooperative_matrix (gpu/shaders/meson.build probes it).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "mm_common.glsl"
#include "mm_type.glsl"
#include "mm_coop_body.glsl"
