/* tests/gpu/test-vk-mm-fuse.c: the matvec's fused residual add
 * (vkmm_matmul_acc, gpu/vk-mm.h), with the norm after it
 * (vkmm_matmul_acc_norm), and the block path's variants (":uN"
 * blocks a lane at once, ":soa" rows of vkmm_soa_row). Part of test-vk-mm
 * (its main).
 *
 * For F32, Q4_0, Q8_0 and Q4_K rows (the unit path and the block path), 67
 * rows, n_tok 1, 2, 3 and 9 (the 1/2/4-token matvecs and two 8-token
 * passes), one and two blocks a lane at once: y = W x against the
 * double-precision reference (NMSE below 1e-9, as test-vk-mm's matvec
 * checks: float rounding only), and the residual it adds into bit-equal to
 * r + y in f32 (one add per element, what vkops_add does). A wrong element
 * or a row added to another's residual moves the NMSE to ~1e-3 or more, or
 * the residual off its bits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu/vk-mm-fixture.h"

TCase *vkmm_fuse_tcase(void);

#define FUSE_NMSE 1e-9
#define FUSE_ROWS 67
#define FUSE_EPS 1e-5f

/* ref[t * rows + r] = W[r] . x[t] in double. */
static void fz_ref(const struct fz_mat *m, const float *x, int64_t n_tok, double *ref) {
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < m->w.n_rows; r++) {
            double s = 0;
            for (int64_t c = 0; c < m->w.n_cols; c++)
                s += (double)m->deq[r * m->w.n_cols + c] * (double)x[t * m->w.n_cols + c];
            ref[t * m->w.n_rows + r] = s;
        }
}

static void check_acc(struct fz_gpu *g, enum quant_type type, int64_t cols, int64_t nt,
                      const char *shape) {
    const int64_t rows = FUSE_ROWS;
    struct fz_mat a;
    fz_mat_init(g, &a, type, rows, cols);
    float *x = malloc(sizeof(float) * (size_t)(nt * cols));
    float *r = malloc(sizeof(float) * (size_t)(nt * rows));
    for (int64_t i = 0; i < nt * cols; i++)
        x[i] = fz_rand() * (1.0f + (float)(i / cols)); /* tokens of different scales */
    for (int64_t i = 0; i < nt * rows; i++)
        r[i] = fz_rand();
    double *rx = malloc(sizeof(double) * (size_t)(nt * rows));
    fz_ref(&a, x, nt, rx);
    const size_t xs = sizeof(float) * (size_t)(nt * cols), ys = sizeof(float) * (size_t)(nt * rows);
    struct vk_buf *xb = fz_buf(g, x, xs), *y3 = fz_buf(g, NULL, ys), *rbuf = fz_buf(g, r, ys);
    struct strata_error err = {0};
    ck_assert_int_eq(vk_rec_begin(g->d, &err), 0);
    vkmm_matmul_acc(g->mm, &a.w, fz_bd(xb), fz_bd(y3), nt, fz_bd(rbuf));
    fz_run(g);
    float *got = malloc(ys), *res = malloc(ys);
    const char *tn = quant_type_name(type);
    fz_read(g, y3, got, (size_t)(nt * rows));
    const double e = fz_nmse(got, rx, nt * rows);
    ck_assert_msg(e < FUSE_NMSE, "%s %s acc n_tok %lld: nmse %.3g", shape, tn, (long long)nt, e);
    fz_read(g, rbuf, res, (size_t)(nt * rows));
    for (int64_t i = 0; i < nt * rows; i++) {
        const float want = r[i] + got[i];
        ck_assert_msg(memcmp(&res[i], &want, 4) == 0,
                      "%s %s acc n_tok %lld: res[%lld] %.9g, want %.9g", shape, tn, (long long)nt,
                      (long long)i, res[i], want);
    }
    free(res);
    free(got);
    vk_buf_free(g->d, rbuf);
    vk_buf_free(g->d, y3);
    vk_buf_free(g->d, xb);
    free(rx);
    free(r);
    free(x);
    fz_mat_free(g, &a);
}

