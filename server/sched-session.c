/* server/sched-session.c: one generation job: its prompt (engine/session's
 * session_prompt), its session (sampling, detokenizing, stops, logprob
 * entries: session_step), and the events and OpenAI JSON it sends (see
 * sched.h). Runs on the scheduler thread, except job_tokenize (a prep
 * thread) and job_sample (possibly a pool worker). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/core/buf.h"
#include "engine/core/clock.h"
#include "server/sched-impl.h"

void job_emit(struct gen_job *j, const struct gen_event *ev) {
    j->sink.on_event(j->sink.ctx, ev);
}

void job_error(struct gen_job *j, int code, const char *msg, const char *param) {
    struct gen_event ev = {.type = GEN_EV_ERROR,
                           .error_code = code,
                           .error_message = msg,
                           .error_param = param && *param ? param : NULL};
    job_emit(j, &ev);
}

void job_clear(struct gen_job *j) {
    session_free(j->sess);
    openai_logprobs_free(j->lp);
    free(j->prompt);
    free(j->text);
    j->sess = NULL;
    j->lp = NULL;
    j->prompt = NULL;
    j->text = NULL;
    j->text_len = j->text_cap = 0;
    openai_request_free(&j->rq);
    sched_aux_clear(j);
}

void job_tokenize(const struct sched *s, struct gen_job *j) {
    if (j->aux) { /* embeddings, /tokenize, /detokenize */
        sched_aux_prep(s, j);
        return;
    }
    struct tokenizer_ids ids = {0};
    struct session_input in = {0};
    if (j->rq.route == GEN_ROUTE_CHAT)
        in.messages = j->rq.messages;
    else
        in = (struct session_input){.text = j->rq.prompt, .len = j->rq.prompt_len};
    int rc = session_prompt(s->sb, &in, &ids, &j->tok_err);
    if (rc < 0) {
        j->tok_rc = rc;
        return;
    }
    j->prompt = ids.ids;
    j->n_prompt = (int)ids.n;
    j->tok_rc = 0;
}

int job_prepare(struct sched *s, struct gen_job *j, struct strata_error *err, char *param,
                size_t param_cap) {
    const char *pname = j->rq.route == GEN_ROUTE_CHAT ? "messages" : "prompt";
    snprintf(param, param_cap, "%s", pname);
    int rc;
    if (!j->tokenized) /* cannot happen: sched_prep_stop sets stop first */
        return strata_error_set(err, STRATA_E_CANCELLED, "server shutting down");
    if (j->tok_rc < 0) {
        if (err)
            *err = j->tok_err;
        return j->tok_rc;
    }
    int64_t room = s->n_ctx - j->n_prompt;
    j->max_tokens = j->rq.max_tokens < 0 || j->rq.max_tokens > room ? room : j->rq.max_tokens;
    /* room for the generated tokens too: prompt[pos] is the KV history */
    int32_t *hist =
        realloc(j->prompt, ((size_t)j->n_prompt + (size_t)j->max_tokens + 1) * sizeof(*hist));
    if (!hist) {
        rc = strata_error_set(err, STRATA_E_NOMEM, "out of memory");
        goto fail;
    }
    j->prompt = hist;
    if (!j->rq.has_seed) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        j->rq.sp.seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
                        (atomic_fetch_add(&s->id_counter, 1) * 0x9e3779b97f4a7c15ull);
    }
    snprintf(param, param_cap, "%s", "");
    struct session_params sp = session_params_default();
    sp.sampler = j->rq.sp;
    sp.stops = (const char *const *)j->rq.stops;
    sp.n_stops = j->rq.n_stops;
    sp.logprobs = j->rq.logprobs;
    sp.strip_leading_space = false; /* generated text continues the prompt */
    j->sess = session_init(s->sb, &sp, err);
    if (!j->sess) {
        /* a bias token out of range; a stop sequence too long was refused by openai_parse */
        if (err && err->code == STRATA_E_RANGE && j->rq.sp.n_bias > 0)
            snprintf(param, param_cap, "%s", "logit_bias");
        rc = err && err->code ? err->code : STRATA_E_NOMEM;
        goto fail;
    }
    if (j->rq.logprobs && !(j->lp = openai_logprobs_init(j->rq.route))) {
        rc = strata_error_set(err, STRATA_E_NOMEM, "out of memory");
        goto fail;
    }
    if (j->rq.stream) {
        char *js = j->rq.route == GEN_ROUTE_CHAT ? openai_chunk_role(&j->oc) : NULL;
        if (j->rq.route == GEN_ROUTE_CHAT && !js) {
            rc = strata_error_set(err, STRATA_E_NOMEM, "out of memory");
            goto fail;
        }
        if (js) {
            struct gen_event ev = {.type = GEN_EV_ROLE, .json = js, .json_len = strlen(js)};
            job_emit(j, &ev);
            free(js);
        }
    }
    return 0;
