/* engine/kernels-x86-pk.h: AVX-512 kernels over the 16-row packed layout of
 * Q4_K and Q6_K (kernels-pack.c has the layout), against Q8_K activations.
 * Part of kernels-x86-k.h (included from there, after kernels-x86-kz.h);
 * compiled only into the AVX-512 builds. Threading: reentrant (stack only).
 *
 * Lane r of every vector is row r of the group. Per (row, token) and super-
 * block b, in this order whatever the batch or the row split:
 *   I_j = sum of q * y over sub-block j: vpdpbusd of 4 quants of 16 rows
 *     (one dword each) with the token's 4 activations broadcast, 8 (Q4_K) or
 *     4 (Q6_K) per sub-block, exact in int32; Q6_K's accumulator starts at
 *     -32 * bsums[j] (its +32 offset);
 *   g = fma(float(I_j), S_j, g) over the sub-blocks in a fixed order, S_j =
 *     d * sc_j (exact in f32);
 *   Q4_K: H = sum over j of m_j * (bsums[2j] + bsums[2j + 1]), exact in
 *     int32 (vpdpwssd on int16 pairs), h = dmin * float(H), then tot =
 *     fma(g - h, d_act, tot); Q6_K: tot = fma(g, d_act, tot);
 * so decode (1 token) and any batch give the same bits. Tokens go 8, 4, 2,
 * 1 at a time; each super-block of 16 rows is unpacked once per tile.
 *
 * Measured (this 2-vCPU AMD EPYC VM, avx512-vnni, 2026-12-01, release):
 *   1 thread, 1 MB of weights in L2: a stand-alone version of the Q4_K tile,
 *     8 tokens, 268-288 G MAC/s against kx_matmul_q4_K's 151-164 (q6_K
 *     104-153) in the same locked run (`taskset -c 1 kernels-bench 1 1 -1 5
 *     q4_K,q6_K 8`).
 *   End to end, llama-3.2-1b Q4_K_M, 2 threads, two interleaved rounds under
 *     the bench lock, `STRATA_REPACK=0|1 bench-model MODEL 2 16 64 8` etc.
 *     (unpacked -> packed): 8 sequences a step 57.9 / 61.8 -> 25.4 / 26.3 ms
 *     (138 / 130 -> 315 / 304 tok/s); prefill of 64 tokens 284 / 277 -> 474
 *     / 464 tok/s, of 512 tokens 281 / 282 -> 396 / 417 tok/s; one sequence
 *     (`... 2 64 16 1 BYTES`) 104.3 / 103.2% -> 103.8 / 101.5% of the
 *     interleaved roofline: decode of one stream stays memory-bound.
 *   Per-token values of a super-block computed with vector ops into the
 *     stack, then broadcast from memory (Q6_K: -32 * bsums[k] as the
 *     accumulators' start; Q4_K: the bsums pair sums of the mins term)
 *     instead of scalar code per sub-block, `kernels-bench 1 1 -1 5 TYPE N`
 *     (N = 8, 16), two interleaved rounds: q6_K 163-169 -> 185-188 G MAC/s,
 *     q4_K 273-286 -> 285-298. Tried and dropped: Q6_K's scales applied in
 *     int32 (vpmulld into one exact sum a super-block, one cvt + fma) instead
 *     of cvt + fma per sub-block: 185 -> 162.
 *   Token tiles of equal size (11 tokens as 6 + 5, not 8 + 2 + 1: each tile
 *     unpacks the weights once, and a 1-token tile pays that for one token),
 *     `bench-model llama-3.2-1b-q4_k_m MODEL 2 24 16 N`, three interleaved
 *     rounds, ms a step: N = 3: 21.4-21.5 -> 13.3-18.1; 6: 24.5-24.9 ->
 *     19.1-21.3; 11: 40.9-42.2 -> 32.9-34.9; 16: 47.9-50.1 -> 46.1-49.6.
 *   Decode prefetch, from DRAM, against the file layout's kernels on the same
 *     rows in the same rounds (`kernels-bench 256 2 -1 3 q4_K,q6_K 1`, two
 *     rounds, GB/s 1 / 2 threads, file layout in brackets): every line of a
 *     super-block 8 KB ahead at its start: q4_K 37.8-38.3 / 46.2-47.0 (42.1-
 *     42.3 / 51.8-52.4), q6_K 40.7-41.3 / 52.1-52.6 (43.2-43.8 / 53.3-54.0);
 *     one line per inner iteration: q4_K 39.5-42.1 / 54.6-55.0 (43.3 /
 *     52.0-53.1), q6_K 26.6-26.7 / 50.3-51.5; 16 KB ahead or 4 KB: no
 *     better; none: q4_K 26.2 / 41, q6_K 35 / 47. So Q4_K spreads its
 *     prefetches, Q6_K issues them at the super-block's start.
 *   Q4_K's mins term as the exact integer H (4 vpdpwssd a token and
 *     super-block) instead of 8 float fmas of broadcast bsums, two
 *     interleaved rounds: `taskset -c 1 kernels-bench 1 1 -1 5 q4_K 8` 303 /
 *     306 -> 323 / 325 G MAC/s, decode from L2 54-56 -> 59-60 GB/s.
 *   vpdpbusd with the activation dword as an embedded-broadcast memory
 *     operand ({1to16}) instead of the intrinsic's separate vpbroadcastd,
 *     three interleaved rounds: `taskset -c 1 kernels-bench 1 1 -1 5
 *     q4_K,q6_K 8` q4_K 262-267 -> 295-297 G MAC/s, q6_K 221-222 -> 234-236;
 *     `bench-model llama-3.2-1b-q4_k_m-llama3vocab 2 48 16 8` 24.6-24.8 ->
 *     23.2-23.5 ms a step of 8; prefill of 64 tokens 480-510 -> 531-545
 *     tok/s. (This core's peak, 12 independent vpdpbusd chains: 8.1 G/s, 520
 *     G MAC/s.)
 *   Q6_K's loops unrolled by pragma: gcc 12 had kept the q and c loops as
 *     loops with the shifts chosen by branches and 16 register copies per 8
 *     vpdpbusd; and -32 * bsums broadcast from memory (without the asm
 *     barrier gcc forwards the stored vector and extracts lanes with two
 *     shuffles each). `taskset -c 1 kernels-bench 1 1 -1 5 q6_K 8`, two
 *     interleaved rounds (L2): decode 37.8-40.3 -> 52-58 GB/s, 8 tokens
 *     166-183 -> 217-235 G MAC/s; `bench-model llama-3.2-1b-q4_k_m-llama3vocab
 *     2 48 16 8`, three rounds: 25.0-26.6 -> 24.3-25.7 ms a step of 8.
 */
