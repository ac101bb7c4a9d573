/* tests/gpu/test-vk-mm.c: the matrix kernels (gpu/vk-mm.h) on whatever
 * Vulkan device exists (lavapipe in CI) against the CPU reference: every
 * type x n_tok {1, 3, 8, 17, 40, 64} (also 2 and 5 for two types: the
 * matvec in its 1/2/4/8-token forms and in 8-token passes up to 32, the
 * tiled matmul above) x odd
 * row counts; ggml's own quantized blocks (../shared/fixtures/quant); the
 * expert-indexed matvec and tiled matmul (x shared or per pick, ids outside
 * the stack, several tiles of one expert) against per-expert reference
 * products; one expert of a stack; the fused gate + up + SwiGLU forms
 * (plain and expert-indexed, gate and up split differently); matrices split
 * over several buffer ranges (pieces of whole rows, of whole experts) giving
 * the same bits as one range; a second launch shape; several blocks a
 * lane at once; bad calls latching an error and recording nothing; the
 * fused residual add and the scales-then-quants rows (test-vk-mm-fuse.c);
 * the coopmat tiles' layout (test-vk-mm-coop.c); the decode matvec over q8
 * activations and the norm that writes them (test-vk-mm-q8.c). Exit 77 only when no
 * Vulkan device exists.
 *
 * Time: lavapipe compiles each pipeline at its first dispatch through LLVM,
 * so the suite's first run costs ~70 s of CPU (release build, this 2-vCPU
 * Xeon, MESA_SHADER_CACHE_DISABLE=true) and later runs, from Mesa's shader
 * cache, ~8 s.
 *
 * The reference is the dequantized weights (engine/quant's reference
 * dequantizers, bit-exact with ggml) times the f32 activations, summed in
 * double. The kernels quantize nothing on the activation side, so they
 * differ from it only by float rounding (f32 sums, fused multiply-adds):
 * the normalised squared error sum (y - ref)^2 / sum ref^2 measured on
 * lavapipe is ~1e-14 for every type; the threshold 1e-9 is far above that
 * and far below what any wrong element gives (a single flipped 4-bit level
 * in a 67 x 512 Q4_0 product is ~1e-5).
 *
 * The tiled matmul's other paths (test_paths, each forced by vkmm_configure
 * on every type it computes; skipped, saying so, only where the device lacks
 * the feature: lavapipe has no cooperative matrix) run the same shape, expert,
 * fused and piece checks on their tiled calls. Integer dot (q8 activations):
 * the reference takes x through the kernel's q8 rule (d = max|x| / 127 per
 * 32, q = round(x / d)), so only f32 rounding and the odd q that lands on the
 * other side of a rounding tie (1 / d to a few ulp: one such q in a 40 x 320
 * x is ~1.5e-8) remain: NMSE_DOT 1e-7; against the unquantized x the error
 * is the q8 rounding, ~1.5e-5 (< 1e-4 checked). Cooperative matrix (f16
 * weights and activations, f32 sums): ~1e-7 expected from two 11-bit
 * roundings, NMSE_COOP 2e-6, still 5x below one flipped 4-bit level.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/vk-mm-impl.h"
#include "tests/harness.h"

#define NMSE_MAX 1e-9
#define NMSE_DOT 1e-7
#define NMSE_COOP 2e-6
#define NMSE_Q8_ROUNDING 1e-4

/* The tiled matmul's path under test (test_paths sets it; the matvec never
 * depends on it) and the tolerance of a call that is tiled or not. */
static enum vkmm_path cur_path = VKMM_PATH_F32;

static double tol(bool tiled) {
    if (!tiled || cur_path == VKMM_PATH_F32)
        return NMSE_MAX;
    return cur_path == VKMM_PATH_DOT ? NMSE_DOT : NMSE_COOP;
}

static const enum quant_type types[] = {QUANT_F32,   QUANT_F16,   QUANT_BF16, QUANT_Q8_0,
                                        QUANT_Q4_0,  QUANT_Q4_K,  QUANT_Q5_K, QUANT_Q6_K,
                                        QUANT_MXFP4, QUANT_IQ4_NL};
#define N_TYPES ((int)(sizeof types / sizeof types[0]))

/* Columns per type: F32/F16/BF16 172 (not a multiple of the matmul's 32-wide
 * K step, as stories260K's feed-forward), 32-blocks 320 (40 units: more
 * than a workgroup's lanes), K-quants 512 (two super-blocks). */
static int64_t cols_of(enum quant_type t) {
    switch (t) {
    case QUANT_F32:
    case QUANT_F16:
    case QUANT_BF16:
        return 172;
    case QUANT_Q4_K:
    case QUANT_Q5_K:
    case QUANT_Q6_K:
        return 512;
    default:
        return 320;
    }
}

static uint32_t rng_state = 0x12345678u;
static float frand(void) { /* [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return (float)(rng_state >> 8) / 8388608.0f - 1.0f;
}

/* A weight matrix on the host: its GGUF bytes and their dequantized values. */
struct hmat {
    enum quant_type type;
    int64_t rows, cols;
    size_t rb;
    uint8_t *bytes; /* (rows, rb) */
    float *deq;     /* (rows, cols) */
};

static void hmat_random(struct hmat *m, enum quant_type type, int64_t rows, int64_t cols) {
    m->type = type;
    m->rows = rows;
    m->cols = cols;
    m->rb = quant_row_size(type, cols);
    ck_assert_uint_gt(m->rb, 0);
    m->bytes = malloc((size_t)rows * m->rb);
    m->deq = malloc(sizeof(float) * (size_t)(rows * cols));
    float *src = malloc(sizeof(float) * (size_t)cols);
    for (int64_t r = 0; r < rows; r++) {
        /* scales vary per row and per 32 (K-quant sub-block scales differ) */
        float rs = 0.25f + (float)(r % 7) * 0.5f;
        for (int64_t c = 0; c < cols; c++)
            src[c] = frand() * rs * (1.0f + (float)((c / 32) % 3));
        uint8_t *row = m->bytes + (size_t)r * m->rb;
        if (type == QUANT_F32)
            memcpy(row, src, sizeof(float) * (size_t)cols);
        else
            ck_assert_int_eq(quant_quantize_row(type, src, row, cols), 0);
        ck_assert_int_eq(quant_dequantize_row(type, row, m->deq + r * cols, cols), 0);
    }
    free(src);
}

static void hmat_free(struct hmat *m) {
    free(m->bytes);
    free(m->deq);
}

/* ref[t * ld + r] for rows [r0, r0 + n) of m (x rows from xrow(t)). */
static void ref_rows(const struct hmat *m, int64_t r0, int64_t n, const float *x, int64_t n_tok,
                     float *ref, int64_t ld) {
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < n; r++) {
            double s = 0;
            const float *wr = m->deq + (r0 + r) * m->cols, *xt = x + t * m->cols;
            for (int64_t c = 0; c < m->cols; c++)
                s += (double)wr[c] * (double)xt[c];
            ref[t * ld + r] = (float)s;
        }
}

