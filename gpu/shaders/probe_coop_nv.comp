// gpu/shaders/probe_coop_nv.comp: compiled by meson at configure time only:
// whether this glslc has GL_NV_cooperative_matrix (Debian 12's glslang 11.13
// has it; GL_KHR_cooperative_matrix came with glslang 13).
#version 450
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer B { float y[]; };
shared float16_t sa[256];
shared float sc[256];
void main() {
    fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a;
    coopMatLoadNV(a, sa, 0, 16, false);
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> c = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
    c = coopMatMulAddNV(a, a, c);
    coopMatStoreNV(c, sc, 0, 16, false);
    y[gl_LocalInvocationID.x] = sc[gl_LocalInvocationID.x];
}
