/* engine/text/template-parse.c: tokens -> AST, with Jinja 3's grammar and
 * operator precedence (parser.py): condexpr < or < and < not < compare
 * (==, !=, <, <=, >, >=, in, not in; chained) < + - < ~ < * / // % < ** <
 * unary - + < primary with postfix (.attr, [subscript], (call)), filters
 * (|f) and tests (is [not] t). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/template-impl.h"

#define PARSE_MAX_DEPTH 200 /* nesting bound: keeps hostile sources off the C stack */

struct parser {
    struct tarena *a;
    const char *norm;
    struct tlex_tok *t;
    size_t n, i;
    int depth;
};

_Noreturn static void pfail(struct parser *P, const struct tlex_tok *k, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
_Noreturn static void pfail(struct parser *P, const struct tlex_tok *k, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    int line, col;
    tlex_linecol(P->norm, k->pos, &line, &col);
    tarena_fail(P->a, STRATA_E_TEMPLATE, "template syntax error: line %d, column %d: %s", line, col,
                msg);
}

static struct tlex_tok *cur(struct parser *P) {
    return &P->t[P->i];
}
static struct tlex_tok *next(struct parser *P) {
    struct tlex_tok *k = &P->t[P->i];
    if (k->type != TLEX_EOF)
        P->i++;
    return k;
}
static bool is_op(const struct tlex_tok *k, const char *op) {
    return k->type == TLEX_OP && k->len == strlen(op) && !memcmp(k->text, op, k->len);
}
static bool is_name(const struct tlex_tok *k, const char *name) {
    return k->type == TLEX_NAME && k->len == strlen(name) && !memcmp(k->text, name, k->len);
}
static bool skip_op(struct parser *P, const char *op) {
    if (is_op(cur(P), op)) {
        P->i++;
        return true;
    }
    return false;
}
static bool skip_name(struct parser *P, const char *name) {
    if (is_name(cur(P), name)) {
        P->i++;
        return true;
    }
    return false;
}
static const char *describe(const struct tlex_tok *k) {
    switch (k->type) {
    case TLEX_EOF:
        return "end of template";
    case TLEX_BLOCK_END:
        return "end of statement block";
    case TLEX_VAR_END:
        return "end of print statement";
    default:
        return "token";
    }
}
static void expect_op(struct parser *P, const char *op) {
    if (!skip_op(P, op))
        pfail(P, cur(P), "expected '%s', got %s", op, describe(cur(P)));
}
static const char *expect_name(struct parser *P) {
    struct tlex_tok *k = cur(P);
    if (k->type != TLEX_NAME)
        pfail(P, k, "expected a name, got %s", describe(k));
    P->i++;
    return tarena_strndup(P->a, k->text, k->len);
}
static void expect_type(struct parser *P, enum tlex_type t) {
    if (cur(P)->type != t)
        pfail(P, cur(P), "unexpected %s '%.*s'", describe(cur(P)),
              (int)(cur(P)->len > 40 ? 40 : cur(P)->len), cur(P)->text);
    P->i++;
}

static struct tnode *node(struct parser *P, enum tnode_kind kind, const struct tlex_tok *at) {
    struct tnode *n = tarena_alloc(P->a, sizeof(*n));
    n->kind = kind;
    tlex_linecol(P->norm, at->pos, &n->line, &n->col);
    return n;
}

/* Growable node list. */
struct nlist {
    struct tnode **v;
    size_t n, cap;
};
static void nl_push(struct parser *P, struct nlist *l, struct tnode *x) {
    l->v = tarena_grow(P->a, l->v, l->n, &l->cap, l->n + 1, sizeof(*l->v), 4);
    l->v[l->n++] = x;
}

static void enter(struct parser *P) {
    if (++P->depth > PARSE_MAX_DEPTH)
        pfail(P, cur(P), "template nesting deeper than %d", PARSE_MAX_DEPTH);
}

/* Decodes a string literal body as Python's unicode-escape does. */
static struct tv decode_string(struct parser *P, const struct tlex_tok *k) {
    struct tbuf b;
    tbuf_init(&b, P->a, 0);
    const char *s = k->text;
    size_t n = k->len;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) {
            tbuf_put(&b, s + i, 1, false);
            continue;
        }
        char c = s[++i];
        const char *rep = NULL;
        switch (c) {
        case 'n':
            rep = "\n";
            break;
        case 't':
            rep = "\t";
            break;
        case 'r':
            rep = "\r";
            break;
        case '\\':
            rep = "\\";
            break;
        case '\'':
            rep = "'";
            break;
        case '"':
            rep = "\"";
            break;
        case 'a':
            rep = "\a";
            break;
        case 'b':
            rep = "\b";
            break;
        case 'f':
            rep = "\f";
            break;
        case 'v':
            rep = "\v";
            break;
        case '\n':
            rep = "";
            break;
        default:
            break;
        }
        if (rep) {
            tbuf_put(&b, rep, strlen(rep), false);
            continue;
        }
        unsigned long cp = 0;
        int nd = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
        if (nd) {
            if (i + (size_t)nd >= n)
                pfail(P, k, "truncated \\%c escape", c);
            char hex[9] = {0};
            memcpy(hex, s + i + 1, (size_t)nd);
            char *end;
            cp = strtoul(hex, &end, 16);
            if (end != hex + nd || cp > 0x10FFFF)
                pfail(P, k, "invalid \\%c escape", c);
            i += (size_t)nd;
        } else if (c >= '0' && c <= '7') {
            int m = 0;
            while (m < 3 && i < n && s[i] >= '0' && s[i] <= '7') {
                cp = cp * 8 + (unsigned long)(s[i] - '0');
                i++;
                m++;
            }
            i--;
        } else {
            char two[2] = {'\\', c};
            tbuf_put(&b, two, 2, false);
            continue;
        }
        char u[4];
        size_t ul;
        if (cp < 0x80) {
            u[0] = (char)cp;
            ul = 1;
        } else if (cp < 0x800) {
            u[0] = (char)(0xC0 | (cp >> 6));
            u[1] = (char)(0x80 | (cp & 0x3F));
            ul = 2;
        } else if (cp < 0x10000) {
            u[0] = (char)(0xE0 | (cp >> 12));
            u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
            u[2] = (char)(0x80 | (cp & 0x3F));
            ul = 3;
        } else {
            u[0] = (char)(0xF0 | (cp >> 18));
            u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
            u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
            u[3] = (char)(0x80 | (cp & 0x3F));
            ul = 4;
        }
        tbuf_put(&b, u, ul, false);
    }
    return tv_strv(tbuf_finish(&b));
}

