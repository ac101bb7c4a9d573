/* engine/text/template-eval.c: executes the AST (statements, expressions, scopes,
 * loops, macros) under template_limits, and the public entry points. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/template-impl.h"

enum { FLOW_NORMAL = 0, FLOW_BREAK, FLOW_CONTINUE };

_Noreturn void trender_fail(struct trender *r, int code, const char *fmt, ...) {
    char msg[STRATA_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (code == STRATA_E_TEMPLATE && r->line > 0)
        tarena_fail(r->a, code, "template error (line %d): %s", r->line, msg);
    tarena_fail(r->a, code, "%s", msg);
}

void trender_step(struct trender *r) {
    if (++r->steps > r->lim->max_steps)
        trender_fail(r, STRATA_E_LIMIT, "template step limit (%lld) exceeded",
                     (long long)r->lim->max_steps);
}

static void enter(struct trender *r) {
    if (++r->depth > r->lim->max_depth)
        trender_fail(r, STRATA_E_LIMIT, "template recursion depth limit (%d) exceeded",
                     r->lim->max_depth);
}

/* ---- scopes ------------------------------------------------------------------ */

static struct tframe *frame_new(struct trender *r, struct tframe *parent) {
    struct tframe *f = tarena_alloc(r->a, sizeof(*f));
    f->parent = parent;
    return f;
}

static void frame_set(struct trender *r, struct tframe *f, const char *name, struct tv v) {
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->vars[i].name, name)) {
            f->vars[i].v = v;
            return;
        }
    f->vars = tarena_grow(r->a, f->vars, f->n, &f->cap, f->n + 1, sizeof(*f->vars), 8);
    f->vars[f->n++] = (struct tvar){name, v};
}

static struct tv lookup(struct trender *r, struct tframe *f, const char *name) {
    for (; f; f = f->parent)
        for (size_t i = f->n; i-- > 0;)
            if (!strcmp(f->vars[i].name, name))
                return f->vars[i].v;
    struct tv g = tglobal_builtin(name);
    if (g.kind == TV_UNDEF)
        g.undef_name = name;
    return g;
}

/* ---- expressions -------------------------------------------------------------- */

static struct tv eval(struct trender *r, struct tframe *f, const struct tnode *n);
static int exec(struct trender *r, struct tframe *f, const struct tnode *n, struct tbuf *out);

static void eval_args(struct trender *r, struct tframe *f, const struct tnode *n, struct targs *a) {
    memset(a, 0, sizeof(*a));
    a->n_pos = n->n;
    a->pos = n->n ? tarena_alloc(r->a, n->n * sizeof(struct tv)) : NULL;
    for (size_t i = 0; i < n->n; i++)
        a->pos[i] = eval(r, f, n->list[i]);
    a->n_kw = n->n2;
    a->kw = n->n2 ? tarena_alloc(r->a, n->n2 * sizeof(struct tv)) : NULL;
    a->kw_names = n->names;
    for (size_t i = 0; i < n->n2; i++)
        a->kw[i] = eval(r, f, n->list2[i]);
}

struct tstr *tstr_of(struct trender *r, struct tv v) {
    return tv_to_str(r->a, v, r->lim->max_output_bytes);
}

static bool overflow_i(struct trender *r, bool ovf) {
    if (ovf)
        trender_fail(r, STRATA_E_TEMPLATE, "integer overflow");
    return false;
}

static double num_f(struct tv v) {
    return v.kind == TV_FLOAT ? v.f : v.kind == TV_INT ? (double)v.i : (double)v.b;
}
static bool is_num(struct tv v) {
    return v.kind == TV_INT || v.kind == TV_FLOAT || v.kind == TV_BOOL;
}
/* Integer value of an int or bool (0 for floats: callers use num_f() then). */
static int64_t as_i(struct tv v) {
    return v.kind == TV_INT ? v.i : v.kind == TV_BOOL ? (int64_t)v.b : 0;
}

