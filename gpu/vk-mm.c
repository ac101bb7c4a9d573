/* gpu/vk-mm.c: the matrix kernels' pipelines, tuning and dispatch (gpu/vk-mm.h).
 *
 * Each type has two shaders (mv_<type>.comp, mm_<type>.comp) and six
 * pipelines: the matvec specialised for 1, 2, 4 and 8 tokens a pass (the
 * accumulators live in registers, so the token count is a specialization
 * constant: a batched decode of 3 tokens runs the 4-token pipeline with the
 * fourth repeating the third and not written), the expert-indexed matvec,
 * and the tiled matmul. Pipelines are made at the first vkmm_prepare or use
 * of their type (lavapipe compiles each through LLVM, so making all sixty
 * up front would cost start-up for types a model never has).
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

struct vkmm {
    struct vk_dev *d; /* borrowed */
    const struct vk_dev_info *info;
    struct vkmm_tune tune;
    struct vk_pipe *pipe[QUANT_TYPE_COUNT][VKMM_KIND_COUNT];
    bool made_any;
    int err_code; /* first latched error, 0 when none */
    char err_msg[STRATA_ERROR_MSG_MAX];
};

static uint32_t clamp_u32(uint32_t v, uint32_t lo, uint32_t hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* Matvec: WG = 4 subgroups (128 lanes on NVIDIA's 32-wide subgroups, clamped
 * to 32..256) over NR = 2 rows. For the 7B's 4096 x 4096 Q4_0 projections on
 * the H200 that is 2048 workgroups of 128 lanes: 262,144 lanes, about what
 * its 132 SMs keep resident (2,048 each), each lane 4 units of a row, so the
 * loads in flight cover HBM latency; 32-lane workgroups would leave the SMs
 * a quarter full (Hopper runs at most 32 workgroups an SM). Two rows share
 * each x load. Matmul: 64 x 64 tiles, 256 lanes of 4 x 4 outputs, 16.6 KB
 * of shared memory; half the tile where a device offers less than that or
 * fewer than 256 lanes. */
void vkmm_tune_for(const struct vk_dev_info *in, struct vkmm_tune *t) {
    uint32_t maxwg = in->max_wg_invocations ? in->max_wg_invocations : 128;
    uint32_t sg = in->subgroup_size ? in->subgroup_size : 32;
    t->mv_wg = clamp_u32(4 * sg, 32, 256);
    if (t->mv_wg > maxwg)
        t->mv_wg = maxwg;
    t->mv_rows = 2;
    t->mm_bm = 64;
    t->mm_bn = 64;
    t->mm_tm = 4;
    t->mm_tn = 4;
    if (maxwg < 256 || in->max_shared_bytes < 2 * 32 * 65 * 4) {
        t->mm_bm = 32;
        t->mm_bn = 32;
        t->mm_tm = 2;
        t->mm_tn = 4; /* (32/2) x (32/4) = 128 lanes, 8.4 KB */
    }
    t->mm_wg = (t->mm_bm / t->mm_tm) * (t->mm_bn / t->mm_tn);
}

int vkmm_init(struct vk_dev *d, struct vkmm **out, struct strata_error *err) {
    *out = NULL;
    struct vkmm *mm = calloc(1, sizeof *mm);
    if (!mm)
        return strata_error_set(err, STRATA_E_NOMEM, "vkmm: out of memory");
    mm->d = d;
    mm->info = vk_dev_info(d);
    vkmm_tune_for(mm->info, &mm->tune);
    *out = mm;
    return 0;
}

void vkmm_free(struct vkmm *mm) {
    if (!mm)
        return;
    for (int t = QUANT_TYPE_COUNT - 1; t >= 0; t--)
        for (int k = VKMM_KIND_COUNT - 1; k >= 0; k--)
            vk_pipe_free(mm->d, mm->pipe[t][k]);
    free(mm);
}

int vkmm_set_tune(struct vkmm *mm, const struct vkmm_tune *t, struct strata_error *err) {
    if (mm->made_any)
        return strata_error_set(err, STRATA_E_INVALID, "vkmm: tuning after pipelines were made");
    const struct vk_dev_info *in = mm->info;
    uint32_t maxwg = in->max_wg_invocations;
    bool ok = t->mv_wg >= 1 && t->mv_wg <= maxwg && t->mv_rows >= 1 && t->mv_rows <= 8 &&
              t->mm_tm >= 1 && t->mm_tn >= 1 && t->mm_bm % t->mm_tm == 0 &&
              t->mm_bn % t->mm_tn == 0 &&
              t->mm_wg == (t->mm_bm / t->mm_tm) * (t->mm_bn / t->mm_tn) && t->mm_wg <= maxwg &&
              32ull * (t->mm_bm + t->mm_bn + 2) * 4 <= in->max_shared_bytes &&
              4ull * t->mv_rows * VKMM_MV_MAX_TOK * t->mv_wg <= in->max_shared_bytes;
    if (!ok)
        return strata_error_set(err, STRATA_E_INVALID, "vkmm: tuning the shaders cannot run");
    mm->tune = *t;
    return 0;
}

bool vkmm_supports(enum quant_type type, int64_t n_cols) {
    if (!shader_of(type) || n_cols <= 0 || n_cols > (1 << 24))
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

static const char *kind_name(enum vkmm_kind k) {
    static const char *names[VKMM_KIND_COUNT] = {"mv1", "mv2", "mv4", "mv8", "mv_id", "mm"};
    return names[k];
}

static struct vk_pipe *make_pipe(struct vkmm *mm, enum quant_type type, enum vkmm_kind kind,
                                 struct strata_error *err) {
    const struct vkmm_shader *sh = shader_of(type);
    char name[48];
    snprintf(name, sizeof name, "%s.%s", quant_type_name(type), kind_name(kind));
    const struct vkmm_tune *t = &mm->tune;
    if (kind == VKMM_MM) {
        uint32_t spec[5] = {t->mm_wg, t->mm_bm, t->mm_bn, t->mm_tm, t->mm_tn};
        return vk_pipe_create(mm->d, name, sh->mm, sh->mm_bytes, 4, sizeof(struct vkmm_push), spec,
                              5, err);
    }
    static const uint32_t nt[] = {1, 2, 4, 8, 1};
    uint32_t spec[4] = {t->mv_wg, t->mv_rows, nt[kind], kind == VKMM_MV_ID};
    return vk_pipe_create(mm->d, name, sh->mv, sh->mv_bytes, 4, sizeof(struct vkmm_push), spec, 4,
                          err);
}

static struct vk_pipe *get_pipe(struct vkmm *mm, enum quant_type type, enum vkmm_kind kind,
                                struct strata_error *err) {
    if (!mm->pipe[type][kind]) {
        mm->pipe[type][kind] = make_pipe(mm, type, kind, err);
        if (mm->pipe[type][kind])
            mm->made_any = true;
    }
    return mm->pipe[type][kind];
}

int vkmm_prepare(struct vkmm *mm, enum quant_type type, struct strata_error *err) {
    if (!shader_of(type))
        return strata_error_set(err, STRATA_E_UNSUPPORTED, "vkmm: no GPU kernel for type %s",
                                quant_type_name(type));
    for (int k = 0; k < VKMM_KIND_COUNT; k++)
        if (!get_pipe(mm, type, (enum vkmm_kind)k, err))
            return err ? err->code : STRATA_E_INTERNAL;
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

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void
latch(struct vkmm *mm, int code, const char *fmt, ...) {
    if (mm->err_code)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(mm->err_msg, sizeof mm->err_msg, fmt, ap);
    va_end(ap);
    mm->err_code = code;
}

/* ---- recording --------------------------------------------------------------- */

/* Rows of one expert (the whole matrix when it is not a stack). */
static int64_t expert_rows(const struct vk_wmat *w) {
    return w->n_expert > 1 ? w->n_rows / w->n_expert : w->n_rows;
}

/* 0 when w can be recorded: a supported type and shape, pieces in row order
 * covering every row (whole experts of a stack), each a binding the device
 * allows. Else latches the reason. */
static int check_wmat(struct vkmm *mm, const struct vk_wmat *w, const char *what) {
    const struct vk_dev_info *in = mm->info;
    if (!w || !vkmm_supports(w->type, w->n_cols)) {
        latch(mm, STRATA_E_UNSUPPORTED, "vkmm %s: no GPU kernel for %s rows of %lld", what,
              w ? quant_type_name(w->type) : "?", w ? (long long)w->n_cols : 0LL);
        return -1;
    }
    if (w->n_rows < 1 || w->row_bytes != quant_row_size(w->type, w->n_cols) ||
        (w->n_expert > 1 && w->n_rows % w->n_expert != 0) || w->n_piece < 1 || !w->piece) {
        latch(mm, STRATA_E_INVALID,
              "vkmm %s: bad matrix (%lld rows, %zu bytes a row, %lld experts)", what,
              (long long)w->n_rows, w->row_bytes, (long long)w->n_expert);
        return -1;
    }
    const int64_t er = expert_rows(w);
    int64_t next = 0;
    for (int i = 0; i < w->n_piece; i++) {
        const struct vk_wpiece *pc = &w->piece[i];
        uint64_t bytes = (uint64_t)pc->n_rows * w->row_bytes, range = (bytes + 3) & ~3ull;
        if (!pc->buf || pc->row0 != next || pc->n_rows < 1 ||
            (w->n_expert > 1 && (pc->row0 % er || pc->n_rows % er)) ||
            range > in->max_storage_range || range > UINT32_MAX ||
            pc->off % (in->min_storage_align ? in->min_storage_align : 1) ||
            pc->off + range > vk_buf_size(pc->buf)) {
            latch(mm, STRATA_E_INVALID,
                  "vkmm %s: piece %d (rows %lld + %lld at byte %llu) is not a binding of whole "
                  "rows (experts) after the previous piece",
                  what, i, (long long)pc->row0, (long long)pc->n_rows, (unsigned long long)pc->off);
            return -1;
        }
        next += pc->n_rows;
    }
    if (next != w->n_rows) {
        latch(mm, STRATA_E_INVALID, "vkmm %s: pieces cover %lld of %lld rows", what,
              (long long)next, (long long)w->n_rows);
        return -1;
    }
    return 0;
}

static struct vk_bind piece_bind(const struct vk_wmat *w, const struct vk_wpiece *pc) {
    uint64_t bytes = (uint64_t)pc->n_rows * w->row_bytes;
    return (struct vk_bind){pc->buf, pc->off, (bytes + 3) & ~3ull};
}

static struct vk_pipe *pipe_or_latch(struct vkmm *mm, enum quant_type type, enum vkmm_kind kind) {
    struct strata_error e = {0};
    struct vk_pipe *p = get_pipe(mm, type, kind, &e);
    if (!p)
        latch(mm, e.code ? e.code : STRATA_E_INTERNAL, "vkmm: pipeline %s.%s: %s",
              quant_type_name(type), kind_name(kind), e.message);
    return p;
}

/* Workgroups for `groups` row groups as gx * gy (gx within the device's
 * first limit: 65,535 on lavapipe, so a 151,936-row output matrix still
 * fits); the shader flattens them back. */
static int split_groups(struct vkmm *mm, uint64_t groups, uint32_t *gx, uint32_t *gy) {
    uint64_t mx = mm->info->max_wg_count[0] ? mm->info->max_wg_count[0] : 65535;
    uint64_t my = mm->info->max_wg_count[1] ? mm->info->max_wg_count[1] : 65535;
    *gx = (uint32_t)(groups < mx ? groups : mx);
    uint64_t y = (groups + *gx - 1) / *gx;
    if (y > my) {
        latch(mm, STRATA_E_RANGE, "vkmm: %llu row groups exceed the device's workgroup counts",
              (unsigned long long)groups);
        return -1;
    }
    *gy = (uint32_t)y;
    return 0;
}

/* One dispatch over rows [0, pu->n_rows) of binding wb (from pu->w_base). */
static void record_rows(struct vkmm *mm, enum quant_type type, struct vk_bind wb, struct vk_bind x,
                        struct vk_bind y, const struct vkmm_push *pu) {
    const struct vkmm_tune *t = &mm->tune;
    struct vk_bind binds[4] = {wb, x, y, x}; /* binding 3 (sel) unused: any buffer */
    uint32_t gx, gy;
    if (pu->n_tok <= VKMM_MV_MAX_TOK) {
        enum vkmm_kind kind = pu->n_tok == 1   ? VKMM_MV1
                              : pu->n_tok == 2 ? VKMM_MV2
                              : pu->n_tok <= 4 ? VKMM_MV4
                                               : VKMM_MV8;
        struct vk_pipe *p = pipe_or_latch(mm, type, kind);
        if (!p || split_groups(mm, (pu->n_rows + t->mv_rows - 1) / t->mv_rows, &gx, &gy))
            return;
        vk_dispatch(mm->d, p, binds, pu, gx, gy, 1);
        return;
    }
    struct vk_pipe *p = pipe_or_latch(mm, type, VKMM_MM);
    if (!p)
        return;
    uint64_t bx = (pu->n_rows + t->mm_bm - 1) / t->mm_bm,
             by = (pu->n_tok + t->mm_bn - 1) / t->mm_bn;
    if (bx > mm->info->max_wg_count[0] || by > mm->info->max_wg_count[1]) {
        latch(mm, STRATA_E_RANGE, "vkmm: %u rows x %u tokens exceed the device's workgroup counts",
              pu->n_rows, pu->n_tok);
        return;
    }
    vk_dispatch(mm->d, p, binds, pu, (uint32_t)bx, (uint32_t)by, 1);
}

void vkmm_matmul(struct vkmm *mm, const struct vk_wmat *w, int64_t expert, struct vk_bind x,
                 struct vk_bind y, int64_t n_tok) {
    if (check_wmat(mm, w, "matmul"))
        return;
    const int64_t n_exp = w->n_expert > 1 ? w->n_expert : 1;
    if (n_tok < 1 || (uint64_t)n_tok > UINT32_MAX / (uint64_t)w->n_cols || expert >= n_exp ||
        (expert < 0 && expert != -1)) {
        latch(mm, STRATA_E_INVALID, "vkmm matmul: bad call (%lld tokens, expert %lld of %lld)",
              (long long)n_tok, (long long)expert, (long long)n_exp);
        return;
    }
    struct vkmm_push pu = {0};
    pu.n_cols = (uint32_t)w->n_cols;
    pu.row_bytes = (uint32_t)w->row_bytes;
    pu.n_tok = (uint32_t)n_tok;
    pu.x_stride = (uint32_t)w->n_cols;
    if (expert < 0 || n_exp == 1) { /* the whole matrix: one dispatch per piece */
        pu.y_stride = (uint32_t)w->n_rows;
        for (int i = 0; i < w->n_piece; i++) {
            pu.n_rows = (uint32_t)w->piece[i].n_rows;
            pu.y_col0 = (uint32_t)w->piece[i].row0;
            record_rows(mm, w->type, piece_bind(w, &w->piece[i]), x, y, &pu);
        }
        return;
    }
    const int64_t er = expert_rows(w), r0 = expert * er;
    for (int i = 0; i < w->n_piece; i++) {
        const struct vk_wpiece *pc = &w->piece[i];
        if (r0 < pc->row0 || r0 >= pc->row0 + pc->n_rows)
            continue;
        pu.n_rows = (uint32_t)er;
        pu.y_stride = (uint32_t)er;
        pu.w_base = (uint32_t)((uint64_t)(r0 - pc->row0) * w->row_bytes);
        record_rows(mm, w->type, piece_bind(w, pc), x, y, &pu);
        return;
    }
}

void vkmm_matmul_id(struct vkmm *mm, const struct vk_wmat *w, struct vk_bind x, bool x_per_pick,
                    struct vk_bind sel, int k, int64_t n_tok, struct vk_bind y) {
    if (check_wmat(mm, w, "matmul_id"))
        return;
    const int64_t n_pairs = n_tok >= 1 && n_tok <= INT32_MAX ? n_tok * (int64_t)k : 0;
    if (k < 1 || n_pairs < 1 || (uint64_t)n_pairs > UINT32_MAX / (uint64_t)w->n_cols) {
        latch(mm, STRATA_E_INVALID, "vkmm matmul_id: bad call (%lld tokens, k %d)",
              (long long)n_tok, k);
        return;
    }
    struct vk_pipe *p = pipe_or_latch(mm, w->type, VKMM_MV_ID);
    uint32_t gx, gy;
    const int64_t er = expert_rows(w);
    if (!p || split_groups(mm, (uint64_t)(er + mm->tune.mv_rows - 1) / mm->tune.mv_rows, &gx, &gy))
        return;
    const uint32_t mz = mm->info->max_wg_count[2] ? mm->info->max_wg_count[2] : 65535;
    struct vkmm_push pu = {0};
    pu.n_rows = (uint32_t)er;
    pu.n_cols = (uint32_t)w->n_cols;
    pu.row_bytes = (uint32_t)w->row_bytes;
    pu.n_tok = 1;
    pu.y_stride = (uint32_t)er;
    pu.x_stride = (uint32_t)w->n_cols;
    pu.k = (uint32_t)k;
    pu.x_per_pick = x_per_pick;
    pu.expert_bytes = (uint32_t)((uint64_t)er * w->row_bytes);
    pu.n_pairs = (uint32_t)n_pairs;
    for (int i = 0; i < w->n_piece; i++) {
        const struct vk_wpiece *pc = &w->piece[i];
        pu.e0 = (uint32_t)(pc->row0 / er);
        pu.e1 = (uint32_t)((pc->row0 + pc->n_rows) / er);
        struct vk_bind binds[4] = {piece_bind(w, pc), x, y, sel};
        for (int64_t p0 = 0; p0 < n_pairs; p0 += mz) { /* gz within the device's third limit */
            pu.pair0 = (uint32_t)p0;
            int64_t nz = n_pairs - p0 < mz ? n_pairs - p0 : mz;
            vk_dispatch(mm->d, p, binds, &pu, gx, gy, (uint32_t)nz);
        }
    }
}
