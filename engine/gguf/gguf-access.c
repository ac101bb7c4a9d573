/* engine/gguf/gguf-access.c: queries on a validated gguf_file (see gguf.h).
 * gguf.c has already range-checked every string, array and tensor, so these
 * functions only check what the caller passes (index, key, wanted type). */
#include "engine/gguf/gguf-impl.h"

#include <inttypes.h>
#include <string.h>

uint64_t gguf_type_size(uint32_t type) {
    switch (type) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_BOOL:
        return 1;
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_INT16:
        return 2;
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_FLOAT32:
        return 4;
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT64:
    case GGUF_TYPE_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

/* FNV-1a, 64-bit. */
uint64_t gguf_hash_bytes(const char *p, uint64_t len) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < len; i++) {
        h ^= (unsigned char)p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

struct gguf_value gguf_decode_scalar(uint32_t type, const uint8_t *p) {
    struct gguf_value v = {.type = (enum gguf_type)type};
    switch (type) {
    case GGUF_TYPE_UINT8:
        v.u64 = p[0];
        break;
    case GGUF_TYPE_INT8:
        v.i64 = (int8_t)p[0];
        break;
    case GGUF_TYPE_BOOL:
        v.b = p[0] != 0;
        break;
    case GGUF_TYPE_UINT16: {
        uint16_t x;
        memcpy(&x, p, 2);
        v.u64 = x;
        break;
    }
    case GGUF_TYPE_INT16: {
        int16_t x;
        memcpy(&x, p, 2);
        v.i64 = x;
        break;
    }
    case GGUF_TYPE_UINT32: {
        uint32_t x;
        memcpy(&x, p, 4);
        v.u64 = x;
        break;
    }
    case GGUF_TYPE_INT32: {
        int32_t x;
        memcpy(&x, p, 4);
        v.i64 = x;
        break;
    }
    case GGUF_TYPE_FLOAT32: {
        float x;
        memcpy(&x, p, 4);
        v.f64 = x;
        break;
    }
    case GGUF_TYPE_UINT64:
        memcpy(&v.u64, p, 8);
        break;
    case GGUF_TYPE_INT64:
        memcpy(&v.i64, p, 8);
        break;
    case GGUF_TYPE_FLOAT64:
        memcpy(&v.f64, p, 8);
        break;
    default:
        break;
    }
    return v;
}

uint32_t gguf_version(const struct gguf_file *f) {
    return f->version;
}
uint32_t gguf_alignment(const struct gguf_file *f) {
    return f->alignment;
}
uint64_t gguf_data_offset(const struct gguf_file *f) {
    return f->data_offset;
}
uint64_t gguf_file_size(const struct gguf_file *f) {
    return f->size;
}
const uint8_t *gguf_file_base(const struct gguf_file *f) {
    return f->base;
}
const char *gguf_path(const struct gguf_file *f) {
    return f->path;
}

int64_t gguf_n_kv(const struct gguf_file *f) {
    return f->n_kv;
}

const struct gguf_kv *gguf_kv_at(const struct gguf_file *f, int64_t i) {
    if (i < 0 || i >= f->n_kv)
        return NULL;
    return &f->kvs[i];
}

static int64_t hash_find(const int64_t *h, uint64_t cap, const struct gguf_file *f, bool tensors,
                         const char *name) {
    if (!h || !name)
        return -1;
    uint64_t len = strlen(name);
    uint64_t slot = gguf_hash_bytes(name, len) & (cap - 1);
    while (h[slot] >= 0) {
        struct gguf_str s = tensors ? f->tensors[h[slot]].name : f->kvs[h[slot]].key;
        if (s.len == len && memcmp(s.ptr, name, len) == 0)
            return h[slot];
        slot = (slot + 1) & (cap - 1);
    }
    return -1;
}

int64_t gguf_find_kv(const struct gguf_file *f, const char *key) {
    return hash_find(f->kv_hash, f->kv_hash_cap, f, false, key);
}

static const struct gguf_value *lookup(const struct gguf_file *f, const char *key,
                                       struct strata_error *err) {
    int64_t i = gguf_find_kv(f, key);
    if (i < 0) {
        strata_error_set(err, STRATA_E_NOT_FOUND, "gguf: key '%s' not found", key ? key : "");
        return NULL;
    }
    return &f->kvs[i].value;
}

static int bad_type(struct strata_error *err, const char *key, enum gguf_type t, const char *want) {
    return strata_error_set(err, STRATA_E_FORMAT, "gguf: key '%s' holds %s, not %s", key,
                            gguf_type_name(t), want);
}

static bool is_uint(enum gguf_type t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 ||
           t == GGUF_TYPE_UINT64;
}

static bool is_int(enum gguf_type t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}

static bool is_float(enum gguf_type t) {
    return t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64;
}

int gguf_get_uint(const struct gguf_file *f, const char *key, uint64_t *out,
                  struct strata_error *err) {
    const struct gguf_value *v = lookup(f, key, err);
    if (!v)
        return STRATA_E_NOT_FOUND;
    if (is_uint(v->type)) {
        *out = v->u64;
        return 0;
    }
    if (is_int(v->type) && v->i64 >= 0) {
        *out = (uint64_t)v->i64;
        return 0;
    }
    return bad_type(err, key, v->type, "a non-negative integer");
}

int gguf_get_int(const struct gguf_file *f, const char *key, int64_t *out,
                 struct strata_error *err) {
    const struct gguf_value *v = lookup(f, key, err);
    if (!v)
        return STRATA_E_NOT_FOUND;
    if (is_int(v->type)) {
        *out = v->i64;
        return 0;
    }
    if (is_uint(v->type) && v->u64 <= (uint64_t)INT64_MAX) {
        *out = (int64_t)v->u64;
        return 0;
    }
    return bad_type(err, key, v->type, "an int64");
}

int gguf_get_float(const struct gguf_file *f, const char *key, double *out,
                   struct strata_error *err) {
    const struct gguf_value *v = lookup(f, key, err);
    if (!v)
        return STRATA_E_NOT_FOUND;
    if (is_float(v->type))
        *out = v->f64;
    else if (is_int(v->type))
        *out = (double)v->i64;
    else if (is_uint(v->type))
        *out = (double)v->u64;
    else
        return bad_type(err, key, v->type, "a number");
    return 0;
}

int gguf_get_bool(const struct gguf_file *f, const char *key, bool *out, struct strata_error *err) {
    const struct gguf_value *v = lookup(f, key, err);
    if (!v)
        return STRATA_E_NOT_FOUND;
    if (v->type != GGUF_TYPE_BOOL)
        return bad_type(err, key, v->type, "a bool");
    *out = v->b;
    return 0;
}

int gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *out,
                 struct strata_error *err) {
    const struct gguf_value *v = lookup(f, key, err);
    if (!v)
        return STRATA_E_NOT_FOUND;
    if (v->type != GGUF_TYPE_STRING)
        return bad_type(err, key, v->type, "a string");
    *out = v->str;
    return 0;
}

