/* tests/engine/text/test-template-hostile.c: hostile chat templates against each
 * bound of struct template_limits (recursion depth, steps, output size,
 * memory, range length) and integer edge cases that would be undefined
 * behaviour in C. Each template here would hang, recurse without end or
 * allocate gigabytes if its bound were missing; each must fail with the
 * expected code (STRATA_E_LIMIT naming the bound, or STRATA_E_TEMPLATE for
 * parse-time nesting and arithmetic Python refuses too), quickly, and leave
 * nothing behind (the suite runs under ASan+LSan with detect_leaks=1 and
 * UBSan with halt_on_error=1). Prints each case's time. */
#include <jansson.h>
#include <time.h>

#include "engine/text/template.h"
#include "tests/harness.h"

/* A bound must stop a hostile template well before this (seconds, ASan
 * build on a shared 2-core box; measured worst case ~2.5 s: 512 MiB of
 * arena at the default memory bound). */
#define HOSTILE_MAX_SECONDS 20.0

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Parses and renders src over msgs (JSON array text, or NULL for []). Returns
 * the code (0 on success); message into msg. */
static int run(const char *src, const char *msgs, const struct template_limits *lim, char *msg,
               size_t cap, double *secs) {
    struct strata_error err = {0};
    double t0 = now_s();
    int rc = 0;
    struct chat_template *t = template_parse(src, strlen(src), &err);
    if (!t) {
        rc = err.code;
    } else {
        json_t *m = json_loads(msgs ? msgs : "[]", 0, NULL);
        ck_assert_msg(m != NULL, "bad test messages");
        struct template_inputs in = template_inputs_default();
        in.messages = m;
        struct template_output out = {0};
        rc = template_render(t, &in, lim, &out, &err);
        template_output_free(&out);
        json_decref(m);
        template_free(t);
    }
    *secs = now_s() - t0;
    snprintf(msg, cap, "%s", rc ? err.message : "");
    return rc;
}

/* Expects code and a message containing want (NULL: any). */
static void hostile(const char *what, const char *src, const char *msgs,
                    const struct template_limits *lim, int code, const char *want) {
    char msg[STRATA_ERROR_MSG_MAX];
    double secs;
    int rc = run(src, msgs, lim, msg, sizeof(msg), &secs);
    printf("  %-44s %6.2f s  %s\n", what, secs, rc ? msg : "(rendered)");
    ck_assert_msg(rc == code, "%s: rc %d (%s) want %d (%s)", what, rc, strata_error_name(rc), code,
                  strata_error_name(code));
    if (want)
        ck_assert_msg(strstr(msg, want), "%s: message '%s' lacks '%s'", what, msg, want);
    ck_assert_msg(secs < HOSTILE_MAX_SECONDS, "%s: took %.1f s", what, secs);
}

/* JSON text of one user message whose content nests n lists deep. */
static char *deep_messages(int n) {
    size_t cap = (size_t)n * 2 + 64;
    char *s = malloc(cap);
    ck_assert_ptr_nonnull(s);
    size_t k = (size_t)snprintf(s, cap, "[{\"role\":\"user\",\"content\":\"x\",\"deep\":");
    for (int i = 0; i < n; i++)
        s[k++] = '[';
    for (int i = 0; i < n; i++)
        s[k++] = ']';
    snprintf(s + k, cap - k, "}]");
    return s;
}

