/* tests/gpu/test-vk-ops.c: the non-matrix Vulkan ops (gpu/vk-ops.h) against
 * the CPU ops on random inputs, on whatever Vulkan device exists (lavapipe
 * in CI): embed for every gathered type (bit-exact with quant_dequantize_row,
 * a matrix in two pieces), copy_rows, rmsnorm, softmax, the elementwise ops,
 * rope (both pairings, freq factors, YaRN, far positions), kv_write
 * (bit-exact f16 rows at kv.c's addresses, both part layouts, a pool in
 * four pieces), attention (decode split-K with the merge in its last workgroup, and prefill,
 * sequences of different lengths crossing blocks, GQA, head_dim_k !=
 * head_dim_v), moe_route, argmax and sampling (the same picks as
 * engine/sample/sampler.c for the same uniform). CPU ops whose path
 * follows the ISA are checked on every ISA the host runs. Exit 77 only when
 * no Vulkan device exists. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/rng.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/ops.h"
#include "engine/kv/kv.h"
#include "engine/quant/quant.h"
#include "engine/sample/sampler.h"
#include "gpu/vk-ops.h"
#include "tests/harness.h"

static struct vk_dev *dev;
static struct vkops *ops;

static void setup(void) {
    struct strata_error err = {0};
    ck_assert_msg(vk_dev_open(-1, &dev, &err) == 0, "vk_dev_open: %s", err.message);
    ck_assert_msg(vkops_init(dev, &ops, &err) == 0, "vkops_init: %s", err.message);
}

static void teardown(void) {
    vkops_free(ops);
    vk_dev_close(dev);
}

/* A device buffer holding n bytes of src (n rounded up to words; src NULL:
 * zeros). */
static struct vk_buf *buf_of(const void *src, size_t n) {
    struct strata_error err = {0};
    const size_t cap = n < 4 ? 4 : (n + 3) / 4 * 4;
    struct vk_buf *b = vk_buf_alloc(dev, cap, VK_MEM_DEVICE, &err);
    ck_assert_msg(b, "vk_buf_alloc: %s", err.message);
    if (src && n)
        ck_assert_msg(vk_buf_upload(dev, b, 0, src, n, &err) == 0, "upload: %s", err.message);
    return b;
}

static void buf_get(const struct vk_buf *b, void *dst, size_t n) {
    struct strata_error err = {0};
    ck_assert_msg(vk_buf_download(dev, b, 0, dst, n, &err) == 0, "download: %s", err.message);
}

static struct vk_bind bd(const struct vk_buf *b) {
    return (struct vk_bind){b, 0, 0};
}

static void rec_begin(void) {
    struct strata_error err = {0};
    ck_assert_msg(vk_rec_begin(dev, &err) == 0, "rec_begin: %s", err.message);
}

static void rec_run(void) {
    struct strata_error err = {0};
    ck_assert_msg(vk_rec_submit(dev, &err) == 0, "submit: %s", err.message);
    ck_assert_msg(vk_rec_wait(dev, &err) == 0, "wait: %s", err.message);
}

static struct strata_rng rng;

static float frand(void) { /* [-1, 1) */
    return (float)(strata_rng_uniform(&rng) * 2.0 - 1.0);
}

static float *frand_vec(size_t n, float scale) {
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = frand() * scale;
    return v;
}

/* |a - b| <= tol_abs + tol_rel * |b| for n values, with a message naming what. */
static void check_close(const char *what, const float *a, const float *b, size_t n, float tol_abs,
                        float tol_rel) {
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabsf(a[i] - b[i]) <= tol_abs + tol_rel * fabsf(b[i]),
                      "%s [%zu]: gpu %.9g vs cpu %.9g", what, i, (double)a[i], (double)b[i]);
}

/* ---- gather -------------------------------------------------------------- */

