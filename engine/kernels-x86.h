/* engine/kernels-x86.h: x86 SIMD matmul kernels, written once and compiled
 * per ISA: kernels-avx2.c (AVX2+FMA+F16C, 256-bit), kernels-avx512.c (the
 * same with EVEX encodings and 32 registers, plus Q4_0 and MXFP4 eight
 * blocks per unit of four zmm) and kernels-avx512-vnni.c (KX_VNNI=1: int8
 * dots are vpdpbusd; Q4_0, Q8_0, IQ4_NL and MXFP4 in 8-block units). Only
 * those files include it, each under its own -m flags; the functions are
 * static so the copies never collide.
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
/* Software prefetch of the b32 decode rows (kx_zd_row on AVX-512: every 64
 * bytes of each 8-block unit; 1 x 1 tiles of the 256-bit path: every second
 * block), KX_DECODE_PF_BYTES ahead of the bytes being decoded, as
 * prefetchnta (0 = off). With the hardware prefetchers alone decode ran
 * ~10% under a plain read of the same bytes; a prefetch per line several KB
 * ahead puts it 1.1-1.35x above bench/roofline.c's loop (which has no
 * software prefetch: the probe is not the box's ceiling), nearer ones
 * (256 B-4 KB, either hint) do nothing or hurt, and NTA beats T0 at every
 * distance tried. This 2-vCPU EPYC (Zen 5) VM, release build, runtime
 * distance/hint variants interleaved in one process,
 * `flock /tmp/strata-bench.lock kernels-bench 384 2 -1 6 q4_0,q8_0,iq4_nl 1`
 * (2026-12-01 ~02:05; bench/roofline.c in the same locked run: 2 threads
 * 56-67, 1 thread 31-35 GB/s), best of 6, GB/s 1 thread / 2 threads:
 *   q4_0    off 32.5 / 46.0   8 KB NTA 37.5 / 53.4   16 KB NTA 37.8 / 53.8
 *           32 KB NTA 40.2 / 53.1   8 KB T0 36.3 / 49.9   16 KB T0 33.3 / 50.0
 *   q8_0    off 35.2 / 47.3   8 KB NTA 43.4 / 52.1   16 KB NTA 44.2 / 52.7
 *           32 KB NTA 42.8 / 54.0   8 KB T0 41.8 / 51.6
 *   iq4_nl  off 32.0 / 45.2   8 KB NTA 31.6 / 52.8 (1 thread is compute-bound)
 *   (the same bench's probe loop over the same bytes, 2 threads: 51-52);
 * an earlier run with the second core busy (2 threads = 1 thread): q4_0
 * off 30.9, 2 KB NTA 27.5, 4 KB NTA 29.7, 8 KB NTA 33.9, 16 KB NTA 33.8;
 * q8_0 off 31.3, 4 KB NTA 29.8, 8 KB NTA 33.6, 8 KB T1/T2 31.8/33.3.
 * 8 KB: as good as 16-32 KB and the least fetched past a chunk's last row.
 * Prefetches past the end of the mapping are harmless (no fault).
 * The 256-bit path (AVX2, and Q8_0 / IQ4_NL on AVX-512 without VNNI), one
 * prefetch per two blocks, 8 KB NTA vs off (`kernels-bench 256 2 ISA 4
 * q8_0,iq4_nl 1`, two interleaved rounds): q8_0 avx2 30.2-32.2 -> 42.0 /
 * 42.7-44.9 -> 53.3-54.3 GB/s (1 / 2 threads; probe loop 37 / 45-48), q8_0
 * avx512 30.8-32.3 -> 39.5-40.8 / 42.3-44.2 -> 52.2-53.0; iq4_nl (compute-
 * bound at ~15.5 / 29-31) unchanged.
 * Against the probe, same locked run (`kernels-bench 384 2 -1 5
 * q4_0,q8_0,q4_K 1`, 02:06; bench/roofline.c 44-53 GB/s 2 threads, 33-34
 * 1 thread): decode q4_0 42.3 / 51.6, q8_0 42.7 / 53.2 GB/s = 1.34-1.36x /
 * 1.17-1.21x the probe loop on the same bytes (31.6 / 44); q4_K (no
 * prefetch) 31.3 / 43.4 = 0.96-0.97x. The pool's "plain read" was under the
 * probe only by its loop (4 add/xor accumulators: 41.9 vs 43.6-43.9 for the
 * probe's 8-add loop through the pool's chunks or as contiguous halves, so
 * the chunking costs nothing); bench/roofline.c built -march=native reads
 * with one 64-byte load per line, 35.5-36.1 vs 32.0-32.2 GB/s for its SSE2
 * build (1 thread, interleaved). A copy of bench/roofline.c (not the
 * yardstick itself) with MADV_HUGEPAGE and / or this prefetch, 1 thread,
 * 2 interleaved rounds at 02:10: plain 38.9 / 39.0, THP 39.7 / 40.3,
 * prefetch 41.8 / 41.2, both 42.4 / 41.0 GB/s: the TLB costs ~2% (the
 * weights are 4 KB page-cache pages; THP is madvise-only here anyway) and
 * decode's 42-43 GB/s a thread is the prefetched read's figure.
 * End to end (`bench-model MODEL 2 48 16 1`, one tree old vs new
 * kernels-x86.h, 3 interleaved pairs): llama-3.2-1b Q4_0 decode 50.8-53.4
 * -> 56.5-59.8 tok/s (probe 45-46 GB/s: 763 MB x 59.8 = 45.6 GB/s);
 * qwen3-0.6b Q8_0 19.8-22.2 -> 24.3-26.3 (a busy minute, probe 28-29).
 * Quieter minute (`bench-model MODEL 2 32 16 1`, 2 interleaved rounds,
 * 02:09, probe 60-63 GB/s): llama Q4_0 53.7-55.9 -> 58.9-62.8 tok/s (~0.75x
 * the roofline: its Q6_K output matrix is 28% of the bytes and has no
 * prefetch; with the same prefetch in kx_kz_decode, kernels-x86-kz.h, not
 * committed here: 65.8-68.5), llama Q4_K_M 50.0-51.4 -> 50.1-50.3 (K-quant,
 * untouched; with the kz prefetch 60.8-64.1), qwen3 Q8_0 58.5-65.4 ->
 * 75.2-79.0. 8 sequences (`... 2 16 16 8`): llama Q4_0 78.2-78.7 ->
 * 80.4-83.8, qwen3 132-136 -> 132-147 (no loss on the 4-token passes).
 * Tried and not kept (`bench-model MODEL 2 32 16 1`, HEAD builds with
 * -DKX_DECODE_PF_BYTES=4096 / 8192 / 16384 interleaved, 3 rounds, 02:14,
 * probe 41-77 GB/s as the box went quiet): llama Q4_0 62.0 / 60.4 / 58.5,
 * 62.4 / 56.9 / 56.0, 74.7 / 61.4 / 81.1 tok/s: the distances are not
 * told apart end to end (the kernels-bench figures above choose 8 KB).
 * Prefetching each call's first 8 KB of rows before the loop (the lines
 * the in-loop prefetch never covers): llama Q4_0 8 KB without / with
 * 55.6 / 62.3, 61.6 / 62.4, 60.5 / 62.6, then 60.4 / 57.4, 56.9 / 62.5,
 * 61.4 / 61.2 tok/s (qwen3 Q8_0 +0-4%): within the noise, not kept. */
