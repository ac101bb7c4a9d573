/* engine/grammar/grammar-match.c: the byte matcher: expansion of frames to
 * terminals, the JSON terminals' byte steps, accept, can_end / must_end
 * (see grammar-impl.h for the execution model). */
#include <stdlib.h>
#include <string.h>

#include "engine/core/buf.h"
#include "engine/grammar/grammar-impl.h"

/* ---- frames and threads ------------------------------------------------------ */

#define NF_FAIL (-2)

static int32_t nf(struct garena *a, int32_t node, uint32_t aux, int64_t val, int32_t parent) {
    int32_t depth = parent < 0 ? 1 : a->f[parent].depth + 1;
    if (depth > GRAMMAR_MAX_DEPTH)
        return NF_FAIL;
    if (a->n >= a->cap && strata_grow((void **)&a->f, &a->cap, a->n + 1, sizeof *a->f) < 0) {
        a->oom = true;
        return NF_FAIL;
    }
    a->f[a->n] = (struct gframe){node, aux, val, parent, depth};
    return (int32_t)a->n++;
}

static bool same_stack(const struct garena *a, int32_t x, int32_t y) {
    while (x != y) {
        if (x < 0 || y < 0)
            return false;
        const struct gframe *fx = &a->f[x], *fy = &a->f[y];
        if (fx->node != fy->node || fx->aux != fy->aux || fx->val != fy->val ||
            fx->depth != fy->depth)
            return false;
        x = fx->parent;
        y = fy->parent;
    }
    return true;
}

/* Adds a thread to the list that starts at base, unless it is there. */
static void add_thread(struct garena *a, size_t base, int32_t t) {
    size_t cnt = a->n_th - base;
    if (cnt >= GRAMMAR_MAX_THREADS)
        return;
    for (size_t i = base; i < a->n_th && cnt < GRAMMAR_DEDUP; i++)
        if (same_stack(a, a->th[i], t))
            return;
    if (a->n_th >= a->cap_th &&
        strata_grow((void **)&a->th, &a->cap_th, a->n_th + 1, sizeof *a->th) < 0) {
        a->oom = true;
        return;
    }
    a->th[a->n_th++] = t;
}

/* ---- terminals: state (aux, val) --------------------------------------------- */

/* WS aux: 0 none yet, 1 one space (done), 2 + k newline and k indent bytes */
#define WS_INDENT 16
/* NUM aux: phase; val: digits of the current part */
#define NUM_DIGITS 18
#define NUM_EXP_DIGITS 2 /* 18 digits e99 stays finite as a double: 1e117 < 1.8e308 */
/* INT aux: bit 0 negative, bits 8.. digits; val: magnitude */

static int64_t pow10i(int k) {
    int64_t p = 1;
    while (k-- > 0)
        p *= 10;
    return p;
}

static bool meets(int64_t a, int64_t b, bool neg, int64_t lo, int64_t hi) {
    int64_t x = neg ? -b : a, y = neg ? -a : b;
    return x <= hi && y >= lo;
}

static void int_status(const struct gnode *nd, uint32_t aux, int64_t val, bool *more, bool *acc) {
    bool neg = aux & 1u;
    int digits = (int)(aux >> 8);
    *acc = digits >= 1 && meets(val, val, neg, nd->ilo, nd->ihi);
    *more = false;
    if (digits == 0) {
        *more = meets(neg ? 1 : 0, GRAMMAR_INT_LIM, neg, nd->ilo, nd->ihi) ||
                (!neg && meets(1, GRAMMAR_INT_LIM, true, nd->ilo, nd->ihi));
        return;
    }
    if (val == 0) /* "0" or "-0...": no more digits */
        return;
    for (int k = 1; digits + k <= NUM_DIGITS && !*more; k++) {
        int64_t p = pow10i(k), a = val * p;
        *more = meets(a, a + p - 1, neg, nd->ilo, nd->ihi);
    }
}

static bool int_step(const struct gnode *nd, uint32_t *aux, int64_t *val, uint8_t c) {
    bool neg = *aux & 1u;
    int digits = (int)(*aux >> 8);
    if (c == '-') {
        if (digits || neg || !meets(1, GRAMMAR_INT_LIM, true, nd->ilo, nd->ihi))
            return false;
        *aux |= 1u;
        return true;
    }
    if (c < '0' || c > '9' || digits >= NUM_DIGITS || (digits >= 1 && *val == 0) ||
        (neg && digits == 0 && c == '0'))
        return false;
    int64_t v = *val * 10 + (c - '0');
    uint32_t a2 = (*aux & 1u) | ((uint32_t)(digits + 1) << 8);
    bool more, acc;
    int_status(nd, a2, v, &more, &acc);
    if (!more && !acc)
        return false;
    *aux = a2;
    *val = v;
    return true;
}

