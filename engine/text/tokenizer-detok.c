/* engine/text/tokenizer-detok.c: ids -> text. token_to_piece and decode follow
 * llama.cpp's token_to_piece / detokenize; the stream adds UTF-8 assembly.
 *
 * Deviation: a byte-level BPE piece holding a code point outside GPT-2's byte
 * map (malformed vocab) is passed through as its UTF-8, where llama.cpp writes
 * "[UNK_BYTE_0x..]". llama.cpp's clean_spaces passes (" ." -> ".") are an
 * opt-in of tokenizer_decode: they lose information and cannot be streamed.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/text/tokenizer-impl.h"

struct tokenizer_decode_opts tokenizer_decode_opts_default(void) {
    return (struct tokenizer_decode_opts){.skip_special = true, .strip_leading_space = true};
}

static size_t put(char *buf, size_t cap, size_t n, const char *s, size_t k) {
    if (n < cap)
        memcpy(buf + n, s, k < cap - n ? k : cap - n);
    return n + k;
}

/* Text of id with up to lstrip leading spaces removed; returns the full length. */
static size_t piece(const struct tokenizer *tok, int32_t id, bool special, int lstrip, char *buf,
                    size_t cap) {
    const struct tok_token *t = &tok->tokens[id];
    const char *s = tok_text(tok, id);
    size_t n = 0;
    if (!special && (t->attr & (TOKENIZER_ATTR_CONTROL | TOKENIZER_ATTR_UNKNOWN)))
        return 0;
    if (t->attr & (TOKENIZER_ATTR_CONTROL | TOKENIZER_ATTR_UNKNOWN | TOKENIZER_ATTR_USER_DEFINED)) {
        size_t len = t->len;
        for (; lstrip > 0 && len && *s == ' '; lstrip--, s++, len--) {
        }
        return put(buf, cap, 0, s, len);
    }
    if (tok->kind != TOKENIZER_KIND_BPE) {
        if (t->attr & TOKENIZER_ATTR_NORMAL) {
            for (size_t i = 0; i < t->len;) {
                if (i + 3 <= t->len && !memcmp(s + i, "\xe2\x96\x81", 3)) {
                    if (lstrip > 0 && n == 0)
                        lstrip--;
                    else
                        n = put(buf, cap, n, " ", 1);
                    i += 3;
                    continue;
                }
                lstrip = 0;
                n = put(buf, cap, n, s + i, 1);
                i++;
            }
            return n;
        }
        if (t->attr & TOKENIZER_ATTR_BYTE) {
            unsigned v = 0;
            /* "<0xXX>" -> byte XX */
            if (t->len == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>') {
                for (int k = 3; k < 5; k++) {
                    char c = s[k];
                    v = v * 16 + (unsigned)(c >= 'a'   ? c - 'a' + 10
                                            : c >= 'A' ? c - 'A' + 10
                                                       : c - '0');
                }
                char b = (char)(v & 0xff);
                if (lstrip > 0 && b == ' ')
                    return 0;
                return put(buf, cap, 0, &b, 1);
            }
        }
        return 0;
    }
    if (!(t->attr & TOKENIZER_ATTR_NORMAL))
        return 0;
    for (size_t off = 0; off < t->len;) {
        size_t start = off;
        uint32_t cp;
        tok_utf8_decode((const uint8_t *)s, t->len, &off, &cp);
        int b = tok_cp_to_byte(cp);
        if (b < 0) {
            lstrip = 0;
            n = put(buf, cap, n, s + start, off - start);
            continue;
        }
        if (lstrip > 0 && n == 0 && b == ' ') {
            lstrip--;
            continue;
        }
        lstrip = 0;
        char c = (char)b;
        n = put(buf, cap, n, &c, 1);
    }
    return n;
}

int tokenizer_token_to_piece(const struct tokenizer *tok, int32_t id, bool special, char *buf,
                             size_t cap) {
    if (!tok || id < 0 || id >= tok->n_vocab)
        return STRATA_E_RANGE;
    size_t n = piece(tok, id, special, 0, buf, cap);
    return n > INT32_MAX ? STRATA_E_LIMIT : (int)n;
}

