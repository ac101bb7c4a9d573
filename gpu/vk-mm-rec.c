/* gpu/vk-mm-rec.c: the record functions of the matrix kernels (gpu/vk-mm.h):
 * checks, the split of a matrix (or a gate/up pair) into one dispatch per
 * buffer range, workgroup counts within the device's limits.
 *
 * A fused gate/up pair may come in different pieces; each dispatch covers
 * rows where one piece of each overlaps (a two-pointer walk over both
 * lists), so any split of either gives the same rows the same work.
 */
#include "gpu/vk-mm-impl.h"

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
        vkmm_latch(mm, STRATA_E_UNSUPPORTED, "vkmm %s: no GPU kernel for %s rows of %lld", what,
                   w ? quant_type_name(w->type) : "?", w ? (long long)w->n_cols : 0LL);
        return -1;
    }
    if (w->n_rows < 1 || w->n_rows > UINT32_MAX ||
        w->row_bytes != quant_row_size(w->type, w->n_cols) ||
        (w->n_expert > 1 && w->n_rows % w->n_expert != 0) || w->n_piece < 1 || !w->piece) {
        vkmm_latch(mm, STRATA_E_INVALID,
                   "vkmm %s: bad matrix (%lld rows, %zu bytes a row, %lld experts)", what,
                   (long long)w->n_rows, w->row_bytes, (long long)w->n_expert);
        return -1;
    }
    const int64_t er = expert_rows(w);
    const uint64_t align = in->min_storage_align ? in->min_storage_align : 1;
    int64_t next = 0;
    for (int i = 0; i < w->n_piece; i++) {
        const struct vk_wpiece *pc = &w->piece[i];
        uint64_t bytes = (uint64_t)pc->n_rows * w->row_bytes, range = (bytes + 3) & ~3ull;
        if (!pc->buf || pc->row0 != next || pc->n_rows < 1 || pc->n_rows > w->n_rows - next ||
            (w->n_expert > 1 && (pc->row0 % er || pc->n_rows % er)) ||
            range > in->max_storage_range || range > UINT32_MAX || pc->off % align ||
            pc->off + range > vk_buf_size(pc->buf)) {
            vkmm_latch(mm, STRATA_E_INVALID,
                       "vkmm %s: piece %d (rows %lld + %lld at byte %llu) is not a binding of "
                       "whole rows (experts) after the previous piece",
                       what, i, (long long)pc->row0, (long long)pc->n_rows,
                       (unsigned long long)pc->off);
            return -1;
        }
        next += pc->n_rows;
    }
    if (next != w->n_rows) {
        vkmm_latch(mm, STRATA_E_INVALID, "vkmm %s: pieces cover %lld of %lld rows", what,
                   (long long)next, (long long)w->n_rows);
        return -1;
    }
    return 0;
}

/* Both matrices recordable, and for a fused pair of one type and shape. */
static int check_pair(struct vkmm *mm, const struct vk_wmat *g, const struct vk_wmat *u,
                      const char *what) {
    if (check_wmat(mm, g, what) || (u && check_wmat(mm, u, what)))
        return -1;
    if (u && (u->type != g->type || u->n_rows != g->n_rows || u->n_cols != g->n_cols ||
              expert_rows(u) != expert_rows(g))) {
        vkmm_latch(mm, STRATA_E_INVALID, "vkmm %s: gate and up differ in type or shape", what);
        return -1;
    }
    return 0;
}

static struct vk_bind piece_bind(const struct vk_wmat *w, const struct vk_wpiece *pc) {
    uint64_t bytes = (uint64_t)pc->n_rows * w->row_bytes;
    return (struct vk_bind){pc->buf, pc->off, (bytes + 3) & ~3ull};
}

static struct vk_pipe *pipe_or_latch(struct vkmm *mm, enum quant_type type, enum vkmm_kind kind,
                                     bool glu, int fuse) {
    struct strata_error e = {0};
    struct vk_pipe *p = vkmm_pipe(mm, type, kind, glu, fuse, &e);
    if (!p)
        vkmm_latch(mm, e.code ? e.code : STRATA_E_INTERNAL, "vkmm: pipeline %s.%s: %s",
                   quant_type_name(type), vkmm_kind_name(kind), e.message);
    return p;
}

