/* tests/engine/cpu/test-kernels.c: every ISA's kernels against the scalar
 * reference (random rows of many lengths, several token counts), and the
 * reference against ggml's own vectors in ../shared/fixtures/quant. */
#include "tests/harness.h"

#include <math.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/cpu/kernels-impl.h"
#include "engine/cpu/kernels.h"

/* Named tolerances: |ISA - ref| <= tol * max(|ref|, rms of the ref outputs of
 * that matrix). The integer block sums are exact in every ISA; what differs is
 * the float summation order over blocks (and, for F16/BF16/F32, float versus
 * double accumulation), ~1e-7 per term, so 1e-4 leaves a wide margin while a
 * wrong nibble or scale still fails by orders of magnitude. */
#define TOL_FLOAT_TYPES 1e-4 /* F32, F16, BF16 */
#define TOL_QUANT_TYPES 1e-4 /* integer-dot types */
/* Fixture dots (ggml's SIMD kernels) against our reference: same argument. */
#define TOL_FIXTURE_DOT 1e-4

static uint32_t rng_state = 0x12345678u;
static uint32_t rng_next(void) {
    uint32_t s = rng_state;
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    return rng_state = s;
}
static float rng_uniform(void) { /* [-1, 1) */
    return 2.0f * (float)(rng_next() >> 8) / 16777216.0f - 1.0f;
}

static const enum quant_type all_types[] = {
    QUANT_F32,  QUANT_F16,    QUANT_BF16,   QUANT_Q4_0,  QUANT_Q4_1, QUANT_Q5_0,
    QUANT_Q5_1, QUANT_Q8_0,   QUANT_Q2_K,   QUANT_Q3_K,  QUANT_Q4_K, QUANT_Q5_K,
    QUANT_Q6_K, QUANT_IQ4_NL, QUANT_IQ4_XS, QUANT_MXFP4,
};
#define N_TYPES ((int)(sizeof all_types / sizeof all_types[0]))

