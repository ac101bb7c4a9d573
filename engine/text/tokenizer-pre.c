/* engine/text/tokenizer-pre.c: byte-level BPE pre-tokenizers (tokenizer.ggml.pre).
 *
 * Each pre-tokenizer is an ordered list of regexes, the lists llama.cpp's
 * llm_tokenizer_bpe uses per pre-type (facts taken from llama-vocab.cpp; the
 * Hugging Face tokenizer.json regexes they come from). Regex k splits every
 * piece produced by regex k-1: the matches and the gaps between them both
 * become pieces (llama.cpp's unicode_regex_split), and each piece is matched
 * on its own, so `$` and `(?!\S)` see the piece's end.
 *
 * Why PCRE2: the HF regexes need Unicode general categories (\p{L}, \p{N},
 * \p{P}, \p{S}, \p{M}, \p{Lu}...), Unicode \s, case-insensitive contractions
 * and a negative lookahead. PCRE2 (PCRE2_UTF | PCRE2_UCP) implements all of
 * them with maintained Unicode tables, and its JIT turns each pattern into
 * machine code once per tokenizer; hand-built category tables plus a custom
 * matcher per pattern (llama.cpp's approach) would have to be regenerated for
 * every Unicode release and rewritten for every new pre-tokenizer. `$` is
 * compiled with PCRE2_DOLLAR_ENDONLY so it means "end of piece" as in
 * std::regex, not "before a final newline".
 *
 * Invalid UTF-8: the text is first decoded as llama.cpp's
 * unicode_cpts_from_utf8 does (each invalid byte becomes U+FFFD; surrogates
 * and code points above U+10FFFF, which llama.cpp keeps but PCRE2 refuses,
 * also become U+FFFD) and re-encoded; the matcher then runs with
 * PCRE2_NO_UTF_CHECK on that validated copy.
 *
 * Threading: compiled codes are shared read-only; match data is created per
 * call, so concurrent encodes are safe.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/tokenizer-impl.h"
#include "engine/core/buf.h"

#define MAX_REGEX 6

/* GPT-2 / most BPE models */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
/* case-insensitive contractions written out, as llama.cpp adapted (?i:'s|...) */
#define RE_CONTR "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
/* Llama 3 */
#define RE_LLAMA3                                                                                  \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"     \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Qwen2 / Qwen3: as Llama 3 but one digit per piece */
#define RE_QWEN2                                                                                   \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"     \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* llama.cpp matches regexes without \p{..} with std::wregex after turning
 * every non-ASCII whitespace code point into \x0B, so an explicit non-ASCII
 * range never matches whitespace inside it (U+3000, U+2000..U+200A lie in
 * U+0800..U+4E00): "(?!\s)" in front of such classes keeps that behaviour
 * (measured: deepseek-llm "  U+3000" differed from llama.cpp without it). */
#define RE_CJK                                                                                     \
    "(?:(?!\\s)[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf])+"
#define RE_PORO                                                                                    \
    " ?[^(\\s|.,!?\xe2\x80\xa6\xe3\x80\x82\xef\xbc\x8c\xe3\x80\x81\xe0\xa5\xa4\xdb\x94\xd8\x8c)]+"

struct pre_def {
    const char *names; /* '|'-separated tokenizer.ggml.pre values */
    bool ignore_merges;
    bool clean_spaces;
    const char *regex[MAX_REGEX];
};

