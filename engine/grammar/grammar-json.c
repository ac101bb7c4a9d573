/* engine/grammar/grammar-json.c: JSON values and the JSON Schema compiler
 * (what is supported: grammar.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar-impl.h"

#define SCHEMA_MAX_DEPTH 64
#define SCHEMA_MAX_COUNT 4096
#define SCHEMA_MAX_LIT (64 * 1024)
#define SCHEMA_MAX_REFS 1024
#define SCHEMA_MAX_BRANCHES 1024 /* enum values, anyOf branches: threads (grammar-impl.h) */
#define SCHEMA_MAX_OPTIONAL 256  /* optional properties of one object */

#define TRY(x)                                                                                     \
    do {                                                                                           \
        if ((x) < 0)                                                                               \
            return -1;                                                                             \
    } while (0)

/* ---- any JSON value ---------------------------------------------------------- */

/* The structure of an object or array around element `elem`: open WS
 * (close | elem ("," WS elem)* WS close). */
static int container(struct grammar_builder *b, const char *open, const char *close, int elem,
                     struct strata_error *err) {
    int ws = gb_ws(b, err), o = gb_lit_str(b, open, err), c = gb_lit_str(b, close, err),
        comma = gb_lit_str(b, ",", err);
    if (ws < 0 || o < 0 || c < 0 || comma < 0)
        return -1;
    int more = gb_seq(b, err, 3, comma, ws, elem);
    int reps = more < 0 ? -1 : grammar_repeat(b, more, 0, -1, err);
    int list = reps < 0 ? -1 : gb_seq(b, err, 4, elem, reps, ws, c);
    int body = list < 0 ? -1 : grammar_alt(b, (int[]){c, list}, 2, err);
    return body < 0 ? -1 : gb_seq(b, err, 3, o, ws, body);
}

static int make_json(struct grammar_builder *b, struct strata_error *err) {
    if (b->json_value >= 0)
        return 0;
    int v = gb_ref(b, err);
    int str = gb_str(b, 0, -1, err), num = gb_num(b, err), colon = gb_lit_str(b, ":", err);
    int ws = gb_ws(b, err);
    if (v < 0 || str < 0 || num < 0 || colon < 0 || ws < 0)
        return -1;
    int member = gb_seq(b, err, 4, str, colon, ws, v);
    int obj = member < 0 ? -1 : container(b, "{", "}", member, err);
    int arr = obj < 0 ? -1 : container(b, "[", "]", v, err);
    int t = gb_lit_str(b, "true", err), f = gb_lit_str(b, "false", err),
        n = gb_lit_str(b, "null", err);
    if (arr < 0 || t < 0 || f < 0 || n < 0)
        return -1;
    int any = grammar_alt(b, (int[]){obj, arr, str, num, t, f, n}, 7, err);
    if (any < 0)
        return -1;
    gb_ref_set(b, v, any);
    b->json_value = any;
    b->json_object = obj;
    return 0;
}

int grammar_json_value(struct grammar_builder *b, struct strata_error *err) {
    if (!b)
        return strata_error_set(err, STRATA_E_INVALID, "grammar: no builder");
    if (make_json(b, err) < 0)
        return err && err->code ? err->code : STRATA_E_NOMEM;
    return b->json_value;
}

int grammar_json_object(struct grammar_builder *b, struct strata_error *err) {
    if (!b)
        return strata_error_set(err, STRATA_E_INVALID, "grammar: no builder");
    if (make_json(b, err) < 0)
        return err && err->code ? err->code : STRATA_E_NOMEM;
    return b->json_object;
}

/* ---- the schema compiler --------------------------------------------------------- */

struct sctx {
    struct grammar_builder *b;
    const json_t *root;
    struct strata_error *err;
    int count;
    size_t lit_bytes;
    const json_t *ref_target[SCHEMA_MAX_REFS];
    int ref_node[SCHEMA_MAX_REFS];
    int n_refs;
    char path[512]; /* JSON pointer of the schema being compiled */
    size_t path_len;
};

static const char *where(struct sctx *c) {
    return c->path_len ? c->path : "the root";
}

static int bad(struct sctx *c, int code, const char *fmt, const char *a) {
    strata_error_set(c->err, code, fmt, a, where(c));
    return -1;
}

