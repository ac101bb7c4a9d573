/* server/sched.c: the scheduler thread, the request queue, continuous
 * batching and the gen_ops (see sched.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "engine/core/clock.h"
#include "engine/cpu/backend-cpu.h"
#include "engine/cpu/kernels.h"
#include "engine/experts/xstore.h"
#include "engine/experts/profile.h"
#include "engine/model/model-numa.h"
#include "engine/host/pool.h"
#include "engine/host/sysinfo.h"
#include "engine/kv/kv.h"
#include "engine/kv/prefix.h"
#include "server/openai-ext.h"
#include "server/openai-tools.h"
#include "gpu/gpu-choose.h"
#include "server/sched-impl.h"

struct sched_params sched_params_default(void) {
    return (struct sched_params){.pool_spin = 4000,
                                 .parallel = 4,
                                 .queue = 64,
                                 .request_timeout = 0,
                                 .prefix_cache = true,
                                 .prefault = true,
                                 .repack = true,
                                 .profile_interval_s = SCHED_PROFILE_INTERVAL_S};
}

/* ---- events that end a job ----------------------------------------------- */

/* Sends DONE (with the body for a non-stream success) and forgets the job:
 * after this the HTTP layer may release it at any moment. */
static void job_done(struct sched *s, struct gen_job *j, bool ok) {
    char *body = NULL;
    if (ok && !j->rq.stream && j->finish_reason)
        body = job_response(j, j->finish_reason);
    if (j->seq >= 0) {
        /* keep the rows for a later request with the same prefix (also after a
         * cancel: positions < n_past are valid) */
        if (s->pc && !j->kv_bad)
            prefix_insert_part(s->pc, j->part, j->prompt, kv_seq_len(s->kv, j->seq), j->seq, NULL);
        s->seq_used[j->seq] = false;
        kv_seq_clear(s->kv, j->seq, NULL);
        j->seq = -1;
    }
    j->ended = true; /* its siblings (n > 1) no longer fork its KV */
    job_clear(j);
    if (!j->parent) /* an embedding input counts in its request's place */
        atomic_fetch_sub(&s->n_inflight, 1);
    struct gen_event ev = {.type = GEN_EV_DONE, .json = body, .json_len = body ? strlen(body) : 0};
    job_emit(j, &ev);
    free(body);
}

static void job_fail(struct sched *s, struct gen_job *j, int code, const char *msg,
                     const char *param) {
    job_error(j, code, msg, param);
    j->finish_reason = NULL;
    job_done(s, j, false);
}

/* ---- stats --------------------------------------------------------------- */

static void publish_stats(struct sched *s, int n_waiting) {
    double now = strata_now();
    int64_t kv_used = 0;
    for (struct gen_job *j = s->active; j; j = j->next)
        kv_used += j->n_past;
    const int64_t n_free = kv_blocks_free(s->kv), n_idle = s->pc ? prefix_n_idle(s->pc) : 0;
    pthread_mutex_lock(&s->stats.mu);
    s->stats.st.n_active = s->n_active;
    s->stats.st.n_queued = n_waiting + atomic_load(&s->n_prep); /* tokenizing counts as waiting */
    s->stats.st.tokens_prompt = s->tokens_prompt;
    s->stats.st.tokens_generated = s->tokens_generated;
    struct sched_stats_rec *r = &s->stats;
    if (now - r->rate_t[r->rate_head] >= RATE_EVERY_S) {
        r->rate_head = (r->rate_head + 1) % RATE_N;
        r->rate_t[r->rate_head] = now;
        r->rate_n[r->rate_head] = s->tokens_generated;
    }
    s->stats.st.kv_used = kv_used;
    s->stats.st.pool_dispatches = s->pool ? pool_dispatch_count(s->pool) : 0;
    s->stats.st.kv_blocks_free = n_free;
    s->stats.st.kv_blocks_used = kv_blocks_total(s->kv) - n_free - n_idle;
    s->stats.st.kv_blocks_cached = s->pc ? prefix_n_entries(s->pc) : 0;
    s->stats.st.cache_hits = s->cache_hits;
    s->stats.st.cache_misses = s->cache_misses;
    s->stats.st.cached_tokens = s->cached_tokens;
    s->stats.st.shared_tokens = s->shared_tokens;
    s->stats.st.steps = s->n_steps;
    s->stats.st.step_decode = s->step_decode;
    s->stats.st.step_prefill = s->step_prefill;
    s->stats.st.last_step_tokens = s->last_step_tokens;
    s->stats.st.step_forward_s = s->t_forward;
    s->stats.st.step_sample_s = s->t_sample;
    s->stats.st.step_emit_s = s->t_emit;
    s->stats.st.step_other_s = s->t_other;
    s->stats.st.step_idle_s = s->t_idle;
    sched_profile_stats(s, &s->stats.st);
    sched_xstore_stats(s, &s->stats.st);
    sched_gpu_stats(s, &s->stats.st);
    pthread_mutex_unlock(&s->stats.mu);
}

/* ---- one step ------------------------------------------------------------ */

static int count(const struct gen_job *j) {
    int n = 0;
    for (; j; j = j->next)
        n++;
    return n;
}

/* Drops cancelled jobs and jobs past their deadline from a list (sending
 * ERROR + DONE): both take effect at the step after they happen. */
static void reap_cancelled(struct sched *s, struct gen_job **list, bool active, double now) {
    for (struct gen_job **pp = list; *pp;) {
        struct gen_job *j = *pp;
        bool cancelled = atomic_load(&j->cancelled) || sched_aux_dropped(j);
        if (cancelled || (j->t_deadline > 0 && now >= j->t_deadline)) {
            *pp = j->next;
            if (active)
                s->n_active--;
            char msg[96];
            snprintf(msg, sizeof(msg), "request exceeded its %g s deadline", s->p.request_timeout);
            job_fail(s, j, cancelled ? STRATA_E_CANCELLED : STRATA_E_TIMEOUT,
                     cancelled ? "request cancelled" : msg, NULL);
        } else {
            pp = &j->next;
        }
    }
}

