/* engine/kernels-x86-k.h: K-quant (Q4_K, Q5_K, Q6_K; Q8_K activations) and
 * float (F32, F16, BF16) kernels; part of kernels-x86.h, see there.
 *
 * K-quants have two implementations: the 256-bit tiles and GEMM below
 * (kx_q45k_tile, kx_q6k_tile, kx_kg_*) serve the AVX2 build only; both
 * AVX-512 builds take the kernels of kernels-x86-kz.h (kx_kz_*: decode, and
 * a GEMM for every n_tok >= 2), included below. Each build is bit-identical
 * across batch sizes and row splits within itself. */
#ifndef STRATA_KERNELS_X86_K_H
#define STRATA_KERNELS_X86_K_H

/* ---- K-quants ---------------------------------------------------------------- */

/* Byte-shuffle masks that broadcast int16 element j of a 128-bit lane. */
KX_INLINE __m256i kx_bcast16_mask(int j_lo, int j_hi) {
    __m128i lo = _mm_set1_epi16((short)((2 * j_lo) | ((2 * j_lo + 1) << 8)));
    __m128i hi = _mm_set1_epi16((short)((2 * j_hi) | ((2 * j_hi + 1) << 8)));
    return _mm256_set_m128i(hi, lo);
}

/* The 8 6-bit scales and 8 mins of a Q4_K / Q5_K block as int16:
 * returns scales (8 x int16) and sets *mins. */
KX_INLINE __m128i kx_scales_k4(const uint8_t *q, __m128i *mins) {
    uint32_t u[4];
    memcpy(u, q, 12);
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
    const uint32_t m_lo = u[1] & k1;
    u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
    u[2] = m_lo;
    u[0] &= k1;
    /* u[0..1]: scales 0..7, u[2..3]: mins 0..7 (bytes) */
    __m256i all = _mm256_cvtepu8_epi16(_mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]));
    *mins = _mm256_extracti128_si256(all, 1);
    return _mm256_castsi256_si128(all);
}

/* The fields of super-block b of a Q4_K (hbits 0) or Q5_K (hbits 1) row; qh is
 * NULL for Q4_K. Shared by the 256-bit tiles and the AVX-512 kernels. */
struct kx_k45 {
    const uint8_t *scales, *qs, *qh;
    quant_f16 d, dmin;
};
KX_INLINE struct kx_k45 kx_k45_fields(const uint8_t *row, int64_t b, int hbits) {
    if (hbits) {
        const block_q5_K *x = (const block_q5_K *)row + b;
        return (struct kx_k45){x->scales, x->qs, x->qh, x->d, x->dmin};
    }
    const block_q4_K *x = (const block_q4_K *)row + b;
    return (struct kx_k45){x->scales, x->qs, NULL, x->d, x->dmin};
}

/* AVX2 build. Q4_K (hbits = 0) and Q5_K (hbits = 1): NR rows x nt tokens (NR * nt <= 4).
 * The integer sum of a super-block is exact; the mins term goes to its own
 * float accumulator. Same operations per (row, token) for every tiling. */
KX_INLINE void kx_q45k_tile(const struct kern_mat *w, int64_t r, int NR, const uint8_t *xq,
                            size_t xs, int nt, float *out, int64_t ldy, int hbits) {
    const int64_t nb = w->n_cols / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[4][KX_TILE];
    __m128 accm[4][KX_TILE];
    for (int i = 0; i < NR; i++)
        for (int t = 0; t < nt; t++) {
            acc[i][t] = _mm256_setzero_ps();
            accm[i][t] = _mm_setzero_ps();
        }
    for (int64_t b = 0; b < nb; b++) {
        float ad[KX_TILE];
        __m128i bs8[KX_TILE];
        for (int t = 0; t < nt; t++) {
            const block_q8_K *a = (const block_q8_K *)(xq + (size_t)t * xs) + b;
            ad[t] = a->d;
            __m256i bs = _mm256_loadu_si256((const __m256i *)a->bsums);
            bs8[t] = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        }
        for (int i = 0; i < NR; i++) {
            const uint8_t *row = (const uint8_t *)w->data + (size_t)(r + i) * w->row_bytes;
            const struct kx_k45 f = kx_k45_fields(row, b, hbits);
            const uint8_t *scales = f.scales, *qs = f.qs, *qh = f.qh;
            const quant_f16 dh = f.d, dminh = f.dmin;
            const uint8_t *sb = row + (size_t)b * (hbits ? sizeof(block_q5_K) : sizeof(block_q4_K));
            if (NR == 1 && nt == 1) { /* decode: every line ahead (kx_pf_decode) */
                kx_pf_decode(sb);
                kx_pf_decode(sb + 64);
                kx_pf_decode(sb + 128);
            } else {
                kx_prefetch(sb);
                kx_prefetch(sb + 64);
            }
            __m128i mins;
            const __m128i sc128 = kx_scales_k4(scales, &mins);
            const __m256i sc256 = _mm256_set_m128i(sc128, sc128);
            const float d = kx_f16(dh), dmin = kx_f16(dminh);
            __m256i isum[KX_TILE];
            for (int t = 0; t < nt; t++)
                isum[t] = _mm256_setzero_si256();
            const __m256i hb =
                hbits ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
            for (int p = 0; p < 4; p++) {
                __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * p));
                __m256i lo = _mm256_and_si256(raw, m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
                if (hbits) {
                    const __m256i one = _mm256_set1_epi8(1);
                    __m256i h0 =
                        _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * p)), one);
                    __m256i h1 =
                        _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * p + 1)), one);
                    lo = _mm256_or_si256(lo, _mm256_slli_epi16(h0, 4));
                    hi = _mm256_or_si256(hi, _mm256_slli_epi16(h1, 4));
                }
                const __m256i s_lo = _mm256_shuffle_epi8(sc256, kx_bcast16_mask(2 * p, 2 * p));
                const __m256i s_hi =
                    _mm256_shuffle_epi8(sc256, kx_bcast16_mask(2 * p + 1, 2 * p + 1));
                for (int t = 0; t < nt; t++) {
                    const block_q8_K *a = (const block_q8_K *)(xq + (size_t)t * xs) + b;
                    __m256i ya = _mm256_loadu_si256((const __m256i *)(a->qs + 64 * p));
                    __m256i yb = _mm256_loadu_si256((const __m256i *)(a->qs + 64 * p + 32));
                    isum[t] = _mm256_add_epi32(isum[t], kx_dot_u8_scaled(lo, ya, s_lo));
                    isum[t] = _mm256_add_epi32(isum[t], kx_dot_u8_scaled(hi, yb, s_hi));
                }
            }
            for (int t = 0; t < nt; t++) {
                acc[i][t] = _mm256_fmadd_ps(_mm256_set1_ps(d * ad[t]), _mm256_cvtepi32_ps(isum[t]),
                                            acc[i][t]);
                __m128i pm = _mm_madd_epi16(mins, bs8[t]);
                accm[i][t] =
                    _mm_fmadd_ps(_mm_set1_ps(dmin * ad[t]), _mm_cvtepi32_ps(pm), accm[i][t]);
            }
        }
    }
    for (int i = 0; i < NR; i++)
        for (int t = 0; t < nt; t++) {
            __m128 m = accm[i][t];
            m = _mm_add_ps(m, _mm_movehl_ps(m, m));
            m = _mm_add_ss(m, _mm_movehdup_ps(m));
            out[t * ldy + i] = kx_hsum(acc[i][t]) - _mm_cvtss_f32(m);
        }
}

