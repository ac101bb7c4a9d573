/* engine/gguf/gguf.c: GGUF reader: mapping and strict validation (see gguf.h for
 * the byte layout). Everything read from the file is range-checked here,
 * before it is used to allocate or index; gguf-access.c then answers queries
 * without further bounds checks.
 *
 * Allocation is bounded by what has actually been parsed: arrays of entries
 * grow by doubling as entries are read, so a huge count in a small file fails
 * on the first missing byte, not in malloc.
 */
#include "engine/gguf/gguf-impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/quant/quant.h"

struct parser {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    struct gguf_file *f;
    struct strata_error *err;
    char ctx[160];        /* "kv 3 ('general.name')", "tensor 0 ('x')", "header" */
    uint64_t index_cap;   /* slots allocated in f->elem_index */
    int64_t kv_cap;       /* entries allocated in f->kvs */
    int64_t tensor_cap;   /* entries allocated in f->tensors */
    uint64_t *tensor_pos; /* (n_tensors) file offset of each tensor info, for messages */
};

/* Copies up to 64 bytes of s into out, replacing non-printable bytes by '?'
 * so a hostile name cannot garble a message. */
static void safe_name(char *out, size_t cap, const char *s, uint64_t len) {
    size_t n = 0;
    for (uint64_t i = 0; i < len && n + 4 < cap && i < 64; i++) {
        unsigned char c = (unsigned char)s[i];
        out[n++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (len > 64 && n + 4 < cap) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
}

__attribute__((format(printf, 3, 4))) static int fail(struct parser *p, uint64_t off,
                                                      const char *fmt, ...) {
    char msg[STRATA_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return strata_error_set(p->err, STRATA_E_FORMAT, "%s offset %" PRIu64 ": %s", p->ctx, off, msg);
}

static int need(struct parser *p, uint64_t n, const char *what) {
    if (n > p->size - p->pos)
        return fail(p, p->pos,
                    "%s needs %" PRIu64 " bytes, %" PRIu64 " left (file size %" PRIu64 ")", what, n,
                    p->size - p->pos, p->size);
    return 0;
}

static int rd_u32(struct parser *p, uint32_t *v, const char *what) {
    if (need(p, 4, what))
        return STRATA_E_FORMAT;
    memcpy(v, p->base + p->pos, 4);
    p->pos += 4;
    return 0;
}

static int rd_u64(struct parser *p, uint64_t *v, const char *what) {
    if (need(p, 8, what))
        return STRATA_E_FORMAT;
    memcpy(v, p->base + p->pos, 8);
    p->pos += 8;
    return 0;
}

static int rd_str(struct parser *p, struct gguf_str *s, const char *what) {
    uint64_t at = p->pos;
    uint64_t len;
    if (rd_u64(p, &len, what))
        return STRATA_E_FORMAT;
    if (len > p->size - p->pos)
        return fail(p, at, "%s length %" PRIu64 " runs past end of file (%" PRIu64 " bytes left)",
                    what, len, p->size - p->pos);
    s->ptr = (const char *)(p->base + p->pos);
    s->len = len;
    p->pos += len;
    return 0;
}

/* Grows *arr (elements of elem bytes, *cap allocated) to hold want entries. */
static int grow(struct parser *p, void **arr, uint64_t *cap, uint64_t want, size_t elem) {
    if (want <= *cap)
        return 0;
    uint64_t nc = *cap ? *cap : 64;
    while (nc < want) {
        if (nc > (UINT64_MAX / 2))
            return strata_error_set(p->err, STRATA_E_NOMEM, "gguf: table too large");
        nc *= 2;
    }
    if (nc > SIZE_MAX / elem)
        return strata_error_set(p->err, STRATA_E_NOMEM, "gguf: table too large");
    void *na = realloc(*arr, (size_t)(nc * elem));
    if (!na)
        return strata_error_set(p->err, STRATA_E_NOMEM, "gguf: out of memory (%" PRIu64 " entries)",
                                nc);
    *arr = na;
    *cap = nc;
    return 0;
}

/* Reserves n slots of the element index; returns the first slot in *first. */
static int reserve_index(struct parser *p, uint64_t n, uint64_t *first) {
    struct gguf_file *f = p->f;
    if (n > UINT64_MAX - f->n_elem_index)
        return strata_error_set(p->err, STRATA_E_NOMEM, "gguf: element index too large");
    void *arr = f->elem_index;
    int rc = grow(p, &arr, &p->index_cap, f->n_elem_index + n, sizeof(uint64_t));
    f->elem_index = arr;
    if (rc)
        return rc;
    *first = f->n_elem_index;
    f->n_elem_index += n;
    return 0;
}

static int parse_value(struct parser *p, uint32_t type, struct gguf_value *v, int depth);

static int parse_array(struct parser *p, struct gguf_value *v, int depth) {
    uint64_t at = p->pos;
    uint32_t et;
    uint64_t n;
    if (rd_u32(p, &et, "array element type") || rd_u64(p, &n, "array length"))
        return STRATA_E_FORMAT;
    if (et >= GGUF_TYPE_COUNT)
        return fail(p, at, "unknown array element type %" PRIu32, et);
    v->arr.elem_type = (enum gguf_type)et;
    v->arr.n = n;
    v->arr.data = p->base + p->pos;
    v->arr.index = 0;
    uint64_t left = p->size - p->pos;
    uint64_t es = gguf_type_size(et);
    if (es) {
        if (n > left / es)
            return fail(p, at, "array of %" PRIu64 " %s needs %" PRIu64 "+ bytes, %" PRIu64 " left",
                        n, gguf_type_name(et), n > UINT64_MAX / es ? UINT64_MAX : n * es, left);
        p->pos += n * es;
        return 0;
    }
    if (et == GGUF_TYPE_ARRAY && depth + 1 >= GGUF_MAX_DEPTH)
        return fail(p, at, "arrays nested deeper than %d", GGUF_MAX_DEPTH);
    /* Variable-size elements: a string needs its 8-byte length, an array its
     * 12-byte header, so the count is bounded before the index grows. */
    uint64_t min_size = et == GGUF_TYPE_STRING ? 8 : 12;
    if (n > left / min_size)
        return fail(p, at, "array of %" PRIu64 " %s cannot fit in %" PRIu64 " bytes left", n,
                    gguf_type_name(et), left);
    uint64_t per = et == GGUF_TYPE_STRING ? 1 : 2;
    uint64_t first;
    int rc = reserve_index(p, n * per, &first);
    if (rc)
        return rc;
    v->arr.index = first;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t el_at = p->pos;
        if (et == GGUF_TYPE_STRING) {
            struct gguf_str s;
            if (rd_str(p, &s, "array string"))
                return STRATA_E_FORMAT;
            p->f->elem_index[first + i] = el_at;
        } else {
            struct gguf_value inner = {.type = GGUF_TYPE_ARRAY};
            if ((rc = parse_array(p, &inner, depth + 1)))
                return rc;
            p->f->elem_index[first + 2 * i] = el_at;
            p->f->elem_index[first + 2 * i + 1] = inner.arr.index;
        }
    }
    return 0;
}

static int parse_value(struct parser *p, uint32_t type, struct gguf_value *v, int depth) {
    if (type >= GGUF_TYPE_COUNT)
        return fail(p, p->pos - 4, "unknown value type %" PRIu32, type);
    v->type = (enum gguf_type)type;
    if (type == GGUF_TYPE_STRING)
        return rd_str(p, &v->str, "string value");
    if (type == GGUF_TYPE_ARRAY)
        return parse_array(p, v, depth);
    uint64_t es = gguf_type_size(type);
    if (need(p, es, gguf_type_name(type)))
        return STRATA_E_FORMAT;
    *v = gguf_decode_scalar(type, p->base + p->pos);
    p->pos += es;
    return 0;
}

/* Builds an open-addressing table over n names; fails on a duplicate. */
static int build_hash(struct parser *p, int64_t n, bool tensors) {
    struct gguf_file *f = p->f;
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2)
        cap *= 2;
    int64_t *h = malloc(cap * sizeof(*h));
    if (!h)
        return strata_error_set(p->err, STRATA_E_NOMEM, "gguf: out of memory (hash)");
    memset(h, 0xff, cap * sizeof(*h)); /* -1 = empty */
    if (tensors) {
        f->tensor_hash = h;
        f->tensor_hash_cap = cap;
    } else {
        f->kv_hash = h;
        f->kv_hash_cap = cap;
    }
    for (int64_t i = 0; i < n; i++) {
        struct gguf_str s = tensors ? f->tensors[i].name : f->kvs[i].key;
        uint64_t slot = gguf_hash_bytes(s.ptr, s.len) & (cap - 1);
        while (h[slot] >= 0) {
            struct gguf_str o = tensors ? f->tensors[h[slot]].name : f->kvs[h[slot]].key;
            if (o.len == s.len && memcmp(o.ptr, s.ptr, s.len) == 0) {
                char nm[80];
                safe_name(nm, sizeof(nm), s.ptr, s.len);
                snprintf(p->ctx, sizeof(p->ctx), "%s %" PRId64 " ('%s')", tensors ? "tensor" : "kv",
                         i, nm);
                return fail(p, (uint64_t)((const uint8_t *)s.ptr - p->base) - 8,
                            "duplicate %s (first at index %" PRId64 ")",
                            tensors ? "tensor name" : "key", h[slot]);
            }
            slot = (slot + 1) & (cap - 1);
        }
        h[slot] = i;
    }
    return 0;
}

static int parse_header(struct parser *p, uint64_t *n_tensors, uint64_t *n_kv) {
    struct gguf_header hd;
    snprintf(p->ctx, sizeof(p->ctx), "header");
    if (p->size < GGUF_HEADER_SIZE)
        return fail(p, 0, "file of %" PRIu64 " bytes is shorter than the %d-byte GGUF header",
                    p->size, GGUF_HEADER_SIZE);
    memcpy(&hd, p->base, sizeof(hd));
    if (hd.magic != GGUF_MAGIC)
        return fail(p, 0, "bad magic 0x%08" PRIx32 " (expected \"GGUF\")", hd.magic);
    if (hd.version == 1)
        return fail(p, 4, "GGUF version 1 is not supported (only 2 and 3)");
    if (hd.version != 2 && hd.version != 3)
        return fail(p, 4, "unsupported GGUF version %" PRIu32 " (only 2 and 3)", hd.version);
    uint64_t room = p->size - GGUF_HEADER_SIZE;
    if (hd.n_kv > room / GGUF_MIN_KV_SIZE)
        return fail(p, 16, "kv count %" PRIu64 " cannot fit in %" PRIu64 " bytes", hd.n_kv, room);
    room -= hd.n_kv * GGUF_MIN_KV_SIZE;
    if (hd.n_tensors > room / GGUF_MIN_TENSOR_SIZE)
        return fail(p, 8, "tensor count %" PRIu64 " cannot fit in the %" PRIu64 " bytes left",
                    hd.n_tensors, room);
    p->f->version = hd.version;
    p->pos = GGUF_HEADER_SIZE;
    *n_tensors = hd.n_tensors;
    *n_kv = hd.n_kv;
    return 0;
}

static int parse_kvs(struct parser *p, uint64_t n_kv) {
    struct gguf_file *f = p->f;
    int rc;
    for (uint64_t i = 0; i < n_kv; i++) {
        void *arr = f->kvs;
        uint64_t cap = (uint64_t)p->kv_cap;
        rc = grow(p, &arr, &cap, i + 1, sizeof(struct gguf_kv));
        f->kvs = arr;
        p->kv_cap = (int64_t)cap;
        if (rc)
            return rc;
        struct gguf_kv *kv = &f->kvs[i];
        uint64_t at = p->pos;
        snprintf(p->ctx, sizeof(p->ctx), "kv %" PRIu64, i);
        if (rd_str(p, &kv->key, "key"))
            return STRATA_E_FORMAT;
        if (kv->key.len == 0)
            return fail(p, at, "empty key");
        char nm[80];
        safe_name(nm, sizeof(nm), kv->key.ptr, kv->key.len);
        snprintf(p->ctx, sizeof(p->ctx), "kv %" PRIu64 " ('%s')", i, nm);
        uint32_t type;
        if (rd_u32(p, &type, "value type"))
            return STRATA_E_FORMAT;
        if ((rc = parse_value(p, type, &kv->value, 0)))
            return rc;
        f->n_kv = (int64_t)i + 1;
    }
    return build_hash(p, f->n_kv, false);
}

static int parse_alignment(struct parser *p) {
    struct gguf_file *f = p->f;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t i = gguf_find_kv(f, "general.alignment");
    if (i < 0)
        return 0;
    const struct gguf_kv *kv = &f->kvs[i];
    uint64_t at = (uint64_t)((const uint8_t *)kv->key.ptr - p->base) - 8;
    snprintf(p->ctx, sizeof(p->ctx), "kv %" PRId64 " ('general.alignment')", i);
    if (kv->value.type != GGUF_TYPE_UINT32)
        return fail(p, at, "must be uint32, not %s", gguf_type_name(kv->value.type));
    uint64_t a = kv->value.u64;
    if (a == 0 || (a & (a - 1)) != 0)
        return fail(p, at, "alignment %" PRIu64 " is not a power of two", a);
    f->alignment = (uint32_t)a;
    return 0;
}

static int parse_tensor_info(struct parser *p, uint64_t i, struct gguf_tensor_info *t) {
    uint64_t at = p->pos;
    snprintf(p->ctx, sizeof(p->ctx), "tensor %" PRIu64, i);
    if (rd_str(p, &t->name, "tensor name"))
        return STRATA_E_FORMAT;
    if (t->name.len == 0)
        return fail(p, at, "empty tensor name");
    char nm[80];
    safe_name(nm, sizeof(nm), t->name.ptr, t->name.len);
    snprintf(p->ctx, sizeof(p->ctx), "tensor %" PRIu64 " ('%s')", i, nm);
    uint64_t dims_at = p->pos;
    if (rd_u32(p, &t->n_dims, "n_dims"))
        return STRATA_E_FORMAT;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return fail(p, dims_at, "n_dims %" PRIu32 " not in 1..%d", t->n_dims, GGUF_MAX_DIMS);
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    int64_t n_el = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne_at = p->pos;
        uint64_t ne;
        if (rd_u64(p, &ne, "dimension"))
            return STRATA_E_FORMAT;
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return fail(p, ne_at, "ne[%" PRIu32 "] = %" PRIu64 " is not in 1..INT64_MAX", d, ne);
        if ((int64_t)ne > INT64_MAX / n_el)
            return fail(p, ne_at, "element count overflows at ne[%" PRIu32 "] = %" PRIu64, d, ne);
        n_el *= (int64_t)ne;
        t->ne[d] = (int64_t)ne;
    }
    uint64_t type_at = p->pos;
    if (rd_u32(p, &t->type, "tensor type"))
        return STRATA_E_FORMAT;
    const struct quant_traits *tr = quant_type_traits(t->type);
    if (!tr)
        return fail(p, type_at, "unknown tensor type %" PRIu32, t->type);
    if (t->ne[0] % tr->block_size)
        return fail(p, dims_at, "ne[0] = %" PRId64 " is not a multiple of %s's block size %" PRId64,
                    t->ne[0], tr->name, tr->block_size);
    uint64_t bytes = (uint64_t)(t->ne[0] / tr->block_size);
    if (bytes > UINT64_MAX / tr->type_size)
        return fail(p, dims_at, "byte size overflows");
    bytes *= tr->type_size;
    for (int d = 1; d < GGUF_MAX_DIMS; d++) {
        if (bytes > UINT64_MAX / (uint64_t)t->ne[d])
            return fail(p, dims_at, "byte size overflows at ne[%d]", d);
        bytes *= (uint64_t)t->ne[d];
    }
    t->n_bytes = bytes;
    uint64_t off_at = p->pos;
    if (rd_u64(p, &t->offset, "tensor offset"))
        return STRATA_E_FORMAT;
    if (t->offset % p->f->alignment)
        return fail(p, off_at,
                    "data offset %" PRIu64 " is not a multiple of the alignment %" PRIu32,
                    t->offset, p->f->alignment);
    t->data = NULL;
    p->tensor_pos[i] = at;
    return 0;
}

