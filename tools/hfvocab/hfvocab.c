/* tools/hfvocab/hfvocab.c: tokenizer.json -> vocab-only GGUF (contract in hfvocab.h).
 *
 * Order of work: parse both JSON files (jansson), fill the token table from
 * model.vocab, overlay the added tokens, decide types and scores, find the
 * special ids and add_* flags, then hand everything to the GGUF writer. The
 * decisions mirror convert_hf_to_gguf.py (get_vocab_base,
 * _set_vocab_sentencepiece, does_token_look_special) and gguf-py's
 * SpecialVocab; where this file decides differently it says why.
 *
 * SPM scores. The converter reads SentencePiece scores from tokenizer.model,
 * which a tokenizer.json-only checkout lacks. llama.cpp's SPM encoder merges
 * the adjacent pair whose concatenation is the vocabulary piece of highest
 * score (leftmost on ties). Hugging Face's BPE applies the merge of lowest
 * rank, and its SentencePiece extractor ranks merges by the score of the
 * merged piece. So a piece's score here is -(rank of the first merge that
 * produces it): llama.cpp then picks the same piece HF picks. Pieces that no
 * merge produces (single characters, bytes) get -(n_merges + id): below
 * every merge result, as they are never the product of a merge in HF.
 */
#include "tools/hfvocab/hfvocab.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf/gguf.h"

enum {
    TT_NORMAL = 1,
    TT_UNKNOWN = 2,
    TT_CONTROL = 3,
    TT_USER_DEFINED = 4,
    TT_UNUSED = 5,
    TT_BYTE = 6,
};

#define ADDED_SCORE (-1000.0f) /* _set_vocab_sentencepiece: added and padding tokens */

struct hv {
    uint32_t n;    /* tokens */
    char **text;   /* (n) owned UTF-8, NUL-terminated */
    uint64_t *len; /* (n) bytes */
    int32_t *type; /* (n) TT_* */
    float *score;  /* (n) SPM only */
    bool spm;      /* "llama" rather than "gpt2" */
    char **merges; /* (n_merges) owned "left right" */
    uint32_t n_merges;
};

static void hv_free(struct hv *v) {
    if (v->merges)
        for (uint32_t i = 0; i < v->n_merges; i++)
            free(v->merges[i]);
    free(v->merges);
    if (v->text)
        for (uint32_t i = 0; i < v->n; i++)
            free(v->text[i]);
    free(v->score);
    free(v->type);
    free(v->len);
    free(v->text);
}

struct hfvocab_params hfvocab_params_default(void) {
    return (struct hfvocab_params){.arch = "llama"};
}

static bool starts(const char *s, const char *p) {
    return !strncmp(s, p, strlen(p));
}
static bool ends(const char *s, const char *p) {
    size_t n = strlen(s), m = strlen(p);
    return n >= m && !memcmp(s + n - m, p, m);
}

/* convert_hf_to_gguf.py's does_token_look_special (Python startswith/endswith
 * semantics: "<|>" counts). */
static bool looks_special(const char *s) {
    static const char *const exact[] = {"<pad>", "<mask>", "<2mass>", "[@BOS@]"};
    for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++)
        if (!strcmp(s, exact[i]))
            return true;
    if (starts(s, "<|") && ends(s, "|>"))
        return true;
    if (starts(s, "<\xef\xbd\x9c") && ends(s, "\xef\xbd\x9c>")) /* <｜ ... ｜> */
        return true;
    return starts(s, "<unused") && ends(s, ">");
}

/* In place: every U+2581 in s[0..len) becomes ' ' (user-defined tokens are
 * pre-normalized); returns the new length. */
static uint64_t unspace(char *s, uint64_t len) {
    uint64_t w = 0;
    for (uint64_t r = 0; r < len;) {
        if (r + 3 <= len && !memcmp(s + r, "\xe2\x96\x81", 3)) {
            s[w++] = ' ';
            r += 3;
        } else {
            s[w++] = s[r++];
        }
    }
    s[w] = '\0';
    return w;
}