static struct tnode *parse_expression(struct parser *P, bool with_condexpr);
static struct tnode *parse_tuple(struct parser *P, bool with_condexpr, const char *extra_end,
                                 bool explicit_parens);
static struct tnode *parse_unary(struct parser *P, bool with_filter);
static struct tnode *parse_primary(struct parser *P);
static struct tnode *parse_postfix(struct parser *P, struct tnode *n);

/* Call arguments after "(": positional into n->list, keyword into names/list2. */
static void parse_call_args(struct parser *P, struct tnode *n) {
    struct nlist pos = {0}, kw = {0};
    const char **names = NULL;
    size_t n_names = 0, cap = 0;
    while (!is_op(cur(P), ")")) {
        if (pos.n || kw.n)
            expect_op(P, ",");
        if (is_op(cur(P), ")"))
            break;
        if (is_op(cur(P), "*") || is_op(cur(P), "**"))
            pfail(P, cur(P), "*args and **kwargs calls are not supported");
        if (cur(P)->type == TLEX_NAME && is_op(&P->t[P->i + 1], "=")) {
            const char *name = expect_name(P);
            P->i++;
            names = tarena_grow(P->a, names, n_names, &cap, n_names + 1, sizeof(*names), 4);
            names[n_names++] = name;
            nl_push(P, &kw, parse_expression(P, true));
        } else {
            if (kw.n)
                pfail(P, cur(P), "positional argument after keyword argument");
            nl_push(P, &pos, parse_expression(P, true));
        }
    }
    expect_op(P, ")");
    n->list = pos.v;
    n->n = pos.n;
    n->list2 = kw.v;
    n->n2 = kw.n;
    n->names = names;
    n->n_names = n_names;
}