START_TEST(test_depth) {
    struct template_limits lim = template_limits_default();
    hostile("macro recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, &lim,
            STRATA_E_LIMIT, "recursion depth");
    hostile("mutual macro recursion",
            "{% macro a(n) %}{{ b(n) }}{% endmacro %}{% macro b(n) %}{{ a(n) }}{% endmacro %}"
            "{{ a(0) }}",
            NULL, &lim, STRATA_E_LIMIT, "recursion depth");
    hostile("recursion through call/caller",
            "{% macro f() %}{% call f() %}x{% endcall %}{{ caller() }}{% endmacro %}{{ f() }}",
            NULL, &lim, STRATA_E_LIMIT, "recursion depth");
    /* A macro re-entering itself twice per call, 40 levels deep (within the
     * depth bound), makes 2^40 calls: depth alone does not stop it, steps do. */
    lim.max_steps = 1000 * 1000;
    hostile("exponential fan-out recursion",
            "{% macro f(n) %}{% if n < 40 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}"
            "{{ f(0) }}",
            NULL, &lim, STRATA_E_LIMIT, "step limit");
    lim = template_limits_default();
    lim.max_depth = 20;
    hostile("tightened depth bound (20)",
            "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(30) }}",
            NULL, &lim, STRATA_E_LIMIT, "(20)");
    /* deep data from the request: json and repr writers must not recurse without end */
    char *deep = deep_messages(1500);
    hostile("tojson of 1500-deep request data", "{{ messages | tojson }}", deep, NULL,
            STRATA_E_LIMIT, "nesting");
    char msg[STRATA_ERROR_MSG_MAX];
    double secs;
    int rc = run("{{ messages }}{{ messages[0].deep | string | length }}", deep, NULL, msg,
                 sizeof(msg), &secs);
    printf("  %-44s %6.2f s  %s\n", "repr of 1500-deep request data", secs,
           rc ? msg : "(rendered)");
    ck_assert_msg(rc == 0 || rc == STRATA_E_LIMIT, "repr of deep data: %d %s", rc, msg);
    free(deep);
    /* parse-time nesting is a syntax error, not a crash */
    size_t n = 20000;
    char *src = malloc(n * 2 + 16);
    ck_assert_ptr_nonnull(src);
    size_t k = (size_t)sprintf(src, "{{ ");
    for (size_t i = 0; i < n; i++)
        src[k++] = '(';
    k += (size_t)sprintf(src + k, "1");
    for (size_t i = 0; i < n; i++)
        src[k++] = ')';
    sprintf(src + k, " }}");
    hostile("20000 nested parentheses", src, NULL, NULL, STRATA_E_TEMPLATE, NULL);
    free(src);
    const char *open = "{% if true %}", *close = "{% endif %}";
    n = 5000;
    src = malloc(n * (strlen(open) + strlen(close)) + 1);
    ck_assert_ptr_nonnull(src);
    k = 0;
    for (size_t i = 0; i < n; i++)
        k += (size_t)sprintf(src + k, "%s", open);
    for (size_t i = 0; i < n; i++)
        k += (size_t)sprintf(src + k, "%s", close);
    hostile("5000 nested if blocks", src, NULL, NULL, STRATA_E_TEMPLATE, NULL);
    free(src);
}
END_TEST

START_TEST(test_steps) {
    /* default bounds: 10^10 empty iterations stop (at the step or memory bound) */
    hostile("10^10 nested loop iterations (defaults)",
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            NULL, NULL, STRATA_E_LIMIT, "limit");
    struct template_limits lim = template_limits_default();
    lim.max_steps = 1000 * 1000;
    hostile("loop over join of a large range",
            "{% for i in range(100000) %}{{ range(100000) | join(',') | length }}{% endfor %}",
            NULL, &lim, STRATA_E_LIMIT, "step limit");
    hostile("batch with a huge fill", "{{ [1, 2, 3] | batch(9223372036854775807, 'x') | list }}",
            NULL, &lim, STRATA_E_LIMIT, "limit");
    hostile("map/select over range chains",
            "{% for i in range(100000) %}{{ range(100000) | select('odd') | map('string') | list "
            "| length }}{% endfor %}",
            NULL, &lim, STRATA_E_LIMIT, "limit");
}
END_TEST

START_TEST(test_output) {
    hostile("string repetition 'x' * 10^9", "{{ 'x' * 1000000000 }}", NULL, NULL, STRATA_E_LIMIT,
            "output limit");
    hostile("string repetition by INT64_MAX", "{{ 'ab' * 9223372036854775807 }}", NULL, NULL,
            STRATA_E_LIMIT, "output limit");
    hostile("string doubling 64 times",
            "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s "
            "%}{% endfor %}",
            NULL, NULL, STRATA_E_LIMIT, "limit");
    hostile("10^5 x 1000-byte prints (100 MB)",
            "{% set s = 'x' * 1000 %}{% for i in range(100000) %}{{ s }}{% endfor %}", NULL, NULL,
            STRATA_E_LIMIT, "output limit");
    hostile("indent width 10^9", "{{ 'a\\nb' | indent(1000000000) }}", NULL, NULL, STRATA_E_LIMIT,
            "output limit");
    hostile("tojson indent 10^9", "{{ messages | tojson(indent=1000000000) }}",
            "[{\"role\":\"user\",\"content\":\"x\"}]", NULL, STRATA_E_LIMIT, "output limit");
    struct template_limits lim = template_limits_default();
    lim.max_output_bytes = 1000;
    hostile("tightened output bound (1000)", "{% for i in range(1000) %}xx{% endfor %}", NULL, &lim,
            STRATA_E_LIMIT, "(1000 bytes)");
    hostile("replace('', long) * 100 under 1000 bytes",
            "{{ 'abcdefghij'.replace('', 'yyyyyyyyyyyyyyyyyyyy') * 100 }}", NULL, &lim,
            STRATA_E_LIMIT, "limit");
}
END_TEST

