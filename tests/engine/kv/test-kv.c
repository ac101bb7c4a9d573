/* tests/engine/kv/test-kv.c: the paged KV cache (engine/kv/kv.h) and the prefix
 * cache (engine/kv/prefix.h): block accounting, sharing and copy-on-write,
 * pool exhaustion, bad input, trie lookup/insert/LRU eviction, and on the
 * real stories260K model: a prefix reused through shared blocks gives the
 * same logits bit for bit as a cold prefill.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/kv/kv.h"
#include "engine/model/model.h"
#include "tests/engine/model/model-helper.h"
#include "engine/kv/prefix.h"
#include "tests/harness.h"

static struct kv_cache *small_kv(int n_seq, int n_ctx, int n_block, int n_blocks) {
    struct kv_params kp = {.n_layer = 2,
                           .n_seq_max = n_seq,
                           .n_ctx = n_ctx,
                           .n_embd_k = 4,
                           .n_embd_v = 2,
                           .n_block = n_block,
                           .n_blocks = n_blocks};
    struct strata_error err = {0};
    struct kv_cache *kv = kv_init(&kp, &err);
    ck_assert_msg(kv != NULL, "%s", err.message);
    return kv;
}

/* Writes rows [from, to) of seq with a value that encodes (seq tag, layer, pos). */
static void fill(struct kv_cache *kv, int seq, int tag, int from, int to) {
    for (int p = from; p < to; p++) {
        ck_assert_int_eq(kv_seq_reserve_pos(kv, seq, p, NULL), 0);
        for (int l = 0; l < 2; l++) {
            for (int i = 0; i < 4; i++)
                kv_k_row(kv, l, seq, p)[i] = (uint16_t)(tag * 10000 + l * 1000 + p);
            for (int i = 0; i < 2; i++)
                kv_v_row(kv, l, seq, p)[i] = (uint16_t)(tag * 10000 + l * 1000 + p + 500);
        }
    }
    kv_seq_set_len(kv, seq, to);
}

static bool rows_are(struct kv_cache *kv, int seq, int tag, int from, int to) {
    for (int p = from; p < to; p++)
        for (int l = 0; l < 2; l++)
            if (kv_k_row(kv, l, seq, p)[3] != (uint16_t)(tag * 10000 + l * 1000 + p) ||
                kv_v_row(kv, l, seq, p)[1] != (uint16_t)(tag * 10000 + l * 1000 + p + 500))
                return false;
    return true;
}

START_TEST(test_paging_accounting) {
    struct kv_cache *kv = small_kv(3, 64, 8, 10);
    ck_assert_int_eq(kv_blocks_total(kv), 10);
    ck_assert_int_eq(kv_blocks_free(kv), 10);
    ck_assert_int_eq(kv_bytes_allocated(kv), 0);
    /* very different lengths from one pool: 3, 40 and 17 positions */
    fill(kv, 0, 1, 0, 3);
    fill(kv, 1, 2, 0, 40);
    fill(kv, 2, 3, 0, 17);
    ck_assert_int_eq(kv_seq_n_blocks(kv, 0), 1);
    ck_assert_int_eq(kv_seq_n_blocks(kv, 1), 5);
    ck_assert_int_eq(kv_seq_n_blocks(kv, 2), 3);
    ck_assert_int_eq(kv_blocks_free(kv), 1);
    ck_assert_int_eq(kv_bytes_allocated(kv), 9 * kv_block_bytes(kv_get_params(kv)));
    ck_assert(rows_are(kv, 0, 1, 0, 3) && rows_are(kv, 1, 2, 0, 40) && rows_are(kv, 2, 3, 0, 17));
    /* rows of one block are contiguous */
    ck_assert_ptr_eq(kv_k_row(kv, 1, 1, 9), kv_k_row(kv, 1, 1, 8) + 4);
    /* exhaustion: a clean error, the sequence is unchanged */
    fill(kv, 0, 1, 3, 8);
    ck_assert_int_eq(kv_seq_reserve_pos(kv, 0, 8, NULL), 0); /* the last free block */
    struct strata_error err = {0};
    ck_assert_int_eq(kv_seq_reserve_pos(kv, 2, 24, &err), STRATA_E_LIMIT);
    ck_assert_int_eq(kv_seq_n_blocks(kv, 2), 3);
    /* clear and truncate give blocks back */
    ck_assert_int_eq(kv_seq_clear(kv, 1, NULL), 0);
    ck_assert_int_eq(kv_blocks_free(kv), 5);
    ck_assert_int_eq(kv_seq_truncate(kv, 2, 9, NULL), 0);
    ck_assert_int_eq(kv_seq_n_blocks(kv, 2), 2);
    ck_assert_int_eq(kv_blocks_free(kv), 6);
    ck_assert_int_eq(kv_seq_reserve_pos(kv, 2, 16, NULL), 0);
    ck_assert(rows_are(kv, 0, 1, 0, 8) && rows_are(kv, 2, 3, 0, 9));
    /* memory is kept for reuse: nothing allocated beyond the 9 + 1 blocks */
    ck_assert_int_eq(kv_bytes_allocated(kv), 10 * kv_block_bytes(kv_get_params(kv)));
    kv_free(kv);
}
END_TEST

