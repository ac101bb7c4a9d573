/* tests/engine/grammar/test-grammar.c: engine/grammar: the builder's
 * nodes, the JSON terminals (strings of valid UTF-8 with escapes, numbers,
 * bounded whitespace), every supported JSON Schema feature on byte strings
 * that must match and that must not, the errors (unsupported keywords
 * named with their JSON pointer, invalid schemas, left recursion), the
 * token mask on real vocabularies (SentencePiece and byte-level BPE:
 * ../shared/fixtures/vocab), and a random-token fuzz through the session:
 * random logits, constrained picks until the grammar ends, the text must
 * parse (jansson) and validate (a checker written for the schema).
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/rng.h"
#include "engine/gguf/gguf.h"
#include "engine/grammar/grammar.h"
#include "engine/session/session.h"
#include "tests/harness.h"

static struct grammar *schema_grammar(const char *schema_text, struct strata_error *err) {
    json_error_t je;
    json_t *s = json_loads(schema_text, JSON_DECODE_ANY, &je);
    ck_assert_msg(s != NULL, "schema text: %s", je.text);
    struct grammar_builder *b = grammar_builder_init(err);
    ck_assert(b != NULL);
    int root = grammar_json_schema(b, s, err);
    struct grammar *g = root < 0 ? NULL : grammar_build(b, root, err);
    grammar_builder_free(b);
    json_decref(s);
    return g;
}

static void expect(const struct grammar *g, const char *text, int want) {
    struct strata_error err = {0};
    int rc = grammar_match(g, text, strlen(text), &err);
    ck_assert_msg(rc == want, "'%s': got %d, want %d (%s)", text, rc, want, err.message);
}

#define FULL 1
#define PREFIX 0
#define NO STRATA_E_INVALID

START_TEST(builder_nodes) {
    struct strata_error err = {0};
    struct grammar_builder *b = grammar_builder_init(&err);
    int a = grammar_lit(b, "ab", 2, &err), c = grammar_lit(b, "c", 1, &err);
    int alt = grammar_alt(b, (int[]){a, c}, 2, &err);
    int rep = grammar_repeat(b, alt, 1, 3, &err);
    int end = grammar_lit(b, "!", 1, &err);
    int root = grammar_seq(b, (int[]){rep, end}, 2, &err);
    ck_assert_int_ge(root, 0);
    struct grammar *g = grammar_build(b, root, &err);
    ck_assert_msg(g != NULL, "%s", err.message);
    expect(g, "ab!", FULL);
    expect(g, "cab!", FULL);
    expect(g, "ccc!", FULL);
    expect(g, "cccc!", NO);
    expect(g, "!", NO);
    expect(g, "a", PREFIX);
    expect(g, "", PREFIX);
    expect(g, "ac", NO);
    grammar_free(g);
    /* bad ids, bad repeat counts, unbounded repeat of an empty node */
    ck_assert_int_eq(grammar_seq(b, (int[]){999}, 1, &err), STRATA_E_INVALID);
    ck_assert_int_eq(grammar_repeat(b, a, 3, 2, &err), STRATA_E_INVALID);
    int empty = grammar_seq(b, NULL, 0, &err);
    int bad = grammar_repeat(b, empty, 0, -1, &err);
    ck_assert_int_ge(bad, 0);
    ck_assert(grammar_build(b, bad, &err) == NULL);
    ck_assert_int_eq(err.code, STRATA_E_INVALID);
    grammar_builder_free(b);
}
END_TEST

