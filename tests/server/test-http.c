/* tests/server/test-http.c: unit tests of the HTTP layer's pure parts:
 * UTF-8 validation, content types, OpenAI error bodies, API keys, metrics
 * text. The daemon itself is driven over sockets by tests/peers/http-raw.py. */
#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/errors.h"
#include "server/server-impl.h"
#include "tests/harness.h"

START_TEST(utf8) {
    struct {
        const char *s;
        size_t n;
        bool ok;
    } cases[] = {
        {"plain ascii", 11, true},
        {"\xc3\xa9t\xc3\xa9", 6, true},        /* été */
        {"\xe6\x97\xa5\xe6\x9c\xac", 6, true}, /* 日本 */
        {"\xf0\x9f\x8e\x89", 4, true},         /* 🎉 */
        {"\xf4\x8f\xbf\xbf", 4, true},         /* U+10FFFF */
        {"\xff", 1, false},                    /* never valid */
        {"\xc0\xaf", 2, false},                /* overlong '/' */
        {"\xe0\x80\xaf", 3, false},            /* overlong */
        {"\xed\xa0\x80", 3, false},            /* surrogate D800 */
        {"\xf4\x90\x80\x80", 4, false},        /* above U+10FFFF */
        {"\xe6\x97", 2, false},                /* truncated */
        {"a\x80", 2, false},                   /* lone continuation */
        {"\xc3\x28", 2, false},                /* bad continuation */
        {"a\0b", 3, true},                     /* NUL is valid UTF-8 (JSON rejects it) */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t bad = 99;
        ck_assert_msg(http_utf8_valid(cases[i].s, cases[i].n, &bad) == cases[i].ok, "case %zu", i);
        if (!cases[i].ok)
            ck_assert_uint_lt(bad, cases[i].n);
    }
}
END_TEST

START_TEST(content_type) {
    ck_assert(http_content_type_is_json("application/json"));
    ck_assert(http_content_type_is_json("Application/JSON; charset=utf-8"));
    ck_assert(http_content_type_is_json("application/json ;charset=utf-8"));
    ck_assert(!http_content_type_is_json(NULL));
    ck_assert(!http_content_type_is_json("text/plain"));
    ck_assert(!http_content_type_is_json("application/jsonx"));
    ck_assert(!http_content_type_is_json("application/x-www-form-urlencoded"));
    /* what a JSON body is accepted with: none, json, curl -d's, text/plain */
    ck_assert(http_content_type_accepts_json(NULL));
    ck_assert(http_content_type_accepts_json("application/json; charset=utf-8"));
    ck_assert(http_content_type_accepts_json("application/x-www-form-urlencoded"));
    ck_assert(http_content_type_accepts_json("text/plain;charset=UTF-8"));
    ck_assert(!http_content_type_accepts_json("multipart/form-data; boundary=x"));
    ck_assert(!http_content_type_accepts_json("application/xml"));
    ck_assert(!http_content_type_accepts_json("text/plainx"));
}
END_TEST

/* server/errors.h: a row for every engine code; OpenAI's strings where it
 * has them; unknown codes are 500 server_error internal_error. */
START_TEST(error_table) {
    ck_assert_int_eq(http_error_status(STRATA_E_AUTH), 401);
    ck_assert_int_eq(http_error_status(STRATA_E_QUEUE_FULL), 429);
    ck_assert_str_eq(http_error_type(STRATA_E_AUTH), "authentication_error");
    ck_assert_int_eq(http_error_status(-9999), 500);
    ck_assert_str_eq(http_error_type(-9999), "server_error");
    ck_assert_str_eq(http_error_code(STRATA_E_AUTH), "invalid_api_key");
    ck_assert_str_eq(http_error_code(STRATA_E_CONTEXT_LENGTH), "context_length_exceeded");
    ck_assert_str_eq(http_error_code(STRATA_E_QUEUE_FULL), "rate_limit_exceeded");
    ck_assert_str_eq(http_error_code(STRATA_E_RANGE), "invalid_value");
    ck_assert_str_eq(http_error_code(-9999), "internal_error");
    ck_assert_str_eq(http_error_code(0), "internal_error");
    /* every engine code (0, -1 .. -20) has its own row, not the defaults' */
    for (int c = -1; c >= 1 - STRATA_ERROR_COUNT; c--) {
        ck_assert_str_ne(strata_error_name(c), "UNKNOWN");
        ck_assert(http_error_code(c)[0] != '\0');
        ck_assert(http_error_type(c)[0] != '\0');
        ck_assert_int_ge(http_error_status(c), 400);
    }
    ck_assert_int_eq(http_error_status(0), 200);
}
END_TEST

