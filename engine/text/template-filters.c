/* engine/text/template-filters.c: Jinja filters, Python str/dict methods and
 * attribute/item lookup (Jinja's getattr/getitem fallbacks). Tests and
 * globals are in template-globals.c. Case mapping is ASCII-only (non-ASCII
 * letters pass through unchanged). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/text/template-impl.h"

#define FAIL(...) trender_fail(r, STRATA_E_TEMPLATE, __VA_ARGS__)

struct tv targ(struct targs *a, size_t i, const char *name, struct tv dflt) {
    for (size_t k = 0; k < a->n_kw; k++)
        if (!strcmp(a->kw_names[k], name))
            return a->kw[k];
    return i < a->n_pos ? a->pos[i] : dflt;
}

static struct tv str_result(struct trender *r, const char *s, size_t n, bool tainted) {
    if (n > r->lim->max_output_bytes)
        trender_fail(r, STRATA_E_LIMIT, "template string limit exceeded");
    return tv_str(r->a, s, n, tainted);
}

static bool py_space(const char *s, size_t n, size_t i, size_t *w) {
    unsigned char c = (unsigned char)s[i];
    *w = 1;
    if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f))
        return true;
    if (c == 0xC2 && i + 1 < n &&
        ((unsigned char)s[i + 1] == 0x85 || (unsigned char)s[i + 1] == 0xA0)) {
        *w = 2;
        return true;
    }
    if (c == 0xE2 && i + 2 < n) {
        unsigned char b = (unsigned char)s[i + 1], d = (unsigned char)s[i + 2];
        if ((b == 0x80 && (d <= 0x8A || d == 0xA8 || d == 0xA9 || d == 0xAF)) ||
            (b == 0x81 && d == 0x9F)) {
            *w = 3;
            return true;
        }
    }
    if (c == 0xE3 && i + 2 < n && (unsigned char)s[i + 1] == 0x80 &&
        (unsigned char)s[i + 2] == 0x80) {
        *w = 3;
        return true;
    }
    return false;
}

/* Is the code point at s[i] one of chars (UTF-8)? */
static bool in_chars(const struct tstr *chars, const char *s, size_t n, size_t i, size_t *w) {
    size_t j = i + 1;
    while (j < n && ((unsigned char)s[j] & 0xC0) == 0x80)
        j++;
    *w = j - i;
    for (size_t k = 0; k < chars->len;) {
        size_t m = k + 1;
        while (m < chars->len && ((unsigned char)chars->s[m] & 0xC0) == 0x80)
            m++;
        if (m - k == *w && !memcmp(chars->s + k, s + i, *w))
            return true;
        k = m;
    }
    return false;
}

/* str.strip / lstrip / rstrip; chars NULL = whitespace. */
static struct tv do_strip(struct trender *r, const struct tstr *s, const struct tstr *chars,
                          bool left, bool right) {
    size_t a = 0, b = s->len, w;
    if (left)
        while (a < b &&
               (chars ? in_chars(chars, s->s, s->len, a, &w) : py_space(s->s, s->len, a, &w)))
            a += w;
    if (right) {
        while (b > a) {
            size_t p = b - 1;
            while (p > a && ((unsigned char)s->s[p] & 0xC0) == 0x80)
                p--;
            if (!(chars ? in_chars(chars, s->s, s->len, p, &w) : py_space(s->s, s->len, p, &w)))
                break;
            b = p;
        }
    }
    return str_result(r, s->s + a, b - a, s->nr != 0);
}

static const struct tstr *opt_chars(struct trender *r, struct tv v) {
    if (v.kind == TV_NONE || v.kind == TV_UNDEF)
        return NULL;
    if (v.kind != TV_STR)
        FAIL("strip arg must be None or str");
    return v.s;
}

static char up(char c) {
    return c >= 'a' && c <= 'z' ? (char)(c - 32) : c;
}
static char low(char c) {
    return c >= 'A' && c <= 'Z' ? (char)(c + 32) : c;
}
static bool alpha(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || ((unsigned char)c >= 0x80);
}

enum casemode { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE, CASE_JTITLE };

static struct tv do_case(struct trender *r, const struct tstr *s, enum casemode m) {
    char *o = tarena_strndup(r->a, s->s, s->len);
    bool prev_alpha = false;
    for (size_t i = 0; i < s->len; i++) {
        char c = o[i];
        switch (m) {
        case CASE_UPPER:
            o[i] = up(c);
            break;
        case CASE_LOWER:
            o[i] = low(c);
            break;
        case CASE_CAPITALIZE:
            o[i] = i == 0 ? up(c) : low(c);
            break;
        case CASE_TITLE: /* Python str.title: letters after a non-letter go upper */
            o[i] = prev_alpha ? low(c) : up(c);
            prev_alpha = alpha(c);
            break;
        case CASE_JTITLE: /* Jinja's title filter: words start after [-\s({\[<] */
            o[i] = prev_alpha ? low(c) : up(c);
            prev_alpha = !(c == '-' || c == ' ' || c == '\t' || c == '\n' || c == '\r' ||
                           c == '\f' || c == '\v' || c == '(' || c == '{' || c == '[' || c == '<');
            break;
        }
    }
    struct tstr *t = tarena_alloc(r->a, sizeof(*t));
    *t = *s;
    t->s = o;
    return tv_strv(t);
}

