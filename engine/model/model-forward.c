/* engine/model/model-forward.c: the batched forward pass (see model.h). One call
 * runs every entry of the batch through every layer together: each matmul
 * gets all entries as a matrix (kernels_matmul with n_tok = n_entries, each
 * weight row read once per call), and MoE entries are grouped by expert so a
 * routed expert's weights are read once per call. All compute goes through
 * the backend vtable (backend.h); routed expert weights only through
 * experts.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf/gguf.h"
#include "engine/kv/kv.h"
#include "engine/model/model-impl.h"
#include "engine/experts/profile.h"

#define FWD_XQ_SLOTS 3

struct model_fwd {
    int B;                     /* n_batch_max */
    int BK;                    /* routed rows: B * n_expert_used (B for dense models) */
    int F;                     /* widest dense FFN: max(n_ff, n_ff_shexp) */
    float *x;                  /* (B, n_embd) residual stream */
    float *xn;                 /* (B, n_embd) normalised input of a block */
    float *q;                  /* (B, n_head * head_dim_k) */
    float *k;                  /* (B, n_head_kv * head_dim_k) */
    float *v;                  /* (B, n_head_kv * head_dim_v) */
    float *attn;               /* (B, n_head * head_dim_v) */
    float *tmp;                /* (B, n_embd) block output before the residual add */
    float *g, *u;              /* gate / up: (B, F) or (BK, n_ff_exp), the larger */
    uint8_t *xq[FWD_XQ_SLOTS]; /* (B, max_act_row) or (BK, max_act_row_exp) bytes */
    int32_t *seq;              /* (B) */
    int32_t *pos;              /* (B) */
    /* MoE */
    float *router;               /* (B, n_expert) router logits, then probabilities */
    int *sel;                    /* (B, n_expert_used) picked expert ids */
    float *sel_w;                /* (B, n_expert_used) their weights */
    int *row_of;                 /* (B * n_expert_used) compact row of (token, slot) */
    int *cnt, *off, *fill;       /* (n_expert) rows per expert, first row, fill cursor */
    float *dn;                   /* (BK, n_embd) expert outputs */
    float *sh;                   /* (B, n_embd) shared-expert output */
    float *sh_gate;              /* (B) shared-expert gate logit */
    struct kern_mat *mats;       /* (2 * n_expert) expert matrices of one dispatch */
    int *mat_expert;             /* (2 * n_expert) which expert each mat came from */
    struct backend_matmul *jobs; /* (2 * n_expert + 4) */
};

void model_fwd_free(struct model_fwd *f) {
    if (!f)
        return;
    free(f->x), free(f->xn), free(f->q), free(f->k), free(f->v), free(f->attn), free(f->tmp);
    free(f->g), free(f->u);
    for (int i = 0; i < FWD_XQ_SLOTS; i++)
        free(f->xq[i]);
    free(f->seq), free(f->pos);
    free(f->router), free(f->sel), free(f->sel_w), free(f->row_of);
    free(f->cnt), free(f->off), free(f->fill), free(f->dn), free(f->sh), free(f->sh_gate);
    free(f->mats), free(f->mat_expert), free(f->jobs);
    free(f);
}

static void *alloc_f(size_t n, size_t sz, bool *ok) {
    void *p = calloc(n ? n : 1, sz);
    if (!p)
        *ok = false;
    return p;
}