#ifndef STRATA_KERNELS_X86_PK_H
#define STRATA_KERNELS_X86_PK_H

#if defined(__AVX512BW__)
#include <string.h>

#define KX_PK_T 8 /* tokens per tile, at most */

/* acc + 4 quants of each row (u) times the token's 4 activations at y4. */
KX_INLINE __m512i kx_pk_dp(__m512i acc, __m512i u, const int8_t *y4) {
#if KX_VNNI
    /* the activation dword as vpdpbusd's embedded broadcast memory operand
     * (gcc 12 emits a separate vpbroadcastd for the intrinsic) */
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*(const int32_t *)y4));
    return acc;
#else
    int32_t v;
    memcpy(&v, y4, 4);
    return kx_z_dot_acc(acc, u, _mm512_set1_epi32(v));
#endif
}

KX_INLINE __m512 kx_pk_u8f(__m128i b) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
}

/* Line i of a super-block's 64-byte lines, prefetched ahead (kx_pf_decode;
 * the Q4_K tile issues one per inner iteration while lines remain). */
KX_INLINE void kx_pk_prefetch_line(const uint8_t *ps, int i, int n_lines) {
    if (i < n_lines)
        kx_pf_decode(ps + 64 * i);
}

/* Every line of a super-block, prefetched ahead at once (Q6_K). */
KX_INLINE void kx_pk_prefetch(const uint8_t *p, size_t bytes) {
    for (size_t i = 0; i < bytes; i += 64)
        kx_pf_decode(p + i);
}

