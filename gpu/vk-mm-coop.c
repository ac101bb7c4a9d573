/* gpu/vk-mm-coop.c: the tiled matmul's fast paths (gpu/vk-mm-impl.h): the
 * 8-bit integer-dot tiles (mm_dot.comp) and the cooperative-matrix tiles
 * (mm_coop.comp), their pipelines, shapes and the choice among them and the
 * f32 tiles of gpu/vk-mm.c, per device and type.
 *
 * The choice (vkmm_tune_paths): integer dot products where the device says
 * they are accelerated, for the types with an integer form; else the f32
 * tiles. Measured on the H200 (device tool, 2026-12-02, branch vkpre,
 * `gpu-bench MODEL -1 8 512 8 0 4300 /tmp/pc.bin MM`, pp512 best of 3):
 *   llama-2-7b Q4_0      f32 1,436  int-dot 2,183  coopmat 1,465 (64x64x64: 1,857)
 *   MoE 128x top-8 Q4_0  f32 1,222  int-dot 2,259  coopmat 7,772
 *   llama-3.1-8b Q4_K_M  f32 1,296  int-dot 1,865  coopmat 1,077
 *   qwen3-0.6b Q8_0      f32 12,391 int-dot 14,737 coopmat 13,312
 * The cooperative-matrix kernels are not chosen by "auto": on the H200 the
 * same run's tests/gpu/test-vk-mm gave them a normalised error of ~2, so
 * those speeds were no figures to trust. The cause was a shared array of
 * one f16 (mm_coop_body.glsl) that left the weight tile one element off its
 * 16-byte alignment; fixed, they pass (NMSE 3e-8 .. 2e-7) and on an H100
 * (device calls of 2026-12-06, same gpu-bench) run pp512 at 1,432 (7B, this
 * tile), 1,775 (64x64x64x2) and 1,420 (MoE) against int-dot's 2,175 and
 * 2,282: slower, so still forced only (vkmm_configure "coopmat"); a tile
 * that feeds the tensor cores faster is the work left. lavapipe has integer
 * dot products (emulated, not accelerated) and no cooperative matrix, so it
 * keeps the f32 tiles; the tests force each path it can run. The integer-dot
 * tiles were reworked since (dot_tiles below): 7B pp512 2,173 -> 2,812 on an
 * H100.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/vk-mm-impl.h"

/* glslc -mfmt=c output: one initializer list per (path, type) */
static const uint32_t spv_dot_q8_0[] =
#include "gpu/shaders/mm_dot_q8_0.spv.h"
    ;
static const uint32_t spv_dot_q4_0[] =
#include "gpu/shaders/mm_dot_q4_0.spv.h"
    ;
static const uint32_t spv_dot_q4_k[] =
#include "gpu/shaders/mm_dot_q4_k.spv.h"
    ;
static const uint32_t spv_dot_q5_k[] =
#include "gpu/shaders/mm_dot_q5_k.spv.h"
    ;
static const uint32_t spv_dot_q6_k[] =
#include "gpu/shaders/mm_dot_q6_k.spv.h"
    ;
static const uint32_t spv_mvdot_q8_0[] =
#include "gpu/shaders/mv_dot_q8_0.spv.h"
    ;
static const uint32_t spv_mvdot_q4_0[] =
#include "gpu/shaders/mv_dot_q4_0.spv.h"
    ;
static const uint32_t spv_mvdot_q4_k[] =
#include "gpu/shaders/mv_dot_q4_k.spv.h"
    ;
static const uint32_t spv_mvdot_q5_k[] =
#include "gpu/shaders/mv_dot_q5_k.spv.h"
    ;
static const uint32_t spv_mvdot_q6_k[] =
#include "gpu/shaders/mv_dot_q6_k.spv.h"
    ;
#if defined(STRATA_VKMM_COOP)
static const uint32_t spv_coop_f32[] =
#include "gpu/shaders/mm_coop_f32.spv.h"
    ;
static const uint32_t spv_coop_f16[] =
#include "gpu/shaders/mm_coop_f16.spv.h"
    ;
static const uint32_t spv_coop_bf16[] =
#include "gpu/shaders/mm_coop_bf16.spv.h"
    ;
static const uint32_t spv_coop_q8_0[] =
#include "gpu/shaders/mm_coop_q8_0.spv.h"
    ;