START_TEST(error_body) {
    int codes[] = {STRATA_E_INVALID,       STRATA_E_AUTH,       STRATA_E_NOT_FOUND,
                   STRATA_E_TOO_LARGE,     STRATA_E_QUEUE_FULL, STRATA_E_UNAVAILABLE,
                   STRATA_E_CONTEXT_LENGTH};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        char *s = http_error_json(codes[i], "msg \"quoted\" \xc3\xa9", i % 2 ? "messages" : NULL);
        ck_assert_ptr_nonnull(s);
        json_t *j = json_loads(s, 0, NULL);
        ck_assert_ptr_nonnull(j);
        json_t *e = json_object_get(j, "error");
        ck_assert(json_is_object(e));
        ck_assert_str_eq(json_string_value(json_object_get(e, "message")),
                         "msg \"quoted\" \xc3\xa9");
        ck_assert_str_eq(json_string_value(json_object_get(e, "type")), http_error_type(codes[i]));
        ck_assert(i % 2 ? json_is_string(json_object_get(e, "param"))
                        : json_is_null(json_object_get(e, "param")));
        ck_assert(json_is_string(json_object_get(e, "code")));
        json_decref(j);
        free(s);
    }
    char *s = http_error_json(STRATA_E_AUTH, NULL, NULL);
    ck_assert_ptr_nonnull(strstr(s, "\"code\":\"invalid_api_key\""));
    free(s);
    /* OpenAI's unknown model: 404, invalid_request_error, param model, model_not_found */
    s = http_error_json(STRATA_E_NOT_FOUND, "no such model", "model");
    ck_assert_ptr_nonnull(strstr(s, "\"code\":\"model_not_found\""));
    ck_assert_ptr_nonnull(strstr(s, "\"type\":\"invalid_request_error\""));
    free(s);
    s = http_error_json(STRATA_E_NOT_FOUND, NULL, NULL);
    ck_assert_ptr_nonnull(strstr(s, "\"type\":\"not_found_error\""));
    free(s);
    s = http_error_json(STRATA_E_TEMPLATE, "bad role", "messages");
    ck_assert_ptr_nonnull(strstr(s, "\"code\":\"template_error\""));
    free(s);
    s = http_error_json(STRATA_E_CONTEXT_LENGTH, NULL, "messages");
    ck_assert_ptr_nonnull(strstr(s, "\"code\":\"context_length_exceeded\""));
    free(s);
    s = http_error_json_as(STRATA_E_INVALID, "invalid_json", "x", NULL);
    ck_assert_ptr_nonnull(strstr(s, "\"code\":\"invalid_json\""));
    free(s);
    /* every table code gets a non-empty snake_case code */
    for (int c = STRATA_E_NOMEM; c >= STRATA_E_CONFIG; c--) {
        s = http_error_json(c, NULL, NULL);
        json_t *j = json_loads(s, 0, NULL);
        const char *code = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
        ck_assert(code && *code && strspn(code, "abcdefghijklmnopqrstuvwxyz_") == strlen(code));
        json_decref(j);
        free(s);
    }
}
END_TEST