static bool is_byte_piece(const char *s) {
    static const char hex[] = "0123456789ABCDEF";
    return strlen(s) == 6 && starts(s, "<0x") && strchr(hex, s[3]) && strchr(hex, s[4]) &&
           s[5] == '>';
}

static int set_text(struct hv *v, uint32_t id, const char *s, size_t len,
                    struct strata_error *err) {
    char *c = malloc(len + 1);
    if (!c)
        return strata_error_set(err, STRATA_E_NOMEM, "token %u: out of memory", id);
    memcpy(c, s, len);
    c[len] = '\0';
    free(v->text[id]);
    v->text[id] = c;
    v->len[id] = len;
    return 0;
}

/* ---- pre-tokenizer detection ------------------------------------------- */

/* Split regexes of the Hugging Face tokenizer.json files, in order, joined by
 * '\x1f'. llama.cpp's names; its pre-tokenizer regexes are the same texts. */
#define RX_QWEN_HEAD "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
#define RX_TAIL " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
static const struct {
    const char *signature;
    const char *name;
} k_pre_table[] = {
    {RX_QWEN_HEAD "\\p{N}|" RX_TAIL, "qwen2"},
    {RX_QWEN_HEAD "\\p{N}{1,3}|" RX_TAIL, "llama-bpe"},
    {"\\p{N}{1,3}\x1f"
     "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+\x1f"
     "[!\"#$%&'()*+,\\-./"
     ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
     " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
     "deepseek-v3"},
    {"", "gpt-2"}, /* ByteLevel(use_regex=true) alone: the GPT-2 regex */
};

/* Appends the Split regexes of one pre-tokenizer (recursing into Sequence) to
 * sig; notes a ByteLevel that applies its own regex. false on anything else
 * that splits text (Whitespace, Digits...), which no table entry describes. */
static bool collect_pre(const json_t *p, char *sig, size_t cap, bool *byte_regex) {
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!type)
        return false;
    if (!strcmp(type, "Sequence")) {
        const json_t *arr = json_object_get(p, "pretokenizers");
        size_t i;
        const json_t *e;
        json_array_foreach(arr, i, e) if (!collect_pre(e, sig, cap, byte_regex)) return false;
        return true;
    }
    if (!strcmp(type, "ByteLevel")) {
        *byte_regex |= json_is_true(json_object_get(p, "use_regex"));
        return true;
    }
    if (!strcmp(type, "Split")) {
        const char *rx = json_string_value(json_object_get(json_object_get(p, "pattern"), "Regex"));
        if (!rx)
            return false;
        size_t n = strlen(sig);
        int w = snprintf(sig + n, cap - n, "%s%s", n ? "\x1f" : "", rx);
        return w >= 0 && (size_t)w < cap - n;
    }
    return false;
}

const char *hfvocab_detect_pre(const void *pre_tokenizer_json) {
    const json_t *p = pre_tokenizer_json;
    if (!p)
        return NULL;
    char sig[4096] = "";
    bool byte_regex = false;
    if (!collect_pre(p, sig, sizeof(sig), &byte_regex))
        return NULL;
    if (byte_regex && sig[0])
        return NULL; /* regex splits followed by GPT-2's: no llama.cpp type does this */
    if (!byte_regex && !sig[0])
        return NULL;
    for (size_t i = 0; i < sizeof(k_pre_table) / sizeof(k_pre_table[0]); i++)
        if (!strcmp(sig, k_pre_table[i].signature))
            return k_pre_table[i].name;
    return NULL;
}

/* ---- tokens, types, scores ----------------------------------------------- */

static int id_of(const json_t *j, uint32_t limit, uint32_t *out) {
    if (!json_is_integer(j))
        return -1;
    json_int_t id = json_integer_value(j);
    if (id < 0 || (uint64_t)id >= limit)
        return -1;
    *out = (uint32_t)id;
    return 0;
}

