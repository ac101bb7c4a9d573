/* tests/gpu/test-vk-mm-q8.c: the decode matvec over q8 activations
 * (vkmm_matmul_q8x, vkmm_matmul_id_q8x: mv_dot.comp; several matrices in
 * one dispatch: vkmm_matmul_multi) and the RMSNorm that writes them
 * (vkops_rmsnorm_q8). Part of test-vk-mm (its main).
 *
 * For Q8_0, Q4_0, Q4_K, Q5_K and Q6_K (skipped, saying so, on a device
 * without integer dot products), 67 rows: the plain, fused gate + up +
 * SwiGLU and expert-indexed forms against the double reference over the
 * dequantized weights and the dequantized q8 x the host wrote. The sums are
 * exact integers scaled in f32, so only float rounding remains (~1e-14
 * measured on lavapipe; Q8_QX_NMSE 1e-9, as the f32 matvec's tests); one
 * wrong level of a 4-bit weight is ~1e-5, a wrong expert ~1; against the
 * f32 x, the q8 rounding (Q8_ROUND_NMSE).
 *
 * The norm's q8 output against the host's norm of the same x, quantized by
 * the same rule (d = max|y| / 127, level = round(y / d)): d to 1e-5
 * relative, every level within 1 of the host's (f32 sums in another order
 * can put a value on the other side of a rounding tie) and at most 2% of
 * them off, each block's sum the sum of its levels; and the norm + matvec
 * chain against the host's q8 of the norm (Q8_TIE_NMSE) and against the
 * unquantized norm output (the q8 rounding: Q8_SPIKE_NMSE). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/vk-ops.h"
#include "tests/gpu/vk-mm-fixture.h"

TCase *vkmm_q8_tcase(void);

#define Q8_QX_NMSE 1e-9
/* Against the f32 x, the q8 rounding: 2e-5 .. 4.4e-5 measured on lavapipe;
 * the tight check is the one above, this one only sees that the two agree. */
#define Q8_ROUND_NMSE 1e-3
/* The norm chain: the host's q8 of the same norm differs by a level at a
 * rounding tie now and then (1e-6 holds ~50 such levels); against the f32
 * norm, the row's spikes (every 97th value x8) coarsen their blocks' levels:
 * 1.0e-4 measured for Q6_K on lavapipe, so 1e-3 (a wrong block is ~1e-2). */
#define Q8_TIE_NMSE 1e-6
#define Q8_SPIKE_NMSE Q8_ROUND_NMSE
#define Q8_ROWS 67

static const enum quant_type q8_types[] = {QUANT_Q8_0, QUANT_Q4_0, QUANT_Q4_K, QUANT_Q5_K,
                                           QUANT_Q6_K};

struct q8_gpu {
    struct fz_gpu g; /* d, mm */
    struct vkops *ops;
};

static void q8_read(struct fz_gpu *g, const struct vk_buf *b, void *dst, size_t n) {
    struct strata_error err = {0};
    ck_assert_int_eq(vk_buf_download(g->d, b, 0, dst, n, &err), 0);
}

/* x quantized as mv_dot.comp reads it (VKMM_Q8_BLOCK_BYTES a block) and
 * its dequantized values xd. */
static void q8_quantize(const float *x, int64_t n, uint32_t *blocks, float *xd) {
    for (int64_t b = 0; b < n / 32; b++) {
        float amax = 0;
        for (int i = 0; i < 32; i++)
            amax = fmaxf(amax, fabsf(x[32 * b + i]));
        const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
        uint32_t *o = blocks + 12 * b;
        memset(o, 0, 48);
        int sum = 0;
        for (int i = 0; i < 32; i++) {
            const int l = (int)roundf(x[32 * b + i] * id);
            sum += l;
            o[i / 4] |= (uint32_t)(l & 255) << (8 * (i % 4));
            xd[32 * b + i] = (float)l * d;
        }
        memcpy(&o[8], &d, 4);
        o[9] = (uint32_t)sum;
    }
}

static double q8_dot(const float *w, const float *x, int64_t n) {
    double s = 0;
    for (int64_t c = 0; c < n; c++)
        s += (double)w[c] * (double)x[c];
    return s;
}

static bool q8_open(struct q8_gpu *q) {
    struct strata_error err = {0};
    ck_assert_msg(vk_dev_open(-1, &q->g.d, &err) == 0, "vk_dev_open: %s", err.message);
    ck_assert_msg(vkmm_init(q->g.d, &q->g.mm, &err) == 0, "vkmm_init: %s", err.message);
    ck_assert_msg(vkops_init(q->g.d, &q->ops, &err) == 0, "vkops_init: %s", err.message);
    if (!vkmm_q8x_ok(q->g.mm, QUANT_Q4_0)) {
        printf("vk-mm q8: %s has no integer dot product: skipped\n", vk_dev_info(q->g.d)->name);
        return false;
    }
    return true;
}

static void q8_close(struct q8_gpu *q) {
    vkops_free(q->ops);
    vkmm_free(q->g.mm);
    vk_dev_close(q->g.d);
}

static float q8_silu(double v) {
    return (float)(v / (1.0 + exp(-v)));
}

/* The matrices of the matvec tests: a and b (rows x cols), s and su
 * (stacks of 3 experts), made in that order. */
struct q8_mats {
    struct fz_mat a, b, s, su;
};

static void q8_mats_init(struct fz_gpu *g, struct q8_mats *m, enum quant_type t, int64_t rows,
                         int64_t cols) {
    fz_stack_init(g, &m->a, t, rows, cols, 1);
    fz_stack_init(g, &m->b, t, rows, cols, 1);
    fz_stack_init(g, &m->s, t, rows, cols, 3);
    fz_stack_init(g, &m->su, t, rows, cols, 3);
}

static void q8_mats_free(struct fz_gpu *g, struct q8_mats *m) {
    fz_mat_free(g, &m->su);
    fz_mat_free(g, &m->s);
    fz_mat_free(g, &m->b);
    fz_mat_free(g, &m->a);
}

#define N_Q8_TYPES ((int)(sizeof q8_types / sizeof q8_types[0]))

/* Each type twice: the default launch (a workgroup a group of rows), then
 * capped at 3 workgroups (":w3"), so each loops over several of the 67
 * rows' groups; the expert-indexed forms are not capped (one loop turn). */