START_TEST(test_memory) {
    hostile("list repetition ['x'] * 10^9", "{{ ['x'] * 1000000000 }}", NULL, NULL, STRATA_E_LIMIT,
            "memory limit");
    hostile("list doubling 64 times",
            "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l "
            "%}{% endfor %}{{ ns.l | length }}",
            NULL, NULL, STRATA_E_LIMIT, "memory limit");
    hostile("quadratic concatenation (10^5 appends)",
            "{% set ns = namespace(s='') %}{% for i in range(100000) %}{% set ns.s = ns.s ~ "
            "'xxxxxxxxxx' %}{% endfor %}{{ ns.s | length }}",
            NULL, NULL, STRATA_E_LIMIT, "memory limit");
    struct template_limits lim = template_limits_default();
    lim.max_memory_bytes = 1 << 20;
    hostile("tightened memory bound (1 MiB)",
            "{% for i in range(100000) %}{% set x = [i, i, i, i] %}{% endfor %}", NULL, &lim,
            STRATA_E_LIMIT, "(1048576 bytes)");
    hostile("dict growth under 1 MiB",
            "{% set ns = namespace(d={}) %}{% for i in range(100000) %}{% set ns.d = dict(ns.d, "
            "k=i) %}{% set ns.l = [ns.d, ns.d] %}{% endfor %}",
            NULL, &lim, STRATA_E_LIMIT, "limit");
}
END_TEST

START_TEST(test_range_and_integers) {
    hostile("range(10^9)", "{{ range(1000000000) | length }}", NULL, NULL, STRATA_E_LIMIT,
            "range too big");
    hostile("range(-2^63, 2^63) step 1",
            "{{ range(-9223372036854775807 - 1, 9223372036854775807) | length }}", NULL, NULL,
            STRATA_E_LIMIT, "range too big");
    hostile("range with a step near 2^62 (no overflow)",
            "{{ range(-9223372036854775807, 9223372036854775807, 4611686018427387904) | list }}",
            NULL, NULL, 0, NULL);
    hostile("abs(INT64_MIN)", "{{ (-9223372036854775807 - 1) | abs }}", NULL, NULL,
            STRATA_E_TEMPLATE, "overflow");
    hostile("INT64_MIN // -1", "{{ (-9223372036854775807 - 1) // -1 }}", NULL, NULL,
            STRATA_E_TEMPLATE, "overflow");
    hostile("2 ** 64", "{{ 2 ** 64 }}", NULL, NULL, STRATA_E_TEMPLATE, "overflow");
    hostile("2.0 ** 10^5", "{{ 2.0 ** 100000 }}", NULL, NULL, STRATA_E_TEMPLATE, "out of range");
    hostile("1e300 | int", "{{ 1e300 | int }}", NULL, NULL, STRATA_E_TEMPLATE, "overflow");
    hostile("inf | int", "{{ (1e308 * 10) | int }}", NULL, NULL, STRATA_E_TEMPLATE, "infinity");
    hostile("'9' * 30 | int", "{{ '999999999999999999999999999999' | int }}", NULL, NULL,
            STRATA_E_TEMPLATE, "overflow");
    hostile("huge slice bounds", "{{ 'abc'[-9223372036854775807:9223372036854775807:-1] }}", NULL,
            NULL, 0, NULL);
    hostile("slice step INT64_MIN", "{{ [1, 2, 3][::-9223372036854775807 - 1] }}", NULL, NULL, 0,
            NULL);
    hostile("index INT64_MIN", "{{ [1, 2, 3][-9223372036854775807 - 1] }}", NULL, NULL, 0, NULL);
    hostile("integer literal past int64", "{{ 99999999999999999999 }}", NULL, NULL,
            STRATA_E_TEMPLATE, "out of range");
}
END_TEST

static Suite *hostile_suite(void) {
    Suite *s = suite_create("template-hostile");
    TCase *tc = tcase_create("limits");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_depth);
    tcase_add_test(tc, test_steps);
    tcase_add_test(tc, test_output);
    tcase_add_test(tc, test_memory);
    tcase_add_test(tc, test_range_and_integers);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("template-hostile", hostile_suite)
