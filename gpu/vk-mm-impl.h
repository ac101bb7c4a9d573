/* gpu/vk-mm-impl.h: internals of the matrix kernels shared by gpu/vk-mm.c
 * and tests/gpu/test-vk-mm.c: the push-constant block (mirrored by
 * gpu/shaders/mm_common.glsl), the kernel kinds and the tuning. Not for
 * callers: they use gpu/vk-mm.h.
 *
 * Threading: as gpu/vk-mm.h.
 */
#ifndef STRATA_VK_MM_IMPL_H
#define STRATA_VK_MM_IMPL_H

#include <stddef.h>

#include "engine/core/error.h"
#include "gpu/vk-mm.h"

/* The push constants of every mv_*.comp / mm_*.comp (offsets in
 * mm_common.glsl's Push block). */
struct vkmm_push {
    uint32_t n_rows;       /*  0 rows this dispatch computes */
    uint32_t n_cols;       /*  4 */
    uint32_t row_bytes;    /*  8 */
    uint32_t n_tok;        /* 12 tokens (1 for the expert-indexed matvec) */
    uint32_t w_base;       /* 16 byte offset of the first row in binding 0 */
    uint32_t y_stride;     /* 20 floats between rows of y */
    uint32_t y_col0;       /* 24 column of y the first row writes */
    uint32_t x_stride;     /* 28 floats between rows of x */
    uint32_t k;            /* 32 picks per token */
    uint32_t x_per_pick;   /* 36 */
    uint32_t e0, e1;       /* 40, 44 experts held by binding 0 */
    uint32_t expert_bytes; /* 48 */
    uint32_t n_pairs;      /* 52 */
    uint32_t pair0;        /* 56 first pair of this dispatch (gl_WorkGroupID.z + pair0) */
    uint32_t w_base2;      /* 60 byte offset of the up matrix's first row in binding 4 */
};
_Static_assert(sizeof(struct vkmm_push) == 64, "mm_common.glsl Push block");
_Static_assert(offsetof(struct vkmm_push, expert_bytes) == 48, "mm_common.glsl Push block");

/* Kernel kinds per type: the matvec for 1, 2, 4 or 8 tokens a pass, its
 * expert-indexed form, the tiled matmul and its expert-indexed form. */
enum vkmm_kind {
    VKMM_MV1 = 0,
    VKMM_MV2,
    VKMM_MV4,
    VKMM_MV8,
    VKMM_MV_ID,
    VKMM_MM,
    VKMM_MM_ID, /* the tiled matmul over the picks of each expert (MoE prefill) */
    VKMM_KIND_COUNT,
};

#define VKMM_MV_MAX_TOK 8 /* n_tok above this takes the tiled matmul (also for matmul_id) */

/* Launch shapes, chosen once from the device (vkmm_init). */
struct vkmm_tune {
    uint32_t mv_wg;   /* lanes of a matvec workgroup */
    uint32_t mv_rows; /* rows of a matvec workgroup */
    uint32_t mm_wg;   /* lanes of a matmul workgroup: (bm / tm) * (bn / tn) */
    uint32_t mm_bm, mm_bn, mm_tm, mm_tn;
    uint32_t mm_lcap; /* picks an expert-indexed matmul workgroup lists at once */
};

struct vkmm {
    struct vk_dev *d; /* borrowed */
    const struct vk_dev_info *info;
    struct vkmm_tune tune;
    struct vk_pipe *pipe[QUANT_TYPE_COUNT][VKMM_KIND_COUNT][2]; /* [type][kind][fused gate+up] */
    bool made_any;
    int err_code; /* first latched error, 0 when none */
    char err_msg[STRATA_ERROR_MSG_MAX];
};

/* The tuning vkmm_init picks for a device (exposed for the tests). */
void vkmm_tune_for(const struct vk_dev_info *in, struct vkmm_tune *t);
/* Overrides the tuning of mm (before any pipeline is made; tests try a
 * second shape with it). Returns STRATA_E_INVALID for a shape the shaders
 * cannot run or once a pipeline exists. */
int vkmm_set_tune(struct vkmm *mm, const struct vkmm_tune *t, struct strata_error *err);

/* The pipeline of (type, kind, fused), made at first use; NULL and err on
 * failure. */
struct vk_pipe *vkmm_pipe(struct vkmm *mm, enum quant_type type, enum vkmm_kind kind, bool glu,
                          struct strata_error *err);
const char *vkmm_kind_name(enum vkmm_kind k);
/* Latches the first error of the record calls (vkmm_status returns it). */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
void vkmm_latch(struct vkmm *mm, int code, const char *fmt, ...);

#endif