START_TEST(test_embed) {
    strata_rng_seed(&rng, 11);
    const enum quant_type types[] = {QUANT_F32,  QUANT_F16,  QUANT_BF16, QUANT_Q8_0,
                                     QUANT_Q4_0, QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K};
    const int n_rows = 29, split = 13;
    const int32_t ids[] = {0, 28, 13, 12, 5, 29, -1, 13, 27};
    const int n = (int)(sizeof ids / sizeof ids[0]);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const enum quant_type t = types[ti];
        const int64_t n_cols = t == QUANT_F32 || t == QUANT_F16 || t == QUANT_BF16 ? 301 : 512;
        ck_assert(vkops_embed_supports(t, n_cols));
        const size_t rb = quant_row_size(t, n_cols);
        float *x = frand_vec((size_t)n_rows * n_cols, 2.0f);
        uint8_t *q = malloc((size_t)n_rows * rb);
        for (int r = 0; r < n_rows; r++)
            ck_assert_int_eq(quant_quantize_row(t, x + r * n_cols, q + r * rb, n_cols), 0);
        struct vk_buf *p0 = buf_of(q, (size_t)split * rb);
        struct vk_buf *p1 = buf_of(q + (size_t)split * rb, (size_t)(n_rows - split) * rb);
        struct vk_buf *bi = buf_of(ids, sizeof ids);
        struct vk_buf *bo = buf_of(NULL, (size_t)n * n_cols * 4);
        const struct vkops_piece pieces[2] = {{bd(p0), 0, split}, {bd(p1), split, n_rows - split}};
        const struct vkops_rows w = {t, n_rows, n_cols, rb, 2, pieces};
        rec_begin();
        vkops_embed(ops, &w, bd(bi), n, bd(bo));
        rec_run();
        float *got = malloc((size_t)n * n_cols * 4), *want = calloc((size_t)n * n_cols, 4);
        buf_get(bo, got, (size_t)n * n_cols * 4);
        for (int i = 0; i < n; i++)
            if (ids[i] >= 0 && ids[i] < n_rows)
                ck_assert_int_eq(
                    quant_dequantize_row(t, q + ids[i] * rb, want + i * n_cols, n_cols), 0);
        for (int64_t i = 0; i < n * n_cols; i++) /* bit for bit: the same formula */
            ck_assert_msg(memcmp(&got[i], &want[i], 4) == 0, "%s [%ld]: gpu %.9g vs cpu %.9g",
                          quant_type_name(t), (long)i, (double)got[i], (double)want[i]);
        free(got);
        free(want);
        vk_buf_free(dev, bo);
        vk_buf_free(dev, bi);
        vk_buf_free(dev, p1);
        vk_buf_free(dev, p0);
        free(q);
        free(x);
    }
    ck_assert(!vkops_embed_supports(QUANT_Q4_K, 300));
    ck_assert(!vkops_embed_supports(QUANT_IQ2_XXS, 256));
}
END_TEST

START_TEST(test_copy_rows) {
    strata_rng_seed(&rng, 12);
    const int64_t n_cols = 333;
    const int n_src = 9;
    const int32_t ids[] = {8, 0, 3, 3, 7, 9, -2}; /* the last two outside src: zeros */
    float *src = frand_vec((size_t)n_src * n_cols, 1.0f);
    struct vk_buf *bs = buf_of(src, (size_t)n_src * n_cols * 4), *bi = buf_of(ids, sizeof ids);
    struct vk_buf *bo = buf_of(NULL, 7 * n_cols * 4);
    vk_buf_fill(dev, bo, 0, 7 * n_cols * 4, 0x7fc00000u, NULL); /* NaN: every value is written */
    rec_begin();
    vkops_copy_rows(ops, (struct vk_bind){bs, 0, (uint64_t)n_src * n_cols * 4}, bd(bi), 7, n_cols,
                    bd(bo));
    rec_run();
    float *got = malloc(7 * n_cols * 4);
    buf_get(bo, got, 7 * n_cols * 4);
    for (int i = 0; i < 5; i++)
        ck_assert(memcmp(got + i * n_cols, src + ids[i] * n_cols, n_cols * 4) == 0);
    for (int i = 5 * n_cols; i < 7 * n_cols; i++)
        ck_assert(got[i] == 0.0f);
    free(got);
    vk_buf_free(dev, bo);
    vk_buf_free(dev, bi);
    vk_buf_free(dev, bs);
    free(src);
}
END_TEST

/* ---- rows and elementwise ---------------------------------------------- */

