/* engine/kernels-x86.h: x86 SIMD matmul kernels, written once and compiled
 * per ISA: kernels-avx2.c (AVX2+FMA+F16C, 256-bit), kernels-avx512.c (the
 * same with EVEX encodings and 32 registers, plus Q4_0 two blocks per zmm)
 * and kernels-avx512-vnni.c (KX_VNNI=1: int8 dots are vpdpbusd; Q4_0 and
 * Q8_0 two blocks per zmm). Only those files include it, each under its own
 * -m flags; the functions are static so the copies never collide.
 *
 * Shape of every kernel: rows in tiles of NR, tokens in tiles of nt <=
 * KX_TILE; each weight block is loaded and unpacked once per tile and dotted
 * with every token of the tile (chunked prefill is a matrix-matrix product),
 * each activation block once per NR rows. Every (row, token) result is
 * accumulated in the same order whatever the tile, so a token alone and the
 * same token in a batch give identical bits, as do any row splits (the
 * pool's bit-identity across thread counts); tests/engine/test-kernels.c
 * checks both.
 *
 * Before including, define KX_VNNI (0 or 1); the file provides kx_fill().
 */
#ifndef STRATA_KERNELS_X86_H
#define STRATA_KERNELS_X86_H

#include <immintrin.h>
#include <stdlib.h>

#include "engine/kernels-impl.h"

/* Tokens per register tile. 4 tokens x 2 accumulators = 8 ymm registers of
 * accumulators plus block, activation and scale registers still fits AVX2's
 * 16; the weight row (a few KB) stays in L1 for the next tile. */
#define KX_TILE 4
#define KX_INLINE static inline __attribute__((always_inline))
/* Rows per decode (n_tok = 1) tile. 4 rows sharing each activation block is
 * 30-40% faster while the weights sit in L2, but once they stream from DRAM
 * the 4 (or 2) interleaved row streams ran at 2-4 GB/s against 5-20 GB/s for
 * one row at a time (this 2-core EPYC VM, 512 MB of Q4_0/Q8_0/Q4_K/Q6_K,
 * `kernels-bench 512 2 -1 8 q4_0,q4_K,q6_K,q8_0` with -DKX_DECODE_ROWS=1/2/4,
 * interleaved runs, 2026-11-30); decode weights never fit the cache, so 1. */
#ifndef KX_DECODE_ROWS
#define KX_DECODE_ROWS 1
#endif
/* Software prefetch distance into each weight row, in bytes (0 = off). With
 * one row per decode tile the hardware prefetchers do better alone: 512 MB,
 * 1 thread, quietest of 3 interleaved rounds, GB/s q4_0/q8_0/q4_K/q6_K:
 * off 21.9/30.0/21.4/28.0, 256 B 21.3/29.6/21.0/27.6, 512 B 18.8/21.2/18.4/
 * 21.7, 2048 B 21.2/25.9/21.0/22.6 (built with -DKX_PF_BYTES=N). Kept as a
 * knob for other machines. */
#ifndef KX_PF_BYTES
#define KX_PF_BYTES 0
#endif
KX_INLINE void kx_prefetch(const uint8_t *p) {
#if KX_PF_BYTES > 0
    _mm_prefetch((const char *)p + KX_PF_BYTES, _MM_HINT_T0);
#else
    (void)p;
#endif
}

KX_INLINE float kx_hsum(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 sh = _mm_movehdup_ps(lo);
    lo = _mm_add_ps(lo, sh);
    sh = _mm_movehl_ps(sh, lo);
    return _mm_cvtss_f32(_mm_add_ss(lo, sh));
}

KX_INLINE float kx_f16(quant_f16 h) {
    return _cvtsh_ss(h);
}

/* Signed int8 x signed int8, 32 pairs -> 8 int32 partial sums. The sign
 * trick needs y != -128, which every Q8 activation quantizer guarantees
 * (|q| <= 127); x may be any int8. */
KX_INLINE __m256i kx_dot_i8(__m256i x, __m256i y) {
#if KX_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(x, x),
                               _mm256_sign_epi8(y, x));
#else
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
#endif
}

/* Unsigned x signed int8 (u <= 127 keeps maddubs exact), int16 weights. */
KX_INLINE __m256i kx_dot_u8_scaled(__m256i u, __m256i y, __m256i scale16) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), scale16);
}

/* Unsigned (<= 127) x signed int8, 32 pairs -> 8 int32 partial sums, grouped
 * like kx_dot_i8 (4 consecutive bytes per lane), so the integers agree. */