START_TEST(test_q8_matvec) {
    const enum quant_type t = q8_types[_i % N_Q8_TYPES];
    const bool capped = _i >= N_Q8_TYPES;
    struct q8_gpu q;
    if (!q8_open(&q)) {
        q8_close(&q);
        return;
    }
    struct fz_gpu *g = &q.g;
    if (capped) {
        struct strata_error cerr = {0};
        ck_assert_msg(vkmm_configure(g->mm, "mv=32x4:w3", &cerr) == 0, "configure: %s",
                      cerr.message);
        ck_assert_uint_eq(g->mm->tune.mv_wcap, 3);
    }
    const int64_t cols = t == QUANT_Q8_0 || t == QUANT_Q4_0 ? 320 : 512, rows = Q8_ROWS;
    float *x = malloc(sizeof(float) * (size_t)cols), *xd = malloc(sizeof(float) * (size_t)cols);
    uint32_t *xq = malloc((size_t)(cols / 32) * 48);
    for (int64_t c = 0; c < cols; c++)
        x[c] = fz_rand() * (1.0f + (float)(c % 7));
    q8_quantize(x, cols, xq, xd);
    struct vk_buf *xb = fz_buf(g, xq, (size_t)(cols / 32) * 48);
    struct q8_mats m;
    q8_mats_init(g, &m, t, rows, cols);
    const int32_t sel[2] = {2, 0};
    struct vk_buf *sb = fz_buf(g, sel, sizeof sel);
    struct vk_buf *y1 = fz_buf(g, NULL, sizeof(float) * rows),
                  *y2 = fz_buf(g, NULL, sizeof(float) * rows),
                  *y3 = fz_buf(g, NULL, sizeof(float) * 2 * rows),
                  *y4 = fz_buf(g, NULL, sizeof(float) * 2 * rows);
    struct strata_error err = {0};
    ck_assert_int_eq(vk_rec_begin(g->d, &err), 0);
    vkmm_matmul_q8x(g->mm, &m.a.w, NULL, fz_bd(xb), fz_bd(y1));
    vkmm_matmul_q8x(g->mm, &m.a.w, &m.b.w, fz_bd(xb), fz_bd(y2));
    vkmm_matmul_id_q8x(g->mm, &m.s.w, NULL, fz_bd(xb), fz_bd(sb), 2, fz_bd(y3));
    vkmm_matmul_id_q8x(g->mm, &m.s.w, &m.su.w, fz_bd(xb), fz_bd(sb), 2, fz_bd(y4));
    fz_run(g);
    float got[4][2 * Q8_ROWS];
    q8_read(g, y1, got[0], sizeof(float) * rows);
    q8_read(g, y2, got[1], sizeof(float) * rows);
    q8_read(g, y3, got[2], sizeof(float) * 2 * rows);
    q8_read(g, y4, got[3], sizeof(float) * 2 * rows);
    double ref[4][2 * Q8_ROWS], ref_x[Q8_ROWS];
    for (int64_t r = 0; r < rows; r++) {
        ref[0][r] = q8_dot(m.a.deq + r * cols, xd, cols);
        ref_x[r] = q8_dot(m.a.deq + r * cols, x, cols);
        ref[1][r] = q8_silu(ref[0][r]) * q8_dot(m.b.deq + r * cols, xd, cols);
        for (int k = 0; k < 2; k++) {
            const int64_t er = sel[k] * rows + r;
            ref[2][k * rows + r] = q8_dot(m.s.deq + er * cols, xd, cols);
            ref[3][k * rows + r] =
                q8_silu(ref[2][k * rows + r]) * q8_dot(m.su.deq + er * cols, xd, cols);
        }
    }
    static const char *form[4] = {"plain", "gate+up", "experts", "experts gate+up"};
    for (int f = 0; f < 4; f++) {
        const int64_t n = f < 2 ? rows : 2 * rows;
        const double e = fz_nmse(got[f], ref[f], n);
        ck_assert_msg(e < Q8_QX_NMSE, "%s q8 %s: NMSE %.3g", quant_type_name(t), form[f], e);
    }
    const double eq = fz_nmse(got[0], ref_x, rows); /* against the unquantized x */
    ck_assert_msg(eq < Q8_ROUND_NMSE, "%s q8 against f32 x: NMSE %.3g", quant_type_name(t), eq);
    printf("vk-mm q8 %s%s: NMSE %.2g (against f32 x %.2g)\n", quant_type_name(t),
           capped ? " (3 workgroups)" : "", fz_nmse(got[0], ref[0], rows), eq);
    vk_buf_free(g->d, y4);
    vk_buf_free(g->d, y3);
    vk_buf_free(g->d, y2);
    vk_buf_free(g->d, y1);
    vk_buf_free(g->d, sb);
    vk_buf_free(g->d, xb);
    q8_mats_free(g, &m);
    free(xq);
    free(xd);
    free(x);
    q8_close(&q);
}
END_TEST

/* The same matvecs over f32 x, each lane quantizing its blocks
 * (vkmm_matmul_xq, vkmm_matmul_id_xq: mv_dot.comp XF): plain, gate + up,
 * with the residual add (y and res += y), and expert-indexed with one x row
 * a pick and with one for the token, against the double reference over the
 * host's q8 of x. The GPU's 1 / d and round() may put a value on the other
 * side of a rounding tie (as the norm's q8 copy, below): Q8_TIE_NMSE. */