/* Appends "/seg" (escaped as a JSON pointer) to the path; returns the old length. */
static size_t push(struct sctx *c, const char *seg) {
    size_t old = c->path_len;
    char tmp[256];
    size_t k = 0;
    for (const char *p = seg; *p && k + 3 < sizeof tmp; p++) {
        if (*p == '~' || *p == '/') {
            tmp[k++] = '~';
            tmp[k++] = *p == '~' ? '0' : '1';
        } else {
            tmp[k++] = *p;
        }
    }
    tmp[k] = 0;
    int n = snprintf(c->path + old, sizeof c->path - old, "/%s", tmp);
    c->path_len = n < 0                               ? old
                  : old + (size_t)n >= sizeof c->path ? sizeof c->path - 1
                                                      : old + (size_t)n;
    return old;
}

static void pop(struct sctx *c, size_t old) {
    c->path_len = old;
    c->path[old] = 0;
}

static const char *const annotations[] = {"description", "title",     "default",  "examples",
                                          "$schema",     "$id",       "$comment", "deprecated",
                                          "readOnly",    "writeOnly", "$defs",    "definitions"};
static const char *const keywords[] = {"type",
                                       "properties",
                                       "required",
                                       "additionalProperties",
                                       "items",
                                       "minItems",
                                       "maxItems",
                                       "enum",
                                       "const",
                                       "minLength",
                                       "maxLength",
                                       "minimum",
                                       "maximum",
                                       "exclusiveMinimum",
                                       "exclusiveMaximum",
                                       "$ref",
                                       "anyOf",
                                       "oneOf",
                                       "allOf"};

static bool in_list(const char *k, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(k, list[i]) == 0)
            return true;
    return false;
}
#define IN(k, l) in_list((k), (l), sizeof(l) / sizeof((l)[0]))

static int compile(struct sctx *c, const json_t *s, int depth);

static int lit_json(struct sctx *c, const json_t *v, const char *what) {
    char *txt = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!txt)
        return bad(c, STRATA_E_INVALID, "JSON schema '%s' value cannot be written as JSON (at %s)",
                   what);
    size_t n = strlen(txt);
    c->lit_bytes += n;
    int rc = c->lit_bytes > SCHEMA_MAX_LIT
                 ? bad(c, STRATA_E_LIMIT, "JSON schema '%s' values exceed 64 KiB (at %s)", what)
                 : grammar_lit(c->b, txt, n, c->err);
    free(txt);
    return rc < 0 ? -1 : rc;
}

/* A non-negative integer keyword, or -1 when absent; -2 on error. */
static int64_t count_kw(struct sctx *c, const json_t *s, const char *kw) {
    const json_t *x = json_object_get(s, kw);
    if (!x)
        return -1;
    double d = json_is_integer(x) ? (double)json_integer_value(x)
               : json_is_real(x)  ? json_real_value(x)
                                  : -1;
    if (!json_is_number(x) || d < 0 || d != floor(d) || d > 1e9) {
        bad(c, STRATA_E_INVALID, "JSON schema '%s' must be a non-negative integer (at %s)", kw);
        return -2;
    }
    return (int64_t)d;
}

