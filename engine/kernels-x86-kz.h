/* engine/kernels-x86-kz.h: the AVX-512 K-quant kernels (Q4_K, Q5_K, Q6_K
 * against Q8_K activations): decode and GEMM with one arithmetic, see below.
 * Part of kernels-x86-k.h (included from there, inside its include guard,
 * after the 256-bit K-quant code whose enum kx_kq and KX_KG_CHUNK it uses);
 * compiled only into the AVX-512 builds. Threading: all functions are
 * reentrant (scratch on the stack or malloc'd per call). */
#ifndef STRATA_KERNELS_X86_KZ_H
#define STRATA_KERNELS_X86_KZ_H

#if defined(__AVX512BW__)
/* ---- AVX-512 K-quant kernels (both AVX-512 builds): decode and GEMM ----------
 * One definition of the arithmetic per (row, token, pair of super-blocks b,
 * b + 1), shared by decode (weights unpacked in registers) and the GEMM
 * (weights unpacked once per row tile into a scratch), so every path gives
 * the same bits for any batch and any row split:
 *   W_k (k = 0..3) of each block: 64 unsigned quants in one zmm (Q4_K 0..15,
 *     Q5_K 0..31, Q6_K 0..63). Q6_K: elements 64k..64k+63 in order. Q4_K/
 *     Q5_K: the low (k even) or high (k odd) nibbles of 64 qs bytes as loaded,
 *     i.e. elements [0..31, 64..95], [32..63, 96..127], [128..159, 192..223],
 *     [160..191, 224..255]; the activations are permuted to match once per
 *     call (struct kx_ka2), cheaper than arranging the weights;
 *   D_k = vpdpbusd(0, W_k, Y_k): 16 int32 lanes of 4 products each,
 *     |D| <= 4 * 63 * 127 = 32004, so vpackssdw packs them exactly;
 *   I = sum_k vpdpwssd(packs(D_k of b, D_k of b + 1), SC_k): each 4-product
 *     sum times its sub-block scale, 16 exact int32 lanes, dwords 0, 1 of
 *     each 128-bit lane for block b, 2, 3 for b + 1; Q6_K adds
 *     vpdpwssd(bsums, -32 * scales) (its +32 offset);
 *   acc = fma(float(I), d * d_act (per lane: b's or b + 1's), acc); Q4_K/Q5_K
 *   then acc = fma(-dmin * float(m_j), d_act * float(bsums_2j + bsums_2j+1),
 *     acc), lanes 0..7 for b, 8..15 for b + 1;
 *   an odd last block pairs with zeros (weights and activations, never read);
 *   result = _mm512_reduce_add_ps(acc).
 * Without VNNI, vpdpbusd is vpmaddubsw + vpmaddwd(1) (pairs <= 2 * 63 * 127,
 * no saturation) and vpdpwssd vpmaddwd + vpaddd: the same integers.
 * Compared with the 256-bit kernels above: one vpdpbusd per 64 products
 * instead of vpmaddubsw + vpmaddwd + vpaddd per 32, one scale multiply per
 * 64 products instead of one per 32, the 6-bit scales decoded with vector
 * shuffles, and the float work (cvt, d product, fma, mins fma) once per two
 * super-blocks on one zmm accumulator per (row, token).
 *
 * Measured (this 2-vCPU AMD EPYC VM, avx512-vnni; in a loop of independent
 * chains zmm vpdpbusd, vpdpwssd, vpackssdw and vfmadd each ran ~1 per cycle
 * at ~2.6 GHz, so the int8 ceiling is ~170 G MAC/s per core; release builds,
 * old = HEAD 20a8352 (256-bit tiles + GEMM), interleaved under the bench
 * lock, best of 2 rounds, 2026-12-01):
 *   `taskset -c 1 kernels-bench 1 1 -1 7 q4_K,q6_K,q5_K 8` and `... 64`
 *     (1 MB, L2, 1 thread): decode GB/s q4_K 27.2 -> 52.2, q5_K 26.6 ->
 *     45.2, q6_K 47.6 -> 76.9; n_tok = 8 G MAC/s q4_K 113 -> 180, q5_K 103
 *     -> 159, q6_K 110 -> 158; n_tok = 64: 137 -> 218, 132 -> 210, 138 ->
 *     187. Steps (q4_K / q6_K decode, n_tok = 8): element-order W_k +
 *     vpdpbusd/packs/vpdpwssd 44 / 72, 112 / 123; Q4_K nibbles as loaded with
 *     permuted activations 49 / 74, 132 / 113; GEMM tiles per kind (below)
 *     -, 152 / 133; super-block pairs 53 / 78, 178 / 140; Q6_K tile 2x4
 *     -, 180 / 158 (the figures above), then 4x2 for DRAM's sake (below):
 *     a later round on a busier box (load 5.5; old in brackets) gave decode
 *     q4_K 50.0 (25.7), q5_K 42.6 (24.9), q6_K 71.9 (45.0); n_tok = 8 160
 *     (105), 147 (96), 146 (103); n_tok = 64 203 (130), 198 (123), 193 (131).
 *     n_tok = 2 / 3 / 4 / 16 before the pairs: q4_K 89 / 109 / 123 / 176,
 *     q6_K 73 / 91 / 103 / 153 (decode alone ~88 for both), so
 *     the GEMM runs from 2 tokens: each weight is read once per call.
 *   `kernels-bench 256 2 -1 3 q4_K,q6_K 8` (DRAM, before the pairs; a plain
 *     read of the same bytes in brackets): decode 1 thread q4_K 24.2 -> 32.8
 *     GB/s (33-35), q6_K 32.3 -> 32.6 (32-35); 2 threads q4_K 47.8 -> 61.0
 *     (68-70), q6_K 59.2 -> 66.4 (68-69), i.e. 90-98% of the read; n_tok =
 *     8, 2 threads: q4_K 153 -> 233 G MAC/s, q6_K 155 -> 190. With the
 *     pairs (busier box): decode 1 thread q4_K 23.7 -> 31.4 (33), q6_K 29.5
 *     -> 32.0 (33); 2 threads q4_K 48.6 -> 62.9 (64), q6_K 56.7 -> 65.0
 *     (58); n_tok = 8 q4_K 151 -> 206, q6_K (2x4 tile) 153 -> 158.
 *   Same L2 bench forced to avx512 (no VNNI, isa 2): decode q4_K 25.9 ->
 *     46.3, q6_K 45.7 -> 66.3 GB/s; n_tok = 8 99 -> 115, 98 -> 106 G MAC/s.
 *     avx2 (isa 1) unchanged: 24.5 / 38.8 GB/s, 65 / 62 G MAC/s.
 *   One tree (HEAD 169a18e) with old vs new K kernels, `bench-model
 *     llama-3.2-1b-q4_k_m.gguf 2 16 64 8` (8 sequences, best of 3): 66.1
 *     -> 57.5 ms/step (121 -> 139 tok/s; perf: 88% of the step is still
 *     kx_matmul_q4_K 55% + kx_matmul_q6_K 34%, Q8_K quantization 3%);
 *     `... 2 32 512 1`: prefill 217 -> 271 tok/s.
 *   `STRATA=build-kqr/cli/strata bench/cpu` (one run each, busy box),
 *     llama-3.2-1b Q4_K_M: decode 54.0 -> 61.4 tok/s, prefill 220 -> 289
 *     tok/s (llama.cpp 190-192: 1.16 -> 1.51x).
 *   `bench-model llama-3.2-1b-q4_k_m.gguf 2 16 64 8` (8 sequences, 2
 *     threads, best of 3): 64.1 -> 54.1-56.5 ms/step; `... 2 16 512 1`
 *     (prefill 512 tokens, best of 2): 225 -> 287 tok/s. Decode of one
 *     sequence is memory-bound (21.2 -> 20.9 ms/token, best of 2).
 *   Tried and dropped: Q6_K's +32 offset folded into vpdpbusd's start value
 *     (-32 * byte sums per token, 256 more bytes per packed super-block):
 *     decode 72 -> 67 GB/s, n_tok = 8 133 -> 96 G MAC/s (the micro-kernel is
 *     bound by loads as much as by arithmetic). Without the mins fma and the
 *     d product (timing only, wrong results) q4_K n_tok = 8 went 155 -> 185,
 *     which is what led to the super-block pairs. */