static struct tv do_replace(struct trender *r, const struct tstr *s, const struct tstr *old,
                            const struct tstr *new, int64_t count) {
    struct tbuf b;
    tbuf_init(&b, r->a, r->lim->max_output_bytes);
    bool t = s->nr || new->nr;
    size_t i = 0;
    int64_t done = 0;
    if (!old->len) {
        /* Python inserts new between every code point (and at both ends). */
        for (;;) {
            trender_step(r);
            if (count >= 0 && done >= count)
                break;
            tbuf_put(&b, new->s, new->len, t);
            done++;
            if (i >= s->len)
                break;
            size_t j = i + 1;
            while (j < s->len && ((unsigned char)s->s[j] & 0xC0) == 0x80)
                j++;
            tbuf_put(&b, s->s + i, j - i, t);
            i = j;
        }
        tbuf_put(&b, s->s + i, s->len - i, t);
        return tv_strv(tbuf_finish(&b));
    }
    while (i <= s->len) {
        const char *p =
            (count < 0 || done < count) ? memmem(s->s + i, s->len - i, old->s, old->len) : NULL;
        if (!p)
            break;
        size_t at = (size_t)(p - s->s);
        tbuf_put(&b, s->s + i, at - i, t);
        tbuf_put(&b, new->s, new->len, t);
        i = at + old->len;
        done++;
        trender_step(r);
    }
    tbuf_put(&b, s->s + i, s->len - i, t);
    return tv_strv(tbuf_finish(&b));
}

static struct tv do_split(struct trender *r, const struct tstr *s, struct tv sepv, int64_t maxsplit,
                          bool from_right) {
    struct tv l = tv_list(r->a, 4);
    bool t = s->nr != 0;
    if (sepv.kind == TV_NONE || sepv.kind == TV_UNDEF) {
        if (from_right)
            FAIL("rsplit() without separator is not supported");
        size_t i = 0, w;
        int64_t n = 0;
        for (;;) {
            while (i < s->len && py_space(s->s, s->len, i, &w))
                i += w;
            if (i >= s->len)
                break;
            if (maxsplit >= 0 && n >= maxsplit) {
                size_t e = s->len;
                while (e > i && py_space(s->s, s->len, e - 1, &w))
                    e--;
                tv_list_push(r->a, l, str_result(r, s->s + i, e - i, t));
                break;
            }
            size_t j = i;
            while (j < s->len && !py_space(s->s, s->len, j, &w))
                j++;
            tv_list_push(r->a, l, str_result(r, s->s + i, j - i, t));
            n++;
            i = j;
        }
        return l;
    }
    if (sepv.kind != TV_STR)
        FAIL("must be str or None, not %s", tv_type_name(sepv));
    const struct tstr *sep = sepv.s;
    if (!sep->len)
        FAIL("empty separator");
    if (from_right) {
        /* collect from the right, then reverse */
        struct tv rev = tv_list(r->a, 4);
        size_t end = s->len;
        int64_t n = 0;
        for (;;) {
            trender_step(r);
            const char *found = NULL;
            if (maxsplit < 0 || n < maxsplit)
                for (size_t p = end; p >= sep->len; p--)
                    if (!memcmp(s->s + p - sep->len, sep->s, sep->len)) {
                        found = s->s + p - sep->len;
                        break;
                    }
            if (!found) {
                tv_list_push(r->a, rev, str_result(r, s->s, end, t));
                break;
            }
            size_t at = (size_t)(found - s->s);
            tv_list_push(r->a, rev, str_result(r, s->s + at + sep->len, end - at - sep->len, t));
            end = at;
            n++;
        }
        for (size_t i = rev.l->n; i-- > 0;)
            tv_list_push(r->a, l, rev.l->items[i]);
        return l;
    }
    size_t i = 0;
    int64_t n = 0;
    for (;;) {
        trender_step(r);
        const char *p =
            (maxsplit < 0 || n < maxsplit) ? memmem(s->s + i, s->len - i, sep->s, sep->len) : NULL;
        if (!p) {
            tv_list_push(r->a, l, str_result(r, s->s + i, s->len - i, t));
            break;
        }
        size_t at = (size_t)(p - s->s);
        tv_list_push(r->a, l, str_result(r, s->s + i, at - i, t));
        i = at + sep->len;
        n++;
    }
    return l;
}

static bool affix(struct trender *r, const struct tstr *s, struct tv x, bool end) {
    if (x.kind == TV_LIST && x.l->is_tuple) {
        for (size_t i = 0; i < x.l->n; i++)
            if (affix(r, s, x.l->items[i], end))
                return true;
        return false;
    }
    if (x.kind != TV_STR)
        FAIL("startswith/endswith first arg must be str or a tuple of str");
    if (x.s->len > s->len)
        return false;
    return !memcmp(s->s + (end ? s->len - x.s->len : 0), x.s->s, x.s->len);
}

/* Truncates a float to int64 as Python's int(), failing where int64 cannot hold it. */
static int64_t float_to_int(struct trender *r, double f) {
    if (!isfinite(f))
        FAIL("cannot convert float %s to integer", isnan(f) ? "NaN" : "infinity");
    if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0))
        FAIL("integer overflow");
    return (int64_t)f;
}

int64_t targ_int(struct trender *r, struct tv v, const char *what) {
    if (v.kind == TV_INT)
        return v.i;
    if (v.kind == TV_BOOL)
        return v.b;
    FAIL("%s must be an integer, not %s", what, tv_type_name(v));
}

/* Jinja's do_round: "common" is Python's round(value, n) (an int stays an
 * int; floats are correctly rounded half-even through the exact decimal
 * expansion, as CPython's dtoa does); "floor"/"ceil" are
 * math.floor(value * 10**n) / 10**n. */