/* The policy is now chosen per CPU at run time (kern_pf, kernels.c): NTA
 * 8 KB on AMD as measured above; T1 2 KB on the Intel Xeon VM where NTA
 * halved every stream. */
KX_INLINE void kx_pf_decode(const void *p) {
    switch (kern_pf.hint) {
    case KERN_PF_NTA:
        _mm_prefetch((const char *)p + kern_pf.dist, _MM_HINT_NTA);
        break;
    case KERN_PF_T0:
        _mm_prefetch((const char *)p + kern_pf.dist, _MM_HINT_T0);
        break;
    case KERN_PF_T1:
        _mm_prefetch((const char *)p + kern_pf.dist, _MM_HINT_T1);
        break;
    default:
        break;
    }
}
/* Software prefetch distance into each weight row for the 256-bit tiles
 * other than decode's 1 x 1 (and the AVX2 K-quant path), in bytes (0 = off).
 * Measured with one row per decode tile, T0, short distances only: 512 MB,
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
        if (!(b & 1)) {
            if (NR == 1 && nt == 1)
                kx_pf_decode(blk);
            else
                kx_prefetch(blk);
        }
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
/* ---- AVX-512: whole units of blocks per 512-bit register -------------------
 * Which kinds take this path: all four with VNNI; Q4_0 and MXFP4 on plain
 * AVX-512BW (vpmaddubsw saturates for Q8_0's and IQ4_NL's unsigned weights up
 * to 255, while 0..15 and 0..24 stay exact). */
#define KX_Z_KIND(k)                                                                               \
    ((k) == KX_Q4_0 || (k) == KX_MXFP4 || (KX_VNNI && ((k) == KX_Q8_0 || (k) == KX_IQ4_NL)))