/* Workgroups for `groups` row groups as gx * gy (gx within the device's
 * first limit: 65,535 on lavapipe, so a 151,936-row output matrix still
 * fits); the matvec flattens them back. */
static int split_groups(struct vkmm *mm, uint64_t groups, uint32_t *gx, uint32_t *gy) {
    uint64_t mx = mm->info->max_wg_count[0] ? mm->info->max_wg_count[0] : 65535;
    uint64_t my = mm->info->max_wg_count[1] ? mm->info->max_wg_count[1] : 65535;
    *gx = (uint32_t)(groups < mx ? groups : mx);
    uint64_t y = (groups + *gx - 1) / *gx;
    if (y > my) {
        vkmm_latch(mm, STRATA_E_RANGE, "vkmm: %llu row groups exceed the device's workgroup counts",
                   (unsigned long long)groups);
        return -1;
    }
    *gy = (uint32_t)y;
    return 0;
}

/* The grid of a one-token mv_dot.comp dispatch over n_rows rows: a
 * workgroup a group of mv_rows1 rows, at most mv_wcap of them (the shader
 * loops over the rest). -1, latched, where the device's counts fall short. */
static int q8_grid(struct vkmm *mm, uint32_t n_rows, uint32_t *gx, uint32_t *gy) {
    uint64_t groups = (n_rows + mm->tune.mv_rows1 - 1) / mm->tune.mv_rows1;
    if (mm->tune.mv_wcap && groups > mm->tune.mv_wcap)
        groups = mm->tune.mv_wcap;
    return split_groups(mm, groups, gx, gy);
}

/* What one dispatch of a call binds besides the push constants. */
struct rec_call {
    enum quant_type type;
    bool glu;
    struct vk_bind x, y, sel;
    const struct vk_bind *res;    /* the residual y is added into (vkmm_matmul_acc), or NULL */
    enum vkmm_xform xf;           /* one token: mv_dot.comp unless VKMM_X_F32; tiles: XQ8 */
    const struct vkmm_tail *tail; /* the norm after the residual add (mv_body.glsl TAIL), or NULL */
};

/* One plain dispatch over rows [0, pu->n_rows) of binding w (from w_base),
 * and of u (from w_base2) when fused. */
