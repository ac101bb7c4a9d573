/* tests/gpu/test-vk-runtime.c: the Vulkan runtime (gpu/vk.h) on whatever
 * device exists (lavapipe in CI): device info, buffer round trips through
 * staging, a dispatch with push and specialization constants, recorded
 * copies and fills, bad bindings failing the recording, the profile, and
 * the descriptor-pool path beside push descriptors. Exit 77 without a
 * device. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/vk-impl.h"
#include "tests/harness.h"

static const uint32_t spv_axpb[] =
#include "gpu/shaders/rt_axpb.spv.h"
    ;

/* rt_axpb.comp's push block: uint n @0, float a @4, float b @8, pad @12 */
struct axpb_push {
    uint32_t n;
    float a, b;
    uint32_t pad;
};
_Static_assert(sizeof(struct axpb_push) == 16, "rt_axpb push constants");

static struct vk_dev *open_dev(void) {
    struct vk_dev *d = NULL;
    struct strata_error err = {0};
    int rc = vk_dev_open(-1, &d, &err);
    ck_assert_msg(rc == 0, "vk_dev_open: %s", err.message);
    return d;
}

START_TEST(test_info) {
    struct vk_dev *d = open_dev();
    const struct vk_dev_info *in = vk_dev_info(d);
    ck_assert(in->name[0] != '\0');
    ck_assert(in->driver[0] != '\0');
    ck_assert(in->subgroup_size >= 1);
    ck_assert(in->max_storage_range >= (1u << 27) - 1); /* >= 128 MiB - 1: the spec's floor */
    ck_assert(in->min_storage_align >= 1 && in->min_storage_align <= 256);
    ck_assert(in->max_push_bytes >= 128);
    ck_assert(in->max_wg_count[0] >= 65535);
    ck_assert(in->vram_bytes > 0);
    ck_assert_int_ge(vk_dev_count(), 1);
    ck_assert_int_ge(in->index, 0);
    vk_dev_close(d);
    /* an index past the last device is NOT_FOUND, not a crash */
    struct vk_dev *d2 = NULL;
    struct strata_error err = {0};
    ck_assert_int_eq(vk_dev_open(99, &d2, &err), STRATA_E_NOT_FOUND);
    ck_assert_ptr_null(d2);
    ck_assert(strstr(err.message, "no device 99") != NULL);
}
END_TEST

