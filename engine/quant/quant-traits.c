/* engine/quant/quant-traits.c: the type table (see quant.h). */
#include "engine/quant/quant.h"

#include <strings.h>

#define T(id, nm, bs, sz, dq, q, vd) [id] = {nm, bs, sz, true, dq, q, vd}

/* can_dequantize / can_quantize mark what quant.c implements; keep in sync. */
static const struct quant_traits quant_table[QUANT_TYPE_COUNT] = {
    T(QUANT_F32, "f32", 1, 4, true, true, QUANT_F32),
    T(QUANT_F16, "f16", 1, 2, true, true, QUANT_F16),
    T(QUANT_Q4_0, "q4_0", QK4_0, sizeof(block_q4_0), true, true, QUANT_Q8_0),
    T(QUANT_Q4_1, "q4_1", QK4_1, sizeof(block_q4_1), true, true, QUANT_Q8_1),
    T(QUANT_Q5_0, "q5_0", QK5_0, sizeof(block_q5_0), true, true, QUANT_Q8_0),
    T(QUANT_Q5_1, "q5_1", QK5_1, sizeof(block_q5_1), true, true, QUANT_Q8_1),
    T(QUANT_Q8_0, "q8_0", QK8_0, sizeof(block_q8_0), true, true, QUANT_Q8_0),
    T(QUANT_Q8_1, "q8_1", QK8_1, sizeof(block_q8_1), true, true, QUANT_Q8_1),
    T(QUANT_Q2_K, "q2_K", QK_K, sizeof(block_q2_K), true, true, QUANT_Q8_K),
    T(QUANT_Q3_K, "q3_K", QK_K, sizeof(block_q3_K), true, true, QUANT_Q8_K),
    T(QUANT_Q4_K, "q4_K", QK_K, sizeof(block_q4_K), true, true, QUANT_Q8_K),
    T(QUANT_Q5_K, "q5_K", QK_K, sizeof(block_q5_K), true, true, QUANT_Q8_K),
    T(QUANT_Q6_K, "q6_K", QK_K, sizeof(block_q6_K), true, true, QUANT_Q8_K),
    T(QUANT_Q8_K, "q8_K", QK_K, sizeof(block_q8_K), true, true, QUANT_Q8_K),
    T(QUANT_IQ2_XXS, "iq2_xxs", QK_K, 66, false, false, QUANT_Q8_K),
    T(QUANT_IQ2_XS, "iq2_xs", QK_K, 74, false, false, QUANT_Q8_K),
    T(QUANT_IQ3_XXS, "iq3_xxs", QK_K, 98, false, false, QUANT_Q8_K),
    T(QUANT_IQ1_S, "iq1_s", QK_K, 50, false, false, QUANT_Q8_K),
    T(QUANT_IQ4_NL, "iq4_nl", QK4_NL, sizeof(block_iq4_nl), true, true, QUANT_Q8_0),
    T(QUANT_IQ3_S, "iq3_s", QK_K, 110, false, false, QUANT_Q8_K),
    T(QUANT_IQ2_S, "iq2_s", QK_K, 82, false, false, QUANT_Q8_K),
    T(QUANT_IQ4_XS, "iq4_xs", QK_K, sizeof(block_iq4_xs), true, true, QUANT_Q8_K),
    T(QUANT_I8, "i8", 1, 1, false, false, QUANT_I8),
    T(QUANT_I16, "i16", 1, 2, false, false, QUANT_I16),
    T(QUANT_I32, "i32", 1, 4, false, false, QUANT_I32),
    T(QUANT_I64, "i64", 1, 8, false, false, QUANT_I64),
    T(QUANT_F64, "f64", 1, 8, false, false, QUANT_F64),
    T(QUANT_IQ1_M, "iq1_m", QK_K, 56, false, false, QUANT_Q8_K),
    T(QUANT_BF16, "bf16", 1, 2, true, true, QUANT_BF16),
    T(QUANT_TQ1_0, "tq1_0", QK_K, 54, false, false, QUANT_Q8_K),
    T(QUANT_TQ2_0, "tq2_0", QK_K, 66, false, false, QUANT_Q8_K),
    T(QUANT_MXFP4, "mxfp4", QK_MXFP4, sizeof(block_mxfp4), true, true, QUANT_Q8_0),
};

const struct quant_traits *quant_type_traits(uint32_t type) {
    if (type >= QUANT_TYPE_COUNT || !quant_table[type].known)
        return NULL;
    return &quant_table[type];
}

const char *quant_type_name(uint32_t type) {
    const struct quant_traits *t = quant_type_traits(type);
    return t ? t->name : "?";
}

int quant_type_from_name(const char *name) {
    for (int i = 0; i < QUANT_TYPE_COUNT; i++)
        if (quant_table[i].known && strcasecmp(quant_table[i].name, name) == 0)
            return i;
    return -1;
}

size_t quant_row_size(enum quant_type t, int64_t n) {
    const struct quant_traits *tr = quant_type_traits((uint32_t)t);
    if (!tr || n < 0 || n % tr->block_size)
        return 0;
    return (size_t)(n / tr->block_size) * tr->type_size;
}
