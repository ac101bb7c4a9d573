/* bench/mv-bench.c: the Q4_0 decode matvec alone (gpu/vk-mm.h), the
 * kernel a 7B's decode spends ~80% of its GPU time in (bench/README.md,
 * "fused decode"), timed per launch shape (not a test suite; built as
 * bench/mv-bench, run by hand on the device).
 *
 *   mv-bench [device=-1] [reps=200] SPEC...     SPEC: vkmm_configure's, e.g.
 *       auto  mv=128x4  mv=64x4:u2  mv=128x4:soa
 *
 * For each SPEC and shape (rows x cols: 4096 x 4096 a 7B's q/k/v/o, 4096 x
 * 11008 its down, the fused gate + up of 2 x 11008 x 4096, and 4 x 4096,
 * one workgroup: the fixed cost of a launch and its barrier), one recording
 * of `reps` matvecs of one token with a barrier after each (as a decode
 * step records them), over enough copies of the matrix that they do not
 * fit the GPU's L2 (50 MB on an H100/H200: every launch reads from HBM, as
 * decode does), timed on the host from submit to wait: microseconds a
 * launch and the weight bytes a second that makes (MV_COPIES=1: one copy,
 * read from L2 after the first launch). The best of 3. Then the
 * same launches of the 4096 x 4096 shape without barriers between them (a
 * group: what independent Q, K, V matvecs cost). A ":soa" SPEC reads rows
 * put through vkmm_soa_row. Shapes are the outer loop and each SPEC's
 * timing follows 30 ms of busy GPU, so the clocks are the same for all.
 * MV_Q8=1 times the matvec over x as q8 blocks (vkmm_matmul_q8x, decode's
 * form after a norm) instead of f32 x. First (unless MV_NO_STREAM is set)
 * the plain read ceiling through Vulkan (stream_probe): what these
 * figures are to be held against. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/quant/quant.h"
#include "gpu/vk-mm.h"
#include "gpu/vk.h"

static const uint32_t stream_spv[] =
#include "gpu/shaders/rt_stream.spv.h"
    ;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint32_t rng = 0x2545f491u;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return (float)(rng >> 8) / 8388608.0f - 1.0f;
}

struct mats {
    int n;                /* copies */
    struct vk_buf **buf;  /* (n) */
    struct vk_wpiece *pc; /* (n) */
    struct vk_wmat *w;    /* (n) */
    int64_t rows, cols;
};

static int mats_make(struct vk_dev *d, struct mats *m, int64_t rows, int64_t cols, bool soa) {
    const size_t rb = quant_row_size(QUANT_Q4_0, cols), bytes = (size_t)rows * rb;
    m->rows = rows;
    m->cols = cols;
    m->n = (int)((256ull << 20) / bytes) + 1;
    if (m->n > 64)
        m->n = 64;
    /* MV_COPIES=N: N copies instead (1: every launch reads one matrix that
     * stays in L2 after the first, to time the kernel without HBM) */
    const char *nc = getenv("MV_COPIES");
    if (nc && atoi(nc) >= 1 && atoi(nc) <= 64)
        m->n = atoi(nc);
    m->buf = calloc((size_t)m->n, sizeof *m->buf);
    m->pc = calloc((size_t)m->n, sizeof *m->pc);
    m->w = calloc((size_t)m->n, sizeof *m->w);
    uint8_t *host = malloc(bytes), *tmp = malloc(rb);
    float *row = malloc(sizeof(float) * (size_t)cols);
    if (!m->buf || !m->pc || !m->w || !host || !tmp || !row)
        return -1;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++)
            row[c] = frand();
        quant_quantize_row(QUANT_Q4_0, row, host + (size_t)r * rb, cols);
        if (soa) {
            vkmm_soa_row(QUANT_Q4_0, host + (size_t)r * rb, tmp, cols);
            memcpy(host + (size_t)r * rb, tmp, rb);
        }
    }
    struct strata_error err = {0};
    for (int i = 0; i < m->n; i++) {
        m->buf[i] = vk_buf_alloc(d, (bytes + 15) & ~(size_t)15, VK_MEM_DEVICE, &err);
        if (!m->buf[i] || vk_buf_upload(d, m->buf[i], 0, host, bytes, &err)) {
            fprintf(stderr, "mv-bench: %s\n", err.message);
            return -1;
        }
        m->pc[i] = (struct vk_wpiece){m->buf[i], 0, 0, rows};
        m->w[i] = (struct vk_wmat){QUANT_Q4_0, rows, cols, rb, 0, 1, &m->pc[i]};
    }
    free(row);
    free(tmp);
    free(host);
    return 0;
}