static int fill_tokens(struct hv *v, const json_t *vocab, const json_t *added, uint32_t vocab_size,
                       struct strata_error *err) {
    uint32_t max_id = 0;
    const char *key;
    const json_t *val;
    size_t i;
    if (json_object_size(vocab) == 0)
        return strata_error_set(err, STRATA_E_FORMAT, "model.vocab: missing or empty");
    json_object_foreach((json_t *)vocab, key, val) {
        uint32_t id;
        if (id_of(val, HFVOCAB_MAX_TOKENS, &id))
            return strata_error_set(err, STRATA_E_FORMAT,
                                    "model.vocab: id of \"%.40s\" is not an integer in 0..%u", key,
                                    HFVOCAB_MAX_TOKENS - 1);
        max_id = id > max_id ? id : max_id;
    }
    json_array_foreach(added, i, val) {
        uint32_t id;
        if (id_of(json_object_get(val, "id"), HFVOCAB_MAX_TOKENS, &id) ||
            !json_is_string(json_object_get(val, "content")))
            return strata_error_set(err, STRATA_E_FORMAT,
                                    "added_tokens[%zu]: needs an id in 0..%u and a content string",
                                    i, HFVOCAB_MAX_TOKENS - 1);
        max_id = id > max_id ? id : max_id;
    }
    /* holes become [PAD<i>] tokens: refuse a file whose ids are mostly holes
     * ({"a": 4000000} would otherwise cost 4M strings); real files pad a few
     * hundred ids at most (Qwen3: 267 of 151,936) */
    size_t n_defined = json_object_size(vocab) + json_array_size(added);
    if (!vocab_size && (size_t)max_id + 1 > 2 * n_defined + 1024)
        return strata_error_set(err, STRATA_E_FORMAT,
                                "ids are sparse: largest id %u for %zu tokens", max_id, n_defined);
    if (vocab_size && vocab_size <= max_id)
        return strata_error_set(err, STRATA_E_RANGE, "vocab size %u is not above the largest id %u",
                                vocab_size, max_id);
    v->n = vocab_size ? vocab_size : max_id + 1;
    v->text = calloc(v->n, sizeof(*v->text));
    v->len = calloc(v->n, sizeof(*v->len));
    v->type = calloc(v->n, sizeof(*v->type));
    v->score = calloc(v->n, sizeof(*v->score));
    if (!v->text || !v->len || !v->type || !v->score)
        return strata_error_set(err, STRATA_E_NOMEM, "%u tokens: out of memory", v->n);
    json_object_foreach((json_t *)vocab, key, val) {
        uint32_t id = (uint32_t)json_integer_value(val);
        if (v->text[id])
            return strata_error_set(err, STRATA_E_FORMAT, "model.vocab: id %u given twice", id);
        if (set_text(v, id, key, strlen(key), err))
            return err ? err->code : STRATA_E_NOMEM;
        v->type[id] = TT_NORMAL;
    }
    return 0;
}

/* Added tokens override the model's entry for their id (get_vocab_base). */
static int overlay_added(struct hv *v, const json_t *added, struct strata_error *err) {
    size_t i;
    const json_t *a;
    json_array_foreach(added, i, a) {
        uint32_t id = (uint32_t)json_integer_value(json_object_get(a, "id"));
        const json_t *c = json_object_get(a, "content");
        if (set_text(v, id, json_string_value(c), json_string_length(c), err))
            return err ? err->code : STRATA_E_NOMEM;
        if (json_is_true(json_object_get(a, "special")) || looks_special(v->text[id])) {
            v->type[id] = TT_CONTROL;
        } else {
            v->type[id] = TT_USER_DEFINED;
            v->len[id] = unspace(v->text[id], v->len[id]);
        }
        v->score[id] = ADDED_SCORE;
    }
    for (uint32_t id = 0; id < v->n; id++) {
        if (v->text[id])
            continue;
        char pad[32];
        int n = snprintf(pad, sizeof(pad), "[PAD%u]", id);
        if (set_text(v, id, pad, (size_t)n, err))
            return err ? err->code : STRATA_E_NOMEM;
        v->type[id] = TT_UNUSED;
        v->score[id] = ADDED_SCORE;
    }
    return 0;
}

