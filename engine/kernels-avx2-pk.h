/* engine/kernels-avx2-pk.h: AVX2 kernels over the 16-row packed layout of
 * Q4_0, Q8_0, IQ4_NL, MXFP4 and Q4_K (kernels-pack.c has the layout; Q4_K's
 * is the one the AVX-512 kernels use too), against Q8_0 / Q8_K activations. Included by
 * kernels-avx2.c only (after kernels-x86.h); the functions are static.
 * Threading: reentrant (stack, or a heap scratch per call).
 *
 * Why a packed layout on AVX2. Lane r of a ymm is row r: 4 columns of 8
 * rows are one vpmaddubsw against the token's 4 activations broadcast, and
 * the products of 8 such columns add up exactly in int16 (4-bit quants: 8 *
 * 2 * 15 * 128 = 30720 < 32767) before one widening. Per 32 multiply-adds:
 *   Q4_0: ~2.6 ALU operations against 5 in the GGUF layout (vpmaddubsw,
 *     vpmaddwd, cvt, scale product, fma: one float scale per 32 weights,
 *     kx_b32_step); decode converts 16 rows' scales with two vcvtph2ps.
 *   Q4_K: ~2.2 against 3 (vpmaddubsw, vpmaddwd with the sub-block scale,
 *     vpaddd: kx_kg_tile), and the float work per super-block once per 8
 *     rows instead of per row.
 *   Q8_0: 4 (vpsignb, vpmaddubsw, vpmaddwd, vpaddd: signed pairs of 8-bit
 *     values fill int16, so no int16 sums) against 6, and the float work
 *     once per 8 rows. Tried and dropped: the weights as two unsigned
 *     nibbles (16 hi + lo, two vpmaddubsw and two int16 sums per 4
 *     columns, no vpsignb): 66-74 G MAC/s against 98-109 (spills).
 * Q6_K stays in the GGUF layout on AVX2: its 6-bit quants allow only two
 * vpmaddubsw per int16 sum and its scales cover 16 weights, so a packed
 * kernel (written and measured, not kept) did 2.5 operations per 32 where
 * kx_q6k_tile does 3, but decoded slower: this 2-vCPU Xeon VM, AVX2
 * forced, `kernels-bench 256 2 1 3 q4_K,q6_K 1` (DRAM, 2 threads) packed
 * q6_K 17.3-19.1 GB/s against 19.6-21.6 for the GGUF rows in the same
 * rounds; `bench-model MODEL 2 48 128 1 0 avx2` / `... 2 16 8 8 0 avx2`,
 * two interleaved rounds (with / without it): llama-3.2-1b Q4_K_M decode
 * 24.8-25.2 / 26.7-27.2 tok/s, 8 sequences 89-92 / 83-86 tok/s, prefill
 * 143-157 / 134-150; Q4_0 decode 30.4 / 33.0 tok/s, 8 sequences 97 / 98.
 * One stream's decode was worth more than the batches' 5-7%.
 *
 * Measured (same VM, AVX2 forced, 2 threads, L2-resident 2 MB,
 * `kernels-bench 2 2 1 5 q4_0,q4_K N`): q4_0 decode 11 -> 29-31 GB/s a
 * thread, n_tok = 8 50 -> 136-156 G MAC/s; q4_K decode 17 -> 19-20 GB/s,
 * n_tok = 8 93 -> 190 G MAC/s; q8_0 decode 25 -> 33-36 GB/s, n_tok = 8 60
 * -> 101 G MAC/s; iq4_nl / mxfp4 (`... 2 2 1 3 iq4_nl,mxfp4 N`) decode 10.3
 * -> 21-24 GB/s, n_tok = 8 ~30 -> 117 / 132 G MAC/s (GGUF layout -> packed).
 *
 * Per (row, token) and block b of Q4_0, in this order whatever the batch,
 * the tile or the row split:
 *   P = sum over c = 0..3 of (maddubs(lo_c, y[4c..]) + maddubs(hi_c,
 *     y[16 + 4c..])) in int16 (exact), I = madd(P, 1) - 8 * sum(y) in int32
 *     (exact: the -8 offset of Q4_0 through the activation's sum);
 *   tot = fma(float(I), d_w * d_y, tot);
 * so decode (1 token) and any batch give the same bits.
 */
