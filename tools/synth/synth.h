/* tools/synth/synth.h: random-weight model synthesizer and requantizer.
 *
 *   struct synth_params p;
 *   synth_params_default(&p);
 *   if (synth_preset(&p, "llama-3.2-1b", &err) == 0) {
 *       snprintf(p.recipe, sizeof(p.recipe), "q4_k_m");
 *       struct synth_report rep;
 *       synth_write(&p, "model.gguf", &rep, &err);
 *   }
 *   synth_quantize_file("in.gguf", "out.gguf", "q8_0", 0, &rep, &err);
 *
 * Models use llama.cpp's tensor names, shapes (ne order) and metadata keys for
 * the archs "llama" (dense, or Mixtral-style MoE when n_expert > 0), "qwen2"
 * (Q/K/V biases), "qwen3" (per-head attn_q_norm / attn_k_norm) and "qwen3moe".
 * Files are streamed tensor by tensor (gguf_writer), rows generated and
 * quantized in batches, so memory stays bounded (a few MB per thread) for any
 * model size.
 *
 * Weights (all from one seeded xoshiro256** stream per row (engine/core/rng.h), so the output does
 * not depend on the thread count): every matrix is uniform with standard
 * deviation 1/sqrt(ne[0]) (its fan-in); output projections (attn_output,
 * ffn_down, ffn_down_exps) are further scaled by 1/sqrt(2*n_layer) as in
 * GPT-2's initialisation, so the residual stream stays O(1) over many layers;
 * token embeddings have std 1; norm gains are 1 +- 0.05 (uniform); biases
 * std 0.02. Tied models (no output.weight) get output_norm gains of
 * 1/sqrt(n_embd) so their logits have std ~1 like untied ones.
 *
 * Route skew (--route-skew zipf:S, MoE only): expert popularity should follow
 * p(rank r) ~ r^-S. Per-rank router-logit biases are calibrated once per model
 * (a seeded Monte Carlo of top-k over bias + N(0,1) logits, see
 * calibrate_rank_bias in synth.c), and each layer assigns ranks to experts by
 * a seeded permutation. The bias is carried by a shared direction u (a seeded
 * +-1/sqrt(n_embd) vector): every token embedding gets a component
 * sqrt(n_embd)*u (as large as its random part), and router row e gets
 * b_e * sqrt(1 + 1 + l/n_layer) / sqrt(n_embd) * u, where the square root
 * compensates the dilution of u by the residual updates of the l layers
 * before (each sublayer adds ~1/(2 n_layer) of variance). The router's random
 * part is made orthogonal to u and scaled so its logits have std ~1.
 * Measured on layer 0 (tests/tools/test-synth.c, 16 experts, top-2, 2048
 * tokens): count(rank 1) / count(rank 9) = 9.2 at S=1 (Zipf: 9), 25.1 at
 * S=1.5 (Zipf: 27), 1.1 without skew. Deep layers are Zipf-like, not exact:
 * the dilution estimate is rough and attention mixes tokens.
 *
 * Speed: Q4_K/Q5_K/Q6_K matrices are drawn directly as random codes with the
 * same standard deviation (tools/synth/synth-direct.c) unless exact_quant is set:
 * ggml's reference K-quant search costs 40-66 ns a weight.
 *
 * Threading: functions are reentrant; synth_write uses p->n_threads threads.
 */
#ifndef STRATA_SYNTH_H
#define STRATA_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/error.h"
#include "engine/gguf/gguf.h"

struct synth_params {
    char arch[16];                      /* "llama", "qwen2", "qwen3", "qwen3moe" */
    char name[64];                      /* general.name */
    int64_t n_embd;                     /* hidden size */
    int64_t n_layer;                    /* blocks */
    int64_t n_head;                     /* query heads */
    int64_t n_head_kv;                  /* key/value heads (GQA) */
    int64_t head_dim;                   /* 0: n_embd / n_head */
    int64_t n_ff;                       /* dense FFN width (feed_forward_length) */
    int64_t n_vocab;                    /* ignored with vocab_from (its token count wins) */
    int64_t n_expert;                   /* 0 = dense */
    int64_t n_expert_used;              /* top-k */
    int64_t n_ff_exp;                   /* expert FFN width (qwen3moe); llama MoE uses n_ff */
    int64_t n_ctx;                      /* context_length */
    float rope_base;                    /* rope.freq_base */
    float rms_eps;                      /* attention.layer_norm_rms_epsilon */
    bool tied_output;                   /* no output.weight: logits use token_embd */
    char recipe[16];                    /* see synth_recipe_names */
    uint64_t seed;                      /* weights are a pure function of (seed, params) */
    double route_skew;                  /* Zipf exponent S (MoE); 0 = no skew */
    const struct gguf_file *vocab_from; /* borrowed; NULL = built-in byte-level BPE vocab */
    int n_threads;                      /* >= 1 */
    bool exact_quant; /* false: random K-quant rows are drawn as codes (synth-direct.c, ~10x
                         faster); true: every row is f32 through quant_quantize_row */
    int pooling;      /* <arch>.pooling_type written (llama.cpp's 0 none .. 4 rank, as
                         engine/model/embed.h); -1 (the default): no key */
};