static const uint32_t spv_coop_q4_0[] =
#include "gpu/shaders/mm_coop_q4_0.spv.h"
    ;
static const uint32_t spv_coop_q4_k[] =
#include "gpu/shaders/mm_coop_q4_k.spv.h"
    ;
static const uint32_t spv_coop_q5_k[] =
#include "gpu/shaders/mm_coop_q5_k.spv.h"
    ;
static const uint32_t spv_coop_q6_k[] =
#include "gpu/shaders/mm_coop_q6_k.spv.h"
    ;
static const uint32_t spv_coop_mxfp4[] =
#include "gpu/shaders/mm_coop_mxfp4.spv.h"
    ;
static const uint32_t spv_coop_iq4_nl[] =
#include "gpu/shaders/mm_coop_iq4_nl.spv.h"
    ;
#endif

struct spv {
    const uint32_t *code;
    size_t bytes;
};
#define SPV(a)                                                                                     \
    (struct spv) {                                                                                 \
        a, sizeof a                                                                                \
    }

static struct spv dot_spv(enum quant_type type) {
    switch (type) {
    case QUANT_Q8_0:
        return SPV(spv_dot_q8_0);
    case QUANT_Q4_0:
        return SPV(spv_dot_q4_0);
    case QUANT_Q4_K:
        return SPV(spv_dot_q4_k);
    case QUANT_Q5_K:
        return SPV(spv_dot_q5_k);
    case QUANT_Q6_K:
        return SPV(spv_dot_q6_k);
    default:
        return (struct spv){NULL, 0};
    }
}

static struct spv mvdot_spv(enum quant_type type) {
    switch (type) {
    case QUANT_Q8_0:
        return SPV(spv_mvdot_q8_0);
    case QUANT_Q4_0:
        return SPV(spv_mvdot_q4_0);
    case QUANT_Q4_K:
        return SPV(spv_mvdot_q4_k);
    case QUANT_Q5_K:
        return SPV(spv_mvdot_q5_k);
    case QUANT_Q6_K:
        return SPV(spv_mvdot_q6_k);
    default:
        return (struct spv){NULL, 0};
    }
}

bool vkmm_q8x_ok(const struct vkmm *mm, enum quant_type type) {
    return mm->info->int_dot && mvdot_spv(type).code != NULL;
}

/* mv_dot.comp's pipeline into *slot (made once): nt tokens a pass (1:
 * the one-token forms, NT 1, rows of mv_rows1 a workgroup; else rows of
 * mv_rows). */
static struct vk_pipe *q8_make(struct vkmm *mm, struct vk_pipe **slot, enum quant_type type,
                               bool glu, bool id, bool xf, enum vkmm_q8_form form, int nt,
                               struct strata_error *err) {
    if (*slot)
        return *slot;
    if (!vkmm_q8x_ok(mm, type)) {
        strata_error_set(err, STRATA_E_UNSUPPORTED, "vkmm: no q8 matvec for %s on this device",
                         quant_type_name(type));
        return NULL;
    }
    const struct spv sp = mvdot_spv(type);
    char name[48], tok[16] = "";
    if (nt > 1)
        snprintf(tok, sizeof tok, "_%d", nt);
    snprintf(name, sizeof name, "%s.mv%s%s%s%s%s", quant_type_name(type), xf ? "xq" : "q8", tok,
             id ? "_id" : "", glu ? ".glu" : "",
             form == VKMM_Q8_ACC     ? ".acc"
             : form == VKMM_Q8_SPLIT ? ".split"
                                     : "");
    const uint32_t spec[8] = {mm->tune.mv_wg,
                              nt > 1 ? mm->tune.mv_rows : mm->tune.mv_rows1,
                              glu,
                              id,
                              xf,
                              form == VKMM_Q8_ACC,
                              form == VKMM_Q8_SPLIT,
                              (uint32_t)nt};
    *slot = vk_pipe_create(mm->d, name, sp.code, sp.bytes, VKMM_N_BIND_Q8, sizeof(struct vkmm_push),
                           spec, 8, err);
    if (*slot)
        mm->made_any = true;
    return *slot;
}

