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
 * GRAMMAR_CACHE states, keyed by the serialized thread set. And inside a
 * string body the "clean" tokens (whole characters, no quote, backslash or
 * control byte: ~94% of Llama 3's vocabulary) are allowed whatever the
 * grammar around, while the string has room for their code points: their
 * bits come from a list sorted by code point count, and only the other
 * tokens' trie is walked. Measured (bench/grammar-bench on Llama 3's
 * 128,256 tokens, release build, the 2-vCPU Xeon VM with AVX-512, shared
 * with other jobs): the first mask in a string body took ~10 ms with the
 * full walk and ~0.35 ms with this; over a 121-token document (10 runs,
 * fresh matchers) a mask took 29 us on average, p50 4 us, p99 0.25 ms,
 * against a decode step of 12-20 ms for a 1B model on this machine
 * (bench/README.md, bench/load) : under 2% at p99, ~0.2% on average.
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
    free(v->all.sorted);
    free(v->all.nodes);
    free(v->rest.sorted);
    free(v->rest.nodes);
    free(v->eog);
    free(v->clean);
    free(v->clean_off);
    free(v);
}

int grammar_vocab_n(const struct grammar_vocab *v) {
    return v ? v->n_vocab : 0;
}

/* Code points of a clean piece (see grammar-impl.h), or -1. */
static int clean_cp(const uint8_t *p, uint32_t n) {
    int cp = 0;
    for (uint32_t i = 0; i < n;) {
        uint8_t c = p[i];
        uint32_t need;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            if (c < 0x20 || c == '"' || c == '\\')
                return -1;
            need = 0;
        } else if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            lo = c == 0xE0 ? 0xA0 : 0x80;
            hi = c == 0xED ? 0x9F : 0xBF;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            lo = c == 0xF0 ? 0x90 : 0x80;
            hi = c == 0xF4 ? 0x8F : 0xBF;
        } else {
            return -1;
        }
        if (i + 1 + need > n)
            return -1;
        for (uint32_t k = 1; k <= need; k++) {
            uint8_t d = p[i + k];
            if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xBF))
                return -1;
        }
        i += 1 + need;
        cp++;
    }
    return cp;
}

/* Sorts ids[0..n) by piece and lays them out as a preorder trie (owns ids). */
static int build_trie(const struct grammar_vocab *v, int32_t *ids, int n, struct vtrie *t) {
    t->sorted = ids;
    t->n_sorted = n;
    struct piece_ref *refs = malloc(sizeof *refs * ((size_t)n + 1));
    size_t total = 0;
    for (int s = 0; s < n; s++)
        total += v->off[ids[s] + 1] - v->off[ids[s]];
    t->nodes = malloc(sizeof *t->nodes * (total + 1));
    if (!refs || !t->nodes) {
        free(refs);
        return STRATA_E_NOMEM;
    }
    for (int s = 0; s < n; s++) {
        int32_t id = ids[s];
        refs[s] = (struct piece_ref){v->bytes + v->off[id], v->off[id + 1] - v->off[id], id};
    }
    qsort(refs, (size_t)n, sizeof *refs, cmp_piece);
    for (int s = 0; s < n; s++)
        ids[s] = refs[s].id;
    free(refs);
    uint32_t stack[GRAMMAR_PIECE_MAX + 1]; /* node index per open depth */
    int sp = 0;
    const char *prev = NULL;
    uint32_t prev_len = 0;
    for (int s = 0; s < n; s++) {
        int32_t id = ids[s];
        const char *pc = v->bytes + v->off[id];
        uint32_t len = v->off[id + 1] - v->off[id];
        uint32_t lcp = 0;
        while (prev && lcp < len && lcp < prev_len && pc[lcp] == prev[lcp])
            lcp++;
        while (sp > (int)lcp) /* close the subtrees that do not continue */
            t->nodes[stack[--sp]].end = t->n_nodes;
        for (uint32_t d = lcp; d < len; d++) {
            struct vnode *nd = &t->nodes[t->n_nodes];
            *nd = (struct vnode){.byte = (uint8_t)pc[d], .depth = (uint16_t)(d + 1)};
            nd->tok_lo = nd->tok_hi = (uint32_t)s;
            stack[sp++] = t->n_nodes++;
        }
        /* equal pieces: the same node takes every id (sorted is contiguous) */
        struct vnode *last = &t->nodes[stack[sp - 1]];
        if (last->tok_hi == last->tok_lo)
            last->tok_lo = (uint32_t)s;
        last->tok_hi = (uint32_t)s + 1;
        if ((int)len > t->max_depth)
            t->max_depth = (int)len;
        prev = pc;
        prev_len = len;
    }
    while (sp > 0)
        t->nodes[stack[--sp]].end = t->n_nodes;
    return 0;
}