KX_INLINE __m256i kx_dot_u8(__m256i u, __m256i y) {
#if KX_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, y);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1));
#endif
}

/* 16 packed nibbles -> 32 bytes: low nibbles (elements 0..15) then high. */
KX_INLINE __m256i kx_nibbles(const uint8_t *qs) {
    __m128i t = _mm_loadu_si128((const __m128i *)qs);
    __m256i q = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    return _mm256_and_si256(q, _mm256_set1_epi8(0x0F));
}

/* ---- 32-element blocks with Q8_0 activations ------------------------------- */

enum kx_b32 { KX_Q4_0, KX_Q8_0, KX_IQ4_NL, KX_MXFP4 };

KX_INLINE size_t kx_b32_size(enum kx_b32 k) {
    return k == KX_Q4_0     ? sizeof(block_q4_0)
           : k == KX_Q8_0   ? sizeof(block_q8_0)
           : k == KX_IQ4_NL ? sizeof(block_iq4_nl)
                            : sizeof(block_mxfp4);
}

/* Unpacks one weight block to 32 bytes and its float scale. Q4_0 stays
 * unsigned (0..15; the -8 is applied through the activation sum), the others
 * are signed. */
KX_INLINE __m256i kx_b32_decode(enum kx_b32 k, const uint8_t *blk, __m256i table, float *d) {
    switch (k) {
    case KX_Q4_0:
        *d = kx_f16(((const block_q4_0 *)blk)->d);
        return kx_nibbles(((const block_q4_0 *)blk)->qs);
    case KX_Q8_0:
        *d = kx_f16(((const block_q8_0 *)blk)->d);
        return _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)blk)->qs);
    case KX_IQ4_NL:
        *d = kx_f16(((const block_iq4_nl *)blk)->d);
        return _mm256_shuffle_epi8(table, kx_nibbles(((const block_iq4_nl *)blk)->qs));
    case KX_MXFP4:
    default:
        *d = kern_e8m0_half(((const block_mxfp4 *)blk)->e);
        return _mm256_shuffle_epi8(table, kx_nibbles(((const block_mxfp4 *)blk)->qs));
    }
}

/* Exact int32 lanes of dot(weight block, activation block); for Q4_0,
 * ysum8 = kx_dot_u8(8, y) of the same activation block. */
KX_INLINE __m256i kx_b32_dot(enum kx_b32 k, __m256i q, __m256i y, __m256i ysum8) {
    if (k == KX_Q4_0)
        return _mm256_sub_epi32(kx_dot_u8(q, y), ysum8);
    return kx_dot_i8(q, y);
}

/* NR rows x nt tokens (both compile-time after inlining; NR * nt <= 4).
 * Two accumulators per (row, token), for even and odd blocks, hide the FMA
 * latency. The operations per (row, token) are the same for every NR and nt,
 * so any tiling gives identical bits. Rows: row0 + i * row_bytes. */
/* One block b of a tile into the accumulator set acc (even or odd blocks). */
KX_INLINE void kx_b32_step(enum kx_b32 k, const uint8_t *row0, size_t row_bytes, int NR, int64_t b,
                           const uint8_t *xq, size_t xs, int nt, __m256i table,
                           __m256 acc[4][KX_TILE]) {
    const size_t bsz = kx_b32_size(k);
    __m256i yv[KX_TILE], ys8[KX_TILE];
    float dy[KX_TILE];
    for (int t = 0; t < nt; t++) {
        const block_q8_0 *a = (const block_q8_0 *)(xq + (size_t)t * xs) + b;
        yv[t] = _mm256_loadu_si256((const __m256i *)a->qs);
        dy[t] = kx_f16(a->d);
        ys8[t] = k == KX_Q4_0 ? kx_dot_u8(_mm256_set1_epi8(8), yv[t]) : _mm256_setzero_si256();
    }
    for (int i = 0; i < NR; i++) {
        float dx;
        const uint8_t *blk = row0 + (size_t)i * row_bytes + (size_t)b * bsz;
        if (!(b & 1))
            kx_prefetch(blk);
        __m256i q = kx_b32_decode(k, blk, table, &dx);
        for (int t = 0; t < nt; t++) {
            __m256i s = kx_b32_dot(k, q, yv[t], ys8[t]);
            acc[i][t] =
                _mm256_fmadd_ps(_mm256_set1_ps(dx * dy[t]), _mm256_cvtepi32_ps(s), acc[i][t]);
        }
    }
}

