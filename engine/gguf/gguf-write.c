/* engine/gguf/gguf-write.c: streaming GGUF v3 writer (contract in gguf.h).
 *
 * Declarations (KVs, tensor infos) are kept as small serialized blobs; begin()
 * lays out the data section (each tensor at an aligned offset) and writes
 * everything before it; tensor bytes then pass straight through one stdio
 * buffer, so memory does not grow with the model. Byte layout: see gguf.h.
 */
#include "engine/gguf/gguf-impl.h"
#include "engine/gguf/gguf.h"
#include "engine/quant/quant.h"
#include "engine/core/buf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_WRITE_VERSION 3
#define GGUF_NAME_MAX 64 /* ggml's GGML_MAX_NAME: llama.cpp refuses longer names */
#define GGUF_WRITE_BUF (1u << 20)

struct wbuf {
    uint8_t *data;
    size_t len, cap;
    int oom;
};

struct writer_kv {
    char *key;     /* owned, NUL-terminated */
    uint8_t *blob; /* owned: serialized "u32 type | value" (key excluded) */
    size_t len;
};

struct writer_tensor {
    char *name; /* owned */
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint32_t type;
    uint64_t n_bytes;
    uint64_t offset; /* relative to the data section; set by begin() */
};

struct gguf_writer {
    FILE *fp;
    char *path;
    char *iobuf; /* GGUF_WRITE_BUF bytes of stdio buffer */
    struct writer_kv *kvs;
    int64_t n_kv, cap_kv;
    struct writer_tensor *tensors;
    int64_t n_tensors, cap_tensors;
    uint32_t alignment;
    int state;          /* 0 declaring, 1 writing data, 2 finished, -1 failed */
    int64_t cur;        /* tensor being written */
    uint64_t cur_done;  /* bytes of it written */
    uint64_t n_written; /* bytes written to the file */
};

static void wb_put(struct wbuf *b, const void *p, size_t n) {
    if (b->oom || n == 0)
        return;
    if (b->len > SIZE_MAX - n || strata_grow((void **)&b->data, &b->cap, b->len + n, 1) < 0) {
        b->oom = 1;
        return;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

/* GGUF is little-endian and values are copied from host memory as is;
 * gguf_writer_init() refuses big-endian hosts. */
static void wb_u32(struct wbuf *b, uint32_t v) {
    wb_put(b, &v, 4);
}
static void wb_u64(struct wbuf *b, uint64_t v) {
    wb_put(b, &v, 8);
}
static void wb_str(struct wbuf *b, const char *s, uint64_t n) {
    wb_u64(b, n);
    wb_put(b, s, (size_t)n);
}

struct gguf_writer *gguf_writer_init(const char *path, struct strata_error *err) {
    const uint32_t probe = 1;
    if (*(const uint8_t *)&probe != 1) {
        strata_error_set(err, STRATA_E_UNSUPPORTED, "gguf writer: big-endian host");
        return NULL;
    }
    struct gguf_writer *w = calloc(1, sizeof(*w));
    if (!w)
        goto nomem;
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    w->path = strdup(path);
    w->iobuf = malloc(GGUF_WRITE_BUF);
    if (!w->path || !w->iobuf)
        goto nomem;
    w->fp = fopen(path, "wb");
    if (!w->fp) {
        strata_error_set(err, STRATA_E_IO, "cannot create %s: %s", path, strerror(errno));
        goto fail;
    }
    setvbuf(w->fp, w->iobuf, _IOFBF, GGUF_WRITE_BUF);
    return w;
nomem:
    strata_error_set(err, STRATA_E_NOMEM, "gguf writer: out of memory");
fail:
    if (w) {
        free(w->iobuf);
        free(w->path);
        free(w);
    }
    return NULL;
}

void gguf_writer_free(struct gguf_writer *w) {
    if (!w)
        return;
    if (w->fp) {
        fclose(w->fp);
        if (w->state != 2)
            remove(w->path);
    }
    for (int64_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].blob);
    }
    free(w->kvs);
    for (int64_t i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].name);
    free(w->tensors);
    free(w->iobuf);
    free(w->path);
    free(w);
}

static int check_declaring(struct gguf_writer *w, const char *what, struct strata_error *err) {
    if (w->state != 0)
        return strata_error_set(err, STRATA_E_INVALID, "gguf writer: %s after gguf_writer_begin()",
                                what);
    return 0;
}

static int64_t find_kv(const struct gguf_writer *w, const char *key) {
    for (int64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kvs[i].key, key))
            return i;
    return -1;
}