#ifndef STRATA_KERNELS_AVX2_PK_H
#define STRATA_KERNELS_AVX2_PK_H

#if !defined(__AVX512F__)

#define KX_P2_T 8      /* tokens per tile, at most */
#define KX_P2_CHUNK 32 /* tokens whose activation scalars are prepared at once */
#define KX_P2_Q4_0_BYTES (16 * sizeof(block_q4_0)) /* one packed block: 288 */

/* For tokens [0, nt) and blocks [0, nb): dy = the activation scale and,
 * when cs is not NULL (Q4_0), cs = -8 * (sum of the block's 32
 * activations), at [t * nb + b]. */
static void kx_p2_prep(const uint8_t *xq, size_t xs, int64_t nt, int64_t nb, float *dy,
                       int32_t *cs) {
    const __m256i one8 = _mm256_set1_epi8(1);
    for (int64_t t = 0; t < nt; t++) {
        const block_q8_0 *a = (const block_q8_0 *)(xq + (size_t)t * xs);
        for (int64_t b = 0; b < nb; b++) {
            dy[t * nb + b] = kx_f16(a[b].d);
            if (!cs)
                continue;
            const __m256i y = _mm256_loadu_si256((const __m256i *)a[b].qs);
            const __m256i s =
                _mm256_madd_epi16(_mm256_maddubs_epi16(one8, y), _mm256_set1_epi16(1));
            __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
            cs[t * nb + b] = -8 * _mm_cvtsi128_si32(h);
        }
    }
}

/* T tokens x the 8 rows of H halves (from half h0) of one Q4_0 group;
 * out[(k * T + t) * 8 + i] for half h0 + k. Per block and half the 8 weight
 * vectors are unpacked into registers once and every token runs over them
 * (token-outer: 8 weights + 1 accumulator + broadcasts fit 16 ymm for any
 * T; the totals live in tot[] and are touched once per block). With the
 * four tokens' accumulators kept beside the weights instead, gcc 12
 * spilled them to the stack (8 sequences of llama-3.2-1b Q4_0, perf
 * annotate: the hottest instructions were spill stores and reloads). */
KX_INLINE void kx_p2_q4_0_tile(const uint8_t *grp, int64_t nb, int h0, const int H,
                               const uint8_t *xq, size_t xs, const float *dy, const int32_t *cs,
                               const int T, int pf, float *out) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 tot[2 * KX_P2_T];
    for (int k = 0; k < H * T; k++)
        tot[k] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pb = grp + (size_t)b * KX_P2_Q4_0_BYTES;
        if (pf)
            for (int l = 0; l < 5; l++)
                kx_pf_decode(pb + 64 * l);
        for (int k = 0; k < H; k++) {
            const int h = h0 + k;
            __m256i wl[4], wh[4];
            for (int c = 0; c < 4; c++) {
                const __m256i raw = _mm256_loadu_si256((const __m256i *)(pb + c * 64 + 32 * h));
                wl[c] = _mm256_and_si256(raw, m4);
                wh[c] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
            }
            const __m256 dx =
                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(pb + 256 + 16 * h)));
            for (int t = 0; t < T; t++) {
                const int8_t *y = ((const block_q8_0 *)(xq + (size_t)t * xs) + b)->qs;
                __m256i acc = _mm256_setzero_si256();
                for (int c = 0; c < 4; c++) {
                    int32_t ylo, yhi;
                    memcpy(&ylo, y + 4 * c, 4);
                    memcpy(&yhi, y + 16 + 4 * c, 4);
                    const __m256i p =
                        _mm256_add_epi16(_mm256_maddubs_epi16(wl[c], _mm256_set1_epi32(ylo)),
                                         _mm256_maddubs_epi16(wh[c], _mm256_set1_epi32(yhi)));
                    acc = c == 0 ? p : _mm256_add_epi16(acc, p);
                }
                const __m256i i32 = _mm256_add_epi32(_mm256_madd_epi16(acc, _mm256_set1_epi16(1)),
                                                     _mm256_set1_epi32(cs[t * nb + b]));
                tot[k * T + t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32),
                                                 _mm256_mul_ps(dx, _mm256_set1_ps(dy[t * nb + b])),
                                                 tot[k * T + t]);
            }
        }
    }
    for (int k = 0; k < H * T; k++)
        _mm256_storeu_ps(out + k * 8, tot[k]);
}