static bool is_type(const json_t *v, const char *t) {
    if (!strcmp(t, "object"))
        return json_is_object(v);
    if (!strcmp(t, "array"))
        return json_is_array(v);
    if (!strcmp(t, "string"))
        return json_is_string(v);
    if (!strcmp(t, "integer"))
        return json_is_integer(v) ||
               (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    if (!strcmp(t, "number"))
        return json_is_number(v);
    if (!strcmp(t, "boolean"))
        return json_is_boolean(v);
    return !strcmp(t, "null") && json_is_null(v);
}

/* Whether an enum/const value satisfies the schema's "type" (absent: yes). */
static bool type_ok(const json_t *s, const json_t *v) {
    const json_t *t = json_object_get(s, "type");
    if (json_is_string(t))
        return is_type(v, json_string_value(t));
    if (!json_is_array(t))
        return true;
    size_t i;
    const json_t *x;
    json_array_foreach(t, i,
                       x) if (json_is_string(x) && is_type(v, json_string_value(x))) return true;
    return false;
}

/* enum (or const, a one-value enum): the values that satisfy "type", written compactly */
static int c_enum(struct sctx *c, const json_t *s, const char *kw) {
    const json_t *e = json_object_get(s, kw);
    json_t *one = NULL;
    if (!strcmp(kw, "const"))
        e = one = json_pack("[O]", e);
    if (!json_is_array(e) || json_array_size(e) == 0) {
        json_decref(one);
        return bad(c, STRATA_E_INVALID, "JSON schema '%s' must be a non-empty array (at %s)", kw);
    }
    size_t n = json_array_size(e), k = 0;
    if (n > SCHEMA_MAX_BRANCHES) {
        json_decref(one);
        return bad(c, STRATA_E_LIMIT, "JSON schema '%s' has more than 1024 values (at %s)", kw);
    }
    int *ids = malloc(sizeof *ids * n);
    if (!ids) {
        json_decref(one);
        return strata_error_set(c->err, STRATA_E_NOMEM, "out of memory"), -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (!type_ok(s, json_array_get(e, i)))
            continue;
        if ((ids[k++] = lit_json(c, json_array_get(e, i), kw)) < 0) {
            free(ids);
            json_decref(one);
            return -1;
        }
    }
    json_decref(one);
    if (k == 0) {
        free(ids);
        return bad(c, STRATA_E_INVALID,
                   "JSON schema '%s' has no value of the schema's type (at %s)", kw);
    }
    int rc = grammar_alt(c->b, ids, (int)k, c->err);
    free(ids);
    return rc < 0 ? -1 : rc;
}

static int c_string(struct sctx *c, const json_t *s) {
    int64_t lo = count_kw(c, s, "minLength"), hi = count_kw(c, s, "maxLength");
    if (lo == -2 || hi == -2)
        return -1;
    if (lo < 0)
        lo = 0;
    if (hi >= 0 && hi < lo)
        return bad(c, STRATA_E_INVALID, "JSON schema '%s' is greater than maxLength (at %s)",
                   "minLength");
    int rc = gb_str(c->b, (int)lo, (int)hi, c->err);
    return rc < 0 ? -1 : rc;
}

static int bound(struct sctx *c, const json_t *s, const char *kw, bool low, bool excl,
                 int64_t *out) {
    const json_t *x = json_object_get(s, kw);
    if (!x)
        return 0;
    if (!json_is_number(x))
        return bad(c, STRATA_E_INVALID, "JSON schema '%s' must be a number (at %s)", kw);
    double d = json_number_value(x);
    double r = low ? (excl ? floor(d) + 1 : ceil(d)) : (excl ? ceil(d) - 1 : floor(d));
    int64_t v = r > (double)GRAMMAR_INT_LIM    ? GRAMMAR_INT_LIM
                : r < -(double)GRAMMAR_INT_LIM ? -GRAMMAR_INT_LIM
                                               : (int64_t)r;
    if (json_is_integer(x)) { /* exact for large integers */
        int64_t iv = json_integer_value(x);
        if (iv > -GRAMMAR_INT_LIM && iv < GRAMMAR_INT_LIM)
            v = excl ? (low ? iv + 1 : iv - 1) : iv;
    }
    if (low ? v > *out : v < *out)
        *out = v;
    return 0;
}

static int c_integer(struct sctx *c, const json_t *s) {
    int64_t lo = -GRAMMAR_INT_LIM, hi = GRAMMAR_INT_LIM;
    TRY(bound(c, s, "minimum", true, false, &lo));
    TRY(bound(c, s, "exclusiveMinimum", true, true, &lo));
    TRY(bound(c, s, "maximum", false, false, &hi));
    TRY(bound(c, s, "exclusiveMaximum", false, true, &hi));
    if (lo > hi)
        return bad(c, STRATA_E_INVALID,
                   "JSON schema '%s' range is empty (no integer is in it) (at %s)", "minimum");
    int rc = gb_int(c->b, lo, hi, c->err);
    return rc < 0 ? -1 : rc;
}

static int c_number(struct sctx *c, const json_t *s) {
    static const char *const b[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    for (size_t i = 0; i < 4; i++)
        if (json_object_get(s, b[i]))
            return bad(c, STRATA_E_UNSUPPORTED,
                       "JSON schema keyword '%s' is supported on integers only, not on type "
                       "number (at %s)",
                       b[i]);
    int rc = gb_num(c->b, c->err);
    return rc < 0 ? -1 : rc;
}

static int c_array(struct sctx *c, const json_t *s, int depth) {
    struct grammar_builder *b = c->b;
    struct strata_error *err = c->err;
    int64_t lo = count_kw(c, s, "minItems"), hi = count_kw(c, s, "maxItems");
    if (lo == -2 || hi == -2)
        return -1;
    if (lo < 0)
        lo = 0;
    if (hi >= 0 && hi < lo)
        return bad(c, STRATA_E_INVALID, "JSON schema '%s' is greater than maxItems (at %s)",
                   "minItems");
    const json_t *items = json_object_get(s, "items");
    int item;
    if (items) {
        if (json_is_array(items))
            return bad(c, STRATA_E_UNSUPPORTED,
                       "JSON schema keyword '%s' as an array (tuples) is not supported (at %s)",
                       "items");
        size_t old = push(c, "items");
        item = compile(c, items, depth + 1);
        pop(c, old);
        TRY(item);
    } else {
        TRY(item = grammar_json_value(b, err));
    }
    int ws = gb_ws(b, err), o = gb_lit_str(b, "[", err), cl = gb_lit_str(b, "]", err);
    TRY(ws);
    TRY(o);
    TRY(cl);
    if (hi == 0)
        return gb_seq(b, err, 3, o, ws, cl);
    int comma = gb_lit_str(b, ",", err);
    int more = comma < 0 ? -1 : gb_seq(b, err, 3, comma, ws, item);
    TRY(more);
    int reps = grammar_repeat(b, more, lo > 0 ? (int)lo - 1 : 0, hi < 0 ? -1 : (int)hi - 1, err);
    TRY(reps);
    int list = gb_seq(b, err, 3, item, reps, ws); /* one WS before ']' either way */
    TRY(list);
    if (lo == 0) {
        int empty = grammar_seq(b, NULL, 0, err);
        TRY(empty);
        TRY(list = grammar_alt(b, (int[]){list, empty}, 2, err));
    }
    return gb_seq(b, err, 4, o, ws, list, cl);
}

static int c_object(struct sctx *c, const json_t *s, int depth) {
    struct grammar_builder *b = c->b;
    struct strata_error *err = c->err;
    const json_t *props = json_object_get(s, "properties");
    const json_t *req = json_object_get(s, "required");
    const json_t *add = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props))
        return bad(c, STRATA_E_INVALID, "JSON schema '%s' must be an object (at %s)", "properties");
    if (req && !json_is_array(req))
        return bad(c, STRATA_E_INVALID, "JSON schema '%s' must be an array of strings (at %s)",
                   "required");
    if (add && !json_is_boolean(add) && !json_is_object(add))
        return bad(c, STRATA_E_INVALID, "JSON schema '%s' must be a boolean or a schema (at %s)",
                   "additionalProperties");
    size_t i;
    const json_t *x;
    json_array_foreach(req, i, x) if (!json_is_string(x)) return bad(
        c, STRATA_E_INVALID, "JSON schema '%s' must be an array of strings (at %s)", "required");
    size_t n_props = props ? json_object_size(props) : 0;
    int ws = gb_ws(b, err), o = gb_lit_str(b, "{", err), cl = gb_lit_str(b, "}", err);
    TRY(ws);
    TRY(o);
    TRY(cl);
    if (n_props == 0 && json_array_size(req) == 0) {
        if (json_is_false(add))
            return gb_seq(b, err, 3, o, ws, cl);
        if (!json_is_object(add))
            return grammar_json_object(b, err);
        /* a map: every value of the additionalProperties schema */
        size_t old = push(c, "additionalProperties");
        int val = compile(c, add, depth + 1);
        pop(c, old);
        TRY(val);
        int str = gb_str(b, 0, -1, err), colon = gb_lit_str(b, ":", err);
        TRY(str);
        TRY(colon);
        int member = gb_seq(b, err, 4, str, colon, ws, val);
        TRY(member);
        return container(b, "{", "}", member, err);
    }
    /* the members in order: listed properties, then required names not listed */
    size_t n_req = json_array_size(req), n = n_props + n_req;
    int *mem = malloc(sizeof *mem * (n + 1) * 3);
    bool *must = calloc(n + 1, sizeof *must);
    int k = 0, rc = -1;
    if (!mem || !must) {
        strata_error_set(err, STRATA_E_NOMEM, "out of memory");
        goto out;
    }
    const char *key;
    const json_t *sub;
    json_t *keys = json_array();
    if (!keys) {
        strata_error_set(err, STRATA_E_NOMEM, "out of memory");
        goto out;
    }
    json_object_foreach((json_t *)props, key, sub) json_array_append_new(keys, json_string(key));
    json_array_foreach(req, i, x) {
        bool listed = props && json_object_get(props, json_string_value(x));
        if (listed)
            continue;
        if (json_is_false(add)) {
            bad(c, STRATA_E_INVALID,
                "JSON schema 'required' names '%s', which is not in properties although "
                "additionalProperties is false (at %s)",
                json_string_value(x));
            json_decref(keys);
            goto out;
        }
        json_array_append_new(keys, json_string(json_string_value(x)));
    }
    for (i = 0; i < json_array_size(keys); i++) {
        key = json_string_value(json_array_get(keys, i));
        sub = props ? json_object_get(props, key) : NULL;
        int val;
        if (sub) {
            size_t old = push(c, "properties");
            push(c, key);
            val = compile(c, sub, depth + 1);
            pop(c, old);
        } else {
            val = grammar_json_value(b, err);
        }
        json_t *ks = json_string(key);
        char *kq = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
        json_decref(ks);
        int kl = -1;
        if (kq) {
            size_t ql = strlen(kq);
            kq[ql] = ':'; /* replaces the NUL: "key": */
            kl = grammar_lit(b, kq, ql + 1, err);
            free(kq);
        } else if (val >= 0) {
            strata_error_set(err, STRATA_E_NOMEM, "out of memory");
        }
        if (val < 0 || kl < 0) {
            json_decref(keys);
            goto out;
        }
        for (size_t r = 0; r < n_req; r++)
            must[k] |= strcmp(json_string_value(json_array_get(req, r)), key) == 0;
        if ((mem[k] = gb_seq(b, err, 3, kl, ws, val)) < 0) {
            json_decref(keys);
            goto out;
        }
        k++;
    }
    json_decref(keys);
    int n_opt = 0;
    for (int m = 0; m < k; m++)
        n_opt += !must[m];
    if (n_opt > SCHEMA_MAX_OPTIONAL) {
        bad(c, STRATA_E_LIMIT, "JSON schema object has more than 256 optional %s (at %s)",
            "properties");
        goto out;
    }
    /* start[i]: members i.. with none before; rest[i]: members i.. after one,
     * ending in the WS before '}' (so "{" WS "}" has one WS, not two) */
    int comma = gb_lit_str(b, ",", err);
    int start = grammar_seq(b, NULL, 0, err), rest = ws;
    if (comma < 0 || start < 0)
        goto out;
    for (int m = k - 1; m >= 0; m--) {
        int with_rest = gb_seq(b, err, 4, comma, ws, mem[m], rest);
        int with_start = gb_seq(b, err, 2, mem[m], rest);
        if (with_rest < 0 || with_start < 0)
            goto out;
        if (must[m]) {
            rest = with_rest;
            start = with_start;
        } else {
            rest = grammar_alt(b, (int[]){with_rest, rest}, 2, err);
            start = grammar_alt(b, (int[]){with_start, start}, 2, err);
            if (rest < 0 || start < 0)
                goto out;
        }
    }
    rc = gb_seq(b, err, 4, o, ws, start, cl);
out:
    free(mem);
    free(must);
    return rc < 0 ? -1 : rc;
}

