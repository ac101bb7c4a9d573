/* engine/text/tokenizer.c: vocabulary from GGUF metadata, lookups, accessors, the
 * special-token partition and the encode dispatch (llama.cpp llama-vocab.cpp
 * semantics; see tokenizer.h). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf/gguf.h"
#include "engine/text/tokenizer-impl.h"
#include "engine/core/buf.h"

/* ---- small helpers --------------------------------------------------------- */

int tok_buf_reserve(struct tok_buf *b, size_t extra) {
    if (extra > SIZE_MAX - b->n - 1 ||
        strata_grow((void **)&b->p, &b->cap, b->n + extra + 1, 1) < 0)
        return STRATA_E_NOMEM;
    return 0;
}

int tok_buf_put(struct tok_buf *b, const void *data, size_t n) {
    if (tok_buf_reserve(b, n))
        return STRATA_E_NOMEM;
    if (n)
        memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

void tok_buf_free(struct tok_buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

int tok_ids_push(struct tokenizer_ids *ids, int32_t id) {
    if (strata_grow((void **)&ids->ids, &ids->cap, ids->n + 1, sizeof *ids->ids) < 0)
        return STRATA_E_NOMEM;
    ids->ids[ids->n++] = id;
    return 0;
}

void tokenizer_ids_free(struct tokenizer_ids *ids) {
    if (!ids)
        return;
    free(ids->ids);
    ids->ids = NULL;
    ids->n = ids->cap = 0;
}

static bool bigram_before(const struct tok_bigram *a, const struct tok_bigram *b) {
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

int tok_heap_push(struct tok_heap *h, struct tok_bigram bg) {
    if (strata_grow((void **)&h->v, &h->cap, h->n + 1, sizeof *h->v) < 0)
        return STRATA_E_NOMEM;
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&bg, &h->v[p]))
            break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = bg;
    return 0;
}

static struct tok_bigram heap_pop(struct tok_heap *h) {
    struct tok_bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && bigram_before(&h->v[c + 1], &h->v[c]))
            c++;
        if (!bigram_before(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

int32_t tok_syms_split(const char *text, size_t len, struct tok_sym *s) {
    int32_t n = 0;
    for (size_t off = 0; off < len;) {
        size_t cl = tok_utf8_len((uint8_t)text[off]);
        if (cl > len - off)
            cl = len - off;
        s[n] = (struct tok_sym){(uint32_t)off, (uint32_t)cl, n - 1, -1};
        off += cl;
        s[n].next = off == len ? -1 : n + 1;
        n++;
    }
    return n;
}

int tok_syms_merge(const struct tokenizer *tok, const char *text, struct tok_sym *s, int32_t n,
                   tok_pair_fn pair, struct tok_heap *h) {
    int rc = 0;
    h->n = 0;
    for (int32_t i = 1; i < n && rc == 0; i++)
        rc = pair(tok, text, s, i - 1, i, h);
    while (h->n && rc == 0) {
        struct tok_bigram bg = heap_pop(h);
        struct tok_sym *l = &s[bg.left], *r = &s[bg.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != bg.size)
            continue; /* one side changed since it was queued */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            s[r->next].prev = bg.left;
        rc = pair(tok, text, s, l->prev, bg.left, h);
        if (rc == 0)
            rc = pair(tok, text, s, bg.left, l->next, h);
    }
    return rc;
}

bool tok_utf8_decode(const uint8_t *s, size_t n, size_t *off, uint32_t *cp) {
    size_t i = *off;
    uint8_t c = s[i];
    if (!(c & 0x80)) {
        *cp = c;
        *off = i + 1;
        return true;
    }
    size_t need = 0;
    uint32_t v = 0;
    if (!(c & 0x40)) {
        need = 0; /* stray continuation byte */
    } else if (!(c & 0x20)) {
        need = 1;
        v = c & 0x1f;
    } else if (!(c & 0x10)) {
        need = 2;
        v = c & 0x0f;
    } else if (!(c & 0x08)) {
        need = 3;
        v = c & 0x07;
    }
    if (need == 0 || i + need >= n) {
        *cp = 0xFFFD;
        *off = i + 1;
        return false;
    }
    for (size_t k = 1; k <= need; k++) {
        if ((s[i + k] & 0xc0) != 0x80) {
            *cp = 0xFFFD;
            *off = i + 1;
            return false;
        }
        v = (v << 6) | (s[i + k] & 0x3f);
    }
    *cp = v;
    *off = i + need + 1;
    return true;
}

size_t tok_utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* ---- hash tables ----------------------------------------------------------- */

uint64_t tok_hash_bytes(const void *p, size_t n, uint64_t seed) {
    /* FNV-1a, 64-bit: short keys (token texts average < 8 bytes) */
    const uint8_t *s = p;
    uint64_t h = 0xcbf29ce484222325ull ^ seed;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ull;
    }
    return h ^ (h >> 29);
}

static int hash_init(struct tok_hash *h, size_t n_items) {
    size_t cap = 16;
    while (cap < n_items * 2 + 1)
        cap *= 2;
    h->slots = malloc(cap * sizeof(int32_t));
    if (!h->slots)
        return STRATA_E_NOMEM;
    memset(h->slots, 0xff, cap * sizeof(int32_t));
    h->mask = cap - 1;
    return 0;
}

int32_t tok_lookup(const struct tokenizer *tok, const char *text, size_t len) {
    size_t i = tok_hash_bytes(text, len, 0) & tok->text_hash.mask;
    for (;;) {
        int32_t id = tok->text_hash.slots[i];
        if (id < 0)
            return -1;
        const struct tok_token *t = &tok->tokens[id];
        if (t->len == len && !memcmp(tok->blob + t->off, text, len))
            return id;
        i = (i + 1) & tok->text_hash.mask;
    }
}

/* Inserts id under its text; a later duplicate replaces the earlier one (as
 * llama.cpp's token_to_id[word] = i). */
static void text_hash_insert(struct tokenizer *tok, int32_t id) {
    const struct tok_token *t = &tok->tokens[id];
    size_t i = tok_hash_bytes(tok->blob + t->off, t->len, 0) & tok->text_hash.mask;
    for (;;) {
        int32_t cur = tok->text_hash.slots[i];
        if (cur < 0 || (tok->tokens[cur].len == t->len &&
                        !memcmp(tok->blob + tok->tokens[cur].off, tok->blob + t->off, t->len))) {
            tok->text_hash.slots[i] = id;
            return;
        }
        i = (i + 1) & tok->text_hash.mask;
    }
}

static uint64_t merge_key(const char *l, size_t ln, const char *r, size_t rn) {
    return tok_hash_bytes(r, rn, tok_hash_bytes(l, ln, 0x9e3779b97f4a7c15ull));
}

int32_t tok_merge_rank(const struct tokenizer *tok, const char *l, size_t ln, const char *r,
                       size_t rn) {
    if (!tok->merge_hash.slots)
        return -1;
    size_t i = merge_key(l, ln, r, rn) & tok->merge_hash.mask;
    for (;;) {
        int32_t rank = tok->merge_hash.slots[i];
        if (rank < 0)
            return -1;
        const struct tok_merge *m = &tok->merges[rank];
        if (m->left_len == ln && m->right_len == rn &&
            !memcmp(tok->merge_blob + m->left_off, l, ln) &&
            !memcmp(tok->merge_blob + m->right_off, r, rn))
            return rank;
        i = (i + 1) & tok->merge_hash.mask;
    }
}

/* ---- loading ----------------------------------------------------------------- */

static int load_tokens(struct tokenizer *tok, const struct gguf_file *f, struct strata_error *err) {
    struct gguf_value toks, scores, types;
    int rc = gguf_get_arr(f, "tokenizer.ggml.tokens", &toks, err);
    if (rc)
        return strata_error_set(err, STRATA_E_FORMAT,
                                "tokenizer.ggml.tokens: missing or not an array");
    if (toks.arr.elem_type != GGUF_TYPE_STRING || toks.arr.n == 0 || toks.arr.n > INT32_MAX / 2)
        return strata_error_set(
            err, STRATA_E_FORMAT, "tokenizer.ggml.tokens: need 1..%d strings (have %llu of %s)",
            INT32_MAX / 2, (unsigned long long)toks.arr.n, gguf_type_name(toks.arr.elem_type));
    uint64_t n = toks.arr.n;
    bool have_scores = gguf_get_arr(f, "tokenizer.ggml.scores", &scores, NULL) == 0;
    if (have_scores && (scores.arr.n != n || (scores.arr.elem_type != GGUF_TYPE_FLOAT32 &&
                                              scores.arr.elem_type != GGUF_TYPE_FLOAT64)))
        return strata_error_set(err, STRATA_E_FORMAT,
                                "tokenizer.ggml.scores: need %llu floats (have %llu)",
                                (unsigned long long)n, (unsigned long long)scores.arr.n);
    bool have_types = gguf_get_arr(f, "tokenizer.ggml.token_type", &types, NULL) == 0;
    if (have_types &&
        (types.arr.n != n || types.arr.elem_type == GGUF_TYPE_STRING ||
         types.arr.elem_type == GGUF_TYPE_ARRAY || types.arr.elem_type == GGUF_TYPE_FLOAT32 ||
         types.arr.elem_type == GGUF_TYPE_FLOAT64 || types.arr.elem_type == GGUF_TYPE_BOOL))
        return strata_error_set(err, STRATA_E_FORMAT,
                                "tokenizer.ggml.token_type: need %llu integers (have %llu)",
                                (unsigned long long)n, (unsigned long long)types.arr.n);

    uint64_t blob_size = 0;
    for (uint64_t i = 0; i < n; i++) {
        struct gguf_str s = gguf_arr_str(f, &toks, i);
        blob_size += (s.len ? s.len : 24) + 1; /* "[EMPTY_i]" for empty tokens */
    }
    if (blob_size >= UINT32_MAX)
        return strata_error_set(err, STRATA_E_FORMAT, "tokenizer.ggml.tokens: %llu bytes of text",
                                (unsigned long long)blob_size);
    tok->n_vocab = (int32_t)n;
    tok->tokens = calloc(n, sizeof(*tok->tokens));
    tok->blob = malloc(blob_size ? blob_size : 1);
    if (!tok->tokens || !tok->blob || hash_init(&tok->text_hash, n))
        return strata_error_set(err, STRATA_E_NOMEM, "tokenizer: vocabulary of %llu tokens",
                                (unsigned long long)n);
    uint32_t off = 0;
    for (uint64_t i = 0; i < n; i++) {
        struct gguf_str s = gguf_arr_str(f, &toks, i);
        struct tok_token *t = &tok->tokens[i];
        t->off = off;
        if (s.len) {
            memcpy(tok->blob + off, s.ptr, s.len);
            t->len = (uint32_t)s.len;
        } else {
            /* llama.cpp: an empty token becomes "[EMPTY_<i>]" */
            t->len = (uint32_t)snprintf(tok->blob + off, 24, "[EMPTY_%llu]", (unsigned long long)i);
        }
        tok->blob[off + t->len] = '\0';
        off += t->len + 1;
        if (t->len > tok->max_token_len)
            tok->max_token_len = t->len;
        t->score = have_scores ? (float)gguf_arr_float(&scores, i) : 0.0f;
        t->attr = TOKENIZER_ATTR_NORMAL;
        if (have_types) {
            switch (gguf_arr_int(&types, i)) {
            case 1:
                t->attr = TOKENIZER_ATTR_NORMAL;
                break;
            case 2:
                t->attr = TOKENIZER_ATTR_UNKNOWN;
                break;
            case 3:
                t->attr = TOKENIZER_ATTR_CONTROL;
                break;
            case 4:
                t->attr = TOKENIZER_ATTR_USER_DEFINED;
                break;
            case 5:
                t->attr = TOKENIZER_ATTR_UNUSED;
                break;
            case 6:
                t->attr = TOKENIZER_ATTR_BYTE;
                break;
            default:
                t->attr = TOKENIZER_ATTR_UNDEFINED;
                break;
            }
        }
        text_hash_insert(tok, (int32_t)i);
    }
    return 0;
}

static int load_merges(struct tokenizer *tok, const struct gguf_file *f, struct strata_error *err) {
    struct gguf_value m;
    if (gguf_get_arr(f, "tokenizer.ggml.merges", &m, NULL) != 0 ||
        m.arr.elem_type != GGUF_TYPE_STRING)
        return strata_error_set(err, STRATA_E_FORMAT,
                                "tokenizer.ggml.merges: missing (needed by a gpt2 tokenizer)");
    if (m.arr.n > INT32_MAX / 2)
        return strata_error_set(err, STRATA_E_FORMAT, "tokenizer.ggml.merges: %llu entries",
                                (unsigned long long)m.arr.n);
    uint64_t size = 0;
    for (uint64_t i = 0; i < m.arr.n; i++)
        size += gguf_arr_str(f, &m, i).len;
    if (size >= UINT32_MAX)
        return strata_error_set(err, STRATA_E_FORMAT, "tokenizer.ggml.merges: too large");
    tok->merges = calloc(m.arr.n ? m.arr.n : 1, sizeof(*tok->merges));
    tok->merge_blob = malloc(size ? size : 1);
    if (!tok->merges || !tok->merge_blob || hash_init(&tok->merge_hash, m.arr.n))
        return strata_error_set(err, STRATA_E_NOMEM, "tokenizer: %llu merges",
                                (unsigned long long)m.arr.n);
    uint32_t off = 0;
    for (uint64_t i = 0; i < m.arr.n; i++) {
        struct gguf_str s = gguf_arr_str(f, &m, i);
        /* llama.cpp: split at the first ' ' from index 1 on; none -> both empty */
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        struct tok_merge *mg = &tok->merges[tok->n_merges];
        if (sp) {
            size_t ln = (size_t)(sp - s.ptr);
            memcpy(tok->merge_blob + off, s.ptr, s.len);
            mg->left_off = off;
            mg->left_len = (uint32_t)ln;
            mg->right_off = off + (uint32_t)ln + 1;
            mg->right_len = (uint32_t)(s.len - ln - 1);
            off += (uint32_t)s.len;
        } else {
            mg->left_off = mg->right_off = off;
            mg->left_len = mg->right_len = 0;
        }
        /* keep the first (lowest) rank of a repeated pair, as bpe_ranks.emplace does */
        const char *l = tok->merge_blob + mg->left_off, *r = tok->merge_blob + mg->right_off;
        if (tok_merge_rank(tok, l, mg->left_len, r, mg->right_len) < 0) {
            size_t h = merge_key(l, mg->left_len, r, mg->right_len) & tok->merge_hash.mask;
            while (tok->merge_hash.slots[h] >= 0)
                h = (h + 1) & tok->merge_hash.mask;
            tok->merge_hash.slots[h] = (int32_t)tok->n_merges;
        }
        tok->n_merges++;
    }
    return 0;
}

/* Reads an optional token id key; out-of-range ids keep the default (llama.cpp
 * warns "bad special token" and does the same). */
static void get_id(const struct gguf_file *f, const char *key, int32_t n_vocab, int32_t *id) {
    uint64_t v;
    if (gguf_get_uint(f, key, &v, NULL) == 0 && v < (uint64_t)n_vocab)
        *id = (int32_t)v;
}

static void get_flag(const struct gguf_file *f, const char *key, bool *flag) {
    bool v;
    if (gguf_get_bool(f, key, &v, NULL) == 0)
        *flag = v;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

struct tokenizer *tokenizer_init_gguf(const struct gguf_file *f, struct strata_error *err) {
    if (!f) {
        strata_error_set(err, STRATA_E_INVALID, "tokenizer_init_gguf: NULL file");
        return NULL;
    }
    struct tokenizer *tok = calloc(1, sizeof(*tok));
    if (!tok) {
        strata_error_set(err, STRATA_E_NOMEM, "tokenizer: out of memory");
        return NULL;
    }
    memset(tok->byte_ids, 0xff, sizeof(tok->byte_ids));
    tok->bos = tok->eos = tok->eot = tok->eom = tok->unk = tok->sep = tok->pad = tok->nl = -1;
    char model[64] = "";
    if (gguf_get_str_buf(f, "tokenizer.ggml.model", model, sizeof(model), NULL) != 0) {
        strata_error_set(err, STRATA_E_FORMAT, "tokenizer.ggml.model: missing");
        goto fail;
    }
    strcpy(tok->pre_name, "default");
    gguf_get_str_buf(f, "tokenizer.ggml.pre", tok->pre_name, sizeof(tok->pre_name), NULL);
    if (!tok->pre_name[0])
        strcpy(tok->pre_name, "default");

    /* defaults per model, as llama.cpp's llama_vocab::impl::load */
    bool add_sep = false;
    if (!strcmp(model, "llama")) {
        tok->kind = TOKENIZER_KIND_SPM;
        tok->bos = 1, tok->eos = 2, tok->unk = 0;
        tok->add_space_prefix = true, tok->add_bos = true;
    } else if (!strcmp(model, "gpt2")) {
        tok->kind = TOKENIZER_KIND_BPE;
        tok->bos = 11, tok->eos = 11;
        tok->clean_spaces = true;
    } else if (!strcmp(model, "bert")) {
        tok->kind = TOKENIZER_KIND_WPM;
        tok->bos = 101, tok->unk = 100, tok->sep = 102, tok->pad = 0;
        tok->clean_spaces = true, tok->add_bos = true, add_sep = true;
    } else {
        strata_error_set(err, STRATA_E_UNSUPPORTED,
                         "tokenizer.ggml.model '%s' is not supported (llama, gpt2, bert)", model);
        goto fail;
    }
    if (load_tokens(tok, f, err))
        goto fail;
    if (tok->kind == TOKENIZER_KIND_BPE) {
        if (load_merges(tok, f, err))
            goto fail;
        bool add_bos = false;
        tok->pre = tok_pre_init(tok->pre_name, &tok->ignore_merges, &tok->clean_spaces, err);
        if (!tok->pre)
            goto fail;
        /* llama3 / tekken / chameleon pre-tokenizers set add_bos in llama.cpp */
        if (tok->ignore_merges || !strcmp(tok->pre_name, "chameleon"))
            add_bos = true;
        tok->add_bos = add_bos;
        if (!strcmp(tok->pre_name, "chatglm-bpe") || !strcmp(tok->pre_name, "glm4"))
            tok->bos = -1;
    }
    /* the defaults above may lie outside a small vocab */
    int32_t *defaults[] = {&tok->bos, &tok->eos, &tok->unk, &tok->sep, &tok->pad};
    for (int i = 0; i < 5; i++)
        if (*defaults[i] >= tok->n_vocab)
            *defaults[i] = -1;
    get_flag(f, "tokenizer.ggml.add_space_prefix", &tok->add_space_prefix);
    get_id(f, "tokenizer.ggml.bos_token_id", tok->n_vocab, &tok->bos);
    get_id(f, "tokenizer.ggml.eos_token_id", tok->n_vocab, &tok->eos);
    get_id(f, "tokenizer.ggml.eot_token_id", tok->n_vocab, &tok->eot);
    get_id(f, "tokenizer.ggml.eom_token_id", tok->n_vocab, &tok->eom);
    get_id(f, "tokenizer.ggml.unknown_token_id", tok->n_vocab, &tok->unk);
    get_id(f, "tokenizer.ggml.seperator_token_id", tok->n_vocab, &tok->sep);
    get_id(f, "tokenizer.ggml.padding_token_id", tok->n_vocab, &tok->pad);
    get_flag(f, "tokenizer.ggml.add_bos_token", &tok->add_bos);
    get_flag(f, "tokenizer.ggml.add_eos_token", &tok->add_eos);
    get_flag(f, "tokenizer.ggml.add_sep_token", &add_sep);
    tok->add_sep = add_sep;
    /* BertNormalizer options: lowercase (default true); strip_accents defaults to it */
    tok->wpm_lowercase = true;
    get_flag(f, "tokenizer.ggml.normalizer.lowercase", &tok->wpm_lowercase);
    tok->wpm_strip_accents = tok->wpm_lowercase;
    get_flag(f, "tokenizer.ggml.normalizer.strip_accents", &tok->wpm_strip_accents);

    if (tok->kind == TOKENIZER_KIND_SPM) {
        tok->spm_word_split = true;
        for (int32_t id = 0; id < tok->n_vocab && tok->spm_word_split; id++) {
            const char *t = tok_text(tok, id);
            uint32_t n = tok->tokens[id].len;
            for (const char *p = t; (p = memmem(p, n - (size_t)(p - t), "\xe2\x96\x81", 3)); p += 3)
                if (p > t && (p - t < 3 || memcmp(p - 3, "\xe2\x96\x81", 3))) {
                    tok->spm_word_split = false;
                    break;
                }
        }
        for (int b = 0; b < 256; b++) {
            char buf[8];
            snprintf(buf, sizeof(buf), "<0x%02X>", b);
            tok->byte_ids[b] = tok_lookup(tok, buf, strlen(buf));
            if (tok->byte_ids[b] < 0) {
                char raw = (char)b;
                tok->byte_ids[b] = tok_lookup(tok, &raw, 1);
            }
        }
    }
    if (tok_setup_special(tok, f)) {
        strata_error_set(err, STRATA_E_NOMEM, "tokenizer: out of memory");
        goto fail;
    }
    /* the newline token: SPM <0x0A>, WPM pad, BPE the encoding of "\n" */
    if (tok->kind == TOKENIZER_KIND_SPM) {
        tok->nl = tok->byte_ids['\n'] >= 0 ? tok->byte_ids['\n'] : tok->pad;
    } else if (tok->kind == TOKENIZER_KIND_WPM) {
        tok->nl = tok->pad;
    } else {
        struct tokenizer_ids ids = {0};
        struct tokenizer_encode_opts o = tokenizer_encode_opts_default();
        o.add_special = false;
        if (tokenizer_encode(tok, "\n", 1, &o, &ids, NULL) == 0 && ids.n > 0)
            tok->nl = ids.ids[0];
        else
            tok->nl = tok->pad;
        tokenizer_ids_free(&ids);
    }
    return tok;
fail:
    tokenizer_free(tok);
    return NULL;
}

void tokenizer_free(struct tokenizer *tok) {
    if (!tok)
        return;
    free(tok->special);
    free(tok->eog);
    tok_pre_free(tok->pre);
    free(tok->merge_hash.slots);
    free(tok->merge_blob);
    free(tok->merges);
    free(tok->text_hash.slots);
    free(tok->blob);
    free(tok->tokens);
    free(tok);
}

/* ---- accessors ------------------------------------------------------------- */

enum tokenizer_kind tokenizer_get_kind(const struct tokenizer *tok) {
    return tok->kind;
}
const char *tokenizer_pre_name(const struct tokenizer *tok) {
    return tok->pre_name;
}
int32_t tokenizer_n_vocab(const struct tokenizer *tok) {
    return tok->n_vocab;
}
const char *tokenizer_piece(const struct tokenizer *tok, int32_t id, size_t *len) {
    if (id < 0 || id >= tok->n_vocab)
        return NULL;
    if (len)
        *len = tok->tokens[id].len;
    return tok_text(tok, id);
}
uint32_t tokenizer_attr(const struct tokenizer *tok, int32_t id) {
    return (id < 0 || id >= tok->n_vocab) ? 0 : tok->tokens[id].attr;
}
float tokenizer_score(const struct tokenizer *tok, int32_t id) {
    return (id < 0 || id >= tok->n_vocab) ? 0.0f : tok->tokens[id].score;
}
int32_t tokenizer_find(const struct tokenizer *tok, const char *text, size_t len) {
    return tok_lookup(tok, text, len);
}
int32_t tokenizer_bos(const struct tokenizer *tok) {
    return tok->bos;
}
int32_t tokenizer_eos(const struct tokenizer *tok) {
    return tok->eos;
}
int32_t tokenizer_eot(const struct tokenizer *tok) {
    return tok->eot;
}
int32_t tokenizer_eom(const struct tokenizer *tok) {
    return tok->eom;
}
int32_t tokenizer_unk(const struct tokenizer *tok) {
    return tok->unk;
}
int32_t tokenizer_sep(const struct tokenizer *tok) {
    return tok->sep;
}
int32_t tokenizer_pad(const struct tokenizer *tok) {
    return tok->pad;
}
int32_t tokenizer_nl(const struct tokenizer *tok) {
    return tok->nl;
}
bool tokenizer_add_bos(const struct tokenizer *tok) {
    return tok->add_bos;
}
bool tokenizer_add_eos(const struct tokenizer *tok) {
    return tok->add_eos;
}
bool tokenizer_add_space_prefix(const struct tokenizer *tok) {
    return tok->add_space_prefix;
}
bool tokenizer_is_eog(const struct tokenizer *tok, int32_t id) {
    return id >= 0 && bsearch(&id, tok->eog, tok->n_eog, sizeof(int32_t), cmp_i32) != NULL;
}
bool tokenizer_is_control(const struct tokenizer *tok, int32_t id) {
    return (tokenizer_attr(tok, id) & TOKENIZER_ATTR_CONTROL) != 0;
}
bool tokenizer_is_special(const struct tokenizer *tok, int32_t id) {
    return (tokenizer_attr(tok, id) & (TOKENIZER_ATTR_CONTROL | TOKENIZER_ATTR_UNKNOWN)) != 0;
}