/* ---- Q8_0 -------------------------------------------------------------------
 * Signed weights and activations: each 4-column product of 8 rows is
 * vpmaddubsw(|w|, sign(y, w)) (|y| <= 127, so the sign trick is exact;
 * pairs <= 2 * 127 * 127 fit int16 but no sum of two does), widened by
 * vpmaddwd(1) and added in int32: I exact; tot = fma(float(I), d_w * d_y,
 * tot). Columns outer, tokens inner: a column's weights load once a tile and
 * T <= 4 tokens' accumulators (4 int32 + 4 float) stay in registers. */
#define KX_P2_Q8_0_BYTES (16 * sizeof(block_q8_0)) /* one packed block: 544 */
#define KX_P2_T8 4                                 /* Q8_0 tokens per tile, at most */

KX_INLINE void kx_p2_q8_0_tile(const uint8_t *grp, int64_t nb, int h0, const int H,
                               const uint8_t *xq, size_t xs, const float *dy, const int T, int pf,
                               float *out) {
    __m256 tot[2 * KX_P2_T];
    for (int k = 0; k < H * T; k++)
        tot[k] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pb = grp + (size_t)b * KX_P2_Q8_0_BYTES;
        if (pf)
            for (int l = 0; l < 9; l++)
                kx_pf_decode(pb + 64 * l);
        for (int k = 0; k < H; k++) {
            const int h = h0 + k;
            __m256i acc[KX_P2_T];
            for (int c = 0; c < 8; c++) {
                const __m256i wv = _mm256_loadu_si256((const __m256i *)(pb + c * 64 + 32 * h));
                const __m256i aw = _mm256_sign_epi8(wv, wv);
                for (int t = 0; t < T; t++) {
                    int32_t v;
                    memcpy(&v, ((const block_q8_0 *)(xq + (size_t)t * xs) + b)->qs + 4 * c, 4);
                    const __m256i p = _mm256_madd_epi16(
                        _mm256_maddubs_epi16(aw, _mm256_sign_epi8(_mm256_set1_epi32(v), wv)),
                        _mm256_set1_epi16(1));
                    acc[t] = c == 0 ? p : _mm256_add_epi32(acc[t], p);
                }
            }
            const __m256 dx =
                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(pb + 512 + 16 * h)));
            for (int t = 0; t < T; t++)
                tot[k * T + t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[t]),
                                                 _mm256_mul_ps(dx, _mm256_set1_ps(dy[t * nb + b])),
                                                 tot[k * T + t]);
        }
    }
    for (int k = 0; k < H * T; k++)
        _mm256_storeu_ps(out + k * 8, tot[k]);
}

/* ---- IQ4_NL and MXFP4 -------------------------------------------------------
 * 4-bit indices into a table of signed values (vpshufb), laid out as Q4_0.
 * Each 4-column product of 8 rows is vpmaddubsw(|v|, sign(y, v)). MXFP4's
 * values are at most 12 (doubled E2M1), so a block's 8 products add up
 * exactly in int16 (8 * 2 * 12 * 127 = 24384) before one vpmaddwd; IQ4_NL's
 * reach 127, so each product is widened and added in int32 (as Q8_0). I
 * exact; tot = fma(float(I), d_w * d_y, tot), d_w of MXFP4 its E8M0 scale
 * halved (kern_e8m0_half: the table holds doubled values). */