/* Takes ownership of b's bytes (the "u32 type | value" blob). */
static int put_kv(struct gguf_writer *w, const char *key, struct wbuf *b,
                  struct strata_error *err) {
    int rc = check_declaring(w, "setting a key", err);
    if (rc)
        goto out;
    if (b->oom) {
        rc = strata_error_set(err, STRATA_E_NOMEM, "gguf writer: out of memory");
        goto out;
    }
    if (!key || !*key) {
        rc = strata_error_set(err, STRATA_E_INVALID, "gguf writer: empty key");
        goto out;
    }
    int64_t i = find_kv(w, key);
    if (i >= 0) {
        free(w->kvs[i].blob);
        w->kvs[i].blob = b->data;
        w->kvs[i].len = b->len;
        return 0;
    }
    if (w->n_kv == w->cap_kv) {
        int64_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        struct writer_kv *k = realloc(w->kvs, (size_t)cap * sizeof(*k));
        if (!k) {
            rc = strata_error_set(err, STRATA_E_NOMEM, "gguf writer: out of memory");
            goto out;
        }
        w->kvs = k;
        w->cap_kv = cap;
    }
    char *kc = strdup(key);
    if (!kc) {
        rc = strata_error_set(err, STRATA_E_NOMEM, "gguf writer: out of memory");
        goto out;
    }
    w->kvs[w->n_kv++] = (struct writer_kv){kc, b->data, b->len};
    return 0;
out:
    free(b->data);
    return rc;
}

static int set_scalar(struct gguf_writer *w, const char *key, enum gguf_type t, const void *v,
                      struct strata_error *err) {
    struct wbuf b = {0};
    wb_u32(&b, t);
    wb_put(&b, v, (size_t)gguf_type_size(t));
    return put_kv(w, key, &b, err);
}

int gguf_writer_set_u8(struct gguf_writer *w, const char *key, uint8_t v,
                       struct strata_error *err) {
    return set_scalar(w, key, GGUF_TYPE_UINT8, &v, err);
}
int gguf_writer_set_i8(struct gguf_writer *w, const char *key, int8_t v, struct strata_error *err) {
    return set_scalar(w, key, GGUF_TYPE_INT8, &v, err);
}
int gguf_writer_set_u16(struct gguf_writer *w, const char *key, uint16_t v,
                        struct strata_error *err) {
    return set_scalar(w, key, GGUF_TYPE_UINT16, &v, err);
}
int gguf_writer_set_i16(struct gguf_writer *w, const char *key, int16_t v,
                        struct strata_error *err) {
    return set_scalar(w, key, GGUF_TYPE_INT16, &v, err);
}
int gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v,
                        struct strata_error *err) {
    if (key && !strcmp(key, "general.alignment")) {
        if (v == 0 || (v & (v - 1)) || v > (1u << 20))
            return strata_error_set(err, STRATA_E_RANGE,
                                    "gguf writer: general.alignment %u is not a power of two "
                                    "in 1..1048576",
                                    v);
        if (w->state == 0)
            w->alignment = v;
    }
    return set_scalar(w, key, GGUF_TYPE_UINT32, &v, err);
}
int gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v,
                        struct strata_error *err) {
    return set_scalar(w, key, GGUF_TYPE_INT32, &v, err);
}
int gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v,
                        struct strata_error *err) {
    return set_scalar(w, key, GGUF_TYPE_UINT64, &v, err);
}
int gguf_writer_set_i64(struct gguf_writer *w, const char *key, int64_t v,
                        struct strata_error *err) {
    return set_scalar(w, key, GGUF_TYPE_INT64, &v, err);
}
int gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v, struct strata_error *err) {
    return set_scalar(w, key, GGUF_TYPE_FLOAT32, &v, err);
}
int gguf_writer_set_f64(struct gguf_writer *w, const char *key, double v,
                        struct strata_error *err) {
    return set_scalar(w, key, GGUF_TYPE_FLOAT64, &v, err);
}
int gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v, struct strata_error *err) {
    uint8_t b = v ? 1 : 0;
    return set_scalar(w, key, GGUF_TYPE_BOOL, &b, err);
}

int gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v,
                        struct strata_error *err) {
    struct wbuf b = {0};
    wb_u32(&b, GGUF_TYPE_STRING);
    wb_str(&b, v, strlen(v));
    return put_kv(w, key, &b, err);
}

int gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_type elem_type,
                        const void *data, uint64_t n, struct strata_error *err) {
    size_t es = (size_t)gguf_type_size(elem_type);
    if (!es)
        return strata_error_set(err, STRATA_E_INVALID,
                                "gguf writer: %s: array element type %d is not fixed-size", key,
                                (int)elem_type);
    if (n > SIZE_MAX / es / 2)
        return strata_error_set(err, STRATA_E_RANGE, "gguf writer: %s: array too long", key);
    struct wbuf b = {0};
    wb_u32(&b, GGUF_TYPE_ARRAY);
    wb_u32(&b, elem_type);
    wb_u64(&b, n);
    if (elem_type == GGUF_TYPE_BOOL) {
        /* normalise to 0/1 like a scalar bool */
        for (uint64_t i = 0; i < n; i++) {
            uint8_t v = ((const uint8_t *)data)[i] ? 1 : 0;
            wb_put(&b, &v, 1);
        }
    } else {
        wb_put(&b, data, (size_t)n * es);
    }
    return put_kv(w, key, &b, err);
}

int gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *strs,
                            const uint64_t *lens, uint64_t n, struct strata_error *err) {
    struct wbuf b = {0};
    wb_u32(&b, GGUF_TYPE_ARRAY);
    wb_u32(&b, GGUF_TYPE_STRING);
    wb_u64(&b, n);
    for (uint64_t i = 0; i < n; i++)
        wb_str(&b, strs[i], lens ? lens[i] : strlen(strs[i]));
    return put_kv(w, key, &b, err);
}

/* Serializes one value of an open file (type tag excluded). */
static void put_value(struct wbuf *b, const struct gguf_file *f, const struct gguf_value *v) {
    switch (v->type) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_UINT64:
        wb_put(b, &v->u64, (size_t)gguf_type_size(v->type)); /* little-endian: low bytes first */
        break;
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_INT16:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_INT64:
        wb_put(b, &v->i64, (size_t)gguf_type_size(v->type));
        break;
    case GGUF_TYPE_FLOAT32: {
        float x = (float)v->f64; /* exact: the value was a float32 */
        wb_put(b, &x, 4);
        break;
    }
    case GGUF_TYPE_FLOAT64:
        wb_put(b, &v->f64, 8);
        break;
    case GGUF_TYPE_BOOL: {
        uint8_t x = v->b ? 1 : 0;
        wb_put(b, &x, 1);
        break;
    }
    case GGUF_TYPE_STRING:
        wb_str(b, v->str.ptr, v->str.len);
        break;
    case GGUF_TYPE_ARRAY: {
        wb_u32(b, v->arr.elem_type);
        wb_u64(b, v->arr.n);
        size_t es = (size_t)gguf_type_size(v->arr.elem_type);
        if (es) {
            /* the reader validated n * es bytes at data */
            wb_put(b, v->arr.data, (size_t)(v->arr.n * es));
        } else if (v->arr.elem_type == GGUF_TYPE_STRING) {
            for (uint64_t i = 0; i < v->arr.n; i++) {
                struct gguf_str s = gguf_arr_str(f, v, i);
                wb_str(b, s.ptr, s.len);
            }
        } else {
            for (uint64_t i = 0; i < v->arr.n; i++) {
                struct gguf_value e = gguf_arr_get(f, v, i);
                put_value(b, f, &e);
            }
        }
        break;
    }
    default:
        b->oom = 1; /* unreachable for a validated file */
        break;
    }
}

int gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_file *f, int64_t i,
                        struct strata_error *err) {
    if (i < 0 || i >= gguf_n_kv(f))
        return strata_error_set(err, STRATA_E_RANGE, "gguf writer: kv index %lld out of range",
                                (long long)i);
    const struct gguf_kv *kv = gguf_kv_at(f, i);
    char key[1024];
    if (kv->key.len >= sizeof(key))
        return strata_error_set(err, STRATA_E_RANGE, "gguf writer: key too long to copy");
    memcpy(key, kv->key.ptr, (size_t)kv->key.len);
    key[kv->key.len] = '\0';
    if (kv->value.type == GGUF_TYPE_UINT32 && !strcmp(key, "general.alignment"))
        return gguf_writer_set_u32(w, key, (uint32_t)kv->value.u64, err);
    struct wbuf b = {0};
    wb_u32(&b, kv->value.type);
    put_value(&b, f, &kv->value);
    return put_kv(w, key, &b, err);
}

