/* tests/engine/text/test-tokenizer-vocab.c: tokenizer construction and algorithm
 * details on small synthetic vocabularies written with the GGUF writer:
 * SPM merge order by score, byte fallback without byte tokens, BPE merge
 * order by rank, malformed / unsupported metadata. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/gguf/gguf.h"
#include "engine/text/tokenizer.h"
#include "tests/harness.h"

struct vocab_spec {
    const char *model; /* tokenizer.ggml.model, NULL = absent */
    const char *pre;   /* tokenizer.ggml.pre, NULL = absent */
    const char *const *tokens;
    const float *scores;
    const int32_t *types;
    uint64_t n;
    const char *const *merges;
    uint64_t n_merges;
    int64_t bos; /* -1: absent */
};

/* Writes the spec to a temp file and builds a tokenizer (NULL + err on failure). */
static struct tokenizer *build(const struct vocab_spec *v, struct strata_error *err) {
    char path[] = "/tmp/strata-tok-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    struct gguf_writer *w = gguf_writer_init(path, NULL);
    ck_assert_ptr_nonnull(w);
    gguf_writer_set_str(w, "general.architecture", "llama", NULL);
    if (v->model)
        gguf_writer_set_str(w, "tokenizer.ggml.model", v->model, NULL);
    if (v->pre)
        gguf_writer_set_str(w, "tokenizer.ggml.pre", v->pre, NULL);
    if (v->tokens)
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", v->tokens, NULL, v->n, NULL);
    if (v->scores)
        gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v->scores, v->n, NULL);
    if (v->types)
        gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->types, v->n, NULL);
    if (v->merges)
        gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", v->merges, NULL, v->n_merges, NULL);
    if (v->bos >= 0)
        gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos, NULL);
    ck_assert_int_eq(gguf_writer_begin(w, NULL), 0);
    ck_assert_int_eq(gguf_writer_finish(w, NULL), 0);
    gguf_writer_free(w);
    struct gguf_file *f = gguf_open(path, err);
    ck_assert_ptr_nonnull(f);
    struct tokenizer *tok = tokenizer_init_gguf(f, err);
    gguf_close(f);
    unlink(path);
    return tok;
}

static void expect_ids(const struct tokenizer *tok, const char *text, const int32_t *want,
                       size_t n) {
    struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
    eo.add_special = false;
    struct tokenizer_ids ids = {0};
    ck_assert_int_eq(tokenizer_encode(tok, text, strlen(text), &eo, &ids, NULL), 0);
    char got[256] = "";
    for (size_t i = 0; i < ids.n; i++)
        snprintf(got + strlen(got), sizeof(got) - strlen(got), " %d", ids.ids[i]);
    ck_assert_msg(ids.n == n && !memcmp(ids.ids, want, n * sizeof(int32_t)), "[%s] -> %s", text,
                  got);
    tokenizer_ids_free(&ids);
}

#define S "\xe2\x96\x81" /* U+2581 */
static const char *const spm_tokens[] = {"<unk>", "<s>", "</s>", S,     "a",
                                         "b",     "ab",  "bb",   S "a", ""};
static const int32_t spm_types[] = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1};

START_TEST(test_spm_score_order) {
    /* "abb": pairs "ab" and "bb"; the higher score merges first */
    float sc[10] = {0, 0, 0, -1, -1, -1, -2, -3, -5, 0};
    struct vocab_spec v = {"llama", NULL, spm_tokens, sc, spm_types, 10, NULL, 0, -1};
    struct strata_error err = {0};
    struct tokenizer *tok = build(&v, &err);
    ck_assert_msg(tok, "%s", err.message);
    /* "ab" (-2) wins; "▁a" (-5) then finds its "a" taken */
    expect_ids(tok, "abb", (int32_t[]){3, 6, 5}, 3);
    tokenizer_free(tok);
    sc[7] = -1.5f; /* now "bb" beats "ab", which leaves "a" free for "▁a" */
    tok = build(&v, &err);
    expect_ids(tok, "abb", (int32_t[]){8, 7}, 2);
    /* no <0xXX> tokens: an unknown character becomes <unk> per byte */
    expect_ids(tok, "z\xc3\xa9", (int32_t[]){3, 0, 0, 0}, 4);
    /* the empty token became "[EMPTY_9]", as llama.cpp names it */
    size_t len;
    ck_assert_str_eq(tokenizer_piece(tok, 9, &len), "[EMPTY_9]");
    ck_assert_int_eq(tokenizer_bos(tok), 1);
    ck_assert_int_eq(tokenizer_unk(tok), 0);
    ck_assert(tokenizer_is_eog(tok, 2));
    tokenizer_free(tok);
}
END_TEST

