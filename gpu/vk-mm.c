/* gpu/vk-mm.c: the matrix kernels' pipelines and tuning (gpu/vk-mm.h); the
 * record functions are gpu/vk-mm-rec.c.
 *
 * Each type has two shaders (mv_<type>.comp, mm_<type>.comp) and seven
 * pipeline kinds, each plain and fused (gate + up + SwiGLU): the matvec
 * specialised for 1, 2, 4 and 8 tokens a pass (the
 * accumulators live in registers, so the token count is a specialization
 * constant: a batched decode of 3 tokens runs the 4-token pipeline with the
 * fourth repeating the third and not written), the expert-indexed matvec,
 * and the tiled matmul with its expert-indexed form. Pipelines are made at
 * the first vkmm_prepare or use of their type (lavapipe compiles each
 * through LLVM, so making all 140 up front would cost start-up for types a
 * model never has).
 */
#include "gpu/vk-mm-impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct vkmm_shader {
    const uint32_t *mv, *mm;
    size_t mv_bytes, mm_bytes;
};

/* glslc -mfmt=c output: one initializer list per shader */
static const uint32_t spv_mv_f32[] =
#include "gpu/shaders/mv_f32.spv.h"
    ;
static const uint32_t spv_mm_f32[] =
#include "gpu/shaders/mm_f32.spv.h"
    ;
static const uint32_t spv_mv_f16[] =
#include "gpu/shaders/mv_f16.spv.h"
    ;
static const uint32_t spv_mm_f16[] =
#include "gpu/shaders/mm_f16.spv.h"
    ;
static const uint32_t spv_mv_bf16[] =
#include "gpu/shaders/mv_bf16.spv.h"
    ;
static const uint32_t spv_mm_bf16[] =
#include "gpu/shaders/mm_bf16.spv.h"
    ;
static const uint32_t spv_mv_q8_0[] =
#include "gpu/shaders/mv_q8_0.spv.h"
    ;
static const uint32_t spv_mm_q8_0[] =
#include "gpu/shaders/mm_q8_0.spv.h"
    ;
static const uint32_t spv_mv_q4_0[] =
#include "gpu/shaders/mv_q4_0.spv.h"
    ;
static const uint32_t spv_mm_q4_0[] =
#include "gpu/shaders/mm_q4_0.spv.h"
    ;
static const uint32_t spv_mv_q4_k[] =
#include "gpu/shaders/mv_q4_k.spv.h"
    ;
static const uint32_t spv_mm_q4_k[] =
#include "gpu/shaders/mm_q4_k.spv.h"
    ;
static const uint32_t spv_mv_q5_k[] =
#include "gpu/shaders/mv_q5_k.spv.h"
    ;
static const uint32_t spv_mm_q5_k[] =
#include "gpu/shaders/mm_q5_k.spv.h"
    ;
static const uint32_t spv_mv_q6_k[] =
#include "gpu/shaders/mv_q6_k.spv.h"
    ;
static const uint32_t spv_mm_q6_k[] =
#include "gpu/shaders/mm_q6_k.spv.h"
    ;
static const uint32_t spv_mv_mxfp4[] =
#include "gpu/shaders/mv_mxfp4.spv.h"
    ;
static const uint32_t spv_mm_mxfp4[] =
#include "gpu/shaders/mm_mxfp4.spv.h"
    ;
static const uint32_t spv_mv_iq4_nl[] =
#include "gpu/shaders/mv_iq4_nl.spv.h"
    ;
static const uint32_t spv_mm_iq4_nl[] =
#include "gpu/shaders/mm_iq4_nl.spv.h"
    ;

