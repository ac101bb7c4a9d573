/* engine/text/tokenizer-impl.h: internals shared by the tokenizer's files.
 *
 *   tokenizer.c        vocabulary from GGUF, hash tables, accessors, special-token
 *                      partition, encode dispatch, the SPM/BPE merge queue
 *   tokenizer-pre.c    pre-tokenizer regexes per tokenizer.ggml.pre (PCRE2)
 *   tokenizer-spm.c    SentencePiece BPE with scores and byte fallback
 *   tokenizer-bpe.c    byte-level BPE with ranked merges
 *   tokenizer-wpm.c    WordPiece (bert) and its Unicode helpers
 *   tokenizer-detok.c  token_to_piece, decode, streaming detokenizer
 *   tokenizer-unicode-data.c  generated category / NFD / lowercase tables
 *
 * Not a public API: only the tokenizer's own files include this.
 * Threading: as tokenizer.h (struct tokenizer is read-only after
 * tokenizer_init_gguf; scratch state lives on the caller's stack or heap).
 */
#ifndef STRATA_TOKENIZER_IMPL_H
#define STRATA_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/text/tokenizer.h"

/* ---- Unicode tables (tokenizer-unicode-data.c, generated) ---------------- */

enum {
    TOK_UCAT_NUMBER = 1,
    TOK_UCAT_LETTER = 2,
    TOK_UCAT_SEPARATOR = 4,
    TOK_UCAT_MARK = 8,
    TOK_UCAT_PUNCT = 16,
    TOK_UCAT_SYMBOL = 32,
    TOK_UCAT_CONTROL = 64, /* Cc Cf Cs Co; unassigned (Cn) is 0 */
};

struct tok_ucat_range {
    uint32_t first, last, value;
};
struct tok_cp_map {
    uint32_t from, to;
};
extern const struct tok_ucat_range tok_ucat_ranges[];
extern const size_t tok_ucat_ranges_n;
extern const struct tok_ucat_range tok_nfd_ranges[];
extern const size_t tok_nfd_ranges_n;
extern const struct tok_cp_map tok_lower_map[];
extern const size_t tok_lower_map_n;

uint32_t tok_ucat(uint32_t cp);      /* TOK_UCAT_* of cp */
uint32_t tok_nfd_head(uint32_t cp);  /* first codepoint of NFD(cp) */
uint32_t tok_lower(uint32_t cp);     /* first codepoint of lower(cp) */
bool tok_is_whitespace(uint32_t cp); /* llama.cpp's whitespace list */

/* ---- UTF-8 --------------------------------------------------------------- */

/* Sequence length from the lead byte, llama.cpp's unicode_len_utf8 (1 for
 * continuation bytes). */
static inline size_t tok_utf8_len(uint8_t lead) {
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[lead >> 4];
}
/* Decodes one codepoint at s[*off] as llama.cpp's unicode_cpt_from_utf8 (lead
 * byte pattern + continuation bytes; no overlong check). Returns false on an
 * invalid sequence (then *off advances 1 and *cp = U+FFFD). */
bool tok_utf8_decode(const uint8_t *s, size_t n, size_t *off, uint32_t *cp);
size_t tok_utf8_encode(uint32_t cp, char out[4]); /* cp <= 0x10FFFF */

/* ---- growable buffers ----------------------------------------------------- */

struct tok_buf {
    char *p; /* (cap) bytes, NUL-terminated when non-NULL */
    size_t n;
    size_t cap;
};
int tok_buf_reserve(struct tok_buf *b, size_t extra);
int tok_buf_put(struct tok_buf *b, const void *data, size_t n);
void tok_buf_free(struct tok_buf *b);
int tok_ids_push(struct tokenizer_ids *ids, int32_t id);

/* ---- merge queue (tokenizer-spm.c, tokenizer-bpe.c) ------------------------
 * Both encoders split a word into UTF-8 characters and merge the best
 * adjacent pair until none is left, as llama.cpp's SPM and BPE sessions do: a
 * min-heap of candidate pairs ordered by key, ties by the left symbol's index.
 * BPE's key is the merge rank, SPM's the negated token score (higher scores
 * first); a double holds every int32 rank and float score exactly. */
struct tok_sym {
    uint32_t off;       /* bytes into the text */
    uint32_t n;         /* bytes; 0 once merged into its left neighbour */
    int32_t prev, next; /* neighbours' indices, -1 at the ends */
};
struct tok_bigram {
    double key;
    int32_t left, right;
    uint32_t size; /* bytes of left + right when queued */
};
struct tok_heap {
    struct tok_bigram *v; /* (cap) min-heap by (key, left); free() it */
    size_t n, cap;
};
/* Queues the pair (l, r) if the encoder knows it; l or r may be -1 (no pair).
 * 0 or STRATA_E_NOMEM. */
typedef int (*tok_pair_fn)(const struct tokenizer *tok, const char *text, const struct tok_sym *s,
                           int32_t l, int32_t r, struct tok_heap *h);