static void put_f16(uint8_t *p, float v) {
    uint16_t h = kern_f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* Random weight bytes with sane scale fields (random bytes there would give
 * inf/nan scales, which no real model has). */
static void fill_weights(enum quant_type t, uint8_t *buf, int64_t n_rows, int64_t n_cols) {
    const struct quant_traits *tr = quant_type_traits(t);
    size_t rb = quant_row_size(t, n_cols);
    if (t == QUANT_F32 || t == QUANT_F16 || t == QUANT_BF16) {
        for (int64_t i = 0; i < n_rows * n_cols; i++) {
            float v = rng_uniform();
            if (t == QUANT_F32)
                memcpy(buf + 4 * i, &v, 4);
            else {
                uint16_t h = t == QUANT_F16 ? kern_f32_to_f16(v) : kern_f32_to_bf16(v);
                memcpy(buf + 2 * i, &h, 2);
            }
        }
        return;
    }
    for (size_t i = 0; i < (size_t)n_rows * rb; i++)
        buf[i] = (uint8_t)rng_next();
    int64_t n_blocks = n_rows * (n_cols / tr->block_size);
    for (int64_t b = 0; b < n_blocks; b++) {
        uint8_t *blk = buf + b * tr->type_size;
        float d = 0.01f * (1.0f + rng_uniform()), m = 0.01f * rng_uniform();
        switch (t) {
        case QUANT_Q4_1:
        case QUANT_Q5_1:
        case QUANT_Q4_K:
        case QUANT_Q5_K:
            put_f16(blk, d);
            put_f16(blk + 2, m);
            break;
        case QUANT_Q2_K:
            put_f16(blk + 80, d);
            put_f16(blk + 82, m);
            break;
        case QUANT_Q3_K:
            put_f16(blk + 108, d);
            break;
        case QUANT_Q6_K:
            put_f16(blk + 208, d);
            break;
        case QUANT_MXFP4:
            blk[0] = (uint8_t)(118 + rng_next() % 12);
            break;
        default: /* d first: Q4_0, Q5_0, Q8_0, IQ4_NL, IQ4_XS */
            put_f16(blk, d);
            break;
        }
    }
}

static int isa_count(void) {
    return (int)kernels_isa_detected() + 1;
}

/* The weight types each ISA keeps in the packed layout (kernels.h): only
 * where it has a packed kernel of its own, so a CPU never gets a layout it
 * computes through the scalar reference. */
static int isa_packs(enum kernels_isa isa, enum quant_type t) {
    switch (isa) {
    case KERNELS_ISA_AVX2:
    case KERNELS_ISA_AVX2_VNNI:
        return t == QUANT_Q4_0 || t == QUANT_Q8_0 || t == QUANT_IQ4_NL || t == QUANT_MXFP4 ||
               t == QUANT_Q4_K || t == QUANT_Q6_K;
    case KERNELS_ISA_AVX512:
    case KERNELS_ISA_AVX512_VNNI:
        return t == QUANT_Q4_K || t == QUANT_Q6_K;
    default:
        return 0;
    }
}

/* Every available ISA on matrix m against ref (tolerance tol relative to
 * max(|ref|, rms of ref)), then each token alone, with the rows cut in three
 * ranges (cutting 16-row groups for the packed layout), bitwise the batch.
 * got: (n_rows * n_tok), one: (n_rows) scratch. Returns the failures. */
static int check_isas(const struct kern_mat *m, const uint8_t *xq, size_t ab, int64_t n_tok,
                      const float *ref, double tol, float *got, float *one, const char *tag) {
    const int64_t n_rows = m->n_rows;
    double ss = 0;
    for (int64_t i = 0; i < n_rows * n_tok; i++)
        ss += (double)ref[i] * ref[i];
    const double rms = sqrt(ss / (double)(n_rows * n_tok));
    const int64_t a = n_rows / 3 + (n_rows > 16 ? 5 : 0), b = n_rows > 8 ? n_rows - 3 : n_rows;
    int bad = 0;
    enum kernels_isa saved = kernels_isa_active();
    for (int isa = 0; isa < isa_count(); isa++) {
        kernels_isa_force((enum kernels_isa)isa);
        for (int64_t i = 0; i < n_rows * n_tok; i++)
            got[i] = NAN;
        kernels_matmul(m, xq, ab, n_tok, got, n_rows, 0, n_rows);
        for (int64_t i = 0; i < n_rows * n_tok; i++) {
            double lim = tol * fmax(fabs(ref[i]), rms);
            if (!(fabs((double)got[i] - ref[i]) <= lim)) {
                if (bad < 5)
                    fprintf(stderr, "%s%s %s rows %lld cols %lld tok %lld: [%lld] got %g ref %g\n",
                            quant_type_name(m->type), tag, kernels_isa_name((enum kernels_isa)isa),
                            (long long)n_rows, (long long)m->n_cols, (long long)n_tok, (long long)i,
                            got[i], ref[i]);
                bad++;
            }
        }
        for (int64_t k = 0; k < n_tok; k++) {
            for (int64_t i = 0; i < n_rows; i++)
                one[i] = NAN;
            const int64_t cut[4] = {0, a, b, n_rows};
            for (int r = 0; r < 3; r++)
                if (cut[r] < cut[r + 1])
                    kernels_matmul(m, xq + k * ab, ab, 1, one, n_rows, cut[r], cut[r + 1]);
            if (memcmp(one, got + k * n_rows, (size_t)n_rows * sizeof(float)) != 0) {
                if (bad < 5)
                    fprintf(stderr, "%s%s %s: token %lld alone differs from the batch\n",
                            quant_type_name(m->type), tag, kernels_isa_name((enum kernels_isa)isa),
                            (long long)k);
                bad++;
            }
        }
    }
    kernels_isa_force(saved);
    return bad;
}

/* n_tok activation rows of n_cols random values (token k scaled by 2^(k %
 * period - period / 2), so tokens span magnitudes) quantized for weights of
 * type t into xq, ab bytes apart. */
static void quantize_tokens(enum quant_type t, int64_t n_cols, int64_t n_tok, size_t ab, int period,
                            uint8_t *xq) {
    float *x = malloc((size_t)n_cols * sizeof(float));
    ck_assert_ptr_nonnull(x);
    for (int64_t k = 0; k < n_tok; k++) {
        const float scale = powf(2.0f, (float)(k % period) - (float)(period / 2));
        for (int64_t i = 0; i < n_cols; i++)
            x[i] = scale * rng_uniform();
        kernels_quantize_act(t, x, xq + k * ab, n_cols);
    }
    free(x);
}

/* One matrix: every available ISA against the reference, several token counts;
 * also token-blocked and row-split results equal the one-token result bitwise. */
static int check_matrix(enum quant_type t, int64_t n_rows, int64_t n_cols, int64_t n_tok) {
    size_t rb = quant_row_size(t, n_cols);
    size_t ab = kernels_act_row_size(t, n_cols);
    uint8_t *w = malloc((size_t)n_rows * rb);
    uint8_t *xq = malloc((size_t)n_tok * ab);
    float *ref = malloc((size_t)(n_rows * n_tok) * sizeof(float));
    float *got = malloc((size_t)(n_rows * n_tok) * sizeof(float));
    float *one = malloc((size_t)n_rows * sizeof(float));
    fill_weights(t, w, n_rows, n_cols);
    quantize_tokens(t, n_cols, n_tok, ab, 5, xq);
    struct kern_mat m = {w, t, n_rows, n_cols, rb, 0};
    kernels_matmul_ref(&m, xq, ab, n_tok, ref, n_rows, 0, n_rows);
    double tol =
        (t == QUANT_F32 || t == QUANT_F16 || t == QUANT_BF16) ? TOL_FLOAT_TYPES : TOL_QUANT_TYPES;
    int bad = check_isas(&m, xq, ab, n_tok, ref, tol, got, one, "");
    free(w);
    free(xq);
    free(ref);
    free(got);
    free(one);
    return bad;
}

START_TEST(test_isa_vs_ref) {
    kernels_init();
    fprintf(stderr, "kernels: detected %s\n", kernels_isa_name(kernels_isa_detected()));
    enum quant_type t = all_types[_i];
    ck_assert(kernels_supports(t));
    int64_t bs = quant_type_traits(t)->block_size;
    int64_t unit = bs == 1 ? 32 : bs; /* plain types: lengths multiple of 1, try odd ones */
    int bad = 0;
    static const int64_t mults[] = {1, 2, 3, 5, 8, 16};
    for (int i = 0; i < 6; i++)
        bad += check_matrix(t, 13, unit * mults[i], 1 + i % 5);
    if (bs == 1)
        for (int64_t n = 1; n < 40; n += 3)
            bad += check_matrix(t, 5, n, 3);
    bad += check_matrix(t, 37, 4096, 9);
    bad += check_matrix(t, 9, unit * 3, 37); /* GEMM path: chunks, token and row tails */
    bad += check_matrix(t, 64, 512, 1);
    bad += check_matrix(t, 5, unit * 65, 2); /* K-quants: > 64 super-blocks a row */
    if (bs == 32) {
        /* wide rows: a 4-token tile's packed activations leave the stack
         * (heap path), and the GEMM splits the row into unit blocks with a
         * partial last unit */
        bad += check_matrix(t, 6, unit * 195, 4);
        bad += check_matrix(t, 6, unit * 195, 9);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* The 16-row packed layout (Q4_K, Q6_K, Q4_0, Q8_0, IQ4_NL, MXFP4): packing in two group ranges and
 * unpacking gives the GGUF bytes back; the reference over the packed matrix
 * is bitwise the GGUF one; every ISA is within tolerance of it, and each
 * token alone, under row splits that cut groups, is bitwise the batch. */
static int check_packed(enum quant_type t, int64_t n_rows, int64_t n_cols, int64_t n_tok) {
    const size_t rb = quant_row_size(t, n_cols), ab = kernels_act_row_size(t, n_cols);
    const size_t wb = (size_t)n_rows * rb;
    uint8_t *w = malloc(wb), *pk = malloc(wb), *back = malloc(wb), *xq = malloc((size_t)n_tok * ab);
    float *ref = malloc((size_t)(n_rows * n_tok) * sizeof(float));
    float *got = malloc((size_t)(n_rows * n_tok) * sizeof(float));
    float *one = malloc((size_t)n_rows * sizeof(float));
    fill_weights(t, w, n_rows, n_cols);
    quantize_tokens(t, n_cols, n_tok, ab, 3, xq);
    int bad = 0;
    struct kern_mat m = {w, t, n_rows, n_cols, rb, 0};
    const int64_t groups = n_rows / KERNELS_PACK_ROWS;
    if (kernels_pack(&m, pk, 0, groups / 2) != 0 || kernels_pack(&m, pk, groups / 2, groups) != 0)
        bad++;
    struct kern_mat pm = {pk, t, n_rows, n_cols, rb, 1};
    if (kernels_unpack(&pm, back) != 0 || memcmp(back, w, wb) != 0) {
        fprintf(stderr, "%s packed: unpack differs\n", quant_type_name(t));
        bad++;
    }
    kernels_matmul_ref(&m, xq, ab, n_tok, ref, n_rows, 0, n_rows);
    kernels_matmul_ref(&pm, xq, ab, n_tok, got, n_rows, 0, n_rows);
    if (memcmp(ref, got, (size_t)(n_rows * n_tok) * sizeof(float)) != 0) {
        fprintf(stderr, "%s packed: reference differs from the GGUF layout's\n",
                quant_type_name(t));
        bad++;
    }
    bad += check_isas(&pm, xq, ab, n_tok, ref, TOL_QUANT_TYPES, got, one, " packed");
    free(w);
    free(pk);
    free(back);
    free(xq);
    free(ref);
    free(got);
    free(one);
    return bad;
}

START_TEST(test_packed_vs_ref) {
    kernels_init();
    static const enum quant_type types[] = {QUANT_Q4_K, QUANT_Q6_K,   QUANT_Q4_0,
                                            QUANT_Q8_0, QUANT_IQ4_NL, QUANT_MXFP4};
    int bad = 0;
    for (int i = 0; i < 6; i++) {
        const enum quant_type t = types[i];
        if (quant_type_traits(t)->block_size == 32) { /* odd block counts too */
            bad += check_packed(t, 16, 32, 1);
            bad += check_packed(t, 32, 32 * 7, 5);
            bad += check_packed(t, 48, 32 * 65, 9);
            bad +=
                check_packed(t, 16, 32 * 600, 3); /* long rows: 3 tokens' scalars fill the stack */
            bad += check_packed(t, 16, 32 * 500, 34); /* two token chunks, heap scratch */
        }
        bad += check_packed(t, 16, 256, 1);
        bad += check_packed(t, 32, 512, 3);
        bad += check_packed(t, 48, 2048, 9);  /* 8 + 1 tokens */
        bad += check_packed(t, 64, 1024, 15); /* 8 + 4 + 2 + 1 */
        bad += check_packed(t, 16, 256 * 65, 2);
        bad += check_packed(t, 160, 768, 8);
        /* every ISA the host runs asks for the layout exactly where it has a
         * packed kernel of its own (isa_packs), never for a shape without it */
        const enum kernels_isa saved = kernels_isa_active();
        for (int isa = 0; isa < isa_count(); isa++) {
            kernels_isa_force((enum kernels_isa)isa);
            /* the level in force: one the CPU lacks falls to the one below */
            const enum kernels_isa got = kernels_isa_active();
            ck_assert_msg(kernels_pack_wanted(t, 32, 512) == isa_packs(got, t), "%s on %s",
                          quant_type_name(t), kernels_isa_name(got));
            ck_assert(!kernels_pack_wanted(t, 24, 512));
        }
        kernels_isa_force(saved);
        ck_assert(!kernels_pack_layout_ok(t, 16, 300));
    }
    ck_assert(!kernels_pack_layout_ok(QUANT_Q4_0, 16, 48));
    ck_assert(!kernels_pack_layout_ok(QUANT_Q8_0, 24, 256));
    ck_assert(!kernels_pack_layout_ok(QUANT_IQ4_XS, 16, 256));
    ck_assert(!kernels_pack_layout_ok(QUANT_Q5_K, 16, 256));
    /* bad shapes: no packing; a packed matrix of a bad shape leaves y untouched */
    uint8_t wq[2 * 144] = {0}, q[292] = {0};
    float yy[2] = {7, 7};
    struct kern_mat odd = {wq, QUANT_Q4_K, 2, 256, 144, 0};
    ck_assert_int_eq(kernels_pack(&odd, wq, 0, 1), -1);
    odd.packed = 1;
    kernels_matmul(&odd, q, 292, 1, yy, 2, 0, 2);
    ck_assert(yy[0] == 7 && yy[1] == 7);
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* The 32-element block kinds read no byte past a matrix whose last row ends
 * right before an unreadable page (the end of a file mapping), for decode and
 * the GEMM, whole and partial units. */
START_TEST(test_b32_guard_page) {
    static const enum quant_type b32[] = {QUANT_Q4_0, QUANT_Q8_0, QUANT_IQ4_NL, QUANT_MXFP4};
    static const int64_t cols[] = {32 * 16, 32 * 19, 32 * 1, 32 * 7};
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (int ti = 0; ti < 4; ti++)
        for (int ci = 0; ci < 4; ci++) {
            const enum quant_type t = b32[ti];
            const int64_t n_rows = 5, n_cols = cols[ci], n_tok = 9;
            const size_t rb = quant_row_size(t, n_cols), wb = (size_t)n_rows * rb;
            const size_t map = (wb + page - 1) / page * page + page;
            uint8_t *m =
                mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            ck_assert(m != MAP_FAILED);
            ck_assert_int_eq(mprotect(m + map - page, page, PROT_NONE), 0);
            uint8_t *w = m + map - page - wb;
            fill_weights(t, w, n_rows, n_cols);
            size_t ab = kernels_act_row_size(t, n_cols);
            uint8_t *xq = malloc((size_t)n_tok * ab);
            float ref[5 * 9], got[5 * 9];
            quantize_tokens(t, n_cols, n_tok, ab, 1, xq); /* period 1: every token at scale 1 */
            struct kern_mat mt = {w, t, n_rows, n_cols, rb, 0};
            kernels_matmul_ref(&mt, xq, ab, n_tok, ref, n_rows, 0, n_rows);
            for (int isa = 0; isa < isa_count(); isa++) {
                kernels_isa_force((enum kernels_isa)isa);
                kernels_matmul(&mt, xq, ab, n_tok, got, n_rows, 0, n_rows);      /* GEMM */
                kernels_matmul(&mt, xq, ab, 1, got, n_rows, n_rows - 1, n_rows); /* decode */
                for (int i = 0; i < n_rows * n_tok; i++)
                    ck_assert_msg(fabs((double)got[i] - ref[i]) <= 1e-3 * (fabs(ref[i]) + 1.0),
                                  "%s %s cols %lld [%d]: %g vs ref %g", quant_type_name(t),
                                  kernels_isa_name((enum kernels_isa)isa), (long long)n_cols, i,
                                  got[i], ref[i]);
            }
            kernels_isa_force(kernels_isa_detected());
            free(xq);
            munmap(m, map);
        }
}
END_TEST

/* ---- fixtures: ggml's own activation quantization and dot products ---------- */

struct fixture_type {
    const char *name;
    enum quant_type type;
};
static const struct fixture_type fixtures[] = {
    {"Q4_0", QUANT_Q4_0}, {"Q4_1", QUANT_Q4_1}, {"Q5_0", QUANT_Q5_0},     {"Q5_1", QUANT_Q5_1},
    {"Q8_0", QUANT_Q8_0}, {"Q2_K", QUANT_Q2_K}, {"Q3_K", QUANT_Q3_K},     {"Q4_K", QUANT_Q4_K},
    {"Q5_K", QUANT_Q5_K}, {"Q6_K", QUANT_Q6_K}, {"IQ4_NL", QUANT_IQ4_NL}, {"IQ4_XS", QUANT_IQ4_XS},
    {"F16", QUANT_F16},   {"BF16", QUANT_BF16},
};
#define N_FIXTURES ((int)(sizeof fixtures / sizeof fixtures[0]))

static void *load_fixture(const char *name, const char *ext, size_t want) {
    char rel[256], path[1024];
    snprintf(rel, sizeof rel, "fixtures/quant/%s.%s", name, ext);
    size_t size = 0;
    void *p = test_read_file(test_shared_path(path, sizeof path, rel), &size);
    ck_assert_msg(p, "missing fixture %s (set STRATA_SHARED_DIR)", path);
    ck_assert_msg(size == want, "%s: %zu bytes, want %zu", path, size, want);
    return p;
}

START_TEST(test_fixture) {
    const struct fixture_type *f = &fixtures[_i];
    const int64_t rows = 4, cols = 512;
    size_t rb = quant_row_size(f->type, cols);
    size_t ab = kernels_act_row_size(f->type, cols);
    float *act = load_fixture(f->name, "act.f32", cols * sizeof(float));
    uint8_t *act_q = load_fixture(f->name, "act_q.bin", ab);
    uint8_t *w = load_fixture(f->name, "quant.bin", rows * rb);
    float *dot = load_fixture(f->name, "dot.f32", rows * sizeof(float));
    uint8_t *mine = malloc(ab);
    kernels_quantize_act(f->type, act, mine, cols);
    size_t diff = 0;
    for (size_t i = 0; i < ab; i++)
        diff += mine[i] != act_q[i];
    ck_assert_msg(diff == 0, "%s: activation quantization differs in %zu of %zu bytes", f->name,
                  diff, ab);
    struct kern_mat m = {w, f->type, rows, cols, rb, 0};
    float y[4];
    for (int isa = 0; isa < isa_count(); isa++) {
        kernels_isa_force((enum kernels_isa)isa);
        kernels_matmul(&m, act_q, ab, 1, y, rows, 0, rows);
        for (int r = 0; r < rows; r++)
            ck_assert_msg(fabs((double)y[r] - dot[r]) <= TOL_FIXTURE_DOT * (fabs(dot[r]) + 1.0),
                          "%s %s row %d: dot %.9g, ggml %.9g", f->name,
                          kernels_isa_name((enum kernels_isa)isa), r, y[r], dot[r]);
    }
    kernels_isa_force(kernels_isa_detected());
    free(act);
    free(act_q);
    free(w);
    free(dot);
    free(mine);
}
END_TEST

START_TEST(test_act_edge_cases) {
    /* Zero rows quantize to zero blocks (Q8_K's d = 0 path), and dots are 0. */
    float x[256] = {0};
    uint8_t q[292];
    memset(q, 0xAB, sizeof q);
    kernels_quantize_act(QUANT_Q4_K, x, q, 256);
    for (size_t i = 0; i < sizeof q; i++)
        ck_assert_int_eq(q[i], 0);
    ck_assert_int_eq(kernels_act_type(QUANT_Q4_0), QUANT_Q8_0);
    ck_assert_int_eq(kernels_act_type(QUANT_Q5_1), QUANT_Q8_1);
    ck_assert_int_eq(kernels_act_type(QUANT_Q6_K), QUANT_Q8_K);
    ck_assert_uint_eq(kernels_act_row_size(QUANT_Q4_0, 4096), 4096 / 32 * 34);
    ck_assert(!kernels_supports(QUANT_IQ2_XXS));
    /* f16 conversions round to nearest even and keep specials. */
    ck_assert_uint_eq(kern_f32_to_f16(1.0f), 0x3c00);
    ck_assert_uint_eq(kern_f32_to_f16(65504.0f), 0x7bff);
    ck_assert_uint_eq(kern_f32_to_f16(1e6f), 0x7c00);
    ck_assert_uint_eq(kern_f32_to_f16(5.9604645e-08f), 0x0001);
    ck_assert_uint_eq(kern_f32_to_f16(-0.0f), 0x8000);
    for (uint32_t h = 0; h < 0x7c00; h++)
        ck_assert_uint_eq(kern_f32_to_f16(kern_f16_to_f32((uint16_t)h)), h);
    ck_assert_float_eq(kern_bf16_to_f32(kern_f32_to_bf16(1.5f)), 1.5f);
    /* Malformed shapes leave y untouched instead of reading out of bounds. */
    uint8_t wq[18 * 4] = {0};
    float yy[4] = {7, 7, 7, 7};
    struct kern_mat bad = {wq, QUANT_Q4_0, 2, 48, 36, 0}; /* 48 is not a multiple of 32 */
    kernels_matmul(&bad, q, 34, 1, yy, 2, 0, 2);
    bad = (struct kern_mat){wq, QUANT_Q4_0, 2, 64, 20, 0}; /* row_bytes < 36 */
    kernels_matmul(&bad, q, 68, 1, yy, 2, 0, 2);
    bad = (struct kern_mat){wq, QUANT_Q4_0, 2, 64, 36, 0};
    kernels_matmul(&bad, q, 68, 1, yy, 2, 1, 3); /* r1 > n_rows */
    kernels_matmul(&bad, q, 68, 1, yy, 2, -1, 1);
    bad.type = (enum quant_type)77;
    kernels_matmul(&bad, q, 68, 1, yy, 2, 0, 2);
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq(yy[i], 7.0f);
    /* Forcing above what the CPU has clamps. */
    kernels_isa_force(KERNELS_ISA_AVX512_VNNI);
    ck_assert_int_eq(kernels_isa_active(), kernels_isa_detected());
}
END_TEST

/* Every ISA's activation quantizer for weights of wtype turns x (n values)
 * into exactly ref (bytes); got is scratch of as many bytes. */
static void check_quantizer_isas(enum quant_type wtype, const float *x, int n, const uint8_t *ref,
                                 uint8_t *got, size_t bytes) {
    enum kernels_isa saved = kernels_isa_active();
    for (int isa = 0; isa < isa_count(); isa++) {
        kernels_isa_force((enum kernels_isa)isa);
        memset(got, 0xAB, bytes);
        kernels_quantize_act(wtype, x, got, n);
        ck_assert_msg(memcmp(got, ref, bytes) == 0, "isa %s differs",
                      kernels_isa_name((enum kernels_isa)isa));
    }
    kernels_isa_force(saved);
}

/* Every ISA's Q8_0 activation quantizer is bitwise the scalar reference:
 * random rows at several scales, zero blocks, halves that roundf takes away
 * from zero (block with amax 127: d = 1, id = 1), and blocks holding NaN and
 * infinities. */
START_TEST(test_quantize_q8_0_isa) {
    enum { N = 32 * 40 };
    static float x[N];
    static uint8_t ref[N / 32 * 34], got[N / 32 * 34];
    for (int i = 0; i < N; i++)
        x[i] = powf(2.0f, (float)(i / 32 % 7) * 3.0f - 9.0f) * rng_uniform();
    for (int i = 64; i < 96; i++)
        x[i] = 0.0f;
    static const float halves[] = {127.0f,       0.5f,       -0.5f,      1.5f,
                                   -2.5f,        126.5f,     -126.5f,    0.49999997f,
                                   -0.49999997f, 3.5000002f, 2.4999998f, -0.0f};
    for (int i = 0; i < 32; i++)
        x[96 + i] = halves[i % 12];
    x[128 + 3] = NAN;      /* a NaN level is 0, the block's scale from the rest */
    x[160 + 9] = INFINITY; /* d = inf, every level 0 */
    x[192 + 31] = -INFINITY;
    kern_quantize_q8_0(x, ref, N);
    check_quantizer_isas(QUANT_Q4_0, x, N, ref, got, sizeof ref);
}
END_TEST

/* Every ISA's Q8_K activation quantizer is bitwise the scalar reference:
 * random blocks at several scales, a zero block, a block whose largest
 * magnitude appears first negative then positive (the scale's sign comes from
 * the first), exact halves (round half to even), and blocks holding inf and
 * NaN (the reference's special cases). */
START_TEST(test_quantize_q8_K_isa) {
    enum { N = 256 * 9 };
    static float x[N];
    static uint8_t ref[N / 256 * sizeof(block_q8_K)], got[N / 256 * sizeof(block_q8_K)];
    for (int i = 0; i < N; i++)
        x[i] = powf(2.0f, (float)(i / 256 % 5) * 3.0f - 6.0f) * rng_uniform();
    for (int i = 256; i < 512; i++)
        x[i] = 0.0f;
    x[512 + 7] = -3.0f; /* block 2: -3 first, +3 later */
    x[512 + 200] = 3.0f;
    for (int i = 0; i < 256; i++) /* block 3: iscale = -1, levels at exact halves */
        x[768 + i] = i == 5 ? -127.0f : (float)(i % 50) - 24.5f;
    x[1024 + 17] = INFINITY;
    x[1280 + 3] = NAN;
    x[1536 + 255] = -INFINITY;
    kern_quantize_q8_K(x, ref, N);
    check_quantizer_isas(QUANT_Q4_K, x, N, ref, got, sizeof ref);
}
END_TEST

/* Our reference dot agrees with quant.c's (the quant module's independent scalar
 * reference) on random rows of every type. */
START_TEST(test_ref_vs_quant_ref) {
    enum quant_type t = all_types[_i];
    const int64_t n_cols = 1024;
    size_t rb = quant_row_size(t, n_cols), ab = kernels_act_row_size(t, n_cols);
    uint8_t *w = malloc(8 * rb), *xq = malloc(ab);
    float x[1024];
    fill_weights(t, w, 8, n_cols);
    for (int i = 0; i < 1024; i++)
        x[i] = rng_uniform();
    kernels_quantize_act(t, x, xq, n_cols);
    float mine[8];
    double ss = 0;
    struct kern_mat m = {w, t, 8, n_cols, rb, 0};
    kernels_matmul_ref(&m, xq, ab, 1, mine, 8, 0, 8);
    for (int r = 0; r < 8; r++)
        ss += (double)mine[r] * mine[r];
    double rms = sqrt(ss / 8);
    for (int r = 0; r < 8; r++) {
        float theirs = quant_vec_dot_ref(t, n_cols, w + r * rb, xq);
        ck_assert_msg(fabs((double)mine[r] - theirs) <= TOL_QUANT_TYPES * fmax(fabs(theirs), rms),
                      "%s row %d: kernels ref %.9g, quant ref %.9g", quant_type_name(t), r, mine[r],
                      theirs);
    }
    free(w);
    free(xq);
}
END_TEST

static Suite *kernels_suite(void) {
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_isa_vs_ref, 0, N_TYPES);
    tcase_add_loop_test(tc, test_fixture, 0, N_FIXTURES);
    tcase_add_test(tc, test_act_edge_cases);
    tcase_add_test(tc, test_b32_guard_page);
    tcase_add_test(tc, test_packed_vs_ref);
    tcase_add_test(tc, test_quantize_q8_0_isa);
    tcase_add_test(tc, test_quantize_q8_K_isa);
    tcase_add_loop_test(tc, test_ref_vs_quant_ref, 0, N_TYPES);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("kernels", kernels_suite)
