/* engine/text/template-value.c: arena, values, tainted strings, Python str()/repr(),
 * json.dumps and comparisons for the template interpreter. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/template-impl.h"

/* ---- arena ------------------------------------------------------------------- */

struct tchunk {
    struct tchunk *next;
    size_t size, used;
    max_align_t data[];
};

#define TCHUNK_MIN (64 * 1024)

_Noreturn void tarena_fail(struct tarena *a, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    strata_error_setv(a->err, code, fmt, ap);
    va_end(ap);
    longjmp(*a->on_fail, 1);
}

void *tarena_alloc(struct tarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    struct tchunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t size = n > TCHUNK_MIN ? n : TCHUNK_MIN;
        if (a->limit && a->used + size > a->limit)
            tarena_fail(a, STRATA_E_LIMIT, "template memory limit (%zu bytes) exceeded", a->limit);
        c = malloc(sizeof(*c) + size);
        if (!c)
            tarena_fail(a, STRATA_E_NOMEM, "template: out of memory");
        c->size = size;
        c->used = 0;
        c->next = a->head;
        a->head = c;
        a->used += size;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

void *tarena_grow(struct tarena *a, void *old, size_t n, size_t *cap, size_t need, size_t elem,
                  size_t first) {
    if (need <= *cap)
        return old;
    size_t c = *cap ? *cap : first;
    while (c < need) {
        if (c > SIZE_MAX / 2 / elem)
            tarena_fail(a, STRATA_E_NOMEM, "template: out of memory");
        c *= 2;
    }
    void *p = tarena_alloc(a, c * elem);
    if (n)
        memcpy(p, old, n * elem);
    *cap = c;
    return p;
}

char *tarena_strndup(struct tarena *a, const char *s, size_t n) {
    char *p = tarena_alloc(a, n + 1);
    if (n)
        memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void tarena_free(struct tarena *a) {
    struct tchunk *c = a->head;
    while (c) {
        struct tchunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->used = 0;
}

/* ---- constructors -------------------------------------------------------------- */

const struct tv tv_undef_v = {.kind = TV_UNDEF};
const struct tv tv_none_v = {.kind = TV_NONE};

struct tv tv_bool(bool b) {
    return (struct tv){.kind = TV_BOOL, .b = b};
}
struct tv tv_int(int64_t i) {
    return (struct tv){.kind = TV_INT, .i = i};
}
struct tv tv_float(double f) {
    return (struct tv){.kind = TV_FLOAT, .f = f};
}
struct tv tv_strv(struct tstr *s) {
    return (struct tv){.kind = TV_STR, .s = s};
}

struct tv tv_str(struct tarena *a, const char *s, size_t n, bool tainted) {
    struct tstr *t = tarena_alloc(a, sizeof(*t));
    t->s = tarena_strndup(a, s, n);
    t->len = n;
    if (tainted && n) {
        t->r = tarena_alloc(a, sizeof(*t->r));
        t->r[0] = (struct trange){0, n};
        t->nr = 1;
    }
    return tv_strv(t);
}

struct tv tv_cstr(struct tarena *a, const char *s) {
    return tv_str(a, s, strlen(s), false);
}

struct tv tv_list(struct tarena *a, size_t cap) {
    struct tlist *l = tarena_alloc(a, sizeof(*l));
    l->cap = cap ? cap : 4;
    l->items = tarena_alloc(a, l->cap * sizeof(struct tv));
    return (struct tv){.kind = TV_LIST, .l = l};
}

struct tv tv_dict(struct tarena *a, size_t cap) {
    struct tdict *d = tarena_alloc(a, sizeof(*d));
    d->cap = cap ? cap : 4;
    d->keys = tarena_alloc(a, d->cap * sizeof(struct tv));
    d->vals = tarena_alloc(a, d->cap * sizeof(struct tv));
    return (struct tv){.kind = TV_DICT, .d = d};
}

void tv_list_push(struct tarena *a, struct tv list, struct tv item) {
    struct tlist *l = list.l;
    l->items = tarena_grow(a, l->items, l->n, &l->cap, l->n + 1, sizeof(struct tv), 4);
    l->items[l->n++] = item;
}

struct tv *tv_dict_get(struct tv dict, struct tv key) {
    struct tdict *d = dict.d;
    for (size_t i = 0; i < d->n; i++)
        if (tv_equal(d->keys[i], key))
            return &d->vals[i];
    return NULL;
}

struct tv *tv_dict_gets(struct tv dict, const char *key) {
    struct tdict *d = dict.d;
    size_t n = strlen(key);
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i].kind == TV_STR && d->keys[i].s->len == n && !memcmp(d->keys[i].s->s, key, n))
            return &d->vals[i];
    return NULL;
}

void tv_dict_set(struct tarena *a, struct tv dict, struct tv key, struct tv val) {
    struct tv *slot = tv_dict_get(dict, key);
    if (slot) {
        *slot = val;
        return;
    }
    struct tdict *d = dict.d;
    if (d->n == d->cap) {
        size_t kcap = d->cap;
        d->keys = tarena_grow(a, d->keys, d->n, &kcap, d->n + 1, sizeof(struct tv), 4);
        d->vals = tarena_grow(a, d->vals, d->n, &d->cap, d->n + 1, sizeof(struct tv), 4);
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
}

struct tv tv_from_json(struct tarena *a, const json_t *j, bool tainted) {
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        struct tv d = tv_dict(a, json_object_size(j));
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v) {
            tv_dict_set(a, d, tv_str(a, k, strlen(k), tainted), tv_from_json(a, v, tainted));
        }
        return d;
    }
    case JSON_ARRAY: {
        struct tv l = tv_list(a, json_array_size(j));
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) {
            tv_list_push(a, l, tv_from_json(a, v, tainted));
        }
        return l;
    }
    case JSON_STRING:
        return tv_str(a, json_string_value(j), json_string_length(j), tainted);
    case JSON_INTEGER:
        return tv_int(json_integer_value(j));
    case JSON_REAL:
        return tv_float(json_real_value(j));
    case JSON_TRUE:
        return tv_bool(true);
    case JSON_FALSE:
        return tv_bool(false);
    default:
        return tv_none_v;
    }
}