KX_INLINE void kx_q4k_tile(const struct kern_mat *w, int64_t r, int NR, const uint8_t *xq,
                           size_t xs, int nt, float *out, int64_t ldy) {
    kx_q45k_tile(w, r, NR, xq, xs, nt, out, ldy, 0);
}
KX_INLINE void kx_q5k_tile(const struct kern_mat *w, int64_t r, int NR, const uint8_t *xq,
                           size_t xs, int nt, float *out, int64_t ldy) {
    kx_q45k_tile(w, r, NR, xq, xs, nt, out, ldy, 1);
}

/* Half h (quants 128 h .. 128 h + 127) of a Q6_K super-block as four vectors
 * of 32 unsigned 6-bit quants (0..63); q[g] pairs with activation bytes
 * [128 h + 32 g, 128 h + 32 g + 32). Shared by the decode tile and the GEMM
 * unpack. */
KX_INLINE void kx_q6k_half(const block_q6_K *x, int h, __m256i q[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const uint8_t *ql = x->ql + 64 * h;
    const __m256i qa = _mm256_loadu_si256((const __m256i *)ql);
    const __m256i qb = _mm256_loadu_si256((const __m256i *)(ql + 32));
    const __m256i hh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
    q[0] =
        _mm256_or_si256(_mm256_and_si256(qa, m4), _mm256_and_si256(_mm256_slli_epi16(hh, 4), m30));
    q[1] =
        _mm256_or_si256(_mm256_and_si256(qb, m4), _mm256_and_si256(_mm256_slli_epi16(hh, 2), m30));
    q[2] =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qa, 4), m4), _mm256_and_si256(hh, m30));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qb, 4), m4),
                           _mm256_and_si256(_mm256_srli_epi16(hh, 2), m30));
}

/* Q6_K's -32 offset in int32: isum (the unsigned 6-bit quants' scaled sums)
 * - 32 * (scales x bsums), exact (|isum| <= 8 * 2 * 16128 * 128, the offset
 * term <= 32 * 16 * 128 * 4064). It was a second float sum subtracted at the
 * end, which cancels against the first: the two terms are ~32x the result,
 * so their rounding errors were the result's, and on a synthesized qwen3moe
 * (test-model-synth test_packed_layouts) one position's logits moved by
 * 3.4e-3 of the largest (the reference, the AVX-512 kernels and ggml apply
 * the offset in integers: 2e-7). */
KX_INLINE __m256i kx_q6k_offset(__m256i isum, __m256i sc16, const int16_t *bsums) {
    const __m256i corr = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)bsums));
    return _mm256_sub_epi32(isum, _mm256_slli_epi32(corr, 5));
}

/* Q6_K: 6-bit unsigned quants (0..63) dotted as is; the -32 offset is folded
 * in exactly through the activation's 16-element sums (bsums). */
KX_INLINE void kx_q6k_tile(const struct kern_mat *w, int64_t r, int NR, const uint8_t *xq,
                           size_t xs, int nt, float *out, int64_t ldy) {
    const int64_t nb = w->n_cols / QK_K;
    __m256 acc[4][KX_TILE];
    for (int i = 0; i < NR; i++)
        for (int t = 0; t < nt; t++)
            acc[i][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        for (int i = 0; i < NR; i++) {
            const block_q6_K *x =
                (const block_q6_K *)((const uint8_t *)w->data + (size_t)(r + i) * w->row_bytes) + b;
            if (NR == 1 && nt == 1) { /* decode: every line ahead (kx_pf_decode) */
                for (int l = 0; l < 4; l++)
                    kx_pf_decode((const uint8_t *)x + 64 * l);
            } else {
                kx_prefetch((const uint8_t *)x);
                kx_prefetch((const uint8_t *)x + 64);
                kx_prefetch((const uint8_t *)x + 128);
            }
            const float d = kx_f16(x->d);
            /* 16 scales as int16; per half h, lane 0 gets scale 2g, lane 1 2g+1 */
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
            __m256i isum[KX_TILE];
            for (int t = 0; t < nt; t++)
                isum[t] = _mm256_setzero_si256();
            for (int h = 0; h < 2; h++) {
                __m128i sh = h ? _mm256_extracti128_si256(sc16, 1) : _mm256_castsi256_si128(sc16);
                __m256i shh = _mm256_set_m128i(sh, sh);
                __m256i q[4];
                kx_q6k_half(x, h, q);
                for (int g = 0; g < 4; g++) {
                    const __m256i s16 = _mm256_shuffle_epi8(shh, kx_bcast16_mask(2 * g, 2 * g + 1));
                    for (int t = 0; t < nt; t++) {
                        const int8_t *y8 =
                            ((const block_q8_K *)(xq + (size_t)t * xs) + b)->qs + 128 * h;
                        __m256i yv = _mm256_loadu_si256((const __m256i *)(y8 + 32 * g));
                        isum[t] = _mm256_add_epi32(isum[t], kx_dot_u8_scaled(q[g], yv, s16));
                    }
                }
            }
            for (int t = 0; t < nt; t++) {
                const block_q8_K *a = (const block_q8_K *)(xq + (size_t)t * xs) + b;
                const __m256 dd = _mm256_set1_ps(d * a->d);
                acc[i][t] = _mm256_fmadd_ps(
                    dd, _mm256_cvtepi32_ps(kx_q6k_offset(isum[t], sc16, a->bsums)), acc[i][t]);
            }
        }
    }
    for (int i = 0; i < NR; i++)
        for (int t = 0; t < nt; t++)
            out[t * ldy + i] = kx_hsum(acc[i][t]);
}

