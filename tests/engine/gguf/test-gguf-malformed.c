/* tests/engine/gguf/test-gguf-malformed.c: a malformed-file corpus generated at
 * run time. Every case must give NULL, STRATA_E_FORMAT and a non-empty
 * message naming what is wrong, never a crash (the suite runs under
 * ASan+UBSan, and every input is copied into a buffer of exactly its size so
 * an over-read is caught).
 *
 * Sources: the real shared files truncated at many offsets and with fields
 * overwritten (located through the reader on the intact file), and small
 * files built here byte by byte that differ from a valid one in one field. */
#include <stdint.h>

#include "engine/gguf/gguf.h"
#include "engine/quant/quant.h"
#include "tests/harness.h"

/* ---- helpers ------------------------------------------------------------- */

/* Opens a private exact-size copy; returns the handle (or NULL) and err. */
static struct gguf_file *open_copy(const uint8_t *data, size_t n, struct strata_error *err) {
    uint8_t *copy = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(copy);
    memcpy(copy, data, n);
    strata_error_clear(err);
    struct gguf_file *f = gguf_open_memory(copy, n, err);
    if (f)
        gguf_close(f);
    free(copy);
    return f;
}

/* Asserts that data fails with FORMAT and that the message contains want. */
static void expect_bad(const uint8_t *data, size_t n, const char *want, const char *what) {
    struct strata_error err = {0};
    struct gguf_file *f = open_copy(data, n, &err);
    ck_assert_msg(f == NULL, "%s: accepted", what);
    ck_assert_msg(err.code == STRATA_E_FORMAT, "%s: code %d (%s)", what, err.code, err.message);
    ck_assert_msg(err.message[0] != '\0', "%s: empty message", what);
    ck_assert_msg(!want || strstr(err.message, want), "%s: message '%s' lacks '%s'", what,
                  err.message, want);
}

static void expect_ok(const uint8_t *data, size_t n, const char *what) {
    struct strata_error err = {0};
    uint8_t *copy = malloc(n);
    memcpy(copy, data, n);
    struct gguf_file *f = gguf_open_memory(copy, n, &err);
    ck_assert_msg(f != NULL, "%s: %s", what, err.message);
    gguf_close(f);
    free(copy);
}

static uint8_t *load(const char *rel, size_t *n) {
    char path[1024];
    uint8_t *b = test_read_file(test_shared_path(path, sizeof(path), rel), n);
    ck_assert_msg(b != NULL, "missing shared file %s", path);
    return b;
}

static void put_u32(uint8_t *p, uint32_t v) {
    memcpy(p, &v, 4);
}
static void put_u64(uint8_t *p, uint64_t v) {
    memcpy(p, &v, 8);
}

/* ---- a tiny builder for synthetic files ----------------------------------- */

struct buf {
    uint8_t d[4096];
    size_t n;
};

static void b_u32(struct buf *b, uint32_t v) {
    put_u32(b->d + b->n, v);
    b->n += 4;
}
static void b_u64(struct buf *b, uint64_t v) {
    put_u64(b->d + b->n, v);
    b->n += 8;
}
static void b_str(struct buf *b, const char *s) {
    size_t l = strlen(s);
    b_u64(b, l);
    memcpy(b->d + b->n, s, l);
    b->n += l;
}
static void b_header(struct buf *b, uint64_t n_tensors, uint64_t n_kv) {
    b->n = 0;
    b_u32(b, GGUF_MAGIC);
    b_u32(b, 3);
    b_u64(b, n_tensors);
    b_u64(b, n_kv);
}
static void b_kv_u32(struct buf *b, const char *key, uint32_t v) {
    b_str(b, key);
    b_u32(b, GGUF_TYPE_UINT32);
    b_u32(b, v);
}
static void b_tensor(struct buf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                     uint32_t type, uint64_t offset) {
    b_str(b, name);
    b_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++)
        b_u64(b, ne[i]);
    b_u32(b, type);
    b_u64(b, offset);
}
/* Pads to align and appends data_bytes zero bytes. */
static void b_data(struct buf *b, size_t align, size_t data_bytes) {
    while (b->n % align)
        b->d[b->n++] = 0;
    memset(b->d + b->n, 0, data_bytes);
    b->n += data_bytes;
}

/* Two f32 tensors of 8 elements (32 bytes each) at offsets 0 and 32. */
static void two_tensors(struct buf *b, uint64_t off2, uint32_t type2, uint32_t n_dims2,
                        const uint64_t *ne2) {
    static const uint64_t ne8[1] = {8};
    b_header(b, 2, 1);
    b_kv_u32(b, "general.alignment", 32);
    b_tensor(b, "a", 1, ne8, QUANT_F32, 0);
    b_tensor(b, "b", n_dims2, ne2 ? ne2 : ne8, type2, off2);
    b_data(b, 32, 64);
}

