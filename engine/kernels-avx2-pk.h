/* engine/kernels-avx2-pk.h: AVX2 kernels over the 16-row packed layout of
 * Q4_0 (kernels-pack.c has the layout), against Q8_0 activations. Included
 * by kernels-avx2.c only (after kernels-x86.h); the functions are static.
 * Threading: reentrant (stack, or a heap scratch per call).
 *
 * Why a packed layout on AVX2 (and the file layout for the K-quants): a
 * Q4_0 block has one float scale per 32 weights. In the GGUF layout every
 * 32 products of a row therefore cost a vpmaddubsw, a vpmaddwd widening, a
 * conversion, the scale product and an fma (kx_b32_step). With 16 rows
 * interleaved dword by dword, lane r of a ymm is row r: 4 columns of 8 rows
 * are one vpmaddubsw against the token's 4 activations broadcast, the 8
 * such products of a block add up exactly in int16 (8 * 2 * 15 * 128 =
 * 30720 < 32767), and the widening, conversion and scale are done once per
 * 8 rows and block: about 2.6 ALU operations per 32 multiply-adds against
 * 5 (vpmaddubsw, vpmaddwd, cvt, mul, fma) in the GGUF layout, and in decode
 * 16 rows' scales are two vcvtph2ps instead of 16 scalar conversions. The
 * K-quants' sub-block scales are small integers, so their GGUF-layout
 * kernels already widen once per 32 products with the scale as the
 * vpmaddwd operand (kx_kg_tile: 3 operations per 32); the packed layout
 * would save the vpmaddwd but add a broadcast, so they stay in the file
 * layout on AVX2.
 *
 * Per (row, token) and block b, in this order whatever the batch, the tile
 * or the row split:
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

/* For tokens [0, nt) and blocks [0, nb): dy = the activation scale, cs =
 * -8 * (sum of the block's 32 activations), at [t * nb + b]. */
static void kx_p2_prep(const uint8_t *xq, size_t xs, int64_t nt, int64_t nb, float *dy,
                       int32_t *cs) {
    const __m256i one8 = _mm256_set1_epi8(1);
    for (int64_t t = 0; t < nt; t++) {
        const block_q8_0 *a = (const block_q8_0 *)(xq + (size_t)t * xs);
        for (int64_t b = 0; b < nb; b++) {
            const __m256i y = _mm256_loadu_si256((const __m256i *)a[b].qs);
            const __m256i s =
                _mm256_madd_epi16(_mm256_maddubs_epi16(one8, y), _mm256_set1_epi16(1));
            __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
            dy[t * nb + b] = kx_f16(a[b].d);
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

/* Rows [r0, r1) x nt (<= KX_P2_CHUNK) tokens of a packed Q4_0 matrix whose
 * activation scalars are prepared (dy, cs: (nt, nb)). Whole groups; rows of
 * a group outside [r0, r1) are computed and not stored (the kernels of the
 * other rows do the same operations, so the stored bits do not change).
 * One token: both halves of a group in one pass (the group's bytes stream
 * once); more: a half at a time, tokens in tiles of equal size <= KX_P2_T,
 * the first tile prefetching (later tiles find the group in L1/L2). */
static void kx_p2_q4_0_rows(const struct kern_mat *w, int64_t nb, const uint8_t *xq, size_t xs,
                            int64_t nt, const float *dy, const int32_t *cs, float *y, int64_t ldy,
                            int64_t r0, int64_t r1) {
    const size_t gbytes = (size_t)nb * KX_P2_Q4_0_BYTES;
    float out[KX_P2_T * 8] __attribute__((aligned(32)));
    for (int64_t g = r0 / KERNELS_PACK_ROWS; g * KERNELS_PACK_ROWS < r1; g++) {
        const uint8_t *grp = (const uint8_t *)w->data + (size_t)g * gbytes;
        const int64_t base = g * KERNELS_PACK_ROWS;
        const int64_t lo = r0 > base ? r0 - base : 0;
        const int64_t hi = r1 - base < KERNELS_PACK_ROWS ? r1 - base : KERNELS_PACK_ROWS;
        if (nt == 1) {
            kx_p2_q4_0_tile(grp, nb, 0, 2, xq, xs, dy, cs, 1, 1, out);
            for (int64_t i = lo; i < hi; i++)
                y[base + i] = out[i];
            continue;
        }
        for (int h = (int)(lo / 8); h * 8 < hi; h++) {
            for (int64_t t = 0; t < nt;) {
                const int64_t left = nt - t, tiles = (left + KX_P2_T - 1) / KX_P2_T;
                const int n = (int)((left + tiles - 1) / tiles);
                const uint8_t *x = xq + (size_t)t * xs;
                const float *d = dy + t * nb;
                const int32_t *c = cs + t * nb;
                const int pf = t == 0 && h == (int)(lo / 8);
                switch (n) { /* T must be a constant in each call: one copy per size */
#define KX_P2_CASE(T)                                                                              \
    case T:                                                                                        \
        kx_p2_q4_0_tile(grp, nb, h, 1, x, xs, d, c, T, pf, out);                                   \
        break;
                    KX_P2_CASE(8)
                    KX_P2_CASE(7)
                    KX_P2_CASE(6)
                    KX_P2_CASE(5)
                    KX_P2_CASE(4)
                    KX_P2_CASE(3)
                    KX_P2_CASE(2)
                default:
                    kx_p2_q4_0_tile(grp, nb, h, 1, x, xs, d, c, 1, pf, out);
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

static void kx_matmul_p2_q4_0(const struct kern_mat *w, const void *xq, size_t xs, int64_t n_tok,
                              float *y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nb = w->n_cols / QK4_0;
    const size_t per_tok = (size_t)nb * (sizeof(float) + sizeof(int32_t));
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
    int32_t *cs = (int32_t *)(buf + (size_t)(chunk * nb) * sizeof(float));
    for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
        const int64_t nt = n_tok - t0 < chunk ? n_tok - t0 : chunk;
        const uint8_t *x = (const uint8_t *)xq + (size_t)t0 * xs;
        kx_p2_prep(x, xs, nt, nb, dy, cs);
        kx_p2_q4_0_rows(w, nb, x, xs, nt, dy, cs, y + t0 * ldy, ldy, r0, r1);
    }
    if (buf != stack)
        free(buf);
}

/* The AVX2 build's packed kernels. */
static void kx_p2_fill(struct kern_table *t) {
    t->matmul_packed[QUANT_Q4_0] = kx_matmul_p2_q4_0;
}

#endif /* !__AVX512F__ */
#endif
