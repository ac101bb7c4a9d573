/* engine/quant/quant.h: tensor element types (ggml's ids), block layouts, and the
 * scalar reference (de)quantizers and dot products every faster kernel is
 * tested against.
 *
 *   size_t rb = quant_row_size(QUANT_Q4_0, 4096);      // 2304 bytes
 *   quant_quantize_row(QUANT_Q4_0, x, blocks, 4096);   // ggml's *_ref quantizer
 *   quant_dequantize_row(QUANT_Q4_0, blocks, y, 4096); // bit-exact with ggml
 *
 * Numbers are ggml's `enum ggml_type` values as they appear in GGUF files
 * (removed ids 4, 5, 31-33, 36-38 stay unused). Block structs are pinned with
 * _Static_assert to ggml's byte layouts (ggml-common.h).
 *
 * Threading: every function is pure (no shared state); call from any thread.
 */
#ifndef STRATA_QUANT_H
#define STRATA_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum quant_type {
    QUANT_F32 = 0,
    QUANT_F16 = 1,
    QUANT_Q4_0 = 2,
    QUANT_Q4_1 = 3,
    QUANT_Q5_0 = 6,
    QUANT_Q5_1 = 7,
    QUANT_Q8_0 = 8,
    QUANT_Q8_1 = 9,
    QUANT_Q2_K = 10,
    QUANT_Q3_K = 11,
    QUANT_Q4_K = 12,
    QUANT_Q5_K = 13,
    QUANT_Q6_K = 14,
    QUANT_Q8_K = 15,
    QUANT_IQ2_XXS = 16,
    QUANT_IQ2_XS = 17,
    QUANT_IQ3_XXS = 18,
    QUANT_IQ1_S = 19,
    QUANT_IQ4_NL = 20,
    QUANT_IQ3_S = 21,
    QUANT_IQ2_S = 22,
    QUANT_IQ4_XS = 23,
    QUANT_I8 = 24,
    QUANT_I16 = 25,
    QUANT_I32 = 26,
    QUANT_I64 = 27,
    QUANT_F64 = 28,
    QUANT_IQ1_M = 29,
    QUANT_BF16 = 30,
    QUANT_TQ1_0 = 34,
    QUANT_TQ2_0 = 35,
    QUANT_MXFP4 = 39,
    QUANT_TYPE_COUNT = 40,
};

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K 256
#define QK4_NL 32
#define QK_MXFP4 32
#define K_SCALE_SIZE 12

typedef uint16_t quant_f16; /* IEEE binary16 bits */