/* NR rows x nt tokens (both compile-time after inlining; 2 * NR * nt
 * accumulators must fit the register file: 8 on AVX2, 16 with AVX-512VL).
 * Two accumulator sets per (row, token), for even and odd blocks, so even a
 * 1 x 1 decode tile has two FMA chains in flight (one chain capped AVX2 Q4_0
 * at ~17 GB/s per thread: 18 bytes per 4-cycle FMA latency); the loop is
 * unrolled by two so both sets stay in registers. The operations per (row,
 * token) are the same for every NR and nt, so any tiling gives identical
 * bits. Rows: row0 + i * row_bytes. */
KX_INLINE void kx_b32_tile(enum kx_b32 k, const uint8_t *row0, size_t row_bytes, int NR, int64_t nb,
                           const uint8_t *xq, size_t xs, int nt, float *out, int64_t ldy) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(
        (const __m128i *)(k == KX_MXFP4 ? kern_kvalues_mxfp4 : kern_kvalues_iq4nl)));
    __m256 acc0[4][KX_TILE], acc1[4][KX_TILE];
    for (int i = 0; i < NR; i++)
        for (int t = 0; t < nt; t++)
            acc0[i][t] = acc1[i][t] = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        kx_b32_step(k, row0, row_bytes, NR, b, xq, xs, nt, table, acc0);
        kx_b32_step(k, row0, row_bytes, NR, b + 1, xq, xs, nt, table, acc1);
    }
    if (b < nb)
        kx_b32_step(k, row0, row_bytes, NR, b, xq, xs, nt, table, acc0);
    for (int i = 0; i < NR; i++)
        for (int t = 0; t < nt; t++)
            out[t * ldy + i] = kx_hsum(_mm256_add_ps(acc0[i][t], acc1[i][t]));
}

#if defined(__AVX512BW__)
/* Which kinds take the two-blocks-per-zmm path: all four with VNNI; Q4_0 and
 * MXFP4 on plain AVX-512BW (vpmaddubsw saturates for Q8_0's and IQ4_NL's
 * unsigned weights up to 255, while 0..15 and 0..24 stay exact). */
#define KX_Z_KIND(k)                                                                               \
    ((k) == KX_Q4_0 || (k) == KX_MXFP4 || (KX_VNNI && ((k) == KX_Q8_0 || (k) == KX_IQ4_NL)))

/* Unsigned x signed bytes -> 16 int32 sums of 4 products each. */
KX_INLINE __m512i kx_z_dot(__m512i u, __m512i y) {
#if KX_VNNI
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, y);
#else
    return _mm512_madd_epi16(_mm512_maddubs_epi16(u, y), _mm512_set1_epi16(1));
#endif
}

/* ---- AVX-512: two 32-element blocks per 512-bit register -------------------
 * Weights are made unsigned (Q4_0 nibbles 0..15, offset 8; MXFP4 table values
 * + 12; IQ4_NL table values + 128; Q8_0 x ^ 0x80 = x + 128) so one vpdpbusd
 * (vpmaddubsw + vpmaddwd without VNNI) does the dot, and the offset comes off
 * through the activation sum (offset * sum(y), exact in int32). Register
 * layout of a block pair (128-bit lanes): nibble kinds [b0 lo16, b1 lo16,
 * b0 hi16, b1 hi16], Q8_0 [b0 0..15, b0 16..31, b1 0..15, b1 16..31]; the
 * activations are arranged the same way. Lanes of block 0 and block 1 get
 * their own scale; 16 float lanes accumulate per (row, token). */

/* Pair (or, when `two` is 0, a single block with zeros for the second). */
/* Nibble kinds (Q4_0, IQ4_NL, MXFP4) share one layout; Q8_0 has its own. */
#define KX_Z_NIB(k) ((k) != KX_Q8_0)

/* Offset that makes each kind's weights unsigned. */
KX_INLINE int kx_z_offset(enum kx_b32 k) {
    return k == KX_Q4_0 ? 8 : k == KX_MXFP4 ? 12 : 128;
}