/* Blocks the active sessions may still take from the pool (reserved at
 * admission, not yet taken). */
int64_t sched_blocks_promised(const struct sched *s) {
    int64_t n = 0;
    for (const struct gen_job *j = s->active; j; j = j->next) {
        int left = j->need_blocks - kv_seq_n_alloc(s->kv, j->seq);
        n += left > 0 ? left : 0;
    }
    return n;
}

void sched_activate(struct sched *s, struct gen_job *j, int seq, int hit, int need) {
    s->seq_used[seq] = true;
    j->seq = seq;
    j->n_past = hit;
    j->n_cached = hit;
    j->need_blocks = need;
    j->state = JOB_PREFILL;
    j->t_admit = strata_now();
    /* append to the active list (admission order = prefill order) */
    struct gen_job **pp = &s->active;
    while (*pp)
        pp = &(*pp)->next;
    *pp = j;
    s->n_active++;
}

/* Moves waiting jobs, in FIFO order, into free KV sequences (tokenizing
 * their prompts). A job is admitted only when the pool can hold its worst
 * case (prompt + max_tokens, less the full blocks it reuses from the prefix
 * cache) on top of what the running sessions were promised, counting idle
 * cached blocks as free (they are evicted on demand). Otherwise it waits at
 * the head of the queue (later jobs wait behind it: no starvation) until
 * sessions finish. n_ctx <= the pool, so every job fits an empty pool. */
static void admit(struct sched *s) {
    while (s->waiting && s->n_active < s->p.parallel) {
        struct gen_job *j = s->waiting;
        struct strata_error err = {0};
        char param[64] = "";
        if (!j->prepared) {
            if (job_prepare(s, j, &err, param, sizeof(param)) < 0) {
                s->waiting = j->next;
                j->next = NULL;
                job_fail(s, j, err.code ? err.code : STRATA_E_INTERNAL, err.message, param);
                continue;
            }
            j->prepared = true;
        }
        const int B = s->n_block;
        int nb = 0, hit = 0;
        /* a later choice of n > 1 (sched-group.c) shares its first choice's
         * prompt KV: it waits until that one has prefilled, then forks */
        struct gen_job *lead = j->leader;
        if (lead && !lead->ended && !lead->kv_bad && lead->seq >= 0 && j->n_prompt > 1) {
            if (lead->state != JOB_DECODE)
                break; /* prefilling (it is ahead in the queue, so it runs) */
        } else {
            lead = NULL;
        }
        if (lead) {
            const int rc = sched_group_fork(s, j, lead);
            if (rc > 0)
                continue;
            if (rc == 0)
                break; /* wait for blocks */
        }
        /* embedding inputs: by their pooling (sched-embed.c); a request: cache_prompt */
        if (s->pc && sched_aux_prefix_ok(s, j) && (j->parent || j->rq.cache_prompt))
            hit = prefix_lookup_part(s->pc, j->part, j->prompt, j->n_prompt - 1, s->blk_tmp, &nb);
        int64_t total = (int64_t)j->n_prompt + j->max_tokens;
        if (total > s->n_ctx)
            total = s->n_ctx;
        const int need = (int)((total + B - 1) / B) - hit / B;
        const int64_t base =
            kv_blocks_free(s->kv) + (s->pc ? prefix_n_idle(s->pc) : 0) - sched_blocks_promised(s);
        int64_t pinned = 0; /* idle cached blocks this job would start using */
        for (int i = 0; i < nb; i++)
            pinned += kv_block_refs(s->kv, s->blk_tmp[i]) == 1 ? 1 : 0;
        if (need > base - pinned && hit % B) {
            /* a shared partial block is held until its copy is made: when
             * that one block is what does not fit, reuse full blocks only */
            if (kv_block_refs(s->kv, s->blk_tmp[nb - 1]) == 1)
                pinned--;
            hit -= hit % B;
            nb = hit / B;
        }
        if (need > base - pinned) {
            if (s->n_active > 0)
                break; /* wait for blocks */
            /* cannot happen (n_ctx <= the pool); never spin on it */
            s->waiting = j->next;
            j->next = NULL;
            char msg[128];
            snprintf(msg, sizeof(msg), "request needs %d KV blocks, the pool has %lld", need,
                     (long long)base);
            job_fail(s, j, STRATA_E_LIMIT, msg, NULL);
            continue;
        }
        s->waiting = j->next;
        j->next = NULL;
        int seq = 0;
        while (s->seq_used[seq])
            seq++;
        kv_seq_clear(s->kv, seq, NULL);
        if (kv_seq_attach(s->kv, seq, s->blk_tmp, nb, hit, &err) < 0) {
            job_fail(s, j, STRATA_E_INTERNAL, err.message, NULL);
            continue;
        }
        if (s->pc) {
            if (hit > 0)
                s->cache_hits++;
            else
                s->cache_misses++;
            s->cached_tokens += (uint64_t)hit;
        }
        sched_activate(s, j, seq, hit, need);
    }
}

/* Takes the KV block for (j, pos) now, evicting an idle cached block when the
 * pool is empty (admission promised it). False (and the job is failed after
 * the step) only if that promise is broken: a bug, reported not crashed. */
static bool reserve(struct sched *s, struct gen_job *j, int pos) {
    if (j->kv_short)
        return false;
    if (kv_blocks_free(s->kv) == 0 && s->pc)
        prefix_evict(s->pc, 1);
    if (kv_seq_reserve_pos(s->kv, j->seq, pos, NULL) == 0)
        return true;
    j->kv_short = true;
    return false;
}

static void unlink_active(struct sched *s, struct gen_job *j) {
    for (struct gen_job **pp = &s->active; *pp; pp = &(*pp)->next) {
        if (*pp == j) {
            *pp = j->next;
            s->n_active--;
            return;
        }
    }
}

/* pool task: samples logits rows [r0, r1) of the step (one job each) */
static void sample_rows(void *ctx, int64_t r0, int64_t r1, int worker) {
    (void)worker;
    struct sched *s = ctx;
    for (int64_t r = r0; r < r1; r++)
        job_sample(s->row_job[r], s->logits + (size_t)r * (size_t)s->n_vocab);
}

