/* engine/cpu/kernels-impl.h: internal interface between kernels.c (dispatch) and
 * the per-ISA files kernels-ref.c, kernels-avx2.c, kernels-avx512.c.
 *
 * Each ISA file fills a table of matmul functions, one per weight type; a NULL
 * entry means "use the next lower ISA" (kernels.c resolves that once, so the
 * active table never has holes above the reference). Every function computes
 * y[t*ldy + r] for r in [r0, r1), t in [0, n_tok), exactly like
 * kernels_matmul, and is tested against kern_ref_* (tests/engine/cpu/test-kernels.c).
 *
 * Threading: all functions are reentrant.
 */
#ifndef STRATA_KERNELS_IMPL_H
#define STRATA_KERNELS_IMPL_H

#include <string.h>

#include "engine/cpu/kernels.h"

typedef void (*kern_matmul_fn)(const struct kern_mat *w, const void *xq, size_t xq_stride,
                               int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1);
/* f32 row -> Q8_0 blocks, bit-exact with kern_quantize_q8_0 for finite x. */
typedef void (*kern_quant_fn)(const float *x, void *dst, int64_t n);

struct kern_table {
    kern_matmul_fn matmul[QUANT_TYPE_COUNT]; /* NULL: fall back to the lower ISA */
    /* Packed layout (kernels-pack.c); NULL: the lower ISA's. NULL in the
     * active table: this ISA has no packed kernel (kernels_pack_wanted says
     * 0) and a packed matrix goes through kern_ref_matmul_packed. */
    kern_matmul_fn matmul_packed[QUANT_TYPE_COUNT];
    kern_quant_fn quantize_q8_0; /* NULL: the lower ISA's (the reference) */
    kern_quant_fn quantize_q8_K; /* NULL: the lower ISA's (the reference) */
};

/* The decode kernels' software prefetch: every weight line `dist` bytes
 * ahead of the one being decoded, with `hint`. kernels.c sets it once in
 * kernels_init from the CPU (kern_prefetch_default); read-only afterwards,
 * except through kern_prefetch_set before a benchmark's kernels run.
 * Prefetches never change a result, only when bytes arrive. */
enum kern_pf_hint { KERN_PF_OFF = 0, KERN_PF_NTA = 1, KERN_PF_T0 = 2, KERN_PF_T1 = 3 };
struct kern_prefetch {
    int hint; /* enum kern_pf_hint */
    int dist; /* bytes ahead */
};
extern struct kern_prefetch kern_pf;
void kern_prefetch_set(struct kern_prefetch pf);
const char *kern_prefetch_name(int hint);

/* kernels.c: the table kernels_matmul uses now. */
const struct kern_table *kern_table_active(void);

/* kernels-pack.c: the packed layout's reference (rows unpacked, then
 * kern_ref_dot); shape checked by the caller. */
void kern_ref_matmul_packed(const struct kern_mat *w, const void *xq, size_t xq_stride,
                            int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1);

/* kernels-ref.c */
void kern_ref_fill(struct kern_table *t);
/* Scalar dot of one weight row (type wt, n elements) with one activation row
 * in kernels_act_type(wt). Returns 0.0f for types without a reference dot. */
float kern_ref_dot(enum quant_type wt, int64_t n, const void *w, const void *act);
int kern_ref_has_dot(enum quant_type wt);
/* Activation quantizers (ggml's *_ref: bit-exact with the fixtures). */
void kern_quantize_q8_0(const float *x, void *dst, int64_t n);
void kern_quantize_q8_1(const float *x, void *dst, int64_t n);
void kern_quantize_q8_K(const float *x, void *dst, int64_t n);

/* kernels-avx2.c / kernels-avx512.c / kernels-avx512-vnni.c (each compiled
 * with its own -m flags; call only on CPUs that have them). */
void kern_avx2_fill(struct kern_table *t);
void kern_avx2vnni_fill(struct kern_table *t);
void kern_avx512_fill(struct kern_table *t);
void kern_avx512vnni_fill(struct kern_table *t);

/* Scalar f16/bf16 conversions (round to nearest even), shared by the ISAs. */
static inline float kern_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {
        /* subnormal: renormalise */
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while (!(man & 0x400));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t kern_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf / nan */
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 | ((ax >> 13) & 0x3ff) : 0));
    if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow */
        return (uint16_t)(sign | 0x7c00);
    if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or 0 */
        if (ax < 0x33000000u)
            return (uint16_t)sign;
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t half = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t r = ax + 0xfff + ((ax >> 13) & 1); /* round to nearest even */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

static inline float kern_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t kern_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* nan: keep it quiet */
        return (uint16_t)((x >> 16) | 64);
    return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

/* E8M0 exponent to float, halved (MXFP4 values are stored doubled). */
static inline float kern_e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

extern const int8_t kern_kvalues_iq4nl[16];
extern const int8_t kern_kvalues_mxfp4[16];

#endif