/* One pick's rows (19 outputs of one x row): on the integer-dot path a
 * single q on the other side of a rounding tie moves that pick alone by up to
 * ~2e-6 (the H200 run of test_paths: 1.6e-6 at pick 75 for Q4_K, Q5_K, Q6_K),
 * so a pick is held to NMSE_DOT_PICK and the call as a whole to NMSE_DOT; a
 * wrong expert or row is ~1. */
#define NMSE_DOT_PICK 2e-5
/* The same for the cooperative-matrix path's fused gate + up + SwiGLU of one
 * pick: f16 weights and activations round both products, which silu(g) * u
 * multiplies; on the H100 (device calls of 2026-12-06, after the tiles'
 * alignment fix) single picks of 19 rows reached 2.6e-6 .. 6.3e-6 while
 * whole calls (printed) gave 4.5e-8 .. 2.3e-7. So a fused pick is held to
 * NMSE_COOP_PICK and the call to NMSE_COOP. */
#define NMSE_COOP_PICK 2e-5
static double tol_pick(bool tiled) {
    return tiled && cur_path == VKMM_PATH_DOT ? NMSE_DOT_PICK : tol(tiled);
}

/* x (n_tok, cols) as the kernel of a call computes with it: through
 * mm_dot_body.glsl's q8 rule for a tiled call on the integer-dot path, else
 * as it is. Owned by the caller (free). */
static float *ref_x(const float *x, int64_t n_tok, int64_t cols, bool tiled) {
    float *o = malloc(sizeof(float) * (size_t)(n_tok * cols));
    memcpy(o, x, sizeof(float) * (size_t)(n_tok * cols));
    if (!tiled || cur_path != VKMM_PATH_DOT)
        return o;
    ck_assert_int_eq(cols % 32, 0);
    for (int64_t b = 0; b < n_tok * cols; b += 32) {
        float amax = 0;
        for (int i = 0; i < 32; i++)
            amax = fmaxf(amax, fabsf(x[b + i]));
        const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
        for (int i = 0; i < 32; i++)
            o[b + i] = roundf(x[b + i] * id) * d;
    }
    return o;
}

static double nmse(const float *y, const float *ref, int64_t n) {
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)y[i] - (double)ref[i];
        e += d * d;
        s += (double)ref[i] * (double)ref[i];
    }
    return s > 0 ? e / s : e;
}

struct gpu {
    struct vk_dev *d;
    struct vkmm *mm;
};

static struct gpu gpu_open(void) {
    struct gpu g = {0};
    struct strata_error err = {0};
    ck_assert_msg(vk_dev_open(-1, &g.d, &err) == 0, "vk_dev_open: %s", err.message);
    ck_assert_msg(vkmm_init(g.d, &g.mm, &err) == 0, "vkmm_init: %s", err.message);
    /* the f32 tiles on every device (test_paths forces the others) */
    ck_assert_msg(vkmm_configure(g.mm, "f32", &err) == 0, "configure: %s", err.message);
    return g;
}

static void gpu_close(struct gpu *g) {
    vkmm_free(g->mm);
    vk_dev_close(g->d);
}

static struct vk_buf *buf_with(struct gpu *g, const void *src, uint64_t n, uint64_t cap) {
    struct strata_error err = {0};
    struct vk_buf *b = vk_buf_alloc(g->d, cap, VK_MEM_DEVICE, &err);
    ck_assert_msg(b != NULL, "vk_buf_alloc: %s", err.message);
    if (src && n)
        ck_assert_msg(vk_buf_upload(g->d, b, 0, src, n, &err) == 0, "upload: %s", err.message);
    return b;
}

static uint64_t round16(uint64_t n) {
    return (n + 15) & ~15ull;
}

/* y (n_out floats) pre-filled with `fill`, one recording of fn, read back. */
static void run_and_read(struct gpu *g, struct vk_buf *yb, float *y, int64_t n_out) {
    struct strata_error err = {0};
    ck_assert_msg(vk_rec_submit(g->d, &err) == 0, "submit: %s", err.message);
    ck_assert_msg(vk_rec_wait(g->d, &err) == 0, "wait: %s", err.message);
    ck_assert_msg(vkmm_status(g->mm, &err) == 0, "vkmm: %s", err.message);
    ck_assert_int_eq(vk_buf_download(g->d, yb, 0, y, sizeof(float) * (size_t)n_out, &err), 0);
}

static void begin(struct gpu *g) {
    struct strata_error err = {0};
    ck_assert_msg(vk_rec_begin(g->d, &err) == 0, "begin: %s", err.message);
}

/* y = W x on the device for W in one piece (or split at `cuts` rows). */
static void gpu_matmul(struct gpu *g, const struct hmat *m, const float *x, int64_t n_tok,
                       const int64_t *cuts, int n_cut, float *y) {
    struct vk_wpiece pc[8];
    struct vk_buf *wb[8];
    int n_piece = n_cut + 1;
    int64_t r = 0;
    for (int i = 0; i < n_piece; i++) {
        int64_t end = i < n_cut ? cuts[i] : m->rows;
        uint64_t bytes = (uint64_t)(end - r) * m->rb;
        /* the piece at an aligned offset past some unrelated bytes */
        uint64_t off = 256;
        wb[i] = buf_with(g, NULL, 0, off + round16(bytes));
        struct strata_error err = {0};
        ck_assert_int_eq(vk_buf_upload(g->d, wb[i], off, m->bytes + (size_t)r * m->rb, bytes, &err),
                         0);
        pc[i] = (struct vk_wpiece){wb[i], off, r, end - r};
        r = end;
    }
    struct vk_wmat w = {m->type, m->rows, m->cols, m->rb, 0, n_piece, pc};
    uint64_t xn = sizeof(float) * (size_t)(n_tok * m->cols),
             yn = sizeof(float) * (size_t)(n_tok * m->rows);
    struct vk_buf *xb = buf_with(g, x, xn, round16(xn)), *yb = buf_with(g, NULL, 0, round16(yn));
    begin(g);
    vkmm_matmul(g->mm, &w, -1, (struct vk_bind){xb, 0, 0}, (struct vk_bind){yb, 0, 0}, n_tok);
    run_and_read(g, yb, y, n_tok * m->rows);
    vk_buf_free(g->d, yb);
    vk_buf_free(g->d, xb);
    for (int i = n_piece - 1; i >= 0; i--)
        vk_buf_free(g->d, wb[i]);
}

static float *rand_vec(int64_t n) {
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        v[i] = frand();
    return v;
}

/* tiled_only: the shapes of the tiled matmul (test_paths), 130 rows (three
 * row tiles, the last of 2) and 100 tokens (a full and a partial token tile)
 * besides 67 x 40 / 64. */