/* n_head_kv = 2 parts: each head's positions are contiguous inside a block,
 * heads map to parts whole, and copy-on-write keeps every part's rows. */
static uint16_t head_val(int tag, int l, int h, int p, int i, bool v) {
    return (uint16_t)(tag * 10000 + l * 1000 + h * 300 + p * 4 + i + (v ? 150 : 0));
}

static void fill_heads(struct kv_cache *kv, int seq, int tag, int from, int to) {
    for (int p = from; p < to; p++) {
        ck_assert_int_eq(kv_seq_reserve_pos(kv, seq, p, NULL), 0);
        for (int l = 0; l < 2; l++)
            for (int h = 0; h < 2; h++) {
                for (int i = 0; i < 2; i++)
                    kv_k_head(kv, l, seq, p, h, 2)[i] = head_val(tag, l, h, p, i, false);
                kv_v_head(kv, l, seq, p, h, 1)[0] = head_val(tag, l, h, p, 0, true);
            }
    }
    kv_seq_set_len(kv, seq, to);
}

static bool heads_are(struct kv_cache *kv, int seq, int tag, int from, int to) {
    for (int p = from; p < to; p++)
        for (int l = 0; l < 2; l++)
            for (int h = 0; h < 2; h++)
                if (kv_k_head(kv, l, seq, p, h, 2)[1] != head_val(tag, l, h, p, 1, false) ||
                    kv_v_head(kv, l, seq, p, h, 1)[0] != head_val(tag, l, h, p, 0, true))
                    return false;
    return true;
}

START_TEST(test_head_parts) {
    struct kv_params kp = {.n_layer = 2,
                           .n_seq_max = 2,
                           .n_ctx = 64,
                           .n_embd_k = 4,
                           .n_embd_v = 2,
                           .n_block = 16,
                           .n_blocks = 8,
                           .n_head_kv = 2};
    struct strata_error err = {0};
    struct kv_cache *kv = kv_init(&kp, &err);
    ck_assert_msg(kv != NULL, "%s", err.message);
    fill_heads(kv, 0, 1, 0, 20);
    ck_assert(heads_are(kv, 0, 1, 0, 20));
    /* one head's positions are contiguous; parts hold whole heads */
    ck_assert_uint_eq(kv_k_stride(kv), 2);
    ck_assert_uint_eq(kv_v_stride(kv), 1);
    ck_assert_ptr_eq(kv_k_head(kv, 1, 0, 6, 1, 2), kv_k_head(kv, 1, 0, 5, 1, 2) + 2);
    ck_assert_ptr_eq(kv_k_head(kv, 1, 0, 5, 1, 2), kv_k_part(kv, 1, 0, 5, 1));
    ck_assert_ptr_eq(kv_k_head(kv, 1, 0, 5, 1, 1), kv_k_part(kv, 1, 0, 5, 0) + 1); /* 4 heads */
    ck_assert_ptr_eq(kv_k_head(kv, 1, 0, 5, 2, 1), kv_k_part(kv, 1, 0, 5, 1));
    /* copy-on-write inside the second block: rows 16..19 of every part kept */
    ck_assert_int_eq(kv_seq_copy(kv, 1, 0, 20, NULL), 0);
    fill_heads(kv, 1, 2, 20, 22);
    ck_assert(heads_are(kv, 1, 1, 0, 20) && heads_are(kv, 1, 2, 20, 22));
    ck_assert(heads_are(kv, 0, 1, 0, 20));
    ck_assert(kv_k_head(kv, 0, 1, 17, 1, 2) != kv_k_head(kv, 0, 0, 17, 1, 2));
    kv_free(kv);
    /* rows that do not split in the parts are refused */
    kp.n_head_kv = 3;
    ck_assert(kv_init(&kp, &err) == NULL);
    ck_assert_int_eq(err.code, STRATA_E_INVALID);
}
END_TEST