/* A merge entry ("a b" or ["a", "b"]) as "a b"; a space inside a part of the
 * pair form becomes U+0120 as in gguf-py (byte-level's spelling of ' '). */
static char *merge_text(const json_t *m) {
    if (json_is_string(m))
        return strdup(json_string_value(m));
    if (!json_is_array(m) || json_array_size(m) != 2 || !json_is_string(json_array_get(m, 0)) ||
        !json_is_string(json_array_get(m, 1)))
        return NULL;
    const char *l = json_string_value(json_array_get(m, 0));
    const char *r = json_string_value(json_array_get(m, 1));
    size_t nl = strlen(l), nr = strlen(r);
    char *s = malloc(2 * (nl + nr) + 2), *w = s;
    if (!s)
        return NULL;
    for (int part = 0; part < 2; part++) {
        for (const char *p = part ? r : l; *p; p++) {
            if (*p == ' ') {
                *w++ = (char)0xc4;
                *w++ = (char)0xa0;
            } else {
                *w++ = *p;
            }
        }
        if (!part)
            *w++ = ' ';
    }
    *w = '\0';
    return s;
}

static int load_merges(struct hv *v, const json_t *merges, struct strata_error *err) {
    size_t n = json_array_size(merges);
    if (n >= HFVOCAB_MAX_TOKENS * 4u)
        return strata_error_set(err, STRATA_E_LIMIT, "model.merges: %zu entries", n);
    v->merges = calloc(n ? n : 1, sizeof(*v->merges));
    if (!v->merges)
        return strata_error_set(err, STRATA_E_NOMEM, "merges: out of memory");
    for (size_t i = 0; i < n; i++) {
        v->merges[i] = merge_text(json_array_get(merges, i));
        v->n_merges = (uint32_t)i + 1;
        if (!v->merges[i])
            return strata_error_set(err, STRATA_E_FORMAT,
                                    "model.merges[%zu]: not \"a b\" or [\"a\", \"b\"]", i);
        if (json_is_string(json_array_get(merges, i)) && !strchr(v->merges[i], ' '))
            return strata_error_set(err, STRATA_E_FORMAT, "model.merges[%zu]: no space", i);
    }
    return 0;
}

/* SPM: types of model pieces and scores rebuilt from the merge ranks (see top). */
static int spm_types_scores(struct hv *v, const json_t *model, struct strata_error *err) {
    const json_t *vocab = json_object_get(model, "vocab");
    const json_t *merges = json_object_get(model, "merges");
    size_t n_merges = json_array_size(merges);
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    bool *done = calloc(v->n, sizeof(*done));
    if (!done)
        return strata_error_set(err, STRATA_E_NOMEM, "scores: out of memory");
    for (uint32_t id = 0; id < v->n; id++) {
        if (v->type[id] != TT_NORMAL)
            continue;
        if (unk && !strcmp(v->text[id], unk))
            v->type[id] = TT_UNKNOWN, v->score[id] = 0.0f, done[id] = true;
        else if (is_byte_piece(v->text[id]))
            v->type[id] = TT_BYTE, v->score[id] = 0.0f, done[id] = true;
    }
    int rc = 0;
    for (size_t k = 0; k < n_merges && rc == 0; k++) {
        char *m = merge_text(json_array_get(merges, k));
        char *sp = m ? strchr(m, ' ') : NULL;
        if (!sp) {
            rc = strata_error_set(err, STRATA_E_FORMAT, "model.merges[%zu]: malformed", k);
        } else {
            /* pieces never contain ' ' (SentencePiece spells it U+2581) */
            memmove(sp, sp + 1, strlen(sp + 1) + 1);
            uint32_t id;
            if (id_of(json_object_get(vocab, m), v->n, &id) == 0 && !done[id] &&
                v->type[id] == TT_NORMAL) {
                v->score[id] = -(float)k;
                done[id] = true;
            }
        }
        free(m);
    }
    for (uint32_t id = 0; id < v->n && rc == 0; id++)
        if (!done[id] && v->type[id] == TT_NORMAL)
            v->score[id] = -(float)(n_merges + id);
    free(done);
    return rc;
}