struct model_fwd *model_fwd_init(const struct model *m, struct strata_error *err) {
    const struct model_hparams *hp = &m->hp;
    struct model_fwd *f = calloc(1, sizeof *f);
    if (!f)
        goto nomem;
    bool ok = true;
    const size_t B = (size_t)m->params.n_batch_max, E = (size_t)hp->n_embd;
    const size_t K = hp->n_expert > 0 ? (size_t)hp->n_expert_used : 1;
    const size_t NE = (size_t)hp->n_expert;
    f->B = (int)B;
    f->BK = (int)(B * K);
    f->F = hp->n_ff > hp->n_ff_shexp ? hp->n_ff : hp->n_ff_shexp;
    const size_t BK = (size_t)f->BK, F = (size_t)f->F;
    /* Routed rows (BK of them) are n_ff_exp wide; dense and shared-expert
     * rows (B) are F wide: size for whichever is larger, not BK x max. */
    size_t gu = B * F, xq = B * m->max_act_row;
    if (BK * (size_t)hp->n_ff_exp > gu)
        gu = BK * (size_t)hp->n_ff_exp;
    if (BK * m->max_act_row_exp > xq)
        xq = BK * m->max_act_row_exp;
    f->x = alloc_f(B * E, sizeof(float), &ok);
    f->xn = alloc_f(B * E, sizeof(float), &ok);
    f->q = alloc_f(B * hp->n_head * hp->head_dim_k, sizeof(float), &ok);
    f->k = alloc_f(B * hp->n_head_kv * hp->head_dim_k, sizeof(float), &ok);
    f->v = alloc_f(B * hp->n_head_kv * hp->head_dim_v, sizeof(float), &ok);
    f->attn = alloc_f(B * hp->n_head * hp->head_dim_v, sizeof(float), &ok);
    f->tmp = alloc_f(B * E, sizeof(float), &ok);
    f->g = alloc_f(gu, sizeof(float), &ok);
    f->u = alloc_f(gu, sizeof(float), &ok);
    for (int i = 0; i < FWD_XQ_SLOTS; i++)
        f->xq[i] = alloc_f(xq, 1, &ok);
    f->seq = alloc_f(B, sizeof(int32_t), &ok);
    f->pos = alloc_f(B, sizeof(int32_t), &ok);
    f->jobs = alloc_f(2 * NE + 4, sizeof *f->jobs, &ok);
    if (NE > 0) {
        f->router = alloc_f(B * NE, sizeof(float), &ok);
        f->sel = alloc_f(B * K, sizeof(int), &ok);
        f->sel_w = alloc_f(B * K, sizeof(float), &ok);
        f->row_of = alloc_f(B * K, sizeof(int), &ok);
        f->cnt = alloc_f(NE, sizeof(int), &ok);
        f->off = alloc_f(NE, sizeof(int), &ok);
        f->fill = alloc_f(NE, sizeof(int), &ok);
        f->dn = alloc_f(BK * E, sizeof(float), &ok);
        f->sh = alloc_f(B * E, sizeof(float), &ok);
        f->sh_gate = alloc_f(B, sizeof(float), &ok);
        f->mats = alloc_f(2 * NE, sizeof *f->mats, &ok);
        f->mat_expert = alloc_f(2 * NE, sizeof(int), &ok);
    }
    if (!ok)
        goto nomem;
    return f;
nomem:
    model_fwd_free(f);
    strata_error_set(err, STRATA_E_NOMEM, "model: out of memory for forward buffers");
    return NULL;
}

/* ---- helpers ------------------------------------------------------------------ */

static size_t act_stride(const struct kern_mat *w) {
    return kernels_act_row_size(w->type, w->n_cols);
}

/* y_i = w_i . in for nm matrices sharing the input in: (n, n_cols), in one
 * dispatch. The input is quantized once per distinct activation format. */
static void mm_multi(struct model *m, const float *in, int64_t n, const struct kern_mat *const *w,
                     float *const *y, int nm) {
    struct model_fwd *f = m->fwd;
    const struct backend_ops *be = m->be->ops;
    int slot_of[FWD_XQ_SLOTS];
    STRATA_ASSERT(nm <= FWD_XQ_SLOTS);
    for (int i = 0; i < nm; i++) {
        slot_of[i] = i;
        for (int j = 0; j < i; j++)
            if (kernels_act_type(w[j]->type) == kernels_act_type(w[i]->type) &&
                w[j]->n_cols == w[i]->n_cols) {
                slot_of[i] = slot_of[j];
                break;
            }
        if (slot_of[i] == i)
            be->quantize_act(m->be->ctx, w[i]->type, in, n, w[i]->n_cols, f->xq[i],
                             act_stride(w[i]));
        f->jobs[i] = (struct backend_matmul){.w = w[i],
                                             .xq = f->xq[slot_of[i]],
                                             .xq_stride = act_stride(w[i]),
                                             .n_tok = n,
                                             .y = y[i],
                                             .ldy = w[i]->n_rows};
    }
    be->matmul(m->be->ctx, f->jobs, nm);
}

