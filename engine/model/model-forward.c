/* engine/model/model-forward.c: the batched forward pass (see model.h),
 * written once over the backend seam (backend.h). One call is one backend
 * step over every entry of the batch through every layer: each matmul gets
 * all entries as one input (each weight row read once per call), and MoE
 * picks are grouped by expert inside the backend so a routed expert's
 * weights are read once per call. Routed experts come only through the
 * expert seam (experts.h), keyed to the step.
 *
 * The step is recorded and submitted once. A MoE layer whose experts are
 * resident along the expert chain (experts_resident: the RAM tier over the
 * CPU's arena, the file's pages, a VRAM arena holding them all) has its
 * experts' refs taken once at load, and the backend picks from them by the
 * router's ids; only the routing profile reads the picks back, after the
 * step. A layer served by a tier that may evict reads its picks back inside
 * the step (submit + wait + tensor_read of the router's top-k) to get the
 * picked experts for this step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kv/kv.h"
#include "engine/model/model-impl.h"
#include "engine/experts/profile.h"
#include "engine/experts/xstore.h"

/* Logits rows allocated at load, grown to a call's outputs when more come:
 * the whole batch's would be 512 x 128k x 4 bytes = 256 MB for llama-3's
 * vocabulary, 16 rows are 8 MB and cover a decode step of 16 sequences. */
#define FWD_LOGITS_ROWS 16

struct model_fwd {
    int B;                                  /* n_batch_max */
    int F;                                  /* widest dense FFN: max(n_ff, n_ff_shexp) */
    struct backend_tensor *x;               /* (B, n_embd) residual stream */
    struct backend_tensor *xn;              /* (B, n_embd) normalised input of a block */
    struct backend_tensor *q;               /* (B, n_head * head_dim_k) */
    struct backend_tensor *k;               /* (B, n_head_kv * head_dim_k) */
    struct backend_tensor *v;               /* (B, n_head_kv * head_dim_v) */
    struct backend_tensor *attn;            /* (B, n_head * head_dim_v) */
    struct backend_tensor *tmp;             /* (B, n_embd) block output before the residual add */
    struct backend_tensor *g, *u;           /* (B, F) gate / up of a dense FFN or shared expert */
    struct backend_tensor *ids, *pos, *seq; /* (B, 1) I32 token ids, positions, sequences */
    struct backend_tensor *out_ids;         /* (B, 1) I32 rows that want logits */
    struct backend_tensor *hid_ids;         /* (B, 1) I32 rows that want their hidden state */
    struct backend_tensor *logits;          /* (logits_rows, n_vocab) */
    struct backend_tensor *smp_u, *smp_ids; /* (B, 1) F32 uniforms, I32 picks (device sampling) */
    int logits_rows;
    int32_t *h_ids, *h_pos, *h_seq, *h_out; /* (B) host copies written into the tensors */
    int32_t *h_hid;                         /* (B) host copy of hid_ids */
    /* MoE */
    struct backend_tensor *router;       /* (B, n_expert) logits, then probabilities */
    struct backend_tensor *sel, *sel_w;  /* (B, n_expert_used) I32 picks, F32 weights */
    struct backend_tensor *sh, *sh_gate; /* (B, n_embd) shared expert, (B, 1) its gate logit */
    int32_t *h_sel;                      /* (B, n_expert_used) picks read back */
    struct backend_expert *table[2];     /* (n_expert) each: a layer's experts, alternating so
                                            the previous layer's stays valid until its submit */
    int32_t *table_ids[2];               /* (n_expert): the ids each table names */
    int table_n[2];
    uint8_t *picked;  /* (n_expert) */
    uint8_t *late[2]; /* (n_expert) each, alternating as table: experts whose reads are in
                         flight while the others compute (experts_need_start) */
    bool late_any[2]; /* late[i] marks one */
    int late_rc;      /* the failed wait of a step's late experts (late_wait), or 0 */
    struct strata_error late_err;
    /* Router lookahead (xstore_params.prefetch): at a non-resident MoE layer
     * its input goes to the predictor's side thread (model-predict.c), which
     * applies the routers of the next layers and reads their picks ahead */
    struct model_pred *pred;          /* NULL: off */
    float *h_xp;                      /* (B, n_embd) the layer's input read back for it */
    int32_t *need_ids;                /* (n_expert) a layer's distinct picks */
    struct backend_expert **resident; /* (n_layer): a resident layer's (n_expert) experts, taken
                                         once at load; NULL: got per pick every step */
    int32_t *h_sel_all; /* (n_layer, B, n_expert_used) resident layers' picks, for the profile */
    /* Cold experts on params.backend_cold, where the backend takes no host
     * matrices (split): its input, picks and weights go over, the sum back. */
    bool split;
    struct backend_tensor *cx, *csel, *csw, *cout; /* on backend_cold: (B, n_embd), (B, K) I32,
                                                      (B, K), (B, n_embd) */
    struct backend_tensor *part;   /* (B, n_embd): the cold experts' sum, on the backend */
    float *h_x, *h_sw, *h_part;    /* (B, n_embd), (B, K), (B, n_embd): host copies in between */
    struct backend_expert *ctable; /* (n_expert): the current layer's cold experts */
    int32_t *ctable_ids;           /* (n_expert) */
    int ctable_n;
};

static void tfree(const struct model *m, struct backend_tensor *t) {
    if (t)
        m->be->ops->tensor_free(m->be->ctx, t);
}

