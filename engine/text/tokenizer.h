/* engine/text/tokenizer.h: text <-> token ids from a GGUF vocabulary, matching
 * llama.cpp's llama-vocab.cpp (SentencePiece BPE `llama`, byte-level BPE
 * `gpt2` with the tokenizer.ggml.pre split rules, WordPiece `bert`).
 *
 *   struct strata_error err = {0};
 *   struct tokenizer *tok = tokenizer_init_gguf(gguf, &err);   // gguf borrowed for the call
 *   struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
 *   eo.parse_special = true;                  // rendered chat template: trusted text
 *   eo.untrusted = ranges; eo.n_untrusted = n; // ...except the user's message bytes
 *   struct tokenizer_ids ids = {0};
 *   if (tokenizer_encode(tok, text, len, &eo, &ids, &err) < 0) ...
 *
 *   struct tokenizer_stream *st = tokenizer_stream_init(tok, NULL, &err);
 *   size_t n; const char *s = tokenizer_stream_feed(st, id, &n);   // complete UTF-8 only
 *   fwrite(s, 1, n, stdout);
 *   s = tokenizer_stream_flush(st, &n);       // at the end: pending bytes -> U+FFFD
 *   tokenizer_stream_free(st); tokenizer_ids_free(&ids); tokenizer_free(tok);
 *
 * Special tokens (llama.cpp's tokenizer_st_partition): before the model's
 * algorithm runs, the text of control, unknown and user-defined tokens is cut
 * out of the input, longest token text first. Control and unknown tokens are
 * recognised only when opts.parse_special is set AND the match overlaps no
 * untrusted range; user-defined tokens are always recognised (as HF and
 * llama.cpp do). Matching never splits the raw text at a range boundary, so
 * text that contains no special token tokenizes exactly as without ranges.
 *
 * Invalid UTF-8 input never fails: `gpt2`/`bert` models turn each invalid
 * byte into U+FFFD (llama.cpp's unicode_cpts_from_utf8), `llama` models keep
 * the bytes and encode them through <0xXX> byte tokens (SentencePiece byte
 * fallback), as llama.cpp does (an invalid lead byte takes the next 1-3 bytes
 * into the same "character", so those come back as bytes too).
 *
 * Checked against llama.cpp (node-llama-cpp 3.21.1): the vocab fixtures'
 * .inp/.out ids, and random mixed-script strings with special-token text,
 * encode and decode, on 12 vocabularies (tests/peers/tokenizer-llamacpp.mjs).
 *
 * Ownership: a tokenizer copies what it needs from the GGUF file (the file
 * may be closed afterwards); it is owned by the caller (tokenizer_free()).
 * Strings returned by accessors are borrowed from the tokenizer.
 * Threading: a tokenizer is immutable after init; any number of threads may
 * encode/decode concurrently. A tokenizer_stream belongs to one thread (one
 * decode session) at a time.
 */
#ifndef STRATA_TOKENIZER_H
#define STRATA_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/error.h"

struct gguf_file;
struct tokenizer;
struct tokenizer_stream;

#define TOKENIZER_NULL (-1) /* "no such token" (absent bos/eot/...) */

enum tokenizer_kind {
    TOKENIZER_KIND_SPM = 0, /* tokenizer.ggml.model = "llama" */
    TOKENIZER_KIND_BPE = 1, /* "gpt2" */
    TOKENIZER_KIND_WPM = 2, /* "bert" */
};

/* Token attributes (bit flags, llama.cpp's llama_token_attr values). The
 * GGUF token type array (tokenizer.ggml.token_type: 1 normal, 2 unknown,
 * 3 control, 4 user-defined, 5 unused, 6 byte) sets the first six. */
enum tokenizer_attr {
    TOKENIZER_ATTR_UNDEFINED = 0,
    TOKENIZER_ATTR_UNKNOWN = 1 << 0,
    TOKENIZER_ATTR_UNUSED = 1 << 1,
    TOKENIZER_ATTR_NORMAL = 1 << 2,
    TOKENIZER_ATTR_CONTROL = 1 << 3,
    TOKENIZER_ATTR_USER_DEFINED = 1 << 4,
    TOKENIZER_ATTR_BYTE = 1 << 5,
    TOKENIZER_ATTR_NORMALIZED = 1 << 6,
    TOKENIZER_ATTR_LSTRIP = 1 << 7, /* special match eats whitespace on its left */
    TOKENIZER_ATTR_RSTRIP = 1 << 8, /* ... and on its right */
    TOKENIZER_ATTR_SINGLE_WORD = 1 << 9,
};