static void mats_free(struct vk_dev *d, struct mats *m) {
    for (int i = m->n - 1; i >= 0; i--)
        vk_buf_free(d, m->buf[i]);
    free(m->w);
    free(m->pc);
    free(m->buf);
}

/* Seconds a launch: the best of 3 recordings of reps launches. kind 0: one
 * matrix a launch, 1: the fused gate + up of two copies, 2: one matrix
 * without barriers between launches. */
/* MV_ACC=1: the residual, the norm's weight, output and q8 output of the
 * acc (kind 3: vkmm_matmul_acc) and acc.norm (kind 4: vkmm_matmul_acc_norm)
 * timings, f32 x, the 4096-row shapes */
static struct vk_buf *acc_bufs[4];

static double time_it(struct vk_dev *d, struct vkmm *mm, const struct mats *m, int kind,
                      struct vk_buf *x, struct vk_buf *xq, struct vk_buf *y, int reps) {
    double best = 1e9;
    struct strata_error err = {0};
    for (int rep = 0; rep < 4; rep++) { /* the first: pipelines, clocks */
        if (vk_rec_begin(d, &err))
            return -1;
        if (kind == 2)
            vk_rec_group(d, true);
        for (int i = 0; i < reps; i++) {
            const struct vk_bind xb = {x, 0, 0}, yb = {y, 0, 0};
            const struct vkmm_tail tail = {
                {acc_bufs[1], 0, 0}, {acc_bufs[2], 0, 0}, {acc_bufs[3], 0, 0}, 1e-5f};
            if (kind == 3)
                vkmm_matmul_acc(mm, &m->w[i % m->n], xb, yb, 1,
                                (struct vk_bind){acc_bufs[0], 0, 0});
            else if (kind == 4)
                vkmm_matmul_acc_norm(mm, &m->w[i % m->n], xb, yb,
                                     (struct vk_bind){acc_bufs[0], 0, 0}, &tail);
            else if (xq && kind == 1)
                vkmm_matmul_q8x(mm, &m->w[(2 * i) % m->n], &m->w[(2 * i + 1) % m->n],
                                (struct vk_bind){xq, 0, 0}, yb);
            else if (xq)
                vkmm_matmul_q8x(mm, &m->w[i % m->n], NULL, (struct vk_bind){xq, 0, 0}, yb);
            else if (kind == 1)
                vkmm_matmul_glu(mm, &m->w[(2 * i) % m->n], &m->w[(2 * i + 1) % m->n], -1, xb, yb,
                                1);
            else
                vkmm_matmul(mm, &m->w[i % m->n], -1, xb, yb, 1);
        }
        if (kind == 2)
            vk_rec_group(d, false);
        const double t0 = now_s();
        if (vk_rec_submit(d, &err) || vk_rec_wait(d, &err) || vkmm_status(mm, &err)) {
            fprintf(stderr, "mv-bench: %s\n", err.message);
            return -1;
        }
        const double t = (now_s() - t0) / reps;
        if (rep > 0 && t < best)
            best = t;
    }
    return best;
}

/* Keeps the GPU busy for about `ms` milliseconds (its clocks drop while
 * the host prepares matrices; the first timings of the H100 run of
 * 2026-12-06 were 2-3x slow after each matrix set up). */
static void warm(struct vk_dev *d, struct vkmm *mm, const struct mats *m, struct vk_buf *x,
                 struct vk_buf *y, double ms) {
    struct strata_error err = {0};
    const double t0 = now_s();
    while ((now_s() - t0) * 1e3 < ms) {
        if (vk_rec_begin(d, &err))
            return;
        for (int i = 0; i < 200; i++)
            vkmm_matmul(mm, &m->w[i % m->n], -1, (struct vk_bind){x, 0, 0},
                        (struct vk_bind){y, 0, 0}, 1);
        if (vk_rec_submit(d, &err) || vk_rec_wait(d, &err))
            return;
    }
}

/* The plain read ceiling (rt_stream.comp): a buffer of up to 1 GiB (the
 * binding's limit) read `reps` times, a barrier after each pass, per
 * workgroup size, loads a lane in flight (U) and bytes a workgroup (9,216:
 * what one workgroup of the 4 x 4096 Q4_0 matvec reads; 36,864; 294,912;
 * and the whole buffer split over 4 workgroups an SM-sized group of 132).
 * GB/s of the best of 3 recordings after a first. */