static void record_rows(struct vkmm *mm, const struct rec_call *c, struct vk_bind w,
                        struct vk_bind u, const struct vkmm_push *pu) {
    const struct vkmm_tune *t = &mm->tune;
    const int fb = (c->res ? VKMM_FUSE_ACC : 0) | (c->tail ? VKMM_FUSE_NORM : 0);
    /* sel, an unused residual and the unused norm's: any buffer */
    const struct vk_bind cnt = {mm->tail_cnt, 0, 0};
    struct vk_bind binds[VKMM_N_BIND_MV] = {w,
                                            c->x,
                                            c->y,
                                            c->x,
                                            c->glu ? u : w,
                                            c->res ? *c->res : c->y,
                                            c->tail ? c->tail->w : c->y,
                                            c->tail ? c->tail->y : c->y,
                                            c->tail ? c->tail->yq : c->y,
                                            cnt};
    uint32_t gx, gy;
    if (c->xf != VKMM_X_F32 && pu->n_tok == 1) {
        struct strata_error e = {0};
        struct vk_pipe *p = vkmm_q8_pipe(mm, c->type, c->glu, false, c->xf == VKMM_X_F32Q,
                                         c->res ? VKMM_Q8_ACC : VKMM_Q8_PLAIN, &e);
        if (!p) {
            vkmm_latch(mm, e.code ? e.code : STRATA_E_INTERNAL, "vkmm: %s", e.message);
            return;
        }
        if (q8_grid(mm, pu->n_rows, &gx, &gy))
            return;
        vk_dispatch(mm->d, p, binds, pu, gx, gy, 1);
        return;
    }
    if (c->xf == VKMM_X_Q8 && pu->n_tok <= VKMM_MV_CHUNK_TOK) { /* q8 passes of up to 8 */
        struct vkmm_push pc = *pu;
        for (uint32_t t0 = 0; t0 < pu->n_tok; t0 += VKMM_MV_MAX_TOK) {
            const uint32_t nt = pu->n_tok - t0 < VKMM_MV_MAX_TOK ? pu->n_tok - t0 : VKMM_MV_MAX_TOK;
            const int ntk = nt == 1 ? 1 : nt == 2 ? 2 : nt <= 4 ? 4 : 8;
            struct strata_error e = {0};
            struct vk_pipe *p = ntk == 1
                                    ? vkmm_q8_pipe(mm, c->type, c->glu, false, false,
                                                   c->res ? VKMM_Q8_ACC : VKMM_Q8_PLAIN, &e)
                                    : vkmm_q8n_pipe(mm, c->type, c->glu, c->res != NULL, ntk, &e);
            if (!p) {
                vkmm_latch(mm, e.code ? e.code : STRATA_E_INTERNAL, "vkmm: %s", e.message);
                return;
            }
            if (ntk == 1 ? q8_grid(mm, pu->n_rows, &gx, &gy)
                         : split_groups(mm, (pu->n_rows + t->mv_rows - 1) / t->mv_rows, &gx, &gy))
                return;
            pc.tok0 = t0;
            pc.n_tok = nt;
            vk_dispatch(mm->d, p, binds, &pc, gx, gy, 1);
        }
        return;
    }
    if (pu->n_tok <= VKMM_MV_CHUNK_TOK) { /* matvec passes of up to 8 tokens */
        struct vkmm_push pc = *pu;
        for (uint32_t t0 = 0; t0 < pu->n_tok; t0 += VKMM_MV_MAX_TOK) {
            uint32_t nt = pu->n_tok - t0 < VKMM_MV_MAX_TOK ? pu->n_tok - t0 : VKMM_MV_MAX_TOK;
            enum vkmm_kind kind = nt == 1   ? VKMM_MV1
                                  : nt == 2 ? VKMM_MV2
                                  : nt <= 4 ? VKMM_MV4
                                            : VKMM_MV8;
            struct vk_pipe *p = pipe_or_latch(mm, c->type, kind, c->glu, fb);
            const uint32_t nr = vkmm_mv_rows(t, kind);
            if (!p || split_groups(mm, (pu->n_rows + nr - 1) / nr, &gx, &gy))
                return;
            pc.tok0 = t0;
            pc.n_tok = nt;
            vk_dispatch(mm->d, p, binds, &pc, gx, gy, 1);
        }
        return;
    }
    if (fb) {
        vkmm_latch(mm, STRATA_E_INVALID, "vkmm: a fused residual add above %d tokens",
                   VKMM_MV_CHUNK_TOK);
        return;
    }
    enum vkmm_kind kind = vkmm_tiled_kind(t, c->type, false);
    uint32_t bm, bn;
    vkmm_tile_shape(t, kind, c->glu, &bm, &bn);
    uint64_t bx = (pu->n_rows + bm - 1) / bm, by = (pu->n_tok + bn - 1) / bn;
    if (kind == VKMM_MM_DOT && bx * by < t->dot_s_below) { /* too few tiles to fill the GPU */
        kind = VKMM_MM_DOT_S;
        vkmm_tile_shape(t, kind, c->glu, &bm, &bn);
        bx = (pu->n_rows + bm - 1) / bm;
        by = (pu->n_tok + bn - 1) / bn;
    }
    if (c->xf == VKMM_X_Q8 && !vkmm_kind_dot(kind)) {
        vkmm_latch(mm, STRATA_E_INVALID, "vkmm: q8 x for the %s tiles", vkmm_kind_name(kind));
        return;
    }
    struct vk_pipe *p =
        pipe_or_latch(mm, c->type, kind, c->glu, c->xf == VKMM_X_Q8 ? VKMM_TILE_XQ8 : 0);
    if (!p)
        return;
    if (bx > mm->info->max_wg_count[0] || by > mm->info->max_wg_count[1]) {
        vkmm_latch(mm, STRATA_E_RANGE,
                   "vkmm: %u rows x %u tokens exceed the device's workgroup counts", pu->n_rows,
                   pu->n_tok);
        return;
    }
    vk_dispatch(mm->d, p, binds, pu, (uint32_t)bx, (uint32_t)by, 1);
}

static void push_common(const struct vk_wmat *g, struct vkmm_push *pu) {
    *pu = (struct vkmm_push){0};
    pu->n_cols = (uint32_t)g->n_cols;
    pu->row_bytes = (uint32_t)g->row_bytes;
    pu->x_stride = (uint32_t)g->n_cols;
}

