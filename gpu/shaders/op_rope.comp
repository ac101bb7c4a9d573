#version 450
/* gpu/shaders/op_rope.comp: in-place RoPE of x (n_tok, n_head * head_dim),
 * one invocation a rotated pair (vkops_rope in gpu/vk-ops.c).
 *
 * The angles follow engine/cpu/ops.c (ggml's rope_f32) step by step so the
 * GPU tracks the CPU: theta_i is the running product pos * s * s ... (i
 * times, s = base^(-2/n_rot) computed on the host with the CPU's powf), in
 * f32, one product after the other; then the divisor freq_factors[i], YaRN's
 * ramp mix and the magnitude scale (host-computed, as ops.c's mscale).
 * sin/cos are computed here (sincos_rn), not by the builtins, whose error
 * Vulkan leaves loose.
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
    uint n_tok;
} p;

/* a / b to nearest: Vulkan lets `/` be 2.5 ulp off, which at a position of
 * 30k radians is a visible angle. One correction step with the exact
 * residual a - q b (Dekker: q and b split into 12-bit halves, so the four
 * partial products are exact; fma is not trusted: lavapipe computed it
 * unfused) gives the IEEE quotient the CPU gets but in rare halfway cases. */
void split12(float v, out float hi, out float lo) {
    precise float c = 4097.0 * v;
    precise float h = c - (c - v);
    hi = h;
    lo = v - h;
}

float div_rn(float a, float b) {
    precise float q = a / b;
    float qh, ql, bh, bl;
    split12(q, qh, ql);
    split12(b, bh, bl);
    precise float r = a - qh * bh;
    r = r - qh * bl;
    r = r - ql * bh;
    r = r - ql * bl;
    precise float q2 = q + r / b;
    return q2;
}

/* (cos x, sin x) to ~1 ulp for |x| < 2^24: x - n pi/2 by Cody-Waite, pi/2 =
 * A + B + C with A and B of 12 significant bits and n split into 12-bit
 * halves, so every product but n * C is exact in plain f32 multiplies (no
 * reliance on fma being fused); then polynomials on [-pi/4, pi/4] (Cephes'
 * sinf/cosf coefficients) and the quadrant's signs. The builtins are not
 * used: Vulkan bounds them only to 2^-11 absolute on [-pi, pi], and
 * lavapipe's were 2e-5 off at 1000 radians, where the CPU's cosf is not. */
vec2 sincos_rn(float x) {
    const float A = 1.5703125, B = 4.837512969970703125e-4, C = 7.549790126404332e-8;
    const float n = round(x * 0.636619772367581343);
    const float nh = floor(n * (1.0 / 4096.0)) * 4096.0, nl = n - nh;
    precise float y = x - nh * A;
    y = y - nl * A;
    y = y - nh * B;
    y = y - nl * B;
    y = y - n * C;
    precise float z = y * y;
    precise float s = y + y * z * (-1.6666654611e-1 + z * (8.3321608736e-3 + z * -1.9515295891e-4));
    precise float c =
        1.0 - 0.5 * z + z * z * (4.166664568298827e-2 + z * (-1.388731625493765e-3 + z * 2.443315711809948e-5));
    const int q = int(n) & 3;
    if (q == 0)
        return vec2(c, s);
    if (q == 1)
        return vec2(-s, c);
    if (q == 2)
        return vec2(-c, -s);
    return vec2(s, -c);
}

float yarn_ramp(float low, float high, uint i) {
    const float y = div_rn(float(i) - low, max(0.001, high - low));
    return 1.0 - min(1.0, max(0.0, y));
}

void main() {
    /* one invocation a (token, head, pair): each computes its own angle
     * (the product chain is at most n_rot / 2 multiplies of ALU work) and
     * does one load of each value, so nothing waits on a chain of loads:
     * the workgroup-a-token version looped 8 times over dependent loads and
     * took 6.4 us a token on the H200 (lead's llama-2-7b decode profile) */
    const uint half_rot = p.n_rot / 2u;
    const uint g = ops_group_id() * 256u + gl_LocalInvocationID.x;
    if (g >= p.n_tok * p.n_head * half_rot)
        return;
    const uint i = g % half_rot, h = (g / half_rot) % p.n_head, t = g / (half_rot * p.n_head);
    precise float theta = float(pos[t]);
    for (uint j = 0u; j < i; j++)
        theta = theta * p.theta_scale;
    precise float extrap = p.has_ff != 0u ? div_rn(theta, ff[i]) : theta;
    precise float interp = p.freq_scale * extrap;
    precise float th = interp;
    if (p.ext_factor != 0.0) {
        const float mix = yarn_ramp(p.corr0, p.corr1, i) * p.ext_factor;
        th = interp * (1.0 - mix) + extrap * mix;
    }
    const vec2 cs = sincos_rn(th) * p.mscale;
    const uint i0 = (t * p.n_head + h) * p.head_dim + (p.mode == 2u ? i : 2u * i);
    const uint i1 = i0 + (p.mode == 2u ? half_rot : 1u);
    const float a = x[i0], b = x[i1];
    x[i0] = a * cs.x - b * cs.y;
    x[i1] = a * cs.y + b * cs.x;
}