/* Pair (or, when `two` is 0, a single block with zeros for the second). */
KX_INLINE __m512i kx_z_weights(enum kx_b32 k, const uint8_t *blk, int two, __m128 *dpair) {
    if (KX_Z_NIB(k)) {
        const size_t bsz = kx_b32_size(k);
        const size_t qoff = k == KX_MXFP4 ? 1 : 2; /* qs after e (u8) or d (f16) */
        __m128i a = _mm_loadu_si128((const __m128i *)(blk + qoff));
        __m128i b =
            two ? _mm_loadu_si128((const __m128i *)(blk + bsz + qoff)) : _mm_setzero_si128();
        __m256i ab = _mm256_set_m128i(b, a);
        __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(ab), _mm256_srli_epi16(ab, 4), 1);
        z = _mm512_and_si512(z, _mm512_set1_epi8(0x0F));
        if (k == KX_MXFP4) {
            /* E2M1 values (doubled) + 12: 0..24 */
            static const int8_t tab[16] = {12, 13, 14, 15, 16, 18, 20, 24,
                                           12, 11, 10, 9,  8,  6,  4,  0};
            z = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)tab)),
                                    z);
            const block_mxfp4 *x = (const block_mxfp4 *)blk;
            *dpair = _mm_set_ps(0, 0, two ? kern_e8m0_half(x[1].e) : 0, kern_e8m0_half(x[0].e));
            return z;
        }
        if (k == KX_IQ4_NL) {
            /* IQ4_NL values + 128: 1..241 (vpdpbusd only; vpmaddubsw would
             * saturate) */
            static const uint8_t tab[16] = {1,   24,  45,  63,  79,  93,  106, 118,
                                            129, 141, 153, 166, 181, 197, 217, 241};
            z = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)tab)),
                                    z);
        }
        quant_f16 d0, d1 = 0;
        memcpy(&d0, blk, 2);
        if (two)
            memcpy(&d1, blk + bsz, 2);
        *dpair = _mm_cvtph_ps(_mm_set_epi16(0, 0, 0, 0, 0, 0, (short)d1, (short)d0));
        return z;
    }
    const block_q8_0 *x = (const block_q8_0 *)blk;
    __m256i a = _mm256_loadu_si256((const __m256i *)x[0].qs);
    __m256i b = two ? _mm256_loadu_si256((const __m256i *)x[1].qs) : _mm256_set1_epi8(-128);
    *dpair = _mm_cvtph_ps(_mm_set_epi16(0, 0, 0, 0, 0, 0, two ? (short)x[1].d : 0, (short)x[0].d));
    return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1),
                            _mm512_set1_epi8((char)0x80));
}

/* Activation pair in the weights' layout; offset sum and scale pair. */
KX_INLINE __m512i kx_z_act(enum kx_b32 k, const block_q8_0 *a, int two, __m512i *ysum,
                           __m128 *dpair) {
    __m256i y0 = _mm256_loadu_si256((const __m256i *)a[0].qs);
    __m256i y1 = two ? _mm256_loadu_si256((const __m256i *)a[1].qs) : _mm256_setzero_si256();
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(y0), y1, 1);
    if (KX_Z_NIB(k))
        z = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
    *ysum = kx_z_dot(_mm512_set1_epi8((char)kx_z_offset(k)), z);
    *dpair = _mm_cvtph_ps(_mm_set_epi16(0, 0, 0, 0, 0, 0, two ? (short)a[1].d : 0, (short)a[0].d));
    return z;
}

KX_INLINE __m512 kx_z_scales(enum kx_b32 k, __m128 s) {
    /* nibble kinds: lanes alternate block 0 / block 1 per 128 bits; Q8_0: halves */
    const __m512i idx = KX_Z_NIB(k)
                            ? _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0)
                            : _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(s));
}

KX_INLINE void kx_z_step(enum kx_b32 k, const uint8_t *row0, size_t row_bytes, int NR, int64_t b,
                         int two, const uint8_t *xq, size_t xs, int nt, __m512 acc[4][KX_TILE]) {
    const size_t bsz = kx_b32_size(k);
    __m512i yv[KX_TILE], ys[KX_TILE];
    __m128 dy[KX_TILE];
    for (int t = 0; t < nt; t++)
        yv[t] = kx_z_act(k, (const block_q8_0 *)(xq + (size_t)t * xs) + b, two, &ys[t], &dy[t]);
    for (int i = 0; i < NR; i++) {
        const uint8_t *blk = row0 + (size_t)i * row_bytes + (size_t)b * bsz;
        kx_prefetch(blk);
        __m128 dx;
        __m512i q = kx_z_weights(k, blk, two, &dx);
        for (int t = 0; t < nt; t++) {
            __m512i sum = _mm512_sub_epi32(kx_z_dot(q, yv[t]), ys[t]);
            acc[i][t] = _mm512_fmadd_ps(kx_z_scales(k, _mm_mul_ps(dx, dy[t])),
                                        _mm512_cvtepi32_ps(sum), acc[i][t]);
        }
    }
}

