/* tests/engine/quant/test-quant.c: engine/quant*.c against ggml's own outputs
 * (../shared/fixtures/quant, computed by ggml at llama.cpp b4748) and against
 * properties where no fixture exists (MXFP4, f16/bf16 edge cases, traits).
 *
 * Per fixture type: the input and activation are regenerated from the
 * manifest's xorshift32 recipe and must equal <T>.input.f32 / <T>.act.f32 bit
 * for bit; then our quantizer must reproduce <T>.quant.bin, our dequantizer
 * <T>.dequant.f32, our activation quantizer <T>.act_q.bin (all byte-exact),
 * and quant_vec_dot_ref must be within a named tolerance of ggml's SIMD dot
 * (<T>.dot.f32) and of dot_exact_f64.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>

#include "engine/core/error.h"
#include "engine/quant/quant.h"
#include "tests/harness.h"

#define FIX_ROWS 4
#define FIX_COLS 512

/* ---- tolerances (relative, on |reference|) ---------------------------------------
 * vs <T>.dot.f32 (ggml's AVX-512 kernel on the same blocks): both sides add the
 * same exact integer block sums scaled in f32, only the f32 summation order
 * differs (<= 16 blocks a row, each rounding ~6e-8; row sums cancel up to ~50x
 * in this fixture): 2e-5 covers it. Measured max: see the `dot` lines printed. */
#define TOL_DOT_SIMD 2e-5
/* F16/BF16: products summed in f64 by us, in f32 lanes by ggml over 512
 * terms; the manifest reports < 1e-6 between two ggml builds. */
#define TOL_DOT_SIMD_FLOAT 1e-5
/* vs dot_exact_f64 (f64 sum of dequant(w) * dequant(act_q)): the same
 * rounding argument as above gives 2e-5 for types whose dot is exactly that sum
 * up to f32 rounding. */
#define TOL_DOT_EXACT 2e-5
/* Q4_1/Q5_1 x Q8_1: the min term uses s = d*sum(q) stored in f16 (relative
 * error up to 2^-11 = 4.9e-4 per block), and m*s can be ~50x the row's dot;
 * ggml's dot has the same error (manifest: -16.2086 vs exact -16.1884,
 * 1.2e-3). So vs the f64 sum we allow 5e-3; vs ggml's dot TOL_DOT_SIMD still holds. */
#define TOL_DOT_EXACT_Q8_1 5e-3

struct fixture_type {
    const char *name;
    enum quant_type type;
    enum quant_type act_type;
};

static const struct fixture_type fixture_types[] = {
    {"Q4_0", QUANT_Q4_0, QUANT_Q8_0},     {"Q4_1", QUANT_Q4_1, QUANT_Q8_1},
    {"Q5_0", QUANT_Q5_0, QUANT_Q8_0},     {"Q5_1", QUANT_Q5_1, QUANT_Q8_1},
    {"Q8_0", QUANT_Q8_0, QUANT_Q8_0},     {"Q2_K", QUANT_Q2_K, QUANT_Q8_K},
    {"Q3_K", QUANT_Q3_K, QUANT_Q8_K},     {"Q4_K", QUANT_Q4_K, QUANT_Q8_K},
    {"Q5_K", QUANT_Q5_K, QUANT_Q8_K},     {"Q6_K", QUANT_Q6_K, QUANT_Q8_K},
    {"IQ4_NL", QUANT_IQ4_NL, QUANT_Q8_0}, {"IQ4_XS", QUANT_IQ4_XS, QUANT_Q8_K},
    {"F16", QUANT_F16, QUANT_F16},        {"BF16", QUANT_BF16, QUANT_BF16},
};
#define N_FIXTURE_TYPES ((int)(sizeof fixture_types / sizeof fixture_types[0]))

/* ---- the manifest's recipe ---------------------------------------------------------- */

