/* engine/grammar/grammar-mask.c: the vocabulary trie and the token mask.
 *
 * Design: the TEXT tokens' pieces are sorted and laid out as a byte trie in
 * preorder (each node: its byte, depth, the end of its subtree, the tokens
 * that end there). A mask walks the trie once, keeping per depth the thread
 * set after that many bytes; a byte that kills every thread skips the whole
 * subtree, so the walk visits only the prefixes the grammar allows. Inside a
 * free JSON string nearly every token is allowed and the walk visits most of
 * the trie; such states recur token after token (unbounded strings count
 * length only up to minLength), so each matcher keeps the masks of its last
 * GRAMMAR_CACHE states, keyed by the serialized thread set. Measured figures
 * are in bench/README.md (grammar-bench).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar-impl.h"

struct piece_ref {
    const char *p;
    uint32_t len;
    int32_t id;
};

static int cmp_piece(const void *x, const void *y) {
    const struct piece_ref *a = x, *b = y;
    int c = memcmp(a->p, b->p, a->len < b->len ? a->len : b->len);
    if (c)
        return c;
    if (a->len != b->len)
        return a->len < b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

void grammar_vocab_free(struct grammar_vocab *v) {
    if (!v)
        return;
    free(v->kind);
    free(v->off);
    free(v->bytes);
    free(v->sorted);
    free(v->eog);
    free(v->nodes);
    free(v);
}

int grammar_vocab_n(const struct grammar_vocab *v) {
    return v ? v->n_vocab : 0;
}

struct grammar_vocab *grammar_vocab_init(const struct grammar_vocab_params *p,
                                         struct strata_error *err) {
    if (!p || p->n_vocab < 1 || !p->pieces || !p->lens || !p->kinds) {
        strata_error_set(err, STRATA_E_INVALID, "grammar: vocabulary params required");
        return NULL;
    }
    int nv = p->n_vocab;
    struct grammar_vocab *v = calloc(1, sizeof *v);
    size_t total = 0;
    if (!v)
        goto nomem;
    v->n_vocab = nv;
    v->kind = malloc((size_t)nv);
    v->off = malloc(sizeof *v->off * ((size_t)nv + 1));
    v->sorted = malloc(sizeof *v->sorted * (size_t)nv);
    v->eog = malloc(sizeof *v->eog * (size_t)nv);
    if (!v->kind || !v->off || !v->sorted || !v->eog)
        goto nomem;
    for (int i = 0; i < nv; i++) {
        uint8_t k = (uint8_t)p->kinds[i];
        if (k == GRAMMAR_TOKEN_TEXT &&
            (p->lens[i] == 0 || p->lens[i] > GRAMMAR_PIECE_MAX || !p->pieces[i]))
            k = GRAMMAR_TOKEN_NEVER;
        if (k > GRAMMAR_TOKEN_NEVER)
            k = GRAMMAR_TOKEN_NEVER;
        v->kind[i] = k;
        v->off[i] = (uint32_t)total;
        if (k == GRAMMAR_TOKEN_TEXT)
            total += p->lens[i];
        if (total > UINT32_MAX - GRAMMAR_PIECE_MAX) {
            strata_error_set(err, STRATA_E_LIMIT, "grammar: vocabulary pieces too large");
            goto fail;
        }
    }
    v->off[nv] = (uint32_t)total;
    if (!(v->bytes = malloc(total + 1)))
        goto nomem;
    for (int i = 0; i < nv; i++) {
        if (v->kind[i] == GRAMMAR_TOKEN_TEXT) {
            memcpy(v->bytes + v->off[i], p->pieces[i], p->lens[i]);
            v->sorted[v->n_sorted++] = i;
        } else if (v->kind[i] == GRAMMAR_TOKEN_EOG) {
            v->eog[v->n_eog++] = i;
        }
    }
    struct piece_ref *refs = malloc(sizeof *refs * ((size_t)v->n_sorted + 1));
    if (!refs)
        goto nomem;
    for (int s = 0; s < v->n_sorted; s++) {
        int32_t id = v->sorted[s];
        refs[s] = (struct piece_ref){v->bytes + v->off[id], v->off[id + 1] - v->off[id], id};
    }
    qsort(refs, (size_t)v->n_sorted, sizeof *refs, cmp_piece);
    for (int s = 0; s < v->n_sorted; s++)
        v->sorted[s] = refs[s].id;
    free(refs);
    /* trie nodes: at most one per byte of all pieces */
    if (!(v->nodes = malloc(sizeof *v->nodes * (total + 1))))
        goto nomem;
    uint32_t stack[GRAMMAR_PIECE_MAX + 1]; /* node index per open depth */
    int sp = 0;
    const char *prev = NULL;
    uint32_t prev_len = 0;
    for (int s = 0; s < v->n_sorted; s++) {
        int32_t id = v->sorted[s];
        const char *pc = v->bytes + v->off[id];
        uint32_t len = v->off[id + 1] - v->off[id];
        uint32_t lcp = 0;
        while (prev && lcp < len && lcp < prev_len && pc[lcp] == prev[lcp])
            lcp++;
        while (sp > (int)lcp) /* close the subtrees that do not continue */
            v->nodes[stack[--sp]].end = v->n_nodes;
        for (uint32_t d = lcp; d < len; d++) {
            struct vnode *nd = &v->nodes[v->n_nodes];
            *nd = (struct vnode){.byte = (uint8_t)pc[d], .depth = (uint16_t)(d + 1)};
            nd->tok_lo = nd->tok_hi = (uint32_t)s;
            stack[sp++] = v->n_nodes++;
        }
        /* equal pieces: the same node takes every id (sorted is contiguous) */
        struct vnode *last = &v->nodes[stack[sp - 1]];
        if (last->tok_hi == last->tok_lo)
            last->tok_lo = (uint32_t)s;
        last->tok_hi = (uint32_t)s + 1;
        if ((int)len > v->max_depth)
            v->max_depth = (int)len;
        prev = pc;
        prev_len = len;
    }
    while (sp > 0)
        v->nodes[stack[--sp]].end = v->n_nodes;
    return v;