START_TEST(test_xq_matvec) {
    const enum quant_type t = q8_types[_i % N_Q8_TYPES];
    struct q8_gpu q;
    if (!q8_open(&q)) {
        q8_close(&q);
        return;
    }
    struct fz_gpu *g = &q.g;
    const int64_t cols = t == QUANT_Q8_0 || t == QUANT_Q4_0 ? 320 : 512, rows = Q8_ROWS;
    float *x = malloc(sizeof(float) * 2 * (size_t)cols);
    float *xd = malloc(sizeof(float) * 2 * (size_t)cols);
    uint32_t *xq = malloc((size_t)(cols / 32) * 48 * 2);
    for (int64_t c = 0; c < 2 * cols; c++)
        x[c] = fz_rand() * (1.0f + (float)(c % 7)) * (c < cols ? 1.0f : 0.01f);
    q8_quantize(x, 2 * cols, xq, xd);
    struct vk_buf *xb = fz_buf(g, x, sizeof(float) * 2 * (size_t)cols);
    struct q8_mats m;
    q8_mats_init(g, &m, t, rows, cols);
    const int32_t sel[2] = {2, 0};
    float res0[Q8_ROWS];
    for (int64_t r = 0; r < rows; r++)
        res0[r] = (float)(r % 5) - 2.0f;
    struct vk_buf *sb = fz_buf(g, sel, sizeof sel), *rb = fz_buf(g, res0, sizeof res0);
    struct vk_buf *yb[5];
    for (int f = 0; f < 5; f++)
        yb[f] = fz_buf(g, NULL, sizeof(float) * 2 * rows);
    struct strata_error err = {0};
    const struct vk_bind res = fz_bd(rb);
    ck_assert_int_eq(vk_rec_begin(g->d, &err), 0);
    vkmm_matmul_xq(g->mm, &m.a.w, NULL, fz_bd(xb), fz_bd(yb[0]), NULL);
    vkmm_matmul_xq(g->mm, &m.a.w, &m.b.w, fz_bd(xb), fz_bd(yb[1]), NULL);
    vkmm_matmul_xq(g->mm, &m.b.w, NULL, fz_bd(xb), fz_bd(yb[2]), &res);
    vkmm_matmul_id_xq(g->mm, &m.s.w, NULL, fz_bd(xb), true, fz_bd(sb), 2, fz_bd(yb[3]));
    vkmm_matmul_id_xq(g->mm, &m.s.w, &m.su.w, fz_bd(xb), false, fz_bd(sb), 2, fz_bd(yb[4]));
    fz_run(g);
    ck_assert_int_eq(vkmm_status(g->mm, &err), 0);
    float got[6][2 * Q8_ROWS];
    for (int f = 0; f < 5; f++)
        q8_read(g, yb[f], got[f], sizeof(float) * (f < 3 ? rows : 2 * rows));
    q8_read(g, rb, got[5], sizeof res0);
    double ref[6][2 * Q8_ROWS];
    for (int64_t r = 0; r < rows; r++) {
        ref[0][r] = q8_dot(m.a.deq + r * cols, xd, cols);
        ref[1][r] = q8_silu(ref[0][r]) * q8_dot(m.b.deq + r * cols, xd, cols);
        ref[2][r] = q8_dot(m.b.deq + r * cols, xd, cols);
        ref[5][r] = (double)res0[r] + (double)got[2][r];
        for (int k = 0; k < 2; k++) {
            const int64_t er = sel[k] * rows + r;
            ref[3][k * rows + r] = q8_dot(m.s.deq + er * cols, xd + k * cols, cols);
            ref[4][k * rows + r] = q8_silu(q8_dot(m.s.deq + er * cols, xd, cols)) *
                                   q8_dot(m.su.deq + er * cols, xd, cols);
        }
    }
    static const char *form[6] = {"plain",           "gate+up",  "acc (y)", "experts, x a pick",
                                  "experts gate+up", "acc (res)"};
    for (int f = 0; f < 6; f++) {
        const int64_t n = f == 3 || f == 4 ? 2 * rows : rows;
        const double e = fz_nmse(got[f], ref[f], n);
        ck_assert_msg(e < (f == 5 ? 1e-12 : Q8_TIE_NMSE), "%s xq %s: NMSE %.3g", quant_type_name(t),
                      form[f], e);
        printf("vk-mm xq %s %s: NMSE %.2g\n", quant_type_name(t), form[f], e);
    }
    for (int f = 4; f >= 0; f--)
        vk_buf_free(g->d, yb[f]);
    vk_buf_free(g->d, rb);
    vk_buf_free(g->d, sb);
    vk_buf_free(g->d, xb);
    q8_mats_free(g, &m);
    free(xq);
    free(xd);
    free(x);
    q8_close(&q);
}
END_TEST

/* Several matrices over one x in one dispatch (vkmm_matmul_multi: mv_dot.comp
 * SPLIT): three views of one buffer, 67, 19 and 29 rows at byte offsets
 * aligned to 256 (gaps of whole rows between them, as the backend's weight
 * arena leaves), as three matrices in memory order and as two in the
 * other order, on the q8 blocks and on f32 x quantized in the lanes: each
 * result the bits of its single call (vkmm_matmul_q8x, vkmm_matmul_xq),
 * which test_q8_matvec and test_xq_matvec hold to the reference; and
 * vkmm_multi_ok refuses one matrix, four, a matrix in another buffer and a
 * matrix of another width. */
static const int64_t multi_rows[3] = {67, 19, 29};

