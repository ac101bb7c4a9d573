/* engine/text/tokenizer-bpe.c: byte-level BPE (tokenizer.ggml.model = "gpt2").
 *
 * As llama.cpp's llm_tokenizer_bpe: the pre-tokenizer (tokenizer-pre.c) cuts
 * the text into words; each word's bytes are mapped to GPT-2's printable
 * code points (bytes_to_unicode) and cut into characters; every adjacent pair
 * that appears in tokenizer.ggml.merges is queued by merge rank (lowest first,
 * then leftmost); popping merges the pair if both sides are unchanged and
 * queues the new neighbours. A final symbol that is not a token is emitted
 * byte by byte as single-byte tokens where those exist. With ignore_merges
 * (llama3, tekken) a word that is itself a token is emitted whole.
 *
 * Merge lookups hash the two strings (tok_merge_rank): one probe per
 * candidate pair, no allocation.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/text/tokenizer-impl.h"

/* ---- GPT-2 bytes_to_unicode ----------------------------------------------- */

/* Printable Latin-1 bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) map to themselves;
 * the other 68 bytes, in order, to U+0100 + k. */
static bool byte_is_direct(unsigned b) {
    return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
}

uint32_t tok_byte_to_cp(uint8_t b) {
    if (byte_is_direct(b))
        return b;
    /* non-direct bytes: 0x00..0x20 (k 0..32), 0x7f..0xa0 (k 33..66), 0xad (k 67) */
    if (b <= 0x20)
        return 0x100 + b;
    if (b <= 0xa0)
        return 0x100 + 33 + (b - 0x7f);
    return 0x100 + 67;
}

int tok_cp_to_byte(uint32_t cp) {
    if (cp < 0x100)
        return byte_is_direct(cp) ? (int)cp : -1;
    if (cp >= 0x100 + 68)
        return -1;
    uint32_t k = cp - 0x100;
    if (k <= 32)
        return (int)k;
    if (k <= 66)
        return (int)(0x7f + k - 33);
    return 0xad;
}

/* Byte-level form of each byte, precomputed once: UTF-8 of tok_byte_to_cp. */
struct byte_form {
    char s[2];
    uint8_t n;
};

static void byte_forms(struct byte_form f[256]) {
    for (int b = 0; b < 256; b++) {
        char tmp[4];
        f[b].n = (uint8_t)tok_utf8_encode(tok_byte_to_cp((uint8_t)b), tmp);
        memcpy(f[b].s, tmp, f[b].n);
    }
}

/* ---- merge pairs (the queue is tok_syms_merge in tokenizer.c) ---------------- */

static int add_bigram(const struct tokenizer *tok, const char *w, const struct tok_sym *s,
                      int32_t l, int32_t r, struct tok_heap *h) {
    if (l < 0 || r < 0)
        return 0;
    int32_t rank = tok_merge_rank(tok, w + s[l].off, s[l].n, w + s[r].off, s[r].n);
    if (rank < 0)
        return 0;
    return tok_heap_push(h, (struct tok_bigram){rank, l, r, s[l].n + s[r].n});
}

struct bpe_work {
    struct tok_sym *syms;
    size_t cap;
    struct tok_heap heap;
};

static int bpe_word(const struct tokenizer *tok, const char *w, size_t n, struct bpe_work *wk,
                    struct tokenizer_ids *out) {
    if (tok->ignore_merges) {
        int32_t id = tok_lookup(tok, w, n);
        if (id >= 0)
            return tok_ids_push(out, id);
    }
    if (n > wk->cap) {
        struct tok_sym *s = realloc(wk->syms, n * sizeof(*s));
        if (!s)
            return STRATA_E_NOMEM;
        wk->syms = s;
        wk->cap = n;
    }
    struct tok_sym *s = wk->syms;
    int32_t ns = tok_syms_split(w, n, s);
    int rc = tok_syms_merge(tok, w, s, ns, add_bigram, &wk->heap);
    for (int32_t i = 0; i != -1 && ns > 0 && rc == 0; i = s[i].next) {
        int32_t id = tok_lookup(tok, w + s[i].off, s[i].n);
        if (id >= 0) {
            rc = tok_ids_push(out, id);
            continue;
        }
        for (uint32_t j = 0; j < s[i].n && rc == 0; j++) {
            int32_t b = tok_lookup(tok, w + s[i].off + j, 1);
            if (b >= 0)
                rc = tok_ids_push(out, b);
        }
    }
    return rc;
}

int tok_bpe_encode(const struct tokenizer *tok, const char *text, size_t len,
                   struct tokenizer_ids *out, struct strata_error *err) {
    char *clean = NULL;
    size_t clean_len = 0, n_words = 0;
    struct tokenizer_range *words = NULL;
    int rc = tok_pre_split(tok->pre, text, len, &clean, &clean_len, &words, &n_words, err);
    if (rc)
        return rc;
    struct byte_form bf[256];
    byte_forms(bf);
    struct tok_buf w = {0};
    struct bpe_work wk = {0};
    for (size_t i = 0; i < n_words && rc == 0; i++) {
        w.n = 0;
        if (tok_buf_reserve(&w, words[i].length * 2)) {
            rc = STRATA_E_NOMEM;
            break;
        }
        for (size_t j = 0; j < words[i].length; j++) {
            const struct byte_form *f = &bf[(uint8_t)clean[words[i].offset + j]];
            memcpy(w.p + w.n, f->s, f->n);
            w.n += f->n;
        }
        rc = bpe_word(tok, w.p, w.n, &wk, out);
    }
    free(wk.syms);
    free(wk.heap.v);
    tok_buf_free(&w);
    free(words);
    free(clean);
    return rc;
}
