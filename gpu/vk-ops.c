/* gpu/vk-ops.c: the pipelines of gpu/vk-ops.h and the ops other than the KV
 * cache's (gpu/vk-ops-attn.c): embedding gather, row copies, the
 * elementwise ops, RMSNorm and softmax, RoPE, MoE routing, argmax and
 * sampling. Each records one dispatch (the gather one per matrix piece)
 * with its push constants; shapes are checked by asserts (a caller bug),
 * since the backend validated the model's shapes at load. */
#include "gpu/vk-ops-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const uint32_t spv_eltwise[] =
#include "gpu/shaders/op_eltwise.spv.h"
    ;
static const uint32_t spv_copy_rows[] =
#include "gpu/shaders/op_copy_rows.spv.h"
    ;
static const uint32_t spv_rows[] =
#include "gpu/shaders/op_rows.spv.h"
    ;
static const uint32_t spv_rmsnorm[] =
#include "gpu/shaders/op_rmsnorm.spv.h"
    ;
static const uint32_t spv_rope[] =
#include "gpu/shaders/op_rope.spv.h"
    ;
static const uint32_t spv_embed[] =
#include "gpu/shaders/op_embed.spv.h"
    ;
static const uint32_t spv_moe_route[] =
#include "gpu/shaders/op_moe_route.spv.h"
    ;
static const uint32_t spv_argmax[] =
#include "gpu/shaders/op_argmax.spv.h"
    ;
static const uint32_t spv_sample[] =
#include "gpu/shaders/op_sample.spv.h"
    ;
static const uint32_t spv_kv_write[] =
#include "gpu/shaders/op_kv_write.spv.h"
    ;
static const uint32_t spv_attn_split[] =
#include "gpu/shaders/op_attn_split.spv.h"
    ;
static const uint32_t spv_rope_kv[] =
#include "gpu/shaders/op_rope_kv.spv.h"
    ;
static const uint32_t spv_attn_prefill[] =
#include "gpu/shaders/op_attn_prefill.spv.h"
    ;

/* Push blocks, in the order of each shader's `layout(push_constant)`. */
struct push_eltwise {
    uint32_t n, n_cols, mode; /* mode: 0 add, 1 add_bias, 2 swiglu, 3 add_gated */
};
_Static_assert(sizeof(struct push_eltwise) == 12, "op_eltwise.comp");
struct push_copy_rows {
    uint32_t n_cols, n, n_tiles;
};
_Static_assert(sizeof(struct push_copy_rows) == 12, "op_copy_rows.comp");
struct push_rows {
    uint32_t n_cols, mode, has_w; /* mode: 0 rmsnorm, 1 softmax */
    float eps;
    uint32_t n_rows;
};
_Static_assert(sizeof(struct push_rows) == 20, "op_rows.comp");
struct push_rmsnorm {
    uint32_t n4, has_w;
    float eps;
    uint32_t n_rows;
};
_Static_assert(sizeof(struct push_rmsnorm) == 16, "op_rmsnorm.comp");
struct push_rope {
    uint32_t n_head, head_dim, n_rot, mode;
    float theta_scale, freq_scale, ext_factor, mscale, corr0, corr1;
    uint32_t has_ff, n_tok;
};
_Static_assert(sizeof(struct push_rope) == 48, "op_rope.comp");
struct push_embed {
    uint32_t type, n_cols, row_bytes, n_tiles, n;
    int32_t row0, n_rows, n_rows_all;
    uint32_t zero_outside;
};
_Static_assert(sizeof(struct push_embed) == 36, "op_embed.comp");
struct push_route {
    uint32_t n_expert, k, norm_topk;
    float scale;
    uint32_t n_tok;
};
_Static_assert(sizeof(struct push_route) == 20, "op_moe_route.comp");
struct push_argmax {
    uint32_t n_vocab, n_rows;
};
_Static_assert(sizeof(struct push_argmax) == 8, "op_argmax.comp");
struct push_sample {
    uint32_t n_vocab, top_k;
    float top_p, min_p, temperature;
    uint32_t n_rows;
};
_Static_assert(sizeof(struct push_sample) == 24, "op_sample.comp");