struct span {
    uint64_t start, end; /* relative to the data section */
    int64_t idx;
};

static int span_cmp(const void *a, const void *b) {
    const struct span *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->idx < y->idx ? -1 : (x->idx > y->idx);
}

/* Data ranges: inside the file and pairwise disjoint. */
static int check_ranges(struct parser *p) {
    struct gguf_file *f = p->f;
    int64_t n = f->n_tensors;
    if (n == 0)
        return 0;
    uint64_t room = p->size - f->data_offset; /* data_offset <= size (parse_tensors) */
    for (int64_t i = 0; i < n; i++) {
        struct gguf_tensor_info *t = &f->tensors[i];
        if (t->offset > room || t->n_bytes > room - t->offset) {
            char nm[80];
            safe_name(nm, sizeof(nm), t->name.ptr, t->name.len);
            snprintf(p->ctx, sizeof(p->ctx), "tensor %" PRId64 " ('%s')", i, nm);
            uint64_t a = f->data_offset + t->offset;
            if (a < t->offset)
                return fail(p, p->tensor_pos[i], "data offset %" PRIu64 " overflows", t->offset);
            return fail(p, p->tensor_pos[i],
                        "data range [%" PRIu64 ", %" PRIu64 "%s) beyond end of file (size %" PRIu64
                        ")",
                        a, t->n_bytes > UINT64_MAX - a ? UINT64_MAX : a + t->n_bytes,
                        t->n_bytes > UINT64_MAX - a ? "+" : "", p->size);
        }
        t->data = p->base + f->data_offset + t->offset;
    }
    struct span *sp = malloc((size_t)n * sizeof(*sp));
    if (!sp)
        return strata_error_set(p->err, STRATA_E_NOMEM, "gguf: out of memory (spans)");
    for (int64_t i = 0; i < n; i++)
        sp[i] =
            (struct span){f->tensors[i].offset, f->tensors[i].offset + f->tensors[i].n_bytes, i};
    qsort(sp, (size_t)n, sizeof(*sp), span_cmp);
    int rc = 0;
    for (int64_t k = 1; k < n; k++) {
        if (sp[k].start < sp[k - 1].end) {
            const struct gguf_tensor_info *t = &f->tensors[sp[k].idx];
            const struct gguf_tensor_info *o = &f->tensors[sp[k - 1].idx];
            char nm[80], onm[80];
            safe_name(nm, sizeof(nm), t->name.ptr, t->name.len);
            safe_name(onm, sizeof(onm), o->name.ptr, o->name.len);
            snprintf(p->ctx, sizeof(p->ctx), "tensor %" PRId64 " ('%s')", sp[k].idx, nm);
            rc = fail(p, p->tensor_pos[sp[k].idx],
                      "data range [%" PRIu64 ", %" PRIu64 ") overlaps tensor %" PRId64
                      " ('%s') [%" PRIu64 ", %" PRIu64 ")",
                      f->data_offset + sp[k].start, f->data_offset + sp[k].end, sp[k - 1].idx, onm,
                      f->data_offset + sp[k - 1].start, f->data_offset + sp[k - 1].end);
            break;
        }
    }
    free(sp);
    return rc;
}