static uint32_t xorshift32(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* r = 2u - 1, u = (s >> 8) / 2^24: exact in f32, in [-1, 1). */
static float draw(uint32_t *s) {
    float u = (float)(xorshift32(s) >> 8) / 16777216.0f;
    return 2 * u - 1;
}

static void make_input(float *x /* (4, 512) */) {
    static const float rowscale[FIX_ROWS] = {1.0f, 0.03125f, 50.0f, 1.0f};
    uint32_t s = 0x2545F491u;
    for (int r = 0; r < FIX_ROWS; r++) {
        for (int i = 0; i < FIX_COLS; i++) {
            float rd = draw(&s);
            float bs = ldexpf(1.0f, (i / 32) % 5 - 2);
            float sc = rowscale[r] * bs;
            float v = rd * sc;
            if (r == 1 && i % 61 == 17)
                v *= 24;
            if (r == 2) {
                if (i >= 160 && i < 192)
                    v = -fabsf(v);
                else if (i >= 192 && i < 224)
                    v = fabsf(v) + 3 * sc;
                else if (i >= 288 && i < 320)
                    v = 0.75f * rowscale[r];
            }
            if (r == 3) {
                if (i % 7 == 0)
                    v = 0;
                if (i >= 256)
                    v = 0;
                if (i == 3)
                    v = 1000.0f;
                if (i == 100)
                    v = -500.0f;
            }
            x[r * FIX_COLS + i] = v;
        }
    }
}

static void make_activation(float *a /* (512) */) {
    uint32_t s = 0x9E3779B9u;
    for (int i = 0; i < FIX_COLS; i++)
        a[i] = draw(&s) * ldexpf(1.0f, (i / 64) % 4 - 1);
}

/* ---- helpers -------------------------------------------------------------------------- */

static void *fixture_file(const char *type, const char *kind, size_t *size) {
    char rel[256], path[1024];
    snprintf(rel, sizeof rel, "fixtures/quant/%s.%s", type, kind);
    test_shared_path(path, sizeof path, rel);
    void *p = test_read_file(path, size);
    ck_assert_msg(p != NULL, "missing shared file %s (set STRATA_SHARED_DIR)", path);
    return p;
}

static json_t *manifest_type(json_t *root, const char *name) {
    json_t *types = json_object_get(root, "types");
    size_t i;
    json_t *t;
    json_array_foreach(types, i, t) {
        if (strcmp(json_string_value(json_object_get(t, "name")), name) == 0)
            return t;
    }
    return NULL;
}

static json_t *load_manifest(void) {
    char path[1024];
    test_shared_path(path, sizeof path, "fixtures/quant/manifest.json");
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    ck_assert_msg(root != NULL, "cannot read %s: %s", path, jerr.text);
    return root;
}

static int first_diff(const void *a, const void *b, size_t n) {
    const uint8_t *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i])
            return (int)i;
    return -1;
}

static double rel_err(double got, double want) {
    double den = fabs(want) > 1e-30 ? fabs(want) : 1.0;
    return fabs(got - want) / den;
}

/* ---- fixture tests (one per type) ----------------------------------------------------- */

