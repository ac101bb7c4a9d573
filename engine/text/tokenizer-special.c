/* engine/text/tokenizer-special.c: special tokens found by text, end-of-generation
 * ids and the special-token cache, as llama.cpp's llama_vocab::impl::load does
 * them (the text lists are llama.cpp's, checked against the llama.cpp that
 * node-llama-cpp 3.21.1 bundles).
 *
 * GGUF files do not mark every chat/FIM token as control, so llama.cpp ORs
 * the control bit into tokens whose text looks like one (<|im_end|>, <EOT>,
 * <|fim_prefix|>, ...), marks control tokens named "*unused*" unused, and
 * builds the end-of-generation set from a text list plus eos/eot/eom and the
 * FIM pad/repo/sep tokens. Where several candidates for eot exist, llama.cpp
 * takes whichever its hash map yields first; here the first in list order.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf/gguf.h"
#include "engine/text/tokenizer-impl.h"

#define FW "\xef\xbd\x9c" /* U+FF5C fullwidth vertical line, DeepSeek's <｜...｜> */
#define SP "\xe2\x96\x81" /* U+2581 */

static const char *const k_eot[] = {"<|eot_id|>",
                                    "<|im_end|>",
                                    "<|end|>",
                                    "<end_of_turn>",
                                    "<|endoftext|>",
                                    "<|end_of_text|>",
                                    "<EOT>",
                                    "_<EOT>",
                                    "[EOT]",
                                    "<" FW "end" SP "of" SP "sentence" FW ">",
                                    "<end_of_utterance>",
                                    NULL};
static const char *const k_eom[] = {"<|eom_id|>", NULL};
static const char *const k_fim_pre[] = {"<|fim_prefix|>",
                                        "<fim-prefix>",
                                        "<fim_prefix>",
                                        "<" FW "fim" SP "begin" FW ">",
                                        "<PRE>",
                                        SP "<PRE>",
                                        "<|code_prefix|>",
                                        "<|prefix|>",
                                        NULL};
static const char *const k_fim_suf[] = {"<|fim_suffix|>",
                                        "<fim-suffix>",
                                        "<fim_suffix>",
                                        "<" FW "fim" SP "hole" FW ">",
                                        "<SUF>",
                                        SP "<SUF>",
                                        "<|code_suffix|>",
                                        "<|suffix|>",
                                        NULL};
static const char *const k_fim_mid[] = {"<|fim_middle|>",
                                        "<fim-middle>",
                                        "<fim_middle>",
                                        "<" FW "fim" SP "end" FW ">",
                                        "<MID>",
                                        SP "<MID>",
                                        "<|code_middle|>",
                                        "<|middle|>",
                                        NULL};
static const char *const k_fim_pad[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>",
                                        "<PAD>",       "[PAD]",     NULL};
static const char *const k_fim_rep[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                        "<REPO>",       "<reponame>",    NULL};
static const char *const k_fim_sep[] = {"<|file_sep|>", NULL};
static const char *const k_eog[] = {"<|eot_id|>",
                                    "<|im_end|>",
                                    "<|end|>",
                                    "<|return|>",
                                    "<|call|>",
                                    "<|flush|>",
                                    "<|calls|>",
                                    "<end_of_turn>",
                                    "<|endoftext|>",
                                    "</s>",
                                    "<|eom_id|>",
                                    "<EOT>",
                                    "_<EOT>",
                                    "[EOT]",
                                    "[EOS]",
                                    "<|end_of_text|>",
                                    "<end_of_utterance>",
                                    "<eos>",
                                    "<turn|>",
                                    "<|tool_response>",
                                    "<" FW "end" SP "of" SP "sentence" FW ">",
                                    "[e~[",
                                    NULL};

static int32_t find(const struct tokenizer *tok, const char *s) {
    return s ? tok_lookup(tok, s, strlen(s)) : -1;
}

