/* engine/grammar/grammar.c: the builder and the frozen grammar (see
 * grammar.h). Build copies the nodes reachable from the root, resolves
 * forward references and checks that no path loops without a byte. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/buf.h"
#include "engine/grammar/grammar-impl.h"

#define GB_MAX_NODES (1 << 20) /* a 4096-subschema schema makes ~60k */

struct grammar_builder *grammar_builder_init(struct strata_error *err) {
    struct grammar_builder *b = calloc(1, sizeof *b);
    if (!b) {
        strata_error_set(err, STRATA_E_NOMEM, "grammar: out of memory");
        return NULL;
    }
    b->json_value = b->json_object = b->ws = -1;
    return b;
}

void grammar_builder_free(struct grammar_builder *b) {
    if (!b)
        return;
    free(b->nodes);
    free(b->kids);
    free(b->lits);
    free(b);
}

int gb_node(struct grammar_builder *b, const struct gnode *nd, struct strata_error *err) {
    if (!b)
        return strata_error_set(err, STRATA_E_INVALID, "grammar: no builder");
    if (b->n_nodes >= GB_MAX_NODES)
        return strata_error_set(err, STRATA_E_LIMIT, "grammar: more than %d nodes", GB_MAX_NODES);
    if (strata_grow((void **)&b->nodes, &b->cap_nodes, b->n_nodes + 1, sizeof *b->nodes) < 0)
        return strata_error_set(err, STRATA_E_NOMEM, "grammar: out of memory");
    b->nodes[b->n_nodes] = *nd;
    return (int)b->n_nodes++;
}

static int check_ids(struct grammar_builder *b, const int *nodes, int n, struct strata_error *err) {
    if (!b)
        return strata_error_set(err, STRATA_E_INVALID, "grammar: no builder");
    if (n < 0 || (n > 0 && !nodes))
        return strata_error_set(err, STRATA_E_INVALID, "grammar: bad node list");
    for (int i = 0; i < n; i++)
        if (nodes[i] < 0 || (size_t)nodes[i] >= b->n_nodes)
            return strata_error_set(err, STRATA_E_INVALID, "grammar: node id %d does not exist",
                                    nodes[i]);
    return 0;
}

static int list_node(struct grammar_builder *b, int type, const int *nodes, int n,
                     struct strata_error *err) {
    int rc = check_ids(b, nodes, n, err);
    if (rc < 0)
        return rc;
    if (strata_grow((void **)&b->kids, &b->cap_kids, b->n_kids + (size_t)n + 1, sizeof *b->kids) <
        0)
        return strata_error_set(err, STRATA_E_NOMEM, "grammar: out of memory");
    struct gnode nd = {.type = (uint8_t)type, .n = (uint32_t)n, .kid_off = (uint32_t)b->n_kids};
    for (int i = 0; i < n; i++)
        b->kids[b->n_kids + (size_t)i] = nodes[i];
    rc = gb_node(b, &nd, err);
    if (rc >= 0)
        b->n_kids += (size_t)n;
    return rc;
}

int grammar_lit(struct grammar_builder *b, const char *text, size_t len, struct strata_error *err) {
    if (!b || (len && !text))
        return strata_error_set(err, STRATA_E_INVALID, "grammar: bad literal");
    if (len > (1u << 24))
        return strata_error_set(err, STRATA_E_LIMIT, "grammar: literal of %zu bytes", len);
    if (strata_grow((void **)&b->lits, &b->cap_lits, b->n_lits + len + 1, 1) < 0)
        return strata_error_set(err, STRATA_E_NOMEM, "grammar: out of memory");
    struct gnode nd = {.type = GN_LIT, .n = (uint32_t)len, .lit_off = (uint32_t)b->n_lits};
    if (len)
        memcpy(b->lits + b->n_lits, text, len);
    int rc = gb_node(b, &nd, err);
    if (rc >= 0)
        b->n_lits += len;
    return rc;
}

int gb_lit_str(struct grammar_builder *b, const char *s, struct strata_error *err) {
    return grammar_lit(b, s, strlen(s), err);
}

int grammar_seq(struct grammar_builder *b, const int *nodes, int n, struct strata_error *err) {
    return list_node(b, GN_SEQ, nodes, n, err);
}

int grammar_alt(struct grammar_builder *b, const int *nodes, int n, struct strata_error *err) {
    if (n < 1)
        return strata_error_set(err, STRATA_E_INVALID, "grammar: alt of no nodes");
    return list_node(b, GN_ALT, nodes, n, err);
}