int gguf_writer_remove_kv(struct gguf_writer *w, const char *key, struct strata_error *err) {
    int rc = check_declaring(w, "removing a key", err);
    if (rc)
        return rc;
    int64_t i = find_kv(w, key);
    if (i < 0)
        return 0;
    free(w->kvs[i].key);
    free(w->kvs[i].blob);
    memmove(&w->kvs[i], &w->kvs[i + 1], (size_t)(w->n_kv - i - 1) * sizeof(w->kvs[0]));
    w->n_kv--;
    if (!strcmp(key, "general.alignment"))
        w->alignment = GGUF_DEFAULT_ALIGNMENT;
    return 0;
}

int64_t gguf_writer_n_kv(const struct gguf_writer *w) {
    return w->n_kv;
}

int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const int64_t *ne, struct strata_error *err) {
    int rc = check_declaring(w, "adding a tensor", err);
    if (rc)
        return rc;
    size_t nl = name ? strlen(name) : 0;
    if (nl == 0 || nl >= GGUF_NAME_MAX)
        return strata_error_set(err, STRATA_E_INVALID,
                                "gguf writer: tensor name '%s' must be 1..%d bytes",
                                name ? name : "", GGUF_NAME_MAX - 1);
    const struct quant_traits *tr = quant_type_traits(type);
    if (!tr)
        return strata_error_set(err, STRATA_E_INVALID, "gguf writer: %s: unknown type id %u", name,
                                type);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return strata_error_set(err, STRATA_E_INVALID, "gguf writer: %s: %u dims (1..%d)", name,
                                n_dims, GGUF_MAX_DIMS);
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] <= 0 || (uint64_t)ne[d] > (UINT64_C(1) << 40) / n_el)
            return strata_error_set(err, STRATA_E_RANGE,
                                    "gguf writer: %s: dim %u = %lld out of range", name, d,
                                    (long long)ne[d]);
        n_el *= (uint64_t)ne[d];
    }
    if (ne[0] % tr->block_size)
        return strata_error_set(err, STRATA_E_INVALID,
                                "gguf writer: %s: row length %lld is not a multiple of %s's "
                                "block size %lld",
                                name, (long long)ne[0], tr->name, (long long)tr->block_size);
    for (int64_t i = 0; i < w->n_tensors; i++)
        if (!strcmp(w->tensors[i].name, name))
            return strata_error_set(err, STRATA_E_INVALID, "gguf writer: duplicate tensor %s",
                                    name);
    if (w->n_tensors == w->cap_tensors) {
        int64_t cap = w->cap_tensors ? w->cap_tensors * 2 : 64;
        struct writer_tensor *t = realloc(w->tensors, (size_t)cap * sizeof(*t));
        if (!t)
            return strata_error_set(err, STRATA_E_NOMEM, "gguf writer: out of memory");
        w->tensors = t;
        w->cap_tensors = cap;
    }
    struct writer_tensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof(*t));
    t->name = strdup(name);
    if (!t->name)
        return strata_error_set(err, STRATA_E_NOMEM, "gguf writer: out of memory");
    t->n_dims = n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        t->ne[d] = (uint32_t)d < n_dims ? ne[d] : 1;
    t->type = type;
    t->n_bytes = n_el / (uint64_t)tr->block_size * tr->type_size;
    w->n_tensors++;
    return 0;
}

int64_t gguf_writer_n_tensors(const struct gguf_writer *w) {
    return w->n_tensors;
}

static int raw_write(struct gguf_writer *w, const void *p, size_t n, struct strata_error *err) {
    if (n && fwrite(p, 1, n, w->fp) != n) {
        w->state = -1;
        return strata_error_set(err, STRATA_E_IO, "write %s: %s", w->path, strerror(errno));
    }
    w->n_written += n;
    return 0;
}

static int write_zeros(struct gguf_writer *w, size_t n, struct strata_error *err) {
    static const uint8_t zeros[64];
    while (n) {
        size_t k = n < sizeof(zeros) ? n : sizeof(zeros);
        int rc = raw_write(w, zeros, k, err);
        if (rc)
            return rc;
        n -= k;
    }
    return 0;
}

static uint64_t pad_to(uint64_t x, uint64_t a) {
    return (x + a - 1) / a * a;
}

/* Advances past tensors that are complete (zero-size ones included), writing
 * each one's padding. */
static int advance(struct gguf_writer *w, struct strata_error *err) {
    while (w->cur < w->n_tensors && w->cur_done == w->tensors[w->cur].n_bytes) {
        uint64_t end = w->tensors[w->cur].n_bytes;
        int rc = write_zeros(w, (size_t)(pad_to(end, w->alignment) - end), err);
        if (rc)
            return rc;
        w->cur++;
        w->cur_done = 0;
    }
    return 0;
}