START_TEST(test_fixture) {
    const struct fixture_type *ft = &fixture_types[_i];
    json_t *root = load_manifest();
    json_t *mt = manifest_type(root, ft->name);
    ck_assert_msg(mt != NULL, "%s not in manifest", ft->name);
    ck_assert_int_eq(json_integer_value(json_object_get(mt, "ggml_type_id")), ft->type);
    ck_assert_int_eq(json_integer_value(json_object_get(mt, "vec_dot_type_id")), ft->act_type);

    const size_t row_bytes = quant_row_size(ft->type, FIX_COLS);
    const size_t act_bytes = quant_row_size(ft->act_type, FIX_COLS);
    ck_assert_uint_eq(row_bytes, (size_t)json_integer_value(json_object_get(mt, "bytes_per_row")));
    ck_assert_uint_eq(act_bytes, (size_t)json_integer_value(json_object_get(mt, "act_q_bytes")));

    size_t sz;
    float *in = fixture_file(ft->name, "input.f32", &sz);
    ck_assert_uint_eq(sz, FIX_ROWS * FIX_COLS * sizeof(float));
    uint8_t *qref = fixture_file(ft->name, "quant.bin", &sz);
    ck_assert_uint_eq(sz, FIX_ROWS * row_bytes);
    float *dqref = fixture_file(ft->name, "dequant.f32", &sz);
    ck_assert_uint_eq(sz, FIX_ROWS * FIX_COLS * sizeof(float));
    float *actin = fixture_file(ft->name, "act.f32", &sz);
    ck_assert_uint_eq(sz, FIX_COLS * sizeof(float));
    uint8_t *aqref = fixture_file(ft->name, "act_q.bin", &sz);
    ck_assert_uint_eq(sz, act_bytes);
    float *dotref = fixture_file(ft->name, "dot.f32", &sz);
    ck_assert_uint_eq(sz, FIX_ROWS * sizeof(float));

    /* the recipe reproduces the stored inputs exactly */
    float x[FIX_ROWS * FIX_COLS], act[FIX_COLS];
    make_input(x);
    make_activation(act);
    int d = first_diff(x, in, sizeof x);
    ck_assert_msg(d < 0, "%s: regenerated input differs at byte %d", ft->name, d);
    d = first_diff(act, actin, sizeof act);
    ck_assert_msg(d < 0, "%s: regenerated activation differs at byte %d", ft->name, d);

    /* quantize: byte-exact, rows quantized one by one (ggml did all at once) */
    uint8_t *q = calloc(FIX_ROWS, row_bytes);
    for (int r = 0; r < FIX_ROWS; r++)
        ck_assert_int_eq(
            quant_quantize_row(ft->type, x + r * FIX_COLS, q + r * row_bytes, FIX_COLS), 0);
    d = first_diff(q, qref, FIX_ROWS * row_bytes);
    ck_assert_msg(d < 0, "%s: quantized bytes differ at %d (row %d, byte %zu): got %02x want %02x",
                  ft->name, d, d < 0 ? 0 : (int)(d / row_bytes), d < 0 ? 0 : d % row_bytes,
                  d < 0 ? 0 : q[d], d < 0 ? 0 : qref[d]);

    /* dequantize ggml's blocks: bit-exact */
    float y[FIX_ROWS * FIX_COLS];
    for (int r = 0; r < FIX_ROWS; r++)
        ck_assert_int_eq(
            quant_dequantize_row(ft->type, qref + r * row_bytes, y + r * FIX_COLS, FIX_COLS), 0);
    d = first_diff(y, dqref, sizeof y);
    ck_assert_msg(d < 0, "%s: dequantized value %d differs: got %.9g want %.9g", ft->name, d / 4,
                  d < 0 ? 0.0 : y[d / 4], d < 0 ? 0.0 : dqref[d / 4]);

    /* activation in vec_dot_type: byte-exact */
    uint8_t *aq = calloc(1, act_bytes);
    ck_assert_int_eq(quant_quantize_row(ft->act_type, act, aq, FIX_COLS), 0);
    d = first_diff(aq, aqref, act_bytes);
    ck_assert_msg(d < 0, "%s: activation bytes differ at %d", ft->name, d);

    /* dots: vs ggml's kernel and vs the f64 sum of the dequantized operands */
    float adq[FIX_COLS];
    ck_assert_int_eq(quant_dequantize_row(ft->act_type, aq, adq, FIX_COLS), 0);
    json_t *exact = json_object_get(mt, "dot_exact_f64");
    bool q8_1 = ft->act_type == QUANT_Q8_1;
    bool plain = ft->type == QUANT_F16 || ft->type == QUANT_BF16;
    double tol_simd = plain ? TOL_DOT_SIMD_FLOAT : TOL_DOT_SIMD;
    double tol_exact = q8_1 ? TOL_DOT_EXACT_Q8_1 : TOL_DOT_EXACT;
    double worst_simd = 0, worst_exact = 0;
    for (int r = 0; r < FIX_ROWS; r++) {
        float got = quant_vec_dot_ref(ft->type, FIX_COLS, q + r * row_bytes, aq);
        double ex = json_real_value(json_array_get(exact, (size_t)r));
        double mine = 0; /* our own f64 sum: must be ggml's dot_exact (same data) */
        for (int i = 0; i < FIX_COLS; i++)
            mine += (double)y[r * FIX_COLS + i] * (double)adq[i];
        ck_assert_msg(rel_err(mine, ex) < 1e-12, "%s row %d: f64 sum %.17g vs manifest %.17g",
                      ft->name, r, mine, ex);
        double es = rel_err(got, dotref[r]), ee = rel_err(got, ex);
        worst_simd = fmax(worst_simd, es);
        worst_exact = fmax(worst_exact, ee);
        ck_assert_msg(es <= tol_simd, "%s row %d: dot %.9g vs ggml %.9g (rel %.3g > %.3g)",
                      ft->name, r, got, dotref[r], es, tol_simd);
        ck_assert_msg(ee <= tol_exact, "%s row %d: dot %.9g vs exact %.9g (rel %.3g > %.3g)",
                      ft->name, r, got, ex, ee, tol_exact);
    }
    printf("quant %-6s: bytes, dequant, act_q exact; dot rel err max %.2e vs ggml, %.2e vs f64\n",
           ft->name, worst_simd, worst_exact);

    free(aq);
    free(q);
    free(in);
    free(qref);
    free(dqref);
    free(actin);
    free(aqref);
    free(dotref);
    json_decref(root);
}
END_TEST

/* ---- f16 / bf16 ------------------------------------------------------------------------- */

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