/* Appends the text of id to b. */
static int append_piece(const struct tokenizer *tok, int32_t id, bool special, int lstrip,
                        struct tok_buf *b) {
    size_t need = piece(tok, id, special, lstrip, NULL, 0);
    if (tok_buf_reserve(b, need))
        return STRATA_E_NOMEM;
    piece(tok, id, special, lstrip, b->p + b->n, need);
    b->n += need;
    b->p[b->n] = '\0';
    return 0;
}

/* llama.cpp's three clean-up passes, in place over t[0..n); returns the new
 * length. Each pass compacts the text while reading the bytes it has not yet
 * overwritten, as llama.cpp's detokenize does. */
static size_t clean_spaces(char *t, size_t n) {
    size_t total = n ? 1 : 0, n1 = n;
    for (size_t i = 1; i < n1; i++) { /* " ?", " !", " .", " ," */
        char x = t[i];
        if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','))
            total--;
        t[total++] = x;
    }
    size_t n2 = total;
    total = n2 ? 1 : 0;
    for (size_t i = 1; i < n2; i++) { /* " ' " -> "'" */
        char x = t[i];
        if (x == '\'' && i + 1 < n2 && t[i - 1] == ' ' && t[i + 1] == ' ') {
            total--;
            t[++i] = '\0';
        }
        t[total++] = x;
    }
    size_t n3 = total;
    total = n3 ? 1 : 0;
    for (size_t i = 1; i < n3; i++) { /* " 's", " 'm", " 're", " 've" */
        char x = t[i];
        if (t[i - 1] == ' ' && x == '\'' && i + 1 < n3) {
            char x1 = t[i + 1];
            if (x1 == 's' || x1 == 'm')
                total--;
            else if (x1 != 't' && x1 != 'd' && i + 2 < n3 &&
                     ((x1 == 'r' && t[i + 2] == 'e') || (x1 == 'v' && t[i + 2] == 'e')))
                total--;
        }
        t[total++] = x;
    }
    return total;
}

char *tokenizer_decode(const struct tokenizer *tok, const int32_t *ids, size_t n,
                       const struct tokenizer_decode_opts *opts, size_t *len_out,
                       struct strata_error *err) {
    struct tokenizer_decode_opts o = opts ? *opts : tokenizer_decode_opts_default();
    if (!tok || (!ids && n)) {
        strata_error_set(err, STRATA_E_INVALID, "tokenizer_decode: NULL argument");
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tok->n_vocab) {
            strata_error_set(err, STRATA_E_RANGE, "tokenizer_decode: token id %d out of range",
                             (int)ids[i]);
            return NULL;
        }
    bool strip = o.strip_leading_space && tok->add_space_prefix;
    if (o.skip_special && tok->add_bos && n > 0 && ids[0] == tok->bos) {
        strip = false; /* llama.cpp keeps the space after a removed BOS */
        ids++;
        n--;
    }
    if (o.skip_special && tok->add_eos && n > 0 && ids[n - 1] == tok->eos)
        n--;
    struct tok_buf b = {0};
    if (tok_buf_reserve(&b, 16))
        goto nomem;
    for (size_t i = 0; i < n; i++) {
        if (append_piece(tok, ids[i], !o.skip_special, strip ? 1 : 0, &b))
            goto nomem;
        strip = false;
    }
    if (o.clean_spaces && tok->clean_spaces) {
        b.n = clean_spaces(b.p, b.n);
        b.p[b.n] = '\0';
    }
    if (len_out)
        *len_out = b.n;
    return b.p;
nomem:
    tok_buf_free(&b);
    strata_error_set(err, STRATA_E_NOMEM, "tokenizer_decode: out of memory");
    return NULL;
}

/* ---- streaming -------------------------------------------------------------- */

