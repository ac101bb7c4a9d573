/* engine/cpu/kernels.h: dot products and matrix products of quantized weights
 * with activations, per ISA (scalar reference, AVX2+FMA, AVX2 + AVX-VNNI,
 * AVX-512, AVX-512 VNNI), chosen at run time by CPU detection.
 *
 *   struct kern_mat w = {data, QUANT_Q4_0, n_rows, n_cols, row_bytes};
 *   uint8_t xq[kernels_act_row_size(w.type, n_cols)];
 *   kernels_quantize_act(w.type, x, xq, n_cols);                 // x: (n_cols) f32
 *   kernels_matmul(&w, xq, sizeof xq, 1, y, w.n_rows, 0, w.n_rows); // y: (n_rows) f32
 *
 * Activations are converted to the weight type's vec_dot_type (quant.h) as
 * ggml does (Q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL/MXFP4, Q8_1 for Q4_1/Q5_1, Q8_K
 * for K-quants and IQ4_XS; F32/F16/BF16 weights take the activation as
 * F32/F16/BF16). Row ranges [r0, r1) let the pool (and later a NUMA split)
 * hand disjoint row blocks to workers; results for a row never depend on how
 * rows were split, so any thread count is bit-identical.
 *
 * Threading: all functions are reentrant; the ISA choice is made once
 * (kernels_init, idempotent, thread-safe) and is read-only afterwards.
 */
#ifndef STRATA_KERNELS_H
#define STRATA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/quant/quant.h"

struct kern_mat {
    const void *data;     /* borrowed: (n_rows, row_bytes) */
    enum quant_type type; /* weight type */
    int64_t n_rows;
    int64_t n_cols;   /* elements per row (multiple of the block size) */
    size_t row_bytes; /* stride between rows in bytes */
    int packed;       /* 1: data is kernels_pack's 16-row layout (Q4_K, Q6_K), else GGUF rows */
};

enum kernels_isa {
    KERNELS_ISA_REF = 0,       /* scalar reference (quant_vec_dot_ref) */
    KERNELS_ISA_AVX2 = 1,      /* AVX2 + FMA + F16C */
    KERNELS_ISA_AVX2_VNNI = 2, /* AVX2 + AVX-VNNI (vpdpbusd on ymm) */
    KERNELS_ISA_AVX512 = 3,    /* AVX-512 F/BW/VL */
    KERNELS_ISA_AVX512_VNNI = 4,
};

void kernels_init(void);                     /* detects the CPU once */
enum kernels_isa kernels_isa_detected(void); /* best the CPU supports */
enum kernels_isa kernels_isa_active(void);
/* Forces a lower ISA (clamped to what is detected; a level the CPU lacks
 * below the detected one, such as AVX2_VNNI on an AVX-512 CPU without
 * AVX-VNNI, falls to the next lower level it has: kernels_isa_active says
 * which): tests check every ISA the host runs, and operators and benchmarks
 * choose one (`--isa`). Call it
 * before model_load: the weight layout follows the ISA active at load
 * (kernels_pack_wanted). */
void kernels_isa_force(enum kernels_isa isa);
const char *kernels_isa_name(enum kernels_isa isa);
/* "ref", "avx2", "avx2-vnni", "avx512", "avx512-vnni" (kernels_isa_name's words) or
 * "auto" (the detected ISA) -> *out; returns 0, or -1 for another word. */
int kernels_isa_parse(const char *name, enum kernels_isa *out);

/* Activation format and bytes per activation row for weights of type wtype. */
enum quant_type kernels_act_type(enum quant_type wtype);
size_t kernels_act_row_size(enum quant_type wtype, int64_t n_cols);
/* Converts one f32 row to the activation format for wtype (bit-exact with
 * ggml's from_float for that format). */
void kernels_quantize_act(enum quant_type wtype, const float *x, void *xq, int64_t n_cols);

/* 1 if kernels_matmul computes weights of type wtype (every type quant.h can
 * dequantize: F32, F16, BF16, Q4_0..Q8_0, Q2_K..Q6_K, IQ4_NL, IQ4_XS, MXFP4);
 * for other types kernels_matmul leaves y untouched. */
int kernels_supports(enum quant_type wtype);

