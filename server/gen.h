/* server/gen.h: the seam between the HTTP layer (server/http*.c) and the
 * generation layer (server/openai*.c + server/sched*.c).
 *
 * The HTTP layer owns transport: routes, auth, body limits, UTF-8 and JSON
 * syntax, SSE framing, keep-alives, disconnects, metrics. The generation
 * layer owns the protocol and the work: it validates the OpenAI fields,
 * queues, generates, and builds the OpenAI JSON (chunks, response bodies).
 *
 *   // the generation layer provides:
 *   static const struct gen_ops sched_gen_ops = {sched_gen_submit, sched_gen_cancel,
 *                                               sched_gen_release, sched_gen_stats};
 *   struct gen_backend be = {&sched_gen_ops, sched};
 *   // HTTP layer, on POST /v1/chat/completions (MHD thread, never blocks):
 *   struct gen_submit req = {GEN_ROUTE_CHAT, body_json, stream, always_usage};
 *   struct gen_submit_out out = {0};
 *   rc = be.ops->submit(be.self, &req, (struct gen_sink){on_event, exchange}, &out, &err);
 *   // events then arrive on the scheduler thread: on_event(exchange, &ev) ...
 *   // ROLE, DELTA*, FINISH, USAGE?, DONE   or   ERROR, DONE
 *
 * Contract (both sides rely on it):
 * 1. submit() runs on the HTTP thread and must not block: parse + validate
 *    the body, then enqueue. Heavy work (tokenizing a long prompt) belongs off
 *    this thread, and off the one that runs the streams (sched.h: the prep
 *    threads). It returns 0 and out->job, or a negative
 *    STRATA_E_* with err (message) and optionally out->error_param (the
 *    offending field, OpenAI's error.param); the HTTP layer turns that into
 *    the status and body from the error table (e.g. QUEUE_FULL -> 429).
 *    On failure no event is ever delivered and nothing needs releasing.
 * 2. After a successful submit, sink.on_event is called on the scheduler
 *    thread (possibly before submit returns), one call at a time per job,
 *    never while holding a lock that cancel() or stats() takes. Every job
 *    gets exactly one GEN_EV_DONE as its last event: after a normal finish,
 *    after GEN_EV_ERROR, after cancel(), and for every job still alive when
 *    the generation layer shuts down.
 * 3. cancel(job) may be called from any thread, any number of times, until
 *    release(); it never blocks (set a flag; the scheduler notices it at its
 *    next step, drops the session and sends GEN_EV_DONE, the last event,
 *    possibly preceded by GEN_EV_ERROR with STRATA_E_CANCELLED).
 * 4. release(job) is called exactly once by the HTTP layer after it has
 *    received GEN_EV_DONE, from any thread, possibly from inside the DONE
 *    on_event call itself. The job stays valid (cancel() safe) until then.
 * 5. stats() may be called from any thread at any time (GET /status,
 *    /metrics, /v1/models) and must be cheap and non-blocking (atomics, or
 *    a snapshot the scheduler publishes).
 *
 * JSON text in events is built by the generation layer and written as is:
 * streaming events become `data: <json>\n\n` (the HTTP layer adds the SSE
 * framing and the final `data: [DONE]\n\n`); for a non-streaming request
 * only GEN_EV_DONE carries json (the whole response body, status 200).
 * Errors are not JSON in events: the HTTP layer builds OpenAI's error body
 * from error_code/error_message/error_param (status from the error table
 * when nothing was sent yet, an SSE `data: {"error":...}` event otherwise).
 */
#ifndef STRATA_SERVER_GEN_H
#define STRATA_SERVER_GEN_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/error.h"

struct gen_job; /* opaque, owned by the generation layer */

enum gen_route {
    GEN_ROUTE_CHAT,       /* POST /v1/chat/completions */
    GEN_ROUTE_COMPLETION, /* POST /v1/completions */
    GEN_ROUTE_EMBEDDINGS, /* POST /v1/embeddings (never streamed; body in DONE) */
    GEN_ROUTE_TOKENIZE,   /* POST /tokenize (llama-server's shape) */
    GEN_ROUTE_DETOKENIZE, /* POST /detokenize */
};

enum gen_event_type {
    GEN_EV_ROLE,   /* stream only: first chunk (delta.role = "assistant"); json set */
    GEN_EV_DELTA,  /* stream: json = chunk with the text delta; n_tokens new tokens (also
                      sent, json NULL, for non-stream requests so metrics see token timing) */
    GEN_EV_FINISH, /* stream: json = chunk with finish_reason; finish_reason set either way */
    GEN_EV_USAGE,  /* n_prompt_tokens/n_completion_tokens/n_cached_tokens set; json = usage
                      chunk when the stream asked for it (or always-usage), else NULL */
    GEN_EV_ERROR,  /* the job failed: error_code (STRATA_E_*), error_message, error_param */
    GEN_EV_DONE,   /* last event; non-stream success: json = full response body */
};