/* Push sizes of the KV kernels (their structs are in gpu/vk-ops-attn.c). */
#define PUSH_KV_WRITE 56
#define PUSH_ATTN_SPLIT 76
#define PUSH_ATTN_PREFILL 64
#define PUSH_ROPE_KV 112

void vkops_grid(uint64_t n, uint32_t *gx, uint32_t *gy) {
    STRATA_ASSERT(n >= 1 && n <= 65535ull * 65535ull);
    *gx = n < 65535 ? (uint32_t)n : 65535u;
    *gy = (uint32_t)((n + *gx - 1) / *gx);
}

static void dispatch_linear(struct vkops *o, const struct vk_pipe *p, const struct vk_bind *b,
                            const void *push, uint64_t n_groups) {
    uint32_t gx, gy;
    vkops_grid(n_groups, &gx, &gy);
    vk_dispatch(o->dev, p, b, push, gx, gy, 1);
}

struct pipe_desc {
    const char *name;
    const uint32_t *spv;
    size_t bytes;
    int n_bind;
    uint32_t push;
    size_t field; /* offset of the struct vk_pipe * in struct vkops */
};

#define PIPE(nm, arr, nb, pb)                                                                      \
    { "op_" #nm, arr, sizeof arr, nb, pb, offsetof(struct vkops, nm) }

int vkops_init(struct vk_dev *d, struct vkops **out, struct strata_error *err) {
    const struct pipe_desc pipes[] = {
        PIPE(eltwise, spv_eltwise, 3, sizeof(struct push_eltwise)),
        PIPE(copy_rows, spv_copy_rows, 3, sizeof(struct push_copy_rows)),
        PIPE(rows, spv_rows, 3, sizeof(struct push_rows)),
        PIPE(rmsnorm, spv_rmsnorm, 4, sizeof(struct push_rmsnorm)),
        PIPE(rope, spv_rope, 3, sizeof(struct push_rope)),
        PIPE(embed, spv_embed, 3, sizeof(struct push_embed)),
        PIPE(moe_route, spv_moe_route, 3, sizeof(struct push_route)),
        PIPE(argmax, spv_argmax, 2, sizeof(struct push_argmax)),
        PIPE(sample, spv_sample, 3, sizeof(struct push_sample)),
        PIPE(kv_write, spv_kv_write, 9, PUSH_KV_WRITE),
        PIPE(attn_split, spv_attn_split, 11, PUSH_ATTN_SPLIT),
        PIPE(rope_kv, spv_rope_kv, 13, PUSH_ROPE_KV),
    };
    *out = NULL;
    const struct vk_dev_info *in = vk_dev_info(d);
    if (!in->subgroup_arith)
        return strata_error_set(err, STRATA_E_UNSUPPORTED,
                                "vkops: %s has no subgroup arithmetic in compute shaders",
                                in->name);
    /* the attention kernels sum a K row's dot over 8 lanes by shuffles, and
     * the reductions keep one shared slot per subgroup, 128 at most
     * (op_common.glsl): subgroups of a multiple of 8 (lavapipe 8, NVIDIA 32,
     * AMD 32/64) and workgroups of 256 */
    if (in->subgroup_size < 8 || in->subgroup_size % 8 != 0 || in->max_wg_invocations < 256)
        return strata_error_set(err, STRATA_E_UNSUPPORTED,
                                "vkops: %s has subgroups of %u and workgroups of %u invocations "
                                "(needs a multiple of 8 and 256)",
                                in->name, in->subgroup_size, in->max_wg_invocations);
    struct vkops *o = calloc(1, sizeof *o);
    if (!o)
        return strata_error_set(err, STRATA_E_NOMEM, "vkops: out of memory");
    o->dev = d;
    for (size_t i = 0; i < sizeof pipes / sizeof pipes[0]; i++) {
        const struct pipe_desc *p = &pipes[i];
        /* the vocabulary kernels' workgroup size (constant_id 0) */
        const uint32_t wide =
            in->max_wg_invocations >= 1024 && in->max_wg_size[0] >= 1024 && in->subgroup_size >= 8
                ? 1024
                : 256;
        const bool vocab = p->spv == spv_argmax || p->spv == spv_sample;
        struct vk_pipe *pp = vk_pipe_create(d, p->name, p->spv, p->bytes, p->n_bind, p->push,
                                            vocab ? &wide : NULL, vocab ? 1 : 0, err);
        if (!pp) {
            vkops_free(o);
            return err ? err->code : STRATA_E_IO;
        }
        *(struct vk_pipe **)((char *)o + p->field) = pp;
    }
    /* STRATA_VK_NORM_Q8=2pass: the two-pass q8 norm at every width (Q8 = 2;
     * the benchmarks' baseline for the one-pass form) */
    const char *nq = getenv("STRATA_VK_NORM_Q8");
    const uint32_t q8_mode = nq && strcmp(nq, "2pass") == 0 ? 2u : 1u;
    o->norm_q8_1pass = q8_mode == 1u;
    o->rmsnorm_q8 = vk_pipe_create(d, "op_rmsnorm.q8", spv_rmsnorm, sizeof spv_rmsnorm, 4,
                                   sizeof(struct push_rmsnorm), &q8_mode, 1, err);
    const uint32_t quant_mode = 3;
    if (o->rmsnorm_q8)
        o->quant_q8 = vk_pipe_create(d, "op_quant_q8", spv_rmsnorm, sizeof spv_rmsnorm, 4,
                                     sizeof(struct push_rmsnorm), &quant_mode, 1, err);
    if (!o->rmsnorm_q8 || !o->quant_q8) {
        vkops_free(o);
        return err ? err->code : STRATA_E_IO;
    }
    /* the prefill kernel sums a row's score over 8 lanes by shuffles */
    if (in->subgroup_size >= 8 && in->subgroup_size % 8 == 0) {
        /* STRATA_VK_ATTN_ORDER=tile: the (tile, KV head) grid of before
         * (op_attn_prefill.comp LATE = 0), the benchmarks' baseline */
        const char *ao = getenv("STRATA_VK_ATTN_ORDER");
        o->attn_late = !(ao && strcmp(ao, "tile") == 0);
        const uint32_t late = o->attn_late;
        o->attn_prefill =
            vk_pipe_create(d, "op_attn_prefill", spv_attn_prefill, sizeof spv_attn_prefill, 9,
                           PUSH_ATTN_PREFILL, &late, 1, err);
        if (!o->attn_prefill) {
            vkops_free(o);
            return err ? err->code : STRATA_E_IO;
        }
    }
    *out = o;
    return 0;
}

void vkops_free(struct vkops *o) {
    if (!o)
        return;
    /* reverse creation order */
    vk_pipe_free(o->dev, o->attn_prefill);
    vk_pipe_free(o->dev, o->quant_q8);
    vk_pipe_free(o->dev, o->rmsnorm_q8);
    vk_pipe_free(o->dev, o->attn_rope);
    vk_pipe_free(o->dev, o->rope_kv);
    vk_pipe_free(o->dev, o->attn_split);
    vk_pipe_free(o->dev, o->kv_write);
    vk_pipe_free(o->dev, o->sample);
    vk_pipe_free(o->dev, o->argmax);
    vk_pipe_free(o->dev, o->moe_route);
    vk_pipe_free(o->dev, o->embed);
    vk_pipe_free(o->dev, o->rope);
    vk_pipe_free(o->dev, o->rmsnorm);
    vk_pipe_free(o->dev, o->rows);
    vk_pipe_free(o->dev, o->copy_rows);
    vk_pipe_free(o->dev, o->eltwise);
    free(o);
}

/* ---- gather -------------------------------------------------------------- */

bool vkops_embed_supports(enum quant_type type, int64_t n_cols) {
    switch (type) {
    case QUANT_F32:
    case QUANT_F16:
    case QUANT_BF16:
        return n_cols >= 1;
    case QUANT_Q8_0:
    case QUANT_Q4_0:
        return n_cols >= 32 && n_cols % 32 == 0;
    case QUANT_Q4_K:
    case QUANT_Q5_K:
    case QUANT_Q6_K:
        return n_cols >= 256 && n_cols % 256 == 0;
    default:
        return false;
    }
}

void vkops_embed(struct vkops *o, const struct vkops_rows *w, struct vk_bind ids, int n,
                 struct vk_bind out) {
    STRATA_ASSERT(vkops_embed_supports(w->type, w->n_cols) && w->n_piece >= 1 && n >= 0);
    STRATA_ASSERT(w->row_bytes <= UINT32_MAX && w->n_rows <= INT32_MAX);
    if (n == 0)
        return;
    const uint32_t n_tiles = (uint32_t)((w->n_cols + 255) / 256);
    for (int i = 0; i < w->n_piece; i++) {
        const struct vkops_piece *pc = &w->piece[i];
        STRATA_ASSERT((uint64_t)pc->n_rows * w->row_bytes <= UINT32_MAX);
        const struct push_embed push = {
            .type = (uint32_t)w->type,
            .n_cols = (uint32_t)w->n_cols,
            .row_bytes = (uint32_t)w->row_bytes,
            .n_tiles = n_tiles,
            .n = (uint32_t)n,
            .row0 = (int32_t)pc->row0,
            .n_rows = (int32_t)pc->n_rows,
            .n_rows_all = (int32_t)w->n_rows,
            .zero_outside = i == 0,
        };
        const struct vk_bind b[3] = {pc->data, ids, out};
        dispatch_linear(o, o->embed, b, &push, (uint64_t)n * n_tiles);
    }
}

void vkops_copy_rows(struct vkops *o, struct vk_bind src, struct vk_bind ids, int n, int64_t n_cols,
                     struct vk_bind dst) {
    STRATA_ASSERT(n >= 0 && n_cols >= 1 && n_cols <= UINT32_MAX);
    if (n == 0)
        return;
    const struct push_copy_rows push = {(uint32_t)n_cols, (uint32_t)n,
                                        (uint32_t)((n_cols + 255) / 256)};
    const struct vk_bind b[3] = {src, ids, dst};
    dispatch_linear(o, o->copy_rows, b, &push, (uint64_t)n * push.n_tiles);
}

/* ---- elementwise and rows ---------------------------------------------- */

static void eltwise(struct vkops *o, uint32_t mode, struct vk_bind a, struct vk_bind b,
                    struct vk_bind c, int64_t n_rows, int64_t n_cols) {
    STRATA_ASSERT(n_rows >= 0 && n_cols >= 1 && (uint64_t)(n_rows * n_cols) <= UINT32_MAX);
    if (n_rows == 0)
        return;
    const struct push_eltwise push = {(uint32_t)(n_rows * n_cols), (uint32_t)n_cols, mode};
    const struct vk_bind bb[3] = {a, b, c};
    dispatch_linear(o, o->eltwise, bb, &push, (push.n + 255) / 256);
}

void vkops_add(struct vkops *o, struct vk_bind x, struct vk_bind y, int64_t n_rows,
               int64_t n_cols) {
    eltwise(o, 0, x, y, y, n_rows, n_cols);
}

void vkops_add_bias(struct vkops *o, struct vk_bind y, struct vk_bind b, int64_t n_rows,
                    int64_t n_cols) {
    eltwise(o, 1, y, b, b, n_rows, n_cols);
}

void vkops_swiglu(struct vkops *o, struct vk_bind g, struct vk_bind u, struct vk_bind y,
                  int64_t n_rows, int64_t n_cols) {
    eltwise(o, 2, y, g, u, n_rows, n_cols);
}

void vkops_add_gated(struct vkops *o, struct vk_bind out, struct vk_bind s, struct vk_bind gate,
                     int64_t n_rows, int64_t n_cols) {
    eltwise(o, 3, out, s, gate, n_rows, n_cols);
}

static void rows(struct vkops *o, uint32_t mode, struct vk_bind x, struct vk_bind w, bool has_w,
                 struct vk_bind y, int64_t n_rows, int64_t n_cols, float eps) {
    STRATA_ASSERT(n_rows >= 0 && n_cols >= 1 && (uint64_t)(n_rows * n_cols) <= UINT32_MAX);
    if (n_rows == 0)
        return;
    const struct push_rows push = {(uint32_t)n_cols, mode, has_w, eps, (uint32_t)n_rows};
    const struct vk_bind b[3] = {x, has_w ? w : x, y};
    dispatch_linear(o, o->rows, b, &push, (uint64_t)n_rows);
}

void vkops_rmsnorm(struct vkops *o, struct vk_bind x, struct vk_bind w, bool has_w,
                   struct vk_bind y, int64_t n_rows, int64_t n_cols, float eps) {
    /* vec4 rows (op_rmsnorm.comp) where the width and the bindings allow */
    const bool v4 =
        n_cols % 4 == 0 && x.off % 16 == 0 && y.off % 16 == 0 && (!has_w || w.off % 16 == 0);
    if (!v4 || n_rows == 0) {
        rows(o, 0, x, w, has_w, y, n_rows, n_cols, eps);
        return;
    }
    STRATA_ASSERT(n_rows > 0 && (uint64_t)(n_rows * n_cols) <= UINT32_MAX);
    const struct push_rmsnorm push = {(uint32_t)(n_cols / 4), has_w, eps, (uint32_t)n_rows};
    const struct vk_bind b[4] = {x, has_w ? w : x, y, y};
    dispatch_linear(o, o->rmsnorm, b, &push, (uint64_t)n_rows);
}

uint64_t vkops_q8_bytes(int64_t n_rows, int64_t n_cols) {
    return (uint64_t)n_rows * (uint64_t)(n_cols / 32) * VKOPS_Q8_BLOCK_BYTES;
}

bool vkops_rmsnorm_q8(struct vkops *o, struct vk_bind x, struct vk_bind w, bool has_w,
                      struct vk_bind y, struct vk_bind yq, int64_t n_rows, int64_t n_cols,
                      float eps) {
    if (n_rows < 1 || n_cols % 32 != 0 || x.off % 16 || y.off % 16 || yq.off % 16 ||
        (has_w && w.off % 16))
        return false;
    /* in place: the one-pass form reads an invocation's values before the
     * sum's barriers and writes them after; the others read x again after
     * y is written */
    if (x.buf == y.buf && x.off == y.off && !(o->norm_q8_1pass && n_cols <= 4096))
        return false;
    STRATA_ASSERT((uint64_t)(n_rows * n_cols) <= UINT32_MAX);
    const struct push_rmsnorm push = {(uint32_t)(n_cols / 4), has_w, eps, (uint32_t)n_rows};
    const struct vk_bind b[4] = {x, has_w ? w : x, y, yq};
    dispatch_linear(o, o->rmsnorm_q8, b, &push, (uint64_t)n_rows);
    return true;
}

bool vkops_quant_q8(struct vkops *o, struct vk_bind x, struct vk_bind yq, int64_t n_rows,
                    int64_t n_cols) {
    if (n_rows < 1 || n_cols % 32 != 0 || x.off % 16 || yq.off % 16)
        return false;
    STRATA_ASSERT((uint64_t)(n_rows * n_cols) <= UINT32_MAX);
    const struct push_rmsnorm push = {(uint32_t)(n_cols / 4), 0, 0.0f, (uint32_t)n_rows};
    const struct vk_bind b[4] = {x, x, x, yq}; /* w and y: not read or written */
    dispatch_linear(o, o->quant_q8, b, &push, (uint64_t)n_rows);
    return true;
}

void vkops_softmax(struct vkops *o, struct vk_bind x, int64_t n_rows, int64_t n_cols) {
    rows(o, 1, x, x, false, x, n_rows, n_cols, 0.0f);
}

/* ---- rope ------------------------------------------------------------------ */

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* YaRN's correction dims for beta_fast = 32, beta_slow = 1 (llama.cpp's
 * defaults), in the f32 arithmetic of engine/cpu/ops.c's
 * ops_rope_yarn_corr_dims, so both backends rotate the same dims. */