static int parse_tensors(struct parser *p, uint64_t n_tensors) {
    struct gguf_file *f = p->f;
    int rc;
    p->tensor_pos = malloc((size_t)(n_tensors ? n_tensors : 1) * sizeof(uint64_t));
    /* n_tensors <= size / 33 (parse_header), so this is at most 1/4 of the file. */
    if (!p->tensor_pos)
        return strata_error_set(p->err, STRATA_E_NOMEM, "gguf: out of memory");
    for (uint64_t i = 0; i < n_tensors; i++) {
        void *arr = f->tensors;
        uint64_t cap = (uint64_t)p->tensor_cap;
        rc = grow(p, &arr, &cap, i + 1, sizeof(struct gguf_tensor_info));
        f->tensors = arr;
        p->tensor_cap = (int64_t)cap;
        if (rc)
            return rc;
        if ((rc = parse_tensor_info(p, i, &f->tensors[i])))
            return rc;
        f->n_tensors = (int64_t)i + 1;
    }
    if ((rc = build_hash(p, f->n_tensors, true)))
        return rc;
    uint64_t a = f->alignment;
    uint64_t pad = (a - p->pos % a) % a;
    f->data_offset = p->pos + pad; /* pos <= size, so no overflow */
    snprintf(p->ctx, sizeof(p->ctx), "data section");
    if (f->n_tensors > 0 && f->data_offset > p->size)
        return fail(p, p->pos,
                    "aligned data offset %" PRIu64 " beyond end of file (size %" PRIu64 ")",
                    f->data_offset, p->size);
    return check_ranges(p);
}

