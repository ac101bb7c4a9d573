/* engine/gguf/gguf.h: GGUF model files: mmap reader with strict validation, and a
 * streaming writer.
 *
 *   struct strata_error err = {0};
 *   struct gguf_file *f = gguf_open("model.gguf", &err);
 *   if (!f) { fprintf(stderr, "%s\n", err.message); return 1; }
 *   uint64_t n_layer;
 *   if (gguf_get_uint(f, "llama.block_count", &n_layer, &err) == 0) ...
 *   const struct gguf_tensor_info *t = gguf_find_tensor(f, "token_embd.weight");
 *   gguf_close(f);
 *
 * File layout (little-endian; GGUF v2 and v3 share it, v1 is refused):
 *   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv    x { str key | u32 type | value }
 *   n_tensors x { str name | u32 n_dims | u64 ne[n_dims] | u32 type | u64 offset }
 *   padding to general.alignment (default 32) | tensor data (offsets relative here)
 *   str = u64 len | bytes (not NUL-terminated)
 *   value: scalar | str | array = u32 elem_type | u64 n | n x value (nested ok)
 *
 * Validation happens entirely in gguf_open: once it returns a handle, every
 * count, string, array and tensor range inside it is known to lie in the
 * mapping, so accessors below never fail on bounds. Invalid files give
 * STRATA_E_FORMAT with a message naming the field and its byte offset.
 *
 * Ownership: strings and tensor data point into the mapping: borrowed, valid
 * until gguf_close(). Threading: a gguf_file is immutable after open; any
 * number of threads may read it concurrently.
 */
#ifndef STRATA_GGUF_H
#define STRATA_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/error.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" read as little-endian u32 */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
};

struct gguf_str {
    const char *ptr; /* borrowed: points into the mapping; NOT NUL-terminated */
    uint64_t len;
};

struct gguf_value {
    enum gguf_type type;
    union {
        uint64_t u64;        /* UINT8/16/32/64 */
        int64_t i64;         /* INT8/16/32/64 */
        double f64;          /* FLOAT32/64 */
        bool b;              /* BOOL */
        struct gguf_str str; /* STRING */
        struct {
            enum gguf_type elem_type;
            uint64_t n;
            const uint8_t *data; /* first element's bytes in the mapping (unaligned) */
            uint64_t index;      /* internal: used by gguf_arr_* for O(1) access */
        } arr;                   /* ARRAY */
    };
};

struct gguf_kv {
    struct gguf_str key;
    struct gguf_value value;
};

struct gguf_tensor_info {
    struct gguf_str name;
    uint32_t n_dims;           /* 1..4 */
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] = row length (innermost); unused dims are 1 */
    uint32_t type;             /* enum quant_type */
    uint64_t offset;           /* relative to the data section, aligned */
    uint64_t n_bytes;          /* exact size of the data */
    const void *data;          /* borrowed: points into the mapping */
};

struct gguf_file;

/* Maps and validates a file. Returns NULL and fills err on failure.
 * owned: free with gguf_close() */
struct gguf_file *gguf_open(const char *path, struct strata_error *err);
/* Validates a caller's buffer (borrowed: must outlive the handle); for fuzzing
 * and tests. owned: free with gguf_close() */
struct gguf_file *gguf_open_memory(const void *data, size_t size, struct strata_error *err);
void gguf_close(struct gguf_file *f); /* NULL is a no-op */

uint32_t gguf_version(const struct gguf_file *f);
uint32_t gguf_alignment(const struct gguf_file *f);
/* File offset of tensor data: the end of the tensor infos rounded up to the
 * alignment. A file without tensors may end before it (the vocab-only files
 * in ../shared do), as in llama.cpp. */
uint64_t gguf_data_offset(const struct gguf_file *f);
uint64_t gguf_file_size(const struct gguf_file *f);
const uint8_t *gguf_file_base(const struct gguf_file *f); /* start of the mapping */
const char *gguf_path(const struct gguf_file *f);         /* "" for memory files */

/* Key/value metadata. */
int64_t gguf_n_kv(const struct gguf_file *f);
const struct gguf_kv *gguf_kv_at(const struct gguf_file *f, int64_t i);
int64_t gguf_find_kv(const struct gguf_file *f, const char *key); /* -1 if absent */

/* Typed getters. 0 ok; STRATA_E_NOT_FOUND if absent; STRATA_E_FORMAT if the
 * stored type does not convert (negative to uint, non-integer to int...). */
int gguf_get_uint(const struct gguf_file *f, const char *key, uint64_t *out,
                  struct strata_error *err);
int gguf_get_int(const struct gguf_file *f, const char *key, int64_t *out,
                 struct strata_error *err);
int gguf_get_float(const struct gguf_file *f, const char *key, double *out,
                   struct strata_error *err);
int gguf_get_bool(const struct gguf_file *f, const char *key, bool *out, struct strata_error *err);
int gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *out,
                 struct strata_error *err);
int gguf_get_arr(const struct gguf_file *f, const char *key, struct gguf_value *out,
                 struct strata_error *err);
/* Copies a string value into buf (NUL-terminated, truncated to cap-1). */
int gguf_get_str_buf(const struct gguf_file *f, const char *key, char *buf, size_t cap,
                     struct strata_error *err);