void model_fwd_free(const struct model *m, struct model_fwd *f) {
    if (!f)
        return;
    struct backend_tensor *ts[] = {f->x,       f->xn,      f->q,      f->k,      f->v,     f->attn,
                                   f->tmp,     f->g,       f->u,      f->ids,    f->pos,   f->seq,
                                   f->out_ids, f->logits,  f->router, f->sel,    f->sel_w, f->sh,
                                   f->sh_gate, f->hid_ids, f->smp_u,  f->smp_ids};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        tfree(m, ts[i]);
    model_pred_free(f->pred); /* first: its thread calls experts_prefetch */
    free(f->h_xp);
    tfree(m, f->part);
    struct backend *cb = m->params.backend_cold;
    struct backend_tensor *cs[] = {f->cx, f->csel, f->csw, f->cout};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        if (cs[i])
            cb->ops->tensor_free(cb->ctx, cs[i]);
    free(f->h_x), free(f->h_sw), free(f->h_part), free(f->ctable), free(f->ctable_ids);
    free(f->h_ids), free(f->h_pos), free(f->h_seq), free(f->h_out), free(f->h_sel);
    free(f->h_hid);
    for (int i = 0; i < 2; i++)
        free(f->table[i]), free(f->table_ids[i]);
    free(f->picked);
    free(f->late[0]), free(f->late[1]);
    free(f->need_ids);
    for (int il = 0; f->resident && il < m->hp.n_layer; il++)
        free(f->resident[il]);
    free(f->resident);
    free(f->h_sel_all);
    free(f);
}

static struct backend_tensor *talloc_on(const struct backend *be, enum backend_dtype dt,
                                        int64_t rows, int64_t cols, bool *ok,
                                        struct strata_error *err) {
    if (!*ok)
        return NULL;
    struct backend_tensor *t = be->ops->tensor_alloc(be->ctx, dt, rows, cols > 0 ? cols : 1, err);
    if (!t)
        *ok = false;
    return t;
}

static struct backend_tensor *talloc(const struct model *m, enum backend_dtype dt, int64_t rows,
                                     int64_t cols, bool *ok, struct strata_error *err) {
    return talloc_on(m->be, dt, rows, cols, ok, err);
}

static void *halloc(size_t n, size_t sz, bool *ok) {
    void *p = calloc(n ? n : 1, sz);
    if (!p)
        *ok = false;
    return p;
}

/* Whether the backend computes this matrix (a host one needs BACKEND_CAP_HOST_MATS). */
static bool usable(const struct model *m, const struct backend_mat *mat) {
    return mat->w || (m->be->ops->caps & BACKEND_CAP_HOST_MATS);
}

/* The refs of every resident MoE layer's experts, taken once (step 0,
 * released at once: a resident tier keeps them until it is freed). */
static int take_resident(const struct model *m, struct model_fwd *f, struct strata_error *err) {
    const struct model_hparams *hp = &m->hp;
    const int NE = hp->n_expert;
    bool ok = true;
    f->resident = halloc((size_t)hp->n_layer, sizeof *f->resident, &ok);
    /* always: a profile may be attached after load (model_set_profile) */
    if (ok)
        f->h_sel_all = halloc((size_t)hp->n_layer * (size_t)f->B * (size_t)hp->n_expert_used,
                              sizeof *f->h_sel_all, &ok);
    if (!ok)
        return strata_error_set(err, STRATA_E_NOMEM, "model: out of memory for expert tables");
    int rc = 0;
    for (int il = 0; il < hp->n_layer && rc == 0; il++) {
        if (!m->layers[il].has_moe || !experts_resident(m->experts, il))
            continue;
        struct backend_expert *tab = halloc((size_t)NE, sizeof *tab, &ok);
        if (!(f->resident[il] = tab))
            return strata_error_set(err, STRATA_E_NOMEM, "model: out of memory for expert tables");
        bool all_usable = true; /* else per pick: host bytes go to backend_cold */
        for (int e = 0; e < NE && rc == 0; e++) {
            struct experts_ref r[EXPERTS_WHICH_COUNT];
            for (int w = 0; w < EXPERTS_WHICH_COUNT && rc == 0; w++)
                rc = experts_get(m->experts, il, e, (enum experts_which)w, 0, &r[w], err);
            if (rc)
                break;
            tab[e] = (struct backend_expert){r[EXPERTS_GATE].mat, r[EXPERTS_UP].mat,
                                             r[EXPERTS_DOWN].mat};
            for (int w = 0; w < EXPERTS_WHICH_COUNT; w++)
                all_usable &= usable(m, &r[w].mat);
        }
        experts_release(m->experts, 0);
        if (!all_usable) {
            free(tab);
            f->resident[il] = NULL;
        }
    }
    return rc;
}

/* The router lookahead's side thread (xstore_params.prefetch > 0), for the
 * MoE layers not resident (those a reading tier serves). Depth: run and
 * serve default to --expert-prefetch 1 (config.h; the measurement is
 * bench/README.md "The expert store, side-thread prefetch"). */
