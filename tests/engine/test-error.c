/* tests/engine/test-error.c: the error table (engine/error.c). */
#include "engine/error.h"
#include "tests/harness.h"

START_TEST(test_set_and_table) {
    struct strata_error err = {0};
    ck_assert_int_eq(strata_error_set(&err, STRATA_E_FORMAT, "bad %s at %d", "magic", 4),
                     STRATA_E_FORMAT);
    ck_assert_int_eq(err.code, STRATA_E_FORMAT);
    ck_assert_str_eq(err.message, "bad magic at 4");
    strata_error_prefix(&err, "file %s", "x.gguf");
    ck_assert_str_eq(err.message, "file x.gguf: bad magic at 4");
    ck_assert_int_eq(strata_error_http_status(STRATA_E_AUTH), 401);
    ck_assert_int_eq(strata_error_http_status(STRATA_E_QUEUE_FULL), 429);
    ck_assert_str_eq(strata_error_openai_type(STRATA_E_AUTH), "authentication_error");
    ck_assert_str_eq(strata_error_name(STRATA_E_NOMEM), "NOMEM");
    ck_assert_int_eq(strata_error_http_status(-9999), 500);
    /* NULL err is allowed everywhere */
    ck_assert_int_eq(strata_error_set(NULL, STRATA_E_IO, "x"), STRATA_E_IO);
}
END_TEST

START_TEST(test_truncation) {
    struct strata_error err = {0};
    char big[2000];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    strata_error_set(&err, STRATA_E_INVALID, "%s", big);
    ck_assert_uint_eq(strlen(err.message), STRATA_ERROR_MSG_MAX - 1);
}
END_TEST

static Suite *error_suite(void) {
    Suite *s = suite_create("error");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_set_and_table);
    tcase_add_test(tc, test_truncation);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("error", error_suite)