static void check_type_shapes(struct gpu *g, enum quant_type t, bool tiled_only) {
    static const int64_t toks[] = {1, 2, 3, 5, 8, 17, 40, 64, 100};
    static const int64_t rows_list[] = {67, 1, 130};
    for (int ri = 0; ri < 3; ri++) {
        if (ri == 2 && !tiled_only)
            continue;
        struct hmat m;
        hmat_random(&m, t, rows_list[ri], cols_of(t));
        for (size_t ti = 0; ti < sizeof toks / sizeof toks[0]; ti++) {
            int64_t nt = toks[ti];
            const bool tiled = nt > VKMM_MV_CHUNK_TOK;
            if ((ri == 1 && nt != 1 && nt != 40) || (tiled_only && !tiled) ||
                (!tiled_only && nt == 100))
                continue;
            /* the 2-token matvec and 5 tokens in the 8-token one: two types
             * (the code is one for all; each pipeline costs lavapipe ~0.3 s) */
            if ((nt == 2 || nt == 5) && t != QUANT_Q4_0 && t != QUANT_Q6_K)
                continue;
            float *x = rand_vec(nt * m.cols);
            float *xr = ref_x(x, nt, m.cols, tiled);
            float *y = malloc(sizeof(float) * (size_t)(nt * m.rows));
            float *ref = malloc(sizeof(float) * (size_t)(nt * m.rows));
            gpu_matmul(g, &m, x, nt, NULL, 0, y);
            ref_rows(&m, 0, m.rows, xr, nt, ref, m.rows);
            double e = nmse(y, ref, nt * m.rows);
            if (tiled && cur_path != VKMM_PATH_F32) /* the figure the tolerance is set from */
                printf("vk-mm: %s %s rows %lld n_tok %lld: nmse %.3g\n", vkmm_path_name(cur_path),
                       quant_type_name(t), (long long)m.rows, (long long)nt, e);
            ck_assert_msg(e < tol(tiled), "%s %s rows %lld cols %lld n_tok %lld: nmse %.3g",
                          vkmm_path_name(tiled ? cur_path : VKMM_PATH_F32), quant_type_name(t),
                          (long long)m.rows, (long long)m.cols, (long long)nt, e);
            if (tiled && cur_path == VKMM_PATH_DOT) { /* the q8 rounding is all that differs */
                ref_rows(&m, 0, m.rows, x, nt, ref, m.rows);
                e = nmse(y, ref, nt * m.rows);
                ck_assert_msg(e < NMSE_Q8_ROUNDING, "%s n_tok %lld: nmse %.3g against f32 x",
                              quant_type_name(t), (long long)nt, e);
            }
            free(ref);
            free(y);
            free(xr);
            free(x);
        }
        hmat_free(&m);
    }
}

/* ---- every type x n_tok x odd rows ---------------------------------------------- */

START_TEST(test_types) {
    enum quant_type t = types[_i];
    ck_assert(vkmm_supports(t, cols_of(t)));
    struct gpu g = gpu_open();
    struct strata_error err = {0};
    if (t == QUANT_Q4_0) /* every pipeline of one type up front (the others at first use) */
        ck_assert_msg(vkmm_prepare(g.mm, t, &err) == 0, "prepare %s: %s", quant_type_name(t),
                      err.message);
    check_type_shapes(&g, t, false);
    gpu_close(&g);
}
END_TEST

/* ---- the matvec's block path at odd block counts ------------------------------ */

/* Q4_0 / Q8_0 rows of 3 blocks (54 / 102 bytes: rows start at both halves of
 * a word) and 7 rows, so the matrix ends 2 bytes into a word: the block path
 * (mv_body.glsl, MV_BLK) reads the whole last word there, which must stay
 * inside the binding's rounded-up range and give the CPU's result. */
START_TEST(test_odd_blocks) {
    static const enum quant_type ts[] = {QUANT_Q4_0, QUANT_Q8_0};
    static const int64_t toks[] = {1, 8};
    struct gpu g = gpu_open();
    for (int i = 0; i < 2; i++) {
        struct hmat m;
        hmat_random(&m, ts[i], 7, 96);
        ck_assert_int_eq(m.rb % 4, 2);
        for (int k = 0; k < 2; k++) {
            const int64_t nt = toks[k];
            float *x = rand_vec(nt * m.cols);
            float *xr = ref_x(x, nt, m.cols, false);
            float *y = malloc(sizeof(float) * (size_t)(nt * m.rows));
            float *ref = malloc(sizeof(float) * (size_t)(nt * m.rows));
            gpu_matmul(&g, &m, x, nt, NULL, 0, y);
            ref_rows(&m, 0, m.rows, xr, nt, ref, m.rows);
            double e = nmse(y, ref, nt * m.rows);
            ck_assert_msg(e < NMSE_MAX, "%s 7 x 96, n_tok %lld: nmse %.3g", quant_type_name(ts[i]),
                          (long long)nt, e);
            free(ref);
            free(y);
            free(xr);
            free(x);
        }
        hmat_free(&m);
    }
    gpu_close(&g);
}
END_TEST

/* ---- ggml's own blocks ---------------------------------------------------------- */

START_TEST(test_fixtures) {
    static const struct {
        const char *name;
        enum quant_type t;
    } fx[] = {{"F16", QUANT_F16},   {"BF16", QUANT_BF16},    {"Q8_0", QUANT_Q8_0},
              {"Q4_0", QUANT_Q4_0}, {"Q4_K", QUANT_Q4_K},    {"Q5_K", QUANT_Q5_K},
              {"Q6_K", QUANT_Q6_K}, {"IQ4_NL", QUANT_IQ4_NL}};
    struct gpu g = gpu_open();
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        char path[1024], rel[128];
        size_t nq = 0, nd = 0, na = 0;
        snprintf(rel, sizeof rel, "fixtures/quant/%s.quant.bin", fx[i].name);
        uint8_t *q = test_read_file(test_shared_path(path, sizeof path, rel), &nq);
        ck_assert_msg(q != NULL, "missing %s", path);
        snprintf(rel, sizeof rel, "fixtures/quant/%s.dequant.f32", fx[i].name);
        float *dq = test_read_file(test_shared_path(path, sizeof path, rel), &nd);
        ck_assert_msg(dq != NULL, "missing %s", path);
        snprintf(rel, sizeof rel, "fixtures/quant/%s.act.f32", fx[i].name);
        float *act = test_read_file(test_shared_path(path, sizeof path, rel), &na);
        ck_assert_msg(act != NULL, "missing %s", path);
        /* manifest.json: 4 rows of 512 */
        struct hmat m = {fx[i].t, 4, 512, quant_row_size(fx[i].t, 512), q, dq};
        ck_assert_uint_eq(nq, 4 * m.rb);
        ck_assert_uint_eq(nd, 4 * 512 * sizeof(float));
        ck_assert_uint_eq(na, 512 * sizeof(float));
        float y[4], ref[4];
        gpu_matmul(&g, &m, act, 1, NULL, 0, y);
        ref_rows(&m, 0, 4, act, 1, ref, 4);
        for (int r = 0; r < 4; r++) {
            double mag = 0;
            for (int c = 0; c < 512; c++)
                mag += fabs((double)dq[r * 512 + c] * act[c]);
            ck_assert_msg(fabs((double)y[r] - ref[r]) <= 1e-6 * mag, "%s row %d: %.9g vs %.9g",
                          fx[i].name, r, y[r], ref[r]);
        }
        free(act);
        free(dq);
        free(q);
    }
    gpu_close(&g);
}
END_TEST

/* ---- pieces --------------------------------------------------------------------- */

/* The same product with W in one range and in four (pieces of 21, 1, 29 and
 * 16 rows: what the binding limit makes of a big matrix) gives the same
 * bits; tiled_only: the tiled matmul's token count only. */
