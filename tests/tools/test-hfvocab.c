/* tests/tools/test-hfvocab.c: tokenizer.json -> vocab GGUF (tools/hfvocab/hfvocab.c)
 * on small hand-written tokenizer files: token types, merges, SPM scores,
 * special ids and flags, pre-tokenizer detection, chat templates, and clean
 * errors for bad input. Outputs are read back with gguf_open and loaded by
 * the tokenizer. (The real Qwen3 / Llama 3 / DeepSeek-V3 / Gemma 3 files are
 * covered against llama.cpp and Hugging Face by tests/peers/tok-cross.mjs.) */
#include <unistd.h>

#include "engine/gguf/gguf.h"
#include "tools/hfvocab/hfvocab.h"
#include "engine/text/tokenizer.h"
#include "tests/harness.h"

static char g_json[256], g_cfg[256], g_out[256];

static void write_text(const char *path, const char *text) {
    FILE *fp = fopen(path, "wb");
    ck_assert_ptr_nonnull(fp);
    fputs(text, fp);
    fclose(fp);
}

/* Converts json (+ cfg if not NULL) with params p (NULL = defaults). */
static int convert(const char *json, const char *cfg, struct hfvocab_params *p,
                   struct strata_error *err) {
    int pid = (int)getpid();
    snprintf(g_json, sizeof(g_json), "/tmp/strata-test-hfvocab-%d.json", pid);
    snprintf(g_cfg, sizeof(g_cfg), "/tmp/strata-test-hfvocab-%d-config.json", pid);
    snprintf(g_out, sizeof(g_out), "/tmp/strata-test-hfvocab-%d.gguf", pid);
    write_text(g_json, json);
    struct hfvocab_params d = hfvocab_params_default();
    if (!p)
        p = &d;
    if (cfg) {
        write_text(g_cfg, cfg);
        p->config_path = g_cfg;
    }
    unlink(g_out);
    int rc = hfvocab_convert(g_json, p, g_out, NULL, err);
    unlink(g_json);
    unlink(g_cfg);
    return rc;
}

static void cleanup(void) {
    unlink(g_out);
}

#define BYTELEVEL "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}"

static const char *k_gpt2 =
    "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"\xc4\xa0\":5},"
    "\"merges\":[\"a b\"]},"
    "\"pre_tokenizer\":" BYTELEVEL ",\"post_processor\":" BYTELEVEL ","
    "\"added_tokens\":[{\"id\":3,\"content\":\"<|end|>\",\"special\":false},"
    "{\"id\":4,\"content\":\"<think>\",\"special\":false},"
    "{\"id\":7,\"content\":\"<s>\",\"special\":true}]}";

static int64_t arr_int(const struct gguf_file *f, const char *key, uint64_t i) {
    struct gguf_value v;
    ck_assert_int_eq(gguf_get_arr(f, key, &v, NULL), 0);
    ck_assert_uint_lt(i, v.arr.n);
    return gguf_arr_int(&v, i);
}

/* Checks that the string key reads back as `want` (short: under 64 bytes). */
static void check_str(const struct gguf_file *f, const char *key, const char *want) {
    char buf[64];
    ck_assert_int_eq(gguf_get_str_buf(f, key, buf, sizeof(buf), NULL), 0);
    ck_assert_str_eq(buf, want);
}

static bool arr_str_eq(const struct gguf_file *f, const char *key, uint64_t i, const char *s) {
    struct gguf_value v;
    ck_assert_int_eq(gguf_get_arr(f, key, &v, NULL), 0);
    ck_assert_uint_lt(i, v.arr.n);
    return gguf_str_eq(gguf_arr_str(f, &v, i), s);
}