#define SHADER(t)                                                                                  \
    { spv_mv_##t, spv_mm_##t, sizeof spv_mv_##t, sizeof spv_mm_##t }

/* The shaders of a type, or NULL when the kernels do not compute it. */
static const struct vkmm_shader *shader_of(enum quant_type type) {
    static const struct vkmm_shader f32 = SHADER(f32), f16 = SHADER(f16), bf16 = SHADER(bf16),
                                    q8_0 = SHADER(q8_0), q4_0 = SHADER(q4_0), q4_k = SHADER(q4_k),
                                    q5_k = SHADER(q5_k), q6_k = SHADER(q6_k), mxfp4 = SHADER(mxfp4),
                                    iq4_nl = SHADER(iq4_nl);
    switch (type) {
    case QUANT_F32:
        return &f32;
    case QUANT_F16:
        return &f16;
    case QUANT_BF16:
        return &bf16;
    case QUANT_Q8_0:
        return &q8_0;
    case QUANT_Q4_0:
        return &q4_0;
    case QUANT_Q4_K:
        return &q4_k;
    case QUANT_Q5_K:
        return &q5_k;
    case QUANT_Q6_K:
        return &q6_k;
    case QUANT_MXFP4:
        return &mxfp4;
    case QUANT_IQ4_NL:
        return &iq4_nl;
    default:
        return NULL;
    }
}

static uint32_t clamp_u32(uint32_t v, uint32_t lo, uint32_t hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* Shared memory of the matmul's tiles: two weight tiles (the fused form's
 * gate and up) and the activation tile, 32 x (rows + 1) floats each. */
static uint32_t tile_bytes(const struct vkmm_tune *t) {
    return 32 * (2 * t->mm_bm + t->mm_bn + 3) * 4;
}

/* The expert-indexed matmul's pick list takes the shared memory the tiles
 * leave, up to 4,096 picks (a 512-token top-8 prefill in one window), a
 * multiple of the workgroup: 1,792 on lavapipe's 32 KB, 4,096 on the H200's
 * 48 KB of static shared memory. */
static uint32_t lcap_for(const struct vk_dev_info *in, const struct vkmm_tune *t) {
    uint64_t avail =
        in->max_shared_bytes > tile_bytes(t) + 64 ? in->max_shared_bytes - tile_bytes(t) - 64 : 0;
    uint64_t n = avail / 4 < 4096 ? avail / 4 : 4096;
    n -= n % t->mm_wg;
    return (uint32_t)(n ? n : 0);
}

/* Matvec: WG = 4 subgroups (128 lanes on NVIDIA's 32-wide subgroups, clamped
 * to 32..256) over NR rows (2 for 4 or 8 tokens a pass, 4 for 1 or 2: see
 * mv_rows1). For the 7B's 4096 x 4096 Q4_0 projections on the H200 that is
 * 1,024 to 2,048 workgroups of 128 lanes, about what its 132 SMs keep
 * resident (2,048 lanes each), so the loads in flight cover HBM latency;
 * 32-lane workgroups would leave the SMs a quarter full (Hopper runs at most
 * 32 workgroups an SM). Matmul: 64 x 64 tiles, 256 lanes of 4 x 4 outputs,
 * 24.9 KB of shared memory with the fused form's second weight tile; half
 * the tile where a device offers less than that or fewer than 256 lanes. */
void vkmm_tune_for(const struct vk_dev_info *in, struct vkmm_tune *t) {
    uint32_t maxwg = in->max_wg_invocations ? in->max_wg_invocations : 128;
    uint32_t sg = in->subgroup_size ? in->subgroup_size : 32;
    t->mv_wg = clamp_u32(4 * sg, 32, 256);
    if (t->mv_wg > maxwg)
        t->mv_wg = maxwg;
    t->mv_rows = 2;
    /* one token: 4 rows share each x load. The H200 run of a39bda8 (7B
     * Q4_0 decode, lead's profile) had the 1-token matvec at 18.4 us for
     * 9.4 MB (~510 GB/s) with 2 rows: per 6 bytes of weights a lane loaded
     * 32 bytes of x (two vec4) for 2 rows, so the SM's load unit, not HBM,
     * was the limit; 4 rows halve the x loads per weight byte and keep as
     * many weight bytes in flight per lane (1,024 workgroups of 128). */
    t->mv_rows1 = 4;
    t->mv_unr = 1;
    t->mv_soa = 0;
    t->mv_wcap = 0;
    /* Kept after the block path (mv_body.glsl, MV_BLK): H200, 7B Q4_0 tg128
     * (gpu-bench MODEL -1 128 64 8 0 4300 PC auto,mv=WGxR1xR, one device call
     * of 2026-12-02): 128x4 210.5 tok/s, 64x4 207.8, 128x8 191.3, 256x4
     * 186.8, 32x2 173.3, 128x2 166.2; for 4-8 tokens 128x4x4 gave b8 391
     * against 591 with 2 rows. */
    t->mm_bm = 64;
    t->mm_bn = 64;
    t->mm_tm = 4;
    t->mm_tn = 4;
    if (maxwg < 256 || in->max_shared_bytes < tile_bytes(t) + 4 * 256 + 64) {
        t->mm_bm = 32;
        t->mm_bn = 32;
        t->mm_tm = 2;
        t->mm_tn = 4; /* (32/2) x (32/4) = 128 lanes, 12.7 KB */
    }
    t->mm_wg = (t->mm_bm / t->mm_tm) * (t->mm_bn / t->mm_tn);
    t->mm_lcap = lcap_for(in, t);
    vkmm_tune_paths(in, t);
}

int vkmm_init(struct vk_dev *d, struct vkmm **out, struct strata_error *err) {
    *out = NULL;
    struct vkmm *mm = calloc(1, sizeof *mm);
    if (!mm)
        return strata_error_set(err, STRATA_E_NOMEM, "vkmm: out of memory");
    mm->d = d;
    mm->info = vk_dev_info(d);
    vkmm_tune_for(mm->info, &mm->tune);
    static const uint32_t zero[16 * 33] = {0}; /* mv_body.glsl's tail counters */
    mm->tail_cnt = vk_buf_alloc(d, sizeof zero, VK_MEM_DEVICE, err);
    if (!mm->tail_cnt || vk_buf_upload(d, mm->tail_cnt, 0, zero, sizeof zero, err)) {
        vkmm_free(mm);
        return err && err->code ? err->code : STRATA_E_NOMEM;
    }
    *out = mm;
    return 0;
}

void vkmm_free(struct vkmm *mm) {
    if (!mm)
        return;
    for (int t = QUANT_TYPE_COUNT - 1; t >= 0; t--)
        for (int k = VKMM_KIND_COUNT - 1; k >= 0; k--)
            for (int g = 1; g >= 0; g--)
                for (int f = VKMM_FUSE_N - 1; f >= 0; f--)
                    vk_pipe_free(mm->d, mm->pipe[t][k][g][f]);
    for (int t = QUANT_TYPE_COUNT - 1; t >= 0; t--)
        for (int g = 1; g >= 0; g--)
            for (int i = 1; i >= 0; i--)
                for (int f = 1; f >= 0; f--)
                    for (int a = VKMM_Q8_FORMS - 1; a >= 0; a--)
                        vk_pipe_free(mm->d, mm->q8pipe[t][g][i][f][a]);
    for (int t = QUANT_TYPE_COUNT - 1; t >= 0; t--)
        for (int g = 1; g >= 0; g--)
            for (int a = 1; a >= 0; a--)
                for (int n = 2; n >= 0; n--)
                    vk_pipe_free(mm->d, mm->q8npipe[t][g][a][n]);
    vk_buf_free(mm->d, mm->tail_cnt);
    free(mm);
}

int vkmm_set_tune(struct vkmm *mm, const struct vkmm_tune *t, struct strata_error *err) {
    if (mm->made_any)
        return strata_error_set(err, STRATA_E_INVALID, "vkmm: tuning after pipelines were made");
    const struct vk_dev_info *in = mm->info;
    uint32_t maxwg = in->max_wg_invocations;
    bool ok = t->mv_wg >= 1 && t->mv_wg <= maxwg && t->mv_rows >= 1 && t->mv_rows <= 8 &&
              t->mv_rows1 >= 1 && t->mv_rows1 <= 8 && t->mm_tm >= 1 && t->mm_tn >= 1 &&
              t->mm_bm % t->mm_tm == 0 && t->mm_bn % t->mm_tn == 0 &&
              t->mm_wg == (t->mm_bm / t->mm_tm) * (t->mm_bn / t->mm_tn) && t->mm_wg <= maxwg &&
              tile_bytes(t) + 4ull * t->mm_lcap + 64 <= in->max_shared_bytes && t->mm_lcap >= 1 &&
              4ull * (2 * t->mv_rows + 1) * VKMM_MV_MAX_TOK * t->mv_wg <= in->max_shared_bytes &&
              t->mv_unr >= 1 && t->mv_unr <= 4 && t->mv_soa <= 1 &&
              4ull * (2 * t->mv_rows1 + 1) * 2 * t->mv_wg <= in->max_shared_bytes &&
              vkmm_tune_paths_ok(in, t);
    if (!ok)
        return strata_error_set(err, STRATA_E_INVALID, "vkmm: tuning the shaders cannot run");
    mm->tune = *t;
    return 0;
}

bool vkmm_soa_type(enum quant_type type) {
    return type == QUANT_Q4_0 || type == QUANT_Q8_0;
}

void vkmm_soa_row(enum quant_type type, const void *src, void *dst, int64_t n_cols) {
    STRATA_ASSERT(vkmm_soa_type(type) && n_cols % 32 == 0);
    const size_t bb = type == QUANT_Q4_0 ? 18 : 34, nb = (size_t)n_cols / 32;
    const uint8_t *s = src;
    uint8_t *d = dst;
    for (size_t b = 0; b < nb; b++) {
        memcpy(d + 2 * b, s + bb * b, 2);
        memcpy(d + 2 * nb + (bb - 2) * b, s + bb * b + 2, bb - 2);
    }
}

bool vkmm_supports(enum quant_type type, int64_t n_cols) {
    if (type < 0 || type >= QUANT_TYPE_COUNT || !shader_of(type) || n_cols <= 0 ||
        n_cols > (1 << 24))
        return false;
    switch (type) {
    case QUANT_F32:
    case QUANT_F16:
    case QUANT_BF16:
        return n_cols % 4 == 0;
    case QUANT_Q4_K:
    case QUANT_Q5_K:
    case QUANT_Q6_K:
        return n_cols % QK_K == 0;
    default:
        return n_cols % 32 == 0;
    }
}

const char *vkmm_kind_name(enum vkmm_kind k) {
    static const char *names[VKMM_KIND_COUNT] = {"mv1",       "mv2",     "mv4",        "mv8",
                                                 "mv_id",     "mm",      "mm_id",      "mm_dot",
                                                 "mm_id_dot", "mm_coop", "mm_id_coop", "mm_dot_s"};
    return names[k];
}

/* Bindings of every matrix pipeline: W, x, y, sel, the up matrix; the
 * matvec's also the residual (mv_body.glsl ACC) and the norm's weight,
 * output, q8 output and counter (TAIL). Unused ones get any buffer. */
#define VKMM_N_BIND 5

static struct vk_pipe *make_pipe(struct vkmm *mm, enum quant_type type, enum vkmm_kind kind,
                                 bool glu, int fuse, struct strata_error *err) {
    const struct vkmm_shader *sh = shader_of(type);
    char name[48];
    snprintf(name, sizeof name, "%s.%s%s%s%s", quant_type_name(type), vkmm_kind_name(kind),
             glu ? ".glu" : "", fuse & VKMM_FUSE_ACC ? ".acc" : "",
             fuse & VKMM_FUSE_NORM ? ".norm" : "");
    const struct vkmm_tune *t = &mm->tune;
    if (kind > VKMM_MM_ID)
        return vkmm_make_fast(mm, type, kind, glu, fuse == VKMM_TILE_XQ8, err);
    if (kind == VKMM_MM || kind == VKMM_MM_ID) {
        bool id = kind == VKMM_MM_ID;
        uint32_t spec[8] = {
            t->mm_wg, t->mm_bm, t->mm_bn, t->mm_tm, t->mm_tn, id, id ? t->mm_lcap : 1, glu};
        return vk_pipe_create(mm->d, name, sh->mm, sh->mm_bytes, VKMM_N_BIND,
                              sizeof(struct vkmm_push), spec, 8, err);
    }
    static const uint32_t nt[] = {1, 2, 4, 8, 1};
    const bool blk = nt[kind] <= 2 && vkmm_soa_type(type); /* the block path's types */
    uint32_t spec[9] = {t->mv_wg,
                        vkmm_mv_rows(t, kind),
                        nt[kind],
                        kind == VKMM_MV_ID,
                        glu,
                        (fuse & VKMM_FUSE_ACC) != 0,
                        blk ? t->mv_unr : 1,
                        blk ? t->mv_soa : 0,
                        (fuse & VKMM_FUSE_NORM) != 0};
    return vk_pipe_create(mm->d, name, sh->mv, sh->mv_bytes, VKMM_N_BIND_MV,
                          sizeof(struct vkmm_push), spec, 9, err);
}

struct vk_pipe *vkmm_pipe(struct vkmm *mm, enum quant_type type, enum vkmm_kind kind, bool glu,
                          int fuse, struct strata_error *err) {
    STRATA_ASSERT(
        fuse >= 0 && fuse < VKMM_FUSE_N &&
        (fuse == 0 || kind <= VKMM_MV8 || (fuse == VKMM_TILE_XQ8 && vkmm_kind_dot(kind))));
    struct vk_pipe **slot = &mm->pipe[type][kind][glu][fuse];
    if (!*slot) {
        *slot = make_pipe(mm, type, kind, glu, fuse, err);
        if (*slot)
            mm->made_any = true;
    }
    return *slot;
}

int vkmm_prepare(struct vkmm *mm, enum quant_type type, struct strata_error *err) {
    if (!shader_of(type))
        return strata_error_set(err, STRATA_E_UNSUPPORTED, "vkmm: no GPU kernel for type %s",
                                quant_type_name(type));
    /* the matvec kinds and the tiled kinds of the type's path */
    const enum vkmm_kind tiled[2] = {vkmm_tiled_kind(&mm->tune, type, false),
                                     vkmm_tiled_kind(&mm->tune, type, true)};
    for (int k = 0; k < VKMM_KIND_COUNT; k++) {
        const bool small = k == VKMM_MM_DOT_S && tiled[0] == VKMM_MM_DOT && mm->tune.dot_s_below;
        if (k >= VKMM_MM && k != (int)tiled[0] && k != (int)tiled[1] && !small)
            continue;
        for (int g = 0; g < 2; g++)
            if (!vkmm_pipe(mm, type, (enum vkmm_kind)k, g, 0, err))
                return err ? err->code : STRATA_E_INTERNAL;
    }
    return 0;
}

int vkmm_status(struct vkmm *mm, struct strata_error *err) {
    int code = mm->err_code;
    if (code)
        strata_error_set(err, code, "%s", mm->err_msg);
    mm->err_code = 0;
    mm->err_msg[0] = '\0';
    return code;
}

void vkmm_latch(struct vkmm *mm, int code, const char *fmt, ...) {
    if (mm->err_code)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(mm->err_msg, sizeof mm->err_msg, fmt, ap);
    va_end(ap);
    mm->err_code = code;
}