/* A unit is 8 consecutive blocks of a row (256 weights: 144 bytes of Q4_0 or
 * IQ4_NL, 136 of MXFP4, 272 of Q8_0), read straight from the file's blocks
 * (no repacking of the weights) into 4 zmm w0..w3: int32 lane l (of 16)
 * holds 4 weights of block l / 2, w[c] elements 8c..8c+7 of each block (two
 * lanes of 4). Built from 16-byte loads of each block's quants (even blocks
 * into one zmm, odd into another, vpunpck{l,h}qdq), then for nibble kinds
 * and / shift+and (elements 0..15 are the low nibbles of bytes 0..15,
 * 16..31 the high ones).
 * Weights are made unsigned (Q4_0 nibbles 0..15, offset 8; MXFP4 doubled
 * E2M1 values + 12; IQ4_NL values + 128; Q8_0 x ^ 0x80 = x + 128) so
 * vpdpbusd (vpmaddubsw + vpmaddwd without VNNI) does the dot; the offset
 * comes off through nsum = -offset * sum(y) per int32 lane, which is the
 * vpdpbusd accumulator's starting value (exact int32, so free).
 * Activations (Q8_0 blocks) are packed once per kernels_matmul call in the
 * same layout (kx_zu_pack; per unit 6 zmm: y0..y3, nsum, dy = each lane's
 * block scale), on the stack for decode, so a row's step reads only its
 * weights. Weight scales: Q4_0 / IQ4_NL one vpermt2w of two 64-byte loads
 * + vcvtph2ps; Q8_0 8 scalar f16 loads; MXFP4 E8M0 exponents built in int32
 * lanes (kern_e8m0_half, vectorised).
 * Per (row, token, unit) the float work is exactly
 *   acc = fma(dx * dy, cvt(nsum + dot(w0, y0) + .. + dot(w3, y3)), acc)
 * on one 16-lane accumulator (4 vpdpbusd + cvt + mul + fma per 256 MACs;
 * the previous 2-block layout needed ~25 ops per 64), then one
 * _mm512_reduce_add_ps per (row, token); decode (n_tok < KX_GEMM_MIN) and
 * the GEMM do exactly these operations in this order, so a token alone and
 * inside a batch, and any row split, give identical bits.
 * Loads of a full unit stay inside its own bytes; a partial last unit (1-7
 * blocks) is copied to a zeroed buffer first, so the last row of a tensor
 * never reads past the end of the file mapping (zero blocks contribute
 * exactly 0: zero activations, zero nsum; test-kernels checks it against a
 * PROT_NONE page).
 * One accumulator chain per (row, token) is enough for decode: consecutive
 * rows overlap in the out-of-order window (L2-resident 4096-column rows run
 * at 50-54 GB/s a thread, ~75% of a plain read of the same bytes).
 * Measured (this 2-vCPU AMD EPYC VM, AVX-512 VNNI, 1 thread pinned,
 * `flock /tmp/strata-bench.lock taskset -c 0 kernels-bench 1 1 -1 7
 * q4_0,q8_0,iq4_nl,mxfp4 64`, release builds of the old (HEAD 20a8352) and
 * new code interleaved, best of 7, 2026-12-01), L2-resident (1 MB):
 *   decode GB/s   q4_0 23.6 -> 52.9   q8_0 50.5 -> 67.2 (plain read ~70)
 *                 iq4_nl 22.0 -> 50.8   mxfp4 19.7 -> 48
 *   GEMM 64 tok G MAC/s   q4_0 146 -> 250   q8_0 141 -> 228
 *                 iq4_nl 144 -> 241   mxfp4 138 -> 234
 * From DRAM (`kernels-bench 256 1 -1 3 q4_0,q8_0 8`, 1 thread pinned, old
 * -> new interleaved; plain read of the same bytes 32-36 GB/s): q4_0 decode
 * 21-22 -> 30-33 GB/s, q8_0 32 -> 32 (both at the plain read); 2 threads
 * (`kernels-bench 256 2 -1 4 q4_0,q8_0 8`): q4_0 42-44 -> 44-46, q8_0 43-46
 * -> 43-46 (plain read 43-47: bandwidth-bound before and after); n_tok = 8,
 * 2 threads: q4_0 9.7 -> 15-16 GB/s, q8_0 ~17.7 -> ~17.
 * End to end (2 threads, `flock /tmp/strata-bench.lock bench-model MODEL 2
 * 32 512 1`; release builds of one tree (38681f9) with the old and the new
 * kernels-x86.h, interleaved, 2026-12-01): llama-3.2-1b Q4_0 prefill 512
 * tok 237-264 -> 418-430 tok/s, decode 50.7-51.6 -> 56.5-62.6 tok/s;
 * qwen3-0.6b Q8_0 prefill 430-438 -> 581-591, decode 47-51 -> 49-51
 * (memory-bound); llama Q4_0 8 sequences (`... 2 16 64 8`) decode 113-115
 * -> 151-160 tok/s. `bench/cpu` (STRATA=build-kb32r/cli/strata, the box's
 * probe 54-66 GB/s during the run): llama-3.2-1b Q4_0 prefill 422.7 tok/s vs
 * llama.cpp 295.9 (1.43x), decode 54.5 tok/s = 63% of the roofline (its
 * Q6_K output matrix is 28% of the bytes); qwen3-0.6b Q8_0 prefill 594 vs
 * 298, decode 62.7 = 68%.
 * Steps on the way (same command): 4-block units with vpermt2w from two
 * overlapping 64-byte loads: q4_0 decode 49.5 but DRAM decode fell (q4_0
 * 22 -> 18, q8_0 32 -> 16 GB/s, `kernels-bench 256 1 -1 3`): 16-byte lane
 * loads fixed that (33 / 32); 8-block units then took the GEMM from ~190 to
 * ~250 and decode slightly up. */

#define KX_ZU_BLOCKS 8
KX_INLINE int kx_zu_blocks(enum kx_b32 k) {
    (void)k;
    return KX_ZU_BLOCKS;
}
/* zmm of weights (and of activations) per unit */
KX_INLINE int kx_zu_nvec(enum kx_b32 k) {
    (void)k;
    return 4;
}
/* zmm per packed activation unit: y0..y3, nsum, dy */
KX_INLINE int kx_zu_avec(enum kx_b32 k) {
    return kx_zu_nvec(k) + 2;
}

/* Offset that makes each kind's weights unsigned. */
KX_INLINE int kx_z_offset(enum kx_b32 k) {
    return k == KX_Q4_0 ? 8 : k == KX_MXFP4 ? 12 : 128;
}

/* Unsigned x signed bytes added to acc (exact int32: 16 lanes of 4 products). */
KX_INLINE __m512i kx_z_dot_acc(__m512i acc, __m512i u, __m512i y) {
#if KX_VNNI
    return _mm512_dpbusd_epi32(acc, u, y);
#else
    return _mm512_add_epi32(acc,
                            _mm512_madd_epi16(_mm512_maddubs_epi16(u, y), _mm512_set1_epi16(1)));
#endif
}

/* 128-bit lane m of the result = the 16 bytes at p + stride * m. Four
 * 16-byte loads (three as vinserti32x4 memory operands) beat two overlapping
 * 64-byte loads and a vpermt2w: 1 thread, `kernels-bench 256 1 -1 3 q8_0 8`
 * (DRAM) 16.3 -> 32.0 GB/s, `kernels-bench 1 1 -1 10 q8_0 8` (L2) 58.2 ->
 * 64.6 GB/s (this 2-vCPU EPYC VM, 2026-12-01, 2-block units). */
