/* tests/server/test-openai.c: OpenAI request validation and response JSON
 * (server/openai.c, server/openai-json.c) without a model. */
#include "server/openai.h"
#include "tests/harness.h"

/* Parses body text for route; returns the code, fills param. */
static int parse(enum gen_route route, const char *text, struct openai_request *rq, char *param) {
    json_error_t je;
    json_t *body = json_loads(text, 0, &je);
    ck_assert_msg(body != NULL, "bad test JSON: %s", text);
    struct gen_submit req = {.route = route, .body = body};
    struct strata_error err = {0};
    int rc = openai_parse(&req, "m", 512, rq, param, 64, &err);
    json_decref(body);
    return rc;
}

static void expect_err(enum gen_route route, const char *text, int code, const char *param) {
    struct openai_request rq;
    char p[64];
    int rc = parse(route, text, &rq, p);
    ck_assert_msg(rc == code, "%s: rc %d, want %d", text, rc, code);
    ck_assert_msg(strcmp(p, param) == 0, "%s: param '%s', want '%s'", text, p, param);
}

#define CHAT GEN_ROUTE_CHAT
#define CMPL GEN_ROUTE_COMPLETION
#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

START_TEST(valid_chat) {
    struct openai_request rq;
    char p[64];
    ck_assert_int_eq(parse(CHAT,
                           "{\"model\":\"m\"," MSG ",\"temperature\":0.5,\"top_p\":0.9,\"top_k\":7,"
                           "\"min_p\":0.1,\"seed\":-3,\"stop\":[\"a\",\"b\"],\"max_tokens\":9,"
                           "\"logprobs\":true,\"top_logprobs\":4,\"logit_bias\":{\"5\":-100},"
                           "\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                           "\"user\":\"u\",\"unknown_field\":{\"x\":1},\"tools\":[]}",
                           &rq, p),
                     0);
    ck_assert(rq.stream && rq.stream_usage && rq.logprobs);
    ck_assert_int_eq(rq.top_logprobs, 4);
    ck_assert_int_eq(rq.sp.n_top_logprobs, 4);
    ck_assert_int_eq(rq.sp.top_k, 7);
    ck_assert_double_eq_tol(rq.sp.temperature, 0.5, 1e-6);
    ck_assert(rq.has_seed && rq.sp.seed == (uint64_t)-3);
    ck_assert_int_eq(rq.n_stops, 2);
    ck_assert_int_eq(rq.max_tokens, 9);
    ck_assert_int_eq(rq.sp.n_bias, 1);
    ck_assert_int_eq(rq.sp.bias[0].token, 5);
    ck_assert_ptr_nonnull(rq.messages);
    openai_request_free(&rq);
    /* content parts and a content-less assistant message */
    ck_assert_int_eq(parse(CHAT,
                           "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":[{"
                           "\"type\":\"text\",\"text\":\"a\"}]},{\"role\":\"assistant\"},{"
                           "\"role\":\"user\",\"content\":\"x\"}],\"stream\":false,"
                           "\"stream_options\":{\"include_usage\":true}}",
                           &rq, p),
                     0);
    ck_assert(!rq.stream_usage); /* only streams carry a usage chunk */
    openai_request_free(&rq);
}
END_TEST

START_TEST(valid_completion) {
    struct openai_request rq;
    char p[64];
    ck_assert_int_eq(
        parse(CMPL, "{\"model\":\"m\",\"prompt\":[\"abc\"],\"logprobs\":3,\"stop\":\"x\"}", &rq, p),
        0);
    ck_assert_str_eq(rq.prompt, "abc");
    ck_assert(rq.logprobs);
    ck_assert_int_eq(rq.top_logprobs, 3);
    ck_assert_int_eq(rq.max_tokens, -1);
    ck_assert(!rq.has_seed);
    openai_request_free(&rq);
}
END_TEST

/* response_format / json_schema compile into rq.grammar (text: none). */
START_TEST(valid_response_format) {
    struct openai_request rq;
    char p[64];
    const char *ok[] = {
        "{\"model\":\"m\"," MSG ",\"response_format\":{\"type\":\"json_object\"}}",
        "{\"model\":\"m\"," MSG ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{"
        "\"name\":\"n\",\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{"
        "\"type\":\"integer\"}},\"required\":[\"a\"],\"additionalProperties\":false}}}}",
    };
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(parse(CHAT, ok[i], &rq, p), 0);
        ck_assert_ptr_nonnull(rq.grammar);
        openai_request_free(&rq);
    }
    ck_assert_int_eq(
        parse(CMPL, "{\"model\":\"m\",\"prompt\":\"a\",\"json_schema\":{\"type\":\"string\"}}", &rq,
              p),
        0);
    ck_assert_ptr_nonnull(rq.grammar);
    openai_request_free(&rq);
    ck_assert_int_eq(
        parse(CHAT, "{\"model\":\"m\"," MSG ",\"response_format\":{\"type\":\"text\"}}", &rq, p),
        0);
    ck_assert_ptr_null(rq.grammar);
    openai_request_free(&rq);
}
END_TEST

START_TEST(invalid_requests) {
    expect_err(CHAT, "{\"model\":\"other\"," MSG "}", STRATA_E_NOT_FOUND, "model");
    expect_err(CHAT, "{" MSG "}", STRATA_E_INVALID, "model");
    expect_err(CHAT, "{\"model\":\"m\"}", STRATA_E_INVALID, "messages");
    expect_err(CHAT, "{\"model\":\"m\",\"messages\":[]}", STRATA_E_INVALID, "messages");
    expect_err(CHAT, "{\"model\":\"m\",\"messages\":{}}", STRATA_E_INVALID, "messages");
    expect_err(CHAT,
               "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":"
               "\"bot\",\"content\":\"x\"}]}",
               STRATA_E_INVALID, "messages[1].role");
    expect_err(CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}]}", STRATA_E_INVALID,
               "messages[0].content");
    expect_err(CHAT,
               "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_"
               "url\"}]}]}",
               STRATA_E_UNSUPPORTED, "messages[0].content[0].type");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"temperature\":2.5}", STRATA_E_RANGE,
               "temperature");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"temperature\":\"hot\"}", STRATA_E_INVALID,
               "temperature");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"top_p\":1.5}", STRATA_E_RANGE, "top_p");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"presence_penalty\":-3}", STRATA_E_RANGE,
               "presence_penalty");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"frequency_penalty\":3}", STRATA_E_RANGE,
               "frequency_penalty");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"max_tokens\":0}", STRATA_E_RANGE, "max_tokens");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"max_tokens\":1.5}", STRATA_E_INVALID,
               "max_tokens");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"stream\":1}", STRATA_E_INVALID, "stream");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}",
               STRATA_E_RANGE, "stop");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"stop\":[1]}", STRATA_E_INVALID, "stop");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"logit_bias\":{\"512\":1}}", STRATA_E_RANGE,
               "logit_bias");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"logit_bias\":{\"1\":101}}", STRATA_E_RANGE,
               "logit_bias");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"logit_bias\":{\"x\":1}}", STRATA_E_RANGE,
               "logit_bias");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"top_logprobs\":3}", STRATA_E_INVALID,
               "top_logprobs");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"logprobs\":true,\"top_logprobs\":21}",
               STRATA_E_RANGE, "top_logprobs");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"n\":17}", STRATA_E_RANGE, "n");
    /* tools (server/openai-tools.c): each bad field named */