START_TEST(test_buffers) {
    struct vk_dev *d = open_dev();
    struct strata_error err = {0};
    /* bigger than one staging chunk (32 MiB), so the upload takes two */
    uint64_t n = (40ull << 20) + 12;
    unsigned char *src = malloc(n), *dst = malloc(n);
    for (uint64_t i = 0; i < n; i++)
        src[i] = (unsigned char)(i * 2654435761u >> 24);
    struct vk_buf *b = vk_buf_alloc(d, n, VK_MEM_DEVICE, &err);
    ck_assert_msg(b, "%s", err.message);
    ck_assert_uint_eq(vk_buf_size(b), n);
    ck_assert_uint_ge(vk_dev_allocated(d, 1), n);
    /* zeroed at allocation */
    ck_assert_int_eq(vk_buf_download(d, b, n - 4096, dst, 4096, &err), 0);
    for (int i = 0; i < 4096; i++)
        ck_assert_int_eq(dst[i], 0);
    ck_assert_int_eq(vk_buf_upload(d, b, 0, src, n, &err), 0);
    memset(dst, 0, n);
    ck_assert_int_eq(vk_buf_download(d, b, 0, dst, n, &err), 0);
    ck_assert(memcmp(src, dst, n) == 0);
    /* at an offset */
    ck_assert_int_eq(vk_buf_upload(d, b, 1000, src + 7, 5000, &err), 0);
    ck_assert_int_eq(vk_buf_download(d, b, 1000, dst, 5000, &err), 0);
    ck_assert(memcmp(src + 7, dst, 5000) == 0);
    /* a range outside the buffer is an error, not a write */
    ck_assert_int_eq(vk_buf_upload(d, b, n - 10, src, 11, &err), STRATA_E_RANGE);
    ck_assert_int_eq(vk_buf_download(d, b, n + 1, dst, 0, &err), STRATA_E_RANGE);
    /* fill */
    ck_assert_int_eq(vk_buf_fill(d, b, 16, 64, 0x3f800000u, &err), 0);
    float f[16];
    ck_assert_int_eq(vk_buf_download(d, b, 16, f, 64, &err), 0);
    for (int i = 0; i < 16; i++)
        ck_assert(f[i] == 1.0f);
    ck_assert_int_eq(vk_buf_fill(d, b, 2, 64, 0, &err), STRATA_E_INVALID);
    /* synchronous device copy */
    struct vk_buf *b2 = vk_buf_alloc(d, 8192, VK_MEM_DEVICE, &err);
    ck_assert_int_eq(vk_buf_copy(d, b, 1000, b2, 4096, 4096, &err), 0);
    ck_assert_int_eq(vk_buf_download(d, b2, 4096, dst, 4096, &err), 0);
    ck_assert(memcmp(src + 7, dst, 4096) == 0);
    ck_assert_int_eq(vk_buf_copy(d, b, 0, b2, 4097, 4096, &err), STRATA_E_RANGE);
    vk_buf_free(d, b2);
    /* host buffers map */
    struct vk_buf *h = vk_buf_alloc(d, 4096, VK_MEM_HOST, &err);
    ck_assert_msg(h, "%s", err.message);
    ck_assert(vk_buf_host(h));
    unsigned char *m = vk_buf_map(h);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(m[100], 0);
    m[100] = 42;
    ck_assert_int_eq(vk_buf_download(d, h, 100, dst, 1, &err), 0);
    ck_assert_int_eq(dst[0], 42);
    /* sizes the device refuses */
    ck_assert_ptr_null(vk_buf_alloc(d, 0, VK_MEM_DEVICE, &err));
    ck_assert_int_eq(err.code, STRATA_E_RANGE);
    ck_assert_ptr_null(vk_buf_alloc(d, vk_dev_info(d)->max_buffer_bytes + 1, VK_MEM_DEVICE, &err));
    ck_assert_int_eq(err.code, STRATA_E_RANGE);
    vk_buf_free(d, h);
    vk_buf_free(d, b);
    vk_buf_free(d, NULL);
    ck_assert_uint_eq(vk_dev_allocated(d, 1), 0);
    free(src);
    free(dst);
    vk_dev_close(d);
}
END_TEST

/* y = a x + b over n floats in one recording, then a recorded copy and fill
 * behind it (the barriers order them). */
