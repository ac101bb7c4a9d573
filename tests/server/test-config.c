/* tests/server/test-config.c: the option table (config/config.c). */
#include <unistd.h>

#include "config/config.h"
#include "tests/harness.h"

static struct config *load(int argc, char **argv, const char *const *envp,
                           struct strata_error *err) {
    struct config_params p = {argc, argv, envp};
    return config_load(&p, err);
}

static const char *const no_env[] = {NULL};

START_TEST(defaults) {
    char *argv[] = {"serve"};
    struct strata_error err = {0};
    struct config *c = load(1, argv, no_env, &err);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(config_int(c, CONFIG_PORT), 8080);
    ck_assert_str_eq(config_str(c, CONFIG_HOST), "127.0.0.1");
    ck_assert_int_eq(config_int(c, CONFIG_POOL_SPIN), 4000);
    ck_assert_int_eq(config_int(c, CONFIG_MAX_BODY), 2097152);
    ck_assert_int_eq(config_bool(c, CONFIG_ALWAYS_USAGE), 0);
    ck_assert_int_eq(config_int(c, CONFIG_LOG_LEVEL), 2);
    ck_assert_int_eq(config_source_of(c, CONFIG_PORT), CONFIG_SOURCE_DEFAULT);
    config_free(c);
}
END_TEST

START_TEST(precedence) {
    char path[] = "/tmp/strata-test-config-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    const char text[] = "# comment\nport = 1111\nthreads = 3\nqueue=5\nlog-level = debug\n";
    ck_assert_int_eq(write(fd, text, sizeof(text) - 1), (ssize_t)(sizeof(text) - 1));
    close(fd);
    char cfgflag[64];
    snprintf(cfgflag, sizeof(cfgflag), "--config=%s", path);
    char *argv[] = {"serve", cfgflag, "--port", "3333", "--always-usage", "m.gguf"};
    const char *const envp[] = {"STRATA_PORT=2222", "STRATA_THREADS=7", "OTHER=1", NULL};
    struct strata_error err = {0};
    struct config *c = load(6, argv, envp, &err);
    unlink(path);
    ck_assert_msg(c != NULL, "%s", err.message);
    ck_assert_int_eq(config_int(c, CONFIG_PORT), 3333); /* cli > env > file */
    ck_assert_int_eq(config_source_of(c, CONFIG_PORT), CONFIG_SOURCE_CLI);
    ck_assert_int_eq(config_int(c, CONFIG_THREADS), 7); /* env > file */
    ck_assert_int_eq(config_source_of(c, CONFIG_THREADS), CONFIG_SOURCE_ENV);
    ck_assert_int_eq(config_int(c, CONFIG_QUEUE), 5); /* file > default */
    ck_assert_int_eq(config_source_of(c, CONFIG_QUEUE), CONFIG_SOURCE_FILE);
    ck_assert_int_eq(config_int(c, CONFIG_LOG_LEVEL), 3);
    ck_assert_int_eq(config_bool(c, CONFIG_ALWAYS_USAGE), 1);
    ck_assert_str_eq(config_str(c, CONFIG_MODEL), "m.gguf");
    /* --print-config output names every option and its source */
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    config_print(c, mem);
    fclose(mem);
    ck_assert_ptr_nonnull(strstr(buf, "port"));
    ck_assert_ptr_nonnull(strstr(buf, "(cli)"));
    ck_assert_ptr_nonnull(strstr(buf, "(env)"));
    ck_assert_ptr_nonnull(strstr(buf, "(file)"));
    ck_assert_ptr_nonnull(strstr(buf, "pool-spin"));
    free(buf);
    config_free(c);
}
END_TEST