static struct tv do_round(struct trender *r, struct tv v, struct targs *a) {
    int64_t prec = targ_int(r, targ(a, 0, "precision", tv_int(0)), "precision");
    struct tv m = targ(a, 1, "method", tv_undef_v);
    const char *meth = m.kind == TV_STR ? m.s->s : "common";
    bool common = !strcmp(meth, "common");
    if (!common && strcmp(meth, "floor") && strcmp(meth, "ceil"))
        FAIL("method must be common, ceil or floor");
    if (v.kind != TV_INT && v.kind != TV_BOOL && v.kind != TV_FLOAT)
        FAIL("round: not a number");
    if (common && v.kind != TV_FLOAT) {
        int64_t x = v.kind == TV_INT ? v.i : v.b;
        if (prec >= 0)
            return tv_int(x);
        if (prec < -18)
            return tv_int(0); /* |x| < 10**19 / 2 */
        int64_t p = 1;
        for (int64_t i = 0; i < -prec; i++)
            p *= 10;
        int64_t q = x / p, rem = x % p;
        if (rem < 0) {
            rem += p;
            q -= 1;
        }
        if (rem > p - rem || (rem == p - rem && (q & 1))) /* half-even */
            q += 1;
        int64_t y;
        if (__builtin_mul_overflow(q, p, &y))
            FAIL("integer overflow");
        return tv_int(y);
    }
    double x = v.kind == TV_FLOAT ? v.f : v.kind == TV_INT ? (double)v.i : v.b;
    if (common) {
        if (!isfinite(x) || prec > 340) /* 340 digits round-trip every double */
            return tv_float(x);
        if (prec < -308) /* 10**-prec overflows: the rounded value is a signed zero */
            return tv_float(copysign(0.0, x));
        if (prec < 0) {
            double p = pow(10.0, (double)-prec);
            return tv_float(nearbyint(x / p) * p);
        }
        char buf[720];
        snprintf(buf, sizeof(buf), "%.*f", (int)prec, x); /* glibc: exact, half-even */
        return tv_float(strtod(buf, NULL));
    }
    double p = pow(10.0, (double)prec);
    return tv_float(meth[0] == 'f' ? floor(x * p) / p : ceil(x * p) / p);
}

/* ---- methods ---------------------------------------------------------------- */

#define M(name) static struct tv name(struct trender *r, struct tv self, struct targs *a)

M(m_strip) {
    return do_strip(r, self.s, opt_chars(r, targ(a, 0, "chars", tv_none_v)), true, true);
}
M(m_lstrip) {
    return do_strip(r, self.s, opt_chars(r, targ(a, 0, "chars", tv_none_v)), true, false);
}
M(m_rstrip) {
    return do_strip(r, self.s, opt_chars(r, targ(a, 0, "chars", tv_none_v)), false, true);
}
M(m_split) {
    return do_split(r, self.s, targ(a, 0, "sep", tv_none_v),
                    targ_int(r, targ(a, 1, "maxsplit", tv_int(-1)), "maxsplit"), false);
}
M(m_rsplit) {
    return do_split(r, self.s, targ(a, 0, "sep", tv_none_v),
                    targ_int(r, targ(a, 1, "maxsplit", tv_int(-1)), "maxsplit"), true);
}
M(m_startswith) {
    return tv_bool(affix(r, self.s, targ(a, 0, "prefix", tv_undef_v), false));
}
M(m_endswith) {
    return tv_bool(affix(r, self.s, targ(a, 0, "suffix", tv_undef_v), true));
}
M(m_upper) {
    return do_case(r, self.s, CASE_UPPER);
}
M(m_lower) {
    return do_case(r, self.s, CASE_LOWER);
}
M(m_title) {
    return do_case(r, self.s, CASE_TITLE);
}
M(m_capitalize) {
    return do_case(r, self.s, CASE_CAPITALIZE);
}
M(m_replace) {
    struct tv o = targ(a, 0, "old", tv_undef_v), n = targ(a, 1, "new", tv_undef_v);
    if (o.kind != TV_STR || n.kind != TV_STR)
        FAIL("replace() arguments must be str");
    return do_replace(r, self.s, o.s, n.s, targ_int(r, targ(a, 2, "count", tv_int(-1)), "count"));
}
static struct tv find_impl(struct trender *r, struct tv self, struct targs *a, bool count,
                           bool rev) {
    struct tv x = targ(a, 0, "sub", tv_undef_v);
    if (x.kind != TV_STR)
        FAIL("must be str, not %s", tv_type_name(x));
    const struct tstr *s = self.s;
    if (count) {
        if (!x.s->len)
            return tv_int((int64_t)utf8_len(s->s, s->len) + 1);
        int64_t c = 0;
        for (const char *p = s->s; (p = memmem(p, s->len - (size_t)(p - s->s), x.s->s, x.s->len));
             p += x.s->len)
            c++;
        return tv_int(c);
    }
    const char *hit = NULL;
    if (rev) {
        for (size_t p = s->len + 1; p-- > 0;)
            if (p + x.s->len <= s->len && !memcmp(s->s + p, x.s->s, x.s->len)) {
                hit = s->s + p;
                break;
            }
    } else {
        hit = x.s->len ? memmem(s->s, s->len, x.s->s, x.s->len) : s->s;
    }
    return tv_int(hit ? (int64_t)utf8_len(s->s, (size_t)(hit - s->s)) : -1);
}
M(m_find) {
    return find_impl(r, self, a, false, false);
}
M(m_rfind) {
    return find_impl(r, self, a, false, true);
}
M(m_count) {
    return find_impl(r, self, a, true, false);
}
static struct tv join_impl(struct trender *r, const struct tstr *sep, struct tv seq,
                           const char *attr);
