/* tools/synth/synth-mix.c: llama-quantize's per-tensor type choice for a recipe
 * (see synth.h for the rules and where they come from). */
#include "engine/quant/quant.h"
#include "tools/synth/synth.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* llama_ftype values (llama.h): written to general.file_type. */
enum {
    FTYPE_ALL_F32 = 0,
    FTYPE_F16 = 1,
    FTYPE_Q4_0 = 2,
    FTYPE_Q4_1 = 3,
    FTYPE_Q8_0 = 7,
    FTYPE_Q5_0 = 8,
    FTYPE_Q5_1 = 9,
    FTYPE_Q4_K_S = 14,
    FTYPE_Q4_K_M = 15,
    FTYPE_Q5_K_S = 16,
    FTYPE_Q5_K_M = 17,
    FTYPE_Q6_K = 18,
    FTYPE_BF16 = 32,
    FTYPE_MXFP4_MOE = 38,
};

static const struct {
    const char *name;
    int ftype;
    uint32_t default_type;
} recipes[] = {
    {"f32", FTYPE_ALL_F32, QUANT_F32},    {"f16", FTYPE_F16, QUANT_F16},
    {"bf16", FTYPE_BF16, QUANT_BF16},     {"q8_0", FTYPE_Q8_0, QUANT_Q8_0},
    {"q4_0", FTYPE_Q4_0, QUANT_Q4_0},     {"q4_1", FTYPE_Q4_1, QUANT_Q4_1},
    {"q5_0", FTYPE_Q5_0, QUANT_Q5_0},     {"q5_1", FTYPE_Q5_1, QUANT_Q5_1},
    {"q6_k", FTYPE_Q6_K, QUANT_Q6_K},     {"q4_k_s", FTYPE_Q4_K_S, QUANT_Q4_K},
    {"q4_k_m", FTYPE_Q4_K_M, QUANT_Q4_K}, {"q5_k_s", FTYPE_Q5_K_S, QUANT_Q5_K},
    {"q5_k_m", FTYPE_Q5_K_M, QUANT_Q5_K}, {"mxfp4", FTYPE_MXFP4_MOE, QUANT_MXFP4},
};
#define N_RECIPES (sizeof(recipes) / sizeof(recipes[0]))

const char *const synth_recipe_names[] = {"f32",    "f16",    "bf16",   "q8_0",  "q4_0",
                                          "q4_1",   "q5_0",   "q5_1",   "q6_k",  "q4_k_s",
                                          "q4_k_m", "q5_k_s", "q5_k_m", "mxfp4", NULL};

/* general.file_type for a pure type: the llama_ftype whose default type it is
 * (llama.h: Q2_K 10, Q3_K_S 11, Q4_K_S 14, Q5_K_S 16, Q6_K 18, IQ4_NL 25,
 * IQ4_XS 30, MXFP4_MOE 38). */
static int pure_ftype(uint32_t t) {
    switch (t) {
    case QUANT_F32:
        return FTYPE_ALL_F32;
    case QUANT_F16:
        return FTYPE_F16;
    case QUANT_BF16:
        return FTYPE_BF16;
    case QUANT_Q4_0:
        return FTYPE_Q4_0;
    case QUANT_Q4_1:
        return FTYPE_Q4_1;
    case QUANT_Q5_0:
        return FTYPE_Q5_0;
    case QUANT_Q5_1:
        return FTYPE_Q5_1;
    case QUANT_Q8_0:
        return FTYPE_Q8_0;
    case QUANT_Q2_K:
        return 10;
    case QUANT_Q3_K:
        return 11;
    case QUANT_Q4_K:
        return FTYPE_Q4_K_S;
    case QUANT_Q5_K:
        return FTYPE_Q5_K_S;
    case QUANT_Q6_K:
        return FTYPE_Q6_K;
    case QUANT_IQ4_NL:
        return 25;
    case QUANT_IQ4_XS:
        return 30;
    case QUANT_MXFP4:
        return FTYPE_MXFP4_MOE;
    default:
        return FTYPE_F16;
    }
}

int synth_mix_init(struct synth_mix *m, const char *recipe, int64_t n_layer, int64_t n_expert,
                   struct strata_error *err) {
    memset(m, 0, sizeof(*m));
    for (size_t i = 0; i < N_RECIPES; i++) {
        if (!strcasecmp(recipe, recipes[i].name)) {
            m->ftype = recipes[i].ftype;
            m->default_type = recipes[i].default_type;
            m->n_layer = n_layer;
            m->n_expert = n_expert;
            return 0;
        }
    }
    /* "pure:TYPE" or a bare ggml type name: every quantizable tensor gets TYPE
     * (llama-quantize --pure), still with the row-length fallbacks */
    const char *tn = strncasecmp(recipe, "pure:", 5) ? recipe : recipe + 5;
    int qt = quant_type_from_name(tn);
    const struct quant_traits *tr = qt >= 0 ? quant_type_traits((uint32_t)qt) : NULL;
    if (tr && tr->can_quantize && qt != QUANT_Q8_1 && qt != QUANT_Q8_K) {
        m->ftype = pure_ftype((uint32_t)qt);
        m->default_type = (uint32_t)qt;
        m->pure = true;
        m->n_layer = n_layer;
        m->n_expert = n_expert;
        return 0;
    }
    return strata_error_set(err, STRATA_E_INVALID,
                            "unknown recipe '%s' (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q6_k "
                            "q4_k_s q4_k_m q5_k_s q5_k_m mxfp4, or pure:TYPE with a ggml type "
                            "strata can quantize to)",
                            recipe);
}

