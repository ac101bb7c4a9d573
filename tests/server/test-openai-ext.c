/* tests/server/test-openai-ext.c: server/openai-ext.c through openai_parse:
 * n and best_of, the /v1/completions prompt forms and echo, the llama.cpp
 * names (each honoured name lands in the request; each refused one is a 400
 * naming it), the unknown-field list, and openai_request_choice. The
 * effects on generated text are checked against the real daemon in
 * tests/peers/api-real.py. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai-ext.h"
#include "tests/harness.h"
#include "server/openai.h"

#define CHAT GEN_ROUTE_CHAT
#define CMPL GEN_ROUTE_COMPLETION
#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

static int parse(enum gen_route route, const char *text, struct openai_request *rq, char *param,
                 struct strata_error *err) {
    json_error_t je;
    json_t *body = json_loads(text, 0, &je);
    ck_assert_msg(body != NULL, "bad test JSON: %s", text);
    struct gen_submit req = {.route = route, .body = body};
    int rc = openai_parse(&req, "m", 512, rq, param, 64, err);
    json_decref(body);
    return rc;
}

static void expect_ok(enum gen_route route, const char *text, struct openai_request *rq) {
    char param[64];
    struct strata_error err = {0};
    int rc = parse(route, text, rq, param, &err);
    ck_assert_msg(rc == 0, "%s: rc %d (%s, param %s)", text, rc, err.message, param);
}

static void expect_err(enum gen_route route, const char *text, int code, const char *want_param) {
    struct openai_request rq;
    char param[64];
    struct strata_error err = {0};
    int rc = parse(route, text, &rq, param, &err);
    ck_assert_msg(rc == code, "%s: rc %d, want %d (%s)", text, rc, code, err.message);
    ck_assert_msg(strcmp(param, want_param) == 0, "%s: param '%s', want '%s'", text, param,
                  want_param);
    ck_assert_msg(strlen(err.message) > 0, "%s: no message", text);
}

START_TEST(n_and_best_of) {
    struct openai_request rq;
    expect_ok(CHAT, "{\"model\":\"m\"," MSG ",\"n\":3}", &rq);
    ck_assert_int_eq(rq.n, 3);
    ck_assert_int_eq(rq.n_prompts, 1);
    openai_request_free(&rq);
    expect_ok(CMPL, "{\"model\":\"m\",\"prompt\":\"a\",\"n\":4,\"best_of\":4}", &rq);
    ck_assert_int_eq(rq.n, 4);
    openai_request_free(&rq);
    expect_ok(CHAT, "{\"model\":\"m\"," MSG "}", &rq);
    ck_assert_int_eq(rq.n, 1);
    ck_assert(rq.cache_prompt);
    ck_assert(!rq.echo && !rq.ignore_eos && rq.unknown == NULL);
    openai_request_free(&rq);
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"n\":0}", STRATA_E_RANGE, "n");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"n\":17}", STRATA_E_RANGE, "n");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"n\":\"2\"}", STRATA_E_INVALID, "n");
    expect_err(CMPL, "{\"model\":\"m\",\"prompt\":\"a\",\"n\":2,\"best_of\":3}",
               STRATA_E_UNSUPPORTED, "best_of");
    expect_err(CMPL, "{\"model\":\"m\",\"prompt\":\"a\",\"best_of\":2}", STRATA_E_UNSUPPORTED,
               "best_of");
    /* 8 prompts x 9 = 72 choices > OPENAI_MAX_CHOICES */
    expect_err(CMPL,
               "{\"model\":\"m\",\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\"],"
               "\"n\":9}",
               STRATA_E_RANGE, "n");
}
END_TEST

