/* engine/kv/kv.h: the paged KV cache: fixed-size blocks of positions from one
 * pool, a block table per sequence, reference-counted blocks shared between
 * sequences (prefix reuse) with copy-on-write.
 *
 *   struct kv_params kp = {.n_layer = 5, .n_seq_max = 4, .n_ctx = 512,
 *                          .n_embd_k = 256, .n_embd_v = 256,
 *                          .n_block = 16, .n_blocks = 64}; // 0, 0: defaults
 *   struct kv_cache *kv = kv_init(&kp, &err);      // or model_kv_init(model, ...)
 *   ... model_forward(model, kv, &batch, logits, &err) ...
 *   kv_seq_clear(kv, 0);                            // sequence 0 starts again at pos 0
 *   kv_free(kv);
 *
 * Layout: the pool holds n_blocks blocks of n_block positions each. One
 * block is one allocation (made on first use, then recycled through a free
 * list, returned to the system only by kv_free):
 *   k: (n_layer, n_head_kv, n_block, n_embd_k / n_head_kv) f16, then v likewise
 * so one head's values at the block's positions are contiguous (attention
 * walks a head through a block at a time; with n_head_kv = 1, whole rows).
 * Per-head parts beat whole rows on decode and prefill (bench/bench-model,
 * 2026-12-01: qwen3-0.6b Q8_0 after 1024 tokens 20.1 -> 17.9 ms a token).
 * A sequence's block table maps pos / n_block to a block id. Sequences of
 * any lengths take blocks from the same pool one block at a time, so there
 * is no fragmentation beyond each sequence's last block.
 *
 * Sharing: kv_seq_attach() and kv_seq_copy() point a sequence at blocks of
 * other sequences or of the prefix cache (engine/kv/prefix.h) and take a
 * reference on each. Blocks are never written while shared: before a row is
 * written (kv_seq_reserve_pos) a block with more than one reference is copied
 * into a fresh block (copy-on-write: the rows [0, pos % n_block) are copied).
 *
 * Storage: the block tables, references and the prefix cache live here; the
 * blocks' memory comes from a struct kv_store (below): host memory by
 * default (kv_init), or the backend's (kv_init_store with the store of
 * backend.h's kv_store_init, which model_kv_init uses), so a GPU backend keeps
 * the rows in device memory while this module still decides which block
 * holds which positions. The accessors that return row addresses
 * (kv_k_head, ...) need a host-visible store (asserted).
 *
 * Pool exhaustion: kv_seq_reserve_pos returns STRATA_E_LIMIT when no block is
 * free; nothing is evicted here. The scheduler (server/sched.c) admits a
 * request only when the pool can hold its whole worst case, evicting idle
 * prefix-cache blocks first, so a running request never meets this error.
 *
 * Threading: a kv_cache belongs to one thread (the scheduler's) at a time;
 * during model_forward the pool's workers read rows concurrently (read-only).
 */
#ifndef STRATA_KV_H
#define STRATA_KV_H

#include <stddef.h>
#include <stdint.h>

#include "engine/core/error.h"

struct kv_params {
    int n_layer;
    int n_seq_max; /* sequences, ids 0 .. n_seq_max-1 */
    int n_ctx;     /* positions per sequence */
    int n_embd_k;  /* f16 elements per K row (n_head_kv * head_dim_k) */
    int n_embd_v;  /* f16 elements per V row (n_head_kv * head_dim_v) */
    int n_block;   /* positions per block, a power of two in [1, 1024]; 0 = 16 */
    int n_blocks;  /* blocks in the pool; 0 = n_seq_max * ceil(n_ctx / n_block) */
    int n_head_kv; /* parts a K (V) row is stored in, each its own run of positions inside a
                      block (attention streams one head's positions); 0 = 1 (whole rows) */
};

struct kv_cache;

/* Where a cache's block memory lives. Threading: called from the thread that
 * owns the cache (the scheduler's), never concurrently. */
