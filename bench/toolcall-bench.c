/* bench/toolcall-bench.c: the output parser's cost a feed (engine/text/
 * toolcall.h), as the server feeds it: a long answer with no call (the
 * common case: it must not be rescanned per token), then the same with a
 * call at its end, in pieces of 4 bytes (about a token of English).
 *
 * usage: toolcall-bench [KiB]   (default 64) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/clock.h"
#include "engine/text/toolcall.h"

static double run(const char *text, size_t n, const char *family, int *n_calls) {
    struct toolcall_parser_params pp = toolcall_parser_params_default();
    pp.family = toolcall_family_by_name(family);
    pp.tools = true;
    struct toolcall_parser *p = toolcall_parser_init(&pp, NULL);
    if (!p)
        return -1;
    struct toolcall_delta d;
    double t0 = strata_now();
    for (size_t i = 0; i < n; i += 4)
        toolcall_parser_feed(p, text + i, n - i < 4 ? n - i : 4, false, &d, NULL);
    toolcall_parser_feed(p, "", 0, true, &d, NULL);
    double t = strata_now() - t0;
    *n_calls = toolcall_parser_n_calls(p);
    toolcall_parser_free(p);
    return t;
}

int main(int argc, char **argv) {
    size_t kib = argc > 1 ? (size_t)atoi(argv[1]) : 64;
    if (kib < 1 || kib > 65536)
        kib = 64;
    const char *call =
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"
        "\n</tool_call>";
    size_t n = kib * 1024, m = strlen(call);
    char *text = malloc(n + m + 1);
    if (!text)
        return 1;
    /* prose with '<' now and then, which the parser must consider */
    static const char prose[] = "The weather <b>in</b> Paris is mild; take a coat. ";
    for (size_t i = 0; i < n; i++)
        text[i] = prose[i % (sizeof prose - 1)];
    memcpy(text + n, call, m + 1);
    int calls = 0;
    double a = run(text, n, "hermes", &calls);
    printf("%zu KiB of content, no call: %.2f ms, %.3f us a 4-byte feed (%d calls)\n", kib, a * 1e3,
           a * 1e6 / (double)(n / 4), calls);
    double b = run(text, n + m, "hermes", &calls);
    printf("%zu KiB of content, then a call: %.2f ms, %.3f us a 4-byte feed (%d calls)\n", kib,
           b * 1e3, b * 1e6 / (double)((n + m) / 4), calls);
    free(text);
    return 0;
}
