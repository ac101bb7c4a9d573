/* tests/engine/model/test-embed.c: engine/model/embed.h (pooling, L2 norm)
 * and model_forward_hidden (the final hidden rows), on the real
 * stories260K.gguf.
 *
 * The hidden row is the LM head's input: stories260K's output.weight is
 * F32, so hidden . output^T computed here must give model_forward's logits
 * (within HIDDEN_LOGIT_EPS: the CPU kernels sum in another order). A row
 * does not depend on the other entries of its step (bit-identical), and
 * <arch>.pooling_type is read (absent: -1; out of llama.cpp's 0..4: the
 * load fails). Cross-checked against llama.cpp in tests/peers/embed-llamacpp.mjs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/gguf/gguf.h"
#include "engine/kv/kv.h"
#include "engine/model/embed.h"
#include "engine/model/model.h"
#include "tests/engine/model/model-helper.h"
#include "tests/harness.h"
#include "tools/synth/synth.h"

/* Measured: |hidden . output - logit| = 0 over the 512 logits (largest
 * |logit| 12.9; 2026-12-02, build-asan, Intel Xeon 2-vCPU VM, the ISA the
 * host picks); 1e-4 leaves room for other ISAs' summation orders. */
#define HIDDEN_LOGIT_EPS 1e-4f

static const char *stories(char *buf, size_t cap) {
    return test_shared_path(buf, cap, "models/stories260K.gguf");
}

START_TEST(test_pooling_math) {
    ck_assert(embed_wants(EMBED_POOLING_MEAN, 0, 3) && embed_wants(EMBED_POOLING_MEAN, 2, 3));
    ck_assert(!embed_wants(EMBED_POOLING_MEAN, 3, 3));
    ck_assert(embed_wants(EMBED_POOLING_CLS, 0, 3) && !embed_wants(EMBED_POOLING_CLS, 2, 3));
    ck_assert(embed_wants(EMBED_POOLING_LAST, 2, 3) && !embed_wants(EMBED_POOLING_LAST, 0, 3));
    ck_assert(!embed_wants(EMBED_POOLING_NONE, 0, 1) && !embed_wants(EMBED_POOLING_RANK, 0, 1));
    const float r0[2] = {1, 2}, r1[2] = {3, 4};
    double acc[2] = {0, 0};
    float out[2];
    embed_add(EMBED_POOLING_MEAN, acc, r0, 2);
    embed_add(EMBED_POOLING_MEAN, acc, r1, 2);
    ck_assert_int_eq(embed_finish(EMBED_POOLING_MEAN, acc, 2, 2, out, NULL), 0);
    /* mean (2, 3), unit length: (2, 3) / sqrt(13) */
    ck_assert_float_eq_tol(out[0], 2.0f / sqrtf(13.0f), 1e-7f);
    ck_assert_float_eq_tol(out[1], 3.0f / sqrtf(13.0f), 1e-7f);
    double keep[2] = {0, 0};
    embed_add(EMBED_POOLING_LAST, keep, r0, 2);
    embed_add(EMBED_POOLING_LAST, keep, r1, 2); /* the last row wins */
    ck_assert_int_eq(embed_finish(EMBED_POOLING_LAST, keep, 2, 2, out, NULL), 0);
    ck_assert_float_eq_tol(out[0], 0.6f, 1e-7f);
    ck_assert_float_eq_tol(out[1], 0.8f, 1e-7f);
    double zero[2] = {0, 0};
    ck_assert_int_eq(embed_finish(EMBED_POOLING_CLS, zero, 1, 2, out, NULL), 0);
    ck_assert(out[0] == 0.0f && out[1] == 0.0f); /* no NaN from 0 / 0 */
    struct strata_error err = {0};
    ck_assert_int_eq(embed_finish(EMBED_POOLING_MEAN, acc, 0, 2, out, &err), STRATA_E_INVALID);
    for (int p = 1; p <= 3; p++)
        ck_assert_int_eq(embed_pooling_check(p, NULL), 0);
    ck_assert_int_eq(embed_pooling_check(-1, &err), STRATA_E_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "pooling"));
    ck_assert_int_eq(embed_pooling_check(0, NULL), STRATA_E_UNSUPPORTED);
    ck_assert_int_eq(embed_pooling_check(4, NULL), STRATA_E_UNSUPPORTED);
    ck_assert_str_eq(embed_pooling_name(3), "last");
    ck_assert_str_eq(embed_pooling_name(-1), "unset");
    ck_assert_str_eq(embed_pooling_name(9), "?");
}
END_TEST

/* Runs seq 0's tokens (with an optional second sequence interleaved) and
 * returns its hidden rows (n, n_embd) and the last token's logits. */
static void run(struct model *m, const int32_t *tok, int n, bool other, float *hidden,
                float *logits) {
    struct strata_error err = {0};
    struct kv_cache *kv = model_kv_init(m, 2, 0, &err);
    ck_assert_ptr_nonnull(kv);
    struct model_batch_entry e[32];
    int32_t rows[32];
    int k = 0, nh = 0;
    for (int i = 0; i < n; i++) {
        if (other) /* seq 1 first in each pair: a different position and token */
            e[k++] = (struct model_batch_entry){1, i, (tok[i] * 7 + 3) % 512, true};
        rows[nh++] = k;
        e[k++] = (struct model_batch_entry){0, i, tok[i], i == n - 1};
    }
    float *lg = malloc((size_t)(other ? n + 1 : 1) * 512 * sizeof(float));
    struct model_batch b = {e, k};
    ck_assert_int_eq(model_forward_hidden(m, kv, &b, lg, rows, nh, hidden, &err), 0);
    /* the last output row is seq 0's last token (it comes last in the batch) */
    memcpy(logits, lg + (size_t)(model_batch_n_outputs(&b) - 1) * 512, 512 * sizeof(float));
    free(lg);
    kv_free(kv);
}