struct synth_report {
    uint64_t n_bytes;   /* file size */
    int64_t n_tensors;  /* tensors written */
    int64_t n_params;   /* weights (elements) */
    int64_t n_fallback; /* tensors whose row length forced a fallback type */
};

void synth_params_default(struct synth_params *p);
/* Fills arch and geometry from a named preset (keeps recipe, seed, threads). */
int synth_preset(struct synth_params *p, const char *preset, struct strata_error *err);
/* NULL-terminated list of preset names and their one-line descriptions. */
extern const char *const synth_preset_names[];
extern const char *const synth_preset_docs[];
/* Writes a complete model. rep may be NULL. */
int synth_write(const struct synth_params *p, const char *path, struct synth_report *rep,
                struct strata_error *err);

/* ---- recipes: llama.cpp's llama-quantize type mixes ----------------------
 * A recipe is a llama_ftype: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1,
 * q6_k, q4_k_s, q4_k_m, q5_k_s, q5_k_m, mxfp4 (MXFP4_MOE: expert tensors
 * MXFP4, the rest Q8_0). Rules follow llama.cpp src/llama-quant.cpp
 * (llama_tensor_get_type_impl, tensor_type_fallback): output.weight (or a
 * tied token_embd) Q6_K unless the default is Q8_0 / row not a multiple of
 * the block; attn_v Q6_K for Q4_K_M/Q5_K_M on layers where use_more_bits
 * (i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2); ffn_down likewise by layer;
 * 8-expert models: attn_v and attn_k Q8_0, attn_output Q5_K (Q4_K_*);
 * norms, 1-D tensors and ffn_gate_inp keep their source type (F32).
 * Rows not a multiple of the block size fall back (Q4_K->Q5_0, Q5_K->Q5_1,
 * Q6_K->Q8_0, then F16); where llama.cpp has no fallback (it throws) strata
 * uses F16. Not modelled: the 70B attn_v bump, imatrix-dependent rules.
 * "pure:TYPE" (or a bare ggml type name such as q4_K, q2_K, iq4_nl) gives
 * every quantizable tensor TYPE, like llama-quantize --pure. */
extern const char *const synth_recipe_names[];

struct synth_mix {
    int ftype;             /* llama_ftype value written to general.file_type */
    uint32_t default_type; /* enum quant_type */
    int64_t n_layer, n_expert;
    bool pure;          /* "pure:TYPE": no per-tensor rules, only fallbacks */
    bool has_output;    /* output.weight present (else token_embd is tied) */
    int n_attention_wv; /* attn_v tensors in the model */
    int i_attention_wv; /* attn_v tensors typed so far */
    int i_ffn_down;     /* dense ffn_down tensors typed so far */
    int64_t n_fallback; /* fallbacks taken */
};

/* Starts a mix for a recipe; then call synth_mix_count for every tensor name
 * (in file order) before the first synth_mix_type. */
int synth_mix_init(struct synth_mix *m, const char *recipe, int64_t n_layer, int64_t n_expert,
                   struct strata_error *err);
void synth_mix_count(struct synth_mix *m, const char *name);
/* Type for one tensor (call in file order: counters advance). src_type is
 * the type it has in the source (F32 for generated norms / router). */
uint32_t synth_mix_type(struct synth_mix *m, const char *name, uint32_t n_dims, const int64_t *ne,
                        uint32_t src_type);

/* ---- requantize ------------------------------------------------------------
 * Copies every KV (general.file_type and general.quantization_version set
 * for the recipe) and re-types every tensor by the recipe's mix: tensors
 * whose type does not change are copied byte for byte, the rest go through
 * f32 (quant_dequantize_row, quant_quantize_row). n_threads 0 = 1. */
int synth_quantize_file(const char *in_path, const char *out_path, const char *recipe,
                        int n_threads, struct synth_report *rep, struct strata_error *err);
/* The same, also setting <arch>.pooling_type to pooling (0..4; -1: copied as
 * it is), e.g. an embedding-model copy of a real file for tests. */
int synth_quantize_file_pooling(const char *in_path, const char *out_path, const char *recipe,
                                int n_threads, int pooling, struct synth_report *rep,
                                struct strata_error *err);
/* "none" 0, "mean" 1, "cls" 2, "last" 3, "rank" 4; -1 for anything else. */
int synth_pooling_parse(const char *name);

#endif