/* One row's super-block unpacked (registers only). */
struct kx_kz {
    __m512i w[4]; /* W_0..W_3 */
    __m256i s;    /* Q6_K: int16 scale of W_k's 128-bit lane L at word 4k + L;
                     Q4_K/Q5_K: bytes sc_0..sc_7, m_0..m_7 in the low 16 */
    __m256 fm;    /* Q4_K/Q5_K: -dmin * m_j (j = 0..7) */
    float d;
};

/* Super-blocks b, b + 1 of one row (b + 1 all zero past the row's end) in
 * the micro-kernel's layout (64-byte aligned, 896 bytes). */
struct kx_kz2 {
    __m512i w[8];  /* W_k of b (k = 0..3), then of b + 1 */
    __m512i sc[4]; /* SC_k: lane L words 0..3 the scale of W_k^b's lane L, 4..7 of W_k^(b+1)'s */
    __m512 dp;     /* d of b in dwords 0, 1 of each 128-bit lane, of b + 1 in 2, 3 */
    __m512 fm;     /* Q4_K/Q5_K: [fm of b, fm of b + 1]; Q6_K: -32 * scales as int16
                      (lane L words 0..3: b's 4L..4L+3, words 4..7: b + 1's) */
};

/* One token's super-blocks b, b + 1 in the weights' order (640 bytes). */
struct kx_ka2 {
    __m512i y[8]; /* Y_k of b, then of b + 1 */
    __m512 ap;    /* d_act laid out like kx_kz2.dp */
    __m512 fb;    /* Q4_K/Q5_K: [fb of b, fb of b + 1], fb_j = d_act * float(bsums_2j +
                     bsums_2j+1); Q6_K: the bsums as int16 laid out like kx_kz2.fm */
};

