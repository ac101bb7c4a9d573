/* server/scheduler.h: the scheduler: one thread that owns the engine (model,
 * KV cache, worker pool) and serves every generation request through
 * continuous batching. It implements server/gen.h's gen_ops.
 *
 *   struct sched_params sp = sched_params_default();
 *   sp.model_path = "stories260K.gguf"; sp.parallel = 4; sp.queue = 64;
 *   struct sched *s = sched_init(&sp, &err);      // loads, warms up, starts the thread
 *   struct gen_backend be = {sched_gen_ops(), s};
 *   ... serve ...
 *   sched_free(s);   // every live job gets GEN_EV_DONE (after ERROR "cancelled")
 *
 * Each step builds one model_forward batch: one token for every decoding
 * session first, then prefill chunks of admitted sessions in admission
 * order, at most n_batch entries in all. While nobody decodes, prefill takes
 * the whole budget (time to first token); while n sessions decode, a step
 * carries at most n + max(n, 16 - n) tokens (16 until 8 decode, then twice
 * the decoders), so a step with prompt tokens costs at most about two
 * decode-only steps whoever joins (the measurement behind the rule is in
 * sched.c, step()). Sessions join
 * and leave between steps. At most `parallel` sessions hold a KV sequence;
 * up to `queue` more requests wait; beyond that submit answers
 * STRATA_E_QUEUE_FULL (HTTP 429, Retry-After). A cancelled job (client gone,
 * shutdown) or one past its request_timeout is dropped at the start of the
 * next step (ERROR CANCELLED / TIMEOUT, then DONE) and its blocks released.
 *
 * KV memory (engine/kv/kv.h, engine/kv/prefix.h): one paged pool of kv_mem bytes
 * (default: parallel full contexts) in blocks of kv_block positions; the
 * per-session context is capped at the pool. Admission reserves a request's
 * worst case, ceil(min(n_ctx, prompt + max_tokens) / kv_block) blocks less
 * the full blocks it reuses from the prefix cache, against free blocks plus
 * idle cached ones minus what running sessions were promised; a request that
 * does not fit waits at the head of the queue (FIFO, later requests wait
 * behind it) until sessions finish, so a running stream never runs out of
 * KV. A request without max_tokens reserves a whole context (n_ctx - prompt
 * tokens may be generated), so with a pool of fewer than `parallel` full
 * contexts such requests run fewer at a time; none holds its blocks for
 * ever: generation ends at n_ctx ("length") at the latest, or at
 * request_timeout, and the blocks go back (tests/server/test-sched.c:
 * test_no_max_tokens_cannot_hold_the_pool). Idle cached blocks are evicted
 * LRU when a block is taken. A finished
 * (or cancelled) session's blocks go to the prefix cache with their tokens;
 * the full blocks of a prompt go in as soon as it is prefilled, so
 * concurrent requests with the same system prompt share them too.
 * usage.prompt_tokens_details.cached_tokens reports the reused positions.
 *
 * A request of several choices (n > 1, a list of prompts) is a parent job
 * and a child job per choice (sched-group.c): each child is a session of
 * its own; a later choice of a prompt forks its first choice's KV block
 * table once that one has prefilled, and computes only the last prompt
 * token (gen_stats.shared_tokens counts the positions it skipped).
 *
 * Prompts are rendered, tokenized and checked against the context
 * (engine/session: session_prompt) on two persistent prep threads
 * (sched-prep.c: one for prompts of 64 KiB or more) before they join the
 * queue, so a huge prompt never stalls the running streams nor delays a
 * short request; a job waiting there counts as queued. Each token a step
 * samples goes through the job's session (session_step: text delta, stop,
 * logprob entry); the OpenAI JSON is built here (openai-json.c).
 *
 * Embeddings (sched-embed.c): a /v1/embeddings request is tokenized on a
 * prep lane like a prompt, then each of its inputs becomes a job of its own
 * in the waiting FIFO (at the request's place), admitted into a KV sequence
 * and prefilled with the other jobs' tokens in the same steps; its pooled
 * positions ask model_forward_hidden for their hidden rows instead of
 * logits, and it ends when its last position is in (no decode). The request
 * counts once against parallel + queue and answers after its last input.
 * /tokenize and /detokenize are done on a prep lane and answered from this
 * thread without a KV sequence.
 *
 * Routing profile (sched-profile.c, engine/experts/profile.h): for a MoE
 * model with expert_profile set, the scheduler owns a profile that
 * model_forward counts every routed pick into (served tokens only: it is
 * attached after the warm-up). At start an existing file is loaded and its
 * counts merged in, so totals keep growing across restarts; a file that does
 * not load (corrupt, truncated) or whose shape differs from the model's is
 * refused with a reason in gen_stats.profile_state, renamed to PATH.refused
 * (never silently overwritten) and the daemon starts with a fresh profile.
 * The scheduler thread saves it (temporary file + rename) every
 * profile_interval_s while the counts change (also when it goes idle: the
 * wait times out for it) and sched_free saves it once more after the last
 * step (SIGTERM drain). Default 60 s (--expert-profile-interval): a save
 * writes n_layer x n_expert x 8 bytes, 48 KiB for qwen3-30b-a3b's 48 x 128,
 * in 0.2 ms (0.35 ms for 61 x 256; 2-vCPU Xeon VM, ext4, page cache), next
 * to steps of tens of ms, so even a save a second would cost < 0.1% of the
 * thread; 60 s bounds what a crash (no SIGTERM) loses to a minute of counts
 * out of the hours a warm start is learnt from. Checking whether a save is
 * due sums the counts once a step (0.8 us for 48 x 128).
 *
 * Threading: sched_init/sched_free from one controlling thread; the gen_ops
 * follow gen.h's contract (submit/cancel/release/stats from any thread,
 * events on the scheduler thread).
 */
