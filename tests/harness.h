/* tests/harness.h: shared test helpers (Check).
 *
 *   static Suite *gguf_suite(void) { ... }
 *   STRATA_TEST_MAIN("gguf", gguf_suite)
 *
 * Every suite prints one line `RESULT <name>: N passed, M failed` that
 * scripts/test sums. Tests find ../shared through STRATA_SHARED_DIR (set by
 * meson to -Dshared_dir, default ../shared beside the source tree); tests
 * that need a shared file and cannot find it fail and say which file.
 * (Test code may read the environment directly; the daemon never does
 * outside config/.)
 */
#ifndef STRATA_TEST_HARNESS_H
#define STRATA_TEST_HARNESS_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline const char *test_shared_dir(void) {
    const char *d = getenv("STRATA_SHARED_DIR");
    return (d && *d) ? d : "../shared";
}

/* Writes "<shared>/<rel>" into buf and returns buf. */
static inline const char *test_shared_path(char *buf, size_t cap, const char *rel) {
    snprintf(buf, cap, "%s/%s", test_shared_dir(), rel);
    return buf;
}

/* Reads a whole file; returns malloc'd bytes (NUL-terminated) or NULL. */
static inline void *test_read_file(const char *path, size_t *size_out) {
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, fp) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    if (buf) {
        buf[n] = '\0';
        if (size_out)
            *size_out = (size_t)n;
    }
    return buf;
}

#define STRATA_TEST_MAIN(name, suite_fn)                                                           \
    int main(void) {                                                                               \
        SRunner *sr = srunner_create(suite_fn());                                                  \
        srunner_run_all(sr, CK_NORMAL);                                                            \
        int n_run = srunner_ntests_run(sr);                                                        \
        int n_fail = srunner_ntests_failed(sr);                                                    \
        srunner_free(sr);                                                                          \
        printf("RESULT %s: %d passed, %d failed\n", name, n_run - n_fail, n_fail);                 \
        return n_fail ? 1 : 0;                                                                     \
    }

#endif