static bool num_step(uint32_t *aux, int64_t *val, uint8_t c) {
    bool dig = c >= '0' && c <= '9', e = c == 'e' || c == 'E';
    switch (*aux) {
    case 0:
        if (c == '-')
            return *aux = 1, true;
        /* fallthrough */
    case 1:
        if (c == '0')
            return *aux = 2, *val = 1, true;
        if (dig)
            return *aux = 3, *val = 1, true;
        return false;
    case 2:
    case 3:
        if (*aux == 3 && dig && *val < NUM_DIGITS)
            return ++*val, true;
        if (c == '.')
            return *aux = 4, *val = 0, true;
        if (e)
            return *aux = 6, *val = 0, true;
        return false;
    case 4:
        if (dig)
            return *aux = 5, *val = 1, true;
        return false;
    case 5:
        if (dig && *val < NUM_DIGITS)
            return ++*val, true;
        if (e)
            return *aux = 6, *val = 0, true;
        return false;
    case 6:
        if (c == '+' || c == '-')
            return *aux = 7, true;
        /* fallthrough */
    case 7:
        if (dig)
            return *aux = 8, *val = 1, true;
        return false;
    case 8:
        if (dig && *val < NUM_EXP_DIGITS)
            return ++*val, true;
        return false;
    }
    return false;
}

static bool hexdig(uint8_t c, int *v) {
    if (c >= '0' && c <= '9')
        *v = c - '0';
    else if (c >= 'a' && c <= 'f')
        *v = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
        *v = c - 'A' + 10;
    else
        return false;
    return true;
}

/* continuation byte ranges by class: 0 80-BF, 1 A0-BF, 2 80-9F, 3 90-BF, 4 80-8F */
static const uint8_t cont_lo[5] = {0x80, 0xA0, 0x80, 0x90, 0x80};
static const uint8_t cont_hi[5] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};

static bool str_step(const struct gnode *nd, uint32_t *aux, int64_t *val, uint8_t c) {
    uint32_t a = *aux, ph = STR_PHASE(a);
    bool room = nd->hi < 0 || *val < nd->hi;
    /* unbounded strings count only up to minLength: equal states share a mask */
    int64_t next = nd->hi < 0 && *val >= nd->lo ? *val : *val + 1;
    int hv;
    switch (ph) {
    case 0:
        if (c != '"')
            return false;
        *aux = STR_MAKE(1u, 0u, 0u, 0u);
        return true;
    case 1:
        if (STR_REM(a)) {
            uint32_t cls = STR_CLS(a);
            if (c < cont_lo[cls] || c > cont_hi[cls])
                return false;
            *aux = STR_MAKE(1u, STR_REM(a) - 1, 0u, 0u);
            return true;
        }
        if (c == '"') {
            if (*val < nd->lo)
                return false;
            *aux = 7;
            return true;
        }
        if (!room || c < 0x20)
            return false;
        if (c == '\\') {
            *aux = 2;
        } else if (c < 0x80) {
            /* stays in phase 1 */
        } else if (c >= 0xC2 && c <= 0xDF) {
            *aux = STR_MAKE(1u, 1u, 0u, 0u);
        } else if (c >= 0xE0 && c <= 0xEF) {
            *aux = STR_MAKE(1u, 2u, c == 0xE0 ? 1u : c == 0xED ? 2u : 0u, 0u);
        } else if (c >= 0xF0 && c <= 0xF4) {
            *aux = STR_MAKE(1u, 3u, c == 0xF0 ? 3u : c == 0xF4 ? 4u : 0u, 0u);
        } else {
            return false;
        }
        *val = next;
        return true;
    case 2:
        if (c == 'u') {
            *aux = 3 | STR_ZERO;
            return true;
        }
        if (!strchr("\"\\/bfnrt", c) || c == 0)
            return false;
        *aux = 1;
        return true;
    case 3:
    case 4:
    case 5:
    case 6:
        if (!hexdig(c, &hv))
            return false;
        if (ph == 4 && (a & STR_SURR) && hv >= 8) /* D800..DFFF: a lone surrogate */
            return false;
        uint32_t fl = (a & STR_ZERO) && hv == 0 ? STR_ZERO : 0u;
        if (ph == 3 && hv == 0xD)
            fl |= STR_SURR;
        if (ph == 6) {
            if (fl & STR_ZERO) /* \u0000 */
                return false;
            *aux = 1;
        } else {
            *aux = (ph + 1) | fl;
        }
        return true;
    }
    return false;
}