/* Q4_K packed super-block -> S_j = d * sc_j (16 rows) and the mins as int16
 * pairs: dword lane r of mp[i] = (m_2i, m_2i+1) of row r. */
KX_INLINE void kx_pk_q4k_scales(const uint8_t *ps, float S[8][16], __m512i mp[4]) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(ps + 2240)));
    __m128i mn8[8];
    const __m128i m63 = _mm_set1_epi8(63), m15 = _mm_set1_epi8(15), m3 = _mm_set1_epi8(3);
    __m128i q[12];
    for (int i = 0; i < 12; i++)
        q[i] = _mm_loadu_si128((const __m128i *)(ps + 2048 + 16 * i));
    for (int j = 0; j < 8; j++) {
        __m128i sc, mn;
        if (j < 4) {
            sc = _mm_and_si128(q[j], m63);
            mn = _mm_and_si128(q[j + 4], m63);
        } else { /* ggml's get_scale_min_k4, 16 rows a byte each */
            const __m128i hs = _mm_and_si128(_mm_srli_epi16(q[j - 4], 6), m3);
            const __m128i hm = _mm_and_si128(_mm_srli_epi16(q[j], 6), m3);
            sc = _mm_or_si128(_mm_and_si128(q[j + 4], m15), _mm_slli_epi16(hs, 4));
            mn = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(q[j + 4], 4), m15),
                              _mm_slli_epi16(hm, 4));
        }
        _mm512_store_ps(S[j], _mm512_mul_ps(d, kx_pk_u8f(sc)));
        mn8[j] = mn;
    }
    for (int i = 0; i < 4; i++) /* bytes m_2i(r), m_2i+1(r) adjacent, then widened to int16 */
        mp[i] =
            _mm512_cvtepu8_epi16(_mm256_set_m128i(_mm_unpackhi_epi8(mn8[2 * i], mn8[2 * i + 1]),
                                                  _mm_unpacklo_epi8(mn8[2 * i], mn8[2 * i + 1])));
}

/* T tokens (compile-time after inlining) x 16 rows of a Q4_K group. */
KX_INLINE void kx_pk_q4k_tile(const uint8_t *grp, int64_t nb, const uint8_t *xq, size_t xs,
                              const int T, int pf, float *out) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 tot[KX_PK_T];
    for (int t = 0; t < T; t++)
        tot[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *ps = grp + (size_t)b * 2304;
        float S[8][16] __attribute__((aligned(64)));
        __m512i mp[4];
        kx_pk_q4k_scales(ps, S, mp);
        const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(ps + 2272)));
        const block_q8_K *a[KX_PK_T];
        __m512 g[KX_PK_T];
        for (int t = 0; t < T; t++) {
            a[t] = (const block_q8_K *)(xq + (size_t)t * xs) + b;
            g[t] = _mm512_setzero_ps();
        }
        for (int j = 0; j < 8; j++) { /* sub-block j: nibble j & 1 of qs chunk j / 2 */
            const int p = j >> 1, hi = j & 1;
            __m512i acc[KX_PK_T];
            for (int t = 0; t < T; t++)
                acc[t] = _mm512_setzero_si512();
            for (int c = 0; c < 8; c++) {
                if (pf)
                    kx_pk_prefetch_line(ps, j * 8 + c, 36);
                __m512i w = _mm512_loadu_si512((const void *)(ps + (p * 8 + c) * 64));
                w = _mm512_and_si512(hi ? _mm512_srli_epi16(w, 4) : w, m4);
                for (int t = 0; t < T; t++)
                    acc[t] = kx_pk_dp(acc[t], w, a[t]->qs + 64 * p + 32 * hi + 4 * c);
            }
            const __m512 s = _mm512_load_ps(S[j]);
            for (int t = 0; t < T; t++)
                g[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t]), s, g[t]);
        }
        for (int t = 0; t < T; t++) {
            /* p_j = bsums[2j] + bsums[2j + 1] (|p_j| <= 32 * 127) as int16
             * pairs (p_2i, p_2i+1): dwords 0, 1 and 4, 5 of the packs */
            int32_t pj[8] __attribute__((aligned(32)));
            const __m256i p = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[t]->bsums),
                                                _mm256_set1_epi16(1));
            _mm256_store_si256((__m256i *)pj, _mm256_packs_epi32(p, p));
            /* sum_j m_j * p_j, exact in int32 (<= 8 * 63 * 4064) */
            __m512i hi = kx_kz_dpw(_mm512_setzero_si512(), mp[0], _mm512_set1_epi32(pj[0]));
            hi = kx_kz_dpw(hi, mp[1], _mm512_set1_epi32(pj[1]));
            hi = kx_kz_dpw(hi, mp[2], _mm512_set1_epi32(pj[4]));
            hi = kx_kz_dpw(hi, mp[3], _mm512_set1_epi32(pj[5]));
            const __m512 h = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(hi));
            tot[t] = _mm512_fmadd_ps(_mm512_sub_ps(g[t], h), _mm512_set1_ps(a[t]->d), tot[t]);
        }
    }
    for (int t = 0; t < T; t++)
        _mm512_store_ps(out + 16 * t, tot[t]);
}

