/* tests/gpu/test-vk-mm-fuse.c: the matvec's fused residual add
 * (vkmm_matmul_acc, gpu/vk-mm.h) and the block path's variants (":uN"
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

TCase *vkmm_fuse_tcase(void) {
    TCase *tc = tcase_create("fuse");
    tcase_add_loop_test(tc, test_acc_matvec, 0, 2);
    tcase_add_test(tc, test_soa);
    tcase_set_timeout(tc, 300);
    return tc;
}