static const struct pre_def k_pre[] = {
    {"default", false, true, {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}},
    {"llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2|jina-v5-nano",
     true,
     true,
     {RE_LLAMA3}},
    {"dbrx|smaug-bpe", false, true, {RE_LLAMA3}},
    {"chatglm-bpe|glm4", false, true, {RE_LLAMA3}},
    {"deepseek-llm",
     false,
     false,
     {"[\r\n]",
      "\\s?[A-Za-z\xc2\xb5\xc3\x80-\xc3\x96\xc3\x98-\xc3\xb6\xc3\xb8-\xc6\xba\xc6\xbc-\xc6\xbf"
      "\xc7\x84-\xca\x93\xca\x95-\xca\xaf\xcd\xb0-\xcd\xb3\xcd\xb6\xcd\xb7\xcd\xbb-\xcd\xbd\xcd\xbf"
      "\xce\x86\xce\x88-\xce\x8a\xce\x8c\xce\x8e-\xce\xa1\xce\xa3-\xcf\xb5\xcf\xb7-"
      "\xd2\x81\xd2\x8a-"
      "\xd4\xaf\xd4\xb1-\xd5\x96\xe1\x82\xa0-\xe1\x83\x85\xe1\x8e\xa0-\xe1\x8f\xb5\xe1\x8f\xb8-"
      "\xe1\x8f\xbd\xe1\xb2\x90-\xe1\xb2\xba\xe1\xb2\xbd-\xe1\xb2\xbf\xe1\xb4\x80-\xe1\xb4\xab"
      "\xe1\xb5\xab-\xe1\xb5\xb7\xe1\xb5\xb9-\xe1\xb6\x9a\xe1\xb8\x80-\xe1\xbc\x95\xe1\xbc\x98-"
      "\xe1\xbc\x9d\xe1\xbc\xa0-\xe1\xbd\x85\xe1\xbd\x88-\xe1\xbd\x8d\xe1\xbd\x90-\xe1\xbd\x97"
      "\xe1\xbd\x99\xe1\xbd\x9b\xe1\xbd\x9d\xe1\xbd\x9f-\xe1\xbd\xbd\xe1\xbe\x80-\xe1\xbe\xb4"
      "\xe1\xbe\xb6-\xe1\xbe\xbc\xe1\xbe\xbe\xe1\xbf\x82-\xe1\xbf\x84\xe1\xbf\x86-\xe1\xbf\x8c"
      "\xe1\xbf\x90-\xe1\xbf\x93\xe1\xbf\x96-\xe1\xbf\x9b\xe1\xbf\xa0-\xe1\xbf\xac\xe1\xbf\xb2-"
      "\xe1\xbf\xb4\xe1\xbf\xb6-\xe1\xbf\xbc\xe2\x84\x82\xe2\x84\x87\xe2\x84\x8a-\xe2\x84\x93"
      "\xe2\x84\x95\xe2\x84\x99-\xe2\x84\x9d\xe2\x84\xa4\xe2\x84\xa6\xe2\x84\xa8\xe2\x84\xaa-"
      "\xe2\x84\xad\xe2\x84\xaf-\xe2\x84\xb4\xe2\x84\xb9\xe2\x84\xbc-\xe2\x84\xbf\xe2\x85\x85-"
      "\xe2\x85\x89\xe2\x85\x8e\xe2\x86\x83\xe2\x86\x84\xe2\xb0\x80-\xe2\xb1\xbb\xe2\xb1\xbe-"
      "\xe2\xb3\xa4\xe2\xb3\xab-\xe2\xb3\xae\xe2\xb3\xb2\xe2\xb3\xb3\xea\x99\x80-\xea\x99\xad"
      "\xea\x9a\x80-\xea\x9a\x9b\xea\x9c\xa2-\xea\x9d\xaf\xea\x9d\xb1-\xea\x9e\x87\xea\x9e\x8b-"
      "\xea\x9e\x8e\xea\xad\xb0-\xea\xae\xbf\xef\xac\x80-\xef\xac\x86\xef\xac\x93-\xef\xac\x97"
      "\xef\xbc\xa1-\xef\xbc\xba\xef\xbd\x81-\xef\xbd\x9a\xf0\x90\x90\x80-\xf0\x90\x91\x8f"
      "\xf0\x90\x92\xb0-\xf0\x90\x93\x93\xf0\x90\x93\x98-\xf0\x90\x93\xbb\xf0\x90\xb2\x80-"
      "\xf0\x90\xb2\xb2\xf0\x90\xb3\x80-\xf0\x90\xb3\xb2\xf0\x91\xa2\xa0-\xf0\x91\xa3\x9f"
      "\xf0\x9e\xa4\x80-\xf0\x9e\xa5\x83]+",
      "\\s?(?:(?!\\s)[!-/:-~\xef\xbc\x81-\xef\xbc\x8f\xef\xbc\x9a-\xef\xbd\x9e\xe2\x80\x98-"
      "\xe2\x80\x9f\xe3\x80\x80-\xe3\x80\x82])+",
      "\\s+$", RE_CJK, "\\p{N}+"}},
    {"deepseek-coder", false, false, {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_CJK, "\\p{N}"}},
    {"deepseek-v3|hunyuan-dense",
     false,
     false,
     {"\\p{N}{1,3}",
      "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+",
      "[!\"#$%&'()*+,\\-./"
      ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
      " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}},
    {"falcon", false, true, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}},
    {"starcoder|refact|codeshell|exaone|minerva-7b", false, true, {"\\p{N}", RE_GPT2}},
    {"command-r|smollm", false, false, {"\\p{N}", RE_GPT2}},
    /* gpt-neox: not a llama.cpp name; HF GPT-NeoX uses the GPT-2 ByteLevel regex */
    {"gpt-2|phi-2|jina-es|jina-de|gigachat|jina-v1-en|jina-v2-es|jina-v2-de|jina-v2-code|"
     "roberta-bpe|mpt|olmo|jais|a.x-4.0|mellum|modern-bert|exaone4|gpt-neox",
     false,
     true,
     {RE_GPT2}},
    {"trillion", false, false, {RE_GPT2}},
    {"qwen2|deepseek-r1-qwen|kormo|f2llmv2", false, false, {RE_QWEN2}},
    {"megrez", false, true, {RE_QWEN2}},
    {"stablelm2|hunyuan", false, true, {RE_QWEN2}},
    {"poro-chat", false, false, {RE_PORO}},
    {"bloom|gpt3-finnish", false, true, {RE_PORO}},
    {"viking", false, false, {RE_PORO, "\\p{N}"}},
    /* tekken / gpt-4o: llama.cpp's adaptation of the HF regexes (std::regex has no
     * \p{Lu}): "upper" = a letter that is not a-z, "lower" = a letter not A-Z */
    {"tekken",
     true,
     false,
     {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|"
      "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|"
      "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    {"gpt-4o|llama4|kanana2|talkie",
     false,
     false,
     {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+" RE_CONTR "?|"
      "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*" RE_CONTR "?|"
      "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    /* Qwen3.5: letters take combining marks */
    {"qwen35",
     false,
     false,
     {RE_CONTR "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
               "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    {"seed-coder",
     false,
     false,
     {RE_CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|"
               "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    {"chameleon",
     false,
     false,
     {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
      "[\\p{P}!-/:-@\\[-`{-~]", RE_GPT2}},
};

struct tok_pre {
    pcre2_code *re[MAX_REGEX];
    int n_re;
};

static bool name_in(const char *names, const char *name) {
    size_t n = strlen(name);
    for (const char *p = names; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !memcmp(p, name, n))
            return true;
        if (!bar)
            break;
        p = bar + 1;
    }
    return false;
}

void tok_pre_free(struct tok_pre *pre) {
    if (!pre)
        return;
    for (int i = pre->n_re - 1; i >= 0; i--)
        pcre2_code_free(pre->re[i]);
    free(pre);
}

struct tok_pre *tok_pre_init(const char *pre_name, bool *ignore_merges, bool *clean_spaces,
                             struct strata_error *err) {
    const struct pre_def *def = NULL;
    for (size_t i = 0; i < sizeof(k_pre) / sizeof(*k_pre) && !def; i++)
        if (name_in(k_pre[i].names, pre_name))
            def = &k_pre[i];
    if (!def) {
        strata_error_set(err, STRATA_E_UNSUPPORTED, "unknown pre-tokenizer type '%s'", pre_name);
        return NULL;
    }
    struct tok_pre *pre = calloc(1, sizeof(*pre));
    if (!pre) {
        strata_error_set(err, STRATA_E_NOMEM, "tokenizer: out of memory");
        return NULL;
    }
    for (int i = 0; i < MAX_REGEX && def->regex[i]; i++) {
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *re =
            pcre2_compile((PCRE2_SPTR)def->regex[i], PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &ec, &eo, NULL);
        if (!re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(ec, msg, sizeof(msg));
            strata_error_set(err, STRATA_E_INTERNAL, "pre-tokenizer '%s' regex %d at %zu: %s",
                             pre_name, i, (size_t)eo, (const char *)msg);
            tok_pre_free(pre);
            return NULL;
        }
        /* JIT failure (no executable memory) only costs speed: pcre2_match
         * falls back to the interpreter */
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
        pre->re[pre->n_re++] = re;
    }
    *ignore_merges = def->ignore_merges;
    *clean_spaces = def->clean_spaces;
    return pre;
}

struct piece_list {
    struct tokenizer_range *v; /* (n) */
    size_t n, cap;
};

static int piece_push(struct piece_list *l, size_t off, size_t len) {
    if (strata_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v) < 0)
        return STRATA_E_NOMEM;
    l->v[l->n++] = (struct tokenizer_range){off, len};
    return 0;
}

/* Splits one piece with one regex: matches and the gaps between them. */
/* Per-call matcher state: a JIT stack is created only when the default 32 KiB
 * machine stack runs out (measured: deepseek-llm's letter class over 1 MB of
 * letters), growing 8x per retry up to JIT_STACK_MAX. */
#define JIT_STACK_MAX ((size_t)512 << 20)
struct matcher {
    pcre2_match_context *mc;
    pcre2_jit_stack *js;
    size_t js_size;
};

static void matcher_free(struct matcher *m) {
    pcre2_jit_stack_free(m->js);
    pcre2_match_context_free(m->mc);
}

static int match(const pcre2_code *re, PCRE2_SPTR subj, size_t len, size_t pos,
                 pcre2_match_data *md, struct matcher *m) {
    for (;;) {
        int rc = pcre2_match(re, subj, len, pos, PCRE2_NO_UTF_CHECK, md, m->mc);
        if (rc != PCRE2_ERROR_JIT_STACKLIMIT || m->js_size >= JIT_STACK_MAX)
            return rc;
        m->js_size = m->js_size ? m->js_size * 8 : (size_t)1 << 20;
        pcre2_jit_stack_free(m->js);
        m->js = pcre2_jit_stack_create(32 << 10, m->js_size, NULL);
        if (!m->mc)
            m->mc = pcre2_match_context_create(NULL);
        if (!m->js || !m->mc)
            return PCRE2_ERROR_NOMEMORY;
        pcre2_jit_stack_assign(m->mc, NULL, m->js);
    }
}

static int split_piece(const pcre2_code *re, pcre2_match_data *md, struct matcher *m, const char *s,
                       size_t off, size_t len, struct piece_list *out, struct strata_error *err) {
    const PCRE2_SPTR subj = (PCRE2_SPTR)(s + off);
    size_t pos = 0, last = 0;
    while (pos < len) {
        int rc = match(re, subj, len, pos, md, m);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof(msg));
            return strata_error_set(err, STRATA_E_TOKENIZER, "pre-tokenizer match: %s",
                                    (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) { /* empty match: step over one character */
            pos = ms + tok_utf8_len((uint8_t)s[off + ms]);
            continue;
        }
        if (ms > last && piece_push(out, off + last, ms - last))
            return STRATA_E_NOMEM;
        if (piece_push(out, off + ms, me - ms))
            return STRATA_E_NOMEM;
        last = pos = me;
    }
    if (last < len && piece_push(out, off + last, len - last))
        return STRATA_E_NOMEM;
    return 0;
}

int tok_pre_split(const struct tok_pre *pre, const char *text, size_t len, char **clean,
                  size_t *clean_len, struct tokenizer_range **words, size_t *n_words,
                  struct strata_error *err) {
    *clean = NULL;
    *words = NULL;
    *n_words = *clean_len = 0;
    /* validated copy: at most 3 bytes (U+FFFD) per input byte */
    if (len > SIZE_MAX / 3 - 1)
        return STRATA_E_LIMIT;
    char *c = malloc(len * 3 + 1);
    if (!c)
        return STRATA_E_NOMEM;
    size_t n = 0;
    for (size_t off = 0; off < len;) {
        uint32_t cp;
        tok_utf8_decode((const uint8_t *)text, len, &off, &cp);
        if ((cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
            cp = 0xfffd;
        n += tok_utf8_encode(cp, c + n);
    }
    c[n] = '\0';

    struct piece_list a = {0}, b = {0};
    pcre2_match_data *md = NULL;
    struct matcher m = {0};
    int rc = 0;
    if (n && (rc = piece_push(&a, 0, n)))
        goto done;
    for (int r = 0; r < pre->n_re && rc == 0; r++) {
        md = pcre2_match_data_create_from_pattern(pre->re[r], NULL);
        if (!md) {
            rc = STRATA_E_NOMEM;
            break;
        }
        b.n = 0;
        for (size_t i = 0; i < a.n && rc == 0; i++)
            rc = split_piece(pre->re[r], md, &m, c, a.v[i].offset, a.v[i].length, &b, err);
        pcre2_match_data_free(md);
        md = NULL;
        struct piece_list t = a;
        a = b;
        b = t;
    }
done:
    matcher_free(&m);
    free(b.v);
    if (rc) {
        free(a.v);
        free(c);
        return rc;
    }
    *clean = c;
    *clean_len = n;
    *words = a.v;
    *n_words = a.n;
    return 0;
}
