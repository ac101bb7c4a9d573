/* engine/kv/kv.c: the paged F16 KV cache (see kv.h). */
#include "engine/kv/kv.h"

#include <stdlib.h>
#include <stdbool.h>
#include <string.h>

#include "engine/core/buf.h"

struct kv_seq {
    int32_t *table; /* (max_blocks_per_seq) block ids; [0, n_tab) valid */
    int n_tab;      /* blocks in the table */
    int len;        /* positions filled */
    int n_alloc;    /* blocks taken from the free list since the sequence was empty */
};

struct kv_cache {
    struct kv_params p;
    int shift;              /* log2(n_block) */
    int max_tab;            /* ceil(n_ctx / n_block): table entries per sequence */
    size_t k_elems;         /* f16 elements of K in one block: n_layer * n_block * n_embd_k */
    size_t blk_elems;       /* f16 elements of one block (K then V) */
    struct kv_store *store; /* owned: the blocks' memory */
    uint8_t *present;       /* (n_blocks) 1 once the store gave the block memory */
    uint16_t **mem; /* (n_blocks) host address of each block (kv_store_ops.block_host), or NULL */
    int32_t *refs;  /* (n_blocks) reference counts */
    int32_t *free_stack; /* (n_blocks) ids of unreferenced blocks; [0, n_free) valid */
    int n_free;
    struct kv_seq *seqs; /* (n_seq_max) */
    int32_t *tables;     /* (n_seq_max, max_tab) backing of every seq's table */
    size_t bytes;        /* allocated block bytes */
};

/* 2^40 bytes of pool: far above any real model, low enough that the size
 * arithmetic below cannot overflow size_t. */
#define KV_MAX_POOL_BYTES ((uint64_t)1 << 40)
#define KV_DEFAULT_BLOCK 16

size_t kv_block_bytes(const struct kv_params *p) {
    int nb = p->n_block > 0 ? p->n_block : KV_DEFAULT_BLOCK;
    return (size_t)p->n_layer * (size_t)nb * ((size_t)p->n_embd_k + (size_t)p->n_embd_v) * 2u;
}

/* ---- the host store ------------------------------------------------------------ */

struct host_store {
    uint16_t **blocks; /* (cap) malloc'd block memory, NULL until allocated */
    size_t cap;
};

static int host_block_alloc(void *ctx, int block, size_t bytes) {
    struct host_store *h = ctx;
    size_t cap = h->cap;
    if ((size_t)block >= h->cap) {
        if (strata_grow((void **)&h->blocks, &cap, (size_t)block + 1, sizeof *h->blocks) < 0)
            return STRATA_E_NOMEM;
        memset(h->blocks + h->cap, 0, (cap - h->cap) * sizeof *h->blocks);
        h->cap = cap;
    }
    if (!h->blocks[block] && !(h->blocks[block] = malloc(bytes)))
        return STRATA_E_NOMEM;
    return 0;
}

static uint16_t *host_block_host(void *ctx, int block) {
    struct host_store *h = ctx;
    return (size_t)block < h->cap ? h->blocks[block] : NULL;
}

static void host_free(void *ctx) {
    struct host_store *h = ctx;
    if (!h)
        return;
    for (size_t b = 0; b < h->cap; b++)
        free(h->blocks[b]);
    free(h->blocks);
    free(h);
}

static const struct kv_store_ops host_ops = {
    .name = "host",
    .block_alloc = host_block_alloc,
    .block_host = host_block_host,
    .block_copy = NULL,
    .free = host_free,
};

struct kv_store *kv_store_host_init(struct strata_error *err) {
    struct kv_store *s = calloc(1, sizeof *s);
    struct host_store *h = calloc(1, sizeof *h);
    if (!s || !h) {
        free(s);
        free(h);
        strata_error_set(err, STRATA_E_NOMEM, "kv: out of memory");
        return NULL;
    }
    *s = (struct kv_store){&host_ops, h};
    return s;
}

void kv_store_free(struct kv_store *store) {
    if (!store)
        return;
    if (store->ops && store->ops->free)
        store->ops->free(store->ctx);
    free(store);
}

/* ---- the cache ------------------------------------------------------------------- */

struct kv_cache *kv_init(const struct kv_params *params, struct strata_error *err) {
    struct kv_store *store = kv_store_host_init(err);
    return store ? kv_init_store(params, store, err) : NULL;
}

const struct kv_store *kv_store_find(const struct kv_store *store, const struct kv_store_ops *ops) {
    if (!store || store->ops == ops)
        return store;
    return store->ops->part ? store->ops->part(store->ctx, ops) : NULL;
}