/* Array elements (arr->type == GGUF_TYPE_ARRAY; i < arr->arr.n, checked by assert). */
struct gguf_str gguf_arr_str(const struct gguf_file *f, const struct gguf_value *arr, uint64_t i);
uint64_t gguf_arr_uint(const struct gguf_value *arr, uint64_t i); /* integer elem types */
int64_t gguf_arr_int(const struct gguf_value *arr, uint64_t i);
double gguf_arr_float(const struct gguf_value *arr, uint64_t i); /* float or int elem types */
/* Any element as a value (nested arrays included). */
struct gguf_value gguf_arr_get(const struct gguf_file *f, const struct gguf_value *arr, uint64_t i);

/* Tensors. */
int64_t gguf_n_tensors(const struct gguf_file *f);
const struct gguf_tensor_info *gguf_tensor_at(const struct gguf_file *f, int64_t i);
const struct gguf_tensor_info *gguf_find_tensor(const struct gguf_file *f, const char *name);
int64_t gguf_tensor_n_elements(const struct gguf_tensor_info *t);

bool gguf_str_eq(struct gguf_str s, const char *cstr);
const char *gguf_type_name(enum gguf_type t); /* "uint32", "string", ... */

/* ---- writer ---------------------------------------------------------------
 * Streaming: declare metadata and tensor shapes, then gguf_writer_begin()
 * writes the header, and tensor data is appended in declaration order, so a
 * model larger than RAM can be written. (Owned by the writer's author; see
 * gguf-write.c for the full contract.) */
struct gguf_writer;

/*   struct gguf_writer *w = gguf_writer_init("out.gguf", &err);
 *   gguf_writer_set_str(w, "general.architecture", "llama", &err);
 *   gguf_writer_add_tensor(w, "token_embd.weight", QUANT_F16, 2, (int64_t[]){64, 512}, &err);
 *   gguf_writer_begin(w, &err);               // header, KVs, tensor infos, padding
 *   gguf_writer_write(w, bytes, n, &err);     // any number of calls, declaration order
 *   gguf_writer_finish(w, &err);              // checks every declared byte was written
 *   gguf_writer_free(w);
 *
 * Setting a key that is already declared replaces its value in place (so a
 * copied file's general.file_type can be overwritten). "general.alignment"
 * (u32, power of two) also sets the data alignment. Tensor data is padded to
 * the alignment after each tensor; memory use is the KV and tensor-info
 * tables plus one stdio buffer, independent of the tensor sizes.
 *
 * Ownership: the writer copies every key, string and array it is given.
 * Threading: a writer is used by one thread at a time. */

/* Opens path for writing (truncates). NULL and err on failure.
 * owned: free with gguf_writer_free() */
struct gguf_writer *gguf_writer_init(const char *path, struct strata_error *err);
/* Closes the file; a writer that did not finish leaves a partial file, which
 * this removes. NULL is a no-op. */
void gguf_writer_free(struct gguf_writer *w);

/* Scalars. */
int gguf_writer_set_u8(struct gguf_writer *w, const char *key, uint8_t v, struct strata_error *err);
int gguf_writer_set_i8(struct gguf_writer *w, const char *key, int8_t v, struct strata_error *err);
int gguf_writer_set_u16(struct gguf_writer *w, const char *key, uint16_t v,
                        struct strata_error *err);
int gguf_writer_set_i16(struct gguf_writer *w, const char *key, int16_t v,
                        struct strata_error *err);
int gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v,
                        struct strata_error *err);
int gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v,
                        struct strata_error *err);
int gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v,
                        struct strata_error *err);
int gguf_writer_set_i64(struct gguf_writer *w, const char *key, int64_t v,
                        struct strata_error *err);
int gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v, struct strata_error *err);
int gguf_writer_set_f64(struct gguf_writer *w, const char *key, double v, struct strata_error *err);
int gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v, struct strata_error *err);
int gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v,
                        struct strata_error *err);
/* Array of n fixed-size elements (elem_type not STRING/ARRAY), packed
 * little-endian in data (borrowed, copied). */
int gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_type elem_type,
                        const void *data, uint64_t n, struct strata_error *err);
/* Array of n strings; lens may be NULL for NUL-terminated strings. */
int gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *strs,
                            const uint64_t *lens, uint64_t n, struct strata_error *err);
/* Copies KV i of an open file (any type, nested arrays included). */
int gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_file *f, int64_t i,
                        struct strata_error *err);
/* Removes a declared key; 0 also when it was absent. */
int gguf_writer_remove_kv(struct gguf_writer *w, const char *key, struct strata_error *err);
int64_t gguf_writer_n_kv(const struct gguf_writer *w);

/* Declares a tensor (name < 64 bytes, unique; ne[0] a multiple of the type's
 * block size). type is an enum quant_type. */
int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const int64_t *ne, struct strata_error *err);
int64_t gguf_writer_n_tensors(const struct gguf_writer *w);
/* Writes header, KVs, tensor infos and padding. No declarations after this. */
int gguf_writer_begin(struct gguf_writer *w, struct strata_error *err);
/* Appends n bytes of tensor data; a call may not run past the end of the
 * current tensor, but a tensor may take any number of calls. */
int gguf_writer_write(struct gguf_writer *w, const void *data, size_t n, struct strata_error *err);
/* Index of the tensor the next write goes to; its remaining bytes. */
int64_t gguf_writer_current_tensor(const struct gguf_writer *w);
uint64_t gguf_writer_remaining(const struct gguf_writer *w);
/* Checks that every declared tensor was written in full, flushes, closes. */
int gguf_writer_finish(struct gguf_writer *w, struct strata_error *err);
/* Bytes written so far (the whole file once finished). */
uint64_t gguf_writer_bytes(const struct gguf_writer *w);

#endif