static void check_pieces(struct gpu *gp, enum quant_type t, bool tiled_only) {
    static const int64_t cuts[] = {21, 22, 51};
    struct gpu g = *gp;
    {
        struct hmat m;
        hmat_random(&m, t, 67, cols_of(t));
        static const int64_t pts[] = {1, 17, 40};
        for (int ti = tiled_only ? 2 : 0; ti < 3; ti++) {
            int64_t nt = pts[ti];
            float *x = rand_vec(nt * m.cols);
            float *y1 = malloc(sizeof(float) * (size_t)(nt * m.rows));
            float *y4 = malloc(sizeof(float) * (size_t)(nt * m.rows));
            gpu_matmul(&g, &m, x, nt, NULL, 0, y1);
            gpu_matmul(&g, &m, x, nt, cuts, 3, y4);
            /* a row's sum never depends on the piece that holds it */
            ck_assert_msg(memcmp(y1, y4, sizeof(float) * (size_t)(nt * m.rows)) == 0,
                          "%s n_tok %lld: pieces differ", quant_type_name(t), (long long)nt);
            free(y4);
            free(y1);
            free(x);
        }
        hmat_free(&m);
    }
}

START_TEST(test_pieces) {
    static const enum quant_type tt[] = {QUANT_Q4_0, QUANT_Q6_K, QUANT_MXFP4, QUANT_F32};
    struct gpu g = gpu_open();
    for (int i = 0; i < 4; i++)
        check_pieces(&g, tt[i], false);
    gpu_close(&g);
}
END_TEST

/* ---- experts -------------------------------------------------------------------- */

#define N_EXP 5
#define EXP_ROWS 19

/* The stack of m (N_EXP * EXP_ROWS rows) on the device, in one piece or in
 * two (experts 0-1, 2-4) in separate buffers. */
struct dstack {
    struct vk_buf *b[2];
    struct vk_wpiece pc[2];
    struct vk_wmat w;
};

static void stack_upload(struct gpu *g, const struct hmat *m, bool split, struct dstack *s) {
    memset(s, 0, sizeof *s);
    int n = split ? 2 : 1;
    int64_t cut = split ? 2 * EXP_ROWS : m->rows;
    for (int i = 0; i < n; i++) {
        int64_t r0 = i ? cut : 0, nr = i ? m->rows - cut : cut;
        uint64_t bytes = (uint64_t)nr * m->rb;
        s->b[i] = buf_with(g, m->bytes + (size_t)r0 * m->rb, bytes, round16(bytes));
        s->pc[i] = (struct vk_wpiece){s->b[i], 0, r0, nr};
    }
    s->w = (struct vk_wmat){m->type, m->rows, m->cols, m->rb, N_EXP, n, s->pc};
}

static void stack_free(struct gpu *g, struct dstack *s) {
    vk_buf_free(g->d, s->b[1]);
    vk_buf_free(g->d, s->b[0]);
}

#define SENTINEL 12345.0f

/* matmul_id over `sel` (n_tok x k, ids may be bad) against per-expert
 * references; picks with a bad id keep the sentinel. Returns y (owned). */
static float *check_id(struct gpu *g, const struct hmat *m, const struct dstack *s,
                       const int32_t *sel, int k, int64_t n_tok, bool per_pick) {
    int64_t np = n_tok * k, nx = per_pick ? np : n_tok;
    const bool tiled = n_tok > VKMM_MV_MAX_TOK;
    float *x = rand_vec(nx * m->cols), *xq = ref_x(x, nx, m->cols, tiled);
    float *y = malloc(sizeof(float) * (size_t)(np * EXP_ROWS));
    for (int64_t i = 0; i < np * EXP_ROWS; i++)
        y[i] = SENTINEL;
    uint64_t xn = sizeof(float) * (size_t)(nx * m->cols),
             yn = sizeof(float) * (size_t)(np * EXP_ROWS);
    struct vk_buf *xb = buf_with(g, x, xn, round16(xn)), *yb = buf_with(g, y, yn, round16(yn));
    struct vk_buf *sb = buf_with(g, sel, sizeof(int32_t) * (size_t)np, round16(4 * (uint64_t)np));
    begin(g);
    vkmm_matmul_id(g->mm, &s->w, (struct vk_bind){xb, 0, 0}, per_pick, (struct vk_bind){sb, 0, 0},
                   k, n_tok, (struct vk_bind){yb, 0, 0});
    run_and_read(g, yb, y, np * EXP_ROWS);
    float ref[EXP_ROWS];
    double esum = 0, ssum = 0; /* the whole call's squared error and sum */
    for (int64_t pi = 0; pi < np; pi++) {
        int e = sel[pi];
        const float *xr = xq + (per_pick ? pi : pi / k) * m->cols;
        if (e < 0 || e >= N_EXP) {
            for (int r = 0; r < EXP_ROWS; r++)
                ck_assert_float_eq(y[pi * EXP_ROWS + r], SENTINEL);
            continue;
        }
        ref_rows(m, (int64_t)e * EXP_ROWS, EXP_ROWS, xr, 1, ref, EXP_ROWS);
        double err = nmse(y + pi * EXP_ROWS, ref, EXP_ROWS);
        for (int r = 0; r < EXP_ROWS; r++) {
            double dv = (double)y[pi * EXP_ROWS + r] - ref[r];
            esum += dv * dv;
            ssum += (double)ref[r] * ref[r];
        }
        ck_assert_msg(err < tol_pick(tiled), "%s pick %lld (expert %d): nmse %.3g",
                      quant_type_name(m->type), (long long)pi, e, err);
    }
    ck_assert_msg(ssum == 0 || esum / ssum<tol(tiled), "%s: nmse %.3g over the picks",
                                           quant_type_name(m->type), ssum> 0
                      ? esum / ssum
                      : 0.0);
    vk_buf_free(g->d, sb);
    vk_buf_free(g->d, yb);
    vk_buf_free(g->d, xb);
    free(xq);
    free(x);
    return y;
}