#define FN(x) "{\"type\":\"function\",\"function\":" x "}"
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"tools\":[{\"type\":\"function\"}]}",
               STRATA_E_INVALID, "tools[0].function");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"tools\":{}}", STRATA_E_INVALID, "tools");
    expect_err(CHAT,
               "{\"model\":\"m\"," MSG ",\"tools\":[" FN("{\"name\":\"a\"}") ",{\"type\":\"x\"}]}",
               STRATA_E_INVALID, "tools[1].type");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"tools\":[" FN("{\"name\":\"a b\"}") "]}",
               STRATA_E_INVALID, "tools[0].function.name");
    expect_err(CHAT,
               "{\"model\":\"m\"," MSG
               ",\"tools\":[" FN("{\"name\":\"a\"}") "," FN("{\"name\":\"a\"}") "]}",
               STRATA_E_INVALID, "tools[1].function.name");
    expect_err(CHAT,
               "{\"model\":\"m\"," MSG ",\"tools\":[" FN("{\"name\":\"a\",\"parameters\":[]}") "]}",
               STRATA_E_INVALID, "tools[0].function.parameters");
    expect_err(CHAT,
               "{\"model\":\"m\"," MSG
               ",\"tools\":[" FN("{\"name\":\"a\"}") "],\"tool_choice\":\"maybe\"}",
               STRATA_E_INVALID, "tool_choice");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"tool_choice\":\"auto\"}", STRATA_E_INVALID,
               "tool_choice");
    expect_err(CHAT,
               "{\"model\":\"m\"," MSG
               ",\"tools\":[" FN("{\"name\":\"a\"}") "],\"tool_choice\":{\"type\":\"function\","
                                                     "\"function\":{\"name\":\"b\"}}}",
               STRATA_E_INVALID, "tool_choice.function.name");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"tool_choice\":\"required\"}", STRATA_E_INVALID,
               "tool_choice");
    expect_err(CHAT,
               "{\"model\":\"m\"," MSG
               ",\"tools\":[" FN("{\"name\":\"a\"}") "],\"parallel_tool_calls\":1}",
               STRATA_E_INVALID, "parallel_tool_calls");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"chat_template_kwargs\":[1]}", STRATA_E_INVALID,
               "chat_template_kwargs");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"chat_template_kwargs\":{\"messages\":1}}",
               STRATA_E_INVALID, "chat_template_kwargs.messages");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"reasoning_effort\":\"extreme\"}", STRATA_E_INVALID,
               "reasoning_effort");