static struct tv binop(struct trender *r, int op, struct tv a, struct tv b) {
    if (op == OP_CONCAT) {
        struct tbuf o;
        tbuf_init(&o, r->a, r->lim->max_output_bytes);
        tv_write_str(&o, a);
        tv_write_str(&o, b);
        return tv_strv(tbuf_finish(&o));
    }
    if (a.kind == TV_UNDEF || b.kind == TV_UNDEF)
        trender_fail(r, STRATA_E_TEMPLATE, "'%s' is undefined",
                     (a.kind == TV_UNDEF ? a : b).undef_name
                         ? (a.kind == TV_UNDEF ? a : b).undef_name
                         : "value");
    if (is_num(a) && is_num(b)) {
        bool fl = a.kind == TV_FLOAT || b.kind == TV_FLOAT;
        int64_t x = as_i(a), y = as_i(b), z = 0;
        double fx = num_f(a), fy = num_f(b);
        switch (op) {
        case OP_ADD:
            if (fl)
                return tv_float(fx + fy);
            overflow_i(r, __builtin_add_overflow(x, y, &z));
            return tv_int(z);
        case OP_SUB:
            if (fl)
                return tv_float(fx - fy);
            overflow_i(r, __builtin_sub_overflow(x, y, &z));
            return tv_int(z);
        case OP_MUL:
            if (fl)
                return tv_float(fx * fy);
            overflow_i(r, __builtin_mul_overflow(x, y, &z));
            return tv_int(z);
        case OP_DIV:
            if (fy == 0)
                trender_fail(r, STRATA_E_TEMPLATE, "division by zero");
            return tv_float(fx / fy);
        case OP_FLOORDIV:
        case OP_MOD:
            if (fl) {
                if (fy == 0)
                    trender_fail(r, STRATA_E_TEMPLATE, "float division by zero");
                double m = fmod(fx, fy);
                if (m != 0 && ((m < 0) != (fy < 0)))
                    m += fy;
                return op == OP_MOD ? tv_float(m) : tv_float(floor((fx - m) / fy + 0.5 - 0.5));
            }
            if (y == 0)
                trender_fail(r, STRATA_E_TEMPLATE, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1)
                trender_fail(r, STRATA_E_TEMPLATE, "integer overflow");
            {
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) {
                    m += y;
                    q -= 1;
                }
                return op == OP_MOD ? tv_int(m) : tv_int(q);
            }
        case OP_POW:
            if (fl || y < 0) {
                /* Python raises where C's pow() returns inf or nan */
                if (fx == 0 && fy < 0)
                    trender_fail(r, STRATA_E_TEMPLATE, "0.0 cannot be raised to a negative power");
                if (fx < 0 && fy != floor(fy) && isfinite(fy))
                    trender_fail(r, STRATA_E_TEMPLATE,
                                 "negative number to a fractional power (complex result)");
                double z = pow(fx, fy);
                if (isinf(z) && isfinite(fx) && isfinite(fy))
                    trender_fail(r, STRATA_E_TEMPLATE,
                                 "float power: numerical result out of range");
                return tv_float(z);
            }
            {
                int64_t acc = 1, base = x;
                for (int64_t e = y; e > 0; e >>= 1) {
                    if (e & 1)
                        overflow_i(r, __builtin_mul_overflow(acc, base, &acc));
                    if (e > 1)
                        overflow_i(r, __builtin_mul_overflow(base, base, &base));
                }
                return tv_int(acc);
            }
        }
    }
    if (op == OP_ADD && a.kind == TV_STR && b.kind == TV_STR) {
        /* Markup + str escapes the str (markupsafe), and the result is Markup */
        bool safe = a.s->safe || b.s->safe;
        struct tstr *x = safe && !a.s->safe ? thtml_escape(r, a.s) : a.s;
        struct tstr *y = safe && !b.s->safe ? thtml_escape(r, b.s) : b.s;
        struct tbuf o;
        tbuf_init(&o, r->a, r->lim->max_output_bytes);
        tbuf_put_str(&o, x);
        tbuf_put_str(&o, y);
        struct tstr *res = tbuf_finish(&o);
        res->safe = safe;
        return tv_strv(res);
    }
    if (op == OP_ADD && a.kind == TV_LIST && b.kind == TV_LIST && a.l->is_tuple == b.l->is_tuple) {
        struct tv l = tv_list(r->a, a.l->n + b.l->n + 1);
        l.l->is_tuple = a.l->is_tuple;
        for (size_t i = 0; i < a.l->n; i++)
            tv_list_push(r->a, l, a.l->items[i]);
        for (size_t i = 0; i < b.l->n; i++)
            tv_list_push(r->a, l, b.l->items[i]);
        return l;
    }
    if (op == OP_MUL && (a.kind == TV_STR || a.kind == TV_LIST) && (b.kind == TV_INT)) {
        int64_t k = b.i < 0 ? 0 : b.i;
        size_t unit = a.kind == TV_STR ? a.s->len : a.l->n;
        if (unit == 0)
            k = 0;
        /* refuse a result over the bound before building any of it */
        if (k > 0 &&
            (uint64_t)k > (a.kind == TV_STR ? r->lim->max_output_bytes
                                            : r->lim->max_memory_bytes / sizeof(struct tv)) /
                              unit)
            trender_fail(r, STRATA_E_LIMIT, "%s repetition (%lld x %zu) exceeds the %s limit",
                         a.kind == TV_STR ? "string" : "list", (long long)k, unit,
                         a.kind == TV_STR ? "output" : "memory");
        if (a.kind == TV_STR) {
            struct tbuf o;
            tbuf_init(&o, r->a, r->lim->max_output_bytes);
            for (int64_t i = 0; i < k; i++) {
                trender_step(r);
                tbuf_put_str(&o, a.s);
            }
            return tv_strv(tbuf_finish(&o));
        }
        struct tv l = tv_list(r->a, 4);
        for (int64_t i = 0; i < k; i++)
            for (size_t j = 0; j < a.l->n; j++) {
                trender_step(r);
                tv_list_push(r->a, l, a.l->items[j]);
            }
        return l;
    }
    trender_fail(r, STRATA_E_TEMPLATE, "unsupported operand types for operator: '%s' and '%s'",
                 tv_type_name(a), tv_type_name(b));
}

