/* tests/engine/gguf/test-gguf.c: the GGUF reader on the real shared files: values
 * of known keys, tensor shapes/types/offsets, string arrays, and every .gguf
 * in ../shared opening cleanly. Expected values were read independently with
 * a Python struct dump of the files. */
#include <dirent.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/gguf/gguf.h"
#include "engine/quant/quant.h"
#include "tests/harness.h"

static struct gguf_file *open_shared(const char *rel) {
    char path[1024];
    struct strata_error err = {0};
    struct gguf_file *f = gguf_open(test_shared_path(path, sizeof(path), rel), &err);
    ck_assert_msg(f != NULL, "%s: %s", path, err.message);
    return f;
}

START_TEST(stories_header) {
    struct gguf_file *f = open_shared("models/stories260K.gguf");
    ck_assert_uint_eq(gguf_version(f), 3);
    ck_assert_uint_eq(gguf_alignment(f), 32);
    ck_assert_int_eq(gguf_n_kv(f), 19);
    ck_assert_int_eq(gguf_n_tensors(f), 48);
    /* tensor infos end at byte 14152, padded to 32 */
    ck_assert_uint_eq(gguf_data_offset(f), 14176);
    ck_assert_uint_eq(gguf_file_size(f), 1185376);
    ck_assert_str_ne(gguf_path(f), "");
    gguf_close(f);
}
END_TEST

START_TEST(stories_values) {
    struct gguf_file *f = open_shared("models/stories260K.gguf");
    struct strata_error err = {0};
    uint64_t u;
    ck_assert_int_eq(gguf_get_uint(f, "llama.block_count", &u, &err), 0);
    ck_assert_uint_eq(u, 5);
    ck_assert_int_eq(gguf_get_uint(f, "llama.embedding_length", &u, &err), 0);
    ck_assert_uint_eq(u, 64);
    ck_assert_int_eq(gguf_get_uint(f, "llama.feed_forward_length", &u, &err), 0);
    ck_assert_uint_eq(u, 172);
    ck_assert_int_eq(gguf_get_uint(f, "llama.attention.head_count_kv", &u, &err), 0);
    ck_assert_uint_eq(u, 4);
    ck_assert_int_eq(gguf_get_uint(f, "tokenizer.ggml.padding_token_id", &u, &err), 0);
    ck_assert_uint_eq(u, 4294967295u);
    int64_t i64;
    ck_assert_int_eq(gguf_get_int(f, "llama.context_length", &i64, &err), 0);
    ck_assert_int_eq(i64, 2048);
    double d;
    ck_assert_int_eq(gguf_get_float(f, "llama.attention.layer_norm_rms_epsilon", &d, &err), 0);
    ck_assert(fabs(d - 1e-5) < 1e-9);
    char buf[16];
    ck_assert_int_eq(gguf_get_str_buf(f, "general.architecture", buf, sizeof(buf), &err), 0);
    ck_assert_str_eq(buf, "llama");
    ck_assert_int_eq(gguf_get_str_buf(f, "general.architecture", buf, 3, &err), 0);
    ck_assert_str_eq(buf, "ll");
    struct gguf_str s;
    ck_assert_int_eq(gguf_get_str(f, "tokenizer.ggml.model", &s, &err), 0);
    ck_assert(gguf_str_eq(s, "llama"));
    /* absent and wrong-typed keys */
    ck_assert_int_eq(gguf_get_uint(f, "no.such.key", &u, &err), STRATA_E_NOT_FOUND);
    ck_assert_int_eq(err.code, STRATA_E_NOT_FOUND);
    ck_assert_int_eq(gguf_get_uint(f, "general.name", &u, &err), STRATA_E_FORMAT);
    ck_assert_int_eq(gguf_get_str(f, "llama.block_count", &s, &err), STRATA_E_FORMAT);
    bool b;
    ck_assert_int_eq(gguf_get_bool(f, "llama.block_count", &b, &err), STRATA_E_FORMAT);
    ck_assert_int_eq(gguf_find_kv(f, "general.name"), 5);
    ck_assert_int_eq(gguf_find_kv(f, "general.nam"), -1);
    const struct gguf_kv *kv = gguf_kv_at(f, 5);
    ck_assert(gguf_str_eq(kv->key, "general.name"));
    ck_assert_ptr_null(gguf_kv_at(f, 19));
    ck_assert_ptr_null(gguf_kv_at(f, -1));
    gguf_close(f);
}
END_TEST