/* u8 x s8 dot into int32 lanes (4 products each). */
KX_INLINE __m512i kx_kz_dpb(__m512i u, __m512i y) {
    return kx_z_dot_acc(_mm512_setzero_si512(), u, y);
}

KX_INLINE __m512i kx_kz_dpw(__m512i acc, __m512i a, __m512i b) {
#if KX_VNNI
    return _mm512_dpwssd_epi32(acc, a, b);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
#endif
}

/* Q4_K/Q5_K 12-byte scale field -> bytes [sc_0..sc_7, m_0..m_7] (ggml's
 * get_scale_min_k4), with shuffles instead of scalar shifts. Reads 16 bytes
 * (the scales are followed by the quants inside the block). */
KX_INLINE __m128i kx_kz_scales4(const uint8_t *scales) {
    const __m128i b = _mm_loadu_si128((const __m128i *)scales);
    const __m128i p =
        _mm_shuffle_epi8(b, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m128i q =
        _mm_shuffle_epi8(b, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
    const __m128i lo =
        _mm_and_si128(p, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0));
    const __m128i lo2 = _mm_and_si128(
        _mm_srli_epi16(p, 4), _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15));
    const __m128i hi =
        _mm_and_si128(_mm_srli_epi16(q, 2),
                      _mm_setr_epi8(0, 0, 0, 0, 48, 48, 48, 48, 0, 0, 0, 0, 48, 48, 48, 48));
    return _mm_or_si128(_mm_or_si128(lo, lo2), hi);
}