/* T tokens x 16 rows of a Q6_K group. */
KX_INLINE void kx_pk_q6k_tile(const uint8_t *grp, int64_t nb, const uint8_t *xq, size_t xs,
                              const int T, int pf, float *out) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    __m512 tot[KX_PK_T];
    for (int t = 0; t < T; t++)
        tot[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *ps = grp + (size_t)b * 3360;
        if (pf)
            kx_pk_prefetch(ps, 3360);
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(ps + 3328)));
        const block_q8_K *a[KX_PK_T];
        __m512 g[KX_PK_T];
        int32_t off[KX_PK_T][16] __attribute__((aligned(64))); /* -32 * bsums[k] */
        for (int t = 0; t < T; t++) {
            a[t] = (const block_q8_K *)(xq + (size_t)t * xs) + b;
            g[t] = _mm512_setzero_ps();
            const __m512i bs =
                _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)a[t]->bsums));
            _mm512_store_si512((void *)off[t],
                               _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(bs, 5)));
        }
        /* broadcast from memory, not lane shuffles of a register */
        __asm__("" : "+m"(off));
        /* Sub-block k = 8n + half + 2q holds quant q of ql/qh dwords c =
         * 4 * half .. 4 * half + 3 of half n (elements 128n + 32q + 4c ..). */
#pragma GCC unroll 2
        for (int n = 0; n < 2; n++)
#pragma GCC unroll 2
            for (int half = 0; half < 2; half++)
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++) {
                    const int k = 8 * n + half + 2 * q;
                    __m512i acc[KX_PK_T];
                    for (int t = 0; t < T; t++)
                        acc[t] = _mm512_set1_epi32(off[t][k]);
#pragma GCC unroll 4
                    for (int c = 4 * half; c < 4 * half + 4; c++) {
                        const __m512i l = _mm512_loadu_si512(
                            (const void *)(ps + (n * 16 + c + ((q & 1) ? 8 : 0)) * 64));
                        const __m512i h =
                            _mm512_loadu_si512((const void *)(ps + 2048 + (n * 8 + c) * 64));
                        __m512i lo = (q & 2) ? _mm512_srli_epi16(l, 4) : l, hb;
                        if (q == 0)
                            hb = _mm512_slli_epi16(h, 4);
                        else if (q == 1)
                            hb = _mm512_slli_epi16(h, 2);
                        else if (q == 2)
                            hb = h;
                        else
                            hb = _mm512_srli_epi16(h, 2);
                        /* (lo & 0x0F) | (hb & 0x30) */
                        const __m512i w =
                            _mm512_ternarylogic_epi32(_mm512_and_si512(lo, m4), hb, m30, 0xF8);
                        for (int t = 0; t < T; t++)
                            acc[t] = kx_pk_dp(acc[t], w, a[t]->qs + 128 * n + 32 * q + 4 * c);
                    }
                    const __m512 s =
                        _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                             (const __m128i *)(ps + 3072 + 16 * k)))));
                    for (int t = 0; t < T; t++)
                        g[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t]), s, g[t]);
                }
        for (int t = 0; t < T; t++)
            tot[t] = _mm512_fmadd_ps(g[t], _mm512_set1_ps(a[t]->d), tot[t]);
    }
    for (int t = 0; t < T; t++)
        _mm512_store_ps(out + 16 * t, tot[t]);
}

