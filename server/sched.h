/* server/sched.h: the scheduler: one thread that owns the engine (model,
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
 * session plus prefill chunks of admitted sessions, at most n_batch entries
 * in all (decoders first, so a long prompt never stalls running streams;
 * while any decode, a step prefills at most as many tokens as it decodes,
 * at least 8, in arrival order; but when at least as many sessions wait to
 * join as decode, up to 64 prompt tokens of each, so a burst of arrivals
 * fills the batch in a step or two). Sessions join
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
 * Prompts are rendered, tokenized and checked against the context on two
 * persistent prep threads (sched-prep.c: one for prompts of 64 KiB or more)
 * before they join the queue, so a huge prompt never stalls the running
 * streams nor delays a short request; a job waiting there counts as queued.
 *
 * Threading: sched_init/sched_free from one controlling thread; the gen_ops
 * follow gen.h's contract (submit/cancel/release/stats from any thread,
 * events on the scheduler thread).
 */
#ifndef STRATA_SERVER_SCHED_H
#define STRATA_SERVER_SCHED_H

#include "engine/core/error.h"
#include "server/gen.h"

struct sched_params {
    const char *model_path;     /* borrowed for sched_init */
    const char *model_id;       /* borrowed; NULL = file name without .gguf */
    int n_threads;              /* compute threads; 0 = available CPUs - 1 (at least 1), max 32 */
    const char *threads_source; /* for /status: "cli", "env", ... ("auto" when n_threads 0) */
    int pool_spin;              /* worker spin before parking */
    int n_ctx;                  /* per-session context; 0 = the model's trained context */
    int parallel;               /* sessions decoding at once (KV sequences), >= 1 */
    int queue;                  /* requests waiting beyond parallel */
    int n_batch;                /* entries per step (token budget); 0 = min(512, model max) */
    int kv_block;               /* KV positions per block (power of two); 0 = 16 */
    int64_t kv_mem;             /* KV pool bytes; 0 = parallel * n_ctx positions, at most
                                   kv_mem_max */
    int64_t kv_mem_max;         /* cap of the default pool (memory budget share); 0 = none */
    double request_timeout;     /* seconds from submit to the last token; 0 = none */
    bool prefix_cache;          /* reuse KV blocks of earlier requests with the same prefix */
    bool prefault;              /* model_params.prefault: map the weight pages at load */
    bool repack;                /* model_params.repack: weights copied (and packed) at load */
    int64_t mem_budget;         /* model_params.mem_budget; 0 = unknown */
};
struct sched_params sched_params_default(void);

struct sched;
/* owned: free with sched_free() */
struct sched *sched_init(const struct sched_params *params, struct strata_error *err);
void sched_free(struct sched *s); /* NULL is a no-op */

/* {submit, cancel, release, stats} for gen_backend.ops (static). */
const struct gen_ops *sched_gen_ops(void);

#endif