KX_INLINE __m512i kx_zu_lanes(const uint8_t *p, size_t stride) {
    __m512i q = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p));
    q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(p + stride)), 1);
    q = _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(p + 2 * stride)), 2);
    return _mm512_inserti32x4(q, _mm_loadu_si128((const __m128i *)(p + 3 * stride)), 3);
}

/* Spreads 8 block values (v: 8 floats) so int32 lane l gets block l / 2. */
KX_INLINE __m512 kx_zu_spread8(__m256 v) {
    return _mm512_permutexvar_ps(_mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0),
                                 _mm512_castps256_ps512(v));
}

/* The 8 f16 scales at p + stride * j, spread (scalar loads: the 34-byte
 * blocks of Q8_0 span 272 bytes). */
KX_INLINE __m512 kx_zu_f16x8(const uint8_t *p, size_t stride) {
    uint16_t d[8];
    for (int j = 0; j < 8; j++)
        memcpy(&d[j], p + (size_t)j * stride, 2);
    __m128i h;
    memcpy(&h, d, 16);
    return kx_zu_spread8(_mm256_cvtph_ps(h));
}

/* The f16 scales of eight 18-byte blocks (Q4_0, IQ4_NL: words 0, 9, 18, 27
 * of 64-byte loads at +0 and +72), spread: one vpermt2w + vcvtph2ps. With
 * 4-block units this beat scalar loads (q4_0 decode 44.2 -> 48.0 GB/s,
 * iq4_nl 42.7 -> 51.3 from L2, DRAM unchanged: 1 thread, this VM). */
KX_INLINE __m512 kx_zu_f16x8_b18(const uint8_t *p) {
    const __m512i idx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 59, 59, 50,
                                         50, 41, 41, 32, 32, 27, 27, 18, 18, 9, 9, 0, 0);
    const __m512i h = _mm512_permutex2var_epi16(_mm512_loadu_si512((const void *)p), idx,
                                                _mm512_loadu_si512((const void *)(p + 72)));
    return _mm512_cvtph_ps(_mm512_castsi512_si256(h));
}

/* Bytes [16 h, 16 h + 16) of 8 blocks of stride bsz starting at q (the quant
 * bytes of block 0) as two zmm: c0 = bytes 0..7 and c1 = bytes 8..15 of that
 * range, int32 lanes 2 j and 2 j + 1 holding block j's 8 bytes. */
KX_INLINE void kx_zu_half(const uint8_t *q, size_t bsz, __m512i *c0, __m512i *c1) {
    const __m512i even = kx_zu_lanes(q, 2 * bsz);      /* blocks 0, 2, 4, 6 */
    const __m512i odd = kx_zu_lanes(q + bsz, 2 * bsz); /* blocks 1, 3, 5, 7 */
    *c0 = _mm512_unpacklo_epi64(even, odd);
    *c1 = _mm512_unpackhi_epi64(even, odd);
}

/* One full unit (8 blocks) of weights at p: w[c] holds elements 8c..8c+7 of
 * block l / 2 in int32 lane l (unsigned, see kx_z_offset); dx: lane scales. */
KX_INLINE void kx_zu_weights(enum kx_b32 k, const uint8_t *p, __m512i w[4], __m512 *dx) {
    const size_t bsz = kx_b32_size(k);
    if (k == KX_Q8_0) {
        const __m512i x80 = _mm512_set1_epi8((char)0x80);
        kx_zu_half(p + 2, bsz, &w[0], &w[1]);
        kx_zu_half(p + 18, bsz, &w[2], &w[3]);
        for (int c = 0; c < 4; c++)
            w[c] = _mm512_xor_si512(w[c], x80);
        *dx = kx_zu_f16x8(p, bsz);
        return;
    }
    /* nibble kinds: qs bytes 0..7 / 8..15 hold elements 0..7 / 8..15 in the
     * low nibbles and 16..23 / 24..31 in the high ones */
    __m512i a, b;
    kx_zu_half(p + (k == KX_MXFP4 ? 1 : 2), bsz, &a, &b);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    w[0] = _mm512_and_si512(a, m4);
    w[1] = _mm512_and_si512(b, m4);
    w[2] = _mm512_and_si512(_mm512_srli_epi16(a, 4), m4);
    w[3] = _mm512_and_si512(_mm512_srli_epi16(b, 4), m4);
    if (k == KX_Q4_0) {
        *dx = kx_zu_f16x8_b18(p);
        return;
    }
    if (k == KX_IQ4_NL) {
        /* IQ4_NL values + 128: 1..241 (vpdpbusd only) */
        const __m512i tab = _mm512_broadcast_i32x4(
            _mm_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, (char)129, (char)141, (char)153,
                          (char)166, (char)181, (char)197, (char)217, (char)241));
        for (int c = 0; c < 4; c++)
            w[c] = _mm512_shuffle_epi8(tab, w[c]);
        *dx = kx_zu_f16x8_b18(p);
        return;
    }
    /* MXFP4: E2M1 values (doubled) + 12: 0..24 */
    const __m512i tab = _mm512_broadcast_i32x4(
        _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    for (int c = 0; c < 4; c++)
        w[c] = _mm512_shuffle_epi8(tab, w[c]);
    /* e of block j (byte 17 j) into int32 lanes 2j, 2j+1; kern_e8m0_half */
    uint64_t e8 = 0;
    for (int j = 0; j < 8; j++)
        e8 |= (uint64_t)p[17 * j] << (8 * j);
    const __m512i spread =
        _mm512_set_epi32((int)0x80808007, (int)0x80808007, (int)0x80808006, (int)0x80808006,
                         (int)0x80808005, (int)0x80808005, (int)0x80808004, (int)0x80808004,
                         (int)0x80808003, (int)0x80808003, (int)0x80808002, (int)0x80808002,
                         (int)0x80808001, (int)0x80808001, (int)0x80808000, (int)0x80808000);
    const __m512i e = _mm512_shuffle_epi8(_mm512_set1_epi64((long long)e8), spread);
    const __m512i big = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __mmask16 ge2 = _mm512_cmpge_epu32_mask(e, _mm512_set1_epi32(2));
    *dx = _mm512_castsi512_ps(_mm512_mask_blend_epi32(ge2, tiny, big));
}

