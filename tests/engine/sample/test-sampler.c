/* tests/engine/sample/test-sampler.c: the sampler and the stop matcher on hand-made
 * logits and text. */
#include <math.h>

#include "engine/sample/sampler.h"
#include "tests/harness.h"

static struct sampler *mk(struct sampler_params p, int n_vocab) {
    struct strata_error err = {0};
    struct sampler *s = sampler_init(&p, n_vocab, &err);
    ck_assert_msg(s != NULL, "%s", err.message);
    return s;
}

static int32_t draw(struct sampler *s, const float *logits) {
    struct sampler_result r;
    struct strata_error err = {0};
    ck_assert_int_eq(sampler_sample(s, logits, &r, &err), 0);
    return r.token;
}

START_TEST(greedy_argmax_and_ties) {
    struct sampler_params p = sampler_params_default();
    p.temperature = 0;
    struct sampler *s = mk(p, 5);
    float l[5] = {0.1f, 2.0f, -1.0f, 2.0f, NAN};
    ck_assert_int_eq(draw(s, l), 1); /* tie 1 vs 3: lowest id; NaN ignored */
    float l2[5] = {0, 0, 0, 0, 9};
    ck_assert_int_eq(draw(s, l2), 4);
    sampler_free(s);
}
END_TEST

START_TEST(logprobs_are_log_softmax) {
    struct sampler_params p = sampler_params_default();
    p.temperature = 0;
    p.n_top_logprobs = 3;
    struct sampler *s = mk(p, 4);
    float l[4] = {1.0f, 3.0f, 2.0f, 0.0f};
    double z = exp(1.0) + exp(3.0) + exp(2.0) + exp(0.0);
    struct sampler_result r;
    ck_assert_int_eq(sampler_sample(s, l, &r, NULL), 0);
    ck_assert_int_eq(r.token, 1);
    ck_assert_double_eq_tol(r.logprob, 3.0 - log(z), 1e-5);
    ck_assert_int_eq(r.n_top, 3);
    ck_assert_int_eq(r.top[0].token, 1);
    ck_assert_int_eq(r.top[1].token, 2);
    ck_assert_int_eq(r.top[2].token, 0);
    ck_assert_double_eq_tol(r.top[1].logprob, 2.0 - log(z), 1e-5);
    ck_assert_double_eq_tol(r.top[2].logprob, 1.0 - log(z), 1e-5);
    sampler_free(s);
    /* logprobs do not depend on temperature */
    p.temperature = 0.3f;
    p.seed = 7;
    s = mk(p, 4);
    ck_assert_int_eq(sampler_sample(s, l, &r, NULL), 0);
    ck_assert_double_eq_tol(r.top[0].logprob, 3.0 - log(z), 1e-5);
    ck_assert_double_eq_tol(r.logprob, l[r.token] - log(z), 1e-5);
    sampler_free(s);
}
END_TEST

START_TEST(seed_determinism) {
    struct sampler_params p = sampler_params_default();
    float l[16];
    for (int i = 0; i < 16; i++)
        l[i] = 0.0f;
    p.seed = 1234;
    struct sampler *a = mk(p, 16), *b = mk(p, 16);
    p.seed = 1235;
    struct sampler *c = mk(p, 16);
    int same_ab = 0, same_ac = 0;
    for (int i = 0; i < 64; i++) {
        int32_t x = draw(a, l), y = draw(b, l), z = draw(c, l);
        same_ab += x == y;
        same_ac += x == z;
    }
    ck_assert_int_eq(same_ab, 64);
    ck_assert_int_lt(same_ac, 20); /* uniform over 16: ~4 expected */
    sampler_reset(c, 1234);
    sampler_reset(a, 1234);
    for (int i = 0; i < 16; i++)
        ck_assert_int_eq(draw(a, l), draw(c, l));
    sampler_free(a);
    sampler_free(b);
    sampler_free(c);
}
END_TEST

