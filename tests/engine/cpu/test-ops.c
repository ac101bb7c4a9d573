/* tests/engine/cpu/test-ops.c: the scalar ops of the forward pass against
 * straightforward formulas, the KV cache, the routing profile file and the
 * file tier of the expert seam (engine/experts, more in test-experts.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/experts/experts.h"
#include "engine/gguf/gguf.h"
#include "engine/kv/kv.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/ops.h"
#include "engine/experts/profile.h"
#include "engine/quant/quant.h"
#include "tests/harness.h"

START_TEST(test_rmsnorm) {
    float x[5] = {1, -2, 3, -4, 5}, w[5] = {1, 2, 1, 0.5f, 1}, y[5];
    ops_rmsnorm(x, w, y, 5, 1e-5f);
    double ms = (1 + 4 + 9 + 16 + 25) / 5.0;
    for (int i = 0; i < 5; i++)
        ck_assert_double_eq_tol(y[i], x[i] / sqrt(ms + 1e-5) * w[i], 1e-6);
    ops_rmsnorm(x, NULL, x, 5, 0.0f); /* in place, no weight */
    ck_assert_double_eq_tol(x[4], 5 / sqrt(ms), 1e-6);
}
END_TEST

START_TEST(test_softmax_silu) {
    float x[4] = {1000, 1001, 999, -INFINITY};
    ops_softmax(x, 4);
    double z = 1 + exp(1) + exp(-1);
    ck_assert_double_eq_tol(x[0], 1 / z, 1e-6);
    ck_assert_double_eq_tol(x[1], exp(1) / z, 1e-6);
    ck_assert_float_eq(x[3], 0.0f);
    ck_assert_double_eq_tol(ops_silu(2.0f), 2.0 / (1 + exp(-2.0)), 1e-6);
    float g[2] = {1, -1}, u[2] = {2, 3}, y[2];
    ops_swiglu(g, u, y, 2);
    ck_assert_double_eq_tol(y[1], 3 * (-1 / (1 + exp(1.0))), 1e-6);
    /* the SIMD path (8 at a time, polynomial exp) over [-120, 120] incl. the
     * clamps (below -88 the result is ~1e-36, not 0), and a scalar tail: within
     * 4e-7 relative of the exact formula */
    enum { N = 1003 };
    static float gg[N], uu[N], yy[N];
    for (int i = 0; i < N; i++) {
        gg[i] = -120.0f + 240.0f * (float)i / (N - 1);
        uu[i] = 1.0f + (float)(i % 7);
    }
    const enum kernels_isa saved = kernels_isa_active();
    for (int isa = 0; isa <= (int)kernels_isa_detected() && isa <= KERNELS_ISA_AVX2; isa++) {
        kernels_isa_force((enum kernels_isa)isa); /* the two paths: scalar, AVX2 */
        ops_swiglu(gg, uu, yy, N);
        for (int i = 0; i < N; i++) {
            double ref = (double)gg[i] / (1 + exp(-(double)gg[i])) * uu[i];
            ck_assert_msg(fabs(yy[i] - ref) <= 4e-7 * fabs(ref) + 1e-30, "%s swiglu(%g): %g vs %g",
                          kernels_isa_name((enum kernels_isa)isa), (double)gg[i], (double)yy[i],
                          ref);
        }
    }
    kernels_isa_force(saved);
}
END_TEST