#define KX_P2_NL_BYTES (16 * sizeof(block_iq4_nl)) /* 288 */
#define KX_P2_MX_BYTES (16 * sizeof(block_mxfp4))  /* 272 */

/* 8 E8M0 exponents -> kern_e8m0_half of each, as 8 floats. */
KX_INLINE __m256 kx_p2_e8m0_half(const uint8_t *e) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)e));
    const __m256i norm = _mm256_slli_epi32(_mm256_sub_epi32(v, _mm256_set1_epi32(1)), 23);
    const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), v); /* e 0, 1 */
    const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), v);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(norm, sub, small));
}

KX_INLINE void kx_p2_nl_tile(int mx, const uint8_t *grp, int64_t nb, int h0, const int H,
                             const uint8_t *xq, size_t xs, const float *dy, const int T, int pf,
                             float *out) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)(mx ? kern_kvalues_mxfp4 : kern_kvalues_iq4nl)));
    const size_t bb = mx ? KX_P2_MX_BYTES : KX_P2_NL_BYTES;
    __m256 tot[2 * KX_P2_T];
    for (int k = 0; k < H * T; k++)
        tot[k] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pb = grp + (size_t)b * bb;
        if (pf)
            for (int l = 0; l < 5; l++)
                kx_pf_decode(pb + 64 * l);
        for (int k = 0; k < H; k++) {
            const int h = h0 + k;
            __m256i acc[KX_P2_T];
            for (int c = 0; c < 4; c++) {
                const __m256i raw = _mm256_loadu_si256((const __m256i *)(pb + c * 64 + 32 * h));
                const __m256i vl = _mm256_shuffle_epi8(table, _mm256_and_si256(raw, m4));
                const __m256i vh =
                    _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
                const __m256i al = _mm256_sign_epi8(vl, vl), ah = _mm256_sign_epi8(vh, vh);
                for (int t = 0; t < T; t++) {
                    const int8_t *y = ((const block_q8_0 *)(xq + (size_t)t * xs) + b)->qs;
                    int32_t ylo, yhi;
                    memcpy(&ylo, y + 4 * c, 4);
                    memcpy(&yhi, y + 16 + 4 * c, 4);
                    const __m256i pl =
                        _mm256_maddubs_epi16(al, _mm256_sign_epi8(_mm256_set1_epi32(ylo), vl));
                    const __m256i ph =
                        _mm256_maddubs_epi16(ah, _mm256_sign_epi8(_mm256_set1_epi32(yhi), vh));
                    __m256i p;
                    if (mx)
                        p = _mm256_add_epi16(pl, ph);
                    else
                        p = _mm256_add_epi32(_mm256_madd_epi16(pl, _mm256_set1_epi16(1)),
                                             _mm256_madd_epi16(ph, _mm256_set1_epi16(1)));
                    acc[t] = c == 0 ? p
                             : mx   ? _mm256_add_epi16(acc[t], p)
                                    : _mm256_add_epi32(acc[t], p);
                }
            }
            const __m256 dx =
                mx ? kx_p2_e8m0_half(pb + 256 + 8 * h)
                   : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(pb + 256 + 16 * h)));
            for (int t = 0; t < T; t++) {
                const __m256i i32 = mx ? _mm256_madd_epi16(acc[t], _mm256_set1_epi16(1)) : acc[t];
                tot[k * T + t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32),
                                                 _mm256_mul_ps(dx, _mm256_set1_ps(dy[t * nb + b])),
                                                 tot[k * T + t]);
            }
        }
    }
    for (int k = 0; k < H * T; k++)
        _mm256_storeu_ps(out + k * 8, tot[k]);
}