START_TEST(test_multi_matvec) {
    const enum quant_type t = q8_types[_i];
    struct q8_gpu q;
    if (!q8_open(&q)) {
        q8_close(&q);
        return;
    }
    struct fz_gpu *g = &q.g;
    const int64_t cols = t == QUANT_Q8_0 || t == QUANT_Q4_0 ? 320 : 512;
    const size_t rb = quant_row_size(t, cols);
    int64_t step = 1; /* rows between 256-byte aligned offsets */
    while ((size_t)step * rb % 256)
        step++;
    struct fz_mat all, other, wide;
    fz_mat_init(g, &all, t, 3 * 128, cols);
    fz_mat_init(g, &other, t, 19, cols);
    fz_mat_init(g, &wide, t, 19, cols + 256);
    struct vk_wpiece pc[3];
    struct vk_wmat w[3];
    int64_t row0[3];
    for (int i = 0, next = 0; i < 3; i++) {
        row0[i] = (next + step - 1) / step * step;
        next = (int)(row0[i] + multi_rows[i]);
        ck_assert_int_le(next, 3 * 128);
        pc[i] = (struct vk_wpiece){all.buf, (uint64_t)row0[i] * rb, 0, multi_rows[i]};
        w[i] = (struct vk_wmat){t, multi_rows[i], cols, rb, 0, 1, &pc[i]};
    }
    ck_assert_int_gt(row0[1], multi_rows[0]); /* a gap: 67 rows are never a whole step */
    float *x = malloc(sizeof(float) * (size_t)cols), *xd = malloc(sizeof(float) * (size_t)cols);
    uint32_t *xq = malloc((size_t)(cols / 32) * 48);
    for (int64_t c = 0; c < cols; c++)
        x[c] = fz_rand() * (1.0f + (float)(c % 5));
    q8_quantize(x, cols, xq, xd);
    struct vk_buf *qb = fz_buf(g, xq, (size_t)(cols / 32) * 48);
    struct vk_buf *xb = fz_buf(g, x, sizeof(float) * (size_t)cols);
    /* y[form][i]: form 0 single q8, 1 multi q8 (A, B, C), 2 multi q8 (C, A),
     * 3 single xq, 4 multi xq (A, B, C) */
    struct vk_buf *yb[5][3];
    for (int f = 0; f < 5; f++)
        for (int i = 0; i < 3; i++)
            yb[f][i] = fz_buf(g, NULL, sizeof(float) * (size_t)multi_rows[i]);
    const struct vk_wmat *abc[3] = {&w[0], &w[1], &w[2]}, *ca[2] = {&w[2], &w[0]};
    ck_assert(vkmm_multi_ok(g->mm, abc, 3) && vkmm_multi_ok(g->mm, ca, 2));
    const struct vk_wmat *one[1] = {&w[0]}, *four[4] = {&w[0], &w[1], &w[2], &w[0]};
    const struct vk_wmat *apart[2] = {&w[0], &other.w}, *widths[2] = {&w[0], &wide.w};
    ck_assert(!vkmm_multi_ok(g->mm, one, 1) && !vkmm_multi_ok(g->mm, four, 4));
    ck_assert(!vkmm_multi_ok(g->mm, apart, 2) && !vkmm_multi_ok(g->mm, widths, 2));
    struct vk_bind y1[3], y2[2] = {fz_bd(yb[2][2]), fz_bd(yb[2][0])}, y4[3];
    for (int i = 0; i < 3; i++) {
        y1[i] = fz_bd(yb[1][i]);
        y4[i] = fz_bd(yb[4][i]);
    }
    struct strata_error err = {0};
    ck_assert_int_eq(vk_rec_begin(g->d, &err), 0);
    for (int i = 0; i < 3; i++) {
        vkmm_matmul_q8x(g->mm, &w[i], NULL, fz_bd(qb), fz_bd(yb[0][i]));
        vkmm_matmul_xq(g->mm, &w[i], NULL, fz_bd(xb), fz_bd(yb[3][i]), NULL);
    }
    const uint64_t n0 = vk_dev_dispatches(g->d);
    vkmm_matmul_multi(g->mm, abc, 3, fz_bd(qb), false, y1);
    vkmm_matmul_multi(g->mm, ca, 2, fz_bd(qb), false, y2);
    vkmm_matmul_multi(g->mm, abc, 3, fz_bd(xb), true, y4);
    ck_assert_uint_eq(vk_dev_dispatches(g->d) - n0, 3);
    fz_run(g);
    ck_assert_int_eq(vkmm_status(g->mm, &err), 0);
    static const char *form[5] = {"", "q8, 3 matrices", "q8, 2 in reverse order", "",
                                  "xq, 3 matrices"};
    for (int f = 1; f < 5; f++) {
        if (f == 3)
            continue;
        for (int i = 0; i < 3; i++) {
            if (f == 2 && i == 1)
                continue;
            float got[67], want[67];
            q8_read(g, yb[f][i], got, sizeof(float) * (size_t)multi_rows[i]);
            q8_read(g, yb[f < 3 ? 0 : 3][i], want, sizeof(float) * (size_t)multi_rows[i]);
            ck_assert_msg(!memcmp(got, want, sizeof(float) * (size_t)multi_rows[i]),
                          "%s multi %s: matrix %d differs from its single call", quant_type_name(t),
                          form[f], i);
        }
    }
    printf("vk-mm multi %s: 3 matrices (rows from %lld, %lld, %lld) = single calls\n",
           quant_type_name(t), (long long)row0[0], (long long)row0[1], (long long)row0[2]);
    for (int f = 4; f >= 0; f--)
        for (int i = 2; i >= 0; i--)
            vk_buf_free(g->d, yb[f][i]);
    vk_buf_free(g->d, xb);
    vk_buf_free(g->d, qb);
    fz_mat_free(g, &wide);
    fz_mat_free(g, &other);
    fz_mat_free(g, &all);
    free(xq);
    free(xd);
    free(x);
    q8_close(&q);
}
END_TEST

/* n rows of cols activations for the tile tests (spikes every 97th value):
 * x on the host and the device (xb), the host's q8 blocks (xq, uploaded as
 * qb) and their dequantized values (xd), and room for the device's q8 of x
 * (gq). */
struct q8_rows {
    float *x, *xd;
    uint32_t *xq;
    struct vk_buf *xb, *qb, *gq;
};

static void q8_rows_init(struct fz_gpu *g, struct q8_rows *r, int64_t n, int64_t cols) {
    const int64_t nb = cols / 32;
    r->x = malloc(sizeof(float) * (size_t)(n * cols));
    r->xd = malloc(sizeof(float) * (size_t)(n * cols));
    r->xq = malloc((size_t)(n * nb) * 48);
    for (int64_t i = 0; i < n * cols; i++)
        r->x[i] = fz_rand() * (1.0f + (float)(i % 5)) * (i % 97 == 0 ? 8.0f : 1.0f);
    for (int64_t k = 0; k < n; k++)
        q8_quantize(r->x + k * cols, cols, r->xq + k * nb * 12, r->xd + k * cols);
    r->xb = fz_buf(g, r->x, sizeof(float) * (size_t)(n * cols));
    r->qb = fz_buf(g, r->xq, (size_t)(n * nb) * 48);
    r->gq = fz_buf(g, NULL, (size_t)(n * nb) * 48);
}

/* Runs the recording and reads the nf outputs of n floats each into got. */
static void q8_run_read(struct fz_gpu *g, struct vk_buf **yb, int nf, size_t n, float **got) {
    struct strata_error err = {0};
    fz_run(g);
    ck_assert_msg(vkmm_status(g->mm, &err) == 0, "%s", err.message);
    for (int f = 0; f < nf; f++) {
        got[f] = malloc(sizeof(float) * n);
        q8_read(g, yb[f], got[f], sizeof(float) * n);
    }
}

static void q8_rows_free(struct fz_gpu *g, struct q8_rows *r) {
    vk_buf_free(g->d, r->gq);
    vk_buf_free(g->d, r->qb);
    vk_buf_free(g->d, r->xb);
    free(r->xq);
    free(r->xd);
    free(r->x);
}

/* q8_open with the tiled matmul on the integer-dot path; false (closed,
 * skipped) on a device without integer dot products. */