START_TEST(test_share_and_copy_on_write) {
    struct kv_cache *kv = small_kv(3, 64, 16, 8);
    fill(kv, 0, 1, 0, 20);
    /* seq 1 shares seq 0's 20 positions: no new block */
    ck_assert_int_eq(kv_seq_copy(kv, 1, 0, 20, NULL), 0);
    ck_assert_int_eq(kv_blocks_free(kv), 6);
    ck_assert_int_eq(kv_block_refs(kv, kv_seq_block(kv, 0, 1)), 2);
    ck_assert_ptr_eq(kv_k_row(kv, 0, 1, 5), kv_k_row(kv, 0, 0, 5));
    /* seq 1 writes pos 20: its partial block 1 is copied first (rows 16..19) */
    fill(kv, 1, 2, 20, 22);
    ck_assert_int_eq(kv_blocks_free(kv), 5);
    ck_assert_int_eq(kv_seq_n_alloc(kv, 1), 1);
    ck_assert(kv_seq_block(kv, 1, 1) != kv_seq_block(kv, 0, 1));
    ck_assert_int_eq(kv_seq_block(kv, 1, 0), kv_seq_block(kv, 0, 0)); /* full block still shared */
    ck_assert(rows_are(kv, 1, 1, 0, 20) && rows_are(kv, 1, 2, 20, 22));
    ck_assert(rows_are(kv, 0, 1, 0, 20));
    /* seq 0 writing into its (now private) block 1 changes nothing in seq 1 */
    fill(kv, 0, 3, 20, 24);
    ck_assert(rows_are(kv, 1, 2, 20, 22));
    ck_assert_int_eq(kv_block_refs(kv, kv_seq_block(kv, 0, 1)), 1);
    /* rewind into a shared full block copies it too */
    ck_assert_int_eq(kv_seq_copy(kv, 2, 0, 16, NULL), 0);
    fill(kv, 2, 4, 10, 12);
    ck_assert(rows_are(kv, 0, 1, 0, 20) && rows_are(kv, 2, 1, 0, 10) && rows_are(kv, 2, 4, 10, 12));
    /* a held reference outlives the sequences */
    int b0 = kv_seq_block(kv, 0, 0);
    ck_assert_int_eq(kv_block_ref(kv, b0, NULL), 0);
    kv_seq_clear(kv, 0, NULL);
    kv_seq_clear(kv, 1, NULL);
    kv_seq_clear(kv, 2, NULL);
    ck_assert_int_eq(kv_block_refs(kv, b0), 1);
    ck_assert_int_eq(kv_blocks_free(kv), 7);
    kv_block_unref(kv, b0);
    ck_assert_int_eq(kv_blocks_free(kv), 8);
    kv_free(kv);
}
END_TEST

START_TEST(test_bad_input) {
    struct kv_params kp = {
        .n_layer = 2, .n_seq_max = 2, .n_ctx = 32, .n_embd_k = 4, .n_embd_v = 2, .n_block = 12};
    struct strata_error err = {0};
    ck_assert(kv_init(&kp, &err) == NULL); /* not a power of two */
    ck_assert_int_eq(err.code, STRATA_E_INVALID);
    kp.n_block = 2048;
    ck_assert(kv_init(&kp, &err) == NULL);
    kp.n_block = 8;
    kp.n_blocks = -1;
    ck_assert(kv_init(&kp, &err) == NULL);
    kp.n_blocks = 1 << 30; /* 2^30 blocks of 8 x 2 x (2^20 + 2) x 2 bytes: over 2^40 */
    kp.n_embd_k = 1 << 20;
    ck_assert(kv_init(&kp, &err) == NULL);
    ck_assert_int_eq(err.code, STRATA_E_LIMIT);
    struct kv_cache *kv = small_kv(2, 32, 8, 4);
    ck_assert_int_eq(kv_seq_reserve_pos(kv, 0, 8, &err), STRATA_E_RANGE); /* a hole */
    ck_assert_int_eq(kv_seq_reserve_pos(kv, 0, 32, &err), STRATA_E_RANGE);
    ck_assert_int_eq(kv_seq_reserve_pos(kv, 2, 0, &err), STRATA_E_INVALID);
    ck_assert_int_eq(kv_seq_reserve_pos(kv, 0, -1, &err), STRATA_E_RANGE);
    int32_t bogus[2] = {0, 3};
    ck_assert_int_eq(kv_seq_attach(kv, 1, bogus, 2, 10, &err), STRATA_E_INVALID); /* unused */
    fill(kv, 0, 1, 0, 10);
    int32_t mine[2] = {kv_seq_block(kv, 0, 0), kv_seq_block(kv, 0, 1)};
    ck_assert_int_eq(kv_seq_attach(kv, 1, mine, 2, 17, &err), STRATA_E_RANGE);   /* > 2 blocks */
    ck_assert_int_eq(kv_seq_attach(kv, 1, mine, 2, 8, &err), STRATA_E_RANGE);    /* 1 block */
    ck_assert_int_eq(kv_seq_attach(kv, 0, mine, 2, 10, &err), STRATA_E_INVALID); /* not empty */
    ck_assert_int_eq(kv_seq_attach(kv, 1, mine, 2, 10, &err), 0);
    ck_assert_int_eq(kv_block_ref(kv, 3, &err), STRATA_E_INVALID);
    ck_assert_int_eq(kv_block_refs(kv, 99), 0);
    ck_assert_int_eq(kv_seq_block(kv, 1, 2), -1);
    kv_free(kv);
    kv_free(NULL);
}
END_TEST