static void run_axpb(struct vk_dev *d, uint32_t wg) {
    struct strata_error err = {0};
    const uint32_t n = 1000 + 37;
    struct vk_pipe *p = vk_pipe_create(d, "axpb", spv_axpb, sizeof spv_axpb, 2,
                                       sizeof(struct axpb_push), (uint32_t[]){wg}, 1, &err);
    ck_assert_msg(p, "%s", err.message);
    ck_assert_str_eq(vk_pipe_name(p), "axpb");
    float *x = malloc(n * 4), *y = malloc(n * 4);
    for (uint32_t i = 0; i < n; i++)
        x[i] = (float)i * 0.5f - 100.0f;
    struct vk_buf *bx = vk_buf_alloc(d, n * 4, VK_MEM_DEVICE, &err);
    struct vk_buf *by = vk_buf_alloc(d, n * 4, VK_MEM_DEVICE, &err);
    struct vk_buf *bz = vk_buf_alloc(d, n * 4, VK_MEM_HOST, &err);
    ck_assert(bx && by && bz);
    ck_assert_int_eq(vk_buf_upload(d, bx, 0, x, n * 4, &err), 0);
    struct axpb_push pc = {.n = n, .a = 3.0f, .b = 0.25f};
    ck_assert_int_eq(vk_rec_begin(d, &err), 0);
    ck_assert(vk_rec_active(d));
    vk_dispatch(d, p, (struct vk_bind[]){{bx, 0, 0}, {by, 0, n * 4}}, &pc, (n + wg - 1) / wg, 1, 1);
    vk_copy(d, by, 0, bz, 0, n * 4);   /* sees the dispatch's writes */
    vk_fill(d, bz, 0, 8, 0x40000000u); /* 2.0f over the first two, after the copy */
    ck_assert_int_eq(vk_rec_submit(d, &err), 0);
    ck_assert(vk_rec_pending(d));
    ck_assert_int_eq(vk_rec_wait(d, &err), 0);
    ck_assert(!vk_rec_pending(d));
    ck_assert_int_eq(vk_rec_wait(d, &err), 0); /* nothing pending: at once */
    ck_assert_int_eq(vk_buf_download(d, by, 0, y, n * 4, &err), 0);
    for (uint32_t i = 0; i < n; i++)
        ck_assert_msg(y[i] == 3.0f * x[i] + 0.25f, "y[%u] = %g", i, y[i]);
    const float *z = vk_buf_map(bz);
    ck_assert(z[0] == 2.0f && z[1] == 2.0f);
    for (uint32_t i = 2; i < n; i++)
        ck_assert(z[i] == y[i]);

    /* a binding past its buffer fails the recording: nothing runs */
    ck_assert_int_eq(vk_rec_begin(d, &err), 0);
    vk_fill(d, by, 0, 4, 0);
    vk_dispatch(d, p, (struct vk_bind[]){{bx, n * 8, 0}, {by, 0, 0}}, &pc, 1, 1, 1);
    ck_assert_int_eq(vk_rec_submit(d, &err), STRATA_E_INTERNAL);
    ck_assert(strstr(err.message, "axpb") != NULL);
    ck_assert(!vk_rec_pending(d));
    ck_assert_int_eq(vk_buf_download(d, by, 0, y, 4, &err), 0);
    ck_assert(y[0] == 3.0f * x[0] + 0.25f);
    /* a begin drops an unsubmitted recording; submit without one is an error */
    ck_assert_int_eq(vk_rec_begin(d, &err), 0);
    vk_fill(d, by, 0, 4, 0);
    ck_assert_int_eq(vk_rec_begin(d, &err), 0);
    ck_assert_int_eq(vk_rec_submit(d, &err), 0);
    ck_assert_int_eq(vk_rec_wait(d, &err), 0);
    ck_assert_int_eq(vk_rec_submit(d, &err), STRATA_E_INVALID);
    ck_assert_int_eq(vk_buf_download(d, by, 0, y, 4, &err), 0);
    ck_assert(y[0] == 3.0f * x[0] + 0.25f);

    vk_buf_free(d, bz);
    vk_buf_free(d, by);
    vk_buf_free(d, bx);
    vk_pipe_free(d, p);
    free(x);
    free(y);
}

START_TEST(test_dispatch) {
    struct vk_dev *d = open_dev();
    run_axpb(d, 64);
    run_axpb(d, 32); /* another specialization */
    vk_dev_close(d);
}
END_TEST

/* The descriptor-pool path (devices without VK_KHR_push_descriptor): the
 * same dispatch, and more sets than one pool holds in one recording. */
