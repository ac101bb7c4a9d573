/* tests/engine/text/test-tokenizer-detok.c: streaming detokenizer, decode, special
 * tokens with untrusted ranges, invalid input, and the real models' vocabs
 * (their golden greedy ids must decode to the golden text). */
#include <pthread.h>
#include <string.h>

#include "engine/gguf/gguf.h"
#include "engine/text/tokenizer.h"
#include "tests/harness.h"

static struct tokenizer *open_tok(const char *rel) {
    char path[1024];
    struct strata_error err = {0};
    struct gguf_file *f = gguf_open(test_shared_path(path, sizeof(path), rel), &err);
    ck_assert_msg(f, "%s: %s", path, err.message);
    struct tokenizer *tok = tokenizer_init_gguf(f, &err);
    ck_assert_msg(tok, "%s: %s", path, err.message);
    gguf_close(f);
    return tok;
}
#define SPM "fixtures/vocab/ggml-vocab-llama-spm.gguf"
#define GPT2 "fixtures/vocab/ggml-vocab-gpt-2.gguf"

static int32_t id_of(const struct tokenizer *tok, const char *piece) {
    int32_t id = tokenizer_find(tok, piece, strlen(piece));
    ck_assert_msg(id >= 0, "piece '%s' not in vocab", piece);
    return id;
}

/* Is s[0..n) valid UTF-8 (no surrogates, no overlongs)? */
static bool valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80                 ? 1
                     : c >= 0xc2 && c <= 0xdf ? 2
                     : c >= 0xe0 && c <= 0xef ? 3
                     : c >= 0xf0 && c <= 0xf4 ? 4
                                              : 0;
        if (!len || i + len > n)
            return false;
        for (size_t j = 1; j < len; j++)
            if (((unsigned char)s[i + j] & 0xc0) != 0x80)
                return false;
        i += len;
    }
    return true;
}

/* Feeds ids one by one; every chunk must be valid UTF-8; returns the whole text. */
static char *stream_all(const struct tokenizer *tok, const int32_t *ids, size_t n,
                        const struct tokenizer_decode_opts *o, size_t *n_empty) {
    struct tokenizer_stream *st = tokenizer_stream_init(tok, o, NULL);
    ck_assert_ptr_nonnull(st);
    static char acc[65536];
    size_t k = 0, len;
    *n_empty = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *s =
            i < n ? tokenizer_stream_feed(st, ids[i], &len) : tokenizer_stream_flush(st, &len);
        ck_assert_ptr_nonnull(s);
        ck_assert_msg(valid_utf8(s, len), "chunk %zu is not valid UTF-8", i);
        if (len == 0 && i < n)
            (*n_empty)++;
        ck_assert(k + len < sizeof(acc));
        memcpy(acc + k, s, len);
        k += len;
    }
    acc[k] = '\0';
    tokenizer_stream_free(st);
    return acc;
}

START_TEST(test_stream_byte_tokens) {
    struct tokenizer *tok = open_tok(SPM);
    /* U+1F999 (llama) is not a piece: 4 byte tokens, held until complete */
    int32_t ids[] = {id_of(tok, "\xe2\x96\x81Hello"),
                     id_of(tok, "<0xF0>"),
                     id_of(tok, "<0x9F>"),
                     id_of(tok, "<0xA6>"),
                     id_of(tok, "<0x99>"),
                     id_of(tok, "\xe2\x96\x81ok")};
    size_t empty;
    char *s = stream_all(tok, ids, 6, NULL, &empty);
    ck_assert_str_eq(s, "Hello\xf0\x9f\xa6\x99 ok"); /* leading space stripped */
    ck_assert_uint_eq(empty, 3);                     /* 3 incomplete prefixes held */
    struct tokenizer_decode_opts keep = tokenizer_decode_opts_default();
    keep.strip_leading_space = false;
    s = stream_all(tok, ids, 6, &keep, &empty);
    ck_assert_str_eq(s, " Hello\xf0\x9f\xa6\x99 ok");
    /* the encoder produces the same byte tokens */
    struct tokenizer_ids enc = {0};
    struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
    eo.add_special = false;
    ck_assert_int_eq(tokenizer_encode(tok, "Hello\xf0\x9f\xa6\x99 ok", 12, &eo, &enc, NULL), 0);
    ck_assert_uint_eq(enc.n, 6);
    ck_assert_mem_eq(enc.ids, ids, sizeof(ids));
    tokenizer_ids_free(&enc);
    tokenizer_free(tok);
}
END_TEST