static bool contains(struct trender *r, struct tv container, struct tv item) {
    switch (container.kind) {
    case TV_STR:
        if (item.kind != TV_STR)
            trender_fail(r, STRATA_E_TEMPLATE, "'in <string>' requires string as left operand");
        if (!item.s->len)
            return true;
        return memmem(container.s->s, container.s->len, item.s->s, item.s->len) != NULL;
    case TV_LIST:
        for (size_t i = 0; i < container.l->n; i++)
            if (tv_equal(container.l->items[i], item))
                return true;
        return false;
    case TV_DICT:
        return tv_dict_get(container, item) != NULL;
    case TV_UNDEF:
        return false;
    default:
        trender_fail(r, STRATA_E_TEMPLATE, "argument of type '%s' is not iterable",
                     tv_type_name(container));
    }
}

static bool compare(struct trender *r, int op, struct tv a, struct tv b) {
    bool ok;
    int c;
    switch (op) {
    case OP_EQ:
        return tv_equal(a, b);
    case OP_NE:
        return !tv_equal(a, b);
    case OP_IN:
        return contains(r, b, a);
    case OP_NOTIN:
        return !contains(r, b, a);
    default:
        c = tv_compare(a, b, &ok);
        if (!ok)
            trender_fail(r, STRATA_E_TEMPLATE, "'<' not supported between '%s' and '%s'",
                         tv_type_name(a), tv_type_name(b));
        return op == OP_LT ? c < 0 : op == OP_LE ? c <= 0 : op == OP_GT ? c > 0 : c >= 0;
    }
}

/* Python slice of a list or string (code points). */
static struct tv slice(struct trender *r, struct tv obj, struct tv vs, struct tv ve,
                       struct tv vst) {
    int64_t step = 1;
    if (vst.kind != TV_NONE && vst.kind != TV_UNDEF) {
        if (vst.kind != TV_INT)
            trender_fail(r, STRATA_E_TEMPLATE, "slice indices must be integers");
        step = vst.i;
    }
    if (step == 0)
        trender_fail(r, STRATA_E_TEMPLATE, "slice step cannot be zero");
    if (obj.kind != TV_STR && obj.kind != TV_LIST)
        return tv_undef_v;
    int64_t len = obj.kind == TV_STR ? (int64_t)utf8_len(obj.s->s, obj.s->len) : (int64_t)obj.l->n;
    int64_t lo, hi;
    struct tv bound[2] = {vs, ve};
    int64_t idx[2];
    for (int k = 0; k < 2; k++) {
        struct tv v = bound[k];
        if (v.kind == TV_NONE || v.kind == TV_UNDEF) {
            idx[k] = step > 0 ? (k == 0 ? 0 : len) : (k == 0 ? len - 1 : -1);
            continue;
        }
        if (v.kind != TV_INT && v.kind != TV_BOOL)
            trender_fail(r, STRATA_E_TEMPLATE, "slice indices must be integers");
        int64_t i = as_i(v);
        if (i < 0)
            i += len;
        if (step > 0)
            i = i < 0 ? 0 : i > len ? len : i;
        else
            i = i < -1 ? -1 : i > len - 1 ? len - 1 : i;
        idx[k] = i;
    }
    lo = idx[0];
    hi = idx[1];
    if (obj.kind == TV_LIST) {
        struct tv l = tv_list(r->a, 4);
        l.l->is_tuple = obj.l->is_tuple;
        for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step)
            tv_list_push(r->a, l, obj.l->items[i]);
        return l;
    }
    struct tbuf o;
    tbuf_init(&o, r->a, 0);
    bool t = obj.s->nr != 0;
    const char *s = obj.s->s;
    size_t n = obj.s->len;
    if (step == 1) {
        size_t a = utf8_offset(s, n, (size_t)lo), b = hi > lo ? utf8_offset(s, n, (size_t)hi) : a;
        tbuf_put(&o, s + a, b > a ? b - a : 0, t);
    } else {
        /* Index code points once. */
        size_t *offs = tarena_alloc(r->a, ((size_t)len + 1) * sizeof(size_t));
        size_t c = 0;
        for (size_t i = 0; i < n; i++)
            if (((unsigned char)s[i] & 0xC0) != 0x80)
                offs[c++] = i;
        offs[c] = n;
        for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step)
            tbuf_put(&o, s + offs[i], offs[i + 1] - offs[i], t);
    }
    return tv_strv(tbuf_finish(&o));
}