/* ---- K-quant GEMM for n_tok >= KX_KG_MIN (prefill chunks, batched decode),
 * AVX2 build (the AVX-512 builds had it too until the kx_kz_* kernels; the
 * AVX-512 figures below are that history). Tokens go in chunks of KX_KG_CHUNK; for each tile of
 * KX_KG_ROWS rows (4 with AVX-512, else KX_PF_ROWS) the super-blocks are unpacked once per chunk
 * into a scratch (8 x 32 quants as u8, their int16 scales, the mins or Q6_K scales, d, dmin: 576
 * bytes per super-block and row) and the micro-kernel (KX_KG_ROWS rows x 4 tokens) loads each
 * activation vector once per row tile. Per (row, token, super-block) the operations are
 * kx_q45k_tile's / kx_q6k_tile's: the same exact int32 sums, the same float products and fma order,
 * so results are bit-identical to the decode path and to any tiling or row split. Quant vector j
 * (0..7) pairs with activation bytes [32 j, 32 j + 32).
 *
 * Measured (this 2-vCPU AMD EPYC VM, AVX-512 VNNI, shared box, best of
 * interleaved runs, 2026-12-01; release builds, old = the 4-token tiles of
 * kx_q45k_tile / kx_q6k_tile):
 *   `kernels-bench 4 1 -1 3 q4_K,q5_K,q6_K 64` (1 thread, G MAC/s):
 *     old q4_K ~70, q5_K ~66, q6_K ~77; GEMM 2 rows x 4 tokens, ymm
 *     maddubs/madd ~87 (q4_K); + zmm pairs and vpdpwssd ~115 / 115 / 120;
 *     4 rows x 4 tokens (AVX-512) ~134 / - / 140.
 *   `kernels-bench 128 2 -1 2 q4_K,q6_K 8` (weights from DRAM, 8 tokens,
 *     2 threads): old ~104 / ~81; 4-row GEMM ~60 / ~55 (the unpack waited
 *     on DRAM); + prefetch of the next row tile ~148 / ~129.
 *   `bench-model llama-3.2-1b-q4_k_m.gguf 2 8 512 1` (prefill 512 tok, 2
 *     threads; llama.cpp 178): old ~108-111 tok/s, new ~218-220 tok/s.
 *   `bench-model llama-3.2-1b-q4_k_m.gguf 2 16 64 8` (batched decode, 8
 *     seqs): old ~89 tok/s (90 ms/step), new ~121 tok/s (66 ms/step). */
#define KX_KG_MIN 8
#define KX_KG_CHUNK 32
#define KX_KG_ROWS KX_PF_ROWS

struct kx_kw {
    __m256i q[8], s[8];
    __m256i m; /* Q4_K/Q5_K: mins (low 128 bits); Q6_K: the 16 scales */
    float d, dmin;
};

enum kx_kq { KX_KQ4, KX_KQ5, KX_KQ6 };

KX_INLINE void kx_kw_unpack(enum kx_kq k, const uint8_t *row, int64_t b, struct kx_kw *o) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    if (k == KX_KQ6) {
        const block_q6_K *x = (const block_q6_K *)row + b;
        o->d = kx_f16(x->d);
        o->dmin = 0.0f;
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
        o->m = sc16;
        for (int h = 0; h < 2; h++) {
            __m128i sh = h ? _mm256_extracti128_si256(sc16, 1) : _mm256_castsi256_si128(sc16);
            __m256i shh = _mm256_set_m128i(sh, sh);
            kx_q6k_half(x, h, o->q + 4 * h);
            for (int g = 0; g < 4; g++)
                o->s[4 * h + g] = _mm256_shuffle_epi8(shh, kx_bcast16_mask(2 * g, 2 * g + 1));
        }
        return;
    }
    const uint8_t *scales, *qs, *qh = NULL;
    if (k == KX_KQ5) {
        const block_q5_K *x = (const block_q5_K *)row + b;
        scales = x->scales;
        qs = x->qs;
        qh = x->qh;
        o->d = kx_f16(x->d);
        o->dmin = kx_f16(x->dmin);
    } else {
        const block_q4_K *x = (const block_q4_K *)row + b;
        scales = x->scales;
        qs = x->qs;
        o->d = kx_f16(x->d);
        o->dmin = kx_f16(x->dmin);
    }
    __m128i mins;
    const __m128i sc128 = kx_scales_k4(scales, &mins);
    const __m256i sc256 = _mm256_set_m128i(sc128, sc128);
    o->m = _mm256_castsi128_si256(mins);
    const __m256i hb = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    for (int p = 0; p < 4; p++) {
        __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * p));
        __m256i lo = _mm256_and_si256(raw, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        if (qh) {
            const __m256i one = _mm256_set1_epi8(1);
            __m256i h0 = _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * p)), one);
            __m256i h1 = _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * p + 1)), one);
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(h0, 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(h1, 4));
        }
        o->q[2 * p] = lo;
        o->q[2 * p + 1] = hi;
        o->s[2 * p] = _mm256_shuffle_epi8(sc256, kx_bcast16_mask(2 * p, 2 * p));
        o->s[2 * p + 1] = _mm256_shuffle_epi8(sc256, kx_bcast16_mask(2 * p + 1, 2 * p + 1));
    }
}

/* acc + kx_dot_u8_scaled(u, y, scale16): the same wrapping int32 lanes; with
 * VNNI the madd and the add are one vpdpwssd. */
KX_INLINE __m256i kx_dot_u8_scaled_acc(__m256i acc, __m256i u, __m256i y, __m256i scale16) {
#if KX_VNNI
    return _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(u, y), scale16);
#else
    return _mm256_add_epi32(acc, kx_dot_u8_scaled(u, y, scale16));
#endif
}