M(m_join) {
    return join_impl(r, self.s, targ(a, 0, "iterable", tv_undef_v), NULL);
}
M(m_isdigit) {
    bool ok = self.s->len > 0;
    for (size_t i = 0; i < self.s->len; i++)
        if (self.s->s[i] < '0' || self.s->s[i] > '9')
            ok = false;
    return tv_bool(ok);
}
M(m_get) {
    struct tv *v = tv_dict_get(self, targ(a, 0, "key", tv_undef_v));
    return v ? *v : targ(a, 1, "default", tv_none_v);
}
M(m_items) {
    struct tv l = tv_list(r->a, self.d->n + 1);
    for (size_t i = 0; i < self.d->n; i++) {
        struct tv p = tv_list(r->a, 2);
        p.l->is_tuple = true;
        tv_list_push(r->a, p, self.d->keys[i]);
        tv_list_push(r->a, p, self.d->vals[i]);
        tv_list_push(r->a, l, p);
    }
    return l;
}
M(m_keys) {
    struct tv l = tv_list(r->a, self.d->n + 1);
    for (size_t i = 0; i < self.d->n; i++)
        tv_list_push(r->a, l, self.d->keys[i]);
    return l;
}
M(m_values) {
    struct tv l = tv_list(r->a, self.d->n + 1);
    for (size_t i = 0; i < self.d->n; i++)
        tv_list_push(r->a, l, self.d->vals[i]);
    return l;
}
M(m_list_index) {
    struct tv x = targ(a, 0, "value", tv_undef_v);
    for (size_t i = 0; i < self.l->n; i++)
        if (tv_equal(self.l->items[i], x))
            return tv_int((int64_t)i);
    FAIL("value is not in list");
}
M(m_list_count) {
    struct tv x = targ(a, 0, "value", tv_undef_v);
    int64_t c = 0;
    for (size_t i = 0; i < self.l->n; i++)
        c += tv_equal(self.l->items[i], x);
    return tv_int(c);
}

struct method {
    const char *name;
    tbuiltin_fn fn;
};
static const struct method str_methods[] = {
    {"strip", m_strip},       {"lstrip", m_lstrip},         {"rstrip", m_rstrip},
    {"split", m_split},       {"rsplit", m_rsplit},         {"startswith", m_startswith},
    {"endswith", m_endswith}, {"upper", m_upper},           {"lower", m_lower},
    {"title", m_title},       {"capitalize", m_capitalize}, {"replace", m_replace},
    {"find", m_find},         {"rfind", m_rfind},           {"count", m_count},
    {"join", m_join},         {"isdigit", m_isdigit},       {NULL, NULL}};
static const struct method dict_methods[] = {
    {"get", m_get}, {"items", m_items}, {"keys", m_keys}, {"values", m_values}, {NULL, NULL}};
static const struct method list_methods[] = {
    {"index", m_list_index}, {"count", m_list_count}, {NULL, NULL}};
/* Mutating methods the immutable sandbox refuses (SecurityError in Jinja). */
static const char *const unsafe_methods[] = {"append",  "extend",     "insert",  "pop",
                                             "remove",  "clear",      "update",  "sort",
                                             "reverse", "setdefault", "popitem", NULL};

static struct tv bind(struct trender *r, const char *name, tbuiltin_fn fn, struct tv self) {
    struct tfunc *f = tarena_alloc(r->a, sizeof(*f));
    f->kind = TF_BUILTIN;
    f->name = name;
    f->fn = fn;
    f->self = self;
    return (struct tv){.kind = TV_FUNC, .fn = f};
}

static struct tv find_method(struct trender *r, struct tv obj, const char *name) {
    const struct method *tab = obj.kind == TV_STR                     ? str_methods
                               : obj.kind == TV_DICT && !obj.d->is_ns ? dict_methods
                               : obj.kind == TV_LIST                  ? list_methods
                                                                      : NULL;
    if (!tab)
        return tv_undef_v;
    for (const struct method *m = tab; m->name; m++)
        if (!strcmp(m->name, name))
            return bind(r, m->name, m->fn, obj);
    if (obj.kind != TV_STR)
        for (size_t i = 0; unsafe_methods[i]; i++)
            if (!strcmp(unsafe_methods[i], name))
                FAIL("access to attribute '%s' of '%s' object is unsafe", name, tv_type_name(obj));
    return tv_undef_v;
}

static struct tv item_raw(struct trender *r, struct tv obj, struct tv key, bool *found) {
    *found = false;
    if (obj.kind == TV_DICT) {
        struct tv *v = tv_dict_get(obj, key);
        if (v) {
            *found = true;
            return *v;
        }
    } else if ((obj.kind == TV_LIST || obj.kind == TV_STR) &&
               (key.kind == TV_INT || key.kind == TV_BOOL)) {
        int64_t i = key.kind == TV_INT ? key.i : key.b;
        int64_t n =
            obj.kind == TV_LIST ? (int64_t)obj.l->n : (int64_t)utf8_len(obj.s->s, obj.s->len);
        if (i < 0)
            i += n;
        if (i >= 0 && i < n) {
            *found = true;
            if (obj.kind == TV_LIST)
                return obj.l->items[i];
            size_t a = utf8_offset(obj.s->s, obj.s->len, (size_t)i);
            size_t b = utf8_offset(obj.s->s, obj.s->len, (size_t)i + 1);
            return str_result(r, obj.s->s + a, b - a, obj.s->nr != 0);
        }
    }
    return tv_undef_v;
}