struct vk_pipe *vkmm_q8_pipe(struct vkmm *mm, enum quant_type type, bool glu, bool id, bool xf,
                             enum vkmm_q8_form form, struct strata_error *err) {
    return q8_make(mm, &mm->q8pipe[type][glu][id][xf][form], type, glu, id, xf, form, 1, err);
}

struct vk_pipe *vkmm_q8n_pipe(struct vkmm *mm, enum quant_type type, bool glu, bool acc, int nt,
                              struct strata_error *err) {
    STRATA_ASSERT(nt == 2 || nt == 4 || nt == 8);
    return q8_make(mm,
                   &mm->q8npipe[type][glu][acc][nt == 2   ? 0
                                                : nt == 4 ? 1
                                                          : 2],
                   type, glu, false, false, acc ? VKMM_Q8_ACC : VKMM_Q8_PLAIN, nt, err);
}

static struct spv coop_spv(enum quant_type type) {
#if defined(STRATA_VKMM_COOP)
    switch (type) {
    case QUANT_F32:
        return SPV(spv_coop_f32);
    case QUANT_F16:
        return SPV(spv_coop_f16);
    case QUANT_BF16:
        return SPV(spv_coop_bf16);
    case QUANT_Q8_0:
        return SPV(spv_coop_q8_0);
    case QUANT_Q4_0:
        return SPV(spv_coop_q4_0);
    case QUANT_Q4_K:
        return SPV(spv_coop_q4_k);
    case QUANT_Q5_K:
        return SPV(spv_coop_q5_k);
    case QUANT_Q6_K:
        return SPV(spv_coop_q6_k);
    case QUANT_MXFP4:
        return SPV(spv_coop_mxfp4);
    case QUANT_IQ4_NL:
        return SPV(spv_coop_iq4_nl);
    default:
        break;
    }
#else
    (void)type;
#endif
    return (struct spv){NULL, 0};
}

bool vkmm_coop_built(void) {
#if defined(STRATA_VKMM_COOP)
    return true;
#else
    return false;
#endif
}

bool vkmm_dot_type(enum quant_type type) {
    return dot_spv(type).code != NULL;
}

bool vkmm_path_ok(const struct vk_dev_info *in, enum quant_type type, enum vkmm_path path) {
    switch (path) {
    case VKMM_PATH_F32:
        return true;
    case VKMM_PATH_DOT:
        return in->int_dot && vkmm_dot_type(type);
    case VKMM_PATH_COOP:
        return in->coopmat_nv && in->subgroup_size >= 16 && coop_spv(type).code != NULL;
    default:
        return false;
    }
}

const char *vkmm_path_name(enum vkmm_path path) {
    static const char *names[VKMM_PATH_COUNT] = {"f32", "int-dot", "coopmat"};
    return path >= 0 && path < VKMM_PATH_COUNT ? names[path] : "?";
}

/* Shared memory of mm_coop_body.glsl for a tile with K steps of bk (glu:
 * the second weight tile and staging block), besides the pick list. */
static uint64_t coop_bytes(const struct vkmm_coop_tile *c, uint32_t sg, bool glu, uint32_t bk) {
    uint64_t nm = glu ? 2 : 1, lds = bk + 8;
    return 2 * lds * (nm * c->bm + c->bn) + 4ull * (c->wg / sg) * 256 * nm;
}

/* Shared memory of mm_dot_body.glsl's tile: two K steps, each nb blocks of
 * 32 levels (two uvec4) and two floats (a scale and a min or second scale)
 * per row slot and per token; besides the pick list. */
static uint64_t dot_bytes(const struct vkmm_dot_tile *c) {
    return 2ull * c->nb * (32 + 8) * (c->bm + c->bn);
}

/* Whether the shader can run the tile with a pick list of lcap: the lanes'
 * grid covers it, the fused form splits a lane's row slots into gate and up
 * halves (tm even), a lane stages at most 4 units of each side a step (the
 * registers its prefetch holds), and shared memory holds it. */