/* Super-block b of a row, unpacked. */
KX_INLINE void kx_kz_unpack(enum kx_kq k, const uint8_t *row, int64_t b, struct kx_kz *o) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    if (k == KX_KQ6) {
        const block_q6_K *x = (const block_q6_K *)row + b;
        const __m512i m30 = _mm512_set1_epi8(0x30);
        /* shift counts per 256-bit half (elements 0..31 / 32..63 of W_k) */
        const __m512i c42 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
        const __m512i c02 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
        for (int h = 0; h < 2; h++) {
            const __m512i a = _mm512_loadu_si512((const void *)(x->ql + 64 * h));
            const __m512i hh =
                _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qh + 32 * h)));
            const __m512i t0 = _mm512_and_si512(_mm512_sllv_epi16(hh, c42), m30);
            const __m512i t1 = _mm512_and_si512(_mm512_srlv_epi16(hh, c02), m30);
            /* (a & 0x0F) | t: vpternlogd 0xEA */
            o->w[2 * h] = _mm512_ternarylogic_epi32(a, m4, t0, 0xEA);
            o->w[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(a, 4), m4, t1, 0xEA);
        }
        /* W_k's lane L is sub-block 4k + L: the scales in order */
        o->s = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
        o->fm = _mm256_setzero_ps();
        o->d = kx_f16(x->d);
        return;
    }
    const struct kx_k45 f = kx_k45_fields(row, b, k == KX_KQ5);
    const uint8_t *scales = f.scales, *qs = f.qs, *qh = f.qh;
    const quant_f16 dh = f.d, dminh = f.dmin;
    const __m512i hb = qh ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh))
                          : _mm512_setzero_si512();
    for (int h = 0; h < 2; h++) {
        const __m512i r = _mm512_loadu_si512((const void *)(qs + 64 * h));
        o->w[2 * h] = _mm512_and_si512(r, m4);
        o->w[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(r, 4), m4);
    }
    if (qh)
        for (int kk = 0; kk < 4; kk++) {
            /* element 32 j + l takes bit j of qh[l]; W_k holds sub-blocks
             * j0 = 4 (k / 2) + k % 2 and j0 + 2 */
            const int j0 = 4 * (kk / 2) + kk % 2;
            const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << j0)),
                                                   _mm256_set1_epi8((char)(1 << (j0 + 2))), 1);
            o->w[kk] = _mm512_mask_add_epi8(o->w[kk], _mm512_test_epi8_mask(hb, bit), o->w[kk],
                                            _mm512_set1_epi8(16));
        }
    const __m128i sm = kx_kz_scales4(scales);
    o->s = _mm256_castsi128_si256(sm);
    o->fm = _mm256_mul_ps(_mm256_set1_ps(-kx_f16(dminh)),
                          _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8))));
    o->d = kx_f16(dh);
}