static void term_status(const struct gnode *nd, uint32_t aux, int64_t val, bool *more, bool *acc) {
    switch (nd->type) {
    case GN_WS:
        *acc = true;
        *more = aux == 0 || (aux >= 2 && aux - 2 < WS_INDENT);
        return;
    case GN_NUM:
        *acc = aux == 2 || aux == 3 || aux == 5 || aux == 8;
        *more = aux != 8 || val < NUM_EXP_DIGITS;
        return;
    case GN_INT:
        int_status(nd, aux, val, more, acc);
        return;
    case GN_STR:
        *acc = STR_PHASE(aux) == 7;
        *more = !*acc;
        return;
    default:
        *more = *acc = false;
    }
}

static bool term_step(const struct gnode *nd, uint32_t *aux, int64_t *val, uint8_t c) {
    switch (nd->type) {
    case GN_WS:
        if (*aux == 0 && (c == ' ' || c == '\n'))
            return *aux = c == ' ' ? 1 : 2, true;
        if (*aux >= 2 && *aux - 2 < WS_INDENT && (c == ' ' || c == '\t'))
            return ++*aux, true;
        return false;
    case GN_NUM:
        return num_step(aux, val, c);
    case GN_INT:
        return int_step(nd, aux, val, c);
    case GN_STR:
        return str_step(nd, aux, val, c);
    default:
        return false;
    }
}

/* ---- expansion ------------------------------------------------------------------ */

/* Expands frame fi (or ACCEPT) down to terminals, adding threads at base. */
static void expand(const struct grammar *g, struct garena *a, size_t base, int32_t fi) {
    if (fi == GRAMMAR_ACCEPT) {
        add_thread(a, base, GRAMMAR_ACCEPT);
        return;
    }
    if (fi < 0)
        return;
    struct gframe fr = a->f[fi];
    const struct gnode *nd = &g->nodes[fr.node];
    switch (nd->type) {
    case GN_LIT:
        if (nd->n == 0 || fr.aux >= nd->n)
            expand(g, a, base, fr.parent);
        else
            add_thread(a, base, fi);
        return;
    case GN_SEQ: {
        if (fr.aux >= nd->n) {
            expand(g, a, base, fr.parent);
            return;
        }
        int32_t p = fr.parent;
        if (fr.aux + 1 < nd->n && (p = nf(a, fr.node, fr.aux + 1, 0, fr.parent)) == NF_FAIL)
            return;
        int32_t c = nf(a, g->kids[nd->kid_off + fr.aux], 0, 0, p);
        if (c != NF_FAIL)
            expand(g, a, base, c);
        return;
    }
    case GN_ALT:
        for (uint32_t k = 0; k < nd->n; k++) {
            int32_t c = nf(a, g->kids[nd->kid_off + k], 0, 0, fr.parent);
            if (c != NF_FAIL)
                expand(g, a, base, c);
        }
        return;
    case GN_REP: {
        int64_t cnt = fr.aux;
        if (nd->hi < 0 || cnt < nd->hi) {
            uint32_t next = (uint32_t)(nd->hi < 0 && cnt >= nd->lo ? cnt : cnt + 1);
            int32_t p = nf(a, fr.node, next, 0, fr.parent);
            int32_t c = p == NF_FAIL ? NF_FAIL : nf(a, g->kids[nd->kid_off], 0, 0, p);
            if (c != NF_FAIL)
                expand(g, a, base, c);
        }
        if (cnt >= nd->lo)
            expand(g, a, base, fr.parent);
        return;
    }
    default: {
        bool more, acc;
        term_status(nd, fr.aux, fr.val, &more, &acc);
        if (more)
            add_thread(a, base, fi);
        if (acc)
            expand(g, a, base, fr.parent);
        return;
    }
    }
}

int gm_start(const struct grammar *g, struct garena *a) {
    size_t base = a->n_th;
    int32_t r = nf(a, g->root, 0, 0, -1);
    if (r != NF_FAIL)
        expand(g, a, base, r);
    return (int)(a->n_th - base);
}