static int start_pred(const struct model *m, struct model_fwd *f, struct strata_error *err) {
    const struct xstore_params *xp = m->params.xstore; /* borrowed during the load */
    const int depth =
        xp && xp->prefetch > 0
            ? (xp->prefetch < XSTORE_PREFETCH_MAX ? xp->prefetch : XSTORE_PREFETCH_MAX)
            : 0;
    if (depth == 0)
        return 0;
    struct xstore_stats st; /* a store with a slot for every expert never misses: nothing to
                               read ahead, and the thread's work would be a cost alone */
    xstore_stats(xstore_of(m->experts), &st);
    const bool all = st.n_slots > 0 && (int64_t)st.n_slots >= (int64_t)st.n_layer * m->hp.n_expert;
    xstore_stats_free(&st);
    if (all)
        return 0;
    bool *want = calloc((size_t)m->hp.n_layer, sizeof *want), any = false;
    if (!want)
        return strata_error_set(err, STRATA_E_NOMEM, "model: out of memory for the lookahead");
    for (int il = 0; il < m->hp.n_layer; il++)
        any |= want[il] = m->layers[il].has_moe && !f->resident[il];
    int rc = 0;
    if (any) {
        f->h_xp = calloc((size_t)f->B * (size_t)m->hp.n_embd, sizeof(float));
        if (!f->h_xp)
            rc = strata_error_set(err, STRATA_E_NOMEM, "model: out of memory for the lookahead");
        else if (!(f->pred = model_pred_init(m, depth, want, err)))
            rc = err && err->code ? err->code : STRATA_E_NOMEM;
    }
    free(want);
    return rc;
}

struct model_fwd *model_fwd_init(const struct model *m, struct strata_error *err) {
    const struct model_hparams *hp = &m->hp;
    struct model_fwd *f = calloc(1, sizeof *f);
    if (!f) {
        strata_error_set(err, STRATA_E_NOMEM, "model: out of memory for forward buffers");
        return NULL;
    }
    bool ok = true, hok = true;
    const int64_t B = m->params.n_batch_max, E = hp->n_embd;
    const int64_t K = hp->n_expert > 0 ? hp->n_expert_used : 1, NE = hp->n_expert;
    f->B = (int)B;
    f->F = hp->n_ff > hp->n_ff_shexp ? hp->n_ff : hp->n_ff_shexp;
    f->x = talloc(m, BACKEND_F32, B, E, &ok, err);
    f->xn = talloc(m, BACKEND_F32, B, E, &ok, err);
    f->q = talloc(m, BACKEND_F32, B, (int64_t)hp->n_head * hp->head_dim_k, &ok, err);
    f->k = talloc(m, BACKEND_F32, B, (int64_t)hp->n_head_kv * hp->head_dim_k, &ok, err);
    f->v = talloc(m, BACKEND_F32, B, (int64_t)hp->n_head_kv * hp->head_dim_v, &ok, err);
    f->attn = talloc(m, BACKEND_F32, B, (int64_t)hp->n_head * hp->head_dim_v, &ok, err);
    f->tmp = talloc(m, BACKEND_F32, B, E, &ok, err);
    f->g = talloc(m, BACKEND_F32, B, f->F, &ok, err);
    f->u = talloc(m, BACKEND_F32, B, f->F, &ok, err);
    f->ids = talloc(m, BACKEND_I32, B, 1, &ok, err);
    f->pos = talloc(m, BACKEND_I32, B, 1, &ok, err);
    f->seq = talloc(m, BACKEND_I32, B, 1, &ok, err);
    f->out_ids = talloc(m, BACKEND_I32, B, 1, &ok, err);
    f->hid_ids = talloc(m, BACKEND_I32, B, 1, &ok, err);
    if (m->be->ops->sample) {
        f->smp_u = talloc(m, BACKEND_F32, B, 1, &ok, err);
        f->smp_ids = talloc(m, BACKEND_I32, B, 1, &ok, err);
    }
    f->logits_rows = B < FWD_LOGITS_ROWS ? (int)B : FWD_LOGITS_ROWS;
    f->logits = talloc(m, BACKEND_F32, f->logits_rows, hp->n_vocab, &ok, err);
    f->h_ids = halloc((size_t)B, sizeof(int32_t), &hok);
    f->h_pos = halloc((size_t)B, sizeof(int32_t), &hok);
    f->h_seq = halloc((size_t)B, sizeof(int32_t), &hok);
    f->h_out = halloc((size_t)B, sizeof(int32_t), &hok);
    f->h_hid = halloc((size_t)B, sizeof(int32_t), &hok);
    if (NE > 0) {
        f->router = talloc(m, BACKEND_F32, B, NE, &ok, err);
        f->sel = talloc(m, BACKEND_I32, B, K, &ok, err);
        f->sel_w = talloc(m, BACKEND_F32, B, K, &ok, err);
        f->sh = talloc(m, BACKEND_F32, B, E, &ok, err);
        f->sh_gate = talloc(m, BACKEND_F32, B, 1, &ok, err);
        f->h_sel = halloc((size_t)(B * K), sizeof(int32_t), &hok);
        for (int i = 0; i < 2; i++) {
            f->table[i] = halloc((size_t)NE, sizeof *f->table[i], &hok);
            f->table_ids[i] = halloc((size_t)NE, sizeof *f->table_ids[i], &hok);
        }
        f->picked = halloc((size_t)NE, 1, &hok);
        f->late[0] = halloc((size_t)NE, 1, &hok);
        f->late[1] = halloc((size_t)NE, 1, &hok);
        f->need_ids = halloc((size_t)NE, sizeof *f->need_ids, &hok);
        f->split = m->params.backend_cold && !(m->be->ops->caps & BACKEND_CAP_HOST_MATS);
    }
    if (f->split) {
        const struct backend *cb = m->params.backend_cold;
        f->cx = talloc_on(cb, BACKEND_F32, B, E, &ok, err);
        f->csel = talloc_on(cb, BACKEND_I32, B, K, &ok, err);
        f->csw = talloc_on(cb, BACKEND_F32, B, K, &ok, err);
        f->cout = talloc_on(cb, BACKEND_F32, B, E, &ok, err);
        f->part = talloc(m, BACKEND_F32, B, E, &ok, err);
        f->h_x = halloc((size_t)(B * E), sizeof(float), &hok);
        f->h_sw = halloc((size_t)(B * K), sizeof(float), &hok);
        f->h_part = halloc((size_t)(B * E), sizeof(float), &hok);
        f->ctable = halloc((size_t)NE, sizeof *f->ctable, &hok);
        f->ctable_ids = halloc((size_t)NE, sizeof *f->ctable_ids, &hok);
    }
    if (!hok && ok)
        strata_error_set(err, STRATA_E_NOMEM, "model: out of memory for forward buffers");
    if (!ok || !hok || (NE > 0 && (take_resident(m, f, err) || start_pred(m, f, err)))) {
        model_fwd_free(m, f);
        return NULL;
    }
    return f;
}