static void check_experts(struct gpu *gp, enum quant_type t) {
    struct gpu g = *gp;
    struct hmat m;
    hmat_random(&m, t, N_EXP * EXP_ROWS, cols_of(t));
    struct dstack one, two;
    stack_upload(&g, &m, false, &one);
    stack_upload(&g, &m, true, &two);

    /* 3 tokens x 2 picks, experts repeating across tokens and within one */
    static const int32_t sel[] = {4, 1, 1, 1, 0, 3};
    for (int pp = 0; pp < 2; pp++) {
        float *y1 = check_id(&g, &m, &one, sel, 2, 3, pp);
        float *y2 = check_id(&g, &m, &two, sel, 2, 3, pp);
        free(y2);
        free(y1);
    }
    /* ids outside the stack write nothing; 17 tokens x 1 pick */
    int32_t sel2[17];
    for (int i = 0; i < 17; i++)
        sel2[i] = i % 7 - 1; /* -1 .. 5 */
    free(check_id(&g, &m, &two, sel2, 1, 17, false));
    /* 70 tokens x 2 picks (the tiled form): expert 2 picked 84 times, more
     * than one tile of tokens; both x layouts, both piece splits */
    int32_t sel3[140];
    for (int i = 0; i < 70; i++) {
        sel3[2 * i] = 2;
        sel3[2 * i + 1] = i % N_EXP;
    }
    for (int pp = 0; pp < 2; pp++) {
        float *y1 = check_id(&g, &m, &one, sel3, 2, 70, pp);
        float *y2 = check_id(&g, &m, &two, sel3, 2, 70, pp);
        free(y2);
        free(y1);
    }

    /* one expert of the stack, through vkmm_matmul (matvec and tiled) */
    for (int64_t nt = 3; nt <= 40; nt += 37) {
        for (int e = 0; e < N_EXP; e += 2) {
            float *x = rand_vec(nt * m.cols);
            float y[40 * EXP_ROWS], ref[40 * EXP_ROWS];
            uint64_t xn = sizeof(float) * (size_t)(nt * m.cols);
            struct vk_buf *xb = buf_with(&g, x, xn, round16(xn));
            struct vk_buf *yb = buf_with(&g, NULL, 0, round16(sizeof y));
            begin(&g);
            vkmm_matmul(g.mm, &two.w, e, (struct vk_bind){xb, 0, 0}, (struct vk_bind){yb, 0, 0},
                        nt);
            run_and_read(&g, yb, y, nt * EXP_ROWS);
            const bool tiled = nt > VKMM_MV_CHUNK_TOK;
            float *xq = ref_x(x, nt, m.cols, tiled);
            ref_rows(&m, (int64_t)e * EXP_ROWS, EXP_ROWS, xq, nt, ref, EXP_ROWS);
            double err = nmse(y, ref, nt * EXP_ROWS);
            ck_assert_msg(err < tol(tiled), "%s expert %d n_tok %lld: nmse %.3g",
                          quant_type_name(t), e, (long long)nt, err);
            vk_buf_free(g.d, yb);
            vk_buf_free(g.d, xb);
            free(xq);
            free(x);
        }
    }
    stack_free(&g, &two);
    stack_free(&g, &one);
    hmat_free(&m);
}

START_TEST(test_experts) {
    struct gpu g = gpu_open();
    check_experts(&g, types[_i]);
    gpu_close(&g);
}
END_TEST

/* A second launch shape: 8-lane matvec workgroups of 3 and 5 rows (one lavapipe
 * subgroup: the sum skips shared memory), 32 x 32 matmul tiles, pick lists
 * of 16 (the expert-indexed matmul scans sel in several windows). */
START_TEST(test_tune) {
    static const enum quant_type tt[] = {QUANT_Q4_0, QUANT_Q6_K, QUANT_F16};
    struct gpu g = gpu_open();
    struct strata_error err = {0};
    struct vkmm_tune tu = {.mv_wg = 8,
                           .mv_rows = 3,
                           .mv_rows1 = 5,
                           .mv_unr = 1,
                           .mm_wg = 128,
                           .mm_bm = 32,
                           .mm_bn = 32,
                           .mm_tm = 2,
                           .mm_tn = 4,
                           .mm_lcap = 16};
    ck_assert_msg(vkmm_set_tune(g.mm, &tu, &err) == 0, "%s", err.message);
    for (int i = 0; i < 3; i++) {
        check_type_shapes(&g, tt[i], false);
        check_experts(&g, tt[i]);
    }
    /* once pipelines exist the shape is fixed */
    ck_assert_int_eq(vkmm_set_tune(g.mm, &tu, &err), STRATA_E_INVALID);
    gpu_close(&g);
}
END_TEST

/* The matvec shape through the path spec (vkmm_configure "PATH,mv=WGxR1xR",
 * gpu-bench's knob): applied as given, results still the CPU's (the block
 * path with 2 rows, the 8-element path with 1), and malformed shapes refused. */
START_TEST(test_mv_spec) {
    struct strata_error err = {0};
    struct gpu g = gpu_open();
    ck_assert_msg(vkmm_configure(g.mm, "f32,mv=64x2x1", &err) == 0, "configure: %s", err.message);
    ck_assert_uint_eq(g.mm->tune.mv_wg, 64);
    ck_assert_uint_eq(g.mm->tune.mv_rows1, 2);
    ck_assert_uint_eq(g.mm->tune.mv_rows, 1);
    ck_assert_uint_eq(g.mm->tune.path[QUANT_Q4_0], VKMM_PATH_F32);
    check_type_shapes(&g, QUANT_Q4_0, false);
    check_type_shapes(&g, QUANT_Q8_0, false);
    check_experts(&g, QUANT_Q4_0);
    gpu_close(&g);
    /* two and three blocks a lane at once on the block path (10 blocks a
     * row: 64 lanes leave most idle, 4 lanes take 3, 3 and 3 + 1 past the
     * end), the experts' too */
    g = gpu_open();
    ck_assert_msg(vkmm_configure(g.mm, "f32,mv=64x2x1:u2", &err) == 0, "configure: %s",
                  err.message);
    ck_assert_uint_eq(g.mm->tune.mv_unr, 2);
    check_type_shapes(&g, QUANT_Q4_0, false);
    check_type_shapes(&g, QUANT_Q8_0, false);
    check_experts(&g, QUANT_Q8_0);
    gpu_close(&g);
    g = gpu_open();
    ck_assert_msg(vkmm_configure(g.mm, "mv=4x2x1:u3", &err) == 0, "configure: %s", err.message);
    check_type_shapes(&g, QUANT_Q4_0, false);
    gpu_close(&g);
    static const char *bad[] = {"mv=64",      "auto,mv=64x0", "auto,mv=64x2x9", "mv=64x2y",
                                "f32,mv=",    "mv=2000x2",    "mv=x2",          "mv=64x2:u0",
                                "mv=64x2:u5", "mv=64x2:soa2", "mv=64x2:",       "mv=64x2:w"};
    g = gpu_open();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(vkmm_configure(g.mm, bad[i], &err) == STRATA_E_CONFIG, "%s accepted", bad[i]);
    ck_assert_msg(vkmm_configure(g.mm, "mv=8x1", &err) == 0, "mv=8x1: %s", err.message);
    ck_assert_uint_eq(g.mm->tune.mv_wg, 8);
    gpu_close(&g);
}
END_TEST

/* ---- fused gate + up + SwiGLU ------------------------------------------------------ */

static struct vk_wmat upload_split(struct gpu *g, const struct hmat *m, int64_t n_expert,
                                   int64_t cut, struct vk_wpiece pc[2], struct vk_buf *b[2]) {
    int n = cut > 0 ? 2 : 1;
    b[1] = NULL;
    for (int i = 0; i < n; i++) {
        int64_t r0 = i ? cut : 0, nr = n == 1 ? m->rows : i ? m->rows - cut : cut;
        uint64_t bytes = (uint64_t)nr * m->rb;
        b[i] = buf_with(g, m->bytes + (size_t)r0 * m->rb, bytes, round16(bytes));
        pc[i] = (struct vk_wpiece){b[i], 0, r0, nr};
    }
    return (struct vk_wmat){m->type, m->rows, m->cols, m->rb, n_expert, n, pc};
}

static float silu_ref(double g) {
    return (float)(g / (1.0 + exp(-g)));
}