/* Unit u of a row of nb blocks: decoded from the file's bytes when whole,
 * from a zero-padded copy when it is the partial last unit. */
KX_INLINE void kx_zu_weights_at(enum kx_b32 k, const uint8_t *row, int64_t nb, int64_t u,
                                __m512i w[4], __m512 *dx) {
    const int B = kx_zu_blocks(k);
    const size_t ub = kx_b32_size(k) * (size_t)B;
    if ((u + 1) * B <= nb) {
        kx_zu_weights(k, row + (size_t)u * ub, w, dx);
        return;
    }
    uint8_t tmp[8 * sizeof(block_q8_0)] = {0};
    memcpy(tmp, row + (size_t)u * ub, (size_t)(nb - u * B) * kx_b32_size(k));
    kx_zu_weights(k, tmp, w, dx);
}

/* Packs unit u of one activation row (nb Q8_0 blocks) into a[0..avec): y0..y3
 * in the weights' layout (the Q8_0 weight layout without the ^ 0x80), nsum =
 * -offset * sum(y) per int32 lane, dy = lane scales (missing blocks of a
 * partial unit: zeros). */
KX_INLINE void kx_zu_pack(enum kx_b32 k, const block_q8_0 *x, int64_t nb, int64_t u, __m512i *a) {
    const int B = kx_zu_blocks(k);
    const int64_t b0 = u * B;
    const uint8_t *p = (const uint8_t *)(x + b0);
    uint8_t tmp[8 * sizeof(block_q8_0)] = {0};
    if (nb - b0 < B) {
        memcpy(tmp, p, (size_t)(nb - b0) * sizeof(block_q8_0));
        p = tmp;
    }
    kx_zu_half(p + 2, sizeof(block_q8_0), &a[0], &a[1]);
    kx_zu_half(p + 18, sizeof(block_q8_0), &a[2], &a[3]);
    const __m512i off = _mm512_set1_epi8((char)kx_z_offset(k));
    __m512i s = _mm512_setzero_si512();
    for (int c = 0; c < 4; c++)
        s = kx_z_dot_acc(s, off, a[c]);
    a[4] = _mm512_sub_epi32(_mm512_setzero_si512(), s);
    a[5] = _mm512_castps_si512(kx_zu_f16x8(p, sizeof(block_q8_0)));
}

/* nt activation rows (stride xs bytes) -> dst[(t * U + u) * avec + v]. */
KX_INLINE void kx_z_pack(enum kx_b32 k, const uint8_t *xq, size_t xs, int64_t nt, int64_t nb,
                         __m512i *dst) {
    const int B = kx_zu_blocks(k), V = kx_zu_avec(k);
    const int64_t U = (nb + B - 1) / B;
    for (int64_t t = 0; t < nt; t++)
        for (int64_t u = 0; u < U; u++)
            kx_zu_pack(k, (const block_q8_0 *)(xq + (size_t)t * xs), nb, u,
                       dst + (size_t)(t * U + u) * (size_t)V);
}

/* The per-(row, token, unit) step (see the layout comment: the only float
 * operations of the path). a: one packed activation unit. */
KX_INLINE __m512 kx_zu_fma(enum kx_b32 k, const __m512i w[4], __m512 dx, const __m512i *a,
                           __m512 acc) {
    __m512i s = kx_z_dot_acc(kx_z_dot_acc(a[4], w[0], a[0]), w[1], a[1]);
    s = kx_z_dot_acc(kx_z_dot_acc(s, w[2], a[2]), w[3], a[3]);
    return _mm512_fmadd_ps(_mm512_mul_ps(dx, _mm512_castsi512_ps(a[5])), _mm512_cvtepi32_ps(s),
                           acc);
}

/* Decode and small batches: one row, nt (<= KX_TILE, compile-time) tokens of
 * packed activations act[(t * U + u) * avec]; each weight unit is decoded
 * once and used for the nt tokens. One accumulator chain per (row, token):
 * consecutive rows overlap in the out-of-order window. */
KX_INLINE void kx_zd_row(enum kx_b32 k, const uint8_t *row, int64_t nb, const __m512i *act, int nt,
                         float *out, int64_t ldy) {
    const int B = kx_zu_blocks(k), V = kx_zu_avec(k);
    const int64_t U = (nb + B - 1) / B, full = nb / B;
    const size_t ub = kx_b32_size(k) * (size_t)B;
    __m512 acc[KX_TILE];
    for (int t = 0; t < nt; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t u = 0; u < full; u++) {
        __m512i w[4];
        __m512 dx;
        /* one prefetch per 64 bytes of the unit: the units are contiguous,
         * so consecutive prefetches are <= 64 bytes apart and hit every line */
        for (size_t o = 0; o < ub; o += 64)
            kx_pf_decode(row + (size_t)u * ub + o);
        kx_zu_weights(k, row + (size_t)u * ub, w, &dx);
        for (int t = 0; t < nt; t++)
            acc[t] = kx_zu_fma(k, w, dx, act + (size_t)(t * U + u) * (size_t)V, acc[t]);
    }
    if (full < U) {
        __m512i w[4];
        __m512 dx;
        kx_zu_weights_at(k, row, nb, full, w, &dx);
        for (int t = 0; t < nt; t++)
            acc[t] = kx_zu_fma(k, w, dx, act + (size_t)(t * U + full) * (size_t)V, acc[t]);
    }
    for (int t = 0; t < nt; t++)
        out[t * ldy] = _mm512_reduce_add_ps(acc[t]);
}