/* Resolves a "#..." reference to a JSON pointer target in the root. */
static const json_t *resolve_ref(struct sctx *c, const char *ref) {
    if (ref[0] != '#')
        return NULL;
    const json_t *cur = c->root;
    const char *p = ref + 1;
    while (*p == '/' && cur) {
        p++;
        char seg[256];
        size_t k = 0;
        while (*p && *p != '/' && k + 1 < sizeof seg) {
            if (*p == '~' && (p[1] == '0' || p[1] == '1')) {
                seg[k++] = p[1] == '0' ? '~' : '/';
                p += 2;
            } else {
                seg[k++] = *p++;
            }
        }
        seg[k] = 0;
        if (json_is_object(cur)) {
            cur = json_object_get(cur, seg);
        } else if (json_is_array(cur)) {
            char *end;
            long idx = strtol(seg, &end, 10);
            cur = *seg && !*end && idx >= 0 ? json_array_get(cur, (size_t)idx) : NULL;
        } else {
            cur = NULL;
        }
    }
    return *p ? NULL : cur;
}

static int c_ref(struct sctx *c, const json_t *s, int depth) {
    const json_t *r = json_object_get(s, "$ref");
    if (!json_is_string(r))
        return bad(c, STRATA_E_INVALID, "JSON schema '%s' must be a string (at %s)", "$ref");
    const char *ref = json_string_value(r);
    const json_t *t = resolve_ref(c, ref);
    if (!t) {
        strata_error_set(c->err, STRATA_E_INVALID,
                         "JSON schema '$ref' '%.*s' does not point into this schema (at %s)",
                         strata_utf8_cut(ref, 100), ref, where(c));
        return -1;
    }
    for (int i = 0; i < c->n_refs; i++)
        if (c->ref_target[i] == t)
            return c->ref_node[i];
    if (c->n_refs >= SCHEMA_MAX_REFS)
        return bad(c, STRATA_E_LIMIT, "JSON schema has more than 1024 %s targets (at %s)", "$ref");
    int node = gb_ref(c->b, c->err);
    TRY(node);
    c->ref_target[c->n_refs] = t;
    c->ref_node[c->n_refs++] = node;
    char saved[sizeof c->path];
    size_t saved_len = c->path_len;
    memcpy(saved, c->path, sizeof saved);
    snprintf(c->path, sizeof c->path, "%s", ref + 1);
    c->path_len = strlen(c->path);
    int body = compile(c, t, depth + 1);
    memcpy(c->path, saved, sizeof saved);
    c->path_len = saved_len;
    TRY(body);
    gb_ref_set(c->b, node, body);
    return node;
}