const struct kv_store *kv_get_store(const struct kv_cache *kv) {
    return kv->store;
}

struct kv_cache *kv_init_store(const struct kv_params *params, struct kv_store *store,
                               struct strata_error *err) {
    if (!store || !store->ops || !store->ops->block_alloc ||
        (!store->ops->block_host && !store->ops->block_copy)) {
        kv_store_free(store);
        strata_error_set(err, STRATA_E_INVALID, "kv_init: a store without block memory");
        return NULL;
    }
    if (!params || params->n_layer < 1 || params->n_seq_max < 1 || params->n_ctx < 1 ||
        params->n_embd_k < 1 || params->n_embd_v < 1 || params->n_block < 0 ||
        params->n_blocks < 0 || params->n_head_kv < 0) {
        kv_store_free(store);
        strata_error_set(err, STRATA_E_INVALID, "kv_init: every count must be >= 1");
        return NULL;
    }
    struct kv_params p = *params;
    if (p.n_block == 0)
        p.n_block = KV_DEFAULT_BLOCK;
    if (p.n_head_kv == 0)
        p.n_head_kv = 1;
    if (p.n_embd_k % p.n_head_kv || p.n_embd_v % p.n_head_kv) {
        kv_store_free(store);
        strata_error_set(err, STRATA_E_INVALID, "kv_init: rows of %d / %d do not split in %d parts",
                         p.n_embd_k, p.n_embd_v, p.n_head_kv);
        return NULL;
    }
    if (p.n_block > 1024 || (p.n_block & (p.n_block - 1))) {
        kv_store_free(store);
        strata_error_set(err, STRATA_E_INVALID,
                         "kv_init: block size %d is not a power of two in [1, 1024]", p.n_block);
        return NULL;
    }
    if (p.n_seq_max > (1 << 20) || p.n_layer > (1 << 16) || p.n_embd_k > (1 << 24) ||
        p.n_embd_v > (1 << 24)) {
        kv_store_free(store);
        strata_error_set(err, STRATA_E_LIMIT, "kv_init: shape too large");
        return NULL;
    }
    uint64_t max_tab = ((uint64_t)p.n_ctx + (uint64_t)p.n_block - 1) / (uint64_t)p.n_block;
    if (p.n_blocks == 0) {
        uint64_t nb = max_tab * (uint64_t)p.n_seq_max;
        p.n_blocks = nb > (1u << 30) ? (1 << 30) : (int)nb;
    }
    uint64_t blk = kv_block_bytes(&p);
    if (blk >= ((uint64_t)1 << 32) || blk * (uint64_t)p.n_blocks >= KV_MAX_POOL_BYTES ||
        max_tab * (uint64_t)p.n_seq_max > ((uint64_t)1 << 30)) {
        kv_store_free(store);
        strata_error_set(err, STRATA_E_LIMIT, "kv_init: %llu blocks of %llu bytes is too large",
                         (unsigned long long)p.n_blocks, (unsigned long long)blk);
        return NULL;
    }
    struct kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv) {
        kv_store_free(store);
        goto fail;
    }
    kv->store = store;
    kv->p = p;
    if (store->ops->shape)
        store->ops->shape(store->ctx, &p);
    while ((1 << kv->shift) < p.n_block)
        kv->shift++;
    kv->max_tab = (int)max_tab;
    kv->k_elems = (size_t)p.n_layer * (size_t)p.n_block * (size_t)p.n_embd_k;
    kv->blk_elems = kv->k_elems + (size_t)p.n_layer * (size_t)p.n_block * (size_t)p.n_embd_v;
    kv->mem = calloc((size_t)p.n_blocks, sizeof *kv->mem);
    kv->present = calloc((size_t)p.n_blocks, 1);
    kv->refs = calloc((size_t)p.n_blocks, sizeof *kv->refs);
    kv->free_stack = malloc((size_t)p.n_blocks * sizeof *kv->free_stack);
    kv->seqs = calloc((size_t)p.n_seq_max, sizeof *kv->seqs);
    kv->tables = malloc((size_t)max_tab * (size_t)p.n_seq_max * sizeof *kv->tables);
    if (!kv->mem || !kv->present || !kv->refs || !kv->free_stack || !kv->seqs || !kv->tables)
        goto fail;
    /* low ids on top: blocks are reused most-recently-freed first (warm memory) */
    for (int i = 0; i < p.n_blocks; i++)
        kv->free_stack[i] = p.n_blocks - 1 - i;
    kv->n_free = p.n_blocks;
    for (int s = 0; s < p.n_seq_max; s++)
        kv->seqs[s].table = kv->tables + (size_t)s * (size_t)max_tab;
    return kv;