static void check_glu(struct gpu *gp, enum quant_type t) {
    struct gpu g = *gp;
    struct hmat gm, um;
    hmat_random(&gm, t, N_EXP * EXP_ROWS, cols_of(t));
    hmat_random(&um, t, N_EXP * EXP_ROWS, cols_of(t));
    struct vk_wpiece gpc[2], upc[2];
    struct vk_buf *gb[2], *ub[2];
    /* gate in one range, up in two (cut after 2 experts): the dispatches
     * follow the overlaps */
    struct vk_wmat gw = upload_split(&g, &gm, 0, 0, gpc, gb);
    struct vk_wmat uw = upload_split(&g, &um, 0, 2 * EXP_ROWS, upc, ub);
    const int64_t rows = gm.rows, er = EXP_ROWS;
    for (int64_t nt = 1; nt <= 40; nt += 39) { /* the matvec, the tiled matmul */
        float *x = rand_vec(nt * gm.cols);
        float *y = malloc(sizeof(float) * (size_t)(nt * rows));
        float *rg = malloc(sizeof(float) * (size_t)(nt * rows));
        float *ru = malloc(sizeof(float) * (size_t)(nt * rows));
        uint64_t xn = sizeof(float) * (size_t)(nt * gm.cols);
        struct vk_buf *xb = buf_with(&g, x, xn, round16(xn));
        struct vk_buf *yb = buf_with(&g, NULL, 0, round16(sizeof(float) * (uint64_t)(nt * rows)));
        begin(&g);
        vkmm_matmul_glu(g.mm, &gw, &uw, -1, (struct vk_bind){xb, 0, 0}, (struct vk_bind){yb, 0, 0},
                        nt);
        run_and_read(&g, yb, y, nt * rows);
        const bool tiled = nt > VKMM_MV_CHUNK_TOK;
        float *xq = ref_x(x, nt, gm.cols, tiled);
        ref_rows(&gm, 0, rows, xq, nt, rg, rows);
        ref_rows(&um, 0, rows, xq, nt, ru, rows);
        free(xq);
        for (int64_t i = 0; i < nt * rows; i++)
            rg[i] = silu_ref(rg[i]) * ru[i];
        double e = nmse(y, rg, nt * rows);
        ck_assert_msg(e < tol(tiled), "%s glu n_tok %lld: nmse %.3g", quant_type_name(t),
                      (long long)nt, e);
        vk_buf_free(g.d, yb);
        vk_buf_free(g.d, xb);
        free(ru);
        free(rg);
        free(y);
        free(x);
    }
    /* the same matrices as stacks of N_EXP experts, expert-indexed */
    gw.n_expert = uw.n_expert = N_EXP;
    for (int64_t nt = 3; nt <= 20; nt += 17) { /* the matvec, the tiled matmul */
        const int k = 2;
        int64_t np = nt * k;
        int32_t sel[40];
        for (int64_t i = 0; i < np; i++)
            sel[i] = (int32_t)((i * 3 + i / 5) % N_EXP);
        float *x = rand_vec(nt * gm.cols);
        float *y = malloc(sizeof(float) * (size_t)(np * er));
        uint64_t xn = sizeof(float) * (size_t)(nt * gm.cols);
        struct vk_buf *xb = buf_with(&g, x, xn, round16(xn));
        struct vk_buf *yb = buf_with(&g, NULL, 0, round16(sizeof(float) * (uint64_t)(np * er)));
        struct vk_buf *sb =
            buf_with(&g, sel, sizeof(int32_t) * (size_t)np, round16(4 * (uint64_t)np));
        begin(&g);
        vkmm_matmul_id_glu(g.mm, &gw, &uw, (struct vk_bind){xb, 0, 0}, false,
                           (struct vk_bind){sb, 0, 0}, k, nt, (struct vk_bind){yb, 0, 0});
        run_and_read(&g, yb, y, np * er);
        const bool tiled = nt > VKMM_MV_MAX_TOK;
        float *xq = ref_x(x, nt, gm.cols, tiled);
        float rg[EXP_ROWS], ru[EXP_ROWS];
        const bool coop = tiled && cur_path == VKMM_PATH_COOP;
        double esum = 0, ssum = 0;
        for (int64_t pi = 0; pi < np; pi++) {
            const float *xr = xq + (pi / k) * gm.cols;
            ref_rows(&gm, sel[pi] * er, er, xr, 1, rg, er);
            ref_rows(&um, sel[pi] * er, er, xr, 1, ru, er);
            for (int r = 0; r < EXP_ROWS; r++) {
                rg[r] = silu_ref(rg[r]) * ru[r];
                const double dv = (double)y[pi * er + r] - rg[r];
                esum += dv * dv;
                ssum += (double)rg[r] * rg[r];
            }
            double e = nmse(y + pi * er, rg, er);
            ck_assert_msg(e < (coop ? NMSE_COOP_PICK : tol_pick(tiled)),
                          "%s glu id n_tok %lld pick %lld: nmse %.3g", quant_type_name(t),
                          (long long)nt, (long long)pi, e);
        }
        const double ecall = ssum > 0 ? esum / ssum : 0.0;
        if (coop)
            printf("vk-mm: coopmat %s glu id n_tok %lld: nmse %.3g over the picks\n",
                   quant_type_name(t), (long long)nt, ecall);
        ck_assert_msg(ecall < tol(tiled), "%s glu id n_tok %lld: nmse %.3g over the picks",
                      quant_type_name(t), (long long)nt, ecall);
        free(xq);
        vk_buf_free(g.d, sb);
        vk_buf_free(g.d, yb);
        vk_buf_free(g.d, xb);
        free(y);
        free(x);
    }
    /* gate and up of different types: latched, nothing recorded */
    struct hmat om;
    hmat_random(&om, t == QUANT_Q8_0 ? QUANT_Q4_0 : QUANT_Q8_0, 4, 256);
    struct vk_wpiece opc[2];
    struct vk_buf *ob[2];
    struct vk_wmat ow = upload_split(&g, &om, 0, 0, opc, ob);
    struct strata_error err = {0};
    begin(&g);
    vkmm_matmul_glu(g.mm, &gw, &ow, -1, (struct vk_bind){ob[0], 0, 0},
                    (struct vk_bind){ob[0], 0, 0}, 1);
    vkmm_matmul_glu(g.mm, &gw, NULL, -1, (struct vk_bind){ob[0], 0, 0},
                    (struct vk_bind){ob[0], 0, 0}, 1);
    ck_assert_int_eq(vk_rec_submit(g.d, &err), 0);
    ck_assert_int_eq(vk_rec_wait(g.d, &err), 0);
    ck_assert_int_eq(vkmm_status(g.mm, &err), STRATA_E_INVALID);
    vk_buf_free(g.d, ob[0]);
    hmat_free(&om);
    vk_buf_free(g.d, ub[1]);
    vk_buf_free(g.d, ub[0]);
    vk_buf_free(g.d, gb[0]);
    hmat_free(&um);
    hmat_free(&gm);
}

START_TEST(test_glu) {
    struct gpu g = gpu_open();
    check_glu(&g, types[_i]);
    gpu_close(&g);
}
END_TEST

/* ---- the integer-dot and cooperative-matrix paths ------------------------------------ */