/* Rows [r0, r1) x nt (<= KX_TILE) packed tokens, one row at a time. */
KX_INLINE void kx_zd_rows(enum kx_b32 k, const struct kern_mat *w, int64_t nb, const __m512i *act,
                          int64_t nt, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
        switch (nt) {
        case 1:
            kx_zd_row(k, row, nb, act, 1, y + r, ldy);
            break;
        case 2:
            kx_zd_row(k, row, nb, act, 2, y + r, ldy);
            break;
        case 3:
            kx_zd_row(k, row, nb, act, 3, y + r, ldy);
            break;
        default:
            kx_zd_row(k, row, nb, act, 4, y + r, ldy);
            break;
        }
    }
}

/* Packed activations of up to KX_TILE tokens live on the stack up to this
 * many bytes (384 bytes per 256 columns: 32 KB holds 21845 columns of one
 * token, 5461 of 4 tokens);
 * beyond it they are malloc'd per call (a matrix that wide is several MB of
 * weights per call, so the allocation is noise). */
#define KX_Z_STACK_ACT 32768

/* Last resort when a heap buffer could not be had: one token at a time, each
 * activation unit packed into registers just before its step (same
 * operations and order, so the same bits; only slower). */
KX_INLINE void kx_zd_rows_direct(enum kx_b32 k, const struct kern_mat *w, int64_t nb,
                                 const uint8_t *xq, size_t xs, int64_t n_tok, float *y, int64_t ldy,
                                 int64_t r0, int64_t r1) {
    const int B = kx_zu_blocks(k);
    const int64_t U = (nb + B - 1) / B;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
            __m512 acc = _mm512_setzero_ps();
            for (int64_t u = 0; u < U; u++) {
                __m512i wv[4], a[6];
                __m512 dx;
                kx_zu_weights_at(k, row, nb, u, wv, &dx);
                kx_zu_pack(k, (const block_q8_0 *)(xq + (size_t)t * xs), nb, u, a);
                acc = kx_zu_fma(k, wv, dx, a, acc);
            }
            y[t * ldy + r] = _mm512_reduce_add_ps(acc);
        }
}

/* n_tok < KX_GEMM_MIN: token tiles of up to KX_TILE packed once per call. */
static void kx_zd_matmul(enum kx_b32 k, const struct kern_mat *w, const void *xq, size_t xs,
                         int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nb = w->n_cols / 32;
    const int B = kx_zu_blocks(k), V = kx_zu_avec(k);
    const int64_t U = (nb + B - 1) / B;
    const size_t per_tok = (size_t)U * (size_t)V * sizeof(__m512i);
    const int64_t tile = n_tok < KX_TILE ? n_tok : KX_TILE;
    _Alignas(64) uint8_t stack[KX_Z_STACK_ACT];
    __m512i *act = (__m512i *)stack;
    void *heap = NULL;
    if (per_tok * (size_t)tile > sizeof stack) {
        heap = aligned_alloc(64, per_tok * (size_t)tile);
        if (!heap) {
            kx_zd_rows_direct(k, w, nb, xq, xs, n_tok, y, ldy, r0, r1);
            return;
        }
        act = heap;
    }
    for (int64_t t = 0; t < n_tok; t += KX_TILE) {
        const int64_t nt = n_tok - t < KX_TILE ? n_tok - t : KX_TILE;
        kx_z_pack(k, (const uint8_t *)xq + (size_t)t * xs, xs, nt, nb, act);
        kx_zd_rows(k, w, nb, act, nt, y + t * ldy, ldy, r0, r1);
    }
    free(heap);
}

/* ---- AVX-512 GEMM for n_tok >= KX_GEMM_MIN (prefill chunks, batched decode)
 * Tokens go in chunks of KX_GEMM_CHUNK whose activations are packed once
 * (kx_z_pack); for each 4-row tile the weight units are decoded once per
 * chunk into a scratch (w0..w3, dx: 320 B per row and unit), and the 4 rows x
 * 4 tokens micro-kernel does per (row, token, unit) only kx_zu_fma: 4
 * vpdpbusd + cvt + mul + fma per 256 MACs, on 16 zmm accumulators. Same
 * operations and order per (row, token) as kx_zd_row, so results are
 * bit-identical to decode and to any tiling or split. The next 4-row tile is
 * prefetched during the first token tile (q4_0 64 tokens 154 -> 163 G MAC/s
 * with 4-block units, same command as above). */
/* Below this many tokens the decode path (kx_zd_*: 4-token passes over the
 * rows, nothing stored) beats the GEMM's unpack-once scratch: n_tok = 8,
 * `bench-model llama-3.2-1b-q4_0.gguf 2 16 16 8` (8 sequences) 48-51 ->
 * 55-58 tok/s and qwen3-0.6b-q8_0 59-69 -> 92-98 with the GEMM from 16 instead
 * of 8 (3 interleaved pairs, loaded box, 2026-12-01); at n_tok = 12 the GEMM
 * was ahead (`kernels-bench 1 1 -1 7 q4_0,q8_0 12`: 208 / 174 vs 184 / 137 G
 * MAC/s), so from 9. */
