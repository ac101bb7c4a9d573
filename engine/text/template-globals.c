/* engine/text/template-globals.c: Jinja tests (`is defined`, `is string`, ...)
 * and the global functions (range, dict, namespace, raise_exception,
 * strftime_now) of the template interpreter. Split from template-filters.c
 * to keep files under the size bound. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/text/template-impl.h"

#define FAIL(...) trender_fail(r, STRATA_E_TEMPLATE, __VA_ARGS__)

/* ---- tests ---------------------------------------------------------------------- */

bool ttest_apply(struct trender *r, const char *name, struct tv v, struct targs *a) {
    trender_step(r);
    struct tv x = targ(a, 0, "value", tv_undef_v);
    if (!strcmp(name, "defined"))
        return v.kind != TV_UNDEF;
    if (!strcmp(name, "undefined"))
        return v.kind == TV_UNDEF;
    if (!strcmp(name, "none"))
        return v.kind == TV_NONE;
    if (!strcmp(name, "string"))
        return v.kind == TV_STR;
    if (!strcmp(name, "mapping"))
        return v.kind == TV_DICT && !v.d->is_ns;
    if (!strcmp(name, "sequence"))
        return v.kind == TV_STR || (v.kind == TV_LIST && !v.l->is_gen) ||
               (v.kind == TV_DICT && !v.d->is_ns);
    if (!strcmp(name, "iterable"))
        return v.kind == TV_STR || v.kind == TV_LIST || (v.kind == TV_DICT && !v.d->is_ns) ||
               v.kind == TV_UNDEF;
    if (!strcmp(name, "number"))
        return v.kind == TV_INT || v.kind == TV_FLOAT || v.kind == TV_BOOL;
    if (!strcmp(name, "integer"))
        return v.kind == TV_INT;
    if (!strcmp(name, "float"))
        return v.kind == TV_FLOAT;
    if (!strcmp(name, "boolean"))
        return v.kind == TV_BOOL;
    if (!strcmp(name, "true"))
        return v.kind == TV_BOOL && v.b;
    if (!strcmp(name, "false"))
        return v.kind == TV_BOOL && !v.b;
    if (!strcmp(name, "callable"))
        return v.kind == TV_FUNC;
    if (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "=="))
        return tv_equal(v, x);
    if (!strcmp(name, "ne") || !strcmp(name, "!="))
        return !tv_equal(v, x);
    if (!strcmp(name, "sameas"))
        return v.kind == x.kind && (v.kind == TV_NONE || v.kind == TV_UNDEF || tv_equal(v, x)) &&
               (v.kind != TV_STR || v.s == x.s);
    if (!strcmp(name, "lt") || !strcmp(name, "le") || !strcmp(name, "gt") || !strcmp(name, "ge") ||
        !strcmp(name, "lessthan") || !strcmp(name, "greaterthan")) {
        bool ok;
        int c = tv_compare(v, x, &ok);
        if (!ok)
            FAIL("comparison not supported between '%s' and '%s'", tv_type_name(v),
                 tv_type_name(x));
        if (name[0] == 'l')
            return name[1] == 'e' && name[2] == '\0' ? c <= 0 : c < 0;
        return name[1] == 'e' && name[2] == '\0' ? c >= 0 : c > 0;
    }
    if (!strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby")) {
        if (v.kind != TV_INT && v.kind != TV_BOOL)
            FAIL("test '%s' needs an integer", name);
        int64_t i = v.kind == TV_INT ? v.i : v.b;
        if (name[0] == 'o')
            return (i % 2) != 0;
        if (name[0] == 'e')
            return (i % 2) == 0;
        int64_t d = targ_int(r, targ(a, 0, "num", tv_undef_v), "num");
        if (d == 0)
            FAIL("integer division or modulo by zero");
        return i % d == 0;
    }
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        struct tstr *s = tstr_of(r, v);
        bool cased = false;
        for (size_t i = 0; i < s->len; i++) {
            char c = s->s[i];
            if (name[0] == 'l' ? (c >= 'A' && c <= 'Z') : (c >= 'a' && c <= 'z'))
                return false;
            if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'))
                cased = true;
        }
        return cased;
    }
    if (!strcmp(name, "in")) {
        struct tv seq = targ(a, 0, "seq", tv_undef_v);
        if (seq.kind == TV_STR) {
            if (v.kind != TV_STR)
                FAIL("'in <string>' requires string as left operand");
            return memmem(seq.s->s, seq.s->len, v.s->s, v.s->len) != NULL || !v.s->len;
        }
        if (seq.kind == TV_LIST) {
            for (size_t i = 0; i < seq.l->n; i++)
                if (tv_equal(seq.l->items[i], v))
                    return true;
            return false;
        }
        if (seq.kind == TV_DICT)
            return tv_dict_get(seq, v) != NULL;
        FAIL("test 'in' needs a container");
    }
    FAIL("no test named '%s'", name);
}