static struct gguf_file *parse(struct gguf_file *f, struct strata_error *err) {
    struct parser p = {.base = f->base, .size = f->size, .f = f, .err = err};
    uint64_t n_tensors, n_kv;
    int rc = parse_header(&p, &n_tensors, &n_kv);
    if (!rc)
        rc = parse_kvs(&p, n_kv);
    if (!rc)
        rc = parse_alignment(&p);
    if (!rc)
        rc = parse_tensors(&p, n_tensors);
    free(p.tensor_pos);
    if (rc) {
        gguf_close(f);
        return NULL;
    }
    return f;
}

struct gguf_file *gguf_open_memory(const void *data, size_t size, struct strata_error *err) {
    if (!data && size) {
        strata_error_set(err, STRATA_E_INVALID, "gguf_open_memory: NULL data");
        return NULL;
    }
    struct gguf_file *f = calloc(1, sizeof(*f));
    if (!f || !(f->path = strdup(""))) {
        free(f);
        strata_error_set(err, STRATA_E_NOMEM, "gguf: out of memory");
        return NULL;
    }
    f->base = data ? data : (const uint8_t *)"";
    f->size = size;
    return parse(f, err);
}

struct gguf_file *gguf_open(const char *path, struct strata_error *err) {
    /* Only regular files: open() of a FIFO with no writer blocks forever (and
     * `strata serve`, still loading, then ignores SIGTERM). The path is checked
     * before opening, and O_NONBLOCK keeps a file swapped for a FIFO in between
     * from blocking (fstat below refuses it); it changes nothing for a regular
     * file, which mmap reads. */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        strata_error_set(err, STRATA_E_IO, "%s: not a regular file", path);
        return NULL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        strata_error_set(err, STRATA_E_IO, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) != 0) {
        strata_error_set(err, STRATA_E_IO, "%s: fstat: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        strata_error_set(err, STRATA_E_IO, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    struct gguf_file *f = calloc(1, sizeof(*f));
    if (!f || !(f->path = strdup(path))) {
        free(f);
        close(fd);
        strata_error_set(err, STRATA_E_NOMEM, "gguf: out of memory");
        return NULL;
    }
    f->size = (uint64_t)st.st_size;
    if (f->size == 0) {
        f->base = (const uint8_t *)"";
    } else {
        void *m = mmap(NULL, (size_t)f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            strata_error_set(err, STRATA_E_IO, "%s: mmap: %s", path, strerror(errno));
            close(fd);
            free(f->path);
            free(f);
            return NULL;
        }
        f->base = m;
        f->mapped = true;
    }
    close(fd);
    f = parse(f, err);
    if (!f)
        strata_error_prefix(err, "%s", path);
    return f;
}

void gguf_close(struct gguf_file *f) {
    if (!f)
        return;
    free(f->tensor_hash);
    free(f->kv_hash);
    free(f->elem_index);
    free(f->tensors);
    free(f->kvs);
    if (f->mapped)
        munmap((void *)f->base, (size_t)f->size);
    free(f->path);
    free(f);
}