/* ---- helpers ------------------------------------------------------------------ */

static struct backend_mat bm(const struct backend_weight *w) {
    return (struct backend_mat){.w = w};
}

/* ---- blocks ------------------------------------------------------------------- */

static void attn_block(struct model *m, struct kv_cache *kv, int il, int n) {
    struct model_fwd *f = m->fwd;
    const struct model_hparams *hp = &m->hp;
    const struct model_layer *L = &m->layers[il];
    const struct backend_ops *be = m->be->ops;
    void *bc = m->be->ctx;
    const int64_t E = hp->n_embd, nq = (int64_t)hp->n_head * hp->head_dim_k;
    const int64_t nk = (int64_t)hp->n_head_kv * hp->head_dim_k;
    const int64_t nv = (int64_t)hp->n_head_kv * hp->head_dim_v;

    be->rmsnorm(bc, f->x, L->attn_norm, f->xn, n, E, hp->norm_eps);
    const struct backend_mm qkv[3] = {{bm(L->wq), f->q}, {bm(L->wk), f->k}, {bm(L->wv), f->v}};
    be->matmul(bc, f->xn, n, qkv, 3);
    if (L->bq)
        be->add_bias(bc, f->q, L->bq, n, nq);
    if (L->bk)
        be->add_bias(bc, f->k, L->bk, n, nk);
    if (L->bv)
        be->add_bias(bc, f->v, L->bv, n, nv);
    if (L->q_norm) /* per head: rows of head_dim */
        be->rmsnorm(bc, f->q, L->q_norm, f->q, (int64_t)n * hp->n_head, hp->head_dim_k,
                    hp->norm_eps);
    if (L->k_norm)
        be->rmsnorm(bc, f->k, L->k_norm, f->k, (int64_t)n * hp->n_head_kv, hp->head_dim_k,
                    hp->norm_eps);
    be->rope(bc, f->q, n, hp->n_head, hp->head_dim_k, f->pos, &m->rope);
    be->rope(bc, f->k, n, hp->n_head_kv, hp->head_dim_k, f->pos, &m->rope);
    be->kv_write(bc, kv, il, f->k, f->v, f->seq, f->pos, n, hp->n_head_kv, hp->head_dim_k,
                 hp->head_dim_v);
    const struct backend_attn a = {
        .q = f->q,
        .out = f->attn,
        .seq = f->seq,
        .pos = f->pos,
        .kv = kv,
        .layer = il,
        .n_tok = n,
        .n_head = hp->n_head,
        .n_head_kv = hp->n_head_kv,
        .head_dim_k = hp->head_dim_k,
        .head_dim_v = hp->head_dim_v,
        .scale = 1.0f / sqrtf((float)hp->head_dim_k),
    };
    be->attention(bc, &a);
    const struct backend_mm o = {bm(L->wo), f->tmp};
    be->matmul(bc, f->attn, n, &o, 1);
    if (L->bo)
        be->add_bias(bc, f->tmp, L->bo, n, E);
    be->add(bc, f->x, f->tmp, n, E);
}

/* out = down(silu(gate . xn) * (up . xn)) for a dense FFN of width ff. */
static void ffn_dense(struct model *m, const struct backend_weight *gate,
                      const struct backend_weight *up, const struct backend_weight *down, int ff,
                      int n, struct backend_tensor *out) {
    struct model_fwd *f = m->fwd;
    const struct backend_ops *be = m->be->ops;
    const struct backend_mm gu[2] = {{bm(gate), f->g}, {bm(up), f->u}};
    be->matmul(m->be->ctx, f->xn, n, gu, 2);
    be->swiglu(m->be->ctx, f->g, f->u, f->g, n, ff);
    const struct backend_mm d = {bm(down), out};
    be->matmul(m->be->ctx, f->g, n, &d, 1);
}

/* backend_moe.wait of a layer with late experts: runs inside a later submit
 * (the thread running the step is the forward thread), so its error is
 * kept for the forward pass to return after that submit (late_check). */