START_TEST(json_value_syntax) {
    struct strata_error err = {0};
    struct grammar_builder *b = grammar_builder_init(&err);
    int v = grammar_json_value(b, &err);
    struct grammar *g = grammar_build(b, v, &err);
    ck_assert_msg(g != NULL, "%s", err.message);
    const char *ok[] = {"0",
                        "-1",
                        "12.5e-3",
                        "1E+10",
                        "true",
                        "false",
                        "null",
                        "\"\"",
                        "\"a\\\"b\\\\c\\/\\n\\u00e9\"",
                        "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"",
                        "[]",
                        "[ ]",
                        "[1,2]",
                        "[1, 2]",
                        "{}",
                        "{\"a\":1}",
                        "{\"a\": [true, {}]}",
                        "{\n  \"a\": 1,\n  \"b\": 2\n}",
                        "[\n\t1\n]"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        expect(g, ok[i], FULL);
    const char *no[] = {"01",
                        "-a",
                        "1.e",
                        ".5",
                        "1e+-",
                        "+1",
                        "tru e",
                        "\"\x01\"",
                        "\"\\x\"",
                        "\"\\ud800\"",
                        "\"\\u0000\"",
                        "\"\xc3\x28\"",
                        "\"\xe0\x80\x80\"",
                        "\"\xed\xa0\x80\"",
                        "\"\xf5\x80\x80\x80\"",
                        "[1,]",
                        "{\"a\"}",
                        "{\"a\":1,}",
                        "[1  ,2]",
                        "{  }",
                        "[\n                  1]",
                        "1234567890123456789",
                        "1.1234567890123456789",
                        "1e123",
                        "{,}"};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        expect(g, no[i], NO);
    expect(g, "\"abc", PREFIX);
    expect(g, "-", PREFIX);
    expect(g, "1.", PREFIX);
    expect(g, "1e-", PREFIX);
    expect(g, "[1, {\"a\": ", PREFIX);
    expect(g, "\"\xe2\x82", PREFIX); /* half a character */
    grammar_free(g);
    grammar_builder_free(b);
}
END_TEST

struct case_ {
    const char *schema;
    const char *ok[8];
    const char *no[8];
};

static const struct case_ cases[] = {
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
     "\"string\"}},\"required\":[\"a\"],\"additionalProperties\":false}",
     {"{\"a\":1}", "{\"a\":1,\"b\":\"x\"}", "{ \"a\": -5, \"b\": \"\" }"},
     {"{}", "{\"b\":\"x\"}", "{\"b\":\"x\",\"a\":1}", "{\"a\":1.5}", "{\"a\":1,\"c\":2}",
      "{\"a\":\"1\"}"}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":2}",
     {"[true]", "[false, true]"},
     {"[]", "[true,true,true]", "[1]", "[null]"}},
    {"{\"type\":\"array\",\"maxItems\":0}", {"[]"}, {"[1]"}},
    {"{\"enum\":[\"red\",1,null,{\"k\":[1]}]}",
     {"\"red\"", "1", "null", "{\"k\":[1]}"},
     {"\"blue\"", "2", "{\"k\":[2]}"}},
    {"{\"type\":\"string\",\"enum\":[\"a\",1]}", {"\"a\""}, {"1"}},
    {"{\"const\":\"fixed\"}", {"\"fixed\""}, {"\"other\""}},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
     {"\"ab\"", "\"abc\"", "\"\xc3\xa9\xc3\xa9\"", "\"\\n\\u00e9\""},
     {"\"a\"", "\"abcd\"", "\"\xc3\xa9\"", "5"}},
    {"{\"type\":\"integer\",\"minimum\":-3,\"maximum\":12}",
     {"-3", "0", "9", "12", "10"},
     {"-4", "13", "100", "-0", "1.0", "007"}},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":3}",
     {"1", "2"},
     {"0", "3"}},
    {"{\"type\":\"number\"}", {"1", "-0.5", "3e2"}, {"\"1\"", "NaN"}},
    {"{\"type\":[\"string\",\"null\"]}", {"\"x\"", "null"}, {"1", "true"}},
    {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"object\",\"properties\":{\"x\":{\"type\":"
     "\"null\"}},\"required\":[\"x\"]}]}",
     {"5", "{\"x\":null}"},
     {"\"5\"", "{}"}},
    {"{\"oneOf\":[{\"const\":1},{\"const\":2}]}", {"1", "2"}, {"3"}},
    {"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
     "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]}},\"required\":["
     "\"v\",\"next\"]}},\"$ref\":\"#/$defs/node\"}",
     {"{\"v\":1,\"next\":null}", "{\"v\":1,\"next\":{\"v\":2,\"next\":null}}"},
     {"{\"v\":1}", "{\"v\":1,\"next\":{\"v\":2}}"}},
    {"{\"definitions\":{\"s\":{\"type\":\"string\",\"maxLength\":1}},\"type\":\"object\","
     "\"properties\":{\"a\":{\"$ref\":\"#/definitions/s\"}},\"required\":[\"a\"]}",
     {"{\"a\":\"x\"}"},
     {"{\"a\":\"xy\"}"}},
    {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}",
     {"{}", "{\"any\":1,\"key\":2}"},
     {"{\"a\":\"1\"}"}},
    {"{\"type\":\"object\"}", {"{}", "{\"a\":[1,{\"b\":null}]}"}, {"[]"}},
    {"{\"type\":\"object\",\"properties\":{\"o1\":{\"type\":\"null\"},\"o2\":{\"type\":\"null\"},"
     "\"r\":{\"type\":\"null\"}},\"required\":[\"r\"],\"description\":\"d\",\"title\":\"t\","
     "\"$schema\":\"x\"}",
     {"{\"r\":null}", "{\"o1\":null,\"r\":null}", "{\"o2\":null,\"r\":null}",
      "{\"o1\":null,\"o2\":null,\"r\":null}"},
     {"{\"o1\":null}", "{\"r\":null,\"o1\":null}", "{,\"r\":null}"}},
    {"true", {"1", "{}"}, {"x"}},
    {"{\"allOf\":[{\"type\":\"boolean\"}]}", {"true"}, {"1"}},
};