/* The piece of w holding row r (pieces were checked to cover every row). */
static const struct vk_wpiece *piece_at(const struct vk_wmat *w, int64_t r) {
    for (int i = 0; i < w->n_piece; i++)
        if (r >= w->piece[i].row0 && r < w->piece[i].row0 + w->piece[i].n_rows)
            return &w->piece[i];
    return &w->piece[w->n_piece - 1];
}

static void matmul(struct vkmm *mm, const struct vk_wmat *g, const struct vk_wmat *u,
                   int64_t expert, struct vk_bind x, struct vk_bind y, int64_t n_tok,
                   const struct vk_bind *res, enum vkmm_xform xf) {
    const char *what = u ? "matmul_glu" : "matmul";
    if (check_pair(mm, g, u, what))
        return;
    const int64_t n_exp = g->n_expert > 1 ? g->n_expert : 1;
    if (n_tok < 1 || (uint64_t)n_tok > UINT32_MAX / (uint64_t)g->n_cols || expert >= n_exp ||
        expert < -1) {
        vkmm_latch(mm, STRATA_E_INVALID, "vkmm %s: bad call (%lld tokens, expert %lld of %lld)",
                   what, (long long)n_tok, (long long)expert, (long long)n_exp);
        return;
    }
    const struct vk_wmat *u2 = u ? u : g;
    /* q8 x: one token (mv_dot.comp), up to VKMM_MV_CHUNK_TOK in mv_dot's
     * passes (NT; q8 blocks only), or a tiled call's q8 blocks (the
     * integer-dot tiles: record_rows refuses the others) */
    const bool q8_tok = n_tok == 1 || xf == VKMM_X_Q8;
    if (xf != VKMM_X_F32 &&
        (!q8_tok || (res && (u || vkmm_tiled_tokens(n_tok))) || g->n_cols % 32 != 0)) {
        vkmm_latch(mm, STRATA_E_INVALID,
                   "vkmm %s: activations quantized in the lanes take one token, 32 | cols (a "
                   "residual: up to %d tokens, no up)",
                   what, VKMM_MV_CHUNK_TOK);
        return;
    }
    const struct rec_call c = {g->type, u != NULL, x, y, x, res, xf, NULL};
    struct vkmm_push pu;
    push_common(g, &pu);
    pu.n_tok = (uint32_t)n_tok;
    if (xf == VKMM_X_Q8) /* words of a row of x */
        pu.x_stride = (uint32_t)(g->n_cols / 32 * (VKMM_Q8_BLOCK_BYTES / 4));
    if (expert >= 0 && n_exp > 1) { /* one expert: its rows lie in one piece of each */
        const int64_t er = expert_rows(g), r0 = expert * er;
        const struct vk_wpiece *gp = piece_at(g, r0), *up = piece_at(u2, r0);
        pu.n_rows = (uint32_t)er;
        pu.y_stride = (uint32_t)er;
        pu.w_base = (uint32_t)((uint64_t)(r0 - gp->row0) * g->row_bytes);
        pu.w_base2 = (uint32_t)((uint64_t)(r0 - up->row0) * g->row_bytes);
        record_rows(mm, &c, piece_bind(g, gp), piece_bind(u2, up), &pu);
        return;
    }
    pu.y_stride = (uint32_t)g->n_rows;
    for (int i = 0, j = 0; i < g->n_piece && j < u2->n_piece;) {
        const struct vk_wpiece *gp = &g->piece[i], *up = &u2->piece[j];
        int64_t ge = gp->row0 + gp->n_rows, ue = up->row0 + up->n_rows;
        int64_t a = gp->row0 > up->row0 ? gp->row0 : up->row0, b = ge < ue ? ge : ue;
        if (a < b) {
            pu.n_rows = (uint32_t)(b - a);
            pu.y_col0 = (uint32_t)a;
            pu.w_base = (uint32_t)((uint64_t)(a - gp->row0) * g->row_bytes);
            pu.w_base2 = (uint32_t)((uint64_t)(a - up->row0) * g->row_bytes);
            record_rows(mm, &c, piece_bind(g, gp), piece_bind(u2, up), &pu);
        }
        if (ge <= ue)
            i++;
        else
            j++;
    }
}

