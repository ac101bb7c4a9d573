#version 450
/* gpu/shaders/op_rope.comp: in-place RoPE of x (n_tok, n_head * head_dim),
 * one workgroup a token (vkops_rope in gpu/vk-ops.c).
 *
 * The angles follow engine/cpu/ops.c (ggml's rope_f32) step by step so the
 * GPU tracks the CPU: theta_i is the running product pos * s * s ... (i
 * times, s = base^(-2/n_rot) computed on the host with the CPU's powf), in
 * f32, one product after the other; then the divisor freq_factors[i], YaRN's
 * ramp mix and the magnitude scale (host-computed, as ops.c's mscale).
 * sin/cos take the angle reduced to [-pi, pi] first (two-part 2 pi with
 * fma): Vulkan bounds the builtins' error only there (2^-11 absolute), and a
 * position of 100k radians would otherwise lose all its digits on drivers
 * that do no range reduction of their own.
 *
 * Pairs: mode 0 rotates (2i, 2i + 1), mode 2 (neox) (i, i + n_rot / 2);
 * dims from n_rot on are left alone. */
#include "op_common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Pos { int pos[]; };
layout(std430, binding = 2) readonly buffer FF { float ff[]; };

layout(push_constant) uniform P {
    uint n_head;
    uint head_dim;
    uint n_rot;
    uint mode;
    float theta_scale; /* powf(freq_base, -2 / n_rot) */
    float freq_scale;
    float ext_factor;
    float mscale; /* attn_factor, times 1 + 0.1 log(1 / freq_scale) under YaRN */
    float corr0, corr1; /* YaRN correction dims (ops_rope_yarn_corr_dims) */
    uint has_ff;
} p;

shared float s_cos[512], s_sin[512];

float yarn_ramp(float low, float high, uint i) {
    const float y = (float(i) - low) / max(0.001, high - low);
    return 1.0 - min(1.0, max(0.0, y));
}

void main() {
    const uint t = ops_group_id(), lid = gl_LocalInvocationID.x;
    const uint half_rot = p.n_rot / 2u;
    for (uint i = lid; i < half_rot; i += 256u) {
        precise float theta = float(pos[t]);
        for (uint j = 0u; j < i; j++)
            theta = theta * p.theta_scale;
        precise float extrap = p.has_ff != 0u ? theta / ff[i] : theta;
        precise float interp = p.freq_scale * extrap;
        precise float th = interp;
        if (p.ext_factor != 0.0) {
            const float mix = yarn_ramp(p.corr0, p.corr1, i) * p.ext_factor;
            th = interp * (1.0 - mix) + extrap * mix;
        }
        /* 2 pi = P1 + P2 (P1 the f32 nearest 2 pi); fma keeps k * P1 exact */
        const float P1 = 6.28318548202514648, P2 = -1.7484556e-7;
        const float k = round(th * 0.159154943091895336);
        precise float r = fma(-k, P1, th);
        r = fma(-k, P2, r);
        s_cos[i] = cos(r) * p.mscale;
        s_sin[i] = sin(r) * p.mscale;
    }
    barrier();
    const uint base = t * p.n_head * p.head_dim;
    for (uint j = lid; j < p.n_head * half_rot; j += 256u) {
        const uint h = j / half_rot, i = j % half_rot;
        const uint i0 = base + h * p.head_dim + (p.mode == 2u ? i : 2u * i);
        const uint i1 = i0 + (p.mode == 2u ? half_rot : 1u);
        const float a = x[i0], b = x[i1];
        x[i0] = a * s_cos[i] - b * s_sin[i];
        x[i1] = a * s_sin[i] + b * s_cos[i];
    }
}