static struct tv call_macro(struct trender *r, const struct tfunc *fn, struct targs *a,
                            struct tv caller);

static struct tv eval(struct trender *r, struct tframe *f, const struct tnode *n) {
    trender_step(r);
    enter(r);
    r->line = n->line;
    struct tv v;
    switch (n->kind) {
    case E_CONST:
        v = n->val;
        break;
    case E_NAME:
        v = lookup(r, f, n->name);
        break;
    case E_GETATTR:
        v = tattr_get(r, eval(r, f, n->a), n->name);
        break;
    case E_GETITEM: {
        struct tv o = eval(r, f, n->a);
        v = titem_get(r, o, eval(r, f, n->b));
        break;
    }
    case E_SLICE: {
        struct tv o = eval(r, f, n->a);
        if (o.kind == TV_UNDEF)
            trender_fail(r, STRATA_E_TEMPLATE, "'%s' is undefined",
                         o.undef_name ? o.undef_name : "value");
        v = slice(r, o, n->b ? eval(r, f, n->b) : tv_none_v, n->c ? eval(r, f, n->c) : tv_none_v,
                  n->d ? eval(r, f, n->d) : tv_none_v);
        break;
    }
    case E_CALL: {
        struct tv fn = eval(r, f, n->a);
        struct targs a;
        eval_args(r, f, n, &a);
        r->line = n->line;
        v = teval_call(r, fn, &a);
        break;
    }
    case E_FILTER: {
        struct tv x = eval(r, f, n->a);
        struct targs a;
        eval_args(r, f, n, &a);
        r->line = n->line;
        v = tfilter_apply(r, n->name, x, &a);
        break;
    }
    case E_TEST: {
        struct tv x = eval(r, f, n->a);
        struct targs a;
        eval_args(r, f, n, &a);
        r->line = n->line;
        bool res = ttest_apply(r, n->name, x, &a);
        v = tv_bool(n->op ? !res : res);
        break;
    }
    case E_BINOP: {
        struct tv x = eval(r, f, n->a);
        struct tv y = eval(r, f, n->b);
        r->line = n->line;
        v = binop(r, n->op, x, y);
        break;
    }
    case E_UNARY: {
        struct tv x = eval(r, f, n->a);
        if (x.kind == TV_INT || x.kind == TV_BOOL) {
            int64_t i = as_i(x);
            if (n->op == OP_NEG && i == INT64_MIN)
                trender_fail(r, STRATA_E_TEMPLATE, "integer overflow");
            v = tv_int(n->op == OP_NEG ? -i : i);
        } else if (x.kind == TV_FLOAT) {
            v = tv_float(n->op == OP_NEG ? -x.f : x.f);
        } else {
            trender_fail(r, STRATA_E_TEMPLATE, "bad operand type for unary %c: '%s'",
                         n->op == OP_NEG ? '-' : '+', tv_type_name(x));
        }
        break;
    }
    case E_AND: {
        struct tv x = eval(r, f, n->a);
        v = tv_truthy(x) ? eval(r, f, n->b) : x;
        break;
    }
    case E_OR: {
        struct tv x = eval(r, f, n->a);
        v = tv_truthy(x) ? x : eval(r, f, n->b);
        break;
    }
    case E_NOT:
        v = tv_bool(!tv_truthy(eval(r, f, n->a)));
        break;
    case E_COMPARE: {
        struct tv x = eval(r, f, n->a);
        v = tv_bool(true);
        for (size_t i = 0; i < n->n; i++) {
            struct tv y = eval(r, f, n->list[i]);
            r->line = n->line;
            if (!compare(r, n->ops[i], x, y)) {
                v = tv_bool(false);
                break;
            }
            x = y;
        }
        break;
    }
    case E_COND:
        if (tv_truthy(eval(r, f, n->a)))
            v = eval(r, f, n->b);
        else
            v = n->c ? eval(r, f, n->c) : tv_undef_v;
        break;
    case E_LIST:
    case E_TUPLE:
        v = tv_list(r->a, n->n + 1);
        v.l->is_tuple = n->kind == E_TUPLE;
        for (size_t i = 0; i < n->n; i++)
            tv_list_push(r->a, v, eval(r, f, n->list[i]));
        break;
    case E_DICT:
        v = tv_dict(r->a, n->n + 1);
        for (size_t i = 0; i < n->n; i++) {
            struct tv k = eval(r, f, n->list[i]);
            if (k.kind == TV_LIST && !k.l->is_tuple)
                trender_fail(r, STRATA_E_TEMPLATE, "unhashable type: 'list'");
            if (k.kind == TV_DICT)
                trender_fail(r, STRATA_E_TEMPLATE, "unhashable type: 'dict'");
            tv_dict_set(r->a, v, k, eval(r, f, n->list2[i]));
        }
        break;
    default:
        trender_fail(r, STRATA_E_INTERNAL, "template: bad expression node %d", n->kind);
    }
    r->depth--;
    return v;
}