START_TEST(invalid_values) {
    struct {
        int argc;
        char *argv[3];
        const char *env;
        const char *want; /* substring of the message */
    } cases[] = {
        {3, {"serve", "--port", "70000"}, NULL, "0..65535"},
        {3, {"serve", "--port", "12x"}, NULL, "port"},
        {2, {"serve", "--threads=-1"}, NULL, "0..1024"},
        {1, {"serve"}, "STRATA_PARALLEL=0", "STRATA_PARALLEL"},
        {1, {"serve"}, "STRATA_ALWAYS_USAGE=maybe", "always-usage"},
        {2, {"serve", "--log-level=loud"}, NULL, "error|warn|info|debug"},
        {2, {"serve", "--no-such-flag"}, NULL, "unknown option"},
        {2, {"serve", "--port"}, NULL, "needs a value"},
        {2, {"serve", "--max-body=99999999999999999999"}, NULL, "max-body"},
        {3, {"serve", "a.gguf", "b.gguf"}, NULL, "unexpected"},
        {2, {"serve", "--config=/nonexistent/strata.conf"}, NULL, "cannot open config"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *envp[] = {cases[i].env, NULL};
        struct strata_error err = {0};
        struct config *c = load(cases[i].argc, cases[i].argv, envp, &err);
        ck_assert_msg(c == NULL, "case %zu accepted", i);
        ck_assert_int_eq(err.code, STRATA_E_CONFIG);
        ck_assert_msg(strstr(err.message, cases[i].want), "case %zu: '%s' lacks '%s'", i,
                      err.message, cases[i].want);
    }
}
END_TEST

/* The short flags `strata run` and llama-server take (-m, -t, -c, -b, -np,
 * -a) set their options; an unknown short flag is refused by name. */
START_TEST(short_flags) {
    char *argv[] = {"serve", "-m", "x.gguf", "-t", "3", "-c", "512", "-b", "64", "-np", "2"};
    struct strata_error err = {0};
    struct config *c = load(11, argv, (const char *const[]){NULL}, &err);
    ck_assert_msg(c != NULL, "%s", err.message);
    ck_assert_str_eq(config_str(c, CONFIG_MODEL), "x.gguf");
    ck_assert_int_eq(config_int(c, CONFIG_THREADS), 3);
    ck_assert_int_eq(config_source_of(c, CONFIG_THREADS), CONFIG_SOURCE_CLI);
    ck_assert_int_eq(config_int(c, CONFIG_CTX_SIZE), 512);
    ck_assert_int_eq(config_int(c, CONFIG_BATCH), 64);
    ck_assert_int_eq(config_int(c, CONFIG_PARALLEL), 2);
    config_free(c);
    char *bad[] = {"serve", "-x", "1"};
    ck_assert(load(3, bad, (const char *const[]){NULL}, &err) == NULL);
    ck_assert_msg(strstr(err.message, "'-x'") != NULL, "%s", err.message);
    char *missing[] = {"serve", "-t"};
    ck_assert(load(2, missing, (const char *const[]){NULL}, &err) == NULL);
    ck_assert_msg(strstr(err.message, "needs a value") != NULL, "%s", err.message);
}
END_TEST

/* A switch alone is on; --no-NAME (llama-server's --no-webui form) and
 * --NAME=false turn it off; --no- of a non-switch or an unknown name is
 * refused by name. */
START_TEST(negated_switches) {
    char *argv[] = {"serve", "--no-web-ui", "--no-prefix-cache", "--always-usage",
                    "--repack=false"};
    struct strata_error err = {0};
    struct config *c = load(5, argv, no_env, &err);
    ck_assert_msg(c != NULL, "%s", err.message);
    ck_assert(!config_bool(c, CONFIG_WEB_UI));
    ck_assert_int_eq(config_source_of(c, CONFIG_WEB_UI), CONFIG_SOURCE_CLI);
    ck_assert(!config_bool(c, CONFIG_PREFIX_CACHE));
    ck_assert(config_bool(c, CONFIG_ALWAYS_USAGE));
    ck_assert(!config_bool(c, CONFIG_REPACK));
    config_free(c);
    char *notswitch[] = {"serve", "--no-port"};
    ck_assert(load(2, notswitch, no_env, &err) == NULL);
    ck_assert_msg(strstr(err.message, "not a switch") != NULL, "%s", err.message);
    char *unknown[] = {"serve", "--no-such-thing"};
    ck_assert(load(2, unknown, no_env, &err) == NULL);
    ck_assert_msg(strstr(err.message, "unknown option '--no-such-thing'") != NULL, "%s",
                  err.message);
    char *witheq[] = {"serve", "--no-web-ui=true"};
    ck_assert(load(2, witheq, no_env, &err) == NULL);
}
END_TEST

START_TEST(suffixes_and_help) {
    char *argv[] = {"serve", "--max-body=4m", "--pool-spin", "0"};
    struct strata_error err = {0};
    struct config *c = load(4, argv, no_env, &err);
    ck_assert_msg(c != NULL, "%s", err.message);
    ck_assert_int_eq(config_int(c, CONFIG_MAX_BODY), 4 << 20);
    ck_assert_int_eq(config_int(c, CONFIG_POOL_SPIN), 0);
    config_free(c);
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    config_print_help(mem);
    fclose(mem);
    for (int i = 0; i < CONFIG_N_OPTIONS; i++) {
        ck_assert_ptr_nonnull(strstr(buf, config_option(i)->flag));
        ck_assert_ptr_nonnull(strstr(buf, config_option(i)->env));
    }
    free(buf);
}
END_TEST

static Suite *config_suite(void) {
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, defaults);
    tcase_add_test(tc, precedence);
    tcase_add_test(tc, invalid_values);
    tcase_add_test(tc, suffixes_and_help);
    tcase_add_test(tc, short_flags);
    tcase_add_test(tc, negated_switches);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("config", config_suite)