START_TEST(test_desc_pools) {
    struct vk_dev *d = open_dev();
    struct strata_error err = {0};
    d->push_desc = NULL; /* pipelines made from here use plain set layouts */
    run_axpb(d, 64);
    struct vk_pipe *p = vk_pipe_create(d, "axpb", spv_axpb, sizeof spv_axpb, 2,
                                       sizeof(struct axpb_push), (uint32_t[]){64}, 1, &err);
    ck_assert(p);
    struct vk_buf *b = vk_buf_alloc(d, 256, VK_MEM_HOST, &err);
    float *m = vk_buf_map(b);
    m[0] = 1.0f;
    struct axpb_push pc = {.n = 1, .a = 1.0f, .b = 1.0f};
    ck_assert_int_eq(vk_rec_begin(d, &err), 0);
    for (int i = 0; i < VK_DESC_POOL_SETS + 10; i++) /* in place: m[0] += 1 each */
        vk_dispatch(d, p, (struct vk_bind[]){{b, 0, 0}, {b, 0, 0}}, &pc, 1, 1, 1);
    ck_assert_int_eq(vk_rec_submit(d, &err), 0);
    ck_assert_int_eq(vk_rec_wait(d, &err), 0);
    ck_assert(m[0] == 1.0f + VK_DESC_POOL_SETS + 10);
    vk_buf_free(d, b);
    vk_pipe_free(d, p);
    vk_dev_close(d);
}
END_TEST

/* A group of independent dispatches gets one barrier at its end: what
 * follows sees both writes. */
START_TEST(test_group) {
    struct vk_dev *d = open_dev();
    struct strata_error err = {0};
    struct vk_pipe *p = vk_pipe_create(d, "axpb", spv_axpb, sizeof spv_axpb, 2,
                                       sizeof(struct axpb_push), (uint32_t[]){64}, 1, &err);
    ck_assert(p);
    const uint32_t n = 256;
    struct vk_buf *x = vk_buf_alloc(d, n * 4, VK_MEM_HOST, &err);
    struct vk_buf *y = vk_buf_alloc(d, 2 * n * 4, VK_MEM_DEVICE, &err);
    struct vk_buf *z = vk_buf_alloc(d, 2 * n * 4, VK_MEM_HOST, &err);
    float *xm = vk_buf_map(x);
    for (uint32_t i = 0; i < n; i++)
        xm[i] = (float)i;
    struct axpb_push a = {.n = n, .a = 2.0f, .b = 1.0f}, b = {.n = n, .a = -1.0f, .b = 0.0f};
    ck_assert_int_eq(vk_rec_begin(d, &err), 0);
    vk_rec_group(d, true);
    vk_dispatch(d, p, (struct vk_bind[]){{x, 0, 0}, {y, 0, n * 4}}, &a, n / 64, 1, 1);
    vk_dispatch(d, p, (struct vk_bind[]){{x, 0, 0}, {y, n * 4, n * 4}}, &b, n / 64, 1, 1);
    vk_rec_group(d, false);
    vk_copy(d, y, 0, z, 0, 2 * n * 4);
    ck_assert_int_eq(vk_rec_submit(d, &err), 0);
    ck_assert_int_eq(vk_rec_wait(d, &err), 0);
    const float *zm = vk_buf_map(z);
    for (uint32_t i = 0; i < n; i++) {
        ck_assert(zm[i] == 2.0f * (float)i + 1.0f);
        ck_assert(zm[n + i] == -(float)i);
    }
    /* a long chain of dependent dispatches: the recording goes to the
     * device in parts (VK_REC_SPLIT_FIRST, VK_REC_SPLIT_EVERY), in order */
    struct axpb_push inc = {.n = 1, .a = 1.0f, .b = 1.0f};
    xm[0] = 0.0f;
    const int n_chain = VK_REC_SPLIT_FIRST + VK_REC_PARTS * VK_REC_SPLIT_EVERY + 7;
    ck_assert_int_eq(vk_rec_begin(d, &err), 0);
    for (int i = 0; i < n_chain; i++)
        vk_dispatch(d, p, (struct vk_bind[]){{x, 0, 0}, {x, 0, 0}}, &inc, 1, 1, 1);
    ck_assert_int_eq(vk_rec_submit(d, &err), 0);
    ck_assert_int_eq(vk_rec_wait(d, &err), 0);
    ck_assert_msg(xm[0] == (float)n_chain, "%g after %d", xm[0], n_chain);
    /* dropped after parts ran: the next recording starts clean */
    ck_assert_int_eq(vk_rec_begin(d, &err), 0);
    for (int i = 0; i < 2 * VK_REC_SPLIT_FIRST; i++)
        vk_dispatch(d, p, (struct vk_bind[]){{x, 0, 0}, {x, 0, 0}}, &inc, 1, 1, 1);
    ck_assert_int_eq(vk_rec_begin(d, &err), 0);
    vk_dispatch(d, p, (struct vk_bind[]){{x, 0, 0}, {x, 0, 0}}, &inc, 1, 1, 1);
    ck_assert_int_eq(vk_rec_submit(d, &err), 0);
    ck_assert_int_eq(vk_rec_wait(d, &err), 0);
    /* the first part (VK_REC_SPLIT_FIRST) of the dropped one ran, then one */
    ck_assert_msg(xm[0] == (float)(n_chain + VK_REC_SPLIT_FIRST + 1), "%g", xm[0]);
    vk_buf_free(d, z);
    vk_buf_free(d, y);
    vk_buf_free(d, x);
    vk_pipe_free(d, p);
    vk_dev_close(d);
}
END_TEST

