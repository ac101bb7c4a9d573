/* tests/gpu/vk-mm-fixture.h: what the parts of test-vk-mm that build their
 * own matrices share (test-vk-mm-fuse.c, test-vk-mm-q8.c): random values,
 * device buffers, one recording run and checked, random matrices (an
 * expert stack too) with their dequantized values, and the normalised
 * squared error against a double reference. Static functions: each part
 * has its own copy and its own random sequence. */
#ifndef STRATA_TESTS_VK_MM_FIXTURE_H
#define STRATA_TESTS_VK_MM_FIXTURE_H

#include <stdlib.h>
#include <string.h>

#include "gpu/vk-mm-impl.h"
#include "tests/harness.h"

static uint32_t fz_state = 0x9e3779b9u;
static inline float fz_rand(void) { /* [-1, 1) */
    fz_state ^= fz_state << 13;
    fz_state ^= fz_state >> 17;
    fz_state ^= fz_state << 5;
    return (float)(fz_state >> 8) / 8388608.0f - 1.0f;
}

struct fz_gpu {
    struct vk_dev *d;
    struct vkmm *mm;
};

static inline struct vk_buf *fz_buf(struct fz_gpu *g, const void *src, size_t n) {
    struct strata_error err = {0};
    struct vk_buf *b = vk_buf_alloc(g->d, (n + 15) & ~(size_t)15, VK_MEM_DEVICE, &err);
    ck_assert_msg(b != NULL, "vk_buf_alloc: %s", err.message);
    if (src)
        ck_assert_msg(vk_buf_upload(g->d, b, 0, src, n, &err) == 0, "upload: %s", err.message);
    return b;
}

static inline struct vk_bind fz_bd(const struct vk_buf *b) {
    return (struct vk_bind){b, 0, 0};
}

static inline void fz_read(struct fz_gpu *g, const struct vk_buf *b, float *dst, size_t n) {
    struct strata_error err = {0};
    ck_assert_int_eq(vk_buf_download(g->d, b, 0, dst, n * sizeof(float), &err), 0);
}

static inline void fz_run(struct fz_gpu *g) {
    struct strata_error err = {0};
    ck_assert_msg(vk_rec_submit(g->d, &err) == 0, "submit: %s", err.message);
    ck_assert_msg(vk_rec_wait(g->d, &err) == 0, "wait: %s", err.message);
    ck_assert_msg(vkmm_status(g->mm, &err) == 0, "vkmm: %s", err.message);
}

/* A random matrix (n_exp > 1: a stack of n_exp experts of `rows` rows
 * each): its bytes on the device in one piece and its dequantized values. */
struct fz_mat {
    struct vk_buf *buf;
    struct vk_wpiece pc;
    struct vk_wmat w;
    float *deq; /* (rows x n_exp, cols) */
};

static inline void fz_stack_init(struct fz_gpu *g, struct fz_mat *m, enum quant_type type,
                                 int64_t rows, int64_t cols, int64_t n_exp) {
    const int64_t all = rows * n_exp;
    const size_t rb = quant_row_size(type, cols);
    uint8_t *bytes = malloc((size_t)all * rb);
    float *src = malloc(sizeof(float) * (size_t)cols);
    m->deq = malloc(sizeof(float) * (size_t)(all * cols));
    for (int64_t r = 0; r < all; r++) {
        for (int64_t c = 0; c < cols; c++)
            src[c] = fz_rand() * (0.5f + (float)(r % 5) * 0.25f);
        if (type == QUANT_F32)
            memcpy(bytes + (size_t)r * rb, src, sizeof(float) * (size_t)cols);
        else
            ck_assert_int_eq(quant_quantize_row(type, src, bytes + (size_t)r * rb, cols), 0);
        ck_assert_int_eq(
            quant_dequantize_row(type, bytes + (size_t)r * rb, m->deq + r * cols, cols), 0);
    }
    m->buf = fz_buf(g, bytes, (size_t)all * rb);
    m->pc = (struct vk_wpiece){m->buf, 0, 0, all};
    m->w = (struct vk_wmat){type, all, cols, rb, n_exp > 1 ? n_exp : 0, 1, &m->pc};
    free(src);
    free(bytes);
}

static inline void fz_mat_init(struct fz_gpu *g, struct fz_mat *m, enum quant_type type,
                               int64_t rows, int64_t cols) {
    fz_stack_init(g, m, type, rows, cols, 1);
}

static inline void fz_mat_free(struct fz_gpu *g, struct fz_mat *m) {
    vk_buf_free(g->d, m->buf);
    free(m->deq);
}

static inline double fz_nmse(const float *y, const double *ref, int64_t n) {
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        e += ((double)y[i] - ref[i]) * ((double)y[i] - ref[i]);
        s += ref[i] * ref[i];
    }
    return s > 0 ? e / s : e;
}

#endif
