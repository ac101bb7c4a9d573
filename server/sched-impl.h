/* server/sched-impl.h: scheduler internals shared by sched.c (thread, queue,
 * batching, stats) and sched-session.c (prompt, sampling, events). */
#ifndef STRATA_SERVER_SCHED_IMPL_H
#define STRATA_SERVER_SCHED_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "engine/model/model.h"
#include "engine/kv/prefix.h"
#include "engine/sample/sampler.h"
#include "engine/text/tokenizer.h"
#include "server/openai.h"
#include "server/sched.h"

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
    bool prepared; /* session_prepare ran (the job may wait for KV blocks after it) */
    /* set by the prep thread (session_tokenize) before the job is queued */
    bool tokenized;
    int tok_rc; /* 0, or why the prompt was refused (tok_err: the message) */
    struct strata_error tok_err;
    bool kv_bad;        /* a forward step failed: the sequence's rows are not trusted */
    bool kv_short;      /* a block could not be reserved: fail after this step */
    int n_cached;       /* prompt positions reused from the prefix cache */
    uint32_t part;      /* prefix-cache partition (gen_submit.cache_partition) */
    int need_blocks;    /* KV blocks the session may take from the pool (reserved at admission) */
    double t_deadline;  /* monotonic seconds; 0 = none */
    int n_past;         /* positions in the KV sequence */
    int64_t n_gen;      /* tokens generated */
    int64_t max_tokens; /* effective limit */
    int32_t last;       /* token to feed next */
    int n_unsent;       /* tokens since the last DELTA */
    size_t text_total;  /* bytes of detokenized text so far (logprob text_offset) */
    struct sampler *smp;
    struct stop_matcher *stop;
    struct tokenizer_stream *detok;
    struct openai_logprobs *lp;
    char *text; /* non-stream: the completion so far */
    size_t text_len, text_cap;
    double t_first; /* monotonic seconds of the first token */
    /* the step's pick (session_sample, possibly on a pool worker; then read by
     * session_on_logits on the scheduler thread) */
    struct sampler_result pick;
    int pick_rc; /* 0 or negative STRATA_E_* (pick_err says why) */
    struct strata_error pick_err;
    const char *finish_reason; /* static: "stop" / "length"; NULL after an error */
};

/* One prep lane: a persistent thread and its FIFO of jobs (s->mu). */
struct sched_prep_lane {
    struct sched *s; /* borrowed: the owner */
    pthread_t thread;
    bool started;
    bool cond_ok;
    pthread_cond_t cond; /* work arrived, or stop (with s->mu) */
    struct gen_job *head, *tail;
};

struct sched_stats_rec {
    pthread_mutex_t mu; /* held only to copy */
    struct gen_stats st;
};

struct sched {
    struct sched_params p;
    char model_id[128];
    struct pool *pool;
    struct backend *be; /* owned: backend_free after the model */
    struct model *model;
    struct kv_cache *kv;
    struct tokenizer *tok;
    struct chat_template *tmpl;
    char bos_text[64], eos_text[64];
    int n_vocab, n_ctx, n_batch;
    float *logits;                     /* (n_batch, n_vocab) f32 */
    struct model_batch_entry *entries; /* (n_batch) */
    struct gen_job **row_job;          /* (n_batch) job of each logits row */
    struct prefix_cache *pc;           /* NULL when --prefix-cache is off */
    int32_t *blk_tmp;                  /* (ceil(n_ctx / n_block)) prefix lookup result */
    int n_block;                       /* KV positions per block */
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
    double rate_t[32]; /* ring of (time, tokens_generated) samples for recent tok/s */
    uint64_t rate_n[32];
    int rate_head;
    /* per-step accounting for /metrics (gen_stats.steps ...) */
    uint64_t n_steps, step_decode, step_prefill;
    int last_step_tokens;
    double t_forward, t_sample, t_emit, t_other, t_idle; /* seconds */

    struct sched_stats_rec stats;
};

double sched_now(void);

/* sched-prep.c: the prep lanes */
int sched_prep_start(struct sched *s, struct strata_error *err); /* after the scheduler thread */
void sched_prep_submit(struct sched *s, struct gen_job *j);      /* from op_submit */
/* Joins the lanes (each finishes the prompt it holds), then sets the
 * scheduler's stop and hands it every job still queued, untokenized, under
 * one lock (so it ends them instead of admitting them). Safe after a failed
 * or partial start. */
void sched_prep_stop(struct sched *s);

/* sched-session.c */
/* Renders and tokenizes the prompt and checks it against the context into
 * j->prompt / n_prompt, or j->tok_rc + tok_err. Touches only j and reads s's
 * immutable tokenizer and template: runs on the prep thread. */
void session_tokenize(const struct sched *s, struct gen_job *j);
/* Takes the tokenized prompt, makes the sampler/detokenizer/stop matcher.
 * On error sends ERROR (the caller then sends DONE). */
int session_prepare(struct sched *s, struct gen_job *j, struct strata_error *err, char *param,
                    size_t param_cap);
/* Picks the next token of j from its logits row into j->pick / pick_rc.
 * Touches only j's sampler and pick fields: the rows of one step may be
 * sampled concurrently (one job per thread). */
void session_sample(const struct sched *s, struct gen_job *j, const float *logits);
/* Takes j->pick (session_sample ran). Returns true when the job finished
 * (FINISH/USAGE sent, or ERROR; the caller sends DONE). Scheduler thread. */
bool session_on_logits(struct sched *s, struct gen_job *j);
/* Sends ERROR then nothing else (the caller sends DONE). */
void session_error(struct gen_job *j, int code, const char *msg, const char *param);
/* Frees session state (not the job). */
void session_clear(struct gen_job *j);
void session_emit(struct gen_job *j, const struct gen_event *ev);
/* Non-stream response body (owned: free()). */
char *session_response(struct gen_job *j, const char *reason);

#endif