static void stream_probe(struct vk_dev *d, int reps) {
    struct strata_error err = {0};
    uint64_t bytes = 1ull << 30;
    if (bytes > (vk_dev_info(d)->max_storage_range & ~15ull))
        bytes = vk_dev_info(d)->max_storage_range & ~15ull;
    struct vk_buf *a = vk_buf_alloc(d, bytes, VK_MEM_DEVICE, &err);
    const uint32_t n = (uint32_t)(bytes / 16);
    struct vk_buf *b = NULL;
    if (!a || vk_buf_fill(d, a, 0, bytes, 0x9e3779b9u, &err)) {
        fprintf(stderr, "mv-bench: stream: %s\n", err.message);
        vk_buf_free(d, a);
        return;
    }
    static const uint32_t lanes[] = {128, 256}, us[] = {1, 4}, per[] = {576, 2304, 18432, 0};
    printf("%-22s %-14s %10s %10s\n", "stream (lanes/U)", "bytes a wg", "us a pass", "GB/s");
    for (size_t l = 0; l < sizeof lanes / sizeof lanes[0]; l++)
        for (size_t u = 0; u < sizeof us / sizeof us[0]; u++) {
            const uint32_t spec[2] = {lanes[l], us[u]};
            struct vk_pipe *pp =
                vk_pipe_create(d, "rt_stream", stream_spv, sizeof stream_spv, 2, 8, spec, 2, &err);
            if (!pp) {
                fprintf(stderr, "mv-bench: stream: %s\n", err.message);
                continue;
            }
            for (size_t k = 0; k < sizeof per / sizeof per[0]; k++) {
                const uint32_t pw = per[k] ? per[k] : (n + 528 - 1) / 528;
                const uint32_t groups = (n + pw - 1) / pw;
                const uint64_t out_bytes = 4ull * groups * lanes[l];
                vk_buf_free(d, b);
                b = vk_buf_alloc(d, out_bytes, VK_MEM_DEVICE, &err);
                if (!b)
                    break;
                const uint32_t push[2] = {n, pw};
                double best = 1e9;
                for (int rep = 0; rep < 4; rep++) {
                    if (vk_rec_begin(d, &err))
                        break;
                    for (int i = 0; i < reps; i++)
                        vk_dispatch(d, pp, (struct vk_bind[]){{a, 0, 0}, {b, 0, 0}}, push, groups,
                                    1, 1);
                    const double t0 = now_s();
                    if (vk_rec_submit(d, &err) || vk_rec_wait(d, &err))
                        break;
                    const double t = (now_s() - t0) / reps;
                    if (rep > 0 && t < best)
                        best = t;
                }
                char what[32], wb[32];
                snprintf(what, sizeof what, "%u/%u", lanes[l], us[u]);
                snprintf(wb, sizeof wb, "%u%s", pw * 16, per[k] ? "" : " (528 wg)");
                printf("%-22s %-14s %10.2f %10.1f\n", what, wb, best * 1e6,
                       (double)bytes / best / 1e9);
                fflush(stdout);
            }
            vk_pipe_free(d, pp);
        }
    vk_buf_free(d, b);
    vk_buf_free(d, a);
}

