/* server/sched-impl.h: scheduler internals shared by sched.c (thread, queue,
 * batching, stats), sched-prep.c (the prep lanes), sched-session.c (a job's
 * prompt, sampling and events, over engine/session) and sched-profile.c
 * (the routing profile's owner). */
#ifndef STRATA_SERVER_SCHED_IMPL_H
#define STRATA_SERVER_SCHED_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "engine/kv/prefix.h"
#include "engine/model/model.h"
#include "engine/session/session.h"
#include "server/openai.h"

struct openai_chat_out;
struct xstore_plan;
#include "server/scheduler.h"

enum job_state { JOB_WAITING, JOB_PREFILL, JOB_DECODE };

struct gen_job {
    struct gen_job *next; /* incoming / waiting / active list link (scheduler) */
    struct gen_sink sink;
    atomic_bool cancelled;
    struct openai_request rq;
    struct openai_ctx oc;
    enum job_state state;
    /* session (scheduler thread only) */
    int seq;         /* KV sequence, -1 while waiting */
    int32_t *prompt; /* (n_prompt + max_tokens) owned: the prompt, then each generated token
                        as it is fed back: prompt[pos] is the token at KV position pos */
    int n_prompt;
    bool prepared; /* job_prepare ran (the job may wait for KV blocks after it) */
    /* set by the prep thread (job_tokenize) before the job is queued */
    bool tokenized;
    int tok_rc; /* 0, or why the prompt was refused (tok_err: the message) */
    struct strata_error tok_err;
    bool kv_bad;          /* a forward step failed: the sequence's rows are not trusted */
    bool kv_short;        /* a block could not be reserved: fail after this step */
    int n_cached;         /* prompt positions reused from the prefix cache */
    uint32_t part;        /* prefix-cache partition (gen_submit.cache_partition) */
    int need_blocks;      /* KV blocks the session may take from the pool (reserved at admission) */
    double t_deadline;    /* monotonic seconds; 0 = none */
    int n_past;           /* positions in the KV sequence */
    int64_t n_gen;        /* tokens generated */
    int64_t max_tokens;   /* effective limit */
    int32_t last;         /* token to feed next */
    int n_unsent;         /* tokens since the last DELTA */
    struct session *sess; /* owned: sampler, detokenizer, stop matcher (engine/session) */
    struct openai_logprobs *lp; /* owned: the logprobs JSON not yet sent */
    struct openai_chat_out *co; /* owned: reasoning / tool-call split; NULL = plain text */
    char *text;                 /* non-stream: the completion so far */
    size_t text_len, text_cap;
    double t_submit; /* strata_now() at submit (op_submit) */
    double t_admit;  /* ... when admitted (a KV sequence, JOB_PREFILL) */
    double t_first;  /* ... of the first token */
    double t_last;   /* ... of the latest token */
    /* the step's pick (job_sample, possibly on a pool worker; then read by
     * job_on_logits on the scheduler thread) */
    struct sampler_result pick;
    int pick_rc; /* 0 or negative STRATA_E_* (pick_err says why) */
    struct strata_error pick_err;
    const char *finish_reason; /* static: "stop" / "length"; NULL after an error */
    /* n > 1 and prompt lists (sched-group.c): the job the HTTP layer holds is
     * the parent (group set, never queued); each choice is a child job
     * (grp set) whose events go to the group */
    struct sched_group *group; /* parent: owned (sched_group_free) */
    struct sched_group *grp;   /* child: borrowed, the parent's group */
    struct gen_job *leader;    /* child: the first choice of the same prompt, whose KV
                                  this one shares (fork at admission); NULL for a first */
    bool ended;                /* job_done ran (a leader's KV is gone) */
    int n_forked;              /* prompt positions shared from the leader's sequence */
    char *echo;                /* completions echo: the prompt text not yet sent (owned) */
    size_t echo_len;
    /* embeddings, /tokenize, /detokenize (sched-embed.c) */
    struct sched_aux *aux;  /* owned: the request of such a route (the job the HTTP layer
                               holds); NULL for generation and for embedding inputs */
    struct gen_job *parent; /* an embedding input's request job (borrowed: it outlives its
                               inputs); NULL otherwise */
    int emb_index;          /* that input's index in the request */
    double *emb_acc;        /* (n_embd) owned: pooling accumulator (embed.h) */
};