/* ---- AVX-512 GEMM for n_tok >= KX_GEMM_MIN (prefill chunks, batched decode)
 * Kinds of KX_Z_KIND (Q4_0, MXFP4; with VNNI also Q8_0, IQ4_NL). Tokens go in
 * chunks of KX_GEMM_CHUNK: the chunk's activations are packed once (block
 * pairs in the weights' layout, 64 bytes, plus the scale pair); for each
 * 4-row tile the weights are unpacked once per chunk into a scratch (64
 * bytes + spread scales per row and pair, L1-sized), and the 4 rows x 4
 * tokens micro-kernel does per (row, token, pair) only vpdpbusd (into the
 * negated offset sum, computed once per token and tile), cvt, mul and fma on
 * 16 zmm accumulators. The integer lanes, the scale products and the fma
 * order per (row, token) are exactly kx_z_step's, so results are
 * bit-identical to the n_tok = 1 (decode) path and to any tiling or split.
 *
 * Measured (this 2-vCPU AMD EPYC VM, AVX-512 VNNI, shared box: best of
 * interleaved runs, 2026-11-30; release builds of the same tree with the old
 * and the new kernels-x86.h):
 *   `kernels-bench 4 1 -1 3 q4_0 64` (1 thread, 4 MB Q4_0, 4096 cols, 64 tok):
 *     old 4x4 tiles re-preparing activations per row tile ~82 G MAC/s;
 *     first GEMM (fat 192 B/token-pair activation pack, weights decoded per
 *     token tile) ~100-108; weights unpacked once per chunk + compact
 *     activations (64 + 16 B) ~135; chunk 32 vs 16 vs 8: ~138 / 135 / 113.
 *   `kernels-bench 8 2 -1 3 q4_0 512`: 278 G MAC/s with 2 threads.
 *   `bench-model llama-3.2-1b-q4_0.gguf 2 8 512 1` prefill 512 tok, 2 threads
 *     (o2's attention at fbf19cf in both): old ~121-134 tok/s, new ~204-242
 *     tok/s (also with the AVX-512 Q8_0 quantizer of kernels-x86-k.h).
 * The remaining per-(row, token) cost is 4-5 ops per 64 MACs (the scale
 * product and the lane-wise float accumulation the decode path fixed); a
 * further step would sum the lanes of a block in int32 first, which changes
 * the decode path's bits too. */
#define KX_GEMM_MIN 8
#define KX_GEMM_CHUNK 32

struct kx_zact {
    __m512i y; /* activation pair in the weights' layout */
};

/* Unsigned x signed bytes added to acc (exact int32, same lanes as kx_z_dot). */
KX_INLINE __m512i kx_z_dot_acc(__m512i acc, __m512i u, __m512i y) {
#if KX_VNNI
    return _mm512_dpbusd_epi32(acc, u, y);
#else
    return _mm512_add_epi32(acc,
                            _mm512_madd_epi16(_mm512_maddubs_epi16(u, y), _mm512_set1_epi16(1)));
#endif
}

/* nt tokens of activation rows -> dst[t * np + p] and their scale pairs
 * dys[t * np + p] for block pairs p < np. */
KX_INLINE void kx_z_pack(enum kx_b32 k, const uint8_t *xq, size_t xs, int64_t nt, int64_t nb,
                         struct kx_zact *dst, __m128 *dys) {
    const int64_t np = (nb + 1) / 2;
    for (int64_t t = 0; t < nt; t++) {
        const block_q8_0 *a = (const block_q8_0 *)(xq + (size_t)t * xs);
        for (int64_t p = 0; p < np; p++) {
            __m512i ys;
            dst[t * np + p].y = kx_z_act(k, a + 2 * p, 2 * p + 1 < nb, &ys, &dys[t * np + p]);
        }
    }
}

/* A weight block pair unpacked once per chunk (4 rows: [p * 4 + i]). */
struct kx_zw {
    __m512i q;
    __m512 dx; /* weight scales spread like kx_z_scales */
};