static struct tnode *parse_filter(struct parser *P, struct tnode *operand, bool start_inline) {
    while (is_op(cur(P), "|") || start_inline) {
        if (!start_inline)
            P->i++;
        start_inline = false;
        struct tlex_tok *at = cur(P);
        struct tnode *f = node(P, E_FILTER, at);
        const char *name = expect_name(P);
        while (skip_op(P, ".")) { /* dotted filter names */
            const char *more = expect_name(P);
            size_t l = strlen(name) + strlen(more) + 2;
            char *j = tarena_alloc(P->a, l);
            snprintf(j, l, "%s.%s", name, more);
            name = j;
        }
        f->name = name;
        f->a = operand;
        if (skip_op(P, "("))
            parse_call_args(P, f);
        operand = f;
    }
    return operand;
}

static struct tnode *parse_test(struct parser *P, struct tnode *operand) {
    struct tlex_tok *at = next(P); /* "is" */
    struct tnode *t = node(P, E_TEST, at);
    t->a = operand;
    if (skip_name(P, "not"))
        t->op = 1;
    t->name = expect_name(P);
    while (skip_op(P, ".")) {
        const char *more = expect_name(P);
        size_t l = strlen(t->name) + strlen(more) + 2;
        char *j = tarena_alloc(P->a, l);
        snprintf(j, l, "%s.%s", t->name, more);
        t->name = j;
    }
    struct tlex_tok *k = cur(P);
    if (skip_op(P, "(")) {
        parse_call_args(P, t);
    } else if ((k->type == TLEX_NAME || k->type == TLEX_STRING || k->type == TLEX_INT ||
                k->type == TLEX_FLOAT || is_op(k, "[") || is_op(k, "{")) &&
               !is_name(k, "else") && !is_name(k, "or") && !is_name(k, "and")) {
        if (is_name(k, "is"))
            pfail(P, k, "you cannot chain multiple tests with is");
        struct tnode *arg = parse_postfix(P, parse_primary(P));
        t->list = tarena_alloc(P->a, sizeof(*t->list));
        t->list[0] = arg;
        t->n = 1;
    }
    return t;
}

static struct tnode *parse_filter_expr(struct parser *P, struct tnode *n) {
    for (;;) {
        if (is_op(cur(P), "|"))
            n = parse_filter(P, n, false);
        else if (is_name(cur(P), "is"))
            n = parse_test(P, n);
        else if (is_op(cur(P), "("))
            n = parse_postfix(P, n);
        else
            return n;
    }
}

static struct tnode *parse_subscribed(struct parser *P) {
    struct tlex_tok *at = cur(P);
    struct tnode *args[3] = {NULL, NULL, NULL};
    if (is_op(cur(P), ":")) {
        P->i++;
    } else {
        struct tnode *e = parse_expression(P, true);
        if (!is_op(cur(P), ":"))
            return e;
        P->i++;
        args[0] = e;
    }
    if (!is_op(cur(P), "]") && !is_op(cur(P), ",") && !is_op(cur(P), ":"))
        args[1] = parse_expression(P, true);
    if (skip_op(P, ":"))
        if (!is_op(cur(P), "]") && !is_op(cur(P), ","))
            args[2] = parse_expression(P, true);
    struct tnode *s = node(P, E_SLICE, at);
    s->b = args[0];
    s->c = args[1];
    s->d = args[2];
    return s;
}