struct grammar_vocab *grammar_vocab_init(const struct grammar_vocab_params *p,
                                         struct strata_error *err) {
    if (!p || p->n_vocab < 1 || !p->pieces || !p->lens || !p->kinds) {
        strata_error_set(err, STRATA_E_INVALID, "grammar: vocabulary params required");
        return NULL;
    }
    int nv = p->n_vocab;
    struct grammar_vocab *v = calloc(1, sizeof *v);
    int32_t *all = NULL, *rest = NULL;
    int *cps = NULL;
    size_t total = 0;
    if (!v)
        goto nomem;
    v->n_vocab = nv;
    v->kind = malloc((size_t)nv);
    v->off = malloc(sizeof *v->off * ((size_t)nv + 1));
    v->eog = malloc(sizeof *v->eog * (size_t)nv);
    v->clean = malloc(sizeof *v->clean * (size_t)nv);
    all = malloc(sizeof *all * (size_t)nv);
    rest = malloc(sizeof *rest * (size_t)nv);
    cps = malloc(sizeof *cps * (size_t)nv);
    if (!v->kind || !v->off || !v->eog || !v->clean || !all || !rest || !cps)
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
    int n_all = 0, n_rest = 0;
    for (int i = 0; i < nv; i++) {
        cps[i] = -1;
        if (v->kind[i] == GRAMMAR_TOKEN_TEXT) {
            memcpy(v->bytes + v->off[i], p->pieces[i], p->lens[i]);
            all[n_all++] = i;
            cps[i] = clean_cp((const uint8_t *)p->pieces[i], p->lens[i]);
            if (cps[i] < 0)
                rest[n_rest++] = i;
            else if (cps[i] > v->max_clean_cp)
                v->max_clean_cp = cps[i];
        } else if (v->kind[i] == GRAMMAR_TOKEN_EOG) {
            v->eog[v->n_eog++] = i;
        }
    }
    /* clean tokens by code point count (a counting sort) */
    if (!(v->clean_off = calloc((size_t)v->max_clean_cp + 2, sizeof *v->clean_off)))
        goto nomem;
    for (int i = 0; i < nv; i++)
        if (cps[i] >= 0)
            v->clean_off[cps[i] + 1]++;
    for (int k = 0; k <= v->max_clean_cp; k++)
        v->clean_off[k + 1] += v->clean_off[k];
    uint32_t *cur = malloc(sizeof *cur * ((size_t)v->max_clean_cp + 1));
    if (!cur)
        goto nomem;
    memcpy(cur, v->clean_off, sizeof *cur * ((size_t)v->max_clean_cp + 1));
    for (int i = 0; i < nv; i++)
        if (cps[i] >= 0)
            v->clean[cur[cps[i]]++] = i, v->n_clean++;
    free(cur);
    free(cps);
    cps = NULL;
    int rc = build_trie(v, all, n_all, &v->all);
    all = NULL;
    if (rc == 0)
        rc = build_trie(v, rest, n_rest, &v->rest);
    rest = NULL;
    if (rc < 0)
        goto nomem;
    return v;
nomem:
    strata_error_set(err, STRATA_E_NOMEM, "grammar: out of memory");
fail:
    free(all);
    free(rest);
    free(cps);
    grammar_vocab_free(v);
    return NULL;
}

static void set_bit(uint32_t *bits, int32_t t) {
    bits[t >> 5] |= 1u << (t & 31);
}

/* The walk (see the top comment). Frames and thread lists of every level
 * live above the committed state in m->a and are dropped at the end. */
static int walk(struct grammar_matcher *m, const struct vtrie *v, uint32_t *bits) {
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
    /* a string body at a character boundary: clean tokens that fit */
    int64_t room = -1; /* code points, INT64_MAX: unbounded; -1: no such thread */
    bool only_str = true;
    for (int i = 0; i < m->n_th; i++) {
        int32_t t = m->a.th[i];
        if (t < 0)
            continue;
        const struct gframe *f = &m->a.f[t];
        const struct gnode *nd = &m->g->nodes[f->node];
        if (nd->type != GN_STR || STR_PHASE(f->aux) != 1 || STR_REM(f->aux) != 0) {
            only_str = false;
            continue;
        }
        int64_t r = nd->hi < 0 ? INT64_MAX : nd->hi - f->val;
        if (r > room)
            room = r;
    }
    /* exact only when the clean tokens past the room need no other thread:
     * every clean token fits, or no other thread could take one */
    if (room >= 0 && room < v->max_clean_cp && !only_str)
        room = -1;
    int count;
    if (room >= 0) {
        int k = room > v->max_clean_cp ? v->max_clean_cp : (int)room;
        uint32_t end = v->clean_off[k + 1];
        for (uint32_t i = 0; i < end; i++)
            set_bit(bits, v->clean[i]);
        count = walk(m, &v->rest, bits);
        if (count >= 0)
            count += (int)end;
    } else {
        count = walk(m, &v->all, bits);
    }
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
