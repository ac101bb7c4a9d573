/* engine/model/model-impl.h: internals shared by model-load.c and model-forward.c. */
#ifndef STRATA_MODEL_IMPL_H
#define STRATA_MODEL_IMPL_H

#include "engine/backend/backend.h"
#include "engine/experts/experts.h"
#include "engine/model/model.h"

#define MODEL_MAX_HEAD_DIM 1024 /* the CPU's ops keep one head on the stack */
#define MODEL_MAX_EXPERT_USED 64

/* Weights are backend handles (backend.h), bound at load; NULL = absent. */
struct model_layer {
    struct backend_weight *attn_norm;         /* VEC (n_embd) */
    struct backend_weight *wq;                /* (n_head * head_dim_k, n_embd) */
    struct backend_weight *wk;                /* (n_head_kv * head_dim_k, n_embd) */
    struct backend_weight *wv;                /* (n_head_kv * head_dim_v, n_embd) */
    struct backend_weight *wo;                /* (n_embd, n_head * head_dim_v) */
    struct backend_weight *bq, *bk, *bv, *bo; /* VEC biases or NULL (qwen2) */
    struct backend_weight *q_norm, *k_norm;   /* VEC (head_dim_k) or NULL (qwen3) */
    struct backend_weight *ffn_norm;          /* VEC (n_embd) */
    /* dense FFN (has_ffn) */
    bool has_ffn;
    struct backend_weight *ffn_gate, *ffn_up; /* (n_ff, n_embd) */
    struct backend_weight *ffn_down;          /* (n_embd, n_ff) */
    /* MoE (has_moe) */
    bool has_moe;
    struct backend_weight *gate_inp; /* (n_expert, n_embd) router */
    /* the routed experts' stacks, bound for the backend's own copy (the RAM
     * tier serves them from it); the forward pass reads experts only
     * through the expert seam */
    struct backend_weight *exps[EXPERTS_WHICH_COUNT];
    /* shared expert (has_shexp, qwen2moe) */
    bool has_shexp;
    struct backend_weight *gate_sh, *up_sh; /* (n_ff_shexp, n_embd) */
    struct backend_weight *down_sh;         /* (n_embd, n_ff_shexp) */
    struct backend_weight *gate_inp_sh;     /* (1, n_embd): sigmoid gate of the shared expert */
};

/* Weights described while binding, handed to the backend in one call. */
struct model_binds {
    struct backend_weight_desc *desc; /* (n) */
    struct backend_weight ***dst;     /* (n) where each handle goes */
    size_t n, cap, cap_dst;
};

struct model_fwd; /* forward tensors, model-forward.c */

struct model {
    struct model_hparams hp;
    struct model_params params;
    struct gguf_file *gguf;             /* owned */
    struct backend *be;                 /* borrowed: params.backend */
    struct backend_weights *wset;       /* owned: be->ops->weights_free */
    struct backend_bind_info bound;     /* what the backend copied */
    struct experts_source *experts;     /* owned (the chain), NULL for dense models */
    struct model_layer *layers;         /* (n_layer) */
    struct backend_weight *tok_embd;    /* ROWS (n_vocab, n_embd) any dequantizable type */
    struct backend_weight *output_norm; /* VEC (n_embd) */
    struct backend_weight *output;      /* (n_vocab, n_embd): output.weight or token_embd */
    struct backend_weight *rope_freqs;  /* VEC (n_rot / 2) or NULL */
    struct backend_rope rope;
    struct model_binds binds; /* during load only */
    uint64_t weight_bytes;
    uint64_t step;      /* forward steps so far: the expert seam's step ids */
    float **owned_vecs; /* f32 copies of 1-D tensors (the VEC weights' host bytes) */
    int n_owned_vecs;
    size_t cap_owned_vecs; /* strata_grow capacity */
    struct model_fwd *fwd; /* owned */
};

/* model-predict.c: the router lookahead on a side thread (xstore_params.prefetch):
 *
 *   struct model_pred *p = model_pred_init(m, depth, want_layer, &err);
 *   model_pred_post(p, il, xn_host, n);   // forward thread, never blocks
 *   model_pred_free(p);                   // joins the thread
 *
 * want_layer (n_layer): the layers whose experts it predicts (MoE layers
 * served by a tier that reads). The thread calls experts_prefetch. */
struct model_pred;
struct model_pred *model_pred_init(const struct model *m, int depth, const bool *want_layer,
                                   struct strata_error *err); /* owned: model_pred_free() */
/* Posts layer il's normalised input (n rows of n_embd, copied) for the
 * layers after it; a step of more rows than the predictor takes
 * (model_pred_rows_ok) posts nothing. */
void model_pred_post(struct model_pred *p, int il, const float *x, int n);
bool model_pred_rows_ok(int n);
void model_pred_free(struct model_pred *p); /* NULL is a no-op */

/* model-forward.c */
struct model_fwd *model_fwd_init(const struct model *m, struct strata_error *err);
void model_fwd_free(const struct model *m, struct model_fwd *f);

#endif