static bool is_quantized(uint32_t t) {
    return t != QUANT_F32 && t != QUANT_F16 && t != QUANT_BF16;
}

enum category {
    CAT_TOKEN_EMBD,
    CAT_ATTN_V,
    CAT_ATTN_K,
    CAT_ATTN_OUT,
    CAT_FFN_DOWN,
    CAT_OUTPUT,
    CAT_OTHER
};

static enum category categorize(const char *name) {
    if (!strcmp(name, "output.weight"))
        return CAT_OUTPUT;
    if (!strcmp(name, "token_embd.weight"))
        return CAT_TOKEN_EMBD;
    if (strstr(name, "attn_v.weight") || strstr(name, "attn_qkv.weight"))
        return CAT_ATTN_V;
    if (strstr(name, "attn_k.weight"))
        return CAT_ATTN_K;
    if (strstr(name, "attn_output.weight"))
        return CAT_ATTN_OUT;
    if (strstr(name, "ffn_up") || strstr(name, "ffn_gate"))
        return CAT_OTHER;
    if (strstr(name, "ffn_down"))
        return CAT_FFN_DOWN;
    return CAT_OTHER;
}

void synth_mix_count(struct synth_mix *m, const char *name) {
    enum category c = categorize(name);
    if (c == CAT_ATTN_V)
        m->n_attention_wv++;
    if (c == CAT_OUTPUT)
        m->has_output = true;
}

/* llama.cpp tensor_allows_quantization, for the names strata's archs have. */
static bool allows_quantization(const char *name, uint32_t n_dims) {
    size_t n = strlen(name);
    if (n_dims < 2 || n < 6 || strcmp(name + n - 6, "weight"))
        return false;
    return !strstr(name, "_norm.weight") && !strstr(name, "ffn_gate_inp.weight");
}

static bool use_more_bits(int64_t i, int64_t n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static uint32_t choose(struct synth_mix *m, const char *name, const int64_t *ne, uint32_t t) {
    enum category c = categorize(name);
    int ft = m->ftype;
    if (c == CAT_OUTPUT || (!m->has_output && c == CAT_TOKEN_EMBD)) {
        const struct quant_traits *tr = quant_type_traits(t);
        if (ft == FTYPE_MXFP4_MOE || ne[0] % tr->block_size)
            return QUANT_Q8_0;
        return t != QUANT_Q8_0 ? QUANT_Q6_K : t;
    }
    if (ft == FTYPE_MXFP4_MOE)
        return ne[2] > 1 ? QUANT_MXFP4 : QUANT_Q8_0;
    if (c == CAT_ATTN_V) {
        if ((ft == FTYPE_Q4_K_M || ft == FTYPE_Q5_K_M) &&
            use_more_bits(m->i_attention_wv, m->n_attention_wv))
            t = QUANT_Q6_K;
        else if (ft == FTYPE_Q4_K_S && m->i_attention_wv < 4)
            t = QUANT_Q5_K;
        if (m->n_expert == 8)
            t = QUANT_Q8_0;
        m->i_attention_wv++;
    } else if (c == CAT_ATTN_K) {
        if (m->n_expert == 8)
            t = QUANT_Q8_0;
    } else if (c == CAT_FFN_DOWN) {
        int64_t i_layer = m->i_ffn_down, n_layer = m->n_layer;
        int parsed;
        if (m->n_expert > 1 && sscanf(name, "blk.%d.", &parsed) == 1)
            i_layer = parsed; /* llama.cpp parses the name for MoE models */
        if (ft == FTYPE_Q4_K_M && use_more_bits(i_layer, n_layer))
            t = QUANT_Q6_K;
        else if (ft == FTYPE_Q5_K_M && use_more_bits(i_layer, n_layer))
            t = QUANT_Q6_K;
        else if (ft == FTYPE_Q4_K_S && i_layer < n_layer / 8)
            t = QUANT_Q5_K;
        m->i_ffn_down++;
    } else if (c == CAT_ATTN_OUT) {
        if (m->n_expert == 8 && (ft == FTYPE_Q4_K_S || ft == FTYPE_Q4_K_M))
            t = QUANT_Q5_K;
    }
    return t;
}

/* llama.cpp tensor_type_fallback; F16 where llama.cpp would throw. */
static uint32_t fallback(struct synth_mix *m, int64_t ncols, uint32_t t) {
    const struct quant_traits *tr = quant_type_traits(t);
    if (ncols % tr->block_size == 0)
        return t;
    m->n_fallback++;
    uint32_t r;
    switch (t) {
    case QUANT_IQ4_XS:
        r = QUANT_IQ4_NL;
        break;
    case QUANT_Q2_K:
    case QUANT_Q3_K:
        r = QUANT_Q4_0;
        break;
    case QUANT_Q4_K:
        r = QUANT_Q5_0;
        break;
    case QUANT_Q5_K:
        r = QUANT_Q5_1;
        break;
    case QUANT_Q6_K:
        r = QUANT_Q8_0;
        break;
    default:
        r = QUANT_F16;
        break;
    }
    if (ncols % quant_type_traits(r)->block_size)
        r = QUANT_F16;
    return r;
}

uint32_t synth_mix_type(struct synth_mix *m, const char *name, uint32_t n_dims, const int64_t *ne,
                        uint32_t src_type) {
    if (!allows_quantization(name, n_dims))
        return src_type;
    uint32_t t = m->default_type;
    if (is_quantized(t)) {
        if (!m->pure)
            t = choose(m, name, ne, t);
        t = fallback(m, ne[0], t);
    }
    return t;
}