static struct tnode *parse_postfix(struct parser *P, struct tnode *n) {
    for (;;) {
        struct tlex_tok *at = cur(P);
        if (skip_op(P, ".")) {
            struct tlex_tok *k = next(P);
            if (k->type == TLEX_NAME) {
                struct tnode *g = node(P, E_GETATTR, at);
                g->a = n;
                g->name = tarena_strndup(P->a, k->text, k->len);
                n = g;
            } else if (k->type == TLEX_INT) {
                struct tnode *g = node(P, E_GETITEM, at);
                g->a = n;
                g->b = node(P, E_CONST, k);
                g->b->val = tv_int(strtoll(k->text, NULL, 10));
                n = g;
            } else {
                pfail(P, k, "expected name or number after '.'");
            }
        } else if (skip_op(P, "[")) {
            struct nlist items = {0};
            while (!is_op(cur(P), "]")) {
                if (items.n)
                    expect_op(P, ",");
                if (is_op(cur(P), "]"))
                    break;
                nl_push(P, &items, parse_subscribed(P));
            }
            expect_op(P, "]");
            if (!items.n)
                pfail(P, at, "expected a subscript");
            struct tnode *key = items.v[0];
            if (items.n > 1) {
                key = node(P, E_TUPLE, at);
                key->list = items.v;
                key->n = items.n;
            }
            if (key->kind == E_SLICE) {
                key->a = n;
                n = key;
            } else {
                struct tnode *g = node(P, E_GETITEM, at);
                g->a = n;
                g->b = key;
                n = g;
            }
        } else if (skip_op(P, "(")) {
            struct tnode *c = node(P, E_CALL, at);
            c->a = n;
            parse_call_args(P, c);
            n = c;
        } else {
            return n;
        }
    }
}

static struct tnode *parse_primary(struct parser *P) {
    enter(P);
    struct tlex_tok *k = cur(P);
    struct tnode *n;
    if (k->type == TLEX_NAME) {
        P->i++;
        n = node(P, E_CONST, k);
        if (is_name(k, "true") || is_name(k, "True")) {
            n->val = tv_bool(true);
        } else if (is_name(k, "false") || is_name(k, "False")) {
            n->val = tv_bool(false);
        } else if (is_name(k, "none") || is_name(k, "None")) {
            n->val = tv_none_v;
        } else {
            n->kind = E_NAME;
            n->name = tarena_strndup(P->a, k->text, k->len);
        }
    } else if (k->type == TLEX_STRING) {
        n = node(P, E_CONST, k);
        struct tbuf b;
        tbuf_init(&b, P->a, 0);
        while (cur(P)->type == TLEX_STRING) /* adjacent literals concatenate */
            tbuf_put_str(&b, decode_string(P, next(P)).s);
        n->val = tv_strv(tbuf_finish(&b));
    } else if (k->type == TLEX_INT || k->type == TLEX_FLOAT) {
        P->i++;
        n = node(P, E_CONST, k);
        char buf[64];
        size_t m = 0;
        for (size_t j = 0; j < k->len && m + 1 < sizeof(buf); j++)
            if (k->text[j] != '_')
                buf[m++] = k->text[j];
        buf[m] = '\0';
        if (k->type == TLEX_FLOAT) {
            n->val = tv_float(strtod(buf, NULL));
        } else {
            errno = 0;
            long long v = strtoll(buf, NULL, 10);
            if (errno)
                pfail(P, k, "integer literal out of range");
            n->val = tv_int(v);
        }
    } else if (skip_op(P, "(")) {
        n = parse_tuple(P, true, NULL, true);
        expect_op(P, ")");
    } else if (skip_op(P, "[")) {
        n = node(P, E_LIST, k);
        struct nlist items = {0};
        while (!is_op(cur(P), "]")) {
            if (items.n)
                expect_op(P, ",");
            if (is_op(cur(P), "]"))
                break;
            nl_push(P, &items, parse_expression(P, true));
        }
        expect_op(P, "]");
        n->list = items.v;
        n->n = items.n;
    } else if (skip_op(P, "{")) {
        n = node(P, E_DICT, k);
        struct nlist keys = {0}, vals = {0};
        while (!is_op(cur(P), "}")) {
            if (keys.n)
                expect_op(P, ",");
            if (is_op(cur(P), "}"))
                break;
            nl_push(P, &keys, parse_expression(P, true));
            expect_op(P, ":");
            nl_push(P, &vals, parse_expression(P, true));
        }
        expect_op(P, "}");
        n->list = keys.v;
        n->n = keys.n;
        n->list2 = vals.v;
        n->n2 = vals.n;
    } else {
        pfail(P, k, "unexpected %s", describe(k));
    }
    P->depth--;
    return n;
}