int tok_heap_push(struct tok_heap *h, struct tok_bigram bg);
/* Splits text[0..len) into UTF-8 characters (a truncated sequence at the end
 * is one symbol) linked in order; s has len entries. Returns the count. */
int32_t tok_syms_split(const char *text, size_t len, struct tok_sym *s);
/* Queues every adjacent pair, then merges the best one while any is queued
 * (pairs whose sides changed since queuing are skipped). The result is the
 * list from s[0] along .next. h is emptied first; its storage is reused. */
int tok_syms_merge(const struct tokenizer *tok, const char *text, struct tok_sym *s, int32_t n,
                   tok_pair_fn pair, struct tok_heap *h);

/* ---- vocabulary ------------------------------------------------------------ */

struct tok_token {
    uint32_t off;  /* text = tok->blob + off (NUL-terminated) */
    uint32_t len;  /* bytes */
    float score;   /* tokenizer.ggml.scores, 0 if absent */
    uint32_t attr; /* TOKENIZER_ATTR_* */
};

/* Open-addressing hash (linear probing), power-of-two slots of int32 indices
 * (-1 empty). Used for text -> id and for BPE merge pair -> rank. */
struct tok_hash {
    int32_t *slots; /* (mask + 1) */
    size_t mask;
};

struct tok_merge {
    uint32_t left_off, left_len; /* in merge_blob */
    uint32_t right_off, right_len;
};

struct tok_pre; /* tokenizer-pre.c: compiled regexes */

struct tokenizer {
    enum tokenizer_kind kind;
    char pre_name[64];
    int32_t n_vocab;
    struct tok_token *tokens; /* (n_vocab) */
    char *blob;               /* all token texts, NUL after each */
    struct tok_hash text_hash;
    uint32_t max_token_len; /* bytes */

    /* BPE merges: rank = index in tokenizer.ggml.merges */
    struct tok_merge *merges; /* (n_merges) */
    uint32_t n_merges;
    char *merge_blob;
    struct tok_hash merge_hash;
    struct tok_pre *pre; /* NULL for SPM/WPM */
    bool ignore_merges;  /* llama3/tekken: a word that is a token is not merged */

    int32_t byte_ids[256]; /* SPM <0xXX> (or the raw byte) token per byte, -1 if none */
    bool spm_word_split;   /* SPM: no token has U+2581 after another character */

    int32_t bos, eos, eot, eom, unk, sep, pad, nl;
    bool add_bos, add_eos, add_sep, add_space_prefix, clean_spaces;
    bool wpm_lowercase, wpm_strip_accents; /* tokenizer.ggml.normalizer.* (bert) */
    int32_t *eog;                          /* (n_eog) sorted */
    size_t n_eog;
    int32_t *special; /* (n_special) control/user-defined/unknown ids, longest text first */
    size_t n_special;
};

static inline const char *tok_text(const struct tokenizer *tok, int32_t id) {
    return tok->blob + tok->tokens[id].off;
}
uint64_t tok_hash_bytes(const void *p, size_t n, uint64_t seed);
int32_t tok_lookup(const struct tokenizer *tok, const char *text, size_t len); /* -1 if absent */
/* tokenizer-special.c: control-looking tokens by text, eot/eom/eog ids, the
 * special-token cache and per-model attributes, as llama.cpp's load. */
struct gguf_file;
int tok_setup_special(struct tokenizer *tok, const struct gguf_file *f);
/* BPE merge rank of (left, right), -1 if none. */
int32_t tok_merge_rank(const struct tokenizer *tok, const char *l, size_t ln, const char *r,
                       size_t rn);

/* ---- algorithms ------------------------------------------------------------ */

/* Each appends the ids of one raw-text fragment to out. */
int tok_spm_encode(const struct tokenizer *tok, const char *text, size_t len,
                   struct tokenizer_ids *out);
int tok_bpe_encode(const struct tokenizer *tok, const char *text, size_t len,
                   struct tokenizer_ids *out, struct strata_error *err);
int tok_wpm_encode(const struct tokenizer *tok, const char *text, size_t len,
                   struct tokenizer_ids *out);

/* Pre-tokenizer: compiles the regex list for a tokenizer.ggml.pre name. Sets
 * *ignore_merges and *clean_spaces as llama.cpp does for that name. NULL + err
 * (STRATA_E_UNSUPPORTED) for an unknown name. */
struct tok_pre *tok_pre_init(const char *pre_name, bool *ignore_merges, bool *clean_spaces,
                             struct strata_error *err);
void tok_pre_free(struct tok_pre *pre);
/* Splits text into words (byte ranges of *clean, which is text with invalid
 * UTF-8 replaced by U+FFFD; owned by the caller: free()). words is (n_words)
 * pairs {offset, length}; owned: free(). */
int tok_pre_split(const struct tok_pre *pre, const char *text, size_t len, char **clean,
                  size_t *clean_len, struct tokenizer_range **words, size_t *n_words,
                  struct strata_error *err);

/* GPT-2 byte <-> unicode mapping. */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp); /* -1 if cp is not a mapped byte */

#endif