/* One tile of T tokens (a constant at each call, so each T is its own code). */
KX_INLINE void kx_pk_tile(int q6, const uint8_t *grp, int64_t nb, const uint8_t *x, size_t xs,
                          const int T, int pf, float *out) {
    if (q6)
        kx_pk_q6k_tile(grp, nb, x, xs, T, pf, out);
    else
        kx_pk_q4k_tile(grp, nb, x, xs, T, pf, out);
}

/* Rows [r0, r1) of a packed matrix: whole groups, the lanes outside [r0, r1)
 * computed and not stored (same bits for the stored ones). The first token
 * tile of a group prefetches its weights (they come from DRAM); later tiles
 * find them in L2. */
KX_INLINE void kx_matmul_pk(int q6, const struct kern_mat *w, const void *xq, size_t xs,
                            int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nb = w->n_cols / QK_K;
    const size_t gbytes = (size_t)nb * KERNELS_PACK_ROWS * (q6 ? 210 : 144);
    float out[KX_PK_T * 16] __attribute__((aligned(64)));
    for (int64_t g = r0 / KERNELS_PACK_ROWS; g * KERNELS_PACK_ROWS < r1; g++) {
        const uint8_t *grp = (const uint8_t *)w->data + (size_t)g * gbytes;
        const int64_t base = g * KERNELS_PACK_ROWS;
        const int lo = r0 > base ? (int)(r0 - base) : 0;
        const int hi = r1 - base < KERNELS_PACK_ROWS ? (int)(r1 - base) : KERNELS_PACK_ROWS;
        const __mmask16 mask = (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
        for (int64_t t = 0; t < n_tok;) {
            /* the tokens left in tiles of equal size, at most KX_PK_T: 11 is 6 + 5
             * rather than 8 + 2 + 1 (each tile unpacks the weights once) */
            const int64_t left = n_tok - t, tiles = (left + KX_PK_T - 1) / KX_PK_T;
            const int n = (int)((left + tiles - 1) / tiles);
            const uint8_t *x = (const uint8_t *)xq + (size_t)t * xs;
            const int pf = t == 0;
            switch (n) { /* T must be a constant in each call: one copy per size */
#define KX_PK_CASE(T)                                                                              \
    case T:                                                                                        \
        kx_pk_tile(q6, grp, nb, x, xs, T, pf, out);                                                \
        break;
                KX_PK_CASE(8)
                KX_PK_CASE(7)
                KX_PK_CASE(6)
                KX_PK_CASE(5)
                KX_PK_CASE(4)
                KX_PK_CASE(3)
                KX_PK_CASE(2)
            default:
                kx_pk_tile(q6, grp, nb, x, xs, 1, pf, out);
                break;
#undef KX_PK_CASE
            }
            for (int i = 0; i < n; i++)
                _mm512_mask_storeu_ps(y + (t + i) * ldy + base, mask, _mm512_load_ps(out + 16 * i));
            t += n;
        }
    }
}

static void kx_matmul_pk_q4_K(const struct kern_mat *w, const void *xq, size_t xs, int64_t n_tok,
                              float *y, int64_t ldy, int64_t r0, int64_t r1) {
    kx_matmul_pk(0, w, xq, xs, n_tok, y, ldy, r0, r1);
}

static void kx_matmul_pk_q6_K(const struct kern_mat *w, const void *xq, size_t xs, int64_t n_tok,
                              float *y, int64_t ldy, int64_t r0, int64_t r1) {
    kx_matmul_pk(1, w, xq, xs, n_tok, y, ldy, r0, r1);
}

#endif /* __AVX512BW__ */
#endif
