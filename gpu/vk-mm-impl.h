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
    uint32_t tok0;         /* 64 matvec: first token (row of x and y) of this dispatch */
    float tail_eps;        /* 68 matvec TAIL (vkmm_matmul_acc_norm): the norm's epsilon */
    uint32_t split1;  /* 72 mv_dot SPLIT (vkmm_matmul_q8x_multi): the second matrix's first row */
    uint32_t split2;  /* 76 ... the third's (n_rows: no third) */
    uint32_t w_base3; /* 80 SPLIT: byte offset of the third matrix's first row in binding 0 */
};
_Static_assert(sizeof(struct vkmm_push) == 84, "mm_common.glsl Push block");
_Static_assert(offsetof(struct vkmm_push, w_base3) == 80, "mm_common.glsl Push block");

/* The forms of mv_dot.comp besides glu, id and xf: plain, with the
 * residual add (ACC), over two or three matrices (SPLIT). */
enum vkmm_q8_form { VKMM_Q8_PLAIN, VKMM_Q8_ACC, VKMM_Q8_SPLIT, VKMM_Q8_FORMS };
/* mv_dot.comp's bindings: mm_common.glsl's 0-4, the residual (5), the
 * second and third matrices' y under SPLIT (6, 7). */
#define VKMM_N_BIND_Q8 8
_Static_assert(offsetof(struct vkmm_push, expert_bytes) == 48, "mm_common.glsl Push block");

/* The matvec's forms (mv_body.glsl ACC, TAIL): plain, adding into a
 * residual, and adding into it then the RMSNorm of the sum in the last
 * workgroup (VKMM_FUSE_ACC | VKMM_FUSE_NORM, vkmm_matmul_acc_norm). */
#define VKMM_FUSE_ACC 1
#define VKMM_FUSE_NORM 2
#define VKMM_FUSE_N 4
/* The integer-dot tiles' one form in the same slot (the fuse index of
 * VKMM_MM_DOT, _DOT_S, _ID_DOT): x given as q8 blocks (mm_dot_body.glsl
 * XQ8, vkmm_matmul_tq8). */
#define VKMM_TILE_XQ8 1
/* Bindings of a matvec pipeline (mv_body.glsl: 0-4 as every matrix
 * kernel's, 5 the residual, 6-9 the norm of TAIL): every binds array of a
 * matvec dispatch has this many entries. */
#define VKMM_N_BIND_MV 10

/* Kernel kinds per type: the matvec for 1, 2, 4 or 8 tokens a pass, its
 * expert-indexed form, the tiled matmul and its expert-indexed form. */
enum vkmm_kind {
    VKMM_MV1 = 0,
    VKMM_MV2,
    VKMM_MV4,
    VKMM_MV8,
    VKMM_MV_ID,
    VKMM_MM,
    VKMM_MM_ID,      /* the tiled matmul over the picks of each expert (MoE prefill) */
    VKMM_MM_DOT,     /* the tiled matmul on 8-bit integer dot products (mm_dot.comp) */
    VKMM_MM_ID_DOT,  /* its expert-indexed form */
    VKMM_MM_COOP,    /* the tiled matmul on cooperative matrices (mm_coop.comp) */
    VKMM_MM_ID_COOP, /* its expert-indexed form */
    VKMM_MM_DOT_S,   /* VKMM_MM_DOT on the smaller tile for a dispatch of few tiles */
    VKMM_KIND_COUNT,
};

/* The integer-dot kinds (VKMM_TILE_XQ8's). */
static inline bool vkmm_kind_dot(enum vkmm_kind k) {
    return k == VKMM_MM_DOT || k == VKMM_MM_DOT_S || k == VKMM_MM_ID_DOT;
}

/* The tiled matmul's paths (prefill): f32 FMA tiles (mm_<type>.comp, every
 * device), 8-bit integer dot products on q8 activations (the block types
 * with an integer form, vkmm_dot_type), f16 cooperative matrices (devices
 * with vk_dev_info coopmat_nv, when glslc had GL_NV_cooperative_matrix). */
enum vkmm_path {
    VKMM_PATH_F32 = 0,
    VKMM_PATH_DOT,
    VKMM_PATH_COOP,
    VKMM_PATH_COUNT,
};