/* An error message (or param) that is not UTF-8 still becomes a JSON body:
 * json_pack refused it and the connection was dropped with no response
 * (curl: "Empty reply"; the openai SDK retried and raised APIConnectionError). */
START_TEST(error_body_invalid_utf8) {
    struct {
        const char *msg, *param, *want_msg, *want_param;
    } cases[] = {
        /* "%.100s" of 99 'a' + "é" kept the lead byte C3 only */
        {"The model 'aa\xc3' does not exist", NULL, "The model 'aa\xef\xbf\xbd' does not exist",
         NULL},
        {"model '\xff' does not exist", "model", "model '\xef\xbf\xbd' does not exist", "model"},
        /* jansson's own text quoting half of a character */
        {"invalid JSON at line 1 column 11: invalid escape near '\"\\\xc3'", NULL,
         "invalid JSON at line 1 column 11: invalid escape near '\"\\\xef\xbf\xbd'", NULL},
        {"\xe6\x97 \xed\xa0\x80 ok \xc3\xa9", "p\xff",
         "\xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd ok \xc3\xa9",
         "p\xef\xbf\xbd"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *s = http_error_json(STRATA_E_NOT_FOUND, cases[i].msg, cases[i].param);
        ck_assert_msg(s != NULL, "case %zu: no body", i);
        json_t *j = json_loads(s, 0, NULL);
        ck_assert_msg(j != NULL, "case %zu: not JSON: %s", i, s);
        json_t *e = json_object_get(j, "error");
        ck_assert_str_eq(json_string_value(json_object_get(e, "message")), cases[i].want_msg);
        if (cases[i].want_param)
            ck_assert_str_eq(json_string_value(json_object_get(e, "param")), cases[i].want_param);
        else
            ck_assert(json_is_null(json_object_get(e, "param")));
        json_decref(j);
        free(s);
    }
}
END_TEST

START_TEST(api_keys) {
    ck_assert(auth_check(NULL, NULL)); /* no keys: open */
    struct strata_error err = {0};
    struct auth_keys *k = auth_keys_init("sk-abc", NULL, &err);
    ck_assert_ptr_nonnull(k);
    ck_assert(auth_keys_enabled(k));
    ck_assert(auth_check(k, "Bearer sk-abc"));
    ck_assert(auth_check(k, "bearer  sk-abc "));
    ck_assert(!auth_check(k, NULL));
    ck_assert(!auth_check(k, "sk-abc"));
    ck_assert(!auth_check(k, "Bearer sk-ab"));
    ck_assert(!auth_check(k, "Bearer sk-abcd"));
    ck_assert(!auth_check(k, "Bearer sk-abd"));
    ck_assert(!auth_check(k, "Bearer "));
    ck_assert(!auth_check(k, "Basic c2stYWJj"));
    auth_keys_free(k);

    char path[] = "/tmp/strata-test-keys-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    const char text[] = "# two keys\nsk-one\n\n   sk-two\t\n";
    ck_assert_int_eq(write(fd, text, sizeof(text) - 1), (ssize_t)(sizeof(text) - 1));
    close(fd);
    k = auth_keys_init("", path, &err);
    ck_assert_msg(k != NULL, "%s", err.message);
    ck_assert(auth_check(k, "Bearer sk-one"));
    ck_assert(auth_check(k, "Bearer sk-two"));
    ck_assert(!auth_check(k, "Bearer # two keys"));
    /* which key: the prefix cache is partitioned by it */
    ck_assert_int_eq(auth_key_index(k, "Bearer sk-one"), 0);
    ck_assert_int_eq(auth_key_index(k, "Bearer sk-two"), 1);
    ck_assert_int_eq(auth_key_index(k, "Bearer sk-three"), -1);
    ck_assert_int_eq(auth_key_index(k, NULL), -1);
    auth_keys_free(k);
    k = auth_keys_init("sk-cli", path, &err); /* --api-key comes first */
    ck_assert_int_eq(auth_key_index(k, "Bearer sk-cli"), 0);
    ck_assert_int_eq(auth_key_index(k, "Bearer sk-two"), 2);
    auth_keys_free(k);
    ck_assert_int_eq(auth_key_index(NULL, NULL), 0); /* no keys: everyone is partition 0 */
    unlink(path);
    ck_assert_ptr_null(auth_keys_init(NULL, "/nonexistent/keys", &err));
    ck_assert_int_eq(err.code, STRATA_E_CONFIG);
}
END_TEST

/* A FIFO as --api-key-file is refused at once: fopen() blocked for ever
 * (and the daemon had SIGTERM blocked by then). 10 s test-case timeout. */
START_TEST(api_key_file_fifo) {
    char path[64];
    snprintf(path, sizeof(path), "/tmp/strata-test-keyfifo-%d", (int)getpid());
    unlink(path);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    struct strata_error err = {0};
    ck_assert_ptr_null(auth_keys_init(NULL, path, &err));
    unlink(path);
    ck_assert_int_eq(err.code, STRATA_E_CONFIG);
    ck_assert_msg(strstr(err.message, "not a regular file") != NULL, "%s", err.message);
    ck_assert_ptr_null(auth_keys_init(NULL, "/tmp", &err)); /* a directory */
    ck_assert_msg(strstr(err.message, "not a regular file") != NULL, "%s", err.message);
}
END_TEST

START_TEST(metrics_text) {
    struct metrics *m = metrics_init();
    ck_assert_ptr_nonnull(m);
    metrics_count_request(m, METRICS_ROUTE_CHAT, 200);
    metrics_count_request(m, METRICS_ROUTE_CHAT, 200);
    metrics_count_request(m, METRICS_ROUTE_OTHER, 404);
    metrics_count_request(m, METRICS_ROUTE_HEALTH, 418); /* "other" status */
    metrics_observe_ttft(m, 0.02);
    metrics_observe_ttft(m, 100.0);  /* +Inf bucket */
    metrics_observe_itl(m, 0.03, 3); /* 3 samples of 10 ms */
    metrics_add_tokens(m, 5, 7);
    struct gen_stats st = {.n_queued = 3, .n_active = 2, .cache_hits = 9};
    char *t = metrics_render(m, &st, 4);
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_nonnull(
        strstr(t, "strata_http_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(t, "{route=\"other\",status=\"404\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "{route=\"/health\",status=\"other\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "strata_time_to_first_token_seconds_bucket{le=\"0.025\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "strata_time_to_first_token_seconds_bucket{le=\"60\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "strata_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(t, "strata_time_to_first_token_seconds_count 2\n"));
    ck_assert_ptr_nonnull(strstr(t, "strata_inter_token_seconds_bucket{le=\"0.01\"} 3\n"));
    ck_assert_ptr_nonnull(strstr(t, "strata_inter_token_seconds_sum 0.03"));
    ck_assert_ptr_nonnull(strstr(t, "strata_tokens_completion_total 7\n"));
    ck_assert_ptr_nonnull(strstr(t, "strata_queue_depth 3\n"));
    ck_assert_ptr_nonnull(strstr(t, "strata_prefix_cache_hits_total 9\n"));
    ck_assert_uint_eq(metrics_requests_total(m), 4);
    free(t);
    metrics_free(m);
}
END_TEST

static Suite *http_suite(void) {
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("unit");
    tcase_add_test(tc, utf8);
    tcase_add_test(tc, content_type);
    tcase_add_test(tc, error_body);
    tcase_add_test(tc, error_table);
    tcase_add_test(tc, error_body_invalid_utf8);
    tcase_add_test(tc, api_keys);
    tcase_add_test(tc, metrics_text);
    suite_add_tcase(s, tc);
    TCase *tf = tcase_create("special files");
    tcase_set_timeout(tf, 10);
    tcase_add_test(tf, api_key_file_fifo);
    suite_add_tcase(s, tf);
    return s;
}

STRATA_TEST_MAIN("http", http_suite)