static void make_control(struct tokenizer *tok, int32_t id) {
    if (id >= 0)
        tok->tokens[id].attr |= TOKENIZER_ATTR_CONTROL;
}

/* First token of the list present in the vocab, made control; only if *id is
 * unset (an id from the file is left as it is). */
static void detect(struct tokenizer *tok, const char *const *list, int32_t *id) {
    if (*id >= 0)
        return;
    for (size_t i = 0; *id < 0 && list[i]; i++)
        *id = find(tok, list[i]);
    make_control(tok, *id);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void eog_add(struct tokenizer *tok, int32_t id) {
    if (id < 0)
        return;
    for (size_t i = 0; i < tok->n_eog; i++)
        if (tok->eog[i] == id)
            return;
    tok->eog[tok->n_eog++] = id;
}

static void eog_remove(struct tokenizer *tok, int32_t id) {
    for (size_t i = 0; i < tok->n_eog; i++)
        if (tok->eog[i] == id) {
            tok->eog[i] = tok->eog[--tok->n_eog];
            return;
        }
}

static bool eog_has(const struct tokenizer *tok, const char *text) {
    int32_t id = find(tok, text);
    for (size_t i = 0; id >= 0 && i < tok->n_eog; i++)
        if (tok->eog[i] == id)
            return true;
    return false;
}

static int cmp_special(const void *a, const void *b, void *ctx) {
    const struct tokenizer *tok = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = tok->tokens[x].len, ly = tok->tokens[y].len;
    if (lx != ly)
        return lx > ly ? -1 : 1;
    return (x > y) - (x < y);
}

static void get_id(const struct gguf_file *f, const char *key, int32_t n_vocab, int32_t *id) {
    uint64_t v;
    if (gguf_get_uint(f, key, &v, NULL) == 0 && v < (uint64_t)n_vocab)
        *id = (int32_t)v;
}

int tok_setup_special(struct tokenizer *tok, const struct gguf_file *f) {
    int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
    get_id(f, "tokenizer.ggml.fim_pre_token_id", tok->n_vocab, &fim_pre);
    get_id(f, "tokenizer.ggml.fim_suf_token_id", tok->n_vocab, &fim_suf);
    get_id(f, "tokenizer.ggml.fim_mid_token_id", tok->n_vocab, &fim_mid);
    get_id(f, "tokenizer.ggml.fim_pad_token_id", tok->n_vocab, &fim_pad);
    get_id(f, "tokenizer.ggml.fim_rep_token_id", tok->n_vocab, &fim_rep);
    get_id(f, "tokenizer.ggml.fim_sep_token_id", tok->n_vocab, &fim_sep);
    detect(tok, k_eot, &tok->eot);
    detect(tok, k_eom, &tok->eom);
    detect(tok, k_fim_pre, &fim_pre);
    detect(tok, k_fim_suf, &fim_suf);
    detect(tok, k_fim_mid, &fim_mid);
    detect(tok, k_fim_pad, &fim_pad);
    detect(tok, k_fim_rep, &fim_rep);
    detect(tok, k_fim_sep, &fim_sep);

    /* control tokens named "unused" are unused */
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        struct tok_token *t = &tok->tokens[id];
        if ((t->attr & TOKENIZER_ATTR_CONTROL) && strstr(tok_text(tok, id), "unused"))
            t->attr |= TOKENIZER_ATTR_UNUSED;
    }

    size_t n_list = sizeof(k_eog) / sizeof(*k_eog);
    tok->eog = malloc((n_list + 6) * sizeof(int32_t));
    if (!tok->eog)
        return STRATA_E_NOMEM;
    eog_add(tok, fim_pad);
    eog_add(tok, fim_rep);
    eog_add(tok, fim_sep);
    for (size_t i = 0; k_eog[i]; i++) {
        int32_t id = find(tok, k_eog[i]);
        eog_add(tok, id);
        make_control(tok, id);
    }
    /* gpt-oss: these are always rendered */
    const char *gptoss[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    for (int i = 0; i < 4; i++) {
        int32_t id = find(tok, gptoss[i]);
        if (id >= 0)
            tok->tokens[id].attr = TOKENIZER_ATTR_USER_DEFINED;
    }
    eog_add(tok, tok->eos);
    eog_add(tok, tok->eot);
    eog_add(tok, tok->eom);
    /* o200k_harmony / solar-open: <|end|> is not end of generation there */
    if (eog_has(tok, "<|end|>") && ((eog_has(tok, "<|return|>") && eog_has(tok, "<|call|>")) ||
                                    (eog_has(tok, "<|calls|>") && eog_has(tok, "<|flush|>")))) {
        int32_t id = find(tok, "<|end|>");
        eog_remove(tok, id);
        tok->tokens[id].attr = TOKENIZER_ATTR_USER_DEFINED;
    }
    /* gemma4 / paddleocr: </s> is not end of generation when <|tool_response> is */
    if (eog_has(tok, "<|tool_response>") && eog_has(tok, "</s>")) {
        int32_t id = find(tok, "</s>");
        eog_remove(tok, id);
        tok->tokens[id].attr = TOKENIZER_ATTR_NORMAL;
    }
    qsort(tok->eog, tok->n_eog, sizeof(int32_t), cmp_i32);

    /* special-token cache: control, user-defined and unknown tokens, longest first */
    const uint32_t want =
        TOKENIZER_ATTR_CONTROL | TOKENIZER_ATTR_USER_DEFINED | TOKENIZER_ATTR_UNKNOWN;
    size_t n = 0;
    for (int32_t id = 0; id < tok->n_vocab; id++)
        n += (tok->tokens[id].attr & want) != 0;
    tok->special = malloc((n ? n : 1) * sizeof(int32_t));
    if (!tok->special)
        return STRATA_E_NOMEM;
    for (int32_t id = 0; id < tok->n_vocab; id++)
        if (tok->tokens[id].attr & want)
            tok->special[tok->n_special++] = id;
    qsort_r(tok->special, tok->n_special, sizeof(int32_t), cmp_special, tok);

    /* attributes llama.cpp sets by model name: Phi-3 special tokens eat the
     * whitespace on their right, except <unk>, <s>, <|endoftext|> */
    char name[256] = "";
    gguf_get_str_buf(f, "general.name", name, sizeof(name), NULL);
    for (char *p = name; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    char arch[64] = "";
    gguf_get_str_buf(f, "general.architecture", arch, sizeof(arch), NULL);
    if (strstr(tok->pre_name, "jina-v2-de") || strstr(tok->pre_name, "jina-v2-es") ||
        strstr(tok->pre_name, "jina-v2-code") || strstr(arch, "nomic-bert-moe") ||
        strstr(arch, "jina-bert-v3")) {
        int32_t id = find(tok, "<mask>");
        if (id >= 0)
            tok->tokens[id].attr |= TOKENIZER_ATTR_LSTRIP;
    } else if (strstr(name, "phi-3") || strstr(name, "phi3")) {
        for (size_t i = 0; i < tok->n_special; i++)
            tok->tokens[tok->special[i]].attr |= TOKENIZER_ATTR_RSTRIP;
        int32_t id = find(tok, "</s>");
        if (id >= 0)
            tok->tokens[id].attr |= TOKENIZER_ATTR_RSTRIP;
        const char *keep[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (int i = 0; i < 3; i++)
            if ((id = find(tok, keep[i])) >= 0)
                tok->tokens[id].attr &= ~(uint32_t)TOKENIZER_ATTR_RSTRIP;
    } else if (strstr(name, "modern-bert")) {
        int32_t id = find(tok, "[MASK]");
        if (id >= 0)
            tok->tokens[id].attr |= TOKENIZER_ATTR_LSTRIP;
    }
    return 0;
}