static bool q8_open_tiles(struct q8_gpu *q) {
    if (!q8_open(q)) {
        q8_close(q);
        return false;
    }
    struct strata_error err = {0};
    ck_assert_msg(vkmm_configure(q->g.mm, "int-dot", &err) == 0, "configure: %s", err.message);
    return true;
}

/* The prefill tiles over activations quantized before them
 * (vkmm_matmul_tq8: mm_dot_body.glsl XQ8) for each type, on the main tile
 * (dot_s_below 0) and the small one (the default for so few tiles), at 37
 * and 133 tokens (past a 128-token tile) and 130 rows (past a 128-row
 * one): plain and gate + up over the host's q8 blocks against the double
 * reference over their dequantized values (Q8_QX_NMSE); and plain over the
 * blocks vkops_quant_q8 wrote against the f32-x tile, which quantizes by
 * the same rule on the same device, so the two agree to float rounding
 * (1e-12; a level off would be ~1e-6). */
START_TEST(test_tq8_tiles) {
    const enum quant_type t = q8_types[_i % N_Q8_TYPES];
    const bool small = _i >= N_Q8_TYPES;
    struct q8_gpu q;
    if (!q8_open_tiles(&q))
        return;
    struct fz_gpu *g = &q.g;
    struct strata_error err = {0};
    if (!small) {
        struct vkmm_tune tu = g->mm->tune;
        tu.dot_s_below = 0;
        ck_assert_msg(vkmm_set_tune(g->mm, &tu, &err) == 0, "%s", err.message);
    }
    ck_assert(vkmm_tq8_ok(g->mm, t, 33) && !vkmm_tq8_ok(g->mm, t, 32));
    const int64_t cols = t == QUANT_Q8_0 || t == QUANT_Q4_0 ? 320 : 512, rows = 130;
    static const int64_t toks[2] = {37, 133};
    struct fz_mat a, b;
    fz_stack_init(g, &a, t, rows, cols, 1);
    fz_stack_init(g, &b, t, rows, cols, 1);
    for (int k = 0; k < 2; k++) {
        const int64_t nt = toks[k];
        struct q8_rows xr;
        q8_rows_init(g, &xr, nt, cols);
        const float *xd = xr.xd;
        struct vk_buf *xb = xr.xb, *qb = xr.qb, *gq = xr.gq;
        struct vk_buf *yb[4];
        for (int f = 0; f < 4; f++)
            yb[f] = fz_buf(g, NULL, sizeof(float) * (size_t)(nt * rows));
        ck_assert_int_eq(vk_rec_begin(g->d, &err), 0);
        vkmm_matmul_tq8(g->mm, &a.w, NULL, fz_bd(qb), fz_bd(yb[0]), nt);
        vkmm_matmul_tq8(g->mm, &a.w, &b.w, fz_bd(qb), fz_bd(yb[1]), nt);
        vkmm_matmul(g->mm, &a.w, -1, fz_bd(xb), fz_bd(yb[2]), nt);
        ck_assert(vkops_quant_q8(q.ops, fz_bd(xb), fz_bd(gq), nt, cols));
        vkmm_matmul_tq8(g->mm, &a.w, NULL, fz_bd(gq), fz_bd(yb[3]), nt);
        const size_t n = (size_t)(nt * rows);
        float *got[4];
        q8_run_read(g, yb, 4, n, got);
        double *ref = malloc(sizeof(double) * n * 3);
        for (int64_t tk = 0; tk < nt; tk++)
            for (int64_t r = 0; r < rows; r++) {
                const double ya = q8_dot(a.deq + r * cols, xd + tk * cols, cols);
                ref[tk * rows + r] = ya;
                ref[n + tk * rows + r] =
                    q8_silu(ya) * q8_dot(b.deq + r * cols, xd + tk * cols, cols);
                ref[2 * n + tk * rows + r] = got[2][tk * rows + r];
            }
        const double e0 = fz_nmse(got[0], ref, (int64_t)n),
                     e1 = fz_nmse(got[1], ref + n, (int64_t)n);
        const double e3 = fz_nmse(got[3], ref + 2 * n, (int64_t)n);
        ck_assert_msg(e0 < Q8_QX_NMSE && e1 < Q8_QX_NMSE, "%s tq8 %lld tokens: NMSE %.3g, glu %.3g",
                      quant_type_name(t), (long long)nt, e0, e1);
        ck_assert_msg(e3 < 1e-12,
                      "%s tq8 over vkops_quant_q8, %lld tokens: NMSE %.3g against the f32-x tile",
                      quant_type_name(t), (long long)nt, e3);
        printf("vk-mm tq8 %s%s %lld tokens: NMSE %.2g, glu %.2g, against the f32-x tile %.2g\n",
               quant_type_name(t), small ? " (small tile)" : "", (long long)nt, e0, e1, e3);
        free(ref);
        for (int f = 3; f >= 0; f--) {
            free(got[f]);
            vk_buf_free(g->d, yb[f]);
        }
        q8_rows_free(g, &xr);
    }
    fz_mat_free(g, &b);
    fz_mat_free(g, &a);
    q8_close(&q);
}
END_TEST

/* Batched decode's integer-dot matvec passes (vkmm_matmul_tq8 and
 * vkmm_matmul_q8x_acc of 2-32 tokens: mv_dot.comp NT) for each type, 67
 * rows (a last group of fewer rows), at 2, 3 (a pass of 4 with 3 live), 9
 * (8, then one token on the one-token form) and 29 tokens (three passes of
 * 8 and one of 5): plain and gate + up against the double reference over
 * the host's q8 blocks' values (Q8_QX_NMSE); every token's plain row the
 * same bits as vkmm_matmul_q8x over that token alone; and the residual form
 * y the plain bits with res + y written into the residual. */