static void mm_one(struct model *m, const float *in, int64_t n, const struct kern_mat *w,
                   float *y) {
    mm_multi(m, in, n, &w, &y, 1);
}

static void add_bias(float *y, const float *b, int64_t n, int64_t width) {
    if (!b)
        return;
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < width; i++)
            y[t * width + i] += b[i];
}

static void add_into(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] += y[i];
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
    const struct kern_mat *w[3] = {&L->wq, &L->wk, &L->wv};
    float *y[3] = {f->q, f->k, f->v};
    mm_multi(m, f->xn, n, w, y, 3);
    add_bias(f->q, L->bq, n, nq);
    add_bias(f->k, L->bk, n, nk);
    add_bias(f->v, L->bv, n, nv);
    if (L->q_norm)
        be->rmsnorm(bc, f->q, L->q_norm, f->q, (int64_t)n * hp->n_head, hp->head_dim_k,
                    hp->norm_eps);
    if (L->k_norm)
        be->rmsnorm(bc, f->k, L->k_norm, f->k, (int64_t)n * hp->n_head_kv, hp->head_dim_k,
                    hp->norm_eps);
    be->rope(bc, f->q, n, hp->n_head, hp->head_dim_k, f->pos, &m->rope);
    be->rope(bc, f->k, n, hp->n_head_kv, hp->head_dim_k, f->pos, &m->rope);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < hp->n_head_kv; h++) { /* each head into its part of the block */
            ops_f32_to_f16_row(f->k + t * nk + h * hp->head_dim_k,
                               kv_k_head(kv, il, f->seq[t], f->pos[t], h, hp->head_dim_k),
                               hp->head_dim_k);
            ops_f32_to_f16_row(f->v + t * nv + h * hp->head_dim_v,
                               kv_v_head(kv, il, f->seq[t], f->pos[t], h, hp->head_dim_v),
                               hp->head_dim_v);
        }
    struct backend_attn a = {
        .q = f->q,
        .out = f->attn,
        .seq_id = f->seq,
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
    mm_one(m, f->attn, n, &L->wo, f->tmp);
    add_bias(f->tmp, L->bo, n, E);
    add_into(f->x, f->tmp, (int64_t)n * E);
}

/* tmp = down(silu(gate . xn) * (up . xn)) for a dense FFN. */
static void ffn_dense(struct model *m, const struct kern_mat *gate, const struct kern_mat *up,
                      const struct kern_mat *down, int n, float *out) {
    struct model_fwd *f = m->fwd;
    const struct kern_mat *w[2] = {gate, up};
    float *y[2] = {f->g, f->u};
    mm_multi(m, f->xn, n, w, y, 2);
    m->be->ops->swiglu(m->be->ctx, f->g, f->u, f->g, n, gate->n_rows);
    mm_one(m, f->g, n, down, out);
}

/* Router: probabilities, top-k picks and their weights per token. */
static void moe_route(struct model *m, int il, int n) {
    struct model_fwd *f = m->fwd;
    const struct model_hparams *hp = &m->hp;
    const int NE = hp->n_expert, K = hp->n_expert_used;
    mm_one(m, f->xn, n, &m->layers[il].gate_inp, f->router);
    for (int t = 0; t < n; t++) {
        float *p = f->router + (size_t)t * NE;
        ops_softmax(p, NE);
        int *sel = f->sel + (size_t)t * K;
        float *w = f->sel_w + (size_t)t * K;
        float sum = 0.0f;
        for (int j = 0; j < K; j++) { /* k passes of selection: ties go to the lower id */
            int best = -1;
            for (int e = 0; e < NE; e++) {
                bool taken = false;
                for (int i = 0; i < j; i++)
                    taken |= sel[i] == e;
                if (!taken && (best < 0 || p[e] > p[best]))
                    best = e;
            }
            sel[j] = best;
            w[j] = p[best];
            sum += w[j];
            if (m->params.profile)
                profile_add(m->params.profile, il, best);
        }
        if (hp->norm_topk_prob)
            for (int j = 0; j < K; j++)
                w[j] /= sum;
        const float ws = hp->expert_weights_scale;
        if (ws != 0.0f && ws != 1.0f)
            for (int j = 0; j < K; j++)
                w[j] *= ws;
    }
}

