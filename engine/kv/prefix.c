/* engine/kv/prefix.c: the prefix cache, a trie of KV blocks (see prefix.h). */
#include "engine/kv/prefix.h"

#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kv/kv.h"

struct pc_entry {
    int32_t block;    /* KV block id (one reference held) */
    int n_tok;        /* tokens in the block: n_block (full) or fewer (partial, a leaf) */
    int parent;       /* entry index, or the root */
    int first_child;  /* -1 when none */
    int next_sibling; /* -1 at the end; also the free-list link */
    int n_children;
    uint32_t part; /* partition (prefix.h); a child is in its parent's */
    uint64_t tick; /* last use (LRU) */
    bool used;
};

struct prefix_cache {
    struct kv_cache *kv;      /* borrowed */
    int n_block;              /* positions per block */
    int cap;                  /* entries (one per pool block); entries[cap] is the root */
    struct pc_entry *entries; /* (cap + 1) */
    int32_t *toks;            /* (cap, n_block) tokens of each entry */
    int32_t *entry_of_block;  /* (n_blocks) entry holding the block, or -1 */
    int free_head;            /* free entries linked through next_sibling */
    int n_used;
    uint64_t tick;
};

struct prefix_cache *prefix_init(struct kv_cache *kv, struct strata_error *err) {
    if (!kv) {
        strata_error_set(err, STRATA_E_INVALID, "prefix_init: no kv cache");
        return NULL;
    }
    struct prefix_cache *pc = calloc(1, sizeof *pc);
    if (!pc)
        goto fail;
    pc->kv = kv;
    pc->n_block = kv_get_params(kv)->n_block;
    pc->cap = kv_blocks_total(kv);
    pc->entries = calloc((size_t)pc->cap + 1, sizeof *pc->entries);
    pc->toks = malloc((size_t)pc->cap * (size_t)pc->n_block * sizeof *pc->toks);
    pc->entry_of_block = malloc((size_t)pc->cap * sizeof *pc->entry_of_block);
    if (!pc->entries || !pc->toks || !pc->entry_of_block)
        goto fail;
    for (int i = 0; i < pc->cap; i++) {
        pc->entries[i].next_sibling = i + 1 < pc->cap ? i + 1 : -1;
        pc->entry_of_block[i] = -1;
    }
    pc->free_head = pc->cap > 0 ? 0 : -1;
    pc->entries[pc->cap] = (struct pc_entry){
        .block = -1, .parent = -1, .first_child = -1, .next_sibling = -1, .used = true};
    return pc;
fail:
    prefix_free(pc);
    strata_error_set(err, STRATA_E_NOMEM, "prefix_init: out of memory");
    return NULL;
}

void prefix_free(struct prefix_cache *pc) {
    if (!pc)
        return;
    if (pc->entries)
        for (int i = 0; i < pc->cap; i++)
            if (pc->entries[i].used)
                kv_block_unref(pc->kv, pc->entries[i].block);
    free(pc->entry_of_block);
    free(pc->toks);
    free(pc->entries);
    free(pc);
}

static const int32_t *entry_toks(const struct prefix_cache *pc, int e) {
    return pc->toks + (size_t)e * (size_t)pc->n_block;
}