int gm_advance(const struct grammar *g, struct garena *a, size_t in_off, int n, uint8_t c) {
    size_t base = a->n_th;
    for (int i = 0; i < n; i++) {
        int32_t t = a->th[in_off + (size_t)i];
        if (t < 0)
            continue;
        struct gframe fr = a->f[t];
        const struct gnode *nd = &g->nodes[fr.node];
        if (nd->type == GN_LIT) {
            if ((uint8_t)g->lits[nd->lit_off + fr.aux] != c)
                continue;
            if (fr.aux + 1 >= nd->n) {
                expand(g, a, base, fr.parent);
            } else {
                int32_t f2 = nf(a, fr.node, fr.aux + 1, 0, fr.parent);
                if (f2 != NF_FAIL)
                    add_thread(a, base, f2);
            }
            continue;
        }
        uint32_t aux = fr.aux;
        int64_t val = fr.val;
        if (!term_step(nd, &aux, &val, c))
            continue;
        bool more, acc;
        term_status(nd, aux, val, &more, &acc);
        if (more) {
            int32_t f2 = nf(a, fr.node, aux, val, fr.parent);
            if (f2 != NF_FAIL)
                add_thread(a, base, f2);
        }
        if (acc)
            expand(g, a, base, fr.parent);
    }
    return (int)(a->n_th - base);
}

/* ---- the matcher ------------------------------------------------------------------ */

/* Copies the threads at a->th[off..off+n) and their frames to the front of
 * the arena (the committed state), dropping everything else. */
static int compact(struct grammar_matcher *m, size_t off, int n) {
    struct garena *a = &m->a;
    struct gframe *nfr = malloc(sizeof *nfr * (a->n + 1));
    int32_t *map = malloc(sizeof *map * (a->n + 1));
    int32_t *th = malloc(sizeof *th * ((size_t)n + 1));
    int32_t chain[GRAMMAR_MAX_DEPTH + 1];
    if (!nfr || !map || !th) {
        free(nfr);
        free(map);
        free(th);
        return STRATA_E_NOMEM;
    }
    for (size_t i = 0; i < a->n; i++)
        map[i] = -1;
    size_t nn = 0;
    for (int i = 0; i < n; i++) {
        int32_t t = a->th[off + (size_t)i];
        int k = 0;
        for (int32_t x = t; x >= 0 && map[x] < 0 && k <= GRAMMAR_MAX_DEPTH; x = a->f[x].parent)
            chain[k++] = x;
        while (k-- > 0) {
            struct gframe f = a->f[chain[k]];
            f.parent = f.parent < 0 ? f.parent : map[f.parent];
            map[chain[k]] = (int32_t)nn;
            nfr[nn++] = f;
        }
        th[i] = t < 0 ? t : map[t];
    }
    free(a->f);
    a->f = nfr;
    a->n = nn;
    a->cap = a->n > 0 ? a->n : 1;
    for (int i = 0; i < n; i++)
        a->th[i] = th[i];
    a->n_th = (size_t)n;
    m->n_th = n;
    free(th);
    free(map);
    return 0;
}

int gm_rekey(struct grammar_matcher *m) {
    m->key_len = 0;
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < m->n_th; i++) {
        for (int32_t x = m->a.th[i];; x = m->a.f[x].parent) {
            int64_t rec[2] = {-1, 0};
            if (x >= 0) {
                const struct gframe *f = &m->a.f[x];
                rec[0] = ((int64_t)f->node << 32) | f->aux;
                rec[1] = f->val;
            }
            if (strata_grow((void **)&m->key, &m->key_cap, m->key_len + sizeof rec, 1) < 0)
                return STRATA_E_NOMEM;
            memcpy(m->key + m->key_len, rec, sizeof rec);
            m->key_len += sizeof rec;
            for (size_t k = 0; k < sizeof rec; k++)
                h = (h ^ ((const uint8_t *)rec)[k]) * 1099511628211ull;
            if (x < 0)
                break;
        }
    }
    m->hash = h;
    return 0;
}

struct grammar_matcher *grammar_matcher_init(const struct grammar *g, const struct grammar_vocab *v,
                                             struct strata_error *err) {
    if (!g) {
        strata_error_set(err, STRATA_E_INVALID, "grammar: matcher needs a grammar");
        return NULL;
    }
    struct grammar_matcher *m = calloc(1, sizeof *m);
    if (!m)
        goto nomem;
    m->g = g;
    m->v = v;
    if (v) {
        size_t d = (size_t)v->all.max_depth + 2;
        m->lv_off = calloc(d, sizeof *m->lv_off);
        m->lv_f = calloc(d, sizeof *m->lv_f);
        m->lv_t = calloc(d, sizeof *m->lv_t);
        m->lv_n = calloc(d, sizeof *m->lv_n);
        if (!m->lv_off || !m->lv_f || !m->lv_t || !m->lv_n)
            goto nomem;
    }
    grammar_matcher_reset(m);
    if (m->a.oom)
        goto nomem;
    return m;
nomem:
    strata_error_set(err, STRATA_E_NOMEM, "grammar: out of memory");
    grammar_matcher_free(m);
    return NULL;
}