START_TEST(test_mq8_matvec) {
    const enum quant_type t = q8_types[_i];
    struct q8_gpu q;
    if (!q8_open(&q)) {
        q8_close(&q);
        return;
    }
    struct fz_gpu *g = &q.g;
    struct strata_error err = {0};
    ck_assert(vkmm_mq8_ok(g->mm, t, 2) && vkmm_mq8_ok(g->mm, t, 32) && !vkmm_mq8_ok(g->mm, t, 1) &&
              !vkmm_mq8_ok(g->mm, t, 33));
    const int64_t cols = t == QUANT_Q8_0 || t == QUANT_Q4_0 ? 320 : 512, rows = Q8_ROWS;
    const int64_t nb = cols / 32;
    static const int64_t toks[] = {2, 3, 9, 29};
    struct fz_mat a, b;
    fz_stack_init(g, &a, t, rows, cols, 1);
    fz_stack_init(g, &b, t, rows, cols, 1);
    for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
        const int64_t nt = toks[k];
        const size_t n = (size_t)(nt * rows);
        struct q8_rows xr;
        q8_rows_init(g, &xr, nt, cols);
        float *res0 = malloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++)
            res0[i] = fz_rand();
        struct vk_buf *yb[4], *one[32];
        for (int f = 0; f < 3; f++)
            yb[f] = fz_buf(g, NULL, sizeof(float) * n);
        yb[3] = fz_buf(g, res0, sizeof(float) * n);
        ck_assert_int_eq(vk_rec_begin(g->d, &err), 0);
        vkmm_matmul_tq8(g->mm, &a.w, NULL, fz_bd(xr.qb), fz_bd(yb[0]), nt);
        vkmm_matmul_tq8(g->mm, &a.w, &b.w, fz_bd(xr.qb), fz_bd(yb[1]), nt);
        vkmm_matmul_q8x_acc(g->mm, &a.w, fz_bd(xr.qb), fz_bd(yb[2]), fz_bd(yb[3]), nt);
        for (int64_t tk = 0; tk < nt; tk++) {
            one[tk] = fz_buf(g, NULL, sizeof(float) * (size_t)rows);
            const struct vk_bind xt = {xr.qb, (uint64_t)(tk * nb * 48), (uint64_t)(nb * 48)};
            vkmm_matmul_q8x(g->mm, &a.w, NULL, xt, fz_bd(one[tk]));
        }
        float *got[4];
        q8_run_read(g, yb, 4, n, got);
        double *ref = malloc(sizeof(double) * n * 2);
        for (int64_t tk = 0; tk < nt; tk++)
            for (int64_t r = 0; r < rows; r++) {
                const double ya = q8_dot(a.deq + r * cols, xr.xd + tk * cols, cols);
                ref[tk * rows + r] = ya;
                ref[n + tk * rows + r] =
                    q8_silu(ya) * q8_dot(b.deq + r * cols, xr.xd + tk * cols, cols);
            }
        const double e0 = fz_nmse(got[0], ref, (int64_t)n),
                     e1 = fz_nmse(got[1], ref + n, (int64_t)n);
        ck_assert_msg(e0 < Q8_QX_NMSE && e1 < Q8_QX_NMSE, "%s mq8 %lld tokens: NMSE %.3g, glu %.3g",
                      quant_type_name(t), (long long)nt, e0, e1);
        float *y1 = malloc(sizeof(float) * (size_t)rows);
        for (int64_t tk = 0; tk < nt; tk++) {
            q8_read(g, one[tk], y1, sizeof(float) * (size_t)rows);
            if (memcmp(y1, got[0] + tk * rows, sizeof(float) * (size_t)rows))
                ck_abort_msg("%s mq8 %lld tokens: token %lld differs from its one-token matvec",
                             quant_type_name(t), (long long)nt, (long long)tk);
            vk_buf_free(g->d, one[tk]);
        }
        free(y1);
        for (size_t i = 0; i < n; i++)
            if (memcmp(&got[2][i], &got[0][i], 4) || got[3][i] != res0[i] + got[2][i])
                ck_abort_msg("%s mq8 acc %lld tokens [%zu]: y %.9g (plain %.9g), res %.9g of "
                             "%.9g",
                             quant_type_name(t), (long long)nt, i, got[2][i], got[0][i], got[3][i],
                             res0[i]);
        printf("vk-mm mq8 %s %lld tokens: NMSE %.2g, glu %.2g\n", quant_type_name(t), (long long)nt,
               e0, e1);
        free(ref);
        for (int f = 3; f >= 0; f--) {
            free(got[f]);
            vk_buf_free(g->d, yb[f]);
        }
        free(res0);
        q8_rows_free(g, &xr);
    }
    fz_mat_free(g, &b);
    fz_mat_free(g, &a);
    q8_close(&q);
}
END_TEST

/* The expert-indexed tiles over q8 rows (vkmm_matmul_id_tq8: mm_dot_body.glsl
 * ID and XQ8) for Q4_0, Q4_K (the min term's level sums) and Q6_K (two
 * scales a block), the types' three forms of the dot; 4 experts of 70 rows
 * (past a 64-row tile), 37 tokens of 2 picks each: x a token (plain and
 * gate + up) and x a pick (the down projection's form) over the host's q8
 * blocks against the double reference (Q8_QX_NMSE), and x a pick over the
 * blocks vkops_quant_q8 wrote against the f32-x expert tile (1e-12, as
 * test_tq8_tiles). Then the same at 5 tokens, where vkmm_matmul_id_tq8
 * takes the expert-indexed integer-dot matvec (BACKEND_VK_FUSE_MQ8's
 * batched decode): the three forms against the reference, and x a pick
 * over vkops_quant_q8's blocks against the reference too (the f32 matvec
 * beside it does not round x). */
static const enum quant_type tq8_id_types[] = {QUANT_Q4_0, QUANT_Q4_K, QUANT_Q6_K};

#define N_TQ8_ID ((int)(sizeof tq8_id_types / sizeof tq8_id_types[0]))