struct tv tattr_get(struct trender *r, struct tv obj, const char *name) {
    if (obj.kind == TV_UNDEF)
        FAIL("'%s' is undefined (reading attribute '%s')",
             obj.undef_name ? obj.undef_name : "value", name);
    struct tv m = find_method(r, obj, name);
    if (m.kind != TV_UNDEF)
        return m;
    bool found;
    struct tv v = item_raw(r, obj, tv_cstr(r->a, name), &found);
    if (!found)
        v.undef_name = name;
    return v;
}

struct tv titem_get(struct trender *r, struct tv obj, struct tv key) {
    if (obj.kind == TV_UNDEF)
        FAIL("'%s' is undefined", obj.undef_name ? obj.undef_name : "value");
    bool found;
    struct tv v = item_raw(r, obj, key, &found);
    if (found)
        return v;
    if (key.kind == TV_STR) {
        struct tv m = find_method(r, obj, key.s->s);
        if (m.kind != TV_UNDEF)
            return m;
        v.undef_name = key.s->s;
    }
    return v;
}

/* ---- filters ---------------------------------------------------------------- */

static struct tv items_of(struct trender *r, struct tv v) {
    if (v.kind == TV_LIST && v.l->is_gen) {
        struct tv l = tv_list(r->a, v.l->n + 1);
        for (size_t i = 0; i < v.l->n; i++)
            tv_list_push(r->a, l, v.l->items[i]);
        return l;
    }
    if (v.kind == TV_LIST)
        return v;
    struct tv l = tv_list(r->a, 4);
    if (v.kind == TV_UNDEF)
        return l;
    if (v.kind == TV_DICT) {
        for (size_t i = 0; i < v.d->n; i++)
            tv_list_push(r->a, l, v.d->keys[i]);
        return l;
    }
    if (v.kind == TV_STR) {
        for (size_t i = 0; i < v.s->len;) {
            size_t j = i + 1;
            while (j < v.s->len && ((unsigned char)v.s->s[j] & 0xC0) == 0x80)
                j++;
            tv_list_push(r->a, l, str_result(r, v.s->s + i, j - i, v.s->nr != 0));
            i = j;
        }
        return l;
    }
    FAIL("'%s' object is not iterable", tv_type_name(v));
}

/* environment.getitem for dotted attribute paths (selectattr, map, join, sort). */
static struct tv attr_path(struct trender *r, struct tv v, const char *path) {
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = strtok(buf, "."); p; p = strtok(NULL, ".")) {
        char *end;
        long long idx = strtoll(p, &end, 10);
        struct tv key = *end == '\0' && end != p ? tv_int(idx) : tv_cstr(r->a, p);
        if (v.kind == TV_UNDEF)
            return v;
        v = titem_get(r, v, key);
    }
    return v;
}

static struct tv join_impl(struct trender *r, const struct tstr *sep, struct tv seq,
                           const char *attr) {
    struct tv l = items_of(r, seq);
    struct tbuf b;
    tbuf_init(&b, r->a, r->lim->max_output_bytes);
    for (size_t i = 0; i < l.l->n; i++) {
        trender_step(r);
        if (i)
            tbuf_put_str(&b, sep);
        struct tv it = attr ? attr_path(r, l.l->items[i], attr) : l.l->items[i];
        tv_write_str(&b, it);
    }
    return tv_strv(tbuf_finish(&b));
}

static struct tv do_indent(struct trender *r, struct tv v, struct targs *a) {
    struct tstr *s = tstr_of(r, v);
    struct tv w = targ(a, 0, "width", tv_int(4));
    struct tbuf ind;
    tbuf_init(&ind, r->a, r->lim->max_output_bytes);
    if (w.kind == TV_STR) {
        tbuf_put_str(&ind, w.s);
    } else {
        int64_t n = targ_int(r, w, "width");
        if (n > 0 && (uint64_t)n > r->lim->max_output_bytes)
            trender_fail(r, STRATA_E_LIMIT, "indent width %lld exceeds the output limit",
                         (long long)n);
        static const char spaces[] = "                                ";
        for (int64_t i = 0; i < n; i += 32)
            tbuf_put(&ind, spaces, (size_t)(n - i < 32 ? n - i : 32), false);
    }
    struct tstr *is = tbuf_finish(&ind);
    bool first = tv_truthy(targ(a, 1, "first", tv_bool(false)));
    bool blank = tv_truthy(targ(a, 2, "blank", tv_bool(false)));
    /* lines of s + "\n" as str.splitlines() (\n, \r\n, \r, \v, \f, \x1c-\x1e) */
    struct tbuf o;
    tbuf_init(&o, r->a, r->lim->max_output_bytes);
    bool t = s->nr != 0;
    size_t i = 0, line_no = 0;
    while (i < s->len + 1) {
        size_t j = i;
        while (j < s->len && !strchr("\n\r\v\f\x1c\x1d\x1e", s->s[j]))
            j++;
        /* j == s->len: the line ended by the appended "\n" */
        size_t next = j + 1;
        if (j < s->len && s->s[j] == '\r' && j + 1 < s->len && s->s[j + 1] == '\n')
            next = j + 2;
        bool empty = j == i;
        if (line_no > 0) {
            tbuf_puts(&o, "\n");
            if (blank || !empty)
                tbuf_put_str(&o, is);
        }
        tbuf_put(&o, s->s + i, j - i, t);
        line_no++;
        i = next;
        if (j >= s->len)
            break;
    }
    struct tstr *body = tbuf_finish(&o);
    if (!first)
        return tv_strv(body);
    struct tbuf f;
    tbuf_init(&f, r->a, r->lim->max_output_bytes);
    tbuf_put_str(&f, is);
    tbuf_put_str(&f, body);
    return tv_strv(tbuf_finish(&f));
}

/* transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) */
static struct tv do_tojson(struct trender *r, struct tv v, struct targs *a) {
    if (tv_truthy(targ(a, 0, "ensure_ascii", tv_bool(false))))
        FAIL("tojson: ensure_ascii=True is not supported");
    struct tv ind = targ(a, 1, "indent", tv_none_v);
    const char *indent = NULL;
    if (ind.kind == TV_INT) {
        int64_t n = ind.i < 0 ? 0 : ind.i;
        if ((uint64_t)n > r->lim->max_output_bytes)
            trender_fail(r, STRATA_E_LIMIT, "tojson indent %lld exceeds the output limit",
                         (long long)n);
        char *s = tarena_alloc(r->a, (size_t)n + 1);
        memset(s, ' ', (size_t)n);
        indent = s;
    } else if (ind.kind == TV_STR) {
        indent = ind.s->s;
    } else if (ind.kind != TV_NONE) {
        FAIL("tojson: indent must be an int or str");
    }
    const char *item_sep = indent ? "," : ", ", *key_sep = ": ";
    struct tv seps = targ(a, 2, "separators", tv_none_v);
    if (seps.kind == TV_LIST && seps.l->n == 2 && seps.l->items[0].kind == TV_STR &&
        seps.l->items[1].kind == TV_STR) {
        item_sep = seps.l->items[0].s->s;
        key_sep = seps.l->items[1].s->s;
    }
    bool sort_keys = tv_truthy(targ(a, 3, "sort_keys", tv_bool(false)));
    struct tbuf b;
    tbuf_init(&b, r->a, r->lim->max_output_bytes);
    tv_write_json(&b, v, indent, item_sep, key_sep, sort_keys, 0);
    return tv_strv(tbuf_finish(&b));
}

static struct tv select_impl(struct trender *r, struct tv v, struct targs *a, bool by_attr,
                             bool reject) {
    struct tv out = tv_list(r->a, 4);
    out.l->is_gen = true;
    if (!tv_truthy(v)) /* Jinja: `if value:` before iterating */
        return out;
    struct tv l = items_of(r, v);
    size_t first = 0;
    const char *attr = NULL;
    if (by_attr) {
        struct tv at = targ(a, 0, "attr", tv_undef_v);
        if (at.kind != TV_STR)
            FAIL("selectattr: attribute name must be a string");
        attr = at.s->s;
        first = 1;
    }
    const char *test = NULL;
    struct targs ta = {0};
    if (a->n_pos > first) {
        if (a->pos[first].kind != TV_STR)
            FAIL("select: test name must be a string");
        test = a->pos[first].s->s;
        ta.pos = a->pos + first + 1;
        ta.n_pos = a->n_pos - first - 1;
    }
    for (size_t i = 0; i < l.l->n; i++) {
        trender_step(r);
        struct tv x = attr ? attr_path(r, l.l->items[i], attr) : l.l->items[i];
        bool ok = test ? ttest_apply(r, test, x, &ta) : tv_truthy(x);
        if (ok != reject)
            tv_list_push(r->a, out, l.l->items[i]);
    }
    return out;
}

static struct tv do_map(struct trender *r, struct tv v, struct targs *a) {
    struct tv out = tv_list(r->a, 4);
    out.l->is_gen = true;
    if (!tv_truthy(v))
        return out;
    struct tv l = items_of(r, v);
    struct tv at = targ(a, 99, "attribute", tv_undef_v);
    for (size_t i = 0; i < l.l->n; i++) {
        trender_step(r);
        struct tv x = l.l->items[i];
        if (at.kind == TV_STR) {
            x = attr_path(r, x, at.s->s);
            if (x.kind == TV_UNDEF)
                x = targ(a, 99, "default", x);
        } else if (a->n_pos && a->pos[0].kind == TV_STR) {
            struct targs fa = {.pos = a->pos + 1, .n_pos = a->n_pos - 1};
            x = tfilter_apply(r, a->pos[0].s->s, x, &fa);
        } else {
            FAIL("map: expected a filter name or attribute=");
        }
        tv_list_push(r->a, out, x);
    }
    return out;
}

static struct tv do_unique(struct trender *r, struct tv v, struct targs *a) {
    struct tv l = items_of(r, v);
    bool cs = tv_truthy(targ(a, 0, "case_sensitive", tv_bool(false)));
    struct tv out = tv_list(r->a, l.l->n + 1), seen = tv_list(r->a, l.l->n + 1);
    for (size_t i = 0; i < l.l->n; i++) {
        trender_step(r);
        struct tv k = l.l->items[i];
        if (!cs && k.kind == TV_STR)
            k = do_case(r, k.s, CASE_LOWER);
        bool dup = false;
        for (size_t j = 0; j < seen.l->n && !dup; j++)
            dup = tv_equal(seen.l->items[j], k);
        if (!dup) {
            tv_list_push(r->a, seen, k);
            tv_list_push(r->a, out, l.l->items[i]);
        }
    }
    return out;
}

/* ---- the filter table ------------------------------------------------------
 * One function a filter (or a family sharing code, told apart by `name`),
 * looked up by name in filter_table below. */
typedef struct tv (*tfilter_fn)(struct trender *r, const char *name, struct tv v, struct targs *a);

static struct tv f_default(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)name;
    bool boolean = tv_truthy(targ(a, 1, "boolean", tv_bool(false)));
    if (v.kind == TV_UNDEF || (boolean && !tv_truthy(v)))
        return targ(a, 0, "default_value", tv_cstr(r->a, ""));
    return v;
}