static int late_wait(void *arg) {
    struct model *m = arg;
    struct model_fwd *f = m->fwd;
    const int rc = experts_need_wait(m->experts, &f->late_err);
    if (rc && !f->late_rc)
        f->late_rc = rc;
    return rc;
}

static int late_check(struct model *m, struct strata_error *err) {
    struct model_fwd *f = m->fwd;
    const int rc = f->late_rc;
    if (rc && err)
        *err = f->late_err;
    f->late_rc = 0;
    return rc;
}

/* Non-resident layer il: reads the picks back (a submit inside the step),
 * counts them in the profile, and gets each picked expert's matrices for
 * this step into f->table[il & 1]. */
static int pick_experts(struct model *m, int il, int n, struct strata_error *err) {
    struct model_fwd *f = m->fwd;
    const struct backend_ops *be = m->be->ops;
    const int NE = m->hp.n_expert, K = m->hp.n_expert_used;
    int rc;
    be->tensor_read(m->be->ctx, f->sel, 0, f->h_sel, n);
    const bool post = f->pred && model_pred_rows_ok(n);
    if (post && !f->split) /* the lookahead's input (split reads it into h_x below) */
        be->tensor_read(m->be->ctx, f->xn, 0, f->h_xp, n);
    if (f->split) { /* for the cold experts, if any: their input and weights */
        be->tensor_read(m->be->ctx, f->xn, 0, f->h_x, n);
        be->tensor_read(m->be->ctx, f->sel_w, 0, f->h_sw, n);
        for (int i = 0; i < f->ctable_n; i++)
            memset(&f->ctable[f->ctable_ids[i]], 0, sizeof *f->ctable);
        f->ctable_n = 0;
    }
    if ((rc = be->submit(m->be->ctx, err)) || (rc = be->wait(m->be->ctx, err)) ||
        (rc = late_check(m, err)))
        return rc;
    if (post) /* the side thread predicts the next layers while this one reads and computes */
        model_pred_post(f->pred, il, f->split ? f->h_x : f->h_xp, n);

    /* the picks: profile counts, then each picked expert's matrices */
    struct backend_expert *tab = f->table[il & 1];
    int32_t *tab_ids = f->table_ids[il & 1];
    for (int i = 0; i < f->table_n[il & 1]; i++) /* forget the layer before last's */
        memset(&tab[tab_ids[i]], 0, sizeof *tab);
    f->table_n[il & 1] = 0;
    memset(f->picked, 0, (size_t)NE);
    for (int i = 0; i < n * K; i++) {
        const int e = f->h_sel[i];
        STRATA_ASSERT(e >= 0 && e < NE);
        f->picked[e] = 1;
        if (m->params.profile)
            profile_add(m->params.profile, il, e);
    }
    /* the layer's distinct picks, in one call: a tier that reads (the
     * expert store) batches the cold ones, each read once for the step;
     * where the backend computes the others first (BACKEND_CAP_MOE_LATE),
     * they are read while it does (the store's "Overlap", xstore.h) */
    int n_need = 0;
    for (int e = 0; e < NE; e++)
        if (f->picked[e])
            f->need_ids[n_need++] = e;
    uint8_t *late = !f->split && (be->caps & BACKEND_CAP_MOE_LATE) ? f->late[il & 1] : NULL;
    if (late)
        memset(late, 0, (size_t)NE);
    if ((rc = experts_need_start(m->experts, il, f->need_ids, n_need, m->step, late, err)))
        return rc;
    f->late_any[il & 1] = false;
    for (int e = 0; late && e < NE; e++)
        f->late_any[il & 1] |= late[e] != 0;
    for (int e = 0; e < NE; e++) {
        if (!f->picked[e])
            continue;
        struct experts_ref ref[EXPERTS_WHICH_COUNT];
        for (int w = 0; w < EXPERTS_WHICH_COUNT; w++)
            if ((rc = experts_get(m->experts, il, e, (enum experts_which)w, m->step, &ref[w], err)))
                return rc;
        const struct backend_expert x = {ref[EXPERTS_GATE].mat, ref[EXPERTS_UP].mat,
                                         ref[EXPERTS_DOWN].mat};
        const int n_dev = (x.gate.w != NULL) + (x.up.w != NULL) + (x.down.w != NULL);
        if (usable(m, &x.gate) && usable(m, &x.up) && usable(m, &x.down)) {
            tab[e] = x;
            tab_ids[f->table_n[il & 1]++] = e;
        } else if (f->split && n_dev == 0) { /* all three in host memory: the cold backend's */
            f->ctable[e] = x;
            f->ctable_ids[f->ctable_n++] = e;
        } else {
            return strata_error_set(err, STRATA_E_UNSUPPORTED,
                                    "model: expert (%d, %d) is in host memory and backend %s "
                                    "takes none%s",
                                    il, e, be->name,
                                    f->split ? " (its matrices are in two tiers)"
                                             : " (no backend_cold)");
        }
    }
    return 0;
}

/* The cold experts of the layer on params.backend_cold (a step of its own
 * over the host copies pick_experts read back); their sum goes into
 * f->part, recorded on the backend. */