/* NR rows (unpacked: wq[b * KX_KG_ROWS + i]) x nt tokens over nb super-blocks. */
KX_INLINE void kx_kg_tile(enum kx_kq k, const struct kx_kw *wq, int NR, int64_t nb,
                          const uint8_t *xq, size_t xs, int nt, float *out, int64_t ldy) {
    __m256 acc[KX_KG_ROWS][KX_TILE];
    __m128 accm4[KX_KG_ROWS][KX_TILE];
    for (int i = 0; i < NR; i++)
        for (int t = 0; t < nt; t++) {
            acc[i][t] = _mm256_setzero_ps();
            accm4[i][t] = _mm_setzero_ps();
        }
    for (int64_t b = 0; b < nb; b++) {
        const struct kx_kw *wb = wq + b * KX_KG_ROWS;
        __m256i isum[KX_KG_ROWS][KX_TILE];
        for (int i = 0; i < NR; i++)
            for (int t = 0; t < nt; t++)
                isum[i][t] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++)
            for (int t = 0; t < nt; t++) {
                const block_q8_K *a = (const block_q8_K *)(xq + (size_t)t * xs) + b;
                const __m256i yv = _mm256_loadu_si256((const __m256i *)(a->qs + 32 * j));
                for (int i = 0; i < NR; i++)
                    isum[i][t] = kx_dot_u8_scaled_acc(isum[i][t], wb[i].q[j], yv, wb[i].s[j]);
            }
        for (int t = 0; t < nt; t++) {
            const block_q8_K *a = (const block_q8_K *)(xq + (size_t)t * xs) + b;
            const __m256i bs = _mm256_loadu_si256((const __m256i *)a->bsums);
            if (k == KX_KQ6) {
                for (int i = 0; i < NR; i++) {
                    const __m256 dd = _mm256_set1_ps(wb[i].d * a->d);
                    acc[i][t] = _mm256_fmadd_ps(
                        dd, _mm256_cvtepi32_ps(kx_q6k_offset(isum[i][t], wb[i].m, a->bsums)),
                        acc[i][t]);
                }
            } else {
                const __m128i bs8 =
                    _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
                for (int i = 0; i < NR; i++) {
                    acc[i][t] = _mm256_fmadd_ps(_mm256_set1_ps(wb[i].d * a->d),
                                                _mm256_cvtepi32_ps(isum[i][t]), acc[i][t]);
                    const __m128i pm = _mm_madd_epi16(_mm256_castsi256_si128(wb[i].m), bs8);
                    accm4[i][t] = _mm_fmadd_ps(_mm_set1_ps(wb[i].dmin * a->d), _mm_cvtepi32_ps(pm),
                                               accm4[i][t]);
                }
            }
        }
    }
    for (int i = 0; i < NR; i++)
        for (int t = 0; t < nt; t++) {
            if (k == KX_KQ6) {
                out[t * ldy + i] = kx_hsum(acc[i][t]);
            } else {
                __m128 m = accm4[i][t];
                m = _mm_add_ps(m, _mm_movehl_ps(m, m));
                m = _mm_add_ss(m, _mm_movehdup_ps(m));
                out[t * ldy + i] = kx_hsum(acc[i][t]) - _mm_cvtss_f32(m);
            }
        }
}

/* Rows [r0, r1) x nt (<= KX_KG_CHUNK) tokens. */
KX_INLINE void kx_kg_rows(enum kx_kq k, const struct kern_mat *w, const uint8_t *xq, size_t xs,
                          int64_t nt, struct kx_kw *wq, float *y, int64_t ldy, int64_t r0,
                          int64_t r1) {
    const int64_t nb = w->n_cols / QK_K;
    for (int64_t r = r0; r < r1; r += r + KX_KG_ROWS <= r1 ? KX_KG_ROWS : 1) {
        const int full = r + KX_KG_ROWS <= r1;
        const int NR = full ? KX_KG_ROWS : 1;
        for (int i = 0; i < NR; i++) {
            const uint8_t *row = (const uint8_t *)w->data + (size_t)(r + i) * w->row_bytes;
            for (int64_t b = 0; b < nb; b++)
                kx_kw_unpack(k, row, b, &wq[b * KX_KG_ROWS + i]);
        }
        /* The next tile's weights load from DRAM while this one computes
         * (without this, n_tok = 8 from DRAM was slower than the tiled path). */
        const int64_t rn = r + NR, rn1 = rn + KX_KG_ROWS < r1 ? rn + KX_KG_ROWS : r1;
        if (rn < rn1) {
            const uint8_t *nx = (const uint8_t *)w->data + (size_t)rn * w->row_bytes;
            const size_t nbytes = (size_t)(rn1 - rn) * w->row_bytes;
            for (size_t o = 0; o < nbytes; o += 64)
                _mm_prefetch((const char *)nx + o, _MM_HINT_T0);
        }
        for (int64_t t = 0; t < nt; t += KX_TILE) {
            const uint8_t *xt = xq + (size_t)t * xs;
            float *o = y + t * ldy + r;
            switch ((full ? 10 : 0) + (nt - t < KX_TILE ? (int)(nt - t) : KX_TILE)) {
            case 14:
                kx_kg_tile(k, wq, KX_KG_ROWS, nb, xt, xs, 4, o, ldy);
                break;
            case 13:
                kx_kg_tile(k, wq, KX_KG_ROWS, nb, xt, xs, 3, o, ldy);
                break;
            case 12:
                kx_kg_tile(k, wq, KX_KG_ROWS, nb, xt, xs, 2, o, ldy);
                break;
            case 11:
                kx_kg_tile(k, wq, KX_KG_ROWS, nb, xt, xs, 1, o, ldy);
                break;
            case 4:
                kx_kg_tile(k, wq, 1, nb, xt, xs, 4, o, ldy);
                break;
            case 3:
                kx_kg_tile(k, wq, 1, nb, xt, xs, 3, o, ldy);
                break;
            case 2:
                kx_kg_tile(k, wq, 1, nb, xt, xs, 2, o, ldy);
                break;
            default:
                kx_kg_tile(k, wq, 1, nb, xt, xs, 1, o, ldy);
                break;
            }
        }
    }
}

/* The K-quant GEMM over all tokens; 0 when the scratch could not be
 * allocated (the caller then takes the tiled path, same bits). */