static struct tv f_length(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)name, (void)a;
    switch (v.kind) {
    case TV_STR:
        return tv_int((int64_t)utf8_len(v.s->s, v.s->len));
    case TV_LIST:
        if (v.l->is_gen)
            FAIL("object of type 'generator' has no len()");
        return tv_int((int64_t)v.l->n);
    case TV_DICT:
        return tv_int((int64_t)v.d->n);
    case TV_UNDEF:
        return tv_int(0);
    default:
        FAIL("object of type '%s' has no len()", tv_type_name(v));
    }
}

static struct tv f_tojson(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)name;
    return do_tojson(r, v, a);
}

static struct tv f_safe(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)name, (void)a;
    struct tstr *s = tarena_alloc(r->a, sizeof(*s));
    *s = *tstr_of(r, v);
    s->safe = true;
    return tv_strv(s);
}

static struct tv f_string(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)name, (void)a;
    return tv_strv(tstr_of(r, v));
}

static struct tv f_list(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)name, (void)a;
    return items_of(r, v);
}

static struct tv f_items(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)name;
    if (v.kind == TV_UNDEF)
        return tv_list(r->a, 1);
    if (v.kind != TV_DICT)
        FAIL("can only get item pairs from a mapping");
    return m_items(r, v, a);
}

static struct tv f_first_last(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)a;
    struct tv l = items_of(r, v);
    if (!l.l->n)
        return tv_undef_v;
    return l.l->items[name[0] == 'f' ? 0 : l.l->n - 1];
}

static struct tv f_reverse(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)name, (void)a;
    if (v.kind == TV_STR) {
        struct tv l = items_of(r, v);
        struct tbuf b;
        tbuf_init(&b, r->a, 0);
        for (size_t i = l.l->n; i-- > 0;)
            tbuf_put_str(&b, l.l->items[i].s);
        return tv_strv(tbuf_finish(&b));
    }
    struct tv l = items_of(r, v), out = tv_list(r->a, l.l->n + 1);
    for (size_t i = l.l->n; i-- > 0;)
        tv_list_push(r->a, out, l.l->items[i]);
    return out;
}

static struct tv f_join(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)name;
    struct tv sep = targ(a, 0, "d", tv_cstr(r->a, ""));
    struct tv at = targ(a, 1, "attribute", tv_none_v);
    return join_impl(r, tstr_of(r, sep), v, at.kind == TV_STR ? at.s->s : NULL);
}

/* selectattr / rejectattr / select / reject */
static struct tv f_select(struct trender *r, const char *name, struct tv v, struct targs *a) {
    return select_impl(r, v, a, strstr(name, "attr") != NULL, name[0] == 'r');
}

static struct tv f_map(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)name;
    return do_map(r, v, a);
}

static struct tv f_unique(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)name;
    return do_unique(r, v, a);
}

static struct tv f_indent(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)name;
    return do_indent(r, v, a);
}

static struct tv f_abs(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)name, (void)a;
    if (v.kind == TV_INT) {
        if (v.i == INT64_MIN)
            FAIL("integer overflow");
        return tv_int(v.i < 0 ? -v.i : v.i);
    }
    if (v.kind == TV_FLOAT)
        return tv_float(fabs(v.f));
    FAIL("bad operand type for abs(): '%s'", tv_type_name(v));
}

static struct tv f_int(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)name;
    struct tv d = targ(a, 0, "default", tv_int(0));
    if (v.kind == TV_INT)
        return v;
    if (v.kind == TV_BOOL)
        return tv_int(v.b);
    /* Jinja's do_int: int(value), else int(float(value)), else default;
     * int(inf) raises in Python, and values past int64 have no strata
     * representation: both are errors here rather than a wrong number. */
    if (v.kind == TV_FLOAT)
        return isnan(v.f) ? d : tv_int(float_to_int(r, v.f));
    if (v.kind == TV_STR) {
        char *end;
        errno = 0;
        long long x = strtoll(v.s->s, &end, 10);
        while (*end == ' ')
            end++;
        if (end != v.s->s && !*end) {
            if (errno == ERANGE)
                FAIL("int: integer overflow");
            return tv_int(x);
        }
        double f = strtod(v.s->s, &end);
        if (end != v.s->s && !*end && !isnan(f))
            return tv_int(float_to_int(r, f));
    }
    return d;
}

static struct tv f_float(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)r, (void)name;
    struct tv d = targ(a, 0, "default", tv_float(0.0));
    if (v.kind == TV_INT || v.kind == TV_BOOL)
        return tv_float(v.kind == TV_INT ? (double)v.i : v.b);
    if (v.kind == TV_FLOAT)
        return v;
    if (v.kind == TV_STR) {
        char *end;
        double f = strtod(v.s->s, &end);
        if (end != v.s->s && !*end)
            return tv_float(f);
    }
    return d;
}

static struct tv f_round(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)name;
    return do_round(r, v, a);
}

static struct tv f_batch(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)name;
    int64_t n = targ_int(r, targ(a, 0, "linecount", tv_undef_v), "linecount");
    if (n <= 0)
        FAIL("batch: size must be positive");
    struct tv fill = targ(a, 1, "fill_with", tv_none_v);
    struct tv l = items_of(r, v), out = tv_list(r->a, 4), cur = tv_list(r->a, 4);
    for (size_t i = 0; i < l.l->n; i++) {
        tv_list_push(r->a, cur, l.l->items[i]);
        if ((int64_t)cur.l->n == n) {
            tv_list_push(r->a, out, cur);
            cur = tv_list(r->a, 4);
        }
    }
    if (cur.l->n) {
        if (fill.kind != TV_NONE)
            while ((int64_t)cur.l->n < n) {
                trender_step(r);
                tv_list_push(r->a, cur, fill);
            }
        tv_list_push(r->a, out, cur);
    }
    return out;
}