/* Rope against the closed form angle pos * base^(-2i/n_rot) for both modes. */
START_TEST(test_rope_modes) {
    const int hd = 8, nh = 2, n_rot = 6, pos = 5;
    struct ops_rope_cfg c = {
        .n_rot = n_rot, .freq_base = 10000.0f, .freq_scale = 1.0f, .attn_factor = 1.0f};
    for (int mode = 0; mode <= 2; mode += 2) {
        c.mode = mode;
        float x[16], y[16];
        for (int i = 0; i < 16; i++)
            x[i] = y[i] = (float)(i + 1) * 0.25f;
        ops_rope(y, nh, hd, pos, &c);
        for (int h = 0; h < nh; h++) {
            const float *a = x + h * hd;
            const float *b = y + h * hd;
            for (int i = 0; i < n_rot / 2; i++) {
                double th = pos * pow(10000.0, -2.0 * i / n_rot);
                int i0 = mode == 2 ? i : 2 * i, i1 = mode == 2 ? i + n_rot / 2 : 2 * i + 1;
                ck_assert_double_eq_tol(b[i0], a[i0] * cos(th) - a[i1] * sin(th), 1e-5);
                ck_assert_double_eq_tol(b[i1], a[i0] * sin(th) + a[i1] * cos(th), 1e-5);
            }
            for (int i = n_rot; i < hd; i++) /* dims past n_rot pass through */
                ck_assert_float_eq(b[i], a[i]);
        }
    }
    /* pos 0 is the identity; linear scaling halves the angle */
    float z[8] = {1, 2, 3, 4, 5, 6, 7, 8}, z0[8];
    memcpy(z0, z, sizeof z);
    c.mode = 0;
    ops_rope(z, 1, 8, 0, &c);
    ck_assert(memcmp(z, z0, sizeof z) == 0);
    c.freq_scale = 0.5f;
    float a[8], b[8];
    memcpy(a, z0, sizeof a);
    memcpy(b, z0, sizeof b);
    ops_rope(a, 1, 8, 6, &c);
    c.freq_scale = 1.0f;
    ops_rope(b, 1, 8, 3, &c);
    for (int i = 0; i < 8; i++)
        ck_assert_double_eq_tol(a[i], b[i], 1e-5);
    /* freq factors divide the angle */
    float ff[3] = {2, 2, 2};
    c.freq_factors = ff;
    memcpy(a, z0, sizeof a);
    ops_rope(a, 1, 8, 6, &c);
    for (int i = 0; i < 8; i++)
        ck_assert_double_eq_tol(a[i], b[i], 1e-5);
}
END_TEST

START_TEST(test_yarn_corr_dims) {
    float d[2];
    ops_rope_yarn_corr_dims(128, 4096, 10000.0f, d);
    /* closed form: n_rot * ln(n_ctx / (beta * 2 pi)) / (2 ln base) */
    double lo = floor(128 * log(4096 / (32 * 2 * M_PI)) / (2 * log(10000.0)));
    double hi = ceil(128 * log(4096 / (1 * 2 * M_PI)) / (2 * log(10000.0)));
    ck_assert_double_eq(d[0], lo);
    ck_assert_double_eq(d[1], hi < 127 ? hi : 127);
    ck_assert(d[0] >= 0 && d[1] <= 127 && d[0] < d[1]);
}
END_TEST

/* One head against a naive double-precision attention. */
START_TEST(test_attn_head) {
    enum { D = 16, N = 9 };
    uint16_t k[N][D], v[N][D];
    const uint16_t *kr[N], *vr[N];
    float q[D], out[D], scores[N];
    for (int i = 0; i < D; i++)
        q[i] = sinf((float)i);
    for (int p = 0; p < N; p++) {
        for (int i = 0; i < D; i++) {
            k[p][i] = quant_f32_to_f16(cosf((float)(p * D + i)));
            v[p][i] = quant_f32_to_f16(sinf((float)(p + i) * 0.3f));
        }
        kr[p] = k[p];
        vr[p] = v[p];
    }
    ops_attn_head(q, kr, vr, N, D, D, 0.25f, scores, out);
    double s[N], mx = -1e30, z = 0;
    for (int p = 0; p < N; p++) {
        s[p] = 0;
        for (int i = 0; i < D; i++)
            s[p] += (double)q[i] * quant_f16_to_f32(k[p][i]);
        s[p] *= 0.25;
        mx = s[p] > mx ? s[p] : mx;
    }
    for (int p = 0; p < N; p++)
        z += (s[p] = exp(s[p] - mx));
    for (int i = 0; i < D; i++) {
        double o = 0;
        for (int p = 0; p < N; p++)
            o += s[p] / z * quant_f16_to_f32(v[p][i]);
        /* q is rounded to f16 before the dot (as ggml): ~1e-3 relative */
        ck_assert_double_eq_tol(out[i], o, 2e-3);
    }
}
END_TEST