/* sched-group.c: a request of several choices (n x prompts) */
struct sched_group;
/* Makes the children of parent (its rq parsed, its oc set), counts them in
 * flight (STRATA_E_QUEUE_FULL when they do not fit) and hands them to the
 * prep lanes. On failure nothing was queued and parent is the caller's. */
int sched_group_submit(struct sched *s, struct gen_job *parent, const struct gen_submit *req,
                       struct gen_sink sink, struct strata_error *err, char *param,
                       size_t param_cap);
void sched_group_cancel(struct gen_job *parent);
/* Admission of j (the head of the queue) on a copy of its leader's KV block
 * table (scheduler thread, from admit): 1 admitted, 0 wait for blocks, -1
 * not forked (the ordinary admission follows). */
int sched_group_fork(struct sched *s, struct gen_job *j, struct gen_job *lead);

/* sched.c, for sched_group_fork */
/* Blocks the active sessions may still take from the pool (reserved at
 * admission, not yet taken). */
int64_t sched_blocks_promised(const struct sched *s);
/* Puts j (just taken off the queue) on KV sequence seq with hit positions
 * present, need blocks reserved, into the active list. */
void sched_activate(struct sched *s, struct gen_job *j, int seq, int hit, int need);
/* Frees the children and the group (after the parent's DONE). */
void sched_group_free(struct gen_job *parent);

/* One prep lane: a persistent thread and its FIFO of jobs (s->mu). */
struct sched_prep_lane {
    struct sched *s; /* borrowed: the owner */
    pthread_t thread;
    bool started;
    bool cond_ok;
    pthread_cond_t cond; /* work arrived, or stop (with s->mu) */
    struct gen_job *head, *tail;
};

/* Samples of tokens_generated for the recent tok/s, taken after a step at
 * least RATE_EVERY_S after the previous sample, so 32 of them cover more
 * than the RATE_WINDOW_S the rate is taken over, however short a step. */
#define RATE_N 32
#define RATE_EVERY_S 0.25
#define RATE_WINDOW_S 5.0

struct sched_stats_rec {
    pthread_mutex_t mu; /* held only to copy */
    struct gen_stats st;
    /* the rate is taken when read (op_stats), so it falls to 0 within
     * RATE_WINDOW_S of the last token instead of keeping the last step's */
    double rate_t[RATE_N];
    uint64_t rate_n[RATE_N];
    int rate_head; /* the newest sample */
};

struct sched {
    struct sched_params p;
    struct xstore_plan *xs; /* owned: the expert store's start-up decision (sched-xstore.c) */
    bool xs_logged;         /* its start-up line was printed */
    struct gpu_choice *gpu; /* owned: the --gpu decision (sched-gpu.c); be is s->be when on */
    char model_id[128];
    struct pool *pool;
    struct backend *be; /* owned: backend_free after the model */
    struct model *model;
    struct kv_cache *kv;
    struct session_base *sb; /* tokenizer and chat template (engine/session) */
    int n_vocab, n_ctx, n_batch;
    float *logits;                     /* (n_batch, n_vocab) f32 */
    float *smp_u;                      /* (n_batch) device sampling: each row's uniform draw */
    int32_t *smp_ids;                  /* (n_batch) device sampling: each row's pick */
    uint64_t steps_dev_sampled;        /* steps whose picks came from the device */
    struct model_batch_entry *entries; /* (n_batch) */
    struct gen_job **row_job;          /* (n_batch) job of each logits row */
    struct prefix_cache *pc;           /* NULL when --prefix-cache is off */
    int32_t *blk_tmp;                  /* (ceil(n_ctx / n_block)) prefix lookup result */
    int n_block;                       /* KV positions per block */
    int n_embd;                        /* hidden size (embedding length) */
    int pooling;                       /* model_hparams.pooling_type (-1: none in the file) */
    float *hidden;                     /* (n_batch, n_embd) f32 final hidden rows of a step */
    int32_t *hid_rows;                 /* (n_batch) batch entry of each hidden row */
    struct gen_job **hid_job;          /* (n_batch) embedding input of each hidden row */
    bool *seq_used;                    /* (parallel) */

    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu; /* guards incoming, stop and the prep lanes */
    pthread_cond_t cond;
    struct gen_job *incoming, *incoming_tail;
    bool stop;
    /* the prep lanes (sched-prep.c): each tokenizes its submitted prompts in
     * order, then moves the jobs to incoming; [0] short prompts, [1] long */
    struct sched_prep_lane prep[2];
    bool prep_stop;
    atomic_int n_prep;     /* jobs submitted and not yet in incoming (counted as queued) */
    atomic_int n_inflight; /* submitted and not yet DONE */
    atomic_uint_fast64_t id_counter;