/* Unpacks NR rows' block pairs into wq[p * 4 + i]. */
KX_INLINE void kx_zw_unpack(enum kx_b32 k, const uint8_t *row0, size_t row_bytes, int NR,
                            int64_t nb, struct kx_zw *wq) {
    const size_t bsz = kx_b32_size(k);
    const int64_t np = (nb + 1) / 2;
    for (int i = 0; i < NR; i++) {
        const uint8_t *row = row0 + (size_t)i * row_bytes;
        for (int64_t p = 0; p < np; p++) {
            __m128 d;
            wq[p * 4 + i].q = kx_z_weights(k, row + (size_t)(2 * p) * bsz, 2 * p + 1 < nb, &d);
            wq[p * 4 + i].dx = kx_z_scales(k, d);
        }
    }
}

/* NR rows x nt tokens over all block pairs; act points at the tile's first
 * token, wq at the rows' unpacked weights. */
KX_INLINE void kx_zg_tile(enum kx_b32 k, const struct kx_zw *wq, int NR, int64_t np,
                          const struct kx_zact *act, const __m128 *dys, int nt, float *out,
                          int64_t ldy) {
    const __m512i off = _mm512_set1_epi8((char)kx_z_offset(k));
    __m512 acc[4][KX_TILE];
    for (int i = 0; i < NR; i++)
        for (int t = 0; t < nt; t++)
            acc[i][t] = _mm512_setzero_ps();
    for (int64_t p = 0; p < np; p++) {
        __m512i q[4];
        __m512 dx[4];
        for (int i = 0; i < NR; i++) {
            q[i] = wq[p * 4 + i].q;
            dx[i] = wq[p * 4 + i].dx;
        }
        for (int t = 0; t < nt; t++) {
            const __m512i y = act[t * np + p].y;
            const __m512i negs = _mm512_sub_epi32(_mm512_setzero_si512(), kx_z_dot(off, y));
            const __m512 dy = kx_z_scales(k, dys[t * np + p]);
            for (int i = 0; i < NR; i++) {
                __m512i sum = kx_z_dot_acc(negs, q[i], y);
                acc[i][t] =
                    _mm512_fmadd_ps(_mm512_mul_ps(dx[i], dy), _mm512_cvtepi32_ps(sum), acc[i][t]);
            }
        }
    }
    for (int i = 0; i < NR; i++)
        for (int t = 0; t < nt; t++)
            out[t * ldy + i] = _mm512_reduce_add_ps(acc[i][t]);
}

/* Rows [r0, r1) x nt (<= KX_GEMM_CHUNK) packed tokens: 4-row tiles (weights
 * unpacked once into wq), then single rows; token tiles of KX_TILE with
 * compile-time remainders. */
KX_INLINE void kx_zg_rows(enum kx_b32 k, const struct kern_mat *w, int64_t nb,
                          const struct kx_zact *act, const __m128 *dys, int64_t nt,
                          struct kx_zw *wq, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t np = (nb + 1) / 2;
    const size_t rb = w->row_bytes;
    int64_t r = r0;
    for (; r < r1; r += r + 4 <= r1 ? 4 : 1) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * rb;
        const int four = r + 4 <= r1;
        kx_zw_unpack(k, row, rb, four ? 4 : 1, nb, wq);
        for (int64_t t = 0; t < nt; t += KX_TILE) {
            const struct kx_zact *a = act + t * np;
            const __m128 *ds = dys + t * np;
            float *o = y + t * ldy + r;
            switch ((four ? 10 : 0) + (nt - t < KX_TILE ? (int)(nt - t) : KX_TILE)) {
            case 14:
                kx_zg_tile(k, wq, 4, np, a, ds, 4, o, ldy);
                break;
            case 13:
                kx_zg_tile(k, wq, 4, np, a, ds, 3, o, ldy);
                break;
            case 12:
                kx_zg_tile(k, wq, 4, np, a, ds, 2, o, ldy);
                break;
            case 11:
                kx_zg_tile(k, wq, 4, np, a, ds, 1, o, ldy);
                break;
            case 4:
                kx_zg_tile(k, wq, 1, np, a, ds, 4, o, ldy);
                break;
            case 3:
                kx_zg_tile(k, wq, 1, np, a, ds, 3, o, ldy);
                break;
            case 2:
                kx_zg_tile(k, wq, 1, np, a, ds, 2, o, ldy);
                break;
            default:
                kx_zg_tile(k, wq, 1, np, a, ds, 1, o, ldy);
                break;
            }
        }
    }
}

/* The GEMM over all tokens; 0 when the scratch could not be allocated (the
 * caller then takes the tiled path, same bits). */
