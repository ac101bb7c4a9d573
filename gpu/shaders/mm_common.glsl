// gpu/shaders/mm_common.glsl: bindings, push constants and byte readers shared
// by the matrix kernels (mv_*.comp: matvec for decode, mm_*.comp: tiled
// matmul for prefill). Included after a type file (mm_type_*.glsl) has been
// included; see gpu/vk-mm.h for the API and gpu/vk-mm-impl.h for the C
// mirror of the push-constant block.
//
// Weights are GGUF rows (layout ROWS), read as 32-bit words: every device
// has 32-bit storage, while 8/16-bit storage is optional (lavapipe has it,
// some mobile drivers do not), and blocks of 18, 34, 17 or 210 bytes are not
// word aligned anyway, so each type file picks its bytes out of words with
// rd8/rd16/rd32 (first argument: which binding, see wword). One lane's loads of consecutive units are consecutive words,
// so a subgroup's loads of one row are coalesced (the H200's 32-lane warps
// read 128-byte lines).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : require

layout(std430, binding = 0) readonly buffer BufW { uint w[]; };
layout(std430, binding = 1) readonly buffer BufX { vec4 x4[]; };
layout(std430, binding = 2) writeonly buffer BufY { float y[]; };
layout(std430, binding = 3) readonly buffer BufS { int sel[]; };
// The up matrix of the fused gate + up + SwiGLU forms (GLU = 1); another
// matrix of the same type in its own buffer. Every reader takes `which`
// (0: binding 0, 1: binding 4), always a literal at the call, so after
// inlining each load reads one binding and the plain kernels never touch 4.
layout(std430, binding = 4) readonly buffer BufU { uint wu[]; };
uint wword(uint which, uint i) { return which == 0u ? w[i] : wu[i]; }

// Offsets in bytes: struct vkmm_push in gpu/vk-mm-impl.h (84 bytes, pinned).
layout(push_constant) uniform Push {
    uint n_rows;       //  0 rows this dispatch computes
    uint n_cols;       //  4 elements per row
    uint row_bytes;    //  8 bytes between rows
    uint n_tok;        // 12 tokens (1 for the expert-indexed matvec)
    uint w_base;       // 16 byte offset of the first row in binding 0
    uint y_stride;     // 20 floats between rows of y
    uint y_col0;       // 24 column of y the first row writes
    uint x_stride;     // 28 floats between rows of x (a multiple of 4)
    uint k;            // 32 picks per token (expert-indexed)
    uint x_per_pick;   // 36 1: x has one row per pick
    uint e0;           // 40 experts [e0, e1) lie in binding 0 ...
    uint e1;           // 44
    uint expert_bytes; // 48 ... each this many bytes, from w_base
    uint n_pairs;      // 52 expert-indexed: pairs (n_tok * k)
    uint pair0;        // 56 first pair of the dispatch (gl_WorkGroupID.z + pair0)
    uint w_base2;      // 60 byte offset of the first row of the up matrix in binding 4
    uint tok0;         // 64 matvec: first token (row of x and y) of the dispatch
    float tail_eps;    // 68 matvec TAIL = 1: the RMSNorm's epsilon
    uint split1;       // 72 mv_dot SPLIT = 1: rows [split1, split2) are the second matrix's ...
    uint split2;       // 76 ... rows from split2 the third's (see mv_dot_body.glsl)
    uint w_base3;      // 80 SPLIT: byte offset of the third matrix's first row in binding 0
} p;

uint rd8(uint wh, uint b) { return bitfieldExtract(wword(wh, b >> 2), int((b & 3u) * 8u), 8); }
int rd8s(uint wh, uint b) { return bitfieldExtract(int(wword(wh, b >> 2)), int((b & 3u) * 8u), 8); }
uint rd16(uint wh, uint b) { return bitfieldExtract(wword(wh, b >> 2), int((b & 2u) * 8u), 16); } // b even
float rdh(uint wh, uint b) { return unpackHalf2x16(rd16(wh, b)).x; }
// Four bytes at any byte offset; the second word is read only when the four
// bytes straddle it (so never past the end of the binding).
uint rd32(uint wh, uint b) {
    uint i = b >> 2, s = (b & 3u) * 8u;
    uint lo = wword(wh, i);
    if (s == 0u)
        return lo;
    return (lo >> s) | (wword(wh, i + 1u) << (32u - s));
}
// Four bytes at an even offset as two 16-bit halves: always two loads and no
// branch. Q4_0 / Q8_0 / IQ4_NL blocks (18 and 34 bytes) alternate between
// word-aligned and not from one lane to the next, so rd32's branch would
// split every subgroup and issue both paths.
uint rd32e(uint wh, uint b) { return rd16(wh, b) | (rd16(wh, b + 2u) << 16); }
float silu(float g) { return g / (1.0 + exp(-g)); }
vec4 bytes4(uint q) { return vec4(q & 0xffu, (q >> 8) & 0xffu, (q >> 16) & 0xffu, q >> 24); }
vec4 nib_lo(uint q) { return bytes4(q & 0x0f0f0f0fu); }
vec4 nib_hi(uint q) { return bytes4((q >> 4) & 0x0f0f0f0fu); }
vec4 sbytes4(uint q) {
    int v = int(q);
    return vec4(bitfieldExtract(v, 0, 8), bitfieldExtract(v, 8, 8), bitfieldExtract(v, 16, 8),
                bitfieldExtract(v, 24, 8));
}