static bool dot_tile_ok(const struct vk_dev_info *in, const struct vkmm_dot_tile *c,
                        uint32_t lcap) {
    if (c->tm < 2 || c->tm % 2 || c->tn < 1 || c->tm * c->tn > 64 || c->bm % c->tm ||
        c->bn % c->tn || c->nb < 1 || c->nb > 4 || lcap < 1)
        return false;
    const uint64_t wg = (uint64_t)(c->bm / c->tm) * (c->bn / c->tn);
    return wg == c->wg && wg <= in->max_wg_invocations && (uint64_t)c->bm * c->nb <= 4 * wg &&
           (uint64_t)c->bn * c->nb <= 4 * wg &&
           dot_bytes(c) + 4ull * ((lcap + 3) / 4 * 4) + 16 + 64 <= in->max_shared_bytes;
}

/* The K step of a coopmat pipeline: the tile's, halved for the fused form
 * (two weight tiles) until it fits with a pick list of lcap; 0: it cannot. */
static uint32_t coop_bk(const struct vk_dev_info *in, const struct vkmm_coop_tile *c, bool glu,
                        uint32_t lcap) {
    uint32_t sg = in->subgroup_size ? in->subgroup_size : 32;
    uint32_t bk = c->bk;
    while (bk >= 16 && coop_bytes(c, sg, glu, bk) + 4ull * lcap + 64 > in->max_shared_bytes)
        bk = glu && bk > 16 && bk % 32 == 0 ? bk / 2 : 0;
    return bk >= 16 ? bk : 0;
}

static bool coop_tile_ok(const struct vk_dev_info *in, const struct vkmm_coop_tile *c,
                         uint32_t lcap) {
    uint32_t sg = in->subgroup_size ? in->subgroup_size : 32;
    if (c->wg == 0 || c->wg % sg || c->wg > in->max_wg_invocations || c->sgm == 0 ||
        (c->wg / sg) % c->sgm || c->bk == 0 || c->bk % 16 || c->bk > 256 || lcap < 1)
        return false;
    uint32_t sgn = c->wg / sg / c->sgm;
    return c->bm % (16 * c->sgm) == 0 && c->bn % (16 * sgn) == 0 && coop_bk(in, c, false, lcap) &&
           coop_bk(in, c, true, lcap);
}

/* Picks listed per window: the shared memory a tile leaves, up to 4,096 (a
 * 512-token top-8 prefill in one window: a window's picks of one expert
 * share its tiles), a multiple of the lanes. */
static uint32_t lcap_left(const struct vk_dev_info *in, uint64_t used, uint32_t wg) {
    uint64_t avail = in->max_shared_bytes > used + 64 ? in->max_shared_bytes - used - 64 : 0;
    uint64_t n = avail / 4 < 4096 ? avail / 4 : 4096;
    n -= wg ? n % wg : 0;
    return (uint32_t)n;
}

static void set_lcaps(const struct vk_dev_info *in, struct vkmm_tune *t) {
    uint32_t sg = in->subgroup_size ? in->subgroup_size : 32;
    t->coop_lcap = lcap_left(in, coop_bytes(&t->coop_id, sg, false, t->coop_id.bk), t->coop_id.wg);
    t->dot_lcap = lcap_left(in, dot_bytes(&t->dot_id), t->dot_id.wg);
}

/* Integer-dot tiles, the first of each list that fits the device. Measured
 * on an H100 (two device calls of 2026-12-06, `gpu-bench MODEL -1 8 512 1 0
 * 4300 PC int-dot:TILE`, pp512 tok/s, mm_dot_body.glsl of this tree against
 * the 64x64 tiles of 4x4 a lane, one block a step and no prefetch it
 * replaced, "before", in the same call):
 *   7B Q4_0, plain tile (BMxBNxTMxTNxNB): before 2,172; 128x128x8x4x2 (512
 *   lanes) 2,812; 128x128x8x8x2 2,770; 128x128x4x8x2 2,713; 128x128x8x8x1
 *   2,542; 128x64x8x4x2 2,495; 64x64x4x4x2 2,410; 128x128x4x4x2 (1,024
 *   lanes) 1,665: the wider lane tile and two blocks a step each pay, up to
 *   the lanes a workgroup holds.
 *   MoE 128 experts top-8 Q4_0, expert-indexed tile: 128x64x8x4x2 3,048;
 *   64x64x4x4x2 2,904 (before 2,253); on 12 of its layers 64x32x4x4x2
 *   10,917 against 64x64's 11,782: tiles of more tokens than an expert's
 *   ~32 picks a chunk still win.
 *   qwen3-0.6b Q8_0 (matrices of 1,024 to 3,072 rows): 128 x 128 tiles gave
 *   13,847 against before's 15,013: a 1,024-row matrix of 512 tokens is 32
 *   such tiles for 132 SMs. So a plain dispatch of fewer than 128 tiles
 *   (the 7B's 4,096 rows give 32 x 4) takes the next tile of the list
 *   (dot_s).
 * All of these ran with the plain tiles' accumulators in local memory (the
 * driver's choice while tile() was called straight from main():
 * mm_tiles.glsl). The list is not measured again since the fix; just
 * before it the default and 8 x 8 at 256 lanes tied at 3,287 and 3,299
 * (bench/README.md, "H100, 2026-12-07 (fourth session)"). */