static int kx_zg_matmul(enum kx_b32 k, const struct kern_mat *w, const void *xq, size_t xs,
                        int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nb = w->n_cols / 32;
    const int64_t np = (nb + 1) / 2;
    const size_t act_bytes = (size_t)KX_GEMM_CHUNK * (size_t)np * sizeof(struct kx_zact);
    const size_t dys_bytes = (size_t)KX_GEMM_CHUNK * (size_t)np * sizeof(__m128);
    uint8_t *buf =
        aligned_alloc(64, act_bytes + dys_bytes + (size_t)(4 * np) * sizeof(struct kx_zw));
    if (!buf)
        return 0;
    struct kx_zact *act = (struct kx_zact *)buf;
    __m128 *dys = (__m128 *)(buf + act_bytes);
    struct kx_zw *wq = (struct kx_zw *)(buf + act_bytes + dys_bytes);
    for (int64_t t0 = 0; t0 < n_tok; t0 += KX_GEMM_CHUNK) {
        int64_t nt = n_tok - t0 < KX_GEMM_CHUNK ? n_tok - t0 : KX_GEMM_CHUNK;
        kx_z_pack(k, (const uint8_t *)xq + (size_t)t0 * xs, xs, nt, nb, act, dys);
        kx_zg_rows(k, w, nb, act, dys, nt, wq, y + t0 * ldy, ldy, r0, r1);
    }
    free(buf);
    return 1;
}

KX_INLINE void kx_z_tile(enum kx_b32 k, const uint8_t *row0, size_t row_bytes, int NR, int64_t nb,
                         const uint8_t *xq, size_t xs, int nt, float *out, int64_t ldy) {
    __m512 acc[4][KX_TILE];
    for (int i = 0; i < NR; i++)
        for (int t = 0; t < nt; t++)
            acc[i][t] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2)
        kx_z_step(k, row0, row_bytes, NR, b, 1, xq, xs, nt, acc);
    if (b < nb)
        kx_z_step(k, row0, row_bytes, NR, b, 0, xq, xs, nt, acc);
    for (int i = 0; i < NR; i++)
        for (int t = 0; t < nt; t++)
            out[t * ldy + i] = _mm512_reduce_add_ps(acc[i][t]);
}
#endif

/* The tile kernel for kind k in this build. */
KX_INLINE void kx_b32_any(enum kx_b32 k, const uint8_t *row0, size_t row_bytes, int NR, int64_t nb,
                          const uint8_t *xq, size_t xs, int nt, float *out, int64_t ldy) {
#if defined(__AVX512BW__)
    if (KX_Z_KIND(k)) {
        kx_z_tile(k, row0, row_bytes, NR, nb, xq, xs, nt, out, ldy);
        return;
    }
#endif
    kx_b32_tile(k, row0, row_bytes, NR, nb, xq, xs, nt, out, ldy);
}

/* Rows per tile when n_tok > 1: the accumulators (2 x KX_PF_ROWS x KX_TILE)
 * plus the tile's activations must fit the register file (16 ymm on AVX2, 32
 * with AVX-512VL). */
#if defined(__AVX512VL__)
#define KX_PF_ROWS 2
#else
#define KX_PF_ROWS 1
#endif