START_TEST(test_f16_edges) {
    ck_assert_uint_eq(quant_f32_to_f16(0.0f), 0x0000);
    ck_assert_uint_eq(quant_f32_to_f16(-0.0f), 0x8000);
    ck_assert_uint_eq(quant_f32_to_f16(1.0f), 0x3c00);
    ck_assert_uint_eq(quant_f32_to_f16(-2.0f), 0xc000);
    ck_assert_uint_eq(quant_f32_to_f16(65504.0f), 0x7bff);
    ck_assert_uint_eq(quant_f32_to_f16(65519.99f), 0x7bff); /* below the midpoint */
    ck_assert_uint_eq(quant_f32_to_f16(65520.0f), 0x7c00);  /* tie to even: inf */
    ck_assert_uint_eq(quant_f32_to_f16(INFINITY), 0x7c00);
    ck_assert_uint_eq(quant_f32_to_f16(-INFINITY), 0xfc00);
    ck_assert_uint_eq(quant_f32_to_f16(NAN), 0x7e00);
    ck_assert_uint_eq(quant_f32_to_f16(-NAN), 0xfe00);
    ck_assert_uint_eq(quant_f32_to_f16(0x1p-24f), 0x0001);            /* smallest subnormal */
    ck_assert_uint_eq(quant_f32_to_f16(0x1p-25f), 0x0000);            /* tie to even: 0 */
    ck_assert_uint_eq(quant_f32_to_f16(0x1.8p-24f), 0x0002);          /* 1.5 units: tie to 2 */
    ck_assert_uint_eq(quant_f32_to_f16(0x1p-14f), 0x0400);            /* smallest normal */
    ck_assert_uint_eq(quant_f32_to_f16(0x1.ff8p-15f), 0x03ff);        /* largest subnormal */
    ck_assert_uint_eq(quant_f32_to_f16(0x1.ffcp-15f), 0x0400);        /* tie: up into normals */
    ck_assert_uint_eq(quant_f32_to_f16(0x1.ffap-15f), 0x03ff);        /* below the tie */
    ck_assert_uint_eq(quant_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);     /* tie: even */
    ck_assert_uint_eq(quant_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02); /* tie: even up */
    ck_assert_uint_eq(quant_f32_to_f16(u2f(0x3f801001u)), 0x3c01);    /* above tie */
    ck_assert_uint_eq(quant_f32_to_f16(0x1p-149f), 0x0000);           /* f32 subnormal */
    ck_assert(isnan(quant_f16_to_f32(0x7e00)));
    ck_assert(isinf(quant_f16_to_f32(0xfc00)) && quant_f16_to_f32(0xfc00) < 0);
    ck_assert(quant_f16_to_f32(0x0001) == 0x1p-24f);
    ck_assert(quant_f16_to_f32(0x83ff) == -0x1.ff8p-15f);
    ck_assert(quant_f16_to_f32(0x7bff) == 65504.0f);
    ck_assert_uint_eq(f2u(quant_f16_to_f32(0x8000)), 0x80000000u);
}
END_TEST

/* Every f16 value round-trips; every non-NaN f32 pattern on a fine stride
 * converts like the compiler's own _Float16 conversion (IEEE round to nearest
 * even), where the compiler has one. */
START_TEST(test_f16_exhaustive) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = quant_f16_to_f32((quant_f16)h);
        if (isnan(f))
            ck_assert_uint_eq(quant_f32_to_f16(f), (h & 0x8000) | 0x7e00);
        else
            ck_assert_msg(quant_f32_to_f16(f) == h, "f16 %04x does not round-trip", h);
    }
#ifdef __FLT16_MAX__
    for (uint64_t u = 0; u <= 0xffffffffu; u += 4093) {
        float f = u2f((uint32_t)u);
        if (isnan(f))
            continue;
        _Float16 h = (_Float16)f;
        uint16_t want;
        memcpy(&want, &h, 2);
        ck_assert_msg(quant_f32_to_f16(f) == want, "f32 %08x: got %04x want %04x", (unsigned)u,
                      quant_f32_to_f16(f), want);
    }
#endif
}
END_TEST