int gguf_writer_begin(struct gguf_writer *w, struct strata_error *err) {
    int rc = check_declaring(w, "gguf_writer_begin", err);
    if (rc)
        return rc;
    struct wbuf b = {0};
    wb_u32(&b, GGUF_MAGIC);
    wb_u32(&b, GGUF_WRITE_VERSION);
    wb_u64(&b, (uint64_t)w->n_tensors);
    wb_u64(&b, (uint64_t)w->n_kv);
    for (int64_t i = 0; i < w->n_kv; i++) {
        wb_str(&b, w->kvs[i].key, strlen(w->kvs[i].key));
        wb_put(&b, w->kvs[i].blob, w->kvs[i].len);
    }
    uint64_t off = 0;
    for (int64_t i = 0; i < w->n_tensors; i++) {
        struct writer_tensor *t = &w->tensors[i];
        t->offset = off;
        off = pad_to(off + t->n_bytes, w->alignment);
        wb_str(&b, t->name, strlen(t->name));
        wb_u32(&b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            wb_u64(&b, (uint64_t)t->ne[d]);
        wb_u32(&b, t->type);
        wb_u64(&b, t->offset);
    }
    if (b.oom) {
        free(b.data);
        return strata_error_set(err, STRATA_E_NOMEM, "gguf writer: out of memory");
    }
    w->state = 1;
    rc = raw_write(w, b.data, b.len, err);
    free(b.data);
    if (rc)
        return rc;
    /* A file without tensors ends right after its KVs, as ggml and gguf-py
     * write vocab-only files (ggml-vocab-gpt-2.gguf: 1,766,807 bytes). */
    if (w->n_tensors > 0) {
        rc = write_zeros(w, (size_t)(pad_to(w->n_written, w->alignment) - w->n_written), err);
        if (rc)
            return rc;
    }
    w->cur = 0;
    w->cur_done = 0;
    return advance(w, err);
}

int gguf_writer_write(struct gguf_writer *w, const void *data, size_t n, struct strata_error *err) {
    if (w->state != 1)
        return strata_error_set(err, STRATA_E_INVALID,
                                "gguf writer: write outside begin()..finish() or after a failure");
    if (w->cur >= w->n_tensors)
        return n ? strata_error_set(err, STRATA_E_INVALID,
                                    "gguf writer: %zu bytes written after the last tensor", n)
                 : 0;
    const struct writer_tensor *t = &w->tensors[w->cur];
    if (n > t->n_bytes - w->cur_done)
        return strata_error_set(err, STRATA_E_INVALID,
                                "gguf writer: %zu bytes for tensor %s which has %llu left", n,
                                t->name, (unsigned long long)(t->n_bytes - w->cur_done));
    int rc = raw_write(w, data, n, err);
    if (rc)
        return rc;
    w->cur_done += n;
    return advance(w, err);
}

int64_t gguf_writer_current_tensor(const struct gguf_writer *w) {
    return w->cur;
}

uint64_t gguf_writer_remaining(const struct gguf_writer *w) {
    if (w->state != 1 || w->cur >= w->n_tensors)
        return 0;
    return w->tensors[w->cur].n_bytes - w->cur_done;
}

int gguf_writer_finish(struct gguf_writer *w, struct strata_error *err) {
    if (w->state == 0) {
        int rc = gguf_writer_begin(w, err);
        if (rc)
            return rc;
    }
    if (w->state != 1)
        return strata_error_set(err, STRATA_E_INVALID, "gguf writer: finish in a failed state");
    if (w->cur < w->n_tensors)
        return strata_error_set(err, STRATA_E_INVALID,
                                "gguf writer: finish with tensor %s incomplete (%llu of %llu "
                                "bytes) and %lld more not written",
                                w->tensors[w->cur].name, (unsigned long long)w->cur_done,
                                (unsigned long long)w->tensors[w->cur].n_bytes,
                                (long long)(w->n_tensors - w->cur - 1));
    int bad = fflush(w->fp) != 0 || ferror(w->fp);
    int saved = errno;
    if (fclose(w->fp) != 0 && !bad) {
        bad = 1;
        saved = errno;
    }
    w->fp = NULL;
    if (bad) {
        w->state = -1;
        remove(w->path);
        return strata_error_set(err, STRATA_E_IO, "write %s: %s", w->path, strerror(saved));
    }
    w->state = 2;
    return 0;
}

uint64_t gguf_writer_bytes(const struct gguf_writer *w) {
    return w->n_written;
}