#if !defined(__AVX512BW__)
static int kx_kg_matmul(enum kx_kq k, const struct kern_mat *w, const void *xq, size_t xs,
                        int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nb = w->n_cols / QK_K;
    struct kx_kw *wq = aligned_alloc(64, (size_t)(nb * KX_KG_ROWS) * sizeof(struct kx_kw));
    if (!wq)
        return 0;
    for (int64_t t0 = 0; t0 < n_tok; t0 += KX_KG_CHUNK) {
        int64_t nt = n_tok - t0 < KX_KG_CHUNK ? n_tok - t0 : KX_KG_CHUNK;
        kx_kg_rows(k, w, (const uint8_t *)xq + (size_t)t0 * xs, xs, nt, wq, y + t0 * ldy, ldy, r0,
                   r1);
    }
    free(wq);
    return 1;
}
#endif

#define KX_KG_FN(name, kind, row_fn)                                                               \
    static void name(const struct kern_mat *w, const void *xq, size_t xs, int64_t n_tok, float *y, \
                     int64_t ldy, int64_t r0, int64_t r1) {                                        \
        if (n_tok >= KX_KG_MIN && w->n_cols / QK_K > 0 &&                                          \
            kx_kg_matmul(kind, w, xq, xs, n_tok, y, ldy, r0, r1))                                  \
            return;                                                                                \
        KX_TILED(row_fn)                                                                           \
    }

#include "engine/kernels-x86-kz.h"
#include "engine/kernels-x86-pk.h"

/* ---- plain floats: F32, F16, BF16 (activation in the weight's format) ------- */

enum kx_flt { KX_F32, KX_F16, KX_BF16 };

KX_INLINE __m256 kx_load8(enum kx_flt k, const uint8_t *p) {
    switch (k) {
    case KX_F32:
        return _mm256_loadu_ps((const float *)p);
    case KX_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    case KX_BF16:
    default:
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
    }
}

KX_INLINE float kx_load1(enum kx_flt k, const uint8_t *p) {
    uint16_t h;
    float f;
    switch (k) {
    case KX_F32:
        memcpy(&f, p, 4);
        return f;
    case KX_F16:
        memcpy(&h, p, 2);
        return kx_f16(h);
    case KX_BF16:
    default:
        memcpy(&h, p, 2);
        return kern_bf16_to_f32(h);
    }
}

KX_INLINE void kx_flt_row(enum kx_flt k, const struct kern_mat *w, int64_t r, const uint8_t *xq,
                          size_t xs, int nt, float *out, int64_t ldy) {
    const size_t es = k == KX_F32 ? 4 : 2;
    const int64_t n = w->n_cols;
    const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
    __m256 acc0[KX_TILE], acc1[KX_TILE];
    for (int t = 0; t < nt; t++)
        acc0[t] = acc1[t] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        if (!(i & 31))
            kx_prefetch(row + i * es);
        __m256 w0 = kx_load8(k, row + i * es), w1 = kx_load8(k, row + (i + 8) * es);
        for (int t = 0; t < nt; t++) {
            const uint8_t *a = xq + (size_t)t * xs;
            acc0[t] = _mm256_fmadd_ps(w0, kx_load8(k, a + i * es), acc0[t]);
            acc1[t] = _mm256_fmadd_ps(w1, kx_load8(k, a + (i + 8) * es), acc1[t]);
        }
    }
    if (i + 8 <= n) {
        __m256 w0 = kx_load8(k, row + i * es);
        for (int t = 0; t < nt; t++)
            acc0[t] = _mm256_fmadd_ps(w0, kx_load8(k, xq + (size_t)t * xs + i * es), acc0[t]);
        i += 8;
    }
    for (int t = 0; t < nt; t++) {
        const uint8_t *a = xq + (size_t)t * xs;
        float s = kx_hsum(_mm256_add_ps(acc0[t], acc1[t]));
        for (int64_t j = i; j < n; j++)
            s += kx_load1(k, row + j * es) * kx_load1(k, a + j * es);
        out[t * ldy] = s;
    }
}

/* Columns [i0, i1) of kx_flt_row with the activations already widened to
 * f32 (a: nt rows of `as` floats), the accumulators carried in acc (nt x 2
 * vectors: even and odd 8-column groups, as kx_flt_row's acc0 / acc1); the
 * last range (i1 = n_cols) also adds the tails and writes out. i0 and a
 * middle i1 are multiples of 16, so the fma order is kx_flt_row's, and
 * widening f16 / bf16 is exact: the bits are kx_flt_row's. */
KX_INLINE void kx_flt_rowf(enum kx_flt k, const struct kern_mat *w, int64_t r, const float *a,
                           size_t as, int nt, int64_t i0, int64_t i1, __m256 *acc, float *out,
                           int64_t ldy) {
    const size_t es = 2;
    const int64_t n = w->n_cols;
    const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
    __m256 acc0[KX_TILE], acc1[KX_TILE];
    for (int t = 0; t < nt; t++) {
        acc0[t] = i0 == 0 ? _mm256_setzero_ps() : acc[2 * t];
        acc1[t] = i0 == 0 ? _mm256_setzero_ps() : acc[2 * t + 1];
    }
    int64_t i = i0;
    for (; i + 16 <= i1; i += 16) {
        if (!(i & 31))
            kx_pf_decode(row + i * es);
        __m256 w0 = kx_load8(k, row + i * es), w1 = kx_load8(k, row + (i + 8) * es);
        for (int t = 0; t < nt; t++) {
            const float *at = a + (size_t)t * as;
            acc0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(at + i), acc0[t]);
            acc1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(at + i + 8), acc1[t]);
        }
    }
    if (i1 < n) {
        for (int t = 0; t < nt; t++) {
            acc[2 * t] = acc0[t];
            acc[2 * t + 1] = acc1[t];
        }
        return;
    }
    if (i + 8 <= n) {
        __m256 w0 = kx_load8(k, row + i * es);
        for (int t = 0; t < nt; t++)
            acc0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(a + (size_t)t * as + i), acc0[t]);
        i += 8;
    }
    for (int t = 0; t < nt; t++) {
        const float *at = a + (size_t)t * as;
        float s = kx_hsum(_mm256_add_ps(acc0[t], acc1[t]));
        for (int64_t j = i; j < n; j++)
            s += kx_load1(k, row + j * es) * at[j];
        out[t * ldy] = s;
    }
}