/* ---- Q4_K (the layout the AVX-512 kernels use too) ---------------------
 * Per (row, token) and super-block b, in this order whatever the batch:
 *   Q4_K, sub-block j (32 weights, 8 dword columns c): P_j = sum over c of
 *     maddubs(quants, y[32 j + 4c ..]) in int16 (exact: 8 * 2 * 15 * 128 <
 *     32767), I += madd(P_j, (sc_j, sc_j)) in int32 (exact); the mins term
 *     M = sum over i of madd((m_2i, m_2i+1), (p_2i, p_2i+1)) with p_j =
 *     bsums[2j] + bsums[2j + 1] (exact); tot = fma(d * float(I) - dmin *
 *     float(M), d_act, tot).
 * The integer sums are exact, so their order is free; only the float steps
 * (once per super-block) have a fixed order. The weights of a sub-block are
 * unpacked into registers once per tile and every token of the tile runs
 * over them (token-outer, as for Q4_0). */

/* Half h (8 rows) of a Q4_K packed super-block: (sc, sc) int16 pairs per
 * row for each sub-block, the mins as (m_2i, m_2i+1) pairs per row. */
KX_INLINE void kx_p2_q4k_scales(const uint8_t *ps, int h, __m256i sc[8], __m256i mp[4]) {
    const __m128i m63 = _mm_set1_epi8(63), m15 = _mm_set1_epi8(15), m3 = _mm_set1_epi8(3);
    __m128i q[12], mn[8];
    for (int i = 0; i < 12; i++)
        q[i] = _mm_loadl_epi64((const __m128i *)(ps + 2048 + 16 * i + 8 * h));
    for (int j = 0; j < 8; j++) {
        __m128i s8, m8;
        if (j < 4) {
            s8 = _mm_and_si128(q[j], m63);
            m8 = _mm_and_si128(q[j + 4], m63);
        } else { /* ggml's get_scale_min_k4, 8 rows a byte each */
            const __m128i hs = _mm_and_si128(_mm_srli_epi16(q[j - 4], 6), m3);
            const __m128i hm = _mm_and_si128(_mm_srli_epi16(q[j], 6), m3);
            s8 = _mm_or_si128(_mm_and_si128(q[j + 4], m15), _mm_slli_epi16(hs, 4));
            m8 = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(q[j + 4], 4), m15),
                              _mm_slli_epi16(hm, 4));
        }
        const __m256i s32 = _mm256_cvtepu8_epi32(s8);
        sc[j] = _mm256_or_si256(s32, _mm256_slli_epi32(s32, 16));
        mn[j] = m8;
    }
    for (int i = 0; i < 4; i++)
        mp[i] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn[2 * i], mn[2 * i + 1]));
}

