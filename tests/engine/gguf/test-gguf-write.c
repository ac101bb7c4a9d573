/* tests/engine/gguf/test-gguf-write.c: the streaming GGUF writer. Files written
 * here are read back with the independent reader (gguf_open) and compared KV
 * by KV and tensor by tensor; the shared models are re-written by copying and
 * must come back identical; misuse gives errors, not crashes. */
#include <math.h>
#include <unistd.h>

#include "engine/gguf/gguf.h"
#include "engine/quant/quant.h"
#include "tests/harness.h"

static void tmp_path(char *buf, size_t cap, const char *tag) {
    snprintf(buf, cap, "/tmp/strata-test-gguf-write-%d-%s.gguf", (int)getpid(), tag);
}

/* Deep equality of two values from (possibly) different files. */
static int value_eq(const struct gguf_file *fa, const struct gguf_value *a,
                    const struct gguf_file *fb, const struct gguf_value *b) {
    if (a->type != b->type)
        return 0;
    switch (a->type) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_UINT64:
        return a->u64 == b->u64;
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_INT16:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_INT64:
        return a->i64 == b->i64;
    case GGUF_TYPE_FLOAT32:
    case GGUF_TYPE_FLOAT64:
        return memcmp(&a->f64, &b->f64, sizeof(double)) == 0;
    case GGUF_TYPE_BOOL:
        return a->b == b->b;
    case GGUF_TYPE_STRING:
        return a->str.len == b->str.len && !memcmp(a->str.ptr, b->str.ptr, a->str.len);
    case GGUF_TYPE_ARRAY:
        if (a->arr.elem_type != b->arr.elem_type || a->arr.n != b->arr.n)
            return 0;
        for (uint64_t i = 0; i < a->arr.n; i++) {
            struct gguf_value ea = gguf_arr_get(fa, a, i), eb = gguf_arr_get(fb, b, i);
            if (!value_eq(fa, &ea, fb, &eb))
                return 0;
        }
        return 1;
    default:
        return 0;
    }
}

/* Every KV and tensor of a is in b with the same value / shape / type / bytes. */
static void assert_same_model(const struct gguf_file *a, const struct gguf_file *b) {
    ck_assert_int_eq(gguf_n_kv(a), gguf_n_kv(b));
    for (int64_t i = 0; i < gguf_n_kv(a); i++) {
        const struct gguf_kv *ka = gguf_kv_at(a, i);
        char key[256];
        snprintf(key, sizeof(key), "%.*s", (int)ka->key.len, ka->key.ptr);
        int64_t j = gguf_find_kv(b, key);
        ck_assert_msg(j >= 0, "key %s missing", key);
        ck_assert_msg(value_eq(a, &ka->value, b, &gguf_kv_at(b, j)->value), "key %s differs", key);
    }
    ck_assert_int_eq(gguf_n_tensors(a), gguf_n_tensors(b));
    for (int64_t i = 0; i < gguf_n_tensors(a); i++) {
        const struct gguf_tensor_info *ta = gguf_tensor_at(a, i);
        const struct gguf_tensor_info *tb = gguf_tensor_at(b, i);
        ck_assert(ta->name.len == tb->name.len &&
                  !memcmp(ta->name.ptr, tb->name.ptr, ta->name.len));
        ck_assert_uint_eq(ta->n_dims, tb->n_dims);
        ck_assert_uint_eq(ta->type, tb->type);
        for (int d = 0; d < GGUF_MAX_DIMS; d++)
            ck_assert_int_eq(ta->ne[d], tb->ne[d]);
        ck_assert_uint_eq(ta->n_bytes, tb->n_bytes);
        ck_assert_msg(!memcmp(ta->data, tb->data, ta->n_bytes), "tensor %.*s data differs",
                      (int)ta->name.len, ta->name.ptr);
    }
}