START_TEST(stories_arrays) {
    struct gguf_file *f = open_shared("models/stories260K.gguf");
    struct strata_error err = {0};
    struct gguf_value a;
    ck_assert_int_eq(gguf_get_arr(f, "tokenizer.ggml.tokens", &a, &err), 0);
    ck_assert_int_eq(a.arr.elem_type, GGUF_TYPE_STRING);
    ck_assert_uint_eq(a.arr.n, 512);
    ck_assert(gguf_str_eq(gguf_arr_str(f, &a, 0), "<unk>"));
    ck_assert(gguf_str_eq(gguf_arr_str(f, &a, 1), "<s>"));
    ck_assert(gguf_str_eq(gguf_arr_str(f, &a, 2), "</s>"));
    struct gguf_value e = gguf_arr_get(f, &a, 2);
    ck_assert_int_eq(e.type, GGUF_TYPE_STRING);
    ck_assert(gguf_str_eq(e.str, "</s>"));
    /* every string element lies inside the file */
    const uint8_t *base = gguf_file_base(f);
    for (uint64_t i = 0; i < a.arr.n; i++) {
        struct gguf_str s = gguf_arr_str(f, &a, i);
        ck_assert((const uint8_t *)s.ptr > base);
        ck_assert((const uint8_t *)s.ptr + s.len <= base + gguf_file_size(f));
    }
    struct gguf_value tt;
    ck_assert_int_eq(gguf_get_arr(f, "tokenizer.ggml.token_type", &tt, &err), 0);
    ck_assert_int_eq(tt.arr.elem_type, GGUF_TYPE_INT32);
    ck_assert_int_eq(gguf_arr_int(&tt, 0), 2);
    ck_assert_int_eq(gguf_arr_int(&tt, 1), 3);
    ck_assert_uint_eq(gguf_arr_uint(&tt, 1), 3);
    ck_assert(gguf_arr_float(&tt, 1) == 3.0);
    struct gguf_value sc;
    ck_assert_int_eq(gguf_get_arr(f, "tokenizer.ggml.scores", &sc, &err), 0);
    ck_assert_int_eq(sc.arr.elem_type, GGUF_TYPE_FLOAT32);
    ck_assert(gguf_arr_float(&sc, 0) == 0.0);
    ck_assert_int_eq(gguf_get_arr(f, "general.name", &sc, &err), STRATA_E_FORMAT);
    gguf_close(f);
}
END_TEST