/* ---- prefix cache ----------------------------------------------------------- */

START_TEST(test_prefix_trie) {
    struct kv_cache *kv = small_kv(3, 64, 8, 12);
    struct prefix_cache *pc = prefix_init(kv, NULL);
    ck_assert(pc != NULL);
    int32_t toks[40], blocks[8];
    for (int i = 0; i < 40; i++)
        toks[i] = 100 + i;
    int nb = -1;
    ck_assert_int_eq(prefix_lookup(pc, toks, 39, blocks, &nb), 0);
    ck_assert_int_eq(nb, 0);
    /* seq 0 holds 20 positions: blocks of 8, 8 and 4 tokens */
    fill(kv, 0, 1, 0, 20);
    ck_assert_int_eq(prefix_insert(pc, toks, 20, 0, NULL), 0);
    ck_assert_int_eq(prefix_n_entries(pc), 3);
    ck_assert_int_eq(prefix_n_idle(pc), 0);                    /* seq 0 still uses them */
    ck_assert_int_eq(prefix_insert(pc, toks, 20, 0, NULL), 0); /* again: nothing new */
    ck_assert_int_eq(prefix_n_entries(pc), 3);
    ck_assert_int_eq(prefix_evict(pc, 5), 0);
    /* lookups: the whole prefix, a divergence inside block 1, inside the partial block */
    ck_assert_int_eq(prefix_lookup(pc, toks, 39, blocks, &nb), 20);
    ck_assert_int_eq(nb, 3);
    ck_assert_int_eq(blocks[2], kv_seq_block(kv, 0, 2));
    ck_assert_int_eq(prefix_lookup(pc, toks, 19, blocks, &nb), 19);
    int32_t other[40];
    memcpy(other, toks, sizeof(other));
    other[11] = 7;
    ck_assert_int_eq(prefix_lookup(pc, other, 39, blocks, &nb), 11);
    ck_assert_int_eq(nb, 2);
    other[0] = 7;
    ck_assert_int_eq(prefix_lookup(pc, other, 39, blocks, &nb), 0);
    /* reuse: seq 1 attaches 11 positions, writes the rest of its own */
    ck_assert_int_eq(prefix_lookup(pc, toks, 11, blocks, &nb), 11);
    ck_assert_int_eq(kv_seq_attach(kv, 1, blocks, nb, 11, NULL), 0);
    fill(kv, 1, 2, 11, 30);
    ck_assert(rows_are(kv, 1, 1, 0, 11) && rows_are(kv, 1, 2, 11, 30));
    ck_assert(rows_are(kv, 0, 1, 0, 20)); /* the cached rows were copied, not written */
    int32_t t1[30];
    memcpy(t1, toks, sizeof(t1));
    for (int i = 11; i < 30; i++)
        t1[i] = 900 + i;
    ck_assert_int_eq(prefix_insert(pc, t1, 30, 1, NULL), 0);
    ck_assert_int_eq(prefix_n_entries(pc), 3 + 3); /* block 1', 2', 3' (partial) */
    kv_seq_clear(kv, 0, NULL);
    kv_seq_clear(kv, 1, NULL);
    ck_assert_int_eq(prefix_n_idle(pc), 6);
    ck_assert_int_eq(kv_blocks_free(kv), 12 - 6);
    /* LRU: touch the first sequence's path, then evict two leaves: seq 1's
     * partial block goes first, then seq 0's (older) partial block... */
    ck_assert_int_eq(prefix_lookup(pc, t1, 29, blocks, &nb), 29);
    ck_assert_int_eq(prefix_lookup(pc, toks, 20, blocks, &nb), 20);
    ck_assert_int_eq(prefix_evict(pc, 1), 1);
    ck_assert_int_eq(prefix_lookup(pc, t1, 29, blocks, &nb), 24); /* its partial block gone */
    ck_assert_int_eq(prefix_lookup(pc, toks, 20, blocks, &nb), 20);
    /* ...and only leaves go: inner blocks stay until their children are gone */
    ck_assert_int_eq(prefix_evict(pc, 2), 2);
    ck_assert_int_eq(prefix_n_entries(pc), 3);
    ck_assert_int_eq(prefix_clear_idle(pc), 3);
    ck_assert_int_eq(prefix_n_entries(pc), 0);
    ck_assert_int_eq(kv_blocks_free(kv), 12);
    /* prefix_free drops its references */
    fill(kv, 2, 3, 0, 8);
    ck_assert_int_eq(prefix_insert(pc, toks, 8, 2, NULL), 0);
    kv_seq_clear(kv, 2, NULL);
    ck_assert_int_eq(kv_blocks_free(kv), 11);
    ck_assert_int_eq(prefix_insert(pc, toks, 9, 2, NULL), STRATA_E_RANGE);
    prefix_free(pc);
    ck_assert_int_eq(kv_blocks_free(kv), 12);
    prefix_free(NULL);
    kv_free(kv);
}
END_TEST