START_TEST(prompt_forms) {
    struct openai_request rq;
    expect_ok(CMPL, "{\"model\":\"m\",\"prompt\":\"hello\"}", &rq);
    ck_assert_int_eq(rq.n_prompts, 1);
    ck_assert_str_eq(rq.prompt, "hello");
    ck_assert_ptr_null(rq.prompt_ids);
    openai_request_free(&rq);
    expect_ok(CMPL, "{\"model\":\"m\",\"prompt\":[\"only\"]}", &rq);
    ck_assert_int_eq(rq.n_prompts, 1);
    ck_assert_str_eq(rq.prompt, "only");
    openai_request_free(&rq);
    expect_ok(CMPL, "{\"model\":\"m\",\"prompt\":[1,2,511]}", &rq);
    ck_assert_int_eq(rq.n_prompts, 1);
    ck_assert_ptr_null(rq.prompt);
    ck_assert_int_eq(rq.n_prompt_ids, 3);
    ck_assert_int_eq(rq.prompt_ids[2], 511);
    openai_request_free(&rq);
    expect_ok(CMPL, "{\"model\":\"m\",\"prompt\":[\"a\",[5,6],\"b\"],\"n\":2}", &rq);
    ck_assert_int_eq(rq.n_prompts, 3);
    ck_assert_str_eq(rq.prompts[0].text, "a");
    ck_assert_int_eq(rq.prompts[1].n_ids, 2);
    ck_assert_int_eq(rq.prompts[1].ids[1], 6);
    ck_assert_str_eq(rq.prompts[2].text, "b");
    ck_assert_ptr_null(rq.prompt); /* several prompts: only the children have one */
    openai_request_free(&rq);
    expect_err(CMPL, "{\"model\":\"m\",\"prompt\":[]}", STRATA_E_INVALID, "prompt");
    expect_err(CMPL, "{\"model\":\"m\",\"prompt\":5}", STRATA_E_INVALID, "prompt");
    expect_err(CMPL, "{\"model\":\"m\",\"prompt\":[1,-1]}", STRATA_E_RANGE, "prompt[1]");
    expect_err(CMPL, "{\"model\":\"m\",\"prompt\":[1,2.5]}", STRATA_E_INVALID, "prompt[1]");
    expect_err(CMPL, "{\"model\":\"m\",\"prompt\":[[1,2],[3,4,5,512]]}", STRATA_E_RANGE,
               "prompt[1][3]");
    expect_err(CMPL, "{\"model\":\"m\",\"prompt\":[[1,2],[]]}", STRATA_E_INVALID, "prompt[1]");
    expect_err(CMPL, "{\"model\":\"m\",\"prompt\":[\"a\",{\"x\":1}]}", STRATA_E_INVALID,
               "prompt[1]");
    expect_err(CMPL, "{\"model\":\"m\",\"prompt\":[[1],\"a\",[\"b\"]]}", STRATA_E_INVALID,
               "prompt[2][0]");
}
END_TEST

START_TEST(echo) {
    struct openai_request rq;
    expect_ok(CMPL, "{\"model\":\"m\",\"prompt\":\"a\",\"echo\":true}", &rq);
    ck_assert(rq.echo);
    openai_request_free(&rq);
    expect_err(CMPL, "{\"model\":\"m\",\"prompt\":\"a\",\"echo\":1}", STRATA_E_INVALID, "echo");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"echo\":true}", STRATA_E_UNSUPPORTED, "echo");
    expect_err(CMPL, "{\"model\":\"m\",\"prompt\":\"a\",\"echo\":true,\"logprobs\":0}",
               STRATA_E_UNSUPPORTED, "echo");
    expect_err(CMPL, "{\"model\":\"m\",\"prompt\":\"a\",\"echo\":true,\"n_probs\":2}",
               STRATA_E_UNSUPPORTED, "echo");
    expect_err(CMPL, "{\"model\":\"m\",\"prompt\":\"a\",\"suffix\":\"b\"}", STRATA_E_UNSUPPORTED,
               "suffix");
}
END_TEST