    /* scheduler thread only */
    struct gen_job *waiting; /* FIFO */
    struct gen_job *active;  /* list */
    int n_active;
    uint64_t tokens_prompt, tokens_generated;
    uint64_t cache_hits, cache_misses, cached_tokens;
    uint64_t shared_tokens; /* prompt positions n > 1 choices forked (gen_stats) */
    /* per-step accounting for /metrics (gen_stats.steps ...) */
    uint64_t n_steps, step_decode, step_prefill;
    int last_step_tokens;
    double t_forward, t_sample, t_emit, t_other, t_idle; /* seconds */
    /* the routing profile (sched-profile.c): NULL for a dense model or without
     * --expert-profile; counted by model_forward, saved by this thread */
    struct profile *profile;
    char profile_path[512];    /* copy of params.expert_profile; "" = none */
    char profile_state[1024];  /* how it started (gen_stats.profile_state) */
    uint64_t profile_saved;    /* profile_total() on disk (after the last save or the load) */
    uint64_t profile_loaded;   /* picks read from the file at start */
    uint64_t profile_saves;    /* successful saves */
    uint64_t profile_picks;    /* profile_total() at the last tick (published) */
    int64_t profile_per_token; /* picks a token makes: n_layer x n_expert_used */
    double profile_t_save;     /* strata_now() of the last save attempt (or the start) */
    double profile_last_save;  /* Unix seconds of the last successful save; 0 = none */
    char profile_error[512];   /* the last save's failure, "" after a success */

    struct sched_stats_rec stats;
    struct sched_plan plan; /* the sizing applied at init */
};

/* sched-prep.c: the prep lanes */
int sched_prep_start(struct sched *s, struct strata_error *err); /* after the scheduler thread */
void sched_prep_submit(struct sched *s, struct gen_job *j);      /* from op_submit */
/* The n choices of one request (sched-group.c), in one lane, handed on together. */
void sched_prep_submit_group(struct sched *s, struct gen_job **jobs, int n);
/* Joins the lanes (each finishes the prompt it holds), then sets the
 * scheduler's stop and hands it every job still queued, untokenized, under
 * one lock (so it ends them instead of admitting them). Safe after a failed
 * or partial start. */
void sched_prep_stop(struct sched *s);

/* sched-session.c */
/* Renders and tokenizes the prompt and checks it against the context
 * (session_prompt) into j->prompt / n_prompt, or j->tok_rc + tok_err.
 * Touches only j and reads s's immutable session base: runs on the prep
 * thread. */
void job_tokenize(const struct sched *s, struct gen_job *j);
/* Takes the tokenized prompt, makes the job's session (sampler,
 * detokenizer, stop matcher). On error sends ERROR (the caller then sends
 * DONE). */
int job_prepare(struct sched *s, struct gen_job *j, struct strata_error *err, char *param,
                size_t param_cap);
/* Picks the next token of j from its logits row into j->pick / pick_rc.
 * Touches only j's session and pick fields: the rows of one step may be
 * sampled concurrently (one job per thread). */
void job_sample(struct gen_job *j, const float *logits);
/* Takes j->pick (job_sample ran) through session_step. Returns true when
 * the job finished (FINISH/USAGE sent, or ERROR; the caller sends DONE).
 * Scheduler thread. */
bool job_on_logits(struct sched *s, struct gen_job *j);
/* Sends ERROR then nothing else (the caller sends DONE). */
void job_error(struct gen_job *j, int code, const char *msg, const char *param);
/* Frees the job's session state (not the job). */
void job_clear(struct gen_job *j);
void job_emit(struct gen_job *j, const struct gen_event *ev);
/* Non-stream response body (owned: free()). */
char *job_response(struct gen_job *j, const char *reason);

/* sched-embed.c: /v1/embeddings, /tokenize and /detokenize (see sched.h).
 * op_submit hands these routes here (HTTP thread: parse and validate). */
int sched_aux_submit(struct sched *s, const struct gen_submit *req, struct gen_sink sink,
                     struct gen_submit_out *out, struct strata_error *err);
