/* engine/text/template-impl.h: internals shared by engine/template*.c.
 *
 *   template-lex.c     source -> tokens (trim_blocks / lstrip_blocks / "-" as Jinja's lexer)
 *   template-parse.c   tokens -> AST (struct tnode)
 *   template-value.c   arena, values, tainted strings, str()/repr(), tojson, comparisons
 *   template-eval.c    statements and expressions, scopes, limits, template_render
 *   template-filters.c filters, str/dict methods, getattr/getitem
 *   template-globals.c tests and global functions (range, dict, namespace, ...)
 *
 * Errors inside parse and render unwind with longjmp to the entry point
 * (template_parse / template_render): every allocation of a parse or render
 * lives in one arena that the entry point frees, so unwinding leaks nothing
 * and the many fallible helpers need no error plumbing.
 *
 * Threading: as template.h. A parse or render owns its arena and trender;
 * the only shared data are const tables (builtins, tv_undef_v, tv_none_v).
 */
#ifndef STRATA_TEMPLATE_IMPL_H
#define STRATA_TEMPLATE_IMPL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/text/template.h"

/* ---- arena ---------------------------------------------------------------- */

struct tarena {
    struct tchunk *head;
    size_t used;      /* bytes handed out, all chunks */
    size_t limit;     /* 0 = unlimited */
    jmp_buf *on_fail; /* where to unwind on overflow (borrowed) */
    struct strata_error *err;
};

void *tarena_alloc(struct tarena *a, size_t n); /* zeroed; unwinds on failure */
/* The arena's growable array: returns an array of at least `need` elements
 * of `elem` bytes holding the n elements of `old` (old itself stays in the
 * arena, which frees nothing until the end); *cap doubles from `first`.
 * Returns old when it already holds `need`. Unwinds on failure. */
void *tarena_grow(struct tarena *a, void *old, size_t n, size_t *cap, size_t need, size_t elem,
                  size_t first);