/* Tolerance of ops_attn_group (SIMD summation order, polynomial exp, the
 * 1/sum applied after the V sum) against ops_attn_head per head, relative to
 * max |v| = 1: 1e-5. */
#define ATTN_GROUP_TOL 1e-5

/* Grouped heads (every ISA's path the host runs, and the scalar one) against
 * one-head-at-a-time, on GQA
 * shapes, a tail-only shape (dims not multiples of 8: scalar fallback),
 * dims multiples of 8 but not 16 (the AVX2 path on an AVX-512 CPU), dv not a
 * multiple of 64 (partial register tiles), pairs of heads (their own path)
 * and a wide score range (exp far from 0). */
START_TEST(test_attn_group) {
    static const struct {
        int n_q, dk, dv, n_kv;
        float q_amp;
    } shapes[] = {{4, 64, 64, 300, 1.0f}, {1, 16, 16, 1, 1.0f},    {3, 128, 64, 37, 1.0f},
                  {8, 20, 12, 17, 1.0f},  {2, 64, 64, 999, 6.0f},  {5, 8, 8, 9, 30.0f},
                  {4, 24, 40, 70, 2.0f},  {6, 48, 80, 33, 1.0f},   {1, 128, 128, 131, 1.0f},
                  {1, 64, 272, 6, 3.0f},  {2, 128, 128, 77, 2.0f}, {2, 128, 144, 40, 1.0f},
                  {2, 32, 48, 2, 1.0f}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const int nq = shapes[c].n_q, dk = shapes[c].dk, dv = shapes[c].dv, n = shapes[c].n_kv;
        uint16_t *k = malloc((size_t)n * dk * sizeof *k), *v = malloc((size_t)n * dv * sizeof *v);
        const uint16_t **kr = malloc((size_t)n * sizeof *kr), **vr = malloc((size_t)n * sizeof *vr);
        float *q = malloc((size_t)nq * dk * sizeof *q);
        float *sc = malloc((size_t)nq * n * sizeof *sc);
        float *ref = malloc((size_t)nq * dv * sizeof *ref),
              *o1 = malloc((size_t)nq * dv * sizeof *o1);
        float *o2 = malloc((size_t)nq * dv * sizeof *o2);
        for (int i = 0; i < nq * dk; i++)
            q[i] = shapes[c].q_amp * sinf((float)i * 0.7f + (float)c);
        for (int p = 0; p < n; p++) {
            /* rows in reverse memory order: the pointers, not the layout, define positions */
            kr[p] = k + (size_t)(n - 1 - p) * dk;
            vr[p] = v + (size_t)(n - 1 - p) * dv;
            for (int i = 0; i < dk; i++)
                k[(size_t)(n - 1 - p) * dk + i] =
                    quant_f32_to_f16(cosf((float)(p * dk + i) * 1.3f));
            for (int i = 0; i < dv; i++)
                v[(size_t)(n - 1 - p) * dv + i] = quant_f32_to_f16(sinf((float)(p + 3 * i) * 0.3f));
        }
        const float scale = 1.0f / sqrtf((float)dk);
        for (int g = 0; g < nq; g++)
            ops_attn_head(q + (size_t)g * dk, kr, vr, n, dk, dv, scale, sc, ref + (size_t)g * dv);
        /* every SIMD ISA the host runs (the kernels' ISA picks the path; the
         * scalar one is o2 below) */
        const enum kernels_isa saved = kernels_isa_active();
        for (int isa = 1; isa <= (int)kernels_isa_detected(); isa++) {
            kernels_isa_force((enum kernels_isa)isa);
            ops_attn_group(q, nq, kr, vr, n, dk, dv, scale, sc, o1);
            ops_attn_group_scalar(q, nq, kr, vr, n, dk, dv, scale, sc, o2);
            for (int i = 0; i < nq * dv; i++) {
                ck_assert_msg(
                    fabsf(o1[i] - ref[i]) <= ATTN_GROUP_TOL, "%s shape %zu [%d]: %g vs %g",
                    kernels_isa_name((enum kernels_isa)isa), c, i, (double)o1[i], (double)ref[i]);
                ck_assert_msg(fabsf(o2[i] - ref[i]) <= ATTN_GROUP_TOL, "shape %zu [%d]: %g vs %g",
                              c, i, (double)o2[i], (double)ref[i]);
            }
            /* the same inputs give the same bits (scratch contents do not leak in) */
            for (int i = 0; i < nq * n; i++)
                sc[i] = NAN;
            ops_attn_group(q, nq, kr, vr, n, dk, dv, scale, sc, o2);
            ck_assert(memcmp(o1, o2, (size_t)nq * dv * sizeof *o1) == 0);
            if (nq == 1) { /* the one-head path gives the multi-head tile's bits */
                float *q2 = malloc((size_t)2 * dk * sizeof *q2),
                      *sc2 = malloc((size_t)2 * n * sizeof *sc2);
                float *o3 = malloc((size_t)2 * dv * sizeof *o3);
                ck_assert(q2 && sc2 && o3);
                memcpy(q2, q, (size_t)dk * sizeof *q2);
                memcpy(q2 + dk, q, (size_t)dk * sizeof *q2);
                ops_attn_group(q2, 2, kr, vr, n, dk, dv, scale, sc2, o3);
                ck_assert_msg(memcmp(o1, o3, (size_t)dv * sizeof *o1) == 0,
                              "shape %zu: 1 vs 2 heads", c);
                free(q2), free(sc2), free(o3);
            }
            if (nq == 2) { /* the two-head path gives the four-head tile's bits */
                float *q3 = malloc((size_t)3 * dk * sizeof *q3),
                      *sc3 = malloc((size_t)3 * n * sizeof *sc3);
                float *o3 = malloc((size_t)3 * dv * sizeof *o3);
                ck_assert(q3 && sc3 && o3);
                memcpy(q3, q, (size_t)2 * dk * sizeof *q3);
                memcpy(q3 + 2 * dk, q, (size_t)dk * sizeof *q3);
                ops_attn_group(q3, 3, kr, vr, n, dk, dv, scale, sc3, o3);
                ck_assert_msg(memcmp(o1, o3, (size_t)2 * dv * sizeof *o1) == 0,
                              "shape %zu: 2 vs 3 heads", c);
                free(q3), free(sc3), free(o3);
            }
        }
        kernels_isa_force(saved);
        free(k);
        free(v);
        free(kr);
        free(vr);
        free(q);
        free(sc);
        free(ref);
        free(o1);
        free(o2);
    }
}
END_TEST

