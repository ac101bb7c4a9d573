/* engine/text/tokenizer-encode.c: special-token partition and the per-model encode
 * dispatch (llama.cpp's tokenizer_st_partition and llama_vocab::tokenize). */
#include <stdlib.h>
#include <string.h>

#include "engine/text/tokenizer-impl.h"
#include "engine/core/buf.h"

/* A piece of the input: raw text [off, off+len) when id < 0, else a token. */
struct frag {
    int32_t id;
    size_t off, len;
};

struct frag_list {
    struct frag *v; /* (n) */
    size_t n, cap;
};

static int frag_push(struct frag_list *l, int32_t id, size_t off, size_t len) {
    if (strata_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v) < 0)
        return STRATA_E_NOMEM;
    l->v[l->n++] = (struct frag){id, off, len};
    return 0;
}

/* Untrusted ranges, sorted and merged: [start, end) pairs. */
struct spans {
    size_t *v; /* (2 * n) */
    size_t n;
};

static int cmp_range(const void *a, const void *b) {
    const struct tokenizer_range *x = a, *y = b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

static int spans_build(struct spans *s, const struct tokenizer_range *r, size_t n, size_t len) {
    s->v = NULL;
    s->n = 0;
    if (!r || !n)
        return 0;
    struct tokenizer_range *tmp = malloc(n * sizeof(*tmp));
    s->v = malloc(2 * n * sizeof(size_t));
    if (!tmp || !s->v) {
        free(tmp);
        free(s->v);
        s->v = NULL;
        return STRATA_E_NOMEM;
    }
    memcpy(tmp, r, n * sizeof(*tmp));
    qsort(tmp, n, sizeof(*tmp), cmp_range);
    for (size_t i = 0; i < n; i++) {
        size_t a = tmp[i].offset, b;
        if (a >= len || tmp[i].length == 0)
            continue;
        b = tmp[i].length > len - a ? len : a + tmp[i].length;
        if (s->n && a <= s->v[2 * s->n - 1]) {
            if (b > s->v[2 * s->n - 1])
                s->v[2 * s->n - 1] = b;
        } else {
            s->v[2 * s->n] = a;
            s->v[2 * s->n + 1] = b;
            s->n++;
        }
    }
    free(tmp);
    return 0;
}

/* Does [a, b) overlap an untrusted span? */
static bool spans_overlap(const struct spans *s, size_t a, size_t b) {
    size_t lo = 0, hi = s->n;
    while (lo < hi) { /* first span whose end > a */
        size_t mid = (lo + hi) / 2;
        if (s->v[2 * mid + 1] <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->n && s->v[2 * lo] < b;
}

static bool is_space(char c) { /* C isspace in the "C" locale, as llama.cpp */
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Splits the raw fragments of *in at every occurrence of token id. */
static int partition_one(const struct tokenizer *tok, const char *text, int32_t id, bool need_trust,
                         const struct spans *untrusted, struct frag_list *in,
                         struct frag_list *out) {
    const struct tok_token *t = &tok->tokens[id];
    const char *pat = tok_text(tok, id);
    size_t plen = t->len;
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        struct frag fr = in->v[i];
        if (fr.id >= 0 || fr.len < plen) {
            if (frag_push(out, fr.id, fr.off, fr.len))
                return STRATA_E_NOMEM;
            continue;
        }
        size_t base = fr.off, blen = fr.len, from = fr.off;
        for (;;) {
            const char *m = NULL;
            while (from + plen <= base + blen) {
                m = memmem(text + from, base + blen - from, pat, plen);
                if (!m)
                    break;
                size_t mo = (size_t)(m - text);
                if (!need_trust || !spans_overlap(untrusted, mo, mo + plen))
                    break;
                from = mo + 1; /* inside user text: not a special token */
                m = NULL;
            }
            if (!m) {
                if (blen && frag_push(out, -1, base, blen))
                    return STRATA_E_NOMEM;
                break;
            }
            size_t mo = (size_t)(m - text);
            size_t llen = mo - base;
            if (t->attr & TOKENIZER_ATTR_LSTRIP)
                while (llen > 0 && is_space(text[base + llen - 1]))
                    llen--;
            if (llen && frag_push(out, -1, base, llen))
                return STRATA_E_NOMEM;
            if (frag_push(out, id, 0, 0))
                return STRATA_E_NOMEM;
            size_t roff = mo + plen, rlen = base + blen - roff;
            if (t->attr & TOKENIZER_ATTR_RSTRIP)
                while (rlen > 0 && is_space(text[roff])) {
                    roff++;
                    rlen--;
                }
            if (!rlen)
                break;
            base = from = roff;
            blen = rlen;
        }
    }
    return 0;
}

static int partition(const struct tokenizer *tok, const char *text, size_t len,
                     const struct tokenizer_encode_opts *o, struct frag_list *res) {
    struct spans sp;
    if (spans_build(&sp, o->untrusted, o->n_untrusted, len))
        return STRATA_E_NOMEM;
    struct frag_list a = {0}, b = {0};
    int rc = frag_push(&a, -1, 0, len);
    /* Vocabularies with thousands of special tokens (Gemma 3: ~6k) would scan the
     * text once per token; a bitmap of the byte pairs present in the text skips
     * every token whose first two bytes never occur (fragments only shrink, so
     * a pair absent from the text is absent from every fragment). Measured with
     * tokenizer-bench (release, 4 MB English): deepseek-llm, 2,400 special tokens,
     * 1.21 -> 2.80 MB/s, same ids. */
    uint64_t *pairs = NULL;
    if (tok->n_special > 32 && len >= 2 && (pairs = calloc(1024, sizeof(uint64_t))))
        for (size_t i = 0; i + 1 < len; i++) {
            unsigned k = (unsigned)(uint8_t)text[i] << 8 | (uint8_t)text[i + 1];
            pairs[k >> 6] |= 1ull << (k & 63);
        }
    for (size_t k = 0; rc == 0 && k < tok->n_special; k++) {
        int32_t id = tok->special[k];
        uint32_t attr = tok->tokens[id].attr;
        bool ctl = (attr & (TOKENIZER_ATTR_CONTROL | TOKENIZER_ATTR_UNKNOWN)) != 0;
        if (ctl && !o->parse_special)
            continue; /* user-defined tokens are split out even then (HF, llama.cpp) */
        if (tok->tokens[id].len > len)
            continue;
        if (pairs && tok->tokens[id].len >= 2) {
            const char *t = tok_text(tok, id);
            unsigned pk = (unsigned)(uint8_t)t[0] << 8 | (uint8_t)t[1];
            if (!(pairs[pk >> 6] >> (pk & 63) & 1))
                continue;
        }
        rc = partition_one(tok, text, id, ctl, &sp, &a, &b);
        struct frag_list t = a;
        a = b;
        b = t;
    }
    free(pairs);
    free(b.v);
    free(sp.v);
    if (rc) {
        free(a.v);
        return rc;
    }
    *res = a;
    return 0;
}

struct tokenizer_encode_opts tokenizer_encode_opts_default(void) {
    return (struct tokenizer_encode_opts){.add_special = true, .parse_special = false};
}

/* SentencePiece: ' ' -> U+2581, with a prefix space after BOS/special tokens. */
static int spm_fragment(const struct tokenizer *tok, const char *text, size_t len, bool prefix,
                        struct tokenizer_ids *out) {
    struct tok_buf b = {0};
    if (tok_buf_reserve(&b, len * 3 + 3))
        return STRATA_E_NOMEM;
    if (prefix)
        tok_buf_put(&b, "\xe2\x96\x81", 3);
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ')
            tok_buf_put(&b, "\xe2\x96\x81", 3);
        else
            tok_buf_put(&b, &text[i], 1);
    }
    int rc = tok_spm_encode(tok, b.p, b.n, out);
    tok_buf_free(&b);
    return rc;
}

int tokenizer_encode(const struct tokenizer *tok, const char *text, size_t len,
                     const struct tokenizer_encode_opts *opts, struct tokenizer_ids *out,
                     struct strata_error *err) {
    if (!tok || !out || (!text && len))
        return strata_error_set(err, STRATA_E_INVALID, "tokenizer_encode: NULL argument");
    if (len > TOKENIZER_MAX_TEXT)
        return strata_error_set(err, STRATA_E_LIMIT, "tokenizer_encode: %zu bytes (max %zu)", len,
                                TOKENIZER_MAX_TEXT);
    struct tokenizer_encode_opts o = opts ? *opts : tokenizer_encode_opts_default();
    size_t n0 = out->n;
    struct frag_list fl = {0};
    int rc = 0;
    if (len && (rc = partition(tok, text, len, &o, &fl)))
        goto done;

    /* bert: llama.cpp adds CLS and SEP whenever add_special is set */
    bool add_bos =
        o.add_special && tok->bos >= 0 && (tok->add_bos || tok->kind == TOKENIZER_KIND_WPM);
    if (add_bos && (rc = tok_ids_push(out, tok->bos)))
        goto done;
    bool prev_special = true; /* SPM: prefix space before the first fragment */
    for (size_t i = 0; i < fl.n && rc == 0; i++) {
        const struct frag *f = &fl.v[i];
        if (f->id >= 0) {
            rc = tok_ids_push(out, f->id);
            prev_special = true;
            continue;
        }
        switch (tok->kind) {
        case TOKENIZER_KIND_SPM:
            rc = spm_fragment(tok, text + f->off, f->len, tok->add_space_prefix && prev_special,
                              out);
            break;
        case TOKENIZER_KIND_BPE:
            rc = tok_bpe_encode(tok, text + f->off, f->len, out, err);
            break;
        case TOKENIZER_KIND_WPM:
            rc = tok_wpm_encode(tok, text + f->off, f->len, out);
            break;
        }
        prev_special = false;
    }
    if (rc == 0 && o.add_special) {
        if (tok->kind == TOKENIZER_KIND_WPM) {
            if (tok->sep >= 0)
                rc = tok_ids_push(out, tok->sep);
        } else if (tok->add_eos && tok->eos >= 0) {
            rc = tok_ids_push(out, tok->eos);
        }
    }
done:
    free(fl.v);
    if (rc) {
        out->n = n0;
        if (!err || !err->code)
            strata_error_set(err, rc, "tokenizer_encode: %s", strata_error_text(rc));
    }
    return rc;
}