static struct tv f_wordcount(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)name, (void)a;
    struct tstr *s = tstr_of(r, v);
    int64_t c = 0;
    bool in = false;
    for (size_t i = 0; i < s->len; i++) {
        char ch = s->s[i];
        bool w = alpha(ch) || (ch >= '0' && ch <= '9') || ch == '_';
        if (w && !in)
            c++;
        in = w;
    }
    return tv_int(c);
}

static struct tv f_escape(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)name, (void)a;
    struct tstr *s = tstr_of(r, v);
    if (s->safe)
        return tv_strv(s);
    return tv_strv(thtml_escape(r, s));
}

static struct tv f_sort(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)name;
    bool reverse = tv_truthy(targ(a, 0, "reverse", tv_bool(false)));
    bool cs = tv_truthy(targ(a, 1, "case_sensitive", tv_bool(false)));
    struct tv at = targ(a, 2, "attribute", tv_none_v);
    struct tv l = items_of(r, v), out = tv_list(r->a, l.l->n + 1), keys = tv_list(r->a, l.l->n + 1);
    for (size_t i = 0; i < l.l->n; i++) {
        struct tv k = at.kind == TV_STR ? attr_path(r, l.l->items[i], at.s->s) : l.l->items[i];
        if (!cs && k.kind == TV_STR)
            k = do_case(r, k.s, CASE_LOWER);
        tv_list_push(r->a, keys, k);
        tv_list_push(r->a, out, l.l->items[i]);
    }
    /* stable insertion sort (lists in templates are short) */
    for (size_t i = 1; i < out.l->n; i++) {
        for (size_t j = i; j > 0; j--) {
            trender_step(r);
            bool ok;
            int c = tv_compare(keys.l->items[j - 1], keys.l->items[j], &ok);
            if (!ok)
                FAIL("sort: values are not comparable");
            if (reverse ? c >= 0 : c <= 0)
                break;
            struct tv t = keys.l->items[j];
            keys.l->items[j] = keys.l->items[j - 1];
            keys.l->items[j - 1] = t;
            t = out.l->items[j];
            out.l->items[j] = out.l->items[j - 1];
            out.l->items[j - 1] = t;
        }
    }
    return out;
}

/* string filters: soft_str(value) first (undefined -> "") */
static struct tv f_trim(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)name;
    return do_strip(r, tstr_of(r, v), opt_chars(r, targ(a, 0, "chars", tv_none_v)), true, true);
}

static struct tv f_case(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)a;
    const enum casemode m = name[0] == 'u'   ? CASE_UPPER
                            : name[0] == 'l' ? CASE_LOWER
                            : name[0] == 't' ? CASE_JTITLE
                                             : CASE_CAPITALIZE;
    return do_case(r, tstr_of(r, v), m);
}

static struct tv f_replace(struct trender *r, const char *name, struct tv v, struct targs *a) {
    (void)name;
    struct tstr *s = tstr_of(r, v);
    struct tstr *o = tstr_of(r, targ(a, 0, "old", tv_undef_v));
    struct tstr *n = tstr_of(r, targ(a, 1, "new", tv_undef_v));
    struct tv c = targ(a, 2, "count", tv_none_v);
    return do_replace(r, s, o, n, c.kind == TV_NONE ? -1 : targ_int(r, c, "count"));
}

static const struct {
    const char *name;
    tfilter_fn fn;
} filter_table[] = {
    {"abs", f_abs},         {"batch", f_batch},         {"capitalize", f_case},
    {"count", f_length},    {"d", f_default},           {"default", f_default},
    {"e", f_escape},        {"escape", f_escape},       {"first", f_first_last},
    {"float", f_float},     {"indent", f_indent},       {"int", f_int},
    {"items", f_items},     {"join", f_join},           {"last", f_first_last},
    {"length", f_length},   {"list", f_list},           {"lower", f_case},
    {"map", f_map},         {"reject", f_select},       {"rejectattr", f_select},
    {"replace", f_replace}, {"reverse", f_reverse},     {"round", f_round},
    {"safe", f_safe},       {"select", f_select},       {"selectattr", f_select},
    {"sort", f_sort},       {"string", f_string},       {"title", f_case},
    {"tojson", f_tojson},   {"trim", f_trim},           {"unique", f_unique},
    {"upper", f_case},      {"wordcount", f_wordcount},
};

struct tv tfilter_apply(struct trender *r, const char *name, struct tv v, struct targs *a) {
    trender_step(r);
    for (size_t i = 0; i < sizeof filter_table / sizeof filter_table[0]; i++)
        if (!strcmp(name, filter_table[i].name))
            return filter_table[i].fn(r, name, v, a);
    FAIL("no filter named '%s'", name);
}

struct tstr *thtml_escape(struct trender *r, const struct tstr *s) {
    struct tbuf b;
    tbuf_init(&b, r->a, r->lim->max_output_bytes);
    bool t = s->nr != 0;
    for (size_t i = 0; i < s->len; i++) {
        const char *e = s->s[i] == '&'    ? "&amp;"
                        : s->s[i] == '<'  ? "&lt;"
                        : s->s[i] == '>'  ? "&gt;"
                        : s->s[i] == '"'  ? "&#34;"
                        : s->s[i] == '\'' ? "&#39;"
                                          : NULL;
        if (e)
            tbuf_put(&b, e, strlen(e), t);
        else
            tbuf_put(&b, s->s + i, 1, t);
    }
    struct tstr *o = tbuf_finish(&b);
    o->safe = true;
    return o;
}