#define TC(args)                                                                                   \
    "{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{"  \
    "\"name\":\"a\",\"arguments\":" args "}}]}"
    expect_err(
        CHAT,
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}," TC("\"{bad\"") "]}",
        STRATA_E_INVALID, "messages[1].tool_calls[0].function.arguments");
    expect_err(
        CHAT,
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}," TC("\"[1]\"") "]}",
        STRATA_E_INVALID, "messages[1].tool_calls[0].function.arguments");
    expect_err(CHAT,
               "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}," TC("5") "]}",
               STRATA_E_INVALID, "messages[1].tool_calls[0].function.arguments");
    expect_err(CHAT,
               "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":"
               "\"assistant\",\"tool_calls\":[{\"type\":\"function\"}]}]}",
               STRATA_E_INVALID, "messages[1].tool_calls[0].id");
    expect_err(
        CHAT,
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"q\",\"tool_calls\":[]}]}",
        STRATA_E_INVALID, "messages[0].tool_calls");
    expect_err(CHAT,
               "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":"
               "\"tool\",\"content\":\"r\"}]}",
               STRATA_E_INVALID, "messages[1].tool_call_id");
    expect_err(CHAT,
               "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}," TC(
                   "\"{}\"") ",{\"role\":\"tool\",\"tool_call_id\":\"c2\",\"content\":\"r\"}]}",
               STRATA_E_INVALID, "messages[2].tool_call_id");
    expect_err(CHAT,
               "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"content\":\"x\","
               "\"function_call\":{}}]}",
               STRATA_E_UNSUPPORTED, "messages[0].function_call");
    expect_err(CMPL, "{\"model\":\"m\",\"prompt\":\"a\",\"tools\":[" FN("{\"name\":\"a\"}") "]}",
               STRATA_E_UNSUPPORTED, "tools");