/* ---- special ids and flags ----------------------------------------------- */

/* Content of a tokenizer_config.json "<typ>_token" entry (string or AddedToken). */
static const char *special_content(const json_t *cfg, const char *typ) {
    char key[32];
    snprintf(key, sizeof(key), "%s_token", typ);
    const json_t *e = json_object_get(cfg, key);
    if (json_is_object(e))
        e = json_object_get(e, "content");
    return json_string_value(e);
}

/* An integral number of a config object (read as a real), or -1. */
static int64_t config_int(const json_t *obj, const char *key) {
    const json_t *j = json_object_get(obj, key);
    if (!json_is_number(j))
        return -1;
    double d = json_number_value(j);
    if (!(d >= 0 && d <= (double)INT32_MAX) || d != (double)(int64_t)d)
        return -1;
    return (int64_t)d;
}

static int32_t find_added(const json_t *added, const char *content) {
    size_t i;
    const json_t *a;
    if (!content)
        return -1;
    json_array_foreach(added, i, a) {
        const char *c = json_string_value(json_object_get(a, "content"));
        if (c && !strcmp(c, content))
            return (int32_t)json_integer_value(json_object_get(a, "id"));
    }
    return -1;
}

struct specials {
    int32_t id[7];        /* k_special_typ order; -1 absent */
    int add_bos, add_eos; /* -1 unset */
};
static const char *const k_special_typ[7] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
static const char *const k_special_key[7] = {
    "tokenizer.ggml.bos_token_id",     "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.seperator_token_id",
    "tokenizer.ggml.padding_token_id", "tokenizer.ggml.cls_token_id",
    "tokenizer.ggml.mask_token_id",
};

/* gguf-py SpecialVocab._try_load_from_tokenizer_json, the parts that apply. */
static void find_specials(const json_t *tj, const json_t *cfg, uint32_t n_vocab,
                          struct specials *s) {
    const json_t *added = json_object_get(tj, "added_tokens");
    s->add_bos = s->add_eos = -1;
    for (int t = 0; t < 7; t++) {
        int32_t id = find_added(added, special_content(cfg, k_special_typ[t]));
        s->id[t] = id >= 0 && (uint32_t)id < n_vocab ? id : -1;
    }
    const char *bos = special_content(cfg, "bos"), *eos = special_content(cfg, "eos");
    const char *cls = special_content(cfg, "cls");
    const json_t *post = json_object_get(tj, "post_processor");
    const json_t *procs = json_object_get(post, "processors");
    size_t n = procs ? json_array_size(procs) : 1;
    for (size_t i = 0; i < n; i++) {
        const json_t *p = procs ? json_array_get(procs, i) : post;
        const char *type = json_string_value(json_object_get(p, "type"));
        if (!type)
            continue;
        if (!strcmp(type, "RobertaProcessing")) {
            s->add_bos = s->add_eos = 1;
            break;
        }
        if (!strcmp(type, "TemplateProcessing")) {
            const json_t *single = json_object_get(p, "single");
            size_t ns = json_array_size(single);
            if (ns > 1) {
                const char *first = json_string_value(json_object_get(
                    json_object_get(json_array_get(single, 0), "SpecialToken"), "id"));
                const char *last = json_string_value(json_object_get(
                    json_object_get(json_array_get(single, ns - 1), "SpecialToken"), "id"));
                bool no_cfg = !json_is_object(cfg) || json_object_size(cfg) == 0;
                if (first) {
                    if (no_cfg)
                        bos = first;
                    s->add_bos = (bos && !strcmp(first, bos)) || (cls && !strcmp(first, cls));
                }
                if (last) {
                    if (no_cfg)
                        eos = last;
                    s->add_eos = eos && !strcmp(last, eos);
                }
                if (no_cfg) { /* the template named them: that is where ids come from */
                    int32_t b = find_added(added, bos), e = find_added(added, eos);
                    if (b >= 0 && (uint32_t)b < n_vocab && s->id[0] < 0)
                        s->id[0] = b;
                    if (e >= 0 && (uint32_t)e < n_vocab && s->id[1] < 0)
                        s->id[1] = e;
                }
            }
            break;
        }
    }
    const json_t *ab = json_object_get(cfg, "add_bos_token");
    const json_t *ae = json_object_get(cfg, "add_eos_token");
    if (json_is_boolean(ab))
        s->add_bos = json_is_true(ab);
    if (json_is_boolean(ae))
        s->add_eos = json_is_true(ae);
}