/* ---- predicates ------------------------------------------------------------------ */

bool tv_truthy(struct tv v) {
    switch (v.kind) {
    case TV_UNDEF:
    case TV_NONE:
        return false;
    case TV_BOOL:
        return v.b;
    case TV_INT:
        return v.i != 0;
    case TV_FLOAT:
        return v.f != 0.0;
    case TV_STR:
        return v.s->len != 0;
    case TV_LIST:
        return v.l->n != 0;
    case TV_DICT:
        return v.d->is_ns || v.d->n != 0;
    default:
        return true;
    }
}

static bool is_num(struct tv v) {
    return v.kind == TV_BOOL || v.kind == TV_INT || v.kind == TV_FLOAT;
}
static double num_f(struct tv v) {
    return v.kind == TV_FLOAT ? v.f : v.kind == TV_INT ? (double)v.i : (double)v.b;
}
static int64_t num_i(struct tv v) {
    return v.kind == TV_INT ? v.i : (int64_t)v.b;
}

bool tv_equal(struct tv a, struct tv b) {
    if (is_num(a) && is_num(b)) {
        if (a.kind == TV_FLOAT || b.kind == TV_FLOAT)
            return num_f(a) == num_f(b);
        return num_i(a) == num_i(b);
    }
    if (a.kind != b.kind)
        return false;
    switch (a.kind) {
    case TV_UNDEF:
    case TV_NONE:
        return true;
    case TV_STR:
        return a.s->len == b.s->len && !memcmp(a.s->s, b.s->s, a.s->len);
    case TV_LIST:
        if (a.l->n != b.l->n || a.l->is_tuple != b.l->is_tuple)
            return false;
        for (size_t i = 0; i < a.l->n; i++)
            if (!tv_equal(a.l->items[i], b.l->items[i]))
                return false;
        return true;
    case TV_DICT:
        if (a.d->is_ns || b.d->is_ns)
            return a.d == b.d;
        if (a.d->n != b.d->n)
            return false;
        for (size_t i = 0; i < a.d->n; i++) {
            struct tv *o = tv_dict_get(b, a.d->keys[i]);
            if (!o || !tv_equal(a.d->vals[i], *o))
                return false;
        }
        return true;
    case TV_FUNC:
        return a.fn == b.fn;
    default:
        return false;
    }
}

