// The one q8 block rule every shader that quantizes activations uses
// (op_rmsnorm.comp's q8 copy and Q8 = 3 pass, mv_dot_body.glsl's XF lanes,
// mm_dot_body.glsl's x tiles), so a block quantized in any of them is
// bit-equal to the same block quantized in another and to the host's
// reference (tests/gpu/test-vk-mm.c): 32 values, scale d = max|x| / 127,
// level = round(x / d) (0 when d is 0), the levels packed 4 a word from the
// low byte, and their sum (the type's min term uses d * sum).

// max |component| of v, folded into m
float q8_amax(float m, vec4 v) {
    const vec4 a = abs(v);
    return max(m, max(max(a.x, a.y), max(a.z, a.w)));
}

// 1 / d, or 0 for an all-zero block
float q8_inv(float d) { return d > 0.0 ? 1.0 / d : 0.0; }

// v's four levels under inverse scale id as one word; their sum added to s
uint q8_pack(vec4 v, float id, inout int s) {
    const ivec4 l = ivec4(round(v * id));
    s += l.x + l.y + l.z + l.w;
    return uint(l.x & 255) | (uint(l.y & 255) << 8) | (uint(l.z & 255) << 16) |
           (uint(l.w & 255) << 24);
}

// a whole block held by one lane: elements 0-15 in qa, 16-31 in qb
void q8_block(vec4 v[8], out uvec4 qa, out uvec4 qb, out float d, out int sum) {
    float amax = 0.0;
    [[unroll]] for (uint k = 0u; k < 8u; k++)
        amax = q8_amax(amax, v[k]);
    d = amax / 127.0;
    const float id = q8_inv(d);
    sum = 0;
    qa.x = q8_pack(v[0], id, sum);
    qa.y = q8_pack(v[1], id, sum);
    qa.z = q8_pack(v[2], id, sum);
    qa.w = q8_pack(v[3], id, sum);
    qb.x = q8_pack(v[4], id, sum);
    qb.y = q8_pack(v[5], id, sum);
    qb.z = q8_pack(v[6], id, sum);
    qb.w = q8_pack(v[7], id, sum);
}