char *tarena_strndup(struct tarena *a, const char *s, size_t n);
void tarena_free(struct tarena *a);
_Noreturn void tarena_fail(struct tarena *a, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- values --------------------------------------------------------------- */

enum tv_kind {
    TV_UNDEF,
    TV_NONE,
    TV_BOOL,
    TV_INT,
    TV_FLOAT,
    TV_STR,
    TV_LIST, /* also tuples (tlist.is_tuple) */
    TV_DICT, /* also namespaces (tdict.is_ns) and the loop object */
    TV_FUNC,
};

struct trange {
    size_t off, len; /* bytes, relative to the string start */
};

struct tstr {
    const char *s; /* NUL-terminated, len bytes (UTF-8) */
    size_t len;
    struct trange *r; /* untrusted ranges: sorted, disjoint, non-adjacent */
    size_t nr;
    bool safe; /* Markup (|safe, |e): `+` with a plain str HTML-escapes the plain one */
};

struct tv {
    enum tv_kind kind;
    union {
        bool b;
        int64_t i;
        double f;
        struct tstr *s;
        struct tlist *l;
        struct tdict *d;
        const struct tfunc *fn;
    };
    const char *undef_name; /* TV_UNDEF: what was missing, for messages */
};

struct tlist {
    struct tv *items;
    size_t n, cap;
    bool is_tuple;
    bool is_gen; /* a Jinja generator (map, select...): no len(), not JSON */
};

struct tdict {
    struct tv *keys, *vals; /* insertion order */
    size_t n, cap;
    bool is_ns; /* namespace(): attributes assignable with {% set ns.x = %} */
};

struct trender;
struct tnode;
struct targs {
    struct tv *pos;
    size_t n_pos;
    const char **kw_names;
    struct tv *kw;
    size_t n_kw;
};

typedef struct tv (*tbuiltin_fn)(struct trender *r, struct tv self, struct targs *a);

enum tfunc_kind { TF_BUILTIN, TF_MACRO, TF_CALLER };

struct tfunc {
    enum tfunc_kind kind;
    const char *name;
    tbuiltin_fn fn;          /* TF_BUILTIN */
    struct tv self;          /* TF_BUILTIN bound methods: the receiver */
    const struct tnode *def; /* TF_MACRO / TF_CALLER: the macro or call node */
    struct tframe *closure;  /* TF_MACRO / TF_CALLER: defining scope */
    struct tv caller;        /* TF_MACRO invoked from {% call %}: caller(), else undefined */
};

extern const struct tv tv_undef_v, tv_none_v;
struct tv tv_bool(bool b);
struct tv tv_int(int64_t i);
struct tv tv_float(double f);
struct tv tv_str(struct tarena *a, const char *s, size_t n, bool tainted);
struct tv tv_cstr(struct tarena *a, const char *s); /* trusted */
struct tv tv_strv(struct tstr *s);
struct tv tv_list(struct tarena *a, size_t cap);
struct tv tv_dict(struct tarena *a, size_t cap);
void tv_list_push(struct tarena *a, struct tv list, struct tv item);
void tv_dict_set(struct tarena *a, struct tv dict, struct tv key, struct tv val);
struct tv *tv_dict_get(struct tv dict, struct tv key); /* NULL when absent */
struct tv *tv_dict_gets(struct tv dict, const char *key);
struct tv tv_from_json(struct tarena *a, const json_t *j, bool tainted);

bool tv_truthy(struct tv v);
bool tv_equal(struct tv a, struct tv b);
/* Python ordering: <0, 0, >0; *ok = false for unorderable types. */
int tv_compare(struct tv a, struct tv b, bool *ok);
bool tv_is_tainted(struct tv v); /* any untrusted byte in the value tree */
const char *tv_type_name(struct tv v);

/* String builder with taint ranges (arena-backed). */
struct tbuf {
    struct tarena *a;
    char *s;
    size_t len, cap, max; /* max: limit on len (0 = none) */
    struct trange *r;
    size_t nr, rcap;
};
void tbuf_init(struct tbuf *b, struct tarena *a, size_t max);
void tbuf_put(struct tbuf *b, const char *s, size_t n, bool tainted);
void tbuf_puts(struct tbuf *b, const char *s); /* trusted */
void tbuf_put_str(struct tbuf *b, const struct tstr *s);
struct tstr *tbuf_finish(struct tbuf *b);

/* Python str() (strings as is) / repr() of a value, appended to b. */
void tv_write_str(struct tbuf *b, struct tv v);
void tv_write_repr(struct tbuf *b, struct tv v);
struct tstr *tv_to_str(struct tarena *a, struct tv v, size_t max);
/* json.dumps(v, ensure_ascii=False, indent=..., separators=..., sort_keys=...). indent NULL
 * = compact with ", " and ": " separators. Unwinds on unserializable values and, with
 * sort_keys, on keys Python cannot order (None, str mixed with numbers). */
void tv_write_json(struct tbuf *b, struct tv v, const char *indent, const char *item_sep,
                   const char *key_sep, bool sort_keys, int depth);
void tv_write_float(struct tbuf *b, double f); /* Python repr(float) */

/* UTF-8 helpers: code point count, byte offset of the i-th code point. */
size_t utf8_len(const char *s, size_t n);
size_t utf8_offset(const char *s, size_t n, size_t i);

/* ---- AST ------------------------------------------------------------------- */

enum tnode_kind {
    /* statements */
    N_BODY,         /* list = statements */
    N_TEXT,         /* val = trusted string */
    N_OUTPUT,       /* a = expr */
    N_IF,           /* a = cond, b = then body, c = else body (may be NULL) */
    N_FOR,          /* a = target, b = iter, c = body, d = else body, e = filter cond */
    N_SET,          /* a = target (E_NAME, E_TUPLE of names, or E_GETATTR on a name), b = expr */
    N_SET_BLOCK,    /* a = target name, c = body, list = filters (E_FILTER with a NULL operand) */
    N_MACRO,        /* name, names = params, list = defaults (NULL = required), c = body */
    N_CALL_BLOCK,   /* a = call expr, names/list = caller params/defaults, c = body */
    N_FILTER_BLOCK, /* list = filters, c = body */
    N_BREAK,
    N_CONTINUE,
    /* expressions */
    E_CONST,   /* val */
    E_NAME,    /* name */
    E_GETATTR, /* a . name */
    E_GETITEM, /* a [ b ] */
    E_SLICE,   /* a [ b : c : d ] (each of b, c, d may be NULL) */
    E_CALL,    /* a ( list , names = list2 ) */
    E_FILTER,  /* a | name ( list, names = list2 ); a NULL in filter blocks */
    E_TEST,    /* a is [not: op] name ( list ) */
    E_BINOP,   /* a op b */
    E_UNARY,   /* op a */
    E_AND,
    E_OR,
    E_NOT,
    E_COMPARE, /* a, then list[i] with ops[i] */
    E_COND,    /* b if a else c (c may be NULL) */
    E_LIST,    /* list */
    E_TUPLE,   /* list */
    E_DICT,    /* list = keys, list2 = values */
};

enum tnode_op {
    OP_ADD = 1,
    OP_SUB,
    OP_MUL,
    OP_DIV,
    OP_FLOORDIV,
    OP_MOD,
    OP_POW,
    OP_CONCAT,
    OP_NEG,
    OP_POS,
    OP_EQ,
    OP_NE,
    OP_LT,
    OP_LE,
    OP_GT,
    OP_GE,
    OP_IN,
    OP_NOTIN,
};

struct tnode {
    enum tnode_kind kind;
    int line, col;
    int op;           /* enum tnode_op; E_TEST: 1 = negated */
    struct tv val;    /* E_CONST, N_TEXT */
    const char *name; /* E_NAME, E_GETATTR, E_FILTER, E_TEST, N_MACRO */
    struct tnode *a, *b, *c, *d, *e;
    struct tnode **list;
    size_t n;
    struct tnode **list2;
    size_t n2;
    const char **names; /* kwarg names (E_CALL/E_FILTER), params (N_MACRO/N_CALL_BLOCK) */
    size_t n_names;
    int *ops; /* E_COMPARE: one per list entry */
};

struct chat_template {
    struct tarena arena; /* owns every node and constant */
    struct tnode *root;  /* N_BODY */
};

/* template-lex.c */
enum tlex_type {
    TLEX_DATA,
    TLEX_VAR_BEGIN,
    TLEX_VAR_END,
    TLEX_BLOCK_BEGIN,
    TLEX_BLOCK_END,
    TLEX_NAME,
    TLEX_STRING, /* text = raw body between the quotes, escapes not decoded */
    TLEX_INT,
    TLEX_FLOAT,
    TLEX_OP,
    TLEX_EOF,
};

struct tlex_tok {
    enum tlex_type type;
    size_t pos; /* byte offset in the normalized source */
    const char *text;
    size_t len;
};

/* Tokens of the whole template (arena-allocated); *norm_out = the newline-
 * normalized source the positions refer to. Unwinds on lexical errors. */
struct tlex_tok *tlex(struct tarena *a, const char *src, size_t len, size_t *n_out,
                      const char **norm_out);
void tlex_linecol(const char *norm, size_t pos, int *line, int *col);

/* template-parse.c */
struct tnode *tparse(struct tarena *a, const char *src, size_t len, struct strata_error *err,
                     jmp_buf *jb);

/* ---- render state ------------------------------------------------------------ */

struct tvar {
    const char *name;
    struct tv v;
};

struct tframe {
    struct tframe *parent;
    struct tvar *vars;
    size_t n, cap;
};

struct trender {
    struct tarena *a;
    const struct template_limits *lim;
    const struct template_inputs *in;
    struct tframe *globals;
    int64_t steps;
    int depth;
    int line; /* of the node being evaluated, for messages */
};

_Noreturn void trender_fail(struct trender *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void trender_step(struct trender *r);

/* template-eval.c: calls any callable value. */
struct tv teval_call(struct trender *r, struct tv fn, struct targs *a);

/* template-filters.c */
struct tv tfilter_apply(struct trender *r, const char *name, struct tv v, struct targs *a);
bool ttest_apply(struct trender *r, const char *name, struct tv v, struct targs *a);
struct tv tattr_get(struct trender *r, struct tv obj, const char *name); /* obj.name */
struct tv titem_get(struct trender *r, struct tv obj, struct tv key);    /* obj[key] */
struct tv tglobal_builtin(const char *name); /* range, namespace, dict, ...; undef if none */
struct tstr *tstr_of(struct trender *r, struct tv v); /* str(v) bounded by the output limit */
/* Argument i of a call, or its keyword `name`, else dflt (template-filters.c). */
struct tv targ(struct targs *a, size_t i, const char *name, struct tv dflt);
/* v as an int64 (ints and bools); a template error naming `what` otherwise. */
int64_t targ_int(struct trender *r, struct tv v, const char *what);
struct tstr *thtml_escape(struct trender *r, const struct tstr *s); /* markupsafe.escape */

#endif