#undef TC
#undef FN
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"response_format\":{\"type\":\"json_schema\"}}",
               STRATA_E_INVALID, "response_format");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"response_format\":{\"type\":\"xml\"}}",
               STRATA_E_UNSUPPORTED, "response_format");
    expect_err(
        CHAT,
        "{\"model\":\"m\"," MSG ",\"response_format\":{\"type\":\"json_schema\","
        "\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"string\",\"pattern\":\"a\"}}}}",
        STRATA_E_UNSUPPORTED, "response_format");
    expect_err(CHAT,
               "{\"model\":\"m\"," MSG ",\"response_format\":{\"type\":\"json_schema\","
               "\"json_schema\":{\"name\":\"x\",\"schema\":{\"$ref\":\"#/$defs/no\"}}}}",
               STRATA_E_INVALID, "response_format");
    expect_err(CMPL, "{\"model\":\"m\",\"prompt\":\"a\",\"json_schema\":{\"type\":\"strin\"}}",
               STRATA_E_INVALID, "json_schema");
    expect_err(CMPL,
               "{\"model\":\"m\",\"prompt\":\"a\",\"json_schema\":{},\"response_format\":{"
               "\"type\":\"json_object\"}}",
               STRATA_E_INVALID, "json_schema");
    expect_err(CHAT, "{\"model\":\"m\"," MSG ",\"user\":5}", STRATA_E_INVALID, "user");
    expect_err(CMPL, "{\"model\":\"m\"}", STRATA_E_INVALID, "prompt");
    expect_err(CMPL, "{\"model\":\"m\",\"prompt\":[\"a\",5]}", STRATA_E_INVALID, "prompt[1]");
    expect_err(CMPL, "{\"model\":\"m\",\"prompt\":[1,512]}", STRATA_E_RANGE, "prompt[1]");
    expect_err(CMPL, "{\"model\":\"m\",\"prompt\":\"a\",\"logprobs\":6}", STRATA_E_RANGE,
               "logprobs");
    expect_err(CMPL, "{\"model\":\"m\",\"prompt\":\"a\",\"echo\":true,\"logprobs\":1}",
               STRATA_E_UNSUPPORTED, "echo");
}
END_TEST

/* Error messages quote user text cut to 40 or 100 bytes; the cut must not
 * split a UTF-8 character, or the message cannot become the JSON error body
 * (the HTTP layer then dropped the connection without a response). */
START_TEST(error_messages_stay_utf8) {
    char a99[100], a39[40];
    memset(a99, 'a', sizeof(a99) - 1);
    a99[99] = '\0';
    memset(a39, 'a', sizeof(a39) - 1);
    a39[39] = '\0';
    char bodies[6][512];
    snprintf(bodies[0], sizeof(bodies[0]), "{\"model\":\"%s\xc3\xa9\"," MSG "}", a99);
    snprintf(bodies[1], sizeof(bodies[1]),
             "{\"model\":\"m\",\"messages\":[{\"role\":\"%s\xc3\xa9\",\"content\":\"x\"}]}", a39);
    snprintf(
        bodies[2], sizeof(bodies[2]),
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"%s\xc3\xa9\"}"
        "]}]}",
        a39);
    snprintf(bodies[3], sizeof(bodies[3]),
             "{\"model\":\"m\"," MSG ",\"response_format\":{\"type\":\"%s\xc3\xa9\"}}", a39);
    snprintf(bodies[4], sizeof(bodies[4]),
             "{\"model\":\"m\"," MSG ",\"logit_bias\":{\"%s\xc3\xa9\":1}}", a39);
    snprintf(bodies[5], sizeof(bodies[5]), "{\"model\":\"%s\xe6\x97\xa5\"," MSG "}", a99);
    for (int i = 0; i < 6; i++) {
        json_t *body = json_loads(bodies[i], 0, NULL);
        ck_assert_msg(body != NULL, "bad test JSON %d", i);
        struct gen_submit req = {.route = CHAT, .body = body};
        struct openai_request rq;
        char p[64];
        struct strata_error err = {0};
        ck_assert_int_lt(openai_parse(&req, "m", 512, &rq, p, sizeof(p), &err), 0);
        json_t *msg = json_string(err.message); /* NULL when not UTF-8 */
        ck_assert_msg(msg != NULL, "case %d: message is not UTF-8: %s", i, err.message);
        ck_assert_msg(strstr(err.message, "aaa'") != NULL, "case %d: %s", i, err.message);
        json_decref(msg);
        json_decref(body);
    }
}
END_TEST