START_TEST(test_f16_all_values) {
    for (uint32_t h = 0; h < 65536; h++) {
        float a = ops_f16_to_f32((uint16_t)h), b = quant_f16_to_f32((uint16_t)h);
        ck_assert_msg(memcmp(&a, &b, 4) == 0 || (isnan(a) && isnan(b)), "f16 %04x: %g vs %g", h, a,
                      b);
    }
}
END_TEST

/* ops_f32_to_f16_row (F16C blocks of 8 + scalar tail) gives quant_f32_to_f16's
 * bits: a sweep over every exponent with several mantissas, every f16 value
 * and the midpoints between neighbours (ties), overflow and subnormal
 * boundaries, and NaNs placed inside otherwise finite blocks. */
START_TEST(test_f32_to_f16_row) {
    enum { N = 262144 + 65536 * 2 + 64 };
    float *x = malloc(N * sizeof *x);
    uint16_t *y = malloc(N * sizeof *y);
    ck_assert(x && y);
    int n = 0;
    for (uint32_t u = 0; u < 262144; u++) { /* sign x exponent x 1024 mantissas */
        uint32_t b = (u & 0x20000u) << 14 | (u >> 10 & 0xffu) << 23 | (u & 1023u) * 8191u;
        memcpy(&x[n++], &b, 4);
    }
    for (uint32_t h = 0; h < 65536; h++) {
        x[n++] = quant_f16_to_f32((uint16_t)h);
        uint32_t b;
        memcpy(&b, &x[n - 1], 4);
        b += 1u << 12; /* halfway to the next f16 for normals: a tie */
        memcpy(&x[n++], &b, 4);
    }
    const float special[] = {65504.0f, 65519.99f, 65520.0f,   -65520.0f, 5.96e-8f,
                             2.98e-8f, 2.99e-8f,  6.1035e-5f, INFINITY,  -INFINITY,
                             NAN,      -NAN,      0.0f,       -0.0f};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        x[n++] = special[i];
    x[n++] = NAN; /* NaNs inside a block of finite values */
    ck_assert_int_le(n, N);
    const enum kernels_isa saved = kernels_isa_active();
    for (int isa = 0; isa <= (int)kernels_isa_detected() && isa <= KERNELS_ISA_AVX2; isa++) {
        kernels_isa_force((enum kernels_isa)isa); /* the two paths: scalar, F16C */
        for (int off = 0; off < 3; off++) {       /* block alignment and the scalar tail */
            ops_f32_to_f16_row(x + off, y, n - off);
            for (int i = 0; i < n - off; i++)
                ck_assert_msg(y[i] == quant_f32_to_f16(x[off + i]), "value %d (%a): %04x vs %04x",
                              i, (double)x[off + i], y[i], quant_f32_to_f16(x[off + i]));
        }
    }
    kernels_isa_force(saved);
    free(x), free(y);
}
END_TEST

