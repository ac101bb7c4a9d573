/* bench/tokenizer-bench.c: encode/decode throughput (not a test;
 * run by hand on a release build).
 *
 *   tokenizer-bench VOCAB.gguf TEXT_FILE [MIN_MB]
 *
 * The text is repeated up to MIN_MB (default 4) megabytes and encoded in
 * one call without special tokens; prints MB/s and tokens/s for encode and
 * for decode of the result.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/gguf/gguf.h"
#include "engine/text/tokenizer.h"
#include "tests/harness.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s VOCAB.gguf TEXT_FILE [MIN_MB]\n", argv[0]);
        return 2;
    }
    struct strata_error err = {0};
    struct gguf_file *f = gguf_open(argv[1], &err);
    struct tokenizer *tok = f ? tokenizer_init_gguf(f, &err) : NULL;
    gguf_close(f);
    if (!tok) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    size_t n0 = 0;
    char *text = test_read_file(argv[2], &n0);
    if (!text || !n0) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 1;
    }
    size_t want = (size_t)(argc > 3 ? atof(argv[3]) : 4.0) * 1024 * 1024, n = 0;
    char *big = malloc(want + n0);
    while (n < want) {
        memcpy(big + n, text, n0);
        n += n0;
    }
    struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
    eo.add_special = false;
    struct tokenizer_ids ids = {0};
    double t0 = now();
    if (tokenizer_encode(tok, big, n, &eo, &ids, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    double t1 = now();
    size_t len;
    char *s = tokenizer_decode(tok, ids.ids, ids.n, NULL, &len, NULL);
    double t2 = now();
    printf("%s: %.2f MB, %zu tokens; encode %.2f MB/s (%.0f tokens/s); decode %.0f MB/s\n",
           tokenizer_pre_name(tok), (double)n / 1e6, ids.n, (double)n / 1e6 / (t1 - t0),
           (double)ids.n / (t1 - t0), (double)len / 1e6 / (t2 - t1));
    free(s);
    tokenizer_ids_free(&ids);
    free(big);
    free(text);
    tokenizer_free(tok);
    return 0;
}