/* A single stop string over the limit names its field like the array form
 * (it got "param": null from the stop matcher later on). */
START_TEST(long_single_stop) {
    char body[2048];
    char big[SAMPLER_MAX_STOP_LEN + 2];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    snprintf(body, sizeof(body), "{\"model\":\"m\"," MSG ",\"stop\":\"%s\"}", big);
    expect_err(CHAT, body, STRATA_E_RANGE, "stop");
    snprintf(body, sizeof(body), "{\"model\":\"m\",\"prompt\":\"x\",\"stop\":\"%s\"}", big);
    expect_err(CMPL, body, STRATA_E_RANGE, "stop");
    big[SAMPLER_MAX_STOP_LEN] = '\0'; /* exactly the limit is fine */
    snprintf(body, sizeof(body), "{\"model\":\"m\"," MSG ",\"stop\":\"%s\"}", big);
    struct openai_request rq;
    char p[64];
    ck_assert_int_eq(parse(CHAT, body, &rq, p), 0);
    ck_assert_int_eq(rq.n_stops, 1);
    openai_request_free(&rq);
}
END_TEST

/* An assistant message without content (absent or null) reaches the chat
 * template as "", as OpenAI allows it; the request body itself is left as
 * it was (it is borrowed). */
START_TEST(assistant_without_content) {
    const char *text = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
                       "{\"role\":\"assistant\"},{\"role\":\"assistant\",\"content\":null},"
                       "{\"role\":\"user\",\"content\":\"again\"}]}";
    json_t *body = json_loads(text, 0, NULL);
    ck_assert_ptr_nonnull(body);
    struct gen_submit req = {.route = CHAT, .body = body};
    struct openai_request rq;
    char p[64];
    struct strata_error err = {0};
    ck_assert_int_eq(openai_parse(&req, "m", 512, &rq, p, sizeof(p), &err), 0);
    ck_assert_int_eq(json_array_size(rq.messages), 4);
    for (int i = 1; i <= 2; i++) {
        json_t *c = json_object_get(json_array_get(rq.messages, (size_t)i), "content");
        ck_assert_msg(json_is_string(c) && !strcmp(json_string_value(c), ""), "message %d", i);
        ck_assert_str_eq(
            json_string_value(json_object_get(json_array_get(rq.messages, (size_t)i), "role")),
            "assistant");
    }
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(rq.messages, 3), "content")),
                     "again");
    /* the caller's body is unchanged */
    json_t *msgs = json_object_get(body, "messages");
    ck_assert_ptr_null(json_object_get(json_array_get(msgs, 1), "content"));
    ck_assert(json_is_null(json_object_get(json_array_get(msgs, 2), "content")));
    openai_request_free(&rq);
    json_decref(body);
}
END_TEST