/* Device sampling (model_forward_sample, a GPU backend): when every output
 * row's session takes the same rule the device does (session_device_rule:
 * no grammar mask, logit bias, penalties or logprobs; greedy or top_k
 * 1..VKOPS_SAMPLE_K_MAX) and no row wants its hidden state, the step hands
 * back one id per row instead of n_vocab logits each; every other step (a
 * JSON-schema request, logprobs, mixed rules in one batch) reads the logits
 * back and samples on the host as before. The uniforms come from each
 * session's own RNG stream, so a seed gives the same draws either way. */
#define SCHED_DEVICE_TOP_K_MAX 256 /* gpu/vk-ops.h VKOPS_SAMPLE_K_MAX */

static bool device_rule(struct sched *s, int n_rows, int n_hid, struct model_sample *out) {
    if (n_rows < 1 || n_hid > 0 || !model_can_sample(s->model))
        return false;
    struct sampler_rule r0 = {0}, r;
    for (int i = 0; i < n_rows; i++) {
        if (!session_device_rule(s->row_job[i]->sess, SCHED_DEVICE_TOP_K_MAX, &r))
            return false;
        if (i == 0)
            r0 = r;
        else if (r.top_k != r0.top_k || r.top_p != r0.top_p || r.min_p != r0.min_p ||
                 r.temperature != r0.temperature)
            return false;
    }
    *out = (struct model_sample){r0.top_k, r0.top_p, r0.min_p, r0.temperature};
    for (int i = 0; i < n_rows && r0.temperature > 0.0f; i++)
        s->smp_u[i] = session_next_uniform(s->row_job[i]->sess);
    return true;
}

/* Builds and runs one batch; then samples every output row. t0: when the
 * scheduler woke for this step (the time before the forward counts as
 * "other" in the step accounting). */
static void step(struct sched *s, double t0) {
    int n = 0, n_rows = 0, n_hid = 0;
    for (struct gen_job *j = s->active; j; j = j->next) {
        if (j->state != JOB_DECODE)
            continue;
        if (!reserve(s, j, j->n_past))
            continue;
        j->prompt[j->n_past] = j->last; /* history for the prefix cache */
        s->entries[n++] = (struct model_batch_entry){j->seq, j->n_past, j->last, true};
        s->row_job[n_rows++] = j;
    }
    /* Prefill budget. A step's time grows with its tokens and every decoder
     * waits for the whole step, while the cost per token falls with the
     * batch.
     * - Nobody decoding: the whole budget (TTFT).
     * - n sessions decoding: n + max(n, 16 - n) tokens a step at most (16
     *   until 8 decode, then twice the decoders), so a step with prompt
     *   tokens costs at most about two decode-only steps, whoever joins.
     * History: with the GGUF-layout K-quant kernels (a step of 8 tokens 54-63
     * ms, 2 tokens as slow as 8) a burst of joining sessions (at least as many
     * as decoding ones) got 64 prompt tokens each a step, so the batch filled
     * at once instead of creeping up through small, inefficient steps. With
     * the packed kernels (kernels-x86-pk.inc: 8 tokens ~26 ms, every size from
     * 2 tokens batched) small steps no longer cost extra, and the burst's one
     * long step froze the few running streams: bench/load.mjs CLIENTS=1,8
     * REQS=3 on llama-3.2-1b Q4_K_M with the Llama 3 vocabulary (2-vCPU EPYC
     * VM, 2 threads, 2026-12-01, two alternated pairs), burst -> this rule:
     * 8 clients 230 / 237 -> 221 / 224 tok/s, ITL p99 53 / 153 -> 61 / 62 ms,
     * TTFT p50 251 / 249 -> 174 / 145 ms; REQS=6: 244 -> 240 tok/s, ITL p99
     * 40 -> 48 ms; with the synthetic vocabulary (34-token prompts, REQS=3)
     * the burst's ITL p99 reached 366 ms. The rule bounds every step instead
     * of the typical one. */
    const int n_decoders = n;
    int limit = s->n_batch;
    if (n > 0) {
        int64_t pf = n > 8 ? n : 16 - n;
        limit = n + pf < s->n_batch ? n + (int)pf : s->n_batch;
    }
    for (struct gen_job *j = s->active; j && n < limit; j = j->next) {
        if (j->state != JOB_PREFILL)
            continue;
        int chunk = j->n_prompt - j->n_past;
        if (chunk > limit - n)
            chunk = limit - n;
        for (int i = 0; i < chunk; i++) {
            int pos = j->n_past + i;
            if (!reserve(s, j, pos))
                break;
            bool last = pos == j->n_prompt - 1 && !j->parent; /* an embedding input: no logits */
            if (sched_aux_wants(s, j, pos)) {
                s->hid_rows[n_hid] = n;
                s->hid_job[n_hid++] = j;
            }
            s->entries[n++] = (struct model_batch_entry){j->seq, pos, j->prompt[pos], last};
            if (last)
                s->row_job[n_rows++] = j;
        }
    }
    if (n == 0) {
        s->t_other += strata_now() - t0;
        goto short_jobs;
    }
    const int n_decode = n_decoders;
    struct model_batch b = {s->entries, n};
    struct strata_error err = {0};
    const double t_fwd = strata_now();
    struct model_sample rule;
    const bool on_dev = device_rule(s, n_rows, n_hid, &rule);
    int rc = on_dev ? model_forward_sample(s->model, s->kv, &b, &rule, s->smp_u, s->smp_ids, &err)
                    : model_forward_hidden(s->model, s->kv, &b, s->logits, s->hid_rows, n_hid,
                                           s->hidden, &err);
    const double t_out = strata_now();
    s->t_other += t_fwd - t0;
    s->t_forward += t_out - t_fwd;
    s->n_steps++;
    s->step_decode += (uint64_t)n_decode;
    s->step_prefill += (uint64_t)(n - n_decode);
    s->last_step_tokens = n;
#ifdef SCHED_TRACE /* -DSCHED_TRACE: one line a step on stderr (policy experiments) */
    fprintf(stderr, "STEP %.3f dec %d pf %d fwd %.1f ms act %d wait %d\n", t_fwd, n_decode,
            n - n_decode, (t_out - t_fwd) * 1e3, s->n_active, count(s->waiting));
#endif
    if (rc < 0) {
        /* the batch is all-or-nothing (model_forward validates first): fail every active job */
        for (struct gen_job **pp = &s->active; *pp;) {
            struct gen_job *j = *pp;
            *pp = j->next;
            s->n_active--;
            j->kv_bad = true;
            job_fail(s, j, rc, err.message, NULL);
        }
        return;
    }
    /* advance positions */
    for (int i = 0; i < n; i++) {
        for (struct gen_job *j = s->active; j; j = j->next) {
            if (j->seq == s->entries[i].seq_id) {
                j->n_past++;
                if (j->state == JOB_PREFILL)
                    s->tokens_prompt++;
                break;
            }
        }
    }
    /* embedding inputs: pool their rows; those all in are done */
    sched_aux_after_step(s, n_hid);
    for (struct gen_job *j = s->active, *next; j; j = next) {
        next = j->next;
        if (sched_aux_input_done(s, j)) {
            unlink_active(s, j);
            job_done(s, j, false);
        }
    }
    /* pick every row's token, spread over the pool when there are several:
     * with temperature 1 (the SDKs' default) a row costs ~1.9 ms (two exp()
     * per vocabulary entry, llama-3.2-1b), next to a ~65-95 ms forward.
     * bench/load.mjs CLIENTS=8 REQS=2 TEMP=1, 2 threads, 2-vCPU EPYC VM, two
     * alternated pairs: sample 13.3/13.4 -> 7.2/7.3 ms a step, 68.2/68.7 ->
     * 73.1/72.2 tok/s. */
    const double t_smp = strata_now();
    if (on_dev) {
        s->steps_dev_sampled++;
        for (int r = 0; r < n_rows; r++) {
            struct gen_job *j = s->row_job[r];
            j->pick = (struct sampler_result){.token = s->smp_ids[r], .logprob = NAN};
            j->pick_err.code = 0;
            j->pick_rc = 0;
        }
    } else if (n_rows >= 2) {
        struct pool_task t = {.fn = sample_rows, .ctx = s, .n_rows = n_rows, .min_grain = 1};
        pool_run(s->pool, &t, 1);
    } else if (n_rows == 1) {
        sample_rows(s, 0, 1, 0);
    }
    const double t_emit0 = strata_now();
    s->t_sample += t_emit0 - t_smp;
    for (int r = 0; r < n_rows; r++) {
        struct gen_job *j = s->row_job[r];
        if (j->state == JOB_PREFILL && s->pc) /* share the prompt's full blocks right away */
            prefix_insert_part(s->pc, j->part, j->prompt, j->n_prompt / s->n_block * s->n_block,
                               j->seq, NULL);
        j->state = JOB_DECODE;
        if (job_on_logits(s, j)) {
            unlink_active(s, j);
            if (j->finish_reason)
                job_done(s, j, true);
            else
                job_done(s, j, false); /* ERROR already sent */
        }
    }
    s->t_emit += strata_now() - t_out - (t_emit0 - t_smp); /* all after the forward but sampling */
short_jobs:
    for (struct gen_job *j = s->active, *next; j; j = next) {
        next = j->next;
        if (j->kv_short) {
            unlink_active(s, j);
            job_fail(s, j, STRATA_E_LIMIT, "KV cache pool exhausted", NULL);
        }
    }
}