/* The normalizer prepends U+2581 (SentencePiece add_dummy_prefix). */
static bool prepends_space(const json_t *norm) {
    if (!norm)
        return false;
    const char *type = json_string_value(json_object_get(norm, "type"));
    if (type && !strcmp(type, "Prepend"))
        return !strcmp(json_string_value(json_object_get(norm, "prepend")) ?: "", "\xe2\x96\x81");
    size_t i;
    const json_t *e;
    json_array_foreach(json_object_get(norm, "normalizers"), i,
                       e) if (prepends_space(e)) return true;
    return false;
}

/* ---- writing -------------------------------------------------------------- */

static int write_chat_templates(struct gguf_writer *w, const json_t *cfg, bool *any,
                                struct strata_error *err) {
    const json_t *ct = json_object_get(cfg, "chat_template");
    *any = false;
    if (json_is_string(ct)) {
        *any = true;
        return gguf_writer_set_str(w, "tokenizer.chat_template", json_string_value(ct), err);
    }
    size_t i;
    const json_t *e;
    json_array_foreach(ct, i, e) { /* [{"name": ..., "template": ...}] */
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *tmpl = json_string_value(json_object_get(e, "template"));
        if (!name || !tmpl)
            continue;
        char key[160];
        if (!strcmp(name, "default"))
            snprintf(key, sizeof(key), "tokenizer.chat_template");
        else if (snprintf(key, sizeof(key), "tokenizer.chat_template.%s", name) >= (int)sizeof(key))
            continue;
        int rc = gguf_writer_set_str(w, key, tmpl, err);
        if (rc)
            return rc;
        *any = true;
    }
    return 0;
}

/* Placeholder hyper-parameters under the chosen architecture (see hfvocab.h). */
static int write_hparams(struct gguf_writer *w, const char *arch, struct strata_error *err) {
    static const struct {
        const char *suffix;
        uint32_t value;
    } u32s[] = {{"context_length", 4096},    {"embedding_length", 64},
                {"block_count", 1},          {"feed_forward_length", 128},
                {"attention.head_count", 1}, {"attention.head_count_kv", 1}};
    char key[128];
    int rc = gguf_writer_set_str(w, "general.architecture", arch, err);
    for (size_t i = 0; rc == 0 && i < sizeof(u32s) / sizeof(u32s[0]); i++) {
        snprintf(key, sizeof(key), "%s.%s", arch, u32s[i].suffix);
        rc = gguf_writer_set_u32(w, key, u32s[i].value, err);
    }
    if (rc == 0) {
        snprintf(key, sizeof(key), "%s.attention.layer_norm_rms_epsilon", arch);
        rc = gguf_writer_set_f32(w, key, 1e-5f, err);
    }
    return rc;
}