int grammar_repeat(struct grammar_builder *b, int node, int min, int max,
                   struct strata_error *err) {
    if (min < 0 || (max >= 0 && max < min) || max < -1)
        return strata_error_set(err, STRATA_E_INVALID, "grammar: repeat %d..%d", min, max);
    int rc = list_node(b, GN_REP, &node, 1, err);
    if (rc >= 0) {
        b->nodes[rc].lo = min;
        b->nodes[rc].hi = max;
    }
    return rc;
}

int gb_seq(struct grammar_builder *b, struct strata_error *err, int n, ...) {
    int ids[8], k = 0;
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n && i < 8; i++) {
        int id = va_arg(ap, int);
        if (id >= 0)
            ids[k++] = id;
    }
    va_end(ap);
    return grammar_seq(b, ids, k, err);
}

int gb_ref(struct grammar_builder *b, struct strata_error *err) {
    struct gnode nd = {.type = GN_REF, .lo = -1};
    return gb_node(b, &nd, err);
}

void gb_ref_set(struct grammar_builder *b, int ref, int target) {
    b->nodes[ref].lo = target;
}

int gb_ws(struct grammar_builder *b, struct strata_error *err) {
    if (b->ws >= 0)
        return b->ws;
    struct gnode nd = {.type = GN_WS};
    int rc = gb_node(b, &nd, err);
    if (rc >= 0)
        b->ws = rc;
    return rc;
}

int gb_str(struct grammar_builder *b, int min_len, int max_len, struct strata_error *err) {
    struct gnode nd = {.type = GN_STR, .lo = min_len, .hi = max_len};
    return gb_node(b, &nd, err);
}

int gb_num(struct grammar_builder *b, struct strata_error *err) {
    struct gnode nd = {.type = GN_NUM};
    return gb_node(b, &nd, err);
}

int gb_int(struct grammar_builder *b, int64_t lo, int64_t hi, struct strata_error *err) {
    struct gnode nd = {.type = GN_INT, .ilo = lo, .ihi = hi};
    return gb_node(b, &nd, err);
}

/* ---- build -------------------------------------------------------------------- */

/* Follows GN_REF chains: the real node, or -1 (unset or a cycle of refs). */
static int resolve(const struct grammar_builder *b, int id) {
    for (size_t hops = 0; id >= 0 && b->nodes[id].type == GN_REF; hops++) {
        if (hops > b->n_nodes)
            return -1;
        id = b->nodes[id].lo;
        if (id >= (int)b->n_nodes)
            return -1;
    }
    return id;
}

void grammar_free(struct grammar *g) {
    if (!g)
        return;
    free(g->nodes);
    free(g->kids);
    free(g->lits);
    free(g->nullable);
    free(g);
}

int grammar_n_nodes(const struct grammar *g) {
    return g ? g->n_nodes : 0;
}

static void compute_nullable(struct grammar *g) {
    bool changed = true;
    while (changed) {
        changed = false;
        /* children are numbered after their first parent (breadth first):
         * backwards, a pass settles most chains at once */
        for (int i = g->n_nodes - 1; i >= 0; i--) {
            if (g->nullable[i])
                continue;
            const struct gnode *nd = &g->nodes[i];
            bool nl = false;
            switch (nd->type) {
            case GN_LIT:
                nl = nd->n == 0;
                break;
            case GN_WS:
                nl = true;
                break;
            case GN_SEQ:
                nl = true;
                for (uint32_t k = 0; k < nd->n; k++)
                    nl = nl && g->nullable[g->kids[nd->kid_off + k]];
                break;
            case GN_ALT:
                for (uint32_t k = 0; k < nd->n; k++)
                    nl = nl || g->nullable[g->kids[nd->kid_off + k]];
                break;
            case GN_REP:
                nl = nd->lo == 0 || g->nullable[g->kids[nd->kid_off]];
                break;
            default:
                break;
            }
            if (nl) {
                g->nullable[i] = true;
                changed = true;
            }
        }
    }
}

/* Left recursion: a node reachable from itself before any byte. Colour
 * DFS over the "first" edges (iterative: a recursive schema may be deep). */