int main(int argc, char **argv) {
    const int device = argc > 1 ? atoi(argv[1]) : -1;
    const int reps = argc > 2 ? atoi(argv[2]) : 200;
    struct strata_error err = {0};
    struct vk_dev *d = NULL;
    if (vk_dev_open(device, &d, &err)) {
        fprintf(stderr, "mv-bench: %s\n", err.message);
        return 1;
    }
    printf("device: %s (%s)\n", vk_dev_info(d)->name, vk_dev_info(d)->driver);
    static const int64_t shapes[][2] = {{4096, 4096}, {4096, 11008}, {11008, 4096}, {4, 4096}};
    struct vk_buf *x = vk_buf_alloc(d, 4 * 16384, VK_MEM_DEVICE, &err);
    struct vk_buf *y = vk_buf_alloc(d, 4 * 16384, VK_MEM_DEVICE, &err);
    float xs[16384];
    for (int i = 0; i < 16384; i++)
        xs[i] = frand();
    if (!x || !y || vk_buf_upload(d, x, 0, xs, sizeof xs, &err))
        return 1;
    if (!getenv("MV_NO_STREAM"))
        stream_probe(d, reps > 20 ? 20 : reps);
    /* MV_Q8=1: the matvec over x as q8 blocks (vkmm_matmul_q8x, what decode
     * runs after a norm since fuse bit 4): levels, d, their sum, 2 zero
     * words a block of 32 */
    struct vk_buf *xq = NULL;
    if (getenv("MV_Q8") && atoi(getenv("MV_Q8"))) {
        static uint32_t blk[16384 / 32][VKMM_Q8_BLOCK_BYTES / 4];
        for (int bi = 0; bi < 16384 / 32; bi++) {
            int sum = 0;
            for (int w = 0; w < 8; w++) {
                uint32_t word = 0;
                for (int k = 0; k < 4; k++) {
                    const int q = (int)(frand() * 127.0f);
                    sum += q;
                    word |= (uint32_t)(q & 255) << (8 * k);
                }
                blk[bi][w] = word;
            }
            const float dq = 1.0f / 127.0f;
            memcpy(&blk[bi][8], &dq, 4);
            blk[bi][9] = (uint32_t)sum;
            blk[bi][10] = blk[bi][11] = 0;
        }
        xq = vk_buf_alloc(d, sizeof blk, VK_MEM_DEVICE, &err);
        if (!xq || vk_buf_upload(d, xq, 0, blk, sizeof blk, &err))
            return 1;
    }
    if (getenv("MV_ACC") && atoi(getenv("MV_ACC"))) {
        static float ones[16384];
        for (int i = 0; i < 16384; i++)
            ones[i] = 1.0f;
        for (int i = 0; i < 4; i++) {
            acc_bufs[i] = vk_buf_alloc(d, 4 * 16384, VK_MEM_DEVICE, &err);
            if (!acc_bufs[i] || vk_buf_upload(d, acc_bufs[i], 0, ones, sizeof ones, &err))
                return 1;
        }
    }
    const int n_spec = argc - 3;
    struct vkmm **mm = calloc((size_t)(n_spec > 0 ? n_spec : 1), sizeof *mm);
    for (int a = 0; a < n_spec; a++)
        if (vkmm_init(d, &mm[a], &err) || vkmm_configure(mm[a], argv[3 + a], &err)) {
            fprintf(stderr, "mv-bench: %s: %s\n", argv[3 + a], err.message);
            vkmm_free(mm[a]);
            mm[a] = NULL;
        }
    printf("%-22s %-14s %10s %10s\n", "spec", "shape", "us", "GB/s");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        struct mats mg = {0}, ms = {0}; /* GGUF rows, scales-then-quants rows */
        bool any_soa = false;
        for (int a = 0; a < n_spec; a++)
            any_soa = any_soa || strstr(argv[3 + a], ":soa");
        if (mats_make(d, &mg, shapes[s][0], shapes[s][1], false) ||
            (any_soa && mats_make(d, &ms, shapes[s][0], shapes[s][1], true)))
            return 1;
        for (int a = 0; a < n_spec; a++) {
            if (!mm[a])
                continue;
            const struct mats *m = strstr(argv[3 + a], ":soa") ? &ms : &mg;
            const double wb = (double)m->rows * (double)m->w[0].row_bytes;
            warm(d, mm[a], m, x, y, 30);
            /* plain; glu (11008 rows); no barriers (4096); MV_ACC: acc, acc.norm (4096 rows) */
            for (int kind = 0; kind < 5; kind++) {
                if ((kind == 1 && s != 2) || (kind == 2 && s != 0) ||
                    (kind >= 3 && (!acc_bufs[0] || m->rows != 4096)))
                    continue;
                const double t = time_it(d, mm[a], m, kind, x, xq, y, reps);
                const double bytes = kind == 1 ? 2 * wb : wb;
                char shape[32];
                snprintf(shape, sizeof shape, "%lldx%lld%s", (long long)m->rows, (long long)m->cols,
                         kind == 1   ? " glu"
                         : kind == 2 ? " nobar"
                         : kind == 3 ? " acc"
                         : kind == 4 ? " acc.norm"
                                     : "");
                printf("%-22s %-14s %10.2f %10.1f\n", argv[3 + a], shape, t * 1e6, bytes / t / 1e9);
                fflush(stdout);
            }
        }
        mats_free(d, &ms);
        mats_free(d, &mg);
    }
    for (int a = n_spec - 1; a >= 0; a--)
        vkmm_free(mm[a]);
    free(mm);
    for (int i = 0; i < 4; i++)
        vk_buf_free(d, acc_bufs[i]);
    vk_buf_free(d, xq);
    vk_buf_free(d, y);
    vk_buf_free(d, x);
    vk_dev_close(d);
    return 0;
}