struct kv_store_ops {
    const char *name; /* "host", "vulkan" */
    /* Memory for block `block` (`bytes` = kv_block_bytes, the layout above),
     * on the block's first use; the block keeps it until the store is freed.
     * Uninitialised contents are fine. Returns 0 or STRATA_E_NOMEM. */
    int (*block_alloc)(void *ctx, int block, size_t bytes);
    /* The block's memory as a host address, or NULL where it is not host
     * visible (device memory). Optional: NULL = never host-visible. */
    uint16_t *(*block_host)(void *ctx, int block);
    /* Copies n_bytes at byte offset off of block src to the same offset of
     * block dst (copy-on-write). Optional where block_host gives every block
     * (kv then copies through the host addresses). */
    void (*block_copy)(void *ctx, int dst, int src, size_t off, size_t n_bytes);
    /* Frees ctx and every block's memory. */
    void (*free)(void *ctx);
    /* A store made of others (the split backend's: every block on both of
     * its backends): the part whose ops are `ops`, or NULL. Optional: NULL =
     * a plain store. */
    const struct kv_store *(*part)(void *ctx, const struct kv_store_ops *ops);
    /* The cache's resolved shape (n_block, n_head_kv set), once from
     * kv_init_store before any block: the split backend's store sizes its
     * parts by it. Optional: NULL = not needed. */
    void (*shape)(void *ctx, const struct kv_params *p);
};

struct kv_store {
    const struct kv_store_ops *ops; /* borrowed: static table */
    void *ctx;                      /* owned: freed by ops->free */
};

/* Host memory (one malloc per block): the default store, and the CPU
 * backend's. */
struct kv_store *kv_store_host_init(struct strata_error *err); /* owned: kv_store_free() */
void kv_store_free(struct kv_store *store);                    /* NULL is a no-op */
/* store itself when its ops are `ops`, else its part with those ops (a
 * composite store's, kv_store_ops.part), else NULL. Borrowed. */
const struct kv_store *kv_store_find(const struct kv_store *store, const struct kv_store_ops *ops);

/* Checks the shape (every count >= 1, block bytes < 2^32, pool < 2^40 bytes).
 * No block memory is allocated yet. */
struct kv_cache *kv_init(const struct kv_params *params,
                         struct strata_error *err); /* owned: free with kv_free() */
void kv_free(struct kv_cache *kv);                  /* NULL is a no-op */
/* Same over `store` (steals: freed by kv_free, or here on failure). */
struct kv_cache *kv_init_store(const struct kv_params *params, struct kv_store *store,
                               struct strata_error *err); /* owned: free with kv_free() */
/* The cache's store, for the backend that computes over it. Borrowed. */
const struct kv_store *kv_get_store(const struct kv_cache *kv);

/* The effective parameters (n_block and n_blocks resolved). Borrowed. */
const struct kv_params *kv_get_params(const struct kv_cache *kv);
/* Bytes of one block (K and V of every layer). */
size_t kv_block_bytes(const struct kv_params *params);

/* Positions filled in the sequence (0 for an unused one); -1 for a bad id. */
int kv_seq_len(const struct kv_cache *kv, int seq_id);
/* Forgets the sequence's positions and gives its blocks back to the pool. */
int kv_seq_clear(struct kv_cache *kv, int seq_id, struct strata_error *err);
/* Keeps positions [0, len) only (len <= kv_seq_len); later blocks go back. */
int kv_seq_truncate(struct kv_cache *kv, int seq_id, int len, struct strata_error *err);
/* Same as kv_seq_clear (kept for callers of the slab era). */
int kv_seq_free(struct kv_cache *kv, int seq_id, struct strata_error *err);
/* dst (cleared first) shares the blocks of src's positions [0, len): no rows
 * are copied until one side writes into a shared block. */