START_TEST(test_stream_invalid) {
    struct tokenizer *tok = open_tok(SPM);
    size_t empty;
    /* 0xFF never starts a sequence; E2 followed by 'A' is cut short; a lone
     * F0 9F at the end is flushed as one U+FFFD */
    int32_t ids[] = {id_of(tok, "<0xFF>"), id_of(tok, "<0xE2>"), id_of(tok, "A"),
                     id_of(tok, "<0xF0>"), id_of(tok, "<0x9F>")};
    char *s = stream_all(tok, ids, 5, NULL, &empty);
    ck_assert_str_eq(s, "\xef\xbf\xbd\xef\xbf\xbd"
                        "A\xef\xbf\xbd");
    /* surrogate encoded as ED A0 80 and overlong C0 80 are invalid */
    int32_t sur[] = {id_of(tok, "<0xED>"), id_of(tok, "<0xA0>"), id_of(tok, "<0x80>"),
                     id_of(tok, "<0xC0>"), id_of(tok, "<0x80>")};
    s = stream_all(tok, sur, 5, NULL, &empty);
    ck_assert(valid_utf8(s, strlen(s)));
    ck_assert_ptr_null(strstr(s, "\xed\xa0"));
    /* non-streaming decode keeps the exact bytes */
    size_t len;
    char *d = tokenizer_decode(tok, sur, 5, NULL, &len, NULL);
    ck_assert_uint_eq(len, 5);
    ck_assert_mem_eq(d, "\xed\xa0\x80\xc0\x80", 5);
    free(d);
    /* out-of-range ids: no text, no crash */
    struct tokenizer_stream *st = tokenizer_stream_init(tok, NULL, NULL);
    ck_assert_ptr_null(tokenizer_stream_feed(st, -5, &len));
    ck_assert_ptr_null(tokenizer_stream_feed(st, tokenizer_n_vocab(tok), &len));
    ck_assert_uint_eq(len, 0);
    tokenizer_stream_free(st);
    int32_t bad = 1 << 30;
    struct strata_error err = {0};
    ck_assert_ptr_null(tokenizer_decode(tok, &bad, 1, NULL, &len, &err));
    ck_assert_int_eq(err.code, STRATA_E_RANGE);
    tokenizer_free(tok);
}
END_TEST

START_TEST(test_stream_bpe_and_special) {
    struct tokenizer *tok = open_tok(GPT2);
    const char *text = "caf\xc3\xa9 \xf0\x9f\xa6\x99\xf0\x9f\xa6\x99 done";
    struct tokenizer_ids ids = {0};
    struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
    eo.add_special = false;
    ck_assert_int_eq(tokenizer_encode(tok, text, strlen(text), &eo, &ids, NULL), 0);
    int32_t eot = id_of(tok, "<|endoftext|>");
    ck_assert_int_eq(tokenizer_encode(tok, "<|endoftext|>", 13, &eo, &ids, NULL), 0);
    size_t empty;
    /* skip_special drops <|endoftext|> when it was parsed as text pieces?
     * no: parse_special was off, so its text was tokenized as plain pieces */
    char *s = stream_all(tok, ids.ids, ids.n, NULL, &empty);
    ck_assert_str_eq(s, "caf\xc3\xa9 \xf0\x9f\xa6\x99\xf0\x9f\xa6\x99 done<|endoftext|>");
    ck_assert_uint_gt(empty, 0); /* the emoji span several byte-level tokens */
    int32_t with_eot[] = {ids.ids[0], eot, ids.ids[1]};
    char expect[64];
    size_t l0 = (size_t)tokenizer_token_to_piece(tok, ids.ids[0], false, expect, 64);
    size_t l1 = (size_t)tokenizer_token_to_piece(tok, ids.ids[1], false, expect + l0, 64 - l0);
    expect[l0 + l1] = '\0';
    s = stream_all(tok, with_eot, 3, NULL, &empty);
    ck_assert_str_eq(s, expect); /* skip_special: no text for the control token */
    struct tokenizer_decode_opts o = tokenizer_decode_opts_default();
    o.skip_special = false;
    s = stream_all(tok, with_eot, 3, &o, &empty);
    ck_assert_ptr_nonnull(strstr(s, "<|endoftext|>"));
    ck_assert(tokenizer_is_eog(tok, eot));
    ck_assert(tokenizer_is_control(tok, eot));
    tokenizer_ids_free(&ids);
    tokenizer_free(tok);
}
END_TEST

