/* tests/engine/core/test-error.c: the error table (engine/core/error.c). */
#include "engine/core/error.h"
#include "tests/harness.h"

START_TEST(test_set_and_table) {
    struct strata_error err = {0};
    ck_assert_int_eq(strata_error_set(&err, STRATA_E_FORMAT, "bad %s at %d", "magic", 4),
                     STRATA_E_FORMAT);
    ck_assert_int_eq(err.code, STRATA_E_FORMAT);
    ck_assert_str_eq(err.message, "bad magic at 4");
    strata_error_prefix(&err, "file %s", "x.gguf");
    ck_assert_str_eq(err.message, "file x.gguf: bad magic at 4");
    ck_assert_str_eq(strata_error_name(STRATA_E_NOMEM), "NOMEM");
    ck_assert_str_eq(strata_error_text(STRATA_E_QUEUE_FULL), "server busy: queue full");
    ck_assert_str_eq(strata_error_text(-9999), "unknown error");
    ck_assert_int_eq(STRATA_ERROR_COUNT, 21);
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

/* A message cut at the buffer's end, or a "%.*s" of user text, never ends
 * in half a UTF-8 character (such a message cannot become a JSON string:
 * the HTTP layer then sent no response at all). */
START_TEST(test_utf8_boundaries) {
    /* "é" is C3 A9: 99 'a' then "é" cut to 100 bytes keeps the 99 'a' only */
    char s[128];
    memset(s, 'a', 99);
    memcpy(s + 99, "\xc3\xa9z", 4);
    ck_assert_int_eq(strata_utf8_cut(s, 100), 99);
    ck_assert_int_eq(strata_utf8_cut(s, 101), 101);
    ck_assert_int_eq(strata_utf8_cut(s, 99), 99);
    ck_assert_int_eq(strata_utf8_cut(s, 1000), 102);
    ck_assert_int_eq(strata_utf8_cut("\xe6\x97\xa5", 1), 0); /* 日 */
    ck_assert_int_eq(strata_utf8_cut("\xe6\x97\xa5", 2), 0);
    ck_assert_int_eq(strata_utf8_cut("\xe6\x97\xa5", 3), 3);
    ck_assert_int_eq(strata_utf8_cut("\xf0\x9f\x8e\x89!", 3), 0); /* a 4-byte emoji */
    ck_assert_int_eq(strata_utf8_cut("ab", 0), 0);
    ck_assert_int_eq(strata_utf8_cut("\xff\xfe", 1), 1); /* invalid bytes stay as they are */

    /* the message buffer is cut inside a 2-byte character: the lead byte goes */
    struct strata_error err = {0};
    char big[STRATA_ERROR_MSG_MAX + 8];
    memset(big, 'a', STRATA_ERROR_MSG_MAX - 2);
    memcpy(big + STRATA_ERROR_MSG_MAX - 2, "\xc3\xa9\xc3\xa9", 5);
    strata_error_set(&err, STRATA_E_INVALID, "%s", big);
    ck_assert_uint_eq(strlen(err.message), STRATA_ERROR_MSG_MAX - 2);
    ck_assert_int_eq(err.message[STRATA_ERROR_MSG_MAX - 3], 'a');
    /* ... and a whole character at the very end is kept */
    memset(big, 'a', STRATA_ERROR_MSG_MAX - 3);
    memcpy(big + STRATA_ERROR_MSG_MAX - 3, "\xc3\xa9\xc3\xa9", 5);
    strata_error_set(&err, STRATA_E_INVALID, "%s", big);
    ck_assert_uint_eq(strlen(err.message), STRATA_ERROR_MSG_MAX - 1);
}
END_TEST

static Suite *error_suite(void) {
    Suite *s = suite_create("error");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_set_and_table);
    tcase_add_test(tc, test_truncation);
    tcase_add_test(tc, test_utf8_boundaries);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("error", error_suite)