struct tv teval_call(struct trender *r, struct tv fn, struct targs *a) {
    if (fn.kind != TV_FUNC) {
        if (fn.kind == TV_UNDEF)
            trender_fail(r, STRATA_E_TEMPLATE, "'%s' is undefined",
                         fn.undef_name ? fn.undef_name : "value");
        trender_fail(r, STRATA_E_TEMPLATE, "'%s' object is not callable", tv_type_name(fn));
    }
    if (fn.fn->kind == TF_BUILTIN)
        return fn.fn->fn(r, fn.fn->self, a);
    return call_macro(r, fn.fn, a, fn.fn->caller);
}

/* ---- statements ----------------------------------------------------------------- */

static void assign(struct trender *r, struct tframe *f, const struct tnode *target, struct tv v) {
    if (target->kind == E_NAME) {
        frame_set(r, f, target->name, v);
        return;
    }
    if (target->kind == E_TUPLE) {
        if (v.kind == TV_STR) {
            /* unpacking a string: one character per name */
            struct tv l = tv_list(r->a, 4);
            for (size_t i = 0; i < v.s->len;) {
                size_t j = i + 1;
                while (j < v.s->len && ((unsigned char)v.s->s[j] & 0xC0) == 0x80)
                    j++;
                tv_list_push(r->a, l, tv_str(r->a, v.s->s + i, j - i, v.s->nr != 0));
                i = j;
            }
            v = l;
        } else if (v.kind == TV_DICT && !v.d->is_ns) {
            struct tv l = tv_list(r->a, v.d->n + 1);
            for (size_t i = 0; i < v.d->n; i++)
                tv_list_push(r->a, l, v.d->keys[i]);
            v = l;
        }
        if (v.kind != TV_LIST)
            trender_fail(r, STRATA_E_TEMPLATE, "cannot unpack non-iterable %s object",
                         tv_type_name(v));
        if (v.l->n != target->n)
            trender_fail(r, STRATA_E_TEMPLATE, "cannot unpack %zu values into %zu names", v.l->n,
                         target->n);
        for (size_t i = 0; i < target->n; i++)
            assign(r, f, target->list[i], v.l->items[i]);
        return;
    }
    if (target->kind == E_GETATTR) {
        struct tv ns = lookup(r, f, target->a->name);
        if (ns.kind != TV_DICT || !ns.d->is_ns)
            trender_fail(r, STRATA_E_TEMPLATE, "cannot assign attribute on non-namespace object");
        tv_dict_set(r->a, ns, tv_cstr(r->a, target->name), v);
        return;
    }
    trender_fail(r, STRATA_E_TEMPLATE, "cannot assign to this target");
}

static int exec_body(struct trender *r, struct tframe *f, const struct tnode *n, struct tbuf *out) {
    for (size_t i = 0; i < n->n; i++) {
        int flow = exec(r, f, n->list[i], out);
        if (flow)
            return flow;
    }
    return FLOW_NORMAL;
}

/* Items of an iterable as a list (dict: keys; string: characters). */
static struct tv iter_items(struct trender *r, struct tv v) {
    switch (v.kind) {
    case TV_LIST:
        return v;
    case TV_UNDEF: {
        struct tv l = tv_list(r->a, 1);
        return l;
    }
    case TV_DICT: {
        struct tv l = tv_list(r->a, v.d->n + 1);
        if (!v.d->is_ns)
            for (size_t i = 0; i < v.d->n; i++)
                tv_list_push(r->a, l, v.d->keys[i]);
        else
            trender_fail(r, STRATA_E_TEMPLATE, "'Namespace' object is not iterable");
        return l;
    }
    case TV_STR: {
        struct tv l = tv_list(r->a, v.s->len + 1);
        for (size_t i = 0; i < v.s->len;) {
            size_t j = i + 1;
            while (j < v.s->len && ((unsigned char)v.s->s[j] & 0xC0) == 0x80)
                j++;
            tv_list_push(r->a, l, tv_str(r->a, v.s->s + i, j - i, v.s->nr != 0));
            i = j;
        }
        return l;
    }
    default:
        trender_fail(r, STRATA_E_TEMPLATE, "'%s' object is not iterable", tv_type_name(v));
    }
}