struct gen_event {
    enum gen_event_type type;
    const char *json;          /* borrowed for the duration of on_event; may be NULL */
    size_t json_len;           /* bytes of json */
    int n_tokens;              /* DELTA: tokens this delta covers (>= 1) */
    const char *finish_reason; /* FINISH: "stop", "length", ...; borrowed */
    int64_t n_prompt_tokens;   /* USAGE */
    int64_t n_completion_tokens;
    int64_t n_cached_tokens;   /* USAGE: prompt tokens served from the prefix cache */
    int error_code;            /* ERROR: STRATA_E_* */
    const char *error_message; /* ERROR: borrowed */
    const char *error_param;   /* ERROR: offending request field or NULL; borrowed */
};

struct gen_sink {
    /* Scheduler thread; must not block (the HTTP side appends to a buffer and
     * wakes its connection). */
    void (*on_event)(void *ctx, const struct gen_event *ev);
    void *ctx; /* borrowed: the HTTP layer's per-request state */
};

struct gen_submit {
    enum gen_route route;
    json_t *body;      /* borrowed: the parsed JSON object (valid UTF-8, an object); submit
                          takes its own reference (json_incref) if it keeps it */
    bool stream;       /* body has "stream": true (decided here so events arriving before
                          submit returns are framed right); the generation layer must reject
                          a non-boolean "stream" in submit */
    bool always_usage; /* server option: include usage even when the stream did not ask */
    /* Prefix-cache partition: cached prompt blocks (and what cached_tokens
     * reports) are shared only between requests of one partition. The HTTP
     * layer passes the API key's index (0 with one key or none), so one key
     * cannot reuse or probe another's prompts. */
    uint32_t cache_partition;
    const char
        *request_id; /* borrowed: the HTTP layer's id for log lines ("req-..."); may be NULL */
    bool log_debug;  /* --log-level debug: the generation layer may log per request */
};

struct gen_submit_out {
    struct gen_job *job;  /* set on success */
    char error_param[64]; /* on failure: OpenAI error.param ("messages", ...) or "" */
};

/* Distinct tensor types reported in gen_stats.weight_types (more are summed
 * into the last entry, named "other"). */
#define GEN_WEIGHT_TYPES_MAX 12