static size_t count_id(const struct tokenizer_ids *ids, int32_t id) {
    size_t n = 0;
    for (size_t i = 0; i < ids->n; i++)
        n += ids->ids[i] == id;
    return n;
}

static void push_id(struct tokenizer_ids *ids, int32_t id) {
    ids->ids = realloc(ids->ids, (ids->n + 1) * sizeof(int32_t));
    ck_assert_ptr_nonnull(ids->ids);
    ids->ids[ids->n++] = id;
    ids->cap = ids->n;
}

START_TEST(test_special_untrusted) {
    const char *files[] = {SPM, GPT2};
    const char *ctl[] = {"</s>", "<|endoftext|>"};
    for (int v = 0; v < 2; v++) {
        struct tokenizer *tok = open_tok(files[v]);
        int32_t cid = id_of(tok, ctl[v]);
        ck_assert(tokenizer_is_control(tok, cid));
        char text[256];
        /* trusted template part, user content with the control text, template end */
        int n = snprintf(text, sizeof(text), "sys%suser: hi %s there%s", ctl[v], ctl[v], ctl[v]);
        size_t u_off = strlen("sys") + strlen(ctl[v]) + strlen("user: ");
        size_t u_len = strlen("hi ") + strlen(ctl[v]) + strlen(" there");
        struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
        eo.add_special = false;
        struct tokenizer_ids plain = {0}, parsed = {0}, guarded = {0};
        ck_assert_int_eq(tokenizer_encode(tok, text, (size_t)n, &eo, &plain, NULL), 0);
        ck_assert_uint_eq(count_id(&plain, cid), 0);
        eo.parse_special = true;
        ck_assert_int_eq(tokenizer_encode(tok, text, (size_t)n, &eo, &parsed, NULL), 0);
        ck_assert_uint_eq(count_id(&parsed, cid), 3);
        struct tokenizer_range r = {u_off, u_len};
        eo.untrusted = &r;
        eo.n_untrusted = 1;
        ck_assert_int_eq(tokenizer_encode(tok, text, (size_t)n, &eo, &guarded, NULL), 0);
        ck_assert_uint_eq(count_id(&guarded, cid), 2); /* the user's copy stays text */
        /* = enc("sys") + ctl + enc(middle as plain text) + ctl, for SPM too: the
         * fragment after a special token gets the prefix space like a fresh text */
        struct tokenizer_ids want = {0};
        eo.parse_special = false;
        eo.untrusted = NULL;
        eo.n_untrusted = 0;
        ck_assert_int_eq(tokenizer_encode(tok, "sys", 3, &eo, &want, NULL), 0);
        push_id(&want, cid);
        size_t mid_off = 3 + strlen(ctl[v]), mid_len = (size_t)n - mid_off - strlen(ctl[v]);
        ck_assert_int_eq(tokenizer_encode(tok, text + mid_off, mid_len, &eo, &want, NULL), 0);
        push_id(&want, cid);
        ck_assert_uint_eq(guarded.n, want.n);
        ck_assert_mem_eq(guarded.ids, want.ids, want.n * sizeof(int32_t));
        tokenizer_ids_free(&want);
        /* a range that only touches one byte of the control text still guards it */
        struct tokenizer_range edge = {u_off + 3 + strlen(ctl[v]) - 1, 1};
        struct tokenizer_ids e = {0};
        eo.parse_special = true;
        eo.untrusted = &edge;
        eo.n_untrusted = 1;
        ck_assert_int_eq(tokenizer_encode(tok, text, (size_t)n, &eo, &e, NULL), 0);
        ck_assert_uint_eq(count_id(&e, cid), 2);
        /* ranges out of bounds are clipped, never read */
        struct tokenizer_range wild[] = {{(size_t)n + 100, 5}, {0, SIZE_MAX}};
        eo.untrusted = wild;
        eo.n_untrusted = 2;
        tokenizer_ids_free(&e);
        ck_assert_int_eq(tokenizer_encode(tok, text, (size_t)n, &eo, &e, NULL), 0);
        ck_assert_uint_eq(count_id(&e, cid), 0);
        tokenizer_ids_free(&e);
        tokenizer_ids_free(&plain);
        tokenizer_ids_free(&parsed);
        tokenizer_ids_free(&guarded);
        tokenizer_free(tok);
    }
}
END_TEST

