/* engine/kv.h: the paged KV cache: fixed-size blocks of positions from one
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
 *   k: (n_layer, n_block, n_embd_k) f16, then v: (n_layer, n_block, n_embd_v) f16
 * so the rows of one layer inside a block are contiguous (attention walks a
 * block at a time). A sequence's block table maps pos / n_block to a block
 * id. Sequences of any lengths take blocks from the same pool one block at a
 * time, so there is no fragmentation beyond each sequence's last block.
 *
 * Sharing: kv_seq_attach() and kv_seq_copy() point a sequence at blocks of
 * other sequences or of the prefix cache (engine/prefix.h) and take a
 * reference on each. Blocks are never written while shared: before a row is
 * written (kv_seq_reserve_pos) a block with more than one reference is copied
 * into a fresh block (copy-on-write: the rows [0, pos % n_block) are copied).
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

#include "engine/error.h"

struct kv_params {
    int n_layer;
    int n_seq_max; /* sequences, ids 0 .. n_seq_max-1 */
    int n_ctx;     /* positions per sequence */
    int n_embd_k;  /* f16 elements per K row (n_head_kv * head_dim_k) */
    int n_embd_v;  /* f16 elements per V row (n_head_kv * head_dim_v) */
    int n_block;   /* positions per block, a power of two in [1, 1024]; 0 = 16 */
    int n_blocks;  /* blocks in the pool; 0 = n_seq_max * ceil(n_ctx / n_block) */
};

struct kv_cache;

/* Checks the shape (every count >= 1, block bytes < 2^32, pool < 2^40 bytes).
 * No block memory is allocated yet. */
struct kv_cache *kv_init(const struct kv_params *params,
                         struct strata_error *err); /* owned: free with kv_free() */
void kv_free(struct kv_cache *kv);                  /* NULL is a no-op */

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
/* Row of (n_embd_k) / (n_embd_v) f16 for (layer, seq, pos); the block holding
 * pos must be in the table and pos < n_ctx (asserted). Rows pos .. the end of
 * its block follow contiguously (stride n_embd_k / n_embd_v). Borrowed:
 * valid until the sequence is cleared or truncated below pos. */
uint16_t *kv_k_row(struct kv_cache *kv, int layer, int seq_id, int pos);
uint16_t *kv_v_row(struct kv_cache *kv, int layer, int seq_id, int pos);

#endif
