/* engine/kv/prefix.h: the prefix cache: KV blocks of finished (or running)
 * sequences kept by token content, so a request that starts with the same
 * tokens (a shared system prompt, the same conversation plus a new turn)
 * reuses them instead of prefilling again.
 *
 *   struct prefix_cache *pc = prefix_init(kv, &err);
 *   int32_t blocks[64]; int nb = 0;
 *   int hit = prefix_lookup(pc, prompt, n_prompt - 1, blocks, &nb); // positions reusable
 *   kv_seq_attach(kv, seq, blocks, nb, hit, &err);  // prefill starts at pos `hit`
 *   ... generate ...
 *   prefix_insert(pc, toks, kv_seq_len(kv, seq), seq, &err); // keep its blocks
 *   kv_seq_clear(kv, seq, NULL);
 *   if (kv_blocks_free(kv) == 0) prefix_evict(pc, 1);        // LRU, idle blocks only
 *   prefix_free(pc);
 *
 * Structure: a trie of blocks. Each entry holds one KV block (one reference
 * on it) and the tokens of its positions: n_block tokens for a full block,
 * fewer for a partial one (the last block of a sequence); a partial entry has
 * no children. The path from the root spells a token prefix, so an entry's
 * rows are valid for exactly that prefix. A lookup reuses full blocks along
 * the path and then, at the divergence point, the longest common prefix of
 * one more (full or partial) block; the sequence that writes into that
 * shared block copies it first (kv.h: copy-on-write).
 *
 * Eviction: an entry is idle when the cache holds the only reference to its
 * block (no sequence uses it); prefix_evict drops idle leaves, least recently
 * used first. Every block of a running sequence's prefix is held by that
 * sequence, so an idle entry's whole subtree is idle: prefix_n_idle() blocks
 * can all be freed by prefix_evict.
 *
 * Partitions: every entry belongs to one partition (the server's API key:
 * prefix_lookup_part / prefix_insert_part), and a lookup sees only its own
 * partition's entries, so one tenant can neither reuse nor probe another's
 * prompt (the reuse count and the prefill time both show a hit; a hit from
 * another partition is a miss). prefix_lookup / prefix_insert are partition 0.
 * Eviction (LRU) is shared by all partitions.
 *
 * Costs: lookup and insert scan the children of each entry on the path;
 * evict scans all entries per block freed (O(entries)); fine for pools of a
 * few thousand blocks.
 *
 * Threading: like the kv_cache it borrows: one thread at a time.
 */
#ifndef STRATA_PREFIX_H
#define STRATA_PREFIX_H

#include <stdint.h>

#include "engine/core/error.h"

struct kv_cache;
struct prefix_cache;

/* kv: borrowed, must outlive the cache. owned: free with prefix_free() */
struct prefix_cache *prefix_init(struct kv_cache *kv, struct strata_error *err);
/* Drops every reference the cache holds (idle blocks go back to the pool). */
void prefix_free(struct prefix_cache *pc); /* NULL is a no-op */

/* Longest cached prefix of toks[0, n): returns the number of positions that
 * can be reused and writes the blocks that hold them to blocks[0, *n_blocks)
 * (ceil(result / n_block) ids; the caller's array holds ceil(n / n_block)).
 * Marks the entries used (LRU). Takes no reference: attach before evicting. */
int prefix_lookup(struct prefix_cache *pc, const int32_t *toks, int n, int32_t *blocks,
                  int *n_blocks);
/* Adds the blocks of sequence seq_id that hold toks[0, n) (n <= its length)
 * to the cache, taking a reference on each new one; blocks already cached
 * under the same tokens are only marked used. Stops at the first block it
 * cannot add (out of entries: never, the cache has one per pool block). */
int prefix_insert(struct prefix_cache *pc, const int32_t *toks, int n, int seq_id,
                  struct strata_error *err);
/* The same within partition `part` (prefix_lookup/insert use partition 0). */
int prefix_lookup_part(struct prefix_cache *pc, uint32_t part, const int32_t *toks, int n,
                       int32_t *blocks, int *n_blocks);
int prefix_insert_part(struct prefix_cache *pc, uint32_t part, const int32_t *toks, int n,
                       int seq_id, struct strata_error *err);
/* Frees up to n idle blocks, least recently used leaves first; returns how
 * many went back to the pool. */
int prefix_evict(struct prefix_cache *pc, int n);
/* Drops every idle entry (returns blocks freed). */
int prefix_clear_idle(struct prefix_cache *pc);

int prefix_n_entries(const struct prefix_cache *pc); /* cached blocks */
int prefix_n_idle(const struct prefix_cache *pc);    /* cached blocks no sequence uses */

#endif