START_TEST(test_hidden_is_lm_head_input) {
    char path[512];
    struct strata_error err = {0};
    struct model *m = test_model_load(stories(path, sizeof path), NULL, &err);
    ck_assert_msg(m != NULL, "%s: %s", path, err.message);
    const int E = model_hparams(m)->n_embd;
    ck_assert_int_eq(model_n_vocab(m), 512);
    ck_assert_int_eq(model_hparams(m)->pooling_type, -1);
    const int32_t tok[] = {1, 403, 407, 261, 378, 300};
    const int n = 6;
    float *h = malloc((size_t)n * (size_t)E * sizeof(float));
    float *h2 = malloc((size_t)n * (size_t)E * sizeof(float));
    float lg[512], lg2[512];
    run(m, tok, n, false, h, lg);
    const struct gguf_tensor_info *ow = gguf_find_tensor(model_gguf(m), "output.weight");
    ck_assert(ow && ow->type == 0 /* F32 */ && ow->ne[0] == E && ow->ne[1] == 512);
    const float *w = ow->data;
    float worst = 0, big = 0;
    for (int v = 0; v < 512; v++) {
        big = fmaxf(big, fabsf(lg[v]));
        double d = 0;
        for (int i = 0; i < E; i++)
            d += (double)h[(size_t)(n - 1) * E + i] * w[(size_t)v * E + i];
        worst = fmaxf(worst, fabsf((float)d - lg[v]));
    }
    printf("hidden . output^T vs logits: largest difference %g (largest |logit| %g)\n",
           (double)worst, (double)big);
    ck_assert(big > 1.0f); /* real logits, not a zeroed buffer */
    ck_assert_msg(worst <= HIDDEN_LOGIT_EPS, "hidden . output vs logits: %g", worst);
    /* the same rows with another sequence in every step: bit-identical */
    run(m, tok, n, true, h2, lg2);
    ck_assert(memcmp(h, h2, (size_t)n * (size_t)E * sizeof(float)) == 0);
    ck_assert(memcmp(lg, lg2, sizeof lg) == 0);
    free(h);
    free(h2);
    test_model_free(m);
}
END_TEST

START_TEST(test_hidden_bad_rows) {
    char path[512];
    struct strata_error err = {0};
    struct model *m = test_model_load(stories(path, sizeof path), NULL, &err);
    ck_assert_ptr_nonnull(m);
    struct kv_cache *kv = model_kv_init(m, 1, 0, &err);
    struct model_batch_entry e[2] = {{0, 0, 1, false}, {0, 1, 403, false}};
    struct model_batch b = {e, 2};
    float hid[2 * 64];
    int32_t rows[3] = {0, 2, 1};
    ck_assert_int_eq(model_forward_hidden(m, kv, &b, NULL, rows, 2, hid, &err), STRATA_E_INVALID);
    ck_assert_int_eq(model_forward_hidden(m, kv, &b, NULL, rows, 3, hid, &err), STRATA_E_INVALID);
    ck_assert_int_eq(model_forward_hidden(m, kv, &b, NULL, rows, 1, NULL, &err), STRATA_E_INVALID);
    ck_assert_int_eq(model_forward_hidden(m, kv, &b, NULL, rows, -1, hid, &err), STRATA_E_INVALID);
    ck_assert_int_eq(kv_seq_len(kv, 0), 0); /* validation first: nothing written */
    rows[1] = 1;
    ck_assert_int_eq(model_forward_hidden(m, kv, &b, NULL, rows, 2, hid, &err), 0);
    ck_assert_int_eq(kv_seq_len(kv, 0), 2);
    kv_free(kv);
    test_model_free(m);
}
END_TEST

START_TEST(test_pooling_key) {
    char path[512], tmp[] = "/tmp/strata-test-embed-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(tmp));
    char out[600];
    snprintf(out, sizeof out, "%s/pool.gguf", tmp);
    struct strata_error err = {0};
    for (int p = 0; p <= 4; p++) {
        ck_assert_msg(synth_quantize_file_pooling(stories(path, sizeof path), out, "f32", 1, p,
                                                  NULL, &err) == 0,
                      "%s", err.message);
        struct model *m = test_model_load(out, NULL, &err);
        ck_assert_ptr_nonnull(m);
        ck_assert_int_eq(model_hparams(m)->pooling_type, p);
        test_model_free(m);
    }
    /* out of range: a synthesized file with pooling_type 7 */
    struct synth_params sp;
    synth_params_default(&sp);
    snprintf(sp.recipe, sizeof sp.recipe, "f32");
    sp.pooling = 7;
    ck_assert_int_eq(synth_write(&sp, out, NULL, &err), 0);
    ck_assert_ptr_null(test_model_load(out, NULL, &err));
    ck_assert_int_eq(err.code, STRATA_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.message, "pooling_type"));
    unlink(out);
    rmdir(tmp);
}
END_TEST

static Suite *embed_suite(void) {
    Suite *s = suite_create("embed");
    TCase *tc = tcase_create("embed");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_pooling_math);
    tcase_add_test(tc, test_hidden_is_lm_head_input);
    tcase_add_test(tc, test_hidden_bad_rows);
    tcase_add_test(tc, test_pooling_key);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("embed", embed_suite)