static struct tv loop_cycle(struct trender *r, struct tv self, struct targs *a) {
    if (!a->n_pos)
        trender_fail(r, STRATA_E_TEMPLATE, "no items for cycling given");
    return a->pos[self.i % (int64_t)a->n_pos];
}

static int exec_for(struct trender *r, struct tframe *f, const struct tnode *n, struct tbuf *out) {
    struct tv all = iter_items(r, eval(r, f, n->b));
    struct tframe *lf = frame_new(r, f);
    struct tv items = all;
    if (n->e) {
        items = tv_list(r->a, all.l->n + 1);
        for (size_t i = 0; i < all.l->n; i++) {
            trender_step(r);
            assign(r, lf, n->a, all.l->items[i]);
            if (tv_truthy(eval(r, lf, n->e)))
                tv_list_push(r->a, items, all.l->items[i]);
        }
    }
    size_t len = items.l->n;
    struct tv prev_loop = lookup(r, f, "loop");
    for (size_t i = 0; i < len; i++) {
        trender_step(r);
        struct tv loop = tv_dict(r->a, 16);
        struct tarena *A = r->a;
        tv_dict_set(A, loop, tv_cstr(A, "index0"), tv_int((int64_t)i));
        tv_dict_set(A, loop, tv_cstr(A, "index"), tv_int((int64_t)i + 1));
        tv_dict_set(A, loop, tv_cstr(A, "revindex0"), tv_int((int64_t)(len - i - 1)));
        tv_dict_set(A, loop, tv_cstr(A, "revindex"), tv_int((int64_t)(len - i)));
        tv_dict_set(A, loop, tv_cstr(A, "first"), tv_bool(i == 0));
        tv_dict_set(A, loop, tv_cstr(A, "last"), tv_bool(i + 1 == len));
        tv_dict_set(A, loop, tv_cstr(A, "length"), tv_int((int64_t)len));
        tv_dict_set(A, loop, tv_cstr(A, "depth"), tv_int(1));
        tv_dict_set(A, loop, tv_cstr(A, "depth0"), tv_int(0));
        tv_dict_set(A, loop, tv_cstr(A, "previtem"), i ? items.l->items[i - 1] : tv_undef_v);
        tv_dict_set(A, loop, tv_cstr(A, "nextitem"),
                    i + 1 < len ? items.l->items[i + 1] : tv_undef_v);
        struct tfunc *cyc = tarena_alloc(A, sizeof(*cyc));
        cyc->kind = TF_BUILTIN;
        cyc->name = "cycle";
        cyc->fn = loop_cycle;
        cyc->self = tv_int((int64_t)i);
        tv_dict_set(A, loop, tv_cstr(A, "cycle"), (struct tv){.kind = TV_FUNC, .fn = cyc});
        frame_set(r, lf, "loop", loop);
        assign(r, lf, n->a, items.l->items[i]);
        int flow = exec_body(r, lf, n->c, out);
        if (flow == FLOW_BREAK)
            break;
    }
    (void)prev_loop;
    if (len == 0 && n->d)
        return exec_body(r, f, n->d, out);
    return FLOW_NORMAL;
}

static struct tv make_func(struct trender *r, enum tfunc_kind kind, const struct tnode *def,
                           struct tframe *closure) {
    struct tfunc *fn = tarena_alloc(r->a, sizeof(*fn));
    fn->kind = kind;
    fn->name = def->name ? def->name : "caller";
    fn->def = def;
    fn->closure = closure;
    fn->caller = tv_undef_v;
    return (struct tv){.kind = TV_FUNC, .fn = fn};
}

static struct tv call_macro(struct trender *r, const struct tfunc *fn, struct targs *a,
                            struct tv caller) {
    const struct tnode *def = fn->def;
    enter(r);
    struct tframe *mf = frame_new(r, fn->closure);
    if (a->n_pos > def->n_names)
        trender_fail(r, STRATA_E_TEMPLATE, "macro '%s' takes not more than %zu argument(s)",
                     fn->name, def->n_names);
    bool *set = tarena_alloc(r->a, def->n_names + 1);
    for (size_t i = 0; i < a->n_pos; i++) {
        frame_set(r, mf, def->names[i], a->pos[i]);
        set[i] = true;
    }
    for (size_t k = 0; k < a->n_kw; k++) {
        size_t i;
        for (i = 0; i < def->n_names; i++)
            if (!strcmp(def->names[i], a->kw_names[k]))
                break;
        if (i == def->n_names)
            trender_fail(r, STRATA_E_TEMPLATE, "macro '%s' has no argument '%s'", fn->name,
                         a->kw_names[k]);
        frame_set(r, mf, def->names[i], a->kw[k]);
        set[i] = true;
    }
    for (size_t i = 0; i < def->n_names; i++)
        if (!set[i]) {
            struct tv d = tv_undef_v;
            d.undef_name = def->names[i];
            frame_set(r, mf, def->names[i], def->list[i] ? eval(r, mf, def->list[i]) : d);
        }
    if (caller.kind != TV_UNDEF)
        frame_set(r, mf, "caller", caller);
    struct tbuf o;
    tbuf_init(&o, r->a, r->lim->max_output_bytes);
    exec_body(r, mf, def->c, &o);
    r->depth--;
    return tv_strv(tbuf_finish(&o));
}