static void matmul_id(struct vkmm *mm, const struct vk_wmat *g, const struct vk_wmat *u,
                      struct vk_bind x, bool x_per_pick, struct vk_bind sel, int k, int64_t n_tok,
                      struct vk_bind y, enum vkmm_xform xf) {
    const char *what = u ? "matmul_id_glu" : "matmul_id";
    const bool q8 = xf != VKMM_X_F32;
    if (check_pair(mm, g, u, what))
        return;
    const int64_t n_pairs = n_tok >= 1 && n_tok <= INT32_MAX ? n_tok * (int64_t)k : 0;
    if (k < 1 || n_pairs < 1 || (uint64_t)n_pairs > UINT32_MAX / (uint64_t)g->n_cols) {
        vkmm_latch(mm, STRATA_E_INVALID, "vkmm %s: bad call (%lld tokens, k %d)", what,
                   (long long)n_tok, k);
        return;
    }
    /* q8 x: the matvec's forms (a workgroup column a pick: up to
     * VKMM_MV_MAX_TOK tokens over q8 rows, one over f32 x quantized in the
     * lanes) or, past VKMM_MV_MAX_TOK, the integer-dot expert tiles over q8
     * rows (tq8) */
    const bool tq8 = xf == VKMM_X_Q8 && n_tok > VKMM_MV_MAX_TOK, mv8 = q8 && !tq8;
    const bool tiled = n_tok > VKMM_MV_MAX_TOK && (!q8 || tq8), glu = u != NULL;
    const enum vkmm_kind kind = tiled ? vkmm_tiled_kind(&mm->tune, g->type, true) : VKMM_MV_ID;
    if (mv8 && ((xf == VKMM_X_F32Q && n_tok != 1) || g->n_cols % 32 != 0)) {
        vkmm_latch(mm, STRATA_E_INVALID,
                   "vkmm %s: activations quantized in the lanes take one token, 32 | cols", what);
        return;
    }
    if (tq8 && (!vkmm_kind_dot(kind) || g->n_cols % 32 != 0)) {
        vkmm_latch(mm, STRATA_E_INVALID, "vkmm %s: q8 rows need the integer-dot tiles, 32 | cols",
                   what);
        return;
    }
    struct strata_error e8 = {0};
    struct vk_pipe *p =
        mv8 ? vkmm_q8_pipe(mm, g->type, glu, true, xf == VKMM_X_F32Q, VKMM_Q8_PLAIN, &e8)
            : pipe_or_latch(mm, g->type, kind, glu, tq8 ? VKMM_TILE_XQ8 : 0);
    if (!p) {
        if (mv8)
            vkmm_latch(mm, e8.code ? e8.code : STRATA_E_INTERNAL, "vkmm: %s", e8.message);
        return;
    }
    const int64_t er = expert_rows(g);
    uint32_t gx, gy;
    if (tiled) {
        uint32_t bm, bn;
        vkmm_tile_shape(&mm->tune, kind, glu, &bm, &bn);
        gx = (uint32_t)((er + bm - 1) / bm);
        gy = 1;
        if (gx > mm->info->max_wg_count[0]) {
            vkmm_latch(mm, STRATA_E_RANGE, "vkmm %s: %lld rows exceed the workgroup counts", what,
                       (long long)er);
            return;
        }
    } else if (split_groups(mm, (uint64_t)(er + mm->tune.mv_rows1 - 1) / mm->tune.mv_rows1, &gx,
                            &gy)) {
        return;
    }
    const uint32_t mz = mm->info->max_wg_count[2] ? mm->info->max_wg_count[2] : 65535;
    struct vkmm_push pu;
    push_common(g, &pu);
    pu.n_rows = (uint32_t)er;
    pu.n_tok = 1;
    pu.y_stride = (uint32_t)er;
    pu.k = (uint32_t)k;
    pu.x_per_pick = x_per_pick;
    pu.expert_bytes = (uint32_t)((uint64_t)er * g->row_bytes);
    pu.n_pairs = (uint32_t)n_pairs;
    if (xf == VKMM_X_Q8)
        pu.x_stride = (uint32_t)(g->n_cols / 32 * (VKMM_Q8_BLOCK_BYTES / 4));
    const struct vk_wmat *u2 = u ? u : g;
    for (int i = 0, j = 0; i < g->n_piece && j < u2->n_piece;) {
        const struct vk_wpiece *gp = &g->piece[i], *up = &u2->piece[j];
        int64_t ge = gp->row0 + gp->n_rows, ue = up->row0 + up->n_rows;
        int64_t a = gp->row0 > up->row0 ? gp->row0 : up->row0, b = ge < ue ? ge : ue;
        if (a < b) { /* experts [a / er, b / er) lie in both pieces */
            pu.e0 = (uint32_t)(a / er);
            pu.e1 = (uint32_t)(b / er);
            pu.w_base = (uint32_t)((uint64_t)(a - gp->row0) * g->row_bytes);
            pu.w_base2 = (uint32_t)((uint64_t)(a - up->row0) * g->row_bytes);
            struct vk_bind wb = piece_bind(g, gp);
            const struct vk_bind cnt = {mm->tail_cnt, 0, 0};
            struct vk_bind binds[VKMM_N_BIND_MV] = {wb, x, y, sel, glu ? piece_bind(u2, up) : wb,
                                                    y,  y, y, y,   cnt};
            if (tiled) { /* a workgroup row per expert; each scans every pick */
                vk_dispatch(mm->d, p, binds, &pu, gx, pu.e1 - pu.e0, 1);
            } else {
                for (int64_t p0 = 0; p0 < n_pairs; p0 += mz) { /* gz within the third limit */
                    pu.pair0 = (uint32_t)p0;
                    int64_t nz = n_pairs - p0 < mz ? n_pairs - p0 : mz;
                    vk_dispatch(mm->d, p, binds, &pu, gx, gy, (uint32_t)nz);
                }
            }
        }
        if (ge <= ue)
            i++;
        else
            j++;
    }
}