/* _i: 0 the default matvec shape, 1 two blocks a lane at once. */
START_TEST(test_acc_matvec) {
    static const enum quant_type tt[] = {QUANT_F32, QUANT_Q4_0, QUANT_Q8_0, QUANT_Q4_K};
    static const int64_t cols[] = {172, 320, 320, 512};
    static const int64_t toks[] = {1, 2, 3, 9};
    struct fz_gpu g = {0};
    struct strata_error err = {0};
    ck_assert_msg(vk_dev_open(-1, &g.d, &err) == 0, "vk_dev_open: %s", err.message);
    ck_assert_msg(vkmm_init(g.d, &g.mm, &err) == 0, "vkmm_init: %s", err.message);
    const char *shape = _i ? "mv=128x4x2:u2" : "auto";
    ck_assert_msg(vkmm_configure(g.mm, shape, &err) == 0, "configure %s: %s", shape, err.message);
    for (int k = 0; k < 4; k++) {
        if (_i && (tt[k] == QUANT_F32 || tt[k] == QUANT_Q4_K))
            continue; /* two blocks a lane: the block path's (Q4_0, Q8_0) */
        for (int j = 0; j < 4; j++)
            check_acc(&g, tt[k], cols[k], toks[j], shape);
    }
    /* above 32 tokens the fused form is refused (the tiled matmul has none) */
    struct vk_buf *b = fz_buf(&g, NULL, 64);
    struct fz_mat m;
    fz_mat_init(&g, &m, QUANT_F32, 4, 4);
    ck_assert(!vkmm_acc_ok(33) && vkmm_acc_ok(32) && !vkmm_acc_ok(0));
    ck_assert_int_eq(vk_rec_begin(g.d, &err), 0);
    vkmm_matmul_acc(g.mm, &m.w, fz_bd(b), fz_bd(b), 33, fz_bd(b));
    ck_assert_int_eq(vk_rec_submit(g.d, &err), 0);
    ck_assert_int_eq(vk_rec_wait(g.d, &err), 0);
    ck_assert_int_eq(vkmm_status(g.mm, &err), STRATA_E_INVALID);
    fz_mat_free(&g, &m);
    vk_buf_free(g.d, b);
    vkmm_free(g.mm);
    vk_dev_close(g.d);
}
END_TEST

/* The scales-then-quants rows (vkmm_soa_row, ":soa"): Q4_0 and Q8_0 rows of
 * 512 columns (16 blocks: the 16-byte loads) and 320 (10: word loads), one
 * and two tokens, one and two blocks a lane, against the reference of the
 * GGUF bytes they came from. */
START_TEST(test_soa) {
    static const enum quant_type tt[] = {QUANT_Q4_0, QUANT_Q8_0};
    static const int64_t cols[] = {512, 320};
    static const char *shapes[] = {"mv=128x4:soa", "mv=32x2:u2:soa"};
    for (int si = 0; si < 2; si++) {
        struct fz_gpu g = {0};
        struct strata_error err = {0};
        ck_assert_msg(vk_dev_open(-1, &g.d, &err) == 0, "vk_dev_open: %s", err.message);
        ck_assert_msg(vkmm_init(g.d, &g.mm, &err) == 0, "vkmm_init: %s", err.message);
        ck_assert_msg(vkmm_configure(g.mm, shapes[si], &err) == 0, "%s: %s", shapes[si],
                      err.message);
        ck_assert_uint_eq(g.mm->tune.mv_soa, 1);
        for (int k = 0; k < 2; k++)
            for (int ci = 0; ci < 2; ci++) {
                struct fz_mat m;
                fz_mat_init(&g, &m, tt[k], FUSE_ROWS, cols[ci]);
                const size_t bytes = (size_t)FUSE_ROWS * m.w.row_bytes;
                uint8_t *gguf = malloc(bytes), *soa = malloc(bytes);
                ck_assert_int_eq(vk_buf_download(g.d, m.buf, 0, gguf, bytes, &err), 0);
                for (int r = 0; r < FUSE_ROWS; r++)
                    vkmm_soa_row(tt[k], gguf + (size_t)r * m.w.row_bytes,
                                 soa + (size_t)r * m.w.row_bytes, cols[ci]);
                ck_assert_int_eq(vk_buf_upload(g.d, m.buf, 0, soa, bytes, &err), 0);
                for (int64_t nt = 1; nt <= 2; nt++) {
                    float *x = malloc(sizeof(float) * (size_t)(nt * cols[ci]));
                    float *y = malloc(sizeof(float) * (size_t)(nt * FUSE_ROWS));
                    double *ref = malloc(sizeof(double) * (size_t)(nt * FUSE_ROWS));
                    for (int64_t i = 0; i < nt * cols[ci]; i++)
                        x[i] = fz_rand();
                    fz_ref(&m, x, nt, ref);
                    struct vk_buf *xb = fz_buf(&g, x, sizeof(float) * (size_t)(nt * cols[ci]));
                    struct vk_buf *yb = fz_buf(&g, NULL, sizeof(float) * (size_t)(nt * FUSE_ROWS));
                    ck_assert_int_eq(vk_rec_begin(g.d, &err), 0);
                    vkmm_matmul(g.mm, &m.w, -1, fz_bd(xb), fz_bd(yb), nt);
                    fz_run(&g);
                    fz_read(&g, yb, y, (size_t)(nt * FUSE_ROWS));
                    const double e = fz_nmse(y, ref, nt * FUSE_ROWS);
                    ck_assert_msg(e < FUSE_NMSE, "%s %s cols %lld n_tok %lld: nmse %.3g",
                                  shapes[si], quant_type_name(tt[k]), (long long)cols[ci],
                                  (long long)nt, e);
                    vk_buf_free(g.d, yb);
                    vk_buf_free(g.d, xb);
                    free(ref);
                    free(y);
                    free(x);
                }
                free(soa);
                free(gguf);
                fz_mat_free(&g, &m);
            }
        vkmm_free(g.mm);
        vk_dev_close(g.d);
    }
}
END_TEST