static int check_left_rec(const struct grammar *g, struct strata_error *err) {
    uint8_t *col = calloc((size_t)g->n_nodes, 1);
    int32_t *st = malloc(sizeof(int32_t) * 2 * ((size_t)g->n_nodes + 1));
    int rc = 0;
    if (!col || !st) {
        rc = strata_error_set(err, STRATA_E_NOMEM, "grammar: out of memory");
        goto out;
    }
    for (int s = 0; s < g->n_nodes && rc == 0; s++) {
        if (col[s])
            continue;
        int sp = 0;
        st[0] = s;
        st[1] = 0;
        sp = 1;
        col[s] = 1;
        while (sp > 0 && rc == 0) {
            int v = st[2 * (sp - 1)], k = st[2 * (sp - 1) + 1];
            const struct gnode *nd = &g->nodes[v];
            int next = -1;
            if (nd->type == GN_SEQ) {
                /* children up to and including the first non-nullable one */
                bool ok = true;
                for (int i = 0; i < k && ok; i++)
                    ok = g->nullable[g->kids[nd->kid_off + (uint32_t)i]];
                if (ok && (uint32_t)k < nd->n)
                    next = g->kids[nd->kid_off + (uint32_t)k];
            } else if ((nd->type == GN_ALT || nd->type == GN_REP) && (uint32_t)k < nd->n) {
                next = g->kids[nd->kid_off + (uint32_t)k];
            }
            if (next < 0) {
                col[v] = 2;
                sp--;
                continue;
            }
            st[2 * (sp - 1) + 1] = k + 1;
            if (col[next] == 1) {
                rc = strata_error_set(err, STRATA_E_INVALID,
                                      "grammar: a rule can reach itself before matching a byte "
                                      "(left recursion, e.g. a $ref to an enclosing schema)");
            } else if (col[next] == 0) {
                col[next] = 1;
                st[2 * sp] = next;
                st[2 * sp + 1] = 0;
                sp++;
            }
        }
    }
out:
    free(col);
    free(st);
    return rc;
}

struct grammar *grammar_build(struct grammar_builder *b, int root, struct strata_error *err) {
    if (!b || root < 0 || (size_t)root >= b->n_nodes) {
        strata_error_set(err, STRATA_E_INVALID, "grammar: bad root node %d", root);
        return NULL;
    }
    struct grammar *g = calloc(1, sizeof *g);
    int32_t *map = malloc(sizeof(int32_t) * b->n_nodes);
    int32_t *queue = malloc(sizeof(int32_t) * b->n_nodes);
    size_t n_kids = 0, n_lits = 0;
    if (!g || !map || !queue)
        goto nomem;
    for (size_t i = 0; i < b->n_nodes; i++)
        map[i] = -1;
    /* number the reachable real nodes breadth first */
    int r = resolve(b, root);
    if (r < 0)
        goto badref;
    int nq = 0;
    map[r] = nq;
    queue[nq++] = r;
    for (int qi = 0; qi < nq; qi++) {
        const struct gnode *nd = &b->nodes[queue[qi]];
        if (nd->type == GN_LIT)
            n_lits += nd->n;
        if (nd->type != GN_SEQ && nd->type != GN_ALT && nd->type != GN_REP)
            continue;
        n_kids += nd->n;
        for (uint32_t k = 0; k < nd->n; k++) {
            int c = resolve(b, b->kids[nd->kid_off + k]);
            if (c < 0)
                goto badref;
            if (map[c] < 0) {
                map[c] = nq;
                queue[nq++] = c;
            }
        }
    }
    g->n_nodes = nq;
    g->nodes = calloc((size_t)nq, sizeof *g->nodes);
    g->kids = malloc(sizeof(int32_t) * (n_kids + 1));
    g->lits = malloc(n_lits + 1);
    g->nullable = calloc((size_t)nq, sizeof *g->nullable);
    if (!g->nodes || !g->kids || !g->lits || !g->nullable)
        goto nomem;
    size_t ko = 0, lo = 0;
    for (int i = 0; i < nq; i++) {
        struct gnode nd = b->nodes[queue[i]];
        if (nd.type == GN_LIT) {
            memcpy(g->lits + lo, b->lits + nd.lit_off, nd.n);
            nd.lit_off = (uint32_t)lo;
            lo += nd.n;
        } else if (nd.type == GN_SEQ || nd.type == GN_ALT || nd.type == GN_REP) {
            for (uint32_t k = 0; k < nd.n; k++)
                g->kids[ko + k] = map[resolve(b, b->kids[nd.kid_off + k])];
            nd.kid_off = (uint32_t)ko;
            ko += nd.n;
        }
        g->nodes[i] = nd;
    }
    g->root = 0;
    compute_nullable(g);
    for (int i = 0; i < nq; i++) {
        const struct gnode *nd = &g->nodes[i];
        if (nd->type == GN_REP && nd->hi < 0 && g->nullable[g->kids[nd->kid_off]]) {
            strata_error_set(err, STRATA_E_INVALID,
                             "grammar: an unbounded repeat of a node that can match nothing");
            goto fail;
        }
    }
    if (check_left_rec(g, err) < 0)
        goto fail;
    free(map);
    free(queue);
    return g;
badref:
    strata_error_set(err, STRATA_E_INVALID,
                     "grammar: a reference that was never set, or that only refers to itself (left "
                     "recursion)");
    goto fail;
nomem:
    strata_error_set(err, STRATA_E_NOMEM, "grammar: out of memory");
fail:
    free(map);
    free(queue);
    grammar_free(g);
    return NULL;
}