START_TEST(every_kv_type_round_trips) {
    char path[256];
    tmp_path(path, sizeof(path), "kv");
    struct strata_error err = {0};
    struct gguf_writer *w = gguf_writer_init(path, &err);
    ck_assert_msg(w != NULL, "%s", err.message);
    ck_assert_int_eq(gguf_writer_set_u8(w, "t.u8", 200, &err), 0);
    ck_assert_int_eq(gguf_writer_set_i8(w, "t.i8", -100, &err), 0);
    ck_assert_int_eq(gguf_writer_set_u16(w, "t.u16", 60000, &err), 0);
    ck_assert_int_eq(gguf_writer_set_i16(w, "t.i16", -30000, &err), 0);
    ck_assert_int_eq(gguf_writer_set_u32(w, "t.u32", 4000000000u, &err), 0);
    ck_assert_int_eq(gguf_writer_set_i32(w, "t.i32", -2000000000, &err), 0);
    ck_assert_int_eq(gguf_writer_set_u64(w, "t.u64", UINT64_C(1) << 63, &err), 0);
    ck_assert_int_eq(gguf_writer_set_i64(w, "t.i64", INT64_MIN, &err), 0);
    ck_assert_int_eq(gguf_writer_set_f32(w, "t.f32", 1e-5f, &err), 0);
    ck_assert_int_eq(gguf_writer_set_f64(w, "t.f64", 3.141592653589793, &err), 0);
    ck_assert_int_eq(gguf_writer_set_bool(w, "t.bool", true, &err), 0);
    ck_assert_int_eq(gguf_writer_set_str(w, "t.str", "héllo", &err), 0);
    const int32_t ia[5] = {1, -2, 3, -4, 5};
    ck_assert_int_eq(gguf_writer_set_arr(w, "t.arr_i32", GGUF_TYPE_INT32, ia, 5, &err), 0);
    const float fa[3] = {0.5f, -1.25f, 1e30f};
    ck_assert_int_eq(gguf_writer_set_arr(w, "t.arr_f32", GGUF_TYPE_FLOAT32, fa, 3, &err), 0);
    const char *strs[4] = {"a", "", "Ġthe", "<|endoftext|>"};
    ck_assert_int_eq(gguf_writer_set_arr_str(w, "t.arr_str", strs, NULL, 4, &err), 0);
    ck_assert_int_eq(gguf_writer_set_arr(w, "t.arr_empty", GGUF_TYPE_UINT8, NULL, 0, &err), 0);
    /* replacing keeps one entry; removing drops it */
    ck_assert_int_eq(gguf_writer_set_u32(w, "t.replaced", 1, &err), 0);
    ck_assert_int_eq(gguf_writer_set_str(w, "t.replaced", "two", &err), 0);
    ck_assert_int_eq(gguf_writer_set_u32(w, "t.removed", 1, &err), 0);
    ck_assert_int_eq(gguf_writer_remove_kv(w, "t.removed", &err), 0);
    ck_assert_int_eq(gguf_writer_n_kv(w), 17);
    ck_assert_int_eq(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);

    struct gguf_file *f = gguf_open(path, &err);
    ck_assert_msg(f != NULL, "%s", err.message);
    ck_assert_int_eq(gguf_n_kv(f), 17);
    ck_assert_int_eq(gguf_n_tensors(f), 0);
    uint64_t u;
    int64_t i;
    double d;
    bool b;
    ck_assert_int_eq(gguf_get_uint(f, "t.u8", &u, &err), 0);
    ck_assert_uint_eq(u, 200);
    ck_assert_int_eq(gguf_get_int(f, "t.i8", &i, &err), 0);
    ck_assert_int_eq(i, -100);
    ck_assert_int_eq(gguf_get_uint(f, "t.u16", &u, &err), 0);
    ck_assert_uint_eq(u, 60000);
    ck_assert_int_eq(gguf_get_int(f, "t.i16", &i, &err), 0);
    ck_assert_int_eq(i, -30000);
    ck_assert_int_eq(gguf_get_uint(f, "t.u32", &u, &err), 0);
    ck_assert_uint_eq(u, 4000000000u);
    ck_assert_int_eq(gguf_get_int(f, "t.i32", &i, &err), 0);
    ck_assert_int_eq(i, -2000000000);
    ck_assert_int_eq(gguf_get_uint(f, "t.u64", &u, &err), 0);
    ck_assert_uint_eq(u, UINT64_C(1) << 63);
    ck_assert_int_eq(gguf_get_int(f, "t.i64", &i, &err), 0);
    ck_assert_int_eq(i, INT64_MIN);
    ck_assert_int_eq(gguf_get_float(f, "t.f32", &d, &err), 0);
    ck_assert(d == (double)1e-5f);
    ck_assert_int_eq(gguf_get_float(f, "t.f64", &d, &err), 0);
    ck_assert(d == 3.141592653589793);
    ck_assert_int_eq(gguf_get_bool(f, "t.bool", &b, &err), 0);
    ck_assert(b);
    char buf[32];
    ck_assert_int_eq(gguf_get_str_buf(f, "t.str", buf, sizeof(buf), &err), 0);
    ck_assert_str_eq(buf, "héllo");
    ck_assert_int_eq(gguf_get_str_buf(f, "t.replaced", buf, sizeof(buf), &err), 0);
    ck_assert_str_eq(buf, "two");
    ck_assert_int_eq(gguf_find_kv(f, "t.removed"), -1);
    struct gguf_value arr;
    ck_assert_int_eq(gguf_get_arr(f, "t.arr_i32", &arr, &err), 0);
    ck_assert_uint_eq(arr.arr.n, 5);
    for (int k = 0; k < 5; k++)
        ck_assert_int_eq(gguf_arr_int(&arr, k), ia[k]);
    ck_assert_int_eq(gguf_get_arr(f, "t.arr_f32", &arr, &err), 0);
    for (int k = 0; k < 3; k++)
        ck_assert(gguf_arr_float(&arr, k) == (double)fa[k]);
    ck_assert_int_eq(gguf_get_arr(f, "t.arr_str", &arr, &err), 0);
    ck_assert_uint_eq(arr.arr.n, 4);
    for (int k = 0; k < 4; k++)
        ck_assert(gguf_str_eq(gguf_arr_str(f, &arr, k), strs[k]));
    ck_assert_int_eq(gguf_get_arr(f, "t.arr_empty", &arr, &err), 0);
    ck_assert_uint_eq(arr.arr.n, 0);

    /* copying every KV into a second file gives the same values */
    char path2[256];
    tmp_path(path2, sizeof(path2), "kv2");
    w = gguf_writer_init(path2, &err);
    ck_assert_ptr_nonnull(w);
    for (int64_t k = 0; k < gguf_n_kv(f); k++)
        ck_assert_int_eq(gguf_writer_copy_kv(w, f, k, &err), 0);
    ck_assert_int_eq(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);
    struct gguf_file *g = gguf_open(path2, &err);
    ck_assert_msg(g != NULL, "%s", err.message);
    assert_same_model(f, g);
    gguf_close(g);
    gguf_close(f);
    unlink(path);
    unlink(path2);
}
END_TEST