START_TEST(test_tq8_id_tiles) {
    const enum quant_type t = tq8_id_types[_i % N_TQ8_ID];
    /* the second turn: 5 tokens, the expert-indexed matvec over the same
     * q8 rows (vkmm_mq8_id_ok), its f32 form beside it */
    const bool mv = _i >= N_TQ8_ID;
    struct q8_gpu q;
    if (!q8_open_tiles(&q))
        return;
    struct fz_gpu *g = &q.g;
    struct strata_error err = {0};
    ck_assert(vkmm_tq8_id_ok(g->mm, t, 9) && !vkmm_tq8_id_ok(g->mm, t, 8));
    ck_assert(vkmm_mq8_id_ok(g->mm, t, 2) && vkmm_mq8_id_ok(g->mm, t, 8) &&
              !vkmm_mq8_id_ok(g->mm, t, 1) && !vkmm_mq8_id_ok(g->mm, t, 9));
    const int64_t cols = t == QUANT_Q4_0 ? 320 : 512, rows = 70, n_exp = 4, nt = mv ? 5 : 37;
    const int64_t k = 2;
    const int64_t np = nt * k;
    struct fz_mat a, b;
    fz_stack_init(g, &a, t, rows, cols, n_exp);
    fz_stack_init(g, &b, t, rows, cols, n_exp);
    int32_t sel[2 * 37];
    for (int64_t i = 0; i < nt; i++) { /* two different experts a token */
        sel[k * i] = (int32_t)(i % n_exp);
        sel[k * i + 1] = (int32_t)((i + 1 + (i / n_exp) % 3) % n_exp);
    }
    /* rows 0 .. nt - 1 are the tokens' x, all np the picks' */
    struct q8_rows xr;
    q8_rows_init(g, &xr, np, cols);
    const float *xd = xr.xd;
    struct vk_buf *xb = xr.xb, *qb = xr.qb, *gq = xr.gq;
    struct vk_buf *sb = fz_buf(g, sel, sizeof(int32_t) * (size_t)np);
    struct vk_buf *yb[5];
    for (int f = 0; f < 5; f++)
        yb[f] = fz_buf(g, NULL, sizeof(float) * (size_t)(np * rows));
    ck_assert_int_eq(vk_rec_begin(g->d, &err), 0);
    vkmm_matmul_id_tq8(g->mm, &a.w, NULL, fz_bd(qb), false, fz_bd(sb), (int)k, nt, fz_bd(yb[0]));
    vkmm_matmul_id_tq8(g->mm, &a.w, &b.w, fz_bd(qb), false, fz_bd(sb), (int)k, nt, fz_bd(yb[1]));
    vkmm_matmul_id_tq8(g->mm, &a.w, NULL, fz_bd(qb), true, fz_bd(sb), (int)k, nt, fz_bd(yb[2]));
    vkmm_matmul_id(g->mm, &a.w, fz_bd(xb), true, fz_bd(sb), (int)k, nt, fz_bd(yb[3]));
    ck_assert(vkops_quant_q8(q.ops, fz_bd(xb), fz_bd(gq), np, cols));
    vkmm_matmul_id_tq8(g->mm, &a.w, NULL, fz_bd(gq), true, fz_bd(sb), (int)k, nt, fz_bd(yb[4]));
    const size_t n = (size_t)(np * rows);
    float *got[5];
    q8_run_read(g, yb, 5, n, got);
    double *ref = malloc(sizeof(double) * n * 4);
    for (int64_t pk = 0; pk < np; pk++)
        for (int64_t r = 0; r < rows; r++) {
            const int64_t er = sel[pk] * rows + r, o = pk * rows + r;
            const float *xt = xd + (pk / k) * cols;
            const double ya = q8_dot(a.deq + er * cols, xt, cols);
            ref[o] = ya;
            ref[n + o] = q8_silu(ya) * q8_dot(b.deq + er * cols, xt, cols);
            ref[2 * n + o] = q8_dot(a.deq + er * cols, xd + pk * cols, cols);
            ref[3 * n + o] = got[3][o];
        }
    static const char *form[3] = {"x a token", "gate+up", "x a pick"};
    for (int f = 0; f < 3; f++) {
        const double e = fz_nmse(got[f], ref + (size_t)f * n, (int64_t)n);
        ck_assert_msg(e < Q8_QX_NMSE, "%s %s experts, %s: NMSE %.3g", quant_type_name(t),
                      mv ? "mq8" : "tq8", form[f], e);
        printf("vk-mm %s experts %s, %s: NMSE %.2g\n", mv ? "mq8" : "tq8", quant_type_name(t),
               form[f], e);
    }
    /* the matvec's f32 form does not round x: over vkops_quant_q8's blocks
     * against the reference of the host's (the same rule) */
    const double e4 = fz_nmse(got[4], ref + (mv ? 2 : 3) * n, (int64_t)n);
    ck_assert_msg(e4 < (mv ? Q8_QX_NMSE : 1e-12),
                  "%s %s experts over vkops_quant_q8: NMSE %.3g against the %s", quant_type_name(t),
                  mv ? "mq8" : "tq8", e4, mv ? "reference" : "f32-x tile");
    printf("vk-mm %s experts %s over vkops_quant_q8: %.2g against the %s\n", mv ? "mq8" : "tq8",
           quant_type_name(t), e4, mv ? "reference" : "f32-x tile");
    free(ref);
    for (int f = 4; f >= 0; f--) {
        free(got[f]);
        vk_buf_free(g->d, yb[f]);
    }
    vk_buf_free(g->d, sb);
    q8_rows_free(g, &xr);
    fz_mat_free(g, &b);
    fz_mat_free(g, &a);
    q8_close(&q);
}
END_TEST

/* The norm's q8 copy, and the norm + q8 matvec chain (Q4_0 and Q6_K), at
 * widths that take op_rmsnorm.comp's one-pass form (2,304: 144 of the 256
 * invocations hold values; 4,096: all) and its two-pass form with the tail
 * past 4,096 (4,608); in place (y = x), the one-pass form's bits, and the
 * two-pass form refused with x untouched. */
static const int64_t q8_norm_n[] = {2304, 4096, 4096 + 512};