#ifndef KX_GEMM_MIN
#define KX_GEMM_MIN 9
#endif
#ifndef KX_ZG_UNITS
#define KX_ZG_UNITS 16
#endif
#ifndef KX_ZG_PF
#define KX_ZG_PF 1
#endif
#ifndef KX_GEMM_CHUNK
#define KX_GEMM_CHUNK 32
#endif

/* zmm per (row, unit) in the weight scratch: w0 (, w1), dx */
KX_INLINE int kx_zu_wvec(enum kx_b32 k) {
    return kx_zu_nvec(k) + 1;
}

/* Decodes NR rows' units [u0, u1) into wq[((u - u0) * 4 + i) * wvec]. */
KX_INLINE void kx_zg_unpack(enum kx_b32 k, const uint8_t *row0, size_t row_bytes, int NR,
                            int64_t nb, int64_t u0, int64_t u1, __m512i *wq) {
    const int W = kx_zu_wvec(k);
    for (int i = 0; i < NR; i++) {
        const uint8_t *row = row0 + (size_t)i * row_bytes;
        for (int64_t u = u0; u < u1; u++) {
            __m512i *d = wq + (size_t)((u - u0) * 4 + i) * (size_t)W;
            __m512 dx;
            kx_zu_weights_at(k, row, nb, u, d, &dx);
            d[W - 1] = _mm512_castps_si512(dx);
        }
    }
}

/* NR rows x nt tokens over units [u0, u1); act points at the tile's first
 * token. The accumulators continue from st (16 zmm) unless u0 == 0 and are
 * reduced into out when u1 == U, else stored back to st: splitting the units
 * changes no operation or its order. */
KX_INLINE void kx_zg_tile(enum kx_b32 k, const __m512i *wq, int NR, int64_t u0, int64_t u1,
                          int64_t U, const __m512i *act, int nt, __m512 *st, float *out,
                          int64_t ldy, const uint8_t *pf, size_t pf_rb) {
    const int V = kx_zu_avec(k), W = kx_zu_wvec(k);
    const size_t ub = kx_b32_size(k) * (size_t)kx_zu_blocks(k);
    __m512 acc[4][KX_TILE];
    for (int i = 0; i < NR; i++)
        for (int t = 0; t < nt; t++)
            acc[i][t] = u0 == 0 ? _mm512_setzero_ps() : st[i * KX_TILE + t];
    for (int64_t u = u0; u < u1; u++) {
        if (KX_ZG_PF && pf)
            for (int i = 0; i < 4; i++) {
                _mm_prefetch((const char *)pf + (size_t)i * pf_rb + (size_t)u * ub, _MM_HINT_T0);
                _mm_prefetch((const char *)pf + (size_t)i * pf_rb + (size_t)u * ub + 64,
                             _MM_HINT_T0);
            }
        for (int t = 0; t < nt; t++) {
            const __m512i *a = act + (size_t)(t * U + u) * (size_t)V;
            for (int i = 0; i < NR; i++) {
                const __m512i *wv = wq + (size_t)((u - u0) * 4 + i) * (size_t)W;
                acc[i][t] = kx_zu_fma(k, wv, _mm512_castsi512_ps(wv[W - 1]), a, acc[i][t]);
            }
        }
    }
    for (int i = 0; i < NR; i++)
        for (int t = 0; t < nt; t++) {
            if (u1 == U)
                out[t * ldy + i] = _mm512_reduce_add_ps(acc[i][t]);
            else
                st[i * KX_TILE + t] = acc[i][t];
        }
}

/* Rows [r0, r1) x nt (<= KX_GEMM_CHUNK) packed tokens: 4-row tiles, then
 * single rows. Units go in blocks of KX_ZG_UNITS (4096 columns), decoded once
 * per chunk into wq, and each block runs over all token tiles (KX_TILE,
 * compile-time remainders) before the next, so the block's weights (4 x 16 x
 * 320 B = 20 KB) stay in L1 while a token tile's activations (24 KB) stream
 * through; the token tiles' accumulators wait in st ((KX_GEMM_CHUNK /
 * KX_TILE) x 16 zmm) between blocks. KX_ZG_UNITS 4 / 8 / 16: q4_0 64 tokens
 * 203 / 236 / 250 G MAC/s (4096 columns, same command as above); with the
 * earlier 4-block units, blocks of 2048 columns beat whole rows 190 / 150. */
KX_INLINE void kx_zg_rows(enum kx_b32 k, const struct kern_mat *w, int64_t nb, const __m512i *act,
                          int64_t nt, __m512i *wq, __m512 *st, float *y, int64_t ldy, int64_t r0,
                          int64_t r1) {
    const int B = kx_zu_blocks(k), V = kx_zu_avec(k);
    const int64_t U = (nb + B - 1) / B;
    const size_t rb = w->row_bytes;
    for (int64_t r = r0; r < r1; r += r + 4 <= r1 ? 4 : 1) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * rb;
        const int four = r + 4 <= r1;
        /* the next 4-row tile, prefetched during the first token tile */
        const uint8_t *next = four && r + 8 <= r1 ? row + 4 * rb : NULL;
        for (int64_t u0 = 0; u0 < U; u0 += KX_ZG_UNITS) {
            const int64_t u1 = U - u0 < KX_ZG_UNITS ? U : u0 + KX_ZG_UNITS;
            kx_zg_unpack(k, row, rb, four ? 4 : 1, nb, u0, u1, wq);
            for (int64_t t = 0; t < nt; t += KX_TILE) {
                const __m512i *a = act + (size_t)(t * U) * (size_t)V;
                float *o = y + t * ldy + r;
                const uint8_t *pf = t == 0 ? next : NULL;
                __m512 *s = st + (t / KX_TILE) * 4 * KX_TILE;
                /* rows and tokens must be constants in each call: one copy per shape */
                switch ((four ? 10 : 0) + (nt - t < KX_TILE ? (int)(nt - t) : KX_TILE)) {
#define KX_ZG_CASE(R, T)                                                                           \
    case (R == 4 ? 10 : 0) + T:                                                                    \
        kx_zg_tile(k, wq, R, u0, u1, U, a, T, s, o, ldy, pf, rb);                                  \
        break;
                    KX_ZG_CASE(4, 4)
                    KX_ZG_CASE(4, 3)
                    KX_ZG_CASE(4, 2)
                    KX_ZG_CASE(4, 1)
                    KX_ZG_CASE(1, 4)
                    KX_ZG_CASE(1, 3)
                    KX_ZG_CASE(1, 2)
                default:
                    kx_zg_tile(k, wq, 1, u0, u1, U, a, 1, s, o, ldy, pf, rb);
#undef KX_ZG_CASE
                }
            }
        }
    }
}

