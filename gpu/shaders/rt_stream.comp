// gpu/shaders/rt_stream.comp: the device's plain read bandwidth through
// Vulkan, the ceiling bench/mv-bench puts beside the matvecs: each workgroup
// reads its own span of per_wg uvec4 of binding 0 (U 16-byte loads a lane
// issued before any is used, consecutive lanes on consecutive uvec4) and
// each lane writes the xor of what it read to binding 1, so nothing is
// dropped by the compiler. Push constants (8 bytes): uint n @0 (uvec4s in
// the buffer), uint per_wg @4. Specialization constants: 0 the workgroup
// size, 1 U.
#version 450
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint U = 4u;

layout(std430, binding = 0) readonly buffer A { uvec4 a[]; };
layout(std430, binding = 1) writeonly buffer B { uint b[]; };

layout(push_constant) uniform P {
    uint n;
    uint per_wg;
} p;

void main() {
    const uint lanes = gl_WorkGroupSize.x;
    const uint base = gl_WorkGroupID.x * p.per_wg;
    const uint end = min(base + p.per_wg, p.n);
    uvec4 acc = uvec4(0u);
    for (uint i = base + gl_LocalInvocationID.x; i < end; i += lanes * U) {
        uvec4 v[U];
        [[unroll]] for (uint u = 0u; u < U; u++) {
            const uint j = i + u * lanes;
            v[u] = j < end ? a[j] : uvec4(0u);
        }
        [[unroll]] for (uint u = 0u; u < U; u++)
            acc ^= v[u];
    }
    b[gl_GlobalInvocationID.x] = acc.x ^ acc.y ^ acc.z ^ acc.w;
}
