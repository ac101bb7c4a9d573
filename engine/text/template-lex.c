/* engine/text/template-lex.c: template source -> tokens, following Jinja 3's lexer
 * with trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False:
 *   - "\r\n" and "\r" become "\n"; one trailing newline of the source is dropped;
 *   - "{%-" / "{{-" / "{#-" strip all whitespace before the tag, "-%}" / "-}}" /
 *     "-#}" all whitespace after it;
 *   - lstrip_blocks: spaces/tabs between a line start and "{%" or "{#" are
 *     dropped (not before "{{"), unless the tag opens with "+";
 *   - trim_blocks: the first newline after "%}" or "#}" is dropped, unless "+%}".
 * The tokens feed template-parse.c. */
#include <stdlib.h>
#include <string.h>

#include "engine/text/template-impl.h"

static bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
static bool is_alpha(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

struct lexer {
    struct tarena *a;
    const char *s; /* normalized source */
    size_t n, pos;
    struct tlex_tok *toks;
    size_t n_toks, cap;
    int brace; /* ( [ { depth inside a tag */
};

static void pos_linecol(const char *s, size_t pos, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < pos; i++) {
        if (s[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)s[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

_Noreturn static void lex_fail(struct lexer *L, size_t pos, const char *msg) {
    int line, col;
    pos_linecol(L->s, pos, &line, &col);
    tarena_fail(L->a, STRATA_E_TEMPLATE, "template syntax error: line %d, column %d: %s", line, col,
                msg);
}

static void emit(struct lexer *L, enum tlex_type t, size_t pos, const char *text, size_t len) {
    L->toks = tarena_grow(L->a, L->toks, L->n_toks, &L->cap, L->n_toks + 1, sizeof(*L->toks), 256);
    struct tlex_tok *k = &L->toks[L->n_toks++];
    k->type = t;
    k->pos = pos;
    k->text = text;
    k->len = len;
}

/* Emits text s[from, to) as data after whitespace control for a tag whose
 * sign is '-', '+' or 0; lstrip applies to block and comment tags. */
static void emit_data(struct lexer *L, size_t from, size_t to, char sign, bool lstrip,
                      bool line_starting) {
    const char *s = L->s;
    if (sign == '-') {
        while (to > from && is_ws(s[to - 1]))
            to--;
    } else if (sign != '+' && lstrip) {
        size_t l = to;
        while (l > from && s[l - 1] != '\n')
            l--;
        if (l > from || line_starting) {
            bool all_ws = l < to;
            for (size_t i = l; i < to; i++)
                if (!is_ws(s[i]))
                    all_ws = false;
            if (all_ws)
                to = l;
        }
    }
    if (to > from)
        emit(L, TLEX_DATA, from, s + from, to - from);
}

/* After a closing tag: sign '-' eats all whitespace, '+' nothing, else one
 * newline (trim_blocks) when trim. Returns whether the match ended in '\n'. */
static bool after_close(struct lexer *L, char sign, bool trim) {
    if (sign == '-') {
        size_t start = L->pos;
        while (L->pos < L->n && is_ws(L->s[L->pos]))
            L->pos++;
        return L->pos > start && L->s[L->pos - 1] == '\n';
    }
    if (sign != '+' && trim && L->pos < L->n && L->s[L->pos] == '\n') {
        L->pos++;
        return true;
    }
    return false;
}

static const char *ops2[] = {"//", "**", "==", "!=", "<=", ">="};

/* Lexes tokens inside {% %} or {{ }} until the closing tag. */
static bool lex_tag(struct lexer *L, bool block, size_t open_pos) {
    const char *s = L->s;
    L->brace = 0;
    for (;;) {
        if (L->pos >= L->n)
            lex_fail(L, open_pos,
                     block ? "unexpected end of template, expected '%}'"
                           : "unexpected end of template, expected '}}'");
        char c = s[L->pos];
        char e1 = block ? '%' : '}';
        if (L->brace == 0) {
            size_t p = L->pos;
            char sign = 0;
            if ((c == '-' || (c == '+' && block)) && p + 2 < L->n + 1 && s[p + 1] == e1 &&
                p + 2 < L->n && s[p + 2] == '}') {
                sign = c;
                p++;
            }
            if (p + 1 < L->n && s[p] == e1 && s[p + 1] == '}') {
                emit(L, block ? TLEX_BLOCK_END : TLEX_VAR_END, L->pos, s + L->pos, 0);
                L->pos = p + 2;
                return after_close(L, sign, block);
            }
        }
        if (is_ws(c)) {
            L->pos++;
            continue;
        }
        size_t st = L->pos;
        if (is_digit(c)) {
            size_t p = st;
            while (p < L->n &&
                   (is_digit(s[p]) || (s[p] == '_' && p + 1 < L->n && is_digit(s[p + 1]))))
                p++;
            bool is_float = false;
            if (p + 1 < L->n && s[p] == '.' && is_digit(s[p + 1])) {
                is_float = true;
                p++;
                while (p < L->n && (is_digit(s[p]) || s[p] == '_'))
                    p++;
            }
            if (p < L->n && (s[p] == 'e' || s[p] == 'E')) {
                size_t q = p + 1;
                if (q < L->n && (s[q] == '+' || s[q] == '-'))
                    q++;
                if (q < L->n && is_digit(s[q])) {
                    while (q < L->n && is_digit(s[q]))
                        q++;
                    p = q;
                    is_float = true;
                }
            }
            emit(L, is_float ? TLEX_FLOAT : TLEX_INT, st, s + st, p - st);
            L->pos = p;
            continue;
        }
        if (is_alpha(c)) {
            size_t p = st;
            while (p < L->n && (is_alpha(s[p]) || is_digit(s[p])))
                p++;
            emit(L, TLEX_NAME, st, s + st, p - st);
            L->pos = p;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t p = st + 1;
            while (p < L->n && s[p] != c) {
                if (s[p] == '\\')
                    p++;
                p++;
            }
            if (p >= L->n)
                lex_fail(L, st, "unexpected end of string");
            emit(L, TLEX_STRING, st, s + st + 1, p - st - 1);
            L->pos = p + 1;
            continue;
        }
        size_t oplen = 0;
        for (size_t i = 0; i < sizeof(ops2) / sizeof(ops2[0]); i++)
            if (st + 1 < L->n && s[st] == ops2[i][0] && s[st + 1] == ops2[i][1])
                oplen = 2;
        if (!oplen && strchr("+-/*%~[](){}<>=.:|,", c) && c)
            oplen = 1;
        if (!oplen)
            lex_fail(L, st, "unexpected character");
        if (oplen == 1) {
            if (c == '(' || c == '[' || c == '{') {
                L->brace++;
            } else if (c == ')' || c == ']' || c == '}') {
                if (L->brace == 0)
                    lex_fail(L, st, "unexpected closing bracket");
                L->brace--;
            }
        }
        emit(L, TLEX_OP, st, s + st, oplen);
        L->pos = st + oplen;
    }
}

/* Matches "{%[-+]?\s*<word>\s*" at p; returns the end or 0. */
static size_t match_word_tag(const struct lexer *L, size_t p, const char *word, char *sign) {
    const char *s = L->s;
    if (p + 2 > L->n || s[p] != '{' || s[p + 1] != '%')
        return 0;
    p += 2;
    *sign = 0;
    if (p < L->n && (s[p] == '-' || s[p] == '+'))
        *sign = s[p++];
    while (p < L->n && is_ws(s[p]))
        p++;
    size_t wl = strlen(word);
    if (p + wl > L->n || memcmp(s + p, word, wl))
        return 0;
    p += wl;
    if (p < L->n && (is_alpha(s[p]) || is_digit(s[p])))
        return 0;
    while (p < L->n && is_ws(s[p]))
        p++;
    return p;
}

/* Matches "[-+]?%}" at p; returns the position after it (0 if none). */
static size_t match_block_close(const struct lexer *L, size_t p, char *sign) {
    const char *s = L->s;
    *sign = 0;
    if (p < L->n && (s[p] == '-' || s[p] == '+'))
        *sign = s[p++];
    if (p + 1 < L->n && s[p] == '%' && s[p + 1] == '}')
        return p + 2;
    return 0;
}

struct tlex_tok *tlex(struct tarena *a, const char *src, size_t len, size_t *n_out,
                      const char **norm_out) {
    struct lexer L = {.a = a};
    /* Normalize newlines; drop one trailing newline. */
    char *s = tarena_alloc(a, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n')
        n--;
    s[n] = '\0';
    L.s = s;
    L.n = n;
    *norm_out = s;
    bool line_starting = true;
    while (L.pos < n) {
        /* Find the next tag opener. */
        size_t p = L.pos;
        const char *hit = NULL;
        while (p + 1 < n) {
            const char *q = memchr(s + p, '{', n - p - 1);
            if (!q)
                break;
            p = (size_t)(q - s);
            if (s[p + 1] == '%' || s[p + 1] == '{' || s[p + 1] == '#') {
                hit = q;
                break;
            }
            p++;
        }
        if (!hit) {
            emit(&L, TLEX_DATA, L.pos, s + L.pos, n - L.pos);
            break;
        }
        char kind = s[p + 1];
        char sign = 0;
        if (p + 2 < n && (s[p + 2] == '-' || s[p + 2] == '+'))
            sign = s[p + 2];
        char raw_sign;
        size_t raw_end = kind == '%' ? match_word_tag(&L, p, "raw", &raw_sign) : 0;
        char close_sign = 0;
        size_t raw_close = raw_end ? match_block_close(&L, raw_end, &close_sign) : 0;
        if (raw_close && close_sign == '+')
            raw_close = 0; /* "+%}" does not close a raw opener in Jinja's regex */
        emit_data(&L, L.pos, p, sign == '+' && kind == '{' ? 0 : sign, kind != '{', line_starting);
        if (raw_close) {
            L.pos = raw_close;
            if (close_sign == '-')
                while (L.pos < n && is_ws(s[L.pos]))
                    L.pos++;
            /* Find "{%[-+]?\s*endraw\s*(+%}|-%}\s*|%}\n?)". */
            size_t q = L.pos, end = 0;
            char es = 0, cs = 0;
            for (; q + 1 < n; q++) {
                if (s[q] == '{' && s[q + 1] == '%' &&
                    (end = match_word_tag(&L, q, "endraw", &es)) &&
                    (end = match_block_close(&L, end, &cs)))
                    break;
                end = 0;
            }
            if (!end)
                lex_fail(&L, p, "missing end of raw directive");
            emit_data(&L, L.pos, q, es, true, false);
            L.pos = end;
            line_starting = after_close(&L, cs, true);
            continue;
        }
        L.pos = p + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            size_t q = L.pos;
            const char *e = NULL;
            while (q + 1 < n) {
                e = memchr(s + q, '#', n - q - 1);
                if (!e)
                    break;
                if (e[1] == '}')
                    break;
                q = (size_t)(e - s) + 1;
                e = NULL;
            }
            if (!e)
                lex_fail(&L, p, "missing end of comment tag");
            size_t ep = (size_t)(e - s);
            char cs = 0;
            if (ep > L.pos && (s[ep - 1] == '-' || s[ep - 1] == '+'))
                cs = s[ep - 1];
            L.pos = ep + 2;
            line_starting = after_close(&L, cs, true);
            continue;
        }
        emit(&L, kind == '%' ? TLEX_BLOCK_BEGIN : TLEX_VAR_BEGIN, p, s + p, 0);
        line_starting = lex_tag(&L, kind == '%', p);
    }
    emit(&L, TLEX_EOF, n, s + n, 0);
    *n_out = L.n_toks;
    return L.toks;
}

void tlex_linecol(const char *norm, size_t pos, int *line, int *col) {
    pos_linecol(norm, pos, line, col);
}