START_TEST(test_add_special_and_accessors) {
    struct tokenizer *tok = open_tok(SPM);
    ck_assert_int_eq(tokenizer_get_kind(tok), TOKENIZER_KIND_SPM);
    ck_assert_int_eq(tokenizer_bos(tok), 1);
    ck_assert_int_eq(tokenizer_eos(tok), 2);
    ck_assert(tokenizer_add_bos(tok));
    ck_assert(tokenizer_is_eog(tok, 2));
    ck_assert(!tokenizer_is_eog(tok, 1));
    ck_assert_int_eq(tokenizer_nl(tok), id_of(tok, "<0x0A>"));
    struct tokenizer_ids ids = {0};
    ck_assert_int_eq(tokenizer_encode(tok, "Hello", 5, NULL, &ids, NULL), 0);
    ck_assert_int_eq(ids.ids[0], 1);
    ck_assert_int_eq(ids.ids[1], id_of(tok, "\xe2\x96\x81Hello"));
    size_t len;
    char *s = tokenizer_decode(tok, ids.ids, ids.n, NULL, &len, NULL);
    ck_assert_str_eq(s, " Hello"); /* llama.cpp keeps the space after a skipped BOS */
    free(s);
    s = tokenizer_decode(tok, ids.ids + 1, ids.n - 1, NULL, &len, NULL);
    ck_assert_str_eq(s, "Hello");
    free(s);
    struct tokenizer_decode_opts o = tokenizer_decode_opts_default();
    o.skip_special = false;
    s = tokenizer_decode(tok, ids.ids, ids.n, &o, &len, NULL);
    ck_assert_str_eq(s, "<s> Hello");
    free(s);
    /* empty input: only BOS */
    tokenizer_ids_free(&ids);
    ck_assert_int_eq(tokenizer_encode(tok, "", 0, NULL, &ids, NULL), 0);
    ck_assert_uint_eq(ids.n, 1);
    tokenizer_ids_free(&ids);
    tokenizer_free(tok);
}
END_TEST