static int common_prefix(const int32_t *a, const int32_t *b, int n) {
    int i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

int prefix_lookup_part(struct prefix_cache *pc, uint32_t part, const int32_t *toks, int n,
                       int32_t *blocks, int *n_blocks) {
    int node = pc->cap, pos = 0, nb = 0;
    const uint64_t tick = ++pc->tick;
    while (n - pos > 0) {
        int best = -1, best_len = 0, full = -1;
        for (int c = pc->entries[node].first_child; c >= 0; c = pc->entries[c].next_sibling) {
            const struct pc_entry *e = &pc->entries[c];
            if (e->part != part)
                continue; /* another tenant's prompt: as if absent */
            int lim = e->n_tok < n - pos ? e->n_tok : n - pos;
            int l = common_prefix(entry_toks(pc, c), toks + pos, lim);
            if (l == pc->n_block) {
                full = c;
                break;
            }
            if (l > best_len) {
                best = c;
                best_len = l;
            }
        }
        if (full >= 0) {
            pc->entries[full].tick = tick;
            blocks[nb++] = pc->entries[full].block;
            pos += pc->n_block;
            node = full;
            continue;
        }
        if (best >= 0) {
            pc->entries[best].tick = tick;
            blocks[nb++] = pc->entries[best].block;
            pos += best_len;
        }
        break;
    }
    *n_blocks = nb;
    return pos;
}

int prefix_lookup(struct prefix_cache *pc, const int32_t *toks, int n, int32_t *blocks,
                  int *n_blocks) {
    return prefix_lookup_part(pc, 0, toks, n, blocks, n_blocks);
}

int prefix_insert_part(struct prefix_cache *pc, uint32_t part, const int32_t *toks, int n,
                       int seq_id, struct strata_error *err) {
    if (n < 0 || n > kv_seq_len(pc->kv, seq_id))
        return strata_error_set(err, STRATA_E_RANGE, "prefix_insert: %d tokens, sequence holds %d",
                                n, kv_seq_len(pc->kv, seq_id));
    const uint64_t tick = ++pc->tick;
    int node = pc->cap;
    for (int i = 0; i * pc->n_block < n; i++) {
        const int32_t *t = toks + (size_t)i * pc->n_block;
        const int cnt = n - i * pc->n_block < pc->n_block ? n - i * pc->n_block : pc->n_block;
        int found = -1;
        for (int c = pc->entries[node].first_child; c >= 0; c = pc->entries[c].next_sibling)
            if (pc->entries[c].part == part && pc->entries[c].n_tok == cnt &&
                !memcmp(entry_toks(pc, c), t, cnt * sizeof *t)) {
                found = c;
                break;
            }
        if (found < 0) {
            const int blk = kv_seq_block(pc->kv, seq_id, i);
            if (blk < 0 || pc->entry_of_block[blk] >= 0 || pc->free_head < 0)
                break; /* held under other tokens (not written since attach), or full */
            if (kv_block_ref(pc->kv, blk, err) < 0)
                return err ? err->code : STRATA_E_INTERNAL;
            found = pc->free_head;
            struct pc_entry *e = &pc->entries[found];
            pc->free_head = e->next_sibling;
            *e = (struct pc_entry){.block = blk,
                                   .n_tok = cnt,
                                   .parent = node,
                                   .first_child = -1,
                                   .next_sibling = pc->entries[node].first_child,
                                   .part = part,
                                   .used = true};
            memcpy(pc->toks + (size_t)found * pc->n_block, t, cnt * sizeof *t);
            pc->entries[node].first_child = found;
            pc->entries[node].n_children++;
            pc->entry_of_block[blk] = found;
            pc->n_used++;
        }
        pc->entries[found].tick = tick;
        if (cnt < pc->n_block)
            break;
        node = found;
    }
    return 0;
}

int prefix_insert(struct prefix_cache *pc, const int32_t *toks, int n, int seq_id,
                  struct strata_error *err) {
    return prefix_insert_part(pc, 0, toks, n, seq_id, err);
}

static bool idle(const struct prefix_cache *pc, int e) {
    return pc->entries[e].used && kv_block_refs(pc->kv, pc->entries[e].block) == 1;
}

static void entry_remove(struct prefix_cache *pc, int e) {
    struct pc_entry *x = &pc->entries[e];
    struct pc_entry *p = &pc->entries[x->parent];
    for (int *pp = &p->first_child; *pp >= 0; pp = &pc->entries[*pp].next_sibling)
        if (*pp == e) {
            *pp = x->next_sibling;
            break;
        }
    p->n_children--;
    pc->entry_of_block[x->block] = -1;
    kv_block_unref(pc->kv, x->block);
    x->used = false;
    x->next_sibling = pc->free_head;
    pc->free_head = e;
    pc->n_used--;
}

int prefix_evict(struct prefix_cache *pc, int n) {
    int freed = 0;
    while (freed < n) {
        int victim = -1;
        for (int i = 0; i < pc->cap; i++)
            if (pc->entries[i].used && pc->entries[i].n_children == 0 && idle(pc, i) &&
                (victim < 0 || pc->entries[i].tick < pc->entries[victim].tick))
                victim = i;
        if (victim < 0)
            break;
        entry_remove(pc, victim);
        freed++;
    }
    return freed;
}

int prefix_clear_idle(struct prefix_cache *pc) {
    return prefix_evict(pc, INT_MAX);
}

int prefix_n_entries(const struct prefix_cache *pc) {
    return pc->n_used;
}

int prefix_n_idle(const struct prefix_cache *pc) {
    int n = 0;
    for (int i = 0; i < pc->cap; i++)
        n += idle(pc, i) ? 1 : 0;
    return n;
}