int tv_compare(struct tv a, struct tv b, bool *ok) {
    *ok = true;
    if (is_num(a) && is_num(b)) {
        if (a.kind == TV_FLOAT || b.kind == TV_FLOAT) {
            double x = num_f(a), y = num_f(b);
            return x < y ? -1 : x > y ? 1 : 0;
        }
        int64_t x = num_i(a), y = num_i(b);
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.kind == TV_STR && b.kind == TV_STR) {
        size_t n = a.s->len < b.s->len ? a.s->len : b.s->len;
        int c = memcmp(a.s->s, b.s->s, n); /* UTF-8 byte order = code point order */
        if (c)
            return c < 0 ? -1 : 1;
        return a.s->len < b.s->len ? -1 : a.s->len > b.s->len ? 1 : 0;
    }
    if (a.kind == TV_LIST && b.kind == TV_LIST && a.l->is_tuple == b.l->is_tuple) {
        for (size_t i = 0; i < a.l->n && i < b.l->n; i++) {
            if (tv_equal(a.l->items[i], b.l->items[i]))
                continue;
            return tv_compare(a.l->items[i], b.l->items[i], ok);
        }
        return a.l->n < b.l->n ? -1 : a.l->n > b.l->n ? 1 : 0;
    }
    *ok = false;
    return 0;
}

bool tv_is_tainted(struct tv v) {
    switch (v.kind) {
    case TV_STR:
        return v.s->nr != 0;
    case TV_LIST:
        for (size_t i = 0; i < v.l->n; i++)
            if (tv_is_tainted(v.l->items[i]))
                return true;
        return false;
    case TV_DICT:
        for (size_t i = 0; i < v.d->n; i++)
            if (tv_is_tainted(v.d->keys[i]) || tv_is_tainted(v.d->vals[i]))
                return true;
        return false;
    default:
        return false;
    }
}

const char *tv_type_name(struct tv v) {
    static const char *names[] = {"Undefined", "NoneType", "bool", "int",     "float",
                                  "str",       "list",     "dict", "function"};
    if (v.kind == TV_LIST && v.l->is_tuple)
        return "tuple";
    if (v.kind == TV_DICT && v.d->is_ns)
        return "Namespace";
    if (v.kind == TV_LIST && v.l->is_gen)
        return "generator";
    return names[v.kind];
}

/* ---- UTF-8 ------------------------------------------------------------------------- */

size_t utf8_len(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80)
            c++;
    return c;
}

size_t utf8_offset(const char *s, size_t n, size_t idx) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) {
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (c == idx)
                return i;
            c++;
        }
    }
    return n;
}

/* ---- string builder ------------------------------------------------------------------ */

void tbuf_init(struct tbuf *b, struct tarena *a, size_t max) {
    memset(b, 0, sizeof(*b));
    b->a = a;
    b->max = max;
}

void tbuf_put(struct tbuf *b, const char *s, size_t n, bool tainted) {
    if (!n)
        return;
    if (b->max && b->len + n > b->max)
        tarena_fail(b->a, STRATA_E_LIMIT, "template output limit (%zu bytes) exceeded", b->max);
    b->s = tarena_grow(b->a, b->s, b->len, &b->cap, b->len + n + 1, 1, 64);
    memcpy(b->s + b->len, s, n);
    if (tainted) {
        if (b->nr && b->r[b->nr - 1].off + b->r[b->nr - 1].len == b->len) {
            b->r[b->nr - 1].len += n;
        } else {
            b->r = tarena_grow(b->a, b->r, b->nr, &b->rcap, b->nr + 1, sizeof(*b->r), 8);
            b->r[b->nr++] = (struct trange){b->len, n};
        }
    }
    b->len += n;
    b->s[b->len] = '\0';
}

void tbuf_puts(struct tbuf *b, const char *s) {
    tbuf_put(b, s, strlen(s), false);
}