int gguf_get_arr(const struct gguf_file *f, const char *key, struct gguf_value *out,
                 struct strata_error *err) {
    const struct gguf_value *v = lookup(f, key, err);
    if (!v)
        return STRATA_E_NOT_FOUND;
    if (v->type != GGUF_TYPE_ARRAY)
        return bad_type(err, key, v->type, "an array");
    *out = *v;
    return 0;
}

int gguf_get_str_buf(const struct gguf_file *f, const char *key, char *buf, size_t cap,
                     struct strata_error *err) {
    struct gguf_str s;
    int rc = gguf_get_str(f, key, &s, err);
    if (rc)
        return rc;
    if (cap == 0)
        return 0;
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    memcpy(buf, s.ptr, n);
    buf[n] = '\0';
    return 0;
}

/* A wrong element type is the caller's bug, but the type comes from the
 * file, so it answers an empty/zero value instead of aborting. An index out
 * of range is a plain bug: assert. */
struct gguf_str gguf_arr_str(const struct gguf_file *f, const struct gguf_value *arr, uint64_t i) {
    STRATA_ASSERT(arr->type == GGUF_TYPE_ARRAY && i < arr->arr.n);
    struct gguf_str s = {"", 0};
    if (arr->arr.elem_type != GGUF_TYPE_STRING)
        return s;
    uint64_t off = f->elem_index[arr->arr.index + i];
    memcpy(&s.len, f->base + off, 8);
    s.ptr = (const char *)(f->base + off + 8);
    return s;
}

