/* engine/model/model.h: a GGUF decoder model (llama, qwen2, qwen3, qwen2moe,
 * qwen3moe, mixtral-style llama) and its batched forward pass, written once
 * over the backend seam (engine/backend/backend.h).
 *
 *   struct backend_cpu_params cp = backend_cpu_params_default();
 *   cp.pool = pool;                                  // borrowed; NULL = one thread
 *   struct backend *be = backend_cpu_init(&cp, &err); // engine/cpu/backend-cpu.h
 *   struct model_params mp = model_params_default();
 *   mp.pool = pool;                                  // for the load's own parallel parts
 *   mp.backend = be;                                 // borrowed: computes every step
 *   struct model *m = model_load("stories260K.gguf", &mp, &err);
 *   struct kv_cache *kv = model_kv_init(m, 4, 0, &err); // 4 sequences, n_ctx_max each
 *   struct model_batch_entry e[2] = {
 *       {.seq_id = 0, .pos = 0, .token = 1, .want_logits = true},  // seq 0 decodes
 *       {.seq_id = 1, .pos = 7, .token = 42, .want_logits = true}, // seq 1 decodes
 *   };
 *   struct model_batch b = {.entries = e, .n_entries = 2};
 *   float *logits = malloc(2 * model_n_vocab(m) * sizeof(float)); // (n_outputs, n_vocab)
 *   model_forward(m, kv, &b, logits, &err);
 *   kv_free(kv); model_free(m); backend_free(be);
 *
 * The backend: the caller creates it and passes it in model_params.backend
 * (borrowed; it must outlive the model), so the same seam takes the CPU
 * backend, a GPU one, or a test's wrapper, and a caller can keep a second
 * (CPU) instance for cold experts beside a GPU one. The model binds its
 * weights to it at load (the backend decides their layout: the CPU's arena)
 * and makes the KV cache's storage through it (model_kv_init).
 *
 * A batch is a list of (seq_id, pos, token, want_logits): many sequences
 * decoding one token each and prefill chunks of several tokens of one
 * sequence may share a call. Each weight matrix is read once per call for all
 * entries (one matmul with n_entries rows); MoE entries are grouped by
 * expert so each routed expert's weights are read once per call. A call is
 * one backend step, recorded and submitted once: routed experts come from
 * the expert seam (engine/experts); where a layer's are resident (the RAM
 * tier over the CPU's arena, the file's pages) their refs are taken once at
 * load, and only a layer behind a tier that may evict reads its picks back
 * inside the step (one more submit) to get the picked experts for the step.
 * The routing profile counts every pick either way.
 *
 * Positions: within one batch, entries of one sequence must have strictly
 * increasing pos, and an entry's pos must be <= the sequence's current length
 * (kv_seq_len) plus the number of earlier entries of that sequence in the
 * batch (no gaps). Writing at pos < len truncates the sequence to pos first
 * (rewind). pos >= n_ctx_max gives STRATA_E_CONTEXT_LENGTH.
 *
 * Results for one entry do not depend on the other entries of the batch nor
 * on the pool's thread count (bit-identical).
 *
 * Ownership: the model owns the mapped GGUF file; model_gguf() is borrowed.
 * Threading: model_load/model_free from any one thread. model_forward may be
 * called by one thread at a time per model (the scheduler thread), the
 * backend's thread. Accessors are read-only and safe from any thread;
 * model_experts' experts_prefetch from any thread.
 */
#ifndef STRATA_MODEL_H
#define STRATA_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/error.h"

struct pool;
struct gguf_file;
struct kv_cache;
struct profile;
struct experts_source;
struct xstore_params;
struct backend;
struct kv_params;
struct strata_progress;

enum model_rope_type {
    MODEL_ROPE_NORMAL = 0, /* rotate adjacent pairs (x[2i], x[2i+1]): llama */
    MODEL_ROPE_NEOX = 2,   /* rotate halves (x[i], x[i + n_rot/2]): qwen2/3 */
};

enum model_rope_scaling {
    MODEL_ROPE_SCALING_NONE = 0,
    MODEL_ROPE_SCALING_LINEAR = 1,
    MODEL_ROPE_SCALING_YARN = 2,
};