/* Partitions (one per API key): a prompt cached by one is invisible to the
 * others, so neither the reuse count nor the prefill time tells a second
 * key how far its guess matches the first key's prompt. Before, the cache
 * was shared by everyone and a second key recovered a secret digit from
 * usage.prompt_tokens_details.cached_tokens. */
START_TEST(test_prefix_partitions) {
    struct kv_cache *kv = small_kv(3, 64, 8, 12);
    struct prefix_cache *pc = prefix_init(kv, NULL);
    ck_assert(pc != NULL);
    int32_t toks[40], blocks[8];
    for (int i = 0; i < 40; i++)
        toks[i] = 100 + i;
    int nb = -1;
    fill(kv, 0, 1, 0, 20);
    ck_assert_int_eq(prefix_insert_part(pc, 7, toks, 20, 0, NULL), 0);
    kv_seq_clear(kv, 0, NULL);
    /* the owner reuses all 20 positions; another partition (and the default
     * one) sees nothing, not even the first block */
    ck_assert_int_eq(prefix_lookup_part(pc, 7, toks, 39, blocks, &nb), 20);
    ck_assert_int_eq(nb, 3);
    ck_assert_int_eq(prefix_lookup_part(pc, 8, toks, 39, blocks, &nb), 0);
    ck_assert_int_eq(nb, 0);
    ck_assert_int_eq(prefix_lookup(pc, toks, 39, blocks, &nb), 0);
    ck_assert_int_eq(prefix_lookup_part(pc, 8, toks, 5, blocks, &nb), 0);
    /* the same tokens cached by partition 8 get their own blocks */
    fill(kv, 1, 2, 0, 16);
    ck_assert_int_eq(prefix_insert_part(pc, 8, toks, 16, 1, NULL), 0);
    ck_assert_int_eq(prefix_n_entries(pc), 3 + 2);
    ck_assert_int_eq(prefix_lookup_part(pc, 8, toks, 39, blocks, &nb), 16);
    ck_assert_int_eq(blocks[0], kv_seq_block(kv, 1, 0));
    ck_assert_int_eq(prefix_lookup_part(pc, 7, toks, 39, blocks, &nb), 20);
    ck_assert_int_ne(blocks[0], kv_seq_block(kv, 1, 0));
    kv_seq_clear(kv, 1, NULL);
    /* eviction is shared: everything idle goes back */
    ck_assert_int_eq(prefix_clear_idle(pc), 5);
    ck_assert_int_eq(kv_blocks_free(kv), 12);
    prefix_free(pc);
    kv_free(kv);
}
END_TEST

/* Random requests over a small alphabet (so prefixes repeat) through lookup,
 * attach, copy-on-write, insert, clear and eviction, as the scheduler does.
 * Every row stores a 64-bit hash of the tokens up to its position (K row:
 * 4 x 16 bits), so a reused row must carry the new request's own prefix; at
 * the end every block is back. */