void vkmm_matmul(struct vkmm *mm, const struct vk_wmat *w, int64_t expert, struct vk_bind x,
                 struct vk_bind y, int64_t n_tok) {
    matmul(mm, w, NULL, expert, x, y, n_tok, NULL, VKMM_X_F32);
}

void vkmm_matmul_glu(struct vkmm *mm, const struct vk_wmat *gate, const struct vk_wmat *up,
                     int64_t expert, struct vk_bind x, struct vk_bind y, int64_t n_tok) {
    if (!up) {
        vkmm_latch(mm, STRATA_E_INVALID, "vkmm matmul_glu: no up matrix");
        return;
    }
    matmul(mm, gate, up, expert, x, y, n_tok, NULL, VKMM_X_F32);
}

bool vkmm_acc_ok(int64_t n_tok) {
    return n_tok >= 1 && n_tok <= VKMM_MV_CHUNK_TOK;
}

void vkmm_matmul_acc(struct vkmm *mm, const struct vk_wmat *w, struct vk_bind x, struct vk_bind y,
                     int64_t n_tok, struct vk_bind res) {
    if (!vkmm_acc_ok(n_tok)) {
        vkmm_latch(mm, STRATA_E_INVALID, "vkmm matmul_acc: bad call (%lld tokens)",
                   (long long)n_tok);
        return;
    }
    matmul(mm, w, NULL, -1, x, y, n_tok, &res, VKMM_X_F32);
}

bool vkmm_acc_norm_ok(const struct vkmm *mm, const struct vk_wmat *w) {
    /* the tail's blocks are 8 lanes of one subgroup (mv_body.glsl) */
    return w->n_expert <= 1 && w->n_piece == 1 && w->n_rows % 32 == 0 && w->n_rows <= (1 << 24) &&
           mm->tune.mv_wg % 8 == 0 && mm->info->subgroup_size >= 8;
}

void vkmm_matmul_acc_norm(struct vkmm *mm, const struct vk_wmat *w, struct vk_bind x,
                          struct vk_bind y, struct vk_bind res, const struct vkmm_tail *tail) {
    if (!vkmm_acc_norm_ok(mm, w) || !tail) {
        vkmm_latch(mm, STRATA_E_INVALID,
                   "vkmm matmul_acc_norm: %lld rows in %d pieces, %u-lane workgroups, "
                   "subgroups of %u (one piece, 32 | rows, 8 | lanes, subgroups of 8 or more)",
                   (long long)w->n_rows, w->n_piece, mm->tune.mv_wg, mm->info->subgroup_size);
        return;
    }
    if (check_pair(mm, w, NULL, "matmul_acc_norm"))
        return;
    const struct rec_call c = {w->type, false, x, y, x, &res, VKMM_X_F32, tail};
    struct vkmm_push pu;
    push_common(w, &pu);
    pu.n_tok = 1;
    pu.n_rows = (uint32_t)w->n_rows;
    pu.y_stride = (uint32_t)w->n_rows;
    pu.tail_eps = tail->eps;
    const struct vk_bind wb = piece_bind(w, &w->piece[0]);
    record_rows(mm, &c, wb, wb, &pu);
}