START_TEST(tensors_stream_in_pieces) {
    char path[256];
    tmp_path(path, sizeof(path), "tensors");
    struct strata_error err = {0};
    struct gguf_writer *w = gguf_writer_init(path, &err);
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(gguf_writer_set_u32(w, "general.alignment", 64, &err), 0);
    /* a 1-D f32 of odd length (needs padding), a q8_0 matrix, a 3-D f16 */
    ck_assert_int_eq(gguf_writer_add_tensor(w, "a", QUANT_F32, 1, (int64_t[]){7}, &err), 0);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "b", QUANT_Q8_0, 2, (int64_t[]){64, 3}, &err), 0);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "c", QUANT_F16, 3, (int64_t[]){5, 2, 3}, &err), 0);
    ck_assert_int_eq(gguf_writer_begin(w, &err), 0);
    uint8_t bytes[400];
    for (int k = 0; k < 400; k++)
        bytes[k] = (uint8_t)(k * 7 + 1);
    ck_assert_int_eq(gguf_writer_remaining(w), 28);
    ck_assert_int_eq(gguf_writer_write(w, bytes, 10, &err), 0);
    ck_assert_int_eq(gguf_writer_write(w, bytes + 10, 18, &err), 0);
    ck_assert_int_eq(gguf_writer_current_tensor(w), 1);
    ck_assert_int_eq(gguf_writer_remaining(w), 2 * 34 * 3);
    for (int r = 0; r < 3; r++)
        ck_assert_int_eq(gguf_writer_write(w, bytes + 100 + r * 68, 68, &err), 0);
    /* too much for the last tensor: refused, nothing written */
    ck_assert_int_eq(gguf_writer_write(w, bytes, 61, &err), STRATA_E_INVALID);
    ck_assert_int_eq(gguf_writer_write(w, bytes + 300, 60, &err), 0);
    ck_assert_int_eq(gguf_writer_finish(w, &err), 0);
    gguf_writer_free(w);

    struct gguf_file *f = gguf_open(path, &err);
    ck_assert_msg(f != NULL, "%s", err.message);
    ck_assert_uint_eq(gguf_alignment(f), 64);
    ck_assert_int_eq(gguf_n_tensors(f), 3);
    ck_assert_uint_eq(gguf_data_offset(f) % 64, 0);
    const struct gguf_tensor_info *t = gguf_find_tensor(f, "a");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->offset, 0);
    ck_assert(!memcmp(t->data, bytes, 28));
    t = gguf_find_tensor(f, "b");
    ck_assert_uint_eq(t->offset, 64);
    ck_assert_uint_eq(t->type, QUANT_Q8_0);
    ck_assert_int_eq(t->ne[1], 3);
    ck_assert(!memcmp(t->data, bytes + 100, 204));
    t = gguf_find_tensor(f, "c");
    ck_assert_uint_eq(t->offset, 320);
    ck_assert_uint_eq(t->n_dims, 3);
    ck_assert_int_eq(t->ne[2], 3);
    ck_assert(!memcmp(t->data, bytes + 300, 60));
    ck_assert_uint_eq(gguf_file_size(f) % 64, 0);
    gguf_close(f);
    unlink(path);
}
END_TEST