/* T tokens x the 8 rows of H halves (from h0) of one Q4_K group. */
KX_INLINE void kx_p2_q4k_tile(const uint8_t *grp, int64_t nb, int h0, const int H,
                              const uint8_t *xq, size_t xs, const int T, int pf, float *out) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 tot[2 * KX_P2_T];
    for (int k = 0; k < H * T; k++)
        tot[k] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *ps = grp + (size_t)b * 2304;
        if (pf)
            for (int l = 0; l < 36; l++)
                kx_pf_decode(ps + 64 * l);
        for (int k = 0; k < H; k++) {
            const int h = h0 + k;
            __m256i sc[8], mp[4];
            kx_p2_q4k_scales(ps, h, sc, mp);
            __m256i I[KX_P2_T];
            for (int t = 0; t < T; t++)
                I[t] = _mm256_setzero_si256();
            for (int j = 0; j < 8; j++) { /* sub-block j: nibble j & 1 of qs chunk j / 2 */
                const int p = j >> 1, hi = j & 1;
                __m256i w[8];
                for (int c = 0; c < 8; c++) {
                    const __m256i raw =
                        _mm256_loadu_si256((const __m256i *)(ps + (p * 8 + c) * 64 + 32 * h));
                    w[c] = _mm256_and_si256(hi ? _mm256_srli_epi16(raw, 4) : raw, m4);
                }
                for (int t = 0; t < T; t++) {
                    const int8_t *y =
                        ((const block_q8_K *)(xq + (size_t)t * xs) + b)->qs + 64 * p + 32 * hi;
                    __m256i acc = _mm256_setzero_si256();
                    for (int c = 0; c < 8; c++) {
                        int32_t v;
                        memcpy(&v, y + 4 * c, 4);
                        const __m256i m = _mm256_maddubs_epi16(w[c], _mm256_set1_epi32(v));
                        acc = c == 0 ? m : _mm256_add_epi16(acc, m);
                    }
                    I[t] = _mm256_add_epi32(I[t], _mm256_madd_epi16(acc, sc[j]));
                }
            }
            const __m256 d =
                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(ps + 2240 + 16 * h)));
            const __m256 dmin =
                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(ps + 2272 + 16 * h)));
            for (int t = 0; t < T; t++) {
                const block_q8_K *a = (const block_q8_K *)(xq + (size_t)t * xs) + b;
                /* p_j = bsums[2j] + bsums[2j + 1] as int16 pairs (p_2i, p_2i+1) */
                const __m256i pj = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums),
                                                     _mm256_set1_epi16(1));
                const __m256i p16 = _mm256_packs_epi32(pj, pj); /* dwords 0, 1 | 4, 5 */
                __m256i M = _mm256_madd_epi16(
                    mp[0], _mm256_permutevar8x32_epi32(p16, _mm256_set1_epi32(0)));
                M = _mm256_add_epi32(M, _mm256_madd_epi16(mp[1], _mm256_permutevar8x32_epi32(
                                                                     p16, _mm256_set1_epi32(1))));
                M = _mm256_add_epi32(M, _mm256_madd_epi16(mp[2], _mm256_permutevar8x32_epi32(
                                                                     p16, _mm256_set1_epi32(4))));
                M = _mm256_add_epi32(M, _mm256_madd_epi16(mp[3], _mm256_permutevar8x32_epi32(
                                                                     p16, _mm256_set1_epi32(5))));
                const __m256 g = _mm256_fmsub_ps(d, _mm256_cvtepi32_ps(I[t]),
                                                 _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(M)));
                tot[k * T + t] = _mm256_fmadd_ps(g, _mm256_set1_ps(a->d), tot[k * T + t]);
            }
        }
    }
    for (int k = 0; k < H * T; k++)
        _mm256_storeu_ps(out + k * 8, tot[k]);
}

enum kx_p2 { KX_P2_Q40, KX_P2_Q80, KX_P2_NL, KX_P2_MX, KX_P2_Q4K };

/* One tile of any packed kind (dy, cs: Q4_0's activation scalars). */
KX_INLINE void kx_p2_tile(enum kx_p2 kind, const uint8_t *grp, int64_t nb, int h0, const int H,
                          const uint8_t *xq, size_t xs, const float *dy, const int32_t *cs,
                          const int T, int pf, float *out) {
    if (kind == KX_P2_Q40)
        kx_p2_q4_0_tile(grp, nb, h0, H, xq, xs, dy, cs, T, pf, out);
    else if (kind == KX_P2_Q80)
        kx_p2_q8_0_tile(grp, nb, h0, H, xq, xs, dy, T, pf, out);
    else if (kind == KX_P2_NL || kind == KX_P2_MX)
        kx_p2_nl_tile(kind == KX_P2_MX, grp, nb, h0, H, xq, xs, dy, T, pf, out);
    else
        kx_p2_q4k_tile(grp, nb, h0, H, xq, xs, T, pf, out);
}