START_TEST(llama_names_honoured) {
    struct openai_request rq;
    expect_ok(CMPL,
              "{\"model\":\"m\",\"prompt\":\"a\",\"n_predict\":7,\"repeat_penalty\":1.3,"
              "\"repeat_last_n\":32,\"top_k\":5,\"min_p\":0.2,\"seed\":9,\"cache_prompt\":false,"
              "\"ignore_eos\":true,\"n_probs\":3}",
              &rq);
    ck_assert_int_eq(rq.max_tokens, 7);
    ck_assert(fabsf(rq.sp.repeat_penalty - 1.3f) < 1e-6f);
    ck_assert_int_eq(rq.sp.penalty_last_n, 32);
    ck_assert_int_eq(rq.sp.top_k, 5);
    ck_assert(fabsf(rq.sp.min_p - 0.2f) < 1e-6f);
    ck_assert(rq.has_seed && rq.sp.seed == 9);
    ck_assert(!rq.cache_prompt);
    ck_assert(rq.ignore_eos);
    ck_assert(rq.logprobs && rq.top_logprobs == 3 && rq.sp.n_top_logprobs == 3);
    ck_assert(rq.sp.want_logprob);
    ck_assert_ptr_null(rq.unknown);
    openai_request_free(&rq);
    /* max_tokens wins over n_predict; -1 = up to the context; repeat_last_n -1 = the context */
    expect_ok(CHAT, "{\"model\":\"m\"," MSG ",\"n_predict\":7,\"max_tokens\":3}", &rq);
    ck_assert_int_eq(rq.max_tokens, 3);
    openai_request_free(&rq);
    expect_ok(CHAT, "{\"model\":\"m\"," MSG ",\"n_predict\":-1,\"repeat_last_n\":-1}", &rq);
    ck_assert_int_eq(rq.max_tokens, -1);
    ck_assert_int_eq(rq.sp.penalty_last_n, -1);
    openai_request_free(&rq);
    /* explicit logprobs win over n_probs */
    expect_ok(CHAT, "{\"model\":\"m\"," MSG ",\"n_probs\":4,\"logprobs\":false}", &rq);
    ck_assert(!rq.logprobs);
    openai_request_free(&rq);
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"n_predict\":0}", STRATA_E_RANGE, "n_predict");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"n_predict\":\"5\"}", STRATA_E_INVALID,
               "n_predict");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"repeat_penalty\":0}", STRATA_E_RANGE,
               "repeat_penalty");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"repeat_last_n\":-2}", STRATA_E_RANGE,
               "repeat_last_n");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"cache_prompt\":1}", STRATA_E_INVALID,
               "cache_prompt");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"ignore_eos\":\"yes\"}", STRATA_E_INVALID,
               "ignore_eos");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"n_probs\":21}", STRATA_E_RANGE, "n_probs");
}
END_TEST

START_TEST(llama_names_refused) {
    /* samplers strata lacks: the off value passes (what llama.cpp's page sends),
     * anything else is refused naming the field */
    static const char *const off[] = {
        "\"mirostat\":0",       "\"typical_p\":1",       "\"tfs_z\":1.0",
        "\"dynatemp_range\":0", "\"xtc_probability\":0", "\"dry_multiplier\":0",
        "\"top_n_sigma\":-1",   "\"penalize_nl\":false", "\"n_keep\":0",
        "\"grammar\":\"\"",     "\"samplers\":[]",       "\"id_slot\":-1",
        "\"mirostat_tau\":5",   "\"dry_base\":1.75",     "\"lora\":[]"};
    static const struct {
        const char *field, *param;
    } on[] = {{"\"mirostat\":2", "mirostat"},
              {"\"typical_p\":0.9", "typical_p"},
              {"\"tfs_z\":0.5", "tfs_z"},
              {"\"dynatemp_range\":0.5", "dynatemp_range"},
              {"\"xtc_probability\":0.5", "xtc_probability"},
              {"\"dry_multiplier\":0.8", "dry_multiplier"},
              {"\"top_n_sigma\":1", "top_n_sigma"},
              {"\"penalize_nl\":true", "penalize_nl"},
              {"\"n_keep\":4", "n_keep"},
              {"\"grammar\":\"root ::= \\\"a\\\"\"", "grammar"},
              {"\"samplers\":[\"top_k\"]", "samplers"},
              {"\"lora\":[{\"id\":0,\"scale\":1}]", "lora"},
              {"\"image_data\":[{\"data\":\"x\"}]", "image_data"},
              {"\"id_slot\":2", "id_slot"},
              {"\"post_sampling_probs\":true", "post_sampling_probs"}};
    char body[256];
    for (size_t i = 0; i < sizeof(off) / sizeof(off[0]); i++) {
        struct openai_request rq;
        snprintf(body, sizeof body, "{\"model\":\"m\"," MSG ",%s}", off[i]);
        expect_ok(CHAT, body, &rq);
        ck_assert_msg(rq.unknown == NULL, "%s counted as unknown", off[i]);
        openai_request_free(&rq);
    }
    for (size_t i = 0; i < sizeof(on) / sizeof(on[0]); i++) {
        snprintf(body, sizeof body, "{\"model\":\"m\",\"prompt\":\"a\",%s}", on[i].field);
        expect_err(CMPL, body, STRATA_E_UNSUPPORTED, on[i].param);
    }
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"mirostat\":\"0\"}", STRATA_E_INVALID, "mirostat");
}
END_TEST