START_TEST(test_rmsnorm_softmax) {
    strata_rng_seed(&rng, 13);
    /* vec4 rows (1000, 5000: past the 4096 kept in registers) and the scalar path */
    const int64_t shapes[][2] = {{3, 1000}, {2, 5000}, {5, 37}, {2, 4099}, {1, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t nr = shapes[s][0], nc = shapes[s][1];
        const size_t n = (size_t)(nr * nc);
        float *x = frand_vec(n, 3.0f), *w = frand_vec((size_t)nc, 1.5f);
        float *want = malloc(n * 4), *got = malloc(n * 4);
        struct vk_buf *bx = buf_of(x, n * 4), *bw = buf_of(w, (size_t)nc * 4);
        struct vk_buf *by = buf_of(NULL, n * 4), *bz = buf_of(x, n * 4);
        for (int has_w = 0; has_w < 2; has_w++) {
            rec_begin();
            vkops_rmsnorm(ops, bd(bx), bd(bw), has_w, bd(by), nr, nc, 1e-5f);
            vk_buf_upload(dev, bz, 0, x, n * 4, NULL); /* outside the recording: before it runs */
            rec_run();
            rec_begin();
            vkops_rmsnorm(ops, bd(bz), bd(bw), has_w, bd(bz), nr, nc, 1e-5f); /* y = x */
            rec_run();
            for (int64_t r = 0; r < nr; r++)
                ops_rmsnorm(x + r * nc, has_w ? w : NULL, want + r * nc, nc, 1e-5f);
            buf_get(by, got, n * 4);
            check_close("rmsnorm", got, want, n, 1e-6f, 2e-6f);
            buf_get(bz, got, n * 4);
            check_close("rmsnorm in place", got, want, n, 1e-6f, 2e-6f);
        }
        /* softmax in place */
        vk_buf_upload(dev, bz, 0, x, n * 4, NULL);
        rec_begin();
        vkops_softmax(ops, bd(bz), nr, nc);
        rec_run();
        memcpy(want, x, n * 4);
        for (int64_t r = 0; r < nr; r++)
            ops_softmax(want + r * nc, nc);
        buf_get(bz, got, n * 4);
        check_close("softmax", got, want, n, 1e-8f, 2e-6f);
        vk_buf_free(dev, bz);
        vk_buf_free(dev, by);
        vk_buf_free(dev, bw);
        vk_buf_free(dev, bx);
        free(got);
        free(want);
        free(w);
        free(x);
    }
}
END_TEST

START_TEST(test_eltwise) {
    strata_rng_seed(&rng, 14);
    const int64_t nr = 7, nc = 333;
    const size_t n = (size_t)(nr * nc);
    float *a = frand_vec(n, 4.0f), *b = frand_vec(n, 4.0f), *bias = frand_vec((size_t)nc, 1.0f);
    float *gate = frand_vec((size_t)nr, 6.0f);
    float *want = malloc(n * 4), *got = malloc(n * 4);
    struct vk_buf *ba = buf_of(a, n * 4), *bb = buf_of(b, n * 4), *bbias = buf_of(bias, nc * 4);
    struct vk_buf *bg = buf_of(gate, (size_t)nr * 4), *bo = buf_of(NULL, n * 4);
    /* add */
    rec_begin();
    vkops_add(ops, bd(ba), bd(bb), nr, nc);
    rec_run();
    buf_get(ba, got, n * 4);
    for (size_t i = 0; i < n; i++)
        want[i] = a[i] + b[i];
    ck_assert(memcmp(got, want, n * 4) == 0);
    /* add_bias */
    vk_buf_upload(dev, ba, 0, a, n * 4, NULL);
    rec_begin();
    vkops_add_bias(ops, bd(ba), bd(bbias), nr, nc);
    rec_run();
    buf_get(ba, got, n * 4);
    for (size_t i = 0; i < n; i++)
        want[i] = a[i] + bias[i % nc];
    ck_assert(memcmp(got, want, n * 4) == 0);
    /* add_gated: out += sigmoid(gate[t]) * s */
    vk_buf_upload(dev, ba, 0, a, n * 4, NULL);
    rec_begin();
    vkops_add_gated(ops, bd(ba), bd(bb), bd(bg), nr, nc);
    rec_run();
    buf_get(ba, got, n * 4);
    for (int64_t t = 0; t < nr; t++) {
        const float gs = 1.0f / (1.0f + expf(-gate[t]));
        for (int64_t i = 0; i < nc; i++)
            want[t * nc + i] = a[t * nc + i] + gs * b[t * nc + i];
    }
    check_close("add_gated", got, want, n, 1e-6f, 1e-6f);
    /* swiglu into another tensor and in place (y = g); ops_swiglu per ISA */
    vk_buf_upload(dev, ba, 0, a, n * 4, NULL);
    rec_begin();
    vkops_swiglu(ops, bd(ba), bd(bb), bd(bo), nr, nc);
    vkops_swiglu(ops, bd(ba), bd(bb), bd(ba), nr, nc);
    rec_run();
    const enum kernels_isa saved = kernels_isa_active();
    for (int isa = 0; isa <= (int)kernels_isa_detected(); isa++) {
        kernels_isa_force((enum kernels_isa)isa);
        ops_swiglu(a, b, want, (int64_t)n);
        buf_get(bo, got, n * 4);
        check_close(kernels_isa_name((enum kernels_isa)isa), got, want, n, 1e-6f, 4e-6f);
        buf_get(ba, got, n * 4);
        check_close("swiglu in place", got, want, n, 1e-6f, 4e-6f);
    }
    kernels_isa_force(saved);
    vk_buf_free(dev, bo);
    vk_buf_free(dev, bg);
    vk_buf_free(dev, bbias);
    vk_buf_free(dev, bb);
    vk_buf_free(dev, ba);
    free(got);
    free(want);
    free(gate);
    free(bias);
    free(b);
    free(a);
}
END_TEST

/* ---- rope ------------------------------------------------------------------ */

START_TEST(test_rope) {
    strata_rng_seed(&rng, 15);
    const int n_tok = 6, n_head = 3, hd = 64;
    const int32_t pos[] = {0, 1, 17, 1000, 8191, 30011};
    struct cfg {
        int n_rot, mode;
        float base, fscale, ext, attn;
        int n_ctx_orig, ff;
    } cfgs[] = {
        {64, 0, 10000.0f, 1.0f, 0.0f, 1.0f, 0, 0},     /* llama */
        {32, 2, 1000000.0f, 1.0f, 0.0f, 1.0f, 0, 0},   /* neox, part of the head */
        {64, 0, 500000.0f, 1.0f, 0.0f, 1.0f, 0, 1},    /* llama3 freq factors */
        {64, 2, 10000.0f, 0.25f, 1.0f, 1.0f, 4096, 0}, /* YaRN */
        {48, 0, 10000.0f, 0.5f, 1.0f, 0.9f, 2048, 1},  /* YaRN + factors, n_rot < hd */
    };
    const size_t n = (size_t)n_tok * n_head * hd;
    float *ff = malloc(VKOPS_ROT_MAX / 2 * sizeof *ff);
    for (int i = 0; i < VKOPS_ROT_MAX / 2; i++)
        ff[i] = 1.0f + (float)(i % 7) * 0.75f;
    struct vk_buf *bp = buf_of(pos, sizeof pos), *bff = buf_of(ff, VKOPS_ROT_MAX / 2 * 4);
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        const struct cfg *k = &cfgs[c];
        float *x = frand_vec(n, 1.0f), *want = malloc(n * 4), *got = malloc(n * 4);
        struct vk_buf *bx = buf_of(x, n * 4);
        const struct vkops_rope rc = {k->n_rot, k->mode,       k->base,    k->fscale, k->ext,
                                      k->attn,  k->n_ctx_orig, k->ff != 0, bd(bff)};
        rec_begin();
        vkops_rope(ops, bd(bx), n_tok, n_head, hd, bd(bp), &rc);
        rec_run();
        struct ops_rope_cfg oc = {.n_rot = k->n_rot,
                                  .mode = k->mode,
                                  .freq_base = k->base,
                                  .freq_scale = k->fscale,
                                  .ext_factor = k->ext,
                                  .attn_factor = k->attn,
                                  .freq_factors = k->ff ? ff : NULL};
        ops_rope_yarn_corr_dims(k->n_rot, k->n_ctx_orig, k->base, oc.corr_dims);
        memcpy(want, x, n * 4);
        for (int t = 0; t < n_tok; t++)
            ops_rope(want + (size_t)t * n_head * hd, n_head, hd, pos[t], &oc);
        buf_get(bx, got, n * 4);
        char what[64];
        snprintf(what, sizeof what, "rope config %zu", c);
        /* sin/cos of the same f32 angle: within the builtins' error */
        check_close(what, got, want, n, 2e-6f, 0.0f);
        vk_buf_free(dev, bx);
        free(got);
        free(want);
        free(x);
    }
    vk_buf_free(dev, bff);
    vk_buf_free(dev, bp);
    free(ff);
}
END_TEST