fail:
    kv_free(kv);
    strata_error_set(err, STRATA_E_NOMEM, "kv_init: out of memory");
    return NULL;
}

void kv_free(struct kv_cache *kv) {
    if (!kv)
        return;
    kv_store_free(kv->store);
    free(kv->tables);
    free(kv->seqs);
    free(kv->free_stack);
    free(kv->refs);
    free(kv->mem);
    free(kv->present);
    free(kv);
}

const struct kv_params *kv_get_params(const struct kv_cache *kv) {
    return &kv->p;
}

static int check_seq(const struct kv_cache *kv, int seq_id, struct strata_error *err) {
    if (seq_id < 0 || seq_id >= kv->p.n_seq_max)
        return strata_error_set(err, STRATA_E_INVALID, "kv: sequence id %d out of range [0, %d)",
                                seq_id, kv->p.n_seq_max);
    return 0;
}

/* ---- blocks ----------------------------------------------------------------- */

/* Takes a free block (allocating its memory on first use); -1 when none. */
static int block_take(struct kv_cache *kv) {
    if (kv->n_free == 0)
        return -1;
    int b = kv->free_stack[kv->n_free - 1];
    if (!kv->present[b]) {
        /* Uninitialised memory is fine: attention reads only positions < len
         * or rows written earlier in the same step. */
        if (kv->store->ops->block_alloc(kv->store->ctx, b, kv->blk_elems * 2))
            return -1;
        kv->present[b] = 1;
        kv->mem[b] =
            kv->store->ops->block_host ? kv->store->ops->block_host(kv->store->ctx, b) : NULL;
        kv->bytes += kv->blk_elems * 2;
    }
    kv->n_free--;
    kv->refs[b] = 1;
    return b;
}

void kv_block_unref(struct kv_cache *kv, int b) {
    STRATA_ASSERT(b >= 0 && b < kv->p.n_blocks && kv->refs[b] > 0);
    if (--kv->refs[b] == 0)
        kv->free_stack[kv->n_free++] = b;
}

int kv_block_ref(struct kv_cache *kv, int b, struct strata_error *err) {
    if (b < 0 || b >= kv->p.n_blocks || kv->refs[b] <= 0)
        return strata_error_set(err, STRATA_E_INVALID, "kv: block %d is not in use", b);
    kv->refs[b]++;
    return 0;
}

int kv_block_refs(const struct kv_cache *kv, int b) {
    return b >= 0 && b < kv->p.n_blocks ? kv->refs[b] : 0;
}

int kv_blocks_total(const struct kv_cache *kv) {
    return kv->p.n_blocks;
}

int kv_blocks_free(const struct kv_cache *kv) {
    return kv->n_free;
}

int kv_seq_n_blocks(const struct kv_cache *kv, int seq_id) {
    return seq_id >= 0 && seq_id < kv->p.n_seq_max ? kv->seqs[seq_id].n_tab : 0;
}

int kv_seq_block(const struct kv_cache *kv, int seq_id, int i) {
    if (seq_id < 0 || seq_id >= kv->p.n_seq_max || i < 0 || i >= kv->seqs[seq_id].n_tab)
        return -1;
    return kv->seqs[seq_id].table[i];
}

int kv_seq_n_alloc(const struct kv_cache *kv, int seq_id) {
    return seq_id >= 0 && seq_id < kv->p.n_seq_max ? kv->seqs[seq_id].n_alloc : 0;
}

/* Drops table entries [keep, n_tab). */
static void seq_drop_blocks(struct kv_cache *kv, struct kv_seq *s, int keep) {
    while (s->n_tab > keep)
        kv_block_unref(kv, s->table[--s->n_tab]);
    if (s->n_tab == 0)
        s->n_alloc = 0;
}

/* ---- sequences ---------------------------------------------------------------- */

int kv_seq_len(const struct kv_cache *kv, int seq_id) {
    if (seq_id < 0 || seq_id >= kv->p.n_seq_max)
        return -1;
    return kv->seqs[seq_id].len;
}

int kv_seq_clear(struct kv_cache *kv, int seq_id, struct strata_error *err) {
    int rc = check_seq(kv, seq_id, err);
    if (rc)
        return rc;
    seq_drop_blocks(kv, &kv->seqs[seq_id], 0);
    kv->seqs[seq_id].len = 0;
    return 0;
}