static const struct vkmm_dot_tile dot_tiles[] = {
    {512, 128, 128, 8, 4, 2}, /* 40 KB: NVIDIA's 48 KB */
    {256, 64, 64, 4, 4, 2},   /* 20 KB: lavapipe's 32 KB */
    {128, 32, 32, 2, 4, 1},
};
static const struct vkmm_dot_tile dot_id_tiles[] = {
    {256, 128, 64, 8, 4, 2}, /* 30 KB beside a pick list of 4,096 */
    {256, 64, 64, 4, 4, 2},
    {128, 32, 32, 2, 4, 1},
};
#define DOT_S_BELOW 128

static void pick_dot(const struct vk_dev_info *in, struct vkmm_tune *t) {
    const size_t n = sizeof dot_tiles / sizeof dot_tiles[0];
    size_t i = 0;
    while (i + 1 < n && !dot_tile_ok(in, &dot_tiles[i], 1))
        i++;
    t->dot = dot_tiles[i];
    t->dot_s = dot_tiles[i + 1 < n && dot_tile_ok(in, &dot_tiles[i + 1], 1) ? i + 1 : i];
    t->dot_s_below = DOT_S_BELOW;
    t->dot_id = dot_id_tiles[sizeof dot_id_tiles / sizeof dot_id_tiles[0] - 1];
    for (size_t k = 0; k < sizeof dot_id_tiles / sizeof dot_id_tiles[0]; k++) {
        const struct vkmm_dot_tile *c = &dot_id_tiles[k];
        if (dot_tile_ok(in, c, lcap_left(in, dot_bytes(c), c->wg))) {
            t->dot_id = *c;
            break;
        }
    }
}

/* Coopmat tiles: 4 subgroups in a 2 x 2 grid (128 lanes on NVIDIA), each
 * 2 x 2 fragments of 16 x 16 (64 x 64 a workgroup); K steps of 128 for the
 * plain form (whole units of every type, 39 KB), 64 for the expert-indexed
 * one (22.5 KB beside a 16 KB pick list of 4,096), halved for the fused
 * forms. */
void vkmm_tune_paths(const struct vk_dev_info *in, struct vkmm_tune *t) {
    uint32_t sg = in->subgroup_size ? in->subgroup_size : 32;
    t->coop = (struct vkmm_coop_tile){4 * sg, 64, 64, 128, 2};
    t->coop_id = (struct vkmm_coop_tile){4 * sg, 64, 64, 64, 2};
    pick_dot(in, t);
    set_lcaps(in, t);
    const bool coop_ok =
        coop_tile_ok(in, &t->coop, 1) && coop_tile_ok(in, &t->coop_id, t->coop_lcap);
    const bool dot_ok = dot_tile_ok(in, &t->dot, 1) && dot_tile_ok(in, &t->dot_id, t->dot_lcap) &&
                        dot_tile_ok(in, &t->dot_s, 1);
    for (int q = 0; q < QUANT_TYPE_COUNT; q++) {
        enum quant_type type = (enum quant_type)q;
        enum vkmm_path path = VKMM_PATH_F32;
        (void)coop_ok; /* coopmat: forced only (vkmm_configure), see above */
        if (in->int_dot_accel && dot_ok && vkmm_path_ok(in, type, VKMM_PATH_DOT))
            path = VKMM_PATH_DOT;
        t->path[q] = (uint8_t)path;
    }
}

