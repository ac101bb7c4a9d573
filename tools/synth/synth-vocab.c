/* tools/synth/synth-vocab.c: tokenizer metadata for synthesized models.
 *
 * Built-in vocabulary: a GPT-2 style byte-level BPE that llama.cpp loads as
 * tokenizer.ggml.model "gpt2" (pre "default"):
 *   ids 0..255   the 256 bytes in GPT-2's printable byte->unicode mapping
 *                (bytes 33-126, 161-172, 174-255 map to themselves, the
 *                other 68 to U+0100.. in order; space is "Ġ" U+0120)
 *   id 256       "<|endoftext|>" (control; BOS and EOS)
 *   257..        tokens built by merging the letters of common TinyStories
 *                words left to right, with and without a leading "Ġ"; each
 *                new token adds one merge, ranked in creation order
 *   then         "<|filler_N|>" normal tokens (unreachable by merges) up to
 *                n_vocab, so the embedding matches the preset's vocab size.
 */
#include "tools/synth/synth-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VOCAB_TOKEN_NORMAL 1
#define VOCAB_TOKEN_CONTROL 3

static const char *const words[] = {
    "the",  "and",   "was",    "to",     "a",     "he",    "she",   "they",   "it",   "Once",
    "upon", "time",  "there",  "little", "girl",  "boy",   "named", "Lily",   "Tim",  "day",
    "big",  "happy", "said",   "play",   "with",  "her",   "his",   "friend", "mom",  "saw",
    "very", "in",    "of",     "on",     "you",   "I",     "is",    "that",   "had",  "not",
    "but",  "for",   "go",     "wanted", "went",  "so",    "ball",  "tree",   "dog",  "cat",
    "sun",  "fun",   "help",   "loved",  "asked", "could", "were",  "be",     "what", "have",
    "one",  "all",   "will",   "can",    "out",   "up",    "do",    "like",   "park", "toy",
    "home", "sad",   "smiled", "found",  "look",  "made",  "new",   "red",    "bird", "car",
    "box",  "mommy", "daddy",  "them",   "their", "when",  "then",  "saw",    "good", "nice",
    "The",  "He",    "She",    "They",   "It",    "One",   "Tom",   "Sue",    "Ben",  "Max",
};
#define N_WORDS (sizeof(words) / sizeof(words[0]))

/* UTF-8 of GPT-2's unicode stand-in for byte b; returns its length. */
static int byte_char(int b, char out[4]) {
    int cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
        cp = b;
    } else {
        /* the 68 unprintable bytes, in byte order, become U+0100.. */
        int k = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255)))
                k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

struct vocab_build {
    char **tokens;
    int32_t *types;
    int64_t n, cap;
    char **merges;
    int64_t n_merges;
};

static int64_t find_token(const struct vocab_build *v, const char *s) {
    for (int64_t i = 0; i < v->n; i++)
        if (!strcmp(v->tokens[i], s))
            return i;
    return -1;
}

static int add_token(struct vocab_build *v, const char *s, int32_t type) {
    if (v->n >= v->cap)
        return 1;
    v->tokens[v->n] = strdup(s);
    if (!v->tokens[v->n])
        return -1;
    v->types[v->n++] = type;
    return 0;
}

/* Adds the merges spelling one word (prefix "Ġ" when spaced). Returns -1 on
 * OOM, 1 when the vocabulary is full. */
static int add_word(struct vocab_build *v, const char *word, int spaced) {
    char cur[64];
    size_t len = 0;
    if (spaced) {
        memcpy(cur, "\xC4\xA0", 2); /* Ġ */
        len = 2;
    } else {
        cur[len++] = word[0];
        word++;
    }
    cur[len] = '\0';
    for (; *word; word++) {
        char next[64];
        if (len + 2 >= sizeof(next))
            return 0;
        memcpy(next, cur, len);
        next[len] = *word;
        next[len + 1] = '\0';
        if (find_token(v, next) < 0) {
            if (v->n >= v->cap)
                return 1;
            char merge[140];
            snprintf(merge, sizeof(merge), "%s %c", cur, *word);
            char *m = strdup(merge);
            if (!m)
                return -1;
            v->merges[v->n_merges++] = m;
            int rc = add_token(v, next, VOCAB_TOKEN_NORMAL);
            if (rc)
                return rc;
        }
        memcpy(cur, next, len + 2);
        len++;
    }
    return 0;
}