#ifndef STRATA_SERVER_SCHEDULER_H
#define STRATA_SERVER_SCHEDULER_H

#include "engine/core/error.h"
#include "engine/core/progress.h"
#include "server/gen.h"

struct sched_params {
    const char *model_path;         /* borrowed for sched_init */
    const char *model_id;           /* borrowed; NULL = file name without .gguf */
    int n_threads;                  /* compute threads, capped at 32; 0 = sysinfo_threads' policy
                                       (available CPUs - 1, at least 1) */
    const char *threads_source;     /* borrowed: for /status when n_threads > 0: "cli", "env",
                                       "file", "cgroup", "affinity"; NULL = "cli" */
    int pool_spin;                  /* worker spin before parking */
    const char *numa;               /* borrowed: --numa (auto|off|node:N|split); NULL = auto */
    int n_ctx;                      /* per-session context; 0 = the model's trained context */
    int parallel;                   /* sessions decoding at once (KV sequences), >= 1 */
    int queue;                      /* requests waiting beyond parallel */
    int n_batch;                    /* entries per step (token budget); 0 = min(512, model max) */
    int kv_block;                   /* KV positions per block (power of two); 0 = 16 */
    int64_t kv_mem;                 /* KV pool bytes; 0 = parallel * n_ctx positions, at most
                                       kv_mem_max */
    int64_t kv_mem_max;             /* cap of the default pool (memory budget share); 0 = none */
    double request_timeout;         /* seconds from submit to the last token; 0 = none */
    bool prefix_cache;              /* reuse KV blocks of earlier requests with the same prefix */
    bool prefault;                  /* model_params.prefault: map the weight pages at load */
    bool repack;                    /* model_params.repack: weights copied (and packed) at load */
    int64_t mem_budget;             /* model_params.mem_budget; 0 = unknown */
    const char *expert_profile;     /* borrowed for sched_init: routing profile file (MoE models);
                                       NULL or "" = none */
    const char *chat_template_file; /* borrowed for sched_init: a Jinja chat template used
                                       instead of the GGUF's; NULL or "" = the GGUF's */
    double profile_interval_s;      /* seconds between saves while counts change; default
                                       SCHED_PROFILE_INTERVAL_S */
    const struct strata_progress *progress; /* borrowed: the load's (model_params.progress) */
    /* the expert store (engine/experts/xstore.h xstore_plan); NULL strings = "auto" */
    const char *expert_store, *expert_io, *expert_direct; /* borrowed */
    const char *expert_fixed;                             /* borrowed */
    int64_t expert_ram;                                   /* bytes; 0 = from the budget */
    /* the GPU (gpu/gpu-choose.h); NULL strings = "auto", "all" */
    const char *gpu, *gpu_layers;   /* borrowed */
    bool gpu_profile;               /* time every dispatch, the table at exit */
    int64_t gpu_mem_budget;         /* device memory the GPU may hold, bytes; 0: the device's */
    const char *gpu_pipeline_cache; /* borrowed: compiled pipelines' file; NULL: none */
    int expert_prefetch;            /* router lookahead depth (xstore_params.prefetch) */
};
#define SCHED_PROFILE_INTERVAL_S 60.0
struct sched_params sched_params_default(void);

/* How sched_init sizes a model's sessions: the one rule for the daemon's
 * start and for --print-config, which has only the file's header
 * (model_probe). Each *_rule says how an automatic or adjusted value came
 * about ("" where the value is the one asked for). */
struct sched_plan {
    int n_ctx;            /* per-session context, tokens */
    int n_batch;          /* tokens a step */
    int parallel;         /* sessions decoding at once */
    int n_block;          /* KV positions a block */
    int64_t n_blocks;     /* blocks in the KV pool */
    uint64_t block_bytes; /* bytes of one block (every layer, K and V) */
    uint64_t kv_bytes;    /* n_blocks * block_bytes */
    char ctx_rule[160], batch_rule[128], parallel_rule[96], kv_rule[224];
};
struct model_hparams;
/* p: the options (n_ctx, n_batch, parallel, kv_block, kv_mem, kv_mem_max);
 * hp: the model's; n_batch_max: most entries a forward pass takes. 0, or
 * STRATA_E_CONFIG when --kv-mem is less than one block. Pure. */
int sched_plan(const struct sched_params *p, const struct model_hparams *hp, int n_batch_max,
               struct sched_plan *out, struct strata_error *err);

struct sched;
/* owned: free with sched_free() */
struct sched *sched_init(const struct sched_params *params, struct strata_error *err);
void sched_free(struct sched *s); /* NULL is a no-op */

/* The sizing sched_init applied (borrowed, valid until sched_free). */
const struct sched_plan *sched_get_plan(const struct sched *s);
/* Where the chat template came from: "gguf" or "chatml" (the fallback), and
 * why the fallback was taken ("" for the GGUF's). Borrowed. */
void sched_template(const struct sched *s, const char **origin, const char **note);

/* {submit, cancel, release, stats} for gen_backend.ops (static). */
const struct gen_ops *sched_gen_ops(void);

#endif