/* A cooperative-matrix tile: wg lanes as (wg / subgroup) subgroups in an
 * sgm x (the rest) grid over bm rows x bn tokens, K steps of bk. */
struct vkmm_coop_tile {
    uint32_t wg, bm, bn, bk, sgm;
};

/* An integer-dot tile (mm_dot_body.glsl): bm row slots (the fused form: bm
 * / 2 rows of gate and of up) x bn tokens, tm x tn a lane, so wg = (bm / tm)
 * * (bn / tn) lanes; K steps of nb q8 blocks (32 elements each). */
struct vkmm_dot_tile {
    uint32_t wg, bm, bn, tm, tn, nb;
};

#define VKMM_MV_MAX_TOK 8 /* tokens of one matvec pass; above: the tiled matmul_id */
/* Plain matmuls of up to this many tokens run as 8-token matvec passes (the
 * weights read once per 8 tokens), above it the tiled matmul: on the H200
 * (lead's run of a39bda8, 7B Q4_0) batched decode of 8 sequences gave 596
 * tok/s through the matvec and of 32 only 362 through 64 x 64 tiles that
 * were half empty. */
#define VKMM_MV_CHUNK_TOK 32

/* Launch shapes, chosen once from the device (vkmm_init). */
struct vkmm_tune {
    uint32_t mv_wg;    /* lanes of a matvec workgroup */
    uint32_t mv_rows;  /* rows of a matvec workgroup of 4 or 8 tokens */
    uint32_t mv_rows1; /* of 1 or 2 tokens, and of the expert-indexed matvec */
    uint32_t mv_unr;   /* blocks a lane loads at once on the block path (mv_body.glsl UNR) */
    uint32_t mv_soa;   /* 1: the block path reads scales-then-quants rows (vkmm_soa_row) */
    uint32_t mv_wcap;  /* the q8 matvec's (mv_dot.comp) workgroups at most; 0: one a row group */
    uint32_t mm_wg;    /* lanes of a matmul workgroup: (bm / tm) * (bn / tn) */
    uint32_t mm_bm, mm_bn, mm_tm, mm_tn;
    uint32_t mm_lcap;               /* picks an expert-indexed matmul workgroup lists at once */
    uint8_t path[QUANT_TYPE_COUNT]; /* enum vkmm_path of each type's tiled matmul */
    struct vkmm_coop_tile coop, coop_id; /* plain and expert-indexed coopmat tiles */
    struct vkmm_dot_tile dot, dot_id;    /* plain and expert-indexed integer-dot tiles */
    struct vkmm_dot_tile dot_s;          /* the plain one for a dispatch of few tiles */
    uint32_t dot_s_below;         /* a plain dispatch of fewer dot tiles takes dot_s (0: never) */
    uint32_t coop_lcap, dot_lcap; /* mm_lcap of the coopmat and integer-dot forms */
};

struct vkmm {
    struct vk_dev *d; /* borrowed */
    const struct vk_dev_info *info;
    struct vkmm_tune tune;
    /* [type][kind][fused gate+up][VKMM_FUSE_* bits: the matvec kinds only] */
    struct vk_pipe *pipe[QUANT_TYPE_COUNT][VKMM_KIND_COUNT][2][VKMM_FUSE_N];
    /* the integer-dot matvec over q8 activations (mv_dot.comp):
     * [type][glu][id][x f32, quantized in the lanes][enum vkmm_q8_form] */
    struct vk_pipe *q8pipe[QUANT_TYPE_COUNT][2][2][2][VKMM_Q8_FORMS];
    /* mv_dot.comp's passes of 2, 4 and 8 tokens (NT): [type][glu][acc][nt 2, 4, 8] */
    struct vk_pipe *q8npipe[QUANT_TYPE_COUNT][2][2][3];
    /* the last-workgroup counters of vkmm_matmul_acc_norm (33 uints 64
     * bytes apart, zero between dispatches: mv_body.glsl's tail resets
     * them) */
    struct vk_buf *tail_cnt;
    bool made_any;
    int err_code; /* first latched error, 0 when none */
    char err_msg[STRATA_ERROR_MSG_MAX];
};

