/* engine/kv.h: the KV cache: per sequence, per layer, K and V rows in F16.
 *
 *   struct kv_params kp = {.n_layer = 5, .n_seq_max = 4, .n_ctx = 512,
 *                          .n_embd_k = 256, .n_embd_v = 256};
 *   struct kv_cache *kv = kv_init(&kp, &err);      // or model_kv_init(model, ...)
 *   ... model_forward(model, kv, &batch, logits, &err) ...
 *   kv_seq_clear(kv, 0);                            // sequence 0 starts again at pos 0
 *   kv_free(kv);
 *
 * Layout today: each sequence owns one slab, allocated on first use,
 *   k: (n_layer, n_ctx, n_embd_k) f16, v: (n_layer, n_ctx, n_embd_v) f16
 * (n_embd_k = n_head_kv * head_dim_k). Attention reads K/V only through
 * kv_k_row / kv_v_row, so a paged layout with block tables changes this file
 * only.
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
};

struct kv_cache;

/* Checks the shape (every count >= 1, total bytes per sequence < 2^40).
 * No sequence memory is allocated yet. */
struct kv_cache *kv_init(const struct kv_params *params,
                         struct strata_error *err); /* owned: free with kv_free() */
void kv_free(struct kv_cache *kv);                  /* NULL is a no-op */

const struct kv_params *kv_get_params(const struct kv_cache *kv); /* borrowed */

/* Positions filled in the sequence (0 for an unused one); -1 for a bad id. */
int kv_seq_len(const struct kv_cache *kv, int seq_id);
/* Forgets the sequence's positions (keeps its memory for reuse). */
int kv_seq_clear(struct kv_cache *kv, int seq_id, struct strata_error *err);
/* Keeps positions [0, len) only (len <= kv_seq_len). */
int kv_seq_truncate(struct kv_cache *kv, int seq_id, int len, struct strata_error *err);
/* Releases the sequence's memory. */
int kv_seq_free(struct kv_cache *kv, int seq_id, struct strata_error *err);
/* Copies positions [0, len) of src into dst (dst is cleared first): prefix sharing. */
int kv_seq_copy(struct kv_cache *kv, int dst_seq, int src_seq, int len, struct strata_error *err);
/* Bytes allocated for sequence slabs now. */
size_t kv_bytes_allocated(const struct kv_cache *kv);

/* ---- used by the forward pass --------------------------------------------- */

/* Makes sure the sequence has memory (allocates its slab on first use). */
int kv_seq_reserve(struct kv_cache *kv, int seq_id, struct strata_error *err);
/* Sets the sequence's length after a forward step wrote rows [.., len). */
void kv_seq_set_len(struct kv_cache *kv, int seq_id, int len);
/* Row of (n_embd_k) / (n_embd_v) f16 for (layer, seq, pos); the sequence must
 * be reserved and pos < n_ctx (asserted). Borrowed: valid until the sequence
 * is freed. */
uint16_t *kv_k_row(struct kv_cache *kv, int layer, int seq_id, int pos);
uint16_t *kv_v_row(struct kv_cache *kv, int layer, int seq_id, int pos);

#endif