/* Two unpacked super-blocks (b1 may be all zero) in the micro-kernel's layout. */
KX_INLINE void kx_kz_pair(enum kx_kq k, const struct kx_kz *b0, const struct kx_kz *b1,
                          struct kx_kz2 *o) {
    for (int kk = 0; kk < 4; kk++) {
        o->w[kk] = b0->w[kk];
        o->w[4 + kk] = b1->w[kk];
    }
    if (k == KX_KQ6) {
        const __m512i z = _mm512_inserti64x4(_mm512_zextsi256_si512(b0->s), b1->s, 1);
        /* SC_k lane L: words 4k + L (b) and 16 + 4k + L (b + 1), 4 each */
        const __m512i idx =
            _mm512_set_epi16(19, 19, 19, 19, 3, 3, 3, 3, 18, 18, 18, 18, 2, 2, 2, 2, 17, 17, 17, 17,
                             1, 1, 1, 1, 16, 16, 16, 16, 0, 0, 0, 0);
        for (int kk = 0; kk < 4; kk++)
            o->sc[kk] =
                _mm512_permutexvar_epi16(_mm512_add_epi16(idx, _mm512_set1_epi16(4 * kk)), z);
    } else {
        /* bytes sc_0..7 of b then of b + 1 in every 128-bit lane; W_k's lanes
         * 0, 1 hold sub-block j = 4 (k / 2) + k % 2, lanes 2, 3 j + 2; SC_k
         * lane L takes byte j (b) and 8 + j (b + 1) as int16 words */
        const __m512i q = _mm512_broadcast_i32x4(
            _mm_unpacklo_epi64(_mm256_castsi256_si128(b0->s), _mm256_castsi256_si128(b1->s)));
        for (int kk = 0; kk < 4; kk++) {
            const int j = 4 * (kk / 2) + kk % 2;
            const int lo = (int)(0x80008000u | (unsigned)j | (unsigned)j << 16);
            const int lo2 = (int)(0x80008000u | (unsigned)(j + 2) | (unsigned)(j + 2) << 16);
            const int hi = lo + 8 + (8 << 16), hi2 = lo2 + 8 + (8 << 16);
            o->sc[kk] =
                _mm512_shuffle_epi8(q, _mm512_set_epi32(hi2, hi2, lo2, lo2, hi2, hi2, lo2, lo2, hi,
                                                        hi, lo, lo, hi, hi, lo, lo));
        }
    }
    o->dp = _mm512_mask_blend_ps(0xCCCC, _mm512_set1_ps(b0->d), _mm512_set1_ps(b1->d));
    if (k == KX_KQ6) {
        const __m512i q = _mm512_permutex2var_epi64(_mm512_zextsi256_si512(b0->s),
                                                    _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0),
                                                    _mm512_zextsi256_si512(b1->s));
        o->fm = _mm512_castsi512_ps(_mm512_mullo_epi16(q, _mm512_set1_epi16(-32)));
    } else {
        o->fm = _mm512_castsi512_ps(_mm512_inserti64x4(
            _mm512_castps_si512(_mm512_zextps256_ps512(b0->fm)), _mm256_castps_si256(b1->fm), 1));
    }
}

/* One token's super-blocks a[0], a[1] (a[1] only when two) in the weights' order. */
KX_INLINE void kx_ka_pack(enum kx_kq k, const block_q8_K *a, int two, struct kx_ka2 *o) {
    __m256i bs[2];
    __m256 fb[2];
    float d[2];
    for (int h = 0; h < 2; h++) {
        __m512i *y = o->y + 4 * h;
        if (h == 1 && !two) {
            for (int kk = 0; kk < 4; kk++)
                y[kk] = _mm512_setzero_si512();
            bs[1] = _mm256_setzero_si256();
            fb[1] = _mm256_setzero_ps();
            d[1] = 0.0f;
            break;
        }
        const block_q8_K *x = a + h;
        d[h] = x->d;
        bs[h] = _mm256_loadu_si256((const __m256i *)x->bsums);
        if (k == KX_KQ6) {
            for (int kk = 0; kk < 4; kk++)
                y[kk] = _mm512_loadu_si512((const void *)(x->qs + 64 * kk));
            fb[h] = _mm256_setzero_ps();
            continue;
        }
        for (int g = 0; g < 2; g++) {
            const __m512i lo = _mm512_loadu_si512((const void *)(x->qs + 128 * g));
            const __m512i hi = _mm512_loadu_si512((const void *)(x->qs + 128 * g + 64));
            y[2 * g] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(1, 0, 1, 0));
            y[2 * g + 1] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
        }
        fb[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(bs[h], _mm256_set1_epi16(1))),
                              _mm256_set1_ps(x->d));
    }
    o->ap = _mm512_mask_blend_ps(0xCCCC, _mm512_set1_ps(d[0]), _mm512_set1_ps(d[1]));
    if (k == KX_KQ6)
        o->fb = _mm512_castsi512_ps(_mm512_permutex2var_epi64(
            _mm512_zextsi256_si512(bs[0]), _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0),
            _mm512_zextsi256_si512(bs[1])));
    else
        o->fb = _mm512_castsi512_ps(_mm512_inserti64x4(
            _mm512_castps_si512(_mm512_zextps256_ps512(fb[0])), _mm256_castps_si256(fb[1]), 1));
}

