/* engine/text/tokenizer-wpm.c: WordPiece (tokenizer.ggml.model = "bert") and the
 * Unicode lookups it needs.
 *
 * As llama.cpp's llm_tokenizer_wpm: the text is decoded (invalid bytes ->
 * U+FFFD); with strip_accents (tokenizer.ggml.normalizer.strip_accents, default
 * = lowercase) each code point is replaced by the first code point of its NFD
 * form ("é" -> "e") and combining marks are dropped; whitespace ends a word;
 * NUL, U+FFFD and control characters are dropped; with lowercase
 * (tokenizer.ggml.normalizer.lowercase, default true) letters are lowercased;
 * punctuation,
 * ASCII symbols and CJK ideographs become one-character words. Each word,
 * prefixed with U+2581 (the GGUF form of a word start; "##" continuations are
 * stored bare), is cut greedily into the longest vocab matches from the
 * left; a word with an unmatched position becomes the unknown token.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/text/tokenizer-impl.h"

uint32_t tok_ucat(uint32_t cp) {
    size_t lo = 0, hi = tok_ucat_ranges_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (tok_ucat_ranges[mid].last < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (lo < tok_ucat_ranges_n && tok_ucat_ranges[lo].first <= cp) ? tok_ucat_ranges[lo].value
                                                                       : 0;
}

uint32_t tok_nfd_head(uint32_t cp) {
    size_t lo = 0, hi = tok_nfd_ranges_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (tok_nfd_ranges[mid].last < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (lo < tok_nfd_ranges_n && tok_nfd_ranges[lo].first <= cp) ? tok_nfd_ranges[lo].value
                                                                     : cp;
}

uint32_t tok_lower(uint32_t cp) {
    size_t lo = 0, hi = tok_lower_map_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (tok_lower_map[mid].from < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (lo < tok_lower_map_n && tok_lower_map[lo].from == cp) ? tok_lower_map[lo].to : cp;
}

bool tok_is_whitespace(uint32_t cp) {
    /* llama.cpp's unicode whitespace list (the Unicode White_Space property) */
    return (cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
           cp == 0x205f || cp == 0x3000;
}

static bool is_chinese(uint32_t cp) {
    return (cp >= 0x4e00 && cp <= 0x9fff) || (cp >= 0x3400 && cp <= 0x4dbf) ||
           (cp >= 0x20000 && cp <= 0x2a6df) || (cp >= 0x2a700 && cp <= 0x2b73f) ||
           (cp >= 0x2b740 && cp <= 0x2b81f) || (cp >= 0x2b920 && cp <= 0x2ceaf) ||
           (cp >= 0xf900 && cp <= 0xfaff) || (cp >= 0x2f800 && cp <= 0x2fa1f);
}

/* Greedy longest-match of one word (already prefixed with U+2581). */
static int wpm_word(const struct tokenizer *tok, const char *w, size_t n,
                    struct tokenizer_ids *out) {
    size_t n0 = out->n;
    for (size_t i = 0; i < n;) {
        size_t j = n - i < (size_t)tok->max_token_len ? n : i + tok->max_token_len;
        int32_t id = -1;
        for (; j > i; j--)
            if ((id = tok_lookup(tok, w + i, j - i)) >= 0)
                break;
        if (id < 0) {
            out->n = n0; /* discard the partial word */
            break;
        }
        if (tok_ids_push(out, id))
            return STRATA_E_NOMEM;
        i = j;
    }
    if (out->n == n0 && tok->unk >= 0)
        return tok_ids_push(out, tok->unk);
    return 0;
}

int tok_wpm_encode(const struct tokenizer *tok, const char *text, size_t len,
                   struct tokenizer_ids *out) {
    struct tok_buf w = {0};
    int rc = 0;
    if (tok_buf_put(&w, "\xe2\x96\x81", 3))
        return STRATA_E_NOMEM;
    for (size_t off = 0; off <= len && rc == 0;) {
        uint32_t cp = ' ';
        if (off < len)
            tok_utf8_decode((const uint8_t *)text, len, &off, &cp);
        else
            off++; /* end: flush the last word */
        if (tok->wpm_strip_accents)
            cp = tok_nfd_head(cp);
        uint32_t cat = tok_ucat(cp);
        bool split = false, single = false;
        if (tok_is_whitespace(cp))
            split = true;
        else if (cp == 0 || cp == 0xfffd || (cat & TOK_UCAT_CONTROL))
            continue;
        else if (tok->wpm_strip_accents && (cat & TOK_UCAT_MARK))
            continue;
        else if ((cat & TOK_UCAT_PUNCT) || (cp < 0x7f && (cat & TOK_UCAT_SYMBOL)) || is_chinese(cp))
            split = single = true;
        if (split && w.n > 3) {
            rc = wpm_word(tok, w.p, w.n, out);
            w.n = 3;
        }
        if (rc || (split && !single))
            continue;
        char buf[4];
        size_t k = tok_utf8_encode(tok->wpm_lowercase ? tok_lower(cp) : cp, buf);
        if (tok_buf_put(&w, buf, k)) {
            rc = STRATA_E_NOMEM;
            break;
        }
        if (single) {
            rc = wpm_word(tok, w.p, w.n, out);
            w.n = 3;
        }
    }
    tok_buf_free(&w);
    return rc;
}