struct gguf_value gguf_arr_get(const struct gguf_file *f, const struct gguf_value *arr,
                               uint64_t i) {
    STRATA_ASSERT(arr->type == GGUF_TYPE_ARRAY && i < arr->arr.n);
    enum gguf_type et = arr->arr.elem_type;
    struct gguf_value v = {.type = et};
    if (et == GGUF_TYPE_STRING) {
        v.str = gguf_arr_str(f, arr, i);
    } else if (et == GGUF_TYPE_ARRAY) {
        uint64_t off = f->elem_index[arr->arr.index + 2 * i];
        uint32_t inner;
        memcpy(&inner, f->base + off, 4);
        v.arr.elem_type = (enum gguf_type)inner;
        memcpy(&v.arr.n, f->base + off + 4, 8);
        v.arr.data = f->base + off + 12;
        v.arr.index = f->elem_index[arr->arr.index + 2 * i + 1];
    } else {
        v = gguf_decode_scalar(et, arr->arr.data + i * gguf_type_size(et));
    }
    return v;
}

uint64_t gguf_arr_uint(const struct gguf_value *arr, uint64_t i) {
    STRATA_ASSERT(arr->type == GGUF_TYPE_ARRAY && i < arr->arr.n);
    enum gguf_type et = arr->arr.elem_type;
    struct gguf_value v = gguf_decode_scalar(et, arr->arr.data + i * gguf_type_size(et));
    if (is_uint(et))
        return v.u64;
    if (is_int(et))
        return (uint64_t)v.i64;
    if (et == GGUF_TYPE_BOOL)
        return v.b;
    return 0;
}

int64_t gguf_arr_int(const struct gguf_value *arr, uint64_t i) {
    STRATA_ASSERT(arr->type == GGUF_TYPE_ARRAY && i < arr->arr.n);
    enum gguf_type et = arr->arr.elem_type;
    struct gguf_value v = gguf_decode_scalar(et, arr->arr.data + i * gguf_type_size(et));
    if (is_int(et))
        return v.i64;
    if (is_uint(et))
        return (int64_t)v.u64;
    if (et == GGUF_TYPE_BOOL)
        return v.b;
    return 0;
}

double gguf_arr_float(const struct gguf_value *arr, uint64_t i) {
    STRATA_ASSERT(arr->type == GGUF_TYPE_ARRAY && i < arr->arr.n);
    enum gguf_type et = arr->arr.elem_type;
    struct gguf_value v = gguf_decode_scalar(et, arr->arr.data + i * gguf_type_size(et));
    if (is_float(et))
        return v.f64;
    if (is_int(et))
        return (double)v.i64;
    if (is_uint(et))
        return (double)v.u64;
    return 0.0;
}

int64_t gguf_n_tensors(const struct gguf_file *f) {
    return f->n_tensors;
}

const struct gguf_tensor_info *gguf_tensor_at(const struct gguf_file *f, int64_t i) {
    if (i < 0 || i >= f->n_tensors)
        return NULL;
    return &f->tensors[i];
}

const struct gguf_tensor_info *gguf_find_tensor(const struct gguf_file *f, const char *name) {
    int64_t i = hash_find(f->tensor_hash, f->tensor_hash_cap, f, true, name);
    return i < 0 ? NULL : &f->tensors[i];
}

int64_t gguf_tensor_n_elements(const struct gguf_tensor_info *t) {
    /* Validated at open: the product fits in int64. */
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

bool gguf_str_eq(struct gguf_str s, const char *cstr) {
    size_t n = strlen(cstr);
    return s.len == n && memcmp(s.ptr, cstr, n) == 0;
}

const char *gguf_type_name(enum gguf_type t) {
    static const char *const names[GGUF_TYPE_COUNT] = {
        [GGUF_TYPE_UINT8] = "uint8",     [GGUF_TYPE_INT8] = "int8",
        [GGUF_TYPE_UINT16] = "uint16",   [GGUF_TYPE_INT16] = "int16",
        [GGUF_TYPE_UINT32] = "uint32",   [GGUF_TYPE_INT32] = "int32",
        [GGUF_TYPE_FLOAT32] = "float32", [GGUF_TYPE_BOOL] = "bool",
        [GGUF_TYPE_STRING] = "string",   [GGUF_TYPE_ARRAY] = "array",
        [GGUF_TYPE_UINT64] = "uint64",   [GGUF_TYPE_INT64] = "int64",
        [GGUF_TYPE_FLOAT64] = "float64",
    };
    if ((unsigned)t >= GGUF_TYPE_COUNT)
        return "?";
    return names[t];
}