/* dst row row_of[t * K + j] = xn row t in wtype's activation format (stride
 * bytes a row), for every (token, slot): xn is quantized once into xq[2]. */
static void gather_act(struct model *m, enum quant_type wtype, int n, size_t stride, uint8_t *dst) {
    struct model_fwd *f = m->fwd;
    const int K = m->hp.n_expert_used;
    m->be->ops->quantize_act(m->be->ctx, wtype, f->xn, n, m->hp.n_embd, f->xq[2], stride);
    for (int i = 0; i < n * K; i++)
        memcpy(dst + (size_t)f->row_of[i] * stride, f->xq[2] + (size_t)(i / K) * stride, stride);
}

/* Where olmoe decode time goes (the 2-vCPU EPYC dev box, release, 2 threads,
 * `strata run -m MODEL --ids 100 -n 129 --temp 0 --ignore-eos -t 2`, 02:20-02:25
 * 2026-12-01, under the bench lock with bench/roofline at 42-56 GB/s; timers
 * around be->matmul, ffn_moe and model_forward in a scratch copy, not kept):
 * matmuls are 96% of a decode step (15.1 of 15.8 ms) and stream at the same
 * rate as the dense models' (olmoe 48.9, llama-3.2-1b Q4_K_M 48.8, qwen3-0.6b
 * Q8_0 50.9 GB/s of weights, one run each in a row); the expert gate+up and
 * down dispatches alone 45-48 GB/s, about kernels-bench's q4_K / q6_K decode
 * on 1024- and 2048-wide rows (47-50 GB/s, same box, same minute). Routing,
 * gather, swiglu, quantization and the weighted sum are ~0.3 ms a token, the
 * pool's end-of-dispatch wait 0.2 ms (27 ms over the run, ~200 dispatches
 * a token). Same run, models in turn, 2 rounds: olmoe 55.5 / 55.5 tok/s
 * (41 GB/s of its 740 MB a token), llama Q4_K_M 56.7 / 54.5 (44-45 GB/s of
 * 800 MB), qwen3 67.7 / 69.0 (43-44 GB/s of 633 MB): olmoe within ~8% of
 * the dense models per byte, not the 66% vs 87% of roofline of bench/cpu's
 * 02:16 run (each model against its own probe reads, which swing 42-77
 * GB/s). Tried and not kept (A/B interleaved in one locked run, old/new
 * pairs): prefetching the next job's first 8 KB while a decode chunk
 * computes its matrix's last 8 KB of rows (an expert matrix's head starts
 * cold; in backend-cpu.c): 59.1/61.0 59.0/60.0 64.9/65.3 65.1/63.0 tok/s,
 * and in a second run gate+up 45.1/46.1 46.6/44.3 45.0/46.3 44.8/44.2
 * GB/s: noise. KX_DECODE_PF_BYTES 8/16/32 KB on olmoe, 3 rounds:
 * 61.7/59.9/60.5 61.6/61.7/61.2 62.0/60.0/61.7 tok/s: noise. */
