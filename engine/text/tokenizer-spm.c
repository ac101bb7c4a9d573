/* engine/text/tokenizer-spm.c: SentencePiece BPE (tokenizer.ggml.model = "llama").
 *
 * As llama.cpp's llm_tokenizer_spm: the (already U+2581-escaped) text is cut
 * into UTF-8 characters; every adjacent pair whose concatenation is a vocab
 * token goes into a priority queue ordered by that token's score (highest
 * first, then leftmost); popping merges the pair if both sides are unchanged
 * and queues the new neighbours. Each final symbol is its token, or, if the
 * symbol is not in the vocab (a character the model never saw), one <0xXX>
 * byte token per byte (byte fallback; the unknown token when the vocab has no
 * byte tokens, where llama.cpp would throw).
 *
 * Symbols only grow by absorbing their right neighbour and their text is a
 * contiguous span of the input, so "unchanged" is checked by length, and
 * llama.cpp's rev_merge re-segmentation never fires (every merged symbol is a
 * vocab token by construction) and is left out.
 */
#include <stdlib.h>

#include "engine/text/tokenizer-impl.h"

static int try_bigram(const struct tokenizer *tok, const char *text, const struct tok_sym *syms,
                      int32_t l, int32_t r, struct tok_heap *h) {
    if (l < 0 || r < 0)
        return 0;
    uint32_t size = syms[l].n + syms[r].n;
    int32_t id = tok_lookup(tok, text + syms[l].off, size);
    if (id < 0)
        return 0;
    return tok_heap_push(h, (struct tok_bigram){-(double)tok->tokens[id].score, l, r, size});
}

static int spm_chunk(const struct tokenizer *tok, const char *text, size_t len,
                     struct tokenizer_ids *out) {
    if (len == 0)
        return 0;
    if (len > UINT32_MAX / 2)
        return STRATA_E_LIMIT;
    struct tok_sym *syms = malloc(len * sizeof(*syms));
    struct tok_heap h = {0};
    if (!syms)
        return STRATA_E_NOMEM;
    int32_t n = tok_syms_split(text, len, syms);
    int rc = tok_syms_merge(tok, text, syms, n, try_bigram, &h);
    for (int32_t i = 0; i != -1 && n > 0 && rc == 0; i = syms[i].next) {
        const struct tok_sym *s = &syms[i];
        int32_t id = tok_lookup(tok, text + s->off, s->n);
        if (id >= 0) {
            rc = tok_ids_push(out, id);
            continue;
        }
        for (uint32_t j = 0; j < s->n && rc == 0; j++) {
            int32_t b = tok->byte_ids[(uint8_t)text[s->off + j]];
            if (b < 0)
                b = tok->unk;
            if (b >= 0)
                rc = tok_ids_push(out, b);
        }
    }
    free(h.v);
    free(syms);
    return rc;
}

static bool is_space_mark(const char *s, size_t n) {
    return n == 3 && (uint8_t)s[0] == 0xe2 && (uint8_t)s[1] == 0x96 && (uint8_t)s[2] == 0x81;
}

/* When no vocab token has U+2581 after another character (tok->spm_word_split,
 * checked at load), no merge can cross a word start "X|U+2581", so each word
 * is encoded alone with a small queue: the same ids as one queue over the whole
 * text (merges in different words never interact, and within a word the
 * score-then-leftmost order is unchanged), 7.7x faster on 4 MB of English
 * (tokenizer-bench, release build, this 2-core box: 0.42 -> 3.25 MB/s on
 * ggml-vocab-llama-spm, same 1,305,675 ids). Word starts
 * are found on the same character grid the merge loop uses. */
int tok_spm_encode(const struct tokenizer *tok, const char *text, size_t len,
                   struct tokenizer_ids *out) {
    if (!tok->spm_word_split)
        return spm_chunk(tok, text, len, out);
    size_t start = 0, off = 0;
    bool prev_mark = true;
    while (off < len) {
        size_t cl = tok_utf8_len((uint8_t)text[off]);
        if (cl > len - off)
            cl = len - off;
        bool mark = is_space_mark(text + off, cl);
        if (mark && !prev_mark && off > start) {
            int rc = spm_chunk(tok, text + start, off - start, out);
            if (rc)
                return rc;
            start = off;
        }
        prev_mark = mark;
        off += cl;
    }
    return spm_chunk(tok, text + start, len - start, out);
}