START_TEST(gpt2_types_merges_specials) {
    struct strata_error err = {0};
    const char *cfg =
        "{\"eos_token\":\"<|end|>\",\"bos_token\":{\"content\":\"<s>\"},"
        "\"add_bos_token\":false,\"model_max_length\":1000000000000000019884624838656,"
        "\"chat_template\":\"{{ messages }}\"}";
    ck_assert_msg(convert(k_gpt2, cfg, NULL, &err) == 0, "%s", err.message);
    struct gguf_file *f = gguf_open(g_out, &err);
    ck_assert_ptr_nonnull(f);
    check_str(f, "tokenizer.ggml.model", "gpt2");
    check_str(f, "tokenizer.ggml.pre", "gpt-2");
    check_str(f, "general.architecture", "llama");
    /* 8 tokens: ids 0..7, 6 is a hole */
    ck_assert(arr_str_eq(f, "tokenizer.ggml.tokens", 6, "[PAD6]"));
    ck_assert(arr_str_eq(f, "tokenizer.ggml.tokens", 3, "<|end|>"));
    ck_assert_int_eq(arr_int(f, "tokenizer.ggml.token_type", 0), 1); /* normal */
    ck_assert_int_eq(arr_int(f, "tokenizer.ggml.token_type", 3), 3); /* looks special */
    ck_assert_int_eq(arr_int(f, "tokenizer.ggml.token_type", 4), 4); /* user-defined */
    ck_assert_int_eq(arr_int(f, "tokenizer.ggml.token_type", 6), 5); /* unused */
    ck_assert_int_eq(arr_int(f, "tokenizer.ggml.token_type", 7), 3); /* special */
    ck_assert(arr_str_eq(f, "tokenizer.ggml.merges", 0, "a b"));
    ck_assert_int_lt(gguf_find_kv(f, "tokenizer.ggml.scores"), 0);
    uint64_t id;
    ck_assert_int_eq(gguf_get_uint(f, "tokenizer.ggml.eos_token_id", &id, NULL), 0);
    ck_assert_uint_eq(id, 3);
    ck_assert_int_eq(gguf_get_uint(f, "tokenizer.ggml.bos_token_id", &id, NULL), 0);
    ck_assert_uint_eq(id, 7);
    bool b = true;
    ck_assert_int_eq(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b, NULL), 0);
    ck_assert(!b);
    ck_assert_int_lt(gguf_find_kv(f, "tokenizer.ggml.add_eos_token"), 0);
    check_str(f, "tokenizer.chat_template", "{{ messages }}");
    /* the tokenizer loads it and applies the merge */
    struct tokenizer *tok = tokenizer_init_gguf(f, &err);
    ck_assert_msg(tok != NULL, "%s", err.message);
    struct tokenizer_ids ids = {0};
    struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
    eo.add_special = false;
    ck_assert_int_eq(tokenizer_encode(tok, "ab", 2, &eo, &ids, &err), 0);
    ck_assert_uint_eq(ids.n, 1);
    ck_assert_int_eq(ids.ids[0], 2);
    tokenizer_ids_free(&ids);
    tokenizer_free(tok);
    gguf_close(f);
    cleanup();
}
END_TEST