static uint64_t prefix_hash(uint64_t h, int32_t tok) {
    return (h ^ (uint64_t)(tok + 1)) * 0x100000001b3ull;
}

START_TEST(test_prefix_random_invariants) {
    const int n_seq = 3, n_ctx = 48, B = 4;
    struct kv_cache *kv = small_kv(n_seq, n_ctx, B, 40);
    struct prefix_cache *pc = prefix_init(kv, NULL);
    unsigned rng = 12345;
    int32_t toks[3][48], blocks[16];
    int len[3] = {0, 0, 0};
    int reused = 0;
    for (int it = 0; it < 400; it++) {
        rng = rng * 1103515245u + 12345u;
        int seq = (int)((rng >> 16) % (unsigned)n_seq);
        if (len[seq] > 0) { /* finish it: cache and clear */
            ck_assert_int_eq(prefix_insert(pc, toks[seq], len[seq], seq, NULL), 0);
            kv_seq_clear(kv, seq, NULL);
            len[seq] = 0;
            continue;
        }
        int n = 2 + (int)((rng >> 8) % 40u);
        for (int i = 0; i < n; i++) {
            rng = rng * 1103515245u + 12345u;
            toks[seq][i] = (int32_t)((rng >> 16) % 3u); /* 3 tokens: long shared prefixes */
        }
        int nb = 0, hit = prefix_lookup(pc, toks[seq], n - 1, blocks, &nb);
        ck_assert_int_le(hit, n - 1);
        ck_assert_int_eq(kv_seq_attach(kv, seq, blocks, nb, hit, NULL), 0);
        reused += hit;
        uint64_t h = 0;
        for (int p = 0; p < n; p++) {
            h = prefix_hash(h, toks[seq][p]);
            if (p < hit) { /* reused row: must be this prefix's */
                for (int i = 0; i < 4; i++)
                    ck_assert_int_eq(kv_k_row(kv, 1, seq, p)[i], (uint16_t)(h >> (16 * i)));
                continue;
            }
            if (kv_blocks_free(kv) == 0)
                prefix_evict(pc, 1);
            ck_assert_int_eq(kv_seq_reserve_pos(kv, seq, p, NULL), 0);
            for (int i = 0; i < 4; i++)
                kv_k_row(kv, 1, seq, p)[i] = (uint16_t)(h >> (16 * i));
            kv_seq_set_len(kv, seq, p + 1);
        }
        len[seq] = n;
        /* accounting: referenced blocks = free complement */
        int refs = 0, used = 0;
        for (int b = 0; b < 40; b++) {
            refs += kv_block_refs(kv, b);
            used += kv_block_refs(kv, b) > 0;
        }
        int tab = 0;
        for (int s2 = 0; s2 < n_seq; s2++)
            tab += kv_seq_n_blocks(kv, s2);
        ck_assert_int_eq(refs, tab + prefix_n_entries(pc));
        ck_assert_int_eq(used, 40 - kv_blocks_free(kv));
    }
    ck_assert_int_gt(reused, 100);
    for (int s2 = 0; s2 < n_seq; s2++)
        kv_seq_clear(kv, s2, NULL);
    ck_assert_int_eq(prefix_n_idle(pc), prefix_n_entries(pc));
    prefix_clear_idle(pc);
    ck_assert_int_eq(kv_blocks_free(kv), 40);
    prefix_free(pc);
    kv_free(kv);
}
END_TEST

/* ---- on the real model --------------------------------------------------------- */

static void prefill(struct model *m, struct kv_cache *kv, int seq, const int32_t *toks, int from,
                    int to, float *logits) {
    struct model_batch_entry e[64];
    ck_assert_int_le(to - from, 64);
    for (int i = from; i < to; i++)
        e[i - from] = (struct model_batch_entry){seq, i, toks[i], i == to - 1};
    struct model_batch b = {e, to - from};
    struct strata_error err = {0};
    ck_assert_msg(model_forward(m, kv, &b, logits, &err) == 0, "%s", err.message);
}

/* A store over its own memory that counts what kv asks of it; fail_alloc
 * makes every allocation after the first n fail. */
struct count_store {
    uint16_t *blocks[64];
    int n_alloc, n_copy, fail_after;
    size_t copied;
    int *freed; /* set to 1 by free */
};