void tbuf_put_str(struct tbuf *b, const struct tstr *s) {
    size_t pos = 0;
    for (size_t i = 0; i < s->nr; i++) {
        tbuf_put(b, s->s + pos, s->r[i].off - pos, false);
        tbuf_put(b, s->s + s->r[i].off, s->r[i].len, true);
        pos = s->r[i].off + s->r[i].len;
    }
    tbuf_put(b, s->s + pos, s->len - pos, false);
}

struct tstr *tbuf_finish(struct tbuf *b) {
    struct tstr *t = tarena_alloc(b->a, sizeof(*t));
    t->s = b->s ? b->s : "";
    t->len = b->len;
    t->r = b->r;
    t->nr = b->nr;
    return t;
}

/* ---- str() / repr() ------------------------------------------------------------------- */

void tv_write_float(struct tbuf *b, double f) {
    char buf[40];
    if (isnan(f)) {
        tbuf_puts(b, "nan");
        return;
    }
    if (isinf(f)) {
        tbuf_puts(b, f < 0 ? "-inf" : "inf");
        return;
    }
    /* Shortest digits that round-trip, as Python's repr. */
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof(buf), "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f)
            break;
    }
    /* buf = "-d.ddde[+-]XX": split mantissa digits and exponent. */
    char digits[24];
    size_t nd = 0;
    const char *p = buf;
    bool neg = *p == '-';
    if (neg)
        p++;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9')
            digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    char out[64];
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    if (exp10 < -4 || exp10 >= 16) {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (size_t i = 1; i < nd; i++)
                out[o++] = digits[i];
        }
        o += (size_t)snprintf(out + o, sizeof(out) - o, "e%c%02d", exp10 < 0 ? '-' : '+',
                              exp10 < 0 ? -exp10 : exp10);
    } else if (exp10 < 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < -exp10 - 1; i++)
            out[o++] = '0';
        for (size_t i = 0; i < nd; i++)
            out[o++] = digits[i];
    } else {
        for (int i = 0; i <= exp10; i++)
            out[o++] = (size_t)i < nd ? digits[i] : '0';
        out[o++] = '.';
        if ((size_t)exp10 + 1 < nd)
            for (size_t i = (size_t)exp10 + 1; i < nd; i++)
                out[o++] = digits[i];
        else
            out[o++] = '0';
    }
    out[o] = '\0';
    tbuf_puts(b, out);
}

static void write_int(struct tbuf *b, int64_t i) {
    char buf[32];
    snprintf(buf, sizeof(buf), "%lld", (long long)i);
    tbuf_puts(b, buf);
}

/* Python repr(str): single quotes unless the text has ' and no ". */
static void write_str_repr(struct tbuf *b, const struct tstr *s) {
    bool t = s->nr != 0;
    char q = memchr(s->s, '\'', s->len) && !memchr(s->s, '"', s->len) ? '"' : '\'';
    tbuf_put(b, &q, 1, false);
    for (size_t i = 0; i < s->len; i++) {
        unsigned char c = (unsigned char)s->s[i];
        char esc[8];
        if (c == '\\' || c == (unsigned char)q) {
            esc[0] = '\\';
            esc[1] = (char)c;
            tbuf_put(b, esc, 2, t);
        } else if (c == '\n') {
            tbuf_put(b, "\\n", 2, t);
        } else if (c == '\r') {
            tbuf_put(b, "\\r", 2, t);
        } else if (c == '\t') {
            tbuf_put(b, "\\t", 2, t);
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof(esc), "\\x%02x", c);
            tbuf_put(b, esc, 4, t);
        } else {
            tbuf_put(b, (const char *)&s->s[i], 1, t);
        }
    }
    tbuf_put(b, &q, 1, false);
}