/* The GEMM over all tokens; 0 when the scratch could not be allocated (the
 * caller then takes the decode path, same bits). */
static int kx_zg_matmul(enum kx_b32 k, const struct kern_mat *w, const void *xq, size_t xs,
                        int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nb = w->n_cols / 32;
    const int B = kx_zu_blocks(k), V = kx_zu_avec(k), W = kx_zu_wvec(k);
    const int64_t U = (nb + B - 1) / B;
    const size_t act_bytes = (size_t)KX_GEMM_CHUNK * (size_t)U * (size_t)V * sizeof(__m512i);
    const size_t wq_bytes = (size_t)(4 * KX_ZG_UNITS) * (size_t)W * sizeof(__m512i);
    const size_t st_bytes = (size_t)(KX_GEMM_CHUNK / KX_TILE) * 4 * KX_TILE * sizeof(__m512);
    uint8_t *buf = aligned_alloc(64, act_bytes + wq_bytes + st_bytes);
    if (!buf)
        return 0;
    __m512i *act = (__m512i *)buf;
    __m512i *wq = (__m512i *)(buf + act_bytes);
    __m512 *st = (__m512 *)(buf + act_bytes + wq_bytes);
    for (int64_t t0 = 0; t0 < n_tok; t0 += KX_GEMM_CHUNK) {
        int64_t nt = n_tok - t0 < KX_GEMM_CHUNK ? n_tok - t0 : KX_GEMM_CHUNK;
        kx_z_pack(k, (const uint8_t *)xq + (size_t)t0 * xs, xs, nt, nb, act);
        kx_zg_rows(k, w, nb, act, nt, wq, st, y + t0 * ldy, ldy, r0, r1);
    }
    free(buf);
    return 1;
}
#endif

/* Rows per tile when n_tok > 1 on the 256-bit path: the accumulators (2 x
 * KX_PF_ROWS x KX_TILE) plus the tile's activations must fit the register
 * file (16 ymm on AVX2, 32 with AVX-512VL). */
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
    if (KX_Z_KIND(k)) {
        if (n_tok < KX_GEMM_MIN || !kx_zg_matmul(k, w, xq, xs, n_tok, y, ldy, r0, r1))
            kx_zd_matmul(k, w, xq, xs, n_tok, y, ldy, r0, r1);
        return;
    }
#endif
    if (n_tok == 1) {
        /* Decode: KX_DECODE_ROWS rows share each activation block (see there). */
        for (; KX_DECODE_ROWS > 1 && r + KX_DECODE_ROWS <= r1; r += KX_DECODE_ROWS)
            kx_b32_tile(k, (const uint8_t *)w->data + (size_t)r * rb, rb, KX_DECODE_ROWS, nb, x8,
                        xs, 1, y + r, ldy);
    } else {
        /* Prefill: KX_PF_ROWS rows x KX_TILE tokens; each weight block is
         * unpacked once per KX_TILE tokens, each activation block loaded once
         * per KX_PF_ROWS rows. */
        for (; r + KX_PF_ROWS <= r1; r += KX_PF_ROWS) {
            const uint8_t *row = (const uint8_t *)w->data + (size_t)r * rb;
            int64_t t = 0;
            for (; t + KX_TILE <= n_tok; t += KX_TILE)
                kx_b32_tile(k, row, rb, KX_PF_ROWS, nb, x8 + t * xs, xs, KX_TILE, y + t * ldy + r,
                            ldy);
            switch (n_tok - t) {
            case 3:
                kx_b32_tile(k, row, rb, KX_PF_ROWS, nb, x8 + t * xs, xs, 3, y + t * ldy + r, ldy);
                break;
            case 2:
                kx_b32_tile(k, row, rb, KX_PF_ROWS, nb, x8 + t * xs, xs, 2, y + t * ldy + r, ldy);
                break;
            case 1:
                kx_b32_tile(k, row, rb, KX_PF_ROWS, nb, x8 + t * xs, xs, 1, y + t * ldy + r, ldy);
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
            kx_b32_tile(k, row, 0, 1, nb, x8 + t * xs, xs, KX_TILE, y + t * ldy + r, ldy);
        switch (n_tok - t) {
        case 3:
            kx_b32_tile(k, row, 0, 1, nb, x8 + t * xs, xs, 3, y + t * ldy + r, ldy);
            break;
        case 2:
            kx_b32_tile(k, row, 0, 1, nb, x8 + t * xs, xs, 2, y + t * ldy + r, ldy);
            break;
        case 1:
            kx_b32_tile(k, row, 0, 1, nb, x8 + t * xs, xs, 1, y + t * ldy + r, ldy);
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