START_TEST(chunk_json) {
    struct openai_ctx oc;
    openai_ctx_init(&oc, CHAT, "m", true, 0xabc);
    char *s = openai_chunk_role(&oc);
    json_t *j = json_loads(s, 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(j, "object")), "chat.completion.chunk");
    ck_assert_str_eq(json_string_value(json_object_get(j, "id")), "chatcmpl-0000000000000abc");
    ck_assert(json_is_null(json_object_get(j, "usage")));
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(ch, "delta"), "role")),
                     "assistant");
    ck_assert(json_is_null(json_object_get(ch, "finish_reason")));
    json_decref(j);
    free(s);
    struct openai_usage u = {5, 7, 0};
    s = openai_chunk_usage(&oc, &u);
    j = json_loads(s, 0, NULL);
    ck_assert_int_eq(json_array_size(json_object_get(j, "choices")), 0);
    ck_assert_int_eq(
        json_integer_value(json_object_get(json_object_get(j, "usage"), "total_tokens")), 12);
    json_decref(j);
    free(s);
    openai_ctx_init(&oc, CMPL, "m", false, 1);
    s = openai_response(&oc, "hi", 2, "stop", NULL, &u, NULL);
    ck_assert_ptr_null(strstr(s, "timings"));
    free(s);
    /* timings: llama-server's fields; the per-second figures from the spans */
    struct openai_timings t = {.cache_n = 3,
                               .prompt_n = 4,
                               .predicted_n = 11,
                               .queued_ms = 1.5,
                               .prompt_ms = 8.0,
                               .predicted_ms = 50.0};
    s = openai_response(&oc, "hi", 2, "stop", NULL, &u, &t);
    json_t *tj = json_object_get(j = json_loads(s, 0, NULL), "timings");
    ck_assert_int_eq(json_integer_value(json_object_get(tj, "cache_n")), 3);
    ck_assert_int_eq(json_integer_value(json_object_get(tj, "prompt_n")), 4);
    ck_assert_int_eq(json_integer_value(json_object_get(tj, "predicted_n")), 11);
    ck_assert_double_eq_tol(json_real_value(json_object_get(tj, "prompt_per_second")), 500.0, 1e-9);
    ck_assert_double_eq_tol(json_real_value(json_object_get(tj, "prompt_per_token_ms")), 2.0, 1e-9);
    /* 10 intervals after the first token in 50 ms */
    ck_assert_double_eq_tol(json_real_value(json_object_get(tj, "predicted_per_second")), 200.0,
                            1e-9);
    ck_assert_double_eq_tol(json_real_value(json_object_get(tj, "predicted_per_token_ms")), 5.0,
                            1e-9);
    ck_assert_double_eq_tol(json_real_value(json_object_get(tj, "queued_ms")), 1.5, 1e-9);
    json_decref(j);
    free(s);
    openai_ctx_init(&oc, CHAT, "m", false, 1);
    s = openai_chunk_finish(&oc, "length", &t);
    j = json_loads(s, 0, NULL);
    ck_assert_int_eq(
        json_integer_value(json_object_get(json_object_get(j, "timings"), "predicted_n")), 11);
    json_decref(j);
    free(s);
    s = openai_chunk_finish(&oc, "length", NULL);
    ck_assert_ptr_null(strstr(s, "timings"));
    free(s);
    openai_ctx_init(&oc, CMPL, "m", false, 1);
    s = openai_response(&oc, "hi", 2, "stop", NULL, &u, NULL);
    j = json_loads(s, 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(j, "object")), "text_completion");
    ch = json_array_get(json_object_get(j, "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(ch, "text")), "hi");
    ck_assert_str_eq(json_string_value(json_object_get(ch, "finish_reason")), "stop");
    ck_assert_ptr_nonnull(json_object_get(json_object_get(j, "usage"), "prompt_tokens_details"));
    json_decref(j);
    free(s);
    char id[64];
    openai_model_id("/a/b/stories260K.gguf", id, sizeof(id));
    ck_assert_str_eq(id, "stories260K");
}
END_TEST

static Suite *openai_suite(void) {
    Suite *s = suite_create("openai");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, valid_chat);
    tcase_add_test(tc, valid_completion);
    tcase_add_test(tc, valid_response_format);
    tcase_add_test(tc, invalid_requests);
    tcase_add_test(tc, chunk_json);
    tcase_add_test(tc, error_messages_stay_utf8);
    tcase_add_test(tc, long_single_stop);
    tcase_add_test(tc, assistant_without_content);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("openai", openai_suite)