/* byte-level BPE: "Ġ" is the GPT-2 form of ' ' */
#define G "\xc4\xa0"
static const char *const bpe_tokens[] = {"a", "b", "c", G, "ab", "bc", G "a", "<|endoftext|>"};
static const int32_t bpe_types[] = {1, 1, 1, 1, 1, 1, 1, 3};

START_TEST(test_bpe_rank_order) {
    const char *m1[] = {"b c", "a b", G " a"}; /* "b c" ranks first */
    struct vocab_spec v = {"gpt2", "gpt-2", bpe_tokens, NULL, bpe_types, 8, m1, 3, -1};
    struct strata_error err = {0};
    struct tokenizer *tok = build(&v, &err);
    ck_assert_msg(tok, "%s", err.message);
    expect_ids(tok, "abc", (int32_t[]){0, 5}, 2);
    expect_ids(tok, " abc", (int32_t[]){6, 5}, 2); /* " abc" is one word: Ġa + bc */
    ck_assert_int_eq(tokenizer_eos(tok), -1);      /* the default 11 lies outside */
    ck_assert(tokenizer_is_eog(tok, 7));           /* <|endoftext|> by text */
    tokenizer_free(tok);
    const char *m2[] = {"a b", "b c", G " a"};
    v.merges = m2;
    tok = build(&v, &err);
    expect_ids(tok, "abc", (int32_t[]){4, 2}, 2);
    /* a character with no token and no single-byte token is dropped (llama.cpp) */
    expect_ids(tok, "a\xc3\xa9", (int32_t[]){0}, 1);
    tokenizer_free(tok);
}
END_TEST

START_TEST(test_bad_metadata) {
    struct strata_error err = {0};
    float sc[10] = {0};
    struct vocab_spec v = {NULL, NULL, spm_tokens, sc, spm_types, 10, NULL, 0, -1};
    ck_assert_ptr_null(build(&v, &err)); /* no tokenizer.ggml.model */
    ck_assert_int_eq(err.code, STRATA_E_FORMAT);
    v.model = "ugm-unknown";
    ck_assert_ptr_null(build(&v, &err));
    ck_assert_int_eq(err.code, STRATA_E_UNSUPPORTED);
    v.model = "llama";
    v.tokens = NULL;
    ck_assert_ptr_null(build(&v, &err)); /* no token list */
    ck_assert_int_eq(err.code, STRATA_E_FORMAT);
    struct vocab_spec b = {"gpt2", "gpt-2", bpe_tokens, NULL, bpe_types, 8, NULL, 0, -1};
    ck_assert_ptr_null(build(&b, &err)); /* gpt2 without merges */
    ck_assert_int_eq(err.code, STRATA_E_FORMAT);
    const char *m[] = {"a b", "nospace", ""};
    b.merges = m;
    b.n_merges = 3;
    b.pre = "no-such-pre";
    ck_assert_ptr_null(build(&b, &err));
    ck_assert_int_eq(err.code, STRATA_E_UNSUPPORTED);
    b.pre = "qwen2"; /* merges without a space are kept as empty pairs, harmlessly */
    struct tokenizer *tok = build(&b, &err);
    ck_assert_msg(tok, "%s", err.message);
    expect_ids(tok, "ab", (int32_t[]){4}, 1);
    tokenizer_free(tok);
    /* a bos id past the vocab keeps the default */
    v.tokens = spm_tokens;
    v.bos = 1000;
    tok = build(&v, &err);
    ck_assert_ptr_nonnull(tok);
    ck_assert_int_eq(tokenizer_bos(tok), 1);
    tokenizer_free(tok);
}
END_TEST

static Suite *vocab_suite(void) {
    Suite *s = suite_create("tokenizer-vocab");
    TCase *tc = tcase_create("vocab");
    tcase_add_test(tc, test_spm_score_order);
    tcase_add_test(tc, test_bpe_rank_order);
    tcase_add_test(tc, test_bad_metadata);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("tokenizer-vocab", vocab_suite)