void vkmm_matmul_id(struct vkmm *mm, const struct vk_wmat *w, struct vk_bind x, bool x_per_pick,
                    struct vk_bind sel, int k, int64_t n_tok, struct vk_bind y) {
    matmul_id(mm, w, NULL, x, x_per_pick, sel, k, n_tok, y, VKMM_X_F32);
}

void vkmm_matmul_id_glu(struct vkmm *mm, const struct vk_wmat *gate, const struct vk_wmat *up,
                        struct vk_bind x, bool x_per_pick, struct vk_bind sel, int k, int64_t n_tok,
                        struct vk_bind y) {
    if (!up) {
        vkmm_latch(mm, STRATA_E_INVALID, "vkmm matmul_id_glu: no up matrix");
        return;
    }
    matmul_id(mm, gate, up, x, x_per_pick, sel, k, n_tok, y, VKMM_X_F32);
}

/* The byte span [lo, hi) of binding 0 that holds the matrices of a
 * vkmm_matmul_multi call; false where they cannot share it (vkmm_multi_ok). */
static bool multi_span(const struct vkmm *mm, const struct vk_wmat *const *w, int n, uint64_t *lo,
                       uint64_t *hi) {
    if (n < 2 || n > VKMM_MULTI_MAX || !vkmm_q8x_ok(mm, w[0]->type) || w[0]->n_cols % 32)
        return false;
    uint64_t rows = 0;
    *lo = UINT64_MAX;
    *hi = 0;
    for (int i = 0; i < n; i++) {
        const struct vk_wmat *m = w[i];
        if (m->n_expert > 1 || m->n_piece != 1 || m->type != w[0]->type ||
            m->n_cols != w[0]->n_cols || m->row_bytes != w[0]->row_bytes ||
            m->piece[0].buf != w[0]->piece[0].buf || m->piece[0].n_rows != m->n_rows)
            return false;
        const uint64_t a = m->piece[0].off, b = a + (uint64_t)m->n_rows * m->row_bytes;
        *lo = a < *lo ? a : *lo;
        *hi = b > *hi ? b : *hi;
        rows += (uint64_t)m->n_rows;
    }
    return *hi - *lo <= mm->info->max_storage_range && *hi - *lo <= UINT32_MAX &&
           rows <= UINT32_MAX;
}

bool vkmm_multi_ok(const struct vkmm *mm, const struct vk_wmat *const *w, int n) {
    uint64_t lo, hi;
    return multi_span(mm, w, n, &lo, &hi);
}

void vkmm_matmul_multi(struct vkmm *mm, const struct vk_wmat *const *w, int n, struct vk_bind x,
                       bool xf, const struct vk_bind *y) {
    uint64_t lo, hi;
    if (!multi_span(mm, w, n, &lo, &hi)) {
        vkmm_latch(mm, STRATA_E_INVALID,
                   "vkmm matmul_multi: %d matrices that are not one type and width in one binding",
                   n);
        return;
    }
    for (int i = 0; i < n; i++)
        if (check_wmat(mm, w[i], "matmul_multi"))
            return;
    struct strata_error e = {0};
    struct vk_pipe *p = vkmm_q8_pipe(mm, w[0]->type, false, false, xf, VKMM_Q8_SPLIT, &e);
    if (!p) {
        vkmm_latch(mm, e.code ? e.code : STRATA_E_INTERNAL, "vkmm: %s", e.message);
        return;
    }
    struct vkmm_push pu;
    push_common(w[0], &pu);
    pu.n_tok = 1;
    if (!xf) /* words of a row of x */
        pu.x_stride = (uint32_t)(w[0]->n_cols / 32 * (VKMM_Q8_BLOCK_BYTES / 4));
    pu.w_base = (uint32_t)(w[0]->piece[0].off - lo);
    pu.split1 = (uint32_t)w[0]->n_rows;
    pu.w_base2 = (uint32_t)(w[1]->piece[0].off - lo);
    pu.split2 = pu.split1 + (uint32_t)w[1]->n_rows;
    pu.n_rows = pu.split2;
    if (n > 2) {
        pu.w_base3 = (uint32_t)(w[2]->piece[0].off - lo);
        pu.n_rows += (uint32_t)w[2]->n_rows;
    }
    pu.y_stride = pu.n_rows;
    const struct vk_bind wb = {w[0]->piece[0].buf, lo, (hi - lo + 3) & ~3ull};
    /* bindings 3-5 (sel, up, residual) are not read: any buffer */
    const struct vk_bind binds[VKMM_N_BIND_Q8] = {wb, x,    y[0], x,
                                                  wb, y[0], y[1], n > 2 ? y[2] : y[0]};
    uint32_t gx, gy;
    if (q8_grid(mm, pu.n_rows, &gx, &gy))
        return;
    vk_dispatch(mm->d, p, binds, &pu, gx, gy, 1);
}