/* F16 / BF16 weights: the activations (the weight's format) are widened to
 * f32 once per call, 4 tokens at a time, instead of once per row and 16
 * columns (two conversions per 16 multiply-adds of a token in kx_flt_row).
 * Rows go in blocks of KX_FLT_ROWS and columns in ranges of KX_FLT_COLS, so
 * a range's f32 activations (4 x 1024 x 4 B = 16 KB) stay in L1 while the
 * block's rows run over them (the accumulators wait in st between ranges);
 * whole rows at once streamed 64 KB of activations from L2 per row (n_tok =
 * 32 f16 fell from 55 to 37 G MAC/s). The same bits as kx_flt_row. This
 * 2-vCPU Xeon VM, `kernels-bench 2 2 ISA 3 f16,bf16 N` (2 threads, L2),
 * before -> after, G MAC/s: AVX2 n_tok = 8 f16 24 -> 52-54, bf16 22 ->
 * 59-60; n_tok = 32 f16 55 -> 56-60, bf16 50 -> 56-60; decode unchanged
 * (25-28 GB/s a thread). The AVX-512 builds run the same code. */
#define KX_FLT_COLS 1024
#define KX_FLT_ROWS 16

KX_INLINE void kx_flt_tiles(enum kx_flt k, const struct kern_mat *w, const float *a, size_t as,
                            int nt, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    __m256 st[KX_FLT_ROWS][2 * KX_TILE];
    const int64_t n = w->n_cols;
    for (int64_t rb = r0; rb < r1; rb += KX_FLT_ROWS) {
        const int64_t re = rb + KX_FLT_ROWS < r1 ? rb + KX_FLT_ROWS : r1;
        for (int64_t c0 = 0; c0 < n; c0 += KX_FLT_COLS) {
            const int64_t c1 = n - c0 > KX_FLT_COLS ? c0 + KX_FLT_COLS : n;
            for (int64_t r = rb; r < re; r++) {
                __m256 *acc = st[r - rb];
                switch (nt) { /* nt must be a constant in each call */
                case 4:
                    kx_flt_rowf(k, w, r, a, as, 4, c0, c1, acc, y + r, ldy);
                    break;
                case 3:
                    kx_flt_rowf(k, w, r, a, as, 3, c0, c1, acc, y + r, ldy);
                    break;
                case 2:
                    kx_flt_rowf(k, w, r, a, as, 2, c0, c1, acc, y + r, ldy);
                    break;
                default:
                    kx_flt_rowf(k, w, r, a, as, 1, c0, c1, acc, y + r, ldy);
                    break;
                }
            }
        }
    }
}

KX_INLINE void kx_flt_matmul(enum kx_flt k, const struct kern_mat *w, const void *xq, size_t xs,
                             int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t n = w->n_cols, chunk = n_tok < KX_TILE ? n_tok : KX_TILE;
    float stack[4096] __attribute__((aligned(32)));
    float *a = (size_t)(chunk * n) <= sizeof stack / sizeof stack[0]
                   ? stack
                   : aligned_alloc(32, ((size_t)(chunk * n) * sizeof(float) + 31) & ~(size_t)31);
    if (!a) { /* out of memory: the conversions per row (same bits) */
        for (int64_t r = r0; r < r1; r++)
            for (int64_t t = 0; t < n_tok; t += KX_TILE) {
                const int nt = n_tok - t < KX_TILE ? (int)(n_tok - t) : KX_TILE;
                kx_flt_row(k, w, r, (const uint8_t *)xq + (size_t)t * xs, xs, nt, y + t * ldy + r,
                           ldy);
            }
        return;
    }
    for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
        const int nc = (int)(n_tok - t0 < chunk ? n_tok - t0 : chunk);
        for (int t = 0; t < nc; t++) {
            const uint8_t *src = (const uint8_t *)xq + (size_t)(t0 + t) * xs;
            float *dst = a + (size_t)t * (size_t)n;
            int64_t i = 0;
            for (; i + 8 <= n; i += 8)
                _mm256_storeu_ps(dst + i, kx_load8(k, src + i * 2));
            for (; i < n; i++)
                dst[i] = kx_load1(k, src + i * 2);
        }
        kx_flt_tiles(k, w, a, (size_t)n, nc, y + t0 * ldy, ldy, r0, r1);
    }
    if (a != stack)
        free(a);
}

/* F32 x F32 in double (exact products, double sums), like the reference and
 * ggml's scalar ggml_vec_dot_f32: float accumulation moved MoE router logits
 * enough to flip near-tied experts (model-llamacpp, qwen3moe f32: logit gap
 * error 1.25e-3 with float sums, 5.2e-5 with double). F32 weights are the
 * small test models; the halved arithmetic rate (36 GB/s per thread in L2)
 * still exceeds the memory stream. */
KX_INLINE void kx_f32d_row(const struct kern_mat *w, int64_t r, const uint8_t *xq, size_t xs,
                           int nt, float *out, int64_t ldy) {
    const int64_t n = w->n_cols;
    const float *row = (const float *)((const uint8_t *)w->data + (size_t)r * w->row_bytes);
    __m256d lo[KX_TILE], hi[KX_TILE];
    for (int t = 0; t < nt; t++)
        lo[t] = hi[t] = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 wv = _mm256_loadu_ps(row + i);
        __m256d wl = _mm256_cvtps_pd(_mm256_castps256_ps128(wv));
        __m256d wh = _mm256_cvtps_pd(_mm256_extractf128_ps(wv, 1));
        for (int t = 0; t < nt; t++) {
            __m256 xv = _mm256_loadu_ps((const float *)(xq + (size_t)t * xs) + i);
            lo[t] = _mm256_fmadd_pd(wl, _mm256_cvtps_pd(_mm256_castps256_ps128(xv)), lo[t]);
            hi[t] = _mm256_fmadd_pd(wh, _mm256_cvtps_pd(_mm256_extractf128_ps(xv, 1)), hi[t]);
        }
    }
    for (int t = 0; t < nt; t++) {
        const float *a = (const float *)(xq + (size_t)t * xs);
        __m256d v = _mm256_add_pd(lo[t], hi[t]);
        __m128d h = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
        double sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
        for (int64_t j = i; j < n; j++)
            sum += (double)row[j] * (double)a[j];
        out[t * ldy] = (float)sum;
    }
}