void grammar_matcher_reset(struct grammar_matcher *m) {
    m->a.n = m->a.n_th = 0;
    m->ended = false;
    int n = gm_start(m->g, &m->a);
    if (m->a.oom || compact(m, 0, n) < 0 || gm_rekey(m) < 0)
        m->a.oom = true;
}

void grammar_matcher_free(struct grammar_matcher *m) {
    if (!m)
        return;
    for (int i = 0; i < GRAMMAR_CACHE; i++) {
        free(m->cache[i].key);
        free(m->cache[i].bits);
    }
    free(m->key);
    free(m->a.f);
    free(m->a.th);
    free(m->lv_off);
    free(m->lv_f);
    free(m->lv_t);
    free(m->lv_n);
    free(m);
}

int grammar_matcher_accept_bytes(struct grammar_matcher *m, const char *bytes, size_t len,
                                 struct strata_error *err) {
    if (m->ended)
        return strata_error_set(err, STRATA_E_INVALID, "grammar: the output already ended");
    size_t f0 = m->a.n, t0 = m->a.n_th;
    size_t off = 0;
    int n = m->n_th;
    for (size_t i = 0; i < len && n > 0; i++) {
        size_t o2 = m->a.n_th;
        n = gm_advance(m->g, &m->a, off, n, (uint8_t)bytes[i]);
        off = o2;
    }
    if (m->a.oom || n <= 0) {
        bool oom = m->a.oom;
        m->a.oom = false;
        m->a.n = f0;
        m->a.n_th = t0;
        return oom ? strata_error_set(err, STRATA_E_NOMEM, "grammar: out of memory")
                   : strata_error_set(err, STRATA_E_INVALID,
                                      "grammar: the bytes do not continue the grammar");
    }
    if (len == 0)
        return 0;
    if (compact(m, off, n) < 0 || gm_rekey(m) < 0) {
        m->a.oom = true;
        return strata_error_set(err, STRATA_E_NOMEM, "grammar: out of memory");
    }
    return 0;
}

bool grammar_matcher_can_end(const struct grammar_matcher *m) {
    if (m->ended)
        return true;
    for (int i = 0; i < m->n_th; i++)
        if (m->a.th[i] == GRAMMAR_ACCEPT)
            return true;
    return false;
}

bool grammar_matcher_must_end(const struct grammar_matcher *m) {
    return m->ended || (m->n_th == 1 && m->a.th[0] == GRAMMAR_ACCEPT);
}

int grammar_matcher_accept(struct grammar_matcher *m, int32_t token, struct strata_error *err) {
    const struct grammar_vocab *v = m->v;
    if (!v || token < 0 || token >= v->n_vocab)
        return strata_error_set(err, STRATA_E_RANGE, "grammar: token %d outside the vocabulary",
                                (int)token);
    if (v->kind[token] == GRAMMAR_TOKEN_EOG) {
        if (!grammar_matcher_can_end(m))
            return strata_error_set(err, STRATA_E_INVALID,
                                    "grammar: end of generation before the output is complete");
        m->ended = true;
        return 0;
    }
    if (v->kind[token] != GRAMMAR_TOKEN_TEXT)
        return strata_error_set(err, STRATA_E_INVALID,
                                "grammar: token %d is never allowed in constrained output",
                                (int)token);
    return grammar_matcher_accept_bytes(m, v->bytes + v->off[token],
                                        v->off[token + 1] - v->off[token], err);
}

int grammar_match(const struct grammar *g, const char *bytes, size_t len,
                  struct strata_error *err) {
    struct grammar_matcher *m = grammar_matcher_init(g, NULL, err);
    if (!m)
        return err ? err->code : STRATA_E_NOMEM;
    int rc = grammar_matcher_accept_bytes(m, bytes, len, err);
    if (rc == 0)
        rc = grammar_matcher_can_end(m) ? 1 : 0;
    grammar_matcher_free(m);
    return rc;
}