static int c_any_of(struct sctx *c, const json_t *s, const char *kw, int depth) {
    const json_t *a = json_object_get(s, kw);
    if (!json_is_array(a) || json_array_size(a) == 0)
        return bad(c, STRATA_E_INVALID, "JSON schema '%s' must be a non-empty array (at %s)", kw);
    size_t n = json_array_size(a);
    if (n > SCHEMA_MAX_BRANCHES)
        return bad(c, STRATA_E_LIMIT, "JSON schema '%s' has more than 1024 branches (at %s)", kw);
    int *ids = malloc(sizeof *ids * n);
    if (!ids)
        return strata_error_set(c->err, STRATA_E_NOMEM, "out of memory"), -1;
    int rc = 0;
    for (size_t i = 0; i < n && rc >= 0; i++) {
        char idx[24];
        snprintf(idx, sizeof idx, "%zu", i);
        size_t old = push(c, kw);
        push(c, idx);
        rc = ids[i] = compile(c, json_array_get(a, i), depth + 1);
        pop(c, old);
    }
    if (rc >= 0)
        rc = grammar_alt(c->b, ids, (int)n, c->err);
    free(ids);
    return rc < 0 ? -1 : rc;
}

static int c_type(struct sctx *c, const json_t *s, const char *t, int depth) {
    if (!strcmp(t, "object"))
        return c_object(c, s, depth);
    if (!strcmp(t, "array"))
        return c_array(c, s, depth);
    if (!strcmp(t, "string"))
        return c_string(c, s);
    if (!strcmp(t, "integer"))
        return c_integer(c, s);
    if (!strcmp(t, "number"))
        return c_number(c, s);
    if (!strcmp(t, "boolean")) {
        int a = gb_lit_str(c->b, "true", c->err), b = gb_lit_str(c->b, "false", c->err);
        TRY(a);
        TRY(b);
        return grammar_alt(c->b, (int[]){a, b}, 2, c->err);
    }
    if (!strcmp(t, "null"))
        return gb_lit_str(c->b, "null", c->err);
    return bad(c, STRATA_E_INVALID, "JSON schema type '%s' is not a JSON Schema type (at %s)", t);
}