/* Why `path` cannot run here (a device without the feature), or NULL. */
static const char *path_missing(const struct vk_dev_info *in, enum vkmm_path path) {
    if (path == VKMM_PATH_DOT && !in->int_dot)
        return "the device lacks VK_KHR_shader_integer_dot_product";
    if (path == VKMM_PATH_COOP && !vkmm_coop_built())
        return "this build's glslc lacked GL_NV_cooperative_matrix";
    if (path == VKMM_PATH_COOP && !in->coopmat_nv)
        return "the device lacks VK_NV_cooperative_matrix with f16 16x16x16 shapes";
    return NULL;
}

/* _i: integer dot for types[0 .. N_TYPES), coopmat for the second round. */
START_TEST(test_paths) {
    const enum vkmm_path path = _i < N_TYPES ? VKMM_PATH_DOT : VKMM_PATH_COOP;
    const enum quant_type t = types[_i % N_TYPES];
    struct gpu g = gpu_open();
    const struct vk_dev_info *in = vk_dev_info(g.d);
    const char *why = path_missing(in, path);
    if (why) {
        if (_i % N_TYPES == 0)
            printf("vk-mm: %s path skipped on %s: %s\n", vkmm_path_name(path), in->name, why);
        gpu_close(&g);
        return;
    }
    if (!vkmm_path_ok(in, t, path)) { /* no integer form: the f32 tiles stay */
        ck_assert(path == VKMM_PATH_DOT && !vkmm_dot_type(t));
        gpu_close(&g);
        return;
    }
    struct strata_error err = {0};
    ck_assert_msg(vkmm_configure(g.mm, path == VKMM_PATH_DOT ? "int-dot" : "coopmat", &err) == 0,
                  "configure: %s", err.message);
    ck_assert_int_eq(vkmm_tiled_kind(&g.mm->tune, t, false),
                     path == VKMM_PATH_DOT ? VKMM_MM_DOT : VKMM_MM_COOP);
    if (path == VKMM_PATH_DOT) { /* the main tile: these small products would take dot_s */
        struct vkmm_tune tu = g.mm->tune;
        tu.dot_s_below = 0;
        ck_assert_msg(vkmm_set_tune(g.mm, &tu, &err) == 0, "%s", err.message);
    }
    ck_assert_msg(vkmm_prepare(g.mm, t, &err) == 0, "prepare: %s", err.message);
    cur_path = path;
    check_type_shapes(&g, t, true);
    check_experts(&g, t);
    check_glu(&g, t);
    check_pieces(&g, t, true);
    cur_path = VKMM_PATH_F32;
    gpu_close(&g);
}
END_TEST

/* Second shapes: integer dot on 32 x 32 tiles of 2 x 4 outputs a lane, one
 * block a K step (128 x 128 of 8 x 4 for a dispatch of 1 or 2 tiles), and,
 * expert-indexed, 16 x 32 tiles of 2 x 8 (32 lanes)
 * with K steps of 3 blocks (a last step part past the columns: 320 = 10
 * blocks, 512 = 16);
 * coopmat on 128 x 64 tiles of 4 x 2 subgroups (K steps of 32) and, expert-
 * indexed, 32 x 32 tiles of 1 x 2 subgroups (K steps of 16); pick lists of
 * 16 / 32 (several windows). */
START_TEST(test_path_tune) {
    static const enum quant_type tt[] = {QUANT_Q4_0, QUANT_Q4_K, QUANT_Q6_K, QUANT_F16};
    struct strata_error err = {0};
    for (int path = VKMM_PATH_DOT; path <= VKMM_PATH_COOP; path++) {
        struct gpu g = gpu_open();
        const struct vk_dev_info *in = vk_dev_info(g.d);
        const char *why = path_missing(in, (enum vkmm_path)path);
        if (why) {
            printf("vk-mm: %s second shape skipped on %s: %s\n",
                   vkmm_path_name((enum vkmm_path)path), in->name, why);
            gpu_close(&g);
            continue;
        }
        if (path == VKMM_PATH_COOP)
            ck_assert_msg(vkmm_configure(g.mm, "coopmat:128x64x32x4/32x32x16x1", &err) == 0,
                          "configure: %s", err.message);
        struct vkmm_tune tu = g.mm->tune;
        if (path == VKMM_PATH_DOT) {
            tu.dot = (struct vkmm_dot_tile){128, 32, 32, 2, 4, 1};
            tu.dot_id = (struct vkmm_dot_tile){32, 16, 32, 2, 8, 3};
            /* dispatches of 1 or 2 tiles take dot_s (rows 1): the NVIDIA
             * tile's 512 lanes of 8 x 4, one block a step to fit 32 KB */
            tu.dot_s = (struct vkmm_dot_tile){512, 128, 128, 8, 4, 1};
            tu.dot_s_below = 3;
            tu.dot_lcap = 16;
            for (int i = 0; i < 4; i++)
                tu.path[tt[i]] = vkmm_dot_type(tt[i]) ? VKMM_PATH_DOT : VKMM_PATH_F32;
        } else {
            tu.coop_lcap = 32;
        }
        ck_assert_msg(vkmm_set_tune(g.mm, &tu, &err) == 0, "%s", err.message);
        for (int i = 0; i < 4; i++) {
            cur_path = (enum vkmm_path)tu.path[tt[i]];
            check_type_shapes(&g, tt[i], true);
            check_experts(&g, tt[i]);
            if (i == 1)
                check_glu(&g, tt[i]);
        }
        cur_path = VKMM_PATH_F32;
        gpu_close(&g);
    }
    /* specs the parser refuses, and a path the device lacks */
    struct gpu g = gpu_open();
    ck_assert_int_eq(vkmm_configure(g.mm, "tensor", &err), STRATA_E_CONFIG);
    ck_assert_int_eq(vkmm_configure(g.mm, "coopmat:64x64", &err), STRATA_E_CONFIG);
    ck_assert_int_eq(vkmm_configure(g.mm, "int-dot:64x64", &err), STRATA_E_CONFIG);
    ck_assert_int_eq(vkmm_configure(g.mm, "int-dot:64x64x4x4x2x", &err), STRATA_E_CONFIG);
    if (!path_missing(vk_dev_info(g.d), VKMM_PATH_DOT)) { /* odd rows a lane: no gate/up split */
        ck_assert_int_eq(vkmm_configure(g.mm, "int-dot:48x64x3x4x2", &err), STRATA_E_INVALID);
        /* 8 x 8 a lane; expert-indexed the NVIDIA tile's 128 x 64 of 8 x 4
         * (one block a K step to fit 32 KB) */
        ck_assert_msg(vkmm_configure(g.mm, "int-dot:128x64x8x8x1/128x64x8x4x1", &err) == 0, "%s",
                      err.message);
        ck_assert_uint_eq(g.mm->tune.dot.wg, 128);
        ck_assert_uint_eq(g.mm->tune.dot_id.wg, 256);
        ck_assert_uint_eq(g.mm->tune.dot_s_below, 0);
        cur_path = VKMM_PATH_DOT;
        check_type_shapes(&g, QUANT_Q8_0, true);
        check_experts(&g, QUANT_Q4_0);
        check_glu(&g, QUANT_Q4_0);
        cur_path = VKMM_PATH_F32;
    }
    if (path_missing(vk_dev_info(g.d), VKMM_PATH_COOP))
        ck_assert_int_eq(vkmm_configure(g.mm, "coopmat", &err), STRATA_E_UNSUPPORTED);
    else /* a tile the subgroup grid cannot cover */
        ck_assert_int_eq(vkmm_configure(g.mm, "coopmat:48x64x32x2", &err), STRATA_E_INVALID);
    gpu_close(&g);
}
END_TEST