START_TEST(unknown_fields) {
    struct openai_request rq;
    expect_ok(CHAT,
              "{\"model\":\"m\"," MSG ",\"foo\":1,\"temperature\":0.5,\"bar_baz\":null,"
              "\"top_k\":3,\"metadata\":{}}",
              &rq);
    ck_assert_ptr_nonnull(rq.unknown);
    char names[128];
    openai_ext_unknown_list(&rq, names, sizeof names);
    ck_assert_str_eq(names, "foo,bar_baz");
    openai_request_free(&rq);
    /* only the first 32 names are kept; the list is cut, never overrun */
    char body[2048] = "{\"model\":\"m\"," MSG;
    for (int i = 0; i < 40; i++) {
        char f[32];
        snprintf(f, sizeof f, ",\"unknown_%02d\":%d", i, i);
        strcat(body, f);
    }
    strcat(body, "}");
    expect_ok(CHAT, body, &rq);
    ck_assert_int_eq(json_array_size(rq.unknown), 32);
    char small[24];
    openai_ext_unknown_list(&rq, small, sizeof small);
    ck_assert_str_eq(small, "unknown_00,unknown_01");
    openai_request_free(&rq);
}
END_TEST

START_TEST(choice_copies) {
    struct openai_request rq, c;
    struct strata_error err = {0};
    expect_ok(CMPL,
              "{\"model\":\"m\",\"prompt\":[\"a\",[7,8]],\"n\":2,\"seed\":100,\"stop\":[\"x\"],"
              "\"logit_bias\":{\"5\":-100}}",
              &rq);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(openai_request_choice(&rq, i, &c, &err), 0);
        ck_assert_int_eq(c.n, 1);
        ck_assert_int_eq(c.n_prompts, 1);
        ck_assert(c.has_seed && c.sp.seed == 100 + (uint64_t)i);
        if (i / 2 == 0) {
            ck_assert_str_eq(c.prompt, "a");
            ck_assert_ptr_null(c.prompt_ids);
        } else {
            ck_assert_ptr_null(c.prompt);
            ck_assert_int_eq(c.n_prompt_ids, 2);
            ck_assert_int_eq(c.prompt_ids[0], 7);
        }
        ck_assert_int_eq(c.n_stops, 1);
        ck_assert_str_eq(c.stops[0], "x");
        ck_assert_ptr_ne(c.stops[0], rq.stops[0]);
        ck_assert_int_eq(c.sp.n_bias, 1);
        ck_assert_ptr_eq(c.sp.bias, c.bias);
        ck_assert_ptr_ne(c.bias, rq.bias);
        openai_request_free(&c);
    }
    openai_request_free(&rq);
    /* no seed given: the children keep has_seed false (each gets a fresh one) */
    expect_ok(CHAT, "{\"model\":\"m\"," MSG ",\"n\":2}", &rq);
    ck_assert_int_eq(openai_request_choice(&rq, 1, &c, &err), 0);
    ck_assert(!c.has_seed);
    ck_assert_ptr_eq(c.messages, rq.messages);
    openai_request_free(&c);
    openai_request_free(&rq);
}
END_TEST

static Suite *openai_ext_suite(void) {
    Suite *s = suite_create("openai-ext");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, n_and_best_of);
    tcase_add_test(tc, prompt_forms);
    tcase_add_test(tc, echo);
    tcase_add_test(tc, llama_names_honoured);
    tcase_add_test(tc, llama_names_refused);
    tcase_add_test(tc, unknown_fields);
    tcase_add_test(tc, choice_copies);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("openai-ext", openai_ext_suite)
