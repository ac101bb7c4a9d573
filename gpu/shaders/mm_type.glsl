// gpu/shaders/mm_type.glsl: the type file named by the TYPE_<type> define
// (glslc -DTYPE_q4_0 ...), for the shaders compiled once per type from one
// source (mm_coop.comp, mm_dot.comp).
#if defined(TYPE_f32)
#include "mm_type_f32.glsl"
#elif defined(TYPE_f16)
#include "mm_type_f16.glsl"
#elif defined(TYPE_bf16)
#include "mm_type_bf16.glsl"
#elif defined(TYPE_q8_0)
#include "mm_type_q8_0.glsl"
#elif defined(TYPE_q4_0)
#include "mm_type_q4_0.glsl"
#elif defined(TYPE_q4_k)
#include "mm_type_q4_k.glsl"
#elif defined(TYPE_q5_k)
#include "mm_type_q5_k.glsl"
#elif defined(TYPE_q6_k)
#include "mm_type_q6_k.glsl"
#elif defined(TYPE_mxfp4)
#include "mm_type_mxfp4.glsl"
#elif defined(TYPE_iq4_nl)
#include "mm_type_iq4_nl.glsl"
#else
#error "mm_type.glsl: no TYPE_<type> defined"
#endif

// USPAN: the elements that whole units of the type fill (unit_pos): a K
// range that starts and ends on multiples of it is covered by consecutive
// units (UNIT elements each, NV vec4s a unit).
#if defined(TYPE_q6_k)
const uint USPAN = 128u; // 16 units: elements 128h .. 128h + 127
#elif defined(TYPE_q4_k) || defined(TYPE_q5_k)
const uint USPAN = 64u; // 8 units: sub-blocks 2h and 2h + 1
#elif defined(TYPE_f32) || defined(TYPE_f16) || defined(TYPE_bf16)
const uint USPAN = 4u; // one unit
#else
const uint USPAN = 32u; // 4 units: one block of 32
#endif