/* ---- routing and sampling ------------------------------------------------ */

/* backend.h's route (engine/cpu/cpu-moe.c's cpu_route_run, row by row). */
static void route_ref(float *p, int ne, int k, bool norm, float scale, int32_t *sel, float *w) {
    ops_softmax(p, ne);
    float sum = 0.0f;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < ne; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++)
                taken |= sel[i] == e;
            if (!taken && (best < 0 || p[e] > p[best]))
                best = e;
        }
        sel[j] = best;
        w[j] = p[best];
        sum += w[j];
    }
    for (int j = 0; j < k; j++) {
        if (norm)
            w[j] /= sum;
        if (scale != 0.0f && scale != 1.0f)
            w[j] *= scale;
    }
}

START_TEST(test_moe_route) {
    strata_rng_seed(&rng, 16);
    /* the last: 1000 experts of 3 distinct logits, top 32: the picks tie
     * across every subgroup (the two-level top k keeps the lower ids) */
    const int cases[][4] = {
        {5, 60, 4, 1}, {3, 128, 8, 0}, {2, 300, 6, 1}, {1, 7, 7, 0}, {2, 1000, 32, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int nt = cases[c][0], ne = cases[c][1], k = cases[c][2];
        const bool norm = cases[c][3];
        const float scale = c == 2 ? 2.5f : 0.0f;
        float *lg = frand_vec((size_t)nt * ne, 3.0f);
        for (int t = 0; t < nt; t++) { /* ties: the lower id goes first */
            lg[t * ne + ne - 1] = lg[t * ne + 1];
            lg[t * ne + ne / 2] = 9.0f;
            lg[t * ne + 2] = 9.0f;
        }
        if (ne == 1000)
            for (int i = 0; i < nt * ne; i++)
                lg[i] = (float)((i * 7919) % 3);
        struct vk_buf *bl = buf_of(lg, (size_t)nt * ne * 4);
        struct vk_buf *bs = buf_of(NULL, (size_t)nt * k * 4),
                      *bw = buf_of(NULL, (size_t)nt * k * 4);
        rec_begin();
        vkops_moe_route(ops, bd(bl), bd(bs), bd(bw), nt, ne, k, norm, scale);
        rec_run();
        float *p = malloc((size_t)nt * ne * 4), *gp = malloc((size_t)nt * ne * 4);
        int32_t *sel = malloc((size_t)nt * k * 4), *gsel = malloc((size_t)nt * k * 4);
        float *w = malloc((size_t)nt * k * 4), *gw = malloc((size_t)nt * k * 4);
        memcpy(p, lg, (size_t)nt * ne * 4);
        for (int t = 0; t < nt; t++)
            route_ref(p + t * ne, ne, k, norm, scale, sel + t * k, w + t * k);
        buf_get(bl, gp, (size_t)nt * ne * 4);
        buf_get(bs, gsel, (size_t)nt * k * 4);
        buf_get(bw, gw, (size_t)nt * k * 4);
        check_close("route probs", gp, p, (size_t)nt * ne, 1e-8f, 2e-6f);
        for (int i = 0; i < nt * k; i++)
            ck_assert_msg(gsel[i] == sel[i], "case %zu pick %d: gpu %d vs cpu %d", c, i, gsel[i],
                          sel[i]);
        check_close("route weights", gw, w, (size_t)nt * k, 1e-8f, 4e-6f);
        free(gw);
        free(w);
        free(gsel);
        free(sel);
        free(gp);
        free(p);
        vk_buf_free(dev, bw);
        vk_buf_free(dev, bs);
        vk_buf_free(dev, bl);
        free(lg);
    }
}
END_TEST

START_TEST(test_argmax) {
    strata_rng_seed(&rng, 17);
    const int nr = 5;
    const int64_t nv = 1003;
    float *lg = frand_vec((size_t)nr * nv, 5.0f);
    lg[1 * nv + 700] = lg[1 * nv + 300] = 7.0f; /* tie: 300 */
    lg[2 * nv + 900] = NAN;                     /* non-finite: never picked */
    lg[2 * nv + 901] = INFINITY;
    lg[2 * nv + 5] = 6.5f;
    for (int64_t i = 0; i < nv; i++) /* nothing finite: -1 */
        lg[3 * nv + i] = i % 2 ? -INFINITY : NAN;
    lg[4 * nv + nv - 1] = 8.0f; /* the last id */
    struct vk_buf *bl = buf_of(lg, (size_t)nr * nv * 4), *bi = buf_of(NULL, nr * 4);
    rec_begin();
    vkops_argmax(ops, bd(bl), nr, nv, bd(bi));
    rec_run();
    int32_t got[5];
    buf_get(bi, got, sizeof got);
    for (int r = 0; r < nr; r++) {
        int32_t best = -1;
        float mx = -INFINITY;
        for (int64_t i = 0; i < nv; i++) {
            const float v = isfinite(lg[r * nv + i]) ? lg[r * nv + i] : -INFINITY;
            if (v > mx) {
                mx = v;
                best = (int32_t)i;
            }
        }
        ck_assert_msg(got[r] == best, "row %d: gpu %d vs cpu %d", r, got[r], best);
    }
    ck_assert_int_eq(got[1], 300);
    ck_assert_int_eq(got[3], -1);
    ck_assert_int_eq(got[4], (int)nv - 1);
    vk_buf_free(dev, bi);
    vk_buf_free(dev, bl);
    free(lg);
    /* a vocabulary of several loads a lane (9001 > 4 x 1024): a tie between
     * ids an iteration apart, and the best in the last partial round */
    const int64_t nw = 9001;
    float *lw = frand_vec((size_t)(2 * nw), 5.0f);
    lw[8000] = lw[5000] = 9.0f;
    lw[nw + 9000] = 9.5f;
    struct vk_buf *bw = buf_of(lw, (size_t)(2 * nw) * 4), *bj = buf_of(NULL, 8);
    rec_begin();
    vkops_argmax(ops, bd(bw), 2, nw, bd(bj));
    rec_run();
    buf_get(bj, got, 8);
    ck_assert_int_eq(got[0], 5000);
    ck_assert_int_eq(got[1], 9000);
    vk_buf_free(dev, bj);
    vk_buf_free(dev, bw);
    free(lw);
}
END_TEST

/* The same picks as sampler.c for the same uniform: each row is one draw
 * with the sampler reseeded, and u the first uniform of that seed. */
START_TEST(test_sample) {
    strata_rng_seed(&rng, 18);
    const int64_t nv = 1003;
    const int n_draw = 24;
    float *lg = frand_vec((size_t)nv, 4.0f);
    lg[10] = lg[20] = lg[30] = 4.5f; /* ties at the top */
    lg[500] = NAN;
    lg[501] = -INFINITY;
    float *rows = malloc((size_t)n_draw * nv * 4), u[24];
    for (int r = 0; r < n_draw; r++)
        memcpy(rows + r * nv, lg, (size_t)nv * 4);
    const struct vkops_sample cases[] = {
        {40, 1.0f, 0.0f, 0.8f}, {50, 0.9f, 0.0f, 1.0f}, {256, 0.95f, 0.05f, 0.7f},
        {1, 1.0f, 0.0f, 1.5f},  {3, 1.0f, 0.0f, 5.0f},  {200, 0.5f, 0.0f, 2.0f},
    };
    struct vk_buf *bl = buf_of(rows, (size_t)n_draw * nv * 4), *bu = buf_of(NULL, sizeof u);
    struct vk_buf *bi = buf_of(NULL, n_draw * 4);
    /* logit sets: random with ties at the top; steps of 1/4 (a few dozen
     * ties at the top_k threshold); 0 or 1 only (~190 ones; top_k 200 and 256
     * reach ~810 zeros at the threshold, more than the radix select gathers:
     * the per-candidate passes decide); 30 finite values, fewer than top_k */
    for (size_t c = 0; c < 4 * (sizeof cases / sizeof cases[0]); c++) {
        const size_t set = c / (sizeof cases / sizeof cases[0]);
        const struct vkops_sample *sp = &cases[c % (sizeof cases / sizeof cases[0])];
        if (set == 3 && sp->top_p >= 1.0f)
            continue; /* sampler.c draws in id order when nothing is cut: see vk-ops.h */
        for (int64_t i = 0; i < nv; i++) {
            const float x = (float)(strata_rng_uniform(&rng) * 8 - 4);
            lg[i] = set == 0 ? lg[i] : set == 1 ? roundf(x * 4) / 4 : set == 2 ? (x > 2.5f) : NAN;
        }
        if (set == 3)
            for (int i = 0; i < 30; i++)
                lg[i * 31] = (float)(strata_rng_uniform(&rng) * 4);
        for (int r = 0; r < n_draw; r++)
            memcpy(rows + r * nv, lg, (size_t)nv * 4);
        vk_buf_upload(dev, bl, 0, rows, (size_t)n_draw * nv * 4, NULL);
        struct sampler_params p = sampler_params_default();
        p.temperature = sp->temperature;
        p.top_k = sp->top_k;
        p.top_p = sp->top_p;
        p.min_p = sp->min_p;
        p.want_logprob = false;
        struct strata_error err = {0};
        struct sampler *s = sampler_init(&p, (int)nv, &err);
        ck_assert_msg(s, "%s", err.message);
        int32_t want[24], got[24];
        for (int r = 0; r < n_draw; r++) {
            const uint64_t seed = 1000 + 37 * (uint64_t)r + c;
            struct strata_rng ur;
            strata_rng_seed(&ur, seed);
            u[r] = (float)strata_rng_uniform(&ur);
            sampler_reset(s, seed);
            struct sampler_result res;
            ck_assert_int_eq(sampler_sample(s, lg, &res, &err), 0);
            want[r] = res.token;
        }
        vk_buf_upload(dev, bu, 0, u, sizeof u, NULL);
        rec_begin();
        vkops_sample(ops, bd(bl), n_draw, nv, sp, bd(bu), bd(bi));
        rec_run();
        buf_get(bi, got, sizeof got);
        for (int r = 0; r < n_draw; r++)
            ck_assert_msg(got[r] == want[r],
                          "set %zu case %zu draw %d (u %.6f): gpu %d vs sampler %d", set, c, r,
                          (double)u[r], got[r], want[r]);
        if (sp->top_k == 1 && set == 0)
            for (int r = 0; r < n_draw; r++)
                ck_assert_int_eq(got[r], 10); /* the lowest id of the tied best */
        sampler_free(s);
    }
    vk_buf_free(dev, bi);
    vk_buf_free(dev, bu);
    vk_buf_free(dev, bl);
    free(rows);
    free(lg);
}
END_TEST

TCase *vkops_attn_tcase(void); /* tests/gpu/test-vk-ops-attn.c */
void vkops_attn_use(struct vk_dev **d, struct vkops **o);

static void setup_attn(void) {
    setup();
    vkops_attn_use(&dev, &ops);
}

static Suite *vk_ops_suite(void) {
    Suite *s = suite_create("vk-ops");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_embed);
    tcase_add_test(tc, test_copy_rows);
    tcase_add_test(tc, test_rmsnorm_softmax);
    tcase_add_test(tc, test_eltwise);
    tcase_add_test(tc, test_rope);
    tcase_add_test(tc, test_moe_route);
    tcase_add_test(tc, test_argmax);
    tcase_add_test(tc, test_sample);
    suite_add_tcase(s, tc);
    TCase *ta = vkops_attn_tcase();
    tcase_add_checked_fixture(ta, setup_attn, teardown);
    suite_add_tcase(s, ta);
    return s;
}

/* Exit 77 (skipped) only when no Vulkan device exists at all. */
int main(void) {
    kernels_init();
    if (vk_dev_count() == 0) {
        printf("RESULT vk-ops: no Vulkan device: skipped\n");
        return 77;
    }
    SRunner *sr = srunner_create(vk_ops_suite());
    srunner_run_all(sr, CK_NORMAL);
    int n_run = srunner_ntests_run(sr), n_fail = srunner_ntests_failed(sr);
    srunner_free(sr);
    printf("RESULT vk-ops: %d passed, %d failed\n", n_run - n_fail, n_fail);
    return n_fail ? 1 : 0;
}