START_TEST(test_profile) {
    struct vk_dev *d = open_dev();
    struct strata_error err = {0};
    if (vk_dev_info(d)->timestamp_period_ns <= 0) {
        vk_dev_close(d);
        return; /* the queue has no timestamps: nothing to time */
    }
    struct vk_pipe *p = vk_pipe_create(d, "axpb_prof", spv_axpb, sizeof spv_axpb, 2,
                                       sizeof(struct axpb_push), (uint32_t[]){64}, 1, &err);
    struct vk_buf *b = vk_buf_alloc(d, 4096, VK_MEM_DEVICE, &err);
    struct axpb_push pc = {.n = 1024, .a = 1.0f, .b = 1.0f};
    vk_prof_enable(d, true);
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(vk_rec_begin(d, &err), 0);
        for (int i = 0; i < 3; i++)
            vk_dispatch(d, p, (struct vk_bind[]){{b, 0, 0}, {b, 0, 0}}, &pc, 16, 1, 1);
        ck_assert_int_eq(vk_rec_submit(d, &err), 0);
        ck_assert_int_eq(vk_rec_wait(d, &err), 0);
    }
    char *txt = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&txt, &len);
    vk_prof_report(d, f);
    fclose(f);
    ck_assert_msg(strstr(txt, "axpb_prof") != NULL, "%s", txt);
    ck_assert_msg(strstr(txt, " 6 ") != NULL, "6 dispatches: %s", txt);
    free(txt);
    /* the report resets the table */
    txt = NULL;
    f = open_memstream(&txt, &len);
    vk_prof_report(d, f);
    fclose(f);
    ck_assert_uint_eq(len, 0);
    free(txt);
    vk_buf_free(d, b);
    vk_pipe_free(d, p);
    vk_dev_close(d);
}
END_TEST

static Suite *vk_runtime_suite(void) {
    Suite *s = suite_create("vk-runtime");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_info);
    tcase_add_test(tc, test_buffers);
    tcase_add_test(tc, test_dispatch);
    tcase_add_test(tc, test_desc_pools);
    tcase_add_test(tc, test_group);
    tcase_add_test(tc, test_profile);
    suite_add_tcase(s, tc);
    return s;
}

/* Exit 77 (skipped) only when no Vulkan device exists at all. */
int main(void) {
    if (vk_dev_count() == 0) {
        printf("RESULT vk-runtime: no Vulkan device: skipped\n");
        return 77;
    }
    SRunner *sr = srunner_create(vk_runtime_suite());
    srunner_run_all(sr, CK_NORMAL);
    int n_run = srunner_ntests_run(sr), n_fail = srunner_ntests_failed(sr);
    srunner_free(sr);
    printf("RESULT vk-runtime: %d passed, %d failed\n", n_run - n_fail, n_fail);
    return n_fail ? 1 : 0;
}
