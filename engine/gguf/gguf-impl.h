/* engine/gguf/gguf-impl.h: internals shared by the GGUF reader's files (gguf.c
 * parses and validates, gguf-access.c answers queries; gguf-write.c shares
 * gguf_type_size). Not a public header:
 * only engine/gguf*.c include it.
 *
 * Threading: a gguf_file is immutable once gguf_open returns it.
 */
#ifndef STRATA_GGUF_IMPL_H
#define STRATA_GGUF_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/gguf/gguf.h"

/* Nested arrays deeper than this are refused (real files use depth 1). */
#define GGUF_MAX_DEPTH 8

/* Minimum encoded sizes, used to bound counts against the file size before
 * anything is allocated: a KV is at least key length (8) + one key byte +
 * type (4) + a one-byte value; a tensor info is at least name length (8) +
 * one name byte + n_dims (4) + one dim (8) + type (4) + offset (8). */
#define GGUF_HEADER_SIZE 24
#define GGUF_MIN_KV_SIZE 14
#define GGUF_MIN_TENSOR_SIZE 33

/* Fixed header at byte 0, pinned (STYLE.md rule 11). */
struct gguf_header {
    uint32_t magic;
    uint32_t version;
    uint64_t n_tensors;
    uint64_t n_kv;
};
_Static_assert(sizeof(struct gguf_header) == GGUF_HEADER_SIZE, "GGUF header is 24 bytes");

struct gguf_file {
    const uint8_t *base; /* borrowed (memory) or owned mapping (file) */
    uint64_t size;       /* bytes */
    bool mapped;         /* base is our mmap: munmap at close */
    char *path;          /* owned; "" for memory files */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;

    int64_t n_kv;
    struct gguf_kv *kvs; /* owned: (n_kv) */
    int64_t n_tensors;
    struct gguf_tensor_info *tensors; /* owned: (n_tensors) */

    /* Element index for arrays whose elements have variable size (strings,
     * arrays). arr.index of such an array is its first slot here. A string
     * element takes 1 slot: the file offset of its u64 length. An array
     * element takes 2: the file offset of its u32 elem_type, then its own
     * arr.index. */
    uint64_t *elem_index; /* owned: (n_elem_index) */
    uint64_t n_elem_index;

    /* Open-addressing hash tables (power-of-two sizes, -1 = empty) of kv and
     * tensor indices by key / name: uniqueness checks at open, O(1) lookups. */
    int64_t *kv_hash; /* owned: (kv_hash_cap) */
    uint64_t kv_hash_cap;
    int64_t *tensor_hash; /* owned: (tensor_hash_cap) */
    uint64_t tensor_hash_cap;
};

/* Byte sizes of the fixed-size value types; 0 for STRING, ARRAY, unknown. */
uint64_t gguf_type_size(uint32_t type);

uint64_t gguf_hash_bytes(const char *p, uint64_t len);

/* Reads the scalar of `type` at p (already bounds-checked) into a value. */
struct gguf_value gguf_decode_scalar(uint32_t type, const uint8_t *p);

#endif