/* ---- truncation ------------------------------------------------------------ */

/* Every cut in [0, dense) and `spread` cuts spaced through the rest must fail:
 * in all shared files the last tensor or KV ends at the last byte. */
static void truncate_file(const char *rel, size_t dense, size_t spread) {
    size_t n;
    uint8_t *b = load(rel, &n);
    expect_ok(b, n, rel);
    if (dense > n)
        dense = n;
    for (size_t cut = 0; cut < dense; cut++) {
        char what[256];
        snprintf(what, sizeof(what), "%s cut at %zu", rel, cut);
        expect_bad(b, cut, NULL, what);
    }
    for (size_t k = 0; k < spread && n > dense; k++) {
        size_t cut = dense + (size_t)((double)(n - dense) * k / spread);
        char what[256];
        snprintf(what, sizeof(what), "%s cut at %zu", rel, cut);
        expect_bad(b, cut, NULL, what);
    }
    expect_bad(b, n - 1, NULL, "last byte missing");
    free(b);
}

START_TEST(truncate_stories) {
    /* the whole header region (14,176 bytes) byte by byte */
    truncate_file("models/stories260K.gguf", 14176, 300);
}
END_TEST

START_TEST(truncate_others) {
    static const char *const files[] = {
        "models/llama-2-tiny-random.gguf",          "fixtures/vocab/ggml-vocab-llama-spm.gguf",
        "fixtures/vocab/ggml-vocab-gpt-2.gguf",     "fixtures/vocab/ggml-vocab-bert-bge.gguf",
        "fixtures/vocab/ggml-vocab-phi-3.gguf",     "fixtures/vocab/ggml-vocab-deepseek-coder.gguf",
        "fixtures/vocab/ggml-vocab-falcon.gguf",    "fixtures/vocab/ggml-vocab-baichuan.gguf",
        "fixtures/vocab/ggml-vocab-starcoder.gguf",
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        truncate_file(files[i], 1024, 60);
}
END_TEST

/* ---- real-file field corruption --------------------------------------------- */

START_TEST(stories_header_fields) {
    size_t n;
    uint8_t *b = load("models/stories260K.gguf", &n);
    uint8_t *m = malloc(n);
    /* kv 0 is tokenizer.ggml.tokens: key len @24, type @53, elem type @57,
     * count @61, first string length @69 (Python dump of the file) */
    struct {
        size_t at;
        int width;
        uint64_t v;
        const char *want;
    } cases[] = {
        {0, 4, 0x46554746u, "magic"},
        {4, 4, 1, "version 1"},
        {4, 4, 4, "version 4"},
        {4, 4, 0, "version"},
        {8, 8, UINT64_MAX, "tensor count"},
        {8, 8, 1u << 20, "tensor count"},
        {8, 8, 49, NULL},
        {16, 8, UINT64_MAX, "kv count"},
        {16, 8, 100000, "kv count"},
        {16, 8, 20, NULL},
        {24, 8, UINT64_MAX, "key length"},
        {24, 8, n, "key length"},
        {24, 8, 0, "empty key"},
        {53, 4, 13, "unknown value type 13"},
        {53, 4, UINT32_MAX, "unknown value type"},
        {57, 4, 99, "unknown array element type 99"},
        {61, 8, UINT64_MAX, "array of"},
        {61, 8, 1u << 28, "array of"},
        {61, 8, 100000, NULL},
        {69, 8, UINT64_MAX, "array string length"},
        {69, 8, n - 70, "array string length"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memcpy(m, b, n);
        if (cases[i].width == 4)
            put_u32(m + cases[i].at, (uint32_t)cases[i].v);
        else
            put_u64(m + cases[i].at, cases[i].v);
        char what[64];
        snprintf(what, sizeof(what), "header case %zu", i);
        expect_bad(m, n, cases[i].want, what);
    }
    free(m);
    free(b);
}
END_TEST

enum field { F_NDIMS, F_NE0, F_NE1, F_TYPE, F_OFFSET, F_NAMELEN };

/* Overwrites a field of tensor ti of stories260K and expects failure. */
static void stories_tensor_case(int64_t ti, enum field fld, uint64_t v, const char *want) {
    size_t n;
    uint8_t *b = load("models/stories260K.gguf", &n);
    struct strata_error err = {0};
    struct gguf_file *f = gguf_open_memory(b, n, &err);
    ck_assert_ptr_nonnull(f);
    const struct gguf_tensor_info *t = gguf_tensor_at(f, ti);
    size_t name_at = (size_t)((const uint8_t *)t->name.ptr - b);
    size_t dims_at = name_at + t->name.len;
    size_t type_at = dims_at + 4 + 8 * t->n_dims;
    gguf_close(f);
    uint8_t *m = malloc(n);
    memcpy(m, b, n);
    switch (fld) {
    case F_NDIMS:
        put_u32(m + dims_at, (uint32_t)v);
        break;
    case F_NE0:
        put_u64(m + dims_at + 4, v);
        break;
    case F_NE1:
        put_u64(m + dims_at + 12, v);
        break;
    case F_TYPE:
        put_u32(m + type_at, (uint32_t)v);
        break;
    case F_OFFSET:
        put_u64(m + type_at + 4, v);
        break;
    case F_NAMELEN:
        put_u64(m + name_at - 8, v);
        break;
    }
    char what[96];
    snprintf(what, sizeof(what), "tensor %lld field %d = %llu", (long long)ti, (int)fld,
             (unsigned long long)v);
    expect_bad(m, n, want, what);
    free(m);
    free(b);
}

START_TEST(stories_tensor_fields) {
    /* tensor 3 is blk.0.attn_q.weight, 64 x 64 f32 at offset 262400 */
    const char *who = "tensor 3 ('blk.0.attn_q.weight')";
    stories_tensor_case(3, F_NDIMS, 0, "n_dims 0");
    stories_tensor_case(3, F_NDIMS, 5, "n_dims 5");
    stories_tensor_case(3, F_NDIMS, UINT32_MAX, who);
    stories_tensor_case(3, F_NE0, 0, "ne[0] = 0");
    stories_tensor_case(3, F_NE1, 0, "ne[1] = 0");
    stories_tensor_case(3, F_NE0, UINT64_MAX, "ne[0]");
    stories_tensor_case(3, F_NE0, 1ull << 62, "overflow");
    stories_tensor_case(3, F_NE1, 1ull << 62, "overflow");
    stories_tensor_case(3, F_NE0, 1u << 20, "beyond end of file");
    stories_tensor_case(3, F_TYPE, 4, "unknown tensor type 4");
    stories_tensor_case(3, F_TYPE, 40, "unknown tensor type 40");
    stories_tensor_case(3, F_TYPE, UINT32_MAX, "unknown tensor type");
    stories_tensor_case(3, F_TYPE, QUANT_Q4_K, "block size"); /* 64 % 256 */
    stories_tensor_case(3, F_OFFSET, 262400 + 4, "not a multiple of the alignment");
    stories_tensor_case(3, F_OFFSET, 262400 - 32, "overlaps");
    stories_tensor_case(3, F_OFFSET, 0, "overlaps");
    stories_tensor_case(3, F_OFFSET, 1ull << 40, "beyond end of file");
    stories_tensor_case(3, F_OFFSET, UINT64_MAX - 31, who);
    stories_tensor_case(47, F_OFFSET, 1170944 + 32, "beyond end of file");
    stories_tensor_case(3, F_NAMELEN, UINT64_MAX, "tensor name length");
    stories_tensor_case(3, F_NAMELEN, 0, "empty tensor name");
}
END_TEST

START_TEST(stories_duplicates) {
    size_t n;
    uint8_t *b = load("models/stories260K.gguf", &n);
    struct gguf_file *f = gguf_open_memory(b, n, NULL);
    ck_assert_ptr_nonnull(f);
    /* blk.0.attn_k.weight (4) renamed to blk.0.attn_q.weight (3): same length */
    size_t at3 = (size_t)((const uint8_t *)gguf_tensor_at(f, 3)->name.ptr - b);
    size_t at4 = (size_t)((const uint8_t *)gguf_tensor_at(f, 4)->name.ptr - b);
    /* llama.block_count (16) renamed to llama.context_length... lengths
     * differ, so use general.name (5) -> general.architecture? Also differ:
     * pick bos/eos_token_id (7, 8), both 27 bytes. */
    size_t k7 = (size_t)((const uint8_t *)gguf_kv_at(f, 7)->key.ptr - b);
    size_t k8 = (size_t)((const uint8_t *)gguf_kv_at(f, 8)->key.ptr - b);
    ck_assert_uint_eq(gguf_kv_at(f, 7)->key.len, gguf_kv_at(f, 8)->key.len);
    gguf_close(f);
    uint8_t *m = malloc(n);
    memcpy(m, b, n);
    memcpy(m + at4, m + at3, 19);
    expect_bad(m, n, "duplicate tensor name", "duplicate tensor");
    memcpy(m, b, n);
    memcpy(m + k8, m + k7, 27);
    expect_bad(m, n, "duplicate key", "duplicate key");
    free(m);
    free(b);
}
END_TEST

/* ---- synthetic files ------------------------------------------------------- */

START_TEST(synthetic_valid) {
    struct buf b;
    two_tensors(&b, 32, QUANT_F32, 1, NULL);
    expect_ok(b.d, b.n, "two tensors");
    /* zero tensors, zero KVs: just a header */
    b_header(&b, 0, 0);
    expect_ok(b.d, b.n, "header only");
    /* version 2 */
    two_tensors(&b, 32, QUANT_F32, 1, NULL);
    put_u32(b.d + 4, 2);
    expect_ok(b.d, b.n, "version 2");
}
END_TEST

START_TEST(synthetic_tensors) {
    struct buf b;
    two_tensors(&b, 16, QUANT_F32, 1, NULL);
    expect_bad(b.d, b.n, "alignment", "misaligned");
    two_tensors(&b, 0, QUANT_F32, 1, NULL);
    expect_bad(b.d, b.n, "overlaps tensor 0 ('a')", "overlap at 0");
    two_tensors(&b, 64, QUANT_F32, 1, NULL);
    expect_bad(b.d, b.n, "beyond end of file", "past end");
    uint64_t ne_over[2] = {1ull << 32, 1ull << 32};
    two_tensors(&b, 32, QUANT_F32, 2, ne_over);
    expect_bad(b.d, b.n, "overflow", "element overflow");
    uint64_t ne_bytes[1] = {1ull << 62};
    two_tensors(&b, 32, QUANT_F32, 1, ne_bytes);
    expect_bad(b.d, b.n, "byte size overflows", "byte overflow");
    uint64_t ne_q[1] = {33};
    two_tensors(&b, 32, QUANT_Q4_0, 1, ne_q);
    expect_bad(b.d, b.n, "block size", "q4_0 33");
    uint64_t ne_zero[3] = {8, 1, 0};
    two_tensors(&b, 32, QUANT_F32, 3, ne_zero);
    expect_bad(b.d, b.n, "ne[2] = 0", "zero dim");
    uint64_t ne5[5] = {8, 1, 1, 1, 1};
    two_tensors(&b, 32, QUANT_F32, 5, ne5);
    expect_bad(b.d, b.n, "n_dims 5", "5 dims");
    two_tensors(&b, 32, QUANT_F32, 0, NULL);
    expect_bad(b.d, b.n, "n_dims 0", "0 dims");
    two_tensors(&b, 32, 31, 1, NULL);
    expect_bad(b.d, b.n, "unknown tensor type 31", "removed type");
    /* data section missing entirely */
    two_tensors(&b, 32, QUANT_F32, 1, NULL);
    b.n -= 64;
    expect_bad(b.d, b.n, NULL, "no data");
}
END_TEST

START_TEST(synthetic_alignment) {
    static const uint32_t bad[] = {0, 3, 48, 0x80000001u};
    struct buf b;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        two_tensors(&b, 32, QUANT_F32, 1, NULL);
        put_u32(b.d + 24 + 8 + 17 + 4, bad[i]); /* the u32 value of general.alignment */
        expect_bad(b.d, b.n, "general.alignment", "bad alignment");
    }
    /* alignment stored as uint64 */
    b_header(&b, 0, 1);
    b_str(&b, "general.alignment");
    b_u32(&b, GGUF_TYPE_UINT64);
    b_u64(&b, 32);
    expect_bad(b.d, b.n, "must be uint32", "alignment type");
    /* alignment 64 with offsets that are only 32-aligned */
    two_tensors(&b, 32, QUANT_F32, 1, NULL);
    put_u32(b.d + 24 + 8 + 17 + 4, 64);
    expect_bad(b.d, b.n, "alignment 64", "offset vs 64");
}
END_TEST

START_TEST(synthetic_values) {
    struct buf b;
    /* string value length past the end */
    b_header(&b, 0, 1);
    b_str(&b, "k");
    b_u32(&b, GGUF_TYPE_STRING);
    b_u64(&b, 1000);
    expect_bad(b.d, b.n, "string value length", "string len");
    /* array of uint64 whose byte size overflows */
    b_header(&b, 0, 1);
    b_str(&b, "k");
    b_u32(&b, GGUF_TYPE_ARRAY);
    b_u32(&b, GGUF_TYPE_UINT64);
    b_u64(&b, (1ull << 61) + 1);
    expect_bad(b.d, b.n, "array of", "array overflow");
    /* array of arrays, huge count */
    b_header(&b, 0, 1);
    b_str(&b, "k");
    b_u32(&b, GGUF_TYPE_ARRAY);
    b_u32(&b, GGUF_TYPE_ARRAY);
    b_u64(&b, UINT64_MAX);
    expect_bad(b.d, b.n, "array of", "nested count");
    /* nesting 9 deep: 8 levels are refused */
    b_header(&b, 0, 1);
    b_str(&b, "k");
    b_u32(&b, GGUF_TYPE_ARRAY);
    for (int i = 0; i < 9; i++) {
        b_u32(&b, GGUF_TYPE_ARRAY);
        b_u64(&b, 1);
    }
    b_u32(&b, GGUF_TYPE_UINT8);
    b_u64(&b, 0);
    expect_bad(b.d, b.n, "nested deeper", "depth");
    /* 3 levels is fine, and gguf_arr_get reaches the innermost element */
    b_header(&b, 0, 1);
    b_str(&b, "k");
    b_u32(&b, GGUF_TYPE_ARRAY);
    b_u32(&b, GGUF_TYPE_ARRAY);
    b_u64(&b, 1);
    b_u32(&b, GGUF_TYPE_ARRAY);
    b_u64(&b, 1);
    b_u32(&b, GGUF_TYPE_INT16);
    b_u64(&b, 2);
    b_u32(&b, 0xfffe0005u); /* 5, -2 */
    struct gguf_file *f = gguf_open_memory(b.d, b.n, NULL);
    ck_assert_ptr_nonnull(f);
    struct gguf_value a;
    ck_assert_int_eq(gguf_get_arr(f, "k", &a, NULL), 0);
    struct gguf_value l1 = gguf_arr_get(f, &a, 0);
    struct gguf_value l2 = gguf_arr_get(f, &l1, 0);
    ck_assert_int_eq(l2.arr.elem_type, GGUF_TYPE_INT16);
    ck_assert_int_eq(gguf_arr_int(&l2, 1), -2);
    ck_assert_int_eq(gguf_arr_get(f, &l2, 0).i64, 5);
    gguf_close(f);
    /* bool, float64, int8 value truncated by one byte */
    static const uint32_t types[] = {GGUF_TYPE_BOOL, GGUF_TYPE_FLOAT64, GGUF_TYPE_INT8};
    for (size_t i = 0; i < 3; i++) {
        b_header(&b, 0, 1);
        b_str(&b, "kkkkk"); /* long enough to pass the header's count check */
        b_u32(&b, types[i]);
        expect_bad(b.d, b.n, "kv 0 ('kkkkk')", "scalar truncated");
    }
    /* hostile key bytes are printed safely */
    b_header(&b, 0, 1);
    b_str(&b, "\x01\xff\n");
    b_u32(&b, 77);
    expect_bad(b.d, b.n, "kv 0 ('?\?\?')", "weird key");
}
END_TEST

/* Deterministic random byte corruption of the stories header region: any
 * outcome is fine except a crash, a non-FORMAT error or an empty message. */
START_TEST(random_flips) {
    size_t n;
    uint8_t *b = load("models/stories260K.gguf", &n);
    uint8_t *m = malloc(n);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    int n_bad = 0;
    for (int it = 0; it < 1500; it++) {
        memcpy(m, b, n);
        int flips = 1 + it % 4;
        for (int k = 0; k < flips; k++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            size_t at = (size_t)(s % 14176);
            m[at] = (uint8_t)(s >> 32);
        }
        struct strata_error err = {0};
        struct gguf_file *f = gguf_open_memory(m, n, &err);
        if (f) {
            gguf_close(f);
        } else {
            n_bad++;
            ck_assert_int_eq(err.code, STRATA_E_FORMAT);
            ck_assert(err.message[0] != '\0');
        }
    }
    ck_assert_int_gt(n_bad, 100);
    free(m);
    free(b);
}
END_TEST

static Suite *malformed_suite(void) {
    Suite *s = suite_create("gguf-malformed");
    TCase *tc = tcase_create("malformed");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, truncate_stories);
    tcase_add_test(tc, truncate_others);
    tcase_add_test(tc, stories_header_fields);
    tcase_add_test(tc, stories_tensor_fields);
    tcase_add_test(tc, stories_duplicates);
    tcase_add_test(tc, synthetic_valid);
    tcase_add_test(tc, synthetic_tensors);
    tcase_add_test(tc, synthetic_alignment);
    tcase_add_test(tc, synthetic_values);
    tcase_add_test(tc, random_flips);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("gguf-malformed", malformed_suite)