static int moe_cold(struct model *m, int n, struct strata_error *err) {
    struct model_fwd *f = m->fwd;
    const struct backend *cb = m->params.backend_cold;
    const struct backend_ops *co = cb->ops;
    const struct backend_step st = {n, 1, NULL, f->h_seq, f->h_pos};
    int rc = co->begin(cb->ctx, &st, err);
    if (rc)
        return rc;
    co->tensor_write(cb->ctx, f->cx, 0, f->h_x, n);
    co->tensor_write(cb->ctx, f->csel, 0, f->h_sel, n);
    co->tensor_write(cb->ctx, f->csw, 0, f->h_sw, n);
    const struct backend_moe moe = {.x = f->cx,
                                    .sel = f->csel,
                                    .sel_w = f->csw,
                                    .experts = f->ctable,
                                    .out = f->cout,
                                    .n_tok = n,
                                    .k = m->hp.n_expert_used,
                                    .n_expert = m->hp.n_expert,
                                    .n_embd = m->hp.n_embd,
                                    .n_ff = m->hp.n_ff_exp,
                                    .accumulate = false};
    co->moe_ffn(cb->ctx, &moe);
    co->tensor_read(cb->ctx, f->cout, 0, f->h_part, n);
    if ((rc = co->submit(cb->ctx, err)) || (rc = co->wait(cb->ctx, err)))
        return rc;
    /* h_part is next written by the next layer's cold step, after the
     * backend's next submit has run this write */
    m->be->ops->tensor_write(m->be->ctx, f->part, 0, f->h_part, n);
    return 0;
}

/* The routed experts of layer il into f->tmp (plus the shared expert):
 * from the layer's resident table, or (pick_experts) from the refs the
 * expert seam hands out for this step's picks, the cold ones computed on
 * params.backend_cold (moe_cold). */
static int ffn_moe(struct model *m, int il, int n, struct strata_error *err) {
    struct model_fwd *f = m->fwd;
    const struct model_hparams *hp = &m->hp;
    const struct model_layer *L = &m->layers[il];
    const struct backend_ops *be = m->be->ops;
    void *bc = m->be->ctx;
    const int NE = hp->n_expert, K = hp->n_expert_used;
    const int64_t E = hp->n_embd;
    int rc;

    if (L->has_shexp) { /* shared expert and its sigmoid gate, from the same input */
        const struct backend_mm sh[3] = {
            {bm(L->gate_sh), f->g}, {bm(L->up_sh), f->u}, {bm(L->gate_inp_sh), f->sh_gate}};
        be->matmul(bc, f->xn, n, sh, 3);
        be->swiglu(bc, f->g, f->u, f->g, n, hp->n_ff_shexp);
        const struct backend_mm d = {bm(L->down_sh), f->sh};
        be->matmul(bc, f->g, n, &d, 1);
    }
    const struct backend_mm r = {bm(L->gate_inp), f->router};
    be->matmul(bc, f->xn, n, &r, 1);
    const struct backend_route route = {.logits = f->router,
                                        .sel = f->sel,
                                        .sel_w = f->sel_w,
                                        .n_tok = n,
                                        .n_expert = NE,
                                        .k = K,
                                        .norm_topk = hp->norm_topk_prob,
                                        .scale = hp->expert_weights_scale};
    be->moe_route(bc, &route);
    struct backend_expert *tab = f->resident[il];
    const uint8_t *late = NULL;
    if (tab) { /* resident: no read-back inside the step; the profile's comes after it */
        if (m->params.profile && f->h_sel_all)
            be->tensor_read(bc, f->sel, 0, f->h_sel_all + (size_t)il * f->B * K, n);
    } else {
        if ((rc = pick_experts(m, il, n, err)) || (f->ctable_n > 0 && (rc = moe_cold(m, n, err))))
            return rc;
        tab = f->table[il & 1];
        late = f->late_any[il & 1] ? f->late[il & 1] : NULL;
    }
    const struct backend_moe moe = {.x = f->xn,
                                    .sel = f->sel,
                                    .sel_w = f->sel_w,
                                    .experts = tab,
                                    .out = f->tmp,
                                    .n_tok = n,
                                    .k = K,
                                    .n_expert = NE,
                                    .n_embd = E,
                                    .n_ff = hp->n_ff_exp,
                                    .accumulate = false,
                                    .late = late,
                                    .wait = late_wait,
                                    .wait_arg = m};
    be->moe_ffn(bc, &moe);
    if (f->split && f->ctable_n > 0 && !f->resident[il]) /* the cold experts' sum */
        be->add(bc, f->tmp, f->part, n, E);
    if (L->has_shexp)
        be->add_gated(bc, f->tmp, f->sh, f->sh_gate, n, E);
    return 0;
}

/* ---- entry point -------------------------------------------------------------- */

int model_batch_n_outputs(const struct model_batch *batch) {
    int n = 0;
    for (int i = 0; batch && i < batch->n_entries; i++)
        n += batch->entries[i].want_logits ? 1 : 0;
    return n;
}