static int cs_alloc(void *ctx, int block, size_t bytes) {
    struct count_store *c = ctx;
    if (block >= 64 || (c->fail_after >= 0 && c->n_alloc >= c->fail_after))
        return STRATA_E_NOMEM;
    c->blocks[block] = malloc(bytes);
    c->n_alloc++;
    return c->blocks[block] ? 0 : STRATA_E_NOMEM;
}
static uint16_t *cs_host(void *ctx, int block) {
    return ((struct count_store *)ctx)->blocks[block];
}
static void cs_copy(void *ctx, int dst, int src, size_t off, size_t n) {
    struct count_store *c = ctx;
    memcpy((uint8_t *)c->blocks[dst] + off, (const uint8_t *)c->blocks[src] + off, n);
    c->n_copy++;
    c->copied += n;
}
static void cs_free(void *ctx) {
    struct count_store *c = ctx;
    for (int i = 0; i < 64; i++)
        free(c->blocks[i]);
    *c->freed = 1;
    free(c);
}
static const struct kv_store_ops cs_ops = {"count", cs_alloc, cs_host, cs_copy,
                                           cs_free, NULL,     NULL};

static struct kv_store *count_store(int fail_after, int *freed, struct count_store **out) {
    struct count_store *c = calloc(1, sizeof *c);
    struct kv_store *st = calloc(1, sizeof *st);
    ck_assert(c && st);
    c->fail_after = fail_after;
    c->freed = freed;
    *st = (struct kv_store){&cs_ops, c};
    *out = c;
    return st;
}

START_TEST(test_store_interface) {
    struct strata_error err = {0};
    /* 2 layers, 2 heads of 2 dims, blocks of 4 positions */
    struct kv_params kp = {.n_layer = 2,
                           .n_seq_max = 2,
                           .n_ctx = 16,
                           .n_embd_k = 4,
                           .n_embd_v = 4,
                           .n_block = 4,
                           .n_blocks = 8,
                           .n_head_kv = 2};
    int freed = 0;
    struct count_store *c;
    struct kv_cache *kv = kv_init_store(&kp, count_store(-1, &freed, &c), &err);
    ck_assert_msg(kv != NULL, "%s", err.message);
    ck_assert_str_eq(kv_get_store(kv)->ops->name, "count");
    for (int p = 0; p < 6; p++) { /* seq 0: 6 positions, 2 blocks */
        ck_assert_int_eq(kv_seq_reserve_pos(kv, 0, p, &err), 0);
        for (int l = 0; l < 2; l++)
            for (int h = 0; h < 2; h++) {
                kv_k_head(kv, l, 0, p, h, 2)[1] = (uint16_t)(100 * l + 10 * h + p);
                kv_v_head(kv, l, 0, p, h, 2)[0] = (uint16_t)(1000 + p);
            }
        kv_seq_set_len(kv, 0, p + 1);
    }
    ck_assert_int_eq(c->n_alloc, 2); /* a block's memory on its first use */
    ck_assert_uint_eq(kv_bytes_allocated(kv), 2 * kv_block_bytes(&kp));
    /* seq 1 shares the 6 positions; writing pos 6 copies the shared block's
     * first 2 rows of every (layer, head) part, K and V: 8 copies */
    ck_assert_int_eq(kv_seq_copy(kv, 1, 0, 6, &err), 0);
    ck_assert_int_eq(kv_seq_reserve_pos(kv, 1, 6, &err), 0);
    ck_assert_int_eq(c->n_alloc, 3);
    ck_assert_int_eq(c->n_copy, 2 * 2 * 2);
    ck_assert_uint_eq(c->copied, (size_t)8 * 2 * 2 * sizeof(uint16_t));
    for (int p = 4; p < 6; p++)
        for (int l = 0; l < 2; l++)
            for (int h = 0; h < 2; h++) {
                ck_assert(kv_k_head(kv, l, 1, p, h, 2) != kv_k_head(kv, l, 0, p, h, 2));
                ck_assert_int_eq(kv_k_head(kv, l, 1, p, h, 2)[1], 100 * l + 10 * h + p);
                ck_assert_int_eq(kv_v_head(kv, l, 1, p, h, 2)[0], 1000 + p);
            }
    kv_free(kv);
    ck_assert_int_eq(freed, 1);
    /* a store that runs out: the reserve fails, nothing half-done */
    freed = 0;
    kv = kv_init_store(&kp, count_store(1, &freed, &c), &err);
    ck_assert_int_eq(kv_seq_reserve_pos(kv, 0, 0, &err), 0);
    ck_assert_int_eq(kv_seq_reserve_pos(kv, 1, 0, &err), STRATA_E_LIMIT);
    ck_assert_int_eq(kv_seq_n_blocks(kv, 1), 0);
    ck_assert_int_eq(kv_blocks_free(kv), 7);
    kv_free(kv);
    ck_assert_int_eq(freed, 1);
    /* refused stores and shapes are freed all the same */
    static const struct kv_store_ops no_alloc = {"none",  NULL, cs_host, cs_copy,
                                                 cs_free, NULL, NULL};
    freed = 0;
    struct kv_store *st = count_store(-1, &freed, &c);
    st->ops = &no_alloc;
    ck_assert(kv_init_store(&kp, st, &err) == NULL);
    ck_assert_int_eq(err.code, STRATA_E_INVALID);
    ck_assert_int_eq(freed, 1);
    freed = 0;
    kp.n_block = 3; /* not a power of two */
    ck_assert(kv_init_store(&kp, count_store(-1, &freed, &c), &err) == NULL);
    ck_assert_int_eq(freed, 1);
    ck_assert(kv_init_store(&kp, NULL, &err) == NULL);
    kv_store_free(NULL);
}
END_TEST