/* A byte range of the input text (same layout as template.h's template_range). */
struct tokenizer_range {
    size_t offset; /* bytes from the start of the text */
    size_t length; /* bytes */
};

struct tokenizer_encode_opts {
    /* Add the model's BOS/EOS as its tokenizer.ggml.add_bos_token / add_eos_token
     * flags say; bert always gets CLS ... SEP (llama.cpp's add_special). Default true. */
    bool add_special;
    /* Recognise control-token text ("<|im_end|>") in trusted input. Default false. */
    bool parse_special;
    /* Byte ranges in which control/unknown tokens are never recognised, even with
     * parse_special (user-supplied message contents). Borrowed; may be NULL; any
     * order, may overlap; ranges past the end are clipped. */
    const struct tokenizer_range *untrusted;
    size_t n_untrusted;
};
struct tokenizer_encode_opts tokenizer_encode_opts_default(void);

/* A growable id list; {0} is an empty list. Owned by the caller:
 * tokenizer_ids_free() releases the array (the struct itself is the caller's). */
struct tokenizer_ids {
    int32_t *ids; /* (n) token ids */
    size_t n;
    size_t cap;
};
void tokenizer_ids_free(struct tokenizer_ids *ids); /* zeroes *ids; NULL is a no-op */

/* ---- construction ------------------------------------------------------- */

/* Builds a tokenizer from tokenizer.ggml.* metadata. Returns NULL and fills err
 * (STRATA_E_FORMAT for malformed/missing vocab data, STRATA_E_UNSUPPORTED for an
 * unknown model or pre-tokenizer name) on failure. owned: free with tokenizer_free() */
struct tokenizer *tokenizer_init_gguf(const struct gguf_file *f, struct strata_error *err);
void tokenizer_free(struct tokenizer *tok); /* NULL is a no-op */

/* ---- encoding ----------------------------------------------------------- */

/* Appends the ids of text[0..len) to out (opts NULL = defaults). text need not be
 * NUL-terminated and may contain NUL bytes. 0 ok; STRATA_E_NOMEM; STRATA_E_INVALID
 * for NULL arguments; STRATA_E_LIMIT if len > TOKENIZER_MAX_TEXT. On failure out
 * keeps its previous ids. */
#define TOKENIZER_MAX_TEXT ((size_t)1 << 30)
int tokenizer_encode(const struct tokenizer *tok, const char *text, size_t len,
                     const struct tokenizer_encode_opts *opts, struct tokenizer_ids *out,
                     struct strata_error *err);

/* ---- vocabulary --------------------------------------------------------- */

enum tokenizer_kind tokenizer_get_kind(const struct tokenizer *tok);
const char *tokenizer_pre_name(const struct tokenizer *tok); /* "llama-bpe", "default"... */
int32_t tokenizer_n_vocab(const struct tokenizer *tok);
/* Vocabulary text of a token as stored (U+2581 / byte-level forms); borrowed,
 * NUL-terminated; NULL if id is out of range. */
const char *tokenizer_piece(const struct tokenizer *tok, int32_t id, size_t *len);
uint32_t tokenizer_attr(const struct tokenizer *tok, int32_t id); /* 0 if out of range */
float tokenizer_score(const struct tokenizer *tok, int32_t id);
/* Exact vocabulary lookup of a piece; TOKENIZER_NULL if absent. */
int32_t tokenizer_find(const struct tokenizer *tok, const char *text, size_t len);

