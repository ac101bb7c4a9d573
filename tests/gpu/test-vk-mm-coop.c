/* tests/gpu/test-vk-mm-coop.c: the cooperative-matrix tiles' data layout
 * (gpu/vk-mm-coop.c, mm_coop_body.glsl) on a product whose every output
 * names its source: W is the identity (F16 rows, so each weight is exact in
 * f16) and x[t, c] = (t % 16) * 128 + c, integers below 2048 that f16 holds
 * exactly, so y[t, r] must be x[t, r] to the bit. Where it is not, the test
 * prints for a 8 x 8 corner which (token, column) of x each output holds: a
 * transposed fragment, a swapped subgroup block or a wrong K offset each
 * show as their own pattern, which test_paths' normalised error (~2 on the
 * H200 of 2026-12-02 for every type) cannot tell apart. Runs only where the
 * device has the path (not on lavapipe: it says so and passes). Part of
 * test-vk-mm (its main). */
#include <stdlib.h>
#include <string.h>

#include "gpu/vk-mm-impl.h"
#include "tests/harness.h"

TCase *vkmm_coop_tcase(void);

START_TEST(test_coop_layout) {
    struct vk_dev *d = NULL;
    struct vkmm *mm = NULL;
    struct strata_error err = {0};
    ck_assert_msg(vk_dev_open(-1, &d, &err) == 0, "vk_dev_open: %s", err.message);
    ck_assert_msg(vkmm_init(d, &mm, &err) == 0, "vkmm_init: %s", err.message);
    const struct vk_dev_info *in = vk_dev_info(d);
    if (!vkmm_path_ok(in, QUANT_F16, VKMM_PATH_COOP)) {
        printf("vk-mm: coopmat layout skipped on %s (no cooperative-matrix path)\n", in->name);
        vkmm_free(mm);
        vk_dev_close(d);
        return;
    }
    ck_assert_msg(vkmm_configure(mm, "coopmat", &err) == 0, "configure: %s", err.message);
    enum { ROWS = 64, COLS = 256, NT = 40 };
    const size_t rb = quant_row_size(QUANT_F16, COLS);
    uint8_t *wbytes = calloc(ROWS, rb);
    float *row = malloc(COLS * sizeof(float));
    for (int r = 0; r < ROWS; r++) {
        for (int c = 0; c < COLS; c++)
            row[c] = c == r ? 1.0f : 0.0f;
        ck_assert_int_eq(quant_quantize_row(QUANT_F16, row, wbytes + (size_t)r * rb, COLS), 0);
    }
    float *x = malloc(sizeof(float) * NT * COLS), *y = malloc(sizeof(float) * NT * ROWS);
    for (int t = 0; t < NT; t++)
        for (int c = 0; c < COLS; c++)
            x[t * COLS + c] = (float)((t % 16) * 128 + c % 128);
    struct vk_buf *wb = vk_buf_alloc(d, ROWS * rb, VK_MEM_DEVICE, &err);
    struct vk_buf *xb = vk_buf_alloc(d, sizeof(float) * NT * COLS, VK_MEM_DEVICE, &err);
    struct vk_buf *yb = vk_buf_alloc(d, sizeof(float) * NT * ROWS, VK_MEM_DEVICE, &err);
    ck_assert(wb && xb && yb);
    ck_assert_int_eq(vk_buf_upload(d, wb, 0, wbytes, ROWS * rb, &err), 0);
    ck_assert_int_eq(vk_buf_upload(d, xb, 0, x, sizeof(float) * NT * COLS, &err), 0);
    ck_assert_int_eq(vk_buf_fill(d, yb, 0, sizeof(float) * NT * ROWS, 0x7fc00000u, &err), 0);
    const struct vk_wpiece pc = {wb, 0, 0, ROWS};
    const struct vk_wmat w = {QUANT_F16, ROWS, COLS, rb, 0, 1, &pc};
    ck_assert_int_eq(vk_rec_begin(d, &err), 0);
    vkmm_matmul(mm, &w, -1, (struct vk_bind){xb, 0, 0}, (struct vk_bind){yb, 0, 0}, NT);
    ck_assert_int_eq(vk_rec_submit(d, &err), 0);
    ck_assert_int_eq(vk_rec_wait(d, &err), 0);
    ck_assert_msg(vkmm_status(mm, &err) == 0, "%s", err.message);
    ck_assert_int_eq(vk_buf_download(d, yb, 0, y, sizeof(float) * NT * ROWS, &err), 0);
    int bad = 0, first = -1;
    for (int i = 0; i < NT * ROWS; i++) {
        const int t = i / ROWS, r = i % ROWS;
        if (y[i] != (float)((t % 16) * 128 + r)) {
            bad++;
            first = first < 0 ? i : first;
        }
    }
    if (bad) { /* the corner's sources: "t',c'" of x, or "?" for a value no x holds */
        printf("vk-mm: coopmat layout: %d of %d outputs wrong (first at t %d r %d); y[t][r] "
               "holds x[t'][c'] for t, r < 8:\n",
               bad, NT * ROWS, first / ROWS, first % ROWS);
        for (int t = 0; t < 8; t++) {
            char line[256];
            size_t n = 0;
            for (int r = 0; r < 8 && n < sizeof line - 16; r++) {
                const float v = y[t * ROWS + r];
                const int iv = (int)v;
                if (v == (float)iv && iv >= 0 && iv < 2048)
                    n +=
                        (size_t)snprintf(line + n, sizeof line - n, " %2d,%3d", iv / 128, iv % 128);
                else
                    n += (size_t)snprintf(line + n, sizeof line - n, " %8.3g", (double)v);
            }
            printf("  t %d:%s\n", t, line);
        }
    }
    if (bad) { /* raw values of the first outputs, then the first row's 16 */
        printf("  raw y[0][0..15]:");
        for (int r = 0; r < 16; r++)
            printf(" %g", (double)y[r]);
        printf("\n");
    }
    fflush(stdout); /* Check's forked test exits at the assert */
    ck_assert_msg(bad == 0, "coopmat layout: %d outputs wrong", bad);
    vk_buf_free(d, yb);
    vk_buf_free(d, xb);
    vk_buf_free(d, wb);
    free(y);
    free(x);
    free(row);
    free(wbytes);
    vkmm_free(mm);
    vk_dev_close(d);
}
END_TEST

TCase *vkmm_coop_tcase(void) {
    TCase *tc = tcase_create("coop");
    tcase_add_test(tc, test_coop_layout);
    tcase_set_timeout(tc, 120);
    return tc;
}