/* acc plus one (row, token, super-block pair) term. */
KX_INLINE __m512 kx_kz_acc(enum kx_kq k, const struct kx_kz2 *w, const struct kx_ka2 *a,
                           __m512 acc) {
    __m512i is = _mm512_setzero_si512();
    for (int kk = 0; kk < 4; kk++) {
        const __m512i p = _mm512_packs_epi32(kx_kz_dpb(w->w[kk], a->y[kk]),
                                             kx_kz_dpb(w->w[4 + kk], a->y[4 + kk]));
        is = kx_kz_dpw(is, p, w->sc[kk]);
    }
    if (k == KX_KQ6) /* -32 * sum_j sc_j bsums_j */
        is = kx_kz_dpw(is, _mm512_castps_si512(a->fb), _mm512_castps_si512(w->fm));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(w->dp, a->ap), acc);
    if (k != KX_KQ6)
        acc = _mm512_fmadd_ps(w->fm, a->fb, acc);
    return acc;
}

/* Super-block pair p of a row (the second all zero past the row's end). */
KX_INLINE void kx_kz_unpack2(enum kx_kq k, const uint8_t *row, int64_t nb, int64_t p,
                             struct kx_kz2 *o) {
    struct kx_kz u0, u1;
    kx_kz_unpack(k, row, 2 * p, &u0);
    if (2 * p + 1 < nb) {
        kx_kz_unpack(k, row, 2 * p + 1, &u1);
    } else {
        for (int kk = 0; kk < 4; kk++)
            u1.w[kk] = _mm512_setzero_si512();
        u1.s = _mm256_setzero_si256();
        u1.fm = _mm256_setzero_ps();
        u1.d = 0.0f;
    }
    kx_kz_pair(k, &u0, &u1, o);
}

/* Activations packed once per decode call up to this many super-block pairs
 * (20 KB of stack); longer rows pack per pair (same values). */
#define KX_KA_STACK 32

/* Decode: rows [r0, r1) against one token, one row at a time (see
 * KX_DECODE_ROWS), the weights unpacked in registers. */
KX_INLINE void kx_kz_decode(enum kx_kq k, const struct kern_mat *w, const uint8_t *xq, float *y,
                            int64_t r0, int64_t r1) {
    const int64_t nb = w->n_cols / QK_K, np = (nb + 1) / 2;
    const block_q8_K *a = (const block_q8_K *)xq;
    struct kx_ka2 act[KX_KA_STACK];
    const int pre = np <= KX_KA_STACK;
    if (pre)
        for (int64_t p = 0; p < np; p++)
            kx_ka_pack(k, a + 2 * p, 2 * p + 1 < nb, &act[p]);
    /* Every weight line prefetched ahead (kx_pf_decode), as the b32 decode
     * does (kernels-x86.h, where the distance and hint were chosen). Same-run A/B (stream engineer,
     * 02:15, this 2-vCPU EPYC VM): `kernels-bench 256 2 -1 4 q4_K,q6_K 1` q4_K 29.6-32.3
     * -> 42.9-43.3 GB/s, q6_K 31.4-34.8 -> 42.6-43.3 (1.1-1.2x the probe loop on the same bytes);
     * `bench-model MODEL 2 32 16 1` llama-3.2-1b Q4_K_M 50.0-50.3 -> 60.8-64.1 tok/s, Q4_0 (its
     * Q6_K output matrix) 58.9-62.8 -> 65.8-68.5. */
    const size_t pair_bytes = 2 * (k == KX_KQ6   ? sizeof(block_q6_K)
                                   : k == KX_KQ5 ? sizeof(block_q5_K)
                                                 : sizeof(block_q4_K));
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t p = 0; p < np; p++) {
            struct kx_kz2 wz;
            for (size_t o = 0; o < pair_bytes; o += 64)
                kx_pf_decode(row + (size_t)p * pair_bytes + o);
            kx_kz_unpack2(k, row, nb, p, &wz);
            if (pre) {
                acc = kx_kz_acc(k, &wz, &act[p], acc);
            } else {
                struct kx_ka2 ap;
                kx_ka_pack(k, a + 2 * p, 2 * p + 1 < nb, &ap);
                acc = kx_kz_acc(k, &wz, &ap, acc);
            }
        }
        y[r] = _mm512_reduce_add_ps(acc);
    }
}