void tv_write_repr(struct tbuf *b, struct tv v) {
    switch (v.kind) {
    case TV_STR:
        write_str_repr(b, v.s);
        return;
    case TV_LIST: {
        if (v.l->is_gen)
            tarena_fail(b->a, STRATA_E_TEMPLATE, "cannot print a generator (add |list)");
        tbuf_puts(b, v.l->is_tuple ? "(" : "[");
        for (size_t i = 0; i < v.l->n; i++) {
            if (i)
                tbuf_puts(b, ", ");
            tv_write_repr(b, v.l->items[i]);
        }
        if (v.l->is_tuple && v.l->n == 1)
            tbuf_puts(b, ",");
        tbuf_puts(b, v.l->is_tuple ? ")" : "]");
        return;
    }
    case TV_DICT:
        if (v.d->is_ns) {
            tbuf_puts(b, "<Namespace ");
        } else {
            tbuf_puts(b, "{");
        }
        for (size_t i = 0; i < v.d->n; i++) {
            if (i)
                tbuf_puts(b, ", ");
            tv_write_repr(b, v.d->keys[i]);
            tbuf_puts(b, v.d->is_ns ? "=" : ": ");
            tv_write_repr(b, v.d->vals[i]);
        }
        tbuf_puts(b, v.d->is_ns ? ">" : "}");
        return;
    default:
        tv_write_str(b, v);
    }
}

void tv_write_str(struct tbuf *b, struct tv v) {
    switch (v.kind) {
    case TV_UNDEF:
        return;
    case TV_NONE:
        tbuf_puts(b, "None");
        return;
    case TV_BOOL:
        tbuf_puts(b, v.b ? "True" : "False");
        return;
    case TV_INT:
        write_int(b, v.i);
        return;
    case TV_FLOAT:
        tv_write_float(b, v.f);
        return;
    case TV_STR:
        tbuf_put_str(b, v.s);
        return;
    case TV_FUNC:
        tbuf_puts(b, "<function ");
        tbuf_puts(b, v.fn->name ? v.fn->name : "?");
        tbuf_puts(b, ">");
        return;
    default:
        tv_write_repr(b, v);
    }
}

struct tstr *tv_to_str(struct tarena *a, struct tv v, size_t max) {
    if (v.kind == TV_STR)
        return v.s;
    struct tbuf b;
    tbuf_init(&b, a, max);
    tv_write_str(&b, v);
    return tbuf_finish(&b);
}

/* ---- json.dumps ------------------------------------------------------------------------ */

static void json_write_string(struct tbuf *b, const struct tstr *s) {
    bool t = s->nr != 0;
    tbuf_put(b, "\"", 1, false);
    for (size_t i = 0; i < s->len; i++) {
        unsigned char c = (unsigned char)s->s[i];
        char esc[8];
        const char *e = NULL;
        switch (c) {
        case '"':
            e = "\\\"";
            break;
        case '\\':
            e = "\\\\";
            break;
        case '\n':
            e = "\\n";
            break;
        case '\r':
            e = "\\r";
            break;
        case '\t':
            e = "\\t";
            break;
        case '\b':
            e = "\\b";
            break;
        case '\f':
            e = "\\f";
            break;
        default:
            if (c < 0x20) {
                snprintf(esc, sizeof(esc), "\\u%04x", c);
                e = esc;
            }
        }
        if (e)
            tbuf_put(b, e, strlen(e), t);
        else
            tbuf_put(b, (const char *)&s->s[i], 1, t);
    }
    tbuf_put(b, "\"", 1, false);
}

static void json_newline(struct tbuf *b, const char *indent, int depth) {
    tbuf_puts(b, "\n");
    for (int i = 0; i < depth; i++)
        tbuf_puts(b, indent);
}

/* Order of a dict's entries for json.dumps(sort_keys=True): Python's
 * sorted(d.items()) compares keys, so keys must be all strings or all
 * numbers (None and mixed kinds raise TypeError there too). A merge sort of
 * indices: stable, and safe with any comparator (NaN keys). */
