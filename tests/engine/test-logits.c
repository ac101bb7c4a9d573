/* tests/engine/test-logits.c: logits of the fast path against reference paths.
 *
 * For tiny synthesized models (engine/synth.h: llama 256 x 2 layers, and a
 * qwen3moe for MXFP4 experts) at every fast-path recipe, the logits at one
 * fixed position (15 prompt tokens prefilled in one batch, then one decode
 * step; the decode step's logits are compared) must be:
 *
 *  1. SIMD vs scalar: within TOL_ISA of the same model run with
 *     kernels_isa_force(KERNELS_ISA_REF) (both paths quantize activations
 *     the same way), and within TOL_SIMD of the AVX2 path when the CPU has
 *     more.
 *  2. Quantized vs dequantized: within the recipe's TOL_DEQUANT of the same
 *     weights dequantized to F32 (strata gguf quantize ... f32), run on the
 *     F32 path. The difference is the activation quantization (Q8_0 blocks
 *     of 32, or Q8_K blocks of 256 for K-quants) that the quantized path
 *     applies before every matmul, as ggml does.
 *
 * Error measure: max_i |a_i - b_i| / max_i |b_i| over the n_vocab logits
 * ("relative max error"); the argmax must also agree unless the reference's
 * top-2 gap is below the error seen.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/kernels.h"
#include "engine/kv.h"
#include "engine/model.h"
#include "engine/synth.h"
#include "tests/harness.h"

/* Named tolerances (relative max error, see above), measured on this box
 * (Xeon with AVX-512 VNNI, build-f2 ASan debug, 2025-11-30):
 * - SIMD vs SIMD (AVX2 vs AVX-512 VNNI): <= 3.1e-7 for every recipe (0 for
 *   most): TOL_SIMD.
 * - SIMD vs scalar REF: up to 7.0e-3 (q8_0), 5.0e-3 (mxfp4), 4.9e-3 (q6_k),
 *   2.7e-4 (f16), <= 1e-6 for f32/bf16/q4_0/q4_k_m, although one matmul of
 *   the same shapes agrees to 2.5e-7 (REF vs VNNI, checked by hand with
 *   kernels_matmul on random 1024x256 / 256x512 matrices, n_tok 1..16).
 *   Not explained yet (reported to the kernels owner); TOL_ISA is set above
 *   the measurement so the test still catches a broken SIMD kernel (errors
 *   of order 1).
 * - quantized vs dequantized F32: <= 1.03e-2 (q4_k_m), 8.1e-3 (q4_0),
 *   8.3e-3 (q6_k), 7.0e-3 (mxfp4), 6.3e-3 (q8_0). */
#define TOL_SIMD 1e-5
#define TOL_ISA 2e-2
#define TOL_DEQUANT_Q8 2e-2   /* q8_0, mxfp4 (Q8_0 activations) */
#define TOL_DEQUANT_KQ 3e-2   /* q4_k_m, q6_k (Q8_K activations) */
#define TOL_DEQUANT_Q4_0 3e-2 /* q4_0 */

#define N_PROMPT 15

struct mcase {
    const char *recipe;
    bool moe;
    double tol_dequant; /* 0: no dequant comparison (float recipes) */
};

static const struct mcase cases[] = {
    {"f32", false, 0},
    {"f16", false, 0},
    {"bf16", false, 0},
    {"q8_0", false, TOL_DEQUANT_Q8},
    {"q4_0", false, TOL_DEQUANT_Q4_0},
    {"q4_k_m", false, TOL_DEQUANT_KQ},
    {"q6_k", false, TOL_DEQUANT_KQ},
    {"mxfp4", true, TOL_DEQUANT_Q8},
};
#define N_CASES ((int)(sizeof(cases) / sizeof(cases[0])))

static void model_path(char *buf, size_t cap, const char *tag) {
    snprintf(buf, cap, "/tmp/strata-test-logits-%d-%s.gguf", (int)getpid(), tag);
}

static void synth(const struct mcase *c, const char *path) {
    struct synth_params p;
    synth_params_default(&p);
    struct strata_error err = {0};
    snprintf(p.arch, sizeof p.arch, "%s", c->moe ? "qwen3moe" : "llama");
    p.n_embd = 256;
    p.n_layer = 2;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.head_dim = 64;
    p.n_ff = 512;
    p.n_vocab = 512;
    p.n_ctx = 64;
    if (c->moe) {
        p.n_expert = 8;
        p.n_expert_used = 2;
        p.n_ff_exp = 256;
    }
    snprintf(p.recipe, sizeof p.recipe, "%s", c->recipe);
    p.seed = 11;
    p.n_threads = 1;
    ck_assert_msg(synth_write(&p, path, NULL, &err) == 0, "synth %s: %s", c->recipe, err.message);
}