struct tokenizer_stream {
    const struct tokenizer *tok; /* borrowed */
    struct tokenizer_decode_opts opts;
    bool first;      /* no token fed yet */
    uint8_t pend[4]; /* bytes of an incomplete UTF-8 sequence */
    size_t n_pend;
    struct tok_buf raw; /* pending + the new piece */
    struct tok_buf out; /* complete text returned by the last call */
};

struct tokenizer_stream *tokenizer_stream_init(const struct tokenizer *tok,
                                               const struct tokenizer_decode_opts *opts,
                                               struct strata_error *err) {
    if (!tok) {
        strata_error_set(err, STRATA_E_INVALID, "tokenizer_stream_init: NULL tokenizer");
        return NULL;
    }
    struct tokenizer_stream *st = calloc(1, sizeof(*st));
    if (!st) {
        strata_error_set(err, STRATA_E_NOMEM, "tokenizer_stream_init: out of memory");
        return NULL;
    }
    st->tok = tok;
    st->opts = opts ? *opts : tokenizer_decode_opts_default();
    st->first = true;
    return st;
}

void tokenizer_stream_free(struct tokenizer_stream *st) {
    if (!st)
        return;
    tok_buf_free(&st->out);
    tok_buf_free(&st->raw);
    free(st);
}

void tokenizer_stream_reset(struct tokenizer_stream *st) {
    st->first = true;
    st->n_pend = 0;
    st->raw.n = st->out.n = 0;
}

/* Length of the valid UTF-8 prefix of the sequence at s[0..n): returns the
 * sequence length if complete and valid, 0 if s is a valid but incomplete
 * prefix, or -(k) if invalid after k >= 1 bytes (emit U+FFFD, consume k). */
static int utf8_check(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    int len;
    uint8_t lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0;
        if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90;
        if (c == 0xf4)
            hi = 0x8f;
    } else
        return -1;
    for (int k = 1; k < len; k++) {
        if ((size_t)k >= n)
            return 0;
        uint8_t x = s[k];
        if (k == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xbf))
            return -k;
    }
    return len;
}

static const char *stream_emit(struct tokenizer_stream *st, bool final, size_t *len) {
    const uint8_t *s = (const uint8_t *)st->raw.p;
    size_t n = st->raw.n, i = 0;
    st->out.n = 0;
    st->n_pend = 0;
    if (tok_buf_reserve(&st->out, n * 3 + 4))
        return NULL;
    while (i < n) {
        int r = utf8_check(s + i, n - i);
        if (r > 0) {
            memcpy(st->out.p + st->out.n, s + i, (size_t)r);
            st->out.n += (size_t)r;
            i += (size_t)r;
        } else if (r < 0 || final) {
            memcpy(st->out.p + st->out.n, "\xef\xbf\xbd", 3);
            st->out.n += 3;
            i += r < 0 ? (size_t)-r : n - i;
        } else {
            st->n_pend = n - i; /* incomplete: hold (at most 3 bytes) */
            memcpy(st->pend, s + i, st->n_pend);
            break;
        }
    }
    st->out.p[st->out.n] = '\0';
    *len = st->out.n;
    return st->out.p;
}

const char *tokenizer_stream_feed(struct tokenizer_stream *st, int32_t id, size_t *len) {
    *len = 0;
    const struct tokenizer *tok = st->tok;
    if (id < 0 || id >= tok->n_vocab)
        return NULL;
    int lstrip = 0;
    if (st->first) {
        lstrip = st->opts.strip_leading_space && tok->add_space_prefix;
        if (st->opts.skip_special && tok->add_bos && id == tok->bos)
            lstrip = 0; /* as decode: the space after a skipped BOS stays */
    }
    st->raw.n = 0;
    if (tok_buf_put(&st->raw, st->pend, st->n_pend) ||
        append_piece(tok, id, !st->opts.skip_special, lstrip, &st->raw))
        return NULL;
    st->first = false;
    return stream_emit(st, false, len);
}

const char *tokenizer_stream_flush(struct tokenizer_stream *st, size_t *len) {
    *len = 0;
    st->raw.n = 0;
    if (tok_buf_put(&st->raw, st->pend, st->n_pend))
        return NULL;
    return stream_emit(st, true, len);
}