/* Random bytes (mostly invalid UTF-8) never crash; SPM byte fallback is lossless. */
START_TEST(test_random_bytes) {
    const char *files[] = {SPM, GPT2, "fixtures/vocab/ggml-vocab-bert-bge.gguf",
                           "fixtures/vocab/ggml-vocab-deepseek-llm.gguf"};
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    size_t lossless = 0;
    for (int v = 0; v < 4; v++) {
        struct tokenizer *tok = open_tok(files[v]);
        struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
        eo.parse_special = true;
        eo.add_special = false;
        for (int it = 0; it < 150; it++) {
            char buf[96];
            size_t n = 1 + (size_t)(it % 95);
            for (size_t i = 0; i < n;) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                /* odd iterations: random code points (valid UTF-8, no U+2581, which SPM
                 * decodes as a space); even: raw bytes */
                uint8_t b = (uint8_t)(rng >> 24);
                if (it % 2 && i + 4 <= n && (rng & 7) >= 4) {
                    static const char *cps[] = {"\xc3\xa9", "\xe2\x82\xac", "\xe4\xbd\xa0",
                                                "\xf0\x9f\xa6\x99"};
                    const char *c = cps[(rng >> 8) & 3];
                    memcpy(buf + i, c, strlen(c));
                    i += strlen(c);
                    continue;
                }
                buf[i++] = (char)((rng & 3) == 0   ? ' '
                                  : (rng & 3) == 1 ? 'a' + b % 26
                                  : it % 2         ? 'A' + b % 26
                                                   : b);
            }
            struct tokenizer_ids ids = {0};
            ck_assert_int_eq(tokenizer_encode(tok, buf, n, &eo, &ids, NULL), 0);
            for (size_t i = 0; i < ids.n; i++)
                ck_assert(ids.ids[i] >= 0 && ids.ids[i] < tokenizer_n_vocab(tok));
            size_t len;
            struct tokenizer_decode_opts o = tokenizer_decode_opts_default();
            o.skip_special = false;
            char *s = tokenizer_decode(tok, ids.ids, ids.n, &o, &len, NULL);
            ck_assert_ptr_nonnull(s);
            /* SPM byte fallback round-trips valid UTF-8 exactly; an invalid lead
             * byte swallows the next bytes into one "character" (llama.cpp's
             * unicode_len_utf8), so U+2581 can come back unescaped there */
            if (v == 0 && valid_utf8(buf, n)) {
                lossless++;
                ck_assert_uint_eq(len, n);
                ck_assert_mem_eq(s, buf, n);
            }
            free(s);
            tokenizer_ids_free(&ids);
        }
        tokenizer_free(tok);
    }
    ck_assert_uint_ge(lossless, 60);
}
END_TEST

/* Long single-class inputs finish and round-trip (a 1 MB run of letters once
 * exhausted PCRE2's default 32 KiB JIT stack on deepseek-llm's letter class). */
START_TEST(test_long_inputs) {
    const char *files[] = {"fixtures/vocab/ggml-vocab-deepseek-llm.gguf", GPT2, SPM};
    const size_t n = 300000;
    char *buf = malloc(n + 1);
    ck_assert_ptr_nonnull(buf);
    for (int v = 0; v < 3; v++) {
        struct tokenizer *tok = open_tok(files[v]);
        for (int kind = 0; kind < 3; kind++) {
            memset(buf, kind == 0 ? 'a' : kind == 1 ? ' ' : '7', n);
            buf[n - 1] = kind == 1 ? '5' : 'x'; /* spaces then a digit: `\s+$` fails */
            struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
            eo.add_special = false;
            struct tokenizer_ids ids = {0};
            struct strata_error err = {0};
            ck_assert_msg(tokenizer_encode(tok, buf, n, &eo, &ids, &err) == 0, "%s: %s", files[v],
                          err.message);
            ck_assert_uint_gt(ids.n, 0);
            size_t len;
            char *s = tokenizer_decode(tok, ids.ids, ids.n, NULL, &len, NULL);
            ck_assert_uint_eq(len, n);
            ck_assert_mem_eq(s, buf, n);
            free(s);
            tokenizer_ids_free(&ids);
        }
        tokenizer_free(tok);
    }
    free(buf);
}
END_TEST

/* One tokenizer, four threads encoding at once: same ids as alone. */
struct thread_job {
    const struct tokenizer *tok;
    const char *text;
    size_t len;
    struct tokenizer_ids ids;
    int rc;
};