KX_INLINE void kx_b32_matmul(enum kx_b32 k, const struct kern_mat *w, const void *xq, size_t xs,
                             int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nb = w->n_cols / 32;
    const uint8_t *x8 = xq;
    const size_t rb = w->row_bytes;
    int64_t r = r0;
#if defined(__AVX512BW__)
    if (KX_Z_KIND(k) && n_tok >= KX_GEMM_MIN && kx_zg_matmul(k, w, xq, xs, n_tok, y, ldy, r0, r1))
        return;
#endif
    if (n_tok == 1) {
        /* Decode: KX_DECODE_ROWS rows share each activation block (see there). */
        for (; KX_DECODE_ROWS > 1 && r + KX_DECODE_ROWS <= r1; r += KX_DECODE_ROWS)
            kx_b32_any(k, (const uint8_t *)w->data + (size_t)r * rb, rb, KX_DECODE_ROWS, nb, x8, xs,
                       1, y + r, ldy);
    } else {
        /* Prefill: KX_PF_ROWS rows x KX_TILE tokens; each weight block is
         * unpacked once per KX_TILE tokens, each activation block loaded once
         * per KX_PF_ROWS rows. */
        /* The two-blocks-per-zmm path has one accumulator set: 4 rows fit. */
#if defined(__AVX512BW__)
        const int PR = KX_Z_KIND(k) ? 4 : KX_PF_ROWS;
#else
        const int PR = KX_PF_ROWS;
#endif
        for (; r + PR <= r1; r += PR) {
            const uint8_t *row = (const uint8_t *)w->data + (size_t)r * rb;
            int64_t t = 0;
            for (; t + KX_TILE <= n_tok; t += KX_TILE)
                kx_b32_any(k, row, rb, PR, nb, x8 + t * xs, xs, KX_TILE, y + t * ldy + r, ldy);
            switch (n_tok - t) {
            case 3:
                kx_b32_any(k, row, rb, PR, nb, x8 + t * xs, xs, 3, y + t * ldy + r, ldy);
                break;
            case 2:
                kx_b32_any(k, row, rb, PR, nb, x8 + t * xs, xs, 2, y + t * ldy + r, ldy);
                break;
            case 1:
                kx_b32_any(k, row, rb, PR, nb, x8 + t * xs, xs, 1, y + t * ldy + r, ldy);
                break;
            default:
                break;
            }
        }
    }
    for (; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * rb;
        int64_t t = 0;
        for (; t + KX_TILE <= n_tok; t += KX_TILE)
            kx_b32_any(k, row, 0, 1, nb, x8 + t * xs, xs, KX_TILE, y + t * ldy + r, ldy);
        switch (n_tok - t) {
        case 3:
            kx_b32_any(k, row, 0, 1, nb, x8 + t * xs, xs, 3, y + t * ldy + r, ldy);
            break;
        case 2:
            kx_b32_any(k, row, 0, 1, nb, x8 + t * xs, xs, 2, y + t * ldy + r, ldy);
            break;
        case 1:
            kx_b32_any(k, row, 0, 1, nb, x8 + t * xs, xs, 1, y + t * ldy + r, ldy);
            break;
        default:
            break;
        }
    }
}

#define KX_B32_FN(name, kind)                                                                      \
    static void name(const struct kern_mat *w, const void *xq, size_t xs, int64_t n_tok, float *y, \
                     int64_t ldy, int64_t r0, int64_t r1) {                                        \
        kx_b32_matmul(kind, w, xq, xs, n_tok, y, ldy, r0, r1);                                     \
    }
KX_B32_FN(kx_matmul_q4_0, KX_Q4_0)
KX_B32_FN(kx_matmul_q8_0, KX_Q8_0)
KX_B32_FN(kx_matmul_iq4_nl, KX_IQ4_NL)
KX_B32_FN(kx_matmul_mxfp4, KX_MXFP4)

/* Runs TILE_FN(w, r, NR, xq, xs, nt, out, ldy) over [r0, r1) x [0, n_tok):
 * decode (n_tok = 1) in tiles of KX_DECODE_ROWS rows,
 * otherwise one row at a time in token tiles of KX_TILE, with compile-time
 * NR and nt for every case. */
#define KX_TILED(TILE_FN)                                                                          \
    const uint8_t *x8 = xq;                                                                        \
    int64_t r = r0;                                                                                \
    if (n_tok == 1)                                                                                \
        for (; KX_DECODE_ROWS > 1 && r + KX_DECODE_ROWS <= r1; r += KX_DECODE_ROWS)                \
            TILE_FN(w, r, KX_DECODE_ROWS, x8, xs, 1, y + r, ldy);                                  \
    for (; r < r1; r++) {                                                                          \
        int64_t t = 0;                                                                             \
        for (; t + KX_TILE <= n_tok; t += KX_TILE)                                                 \
            TILE_FN(w, r, 1, x8 + t * xs, xs, KX_TILE, y + t * ldy + r, ldy);                      \
        const uint8_t *xt = x8 + t * xs;                                                           \
        float *yt = y + t * ldy + r;                                                               \
        switch (n_tok - t) {                                                                       \
        case 3:                                                                                    \
            TILE_FN(w, r, 1, xt, xs, 3, yt, ldy);                                                  \
            break;                                                                                 \
        case 2:                                                                                    \
            TILE_FN(w, r, 1, xt, xs, 2, yt, ldy);                                                  \
            break;                                                                                 \
        case 1:                                                                                    \
            TILE_FN(w, r, 1, xt, xs, 1, yt, ldy);                                                  \
            break;                                                                                 \
        default:                                                                                   \
            break;                                                                                 \
        }                                                                                          \
    }

#include "engine/kernels-x86-k.h"

#endif
