/* engine/model/model-impl.h: internals shared by model-load.c and model-forward.c. */
#ifndef STRATA_MODEL_IMPL_H
#define STRATA_MODEL_IMPL_H

#include "engine/backend/backend.h"
#include "engine/experts/experts.h"
#include "engine/cpu/kernels.h"
#include "engine/model/model.h"

#define MODEL_MAX_HEAD_DIM 1024 /* ops.c keeps one head on the stack */
#define MODEL_MAX_EXPERT_USED 64

struct model_layer {
    const float *attn_norm;         /* (n_embd) */
    struct kern_mat wq;             /* (n_head * head_dim_k, n_embd) */
    struct kern_mat wk;             /* (n_head_kv * head_dim_k, n_embd) */
    struct kern_mat wv;             /* (n_head_kv * head_dim_v, n_embd) */
    struct kern_mat wo;             /* (n_embd, n_head * head_dim_v) */
    const float *bq, *bk, *bv, *bo; /* biases or NULL (qwen2) */
    const float *q_norm, *k_norm;   /* (head_dim_k) or NULL (qwen3) */
    const float *ffn_norm;          /* (n_embd) */
    /* dense FFN (has_ffn) */
    bool has_ffn;
    struct kern_mat ffn_gate, ffn_up; /* (n_ff, n_embd) */
    struct kern_mat ffn_down;         /* (n_embd, n_ff) */
    /* MoE (has_moe) */
    bool has_moe;
    struct kern_mat gate_inp; /* (n_expert, n_embd) router */
    /* shared expert (has_shexp, qwen2moe) */
    bool has_shexp;
    struct kern_mat gate_sh, up_sh; /* (n_ff_shexp, n_embd) */
    struct kern_mat down_sh;        /* (n_embd, n_ff_shexp) */
    struct kern_mat gate_inp_sh;    /* (1, n_embd): sigmoid gate of the shared expert */
};

struct model_fwd; /* forward scratch, model-forward.c */

struct model {
    struct model_hparams hp;
    struct model_params params;
    struct gguf_file *gguf;                  /* owned */
    struct backend *be;                      /* owned */
    struct experts_source *experts;          /* owned, NULL for dense models */
    struct model_layer *layers;              /* (n_layer) */
    const struct gguf_tensor_info *tok_embd; /* (n_vocab, n_embd) any dequantizable type */
    const float *output_norm;                /* (n_embd) */
    struct kern_mat output;                  /* (n_vocab, n_embd): output.weight or token_embd */
    const float *rope_freqs;                 /* (n_rot / 2) or NULL */
    struct ops_rope_cfg rope;
    size_t max_act_row;     /* largest activation row (bytes) over every bound matrix */
    size_t max_act_row_exp; /* largest activation row of a routed expert matrix */
    uint64_t weight_bytes;
    uint64_t pack_bytes; /* bytes of matrices in the packed layout (model-pack.c) */
    uint64_t copy_bytes; /* bytes of matrices copied into the arena (packed or not) */
    void *pack_raw;      /* owned: munmap(pack_raw, pack_raw_bytes); NULL if none */
    size_t pack_raw_bytes;
    float **owned_vecs; /* f32 copies of 1-D tensors */
    int n_owned_vecs, cap_owned_vecs;
    struct model_fwd *fwd; /* owned */
};

/* model-pack.c: copies the forward pass's matrices into one anonymous arena,
 * Q4_K / Q6_K in kernels_pack's layout; 0 or an error (nothing copied then). */
int model_copy_weights(struct model *m, struct strata_error *err);

/* model-forward.c */
struct model_fwd *model_fwd_init(const struct model *m, struct strata_error *err);
void model_fwd_free(struct model_fwd *f);

#endif