START_TEST(test_model_prefix_reuse_bit_identical) {
    char path[1024];
    struct model_params mp = model_params_default();
    struct strata_error err = {0};
    struct model *m =
        test_model_load(test_shared_path(path, sizeof(path), "models/stories260K.gguf"), &mp, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    const struct model_hparams *hp = model_hparams(m);
    struct kv_params kp = {.n_layer = hp->n_layer,
                           .n_seq_max = 3,
                           .n_ctx = 128,
                           .n_embd_k = hp->n_head_kv * hp->head_dim_k,
                           .n_embd_v = hp->n_head_kv * hp->head_dim_v,
                           .n_block = 8};
    struct kv_cache *kv = kv_init(&kp, &err);
    struct prefix_cache *pc = prefix_init(kv, &err);
    ck_assert(kv && pc);
    const int nv = model_n_vocab(m);
    float *cold = malloc((size_t)nv * sizeof(float)), *warm = malloc((size_t)nv * sizeof(float));
    int32_t a[40], b[40];
    for (int i = 0; i < 40; i++) {
        a[i] = 1 + (i * 37) % (nv - 1);
        b[i] = i < 21 ? a[i] : 1 + (i * 11) % (nv - 1);
    }
    /* seq 0: a's 30 tokens, cached */
    prefill(m, kv, 0, a, 0, 30, cold);
    ck_assert_int_eq(prefix_insert(pc, a, 30, 0, NULL), 0);
    kv_seq_clear(kv, 0, NULL);
    /* b shares a's first 21 tokens: 2 full blocks + 5 rows of the third */
    int32_t blocks[16];
    int nb = 0;
    ck_assert_int_eq(prefix_lookup(pc, b, 39, blocks, &nb), 21);
    ck_assert_int_eq(kv_seq_attach(kv, 1, blocks, nb, 21, NULL), 0);
    prefill(m, kv, 1, b, 21, 40, warm);
    prefill(m, kv, 2, b, 0, 40, cold);
    ck_assert_int_eq(memcmp(cold, warm, (size_t)nv * sizeof(float)), 0);
    /* decode one more token on both: still identical */
    int32_t next[41];
    memcpy(next, b, sizeof(b));
    next[40] = 5;
    prefill(m, kv, 1, next, 40, 41, warm);
    prefill(m, kv, 2, next, 40, 41, cold);
    ck_assert_int_eq(memcmp(cold, warm, (size_t)nv * sizeof(float)), 0);
    free(cold);
    free(warm);
    prefix_free(pc);
    kv_free(kv);
    test_model_free(m);
}
END_TEST

static Suite *kv_suite(void) {
    Suite *s = suite_create("kv");
    TCase *tc = tcase_create("kv");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_paging_accounting);
    tcase_add_test(tc, test_share_and_copy_on_write);
    tcase_add_test(tc, test_head_parts);
    tcase_add_test(tc, test_bad_input);
    tcase_add_test(tc, test_store_interface);
    tcase_add_test(tc, test_prefix_trie);
    tcase_add_test(tc, test_prefix_partitions);
    tcase_add_test(tc, test_prefix_random_invariants);
    tcase_add_test(tc, test_model_prefix_reuse_bit_identical);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("kv", kv_suite)