static int validate(const struct model *m, struct kv_cache *kv, const struct model_batch *b,
                    struct strata_error *err) {
    const struct kv_params *kp = kv_get_params(kv);
    if (kp->n_layer != m->hp.n_layer || kp->n_embd_k != m->hp.n_head_kv * m->hp.head_dim_k ||
        kp->n_embd_v != m->hp.n_head_kv * m->hp.head_dim_v || m->hp.n_head_kv % kp->n_head_kv)
        return strata_error_set(err, STRATA_E_INVALID, "model_forward: kv cache shape mismatch");
    if (!b || !b->entries || b->n_entries < 1 || b->n_entries > m->params.n_batch_max)
        return strata_error_set(err, STRATA_E_RANGE, "model_forward: batch of %d entries (max %d)",
                                b ? b->n_entries : 0, m->params.n_batch_max);
    for (int i = 0; i < b->n_entries; i++) {
        const struct model_batch_entry *e = &b->entries[i];
        if (e->seq_id < 0 || e->seq_id >= kp->n_seq_max)
            return strata_error_set(err, STRATA_E_INVALID, "model_forward: entry %d: seq_id %d", i,
                                    e->seq_id);
        if (e->token < 0 || e->token >= m->hp.n_vocab)
            return strata_error_set(err, STRATA_E_INVALID,
                                    "model_forward: entry %d: token %d outside [0, %d)", i,
                                    e->token, m->hp.n_vocab);
        if (e->pos < 0)
            return strata_error_set(err, STRATA_E_INVALID, "model_forward: entry %d: pos %d", i,
                                    e->pos);
        if (e->pos >= kp->n_ctx)
            return strata_error_set(err, STRATA_E_CONTEXT_LENGTH,
                                    "model_forward: position %d >= context %d", e->pos, kp->n_ctx);
        int prev = -1;
        for (int j = i - 1; j >= 0 && prev < 0; j--)
            if (b->entries[j].seq_id == e->seq_id)
                prev = j;
        if (prev >= 0 ? e->pos != b->entries[prev].pos + 1 : e->pos > kv_seq_len(kv, e->seq_id))
            return strata_error_set(err, STRATA_E_INVALID,
                                    "model_forward: entry %d: seq %d pos %d leaves a gap", i,
                                    e->seq_id, e->pos);
    }
    return 0;
}

/* Makes the logits tensor hold n_out rows. */
static int logits_reserve(struct model *m, int n_out, struct strata_error *err) {
    struct model_fwd *f = m->fwd;
    if (n_out <= f->logits_rows)
        return 0;
    struct backend_tensor *t =
        m->be->ops->tensor_alloc(m->be->ctx, BACKEND_F32, n_out, m->hp.n_vocab, err);
    if (!t)
        return err ? err->code : STRATA_E_NOMEM;
    tfree(m, f->logits);
    f->logits = t;
    f->logits_rows = n_out;
    return 0;
}

/* Records and runs the step (the caller has reserved the KV rows). */
/* smp (device sampling): the picks into ids instead of logits. */
struct fwd_sample {
    const struct backend_sample *rule;
    const float *u; /* (n_out) or NULL (greedy) */
    int32_t *ids;   /* (n_out) */
};

static int run_step(struct model *m, struct kv_cache *kv, const struct model_batch *batch,
                    float *logits, int n_out, float *hidden, int n_hid, int max_kv,
                    const struct fwd_sample *smp, struct strata_error *err) {
    struct model_fwd *f = m->fwd;
    const struct model_hparams *hp = &m->hp;
    const struct backend_ops *be = m->be->ops;
    void *bc = m->be->ctx;
    const int n = batch->n_entries;
    const int64_t E = hp->n_embd;
    const struct backend_step step = {n, max_kv, kv, f->h_seq, f->h_pos};
    int rc = be->begin(bc, &step, err);
    if (rc)
        return rc;
    be->tensor_write(bc, f->ids, 0, f->h_ids, n);
    be->tensor_write(bc, f->pos, 0, f->h_pos, n);
    be->tensor_write(bc, f->seq, 0, f->h_seq, n);
    be->embed(bc, m->tok_embd, f->ids, n, f->x);
    for (int il = 0; il < hp->n_layer; il++) {
        attn_block(m, kv, il, n);
        const struct model_layer *L = &m->layers[il];
        be->rmsnorm(bc, f->x, L->ffn_norm, f->xn, n, E, hp->norm_eps);
        if (L->has_moe) {
            if ((rc = ffn_moe(m, il, n, err)))
                return rc;
        } else {
            ffn_dense(m, L->ffn_gate, L->ffn_up, L->ffn_down, hp->n_ff, n, f->tmp);
        }
        be->add(bc, f->x, f->tmp, n, E);
    }
    if (n_out > 0) {
        be->tensor_write(bc, f->out_ids, 0, f->h_out, n_out);
        be->copy_rows(bc, f->x, f->out_ids, n_out, E, f->xn);
        be->rmsnorm(bc, f->xn, m->output_norm, f->xn, n_out, E, hp->norm_eps);
        const struct backend_mm o = {bm(m->output), f->logits};
        be->matmul(bc, f->xn, n_out, &o, 1);
        if (smp) {
            if (smp->rule->temperature > 0.0f)
                be->tensor_write(bc, f->smp_u, 0, smp->u, n_out);
            if ((rc = be->sample(bc, f->logits, n_out, hp->n_vocab, smp->rule, f->smp_u,
                                 f->smp_ids)))
                return strata_error_set(err, rc, "model: backend %s does not sample this rule",
                                        be->name);
            be->tensor_read(bc, f->smp_ids, 0, smp->ids, n_out);
        } else {
            be->tensor_read(bc, f->logits, 0, logits, n_out);
        }
    }
    if (n_hid > 0) { /* f->tmp is free after the last block */
        be->tensor_write(bc, f->hid_ids, 0, f->h_hid, n_hid);
        be->copy_rows(bc, f->x, f->hid_ids, n_hid, E, f->tmp);
        be->rmsnorm(bc, f->tmp, m->output_norm, f->tmp, n_hid, E, hp->norm_eps);
        be->tensor_read(bc, f->tmp, 0, hidden, n_hid);
    }
    if ((rc = be->submit(bc, err)) || (rc = be->wait(bc, err)) || (rc = late_check(m, err)))
        return rc;
    for (int il = 0; m->params.profile && f->h_sel_all && il < hp->n_layer; il++)
        if (f->resident[il]) /* the resident layers' picks, read back with the logits */
            for (int i = 0; i < n * hp->n_expert_used; i++)
                profile_add(m->params.profile, il,
                            f->h_sel_all[(size_t)il * f->B * hp->n_expert_used + i]);
    return 0;
}