static size_t *json_key_order(struct tbuf *b, const struct tdict *d) {
    bool str = d->keys[0].kind == TV_STR;
    for (size_t i = 0; i < d->n && d->n > 1; i++) { /* one key is never compared */
        enum tv_kind k = d->keys[i].kind;
        bool num = k == TV_INT || k == TV_FLOAT || k == TV_BOOL;
        if (str ? k != TV_STR : !num)
            tarena_fail(b->a, STRATA_E_TEMPLATE,
                        "tojson(sort_keys=True): keys of type '%s' and '%s' cannot be compared",
                        tv_type_name(d->keys[0]), tv_type_name(d->keys[i]));
    }
    size_t *ix = tarena_alloc(b->a, d->n * sizeof(size_t));
    size_t *tmp = tarena_alloc(b->a, d->n * sizeof(size_t));
    for (size_t i = 0; i < d->n; i++)
        ix[i] = i;
    for (size_t w = 1; w < d->n; w *= 2) {
        for (size_t lo = 0; lo < d->n; lo += 2 * w) {
            size_t mid = lo + w < d->n ? lo + w : d->n;
            size_t hi = lo + 2 * w < d->n ? lo + 2 * w : d->n;
            size_t i = lo, j = mid, k = lo;
            bool ok;
            while (i < mid && j < hi)
                tmp[k++] = tv_compare(d->keys[ix[j]], d->keys[ix[i]], &ok) < 0 ? ix[j++] : ix[i++];
            while (i < mid)
                tmp[k++] = ix[i++];
            while (j < hi)
                tmp[k++] = ix[j++];
        }
        size_t *t = ix;
        ix = tmp;
        tmp = t;
    }
    return ix;
}

void tv_write_json(struct tbuf *b, struct tv v, const char *indent, const char *item_sep,
                   const char *key_sep, bool sort_keys, int depth) {
    if (depth > 200)
        tarena_fail(b->a, STRATA_E_LIMIT, "tojson: nesting too deep");
    switch (v.kind) {
    case TV_NONE:
        tbuf_puts(b, "null");
        return;
    case TV_BOOL:
        tbuf_puts(b, v.b ? "true" : "false");
        return;
    case TV_INT:
        write_int(b, v.i);
        return;
    case TV_FLOAT:
        if (isnan(v.f))
            tbuf_puts(b, "NaN");
        else if (isinf(v.f))
            tbuf_puts(b, v.f < 0 ? "-Infinity" : "Infinity");
        else
            tv_write_float(b, v.f);
        return;
    case TV_STR:
        json_write_string(b, v.s);
        return;
    case TV_LIST:
        if (v.l->is_gen)
            break;
        if (!v.l->n) {
            tbuf_puts(b, "[]");
            return;
        }
        tbuf_puts(b, "[");
        for (size_t i = 0; i < v.l->n; i++) {
            if (i)
                tbuf_puts(b, item_sep);
            if (indent)
                json_newline(b, indent, depth + 1);
            tv_write_json(b, v.l->items[i], indent, item_sep, key_sep, sort_keys, depth + 1);
        }
        if (indent)
            json_newline(b, indent, depth);
        tbuf_puts(b, "]");
        return;
    case TV_DICT:
        if (v.d->is_ns)
            break;
        if (!v.d->n) {
            tbuf_puts(b, "{}");
            return;
        }
        tbuf_puts(b, "{");
        size_t *order = sort_keys ? json_key_order(b, v.d) : NULL;
        for (size_t e = 0; e < v.d->n; e++) {
            size_t i = order ? order[e] : e;
            if (e)
                tbuf_puts(b, item_sep);
            if (indent)
                json_newline(b, indent, depth + 1);
            struct tv k = v.d->keys[i];
            if (k.kind == TV_STR) {
                json_write_string(b, k.s);
            } else if (k.kind == TV_NONE || k.kind == TV_BOOL || k.kind == TV_INT ||
                       k.kind == TV_FLOAT) {
                tbuf_puts(b, "\"");
                if (k.kind == TV_NONE)
                    tbuf_puts(b, "null");
                else if (k.kind == TV_BOOL)
                    tbuf_puts(b, k.b ? "true" : "false");
                else
                    tv_write_json(b, k, NULL, ", ", ": ", false, depth + 1);
                tbuf_puts(b, "\"");
            } else {
                tarena_fail(b->a, STRATA_E_TEMPLATE,
                            "tojson: keys must be str, int, float, bool "
                            "or None");
            }
            tbuf_puts(b, key_sep);
            tv_write_json(b, v.d->vals[i], indent, item_sep, key_sep, sort_keys, depth + 1);
        }
        if (indent)
            json_newline(b, indent, depth);
        tbuf_puts(b, "}");
        return;
    default:
        break;
    }
    tarena_fail(b->a, STRATA_E_TEMPLATE, "tojson: Object of type %s is not JSON serializable",
                tv_type_name(v));
}