START_TEST(test_kv) {
    struct strata_error err = {0};
    struct kv_params kp = {
        .n_layer = 2, .n_seq_max = 3, .n_ctx = 4, .n_embd_k = 4, .n_embd_v = 2, .n_block = 4};
    struct kv_cache *kv = kv_init(&kp, &err);
    ck_assert(kv != NULL);
    ck_assert_int_eq(kv_bytes_allocated(kv), 0);
    ck_assert_int_eq(kv_seq_reserve(kv, 1, &err), 0);
    for (int p = 0; p < 3; p++) /* paged (kv.h): blocks are taken per position */
        ck_assert_int_eq(kv_seq_reserve_pos(kv, 1, p, &err), 0);
    ck_assert_int_eq(kv_bytes_allocated(kv), 2 * 4 * (4 + 2) * 2);
    for (int p = 0; p < 3; p++)
        kv_k_row(kv, 1, 1, p)[3] = (uint16_t)(100 + p);
    kv_seq_set_len(kv, 1, 3);
    ck_assert_int_eq(kv_seq_len(kv, 1), 3);
    ck_assert_int_eq(kv_seq_copy(kv, 2, 1, 2, &err), 0);
    ck_assert_int_eq(kv_seq_len(kv, 2), 2);
    ck_assert_int_eq(kv_k_row(kv, 1, 2, 1)[3], 101);
    ck_assert_int_eq(kv_seq_copy(kv, 2, 1, 4, &err), STRATA_E_RANGE);
    ck_assert_int_eq(kv_seq_truncate(kv, 1, 1, &err), 0);
    ck_assert_int_eq(kv_seq_len(kv, 1), 1);
    ck_assert_int_eq(kv_seq_truncate(kv, 1, 2, &err), STRATA_E_RANGE);
    ck_assert_int_eq(kv_seq_clear(kv, 3, &err), STRATA_E_INVALID);
    ck_assert_int_eq(kv_seq_len(kv, -1), -1);
    ck_assert_int_eq(kv_seq_free(kv, 1, &err), 0);
    ck_assert_int_eq(kv_bytes_allocated(kv), 2 * 4 * (4 + 2) * 2);
    kv_free(kv);
    kp.n_ctx = 0;
    ck_assert(kv_init(&kp, &err) == NULL);
    kp.n_ctx = 1 << 30; /* with 4096-wide K rows: ~2^44 bytes per sequence, over 2^40 */
    kp.n_embd_k = 1 << 12;
    ck_assert(kv_init(&kp, &err) == NULL);
    ck_assert_int_eq(err.code, STRATA_E_LIMIT);
    kv_free(NULL);
}
END_TEST