START_TEST(pair_merges_and_template_processing) {
    /* merges as pairs (a space inside a part becomes U+0120); no config: the
     * TemplateProcessing names BOS/EOS and sets both flags */
    const char *json = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b c\":1,\"x\":2},"
                       "\"merges\":[[\"a\",\"b c\"]]},\"pre_tokenizer\":" BYTELEVEL ","
                       "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":["
                       "{\"SpecialToken\":{\"id\":\"<B>\"}},{\"Sequence\":{\"id\":\"A\"}},"
                       "{\"SpecialToken\":{\"id\":\"<E>\"}}]},"
                       "\"added_tokens\":[{\"id\":3,\"content\":\"<B>\",\"special\":true},"
                       "{\"id\":4,\"content\":\"<E>\",\"special\":true}]}";
    struct strata_error err = {0};
    ck_assert_msg(convert(json, NULL, NULL, &err) == 0, "%s", err.message);
    struct gguf_file *f = gguf_open(g_out, &err);
    ck_assert_ptr_nonnull(f);
    ck_assert(arr_str_eq(f, "tokenizer.ggml.merges", 0,
                         "a b\xc4\xa0"
                         "c"));
    uint64_t id;
    bool b = false;
    ck_assert_int_eq(gguf_get_uint(f, "tokenizer.ggml.bos_token_id", &id, NULL), 0);
    ck_assert_uint_eq(id, 3);
    ck_assert_int_eq(gguf_get_uint(f, "tokenizer.ggml.eos_token_id", &id, NULL), 0);
    ck_assert_uint_eq(id, 4);
    ck_assert_int_eq(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b, NULL), 0);
    ck_assert(b);
    ck_assert_int_eq(gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &b, NULL), 0);
    ck_assert(b);
    gguf_close(f);
    cleanup();
}
END_TEST

START_TEST(spm_scores_types) {
    /* SentencePiece-style BPE: byte_fallback, unk, byte pieces, merge ranks as scores */
    const char *json =
        "{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"unk_token\":\"<unk>\","
        "\"vocab\":{\"<unk>\":0,\"<0x0A>\":1,\"<0x41>\":2,\"\xe2\x96\x81\":3,\"a\":4,\"b\":5,"
        "\"ab\":6,\"\xe2\x96\x81"
        "ab\":7,\"\xe2\x96\x81\xe2\x96\x81\":8},"
        "\"merges\":[[\"a\",\"b\"],[\"\xe2\x96\x81\",\"ab\"],\"\xe2\x96\x81 \xe2\x96\x81\"]},"
        "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\","
        "\"prepend\":\"\xe2\x96\x81\"},{\"type\":\"Replace\"}]},"
        "\"added_tokens\":[{\"id\":8,\"content\":\"\xe2\x96\x81\xe2\x96\x81\",\"special\":false},"
        "{\"id\":9,\"content\":\"<unused0>\",\"special\":false}]}";
    struct strata_error err = {0};
    struct hfvocab_params p = hfvocab_params_default();
    p.vocab_size = 12;
    ck_assert_msg(convert(json, NULL, &p, &err) == 0, "%s", err.message);
    struct gguf_file *f = gguf_open(g_out, &err);
    ck_assert_ptr_nonnull(f);
    check_str(f, "tokenizer.ggml.model", "llama");
    check_str(f, "tokenizer.ggml.pre", "default");
    ck_assert_int_lt(gguf_find_kv(f, "tokenizer.ggml.merges"), 0);
    struct gguf_value sc;
    ck_assert_int_eq(gguf_get_arr(f, "tokenizer.ggml.scores", &sc, NULL), 0);
    ck_assert_uint_eq(sc.arr.n, 12);
    ck_assert(gguf_arr_float(&sc, 6) == 0.0);                         /* first merge */
    ck_assert(gguf_arr_float(&sc, 7) == -1.0);                        /* second merge */
    ck_assert(gguf_arr_float(&sc, 8) == -1000.0);                     /* added token */
    ck_assert(gguf_arr_float(&sc, 4) < gguf_arr_float(&sc, 7));       /* never a merge result */
    ck_assert_int_eq(arr_int(f, "tokenizer.ggml.token_type", 0), 2);  /* unknown */
    ck_assert_int_eq(arr_int(f, "tokenizer.ggml.token_type", 2), 6);  /* byte */
    ck_assert_int_eq(arr_int(f, "tokenizer.ggml.token_type", 8), 4);  /* user-defined */
    ck_assert(arr_str_eq(f, "tokenizer.ggml.tokens", 8, "  "));       /* U+2581 -> ' ' */
    ck_assert_int_eq(arr_int(f, "tokenizer.ggml.token_type", 9), 3);  /* <unused..> control */
    ck_assert_int_eq(arr_int(f, "tokenizer.ggml.token_type", 11), 5); /* padding */
    bool b = false;
    ck_assert_int_eq(gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &b, NULL), 0);
    ck_assert(b);
    struct tokenizer *tok = tokenizer_init_gguf(f, &err);
    ck_assert_msg(tok != NULL, "%s", err.message);
    struct tokenizer_ids ids = {0};
    struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
    eo.add_special = false;
    ck_assert_int_eq(tokenizer_encode(tok, "ab", 2, &eo, &ids, &err), 0);
    ck_assert_uint_eq(ids.n, 1);
    ck_assert_int_eq(ids.ids[0], 7); /* "▁ab" */
    tokenizer_ids_free(&ids);
    tokenizer_free(tok);
    gguf_close(f);
    cleanup();
}
END_TEST