bool vkmm_tune_paths_ok(const struct vk_dev_info *in, const struct vkmm_tune *t) {
    bool any_coop = false, any_dot = false;
    for (int q = 0; q < QUANT_TYPE_COUNT; q++) {
        if (t->path[q] >= VKMM_PATH_COUNT)
            return false;
        any_coop |= t->path[q] == VKMM_PATH_COOP;
        any_dot |= t->path[q] == VKMM_PATH_DOT;
    }
    if (any_coop &&
        (!coop_tile_ok(in, &t->coop, 1) || !coop_tile_ok(in, &t->coop_id, t->coop_lcap)))
        return false;
    if (any_dot && (!dot_tile_ok(in, &t->dot, 1) || !dot_tile_ok(in, &t->dot_id, t->dot_lcap) ||
                    !dot_tile_ok(in, &t->dot_s, 1)))
        return false;
    return true;
}

enum vkmm_kind vkmm_tiled_kind(const struct vkmm_tune *t, enum quant_type type, bool id) {
    switch ((enum vkmm_path)t->path[type]) {
    case VKMM_PATH_DOT:
        return id ? VKMM_MM_ID_DOT : VKMM_MM_DOT;
    case VKMM_PATH_COOP:
        return id ? VKMM_MM_ID_COOP : VKMM_MM_COOP;
    default:
        return id ? VKMM_MM_ID : VKMM_MM;
    }
}

void vkmm_tile_shape(const struct vkmm_tune *t, enum vkmm_kind kind, bool glu, uint32_t *bm,
                     uint32_t *bn) {
    const struct vkmm_coop_tile *c = kind == VKMM_MM_ID_COOP ? &t->coop_id : &t->coop;
    const struct vkmm_dot_tile *d = kind == VKMM_MM_ID_DOT  ? &t->dot_id
                                    : kind == VKMM_MM_DOT_S ? &t->dot_s
                                                            : &t->dot;
    if (kind == VKMM_MM_COOP || kind == VKMM_MM_ID_COOP) {
        *bm = c->bm;
        *bn = c->bn;
    } else if (kind == VKMM_MM_DOT || kind == VKMM_MM_ID_DOT || kind == VKMM_MM_DOT_S) {
        *bm = glu ? d->bm / 2 : d->bm; /* row slots: gate and up halves */
        *bn = d->bn;
    } else {
        *bm = t->mm_bm;
        *bn = t->mm_bn;
    }
}

struct vk_pipe *vkmm_make_fast(struct vkmm *mm, enum quant_type type, enum vkmm_kind kind, bool glu,
                               bool xq8, struct strata_error *err) {
    const struct vkmm_tune *t = &mm->tune;
    const bool id = kind == VKMM_MM_ID_DOT || kind == VKMM_MM_ID_COOP;
    const bool coop = kind == VKMM_MM_COOP || kind == VKMM_MM_ID_COOP;
    const enum vkmm_path path = coop ? VKMM_PATH_COOP : VKMM_PATH_DOT;
    char name[48];
    snprintf(name, sizeof name, "%s.%s%s%s", quant_type_name(type), vkmm_kind_name(kind),
             glu ? ".glu" : "", xq8 ? ".xq8" : "");
    if (coop && xq8) {
        strata_error_set(err, STRATA_E_INVALID, "vkmm: %s: q8 x is an integer-dot form", name);
        return NULL;
    }
    if (!vkmm_path_ok(mm->info, type, path)) {
        strata_error_set(err, STRATA_E_UNSUPPORTED, "vkmm: %s: no %s path for %s on this device%s",
                         name, vkmm_path_name(path), quant_type_name(type),
                         coop && !vkmm_coop_built() ? " (not compiled in)" : "");
        return NULL;
    }
    if (coop) {
        const struct vkmm_coop_tile *c = id ? &t->coop_id : &t->coop;
        const uint32_t sg = mm->info->subgroup_size, lcap = id ? t->coop_lcap : 1;
        uint32_t spec[9] = {c->wg, c->bm, c->bn, coop_bk(mm->info, c, glu, lcap), c->sgm, id,
                            lcap,  glu,   sg};
        struct spv s = coop_spv(type);
        return vk_pipe_create(mm->d, name, s.code, s.bytes, 5, sizeof(struct vkmm_push), spec, 9,
                              err);
    }
    const struct vkmm_dot_tile *d = id ? &t->dot_id : kind == VKMM_MM_DOT_S ? &t->dot_s : &t->dot;
    uint32_t spec[10] = {d->wg, d->bm, d->bn, d->tm, d->tn, id, id ? t->dot_lcap : 1,
                         glu,   d->nb, xq8};
    struct spv s = dot_spv(type);
    return vk_pipe_create(mm->d, name, s.code, s.bytes, 5, sizeof(struct vkmm_push), spec, 10, err);
}