static void vocab_free(struct vocab_build *v) {
    for (int64_t i = 0; i < v->n; i++)
        free(v->tokens[i]);
    for (int64_t i = 0; i < v->n_merges; i++)
        free(v->merges[i]);
    free(v->tokens);
    free(v->types);
    free(v->merges);
}

static int write_builtin(struct gguf_writer *w, int64_t n_vocab, struct strata_error *err) {
    if (n_vocab < 257 || n_vocab > (INT64_C(1) << 22))
        return strata_error_set(err, STRATA_E_RANGE,
                                "synth: n_vocab %lld out of range (257..4194304 for the built-in "
                                "vocabulary)",
                                (long long)n_vocab);
    struct vocab_build v = {0};
    int rc = STRATA_E_NOMEM;
    v.cap = n_vocab;
    v.tokens = calloc((size_t)n_vocab, sizeof(char *));
    v.types = calloc((size_t)n_vocab, sizeof(int32_t));
    v.merges = calloc((size_t)n_vocab, sizeof(char *));
    if (!v.tokens || !v.types || !v.merges)
        goto fail;
    for (int b = 0; b < 256; b++) {
        char s[4] = {0};
        byte_char(b, s);
        if (add_token(&v, s, VOCAB_TOKEN_NORMAL))
            goto fail;
    }
    if (add_token(&v, "<|endoftext|>", VOCAB_TOKEN_CONTROL))
        goto fail;
    int full = 0;
    for (size_t i = 0; i < N_WORDS && !full; i++) {
        for (int spaced = 1; spaced >= 0 && !full; spaced--) {
            int r = add_word(&v, words[i], spaced);
            if (r < 0)
                goto fail;
            full = r;
        }
    }
    for (int64_t k = 0; v.n < n_vocab; k++) {
        char s[32];
        snprintf(s, sizeof(s), "<|filler_%lld|>", (long long)k);
        if (add_token(&v, s, VOCAB_TOKEN_NORMAL) < 0)
            goto fail;
    }
    const uint32_t eot = 256;
    if ((rc = gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2", err)) ||
        (rc = gguf_writer_set_str(w, "tokenizer.ggml.pre", "default", err)) ||
        (rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tokens,
                                      NULL, (uint64_t)v.n, err)) ||
        (rc = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v.types,
                                  (uint64_t)v.n, err)) ||
        (rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v.merges,
                                      NULL, (uint64_t)v.n_merges, err)) ||
        (rc = gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", eot, err)) ||
        (rc = gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", eot, err)) ||
        (rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false, err)))
        goto out;
    vocab_free(&v);
    return 0;
fail:
    rc = strata_error_set(err, STRATA_E_NOMEM, "synth: out of memory building the vocabulary");
out:
    vocab_free(&v);
    return rc;
}

int64_t synth_vocab_size(const struct gguf_file *f, struct strata_error *err) {
    struct gguf_value arr;
    int rc = gguf_get_arr(f, "tokenizer.ggml.tokens", &arr, err);
    if (rc)
        return rc;
    if (arr.arr.elem_type != GGUF_TYPE_STRING || arr.arr.n == 0 || arr.arr.n > (1u << 24))
        return strata_error_set(err, STRATA_E_FORMAT,
                                "vocab file: tokenizer.ggml.tokens is not a string array of "
                                "1..16777216 tokens");
    return (int64_t)arr.arr.n;
}

int synth_vocab_write(struct gguf_writer *w, const struct synth_params *p, int64_t *n_vocab_out,
                      struct strata_error *err) {
    if (!p->vocab_from) {
        int rc = write_builtin(w, p->n_vocab, err);
        if (rc == 0)
            *n_vocab_out = p->n_vocab;
        return rc;
    }
    int64_t n = synth_vocab_size(p->vocab_from, err);
    if (n < 0)
        return (int)n;
    for (int64_t i = 0; i < gguf_n_kv(p->vocab_from); i++) {
        const struct gguf_kv *kv = gguf_kv_at(p->vocab_from, i);
        if (kv->key.len >= 10 && !memcmp(kv->key.ptr, "tokenizer.", 10)) {
            int rc = gguf_writer_copy_kv(w, p->vocab_from, i, err);
            if (rc)
                return rc;
        }
    }
    *n_vocab_out = n;
    return 0;
}