/* vkmm_matmul_acc_norm (mv_body.glsl TAIL): res += W x, then the last
 * workgroup's RMSNorm of res into ny and its q8 blocks into nq. Rows 96
 * (one or a few workgroups) and 4160 (130 blocks: lanes with two blocks at
 * 128 lanes), F32 / Q4_0 / Q4_K, two shapes (128 x 4 and 32 x 2 lanes x
 * rows). Two dispatches in one recording (the barrier after each): the second
 * finds the counter the first reset, so its norm is computed too (of the
 * twice-added residual). Checked: y against the double reference (NMSE as
 * the matvec's), res bit-equal to r + y + y, ny against the norm of that
 * res in double (relative 1e-5 of the row's largest |ny|), each block's d
 * = max|ny| / 127 (relative 1e-6), its levels round(ny / d) within one
 * (ties may round either way after a last-bit difference) and their sum
 * exact, the pad words zero. Rows not a multiple of 32 are refused. */
static void check_acc_norm(struct fz_gpu *g, enum quant_type type, int64_t rows, int64_t cols,
                           const char *shape) {
    struct fz_mat a;
    fz_mat_init(g, &a, type, rows, cols);
    ck_assert(vkmm_acc_norm_ok(g->mm, &a.w));
    float *x = malloc(sizeof(float) * (size_t)cols), *r = malloc(sizeof(float) * (size_t)rows);
    float *nw = malloc(sizeof(float) * (size_t)rows);
    for (int64_t i = 0; i < cols; i++)
        x[i] = fz_rand();
    for (int64_t i = 0; i < rows; i++) {
        r[i] = 4.0f * fz_rand();
        nw[i] = 0.5f + fz_rand() * fz_rand();
    }
    double *rx = malloc(sizeof(double) * (size_t)rows);
    fz_ref(&a, x, 1, rx);
    const size_t ys = sizeof(float) * (size_t)rows, qs = (size_t)rows / 32 * VKMM_Q8_BLOCK_BYTES;
    struct vk_buf *xb = fz_buf(g, x, sizeof(float) * (size_t)cols), *yb = fz_buf(g, NULL, ys);
    struct vk_buf *rb = fz_buf(g, r, ys), *wb = fz_buf(g, nw, ys), *nyb = fz_buf(g, NULL, ys);
    struct vk_buf *nqb = fz_buf(g, NULL, qs);
    const struct vkmm_tail t = {fz_bd(wb), fz_bd(nyb), fz_bd(nqb), FUSE_EPS};
    struct strata_error err = {0};
    ck_assert_int_eq(vk_rec_begin(g->d, &err), 0);
    vkmm_matmul_acc_norm(g->mm, &a.w, fz_bd(xb), fz_bd(yb), fz_bd(rb), &t);
    vkmm_matmul_acc_norm(g->mm, &a.w, fz_bd(xb), fz_bd(yb), fz_bd(rb), &t);
    fz_run(g);
    ck_assert_int_eq(vkmm_status(g->mm, &err), 0);
    const char *tn = quant_type_name(type);
    float *y = malloc(ys), *res = malloc(ys), *ny = malloc(ys);
    uint32_t *nq = malloc(qs);
    fz_read(g, yb, y, (size_t)rows);
    fz_read(g, rb, res, (size_t)rows);
    fz_read(g, nyb, ny, (size_t)rows);
    ck_assert_int_eq(vk_buf_download(g->d, nqb, 0, nq, qs, &err), 0);
    const double e = fz_nmse(y, rx, rows);
    ck_assert_msg(e < FUSE_NMSE, "%s %s acc_norm rows %lld: y nmse %.3g", shape, tn,
                  (long long)rows, e);
    double ss = 0;
    for (int64_t i = 0; i < rows; i++) {
        const float want = (r[i] + y[i]) + y[i];
        ck_assert_msg(memcmp(&res[i], &want, 4) == 0, "%s %s acc_norm: res[%lld] %.9g, want %.9g",
                      shape, tn, (long long)i, res[i], want);
        ss += (double)res[i] * res[i];
    }
    const double scale = 1.0 / sqrt(ss / (double)rows + FUSE_EPS);
    double big = 0;
    for (int64_t i = 0; i < rows; i++)
        big = fmax(big, fabs((double)res[i] * scale * nw[i]));
    for (int64_t i = 0; i < rows; i++) {
        const double want = (double)res[i] * scale * nw[i];
        ck_assert_msg(fabs(ny[i] - want) <= 1e-5 * big,
                      "%s %s acc_norm rows %lld: ny[%lld] %.9g, want %.9g", shape, tn,
                      (long long)rows, (long long)i, ny[i], want);
    }
    for (int64_t b = 0; b < rows / 32; b++) {
        const uint32_t *q = nq + b * (VKMM_Q8_BLOCK_BYTES / 4);
        float amax = 0, d;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(ny[32 * b + j]));
        memcpy(&d, &q[8], 4);
        ck_assert_msg(fabs(d - amax / 127.0) <= 1e-6 * amax / 127.0, "%s %s block %lld: d %.9g",
                      shape, tn, (long long)b, d);
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            const int l = (int8_t)(q[j / 4] >> (8 * (j % 4)));
            const double want = d > 0 ? ny[32 * b + j] / d : 0;
            ck_assert_msg(fabs(l - want) <= 1.0, "%s %s block %lld: level %d of %.6g", shape, tn,
                          (long long)b, l, want);
            sum += l;
        }
        ck_assert_int_eq((int32_t)q[9], sum);
        ck_assert_uint_eq(q[10], 0);
        ck_assert_uint_eq(q[11], 0);
    }
    free(nq);
    free(ny);
    free(res);
    free(y);
    vk_buf_free(g->d, nqb);
    vk_buf_free(g->d, nyb);
    vk_buf_free(g->d, wb);
    vk_buf_free(g->d, rb);
    vk_buf_free(g->d, yb);
    vk_buf_free(g->d, xb);
    free(rx);
    free(nw);
    free(r);
    free(x);
    fz_mat_free(g, &a);
}

