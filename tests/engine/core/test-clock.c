/* tests/engine/core/test-clock.c: strata_now, the one monotonic clock
 * (engine/core/clock.c): it is CLOCK_MONOTONIC in seconds, never goes back,
 * resolves microseconds, and a 50 ms sleep measures as 50 ms (within what a
 * loaded 2-core test machine delays a wake-up). */
#include <time.h>

#include "engine/core/clock.h"
#include "tests/harness.h"

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

START_TEST(is_clock_monotonic_seconds) {
    double a = mono(), t = strata_now(), b = mono();
    ck_assert(a <= t && t <= b);
}
END_TEST

START_TEST(never_goes_back_and_resolves_us) {
    double prev = strata_now(), first = prev;
    int changes = 0;
    for (int i = 0; i < 200000; i++) {
        double t = strata_now();
        ck_assert(t >= prev);
        changes += t > prev;
        prev = t;
    }
    /* 200,000 reads take milliseconds: a clock of microsecond resolution
     * changes thousands of times over them */
    ck_assert_int_gt(changes, 100);
    ck_assert(prev - first < 10.0);
}
END_TEST

START_TEST(measures_a_sleep) {
    double t0 = strata_now();
    struct timespec d = {0, 50 * 1000 * 1000};
    nanosleep(&d, NULL);
    double dt = strata_now() - t0;
    ck_assert(dt >= 0.050);
    ck_assert_msg(dt < 1.0, "a 50 ms sleep measured %.3f s", dt);
}
END_TEST

static Suite *clock_suite(void) {
    Suite *s = suite_create("clock");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, is_clock_monotonic_seconds);
    tcase_add_test(tc, never_goes_back_and_resolves_us);
    tcase_add_test(tc, measures_a_sleep);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("clock", clock_suite)