START_TEST(test_profile_roundtrip) {
    struct strata_error err = {0};
    struct profile *p = profile_init(3, 5, &err);
    ck_assert(p != NULL);
    profile_add(p, 0, 4);
    profile_add(p, 0, 4);
    profile_add(p, 2, 1);
    profile_add(p, 3, 0); /* ignored */
    profile_add(p, 0, -1);
    ck_assert_int_eq(profile_total(p), 3);
    char path[] = "/tmp/strata-test-prof-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    ck_assert_int_eq(profile_save(p, path, &err), 0);
    struct profile *q = profile_load(path, &err);
    ck_assert_msg(q != NULL, "%s", err.message);
    ck_assert_int_eq(profile_n_layer(q), 3);
    ck_assert_int_eq(profile_n_expert(q), 5);
    ck_assert_int_eq(profile_count(q, 0, 4), 2);
    ck_assert_int_eq(profile_count(q, 2, 1), 1);
    ck_assert_int_eq(profile_count(q, 9, 9), 0);
    ck_assert_int_eq(profile_merge(p, q, &err), 0);
    ck_assert_int_eq(profile_count(p, 0, 4), 4);
    profile_reset(p);
    ck_assert_int_eq(profile_total(p), 0);
    /* truncated and corrupted files are refused */
    size_t n;
    uint8_t *bytes = test_read_file(path, &n);
    ck_assert_int_eq(n, 16 + 15 * 8);
    FILE *fp = fopen(path, "wb");
    fwrite(bytes, 1, n - 3, fp);
    fclose(fp);
    ck_assert(profile_load(path, &err) == NULL);
    ck_assert_int_eq(err.code, STRATA_E_FORMAT);
    bytes[8] = 0xff, bytes[9] = 0xff, bytes[10] = 0xff; /* n_layer huge */
    fp = fopen(path, "wb");
    fwrite(bytes, 1, n, fp);
    fclose(fp);
    ck_assert(profile_load(path, &err) == NULL);
    ck_assert_int_eq(err.code, STRATA_E_FORMAT);
    bytes[0] = 'X';
    fp = fopen(path, "wb");
    fwrite(bytes, 1, n, fp);
    fclose(fp);
    ck_assert(profile_load(path, &err) == NULL);
    free(bytes);
    unlink(path);
    ck_assert(profile_load("/nonexistent/x.prof", &err) == NULL);
    ck_assert_int_eq(err.code, STRATA_E_IO);
    ck_assert(profile_init(0, 5, &err) == NULL);
    profile_free(q);
    profile_free(p);
    profile_free(NULL);
}
END_TEST

START_TEST(test_experts_file_dense_file) {
    /* A dense model has no expert tensors: every get says NOT_FOUND. */
    char path[1024];
    struct strata_error err = {0};
    struct gguf_file *f =
        gguf_open(test_shared_path(path, sizeof path, "models/stories260K.gguf"), &err);
    ck_assert_msg(f != NULL, "%s", err.message);
    struct experts_source *src = experts_file_init(f, 5, NULL, &err);
    ck_assert(src != NULL);
    ck_assert_str_eq(src->ops->name, "file");
    struct experts_ref r;
    ck_assert_int_eq(experts_get(src, 0, 0, EXPERTS_GATE, 1, &r, &err), STRATA_E_INVALID);
    ck_assert_int_eq(experts_get(src, 9, 0, EXPERTS_GATE, 1, &r, &err), STRATA_E_INVALID);
    experts_free(src);
    experts_free(NULL);
    gguf_close(f);
}
END_TEST

static Suite *ops_suite(void) {
    Suite *s = suite_create("ops");
    TCase *tc = tcase_create("ops");
    tcase_add_test(tc, test_rmsnorm);
    tcase_add_test(tc, test_softmax_silu);
    tcase_add_test(tc, test_rope_modes);
    tcase_add_test(tc, test_yarn_corr_dims);
    tcase_add_test(tc, test_attn_head);
    tcase_add_test(tc, test_attn_group);
    tcase_add_test(tc, test_f16_all_values);
    tcase_add_test(tc, test_f32_to_f16_row);
    tcase_add_test(tc, test_kv);
    tcase_add_test(tc, test_profile_roundtrip);
    tcase_add_test(tc, test_experts_file_dense_file);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("ops", ops_suite)