struct model_hparams {
    char arch[32];       /* general.architecture: "llama", "qwen2", ... */
    int n_vocab;         /* rows of token_embd */
    int n_ctx_train;     /* <arch>.context_length */
    int n_embd;          /* <arch>.embedding_length */
    int n_layer;         /* <arch>.block_count */
    int n_head;          /* <arch>.attention.head_count */
    int n_head_kv;       /* <arch>.attention.head_count_kv (GQA), default n_head */
    int head_dim_k;      /* <arch>.attention.key_length, default n_embd / n_head */
    int head_dim_v;      /* <arch>.attention.value_length, default head_dim_k */
    int n_ff;            /* <arch>.feed_forward_length (dense FFN), 0 if MoE only */
    int n_rot;           /* <arch>.rope.dimension_count, default head_dim_k */
    int n_expert;        /* <arch>.expert_count, 0 = dense */
    int n_expert_used;   /* <arch>.expert_used_count (top-k) */
    int n_ff_exp;        /* per-expert FFN width (expert_feed_forward_length or tensor shape) */
    int n_ff_shexp;      /* shared-expert FFN width (qwen2moe), 0 if none */
    bool norm_topk_prob; /* renormalise the top-k weights (qwen3moe, mixtral; not qwen2moe) */
    float expert_weights_scale; /* <arch>.expert_weights_scale; 0 or 1 = no scaling */
    float norm_eps;             /* <arch>.attention.layer_norm_rms_epsilon */
    float rope_freq_base;       /* <arch>.rope.freq_base, default 10000 */
    float rope_freq_scale;      /* 1 / rope.scaling.factor (linear, YaRN), else 1 */
    enum model_rope_type rope_type;
    enum model_rope_scaling rope_scaling;
    int rope_n_ctx_orig;  /* rope.scaling.original_context_length (YaRN), else n_ctx_train */
    bool has_rope_freqs;  /* llama3-style rope_freqs.weight divides each pair's frequency */
    bool tied_output;     /* no output.weight: logits use token_embd */
    int32_t bos_token_id; /* tokenizer.ggml.bos_token_id, -1 if absent */
    int32_t eos_token_id; /* tokenizer.ggml.eos_token_id, -1 if absent */
    int pooling_type;     /* <arch>.pooling_type as llama.cpp numbers it (engine/model/embed.h:
                             0 none, 1 mean, 2 cls, 3 last, 4 rank), -1 if absent */
};

struct model_params {
    /* borrowed, required: the backend every step runs on (it must outlive the
     * model). Created by the caller (backend_cpu_init for the CPU) rather than
     * named here, so engine/model knows no backend implementation. */
    struct backend *backend;
    /* borrowed, optional: a second backend (a CPU one beside a GPU) that
     * computes the routed experts the expert seam hands out in host memory
     * (RAM or file tier) when `backend` takes no host matrices (no
     * BACKEND_CAP_HOST_MATS): such a MoE layer reads its input back, runs
     * those experts here, and adds their sum into the step. NULL: a host
     * expert on such a backend fails the step (STRATA_E_UNSUPPORTED). */
    struct backend *backend_cold;
    struct pool *pool; /* borrowed; threads for the load (prefault); NULL = caller only */
    int n_ctx_max;     /* per-sequence context; 0 = n_ctx_train (capped at 1<<20) */
    int n_batch_max;   /* most entries per model_forward call (default 512) */
    struct profile
        *profile; /* borrowed; routed (layer, expert) picks are counted here; may be NULL */
    /* Map every weight page at load (MADV_POPULATE_READ; kernels before 5.14:
     * one read per page) instead of faulting pages in during the first
     * tokens. Default true. Skipped when the weights exceed 3/4 of physical
     * RAM (they could not all stay resident). RSS then counts the whole file
     * from load on: olmoe-1b-7b Q4_K_M (4.2 GB), `strata run -n 129 -t 2`
     * peak RSS 3996 -> 4044 MB (llama.cpp: ~7.2 GB), load 3 -> ~195 ms,
     * decode 48.4/48.9 -> 51.7/51.9 tok/s (page faults were ~6% of decode
     * cycles). */
    bool prefault;
    /* Let the backend copy every matrix the forward pass multiplies
     * (attention, FFN, router, shared and routed experts, output) at load:
     * the CPU's one anonymous arena (huge pages), with Q4_K / Q6_K in the
     * kernels' 16-row packed layout where the ISA active at load has packed
     * kernels (AVX-512: never a layout the ISA would compute through the
     * reference), dropping the file's pages from RSS (engine/cpu/cpu-weights.c);
     * routed experts are then served from it by the expert seam's RAM tier. Default true. Skipped,
     * like prefault, when the weights exceed 3/4 of physical RAM: the file pages then stay the only
     * copy (the expert store's case). Packed results differ from the file layout's in the last bits
     * (another summation order), never between batch sizes or thread counts. */
    bool repack;
    /* Bytes this process may use (sysinfo: the cgroup limit or MemAvailable,
     * the smaller); 0 = unknown. The copy above is anonymous memory, which a
     * cgroup cannot reclaim like page cache, so it is also skipped when the
     * weights exceed half of this budget (the KV pool may take the other
     * half, server/sched.c). */
    int64_t mem_budget;
    /* Optional: a tier to put in front of the expert chain (RAM tier -> file),
     * e.g. a VRAM arena: called once at load with the chain (stolen); returns
     * the new head, which owns the chain as its next (experts.h), or NULL
     * with err (the load fails). NULL = none. */
    struct experts_source *(*experts_front)(void *arg, struct experts_source *chain,
                                            struct strata_error *err);
    void *experts_front_arg; /* borrowed */
    /* Optional: how far the load is, on the loading thread (borrowed): phase
     * "mapping weights" (prefault, bytes of the file's tensor span) and the
     * backend's "copying weights" (bytes copied). NULL = nobody asks. */
    const struct strata_progress *progress;
    /* The expert store (engine/experts/xstore.h; borrowed during the load;
     * NULL = off): routed experts are then not bound to the backend (not
     * copied, not prefaulted) but read by the store into its slots; the
     * skeleton alone decides the copy above. */
    const struct xstore_params *xstore;
};
struct model_params model_params_default(void);