static void *encode_job(void *arg) {
    struct thread_job *j = arg;
    struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
    eo.parse_special = true;
    for (int it = 0; it < 20 && j->rc == 0; it++) {
        j->ids.n = 0;
        j->rc = tokenizer_encode(j->tok, j->text, j->len, &eo, &j->ids, NULL);
    }
    return NULL;
}

START_TEST(test_threads) {
    const char *files[] = {GPT2, SPM, "fixtures/vocab/ggml-vocab-bert-bge.gguf"};
    const char *text = "Hello world</s><|endoftext|> caf\xc3\xa9 \xf0\x9f\xa6\x99 3333 I've "
                       "\xe6\x88\x91\xe6\x83\xb3\n\n  tabs\t\there";
    for (int v = 0; v < 3; v++) {
        struct tokenizer *tok = open_tok(files[v]);
        struct thread_job ref = {tok, text, strlen(text), {0}, 0};
        encode_job(&ref);
        ck_assert_int_eq(ref.rc, 0);
        struct thread_job jobs[4];
        pthread_t th[4];
        for (int i = 0; i < 4; i++) {
            jobs[i] = (struct thread_job){tok, text, strlen(text), {0}, 0};
            ck_assert_int_eq(pthread_create(&th[i], NULL, encode_job, &jobs[i]), 0);
        }
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            ck_assert_int_eq(jobs[i].rc, 0);
            ck_assert_uint_eq(jobs[i].ids.n, ref.ids.n);
            ck_assert_mem_eq(jobs[i].ids.ids, ref.ids.ids, ref.ids.n * sizeof(int32_t));
            tokenizer_ids_free(&jobs[i].ids);
        }
        tokenizer_ids_free(&ref.ids);
        tokenizer_free(tok);
    }
}
END_TEST

/* The real models: golden greedy ids decode to the golden text. */
static void golden(const char *model, const char *golden_file) {
    char path[1024];
    size_t n;
    char *g = test_read_file(test_shared_path(path, sizeof(path), golden_file), &n);
    ck_assert_msg(g, "missing %s", path);
    struct tokenizer *tok = open_tok(model);
    char *p = strstr(g, "greedy ids from BOS: [");
    ck_assert_ptr_nonnull(p);
    p += strlen("greedy ids from BOS: [");
    int32_t ids[256];
    size_t k = 0;
    for (char *end; k < 256; p = end + (*end == ',' ? 1 : 0)) {
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        ids[k++] = (int32_t)v;
    }
    ck_assert_uint_gt(k, 10);
    char *t = strstr(g, "text: ");
    ck_assert_ptr_nonnull(t);
    t += 6;
    char q = *t++;
    char *e = strrchr(t, q);
    ck_assert_ptr_nonnull(e);
    *e = '\0';
    struct tokenizer_decode_opts o = tokenizer_decode_opts_default();
    o.strip_leading_space = false;
    size_t len;
    char *s = tokenizer_decode(tok, ids, k, &o, &len, NULL);
    ck_assert_str_eq(s, t);
    free(s);
    size_t empty;
    s = stream_all(tok, ids, k, &o, &empty);
    ck_assert_str_eq(s, t);
    tokenizer_free(tok);
    free(g);
}

START_TEST(test_golden_models) {
    golden("models/stories260K.gguf", "models/golden_stories260K_gguf_greedy.txt");
    golden("models/llama-2-tiny-random.gguf", "models/golden_llama2_tiny_random_greedy.txt");
}
END_TEST

static Suite *detok_suite(void) {
    Suite *s = suite_create("tokenizer-detok");
    TCase *tc = tcase_create("detok");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_stream_byte_tokens);
    tcase_add_test(tc, test_stream_invalid);
    tcase_add_test(tc, test_stream_bpe_and_special);
    tcase_add_test(tc, test_special_untrusted);
    tcase_add_test(tc, test_add_special_and_accessors);
    tcase_add_test(tc, test_random_bytes);
    tcase_add_test(tc, test_golden_models);
    tcase_add_test(tc, test_long_inputs);
    tcase_add_test(tc, test_threads);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("tokenizer-detok", detok_suite)