/* ---- globals ---------------------------------------------------------------------- */

static struct tv g_raise_exception(struct trender *r, struct tv self, struct targs *a) {
    struct tstr *msg = tstr_of(r, targ(a, 0, "message", tv_cstr(r->a, "")));
    trender_fail(r, STRATA_E_TEMPLATE, "%s", msg->s);
}

static struct tv g_strftime_now(struct trender *r, struct tv self, struct targs *a) {
    struct tv f = targ(a, 0, "format", tv_undef_v);
    if (f.kind != TV_STR)
        FAIL("strftime_now: format must be a string");
    time_t now = r->in->now ? r->in->now : time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char buf[512];
    size_t n = f.s->len < 200 ? strftime(buf, sizeof(buf), f.s->s, &tm) : 0;
    return tv_str(r->a, buf, n, false);
}

static struct tv g_range(struct trender *r, struct tv self, struct targs *a) {
    int64_t start = 0, stop, step = 1;
    if (a->n_pos == 1) {
        stop = targ_int(r, a->pos[0], "range() argument");
    } else if (a->n_pos == 2 || a->n_pos == 3) {
        start = targ_int(r, a->pos[0], "range() argument");
        stop = targ_int(r, a->pos[1], "range() argument");
        if (a->n_pos == 3)
            step = targ_int(r, a->pos[2], "range() argument");
    } else {
        FAIL("range expected 1 to 3 arguments");
    }
    if (step == 0)
        FAIL("range() arg 3 must not be zero");
    /* length in unsigned arithmetic: stop - start and i * step may pass int64
     * (range(-2**63 + 1, 2**63 - 1, 2**62)) while every item fits */
    uint64_t span = step > 0 ? (stop > start ? (uint64_t)stop - (uint64_t)start : 0)
                             : (start > stop ? (uint64_t)start - (uint64_t)stop : 0);
    uint64_t ustep = step > 0 ? (uint64_t)step : -(uint64_t)step;
    uint64_t n = span / ustep + (span % ustep != 0);
    if (n > (uint64_t)r->lim->max_range)
        trender_fail(r, STRATA_E_LIMIT, "range too big (%llu items; limit %lld)",
                     (unsigned long long)n, (long long)r->lim->max_range);
    struct tv l = tv_list(r->a, (size_t)n + 1);
    for (uint64_t i = 0; i < n; i++)
        tv_list_push(r->a, l, tv_int((int64_t)((uint64_t)start + i * (uint64_t)step)));
    return l;
}

static struct tv g_dict(struct trender *r, struct tv self, struct targs *a) {
    struct tv d = tv_dict(r->a, a->n_kw + 1);
    if (a->n_pos == 1 && a->pos[0].kind == TV_DICT)
        for (size_t i = 0; i < a->pos[0].d->n; i++)
            tv_dict_set(r->a, d, a->pos[0].d->keys[i], a->pos[0].d->vals[i]);
    else if (a->n_pos)
        FAIL("dict(): positional argument must be a mapping");
    for (size_t i = 0; i < a->n_kw; i++)
        tv_dict_set(r->a, d, tv_cstr(r->a, a->kw_names[i]), a->kw[i]);
    return d;
}

static struct tv g_namespace(struct trender *r, struct tv self, struct targs *a) {
    struct tv d = g_dict(r, self, a);
    d.d->is_ns = true;
    return d;
}

struct tv tglobal_builtin(const char *name) {
    static const struct tfunc fns[] = {
        {.kind = TF_BUILTIN, .name = "raise_exception", .fn = g_raise_exception},
        {.kind = TF_BUILTIN, .name = "strftime_now", .fn = g_strftime_now},
        {.kind = TF_BUILTIN, .name = "range", .fn = g_range},
        {.kind = TF_BUILTIN, .name = "dict", .fn = g_dict},
        {.kind = TF_BUILTIN, .name = "namespace", .fn = g_namespace},
    };
    for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++)
        if (!strcmp(fns[i].name, name))
            return (struct tv){.kind = TV_FUNC, .fn = &fns[i]};
    return tv_undef_v;
}