START_TEST(pre_detection_and_override) {
    struct strata_error err = {0};
    const char *qwen =
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
        "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
        "\"pattern\":{\"Regex\":\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?"
        "\\\\p{L}+|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!"
        "\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\"},{\"type\":\"ByteLevel\",\"use_regex\":false}]}"
        ","
        "\"added_tokens\":[]}";
    ck_assert_msg(convert(qwen, NULL, NULL, &err) == 0, "%s", err.message);
    struct gguf_file *f = gguf_open(g_out, &err);
    check_str(f, "tokenizer.ggml.pre", "qwen2");
    gguf_close(f);
    /* an unknown regex is refused, naming it; --pre overrides */
    const char *odd = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
                      "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\d+\"}}}";
    ck_assert_int_eq(convert(odd, NULL, NULL, &err), STRATA_E_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "--pre"));
    ck_assert_int_ne(access(g_out, F_OK), 0); /* nothing written */
    struct hfvocab_params p = hfvocab_params_default();
    p.pre = "default";
    ck_assert_msg(convert(odd, NULL, &p, &err) == 0, "%s", err.message);
    cleanup();
}
END_TEST

START_TEST(bad_input_is_an_error) {
    struct strata_error err = {0};
    static const struct {
        const char *json;
        int code;
    } cases[] = {
        {"{\"model\":", STRATA_E_FORMAT},
        {"[1,2]", STRATA_E_FORMAT},
        {"{}", STRATA_E_FORMAT},
        {"{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", STRATA_E_UNSUPPORTED},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{}}}", STRATA_E_FORMAT},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1}}}", STRATA_E_FORMAT},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":99999999999}}}", STRATA_E_FORMAT},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":\"0\"}}}", STRATA_E_FORMAT},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]},"
         "\"pre_tokenizer\":" BYTELEVEL "}",
         STRATA_E_FORMAT},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"pre_tokenizer\":" BYTELEVEL "}",
         STRATA_E_FORMAT}, /* no merges */
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"ab\"]},"
         "\"pre_tokenizer\":" BYTELEVEL "}",
         STRATA_E_FORMAT},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[[1,2]]},"
         "\"pre_tokenizer\":" BYTELEVEL "}",
         STRATA_E_FORMAT},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
         "\"pre_tokenizer\":" BYTELEVEL ",\"added_tokens\":[{\"id\":1}]}",
         STRATA_E_FORMAT},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
         "\"pre_tokenizer\":" BYTELEVEL ",\"added_tokens\":{}}",
         STRATA_E_FORMAT},
        {"{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{\"a\":0},"
         "\"merges\":[7]}}",
         STRATA_E_FORMAT},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        strata_error_clear(&err);
        int rc = convert(cases[i].json, NULL, NULL, &err);
        ck_assert_msg(rc == cases[i].code, "case %zu: got %d (%s)", i, rc, err.message);
        ck_assert_msg(err.message[0] != '\0', "case %zu: no message", i);
        ck_assert_int_ne(access(g_out, F_OK), 0);
    }
    /* ids mostly holes: refused before allocating them */
    ck_assert_int_eq(convert("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":4000000},"
                             "\"merges\":[]},\"pre_tokenizer\":" BYTELEVEL "}",
                             NULL, NULL, &err),
                     STRATA_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.message, "sparse"));
    /* vocab size below the largest id; a bad config file; missing input */
    struct hfvocab_params p = hfvocab_params_default();
    p.vocab_size = 2;
    ck_assert_int_eq(convert(k_gpt2, NULL, &p, &err), STRATA_E_RANGE);
    ck_assert_int_eq(convert(k_gpt2, "{\"eos_token\":", NULL, &err), STRATA_E_FORMAT);
    ck_assert_int_eq(
        hfvocab_convert("/nonexistent/tokenizer.json", NULL, "/tmp/x.gguf", NULL, &err),
        STRATA_E_IO);
    ck_assert_int_eq(hfvocab_convert(NULL, NULL, NULL, NULL, NULL), STRATA_E_INVALID);
}
END_TEST