static struct tnode *parse_unary(struct parser *P, bool with_filter) {
    enter(P);
    struct tlex_tok *k = cur(P);
    struct tnode *n;
    if (skip_op(P, "-") || skip_op(P, "+")) {
        n = node(P, E_UNARY, k);
        n->op = k->text[0] == '-' ? OP_NEG : OP_POS;
        n->a = parse_unary(P, false);
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter)
        n = parse_filter_expr(P, n);
    P->depth--;
    return n;
}

static struct tnode *binop(struct parser *P, const struct tlex_tok *at, int op, struct tnode *l,
                           struct tnode *r) {
    struct tnode *n = node(P, E_BINOP, at);
    n->op = op;
    n->a = l;
    n->b = r;
    return n;
}

static struct tnode *parse_pow(struct parser *P) {
    struct tnode *l = parse_unary(P, true);
    while (is_op(cur(P), "**")) {
        struct tlex_tok *at = next(P);
        l = binop(P, at, OP_POW, l, parse_unary(P, true));
    }
    return l;
}

static struct tnode *parse_math2(struct parser *P) {
    struct tnode *l = parse_pow(P);
    for (;;) {
        struct tlex_tok *at = cur(P);
        int op = is_op(at, "*")    ? OP_MUL
                 : is_op(at, "/")  ? OP_DIV
                 : is_op(at, "//") ? OP_FLOORDIV
                 : is_op(at, "%")  ? OP_MOD
                                   : 0;
        if (!op)
            return l;
        P->i++;
        l = binop(P, at, op, l, parse_pow(P));
    }
}

static struct tnode *parse_concat(struct parser *P) {
    struct tnode *l = parse_math2(P);
    while (is_op(cur(P), "~")) {
        struct tlex_tok *at = next(P);
        l = binop(P, at, OP_CONCAT, l, parse_math2(P));
    }
    return l;
}

static struct tnode *parse_math1(struct parser *P) {
    struct tnode *l = parse_concat(P);
    for (;;) {
        struct tlex_tok *at = cur(P);
        int op = is_op(at, "+") ? OP_ADD : is_op(at, "-") ? OP_SUB : 0;
        if (!op)
            return l;
        P->i++;
        l = binop(P, at, op, l, parse_concat(P));
    }
}

static struct tnode *parse_compare(struct parser *P) {
    struct tlex_tok *at = cur(P);
    struct tnode *first = parse_math1(P);
    struct nlist ops = {0};
    int opv[64];
    for (;;) {
        struct tlex_tok *k = cur(P);
        int op = is_op(k, "==")     ? OP_EQ
                 : is_op(k, "!=")   ? OP_NE
                 : is_op(k, "<")    ? OP_LT
                 : is_op(k, "<=")   ? OP_LE
                 : is_op(k, ">")    ? OP_GT
                 : is_op(k, ">=")   ? OP_GE
                 : is_name(k, "in") ? OP_IN
                                    : 0;
        if (!op && is_name(k, "not") && is_name(&P->t[P->i + 1], "in")) {
            op = OP_NOTIN;
            P->i++;
        }
        if (!op)
            break;
        P->i++;
        if (ops.n >= 64)
            pfail(P, k, "comparison chain too long");
        opv[ops.n] = op;
        nl_push(P, &ops, parse_math1(P));
    }
    if (!ops.n)
        return first;
    struct tnode *n = node(P, E_COMPARE, at);
    n->a = first;
    n->list = ops.v;
    n->n = ops.n;
    n->ops = tarena_alloc(P->a, ops.n * sizeof(int));
    memcpy(n->ops, opv, ops.n * sizeof(int));
    return n;
}