START_TEST(test_bf16) {
    ck_assert_uint_eq(quant_f32_to_bf16(1.0f), 0x3f80);
    ck_assert_uint_eq(quant_f32_to_bf16(u2f(0x3f808000u)), 0x3f80); /* tie, even stays */
    ck_assert_uint_eq(quant_f32_to_bf16(u2f(0x3f818000u)), 0x3f82); /* tie, odd goes up */
    ck_assert_uint_eq(quant_f32_to_bf16(u2f(0x3f808001u)), 0x3f81);
    ck_assert_uint_eq(quant_f32_to_bf16(INFINITY), 0x7f80);
    ck_assert_uint_eq(quant_f32_to_bf16(u2f(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds to inf */
    ck_assert_uint_eq(quant_f32_to_bf16(u2f(0x7f800001u)), 0x7fc0); /* signalling -> quiet */
    ck_assert_uint_eq(quant_f32_to_bf16(u2f(0xff800001u)), 0xffc0);
    ck_assert_uint_eq(quant_f32_to_bf16(u2f(0x00010000u)), 0x0001); /* subnormal kept */
    ck_assert(quant_bf16_to_f32(0xc0a0) == -5.0f);
    for (uint32_t h = 0; h < 65536; h++) {
        float f = quant_bf16_to_f32((uint16_t)h);
        if (!isnan(f))
            ck_assert_uint_eq(quant_f32_to_bf16(f), h);
    }
}
END_TEST

/* ---- traits and row sizes for every type id ----------------------------------------------- */

START_TEST(test_traits) {
    static const struct {
        enum quant_type t;
        int64_t bs;
        size_t ts;
    } want[] = {
        {QUANT_F32, 1, 4},        {QUANT_F16, 1, 2},        {QUANT_BF16, 1, 2},
        {QUANT_Q4_0, 32, 18},     {QUANT_Q4_1, 32, 20},     {QUANT_Q5_0, 32, 22},
        {QUANT_Q5_1, 32, 24},     {QUANT_Q8_0, 32, 34},     {QUANT_Q8_1, 32, 36},
        {QUANT_Q2_K, 256, 84},    {QUANT_Q3_K, 256, 110},   {QUANT_Q4_K, 256, 144},
        {QUANT_Q5_K, 256, 176},   {QUANT_Q6_K, 256, 210},   {QUANT_Q8_K, 256, 292},
        {QUANT_IQ4_NL, 32, 18},   {QUANT_IQ4_XS, 256, 136}, {QUANT_MXFP4, 32, 17},
        {QUANT_IQ2_XXS, 256, 66}, {QUANT_IQ2_XS, 256, 74},  {QUANT_IQ3_XXS, 256, 98},
        {QUANT_IQ1_S, 256, 50},   {QUANT_IQ3_S, 256, 110},  {QUANT_IQ2_S, 256, 82},
        {QUANT_IQ1_M, 256, 56},   {QUANT_TQ1_0, 256, 54},   {QUANT_TQ2_0, 256, 66},
        {QUANT_I8, 1, 1},         {QUANT_I16, 1, 2},        {QUANT_I32, 1, 4},
        {QUANT_I64, 1, 8},        {QUANT_F64, 1, 8},
    };
    int n_known = 0;
    for (uint32_t id = 0; id < QUANT_TYPE_COUNT + 2; id++) {
        const struct quant_traits *tr = quant_type_traits(id);
        if (!tr) {
            ck_assert_str_eq(quant_type_name(id), "?");
            ck_assert_uint_eq(quant_row_size((enum quant_type)id, 256), 0);
            continue;
        }
        n_known++;
        ck_assert_int_eq(quant_type_from_name(tr->name), (int)id);
        size_t rs = quant_row_size((enum quant_type)id, 256 * tr->block_size);
        ck_assert_uint_eq(rs, 256 * tr->type_size);
        if (tr->block_size > 1)
            ck_assert_uint_eq(quant_row_size((enum quant_type)id, tr->block_size + 1), 0);
        ck_assert_uint_eq(quant_row_size((enum quant_type)id, -tr->block_size), 0);
        /* the flags say exactly what the functions do */
        float in[512] = {0}, out[512];
        uint8_t blocks[512 * 8];
        int64_t n = 2 * (tr->block_size > 256 ? 1 : 256);
        int rq = quant_quantize_row((enum quant_type)id, in, blocks, n);
        ck_assert_msg(tr->can_quantize ? rq == 0 : rq == STRATA_E_UNSUPPORTED, "%s quantize %d",
                      tr->name, rq);
        int rd = quant_dequantize_row((enum quant_type)id, blocks, out, n);
        ck_assert_msg(tr->can_dequantize ? rd == 0 : rd == STRATA_E_UNSUPPORTED, "%s dequantize %d",
                      tr->name, rd);
        if (tr->can_quantize && tr->can_dequantize) {
            for (int i = 0; i < n; i++)
                ck_assert_msg(out[i] == 0.0f, "%s: zeros do not round-trip", tr->name);
        }
    }
    ck_assert_int_eq(n_known, 32);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const struct quant_traits *tr = quant_type_traits(want[i].t);
        ck_assert_ptr_nonnull(tr);
        ck_assert_int_eq(tr->block_size, want[i].bs);
        ck_assert_uint_eq(tr->type_size, want[i].ts);
    }
    ck_assert_uint_eq(quant_row_size(QUANT_Q4_0, 4096), 2304);
    ck_assert_int_eq(quant_type_from_name("Q4_k"), QUANT_Q4_K);
    ck_assert_int_eq(quant_type_from_name("nope"), -1);
    ck_assert_int_eq(quant_type_traits(QUANT_Q4_K)->vec_dot_type, QUANT_Q8_K);
    ck_assert_int_eq(quant_type_traits(QUANT_Q5_1)->vec_dot_type, QUANT_Q8_1);
    ck_assert_int_eq(quant_type_traits(QUANT_MXFP4)->vec_dot_type, QUANT_Q8_0);
}
END_TEST

START_TEST(test_errors) {
    float x[64] = {0}, y[64];
    uint8_t b[256];
    ck_assert_int_eq(quant_quantize_row(QUANT_Q4_0, x, b, 33), STRATA_E_INVALID);
    ck_assert_int_eq(quant_dequantize_row(QUANT_Q4_0, b, y, 31), STRATA_E_INVALID);
    ck_assert_int_eq(quant_quantize_row(QUANT_IQ2_XXS, x, b, 256), STRATA_E_UNSUPPORTED);
    ck_assert_int_eq(quant_quantize_row((enum quant_type)4, x, b, 32), STRATA_E_UNSUPPORTED);
    ck_assert_int_eq(quant_quantize_row((enum quant_type)200, x, b, 32), STRATA_E_UNSUPPORTED);
    ck_assert(isnan(quant_vec_dot_ref(QUANT_IQ1_S, 256, b, b)));
    ck_assert(isnan(quant_vec_dot_ref(QUANT_Q8_0, 33, b, b)));
    /* non-finite input: defined output, no sanitizer report */
    x[0] = NAN;
    x[1] = INFINITY;
    x[2] = -INFINITY;
    static const enum quant_type all[] = {QUANT_Q4_0, QUANT_Q4_1, QUANT_Q5_0,   QUANT_Q5_1,
                                          QUANT_Q8_0, QUANT_Q8_1, QUANT_IQ4_NL, QUANT_MXFP4};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ck_assert_int_eq(quant_quantize_row(all[i], x, b, 64), 0);
}
END_TEST

/* Hostile inputs for every quantizer (nan, inf, f32 extremes, subnormals,
 * all-tiny groups): no sanitizer report, no crash, and the dequantized
 * output of a finite block stays finite where the type can represent it. */
START_TEST(test_hostile_inputs) {
    enum { N = 1024 };
    static float x[N], y[N];
    static uint8_t blocks[N * 4 + 1024];
    static const float specials[] = {NAN, INFINITY, -INFINITY, 3e38f, -3e38f, 1e-40f, -1e-45f, 0};
    uint32_t s = 31337;
    for (uint32_t id = 0; id < QUANT_TYPE_COUNT; id++) {
        const struct quant_traits *tr = quant_type_traits(id);
        if (!tr || !tr->can_quantize)
            continue;
        for (int k = 0; k < 4; k++) {
            for (int i = 0; i < N; i++) {
                float v = draw(&s);
                if (k == 0) /* sprinkled specials */
                    v = (i % 37 == 0) ? specials[(i / 37) % 8] : v;
                else if (k == 1) /* all tiny: below the groups' 1e-15 threshold */
                    v *= 1e-20f;
                else if (k == 2) /* near FLT_MAX */
                    v *= 3.4e38f;
                else /* subnormal scales */
                    v *= 1e-39f;
                x[i] = v;
            }
            ck_assert_int_eq(quant_quantize_row((enum quant_type)id, x, blocks, N), 0);
            ck_assert_int_eq(quant_dequantize_row((enum quant_type)id, blocks, y, N), 0);
        }
        /* an ordinary block still round-trips finitely after the others */
        for (int i = 0; i < N; i++)
            x[i] = draw(&s);
        ck_assert_int_eq(quant_quantize_row((enum quant_type)id, x, blocks, N), 0);
        ck_assert_int_eq(quant_dequantize_row((enum quant_type)id, blocks, y, N), 0);
        for (int i = 0; i < N; i++)
            ck_assert_msg(isfinite(y[i]) && fabsf(y[i] - x[i]) < 1.0f, "%s: %g -> %g", tr->name,
                          x[i], y[i]);
    }
}
END_TEST

/* ---- MXFP4 (no ggml fixture: properties) ------------------------------------------------- */

static const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};

START_TEST(test_mxfp4_layout) {
    /* element j (< 16) in the low nibble of qs[j], element j + 16 in the high
     * nibble; codes 0-7 positive E2M1, 8-15 negative; scale 2^(e-127) */
    block_mxfp4 b;
    b.e = 127; /* unit 1.0 */
    for (int j = 0; j < 16; j++)
        b.qs[j] = (uint8_t)((j & 0xf) | ((15 - j) << 4));
    float y[32];
    ck_assert_int_eq(quant_dequantize_row(QUANT_MXFP4, &b, y, 32), 0);
    for (int j = 0; j < 16; j++) {
        float lo = j < 8 ? e2m1[j] : -e2m1[j - 8];
        int c = 15 - j;
        float hi = c < 8 ? e2m1[c] : -e2m1[c - 8];
        ck_assert_msg(y[j] == lo, "element %d: %g want %g", j, y[j], lo);
        ck_assert_msg(y[j + 16] == hi, "element %d: %g want %g", j + 16, y[j + 16], hi);
    }
    b.e = 130; /* unit 8 */
    ck_assert_int_eq(quant_dequantize_row(QUANT_MXFP4, &b, y, 32), 0);
    ck_assert(y[7] == 48.0f && y[16] == -48.0f);
    b.e = 0; /* 2^-127: subnormal f32 scale */
    ck_assert_int_eq(quant_dequantize_row(QUANT_MXFP4, &b, y, 32), 0);
    ck_assert(y[2] == 0x1p-127f);
}
END_TEST

START_TEST(test_mxfp4_exact) {
    /* blocks made of representable values round-trip exactly, for several
     * exponents (the largest magnitude 6 * 2^p fixes e = p + 127) */
    static const int pw[] = {-20, -3, 0, 1, 7, 40};
    uint32_t s = 12345;
    for (size_t k = 0; k < sizeof pw / sizeof pw[0]; k++) {
        float x[64], y[64];
        for (int i = 0; i < 64; i++) {
            int c = (int)(xorshift32(&s) % 16);
            float v = c < 8 ? e2m1[c] : -e2m1[c - 8];
            x[i] = ldexpf(v, pw[k]);
        }
        x[5] = ldexpf(-6.0f, pw[k]);
        x[40] = ldexpf(6.0f, pw[k]);
        block_mxfp4 b[2];
        ck_assert_int_eq(quant_quantize_row(QUANT_MXFP4, x, b, 64), 0);
        ck_assert_int_eq(b[0].e, pw[k] + 127);
        ck_assert_int_eq(quant_dequantize_row(QUANT_MXFP4, b, y, 64), 0);
        for (int i = 0; i < 64; i++)
            ck_assert_msg(x[i] == y[i], "p=%d i=%d: %g -> %g", pw[k], i, x[i], y[i]);
    }
}
END_TEST

START_TEST(test_mxfp4_roundtrip) {
    /* random blocks spanning magnitudes: each element goes to the nearest
     * representable value at the block's scale (ties to the lower code), so the
     * error is at most half the local gap (<= unit, the 4..6 gap is 2 units)
     * except above 6 units, clipped (< 2 units since amax < 8 units) */
    enum { N = 32 * 64 };
    static float x[N], y[N];
    uint32_t s = 777;
    for (int i = 0; i < N; i++)
        x[i] = draw(&s) * ldexpf(1.0f, (i / 32) % 24 - 12);
    static block_mxfp4 b[N / 32];
    ck_assert_int_eq(quant_quantize_row(QUANT_MXFP4, x, b, N), 0);
    ck_assert_int_eq(quant_dequantize_row(QUANT_MXFP4, b, y, N), 0);
    for (int i = 0; i < N; i++) {
        const block_mxfp4 *bb = &b[i / 32];
        float unit = ldexpf(1.0f, bb->e - 127);
        float err = fabsf(x[i] - y[i]);
        ck_assert_msg(err <= 2 * unit, "i=%d: err %g > 2 units (%g)", i, err, unit);
        for (int c = 0; c < 8; c++) { /* no representable value is closer */
            float cand = e2m1[c] * unit;
            ck_assert(err <= fabsf(x[i] - cand) && err <= fabsf(x[i] + cand));
        }
    }
}
END_TEST

START_TEST(test_mxfp4_dot) {
    /* quant_vec_dot_ref(MXFP4) equals the f64 sum of dequantized operands up to
     * f32 rounding of the per-block terms (TOL_DOT_EXACT) */
    enum { N = 1024 };
    static float w[N], a[N], wd[N], ad[N];
    uint32_t s = 4242;
    for (int i = 0; i < N; i++) {
        w[i] = draw(&s) * ldexpf(1.0f, (i / 32) % 7 - 3);
        a[i] = draw(&s);
    }
    static block_mxfp4 wq[N / 32];
    static block_q8_0 aq[N / 32];
    ck_assert_int_eq(quant_quantize_row(QUANT_MXFP4, w, wq, N), 0);
    ck_assert_int_eq(quant_quantize_row(QUANT_Q8_0, a, aq, N), 0);
    ck_assert_int_eq(quant_dequantize_row(QUANT_MXFP4, wq, wd, N), 0);
    ck_assert_int_eq(quant_dequantize_row(QUANT_Q8_0, aq, ad, N), 0);
    double ex = 0, un = 0;
    for (int i = 0; i < N; i++) {
        ex += (double)wd[i] * ad[i];
        un += (double)w[i] * a[i];
    }
    float got = quant_vec_dot_ref(QUANT_MXFP4, N, wq, aq);
    ck_assert_msg(rel_err(got, ex) < TOL_DOT_EXACT, "mxfp4 dot %.9g vs %.9g", got, ex);
    /* and it still approximates the unquantized dot (4-bit: loose) */
    ck_assert_msg(fabs(got - un) < 0.1 * sqrt((double)N), "mxfp4 dot %.6g vs unquantized %.6g", got,
                  un);
}
END_TEST

/* Every weight type on random rows (not just the fixture's 4): the reference
 * dot equals the f64 sum of the dequantized operands, up to f32 rounding of
 * the per-block terms, measured against sum |w_i a_i| so that cancellation in
 * the total does not inflate the ratio. For Q8_1 activations the dot uses the
 * stored s = d*sum(q) (f16) for the min term, so the f64 reference does too. */
/* f32 accumulation over 64 blocks (2048 / 32), each add rounding <= 2^-24 of
 * the running sum <= mag: bound 64 * 6e-8 = 3.8e-6. */
#define TOL_DOT_RANDOM 4e-6
START_TEST(test_dot_vs_dequant) {
    enum { N = 2048 };
    static float w[N], a[N], wd[N], ad[N];
    static uint8_t wq[N * 4], aq[N * 4];
    uint32_t s = 2024;
    for (uint32_t id = 0; id < QUANT_TYPE_COUNT; id++) {
        const struct quant_traits *tr = quant_type_traits(id);
        if (!tr || !tr->can_quantize || id == QUANT_Q8_K || id == QUANT_Q8_1)
            continue;
        enum quant_type t = (enum quant_type)id, at = tr->vec_dot_type;
        for (int rep = 0; rep < 3; rep++) {
            for (int i = 0; i < N; i++) {
                w[i] = draw(&s) * ldexpf(1.0f, (i / 64) % 6 - 2) + (rep == 2 ? 0.7f : 0.0f);
                a[i] = draw(&s) * ldexpf(1.0f, (i / 32) % 3);
            }
            ck_assert_int_eq(quant_quantize_row(t, w, wq, N), 0);
            ck_assert_int_eq(quant_quantize_row(at, a, aq, N), 0);
            ck_assert_int_eq(quant_dequantize_row(t, wq, wd, N), 0);
            ck_assert_int_eq(quant_dequantize_row(at, aq, ad, N), 0);
            double ex = 0, mag = 0;
            if (at == QUANT_Q8_1) { /* sum_b d_w d_a sumi + m_w s_a */
                const block_q8_1 *ab = (const block_q8_1 *)aq;
                for (int b = 0; b < N / 32; b++) {
                    const uint8_t *blk = wq + (size_t)b * tr->type_size;
                    quant_f16 dw, mw;
                    memcpy(&dw, blk, 2);
                    memcpy(&mw, blk + 2, 2);
                    double m = quant_f16_to_f32(mw), blk_sum = 0;
                    for (int i = 0; i < 32; i++) {
                        double wi = wd[32 * b + i] - m; /* level * d_w, to one f32 rounding */
                        blk_sum += wi * ad[32 * b + i];
                        mag += fabs((double)wd[32 * b + i] * ad[32 * b + i]);
                    }
                    ex += blk_sum + m * quant_f16_to_f32(ab[b].s);
                }
            } else {
                for (int i = 0; i < N; i++) {
                    ex += (double)wd[i] * ad[i];
                    mag += fabs((double)wd[i] * ad[i]);
                }
            }
            float got = quant_vec_dot_ref(t, N, wq, aq);
            ck_assert_msg(fabs(got - ex) <= TOL_DOT_RANDOM * mag,
                          "%s rep %d: dot %.9g vs f64 %.9g (|sum| %.3g)", tr->name, rep, got, ex,
                          mag);
        }
    }
}
END_TEST

/* Q8_K specifics not covered byte-wise elsewhere: bsums are the 16-sums and a
 * zero block gives d = 0 with zeroed sums. */
START_TEST(test_q8_K_bsums) {
    static float x[512];
    uint32_t s = 99;
    for (int i = 0; i < 256; i++)
        x[i] = draw(&s) * 3;
    block_q8_K b[2];
    ck_assert_int_eq(quant_quantize_row(QUANT_Q8_K, x, b, 512), 0);
    for (int g = 0; g < 16; g++) {
        int sum = 0;
        for (int i = 0; i < 16; i++)
            sum += b[0].qs[16 * g + i];
        ck_assert_int_eq(b[0].bsums[g], sum);
        ck_assert_int_eq(b[1].bsums[g], 0);
    }
    ck_assert(b[1].d == 0.0f);
}
END_TEST

static Suite *quant_suite(void) {
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("fixtures");
    tcase_add_loop_test(tc, test_fixture, 0, N_FIXTURE_TYPES);
    suite_add_tcase(s, tc);
    tc = tcase_create("units");
    tcase_add_test(tc, test_f16_edges);
    tcase_add_test(tc, test_f16_exhaustive);
    tcase_add_test(tc, test_bf16);
    tcase_add_test(tc, test_traits);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_hostile_inputs);
    tcase_add_test(tc, test_mxfp4_layout);
    tcase_add_test(tc, test_mxfp4_exact);
    tcase_add_test(tc, test_mxfp4_roundtrip);
    tcase_add_test(tc, test_mxfp4_dot);
    tcase_add_test(tc, test_dot_vs_dequant);
    tcase_add_test(tc, test_q8_K_bsums);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("quant", quant_suite)