static float yarn_dim(int n_rot, int n_ctx_orig, float beta, float base) {
    return n_rot * logf(n_ctx_orig / (beta * 2 * (float)M_PI)) / (2 * logf(base));
}

void vkops_rope_angles(const struct vkops_rope *cfg, struct vkops_rope_angles *a) {
    *a = (struct vkops_rope_angles){
        .theta_scale = powf(cfg->freq_base, -2.0f / (float)cfg->n_rot),
        .freq_scale = cfg->freq_scale,
        .ext_factor = cfg->ext_factor,
        .mscale = cfg->attn_factor,
    };
    if (cfg->ext_factor != 0.0f) {
        a->mscale *= 1.0f + 0.1f * logf(1.0f / cfg->freq_scale);
        const float start = floorf(yarn_dim(cfg->n_rot, cfg->n_ctx_orig, 32.0f, cfg->freq_base));
        const float end = ceilf(yarn_dim(cfg->n_rot, cfg->n_ctx_orig, 1.0f, cfg->freq_base));
        a->corr0 = start > 0 ? start : 0;
        a->corr1 = end < (float)(cfg->n_rot - 1) ? end : (float)(cfg->n_rot - 1);
    }
}

void vkops_rope(struct vkops *o, struct vk_bind x, int n_tok, int n_head, int head_dim,
                struct vk_bind pos, const struct vkops_rope *cfg) {
    STRATA_ASSERT(n_tok >= 0 && n_head >= 1 && cfg->n_rot >= 2 && cfg->n_rot % 2 == 0 &&
                  cfg->n_rot <= head_dim && cfg->n_rot <= VKOPS_ROT_MAX);
    if (n_tok == 0)
        return;
    struct vkops_rope_angles an;
    vkops_rope_angles(cfg, &an);
    const struct push_rope push = {
        .n_head = (uint32_t)n_head,
        .head_dim = (uint32_t)head_dim,
        .n_rot = (uint32_t)cfg->n_rot,
        .mode = cfg->mode == 2 ? 2u : 0u,
        .theta_scale = an.theta_scale,
        .freq_scale = an.freq_scale,
        .ext_factor = an.ext_factor,
        .mscale = an.mscale,
        .corr0 = an.corr0,
        .corr1 = an.corr1,
        .has_ff = cfg->has_freq_factors,
        .n_tok = (uint32_t)n_tok,
    };
    const struct vk_bind b[3] = {x, pos, cfg->has_freq_factors ? cfg->freq_factors : pos};
    const uint64_t n_pairs = (uint64_t)n_tok * n_head * (cfg->n_rot / 2);
    STRATA_ASSERT(n_pairs <= UINT32_MAX);
    dispatch_linear(o, o->rope, b, &push, (n_pairs + 255) / 256);
}

