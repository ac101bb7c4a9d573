/* tests/engine/text/test-tokenizer.c: golden tests of engine/tokenizer against the
 * llama.cpp vocab fixtures (shared/fixtures/vocab/ggml-vocab-*.gguf + .inp/.out,
 * as llama.cpp's test-tokenizer-0: inputs end with "\n__ggml_vocab_test__\n",
 * tokenized with add_special = false, parse_special = false), plus round trips
 * and the real models' vocabularies. */
#include <string.h>

#include "engine/gguf/gguf.h"
#include "engine/text/tokenizer.h"
#include "tests/harness.h"

/* the fixtures that carry a .gguf and .inp/.out */
static const char *const k_vocabs[] = {
    "llama-spm", "phi-3",  "gpt-2", "deepseek-coder", "deepseek-llm", "falcon",
    "starcoder", "refact", "mpt",   "bert-bge",
};
#define N_VOCABS (int)(sizeof(k_vocabs) / sizeof(*k_vocabs))
/* .inp/.out without a vocab file in shared/ (too big to carry): checked when
 * $STRATA_VOCAB_DIR/ggml-vocab-<name>.gguf exists (built from HF tokenizer.json
 * by `strata gguf vocab-from-hf`), reported as skipped otherwise */
static const char *const k_optional[] = {"qwen2", "llama-bpe"};

struct fixture {
    char *inp, *out; /* file contents (owned) */
    char **inputs;   /* (n) pointers into inp, NUL-terminated in place */
    size_t *lens;    /* (n) */
    char **expected; /* (n) lines of out */
    size_t n;
};

static void fixture_free(struct fixture *fx) {
    free(fx->inputs);
    free(fx->lens);
    free(fx->expected);
    free(fx->inp);
    free(fx->out);
}

static bool fixture_load(const char *name, struct fixture *fx) {
    char rel[256], path[1024];
    memset(fx, 0, sizeof(*fx));
    snprintf(rel, sizeof(rel), "fixtures/vocab/ggml-vocab-%s.gguf.inp", name);
    size_t n_inp = 0, n_out = 0;
    fx->inp = test_read_file(test_shared_path(path, sizeof(path), rel), &n_inp);
    snprintf(rel, sizeof(rel), "fixtures/vocab/ggml-vocab-%s.gguf.out", name);
    fx->out = test_read_file(test_shared_path(path, sizeof(path), rel), &n_out);
    if (!fx->inp || !fx->out)
        return false;
    const char *sep = "\n__ggml_vocab_test__\n";
    size_t cap = 1;
    for (char *p = fx->inp; (p = strstr(p, sep)); p += strlen(sep))
        cap++;
    fx->inputs = calloc(cap, sizeof(char *));
    fx->lens = calloc(cap, sizeof(size_t));
    fx->expected = calloc(cap, sizeof(char *));
    char *p = fx->inp;
    for (char *q; (q = strstr(p, sep)); p = q + strlen(sep)) {
        *q = '\0';
        fx->inputs[fx->n] = p;
        fx->lens[fx->n] = (size_t)(q - p);
        fx->n++;
    }
    size_t k = 0;
    for (char *line = fx->out; line && k < fx->n; k++) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        fx->expected[k] = line;
        line = nl ? nl + 1 : NULL;
    }
    return k == fx->n;
}

static struct tokenizer *open_vocab(const char *file) {
    char rel[256], path[1024];
    snprintf(rel, sizeof(rel), "%s", file);
    struct strata_error err = {0};
    struct gguf_file *f = gguf_open(test_shared_path(path, sizeof(path), rel), &err);
    ck_assert_msg(f, "%s: %s", path, err.message);
    struct tokenizer *tok = tokenizer_init_gguf(f, &err);
    ck_assert_msg(tok, "%s: %s", path, err.message);
    gguf_close(f);
    return tok;
}

static void ids_to_str(const struct tokenizer_ids *ids, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < ids->n && n + 16 < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, i ? " %d" : "%d", ids->ids[i]);
}