START_TEST(stories_tensors) {
    struct gguf_file *f = open_shared("models/stories260K.gguf");
    const struct gguf_tensor_info *t = gguf_find_tensor(f, "token_embd.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->n_dims, 2);
    ck_assert_int_eq(t->ne[0], 64);
    ck_assert_int_eq(t->ne[1], 512);
    ck_assert_int_eq(t->ne[2], 1);
    ck_assert_uint_eq(t->type, QUANT_F32);
    ck_assert_uint_eq(t->offset, 0);
    ck_assert_uint_eq(t->n_bytes, 64 * 512 * 4);
    ck_assert_int_eq(gguf_tensor_n_elements(t), 64 * 512);
    ck_assert_ptr_eq(t->data, gguf_file_base(f) + gguf_data_offset(f));
    t = gguf_find_tensor(f, "blk.2.ffn_down.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->ne[0], 172);
    ck_assert_int_eq(t->ne[1], 64);
    ck_assert_uint_eq(t->offset, 719360);
    t = gguf_find_tensor(f, "output.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->offset, 131328);
    ck_assert_ptr_null(gguf_find_tensor(f, "output.weigh"));
    ck_assert_ptr_eq(gguf_tensor_at(f, 47), gguf_find_tensor(f, "blk.4.ffn_norm.weight"));
    ck_assert_ptr_null(gguf_tensor_at(f, 48));
    /* every name finds itself */
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor_info *ti = gguf_tensor_at(f, i);
        char nm[128];
        snprintf(nm, sizeof(nm), "%.*s", (int)ti->name.len, ti->name.ptr);
        ck_assert_ptr_eq(gguf_find_tensor(f, nm), ti);
    }
    /* first weight of output_norm is a finite float */
    float w;
    memcpy(&w, gguf_find_tensor(f, "output_norm.weight")->data, 4);
    ck_assert(isfinite(w));
    gguf_close(f);
}
END_TEST

START_TEST(tiny_random) {
    struct gguf_file *f = open_shared("models/llama-2-tiny-random.gguf");
    struct strata_error err = {0};
    ck_assert_int_eq(gguf_n_tensors(f), 12);
    const struct gguf_tensor_info *t = gguf_find_tensor(f, "output.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->type, QUANT_F16);
    ck_assert_int_eq(t->ne[1], 32000);
    ck_assert_uint_eq(t->n_bytes, 8 * 32000 * 2);
    ck_assert_uint_eq(t->offset, 514144);
    struct gguf_value a;
    ck_assert_int_eq(gguf_get_arr(f, "tokenizer.ggml.tokens", &a, &err), 0);
    ck_assert_uint_eq(a.arr.n, 32000);
    ck_assert(gguf_str_eq(gguf_arr_str(f, &a, 1), "<s>"));
    char nm[32];
    ck_assert_int_eq(gguf_get_str_buf(f, "general.name", nm, sizeof(nm), &err), 0);
    ck_assert_str_eq(nm, "LLaMA v2");
    uint64_t ft;
    ck_assert_int_eq(gguf_get_uint(f, "general.file_type", &ft, &err), 0);
    ck_assert_uint_eq(ft, 1);
    gguf_close(f);
}
END_TEST

/* Every .gguf in models/ and fixtures/vocab/ opens, and its token array (if
 * any) has as many elements as scores/token_type. */
static int open_dir(const char *rel) {
    char dir[1024];
    test_shared_path(dir, sizeof(dir), rel);
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open %s", dir);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 5 || strcmp(de->d_name + l - 5, ".gguf") != 0)
            continue;
        char path[2048];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        struct strata_error err = {0};
        struct gguf_file *f = gguf_open(path, &err);
        ck_assert_msg(f != NULL, "%s: %s", path, err.message);
        struct gguf_value tok, tt;
        ck_assert_int_eq(gguf_get_arr(f, "tokenizer.ggml.tokens", &tok, &err), 0);
        ck_assert_int_eq(tok.arr.elem_type, GGUF_TYPE_STRING);
        ck_assert_uint_gt(tok.arr.n, 0);
        if (gguf_get_arr(f, "tokenizer.ggml.token_type", &tt, NULL) == 0)
            ck_assert_uint_eq(tt.arr.n, tok.arr.n);
        struct gguf_str last = gguf_arr_str(f, &tok, tok.arr.n - 1);
        ck_assert((const uint8_t *)last.ptr + last.len <= gguf_file_base(f) + gguf_file_size(f));
        gguf_close(f);
        n++;
    }
    closedir(d);
    return n;
}

START_TEST(all_shared_files) {
    ck_assert_int_ge(open_dir("models"), 2);
    ck_assert_int_ge(open_dir("fixtures/vocab"), 12);
}
END_TEST

START_TEST(open_errors) {
    struct strata_error err = {0};
    ck_assert_ptr_null(gguf_open("/nonexistent/x.gguf", &err));
    ck_assert_int_eq(err.code, STRATA_E_IO);
    ck_assert_ptr_null(gguf_open("/tmp", &err));
    ck_assert_int_eq(err.code, STRATA_E_IO);
    ck_assert_ptr_null(gguf_open_memory(NULL, 0, &err));
    ck_assert_int_eq(err.code, STRATA_E_FORMAT);
    ck_assert_ptr_null(gguf_open_memory("GGUF", 4, NULL)); /* NULL err is fine */
    gguf_close(NULL);
}
END_TEST

/* A FIFO (or any file that is not regular) is refused at once: open() of a
 * FIFO with no writer blocked forever, and `strata serve` then ignored
 * SIGTERM (it waits for signals only once the model is loaded). The test
 * case's 10 s timeout turns a hang into a failure. */
START_TEST(open_fifo) {
    char path[64];
    snprintf(path, sizeof(path), "/tmp/strata-test-fifo-%d", (int)getpid());
    unlink(path);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    struct strata_error err = {0};
    ck_assert_ptr_null(gguf_open(path, &err));
    ck_assert_int_eq(err.code, STRATA_E_IO);
    ck_assert_msg(strstr(err.message, "not a regular file") != NULL, "%s", err.message);
    unlink(path);
    ck_assert_ptr_null(gguf_open("/dev/null", &err)); /* a character device */
    ck_assert_msg(strstr(err.message, "not a regular file") != NULL, "%s", err.message);
}
END_TEST

static Suite *gguf_suite(void) {
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("real files");
    tcase_add_test(tc, stories_header);
    tcase_add_test(tc, stories_values);
    tcase_add_test(tc, stories_arrays);
    tcase_add_test(tc, stories_tensors);
    tcase_add_test(tc, tiny_random);
    tcase_add_test(tc, all_shared_files);
    tcase_add_test(tc, open_errors);
    suite_add_tcase(s, tc);
    TCase *tf = tcase_create("special files");
    tcase_set_timeout(tf, 10);
    tcase_add_test(tf, open_fifo);
    suite_add_tcase(s, tf);
    return s;
}

STRATA_TEST_MAIN("gguf", gguf_suite)