static int ffn_moe(struct model *m, int il, int n, struct strata_error *err) {
    struct model_fwd *f = m->fwd;
    const struct model_hparams *hp = &m->hp;
    const struct model_layer *L = &m->layers[il];
    const struct backend_ops *be = m->be->ops;
    void *bc = m->be->ctx;
    const int NE = hp->n_expert, K = hp->n_expert_used, FE = hp->n_ff_exp;
    const int64_t E = hp->n_embd;
    int rc = 0;

    if (L->has_shexp) { /* shared expert and its sigmoid gate, from the same input */
        const struct kern_mat *w[3] = {&L->gate_sh, &L->up_sh, &L->gate_inp_sh};
        float *y[3] = {f->g, f->u, f->sh_gate};
        mm_multi(m, f->xn, n, w, y, 3);
        be->swiglu(bc, f->g, f->u, f->g, n, hp->n_ff_shexp);
        mm_one(m, f->g, n, &L->down_sh, f->sh);
    }

    moe_route(m, il, n);
    /* Group (token, slot) pairs by expert: rows [off[e], off[e] + cnt[e]) in token order. */
    memset(f->cnt, 0, (size_t)NE * sizeof *f->cnt);
    for (int i = 0; i < n * K; i++)
        f->cnt[f->sel[i]]++;
    for (int e = 0, o = 0; e < NE; e++) {
        f->off[e] = o;
        f->fill[e] = 0;
        o += f->cnt[e];
    }
    for (int i = 0; i < n * K; i++) {
        int e = f->sel[i];
        f->row_of[i] = f->off[e] + f->fill[e]++;
    }
    const int rows = n * K;

    /* gate + up of every picked expert in one dispatch. */
    int nm = 0;
    for (int e = 0; e < NE && rc == 0; e++) {
        if (!f->cnt[e])
            continue;
        for (int w = 0; w < 2 && rc == 0; w++) {
            rc = experts_get(m->experts, il, e, w == 0 ? EXPERTS_GATE : EXPERTS_UP, &f->mats[nm],
                             err);
            if (rc == 0)
                f->mat_expert[nm++] = e;
        }
    }
    if (rc == 0 && nm > 0) {
        /* All experts of a layer share the tensor types: quantize each token's
         * input once per format, then gather the quantized rows by expert
         * (a token's K picks share one input; quantizing the K gathered f32
         * copies cost 2.4% of olmoe decode cycles, perf). */
        const struct kern_mat *wg = &f->mats[0], *wu = &f->mats[1];
        const size_t sg = act_stride(wg), su = act_stride(wu);
        gather_act(m, wg->type, n, sg, f->xq[0]);
        uint8_t *xu = f->xq[0];
        if (kernels_act_type(wu->type) != kernels_act_type(wg->type)) {
            gather_act(m, wu->type, n, su, f->xq[1]);
            xu = f->xq[1];
        }
        for (int i = 0; i < nm; i++) {
            const int e = f->mat_expert[i];
            const bool up = i % 2 == 1;
            const size_t s = up ? su : sg;
            f->jobs[i] = (struct backend_matmul){.w = &f->mats[i],
                                                 .xq = (up ? xu : f->xq[0]) + (size_t)f->off[e] * s,
                                                 .xq_stride = s,
                                                 .n_tok = f->cnt[e],
                                                 .y = (up ? f->u : f->g) + (size_t)f->off[e] * FE,
                                                 .ldy = FE};
        }
        be->matmul(bc, f->jobs, nm);
    }
    for (int i = 0; i < nm; i++)
        experts_release(m->experts, il, f->mat_expert[i], i % 2 ? EXPERTS_UP : EXPERTS_GATE);
    if (rc)
        return rc;
    be->swiglu(bc, f->g, f->u, f->g, rows, FE);

    /* down of every picked expert in one dispatch. */
    nm = 0;
    for (int e = 0; e < NE && rc == 0; e++) {
        if (!f->cnt[e])
            continue;
        rc = experts_get(m->experts, il, e, EXPERTS_DOWN, &f->mats[nm], err);
        if (rc == 0)
            f->mat_expert[nm++] = e;
    }
    if (rc == 0 && nm > 0) {
        const size_t sd = act_stride(&f->mats[0]);
        be->quantize_act(bc, f->mats[0].type, f->g, rows, FE, f->xq[0], sd);
        for (int i = 0; i < nm; i++) {
            const int e = f->mat_expert[i];
            f->jobs[i] = (struct backend_matmul){.w = &f->mats[i],
                                                 .xq = f->xq[0] + (size_t)f->off[e] * sd,
                                                 .xq_stride = sd,
                                                 .n_tok = f->cnt[e],
                                                 .y = f->dn + (size_t)f->off[e] * E,
                                                 .ldy = E};
        }
        be->matmul(bc, f->jobs, nm);
    }
    for (int i = 0; i < nm; i++)
        experts_release(m->experts, il, f->mat_expert[i], EXPERTS_DOWN);
    if (rc)
        return rc;

    /* Weighted sum per token in slot order (independent of batch grouping). */
    for (int t = 0; t < n; t++) {
        float *o = f->tmp + (size_t)t * E;
        for (int64_t i = 0; i < E; i++)
            o[i] = 0.0f;
        for (int j = 0; j < K; j++) {
            const float w = f->sel_w[t * K + j];
            const float *d = f->dn + (size_t)f->row_of[t * K + j] * E;
            for (int64_t i = 0; i < E; i++)
                o[i] += w * d[i];
        }
        if (L->has_shexp) {
            const float gs = 1.0f / (1.0f + expf(-f->sh_gate[t]));
            const float *s = f->sh + (size_t)t * E;
            for (int64_t i = 0; i < E; i++)
                o[i] += gs * s[i];
        }
    }
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

int model_forward(struct model *m, struct kv_cache *kv, const struct model_batch *batch,
                  float *logits, struct strata_error *err) {
    if (!m || !kv)
        return strata_error_set(err, STRATA_E_INVALID, "model_forward: NULL model or kv");
    int rc = validate(m, kv, batch, err);
    if (rc)
        return rc;
    struct model_fwd *f = m->fwd;
    const struct model_hparams *hp = &m->hp;
    const int n = batch->n_entries;
    const int64_t E = hp->n_embd;
    const int n_out = model_batch_n_outputs(batch);
    if (n_out > 0 && !logits)
        return strata_error_set(err, STRATA_E_INVALID, "model_forward: logits is NULL");
    int max_kv = 0;
    for (int i = 0; i < n; i++) {
        const struct model_batch_entry *e = &batch->entries[i];
        if ((rc = kv_seq_reserve_pos(kv, e->seq_id, e->pos, err)))
            return rc;
        f->seq[i] = e->seq_id;
        f->pos[i] = e->pos;
        max_kv = e->pos + 1 > max_kv ? e->pos + 1 : max_kv;
    }
    if ((rc = m->be->ops->reserve(m->be->ctx, max_kv, err)))
        return rc;
    /* Rewinds take effect now: rows at >= the first new pos are overwritten. */
    for (int i = 0; i < n; i++)
        if (kv_seq_len(kv, f->seq[i]) > f->pos[i])
            kv_seq_set_len(kv, f->seq[i], f->pos[i]);

    /* token embeddings */
    const size_t erb = quant_row_size((enum quant_type)m->tok_embd->type, E);
    for (int i = 0; i < n; i++) {
        const uint8_t *row =
            (const uint8_t *)m->tok_embd->data + (size_t)batch->entries[i].token * erb;
        if (m->tok_embd->type == QUANT_F32)
            memcpy(f->x + i * E, row, (size_t)E * sizeof(float));
        else
            quant_dequantize_row((enum quant_type)m->tok_embd->type, row, f->x + i * E, E);
    }

    for (int il = 0; il < hp->n_layer; il++) {
        attn_block(m, kv, il, n);
        const struct model_layer *L = &m->layers[il];
        m->be->ops->rmsnorm(m->be->ctx, f->x, L->ffn_norm, f->xn, n, E, hp->norm_eps);
        if (L->has_moe) {
            if ((rc = ffn_moe(m, il, n, err)))
                return rc;
        } else {
            ffn_dense(m, &L->ffn_gate, &L->ffn_up, &L->ffn_down, n, f->tmp);
        }
        add_into(f->x, f->tmp, (int64_t)n * E);
    }
    for (int i = 0; i < n; i++)
        kv_seq_set_len(kv, f->seq[i], f->pos[i] + 1);

    if (n_out == 0)
        return 0;
    int o = 0;
    for (int i = 0; i < n; i++)
        if (batch->entries[i].want_logits)
            memcpy(f->xn + (size_t)o++ * E, f->x + (size_t)i * E, (size_t)E * sizeof(float));
    m->be->ops->rmsnorm(m->be->ctx, f->xn, m->output_norm, f->xn, n_out, E, hp->norm_eps);
    mm_one(m, f->xn, n_out, &m->output, logits);
    return 0;
}