int kv_seq_copy(struct kv_cache *kv, int dst_seq, int src_seq, int len, struct strata_error *err);
/* Bytes of block memory allocated now (in use, cached or free-listed). */
size_t kv_bytes_allocated(const struct kv_cache *kv);

/* ---- blocks: used by the scheduler and the prefix cache ---------------------- */

int kv_blocks_total(const struct kv_cache *kv);
int kv_blocks_free(const struct kv_cache *kv); /* blocks with no reference */
/* Blocks in the sequence's table (ceil(len / n_block) or more after a rewind). */
int kv_seq_n_blocks(const struct kv_cache *kv, int seq_id);
/* Block id of table entry i (0 <= i < kv_seq_n_blocks), -1 when out of range. */
int kv_seq_block(const struct kv_cache *kv, int seq_id, int i);
/* Blocks the sequence took from the free list (new or copy-on-write) since it
 * was last empty: the scheduler's reservation accounting. */
int kv_seq_n_alloc(const struct kv_cache *kv, int seq_id);
/* Makes an empty sequence (len 0) share blocks[0 .. n) (a reference each) with
 * positions [0, len) valid; (n - 1) * n_block < len <= n * n_block. */
int kv_seq_attach(struct kv_cache *kv, int seq_id, const int32_t *blocks, int n, int len,
                  struct strata_error *err);
/* References held on a block: sequences' tables plus kv_block_ref holders. */
int kv_block_refs(const struct kv_cache *kv, int block);
/* Takes / drops one reference (the prefix cache holds one per cached block);
 * a block whose count reaches 0 goes back to the free list. */
int kv_block_ref(struct kv_cache *kv, int block, struct strata_error *err);
void kv_block_unref(struct kv_cache *kv, int block);

/* ---- used by the forward pass --------------------------------------------- */

/* Checks the sequence id (blocks are taken per position by kv_seq_reserve_pos). */
int kv_seq_reserve(struct kv_cache *kv, int seq_id, struct strata_error *err);
/* Makes the block that holds pos present and private to the sequence (takes
 * a free block, or copies a shared one). pos <= the table's reach (no holes).
 * STRATA_E_LIMIT when the pool has no free block. */
int kv_seq_reserve_pos(struct kv_cache *kv, int seq_id, int pos, struct strata_error *err);
/* Sets the sequence's length after a forward step wrote rows [.., len). */
void kv_seq_set_len(struct kv_cache *kv, int seq_id, int len);
/* Part `part` (n_embd_k / n_head_kv f16, resp. V) of the row for (layer, seq,
 * pos); the block holding pos must be in the table, pos < n_ctx and part <
 * n_head_kv (asserted). The same part at positions pos .. the end of its block
 * follows contiguously (stride n_embd_k / n_head_kv, resp. V). Borrowed:
 * valid until the sequence is cleared or truncated below pos. */
uint16_t *kv_k_part(struct kv_cache *kv, int layer, int seq_id, int pos, int part);
uint16_t *kv_v_part(struct kv_cache *kv, int layer, int seq_id, int pos, int part);
/* The whole row (n_head_kv = 1 only, asserted): kv_k_part(..., 0). */
uint16_t *kv_k_row(struct kv_cache *kv, int layer, int seq_id, int pos);
uint16_t *kv_v_row(struct kv_cache *kv, int layer, int seq_id, int pos);
/* Head `head` (head_dim f16) of a model's K (V) row at (layer, seq, pos),
 * wherever the cache's parts put it (n_head_kv must divide the model's head
 * count: parts hold whole heads). Positions of one head inside a block are
 * kv_k_stride / kv_v_stride elements apart. */
uint16_t *kv_k_head(struct kv_cache *kv, int layer, int seq_id, int pos, int head, int head_dim);
uint16_t *kv_v_head(struct kv_cache *kv, int layer, int seq_id, int pos, int head, int head_dim);
size_t kv_k_stride(const struct kv_cache *kv);
size_t kv_v_stride(const struct kv_cache *kv);

#endif