int model_forward(struct model *m, struct kv_cache *kv, const struct model_batch *batch,
                  float *logits, struct strata_error *err) {
    return model_forward_hidden(m, kv, batch, logits, NULL, 0, NULL, err);
}

static int forward(struct model *m, struct kv_cache *kv, const struct model_batch *batch,
                   float *logits, const int32_t *hidden_rows, int n_hid, float *hidden,
                   const struct fwd_sample *smp, struct strata_error *err);

int model_forward_hidden(struct model *m, struct kv_cache *kv, const struct model_batch *batch,
                         float *logits, const int32_t *hidden_rows, int n_hid, float *hidden,
                         struct strata_error *err) {
    return forward(m, kv, batch, logits, hidden_rows, n_hid, hidden, NULL, err);
}

bool model_can_sample(const struct model *m) {
    return m && m->be->ops->sample && m->fwd && m->fwd->smp_ids;
}

int model_forward_sample(struct model *m, struct kv_cache *kv, const struct model_batch *batch,
                         const struct model_sample *rule, const float *u, int32_t *ids,
                         struct strata_error *err) {
    if (!model_can_sample(m))
        return strata_error_set(err, STRATA_E_UNSUPPORTED,
                                "model_forward_sample: backend %s samples on the host",
                                m ? m->be->ops->name : "none");
    if (!rule || !ids || (rule->temperature > 0.0f && (!u || rule->top_k < 1 || rule->top_k > 256)))
        return strata_error_set(err, STRATA_E_UNSUPPORTED,
                                "model_forward_sample: the rule needs top_k 1..256 and u");
    const struct backend_sample r = {rule->top_k, rule->top_p, rule->min_p, rule->temperature};
    const struct fwd_sample smp = {&r, u, ids};
    return forward(m, kv, batch, NULL, NULL, 0, NULL, &smp, err);
}

static int forward(struct model *m, struct kv_cache *kv, const struct model_batch *batch,
                   float *logits, const int32_t *hidden_rows, int n_hid, float *hidden,
                   const struct fwd_sample *smp, struct strata_error *err) {
    if (!m || !kv)
        return strata_error_set(err, STRATA_E_INVALID, "model_forward: NULL model or kv");
    int rc = validate(m, kv, batch, err);
    if (rc)
        return rc;
    struct model_fwd *f = m->fwd;
    const int n = batch->n_entries;
    const int n_out = model_batch_n_outputs(batch);
    if (n_out > 0 && !logits && !smp)
        return strata_error_set(err, STRATA_E_INVALID, "model_forward: logits is NULL");
    if (n_hid < 0 || n_hid > n || (n_hid > 0 && (!hidden || !hidden_rows)))
        return strata_error_set(err, STRATA_E_INVALID, "model_forward: %d hidden rows", n_hid);
    for (int r = 0; r < n_hid; r++) {
        if (hidden_rows[r] < 0 || hidden_rows[r] >= n)
            return strata_error_set(err, STRATA_E_INVALID,
                                    "model_forward: hidden row %d names entry %d of %d", r,
                                    hidden_rows[r], n);
        f->h_hid[r] = hidden_rows[r];
    }
    if ((rc = logits_reserve(m, n_out, err)))
        return rc;
    int max_kv = 0, o = 0;
    for (int i = 0; i < n; i++) {
        const struct model_batch_entry *e = &batch->entries[i];
        if ((rc = kv_seq_reserve_pos(kv, e->seq_id, e->pos, err)))
            return rc;
        f->h_ids[i] = e->token;
        f->h_seq[i] = e->seq_id;
        f->h_pos[i] = e->pos;
        if (e->want_logits)
            f->h_out[o++] = i;

        max_kv = e->pos + 1 > max_kv ? e->pos + 1 : max_kv;
    }
    /* Rewinds take effect now: rows at >= the first new pos are overwritten. */
    for (int i = 0; i < n; i++)
        if (kv_seq_len(kv, f->h_seq[i]) > f->h_pos[i])
            kv_seq_set_len(kv, f->h_seq[i], f->h_pos[i]);
    m->step++;
    f->late_rc = 0;
    rc = run_step(m, kv, batch, logits, n_out, hidden, n_hid, max_kv, smp, err);
    if (rc) /* submitted work has finished (the step waits before every get) */
        (void)m->be->ops->wait(m->be->ctx, NULL);
    if (m->experts)
        experts_release(m->experts, m->step);
    if (rc)
        return rc;
    for (int i = 0; i < n; i++)
        kv_seq_set_len(kv, f->h_seq[i], f->h_pos[i] + 1);
    return 0;
}
