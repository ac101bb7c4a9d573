/* gpu/shaders/op_rope.glsl: RoPE's angle, shared by op_rope.comp and
 * op_rope_kv.comp. The angles follow engine/cpu/ops.c (ggml's rope_f32)
 * step by step so the GPU tracks the CPU: theta_i is the running product
 * pos * s * s ... (i times, s = base^(-2/n_rot) computed on the host with
 * the CPU's powf), in f32, one product after the other; then the divisor
 * freq_factors[i], YaRN's ramp mix and the magnitude scale (host-computed,
 * as ops.c's mscale). sin/cos are computed here (sincos_rn), not by the
 * builtins, whose error Vulkan leaves loose. */

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

/* (cos, sin) of pair i at position pos, times mscale. ff: freq_factors[i]
 * (used when has_ff). */
vec2 rope_cs(int pos, uint i, float theta_scale, bool has_ff, float ff, float freq_scale,
             float ext_factor, float corr0, float corr1, float mscale) {
    precise float theta = float(pos);
    for (uint j = 0u; j < i; j++)
        theta = theta * theta_scale;
    precise float extrap = has_ff ? div_rn(theta, ff) : theta;
    precise float interp = freq_scale * extrap;
    precise float th = interp;
    if (ext_factor != 0.0) {
        const float mix = yarn_ramp(corr0, corr1, i) * ext_factor;
        th = interp * (1.0 - mix) + extrap * mix;
    }
    return sincos_rn(th) * mscale;
}