static bool has_any(const json_t *s, const char *const *kws, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (json_object_get(s, kws[i]))
            return true;
    return false;
}

static int compile(struct sctx *c, const json_t *s, int depth) {
    if (depth > SCHEMA_MAX_DEPTH)
        return bad(c, STRATA_E_LIMIT, "JSON schema nests deeper than %s levels (at %s)", "64");
    if (++c->count > SCHEMA_MAX_COUNT)
        return bad(c, STRATA_E_LIMIT, "JSON schema has more than %s subschemas (at %s)", "4096");
    if (json_is_true(s))
        return grammar_json_value(c->b, c->err);
    if (!json_is_object(s))
        return bad(c, STRATA_E_INVALID, "JSON schema %s must be an object or true (at %s)",
                   json_is_false(s) ? "false (nothing matches)" : "value");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)s, key, v) {
        if (!IN(key, keywords) && !IN(key, annotations))
            return bad(c, STRATA_E_UNSUPPORTED, "JSON schema keyword '%s' is not supported (at %s)",
                       key);
    }
    /* combinators take the whole schema: other constraints beside them are refused */
    static const char *const combi[] = {"$ref", "anyOf", "oneOf", "allOf", "enum", "const"};
    const char *which = NULL;
    for (size_t i = 0; i < 6; i++)
        if (json_object_get(s, combi[i])) {
            if (which)
                return bad(c, STRATA_E_UNSUPPORTED,
                           "JSON schema keyword '%s' combined with another of $ref, anyOf, "
                           "oneOf, allOf, enum, const is not supported (at %s)",
                           combi[i]);
            which = combi[i];
        }
    if (which) {
        json_object_foreach((json_t *)s, key, v) {
            bool typed =
                !strcmp(key, "type") && (!strcmp(which, "enum") || !strcmp(which, "const"));
            if (strcmp(key, which) && !IN(key, annotations) && !typed)
                return bad(c, STRATA_E_UNSUPPORTED,
                           "JSON schema keyword '%s' beside a combinator is not supported (at %s)",
                           key);
        }
        if (!strcmp(which, "$ref"))
            return c_ref(c, s, depth);
        if (!strcmp(which, "anyOf") || !strcmp(which, "oneOf"))
            return c_any_of(c, s, which, depth);
        if (!strcmp(which, "allOf")) {
            const json_t *a = json_object_get(s, "allOf");
            if (!json_is_array(a) || json_array_size(a) != 1)
                return bad(c, STRATA_E_UNSUPPORTED,
                           "JSON schema keyword '%s' is supported with one schema only (at %s)",
                           "allOf");
            return c_any_of(c, s, "allOf", depth);
        }
        return c_enum(c, s, which);
    }
    const json_t *type = json_object_get(s, "type");
    if (json_is_string(type))
        return c_type(c, s, json_string_value(type), depth);
    if (json_is_array(type)) {
        size_t n = json_array_size(type);
        if (n == 0 || n > 7)
            return bad(c, STRATA_E_INVALID, "JSON schema '%s' must list 1 to 7 types (at %s)",
                       "type");
        int ids[7];
        for (size_t i = 0; i < n; i++) {
            const json_t *t = json_array_get(type, i);
            if (!json_is_string(t))
                return bad(c, STRATA_E_INVALID, "JSON schema '%s' must hold strings (at %s)",
                           "type");
            TRY(ids[i] = c_type(c, s, json_string_value(t), depth));
        }
        return grammar_alt(c->b, ids, (int)n, c->err);
    }
    if (type)
        return bad(c, STRATA_E_INVALID, "JSON schema '%s' must be a string or an array (at %s)",
                   "type");
    /* no type: the keywords say which */
    static const char *const okw[] = {"properties", "required", "additionalProperties"};
    static const char *const akw[] = {"items", "minItems", "maxItems"};
    static const char *const skw[] = {"minLength", "maxLength"};
    static const char *const nkw[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    if (has_any(s, okw, 3))
        return c_object(c, s, depth);
    if (has_any(s, akw, 3))
        return c_array(c, s, depth);
    if (has_any(s, skw, 2))
        return c_string(c, s);
    if (has_any(s, nkw, 4))
        return c_number(c, s);
    return grammar_json_value(c->b, c->err);
}

int grammar_json_schema(struct grammar_builder *b, const json_t *schema, struct strata_error *err) {
    if (!b || !schema)
        return strata_error_set(err, STRATA_E_INVALID, "grammar: builder and schema required");
    struct sctx *c = calloc(1, sizeof *c);
    if (!c)
        return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
    c->b = b;
    c->root = schema;
    c->err = err;
    int rc = compile(c, schema, 0);
    free(c);
    if (rc < 0)
        return err && err->code ? err->code : STRATA_E_INVALID;
    return rc;
}