START_TEST(test_q8_norm) {
    struct q8_gpu q;
    if (!q8_open(&q)) {
        q8_close(&q);
        return;
    }
    struct fz_gpu *g = &q.g;
    const int64_t n = q8_norm_n[_i];
    const float eps = 1e-5f;
    float *x = malloc(sizeof(float) * (size_t)n), *w = malloc(sizeof(float) * (size_t)n);
    float *y = malloc(sizeof(float) * (size_t)n), *yd = malloc(sizeof(float) * (size_t)n);
    uint32_t *hq = malloc((size_t)(n / 32) * 48), *gq = malloc((size_t)(n / 32) * 48);
    for (int64_t i = 0; i < n; i++) {
        x[i] = fz_rand() * (i % 97 == 0 ? 8.0f : 1.0f);
        w[i] = 0.5f + 0.5f * fz_rand();
    }
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    const float scale = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * scale * w[i];
    q8_quantize(y, n, hq, yd);
    struct vk_buf *xb = fz_buf(g, x, sizeof(float) * n), *wb = fz_buf(g, w, sizeof(float) * n);
    struct vk_buf *yb = fz_buf(g, NULL, sizeof(float) * n);
    struct vk_buf *qb = fz_buf(g, NULL, vkops_q8_bytes(1, n));
    struct fz_mat m[2];
    fz_stack_init(g, &m[0], QUANT_Q4_0, Q8_ROWS, n, 1);
    fz_stack_init(g, &m[1], QUANT_Q6_K, Q8_ROWS, n, 1);
    struct vk_buf *o0 = fz_buf(g, NULL, sizeof(float) * Q8_ROWS),
                  *o1 = fz_buf(g, NULL, sizeof(float) * Q8_ROWS);
    /* in place (y = x: the output's norm): the same bits, rows of up to 4096 */
    struct vk_buf *ib = fz_buf(g, x, sizeof(float) * n),
                  *iq = fz_buf(g, NULL, vkops_q8_bytes(1, n));
    struct strata_error err = {0};
    ck_assert_int_eq(vk_rec_begin(g->d, &err), 0);
    ck_assert(vkops_rmsnorm_q8(q.ops, fz_bd(xb), fz_bd(wb), true, fz_bd(yb), fz_bd(qb), 1, n, eps));
    const bool in_place =
        vkops_rmsnorm_q8(q.ops, fz_bd(ib), fz_bd(wb), true, fz_bd(ib), fz_bd(iq), 1, n, eps);
    ck_assert_int_eq(in_place, n <= 4096);
    vkmm_matmul_q8x(g->mm, &m[0].w, NULL, fz_bd(qb), fz_bd(o0));
    vkmm_matmul_q8x(g->mm, &m[1].w, NULL, fz_bd(qb), fz_bd(o1));
    fz_run(g);
    q8_read(g, qb, gq, (size_t)(n / 32) * 48);
    {
        uint32_t *iqh = malloc((size_t)(n / 32) * 48);
        float *iy = malloc(sizeof(float) * (size_t)n), *oy = malloc(sizeof(float) * (size_t)n);
        q8_read(g, iq, iqh, (size_t)(n / 32) * 48);
        q8_read(g, ib, iy, sizeof(float) * n);
        q8_read(g, yb, oy, sizeof(float) * n);
        if (in_place)
            ck_assert_msg(!memcmp(iqh, gq, (size_t)(n / 32) * 48) &&
                              !memcmp(iy, oy, sizeof(float) * (size_t)n),
                          "in-place q8 norm (%lld wide) differs", (long long)n);
        else /* refused: x untouched */
            ck_assert(!memcmp(iy, x, sizeof(float) * (size_t)n));
        free(oy);
        free(iy);
        free(iqh);
    }
    int off = 0;
    for (int64_t b = 0; b < n / 32; b++) {
        float dg, dh;
        memcpy(&dg, &gq[12 * b + 8], 4);
        memcpy(&dh, &hq[12 * b + 8], 4);
        ck_assert_msg(fabsf(dg - dh) <= 1e-5f * dh, "block %lld: d %g, host %g", (long long)b, dg,
                      dh);
        int sum = 0;
        for (int i = 0; i < 32; i++) {
            const int lg = (int8_t)(gq[12 * b + i / 4] >> (8 * (i % 4)));
            const int lh = (int8_t)(hq[12 * b + i / 4] >> (8 * (i % 4)));
            ck_assert_msg(abs(lg - lh) <= 1, "block %lld elt %d: level %d, host %d", (long long)b,
                          i, lg, lh);
            off += lg != lh;
            sum += lg;
        }
        ck_assert_int_eq((int)gq[12 * b + 9], sum);
        ck_assert_uint_eq(gq[12 * b + 10] | gq[12 * b + 11], 0);
    }
    ck_assert_msg(off * 50 <= n, "%d of %lld levels off the host's", off, (long long)n);
    for (int k = 0; k < 2; k++) {
        float got[Q8_ROWS];
        double ref[Q8_ROWS], ref_q[Q8_ROWS];
        q8_read(g, k ? o1 : o0, got, sizeof got);
        for (int r = 0; r < Q8_ROWS; r++) {
            ref[r] = q8_dot(m[k].deq + (int64_t)r * n, y, n);
            ref_q[r] = q8_dot(m[k].deq + (int64_t)r * n, yd, n);
        }
        const double eq = fz_nmse(got, ref_q, Q8_ROWS), e = fz_nmse(got, ref, Q8_ROWS);
        ck_assert_msg(eq < Q8_TIE_NMSE, "norm + q8 %s: NMSE %.3g against the host's q8",
                      quant_type_name(m[k].w.type), eq);
        ck_assert_msg(e < Q8_SPIKE_NMSE, "norm + q8 %s: NMSE %.3g against the f32 norm",
                      quant_type_name(m[k].w.type), e);
        printf("vk-mm q8 norm (%lld wide) + %s: NMSE %.2g against the host's q8, %.2g against "
               "f32\n",
               (long long)n, quant_type_name(m[k].w.type), eq, e);
    }
    float *yg = malloc(sizeof(float) * (size_t)n);
    q8_read(g, yb, yg, sizeof(float) * n);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(fabsf(yg[i] - y[i]) <= 1e-5f * (fabsf(y[i]) + 1e-3f), "y[%lld]",
                      (long long)i);
    free(yg);
    vk_buf_free(g->d, o1);
    vk_buf_free(g->d, o0);
    fz_mat_free(g, &m[1]);
    fz_mat_free(g, &m[0]);
    vk_buf_free(g->d, iq);
    vk_buf_free(g->d, ib);
    vk_buf_free(g->d, qb);
    vk_buf_free(g->d, yb);
    vk_buf_free(g->d, wb);
    vk_buf_free(g->d, xb);
    free(gq);
    free(hq);
    free(yd);
    free(y);
    free(w);
    free(x);
    q8_close(&q);
}
END_TEST

TCase *vkmm_q8_tcase(void) {
    TCase *tc = tcase_create("q8");
    tcase_add_loop_test(tc, test_q8_matvec, 0, 2 * N_Q8_TYPES);
    tcase_add_loop_test(tc, test_xq_matvec, 0, N_Q8_TYPES);
    tcase_add_loop_test(tc, test_multi_matvec, 0, N_Q8_TYPES);
    tcase_add_loop_test(tc, test_tq8_tiles, 0, 2 * N_Q8_TYPES);
    tcase_add_loop_test(tc, test_mq8_matvec, 0, N_Q8_TYPES);
    tcase_add_loop_test(tc, test_tq8_id_tiles, 0, 2 * N_TQ8_ID);
    tcase_add_loop_test(tc, test_q8_norm, 0, (int)(sizeof q8_norm_n / sizeof q8_norm_n[0]));
    return tc;
}