static struct tnode *parse_not(struct parser *P) {
    if (is_name(cur(P), "not")) {
        struct tlex_tok *at = next(P);
        enter(P);
        struct tnode *n = node(P, E_NOT, at);
        n->a = parse_not(P);
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

/* `operand (word operand)*`, left-associative: `and` and `or`. */
static struct tnode *parse_word_chain(struct parser *P, const char *word, enum tnode_kind kind,
                                      struct tnode *(*operand)(struct parser *)) {
    struct tnode *l = operand(P);
    while (is_name(cur(P), word)) {
        struct tlex_tok *at = next(P);
        struct tnode *n = node(P, kind, at);
        n->a = l;
        n->b = operand(P);
        l = n;
    }
    return l;
}

static struct tnode *parse_and(struct parser *P) {
    return parse_word_chain(P, "and", E_AND, parse_not);
}

static struct tnode *parse_or(struct parser *P) {
    return parse_word_chain(P, "or", E_OR, parse_and);
}

static struct tnode *parse_expression(struct parser *P, bool with_condexpr) {
    enter(P);
    struct tnode *e = parse_or(P);
    while (with_condexpr && is_name(cur(P), "if")) {
        struct tlex_tok *at = next(P);
        struct tnode *c = node(P, E_COND, at);
        c->b = e;
        c->a = parse_or(P);
        if (skip_name(P, "else"))
            c->c = parse_expression(P, true);
        e = c;
    }
    P->depth--;
    return e;
}

static bool tuple_end(struct parser *P, const char *extra_end) {
    struct tlex_tok *k = cur(P);
    return k->type == TLEX_VAR_END || k->type == TLEX_BLOCK_END || is_op(k, ")") ||
           (extra_end && is_name(k, extra_end));
}

static struct tnode *parse_tuple(struct parser *P, bool with_condexpr, const char *extra_end,
                                 bool explicit_parens) {
    struct tlex_tok *at = cur(P);
    struct nlist items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.n)
            expect_op(P, ",");
        if (tuple_end(P, extra_end))
            break;
        nl_push(P, &items, parse_expression(P, with_condexpr));
        if (is_op(cur(P), ","))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple) {
        if (items.n)
            return items.v[0];
        if (!explicit_parens)
            pfail(P, cur(P), "expected an expression, got %s", describe(cur(P)));
    }
    struct tnode *t = node(P, E_TUPLE, at);
    t->list = items.v;
    t->n = items.n;
    return t;
}

/* Assignment target: a name, names separated by commas, or (with_ns) name.attr. */
static struct tnode *parse_assign_target(struct parser *P, bool with_ns, const char *extra_end) {
    struct tlex_tok *at = cur(P);
    if (with_ns && at->type == TLEX_NAME && is_op(&P->t[P->i + 1], ".")) {
        struct tnode *ns = node(P, E_NAME, at);
        ns->name = expect_name(P);
        P->i++;
        struct tnode *g = node(P, E_GETATTR, at);
        g->a = ns;
        g->name = expect_name(P);
        return g;
    }
    struct nlist items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.n)
            expect_op(P, ",");
        if (tuple_end(P, extra_end))
            break;
        struct tlex_tok *k = cur(P);
        struct tnode *nm;
        if (skip_op(P, "(")) {
            nm = parse_assign_target(P, false, NULL);
            expect_op(P, ")");
        } else {
            nm = node(P, E_NAME, k);
            nm->name = expect_name(P);
        }
        nl_push(P, &items, nm);
        if (is_op(cur(P), ","))
            is_tuple = true;
        else
            break;
    }
    if (!items.n)
        pfail(P, at, "expected an assignment target");
    if (!is_tuple)
        return items.v[0];
    struct tnode *t = node(P, E_TUPLE, at);
    t->list = items.v;
    t->n = items.n;
    return t;
}