/* GEMM register tile per kind: rows x tokens, one zmm accumulator each.
 * `taskset -c 1 kernels-bench 1 1 -1 5 q4_K,q6_K 8` and `... 64` (G MAC/s,
 * 1 thread, this 2-vCPU EPYC VM, 2026-12-01, best of 2 interleaved rounds),
 * rows x tokens: q4_K 4x2 179/221, 4x3 139/158, 3x4 126/187; q6_K 2x4
 * 158/190, 4x2 149/189, 3x4 140/175, 3x3 127/146. (Before the super-block
 * pairs, one block per step: q4_K 4x4 130/159, 4x2 156/187, 6x2 101/111
 * from spills.) From DRAM (`kernels-bench 256 2 -1 3 q6_K 8`, 2 threads,
 * 3 interleaved rounds on a busy box) q6_K 4x2 beat 2x4 every time: 172 /
 * 81 / 79 against 127 / 54 / 71 G MAC/s (the next tile's prefetch covers 4
 * rows instead of 2). Both kinds take 4x2. */
#define KX_KZ_TR(k) 4
#define KX_KZ_TT(k) 2
#define KX_KZ_TRMAX 4

/* GEMM micro-kernel: NR rows (wq[b * tr + i]) x nt tokens (act[t * nb + b])
 * over nb super-block pairs. */
KX_INLINE void kx_kzg_tile(enum kx_kq k, const struct kx_kz2 *wq, int tr, int NR, int64_t nb,
                           const struct kx_ka2 *act, int nt, float *out, int64_t ldy) {
    __m512 acc[KX_KZ_TRMAX][4];
    for (int i = 0; i < NR; i++)
        for (int t = 0; t < nt; t++)
            acc[i][t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++)
        for (int t = 0; t < nt; t++)
            for (int i = 0; i < NR; i++)
                acc[i][t] = kx_kz_acc(k, &wq[b * tr + i], &act[t * nb + b], acc[i][t]);
    for (int i = 0; i < NR; i++)
        for (int t = 0; t < nt; t++)
            out[t * ldy + i] = _mm512_reduce_add_ps(acc[i][t]);
}

/* kx_kzg_tile with compile-time NR and nt (1..4). */
#define KX_KZG_NT(NR_)                                                                             \
    switch (ntt) {                                                                                 \
    case 4:                                                                                        \
        kx_kzg_tile(k, wq, tr, NR_, nb, at, 4, o, ldy);                                            \
        break;                                                                                     \
    case 3:                                                                                        \
        kx_kzg_tile(k, wq, tr, NR_, nb, at, 3, o, ldy);                                            \
        break;                                                                                     \
    case 2:                                                                                        \
        kx_kzg_tile(k, wq, tr, NR_, nb, at, 2, o, ldy);                                            \
        break;                                                                                     \
    default:                                                                                       \
        kx_kzg_tile(k, wq, tr, NR_, nb, at, 1, o, ldy);                                            \
        break;                                                                                     \
    }

/* Rows [r0, r1) x nt (<= KX_KG_CHUNK) packed tokens: tiles of KX_KZ_TR(k)
 * rows unpacked once into wq, then single rows; token tiles of KX_KZ_TT(k). */