KX_INLINE void kx_f32_tile(const struct kern_mat *w, int64_t r, int NR, const uint8_t *xq,
                           size_t xs, int nt, float *out, int64_t ldy) {
    for (int i = 0; i < NR; i++)
        kx_f32d_row(w, r + i, xq, xs, nt, out + i, ldy);
}
KX_INLINE void kx_f16_tile(const struct kern_mat *w, int64_t r, int NR, const uint8_t *xq,
                           size_t xs, int nt, float *out, int64_t ldy) {
    for (int i = 0; i < NR; i++)
        kx_flt_row(KX_F16, w, r + i, xq, xs, nt, out + i, ldy);
}
KX_INLINE void kx_bf16_tile(const struct kern_mat *w, int64_t r, int NR, const uint8_t *xq,
                            size_t xs, int nt, float *out, int64_t ldy) {
    for (int i = 0; i < NR; i++)
        kx_flt_row(KX_BF16, w, r + i, xq, xs, nt, out + i, ldy);
}

#define KX_TILED_FN(name, row_fn)                                                                  \
    static void name(const struct kern_mat *w, const void *xq, size_t xs, int64_t n_tok, float *y, \
                     int64_t ldy, int64_t r0, int64_t r1) {                                        \
        KX_TILED(row_fn)                                                                           \
    }
#if defined(__AVX512BW__)
KX_KZ_FN(kx_matmul_q4_K, KX_KQ4)
KX_KZ_FN(kx_matmul_q5_K, KX_KQ5)
KX_KZ_FN(kx_matmul_q6_K, KX_KQ6)
#else
KX_KG_FN(kx_matmul_q4_K, KX_KQ4, kx_q4k_tile)
KX_KG_FN(kx_matmul_q5_K, KX_KQ5, kx_q5k_tile)
KX_KG_FN(kx_matmul_q6_K, KX_KQ6, kx_q6k_tile)
#endif
KX_TILED_FN(kx_matmul_f32, kx_f32_tile)
static void kx_matmul_f16(const struct kern_mat *w, const void *xq, size_t xs, int64_t n_tok,
                          float *y, int64_t ldy, int64_t r0, int64_t r1) {
    kx_flt_matmul(KX_F16, w, xq, xs, n_tok, y, ldy, r0, r1);
}
static void kx_matmul_bf16(const struct kern_mat *w, const void *xq, size_t xs, int64_t n_tok,
                           float *y, int64_t ldy, int64_t r0, int64_t r1) {
    kx_flt_matmul(KX_BF16, w, xq, xs, n_tok, y, ldy, r0, r1);
}

/* Fills the table with this file's kernels. */
#if defined(__AVX512F__)
/* Q8_0 activations 16 lanes at a time, bit-exact with kern_quantize_q8_0
 * (ggml's reference) for finite input: the same max of |x| (vmaxps skips a
 * NaN like fmaxf), d = amax / 127, id = 1 / d, x * id, and roundf (half away
 * from zero) as truncation plus a carry when the exact remainder is >= 0.5.
 * Prefill profile before: the scalar loop was ~10% of a 512-token Q4_0
 * prefill (perf, llama-3.2-1b). */
static void kx_quantize_q8_0(const float *x, void *dst, int64_t n) {
    block_q8_0 *y = dst;
    const __m512i signbit = _mm512_set1_epi32((int)0x80000000u);
    const __m512i one = _mm512_castps_si512(_mm512_set1_ps(1.0f));
    const __m512 half = _mm512_set1_ps(0.5f);
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const __m512 x0 = _mm512_loadu_ps(x + i * QK8_0), x1 = _mm512_loadu_ps(x + i * QK8_0 + 16);
        __m512 m = _mm512_max_ps(_mm512_abs_ps(x0), _mm512_setzero_ps());
        m = _mm512_max_ps(_mm512_abs_ps(x1), m);
        const float amax = _mm512_reduce_max_ps(m);
        const float d = amax / 127.0f;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = kern_f32_to_f16(d);
        const __m512 vid = _mm512_set1_ps(id);
        for (int h = 0; h < 2; h++) {
            const __m512 v = _mm512_mul_ps(h ? x1 : x0, vid);
            const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __mmask16 up =
                _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), half, _CMP_GE_OQ);
            const __m512 sgn1 = _mm512_castsi512_ps(
                _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(v), signbit), one));
            const __m512 r = _mm512_mask_add_ps(t, up, t, sgn1);
            _mm_storeu_si128((__m128i *)(y[i].qs + 16 * h),
                             _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r)));
        }
    }
}
#endif

#if defined(__AVX512F__)
/* Q8_K activations (the K-quants' vec_dot_type), bit-exact with
 * kern_quantize_q8_K: the scale comes from the first element of largest
 * magnitude (as the reference's strict > scan), levels are rintf(iscale * x)
 * (vcvtps2dq rounds half to even under the default MXCSR, as rintf does),
 * bsums from the clamped levels. A block holding inf or NaN takes the
 * reference (its special cases). The scalar quantizer cost 3.4% of a batched
 * 8-sequence step of llama-3.2-1b Q4_K_M (perf, this 2-vCPU EPYC VM). */
static void kx_quantize_q8_K(const float *x, void *dst, int64_t n) {
    block_q8_K *y = dst;
    const __m512 inf = _mm512_castsi512_ps(_mm512_set1_epi32(0x7f800000));
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        __m512 v[16], m = _mm512_setzero_ps();
        __mmask16 bad = 0;
        for (int k = 0; k < 16; k++) {
            v[k] = _mm512_loadu_ps(x + 16 * k);
            const __m512 a = _mm512_abs_ps(v[k]);
            bad |= _mm512_cmp_ps_mask(a, inf, _CMP_NLT_UQ); /* inf or NaN */
            m = _mm512_max_ps(m, a);
        }
        if (bad) {
            kern_quantize_q8_K(x, &y[b], QK_K);
            continue;
        }
        const float amax = _mm512_reduce_max_ps(m);
        if (amax == 0) {
            memset(&y[b], 0, sizeof(block_q8_K));
            continue;
        }
        float vmax = amax;
        for (int k = 0; k < 16; k++) {
            const __mmask16 at =
                _mm512_cmp_ps_mask(_mm512_abs_ps(v[k]), _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (at) {
                vmax = x[16 * k + __builtin_ctz(at)];
                break;
            }
        }
        const float iscale = -127.f / vmax;
        const __m512 vs = _mm512_set1_ps(iscale);
        for (int k = 0; k < 16; k++) {
            __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(v[k], vs));
            q = _mm512_max_epi32(_mm512_min_epi32(q, _mm512_set1_epi32(127)),
                                 _mm512_set1_epi32(-128));
            _mm_storeu_si128((__m128i *)(y[b].qs + 16 * k), _mm512_cvtepi32_epi8(q));
            y[b].bsums[k] = (int16_t)_mm512_reduce_add_epi32(q);
        }
        y[b].d = 1 / iscale;
    }
}
#endif

