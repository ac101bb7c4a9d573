// gpu/shaders/rt_axpb.comp: y[i] = a * x[i] + b for i < n (the runtime's
// test kernel, tests/gpu/test-vk-runtime.c). Push constants (16 bytes,
// pinned in the test): uint n @0, float a @4, float b @8, uint pad @12.
// Specialization constant 0: the workgroup size (64 by default).
#version 450

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };

layout(push_constant) uniform P {
    uint n;
    float a;
    float b;
    uint pad;
} pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < pc.n)
        y[i] = pc.a * x[i] + pc.b;
}