START_TEST(logprob_off_same_picks) {
    /* want_logprob = false only skips the log-sum-exp: the same picks (greedy
     * and seeded draws), logprob NAN; top_logprobs still force it on. */
    float l[64];
    for (int i = 0; i < 64; i++)
        l[i] = (float)((i * 37) % 64) * 0.05f;
    for (int greedy = 0; greedy < 2; greedy++) {
        struct sampler_params p = sampler_params_default();
        p.temperature = greedy ? 0.0f : 0.9f;
        p.seed = 99;
        struct sampler *on = mk(p, 64);
        p.want_logprob = false;
        struct sampler *off = mk(p, 64);
        for (int i = 0; i < 32; i++) {
            struct sampler_result ra, rb;
            ck_assert_int_eq(sampler_sample(on, l, &ra, NULL), 0);
            ck_assert_int_eq(sampler_sample(off, l, &rb, NULL), 0);
            ck_assert_int_eq(ra.token, rb.token);
            ck_assert(isfinite(ra.logprob) && ra.logprob <= 0.0f);
            ck_assert(isnan(rb.logprob));
            ck_assert_int_eq(rb.n_top, 0);
        }
        sampler_free(on);
        sampler_free(off);
        p.n_top_logprobs = 2;
        struct sampler *top = mk(p, 64);
        struct sampler_result rt;
        ck_assert_int_eq(sampler_sample(top, l, &rt, NULL), 0);
        ck_assert(isfinite(rt.logprob));
        ck_assert_int_eq(rt.n_top, 2);
        sampler_free(top);
    }
}
END_TEST