/* Waits on s->cond (s->mu held) until it is signalled or, when the
 * routing profile has unsaved counts, until its save is due (s->cond runs
 * on CLOCK_MONOTONIC, strata_now's clock). Returns true on the timeout. */
static bool wait_work(struct sched *s) {
    const double due = sched_profile_due(s);
    if (due <= 0) {
        pthread_cond_wait(&s->cond, &s->mu);
        return false;
    }
    double sec = floor(due);
    struct timespec ts = {(time_t)sec, (long)((due - sec) * 1e9)};
    return pthread_cond_timedwait(&s->cond, &s->mu, &ts) == ETIMEDOUT;
}

static void *sched_thread(void *arg) {
    struct sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        double t_wait = 0;
        while (!s->stop && !s->incoming && !s->active && !s->waiting) {
            if (t_wait == 0)
                t_wait = strata_now();
            if (wait_work(s))
                break; /* a profile save is due (below) */
        }
        bool stop = s->stop;
        struct gen_job *in = s->incoming;
        s->incoming = s->incoming_tail = NULL;
        pthread_mutex_unlock(&s->mu);
        double now = strata_now();
        if (t_wait > 0)
            s->t_idle += now - t_wait;
        /* append the new jobs to the waiting FIFO */
        struct gen_job **pp = &s->waiting;
        while (*pp)
            pp = &(*pp)->next;
        *pp = in;
        sched_aux_take(s); /* embeddings: one job an input; tokenize: answered */
        if (stop) {
            struct gen_job **lists[2] = {&s->waiting, &s->active};
            for (int l = 0; l < 2; l++) {
                while (*lists[l]) {
                    struct gen_job *j = *lists[l];
                    *lists[l] = j->next;
                    job_fail(s, j, STRATA_E_CANCELLED, "server shutting down", NULL);
                }
            }
            s->n_active = 0;
            publish_stats(s, 0);
            return NULL;
        }
        reap_cancelled(s, &s->waiting, false, now);
        reap_cancelled(s, &s->active, true, now);
        admit(s);
        step(s, now);
        sched_profile_tick(s, strata_now(), false);
        publish_stats(s, count(s->waiting));
    }
}

/* --chat-template-file's text (owned: free()); 1 MiB at most: the largest
 * fixture template (Command-R+) is 14 KB. */