/* Prep thread: tokenizes (or detokenizes) the request's inputs. */
void sched_aux_prep(const struct sched *s, struct gen_job *j);
/* Scheduler thread, after new jobs joined the waiting list: answers the
 * tokenize/detokenize requests there and replaces each embeddings request
 * by its inputs' jobs (one KV sequence each, admitted like generation). */
void sched_aux_take(struct sched *s);
/* Whether an embedding input should be dropped (its request was cancelled
 * or already failed). */
bool sched_aux_dropped(const struct gen_job *j);
/* Whether position pos of embedding input j is pooled (its hidden row wanted). */
bool sched_aux_wants(const struct sched *s, const struct gen_job *j, int pos);
/* Whether input j may reuse cached prefix blocks (only LAST pooling does:
 * MEAN and CLS need every pooled position computed). */
bool sched_aux_prefix_ok(const struct sched *s, const struct gen_job *j);
/* After a step's forward: pools the step's n_hid hidden rows (s->hidden). */
void sched_aux_after_step(struct sched *s, int n_hid);
/* True when j is an embedding input whose every position is in: its vector
 * is then in the request's result (or ERROR was sent); the caller ends the
 * job (unlink, job_done). */
bool sched_aux_input_done(struct sched *s, struct gen_job *j);
/* job_clear's part: frees j->aux and j->emb_acc. */
void sched_aux_clear(struct gen_job *j);

/* sched-profile.c: the routing profile's owner (see sched.h) */
/* Creates the profile of a MoE model (loading params.expert_profile when
 * the file exists) and attaches it to the model; fills the stats' profile
 * fields. Only STRATA_E_NOMEM fails: a refused file means a fresh profile.
 * In sched_init, after the warm-up step, before the scheduler thread. */
int sched_profile_start(struct sched *s, struct strata_error *err);
/* Saves when params.profile_interval_s passed since the last save and the
 * counts changed (force: whenever they changed). Scheduler thread, or
 * sched_free after it joined. */
void sched_profile_tick(struct sched *s, double now, bool force);
/* strata_now() when the next periodic save is due; 0 when nothing waits to
 * be saved (the idle scheduler then sleeps without a timeout). */
double sched_profile_due(const struct sched *s);
/* Copies the profile's counters into st (s->stats.mu held). */
void sched_profile_stats(const struct sched *s, struct gen_stats *st);

/* ---- the expert store (sched-xstore.c) ---------------------------------------- */
/* Decides --expert-store from the file's header, the KV plan and the memory
 * budget into s->xs (allocated), before the model loads; with the store on
 * and --expert-profile, that profile (when it loads) orders the warm fill.
 * 0 or STRATA_E_* (a bad option value, the file unreadable). */
int sched_xstore_plan(struct sched *s, const struct sched_params *p, struct strata_error *err);
/* After model_load (whether it worked): frees the warm-start profile the
 * plan read (--expert-profile) and logs the store's mode once. Idempotent. */
void sched_xstore_loaded(struct sched *s);
/* The store's counters into st->xstore (any thread: they are atomics). */
void sched_xstore_stats(const struct sched *s, struct gen_stats *st);

/* ---- the GPU (sched-gpu.c) ------------------------------------------------------ */
/* Decides --gpu / --gpu-layers into s->gpu (allocated) and logs the line;
 * s->be is the Vulkan backend when a device was taken, else NULL. 0 or
 * STRATA_E_CONFIG (a bad option value). */
int sched_gpu_choose(struct sched *s, const struct sched_params *p, struct strata_error *err);
/* The model did not load on the GPU: logs why, frees the backend (s->be
 * NULL), so the caller loads again on the CPU. */
void sched_gpu_load_failed(struct sched *s, const struct strata_error *why);
/* --gpu-layers N below the model's layers: s->be becomes a split backend
 * over the GPU one and a CPU one made from cp (backend-split.h); a failure
 * is a log line and the CPU (s->be NULL). */
struct backend_cpu_params;
void sched_gpu_split(struct sched *s, const struct sched_params *p,
                     const struct backend_cpu_params *cp);
/* The KV pool's cap in bytes of whole blocks on the GPU (device memory left
 * after the weights, the store's bindings; a split's GPU part holds
 * n_layer_gpu / n_layer of each block); 0 when on the CPU. */
int64_t sched_gpu_kv_cap(const struct sched *s);
/* The GPU's part of the stats (st->gpu). */
void sched_gpu_stats(const struct sched *s, struct gen_stats *st);

#endif