KX_INLINE void kx_kzg_rows(enum kx_kq k, const struct kern_mat *w, const struct kx_ka2 *act,
                           int64_t nt, struct kx_kz2 *wq, float *y, int64_t ldy, int64_t r0,
                           int64_t r1) {
    const int64_t nb = (w->n_cols / QK_K + 1) / 2; /* super-block pairs */
    const int tr = KX_KZ_TR(k), tt = KX_KZ_TT(k);
    for (int64_t r = r0; r < r1; r += r + tr <= r1 ? tr : 1) {
        const int full = r + tr <= r1;
        const int NR = full ? tr : 1;
        for (int i = 0; i < NR; i++) {
            const uint8_t *row = (const uint8_t *)w->data + (size_t)(r + i) * w->row_bytes;
            for (int64_t p = 0; p < nb; p++)
                kx_kz_unpack2(k, row, w->n_cols / QK_K, p, &wq[p * tr + i]);
        }
        /* The next tile's weights load from DRAM while this one computes. */
        const int64_t rn = r + NR, rn1 = rn + tr < r1 ? rn + tr : r1;
        if (rn < rn1) {
            const uint8_t *nx = (const uint8_t *)w->data + (size_t)rn * w->row_bytes;
            const size_t nbytes = (size_t)(rn1 - rn) * w->row_bytes;
            for (size_t o = 0; o < nbytes; o += 64)
                _mm_prefetch((const char *)nx + o, _MM_HINT_T0);
        }
        for (int64_t t = 0; t < nt; t += tt) {
            const struct kx_ka2 *at = act + t * nb;
            float *o = y + t * ldy + r;
            const int ntt = nt - t < tt ? (int)(nt - t) : tt;
            if (full && tr == 4) {
                KX_KZG_NT(4)
            } else if (full && tr == 2) {
                KX_KZG_NT(2)
            } else {
                KX_KZG_NT(1)
            }
        }
    }
}

/* The GEMM over all tokens; 0 when the scratch could not be allocated (the
 * caller then runs decode per token, same bits). */
static int kx_kzg_matmul(enum kx_kq k, const struct kern_mat *w, const void *xq, size_t xs,
                         int64_t n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nb = w->n_cols / QK_K, np = (nb + 1) / 2;
    const size_t wq_bytes = (size_t)(np * KX_KZ_TRMAX) * sizeof(struct kx_kz2);
    uint8_t *buf = aligned_alloc(64, wq_bytes + (size_t)(KX_KG_CHUNK * np) * sizeof(struct kx_ka2));
    if (!buf)
        return 0;
    struct kx_kz2 *wq = (struct kx_kz2 *)buf;
    struct kx_ka2 *act = (struct kx_ka2 *)(buf + wq_bytes);
    for (int64_t t0 = 0; t0 < n_tok; t0 += KX_KG_CHUNK) {
        int64_t nt = n_tok - t0 < KX_KG_CHUNK ? n_tok - t0 : KX_KG_CHUNK;
        const uint8_t *xt = (const uint8_t *)xq + (size_t)t0 * xs;
        for (int64_t t = 0; t < nt; t++)
            for (int64_t p = 0; p < np; p++)
                kx_ka_pack(k, (const block_q8_K *)(xt + (size_t)t * xs) + 2 * p, 2 * p + 1 < nb,
                           &act[t * np + p]);
        kx_kzg_rows(k, w, act, nt, wq, y + t0 * ldy, ldy, r0, r1);
    }
    free(buf);
    return 1;
}

/* From this many tokens on the GEMM runs (see the measurements above). */
#ifndef KX_KZ_GEMM_MIN
#define KX_KZ_GEMM_MIN 2
#endif

#define KX_KZ_FN(name, kind)                                                                       \
    static void name(const struct kern_mat *w, const void *xq, size_t xs, int64_t n_tok, float *y, \
                     int64_t ldy, int64_t r0, int64_t r1) {                                        \
        if (w->n_cols / QK_K <= 0)                                                                 \
            return;                                                                                \
        if (n_tok >= KX_KZ_GEMM_MIN && kx_kzg_matmul(kind, w, xq, xs, n_tok, y, ldy, r0, r1))      \
            return;                                                                                \
        for (int64_t t = 0; t < n_tok; t++)                                                        \
            kx_kz_decode(kind, w, (const uint8_t *)xq + (size_t)t * xs, y + t * ldy, r0, r1);      \
    }
#endif

#endif