#if !defined(__AVX512F__)
/* The AVX2 build's activation quantizers, bit-exact with the reference
 * (kern_quantize_q8_0 / _q8_K, ggml's) for every input: 8 lanes at a time,
 * the same max, scale and rounding as the AVX-512 ones above; a NaN level
 * is 0 as in the reference (q8_0), and a Q8_K block holding inf or NaN takes
 * the reference. The scalar quantizers were ~3% of a batched step (perf,
 * llama-3.2-1b Q4_0, 8 sequences, AVX2 forced: q8_block + roundf + fmaxf). */
KX_INLINE __m256 kx_abs8(__m256 v) {
    return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
}

KX_INLINE float kx_hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* 32 int32 lanes (exact integers in [-127, 127] or [-128, 127]) -> 32 int8. */
KX_INLINE void kx_store_i8x32(int8_t *dst, __m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    const __m256i p = _mm256_packs_epi16(ab, cd); /* lanes interleaved by 128-bit half */
    _mm256_storeu_si256((__m256i *)dst,
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

static void kx_quantize_q8_0(const float *x, void *dst, int64_t n) {
    block_q8_0 *y = dst;
    const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    const __m256 lim = _mm256_set1_ps(127.0f), sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / QK8_0; i++) {
        __m256 v[4], m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + i * QK8_0 + 8 * k);
            m = _mm256_max_ps(kx_abs8(v[k]), m); /* a NaN lane keeps m, as fmaxf */
        }
        const float amax = kx_hmax8(m);
        const float d = amax / 127.0f;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = kern_f32_to_f16(d);
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int k = 0; k < 4; k++) {
            const __m256 s = _mm256_mul_ps(v[k], vid);
            /* roundf: truncate, then away from zero when the rest is >= 0.5 */
            const __m256 t = _mm256_round_ps(s, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m256 up = _mm256_cmp_ps(kx_abs8(_mm256_sub_ps(s, t)), half, _CMP_GE_OQ);
            __m256 r =
                _mm256_add_ps(t, _mm256_and_ps(up, _mm256_or_ps(_mm256_and_ps(s, sign), one)));
            r = _mm256_max_ps(_mm256_min_ps(r, lim), _mm256_sub_ps(_mm256_setzero_ps(), lim));
            r = _mm256_and_ps(r, _mm256_cmp_ps(s, s, _CMP_ORD_Q)); /* NaN -> 0 */
            q[k] = _mm256_cvtps_epi32(r);
        }
        kx_store_i8x32(y[i].qs, q[0], q[1], q[2], q[3]);
    }
}

static void kx_quantize_q8_K(const float *x, void *dst, int64_t n) {
    block_q8_K *y = dst;
    const __m256 inf = _mm256_castsi256_ps(_mm256_set1_epi32(0x7f800000));
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        __m256 v[32], m = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
        for (int k = 0; k < 32; k++) {
            v[k] = _mm256_loadu_ps(x + 8 * k);
            const __m256 a = kx_abs8(v[k]);
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, inf, _CMP_NLT_UQ)); /* inf or NaN */
            m = _mm256_max_ps(m, a);
        }
        if (_mm256_movemask_ps(bad)) {
            kern_quantize_q8_K(x, &y[b], QK_K);
            continue;
        }
        const float amax = kx_hmax8(m);
        if (amax == 0) {
            memset(&y[b], 0, sizeof(block_q8_K));
            continue;
        }
        float vmax = amax; /* the first element of largest magnitude, as the reference's scan */
        for (int k = 0; k < 32; k++) {
            const int at =
                _mm256_movemask_ps(_mm256_cmp_ps(kx_abs8(v[k]), _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (at) {
                vmax = x[8 * k + __builtin_ctz((unsigned)at)];
                break;
            }
        }
        const float iscale = -127.f / vmax;
        const __m256 vs = _mm256_set1_ps(iscale);
        for (int g = 0; g < 8; g++) { /* 32 levels a step: rint as vcvtps2dq, clamped */
            __m256i q[4];
            for (int k = 0; k < 4; k++) {
                q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[4 * g + k], vs));
                q[k] = _mm256_max_epi32(_mm256_min_epi32(q[k], _mm256_set1_epi32(127)),
                                        _mm256_set1_epi32(-128));
            }
            kx_store_i8x32(y[b].qs + 32 * g, q[0], q[1], q[2], q[3]);
            for (int h = 0; h < 2; h++) {
                const __m256i s = _mm256_add_epi32(q[2 * h], q[2 * h + 1]);
                __m128i t =
                    _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
                t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
                t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
                y[b].bsums[2 * g + h] = (int16_t)_mm_cvtsi128_si32(t);
            }
        }
        y[b].d = 1 / iscale;
    }
}
#endif

static void kx_fill(struct kern_table *t) {
    t->quantize_q8_0 = kx_quantize_q8_0;
    t->quantize_q8_K = kx_quantize_q8_K;
    t->matmul[QUANT_F32] = kx_matmul_f32;
    t->matmul[QUANT_F16] = kx_matmul_f16;
    t->matmul[QUANT_BF16] = kx_matmul_bf16;
    t->matmul[QUANT_Q4_0] = kx_matmul_q4_0;
    t->matmul[QUANT_Q8_0] = kx_matmul_q8_0;
    t->matmul[QUANT_IQ4_NL] = kx_matmul_iq4_nl;
    t->matmul[QUANT_MXFP4] = kx_matmul_mxfp4;
    t->matmul[QUANT_Q4_K] = kx_matmul_q4_K;
    t->matmul[QUANT_Q5_K] = kx_matmul_q5_K;
    t->matmul[QUANT_Q6_K] = kx_matmul_q6_K;
#if defined(__AVX512BW__)
    t->matmul_packed[QUANT_Q4_K] = kx_matmul_pk_q4_K;
    t->matmul_packed[QUANT_Q6_K] = kx_matmul_pk_q6_K;
#endif
}

#endif