struct model;

/* What a file holds, read from its header alone (no weight is mapped in or
 * bound): what `strata serve --print-config` sizes the context and the KV
 * pool from before anything loads. */
struct model_probe {
    struct model_hparams hp; /* as model_load reads them */
    int64_t n_params;        /* elements of every tensor */
    uint64_t n_bytes;        /* tensor data bytes */
};
/* 0, or the error model_load would give for the header (a bad file, an
 * unsupported architecture, missing or out-of-range keys). */
int model_probe(const char *path, struct model_probe *out, struct strata_error *err);

/* Maps and validates the file, binds every tensor of the architecture (shape
 * and type checked). Unsupported architectures or tensor types give
 * STRATA_E_UNSUPPORTED with the name in the message. Returns NULL on error. */
struct model *model_load(const char *path, const struct model_params *params,
                         struct strata_error *err); /* owned: free with model_free() */
void model_free(struct model *m);                   /* NULL is a no-op */

const struct model_hparams *model_hparams(const struct model *m); /* borrowed */
/* Bytes of weights in the packed layout (0: none, see model_params.repack). */
uint64_t model_packed_bytes(const struct model *m);
/* Bytes of matrices copied into the weight arena (0: read from the file's pages). */
uint64_t model_copied_bytes(const struct model *m);
/* Where the matrices are read from, for logs and /status: "file" (the
 * mapped file's pages), "arena" (the copy, GGUF rows) or "arena+packed"
 * (the copy, some matrices in the 16-row packed layout). Borrowed, static. */
const char *model_weights_layout(const struct model *m);
const char *model_arch_name(const struct model *m); /* borrowed */
int model_n_vocab(const struct model *m);
int model_n_ctx_train(const struct model *m);
int model_n_ctx_max(const struct model *m);   /* effective per-sequence context */
int model_n_batch_max(const struct model *m); /* most entries per model_forward call */
bool model_is_moe(const struct model *m);
/* The mapped file, for the tokenizer and the chat template. */
const struct gguf_file *model_gguf(const struct model *m); /* borrowed: valid until model_free */
/* Bytes of tensor data mapped (weights), for /status. */
uint64_t model_weight_bytes(const struct model *m);
/* One tensor type of the file's tensor table (the quant mix), for /status. */
struct model_weight_type {
    uint32_t type; /* enum quant_type; quant_type_name() gives "q4_0", ... */
    int64_t n_tensors;
    uint64_t n_bytes; /* tensor data bytes of this type */
    const char *name; /* static: quant_type_name(type), so /status needs no quant table */
};
/* Writes the distinct tensor types of the GGUF tensor table into out[0..cap),
 * most bytes first (ties: lower type first), and returns how many distinct
 * types there are (may exceed cap; only cap are written). Reentrant. */
int model_weight_types(const struct model *m, struct model_weight_type *out, int cap);

/* Counts routed (layer, expert) picks into p from the next model_forward on
 * (p NULL: stop counting), like model_params.profile, for an owner that
 * learns the shape (model_hparams n_layer x n_expert) after load. p is
 * borrowed and must stay valid while it is set. STRATA_E_INVALID when the
 * shape differs or the model is dense. Not during a model_forward (same
 * thread as model_forward, or before it starts). */