/* Rows of one workgroup of a matvec kind. */
static inline uint32_t vkmm_mv_rows(const struct vkmm_tune *t, enum vkmm_kind k) {
    return k == VKMM_MV1 || k == VKMM_MV2 || k == VKMM_MV_ID ? t->mv_rows1 : t->mv_rows;
}

/* The tuning vkmm_init picks for a device (exposed for the tests). */
void vkmm_tune_for(const struct vk_dev_info *in, struct vkmm_tune *t);
/* Overrides the tuning of mm (before any pipeline is made; tests try a
 * second shape with it). Returns STRATA_E_INVALID for a shape the shaders
 * cannot run or once a pipeline exists. */
int vkmm_set_tune(struct vkmm *mm, const struct vkmm_tune *t, struct strata_error *err);

/* ---- the fast tiled paths (gpu/vk-mm-coop.c) ---- */

/* True when `type` has an integer form (mm_dot.comp): Q8_0, Q4_0, Q4_K,
 * Q5_K, Q6_K. */
bool vkmm_dot_type(enum quant_type type);
/* Whether the device (and this build) can run `path` for `type`. */
bool vkmm_path_ok(const struct vk_dev_info *in, enum quant_type type, enum vkmm_path path);
const char *vkmm_path_name(enum vkmm_path path);
/* The paths, coopmat tiles and pick-list sizes vkmm_tune_for picks. */
void vkmm_tune_paths(const struct vk_dev_info *in, struct vkmm_tune *t);
/* Whether t's coopmat and integer-dot shapes can run on the device. */
bool vkmm_tune_paths_ok(const struct vk_dev_info *in, const struct vkmm_tune *t);
/* The tiled kind (plain or expert-indexed) of `type` under the tuning. */
enum vkmm_kind vkmm_tiled_kind(const struct vkmm_tune *t, enum quant_type type, bool id);
/* Output rows and tokens of one workgroup's tile of a tiled kind (glu: its
 * fused gate + up form). */
void vkmm_tile_shape(const struct vkmm_tune *t, enum vkmm_kind kind, bool glu, uint32_t *bm,
                     uint32_t *bn);
/* Makes the pipeline of a VKMM_MM_DOT .. VKMM_MM_DOT_S kind (xq8: a dot
 * kind's q8-x form). */
struct vk_pipe *vkmm_make_fast(struct vkmm *mm, enum quant_type type, enum vkmm_kind kind, bool glu,
                               bool xq8, struct strata_error *err);

/* The pipeline of (type, kind, fused gate+up, VKMM_FUSE_ACC or 0), made at
 * first use; NULL and err on failure. fuse is 0 for the tiled kinds but
 * VKMM_TILE_XQ8 for a dot kind's q8-x form. */
struct vk_pipe *vkmm_pipe(struct vkmm *mm, enum quant_type type, enum vkmm_kind kind, bool glu,
                          int fuse, struct strata_error *err);
const char *vkmm_kind_name(enum vkmm_kind k);
/* How a one-token matvec takes x: f32 (mv_body.glsl), q8 blocks
 * (mv_dot.comp), or f32 quantized to q8 blocks in the lanes (mv_dot.comp
 * XF). */
enum vkmm_xform { VKMM_X_F32, VKMM_X_Q8, VKMM_X_F32Q };

/* The mv_dot.comp pipeline of (type, fused gate+up, expert-indexed, x f32
 * quantized in the lanes, form), made at first use (gpu/vk-mm-coop.c);
 * NULL and err where the type has none or the device no integer dot
 * product. */
struct vk_pipe *vkmm_q8_pipe(struct vkmm *mm, enum quant_type type, bool glu, bool id, bool xf,
                             enum vkmm_q8_form form, struct strata_error *err);
/* Its pass of nt (2, 4 or 8) tokens over q8 x (NT; plain or ACC; rows of
 * tune.mv_rows a workgroup). */
struct vk_pipe *vkmm_q8n_pipe(struct vkmm *mm, enum quant_type type, bool glu, bool acc, int nt,
                              struct strata_error *err);
/* Latches the first error of the record calls (vkmm_status returns it). */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
void vkmm_latch(struct vkmm *mm, int code, const char *fmt, ...);

#endif