nomem:
    strata_error_set(err, STRATA_E_NOMEM, "grammar: out of memory");
fail:
    grammar_vocab_free(v);
    return NULL;
}

static void set_bit(uint32_t *bits, int32_t t) {
    bits[t >> 5] |= 1u << (t & 31);
}

/* The walk (see the top comment). Frames and thread lists of every level
 * live above the committed state in m->a and are dropped at the end. */
static int walk(struct grammar_matcher *m, uint32_t *bits) {
    const struct grammar_vocab *v = m->v;
    struct garena *a = &m->a;
    size_t f0 = a->n, t0 = a->n_th;
    int count = 0;
    m->lv_off[0] = 0;
    m->lv_n[0] = m->n_th;
    m->lv_f[0] = f0;
    m->lv_t[0] = t0;
    for (uint32_t i = 0; i < v->n_nodes;) {
        const struct vnode *nd = &v->nodes[i];
        int d = nd->depth;
        a->n = m->lv_f[d - 1];
        a->n_th = m->lv_t[d - 1];
        size_t off = a->n_th;
        int n = gm_advance(m->g, a, m->lv_off[d - 1], m->lv_n[d - 1], nd->byte);
        if (a->oom)
            break;
        if (n == 0) {
            i = nd->end;
            continue;
        }
        for (uint32_t k = nd->tok_lo; k < nd->tok_hi; k++)
            set_bit(bits, v->sorted[k]);
        count += (int)(nd->tok_hi - nd->tok_lo);
        m->lv_off[d] = off;
        m->lv_n[d] = n;
        m->lv_f[d] = a->n;
        m->lv_t[d] = a->n_th;
        i++;
    }
    a->n = f0;
    a->n_th = t0;
    if (a->oom) {
        a->oom = false;
        return STRATA_E_NOMEM;
    }
    return count;
}

int grammar_matcher_mask(struct grammar_matcher *m, uint32_t *bits, struct strata_error *err) {
    const struct grammar_vocab *v = m->v;
    if (!v)
        return strata_error_set(err, STRATA_E_INVALID, "grammar: matcher has no vocabulary");
    size_t words = ((size_t)v->n_vocab + 31) / 32;
    memset(bits, 0, words * sizeof *bits);
    if (m->ended)
        return 0;
    m->tick++;
    struct gcache_entry *slot = &m->cache[0];
    for (int i = 0; i < GRAMMAR_CACHE; i++) {
        struct gcache_entry *e = &m->cache[i];
        if (e->bits && e->hash == m->hash && e->key_len == m->key_len &&
            memcmp(e->key, m->key, m->key_len) == 0) {
            e->used = m->tick;
            memcpy(bits, e->bits, words * sizeof *bits);
            return e->count;
        }
        if (e->used < slot->used)
            slot = e;
    }
    int count = walk(m, bits);
    if (count < 0)
        return strata_error_set(err, STRATA_E_NOMEM, "grammar: out of memory for the mask");
    if (grammar_matcher_can_end(m)) {
        for (int i = 0; i < v->n_eog; i++)
            set_bit(bits, v->eog[i]);
        count += v->n_eog;
    }
    /* remember it (a failed allocation only costs the cache) */
    uint8_t *key = malloc(m->key_len ? m->key_len : 1);
    uint32_t *cb = slot->bits ? slot->bits : malloc(words * sizeof *cb);
    if (key && cb) {
        free(slot->key);
        memcpy(key, m->key, m->key_len);
        memcpy(cb, bits, words * sizeof *cb);
        *slot = (struct gcache_entry){.key = key,
                                      .key_len = m->key_len,
                                      .hash = m->hash,
                                      .bits = cb,
                                      .count = count,
                                      .used = m->tick};
    } else {
        free(key);
        if (cb != slot->bits)
            free(cb);
    }
    return count;
}