START_TEST(misuse_is_an_error) {
    char path[256];
    tmp_path(path, sizeof(path), "misuse");
    struct strata_error err = {0};
    struct gguf_writer *w = gguf_writer_init(path, &err);
    ck_assert_ptr_nonnull(w);
    int64_t ne[2] = {33, 2};
    ck_assert_int_eq(gguf_writer_add_tensor(w, "x", QUANT_Q4_0, 2, ne, &err), STRATA_E_INVALID);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "x", 4, 2, ne, &err), STRATA_E_INVALID);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "x", QUANT_F32, 0, ne, &err), STRATA_E_INVALID);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "x", QUANT_F32, 2, (int64_t[]){0, 1}, &err),
                     STRATA_E_RANGE);
    char longname[80];
    memset(longname, 'n', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    ck_assert_int_eq(gguf_writer_add_tensor(w, longname, QUANT_F32, 2, ne, &err), STRATA_E_INVALID);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "x", QUANT_F32, 2, ne, &err), 0);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "x", QUANT_F32, 2, ne, &err), STRATA_E_INVALID);
    ck_assert_int_eq(gguf_writer_set_u32(w, "general.alignment", 48, &err), STRATA_E_RANGE);
    ck_assert_int_eq(gguf_writer_set_arr(w, "k", GGUF_TYPE_STRING, "x", 1, &err), STRATA_E_INVALID);
    ck_assert_int_eq(gguf_writer_write(w, "x", 1, &err), STRATA_E_INVALID); /* before begin */
    ck_assert_int_eq(gguf_writer_begin(w, &err), 0);
    ck_assert_int_eq(gguf_writer_set_u32(w, "late", 1, &err), STRATA_E_INVALID);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "y", QUANT_F32, 2, ne, &err), STRATA_E_INVALID);
    float row[33] = {0};
    ck_assert_int_eq(gguf_writer_write(w, row, sizeof(row), &err), 0);
    ck_assert_int_eq(gguf_writer_finish(w, &err), STRATA_E_INVALID); /* one row missing */
    ck_assert_msg(strstr(err.message, "x") != NULL, "%s", err.message);
    gguf_writer_free(w);
    ck_assert_int_eq(access(path, F_OK), -1); /* unfinished file removed */
    ck_assert_ptr_null(gguf_writer_init("/nonexistent-dir/x.gguf", &err));
    ck_assert_int_eq(err.code, STRATA_E_IO);
}
END_TEST