/* ---- bad calls -------------------------------------------------------------------- */

START_TEST(test_bad_calls) {
    ck_assert(!vkmm_supports(QUANT_Q4_1, 64));
    ck_assert(!vkmm_supports(QUANT_Q4_0, 48));
    ck_assert(!vkmm_supports(QUANT_Q4_K, 288));
    ck_assert(!vkmm_supports(QUANT_F32, 6));
    ck_assert(vkmm_supports(QUANT_F32, 172));
    struct gpu g = gpu_open();
    struct strata_error err = {0};
    ck_assert_int_eq(vkmm_prepare(g.mm, QUANT_Q4_1, &err), STRATA_E_UNSUPPORTED);
    ck_assert_int_eq(vkmm_status(g.mm, &err), 0);

    struct hmat m;
    hmat_random(&m, QUANT_Q4_0, 8, 64);
    struct vk_buf *wb = buf_with(&g, m.bytes, 8 * m.rb, round16(8 * m.rb));
    float x[64] = {0}, y[8];
    for (int i = 0; i < 8; i++)
        y[i] = SENTINEL;
    struct vk_buf *xb = buf_with(&g, x, sizeof x, sizeof x), *yb = buf_with(&g, y, sizeof y, 32);
    struct vk_bind xv = {xb, 0, 0}, yv = {yb, 0, 0};
    struct vk_wpiece half = {wb, 0, 0, 4}, all = {wb, 0, 0, 8}, odd = {wb, 4, 0, 8};
    struct vk_wmat bad[] = {
        {QUANT_Q4_1, 8, 64, quant_row_size(QUANT_Q4_1, 64), 0, 1, &all}, /* no kernel */
        {QUANT_Q4_0, 8, 64, m.rb, 0, 1, &half},                          /* 4 of 8 rows */
        {QUANT_Q4_0, 8, 64, m.rb + 2, 0, 1, &all},                       /* wrong row size */
        {QUANT_Q4_0, 8, 64, m.rb, 3, 1, &all},                           /* 8 rows, 3 experts */
        {QUANT_Q4_0, 8, 64, m.rb, 0, 1, &odd},                           /* unaligned offset */
        {QUANT_Q4_0, 8, 64, m.rb, 0, 0, &all},                           /* no piece */
    };
    static const int codes[] = {STRATA_E_UNSUPPORTED, STRATA_E_INVALID, STRATA_E_INVALID,
                                STRATA_E_INVALID,     STRATA_E_INVALID, STRATA_E_INVALID};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (i == 4 && vk_dev_info(g.d)->min_storage_align <= 4)
            continue; /* a 4-byte offset is aligned there */
        ck_assert_int_eq(vk_rec_begin(g.d, &err), 0);
        vkmm_matmul(g.mm, &bad[i], -1, xv, yv, 1);
        vkmm_matmul_id(g.mm, &bad[i], xv, false, xv, 1, 1, yv);
        ck_assert_int_eq(vk_rec_submit(g.d, &err), 0);
        ck_assert_int_eq(vk_rec_wait(g.d, &err), 0);
        ck_assert_int_eq(vkmm_status(g.mm, &err), codes[i]);
        ck_assert(strstr(err.message, "vkmm") != NULL);
        ck_assert_int_eq(vkmm_status(g.mm, &err), 0); /* cleared */
    }
    /* a good matrix with bad arguments: expert past the end, zero tokens */
    struct vk_wmat good = {QUANT_Q4_0, 8, 64, m.rb, 2, 1, &all};
    ck_assert_int_eq(vk_rec_begin(g.d, &err), 0);
    vkmm_matmul(g.mm, &good, 2, xv, yv, 1);
    vkmm_matmul(g.mm, &good, -1, xv, yv, 0);
    vkmm_matmul_id(g.mm, &good, xv, false, xv, 0, 1, yv);
    ck_assert_int_eq(vk_rec_submit(g.d, &err), 0);
    ck_assert_int_eq(vk_rec_wait(g.d, &err), 0);
    ck_assert_int_eq(vkmm_status(g.mm, &err), STRATA_E_INVALID);
    /* nothing was recorded: y still holds the sentinel */
    float back[8];
    ck_assert_int_eq(vk_buf_download(g.d, yb, 0, back, sizeof back, &err), 0);
    for (int i = 0; i < 8; i++)
        ck_assert_float_eq(back[i], SENTINEL);
    vk_buf_free(g.d, yb);
    vk_buf_free(g.d, xb);
    vk_buf_free(g.d, wb);
    hmat_free(&m);
    gpu_close(&g);
}
END_TEST

TCase *vkmm_fuse_tcase(void); /* tests/gpu/test-vk-mm-fuse.c */
TCase *vkmm_coop_tcase(void); /* tests/gpu/test-vk-mm-coop.c */
TCase *vkmm_q8_tcase(void);   /* tests/gpu/test-vk-mm-q8.c */

static Suite *vk_mm_suite(void) {
    Suite *s = suite_create("vk-mm");
    TCase *tc_types = tcase_create("types"), *tc_experts = tcase_create("experts");
    TCase *tc_glu = tcase_create("glu"), *tc_misc = tcase_create("misc");
    TCase *tc_paths = tcase_create("paths");
    tcase_add_loop_test(tc_paths, test_paths, 0, 2 * N_TYPES);
    tcase_add_test(tc_paths, test_path_tune);
    tcase_add_loop_test(tc_types, test_types, 0, N_TYPES);
    tcase_add_loop_test(tc_experts, test_experts, 0, N_TYPES);
    tcase_add_loop_test(tc_glu, test_glu, 0, N_TYPES);
    tcase_add_test(tc_misc, test_fixtures);
    tcase_add_test(tc_misc, test_odd_blocks);
    tcase_add_test(tc_misc, test_mv_spec);
    tcase_add_test(tc_misc, test_pieces);
    tcase_add_test(tc_misc, test_tune);
    tcase_add_test(tc_misc, test_bad_calls);
    TCase *all[] = {tc_types,          tc_experts,        tc_glu,         tc_misc, tc_paths,
                    vkmm_fuse_tcase(), vkmm_coop_tcase(), vkmm_q8_tcase()};
    for (int i = 0; i < 8; i++) {
        tcase_set_timeout(all[i], 300);
        suite_add_tcase(s, all[i]);
    }
    return s;
}

/* Exit 77 (skipped) only when no Vulkan device exists at all. */
int main(void) {
    if (vk_dev_count() == 0) {
        printf("RESULT vk-mm: no Vulkan device: skipped\n");
        return 77;
    }
    SRunner *sr = srunner_create(vk_mm_suite());
    srunner_run_all(sr, CK_NORMAL);
    int n_run = srunner_ntests_run(sr), n_fail = srunner_ntests_failed(sr);
    srunner_free(sr);
    printf("RESULT vk-mm: %d passed, %d failed\n", n_run - n_fail, n_fail);
    return n_fail ? 1 : 0;
}