int model_set_profile(struct model *m, struct profile *p, struct strata_error *err);

/* A KV cache shaped for this model (F16, per sequence): n_seq_max sequences
 * of n_ctx positions each (0 = model_n_ctx_max). Memory for a sequence is
 * allocated on its first use. */
struct kv_cache *model_kv_init(const struct model *m, int n_seq_max, int n_ctx,
                               struct strata_error *err); /* owned: free with kv_free() */
/* A KV cache of any shape kv_init takes (the scheduler's pool of blocks)
 * over the model's backend's storage (backend kv_store_init). */
struct kv_cache *model_kv_init_params(const struct model *m, const struct kv_params *params,
                                      struct strata_error *err); /* owned: free with kv_free() */
/* The expert chain (NULL for a dense model): for experts_stats, and for a
 * predictor thread's experts_prefetch. Borrowed: valid until model_free. */
struct experts_source *model_experts(const struct model *m);

struct model_batch_entry {
    int32_t seq_id;   /* 0 .. kv n_seq_max-1 */
    int32_t pos;      /* position in the sequence, 0-based */
    int32_t token;    /* 0 .. n_vocab-1 */
    bool want_logits; /* write this entry's logits to the next output row */
};

struct model_batch {
    const struct model_batch_entry *entries; /* borrowed: (n_entries) */
    int n_entries;                           /* 1 .. model_n_batch_max */
};

/* Number of entries with want_logits. */
int model_batch_n_outputs(const struct model_batch *batch);

/* Runs the batch: appends each entry's K/V to its sequence in kv and writes
 * logits (n_outputs, n_vocab) f32, one row per want_logits entry in batch
 * order (logits may be NULL when n_outputs == 0). Validates every entry
 * before touching kv: on a validation error nothing is written. On a later
 * error (an expert source failing) sequence lengths stay as they were,
 * except that a rewind (pos < len) has already truncated to pos. Errors: STRATA_E_INVALID
 * (bad token/seq/order), STRATA_E_CONTEXT_LENGTH, STRATA_E_RANGE (batch too
 * large), STRATA_E_NOMEM. */
int model_forward(struct model *m, struct kv_cache *kv, const struct model_batch *batch,
                  float *logits, struct strata_error *err);
/* model_forward that also writes hidden (n_hidden, n_embd) f32: row r is
 * the final hidden state of entry hidden_rows[r] (indices into the batch,
 * 0 <= n_hidden <= n_entries), the residual stream after the last block
 * through the output norm, before the LM head: what llama.cpp pools for
 * embeddings (pooling is engine/model/embed.h's). One step either way, so
 * decode rows (logits) and embedding rows (hidden) share it. hidden and
 * hidden_rows may be NULL when n_hidden is 0. STRATA_E_INVALID for a row
 * index outside the batch. */
int model_forward_hidden(struct model *m, struct kv_cache *kv, const struct model_batch *batch,
                         float *logits, const int32_t *hidden_rows, int n_hidden, float *hidden,
                         struct strata_error *err);

/* The next token of each output chosen on the backend (backend_ops.sample:
 * a GPU's argmax / top-k sampling kernels), so the step hands back ids
 * instead of rows of n_vocab logits. One rule for every output of the call
 * (struct model_sample); u (n_outputs) are the host's uniform draws in [0,
 * 1) (the requests' samplers' RNG streams, sampler_next_uniform), read when
 * temperature > 0, NULL for greedy. ids (n_outputs): the picks, in the
 * order of the entries that want logits. STRATA_E_UNSUPPORTED when the
 * backend has no sample op or does not take the rule (checked before the
 * step: nothing ran; the caller calls model_forward then). Otherwise as
 * model_forward. What stays on the host (logit bias, penalties, logprobs,
 * grammar masks): engine/sample/sampler.h sampler_device_rule. */
struct model_sample {
    int top_k;         /* 1 .. 256 when temperature > 0 (the device never sorts the vocabulary) */
    float top_p;       /* >= 1: off */
    float min_p;       /* <= 0: off */
    float temperature; /* <= 0: greedy (argmax, lowest id on ties) */
};
int model_forward_sample(struct model *m, struct kv_cache *kv, const struct model_batch *batch,
                         const struct model_sample *rule, const float *u, int32_t *ids,
                         struct strata_error *err);
/* Whether the model's backend samples on the device (model_forward_sample). */
bool model_can_sample(const struct model *m);

#endif