/* Re-writes a shared model by copying every KV and tensor through the writer. */
static void rewrite_shared(const char *rel, const char *tag) {
    char src[1024], dst[256];
    test_shared_path(src, sizeof(src), rel);
    tmp_path(dst, sizeof(dst), tag);
    struct strata_error err = {0};
    struct gguf_file *a = gguf_open(src, &err);
    ck_assert_msg(a != NULL, "%s: %s", src, err.message);
    struct gguf_writer *w = gguf_writer_init(dst, &err);
    ck_assert_ptr_nonnull(w);
    for (int64_t i = 0; i < gguf_n_kv(a); i++)
        ck_assert_int_eq(gguf_writer_copy_kv(w, a, i, &err), 0);
    for (int64_t i = 0; i < gguf_n_tensors(a); i++) {
        const struct gguf_tensor_info *t = gguf_tensor_at(a, i);
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)t->name.len, t->name.ptr);
        ck_assert_int_eq(gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, &err), 0);
    }
    ck_assert_int_eq(gguf_writer_begin(w, &err), 0);
    for (int64_t i = 0; i < gguf_n_tensors(a); i++) {
        const struct gguf_tensor_info *t = gguf_tensor_at(a, i);
        ck_assert_msg(gguf_writer_write(w, t->data, t->n_bytes, &err) == 0, "%s", err.message);
    }
    ck_assert_msg(gguf_writer_finish(w, &err) == 0, "%s", err.message);
    ck_assert_uint_eq(gguf_writer_bytes(w), gguf_file_size(a));
    gguf_writer_free(w);
    struct gguf_file *b = gguf_open(dst, &err);
    ck_assert_msg(b != NULL, "%s", err.message);
    assert_same_model(a, b);
    ck_assert_uint_eq(gguf_data_offset(a), gguf_data_offset(b));
    gguf_close(b);
    gguf_close(a);
    unlink(dst);
}

START_TEST(rewrite_stories) {
    rewrite_shared("models/stories260K.gguf", "stories");
}
END_TEST

START_TEST(rewrite_llama2_tiny) {
    rewrite_shared("models/llama-2-tiny-random.gguf", "llama2");
}
END_TEST

START_TEST(rewrite_vocab_gpt2) {
    rewrite_shared("fixtures/vocab/ggml-vocab-gpt-2.gguf", "gpt2");
}
END_TEST

static Suite *gguf_write_suite(void) {
    Suite *s = suite_create("gguf-write");
    TCase *tc = tcase_create("writer");
    tcase_add_test(tc, every_kv_type_round_trips);
    tcase_add_test(tc, tensors_stream_in_pieces);
    tcase_add_test(tc, misuse_is_an_error);
    tcase_add_test(tc, rewrite_stories);
    tcase_add_test(tc, rewrite_llama2_tiny);
    tcase_add_test(tc, rewrite_vocab_gpt2);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("gguf-write", gguf_write_suite)