int kv_seq_truncate(struct kv_cache *kv, int seq_id, int len, struct strata_error *err) {
    int rc = check_seq(kv, seq_id, err);
    if (rc)
        return rc;
    struct kv_seq *s = &kv->seqs[seq_id];
    if (len < 0 || len > s->len)
        return strata_error_set(err, STRATA_E_RANGE, "kv: truncate to %d outside [0, %d]", len,
                                s->len);
    seq_drop_blocks(kv, s, (len + kv->p.n_block - 1) >> kv->shift);
    s->len = len;
    return 0;
}

int kv_seq_free(struct kv_cache *kv, int seq_id, struct strata_error *err) {
    return kv_seq_clear(kv, seq_id, err);
}

int kv_seq_attach(struct kv_cache *kv, int seq_id, const int32_t *blocks, int n, int len,
                  struct strata_error *err) {
    int rc = check_seq(kv, seq_id, err);
    if (rc)
        return rc;
    struct kv_seq *s = &kv->seqs[seq_id];
    if (s->len != 0 || s->n_tab != 0)
        return strata_error_set(err, STRATA_E_INVALID, "kv: attach to non-empty sequence %d",
                                seq_id);
    if (n < 0 || n > kv->max_tab || len < 0 || len > kv->p.n_ctx ||
        (n > 0 && (len <= (n - 1) * kv->p.n_block || len > n * kv->p.n_block)) ||
        (n == 0 && len != 0) || (n > 0 && !blocks))
        return strata_error_set(err, STRATA_E_RANGE, "kv: attach of %d blocks for %d positions", n,
                                len);
    for (int i = 0; i < n; i++)
        if (blocks[i] < 0 || blocks[i] >= kv->p.n_blocks || kv->refs[blocks[i]] <= 0)
            return strata_error_set(err, STRATA_E_INVALID, "kv: attach of unused block %d",
                                    blocks[i]);
    for (int i = 0; i < n; i++) {
        kv->refs[blocks[i]]++;
        s->table[i] = blocks[i];
    }
    s->n_tab = n;
    s->n_alloc = 0;
    s->len = len;
    return 0;
}

int kv_seq_copy(struct kv_cache *kv, int dst_seq, int src_seq, int len, struct strata_error *err) {
    int rc = check_seq(kv, dst_seq, err);
    if (rc == 0)
        rc = check_seq(kv, src_seq, err);
    if (rc)
        return rc;
    if (len < 0 || len > kv->seqs[src_seq].len)
        return strata_error_set(err, STRATA_E_RANGE, "kv: copy of %d positions outside [0, %d]",
                                len, kv->seqs[src_seq].len);
    if (dst_seq == src_seq)
        return kv_seq_truncate(kv, dst_seq, len, err);
    kv_seq_clear(kv, dst_seq, NULL);
    int n = (len + kv->p.n_block - 1) >> kv->shift;
    return kv_seq_attach(kv, dst_seq, kv->seqs[src_seq].table, n, len, err);
}

size_t kv_bytes_allocated(const struct kv_cache *kv) {
    return kv->bytes;
}

/* ---- used by the forward pass ------------------------------------------------ */

int kv_seq_reserve(struct kv_cache *kv, int seq_id, struct strata_error *err) {
    return check_seq(kv, seq_id, err);
}

/* n bytes at byte offset off of block src to block dst: through the host
 * addresses where both have one, else the store's copy. */
static void block_copy(struct kv_cache *kv, int dst, int src, size_t off, size_t n) {
    if (kv->store->ops->block_copy) {
        kv->store->ops->block_copy(kv->store->ctx, dst, src, off, n);
        return;
    }
    STRATA_ASSERT(kv->mem[dst] && kv->mem[src]); /* no copy member: host-visible blocks */
    memcpy((uint8_t *)kv->mem[dst] + off, (const uint8_t *)kv->mem[src] + off, n);
}