static int write_gguf(const struct hv *v, const struct specials *sp, const char *pre,
                      const json_t *tj, const json_t *cfg, const struct hfvocab_params *p,
                      const char *out_path, struct hfvocab_summary *sum, struct strata_error *err) {
    struct gguf_writer *w = gguf_writer_init(out_path, err);
    if (!w)
        return err ? err->code : STRATA_E_IO;
    const char *arch = p->arch && *p->arch ? p->arch : "llama";
    int rc = write_hparams(w, arch, err);
    if (rc == 0 && p->name)
        rc = gguf_writer_set_str(w, "general.name", p->name, err);
    if (rc == 0)
        rc = gguf_writer_set_str(w, "tokenizer.ggml.model", v->spm ? "llama" : "gpt2", err);
    if (rc == 0 && pre)
        rc = gguf_writer_set_str(w, "tokenizer.ggml.pre", pre, err);
    if (rc == 0)
        rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->text,
                                     v->len, v->n, err);
    if (rc == 0 && v->spm)
        rc =
            gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v->score, v->n, err);
    if (rc == 0)
        rc = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->type, v->n,
                                 err);
    if (rc == 0 && !v->spm)
        rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges,
                                     NULL, v->n_merges, err);
    for (int t = 0; rc == 0 && t < 7; t++)
        if (sp->id[t] >= 0)
            rc = gguf_writer_set_u32(w, k_special_key[t], (uint32_t)sp->id[t], err);
    if (rc == 0 && sp->add_bos >= 0)
        rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", sp->add_bos, err);
    if (rc == 0 && sp->add_eos >= 0)
        rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", sp->add_eos, err);
    if (rc == 0 && v->spm)
        rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix",
                                  prepends_space(json_object_get(tj, "normalizer")), err);
    bool any_template = false;
    if (rc == 0)
        rc = write_chat_templates(w, cfg, &any_template, err);
    if (rc == 0)
        rc = gguf_writer_begin(w, err);
    if (rc == 0)
        rc = gguf_writer_finish(w, err);
    gguf_writer_free(w);
    if (rc == 0 && sum) {
        memset(sum, 0, sizeof(*sum));
        snprintf(sum->model, sizeof(sum->model), "%s", v->spm ? "llama" : "gpt2");
        snprintf(sum->pre, sizeof(sum->pre), "%s", pre ? pre : "");
        sum->n_tokens = v->n;
        sum->n_merges = v->spm ? 0 : v->n_merges;
        for (uint32_t i = 0; i < v->n; i++) {
            sum->n_control += v->type[i] == TT_CONTROL;
            sum->n_user_defined += v->type[i] == TT_USER_DEFINED;
            sum->n_byte += v->type[i] == TT_BYTE;
            sum->n_unused += v->type[i] == TT_UNUSED;
        }
        sum->bos = sp->id[0];
        sum->eos = sp->id[1];
        sum->unk = sp->id[2];
        sum->pad = sp->id[4];
        sum->add_bos = sp->add_bos;
        sum->add_eos = sp->add_eos;
        sum->chat_template = any_template;
    }
    return rc;
}

/* ---- entry point ---------------------------------------------------------- */