static void check_fixture(const char *name, struct tokenizer *tok) {
    struct fixture fx;
    ck_assert_msg(fixture_load(name, &fx), "fixture %s unreadable (STRATA_SHARED_DIR?)", name);
    struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
    eo.add_special = false;
    size_t pass = 0;
    static char got[65536];
    for (size_t i = 0; i < fx.n; i++) {
        struct tokenizer_ids ids = {0};
        struct strata_error err = {0};
        ck_assert_int_eq(tokenizer_encode(tok, fx.inputs[i], fx.lens[i], &eo, &ids, &err), 0);
        ids_to_str(&ids, got, sizeof(got));
        /* .out lines: ids separated by spaces (with a leading space) */
        bool same = true;
        size_t k = 0;
        for (char *p = fx.expected[i], *end; same; p = end) {
            long v = strtol(p, &end, 10);
            if (end == p)
                break;
            same = k < ids.n && ids.ids[k] == v;
            k++;
        }
        if (same && k == ids.n)
            pass++;
        else
            fprintf(stderr, "%s #%zu [%s]\n  want %s\n  got  %s\n", name, i, fx.inputs[i],
                    fx.expected[i], got);
        tokenizer_ids_free(&ids);
    }
    printf("vocab %-15s %zu/%zu identical\n", name, pass, fx.n);
    ck_assert_uint_eq(pass, fx.n);
    tokenizer_free(tok);
    fixture_free(&fx);
}

START_TEST(test_fixture) {
    char file[256];
    snprintf(file, sizeof(file), "fixtures/vocab/ggml-vocab-%s.gguf", k_vocabs[_i]);
    check_fixture(k_vocabs[_i], open_vocab(file));
}
END_TEST

START_TEST(test_fixture_optional) {
    const char *name = k_optional[_i], *dir = getenv("STRATA_VOCAB_DIR");
    char path[1024];
    snprintf(path, sizeof(path), "%s/ggml-vocab-%s.gguf", dir ? dir : "", name);
    struct strata_error err = {0};
    struct gguf_file *f = dir ? gguf_open(path, &err) : NULL;
    if (!f) {
        printf("vocab %-15s skipped (no %s)\n", name, dir ? path : "$STRATA_VOCAB_DIR");
        return;
    }
    struct tokenizer *tok = tokenizer_init_gguf(f, &err);
    gguf_close(f);
    ck_assert_msg(tok, "%s: %s", path, err.message);
    check_fixture(name, tok);
}
END_TEST

/* decode(encode(s)) == s for every fixture input where the vocab can spell it. */
START_TEST(test_roundtrip) {
    const char *name = k_vocabs[_i];
    if (!strcmp(name, "bert-bge"))
        return; /* WordPiece lowercases and strips accents: lossy by design */
    struct fixture fx;
    ck_assert(fixture_load(name, &fx));
    char file[256];
    snprintf(file, sizeof(file), "fixtures/vocab/ggml-vocab-%s.gguf", name);
    struct tokenizer *tok = open_vocab(file);
    struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
    eo.add_special = false;
    size_t same = 0, unk = 0;
    for (size_t i = 0; i < fx.n; i++) {
        struct tokenizer_ids ids = {0};
        ck_assert_int_eq(tokenizer_encode(tok, fx.inputs[i], fx.lens[i], &eo, &ids, NULL), 0);
        bool has_unk = false;
        for (size_t k = 0; k < ids.n; k++)
            has_unk |= ids.ids[k] == tokenizer_unk(tok);
        size_t len = 0;
        char *s = tokenizer_decode(tok, ids.ids, ids.n, NULL, &len, NULL);
        ck_assert_ptr_nonnull(s);
        if (len == fx.lens[i] && !memcmp(s, fx.inputs[i], len))
            same++;
        else if (has_unk)
            unk++;
        else
            ck_abort_msg("%s #%zu: decode(encode([%s])) = [%s]", name, i, fx.inputs[i], s);
        free(s);
        tokenizer_ids_free(&ids);
    }
    printf("roundtrip %-15s %zu/%zu identical (%zu with <unk>)\n", name, same, fx.n, unk);
    tokenizer_free(tok);
    fixture_free(&fx);
}
END_TEST

static Suite *tokenizer_suite(void) {
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("fixtures");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_fixture, 0, N_VOCABS);
    tcase_add_loop_test(tc, test_roundtrip, 0, N_VOCABS);
    tcase_add_loop_test(tc, test_fixture_optional, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("tokenizer", tokenizer_suite)
