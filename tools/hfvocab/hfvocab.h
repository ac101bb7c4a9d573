/* tools/hfvocab/hfvocab.h: a vocabulary-only GGUF from a Hugging Face tokenizer.json,
 * as llama.cpp's convert_hf_to_gguf.py builds the tokenizer.ggml.* keys.
 *
 *   struct hfvocab_params p = hfvocab_params_default();
 *   p.config_path = "tokenizer_config.json";   // optional
 *   struct hfvocab_summary sum;
 *   struct strata_error err = {0};
 *   if (hfvocab_convert("tokenizer.json", &p, "vocab.gguf", &sum, &err) < 0)
 *       fprintf(stderr, "%s\n", err.message);
 *
 * What is written (the converter's decisions, reproduced from tokenizer.json):
 *   - tokenizer.ggml.model: "gpt2" for byte-level BPE (a ByteLevel
 *     pre-tokenizer, no byte_fallback: Qwen, Llama 3, DeepSeek-V3); "llama"
 *     for SentencePiece-style BPE (byte_fallback, e.g. Gemma 3), which the
 *     converter reads from tokenizer.model; here its scores are rebuilt from
 *     the merge list (see hfvocab.c). Unigram / WordPiece: STRATA_E_UNSUPPORTED.
 *   - tokens: id order, holes (and ids up to params.vocab_size) as "[PAD<i>]".
 *   - token_type: NORMAL; added tokens CONTROL when "special" or when their
 *     text looks special (<|..|>, <｜..｜>, <unused..>, <pad>, <mask>...),
 *     else USER_DEFINED with U+2581 turned into ' ' (get_vocab_base /
 *     does_token_look_special); SPM: <0xXX> BYTE, the unk token UNKNOWN,
 *     padding UNUSED.
 *   - merges (gpt2 only), scores (llama only).
 *   - bos/eos/unk/sep/pad/cls/mask ids from tokenizer_config.json's *_token
 *     entries, found among the added tokens (gguf-py's SpecialVocab);
 *     add_bos/add_eos from a TemplateProcessing post_processor, overridden by
 *     tokenizer_config.json's add_bos_token / add_eos_token.
 *   - tokenizer.ggml.pre: params.pre, else for gpt2 the family recognised
 *     from the exact pre_tokenizer regexes (qwen2, llama-bpe, deepseek-v3,
 *     gpt-2; llama.cpp's converter hashes the tokens of a test string
 *     instead); an unknown regex is STRATA_E_UNSUPPORTED naming the regex,
 *     so a caller passes --pre.
 *     SPM files get "default", as the converter writes (llama.cpp ignores
 *     it for "llama" models; Gemma 3 has no pre-tokenizer of its own).
 *   - tokenizer.ggml.add_space_prefix (llama only): true iff the normalizer
 *     prepends U+2581.
 *   - tokenizer.chat_template (and .NAME for named templates).
 *   - general.architecture (params.arch, default "llama") with placeholder
 *     hyper-parameters (context 4096, 1 layer, embedding 64), because
 *     llama.cpp reads them even with vocab_only; without config.json the
 *     real ones are unknown.
 *
 * Bad input (malformed JSON, ids out of range or duplicated, more than
 * HFVOCAB_MAX_TOKENS tokens) gives STRATA_E_FORMAT / STRATA_E_LIMIT and a
 * message; nothing is written unless the whole vocabulary was accepted.
 *
 * Ownership: all inputs are borrowed for the call. Threading: no shared
 * state; concurrent calls on different outputs are safe.
 */
#ifndef STRATA_HFVOCAB_H
#define STRATA_HFVOCAB_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/error.h"

#define HFVOCAB_MAX_TOKENS (1u << 22) /* 4M: 16x the largest vocab known (Gemma 3, 262k) */

struct hfvocab_params {
    const char *config_path; /* tokenizer_config.json; NULL = none. Borrowed. */
    /* config.json of the model; NULL = none. Borrowed. Gives vocab_size (the
     * padded size; params.vocab_size wins) and <typ>_token_id for special ids
     * the tokenizer files leave unset, as gguf-py's SpecialVocab. */
    const char *model_config_path;
    const char *pre;     /* tokenizer.ggml.pre override; NULL = detect. Borrowed. */
    const char *arch;    /* general.architecture; NULL = "llama". Borrowed. */
    const char *name;    /* general.name; NULL = none. Borrowed. */
    uint32_t vocab_size; /* pad with [PAD<i>] up to this; 0 = max id + 1 */
};
struct hfvocab_params hfvocab_params_default(void);

/* What was written, for the CLI to print. */
struct hfvocab_summary {
    char model[16]; /* "gpt2" | "llama" */
    char pre[48];   /* "" when not written */
    uint32_t n_tokens;
    uint32_t n_merges;
    uint32_t n_control;
    uint32_t n_user_defined;
    uint32_t n_byte;
    uint32_t n_unused;
    int32_t bos, eos, pad, unk; /* -1 when absent */
    int add_bos, add_eos;       /* -1 not written, 0 false, 1 true */
    bool chat_template;
};

/* Converts tokenizer_json (path) into a vocab-only GGUF at out_path. sum may
 * be NULL. 0 ok; STRATA_E_IO (unreadable files), STRATA_E_FORMAT (bad JSON or
 * vocabulary), STRATA_E_UNSUPPORTED (model type, unknown pre-tokenizer),
 * STRATA_E_LIMIT, STRATA_E_NOMEM. */
int hfvocab_convert(const char *tokenizer_json, const struct hfvocab_params *params,
                    const char *out_path, struct hfvocab_summary *sum, struct strata_error *err);

/* The tokenizer.ggml.pre name for a pre_tokenizer object of tokenizer.json
 * (a json_t *, borrowed), or NULL if not recognised. For tests. */
const char *hfvocab_detect_pre(const void *pre_tokenizer_json);

#endif