/* Rows [r0, r1) x nt tokens of a packed matrix of kind `kind` (Q4_0: at
 * most KX_P2_CHUNK tokens, their activation scalars prepared in dy, cs:
 * (nt, nb)). Whole groups; rows of a group outside [r0, r1) are computed
 * and not stored (the kernels of the other rows do the same operations, so
 * the stored bits do not change). One token: both halves of a group in one
 * pass (the group's bytes stream once); more: a half at a time, tokens in
 * tiles of equal size <= KX_P2_T (11 is 6 + 5, not 8 + 3: each tile unpacks
 * the weights once), the first tile prefetching (later tiles find the group
 * in L1/L2). */
KX_INLINE void kx_p2_rows(enum kx_p2 kind, const struct kern_mat *w, int64_t nb, size_t block_bytes,
                          const uint8_t *xq, size_t xs, int64_t nt, const float *dy,
                          const int32_t *cs, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    const size_t gbytes = (size_t)nb * block_bytes;
    float out[KX_P2_T * 8] __attribute__((aligned(32)));
    for (int64_t g = r0 / KERNELS_PACK_ROWS; g * KERNELS_PACK_ROWS < r1; g++) {
        const uint8_t *grp = (const uint8_t *)w->data + (size_t)g * gbytes;
        const int64_t base = g * KERNELS_PACK_ROWS;
        const int64_t lo = r0 > base ? r0 - base : 0;
        const int64_t hi = r1 - base < KERNELS_PACK_ROWS ? r1 - base : KERNELS_PACK_ROWS;
        if (nt == 1) {
            kx_p2_tile(kind, grp, nb, 0, 2, xq, xs, dy, cs, 1, 1, out);
            for (int64_t i = lo; i < hi; i++)
                y[base + i] = out[i];
            continue;
        }
        const int64_t tmax = kind == KX_P2_Q40 || kind == KX_P2_Q4K ? KX_P2_T : KX_P2_T8;
        for (int h = (int)(lo / 8); h * 8 < hi; h++) {
            for (int64_t t = 0; t < nt;) {
                const int64_t left = nt - t, tiles = (left + tmax - 1) / tmax;
                const int n = (int)((left + tiles - 1) / tiles);
                const uint8_t *x = xq + (size_t)t * xs;
                const float *d = dy ? dy + t * nb : NULL;
                const int32_t *c = cs ? cs + t * nb : NULL;
                const int pf = t == 0 && h == (int)(lo / 8);
                switch (n) { /* T must be a constant in each call: one copy per size */
#define KX_P2_CASE(T)                                                                              \
    case T:                                                                                        \
        kx_p2_tile(kind, grp, nb, h, 1, x, xs, d, c, T, pf, out);                                  \
        break;
                    KX_P2_CASE(8)
                    KX_P2_CASE(7)
                    KX_P2_CASE(6)
                    KX_P2_CASE(5)
                    KX_P2_CASE(4)
                    KX_P2_CASE(3)
                    KX_P2_CASE(2)
                default:
                    kx_p2_tile(kind, grp, nb, h, 1, x, xs, d, c, 1, pf, out);
                    break;
#undef KX_P2_CASE
                }
                const int64_t i0 = lo > 8 * h ? lo - 8 * h : 0;
                const int64_t i1 = hi < 8 * h + 8 ? hi - 8 * h : 8;
                for (int k = 0; k < n; k++)
                    for (int64_t i = i0; i < i1; i++)
                        y[(t + k) * ldy + base + 8 * h + i] = out[k * 8 + i];
                t += n;
            }
        }
    }
}

/* Q4_0 / Q8_0: the activation scalars of up to KX_P2_CHUNK tokens at a
 * time (on the stack, or the heap for long rows), then the rows. */