fail:
    return rc < 0 ? rc : STRATA_E_INTERNAL;
}

/* Text released by the session: a DELTA chunk (stream) or appended (the
 * non-stream body; a DELTA event without JSON still counts the tokens).
 * force: send a chunk without text when logprobs wait to go out (the last
 * chunk before FINISH). */
static void emit_text(struct gen_job *j, const char *text, size_t len, bool force) {
    if (!j->rq.stream) {
        /* out of memory: the response loses text rather than the server crashing */
        if (len)
            strata_append(&j->text, &j->text_len, &j->text_cap, text, len);
        if (j->n_unsent) {
            struct gen_event ev = {.type = GEN_EV_DELTA, .n_tokens = j->n_unsent};
            job_emit(j, &ev);
            j->n_unsent = 0;
        }
        return;
    }
    if (len == 0 && !(force && !openai_logprobs_empty(j->lp)))
        return;
    char *js = openai_chunk_delta(&j->oc, text, len, j->lp);
    if (j->lp)
        openai_logprobs_clear(j->lp);
    if (!js)
        return;
    struct gen_event ev = {.type = GEN_EV_DELTA,
                           .json = js,
                           .json_len = strlen(js),
                           .n_tokens = j->n_unsent > 0 ? j->n_unsent : 1};
    job_emit(j, &ev);
    j->n_unsent = 0;
    free(js);
}

static struct openai_timings job_timings(const struct gen_job *j) {
    const double first = j->n_gen > 0 ? j->t_first : j->t_admit;
    return (struct openai_timings){
        .cache_n = j->n_cached,
        .prompt_n = j->n_prompt - j->n_cached,
        .predicted_n = j->n_gen,
        .queued_ms = (j->t_admit - j->t_submit) * 1e3,
        .prompt_ms = (first - j->t_admit) * 1e3,
        .predicted_ms = j->n_gen > 1 ? (j->t_last - j->t_first) * 1e3 : 0.0,
    };
}

/* The last text (d: the session's final delta), then FINISH and USAGE. */
static void finish(struct gen_job *j, const struct session_delta *d, const char *reason) {
    emit_text(j, d->text, d->len, true);
    j->finish_reason = reason;
    struct openai_usage u = {j->n_prompt, j->n_gen, j->n_cached};
    const struct openai_timings t = job_timings(j);
    char *js = j->rq.stream ? openai_chunk_finish(&j->oc, reason, &t) : NULL;
    struct gen_event ev = {.type = GEN_EV_FINISH,
                           .json = js,
                           .json_len = js ? strlen(js) : 0,
                           .finish_reason = reason};
    job_emit(j, &ev);
    free(js);
    js = j->rq.stream_usage ? openai_chunk_usage(&j->oc, &u) : NULL;
    ev = (struct gen_event){.type = GEN_EV_USAGE,
                            .json = js,
                            .json_len = js ? strlen(js) : 0,
                            .n_prompt_tokens = u.prompt_tokens,
                            .n_completion_tokens = u.completion_tokens,
                            .n_cached_tokens = u.cached_tokens};
    job_emit(j, &ev);
    free(js);
}

/* Body of a non-stream response, built at the end (DONE carries it). */
char *job_response(struct gen_job *j, const char *reason) {
    struct openai_usage u = {j->n_prompt, j->n_gen, j->n_cached};
    const struct openai_timings t = job_timings(j);
    return openai_response(&j->oc, j->text ? j->text : "", j->text_len, reason, j->lp, &u, &t);
}

void job_sample(struct gen_job *j, const float *logits) {
    j->pick_err.code = 0;
    j->pick_rc = session_sample(j->sess, logits, &j->pick, &j->pick_err);
}

bool job_on_logits(struct sched *s, struct gen_job *j) {
    struct session_delta d;
    if (j->pick_rc < 0 || session_step(j->sess, &j->pick, &d, &j->pick_err) < 0) {
        job_error(j, j->pick_err.code, j->pick_err.message, NULL);
        j->finish_reason = NULL;
        return true;
    }
    j->n_gen++;
    j->n_unsent++;
    j->last = j->pick.token;
    s->tokens_generated++;
    j->t_last = strata_now();
    if (j->n_gen == 1)
        j->t_first = j->t_last;
    if (d.logprob)
        openai_logprobs_add(j->lp, d.logprob, j->rq.top_logprobs);
    if (d.stop) { /* an EOG token or a stop sequence: finish_reason "stop" */
        finish(j, &d, "stop");
        return true;
    }
    if (d.len)
        emit_text(j, d.text, d.len, false);
    else if (!j->rq.stream)
        emit_text(j, "", 0, false);
    if (j->n_gen >= j->max_tokens || j->n_past + 1 >= s->n_ctx) {
        session_flush(j->sess, &d); /* text that completes a stop here still says "stop" */
        finish(j, &d, d.stop ? "stop" : "length");
        return true;
    }
    return false;
}