static json_t *load_json(const char *path, const char *what, size_t flags,
                         struct strata_error *err) {
    json_error_t jerr;
    json_t *j = json_load_file(path, JSON_ALLOW_NUL | flags, &jerr);
    if (!j) {
        FILE *fp = fopen(path, "rb");
        int code = fp ? STRATA_E_FORMAT : STRATA_E_IO;
        if (fp)
            fclose(fp);
        strata_error_set(err, code, "%s %s: line %d: %s", what, path, jerr.line, jerr.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        strata_error_set(err, STRATA_E_FORMAT, "%s %s: not a JSON object", what, path);
        return NULL;
    }
    return j;
}

int hfvocab_convert(const char *tokenizer_json, const struct hfvocab_params *params,
                    const char *out_path, struct hfvocab_summary *sum, struct strata_error *err) {
    struct hfvocab_params p = params ? *params : hfvocab_params_default();
    if (!tokenizer_json || !out_path)
        return strata_error_set(err, STRATA_E_INVALID, "hfvocab: NULL path");
    if (p.vocab_size > HFVOCAB_MAX_TOKENS)
        return strata_error_set(err, STRATA_E_LIMIT, "vocab size %u above %u", p.vocab_size,
                                HFVOCAB_MAX_TOKENS);
    struct hv v = {0};
    json_t *cfg = NULL, *mc = NULL;
    int rc;
    json_t *tj = load_json(tokenizer_json, "tokenizer.json", 0, err);
    if (!tj)
        return err ? err->code : STRATA_E_FORMAT;
    /* The config files are read with numbers as reals: Llama 3's
     * tokenizer_config.json writes model_max_length 1e30 as an integer, which
     * jansson refuses; ids taken from config.json are checked to be integral. */
    if (p.model_config_path &&
        !(mc = load_json(p.model_config_path, "config.json", JSON_DECODE_INT_AS_REAL, err))) {
        rc = err ? err->code : STRATA_E_FORMAT;
        goto fail;
    }
    if (!p.vocab_size && mc) {
        int64_t n = config_int(mc, "vocab_size");
        if (n > HFVOCAB_MAX_TOKENS) {
            rc = strata_error_set(err, STRATA_E_LIMIT, "config.json: vocab_size %lld above %u",
                                  (long long)n, HFVOCAB_MAX_TOKENS);
            goto fail;
        }
        p.vocab_size = n > 0 ? (uint32_t)n : 0;
    }
    if (p.config_path &&
        !(cfg = load_json(p.config_path, "tokenizer_config.json", JSON_DECODE_INT_AS_REAL, err))) {
        rc = err ? err->code : STRATA_E_FORMAT;
        goto fail;
    }
    const json_t *model = json_object_get(tj, "model");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    const json_t *added = json_object_get(tj, "added_tokens");
    if (!mtype) {
        rc = strata_error_set(err, STRATA_E_FORMAT, "tokenizer.json: no model.type");
        goto fail;
    }
    if (strcmp(mtype, "BPE") != 0) {
        rc = strata_error_set(err, STRATA_E_UNSUPPORTED,
                              "tokenizer.json: model type %s is not supported (BPE only)", mtype);
        goto fail;
    }
    if (added && !json_is_array(added)) {
        rc = strata_error_set(err, STRATA_E_FORMAT, "tokenizer.json: added_tokens not an array");
        goto fail;
    }
    if ((rc = fill_tokens(&v, json_object_get(model, "vocab"), added, p.vocab_size, err)))
        goto fail;
    v.spm = json_is_true(json_object_get(model, "byte_fallback"));
    const char *pre = p.pre && *p.pre ? p.pre : NULL;
    if (v.spm) {
        /* the converter writes "default" for SentencePiece vocabularies (as in
         * ../shared's ggml-vocab-llama-spm.gguf); llama.cpp ignores it there */
        if (!pre)
            pre = "default";
        /* scores are computed on the model's own pieces, before added tokens overlay them */
        if ((rc = spm_types_scores(&v, model, err)))
            goto fail;
    } else {
        if (!pre)
            pre = hfvocab_detect_pre(json_object_get(tj, "pre_tokenizer"));
        if (!pre) {
            char *dump = json_dumps(json_object_get(tj, "pre_tokenizer"), JSON_COMPACT);
            rc = strata_error_set(err, STRATA_E_UNSUPPORTED,
                                  "pre-tokenizer not recognised (pass --pre NAME): %.300s",
                                  dump ? dump : "(none)");
            free(dump);
            goto fail;
        }
        const json_t *merges = json_object_get(model, "merges");
        if (!json_is_array(merges)) {
            rc = strata_error_set(err, STRATA_E_FORMAT, "model.merges: missing (byte-level BPE)");
            goto fail;
        }
        if ((rc = load_merges(&v, merges, err)))
            goto fail;
    }
    if ((rc = overlay_added(&v, added, err)))
        goto fail;
    struct specials sp;
    find_specials(tj, cfg, v.n, &sp);
    for (int t = 0; mc && t < 7; t++) { /* SpecialVocab: config.json only fills gaps */
        char key[32];
        snprintf(key, sizeof(key), "%s_token_id", k_special_typ[t]);
        int64_t id = config_int(mc, key);
        if (sp.id[t] < 0 && id >= 0 && id < (int64_t)v.n)
            sp.id[t] = (int32_t)id;
    }
    rc = write_gguf(&v, &sp, pre, tj, cfg, &p, out_path, sum, err);
fail:
    hv_free(&v);
    json_decref(mc);
    json_decref(cfg);
    json_decref(tj);
    return rc;
}