static char *read_template(const char *path, struct strata_error *err) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        strata_error_set(err, STRATA_E_CONFIG, "chat-template-file %s: %s", path, strerror(errno));
        return NULL;
    }
    const size_t cap = 1u << 20;
    char *buf = malloc(cap + 1);
    size_t n = buf ? fread(buf, 1, cap + 1, fp) : 0;
    bool bad = ferror(fp) != 0;
    fclose(fp);
    if (!buf || bad || n > cap) {
        strata_error_set(err, buf ? STRATA_E_CONFIG : STRATA_E_NOMEM, "chat-template-file %s: %s",
                         path,
                         !buf  ? "out of memory"
                         : bad ? "read error"
                               : "larger than 1 MiB");
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

/* ---- gen_ops --------------------------------------------------------------- */

static int op_submit(void *self, const struct gen_submit *req, struct gen_sink sink,
                     struct gen_submit_out *out, struct strata_error *err) {
    struct sched *s = self;
    out->job = NULL;
    out->error_param[0] = '\0';
    if (req->route == GEN_ROUTE_EMBEDDINGS || req->route == GEN_ROUTE_TOKENIZE ||
        req->route == GEN_ROUTE_DETOKENIZE)
        return sched_aux_submit(s, req, sink, out, err);
    struct gen_job *j = calloc(1, sizeof(*j));
    if (!j)
        return strata_error_set(err, STRATA_E_NOMEM, "out of memory");
    j->t_submit = strata_now();
    int rc = openai_parse(req, s->model_id, s->n_vocab, &j->rq, out->error_param,
                          sizeof(out->error_param), err);
    if (rc == 0 && j->rq.ext) { /* what depends on the template (reasoning_effort) */
        size_t slen = 0;
        const char *src = session_base_template_source(s->sb, &slen);
        rc = openai_chat_ext_check_template(j->rq.ext, j->rq.messages, src, slen, out->error_param,
                                            sizeof(out->error_param), err);
        if (rc == 0) /* a forced tool_choice: the grammar of a call in the family's form */
            rc = openai_tools_grammar(&j->rq, src, slen, out->error_param, sizeof(out->error_param),
                                      err);
        if (rc < 0)
            openai_request_free(&j->rq);
    }
    if (rc < 0) {
        free(j);
        return rc;
    }
    if (j->rq.unknown && req->log_debug) {
        /* ignored as OpenAI does, but said (--log-level debug) */
        char names[512];
        openai_ext_unknown_list(&j->rq, names, sizeof names);
        fprintf(stderr, "strata: debug id=%s unknown fields ignored: %s\n",
                req->request_id ? req->request_id : "-", names);
    }
    if (j->rq.n > 1 || j->rq.n_prompts > 1) {
        /* several choices: a parent and a child job per choice (sched-group.c) */
        j->seq = -1;
        j->part = req->cache_partition;
        if (s->p.request_timeout > 0)
            j->t_deadline = strata_now() + s->p.request_timeout;
        atomic_init(&j->cancelled, false);
        j->sink = sink;
        openai_ctx_init(&j->oc, req->route, s->model_id, j->rq.stream_usage,
                        (uint64_t)time(NULL) << 24 ^
                            atomic_fetch_add(&s->id_counter, 1) * 2654435761u);
        rc = sched_group_submit(s, j, req, sink, err, out->error_param, sizeof(out->error_param));
        if (rc < 0) {
            openai_request_free(&j->rq);
            free(j);
            return rc;
        }
        out->job = j;
        return 0;
    }
    int limit = s->p.parallel + s->p.queue;
    int cur = atomic_load(&s->n_inflight);
    do {
        if (cur >= limit) {
            openai_request_free(&j->rq);
            free(j);
            return strata_error_set(err, STRATA_E_QUEUE_FULL,
                                    "server busy: %d requests in flight (parallel %d + queue %d)",
                                    cur, s->p.parallel, s->p.queue);
        }
    } while (!atomic_compare_exchange_weak(&s->n_inflight, &cur, cur + 1));
    j->sink = sink;
    j->seq = -1;
    j->part = req->cache_partition;
    if (s->p.request_timeout > 0)
        j->t_deadline = strata_now() + s->p.request_timeout;
    atomic_init(&j->cancelled, false);
    openai_ctx_init(&j->oc, req->route, s->model_id, j->rq.stream_usage,
                    (uint64_t)time(NULL) << 24 ^ atomic_fetch_add(&s->id_counter, 1) * 2654435761u);
    out->job = j;
    sched_prep_submit(s, j);
    return 0;
}

static void op_cancel(void *self, struct gen_job *job) {
    (void)self;
    if (job && job->group)
        sched_group_cancel(job);
    else if (job)
        atomic_store(&job->cancelled, true);
}

static void op_release(void *self, struct gen_job *job) {
    (void)self;
    if (!job)
        return;
    sched_group_free(job); /* the children of n > 1 (after the last one's DONE) */
    job_clear(job);        /* no-op after DONE; safety for a job that never ran */
    free(job);
}

/* Decode tokens/s over the last RATE_WINDOW_S before now: from the oldest
 * sample inside the window to now, 0 when none is inside. */
static double recent_rate(const struct sched_stats_rec *r, double now) {
    for (int k = 1; k <= RATE_N; k++) {
        int i = (r->rate_head + k) % RATE_N; /* oldest first */
        if (r->rate_t[i] > 0 && now - r->rate_t[i] <= RATE_WINDOW_S && now > r->rate_t[i])
            return (double)(r->st.tokens_generated - r->rate_n[i]) / (now - r->rate_t[i]);
    }
    return 0.0;
}

static void op_stats(void *self, struct gen_stats *out) {
    struct sched *s = self;
    pthread_mutex_lock(&s->stats.mu);
    *out = s->stats.st;
    out->recent_tok_s = recent_rate(&s->stats, strata_now());
    pthread_mutex_unlock(&s->stats.mu);
}

static const struct gen_ops sched_ops = {op_submit, op_cancel, op_release, op_stats};
const struct gen_ops *sched_gen_ops(void) {
    return &sched_ops;
}

/* ---- life cycle ------------------------------------------------------------ */

/* /status: model path, quant mix (tensors and bytes per weight type, largest
 * first; more types than slots are summed into a last "other" slot) and KV
 * bytes. Also the compact "type:count,..." string of gen_stats.quant_mix.
 * Runs in sched_init before the scheduler thread starts: no lock needed. */
static void stats_model_facts(struct gen_stats *st, const struct model *m, const char *path,
                              const struct kv_params *kp) {
    snprintf(st->model_path, sizeof(st->model_path), "%s", path);
    struct model_weight_type wt[64];
    int n_wt = model_weight_types(m, wt, 64);
    if (n_wt > 64)
        n_wt = 64;
    size_t len = 0;
    st->quant_mix[0] = '\0';
    for (int i = 0; i < n_wt; i++) {
        int k = i < GEN_WEIGHT_TYPES_MAX - 1 ? i : GEN_WEIGHT_TYPES_MAX - 1;
        struct gen_weight_type *g = &st->weight_types[k];
        snprintf(g->type, sizeof(g->type), "%s",
                 n_wt > GEN_WEIGHT_TYPES_MAX && k == GEN_WEIGHT_TYPES_MAX - 1 ? "other"
                                                                              : wt[i].name);
        g->n_tensors += wt[i].n_tensors;
        g->n_bytes += wt[i].n_bytes;
        st->n_weight_types = k + 1;
        if (len < sizeof(st->quant_mix)) {
            int w = snprintf(st->quant_mix + len, sizeof(st->quant_mix) - len, "%s%s:%lld",
                             i ? "," : "", wt[i].name, (long long)wt[i].n_tensors);
            len += w > 0 ? (size_t)w : 0;
        }
    }
    st->kv_block_bytes = kv_block_bytes(kp);
}

int sched_plan(const struct sched_params *p, const struct model_hparams *hp, int n_batch_max,
               struct sched_plan *out, struct strata_error *err) {
    struct sched_plan pl = {0};
    /* context: as model_load resolves model_params.n_ctx_max */
    if (p->n_ctx > 0) {
        pl.n_ctx = p->n_ctx;
    } else {
        pl.n_ctx = hp->n_ctx_train < (1 << 20) ? hp->n_ctx_train : (1 << 20);
        snprintf(pl.ctx_rule, sizeof pl.ctx_rule, "the model's trained context%s",
                 hp->n_ctx_train > pl.n_ctx ? ", capped at 1048576" : "");
    }
    /* the step */
    pl.n_batch = p->n_batch > 0 ? p->n_batch : 512;
    if (pl.n_batch > n_batch_max) {
        snprintf(pl.batch_rule, sizeof pl.batch_rule,
                 "%d asked, capped at %d entries a forward pass", pl.n_batch, n_batch_max);
        pl.n_batch = n_batch_max;
    } else if (p->n_batch <= 0) {
        snprintf(pl.batch_rule, sizeof pl.batch_rule, "default 512 tokens a step");
    }
    pl.parallel = p->parallel > 0 ? p->parallel : 1;
    if (pl.n_batch < pl.parallel + 1) {
        const int lowered = pl.n_batch - 1 > 0 ? pl.n_batch - 1 : 1;
        snprintf(pl.parallel_rule, sizeof pl.parallel_rule,
                 "%d asked, lowered to batch - 1 so a step holds every stream", pl.parallel);
        pl.parallel = lowered;
    }
    /* the paged pool: --kv-mem bytes, or parallel full contexts */
    struct kv_params kp = {.n_layer = hp->n_layer,
                           .n_seq_max = pl.parallel,
                           .n_ctx = pl.n_ctx,
                           .n_embd_k = hp->n_head_kv * hp->head_dim_k,
                           .n_embd_v = hp->n_head_kv * hp->head_dim_v,
                           .n_block = p->kv_block > 0 ? p->kv_block : 16,
                           .n_head_kv = hp->n_head_kv};
    pl.n_block = kp.n_block;
    pl.block_bytes = kv_block_bytes(&kp);
    const int64_t per_seq = (pl.n_ctx + pl.n_block - 1) / pl.n_block;
    const int64_t full = per_seq * pl.parallel;
    if (p->kv_mem > 0) {
        pl.n_blocks = p->kv_mem / (int64_t)pl.block_bytes;
        if (pl.n_blocks < 1)
            return strata_error_set(err, STRATA_E_CONFIG,
                                    "kv-mem %lld bytes is less than one KV block (%llu bytes)",
                                    (long long)p->kv_mem, (unsigned long long)pl.block_bytes);
        snprintf(pl.kv_rule, sizeof pl.kv_rule, "%lld blocks of %llu bytes within %lld asked",
                 (long long)pl.n_blocks, (unsigned long long)pl.block_bytes, (long long)p->kv_mem);
    } else if (p->kv_mem_max > 0 && (uint64_t)full * pl.block_bytes > (uint64_t)p->kv_mem_max) {
        /* the default pool fills up over time with cached prefixes: keep it
         * within the memory budget's share */
        pl.n_blocks = p->kv_mem_max / (int64_t)pl.block_bytes;
        if (pl.n_blocks < 1)
            pl.n_blocks = 1;
        snprintf(pl.kv_rule, sizeof pl.kv_rule,
                 "%d full contexts would take %llu MiB: capped at half the memory budget, "
                 "%lld blocks of %llu bytes",
                 pl.parallel, (unsigned long long)((uint64_t)full * pl.block_bytes >> 20),
                 (long long)pl.n_blocks, (unsigned long long)pl.block_bytes);
    } else {
        pl.n_blocks = full;
        snprintf(pl.kv_rule, sizeof pl.kv_rule,
                 "parallel %d x context %d positions: %lld blocks of %llu bytes", pl.parallel,
                 pl.n_ctx, (long long)pl.n_blocks, (unsigned long long)pl.block_bytes);
    }
    if (pl.n_blocks > (1 << 30))
        pl.n_blocks = 1 << 30;
    pl.kv_bytes = (uint64_t)pl.n_blocks * pl.block_bytes;
    /* one session may never need more than the whole pool: admission relies on it */
    if (pl.n_blocks * pl.n_block < pl.n_ctx) {
        size_t n = strlen(pl.ctx_rule);
        snprintf(pl.ctx_rule + n, sizeof pl.ctx_rule - n, "%scut to the KV pool's %lld positions",
                 n ? ", " : "", (long long)(pl.n_blocks * pl.n_block));
        pl.n_ctx = (int)(pl.n_blocks * pl.n_block);
    }
    *out = pl;
    return 0;
}

const struct sched_plan *sched_get_plan(const struct sched *s) {
    return &s->plan;
}

void sched_template(const struct sched *s, const char **origin, const char **note) {
    const enum session_template_origin o = session_base_template_origin(s->sb);
    if (origin)
        *origin = o == SESSION_TEMPLATE_GGUF ? "gguf" : "chatml";
    if (note)
        *note = session_base_template_note(s->sb);
}

struct sched *sched_init(const struct sched_params *params, struct strata_error *err) {
    if (!params || !params->model_path || params->parallel < 1 || params->queue < 0) {
        strata_error_set(err, STRATA_E_INVALID, "sched: model path and parallel >= 1 required");
        return NULL;
    }
    struct sched *s = calloc(1, sizeof(*s));
    if (!s) {
        strata_error_set(err, STRATA_E_NOMEM, "out of memory");
        return NULL;
    }
    s->p = *params;
    if (!(s->p.profile_interval_s > 0))
        s->p.profile_interval_s = SCHED_PROFILE_INTERVAL_S;
    pthread_mutex_init(&s->mu, NULL);
    /* monotonic: the idle wait times out for a profile save (wait_work) */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->stats.mu, NULL);
    atomic_init(&s->n_inflight, 0);
    atomic_init(&s->n_prep, 0);
    atomic_init(&s->id_counter, 1);
    if (params->model_id && *params->model_id)
        snprintf(s->model_id, sizeof(s->model_id), "%s", params->model_id);
    else
        openai_model_id(params->model_path, s->model_id, sizeof(s->model_id));
    /* the one thread policy (sysinfo.h); `strata serve` resolved it already */
    struct sysinfo_threads th;
    if (sysinfo_threads(NULL, params->n_threads,
                        params->threads_source ? params->threads_source : "cli", NULL, &th,
                        err) < 0)
        goto fail;
    struct pool_params pp = pool_params_default();
    pp.n_threads = th.n_threads;
    pp.spin = params->pool_spin;
    if (!(s->pool = pool_init(&pp, err)))
        goto fail;
    /* --numa: bind the pool before the load, so the arena is first-touched
     * on the node that computes it (engine/model/model-numa.h) */
    if (sched_gpu_choose(s, params, err)) /* s->be: the Vulkan backend, or NULL */
        goto fail;
    /* with the GPU in use, --numa auto binds to the node local to it */
    const struct host_numa_pci gpci = {s->gpu->pci_domain, s->gpu->pci_bus, s->gpu->pci_device,
                                       s->gpu->pci_function};
    const int gpu_node = s->gpu->be && s->gpu->has_pci ? model_numa_gpu_node(&gpci) : -1;
    struct host_numa_report numa_rep;
    if (model_numa_prepare(params->model_path, params->numa, s->pool, gpu_node, NULL, &numa_rep,
                           err) < 0)
        goto fail;
    struct backend_cpu_params cp = backend_cpu_params_default();
    cp.pool = s->pool;
    sched_gpu_split(s, params, &cp);
    if (!s->be && !(s->be = backend_cpu_init(&cp, err)))
        goto fail;
    struct model_params mp = model_params_default();
    mp.backend = s->be;
    mp.pool = s->pool;
    mp.n_ctx_max = params->n_ctx;
    mp.prefault = params->prefault;
    mp.repack = params->repack;
    mp.mem_budget = params->mem_budget;
    mp.progress = params->progress;
    if (sched_xstore_plan(s, params, err))
        goto fail;
    mp.xstore = s->xs->on && !s->gpu->be ? &s->xs->params : NULL; /* a GPU holds every expert */
    s->model = model_load(params->model_path, &mp, err);
    if (!s->model && s->gpu->be) { /* out of device memory, a lost device: the CPU */
        sched_gpu_load_failed(s, err);
        strata_error_clear(err);
        if (!(s->be = backend_cpu_init(&cp, err)))
            goto fail;
        mp.backend = s->be;
        mp.xstore = s->xs->on ? &s->xs->params : NULL;
        s->model = model_load(params->model_path, &mp, err);
    }
    sched_xstore_loaded(s); /* the warm profile freed; the log line */
    if (!s->model)
        goto fail;
    if (model_numa_finish(s->model, s->pool, NULL, false, &numa_rep, err) < 0)
        goto fail;
    s->n_vocab = model_n_vocab(s->model);
    const struct model_hparams *hp = model_hparams(s->model);
    struct sched_params plp = *params; /* on the GPU the pool lives in device memory */
    const int64_t gpu_cap = sched_gpu_kv_cap(s);
    if (gpu_cap > 0 && (plp.kv_mem_max <= 0 || plp.kv_mem_max > gpu_cap))
        plp.kv_mem_max = gpu_cap;
    if (sched_plan(&plp, hp, model_n_batch_max(s->model), &s->plan, err) < 0)
        goto fail;
    s->n_batch = s->plan.n_batch;
    s->p.parallel = s->plan.parallel;
    struct kv_params kp = {.n_layer = hp->n_layer,
                           .n_seq_max = s->plan.parallel,
                           .n_ctx = model_n_ctx_max(s->model),
                           .n_embd_k = hp->n_head_kv * hp->head_dim_k,
                           .n_embd_v = hp->n_head_kv * hp->head_dim_v,
                           .n_block = s->plan.n_block,
                           .n_head_kv = hp->n_head_kv,
                           .n_blocks = (int)s->plan.n_blocks};
    if (!(s->kv = model_kv_init_params(s->model, &kp, err)))
        goto fail;
    kp = *kv_get_params(s->kv);
    s->n_block = kp.n_block;
    s->n_ctx = s->plan.n_ctx;
    if (params->prefix_cache && !(s->pc = prefix_init(s->kv, err)))
        goto fail;
    s->blk_tmp = malloc(((size_t)s->n_ctx / (size_t)kp.n_block + 1) * sizeof(*s->blk_tmp));
    if (!s->blk_tmp) {
        strata_error_set(err, STRATA_E_NOMEM, "out of memory");
        goto fail;
    }
    /* tokenizer and chat template (the GGUF's, ChatML when absent or unparsable) */
    struct session_base_params bp = session_base_params_default();
    bp.gguf = model_gguf(s->model);
    bp.n_vocab = s->n_vocab;
    bp.n_ctx = s->n_ctx;
    char *tmpl = NULL;
    const char *tf = params->chat_template_file;
    if (tf && *tf && !(tmpl = read_template(tf, err)))
        goto fail;
    bp.chat_template = tmpl;
    const bool tmpl_given = tmpl != NULL;
    s->sb = session_base_init(&bp, err);
    free(tmpl);
    if (!s->sb)
        goto fail;
    if (tmpl_given && session_base_template_origin(s->sb) != SESSION_TEMPLATE_GGUF) {
        strata_error_set(err, STRATA_E_CONFIG, "chat-template-file %s: %s", tf,
                         session_base_template_note(s->sb));
        goto fail;
    }
    s->logits = malloc((size_t)s->n_batch * (size_t)s->n_vocab * sizeof(float));
    s->entries = malloc((size_t)s->n_batch * sizeof(*s->entries));
    s->row_job = malloc((size_t)s->n_batch * sizeof(*s->row_job));
    s->smp_u = malloc((size_t)s->n_batch * sizeof(*s->smp_u));
    s->smp_ids = malloc((size_t)s->n_batch * sizeof(*s->smp_ids));
    s->seq_used = calloc((size_t)s->p.parallel, sizeof(bool));
    s->n_embd = hp->n_embd;
    s->pooling = hp->pooling_type;
    s->hidden = malloc((size_t)s->n_batch * (size_t)s->n_embd * sizeof(float));
    s->hid_rows = malloc((size_t)s->n_batch * sizeof(*s->hid_rows));
    s->hid_job = malloc((size_t)s->n_batch * sizeof(*s->hid_job));
    if (!s->logits || !s->entries || !s->row_job || !s->smp_u || !s->smp_ids || !s->seq_used ||
        !s->hidden || !s->hid_rows || !s->hid_job) {
        strata_error_set(err, STRATA_E_NOMEM, "sched: out of memory for %d x %d logits", s->n_batch,
                         s->n_vocab);
        goto fail;
    }
    /* warm-up: one forward step before saying ready (STYLE.md 16) */
    struct model_batch_entry e = {0, 0, session_base_warmup_token(s->sb), true};
    struct model_batch b = {&e, 1};
    if (model_forward(s->model, s->kv, &b, s->logits, err) < 0)
        goto fail;
    kv_seq_clear(s->kv, 0, NULL);
    /* after the warm-up: the profile counts served tokens only */
    if (sched_profile_start(s, err) < 0)
        goto fail;

    struct gen_stats *st = &s->stats.st;
    st->ready = true;
    snprintf(st->model_id, sizeof(st->model_id), "%s", s->model_id);
    snprintf(st->architecture, sizeof(st->architecture), "%s", model_arch_name(s->model));
    stats_model_facts(st, s->model, params->model_path, &kp);
    /* for /v1/models: the file's parameters (its header again, as --print-config
     * reads it: no weight is touched), size, modification time */
    struct model_probe mpr;
    if (model_probe(params->model_path, &mpr, NULL) == 0)
        st->n_params = (uint64_t)mpr.n_params;
    struct stat fst;
    if (stat(params->model_path, &fst) == 0) {
        st->file_bytes = (uint64_t)fst.st_size;
        st->file_mtime = (int64_t)fst.st_mtime;
    }
    st->n_ctx_train = hp->n_ctx_train;
    snprintf(st->isa, sizeof(st->isa), "%s", kernels_isa_name(kernels_isa_active()));
    snprintf(st->weights_layout, sizeof(st->weights_layout), "%s", model_weights_layout(s->model));
    st->weights_copied_bytes = model_copied_bytes(s->model);
    st->weights_packed_bytes = model_packed_bytes(s->model);
    st->n_ctx = s->n_ctx;
    st->n_threads = th.n_threads;
    snprintf(st->threads_source, sizeof(st->threads_source), "%s", th.source);
    st->kv_total = (int64_t)kp.n_blocks * kp.n_block;
    st->kv_block_size = kp.n_block;
    st->kv_blocks_total = kp.n_blocks;
    st->kv_blocks_free = kv_blocks_free(s->kv);
    sched_profile_stats(s, st);
    sched_xstore_stats(s, st);
    sched_gpu_stats(s, st);
    if (pthread_create(&s->thread, NULL, sched_thread, s) != 0) {
        strata_error_set(err, STRATA_E_INTERNAL, "sched: cannot start the scheduler thread");
        goto fail;
    }
    s->thread_started = true;
    if (sched_prep_start(s, err) < 0)
        goto fail;
    return s;
fail:
    sched_free(s);
    return NULL;
}

void sched_free(struct sched *s) {
    if (!s)
        return;
    sched_prep_stop(s); /* first: sets stop, its leftovers go to the scheduler to be ended */
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_signal(&s->cond);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    sched_profile_tick(s, strata_now(), true); /* shutdown (SIGTERM drain): the last counts */
    free(s->seq_used);
    sched_xstore_loaded(s);
    free(s->xs);
    free(s->gpu); /* its backend is s->be */
    free(s->blk_tmp);
    prefix_free(s->pc);
    free(s->hid_job);
    free(s->hid_rows);
    free(s->hidden);
    free(s->row_job);
    free(s->entries);
    free(s->logits);
    free(s->smp_u);
    free(s->smp_ids);
    session_base_free(s->sb);
    kv_free(s->kv);
    model_free(s->model);
    profile_free(s->profile); /* after the model, which counted into it */
    backend_free(s->be);
    pool_free(s->pool);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->stats.mu);
    free(s);
}