void vkmm_matmul_q8x(struct vkmm *mm, const struct vk_wmat *w, const struct vk_wmat *up,
                     struct vk_bind xq, struct vk_bind y) {
    matmul(mm, w, up, -1, xq, y, 1, NULL, VKMM_X_Q8);
}

void vkmm_matmul_q8x_acc(struct vkmm *mm, const struct vk_wmat *w, struct vk_bind xq,
                         struct vk_bind y, struct vk_bind res, int64_t n_tok) {
    matmul(mm, w, NULL, -1, xq, y, n_tok, &res, VKMM_X_Q8);
}

void vkmm_matmul_id_q8x(struct vkmm *mm, const struct vk_wmat *w, const struct vk_wmat *up,
                        struct vk_bind xq, struct vk_bind sel, int k, struct vk_bind y) {
    matmul_id(mm, w, up, xq, false, sel, k, 1, y, VKMM_X_Q8);
}

bool vkmm_tiled_tokens(int64_t n_tok) {
    return n_tok > VKMM_MV_CHUNK_TOK;
}

bool vkmm_mq8_ok(const struct vkmm *mm, enum quant_type type, int64_t n_tok) {
    return n_tok >= 2 && !vkmm_tiled_tokens(n_tok) && vkmm_q8x_ok(mm, type);
}

bool vkmm_tq8_ok(const struct vkmm *mm, enum quant_type type, int64_t n_tok) {
    return vkmm_tiled_tokens(n_tok) && vkmm_q8x_ok(mm, type) &&
           vkmm_kind_dot(vkmm_tiled_kind(&mm->tune, type, false));
}

void vkmm_matmul_tq8(struct vkmm *mm, const struct vk_wmat *w, const struct vk_wmat *up,
                     struct vk_bind xq, struct vk_bind y, int64_t n_tok) {
    matmul(mm, w, up, -1, xq, y, n_tok, NULL, VKMM_X_Q8);
}

bool vkmm_mq8_id_ok(const struct vkmm *mm, enum quant_type type, int64_t n_tok) {
    return n_tok >= 2 && n_tok <= VKMM_MV_MAX_TOK && vkmm_q8x_ok(mm, type);
}

bool vkmm_tq8_id_ok(const struct vkmm *mm, enum quant_type type, int64_t n_tok) {
    return n_tok > VKMM_MV_MAX_TOK && vkmm_q8x_ok(mm, type) &&
           vkmm_kind_dot(vkmm_tiled_kind(&mm->tune, type, true));
}

void vkmm_matmul_id_tq8(struct vkmm *mm, const struct vk_wmat *w, const struct vk_wmat *up,
                        struct vk_bind xq, bool x_per_pick, struct vk_bind sel, int k,
                        int64_t n_tok, struct vk_bind y) {
    matmul_id(mm, w, up, xq, x_per_pick, sel, k, n_tok, y, VKMM_X_Q8);
}

void vkmm_matmul_xq(struct vkmm *mm, const struct vk_wmat *w, const struct vk_wmat *up,
                    struct vk_bind x, struct vk_bind y, const struct vk_bind *res) {
    matmul(mm, w, up, -1, x, y, 1, res, VKMM_X_F32Q);
}

void vkmm_matmul_id_xq(struct vkmm *mm, const struct vk_wmat *w, const struct vk_wmat *up,
                       struct vk_bind x, bool x_per_pick, struct vk_bind sel, int k,
                       struct vk_bind y) {
    matmul_id(mm, w, up, x, x_per_pick, sel, k, 1, y, VKMM_X_F32Q);
}