/* "BMxBNxBKxSGM[xSGN]" -> a tile of SGM x SGN subgroups (SGN 2 when not
 * given). */
static bool parse_tile(const char *s, uint32_t sg, struct vkmm_coop_tile *c) {
    unsigned bm, bn, bk, sgm, sgn = 2;
    int n = sscanf(s, "%ux%ux%ux%ux%u", &bm, &bn, &bk, &sgm, &sgn);
    if (n < 4)
        return false;
    *c = (struct vkmm_coop_tile){sgm * sgn * sg, bm, bn, bk, sgm};
    return true;
}

/* "BMxBNxTMxTNxNB" -> an integer-dot tile. */
static bool parse_dot(const char *s, struct vkmm_dot_tile *c) {
    unsigned bm, bn, tm, tn, nb;
    int n = 0;
    if (sscanf(s, "%ux%ux%ux%ux%u%n", &bm, &bn, &tm, &tn, &nb, &n) != 5 || (s[n] && s[n] != '/') ||
        tm == 0 || tn == 0)
        return false;
    *c = (struct vkmm_dot_tile){(bm / tm) * (bn / tn), bm, bn, tm, tn, nb};
    return true;
}

/* The matvec's launch shape, "WGxR1[xR]" (lanes, rows of a 1-2 token and
 * expert-indexed workgroup, rows of a 4-8 token one): the benchmarks' knob
 * for trying shapes on a device (bench/README.md, "bench/gpu"). */
static bool parse_mv(const char *s, struct vkmm_tune *t) {
    unsigned wg = 0, r1 = 0, r = 0;
    int n = 0, got = sscanf(s, "%ux%u%n", &wg, &r1, &n);
    if (got != 2)
        return false;
    if (s[n] == 'x') {
        int m = 0;
        if (sscanf(s + n + 1, "%u%n", &r, &m) != 1)
            return false;
        n += 1 + m;
    } else {
        r = t->mv_rows;
    }
    unsigned unr = t->mv_unr, soa = t->mv_soa, wcap = t->mv_wcap;
    while (s[n] == ':') { /* ":uN" N blocks a lane at once, ":soa" scales-then-quants rows,
                             ":wN" the q8 matvec on at most N workgroups */
        int m = 0;
        if (strncmp(s + n + 1, "soa", 3) == 0) {
            soa = 1;
            n += 4;
        } else if (sscanf(s + n + 1, "u%u%n", &unr, &m) == 1) {
            n += 1 + m;
        } else if (sscanf(s + n + 1, "w%u%n", &wcap, &m) == 1) {
            n += 1 + m;
        } else {
            return false;
        }
    }
    if (s[n] != '\0' || wg < 1 || wg > 1024 || r1 < 1 || r1 > 8 || r < 1 || r > 8 || unr < 1 ||
        unr > 4)
        return false;
    t->mv_unr = unr;
    t->mv_soa = soa;
    t->mv_wcap = wcap;
    t->mv_wg = wg;
    t->mv_rows1 = r1;
    t->mv_rows = r;
    return true;
}