/* y[t*ldy + r] = dot(w row r, activation row t) for r in [r0, r1), t in [0, n_tok).
 * xq: (n_tok, xq_stride bytes) activations from kernels_quantize_act.
 * Weight blocks are unpacked once per tile of 4 tokens and stay in L1 across
 * tiles (chunked prefill is a matrix-matrix product; for n_tok >= 9 the
 * AVX-512 kinds Q4_0/Q8_0/IQ4_NL/MXFP4 take a register-blocked GEMM that
 * unpacks weights once per 32 tokens, see kernels-x86.inc; Q4_K/Q5_K/Q6_K
 * likewise on AVX2 for n_tok >= 8, and on AVX-512 for every n_tok >= 2, so a
 * batched decode step reads each weight once, see kernels-x86-k.inc); decode (n_tok = 1)
 * streams one row at a time (faster from DRAM, see kernels-x86.inc); on
 * AVX-512 those four kinds first pack the call's activations (per thread,
 * on the stack up to 32 KB) into the weights' 8-block register layout. A result never depends on
 * r0/r1 or on how many other tokens share the call (same bits), so any row split across threads and
 * any batch size agree. A malformed shape (unknown type, n_cols not a multiple of the block size,
 * row_bytes too small, [r0, r1) outside [0, n_rows)) leaves y untouched; check kernels_supports and
 * the shape when loading a model. */
void kernels_matmul(const struct kern_mat *w, const void *xq, size_t xq_stride, int64_t n_tok,
                    float *y, int64_t ldy, int64_t r0, int64_t r1);
/* ---- 16-row packed layout (kernels-pack.c) ----------------------------------
 * Q4_K, Q6_K and Q4_0 matrices with n_rows a multiple of KERNELS_PACK_ROWS
 * can be reordered once at load into 16-row groups (same size, layout in
 * kernels-pack.c), which the packed kernels compute faster in batches:
 * Q4_K / Q6_K on AVX-512 (~1.7x, kernels-x86-pk.inc), Q4_0 / Q4_K on AVX2
 * (~2-3x, kernels-avx2-pk.inc; Q8_0, IQ4_NL, MXFP4 and Q6_K there too). A packed kern_mat has
 * packed = 1 and the same type, shape and row_bytes as the GGUF one; kernels_matmul takes it like
 * any other (any row range; results never depend on the row split or on n_tok, as for GGUF rows,
 * but differ from the GGUF layout's in the last bits: the sums are added in another order). Which
 * types an ISA packs: kernels_pack_wanted. if (kernels_pack_wanted(w.type, w.n_rows, w.n_cols)) {
 *       void *p = malloc(w.n_rows * w.row_bytes);
 *       kernels_pack(&w, p, 0, w.n_rows / KERNELS_PACK_ROWS);
 *       w.data = p; w.packed = 1;
 *   } */
#define KERNELS_PACK_ROWS 16
/* 1 if the type and shape have the packed layout. */
int kernels_pack_layout_ok(enum quant_type type, int64_t n_rows, int64_t n_cols);
/* 1 if the layout is ok and the active ISA has a packed kernel of its own
 * for it (AVX-512 today). Never 1 for an ISA that would compute the layout
 * through the reference: a packed matrix still gives right results on every
 * ISA (after a later kernels_isa_force), but slowly. */
int kernels_pack_wanted(enum quant_type type, int64_t n_rows, int64_t n_cols);
/* Writes row groups [g0, g1) of GGUF-layout w (row_bytes = the row size) to
 * dst (w->n_rows * w->row_bytes bytes in all; groups may be packed by several
 * threads at once). Returns 0, or -1 for a type/shape without the layout. */
int kernels_pack(const struct kern_mat *w, void *dst, int64_t g0, int64_t g1);
/* The inverse: packed w -> GGUF rows in dst (tests). Returns 0 or -1. */
int kernels_unpack(const struct kern_mat *w, void *dst);

/* Same through the scalar reference path regardless of the active ISA. */
void kernels_matmul_ref(const struct kern_mat *w, const void *xq, size_t xq_stride, int64_t n_tok,
                        float *y, int64_t ldy, int64_t r0, int64_t r1);

#endif