START_TEST(named_chat_templates) {
    struct strata_error err = {0};
    const char *cfg = "{\"chat_template\":[{\"name\":\"default\",\"template\":\"D\"},"
                      "{\"name\":\"tool_use\",\"template\":\"T\"},{\"bogus\":1}]}";
    ck_assert_msg(convert(k_gpt2, cfg, NULL, &err) == 0, "%s", err.message);
    struct gguf_file *f = gguf_open(g_out, &err);
    check_str(f, "tokenizer.chat_template", "D");
    check_str(f, "tokenizer.chat_template.tool_use", "T");
    gguf_close(f);
    cleanup();
}
END_TEST

START_TEST(model_config_json) {
    /* config.json pads the vocabulary and fills special ids left unset */
    struct strata_error err = {0};
    char mc[256];
    snprintf(mc, sizeof(mc), "/tmp/strata-test-hfvocab-%d-model.json", (int)getpid());
    write_text(mc, "{\"vocab_size\": 16, \"bos_token_id\": 7, \"eos_token_id\": [1, 2],"
                   "\"pad_token_id\": 99, \"rope_theta\": 1e30}");
    struct hfvocab_params p = hfvocab_params_default();
    p.model_config_path = mc;
    int rc = convert(k_gpt2, "{\"eos_token\":\"<|end|>\"}", &p, &err);
    unlink(mc);
    ck_assert_msg(rc == 0, "%s", err.message);
    struct gguf_file *f = gguf_open(g_out, &err);
    ck_assert_ptr_nonnull(f);
    struct gguf_value toks;
    ck_assert_int_eq(gguf_get_arr(f, "tokenizer.ggml.tokens", &toks, NULL), 0);
    ck_assert_uint_eq(toks.arr.n, 16);
    uint64_t id;
    ck_assert_int_eq(gguf_get_uint(f, "tokenizer.ggml.bos_token_id", &id, NULL), 0);
    ck_assert_uint_eq(id, 7);
    ck_assert_int_eq(gguf_get_uint(f, "tokenizer.ggml.eos_token_id", &id, NULL), 0);
    ck_assert_uint_eq(id, 3); /* tokenizer_config.json wins */
    ck_assert_int_lt(gguf_find_kv(f, "tokenizer.ggml.padding_token_id"), 0); /* 99 >= 16 */
    gguf_close(f);
    cleanup();
}
END_TEST

static Suite *hfvocab_suite(void) {
    Suite *s = suite_create("hfvocab");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, gpt2_types_merges_specials);
    tcase_add_test(tc, pair_merges_and_template_processing);
    tcase_add_test(tc, spm_scores_types);
    tcase_add_test(tc, pre_detection_and_override);
    tcase_add_test(tc, bad_input_is_an_error);
    tcase_add_test(tc, named_chat_templates);
    tcase_add_test(tc, model_config_json);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("hfvocab", hfvocab_suite)