int32_t tokenizer_bos(const struct tokenizer *tok); /* TOKENIZER_NULL if none */
int32_t tokenizer_eos(const struct tokenizer *tok);
int32_t tokenizer_eot(const struct tokenizer *tok);
int32_t tokenizer_eom(const struct tokenizer *tok);
int32_t tokenizer_unk(const struct tokenizer *tok);
int32_t tokenizer_sep(const struct tokenizer *tok);
int32_t tokenizer_pad(const struct tokenizer *tok);
int32_t tokenizer_nl(const struct tokenizer *tok); /* the "\n" token */
bool tokenizer_add_bos(const struct tokenizer *tok);
bool tokenizer_add_eos(const struct tokenizer *tok);
bool tokenizer_add_space_prefix(const struct tokenizer *tok);
/* End of generation: eos, eot, eom and the tokens llama.cpp adds by text
 * (<|im_end|>, <|eot_id|>, <end_of_turn>, <|endoftext|>, ...). */
bool tokenizer_is_eog(const struct tokenizer *tok, int32_t id);
bool tokenizer_is_control(const struct tokenizer *tok, int32_t id);
/* Control or unknown: the tokens skip_special drops (llama.cpp's attr_special). */
bool tokenizer_is_special(const struct tokenizer *tok, int32_t id);

/* ---- decoding ----------------------------------------------------------- */

struct tokenizer_decode_opts {
    /* Control/unknown tokens produce no text (llama.cpp: !unparse_special), and
     * decode drops a leading BOS / trailing EOS the model adds. Default true. */
    bool skip_special;
    /* Models with add_space_prefix (SentencePiece): drop one leading ' ' of the
     * first token's text, as llama.cpp's detokenize does (not after a skipped
     * BOS, as there). Default true. A stream that continues a prompt (generated
     * text) keeps the space with false, as llama-server's per-token pieces do. */
    bool strip_leading_space;
    /* tokenizer_decode only: llama.cpp's clean_up_tokenization_spaces passes
     * (" ." -> ".", " 's" -> "'s", " ' " -> "'") on models that set them (gpt2-style
     * pre-tokenizers, bert). Lossy; not applied by streams. Default false. */
    bool clean_spaces;
};
struct tokenizer_decode_opts tokenizer_decode_opts_default(void);

/* Text of one token, as llama.cpp's token_to_piece: U+2581 -> ' ' and <0xXX> ->
 * the byte (SPM), byte-level -> bytes (BPE); control tokens give their text
 * only if special. Writes up to cap bytes (no NUL) and returns the full
 * length (so a return > cap means truncated); negative on a bad id. */
int tokenizer_token_to_piece(const struct tokenizer *tok, int32_t id, bool special, char *buf,
                             size_t cap);

/* Decodes ids[0..n) into a NUL-terminated string (owned: free()), *len_out its
 * length. The bytes are exactly what the tokens spell (may be invalid UTF-8 if
 * the ids end mid-character); use a stream for display text. NULL + err on
 * NOMEM or an id out of range (STRATA_E_RANGE). */
char *tokenizer_decode(const struct tokenizer *tok, const int32_t *ids, size_t n,
                       const struct tokenizer_decode_opts *opts, size_t *len_out,
                       struct strata_error *err);

/* Streaming detokenizer: feed ids one at a time, get back complete UTF-8 only.
 * Bytes of an incomplete sequence (byte tokens <0xE2><0x96>..., or byte-level
 * BPE pieces ending mid-character) are held until the sequence completes;
 * invalid sequences become U+FFFD; never half a code point. The tokenizer is
 * borrowed and must outlive the stream. owned: free with tokenizer_stream_free() */
struct tokenizer_stream *tokenizer_stream_init(const struct tokenizer *tok,
                                               const struct tokenizer_decode_opts *opts,
                                               struct strata_error *err);
void tokenizer_stream_free(struct tokenizer_stream *st); /* NULL is a no-op */
/* Returns the new complete text (borrowed: valid until the next call on st) and
 * its length in *len (may be 0). An id out of range (or out of memory) gives
 * NULL with *len = 0 and leaves the stream as it was. */
const char *tokenizer_stream_feed(struct tokenizer_stream *st, int32_t id, size_t *len);
/* End of stream: pending incomplete bytes become U+FFFD. */
const char *tokenizer_stream_flush(struct tokenizer_stream *st, size_t *len);
void tokenizer_stream_reset(struct tokenizer_stream *st); /* back to the first token */

#endif