/* Snapshot for /status, /metrics and /v1/models. Strings are NUL-terminated. */
#define GEN_XSTORE_LAYERS_MAX 160 /* per-layer expert store counts in /status (DeepSeek-V3: 61) */
struct gen_stats {
    bool ready;                /* weights resident and warm-up done */
    char model_id[128];        /* id reported by /v1/models */
    char architecture[32];     /* "llama", "qwen3moe", ... */
    char quant_mix[256];       /* "Q4_0:193,F32:65" (tensor type: count) */
    int64_t n_ctx;             /* context size in tokens */
    int n_threads;             /* effective compute threads */
    char threads_source[32];   /* "cli", "env", "file", "cgroup", "affinity" (sysinfo.h) */
    uint64_t pool_dispatches;  /* worker pool dispatch count since start */
    int64_t kv_used, kv_total; /* KV cells (tokens) in use / available */
    int n_active;              /* sessions decoding */
    int n_queued;              /* requests waiting for a slot */
    uint64_t tokens_prompt;    /* prompt tokens processed since start */
    uint64_t tokens_generated; /* tokens generated since start */
    double recent_tok_s;       /* decode tokens/s over the last 5 s (0 when idle) */
    uint64_t cache_hits;       /* prefix-cache lookups that reused KV */
    uint64_t cache_misses;
    /* paged KV pool (appended; zero from generation layers that do not page) */
    int kv_block_size;        /* positions per block */
    int64_t kv_blocks_total;  /* blocks in the pool */
    int64_t kv_blocks_used;   /* blocks held by running sessions */
    int64_t kv_blocks_free;   /* blocks nobody references */
    int64_t kv_blocks_cached; /* blocks held by the prefix cache (some also in use) */
    uint64_t cached_tokens;   /* prompt tokens served from the prefix cache since start */
    /* model file and KV bytes for /status (appended; zero/empty = not reported, and
     * /status then says null with a note): set once at start-up */
    char model_path[512];    /* the GGUF path as given */
    int n_weight_types;      /* entries of weight_types in use (0 = unknown) */
    struct gen_weight_type { /* the quant mix, from the GGUF tensor table, most bytes first */
        char type[16];       /* quant_type_name(): "q4_0", "f32", ... */
        int64_t n_tensors;
        uint64_t n_bytes; /* tensor data bytes of this type */
    } weight_types[GEN_WEIGHT_TYPES_MAX];
    uint64_t kv_block_bytes; /* bytes of one KV block (all layers, K and V); 0 = unknown */
    /* scheduler steps (appended; zero from generation layers without steps): totals since
     * start, so a scraper divides differences; seconds are wall time on the scheduler thread */
    uint64_t steps;        /* forward steps run */
    uint64_t step_decode;  /* decode tokens in those steps (one per stream per step) */
    uint64_t step_prefill; /* prompt tokens in those steps */
    int last_step_tokens;  /* tokens (decode + prefill) of the latest step */
    double step_forward_s; /* inside model_forward */
    double step_sample_s;  /* sampling the output rows (sampler or greedy argmax) */
    double step_emit_s;    /* after sampling: detokenize, stop matching, event delivery */
    double step_other_s;   /* reaping, admission, building the batch */
    double step_idle_s;    /* waiting for work with nothing to run */
    /* CPU kernels and where the weights are read from (appended; empty = not
     * reported): set once at start-up */
    char isa[16];                  /* kernels_isa_name of the ISA active at load: "avx2", ... */
    char weights_layout[16];       /* model_weights_layout: "file", "arena", "arena+packed" */
    uint64_t weights_copied_bytes; /* matrices copied into the weight arena */
    uint64_t weights_packed_bytes; /* of those, bytes in the 16-row packed layout */
    /* routing profile (appended; profile_path "" = no --expert-profile) */
    char profile_path[512];        /* the file as given */
    bool profile_active;           /* recording (a MoE model); false: see profile_state */
    char profile_state[1024];      /* how it started: "fresh", "loaded ...", "refused ..." */
    uint64_t profile_picks;        /* routed (layer, expert) picks counted, loaded ones included */
    uint64_t profile_tokens;       /* picks / (n_layer x n_expert_used): tokens routed */
    uint64_t profile_loaded_picks; /* of those, read from the file at start */
    uint64_t profile_saves;        /* successful saves since start */
    double profile_last_save;      /* Unix seconds of the last successful save; 0 = none yet */
    char profile_save_error[512];  /* why the last save failed; "" when it worked */
    /* n > 1 (appended): prompt positions later choices took from their first
     * choice's KV sequence (a block-table copy) instead of computing them */
    uint64_t shared_tokens;
    /* the model for /v1/models (appended; zero = not reported): set at start-up */
    uint64_t n_params;   /* parameters (elements of every tensor) */
    uint64_t file_bytes; /* the GGUF file's size */
    int64_t file_mtime;  /* its modification time, Unix seconds */
    int64_t n_ctx_train; /* the model's trained context */
    /* the expert store (appended; on false: off, xstore_rule says why) */
    struct gen_xstore {
        bool on;
        char rule[192]; /* xstore_plan's: why on or off, the budget's origin */
        char mode[32];  /* "io_uring+direct", "pread+buffered", ... */
        int n_slots, slots_used, n_layer;
        uint64_t slot_bytes, capacity_bytes, used_bytes;
        uint64_t hits, misses, overflow, evictions, read_errors;
        uint64_t bytes_read, reads, batches, lat_sum_us, prefetch_dropped;
        uint64_t warm_bytes; /* read at load to fill the slots */
        int queue_depth;     /* the reads' io_uring depth */
        uint64_t prefetch_issued, prefetch_useful, prefetch_wasted; /* xstore_stats' */
        uint64_t pred_hit, pred_used, pred_n; /* recall hit/used, precision hit/n */
        char queue_rule[96]; /* where it came from: "device 254:0 nr_requests 256, ..." */
        uint64_t lat[16];    /* XSTORE_LAT_BUCKETS: reads under 16 us << i, the last: more */
        uint64_t layer_hits[GEN_XSTORE_LAYERS_MAX], layer_misses[GEN_XSTORE_LAYERS_MAX];
        bool fixed;           /* reads into registered buffers (--expert-fixed) */
        char fixed_rule[112]; /* "on (default)", "off (buffered reads)", ... */
    } xstore;
    /* the GPU (appended; on false: the CPU computes, rule says why) */
    struct gen_gpu {
        bool on;
        char rule[384]; /* gpu/gpu-choose.h's decision line */
        char name[256]; /* the device */
        char driver[256];
        char features[160];                /* "fp16 int8 int-dot ..." */
        uint64_t vram_bytes, device_bytes; /* the heap; what the backend holds (weights, KV) */
        uint32_t subgroup_size;
        int index, n_layer_gpu, n_layer;
        uint64_t steps_sampled; /* steps whose next tokens were picked on the device */
    } gpu;
};

struct gen_ops {
    int (*submit)(void *self, const struct gen_submit *req, struct gen_sink sink,
                  struct gen_submit_out *out, struct strata_error *err);
    void (*cancel)(void *self, struct gen_job *job);
    void (*release)(void *self, struct gen_job *job);
    void (*stats)(void *self, struct gen_stats *out);
};

struct gen_backend {
    const struct gen_ops *ops; /* borrowed, static */
    void *self;                /* borrowed: outlives the server */
};

#endif