/* Logits (n_vocab) after N_PROMPT tokens in one batch plus one decode step. */
static float *logits_at(const char *path, enum kernels_isa isa, int *n_vocab) {
    struct strata_error err = {0};
    kernels_init();
    kernels_isa_force(isa);
    struct model_params mp = model_params_default();
    struct model *m = model_load(path, &mp, &err);
    ck_assert_msg(m != NULL, "%s: %s", path, err.message);
    struct kv_cache *kv = model_kv_init(m, 1, 64, &err);
    ck_assert_msg(kv != NULL, "%s", err.message);
    int nv = model_n_vocab(m);
    float *logits = malloc((size_t)nv * sizeof(float));
    struct model_batch_entry e[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++)
        e[i] = (struct model_batch_entry){0, i, (i * 37 + 5) % nv, false};
    struct model_batch b = {e, N_PROMPT};
    ck_assert_msg(model_forward(m, kv, &b, NULL, &err) == 0, "%s", err.message);
    struct model_batch_entry d = {0, N_PROMPT, 123 % nv, true};
    b = (struct model_batch){&d, 1};
    ck_assert_msg(model_forward(m, kv, &b, logits, &err) == 0, "%s", err.message);
    kv_free(kv);
    model_free(m);
    kernels_isa_force(kernels_isa_detected());
    *n_vocab = nv;
    return logits;
}

/* Relative max error of a against reference b; checks argmax agreement. */
static double compare(const char *what, const float *a, const float *b, int n, double tol) {
    double emax = 0, bmax = 0;
    int ia = 0, ib = 0;
    for (int i = 0; i < n; i++) {
        ck_assert_msg(isfinite(a[i]) && isfinite(b[i]), "%s: non-finite logit %d", what, i);
        emax = fmax(emax, fabs((double)a[i] - b[i]));
        bmax = fmax(bmax, fabs((double)b[i]));
        if (a[i] > a[ia])
            ia = i;
        if (b[i] > b[ib])
            ib = i;
    }
    double gap = INFINITY; /* reference's top-1 minus top-2 */
    for (int i = 0; i < n; i++)
        if (i != ib)
            gap = fmin(gap, (double)b[ib] - b[i]);
    double rel = bmax > 0 ? emax / bmax : emax;
    printf("%-28s rel max err %.3e (tol %.1e), max |logit| %.3f, argmax %d/%d\n", what, rel, tol,
           bmax, ia, ib);
    ck_assert_msg(bmax > 0.1, "%s: degenerate logits (max |logit| %g)", what, bmax);
    ck_assert_msg(rel <= tol, "%s: relative max error %.3e > %.1e", what, rel, tol);
    ck_assert_msg(ia == ib || gap <= 2 * emax, "%s: argmax %d != %d (gap %g)", what, ia, ib, gap);
    return rel;
}

START_TEST(test_isa_vs_ref) {
    const struct mcase *c = &cases[_i];
    char path[256], what[64];
    model_path(path, sizeof path, c->recipe);
    synth(c, path);
    int nv = 0, nv2 = 0;
    float *fast = logits_at(path, kernels_isa_detected(), &nv);
    float *ref = logits_at(path, KERNELS_ISA_REF, &nv2);
    ck_assert_int_eq(nv, nv2);
    snprintf(what, sizeof what, "%s %s vs ref", c->recipe,
             kernels_isa_name(kernels_isa_detected()));
    compare(what, fast, ref, nv, TOL_ISA);
    if (kernels_isa_detected() > KERNELS_ISA_AVX2) {
        float *avx2 = logits_at(path, KERNELS_ISA_AVX2, &nv2);
        snprintf(what, sizeof what, "%s %s vs avx2", c->recipe,
                 kernels_isa_name(kernels_isa_detected()));
        compare(what, fast, avx2, nv, TOL_SIMD);
        free(avx2);
    }
    free(fast);
    free(ref);
    unlink(path);
}
END_TEST

START_TEST(test_quant_vs_dequant) {
    const struct mcase *c = &cases[_i];
    if (c->tol_dequant == 0)
        return;
    char path[256], fpath[256], tag[64], what[64];
    struct strata_error err = {0};
    model_path(path, sizeof path, c->recipe);
    snprintf(tag, sizeof tag, "%s-deq", c->recipe);
    model_path(fpath, sizeof fpath, tag);
    synth(c, path);
    ck_assert_msg(synth_quantize_file(path, fpath, "f32", 1, NULL, &err) == 0, "%s", err.message);
    int nv = 0, nv2 = 0;
    float *q = logits_at(path, kernels_isa_detected(), &nv);
    float *f = logits_at(fpath, kernels_isa_detected(), &nv2);
    ck_assert_int_eq(nv, nv2);
    snprintf(what, sizeof what, "%s vs dequantized f32", c->recipe);
    compare(what, q, f, nv, c->tol_dequant);
    free(q);
    free(f);
    unlink(path);
    unlink(fpath);
}
END_TEST

static Suite *logits_suite(void) {
    Suite *s = suite_create("logits");
    TCase *tc = tcase_create("logits");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_isa_vs_ref, 0, N_CASES);
    tcase_add_loop_test(tc, test_quant_vs_dequant, 0, N_CASES);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("logits", logits_suite)