static struct tnode *parse_body(struct parser *P, const char *const *ends, const char **which);

/* Block tag ends: "endif", "else"... parse_body stops before the tag's name
 * when it is one of ends; drop consumes it and the tag end. */
static struct tnode *parse_until(struct parser *P, const char *const *ends, const char **which) {
    struct tnode *b = parse_body(P, ends, which);
    return b;
}

static void end_tag(struct parser *P) {
    expect_type(P, TLEX_BLOCK_END);
}

static void parse_macro_params(struct parser *P, struct tnode *m) {
    struct nlist defs = {0};
    const char **names = NULL;
    size_t n = 0, cap = 0;
    expect_op(P, "(");
    while (!is_op(cur(P), ")")) {
        if (n)
            expect_op(P, ",");
        names = tarena_grow(P->a, names, n, &cap, n + 1, sizeof(*names), 4);
        names[n++] = expect_name(P);
        nl_push(P, &defs, skip_op(P, "=") ? parse_expression(P, true) : NULL);
    }
    expect_op(P, ")");
    m->names = names;
    m->n_names = n;
    m->list = defs.v;
    m->n = defs.n;
}

static struct tnode *parse_statement(struct parser *P) {
    struct tlex_tok *k = cur(P);
    if (k->type != TLEX_NAME)
        pfail(P, k, "tag name expected");
    enter(P);
    const char *which;
    struct tnode *n;
    if (skip_name(P, "if")) {
        n = node(P, N_IF, k);
        struct tnode *top = n;
        for (;;) {
            n->a = parse_tuple(P, false, NULL, false);
            end_tag(P);
            static const char *const ends[] = {"elif", "else", "endif", NULL};
            n->b = parse_until(P, ends, &which);
            if (!strcmp(which, "elif")) {
                struct tnode *e = node(P, N_IF, cur(P));
                P->i++;
                n->c = e;
                n = e;
                continue;
            }
            P->i++;
            if (!strcmp(which, "else")) {
                end_tag(P);
                static const char *const ends2[] = {"endif", NULL};
                n->c = parse_until(P, ends2, &which);
                P->i++;
            }
            end_tag(P);
            break;
        }
        n = top;
    } else if (skip_name(P, "for")) {
        n = node(P, N_FOR, k);
        n->a = parse_assign_target(P, false, "in");
        if (!skip_name(P, "in"))
            pfail(P, cur(P), "expected 'in'");
        n->b = parse_tuple(P, false, "recursive", false);
        if (skip_name(P, "if"))
            n->e = parse_expression(P, true);
        if (is_name(cur(P), "recursive"))
            pfail(P, cur(P), "recursive loops are not supported");
        end_tag(P);
        static const char *const ends[] = {"endfor", "else", NULL};
        n->c = parse_until(P, ends, &which);
        P->i++;
        if (!strcmp(which, "else")) {
            end_tag(P);
            static const char *const ends2[] = {"endfor", NULL};
            n->d = parse_until(P, ends2, &which);
            P->i++;
        }
        end_tag(P);
    } else if (skip_name(P, "set")) {
        struct tnode *target = parse_assign_target(P, true, NULL);
        if (skip_op(P, "=")) {
            n = node(P, N_SET, k);
            n->a = target;
            n->b = parse_tuple(P, true, NULL, false);
            end_tag(P);
        } else {
            n = node(P, N_SET_BLOCK, k);
            n->a = target;
            if (is_op(cur(P), "|")) {
                n->b = parse_filter(P, NULL, false);
            }
            end_tag(P);
            static const char *const ends[] = {"endset", NULL};
            n->c = parse_until(P, ends, &which);
            P->i++;
            end_tag(P);
        }
    } else if (skip_name(P, "macro")) {
        n = node(P, N_MACRO, k);
        n->name = expect_name(P);
        parse_macro_params(P, n);
        end_tag(P);
        static const char *const ends[] = {"endmacro", NULL};
        n->c = parse_until(P, ends, &which);
        P->i++;
        end_tag(P);
    } else if (skip_name(P, "call")) {
        n = node(P, N_CALL_BLOCK, k);
        if (is_op(cur(P), "("))
            parse_macro_params(P, n);
        n->a = parse_expression(P, true);
        if (n->a->kind != E_CALL)
            pfail(P, k, "expected a call after 'call'");
        end_tag(P);
        static const char *const ends[] = {"endcall", NULL};
        n->c = parse_until(P, ends, &which);
        P->i++;
        end_tag(P);
    } else if (skip_name(P, "filter")) {
        n = node(P, N_FILTER_BLOCK, k);
        n->b = parse_filter(P, NULL, true);
        end_tag(P);
        static const char *const ends[] = {"endfilter", NULL};
        n->c = parse_until(P, ends, &which);
        P->i++;
        end_tag(P);
    } else if (skip_name(P, "generation")) { /* transformers' AssistantTracker: renders its body */
        end_tag(P);
        static const char *const ends[] = {"endgeneration", NULL};
        n = parse_until(P, ends, &which);
        P->i++;
        end_tag(P);
    } else if (skip_name(P, "break")) {
        n = node(P, N_BREAK, k);
        end_tag(P);
    } else if (skip_name(P, "continue")) {
        n = node(P, N_CONTINUE, k);
        end_tag(P);
    } else {
        pfail(P, k, "encountered unknown tag '%.*s'", (int)(k->len > 40 ? 40 : k->len), k->text);
    }
    P->depth--;
    return n;
}