static int exec(struct trender *r, struct tframe *f, const struct tnode *n, struct tbuf *out) {
    trender_step(r);
    enter(r);
    r->line = n->line;
    int flow = FLOW_NORMAL;
    switch (n->kind) {
    case N_BODY:
        flow = exec_body(r, f, n, out);
        break;
    case N_TEXT:
        tbuf_put_str(out, n->val.s);
        break;
    case N_OUTPUT: {
        struct tv v = eval(r, f, n->a);
        tv_write_str(out, v);
        break;
    }
    case N_IF:
        if (tv_truthy(eval(r, f, n->a)))
            flow = exec_body(r, f, n->b, out);
        else if (n->c)
            flow = exec(r, f, n->c, out);
        break;
    case N_FOR:
        flow = exec_for(r, f, n, out);
        break;
    case N_SET:
        assign(r, f, n->a, eval(r, f, n->b));
        break;
    case N_SET_BLOCK:
    case N_FILTER_BLOCK: {
        struct tbuf o;
        tbuf_init(&o, r->a, r->lim->max_output_bytes);
        exec_body(r, f, n->c, &o);
        struct tv v = tv_strv(tbuf_finish(&o));
        /* the filter chain: innermost node has a NULL operand */
        const struct tnode *chain[64];
        size_t nc = 0;
        for (const struct tnode *x = n->b; x && nc < 64; x = x->a)
            chain[nc++] = x;
        while (nc-- > 0) {
            struct targs a;
            eval_args(r, f, chain[nc], &a);
            v = tfilter_apply(r, chain[nc]->name, v, &a);
        }
        if (n->kind == N_SET_BLOCK)
            assign(r, f, n->a, v);
        else
            tv_write_str(out, v);
        break;
    }
    case N_MACRO:
        frame_set(r, f, n->name, make_func(r, TF_MACRO, n, f));
        break;
    case N_CALL_BLOCK: {
        struct tv caller = make_func(r, TF_CALLER, n, f);
        struct tv fn = eval(r, f, n->a->a);
        struct targs a;
        eval_args(r, f, n->a, &a);
        struct tv v;
        if (fn.kind == TV_FUNC && fn.fn->kind == TF_MACRO)
            v = call_macro(r, fn.fn, &a, caller);
        else
            v = teval_call(r, fn, &a);
        tv_write_str(out, v);
        break;
    }
    case N_BREAK:
        flow = FLOW_BREAK;
        break;
    case N_CONTINUE:
        flow = FLOW_CONTINUE;
        break;
    default:
        trender_fail(r, STRATA_E_INTERNAL, "template: bad statement node %d", n->kind);
    }
    r->depth--;
    return flow;
}

/* caller() of a {% call %} block: its params, then its body. */
struct tv tcaller_invoke(struct trender *r, struct tfunc *fn, struct targs *a);
struct tv tcaller_invoke(struct trender *r, struct tfunc *fn, struct targs *a) {
    return call_macro(r, fn, a, tv_undef_v);
}

/* ---- public API ---------------------------------------------------------------- */

struct template_inputs template_inputs_default(void) {
    return (struct template_inputs){0};
}

struct template_limits template_limits_default(void) {
    return (struct template_limits){
        .max_depth = 200,
        .max_steps = 10 * 1000 * 1000,
        .max_output_bytes = 16u << 20,
        .max_memory_bytes = 512u << 20,
        .max_range = 100000,
    };
}

struct chat_template *template_parse(const char *src, size_t len, struct strata_error *err) {
    /* volatile: read again after the longjmp (gcc -O2's -Wclobbered) */
    struct chat_template *volatile t = calloc(1, sizeof(*t));
    if (!t) {
        strata_error_set(err, STRATA_E_NOMEM, "template: out of memory");
        return NULL;
    }
    jmp_buf jb;
    struct strata_error local = {0};
    t->arena.on_fail = &jb;
    t->arena.err = err ? err : &local;
    t->arena.limit = 256u << 20;
    if (setjmp(jb)) {
        tarena_free(&t->arena);
        free(t);
        return NULL;
    }
    if (!src)
        tarena_fail(&t->arena, STRATA_E_INVALID, "template: no source");
    t->root = tparse(&t->arena, src, len, err, &jb);
    t->arena.on_fail = NULL;
    t->arena.err = NULL;
    return t;
}