START_TEST(distribution_matches_softmax) {
    struct sampler_params p = sampler_params_default();
    p.seed = 99;
    float l[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    struct sampler *s = mk(p, 3);
    int hist[3] = {0};
    const int n = 20000;
    for (int i = 0; i < n; i++)
        hist[draw(s, l)]++;
    ck_assert_double_eq_tol(hist[0] / (double)n, 0.5, 0.02);
    ck_assert_double_eq_tol(hist[1] / (double)n, 0.3, 0.02);
    ck_assert_double_eq_tol(hist[2] / (double)n, 0.2, 0.02);
    sampler_free(s);
    /* temperature 0.5 squares the odds: p ~ (.25, .09, .04) / .38 */
    p.temperature = 0.5f;
    s = mk(p, 3);
    hist[0] = hist[1] = hist[2] = 0;
    for (int i = 0; i < n; i++)
        hist[draw(s, l)]++;
    ck_assert_double_eq_tol(hist[0] / (double)n, 0.25 / 0.38, 0.02);
    ck_assert_double_eq_tol(hist[2] / (double)n, 0.04 / 0.38, 0.02);
    sampler_free(s);
}
END_TEST

START_TEST(truncation_top_k_top_p_min_p) {
    float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    struct sampler_params p = sampler_params_default();
    p.temperature = 5.0f; /* flattens: truncation must do the work */
    p.seed = 3;
    struct {
        int top_k;
        float top_p, min_p;
        int allowed; /* tokens < allowed may appear, and each of them does */
    } cases[] = {{1, 1, 0, 1},     {2, 1, 0, 2},    {0, 0.6f, 0, 2}, {0, 0.5f, 0, 1},
                 {0, 0.85f, 0, 3}, {0, 1, 0.5f, 2}, {0, 1, 0.2f, 3}, {3, 0.6f, 0, 2}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        p.top_k = cases[c].top_k;
        p.top_p = cases[c].top_p;
        p.min_p = cases[c].min_p;
        struct sampler *s = mk(p, 4);
        int seen[4] = {0};
        for (int i = 0; i < 2000; i++)
            seen[draw(s, l)]++;
        for (int t = 0; t < 4; t++) {
            if (t < cases[c].allowed)
                ck_assert_msg(seen[t] > 0, "case %zu token %d never drawn", c, t);
            else
                ck_assert_msg(seen[t] == 0, "case %zu token %d drawn", c, t);
        }
        sampler_free(s);
    }
}
END_TEST

START_TEST(logit_bias) {
    struct sampler_params p = sampler_params_default();
    p.temperature = 0;
    struct sampler_bias b[2] = {{0, -100.0f}, {3, 5.0f}};
    p.bias = b;
    p.n_bias = 2;
    struct sampler *s = mk(p, 4);
    float l[4] = {4.0f, 1.0f, 0.0f, 0.0f};
    ck_assert_int_eq(draw(s, l), 3);
    sampler_free(s);
    b[1].token = 4; /* out of range */
    struct strata_error err = {0};
    ck_assert_ptr_null(sampler_init(&p, 4, &err));
    ck_assert_int_eq(err.code, STRATA_E_RANGE);
}
END_TEST

START_TEST(penalties) {
    float l[3] = {2.0f, 1.5f, -1.0f};
    struct sampler_params p = sampler_params_default();
    p.temperature = 0;
    p.repeat_penalty = 2.0f; /* 2.0 -> 1.0 < 1.5 */
    struct sampler *s = mk(p, 3);
    ck_assert_int_eq(draw(s, l), 0);
    sampler_accept(s, 0);
    ck_assert_int_eq(draw(s, l), 1);
    sampler_free(s);

    p.repeat_penalty = 1.0f;
    p.frequency_penalty = 0.3f; /* one occurrence: 1.7 > 1.5; two: 1.4 < 1.5 */
    p.penalty_last_n = 2;
    s = mk(p, 3);
    sampler_accept(s, 0);
    ck_assert_int_eq(draw(s, l), 0);
    sampler_accept(s, 0);
    ck_assert_int_eq(draw(s, l), 1);
    sampler_accept(s, 2); /* window of 2: one 0 left */
    ck_assert_int_eq(draw(s, l), 0);
    sampler_free(s);

    p.frequency_penalty = 0;
    p.presence_penalty = 0.6f;
    p.n_top_logprobs = 1;
    s = mk(p, 3);
    sampler_accept(s, 0);
    sampler_accept(s, 0);
    struct sampler_result r;
    ck_assert_int_eq(sampler_sample(s, l, &r, NULL), 0);
    ck_assert_int_eq(r.token, 1); /* 2.0 - 0.6 = 1.4 */
    double z = exp(1.4) + exp(1.5) + exp(-1.0);
    ck_assert_double_eq_tol(r.logprob, 1.5 - log(z), 1e-5); /* penalised distribution */
    sampler_free(s);
}
END_TEST

START_TEST(all_masked_is_an_error) {
    struct sampler_params p = sampler_params_default();
    struct sampler *s = mk(p, 2);
    float l[2] = {-INFINITY, NAN};
    struct sampler_result r;
    struct strata_error err = {0};
    ck_assert_int_eq(sampler_sample(s, l, &r, &err), STRATA_E_INVALID);
    sampler_free(s);
    p.n_top_logprobs = 21;
    ck_assert_ptr_null(sampler_init(&p, 2, NULL));
}
END_TEST

/* Feeds pieces; returns everything released, sets *hit. */
static void feed_all(struct stop_matcher *m, const char *const *pieces, int n, char *acc,
                     bool *hit) {
    acc[0] = '\0';
    *hit = false;
    for (int i = 0; i < n && !*hit; i++) {
        size_t len;
        const char *o = stop_matcher_feed(m, pieces[i], strlen(pieces[i]), &len, hit);
        ck_assert_ptr_nonnull(o);
        strncat(acc, o, len);
    }
    if (!*hit) {
        size_t len;
        const char *o = stop_matcher_flush(m, &len);
        strncat(acc, o, len);
    }
}

START_TEST(stop_across_tokens) {
    const char *stops[] = {"END", "\n\n", ""};
    struct stop_matcher *m = stop_matcher_init(stops, 3, NULL);
    ck_assert_ptr_nonnull(m);
    size_t len;
    bool hit;
    const char *o = stop_matcher_feed(m, "Hello E", 7, &len, &hit);
    ck_assert(!hit);
    ck_assert_int_eq(len, 6); /* "E" held back */
    ck_assert(memcmp(o, "Hello ", 6) == 0);
    o = stop_matcher_feed(m, "N", 1, &len, &hit);
    ck_assert_int_eq(len, 0);
    ck_assert_int_eq(stop_matcher_pending(m), 2);
    o = stop_matcher_feed(m, "x", 1, &len, &hit); /* "ENx" cannot start a stop */
    ck_assert(!hit);
    ck_assert_int_eq(len, 3);
    ck_assert(memcmp(o, "ENx", 3) == 0);
    o = stop_matcher_feed(m, " fooEN", 6, &len, &hit);
    ck_assert_int_eq(len, 4);
    o = stop_matcher_feed(m, "Dbar", 4, &len, &hit);
    ck_assert(hit);
    ck_assert_int_eq(len, 0);
    o = stop_matcher_feed(m, "more", 4, &len, &hit);
    ck_assert_int_eq(len, 0);
    stop_matcher_free(m);

    char acc[256];
    const char *p1[] = {"a\n", "b\n", "\nc"};
    m = stop_matcher_init(stops, 2, NULL);
    feed_all(m, p1, 3, acc, &hit);
    ck_assert(hit);
    ck_assert_str_eq(acc, "a\nb");
    stop_matcher_free(m);

    const char *p2[] = {"no st", "op E", "N"};
    m = stop_matcher_init(stops, 2, NULL);
    feed_all(m, p2, 3, acc, &hit);
    ck_assert(!hit);
    ck_assert_str_eq(acc, "no stop EN"); /* flushed at the end */
    stop_matcher_free(m);

    /* earliest of two stops in one piece wins */
    const char *p3[] = {"x\n\nyEND"};
    m = stop_matcher_init(stops, 2, NULL);
    feed_all(m, p3, 1, acc, &hit);
    ck_assert(hit);
    ck_assert_str_eq(acc, "x");
    stop_matcher_free(m);

    /* UTF-8: a stop starting with a multibyte code point holds whole code points */
    const char *s2[] = {"\xc3\xa9t\xc3\xa9"}; /* "été" */
    m = stop_matcher_init(s2, 1, NULL);
    o = stop_matcher_feed(m, "caf\xc3\xa9", 5, &len, &hit);
    ck_assert_int_eq(len, 3);
    o = stop_matcher_feed(m, "!", 1, &len, &hit);
    ck_assert_int_eq(len, 3);
    ck_assert(memcmp(o, "\xc3\xa9!", 3) == 0);
    stop_matcher_free(m);

    /* limits */
    char big[SAMPLER_MAX_STOP_LEN + 2];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    const char *s3[] = {big};
    struct strata_error err = {0};
    ck_assert_ptr_null(stop_matcher_init(s3, 1, &err));
    ck_assert_int_eq(err.code, STRATA_E_RANGE);
    ck_assert_ptr_null(stop_matcher_init(stops, SAMPLER_MAX_STOPS + 1, NULL));
}
END_TEST

/* The first generated token is EOS: the session flushes a matcher that was
 * never fed (nothing pending, no buffer yet). This passed NULL with length 0
 * to memcpy/memmove, undefined behaviour that UBSan reports. */
START_TEST(stop_flush_before_any_feed) {
    const char *stops[] = {"END"};
    size_t len = 7;
    struct stop_matcher *m = stop_matcher_init(stops, 1, NULL);
    ck_assert_ptr_nonnull(m);
    const char *o = stop_matcher_flush(m, &len);
    ck_assert_ptr_nonnull(o);
    ck_assert_uint_eq(len, 0);
    ck_assert_str_eq(o, "");
    stop_matcher_free(m);
    m = stop_matcher_init(NULL, 0, NULL); /* no stop strings at all */
    ck_assert_ptr_nonnull(m);
    o = stop_matcher_flush(m, &len);
    ck_assert_ptr_nonnull(o);
    ck_assert_uint_eq(len, 0);
    stop_matcher_free(m);
}
END_TEST

static Suite *sampler_suite(void) {
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, greedy_argmax_and_ties);
    tcase_add_test(tc, logprobs_are_log_softmax);
    tcase_add_test(tc, seed_determinism);
    tcase_add_test(tc, logprob_off_same_picks);
    tcase_add_test(tc, distribution_matches_softmax);
    tcase_add_test(tc, truncation_top_k_top_p_min_p);
    tcase_add_test(tc, logit_bias);
    tcase_add_test(tc, penalties);
    tcase_add_test(tc, all_masked_is_an_error);
    tcase_add_test(tc, stop_across_tokens);
    tcase_add_test(tc, stop_flush_before_any_feed);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("sampler", sampler_suite)