static struct tnode *parse_body(struct parser *P, const char *const *ends, const char **which) {
    enter(P);
    struct tnode *body = node(P, N_BODY, cur(P));
    struct nlist items = {0};
    for (;;) {
        struct tlex_tok *k = cur(P);
        if (k->type == TLEX_EOF) {
            if (ends)
                pfail(P, k, "unexpected end of template, expected '%s'", ends[0]);
            break;
        }
        if (k->type == TLEX_DATA) {
            struct tnode *t = node(P, N_TEXT, k);
            t->val = tv_str(P->a, k->text, k->len, false);
            nl_push(P, &items, t);
            P->i++;
        } else if (k->type == TLEX_VAR_BEGIN) {
            P->i++;
            struct tnode *o = node(P, N_OUTPUT, k);
            o->a = parse_tuple(P, true, NULL, false);
            expect_type(P, TLEX_VAR_END);
            nl_push(P, &items, o);
        } else if (k->type == TLEX_BLOCK_BEGIN) {
            P->i++;
            struct tlex_tok *nm = cur(P);
            bool ended = false;
            for (size_t e = 0; ends && ends[e]; e++)
                if (is_name(nm, ends[e])) {
                    *which = ends[e];
                    ended = true;
                }
            if (ended)
                break;
            nl_push(P, &items, parse_statement(P));
        } else {
            pfail(P, k, "unexpected %s", describe(k));
        }
    }
    body->list = items.v;
    body->n = items.n;
    P->depth--;
    return body;
}

struct tnode *tparse(struct tarena *a, const char *src, size_t len, struct strata_error *err,
                     jmp_buf *jb) {
    (void)err;
    (void)jb;
    struct parser P = {.a = a};
    P.t = tlex(a, src, len, &P.n, &P.norm);
    return parse_body(&P, NULL, NULL);
}