KX_INLINE void kx_matmul_p2_b32(enum kx_p2 kind, const struct kern_mat *w, const void *xq,
                                size_t xs, int64_t n_tok, float *y, int64_t ldy, int64_t r0,
                                int64_t r1) {
    const int64_t nb = w->n_cols / 32;
    const int q4 = kind == KX_P2_Q40;
    const size_t per_tok = (size_t)nb * (sizeof(float) + (q4 ? sizeof(int32_t) : 0));
    uint8_t stack[16384] __attribute__((aligned(32)));
    int64_t chunk = n_tok < KX_P2_CHUNK ? n_tok : KX_P2_CHUNK;
    uint8_t *buf = stack;
    if (per_tok * (size_t)chunk > sizeof stack && !(buf = malloc(per_tok * (size_t)chunk))) {
        /* out of memory: fewer tokens at a time (no result depends on it) */
        buf = stack;
        chunk = (int64_t)(sizeof stack / per_tok);
        if (chunk < 1) { /* a row of over 65536 columns and no memory */
            kern_ref_matmul_packed(w, xq, xs, n_tok, y, ldy, r0, r1);
            return;
        }
    }
    float *dy = (float *)buf;
    int32_t *cs = q4 ? (int32_t *)(buf + (size_t)(chunk * nb) * sizeof(float)) : NULL;
    for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
        const int64_t nt = n_tok - t0 < chunk ? n_tok - t0 : chunk;
        const uint8_t *x = (const uint8_t *)xq + (size_t)t0 * xs;
        kx_p2_prep(x, xs, nt, nb, dy, cs);
        const size_t bb = q4                  ? KX_P2_Q4_0_BYTES
                          : kind == KX_P2_Q80 ? KX_P2_Q8_0_BYTES
                          : kind == KX_P2_NL  ? KX_P2_NL_BYTES
                                              : KX_P2_MX_BYTES;
        kx_p2_rows(kind, w, nb, bb, x, xs, nt, dy, cs, y + t0 * ldy, ldy, r0, r1);
    }
    if (buf != stack)
        free(buf);
}

static void kx_matmul_p2_q4_0(const struct kern_mat *w, const void *xq, size_t xs, int64_t n_tok,
                              float *y, int64_t ldy, int64_t r0, int64_t r1) {
    kx_matmul_p2_b32(KX_P2_Q40, w, xq, xs, n_tok, y, ldy, r0, r1);
}

static void kx_matmul_p2_q8_0(const struct kern_mat *w, const void *xq, size_t xs, int64_t n_tok,
                              float *y, int64_t ldy, int64_t r0, int64_t r1) {
    kx_matmul_p2_b32(KX_P2_Q80, w, xq, xs, n_tok, y, ldy, r0, r1);
}

static void kx_matmul_p2_iq4_nl(const struct kern_mat *w, const void *xq, size_t xs, int64_t n_tok,
                                float *y, int64_t ldy, int64_t r0, int64_t r1) {
    kx_matmul_p2_b32(KX_P2_NL, w, xq, xs, n_tok, y, ldy, r0, r1);
}

static void kx_matmul_p2_mxfp4(const struct kern_mat *w, const void *xq, size_t xs, int64_t n_tok,
                               float *y, int64_t ldy, int64_t r0, int64_t r1) {
    kx_matmul_p2_b32(KX_P2_MX, w, xq, xs, n_tok, y, ldy, r0, r1);
}

static void kx_matmul_p2_q4_K(const struct kern_mat *w, const void *xq, size_t xs, int64_t n_tok,
                              float *y, int64_t ldy, int64_t r0, int64_t r1) {
    kx_p2_rows(KX_P2_Q4K, w, w->n_cols / QK_K, 2304, xq, xs, n_tok, NULL, NULL, y, ldy, r0, r1);
}

/* The AVX2 build's packed kernels. */
static void kx_p2_fill(struct kern_table *t) {
    t->matmul_packed[QUANT_Q4_0] = kx_matmul_p2_q4_0;
    t->matmul_packed[QUANT_Q8_0] = kx_matmul_p2_q8_0;
    t->matmul_packed[QUANT_IQ4_NL] = kx_matmul_p2_iq4_nl;
    t->matmul_packed[QUANT_MXFP4] = kx_matmul_p2_mxfp4;
    t->matmul_packed[QUANT_Q4_K] = kx_matmul_p2_q4_K;
}

#endif /* !__AVX512F__ */
#endif