START_TEST(schema_features) {
    const struct case_ *c = &cases[_i];
    struct strata_error err = {0};
    struct grammar *g = schema_grammar(c->schema, &err);
    ck_assert_msg(g != NULL, "%s: %s", c->schema, err.message);
    for (int i = 0; i < 8 && c->ok[i]; i++)
        expect(g, c->ok[i], FULL);
    for (int i = 0; i < 8 && c->no[i]; i++) {
        int rc = grammar_match(g, c->no[i], strlen(c->no[i]), &err);
        ck_assert_msg(rc != FULL, "%s: '%s' matched", c->schema, c->no[i]);
    }
    grammar_free(g);
}
END_TEST

struct err_case {
    const char *schema;
    int code;
    const char *needle;
};

static const struct err_case errs[] = {
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"x\"}}}",
     STRATA_E_UNSUPPORTED, "'pattern' is not supported (at /properties/a)"},
    {"{\"patternProperties\":{}}", STRATA_E_UNSUPPORTED, "'patternProperties'"},
    {"{\"type\":\"string\",\"format\":\"email\"}", STRATA_E_UNSUPPORTED, "'format'"},
    {"{\"type\":\"number\",\"minimum\":1}", STRATA_E_UNSUPPORTED, "'minimum'"},
    {"{\"type\":\"array\",\"items\":[{}]}", STRATA_E_UNSUPPORTED, "'items'"},
    {"{\"type\":\"array\",\"prefixItems\":[]}", STRATA_E_UNSUPPORTED, "'prefixItems'"},
    {"{\"allOf\":[{},{}]}", STRATA_E_UNSUPPORTED, "'allOf'"},
    {"{\"type\":\"integer\",\"multipleOf\":2}", STRATA_E_UNSUPPORTED, "'multipleOf'"},
    {"{\"$ref\":\"#/$defs/none\"}", STRATA_E_INVALID, "'#/$defs/none'"},
    {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", STRATA_E_INVALID, "minLength"},
    {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", STRATA_E_INVALID, "minItems"},
    {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", STRATA_E_INVALID, "range is empty"},
    {"{\"type\":\"strin\"}", STRATA_E_INVALID, "'strin'"},
    {"{\"type\":\"string\",\"minLength\":-1}", STRATA_E_INVALID, "minLength"},
    {"{\"type\":\"object\",\"properties\":[]}", STRATA_E_INVALID, "properties"},
    {"{\"required\":[\"x\"],\"additionalProperties\":false}", STRATA_E_INVALID, "'x'"},
    {"{\"anyOf\":[]}", STRATA_E_INVALID, "anyOf"},
    {"false", STRATA_E_INVALID, "false"},
    {"{\"$ref\":\"#\"}", STRATA_E_INVALID, "left recursion"},
    {"{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}", STRATA_E_INVALID, "left recursion"},
    {"{\"type\":\"string\",\"enum\":[1,2]}", STRATA_E_INVALID, "enum"},
};

START_TEST(schema_errors) {
    const struct err_case *c = &errs[_i];
    struct strata_error err = {0};
    struct grammar *g = schema_grammar(c->schema, &err);
    ck_assert_msg(g == NULL, "%s compiled", c->schema);
    ck_assert_msg(err.code == c->code, "%s: code %d (%s)", c->schema, err.code, err.message);
    ck_assert_msg(strstr(err.message, c->needle), "%s: '%s' lacks '%s'", c->schema, err.message,
                  c->needle);
}
END_TEST

START_TEST(schema_limits) {
    /* 70 levels of nested arrays: refused, not a stack overflow */
    char s[2048] = "";
    for (int i = 0; i < 70; i++)
        strcat(s, "{\"type\":\"array\",\"items\":");
    strcat(s, "{}");
    for (int i = 0; i < 70; i++)
        strcat(s, "}");
    struct strata_error err = {0};
    ck_assert(schema_grammar(s, &err) == NULL);
    ck_assert_msg(strstr(err.message, "deeper than 64"), "%s", err.message);
}
END_TEST

/* Every optional property stays reachable (each is a thread at '{'), up to
 * the compiler's 256; 257 is refused rather than silently cut. */
START_TEST(many_optional) {
    for (int n = 200; n <= 257; n += 57) {
        json_t *props = json_object();
        for (int i = 0; i < n; i++) {
            char k[16];
            snprintf(k, sizeof k, "p%d", i);
            json_object_set_new(props, k, json_pack("{s:s}", "type", "integer"));
        }
        json_t *sch = json_pack("{s:s,s:o}", "type", "object", "properties", props);
        char *text = json_dumps(sch, JSON_COMPACT);
        struct strata_error err = {0};
        struct grammar *g = schema_grammar(text, &err);
        if (n == 200) {
            ck_assert_msg(g != NULL, "%s", err.message);
            expect(g, "{\"p3\":1,\"p150\":2,\"p199\":3}", FULL);
            expect(g, "{\"p150\":2,\"p3\":1}", NO);
        } else {
            ck_assert(g == NULL && err.code == STRATA_E_LIMIT);
        }
        grammar_free(g);
        free(text);
        json_decref(sch);
    }
}
END_TEST

/* ---- on a real vocabulary --------------------------------------------------- */

static struct session_base *open_base(const char *rel) {
    char path[1024];
    struct strata_error err = {0};
    struct gguf_file *f = gguf_open(test_shared_path(path, sizeof path, rel), &err);
    ck_assert_msg(f != NULL, "%s: %s", path, err.message);
    struct session_base_params bp = session_base_params_default();
    bp.gguf = f;
    const struct gguf_kv *kv = NULL;
    (void)kv;
    bp.n_vocab = 0;
    struct session_base *b = NULL;
    /* the vocabulary size from a throwaway base's tokenizer */
    bp.n_vocab = 1;
    bp.n_ctx = 4096;
    b = session_base_init(&bp, &err);
    ck_assert_msg(b != NULL, "%s", err.message);
    bp.n_vocab = tokenizer_n_vocab(session_base_tokenizer(b));
    session_base_free(b);
    b = session_base_init(&bp, &err);
    ck_assert_msg(b != NULL, "%s", err.message);
    gguf_close(f);
    return b;
}

/* The rich schema of the fuzz, and a checker that knows it. */
static const char *rich =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":12},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",\"c\"]},\"maxItems\":3},"
    "\"kind\":{\"const\":\"person\"},"
    "\"score\":{\"type\":[\"number\",\"null\"]},"
    "\"child\":{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"object\",\"properties\":{\"ok\":{"
    "\"type\":\"boolean\"}},\"required\":[\"ok\"],\"additionalProperties\":false}]}},"
    "\"required\":[\"name\",\"age\",\"kind\"],\"additionalProperties\":false}";

static size_t utf8_len(const char *s) {
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static void check_rich(const char *text) {
    json_error_t je;
    json_t *v = json_loads(text, JSON_DISABLE_EOF_CHECK, &je);
    ck_assert_msg(v != NULL, "'%s' does not parse: %s", text, je.text);
    ck_assert(json_is_object(v));
    const char *key;
    json_t *x;
    json_object_foreach(v, key, x) {
        ck_assert_msg(strstr("name age tags kind score child", key), "extra key %s", key);
    }
    json_t *name = json_object_get(v, "name"), *age = json_object_get(v, "age");
    ck_assert(json_is_string(name));
    size_t nl = utf8_len(json_string_value(name));
    ck_assert_msg(nl >= 1 && nl <= 12, "name of %zu characters", nl);
    ck_assert(json_is_integer(age) && json_integer_value(age) >= 0 &&
              json_integer_value(age) <= 150);
    ck_assert_str_eq(json_string_value(json_object_get(v, "kind")), "person");
    json_t *tags = json_object_get(v, "tags");
    if (tags) {
        ck_assert(json_is_array(tags) && json_array_size(tags) <= 3);
        size_t i;
        json_array_foreach(tags, i, x)
            ck_assert(json_is_string(x) && strchr("abc", json_string_value(x)[0]) &&
                      strlen(json_string_value(x)) == 1);
    }
    json_t *score = json_object_get(v, "score");
    ck_assert(!score || json_is_number(score) || json_is_null(score));
    json_t *child = json_object_get(v, "child");
    if (child && !json_is_null(child)) {
        ck_assert(json_is_object(child) && json_object_size(child) == 1 &&
                  json_is_boolean(json_object_get(child, "ok")));
    }
    json_decref(v);
}

static void fuzz_vocab(const char *rel, int runs) {
    struct session_base *b = open_base(rel);
    struct strata_error err = {0};
    struct grammar *g = schema_grammar(rich, &err);
    ck_assert_msg(g != NULL, "%s", err.message);
    int n = session_base_n_vocab(b);
    float *logits = malloc(sizeof *logits * (size_t)n);
    int ended = 0;
    for (int run = 0; run < runs; run++) {
        struct session_params sp = session_params_default();
        sp.sampler.temperature = run % 3 == 2 ? 0.0f : 1.0f; /* every third: the greedy path */
        sp.sampler.seed = 1000 + (uint64_t)run;
        sp.grammar = g;
        struct session *s = session_init(b, &sp, &err);
        ck_assert_msg(s != NULL, "%s", err.message);
        struct strata_rng rng;
        strata_rng_seed(&rng, 77 + (uint64_t)run);
        char *text = NULL;
        size_t len = 0;
        bool stop = false;
        for (int step = 0; step < 400 && !stop; step++) {
            /* random logits; half the runs favour the EOG-free vocabulary evenly */
            for (int i = 0; i < n; i++)
                logits[i] = (float)(strata_rng_uniform(&rng) * 8.0);
            struct sampler_result r;
            ck_assert_msg(session_sample(s, logits, &r, &err) == 0, "%s", err.message);
            struct session_delta d;
            ck_assert_msg(session_step(s, &r, &d, &err) == 0, "%s", err.message);
            text = realloc(text, len + d.len + 1);
            memcpy(text + len, d.text, d.len);
            len += d.len;
            text[len] = 0;
            stop = d.stop != SESSION_STOP_NONE;
        }
        if (stop) {
            ended++;
            check_rich(text);
        }
        free(text);
        session_free(s);
    }
    ck_assert_msg(ended >= runs / 2, "%s: only %d of %d runs completed", rel, ended, runs);
    free(logits);
    grammar_free(g);
    session_base_free(b);
}

START_TEST(fuzz_spm) {
    fuzz_vocab("fixtures/vocab/ggml-vocab-llama-spm.gguf", 12);
}
END_TEST

START_TEST(fuzz_bpe) {
    fuzz_vocab("fixtures/vocab/ggml-vocab-gpt-2.gguf", 12);
}
END_TEST

/* The mask allows exactly the tokens whose bytes the matcher accepts. */
START_TEST(mask_exact) {
    struct session_base *b = open_base("fixtures/vocab/ggml-vocab-gpt-2.gguf");
    const struct tokenizer *tok = session_base_tokenizer(b);
    struct strata_error err = {0};
    struct grammar *g = schema_grammar(rich, &err);
    ck_assert(g != NULL);
    struct session_params sp = session_params_default();
    sp.grammar = g;
    struct session *s = session_init(b, &sp, &err);
    ck_assert_msg(s != NULL, "%s", err.message);
    /* two matchers over the base's vocabulary: one masks, one checks bytes */
    int n = session_base_n_vocab(b);
    /* the start, string bodies with room for 12, 1 and 0 more characters (the
     * clean-token path), after a comma, inside an integer */
    const char *prefixes[] = {"",
                              "{\"name\":\"",
                              "{\"name\":\"abcdefghijk",
                              "{\"name\":\"abcdefghi\\u00e9k\\n",
                              "{\"name\":\"x\",",
                              "{\"name\":\"x\",\"age\":1"};
    for (size_t p = 0; p < sizeof prefixes / sizeof prefixes[0]; p++) {
        struct grammar_matcher *m = grammar_matcher_init(g, NULL, &err);
        ck_assert(grammar_matcher_accept_bytes(m, prefixes[p], strlen(prefixes[p]), &err) == 0);
        /* the mask: through a session-less matcher with the vocabulary rebuilt here */
        char **pieces = calloc((size_t)n, sizeof *pieces);
        uint32_t *lens = calloc((size_t)n, sizeof *lens);
        enum grammar_token_kind *kinds = calloc((size_t)n, sizeof *kinds);
        char buf[GRAMMAR_PIECE_MAX];
        for (int i = 0; i < n; i++) {
            int k = tokenizer_token_to_piece(tok, i, false, buf, sizeof buf);
            kinds[i] = tokenizer_is_eog(tok, i)       ? GRAMMAR_TOKEN_EOG
                       : tokenizer_is_special(tok, i) ? GRAMMAR_TOKEN_NEVER
                                                      : GRAMMAR_TOKEN_TEXT;
            if (k > 0 && k <= (int)sizeof buf) {
                pieces[i] = malloc((size_t)k);
                memcpy(pieces[i], buf, (size_t)k);
                lens[i] = (uint32_t)k;
            }
        }
        struct grammar_vocab_params vp = {n, (const char *const *)pieces, lens, kinds};
        struct grammar_vocab *v = grammar_vocab_init(&vp, &err);
        ck_assert_msg(v != NULL, "%s", err.message);
        struct grammar_matcher *mm = grammar_matcher_init(g, v, &err);
        ck_assert(grammar_matcher_accept_bytes(mm, prefixes[p], strlen(prefixes[p]), &err) == 0);
        uint32_t *bits = calloc(((size_t)n + 31) / 32, sizeof *bits);
        int count = grammar_matcher_mask(mm, bits, &err);
        ck_assert_int_gt(count, 0);
        int seen = 0;
        for (int i = 0; i < n; i++) {
            bool allowed = (bits[i >> 5] >> (i & 31)) & 1u;
            bool want = false;
            if (kinds[i] == GRAMMAR_TOKEN_TEXT && lens[i] > 0) {
                struct grammar_matcher *t = grammar_matcher_init(g, NULL, &err);
                grammar_matcher_accept_bytes(t, prefixes[p], strlen(prefixes[p]), &err);
                want = grammar_matcher_accept_bytes(t, pieces[i], lens[i], &err) == 0;
                grammar_matcher_free(t);
            } else if (kinds[i] == GRAMMAR_TOKEN_EOG) {
                want = grammar_matcher_can_end(m);
            }
            ck_assert_msg(allowed == want, "prefix '%s' token %d '%.*s': mask %d, bytes %d",
                          prefixes[p], i, (int)lens[i], pieces[i] ? pieces[i] : "", allowed, want);
            seen += allowed;
        }
        ck_assert_int_eq(seen, count);
        /* the second mask of the same state comes from the cache: same bits */
        uint32_t *again = calloc(((size_t)n + 31) / 32, sizeof *again);
        ck_assert_int_eq(grammar_matcher_mask(mm, again, &err), count);
        ck_assert(memcmp(bits, again, ((size_t)n + 31) / 32 * 4) == 0);
        free(again);
        free(bits);
        grammar_matcher_free(mm);
        grammar_vocab_free(v);
        for (int i = 0; i < n; i++)
            free(pieces[i]);
        free(pieces);
        free(lens);
        free(kinds);
        grammar_matcher_free(m);
    }
    session_free(s);
    grammar_free(g);
    session_base_free(b);
}
END_TEST

/* The session hook: EOG is masked until the grammar can end, the
 * generation stops as an EOG stop when nothing may follow, a token outside
 * the mask is refused by the step, logprobs come from the masked row. */
START_TEST(session_hook) {
    struct session_base *b = open_base("fixtures/vocab/ggml-vocab-gpt-2.gguf");
    const struct tokenizer *tok = session_base_tokenizer(b);
    struct strata_error err = {0};
    struct grammar *g = schema_grammar("{\"enum\":[\"hi\",\"hiya\"]}", &err);
    ck_assert(g != NULL);
    int n = session_base_n_vocab(b);
    int32_t eos = tokenizer_eos(tok);
    ck_assert_int_ge(eos, 0);
    float *logits = calloc((size_t)n, sizeof *logits);
    logits[eos] = 50.0f; /* the model wants to stop at once */
    for (int greedy = 0; greedy < 2; greedy++) {
        struct session_params sp = session_params_default();
        sp.grammar = g;
        sp.logprobs = !greedy;
        sp.sampler.temperature = greedy ? 0.0f : 1.0f;
        struct session *s = session_init(b, &sp, &err);
        ck_assert_msg(s != NULL, "%s", err.message);
        char text[64] = "";
        struct session_delta d = {0};
        for (int step = 0; step < 20 && !d.stop; step++) {
            struct sampler_result r;
            ck_assert_int_eq(session_sample(s, logits, &r, &err), 0);
            if (!greedy)
                ck_assert(isfinite(r.logprob) && r.logprob <= 0.0f);
            if (step == 0) { /* a token the mask excludes: the step refuses it */
                struct sampler_result bad = {.token = eos};
                ck_assert_int_eq(session_step(s, &bad, &d, &err), STRATA_E_INVALID);
            }
            ck_assert_int_eq(session_step(s, &r, &d, &err), 0);
            strncat(text, d.text, d.len);
        }
        /* "hi" may end (EOG allowed, and wanted) or go on to "hiya" */
        ck_assert_msg(strcmp(text, "\"hi\"") == 0 || strcmp(text, "\"hiya\"") == 0, "%s", text);
        ck_assert_int_eq(d.stop, SESSION_STOP_EOG);
        session_free(s);
    }
    free(logits);
    grammar_free(g);
    session_base_free(b);
}
END_TEST

/* A bounded string body beside another branch: a clean token longer than
 * the string's room is still allowed when the other branch takes it. */
START_TEST(mask_clean_beside_branch) {
    struct session_base *b = open_base("fixtures/vocab/ggml-vocab-gpt-2.gguf");
    const struct tokenizer *tok = session_base_tokenizer(b);
    struct strata_error err = {0};
    struct grammar *g = schema_grammar(
        "{\"anyOf\":[{\"type\":\"string\",\"maxLength\":1},{\"const\":\"hello\"}]}", &err);
    ck_assert(g != NULL);
    struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
    eo.add_special = false;
    struct tokenizer_ids ids = {0};
    ck_assert_int_eq(tokenizer_encode(tok, "hello", 5, &eo, &ids, &err), 0);
    ck_assert_uint_eq(ids.n, 1);
    int n = session_base_n_vocab(b);
    struct session_params sp = session_params_default();
    sp.grammar = g;
    sp.sampler.temperature = 0;
    struct session *s = session_init(b, &sp, &err);
    float *logits = calloc((size_t)n, sizeof *logits);
    struct sampler_result r;
    int32_t quote = -1;
    ck_assert_int_eq(tokenizer_encode(tok, "\"", 1, &eo, &ids, &err), 0);
    quote = ids.ids[1];
    logits[quote] = 10.0f;
    ck_assert_int_eq(session_sample(s, logits, &r, &err), 0);
    ck_assert_int_eq(r.token, quote);
    struct session_delta d;
    ck_assert_int_eq(session_step(s, &r, &d, &err), 0);
    logits[quote] = 0.0f;
    logits[ids.ids[0]] = 10.0f; /* "hello": 5 code points, the string has room for 1 */
    ck_assert_int_eq(session_sample(s, logits, &r, &err), 0);
    ck_assert_int_eq(r.token, ids.ids[0]);
    free(logits);
    session_free(s);
    tokenizer_ids_free(&ids);
    grammar_free(g);
    session_base_free(b);
}
END_TEST

/* Whitespace is bounded: the longest run the grammar takes is 17 bytes. */
START_TEST(whitespace_bounded) {
    struct strata_error err = {0};
    struct grammar *g = schema_grammar("{\"type\":\"array\"}", &err);
    char s[64] = "[\n";
    for (int i = 0; i < 16; i++)
        strcat(s, " ");
    expect(g, s, PREFIX);
    strcat(s, " ");
    expect(g, s, NO);
    grammar_free(g);
}
END_TEST

static Suite *grammar_suite(void) {
    Suite *s = suite_create("grammar");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, builder_nodes);
    tcase_add_test(tc, json_value_syntax);
    tcase_add_loop_test(tc, schema_features, 0, (int)(sizeof cases / sizeof cases[0]));
    tcase_add_loop_test(tc, schema_errors, 0, (int)(sizeof errs / sizeof errs[0]));
    tcase_add_test(tc, schema_limits);
    tcase_add_test(tc, many_optional);
    tcase_add_test(tc, whitespace_bounded);
    tcase_add_test(tc, mask_exact);
    tcase_add_test(tc, session_hook);
    tcase_add_test(tc, mask_clean_beside_branch);
    tcase_add_test(tc, fuzz_spm);
    tcase_add_test(tc, fuzz_bpe);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("grammar", grammar_suite)