int vkmm_configure(struct vkmm *mm, const char *spec, struct strata_error *err) {
    if (!spec || !*spec || strcmp(spec, "auto") == 0)
        return 0;
    struct vkmm_tune t = mm->tune;
    const struct vk_dev_info *in = mm->info;
    /* "PATH,mv=WGxR1[xR]" or "mv=...": the matvec shape too (vkmm_set_tune
     * checks it against the device) */
    char head[64];
    const char *mv = strncmp(spec, "mv=", 3) == 0 ? spec + 3 : NULL;
    if (!mv) {
        const char *c = strstr(spec, ",mv=");
        if (c && (size_t)(c - spec) < sizeof head) {
            memcpy(head, spec, (size_t)(c - spec));
            head[c - spec] = '\0';
            mv = c + 4;
            spec = head;
        }
    } else {
        spec = "auto";
    }
    if (mv && !parse_mv(mv, &t))
        return strata_error_set(err, STRATA_E_CONFIG,
                                "vkmm: matvec shape \"%s\": expected WGxR1[xR][:uN][:soa] (lanes "
                                "1..1024, rows 1..8, 1..4 blocks a lane)",
                                mv);
    if (strcmp(spec, "auto") == 0)
        return vkmm_set_tune(mm, &t, err);
    enum vkmm_path want;
    const char *rest = NULL;
    if (strcmp(spec, "f32") == 0)
        want = VKMM_PATH_F32;
    else if (strncmp(spec, "int-dot", 7) == 0 && (spec[7] == '\0' || spec[7] == ':')) {
        want = VKMM_PATH_DOT;
        rest = spec[7] == ':' ? spec + 8 : NULL;
    } else if (strncmp(spec, "coopmat", 7) == 0 && (spec[7] == '\0' || spec[7] == ':')) {
        want = VKMM_PATH_COOP;
        rest = spec[7] == ':' ? spec + 8 : NULL;
    } else {
        return strata_error_set(err, STRATA_E_CONFIG,
                                "vkmm: prefill matmul \"%s\": expected auto, f32, "
                                "int-dot[:BMxBNxTMxTNxNB[/BMxBNxTMxTNxNB]] or "
                                "coopmat[:BMxBNxBKxSGM[xSGN][/BMxBNxBKxSGM[xSGN]]]",
                                spec);
    }
    if (rest && want == VKMM_PATH_DOT) { /* "int-dot:PLAIN[/EXPERT-INDEXED]" */
        const char *slash = strchr(rest, '/');
        if (!parse_dot(rest, &t.dot) || (slash && !parse_dot(slash + 1, &t.dot_id)))
            return strata_error_set(err, STRATA_E_CONFIG, "vkmm: bad int-dot tile \"%s\"", rest);
        t.dot_s_below = 0; /* the tile given, whatever the dispatch */
        set_lcaps(in, &t);
    } else if (rest) {
        uint32_t sg = in->subgroup_size ? in->subgroup_size : 32;
        const char *slash = strchr(rest, '/');
        if (!parse_tile(rest, sg, &t.coop) || (slash && !parse_tile(slash + 1, sg, &t.coop_id)))
            return strata_error_set(err, STRATA_E_CONFIG, "vkmm: bad coopmat tile \"%s\"", rest);
        if (!slash)
            t.coop_id = t.coop;
        set_lcaps(in, &t);
    }
    bool any = false;
    for (int q = 0; q < QUANT_TYPE_COUNT; q++) {
        bool ok = vkmm_path_ok(in, (enum quant_type)q, want);
        t.path[q] = (uint8_t)(ok ? want : VKMM_PATH_F32);
        any |= ok && (want != VKMM_PATH_F32 || q == QUANT_F32);
    }
    if (!any)
        return strata_error_set(err, STRATA_E_UNSUPPORTED,
                                "vkmm: prefill matmul %s: not on this device%s",
                                vkmm_path_name(want),
                                want == VKMM_PATH_COOP && !vkmm_coop_built()
                                    ? " (glslc lacked GL_NV_cooperative_matrix)"
                                    : "");
    return vkmm_set_tune(mm, &t, err);
}

void vkmm_describe(const struct vkmm *mm, char *buf, size_t cap) {
    static const enum vkmm_path order[] = {VKMM_PATH_COOP, VKMM_PATH_DOT, VKMM_PATH_F32};
    size_t n = 0;
    buf[0] = '\0';
    for (int o = 0; o < 3; o++) {
        const char *sep = n ? "; " : "";
        bool first = true;
        for (int q = 0; q < QUANT_TYPE_COUNT; q++) {
            enum quant_type type = (enum quant_type)q;
            if (mm->tune.path[q] != order[o] || !vkmm_supports(type, 256) || n + 1 >= cap)
                continue;
            if (first)
                n += (size_t)snprintf(buf + n, cap - n, "%s%s:", sep, vkmm_path_name(order[o]));
            if (n + 1 < cap)
                n += (size_t)snprintf(buf + n, cap - n, " %s", quant_type_name(type));
            first = false;
        }
    }
}