START_TEST(test_acc_norm) {
    static const enum quant_type tt[] = {QUANT_F32, QUANT_Q4_0, QUANT_Q4_K};
    static const char *shapes[] = {"auto", "mv=32x2"};
    struct fz_gpu g = {0};
    struct strata_error err = {0};
    ck_assert_msg(vk_dev_open(-1, &g.d, &err) == 0, "vk_dev_open: %s", err.message);
    ck_assert_msg(vkmm_init(g.d, &g.mm, &err) == 0, "vkmm_init: %s", err.message);
    ck_assert_msg(vkmm_configure(g.mm, shapes[_i], &err) == 0, "configure: %s", err.message);
    for (int k = 0; k < 3; k++) {
        check_acc_norm(&g, tt[k], 96, 256, shapes[_i]);
        check_acc_norm(&g, tt[k], 4160, 256, shapes[_i]);
    }
    /* rows not a multiple of 32: refused, nothing recorded */
    struct fz_mat m;
    fz_mat_init(&g, &m, QUANT_F32, 40, 8);
    ck_assert(!vkmm_acc_norm_ok(g.mm, &m.w));
    struct vk_buf *b = fz_buf(&g, NULL, 4096);
    const struct vkmm_tail t = {fz_bd(b), fz_bd(b), fz_bd(b), FUSE_EPS};
    ck_assert_int_eq(vk_rec_begin(g.d, &err), 0);
    vkmm_matmul_acc_norm(g.mm, &m.w, fz_bd(b), fz_bd(b), fz_bd(b), &t);
    ck_assert_int_eq(vk_rec_submit(g.d, &err), 0);
    ck_assert_int_eq(vk_rec_wait(g.d, &err), 0);
    ck_assert_int_eq(vkmm_status(g.mm, &err), STRATA_E_INVALID);
    vk_buf_free(g.d, b);
    fz_mat_free(&g, &m);
    vkmm_free(g.mm);
    vk_dev_close(g.d);
}
END_TEST

TCase *vkmm_fuse_tcase(void) {
    TCase *tc = tcase_create("fuse");
    tcase_add_loop_test(tc, test_acc_matvec, 0, 2);
    tcase_add_loop_test(tc, test_acc_norm, 0, 2);
    tcase_add_test(tc, test_soa);
    tcase_set_timeout(tc, 300);
    return tc;
}