void template_free(struct chat_template *t) {
    if (!t)
        return;
    tarena_free(&t->arena);
    free(t);
}

/* Joins list-of-parts contents into one string ("\n" between text parts). */
static void flatten_contents(struct trender *r, struct tv messages) {
    if (messages.kind != TV_LIST)
        return;
    for (size_t i = 0; i < messages.l->n; i++) {
        struct tv m = messages.l->items[i];
        if (m.kind != TV_DICT)
            continue;
        struct tv *c = tv_dict_gets(m, "content");
        if (!c || c->kind != TV_LIST)
            continue;
        struct tbuf b;
        tbuf_init(&b, r->a, r->lim->max_output_bytes);
        bool any = false;
        for (size_t k = 0; k < c->l->n; k++) {
            struct tv part = c->l->items[k];
            if (part.kind != TV_DICT)
                continue;
            struct tv *type = tv_dict_gets(part, "type");
            struct tv *text = tv_dict_gets(part, "text");
            if (!type || type->kind != TV_STR || strcmp(type->s->s, "text") || !text ||
                text->kind != TV_STR)
                continue;
            if (any)
                tbuf_puts(&b, "\n");
            tbuf_put_str(&b, text->s);
            any = true;
        }
        *c = tv_strv(tbuf_finish(&b));
    }
}

int template_render(const struct chat_template *t, const struct template_inputs *in,
                    const struct template_limits *lim_in, struct template_output *out,
                    struct strata_error *err) {
    struct template_limits dl = template_limits_default();
    /* volatile: set before the setjmp below and read after it (-Wclobbered) */
    const struct template_limits *volatile lim = lim_in ? lim_in : &dl;
    memset(out, 0, sizeof(*out));
    if (!t || !in)
        return strata_error_set(err, STRATA_E_INVALID, "template_render: no template or inputs");
    if (in->messages && !json_is_array(in->messages))
        return strata_error_set(err, STRATA_E_INVALID, "template: messages must be an array");
    struct tarena arena = {.limit = lim->max_memory_bytes};
    struct strata_error local = {0};
    jmp_buf jb;
    arena.on_fail = &jb;
    arena.err = err ? err : &local;
    struct trender R = {.a = &arena, .lim = lim, .in = in};
    if (setjmp(jb)) {
        tarena_free(&arena);
        return err ? err->code : local.code;
    }
    struct trender *r = &R;
    r->globals = frame_new(r, NULL);
    struct tframe *g = r->globals;
    if (in->extra_vars && json_is_object(in->extra_vars)) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)in->extra_vars, k, v) {
            frame_set(r, g, tarena_strndup(&arena, k, strlen(k)), tv_from_json(&arena, v, false));
        }
    }
    struct tv msgs = in->messages ? tv_from_json(&arena, in->messages, true) : tv_list(&arena, 1);
    flatten_contents(r, msgs);
    frame_set(r, g, "messages", msgs);
    frame_set(r, g, "tools", in->tools ? tv_from_json(&arena, in->tools, true) : tv_none_v);
    frame_set(r, g, "documents", tv_none_v);
    frame_set(r, g, "add_generation_prompt", tv_bool(in->add_generation_prompt));
    frame_set(r, g, "bos_token", tv_cstr(&arena, in->bos_token ? in->bos_token : ""));
    frame_set(r, g, "eos_token", tv_cstr(&arena, in->eos_token ? in->eos_token : ""));
    struct tbuf o;
    tbuf_init(&o, &arena, lim->max_output_bytes);
    exec(r, frame_new(r, g), t->root, &o);
    out->text = malloc(o.len + 1);
    out->untrusted = malloc((o.nr ? o.nr : 1) * sizeof(*out->untrusted));
    if (!out->text || !out->untrusted) {
        free(out->text);
        free(out->untrusted);
        memset(out, 0, sizeof(*out));
        tarena_free(&arena);
        return strata_error_set(err, STRATA_E_NOMEM, "template: out of memory");
    }
    if (o.len)
        memcpy(out->text, o.s, o.len);
    out->text[o.len] = '\0';
    out->len = o.len;
    for (size_t i = 0; i < o.nr; i++)
        out->untrusted[i] = (struct template_range){o.r[i].off, o.r[i].len};
    out->n_untrusted = o.nr;
    tarena_free(&arena);
    return 0;
}

void template_output_free(struct template_output *out) {
    if (!out)
        return;
    free(out->text);
    free(out->untrusted);
    memset(out, 0, sizeof(*out));
}

const char *template_chatml_source(void) {
    return "{%- for message in messages -%}\n"
           "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' "
           "-}}\n"
           "{%- endfor -%}\n"
           "{%- if add_generation_prompt -%}\n"
           "{{- '<|im_start|>assistant\\n' -}}\n"
           "{%- endif -%}\n";
}