/* ---- routing and sampling ------------------------------------------------ */

void vkops_moe_route(struct vkops *o, struct vk_bind logits, struct vk_bind sel,
                     struct vk_bind sel_w, int n_tok, int n_expert, int k, bool norm_topk,
                     float scale) {
    STRATA_ASSERT(n_tok >= 0 && n_expert >= 1 && n_expert <= VKOPS_ROUTE_MAX && k >= 1 &&
                  k <= n_expert && k <= VKOPS_ROUTE_K_MAX);
    if (n_tok == 0)
        return;
    const struct push_route push = {(uint32_t)n_expert, (uint32_t)k, norm_topk, scale,
                                    (uint32_t)n_tok};
    const struct vk_bind b[3] = {logits, sel, sel_w};
    dispatch_linear(o, o->moe_route, b, &push, (uint64_t)n_tok);
}

void vkops_argmax(struct vkops *o, struct vk_bind logits, int n_rows, int64_t n_vocab,
                  struct vk_bind ids) {
    STRATA_ASSERT(n_rows >= 0 && n_vocab >= 1 && (uint64_t)(n_rows * n_vocab) <= UINT32_MAX);
    if (n_rows == 0)
        return;
    const struct push_argmax push = {(uint32_t)n_vocab, (uint32_t)n_rows};
    const struct vk_bind b[2] = {logits, ids};
    dispatch_linear(o, o->argmax, b, &push, (uint64_t)n_rows);
}

void vkops_sample(struct vkops *o, struct vk_bind logits, int n_rows, int64_t n_vocab,
                  const struct vkops_sample *p, struct vk_bind u, struct vk_bind ids) {
    STRATA_ASSERT(n_rows >= 0 && n_vocab >= 1 && (uint64_t)(n_rows * n_vocab) <= UINT32_MAX);
    STRATA_ASSERT(p->top_k >= 1 && p->top_k <= VKOPS_SAMPLE_K_MAX && p->temperature > 0.0f);
    if (n_rows == 0)
        return;
    const struct push_sample push = {(uint32_t)n_vocab, (uint32_t)p->top_k, p->top_p,
                                     p->min_p,          p->temperature,     (uint32_t)n_rows};
    const struct vk_bind b[3] = {logits, u, ids};
    dispatch_linear(o, o->sample, b, &push, (uint64_t)n_rows);
}