int kv_seq_reserve_pos(struct kv_cache *kv, int seq_id, int pos, struct strata_error *err) {
    int rc = check_seq(kv, seq_id, err);
    if (rc)
        return rc;
    struct kv_seq *s = &kv->seqs[seq_id];
    const int i = pos >> kv->shift;
    if (pos < 0 || pos >= kv->p.n_ctx || i > s->n_tab)
        return strata_error_set(err, STRATA_E_RANGE, "kv: reserve of pos %d (seq %d holds %d)", pos,
                                seq_id, s->n_tab << kv->shift);
    if (i < s->n_tab && kv->refs[s->table[i]] == 1)
        return 0; /* present and private: the common case */
    int b = block_take(kv);
    if (b < 0)
        return strata_error_set(err, STRATA_E_LIMIT,
                                "kv: pool exhausted (%d blocks of %d positions in use)",
                                kv->p.n_blocks, kv->p.n_block);
    s->n_alloc++;
    if (i == s->n_tab) {
        s->table[s->n_tab++] = b;
        return 0;
    }
    /* copy-on-write: the rows before pos in this block are valid and shared */
    const int old = s->table[i], n_rows = pos & (kv->p.n_block - 1);
    if (n_rows > 0) {
        const size_t pk = (size_t)kv->p.n_embd_k / (size_t)kv->p.n_head_kv;
        const size_t pv = (size_t)kv->p.n_embd_v / (size_t)kv->p.n_head_kv;
        const size_t vk = (size_t)kv->p.n_block * pk, vv = (size_t)kv->p.n_block * pv;
        const size_t n_parts = (size_t)kv->p.n_layer * (size_t)kv->p.n_head_kv;
        for (size_t l = 0; l < n_parts; l++) { /* every (layer, part): its first n_rows */
            block_copy(kv, b, old, l * vk * 2, (size_t)n_rows * pk * 2);
            block_copy(kv, b, old, (kv->k_elems + l * vv) * 2, (size_t)n_rows * pv * 2);
        }
    }
    s->table[i] = b;
    kv_block_unref(kv, old);
    return 0;
}

void kv_seq_set_len(struct kv_cache *kv, int seq_id, int len) {
    STRATA_ASSERT(seq_id >= 0 && seq_id < kv->p.n_seq_max && len >= 0 && len <= kv->p.n_ctx);
    kv->seqs[seq_id].len = len;
}

static uint16_t *kv_part(struct kv_cache *kv, int layer, int seq_id, int pos, int part, bool v) {
    const struct kv_seq *s = &kv->seqs[seq_id];
    const int i = pos >> kv->shift;
    STRATA_ASSERT(layer >= 0 && layer < kv->p.n_layer && pos >= 0 && i < s->n_tab && part >= 0 &&
                  part < kv->p.n_head_kv);
    const size_t w = (size_t)(v ? kv->p.n_embd_v : kv->p.n_embd_k) / (size_t)kv->p.n_head_kv;
    STRATA_ASSERT(kv->mem[s->table[i]] != NULL); /* a host-visible store */
    return kv->mem[s->table[i]] + (v ? kv->k_elems : 0) +
           (((size_t)layer * (size_t)kv->p.n_head_kv + (size_t)part) * (size_t)kv->p.n_block +
            (size_t)(pos & (kv->p.n_block - 1))) *
               w;
}

uint16_t *kv_k_part(struct kv_cache *kv, int layer, int seq_id, int pos, int part) {
    return kv_part(kv, layer, seq_id, pos, part, false);
}

uint16_t *kv_v_part(struct kv_cache *kv, int layer, int seq_id, int pos, int part) {
    return kv_part(kv, layer, seq_id, pos, part, true);
}

uint16_t *kv_k_row(struct kv_cache *kv, int layer, int seq_id, int pos) {
    STRATA_ASSERT(kv->p.n_head_kv == 1);
    return kv_part(kv, layer, seq_id, pos, 0, false);
}

uint16_t *kv_v_row(struct kv_cache *kv, int layer, int seq_id, int pos) {
    STRATA_ASSERT(kv->p.n_head_kv == 1);
    return kv_part(kv, layer, seq_id, pos, 0, true);
}

static uint16_t *kv_head(struct kv_cache *kv, int layer, int seq_id, int pos, int head,
                         int head_dim, bool v) {
    const int per = (v ? kv->p.n_embd_v : kv->p.n_embd_k) / kv->p.n_head_kv / head_dim;
    STRATA_ASSERT(per >= 1);
    return kv_part(kv, layer, seq_id, pos, head / per, v) + (size_t)(head % per) * head_dim;
}

uint16_t *kv_k_head(struct kv_cache *kv, int layer, int seq_id, int pos, int head, int head_dim) {
    return kv_head(kv, layer, seq_id, pos, head, head_dim, false);
}

uint16_t *kv_v_head(struct kv_cache *kv, int layer, int seq_id, int pos, int head, int head_dim) {
    return kv_head(kv, layer, seq_id, pos, head, head_dim, true);
}

size_t kv_k_stride(const struct kv_cache *kv) {
    return (size_t)kv->p.n_embd_k / (size_t)kv->p.n_head_kv;
}

size_t kv_v_stride(const struct kv_cache *kv) {
    return (size_t)kv->p.n_embd_v / (size_t)kv->p.n_head_kv;
}