typedef struct {
    quant_f16 d;
    uint8_t qs[QK4_0 / 2];
} block_q4_0;
typedef struct {
    quant_f16 d, m;
    uint8_t qs[QK4_1 / 2];
} block_q4_1;
typedef struct {
    quant_f16 d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
} block_q5_0;
typedef struct {
    quant_f16 d, m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
} block_q5_1;
typedef struct {
    quant_f16 d;
    int8_t qs[QK8_0];
} block_q8_0;
typedef struct {
    quant_f16 d, s;
    int8_t qs[QK8_1];
} block_q8_1; /* s = d * sum(qs) */
typedef struct {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    quant_f16 d, dmin;
} block_q2_K;
typedef struct {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    quant_f16 d;
} block_q3_K;
typedef struct {
    quant_f16 d, dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
} block_q4_K;
typedef struct {
    quant_f16 d, dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;
typedef struct {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    quant_f16 d;
} block_q6_K;
typedef struct {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
} block_q8_K;
typedef struct {
    quant_f16 d;
    uint8_t qs[QK4_NL / 2];
} block_iq4_nl;
typedef struct {
    quant_f16 d;
    uint16_t scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
} block_iq4_xs;
typedef struct {
    uint8_t e;
    uint8_t qs[QK_MXFP4 / 2];
} block_mxfp4; /* e: E8M0 shared exponent */

_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 layout");
_Static_assert(sizeof(block_q4_1) == 20, "block_q4_1 layout");
_Static_assert(sizeof(block_q5_0) == 22, "block_q5_0 layout");
_Static_assert(sizeof(block_q5_1) == 24, "block_q5_1 layout");
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 layout");
_Static_assert(sizeof(block_q8_1) == 36, "block_q8_1 layout");
_Static_assert(sizeof(block_q2_K) == 84, "block_q2_K layout");
_Static_assert(sizeof(block_q3_K) == 110, "block_q3_K layout");
_Static_assert(sizeof(block_q4_K) == 144, "block_q4_K layout");
_Static_assert(sizeof(block_q5_K) == 176, "block_q5_K layout");
_Static_assert(sizeof(block_q6_K) == 210, "block_q6_K layout");
_Static_assert(sizeof(block_q8_K) == 292, "block_q8_K layout");
_Static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl layout");
_Static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs layout");
_Static_assert(sizeof(block_mxfp4) == 17, "block_mxfp4 layout");
/* kernels-pack.c packs IQ4_NL blocks with Q4_0's code */
_Static_assert(sizeof(block_iq4_nl) == sizeof(block_q4_0) &&
                   offsetof(block_iq4_nl, qs) == offsetof(block_q4_0, qs),
               "block_iq4_nl is laid out as block_q4_0");

struct quant_traits {
    const char *name;             /* ggml's name: "q4_0", "f16", "q4_K" ... */
    int64_t block_size;           /* elements per block (1 for plain types) */
    size_t type_size;             /* bytes per block */
    bool known;                   /* a valid type id (removed ids are not) */
    bool can_dequantize;          /* quant_dequantize_row supports it */
    bool can_quantize;            /* quant_quantize_row supports it */
    enum quant_type vec_dot_type; /* activation format for dot products */
};

/* Traits of a type id; NULL for ids that are not (or no longer) ggml types. */
const struct quant_traits *quant_type_traits(uint32_t type);
const char *quant_type_name(uint32_t type); /* "?" when unknown */
int quant_type_from_name(const char *name); /* -1 when unknown; case-insensitive */
/* Bytes for n elements; 0 if n is not a multiple of the block size. */
size_t quant_row_size(enum quant_type t, int64_t n);

/* f16 / bf16 conversions (round-to-nearest-even like ggml's scalar path). */
float quant_f16_to_f32(quant_f16 h);
quant_f16 quant_f32_to_f16(float f);
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f);

/* Scalar reference dequantizer: n elements (multiple of the block size).
 * Returns 0, STRATA_E_UNSUPPORTED for types without one, or STRATA_E_INVALID
 * when n is negative or not a multiple of the block size. Bit-exact with ggml.
 * src: borrowed, quant_row_size(t, n) bytes; dst: (n) f32. */
int quant_dequantize_row(enum quant_type t, const void *src, float *dst, int64_t n);
/* Scalar reference quantizer (ggml's *_ref / imatrix-free path): bit-exact
 * with ggml_quantize_chunk(imatrix=NULL) (IQ4_NL/IQ4_XS: its ntry = 7 search;
 * Q8_0/Q8_1/Q8_K: ggml's activation quantizers, bsums and s included).
 * Returns 0, STRATA_E_UNSUPPORTED or STRATA_E_INVALID (as above). Rows are
 * independent: quantizing rows one by one or all at once gives the same bytes.
 * Non-finite inputs give defined (meaningless) blocks, never undefined
 * behaviour. src: (n) f32; dst: quant_row_size(t, n) bytes. */
int quant_quantize_row(enum quant_type t, const float *src, void *dst, int64_t n);
/* Scalar reference dot product of one weight row of type t with an activation
 * row already in quant_type_traits(t)->vec_dot_type (integer sums per block,
 * f32 across blocks; F32/F16/BF16 sum f32 products in f64). Returns NaN for
 * unsupported types or a bad n. Differs from ggml's SIMD dot only by float
 * summation order (measured <= 3.6e-6 relative on the fixtures). */
float quant_vec_dot_ref(enum quant_type t, int64_t n, const void *w, const void *act);

#endif
